"""Why no offer of a market admits a plan: the conflict on the offer nearest a plan, and changes verified on the
market.

A market (``[market]`` offers, ``--hw all``) is one exact sub-problem per offer (:mod:`tpopt.optimizer.market`),
so one space's conflict and relaxations (:mod:`tpopt.optimizer.explain`) do not span it. When every offer is
proven infeasible:

1. The nearest offer (:func:`nearest_offer`): the offer whose fastest plan, with the deadline and the budget
   dropped, finishes first, T* = min over offers o of min over plans of o meeting the other families of
   T_finish (ties: catalog order); when no offer has a plan at any deadline, the offer with the most cards it
   can use (its availability, the site power cap and max_cards). Searched with cutoffs, from the offers whose
   finish floor (:func:`finish_floor_s`: the reserved days plus the weight GEMMs' card-seconds over the card
   cap) is least: no offer whose floor passes the best finish found is solved, and none is solved past it.
2. Its irreducible conflict and each family's closest plan (:func:`~tpopt.optimizer.explain.minimal_conflict`,
   :func:`~tpopt.optimizer.explain.conflict_detail`), and the smallest single change of each input on it
   (:func:`~tpopt.optimizer.explain.relaxations`; not the accelerator or the card price, which the offers are).
3. The inputs every offer shares (:data:`MARKET_INPUTS`: deadline, tokens, reserved days, input rate, budget,
   storage bandwidth; and max_cards where it is the nearest offer's card cap, :func:`market_max_cards`) verified
   on the whole market (:func:`market_value`): the market re-solved with the value admits a plan, and with the
   value one printed unit less favourable admits none; when it admits one (another offer needs less), the value
   is bisected on the market at the printed precision (each input is monotone: more time, fewer tokens, a faster
   input pipeline or a larger budget never removes a plan). The other inputs
   (cards, memory, NICs, ...) are the nearest offer's own and say so. An offer whose finish floor passes the
   re-solved market's deadline has no plan there and is not solved (:func:`market_with_plan`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

from tpopt.models import families as F
from tpopt.models import market as M
from tpopt.models.evaluate import Evaluation
from tpopt.models.plan import Scenario
from tpopt.models.units import DAY
from tpopt.optimizer import core
from tpopt.optimizer import market as MK
from tpopt.optimizer.backends import Solver
from tpopt.optimizer.explain import conflict_detail, minimal_conflict, relaxations
from tpopt.optimizer.explain.context import Context
from tpopt.optimizer.explain.cost import compute_card_seconds
from tpopt.optimizer.explain.inputs import (
    PARAMS,
    Relaxation,
    with_deadline,
    with_input_rate,
    with_max_cards,
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


SAFE = 1e-9
"""Relative margin of a floor above a finish: a floor is formed in other floating-point steps than the finish it
bounds, so it proves "no plan" only above the finish by more than this (the exactness of :func:`finish_floor_s`
is not asked of the last bits)."""


def _fastest_families(req: Request) -> frozenset[str]:
    """The families the nearest offer's fastest plan meets: every enforced one but the deadline and the budget."""
    return frozenset(f for f in req.enforced(FAMILIES) if f not in (F.DEADLINE, F.BUDGET))


def _fastest(row: MK.OfferSolve, solver: Solver, req: Request, cutoff: float | None = None,
             space: Space | None = None) -> Evaluation | None:
    """The offer's fastest plan meeting every enforced family but the deadline and the budget; ``cutoff`` (days):
    the fastest where it finishes by then, else it or None (:attr:`Request.cutoff`: a solver may leave out the
    plans finishing later)."""
    r = core.solve(row.sc, solver, Request(objective="time", enforce=_fastest_families(req), time_limit=req.time_limit,
                                            seed=req.seed, workers=req.workers, clock=req.clock,
                                            cutoff=None if cutoff is None else cutoff * DAY), space=space)
    return r.best


