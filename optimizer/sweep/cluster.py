"""The Dask executor: a sweep's tasks on the workers of a Dask cluster (``pip install 'tpopt[distributed]'``).

* ``local:N`` starts a ``distributed.LocalCluster`` of N worker processes (one thread each) for the run;
  a scheduler address (``tcp://host:8786``) or a scheduler file (``*.json``, as written by
  ``dask scheduler --scheduler-file`` or dask-jobqueue) connects to a running cluster.
* The payload every task shares (scenario tables, overrides, catalog directories, fingerprint) is
  scattered to the workers once; each task is a call of the pure
  :func:`tpopt.optimizer.sweep.tasks.run_task`, so workers need the same tpopt installed (checked).
* Results stream back with ``distributed.as_completed``; the driver writes them to its journal.
* A worker that dies: the scheduler reschedules its tasks up to its ``allowed-failures`` (0 for
  ``local:N``, so the driver sees the failure at once; a running cluster keeps its own setting, default
  3) and then reports ``KilledWorker``; the driver submits the task once more, and a task that fails
  again becomes an error row. Dask counts every task a dead worker held, queued ones included; a
  ``local:N`` cluster gives each worker one task at a time (worker saturation 1.0), so only the task
  that was running is affected.
"""

from __future__ import annotations

import logging
import os
import re
import uuid
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from tpopt._version import __version__
from tpopt.catalogs.tables import MAX_NESTING, loads_json
from tpopt.errors import InputError
from tpopt.optimizer.sweep.executor import Outcome
from tpopt.optimizer.sweep.rows import FORMAT
from tpopt.optimizer.sweep.tasks import run_task

if TYPE_CHECKING:
    from dask.typing import Key
    from distributed import Client, Future, LocalCluster

    from tpopt.optimizer.sweep.tasks import Task, _Payload

CONNECT_TIMEOUT_S = 30
"""Seconds a scheduler may take to answer before ``--cluster`` is one line and exit 2."""
MAX_SCHEDULER_FILE = 64 * 1024  # bytes of a scheduler file (Dask's are a few hundred)


def local_cluster(n: int) -> LocalCluster:
    """A LocalCluster of ``n`` single-threaded worker processes that hold one task each (worker
    saturation 1: a worker that dies takes only its own task with it) and report a worker death at
    once (allowed failures 0: the driver retries)."""
    import dask
    import distributed

    with dask.config.set({"distributed.scheduler.worker-saturation": 1.0}):
        # the ignores here and below: distributed leaves LocalCluster, Client, Client.scatter and as_completed
        # unannotated (unused-ignore: a release that annotates them needs none)
        return distributed.LocalCluster(  # type: ignore[no-untyped-call, unused-ignore]
            n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None,
            silence_logs=logging.CRITICAL, scheduler_kwargs={"allowed_failures": 0})


def scheduler_address(path: str) -> str:
    """The scheduler address a Dask scheduler file holds (JSON with ``"address": "tcp://host:8786"``, as
    ``dask scheduler --scheduler-file`` and dask-jobqueue write it); anything else: :class:`InputError`."""
    what = f"--cluster: {path!r} is not a Dask scheduler file"
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_SCHEDULER_FILE + 1)
    except OSError as exc:
        raise InputError(f"--cluster: cannot read the scheduler file {path!r} ({exc.strerror or exc})") from None
    if len(data) > MAX_SCHEDULER_FILE:
        raise InputError(f"{what} (larger than {MAX_SCHEDULER_FILE // 1024} KiB)")
    try:
        info = loads_json(data, what)
    except InputError:
        raise InputError(f"{what} (not JSON, or nested deeper than {MAX_NESTING} levels)") from None
    address = info.get("address") if isinstance(info, dict) else None
    if not isinstance(address, str) or not re.match(r"^[a-z][a-z0-9+.-]*://\S+$", address):
        raise InputError(f'{what} (no "address" such as tcp://host:8786; write one with dask scheduler '
                         "--scheduler-file)")
    return address


def _worker_info() -> tuple[str, int]:
    """Run on every worker: the tpopt it imports."""

    return (__version__, FORMAT)


