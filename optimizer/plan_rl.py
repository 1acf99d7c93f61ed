"""`plan_rl()`: RL post-training planned as ``tpopt rl`` does (the RL counterpart of :func:`tpopt.optimizer.plan.plan`,
in a module of its own so that the pre-training commands never load the RL model at start-up)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tpopt.models.rl import RLScenario
from tpopt.optimizer import backends, rl
from tpopt.optimizer.limits import clock_of
from tpopt.optimizer.result import Request, Status


@dataclass
class RLPlanReport:
    """What ``tpopt rl`` reports: the RL solve (``result``: status, objective, best RL plan), the command's
    JSON (``report``, :func:`tpopt.optimizer.rl.report`) and the problem both were computed on (``problem``:
    its caches and clock)."""

    result: rl.RLResult
    report: dict[str, Any]
    problem: rl.RLProblem

    @property
    def status(self) -> Status:
        return self.result.status

    @property
    def feasible(self) -> bool:
        return self.result.feasible


def plan_rl(rsc: RLScenario, backend: str | backends.Solver = backends.DEFAULT, req: Request | None = None, *,
            analyse: bool = True) -> RLPlanReport:
    """Solve an RL scenario as ``tpopt rl`` does: the exact RL search for ``req.objective``
    (:func:`tpopt.optimizer.rl.solve`, the learner's layouts by ``backend``), then its report -- the binding
    families, the alternatives and the async break-even unless ``analyse`` is off; for an infeasible scenario
    the conflict and the relaxations. One clock for all of it: ``req.clock``, else one of ``req.time_limit``
    started here."""
    req = req or Request()
    pb = rl.RLProblem(rsc, backend, req)  # an unknown backend fails here
    pb.backend.require(req)  # a missing solver fails here, before any work
    clock_of(req)  # the solve and its analysis share it
    result = rl.solve(pb, req.objective)
    return RLPlanReport(result, rl.report(pb, result, analyse=analyse, break_even=analyse), pb)
