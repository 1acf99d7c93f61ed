"""What limits the optimum: binding constraint families and why cheaper alternatives lose.

In a discrete problem a constraint "binds" when dropping it alone admits a strictly better plan: the
optimum is then held where it is by that family (the analogue of a non-zero shadow price). Each
alternative the user would ask about (fewer cards, another accelerator, another ZeRO stage or
layout at the same scale) is either feasible but no better (its objective is shown) or ruled out;
"ruled out by F" means the alternative becomes feasible when F alone is dropped, and the detail
quotes F's value against its limit for the best such plan.

Queries go through an oracle: exact enumeration of the whole space when it is small and its pipeline
shapes are cheap (a :class:`~tpopt.optimizer.enumerate.PointTable`, every question a mask); otherwise
the layout decomposition's own model, built once for every question (:class:`LayoutOracle`); the
monolithic solver when asked for (``--method monolithic``).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, Protocol, TypeAlias, TypeGuard, cast

import numpy as np
from numpy.typing import NDArray

from tpopt.errors import InputError
from tpopt.models import families as F
from tpopt.models import terms as T
from tpopt.models.arch import activated_params, flops_per_token, param_count
from tpopt.models.evaluate import SPEC, Evaluation, evaluate
from tpopt.models.plan import Scenario
from tpopt.models.variables import ALTERNATIVES
from tpopt.optimizer import analysis as shared  # the analysis shared with tpopt rl (analysis() is ours)
from tpopt.optimizer import backends, core
from tpopt.optimizer.backends import Solver
from tpopt.optimizer.decompose import LayoutBounds, coupling_vars
from tpopt.optimizer.enumerate import EXTRAS as EXTRAS_ALL
from tpopt.optimizer.enumerate import HUB, REPORT_LAYOUT_CACHE, PointTable, closeness_ratio, layout_evaluator
from tpopt.optimizer.limits import TimeLimitReached, Undecided, clock_of
from tpopt.optimizer.ondemand import COMPUTE_BOUNDS, PendingGroups, small_pages
from tpopt.optimizer.result import Request, Status, objective_key, objective_value, plan_summary
from tpopt.optimizer.space import FAMILIES, STRUCTURAL, Space, card_counts

TABLE_LIMIT = 300_000  # spaces up to this many points are answered by one enumeration
AHEAD = 64
"""The most layouts a report question's walk prepares the checks of in one pass (:meth:`LayoutOracle._walk`'s
``ahead``: their floors, :meth:`~tpopt.optimizer.enumerate.LayoutEvaluator.form_floors_ahead`)."""
REACH = 1.1
"""A report question's walk builds, with a relaxed layout it reaches, the parts keyed within REACH x the least key its
builds brought back so far (and within the incumbent): any parts holding the layout give the same answer (the others
are built when reached), this only sizes the builds. Before the first incumbent a walk would otherwise build every
allowed part of each block (the nine-accelerator GPT-3 analysis: 2,460 (TP, DP) rows, 2,076 at 1.1; at 1.0 six times
as many builds, each about 3.5 ms of fixed cost: slower)."""
PER_OP_TABLE_LIMIT = 4_096  # under the per-operation model (a pipeline simulated per plan): the table's own limit
REL = 1e-9
RELAXABLE = F.RELAXABLE

Restrict: TypeAlias = dict[str, Sequence[Any]]
"""A question's restriction: variable name -> the values it may take."""
Cards: TypeAlias = Iterable[int] | None
"""The card counts a question allows (None: every count)."""
Check: TypeAlias = Callable[[], None]
"""Called between layout evaluations (a time limit raises there)."""


class Oracle(Protocol):
    """What the report questions need: the space asked about, a name, and the best plan of a question."""

    space: Space
    name: str

    def best(self, enforced: Collection[str], objective: str, restrict: Restrict | None = None,
             cards: Cards = None) -> Evaluation | None: ...


class PlanEvaluations:
    """A space's plans evaluated exactly, each once per oracle, by their index: the questions of one report often
    answer with one plan (the binding questions a family does not bind all answer the optimum; the closest plan
    to two families, an alternative's best and closest plan), and they share its evaluation."""

    def __init__(self, space: Space) -> None:
        self.space = space
        self._done: dict[tuple[tuple[str, int], ...], Evaluation] = {}

    def __call__(self, idx: Mapping[str, int]) -> Evaluation:
        key = tuple(sorted(idx.items()))
        got = self._done.get(key)
        if got is None:
            got = self._done[key] = evaluate(self.space.sc, self.space.plan(idx))
        return got


