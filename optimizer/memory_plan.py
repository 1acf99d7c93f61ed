"""The memory plan of a design space: what its solve would allocate, estimated from the domains alone.

Before any table is built, :func:`memory_plan` multiplies out the shape of every term table a solve
reads (:meth:`tpopt.optimizer.space.Space.table_rows`, the dtype :meth:`Space._build` gives it) and of
the per-layout arrays of the layout decomposition. When that exceeds the memory budget, :func:`enforce` chooses
the on-demand path (one layout group's tables at a time, :func:`on_demand_bytes`, :mod:`tpopt.optimizer.ondemand`)
if its estimate fits, and otherwise refuses the space with one line naming the axes to narrow (an
:class:`InputError`: exit 2), so that a large ``[search]`` never ends in a MemoryError.

The estimate (bytes)::

    peak = BASE_BYTES + sum over tables (rows x itemsize) + TEMPORARY_FACTOR x 8 x rows(largest table)
           + LAYOUT_ARRAYS x 8 x layouts

Measured with ``resource.getrusage`` around ``Space.build_tables`` and a CP-SAT solve (peak above the
interpreter, against the estimate without :data:`BASE_BYTES`): GPT-3's widest example 102 MiB of tables,
peak 236 MiB (estimate 282 MiB); a 6.9e9-plan GPT-3 space (TP, CP, PP, 16 micro-batches, 30 save intervals)
406 MiB of tables, peak 899 MiB (estimate 1,114 MiB); a 1.5M-layout space (720,720-sequence batch, 128
micro-batches) 656 MiB of tables, peak 2,652 MiB (estimate 3,104 MiB). ``benchmarks/memory_plan.py`` prints
the estimate against the peak RSS of ``tpopt solve`` on the examples. The estimate is an upper bound on every
space measured.

The budget (:func:`budget_of`): ``[search] memory_budget`` (``tpopt solve --memory-budget``), else
:data:`DEFAULT_SHARE` of this machine's memory (physical memory, or the cgroup's limit when smaller).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from tpopt.errors import InputError
from tpopt.models import variables as V
from tpopt.models.units import GIB
from tpopt.optimizer.enumerate import GRID, LAYOUT_CACHE
from tpopt.optimizer.space import LAYOUT, PIPELINE_TERMS, Space

DEFAULT_SHARE = 0.5
"""Share of the machine's memory a solve may plan to use when the scenario states no budget."""
BASE_BYTES = 256 * 2**20
"""The interpreter, numpy and a solver library loaded (measured: 250 MiB with CP-SAT imported)."""
TEMPORARY_FACTOR = 6.0
"""Temporaries while a table is built, in float64 copies of the largest table (measured 4.4-5.5)."""
LAYOUT_ARRAYS = 24
"""float64 arrays over the layouts the decomposition's bounds keep (memory, busy time, rate, cost, ...)."""
AXES_NAMED = 3
"""Axes a refusal names at least (the widest of the largest table), so that a user can choose."""
SEARCH_KEY = V.SEARCH_KEY
"""A variable's key in ``[search]`` (:attr:`tpopt.models.variables.Variable.search_key`)."""


@dataclass(frozen=True)
class Budget:
    """A memory budget in bytes and where it comes from (said in the refusal)."""

    bytes: float
    source: str


@dataclass(frozen=True)
class MemoryPlan:
    """What a solve of a space would allocate: ``plans`` (points), ``tables_bytes`` (every term table a
    solve reads), the ``largest`` table (name, rows, variables), ``layouts`` (core layouts the
    decomposition bounds) and ``peak_bytes`` (the estimate of the module's formula)."""

    plans: int
    tables_bytes: float
    largest: str
    largest_rows: int
    largest_vars: tuple[str, ...]
    layouts: int
    peak_bytes: float
    on_demand_bytes: float = 0.0
    method: str = "full"
    """How the tables are built: "full" (every table of the space at once) or "on-demand" (one layout group's
    tables at a time, :mod:`tpopt.optimizer.ondemand`), chosen by :func:`enforce`."""


