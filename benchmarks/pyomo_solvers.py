"""The Pyomo formulation: each installed Pyomo solver against HiGHS called directly, and the export.

For the spaces of ``solve_scaling.py`` (the smaller ones unless --all): wall time of the monolithic MILP
(built in Pyomo, solved in the solve-verify loop) and of ``--method auto`` per solver, the ratio to the
``highs`` backend (the same matrix through highspy, no Pyomo), whether the optimum equals enumeration's
(CP-SAT's where enumeration would be too slow), and the time and size of ``--export`` as LP and MPS.
Not a test: figures depend on the machine. Run:

    .venv/bin/python benchmarks/pyomo_solvers.py [--all] [--solvers highs,scip,cbc,glpk]
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from solve_scaling import SPACES, design  # noqa: E402

from tpopt.errors import InputError  # noqa: E402
from tpopt.optimizer.core import MONOLITHIC_LIMIT, solve  # noqa: E402
from tpopt.optimizer.pyomo_model import PyomoSolver, export_model  # noqa: E402
from tpopt.optimizer.result import Request  # noqa: E402
from tpopt.optimizer.space import Space  # noqa: E402


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--all", action="store_true", help="also the two largest spaces (method auto only)")
    ap.add_argument("--solvers", default="highs,scip,cbc,glpk")
    args = ap.parse_args()
    solvers = []
    for name in args.solvers.split(","):
        try:
            PyomoSolver(f"pyomo:{name}", Request())
            solvers.append(f"pyomo:{name}")
        except InputError as exc:
            print(f"skipped: {exc}")
    spaces = SPACES if args.all else SPACES[:3]
    print(f"{'space':<72} {'plans':>11} {'backend':<12} {'monolithic':>11} {'auto':>8} {'/ highs':>8} {'same':>5}")
    for label, ov in spaces:
        sc = design(ov)
        space = Space.from_scenario(sc)
        n = space.size()
        small = max(t.values.size for t in space.tables.values()) <= 20 * MONOLITHIC_LIMIT
        ref = solve(sc, "enumerate" if n <= 300_000 else "cpsat", Request())
        base = None
        for b in ["highs", *solvers]:
            mono = None
            if small:
                r, mono = timed(lambda: solve(sc, b, Request(method="monolithic")))
            r, auto = timed(lambda: solve(sc, b, Request()))
            same = math.isclose(r.best.metrics["cost"], ref.best.metrics["cost"], rel_tol=1e-9) if r.best else \
                ref.best is None
            base = base or mono or auto
            ratio = (mono or auto) / base
            mono_s = f"{mono:.2f} s" if mono is not None else "-"
            print(f"{label[:72]:<72} {n:>11,} {b:<12} {mono_s:>11} {auto:>6.2f} s {ratio:>7.1f}x {'yes' if same else 'NO':>5}")
        if small:
            with tempfile.TemporaryDirectory() as tmp:
                for ext in (".lp", ".mps"):
                    info, t = timed(lambda: export_model(space, Request(), Path(tmp) / f"plan{ext}"))
                    size = (Path(tmp) / f"plan{ext}").stat().st_size
                    print(f"{'  export ' + ext:<72} {info['variables']:>11,} columns, {info['constraints']:,} rows: "
                          f"{t:.2f} s, {size / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
