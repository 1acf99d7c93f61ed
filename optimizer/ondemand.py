"""The layout decomposition on demand: term tables per layout group, built when the group is reached and dropped.

The layout hub (accelerator, tp, cp, pp, dp, micro-batch) is cut into groups by fixing its leading variables
(:func:`group_vars`: the accelerator, then pp, tp, cp, ... until a group's largest table has at most
:data:`GROUP_ROWS` rows). Each group is a :class:`~tpopt.optimizer.space.Space` of its own (the same scenario, the
group's values of the fixed variables, every other domain whole), so its tables are a slice of the full tables
and memory is bounded by one group's slice instead of the product of every axis.

Two bounds per layout, both valid lower bounds of its best plan's objective under the enforced families:

- the *group bound* (before the group's tables exist): :class:`~tpopt.optimizer.decompose.LayoutBounds` of the
  group with the compute term replaced by :meth:`Space.compute_floor` (the busiest stage's work, DualPipe's
  paired stages' where the space searches it; no pipeline simulated), the activations by their closed-form lower
  bound, the terms of :data:`LEFT_OUT` by zero and the input-throughput check left out (a relaxation: fewer
  families, smaller terms);
- the *layout bound*: the decomposition's own :class:`LayoutBounds` from the group's tables.

The loop takes groups in increasing group bound; a group whose bound exceeds the K-th best verified plan is
never tabulated, and since groups are taken in order every later group is pruned with it. Inside a group the
layouts are taken in increasing layout bound and solved exactly (:func:`tpopt.optimizer.enumerate.layout_best`,
the decomposition's subproblem; once K plans are known, only the schedules whose bounded plans can reach the K-th
best are simulated), again stopping at the K-th best. The save interval and mode are never multiplied
into a table: the subproblem chooses them per layout from the (mode, interval, card count) overhead table.

Certificate: the least bound of everything left unexamined (groups not tabulated, layouts not solved) when the
loop stops; it is at least the K-th best plan's objective, which proves the optimum (gap 0), and it is reported
(``solver.certificate`` in ``tpopt solve --json``).
"""

from __future__ import annotations

import contextlib
import heapq
import math
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import Any, cast

import numpy as np
from numpy.typing import NDArray

from tpopt.models.evaluate import Evaluation, evaluate
from tpopt.optimizer.backends.protocol import relative_gap
from tpopt.optimizer.decompose import HUB, KEY_RTOL, LayoutBounds, reduced_values
from tpopt.optimizer.enumerate import layout_best
from tpopt.optimizer.limits import checkpoint, clock_of
from tpopt.optimizer.result import Request, Status, objective_key
from tpopt.optimizer.space import ACTIVATION_TABLES, Space, Table

GROUP_ROWS = 400_000
"""Largest table (rows) of one layout group: the on-demand path's peak memory is about one group's tables."""
UNBOUNDED = 1e300
"""The upper bound a group bound gives the pipeline terms (finite: the bounds treat non-finite entries as absent)."""
LEFT_OUT = ("time.exposed_dp", "time.offload", "time.ep_comm")
"""Busy-time terms the group bound leaves out (bounded below by zero): their tables carry the ZeRO stage,
offload, NICs and expert choices on top of the layout, the largest tables a group bound would otherwise build.
The tensor-parallel time is kept (exact: its table has the layout and recompute only, and without it every TP
degree's groups looked as cheap as TP 1's: the 1e12-plan dense ladder rung tabulated 32 groups instead of 8)."""
WEAK_ROWS = 4_000_000
"""Largest compute-floor table (rows) of one group of the group-bound pass (coarser groups than
:data:`GROUP_ROWS`: the floor has no schedule axis and the left-out terms no table)."""
GROUP_ORDER = ("acc", "pp", "tp", "cp", "dp", "mb")
"""Hub variables fixed per group, in this order, as many as it takes to reach :data:`GROUP_ROWS`."""


def group_rows(space: Space, fixed: Collection[str]) -> int:
    """Rows of the largest exact table of one group that fixes the variables ``fixed``."""
    d = space.domains
    return max(int(np.prod([1 if v in fixed else len(d[v]) for v in space.table_vars(n)]))
               for n in space._specs if not n.endswith((".lo", ".hi")))


def group_vars(space: Space, rows: int | None = None) -> tuple[str, ...]:
    """The hub variables a group fixes: :data:`GROUP_ORDER` up to the first prefix whose groups' largest table has
    at most ``rows`` rows (default :data:`GROUP_ROWS`; the accelerator at least: each accelerator's tables are
    built apart)."""
    rows = GROUP_ROWS if rows is None else rows
    out: list[str] = []
    for v in GROUP_ORDER:
        out.append(v)
        if group_rows(space, out) <= rows:
            break
    return tuple(out)


SHARED_ROWS = 2_000_000
"""Tables of the whole space up to this many rows are built once and sliced for every group (a view): the
activations, states, rate, overhead and rule tables do not depend on every fixed variable, and a group would
otherwise rebuild them."""


WHOLE_TABLES = "_whole_tables"
"""The key (in a space's ``__dict__``) of :func:`slice_whole_tables`."""


