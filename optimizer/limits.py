"""One wall-clock budget for a whole run: table building, solve, verification and analysis.

``--time-limit T`` creates one :class:`Clock` when the command starts; every phase draws on what is
left of it instead of starting a fresh T of its own. Phases stop in one of two ways:

* cooperatively: loops (the solve-verify loop, the decomposition, enumeration chunks, analysis
  questions) call :meth:`Clock.expired` between steps and return the best verified result so far;
  solver calls get :meth:`Clock.remaining` as their own limit;
* by interruption: a phase of pure Python/numpy work that has no loop of ours to poll (building the
  term tables) runs inside :meth:`Clock.interruptible`, which arms a timer (``SIGALRM``, main thread
  only) and turns its expiry into :class:`TimeLimitReached`.

A status says "time limit" only when the clock said so: :attr:`Clock.reached` is set by the clock
itself (an expired check or the timer), never inferred from a solver's "unknown" status.
"""

from __future__ import annotations

import contextlib
import gc
import math
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import TYPE_CHECKING

from tpopt.errors import InputError

if TYPE_CHECKING:
    from tpopt.optimizer.result import Request

Progress = Callable[[str, int, "int | None"], None]
"""A progress callback: (phase, done, total or None)."""

MAX_TIME_LIMIT = 7 * 86400.0  # a week: longer limits are refused at the parsing edge


class TimeLimitReached(BaseException):
    """The run's time limit expired during ``phase`` (a phase with nothing to return yet).

    A BaseException, like KeyboardInterrupt: raised from a timer at an arbitrary point, it must not be
    swallowed by an ``except Exception`` on the way to the phase's owner, which catches it."""

    def __init__(self, phase: str) -> None:
        super().__init__(f"time limit reached while {phase}")
        self.phase = phase


class EncodingError(Exception):
    """A backend's encoding cannot represent this scenario exactly (the message says which quantity);
    the caller falls back to a formulation that can (:func:`tpopt.optimizer.core.solve`)."""


class Undecided(Exception):
    """A question the solver could not answer within the time limit (no proven answer)."""


class Clock:
    """A deadline on the monotonic clock, shared by every phase of one run."""

    def __init__(self, seconds: float | None) -> None:
        if seconds is not None and (not math.isfinite(seconds) or seconds <= 0):
            raise ValueError(f"time limit must be a positive finite number of seconds, got {seconds!r}")
        self.seconds = seconds
        self.start = time.monotonic()
        self.end = math.inf if seconds is None else self.start + seconds
        self.reached = False  # set only when the clock ran out (checked or by the timer)
        self.phase = ""  # the phase in which it ran out
        self.progress: Progress | None = None  # shown by the CLI when it installs one
        self._armed = False  # an interruptible phase holds the timer

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def remaining(self, floor: float = 0.0) -> float:
        """Seconds left (at least ``floor``; never infinite for a solver: capped at a week)."""
        left = self.end - time.monotonic()
        return max(floor, min(left, MAX_TIME_LIMIT))

    def expired(self, phase: str = "") -> bool:
        """True once the deadline has passed (records the phase where it was first seen)."""
        if time.monotonic() >= self.end:
            if not self.reached:
                self.reached, self.phase = True, phase
            return True
        return False

    def check(self, phase: str) -> None:
        """Raise :class:`TimeLimitReached` if the deadline has passed."""
        if self.expired(phase):
            raise TimeLimitReached(phase)

    def report(self, phase: str, done: int, total: int | None = None) -> None:
        """Progress of a long phase (shown by the CLI when it installed a callback)."""
        if self.progress is not None:
            self.progress(phase, done, total)

    @contextlib.contextmanager
    def interruptible(self, phase: str) -> Iterator[None]:
        """Run a phase that cannot poll the clock; raise :class:`TimeLimitReached` when it expires.

        Uses ``SIGALRM`` (POSIX, main thread); elsewhere it only checks before and after the phase.
        """
        self.check(phase)
        self.report(phase, 0)
        usable = (math.isfinite(self.end) and hasattr(signal, "setitimer")
                  and threading.current_thread() is threading.main_thread())
        if not usable or self._armed:  # nested: the outer phase's timer already covers it
            yield
            self.check(phase)
            return

        def on_alarm(signum: int, frame: FrameType | None) -> None:
            self.reached, self.phase = True, phase
            if _in_gc_callback(frame):  # the collector would swallow the exception: try again just after
                signal.setitimer(signal.ITIMER_REAL, RETRY_S)
                return
            raise TimeLimitReached(phase)

        previous = signal.signal(signal.SIGALRM, on_alarm)
        self._armed = True
        try:
            signal.setitimer(signal.ITIMER_REAL, max(1e-3, self.end - time.monotonic()))
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
            self._armed = False
        self.check(phase)


RETRY_S = 1e-3
"""Delay before the timer fires again when it expired inside a garbage-collector callback."""


def _in_gc_callback(frame: FrameType | None) -> bool:
    """Whether ``frame`` runs inside a callback of :data:`gc.callbacks` (a profiler's, a test framework's):
    an exception raised there is reported as unraisable and dropped, so the phase would run on."""

    codes = {getattr(cb, "__code__", None) for cb in gc.callbacks} - {None}
    while codes and frame is not None:
        if frame.f_code in codes:
            return True
        frame = frame.f_back
    return False


def clock_of(req: Request) -> Clock:
    """The request's shared clock; a request without one gets its own (``req.time_limit`` from now)."""
    if req.clock is None:
        t = req.time_limit
        if t is not None and not (t > 0):  # nan or not positive: bad input wherever it came from

            raise InputError(f"--time-limit: {t!r} must be a positive number of seconds")
        req.clock = Clock(None if t is None or t == math.inf else t)
    return req.clock


def stderr_progress(every: float = 2.0) -> Progress:
    """A progress callback printing one line per phase to stderr at most every ``every`` seconds,
    only when stderr is a terminal (so files and tests stay byte-identical)."""
    started = time.monotonic()
    last = {"t": started}

    def show(phase: str, done: int, total: int | None) -> None:
        if not sys.stderr.isatty():
            return
        now = time.monotonic()
        if now - last["t"] < every:
            return
        last["t"] = now
        tail = f"{done:,}/{total:,}" if total else (f"{done:,}" if done else "...")
        print(f"tpopt: {phase}: {tail} ({now - started:,.0f} s)", file=sys.stderr, flush=True)

    return show
