"""The step-time sigma per accelerator AND stack (issue 28): which spread the finish-time distribution uses
and that the report says so.

Golden figures are derived here from the validation tables of docs/model.md (their leave-one-out columns) and its
public anchors, never read from the code: Megatron-LM 2021-22 (the A100 tables, 18 runs), Megatron-Core
(the Megatron-Bridge modern table, 9 runs: H100, B200, GB200), the stacks fitted on the 2024-2026 table
(benchmarks/fit_stacks.py's leave-one-out column) and the stacks no table ran (the anchors).
"""

from __future__ import annotations

import inspect
import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import build_scenario
from tpopt.catalogs.stacks import stack_names, stack_profile
from tpopt.cli.main import cli
from tpopt.errors import InputError
from tpopt.models import finish as Fn
from tpopt.models import terms as T

ROOT = Path(__file__).resolve().parents[1]
CAT = load_catalog()

A100_LOO = [-5.2, -1.5, 4.2, 1.9, -0.3, -3.2, -0.3, -2.6, -2.4, -4.9, 3.3, 1.3, 2.3, 0.6, 1.1, -2.2, 4.0, 4.2]
"""docs/model.md "Accuracy against published runs", leave-one-out column (Narayanan 10 runs, Korthikanti 4 x 2)."""
H100_LOO = [-10.4, 4.1, 6.3, 3.1, -1.3]
"""benchmarks/refit_catalog.py, leave-one-out errors of the five H100 Megatron-Core runs inside the calibration
envelope (mb2511 405B, mb2511 8B FSDP, mb 70B, D1, D2)."""
MODERN_LOO = [-7.3, 6.7, -1.1, 1.3, -1.7, -4.6, 6.6, -7.2, 6.7]
"""docs/model.md "Modern runs: Megatron-Bridge", leave-one-out column (4 H100, 2 B200, 3 GB200)."""
ANCHOR_SPEEDS = [1.09, 1.07, 1.18, 1.23, 1.09, 1.28, 1.13]
"""docs/model.md "Public anchors", speed column: seven runs on stacks the model was not fitted on."""


def rms_log_pct(errors_pct):
    return math.sqrt(sum(math.log(1 + e / 100) ** 2 for e in errors_pct) / len(errors_pct))


def rms_log_ratio(ratios):
    return math.sqrt(sum(math.log(r) ** 2 for r in ratios) / len(ratios))


def scenario(acc: str, stack: str, **risk):
    raw = {"model": {"name": "llama3-8b"}, "task": {"tokens": "2T", "seq_len": 8192, "global_batch": 1536},
           "schedule": {"deadline": "60d"}, "hardware": {"accelerator": acc, "stack": stack}}
    if risk:
        raw["risk"] = risk
    return build_scenario(raw, CAT)


def run(*args, ok=True):
    kw = {"mix_stderr": False} if "mix_stderr" in inspect.signature(CliRunner.__init__).parameters else {}
    r = CliRunner(**kw).invoke(cli, [str(a) for a in args], catch_exceptions=False)
    if ok:
        assert r.exit_code == 0, r.stderr
    return r


STACK_LOO = {"torchtitan-compile": [0.2, -2.2, 3.3, -3.0, -10.0, 2.4, 0.4, -4.6, -1.0, -0.2, 3.5, 9.5, 1.4, -0.5],
             "nemo-2403": [-6.4, -3.0, 3.0, 9.9], "torchtitan": [3.2, -3.1], "maxtext": [6.1, -4.6]}
"""benchmarks/fit_stacks.py, leave-one-out errors (%) of each fitted stack's runs in the published 2024-2026 table
(its kernel factor refitted without the run, the cards at their catalog parameters, torch's ring's later steps at
its fitted ring_step_efficiency): T2 T3 T5 T6 T7 T8 T9 L1-L5 H1 H2; L6-L9; T1 T4; X1 X2."""