def slice_whole_tables(space: Space) -> None:
    """Mark ``space`` as one whose tables but the compute term's will be built whole anyway (a report analyses it:
    its layout oracle's :class:`LayoutBounds` read every other table of the whole space): its layout groups then
    slice those tables, whatever their rows, instead of building their own slices first (the widest GPT-3
    per-operation space's ``time.exposed_dp``, 2.2 M rows: built once instead of once per tabulated group and
    again for the analysis)."""
    space.__dict__[WHOLE_TABLES] = True


class GroupSpace(Space):
    """A layout group's space (:func:`group_space`): a table of the whole space with at most :data:`SHARED_ROWS`
    rows (any table but the compute term's, where the whole space is marked by :func:`slice_whole_tables`) is
    built once there and sliced at the group's values; the others are built for the group alone."""

    def _build(self, name: str) -> Table:
        parent, fixed, idx = self.__dict__["_group_of"]
        if name.startswith("time.compute") or (parent.table_rows(name) > SHARED_ROWS
                                               and not parent.__dict__.get(WHOLE_TABLES)):
            table = super()._build(name)
            if name in COMPUTE_BOUNDS:  # both bounds come from one pass: kept as the whole space's slice
                parent.__dict__.setdefault("_group_compute", {}).setdefault(fixed, {})[idx] = \
                    tuple(dict.__getitem__(self.tables, n) for n in COMPUTE_BOUNDS)
            return table
        with small_pages():  # the whole table, written once where not yet built (time.exposed_dp: 20 M entries)
            whole = parent.tables[name]
        at = dict(zip(fixed, idx, strict=True))
        cut = tuple(slice(at[v], at[v] + 1) if v in at else slice(None) for v in whole.vars)
        return Table(name, whole.vars, whole.values[cut])


class BlockSpace(GroupSpace):
    """The space of a block of pending units (:meth:`PendingGroups.build_block`): the compute term's tables built
    for the block alone (as a group's, where the whole space has none); any other table is the whole space's (built
    there first where it is not yet), the block's entries of it (``_block_cut``), cut when first read. A block's
    bounds read few tables themselves (the rates, the compute term's), the others through the whole space's
    reductions (cut likewise): the nine-accelerator GPT-3 analysis cut all 65 tables for each of its 81 blocks first,
    0.1 of its 1.1 CPU s of builds."""

    def _build(self, name: str) -> Table:
        parent = self.__dict__["_group_of"][0]
        if name in COMPUTE_BOUNDS or (name.startswith("time.compute") and not dict.__contains__(parent.tables, name)):
            return super()._build(name)
        t = parent.tables[name]
        return Table(name, t.vars, self.__dict__["_block_cut"](t.values, t.vars))


class FloorSpace(GroupSpace):
    """A group's space whose pipeline terms are bounded without simulating a pipeline: the compute term by
    :meth:`Space.compute_floor`, the activations by their closed-form lower bound; their upper bounds are
    unbounded (:data:`UNBOUNDED`), so the input-throughput family, which needs an upper bound of busy time,
    allows every layout."""

    def bound_table(self, name: str, side: str) -> Table:
        if name in LEFT_OUT:  # a time, never negative: bounded below by 0, above by UNBOUNDED
            return Table(name, (), np.asarray(0.0 if side == "lo" else UNBOUNDED))
        if name not in ("time.compute", *ACTIVATION_TABLES):
            return super().bound_table(name, side)
        if side == "hi":
            return Table(name, (), np.asarray(UNBOUNDED))
        if name in ACTIVATION_TABLES:  # every stage class's activations: their closed-form lower bound
            return self.tables[f"{name}.lo"]
        floor = self.__dict__.get("_floor")
        if floor is None:
            floor = self.__dict__["_floor"] = self.compute_floor()
        return cast(Table, floor)


@contextlib.contextmanager
def small_pages() -> Iterator[None]:
    """Arrays allocated inside are not offered transparent huge pages (numpy advises the kernel to back every array of
    4 MiB or more with 2 MiB pages; with ``transparent_hugepage`` set to ``madvise``, each such fault zeroes, and may
    first compact, 2 MiB of memory in the kernel). The whole compute bound tables :meth:`PendingGroups.of` lays out
    (two arrays of 35 M entries on the nine-accelerator GPT-3 space) are written once each, 4 KiB pages at a time:
    0.2 instead of 1.1 CPU s (mostly system time) on this machine. The values are the same; numpy's setting is put
    back on the way out. Without numpy's switch (another numpy) nothing changes."""
    switch = getattr(getattr(getattr(np, "_core", None), "multiarray", None), "_set_madvise_hugepage", None)
    if switch is None:
        switch = getattr(getattr(getattr(np, "core", None), "multiarray", None), "_set_madvise_hugepage", None)
    if switch is None:
        yield
        return
    before = switch(False)
    try:
        yield
    finally:
        switch(before)


COMPUTE_BOUNDS = ("time.compute.lo", "time.compute.hi")
"""The compute term's closed-form bound tables (built together, :meth:`Space._compute_table`)."""


BOUNDS_OF_COMPUTE = ("finish_min", "due_min", "cost_min", "busy_max")
"""The per-layout bounds of :class:`LayoutBounds` that read the compute term (:meth:`PendingGroups.build`)."""
GRIDS_OF_COMPUTE = ("finish", "due", "cost", "busy_max")
"""The same bounds on the (layout, coupled choices) grids (:attr:`LayoutBounds.grids`)."""


