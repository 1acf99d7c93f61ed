"""A recipe measured on one maker's cards carries none of that maker's own software onto another maker's card: the
settings catalogs/frameworks/megatron-lm.toml [vendor_settings] ties to card makers (CUDA graphs of the MoE blocks,
Transformer Engine's fused grouped MLP: NVIDIA) are left to the stack's defaults on an AMD card (accelerators.toml
``vendor``), the plan is costed so, and the footing and the Megatron exports say so in one line; on NVIDIA cards the
recipe applies as before, in a scenario over both makers too (CUDA graphs card by card). The token dispatcher's own
rule is tests/test_dispatcher_vendor.py's."""

from __future__ import annotations

import copy
import json
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from tpopt.catalogs import load_catalog
from tpopt.catalogs import recipes as R
from tpopt.catalogs.scenario import build_scenario, read_scenario_file
from tpopt.catalogs.stacks import FLEX_FILE, stack_profile
from tpopt.cli.main import cli
from tpopt.models.terms.stage_compute import moe_host_launch

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "qwen3-30b-a3b.toml"
BLOCKS = 48  # Qwen3-30B-A3B: 48 MoE blocks (models.toml), all on one stage at PP 1


def on(cards: list[str], moe: dict | None = None):
    """The Qwen3-30B-A3B example (per-operation model) on ``cards``, with ``moe`` keys added to its [moe] table:
    the card-agnostic Qwen3-MoE HybridEP recipe applies (CUDA graphs on)."""
    raw = copy.deepcopy(read_scenario_file(EXAMPLE))
    raw["hardware"]["accelerator"] = cards
    raw["hardware"].pop("efficiency", None)
    raw["moe"].update(moe or {})
    return build_scenario(raw, load_catalog())


def test_an_amd_plan_pays_the_host_launch_the_recipe_graphs_away_on_nvidia():
    """64 micro-batches x 48 ungraphed blocks x the stack's launch time per block (stacks.toml moe_host_launch) on
    the AMD card, as a scenario stating [moe] cuda_graphs = false pays; nothing on the NVIDIA card."""
    per = stack_profile("megatron-core").moe_host_launch
    amd, nvidia = on(["mi300x"]), on(["h100-sxm"])
    assert not amd.moe.cuda_graphs_on("mi300x") and nvidia.moe.cuda_graphs_on("h100-sxm")
    assert float(moe_host_launch(amd, acc="mi300x", pp=1, ga=64)) == pytest.approx(64 * BLOCKS * per, rel=1e-12)
    assert float(moe_host_launch(amd, acc="mi300x", pp=1, ga=64)) == float(
        moe_host_launch(on(["mi300x"], {"cuda_graphs": False}), acc="mi300x", pp=1, ga=64))
    assert float(moe_host_launch(nvidia, acc="h100-sxm", pp=1, ga=64)) == 0.0


def test_the_line_names_the_setting_the_card_and_its_maker():
    amd = on(["mi300x"])
    note = amd.moe.vendor_note("mi300x")
    assert "CUDA graphs of the MoE blocks not assumed on mi300x" in note and "HybridEP" in note
    assert "NVIDIA cards only" in note and "mi300x is made by AMD" in note and "[vendor_settings]" in note
    assert "CUDA graphs" not in amd.moe.recipe  # the recipe line states only what it supplied
    nvidia = on(["h100-sxm"])
    assert nvidia.moe.vendor_note("h100-sxm") == "" and "CUDA graphs" in nvidia.moe.recipe


def test_a_scenario_over_both_makers_graphs_the_blocks_on_the_card_that_runs_them():
    """CUDA graphs are decided card by card (the host launch time is a per-card input of the compute term): in one
    solve over H100 and MI300X the H100 plans pay no launch time and the MI300X plans pay 64 x 48 x the stack's
    time per block, as each card alone does; only the MI300X carries the line."""
    per = stack_profile("megatron-core").moe_host_launch
    mixed = on(["h100-sxm", "mi300x"])
    assert mixed.moe.cuda_graphs_on("h100-sxm") and not mixed.moe.cuda_graphs_on("mi300x")
    assert float(moe_host_launch(mixed, acc="h100-sxm", pp=1, ga=64)) == 0.0
    assert float(moe_host_launch(mixed, acc="mi300x", pp=1, ga=64)) == pytest.approx(64 * BLOCKS * per, rel=1e-12)
    assert "mi300x is made by AMD" in mixed.moe.vendor_note("mi300x") and mixed.moe.vendor_note("h100-sxm") == ""


def test_the_compute_term_of_a_mixed_scenario_is_each_cards_own():
    """The compute term over both cards (one stacked call per table, optimizer/space.py) equals each card's
    scenario alone: the MoE launch time rides in compute_inputs per card."""
    from tpopt.models import terms as T
    mixed = on(["h100-sxm", "mi300x"])
    plan = dict(recompute="none", schedule="1f1b", tp=1, pp=1, dp=16, mb=1, nics=8, ep=16)
    for card in ("h100-sxm", "mi300x"):
        alone = on([card])
        got = T.compute(mixed, acc=card, **plan)[0]
        assert float(got) == float(T.compute(alone, acc=card, **plan)[0]), card
    assert float(T.compute(mixed, acc="mi300x", **plan)[0]) > float(T.compute(on(["mi300x"], {"cuda_graphs": True}),
                                                                             acc="mi300x", **plan)[0])


