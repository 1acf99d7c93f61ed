"""The 26.06 GB200 MXFP8 presets of Megatron-Bridge (v0.5.0) as recipes: full-iteration CUDA graphs, the experts'
grouped MLP as one fused launch, the EP all-to-all overlapped; and what the fused launch changes in the model.

Expected settings come from the preset files the recipes cite: NVIDIA-NeMo/Megatron-Bridge pull request 4249
(commit bac3ffebf, "Enable Qwen3 GB200/GB300 MXFP8 CuTeDSL Fusion and Full-Iter CUDA Graphs for 26.06") sets
QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_FP8_MX_V1 and QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_FP8_MX_V2 to
moe_a2a_overlap=True, cuda_graph_impl="full_iteration", cutedsl_fused_grouped_mlp=True; pull request 4187 (commit
7a8bd64b2) does the same for DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_MX_V1 with recompute_modules=["mla_up_proj"].
The 26.04 presets (v0.4.1) and the B200 ones of 26.06 keep the partial graphs (attn, moe_router, moe_preprocess),
Transformer Engine's multi-stream grouped GEMM and no EP overlap.

The floor a fused launch removes (derivation): the megatron-core stack's expert_gemm_dispatch is 33.4 us per local
expert (Transformer Engine pull request 3134: 0.267 ms for 8 experts' GEMMs run one per expert). Qwen3-30B-A3B at
EP 8 holds 128 / 8 = 16 experts per card, so one grouped call takes at least 16 x 33.4 us = 0.5344 ms; with the
fused grouped MLP the call takes its roofline time, which for the down projection of a 4 x 4,096-token micro-batch
(16,384 tokens x top-8 = 131,072 rows, 768 x 2,048 per row) is below that floor on a GB200.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tpopt.catalogs import recipes as R
from tpopt.models import ops, steptime
from tpopt.models.terms import layer_times as LT
from tpopt.optimizer.runs import runs_from_csv

HEADER = "run,model,accelerator,gpus,precision,global_batch,micro_batch,seq_len,tp,pp,ep,recompute,iteration_s\n"


def _run(tmp_path, row: str):
    p = tmp_path / "runs.csv"
    p.write_text("# stack = megatron-core\n" + HEADER + row)
    run, = runs_from_csv(p)
    return run


@pytest.mark.parametrize("model", ["qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3"])
def test_the_26_06_gb200_mxfp8_presets_fuse_graph_and_overlap(model):
    r = R.find_recipe("megatron-core", model, ["gb200-nvl72"], "mxfp8-mixed")
    assert r is not None and "26.06" in r.name
    assert r.moe_fused_grouped_mlp is True and r.moe_cuda_graphs is True and r.moe_a2a_overlap is True
    assert r.moe_settings()["fused_grouped_mlp"] is True
    assert "v0.5.0" in r.sources["moe_fused_grouped_mlp"] and "v0.5.0" in r.sources["moe_a2a_overlap"]
    assert "fused launch" in r.assumption()
    if model == "deepseek-v3":
        assert r.recompute_modules == ("mla_up_proj",)


@pytest.mark.parametrize("card, precision", [("b200", "mxfp8-mixed"), ("gb200-nvl72", "bf16-mixed"),
                                             ("h100-sxm", "fp8-mixed")])
def test_other_cards_and_precisions_keep_the_unfused_recipe(card, precision):
    r = R.find_recipe("megatron-core", "qwen3-30b-a3b", [card], precision)
    assert r is not None and not r.moe_fused_grouped_mlp and not r.moe_a2a_overlap


def test_a_fused_grouped_mlp_pays_no_per_expert_floor(tmp_path):
    run = _run(tmp_path, "Q,qwen3-30b-a3b,gb200-nvl72,8,mxfp8,512,4,4096,1,1,8,,6.44\n")
    sc = run.scenario
    assert sc.moe.fused_grouped_mlp and sc.moe.a2a_overlap == "all" and sc.moe.cuda_graphs
    unfused = dataclasses.replace(sc, moe=dataclasses.replace(sc.moe, fused_grouped_mlp=False))
    assert steptime.expert_dispatch(33.4e-6, True) == 0.0
    assert steptime.expert_dispatch(33.4e-6, False) == pytest.approx(33.4e-6)
    assert LT.rates(sc, "gb200-nvl72").expert_dispatch == 0.0
    r_unfused = LT.rates(unfused, "gb200-nvl72")
    assert r_unfused.expert_dispatch == pytest.approx(33.4e-6)
    lay = LT.layout(sc, tp=1, mb=4, ep=8)
    down = [k for k in ops.layer_kernels(sc.model, lay, None) if k.op == "expert.down" and k.phase == "fwd"]
    assert len(down) == 1 and float(np.ravel(down[0].batch)[0]) == 16  # 128 experts / EP 8
    fused_t = float(np.max(steptime.kernel_time(down[0], LT.rates(sc, "gb200-nvl72"))))
    unfused_t = float(np.max(steptime.kernel_time(down[0], r_unfused)))
    # the floor binds: 0.5344 ms, over the stack's fitted grouped_gemm_efficiency g (steptime.grouped_call_time)
    g = r_unfused.grouped_ratio
    assert unfused_t == pytest.approx(16 * 33.4e-6 / g, rel=1e-9)
    assert fused_t < 16 * 33.4e-6 / g  # its roofline, below the floor


def test_a_scenario_states_it_against_its_recipe():
    from tpopt.catalogs.scenario import build_scenario
    raw = {"model": {"name": "qwen3-30b-a3b"}, "task": {"tokens": "1T", "seq_len": 4096, "global_batch": 512,
                                                       "precision": "mxfp8-mixed"},
           "hardware": {"accelerator": "gb200-nvl72"}, "schedule": {"deadline": "30d"},
           "moe": {"fused_grouped_mlp": False}}
    sc = build_scenario(raw)
    assert sc.moe.fused_grouped_mlp is False and sc.moe.a2a_overlap == "all"  # the recipe's other settings stay
    del raw["moe"]
    assert build_scenario(raw).moe.fused_grouped_mlp is True


def test_the_fused_launch_is_one_kernel_per_phase_without_an_activation_pass(tmp_path):
    """Unfused (Transformer Engine's multi-stream grouped linear layer, GROUPED_GEMM_STREAMS = 4 streams): each phase
    of each projection launches 1 + (16 - 1) / 4 = 4.75 kernels' overheads at EP 8 with 4 expert GEMMs resident, and
    the gated activation makes its own 3 + 5 element passes. Fused: one launch, all 16 experts' tiles resident, the
    activation in the up projection's epilogue (no expert.act kernel); the FLOPs are the same."""
    run = _run(tmp_path, "Q,qwen3-30b-a3b,gb200-nvl72,8,mxfp8,512,4,4096,1,1,8,,6.44\n")
    sc = run.scenario
    unfused = dataclasses.replace(sc, moe=dataclasses.replace(sc.moe, fused_grouped_mlp=False))
    fused_ks = ops.layer_kernels(sc.model, LT.layout(sc, tp=1, mb=4, ep=8), None)
    plain_ks = ops.layer_kernels(sc.model, LT.layout(unfused, tp=1, mb=4, ep=8), None)
    assert not [k for k in fused_ks if k.op == "expert.act"]
    assert len([k for k in plain_ks if k.op == "expert.act"]) == 2  # forward and dX passes
    for k in (k for k in fused_ks if k.op in ("expert.up", "expert.down")):
        assert float(np.max(k.count)) == 1.0 and float(np.max(k.resident)) == 16.0
    for k in (k for k in plain_ks if k.op in ("expert.up", "expert.down")):
        assert float(np.max(k.count)) == pytest.approx(1 + 15 / 4) and float(np.max(k.resident)) == 4.0
    assert float(np.sum([np.max(k.flops) for k in fused_ks if k.kind == "gemm"])) == pytest.approx(
        float(np.sum([np.max(k.flops) for k in plain_ks if k.kind == "gemm"])))


@pytest.mark.parametrize("model", ["qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3"])
@pytest.mark.parametrize("card, precision", [("gb300-nvl72", "mxfp8-mixed"), ("gb200-nvl72", "fp8-mixed"),
                                             ("gb200-nvl72", "bf16-mixed"), ("b200", "mxfp8-mixed"),
                                             ("h100-sxm", "fp8-mixed")])
def test_the_26_06_preset_is_the_gb200_mxfp8_one_only(model, card, precision):
    """Pull requests 4249 and 4187 change the GB200 FP8_MX presets only (the recipes' sources): GB300, FP8 current
    scaling, BF16, B200 and H100 keep a recipe without the fused grouped MLP, whichever model."""
    r = R.find_recipe("megatron-core", model, [card], precision)
    assert r is None or (not r.moe_fused_grouped_mlp and "26.06" not in r.name)
    mixed = R.find_recipe("megatron-core", model, ["gb200-nvl72", card], "mxfp8-mixed")  # every card must match
    assert mixed is None or mixed.moe_fused_grouped_mlp is not True or card == "gb200-nvl72"
