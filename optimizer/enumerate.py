"""Brute-force enumeration of the design space: the oracle for tests and the baseline for benchmarks.

Every point is evaluated in floating point with :func:`tpopt.models.evaluate.evaluate_arrays` (the
same code ``tpopt evaluate`` runs), vectorised with numpy over the numeric variables; categorical
variables are looped over. ``enumerate_best`` keeps the best ``top`` feasible points, ordered by the
lexicographic objective and then by enumeration order (deterministic). ``PointTable`` keeps every
point's objective and per-family satisfaction, so that report questions (what binds, why not fewer
cards) become array masks instead of new solves.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias, cast

import numpy as np
from numpy.typing import DTypeLike, NDArray

from tpopt.models import families as F
from tpopt.models import pipeline
from tpopt.models import terms as T
from tpopt.models import variables as V
from tpopt.models.evaluate import evaluate_arrays
from tpopt.models.plan import Scenario
from tpopt.optimizer.limits import checkpoint
from tpopt.optimizer.result import Request
from tpopt.optimizer.space import (
    CATEGORICAL,
    CHANCE_TABLE,
    FAMILIES,
    LAYOUT,
    NUMERIC,
    PIPELINE_TERMS,
    VARIABLES,
    VARS,
    Domains,
    Space,
    Table,
    cards_of,
    chance_on,
)

NUMERIC_AXES = NUMERIC  # ("tp", "cp", "pp", "dp", "mb", "zero", "nics", "tau", "ep", "etp", "cap"); tp is chunked
CHUNK = 250_000  # points per evaluate_arrays call at most (bounds memory and the time between clock checks)
PIPELINE_WORK_PER_CHUNK = 50_000  # simulated pipeline operations per call at most (see _chunk_cost)
# (measured: 0.16 CPU s at most between two clock checks on the DeepSeek-V3 example, one categorical group of 12
# pipeline shapes a chunk; at 2,000 each shape was a chunk of 4 plans, 138 calls each paying every term's
# fixed cost: the enumeration 1.65 -> 0.59 s)
F32_MAX = float(np.finfo(np.float32).max)  # ratios beyond it are clipped (they only rank closeness)


def closeness_ratio(value: NDArray[Any], limit: NDArray[Any]) -> NDArray[np.float32]:
    """How near a family's value is to its limit, as :meth:`PointTable.closest` ranks plans: value / limit for a
    positive limit, the value itself for a limit <= 0, 0 for an infinite limit; float32, clipped to its range."""
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(np.isinf(limit), 0.0, np.where(limit > 0, value / np.where(limit > 0, limit, 1.0), value))
    return np.clip(q, -F32_MAX, F32_MAX).astype(np.float32)


GROUPED = tuple(v for v in CATEGORICAL if v != "schedule")  # categorical variables looped over (acc first)

Assignment: TypeAlias = dict[str, int]
"""Variable -> index into its domain."""
Group: TypeAlias = tuple[Assignment, list[int]]
"""(categorical indices, pp indices) of one walk group (:func:`_groups`)."""
Chunk: TypeAlias = tuple[Assignment, list[list[int]], tuple[int, ...], Mapping[Any, Any]]
"""(fixed categorical indices, numeric index lists, shape, evaluate_arrays result) (:func:`chunks`)."""
Layout: TypeAlias = tuple[int, ...]
"""A core layout as indices over :data:`HUB`."""
Key: TypeAlias = tuple[float, float]
"""A lexicographic objective key (primary, secondary)."""
Cell: TypeAlias = tuple[int, int]
"""A (recompute, schedule) index pair of a layout's extras grid: what its exact pipeline terms are simulated by
(:meth:`LayoutEvaluator._exact_pipeline`)."""


def _groups(space: Space) -> Iterator[Group]:
    """(categorical indices, pp indices) groups: every combination of the categorical variables, the
    schedule varying only when pp > 1 (its first value stands for pp = 1)."""
    d = space.domains
    pp_one = [i for i, p in enumerate(d["pp"]) if p == 1]
    pp_many = [i for i, p in enumerate(d["pp"]) if p > 1]
    for combo in itertools.product(*(range(len(d[k])) for k in GROUPED)):
        fixed = dict(zip(GROUPED, combo, strict=False))
        if pp_one:
            yield dict(fixed, schedule=0), pp_one
        if pp_many:
            for si in range(len(d["schedule"])):
                yield dict(fixed, schedule=si), pp_many


def chunks(space: Space, groups: Iterable[Group] | None = None) -> Iterator[Chunk]:
    """Yield (fixed categorical indices, numeric index lists, shape, evaluate_arrays result); ``groups``
    restricts the walk to some of :func:`_groups` (a timed sample)."""
    sc = space.sc
    d = space.domains
    nic_ok = space.nic_allowed()
    field = {v.name: v.field for v in VARIABLES}
    typ = {v.name: v.type for v in VARIABLES}
    for fixed, pp_idx in (_groups(space) if groups is None else groups):
        ai = fixed["acc"]
        acc = d["acc"][ai]
        k_idx = [j for j in range(len(d["nics"])) if nic_ok[ai, j]]
        axes = {a: list(range(len(d[a]))) for a in NUMERIC_AXES}
        axes.update(pp=pp_idx, nics=k_idx)
        cats: dict[str, Any] = {field[v]: d[v][i] for v, i in fixed.items() if v != "acc"}
        factor = _pipeline_factor(space, d["schedule"][fixed["schedule"]]) if pp_idx else 0

        def cost(sub: Mapping[str, list[int]], factor: int = factor) -> float:
            return _chunk_cost(space, sub, factor)

        for sub in _slices(axes, cost):
            checkpoint()  # a time limit stops a stoppable phase here, between two complete chunks
            idx_lists = [sub[a] for a in NUMERIC_AXES]
            vals = [np.asarray([d[a][i] for i in sub[a]], dtype=float) for a in NUMERIC_AXES]
            g = dict(zip(NUMERIC_AXES, np.ix_(*vals), strict=False))
            cards = cards_of(**g)
            nums: dict[str, Any] = {field[a]: g[a].astype(typ[a]) for a in NUMERIC_AXES if a != "tau"}
            r = evaluate_arrays(sc, acc, save_interval_s=space.interval(g["tau"], cards, cats["save_mode"]),
                                **nums, **cats)
            shape = tuple(len(x) for x in idx_lists)
            yield dict(fixed), idx_lists, shape, r


def _pipeline_factor(space: Space, schedule: str) -> int:
    """Event-model operations per (stage x micro-batch) of a schedule: 0 when it has a closed form
    (no simulation), else 2 (forward, backward) or 3 (split backward), times the virtual stages."""
    base, v = T.schedule_parts(schedule)
    if base in pipeline.CLOSED_FORM and not T.per_op_model(space.sc):
        return 0
    return (3 if base in pipeline.SPLIT_BACKWARD else 2) * (v if base == "interleaved" else 1)


def _chunk_cost(space: Space, sub: Mapping[str, list[int]], factor: int) -> float:
    """The work of evaluating the sub-grid ``sub`` as a share of one chunk (<= 1 fits): its points over
    :data:`CHUNK`, or, where the schedule is simulated, its pipeline shapes' operations (stages x
    micro-batches summed over its distinct shapes) over :data:`PIPELINE_WORK_PER_CHUNK`, whichever
    is larger (a single shape is never cut for its pipeline work: it is simulated once either way).
    Work, not seconds: the chunks (and the ``rounds`` a report shows) do not depend on load."""
    points = int(np.prod([len(sub[a]) for a in NUMERIC_AXES]))
    share = points / CHUNK
    if factor:
        d = space.domains
        pps = [d["pp"][i] for i in sub["pp"] if d["pp"][i] > 1]
        if pps:
            B = space.sc.task.global_batch
            ms = {int(np.ceil(B / (d["dp"][i] * d["mb"][j]) - 1e-9)) for i in sub["dp"] for j in sub["mb"]}
            if len(pps) * len(ms) > 1:  # one shape is simulated once, however it is cut
                share = max(share, factor * sum(pps) * sum(ms) / PIPELINE_WORK_PER_CHUNK)
    return share


def _slices(axes: Mapping[str, list[int]], cost: Callable[[Mapping[str, list[int]]], float],
            level: int = 0, fixed: Mapping[str, list[int]] | None = None) -> Iterator[dict[str, list[int]]]:
    """The numeric grid ``axes`` (axis -> domain indices) cut into sub-grids of ``cost`` <= 1, in C
    order over :data:`NUMERIC_AXES` (so the walk order, the tie-break, is the same at any chunk size):
    along the axis of ``level``, blocks of 1, 2, 4, ... indices with every later axis whole while they
    fit; an index that does not fit alone is cut along the next axis (the last axis: one index)."""
    name = NUMERIC_AXES[level]
    idx = axes[name]
    base = dict(axes, **(fixed or {}))
    i = 0
    while i < len(idx):
        if level < len(NUMERIC_AXES) - 1 and cost(dict(base, **{name: idx[i:i + 1]})) > 1:
            yield from _slices(axes, cost, level + 1, dict(fixed or {}, **{name: idx[i:i + 1]}))
            i += 1
            continue
        step = 1
        while i + step < len(idx) and cost(dict(base, **{name: idx[i:i + 2 * step]})) <= 1:
            step *= 2
        yield dict(base, **{name: idx[i:i + step]})
        i += step


def _ok(r: Mapping[Any, Any], family: str, shape: tuple[int, ...]) -> NDArray[np.bool_]:
    v, lim = r[("c", family)]
    return np.broadcast_to(v <= lim, shape)


def enumerate_best(space: Space, req: Request, groups: Iterable[Group] | None = None
                   ) -> tuple[list[Assignment], int, int]:
    """Return (best assignments as index dicts, best-first; number of points evaluated; chunks).

    Stops between chunks when the request's clock (``req.clock``) runs out: the points kept are
    then the best of those evaluated, and ``evaluated < space.size()`` says the search is partial.
    ``groups`` restricts the walk to some of :func:`_groups` (a timed sample).
    """
    clock = req.clock
    total = space.size()
    enforced = [f for f in FAMILIES if f in req.enforced(FAMILIES)]
    twin: PointTable | None = space.__dict__.get(LEVEL_TWIN) if groups is None else None
    if twin is not None and twin.step is not None:  # the same space walked at another confidence level
        return twin.best(_level_mask(space, twin, enforced, req.cards), req.objective, max(1, req.top)), total, 0
    keep_keys: list[tuple[float, float, int]] = []
    keep_idx: list[Assignment] = []
    evaluated = n_chunks = order = 0
    K = max(1, req.top)
    rows = _Rows() if groups is None and space.__dict__.get(KEEP_TABLE) else None  # the whole walk, for the report
    for fixed, idx_lists, shape, r in chunks(space, groups):
        if rows is not None:
            rows.add(fixed, idx_lists, shape, r)
        feas = np.ones(shape, dtype=bool)
        for f in enforced:
            feas &= _ok(r, f, shape)
        if req.cards is not None:
            feas &= np.isin(np.broadcast_to(r["cards"], shape), list(req.cards))
        n = int(np.prod(shape))
        evaluated += n
        n_chunks += 1
        flat = np.flatnonzero(feas.reshape(-1))
        if flat.size:
            cost = np.broadcast_to(r["cost"], shape).reshape(-1)[flat]
            fin = np.broadcast_to(r["finish_s"], shape).reshape(-1)[flat]
            k1, k2 = (cost, fin) if req.objective == "cost" else (fin, cost)
            if flat.size > 4 * K:  # keep only candidates within the K-th smallest primary key (ties kept)
                cut = np.partition(k1, K - 1)[K - 1]
                near = k1 <= cut
                flat, k1, k2 = flat[near], k1[near], k2[near]
            ordr = order + flat
            for s in np.lexsort((ordr, k2, k1))[:K]:
                coords = np.unravel_index(flat[s], shape)
                idx = dict(fixed)
                idx.update({a: idx_lists[j][c] for j, (a, c) in enumerate(zip(NUMERIC_AXES, coords, strict=False))})
                keep_keys.append((float(k1[s]), float(k2[s]), int(ordr[s])))
                keep_idx.append(idx)
            if len(keep_keys) > 4 * K:
                best = sorted(range(len(keep_keys)), key=lambda i: keep_keys[i])[:K]
                keep_keys = [keep_keys[i] for i in best]
                keep_idx = [keep_idx[i] for i in best]
        order += n
        if clock is not None:
            clock.report("enumerating plans", evaluated, total)
            if clock.expired("enumerating plans"):
                break
    if rows is not None and evaluated >= total:  # every plan walked: the table the report's analysis asks
        space.__dict__[WALKED_TABLE] = rows.table(space)
    best = sorted(range(len(keep_keys)), key=lambda i: keep_keys[i])[:K]
    return [keep_idx[i] for i in best], evaluated, n_chunks


KEEP_TABLE = "_keep_point_table"
WALKED_TABLE = "_point_table"


def keep_point_table(space: Space) -> None:
    """Mark ``space`` as one whose report asks a :class:`PointTable` of every plan (a small space analysed): an
    enumeration of the whole space (:func:`enumerate_best`) then keeps the table of the chunks it walks, and
    :meth:`PointTable.build` returns it instead of evaluating every plan a second time (the DeepSeek-V3 example:
    576 plans, each simulating its pipeline, walked once instead of once by the solve and once by the analysis)."""
    space.__dict__[KEEP_TABLE] = True


class _Rows:
    """A :class:`PointTable`'s columns gathered chunk by chunk (:func:`chunks`), in walk order."""

    def __init__(self) -> None:
        self.parts: dict[str, list[NDArray[Any]]] = {v: [] for v in VARS}
        self.cost: list[NDArray[Any]] = []
        self.finish: list[NDArray[Any]] = []
        self.cards: list[NDArray[Any]] = []
        self.step: list[NDArray[Any]] = []
        self.interval: list[NDArray[Any]] = []
        self.ok: dict[str, list[NDArray[Any]]] = {f: [] for f in FAMILIES}
        self.ratio: dict[str, list[NDArray[Any]]] = {f: [] for f in FAMILIES}

    def add(self, fixed: Assignment, idx_lists: list[list[int]], shape: tuple[int, ...], r: Mapping[Any, Any]
            ) -> None:
        n = int(np.prod(shape))
        grids = np.meshgrid(*[np.asarray(x) for x in idx_lists], indexing="ij")
        for a, gi in zip(NUMERIC_AXES, grids, strict=False):
            self.parts[a].append(gi.reshape(-1))
        for a, i in fixed.items():
            self.parts[a].append(np.full(n, i))
        self.cost.append(np.broadcast_to(r["cost"], shape).reshape(-1))
        self.finish.append(np.broadcast_to(r["finish_s"], shape).reshape(-1))
        self.cards.append(np.broadcast_to(r["cards"], shape).reshape(-1))
        self.step.append(np.broadcast_to(r["step_s"], shape).reshape(-1))
        self.interval.append(np.broadcast_to(r[("c", F.CHECKPOINT)][1], shape).reshape(-1))  # tau, s
        for f in FAMILIES:
            self.ok[f].append(_ok(r, f, shape).reshape(-1))
            v, lim = (np.broadcast_to(x, shape).reshape(-1) for x in r[("c", f)])
            self.ratio[f].append(closeness_ratio(v, lim))

    def table(self, space: Space) -> PointTable:
        def cat(xs: list[NDArray[Any]], dt: DTypeLike | None = None) -> NDArray[Any]:
            return np.concatenate(xs).astype(dt) if xs else np.zeros(0, dtype=dt)

        return PointTable(space=space, idx={v: cat(self.parts[v], np.int32) for v in VARS},
                          cost=cat(self.cost, float), finish=cat(self.finish, float), cards=cat(self.cards, float),
                          ok={f: cat(self.ok[f], bool) for f in FAMILIES},
                          ratio={f: cat(self.ratio[f], np.float32) for f in FAMILIES},
                          step=cat(self.step, float), interval=cat(self.interval, float))


