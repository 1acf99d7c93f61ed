"""The live progress line on stderr: what a long solve, explain or sweep is doing, redrawn in place.

    tpopt solve: solving the offers 3/10 > solving the layout groups 45/120 | best cost 23,518 | bound 22,004 | 4 s

Shown only once the work has run :data:`DELAY_S` (a quick answer shows nothing), at most every
:data:`EVERY_S`, and only when stderr is a terminal, without ``--json``, ``--quiet`` or ``TPOPT_QUIET`` set: stdout
never changes and files, pipes and tests see no byte of it. The line is erased before the answer is printed.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

import click

from tpopt.optimizer.limits import Clock
from tpopt.optimizer.progress import Tick

DELAY_S = 1.0  # no line for work that ends sooner
DELAY_ENV = "TPOPT_PROGRESS_DELAY"  # seconds before the line shows (default DELAY_S; scripts and tests set 0)
EVERY_S = 0.25  # redraws at most this often
QUIET_ENV = "TPOPT_QUIET"  # set (not empty, not 0): no progress line
DAY_S = 86400.0


def wanted(stream: TextIO, quiet: bool = False) -> bool:
    """Whether to draw: a terminal, no ``--json``/``--quiet`` (``quiet``) and no ``TPOPT_QUIET``."""
    env = os.environ.get(QUIET_ENV, "").strip()
    return not quiet and env in ("", "0") and stream.isatty()


def delay_s() -> float:
    """The wait before the line shows: :data:`DELAY_ENV` when set to a number >= 0, else :data:`DELAY_S`."""
    try:
        value = float(os.environ.get(DELAY_ENV, ""))
    except ValueError:
        return DELAY_S
    return value if value >= 0.0 else DELAY_S


def objective_text(name: str, value: float, objective: str) -> str:
    """``best cost 23,518`` (currency or card-hours, as the plan's) or ``best finish 12.3 d`` (seconds in)."""
    if objective == "cost":
        return f"{name} cost {value:,.0f}"
    return f"{name} finish {value / DAY_S:,.2f} d"


class LiveLine:
    """A reporter (:class:`tpopt.optimizer.progress.Reporter`) drawing one line in place on ``stream``.

    The counted phases form a stack: a report of a phase drops the phases reported after it (inner loops it has
    finished) and replaces its own figures, so an offer's layout-group count shows beside the offer count; a step
    without counts (a table being built) shows until the next report."""

    def __init__(self, title: str, stream: TextIO, enabled: bool, now: Callable[[], float] = time.monotonic,
                 delay: float = DELAY_S, every: float = EVERY_S, width: int | None = None) -> None:
        self.title, self.stream, self.enabled, self.width = title, stream, enabled, width
        self.now, self.delay, self.every = now, delay, every
        self.start = now()
        self.last = -float("inf")
        self.stack: list[Tick] = []
        self.drawn = False

    def __call__(self, tick: Tick) -> None:
        if not self.enabled:
            return
        at = next((i for i, t in enumerate(self.stack) if t.phase == tick.phase), len(self.stack))
        self.stack[at:] = [tick]
        self.stack[:-1] = [t for t in self.stack[:-1] if t.done or t.total]  # finished steps without counts
        t = self.now()
        if t - self.start >= self.delay and t - self.last >= self.every:
            self.last = t
            self.draw(t)

    def tell(self, text: str) -> None:
        """A step named in words (explain's relaxations): a phase without counts."""
        self(Tick(text))

    def text(self, t: float) -> str:
        """The line: the phases with their counts, the best and bound of the innermost that has them, the time."""
        parts = [f"{x.phase} {x.done:,}/{x.total:,}" if x.total else (f"{x.phase} {x.done:,}" if x.done else x.phase)
                 for x in self.stack]
        line = f"{self.title}: {' > '.join(parts)}"
        figures = next((x for x in reversed(self.stack) if x.best is not None or x.bound is not None), None)
        if figures is not None:
            if figures.best is not None:
                line += " | " + objective_text("best", figures.best, figures.objective)
            if figures.bound is not None and figures.bound < float("inf"):
                line += " | " + objective_text("bound", figures.bound, figures.objective)
        return f"{line} | {t - self.start:,.0f} s"

    def columns(self) -> int:
        """The line's room: ``width`` when given, else the terminal's columns less one (no wrap)."""
        if self.width is not None:
            return self.width
        try:
            columns = os.get_terminal_size(self.stream.fileno()).columns
        except (OSError, ValueError, AttributeError):  # not a real terminal (a test's stream)
            columns = 0
        if not columns:
            import shutil  # lazy: start-up time (shutil loads bz2 and lzma; a real terminal answered above)

            columns = shutil.get_terminal_size((100, 24)).columns
        return max(20, columns - 1)

    def draw(self, t: float) -> None:
        self.stream.write("\r\x1b[K" + self.text(t)[:self.columns()])
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        """Erase the line (before the answer is printed)."""
        if self.drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.drawn = False
        self.enabled = False


quiet_option = click.option("--quiet", "-q", is_flag=True,
                            help=f"No progress line on stderr (also: {QUIET_ENV}=1; off anyway with --json or when "
                                 "stderr is not a terminal).")


@contextmanager
def live_progress(title: str, clock: Clock | None = None, quiet: bool = False,
                  stream: TextIO | None = None) -> Iterator[LiveLine]:
    """A :class:`LiveLine` installed as ``clock``'s reporter while the block runs, erased on the way out."""
    out = stream or sys.stderr
    line = LiveLine(title, out, wanted(out, quiet), delay=delay_s())
    if clock is not None:
        clock.progress = line
    try:
        yield line
    finally:
        line.close()


__all__ = [
    "DELAY_ENV", "DELAY_S", "delay_s", "EVERY_S", "QUIET_ENV", "LiveLine",
    "live_progress", "objective_text", "quiet_option", "wanted",
]
