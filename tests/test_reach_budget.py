"""The reachable-confidence search's work budget is counted, not timed (the project's determinism standard: same
inputs, same output bytes): whether an infeasible confidence's highest reachable level is decided must not depend
on the machine's speed or load. The budget (:data:`tpopt.optimizer.confidence.REACH_WORK`) counts the clock's safe
points (:meth:`tpopt.optimizer.limits.Clock.budget`); the wall clock stays the last guard, and a search it stops
says that the answer may differ on another machine.

Each run reads a fake time source: one that stands still, one that races ahead (a machine 1,000 times slower, or
as loaded), both short of the limit. The same budget must then give the same answer: the unlimited level when the
budget suffices, "not decided within a work budget of N steps" when it does not.
"""

import json

import pytest
from click.testing import CliRunner

from tests.conftest import ROOT
from tests.test_clock import Readings
from tests.test_relax_budget import _racing
from tpopt.catalogs.scenario import load_scenario
from tpopt.cli.main import cli
from tpopt.optimizer import confidence as C
from tpopt.optimizer.limits import Clock
from tpopt.optimizer.result import Request

LIMIT = 1e9  # seconds: far beyond what the racing clock reaches, so only the budget can stop the search
CLOCKS = (Readings, lambda: _racing(1.0), lambda: _racing(1000.0))  # standing still; a slow and a very slow machine


@pytest.fixture(scope="module")
def short():
    """The llama3-8b confidence example in 4 days: 99.9 % out of reach, the highest reachable a bisection."""
    return load_scenario(ROOT / "examples" / "llama3-8b-confidence.toml", {"schedule.deadline": "4d"})


def _reach(sc, now):
    clock = Clock(LIMIT, now=now)
    got = C.reach(sc, "enumerate", Request(time_limit=LIMIT, clock=clock))
    assert not clock.reached  # the wall clock never ran out: what stopped the search (if anything) was counted
    return got, clock.work


def test_the_budget_decides_the_same_level_however_fast_the_clock_runs(short):
    runs = [_reach(short, now()) for now in CLOCKS]
    level, why = runs[0][0]
    assert why is None and 0.9 < level < 0.999  # decided: a bisection, not an end point
    assert runs[0] == runs[1] == runs[2]  # the same level and the same count of safe points on every clock
    assert runs[0][1] < C.REACH_WORK  # the budget left room to spare


def test_a_budget_too_small_stops_at_the_same_point_and_says_so(short, monkeypatch):
    used = _reach(short, Readings())[1]
    monkeypatch.setattr(C, "REACH_WORK", used // 2)  # half the work the search needs
    runs = [_reach(short, now()) for now in CLOCKS]
    assert runs[0] == runs[1] == runs[2]  # counted: stopped at the same safe point whatever the time source says
    (level, why), work = runs[0]
    assert level is None and why == f"not decided within a work budget of {used // 2:,} steps"
    assert work == used // 2 + 1  # the read past the budget is the one that stopped it


def test_the_wall_clock_guard_says_the_answer_may_differ(short):
    clock = Clock(600.0, now=Readings(3))  # the clock runs out at its 3rd reading, inside the bisection
    level, why = C.reach(short, "enumerate", Request(time_limit=600.0, clock=clock))
    assert clock.reached and level is None
    assert why == ("not decided within the time limit (600 s); stopped by the clock: the answer may differ on another "
                   "machine")


def test_solve_states_the_budget_stop(monkeypatch):
    monkeypatch.setattr(C, "REACH_WORK", 2)
    args = ["solve", "--scenario", str(ROOT / "examples" / "design-case.toml"), "--confidence", "99.9%"]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 3, res.output  # 99.9 % is out of reach (99.7 % with the whole budget)
    text = " ".join(res.output.split())  # the terminal's line wrapping aside
    assert text.endswith("Confidence: 99.9 % is not reachable; the highest reachable was not decided within a work "
                         "budget of 2 steps.")
    d = json.loads(CliRunner().invoke(cli, [*args, "--json"]).output)
    assert d["reachable_confidence"] is None
    assert d["reachable_undecided"] == "not decided within a work budget of 2 steps"
