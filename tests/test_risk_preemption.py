"""Issue 35 (a new user's trial): the ``[risk]`` table's preemptions are charged in the nominal finish, as a spot
offer's are.

Reported: 1,024 H100 at 0.05 preemptions per card-day with 2 h to reacquire finished at the same nominal 2.34 d
with and without them; only P(on time) moved (the finish-time law read them, the long-run overhead did not). A
spot offer's preemptions were charged in both. The derivation the tests below pin (first-order, the overhead
``L(tau) = c / tau + lam (tau / 2 + w + r)`` of models/reliability.py with the preemptions in ``lam`` and the
reacquisition on top):

    preemptions per second   lam_p = n rho = 1,024 x 0.05 / 86,400 s = 51.2 a day
    seconds lost per event   d + r + tau / 2 + w = 7,200 + 300 + 600 / 2 + 0 = 7,800 s   (sync saves, tau 600 s)
    delay per useful second  lam_p x 7,800 = 51.2 x 7,800 / 86,400 = 4.6222...
    expected preemptions     lam_p x W (W = iterations x step, the useful training time)

so the finish moves by W x 4.6222 and the training time W does not move. The user's hand estimate, 51 a day x
(2 h + the lost work) over the run, is this figure.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tpopt import api
from tpopt.models import terms as T
from tpopt.optimizer.footing import stated_inputs

DAY = 86_400.0
EXAMPLE = "examples/llama3-8b-confidence.toml"  # Llama 3 8B, 2T tokens on H100, restore 300 s, step_sigma 0.15
RISK = {"risk.preempt_per_card_day": 0.05, "risk.reacquire": "2h"}
PLAN = {"cards": 1024, "tp": 2, "pp": 1, "zero_stage": 1, "micro_batch": 1, "save_mode": "sync",
        "save_interval": "600s"}
PER_EVENT_S = 7200 + 300 + 600 / 2  # reacquire + restore + half a save interval of redone work
LAM_PER_DAY = 1024 * 0.05
DELAY_PER_USEFUL_S = LAM_PER_DAY * PER_EVENT_S / DAY  # 4.6222...


def test_the_derivation():
    assert DELAY_PER_USEFUL_S == pytest.approx(4.62222, abs=1e-5)


def test_nominal_finish_charges_the_risk_tables_preemptions():
    calm = api.evaluate(EXAMPLE, **PLAN)
    spot = api.evaluate(EXAMPLE, **PLAN, **RISK)
    w = calm.metrics["train_days"]
    assert spot.metrics["train_days"] == pytest.approx(w, rel=1e-12)  # the step does not move
    delay = spot.metrics["finish_days"] - calm.metrics["finish_days"]
    assert delay == pytest.approx(w * DELAY_PER_USEFUL_S, rel=1e-9)
    assert delay > 5.0  # days: before the fix 0 (the nominal finish ignored them)


def test_risk_table_and_spot_offer_charge_alike():
    """The same rate and delay, once from ``[risk]`` and once as a spot offer's terms (what the market solve sets
    on each offer's sub-problem): the same overhead, save interval and finish-time law."""
    sc = api.scenario(EXAMPLE, RISK)
    rho, wait = 0.05 / DAY, 7200.0
    offer = replace(sc, risk=replace(sc.risk, preempt_rate_per_card_s=0.0, reacquire_s=0.0),
                    market=replace(sc.market, preempt_per_card_s=rho, reacquire_s=wait))
    assert T.preemption_terms(sc) == pytest.approx((rho, wait))
    assert T.preemption_terms(offer) == pytest.approx((rho, wait))
    for mode in ("sync", "async"):
        assert float(T.overhead(sc, mode, 1024, 600.0)) == pytest.approx(float(T.overhead(offer, mode, 1024, 600.0)))
        assert float(T.optimal_save_interval(sc, 1024, mode)) == pytest.approx(
            float(T.optimal_save_interval(offer, 1024, mode)))
    assert T.law_risk(sc).preempt_rate_per_card_s == pytest.approx(T.law_risk(offer).preempt_rate_per_card_s)
    assert T.law_risk(sc).reacquire_s == T.law_risk(offer).reacquire_s
    share = float(T.preemption_overhead(sc, "sync", 1024, 600.0))
    assert share == pytest.approx(DELAY_PER_USEFUL_S, rel=1e-12)


def test_law_mean_agrees_with_the_nominal_finish():
    """At sigma 0 and a short save interval (lam_p tau = 0.036, where first order holds to about lam_p tau / 2) the
    law's mean and the nominal finish agree within 3 %; before the fix the nominal was 4.3x short of the mean."""
    plan = dict(PLAN, save_interval="60s")
    ev = api.evaluate(EXAMPLE, **plan, **RISK, **{"risk.step_sigma": 0.0})
    sc = api.scenario(EXAMPLE, {**RISK, "risk.step_sigma": 0.0})
    law = T.finish_law(sc, "h100-sxm", "sync", 1024, 60.0, ev.metrics["step_s"])
    assert law.mean() / DAY == pytest.approx(ev.metrics["finish_days"], rel=0.03)


def test_footing_states_the_preemptions():
    calm = api.evaluate(EXAMPLE, **PLAN)
    spot = api.evaluate(EXAMPLE, **PLAN, **RISK)
    sc = api.scenario(EXAMPLE, RISK)
    stated = {s["input"]: s for s in stated_inputs(sc, spot.plan_dict(), spot.metrics)}
    pre = stated["preemptions"]
    assert pre["expected_preemptions"] == pytest.approx(LAM_PER_DAY * calm.metrics["train_days"], rel=1e-9)
    assert pre["overhead"] == pytest.approx(DELAY_PER_USEFUL_S, rel=1e-12)
    assert "51.2 a day on 1,024 cards" in pre["stated"]
    # the card MTBF line keeps the failures' share only (at the same save interval: the same as without them)
    before = {s["input"]: s for s in stated_inputs(api.scenario(EXAMPLE), calm.plan_dict(), calm.metrics)}
    assert "preemptions" not in before
    assert stated["card MTBF"]["failure_overhead"] == pytest.approx(before["card MTBF"]["failure_overhead"], rel=1e-9)
