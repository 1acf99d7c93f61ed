"""Solve time of a mixture-of-experts design space against dense spaces of the same size.

The MoE space (Qwen3-30B-A3B) has the expert decisions on top of the usual layout: EP (8 values) x
capacity factor (none, 1.0, 1.25) multiply the plan count by 24. Three dense references (Qwen3-32B, a
model of the same total size) reach the same count differently:

(a) per-card choices: recompute (4), sequence parallelism (2), pipeline schedule (7) and save
    interval (4) instead of 2, 1, 2 and 2 -- choices of the layout evaluator's grid that change step
    time, as EP and capacity do (the like-for-like reference; exactly the MoE space's count);
(b) layout choices: micro-batch, pipeline depth and schedule, NICs, recompute, an accelerator
    (within 10 %);
(c) checkpoint choices only: 24 times the save intervals (48 instead of 2). They enter no step-time
    table, so this is the cheapest way a space can reach that size: its term tables stay those of
    the base space while the MoE space's compute, DP, offload and all-to-all tables are 24 times
    larger.

Each space is built and solved from scratch (term tables and the models' memos included; imports and
the solvers' first call are paid once, before timing) by CP-SAT and HiGHS (layout decomposition,
what ``auto`` picks at this size), with the allocator tuned as the ``tpopt`` program does;
``--check`` also enumerates every plan and confirms the optimum. Not a test: figures depend on the
machine. Run:

    .venv/bin/python benchmarks/moe_solve.py [--per-op] [--check] [--repeat 3]
"""

from __future__ import annotations

import argparse
import importlib
import math
import pkgutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from tpopt.catalogs import load_catalog  # noqa: E402
from tpopt.catalogs.scenario import build_scenario  # noqa: E402
from tpopt.optimizer.core import solve  # noqa: E402
from tpopt.optimizer.result import Request  # noqa: E402
from tpopt.optimizer.space import Space  # noqa: E402

ACCS = ["h100-sxm", "a100-80gb-sxm", "h200"]
BASE_SEARCH = {"accelerator": ACCS, "tp": [1, 2, 4, 8], "pp": [1, 2, 4], "micro_batch": [1, 2, 4],
               "zero_stage": [0, 1, 2, 3], "recompute": ["none", "full"], "schedule": ["1f1b", "zb-h1"],
               "offload": ["none", "cpu"], "nics_per_host": [1, 2, 4, 8], "save_interval": ["auto", "1800s"],
               "save_mode": ["sync", "async"], "max_cards": 2048}
SCHEDULES = ["1f1b", "zb-h1", "zb-h2", "interleaved:2", "interleaved:3", "interleaved:4", "fill-drain"]
INTERVALS = ["auto"] + [f"{s}s" for s in range(300, 14400 + 1, 300)][:47]  # 48 choices


def scenario(model: str, search: dict, per_op: bool, moe: dict | None = None):
    raw = {"model": {"name": model},
           "task": {"tokens": "1T", "seq_len": 4096, "global_batch": 2048},
           "schedule": {"deadline": "30d"},
           "hardware": {"accelerator": search["accelerator"]},
           "checkpoint": {"storage": "superpod-good"},
           "search": search}
    if not per_op:
        raw["hardware"]["efficiency"] = 0.40
    if moe:
        raw["moe"] = moe
    return build_scenario(raw, load_catalog())


def spaces(per_op: bool):
    moe = scenario("qwen3-30b-a3b", dict(BASE_SEARCH, ep=[1, 2, 4, 8, 16, 32, 64, 128],
                                         capacity_factor=["none", 1.0, 1.25]),
                   per_op, {"imbalance": 1.25, "max_drop": "1%"})
    per_card = scenario("qwen3-32b", dict(BASE_SEARCH, recompute=["none", "norm", "mlp", "full"],
                                          sequence_parallel=[True, False], schedule=SCHEDULES,
                                          save_interval=["auto", "1800s", "3600s", "7200s"]), per_op)
    checkpoint = scenario("qwen3-32b", dict(BASE_SEARCH, save_interval=INTERVALS), per_op)
    layout = scenario("qwen3-32b", dict(BASE_SEARCH, micro_batch=[1, 2, 4, 8, 16], pp=[1, 2, 4, 8],
                                        nics_per_host=[1, 2, 4, 6, 8], recompute=["none", "norm", "mlp", "full"],
                                        save_interval=["auto", "1800s", "3600s", "7200s"],
                                        schedule=["1f1b", "zb-h1", "interleaved"], accelerator=ACCS + ["b200"]),
                      per_op)
    return [("MoE: Qwen3-30B-A3B, EP x capacity (24 expert choices)", moe),
            ("(a) dense: Qwen3-32B, 24 x the per-card choices", per_card),
            ("(b) dense: Qwen3-32B, more layout choices", layout),
            ("(c) dense: Qwen3-32B, 24 x the checkpoint choices", checkpoint)]


