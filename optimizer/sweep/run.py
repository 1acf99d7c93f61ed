"""Running a sweep: the driver plans the tasks, hands them to workers, owns the journal, and returns
the rows with their Pareto flags."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from tpopt.optimizer.sweep.front import front_plans, mark_pareto, summarize
from tpopt.optimizer.sweep.rows import PROVEN, sort_key
from tpopt.optimizer.sweep.spec import SweepSpec
from tpopt.optimizer.sweep.store import SweepStore
from tpopt.optimizer.sweep.tasks import plan_tasks, run_task

class Progress:
    """What a sweep reports while it runs (the CLI draws a bar; the default does nothing)."""

    def start(self, total: int, done: int) -> None:  # noqa: D102
        pass

    def advance(self, n: int) -> None:  # noqa: D102
        pass

    def stop(self) -> None:  # noqa: D102
        pass


@dataclass
class SweepResult:
    spec: SweepSpec
    rows: list[dict]  # one per point, sorted by sort_key, ``pareto`` set
    computed: int = 0  # points solved in this run
    reused: int = 0  # points taken from an earlier run's --out
    dropped: int = 0  # rows of an earlier run for points outside this sweep
    discarded: int = 0  # torn/unreadable journal lines dropped on resume
    wall_s: float = 0.0
    tasks: int = 0
    workers: int = 1
    paths: dict = field(default_factory=dict)  # "table" / solver -> points solved that way

    def front(self) -> list[dict]:
        return front_plans(self.rows)

    def summary(self) -> list[dict]:
        return summarize(self.rows, self.spec.hw)


def default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def _pool(n: int):
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    methods = multiprocessing.get_all_start_methods()
    # fork: workers start instantly with everything imported; they are forked at the first submit,
    # before the caller's progress display starts any thread.
    ctx = multiprocessing.get_context("fork" if "fork" in methods else None)
    return ProcessPoolExecutor(max_workers=n, mp_context=ctx, initializer=_worker_init)


def _worker_init() -> None:
    """Workers never see Ctrl-C; the parent gets it and stops them.

    Blocked, not just ignored: CP-SAT installs its own SIGINT handler for each solve (it would cut the
    search short and return an unproven plan, which the journal would keep) and leaves the default action
    behind (the next Ctrl-C would kill the worker and break the pool). A blocked signal reaches neither.
    """
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


def _stop_pool(ex) -> None:
    """Cancel what has not started and stop the workers now (their rows are lost, nothing else)."""
    procs = list((getattr(ex, "_processes", None) or {}).values())
    ex.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        try:
            proc.terminate()
        except (OSError, AttributeError):
            pass


def _preload(kinds) -> None:
    """Import the solver backends once in the parent, so forked workers do not each pay for it."""
    import importlib

    from tpopt.optimizer import core, enumerate as _enumerate  # noqa: F401

    for kind in kinds:
        if kind in ("cpsat", "highs"):
            importlib.import_module(f"tpopt.optimizer.{kind}")


def run_sweep(spec: SweepSpec, *, out=None, force: bool = False, workers: int | None = None,
              progress: Progress | None = None) -> SweepResult:
    """Solve every point of ``spec`` (skipping those already in ``out``), write ``out`` and return
    the rows with the Pareto flags set."""
    from concurrent.futures import FIRST_COMPLETED, wait

    t0 = time.perf_counter()
    progress = progress or Progress()
    points = spec.points()
    keys = {p.key() for p in points}
    store = SweepStore(out, spec.fingerprint, force) if out is not None else None
    done: dict = {}
    dropped = 0
    if store is not None:
        prior = store.load()
        # proven rows are reused; a plan a solver found without proof (time limit) is solved again
        done = {k: r for k, r in prior.items() if k in keys and r["status"] in PROVEN}
        dropped = len(prior) - len(done)
        store.begin(list(done.values()))
    todo = [p for p in points if p.key() not in done]
    tasks = plan_tasks(spec, todo)
    n_workers = max(1, min(workers or default_workers(), len(tasks)))
    # solver tasks always run in worker processes, even one: see _worker_init (Ctrl-C and CP-SAT)
    in_process = n_workers <= 1 and all(t[0] == "table" for t in tasks)
    new: dict = {}
    paths: dict = {}

    def take(task, rows):
        if store is not None:
            store.append(rows)
        for r in rows:
            new[r["point_key"]] = r
        paths[task[0]] = paths.get(task[0], 0) + len(rows)
        progress.advance(len(rows))

    try:
        if in_process:
            progress.start(len(points), len(done))
            for task in tasks:
                take(task, run_task(task))
        else:
            _preload({t[0] for t in tasks})
            ex = _pool(n_workers)
            try:
                futures = {ex.submit(run_task, t): t for t in tasks}
                progress.start(len(points), len(done))
                pending = set(futures)
                while pending:
                    finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for f in sorted(finished, key=lambda f: futures[f][2][0].key()):
                        take(futures[f], f.result())
            except BaseException:
                _stop_pool(ex)
                raise
            ex.shutdown(wait=True)
    finally:
        progress.stop()
        if store is not None:
            store.close()
    rows = list(done.values()) + list(new.values())
    mark_pareto(rows)
    rows.sort(key=sort_key)
    if store is not None:
        store.finalize(rows)
    return SweepResult(spec=spec, rows=rows, computed=len(new), reused=len(done), dropped=dropped,
                       discarded=store.discarded if store else 0, wall_s=time.perf_counter() - t0,
                       tasks=len(tasks), workers=n_workers, paths=paths)
