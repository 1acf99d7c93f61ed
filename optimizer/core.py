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

import math
import time

from tpopt.errors import InputError
from tpopt.models import families as F
from tpopt.models.evaluate import Evaluation, evaluate
from tpopt.models.plan import Scenario
from tpopt.optimizer.limits import EncodingError, TimeLimitReached, clock_of
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
    return space.largest_table() > MONOLITHIC_LIMIT


def evaluate_assignment(space: Space, idx: dict) -> Evaluation:
    return evaluate(space.sc, space.plan(idx))


def feasible_for(ev: Evaluation, enforced) -> bool:
    """Feasible with respect to the enforced families (step.budget follows deadline.finish)."""
    for c in ev.constraints:
        name = F.DEADLINE if c.name == F.STEP_BUDGET else c.name
        if name in enforced and not c.satisfied:
            return False
    return True


class SolverFailure(Exception):
    """A backend stopped without an answer for a reason other than the time limit."""


def solve(sc: Scenario, backend: str = "cpsat", req: Request | None = None, restrict: dict | None = None,
          space: Space | None = None) -> SolveResult:
    """The best ``req.top`` plans of the scenario's design space under ``req``.

    Every phase (tables, solve, verification) draws on one clock (``req.clock``, made from
    ``req.time_limit`` if absent). When it runs out the best verified plans so far are returned
    with status ``feasible`` and their gap (``None`` when no bound is known), or ``unknown`` with
    none; ``info.limit_reached`` / ``info.limit_phase`` say where. A backend that cannot encode the
    scenario exactly, or fails otherwise, falls back (monolithic -> layout decomposition ->
    enumeration) and ``info.fallback`` says why; it never reports a time limit the clock did not reach.
    """
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
    clock = clock_of(req)
    t0 = time.perf_counter()
    enforced = req.enforced(FAMILIES)
    info = SolverInfo(name=backend)
    plans, status = [], Status.UNKNOWN
    try:
        with clock.interruptible("building the term tables"):
            space = space or Space.from_scenario(sc, restrict)
            info.points = space.size()
            if backend != "enumerate":
                space.build_tables()  # the tables the solve reads, inside the limit
        plans, status = _dispatch(space, backend, req, enforced, info)
    except TimeLimitReached:
        status = Status.UNKNOWN
    if clock.reached:
        info.limit_reached, info.limit_phase = True, clock.phase
        info.gap = info.gap if status == Status.FEASIBLE else None
    info.wall_s = time.perf_counter() - t0
    return SolveResult(status=status, objective=req.objective, plans=plans, solver=info,
                       enforced=tuple(f for f in FAMILIES if f in enforced))


def _dispatch(space: Space, backend: str, req: Request, enforced, info: SolverInfo):
    """Run the requested formulation, falling back when it cannot answer (see :func:`solve`)."""
    if backend == "enumerate":
        return _enumerate(space, req, info)
    method = "decomposed" if use_decomposition(space, req) else "monolithic"
    if method == "monolithic":
        if backend == "cpsat":
            from tpopt.optimizer.cpsat import CpSatModel as Model
        elif backend == "highs":
            from tpopt.optimizer.highs import HighsModel as Model
        else:  # pyomo:<solver>
            from tpopt.optimizer.pyomo_model import model_class

            Model = model_class(backend)
        try:
            with clock_of(req).interruptible("building the solver model"):
                model = Model(space, req)
            plans, status, rounds, gap, evaluated = verify_loop(model, space, req, enforced)
            info.rounds, info.gap, info.evaluated = rounds, gap, evaluated
            info.note = "monolithic"
            return plans, status
        except (EncodingError, SolverFailure) as exc:
            info.fallback = f"monolithic {backend}: {exc}; answered by the layout decomposition"
    from tpopt.optimizer.decompose import solve_decomposed

    try:
        plans, status, rounds, evaluated, gap = solve_decomposed(space, backend, req, enforced)
    except SolverFailure as exc:
        info.fallback = (info.fallback + "; " if info.fallback else "") + \
            f"decomposition: {exc}; answered by enumeration"
        return _enumerate(space, req, info)
    info.rounds, info.evaluated, info.gap = rounds, evaluated, gap
    info.note = "layout decomposition"
    return plans, status


