"""Market offers (issue 26): the offer is a decision, proven cheapest against a brute force written here.

The reference of every test is an enumeration written in this file: every plan of an offer's design space
evaluated with ``tpopt evaluate``'s evaluator on the scenario as the offer defines it (its accelerator, its
price, at most its available cards, its preemptions in the failure rate), billed by the formulas below.
"""

from __future__ import annotations

import itertools
import math
import tomllib
from dataclasses import fields, replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tpopt.catalogs import load_catalog
from tpopt.catalogs.declare import spec
from tpopt.catalogs.market import (
    BUILTIN,
    DEFAULT_KEYS,
    OFFER_KEYS,
    POWER_KEYS,
    REGION_KEYS,
    STORAGE_KEYS,
    OfferKeys,
    build_offer,
    from_skypilot,
    load_market,
    offer_toml,
)
from tpopt.catalogs.scenario import build_scenario
from tpopt.models import families as F
from tpopt.models.arch import param_count
from tpopt.models.evaluate import evaluate
from tpopt.models.market import MarketOptions, Offer
from tpopt.optimizer import plan as P
from tpopt.optimizer.result import Request, Status
from tpopt.optimizer.space import Space
from tpopt.presentation import market_lines

HOUR, DAY = 3600.0, 86400.0
REGIONS = """
[region."cloud-a/east"]
source = "test"
[region."cloud-b/west"]
source = "test"
"""


def offer_table(name, provider, region, acc, market, price, available=64, date="2026-10", extra=""):
    return (f'[offer.{name}]\nprovider = "{provider}"\nregion = "{region}"\naccelerator = "{acc}"\n'
            f'cards_per_host = 8\nmarket = "{market}"\nprice_card_hour = {price}\navailable = {available}\n'
            f'date = "{date}"\nsource = "test offer"\n{extra}\n')


# three offers (on-demand, 1-year reserved, spot) of two accelerators in two regions
SIX = REGIONS + "".join([
    offer_table("h100-od", "cloud-a", "east", "h100-sxm", "on-demand", 3.0),
    offer_table("h100-1y", "cloud-b", "west", "h100-sxm", "reserved", 0.30, extra='term = "365d"'),
    offer_table("h100-spot", "cloud-a", "east", "h100-sxm", "spot", 1.6,
                extra='preempt_per_card_hour = 0.002\nreacquire = "1h"'),
    offer_table("h200-od", "cloud-b", "west", "h200", "on-demand", 3.6),
    offer_table("h200-1y", "cloud-a", "east", "h200", "reserved", 0.35, extra='term = "365d"'),
    offer_table("h200-spot", "cloud-b", "west", "h200", "spot", 2.1,
                extra='preempt_per_card_hour = 0.002\nreacquire = "1h"'),
])


def raw_scenario(offers="all", deadline="20d", max_cost=None):
    raw = {"model": {"name": "qwen3-0.6b"}, "task": {"tokens": "20B", "seq_len": 4096, "global_batch": 64},
           "schedule": {"deadline": deadline}, "hardware": {"accelerator": ["h100-sxm", "h200"], "efficiency": 0.4},
           "checkpoint": {"save_interval": "auto", "mode": "sync"},
           "search": {"zero_stage": [1], "tp": [1, 2], "pp": [1], "micro_batch": [1, 2], "max_cards": 64},
           "market": {"offers": offers}}
    if max_cost is not None:
        raw["cost"] = {"max_cost": max_cost}
    return raw


def catalog_with(tmp_path, text):
    d = tmp_path / "cat"
    d.mkdir(exist_ok=True)
    (d / "offers.toml").write_text(text)
    return load_catalog([d])


# ---------------------------------------------------------------------------------------------
# the reference: every plan of the offer's space, billed here


MONTH = 365.25 / 12 * DAY  # the storage month: GB-month prices pro rata


def checkpoints(sc, o: Offer, finish_s: float) -> float:
    """Storage: copies x GB (params x bytes per param / 1e9) x USD/GB-month x finish / month; egress: copies
    out x GB x USD/GB; nothing when the offer's region prices no storage."""
    if o.storage is None:
        return 0.0
    gb = param_count(sc.model) * sc.reliability.bytes_per_param / 1e9
    m = sc.market
    return m.checkpoint_copies * gb * o.storage.gb_month * finish_s / MONTH + m.checkpoint_egress * gb * \
        o.storage.egress_gb


def bill(o: Offer, cards: int, finish_s: float, sc=None) -> float:
    """Reserved: the whole term (ceil of the finish over the term); otherwise per second (billing 1 s); a mix:
    each part's bill for its share of the cards; with ``sc``, the checkpoints' storage and egress on top."""
    if sc is not None:
        return bill(o, cards, finish_s) + checkpoints(sc, o, finish_s)
    if o.parts:
        return sum(bill(part, round(share * cards), finish_s) for part, share in o.parts)
    if o.market == "reserved":
        return cards * o.price_card_hour * o.term_s * math.ceil(finish_s / o.term_s) / HOUR
    assert o.billing_s <= 1 and o.min_commit_s == 0
    return cards * o.price_card_hour * finish_s / HOUR


def on_offer(sc, o: Offer):
    """The scenario as the offer defines it, written out here."""
    system = replace(sc.system(o.accelerator), price_card_hour=o.price_card_hour, nic_price_hour=0.0)
    rho = sum(share * p.preempt_per_card_hour for p, share in o.parts if p.market == "spot") if o.parts else \
        o.preempt_per_card_hour if o.market == "spot" else 0.0
    spot = MarketOptions(preempt_per_card_s=rho / HOUR,
                         reacquire_s=o.reacquire_s if o.market == "spot" else 0.0)
    return replace(sc, systems={o.accelerator: system}, market=spot,
                   search=replace(sc.search, accelerators=(o.accelerator,)))


SPOT_AVAILABILITY = 0.9
"""P(spot capacity obtainable on a day) of a spot offer that states none: the stated default (docs/market.md)."""


def availability(o: Offer) -> float:
    """P(capacity on a day) the offer's run waits on: 1 off the spot market; a spot offer's own, else 0.9; a mix
    its spot part's (the job runs on all its cards)."""
    if o.parts:
        return min(availability(part) for part, _ in o.parts)
    if o.market != "spot":
        return 1.0
    return SPOT_AVAILABILITY if o.availability is None else o.availability


def calendar(sc, o: Offer, finish_s: float) -> float:
    """The expected calendar finish of a run finishing at ``finish_s`` on capacity: each day on capacity is
    followed by a Geometric number of days without it, mean (1 - a) / a, so the run's finish_s - R seconds take
    (finish_s - R) / a; the reserved R is not stretched."""
    R = sc.task.reserved_s
    return R + (finish_s - R) / availability(o)


