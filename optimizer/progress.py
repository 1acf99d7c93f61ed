"""Progress of long work: what the solver tells a watcher while it searches.

The optimizer reports through the run's :class:`tpopt.optimizer.limits.Clock` (``clock.report(...)``, one call
per iteration of a long loop: layout groups, decomposition rounds, offers, batches); the clock forwards each
report to its :class:`Reporter`, :data:`SILENT` by default. The command line installs a terminal renderer
(:mod:`tpopt.cli.progress_line`); nothing here prints, so the optimizer never depends on a terminal and its
answers never depend on whether anyone watches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Tick:
    """One report of a long phase.

    ``done`` of ``total`` units (groups, rounds, offers, batches; total None when unknown); ``best``: the
    objective of the best plan found so far and ``bound``: the least objective any plan not yet examined can
    reach (both in the solver's objective units: currency for ``objective == "cost"``, seconds of finish for
    ``"time"``; None when the loop has none)."""

    phase: str
    done: int = 0
    total: int | None = None
    best: float | None = None
    bound: float | None = None
    objective: str = "cost"


class Reporter(Protocol):
    """What watches the progress: called with every :class:`Tick` (it decides how often to show one)."""

    def __call__(self, tick: Tick) -> None: ...


def silent(tick: Tick) -> None:
    """The default reporter: shows nothing."""


SILENT: Reporter = silent


__all__ = ["Tick", "Reporter", "SILENT", "silent"]
