"""`tpopt rl --time-limit`: one clock over the whole RL solve (search, learner solves, analysis), with the
status semantics of `tpopt solve`: a plan found at the limit is `feasible`, says so and exits 0; nothing
found is `unknown`, exit 4. The clocks here are expired by hand, so the tests do not depend on speed."""

from __future__ import annotations

import inspect
import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from tpopt.catalogs.rl import load_rl_scenario
from tpopt.cli.common import EXIT_UNKNOWN
from tpopt.cli.main import cli
from tpopt.optimizer import limits
from tpopt.optimizer import rl as O
from tpopt.optimizer.result import Request, Status

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "rl-grpo-qwen3-8b.toml"


def run(*args):
    kw = {"mix_stderr": False} if "mix_stderr" in inspect.signature(CliRunner.__init__).parameters else {}
    r = CliRunner(**kw).invoke(cli, ["rl", "--scenario", str(EXAMPLE), *args])
    return r.exit_code, r.stdout, r.stderr


class ExpiredClock(limits.Clock):
    """A clock whose limit has already passed when the command creates it."""

    def __init__(self, seconds, **kw):
        super().__init__(seconds, **kw)
        self.end = self.start


def cut_after(monkeypatch, n: int):
    """The n-th learner solve 'hits the limit': it returns its plan, and the clock says the limit was
    reached (as core.solve marks it when a solver stops at the limit)."""
    original = O.RLProblem.learner
    calls = []

    def learner(self, key):
        out = original(self, key)
        calls.append(key)
        if len(calls) == n:
            clock = self.clock()
            clock.reached, clock.phase = True, "solving the learner plans"
            clock.end = min(clock.end, time.monotonic())
        return out

    monkeypatch.setattr(O.RLProblem, "learner", learner)
    return calls


@pytest.fixture(scope="module")
def example_optimum():
    """The example's optimum from the brute-force oracle (every RL decision with every learner plan)."""
    return O.brute_force(O.RLProblem(load_rl_scenario(EXAMPLE)))


def test_expired_clock_is_unknown_exit_4(monkeypatch):
    monkeypatch.setattr(limits, "Clock", ExpiredClock)
    code, out, err = run("--time-limit", "5s")
    assert code == EXIT_UNKNOWN == 4, (out, err)
    flat = " ".join(out.split())  # the text is wrapped to the terminal's width (issue 25)
    assert "Status: unknown" in flat and "no plan found and no proof that none exists" in flat
    assert "Conflict" not in out and "infeasible" not in out.split("Assumptions")[0]
    code, out, _ = run("--time-limit", "5s", "--json")
    d = json.loads(out)
    assert code == 4 and d["status"] == "unknown" and d["solver"]["time_limit_reached"] is True
    assert "plan" not in d and d["conflict"] == []


@pytest.fixture(scope="module")
def first_plan_at():
    """How many learner keys the search must solve before it holds a verified plan (the search ranks
    keys by bound: the example's first keys, shared cards, admit no plan)."""
    mp = pytest.MonkeyPatch()
    try:
        for n in range(1, 40):
            with mp.context() as m:
                cut_after(m, n)
                res = O.solve(O.RLProblem(load_rl_scenario(EXAMPLE)))
            assert res.stats["learner_keys_solved"] == n and res.stats["time_limit_reached"]
            if res.best is not None:
                assert res.status == Status.FEASIBLE
                return n
            assert res.status == Status.UNKNOWN  # cut before any plan: never claimed infeasible
    finally:
        mp.undo()
    raise AssertionError("no plan within 40 learner keys")


def test_plan_found_at_the_limit_is_feasible_exit_0(monkeypatch, example_optimum, first_plan_at):
    calls = cut_after(monkeypatch, first_plan_at)
    code, out, err = run("--json")
    assert code == 0, (out, err)
    d = json.loads(out)
    assert d["status"] == "feasible" and d["solver"]["time_limit_reached"] is True
    assert d["solver"]["learner_keys_solved"] == first_plan_at == len(calls)
    assert d["analysis"] == "time limit reached" and d["binding"] is None and d["alternatives"] == []
    # a verified plan, not better than the proven optimum
    assert d["finish"]["finish_days"] <= d["finish"]["deadline_days"]
    assert d["finish"]["cost"] >= example_optimum.metrics["cost"] * (1 - 1e-9)
    calls.clear()
    code, text, _ = run()
    assert code == 0 and "Status: feasible" in text
    assert "Time limit reached (60 s) while solving the learner plans: best plan found, not proven optimal" in text
    assert "Plan: h100-sxm x" in text and "Binding constraints" not in text


def test_api_limit_is_one_clock_over_the_solve(monkeypatch, first_plan_at):
    """Through the API: the request's clock bounds the whole solve; without one each solve gets
    req.time_limit of its own (and leaves the problem's request untouched)."""
    pb = O.RLProblem(load_rl_scenario(EXAMPLE), req=Request(time_limit=30.0, clock=ExpiredClock(30.0)))
    res = O.solve(pb)
    assert res.status == Status.UNKNOWN and res.best is None and res.stats["learner_keys_solved"] == 0
    cut_after(monkeypatch, first_plan_at)
    free = O.RLProblem(load_rl_scenario(EXAMPLE), req=Request(time_limit=30.0))
    res = O.solve(free)
    assert res.status == Status.FEASIBLE and res.best is not None and free.req.clock is None


def test_learner_solver_path_draws_on_the_same_clock(monkeypatch):
    """Learner spaces too large to tabulate go to the solver: each learner solve gets what is left of
    the one clock (not a fresh --time-limit), and an answerless learner solve ends the search."""
    from tpopt.optimizer import core

    seen = []

    def fake_solve(sc, backend, req, space=None):
        seen.append((req.clock, req.time_limit))
        req.clock.reached = True
        from tpopt.optimizer.result import SolveResult

        return SolveResult(status=Status.UNKNOWN, objective=req.objective)

    monkeypatch.setattr(core, "solve", fake_solve)
    clock = limits.Clock(30.0)
    pb = O.RLProblem(load_rl_scenario(EXAMPLE), "cpsat", Request(time_limit=30.0, clock=clock))
    pb.caches["force_solver"] = True
    res = O.solve(pb)
    assert res.status == Status.UNKNOWN and res.stats["time_limit_reached"]
    assert len(seen) == 1 and seen[0][0] is clock and seen[0][1] <= 30.0
    assert not pb.caches["learner"]  # a cut-short learner answer is not kept for later solves


def test_without_a_limit_the_example_answers_as_before(example_optimum):
    code, out, err = run("--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["status"] == "optimal" and d["solver"]["time_limit_reached"] is False and "analysis" not in d
    assert d["finish"]["cost"] == pytest.approx(example_optimum.metrics["cost"], rel=1e-9)
    assert d["plan"]["cards"] == example_optimum.decision.cards
    assert d["binding"] and d["alternatives"] and d["cycle"].get("break_even_kept") is not None


@pytest.mark.parametrize("bad", ["0", "-1", "30x", "nan"])
def test_bad_time_limit_is_one_line(bad):
    code, out, err = run("--time-limit", bad)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and "--time-limit" in lines[0] and out == "", (code, out, err)


# --- every solver backend for the learner -----------------------------------------------------

def test_missing_pyomo_solver_is_one_line():
    code, out, err = run("--solver", "pyomo:nosuch")
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and "pyomo:nosuch" in lines[0] and out == "", (code, out, err)