def brute(sc, o: Offer):
    """(bill, finish s, plan) of the cheapest feasible plan on ``o`` (every family; the budget on the bill;
    at most min(max_cards, available) cards); None when none. Without a confidence, on a spot offer the deadline
    is met by the expected calendar finish with the waits for capacity (:func:`calendar`; the finish returned),
    and the bill is of the run on capacity."""
    waits = sc.task.confidence is None and availability(o) < 1.0
    deadline_families = {F.DEADLINE, F.STEP_BUDGET} if waits else set()
    sub = on_offer(sc, o)
    space = Space.from_scenario(sub)
    best = None
    for combo in itertools.product(*(range(len(v)) for v in space.domains.values())):
        plan = space.plan(dict(zip(space.domains, combo, strict=True)))
        if plan.cards > min(sc.search.max_cards, o.available):  # the card filters first: they need no evaluation
            continue
        if any((share * plan.cards) % 8 for _, share in o.parts):  # each part rents whole 8-card hosts
            continue
        ev = evaluate(sub, plan)
        if not all(c.satisfied for c in ev.constraints if c.name != F.BUDGET and c.name not in deadline_families):
            continue
        run = ev.metrics["finish_days"] * DAY
        f = calendar(sc, o, run)
        if waits and f > sc.task.deadline_s:
            continue
        cost = bill(o, plan.cards, run, sc)
        if sc.cost.max_cost is not None and cost > sc.cost.max_cost * (1 + 1e-9):
            continue
        if best is None or (cost, f) < (best[0] * (1 - 1e-9), best[1]):
            best = (cost, f, plan)
    return best


def brute_market(sc, per_offer=None):
    """The cheapest offer's brute force; ``per_offer`` (offer id -> brute) reuses offers already enumerated."""
    per_offer = per_offer if per_offer is not None else {o.id: brute(sc, o) for o in sc.market.offers}
    found = [(b, o) for o in sc.market.offers for b in [per_offer[o.id]] if b is not None]
    return min(found, key=lambda x: (x[0][0], x[0][1])) if found else None


# ---------------------------------------------------------------------------------------------
# the catalog


def test_builtin_offers_carry_dates_sources_and_notes():
    cat = load_catalog()
    m = cat.market
    assert m.as_of == "2026-12-01" and len(m.offers) >= 8
    for name, o in m.offers.items():
        assert o.date and o.source and o.available > 0 and o.price_card_hour > 0, name
        assert f"{o.provider}/{o.region}" in m.regions and o.accelerator in cat.accelerators
        if o.market == "spot":
            assert o.preempt_per_card_hour > 0 and o.preempt_source
    # the capacity-block prices were read in 2024-12: 24 months before the market's date, flagged
    assert any("older than 6 months (24 months" in n for o in m.offers.values()
               for n in __import__("tpopt.models.market", fromlist=["x"]).price_notes(o, m.as_of))


def test_catalog_dir_extends_and_overrides(tmp_path):
    cat = catalog_with(tmp_path, SIX)
    assert {"h100-od", "h200-spot", "aws-use1-h100-od"} <= set(cat.market.offers)
    over = catalog_with(tmp_path, REGIONS + offer_table("aws-use1-h100-od", "cloud-a", "east", "h100-sxm",
                                                          "on-demand", 1.0))
    assert over.market.offers["aws-use1-h100-od"].price_card_hour == 1.0


# ---------------------------------------------------------------------------------------------
# the offer is a decision


@pytest.mark.parametrize("backend", ["enumerate", "cpsat", "highs"])
def test_three_offers_two_accelerators_two_regions_cheapest_proven(tmp_path, backend):
    cat = catalog_with(tmp_path, SIX)
    sc = build_scenario(raw_scenario(["h100-od", "h100-1y", "h100-spot", "h200-od", "h200-1y", "h200-spot"]), cat)
    per_offer = {o.id: brute(sc, o) for o in sc.market.offers}
    (cost, finish, plan), offer = brute_market(sc, per_offer)
    pr = P.plan(sc, backend, Request(time_limit=60, method="monolithic" if backend != "enumerate" else "auto"))
    assert pr.status == Status.OPTIMAL
    m = pr.report["market"]
    assert m["offer"]["id"] == offer.id and m["offer"]["provider"] and m["offer"]["region"] and m["offer"]["market"]
    assert math.isclose(pr.best.metrics["cost"], cost, rel_tol=1e-9) and pr.best.plan.cards == plan.cards
    assert m["offer"]["date"] == "2026-10" and m["offer"]["notes"] == []  # 2 months old: no note
    # the report's spot figures: share, expected preemptions = n rho T_train, their cost
    if offer.market == "spot":
        p = m["preemption"]
        assert m["spot_share"] == 1.0
        assert math.isclose(p["expected_preemptions"], plan.cards * offer.preempt_per_card_hour
                            * pr.best.metrics["train_days"] * 24, rel_tol=1e-9)
        assert p["cost"] > 0
        assert math.isclose(pr.best.metrics["preemptions_per_hour"], plan.cards * offer.preempt_per_card_hour)
    # every offer's row is its own brute-force optimum
    for row in m["offers"]:
        b = per_offer[row["offer"]]
        assert math.isclose(row["cost"], b[0], rel_tol=1e-9), row


def test_spot_is_chosen_in_this_market(tmp_path):
    """The six-offer market's answer, stated: spot H100 (the arithmetic: 1.6 USD against 3.0 on demand and a
    reserved year of 0.30 x 8,760 h = 2,628 USD per card, far beyond a 20-day run)."""
    cat = catalog_with(tmp_path, SIX)
    raw = raw_scenario()  # the six offers alone: the built-in market's (a 1.25 USD preemptible H100) left out
    raw["market"]["regions"] = ["cloud-a/east", "cloud-b/west"]
    pr = P.plan(build_scenario(raw, cat), "enumerate")
    m = pr.report["market"]
    assert len(m["offers"]) == 6
    assert m["offer"]["id"] == "cloud-a/east/h100-sxm/spot" and m["preemption"]["expected_preemptions"] > 0


def _two(tmp_path, spot_price, rho, od_price=3.0):
    text = REGIONS + offer_table("od", "cloud-a", "east", "h100-sxm", "on-demand", od_price) + offer_table(
        "spot", "cloud-a", "east", "h100-sxm", "spot", spot_price,
        extra=f'preempt_per_card_hour = {rho!r}\nreacquire = "1h"')
    return build_scenario(raw_scenario(["od", "spot"]), catalog_with(tmp_path, text))


def test_spot_price_flips_the_choice_at_its_break_even(tmp_path):
    """Break-even spot price p* = C_on-demand / H_spot: the cheapest spot plan's card-hours do not depend on
    the spot price (the bill is p x card-hours), so spot wins below p* and loses above."""
    sc = _two(tmp_path, 1.0, 0.002)
    od, spot = sc.market.offers
    c_od = brute(sc, od)[0]
    h_spot = brute(sc, spot)[0] / spot.price_card_hour  # card-hours of the cheapest spot plan
    p_star = c_od / h_spot
    for factor, want in ((0.99, "spot"), (1.01, "on-demand")):
        sc2 = _two(tmp_path, p_star * factor, 0.002)
        pr = P.plan(sc2, "cpsat", Request(method="monolithic"))
        assert pr.report["market"]["offer"]["market"] == want, (factor, p_star)


