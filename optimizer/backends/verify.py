"""The solve-verify loop every relaxing backend runs, and :class:`RelaxedBackend`, their registry adapter (what
they share with the decomposition is :mod:`tpopt.optimizer.backends.protocol`).

A backend's encoding is a *relaxation* (table values rounded towards feasibility and a lower objective),
so every candidate it returns is re-evaluated with the exact evaluator; an infeasible one is cut with a
no-good and the search continues until no unexamined assignment can beat the K-th best verified plan.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, cast

from tpopt.models import families as F
from tpopt.models.evaluate import Evaluation, evaluate
from tpopt.optimizer.backends.protocol import (
    Allowed,
    CapabilityError,
    Master,
    MasterBounds,
    RelaxedModel,
    SolverFailure,
    relative_gap,
    solver_stopped,
)
from tpopt.optimizer.limits import clock_of
from tpopt.optimizer.result import Request, Status, objective_key
from tpopt.optimizer.space import Space

if TYPE_CHECKING:
    from tpopt.optimizer.result import SolverInfo


class RelaxedBackend:
    """A backend that answers through a relaxed model of the whole space, which :func:`verify_loop` drives,
    and a master problem for the layout decomposition (CP-SAT, HiGHS): the registry's adapter for both."""

    def __init__(self, label: str, model: Callable[[Space, Request], RelaxedModel],
                 master: Callable[[Space, MasterBounds, Allowed, Request], Master]) -> None:
        self.label, self._model, self._master = label, model, master

    def require(self, name: str, req: Request) -> None:
        """Nothing to check: the solver library is one of tpopt's dependencies."""

    def model(self, name: str, space: Space, req: Request) -> RelaxedModel:
        return self._model(space, req)

    def master(self, name: str, space: Space, bounds: MasterBounds, allowed: Allowed, req: Request) -> Master:
        return self._master(space, bounds, allowed, req)

    def solve_space(self, name: str, space: Space, req: Request, info: SolverInfo) -> None:
        raise CapabilityError(self.label, "whole-space solve (it answers through its model and the solve-verify loop)")


def evaluate_assignment(space: Space, idx: Mapping[str, int]) -> Evaluation:
    """The exact evaluation of one assignment (domain indices) of ``space``."""
    return evaluate(space.sc, space.plan(idx))


def feasible_for(ev: Evaluation, enforced: Collection[str]) -> bool:
    """Feasible with respect to the enforced families (step.budget follows deadline.finish)."""
    for c in ev.constraints:
        name = F.encoded_as(c.name)
        if name in enforced and not c.satisfied:
            return False
    return True


def verify_loop(model: RelaxedModel, space: Space, req: Request, enforced: Collection[str]
                ) -> tuple[list[Evaluation], Status, int, float | None, int]:
    """Solve the relaxed encoding, verify candidates exactly, cut no-goods, until proven.

    Invariant: every assignment not yet cut has a relaxed objective <= its exact objective. Stop when
    the relaxed optimum of the remaining assignments exceeds the K-th best verified objective (or none
    remains). Ties within rounding are all examined, so the K best are exact. When the clock runs out,
    the gap is measured against the last proven lower bound of the unexamined assignments.
    """
    K = max(1, req.top)
    clock = clock_of(req)
    verified: list[tuple[tuple[float, float], Evaluation]] = []
    rounds = 0
    evaluated = 0
    lower: float | None = None  # proven lower bound of the relaxed objective over the assignments not yet cut
    phase = "solving and verifying candidates"
    while True:
        rounds += 1
        bound = verified[K - 1][0][0] if len(verified) >= K else None
        if clock.expired(phase):
            break
        res = model.solve(bound=bound, time_limit=clock.remaining(0.01))
        clock.report(phase, rounds, best=verified[0][0][0] if verified else None, bound=lower,
                     objective=req.objective)
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
        assignment = cast(dict[str, int], res.assignment)  # "candidate" or "feasible": a point
        ev = evaluate_assignment(space, assignment)
        evaluated += 1
        model.exclude(assignment)
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
