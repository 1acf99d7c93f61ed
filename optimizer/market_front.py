"""One layout front per accelerator, priced per offer: the market at the cost of one enumeration per card.

**What an offer changes.** :func:`tpopt.optimizer.market.offer_scenario` changes the price per card-hour
(NICs included), the cap on the cards (``cards.max``), the billing and the preemption rate (failure rate,
reacquisition delay). None of these enters the step: memory, the layout rules, the step time ``t`` and the
input supply of a plan are the same on every offer of its accelerator, and so are the search domains
(the card factors' domains do not depend on ``max_cards``). The terms an offer moves are those of
:func:`tpopt.models.evaluate.deadline_terms` (the save interval, ``L(tau)``, the finish, the rate, the
deadline's limit on the step) plus the bill (:func:`tpopt.models.market.billed_cost`, non-decreasing in the
finish) and the checkpoints' charges (non-decreasing in the finish).

**The front.** Group the plans of the accelerator by ``g = (cards n, save mode, tau choice, ep)``. Within a
group the save interval (the "auto" optimum depends on n, the mode and the offer's rate only), ``L``, the
rate, the deadline's step limit and the ``checkpoint.backlog`` check are the same for every plan, so on any
offer the finish ``T = R + I t (1 + L)`` and the bill ``h(T)`` are non-decreasing functions of ``t`` alone.

*Claim.* Let ``p*_g`` be the plan of least step time among the plans of ``g`` that meet every
offer-independent family the request enforces (the first in enumeration order on ties). On every offer,
the optimum over all plans equals the optimum over ``{p*_g}``, with the same tie-break.

*Proof.* Take any plan ``p`` of group ``g`` feasible on an offer ``o``. It meets the offer-independent
families, so ``p*_g`` exists and ``t(p*_g) <= t(p)``. The offer-dependent families are
``deadline.finish`` (its value is ``T`` or its chance-equivalent ``R + (D - R) t / t_max``, both
non-decreasing in ``t``; ``t_max`` is the group's; on a spot offer without a confidence ``T`` is checked
against the run deadline ``R + a (D - R)``, the same verdict as the expected calendar finish
``R + (T - R) / a``, increasing in ``T``, against ``D``: :func:`tpopt.optimizer.market.solving_scenario`),
``checkpoint.backlog`` (``c <= tau``: the group's), ``cards.max`` (n: the group's) and ``budget.cost`` (the
bill, non-decreasing in ``T``): each holds for ``p*_g`` when it holds for ``p``. Both objective keys, (cost,
finish) and (finish, cost), are non-decreasing in ``t`` within ``g``, so ``key(p*_g) <= key(p)``; equal keys
within ``g`` need equal ``t`` (T is strictly increasing in ``t``, and so is a spot offer's calendar finish), and
then ``p*_g`` comes first in enumeration order, so the enumerator's tie-break picks it too. Hence every plan is
matched or beaten by its group's front plan. QED.

*The save mode and interval.* No term of the step or of a layout family declares the save mode or the
save interval (:mod:`tpopt.models.layout`: a term reads the variables it declares; only the deadline terms
take them), so the least-step layout of ``(n, ep)`` is the same for every mode and interval: the walk fixes
both at their first value and the front gives each (mode, interval) that layout. Within a group the
enumerator's order of layouts is the same at every (mode, interval) (the walk is a product in a fixed
order), so the tie-break within a group is kept; across groups, exact ties of both keys (equal to the last
bit) are broken by (layout, save mode, interval) order. ``tests/test_market_front.py`` checks the step and the
layout families equal across save modes and intervals.

So an accelerator's space is enumerated once (every plan's step; the expensive part of the per-operation
model), and each offer costs one pass over the front (a few hundred plans, closed forms from
:func:`deadline_terms`) and one exact evaluation of its winner. The front is used when the offer's solver
would enumerate the space anyway (:func:`tpopt.optimizer.core.tiny_solver`); beyond, each offer keeps its
own solves. ``tests/test_market_front.py`` checks it against per-offer enumeration.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from tpopt.models import families as F
from tpopt.models import market as M
from tpopt.models.evaluate import deadline_terms, evaluate
from tpopt.models.plan import Scenario
from tpopt.optimizer.enumerate import NUMERIC_AXES, Assignment, chunks
from tpopt.optimizer.limits import Clock, TimeLimitReached
from tpopt.optimizer.result import Request
from tpopt.optimizer.space import FAMILIES, Space

OFFER_FAMILIES = (F.DEADLINE, F.CHECKPOINT, F.CARDS, F.BUDGET, F.STEP_BUDGET)
"""The families an offer moves (checked per offer on the front); every other family is the layout's."""