def test_preemption_rate_flips_the_choice_at_its_break_even(tmp_path):
    """Break-even rate rho*: the spot bill grows with rho (more redo, restores, reacquisitions); rho* is
    found here by bisection on the brute-force spot bill against the on-demand bill."""
    spot_price = 2.7
    sc = _two(tmp_path, spot_price, 0.0)
    c_od = brute(sc, sc.market.offers[0])[0]

    def spot_bill(rho):
        s = _two(tmp_path, spot_price, rho)
        return brute(s, s.market.offers[1])[0]

    lo, hi = 0.0, 1.0
    assert spot_bill(lo) < c_od < spot_bill(hi)
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if spot_bill(mid) < c_od else (lo, mid)
    rho_star = (lo + hi) / 2
    for factor, want in ((0.9, "spot"), (1.1, "on-demand")):
        pr = P.plan(_two(tmp_path, spot_price, rho_star * factor), "highs", Request(method="monolithic"))
        assert pr.report["market"]["offer"]["market"] == want, (factor, rho_star)


def test_reserved_term_is_charged_whole_in_the_budget(tmp_path):
    text = REGIONS + offer_table("1y", "cloud-b", "west", "h100-sxm", "reserved", 0.30, extra='term = "365d"')
    cat = catalog_with(tmp_path, text)
    sc = build_scenario(raw_scenario(["1y"]), cat)
    cost, finish, plan = brute(sc, sc.market.offers[0])
    assert math.isclose(cost, plan.cards * 0.30 * 8760, rel_tol=1e-12)  # the year, not the hours used
    used = plan.cards * 0.30 * finish / HOUR
    assert used < cost / 10
    # a budget between the hours used and the commitment admits no plan
    pr = P.plan(build_scenario(raw_scenario(["1y"], max_cost=(used + cost) / 2), cat), "enumerate")
    assert pr.status == Status.INFEASIBLE
    pr = P.plan(build_scenario(raw_scenario(["1y"], max_cost=cost * 1.001), cat), "cpsat", Request(method="monolithic"))
    budget = next(c for c in pr.best.constraints if c.name == F.BUDGET)
    assert math.isclose(budget.value, cost, rel_tol=1e-9) and pr.best.plan.cards == plan.cards


def test_availability_caps_the_plan(tmp_path):
    """20B tokens of Qwen3-0.6B take about 8.8 h on 8 H100 (brute force below): a 4-hour deadline needs more
    cards than an 8-card offer has; 64 available cards make it."""
    text = REGIONS + offer_table("od", "cloud-a", "east", "h100-sxm", "on-demand", 3.0, available=8)
    cat = catalog_with(tmp_path, text)
    sc = build_scenario(raw_scenario(["od"], deadline="10h"), cat)
    pr = P.plan(sc, "enumerate")
    avail = next(c for c in pr.best.constraints if c.name == F.MARKET_AVAILABLE)
    assert pr.best.plan.cards == 8 and avail.limit == 8 and avail.binding
    tight = build_scenario(raw_scenario(["od"], deadline="4h"), cat)
    assert brute(tight, tight.market.offers[0]) is None
    assert P.plan(tight, "enumerate").status == Status.INFEASIBLE
    wide = replace(tight.market.offers[0], available=64)
    ref = brute(tight, wide)
    pr = P.plan(replace(tight, market=MarketOptions(offers=(wide,), as_of="2026-12-01")), "cpsat",
                Request(method="monolithic"))
    assert ref is not None and ref[2].cards > 8 and math.isclose(pr.best.metrics["cost"], ref[0], rel_tol=1e-9)


# ---------------------------------------------------------------------------------------------
# the nominal finish counts the waits for spot capacity


def _capacity_market(tmp_path, spot_availability=None, reserved="2h", offers=("od", "spot")):
    """An on-demand and a spot H100 offer of one region; the spot offer's P(capacity on a day) as given (None:
    not stated, the default 0.9); 2 h reserved, which the waits do not stretch."""
    extra = 'preempt_per_card_hour = 0.002\nreacquire = "1h"'
    if spot_availability is not None:
        extra += f'\navailability = {spot_availability!r}\navailability_source = "test"'
    text = REGIONS + offer_table("od", "cloud-a", "east", "h100-sxm", "on-demand", 3.0) + offer_table(
        "spot", "cloud-a", "east", "h100-sxm", "spot", 1.6, extra=extra)
    raw = raw_scenario(list(offers))
    raw["schedule"]["reserved"] = reserved
    return build_scenario(raw, catalog_with(tmp_path, text))


def fastest_run(sc, o: Offer) -> float:
    """The least finish on capacity (s) of any plan on ``o`` meeting every family but the deadline's and the
    budget (every plan of the offer's space evaluated here)."""
    sub = on_offer(sc, o)
    space = Space.from_scenario(sub)
    skip = {F.DEADLINE, F.STEP_BUDGET, F.BUDGET}
    best = math.inf
    for combo in itertools.product(*(range(len(v)) for v in space.domains.values())):
        plan = space.plan(dict(zip(space.domains, combo, strict=True)))
        if plan.cards > min(sc.search.max_cards, o.available):
            continue
        ev = evaluate(sub, plan)
        if all(c.satisfied for c in ev.constraints if c.name not in skip):
            best = min(best, ev.metrics["finish_days"] * DAY)
    return best


def test_a_spot_plan_on_time_only_if_capacity_never_lapses_is_rejected(tmp_path):
    """The fastest spot run finishes at f on capacity; with the deadline at D = R + (f - R) / 0.95 it meets D when
    capacity is always there (a = 1) and misses it at a = 0.9, its expected calendar finish R + (f - R) / 0.9 > D:
    the spot offer has no plan, the market takes on-demand, whose row is the same in both markets."""
    always = _capacity_market(tmp_path, 1.0)
    spot = always.market.offers[1]
    R = always.task.reserved_s
    f = fastest_run(always, spot)
    D = R + (f - R) / 0.95
    assert R + (f - R) / 0.9 > D > f
    at = {a: replace(sc, task=replace(sc.task, deadline_s=D))
          for a, sc in ((1.0, always), (0.9, _capacity_market(tmp_path)))}
    assert brute(at[1.0], at[1.0].market.offers[1]) is not None and brute(at[0.9], at[0.9].market.offers[1]) is None
    rows = {}
    for a, sc in at.items():
        pr = P.plan(sc, "cpsat", Request(method="monolithic"))
        assert pr.status == Status.OPTIMAL
        rows[a] = {r["offer"]: r for r in pr.report["market"]["offers"]}
        assert pr.report["market"]["offer"]["market"] == ("spot" if a == 1.0 else "on-demand")
    assert rows[0.9]["cloud-a/east/h100-sxm/spot"]["status"] == "infeasible"
    assert rows[1.0]["cloud-a/east/h100-sxm/spot"]["cards"] > 0
    od = "cloud-a/east/h100-sxm/on-demand"
    assert rows[0.9][od] == rows[1.0][od] and "capacity_wait_days" not in rows[0.9][od]


