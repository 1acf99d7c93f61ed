"""Solve time with a chance constraint (``--confidence``) against the same space without it.

For each space, the scenario is built and solved from scratch (term tables included; imports and each
solver's first call paid once before timing) with and without a confidence of 95 %, by every backend
named; it prints the median wall time of each and their ratio (the issue asks for at most 2x). The
spaces: the design case (the chapter's, 16 plans), the 1,024-card example (88 plans), and a wider Llama 3
8B space on H100 (TP, ZeRO, save intervals and modes, up to 2,048 cards). Not a test: figures depend on
the machine. Run:

    .venv/bin/python benchmarks/confidence.py [--repeat 3] [--solvers cpsat,highs,enumerate]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from tpopt.catalogs import load_catalog  # noqa: E402
from tpopt.catalogs.scenario import build_scenario, load_scenario  # noqa: E402
from tpopt.models import terms as T  # noqa: E402
from tpopt.optimizer.core import solve  # noqa: E402
from tpopt.optimizer.result import Request  # noqa: E402
from tpopt.optimizer.space import Space  # noqa: E402


def wide():
    return build_scenario({
        "model": {"name": "llama3-8b"}, "task": {"tokens": "2T", "seq_len": 8192, "global_batch": 1536},
        "schedule": {"deadline": "6d", "reserved": "1d"}, "hardware": {"accelerator": "h100-sxm", "efficiency": 0.4},
        "risk": {"step_sigma": 0.15},
        "search": {"zero_stage": [1, 2, 3], "tp": [1, 2, 4, 8], "pp": [1, 2], "micro_batch": [1, 2],
                   "save_interval": ["auto", "600s", "1800s", "3600s"], "save_mode": ["sync", "async"],
                   "max_cards": 2048}}, load_catalog())


def spaces():
    design = load_scenario(ROOT / "examples" / "design-case.toml")
    conf = load_scenario(ROOT / "examples" / "llama3-8b-confidence.toml")
    return [("design case", design), ("1,024-card example", replace(conf, task=replace(conf.task, confidence=None))),
            ("wide Llama 3 8B", wide())]


def timed(sc, backend: str, repeat: int) -> tuple[float, str]:
    walls = []
    status = ""
    for _ in range(repeat):
        T._CHANCE_MEMO.clear()  # from scratch: no chance roots remembered from the previous run
        t0 = time.perf_counter()
        r = solve(sc, backend, Request(seed=0, workers=1, time_limit=300))
        walls.append(time.perf_counter() - t0)
        status = f"{r.status.value}, {r.best.plan.cards if r.best else '-'} cards"
    return statistics.median(walls), status


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--solvers", default="cpsat,highs,enumerate")
    args = ap.parse_args(argv)
    warm = load_scenario(ROOT / "examples" / "design-case.toml")
    for b in args.solvers.split(","):  # imports and first calls, untimed
        solve(replace(warm, task=replace(warm.task, confidence=0.95)), b, Request(seed=0, workers=1))
    print(f"{'space':<20} {'plans':>7} {'solver':<10} {'without s':>10} {'with 95 % s':>12} {'ratio':>6}  "
          "optimum without / with")
    for name, sc in spaces():
        size = Space.from_scenario(sc).size()
        with_q = replace(sc, task=replace(sc.task, confidence=0.95))
        for b in args.solvers.split(","):
            t0, s0 = timed(sc, b, args.repeat)
            t1, s1 = timed(with_q, b, args.repeat)
            print(f"{name:<20} {size:>7,} {b:<10} {t0:>10.3f} {t1:>12.3f} {t1 / t0:>6.2f}  {s0} / {s1}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
