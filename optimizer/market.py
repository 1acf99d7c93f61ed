"""The offer as a decision: the cheapest (or fastest) plan over the market's offers, exactly.

**Decomposition.** An offer fixes the accelerator, the price model, the availability cap and (spot) the
preemption rate; every other term of the plan model is the offer's accelerator's. So each offer is an exact
sub-problem: the scenario restricted to that accelerator, with the offer's price per card-hour (the host's
NICs included), ``max_cards = min(max_cards, available)`` and the preemptions added to the failure rate. The
optimum over offers is the best of the sub-problems' proven optima (an outer choice, like the batch choices
of :mod:`tpopt.optimizer.outer`); the performance tables are never multiplied by the offers.

**Bills in closed form.** An offer's bill is ``cards x price x h(finish)`` with ``h`` non-decreasing
(:func:`tpopt.models.market.billed_seconds`: per-second billing ``h(f) = f``; granular billing, minimum
commitments and reserved terms paid whole otherwise). A per-second offer is the plan model's own cost
(``rate x finish``): one solve. For any other offer the bill at a fixed card count ``n`` is smallest for
the fastest plan of ``n`` cards, so the sub-problem is solved exactly as: for each card count ``n`` in
ascending order, the fastest plan of ``n`` cards (every family but ``budget.cost`` enforced), billed in
closed form, kept when the bill meets the budget; the scan stops once the least bill ``n`` cards can run
up (:func:`tpopt.models.market.least_billed_cost`) exceeds the best bill found. ``budget.cost`` is checked
on the bill (a reserved term counts whole, not only the hours used).

**Checkpoints.** The bill adds the checkpoints' storage in the offer's region and their egress
(:func:`tpopt.models.market.checkpoint_cost`: kept copies x GB x USD per GB-month x finish / month, plus
copies leaving the region x GB x USD per GB), the checkpoint's GB from the plan's model (parameters x
``checkpoint.bytes_per_param`` / 1e9). At a fixed card count it grows with the finish too, so an offer whose
region prices storage is solved by the card-count scan (the plan model's own cost ``rate x finish`` is not
the bill once a term independent of the cards is added).

**Spot.** A spot offer's preemptions (``rho`` per card-hour) join the failure rate ``lam = n / MTBF + n rho``;
each costs the redo since the last checkpoint, the restore and the reacquisition delay
(:func:`tpopt.models.terms.overhead`), and the "auto" save interval is the optimum for the combined rate.
:func:`preemption_figures` reports the expected preemptions and what they cost (the plan billed without
them, at the same save interval, subtracted).

**Cost bounds (least cost).** No plan on an offer bills less than :func:`offer_bound` (the compute floor at
the offer's price). :func:`offer_fronts` builds the accelerators' fronts in ascending order of their least
bound and does not build one whose bound is above the least bill found so far: its offers are decided as "no
cheaper than" their bound (method :data:`BOUND`, JSON status ``bounded``). :func:`bounds_hold` then proves
the market's pick (with its tie tolerance and catalog order) the same whatever those offers' plans are; where
it cannot, their fronts are built after all, so every answer equals the market solved without bounds.

**Confidence hook.** :func:`preemption_source` is the per-plan preemption process (rate per second and the
mean time lost per event) that a finish-time distribution adds to its failure sources.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from tpopt.errors import InputError
from tpopt.models import families as F
from tpopt.models import market as M
from tpopt.models import reliability
from tpopt.models import terms as T
from tpopt.models.arch import param_count
from tpopt.models.evaluate import ConstraintCheck, Evaluation, evaluate
from tpopt.models.plan import Scenario
from tpopt.models.units import DAY, HOUR
from tpopt.optimizer import core
from tpopt.optimizer import market_front as MF
from tpopt.optimizer.backends import EXHAUSTIVE, Solver
from tpopt.optimizer.explain.cost import cost_floor
from tpopt.optimizer.limits import clock_of
from tpopt.optimizer.result import Request, SolveResult, SolverInfo, Status, objective_key
from tpopt.optimizer.space import FAMILIES, Space, card_counts

REL = 1e-9
PROVEN = (Status.OPTIMAL, Status.INFEASIBLE)
SOLVING_OFFERS = "solving the offers"  # the clock's phase while the offers are solved
FRONT = "layout front"  # an offer answered on its accelerator's front (offer_fronts)
BOUND = "cost bound"  # an offer decided by its accelerator's cost bound, its front never built (offer_fronts)
SKIP_MARGIN = 1e-6  # a front is skipped only when its bound is above the incumbent's cost by this much


def offer_scenario(sc: Scenario, offer: M.Offer) -> Scenario:
    """The scenario on ``offer`` alone: its accelerator at its price (NICs included: NIC price 0), at most
    the cards it has available, its preemptions in the failure rate; no market left to choose."""
    system = replace(sc.system(offer.accelerator), price_card_hour=offer.price_card_hour, nic_price_hour=0.0,
                     price_source=offer_price_source(offer))
    search = replace(sc.search, accelerators=(offer.accelerator,),
                     max_cards=min(sc.search.max_cards, offer.available, power_cards(sc, offer)))
    terms = M.MarketOptions(as_of=sc.market.as_of, preempt_per_card_s=M.preemption_rate(offer),
                            reacquire_s=offer.reacquire_s, spot_availability=M.spot_availability(offer),
                            checkpoint_copies=sc.market.checkpoint_copies,
                            checkpoint_egress=sc.market.checkpoint_egress)
    return replace(sc, systems={offer.accelerator: system}, search=search, market=terms)


def solving_scenario(sub: Scenario) -> Scenario:
    """The offer's scenario ``sub`` as its sub-problem is solved: without a confidence, on an offer with days
    without spot capacity (``market.spot_availability`` a < 1), the deadline family's limit is the latest finish
    on capacity whose expected calendar finish meets the deadline, R + a (D - R)
    (:func:`tpopt.models.market.run_deadline_s`), so every backend decides the nominal verdict with the waits
    while its cost stays the run's (the waits are not billed); :func:`billed` states the plan's calendar finish
    and the deadline check against D. Under a confidence the chance form reads the waits itself (the law's
    capacity source): ``sub`` as it is."""
    a = sub.market.spot_availability
    if sub.task.confidence is not None or a >= 1.0:
        return sub
    t = sub.task
    return replace(sub, task=replace(t, deadline_s=M.run_deadline_s(t.reserved_s, F.limit(F.DEADLINE, sub), a)))


def offer_price_source(offer: M.Offer) -> str:
    """Where an offer's price comes from, as the footing's price reads it (tpopt.optimizer.footing.price):
    ``catalog DATE: offer ID (...)`` for the shipped market catalog's, ``user catalog DATE: offer ID in FILE
    (...)`` for one a ``--catalog`` directory's file states (or whose card's list price it is)."""
    what = "assumption: illustrative price" if offer.illustrative else "its listed price"
    if offer.origin:
        return f"user catalog {offer.date}: offer {offer.id} in {offer.origin} ({what})"
    return f"catalog {offer.date}: offer {offer.id} ({what})"


def power_cards(sc: Scenario, offer: M.Offer) -> int:
    """The most cards of the offer the site power cap admits (``power.site``; no cap: the scenario's max)."""
    cap = sc.market.site_power_w
    if cap is None or offer.power is None:
        return sc.search.max_cards
    return max(0, M.cards_under_power(offer.power, offer.pue, cap, offer.cards_per_host))


def checkpoint_gb(sc: Scenario) -> float:
    """GB (1e9 bytes) of one resumable checkpoint: parameters x ``checkpoint.bytes_per_param``."""
    return float(reliability.checkpoint_bytes(param_count(sc.model), sc.reliability.bytes_per_param)) / M.GB


def checkpoint_costs(sc: Scenario, offer: M.Offer, finish_s: float) -> tuple[float, float]:
    """(storage USD, egress USD) of the plan's checkpoints on ``offer`` (the scenario's copies and egress)."""
    m = sc.market
    return M.checkpoint_cost(offer.storage, checkpoint_gb(sc), m.checkpoint_copies, m.checkpoint_egress, finish_s)


def checkpoint_charge(sc: Scenario, offer: M.Offer, finish_s: float) -> float:
    """USD of the plan's checkpoints on ``offer`` (storage plus egress) at a finish of ``finish_s``."""
    return sum(checkpoint_costs(sc, offer, finish_s))


def charges_checkpoints(sc: Scenario, offer: M.Offer) -> bool:
    """Does the offer's region bill the checkpoints (storage or egress price above 0)?"""
    st = offer.storage
    return st is not None and (st.gb_month > 0 or (st.egress_gb > 0 and sc.market.checkpoint_egress > 0))


def billed(sc: Scenario, offer: M.Offer, ev: Evaluation) -> Evaluation:
    """``ev`` (evaluated on the offer's :func:`solving_scenario`) with its cost the offer's bill plus the
    checkpoints' storage and egress, ``budget.cost`` checked on that, ``cards.max`` at the scenario's own cap, and
    the ``market.available`` check added. On a spot offer (a mix: its spot part's) the finish is the expected
    calendar finish with the waits for capacity, R + (f - R) / a (:func:`tpopt.models.market.capacity_finish_s`;
    ``capacity_wait_days`` the waits, ``spot_availability`` a), and without a confidence the deadline check is
    that finish against the deadline; the bill is of the run on capacity ``f`` (a day without capacity rents
    nothing; the checkpoints' storage over the waits is left out too)."""
    run = ev.metrics["finish_days"] * DAY
    a = M.spot_availability(offer)
    finish = M.capacity_finish_s(sc.task.reserved_s, run, a)
    compute = M.billed_cost(offer, ev.plan.cards, run)
    storage, egress = checkpoint_costs(sc, offer, run)
    cost = compute + storage + egress
    metrics = dict(ev.metrics, cost=cost, cost_unit="USD", compute_cost=compute, checkpoint_storage_cost=storage,
                   checkpoint_egress_cost=egress, billed_hours=M.billed_seconds(offer, run) / HOUR,
                   preemptions_per_hour=ev.plan.cards * offer.preempt_per_card_hour if offer.market == M.SPOT else 0.0,
                   finish_days=finish / DAY, capacity_wait_days=(finish - run) / DAY, spot_availability=a)
    nominal = sc.task.confidence is None and a < 1.0
    checks = []
    for c in ev.constraints:
        if c.name == F.DEADLINE and nominal:  # decided on the run deadline R + a (D - R): the same verdict
            limit = F.limit(F.DEADLINE, sc) / DAY
            c = replace(c, value=finish / DAY, limit=limit, slack=limit - finish / DAY)
        elif c.name == F.BUDGET:
            c = replace(c, value=cost, slack=c.limit - cost, binding=abs(c.limit - cost) <= REL * max(c.limit, 1.0))
        elif c.name == F.CARDS:
            most = F.limit(F.CARDS, sc)
            c = replace(c, limit=most, slack=most - c.value, binding=c.value >= most)
        checks.append(c)
    fam = F.family(F.MARKET_AVAILABLE)
    n = float(ev.plan.cards)
    checks.append(ConstraintCheck(fam.name, n, float(offer.available), fam.unit, offer.available - n,
                                  n >= offer.available, fam.doc))
    cap = sc.market.site_power_w
    if cap is not None and offer.power is not None:
        fam = F.family(F.POWER_SITE)
        watts = M.site_power_w(offer.power, offer.pue, ev.plan.cards, offer.cards_per_host)
        checks.append(ConstraintCheck(fam.name, watts / fam.scale, cap / fam.scale, fam.unit, (cap - watts) / fam.scale,
                                      ev.plan.cards >= power_cards(sc, offer), fam.doc))
    return Evaluation(plan=ev.plan, metrics=metrics, constraints=checks)


@dataclass
class OfferSolve:
    """One offer's sub-problem: its best plan (billed), status, and the solves it took."""

    offer: M.Offer
    sc: Scenario
    status: Status
    best: Evaluation | None
    solves: int
    method: str  # "one solve" (per-second bill) or "card-count scan"
    points: int = 0  # plans in the offer's design space
    bound: float | None = None  # method BOUND: no plan on the offer bills less (its status stays UNKNOWN)


def decided(row: OfferSolve) -> bool:
    """Optimal, proven infeasible, or no cheaper than its bound (which :func:`bounds_hold` proved above the
    plan chosen)."""
    return row.status in PROVEN or row.bound is not None


def offer_bound(sc: Scenario, offer: M.Offer) -> float:
    """A lower bound on the bill of every plan on ``offer`` (``sc``: the offer's scenario): the compute floor
    :func:`tpopt.optimizer.explain.cost.cost_floor` (6 N_gemm D at the card's fastest peak times the highest
    efficiency its step model reaches, i.e. card-seconds ``n T >= W``, priced at the offer's price per
    card-hour). Valid because the bill ``n p h(T) / 3600 + charges`` has ``h(T) >= T``
    (:func:`tpopt.models.market.billed_seconds`: ``max(m, T)``, ``g ceil(T / g) >= T``, ``term ceil(T / term)
    >= T``) and charges >= 0. A mix of two markets rounds each part's cards (their sum can fall below ``n``):
    0, never skipped."""
    if offer.parts:
        return 0.0
    floor = cost_floor(sc, offer.accelerator)
    return 0.0 if floor is None or not math.isfinite(floor) else floor


def _better(a: Evaluation, b: Evaluation | None, objective: str) -> bool:
    if b is None:
        return True
    ka, kb = objective_key(a, objective), objective_key(b, objective)
    return ka[0] < kb[0] * (1 - REL) or (ka[0] <= kb[0] * (1 + REL) and ka[1] < kb[1] * (1 - REL))


def solve_offer(sc: Scenario, offer: M.Offer, solver: Solver, req: Request,
                choose: Callable[[Space, Solver, str], Solver]) -> OfferSolve:
    """The best plan on ``offer`` (see the module): one solve for a per-second bill, else the card scan."""
    sub = offer_scenario(sc, offer)
    clock = clock_of(req)  # the run's one clock (shared by every offer: replace(req) keeps it)
    if clock.expired(SOLVING_OFFERS):  # no offer is started once it has run out: not decided, never skipped
        return OfferSolve(offer, sub, Status.UNKNOWN, None, 0, "not started (time limit reached)")
    solving = solving_scenario(sub)
    space = Space.from_scenario(solving)
    run = choose(space, solver, req.method)
    counts = [n for n in card_counts(space.domains) if n <= F.limit(F.CARDS, sub) and offer.cards_fit(n)
              and (req.cards is None or n in req.cards)]
    if offer.linear and not charges_checkpoints(sc, offer):
        r = core.solve(solving, run, replace(req, top=1, cards=tuple(counts) if offer.parts else req.cards),
                       space=space)
        one = billed(sc, offer, r.best) if r.best is not None else None
        return OfferSolve(offer, sub, r.status, one, 1, "one solve", space.size())
    enforced = req.enforced(FAMILIES)
    inner = frozenset(f for f in enforced if f != F.BUDGET)
    cap = sc.cost.max_cost if F.BUDGET in enforced else None
    best: Evaluation | None = None
    proven, solves = True, 0
    fixed = sum(checkpoint_costs(sc, offer, 0.0))  # the checkpoints' least charge (egress; storage from 0 s)
    for n in counts:
        if req.objective == "cost" and best is not None and \
                M.least_billed_cost(offer, n) + fixed > best.metrics["cost"] * (1 + REL):
            break  # no plan of n or more cards bills less
        if clock.expired(SOLVING_OFFERS):  # the card counts left are not searched: nothing is proven
            proven = False
            break
        r = core.solve(solving, run, replace(req, objective="time", enforce=inner, cards=(n,), top=1),
                       space=space)
        solves += 1
        proven &= r.status in PROVEN
        if r.best is None:
            continue
        ev = billed(sc, offer, r.best)
        if cap is not None and ev.metrics["cost"] > cap * (1 + REL):
            continue  # the fastest plan of n cards bills least: none of n cards meets the budget
        if _better(ev, best, req.objective):
            best = ev
    status = (Status.OPTIMAL if best is not None else Status.INFEASIBLE) if proven else \
        (Status.FEASIBLE if best is not None else Status.UNKNOWN)
    return OfferSolve(offer, sub, status, best, solves, "card-count scan", space.size())


def offer_fronts(sc: Scenario, solver: Solver, req: Request, choose: Callable[[Space, Solver, str], Solver],
                 bound: bool = True) -> dict[str, OfferSolve]:
    """The offers answered by their accelerator's layout front (:mod:`tpopt.optimizer.market_front`): those
    whose solver would enumerate the space anyway (:func:`tpopt.optimizer.core.tiny_solver`), one enumeration
    per accelerator, every offer of it priced on the front. Offers of other accelerators are left out (each
    keeps its own solves, :func:`solve_offer`).

    ``bound`` (least cost asked): the accelerators in ascending order of their least :func:`offer_bound`;
    one whose bound is above the least bill found so far by more than :data:`SKIP_MARGIN` (relative) is not
    built: its offers are rows of method :data:`BOUND` (no plan on them bills less than their bound).
    :func:`solve_market` keeps them only where :func:`bounds_hold` proves the pick unchanged."""
    by_acc: dict[str, list[M.Offer]] = {}
    for o in sc.market.offers:
        by_acc.setdefault(o.accelerator, []).append(o)
    clock = clock_of(req)
    out: dict[str, OfferSolve] = {}
    groups = [(offers, [offer_scenario(sc, o) for o in offers]) for offers in by_acc.values()]
    floors = {o.id: offer_bound(s, o) for offers, subs in groups for o, s in zip(offers, subs, strict=True)}
    bound &= req.objective == "cost"
    if bound:  # stable: equal bounds keep catalog order
        groups.sort(key=lambda g: min(floors[o.id] for o in g[0]))
    best = math.inf
    for offers, subs in groups:
        solving = [solving_scenario(s) for s in subs]
        space = Space.from_scenario(MF.front_scenario(sc, solving))
        if choose(space, solver, req.method).name != EXHAUSTIVE:
            continue
        if bound and min(floors[o.id] for o in offers) > best * (1 + SKIP_MARGIN):
            out.update({o.id: OfferSolve(o, s, Status.UNKNOWN, None, 0, BOUND, space.size(), floors[o.id])
                        for o, s in zip(offers, subs, strict=True)})
            continue
        if clock.expired(SOLVING_OFFERS):  # not started: not decided, never skipped
            out.update({o.id: OfferSolve(o, s, Status.UNKNOWN, None, 0, "not started (time limit reached)")
                        for o, s in zip(offers, subs, strict=True)})
            continue
        front = MF.build_front(space, req, clock)
        for o, s, solve_s in zip(offers, subs, solving, strict=True):
            priced = MF.price_front(front, sc, solve_s, o, req, partial(checkpoint_charge, sc, o))
            i = MF.front_pick(front, priced, req.objective,
                              o.linear and not charges_checkpoints(sc, o))
            one = billed(sc, o, MF.front_plan(front, solve_s, i)) if i is not None else None
            status = (Status.OPTIMAL if one is not None else Status.INFEASIBLE) if front.complete else \
                (Status.FEASIBLE if one is not None else Status.UNKNOWN)
            out[o.id] = OfferSolve(o, s, status, one, 0, FRONT, space.size())
            if one is not None:
                best = min(best, float(one.metrics["cost"]))
    return out


def build_fronts(sc: Scenario, offers: tuple[M.Offer, ...], solver: Solver, req: Request,
                 choose: Callable[[Space, Solver, str], Solver]) -> dict[str, OfferSolve]:
    """``offers`` (rows a cost bound decided, :data:`BOUND`) answered after all: their accelerators' fronts built
    without bounds (:func:`offer_fronts`), by offer id."""
    return offer_fronts(replace(sc, market=replace(sc.market, offers=offers)), solver, req, choose, bound=False)


def bounds_hold(rows: list[OfferSolve], objective: str) -> bool:
    """Is the market's pick over ``rows`` (:func:`_better` in catalog order, the first of near ties) the same
    whatever plans the :data:`BOUND` rows hold, given only that each bills at least its bound?

    *Proof by simulation.* Follow the pick through the rows with, as state, the set of rows the pick can be:
    a row with a plan replaces a known pick by :func:`_better`; a bound row ``A`` cannot replace a known pick
    ``p`` when ``bound(A) > cost(p) (1 + REL)`` (then ``cost(A) < cost(p) (1 - REL)`` and ``cost(A) <=
    cost(p) (1 + REL)`` both fail), else both stay possible; a row ``Y`` surely replaces a bound row ``A``
    when ``cost(Y) < bound(A) (1 - REL) <= cost(A) (1 - REL)``, and otherwise either may stay (both kept).
    True when the state ends as one known row: the pick without the bound rows, since every step taken on
    known rows is the comparison the market makes. Only for the least cost (the bound is on the cost)."""
    if objective != "cost":
        return not any(r.bound is not None for r in rows)
    state: set[int] = set()  # indices of rows the pick can be
    for k, r in enumerate(rows):
        if r.bound is not None:
            if not state or any(_may_replace(r.bound, rows[j]) for j in state):
                state.add(k)
            continue
        if r.best is None:
            continue
        nxt: set[int] = set()
        for j in state or {-1}:
            if j < 0:
                nxt.add(k)
            elif (low := rows[j].bound) is not None:  # surely replaced below its bound; else either may stay
                nxt.update({k} if float(r.best.metrics["cost"]) < low * (1 - REL) else {j, k})
            else:
                other = rows[j].best
                assert other is not None
                nxt.add(k if _better(r.best, other, objective) else j)
        state = nxt
    return len(state) <= 1 and all(rows[j].bound is None for j in state)


def _may_replace(bound: float, pick: OfferSolve) -> bool:
    """Can a plan billing at least ``bound`` replace ``pick`` (a bound row, or a row with a plan)?"""
    if pick.bound is not None or pick.best is None:
        return True
    return bound <= float(pick.best.metrics["cost"]) * (1 + REL)


@dataclass
class MarketSolve:
    """Every offer's sub-problem and the best over them."""

    offers: list[OfferSolve]
    pick: OfferSolve | None
    result: SolveResult
    power_binding: bool | None = None  # with a site power cap: does dropping it admit a better plan?


def solve_market(sc: Scenario, solver: Solver, req: Request, choose: Callable[[Space, Solver, str], Solver]
                 ) -> MarketSolve:
    """The best plan over the scenario's offers (ties: the first offer in catalog order)."""
    if sc.stages or tuple(sc.search.global_batch or (sc.task.global_batch,)) != (sc.task.global_batch,):
        raise InputError("[market] offers with training stages or a global-batch choice are not supported; "
                         "give one stage and one global batch")
    t0 = time.perf_counter()
    unknown = sorted({o.accelerator for o in sc.market.offers} - set(sc.systems))
    if unknown:
        raise InputError(f"market: offers of {', '.join(unknown)}, which the scenario's hardware does not list")
    clock = clock_of(req)  # one clock over every offer's solves (set here when the caller gave none)
    fronts = offer_fronts(sc, solver, req, choose)
    rows: list[OfferSolve] = []
    for o in sc.market.offers:  # one offer at a time: the progress line counts them
        clock.report(SOLVING_OFFERS, len(rows), len(sc.market.offers), objective=req.objective,
                     best=min((objective_key(r.best, req.objective)[0] for r in rows if r.best), default=None))
        rows.append(fronts[o.id] if o.id in fronts else solve_offer(sc, o, solver, req, choose))
    if not bounds_hold(rows, req.objective):  # a bound too near the pick: build those fronts after all
        built = build_fronts(sc, tuple(r.offer for r in rows if r.bound is not None), solver, req, choose)
        rows = [built.get(r.offer.id, r) for r in rows]
    pick: OfferSolve | None = None
    for row in rows:
        if row.best is not None and (pick is None or _better(row.best, pick.best, req.objective)):
            pick = row
    proven = all(decided(r) for r in rows)
    status = (Status.OPTIMAL if pick else Status.INFEASIBLE) if proven else (Status.FEASIBLE if pick else
                                                                            Status.UNKNOWN)
    solves = sum(r.solves for r in rows)
    n_fronts = len({r.offer.accelerator for r in rows if r.method == FRONT})
    n_bound = len({r.offer.accelerator for r in rows if r.method == BOUND})
    info = SolverInfo(name=solver.name,
                      note=f"one exact sub-problem per offer ({len(rows)} offer{'s' * (len(rows) != 1)}"
                           f", {solves} solve{'s' * (solves != 1)}"
                           + (f", {n_fronts} layout front{'s' * (n_fronts != 1)}" if n_fronts else "")
                           + (f", {n_bound} accelerator{'s' * (n_bound != 1)} decided by a cost bound"
                              if n_bound else "") + ")")
    info.gap = 0.0 if status == Status.OPTIMAL else None
    if not proven:  # short of a proof only when the clock ran out (a solve's own limit is the clock's)
        info.limit_reached = True
        info.limit_phase = clock.phase or SOLVING_OFFERS
    fronts_points = {r.offer.accelerator: r.points for r in rows if r.method in (FRONT, BOUND)}  # one per card
    info.points = sum(r.points for r in rows if r.method not in (FRONT, BOUND)) + sum(fronts_points.values())
    info.wall_s = time.perf_counter() - t0
    plans = [pick.best] if pick and pick.best else []
    enforced = req.enforced(FAMILIES)
    out = MarketSolve(rows, pick, SolveResult(status=status, objective=req.objective, plans=plans, solver=info,
                                              enforced=tuple(f for f in FAMILIES if f in enforced)))
    if sc.market.site_power_w is not None and pick is not None and pick.best is not None:
        free = solve_market(replace(sc, market=replace(sc.market, site_power_w=None)), solver, req, choose)
        better = free.pick is not None and free.pick.best is not None and \
            _better(free.pick.best, pick.best, req.objective)
        # a better plan without the cap proves it binds; none found proves it does not only when proven
        out.power_binding = True if better else (False if free.result.status in PROVEN else None)
        if out.power_binding is not None:  # undecided: the check keeps its own "at the cap" flag
            out.result.plans = [mark_power(pick.best, out.power_binding)]
            pick.best = out.result.plans[0]
    return out


def mark_power(ev: Evaluation, binding: bool) -> Evaluation:
    """``ev`` with its power.site check marked binding exactly when dropping the cap admits a better plan."""
    checks = [replace(c, binding=binding) if c.name == F.POWER_SITE else c for c in ev.constraints]
    return Evaluation(plan=ev.plan, metrics=ev.metrics, constraints=checks)


# ---------------------------------------------------------------------------------------------
# preemption figures and the Confidence hook


def preemption_source(sc: Scenario, ev: Evaluation) -> tuple[float, float]:
    """(preemptions per second, mean seconds lost per preemption) of a plan on its offer's scenario ``sc``:
    ``lam_p = n rho``; each loses the redo since the last checkpoint (tau / 2, plus the commit lag of an
    async save), the restore and the reacquisition delay. The hook a finish-time distribution adds to its
    failure sources; (0, 0) without preemptions (T.preemption_terms: the offer's, else the ``[risk]`` table's). After
    ``plan()`` of a market scenario, ``PlanReport.view`` is
    that offer's scenario: ``preemption_source(report.view, report.best)``."""
    rel = sc.reliability
    lam = float(T.preemption_rate(sc, ev.plan.cards))
    if lam == 0.0:
        return 0.0, 0.0
    _, lag = T.save_pause_lag(sc, ev.plan.save_mode)
    return lam, ev.plan.save_interval_s / 2 + lag + rel.restore_s + T.preemption_terms(sc)[1]


def preemption_figures(sub: Scenario, offer: M.Offer, ev: Evaluation) -> dict[str, Any]:
    """Expected preemptions over the run (``lam_p x T_train``), the time and money they cost (the plan
    billed without them at the same save interval, subtracted), and the save interval that is optimal
    with and without them."""
    lam, per_event = preemption_source(sub, ev)
    calm = replace(sub, market=replace(sub.market, preempt_per_card_s=0.0, reacquire_s=0.0),
                   risk=replace(sub.risk, preempt_rate_per_card_s=0.0, reacquire_s=0.0))
    without = evaluate(calm, ev.plan)
    n, mode = ev.plan.cards, ev.plan.save_mode
    # on capacity (the waits are not preemptions')
    f, f0 = M.run_finish_s(ev.metrics), without.metrics["finish_days"] * DAY
    return {"preemptions_per_hour": lam * HOUR, "rate_per_card_hour": offer.preempt_per_card_hour,
            "rate_source": offer.preempt_source, "reacquire_s": offer.reacquire_s,
            "expected_preemptions": lam * ev.metrics["train_days"] * DAY, "seconds_lost_per_preemption": per_event,
            "time_cost_days": (f - f0) / DAY,
            "cost": M.billed_cost(offer, n, f) + checkpoint_costs(sub, offer, f)[0]
            - M.billed_cost(offer, n, f0) - checkpoint_costs(sub, offer, f0)[0],
            "save_interval_s": ev.plan.save_interval_s, "interval_basis": interval_basis(sub, ev),
            "optimal_interval_s": float(T.optimal_save_interval(sub, n, mode)),
            "optimal_interval_without_s": float(T.optimal_save_interval(calm, n, mode))}


def interval_basis(sub: Scenario, ev: Evaluation) -> str:
    """Where the plan's save interval comes from: "stated" (one of the scenario's ``checkpoint.save_interval``
    values), "write time" (auto: the optimum for the combined failure rate raised to the checkpoint's write
    time, :func:`tpopt.models.terms.optimal_save_interval`) or "optimum" (auto: the optimum itself)."""
    tau = ev.plan.save_interval_s
    if any(v > 0 and math.isclose(v, tau, rel_tol=1e-12) for v in sub.search.save_interval_s):
        return "stated"
    return "write time" if tau <= T.checkpoint_write_time(sub) * (1 + 1e-12) else "optimum"


def offer_dict(offer: M.Offer, as_of: str) -> dict[str, Any]:
    """The offer as reports print it: who, where, what, on what terms, when, from where, and the notes."""
    return {"id": offer.id, "provider": offer.provider, "region": offer.region, "accelerator": offer.accelerator,
            "market": offer.market_name, "price_card_hour": offer.price_card_hour,
            "cards_per_host": offer.cards_per_host,
            "term_days": offer.term_s / DAY if offer.market == M.RESERVED else None,
            "billing_s": offer.billing_s, "min_commitment_h": offer.min_commit_s / HOUR,
            "available": offer.available, "date": offer.date, "source": offer.source,
            "illustrative": offer.illustrative, "notes": M.price_notes(offer, as_of),
            "parts": [{"offer": o.id, "share": share} for o, share in offer.parts]}


def market_entries(ms: MarketSolve, sc: Scenario) -> dict[str, Any]:
    """The report's ``market`` entry: the offer used (with its date and notes), the spot figures, and one
    row per offer (its best plan's cost and finish, or its status)."""
    as_of = sc.market.as_of
    rows = []
    for r in ms.offers:
        row: dict[str, Any] = {"offer": r.offer.id, "status": r.status.value, "method": r.method,
                               "solves": r.solves, "notes": M.price_notes(r.offer, as_of)}
        if r.bound is not None:
            row.update({"status": "bounded", "bound": r.bound})
        if r.best is not None:
            e = T.evidence_of(r.sc, r.best.plan.accelerator, float(r.best.plan.cards), float(r.best.plan.ep))
            row.update({"cards": r.best.plan.cards, "finish_days": r.best.metrics["finish_days"],
                        "cost": r.best.metrics["cost"], "priors_only": e["card"] == "prior", "step_sigma": e["sigma"],
                        **capacity_entries(r.offer, r.best)})
        rows.append(row)
    out: dict[str, Any] = {"as_of": as_of, "offers": rows, "offer": None, **decided_entries(ms)}
    if ms.pick is not None and ms.pick.best is not None:
        out["offer"] = offer_dict(ms.pick.offer, as_of)
        out["spot_share"] = ms.pick.offer.spot_share
        out["capacity"] = capacity_figures(ms.pick.offer, ms.pick.best) if ms.pick.offer.spot_share > 0 else None
        out["preemption"] = preemption_figures(ms.pick.sc, ms.pick.offer, ms.pick.best) \
            if ms.pick.offer.market == M.SPOT else None
        out["power"] = power_figures(sc, ms.pick.offer, ms.pick.best, ms.power_binding)
        out["checkpoints"] = checkpoint_figures(sc, ms.pick.offer, ms.pick.best)
    return out


def capacity_entries(offer: M.Offer, ev: Evaluation) -> dict[str, Any]:
    """An offer row's capacity figures: P(spot capacity on a day) and the expected waits in its finish (none off
    the spot market)."""
    a = M.spot_availability(offer)
    return {} if a >= 1.0 else {"spot_availability": a, "capacity_wait_days": ev.metrics.get("capacity_wait_days")}


def capacity_figures(offer: M.Offer, ev: Evaluation) -> dict[str, Any]:
    """The chosen spot plan's capacity assumption: P(capacity obtainable on a day) a and where it comes from,
    and the expected waits its finish counts, (its run on capacity) x (1 - a) / a
    (:func:`tpopt.models.market.capacity_wait_s`; not billed)."""
    return {"availability_per_day": M.spot_availability(offer), "source": M.spot_availability_source(offer),
            "wait_days": float(ev.metrics.get("capacity_wait_days", 0.0))}


def decided_entries(ms: MarketSolve) -> dict[str, Any]:
    """Which offers are decided (optimal or proven infeasible) and which are not (cut short by the time
    limit), whether the limit was reached, and whether the plan chosen is proven the best over every offer
    (``pick_proven``: every offer decided; else it is the best found and an undecided offer may beat it)."""
    undecided = [r.offer.id for r in ms.offers if not decided(r)]
    return {"time_limit_reached": bool(ms.result.solver.limit_reached),
            "decided": [r.offer.id for r in ms.offers if decided(r)], "undecided": undecided,
            "pick_proven": ms.pick is not None and not undecided}


def checkpoint_figures(sc: Scenario, offer: M.Offer, ev: Evaluation) -> dict[str, Any]:
    """The bill's cost lines: compute (the offer), checkpoint storage and egress, with the checkpoint's size,
    the copies kept and sent out, the region's prices, their date and source, and the price notes."""
    st, m = offer.storage, sc.market
    d: dict[str, Any] = {"compute_cost": ev.metrics["compute_cost"], "storage_cost": ev.metrics[
        "checkpoint_storage_cost"], "egress_cost": ev.metrics["checkpoint_egress_cost"],
        "checkpoint_gb": checkpoint_gb(sc), "copies": m.checkpoint_copies, "egress_copies": m.checkpoint_egress,
        "region": f"{offer.provider}/{offer.region}", "priced": st is not None}
    if st is not None:
        age = M.months_between(st.date, m.as_of) if m.as_of else 0
        d.update({"storage_gb_month": st.gb_month, "egress_gb": st.egress_gb, "date": st.date, "source": st.source,
                  "notes": [f"storage price older than {M.STALE_MONTHS} months ({age} months at {m.as_of})"]
                  if age > M.STALE_MONTHS else []})
    return d


def power_figures(sc: Scenario, offer: M.Offer, ev: Evaluation, binding: bool | None) -> dict[str, Any] | None:
    """Site power (MW), IT power, PUE, energy over the run (MWh, at training power for the whole finish
    time less the waits for spot capacity: an upper bound), the cap and whether it binds; None when the card's power
    is not in the catalog."""
    p = offer.power
    if p is None:
        return None
    n, cph = ev.plan.cards, offer.cards_per_host
    site = M.site_power_w(p, offer.pue, n, cph)
    cap = sc.market.site_power_w
    mwh = M.energy_mwh(p, offer.pue, n, cph, M.run_finish_s(ev.metrics))  # on capacity: a day without it draws nothing
    return {"site_mw": site / 1e6, "it_mw": site / offer.pue / 1e6, "pue": offer.pue, "pue_source": offer.pue_source,
            "card_w": p.training_w, "board_w": p.board_w, "host_overhead_w": p.host_overhead_w, "source": p.source,
            "energy_mwh": mwh, "cap_mw": None if cap is None else cap / 1e6,
            "cap_cards": None if cap is None else power_cards(sc, offer), "binding": binding,
            "region": f"{offer.provider}/{offer.region}", **M.energy_figures(offer.energy, mwh)}


__all__ = ["offer_scenario", "solving_scenario", "capacity_entries", "capacity_figures",
           "billed", "power_cards", "power_figures", "mark_power", "solve_offer", "solve_market",
           "MarketSolve", "OfferSolve", "checkpoint_gb", "checkpoint_costs", "checkpoint_figures",
           "charges_checkpoints", "offer_fronts", "build_fronts",
           "offer_bound", "bounds_hold", "decided", "BOUND", "checkpoint_charge", "decided_entries", "FRONT",
           "preemption_source", "preemption_figures", "interval_basis", "offer_dict", "market_entries"]
