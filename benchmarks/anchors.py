"""Public anchors: tpopt's per-operation model against published large training runs. A check, not a fit.

Each anchor is a published run: the model, the accelerator, the layout and batch the authors state,
and one published figure (throughput per GPU, MFU, iteration time or GPU-hours). tpopt evaluates the
stated plan with the shipped catalogs (no calibration to these runs: only the A100's GEMM, memory and
kernel-overhead parameters were ever fitted, on the Megatron-LM tables of validate_published.py; the other
cards carry priors). Knobs the source does not state (recompute set, virtual stages, micro-batch) are
tpopt's choice: the fastest combination that fits in memory, as in validate_published.py; the table also
prints the slowest combination that fits, so the reader sees how much the unstated knobs matter.

Figures are converted to the source's own counting convention before comparing:
  model TFLOP/s    6 x GEMM parameters + causal attention per token (the chapter's count) x tokens / (step x GPUs)
  Megatron TFLOP/s 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) / (step x GPUs): Narayanan et al. 2021's count,
                   which includes the recomputed forward (BigScience logged BLOOM with it)
  MFU              model TFLOP/s over the BF16 dense peak
  GPU-hours        iterations x step x GPUs, steady state (no checkpoint, failure or ramp-up time)
"speed" is tpopt's predicted speed over the published one (> 1: tpopt is optimistic).

    .venv/bin/python benchmarks/anchors.py [--only NAME]
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

import tpopt  # noqa: E402
from tpopt.models.arch import flops_per_token  # noqa: E402
from tpopt.models.evaluate import SPEC, evaluate  # noqa: E402
from tpopt.models.plan import Plan  # noqa: E402
from tpopt.optimizer.runs import megatron_flops  # noqa: E402


@dataclass
class Anchor:
    name: str
    source: str  # the publication (title) and where in it
    metric: str  # model_tflops | megatron_tflops | mfu | iteration_s | gpu_hours
    published: float
    scenario: object  # a mapping of scenario tables, or a scenario file under the repository
    plan: dict  # the stated plan
    open: dict = field(default_factory=dict)  # unstated knobs: plan field -> values tpopt chooses among
    notes: str = ""


def task(model, acc, seq, batch, precision="bf16-mixed", hardware=None, memory=None, comm=None, moe=None,
         tokens="1T"):
    d = {"model": {"name": model}, "task": {"tokens": tokens, "seq_len": seq, "global_batch": batch,
                                           "precision": precision},
         "schedule": {"deadline": "3650d"}, "hardware": {"accelerator": [acc], **(hardware or {})},
         "search": {"max_cards": 1_000_000}}
    for k, v in (("memory", memory), ("comm", comm), ("moe", moe)):
        if v:
            d[k] = v
    return d


NO_FLASH_2022 = {"flash_attention": False, "sequence_parallel": False}  # 2021-22 stacks

ANCHORS = [
    *(Anchor(f"llama3-405b {cards:,} H100", "The Llama 3 Herd of Models (2024), Table 4: TP8 CP1 PP16 "
             f"DP{cards // 128}, 8,192-token sequences, 16M tokens a batch, {tflops:.0f} TFLOP/s per GPU "
             f"({mfu} % BF16 MFU)", "model_tflops", tflops,
             task("llama3-405b", "h100-sxm", 8192, 2048),
             dict(accelerator="h100-sxm", cards=cards, tp=8, pp=16, zero_stage=2, micro_batch=1,
                  first_stage_layers=7, last_stage_layers=7),
             {"recompute": ["none", "norm+mlp", "full"],
              "schedule": ["1f1b"] + [f"interleaved:{v}" for v in range(2, 8)]},
             "FSDP sharding optimizer state and gradients, not weights (ZeRO-2); one layer fewer on the first and "
             "last stages (section 3.3.2); 8 x 400 Gbit/s RoCE per host; Meta's FLOP count taken as tpopt's")
      for cards, tflops, mfu in ((8192, 430.0, 43), (16384, 400.0, 41))),
    Anchor("bloom-176b 384 A100", "BigScience tr11-176B-ml training README: TP4 PP12 DP8, MBS 2, GBS 2,048, BF16, "
           "ZeRO-1, activation checkpointing; 104.70 s per iteration (logged 149.77 TFLOP/s)", "iteration_s", 104.70,
           task("bloom-176b", "a100-80gb-sxm", 2048, 2048, "bf16-mixed-fp32-grad",
                hardware={"nic": "100g", "nics_per_host": 4}, memory={**NO_FLASH_2022, "dropout": True}),
           dict(accelerator="a100-80gb-sxm", cards=384, tp=4, pp=12, zero_stage=1, micro_batch=2, recompute="full",
                first_stage_layers=5, last_stage_layers=5),
           {}, "DeepSpeed's 1F1B pipeline with the embeddings as pipeline layers (5 blocks on the end stages), "
           "BF16 optimizer accumulating FP32 gradients, dropout 0.1, 4 x 100 Gbit/s Omni-Path per node"),
    Anchor("opt-175b 992 A100", "OPT: Open Pre-trained Transformer Language Models (2022), section 2.4: 992 A100 80GB, "
           "FSDP + Megatron TP, up to 147 TFLOP/s per GPU", "megatron_tflops", 147.0,
           task("opt-175b", "a100-80gb-sxm", 2048, 992, "fp16-mixed", memory={**NO_FLASH_2022, "dropout": True}),
           dict(accelerator="a100-80gb-sxm", cards=992, tp=8, pp=1, zero_stage=3, recompute="full"),
           {"micro_batch": [1, 2, 4, 8]},
           "TP8 inside a host, FSDP (ZeRO-3) over 124 hosts, FP16, dropout 0.1, about 2M tokens a batch "
           "(992 x 2,048); the paper does not say how it counts FLOPs (compared as hardware FLOPs incl. "
           "recompute, the Megatron count; as model FLOPs tpopt's speed would be 3/4 of the printed one)"),
    Anchor("megascale-175b 12,288 A100", "MegaScale: Scaling Large Language Model Training to More Than 10,000 GPUs "
           "(NSDI 2024), abstract: 55.2 % MFU for a 175B model on 12,288 GPUs", "mfu", 0.552,
           task("gpt3-175b", "a100-80gb-sxm", 2048, 6144, comm={"tp_overlap": True}),
           dict(accelerator="a100-80gb-sxm", cards=12288, tp=8, pp=8, zero_stage=1, micro_batch=1),
           {"recompute": ["none", "norm+mlp", "full"], "schedule": ["interleaved:2", "interleaved:3", "interleaved:6"]},
           "layout assumed (TP8 PP8 DP192, 2,048 x 6,144 sequences, interleaved); MegaScale overlaps TP and DP "
           "traffic with compute and changes the block (parallel attention + MLP, sliding window), which tpopt "
           "does not model: GPT-3 175B with TP overlap"),
    Anchor("megatron-lm-175b 12,288 A100", "MegaScale (NSDI 2024), abstract: 1.34x the MFU of Megatron-LM "
           "(55.2 % / 1.34 = 41.2 %)", "mfu", 0.552 / 1.34,
           task("gpt3-175b", "a100-80gb-sxm", 2048, 6144),
           dict(accelerator="a100-80gb-sxm", cards=12288, tp=8, pp=8, zero_stage=1, micro_batch=1),
           {"recompute": ["none", "norm+mlp", "full"], "schedule": ["interleaved:2", "interleaved:3", "interleaved:6"]},
           "the same assumed layout without TP overlap"),
    Anchor("deepseek-v3 2,048 H800", "DeepSeek-V3 Technical Report (2024), Table 1: 2,664K H800 GPU-hours of "
           "pre-training on 14.8T tokens (2,788K with context extension and post-training)", "gpu_hours", 2.664e6,
           "examples/deepseek-v3.toml",
           dict(accelerator="h800", cards=2048, tp=1, pp=16, ep=64, zero_stage=1, micro_batch=1, schedule="dualpipe",
                save_mode="async"),
           {"recompute": ["none", "norm", "norm+mlp", "full"]},
           "PP16 DualPipe, EP64 over 8 hosts, ZeRO-1, FP8, batch 15,360 x 4,096 (its ramp-up from 3,072 is not "
           "modelled); DeepSeek's recompute of MLA up-projections and FP8 activation caches is not a tpopt "
           "recompute set, so only full recompute fits"),
]


def scenario_of(anchor: Anchor):
    if isinstance(anchor.scenario, str):
        return tpopt.scenario(str(ROOT / anchor.scenario))
    return tpopt.scenario(anchor.scenario)


def metric(anchor: Anchor, sc, plan: Plan, m: dict) -> float:
    a, s, B = sc.model, sc.task.seq_len, sc.task.global_batch
    step = m["step_s"]
    if anchor.metric in ("model_tflops", "mfu"):
        tf = flops_per_token(a, s) * B * s / (step * plan.cards) / 1e12
        return tf if anchor.metric == "model_tflops" else tf * 1e12 / sc.system(plan.accelerator).acc.peak_flops
    if anchor.metric == "megatron_tflops":
        return megatron_flops(a.hidden, a.layers, a.vocab, s, B) / (step * plan.cards) / 1e12
    if anchor.metric == "iteration_s":
        return step
    if anchor.metric == "gpu_hours":
        return m["iterations"] * step * plan.cards / 3600.0
    raise ValueError(anchor.metric)


def speed(anchor: Anchor, predicted: float) -> float:
    """Predicted speed over published speed (> 1: tpopt is optimistic)."""
    if anchor.metric in ("iteration_s", "gpu_hours"):
        return anchor.published / predicted
    return predicted / anchor.published


def fmt(anchor: Anchor, x: float) -> str:
    if anchor.metric == "mfu":
        return f"{x * 100:.1f} %"
    if anchor.metric == "gpu_hours":
        return f"{x / 1e6:.3f} M"
    if anchor.metric == "iteration_s":
        return f"{x:.1f} s"
    return f"{x:.0f}"


def evaluate_anchor(anchor: Anchor):
    """(fastest fitting plan, its metrics, slowest fitting metrics, combinations tried, fitting count)."""
    sc = scenario_of(anchor)
    keys = list(anchor.open)
    fits = []
    tried = 0
    for values in itertools.product(*(anchor.open[k] for k in keys)) if keys else [()]:
        plan = Plan(**{**anchor.plan, **dict(zip(keys, values, strict=False))})
        tried += 1
        e = evaluate(sc, plan)
        if any(SPEC[c.name].structural and not c.satisfied for c in e.constraints):
            continue
        m = e.metrics
        if m["memory_per_card_gib"] <= m["memory_limit_gib"]:
            fits.append((m["step_s"], plan, m))
    if not fits:
        return sc, None, None, None, tried, 0
    fits.sort(key=lambda x: x[0])
    return sc, fits[0][1], fits[0][2], fits[-1][2], tried, len(fits)


def knobs(anchor: Anchor, plan: Plan) -> str:
    if not anchor.open:
        return "as published"
    return ", ".join(f"{k.replace('_', '-')} {getattr(plan, k)}" for k in anchor.open)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="anchors whose name contains this text")
    args = ap.parse_args(argv)
    rows = [a for a in ANCHORS if not args.only or args.only in a.name]
    t0 = time.perf_counter()
    print(f"{'anchor':30s} {'metric':16s} {'published':>10s} {'tpopt':>10s} {'speed':>7s} {'slowest fit':>11s}  "
          f"tpopt's choice of the unstated knobs")
    speeds = []
    for a in rows:
        sc, plan, m, slow, tried, n = evaluate_anchor(a)
        if plan is None:
            print(f"{a.name:30s} {a.metric:16s} {fmt(a, a.published):>10s} {'no fit':>10s}  ({tried} combinations)")
            continue
        pred, worst = metric(a, sc, plan, m), metric(a, sc, plan, slow)
        sp = speed(a, pred)
        speeds.append((a.name, sp))
        print(f"{a.name:30s} {a.metric:16s} {fmt(a, a.published):>10s} {fmt(a, pred):>10s} {sp:7.2f} "
              f"{fmt(a, worst):>11s}  {knobs(a, plan)} ({n} of {tried} fit); step {m['step_s']:.2f} s, "
              f"{m['memory_per_card_gib']:.1f} GiB")
    print("\nsources and what tpopt assumes:")
    for a in rows:
        print(f"  {a.name}: {a.source}.\n      {a.notes}.")
    if speeds:
        print("\nspeed (tpopt / published), by anchor: " + ", ".join(f"{n} {s:.2f}" for n, s in speeds))
    print(f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