class LaidTable(Table):
    """A whole compute bound table of :meth:`PendingGroups.of` whose pending units hold their relaxed values (the
    floor, or the largest value) only once something reads them: the array is allocated uninitialised (its pages are
    not touched until written) and each (unit, :data:`PendingGroups.PART` value) slice is filled when a reader asks
    for it (:meth:`layouts_ready`: the layout evaluator's reads of a layout) or marked as written by a build that
    writes it whole (:meth:`written`). Reading :attr:`values` fills every slice not filled yet first, so any other
    reader sees the table :meth:`PendingGroups.of` laid out whole before (the same values, entry by entry, and every
    build since). The nine-accelerator GPT-3 analysis reads or builds a few of the 432 x 20 slices; laying both
    tables out whole (35 M entries each) cost 0.16 CPU s, nearly all of it the kernel zeroing the pages written."""

    def __init__(self, name: str, vars: tuple[str, ...], raw: NDArray[Any], units: PendingGroups,
                 fill: Callable[[NDArray[Any], tuple[slice, ...]], None]) -> None:
        self.name, self.vars, self.raw = name, vars, raw
        self._units, self._fill = units, fill  # fill(raw, cut): the relaxed values into a slice
        d = units.space.domains
        # the parts a unit is filled in: the PART values, where a unit leaves PART open (else the unit whole)
        self._parts = len(d[units.PART]) if units.PART not in units.fixed else 1
        self._filled: set[tuple[tuple[int, ...], int]] = set()  # (unit, part) slices holding their values
        self._positions = [HUB.index(v) for v in units.fixed]
        self._part_at = HUB.index(units.PART)

    @property
    def values(self) -> NDArray[Any]:
        """The whole table, every slice filled first."""
        d = self._units.space.domains
        for u in np.ndindex(*(len(d[v]) for v in self._units.fixed)):
            missing = [p for p in range(self._parts) if (u, p) not in self._filled]
            if len(missing) == self._parts:  # the unit whole, in one assignment
                self._fill(self.raw, self._units._cut(u))
            else:
                for p in missing:
                    self._fill(self.raw, self._cut(u, p))
            self._filled.update((u, p) for p in missing)
        return self.raw

    @values.setter
    def values(self, values: NDArray[Any]) -> None:
        raise AttributeError("a laid-out compute bound table is written slice by slice (written)")

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled (or copied) as the plain table of its values, every slice filled."""
        return Table, (self.name, self.vars, self.values)

    def _cut(self, unit: tuple[int, ...], part: int) -> tuple[slice, ...]:
        cut = self._units._cut(unit)
        if self._parts == 1:
            return cut
        i = self.vars.index(self._units.PART)
        return cut[:i] + (slice(part, part + 1),) + cut[i + 1:]

    def written(self, units: Iterable[tuple[int, ...]], parts: Iterable[int] | None = None) -> NDArray[Any]:
        """The array, to write units ``units`` whole at :data:`PendingGroups.PART` values ``parts`` (None: every
        one) into right away: those slices hold their values once written (nothing is filled first)."""
        at = range(self._parts) if parts is None or self._parts == 1 else parts
        self._filled.update((u, p) for u in units for p in at)
        return self.raw

    def layouts_ready(self, layouts: Iterable[tuple[int, ...]]) -> NDArray[Any]:
        """The array, with the slices of ``layouts`` (:data:`HUB` index tuples) filled: read those layouts only."""
        at, part = self._positions, self._part_at
        many = self._parts > 1
        for key in {(tuple(h[i] for i in at), h[part] if many else 0) for h in layouts}:
            if key not in self._filled:
                self._fill(self.raw, self._cut(*key))
                self._filled.add(key)
        return self.raw


def whole_values(table: Table, units: Iterable[tuple[int, ...]], parts: Iterable[int] | None = None) -> NDArray[Any]:
    """A whole table's array to write units ``units`` of, whole at :data:`PendingGroups.PART` values ``parts``
    (None: every one), right away (:meth:`LaidTable.written`)."""
    return table.written(units, parts) if isinstance(table, LaidTable) else table.values


class PendingGroups:
    """The whole space's compute bound tables (:data:`COMPUTE_BOUNDS`) for the questions a report asks after an
    on-demand solve, built group by group as the questions reach them.

    The layout groups the solve tabulated left their slices (:meth:`GroupSpace._build`); every other group starts
    with valid relaxations instead, as in the group-bound pass: the compute floor (:meth:`Space.compute_floor`,
    no pipeline simulated) from below, the largest finite value from above. :meth:`build` tabulates a group when
    a question reaches one of its layouts, writes its slices into the whole tables (the values a whole build
    gives: the compute term of a plan reads its own variables only; tests/test_on_demand.py) and re-derives the
    per-layout bounds of its layouts (:data:`BOUNDS_OF_COMPUTE`) from the group's own :class:`LayoutBounds`."""

    def __init__(self, space: Space, fixed: tuple[str, ...], pending: set[tuple[int, ...]]) -> None:
        self.space, self.fixed, self.pending = space, fixed, pending  # fixed: the variables a pending unit fixes
        self.reductions: dict[tuple[Any, ...], NDArray[Any]] = {}  # the whole space's, of tables a build keeps
        # (floor, the solve's grouping, its groups' slices): what :meth:`of` laid the whole tables out from
        self._parts: tuple[Table, tuple[str, ...], dict[tuple[int, ...], tuple[Table, ...]]] | None = None
        self.parts_built: dict[tuple[int, ...], set[int]] = {}  # unit -> its PART indices built (build_part)

    @classmethod
    def of(cls, space: Space) -> PendingGroups | None:
        """The whole tables from the solve's group slices (None, and nothing done, when no group was built, the
        pipeline terms are tabulated exactly, the tables exist, or reductions of them are cached)."""
        groups: dict[tuple[str, ...], dict[tuple[int, ...], tuple[Table, ...]]] = \
            space.__dict__.get("_group_compute") or {}
        if (not groups or space.exact_pipeline_tables() or any(n in space.tables for n in COMPUTE_BOUNDS)
                or "_reduced" in space.__dict__):
            return None
        fixed, parts = max(groups.items(), key=lambda kv: len(kv[1]))  # the grouping with the most slices built
        d = space.domains
        vars = space.table_vars("time.compute")
        full = tuple(len(d[v]) for v in vars)
        # its variables: the compute term's but the schedule, in their order (the group-bound pass's where it was the
        # whole space's: group_bounds)
        kept = space.__dict__.pop("_floor", None)
        floor = space.compute_floor() if kept is None else kept
        hi_type = next(iter(parts.values()))[1].values.dtype
        with small_pages():  # 35 M entries each on the nine-accelerator GPT-3 space: 0.9 CPU s less
            lo = np.empty(full)  # filled unit by unit, as read (LaidTable)
            hi = np.empty(full, dtype=hi_type)
        # a group no solve built is left as units one hub variable finer (a question often reaches a few
        # layouts of a group only: the pipeline depths beyond the solve's are reached at one or two widths)
        unit = fixed + tuple(v for v in GROUP_ORDER if v not in fixed)[:1]
        pending: set[tuple[int, ...]] = set()
        out = cls(space, unit, pending)
        laid_floor = np.expand_dims(floor.values, vars.index("schedule"))  # a view: the floor along the schedules
        top = np.finfo(hi_type).max

        def fill_lo(raw: NDArray[Any], cut: tuple[slice, ...]) -> None:
            raw[cut] = laid_floor[tuple(slice(None) if v == "schedule" else c for v, c in zip(vars, cut, strict=True))]

        def fill_hi(raw: NDArray[Any], cut: tuple[slice, ...]) -> None:
            raw[cut] = top

        tables = [LaidTable(name, vars, raw, out, fill) for name, raw, fill in
                  zip(COMPUTE_BOUNDS, (lo, hi), (fill_lo, fill_hi), strict=True)]
        finer = list(np.ndindex(*(len(d[v]) for v in unit[len(fixed):])))
        for idx in np.ndindex(*(len(d[v]) for v in fixed)):
            got = parts.get(idx)
            if got is None:
                pending.update(idx + j for j in finer)
            else:
                cut = out._cut(idx, fixed=fixed)
                lo[cut], hi[cut] = got[0].values, got[1].values
                for t in tables:
                    t.written([idx + j for j in finer])
        del space.__dict__["_group_compute"]  # the whole tables hold the values now
        for t in tables:
            space.tables[t.name] = t
        out._parts = (floor, fixed, parts)  # what the whole tables were laid out from: compute_reductions
        return out

    def compute_reductions(self, target: tuple[str, ...]) -> dict[tuple[Any, ...], NDArray[Any]]:
        """The per-layout compute bounds onto ``target`` (:func:`~tpopt.optimizer.decompose._reduced`'s cache entries,
        both of them) from the parts :meth:`of` laid the whole tables out from, without reducing the whole tables
        (35 M entries on the nine-accelerator GPT-3 space; 0.7 CPU s): where no solve built the group, the floor
        (laid along the schedules as a view: a least entry over the schedules it is repeated along is the floor's
        own) and the largest value the upper table holds; each built group's own slices reduced at its values.
        Exact bit for bit against the tables laid out with the floor there: every variable a group fixes is a hub
        variable, hence in ``target``, so each reduced entry comes from the entries of one part alone, and a
        minimum or maximum (non-finite entries left out, entry by entry) does not depend on the order it meets them
        in (tests/test_on_demand.py). Only once, right after :meth:`of`."""
        if self._parts is None:
            return {}
        (floor, fixed, parts), self._parts = self._parts, None
        d = self.space.domains
        vars = self.space.table_vars("time.compute")
        lo_t, hi_t = (dict.__getitem__(self.space.tables, n) for n in COMPUTE_BOUNDS)
        lo_raw, hi_raw = (t.raw if isinstance(t, LaidTable) else t.values for t in (lo_t, hi_t))  # shape, dtype only
        laid = np.broadcast_to(np.expand_dims(floor.values, vars.index("schedule")), lo_raw.shape)  # a view
        lo = np.array(reduced_values(laid, vars, d, np.min, target), dtype=lo_raw.dtype)
        shape = tuple(len(d[v]) if v in vars else 1 for v in target)
        hi = np.full(shape, np.finfo(hi_raw.dtype).max, dtype=hi_raw.dtype)
        for idx, (g_lo, g_hi) in parts.items():
            dom = group_domains(self.space, fixed, idx)
            pos = dict(zip(fixed, idx, strict=True))
            cut = tuple(slice(pos[v], pos[v] + 1) if v in pos else slice(None) for v in target)
            lo[cut] = reduced_values(g_lo.values, vars, dom, np.min, target)
            hi[cut] = reduced_values(g_hi.values, vars, dom, np.max, target)
        out: dict[tuple[Any, ...], NDArray[Any]] = {}
        for fn, vals in ((np.min, lo), (np.max, hi)):
            vals.flags.writeable = False
            out["time.compute", fn.__name__, target] = vals
        return out

    def _cut(self, idx: tuple[int, ...], vars: tuple[str, ...] | None = None, fixed: tuple[str, ...] | None = None
             ) -> tuple[slice, ...]:
        """Unit ``idx``'s slice (over ``fixed``, default the units' variables) of a whole table over ``vars``
        (default: the compute term's)."""
        at = dict(zip(self.fixed if fixed is None else fixed, idx, strict=True))
        vars = self.space.table_vars("time.compute") if vars is None else vars
        return tuple(slice(at[v], at[v] + 1) if v in at else slice(None) for v in vars)

    def adopt(self, bounds: LayoutBounds, reductions: Mapping[tuple[Any, ...], NDArray[Any]] | None = None
              ) -> None:
        """Make the whole space's per-layout bounds writable (:meth:`build` updates them in place). ``reductions``:
        the :func:`~tpopt.optimizer.decompose._reduced` cache the whole space's bounds were built with; those of
        tables a build leaves as they are (all but the compute term's) are kept for :meth:`build`."""
        self.reductions = {k: v for k, v in (reductions or {}).items() if not str(k[0]).startswith("time.compute")}
        by_cost = bounds.objective_min is bounds.cost_min
        for name in BOUNDS_OF_COMPUTE:
            setattr(bounds, name, np.array(getattr(bounds, name)))
        for name in GRIDS_OF_COMPUTE:
            if name in bounds.grids:
                bounds.grids[name] = np.array(bounds.grids[name])
        bounds.objective_min = bounds.cost_min if by_cost else bounds.finish_min

    def group_of(self, bounds: LayoutBounds, h: int) -> tuple[int, ...]:
        """The unit (index over the variables it fixes) of layout ``h`` (flat hub index)."""
        return tuple(int(bounds.coords[v][h]) for v in self.fixed)

    def build(self, idx: tuple[int, ...], bounds: LayoutBounds) -> np.ndarray[Any, Any]:
        """Tabulate unit ``idx``, write it into the whole tables and its layouts' bounds into ``bounds`` (the whole
        space's, :meth:`adopt`-ed); returns those layouts' flat hub indices."""
        sub = group_space(self.space, self.fixed, idx)
        for name, t in dict.items(self.space.tables):  # every table the whole space has: the group's is a slice
            if name not in COMPUTE_BOUNDS:
                dict.__setitem__(sub.tables, name, Table(name, t.vars, t.values[self._cut(idx, t.vars)]))
        sub.bound_table("time.compute", "lo")
        got = self.space.__dict__.pop("_group_compute")[self.fixed][idx]  # the slices the group just left
        for name, t in zip(COMPUTE_BOUNDS, got, strict=True):
            whole_values(self.space.tables[name], [idx])[self._cut(idx)] = t.values
        sub.__dict__["_reduced"] = self._sliced_reductions(idx)
        at = dict(zip(self.fixed, idx, strict=True))
        _, flat = self._laid(sub, bounds, lambda v, c: np.full(c.size, at[v]) if v in at else c)
        self.pending.discard(idx)
        return flat

    @staticmethod
    def _laid(sub: Space, bounds: LayoutBounds, whole: Callable[[str, NDArray[np.intp]], NDArray[np.intp]]
              ) -> tuple[LayoutBounds, np.ndarray[Any, Any]]:
        """The per-layout bounds of a unit's (or a block's) space ``sub`` written into the whole space's ``bounds``
        (:data:`BOUNDS_OF_COMPUTE`, the coupled grids); ``whole(v, c)``: the whole space's indices of hub variable
        ``v`` for ``sub``'s indices ``c``. Returns ``sub``'s bounds and its layouts' flat hub indices."""
        own = LayoutBounds(sub, "cost", bounds.enforced, bounds.coupled) if bounds.coupled else \
            LayoutBounds(sub, "cost")
        flat = np.ravel_multi_index(tuple(whole(v, own.coords[v]) for v in HUB), bounds.sizes)
        for name in BOUNDS_OF_COMPUTE:
            getattr(bounds, name)[flat] = getattr(own, name)
        for name in GRIDS_OF_COMPUTE:
            if name in bounds.grids:
                bounds.grids[name][flat] = own.grids[name]
        return own, flat


    PART = "dp"
    """The hub variable a unit is built in parts along (:meth:`build_part`): the widest one a unit leaves open."""

    def built_parts(self, idx: tuple[int, ...]) -> set[int]:
        """The :data:`PART` indices of unit ``idx`` already built by :meth:`build_part` (empty: none)."""
        return self.parts_built.setdefault(idx, set())

    def is_pending(self, bounds: LayoutBounds, h: int) -> bool:
        """Whether layout ``h`` (flat hub index) still has its relaxed compute bounds: its unit is pending and its
        :data:`PART` value is not built yet."""
        idx = self.group_of(bounds, h)
        return idx in self.pending and int(bounds.coords[self.PART][h]) not in self.built_parts(idx)

    def build_part(self, idx: tuple[int, ...], parts: Collection[int], bounds: LayoutBounds) -> np.ndarray[Any, Any]:
        """:meth:`build` of unit ``idx`` at the :data:`PART` values ``parts`` only (indices; those already built are
        left out): a question whose incumbent bounds the unit's other layouts out of reach never pays for them
        (the nine-accelerator GPT-3 space's why-not questions: about one layout in eight of a unit they reach).
        The same values as the whole unit's build, bit for bit: the compute term of a plan reads its own variables
        only, and every table the part's space reads is the whole space's slice at its values (its layouts' bounds
        and the reductions likewise, as :meth:`_sliced_reductions` argues for a unit). The unit leaves
        :attr:`pending` once every part is built. Returns the flat hub indices of the layouts built."""
        done = self.built_parts(idx)
        d = self.space.domains
        want = sorted(set(parts) - done)
        if idx not in self.pending or not want:
            return np.zeros(0, dtype=np.intp)
        if self.PART in self.fixed or (not done and len(want) == len(d[self.PART])):  # the whole unit
            flat = self.build(idx, bounds)
            done.update(range(len(d[self.PART])))
            return flat
        return self.build_block([idx], want, bounds)

    def relaxed_parts(self, head: tuple[int, ...]) -> NDArray[np.bool_]:
        """Of the units that share ``head`` (their values of every variable they fix but the last), which parts are
        still relaxed: an array (the last fixed variable's values, :data:`PART`'s values), True where pending."""
        d = self.space.domains
        out = np.zeros((len(d[self.fixed[-1]]), len(d[self.PART])), dtype=bool)
        for i in range(out.shape[0]):
            unit = head + (i,)
            if unit in self.pending:
                out[i] = True
                out[i, sorted(self.built_parts(unit))] = False
        return out

    def build_block(self, units: Collection[tuple[int, ...]], parts: Collection[int], bounds: LayoutBounds
                    ) -> np.ndarray[Any, Any]:
        """:meth:`build_part` of several pending units that differ in the last variable they fix only, at the same
        :data:`PART` values, in one build (one pass of the compute model over the block: a report question reaches
        a few units of one pipeline depth at a time, and each build's own cost is mostly fixed). The block's space
        holds every (unit, part) pair of the two lists; a pair built before is built again, the same bits, and left
        out of the answer: the flat hub indices of the layouts built now."""
        units = sorted(set(units))
        if self.PART in self.fixed:
            return np.concatenate([self.build_part(u, parts, bounds) for u in units])
        d = self.space.domains
        last, head = self.fixed[-1], units[0][:-1]
        if any(u[:-1] != head or u not in self.pending for u in units):
            raise ValueError("build_block: the units must be pending and differ in their last variable only")
        rows = np.asarray([u[-1] for u in units], dtype=np.intp)
        pos = np.asarray(sorted(set(parts)), dtype=np.intp)
        new = np.zeros((len(rows), len(pos)), dtype=bool)  # the pairs pending until now
        for i, u in enumerate(units):
            new[i] = ~np.isin(pos, sorted(self.built_parts(u)))
        fixed = self.fixed[:-1]
        at = dict(zip(fixed, head, strict=True))

        def cut(a: NDArray[Any], vars: tuple[str, ...]) -> NDArray[Any]:
            """The block's entries of an array over ``vars`` (an axis of one entry is kept as it is)."""
            out = a[tuple(slice(at[v], at[v] + 1) if v in at and a.shape[i] > 1 else slice(None)
                          for i, v in enumerate(vars))]
            for v, pick in ((last, rows), (self.PART, pos)):
                if v in vars and out.shape[vars.index(v)] > 1:
                    out = np.take(out, pick, axis=vars.index(v))
            return out

        dom = group_domains(self.space, fixed, head)
        dom[last] = [d[last][i] for i in rows.tolist()]
        dom[self.PART] = [d[self.PART][i] for i in pos.tolist()]
        sub = BlockSpace(sc=self.space.sc, domains=dom)
        sub.__dict__["_pipeline_work"] = self.space._work()
        sub.__dict__["_group_of"] = (self.space, fixed, head)
        sub.__dict__["_block_cut"] = cut  # every other table: the whole space's, the block's entries (BlockSpace)
        sub.bound_table("time.compute", "lo")
        got = self.space.__dict__.pop("_group_compute")[fixed][head]  # the slices the block just left
        vars = self.space.table_vars("time.compute")
        for name, t in zip(COMPUTE_BOUNDS, got, strict=True):
            for k, r in enumerate(rows.tolist()):  # unit by unit: one index array (the parts) keeps the axes' order
                into = [slice(at[v], at[v] + 1) if v in at else slice(r, r + 1) if v == last else pos
                        if v == self.PART else slice(None) for v in vars]
                whole_values(self.space.tables[name], [head + (r,)], pos.tolist())[tuple(into)] = t.values[tuple(
                    slice(k, k + 1) if v == last else slice(None) for v in vars)]
        sub.__dict__["_reduced"] = {key: cut(r, key[2]) for key, r in self.reductions.items()}
        own, flat = self._laid(sub, bounds, lambda v, c: np.full(c.size, at[v]) if v in at else rows[c] if v == last
                               else pos[c] if v == self.PART else c)
        for u in units:
            done = self.built_parts(u)
            done.update(pos.tolist())
            if len(done) == len(d[self.PART]):
                self.pending.discard(u)
        fresh: np.ndarray[Any, Any] = flat[new[own.coords[last], own.coords[self.PART]]]
        return fresh

    def _sliced_reductions(self, idx: tuple[int, ...]) -> dict[tuple[Any, ...], NDArray[Any]]:
        """The whole space's reductions (:meth:`adopt`) at unit ``idx``: what the unit's space would reduce its
        own tables to, without reducing them again.

        Exact: a reduction (:func:`~tpopt.optimizer.decompose._reduced`) takes the least (largest) entry of a
        table over the variables outside its target, and every fixed variable of a unit is a target (a hub
        variable), so the whole table's reduction at the unit's values is the reduction of the unit's slice of
        it: the same entries, and a minimum or maximum does not depend on the order it meets them in (the
        non-finite entries are left out the same way, entry by entry). The unit's tables other than the compute
        term's are those slices (:meth:`build`), so every kept reduction is the value, bit for bit, the unit's
        space computes; the compute term's, rebuilt for the unit, are left out and reduced there."""
        at = dict(zip(self.fixed, idx, strict=True))
        out: dict[tuple[Any, ...], NDArray[Any]] = {}
        for key, red in self.reductions.items():
            target = key[2]
            out[key] = red[tuple(slice(at[v], at[v] + 1) if v in at and red.shape[i] > 1 else slice(None)
                                 for i, v in enumerate(target))]
        return out


