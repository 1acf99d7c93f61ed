"""The pure tasks a sweep is made of: one exact enumeration per group of points (answered by masks) or
one solve per point.

A task is ``(kind, points)``; with the sweep's payload (the scenario tables, fixed overrides, the
catalog data, fingerprint, time limit: the same for every task, so executors ship it once) it is run by
:func:`run_task`, in a worker process of the local pool or on a Dask worker. Tasks are pure: the same
task gives the same rows anywhere, and they touch no file: the driver alone writes the journal, and the
payload carries the catalog and the model themselves (not the driver's catalog directories or a
``config.json`` path), so a worker on another machine needs nothing but tpopt.
"""

from __future__ import annotations

import copy
import gc
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import numpy as np

from tpopt._version import __version__
from tpopt.catalogs import Catalog, load_catalog
from tpopt.catalogs.scenario import build_scenario, with_overrides
from tpopt.errors import InputError
from tpopt.models import families as F
from tpopt.models.evaluate import Evaluation, evaluate
from tpopt.models.plan import Scenario
from tpopt.models.units import DAY
from tpopt.optimizer import backends
from tpopt.optimizer.backends import Solver
from tpopt.optimizer.backends.verify import feasible_for
from tpopt.optimizer.enumerate import PointTable, layout_evaluator
from tpopt.optimizer.limits import Clock
from tpopt.optimizer.memory_plan import Budget, budget_of
from tpopt.optimizer.memory_plan import enforce as enforce_memory
from tpopt.optimizer.outer import at_batch, solve
from tpopt.optimizer.result import Request
from tpopt.optimizer.space import FAMILIES, VARS, Space, rebuilt_tables
from tpopt.optimizer.sweep.layouts import Answer, GroupOracle, supported
from tpopt.optimizer.sweep.rows import Point, Row, make_row
from tpopt.optimizer.sweep.spec import AUTO_TABLE_LIMIT, SWEPT_FAMILIES, SweepSpec


@dataclass(frozen=True)
class _Payload:
    """What every task of a sweep shares (shipped once per worker, not per task)."""

    raw: dict[str, Any]  # the scenario tables, [model] naming SHIPPED_MODEL
    fixed: dict[str, Any]
    catalog: Catalog  # the loaded Catalog, with the scenario's model as SHIPPED_MODEL
    fingerprint: str
    solver: str
    time_limit: float
    deadline_in_table: bool
    on_demand: frozenset[str] = frozenset()  # accelerators whose points are solved one layout group at a time
    version: str = __version__  # the driver's tpopt: a worker running another version refuses the task


class Task(NamedTuple):
    """One unit of work: ``kind`` "table" (one enumeration answering every point of a group) or a
    solver backend (one solve of one point)."""

    kind: str
    points: tuple[Point, ...]

    def label(self) -> str:
        first = self.points[0].key()
        return first if len(self.points) == 1 else f"{len(self.points)} points from {first}"


_CACHE: dict[tuple[Any, ...], Scenario] = {}


def group_scenario(payload: _Payload, point: Point, deadline_s: float | None = None) -> Scenario:
    """The scenario of a point's group: its accelerator and table-changing inputs (the deadline is
    the point's when it is a table input, else any valid value; card cap and budget are lifted)."""
    d = point.deadline_s if deadline_s is None else deadline_s
    key = ("group", payload.fingerprint, point.group(payload.deadline_in_table),
           d if payload.deadline_in_table else None)
    sc = _CACHE.get(key)
    if sc is None:
        raw = with_overrides(payload.raw, {"hardware.accelerator": [point.accelerator],
                                           "search.accelerator": [point.accelerator]})
        ov = dict(payload.fixed)
        ov.update({"task.tokens": point.tokens, "hardware.efficiency": point.efficiency or None,
                   "schedule.reserved": f"{point.reserved_s!r}s",
                   "schedule.deadline": f"{max(d, point.reserved_s + DAY)!r}s",
                   "cost.card_hour": point.card_hour, "task.seq_len": point.seq_len})
        if point.global_batch is not None:
            ov["search.global_batch"] = [point.global_batch]
        sc = build_scenario(with_overrides(raw, ov), payload.catalog)
        if point.global_batch is not None:  # the point's batch (tokens from the critical-batch model)
            sc = at_batch(sc, point.global_batch)
        sc = replace(sc, search=replace(sc.search, max_cards=10**9), cost=replace(sc.cost, max_cost=None))
        if len(_CACHE) > 256:
            _CACHE.clear()
        _CACHE[key] = sc
    return replace(sc, task=replace(sc.task, deadline_s=d))


