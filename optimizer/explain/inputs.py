"""The inputs explain frees one at a time: each one's change of scenario, its units and how an answer is settled.

``with_*`` returns the scenario with one input changed (nothing else); :data:`PARAMS` declares each input (name,
unit, the families it moves); :class:`Relaxation` is one answer. :func:`_settle` rounds an exact threshold in the
safe direction to the printed precision and re-solves at exactly that value, so the plan shown is the cheapest
plan of the scenario the user would write.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from tpopt.catalogs.scenario import build_scenario, with_overrides
from tpopt.errors import InputError
from tpopt.models import families as F
from tpopt.models.evaluate import Evaluation
from tpopt.models.plan import Scenario, System
from tpopt.models.units import (
    DAY,
    GB,
    GIB,
    parse_bandwidth,
    parse_bytes,
    parse_count,
    parse_duration,
    parse_fraction,
    parse_int,
    parse_number,
)
from tpopt.optimizer.explain.context import Context

# ---------------------------------------------------------------------------------------------
# scenario modifiers: one input changed, everything else as it was


def with_deadline(sc: Scenario, seconds: float) -> Scenario:
    return replace(sc, task=replace(sc.task, deadline_s=float(seconds)))


def with_reserved(sc: Scenario, seconds: float) -> Scenario:
    return replace(sc, task=replace(sc.task, reserved_s=float(seconds)))


def with_tokens(sc: Scenario, tokens: float) -> Scenario:
    return replace(sc, task=replace(sc.task, tokens=float(tokens)))


def with_max_cards(sc: Scenario, cards: int) -> Scenario:
    return replace(sc, search=replace(sc.search, max_cards=int(cards)))


def with_max_cost(sc: Scenario, cost: float) -> Scenario:
    return replace(sc, cost=replace(sc.cost, max_cost=float(cost)))


def with_efficiency(sc: Scenario, eta: float) -> Scenario:
    """Compute efficiency (MFU) of every candidate accelerator set to ``eta``."""
    return replace(sc, systems={k: replace(s, efficiency=float(eta)) for k, s in sc.systems.items()})


def with_usable_memory(sc: Scenario, usable: float) -> Scenario:
    """Usable memory per card raised to at least ``usable`` bytes on every candidate (never lowered)."""
    return replace(sc, systems={k: replace(s, acc=replace(s.acc, memory_usable=max(s.acc.memory_usable,
                                                                                        float(usable))))
                                for k, s in sc.systems.items()})


def with_max_drop(sc: Scenario, share: float) -> Scenario:
    """The largest share of dispatches a capacity factor may drop (MoE models) set to ``share``."""
    return replace(sc, moe=replace(sc.moe, max_drop=float(share)))


def with_write_bandwidth(sc: Scenario, bytes_per_s: float) -> Scenario:
    """The aggregate checkpoint storage write bandwidth set to ``bytes_per_s``."""
    return replace(sc, reliability=replace(sc.reliability, write_bandwidth=float(bytes_per_s)))


def with_input_rate(sc: Scenario, per_worker: float) -> Scenario:
    """The input pipeline's sequences per worker-second set to ``per_worker`` (worker counts unchanged)."""
    return replace(sc, input=replace(sc.input, per_worker_rate=float(per_worker)))


def with_nics_per_host(sc: Scenario, nics: tuple[int, ...]) -> Scenario:
    """The NICs per host searched set to ``nics`` (each accelerator keeps those its hosts can take)."""
    return replace(sc, search=replace(sc.search, nics_per_host=tuple(nics)))


def with_nic_factor(sc: Scenario, factor: float) -> Scenario:
    """Every candidate's NIC bandwidth multiplied by ``factor``."""
    return replace(sc, systems={k: replace(s, acc=replace(s.acc, nic_bw=s.acc.nic_bw * float(factor)))
                                for k, s in sc.systems.items()})


# ---------------------------------------------------------------------------------------------
# relaxations


@dataclass(frozen=True)
class Param:
    """A relaxable input: how it prints, which way it must move, which families it enters."""

    name: str
    label: str
    unit: str
    digits: int
    direction: str  # ">=" (raise it) or "<=" (lower it)
    override: str | None = None  # raw-table key that sets it ("table.key")
    per_unit: float = 1.0  # SI value of one display unit

    @property
    def affects(self) -> tuple[str, ...]:
        """Constraint families whose value or limit depends on the input (declared by each family)."""
        return F.affected_by(self.name)