@dataclass
class PointTable:
    """Every point of a space: assignment indices, cost, finish, cards and per-family satisfaction."""

    space: Space
    idx: dict[str, NDArray[np.int32]]  # var -> int array (index into the domain)
    cost: NDArray[np.float64]
    finish: NDArray[np.float64]
    cards: NDArray[np.float64]
    ok: dict[str, NDArray[np.bool_]]  # family -> bool array
    ratio: dict[str, NDArray[np.float32]]  # family -> value / limit (float32; how far a point is from meeting it)
    step: NDArray[np.float64] | None = None  # step time (s) and save interval (s): what a confidence level reads
    interval: NDArray[np.float64] | None = None

    @classmethod
    def build(cls, space: Space) -> PointTable:
        """Every point of ``space`` evaluated, or the table its own enumeration kept (:func:`keep_point_table`)."""
        walked: PointTable | None = space.__dict__.get(WALKED_TABLE)
        if walked is not None:
            return walked
        rows = _Rows()
        for fixed, idx_lists, shape, r in chunks(space):
            rows.add(fixed, idx_lists, shape, r)
        return rows.table(space)

    def mask(self, enforced: Iterable[str] = FAMILIES, restrict: Mapping[str, Iterable[Any]] | None = None,
             cards: Iterable[int] | None = None) -> NDArray[np.bool_]:
        m = np.ones(self.cost.shape, dtype=bool)
        for f in enforced:
            m &= self.ok[f]
        for v, allowed in (restrict or {}).items():
            dom = self.space.domains[v]
            m &= np.isin(self.idx[v], [i for i, x in enumerate(dom) if x in set(allowed)])
        if cards is not None:
            m &= np.isin(self.cards, list(cards))
        return m

    def closest(self, mask: NDArray[np.bool_], family: str) -> Assignment | None:
        """The point within ``mask`` nearest to meeting ``family`` (least value / limit; first on ties)."""
        sel = np.flatnonzero(mask)
        if not sel.size:
            return None
        i = sel[np.lexsort((sel, self.cost[sel], self.ratio[family][sel]))[0]]
        return {v: int(self.idx[v][i]) for v in VARS}

    def best(self, mask: NDArray[np.bool_], objective: str = "cost", top: int = 1) -> list[Assignment]:
        sel = np.flatnonzero(mask)
        if not sel.size:
            return []
        k1, k2 = (self.cost, self.finish) if objective == "cost" else (self.finish, self.cost)
        order = sel[np.lexsort((sel, k2[sel], k1[sel]))][:top]
        return [{v: int(self.idx[v][i]) for v in VARS} for i in order]


