"""A time limit stops the building of a solver model between two rows (issue 36, "limits kept on every path").

benchmarks/cross_check.py --questions found Pyomo-HiGHS answers of batch-choice scenarios 0.5 to 1 s past limits
of 60 to 700 ms: the MILP rows and the Pyomo model were built to the end inside the "building the solver model"
phase, whose clock was read only on entry and exit. The clock here runs out once the phase has begun (a fake
time source), with every term table already built, and the phase is not checked on exit (keep_finished): the
build itself must stop, at its first row, not complete.
"""

import pytest

from tpopt.optimizer.backends.pyomo_model import MilpFormulation, build_pyomo
from tpopt.optimizer.limits import Clock, TimeLimitReached
from tpopt.optimizer.result import Request
from tpopt.optimizer.space import Space


def test_a_milp_build_stops_once_the_clock_has_run_out(design):
    space = Space.from_scenario(design)
    whole = MilpFormulation(space, Request())  # the term tables, built once (cached on the space)
    assert len(whole.lp.r_lo) > 10
    now = [0.0]
    clock = Clock(1.0, now=lambda: now[0])
    with pytest.raises(TimeLimitReached), clock.stoppable("building the solver model", keep_finished=True):
        now[0] = 5.0  # the limit passes during the phase
        MilpFormulation(space, Request())
    assert clock.reached and clock.phase == "building the solver model"


def test_a_pyomo_build_stops_once_the_clock_has_run_out(design):
    pytest.importorskip("pyomo")
    space = Space.from_scenario(design)
    f = MilpFormulation(space, Request())
    now = [0.0]
    clock = Clock(1.0, now=lambda: now[0])
    with pytest.raises(TimeLimitReached), clock.stoppable("building the solver model", keep_finished=True):
        now[0] = 5.0
        build_pyomo(f)
    assert clock.reached
