"""Host launch time of MoE blocks without CUDA graphs (moe.host_launch_exposed, stacks.toml moe_host_launch,
recipes.toml moe_cuda_graphs).

The per-block figure is derived here from NVIDIA's published guide (NVIDIA/Megatron-LM
docs/discussions/deepseek-v3-gb200-optimization, "Optimizing DeepSeek-V3 Training Performance on NVIDIA GB200
NVL72"): on one unchanged layout (256 GB200, TP1 PP8 VPP4 EP32, MBS 1, GBS 2048, 4,096 tokens) CUDA graphs of
attention, router and EP preprocess took 610.71 to 663.27 TFLOPS per GPU. Which recipes graph them comes from
NVIDIA-NeMo/Megatron-Bridge scripts/performance/configs at abdaeb62522e (the workload presets' cuda_graph_impl)."""

from __future__ import annotations

import pytest

from tpopt.catalogs.scenario import build_scenario
from tpopt.catalogs.stacks import stack_profile
from tpopt.models import moe
from tpopt.models.terms.stage_compute import moe_host_launch, stack_overhead


def _scenario(model: str, acc: str, precision: str = "bf16-mixed", moe_table: dict | None = None):
    raw = {"model": {"name": model}, "task": {"tokens": "1T", "seq_len": 4096, "global_batch": 1024,
                                              "precision": precision},
           "hardware": {"accelerator": acc}, "schedule": {"deadline": "30d"}}
    if moe_table is not None:
        raw["moe"] = moe_table
    return build_scenario(raw)


def test_the_per_block_host_time_is_the_guides_cuda_graph_gain():
    # step = F x tokens / (TFLOPS x cards), F about 265 GFLOP per token for DeepSeek-V3 at 4,096 tokens
    # (6 x 37B activated parameters plus causal MLA attention); the gain spread over 64 micro-batches and the
    # 61 / 8 blocks each card holds
    tokens, cards, flop = 2048 * 4096, 256, 265e9
    gain = flop * tokens / cards * (1 / 610.71e12 - 1 / 663.27e12)
    per_block = gain / (64 * 61 / 8)
    assert per_block == pytest.approx(2.31e-3, rel=0.01)
    assert stack_profile("megatron-core").moe_host_launch == pytest.approx(per_block, rel=0.01)
    assert stack_profile("torchtitan").moe_host_launch == 0.0  # no source for another stack: none charged


def test_ungraphed_blocks_pay_it_per_micro_batch_and_graphed_ones_do_not():
    assert float(moe.host_launch_exposed(64, 48, 2.31e-3, graphed=False)) == pytest.approx(64 * 48 * 2.31e-3)
    assert float(moe.host_launch_exposed(64, 48, 2.31e-3, graphed=True)) == 0.0


def test_the_recipe_decides_whether_a_scenario_pays_it():
    # Qwen3-30B-A3B: the H100 FP8 preset sets no cuda_graph_impl, the B200 one graphs attn, router, preprocess
    h100 = _scenario("qwen3-30b-a3b", "h100-sxm", "fp8-mixed")
    b200 = _scenario("qwen3-30b-a3b", "b200", "mxfp8-mixed")
    assert not h100.moe.cuda_graphs and b200.moe.cuda_graphs
    assert "no CUDA graphs" in h100.moe.recipe and "CUDA graphs" in b200.moe.recipe
    per = stack_profile("megatron-core").moe_host_launch
    # one stage holds all 48 MoE blocks; 64 micro-batches
    assert float(moe_host_launch(h100, acc="h100-sxm", pp=1, ga=64)) == pytest.approx(64 * 48 * per)
    assert float(moe_host_launch(b200, acc="b200", pp=1, ga=64)) == 0.0
    # PP 4: the stage with the most MoE blocks, 12 of 48
    assert float(moe_host_launch(h100, acc="h100-sxm", pp=4, ga=64)) == pytest.approx(64 * 12 * per)
    # a scenario that states it wins over the recipe
    stated = _scenario("qwen3-30b-a3b", "h100-sxm", "fp8-mixed", {"cuda_graphs": True})
    assert float(moe_host_launch(stated, acc="h100-sxm", pp=1, ga=64)) == 0.0
    # the host time is part of the stack's per-step host overhead
    base = _scenario("qwen3-30b-a3b", "h100-sxm", "fp8-mixed", {"cuda_graphs": True})
    assert float(stack_overhead(h100, acc="h100-sxm", pp=1, ga=64)
                 - stack_overhead(base, acc="h100-sxm", pp=1, ga=64)) == \
        pytest.approx(64 * 48 * per)


def test_a_dense_model_pays_nothing():
    dense = _scenario("llama3-8b", "h100-sxm")
    assert float(moe_host_launch(dense, acc="h100-sxm", pp=1, ga=64)) == 0.0


def test_deepseek_v3_on_b200_mxfp8_runs_the_v2_preset():
    # DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2 (PP 8, VP 2, EP 32, GBS 4,096): DeepEP, EP all-to-all overlapped,
    # CUDA graphs of attn / moe_router / moe_preprocess; the V1 layout (BF16 / FP8-CS) keeps none of these
    mx = _scenario("deepseek-v3", "b200", "mxfp8-mixed")
    assert (mx.moe.dispatcher, mx.moe.a2a_overlap, mx.moe.cuda_graphs) == ("per-host", "all", True)
    cs = _scenario("deepseek-v3", "b200", "fp8-mixed")
    assert (cs.moe.dispatcher, cs.moe.a2a_overlap, cs.moe.cuda_graphs) == ("per-host", "auto", False)