def _bound_values(table: Table, layouts: Iterable[Layout]) -> NDArray[Any]:
    """A bound table's values, to be read at ``layouts`` only: a whole table an on-demand report lays out unit by
    unit (:class:`~tpopt.optimizer.ondemand.LaidTable`) fills those layouts' units first, any other is its array."""
    ready = getattr(table, "layouts_ready", None)
    return table.values if ready is None else cast(NDArray[Any], ready(layouts))


LEVEL_TWIN = "_level_twin"
"""A space's key for the :class:`PointTable` its scenario's space walked at another confidence level (everything else
the same: :func:`tpopt.optimizer.plan.shared_space`): :func:`enumerate_best` answers from it without a walk."""
LEVEL_BOUND = (F.STEP_BUDGET, F.DEADLINE)
"""The families whose limit or value moves with the confidence level (the chance step limit, the deadline's chance
value); every other family's verdict is the same at every level."""


def _level_mask(space: Space, table: PointTable, enforced: Collection[str], cards: Iterable[int] | None
                ) -> NDArray[np.bool_]:
    """The plans of ``table`` (walked at another level) feasible at ``space``'s level: the other families' verdicts
    as walked, the chance step limit of each plan's (accelerator, save mode, cards, interval, ep) at this level
    (:func:`tpopt.models.terms.chance_step_max`, the roots a walk would find) and the two level-bound families
    decided as :func:`tpopt.models.evaluate.evaluate_arrays` decides them (step <= limit; the deadline's chance
    value R + (D - R) step / limit <= D)."""
    assert table.step is not None and table.interval is not None
    sc = space.sc
    m = table.mask([f for f in enforced if f not in LEVEL_BOUND], cards=cards)
    if not any(f in enforced for f in LEVEL_BOUND):
        return m
    dom = space.domains
    eps = np.asarray(dom["ep"], dtype=float)[table.idx["ep"]] if "ep" in dom else np.ones(table.step.shape)
    walked, level = table.space.sc.task.confidence, sc.task.confidence
    if walked is not None and level is not None and level > walked:  # a step up: only the plans the walk let pass
        m &= table.step <= _chance_limits(table.space.sc, table, m, eps) * (1.0 + LEVEL_UP_MARGIN)
    limit = _chance_limits(sc, table, m, eps)
    if F.STEP_BUDGET in enforced:
        m &= table.step <= limit
    if F.DEADLINE in enforced:
        reserved, deadline = sc.task.reserved_s, F.limit(F.DEADLINE, sc)
        m &= T.chance_finish(reserved, deadline, table.step, limit) <= deadline
    return m


LEVEL_UP_MARGIN = 1e-6
"""Relative slack above a plan's chance step limit at the walked level within which :func:`_level_mask` still finds
its limit at a higher level. A higher level's limit is never above the walked one's by more than the roots'
rounding: each chance root is a verified bracket (:func:`tpopt.models.finish.max_work`), P(on time) >= the higher
level at the limit found there and < the walked level 2e-9 relative above the walked limit, and P(on time) falls
with the work. A plan whose step lies more than 1e-6 above its walked limit misses every higher level (both
level-bound families: step <= limit, and the deadline's chance value, which is step / limit <= 1 to the last bit),
so its (cards, interval) root at that level is not needed (the Llama-3-8B example's step up: 44 roots -> 4)."""


def _chance_limits(sc: Scenario, table: PointTable, within: NDArray[np.bool_], eps: NDArray[np.float64]
                   ) -> NDArray[np.float64]:
    """The chance step limit at ``sc``'s level of each plan of ``table`` ``within`` the mask
    (:func:`tpopt.models.terms.chance_step_max`: one root per (accelerator, save mode, cards, interval, ep) those
    plans hold, remembered across calls); NaN elsewhere (no comparison with NaN holds)."""
    assert table.step is not None and table.interval is not None
    limit = np.full(table.step.shape, np.nan)
    dom = table.space.domains
    for a in sorted(set(table.idx["acc"][within].tolist())):  # sets: np.unique would import numpy.ma (about 10 ms)
        for mo in sorted(set(table.idx["mode"][within].tolist())):
            at = within & (table.idx["acc"] == a) & (table.idx["mode"] == mo)
            if at.any():
                limit[at] = T.chance_step_max(sc, dom["acc"][a], dom["mode"][mo], table.cards[at], table.interval[at],
                                              eps[at])
    return limit


# ---------------------------------------------------------------------------------------------
# one layout at a time, from the term tables (the decomposition's subproblem and the report's queries)

HUB = LAYOUT  # (acc, tp, cp, pp, dp, mb)
GRID = V.GRID  # (zero, offload, recompute, sp, schedule, nics, ep, etp, cap): declared in models/variables.py
SAVE = V.SAVE  # (tau, mode)
EXTRAS = GRID + SAVE
_GRID_TERMS = ("time.exposed_dp", "time.tp_comm", "time.offload", "time.ep_comm", "rate")  # and the memory tables
TABLED = F.TABLED
"""The solved families decided by one table each (True = the rule holds), sliced at the layout: a table over
the save variables (:data:`SAVE`) is glued with the save choice, any other on the layout's grid."""


