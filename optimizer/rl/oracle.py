"""What limits the optimum, the alternatives, why nothing is feasible, the async break-even.

The questions are :mod:`tpopt.optimizer.analysis`'s, put to an :class:`RLOracle` (one exact :func:`solve` per
question); :data:`QUOTE` is how the reports quote an RL plan.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Collection, Iterable
from typing import Any

from tpopt.models import families as F
from tpopt.models.units import DAY
from tpopt.optimizer import analysis
from tpopt.optimizer.limits import TimeLimitReached
from tpopt.optimizer.rl.problem import RELAXABLE, SPEC, STRUCTURAL, RLEvaluation, RLProblem
from tpopt.optimizer.rl.search import solve

# ---------------------------------------------------------------------------------------------
# what limits the optimum, alternatives, infeasibility, the async break-even (the questions are
# tpopt.optimizer.analysis's, put to an RLOracle)

REL = analysis.REL
GRID_LIMIT = 200_000  # RL decisions a relaxation question may enumerate (cards.max dropped)


def summary(ev: RLEvaluation) -> dict[str, Any]:
    """An RL plan's decisions and headline figures, as reports quote it."""
    d, m = ev.decision, ev.metrics
    return {"accelerator": d.accelerator, "placement": d.placement, "cards": d.cards,
            "learner_cards": d.learner_cards, "rollout_cards": d.rollout_cards, "rollout_tp": d.rollout_tp,
            "rollout_batch": m["rollout"]["batch"], "staleness": d.staleness, "weight_sync": d.weight_sync,
            "cycle_s": m["cycle_s"], "finish_days": m["finish_s"] / DAY, "cost": m["cost"],
            "cost_unit": m["cost_unit"], "bottleneck": m["bottleneck"]}


def objective_value(ev: RLEvaluation, objective: str) -> float:
    """The objective in display units: cost, or finish time in days."""
    value: float = ev.metrics["cost"] if objective == "cost" else ev.metrics["finish_s"] / DAY
    return value


def violation(ev: RLEvaluation, family: str) -> dict[str, Any]:
    """A family's value against its limit for one plan, in the family's unit."""
    unit, scale, _ = SPEC[family]
    if family not in ev.checks:
        return {"name": family}
    v, lim = ev.checks[family]
    return {"name": family, "value": v / scale, "limit": None if math.isinf(lim) else lim / scale, "unit": unit}


QUOTE = analysis.Quote(objective_value, summary, violation)  # how the reports quote an RL plan


def _better(a: RLEvaluation, b: RLEvaluation, objective: str) -> bool:
    """``a`` strictly better than ``b``: key(a) < key(b) (1 - REL) on the objective's first key."""
    return bool(a.key(objective)[0] < b.key(objective)[0] * (1 - REL))


def _wider_problem(pb: RLProblem) -> RLProblem | None:
    """The problem a question without cards.max needs: a card grid up to 8x (else 4x, 2x) the cap, the
    largest whose RL decisions stay enumerable; None if none does, or if the run's clock ran out while
    the grids were counted (nothing cached then: the question is solved on the problem's own grid, whose
    solve sees the clock has run out and says so)."""
    cache = pb.caches.setdefault("relaxed", {})
    if pb.card_limit not in cache:
        found = None
        try:
            for factor in (8, 4, 2):
                p2 = pb.with_card_limit(factor * int(F.limit(F.CARDS, pb.sc)))
                if p2.grid_size(clock=pb.req.clock) <= GRID_LIMIT:
                    found = p2.card_limit
                    break
        except TimeLimitReached:
            return None
        cache[pb.card_limit] = found
    limit: int | None = cache[pb.card_limit]
    return None if limit is None else pb.with_card_limit(limit)