class TableOracle:
    def __init__(self, space: Space):
        self.space = space
        self.table = PointTable.build(space)
        self.name = "enumeration"
        self._evaluation = PlanEvaluations(space)

    def best(self, enforced: Collection[str], objective: str, restrict: Restrict | None = None,
             cards: Cards = None) -> Evaluation | None:
        a = self.table.best(self.table.mask(enforced, restrict, cards), objective)
        return self._evaluation(a[0]) if a else None

    def closest(self, family: str, enforced: Collection[str], restrict: Restrict | None = None,
                cards: Cards = None) -> Evaluation | None:
        """Among plans meeting ``enforced``, the one nearest to meeting ``family``."""
        a = self.table.closest(self.table.mask(enforced, restrict, cards), family)
        return self._evaluation(a) if a else None


class SolverOracle:
    def __init__(self, space: Space, backend: str | Solver, req: Request):
        self.space = space
        self.solver = backends.resolve(backend)
        self.req = req
        self.name = self.solver.name

    def best(self, enforced: Collection[str], objective: str, restrict: Restrict | None = None,
             cards: Cards = None) -> Evaluation | None:
        req = Request(objective=objective, enforce=frozenset(enforced), top=1, time_limit=self.req.time_limit,
                      seed=self.req.seed, workers=self.req.workers, cards=None if cards is None else tuple(cards),
                      clock=clock_of(self.req))
        try:
            space = Space.from_scenario(self.space.sc, _merge(self.space.domains, restrict)) if restrict else self.space
        except Exception:
            return None
        r = core.solve(self.space.sc, self.solver, req, space=space)
        if r.status not in (Status.OPTIMAL, Status.INFEASIBLE):  # a plan that is not proven best answers nothing
            raise Undecided("time limit reached")
        return r.best


