"""A stack's attention kernel (catalogs/stacks.toml attention_kernel): torchtitan runs PyTorch SDPA, whose flash
backend on Hopper is FlashAttention-2; Megatron-Core runs the card's own fused attention (Transformer Engine).

Expected values are derived here from the published kernel figures (Shah et al. 2024, FlashAttention-3, figure
"attention forward speed, head dim 128, H100 80GB SXM5", causal mask): FlashAttention-2 335 TFLOPS, FlashAttention-3
616 at 16K tokens, ratio 335 / 616 = 0.544. A compute-bound flash kernel's time (less its launch cost) is
F / (P eta), so the portable kernel's attention time is the native one's / 0.544 and nothing else of the block moves.
"""

import tomllib
from dataclasses import replace

import numpy as np
import pytest

import tpopt
from tpopt.catalogs import load_catalog
from tpopt.catalogs.stacks import STACKS_FILE, build_stack, stack_profile
from tpopt.errors import InputError
from tpopt.models import ops, steptime
from tpopt.models import terms as T
from tpopt.models.roofline import PerfParams, portable_attention

ACC = "h100-sxm"
FA2_TFLOPS, FA3_TFLOPS = 335.0, 616.0  # Shah et al. 2024, causal, head dim 128, 16K tokens, H100 SXM5


def scenario(stack="megatron-core"):
    return tpopt.scenario({"model": {"name": "llama3-8b"},
                           "task": {"tokens": "1B", "seq_len": 32768, "global_batch": 8},
                           "schedule": {"deadline": "365d"}, "hardware": {"accelerator": [ACC], "stack": stack}})


def block_times(sc, phase=None):
    """(attention kernels' work time, every other kernel's time) of one block, launch costs removed; only the
    attention kernels of ``phase`` ("fwd" or "dx") count as attention when it is given."""
    lay = T.layout(sc, tp=1, mb=1)
    r = T.rates(sc, ACC)
    att = other = 0.0
    for k in ops.layer_kernels(sc.model, lay):
        t = float(steptime.kernel_time(k, r, lay.act_bytes)) - float(np.asarray(k.count)) * r.perf.kernel_overhead
        if k.kind == "attention" and phase in (None, k.phase):
            att += t
        elif k.kind != "attention":
            other += t
    return att, other


def test_hopper_cards_state_the_published_fa2_to_fa3_ratio_with_a_source():
    cat = load_catalog()
    for acc in ("h100-sxm", "h200", "h100-96gb-hbm2e"):
        p = cat.perf(acc)
        assert p.portable_attention_ratio == pytest.approx(FA2_TFLOPS / FA3_TFLOPS, abs=0.005)
        assert "FlashAttention-2" in p.sources["portable_attention_ratio"]
    # a card whose own kernel is FlashAttention-2 (A100) keeps its attention share
    assert cat.perf("a100-80gb-sxm").portable_attention_ratio == 1.0


def test_torchtitan_runs_the_portable_kernel_and_megatron_the_native_one():
    assert stack_profile("megatron-core").attention_kernel == "native"
    for name in ("torchtitan", "torchtitan-compile"):
        p = stack_profile(name)
        assert p.attention_kernel == "portable" and "FlashAttention-2" in p.sources["attention_kernel"]


def test_portable_attention_divides_attention_time_by_the_ratio_and_leaves_the_rest():
    """Forward: the native time / 0.544. Backward: the native kernel runs it at attention_bwd_ratio of its forward
    share, FlashAttention-2 at its own 322 / 335 = 0.96 (the same paper's backward figure, 16K tokens), so the
    portable backward time is the native one x bwd_native / (0.544 x 0.96)."""
    sc = scenario()
    perf = load_catalog().perf(ACC)
    ratio = perf.portable_attention_ratio
    portable = replace(sc, stack=replace(sc.stack, attention_kernel="portable"))
    (a0, o0), (a1, o1) = block_times(sc, "fwd"), block_times(portable, "fwd")
    assert a1 == pytest.approx(a0 / ratio, rel=1e-9)
    assert o1 == pytest.approx(o0, rel=1e-12)
    (d0, _), (d1, _) = block_times(sc, "dx"), block_times(portable, "dx")
    assert d1 == pytest.approx(d0 * perf.attention_bwd_ratio / (ratio * 322.0 / 335.0), rel=0.01)
    # at 32K tokens attention is a large part of the block: the step of the same plan grows
    plan = {"cards": 8, "accelerator": ACC, "tp": 1, "pp": 1, "micro_batch": 1, "zero_stage": 3}
    assert tpopt.evaluate(portable, **plan).metrics["step_s"] > tpopt.evaluate(sc, **plan).metrics["step_s"]


