"""`solve`: one entry point, three backends, one result type.

The solver backends (CP-SAT, HiGHS) optimise integer-scaled / floating-point encodings of the term
tables. Their encodings are *relaxations* by construction (every table value rounded towards
feasibility and a lower objective), so no plan that is feasible in exact arithmetic is cut off.
Every candidate they return is re-evaluated with the exact evaluator; an infeasible candidate is
excluded with a no-good cut, and the search continues until no unexamined assignment can beat the
best verified plan (solve-verify loop). The result is therefore the exact optimum of the same model
the enumerator evaluates, which the property tests check.
"""

from __future__ import annotations

import time

from tpopt.errors import InputError
from tpopt.models.evaluate import Evaluation, evaluate
from tpopt.models.plan import Scenario
from tpopt.optimizer.result import Request, SolveResult, SolverInfo, Status, objective_key
from tpopt.optimizer.space import FAMILIES, Space

BACKENDS = ("cpsat", "highs", "enumerate")  # and "pyomo:<solver>" (optimizer/pyomo_model.py)
MONOLITHIC_LIMIT = 2_000  # largest term table (rows) for which "auto" uses the monolithic encoding
# (measured in benchmarks/solve_scaling.py: the layout decomposition is as fast at small sizes and
# far faster beyond; the monolithic model stays for tiny spaces and for conflict cores)


def use_decomposition(space: Space, req: Request) -> bool:
    """Monolithic encoding for small term tables, layout decomposition beyond (or as requested)."""
    if req.method in ("monolithic", "decomposed"):
        return req.method == "decomposed"
    if req.method != "auto":
        raise InputError(f"unknown solve method {req.method!r} (use auto, monolithic or decomposed)")
    return max(t.values.size for t in space.tables.values()) > MONOLITHIC_LIMIT


def evaluate_assignment(space: Space, idx: dict) -> Evaluation:
    return evaluate(space.sc, space.plan(idx))


def feasible_for(ev: Evaluation, enforced) -> bool:
    """Feasible with respect to the enforced families (step.budget follows deadline.finish)."""
    for c in ev.constraints:
        name = "deadline.finish" if c.name == "step.budget" else c.name
        if name in enforced and not c.satisfied:
            return False
    return True


def solve(sc: Scenario, backend: str = "cpsat", req: Request | None = None, restrict: dict | None = None,
          space: Space | None = None) -> SolveResult:
    """The best ``req.top`` plans of the scenario's design space under ``req``."""
    req = req or Request()
    if backend not in BACKENDS and not backend.startswith("pyomo:"):
        raise InputError(f"unknown solver {backend!r} (use one of: {', '.join(BACKENDS)}, pyomo:<solver>)")
    if space is None and (sc.stages or sc.search.global_batch):
        from tpopt.optimizer import outer

        if sc.stages:
            raise InputError("a staged scenario ([[task.stages]]) is planned stage by stage: use tpopt solve "
                             "or tpopt evaluate")
        if outer.has_task_choices(sc):  # the global batch is a choice: one exact solve per batch
            return outer.solve_batches(sc, backend, req, restrict).result
    t0 = time.perf_counter()
    space = space or Space.from_scenario(sc, restrict)
    enforced = req.enforced(FAMILIES)
    info = SolverInfo(name=backend, points=space.size())
    if backend == "enumerate":
        from tpopt.optimizer.enumerate import enumerate_best

        assignments, evaluated, chunks = enumerate_best(space, req)
        plans = [evaluate_assignment(space, a) for a in assignments]
        info.evaluated, info.rounds = evaluated, chunks
        status = Status.OPTIMAL if plans else Status.INFEASIBLE
    elif use_decomposition(space, req):
        from tpopt.optimizer.decompose import solve_decomposed

        plans, status, rounds, evaluated = solve_decomposed(space, backend, req, enforced)
        info.rounds, info.evaluated = rounds, evaluated
        info.gap = 0.0 if status == Status.OPTIMAL else None
        info.note = "layout decomposition"
    else:
        if backend == "cpsat":
            from tpopt.optimizer.cpsat import CpSatModel as Model
        elif backend == "highs":
            from tpopt.optimizer.highs import HighsModel as Model
        else:  # pyomo:<solver>
            from tpopt.optimizer.pyomo_model import model_class

            Model = model_class(backend)
        model = Model(space, req)
        plans, status, rounds, gap, evaluated = verify_loop(model, space, req, enforced)
        info.rounds, info.gap, info.evaluated = rounds, gap, evaluated
        info.note = "monolithic"
    info.wall_s = time.perf_counter() - t0
    return SolveResult(status=status, objective=req.objective, plans=plans, solver=info,
                       enforced=tuple(f for f in FAMILIES if f in enforced))


def verify_loop(model, space: Space, req: Request, enforced):
    """Solve the relaxed encoding, verify candidates exactly, cut no-goods, until proven.

    Invariant: every assignment not yet cut has a relaxed objective <= its exact objective. Stop when
    the relaxed optimum of the remaining assignments exceeds the K-th best verified objective (or none
    remains). Ties within rounding are all examined, so the K best are exact.
    """
    K = max(1, req.top)
    verified: list[tuple[tuple, Evaluation]] = []
    rounds = 0
    evaluated = 0
    gap = 0.0
    deadline = time.perf_counter() + req.time_limit
    status = Status.INFEASIBLE
    while True:
        rounds += 1
        bound = None
        if len(verified) >= K:
            bound = verified[K - 1][0][0]
        remaining = max(0.01, deadline - time.perf_counter())
        res = model.solve(bound=bound, time_limit=remaining)
        if res.status == "infeasible":
            status = Status.OPTIMAL if verified else Status.INFEASIBLE
            gap = 0.0 if verified else None
            break
        if res.status == "unknown":
            status = Status.FEASIBLE if verified else Status.UNKNOWN
            gap = None
            break
        ev = evaluate_assignment(space, res.assignment)
        evaluated += 1
        model.exclude(res.assignment)
        if feasible_for(ev, enforced):
            verified.append((objective_key(ev, req.objective), ev))
            verified.sort(key=lambda kv: kv[0])
            verified = verified[:K]
        if res.status == "feasible":  # time limit inside the solver: no proof
            if time.perf_counter() >= deadline:
                status = Status.FEASIBLE if verified else Status.UNKNOWN
                gap = None
                break
        if time.perf_counter() >= deadline:
            status = Status.FEASIBLE if verified else Status.UNKNOWN
            gap = None
            break
    return [ev for _, ev in verified], status, rounds, gap, evaluated
