"""Why no offer of a market admits a plan: the conflict on the offer nearest a plan, and changes verified on the
market.

A market (``[market]`` offers, ``--hw all``) is one exact sub-problem per offer (:mod:`tpopt.optimizer.market`),
so one space's conflict and relaxations (:mod:`tpopt.optimizer.explain`) do not span it. When every offer is
proven infeasible:

1. The nearest offer (:func:`nearest_offer`): the offer whose fastest plan, with the deadline and the budget
   dropped, finishes first, T* = min over offers o of min over plans of o meeting the other families of
   T_finish (ties: catalog order); when no offer has a plan at any deadline, the offer with the most cards it
   can use (its availability, the site power cap and max_cards).
2. Its irreducible conflict and each family's closest plan (:func:`~tpopt.optimizer.explain.minimal_conflict`,
   :func:`~tpopt.optimizer.explain.conflict_detail`), and the smallest single change of each input on it
   (:func:`~tpopt.optimizer.explain.relaxations`; not the accelerator or the card price, which the offers are).
3. The inputs every offer shares (:data:`MARKET_INPUTS`: deadline, tokens, reserved days, input rate, budget,
   storage bandwidth) verified on the whole market (:func:`market_value`): the market re-solved with the value
   admits a plan, and with the value one printed unit less favourable admits none; when it admits one (another
   offer needs less), the value is bisected on the market at the printed precision (each input is monotone:
   more time, fewer tokens, a faster input pipeline or a larger budget never removes a plan). The other inputs
   (cards, memory, NICs, ...) are the nearest offer's own and say so.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

from tpopt.models import families as F
from tpopt.models.evaluate import Evaluation
from tpopt.models.plan import Scenario
from tpopt.optimizer import core
from tpopt.optimizer import market as MK
from tpopt.optimizer.backends import Solver
from tpopt.optimizer.explain import conflict_detail, minimal_conflict, relaxations
from tpopt.optimizer.explain.context import Context
from tpopt.optimizer.explain.inputs import (
    PARAMS,
    Relaxation,
    with_deadline,
    with_input_rate,
    with_max_cost,
    with_reserved,
    with_tokens,
    with_write_bandwidth,
)
from tpopt.optimizer.limits import TimeLimitReached, Undecided, clock_of
from tpopt.optimizer.result import Request, Status
from tpopt.optimizer.space import FAMILIES, Space

MARKET_INPUTS: dict[str, Callable[[Scenario, float], Scenario]] = {
    "deadline": with_deadline, "tokens": with_tokens, "reserved": with_reserved, "input_rate": with_input_rate,
    "max_cost": with_max_cost, "write_bandwidth": with_write_bandwidth,
}
"""The inputs every offer shares, each with the change of the market's scenario (SI units): their relaxations
are verified on the whole market."""

OFFER_ONLY = ("accelerator", "card_price")
"""Not asked on the nearest offer: the offers are the accelerators and their prices."""


def _fastest(row: MK.OfferSolve, solver: Solver, req: Request) -> Evaluation | None:
    """The offer's fastest plan meeting every enforced family but the deadline and the budget."""
    enforce = frozenset(f for f in req.enforced(FAMILIES) if f not in (F.DEADLINE, F.BUDGET))
    r = core.solve(row.sc, solver, Request(objective="time", enforce=enforce, time_limit=req.time_limit,
                                            seed=req.seed, workers=req.workers, clock=req.clock))
    return r.best


def nearest_offer(ms: MK.MarketSolve, solver: Solver, req: Request) -> tuple[MK.OfferSolve, float | None]:
    """The offer nearest a plan (module, 1) and its fastest finish in days with the deadline and budget dropped
    (None: no offer has a plan at any deadline). Offers of one card with the same card cap and preemption terms
    share one solve (their prices differ, which the fastest plan does not read)."""
    seen: dict[tuple[Any, ...], float | None] = {}
    best: tuple[MK.OfferSolve, float] | None = None
    for row in ms.offers:
        o = row.offer
        key = (o.accelerator, row.sc.search.max_cards, row.sc.market.preempt_per_card_s, o.reacquire_s)
        if key not in seen:
            ev = _fastest(row, solver, req)
            seen[key] = ev.metrics["finish_days"] if ev is not None else None
        fin = seen[key]
        if fin is not None and (best is None or fin < best[1]):
            best = (row, fin)
    if best is not None:
        return best
    most = max(r.sc.search.max_cards for r in ms.offers)
    return next(r for r in ms.offers if r.sc.search.max_cards == most), None