class RLOracle:
    """The :class:`tpopt.optimizer.analysis.Oracle` of the RL reports: the best RL plan under a set of
    families, one exact :func:`solve` per question. ``widen``: a question without cards.max is solved on
    the wider card grid of :func:`_wider_problem` (on the problem's own grid when none is enumerable);
    otherwise every question is solved on the problem's own grid."""

    name = "rl"

    def __init__(self, pb: RLProblem, widen: bool = False):
        self.pb = pb
        self.widen = widen

    def best(self, enforced: Collection[str], objective: str, restrict: dict[str, Any] | None = None,
             cards: Iterable[int] | None = None) -> RLEvaluation | None:
        pb = self.pb
        if self.widen and F.CARDS not in enforced:
            pb = _wider_problem(pb) or pb
        if cards is not None:  # the card counts as a restriction of the decisions' ``cards``
            restrict = {**(restrict or {}), "cards": set(cards)}
        return solve(pb, objective, enforced, restrict).best


def binding(pb: RLProblem, best: RLEvaluation, objective: str, enforced: Collection[str]) -> list[dict[str, Any]]:
    """Families that bind: dropping one alone admits a strictly better plan (which is quoted). Dropping
    cards.max is asked on the wider card grid; when no wider grid is enumerable, cards.max is not asked."""
    cards = F.CARDS in enforced
    skip = (F.CARDS,) if cards and _wider_problem(pb) is None else ()
    found = analysis.binding(RLOracle(pb, widen=cards), best, objective, enforced, RELAXABLE, _better, skip)
    return [analysis.binding_entry(f, alt, best, objective, QUOTE) for f, alt in found]


def _ruled_out(pb: RLProblem, objective: str, enforced: Collection[str], restrict: dict[str, Any]
               ) -> list[dict[str, Any]]:
    """Families that alone rule the restricted alternative out, with the best plan's value against the
    limit once that family is dropped (on the problem's own card grid)."""
    found = analysis.ruled_out(RLOracle(pb), objective, enforced, RELAXABLE, restrict)
    return [violation(alt, f) for f, alt in found] or \
        [{"name": "no single constraint family: several rule it out together"}]


def alternatives(pb: RLProblem, best: RLEvaluation, objective: str, enforced: Collection[str]
                 ) -> list[dict[str, Any]]:
    """What a user would ask next: the other placement, staleness, weight sync, one host fewer,
    other accelerators; each feasible-but-worse (with its objective) or ruled out (and by what)."""
    d = best.decision
    g = pb.sc.system(d.accelerator).acc.cards_per_host
    asks: list[tuple[str, dict[str, Any]]] = []
    for p in pb.rsc.search.placement:
        if p != d.placement:
            asks.append((f"{p} cards", {"placement": [p], "accelerator": [d.accelerator]}))
    if d.placement == "separate":
        other = 1 - d.staleness
        asks.append(("one-step async" if other else "synchronous",
                     {"placement": ["separate"], "staleness": [other], "accelerator": [d.accelerator]}))
    for m in pb.rsc.search.weight_sync:
        if m != d.weight_sync:
            asks.append((f"{m} weight sync", {"weight_sync": [m], "placement": [d.placement],
                                              "accelerator": [d.accelerator]}))
    if d.cards > g:
        asks.append((f"{d.cards - g} cards or fewer", {"cards": set(range(1, d.cards - g + 1)),
                                                       "accelerator": [d.accelerator]}))
    for a in pb.accelerators():
        if a != d.accelerator:
            asks.append((a, {"accelerator": [a]}))
    oracle = RLOracle(pb)
    return [analysis.alternative(oracle, QUOTE, {"alternative": label}, best, objective, enforced, restrict, None,
                                 functools.partial(_ruled_out, pb, objective, enforced, restrict))
            for label, restrict in asks]


