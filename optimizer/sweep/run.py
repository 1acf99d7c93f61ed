"""Running a sweep: the driver plans the tasks, hands them to an executor, owns the journal, retries
failed tasks once, and returns the rows with their Pareto flags.

:func:`sweep` is the one-call entry point (scenario in, :class:`SweepResult` out) for the Python API;
:func:`run_sweep` runs a validated :class:`~tpopt.optimizer.sweep.spec.SweepSpec`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tpopt.errors import InputError
from tpopt.optimizer import backends
from tpopt.optimizer.sweep.cluster import DaskExecutor
from tpopt.optimizer.sweep.executor import Executor, InlineExecutor, describe, parse_cluster, require_dask
from tpopt.optimizer.sweep.front import front_plans, mark_pareto, summarize
from tpopt.optimizer.sweep.local import LocalExecutor
from tpopt.optimizer.sweep.rows import COLUMNS, INT_COLUMNS, Row, make_row, sort_key
from tpopt.optimizer.sweep.spec import SweepSpec, build_spec, require_solver
from tpopt.optimizer.sweep.store import Resume, SweepStore
from tpopt.optimizer.sweep.tasks import LAYOUTS, Task, _payload, on_demand_accelerators, plan_tasks

if TYPE_CHECKING:
    import pandas as pd

MAX_ATTEMPTS = 2  # a task that fails this many times becomes error rows


class Progress:
    """What a sweep reports while it runs (the CLI draws a bar and prints notes; the default does nothing)."""

    def start(self, total: int, done: int) -> None:  # noqa: D102
        pass

    def advance(self, n: int, best: float | None = None) -> None:  # noqa: D102 - best: least cost of these n
        pass

    def note(self, text: str) -> None:  # noqa: D102 - something happened (a worker died, a task is retried)
        pass

    def stop(self) -> None:  # noqa: D102
        pass



def make_executor(cluster: str | None, workers: int, inline: bool) -> Executor:
    """The executor for a run: Dask when ``cluster`` is given, else the local pool, or inline for a
    one-worker sweep of table tasks."""
    if cluster:
        kind, where = parse_cluster(cluster)
        require_dask()
        return DaskExecutor(kind, where)
    if inline:
        return InlineExecutor()
    return LocalExecutor(workers)


@dataclass
class SweepResult:
    spec: SweepSpec
    rows: list[Row]  # one per point, sorted by sort_key, ``pareto`` set
    computed: int = 0  # points solved in this run
    reused: int = 0  # points taken from an earlier run's --out
    wall_s: float = 0.0
    tasks: int = 0
    workers: int = 1
    executor: str = "inline"  # "inline", "local" or "dask"
    where: str = "1 worker (this process)"  # the executor in words
    retried: int = 0  # task attempts that failed and were submitted again
    paths: dict[str, int] = field(default_factory=dict)  # "table" / solver -> points solved that way
    resume: Resume = field(default_factory=Resume)  # what the earlier run's --out held

    @property
    def dropped(self) -> int:  # rows of an earlier run for points outside this sweep
        return self.resume.outside

    @property
    def discarded(self) -> int:  # torn/unreadable journal lines dropped on resume
        return self.resume.discarded

    def count(self, *statuses: str) -> int:
        return sum(1 for r in self.rows if r["status"] in statuses)

    def front(self) -> list[Row]:
        return front_plans(self.rows)

    def summary(self) -> list[Row]:
        return summarize(self.rows, self.spec.hw)

    def to_frame(self) -> pd.DataFrame:
        """The rows as a pandas DataFrame, integer columns as nullable integers (no float card counts)."""
        import pandas as pd  # lazy: start-up time

        df = pd.DataFrame(self.rows, columns=list(COLUMNS))
        frame: pd.DataFrame = df.astype({c: "Int64" for c in INT_COLUMNS} | {"pareto": "boolean"})
        return frame


def default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def run_sweep(spec: SweepSpec, *, out: str | Path | None = None, force: bool = False, workers: int | None = None,
              cluster: str | None = None, progress: Progress | None = None) -> SweepResult:
    """Solve every point of ``spec`` (skipping those already proven in ``out``), write ``out`` and return
    the rows with the Pareto flags set.

    ``workers``: local worker processes (default: the core count); ``cluster``: run on Dask instead
    (``local:N``, ``tcp://host:8786`` or a scheduler file). ``out`` is locked for the whole run.
    """
    t0 = time.perf_counter()
    progress = progress or Progress()
    if workers is not None and workers < 1:
        raise InputError("--workers must be at least 1")
    require_solver(spec.solver)  # a missing pyomo:NAME fails here, before --out is touched
    points = spec.points()
    store = SweepStore(out, spec.fingerprint, force) if out is not None else None
    lock = store.lock() if store is not None else None
    try:
        resume = store.load({p.key() for p in points}) if store is not None else Resume()
        done = resume.rows
        todo = [p for p in points if p.key() not in done]
        # the memory plan: on this machine the local workers share its budget (a cluster's workers have their
        # own): a group's tasks run at most once per group at a time, one point's solve once per point
        local = 1 if cluster is not None else workers or default_workers()
        groups = len({p.group(spec.deadline_in_table) for p in todo})
        tasks = plan_tasks(spec, todo, max(1, min(local, groups)))
        n_workers = max(1, min(workers or default_workers(), len(tasks)))
        # solver tasks always run in worker processes, even one (Ctrl-C and CP-SAT: see local.py); table and
        # layouts tasks (numpy only) run in this process on one worker
        inline = n_workers <= 1 and all(t.kind in ("table", LAYOUTS) for t in tasks)
        executor = make_executor(cluster, n_workers, inline)
        new: dict[str, Row] = {}
        paths: dict[str, int] = {}

        def take(kind: str, rows: list[Row]) -> None:
            if store is not None:
                store.append(rows)
            for r in rows:
                new[r["point_key"]] = r
            paths[kind] = paths.get(kind, 0) + len(rows)
            progress.advance(len(rows), min((r["cost"] for r in rows if r.get("cost") is not None), default=None))

        retried = 0
        try:
            if tasks:  # the workers first: a cluster that cannot be reached leaves --out untouched
                on_demand = on_demand_accelerators(tasks, spec, max(1, min(local, len(tasks))))
                executor.start(_payload(spec, on_demand), {t.kind for t in tasks})
                if executor.workers == 0:
                    progress.note(f"no worker is connected yet ({executor.description}); the tasks wait for one")
            if store is not None:
                store.begin(list(done.values()))
            if tasks:
                retried = _drive(executor, tasks, spec.fingerprint, take, progress, len(points), len(done))
        finally:
            executor.close()
            progress.stop()
            if store is not None:
                store.close()
        rows = list(done.values()) + list(new.values())
        mark_pareto(rows)
        rows.sort(key=sort_key)
        if store is not None:
            store.finalize(rows)
    finally:
        if lock is not None:
            lock.release()
    return SweepResult(spec=spec, rows=rows, computed=len(new), reused=len(done), wall_s=time.perf_counter() - t0,
                       tasks=len(tasks), workers=executor.workers, executor=executor.name,
                       where=executor.description, retried=retried, paths=paths, resume=resume)


def _drive(executor: Executor, tasks: list[Task], fingerprint_: str, take: Callable[[str, list[Row]], None],
           progress: Progress, total: int, done: int) -> int:
    """Submit every task, take results as they complete; a failed task is submitted once more, and a
    task that fails :data:`MAX_ATTEMPTS` times becomes one error row per point. Returns the retries."""
    failures = [0] * len(tasks)
    retried = 0
    for tid, task in enumerate(tasks):
        executor.submit(tid, task)
    progress.start(total, done)
    for tid, rows, exc in executor.results():
        task = tasks[tid]
        if exc is None:
            assert rows is not None  # a task without an exception returned its rows
            take(task.kind, rows)
            continue
        failures[tid] += 1
        what = describe(exc)
        if failures[tid] < MAX_ATTEMPTS:
            retried += 1
            progress.note(f"{task.label()}: {what}; retrying")
            executor.submit(tid, task)
            continue
        progress.note(f"{task.label()}: failed again ({what}); recorded as status 'error'")
        note = f"failed {MAX_ATTEMPTS} times: {what}"
        solver = backends.EXHAUSTIVE if task.kind == "table" else task.kind
        take("error", [make_row(p, "error", fingerprint_, solver, note=note) for p in task.points])
    return retried


def sweep(scenario: str | Path | dict[str, Any], *, out: str | Path | None = None, force: bool = False,
          workers: int | None = None, cluster: str | None = None, catalog_dirs: Iterable[str | Path] = (),
          fixed: dict[str, Any] | None = None, progress: Progress | None = None, **inputs: Any) -> SweepResult:
    """One call: read ``scenario`` (a path, or a dict of scenario tables), apply the sweep ``inputs``
    (``hw``, ``deadline``, ``reserved``, ``tokens``, ``efficiency``, ``max_cards``, ``card_hour``,
    ``max_cost``, ``solver``, ``time_limit``, ``breakdown_cards``: a value, a comma list, a list or a
    range "start:end:step", as on the command line) and run it. ``fixed``: other raw overrides for the
    whole sweep, e.g. ``{"hardware.usable_memory": "20GiB"}``."""
    spec = build_spec(scenario, inputs, catalog_dirs, fixed=fixed)
    return run_sweep(spec, out=out, force=force, workers=workers, cluster=cluster, progress=progress)