def _itemsize(name: str) -> int:
    """Bytes per entry of a table as :meth:`Space._build` stores it (bool rules, int64 card count,
    float32 upper bounds, float64 otherwise)."""
    return 1 if name.startswith("ok.") else 4 if name.endswith(".hi") else 8


def solve_tables(space: Space) -> list[str]:
    """The tables :meth:`Space.build_tables` builds: the exact ones, except the pipeline terms of a
    space too large to simulate shape by shape, which come as their ``.lo`` / ``.hi`` bounds."""
    exact = space.exact_pipeline_tables()
    out = []
    for name in space._specs:
        base, _, side = name.rpartition(".")
        if side in ("lo", "hi"):
            if not exact and base in PIPELINE_TERMS:
                out.append(name)
        elif exact or name not in PIPELINE_TERMS:
            out.append(name)
    return out


def memory_plan(space: Space) -> MemoryPlan:
    """The space's memory plan, from its domains alone (nothing is allocated)."""
    names = solve_tables(space)
    rows = {n: space.table_rows(n) for n in names}
    largest = max(rows, key=lambda n: rows[n])
    tables = float(sum(rows[n] * _itemsize(n) for n in names))
    layouts = math.prod(len(space.domains[v]) for v in LAYOUT)
    peak = BASE_BYTES + tables + TEMPORARY_FACTOR * 8.0 * rows[largest] + LAYOUT_ARRAYS * 8.0 * layouts
    return MemoryPlan(plans=space.size(), tables_bytes=tables, largest=largest, largest_rows=rows[largest],
                      largest_vars=space.table_vars(largest), layouts=layouts, peak_bytes=peak)


EVALUATOR_ARRAYS = 8
"""float64 arrays over a layout's grid of remaining choices that the per-layout evaluator keeps per glued layout."""
GROUP_BYTES = 4096.0
"""Bytes the on-demand path keeps per layout group between groups (its bound in the heap, the group's key)."""


def on_demand_bytes(space: Space) -> float:
    """The on-demand path's peak (:mod:`tpopt.optimizer.ondemand`), from the space's shape alone::

        peak = BASE_BYTES + sum over tables (rows x itemsize) + (1 + TEMPORARY_FACTOR) x 8 x rows(compute floor)
               + TEMPORARY_FACTOR x 8 x rows(largest table of a group) + LAYOUT_ARRAYS x 8 x layouts of a group
               + GROUP_BYTES x groups + EVALUATOR_ARRAYS x 8 x cells of a layout's grid x min(LAYOUT_CACHE, layouts)

    (the last: the per-layout evaluator's glued layouts, :class:`~tpopt.optimizer.enumerate.LayoutEvaluator`), where
    a group fixes the hub variables of :func:`tpopt.optimizer.ondemand.group_vars`, a table's rows are
    those of one group's slice (the whole table's for the tables of at most :data:`~tpopt.optimizer.ondemand.
    SHARED_ROWS` rows, built once and kept), and the compute floor is that of one group of the group-bound pass
    (:func:`~tpopt.optimizer.ondemand.weak_group_vars`)."""
    from tpopt.optimizer import ondemand  # lazy: the on-demand module imports the decomposition

    fixed = ondemand.group_vars(space)
    weak = ondemand.weak_group_vars(space, fixed)
    d = space.domains

    def rows(name: str, at: tuple[str, ...] = fixed) -> int:
        return math.prod(1 if v in at else len(d[v]) for v in space.table_vars(name))

    def kept(name: str) -> int:
        shared = not name.startswith("time.compute") and space.table_rows(name) <= ondemand.SHARED_ROWS
        return space.table_rows(name) if shared else rows(name)

    names = solve_tables(space)
    floor = rows("time.compute", weak) / len(d["schedule"])
    tables = float(sum(kept(n) * _itemsize(n) for n in names)) + (1 + TEMPORARY_FACTOR) * 8.0 * floor
    largest = max(rows(n) for n in names)
    groups = math.prod(len(d[v]) for v in fixed)
    layouts = math.prod(len(d[v]) for v in LAYOUT) / groups
    grid = math.prod(len(d[v]) for v in GRID)
    glued = EVALUATOR_ARRAYS * 8.0 * grid * min(float(LAYOUT_CACHE), layouts)
    return BASE_BYTES + tables + TEMPORARY_FACTOR * 8.0 * largest + LAYOUT_ARRAYS * 8.0 * layouts \
        + GROUP_BYTES * groups + glued


