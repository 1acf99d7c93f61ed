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


def block_times(sc):
    """(attention kernels' work time, every other kernel's time) of one block, launch costs removed."""
    lay = T.layout(sc, tp=1, mb=1)
    r = T.rates(sc, ACC)
    att = other = 0.0
    for k in ops.layer_kernels(sc.model, lay):
        t = float(steptime.kernel_time(k, r, lay.act_bytes)) - float(np.asarray(k.count)) * r.perf.kernel_overhead
        if k.kind == "attention":
            att += t
        else:
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
    sc = scenario()
    ratio = load_catalog().perf(ACC).portable_attention_ratio
    portable = replace(sc, stack=replace(sc.stack, attention_kernel="portable"))
    (a0, o0), (a1, o1) = block_times(sc), block_times(portable)
    assert a1 == pytest.approx(a0 / ratio, rel=1e-9)
    assert o1 == pytest.approx(o0, rel=1e-12)
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