def finish_floor_s(sub: Scenario) -> float:
    """A lower bound on the finish (s) of every plan of an offer's scenario ``sub`` (one accelerator) that meets
    cards.max: T = R + I t (1 + L) (:func:`tpopt.models.terms.finish_time`) with L >= 0 and n I t >= W, the
    card-seconds floor of the weight GEMMs (:func:`~tpopt.optimizer.explain.cost.compute_card_seconds`), at
    n <= max_cards (the offer's scenario caps it at min(max_cards, available, the site power cap)):

        T >= R + W / max_cards

    R alone where the card states no peak or efficiency (0 cards: infinite)."""
    (name,) = sub.systems
    w = compute_card_seconds(sub, name)
    cap = sub.search.max_cards
    if w is None:
        return sub.task.reserved_s
    return sub.task.reserved_s + w / cap if cap > 0 else math.inf


LADDER = (1.5, 5)
"""(ratio, levels) of :func:`nearest_offer`'s cutoffs before any offer has a plan: the least finish floor times
1.5, 2.25, ... (five levels, up to 7.6 times it), then none."""


def nearest_offer(ms: MK.MarketSolve, solver: Solver, req: Request, kept: dict[str, Space] | None = None
                  ) -> tuple[MK.OfferSolve, float | None]:
    """The offer nearest a plan (module, 1) and its fastest finish in days with the deadline and budget dropped
    (None: no offer has a plan at any deadline). Offers of one card with the same card cap and preemption terms
    share one solve (their prices differ, which the fastest plan does not read), and one space across its solves.

    The nearest offer is the least (finish, catalog index); the solves look for it by cutoffs (:func:`_fastest`:
    a solve with a cutoff finds the offer's fastest plan where it finishes by the cutoff, and proves otherwise
    that every plan finishes later). Once an offer has a plan, the cutoff is its finish: an offer none of whose
    plans finishes by it is not nearest (a tie is found, and the catalog index decides it). Before that the
    cutoffs climb a ladder (:data:`LADDER`) from the least finish floor (:func:`finish_floor_s`): a far offer
    (the widest GPT-3's GB200 offers: 14 d) is not solved in full before a near one (MI355X: 4.4 d) bounds it. An
    offer is asked only at levels at or above its floor, in ascending order of the floors (catalog order among
    equal ones), and none whose floor is above the finish found by more than :data:`SAFE` is asked at all: each of
    its plans finishes later. Past the ladder the solves have no cutoff until a plan is found. Floors only where
    cards.max is among the families the fastest plan meets (else a plan may pass the cap the floor divides by).
    ``kept``: the nearest offer's space is put in it (by offer id), with the tables its solves built."""
    rows = ms.offers
    enforce = _fastest_families(req)
    floors = [finish_floor_s(r.sc) / DAY if F.CARDS in enforce else 0.0 for r in rows]
    keys = [(r.offer.accelerator, r.sc.search.max_cards, r.sc.market.preempt_per_card_s, r.offer.reacquire_s)
            for r in rows]
    first = sorted({k: i for i, k in reversed(list(enumerate(keys)))}.values(), key=lambda i: (floors[i], i))
    spaces: dict[tuple[Any, ...], Space] = {}
    fin: dict[tuple[Any, ...], float | None] = {}  # a key's fastest finish (None: no plan at all)
    late: dict[tuple[Any, ...], float] = {}  # a key's largest cutoff asked: every plan of it finishes later
    best: tuple[float, int] | None = None  # (finish in days, the catalog index of its key's first offer)

    def ask(i: int, cutoff: float | None) -> None:
        nonlocal best
        k = keys[i]
        if k not in spaces:
            spaces[k] = Space.from_scenario(rows[i].sc)
        ev = _fastest(rows[i], solver, req, cutoff, spaces[k])
        if ev is None and cutoff is not None:
            late[k] = cutoff
            return
        fin[k] = f = ev.metrics["finish_days"] if ev is not None else None
        if f is not None and (best is None or (f, i) < best):
            best = (f, i)

    ratio, levels = LADDER
    low = floors[first[0]] if first else 0.0
    ladder: list[float | None] = [low * ratio ** (j + 1) for j in range(levels)] if 0.0 < low < math.inf else []

    def sweep(level: float | None) -> None:  # every offer not known to be late asked at the level or the best
        for i in first:
            cut = best[0] if best is not None else level
            if cut is not None and floors[i] > cut * (1 + SAFE):
                break  # its plans, and those of every offer after it, finish after the cutoff (docstring)
            if keys[i] not in fin and late.get(keys[i], -math.inf) < (cut if cut is not None else math.inf):
                ask(i, cut)

    for level in [*ladder, None]:
        sweep(level)
        if best is not None:
            sweep(best[0])  # those asked at the level before the best was found, with it as the cutoff
            break
    if best is not None:
        if kept is not None:  # the nearest offer's space, its tables built by its solves
            kept[rows[best[1]].offer.id] = spaces[keys[best[1]]]
        return rows[best[1]], best[0]
    most = max(r.sc.search.max_cards for r in rows)
    return next(r for r in rows if r.sc.search.max_cards == most), None