class DaskExecutor:
    name = "dask"

    def __init__(self, kind: str, where: int | str) -> None:
        self.kind, self.where = kind, where  # ("local", N), ("address", "tcp://...") or ("file", path)
        self.workers = where if isinstance(where, int) else 0  # a running cluster's: counted at start
        self.description = f"Dask LocalCluster ({where} worker processes)" if kind == "local" else \
            f"Dask cluster {where}"
        self.cluster: LocalCluster | None = None
        self.client: Client | None = None
        self._payload: Future[_Payload] | None = None  # the scattered payload
        self._ac: Any = None  # distributed.as_completed (its methods are unannotated upstream)
        self._payload_data: _Payload | None = None
        self._tids: dict[Key, int] = {}  # future key -> task id
        self._attempts: dict[int, int] = {}  # task id -> submissions so far
        self._token = uuid.uuid4().hex[:8]
        self._levels: list[tuple[logging.Handler, int]] = []
        self._batch: list[tuple[int, Task]] = []

    def _quiet(self) -> None:
        """distributed logs worker deaths and reconnects on stderr; the driver reports them itself."""
        for handler in logging.getLogger("distributed").handlers:
            self._levels.append((handler, handler.level))
            handler.setLevel(logging.CRITICAL)

    def start(self, payload: _Payload, kinds: Iterable[str] = ()) -> None:
        import distributed

        if self.kind == "file" and not os.path.isfile(self.where):
            raise InputError(f"--cluster: scheduler file {self.where!r} not found")
        # the scheduler file read here: one that is not a scheduler file is bad input, not a minute of polling
        address = scheduler_address(str(self.where)) if self.kind == "file" else self.where
        self._quiet()
        try:
            if isinstance(self.where, int):  # local:N
                self.cluster = local_cluster(self.where)
                self.client = distributed.Client(  # type: ignore[no-untyped-call, unused-ignore]
                    self.cluster, set_as_default=False)
            else:
                self.client = distributed.Client(  # type: ignore[no-untyped-call, unused-ignore]
                    address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
        except (OSError, TimeoutError, ValueError) as exc:
            self.close()
            text = " ".join(str(exc).split())[:200]
            raise InputError(f"--cluster: cannot reach the Dask scheduler at {self.where} ({text})") from None
        try:
            info = self.client.run(_worker_info)
        except ImportError:
            self.close()
            raise InputError("--cluster: the Dask workers cannot import tpopt; install the same tpopt on the "
                             "driver and every worker") from None
        mine = _worker_info()
        other = sorted({v for v in info.values() if tuple(v) != mine})
        if other:
            self.close()
            raise InputError(f"--cluster: workers run tpopt {other[0][0]} (sweep format {other[0][1]}), the driver "
                             f"{mine[0]} (format {mine[1]}); install the same tpopt everywhere")
        self.workers = len(info)
        if self.kind != "local":
            self.description = f"Dask cluster {self.where} ({self.workers} worker{'s' if self.workers != 1 else ''})"
        self._payload_data = payload
        self._scatter()
        self._ac = distributed.as_completed(  # type: ignore[no-untyped-call, unused-ignore]
            [], loop=self.client.loop, with_results=False)

    def _scatter(self) -> None:
        # broadcast: every worker holds a copy, so one dying loses nothing; late joiners fetch it
        assert self.client is not None, "scatter before start"
        self._payload = self.client.scatter(  # type: ignore[no-untyped-call, unused-ignore]
            self._payload_data, broadcast=True, hash=False)

    def submit(self, tid: int, task: Task) -> None:
        self._batch.append((tid, task))

    def _flush(self) -> None:
        """Send the queued tasks in one message: the scheduler then sees the whole group at once and
        queues it (it hands a worker a new task only when it finishes one)."""

        if not self._batch:
            return
        assert self.client is not None and self._payload is not None, "flush before start"
        if self._payload.status != "finished":  # every copy lost with the workers that held it
            self._scatter()
        keys = []
        for tid, task in self._batch:
            n = self._attempts[tid] = self._attempts.get(tid, 0) + 1
            keys.append(f"tpopt-sweep-{task.kind}-{self._token}-{tid}-{n}")
        futures = self.client.map(run_task, [t.kind for _, t in self._batch], [self._payload] * len(self._batch),
                                  [t.points for _, t in self._batch], key=keys, pure=False, retries=0)
        for (tid, _), fut in zip(self._batch, futures, strict=False):
            self._tids[fut.key] = tid
        self._batch = []
        self._ac.update(futures)

    def results(self) -> Iterator[Outcome]:
        self._flush()
        while not self._ac.is_empty():
            fut = next(self._ac)
            tid = self._tids.pop(fut.key)
            if fut.status == "finished":
                rows = fut.result()
                fut.release()
                yield tid, rows, None
            else:
                try:
                    exc = fut.exception()
                except Exception as lost:  # noqa: BLE001 - cancelled or lost: a failure like any other
                    exc = lost
                fut.release()
                if isinstance(exc, InputError):
                    raise exc
                yield tid, None, exc
            self._flush()  # retries the driver submitted meanwhile

    def close(self) -> None:
        for obj in (self.client, self.cluster):
            if obj is not None:
                try:
                    obj.close()
                except Exception:  # noqa: BLE001 - closing after a failure must not hide it
                    pass
        self.client = self.cluster = None
        for handler, level in self._levels:
            handler.setLevel(level)
        self._levels = []