def test_the_waits_lengthen_the_finish_and_bill_nothing(tmp_path):
    """A loose deadline: the same cheapest spot plan at a = 1 and at a = 0.9 (default, not stated), the same
    bill (a day without capacity rents nothing); the finish R + (f - R) / 0.9 for its finish f at a = 1, the
    deadline check on it, and the report saying on what share of days capacity was assumed."""
    one = P.plan(_capacity_market(tmp_path, 1.0, offers=("spot",)), "enumerate")
    sc = _capacity_market(tmp_path, offers=("spot",))
    nine = P.plan(sc, "enumerate")
    assert nine.best.plan == one.best.plan
    assert math.isclose(nine.best.metrics["cost"], one.best.metrics["cost"], rel_tol=1e-12)
    R, f = sc.task.reserved_s, one.best.metrics["finish_days"] * DAY
    want = R + (f - R) / 0.9
    assert math.isclose(nine.best.metrics["finish_days"] * DAY, want, rel_tol=1e-12)
    assert math.isclose(nine.best.metrics["capacity_wait_days"] * DAY, want - f, rel_tol=1e-9)
    assert one.best.metrics["capacity_wait_days"] == 0.0
    deadline = next(c for c in nine.best.constraints if c.name == F.DEADLINE)
    assert math.isclose(deadline.value * DAY, want, rel_tol=1e-12) and deadline.limit * DAY == sc.task.deadline_s
    text = "\n".join(market_lines(nine.report))
    assert "Spot capacity: obtainable on 90 % of days (assumption: illustrative" in text
    assert f"the finish counts {(want - f) / DAY:.2f} d of expected waits" in text and "not billed" in text
    assert "capacity on 90 % of days: +" in text  # the offer's row says it too
    assert "Spot capacity: obtainable on every day (test); no waits" in "\n".join(market_lines(one.report))


def test_the_cost_quantiles_do_not_bill_the_waits(tmp_path):
    """Under a confidence the finish's law counts the waits (its capacity source) and the cost quantiles do not:
    the same plan at a = 1 and a = 0.9 has the same cost quantiles, and a mean finish later by at least the
    waits' mean over its useful training W, W (1 - a) / a (the law's exposure grows with the redone work and the
    step error's mean exp(sigma^2 / 2) >= 1 on top)."""
    reports = {}
    for a in (1.0, None):
        sc = _capacity_market(tmp_path, a, offers=("spot",))
        reports[a] = P.plan(replace(sc, task=replace(sc.task, confidence=0.9)), "enumerate")
    one, nine = reports[1.0], reports[None]
    assert one.best.plan == nine.best.plan
    d1, d9 = one.report["finish_distribution"], nine.report["finish_distribution"]
    for k in d1["cost"]:
        assert math.isclose(d9["cost"][k], d1["cost"][k], rel_tol=1e-9), k
    waits = nine.best.metrics["train_days"] * (1 - 0.9) / 0.9
    assert d9["mean_finish_days"] - d1["mean_finish_days"] >= waits * (1 - 1e-9)


def test_explain_on_a_spot_offer_late_only_for_the_waits(tmp_path):
    """A spot-only market whose fastest run (f on capacity) meets D = R + (f - R) / 0.95 only if capacity never
    lapses: no plan at a = 0.9; explained on the run deadline (the conflict names deadline.finish), and the
    deadline it needs is the least printed value (0.01 d) at or above the fastest plan's calendar finish
    R + (f - R) / 0.9, confirmed on the market."""
    always = _capacity_market(tmp_path, 1.0, offers=("spot",))
    R = always.task.reserved_s
    f = fastest_run(always, always.market.offers[0])
    sc = _capacity_market(tmp_path, offers=("spot",))
    sc = replace(sc, task=replace(sc.task, deadline_s=R + (f - R) / 0.95))
    pr = P.plan(sc, "cpsat", Request(method="monolithic"), why=True)
    assert pr.status == Status.INFEASIBLE
    assert F.DEADLINE in pr.report["conflict"]
    near = pr.report["market_conflict"]
    assert math.isclose(near["run_deadline_days"] * DAY, R + 0.9 * (sc.task.deadline_s - R), rel_tol=1e-12)
    d = next(r for r in pr.report["relaxations"] if r["parameter"] == "deadline")
    assert d["required"] == math.ceil((R + (f - R) / 0.9) / DAY * 100 - 1e-9) / 100
    assert d["market_check"]["feasible_at"] == d["required"]
    assert d["apply"] == {"schedule.deadline": f"{d['required']:.2f}d"}


def test_the_spot_line_says_where_the_save_interval_comes_from(tmp_path):
    """A stated checkpoint.save_interval (1,800 s) is named as stated beside the optimum it is not; "auto" is
    named as the optimum for the combined failure rate (the plan's interval is that optimum)."""
    raw = raw_scenario(["spot"])
    raw["checkpoint"] = {"save_interval": "1800s", "mode": "sync"}
    text = REGIONS + offer_table("spot", "cloud-a", "east", "h100-sxm", "spot", 1.6,
                                 extra='preempt_per_card_hour = 0.002\nreacquire = "1h"')
    stated = P.plan(build_scenario(raw, catalog_with(tmp_path, text)), "enumerate")
    p = stated.report["market"]["preemption"]
    assert p["save_interval_s"] == 1800 and abs(p["optimal_interval_s"] - 1800) > 1 and p["interval_basis"] == "stated"
    assert "save interval 1,800 s, stated (checkpoint.save_interval; the optimum for the combined failure rate is " \
        f"{p['optimal_interval_s']:,.0f} s" in " ".join(market_lines(stated.report))
    raw["checkpoint"]["save_interval"] = "auto"
    auto = P.plan(build_scenario(raw, catalog_with(tmp_path, text)), "enumerate")
    p = auto.report["market"]["preemption"]
    assert p["save_interval_s"] == p["optimal_interval_s"] and p["interval_basis"] == "optimum"
    assert f"save interval {p['save_interval_s']:,.0f} s, auto (the optimum for the combined failure rate; " \
        in " ".join(market_lines(auto.report))


def test_scenarios_without_market_are_unchanged(tmp_path):
    raw = raw_scenario()
    del raw["market"]
    sc = build_scenario(raw, load_catalog())
    assert sc.market == MarketOptions(as_of="2026-12-01")  # no offers; the date the footing judges prices at
    assert "market" not in P.plan(sc, "enumerate").report


# ---------------------------------------------------------------------------------------------
# backends agree with the brute force on small market spaces


