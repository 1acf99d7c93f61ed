"""The executor seam: where a sweep's tasks run.

An executor takes tasks (:class:`~tpopt.optimizer.sweep.tasks.Task`) and yields their rows as they
complete; the driver (:func:`tpopt.optimizer.sweep.run.run_sweep`) owns everything else: the journal,
the retries, the progress, the final file. Three executors:

* ``inline``: in the calling process (a sweep of table tasks on one worker);
* ``local`` (default): a pool of worker processes on this machine (:mod:`.local`);
* ``dask``: the workers of a Dask cluster (:mod:`.cluster`), chosen by ``cluster``: ``local:N``
  (a ``distributed.LocalCluster`` of N worker processes), a scheduler address (``tcp://host:8786``,
  ``tls://...``), or a scheduler file written by ``dask scheduler --scheduler-file`` (``*.json``).

Adding an executor is one module with a class implementing :class:`Executor` and one line in
:func:`tpopt.optimizer.sweep.run.make_executor`.
"""

from __future__ import annotations

import importlib
import ipaddress
import re
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Protocol

from tpopt.errors import InputError
from tpopt.optimizer.sweep.tasks import run_task

if TYPE_CHECKING:
    from tpopt.optimizer.sweep.rows import Row
    from tpopt.optimizer.sweep.tasks import Task, _Payload

Outcome = tuple[int, "list[Row] | None", "BaseException | None"]  # (task id, rows or None, exception or None)


class WorkerDied(Exception):
    """The process running a task died (killed, out of memory, crashed)."""


class TaskFailed(Exception):
    """A task raised in a worker: ``str()`` is one line (type: message); ``detail`` the traceback."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail


class Executor(Protocol):
    name: str  # "inline", "local", "dask"
    description: str  # for reports: "2 local worker processes", "Dask cluster tcp://... (4 workers)"
    workers: int

    def start(self, payload: _Payload, kinds: Iterable[str] = ()) -> None:
        """Prepare the workers and ship the payload every task shares (once); ``kinds``: the task kinds
        to come (solver backends a pool may import before it forks)."""

    def submit(self, tid: int, task: Task) -> None:
        """Queue a task (also while :meth:`results` is being iterated: retries)."""

    def results(self) -> Iterator[Outcome]:
        """(tid, rows, None) or (tid, None, exception) per task, as they complete, until none is pending."""

    def close(self) -> None:
        """Stop the workers (pending tasks are abandoned)."""


def describe(exc: BaseException) -> str:
    """One deterministic line for a failure (no addresses, pids or timings: it may go into a row)."""
    if isinstance(exc, WorkerDied):
        return str(exc) or "worker process died"
    if isinstance(exc, TaskFailed):
        return str(exc)
    name = type(exc).__name__
    if name == "KilledWorker":  # Dask: the task was on workers that died (allowed-failures exceeded)
        return "worker process died"
    text = " ".join(str(exc).split())
    return f"{name}: {text}"[:300] if text else name


class InlineExecutor:
    """Tasks run one by one in the calling process (no pool to start, no pickling)."""

    name = "inline"
    description = "1 worker (this process)"
    workers = 1

    def __init__(self) -> None:
        self._queue: list[tuple[int, Task]] = []
        self._payload: _Payload | None = None

    def start(self, payload: _Payload, kinds: Iterable[str] = ()) -> None:
        self._payload = payload

    def submit(self, tid: int, task: Task) -> None:
        self._queue.append((tid, task))

    def results(self) -> Iterator[Outcome]:
        assert self._payload is not None, "results before start"
        while self._queue:
            tid, task = self._queue.pop(0)
            try:
                rows = run_task(task.kind, self._payload, task.points)
            except (InputError, KeyboardInterrupt):
                raise
            except Exception as exc:  # noqa: BLE001 - the driver turns it into a retry or an error row
                yield tid, None, exc
            else:
                yield tid, rows, None

    def close(self) -> None:
        self._queue.clear()


LOCAL_CLUSTER = re.compile(r"local:(\d+)$")


def parse_cluster(text: str) -> tuple[str, int | str]:
    """``--cluster`` as ("local", N), ("address", "tcp://...") or ("file", path). Bad text: InputError."""
    value = str(text).strip()
    m = LOCAL_CLUSTER.match(value)
    if m:
        n = int(m.group(1))
        if not 1 <= n <= 1024:
            raise InputError(f"--cluster: {value!r}: a local cluster needs 1 to 1024 workers")
        return "local", n
    if value.startswith("local"):
        raise InputError(f"--cluster: {value!r} is not local:N (N worker processes, e.g. local:4)")
    if re.match(r"^[a-z][a-z0-9+.-]*://\S+$", value):
        return "address", value
    if value.endswith(".json"):
        return "file", value
    raise InputError(f"--cluster: {value!r} is not a scheduler address (tcp://host:8786), a scheduler file "
                     f"(.json) or local:N")


def plain_tcp_note(address: str) -> str | None:
    """One line when ``--cluster`` is a plain ``tcp://`` address off the loopback interface: the link is
    unauthenticated, unencrypted and pickle-based (anyone who can reach the scheduler can run code); None
    otherwise (``tls://``, ``localhost``, ``127.0.0.0/8``, ``::1``)."""
    m = re.match(r"^tcp://(\[[^\]]*\]|[^:/]*)", address.strip())
    if m is None:
        return None
    host = m.group(1).strip("[]")
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name other than localhost: not known to be local
        loopback = False
    if loopback:
        return None
    return (f"--cluster {address}: a plain tcp:// link is unauthenticated, unencrypted and pickle-based (anyone who "
            "can reach the scheduler can run code); use tls:// or an SSH tunnel on untrusted networks (docs: Sweeps)")


def require_dask() -> None:
    """One clear line when Dask's distributed scheduler is not installed (an optional extra)."""
    try:
        importlib.import_module("distributed")
    except ImportError:
        raise InputError("--cluster needs Dask's distributed scheduler, an optional extra: "
                         "pip install 'tpopt[distributed]'") from None
