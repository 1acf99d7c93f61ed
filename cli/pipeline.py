"""``tpopt pipeline``: simulate one pipeline-parallel training step under a schedule (chapter 10.3.2).

Thin: parse units once, call :func:`tpopt.models.pipeline.simulate`, print a summary, JSON or a
timeline plot (:mod:`tpopt.cli.pipeline_plot`). Example (training-systems chapter 10.3, 347 ms)::

    tpopt pipeline --schedule 1f1b -p 4 -m 8 --forward 10ms --backward 20ms --transfer 1ms --update 1ms
"""

from __future__ import annotations

from typing import Any

import click

from tpopt.cli.common import dump_json, handle_errors
from tpopt.cli.pipeline_plot import check_path, plot_timeline
from tpopt.errors import InputError
from tpopt.models import pipeline as pl
from tpopt.models.units import MIB, fmt_duration, parse_bytes, parse_duration, parse_int

MAX_STAGES = 4096  # -p
MAX_MICROBATCHES = 65536  # -m
MAX_CHUNKS = 64  # -v
MAX_SLOTS = 262_144  # p x m (x v): at 1,048,576 slots one simulated step took ~55 s and 1 GB (2-core machine)


def _durations(text: str | None, what: str, p: int, default: str | None = None) -> list[float]:
    """One duration for every stage (``10ms``) or one per stage (``10ms,12ms,10ms,11ms``)."""
    if text is None:
        if default is None:
            raise InputError(f"{what} is required, e.g. {what} 10ms")
        text = default
    parts = [x.strip() for x in str(text).split(",")]
    vals = [parse_duration(x, what) for x in parts]
    if len(vals) not in (1, p):
        raise InputError(f"{what}: give one duration or one per stage ({p}), got {len(vals)}")
    return vals * p if len(vals) == 1 else vals


def _sizes(text: str | None, what: str, p: int) -> list[float]:
    if text is None:
        return [0.0] * p
    vals = [parse_bytes(x.strip(), what) for x in str(text).split(",")]
    if len(vals) not in (1, p):
        raise InputError(f"{what}: give one size or one per stage ({p}), got {len(vals)}")
    return vals * p if len(vals) == 1 else vals


def _chunk_layers(text: str | None, layers: str | None, p: int, v: int, schedule: str) -> list[int] | None:
    if text is None and layers is None:
        return None
    if schedule != "interleaved":
        raise InputError("--layers / --chunk-layers apply to --schedule interleaved only")
    if text is not None:
        return [parse_int(x.strip(), "--chunk-layers", minimum=1) for x in str(text).split(",")]
    return pl.split_layers(parse_int(layers, "--layers", minimum=1), v * p)


def run(*, schedule: str, p: str | int, m: str | int, forward: str | None, backward: str | None,
        backward_weight: str | None = None, split_backward: bool = False, transfer: str = "0ms",
        transfer_backward: str | None = None, update: str = "0ms", chunks: str | int = "2", layers: str | None = None,
        chunk_layers: str | None = None, activation: str | None = None,
        buffer: str | None = None) -> tuple[dict[str, Any], pl.PipelineResult]:
    """Parse the command-line strings and simulate; returns ``(inputs dict, PipelineResult)``."""
    if schedule not in pl.SCHEDULES:
        raise InputError(f"--schedule: unknown schedule {schedule!r} (use one of: {', '.join(pl.SCHEDULES)})")
    p = parse_int(p, "-p/--stages", minimum=1, maximum=MAX_STAGES)
    m = parse_int(m, "-m/--microbatches", minimum=1, maximum=MAX_MICROBATCHES)
    v = parse_int(chunks, "-v/--chunks", minimum=1, maximum=MAX_CHUNKS)
    slots = p * m * (v if schedule == "interleaved" else 1)
    if slots > MAX_SLOTS:
        raise InputError(f"-p x -m{' x -v' if schedule == 'interleaved' else ''} = {slots:,} stage slots, above the "
                         f"bound of {MAX_SLOTS:,} (the event list grows with it)")
    fwd = _durations(forward, "--forward", p)
    bwd = _durations(backward, "--backward", p)
    if backward_weight is not None and split_backward:
        raise InputError("give either --split-backward or --backward-weight, not both")
    if split_backward:
        bw = [b / 2 for b in bwd]
    elif backward_weight is not None:
        bw = _durations(backward_weight, "--backward-weight", p)
    else:
        bw = [0.0] * p
    for b, w in zip(bwd, bw, strict=False):
        if w > b:
            raise InputError(f"--backward-weight ({fmt_duration(w)}) cannot exceed --backward ({fmt_duration(b)})")
    bx = [b - w for b, w in zip(bwd, bw, strict=False)]
    tf = parse_duration(transfer, "--transfer")
    tb = None if transfer_backward is None else parse_duration(transfer_backward, "--transfer-backward")
    upd = _durations(update, "--update", p, default="0ms")
    cl = _chunk_layers(chunk_layers, layers, p, v, schedule)
    act = _sizes(activation, "--activation", p)
    buf = parse_bytes(buffer, "--buffer") if buffer is not None else 0.0
    result = pl.simulate(schedule, p, m, fwd, bx, bw, tf, upd, v=v, chunk_layers=cl, transfer_backward=tb,
                         activation=act, buffer=buf)
    inputs = {
        "forward_s": fwd,
        "backward_input_s": bx,
        "backward_weight_s": bw,
        "transfer_s": tf,
        "transfer_backward_s": tf if tb is None else tb,
        "update_s": upd,
        "chunk_layers": cl,
        "activation_bytes": act,
        "buffer_bytes": buf,
    }
    return inputs, result


def _ms(x: float) -> str:
    return f"{x * 1e3:,.1f} ms"