@st.composite
def markets(draw):
    kinds = draw(st.lists(st.sampled_from(["on-demand", "spot", "reserved"]), min_size=1, max_size=3))
    text = REGIONS
    if draw(st.booleans()):  # the offers' region prices checkpoint storage and egress
        text = text.replace('[region."cloud-a/east"]\nsource = "test"\n', '[region."cloud-a/east"]\nsource = "test"\n'
                            f'storage_gb_month = {draw(st.floats(0.0, 50.0))!r}\negress_gb = '
                            f'{draw(st.floats(0.0, 5.0))!r}\nstorage_date = "2026-10"\nstorage_source = "test"\n')
    names = []
    for i, k in enumerate(kinds):
        acc = draw(st.sampled_from(["h100-sxm", "h200"]))
        price = draw(st.floats(0.2, 6.0))
        extra = ""
        if k == "reserved":
            extra = f'term = "{draw(st.sampled_from(["7d", "30d", "365d"]))}"'
        elif k == "spot":
            rho, wait = draw(st.floats(0.0, 0.05)), draw(st.integers(0, 7200))
            extra = f'preempt_per_card_hour = {rho!r}\nreacquire = "{wait}s"'
        text += offer_table(f"o{i}", "cloud-a", "east", acc, k, price, available=draw(st.sampled_from([8, 16, 64])),
                            extra=extra)
        names.append(f"o{i}")
    deadline = draw(st.sampled_from(["10h", "5d", "20d", "60d"]))  # 10 h: near 8 H100's 8.8 h, where the waits tell
    max_cost = draw(st.one_of(st.none(), st.floats(1e3, 1e5)))
    shares = draw(st.one_of(st.none(), st.just([0.5]), st.just([0.25, 0.75])))
    keep = {"checkpoint_copies": draw(st.integers(1, 4)), "checkpoint_egress": draw(st.integers(0, 3))}
    return text, names, deadline, max_cost, shares, keep


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(markets())
def test_backends_agree_with_enumeration_on_market_spaces(tmp_path, case):
    text, names, deadline, max_cost, shares, keep = case
    raw = raw_scenario(names, deadline, max_cost)
    raw["market"].update(keep)
    if shares:
        raw["market"]["spot_shares"] = shares
    sc = build_scenario(raw, catalog_with(tmp_path, text))
    ref = brute_market(sc)
    for backend, method in (("enumerate", "auto"), ("cpsat", "monolithic"), ("highs", "monolithic"),
                            ("cpsat", "decomposed")):
        pr = P.plan(sc, backend, Request(method=method, time_limit=60))
        assert pr.status == (Status.OPTIMAL if ref else Status.INFEASIBLE), (backend, method)
        if ref:
            assert math.isclose(pr.best.metrics["cost"], ref[0][0], rel_tol=1e-9), (backend, method, ref)


# ---------------------------------------------------------------------------------------------
# SkyPilot import


def test_skypilot_csv_gives_the_native_offers(tmp_path):
    csv = tmp_path / "vms.csv"
    csv.write_text(
        "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Region,AvailabilityZone,Price,SpotPrice\n"
        "p5.48xlarge,H100,8.0,192.0,2048.0,H100,us-east-1,us-east-1a,31.2,18.4\n"
        "p5.48xlarge,H100,8.0,192.0,2048.0,H100,us-east-1,us-east-1b,31.2,18.0\n"
        "p5e.48xlarge,H200,8.0,192.0,2048.0,H200,us-east-2,us-east-2a,107.0,\n"
        "m5.large,,,2.0,8.0,,us-east-1,us-east-1a,0.096,0.04\n")
    native = tmp_path / "native"
    native.mkdir()
    (native / "offers.toml").write_text(
        '[region."aws/us-east-1"]\nsource = "x"\n[region."aws/us-east-2"]\nsource = "x"\n'
        + offer_table("a", "aws", "us-east-1", "h100-sxm", "on-demand", 31.2 / 8, available=256, date="2026-11-01")
        + offer_table("b", "aws", "us-east-1", "h100-sxm", "spot", 18.0 / 8, available=256, date="2026-11-01")
        + offer_table("c", "aws", "us-east-2", "h200", "on-demand", 107.0 / 8, available=256, date="2026-11-01"))
    cat = load_catalog()
    m = load_market([native], set(cat.accelerators))
    # a, b share provider, region, card and market with built-in offers: loaded beside them they carry their name
    # as an id suffix (issue 36), which the import, reading one file alone, has no reason to add
    assert {m.offers[n].id for n in "ab"} == {"aws/us-east-1/h100-sxm/on-demand#a", "aws/us-east-1/h100-sxm/spot#b"}
    want = {replace(o, tag="").id: replace(o, source="", tag="") for name, o in m.offers.items() if name in "abc"}
    got = from_skypilot(csv, "aws", "2026-11-01", {"H100": "h100-sxm", "H200": "h200"}, m, 256,
                        set(cat.accelerators))
    assert {k: replace(o, source="") for k, o in got.items()} == want


# ---------------------------------------------------------------------------------------------
# commands


def _cli(argv, capsys, monkeypatch):
    import sys

    from tpopt.cli.main import main
    monkeypatch.setattr(sys, "argv", ["tpopt", *argv])
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code or 0
    return code, *capsys.readouterr()


def test_catalog_offers_filters(capsys, monkeypatch):
    code, out, _ = _cli(["catalog", "offers", "--hw", "h200", "--json"], capsys, monkeypatch)
    import json
    rows = json.loads(out)
    assert code == 0 and rows and {r["accelerator"] for r in rows} == {"h200"}
    code, out, _ = _cli(["catalog", "offers", "--region", "us-east-2"], capsys, monkeypatch)
    assert code == 0 and "aws/us-east-2/h100-sxm/reserved-14d" in out and "us-east-1/" not in out
    assert "old price" in out or "older than 6 months" in out


@pytest.mark.parametrize("columns", [None, "80", "140"])
def test_catalog_offers_fits_the_output_width(columns, capsys, monkeypatch):
    """The offers table follows the output width as every catalog table does (100 columns when stdout is not a
    terminal, else COLUMNS or the terminal's), in column groups that each start with the name, no cell cut; it
    was laid out 200 columns wide whatever the width, every line padded to 200. Every offer's name, id and
    price are still printed whole, and --sources wraps its lines as the other catalogs' do."""
    import json

    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    width = int(columns or 100)
    table = ""
    for sources in ([], ["--sources"]):  # the sources' lines wrap too (they ran up to 304 columns)
        code, out, _ = _cli(["catalog", "offers", *sources], capsys, monkeypatch)
        assert code == 0
        lines = out.splitlines()
        assert max(len(ln) for ln in lines) <= width, max(lines, key=len)
        table = table or out
    monkeypatch.setenv("COLUMNS", "1000")
    _, rows_json, _ = _cli(["catalog", "offers", "--json"], capsys, monkeypatch)
    words = set(table.split())
    for r in json.loads(rows_json):
        assert {r["name"], r["id"], f"{r['price_card_hour']:g}"} <= words, r["name"]