def machine_memory() -> float:
    """This machine's memory in bytes: physical memory (``os.sysconf``), or the cgroup's limit
    (``/sys/fs/cgroup/memory.max``, v1 ``memory.limit_in_bytes``) when that is smaller."""
    total = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    for f in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(f).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < total:
            total = float(text)
    return total


def budget_of(stated: float | None) -> Budget:
    """The budget: the stated one (``[search] memory_budget`` / ``--memory-budget``), else
    :data:`DEFAULT_SHARE` of :func:`machine_memory`."""
    if stated is not None:
        return Budget(float(stated), "[search] memory_budget / --memory-budget")
    total = machine_memory()
    return Budget(DEFAULT_SHARE * total, f"{DEFAULT_SHARE:.0%} of this machine's {total / GIB:,.1f} GiB; "
                                         "set [search] memory_budget or --memory-budget")


def _size(b: float) -> str:
    """Bytes in binary units: bytes below a KiB, KiB below a MiB, MiB below a GiB, GiB below a TiB, TiB beyond
    (a unit that shows the value: a 1 KiB budget is "1.0 KiB", not "0.0 MiB")."""
    if b < 2**10:
        return f"{b:,.0f} B"
    if b < 2**20:
        return f"{b / 2**10:,.1f} KiB"
    if b < GIB:
        return f"{b / 2**20:,.1f} MiB"
    return f"{b / GIB:,.1f} GiB" if b < 1024 * GIB else f"{b / (1024 * GIB):,.1f} TiB"


def axes_to_narrow(space: Space, mp: MemoryPlan, factor: float) -> list[str]:
    """The ``[search]`` keys of the largest table's widest axes, widest first, as many as it takes for
    the product of their sizes to reach ``factor`` (at least :data:`AXES_NAMED` where it has them)."""
    sizes = sorted(((len(space.domains[v]), v) for v in mp.largest_vars if len(space.domains[v]) > 1),
                   key=lambda x: (-x[0], x[1]))
    out: list[str] = []
    prod = 1.0
    for n, v in sizes:
        key = SEARCH_KEY.get(v, v)
        out.append(f"{key} ({n} values)" if v != "dp" else f"dp ({n} divisors of the batch)")
        prod *= n
        if prod >= factor and len(out) >= AXES_NAMED:
            break
    return out


def enforce(space: Space, budget: Budget | None = None) -> MemoryPlan:
    """The space's memory plan: every table at once when that fits the budget (:func:`budget_of` of the
    scenario's ``[search] memory_budget``), else one layout group at a time (``method="on-demand"``) when that
    fits, else :class:`InputError`: one line with the plans, the estimate, the largest table, the budget and its
    source, and the axes to narrow. ``budget``: this solve's share when several run at once (a sweep's
    workers), else the scenario's."""
    mp = memory_plan(space)
    budget = budget or budget_of(space.sc.search.memory_budget)
    if mp.peak_bytes <= budget.bytes:
        return mp
    lean = on_demand_bytes(space)
    if lean <= budget.bytes:
        return replace(mp, on_demand_bytes=lean, method="on-demand")
    if budget.bytes <= BASE_BYTES:
        raise InputError(f"the memory budget of {_size(budget.bytes)} ({budget.source}) is below the "
                         f"{_size(BASE_BYTES)} a solve takes before any table (the interpreter, numpy, a solver)")
    factor = float(np.ceil((mp.peak_bytes - BASE_BYTES) / (budget.bytes - BASE_BYTES)))
    axes = axes_to_narrow(space, mp, factor)
    raise InputError(
        f"the design space ({mp.plans:.3g} plans) would need about {_size(mp.peak_bytes)} of memory to solve "
        f"(largest table {mp.largest}: {mp.largest_rows:.3g} rows; {_size(lean)} one layout group at a time), "
        f"over the memory budget of "
        f"{_size(budget.bytes)} ({budget.source}): narrow [search] {', '.join(axes)} "
        f"(about {factor:,.0f}x fewer in all)")
