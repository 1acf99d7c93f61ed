"""Limits kept on every path (issue 36 item 3): no phase starts once the run's one clock has run out, and
what a limit cut short says so.

Deterministic: each run's clock reads a fake time source that runs out at its k-th reading
(:class:`tests.test_clock.Readings`), so "after expiry" is exact and the machine's load does not matter.
The answers are checked against the same question asked without a limit:

* explain of a request without a plan (the conflict, then one relaxation per input): every relaxation
  is the unlimited one or undecided; once the clock has run out, no relaxation after the one in progress
  is asked (each says "before it was asked" and ran no solve);
* a market solve (one sub-problem per offer, the card-count scans): an offer started after expiry is not
  searched; status, ``time_limit_reached`` and the text say that the limit was reached, never "no plan".

The wall-clock figures are in ``benchmarks/time_limits.py --paths`` (docs/commands.md).
"""

import json

import pytest
from click.testing import CliRunner

import tpopt
from tests.conftest import ROOT
from tests.test_clock import Readings
from tpopt.catalogs.scenario import load_scenario
from tpopt.cli.main import cli
from tpopt.optimizer.explain import explain_request
from tpopt.optimizer.explain.inputs import with_max_cards
from tpopt.optimizer.explain.relax import RELAXING, asking_order
from tpopt.optimizer.limits import Clock
from tpopt.optimizer.plan import plan
from tpopt.optimizer.result import Request, Status

EX = ROOT / "examples"
BEFORE = "before it was asked"


def _relaxations(out):
    return {r["parameter"]: r for r in out["relaxations"]}


def _answers(rels):
    """What each relaxation answers (its wall time and solve count aside)."""
    return [(r["parameter"], r["helps"], r["required"], r.get("plan"), r.get("note")) for r in rels]


@pytest.fixture(scope="module")
def no_plan():
    """The design case capped at 16 cards (no plan: the deadline needs 48) and its unlimited explanation."""
    sc = with_max_cards(load_scenario(EX / "design-case.toml"), 16)
    counter = Readings()
    ref = explain_request(sc, "cpsat", Request(time_limit=600.0, clock=Clock(600.0, now=counter)))
    assert ref["status"] == "infeasible" and "conflict_status" not in ref
    assert any(r["helps"] for r in ref["relaxations"])  # the reference answers (a limit has something to cut)
    return sc, ref, counter.n


def test_explain_cut_at_any_reading_answers_or_leaves_undecided_and_starts_nothing_after(no_plan):
    sc, ref, readings = no_plan
    want = _relaxations(ref)
    for k in sorted({0, 1, 2, 3, 5, 8, readings // 4, readings // 2, 3 * readings // 4, readings - 2,
                     readings - 1, readings + 5}):
        clock = Clock(600.0, now=Readings(k))
        out = explain_request(sc, "cpsat", Request(time_limit=600.0, clock=clock))
        if out["status"] == "unknown":  # the solve itself was cut short: no verdict, nothing explained
            assert clock.reached and out["relaxations"] == [] and out["solver"]["time_limit_reached"], k
            continue
        assert out["status"] == "infeasible", k  # the verdict stands; only the explanation is cut
        got = list(out["relaxations"])
        cut = [i for i, r in enumerate(got) if r["helps"] is None]
        if not clock.reached or not cut:  # no limit, or reached once every relaxation was answered
            assert _answers(got) == _answers(ref["relaxations"]), k
            continue
        assert out.get("conflict_status") == "time limit reached" or out["conflict"] == ref["conflict"], k
        order = asking_order([r["parameter"] for r in got], out["conflict"])  # listed fixed, asked in this order
        asked = sorted(got, key=lambda r: order.index(r["parameter"]))
        cut = [i for i, r in enumerate(asked) if r["helps"] is None]
        for i, r in enumerate(asked):
            w = want[r["parameter"]]
            if r["helps"] is None:
                assert "time limit reached" in r["note"], (k, r)
                if i > cut[0]:  # after the one the limit stopped: never started
                    assert BEFORE in r["note"] and r["solves"] == 0, (k, r)  # never started: no solve
            else:  # decided: the unlimited answer
                assert (r["helps"], r["required"]) == (w["helps"], w["required"]), (k, r["parameter"])
        assert [r["parameter"] for r in got] == [r["parameter"] for r in ref["relaxations"]], k


def test_explain_expired_before_the_relaxations_asks_none(no_plan, monkeypatch):
    sc, ref, _ = no_plan
    t = [0.0]
    clock = Clock(10.0, now=lambda: t[0])

    def tell(text):
        if text.startswith("smallest change"):  # the first relaxation has started: the clock runs out now
            t[0] = 100.0

    out = explain_request(sc, "cpsat", Request(time_limit=10.0, clock=clock), progress=tell)
    rel = out["relaxations"]
    assert out["conflict"] == ref["conflict"] and clock.reached and clock.phase == RELAXING
    assert all(r["helps"] is None for r in rel)
    order = asking_order([r["parameter"] for r in rel], out["conflict"])  # listed fixed, asked in this order
    asked = sorted(rel, key=lambda r: order.index(r["parameter"]))
    assert all(BEFORE in r["note"] for r in asked[1:]) and BEFORE not in asked[0]["note"]