def _enumerate(space: Space, req: Request, info: SolverInfo):
    from tpopt.optimizer.enumerate import enumerate_best

    assignments, evaluated, chunks = enumerate_best(space, req)
    plans = [evaluate_assignment(space, a) for a in assignments]
    info.evaluated, info.rounds = evaluated, chunks
    complete = evaluated >= space.size()
    if complete:
        info.gap = 0.0 if plans else None
        return plans, (Status.OPTIMAL if plans else Status.INFEASIBLE)
    info.gap = None  # a partial enumeration has no bound on the plans it did not reach
    return plans, (Status.FEASIBLE if plans else Status.UNKNOWN)


def relative_gap(best: float | None, bound: float | None) -> float | None:
    """(best - bound) / |best|, 0 when the bound meets the best; None when either is unknown."""
    if best is None or bound is None or not math.isfinite(bound) or not math.isfinite(best):
        return None
    if best == 0:
        return 0.0 if bound >= 0 else None
    return max(0.0, (best - min(bound, best)) / abs(best))


def solver_stopped(clock, res, phase: str) -> None:
    """A solver said it hit its time limit: the status is "time limit" only if the shared clock
    agrees (the solver was given what remained of it); otherwise the solver failed."""
    if not clock.expired(phase) and clock.remaining() > SOLVER_SLACK_S:
        raise SolverFailure(f"solver stopped with {clock.remaining():.2f} s of the time limit left "
                            f"({res.detail or res.status})")
    clock.reached, clock.phase = True, clock.phase or phase


SOLVER_SLACK_S = 0.5  # a solver stopping this close to the deadline stopped for the deadline


def verify_loop(model, space: Space, req: Request, enforced):
    """Solve the relaxed encoding, verify candidates exactly, cut no-goods, until proven.

    Invariant: every assignment not yet cut has a relaxed objective <= its exact objective. Stop when
    the relaxed optimum of the remaining assignments exceeds the K-th best verified objective (or none
    remains). Ties within rounding are all examined, so the K best are exact. When the clock runs out,
    the gap is measured against the last proven lower bound of the unexamined assignments.
    """
    K = max(1, req.top)
    clock = clock_of(req)
    verified: list[tuple[tuple, Evaluation]] = []
    rounds = 0
    evaluated = 0
    lower = None  # proven lower bound of the relaxed objective over the assignments not yet cut
    phase = "solving and verifying candidates"
    while True:
        rounds += 1
        bound = verified[K - 1][0][0] if len(verified) >= K else None
        if clock.expired(phase):
            break
        res = model.solve(bound=bound, time_limit=clock.remaining(0.01))
        clock.report(phase, rounds)
        if res.status == "infeasible":
            return [ev for _, ev in verified], (Status.OPTIMAL if verified else Status.INFEASIBLE), rounds, \
                (0.0 if verified else None), evaluated
        if res.status == "error":
            raise SolverFailure(res.detail)
        if res.status in ("limit", "unknown"):  # "unknown": a backend that cannot tell why it stopped
            solver_stopped(clock, res, phase)
            lower = res.bound if res.bound is not None else lower
            break
        lower = res.objective_lb if res.status == "candidate" else res.bound
        ev = evaluate_assignment(space, res.assignment)
        evaluated += 1
        model.exclude(res.assignment)
        if feasible_for(ev, enforced):
            verified.append((objective_key(ev, req.objective), ev))
            verified.sort(key=lambda kv: kv[0])
            verified = verified[:K]
        if res.status == "feasible":  # time limit inside the solver: no proof
            solver_stopped(clock, res, phase)
            break
    plans = [ev for _, ev in verified]
    if not plans:
        return plans, Status.UNKNOWN, rounds, None, evaluated
    kth = verified[-1][0][0] if len(verified) >= K else None
    return plans, Status.FEASIBLE, rounds, relative_gap(kth, lower), evaluated