def test_import_command_round_trips_through_a_catalog_dir(tmp_path, capsys, monkeypatch):
    csv = tmp_path / "vms.csv"
    csv.write_text("InstanceType,AcceleratorName,AcceleratorCount,Region,AvailabilityZone,Price,SpotPrice\n"
                   "p5.48xlarge,H100,8,us-west-2,us-west-2a,40.0,20.0\n")
    code, out, err = _cli(["catalog", "import", "--skypilot", str(csv), "--provider", "aws", "--date", "2026-11-01",
                           "--map", "H100=h100-sxm", "--available", "128"], capsys, monkeypatch)
    assert code == 0, err
    d = tmp_path / "imported"
    d.mkdir()
    (d / "offers.toml").write_text(out)
    m = load_catalog([d]).market
    ids = {o.id: o for o in m.offers.values()}
    assert ids["aws/us-west-2/h100-sxm/on-demand"].price_card_hour == 5.0
    assert ids["aws/us-west-2/h100-sxm/spot"].price_card_hour == 2.5
    assert ids["aws/us-west-2/h100-sxm/spot"].available == 128


def test_solve_hw_all_searches_every_accelerator_with_an_offer(tmp_path, capsys, monkeypatch):
    import tomllib
    raw = raw_scenario()
    del raw["market"]
    raw["hardware"]["accelerator"] = "h100-sxm"
    p = tmp_path / "s.toml"
    lines = []
    for table, body in raw.items():
        lines.append(f"[{table}]")
        lines += [f"{k} = {json_value(v)}" for k, v in body.items()]
    p.write_text("\n".join(lines) + "\n")
    tomllib.loads(p.read_text())
    cat = catalog_with(tmp_path, SIX)
    code, out, err = _cli(["solve", "--scenario", str(p), "--hw", "all", "--catalog", str(tmp_path / "cat"),
                           "--json"], capsys, monkeypatch)
    assert code == 0, err
    import json
    d = json.loads(out)
    accs = {row["offer"].split("/")[2] for row in d["market"]["offers"]}
    assert accs == {o.accelerator for o in cat.market.offers.values()}
    # every card with a catalog price is in (issue 38): the answer is the cheapest offer's plan, whichever card;
    # the six offers' own answer (their spot H100) is pinned in test_spot_is_chosen_in_this_market
    rows = [r for r in d["market"]["offers"] if "cost" in r]
    assert d["market"]["offer"]["id"] == min(rows, key=lambda r: r["cost"])["offer"]
    six = [r for r in rows if r["offer"].startswith(("cloud-a/", "cloud-b/"))]
    assert min(six, key=lambda r: r["cost"])["offer"] == "cloud-a/east/h100-sxm/spot"


def json_value(v):
    import json
    return json.dumps(v)


# ---------------------------------------------------------------------------------------------
# power: a site cap on a 100,000-card Llama-3-405B run


POWER_SITE = """[region."cloud-a/east"]
source = "test"
pue = 1.2
[power.h100-sxm]
board_w = 700
training_w = 700
host_overhead_w = 4600
source = "test: DGX H100 10.2 kW for 8 cards"
""" + offer_table("big", "cloud-a", "east", "h100-sxm", "on-demand", 3.0, available=200000)


def site_mw(cards):
    """PUE 1.2 x (cards x 700 W + ceil(cards / 8) x 4,600 W), in MW (derivation of the test)."""
    return 1.2 * (cards * 700 + math.ceil(cards / 8) * 4600) / 1e6


def power_scenario(tmp_path, cap):
    raw = {"model": {"name": "llama3-405b"}, "task": {"tokens": "15T", "seq_len": 8192, "global_batch": 12544},
           "schedule": {"deadline": "365d"}, "hardware": {"accelerator": "h100-sxm", "efficiency": 0.4},
           "checkpoint": {"save_interval": "auto", "mode": "sync"},
           "search": {"zero_stage": [1], "tp": [8], "pp": [14], "micro_batch": [1], "max_cards": 150000},
           "market": {"offers": ["big"], "site_power": cap}}
    return build_scenario(raw, catalog_with(tmp_path, POWER_SITE))


def test_site_power_cap_binds_exactly_when_it_limits_the_plan(tmp_path):
    """Cards are 112 x dp with dp dividing 12,544 sequences (126 layers: pp 14; a 100M-token step gives
    every pipeline at least 14 micro-batches): the fastest plan takes 100,352 cards (896 x 112: 153.5 MW at
    PUE 1.2). A 150 MW cap excludes it: the plan drops to the next count, 87,808 (784 x 112: 134.3 MW), and
    power.site binds; under 160 MW the 100,352-card plan stands and the cap does not bind."""
    assert 150 < site_mw(100352) < 160 and site_mw(87808) < 150
    req = Request(objective="time", method="monolithic")
    loose = P.plan(power_scenario(tmp_path, "160MW"), "cpsat", req)
    c = next(c for c in loose.best.constraints if c.name == F.POWER_SITE)
    assert loose.best.plan.cards == 100352 and not c.binding and loose.report["market"]["power"]["binding"] is False
    assert math.isclose(c.value, site_mw(100352), rel_tol=1e-12) and c.limit == 160
    w = loose.report["market"]["power"]
    assert math.isclose(w["site_mw"], site_mw(100352), rel_tol=1e-12)
    # energy = site power x finish time (MWh)
    assert math.isclose(w["energy_mwh"], site_mw(100352) * loose.best.metrics["finish_days"] * 24, rel_tol=1e-9)
    capped = P.plan(power_scenario(tmp_path, "150MW"), "cpsat", req)
    c = next(c for c in capped.best.constraints if c.name == F.POWER_SITE)
    assert capped.best.plan.cards == 87808 and c.binding and capped.report["market"]["power"]["binding"] is True
    assert capped.best.metrics["finish_days"] > loose.best.metrics["finish_days"]


def test_site_power_needs_a_unit_and_power_figures(tmp_path):
    from tpopt.errors import InputError
    with pytest.raises(InputError, match="not a power with a unit"):
        power_scenario(tmp_path, "150")
    cat = catalog_with(tmp_path, REGIONS + offer_table("b", "cloud-a", "east", "h20", "on-demand", 6.0))
    raw = raw_scenario(["b"])  # the built-in market has no [power.h20] (no published board power)
    raw["hardware"]["accelerator"] = ["h20"]
    raw["market"]["site_power"] = "1MW"
    with pytest.raises(InputError, match="no power figures for h20"):
        build_scenario(raw, cat)


