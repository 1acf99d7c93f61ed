"""A sweep held after its n-th saved row, for the tests that kill a sweep mid-run.

Waiting for rows and then sending a signal is a race on a loaded machine: the sweep may save every row (or
end) between two looks at its file, and the kill then finds nothing left to interrupt. Here the sweep runs
in its own process as ``tpopt sweep`` does, except that the driver stops once ``n`` rows are saved (each
row written and fsynced as usual, its workers still running): the test waits for those rows (an observable
condition), and the kill always lands mid-sweep, however slow or fast the machine.
"""

from __future__ import annotations

import sys

HOLD = """
import os, sys, time
from tpopt.optimizer.sweep import store
n, release, saved, append = int(sys.argv[1]), sys.argv[2], [0], store.SweepStore.append
def held(self, rows):
    append(self, rows)
    saved[0] += len(rows)
    while saved[0] >= n and not (release and os.path.exists(release)):  # until killed, or released
        time.sleep(0.05)
store.SweepStore.append = held
sys.argv = ["tpopt"] + sys.argv[3:]
from tpopt.cli.main import main
main()
"""


def held_after(rows: int, cli_args: list[str], release: str = "") -> list[str]:
    """The command line of ``tpopt <cli_args>`` whose driver holds once ``rows`` rows are saved, until it is
    killed or (``release``) until a file of that name exists."""
    return [sys.executable, "-c", HOLD, str(rows), release, *cli_args]
