"""The market on the per-operation model (issue 38): one layout front per accelerator, priced per offer, equals
the brute force of tests/test_market.py (every plan of each offer's space evaluated and billed there); honest
statuses under a time limit; the confidence carried into market plans with the preemptions in its law.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from functools import partial

import pytest
from hypothesis import HealthCheck, given, settings

from tests.test_market import (
    REGIONS,
    SIX,
    brute,
    brute_market,
    catalog_with,
    fastest_run,
    markets,
    offer_table,
    raw_scenario,
)
from tpopt.catalogs.scenario import build_scenario
from tpopt.models.units import HOUR
from tpopt.optimizer import market as MK
from tpopt.optimizer import market_front as MF
from tpopt.optimizer import plan as P
from tpopt.optimizer.backends import resolve
from tpopt.optimizer.core import tiny_solver
from tpopt.optimizer.limits import Clock
from tpopt.optimizer.result import Request, Status
from tpopt.optimizer.space import Space
from tpopt.presentation import market_infeasible_lines, market_lines


def per_op(raw):
    """The scenario on the per-operation model (no ``hardware.efficiency``), pipelines, both save modes and
    two save intervals searched too."""
    raw = dict(raw, hardware={"accelerator": ["h100-sxm", "h200"]})
    raw["search"] = dict(raw["search"], pp=[1, 2])
    raw["checkpoint"] = {"save_interval": ["auto", "1800s"], "mode": ["sync", "async"]}
    return raw


def test_the_step_and_the_layout_families_ignore_the_save_mode_and_interval(tmp_path):
    """The front's walk fixes the save mode and interval (optimizer/market_front.py): every plan's step and
    every family but the offer's are the same at each mode and interval."""
    sc = build_scenario(per_op(raw_scenario()), catalog_with(tmp_path, SIX))
    sub = MK.offer_scenario(sc, sc.market.offers[0])
    space = Space.from_scenario(sub)
    d = space.domains
    assert len(d["mode"]) == 2 and len(d["tau"]) == 2
    for combo in itertools.islice(itertools.product(*(range(len(v)) for v in d.values())), 0, None, 5):
        idx = dict(zip(d, combo, strict=True))
        ref = MK.evaluate(sub, space.plan(dict(idx, mode=0, tau=0)))
        ev = MK.evaluate(sub, space.plan(idx))
        assert ev.metrics["step_s"] == ref.metrics["step_s"]
        for a, b in zip(ev.constraints, ref.constraints, strict=True):
            if a.name not in MF.OFFER_FAMILIES:
                assert (a.value, a.limit) == (b.value, b.limit), a.name