class LayoutEvaluator:
    """Every plan of one core layout (accelerator, tp, cp, pp, dp, micro-batch), evaluated at once.

    The remaining choices span a small grid: ZeRO x offload x recompute x SP x schedule x NICs (x the MoE
    choices), times the save interval and mode. Each term is tabulated over its own variables (sliced from the space's
    tables at the layout; the exact pipeline terms of the schedules without a closed form are
    simulated for the layout alone) and the terms are glued by broadcasting in the evaluator's order
    of operations: memory = max over the stage classes of ((states + copies) + activations) + temporary
    (:meth:`Space.memory_classes`), busy = ((compute +
    exposed DP) + TP) + offload, finish = reserved + (iterations x (busy + wait)) x (1 + L),
    cost = rate x finish.

    The save interval and mode enter through L alone, and finish and cost grow with L, so the best
    plan of a layout uses the least L its allowed (interval, mode) pairs offer (the enforced families
    over the save variables permitting, :meth:`save_rules`): for one best plan the grid is reduced to
    that L first (40 times fewer points on a 20 x 2 save grid); the K best plans (``top`` > 1) use the
    whole grid, and so does one best plan when an enforced family over the save variables spans other
    choices of the grid too (the allowed pairs then differ from point to point).

    ``level="bound"`` glues the pipeline terms' lower bounds (upper bounds for the input-throughput
    check): the result is a valid lower bound of the layout's best, which lets a search skip layouts
    without simulating their pipelines.
    """

    def __init__(self, space: Space) -> None:
        self.space = space
        self.sc = space.sc
        # layout -> exact pipeline terms (compute, activations) on the grid
        self.exact_terms: dict[Layout, dict[str, Any]] = {}
        # (layout, level, exact (recompute, schedule) cells) -> glued arrays, most recent last
        self.glued: dict[tuple[Layout, str, frozenset[Cell]], dict[str, Any]] = {}
        self.evaluated = 0
        self.simulated = 0  # layouts whose exact pipeline terms were computed
        # (table name, id of its values) -> (the values, a view of them with the layout's axes first, then
        # EXTRAS, and the HUB positions of the layout axes); the values are held, so their id stays theirs
        self.views: dict[tuple[str, int], tuple[NDArray[Any], NDArray[Any], tuple[int, ...]]] = {}
        self._save_rules: dict[str, bool] | None = None  # save_rules(), on first use
        self._nic_allowed: NDArray[np.bool_] | None = None  # the space's (acc, nics) pairs, on first use
        self.keep = LAYOUT_CACHE  # glued layouts kept (a report's questions keep more: REPORT_LAYOUT_CACHE)
        # what a glued layout reads of its accelerator, card count and depth alone, formed once each (_glue_facts)
        self._facts: dict[tuple[Any, ...], Any] = {}
        self._ok_tables: list[tuple[str, str]] | None = None  # (family, its rule table) of TABLED, on first use
        self._floors: dict[tuple[Layout, str], float] = {}  # (layout, objective) -> key_floor(), as formed
        # (layout, objective) -> key_floor() over the points that fit in memory (inf where none does), as formed
        self._fit_floors: dict[tuple[Layout, str], float] = {}
        self._fits: dict[Layout, bool] = {}  # layout -> whether a point fits in memory at the bound level
        # the bound level's (grid terms, memory, busy) of the layout whose floors were formed last, for its _glue
        self._kept_parts: tuple[Layout, tuple[dict[str, NDArray[Any]], NDArray[Any], NDArray[Any]]] | None = None

    # -- terms ----------------------------------------------------------------------------------
    def _view(self, name: str, table: NDArray[Any]) -> tuple[NDArray[Any], tuple[int, ...]]:
        """A view of a table of the space with its layout variables first and the others in :data:`EXTRAS`
        order, size-1 axes for the extras it does not have (indexing it at a layout is :meth:`_on_grid`; a
        view, so values written into the table later show through)."""
        got = self.views.get((name, id(table)))
        if got is None:
            vars = self.space.table_vars(name)
            hub = [v for v in vars if v in HUB]
            rest = [v for v in EXTRAS if v in vars]
            view = np.transpose(table, [vars.index(v) for v in hub + rest])
            for i, v in enumerate(EXTRAS):
                if v not in vars:
                    view = np.expand_dims(view, len(hub) + i)
            got = self.views[name, id(table)] = (table, view, tuple(HUB.index(v) for v in hub))
        return got[1], got[2]

    def _on_grid(self, name: str, table: NDArray[Any], h: Layout, domains: Domains | None = None) -> NDArray[Any]:
        """A table sliced at layout ``h`` and laid out on the :data:`EXTRAS` grid (size-1 axes for the
        variables it does not have)."""
        if domains is None:  # a table of the space: its view, indexed at the layout
            view, at = self._view(name, table)
            out: NDArray[Any] = view[tuple(h[i] for i in at)]
            return out
        vars = self.space.table_vars(name)
        vals = table[tuple(h[HUB.index(v)] if v in HUB else slice(None) for v in vars)]
        rest = [v for v in vars if v not in HUB]
        vals = np.transpose(vals, [rest.index(v) for v in EXTRAS if v in rest])
        return vals.reshape([len(domains[v]) if v in rest else 1 for v in EXTRAS])

    def _term(self, name: str, h: Layout, side: str | None = None) -> NDArray[Any]:
        """A term on the extras grid: exact (``side=None``) or its bound (``"lo"`` / ``"hi"``)."""
        sp = self.space
        if side is not None:
            return self._on_grid(name, _bound_values(sp.bound_table(name, side), (h,)), h)
        if name in PIPELINE_TERMS and not sp.exact_pipeline_tables():
            exact: NDArray[Any] = self.exact_terms[h][name]  # as far as _exact_pipeline has made it exact
            return exact
        if name == CHANCE_TABLE and sp.chance_deferred() is not None:  # the layout's own roots, not every card count's
            return self._on_grid(name, sp.chance_layout(h), (0,) * len(h), sp.domains)
        return self._on_grid(name, sp.tables[name].values, h)

    def _exact_pipeline(self, h: Layout, cells: Iterable[Cell] | None = None) -> dict[str, Any]:
        """Exact compute and activations of a layout, (recompute, schedule) cell by cell as asked (``cells``:
        index pairs, :data:`Cell`; None = all): the bound tables' values where they are exact (one stage; the
        closed forms of balanced fill-drain and 1F1B; the peaks with closed forms), the layout's own exact tables
        for the others (one event-model call per term, on the recompute sets and schedules asked: each recompute
        set's durations are formed on their own and the recurrence is elementwise over duration sets, so a cell's
        value is the one a call over every cell gives; a schedule with a closed form, which a call of balanced
        sets alone takes, is simulated for every recompute set at once). ``entry["exact"]``: the cells done."""
        sc, d = self.sc, self.space.domains
        nrec, nsched = len(d["recompute"]), len(d["schedule"])
        entry: dict[str, Any] | None = self.exact_terms.get(h)
        if entry is None:
            per_op = T.per_op_model(sc)
            bases = [T.schedule_parts(x)[0] for x in d["schedule"]]
            one = d["pp"][h[HUB.index("pp")]] <= 1
            acts = {i for i, b in enumerate(bases) if one or b in ("fill-drain", "1f1b", "zb-h1", "zb-h2")
                    or (not per_op and b != "dualpipe")}
            exact_lo = {  # schedules whose lower bound is their exact value
                "time.compute": {i for i, b in enumerate(bases) if one or (not per_op and b in pipeline.CLOSED_FORM)},
                **{names[2]: set(acts) for _, names in self.space.memory_classes()}}
            entry = {t: self._term(t, h, "lo").astype(float) for t in exact_lo}
            entry["done"] = {t: {(r, i) for r in range(nrec) for i in v} for t, v in exact_lo.items()}
            entry["exact"] = set.intersection(*entry["done"].values())
            self.exact_terms[h] = entry
            while len(self.exact_terms) > EXACT_CACHE:
                self.exact_terms.pop(next(iter(self.exact_terms)))
        closed = {i for i, x in enumerate(d["schedule"]) if T.schedule_parts(x)[0] in pipeline.CLOSED_FORM}
        asked = set(itertools.product(range(nrec), range(nsched))) if cells is None else set(cells)
        want = {(r, i) for r, i in asked if i not in closed} | {(r, i) for _, i in asked if i in closed
                                                                for r in range(nrec)}
        rax, sax = EXTRAS.index("recompute"), EXTRAS.index("schedule")
        for term in list(entry["done"]):
            need = want - entry["done"][term]
            if not need:
                continue
            scheds = sorted({i for _, i in need})
            # the recompute sets asked (every one where the term does not read the recompute choice)
            recs = sorted({r for r, _ in need}) if entry[term].shape[rax] > 1 else list(range(nrec))
            dom = {k: ([v[h[HUB.index(k)]]] if k in HUB else list(v)) for k, v in d.items()}
            dom["schedule"] = [d["schedule"][i] for i in scheds]
            dom["recompute"] = [d["recompute"][r] for r in recs]
            sub = Space(sc=sc, domains=dom)
            vals = self._on_grid(term, sub.tables[term].values, (0,) * len(HUB), sub.domains)
            for k, i in enumerate(scheds):
                for q, r in enumerate(recs):
                    idx: list[int | slice] = [slice(None)] * len(EXTRAS)
                    src: list[int | slice] = [slice(None)] * len(EXTRAS)
                    idx[sax], src[sax] = i, k
                    if entry[term].shape[rax] > 1:
                        idx[rax], src[rax] = r, q
                    entry[term][tuple(idx)] = vals[tuple(src)]
            entry["done"][term] = entry["done"][term] | {(r, i) for r in recs for i in scheds}
            self.simulated += 1
        entry["exact"] = set.intersection(*entry["done"].values())
        return entry

    def save_rules(self) -> dict[str, bool]:
        """The families of :data:`TABLED` whose table spans a save variable (:data:`SAVE`), each with whether
        it spans a variable of :data:`GRID` too (its allowed (interval, mode) pairs then vary over the grid)."""
        if self._save_rules is None:
            spans = {family: set(self.space.table_vars(F.ok_table(family))) for family in TABLED}
            self._save_rules = {family: bool(v & set(GRID)) for family, v in spans.items() if v & set(SAVE)}
        return self._save_rules

    def exact_is_bound(self) -> bool:
        """True when the space's bound tables are its exact tables (small spaces)."""
        return self.space.exact_pipeline_tables()

    def _glue(self, h: Layout, level: str, cells: Iterable[Cell] | None = None) -> dict[str, Any]:
        """The layout's terms glued on the extras grid: ``level="bound"`` with the pipeline terms' lower
        bounds, ``"exact"`` with exact values for the (recompute, schedule) cells ``cells`` (:data:`Cell`;
        None = all) -- the others keep their bounds, and ``out["exact"]`` says which cells are exact."""
        exact: frozenset[Cell] = frozenset()
        if level == "exact":
            if self.space.exact_pipeline_tables():
                d = self.space.domains
                exact = frozenset(itertools.product(range(len(d["recompute"])), range(len(d["schedule"]))))
            else:
                exact = frozenset(self._exact_pipeline(h, cells)["exact"])
        key = (h, level, exact)
        got = self.glued.get(key)
        if got is not None:
            self.glued[key] = self.glued.pop(key)
            return got
        sc, sp = self.sc, self.space
        d = sp.domains
        side = "lo" if level == "bound" else None
        g, mem, busy = self._parts(h, side)
        busy_hi = self._busy(h, g, "hi") if level == "bound" else busy  # the input check needs an upper bound
        usable, cards, supply, valid, shape = self._glue_facts(h)
        with np.errstate(divide="ignore"):
            demand = sc.task.global_batch / busy_hi
        ok = {F.MEMORY_PER_CARD: np.broadcast_to(mem <= usable, shape),
              F.INPUT_THROUGHPUT: np.broadcast_to(demand <= supply, shape)}
        scalar_ok = {F.CARDS: cards <= F.limit(F.CARDS, sc)}
        save_ok: dict[str, NDArray[np.bool_]] = {}  # the rules over the save variables, on the extras grid
        save_rules = self.save_rules()
        if self._ok_tables is None:
            self._ok_tables = [(family, F.ok_table(family)) for family in TABLED]
        for family, table in self._ok_tables:
            rule = self._term(table, h)
            if family in save_rules:
                save_ok[family] = rule > 0.5
            elif rule.size == 1:
                scalar_ok[family] = bool(rule.reshape(-1)[0])
            else:
                ok[family] = np.broadcast_to(rule, shape)
        out = {"valid": valid, "ok": ok, "scalar_ok": scalar_ok, "cards": cards, "mem": mem, "demand": demand,
               "supply": supply, "step": np.broadcast_to(busy + sc.input.wait_s, shape),
               "rate": np.broadcast_to(g["rate"], shape),
               "L": self._term("overhead", h), "save_ok": save_ok,
               "step_max": self._term(CHANCE_TABLE, h) if chance_on(sc) else None,
               "usable": usable, "exact": exact}
        if level == "exact":
            self.evaluated += int(valid.sum()) * len(d["tau"]) * len(d["mode"])
        self.glued[key] = out
        while len(self.glued) > self.keep:
            self.glued.pop(next(iter(self.glued)))
        return out

    def _parts(self, h: Layout, side: str | None
               ) -> tuple[dict[str, NDArray[Any]], NDArray[Any], NDArray[Any]]:
        """(the :data:`_GRID_TERMS`, the memory per card, the busy time) of layout ``h`` on the extras grid, with the
        pipeline terms at ``side`` (:meth:`_glue`'s; those :meth:`_form_floors` formed last at the bound level are
        taken as formed: the same arrays)."""
        kept = self._kept_parts
        if side == "lo" and kept is not None and kept[0] == h:
            self._kept_parts = None
            return kept[1]
        g = {n: self._term(n, h) for n in _GRID_TERMS}
        return g, self._memory(h, side), self._busy(h, g, side)

    def _memory(self, h: Layout, side: str | None) -> NDArray[Any]:
        """The memory per card of layout ``h`` on the extras grid (the activations at ``side``): the maximum over
        the stage classes of ((states + copies) + activations) + temporary, in the evaluator's order."""
        per_class = [((self._term(states, h) + self._term(copies, h)) + self._term(acts, h, side)) + self._term(temp, h)
                     for _, (states, copies, acts, temp) in self.space.memory_classes()]  # the evaluator's order
        mem: NDArray[Any] = per_class[0]
        for one in per_class[1:]:
            mem = np.maximum(mem, one)
        return mem

    def _busy(self, h: Layout, g: Mapping[str, NDArray[Any]], side: str | None) -> NDArray[Any]:
        """A step's busy time of layout ``h`` on the extras grid: compute (its pipeline terms' ``side``: "lo",
        "hi" or exact) + exposed data-parallel + tensor-parallel + offload + expert-parallel time, in this order
        (the evaluator's: the same bits); ``g`` holds the layout's :data:`_GRID_TERMS`."""
        return cast(NDArray[Any], (((self._term("time.compute", h, side) + g["time.exposed_dp"]) + g["time.tp_comm"])
                                   + g["time.offload"]) + g["time.ep_comm"])

    def _glue_facts(self, h: Layout) -> tuple[float, int, float, NDArray[np.bool_], tuple[int, ...]]:
        """(usable memory per card, cards, input supply, the extras grid's valid points (read-only), the grid's
        shape) of layout ``h``: facts of its accelerator, card count and pipeline depth alone, each formed once per
        evaluator (a report glues thousands of layouts over a few dozen of them)."""
        sc, d = self.sc, self.space.domains
        at = {v: d[v][h[HUB.index(v)]] for v in HUB if v != "acc"}
        cards = cards_of(**at)
        key = (h[0], cards, at["pp"] == 1)
        got = self._facts.get(key)
        if got is None:
            acc = d["acc"][h[0]]
            usable = F.limit(F.MEMORY_PER_CARD, sc, acc)
            shape = tuple(len(d[v]) for v in GRID) + (1, 1)
            supply = float(np.asarray(T.input_supply(sc, acc, np.asarray(float(cards)))))
            valid = np.zeros(shape, dtype=bool)
            pick = [slice(None)] * len(GRID) + [slice(None)] * 2
            pick[GRID.index("schedule")] = slice(None, 1 if at["pp"] == 1 else None)
            if self._nic_allowed is None:  # a domain fact of the space: formed once, not once per glued layout
                self._nic_allowed = self.space.nic_allowed()
            pick[GRID.index("nics")] = self._nic_allowed[h[0]]
            valid[tuple(pick)] = True
            valid.flags.writeable = False  # shared by every layout of the key (_masks copies it)
            got = self._facts[key] = (usable, cards, supply, valid, shape)
        return cast(tuple[float, int, float, NDArray[np.bool_], tuple[int, ...]], got)

    def key_floor(self, h: Layout, objective: str, enforced: Collection[str] = ()) -> float:
        """A lower bound of the primary key (``objective``: cost or finish) that :meth:`best` at the bound level
        returns for layout ``h`` under any question enforcing ``enforced``, formed from its step, rate and memory
        alone where the layout is not glued yet (else -inf: its glued bound costs less; a floor formed before is
        kept). It reads :meth:`_glue`'s step at the pipeline terms' lower bounds, in the same order (the same bits),
        over the grid points the layout allows (those that fit in memory where ``enforced`` holds the memory family:
        :meth:`_glue`'s own memory mask; inf where none does), with the least overhead of all (interval, mode)
        pairs: :meth:`_points`' keys grow (weakly, in floating point too) with the overhead, and every family,
        restriction and save rule only narrows the points it reads. NaN anywhere makes it NaN (no comparison
        prunes on it)."""
        memory = F.MEMORY_PER_CARD in enforced
        floors = self._fit_floors if memory else self._floors
        objective = "cost" if objective == "cost" else "finish"  # any other objective is keyed on the finish
        got = floors.get((h, objective))
        if got is not None:
            return got
        if (h, "bound", frozenset()) in self.glued:
            return -math.inf
        if memory:
            self._form_floors(h)
        else:
            g = {n: self._term(n, h) for n in _GRID_TERMS}
            self._least_keys(h, g, self._busy(h, g, "lo"), self._glue_facts(h)[3], self._floors)
        return floors[h, objective]

    def _least_keys(self, h: Layout, g: Mapping[str, NDArray[Any]], busy: NDArray[Any], where: NDArray[np.bool_],
                    into: dict[tuple[Layout, str], float]) -> None:
        """The least cost and finish of layout ``h`` at the least overhead of all (interval, mode) pairs over the
        grid points ``where`` allows (inf where none; ``g``: its :data:`_GRID_TERMS`, ``busy``: its busy time at
        the pipeline terms' lower bounds), into ``into`` by (layout, objective) (:meth:`key_floor`)."""
        sc = self.sc
        L = float(np.min(self._term("overhead", h)))
        finish = T.finish_time(sc, busy + sc.input.wait_s, L)
        for objective, k1 in (("cost", g["rate"] * finish), ("finish", finish)):
            into.setdefault((h, objective), float(np.min(np.broadcast_to(k1, where.shape), where=where,
                                                         initial=math.inf)))

    def _form_floors(self, h: Layout) -> None:
        """Whether a point of layout ``h`` fits in memory at the bound level (:meth:`_glue`'s memory mask on the
        allowed points) and, where one does, :meth:`key_floor`'s floors over those points (the arrays formed are
        kept for the layout's :meth:`_glue`, which usually follows); inf where none does."""
        mem = self._memory(h, "lo")
        usable, _, _, valid, _ = self._glue_facts(h)
        fits = valid & (mem <= usable)
        self._fits[h] = bool(fits.any())
        if not self._fits[h]:
            for objective in ("cost", "finish"):
                self._fit_floors.setdefault((h, objective), math.inf)
            return
        g = {n: self._term(n, h) for n in _GRID_TERMS}
        busy = self._busy(h, g, "lo")
        self._kept_parts = (h, (g, mem, busy))
        self._least_keys(h, g, busy, fits, self._fit_floors)

    def _on_grid_many(self, name: str, table: NDArray[Any], cols: NDArray[np.intp]) -> NDArray[Any]:
        """:meth:`_on_grid` of a table of the space at several layouts at once (``cols``: their :data:`HUB` indices,
        one row per hub variable), stacked along a new first axis (size 1 where the table holds no layout variable:
        it broadcasts)."""
        view, at = self._view(name, table)
        out: NDArray[Any] = view[None] if not at else view[tuple(cols[i] for i in at)]
        return out

    def form_floors_ahead(self, layouts: Iterable[Layout], memory: bool) -> None:
        """:meth:`_form_floors` (and, where ``memory`` is False, :meth:`key_floor`'s floors over every allowed point)
        of the layouts a walk is about to check, in one numpy pass over all of them: the same expressions in the
        same order on arrays stacked along a first axis (elementwise float64 arithmetic and minima: the bits the
        layout-by-layout path forms; ``tests/test_key_floor.py``). Layouts already formed or glued are left out, as
        :meth:`no_plan` and :meth:`key_floor` leave them; where an array is not float64 (a scalar's promotion could
        differ), nothing is formed here and each layout's floors are formed when it is checked."""
        hs = [h for h in dict.fromkeys(layouts)
              if h not in self._fits and (h, "bound", frozenset()) not in self.glued]
        sp, sc = self.space, self.sc
        if len(hs) < 2:
            return
        cols = np.array(hs, dtype=np.intp).T  # one row per hub variable
        per_class = [((self._on_grid_many(states, sp.tables[states].values, cols)
                       + self._on_grid_many(copies, sp.tables[copies].values, cols))
                      + self._on_grid_many(acts, sp.bound_table(acts, "lo").values, cols))
                     + self._on_grid_many(temp, sp.tables[temp].values, cols)
                     for _, (states, copies, acts, temp) in sp.memory_classes()]  # :meth:`_memory`'s order
        mem: NDArray[Any] = per_class[0]
        for one in per_class[1:]:
            mem = np.maximum(mem, one)
        g = {n: self._on_grid_many(n, sp.tables[n].values, cols) for n in _GRID_TERMS}
        compute = self._on_grid_many("time.compute", _bound_values(sp.bound_table("time.compute", "lo"), hs), cols)
        busy = (((compute + g["time.exposed_dp"]) + g["time.tp_comm"]) + g["time.offload"]) + g["time.ep_comm"]
        over = self._on_grid_many("overhead", sp.tables["overhead"].values, cols)
        if any(a.dtype != np.float64 for a in (mem, busy, g["rate"], over)):
            return  # a scalar's promotion could differ from the layout-by-layout path's: leave it to that
        facts = [self._glue_facts(h) for h in hs]
        usable = np.array([f[0] for f in facts], dtype=np.float64).reshape((-1,) + (1,) * (mem.ndim - 1))
        valid = np.stack([f[3] for f in facts])
        fits = valid & (mem <= usable)
        axes = tuple(range(1, fits.ndim))
        any_fit = cast(list[bool], np.any(fits, axis=axes).tolist())
        L = np.min(over.reshape(over.shape[0], -1), axis=1).reshape((-1,) + (1,) * (busy.ndim - 1))
        step, rate = busy + sc.input.wait_s, g["rate"]
        # the finish grows with the step (reserved + (iterations x step) x (1 + L), each operation correctly rounded,
        # hence non-decreasing) and the cost with the finish where the rate is positive: the least of either over
        # the points is the one formed at the least step (over every axis the rate does not vary along), the same
        # bits as forming it at every point first (NaN anywhere stays NaN: minima propagate it)
        monotone = (T.iteration_count(sc) > 0 and math.isfinite(sc.task.reserved_s)
                    and bool(np.all((L >= 0) & np.isfinite(L))) and bool(np.all((rate > 0) & np.isfinite(rate))))
        masks = [(fits, self._fit_floors)] + ([] if memory else [(valid, self._floors)])
        for where, into in masks:
            if monotone:
                least_step = np.min(np.broadcast_to(step, where.shape), where=where, initial=math.inf, keepdims=True,
                                    axis=tuple(a for a in axes if a >= rate.ndim or rate.shape[a] == 1))
                finish = T.finish_time(sc, least_step, L)
                keys = (("cost", rate * finish), ("finish", finish))
                leasts = [np.min(k1, axis=axes, initial=math.inf) for _, k1 in keys]
            else:
                finish = T.finish_time(sc, step, L)
                keys = (("cost", rate * finish), ("finish", finish))
                leasts = [np.min(np.broadcast_to(k1, where.shape), axis=axes, where=where, initial=math.inf)
                          for _, k1 in keys]
            for (objective, _), least in zip(keys, leasts, strict=True):
                for h, v in zip(hs, least.tolist(), strict=True):
                    into.setdefault((h, objective), v)
        for h, fit in zip(hs, any_fit, strict=True):
            self._fits[h] = fit
            if not fit:  # as :meth:`_form_floors`: inf where no point fits (the minimum above gives inf too)
                for objective in ("cost", "finish"):
                    self._fit_floors.setdefault((h, objective), math.inf)

    def no_plan(self, h: Layout, enforced: Collection[str]) -> bool:
        """True where layout ``h`` has no plan meeting ``enforced`` even at the bound level (:meth:`best` there
        returns none, for any objective, restriction or count), proven from :meth:`key_floor`'s floors without
        gluing the layout (False where no proof holds, or the layout is glued already: its check is cheap): no
        point fits in memory (the memory family enforced), or the least finish (the deadline enforced in its plain
        form; the chance form compares steps instead: no proof) or the least cost (the budget enforced) of the
        points the question may keep is above the family's limit. NaN proves nothing (no comparison with it
        holds)."""
        if h not in self._fits:
            if (h, "bound", frozenset()) in self.glued:
                return False
            self._form_floors(h)
        sc, memory = self.sc, F.MEMORY_PER_CARD in enforced
        if memory and not self._fits[h]:
            return True
        if F.DEADLINE in enforced and not chance_on(sc) \
                and self.key_floor(h, "finish", enforced) > F.limit(F.DEADLINE, sc):
            return True
        return F.BUDGET in enforced and self.key_floor(h, "cost", enforced) > F.limit(F.BUDGET, sc)

    # -- queries --------------------------------------------------------------------------------
    def _points(self, h: Layout, enforced: Collection[str], objective: str,
                restrict: Mapping[str, Iterable[Any]] | None, full: bool, level: str,
                cells: Iterable[Cell] | None = None) -> tuple[Any, ...] | None:
        """(k1, k2, mask, grid shape) of the question on layout ``h``; None if nothing is allowed. At the
        exact level only the (recompute, schedule) cells made exact count (``cells``; None = all)."""
        masks = self._masks(h, enforced, restrict, level, cells)
        if masks is None:
            return None
        v, m, save_ok = masks
        sc = self.sc
        if full:  # every (interval, mode) pair
            L = v["L"]
            m = m & save_ok
        else:  # the least L among the allowed pairs (first in grid order on ties)
            Ls = np.where(save_ok, v["L"], np.inf).reshape(-1)
            j = int(np.argmin(Ls))
            L = Ls[j]
            m = m[..., :1, :1]
        finish = T.finish_time(sc, v["step"], L)
        cost = v["rate"] * finish
        if F.DEADLINE in enforced and v["step_max"] is not None:  # the chance form (full grids only)
            m = m & (v["step"] <= v["step_max"])
        elif F.DEADLINE in enforced:
            m = m & (finish <= F.limit(F.DEADLINE, sc))
        if F.BUDGET in enforced and sc.cost.max_cost is not None:
            m = m & (cost <= F.limit(F.BUDGET, sc))
        shape = m.shape
        k1, k2 = (cost, finish) if objective == "cost" else (finish, cost)
        out = (np.broadcast_to(k1, shape), np.broadcast_to(k2, shape), m, shape)
        return out if full else out + (np.unravel_index(j, v["L"].shape[-2:]),)

    def _masks(self, h: Layout, enforced: Collection[str], restrict: Mapping[str, Iterable[Any]] | None, level: str,
               cells: Iterable[Cell] | None) -> tuple[dict[str, Any], NDArray[np.bool_], NDArray[np.bool_]] | None:
        """(glued layout, the extras grid's mask, the (interval, mode) pairs' mask) of a question on layout ``h``
        before the deadline and budget families (:meth:`_points`); None if nothing is allowed."""
        d = self.space.domains
        v = self._glue(h, level, cells)
        if not all(v["scalar_ok"][f] for f in enforced if f in v["scalar_ok"]):
            return None
        m = v["valid"].copy()
        if level == "exact" and len(v["exact"]) < len(d["recompute"]) * len(d["schedule"]):
            keep = np.zeros((len(d["recompute"]), len(d["schedule"])), dtype=bool)
            for cell in v["exact"]:
                keep[cell] = True
            shape = [1] * len(EXTRAS)
            shape[EXTRAS.index("recompute")], shape[EXTRAS.index("schedule")] = keep.shape  # recompute comes first
            m &= keep.reshape(shape)
        for f in enforced:
            if f in v["ok"]:
                m &= v["ok"][f]
        save_ok = np.ones(v["L"].shape, dtype=bool)
        for f in enforced:
            if f in v["save_ok"]:
                save_ok = save_ok & v["save_ok"][f]
        for var, allowed in (restrict or {}).items():
            if var in EXTRAS:
                keep = np.array([x in set(allowed) for x in d[var]])
                shape = [1] * len(EXTRAS)
                shape[EXTRAS.index(var)] = len(d[var])
                if var in SAVE:
                    save_ok = save_ok & keep.reshape(shape)
                else:
                    m &= keep.reshape(shape)
        if not m.any() or not save_ok.any():
            return None
        return v, m, save_ok

    def best(self, h: Layout, enforced: Collection[str], objective: str = "cost", top: int = 1,
             restrict: Mapping[str, Iterable[Any]] | None = None, level: str = "exact", cutoff: float | None = None,
             best_first: bool = False) -> list[tuple[Key, Assignment]]:
        """The ``top`` best points of layout ``h`` (index tuple over :data:`HUB`) meeting ``enforced``
        and the extras restrictions: list of (objective key, index dict), best first, ties broken by
        grid order (deterministic). ``level="bound"``: lower bounds of the keys (indices unverified).
        ``cutoff`` (exact level, one plan): only points that may reach a primary key <= cutoff matter,
        so only the (recompute, schedule) cells whose bounded points can are simulated (the others are left
        out; a point that reaches the cutoff is in them, so the best plan at or below it is the same).
        ``best_first`` (with a cutoff): those cells simulated schedule by schedule in increasing bound, until the
        least exact key found is below the bound of every schedule left (:meth:`_first_cells`; the same plan,
        fewer simulations, more glued partial grids: the report's walks ask it, not a solve, whose count of
        evaluated points it would change)."""
        # the chance form (where the deadline is enforced), and a rule over the save and the grid variables, pick
        # (interval, mode) per point
        save_rule = any(self.save_rules().get(f, False) for f in enforced)
        full = top > 1 or (chance_on(self.sc) and F.DEADLINE in enforced) or save_rule
        cells = None
        if level == "exact" and cutoff is not None and top == 1 and not save_rule \
                and not self.space.exact_pipeline_tables():
            # the (recompute, schedule) cells that may reach the cutoff, from the bound level with the least
            # overhead of the allowed (interval, mode) pairs: each point's key there is at most its key at any pair,
            # with the pipeline terms' lower bounds; under the chance form a point counts where some pair's largest
            # step admits its bounded step (a relaxation of the exact step's chance condition at that pair)
            low = self._points(h, enforced, objective, restrict, False, "bound")
            if low is None:
                return []
            k1, _, m, _ = low[:4]
            axes = (EXTRAS.index("recompute"), EXTRAS.index("schedule"))
            reach = np.where(m, k1, np.inf) <= cutoff
            other = tuple(i for i in range(len(EXTRAS)) if i not in axes)
            cells = [(int(r), int(i)) for r, i in np.argwhere(reach.any(axis=other))]
            if not cells:
                return []
            if best_first and not full:
                cells = self._first_cells(h, enforced, objective, restrict, cells, np.where(reach, k1, np.inf))
        if full and top == 1 and not save_rule:  # the chance form alone asks for every pair: one plan, fewer points
            quick = self._chance_least(h, enforced, objective, restrict, level, cells)
            if quick is not None:
                return quick
        got = self._points(h, enforced, objective, restrict, full, level, cells)
        if got is None:
            return []
        k1, k2, m, shape = got[:4]
        first = _least_point(k1, k2, m) if top == 1 else None
        if first is not None:  # one plan: the least point found without sorting every point (the same one)
            picks = [(first, float(k1[first]), float(k2[first]))]
        else:
            sel = np.flatnonzero(m.reshape(-1))
            if not sel.size:
                return []
            a, b = k1.reshape(-1)[sel], k2.reshape(-1)[sel]
            picks = [(np.unravel_index(sel[i], shape), float(a[i]), float(b[i]))
                     for i in np.lexsort((sel, b, a))[:max(1, top)]]
        out: list[tuple[Key, Assignment]] = []
        for coords, ka, kb in picks:
            idx = dict(zip(HUB, h, strict=False))
            idx.update({e: int(c) for e, c in zip(EXTRAS, coords, strict=False)})
            if not full:
                idx["tau"], idx["mode"] = (int(c) for c in got[4])
            out.append(((ka, kb), idx))
        return out


    def _first_cells(self, h: Layout, enforced: Collection[str], objective: str,
                     restrict: Mapping[str, Iterable[Any]] | None, cells: list[Cell], bound: NDArray[Any]
                     ) -> list[Cell]:
        """The cells of :meth:`best`'s one plan (no chance form) that must be simulated: ``cells`` (those that may
        reach its cutoff) taken schedule by schedule in increasing least bounded key (``bound``: each point's
        primary key at the bound level where it may reach the cutoff, inf elsewhere; ties by schedule index) until
        the least exact key of the cells taken is below the least bounded key of every schedule left. A point of a
        cell left out has an exact key at least its bound, so above that least: the first point of lexsort's order
        (key, then second key, then grid order) is among the cells taken. A NaN bound counts as -inf and a NaN key
        is never below one: every cell is then taken."""
        sax = EXTRAS.index("schedule")
        least = bound.min(axis=tuple(i for i in range(len(EXTRAS)) if i != sax))  # per schedule
        least = np.where(np.isnan(least), -np.inf, least)
        order = sorted({i for _, i in cells}, key=lambda i: (float(least[i]), i))
        taken: list[Cell] = []
        for j, i in enumerate(order):
            taken += [c for c in cells if c[1] == i]
            if j + 1 == len(order):
                break
            got = self._points(h, enforced, objective, restrict, False, "exact", taken)
            if got is not None:
                k1, _, m = got[:3]
                if float(np.min(k1, where=m, initial=np.inf)) < min(float(least[x]) for x in order[j + 1:]):
                    break
        return taken

    def _chance_least(self, h: Layout, enforced: Collection[str], objective: str,
                      restrict: Mapping[str, Iterable[Any]] | None, level: str, cells: Iterable[Cell] | None
                      ) -> list[tuple[Key, Assignment]] | None:
        """:meth:`best`'s one plan under the chance form without laying out every (grid point, interval, mode)
        point: the same plan, key and choices, or None where this shortcut does not apply (a largest step or an
        overhead that varies over the grid, as a MoE plan's sigma with its experts; a least key not finite).

        Exact: at a grid point g the keys cost = rate (R + n step (1 + L)) and finish grow (weakly, in floating
        point too) with the pair's overhead L, so g's least key is at the least L among the allowed pairs whose
        largest step admits g's step (the pairs sorted by that largest step: a suffix, its least L read off a
        running minimum). Only the grid points whose least key is the least of all can hold lexsort's first point,
        and their pairs are laid out in full (every tie between pairs resolved as the full grid resolves it)."""
        npair = len(GRID)
        glued = self._glue(h, level, cells)  # kept: :meth:`_masks` reads it again
        if any(n > 1 for n in (*glued["step_max"].shape[:npair], *glued["L"].shape[:npair])):
            return None
        masks = self._masks(h, enforced, restrict, level, cells)
        if masks is None:
            return []
        v, m, save_ok = masks
        sc = self.sc
        smax, L = v["step_max"], v["L"]
        if any(n > 1 for n in save_ok.shape[:npair]):
            return None
        pairs = L.shape[npair:]
        Lp, Sp = (np.broadcast_to(x, (1,) * npair + pairs).reshape(-1) for x in (L, smax))
        okp = np.broadcast_to(save_ok, (1,) * npair + pairs).reshape(-1)
        grid = m.shape[:npair]
        step, rate = (np.broadcast_to(v[k], m.shape).reshape(-1) for k in ("step", "rate"))
        g = np.flatnonzero(m.reshape(-1))
        cand = np.flatnonzero(okp)
        if np.isnan(Sp[cand]).any() or np.isnan(step[g]).any() or np.isnan(Lp[cand]).any():
            return None
        order = cand[np.argsort(Sp[cand], kind="stable")]  # the allowed pairs by their largest step
        least_l = np.minimum.accumulate(Lp[order][::-1])[::-1]  # the least L of the pairs from there on
        k = np.searchsorted(Sp[order], step[g], side="left")  # the first pair whose largest step admits g's
        g, k = g[k < order.size], k[k < order.size]
        budget = F.BUDGET in enforced and sc.cost.max_cost is not None
        finish = T.finish_time(sc, step[g], least_l[k])  # :meth:`_points`' expressions
        cost = rate[g] * finish
        if budget:
            within = cost <= F.limit(F.BUDGET, sc)
            g, finish, cost = g[within], finish[within], cost[within]
        if not g.size:
            return []
        k1 = cost if objective == "cost" else finish
        least = float(k1.min())
        if not math.isfinite(least):
            return None
        sel = g[k1 == least][:, None]  # the grid points that may hold the first point, with every pair
        fin = T.finish_time(sc, step[sel], Lp[None, :])
        cst = rate[sel] * fin
        ok = okp[None, :] & (step[sel] <= Sp[None, :])
        if budget:
            ok &= cst <= F.limit(F.BUDGET, sc)
        a, b = (cst, fin) if objective == "cost" else (fin, cst)
        flat = (sel * Lp.size + np.arange(Lp.size)[None, :])[ok]
        i = int(np.lexsort((flat, b[ok], a[ok]))[0])
        coords = np.unravel_index(int(flat[i]), grid + pairs)
        idx = dict(zip(HUB, h, strict=False))
        idx.update({e: int(c) for e, c in zip(EXTRAS, coords, strict=False)})
        return [((float(a[ok][i]), float(b[ok][i])), idx)]

