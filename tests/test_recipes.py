"""Framework recipes (catalogs/recipes.toml): a recipe's settings apply where a scenario or a measured row names
the stack and leaves them unstated, never where they are stated; every stated setting has its source.

Expected settings come from the recipe files they cite (NVIDIA-NeMo/Megatron-Bridge
scripts/performance/configs at commit abdaeb62522e): Qwen3-235B-A22B on H100 runs moe_token_dispatcher_type =
"alltoall" with moe_a2a_overlap=True and no recompute; on GB200 the flex (HybridEP) dispatcher without EP overlap;
gpt-oss-120b on H100 the alltoall dispatcher with recompute_modules = ["layernorm", "moe_act"]."""

from __future__ import annotations

import tomllib

import pytest

from tpopt.catalogs import recipes as R
from tpopt.catalogs.scenario import build_scenario
from tpopt.errors import InputError
from tpopt.optimizer.footing import footing
from tpopt.optimizer.runs import runs_from_csv

HEADER = "run,model,accelerator,gpus,precision,global_batch,micro_batch,seq_len,tp,pp,ep,recompute,iteration_s\n"


def _table(tmp_path, rows: str, stack: str = "megatron-core"):
    p = tmp_path / "runs.csv"
    p.write_text(f"# stack = {stack}\n" + HEADER + rows)
    return runs_from_csv(p)


def _scenario(model: str, acc: str | list[str], moe: dict | None = None, memory: dict | None = None):
    raw = {"model": {"name": model}, "task": {"tokens": "1T", "seq_len": 4096, "global_batch": 1024},
           "hardware": {"accelerator": acc}, "schedule": {"deadline": "30d"}}
    if moe is not None:
        raw["moe"] = moe
    if memory is not None:
        raw["memory"] = memory
    return build_scenario(raw)


def test_a_row_that_leaves_them_unstated_runs_its_recipe(tmp_path):
    run, = _table(tmp_path, "Q,qwen3-235b-a22b,h100-sxm,256,bf16,2048,1,4096,2,8,32,not stated (recipe default),70\n")
    assert (run.scenario.moe.dispatcher, run.scenario.moe.a2a_overlap) == ("direct", "all")  # alltoall, overlapped
    assert {p.recompute for p in run.plans} == {"none"}  # recompute_granularity = None, not a plan choice
    assert "Qwen3-235B-A22B H100" in run.extra["recipe"]
    g, = _table(tmp_path, "G,gpt-oss-120b,h100-sxm,64,bf16,1280,1,4096,1,4,8,not stated (recipe default),14\n")
    assert g.scenario.moe.dispatcher == "direct" and g.scenario.moe.a2a_overlap == "auto"  # alltoall, no overlap
    assert {p.recompute for p in g.plans} == {"norm+mlp"}  # layernorm + moe_act
    assert g.scenario.memory.flash_attention  # TE's fused sink attention


def test_the_recipe_follows_the_card(tmp_path):
    # BF16 on GB200: QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_BF16_V1 (HybridEP, moe_a2a_overlap unset, in v0.4.1 and
    # v0.5.0 alike). The MXFP8 row this test used before is the 26.06 container's preset since Megatron-Bridge pull
    # request 4249 (moe_a2a_overlap=True): tests/test_moe_fused_grouped_mlp.py checks it.
    run, = _table(tmp_path, "Q,qwen3-235b-a22b,gb200-nvl72,256,bf16,8192,1,4096,1,8,32,,18\n")
    assert (run.scenario.moe.dispatcher, run.scenario.moe.a2a_overlap) == ("per-host", "auto")  # HybridEP
    assert "GB200" in run.extra["recipe"]


def test_a_stated_recompute_or_dense_model_is_left_alone(tmp_path):
    run, = _table(tmp_path, "G,gpt-oss-120b,h100-sxm,64,bf16,1280,1,4096,1,4,8,full,14\n")
    assert {p.recompute for p in run.plans} == {"full"}
    dense, = _table(tmp_path, "D,llama3-8b,h100-sxm,8,bf16,128,1,8192,1,1,1,not stated (recipe default),4\n")
    assert "recipe" not in dense.extra


def test_a_scenario_takes_the_recipe_where_it_states_nothing_and_says_so():
    sc = _scenario("qwen3-235b-a22b", "h100-sxm")
    assert (sc.moe.dispatcher, sc.moe.a2a_overlap) == ("direct", "all")
    stated = _scenario("qwen3-235b-a22b", "h100-sxm", moe={"dispatcher": "per-host"})
    assert (stated.moe.dispatcher, stated.moe.a2a_overlap) == ("per-host", "all")  # only the unstated key
    two = _scenario("qwen3-235b-a22b", "h100-sxm", moe={"dispatcher": "per-host", "a2a_overlap": "none"})
    # the recipe still supplies the key the scenario leaves out (its CUDA graphs: none on H100) and says so
    assert (two.moe.dispatcher, two.moe.a2a_overlap, two.moe.cuda_graphs) == ("per-host", "none", False)
    assert "no CUDA graphs" in two.moe.recipe
    assert "dispatcher" not in two.moe.recipe and "all-to-all" not in two.moe.recipe  # the scenario's own, not said
    both = _scenario("qwen3-235b-a22b", "h100-sxm", moe={"dispatcher": "per-host", "a2a_overlap": "none",
                                                         "cuda_graphs": True})
    assert (both.moe.dispatcher, both.moe.a2a_overlap, both.moe.cuda_graphs, both.moe.recipe) == \
        ("per-host", "none", True, "")
    plan = {"accelerator": "h100-sxm", "cards": 256, "tp": 2, "pp": 8, "dp": 16, "micro_batch": 1}
    assert "Qwen3-235B-A22B H100 recipe" in footing(sc, plan, 10.0)["recipe"]
    assert "recipe" not in footing(both, plan, 10.0)