@settings(max_examples=4, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(markets())
def test_front_equals_the_brute_force_on_per_operation_markets(tmp_path, case):
    """Every offer's row and the market's pick equal the brute force (each offer's every plan evaluated)."""
    text, names, deadline, max_cost, shares, keep = case
    raw = per_op(raw_scenario(names, deadline, max_cost))
    raw["market"].update(keep)
    if shares:
        raw["market"]["spot_shares"] = shares
    sc = build_scenario(raw, catalog_with(tmp_path, text))
    pr = P.plan(sc, "cpsat", Request(time_limit=120))
    per_offer = {o.id: brute(sc, o) for o in sc.market.offers}
    ref = brute_market(sc, per_offer)
    assert pr.status == (Status.OPTIMAL if ref else Status.INFEASIBLE)
    if ref:
        assert math.isclose(pr.best.metrics["cost"], ref[0][0], rel_tol=1e-9)
    rows = {r["offer"]: r for r in pr.report["market"]["offers"]}
    for o in sc.market.offers:
        b = per_offer[o.id]
        if rows[o.id]["method"] == MK.BOUND:  # decided by its bound: no plan on it bills less, none beats the pick
            assert rows[o.id]["status"] == "bounded" and rows[o.id]["bound"] > pr.best.metrics["cost"]
            assert b is None or b[0] >= rows[o.id]["bound"] * (1 - 1e-12), o.id
            continue
        assert rows[o.id]["method"] == MK.FRONT
        assert ("cost" in rows[o.id]) == (b is not None), o.id
        if b is not None:
            assert math.isclose(rows[o.id]["cost"], b[0], rel_tol=1e-9), o.id


def test_backends_named_agree_with_the_front(tmp_path):
    """A named solver solves each offer itself (no front): the same optimum as the front, offer by offer."""
    sc = build_scenario(per_op(raw_scenario(["h100-od", "h100-1y", "h200-spot"])), catalog_with(tmp_path, SIX))
    front = P.plan(sc, "cpsat", Request(time_limit=120))
    for backend in ("cpsat", "highs"):
        own = P.plan(sc, backend, Request(time_limit=120, method="monolithic"))
        assert {r["method"] for r in own.report["market"]["offers"]} != {MK.FRONT}
        assert own.status == front.status == Status.OPTIMAL
        assert math.isclose(own.best.metrics["cost"], front.best.metrics["cost"], rel_tol=1e-9), backend
        for a, b in zip(own.report["market"]["offers"], front.report["market"]["offers"], strict=True):
            assert math.isclose(a.get("cost", 0.0), b.get("cost", 0.0), rel_tol=1e-9), (backend, a["offer"])


def test_offers_share_the_step_and_the_front_is_one_plan_per_group(tmp_path):
    """What an offer changes never reaches the step: every plan's step is the same on two offers of one card,
    and the front holds one plan per (cards, save mode, tau choice, ep)."""
    sc = build_scenario(per_op(raw_scenario()), catalog_with(tmp_path, SIX))
    od, spot = (next(o for o in sc.market.offers if o.id.endswith(k)) for k in ("h100-sxm/on-demand", "h100-sxm/spot"))
    a, b = MK.offer_scenario(sc, od), MK.offer_scenario(sc, spot)
    sa = Space.from_scenario(a)
    sb = Space(sc=b, domains=sa.domains)
    for combo in itertools.islice(itertools.product(*(range(len(v)) for v in sa.domains.values())), 0, None, 7):
        idx = dict(zip(sa.domains, combo, strict=True))
        ea, eb = MK.evaluate(a, sa.plan(idx)), MK.evaluate(b, sb.plan(idx))
        assert ea.metrics["step_s"] == eb.metrics["step_s"]
    front = MF.build_front(sa, Request(), Clock(None))
    groups = list(zip(front.cards, front.mode, front.tau, front.ep, strict=True))
    assert front.complete and len(groups) == len(set(groups)) > 0


def ticking(calls: int) -> Clock:
    """A clock that runs out at its ``calls``-th reading (one second a reading)."""
    t = iter(itertools.count())
    return Clock(float(calls), now=lambda: float(next(t)))


def test_a_limit_says_so_lists_the_undecided_offers_and_never_advises_relaxing(tmp_path):
    sc = build_scenario(per_op(raw_scenario()), catalog_with(tmp_path, SIX))
    done = P.plan(sc, "cpsat", Request(time_limit=120))
    seen = set()
    for calls in range(1, 60):
        pr = P.plan(sc, "cpsat", Request(clock=ticking(calls)))
        m = pr.report["market"]
        if pr.status == Status.OPTIMAL:
            assert not m["undecided"] and not m["time_limit_reached"] and m["pick_proven"]
            break
        assert pr.report["solver"]["time_limit_reached"] is True and m["time_limit_reached"] is True
        assert m["undecided"] and set(m["decided"]) | set(m["undecided"]) == {o.id for o in sc.market.offers}
        assert not m["pick_proven"]
        if pr.best is None:  # no plan: never the advice for infeasibility
            text = "\n".join(market_infeasible_lines(pr.report))
            assert "Time limit reached" in text and "relax" not in text and pr.status == Status.UNKNOWN
            seen.add("none")
        else:  # a plan: said to be the best found, not proven, the undecided offers named
            text = "\n".join(market_lines(pr.report))
            assert "Time limit reached" in text and "not proven the best over the offers" in text
            assert all(u in text for u in m["undecided"]) and "relax" not in text
            assert pr.best.metrics["cost"] >= done.best.metrics["cost"] * (1 - 1e-9)
            seen.add("plan")
    assert seen == {"none", "plan"}


def test_no_plan_is_said_only_when_every_offer_is_proven_infeasible(tmp_path):
    sc = build_scenario(per_op(raw_scenario(deadline="2h")), catalog_with(tmp_path, SIX))
    pr = P.plan(sc, "cpsat", Request(time_limit=120))
    assert pr.status == Status.INFEASIBLE and not pr.report["market"]["undecided"]
    assert "relax the deadline" in "\n".join(market_infeasible_lines(pr.report))


def test_confidence_in_a_market_plan_counts_the_preemptions(tmp_path):
    """P(on time), quantiles and the step-up of a spot plan; its law's preemptions are cards x rho x the
    training time (the offer's rate, written here)."""
    cat = catalog_with(tmp_path, SIX)
    sc = build_scenario(per_op(raw_scenario(["h100-spot"], deadline="20d")), cat)
    sc = replace(sc, task=replace(sc.task, confidence=0.9))
    pr = P.plan(sc, "cpsat", Request(time_limit=120))
    d = pr.report["finish_distribution"]
    assert 0.9 <= d["probability_by_deadline"] <= 1.0
    assert d["finish_days"]["p50"] <= d["finish_days"]["p90"] <= d["finish_days"]["p99"]
    events = {s["name"]: s["events"] for s in d["sources"]}
    cards, train_s = pr.best.plan.cards, pr.best.metrics["train_days"] * 86400.0
    assert math.isclose(events["preemptions"], cards * 0.002 / HOUR * train_s, rel_tol=0.05)
    assert "step_up" in d and d["step_up"]["target"] > 0.9


def test_the_front_counts_the_waits_for_spot_capacity(tmp_path):
    """The front on a per-operation market whose spot offer's fastest run (f on capacity, R = 2 h) meets the deadline
    D = R + (f - R) / 0.95 only when capacity never lapses: at a = 0.9 (its expected calendar finish
    R + (f - R) / 0.9 > D) the front has no plan on it, as the brute force; at a = 1 it has one, the brute force's
    bill and finish; the on-demand row is the same in both (the front stays a front: the calendar finish grows with
    the run's)."""
    rows = {}
    for a in (1.0, None):
        extra = 'preempt_per_card_hour = 0.002\nreacquire = "1h"' + ("" if a is None else f"\navailability = {a!r}")
        text = REGIONS + offer_table("od", "cloud-a", "east", "h100-sxm", "on-demand", 3.0) + offer_table(
            "spot", "cloud-a", "east", "h100-sxm", "spot", 1.6, extra=extra)
        raw = per_op(raw_scenario(["od", "spot"]))
        raw["schedule"]["reserved"] = "2h"
        sc = build_scenario(raw, catalog_with(tmp_path, text))
        if a == 1.0:
            R = sc.task.reserved_s
            D = R + (fastest_run(sc, sc.market.offers[1]) - R) / 0.95
        sc = replace(sc, task=replace(sc.task, deadline_s=D))
        pr = P.plan(sc, "cpsat", Request(time_limit=120))
        rows[a] = {r["offer"]: r for r in pr.report["market"]["offers"]}
        assert {r["method"] for r in rows[a].values()} == {MK.FRONT}
        for o in sc.market.offers:
            b = brute(sc, o)
            assert ("cost" in rows[a][o.id]) == (b is not None), (a, o.id)
            if b is not None:
                assert math.isclose(rows[a][o.id]["cost"], b[0], rel_tol=1e-9), (a, o.id)
                assert math.isclose(rows[a][o.id]["finish_days"] * 86400.0, b[1], rel_tol=1e-9), (a, o.id)
    spot, od = "cloud-a/east/h100-sxm/spot", "cloud-a/east/h100-sxm/on-demand"
    assert "cost" in rows[1.0][spot] and rows[None][spot]["status"] == "infeasible"
    assert rows[1.0][od] == rows[None][od]


@pytest.mark.parametrize("objective", ["cost", "time"])
def test_the_front_path_is_taken_only_where_the_solver_enumerates(tmp_path, objective):
    sc = build_scenario(per_op(raw_scenario()), catalog_with(tmp_path, SIX))
    solver = resolve("cpsat")
    req = Request(time_limit=120, objective=objective)
    ms = MK.solve_market(sc, solver, req, tiny_solver)
    assert {r.method for r in ms.offers} == {MK.FRONT} and ms.result.status == Status.OPTIMAL
    own = MK.solve_market(sc, solver, req, lambda space, s, method: s)  # never enumerates: each offer solved
    assert MK.FRONT not in {r.method for r in own.offers}
    assert math.isclose(MK.objective_key(ms.pick.best, objective)[0], MK.objective_key(own.pick.best, objective)[0],
                        rel_tol=1e-9)


@settings(max_examples=4, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(markets())
def test_the_offer_bound_is_below_every_plan_on_the_offer(tmp_path, case):
    """offer_bound (the compute floor at the offer's price) is at most the bill of the brute force's cheapest
    plan on that offer, per-operation and flat models alike."""
    text, names, deadline, max_cost, shares, keep = case
    for raw in (raw_scenario(names, deadline, None), per_op(raw_scenario(names, deadline, None))):
        raw["market"].update(keep)
        sc = build_scenario(raw, catalog_with(tmp_path, text))
        for o in sc.market.offers:
            b = brute(sc, o)
            bound = MK.offer_bound(MK.offer_scenario(sc, o), o)
            assert bound > 0 and (b is None or b[0] >= bound), o.id


def test_an_accelerator_above_the_incumbent_is_decided_by_its_bound(tmp_path):
    """An H200 priced 50 times the H100's: its bound is above the H100's bill, so its front is not built; its
    row says so (decided, not undecided), and the pick, cost and status equal the market solved without
    bounds (every front built) and the brute force."""
    text = REGIONS + "".join([
        offer_table("h100-od", "cloud-a", "east", "h100-sxm", "on-demand", 2.0),
        offer_table("h200-od", "cloud-a", "east", "h200", "on-demand", 100.0)])
    sc = build_scenario(per_op(raw_scenario(["h100-od", "h200-od"])), catalog_with(tmp_path, text))
    pr = P.plan(sc, "cpsat", Request(time_limit=120))
    rows = {r["offer"]: r for r in pr.report["market"]["offers"]}
    h200 = next(k for k in rows if "h200" in k)
    assert rows[h200]["method"] == MK.BOUND and rows[h200]["status"] == "bounded"
    assert pr.status == Status.OPTIMAL and pr.report["market"]["undecided"] == []
    assert h200 in pr.report["market"]["decided"] and pr.report["market"]["pick_proven"]
    assert "decided by a cost bound" in pr.report["solver"]["method"]
    per_offer = {o.id: brute(sc, o) for o in sc.market.offers}
    ref = brute_market(sc, per_offer)
    assert math.isclose(pr.best.metrics["cost"], ref[0][0], rel_tol=1e-9)
    assert per_offer[h200][0] >= rows[h200]["bound"]
    req = Request(time_limit=120)
    full = MK.offer_fronts(sc, resolve("cpsat"), req, partial(tiny_solver, named=False), bound=False)
    assert full[h200].method == MK.FRONT and full[h200].best.metrics["cost"] >= rows[h200]["bound"]
    text_lines = market_lines(pr.report)
    # one line says why it was not solved: its bound (and how it is built) is above the chosen plan's cost
    line = next(line for line in text_lines if h200 in line)
    chosen = pr.best.metrics["cost"]
    assert rows[h200]["bound"] > chosen
    assert (f"not solved: its cost is at least {rows[h200]['bound']:,.0f} USD (training FLOPs at the card's best "
            f"rate, billed at this price), above the chosen plan's {chosen:,.0f} USD, so it cannot win") in line, line


def _row(cost, bound=None, finish=1.0):
    ev = None if cost is None else MK.Evaluation(plan=None, metrics={"cost": cost, "finish_days": finish},
                                                 constraints=[])
    return MK.OfferSolve(offer=None, sc=None, status=Status.OPTIMAL if ev else Status.UNKNOWN, best=ev, solves=0,
                         method=MK.BOUND if bound else MK.FRONT, bound=bound)


@pytest.mark.parametrize(("rows", "holds"), [
    ([_row(10.0), _row(None, 20.0)], True),  # far above the pick
    ([_row(None, 20.0), _row(10.0)], True),  # before it: any plan of it is replaced
    ([_row(30.0), _row(None, 20.0), _row(10.0)], True),  # may replace the first; the last replaces both
    ([_row(30.0), _row(None, 20.0), _row(25.0)], False),  # the pick is 25 or the bound row's plan
    ([_row(10.0), _row(None, 10.0 * (1 + 1e-10))], False),  # within the market's tie tolerance
    ([_row(None, 20.0), _row(None, 30.0), _row(10.0)], True),  # two bound rows, both replaced
])
def test_bounds_hold_only_when_no_bound_row_can_be_the_pick(rows, holds):
    """The pick over rows whose bound rows hold any plan billing at least their bound: decided only where
    every such plan loses (tests around the market's comparison, optimizer/market.py _better)."""
    assert MK.bounds_hold(rows, "cost") is holds
    assert MK.bounds_hold(rows, "time") is False