def group_space(space: Space, fixed: tuple[str, ...], idx: tuple[int, ...], cls: type[GroupSpace] = GroupSpace
                ) -> GroupSpace:
    """One group's space: the fixed variables at their values ``idx``, every other domain whole; it tabulates the
    pipeline terms as the whole space would (exactly, or as closed-form bounds with each layout simulated when
    solved: the same decision, :meth:`Space.exact_pipeline_tables`, for every group)."""
    sub = cls(sc=space.sc, domains=group_domains(space, fixed, idx))
    sub.__dict__["_pipeline_work"] = space._work()
    sub.__dict__["_group_of"] = (space, fixed, idx)
    return sub


def group_domains(space: Space, fixed: tuple[str, ...], idx: tuple[int, ...]) -> dict[str, list[Any]]:
    """The domains of one group: the fixed variables at their values ``idx``, every other domain whole."""
    dom = {k: list(v) for k, v in space.domains.items()}
    for v, i in zip(fixed, idx, strict=True):
        dom[v] = [space.domains[v][i]]
    return dom


def _layout_keys(space: Space, bounds: LayoutBounds, req: Request, enforced: Collection[str]
                 ) -> np.ndarray[Any, Any]:
    """Each layout's bound of the objective, infinite where an enforced family rules it out."""
    sc = space.sc
    ok = np.isfinite(bounds.objective_min)
    for mask in bounds.allowed_in(enforced, sc).values():
        ok &= mask
    if req.cards is not None:
        ok &= np.isin(bounds.cards, list(req.cards))
    return np.where(ok, bounds.objective_min, np.inf)