REL = 1e-9


@dataclass
class Front:
    """An accelerator's layout front: per group (cards, save mode, tau choice, ep), its fastest plan that
    meets the offer-independent families; ``complete`` when every plan of the space was evaluated."""

    space: Space
    plans: list[Assignment] = field(default_factory=list)
    cards: list[int] = field(default_factory=list)
    mode: list[str] = field(default_factory=list)
    tau: list[float] = field(default_factory=list)  # the tau choice (0: auto)
    ep: list[float] = field(default_factory=list)
    nics: list[float] = field(default_factory=list)
    step_s: list[float] = field(default_factory=list)
    order: list[int] = field(default_factory=list)  # the plan's place in enumeration order (the tie-break)
    complete: bool = False
    evaluated: int = 0


def layout_families(req: Request) -> list[str]:
    """The enforced families that no offer moves (checked once, on the front)."""
    enforced = req.enforced(FAMILIES)
    return [f for f in FAMILIES if f in enforced and f not in OFFER_FAMILIES]


PHASE = "enumerating the offers' layouts"  # the clock's phase while a front is built
GroupKey = tuple[int, int, int, float]  # (cards, save mode index, tau index, ep)
Best = dict[GroupKey, tuple[float, int, Assignment, float]]  # group -> (step s, order, assignment, NICs)


def build_front(space: Space, req: Request, clock: Clock) -> Front:
    """The front of ``space`` (one accelerator, any of its offers' scenarios): every plan evaluated once
    (:func:`tpopt.optimizer.enumerate.chunks`), per group the least step (first in order on ties). The clock
    is checked on entry, before every chunk and after it (a chunk finished past the limit is dropped); when it
    runs out the front holds the plans of the chunks finished within it (``complete`` False)."""
    best: Best = {}
    walked = [0]
    complete = True
    d = space.domains
    layouts = Space(sc=space.sc, domains=dict(d, mode=d["mode"][:1], tau=d["tau"][:1]))  # see the module
    try:
        with clock.stoppable(PHASE, keep_finished=True):
            _walk(layouts, layout_families(req), best, walked, clock)
    except TimeLimitReached:
        complete = False
    front = Front(space=space, complete=complete, evaluated=walked[0] * len(d["mode"]) * len(d["tau"]))
    choices = len(d["mode"]) * len(d["tau"])
    for (n, _, _, ep_g), (step_g, ordr, idx, nics) in sorted(best.items(), key=lambda kv: kv[1][1]):
        for mode_i, tau_j in itertools.product(range(len(d["mode"])), range(len(d["tau"]))):
            front.plans.append(dict(idx, mode=mode_i, tau=tau_j))
            front.cards.append(n)
            front.mode.append(d["mode"][mode_i])
            front.tau.append(float(d["tau"][tau_j]))
            front.ep.append(ep_g)
            front.nics.append(nics)
            front.step_s.append(step_g)
            front.order.append(ordr * choices + mode_i * len(d["tau"]) + tau_j)
    return front