def _feasible(sc: Scenario, solver: Solver, req: Request) -> MK.MarketSolve:
    return MK.solve_market(sc, solver, req, partial(core.tiny_solver, named=req.solver_named))


def market_value(sc: Scenario, name: str, value: float, current: float, solver: Solver, req: Request
                 ) -> tuple[float, MK.MarketSolve | None] | None:
    """The smallest change of input ``name`` (display units, at its printed precision) that makes the market
    ``sc`` admit a plan, from ``value`` (the nearest offer's answer) and ``current`` (the scenario's, no plan):
    the market at the returned value has a plan and one printed unit less favourable has none (bisection on the
    printed grid between ``current`` and ``value`` when that unit admits one), and the market's solve at it (None:
    ``value`` itself, which the nearest offer's own re-solve confirmed). None: the market at ``value`` has no plan
    (a budget: a bill the offer's own cost does not see)."""
    p = PARAMS[name]
    step = 10.0 ** -p.digits
    up = p.direction == ">="

    def at(i: int) -> MK.MarketSolve:
        return _feasible(MARKET_INPUTS[name](sc, i * step * p.per_unit), solver, req)

    def has_plan(ms: MK.MarketSolve) -> bool:
        return ms.result.status in (Status.OPTIMAL, Status.FEASIBLE)

    good_i = round(value / step)
    ok: MK.MarketSolve | None = None  # the nearest offer's own re-solve already has a plan at ``value``
    if name == "max_cost":  # ... on the offer's cost; the market's bill (billing steps, checkpoints) may differ
        ok = at(good_i)
        if not has_plan(ok):
            return None
    bad_i = good_i - 1 if up else good_i + 1
    if bad_i > 0:
        below = at(bad_i)
        if has_plan(below):  # another offer needs less: bisect between the current value and here
            good_i, ok = bad_i, below
            bad_i = math.floor(current / step + 1e-9) if up else math.ceil(current / step - 1e-9)
            while abs(good_i - bad_i) > 1:
                mid = (good_i + bad_i) // 2
                ms = at(mid)
                if has_plan(ms):
                    good_i, ok = mid, ms
                else:
                    bad_i = mid
    return round(good_i * step, p.digits), ok


def market_relaxation(sc: Scenario, r: Relaxation, solver: Solver, req: Request, offer: str) -> dict[str, Any]:
    """One relaxation of the nearest offer as the market's answer (module, 3)."""
    d = r.as_dict(sc.task.confidence)
    if r.parameter not in MARKET_INPUTS:
        d["scope"] = f"offer {offer}"
        return d
    d["scope"] = "market"
    if r.helps is not True or not isinstance(r.required, float | int) or not isinstance(r.current, float | int):
        return d
    found = market_value(sc, r.parameter, float(r.required), float(r.current), solver, req)
    if found is None:
        d.update(helps=None, method="undecided", note=f"{offer}'s answer not confirmed on the market")
        return d
    v, ms = found
    pick = ms.pick if ms is not None else None
    p = PARAMS[r.parameter]
    if v != r.required:  # another offer needs less: its value, not the nearest offer's threshold and note
        old, now = f"{float(r.required):.{p.digits}f}", f"{v:.{p.digits}f}"
        d["apply"] = {k: x.replace(old, now) if isinstance(x, str) else v for k, x in (d["apply"] or {}).items()} \
            or None
        d["required_exact"] = None
        d.pop("note", None)
    d["required"] = v
    worse = v - 10.0 ** -p.digits if p.direction == ">=" else v + 10.0 ** -p.digits
    d["market_check"] = {"feasible_at": v, "infeasible_at": round(worse, p.digits) if worse > 0 else None,
                         "offer": pick.offer.id if pick is not None else offer}
    if pick is not None and pick.best is not None:
        d.update(plan=pick.best.plan_dict(), cost=pick.best.metrics["cost"], cost_unit=pick.best.metrics["cost_unit"],
                 finish_days=pick.best.metrics["finish_days"])
        if pick.offer.id != offer:
            d["note"] = f"on {pick.offer.id}" + (f"; {d['note']}" if d.get("note") else "")
    return d


