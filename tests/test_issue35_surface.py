"""Issue 35, a new user's trial of the report surface: figures that name what they are, one plan on one card,
labels printed whole, reasons true for the card."""

from __future__ import annotations

import re
import tomllib

from tpopt import api
from tpopt.presentation import relaxation_lines

EXAMPLE = "examples/llama3-8b-confidence.toml"  # 95 % confidence, deadline 5.2 d


def test_explain_names_the_nominal_finish_and_the_quantile_under_a_confidence():
    """Under --confidence a deadline relaxation's threshold is a finish quantile; its plan's line printed the
    nominal finish beside it as if the same kind ("deadline >= 10.17 d -> ... 2.34 d"). Both are named now, and
    the quantile printed is the plan's own deadline.finish value."""
    out = api.explain(EXAMPLE, deadline="3d").to_dict()
    assert out["status"] == "infeasible"
    rel = next(r for r in out["relaxations"] if r["parameter"] == "deadline")
    assert rel["confidence"] == 0.95
    assert rel["finish_quantile_days"] > rel["finish_days"]  # the 95 % finish lies above the nominal one
    assert abs(rel["finish_quantile_days"] - rel["required_exact"]) < 0.01  # the threshold is that quantile
    text = "\n".join(relaxation_lines([rel]))
    m = re.search(r"nominal finish ([\d.]+) d, ([\d.]+) d at 95 % confidence", text.replace("\n", " "))
    assert m, text
    assert float(m.group(1)) == round(rel["finish_days"], 2)
    assert float(m.group(2)) == round(rel["finish_quantile_days"], 2)


def test_explain_without_a_confidence_prints_the_finish_alone():
    with open(EXAMPLE, "rb") as f:
        raw = tomllib.load(f)
    del raw["schedule"]["confidence"]
    raw["schedule"]["deadline"] = "3d"
    out = api.explain(raw).to_dict()
    assert out["status"] == "infeasible"
    rels = [r for r in out["relaxations"] if r.get("plan")]
    assert rels and all("finish_quantile_days" not in r and "confidence" not in r for r in rels)
    text = "\n".join(relaxation_lines(rels))
    assert "nominal finish" not in text and f"{rels[0]['finish_days']:.2f} d" in text


def test_evaluate_refuses_two_accelerators_in_one_line():
    """A plan runs on one card type: ``--hw a,b`` or a scenario listing two took the first silently. Now one line
    on stderr naming them, exit 2 (bad input), no traceback; one named card still evaluates."""
    from click.testing import CliRunner

    from tpopt.cli.main import cli
    from tpopt.errors import InputError

    for args in (["--scenario", EXAMPLE, "--hw", "h100-sxm,b200"], ["--scenario", "examples/qwen3-30b-a3b.toml"]):
        r = CliRunner().invoke(cli, ["evaluate", *args, "--cards", "64"])
        assert r.exit_code == 2, r.output
        lines = [x for x in r.output.splitlines() if x.strip()]
        assert len(lines) == 1 and "one accelerator" in lines[0] and "--hw NAME" in lines[0], r.output
        assert "Traceback" not in r.output
    ok = CliRunner().invoke(cli, ["evaluate", "--scenario", "examples/qwen3-30b-a3b.toml", "--hw", "h100-sxm",
                                  "--cards", "64", "--zero", "1", "--ep", "8"])
    assert ok.exit_code in (0, 3), ok.output
    try:
        api.evaluate(EXAMPLE, cards=64, accelerator="h100-sxm,b200")
    except InputError as e:
        assert "h100-sxm, b200" in str(e)
    else:
        raise AssertionError("two accelerators evaluated as one plan")


def test_calibrated_label_is_whole_or_cut_at_a_word():
    """The footing cut "calibrated on ... in megatr..." at 40 characters: the label is printed whole up to
    CALIBRATED_ON_CHARS, and a longer one is cut at a word (the whole source is in the JSON)."""
    from tpopt.presentation import CALIBRATED_ON_CHARS, _cut_at_word

    label = "the 5 runs of megatron-core in megatron-bridge-modern, published-2024-2026"
    assert _cut_at_word(label, CALIBRATED_ON_CHARS) == label
    cut = _cut_at_word(label, 40)
    assert cut == "the 5 runs of megatron-core in..."  # 33 characters of words that fit, no half word
    assert len(cut) <= 40


def test_moe_reason_on_a_prior_card_does_not_call_it_fitted(tmp_path):
    """A card on priors was fitted on no runs: its MoE reason names what the fitted cards ran, not "a card fitted
    on dense runs only"; a fitted card keeps that wording."""
    import json

    from click.testing import CliRunner

    from tpopt.cli.main import cli
    from tpopt.models import evidence as E

    text = "".join(line for line in open("examples/qwen3-30b-a3b.toml")
                   if not line.startswith("efficiency"))  # the per-operation model: the evidence's sigma
    path = tmp_path / "moe.toml"
    path.write_text(text)

    def reasons(card: str) -> str:
        r = CliRunner().invoke(cli, ["evaluate", "--scenario", str(path), "--hw", card, "--cards", "64", "--zero",
                                     "1", "--ep", "8", "--json"])
        assert r.exit_code in (0, 3), r.output
        return " ".join(json.loads(r.stdout)["footing"]["evidence"]["reasons"])

    why_prior, why_fitted = reasons("mi300x"), reasons("h100-sxm")
    assert "on a card fitted on" not in why_prior and "beyond what the fitted cards ran" in why_prior
    assert "mi300x rests on priors" in why_prior
    assert "on a card fitted on" in why_fitted
    assert E.MOE_ON_PRIOR in E.REASONS