def async_break_even(pb: RLProblem, objective: str, enforced: Collection[str], tol: float = 1e-4) -> dict[str, Any]:
    """The kept fraction above which the best one-step-async plan beats the best synchronous one,
    both re-optimised (staleness allowed or not). None when async never wins, 0 when sync is
    infeasible and async feasible at any kept fraction tried."""
    enf = [f for f in enforced if f != F.RL_STALENESS]
    sync = solve(pb, objective, enf, {"staleness": [0]}).best

    def async_wins(q: float) -> bool:
        a = solve(pb.with_task(kept=q), objective, enf, {"staleness": [1]}).best
        return a is not None and (sync is None or a.key(objective) < sync.key(objective))

    if "separate" not in pb.rsc.search.placement or not async_wins(1.0):
        return {"kept": None, "sync": None if sync is None else summary(sync)}
    lo, hi = 0.0, 1.0
    while hi - lo > tol:
        mid = (lo + hi) / 2
        if async_wins(mid):
            hi = mid
        else:
            lo = mid
    return {"kept": hi, "sync": None if sync is None else summary(sync)}


def explain_infeasible(pb: RLProblem, objective: str, enforced: Collection[str]) -> dict[str, Any]:
    """Why no RL plan is feasible: a minimal conflicting set of families (the deletion filter of
    :func:`tpopt.optimizer.analysis.conflict`, every question without cards.max on the wider card grid),
    the plan that comes closest to each, and the smallest single changes that admit a plan."""
    relax = [f for f in enforced if f in RELAXABLE]
    structural = [f for f in enforced if f in STRUCTURAL]
    oracle = RLOracle(pb, widen=True)

    def admits(families: Collection[str]) -> bool:
        """Some plan meets the structural rules and ``families``."""
        return oracle.best(structural + list(families), objective) is not None

    if oracle.best(structural, objective) is None:
        return {"conflict": [F.RL_LEARNER_LAYOUT], "conflict_detail": [
            {"name": F.RL_LEARNER_LAYOUT, "detail": "no learner layout exists at any card count up to "
                                                    f"{pb.card_limit} (batch, host and head rules)"}],
                "relaxations": []}
    conflict = analysis.conflict(admits, relax)
    detail = []
    for f in conflict:
        alt = oracle.best(structural + [g for g in conflict if g != f], objective)
        detail.append(dict(violation(alt, f), plan=summary(alt)) if alt is not None else {"name": f})
    changes: list[dict[str, Any]] = []

    def change(parameter: str, family: str, unit: str, current: float | None, required: float | None,
               plan: RLEvaluation | None) -> None:
        entry: dict[str, Any] = {"parameter": parameter, "unit": unit, "current": current, "required": required,
                 "helps": plan is not None, "plan": None if plan is None else summary(plan)}
        if plan is None:  # what still conflicts once this input is freed
            entry["still_conflicting"] = analysis.conflict(admits, [g for g in relax if g != family])
        changes.append(entry)

    def without(family: str) -> list[str]:
        return [g for g in enforced if g != family]

    if F.DEADLINE in conflict:
        fast = oracle.best(without(F.DEADLINE), "time")
        change("deadline", F.DEADLINE, "d", F.limit(F.DEADLINE, pb.sc) / DAY,
               None if fast is None else math.ceil(fast.metrics["finish_s"] / DAY * 100) / 100, fast)
    if F.CARDS in conflict:
        few = oracle.best(without(F.CARDS), "cards")
        change("max_cards", F.CARDS, "cards", int(F.limit(F.CARDS, pb.sc)), None if few is None else few.decision.cards,
               few)
    if F.BUDGET in conflict:
        cheap = oracle.best(without(F.BUDGET), "cost")
        change("max_cost", F.BUDGET, "USD", F.limit(F.BUDGET, pb.sc),
               None if cheap is None else math.ceil(cheap.metrics["cost"]), cheap)
    if F.RL_STALENESS in conflict:
        alt = oracle.best(without(F.RL_STALENESS), objective)
        change("staleness", F.RL_STALENESS, "steps", pb.task.staleness, None if alt is None else alt.decision.staleness,
               alt)
    return {"conflict": conflict, "conflict_detail": detail, "relaxations": changes}