def test_explain_command_says_each_undecided_relaxation(no_plan):
    # the command line: an infeasible verdict (exit 3) with the relaxations the limit left marked
    r = CliRunner().invoke(cli, ["explain", "--scenario", str(EX / "design-case.toml"), "--max-cards", "16",
                                 "--time-limit", "0.001s"])
    assert r.exit_code in (3, 4), r.output
    assert "Traceback" not in r.output
    if r.exit_code == 3:
        assert "time limit reached" in r.output


# ---------------------------------------------------------------------------------------------
# the market path


@pytest.fixture(scope="module")
def market():
    sc = tpopt.scenario(EX / "design-case.toml", hw="all")
    assert len(sc.market.offers) >= 3
    counter = Readings()
    ref = plan(sc, "cpsat", Request(time_limit=600.0, clock=Clock(600.0, now=counter)))
    assert ref.status == Status.OPTIMAL and not ref.report["solver"]["time_limit_reached"]
    return sc, ref, counter.n


def test_market_cut_at_any_reading_is_honest(market):
    sc, ref, readings = market
    for k in sorted({0, 1, 2, 5, readings // 4, readings // 2, 3 * readings // 4, readings - 1}):
        clock = Clock(600.0, now=Readings(k))
        r = plan(sc, "cpsat", Request(time_limit=600.0, clock=clock))
        s = r.report["solver"]
        assert r.status != Status.INFEASIBLE, k  # a feasible request is never called infeasible
        if r.status == Status.OPTIMAL:
            assert r.best.metrics["cost"] == pytest.approx(ref.best.metrics["cost"], rel=1e-9), k
            continue
        assert clock.reached and s["time_limit_reached"] and s["limit_phase"], (k, s)
        rows = r.report["market"]["offers"]
        assert any(row["status"] in ("unknown", "feasible") for row in rows), k
        if r.status == Status.FEASIBLE:
            assert r.best.metrics["cost"] >= ref.best.metrics["cost"] * (1 - 1e-9), k
        else:
            assert r.status == Status.UNKNOWN and not r.plans, k


def test_market_expired_starts_no_offer_and_the_text_says_the_limit():
    sc = tpopt.scenario(EX / "design-case.toml", hw="all")
    r = plan(sc, "cpsat", Request(time_limit=600.0, clock=Clock(600.0, now=Readings(0))))
    rows = r.report["market"]["offers"]
    assert r.status == Status.UNKNOWN and r.report["solver"]["time_limit_reached"]
    assert all(row["status"] == "unknown" and row["solves"] == 0 for row in rows)
    res = CliRunner().invoke(cli, ["solve", "--hw", "all", "--time-limit", "0.001s"])
    assert res.exit_code == 4, res.output
    assert "within the time limit" in res.output and "Time limit reached" in res.output
    assert "relax the deadline" not in res.output  # not advice for a request without a plan: none was proven
    res = CliRunner().invoke(cli, ["solve", "--hw", "all", "--time-limit", "0.001s", "--json"])
    d = json.loads(res.output)
    assert res.exit_code == 4 and d["status"] == "unknown" and d["solver"]["time_limit_reached"] is True


def test_market_api_without_a_clock_shares_one_over_every_offer(monkeypatch):
    # the API makes no clock: the market solve makes one and every offer's solve draws on it (before, each
    # offer's replace(req) started a fresh limit: 7.8 s under time_limit=0.1 on the widest GPT-3 space)
    seen = set()
    from tpopt.optimizer import core

    real = core.solve

    def spy(sc, backend, req, **kw):
        seen.add(id(req.clock))
        return real(sc, backend, req, **kw)

    monkeypatch.setattr(core, "solve", spy)
    # offers answered on their accelerator's layout front (issue 38) draw on the clock there
    from tpopt.optimizer import market_front

    front = market_front.build_front

    def front_spy(space, req, clock):
        seen.add(id(clock))
        return front(space, req, clock)

    monkeypatch.setattr(market_front, "build_front", front_spy)
    r = tpopt.solve(EX / "design-case.toml", hw="all", time_limit=60.0)
    assert r.status == Status.OPTIMAL and len(seen) == 1


def test_the_api_limit_counts_from_the_call_scenario_loading_included(monkeypatch):
    # the clock starts when tpopt.solve is called, not when a phase first reads it: a scenario that takes longer
    # to load than the limit leaves nothing to solve (before, the limit started after the loading)
    import time

    from tpopt import api

    real = api._scenario_of

    def slow(source, inputs):
        time.sleep(0.3)
        return real(source, inputs)

    monkeypatch.setattr(api, "_scenario_of", slow)
    r = tpopt.solve(EX / "design-case.toml", time_limit=0.2)
    assert r.status == Status.UNKNOWN and r.report["solver"]["time_limit_reached"]
    ex = tpopt.explain(EX / "design-case.toml", max_cards=16, time_limit=0.2)
    assert ex.status == "unknown"