PARAMS = {
    "deadline": Param("deadline", "deadline", "d", 2, ">=", "schedule.deadline", DAY),
    "max_cards": Param("max_cards", "max cards", "cards", 0, ">=", "search.max_cards", 1.0),
    "tokens": Param("tokens", "tokens", "B tokens", 2, "<=", "task.tokens", 1e9),
    "efficiency": Param("efficiency", "efficiency (MFU)", "%", 2, ">=", "hardware.efficiency", 0.01),
    "usable_memory": Param("usable_memory", "usable memory per card", "GiB", 2, ">=", "hardware.usable_memory", GIB),
    "nic_bandwidth": Param("nic_bandwidth", "NIC bandwidth", "GB/s", 2, ">=", "hardware.nic", GB),
    "reserved": Param("reserved", "reserved days", "d", 2, "<=", "schedule.reserved", DAY),
    "max_cost": Param("max_cost", "budget cap", "USD", 2, ">=", "cost.max_cost", 1.0),
    "max_drop": Param("max_drop", "maximum drop rate", "%", 2, ">=", "moe.max_drop", 0.01),
    "accelerator": Param("accelerator", "accelerator", "", 0, "=", "hardware.accelerator"),
    "card_price": Param("card_price", "price per card-hour", "USD", 2, "<=", "cost.card_hour", 1.0),
    "write_bandwidth": Param("write_bandwidth", "storage bandwidth", "GB/s", 1, ">=", "checkpoint.write_bandwidth",
                             GB),
    "global_batch": Param("global_batch", "global batch", "sequences", 0, ">=", "task.global_batch", 1.0),
    "input_rate": Param("input_rate", "input rate per worker", "seq/s", 2, ">=", "input.sequences_per_worker_s",
                        1.0),
    "nics_per_host": Param("nics_per_host", "NICs per host", "NICs", 0, ">=", "search.nics_per_host", 1.0),
}

_SUFFIX = {"deadline": "d", "reserved": "d", "tokens": "B", "efficiency": "%", "usable_memory": "GiB",
           "nic_bandwidth": "GB/s", "max_drop": "%", "write_bandwidth": "GB/s"}
_PARSE: dict[str, Callable[[str], float]] = {
    "deadline": lambda s: parse_duration(s, "deadline", allow_zero=False),
    "reserved": lambda s: parse_duration(s, "reserved"),
    "tokens": lambda s: parse_count(s, "tokens", allow_zero=False),
    "efficiency": lambda s: parse_fraction(s, "efficiency"),
    "usable_memory": lambda s: parse_bytes(s, "usable memory", allow_zero=False),
    "nic_bandwidth": lambda s: parse_bandwidth(s, "NIC bandwidth", allow_zero=False),
    "max_cards": lambda s: parse_int(s, "max cards", minimum=1),
    "max_cost": lambda s: parse_number(s, "max cost"),
    "max_drop": lambda s: parse_fraction(s, "max drop", allow_zero=True),
    "write_bandwidth": lambda s: parse_bandwidth(s, "storage bandwidth", allow_zero=False),
    "input_rate": lambda s: parse_number(s, "input rate")}


@dataclass
class Relaxation:
    """The smallest change of one input that makes the request feasible (or why none does)."""

    parameter: str
    current: float | str | None
    required: float | str | None  # rounded the safe way to ``digits``; applying it is verified feasible
    unit: str
    helps: bool | None  # None: undecided (time limit)
    direction: str = ">="
    required_exact: float | None = None  # the threshold itself (a bound within the stated tolerance)
    plan: Evaluation | None = None  # cheapest plan of the scenario with ``required`` applied
    apply: dict[str, Any] | None = None  # raw-table overrides ({"table.key": value}) that apply ``required``
    method: str = ""
    note: str = ""
    blocked_by: list[str] = field(default_factory=list)  # a conflict among families this input does not enter
    options: list[dict[str, Any]] = field(default_factory=list)  # accelerator: every catalog accelerator tried
    current_by_card: dict[str, float] | None = None  # a per-card input with several candidates: each card's value
    chain: dict[str, Any] | None = None  # max_cards cannot help alone: the changes that let it (explain.chain)
    seconds: float = 0.0
    solves: int = 0

    @property
    def label(self) -> str:
        return PARAMS[self.parameter].label

    def as_dict(self, confidence: float | None = None) -> dict[str, Any]:
        """The relaxation as JSON; under a ``confidence`` its plan's finish quantile at that level beside its
        nominal finish (``finish_days``), the kind a deadline relaxation's ``required`` is."""
        d: dict[str, Any] = {"parameter": self.parameter, "current": self.current, "required": self.required,
                             "unit": self.unit, "direction": self.direction, "helps": self.helps,
                             "required_exact": self.required_exact, "method": self.method}
        if self.plan is not None:
            d["plan"] = self.plan.plan_dict()
            d["cost"] = self.plan.metrics["cost"]
            d["cost_unit"] = self.plan.metrics["cost_unit"]
            d["finish_days"] = self.plan.metrics["finish_days"]  # the nominal finish
            if confidence is not None:  # the plan's finish quantile at it: what deadline.finish compares
                d["confidence"] = confidence
                d["finish_quantile_days"] = next((c.value for c in self.plan.constraints if c.name == F.DEADLINE),
                                                 None)
        d["apply"] = self.apply
        if self.note:
            d["note"] = self.note
        if self.blocked_by:
            d["blocked_by"] = list(self.blocked_by)
        if self.options:
            d["options"] = self.options
        if self.current_by_card:
            d["current_by_card"] = self.current_by_card
        if self.chain:  # explain.chain.beyond_cards: its plan as a report's plan dict with its cost and finish
            ev: Evaluation = self.chain["plan"]
            d["chain"] = {**{k: v for k, v in self.chain.items() if k != "plan"}, "plan": ev.plan_dict(),
                          "cost": ev.metrics["cost"], "cost_unit": ev.metrics["cost_unit"],
                          "finish_days": ev.metrics["finish_days"]}
        d["seconds"] = round(self.seconds, 4)
        d["solves"] = self.solves
        return d


