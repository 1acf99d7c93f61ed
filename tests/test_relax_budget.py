"""The relaxations' work budget is counted, not timed (the project's determinism standard: same inputs, same
output bytes): which inputs an infeasible request's explanation answers must not depend on the machine's speed
or load. The budget (:data:`tpopt.optimizer.explain.relax.RELAX_WORK`) counts the clock's safe points
(:meth:`tpopt.optimizer.limits.Clock.budget`); the wall clock stays the last guard, and an input it stops says
that the answer may differ on another machine.

Each run reads a fake time source: one that stands still, one that races ahead (a machine 1,000 times slower, or
as loaded), both short of the limit. The same budget must then stop at the same input with the same answers.

Under a confidence the threshold searches (NIC and storage bandwidth, efficiency) compare the fastest plan's
finish quantile with the deadline, as the request's own solve does: each answer is confirmed by that solve.
"""

import itertools
import json

import pytest
from click.testing import CliRunner

from tests.conftest import ROOT
from tests.test_clock import Readings
from tpopt.catalogs.scenario import load_scenario
from tpopt.cli.main import cli
from tpopt.optimizer.explain import explain_request, relax
from tpopt.optimizer.explain.inputs import with_max_cards
from tpopt.optimizer.limits import Clock, TimeLimitReached, WorkBudgetReached
from tpopt.optimizer.result import Request

LIMIT = 1e9  # seconds: far beyond what the racing clock reaches, so only the budget can stop a relaxation


def _answers(out):
    """What each relaxation answers (its wall time and solve count aside)."""
    return [(r["parameter"], r["helps"], r["required"], r.get("plan"), r.get("note")) for r in out["relaxations"]]


def _racing(step: float):
    """A time source that advances ``step`` seconds at every reading."""
    ticks = itertools.count()
    return lambda: step * next(ticks)


def test_a_budget_counts_safe_points_not_seconds():
    c = Clock(LIMIT, now=_racing(1e6))  # each reading a million seconds on: the budget still counts readings
    with c.budget(3):
        assert [c.expired("a") for _ in range(4)] == [False, False, False, True]
        assert c.worked_out and not c.reached  # no time limit was reached
        with pytest.raises(WorkBudgetReached):
            c.check("a")
    assert not c.expired("b") and not c.worked_out  # the budget ends with its phase
    assert issubclass(WorkBudgetReached, TimeLimitReached)  # every phase that stops at a limit stops at it too


@pytest.fixture(scope="module")
def no_plan():
    """The design case capped at 16 cards (no plan: the deadline needs 48)."""
    return with_max_cards(load_scenario(ROOT / "examples" / "design-case.toml"), 16)


def test_the_budget_stops_at_the_same_input_however_fast_the_clock_runs(no_plan, monkeypatch):
    full = explain_request(no_plan, "cpsat", Request(time_limit=LIMIT, clock=Clock(LIMIT, now=Readings())))
    answered = [r for r in full["relaxations"] if r["helps"] is not None]
    assert full["status"] == "infeasible" and len(answered) >= 3  # the budget below has answers to cut
    monkeypatch.setattr(relax, "RELAX_WORK", 40)  # a few inputs' worth of work
    runs = []
    for now in (Readings(), _racing(1.0), _racing(1000.0)):  # standing still; a slow and a very slow machine
        clock = Clock(LIMIT, now=now)
        out = explain_request(no_plan, "cpsat", Request(time_limit=LIMIT, clock=clock))
        assert out["status"] == "infeasible" and not clock.reached and not out["solver"]["time_limit_reached"]
        runs.append(_answers(out))
    assert runs[0] == runs[1] == runs[2]  # counted: the same answers whatever the time source says
    # the inputs are listed in the fixed order but asked in asking_order (the conflict's inputs first)
    order = relax.asking_order([a[0] for a in runs[0]], out["conflict"])
    asked = sorted(runs[0], key=lambda a: order.index(a[0]))
    full_asked = sorted(_answers(full), key=lambda a: order.index(a[0]) if a[0] in order else len(order))
    notes = [a[4] or "" for a in asked]
    cut = [i for i, n in enumerate(notes) if "work budget reached (40 steps)" in n]
    assert cut and not any("time limit" in n for n in notes)
    assert all("before it was asked" in notes[i] for i in cut[1:])  # after the stop, nothing else is asked
    assert asked[:cut[0]] == full_asked[:cut[0]]  # what was answered is the unlimited answer


def test_the_wall_clock_guard_says_the_answer_may_differ(no_plan):
    clock = Clock(600.0, now=Readings(60))  # the clock runs out at its 60th reading, inside the relaxations
    out = explain_request(no_plan, "cpsat", Request(time_limit=600.0, clock=clock))
    assert out["status"] == "infeasible" and clock.reached
    undecided = [r["note"] for r in out["relaxations"] if r["helps"] is None]
    assert undecided and all("time limit reached (600 s)" in n and "may differ on another machine" in n
                             for n in undecided)


# ---------------------------------------------------------------------------------------------
# under a confidence, the threshold searches (NIC and storage bandwidth, efficiency) read the chance form


def _solve(*extra):
    args = ["solve", "--scenario", str(ROOT / "examples" / "design-case.toml"), "--confidence", "95%",
            "--step-sigma", "0.15", *extra]
    return CliRunner().invoke(cli, args)


def test_thresholds_under_a_confidence_are_confirmed_by_the_requests_own_solve():
    res = _solve("--json")
    assert res.exit_code == 3, res.output  # no plan at 95 %: the relaxations are asked
    got = {r["parameter"]: r for r in json.loads(res.output)["relaxations"]}
    for name in ("nic_bandwidth", "write_bandwidth", "efficiency"):
        r = got[name]
        assert r["helps"] is False or r["apply"], r  # an answer is a change the re-solve confirmed, or "cannot help"
    # the median finish crosses the 30-day deadline near 47 % efficiency (the answer before the fix); the 95 %
    # quantile needs more: the request's own solve rules 47 % out and admits the answer given
    assert _solve("--efficiency", "47%").exit_code == 3
    assert got["efficiency"]["helps"] and _solve("--efficiency", got["efficiency"]["apply"]["hardware.efficiency"]
                                                 ).exit_code == 0