def test_portable_attention_is_identity_at_ratio_one_and_scales_only_attention():
    p = PerfParams(attention_efficiency=0.6, gemm_efficiency=0.7)
    assert portable_attention(p) is p
    q = portable_attention(replace(p, portable_attention_ratio=0.5))
    assert q.attention_efficiency == pytest.approx(0.3) and q.gemm_efficiency == 0.7


def test_unknown_attention_kernel_is_refused():
    t = dict(tomllib.loads(STACKS_FILE.read_text())["torchtitan"])
    t["attention_kernel"] = "fa9"
    with pytest.raises(InputError, match="attention_kernel"):
        build_stack("x", t)


def test_portable_backward_reaches_fa2s_published_backward_share():
    """Shah et al. 2024 (FlashAttention-3), head dim 128, 16K tokens, H100 SXM5: FlashAttention-2's backward runs at
    322 TFLOPS, 0.326 of the 989.4 TFLOPS BF16 peak. The portable kernel's backward share, eta_attn x
    portable_attention_ratio x portable_attention_bwd_ratio, lands within 6 % of it (the catalog's eta_attn 0.61 is
    FlashAttention-3's causal forward share at 8K tokens, 602 / 989); with the card's own backward ratio (0.72) it
    would be 0.24."""
    cat = load_catalog()
    for acc in ("h100-sxm", "h200", "h100-96gb-hbm2e"):
        p = cat.perf(acc)
        assert p.portable_attention_bwd_ratio == pytest.approx(322.0 / 335.0, abs=0.005)
        if acc != "h100-96gb-hbm2e":  # the 500 W part runs every kernel at its lower sustained clock
            q = portable_attention(p)
            assert q.attention_efficiency * q.attention_bwd_ratio == pytest.approx(322.0 / 989.4, rel=0.06)
    assert cat.perf("a100-80gb-sxm").portable_attention_bwd_ratio == 0.0  # FlashAttention-2 is native there
    p = PerfParams(attention_efficiency=0.6, attention_bwd_ratio=0.7, portable_attention_bwd_ratio=0.9)
    assert portable_attention(p).attention_bwd_ratio == 0.9 and portable_attention(p).attention_efficiency == 0.6


def test_nemo_2403_runs_the_portable_attention_and_delayed_scaling():
    """NeMo 24.03.01 (the long-sequence table's container): Transformer Engine 1.4, whose only FP8 recipe is
    DelayedScaling, and whose attention the catalog takes at FlashAttention-2's share; the rest as Megatron-Core."""
    p, ref = stack_profile("nemo-2403"), stack_profile("megatron-core")
    assert p.attention_kernel == "portable" and p.fp8_recipe == "delayed"
    assert "DelayedScaling" in p.sources["fp8_recipe"] and "cuDNN" in p.sources["attention_kernel"]
    assert (p.tp_overlap, p.dp_overlap, p.recompute) == (ref.tp_overlap, ref.dp_overlap, ref.recompute)
    # its kernel factor is benchmarks/fit_stacks.py's on its own runs (a stack the cards were not fitted on), stated
    assert p.sources["kernel_efficiency"].startswith("fitted: benchmarks/fit_stacks.py")
    # NeMo 24.03 runs Megatron-Core's own Transformer Engine kernels, so with its attention described (the portable
    # kernel) its rows fit at the reference kernels: within 2 % of 1 (fit_stacks' grid, 0.30-1.60, allows either
    # side; 0.946 before the H100 attention share moved to FlashAttention-3's causal figure, 1.009 after)
    assert abs(p.kernel_efficiency - 1) <= 0.02