def _single(sc: Scenario) -> System | None:
    """The scenario's only candidate system, or None when it lists several."""
    return next(iter(sc.systems.values())) if len(sc.systems) == 1 else None


def _round_safe(x: float, digits: int, direction: str) -> float:
    """``x`` rounded to ``digits`` decimals towards feasibility (up for >=, down for <=)."""
    f = 10.0**digits
    v = x * f
    r = math.ceil(v - 1e-9 * max(1.0, abs(v))) if direction == ">=" else math.floor(v + 1e-9 * max(1.0, abs(v)))
    return r / f


def _fmt_value(x: float, digits: int) -> str:
    return f"{x:.{digits}f}" if digits > 0 else f"{int(round(x))}"


CARD_KEYS = {"usable_memory": "usable_memory", "nic_bandwidth": "nic"}  # per-card keys of [hardware]


def _apply_dict(ctx: Context, p: Param, value: object) -> dict[str, Any] | None:
    """Raw-table overrides that set ``value``. A per-card key ([hardware] usable_memory, nic) is also
    written into each candidate's own [hardware.<name>] table when that table sets it (the own
    table wins over the top-level key, so the top-level key alone would change nothing)."""
    if not p.override:
        return None
    out: dict[str, Any] = {p.override: value}
    key = CARD_KEYS.get(p.name)
    hw = (ctx.raw or {}).get("hardware", {})
    if key:
        for name in ctx.sc.systems:
            sub = hw.get(name)
            if isinstance(sub, dict) and key in sub:
                out[f"hardware.{name}"] = dict(sub, **{key: value})
    return out


def _applies(ctx: Context, apply: dict[str, Any]) -> bool:
    """Does the override dict, applied to the raw tables, give a feasible scenario? (True when the
    raw tables are unknown: the value itself was verified on the scenario.)"""
    if ctx.raw is None:
        return True
    try:
        sc = build_scenario(with_overrides(ctx.raw, apply), ctx.catalog)
    except InputError:
        return False
    return ctx.feasible(sc) is not None


def _settle(ctx: Context, p: Param, exact_units: float, modify: Callable[[float], Scenario],
            si_of_units: Callable[[float], float] | None = None
            ) -> tuple[float | None, Evaluation | None, dict[str, Any] | None]:
    """Round ``exact_units`` the safe way, re-solve with the rounded value and step one unit of the
    last digit further (at most 3 times) if rounding or floating point made it infeasible. The
    override dict is re-checked through the raw tables (the path a user's edit takes).

    Returns (rounded value, cheapest plan, apply dict or None).
    """
    step = 10.0**-p.digits * (1 if p.direction == ">=" else -1)
    value = _round_safe(exact_units, p.digits, p.direction)
    apply_value: int | str | None
    for _ in range(4):
        if p.name in _PARSE and si_of_units is None:
            text = _fmt_value(value, p.digits) + _SUFFIX.get(p.name, "")
            try:
                si = _PARSE[p.name](text)  # exactly what a user gets from the printed value
            except InputError:
                break  # e.g. above 100 % efficiency
            apply_value = int(round(value)) if p.digits == 0 else text
        else:
            to_si: Callable[[float], float] = si_of_units or (lambda u: u * p.per_unit)
            si = to_si(value)
            apply_value = None
        ev = ctx.feasible(modify(si))
        if ev is not None:
            apply = _apply_dict(ctx, p, apply_value) if apply_value is not None else None
            if apply is not None and not _applies(ctx, apply):
                apply = None
            return value, ev, apply
        value = round(value + step, p.digits)
        if p.direction == "<=" and value < 0:
            break
    return None, None, None


def _relaxation(p: Param, current: float | str | None, **kw: Any) -> Relaxation:
    return Relaxation(parameter=p.name, current=current, unit=p.unit, direction=p.direction, **kw)


def _cannot(p: Param, current: float | str | None, note: str, method: str, core: list[str] | None = None
            ) -> Relaxation:
    return _relaxation(p, current, required=None, helps=False, note=note, method=method)


def with_card_price_scale(sc: Scenario, f: float) -> Scenario:
    """Every candidate card's price per card-hour times ``f`` (NIC prices unchanged)."""
    return replace(sc, systems={k: replace(s, price_card_hour=s.price_card_hour * f)
                                for k, s in sc.systems.items() if s.price_card_hour is not None})