def test_stack_sigmas_are_their_runs_spread_or_the_anchors():
    assert stack_profile("megatron-lm-2021").residual_sigma == round(rms_log_pct(A100_LOO), 3) == 0.029
    assert stack_profile("megatron-core").residual_sigma == round(rms_log_pct(MODERN_LOO), 3) == 0.054
    anchors = round(rms_log_ratio(ANCHOR_SPEEDS), 3)
    assert anchors == 0.154
    no_runs = [s for s in stack_names() if s not in ("megatron-core", "megatron-lm-2021") and s not in STACK_LOO]
    assert no_runs  # deepspeed: no validation table ran it
    for s in no_runs:
        p = stack_profile(s)
        assert p.residual_sigma == anchors
        assert "no fitted runs" in p.sources["residual_sigma"]
    # a stack whose kernel factor is fitted on its runs: their leave-one-out RMS where at least 4 runs estimate it
    # (finish.SIGMA_MIN_RUNS), else the larger of that and the anchors' (two runs estimate no spread), as for a card
    for s, loo in STACK_LOO.items():
        p = stack_profile(s)
        own = rms_log_pct(loo)
        want = own if len(loo) >= Fn.SIGMA_MIN_RUNS else max(own, anchors)
        assert p.residual_sigma == pytest.approx(want, abs=1e-3)
        said = p.sources["residual_sigma"]
        assert said.startswith("leave-one-out RMS log error ")
        assert float(said.split()[4]) == pytest.approx(own, abs=1e-3)
        assert f"over its {len(loo)} runs" in p.sources["residual_sigma"]
        assert "no fitted runs" not in p.sources["residual_sigma"]
    assert stack_profile("torchtitan-compile").residual_sigma < anchors  # L2, L3 (-22, -26 %) carry most of it
    for s in stack_names():
        assert stack_profile(s).sources["residual_sigma"]


def test_a_card_measured_on_the_stack_keeps_its_own_sigma():
    sigma, source = T.catalog_sigma(scenario("a100-80gb-sxm", "megatron-lm-2021"), "a100-80gb-sxm")
    assert sigma == pytest.approx(rms_log_pct(A100_LOO), abs=5e-4) and "18 a100-80gb-sxm runs" in source
    sigma, source = T.catalog_sigma(scenario("h100-sxm", "megatron-core"), "h100-sxm")
    assert sigma == pytest.approx(rms_log_pct(H100_LOO), abs=1e-3) and "h100-sxm runs" in source


def test_off_its_stack_a_card_gets_the_larger_of_the_two_spreads():
    # A100 was fitted on Megatron-LM 2021-22 only: on Megatron-Core the stack's spread (0.054 > 0.029) applies
    sigma, source = T.catalog_sigma(scenario("a100-80gb-sxm", "megatron-core"), "a100-80gb-sxm")
    assert sigma == 0.054 and source.startswith("stack megatron-core: ")
    assert "the card's 0.029 (measured on megatron-lm-2021) is smaller" in source
    # H100 (0.057, Megatron-Core) on Megatron-LM 2021 (0.029): the card's larger spread stays, and says why
    sigma, source = T.catalog_sigma(scenario("h100-sxm", "megatron-lm-2021"), "h100-sxm")
    assert sigma == pytest.approx(rms_log_pct(H100_LOO), abs=1e-3)
    assert "stack megatron-lm-2021: 0.029, smaller" in source
    # a stack no table ran: the anchors' 0.154 over every card's own
    for acc in ("a100-80gb-sxm", "h100-sxm", "b200", "rtx4090"):
        sigma, source = T.catalog_sigma(scenario(acc, "deepspeed"), acc)
        assert sigma == 0.154 and "stack deepspeed" in source and "no fitted runs" in source
    # a stack fitted on two runs: the anchors' 0.154 too, and its source says why (two runs estimate no spread)
    for acc in ("a100-80gb-sxm", "h100-sxm", "b200", "rtx4090"):
        sigma, source = T.catalog_sigma(scenario(acc, "torchtitan"), acc)
        assert sigma == 0.154 and "stack torchtitan" in source and "under 4 runs estimate no spread" in source