def _feasible(sc: Scenario, solver: Solver, req: Request) -> MK.MarketSolve:
    return MK.solve_market(sc, solver, req, partial(core.tiny_solver, named=req.solver_named))


def _has_plan(ms: MK.MarketSolve) -> bool:
    return ms.result.status in (Status.OPTIMAL, Status.FEASIBLE)


def surely_late(sc: Scenario, offer: M.Offer, req: Request) -> bool:
    """Has ``offer`` provably no plan in the market ``sc``: its finish floor (:func:`finish_floor_s`) above the
    deadline by more than :data:`SAFE`? Only where both the deadline and cards.max are enforced and the deadline
    is checked on the finish itself (no confidence: its chance form is another value)."""
    enforced = req.enforced(FAMILIES)
    if F.DEADLINE not in enforced or F.CARDS not in enforced or sc.task.confidence is not None:
        return False
    sub = MK.solving_scenario(MK.offer_scenario(sc, offer))  # a spot offer: against the run deadline
    return finish_floor_s(sub) > F.limit(F.DEADLINE, sub) * (1 + SAFE)


def market_with_plan(sc: Scenario, solver: Solver, req: Request) -> MK.MarketSolve | None:
    """The market ``sc``'s solve where it has a plan, else None. The offers :func:`surely_late` rules out are
    not solved first: the others alone, and where they have no plan neither has the market (those it leaves out
    have none). Where they have one, the whole market is solved, so the answer (its pick, ties, the power cap's
    check) is the whole market's own."""
    live = tuple(o for o in sc.market.offers if not surely_late(sc, o, req))
    if not live:
        return None
    if len(live) < len(sc.market.offers) and \
            not _has_plan(_feasible(replace(sc, market=replace(sc.market, offers=live)), solver, req)):
        return None
    ms = _feasible(sc, solver, req)
    return ms if _has_plan(ms) else None


def market_value(sc: Scenario, name: str, value: float, current: float, solver: Solver, req: Request,
                 confirm: bool = False) -> tuple[float, MK.MarketSolve | None] | None:
    """The smallest change of input ``name`` (display units, at its printed precision) that makes the market
    ``sc`` admit a plan, from ``value`` (the nearest offer's answer) and ``current`` (the scenario's, no plan):
    the market at the returned value has a plan and one printed unit less favourable has none (bisection on the
    printed grid between ``current`` and ``value`` when that unit admits one), and the market's solve at it (None:
    ``value`` itself, which the nearest offer's own re-solve confirmed). None: the market at ``value`` has no plan
    (a budget: a bill the offer's own cost does not see; ``confirm``: the nearest offer's answer read its finish
    without the waits for spot capacity, which the market's verdict counts, so ``value`` is solved on the market
    too)."""
    p = PARAMS[name]
    step = 10.0 ** -p.digits
    up = p.direction == ">="

    def at(i: int) -> MK.MarketSolve | None:
        return market_with_plan(MARKET_INPUTS[name](sc, i * step * p.per_unit), solver, req)

    good_i = round(value / step)
    ok: MK.MarketSolve | None = None  # the nearest offer's own re-solve already has a plan at ``value``
    if name == "max_cost" or confirm:  # ... on the offer's cost (the market's bill: billing steps, checkpoints)
        ok = at(good_i)
        if ok is None:
            return None
    bad_i = good_i - 1 if up else good_i + 1
    if bad_i > 0:
        below = at(bad_i)
        if below is not None:  # another offer needs less: bisect between the current value and here
            bad_i = math.floor(current / step + 1e-9) if up else math.ceil(current / step - 1e-9)
            good_i, ok = bisect_market(bad_i, good_i - 1 if up else good_i + 1, below, at)
    return round(good_i * step, p.digits), ok


