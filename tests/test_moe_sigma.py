"""The MoE and precision-recipe shares of the step-time sigma, measured out of sample (issue 35 item 1).

Derivation. Every MoE run of the validation tables comes from one publishing source (Megatron-Bridge), so
leaving that source out cannot tell the MoE share from the card's (every MoE run sits on a card that source
alone calibrates). But no MoE run is ever fitted into a card (benchmarks/validate_published.py ``in_envelope``):
the shipped catalog predicts each of them with cards fitted on the *other* runs, so its error on a MoE run is
out of sample for the MoE physics, and the MoE share is what those errors carry above a fitted card's own:

    c_moe^2 = mean over the MoE runs of ln(predicted / published)^2 - base_run^2

with base_run the same kind of error on the runs no factor touches (each out of its card's fit), at most a
fitted card's own leave-one-out spread. So hypot(base_run, c_moe) is the MoE runs' RMS log error. A stated sigma
that covered them all within 1 sigma (the interim 0.348 did) overpays under ``--confidence``; one that covered
fewer than 60 % breaks the promise. A low-precision recipe no card was fitted on (NVFP4) carries a further,
wider share than one another card was fitted on (MXFP8 on B200, fitted on GB200).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.test_evidence_sigma import raw
from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import build_scenario
from tpopt.catalogs.uncertainty import load_evidence
from tpopt.models import evidence as E
from tpopt.models import terms as T
from tpopt.models.finish import SIGMA_MIN_RUNS
from tpopt.optimizer import calibrate as C
from tpopt.optimizer.runs import runs_from_csv

CAT = load_catalog()
EV = load_evidence()
INTERIM = 0.35  # issue 35: RMS log error of 51 kept-aside runs, out of the box


@pytest.fixture(scope="module")
def moe_runs():
    from tests.test_validation_machinery import DATA

    runs = [r for p in sorted(DATA.glob("*.csv")) for r in runs_from_csv(p, CAT)]
    moes = [r for r in runs if r.scenario.model.moe]
    pred = {r.name: float(C.predict(r, CAT.perf(r.accelerator)).step_s[0]) for r in moes}
    return moes, {r.name: math.log(pred[r.name] / r.measured_step_s) for r in moes}


def test_the_moe_share_is_the_moe_runs_error_above_a_fitted_cards(moe_runs):
    moes, err = moe_runs
    assert len(moes) >= SIGMA_MIN_RUNS
    rms = math.sqrt(np.mean(np.square(list(err.values()))))
    c_moe = EV.contribution(E.MOE)
    src = dict((f, s) for f, _, s in EV.contributions)[E.MOE]
    assert src.startswith("benchmarks/uncertainty_fit.py: leave-one-release-out") and "one publisher" in src
    assert "26.04.01 (" in src and "26.06 (" in src  # the containers it was judged across, with their run counts
    # at most the MoE runs' whole RMS, at least it less a fitted card's own leave-one-out spread (H100's, the
    # card the most MoE runs sit on) in quadrature
    h100 = CAT.perf("h100-sxm").residual_sigma
    assert math.sqrt(max(rms ** 2 - max(EV.base, h100) ** 2, 0.0)) - 1e-3 <= c_moe <= rms + 1e-3
    assert c_moe < math.sqrt(INTERIM ** 2 - EV.base ** 2) - 0.1  # measured, well inside the interim


def test_the_stated_sigma_covers_the_moe_runs_as_a_normal_would(moe_runs):
    """The sigma each MoE run's plan is stated with (its card, recipe, cards and experts per card): the share of
    runs whose log error is within 1 sigma and 2 sigma, against 68 % / 95 % for an honest normal: at least the
    issue's 60 % / 90 %, and not inflated as the interim 0.348 was (median |z| about 0.2 then): these are the
    calibrated runs' errors, smaller than the out-of-sample ones the sigma is measured on, so all 13 may lie within
    1 sigma, but their median |z| stays above 0.4."""
    moes, err = moe_runs
    z = []
    for r in moes:
        p = r.plans[0]
        sigma = float(T.step_sigma(r.scenario, r.accelerator, cards=float(p.cards), ep=float(p.ep))[0])
        z.append(abs(err[r.name]) / sigma)
    z = np.array(z)
    assert np.mean(z <= 1) >= 0.60 and np.mean(z <= 2) >= 0.90
    assert np.median(z) > 0.4


def test_a_recipe_no_card_was_fitted_on_carries_the_wider_share():
    c = {f: v for f, v, _ in EV.contributions}
    every = EV.everywhere()
    b200 = EV.envelope("b200")
    b_base = max(EV.base, CAT.perf("b200").residual_sigma, EV.card_spread_of("b200"))
    # fitted on another card, not on B200 (MXFP8 today: GB200's): the recipe share alone
    other = [r for r in every.recipes if r != "16-bit" and r not in b200.recipes]
    for recipe in other:
        sc = build_scenario(raw("b200", precision=f"{recipe}-mixed"), CAT)
        e = T.evidence_of(sc, "b200", 64.0)
        assert e["sigma"] == pytest.approx(math.hypot(b_base, c[E.PRECISION]))
        assert not any("fitted on no card" in w for w in e["reasons"])
    # fitted on no card (NVFP4 today): both shares, the footing says so
    for recipe in (r for r in ("fp8", "mxfp8", "nvfp4") if r not in every.recipes):
        sc = build_scenario(raw("b200", precision=f"{recipe}-mixed"), CAT)
        e = T.evidence_of(sc, "b200", 64.0)
        assert e["sigma"] == pytest.approx(math.sqrt(b_base ** 2 + c[E.PRECISION] ** 2 + c[E.PRECISION_UNSEEN] ** 2))
        assert f"{recipe} fitted on no card" in e["reasons"]
    assert c[E.PRECISION_UNSEEN] >= c[E.PRECISION]  # no run measured it: not narrower than a measured recipe


def test_a_single_source_factor_is_judged_one_run_at_a_time():
    """uncertainty_fit.derive on stated residuals: the MoE factor carried by one source's runs only takes, from
    the leave-one-run-out residuals, sqrt(mean r^2 - base_run^2): runs at +-0.12 on a base of 0.03 give
    sqrt(0.0144 - 0.0009); with fewer than SIGMA_MIN_RUNS such runs it stays the interim."""
    from tests.test_validation_machinery import _module

    fit = _module("uncertainty_fit")
    inside = [(f"d{i}", f"s{i % 2}", s * 0.03, []) for i, s in enumerate((1, -1) * 3)]
    loso = inside + [(f"m{i}", "one", 0.2, [E.MOE]) for i in range(6)]
    run = inside + [(f"m{i}", "one", s * 0.12, [E.MOE]) for i, s in enumerate((1, -1) * 3)]
    _, _, parts = fit.derive(loso, run)
    got = dict((f, (v, s)) for f, v, s in parts)
    assert got[E.MOE][0] == pytest.approx(math.sqrt(0.12 ** 2 - 0.03 ** 2), abs=2e-3)
    assert "leave-one-release-out" in got[E.MOE][1]
    few = inside + [(f"m{i}", "one", 0.12, [E.MOE]) for i in range(SIGMA_MIN_RUNS - 1)]
    _, _, parts = fit.derive(loso, few)
    v, s = next((v, s) for f, v, s in parts if f == E.MOE)
    assert s.startswith("interim assumption") and v == pytest.approx(math.sqrt(INTERIM ** 2 - 0.03 ** 2), abs=1e-3)


def test_a_run_names_its_release_by_the_container_its_row_states():
    """validate_published.run_release reads the container version from the row's source cell (the 2024-2026
    table: "... performance-summary-archive.md 26.04.01 ...") or its source_table cell (the modern table:
    "25.11 DGX-B200 ..."); a row that names none (torchtitan's benchmark files, a summary without its container)
    has no release and is judged alone."""
    from tests.test_validation_machinery import DATA, _module

    V = _module("validate_published")
    runs = {r.name: r for p in sorted(DATA.glob("*.csv")) for r in runs_from_csv(p, CAT)}
    assert V.run_release(runs["M6"]) == "Megatron-Bridge 26.04.01"
    assert V.run_release(runs["M9"]) == "Megatron-Bridge 26.06"
    assert V.run_release(runs["mb2511-b200-llama3-8b-fp8"]) == "Megatron-Bridge 25.11"
    assert V.run_release(runs["T1"]) == "" and V.run_release(runs["mb-h100-deepseek-v3-fp8"]) == ""


def test_a_release_is_judged_by_fits_that_never_saw_it():
    """uncertainty_fit.release_left_out on a small set (GB200 dense runs of three containers, MoE runs of 25.11,
    26.04.01 and 26.06): Qwen3-30B-A3B on B200 (M6, container 26.04.01) is predicted by card and grouped-GEMM fits
    that do not see any run of 26.04.01. So scaling the published time of M6 itself, of another 26.04.01 MoE run
    (M2, which a leave-one-run-out g would see) or of a 26.04.01 dense run (B4, which the GB200 card fit would see)
    leaves its prediction where it was, while scaling a 26.06 MoE run (M9) moves it (g is fitted on the other
    releases' MoE runs: the median of two)."""
    from dataclasses import replace

    from tests.test_validation_machinery import DATA, _module

    U = _module("uncertainty_fit")
    keep = {"B4", "B6", "mb2511-gb200-llama3-8b-fp8", "M9", "mb2511-gb200-qwen3-235b-a22b-bf16", "M6", "M2"}
    runs = [r for p in sorted(DATA.glob("*.csv")) for r in runs_from_csv(p, CAT) if r.name in keep]
    tables = list(dict.fromkeys(r.table for r in runs))
    base = U.release_left_out(runs, tables, CAT)["M6"]

    def m6_when(name: str) -> float:
        moved = [replace(r, measured_step_s=r.measured_step_s * 1.5) if r.name == name else r for r in runs]
        return U.release_left_out(moved, tables, CAT)["M6"]

    for same_release in ("M6", "M2", "B4"):
        assert m6_when(same_release) == pytest.approx(base, rel=1e-12)
    assert m6_when("M9") > base * 1.05
