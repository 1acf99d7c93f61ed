"""The backends' shared vocabulary: what a backend implements and what its encodings, the solve-verify loop
(:mod:`tpopt.optimizer.backends.verify`) and the layout decomposition (:mod:`tpopt.optimizer.decompose`) say to
one another.

A ground module: it imports no solver library and no other tpopt module at run time (annotations only), so the
registry, the loop, the decomposition and every encoding import it instead of each other.

- :class:`Backend`: the doors a backend opens (its model of the whole space, its decomposition master, or a
  whole-space solve), each taking the selected name (a family member's full name, ``pyomo:scip``);
- :class:`RelaxedModel` and :class:`CandidateResult`: a model of the whole space and one of its answers;
- :class:`Master`, :data:`MasterAnswer`, :class:`MasterBounds` and :data:`Allowed`: a decomposition master,
  its answer, and what it reads of the layout bounds;
- :class:`SolverFailure`, :class:`CapabilityError`, :func:`relative_gap`, :func:`solver_stopped`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

import numpy as np
from numpy.typing import NDArray

if TYPE_CHECKING:  # annotations only: a ground module imports nothing of tpopt at run time
    from tpopt.models.evaluate import Evaluation
    from tpopt.optimizer.limits import Clock
    from tpopt.optimizer.result import Request, SolverInfo, Status
    from tpopt.optimizer.space import Space

__all__ = ["SOLVER_SLACK_S", "SolverFailure", "CapabilityError", "CandidateResult", "RelaxedModel", "Allowed",
           "MasterAnswer", "MasterBounds", "Master", "MasterOf", "Backend", "relative_gap", "solver_stopped"]

SOLVER_SLACK_S = 0.5  # a solver stopping this close to the deadline stopped for the deadline


class SolverFailure(Exception):
    """A backend stopped without an answer for a reason other than the time limit."""


class CapabilityError(RuntimeError):
    """A backend was asked for what its :class:`~tpopt.optimizer.backends.Capabilities` say it lacks (a model, a
    master, a whole-space solve): a programming error, since every caller branches on the flags first."""

    def __init__(self, backend: str, what: str) -> None:
        super().__init__(f"{backend} has no {what} (its capabilities say so; the caller should have checked)")


@dataclass
class CandidateResult:
    """One solver call of the solve-verify loop.

    status: "candidate" (optimal for the relaxed encoding), "feasible" (the solver's time limit
    stopped it with a point), "infeasible" (proven), "limit" (time limit, no point) or "error"
    (the solver failed for another reason; ``detail`` says which). ``bound``: a proven lower bound
    of the relaxed objective over the remaining assignments (objective units), when known.
    """

    status: str
    assignment: dict[str, int] | None = None
    objective_lb: float | None = None
    bound: float | None = None
    detail: str = ""


class RelaxedModel(Protocol):
    """A backend's model of the whole space, as the solve-verify loop drives it (CP-SAT, HiGHS, Pyomo)."""

    def solve(self, bound: float | None = None, time_limit: float = 60.0) -> CandidateResult: ...

    def exclude(self, assignment: Mapping[str, int]) -> None: ...


Allowed: TypeAlias = Mapping[str, NDArray[np.bool_]]
"""Family -> the layouts (flat hub index) its relaxed condition allows
(:meth:`tpopt.optimizer.decompose.LayoutBounds.allowed`)."""
MasterAnswer: TypeAlias = tuple[str, int | str | None]
"""A master's (status, layout index): "candidate" / "feasible" with the index, "infeasible" / "limit" with None,
"error" with the message."""


class MasterBounds(Protocol):
    """What a master reads of the layout bounds (:class:`tpopt.optimizer.decompose.LayoutBounds`)."""

    @property
    def n(self) -> int:
        """Number of layouts (the flat hub index runs over ``range(n)``)."""
        ...

    @property
    def objective_min(self) -> NDArray[Any]:
        """Per layout, a valid lower bound of the objective over the plans of that layout (inf: none)."""
        ...


class Master(Protocol):
    """A decomposition master problem (the CP-SAT, HiGHS and Pyomo masters)."""

    def exclude(self, h: int) -> None: ...

    def solve(self, bound: float | None, time_limit: float) -> MasterAnswer: ...


MasterOf: TypeAlias = Callable[[str, "Space", MasterBounds, Allowed, "Request"], Master]
"""``master_of(name, space, bounds, allowed, req)``: a backend's master (:meth:`Backend.master`)."""


class Backend(Protocol):
    """The interface a backend implements (the doors its capabilities open; see
    :mod:`tpopt.optimizer.backends`)."""

    def require(self, name: str, req: Request) -> None: ...

    def model(self, name: str, space: Space, req: Request) -> RelaxedModel: ...

    def master(self, name: str, space: Space, bounds: MasterBounds, allowed: Allowed, req: Request) -> Master: ...

    def solve_space(self, name: str, space: Space, req: Request, info: SolverInfo
                    ) -> tuple[list[Evaluation], Status]: ...


def relative_gap(best: float | None, bound: float | None) -> float | None:
    """(best - bound) / |best|, 0 when the bound meets the best; None when either is unknown."""
    if best is None or bound is None or not math.isfinite(bound) or not math.isfinite(best):
        return None
    if best == 0:
        return 0.0 if bound >= 0 else None
    return max(0.0, (best - min(bound, best)) / abs(best))


def solver_stopped(clock: Clock, res: CandidateResult, phase: str) -> None:
    """A solver said it hit its time limit: the status is "time limit" only if the shared clock
    agrees (the solver was given what remained of it); otherwise the solver failed."""
    if not clock.expired(phase) and clock.remaining() > SOLVER_SLACK_S:
        raise SolverFailure(f"solver stopped with {clock.remaining():.2f} s of the time limit left "
                            f"({res.detail or res.status})")
    clock.reached, clock.phase = True, clock.phase or phase