def bisect_market(bad: int, good: int, found: MK.MarketSolve, at: Callable[[int], MK.MarketSolve | None]
                  ) -> tuple[int, MK.MarketSolve]:
    """The value next to ``bad`` (no plan) on the way to ``good`` (a plan, the market's solve ``found``) where the
    market ``at`` it first has a plan, and that solve: a bisection, feasibility being monotone (either way)."""
    while abs(good - bad) > 1:
        mid = (good + bad) // 2
        ms = at(mid)
        if ms is not None:
            good, found = mid, ms
        else:
            bad = mid
    return good, found


def market_max_cards(sc: Scenario, d: dict[str, Any], solver: Solver, req: Request) -> dict[str, Any]:
    """The max_cards relaxation ``d`` (the nearest offer's, as JSON) as the market's answer, where the scenario's
    max_cards is the nearest offer's card cap. Each offer's cap is min(max_cards, available, the site power cap),
    so raising max_cards raises every offer's cap at once, and another offer (other cards per host, another
    card) may have a plan where the nearest one has none (the nearest was chosen under the cap asked about).
    Feasibility on the market is monotone in max_cards (each offer's space at m cards holds its space at m - 1),
    so a galloping search finds the answer: max_cards doubled from the current value (at most to U, the most
    cards any offer has available, every offer then at its own cap; or to the nearest offer's own answer, where it
    has one) until the market has a plan, then bisected between the last value without one and it (the market
    has a plan with the answer, none with one card fewer). None even at U: max_cards cannot help on the market."""
    current = int(d["current"])
    most = max(o.available for o in sc.market.offers)
    if d["helps"] is True and isinstance(d["required"], int | float):
        most = min(most, int(d["required"]))  # the nearest offer has a plan there, so the market has one
    if most <= current:
        return d

    def at(cards: int) -> MK.MarketSolve | None:
        return market_with_plan(with_max_cards(sc, cards), solver, req)

    bad, good, ms = current, min(2 * current, most), None
    while ms is None:
        ms = at(good)
        if ms is None:
            if good >= most:  # the nearest offer's answer stands for the market: say so
                d["scope"] = "market"
                note = f"no offer has a plan even with max_cards = {most:,} (the most cards any offer has available)"
                d["note"] = note + (f"; {d['note']}" if d.get("note") else "")
                return d
            bad, good = good, min(2 * good, most)
    good, ms = bisect_market(bad, good, ms, at)
    pick = ms.pick
    d.update(scope="market", helps=True, required=good, required_exact=None,
             method="fewest max_cards giving the market a plan (galloping then bisection, each value re-solved on "
                    "every offer)",
             apply={PARAMS["max_cards"].override: good},
             market_check={"feasible_at": good, "infeasible_at": good - 1 if good > 1 else None,
                           "offer": pick.offer.id if pick is not None else None})
    for key in ("blocked_by", "note", "chain"):
        d.pop(key, None)
    if pick is not None and pick.best is not None:
        d.update(plan=pick.best.plan_dict(), cost=pick.best.metrics["cost"], cost_unit=pick.best.metrics["cost_unit"],
                 finish_days=pick.best.metrics["finish_days"], note=f"on {pick.offer.id}")
    return d


