"""Sweep points answered from one group's tables: the layout decomposition's bounds and each layout's
front, built once and shared by every deadline, card cap and budget of the group.

A group's points differ only in the limits of the swept families (deadline.finish, cards.max,
budget.cost). Every other family decides the same plans at every point, so each layout h (accelerator,
tp, cp, pp, dp, micro-batch) is solved once, exactly, into its front: the plans of h meeting those
families, cheapest first, each kept only when it finishes strictly earlier than every cheaper one
(ties by finish, then grid order, as :meth:`~tpopt.optimizer.enumerate.LayoutEvaluator.best` breaks
them). Within h the cheapest plan finishing by a deadline D is on that front (any cheaper plan
finishing by D would come first), and the fastest plan within a budget C is the last front entry
costing at most C.

A point (D, N, C) is then answered like one decomposed solve with the master replaced by a scan:
the layouts with cards(h) <= N and bounds finish_min(h) <= D, cost_min(h) <= C
(:class:`~tpopt.optimizer.decompose.LayoutBounds` over the unswept families: valid at every point),
in increasing cost_min, each front queried, until cost_min exceeds the cheapest plan found. The
neighbouring point's optimum, when it meets this point's limits, is the first upper bound (points
come sorted by budget, card cap and deadline, so it usually is the answer and the scan stops at the
first layout whose bound exceeds it). Exact: a layout left unscanned cannot beat the plan found.
Fronts are built on first use and kept for the group; evaluations of the plans the rows show are
shared by every point that picks the same plan.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from tpopt.models.evaluate import Evaluation, evaluate
from tpopt.optimizer.decompose import HUB, LayoutBounds
from tpopt.optimizer.enumerate import EXTRAS, layout_evaluator
from tpopt.optimizer.space import FAMILIES, Space, chance_on
from tpopt.optimizer.sweep.spec import SWEPT_FAMILIES

UNSWEPT = tuple(f for f in FAMILIES if f not in SWEPT_FAMILIES)
"""The families whose limits no sweep input moves: decided once per layout."""


@dataclass(frozen=True)
class Front:
    """One layout's plans meeting the unswept families, cheapest first with strictly decreasing finish."""

    cost: NDArray[np.float64]
    finish: NDArray[np.float64]
    plans: tuple[dict[str, int], ...]  # index dicts into the space's domains, one per entry


@dataclass(frozen=True)
class Answer:
    """A point's best plan: its objective key (cost, finish), layout and front entry."""

    cost: float
    finish: float
    layout: int
    entry: int


def supported(space: Space) -> bool:
    """Whether :class:`GroupOracle` answers the space's points: not under the chance form of the deadline
    (the deadline there enters a table, and a plan's save interval and mode are chosen per point)."""
    return not chance_on(space.sc)


class GroupOracle:
    """Every point of one sweep group, answered from the group's space (see the module docstring)."""

    def __init__(self, space: Space) -> None:
        self.space = space
        fams = frozenset(UNSWEPT)
        b = LayoutBounds(space, "cost", fams)
        ok = np.isfinite(b.cost_min)
        for allowed in b.allowed(fams, 0, 0.0, None).values():
            ok &= allowed
        cand = np.flatnonzero(ok)
        self.bounds = b
        self.by_cost = cand[np.argsort(b.cost_min[cand], kind="stable")]
        self.by_finish = cand[np.argsort(b.finish_min[cand], kind="stable")]
        self.evaluator = layout_evaluator(space)
        self.fronts: dict[int, Front | None] = {}
        self.evaluations: dict[tuple[int, int], Evaluation] = {}

    def front(self, h: int) -> Front | None:
        """Layout ``h``'s front (None when no plan of it meets the unswept families)."""
        if h in self.fronts:
            return self.fronts[h]
        layout = tuple(int(self.bounds.coords[v][h]) for v in HUB)
        got = self.evaluator._points(layout, list(UNSWEPT), "cost", None, False, "exact")
        out: Front | None = None
        if got is not None:
            cost, finish, m, shape, save = got
            sel = np.flatnonzero(m.reshape(-1))
            if sel.size:
                a, f = cost.reshape(-1)[sel], finish.reshape(-1)[sel]
                order = np.lexsort((sel, f, a))
                fo = f[order]
                earlier = np.minimum.accumulate(np.concatenate(([np.inf], fo[:-1])))
                keep = order[fo < earlier]
                plans = []
                for i in sel[keep]:
                    idx = dict(zip(HUB, layout, strict=True))
                    idx.update({e: int(c) for e, c in zip(EXTRAS, np.unravel_index(int(i), shape), strict=True)})
                    idx["tau"], idx["mode"] = int(save[0]), int(save[1])
                    plans.append(idx)
                out = Front(cost=a[keep], finish=f[keep], plans=tuple(plans))
        self.fronts[h] = out
        return out

    def cheapest(self, deadline: float, max_cards: int, max_cost: float | None, hint: Answer | None = None
                 ) -> Answer | None:
        """The cheapest plan (ties: earlier finish) finishing by ``deadline`` on at most ``max_cards`` cards
        within ``max_cost`` (None: no cap); ``hint``, a plan known to meet the unswept families, is kept
        as the first upper bound when it meets these limits."""
        b, order = self.bounds, self.by_cost
        cap = np.inf if max_cost is None else max_cost
        best = hint if hint is not None and self._meets(hint, deadline, max_cards, cap) else None
        lb = b.cost_min[order]
        mask = (b.finish_min[order] <= deadline) & (b.cards[order] <= max_cards) & (lb <= cap)
        for k in np.flatnonzero(mask):
            if best is not None and lb[k] > best.cost:
                break
            h = int(order[k])
            fr = self.front(h)
            if fr is None:
                continue
            i = int(np.searchsorted(-fr.finish, -deadline, side="left"))  # first entry finishing by the deadline
            if i >= fr.cost.size or fr.cost[i] > cap:
                continue
            key = (float(fr.cost[i]), float(fr.finish[i]))
            if best is None or key < (best.cost, best.finish):
                best = Answer(key[0], key[1], h, i)
        return best

    def fastest(self, max_cards: int, max_cost: float | None) -> float | None:
        """The earliest finish of any plan on at most ``max_cards`` cards within ``max_cost``."""
        b, order = self.bounds, self.by_finish
        cap = np.inf if max_cost is None else max_cost
        lb = b.finish_min[order]
        mask = (b.cards[order] <= max_cards) & (b.cost_min[order] <= cap)
        best: float | None = None
        for k in np.flatnonzero(mask):
            if best is not None and lb[k] > best:
                break
            fr = self.front(int(order[k]))
            if fr is None:
                continue
            j = int(np.searchsorted(fr.cost, cap, side="right")) - 1  # the last entry within the budget
            if j >= 0 and (best is None or fr.finish[j] < best):
                best = float(fr.finish[j])
        return best

    def evaluation(self, a: Answer) -> Evaluation:
        """The exact evaluation of an answer's plan (one per plan, shared by the points that pick it)."""
        got = self.evaluations.get((a.layout, a.entry))
        if got is None:
            fr = self.fronts[a.layout]
            assert fr is not None, "an answer comes from a front"
            got = self.evaluations[(a.layout, a.entry)] = evaluate(self.space.sc, self.space.plan(fr.plans[a.entry]))
        return got

    def _meets(self, a: Answer, deadline: float, max_cards: int, cap: float) -> bool:
        return a.finish <= deadline and int(self.bounds.cards[a.layout]) <= max_cards and a.cost <= cap
