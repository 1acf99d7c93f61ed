"""What :func:`tpopt.optimizer.plan.plan` reports about a request without a feasible plan.

Proven infeasible: an irreducible conflict, each of its families' closest plan meeting the others, and
the smallest single change of each input (:func:`tpopt.optimizer.explain.infeasibility`); the solver
out of time (``unknown``): empty conflict and relaxations, as ``tpopt solve`` prints them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tpopt.models.plan import Scenario
from tpopt.optimizer.backends import Solver
from tpopt.optimizer.explain import infeasibility
from tpopt.optimizer.result import Request, SolveResult, Status
from tpopt.optimizer.space import Space

RelaxationInputs = Callable[[], tuple[dict[str, Any] | None, Any]]
"""Returns the scenario's raw tables and the catalog (the accelerator relaxation rebuilds the scenario
from them); called only when infeasibility is proven."""


def infeasible_entries(sc: Scenario, space: Space, backend: Solver, req: Request, result: SolveResult,
                       inputs: RelaxationInputs | None = None,
                       progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """``conflict``, ``conflict_detail``, ``relaxations`` (and ``conflict_status`` when the time limit
    cut the conflict short) for ``result``, a solve of ``sc`` without a plan over ``space``."""
    out: dict[str, Any] = {"conflict": [], "conflict_detail": [], "relaxations": []}
    if result.status == Status.INFEASIBLE:
        raw, catalog = inputs() if inputs is not None else (None, None)
        out.update(infeasibility(sc, space, backend, req, result.enforced, raw=raw, catalog=catalog,
                                 progress=progress))
    return out