def _walk(space: Space, fams: list[str], best: Best, walked: list[int], clock: Clock) -> None:
    """Every chunk of ``space``: its plans meeting ``fams``, each group's least step (first in order on
    ties) merged into ``best``; ``walked[0]`` counts the plans evaluated."""
    d = space.domains
    total = space.size()
    tau_axis, ep_axis = NUMERIC_AXES.index("tau"), NUMERIC_AXES.index("ep")
    for fixed, idx_lists, shape, r in chunks(space):
        clock.check(PHASE)  # a chunk finished past the limit is not kept: only what the limit allowed
        feas = np.ones(shape, dtype=bool)
        for f in fams:
            v, lim = r[("c", f)]
            feas &= np.broadcast_to(v <= lim, shape)
        order = walked[0]
        walked[0] += int(np.prod(shape))
        clock.report(PHASE, walked[0], total)
        flat = np.flatnonzero(feas.reshape(-1))
        if not flat.size:
            continue
        coords = np.unravel_index(flat, shape)
        step = np.broadcast_to(r["step_s"], shape).reshape(-1)[flat]
        cards = np.broadcast_to(r["cards"], shape).reshape(-1)[flat].astype(int)
        tau_i = np.asarray(idx_lists[tau_axis])[coords[tau_axis]]
        ep = np.asarray(d["ep"], dtype=float)[np.asarray(idx_lists[ep_axis])[coords[ep_axis]]]
        ords = order + flat
        sort = np.lexsort((ords, step, ep, tau_i, cards))  # by group, then step, then order
        gid = np.stack([cards[sort], tau_i[sort], ep[sort]])
        first = np.ones(sort.size, dtype=bool)
        first[1:] = np.any(gid[:, 1:] != gid[:, :-1], axis=0)
        for k in sort[first]:
            key = (int(cards[k]), fixed["mode"], int(tau_i[k]), float(ep[k]))
            old = best.get(key)
            if old is None or step[k] < old[0]:  # a later chunk comes later in order: strictly less only
                idx = dict(fixed)
                idx.update({a: idx_lists[j][c[k]] for j, (a, c) in enumerate(zip(NUMERIC_AXES, coords,
                                                                                  strict=True))})
                best[key] = (float(step[k]), int(ords[k]), idx, float(d["nics"][idx["nics"]]))


@dataclass
class Priced:
    """The front priced on one offer: per front plan its finish, plan-model cost, bill and verdict."""

    finish: Any
    cost: Any
    bill: Any
    feasible: Any  # every enforced offer family but budget.cost
    within_budget: Any


def price_front(front: Front, sc: Scenario, sub: Scenario, offer: M.Offer, req: Request,
                charges: Callable[[float], float]) -> Priced:
    """Every front plan on ``offer`` (its scenario ``sub``): the closed forms of
    :func:`tpopt.models.evaluate.deadline_terms` per (save mode, ep) batch, the bill (the offer's, plus
    ``charges(finish)``: the checkpoints' storage and egress) and the checks of the families the offer
    moves."""
    k = len(front.plans)
    acc = offer.accelerator
    enforced = req.enforced(FAMILIES)
    cards = np.asarray(front.cards, dtype=float)
    finish, cost = np.zeros(k), np.zeros(k)
    feasible = np.ones(k, dtype=bool)
    view = Space(sc=sub, domains=front.space.domains)
    for mode in sorted(set(front.mode)):
        for ep in sorted(set(front.ep)):
            sel = np.flatnonzero([(m == mode and e == ep) for m, e in zip(front.mode, front.ep, strict=True)])
            if not sel.size:
                continue
            n = cards[sel]
            tau = view.interval(np.asarray(front.tau)[sel], n, mode)
            step = np.asarray(front.step_s)[sel]
            dt = deadline_terms(sub, acc, step, mode, n, tau, np.asarray(front.nics)[sel], ep)
            finish[sel] = np.broadcast_to(dt.finish_s, sel.shape)
            cost[sel] = np.broadcast_to(dt.cost, sel.shape)
            ok = np.ones(sel.size, dtype=bool)
            checks = {F.DEADLINE: (dt.deadline_value, dt.deadline_s), F.CHECKPOINT: (dt.write_s, tau),
                      F.CARDS: (n, F.limit(F.CARDS, sub)), F.STEP_BUDGET: (step, dt.step_limit)}
            for f, (v, lim) in checks.items():
                if f in enforced:
                    ok &= np.broadcast_to(np.asarray(v, dtype=float) <= np.asarray(lim, dtype=float), sel.shape)
            feasible[sel] = ok
    bill = np.array([M.billed_cost(offer, int(n), float(f)) + charges(float(f))
                     for n, f in zip(front.cards, finish, strict=True)]) if k else np.zeros(0)
    fits = np.array([offer.cards_fit(n) and (req.cards is None or n in req.cards) for n in front.cards], dtype=bool)
    feasible &= fits if k else feasible
    if F.BUDGET in enforced and sc.cost.max_cost is not None:
        within = bill <= sc.cost.max_cost * (1 + REL)
    else:
        within = np.ones(k, dtype=bool)
    return Priced(finish, cost, bill, feasible, within)