def test_a_card_no_table_covers_on_a_fitted_stack_gets_the_default():
    sigma, source = T.catalog_sigma(scenario("rtx4090", "megatron-core"), "rtx4090")
    assert sigma == Fn.DEFAULT_STEP_SIGMA and "no validation table covers" in source
    assert "stack megatron-core: 0.054, smaller" in source


def test_a_calibration_and_a_given_sigma_apply_on_any_stack(tmp_path):
    cat = tmp_path / "cat"
    cat.mkdir()
    (cat / "performance.toml").write_text('[h100-sxm]\nresidual_sigma = 0.04\n'
                                          'residual_sigma_source = "tpopt calibrate on my 6 runs"\n')
    mine = load_catalog([cat])
    assert mine.perf("h100-sxm").residual_sigma_stacks == ()  # a new sigma drops the shipped one's stacks
    raw = {"model": {"name": "llama3-8b"}, "task": {"tokens": "2T", "seq_len": 8192, "global_batch": 1536},
           "schedule": {"deadline": "60d"}, "hardware": {"accelerator": "h100-sxm", "stack": "torchtitan"}}
    assert T.step_sigma(build_scenario(raw, mine), "h100-sxm") == (0.04, "tpopt calibrate on my 6 runs")
    given = scenario("h100-sxm", "torchtitan", step_sigma=0.2)
    assert T.step_sigma(given, "h100-sxm") == (0.2, "given (risk.step_sigma)")


def test_residual_sigma_stacks_must_name_known_stacks(tmp_path):
    cat = tmp_path / "cat"
    cat.mkdir()
    (cat / "performance.toml").write_text('[h100-sxm]\nresidual_sigma = 0.04\nresidual_sigma_source = "x"\n'
                                          'residual_sigma_stacks = ["nemo-9000"]\n')
    with pytest.raises(InputError, match="unknown stack"):
        load_catalog([cat])
    # the stacks alone re-attribute the shipped sigma (the merge keeps its value and source)
    (cat / "performance.toml").write_text('[h100-sxm]\nresidual_sigma_stacks = ["torchtitan"]\n')
    sc = build_scenario({"model": {"name": "llama3-8b"}, "task": {"tokens": "2T", "seq_len": 8192,
                                                                 "global_batch": 1536},
                         "schedule": {"deadline": "60d"}, "hardware": {"accelerator": "h100-sxm",
                                                                       "stack": "torchtitan"}}, load_catalog([cat]))
    assert T.catalog_sigma(sc, "h100-sxm")[0] == pytest.approx(rms_log_pct(H100_LOO), abs=1e-3)


def test_the_report_states_the_sigma_and_the_stack_it_came_from(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text((ROOT / "examples" / "llama3-8b-confidence.toml").read_text().replace(
        "step_sigma = 0.15", "# step_sigma left to the catalog").replace(
        "[hardware]", '[hardware]\nstack = "torchtitan"', 1))
    d = json.loads(run("solve", "--scenario", p, "--json").stdout)
    fd = d["finish_distribution"]
    assert fd["step_sigma"] == 0.154 and "stack torchtitan" in fd["step_sigma_source"]
    text = run("solve", "--scenario", p).stdout
    assert "0.154" in text and "torchtitan" in text


def test_a_wider_sigma_never_raises_the_probability():
    """The same plan's P(finish <= deadline) under the stack's wider spread is no higher (q > 0.5 side)."""
    low = Fn.Distribution(5 * 86400.0, 20 * 86400.0, 1.01, 0.055, Fn.Events(("f",), np.zeros(1), np.zeros(1),
                                                                             np.zeros(1)))
    high = Fn.Distribution(5 * 86400.0, 20 * 86400.0, 1.01, 0.154, low.events)
    assert float(high.cdf(30 * 86400.0)) < float(low.cdf(30 * 86400.0))