def _mib(x: float) -> str:
    return f"{x / MIB:,.0f} MiB"


def summary(inputs: dict[str, Any], r: pl.PipelineResult) -> str:
    """The text summary: completion, per-stage busy/idle, bubble, messages, peaks."""
    lines = []
    shape = f"p = {r.p} stages, m = {r.m} micro-batches"
    if r.schedule == "interleaved":
        shape += f", v = {r.v} chunks per stage"
        if inputs["chunk_layers"]:
            shape += f" (layers {','.join(str(x) for x in inputs['chunk_layers'])})"
    lines.append(f"schedule {r.schedule}: {shape}")
    if r.schedule == "dualpipe":
        lines.append("  slot rule: " + pl.DUALPIPE_RULE)
    split = r.schedule in pl.SPLIT_BACKWARD
    if split and not any(inputs["backward_weight_s"]):
        lines.append("  note: backward not split (dW = 0): the dW slots are empty; use --split-backward "
                     "or --backward-weight")
    lines.append(f"completion      {_ms(r.completion)}")
    lines.append(f"bubble fraction {r.bubble_fraction * 100:.1f} % of p x completion "
                 f"(mean idle {_ms(sum(r.idle) / r.p)} per stage)")
    lines.append(f"messages        {r.forward_messages} forward, {r.messages} in total")
    if r.parameter_copies > 1:
        lines.append(f"parameters      {r.parameter_copies} copies per stage (one per direction)")
    mem = any(inputs["activation_bytes"]) or inputs["buffer_bytes"]
    head = f"{'stage':>5}  {'busy':>11}  {'idle':>11}  {'peak sets':>9}"
    if mem:
        head += f"  {'peak memory':>12}"
    lines.append(head)
    for s in range(r.p):
        row = f"{s:>5}  {_ms(r.busy[s]):>11}  {_ms(r.idle[s]):>11}  {r.peak_inflight[s]:>9.3g}"
        if mem:
            row += f"  {_mib(r.peak_bytes[s]):>12}"
        lines.append(row)
    return "\n".join(lines) + "\n"


def _event_table(r: pl.PipelineResult) -> str:
    out = [f"{'stage':>5}  {'op':<8}  {'start':>11}  {'end':>11}"]
    for e in r.events:
        out.append(f"{e.stage:>5}  {e.label():<8}  {_ms(e.start):>11}  {_ms(e.end):>11}")
    return "\n".join(out) + "\n"


@click.command("pipeline")
@click.option("--schedule", "-s", default="1f1b", show_default=True,
              help="Schedule: " + ", ".join(pl.SCHEDULES) + ".")
@click.option("-p", "--stages", "p", default="4", show_default=True, help="Pipeline stages.")
@click.option("-m", "--microbatches", "m", default="8", show_default=True, help="Micro-batches per step.")
@click.option("--forward", help="Forward time per micro-batch and stage, e.g. 10ms (or one per stage: 10ms,12ms,...).")
@click.option("--backward", help="Whole backward time (dX + dW) per micro-batch and stage, e.g. 20ms.")
@click.option("--backward-weight", help="The dW part of --backward, e.g. 10ms (dX is the rest).")
@click.option("--split-backward", is_flag=True, help="Split the backward in equal halves dX = dW.")
@click.option("--transfer", default="0ms", show_default=True, help="Boundary transfer of an activation.")
@click.option("--transfer-backward", help="Boundary transfer of a gradient (default: --transfer).")
@click.option("--update", default="0ms", show_default=True, help="Optimizer update per stage.")
@click.option("-v", "--chunks", default="2", show_default=True, help="Interleaved: chunks per stage.")
@click.option("--layers", help="Interleaved: model layers, split into v x p chunks (first chunks one larger).")
@click.option("--chunk-layers", help="Interleaved: layers per chunk in path order, e.g. 5,5,5,5,4,4,4,4.")
@click.option("--activation", help="Activations of one micro-batch on one stage, e.g. 230MiB (or one per stage).")
@click.option("--buffer", help="One send/receive buffer (a boundary tensor), e.g. 1MiB.")
@click.option("--json", "as_json", is_flag=True, help="Print deterministic JSON instead of the summary.")
@click.option("--events", "with_events", is_flag=True, help="Also list every operation (and in the JSON).")
@click.option("--plot", "plot_path", help="Write a per-stage timeline: timeline.pdf, .svg or .png.")
@click.option("--force", is_flag=True, help="Overwrite --plot if the file exists.")
@handle_errors
def pipeline(schedule: str, p: str, m: str, forward: str | None, backward: str | None, backward_weight: str | None,
             split_backward: bool, transfer: str, transfer_backward: str | None, update: str, chunks: str,
             layers: str | None, chunk_layers: str | None, activation: str | None, buffer: str | None, as_json: bool,
             with_events: bool, plot_path: str | None, force: bool) -> None:
    """Simulate one pipeline-parallel step (event model of chapter 10.3.2)."""
    if plot_path is not None:
        check_path(plot_path, force)
    inputs, result = run(schedule=schedule, p=p, m=m, forward=forward, backward=backward,
                         backward_weight=backward_weight, split_backward=split_backward, transfer=transfer,
                         transfer_backward=transfer_backward, update=update, chunks=chunks, layers=layers,
                         chunk_layers=chunk_layers, activation=activation, buffer=buffer)
    if plot_path is not None:
        plot_timeline(result, plot_path)
    if as_json:
        doc = {"inputs": inputs}
        doc.update(result.as_dict(events=with_events))
        click.echo(dump_json(doc), nl=False)
        return
    text = summary(inputs, result)
    if with_events:
        text += _event_table(result)
    if plot_path is not None:
        text += f"timeline written to {plot_path}\n"
    click.echo(text, nl=False)
