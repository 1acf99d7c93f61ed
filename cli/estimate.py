"""`tpopt estimate MODEL --hw H`: parameters, FLOPs per token, memory per card across ZeRO x offload x
recompute, and the fastest layout's step time at a card count. Parsing and rendering only: the figures are
:func:`tpopt.optimizer.estimate.estimate`."""

from __future__ import annotations

import textwrap
from typing import Any

import click

from tpopt.cli.common import dump_json, handle_errors
from tpopt.errors import InputError
from tpopt.models.units import parse_number
from tpopt.optimizer.estimate import DP_OFFLOADS, OFFLOADS, RECOMPUTES, ZERO_STAGES, EstimateInputs
from tpopt.optimizer.estimate import estimate as run
from tpopt.presentation import counted, footing_lines

WIDTH = 80
RECOMPUTE_LABEL = {"none": "none", "attn": "attn", "full": "full"}


@click.command()
@click.argument("model")
@click.option("--hw", required=True, help="Accelerator (tpopt catalog accelerators), e.g. h100-sxm.")
@click.option("--cards", type=int, help="Card count [default: the fewest hosts (1, 2, 4, ...) on which a layout fits].")
@click.option("--seq-len", type=int, default=4096, show_default=True, help="Tokens per sequence.")
@click.option("--batch", "global_batch", type=int,
              help="Global batch in sequences [default: round(4,194,304 tokens / seq-len)].")
