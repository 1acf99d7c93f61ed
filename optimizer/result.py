"""One result type for every backend (after linopy's Result/SolverReport)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from tpopt.frames import records_frame
from tpopt.models.evaluate import Evaluation
from tpopt.models.units import DAY
from tpopt.models.variables import PLAN_RECORD
from tpopt.optimizer.limits import Clock

if TYPE_CHECKING:
    import pandas as pd


class Status(str, Enum):  # noqa: UP042 - StrEnum would change str() of a member ("optimal", not "Status.OPTIMAL")
    OPTIMAL = "optimal"  # proven optimal (and re-evaluated exactly)
    FEASIBLE = "feasible"  # a feasible plan, optimality not proven (time limit)
    INFEASIBLE = "infeasible"  # proven: no plan satisfies the enforced constraints
    UNKNOWN = "unknown"  # time limit before any feasible plan or proof


@dataclass
class SolverInfo:
    name: str
    wall_s: float = 0.0
    gap: float | None = 0.0  # relative gap between the best plan and the proven bound
    rounds: int = 0  # solve-verify rounds (exactness loop) or enumeration chunks
    points: int = 0  # size of the design space
    evaluated: int = 0  # plans evaluated exactly (enumerator: all points)
    note: str = ""
    limit_reached: bool = False  # the shared clock ran out (the only case a status is "time limit")
    limit_phase: str = ""  # the phase in which it ran out
    fallback: str = ""  # why another formulation answered (e.g. the integer ranges did not fit)
    # the layout decomposition's proof: the least bound of the layouts it left unexamined (objective units;
    # inf: none left), at least the best plan's objective when the optimum is proven
    certificate: float | None = None

    def as_dict(self) -> dict[str, Any]:
        out = {"name": self.name, "method": self.note, "wall_s": round(self.wall_s, 4), "gap": self.gap,
               "rounds": self.rounds, "points": self.points, "evaluated": self.evaluated,
               "time_limit_reached": self.limit_reached, "limit_phase": self.limit_phase or None,
               "fallback": self.fallback or None}
        if self.certificate is not None:  # JSON has no infinity: null then means nothing was left to bound
            out["certificate"] = self.certificate if self.certificate < float("inf") else None
        return out


@dataclass
class Request:
    """What to optimise and which constraint families to enforce."""

    objective: str = "cost"  # "cost" (then finish time) or "time" (then cost)
    enforce: frozenset[str] | None = None  # families enforced; None = all
    top: int = 1  # how many best plans to return
    time_limit: float = 60.0
    seed: int = 0
    workers: int = 1
    cards: tuple[int, ...] | None = None  # allowed card counts (None: any)
    method: str = "auto"  # solver backends: "monolithic", "decomposed", "on-demand", or "auto" (by table size)
    # plans whose objective (its primary key: cost, or finish in s) exceeds it are not sought: the on-demand
    # decomposition starts from it as if a plan had it, so none found reads "infeasible" as "none up to it"
    # (every other backend returns the optimum as without it); None: every plan
    cutoff: float | None = None
    clock: Clock | None = field(default=None, compare=False, repr=False)  # shared by every phase
    # the solver was named (``--solver``): the tiny-space rule keeps it where enumeration is not measured faster
    solver_named: bool = field(default=False, compare=False)

    def enforced(self, families: Iterable[str]) -> frozenset[str]:
        return frozenset(families) if self.enforce is None else frozenset(self.enforce)


@dataclass
class SolveResult:
    status: Status
    objective: str
    plans: list[Evaluation] = field(default_factory=list)  # best first
    solver: SolverInfo = field(default_factory=lambda: SolverInfo("none"))
    enforced: tuple[str, ...] = ()

    @property
    def best(self) -> Evaluation | None:
        return self.plans[0] if self.plans else None

    @property
    def feasible(self) -> bool:
        return self.status in (Status.OPTIMAL, Status.FEASIBLE) and bool(self.plans)

    def to_dict(self) -> dict[str, Any]:
        """Status, objective, solver statistics and every plan returned (best first, with ``rank``)."""
        return {"status": self.status.value, "objective": self.objective, "solver": self.solver.as_dict(),
                "enforced": list(self.enforced),
                "plans": [dict(ev.as_dict(), rank=i + 1) for i, ev in enumerate(self.plans)]}

    def to_frame(self) -> pd.DataFrame:
        """One row per plan returned (best first): ``rank``, the plan's fields, every metric and
        ``feasible``; integer columns (cards, tp, zero_stage, ...) stay integers. Empty when no plan."""

        return records_frame([{"rank": i + 1, **ev.row()} for i, ev in enumerate(self.plans)])


def objective_key(ev: Evaluation, objective: str) -> tuple[float, float]:
    """Lexicographic objective of an evaluated plan: (cost, finish) or (finish, cost).

    Units are the backends' own: cost in currency (card-hours without prices), finish in seconds.
    Every solver bound is compared against the primary key, so the two must agree.
    """
    c, f = ev.metrics["cost"], ev.metrics["finish_days"] * DAY
    return (c, f) if objective == "cost" else (f, c)


def objective_value(ev: Evaluation, objective: str) -> float:
    """The objective in display units: cost in currency (card-hours without prices), finish in days."""
    value: float = ev.metrics["cost"] if objective == "cost" else ev.metrics["finish_days"]
    return value


def plan_summary(ev: Evaluation) -> dict[str, Any]:
    """A plan's layout and headline figures, as reports quote it."""
    quoted = [f for f in PLAN_RECORD if f.summary]  # the plan's own keys first, the MoE keys after the figures
    return {**{f.key: f.of(ev.plan, ev.metrics) for f in quoted if not f.moe},
            "cost": ev.metrics["cost"], "cost_unit": ev.metrics["cost_unit"],
            "finish_days": ev.metrics["finish_days"], **{f.key: f.of(ev.plan, ev.metrics) for f in quoted if f.moe}}
