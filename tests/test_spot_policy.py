"""Spot with a deadline-aware fallback (tpopt.models.spot_policy, tpopt.optimizer.spot_policy).

The break-even figures are derived here by hand from the module's stated relations (expected seconds x
price, the normal chance test solved as a quadratic), not read from the code; the law itself is checked
against a Monte Carlo of the process it describes (per-day availability, mixed-Poisson preemptions)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tpopt.errors import InputError
from tpopt.models import spot_policy as S
from tpopt.models.units import DAY, HOUR
from tpopt.optimizer.spot_policy import decide

Z90 = 1.2815515655446004  # Phi^-1(0.90)
P_OD = 4.0  # on-demand USD per card-hour

# A run of 10 days on demand (sd 0.5 d) on 8 cards; saves every 2 h, 30 min restore: a switch costs
# s = 0.5 h + 2 h / 2 = 1.5 h = 0.0625 d. Spot: no preemptions, capacity on 80 % of days, so
# g = 0.8, Var[P(t)] = 0.8 x 0.2 x DAY x t, i.e. 0.16 x days^2 per day of t.
RUN = S.Run(cards=8, ondemand_mean_s=10 * DAY, ondemand_sd_s=0.5 * DAY, save_interval_s=2 * HOUR,
            restore_s=0.5 * HOUR)
CALM = S.SpotTerms(preempt_per_card_hour=0.0, reacquire_s=0.0, availability=0.8, rate_cv=0.0)
SWITCH_D = 0.0625


def hand_latest_switch_days(deadline_d: float) -> float:
    """Largest x (days) with D - mu0 - s - 0.2 x = z sqrt(0.25 + 0.16 x): the smaller root of
    0.04 x^2 - (0.4 h + 0.16 z^2) x + (h^2 - 0.25 z^2) = 0, h = D - mu0 - s (days); no root >= 0: 0."""
    h = deadline_d - 10 - SWITCH_D
    a, b, c = 0.04, -(0.4 * h + 0.16 * Z90**2), h * h - 0.25 * Z90**2
    if c < 0:  # the margin at d -> 0+ is already below z s0
        return 0.0
    return (-b - math.sqrt(b * b - 4 * a * c)) / (2 * a)


def hand_cost(d_days: float, spot_price: float) -> float:
    """C(d) = n / 3600 x (p_od (mu0 + s - 0.8 d) + p_spot 0.8 d) in USD, times in hours."""
    return 8 * (P_OD * (10 + SWITCH_D - 0.8 * d_days) * 24 + spot_price * 0.8 * d_days * 24)


def test_latest_switch_matches_the_hand_quadratic():
    x = hand_latest_switch_days(12.0)
    assert x == pytest.approx(3.769, abs=2e-3)  # (1.03779 - sqrt(0.54208)) / 0.08, worked by hand
    assert S.latest_switch(CALM, RUN, 12 * DAY, 0.9) / DAY == pytest.approx(x, rel=1e-6)


def test_cheap_spot_and_loose_deadline_choose_the_fallback_policy():
    # The policy beats all on-demand iff 0.8 d* (p_od - p_spot) > p_od s: p_spot < p_od (1 - s / (0.8 d*)).
    x = hand_latest_switch_days(12.0)
    pays_below = P_OD * (1 - SWITCH_D / (0.8 * x))
    assert pays_below == pytest.approx(0.9793 * P_OD, abs=1e-3 * P_OD)
    d = decide(CALM, RUN, 12 * DAY, 0.9, spot_price=0.5 * P_OD, ondemand_price=P_OD)
    assert d.meets and d.chosen.name == f"spot until day {x:.1f}, then on-demand"
    assert d.chosen.cost == pytest.approx(hand_cost(x, 0.5 * P_OD), rel=1e-6)
    assert d.chosen.p_on_time == pytest.approx(0.9, abs=1e-6)  # d* sits on the chance constraint
    # all spot: mean mu0 / g = 12.5 d > 12 d: P < 0.5, not admissible; all on-demand P = Phi(4)
    spot = next(c for c in d.candidates if c.name == "all spot")
    assert spot.mean_finish_s / DAY == pytest.approx(12.5) and spot.p_on_time < 0.5
    assert d.candidates[0].p_on_time == pytest.approx(S.normal_cdf(4.0))
    # just below the break-even price: still chosen; just above: all on-demand
    assert decide(CALM, RUN, 12 * DAY, 0.9, pays_below - 0.01, P_OD).chosen.switch_s == pytest.approx(x * DAY)
    assert decide(CALM, RUN, 12 * DAY, 0.9, pays_below + 0.01, P_OD).chosen.name == "all on-demand"


def test_spot_near_on_demand_price_is_not_chosen():
    d = decide(CALM, RUN, 12 * DAY, 0.9, spot_price=0.99 * P_OD, ondemand_price=P_OD)
    assert d.meets and d.chosen.name == "all on-demand"
    assert d.chosen.cost == pytest.approx(8 * P_OD * 10 * 24)


def test_tight_deadline_needs_on_demand_from_day_zero():
    # D = 10.7 d: at d -> 0+ the margin D - mu0 - s = 0.6375 d is below z s0 = 0.6408 d: no d > 0 meets 90 %;
    # all on-demand meets it (Phi(0.7 / 0.5) = Phi(1.4) = 0.919), however cheap spot is.
    assert hand_latest_switch_days(10.7) == 0.0
    d = decide(CALM, RUN, 10.7 * DAY, 0.9, spot_price=0.1 * P_OD, ondemand_price=P_OD)
    assert d.chosen.name == "all on-demand" and d.meets
    assert d.chosen.p_on_time == pytest.approx(S.normal_cdf(1.4))
    # D = 10.6 d: even all on-demand misses (Phi(1.2) = 0.885): said, not hidden
    miss = decide(CALM, RUN, 10.6 * DAY, 0.9, spot_price=0.1 * P_OD, ondemand_price=P_OD)
    assert not miss.meets and miss.chosen.name == "all on-demand"


def test_very_loose_deadline_runs_all_spot():
    # D = 30 d: all spot, mean 12.5 d, sd sqrt(0.25 + 0.16 x 12.5) / 0.8 = 1.875 d: P = Phi(17.5 / 1.875) ~ 1
    d = decide(CALM, RUN, 30 * DAY, 0.9, spot_price=0.5 * P_OD, ondemand_price=P_OD)
    assert d.chosen.name == "all spot"
    assert d.chosen.cost == pytest.approx(8 * 0.5 * P_OD * 0.8 * 12.5 * 24)  # a x mu0 / g spot hours billed
    assert S.all_spot_var(CALM, RUN) == pytest.approx((1.875 * DAY) ** 2)


def test_break_even_price_with_preemptions_by_hand():
    # rho = 0.01 per card-hour on 8 cards: lam = 0.08 / h. Each preemption loses r + d_r + tau / 2 =
    # 0.5 + 0.5 + 1 = 2 h (L), of which d_r = 0.5 h is unbilled: p* = p_od (1 - 0.16) / (1 - 0.04) = 0.875 p_od.
    terms = S.SpotTerms(preempt_per_card_hour=0.01, reacquire_s=0.5 * HOUR, availability=1.0, rate_cv=0.0)
    assert S.break_even_price(terms, RUN, P_OD) == pytest.approx(0.875 * P_OD)
    # the expected cost's slope in d changes sign there: equal cost at 1 and 2 days at p*
    at = [S.expected_cost(terms, RUN, k * DAY, 0.875 * P_OD, P_OD) for k in (1, 2)]
    assert at[0] == pytest.approx(at[1], rel=1e-12)
    below = [S.expected_cost(terms, RUN, k * DAY, 0.85 * P_OD, P_OD) for k in (1, 2)]
    above = [S.expected_cost(terms, RUN, k * DAY, 0.90 * P_OD, P_OD) for k in (1, 2)]
    assert below[1] < below[0] and above[1] > above[0]


@pytest.mark.parametrize("terms", [CALM, S.SpotTerms(preempt_per_card_hour=0.02, reacquire_s=HOUR,
                                                     availability=0.7, rate_cv=0.5)])
def test_the_monotonicity_the_choice_relies_on(terms):
    full = S.full_spot_s(terms, RUN)
    grid = np.linspace(full * 1e-3, full * 0.999, 400)
    means = [S.finish_mean(terms, RUN, d) for d in grid]
    varis = [S.finish_var(terms, RUN, d) for d in grid]
    assert all(b >= a for a, b in zip(means, means[1:], strict=False))
    assert all(b > a for a, b in zip(varis, varis[1:], strict=False))
    for deadline in (10.8 * DAY, 12 * DAY, 14 * DAY):
        p = [S.p_on_time(terms, RUN, d, deadline) for d in grid]
        above_half = [x for x in p if x >= 0.5]
        assert all(b <= a for a, b in zip(above_half, above_half[1:], strict=False))
        d_star = S.latest_switch(terms, RUN, deadline, 0.9)
        assert all((x >= 0.9) == (d <= d_star) for d, x in zip(grid, p, strict=True) if abs(d - d_star) > 1.0)


def test_the_normal_law_against_a_monte_carlo_of_the_process():
    """Whole days of spot (Bernoulli availability per day), a gamma rate, Poisson preemptions each losing
    r + d_r + U tau, then the rest on demand (normal): the normal law's mean and variance exact, its CDF within
    0.025 everywhere and 0.012 near the 90 % level."""
    terms = S.SpotTerms(preempt_per_card_hour=0.01, reacquire_s=0.5 * HOUR, availability=0.8, rate_cv=0.5)
    rng = np.random.default_rng(38)
    n, days = 200_000, 4
    avail = rng.binomial(days, terms.availability, n) * DAY
    shape = 1 / terms.rate_cv**2
    rate = rng.gamma(shape, S.preemptions_per_s(terms, RUN) / shape, n)
    count = rng.poisson(rate * avail)
    lost = count * (RUN.restore_s + terms.reacquire_s) + np.array(
        [rng.uniform(0, RUN.save_interval_s, k).sum() for k in count])
    progress = avail - lost
    work = rng.normal(RUN.ondemand_mean_s, RUN.ondemand_sd_s, n)
    finish = days * DAY + S.switch_s(RUN) + work - progress
    assert finish.mean() == pytest.approx(S.finish_mean(terms, RUN, days * DAY), rel=2e-3)
    assert finish.var() == pytest.approx(S.finish_var(terms, RUN, days * DAY), rel=0.03)
    deadlines = np.linspace(9, 14, 201) * DAY
    errors = np.array([float((finish <= dl).mean()) - S.p_on_time(terms, RUN, days * DAY, dl) for dl in deadlines])
    assert np.abs(errors).max() < 0.025  # measured 0.021 (4 whole days: a lumpy binomial)
    near_90 = [e for e, dl in zip(errors, deadlines, strict=True)
               if abs(S.p_on_time(terms, RUN, days * DAY, dl) - 0.9) < 0.01]
    assert near_90 and max(np.abs(near_90)) < 0.012  # at the chance level: optimistic by under a point


def test_bad_terms_are_refused():
    with pytest.raises(InputError):
        S.SpotTerms(preempt_per_card_hour=0.0, reacquire_s=0.0, availability=0.0)
    with pytest.raises(InputError):
        S.SpotTerms(preempt_per_card_hour=-1.0, reacquire_s=0.0)
    with pytest.raises(InputError):
        S.latest_switch(CALM, RUN, 12 * DAY, 0.4)


# ---------------------------------------------------------------------------------------------
# in a market solve: the offers' terms read from the catalog, the entry in the report


def _market(tmp_path, availability="", confidence=0.9, deadline="20d"):
    from tpopt.catalogs import load_catalog
    from tpopt.catalogs.scenario import build_scenario

    offers = ('[region."cloud-a/east"]\nsource = "test"\n'
              '[offer.od]\nprovider = "cloud-a"\nregion = "east"\naccelerator = "h100-sxm"\nmarket = "on-demand"\n'
              'price_card_hour = 3.0\navailable = 64\ndate = "2026-10"\nsource = "test offer"\n'
              '[offer.spot]\nprovider = "cloud-a"\nregion = "east"\naccelerator = "h100-sxm"\nmarket = "spot"\n'
              'price_card_hour = 1.2\navailable = 64\ndate = "2026-10"\nsource = "test offer"\n'
              'preempt_per_card_hour = 0.002\nreacquire = "1h"\n' + availability)
    d = tmp_path / "cat"
    d.mkdir(exist_ok=True)
    (d / "offers.toml").write_text(offers)
    raw = {"model": {"name": "qwen3-0.6b"}, "task": {"tokens": "20B", "seq_len": 4096, "global_batch": 64},
           "schedule": {"deadline": deadline, **({"confidence": confidence} if confidence else {})},
           "hardware": {"accelerator": "h100-sxm", "efficiency": 0.4},
           "checkpoint": {"save_interval": "auto", "mode": "sync"},
           "search": {"zero_stage": [1], "tp": [1, 2], "pp": [1], "micro_batch": [1, 2], "max_cards": 64},
           "market": {"offers": ["od", "spot"]}}
    return build_scenario(raw, load_catalog([d]))


def test_a_market_solve_reports_the_policy_with_its_terms(tmp_path):
    from tpopt.optimizer import plan as P
    from tpopt.presentation import market_lines

    sc = _market(tmp_path, 'availability = "60%"\navailability_source = "measured: 3 days in 5"\n')
    spot = next(o for o in sc.market.offers if o.market == "spot")
    assert spot.availability == pytest.approx(0.6) and spot.preempt_rate_cv is None
    pr = P.plan(sc, "enumerate")
    entry = pr.report["market"]["spot_policy"]
    e = entry["pairs"][entry["best"]]
    assert (e["spot_offer"], e["ondemand_offer"]) == ("cloud-a/east/h100-sxm/spot", "cloud-a/east/h100-sxm/on-demand")
    t = e["terms"]
    assert (t["availability_per_day"], t["availability_source"]) == (0.6, "measured: 3 days in 5")
    assert t["rate_cv"] == S.DEFAULT_RATE_CV and t["rate_cv_source"] == S.DEFAULT_RATE_CV_SOURCE
    assert e["chosen"]["p_on_time"] >= 0.9 and e["meets_confidence"]
    od = next(c for c in e["candidates"] if c["policy"] == "all on-demand")
    # all on-demand: cards x 3.0 USD x mean finish in hours
    assert od["expected_cost"] == pytest.approx(e["cards"] * 3.0 * t["ondemand_mean_days"] * 24)
    # 1.2 USD spot at a 20-day deadline for a run of well under a day: all spot, a x mu0 / g hours billed
    lam = e["cards"] * 0.002
    assert e["chosen"]["policy"] == "all spot"
    # p* = p_od (1 - lam L) / (1 - lam d_r): L = restore + tau / 2 (the switch's loss) + the 1 h reacquire
    assert e["break_even_spot_price"] == pytest.approx(
        3.0 * (1 - lam * (t["switch_s"] + 3600) / 3600) / (1 - lam * 1.0), rel=1e-9)
    text = "\n".join(market_lines(pr.report))
    assert "Spot policy (cloud-a/east/h100-sxm/spot then cloud-a/east/h100-sxm/on-demand" in text
    assert "capacity obtainable on 60 % of days (measured: 3 days in 5)" in text


def test_no_policy_without_a_confidence_and_bad_availability_refused(tmp_path):
    from tpopt.optimizer import plan as P

    assert "spot_policy" not in P.plan(_market(tmp_path, confidence=None), "enumerate").report["market"]
    with pytest.raises(InputError, match="availability"):
        _market(tmp_path, 'availability = "150%"\n')


def test_the_report_says_when_no_way_meets_the_level():
    from tpopt.models.market import Offer
    from tpopt.optimizer.spot_policy import decision_dict
    from tpopt.presentation import spot_policy_lines

    od = Offer("c", "r", "h100-sxm", "on-demand", P_OD, 64, "2026-10", "test")
    spot = Offer("c", "r", "h100-sxm", "spot", 0.1 * P_OD, 64, "2026-10", "test")
    miss = decide(CALM, RUN, 10.6 * DAY, 0.9, spot_price=0.1 * P_OD, ondemand_price=P_OD)
    entry = {"pairs": [decision_dict(miss, CALM, RUN, spot, od, 0.9)], "best": None}
    (line,) = spot_policy_lines(entry)
    # all on-demand is the nearest: Phi((10.6 - 10) / 0.5) = Phi(1.2) = 88.5 %
    assert line == ("Spot policy: no way to run c/r/h100-sxm/spot / c/r/h100-sxm/on-demand meets P(on time) >= 90 %; "
                    "all on-demand is the nearest (P(on time) 88.5 %)")


def test_a_spot_offer_without_the_plan_s_cards_is_not_paired(tmp_path):
    from types import SimpleNamespace

    from tpopt.optimizer.spot_policy import pairs

    sc = _market(tmp_path)
    od, spot = sorted(sc.market.offers, key=lambda o: o.market)  # on-demand, spot (64 cards available)
    for cards, want in ((64, [spot.id]), (65, [])):
        ev = SimpleNamespace(plan=SimpleNamespace(cards=cards))
        assert [p[0].id for p in pairs([(od, sc, ev), (spot, sc, None)])] == want