class LayoutOracle:
    """Answers every report question with the layout decomposition's own model, built once.

    The solve's per-layout bounds (:class:`~tpopt.optimizer.decompose.LayoutBounds`: each term's
    minimum over the remaining choices, on every core layout) and its exact per-layout evaluation
    (:class:`~tpopt.optimizer.enumerate.LayoutEvaluator`, shared with the solve through the space)
    are reused for each question: dropping a family or restricting a variable only changes which
    layouts are allowed (a mask, like an assumption literal) and which points of a layout count.
    Layouts are taken in increasing bound order, the best plan found so far is the incumbent (the
    warm start of the next question: every question of one report shares the evaluated layouts), and
    the walk stops when the next bound exceeds it. The answer is the exact optimum of the question.
    """

    name = "layout decomposition"

    def __init__(self, space: Space, check: Check | None = None, as_table: bool = False):
        self.space = space
        self.as_table = as_table  # standing in for a table (a tabulable space): same-scale questions, closest
        self._table: TableOracle | None = None  # built only where closest() cannot decide a tie on its own
        self.layouts = layout_evaluator(space)
        self.layouts.keep = max(self.layouts.keep, REPORT_LAYOUT_CACHE)
        self._bounds: LayoutBounds | None = None
        self._questions: dict[frozenset[str], LayoutBounds] = {}  # enforced families -> a question's bounds
        self._stale: dict[frozenset[str], list[NDArray[np.intp]]] = {}  # layouts built since a question's bounds
        self.pending: PendingGroups | None = None  # layout groups whose compute bounds are still relaxed
        self.questions = 0
        self.check = check  # called before each layout evaluation (a time limit can raise there)
        self._evaluated = PlanEvaluations(space)

    @property
    def bounds(self) -> LayoutBounds:
        if self._bounds is None:
            # after an on-demand solve: its groups' compute bounds, the others built when a question reaches them
            self.pending = PendingGroups.of(self.space)
            # the reductions of the whole tables, kept while these bounds are built: each unit a question builds
            # reads its slices of them (the compute term's aside, PendingGroups.adopt) instead of reducing again
            kept: dict[tuple[Any, ...], NDArray[Any]] = {}
            if self.pending is not None:
                self.space.__dict__["_reduced"] = kept
                # the compute term's, from the parts its whole tables were laid out from (not the 35 M entries)
                d = self.space.domains
                kept.update(self.pending.compute_reductions(HUB + coupling_vars(self.space, math.prod(
                    len(d[v]) for v in HUB))))
            try:
                # every family enforced: the coupled choices' grids are kept, each question reduces them (_under)
                with small_pages():  # the whole tables they read, written once each (ondemand.small_pages)
                    self._bounds = LayoutBounds(self.space, "cost", FAMILIES)
            finally:
                if self.pending is not None:
                    self.space.__dict__.pop("_reduced", None)
            if self.pending is not None:
                self.pending.adopt(self._bounds, kept)
        return self._bounds

    def release(self) -> None:
        """Drop the space's compute bound tables while layout groups are still pending (their relaxed entries are
        the oracle's alone: anything asked of the space later builds the tables it reads)."""
        if self.pending is not None and self.pending.pending:
            for name in COMPUTE_BOUNDS:
                dict.pop(self.space.tables, name, None)
            self.space.__dict__.pop("_layout_evaluator", None)

    def _under(self, enforced: Collection[str]) -> LayoutBounds:
        """The bounds of a question enforcing ``enforced`` (the coupled choices no plan can make meet an enforced
        family left out of each layout's bound; one per set of families, kept for the report's questions)."""
        key = frozenset(enforced)
        got = self._questions.get(key)
        if got is None:
            got = self._questions[key] = self.bounds.under(key)
        elif key in self._stale:
            self._refresh(key)
        return got

    def _built(self, rows: NDArray[np.intp], active: frozenset[str] | None = None) -> None:
        """Layouts ``rows`` got their own compute bounds (:class:`~tpopt.optimizer.ondemand.PendingGroups`): every
        question's bounds of them again, those of the question ``active`` (the one walking) now, the others when
        next asked (:meth:`_under`; most never are: a report asks each set of families a few times in a row)."""
        for key, b in self._questions.items():
            if b is not self.bounds:  # else no coupled choices: built in place
                self._stale.setdefault(key, []).append(rows)
        if active is not None and active in self._stale:
            self._refresh(active)

    def _refresh(self, key: frozenset[str]) -> None:
        """The bounds of question ``key`` at the layouts built since they were last formed, all in one reduction:
        each layout's bound is reduced from its own row of the grids alone, the same bits at any batch."""
        rows = np.concatenate(self._stale.pop(key))
        b = self._questions[key]
        for name, vals in zip(("finish_min", "due_min", "cost_min", "busy_max", "input_need", "mem_min"),
                              self.bounds._reduce(key, rows), strict=True):
            getattr(b, name)[rows] = vals

    def _allowed(self, enforced: Collection[str], restrict: Restrict | None, cards: Cards) -> NDArray[np.bool_]:
        b, sc, d = self._under(enforced), self.space.sc, self.space.domains
        ok = np.ones(b.n, dtype=bool)
        for mask in b.allowed_in(set(enforced), sc).values():
            ok &= mask
        for var, allowed in (restrict or {}).items():
            if var in HUB:
                keep = [i for i, x in enumerate(d[var]) if x in set(allowed)]
                ok &= np.isin(b.coords[var], keep)
        if cards is not None:
            ok &= np.isin(b.cards, list(cards))
        return ok

    def _search(self, enforced: Collection[str], objective: str, restrict: Restrict | None = None,
                cards: Cards = None) -> dict[str, int] | None:
        """(best index dict or None) of the question, by the bound-ordered walk over layouts."""
        self.questions += 1
        b = self._under(enforced)
        key = b.cost_min if objective == "cost" else b.finish_min
        # layouts with an infinite bound (a pipeline shape the schedule cannot run) come last: with
        # the rule that excludes them dropped, their plans exist, at an infinite cost
        asked = enforced
        cand = np.flatnonzero(self._allowed(enforced, restrict, cards))
        enforced = [f for f in FAMILIES if f in set(enforced)]
        refine = not self.layouts.exact_is_bound()
        best_key: tuple[float, float] | None = None
        best_idx: dict[str, int] | None = None
        incumbent = [math.inf]  # the walk builds no layout group bounded above it
        memory = F.MEMORY_PER_CARD in set(enforced)

        def ahead(hs: list[int]) -> None:  # the floors of the layouts the walk checks next within the incumbent
            self.layouts.form_floors_ahead([tuple(int(b.coords[v][h]) for v in HUB) for h in hs
                                            if key[h] <= incumbent[0]], memory)
        for h in self._walk(cand, key, lambda: self._allowed(asked, restrict, cards), lambda: incumbent[0],
                            frozenset(asked), ahead if refine else None):
            if best_key is not None and key[h] > best_key[0]:
                break
            layout = tuple(int(b.coords[v][h]) for v in HUB)
            if self.check is not None:
                self.check()
            if refine:  # the layout's own bound (pipeline terms bounded in closed form) before simulating
                if self.layouts.no_plan(layout, enforced):
                    continue  # no plan at the bound level (LayoutEvaluator.no_plan): the same verdict, unglued
                if best_key is not None and self.layouts.key_floor(layout, objective, enforced) > best_key[0]:
                    continue  # below that bound already (LayoutEvaluator.key_floor): the same verdict, unglued
                lb = self.layouts.best(layout, enforced, objective, 1, restrict, level="bound")
                if not lb or (best_key is not None and lb[0][0][0] > best_key[0]):
                    continue
            found = self.layouts.best(layout, enforced, objective, 1, restrict,
                                      cutoff=None if best_key is None else best_key[0], best_first=True)
            if found and (best_key is None or found[0][0] < best_key):
                best_key, best_idx = found[0]
                incumbent[0] = best_key[0]
        return best_idx

    def _walk(self, cand: NDArray[np.intp], key: NDArray[np.float64], allowed: Callable[[], NDArray[np.bool_]],
              limit: Callable[[], float], active: frozenset[str] | None = None,
              ahead: Callable[[list[int]], None] | None = None) -> Iterator[int]:
        """The allowed layouts ``cand`` in increasing ``key`` (ties: by index). A layout whose compute bounds are
        still relaxed (:class:`~tpopt.optimizer.ondemand.PendingGroups`) has the parts of its unit that hold a layout
        keyed within ``limit()`` (the incumbent's) built when it comes up within it, with those of its unit's siblings
        (:meth:`_block`); the layouts
        built then come back with their own bounds (those still allowed), in order, and stop the walk where their
        relaxed keys would. ``active``: the families of the question walking (its bounds follow each build).
        ``ahead``: told, before they are yielded, of the next layouts in order that no build can come before (runs of
        :data:`AHEAD` at most, growing from 2: a walk often stops after a few), so their checks can be prepared in one
        pass; the order is the same with or without it."""
        if self.pending is None or not self.pending.pending:
            order = cand[np.argsort(key[cand], kind="stable")].tolist()
            if ahead is None:
                yield from order
                return
            at, run = 0, 2
            while at < len(order):
                ahead(order[at:at + run])
                yield from order[at:at + run]
                at, run = at + run, min(2 * run, AHEAD)
            return
        pending, b = self.pending, self.bounds
        heap = [(float(key[h]), h, False) for h in cand.tolist()]  # (key, layout, pushed after its group's build)
        heapq.heapify(heap)
        # the layouts allowed at the start: a layout's mask changes only when its compute bounds are built, so for
        # the layouts still pending it is the mask of now
        start = np.zeros(key.shape, dtype=bool)
        start[cand] = True
        built: set[int] = set()  # layouts built during this walk: their earlier entries are stale
        least = math.inf  # the least key a build of this walk brought back
        run = 2  # how many layouts ``ahead`` is told of next
        while heap:
            k, h, fresh = heapq.heappop(heap)
            if pending.is_pending(b, h):
                if k > limit():  # every layout left is bounded above the incumbent: nothing to build
                    return
                flat = pending.build_block(*self._block(h, key, start, min(limit(), REACH * least)), b)
                self._built(flat, active)
                built.update(flat.tolist())
                back = flat[allowed()[flat]]
                if back.size:
                    least = min(least, float(key[back].min()))
                for j in back.tolist():
                    heapq.heappush(heap, (float(key[j]), j, True))
            elif ahead is None:
                if fresh or h not in built:
                    yield h
            elif fresh or h not in built:
                # the entries that follow up to the next relaxed layout: no build (which pushes entries) comes between
                # them, so they pop in this order whatever the consumer does; ``built`` holds still meanwhile
                out = [h]
                while heap and len(out) < run and not pending.is_pending(b, heap[0][1]):
                    _, j, fresh_j = heapq.heappop(heap)
                    if fresh_j or j not in built:
                        out.append(j)
                ahead(out)
                run = min(2 * run, AHEAD)
                yield from out

    def _block(self, h: int, key: NDArray[np.float64], allowed: NDArray[np.bool_], limit: float
               ) -> tuple[list[tuple[int, ...]], list[int]]:
        """What a walk builds when layout ``h`` comes up with its compute bounds relaxed (units and parts, as
        :meth:`~tpopt.optimizer.ondemand.PendingGroups.build_block` takes them): of the units that share ``h``'s
        values but the last fixed variable's (the TP widths of its accelerator and pipeline depth), the parts still
        relaxed that hold an allowed layout keyed within ``limit`` (the incumbent's, or less: :data:`REACH`), ``h``'s
        own among them. A layout keyed above the incumbent is never reached by this walk (the incumbent only falls);
        the others, and those a later question reaches, are built when reached."""
        pending, b = cast(PendingGroups, self.pending), self.bounds
        last, part = b.coords[pending.fixed[-1]], b.coords[pending.PART]
        head = pending.group_of(b, h)[:-1]
        near = allowed & (key <= limit)
        for v, i in zip(pending.fixed[:-1], head, strict=True):
            near &= b.coords[v] == i
        at = np.flatnonzero(near)
        at = at[pending.relaxed_parts(head)[last[at], part[at]]]
        units = sorted({head + (int(i),) for i in last[at].tolist()} | {head + (int(last[h]),)})
        return units, sorted(set(part[at].tolist()) | {int(part[h])})

    def best(self, enforced: Collection[str], objective: str, restrict: Restrict | None = None,
             cards: Cards = None) -> Evaluation | None:
        idx = self._search(enforced, objective, restrict, cards)
        return None if idx is None else self._evaluated(idx)

    def closest(self, family: str, enforced: Collection[str], restrict: Restrict | None = None,
                cards: Cards = None) -> Evaluation | None:
        """:meth:`TableOracle.closest` from the exact per-layout evaluation: among plans meeting ``enforced``
        (on the layouts the question allows), the least ratio = value / limit of ``family`` (float32, as
        :class:`~tpopt.optimizer.enumerate.PointTable` keeps it), then the least cost. Where that pair does not
        single out one plan (the table then takes its first in enumeration order), or ``family``'s value is not
        a glued term (:func:`_closest_ratio`) and some plan meets ``enforced``, the table itself answers (built
        once, on first need).

        The layouts are taken in increasing order of their least (ratio, cost) at the bound level (the pipeline
        terms' lower bounds, :meth:`_least`): every term there is at most its exact value and every family's
        mask at least as wide, so that pair is a lower bound of the layout's exact one (the ratio and the cost
        grow with the terms), and the walk stops at the first layout bounded above the least exact pair found
        (a layout bounded at it is evaluated: it may tie). Only the layouts it reaches are simulated."""
        sc, order = self.space.sc, [f for f in FAMILIES if f in set(enforced)]
        if _closest_ratio({}, family, sc) is None:  # no plan meets enforced: none is closest; else the table's
            if self._search(enforced, "cost", restrict, cards) is None:
                return None
            return self._as_table().closest(family, enforced, restrict, cards)
        b = self._under(enforced)
        layouts = [tuple(int(b.coords[v][h]) for v in HUB)
                   for h in np.flatnonzero(self._allowed(enforced, restrict, cards)).tolist()]
        walk: list[tuple[float, float, int]] = []  # (bounded ratio, bounded cost, position) of each layout
        for i, layout in enumerate(layouts):
            low = self._least(layout, family, order, restrict, "bound")
            if low is not None:  # else no plan of the layout meets enforced, even at the bound level
                walk.append((low[0], low[1], i))
        if any(math.isnan(r) or math.isnan(c) for r, c, _ in walk):  # NaN has no order: every layout is asked
            walk = [(-math.inf, -math.inf, i) for i in range(len(layouts))]
        found: list[tuple[float, float, dict[str, int]]] = []  # the least (ratio, cost) points, per layout
        for r_lo, c_lo, i in sorted(walk):
            if found and (r_lo, c_lo) > min((x[0], x[1]) for x in found):
                break
            if self.check is not None:
                self.check()
            got = self._least(layouts[i], family, order, restrict, "exact")
            if got is None:
                continue
            if math.isnan(got[0]) or math.isnan(got[1]):  # the table's lexsort places NaN last: it decides
                return self._as_table().closest(family, enforced, restrict, cards)
            found.extend((got[0], got[1], idx) for idx in got[2])
        if not found:
            return None
        top = min(found, key=lambda x: (x[0], x[1]))
        if sum(1 for x in found if (x[0], x[1]) == (top[0], top[1])) > 1:  # a tie: the table's order decides
            return self._as_table().closest(family, enforced, restrict, cards)
        return self._evaluated(top[2])

    def _least(self, layout: tuple[int, ...], family: str, order: Sequence[str], restrict: Restrict | None,
               level: str) -> tuple[float, float, list[dict[str, int]]] | None:
        """(least ratio of ``family``, least cost at it, the points reaching both) among the points of
        ``layout`` meeting ``order`` (at ``level``: ``"exact"``, or ``"bound"`` with the pipeline terms' lower
        bounds); NaN in the ratio or the cost if any point has it there (the pair is then NaN; no points);
        None if no point is allowed."""
        got = self.layouts._points(layout, order, "cost", restrict, True, level)
        if got is None:
            return None
        cost, finish, m, shape = got
        if not m.any():
            return None
        v = self.layouts._glue(layout, level)
        q = _closest_ratio(dict(v, cost=cost, finish=finish), family, self.space.sc)
        assert q is not None
        ratio = np.broadcast_to(q, shape)
        sel = np.flatnonzero(m.reshape(-1))
        r, c = ratio.reshape(-1)[sel], cost.reshape(-1)[sel]
        if np.isnan(r).any() or np.isnan(c).any():
            return math.nan, math.nan, []
        least = r.min()
        at = sel[r == least]
        c_at = c[r == least]
        points = []
        if level == "exact":
            for i in at[c_at == c_at.min()].tolist():
                idx = dict(zip(HUB, layout, strict=False))
                idx.update({e: int(x) for e, x in zip(EXTRAS_ALL, np.unravel_index(i, shape), strict=False)})
                points.append(idx)
        return float(least), float(c_at.min()), points

    def _as_table(self) -> TableOracle:
        if self._table is None:
            self._table = TableOracle(self.space)
        return self._table


