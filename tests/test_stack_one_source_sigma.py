"""A stack whose kernel factor rests on one source counts as not fitted for the sigma (issue 35 item 1).

Derivation. A stack's kernel factor (stacks.toml ``kernel_efficiency``, benchmarks/fit_stacks.py) is fitted on
its runs; when all of them come from one publishing source, leaving that source out (the leave-one-source-out
fit, benchmarks/validate_published.py ``stack_left_out``) sends the factor to an unfitted stack's prior (the pool
of the other sources' stacks, benchmarks/fit_stacks.py ``pooled_prior``; 1 on the reference kernels). Its
out-of-sample error is then an unfitted stack's, and the sigma stated for a plan on it must be the one the
evidence gives an unfitted stack on the same card:

    sigma = sqrt(base_card^2 + c_stack^2)        (tpopt.models.evidence: factors in quadrature)

with c_stack the table's stack factor, or the stack's own out-of-sample spread where larger (the RMS of its
runs' leave-one-source-out log errors less the base in quadrature, ``[stack_evidence.spread]``), not
base_card alone ("a fitted card on a fitted stack"). A reference stack (the cards' calibration is its) and a
stack checked by two sources keep the base. MaxText's two runs (published-2024-2026 X1, X2) are one source's:
its plans on the H100 SXM take the wider sigma, and the footing says why ("maxtext fitted on one source").
"""

from __future__ import annotations

import json
import math
import tomllib
from dataclasses import replace

import pytest

from tests.test_confidence_sigma import run
from tests.test_evidence_sigma import _example, raw
from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import build_scenario
from tpopt.catalogs.uncertainty import load_evidence, parse, toml_text
from tpopt.errors import InputError
from tpopt.models import evidence as E
from tpopt.models import terms as T
from tpopt.optimizer.runs import runs_from_csv

CAT = load_catalog()
EV = load_evidence()


def _base(acc: str) -> float:
    """The card's base: the table's, or its own larger leave-one-out or, fitted on one source, leave-one-source-out
    spread (models.terms.card_base)."""
    return max(EV.base, CAT.perf(acc).residual_sigma, EV.card_spread_of(acc))


def test_the_table_lists_each_stacks_sources_and_the_reference_stacks():
    assert EV.reference_stacks == ("megatron-core", "megatron-lm-2021")
    srcs = dict(EV.stack_sources)
    assert srcs["maxtext"] == ("maxtext",)  # X1, X2: pytorch/maxtext's A3 recipe, one source
    assert len(srcs["megatron-lm-2021"]) == 2  # Narayanan et al. 2021 and Korthikanti et al. 2022
    assert "maxtext" in EV.everywhere().stacks  # run on a fitted card: before this rule, "fitted"


def test_a_single_source_stack_takes_an_unfitted_stacks_sigma_and_says_why():
    sc = build_scenario(raw("h100-sxm", stack="maxtext", seq=4096), CAT)
    e = T.evidence_of(sc, "h100-sxm", 64.0)
    c_stack = max(EV.contribution(E.STACK), dict(EV.stack_spread)["maxtext"])
    assert EV.stack_contribution("maxtext") == c_stack
    want = math.hypot(_base("h100-sxm"), c_stack)
    assert e["sigma"] == pytest.approx(want) and e["sigma"] > _base("h100-sxm")
    assert e["stack"] == "not fitted"
    assert "maxtext fitted on one source (maxtext)" in e["source"]
    # a stack no run checked takes the table's factor, not another stack's spread
    bare = replace(EV, stack_spread=())
    assert bare.stack_contribution("maxtext") == EV.contribution(E.STACK)
    # the same plan on the reference stack keeps the card's base: the rule moves single-source stacks only
    ref = build_scenario(raw("h100-sxm", seq=4096), CAT)
    assert T.evidence_of(ref, "h100-sxm", 64.0)["sigma"] == pytest.approx(_base("h100-sxm"))


def test_a_second_source_makes_the_stack_fitted_and_a_table_without_sources_keeps_the_old_rule():
    sc = build_scenario(raw("h100-sxm", stack="maxtext", seq=4096), CAT)
    facts = T.plan_facts(sc, "h100-sxm", 64.0)
    two = replace(EV, stack_sources=tuple((s, ("maxtext", "another source") if s == "maxtext" else v)
                                          for s, v in EV.stack_sources))
    assert not E.applies(two, facts, 64.0, 0.0)[E.STACK]
    assert not E.applies(replace(EV, stack_sources=()), facts, 64.0, 0.0)[E.STACK]
    assert E.applies(EV, facts, 64.0, 0.0)[E.STACK]
    # a reference stack never carries the stack factor, even when no run of it is in the envelopes
    none = replace(EV, envelopes=tuple((a, replace(env, stacks=("maxtext",))) for a, env in EV.envelopes))
    mc = T.plan_facts(build_scenario(raw("h100-sxm", seq=4096), CAT), "h100-sxm", 64.0)
    assert not E.applies(none, mc, 64.0, 0.0)[E.STACK]