def test_a_stated_setting_wins_and_is_not_said_to_be_left_out():
    stated = on(["mi300x"], {"cuda_graphs": True})
    assert stated.moe.cuda_graphs_on("mi300x") and stated.moe.vendor_note("mi300x") == ""


def test_the_rule_on_the_gb200_mxfp8_recipe():
    """Every MoE setting of the GB200 MXFP8 entry on an AMD card: CUDA graphs and the fused grouped MLP (CuTe DSL)
    left out, the EP all-to-all overlap kept (Megatron-Core's, which AMD's own MoE guide runs), the dispatcher
    kept for catalogs.stacks.dispatcher_on_card to decide card by card."""
    r = R.find_recipe("megatron-core", "qwen3-30b-a3b", ["gb200-nvl72"], "mxfp8-mixed")
    assert r is not None and r.moe_cuda_graphs and r.moe_fused_grouped_mlp and r.moe_a2a_overlap
    kept, off = r.moe_settings_on({"mi300x": "AMD"})
    # the graphs stay in the settings, left out on the card (MoeOptions.card_settings_off); the fused MLP on all
    assert kept == {"dispatcher": "per-host", "a2a_overlap": "all", "cuda_graphs": True}
    assert off["mi300x"][0] == ("cuda_graphs", "fused_grouped_mlp")
    assert "CUDA graphs of the MoE blocks and fused grouped MLP not assumed on mi300x" in off["mi300x"][1]
    assert r.moe_settings_on({"gb200-nvl72": "NVIDIA"}) == (r.moe_settings(), {})
    # over both makers the fused MLP is off on every card, and the NVIDIA card's line says why
    kept, off = r.moe_settings_on({"gb200-nvl72": "NVIDIA", "mi300x": "AMD"})
    assert "fused_grouped_mlp" not in kept and off["gb200-nvl72"][0] == ("fused_grouped_mlp",)
    assert "mi300x is made by AMD" in off["gb200-nvl72"][1]


def test_deepseek_v3s_generic_recipe_turns_nothing_vendor_only_on():
    """The card-agnostic DeepSeek-V3 entry states no CUDA graphs: nothing to leave out, no line."""
    r = R.find_recipe("megatron-core", "deepseek-v3", ["mi300x"], "bf16-mixed")
    assert r is not None and r.accelerators == () and r.moe_cuda_graphs is False
    assert r.moe_settings_on({"mi300x": "AMD"}) == (r.moe_settings(), {})


def test_every_vendor_setting_is_a_recipe_setting_with_a_source():
    table = tomllib.loads(FLEX_FILE.read_text(encoding="utf-8"))["vendor_settings"]
    listed = {k for k in table if k != "sources"}
    assert listed == {"moe_cuda_graphs", "moe_fused_grouped_mlp"} and listed <= set(R.SETTINGS)
    for k in listed:
        assert table[k] == ["NVIDIA"] and len(table["sources"][k]) > 80, k
    assert table["sources"]["moe_a2a_overlap"].startswith("not vendor-only")  # why it is not listed


def evaluate(hw: str, *more: str):
    path = ["--scenario", str(EXAMPLE), "--cards", "16", "--ep", "16", "--zero", "1", "--hw", hw]
    return CliRunner().invoke(cli, ["evaluate", *path, *more])


def test_the_report_and_the_export_state_it(tmp_path):
    text = " ".join(evaluate("mi300x").output.split())
    assert "assumed: Megatron-Bridge Qwen3-MoE HybridEP" in text and "CUDA graphs of the MoE blocks not assumed" in text
    js = json.loads(evaluate("mi300x", "--json").output)
    assert "mi300x is made by AMD" in js["footing"]["recipe_vendor"]
    assert "not assumed" not in " ".join(evaluate("h100-sxm").output.split())
    assert "recipe_vendor" not in json.loads(evaluate("h100-sxm", "--json").output)["footing"]
    args = ["export", "--format", "megatron", "--scenario", str(EXAMPLE), "--cards", "16", "--ep", "16", "--zero", "1"]
    amd = CliRunner().invoke(cli, [*args, "--hw", "mi300x"]).output
    assert "CUDA graphs of the MoE blocks not assumed" in " ".join(amd.split())
    assert "hybridep" not in amd.split("TPOPT_ARGS=(")[1]  # no HybridEP setting written
    nvidia = CliRunner().invoke(cli, [*args, "--hw", "h100-sxm"]).output
    assert "not assumed" not in nvidia and "hybridep" in nvidia.split("TPOPT_ARGS=(")[1]