def _merge(domains: Mapping[str, Sequence[Any]], restrict: Restrict | None) -> dict[str, list[Any]]:
    out = {k: list(v) for k, v in domains.items()}
    for k, v in (restrict or {}).items():
        out[k] = [x for x in out[k] if x in set(v)]
    return out


def make_oracle(space: Space, backend: str | Solver, req: Request, check: Check | None = None
                ) -> TableOracle | SolverOracle | LayoutOracle:
    """One exact enumeration for small spaces whose pipeline terms are cheap to simulate; the layout
    decomposition's model otherwise (the monolithic solver on request: ``--method monolithic``)."""
    tabulable = tabled(space)
    if tabulable and not (T.per_op_model(space.sc) and space.size() > PER_OP_TABLE_LIMIT):
        return TableOracle(space)
    if req.method == "monolithic":
        return SolverOracle(space, backends.resolve(backend).with_model(), req)
    # a per-operation space simulates a pipeline per plan: its table would cost ~1 ms a plan, the layouts answer
    # the same questions (the table's own ones too: as_table)
    return LayoutOracle(space, check, as_table=tabulable)


def tabled(space: Space) -> bool:
    """Whether the analysis of ``space`` may ask a table of every plan (:class:`TableOracle`, or the layouts'
    :meth:`LayoutOracle.closest` deciding a tie): a small space whose pipeline shapes are cheap to simulate."""
    return space.size() <= TABLE_LIMIT and space.cheap_pipeline()