def point_scenario(sc: Scenario, point: Point) -> Scenario:
    """A group scenario with the point's deadline, card cap and budget."""
    return replace(sc, task=replace(sc.task, deadline_s=point.deadline_s),
                   search=replace(sc.search, max_cards=point.max_cards),
                   cost=replace(sc.cost, max_cost=point.max_cost))


def _table_rows(payload: _Payload, points: list[Point]) -> list[Row]:
    """One exact enumeration for a group; every point answered by a mask over it."""
    first = points[0]
    sc = group_scenario(payload, first, None if payload.deadline_in_table else max(p.deadline_s for p in points))
    price = sc.system(first.accelerator).price_card_hour
    space = Space.from_scenario(sc)
    table = PointTable.build(space)
    static = [f for f in FAMILIES if f not in SWEPT_FAMILIES]
    sel = np.flatnonzero(table.mask(enforced=static))
    # best-first by (cost, finish, enumeration order): PointTable.best's order
    by_cost = sel[np.lexsort((sel, table.finish[sel], table.cost[sel]))]
    by_finish = sel[np.lexsort((sel, table.cost[sel], table.finish[sel]))]
    c_cost, c_fin, c_cards = table.cost[by_cost], table.finish[by_cost], table.cards[by_cost]
    f_cost, f_fin, f_cards = table.cost[by_finish], table.finish[by_finish], table.cards[by_finish]
    evals: dict[int, Evaluation] = {}
    rows: list[Row] = []
    for p in points:
        cap = np.inf if p.max_cost is None else p.max_cost
        ok = (c_fin <= p.deadline_s) & (c_cards <= p.max_cards) & (c_cost <= cap)
        if ok.any():
            i = int(by_cost[int(np.argmax(ok))])
            ev = evals.get(i)
            if ev is None:
                ev = evaluate(sc, space.plan({v: int(table.idx[v][i]) for v in VARS}))
                if not feasible_for(ev, static):  # the table and the evaluator are the same code
                    raise RuntimeError(f"sweep: enumerated plan {ev.plan} fails re-evaluation")
                evals[i] = ev
            rows.append(make_row(p, "optimal", payload.fingerprint, backends.EXHAUSTIVE, ev=ev, price=price, sc=sc))
        else:
            ok2 = (f_cards <= p.max_cards) & (f_cost <= cap)
            fastest = float(f_fin[int(np.argmax(ok2))]) if ok2.any() else None
            rows.append(make_row(p, "infeasible", payload.fingerprint, backends.EXHAUSTIVE, fastest_s=fastest,
                                 price=price))
    return rows


def _solve_rows(payload: _Payload, point: Point, solver: Solver) -> list[Row]:
    """One exact solve for one point (for spaces too large to enumerate)."""
    sc = point_scenario(group_scenario(payload, point), point)
    price = sc.system(point.accelerator).price_card_hour
    clock = Clock(payload.time_limit)  # one limit per point: both solves below draw on it
    method = "on-demand" if point.accelerator in payload.on_demand else "auto"  # the sweep's memory plan
    res = solve(sc, solver, Request(objective="cost", time_limit=payload.time_limit, workers=1, clock=clock,
                                    method=method))
    limit = f"time limit {payload.time_limit:g} s reached"
    if res.feasible:
        note = None if res.status.value == "optimal" else f"{limit}: best plan found, not proven optimal"
        return [make_row(point, res.status.value, payload.fingerprint, solver.name, ev=res.best, price=price, note=note,
                         sc=sc)]
    fastest = None
    if res.status.value == "infeasible":
        enforce = frozenset(f for f in FAMILIES if f != F.DEADLINE)
        fr = solve(sc, solver, Request(objective="time", enforce=enforce, time_limit=payload.time_limit, workers=1,
                                       clock=clock, method=method))
        best = fr.best
        if fr.feasible and fr.status.value == "optimal" and best is not None:  # feasible: a best plan
            fastest = best.metrics["finish_days"] * DAY
    note = f"{limit}: no plan found and no proof that none exists" if res.status.value == "unknown" else None
    return [make_row(point, res.status.value, payload.fingerprint, solver.name, fastest_s=fastest, price=price,
                     note=note)]