def _least_point(k1: NDArray[Any], k2: NDArray[Any], m: NDArray[np.bool_]) -> tuple[int, ...] | None:
    """The coordinates of the first point in ``np.lexsort((flat index, k2, k1))`` order among those ``m`` allows
    (the least k1, then the least k2, then the first in grid order), found in linear passes without laying the
    broadcast keys out; None where that order is not decided by them alone (no point, or a least key that is NaN
    or infinite: the caller sorts, as lexsort places NaN last)."""
    least = np.min(k1, where=m, initial=np.inf)
    if not math.isfinite(float(least)):
        return None
    tie = m & (k1 == least)
    second = np.min(k2, where=tie, initial=np.inf)
    if not math.isfinite(float(second)):
        return None
    first = int(np.argmax((tie & (k2 == second)).reshape(-1)))
    return tuple(int(c) for c in np.unravel_index(first, m.shape))


LAYOUT_CACHE = 256
"""Glued layouts a :class:`LayoutEvaluator` keeps (each a few arrays over the extras grid)."""
EXACT_CACHE = 4096
"""Layouts whose exact pipeline terms a :class:`LayoutEvaluator` keeps."""
REPORT_LAYOUT_CACHE = 1024
"""Glued layouts the evaluator keeps while a report's layout oracle asks its questions: they walk the same layouts
question after question (the nine-accelerator GPT-3 analysis glues 1,936 layouts 3,152 times; 518 of them again
after 256 others, 0.4 CPU s), about 40 KB each."""


