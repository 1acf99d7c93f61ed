"""A MoE plan is costed with the token dispatcher that runs on its card: the stack's flex dispatcher (DeepEP /
HybridEP, CUDA kernels) where the card's maker runs it, the fallback (alltoall: one row per dispatch on the wire)
on a card of another maker (accelerators.toml ``vendor``; catalogs/frameworks/megatron-lm.toml [flex_dispatcher]),
card by card in a scenario over several, and the report says so. The export writes the same dispatcher, so the plan
costed is the plan that runs."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import build_scenario, read_scenario_file
from tpopt.cli.main import cli
from tpopt.models.evaluate import evaluate
from tpopt.models.plan import Plan

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "qwen3-30b-a3b.toml"


def raw_on(cards: list[str], moe: dict[str, str] | None = None) -> dict:
    """The Qwen3-30B-A3B example on ``cards``, per-operation model (the one whose all-to-all reads the
    dispatcher), with ``moe`` keys added to its [moe] table."""
    raw = copy.deepcopy(read_scenario_file(EXAMPLE))
    raw["hardware"]["accelerator"] = cards
    raw["hardware"].pop("efficiency", None)
    raw["moe"].update(moe or {})
    return raw


def ep_link(raw: dict, card: str) -> float:
    """EP all-to-all time per step of 16 cards on two 8-card hosts, EP 16 (the group crosses the NICs)."""
    sc = build_scenario(raw, load_catalog())
    plan = Plan(accelerator=card, cards=16, zero_stage=1, tp=1, pp=1, micro_batch=1, ep=16)
    return float(evaluate(sc, plan).metrics["ep_link_s"])


def test_each_card_runs_its_own_dispatcher():
    sc = build_scenario(raw_on(["h100-sxm", "mi300x"]), load_catalog())
    assert sc.moe.dispatcher == "per-host"  # the stack's recipe: flex (HybridEP)
    assert sc.moe.dispatcher_on("h100-sxm") == "per-host"
    assert sc.moe.dispatcher_on("mi300x") == "direct"
    note = sc.moe.dispatcher_note("mi300x")
    assert "alltoall" in note and "mi300x is made by AMD" in note and "NVIDIA cards only" in note
    assert sc.moe.dispatcher_note("h100-sxm") == ""


def test_the_fallback_is_costed_as_the_stated_alltoall_and_moves_the_plan():
    """On the AMD card the all-to-all time is the one a scenario stating [moe] dispatcher = "direct" gets, and
    not the per-host one (whose cross-host rows are one copy per destination host, fewer than top-k's rows):
    the fallback is in the cost, not only in the text."""
    fallback = ep_link(raw_on(["mi300x"]), "mi300x")
    assert fallback == pytest.approx(ep_link(raw_on(["mi300x"], {"dispatcher": "direct"}), "mi300x"), rel=1e-12)
    per_host = ep_link(raw_on(["mi300x"], {"dispatcher": "per-host"}), "mi300x")
    assert fallback > per_host * 1.05
    # an NVIDIA card beside it in the same scenario keeps the flex dispatcher
    nvidia = ep_link(raw_on(["h100-sxm", "mi300x"]), "h100-sxm")
    assert nvidia == pytest.approx(ep_link(raw_on(["h100-sxm"], {"dispatcher": "per-host"}), "h100-sxm"), rel=1e-12)


def test_a_stated_dispatcher_wins():
    sc = build_scenario(raw_on(["mi300x"], {"dispatcher": "per-host"}), load_catalog())
    assert sc.moe.dispatcher_on("mi300x") == "per-host" and sc.moe.card_dispatchers == ()
    assert sc.moe.dispatcher_note("mi300x") == ""


def test_the_report_states_it_on_the_amd_plan_only(tmp_path):
    path = tmp_path / "qwen.toml"
    path.write_text(EXAMPLE.read_text(encoding="utf-8").replace("efficiency = 0.40", "# no efficiency"),
                    encoding="utf-8")
    runner = CliRunner()
    args = ["evaluate", "--scenario", str(path), "--cards", "16", "--ep", "16", "--zero", "1"]
    amd = runner.invoke(cli, [*args, "--hw", "mi300x"])
    assert amd.exit_code in (0, 3), amd.output
    assert "assumed: MoE token dispatcher alltoall, not the stack's flex" in " ".join(amd.output.split())
    nvidia = runner.invoke(cli, [*args, "--hw", "h100-sxm"])
    assert "MoE token dispatcher alltoall" not in " ".join(nvidia.output.split())
    js = runner.invoke(cli, [*args, "--hw", "mi300x", "--json"])
    assert "not the stack's flex" in json.loads(js.output)["footing"]["dispatcher"]


def test_the_export_runs_what_was_costed():
    """The Megatron-LM export of the AMD plan writes alltoall and no longer warns that the plan was costed with
    another dispatch (it was costed with the same)."""
    out = CliRunner().invoke(cli, ["export", "--format", "megatron", "--scenario", str(EXAMPLE), "--hw", "mi300x",
                                   "--cards", "16", "--ep", "16", "--zero", "1"])
    assert "--moe-token-dispatcher-type alltoall" in out.output
    assert "costed with" not in out.output
