"""Accuracy of the batch and long-context relations: predicted against published, with the error per row.

1. The training-systems chapter, 10.1.1: weak scaling (the batch grows with the cards, B_noise = 2M
   tokens) and strong scaling (384 sequences per step; context parallelism where the cards outnumber
   the sequences), as ``tpopt evaluate`` computes them for the design case (flat model), against the
   chapter's days.
2. Llama 3 405B on H100 ("The Llama 3 Herd of Models", Table 4: 8,192 / 16,384 GPUs, TP 8, PP 16, at 8K
   and, with CP 16, at 128K tokens per sequence; 16M tokens per step): tpopt's per-operation model with
   the layout fixed and the schedule (1F1B or interleaved with 2-7 virtual stages) and recompute (none,
   selective groups, full) chosen as tpopt would, the fastest plan that fits 74 GiB per card, against the
   published model TFLOP/s per GPU (model FLOPs = 6 x GEMM parameters + causal attention per token).
   The H100 entry of the performance catalog carries priors, not a calibration (see catalogs/performance.toml).

Not a test: it prints a table (a few seconds).

    .venv/bin/python benchmarks/batch_long_context.py
"""

from __future__ import annotations

import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from tpopt.catalogs import load_catalog  # noqa: E402
from tpopt.catalogs.scenario import build_scenario, load_scenario  # noqa: E402
from tpopt.models.arch import flops_per_token  # noqa: E402
from tpopt.models.evaluate import evaluate  # noqa: E402
from tpopt.models.plan import Plan  # noqa: E402
from tpopt.optimizer.core import solve  # noqa: E402
from tpopt.optimizer.result import Request  # noqa: E402

CHAPTER_WEAK = {48: 19.4, 96: 15.7, 192: 13.8, 384: 12.8, 1536: 12.1}
CHAPTER_STRONG = {48: (1, 19.4), 96: (2, 9.8), 192: (4, 5.0), 384: (1, 2.6), 1536: (4, 0.8)}
# Llama 3 (Table 4): GPUs, TP, CP, PP, DP, sequence length, sequences per DP rank, TFLOP/s per GPU
LLAMA3 = [(8192, 8, 1, 16, 64, 8192, 32, 430), (16384, 8, 1, 16, 128, 8192, 16, 400),
          (16384, 8, 16, 16, 8, 131072, 16, 380)]


def chapter_rows():
    base = load_scenario(ROOT / "examples" / "design-case.toml", {"task.critical_batch": "2M",
                                                                  "search.max_cards": 2048})
    print("Chapter 10.1.1 (design case, flat model, B_noise 2M tokens): base training days")
    print(f"{'cards':>6} {'weak tpopt':>11} {'chapter':>8} {'error':>7}   "
          f"{'strong tpopt':>12} {'CP':>3} {'chapter':>8} "
          f"{'error':>7}")
    for cards, weak in CHAPTER_WEAK.items():
        w = evaluate(base, Plan(accelerator="rtx4090", cards=cards, global_batch=8 * cards)).metrics["train_days"]
        cp, strong = CHAPTER_STRONG[cards]
        s = evaluate(base, Plan(accelerator="rtx4090", cards=cards, cp=cp)).metrics["train_days"]
        print(f"{cards:>6,} {w:>11.2f} {weak:>8.1f} {w / weak - 1:>+7.1%}   {s:>12.2f} {cp:>3} {strong:>8.1f} "
              f"{s / strong - 1:>+7.1%}")


def llama3_rows():
    cat = load_catalog()
    print("\nLlama 3 405B on H100, Table 4 of 'The Llama 3 Herd of Models' (per-operation model, H100 priors)")
    print(f"{'GPUs':>6} {'TP/CP/PP/DP':>12} {'seq':>7} {'schedule':>14} {'recompute':>10} {'GiB':>5} {'step s':>7} "
          f"{'TFLOP/s':>8} {'published':>9} {'error':>7}")
    errors = []
    for cards, tp, cp, pp, dp, seq, per_dp, published in LLAMA3:
        batch = per_dp * dp
        raw = {"model": {"name": "llama3-405b"}, "task": {"tokens": "100B", "seq_len": seq, "global_batch": batch},
               "schedule": {"deadline": "10000d"}, "hardware": {"accelerator": "h100-sxm"},
               "checkpoint": {"card_mtbf": "none"},
               "search": {"zero_stage": [1], "tp": [tp], "cp": [cp], "pp": [pp], "dp": [dp], "micro_batch": [1],
                          "schedule": ["1f1b", "interleaved"], "virtual_stages": [2, 3, 4, 7],
                          "recompute": ["none", "norm", "mlp", "norm+mlp", "full"], "save_interval": ["1800s"],
                          "save_mode": ["async"], "max_cards": cards}}
        sc = build_scenario(raw, cat)
        r = solve(sc, "enumerate", Request(objective="time"))
        ev = r.best
        if ev is None:
            print(f"{cards:>6,} {tp}/{cp}/{pp}/{dp:<5} {seq:>7,}  no plan fits")
            continue
        m, p = ev.metrics, ev.plan
        tflops = flops_per_token(sc.model, seq) * seq * batch / cards / m["step_s"] / 1e12
        errors.append(tflops / published - 1)
        print(f"{cards:>6,} {f'{tp}/{cp}/{pp}/{dp}':>12} {seq:>7,} {p.schedule:>14} {p.recompute:>10} "
              f"{m['memory_per_card_gib']:>5.1f} {m['step_s']:>7.2f} {tflops:>8.0f} {published:>9} "
              f"{tflops / published - 1:>+7.1%}")
    if errors:
        print(f"median |error| {sorted(abs(e) for e in errors)[len(errors) // 2]:.1%}, "
              f"max {max(abs(e) for e in errors):.1%}")


if __name__ == "__main__":
    t0 = time.perf_counter()
    chapter_rows()
    llama3_rows()
    print(f"\n({time.perf_counter() - t0:.1f} s)")