def weak_group_vars(space: Space, fixed: tuple[str, ...]) -> tuple[str, ...]:
    """The hub variables a group of the group-bound pass fixes: a prefix of ``fixed`` (the solve's groups), the
    shortest whose largest compute-floor or activation-bound table has at most :data:`WEAK_ROWS` rows."""
    d = space.domains
    floor = tuple(v for v in space.table_vars("time.compute") if v != "schedule")
    for n in range(1, len(fixed) + 1):
        pre = fixed[:n]
        rows = max(math.prod(1 if v in pre else len(d[v]) for v in vs)
                   for vs in (floor, *(space.table_vars(names[2]) for _, names in space.memory_classes())))
        if rows <= WEAK_ROWS:
            return pre
    return fixed


def group_bounds(space: Space, req: Request, enforced: Collection[str], fixed: tuple[str, ...]
                 ) -> list[tuple[float, tuple[int, ...]]]:
    """A heap of (group bound, group index over ``fixed``) for every group with a layout some plan may run:
    :class:`FloorSpace` bounds, computed over the coarser groups of :func:`weak_group_vars` and taken apart
    into the solve's groups (each layout's bound, the least per group)."""
    clock = clock_of(req)
    weak = weak_group_vars(space, fixed)
    rest = fixed[len(weak):]
    heap: list[tuple[float, tuple[int, ...]]] = []
    pieces: list[int] | None = [0]  # weak groups whose floor is laid into the whole space's (None: given up)
    with clock.stoppable("bounding the layout groups"):
        for idx in np.ndindex(*(len(space.domains[v]) for v in weak)):
            checkpoint()
            sub = group_space(space, weak, idx, FloorSpace)
            bounds = LayoutBounds(sub, req.objective, enforced)
            if space.__dict__.get(WHOLE_TABLES) and "_floor" not in space.__dict__:  # for its analysis
                pieces = _floor_piece(space, weak, idx, sub, pieces)
            keys = _layout_keys(sub, bounds, req, enforced)
            low = np.full(tuple(len(space.domains[v]) for v in rest) or (1,), np.inf)
            np.minimum.at(low, tuple(bounds.coords[v] for v in rest) or (np.zeros(keys.size, dtype=np.int64),), keys)
            for j in zip(*np.nonzero(np.isfinite(low)), strict=True):
                heap.append((float(low[j]), tuple(int(i) for i in idx) + tuple(int(i) for i in j)[:len(rest)]))
    heapq.heapify(heap)
    return heap


