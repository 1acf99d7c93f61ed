"""The tiny-space rule measured per step-time model (issue 36 item 6): enumeration against the solvers.

    .venv/bin/python benchmarks/tiny_space.py            # flat and per-operation spaces of 100 .. 20,000 plans

Under ``--method auto`` a space of up to :data:`tpopt.optimizer.core.TINY_SPACE` plans whose pipelines are cheap to
simulate is proven by evaluating every plan (the enumerator) instead of the solver asked for. This measures, in
one process after importing the solver libraries once, the wall time of the enumerator and of CP-SAT and HiGHS
(each with its own default method) on the same spaces: the design case's model (Qwen3-8B) on H100 hosts, with its
``[search]`` widened step by step, once with the flat step-time model (``hardware.efficiency``) and once with the
per-operation model (no efficiency: catalogs/performance.toml). Each space is solved from a fresh ``Space`` (its
tables included), best of ``--repeat`` runs. The rule in ``tpopt.optimizer.core.tiny_solver`` follows these
figures (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LADDER = [  # [search] of the design case, widened: each row multiplies the space
    {"zero_stage": [3], "tp": [1, 2], "pp": [1], "micro_batch": [1, 2]},
    {"zero_stage": [1, 3], "tp": [1, 2, 4], "pp": [1, 2], "micro_batch": [1, 2]},
    {"zero_stage": [1, 2, 3], "tp": [1, 2, 4, 8], "pp": [1, 2], "micro_batch": [1, 2, 4]},
    {"zero_stage": [0, 1, 2, 3], "tp": [1, 2, 4, 8], "pp": [1, 2, 4], "micro_batch": [1, 2, 4, 8]},
    {"zero_stage": [0, 1, 2, 3], "tp": [1, 2, 4, 8], "pp": [1, 2, 4, 8], "micro_batch": [1, 2, 4, 8],
     "recompute": ["none", "full"]},
]


def scenario(search: dict, per_op: bool):
    from tpopt.catalogs import load_catalog
    from tpopt.catalogs.scenario import build_scenario, read_scenario_file, with_overrides

    ov = {"hardware.accelerator": "h100-sxm", "hardware.usable_memory": "76GiB", "deadline": "30d"}
    ov.update({f"search.{k}": v for k, v in search.items()})
    raw = with_overrides(read_scenario_file(ROOT / "examples" / "design-case.toml"), ov)
    if per_op:  # no efficiency stated: the per-operation step-time model
        raw["hardware"] = {k: v for k, v in raw["hardware"].items() if k != "efficiency"}
    return build_scenario(raw, load_catalog())


def timed(sc, solver: str, repeat: int) -> tuple[float, str, float | None]:
    from tpopt.optimizer import core
    from tpopt.optimizer.backends import resolve
    from tpopt.optimizer.result import Request
    from tpopt.optimizer.space import Space

    best, status, cost = float("inf"), "", None
    for _ in range(repeat):
        space = Space.from_scenario(sc)
        t0 = time.perf_counter()
        r = core.solve(sc, resolve(solver), Request(time_limit=600.0), space=space)
        best = min(best, time.perf_counter() - t0)
        status, cost = r.status.value, (r.best.metrics["cost"] if r.best is not None else None)
    return best, status, cost


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=2, help="runs per cell, best kept (default 2)")
    ap.add_argument("--rows", type=int, default=len(LADDER), help="ladder rows to run (default all)")
    a = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    import highspy  # noqa: F401 - imported once up front: the figures are the solves', not the imports'
    from ortools.sat.python import cp_model  # noqa: F401

    from tpopt.optimizer.space import Space

    print(f"{'model':<8} {'plans':>7} {'cheap':>5}  {'enumerate s':>11} {'cpsat s':>8} {'highs s':>8}  same optimum")
    for per_op in (False, True):
        for search in LADDER[:a.rows]:
            sc = scenario(search, per_op)
            space = Space.from_scenario(sc)
            cells = {s: timed(sc, s, a.repeat) for s in ("enumerate", "cpsat", "highs")}
            costs = {round(c[2], 6) if c[2] is not None else None for c in cells.values()}
            cheap = "yes" if space.cheap_pipeline() else "no"
            print(f"{'per-op' if per_op else 'flat':<8} {space.size():>7,} {cheap:>5}  "
                  f"{cells['enumerate'][0]:>11.3f} {cells['cpsat'][0]:>8.3f} {cells['highs'][0]:>8.3f}  "
                  f"{'yes' if len(costs) == 1 else 'NO ' + str(costs)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