def _tabulated(oracle: Oracle) -> TypeGuard[TableOracle | LayoutOracle]:
    """Whether the report asks an oracle the table's questions (the same-scale alternatives, the closest plan):
    a table, or the layouts standing in for one (a per-operation space, :data:`PER_OP_TABLE_LIMIT`)."""
    return isinstance(oracle, TableOracle) or (isinstance(oracle, LayoutOracle) and oracle.as_table)


def _closest_ratio(v: Mapping[str, Any], family: str, sc: Scenario) -> NDArray[np.float32] | None:
    """A family's value / limit on a layout's grid as :class:`PointTable` keeps it (``v``: the glued layout with
    its ``cost`` and ``finish`` on the full grid; empty: only whether the family is covered), None for the
    families whose value is not glued (the tabled rules). Under a confidence the deadline's value is its
    chance-equivalent finish (:func:`_chance_finish`)."""
    if family == F.MEMORY_PER_CARD:
        pair = (v.get("mem"), v.get("usable"))
    elif family == F.DEADLINE and sc.task.confidence is not None:
        pair = (_chance_finish(v, sc) if v else None, F.limit(F.DEADLINE, sc))
    elif family == F.DEADLINE:
        pair = (v.get("finish"), F.limit(F.DEADLINE, sc))
    elif family == F.BUDGET:
        pair = (v.get("cost"), F.limit(F.BUDGET, sc))
    elif family == F.INPUT_THROUGHPUT:
        pair = (v.get("demand"), v.get("supply"))
    elif family == F.CARDS:
        pair = (v.get("cards"), F.limit(F.CARDS, sc))
    else:
        return None
    if not v:
        return np.zeros(0, dtype=np.float32)
    val, lim = (np.asarray(x, dtype=float) for x in pair)
    return closeness_ratio(val, lim)