LAYOUTS = "layouts"
"""The task kind (and rows' solver) of a large group answered from its shared tables
(:class:`~tpopt.optimizer.sweep.layouts.GroupOracle`)."""
_SPACES: dict[tuple[Any, ...], Space] = {}  # the last group's space per worker (its tables, for the next group)


def group_space(payload: _Payload, sc: Scenario) -> Space:
    """The space of a group's scenario, reusing the previous group's tables where only the tokens,
    reserved time or prices differ (:meth:`Space.sharing`): one table build per accelerator, efficiency
    and batch, whatever the tokens, reserved days and prices swept."""
    key = (payload.fingerprint, tuple(sc.systems))
    prev = _SPACES.get(key)
    if prev is not None:
        rebuild = rebuilt_tables(prev.sc, sc)
        if rebuild is not None:
            out = prev.sharing(sc, rebuild)
            if "time.compute" in dict.keys(out.tables) and "mem.activations" in dict.keys(out.tables):
                layout_evaluator(out).exact_terms = layout_evaluator(prev).exact_terms  # the step model's
            _SPACES[key] = out
            return out
    if _SPACES:  # the previous group's tables sit in reference cycles (space <-> its evaluators): numpy's bytes
        _SPACES.clear()  # never trigger the cyclic collector, so without a collection every group's tables stay
        gc.collect()  # alive (measured: 3.0 GiB over 24 one-point groups of 4.8e10 plans, 0.66 GiB with it)
    out = _SPACES[key] = Space.from_scenario(sc)
    return out


def _layout_rows(payload: _Payload, points: list[Point]) -> list[Row]:
    """A large group's points from one space and its layout fronts (:mod:`.layouts`), each point's scan
    starting from its neighbour's optimum (points sorted by budget, card cap and deadline). The points'
    time limits are pooled over the task; points left when the pool runs out are ``unknown`` rows."""
    first = points[0]
    sc = group_scenario(payload, first, max(p.deadline_s for p in points))
    price = sc.system(first.accelerator).price_card_hour
    space = group_space(payload, sc)
    if not supported(space):
        default = backends.resolve(backends.DEFAULT)
        return [r for p in points for r in _solve_rows(payload, p, default)]
    clock = Clock(payload.time_limit * len(points))  # the points' limits pooled: most take milliseconds
    oracle = GroupOracle(space)
    rows: list[Row] = []
    hint: Answer | None = None
    for p in sorted(points, key=lambda q: (q.max_cost is None, q.max_cost or 0.0, q.max_cards, q.deadline_s)):
        if clock.expired():
            rows.append(make_row(p, "unknown", payload.fingerprint, LAYOUTS, price=price,
                                 note=f"time limit {payload.time_limit:g} s per point reached (pooled over "
                                      f"{len(points)} points): no plan found and no proof that none exists"))
            continue
        got = oracle.cheapest(p.deadline_s, p.max_cards, p.max_cost, hint)
        if got is not None:
            hint = got
            rows.append(make_row(p, "optimal", payload.fingerprint, LAYOUTS, ev=oracle.evaluation(got), price=price,
                                 sc=sc))
        else:
            rows.append(make_row(p, "infeasible", payload.fingerprint, LAYOUTS,
                                 fastest_s=oracle.fastest(p.max_cards, p.max_cost), price=price))
    return rows


def run_task(kind: str, payload: _Payload, points: Sequence[Point]) -> list[Row]:
    """The entry point of a worker: the rows of one task ("table": a group's points; a backend: one point)."""
    if payload.version != __version__:
        raise InputError(f"a sweep worker runs tpopt {__version__} but the driver runs {payload.version}; "
                         f"install the same tpopt on the driver and every worker")
    if kind == "table":
        return _table_rows(payload, list(points))
    if kind == LAYOUTS:
        return _layout_rows(payload, list(points))
    return _solve_rows(payload, points[0], backends.checked(kind))


SHIPPED_MODEL = "(the sweep's model)"  # catalog key of the model the driver built


