"""The Pyomo formulation: each installed Pyomo solver against HiGHS called directly, and the export.

For the spaces of ``solve_scaling.py`` (the smaller ones unless --all): wall time of the monolithic MILP
(built in Pyomo, solved in the solve-verify loop; its status when the time limit stops it) and of
``--method auto`` per solver, the ratio of the latter to the ``highs`` backend's (the same model through
highspy, no Pyomo), whether the optimum equals enumeration's (CP-SAT's where enumeration would be too
slow), and the time and size of ``--export`` as LP and MPS.
Not a test: figures depend on the machine. Run:

    .venv/bin/python benchmarks/pyomo_solvers.py [--all | --spaces 4,5] [--solvers highs,scip,cbc,glpk] \
        [--time-limit 60]
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
from tpopt.optimizer.backends.pyomo_model import PyomoSolver, export_model  # noqa: E402
from tpopt.optimizer.core import MONOLITHIC_LIMIT, solve  # noqa: E402
from tpopt.optimizer.result import Request  # noqa: E402
from tpopt.optimizer.space import Space  # noqa: E402


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def _same(r, ref) -> bool:
    """The same optimum as the reference (a run stopped by the time limit proves nothing either way)."""
    if r.status.value not in ("optimal", "infeasible"):
        return True
    if r.best is None or ref.best is None:
        return r.best is None and ref.best is None
    return math.isclose(r.best.metrics["cost"], ref.best.metrics["cost"], rel_tol=1e-9)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--all", action="store_true", help="also the two largest spaces (method auto only)")
    ap.add_argument("--spaces", help="only these spaces, 1-based, e.g. 4,5")
    ap.add_argument("--solvers", default="highs,scip,cbc,glpk")
    ap.add_argument("--time-limit", type=float, default=60.0, help="per solve, s")
    args = ap.parse_args()
    solvers = []
    for name in args.solvers.split(","):
        try:
            PyomoSolver(f"pyomo:{name}", Request())
            solvers.append(f"pyomo:{name}")
        except InputError as exc:
            print(f"skipped: {exc}")
    spaces = SPACES if args.all else SPACES[:3]
    if args.spaces:
        spaces = [SPACES[int(i) - 1] for i in args.spaces.split(",")]
    print(f"{'space':<72} {'plans':>11} {'backend':<12} {'monolithic':>11} {'auto':>8} {'auto / highs':>12} "
          f"{'same':>5}")
    for label, ov in spaces:
        sc = design(ov)
        space = Space.from_scenario(sc)
        n = space.size()
        small = max(t.values.size for t in space.tables.values()) <= 20 * MONOLITHIC_LIMIT
        ref = solve(sc, "enumerate" if n <= 300_000 else "cpsat", Request())
        base = None
        for b in ["highs", *solvers]:
            mono, mono_s, same = None, "-", True
            if small:
                mono_req = Request(method="monolithic", time_limit=args.time_limit)
                r, mono = timed(lambda sc=sc, b=b, req=mono_req: solve(sc, b, req))
                same = _same(r, ref)
                mono_s = f"{mono:.2f} s" if r.status.value in ("optimal", "infeasible") else f"{r.status.value}"
            r, auto = timed(lambda sc=sc, b=b: solve(sc, b, Request(time_limit=args.time_limit)))
            same = same and _same(r, ref)
            base = base or auto
            ratio = auto / base
            print(f"{label[:72]:<72} {n:>11,} {b:<12} {mono_s:>11} {auto:>6.2f} s {ratio:>11.1f}x "
                  f"{'yes' if same else 'NO':>5}")
        if small:
            with tempfile.TemporaryDirectory() as tmp:
                for ext in (".lp", ".mps"):
                    target = Path(tmp) / f"plan{ext}"
                    info, t = timed(lambda space=space, target=target: export_model(space, Request(), target))
                    size = (Path(tmp) / f"plan{ext}").stat().st_size
                    print(f"{'  export ' + ext:<72} {info['variables']:>11,} columns, {info['constraints']:,} rows: "
                          f"{t:.2f} s, {size / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