def test_a_base_with_a_spot_share_is_a_choice(tmp_path):
    """Spot at 1.6 has 16 cards, on-demand at 3.0 has 64: a 2-hour deadline needs more than 16 cards (the
    brute force below finds none with 16), so pure spot is out, and a half-spot mix of 32 cards (16 + 16)
    bills 32 x (0.5 x 3.0 + 0.5 x 1.6) per hour, less than 32 on-demand cards."""
    text = REGIONS + offer_table("od", "cloud-a", "east", "h100-sxm", "on-demand", 3.0, available=64) + offer_table(
        "spot", "cloud-a", "east", "h100-sxm", "spot", 1.6, available=16,
        extra='preempt_per_card_hour = 0.002\nreacquire = "1h"')
    raw = raw_scenario(["od", "spot"], deadline="2h")
    raw["task"]["tokens"] = "10B"
    raw["market"]["spot_shares"] = [0.25, 0.5, 0.75]
    sc = build_scenario(raw, catalog_with(tmp_path, text))
    assert [o.market_name for o in sc.market.offers][2:] == ["75%on-demand+25%spot", "50%on-demand+50%spot",
                                                             "25%on-demand+75%spot"]
    assert brute(sc, sc.market.offers[1]) is None  # 16 spot cards cannot make the deadline
    (cost, _, plan), offer = brute_market(sc)
    assert offer.parts and offer.spot_share == 0.5 and plan.cards == 32
    for backend, method in (("enumerate", "auto"), ("cpsat", "monolithic"), ("highs", "monolithic")):
        pr = P.plan(sc, backend, Request(method=method))
        m = pr.report["market"]
        assert m["offer"]["id"] == offer.id and m["spot_share"] == 0.5 and pr.best.plan.cards == 32
        assert math.isclose(pr.best.metrics["cost"], cost, rel_tol=1e-9)
        assert math.isclose(m["preemption"]["expected_preemptions"],
                            16 * 0.002 * pr.best.metrics["train_days"] * 24, rel_tol=1e-9)


@pytest.mark.parametrize("command", [["evaluate", "--cards", "8"], ["explain", "--cards", "8"],
                                     ["sweep", "--deadline", "10d:20d:5d"]])
def test_commands_that_do_not_choose_offers_say_so(tmp_path, capsys, monkeypatch, command):
    """A given plan (evaluate, explain --cards) and a sweep read no offers: one line, exit 2. explain of the
    request chooses the offer as solve does (issue 36: tests/test_one_question.py)."""
    raw = raw_scenario(["h100-od"])
    p = tmp_path / "s.toml"
    p.write_text("\n".join(f"[{t}]\n" + "\n".join(f"{k} = {json_value(v)}" for k, v in body.items())
                           for t, body in raw.items()) + "\n")
    catalog_with(tmp_path, SIX)
    code, out, err = _cli([command[0], "--scenario", str(p), "--catalog", str(tmp_path / "cat"), *command[1:]],
                          capsys, monkeypatch)
    assert code == 2 and "[market]" in err and "Traceback" not in err, err


def test_preemptions_add_their_first_order_overhead(tmp_path):
    """First order (chapter 10.4): each event costs the redo tau / 2 plus the restore r; a preemption also
    waits d. At a fixed sync save interval, rho adds n rho (tau / 2 + r + d) to the overhead fraction."""
    sc = _two(tmp_path, 1.6, 0.01)
    spot = sc.market.offers[1]
    sub = on_offer(sc, spot)
    calm = replace(sub, market=MarketOptions())
    from tpopt.models.plan import Plan
    plan = Plan("h100-sxm", 16, zero_stage=1, tp=1, pp=1, dp=16, micro_batch=1, save_interval_s=1800.0,
                save_mode="sync", global_batch=64)
    lam = 16 * 0.01 / HOUR
    want = lam * (1800 / 2 + sc.reliability.restore_s + 3600)
    got = evaluate(sub, plan).metrics["overhead_fraction"] - evaluate(calm, plan).metrics["overhead_fraction"]
    assert math.isclose(got, want, rel_tol=1e-9)


# ---------------------------------------------------------------------------------------------
# ordinary reports: the accelerator catalog's price judged at the market catalog's date


def test_footing_flags_an_old_or_illustrative_catalog_price(tmp_path, capsys, monkeypatch):
    """design-case's rtx4090 price is dated 2025-06; the market catalog's date 2026-12-01 is
    (2026 - 2025) x 12 + (12 - 6) = 18 months later: older than 6 months, in the JSON and the text. A
    catalog dir moving the date to 2025-10-01 (4 months) drops the flag: the clock plays no part."""
    import json
    from pathlib import Path
    dc = Path(__file__).resolve().parents[1] / "examples" / "design-case.toml"
    code, out, _ = _cli(["evaluate", "--scenario", str(dc), "--cards", "48", "--json"], capsys, monkeypatch)
    pr = json.loads(out)["footing"]["price"]
    assert (pr["date"], pr["as_of"], pr["age_months"], pr["stale"]) == ("2025-06", "2026-12-01", 18, True)
    code, out, _ = _cli(["evaluate", "--scenario", str(dc), "--cards", "48"], capsys, monkeypatch)
    assert "older than 6 months (18 months at 2026-12-01)" in " ".join(out.split())
    d = tmp_path / "cat"
    d.mkdir()
    (d / "offers.toml").write_text('as_of = "2025-10-01"\n')
    code, out, _ = _cli(["evaluate", "--scenario", str(dc), "--cards", "48", "--catalog", str(d), "--json"],
                        capsys, monkeypatch)
    pr = json.loads(out)["footing"]["price"]
    assert (pr["age_months"], pr["stale"]) == (4, False)
    code, out, _ = _cli(["evaluate", "--scenario", str(dc), "--hw", "h20", "--cards", "48"], capsys, monkeypatch)
    assert "ILLUSTRATIVE, not a market quote, older than 6 months" in " ".join(out.split())


# ---------------------------------------------------------------------------------------------
# checkpoints: storage in the offer's region, egress out of it