def market_infeasibility(sc: Scenario, ms: MK.MarketSolve, solver: Solver, req: Request,
                         progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The market's ``conflict``, ``conflict_detail`` and ``relaxations`` (module) and ``market_conflict``: the
    nearest offer, its fastest finish with the deadline and budget dropped, and the cards it can use."""
    tell: Callable[[str], None] = progress or (lambda text: None)
    tell("the offer nearest a plan")
    row, fastest = nearest_offer(ms, solver, req)
    osc = row.sc
    cap = osc.search.max_cards
    near = {"offer": row.offer.id, "accelerator": row.offer.accelerator, "fastest_finish_days": fastest,
            "max_cards": cap, "available": row.offer.available,
            "cards_cap": F.MARKET_AVAILABLE if cap == row.offer.available  # max_cards may equal it: both bind
            else "search.max_cards" if cap == sc.search.max_cards else F.POWER_SITE}
    out: dict[str, Any] = {"market_conflict": near, "conflict": [], "conflict_detail": [], "relaxations": []}
    ctx = Context.of(osc, solver, req, None, None, None)
    try:
        with clock_of(req).stoppable("finding the conflict", keep_finished=True):
            tell(f"a minimal set of conflicting constraints on {row.offer.id}")
            core_ = minimal_conflict(Space.from_scenario(osc), ctx.backend, req, ctx.enforced, ctx=ctx) or []
            detail = conflict_detail(ctx, core_)
    except (Undecided, TimeLimitReached):
        core_, detail = [], []
        out["conflict_status"] = "time limit reached"
    names = [n for n in PARAMS if n not in OFFER_ONLY]
    rels = relaxations(osc, ctx.backend, req, core=core_, enforced=ctx.enforced, ctx=ctx, only=names,
                       progress=progress)
    out.update(conflict=core_, conflict_detail=detail,
               relaxations=[market_relaxation(sc, r, solver, req, row.offer.id) for r in rels])
    if near["cards_cap"] != "search.max_cards":
        offer_cap(out, dict(near, max_cards=sc.search.max_cards))
    return out


def offer_cap(out: dict[str, Any], near: dict[str, Any]) -> None:
    """The nearest offer's card cap named as what it is (in place): on the offer's scenario ``cards.max`` is
    min(max_cards, available, the site power cap), so where the offer's availability or the power cap sets it,
    the conflict names that family and the cards relaxation says what has to grow (``--max-cards`` alone would
    not; ``near["max_cards"]``: the scenario's own max_cards, named too when the change passes it)."""
    fam = F.family(near["cards_cap"])
    out["conflict"] = [fam.name if f == F.CARDS else f for f in out["conflict"]]
    for d in out["conflict_detail"]:
        if d["name"] == F.CARDS:
            d.update(name=fam.name, rule=fam.doc)
    for d in out["relaxations"]:
        if d["parameter"] == "max_cards":
            d.update(parameter=fam.name, apply=None, required_exact=None)
            what = (f"{near['available']:,} available ({fam.name})" if fam.name == F.MARKET_AVAILABLE
                    else f"the site power cap ({fam.name})")
            also = (f"; raise max_cards (now {near['max_cards']:,}) too" if isinstance(d["required"], int | float)
                    and d["required"] > near["max_cards"] else "")
            d["note"] = (f"the cards {near['offer']} can give: now {what}; --max-cards alone does not raise it{also}"
                         + (f"; {d['note']}" if d.get("note") else ""))


__all__ = ["MARKET_INPUTS", "OFFER_ONLY", "nearest_offer", "market_value", "market_relaxation",
           "market_infeasibility"]