def _chance_finish(v: Mapping[str, Any], sc: Scenario) -> NDArray[np.float64]:
    """The deadline family's value under a confidence on a glued layout's grid, as
    :func:`~tpopt.models.evaluate.evaluate_arrays` forms it for a table (the same expression in the same order, on
    the same step and largest step: the same bits): the chance-equivalent finish R + (D - R) step / step_max. NaN
    where step_max <= 0 or D <= R: only there does the value not grow with the step, so a walk's bound-level ratio
    stops being a lower bound of the exact one (:meth:`LayoutOracle.closest` leaves a NaN to the table)."""
    reserved, deadline = sc.task.reserved_s, F.limit(F.DEADLINE, sc)
    step, step_max = (np.asarray(v[k], dtype=float) for k in ("step", "step_max"))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        value = np.asarray(T.chance_finish(reserved, deadline, step, step_max), dtype=float)
    if not deadline > reserved:
        return np.full(value.shape, np.nan)
    return np.where(step_max > 0, value, np.nan)


def _better(a: Evaluation, b: Evaluation, objective: str) -> bool:
    ka, kb = objective_key(a, objective)[0], objective_key(b, objective)[0]
    return ka < kb * (1 - REL)


def _violation(ev: Evaluation, family: str) -> dict[str, Any]:
    name = family
    c = ev.constraint(name) if any(x.name == name for x in ev.constraints) else None
    if c is None:
        return {"name": family}
    out = c.quoted()
    if family == F.MEMORY_PER_CARD and "memory_peak_class" in ev.metrics:  # the stage class whose rank peaks
        out["stage"] = ev.metrics["memory_peak_class"]
    return out


QUOTE = shared.Quote(objective_value, plan_summary, _violation)  # how the reports quote a pre-training plan


@dataclass
class Binding:
    name: str
    without: Evaluation  # the best plan when this family alone is dropped

    def as_dict(self, best: Evaluation, objective: str) -> dict[str, Any]:
        return shared.binding_entry(self.name, self.without, best, objective, QUOTE)


def binding_families(oracle: Oracle, best: Evaluation, objective: str, enforced: Collection[str],
                     undecided: list[str] | None = None) -> list[Binding]:
    """Families that bind; those the time limit left open are appended to ``undecided`` (never
    reported as binding or as slack)."""
    inert = oracle.space.inert()  # families no plan can violate, and cost <= infinity, bind nothing
    skip = inert | ({F.BUDGET} if oracle.space.sc.cost.max_cost is None else set())
    found = shared.binding(oracle, best, objective, enforced, RELAXABLE, _better, skip, undecided)
    return [Binding(f, alt) for f, alt in found]


