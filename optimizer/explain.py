"""Why a request is infeasible: the conflicting constraint families (CP-SAT assumptions)."""

from __future__ import annotations

from tpopt.optimizer.result import Request
from tpopt.optimizer.space import FAMILIES, Space


def conflict(space: Space, req: Request, enforced=None) -> list[str] | None:
    """A set of enforced families that cannot hold together (CP-SAT sufficient assumptions), or None
    when the request is feasible (or the solver ran out of time)."""
    from tpopt.optimizer.cpsat import CpSatModel

    enforced = frozenset(FAMILIES) if enforced is None else frozenset(enforced)
    model = CpSatModel(space, Request(objective=req.objective, enforce=enforced, seed=req.seed,
                                      cards=req.cards), assumptions=True)
    return model.conflict(time_limit=req.time_limit)