def test_the_table_round_trips_and_refuses_a_bad_stack_section():
    text = toml_text(EV.base, EV.base_source, list(EV.contributions), EV.memory_error, EV.memory_source,
                     EV.envelopes, {a: "t" for a, _ in EV.envelopes}, EV.reference_stacks, EV.stack_sources,
                     EV.stack_spread)
    back = parse(tomllib.loads(text))
    assert back.stack_sources == EV.stack_sources and back.reference_stacks == EV.reference_stacks
    assert back.stack_spread == EV.stack_spread
    data = tomllib.loads(text)
    data["stack_evidence"]["sources"]["maxtext"] = []
    with pytest.raises(InputError, match="stack_evidence"):
        parse(data)
    data = tomllib.loads(text)
    data["stack_evidence"]["spread"]["maxtext"] = -0.1
    with pytest.raises(InputError, match="spread"):
        parse(data)


def test_the_footing_names_the_single_source_stack(tmp_path):
    p = _example(tmp_path, ["h100-sxm"])
    p.write_text(p.read_text().replace('[hardware]\n', '[hardware]\nstack = "maxtext"\n'))
    d = json.loads(run("solve", "--scenario", p, "--json").stdout)
    e = d["footing"]["evidence"]
    assert e["stack"] == "not fitted" and any("maxtext fitted on one source" in r for r in e["reasons"])
    assert e["sigma"] >= math.hypot(_base("h100-sxm"), EV.stack_contribution("maxtext")) - 1e-9
    text = " ".join(run("solve", "--scenario", p).stdout.split())
    assert f"step-time sigma {e['sigma']:.3f}: maxtext fitted on one source (maxtext)" in text


def test_the_fit_derives_a_single_source_stacks_spread_and_leaves_its_source_out():
    """uncertainty_fit.stack_spread on stated residuals: MaxText's X1, X2 at -0.3 and -0.4 on a base of 0.1 give
    sqrt((0.3^2 + 0.4^2) / 2 - 0.1^2) = sqrt(0.115); a reference stack (Megatron-Core) gets none; and what the
    tool would know without MaxText's source lists no MaxText source (so its runs are judged as not fitted)."""
    from tests.test_validation_machinery import DATA, _module

    fit, vp = _module("uncertainty_fit"), _module("validate_published")
    runs = runs_from_csv(DATA / "published-2024-2026.csv", CAT)
    res = [(r.name, vp.run_source(r), {"X1": -0.3, "X2": -0.4}.get(r.name, 0.0), []) for r in runs]
    spread = dict(fit.stack_spread(runs, res, 0.1))
    assert spread["maxtext"] == pytest.approx(math.sqrt(0.115))
    assert "megatron-core" not in spread and set(spread) >= {"torchtitan", "torchtitan-compile", "maxtext"}
    seen = vp.loso_evidence(runs, "maxtext", EV)
    assert seen.sources_of("maxtext") == () and not seen.stack_fitted("maxtext")
    assert seen.stack_fitted("megatron-core")


def test_a_card_fitted_on_one_source_takes_its_own_out_of_sample_spread_as_base():
    """The same rule for cards: a card whose calibrating runs all come from one source (B200: two
    Megatron-Bridge runs) has as its base the larger of the table's base, its own leave-one-out spread and its
    own leave-one-source-out spread (``[card_evidence.spread]``); the source says which."""
    spread = dict(EV.card_spread)
    assert spread["b200"] > max(EV.base, CAT.perf("b200").residual_sigma)  # the rule bites on B200
    sc = build_scenario(raw("b200", precision="fp8-mixed"), CAT)
    e = T.evidence_of(sc, "b200", 64.0)
    assert e["sigma"] == pytest.approx(spread["b200"])  # inside its envelope: the base alone
    assert "b200 fitted on one source" in e["source"]
    plain = replace(EV, card_spread=())
    assert T.card_base(replace(sc, risk=replace(sc.risk, evidence=plain)), "b200", plain)[0] == pytest.approx(
        max(EV.base, CAT.perf("b200").residual_sigma))
    assert "a100-80gb-sxm" not in spread  # fitted on two papers' runs
