"""A stated step-time sigma does not hide the priors flag (issue 35, done-when: "Over the catalog's accelerators, a
plan whose card rests on priors is flagged as such in text and JSON").

``[risk] step_sigma`` sets the number the finish-time law uses; what the plan rests on still comes from the
evidence (catalogs/uncertainty.toml): the card flag, the reasons, the sigma the evidence would give, and, on a card
no run was fitted on, the footing's words. The examples' confidence scenario states sigma 0.15 and runs the flat
model; the inverse question (benchmarks/inverse_question.py) chooses MI300X on it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_confidence_sigma import run
from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import build_scenario
from tpopt.catalogs.uncertainty import load_evidence
from tpopt.models import terms as T

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "examples" / "llama3-8b-confidence.toml"
CAT = load_catalog()
EV = load_evidence()
STATED = 0.15


def raw(acc, sigma=None, efficiency=None):
    hw = {"accelerator": acc} if efficiency is None else {"accelerator": acc, "efficiency": efficiency}
    r = {"model": {"name": "llama3-8b"}, "task": {"tokens": "2T", "seq_len": 8192, "global_batch": 1536},
         "schedule": {"deadline": "60d"}, "hardware": hw}
    return r if sigma is None else {**r, "risk": {"step_sigma": sigma}}


@pytest.mark.parametrize("efficiency", [None, 0.4], ids=["per-operation", "flat"])
def test_over_the_catalogs_accelerators_a_stated_sigma_keeps_the_evidence_flags(efficiency):
    prior = [a for a in CAT.accelerators if EV.envelope(a) is None]
    assert prior and len(prior) < len(CAT.accelerators)  # both kinds in the catalog
    for acc in CAT.accelerators:
        own = T.evidence_of(build_scenario(raw(acc, efficiency=efficiency), CAT), acc, 64.0)
        given = T.evidence_of(build_scenario(raw(acc, STATED, efficiency), CAT), acc, 64.0)
        assert given["sigma"] == STATED and given["stated"] and not own["stated"], acc
        assert given["card"] == own["card"] == ("prior" if acc in prior else "fitted"), acc
        assert given["reasons"] == own["reasons"] and given["evidence_sigma"] == own["sigma"], acc
        sigma, source = T.step_sigma(build_scenario(raw(acc, STATED, efficiency), CAT), acc, 64.0)
        assert sigma == STATED and source == given["source"] and source.startswith("given (risk.step_sigma)")
        assert (f"{acc} rests on priors" in source) == (acc in prior), (acc, source)
        assert ("rests on priors" in own["source"]) == (acc in prior), (acc, own["source"])
        if acc in prior:
            assert f"the evidence-based sigma would be {own['sigma']:.3f}" in source


def _footing_line(text: str) -> str:
    """The footing's step-time sigma line, its wrapped continuation lines joined."""
    lines = text.splitlines()
    i = next(i for i, line in enumerate(lines) if line.strip().startswith("step-time sigma"))
    out = [lines[i].strip()]
    for line in lines[i + 1:]:
        if not line.startswith("    "):
            break
        out.append(line.strip())
    return " ".join(out)


@pytest.mark.parametrize("per_op", [False, True], ids=["flat (as shipped)", "per-operation"])
def test_a_solve_with_a_stated_sigma_on_a_card_on_priors_is_flagged_in_text_and_json(tmp_path, per_op):
    text = CONF.read_text()
    assert f"step_sigma = {STATED}" in text
    if per_op:
        text = "\n".join(line for line in text.splitlines() if not line.startswith("efficiency"))
    sc = tmp_path / "s.toml"
    sc.write_text(text)
    assert EV.envelope("mi300x") is None and EV.envelope("h100-sxm") is not None
    e = json.loads(run("solve", "--scenario", sc, "--hw", "mi300x", "--json").stdout)["footing"]["evidence"]
    assert e["card"] == "prior" and e["stated"] and e["sigma"] == STATED
    assert e["evidence_sigma"] > 0 and "mi300x rests on priors" in e["source"]
    if per_op:  # the table's own reasons, and its sigma beyond the base (card on priors in quadrature)
        assert any("rests on priors" in r for r in e["reasons"]) and e["evidence_sigma"] > EV.base
    line = _footing_line(run("solve", "--scenario", sc, "--hw", "mi300x").stdout)
    assert line.startswith(f"step-time sigma {STATED:.3f}: given (risk.step_sigma)")
    assert f"the evidence-based sigma would be {e['evidence_sigma']:.3f}: mi300x rests on priors" in line
    # a fitted card under the same stated sigma: no flag, the words as before
    fitted = _footing_line(run("solve", "--scenario", sc, "--hw", "h100-sxm").stdout)
    assert "rests on priors" not in fitted
    assert fitted.startswith(f"step-time sigma {STATED:.3f}: given (risk.step_sigma);")


def test_the_inverse_question_on_a_card_on_priors_is_flagged():
    args = ["inverse", "--scenario", CONF, "--hw", "mi300x", "--deadline", "60d", "--max-cost", "2000000",
            "--models", "llama3-8b,llama3-70b", "--tokens", "100B:3T:3"]
    out = json.loads(run(*args, "--json").stdout)
    e = out["chosen"]["solve"]["footing"]["evidence"]
    assert out["chosen"]["plan"]["accelerator"] == "mi300x"
    assert e["card"] == "prior" and e["stated"] and "mi300x rests on priors" in e["source"]
    assert "mi300x rests on priors" in _footing_line(run(*args).stdout)