@click.option("--efficiency", help="Flat step-time model at this MFU (e.g. 40%) instead of the per-operation model.")
@click.option("--catalog", "catalog_dirs", multiple=True, type=click.Path(file_okay=False),
              help="Extra catalog directory (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@handle_errors
def estimate(model: str, hw: str, cards: int | None, seq_len: int, global_batch: int | None, efficiency: str | None,
             catalog_dirs: tuple[str, ...], as_json: bool) -> None:
    """Quick estimate for MODEL (a catalog model, a Hugging Face id from the local cache, or a config.json):
    parameters, FLOPs per token, memory per card across ZeRO 0-3 x offload x recompute, and the step time of
    the fastest layout at the card count.

    Example: tpopt estimate llama3-70b --hw h100-sxm --cards 64
    """
    eff = None
    if efficiency is not None:
        text = str(efficiency).strip()
        eff = parse_number(text[:-1], "--efficiency") / 100 if text.endswith("%") else \
            parse_number(text, "--efficiency")
        if not 0 < eff <= 1:
            raise InputError(f"--efficiency: {efficiency!r} must be a fraction in (0, 1] or a percentage")
    hw = hw.strip()
    if "," in hw:
        raise InputError("--hw: an estimate takes one accelerator")
    d = run(EstimateInputs(model=model, accelerator=hw, cards=cards, seq_len=seq_len, global_batch=global_batch,
                           efficiency=eff, catalog_dirs=tuple(catalog_dirs)))
    click.echo(dump_json(d) if as_json else estimate_text(d), nl=False)


def _g(x: float) -> str:
    """Billions with two decimals."""
    return f"{x / 1e9:,.2f} B"


def pure_dp_lines(p: dict[str, Any], usable_gib: float) -> list[str]:
    """The pure data-parallel model-states table (DeepSpeed's / accelerate's convention), labelled."""
    b = p["bytes_per_param"]
    lines = ["", f"Model states per card, GiB, at pure data parallelism (DP {p['dp']:,}, TP = PP = CP = 1), as "
             f"DeepSpeed's and accelerate's estimators count them: {p['parameters']:,} parameters x (weights "
             f"{b['weights']:g} + grads {b['grads']:g} + Adam {b['optimizer']:g} B), sharded by ZeRO; "
             f"activations and buffers excluded (! = states alone exceed the usable {usable_gib:.1f} GiB):",
             f"{'offload:':<22}" + "".join(f"{off:>16}  " for off in DP_OFFLOADS)]
    for r in p["rows"]:
        cells = "".join(f"{'-':>16}  " if r[off] is None else
                        f"{r[off]:>16,.1f}{' !' if r[off] > usable_gib else '  '}" for off in DP_OFFLOADS)
        lines.append(f"{'ZeRO-' + str(r['zero_stage']):<22}{cells}")
    return lines


def estimate_text(d: dict[str, Any]) -> str:
    """The estimate as text: model, task, fastest layout, memory table, assumptions."""
    m, a, t = d["model"], d["accelerator"], d["task"]
    lines = [f"Model: {m['name']}: {_g(m['parameters'])} parameters"
             + (f", {_g(m['active_parameters'])} active per token (MoE)" if m["moe"] else " (dense)"),
             f"FLOPs per token: {m['flops_per_token'] / 1e9:,.1f} GFLOP at {t['seq_len']:,} tokens "
             f"(attention {m['attention_flops_per_token'] / 1e9:,.1f} GFLOP of it)",
             f"  convention: {m['flops_convention']}",
             f"Task: {t['global_batch']:,} sequences x {t['seq_len']:,} tokens = {t['tokens_per_step']:,} tokens per "
             f"step ({t['batch_source']}), {t['precision']}",
             f"Hardware: {a['name']} x {d['cards']:,} ({d['cards_source']}); usable {a['usable_memory_gib']:.1f} GiB "
             f"per card ({a['usable_memory_source']}); step-time model {d['step_model']}"]
    f = d["fastest"]
    if f is None:
        lines.append(f"Fastest layout on {counted(d['cards'], 'card')}: none fits (memory per card or the layout "
                     "rules: whole hosts, TP within a host, heads and layers divisible, batch divisible by DP x "
                     "micro-batch)")
    else:
        p = f["plan"]
        lay = f"TP {p['tp']} / CP {p['cp']} / PP {p['pp']} / DP {p['dp']}" + (
            f" / EP {p['ep']}" if p.get("ep") else "")
        lines.append(f"Fastest layout on {counted(p['cards'], 'card')} ({counted(p['hosts'], 'host')}): {lay}, "
                     f"micro-batch {p['micro_batch']} x {p['grad_accum']}, ZeRO-{p['zero_stage']}, offload "
                     f"{p['offload']}, recompute {p['recompute']}")
        lines.append(f"  step {f['step_s']:,.2f} s | {f['tokens_per_s']:,.0f} tokens/s "
                     f"({f['tokens_per_s_per_card']:,.0f} per card) | implied MFU {f['implied_mfu'] * 100:.1f} % "
                     f"of {f['peak_flops'] / 1e12:,.0f} TFLOP/s dense BF16 | {f['memory_per_card_gib']:.1f} GiB "
                     "per card")
    lay = d["memory_layout"]
    lines += ["", f"Memory per card, GiB (* fits the usable {a['usable_memory_gib']:.1f} GiB), at TP {lay['tp']} / "
              f"CP {lay['cp']} / PP {lay['pp']} / DP {lay['dp']}, micro-batch {lay['micro_batch']} "
              f"({lay['source']}):"]
    cells = {(r["zero_stage"], r["offload"], r["recompute"]): r for r in d["memory_table"]}
    head = f"{'':<22}" + "".join(f"{'recompute ' + RECOMPUTE_LABEL[rc]:>18}" for rc in RECOMPUTES)
    lines.append(head)
    for z in ZERO_STAGES:
        for off in OFFLOADS:
            label = f"ZeRO-{z}" + (" + CPU offload" if off == "cpu" else "")
            row = "".join(f"{cells[(z, off, rc)]['memory_per_card_gib']:>16,.1f}"
                          f"{' *' if cells[(z, off, rc)]['fits'] else '  '}" for rc in RECOMPUTES)
            lines.append(f"{label:<22}{row}")
    lines += pure_dp_lines(d["pure_dp_states"], a["usable_memory_gib"])
    s = d["search"]
    lines += ["", *footing_lines(d["footing"], WIDTH)]
    lines += ["", "Assumptions: attn = core-attention recompute (Megatron-LM's selective); CPU offload moves the "
              "optimizer states (master weights and moments) to host memory;",
              f"  layouts searched: TP {s['tp']}, CP {s['cp']}, PP {s['pp']}, micro-batch {s['micro_batch']}, "
              f"schedule {', '.join(s['schedule'])}; fastest = least step time at the card count "
              "(deadline, budget and input pipeline not enforced).",
              "  Same figures as tpopt evaluate on scenario_tables (tpopt estimate --json)."]
    out: list[str] = []
    for line in lines:  # at most 80 columns (the table rows are 76)
        indent = " " * (len(line) - len(line.lstrip()))
        out += textwrap.wrap(line, WIDTH, subsequent_indent=indent + "  ", break_on_hyphens=False) or [""]
    return "\n".join(out) + "\n"