def test_a_scenario_over_several_cards_takes_only_a_recipe_that_fits_each():
    mixed = _scenario("qwen3-235b-a22b", ["h100-sxm", "b200"])
    # neither card entry applies to both; the card-agnostic Qwen3-MoE entry (flex) does
    assert mixed.moe.dispatcher == "per-host" and "HybridEP" in mixed.moe.recipe
    assert _scenario("qwen3-235b-a22b", "b200").moe.a2a_overlap == "auto"  # moe_a2a_overlap=False on B200


def test_every_stated_setting_has_a_source_naming_its_repository():
    data = tomllib.loads(R.RECIPES_FILE.read_text())
    assert R.recipes("megatron-core")
    for entries in data.values():
        for t in entries:
            stated = [k for k in R.SETTINGS if k in t]
            assert stated, t["name"]
            for k in stated:
                src = t["sources"][k]
                assert "Megatron-Bridge" in src or "config.json" in src or "TE" in src, (t["name"], k)


def test_bad_entries_are_one_line_errors():
    ok = {"name": "x", "models": ["qwen3-30b-a3b"], "moe_dispatcher": "alltoall",
          "sources": {"moe_dispatcher": "a recipe file"}}
    assert R.build_recipe("megatron-core", ok, "w").moe_settings() == {"dispatcher": "direct"}
    for bad, msg in ((dict(ok, sources={}), "no source"), (dict(ok, moe_dispatcher="smoke"), "moe_dispatcher"),
                     (dict(ok, attention="fast", sources={"moe_dispatcher": "s", "attention": "s"}), "attention"),
                     (dict(ok, moe_shared_expert_overlap=True,
                           sources={"moe_dispatcher": "s", "moe_shared_expert_overlap": "s"}), "not modelled"),
                     (dict(ok, colour="red"), "unknown key"), (dict(ok, models=[]), "at least one")):
        with pytest.raises(InputError, match=msg):
            R.build_recipe("megatron-core", bad, "w")


def test_megatron_mlp_module_rebuilds_nothing_in_a_moe_block(tmp_path):
    # NVIDIA/Megatron-LM megatron/core/transformer/transformer_layer.py (2edffad, the Megatron-Core of
    # Megatron-Bridge v0.4.2): recompute_modules "mlp" sets recompute_mlp only where the layer is not a MoE layer.
    # DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2 (v0.4.2) runs recompute_modules = ["mla_up_proj", "mlp"]: on
    # DeepSeek-V3's MoE blocks that rebuilds the MLA up-projections only, not the experts' activation (moe_act)
    rec = R.find_recipe("megatron-core", "deepseek-v3", ("b200",), "mxfp8-mixed")
    assert rec is not None and rec.recompute_modules == ("mla_up_proj", "mlp")
    assert rec.recompute(moe=True) == "mla_up"
    assert rec.recompute() == "mlp+mla_up"  # a dense model's "mlp" keeps its group
    run, = _table(tmp_path, "M,deepseek-v3,b200,256,mxfp8,4096,1,4096,1,8,32,not stated (recipe default),20\n")
    assert {p.recompute for p in run.plans} == {"mla_up"}
    # moe_act (the experts' activation) stays tpopt's mlp group on a MoE model: gpt-oss's layernorm + moe_act
    g, = _table(tmp_path, "G,gpt-oss-120b,b200,64,bf16,1280,4,4096,1,1,8,not stated (recipe default),6\n")
    assert {p.recompute for p in g.plans} == {"norm+mlp"}


def test_a_table_states_fp8_weight_gathers_per_run(tmp_path):
    # Megatron-Bridge's FP8 / MXFP8 precision configs set fp8_param_gather = True (src/megatron/bridge/training/
    # mixed_precision.py, v0.2.0-v0.5.0); Megatron-Core's own default (the stack's) is False
    p = tmp_path / "runs.csv"
    row = "llama3-8b,b200,8,mxfp8,128,2,8192,1,1,1,none,4\n"
    p.write_text("# stack = megatron-core\n# memory.A = fp8_param_gather=true\n" + HEADER + "A," + row + "B," + row)
    a, b = runs_from_csv(p)
    assert a.scenario.memory.fp8_param_gather is True and a.scenario.fp8_params()
    assert b.scenario.memory.fp8_param_gather is None and not b.scenario.fp8_params()
    p.write_text("# stack = megatron-core\n# memory.A = fp8_param_gather=maybe\n" + HEADER + "A," + row)
    with pytest.raises(InputError, match="fp8_param_gather"):
        runs_from_csv(p)