def _ruled_out(oracle: Oracle, objective: str, enforced: Collection[str], restrict: Restrict | None = None,
               cards: Cards = None) -> list[dict[str, Any]]:
    """Families that alone rule the restricted alternative out, with their value against the limit
    for the plan that comes closest to meeting them (the best plan without them, for large spaces)."""
    inert = oracle.space.inert()
    closest = oracle.closest if _tabulated(oracle) else None  # else the best plan with f dropped
    found = shared.ruled_out(oracle, objective, enforced, RELAXABLE, restrict, cards, inert, closest)
    reasons = [_violation(alt, f) for f, alt in found]
    if not reasons:
        # no single family suffices: the cheapest such plan with every relaxable family dropped
        structural = [g for g in enforced if g in STRUCTURAL]
        alt = oracle.best(structural, objective, restrict, cards)
        if alt is None:  # a layout rule excludes this shape: name the rule(s) that alone do
            rules = [{"name": g, "detail": SPEC[g].doc} for g in structural
                     if oracle.best([h for h in structural if h != g], objective, restrict, cards) is not None]
            return rules or [{"name": "no plan of this shape exists in the design space"}]
        reasons = [dict(_violation(alt, c.name), together=True) for c in alt.violated()
                   if c.name in RELAXABLE and c.name in enforced]
    return reasons


def why_not_cheaper(oracle: Oracle, space: Space, best: Evaluation, objective: str, enforced: Collection[str],
                    fewer_cards: int = 3, same_scale: bool = True) -> list[dict[str, Any]]:
    """Alternatives a user would ask about, each feasible-but-worse or ruled out (and by what)."""
    out: list[dict[str, Any]] = []
    p = best.plan
    d = space.domains

    def entry(label: str, kind: str, restrict: Restrict | None = None, cards: Cards = None) -> dict[str, Any]:
        try:
            return _entry(label, kind, restrict, cards)
        except Undecided:
            return {"alternative": label, "kind": kind, "feasible": None, "undecided": "time limit reached"}

    def _entry(label: str, kind: str, restrict: Restrict | None = None, cards: Cards = None) -> dict[str, Any]:
        return shared.alternative(oracle, QUOTE, {"alternative": label, "kind": kind}, best, objective, enforced,
                                  restrict, cards, lambda: _ruled_out(oracle, objective, enforced, restrict, cards))

    # fewer cards on the same accelerator (card counts the space can form)
    g = space.sc.system(p.accelerator).acc.cards_per_host
    counts = [n for n in card_counts(d) if n % g == 0 and n < p.cards]
    for n in counts[::-1][:fewer_cards]:
        out.append(entry(f"{p.accelerator} x {n}", "fewer cards", {"acc": [p.accelerator]}, (n,)))
    # other accelerators
    for a in d["acc"]:
        if a != p.accelerator:
            out.append(entry(a, "accelerator", {"acc": [a]}))
    # other choices at the same scale (same accelerator and card count)
    if same_scale:
        for v in ALTERNATIVES:  # declared with their wording in models/variables.py (Variable.label)
            val = getattr(p, v.field)
            for other in d[v.name]:
                if other == val:
                    continue
                out.append(entry(v.wording(other) + f" on {p.accelerator} x {p.cards}", "same scale",
                                 {"acc": [p.accelerator], v.name: [other]}, (p.cards,)))
    return out


def robustness(sc: Scenario, best: Evaluation) -> dict[str, Any]:
    """The chosen plan re-evaluated with no communication overlap (prefetch failing): does it still
    meet every constraint? (Chapter 10.6.2: one shared NIC per host bets the deadline on overlap.)"""
    if not sc.overlap:
        return {}
    ev = evaluate(replace(sc, overlap=False), best.plan)
    return {"without_overlap": {"feasible": ev.feasible, "step_s": ev.metrics["step_s"],
                                "finish_days": ev.metrics["finish_days"],
                                "violates": [c.name for c in ev.violated()]}}