def _payload(spec: SweepSpec, on_demand: frozenset[str] = frozenset()) -> _Payload:
    """What every task needs, self-contained: the catalog data and the model as the driver built them
    (from the catalog, a ``config.json`` or any other source), not paths on the driver's machine."""
    catalog = copy.copy(spec.catalog or load_catalog(spec.catalog_dirs))
    catalog.models = dict(catalog.models)
    catalog.models[SHIPPED_MODEL] = spec.base.model
    raw = {k: v for k, v in spec.raw.items() if not k.startswith("_")}  # no driver paths
    raw["model"] = {"name": SHIPPED_MODEL}
    return _Payload(raw=raw, fixed=spec.fixed, catalog=catalog, fingerprint=spec.fingerprint, solver=spec.solver,
                    time_limit=spec.time_limit, deadline_in_table=spec.deadline_in_table, on_demand=on_demand)


def space_size(spec: SweepSpec, accelerator: str) -> int:
    return Space.from_scenario(spec.base, restrict={"acc": [accelerator]}).size()


def memory_method(spec: SweepSpec, accelerator: str, share: int = 1) -> str:
    """How one point of the accelerator's space fits the memory plan ``tpopt solve`` keeps
    (:func:`tpopt.optimizer.memory_plan.enforce`: the scenario's ``[search] memory_budget`` or half the
    machine, split evenly between the ``share`` tasks that run at once on this machine): ``"full"`` (every
    table at once: a group's shared tables), ``"on-demand"`` (one layout group's tables at a time: one solve
    per point, as ``solve`` does), or refused in one line (:class:`InputError`), all estimated from the
    domains before any table is allocated."""
    whole = budget_of(spec.base.search.memory_budget)
    budget = whole if share <= 1 else Budget(whole.bytes / share, f"{whole.source}; shared by {share} sweep workers")
    return enforce_memory(Space.from_scenario(spec.base, restrict={"acc": [accelerator]}), budget).method


def on_demand_accelerators(tasks: Sequence[Task], spec: SweepSpec, share: int = 1) -> frozenset[str]:
    """The accelerators of solve tasks whose points go one layout group at a time (:func:`memory_method`)."""
    accs = {t.points[0].accelerator for t in tasks if t.kind not in ("table", LAYOUTS)}
    return frozenset(a for a in accs if memory_method(spec, a, share) == "on-demand")


LAYOUT_POINTS = 1_000
"""Points of one large group per layouts task (a group's tables are built once per task)."""


def plan_tasks(spec: SweepSpec, points: list[Point], share: int = 1) -> list[Task]:
    """Table tasks (one per group), layouts tasks (a large group's points, up to :data:`LAYOUT_POINTS` per
    task, with ``--solver auto``) or solve tasks (one per point: a solver chosen by name, the chance form
    of the deadline, or a deadline that enters the tables), per the solver choice."""
    sizes = {acc: space_size(spec, acc) for acc in spec.hw} if spec.solver == backends.SWEEP_AUTO else {}
    groups: dict[tuple[str | float | int | None, ...], list[Point]] = {}
    for p in points:
        groups.setdefault(p.group(spec.deadline_in_table), []).append(p)
    tasks: list[Task] = []
    auto = spec.solver == backends.SWEEP_AUTO
    whole_tables = not auto and backends.resolve(spec.solver).capabilities.sweep_table
    methods: dict[str, str] = {}  # the memory plan per accelerator (checked once, in the driver)
    for g in sorted(groups, key=lambda g: tuple((x is None, x) for x in g)):
        members = sorted(groups[g], key=lambda p: p.key())
        acc = members[0].accelerator
        small = auto and sizes[acc] <= AUTO_TABLE_LIMIT
        method = methods.get(acc) or methods.setdefault(acc, "full" if small else memory_method(spec, acc, share))
        if whole_tables and method != "full":
            raise InputError(f"--solver {spec.solver} builds every table of the {acc} space at once, over the memory "
                             f"budget; --solver auto or cpsat decompose it one layout group at a time")
        if small or whole_tables:
            tasks.append(Task("table", tuple(members)))
        elif auto and method == "full" and not spec.deadline_in_table and spec.base.task.confidence is None:
            tasks += [Task(LAYOUTS, tuple(members[i:i + LAYOUT_POINTS])) for i in range(0, len(members), LAYOUT_POINTS)]
        else:
            backend = backends.DEFAULT if auto else spec.solver
            tasks += [Task(backend, (p,)) for p in members]
    return tasks