def clear_memos() -> None:
    """Forget every module-level memo of the models (kernel times, stage splits, pipeline completions),
    so that each timed solve starts from scratch like a fresh ``tpopt solve`` process."""
    import tpopt.models as models

    for info in pkgutil.iter_modules(models.__path__):
        mod = importlib.import_module(f"tpopt.models.{info.name}")
        for obj in list(vars(mod).values()):
            if callable(getattr(obj, "cache_clear", None)) and not isinstance(obj, type):
                obj.cache_clear()
    from tpopt.models import terms
    from tpopt.models.terms import stage_compute

    terms._OP_MEMO.clear()
    terms._COMPLETION_CACHE.clear()
    stage_compute._COLUMN_CACHE.clear()


def warm_up() -> None:
    """One small solve per backend before any timing: imports, solver libraries' first call and numpy's
    first use are paid once per process, not by whichever space happens to be timed first."""
    sc = scenario("qwen3-8b", dict(BASE_SEARCH, accelerator=["h100-sxm"], max_cards=64), per_op=False)
    for backend in ("cpsat", "highs"):
        solve(sc, backend, Request(time_limit=600), space=Space.from_scenario(sc))


def run(sc, backend: str) -> tuple[float, object]:
    clear_memos()
    t0 = time.perf_counter()
    r = solve(sc, backend, Request(time_limit=600), space=Space.from_scenario(sc))
    return time.perf_counter() - t0, r


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-op", action="store_true", help="per-operation step-time model (default: flat, 40 %% MFU)")
    ap.add_argument("--check", action="store_true", help="also enumerate every plan and compare the optima")
    ap.add_argument("--repeat", type=int, default=3, help="solves per backend and space (median shown)")
    args = ap.parse_args(argv)
    from tpopt.cli.main import tune_allocator

    tune_allocator()  # measured as the `tpopt` program runs (the library leaves the process's allocator alone)
    warm_up()
    rows = []
    for label, sc in spaces(args.per_op):
        points = Space.from_scenario(sc).size()
        times, best = {}, {}
        for backend in ("cpsat", "highs"):
            runs = [run(sc, backend) for _ in range(max(1, args.repeat))]
            times[backend] = statistics.median(t for t, _ in runs)
            best[backend] = runs[0][1]
        same = ""
        if args.check:
            ref = solve(sc, "enumerate", Request())

            def key(r):
                return None if r.best is None else r.best.metrics["cost"]

            same = "yes" if all(key(best[b]) is not None and math.isclose(key(best[b]), key(ref), rel_tol=1e-9)
                                or key(best[b]) == key(ref) for b in best) else "NO"
        p = best["cpsat"].best.plan if best["cpsat"].best else None
        plan = "infeasible" if p is None else (f"{p.accelerator} x {p.cards}, TP {p.tp} PP {p.pp} DP {p.dp}"
                                                + (f", EP {p.ep}" if sc.model.moe else ""))
        rows.append((label, points, times["cpsat"], times["highs"], best["cpsat"].solver.evaluated, plan, same))
    mode = "per-operation" if args.per_op else "flat (40 % MFU)"
    print(f"Step-time model: {mode}; times are build + solve, median of {args.repeat}")
    print(f"{'space':<56} {'plans':>12} {'cpsat s':>8} {'highs s':>8} {'evaluated':>9}  optimum"
          + ("  same" if args.check else ""))
    for label, points, tc, th, ev, plan, same in rows:
        print(f"{label:<56} {points:>12,} {tc:>8.3f} {th:>8.3f} {ev:>9,}  {plan}" + (f"  {same}" if same else ""))
    moe = rows[0]
    for label, points, tc, th, *_ in rows[1:]:
        print(f"MoE / {label}: cpsat {moe[2] / tc:.2f}x, highs {moe[3] / th:.2f}x (plans {moe[1] / points:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
