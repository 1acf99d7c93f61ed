"""The local executor: a pool of forked worker processes on this machine, one task at a time each.

A small pool of its own rather than ``concurrent.futures.ProcessPoolExecutor``, for three reasons:

* the driver knows which task each worker holds, so a worker that dies (killed, out of memory) costs
  exactly its own task, which is retried, and is replaced; a process pool would break as a whole;
* workers die with the driver: ``PR_SET_PDEATHSIG`` (Linux) sends them SIGKILL when the driver goes,
  even by ``kill -9``, and elsewhere a watcher thread checks the parent every half second;
* workers never see Ctrl-C (SIGINT is blocked): the driver gets it and stops them. Blocked, not just
  ignored: CP-SAT installs its own SIGINT handler for each solve (it would cut the search short and
  return an unproven plan) and leaves the default action behind.

Workers are forked (everything imported once, the payload inherited, never pickled) when the run
starts, before the progress display starts a thread; a replacement for a dead worker is forked later.
"""

from __future__ import annotations

import ctypes
import importlib
import multiprocessing
import os
import signal
import threading
import time
import traceback
from collections.abc import Iterable, Iterator
from multiprocessing.connection import wait
from typing import TYPE_CHECKING

from tpopt.errors import InputError
from tpopt.optimizer import backends
from tpopt.optimizer.sweep import tasks
from tpopt.optimizer.sweep.executor import Outcome, TaskFailed, WorkerDied, describe

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.context import DefaultContext, ForkContext

    from tpopt.optimizer.sweep.tasks import Task, _Payload

    _Context = ForkContext | DefaultContext

PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int) -> None:
    """SIGKILL when the parent dies (Linux), else a thread that watches it."""
    armed = False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        armed = libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        armed = False
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)
    if not armed:
        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(0.5)
            os._exit(1)

        threading.Thread(target=watch, daemon=True).start()


def _worker_main(conn: Connection, parent: int, payload: _Payload) -> None:
    """A worker: receive (tid, kind, points), send back (tid, rows, None) or (tid, None, failure)."""
    _die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})

    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            os._exit(0)
        if msg is None:
            os._exit(0)
        tid, kind, points = msg
        try:
            rows = tasks.run_task(kind, payload, points)  # looked up now: tests may patch it before the fork
        except InputError as exc:
            conn.send((tid, None, ("input", str(exc), "")))
        except BaseException as exc:  # noqa: BLE001 - reported to the driver, which retries or records it
            conn.send((tid, None, ("failed", describe(exc), traceback.format_exc())))
        else:
            conn.send((tid, rows, None))


def _signal_name(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f" ({signal.Signals(-code).name})"
        except ValueError:
            return f" (signal {-code})"
    return f" (exit code {code})" if code else ""


class _Worker:
    def __init__(self, ctx: _Context, payload: _Payload) -> None:
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, os.getpid(), payload), daemon=True)
        self.proc.start()
        child.close()
        self.tid: int | None = None  # the task it holds


class LocalExecutor:
    name = "local"

    def __init__(self, workers: int) -> None:
        self.workers = max(1, int(workers))
        self.description = f"{self.workers} local worker process{'es' if self.workers != 1 else ''}"
        self._queue: list[tuple[int, Task]] = []
        self._pool: list[_Worker] = []
        self._ctx: _Context | None = None
        self._payload: _Payload | None = None

    def start(self, payload: _Payload, kinds: Iterable[str] = ()) -> None:
        _preload(kinds)
        methods = multiprocessing.get_all_start_methods()
        self._ctx = multiprocessing.get_context("fork" if "fork" in methods else None)
        self._payload = payload
        self._pool = [_Worker(self._ctx, payload) for _ in range(self.workers)]

    def submit(self, tid: int, task: Task) -> None:
        self._queue.append((tid, task))

    def _dispatch(self) -> None:
        for w in self._pool:
            if not self._queue:
                return
            if w.tid is not None:
                continue
            if not w.proc.is_alive():  # died idle: replace it before giving it work
                w = self._replace(w)
            tid, task = self._queue.pop(0)
            try:
                w.conn.send((tid, task.kind, task.points))
            except OSError:  # died just now: the task goes back to the queue
                self._queue.insert(0, (tid, task))
                self._replace(w)
                continue
            w.tid = tid

    def _replace(self, dead: _Worker) -> _Worker:
        assert self._ctx is not None and self._payload is not None, "a worker replaced before start"
        dead.conn.close()
        dead.proc.join(timeout=5)
        if dead.proc.is_alive():
            dead.proc.kill()
            dead.proc.join()
        new = self._pool[self._pool.index(dead)] = _Worker(self._ctx, self._payload)
        return new

    def results(self) -> Iterator[Outcome]:
        while True:
            self._dispatch()
            busy = [w for w in self._pool if w.tid is not None]
            if not busy:
                return
            ready = set(wait([w.conn for w in busy] + [w.proc.sentinel for w in busy]))
            for w in busy:
                if w.conn in ready:
                    try:
                        tid, rows, failure = w.conn.recv()
                    except (EOFError, OSError):  # it closed its end: it is dying
                        pass
                    else:
                        w.tid = None
                        if failure is None:
                            yield tid, rows, None
                        elif failure[0] == "input":
                            raise InputError(failure[1])
                        else:
                            yield tid, None, TaskFailed(failure[1], failure[2])
                        continue
                elif w.proc.sentinel not in ready:
                    continue
                tid, w.tid = w.tid, None
                assert tid is not None  # a busy worker holds a task
                w.proc.join(timeout=5)
                code = w.proc.exitcode
                self._replace(w)
                yield tid, None, WorkerDied(f"worker process died{_signal_name(code)}")

    def close(self) -> None:
        """Stop every worker now (a task in flight is abandoned; its point is not in the journal)."""
        for w in self._pool:
            try:
                if w.tid is None and w.proc.is_alive():
                    w.conn.send(None)
            except OSError:
                pass
        for w in self._pool:
            w.proc.join(timeout=0.5 if w.tid is None else 0)
            if w.proc.is_alive():
                w.proc.terminate()
        for w in self._pool:
            w.proc.join(timeout=2)
            if w.proc.is_alive():
                w.proc.kill()
                w.proc.join()
            w.conn.close()
        self._pool = []
        self._queue.clear()


def _preload(kinds: Iterable[str]) -> None:
    """Import the solver backends once in the parent, so forked workers do not each pay for it."""

    importlib.import_module("tpopt.optimizer.core")
    importlib.import_module("tpopt.optimizer.enumerate")
    for kind in kinds:
        if backends.is_known(kind):  # a solver backend (not "table"): its module, and what it loads on first use
            entry = backends.entry(kind)  # looked up once
            entry.load()
            for lib in entry.preload:
                importlib.import_module(lib)