def _floor_piece(space: Space, weak: tuple[str, ...], idx: tuple[int, ...], sub: Space, pieces: list[int] | None
                 ) -> list[int] | None:
    """Lay weak group ``idx``'s compute floor (the group-bound pass's, :class:`FloorSpace`) into the whole space's
    (``space.__dict__["_floor"]``, which :meth:`PendingGroups.of` takes instead of computing it again); returns the
    count of groups laid so far, or None (and no whole floor kept) once a group has none of the expected shape.

    The same values as ``space.compute_floor()``: :meth:`Space.compute_floors` computes each (accelerator,
    recompute, SP) slice on its own, element by element over the numeric layout grid, from the plan's own
    variables, and a weak group fixes hub variables only (the schedules, hence the floor's kind, are the whole
    space's); tests/test_on_demand.py compares the two."""
    floor = sub.__dict__.get("_floor")
    if pieces is None or floor is None:
        space.__dict__.pop("_floor_parts", None)
        return None
    d = space.domains
    at = dict(zip(weak, idx, strict=True))
    shape = tuple(len(d[v]) for v in floor.vars)
    cut = tuple(slice(at[v], at[v] + 1) if v in at else slice(None) for v in floor.vars)
    want = tuple(1 if v in at else len(d[v]) for v in floor.vars)
    if floor.values.shape != want:
        space.__dict__.pop("_floor_parts", None)
        return None
    whole = space.__dict__.get("_floor_parts")
    if whole is None:
        whole = space.__dict__["_floor_parts"] = Table(floor.name, floor.vars, np.empty(shape, floor.values.dtype))
    whole.values[cut] = floor.values
    n = pieces[0] + 1
    if n == math.prod(len(d[v]) for v in weak):  # every weak group laid: the whole space's floor
        space.__dict__["_floor"] = space.__dict__.pop("_floor_parts")
    return [n]


