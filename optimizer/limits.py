"""One wall-clock budget for a whole run: table building, solve, verification and analysis.

``--time-limit T`` creates one :class:`Clock` when the command starts; every phase draws on what is
left of it instead of starting a fresh T of its own. The clock is *cooperative*: nothing is ever
raised asynchronously (no signal, no timer thread), so an import, a numpy call or a solver's own
bookkeeping is never cut in the middle. Phases stop at their own safe points, in one of two ways:

* by returning: loops (the solve-verify loop, the decomposition rounds, enumeration chunks, analysis
  questions, stage fronts) call :meth:`Clock.expired` between steps and return the best verified
  result so far; solver calls get :meth:`Clock.remaining` as their own limit (CP-SAT
  ``max_time_in_seconds``, HiGHS ``time_limit``, the Pyomo solvers' limits);
* by raising at a checkpoint: a phase with nothing to return yet (building the term tables, a point
  table, a solver model) runs inside :meth:`Clock.stoppable`; the code it runs calls
  :func:`checkpoint` between units of work (one table slice, one enumeration chunk, one pipeline
  shape; inside a pipeline simulation, every few waves through :func:`tpopt.models.pipeline.ticking`,
  since the models never import the optimizer), which raises :class:`TimeLimitReached` there -- a
  line of our own, between two complete steps -- once the clock has run out. Outside a stoppable phase
  :func:`checkpoint` does nothing.

What a limit guarantees: the run returns within the limit plus the longest unit of work between two
checkpoints (each bounded: :data:`tpopt.optimizer.enumerate.CHUNK` points, one table slice,
:data:`tpopt.models.pipeline.TICK_EVERY` waves of a simulation) plus the
solver's own overshoot past its limit; the status says "time limit" only when the clock said so
(:attr:`Clock.reached` is set by the clock itself, never inferred from a solver's "unknown" status).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import time
from collections.abc import Callable, Iterator
from typing import Protocol

from tpopt.errors import InputError
from tpopt.optimizer.progress import SILENT, Reporter, Tick

Progress = Reporter
"""A progress reporter (:mod:`tpopt.optimizer.progress`): called with each :class:`Tick` of a long phase."""

Now = Callable[[], float]
"""A monotonic time source in seconds (``time.monotonic``; tests inject a fake one)."""

MAX_TIME_LIMIT = 7 * 86400.0  # a week: longer limits are refused at the parsing edge


class TimeLimitReached(BaseException):
    """The run's time limit expired during ``phase`` (a phase with nothing to return yet).

    Raised only synchronously, at a :func:`checkpoint` or :meth:`Clock.check`. A BaseException, like
    KeyboardInterrupt, so that an ``except Exception`` between the checkpoint and the phase's owner
    (which catches it) cannot turn a time limit into a wrong answer."""

    def __init__(self, phase: str) -> None:
        super().__init__(f"time limit reached while {phase}")
        self.phase = phase


class WorkBudgetReached(TimeLimitReached):
    """A phase's deterministic work budget (:meth:`Clock.budget`) ran out during ``phase``: counted safe
    points, not seconds, so the same question stops at the same point on any machine and under any load."""

    def __init__(self, phase: str) -> None:
        BaseException.__init__(self, f"work budget reached while {phase}")
        self.phase = phase


CLOCK_STOP = "stopped by the clock: the answer may differ on another machine"
"""What a phase stopped by the wall clock (not by a counted :meth:`Clock.budget`) adds to its reason."""


class EncodingError(Exception):
    """A backend's encoding cannot represent this scenario exactly (the message says which quantity);
    the caller falls back to a formulation that can (:func:`tpopt.optimizer.core.solve`)."""


class Undecided(Exception):
    """A question the solver could not answer within the time limit (no proven answer)."""


class Clock:
    """A deadline on a monotonic clock, shared by every phase of one run.

    ``now`` is the time source (``time.monotonic``); it is read only by :meth:`elapsed`,
    :meth:`remaining` and :meth:`expired`, so a test can make the clock run out at its k-th reading."""

    def __init__(self, seconds: float | None, now: Now = time.monotonic, start: float | None = None) -> None:
        if seconds is not None and (not math.isfinite(seconds) or seconds <= 0):
            raise ValueError(f"time limit must be a positive finite number of seconds, got {seconds!r}")
        self.seconds = seconds
        self.now = now
        self.start = now() if start is None else start  # the command line passes process_start()
        self.end = math.inf if seconds is None else self.start + seconds
        self.reached = False  # set only when the clock ran out (at a check)
        self.phase = ""  # the phase in which it ran out
        self.progress: Progress = SILENT  # the CLI installs its terminal line (tpopt.cli.progress_line)
        self.work = 0  # safe points read so far (each call of expired): a count of work, not of seconds
        self.work_end = math.inf  # the enclosing budget() ends at this count (inf: no budget)
        self.worked_out = False  # the enclosing budget() ran out (its phase stopped at a counted point)

    def elapsed(self) -> float:
        return self.now() - self.start

    def remaining(self, floor: float = 0.0) -> float:
        """Seconds left (at least ``floor``; never infinite for a solver: capped at a week)."""
        left = self.end - self.now()
        return max(floor, min(left, MAX_TIME_LIMIT))

    def expired(self, phase: str = "") -> bool:
        """True once the deadline has passed (records the phase where it was first seen)."""
        if self.reached:  # once run out, it stays run out (a fake or adjusted clock cannot undo it)
            return True
        self.work += 1
        if self.work > self.work_end:  # the budget first: where both run out, the counted stop is the answer
            self.worked_out = True
            return True
        if self.now() >= self.end:
            self.reached, self.phase = True, phase
            return True
        return False

    @property
    def budget_stopped(self) -> bool:
        """The enclosing :meth:`budget` ran out and the wall clock did not: the stop is the same on every
        machine (else the clock stopped the phase, and :data:`CLOCK_STOP` says what that means)."""
        return self.worked_out and not self.reached

    def check(self, phase: str) -> None:
        """Raise :class:`TimeLimitReached` if the deadline has passed (:class:`WorkBudgetReached` if the
        enclosing :meth:`budget` ran out)."""
        if self.expired(phase):
            raise TimeLimitReached(phase) if self.reached else WorkBudgetReached(phase)

    @contextlib.contextmanager
    def budget(self, units: int) -> Iterator[None]:
        """Run a phase on a deterministic work budget as well as the clock: ``units`` more safe points
        (calls of :meth:`expired`, whoever reads them: a table slice, an enumeration chunk, 64 waves of a
        pipeline, a solve-verify round, an analysis question). Inside it, :meth:`expired` turns true once
        the count passes the budget, without setting :attr:`reached` (no time limit was reached), and
        :attr:`worked_out` says so; the phase then stops at the same point on every machine and under every
        load. The wall clock stays the last guard. A nested budget ends no later than its enclosing one."""
        end, out = self.work_end, self.worked_out
        self.work_end, self.worked_out = min(end, self.work + units), False
        try:
            yield
        finally:
            self.work_end, self.worked_out = end, out

    def report(self, phase: str, done: int, total: int | None = None, *, best: float | None = None,
               bound: float | None = None, objective: str = "cost") -> None:
        """Progress of a long phase: ``done`` of ``total`` units, the best objective found so far and the least
        one left to examine (:class:`tpopt.optimizer.progress.Tick`; shown by the CLI when it installed one)."""
        self.progress(Tick(phase, done, total, best, bound, objective))

    @contextlib.contextmanager
    def stoppable(self, phase: str, *, keep_finished: bool = False) -> Iterator[None]:
        """Run a phase with nothing to return until it completes: every :func:`checkpoint` reached
        inside it (in this thread) raises :class:`TimeLimitReached` once the clock has run out; so do
        the checks on entry and on exit. A nested stoppable phase names its own phase.
        ``keep_finished``: no check on exit, for a phase whose answer, once complete, is exact however
        late it comes (one relaxation of ``explain``): it is kept rather than thrown away."""
        self.check(phase)
        self.report(phase, 0)
        from tpopt.models import pipeline  # lazy: `tpopt --help` and the parsing edge start without numpy

        token = _ACTIVE.set((self, phase))
        try:
            with pipeline.ticking(checkpoint):  # a long pipeline simulation stops between two of its waves
                yield
        finally:
            _ACTIVE.reset(token)
        if not keep_finished:
            self.check(phase)


_ACTIVE: contextvars.ContextVar[tuple[Clock, str] | None] = contextvars.ContextVar("tpopt_clock", default=None)
"""The clock and phase of the innermost :meth:`Clock.stoppable` phase of this thread (None: none)."""


def checkpoint() -> None:
    """A safe point of a long unit of work (between two table slices, enumeration chunks, pipeline
    shapes): raises :class:`TimeLimitReached` when the enclosing :meth:`Clock.stoppable` phase's clock
    has run out; does nothing outside one (a table built lazily by a loop that polls the clock itself)."""
    active = _ACTIVE.get()
    if active is not None:
        active[0].check(active[1])


def active_clock() -> Clock | None:
    """The clock of the enclosing stoppable phase, if any."""
    active = _ACTIVE.get()
    return None if active is None else active[0]


_COMMAND_START: list[float] = []  # when the command line's entry point started (empty: not run as a command)


@contextlib.contextmanager
def command_started() -> Iterator[None]:
    """The command line's entry point (:func:`tpopt.cli.main.main`) runs inside: a command's limit counts
    from its entry, loading its subcommand, the scenario and the solver libraries included. On the way out
    the mark is cleared, so a later command in the same process (a test) starts its own."""
    _COMMAND_START[:] = [time.monotonic()]
    try:
        yield
    finally:
        _COMMAND_START.clear()


def command_start() -> float | None:
    """When the running command started (:func:`command_started`), None outside a command (the API, a
    test invoking the click group): a clock then starts when it is made."""
    return _COMMAND_START[0] if _COMMAND_START else None


class Timed(Protocol):
    """What :func:`clock_of` reads of a request (:class:`tpopt.optimizer.result.Request`): its shared clock, set
    here when absent, and the time limit a new clock starts with (seconds; None or inf: no limit)."""

    clock: Clock | None

    @property
    def time_limit(self) -> float | None: ...


def clock_of(req: Timed) -> Clock:
    """The request's shared clock; a request without one gets its own (``req.time_limit`` from now)."""
    if req.clock is None:
        t = req.time_limit
        if t is not None and not (t > 0):  # nan or not positive: bad input wherever it came from

            raise InputError(f"--time-limit: {t!r} must be a positive number of seconds")
        req.clock = Clock(None if t is None or t == math.inf else t)
    return req.clock

