"""The finish-time distribution, the chance-constrained solve and the whole-run simulator (issue 28).

Golden figures are derived here, not read from the code: the anchors' RMS log error (docs/model.md table), the
closed forms of the lognormal and of the compound Poisson moments, and the simulator as the oracle.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import integrate, stats

from tests.oracle import assert_agree_with_enumeration, solve_every_backend
from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import build_scenario, load_scenario
from tpopt.cli.main import cli
from tpopt.errors import InputError
from tpopt.models import finish as Fn
from tpopt.models import terms as T
from tpopt.models.evaluate import evaluate
from tpopt.models.simulate import simulate
from tpopt.models.units import DAY
from tpopt.optimizer.core import solve
from tpopt.optimizer.result import Request, Status

ROOT = Path(__file__).resolve().parents[1]
DESIGN = str(ROOT / "examples" / "design-case.toml")
CAT = load_catalog()


def run(*args):
    kw = {"mix_stderr": False} if "mix_stderr" in inspect.signature(CliRunner.__init__).parameters else {}
    return CliRunner(**kw).invoke(cli, list(args), catch_exceptions=False)


def exposure(cards=1024.0, tau=965.0, lag=0.0, spikes=7 * DAY, risk=None):
    return Fn.Exposure(cards=cards, tau=tau, lag=lag, restore=120.0, card_mtbf_s=337 * DAY,
                       spike_interval_s=spikes, risk=risk or Fn.Risk())


def rms_log(errors_pct):
    return math.sqrt(sum(math.log(1 + e / 100) ** 2 for e in errors_pct) / len(errors_pct))


def test_step_sigmas_are_the_validation_tables_rms_log_errors():
    # docs/model.md validation tables, leave-one-out column: Narayanan (10 runs), Korthikanti (4 x full / sp+sel)
    loo = [-5.2, -1.5, 4.2, 1.9, -0.3, -3.2, -0.3, -2.6, -2.4, -4.9, 3.3, 1.3, 2.3, 0.6, 1.1, -2.2, 4.0, 4.2]
    assert rms_log(loo) == pytest.approx(CAT.perf("a100-80gb-sxm").residual_sigma, abs=1e-3)
    # benchmarks/refit_catalog.py: the H100 Megatron-Core runs inside the calibration envelope, leave-one-out
    # errors (mb2511 405B, mb2511 8B FSDP, mb 70B, D1, D2; the catalog's value comes from the unrounded errors, so
    # within the 0.05 % rounding of the printed ones)
    assert rms_log([-10.4, 4.1, 6.3, 3.1, -1.3]) == pytest.approx(CAT.perf("h100-sxm").residual_sigma, abs=1e-3)
    # GB200: four runs (mb2511 8B, B4, B5, B6) estimate its own spread (leave-one-out column of
    # benchmarks/validate_published.py after the refit; B4 with its offloaded layers, no recompute; B5 MXFP8 at the
    # block-scaled GEMMs' measured rate)
    assert rms_log([-2.0, -2.8, -3.8, 8.6]) == pytest.approx(CAT.perf("gb200-nvl72").residual_sigma, abs=1e-3)
    # the modern table's leave-one-source-out column (benchmarks/validate_published.py, megatron-bridge-modern, its
    # nine rows in order; the A100 tables' RMS is 0.035): the default of cards no table covers, and of B200 (two
    # runs estimate no spread). Its RMS log error rounds to 0.087 (the RMS of the percentages alone, 0.083, is
    # not the log-sd)
    loso = [-7.7, 3.9, -9.1, -11.9, -9.9, -12.5, -5.3, 3.0, 5.6]
    assert round(rms_log(loso), 3) == 0.087 == Fn.DEFAULT_STEP_SIGMA
    assert round(math.sqrt(sum((e / 100) ** 2 for e in loso) / len(loso)), 3) == 0.083
    assert list(Fn.VALIDATION_LOSO_ERRORS) == loso
    assert CAT.perf("b200").residual_sigma == Fn.DEFAULT_STEP_SIGMA and CAT.perf("b200").residual_sigma_source
    speeds = [1.09, 1.07, 1.18, 1.23, 1.09, 1.28, 1.13]  # docs/model.md "Public anchors", speed column
    assert round(math.sqrt(sum(math.log(s) ** 2 for s in speeds) / len(speeds)), 3) == 0.154  # other stacks
    assert Fn.residual_sigma([1.1, 1 / 1.1]) == pytest.approx(math.log(1.1))


@pytest.mark.parametrize("acc, stack, sigma", [
    ("a100-80gb-sxm", "megatron-lm-2021", 0.029), ("a100-80gb-sxm", "megatron-core", 0.054),  # its stack, another
    ("h100-sxm", "megatron-core", 0.061), ("h200", "megatron-core", Fn.DEFAULT_STEP_SIGMA),
    ("mi355x", "megatron-core", Fn.DEFAULT_STEP_SIGMA)])
def test_a_plan_reads_its_cards_sigma_and_an_uncovered_card_the_default(acc, stack, sigma):
    # per-operation model (no hardware.efficiency): the catalog entry without residual_sigma is not sigma 0;
    # off the stack a card was measured on, the stack's own spread when larger (tests/test_confidence_sigma.py)
    raw = {"model": {"name": "llama3-8b"}, "task": {"tokens": "1T", "seq_len": 8192, "global_batch": 1536},
           "schedule": {"deadline": "14d", "reserved": "3d"}, "hardware": {"accelerator": acc, "stack": stack}}
    # the catalog sigmas (T.catalog_sigma): the rule without the uncertainty table of issue 35, which now
    # gives a plan's own sigma by its distance from the evidence (tests/test_evidence_sigma.py)
    got, source = T.catalog_sigma(build_scenario(raw, CAT), acc)
    assert got == sigma and source


def test_lognormal_alone_has_the_closed_form_quantiles():
    # no event source: T = R + W' E, E lognormal(0, sigma): q-quantile R + W' exp(sigma z_q)
    ev = Fn.Events.of(Fn.Exposure(64, 1800.0, 0.0, 120.0, None, None, Fn.Risk(slow_rate_per_card_s=0.0)))
    d = Fn.Distribution(5 * DAY, 20 * DAY, 1.01, 0.2, ev)
    for q in (0.05, 0.5, 0.9, 0.99):
        want = 5 * DAY + 20 * DAY * 1.01 * math.exp(0.2 * stats.norm.ppf(q))
        assert d.quantile(q) == pytest.approx(want, rel=1e-7)


def test_event_cumulants_without_rollback_renewal_are_the_compound_poisson_ones():
    # rare rollbacks (lam tau -> 0): kappa_n -> sum rate E[(a + b U)^n], the Poisson formula
    x = exposure(cards=1.0, spikes=None)
    ev = Fn.Events.of(x)
    lam = 1.0 / (337 * DAY)
    a, b = 120.0, 965.0
    want = [lam * (a + b / 2), lam * (a * a + a * b + b * b / 3), lam * (a**3 + 1.5 * a * a * b + a * b * b + b**3 / 4)]
    slow = x.cards * x.risk.slow_rate_per_card_s
    f = x.risk.slow_duration_s * (x.risk.slow_factor - 1)
    got = ev.cumulants()
    for n in range(3):
        assert got[n] == pytest.approx(want[n] + slow * f ** (n + 1), rel=1e-4)  # renewal terms ~ lam tau = 3e-5


def test_cdf_quadrature_matches_adaptive_quad():
    d = Fn.plan_distribution(reserved=5 * DAY, work=25 * DAY, pause=16.4, exposure=exposure(), sigma=0.15)
    k = d.kappa * d.work

    def integrand(z, t):
        e = math.exp(0.15 * z)
        return stats.norm.pdf(z) * float(Fn.gamma_cdf(t - 5 * DAY - d.work * d.saves * e, k[0] * e, k[1] * e, k[2] * e))

    for t in (27 * DAY, 31 * DAY, 38 * DAY):
        want, _ = integrate.quad(integrand, -12, 12, args=(t,), limit=400, epsabs=1e-12)
        assert float(d.cdf(t)) == pytest.approx(want, abs=1e-9)


def test_moment_matching_error_is_measured_and_small():
    # the translated gamma against the exact lattice law of the event sum (1,024 cards, 25 days)
    err, resolution = Fn.matching_error(Fn.Events.of(exposure()), 25 * DAY)
    assert resolution < 2e-3  # the exact law is bracketed this tightly
    assert err < 1e-3  # and the gamma CDF stays within 1e-3 outside the bracket


@pytest.mark.parametrize("cards, lag, sigma", [(1024, 0.0, 0.15), (8192, 16.9, 0.05), (16384, 0.0, 0.0),
                                               (1024, 0.0, 0.0)])
def test_simulator_agrees_with_the_analytic_quantiles(cards, lag, sigma):
    # the oracle: 10,000 seeded whole runs; tolerance 1 % or 0.5 d at P50 / P90 / P99
    d = Fn.plan_distribution(reserved=5 * DAY, work=25 * DAY, pause=16.4, exposure=exposure(cards, lag=lag),
                             sigma=sigma)
    sim = simulate(d, lag=lag, runs=10_000, seed=7)
    for q in (0.5, 0.9, 0.99):
        a, s = d.quantile(q), sim.quantile(q)
        assert abs(s - a) <= max(0.01 * a, 0.5 * DAY), (q, a / DAY, s / DAY)


def test_simulator_is_deterministic():
    d = Fn.plan_distribution(reserved=0.0, work=5 * DAY, pause=10.0, exposure=exposure(), sigma=0.1)
    a, b = simulate(d, runs=500, seed=3), simulate(d, runs=500, seed=3)
    assert np.array_equal(a.finish, b.finish)


def test_max_work_is_the_root_of_the_chance_condition():
    x = exposure()
    d = Fn.plan_distribution(reserved=5 * DAY, work=1.0, pause=16.4, exposure=x, sigma=0.15)
    k = d.kappa
    w = float(Fn.max_work(0.95, 30 * DAY, 5 * DAY, d.saves, 0.15, (k[0], k[1], k[2])))
    at = Fn.Distribution(5 * DAY, w, d.saves, 0.15, d.events)
    assert float(at.cdf(30 * DAY)) == pytest.approx(0.95, abs=1e-8)
    assert at.quantile(0.95) == pytest.approx(30 * DAY, rel=1e-7)


def test_risk_shares_name_the_step_model_when_it_dominates():
    d = Fn.plan_distribution(reserved=5 * DAY, work=25 * DAY, pause=16.4, exposure=exposure(), sigma=0.15)
    shares = d.risk_shares(0.95)
    assert max(shares, key=shares.get) == Fn.STEP_ERROR
    assert sum(shares.values()) == pytest.approx(1.0)
    d0 = Fn.plan_distribution(reserved=5 * DAY, work=25 * DAY, pause=16.4, exposure=exposure(16384), sigma=0.0)
    s0 = d0.risk_shares(0.95)
    assert max(s0, key=s0.get) == "failures" and s0[Fn.STEP_ERROR] == 0.0


@pytest.mark.parametrize("text", ["0%", "150%", "nan", "100%", "-5%", "abc"])
def test_bad_confidence_is_one_line_exit_2(text):
    r = run("solve", "--scenario", DESIGN, "--confidence", text)
    assert r.exit_code == 2
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_negative_sigma_is_one_line_exit_2():
    r = run("solve", "--scenario", DESIGN, "--confidence", "95%", "--step-sigma", "-0.1")
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1
    with pytest.raises(InputError):
        Fn.Risk(step_sigma=-0.1)


def test_parse_confidence():
    assert Fn.parse_confidence("95%") == pytest.approx(0.95)
    assert Fn.parse_confidence("0.5") == 0.5


# --- the chance-constrained solve ----------------------------------------------------------------


def design(**risk):
    sc = load_scenario(DESIGN)
    return replace(sc, risk=Fn.Risk(**risk)) if risk else sc


def with_confidence(sc, q):
    return replace(sc, task=replace(sc.task, confidence=q))


@pytest.mark.parametrize("sigma", [None, 0.1])
def test_design_case_at_95_percent_meets_the_date_by_both_laws(sigma):
    sc = with_confidence(design(step_sigma=sigma), 0.95)
    r = solve(sc, "cpsat", Request(seed=0, workers=1))
    assert r.status == Status.OPTIMAL
    p = r.best.plan
    ev = evaluate(sc, p)
    assert ev.feasible
    law = T.finish_law(sc, p.accelerator, p.save_mode, p.cards, p.save_interval_s, ev.metrics["step_s"])
    assert float(law.cdf(sc.task.deadline_s)) >= 0.95 - 1e-9
    _, lag = T.save_pause_lag(sc, p.save_mode)
    assert simulate(law, lag=lag, runs=10_000, seed=1).probability(sc.task.deadline_s) >= 0.94  # sampling sd 0.2 pt


def test_design_case_with_the_anchors_sigma_cannot_reach_95_percent():
    # the input pipeline caps the design case at 48 cards, whose P95 finish is past 30 d with sigma 0.15
    r = solve(with_confidence(design(step_sigma=0.15), 0.95), "cpsat", Request(seed=0, workers=1))
    assert r.status == Status.INFEASIBLE


def test_design_case_cannot_separate_the_levels():
    # 48 cards is the only card count that meets the date: 32 misses it even nominally (its P50 is past 30 d)
    # and the input pipeline (4 workers x 2 sequences/s = 384 sequences in 48 s) refuses 64 and more; the
    # 48-card plan meets 30 d with P = 0.999 (sigma 0.081), so 50 % to 99 % cost the same and 99.9 % is out
    sc = design()
    assert solve(sc, "enumerate", Request(seed=0, workers=1, cards=(32,))).status == Status.INFEASIBLE
    assert solve(sc, "enumerate", Request(seed=0, workers=1, cards=(64,))).status == Status.INFEASIBLE
    plans = {q: solve(with_confidence(sc, q), "enumerate", Request(seed=0, workers=1)) for q in (0.5, 0.95, 0.99)}
    assert {r.best.plan.cards for r in plans.values()} == {48}
    assert len({round(r.best.metrics["cost"], 6) for r in plans.values()}) == 1
    best = plans[0.99].best
    law = T.finish_law(sc, best.plan.accelerator, best.plan.save_mode, best.plan.cards, best.plan.save_interval_s,
                       best.metrics["step_s"])
    p = float(law.cdf(sc.task.deadline_s))
    assert 0.99 < p < 0.999
    assert solve(with_confidence(sc, 0.999), "enumerate", Request(seed=0, workers=1)).status == Status.INFEASIBLE


def test_1024_card_example_separates_50_95_99():
    sc = load_scenario(ROOT / "examples" / "llama3-8b-confidence.toml")
    got = {q: solve(with_confidence(sc, q), "enumerate", Request(seed=0, workers=1)).best for q in (0.5, 0.95, 0.99)}
    assert [got[q].plan.cards for q in (0.5, 0.95, 0.99)] == [768, 1024, 1536]
    assert got[0.5].metrics["cost"] < got[0.95].metrics["cost"] < got[0.99].metrics["cost"]


def large(q):
    # 1T tokens of Llama 3 8B on up to 1,024 H100 (card counts 128 / 192 / 256 / 384 / ...), sigma 0.25
    raw = {"model": {"name": "llama3-8b"}, "task": {"tokens": "1T", "seq_len": 8192, "global_batch": 1536},
           "schedule": {"deadline": "14d", "reserved": "3d", "confidence": q},
           "hardware": {"accelerator": "h100-sxm", "efficiency": 0.4}, "risk": {"step_sigma": 0.25},
           "search": {"zero_stage": [1], "tp": [1, 2, 4, 8], "pp": [1], "micro_batch": [1], "save_interval": ["auto"],
                      "save_mode": ["sync"], "max_cards": 1024}}
    return build_scenario(raw, CAT)


def test_cheaper_at_50_not_cheaper_at_99():
    costs = {}
    for q in ("50%", "95%", "99%"):
        r = solve(large(q), "cpsat", Request(seed=0, workers=1))
        assert r.status == Status.OPTIMAL, q
        costs[q] = r.best.metrics["cost"]
    # discrete card counts: 99 % lands on the same 256 cards as 95 % here (not strictly dearer)
    assert costs["50%"] < costs["95%"] <= costs["99%"]


@st.composite
def chance_scenarios(draw):
    raw = {"model": {"name": draw(st.sampled_from(["qwen3-0.6b", "llama3-8b"]))},
           "task": {"tokens": draw(st.floats(2e10, 4e11)), "seq_len": 4096,
                    "global_batch": draw(st.sampled_from([64, 128, 256]))},
           "schedule": {"deadline": f"{draw(st.floats(3.0, 40.0))}d", "reserved": "1d",
                        "confidence": draw(st.sampled_from(["50%", "80%", "95%", "99%"]))},
           "hardware": {"accelerator": "h100-sxm", "efficiency": draw(st.floats(0.3, 0.5))},
           "risk": {"step_sigma": draw(st.sampled_from([0.0, 0.05, 0.15]))},
           "search": {"zero_stage": [1, 3], "tp": draw(st.lists(st.sampled_from([1, 2]), min_size=1, unique=True)),
                      "pp": [1], "micro_batch": [1],
                      "save_interval": draw(st.sampled_from([["auto"], ["600s", "3600s"]])),
                      "save_mode": draw(st.sampled_from([["sync"], ["sync", "async"]])),
                      "max_cards": draw(st.sampled_from([64, 512]))}}
    return build_scenario(raw, CAT), draw(st.sampled_from(["cost", "time"]))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(chance_scenarios())
def test_backends_agree_with_enumeration_under_a_chance_constraint(case):
    sc, objective = case
    results = solve_every_backend(sc, objective)
    assert_agree_with_enumeration(sc, objective, results)


# --- reports, replanning, simulate and sweep through the tool --------------------------------------

CONF = str(ROOT / "examples" / "llama3-8b-confidence.toml")


def test_report_names_the_dominant_source_and_quantiles():
    import json

    r = run("solve", "--scenario", CONF, "--json")
    assert r.exit_code == 0
    d = json.loads(r.stdout)
    e = d["finish_distribution"]
    assert d["plan"]["cards"] == 1024
    f = e["finish_days"]
    assert f["p50"] < f["p90"] < f["p99"]
    assert e["probability_by_deadline"] >= 0.95
    assert e["dominant_source"] == Fn.STEP_ERROR  # sigma 0.15 against ~10 failures of ~5 min each
    assert e["cost"]["p99"] / e["cost"]["p50"] == pytest.approx(f["p99"] / f["p50"])  # cost = rate x finish
    text = run("solve", "--scenario", CONF).stdout
    assert "P(finish <= deadline)" in text and "dominant: step-time model error" in text
    assert "by day 1:" in text


def test_simulate_command_agrees_with_the_law():
    import json

    d = json.loads(run("simulate", "--scenario", CONF, "--runs", "10000", "--json").stdout)
    for row in d["quantiles"]:
        a, s = row["analytic_days"], row["simulated_days"]
        assert abs(s - a) <= max(0.01 * a, 0.5)
    assert d["probability_by_deadline"]["simulated"] >= 0.95


@pytest.mark.parametrize("args", [["--runs", "0"], ["--runs", "x"]])
def test_simulate_bad_runs(args):
    r = run("simulate", "--scenario", CONF, *args)
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1


def test_replan_adds_cards_when_the_run_fell_behind():
    # 41 % done after 2.5 d where the plan's median pace is 2.5 / 4.12 = 61 %: the rest needs more cards
    r = run("replan", "--scenario", CONF, "--done", "41%", "--elapsed", "2.5d", "--cards-held", "1024")
    assert r.exit_code == 0
    assert "Contingency: add 512 cards now" in r.stdout


def test_replan_on_pace_needs_no_more_cards():
    # on the median pace (61 % after 2.5 d) the 1,024 cards held still meet 95 %; the plan had slack
    # (97.6 %), so the cheapest remainder releases cards
    r = run("replan", "--scenario", CONF, "--done", "61%", "--elapsed", "2.5d", "--cards-held", "1024")
    assert "on the cards held: h100-sxm x 1024" in r.stdout
    assert "Contingency: release 256 cards" in r.stdout


def test_replan_says_when_nothing_restores_the_confidence():
    r = run("replan", "--scenario", CONF, "--done", "5%", "--elapsed", "4d", "--cards-held", "1024")
    assert r.exit_code == 3
    assert "nothing restores 95 %" in r.stdout and "no plan reaches even 1 %" in r.stdout


@pytest.mark.parametrize("args", [["--done", "120%", "--elapsed", "1d"], ["--done", "20%", "--elapsed", "6d"],
                                  ["--done", "100%", "--elapsed", "1d"], ["--done", "20%", "--elapsed", "-1d"],
                                  ["--done", "nan", "--elapsed", "1d"]])
def test_replan_bad_input_is_one_line_exit_2(args):
    r = run("replan", "--scenario", CONF, *args)
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_sweep_gives_cost_against_confidence():
    import json

    d = json.loads(run("sweep", "--scenario", CONF, "--confidence", "50%,95%,99%", "--json").stdout)
    costs = [row["cost"] for row in d["rows"]]
    assert costs[0] < costs[1] < costs[2]  # 768, 1,024, 1,536 cards
    assert [row["cards"] for row in d["rows"]] == [768, 1024, 1536]
    assert all(row["probability_by_deadline"] >= row["confidence"] for row in d["rows"])


def test_a_confidence_level_reads_the_same_in_every_report():
    """One text of a level, presentation.level_text: as given, in percent with the reports' space ("95 %",
    "99.95 %"). The infeasible line, the relaxations' finish, the sweep table (and the distribution's asked level,
    the +5 points target, replan, the spot policy) formatted it four ways ("95.0 %", "95 %", "95%"), and to a
    tenth of a point 99.95 % read "100.0 %"."""
    from tpopt.cli.confidence import reachable_line
    from tpopt.presentation import level_text, relaxation_finish

    assert (level_text(0.95), level_text(0.999), level_text(0.9995)) == ("95 %", "99.9 %", "99.95 %")
    assert reachable_line(0.9995, 0.9) == "Confidence: 99.95 % is not reachable; the highest reachable is 90.0 %."
    assert reachable_line(0.95, 0.0) == "Confidence: no plan reaches even 1 % (asked 95 %)."
    rel = {"finish_days": 3.0, "finish_quantile_days": 3.5, "confidence": 0.9995}
    assert relaxation_finish(rel) == "nominal finish 3.00 d, 3.50 d at 99.95 % confidence"
    table = run("sweep", "--scenario", CONF, "--confidence", "50%,95%").stdout.splitlines()
    assert table[1].startswith("confidence   status")
    assert [line[:11] for line in table[2:]] == ["       50 %", "       95 %"]  # the column's width kept


def test_confidence_range_parsing():
    from tpopt.optimizer.confidence import parse_levels

    assert parse_levels("50%:99%:7%") == pytest.approx((0.5, 0.57, 0.64, 0.71, 0.78, 0.85, 0.92, 0.99))
    with pytest.raises(InputError):
        parse_levels("50%:150%:5%")


def test_tp4_to_tp8_resharding_of_the_chapter():
    from tpopt.models import reshard
    from tpopt.models.units import MIB

    # the chapter, 10.4.2: gate projection [12288, 4096] BF16
    assert 12288 * 4096 * 2 / MIB == 96
    assert reshard.shard_bytes(12288, 4096, 4) / MIB == 24 and reshard.shard_rows(12288, 4, 1) == (3072, 6144)
    assert reshard.shard_bytes(12288, 4096, 8) / MIB == 12 and reshard.shard_rows(12288, 8, 1) == (1536, 3072)
    reads = reshard.read_plan(12288, 4, 8)
    assert len(reads) == 8  # each new shard reads one old shard
    for rd in reads:
        assert rd.old == rd.new // 2  # old shard floor(r / 2)
        old_start, old_stop = reshard.shard_rows(12288, 4, rd.old)
        half = (old_start + old_stop) // 2
        assert (rd.start, rd.stop) == ((old_start, half) if rd.new % 2 == 0 else (half, old_stop))
    assert reshard.state_bytes(12288 * 4096 * 2) / MIB == 96 * (1 + 2 + 2 + 2) == 672
    assert reshard.read_bytes_per_card(12288, 4096, 4, 8) / MIB == 12 * 7


def test_plans_without_confidence_are_unchanged():
    sc = design()
    assert sc.task.confidence is None
    ev = evaluate(sc, solve(sc, "cpsat", Request(seed=0, workers=1)).best.plan)
    finish = [c for c in ev.constraints if c.name == "deadline.finish"][0]
    assert finish.value == pytest.approx(ev.metrics["finish_days"])  # the nominal finish, not a quantile


def test_confidence_is_refused_where_it_is_not_modelled():
    long = str(ROOT / "examples" / "llama3-8b-long-context.toml")  # training stages
    r = run("solve", "--scenario", long, "--confidence", "95%")
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "--confidence" not in run("rl", "--help").output  # tpopt rl does not offer it (--help lists what it takes)
    assert run("rl", "--confidence", "95%").exit_code == 2


def test_the_spot_policy_states_the_asked_level_as_given(tmp_path):
    """The spot policy line printed "(asked 100%)" for --confidence 99.9% (the level rounded to whole points),
    a level nobody asked and one no plan can meet; the level is now stated as given, 99.9 %, and 95 stays 95 %
    (presentation.level_text, the one text of a level)."""
    sc = tmp_path / "spot.toml"
    assert run("init", str(sc), "--model", "llama3-8b", "--hw", "h100-sxm").exit_code == 0
    sc.write_text(sc.read_text() + '\n[market]\noffers = "all"\nspot_shares = [0.25, 0.5]\n')
    for level, said in (("99.9%", "(asked 99.9 %)"), ("95%", "(asked 95 %)")):
        r = run("solve", "--scenario", str(sc), "--deadline", "17d", "--confidence", level, "--no-analysis")
        assert r.exit_code == 0, r.output
        policy = " ".join(r.stdout.split("Spot policy", 1)[1].split("spot terms", 1)[0].split())
        assert said in policy, policy
