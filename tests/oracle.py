"""The enumeration oracle in property tests: one space through every backend, compared with brute force."""

from __future__ import annotations

import math

from tpopt.models.evaluate import evaluate
from tpopt.optimizer.core import solve
from tpopt.optimizer.result import Request, SolveResult, Status

BACKENDS = ("enumerate", "cpsat", "highs", "pyomo:highs")
DECOMPOSED = ("cpsat", "highs")  # also solved by the layout decomposition


def solve_every_backend(sc, objective: str) -> dict[str, SolveResult]:
    """The scenario through every backend (and the decomposed CP-SAT and HiGHS, and CP-SAT's decomposition with
    tables built per layout group on demand), seeded, one worker."""
    req = dict(objective=objective, seed=0, workers=1, time_limit=120)
    results = {b: solve(sc, b, Request(**req)) for b in BACKENDS}
    for b in DECOMPOSED:
        results[b + "/decomposed"] = solve(sc, b, Request(method="decomposed", **req))
    results["cpsat/on-demand"] = solve(sc, "cpsat", Request(method="on-demand", **req))  # tables per layout group
    return results


def assert_agree_with_enumeration(sc, objective: str, results: dict[str, SolveResult], proven: bool = False) -> None:
    """Every backend has enumeration's status and, when feasible, a feasible plan of the same objective value
    (relative 1e-9); ``proven``: every status is a proof (optimal or infeasible)."""
    ref = results["enumerate"]
    key = "cost" if objective == "cost" else "finish_days"
    for name, r in results.items():
        if proven:
            assert r.status in (Status.OPTIMAL, Status.INFEASIBLE), (name, r.status)
        assert r.status == ref.status, (name, r.status, ref.status)
        if r.feasible:
            assert evaluate(sc, r.best.plan).feasible
            assert math.isclose(r.best.metrics[key], ref.best.metrics[key], rel_tol=1e-9), (name, r.best.plan,
                                                                                             ref.best.plan)