def front_pick(front: Front, priced: Priced, objective: str, linear: bool) -> int | None:
    """The offer's best front plan (an index), with the tie-breaks of the per-offer solves it replaces:
    one solve's (primary key, secondary key, enumeration order) for a per-second bill; otherwise the card
    count scan's: per card count, ascending, the fastest plan (finish, cost, order), kept when its bill
    meets the budget and beats the best so far by more than a relative 1e-9."""
    ok = np.flatnonzero(priced.feasible & priced.within_budget) if linear else np.flatnonzero(priced.feasible)
    if not ok.size:
        return None
    order = np.asarray(front.order)
    if linear:  # the plan model's own cost is the bill
        k1, k2 = (priced.cost, priced.finish) if objective == "cost" else (priced.finish, priced.cost)
        s = np.lexsort((order[ok], k2[ok], k1[ok]))[0]
        return int(ok[s])
    pick: int | None = None
    cards = np.asarray(front.cards)
    for n in sorted(set(cards[ok].tolist())):
        at = ok[cards[ok] == n]
        i = int(at[np.lexsort((order[at], priced.cost[at], priced.finish[at]))[0]])
        if not priced.within_budget[i]:
            continue  # the fastest plan of n cards bills least: none of n cards meets the budget
        if pick is None or _better(priced, i, pick, objective):
            pick = i
    return pick


def _better(p: Priced, a: int, b: int, objective: str) -> bool:
    """The market's comparison of two billed plans (:func:`tpopt.optimizer.market._better`)."""
    ka = (p.bill[a], p.finish[a]) if objective == "cost" else (p.finish[a], p.bill[a])
    kb = (p.bill[b], p.finish[b]) if objective == "cost" else (p.finish[b], p.bill[b])
    return bool(ka[0] < kb[0] * (1 - REL) or (ka[0] <= kb[0] * (1 + REL) and ka[1] < kb[1] * (1 - REL)))


def front_plan(front: Front, sub: Scenario, i: int) -> Any:
    """The exact evaluation of front plan ``i`` on the offer's scenario ``sub`` (its save interval, its
    preemptions): the Evaluation a per-offer solve returns."""
    view = Space(sc=sub, domains=front.space.domains)
    return evaluate(sub, view.plan(front.plans[i]))


def front_scenario(sc: Scenario, subs: Collection[Scenario]) -> Scenario:
    """The scenario the front is enumerated on: the first offer's, with the largest card cap of the
    accelerator's offers (the step does not depend on the offer; the cap is checked per offer)."""
    first = next(iter(subs))
    most = max(s.search.max_cards for s in subs)
    return replace(first, search=replace(first.search, max_cards=most))


__all__ = ["Front", "Priced", "OFFER_FAMILIES", "build_front", "price_front", "front_pick", "front_plan",
           "front_scenario", "layout_families"]