def market_relaxation(sc: Scenario, r: Relaxation, solver: Solver, req: Request, offer: str,
                      own_cap: bool = False, confirm: bool = False) -> dict[str, Any]:
    """One relaxation of the nearest offer as the market's answer (module, 3; ``own_cap``: the scenario's
    max_cards is that offer's card cap, so its relaxation is the market's, :func:`market_max_cards`; ``confirm``:
    :func:`market_value`'s)."""
    d = r.as_dict(sc.task.confidence)
    if r.parameter == "max_cards" and own_cap and r.helps is not None and isinstance(r.current, int | float):
        return market_max_cards(sc, d, solver, req)
    if r.parameter not in MARKET_INPUTS:
        d["scope"] = f"offer {offer}"
        return d
    d["scope"] = "market"
    if r.helps is not True or not isinstance(r.required, float | int) or not isinstance(r.current, float | int):
        return d
    found = market_value(sc, r.parameter, float(r.required), float(r.current), solver, req, confirm)
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
    kept: dict[str, Space] = {}
    row, fastest = nearest_offer(ms, solver, req, kept)
    a = M.spot_availability(row.offer)
    waits = sc.task.confidence is None and a < 1.0  # its plans wait for spot capacity: solved on the run deadline
    osc = MK.solving_scenario(row.sc)
    if waits and fastest is not None:  # its fastest plan's expected calendar finish
        fastest = M.capacity_finish_s(sc.task.reserved_s, fastest * DAY, a) / DAY
    cap = osc.search.max_cards
    near = {"offer": row.offer.id, "accelerator": row.offer.accelerator, "fastest_finish_days": fastest,
            "max_cards": cap, "available": row.offer.available,
            "cards_cap": F.MARKET_AVAILABLE if cap == row.offer.available  # max_cards may equal it: both bind
            else "search.max_cards" if cap == sc.search.max_cards else F.POWER_SITE}
    if waits:  # its conflict is on the run deadline: say so
        near["spot_availability"], near["run_deadline_days"] = a, F.limit(F.DEADLINE, osc) / DAY
    out: dict[str, Any] = {"market_conflict": near, "conflict": [], "conflict_detail": [], "relaxations": []}
    ctx = Context.of(osc, solver, req, None, None, None)
    try:
        with clock_of(req).stoppable("finding the conflict", keep_finished=True):
            tell(f"a minimal set of conflicting constraints on {row.offer.id}")
            space = kept.get(row.offer.id) if not waits else None
            space = space or Space.from_scenario(osc)
            core_ = minimal_conflict(space, ctx.backend, req, ctx.enforced, ctx=ctx) or []
            detail = conflict_detail(ctx, core_)
    except (Undecided, TimeLimitReached):
        core_, detail = [], []
        out["conflict_status"] = "time limit reached"
    names = [n for n in PARAMS if n not in OFFER_ONLY]
    rels = relaxations(osc, ctx.backend, req, core=core_, enforced=ctx.enforced, ctx=ctx, only=names,
                       progress=progress)
    if waits:
        rels = [calendar_deadline(sc, r, a) for r in rels]
    out.update(conflict=core_, conflict_detail=detail,
               relaxations=[market_relaxation(sc, r, solver, req, row.offer.id,
                                              own_cap=near["cards_cap"] == "search.max_cards", confirm=waits)
                            for r in rels])
    if near["cards_cap"] != "search.max_cards":
        offer_cap(out, dict(near, max_cards=sc.search.max_cards))
    return out


def calendar_deadline(sc: Scenario, r: Relaxation, a: float) -> Relaxation:
    """A relaxation of a nearest offer whose plans wait for spot capacity (solved on the run deadline
    R + a (D - R), :func:`tpopt.optimizer.market.solving_scenario`) in the user's terms: a deadline's run value
    D' as the calendar deadline R + (D' - R) / a, rounded up to its printed unit (towards a plan), the current the
    scenario's; the other inputs as they are (the market confirms each, :func:`market_value`)."""
    if r.parameter != "deadline" or not isinstance(r.required, float | int):
        return r
    p = PARAMS["deadline"]
    cal = M.capacity_finish_s(sc.task.reserved_s, float(r.required) * DAY, a) / DAY
    up = math.ceil(cal * 10 ** p.digits - 1e-9) / 10 ** p.digits
    old, new = f"{float(r.required):.{p.digits}f}", f"{up:.{p.digits}f}"
    apply = {k: v.replace(old, new) if isinstance(v, str) else up for k, v in (r.apply or {}).items()} or None
    return replace(r, current=F.limit(F.DEADLINE, sc) / DAY, required=up, required_exact=None, apply=apply, plan=None)


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


__all__ = ["MARKET_INPUTS", "OFFER_ONLY", "finish_floor_s", "nearest_offer", "market_with_plan", "market_value",
           "bisect_market", "market_max_cards", "market_relaxation", "market_infeasibility"]
