"""The grouped expert GEMM's per-expert floor (models/steptime.py expert_gemm_floor): Transformer Engine's multi-stream
grouped linear layer sets up and enqueues one cuBLASLt GEMM per local expert from a host loop, so a call takes at least
local experts x the stack's expert_gemm_dispatch (catalogs/stacks.toml). The expected numbers come from the published
benchmarks the catalog cites, derived here by hand."""

from dataclasses import replace

import pytest

import tpopt
from tpopt.catalogs.stacks import stack_profile
from tpopt.models import ops, roofline, steptime
from tpopt.models import terms as T


def scenario(model="qwen3-30b-a3b", acc="h100-sxm", stack=None, precision="bf16-mixed"):
    hw = {"accelerator": [acc]}
    if stack:
        hw["stack"] = stack
    return tpopt.scenario({"model": {"name": model}, "hardware": hw, "schedule": {"deadline": "365d"},
                           "task": {"tokens": "1B", "seq_len": 4096, "global_batch": 1024, "precision": precision}})


def test_dispatch_per_expert_from_transformer_engines_benchmark():
    # NVIDIA/TransformerEngine PR 3134, SM100: the multi-stream grouped GEMM of 8 experts x 128 tokens (N = K = 2,048)
    # takes 0.267 ms with its operands pre-swizzled (the GEMMs alone), against 0.069 ms for one launch: the
    # experts' FLOPs, 8 x 2 x 128 x 2,048 x 2,048 = 8.6 GFLOP, take microseconds, so 0.267 ms / 8 is the
    # per-expert floor
    per_expert = 0.267e-3 / 8
    assert stack_profile("megatron-core").expert_gemm_dispatch == pytest.approx(per_expert, rel=2e-3)
    # the Hopper cross-check the source names: tgale96/grouped_gemm PR 37, Qwen3-30B-A3B's up projection on H100,
    # 128 experts x 512 tokens (K = 2,048, N = 1,536) at 129.5 TFLOP/s through a per-expert cuBLAS loop
    hopper = 2 * 128 * 512 * 2048 * 1536 / 129.5e12 / 128
    assert hopper == pytest.approx(24.9e-6, rel=2e-3)
    assert abs(hopper / per_expert - 1) < 0.26


def test_floor_decides_with_many_narrow_experts_and_not_with_few_wide_ones():
    # Qwen3-30B-A3B (h = 2,048, f_e = 768, k = 8), 4,096 tokens a card, BF16 on H100. EP 1: 128 local experts of
    # 4,096 x 8 / 128 = 256 rows; the up projection's forward (n = 1,536) is 2 x 256 x 2,048 x 1,536 = 1.6 GFLOP an
    # expert, about 3 us of tensor-core time, so the call takes 128 x 33.4 us = 4.27 ms
    sc = scenario()
    r = T.rates(sc, "h100-sxm")
    a = sc.model
    assert r.expert_dispatch == pytest.approx(33.4e-6)

    def up_fwd(ep):
        lay = ops.Layout(tp=1.0, micro_batch=1.0, seq_len=4096, ep=ep, expert_tp=1.0)
        return {(k.op, k.phase): k for k in ops.moe_kernels(a, lay)}[("expert.up", "fwd")]

    k1 = up_fwd(1.0)
    assert float(k1.batch) == 128 and float(k1.m) == 256
    # the stack's grouped calls then take that time over its fitted grouped_gemm_efficiency g (models/steptime.py
    # grouped_call_time; catalogs/stacks.toml, benchmarks/fit_grouped_gemm.py): 128 x 33.4 us / g
    g = r.grouped_ratio
    assert g == stack_profile("megatron-core").grouped_gemm_efficiency
    assert float(steptime.kernel_time(k1, r)) == pytest.approx(128 * 33.4e-6 / g, rel=1e-9)
    # EP 64: 2 local experts of 16,384 rows, 2 x 16,384 x 2,048 x 1,536 = 103 GFLOP each: the roofline time (over
    # 4 x the 2 x 33.4 = 67 us floor) stays
    k64 = up_fwd(64.0)
    p = r.perf
    eff = float(roofline.gemm_efficiency(16384, 1536, 2048, 2, p))
    roof = max(float(k64.flops) / (r.linear_peak * eff), float(k64.bytes) / (r.hbm * p.memory_efficiency)) \
        + float(k64.count) * p.kernel_overhead
    assert roof > 4 * 2 * 33.4e-6
    assert float(steptime.kernel_time(k64, r)) == pytest.approx(roof / g, rel=1e-9)


def test_no_floor_for_dense_gemms_or_single_launch_stacks():
    # a dense weight GEMM (one product, no resident streams) never pays it, and a stack that states no
    # expert_gemm_dispatch (torchtitan's torch._grouped_mm: one launch for all experts) has none
    sc = scenario()
    r = T.rates(sc, "h100-sxm")
    dense = ops._linear("qkv", "", 4096.0, 2048.0, 64.0, 2.0)[0]
    assert float(steptime.kernel_time(dense, r)) == pytest.approx(
        float(steptime.kernel_time(dense, replace(r, expert_dispatch=0.0))), rel=1e-12)
    assert stack_profile("torchtitan").expert_gemm_dispatch == 0.0
    assert T.rates(scenario(stack="torchtitan"), "h100-sxm").expert_dispatch == 0.0


def test_floor_is_the_same_host_loop_at_every_precision():
    # the floor is host work per expert: an FP8 recipe's grouped GEMM (its per-expert quantisation included) takes
    # at least the same 128 x 33.4 us at EP 1
    sc = scenario(precision="fp8-mixed")
    r = T.rates(sc, "h100-sxm")
    assert r.fp8
    lay = ops.Layout(tp=1.0, micro_batch=1.0, seq_len=4096, ep=1.0, expert_tp=1.0)
    for k in ops.moe_kernels(sc.model, lay):
        if k.op.startswith("expert.") and k.kind == "gemm":
            assert float(steptime.kernel_time(k, r)) >= 128 * 33.4e-6 * (1 - 1e-12)