def analysis(space: Space, best: Evaluation, solver: Solver, req: Request, enforced: Collection[str],
             restricted: Restrict | None = None) -> dict[str, Any]:
    """Binding families and alternatives of an optimum (dicts ready for JSON). ``restricted``: one more
    question for the same oracle, the best plan under ``enforced`` within these choices (``restricted_best``:
    the plan, None when none; absent when the time limit left it open), e.g. the report's fitted alternative
    (:func:`tpopt.optimizer.footing.fitted_alternative`) without a solve of its own."""
    clock = clock_of(req)

    def check() -> None:  # between the layouts a large space's questions evaluate
        if clock.expired("analysing the optimum"):
            raise Undecided("time limit reached")

    objective = req.objective
    undecided: list[str] = []
    try:
        with clock.stoppable("analysing the optimum"):
            oracle = make_oracle(space, solver, req, check)
    except TimeLimitReached:  # not even the oracle: every question is left open, and said so
        return {"oracle": None, "binding": [], "alternatives": [], "robustness": robustness(space.sc, best),
                "undecided": [f for f in RELAXABLE if f in enforced and f not in space.inert()
                              and not (f == F.BUDGET and space.sc.cost.max_cost is None)],
                "analysis": "time limit reached"}
    try:
        binds = binding_families(oracle, best, objective, enforced, undecided)
        alts = why_not_cheaper(oracle, space, best, objective, enforced, same_scale=_tabulated(oracle))
        extra: dict[str, Any] = {}
        if restricted is not None:
            try:
                extra["restricted_best"] = oracle.best(enforced, objective, restricted)
            except Undecided:  # left open: the caller solves it on its own
                pass
    finally:
        if isinstance(oracle, LayoutOracle):
            oracle.release()
    done = not undecided and all(a["feasible"] is not None for a in alts)
    return {"oracle": oracle.name, "binding": [b.as_dict(best, objective) for b in binds], "alternatives": alts,
            "robustness": robustness(space.sc, best), "undecided": undecided,
            "analysis": "done" if done else "time limit reached", **extra}



def scenario_entry(sc: Scenario) -> dict[str, Any]:
    """What is planned, for every report: the scenario's name and the model's name, parameters N (total;
    activated: the top-k experts a token uses, = N for a dense model) and training FLOPs per token,
    6 N_gemm + 12 L d_attn (s + 1) / 2 at the task's sequence length (each stage's for a staged task)."""
    m = sc.model
    lengths = [(st.name, st.task.seq_len) for st in sc.stages] if sc.stages else [(None, sc.task.seq_len)]
    model: dict[str, Any] = {"name": m.name, "params": param_count(m), "activated_params": activated_params(m),
                             "flops_per_token": [{"stage": name, "seq_len": int(s),
                                                  "flops": float(flops_per_token(m, float(s)))}
                                                 for name, s in lengths]}
    return {"name": sc.name, "model": model}


# ---------------------------------------------------------------------------------------------
# long context with context parallelism left out of the search

LONG_CONTEXT_TOKENS: Final = 32_768  # from here on a plan without CP usually pays for it (docs/long-context.md)
CP_CHOICES: Final = (1, 2, 4, 8, 16)  # what --cp 1,2,4,8,16 searches
CP_CHECK_MAX_PLANS: Final = 5_000_000  # re-solve with CP open only up to this space size (else: a hint)


def cp_not_searched(sc: Scenario, solver: Solver, req: Request, best: Evaluation | None) -> dict[str, Any] | None:
    """What leaving context parallelism out of ``[search]`` costs a long-context task, or None when it
    does not apply (sequences shorter than LONG_CONTEXT_TOKENS, or CP searched).

    When the space with ``cp = CP_CHOICES`` has at most CP_CHECK_MAX_PLANS plans it is solved (same
    backend, same clock): ``checked`` True with ``best_with_cp`` (its plan and figures) and ``saving``
    (the fraction of the objective searching CP saves; 0 when it does not help), else ``checked`` False
    and only the hint. ``flag`` is the command-line way to search it."""
    if sc.stages or sc.task.seq_len < LONG_CONTEXT_TOKENS or tuple(sc.search.cp) != (1,):
        return None
    out: dict[str, Any] = {"seq_len": sc.task.seq_len, "objective": req.objective, "searched": [1],
                           "suggested": list(CP_CHOICES),
                           "flag": "--cp " + ",".join(map(str, CP_CHOICES)), "checked": False,
                           "best_with_cp": None, "saving": None}
    opened = replace(sc, search=replace(sc.search, cp=CP_CHOICES))
    try:
        space = Space.from_scenario(opened)
    except InputError:
        return out
    if space.size() > CP_CHECK_MAX_PLANS:
        out["reason"] = f"{space.size():,} plans with CP open: not re-solved"
        return out
    run = backends.resolve(backends.EXHAUSTIVE) if space.size() <= TABLE_LIMIT else solver.with_model()
    r = core.solve(opened, run, Request(objective=req.objective, time_limit=req.time_limit, seed=req.seed,
                                         workers=req.workers, clock=req.clock), space=space)
    if r.status != Status.OPTIMAL:
        out["reason"] = "the re-solve with CP open was not proven in time"
        return out
    out["checked"] = True
    if r.best is None:
        out["saving"] = 0.0
        return out
    with_cp = objective_value(r.best, req.objective)
    base = objective_value(best, req.objective) if best is not None else None
    out["best_with_cp"] = plan_summary(r.best)
    out["saving"] = None if base is None else max(0.0, (base - with_cp) / base) if base > 0 else 0.0
    return out