def test_checkpoint_storage_and_egress_are_cost_lines_in_the_budget(tmp_path, capsys, monkeypatch):
    """On the shipped aws/us-east-1 on-demand H100 offer (S3 Standard 0.023 USD per GB-month, egress 0.09
    USD per GB): qwen3-0.6b's checkpoint is params x 14 B; 3 copies kept for the run, 2 sent out."""
    import json
    raw = raw_scenario(["aws-use1-h100-od"])
    raw["market"].update(checkpoint_copies=3, checkpoint_egress=2)
    sc = build_scenario(raw, load_catalog())
    pr = P.plan(sc, "enumerate")
    gb = param_count(sc.model) * 14 / 1e9
    f = pr.best.metrics["finish_days"] * DAY
    o = sc.market.offers[0]
    storage, egress = 3 * gb * 0.023 * f / MONTH, 2 * gb * 0.09
    compute = pr.best.plan.cards * o.price_card_hour * f / HOUR
    m = pr.best.metrics
    assert math.isclose(m["checkpoint_storage_cost"], storage, rel_tol=1e-9)
    assert math.isclose(m["checkpoint_egress_cost"], egress, rel_tol=1e-9)
    assert math.isclose(m["cost"], compute + storage + egress, rel_tol=1e-9)
    ref = brute_market(sc)
    assert math.isclose(m["cost"], ref[0][0], rel_tol=1e-9)
    c = pr.report["market"]["checkpoints"]
    assert (c["copies"], c["egress_copies"], c["date"]) == (3, 2, "2025-06") and "S3" in c["source"]
    assert c["notes"] == ["storage price older than 6 months (18 months at 2026-12-01)"]  # 12 + (12 - 6)
    # the budget counts them: a cap between the compute bill and the whole bill refuses this plan
    raw["cost"] = {"max_cost": (compute + m["cost"]) / 2}
    capped = P.plan(build_scenario(raw, load_catalog()), "enumerate")
    assert capped.best is None or capped.best.metrics["cost"] <= raw["cost"]["max_cost"] * (1 + 1e-9)
    # the text prints the cost lines
    p = tmp_path / "s.toml"
    p.write_text('[model]\nname = "qwen3-0.6b"\n[task]\ntokens = "20B"\nseq_len = 4096\nglobal_batch = 64\n'
                 '[schedule]\ndeadline = "20d"\n[hardware]\naccelerator = ["h100-sxm", "h200"]\nefficiency = 0.4\n'
                 '[checkpoint]\nsave_interval = "auto"\nmode = "sync"\n[search]\nzero_stage = [1]\ntp = [1, 2]\n'
                 'pp = [1]\nmicro_batch = [1, 2]\nmax_cards = 64\n[market]\noffers = ["aws-use1-h100-od"]\n'
                 'checkpoint_copies = 3\ncheckpoint_egress = 2\n')
    code, out, err = _cli(["solve", "--scenario", str(p)], capsys, monkeypatch)
    text = " ".join(out.split())
    assert code == 0, err
    usd = lambda x: f"{x:,.0f}" if x >= 100 else f"{x:,.2f}"  # noqa: E731
    assert f"checkpoint storage {usd(storage)} USD (3 x {gb:,.1f} GB checkpoints at 0.023 USD per GB-month" in text
    assert f"egress {usd(egress)} USD (2 copies out of aws/us-east-1 at 0.09 USD per GB)" in text
    assert json.loads(_cli(["solve", "--scenario", str(p), "--json"], capsys, monkeypatch)[1])["market"][
        "checkpoints"]["priced"]


@pytest.mark.parametrize("line,says", [("storage_gb_month = -1\negress_gb = 0\nstorage_date = \"2026-10\"\n"
                                        "storage_source = \"t\"\n", "negative"),
                                       ("storage_gb_month = 0.02\negress_gb = 0.1\nstorage_source = \"t\"\n",
                                        "missing storage_date")])
def test_bad_storage_prices_are_one_line(tmp_path, line, says):
    from tpopt.errors import InputError
    text = REGIONS.replace('[region."cloud-b/west"]\nsource = "test"\n',
                           '[region."cloud-b/west"]\nsource = "test"\n' + line)
    with pytest.raises(InputError, match=says):
        catalog_with(tmp_path, text)


# ---------------------------------------------------------------------------------------------
# tpopt sweep --pareto energy


def test_sweep_energy_cost_front_matches_a_brute_force(tmp_path, capsys, monkeypatch):
    """Energy per plan = PUE x (cards x training W + hosts x host W) x finish / 3.6e9 MWh with the figures
    written here (rtx4090 given a low draw in a catalog dir so that it trades energy against cost with the
    H100; h20 has no published board power, so no power figure); the front is every plan that no other plan
    beats or ties on both energy and cost."""
    import json
    from pathlib import Path
    d = tmp_path / "cat"
    d.mkdir()
    (d / "offers.toml").write_text('[power.rtx4090]\nboard_w = 450\ntraining_w = 100\nhost_overhead_w = 300\n'
                                   'source = "test"\n')
    watts = {"h100-sxm": (700, 4600), "rtx4090": (100, 300)}
    sweep = Path(__file__).resolve().parents[1] / "examples" / "design-case-sweep.toml"
    argv = ["sweep", "--scenario", str(sweep), "--hw", "h100-sxm,rtx4090,h20", "--deadline", "20d:40d:5d",
            "--catalog", str(d), "--pareto", "energy", "-q"]
    code, out, err = _cli([*argv, "--json"], capsys, monkeypatch)
    assert code == 0, err
    e = json.loads(out)["energy"]
    assert e["pue"] == 1.2 and "h20" in e["no_power_figures"]
    plans = [p for p in e["plans"] if p["accelerator"] in watts]
    for p in plans:
        card_w, host_w = watts[p["accelerator"]]
        assert math.isclose(p["energy_mwh"], 1.2 * (p["cards"] * card_w + p["hosts"] * host_w) * p["finish_days"]
                            * 24 / 1e6, rel_tol=1e-12)
    front = {i for i, p in enumerate(plans)
             if not any(q["energy_mwh"] <= p["energy_mwh"] and q["cost"] <= p["cost"]
                        and (q["energy_mwh"], q["cost"]) != (p["energy_mwh"], p["cost"]) for q in plans)}
    assert {i for i, p in enumerate(plans) if p["front"]} == front
    assert 2 <= len(front) < len(plans)  # a trade-off, and dominated plans
    assert {p["accelerator"] for i, p in enumerate(plans) if i in front} == {"h100-sxm", "rtx4090"}
    assert all(not p["front"] and p["energy_mwh"] is None for p in e["plans"] if p["accelerator"] == "h20")
    code, out, _ = _cli(argv, capsys, monkeypatch)
    assert "Energy vs cost" in out and "no power figures for h20" in " ".join(out.split())
    assert sum(line.lstrip().startswith("*") for line in out.splitlines()) == len(front)


def test_offer_keys_are_declared_and_offer_toml_writes_them_back():
    """The known offer keys are the declared ones; every offer of the built-in market, written by offer_toml,
    uses declared keys only, states every required key, and reads back to the same offer."""
    assert OFFER_KEYS == tuple(f.name for f in fields(OfferKeys))
    required = {f.name for f in fields(OfferKeys) if spec(f).required}
    assert {"provider", "region", "accelerator", "market", "price_card_hour", "available", "date", "source"} == required
    cat = load_catalog()
    assert cat.market.offers
    for name, offer in cat.market.offers.items():
        table = tomllib.loads(offer_toml(name, offer))["offer"][name]
        assert set(table) <= set(OFFER_KEYS) and required <= set(table), name
        back = build_offer(name, table, cat.market, set(cat.accelerators))
        assert (back.price_card_hour, back.available, back.market, back.term_s) == (
            offer.price_card_hour, offer.available, offer.market, offer.term_s), name


def test_every_key_of_the_builtin_market_is_declared():
    """The regions, power tables and defaults of the built-in offers.toml use declared keys only, and the regions
    that price storage state all of its keys."""
    raw = tomllib.loads(BUILTIN.read_text())
    assert set(raw.get("defaults", {})) <= set(DEFAULT_KEYS)
    for name, t in raw["region"].items():
        assert set(t) <= set(REGION_KEYS), name
        assert not (set(t) & set(STORAGE_KEYS)) or set(STORAGE_KEYS) <= set(t), name
    for name, t in raw.get("power", {}).items():
        assert set(t) <= set(POWER_KEYS), name