def solve_on_demand(space: Space, req: Request, enforced: Collection[str]
                    ) -> tuple[list[Evaluation], Status, int, int, float | None, float | None]:
    """The on-demand decomposition; returns (evaluations best first, status, groups tabulated, points evaluated,
    gap, certificate: the least bound left unexamined, ``inf`` when nothing was left)."""
    sc = space.sc
    clock = clock_of(req)
    K = max(1, req.top)
    fixed = group_vars(space)
    space.defer_chance(enforced)  # the chance roots of the card counts the cap and whole hosts leave
    heap = group_bounds(space, req, enforced, fixed)
    groups = len(heap)
    best: list[tuple[tuple[float, float], Evaluation]] = []
    evaluated = tabulated = 0
    left = math.inf  # least bound of the layouts skipped inside tabulated groups
    phase = "solving the layout groups"
    stopped = False
    sub_req = Request(objective=req.objective, enforce=frozenset(enforced), top=K, cards=req.cards, clock=clock)

    def kth() -> float:  # no plan above the K-th found is sought (nor above req.cutoff)
        return best[K - 1][0][0] if len(best) >= K else math.inf if req.cutoff is None else req.cutoff

    while heap:
        if heap[0][0] > kth() * (1 + KEY_RTOL) or clock.expired(phase):
            stopped = heap[0][0] <= kth() * (1 + KEY_RTOL)
            break
        _, idx = heapq.heappop(heap)
        tabulated += 1
        sub = group_space(space, fixed, idx)
        bounds = LayoutBounds(sub, req.objective, enforced)
        keys = _layout_keys(sub, bounds, req, enforced)
        order = np.argsort(keys, kind="stable")
        for j, h in enumerate(order.tolist()):
            if not keys[h] < math.inf or keys[h] > kth() * (1 + KEY_RTOL) or clock.expired(phase):
                rest = keys[order[j:]]
                left = min(left, float(rest.min()) if rest.size else math.inf)
                stopped = stopped or (clock.reached and keys[h] <= kth() * (1 + KEY_RTOL))
                break
            layout = tuple(int(bounds.coords[v][h]) for v in HUB)
            cut = kth() * (1 + KEY_RTOL)
            found, n = layout_best(sub, layout, sub_req, cutoff=cut if math.isfinite(cut) else None)
            evaluated += n
            for key, a in found:
                if key[0] > kth() * (1 + KEY_RTOL):
                    break
                ev = evaluate(sc, sub.plan(a))
                best.append((objective_key(ev, req.objective), ev))
            best.sort(key=lambda kv: kv[0])
            best = best[:K]
        clock.report(phase, tabulated, groups, best=best[0][0][0] if best else None,
                     bound=min(left, heap[0][0] if heap else math.inf), objective=req.objective)
        if clock.reached:
            stopped = True
            break
    certificate = min(left, heap[0][0] if heap else math.inf)
    plans = [ev for _, ev in best]
    if not stopped:
        return plans, (Status.OPTIMAL if plans else Status.INFEASIBLE), tabulated, evaluated, \
            (0.0 if plans else None), certificate
    clock.reached, clock.phase = True, clock.phase or phase
    lower = min(certificate, min((k for k, _ in heap), default=math.inf))
    k = kth() if len(best) >= K else None
    return plans, (Status.FEASIBLE if plans else Status.UNKNOWN), tabulated, evaluated, \
        relative_gap(k, lower if math.isfinite(lower) else None), lower