def layout_evaluator(space: Space) -> LayoutEvaluator:
    """The space's layout evaluator (one per space, shared by the solve and its report)."""
    ev = space.__dict__.get("_layout_evaluator")
    if ev is None:
        ev = space.__dict__["_layout_evaluator"] = LayoutEvaluator(space)
    return ev


def layout_best(space: Space, h: Layout, req: Request, enforced: Collection[str] | None = None,
                cutoff: float | None = None) -> tuple[list[tuple[Key, Assignment]], int]:
    """The decomposition's subproblem: the ``req.top`` best plans of layout ``h`` (index tuple over
    :data:`HUB`) under ``enforced``, as (objective key from the tables, index dict into the space's
    domains), best first; and the points evaluated. ``cutoff``: only plans with a primary key up to it
    matter (:meth:`LayoutEvaluator.best`: the schedules none of whose plans can reach it are not simulated)."""
    ev = layout_evaluator(space)
    enforced = req.enforced(FAMILIES) if enforced is None else enforced
    before = ev.evaluated
    found = ev.best(h, [f for f in FAMILIES if f in enforced], req.objective, req.top, cutoff=cutoff)
    if req.cards is not None:
        found = [kv for kv in found if ev._glue(h, "exact")["cards"] in set(req.cards)]
    return found, ev.evaluated - before
