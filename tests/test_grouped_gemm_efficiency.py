"""The stack's grouped expert GEMM efficiency (catalogs/stacks.toml grouped_gemm_efficiency, models/steptime.py
grouped_call_time): each grouped expert GEMM call takes t_model / g, whatever bounds it (its roofline or the per-expert
host floor); dense GEMMs, the router's and the shared experts' keep their time, so dense plans do not move. g is fitted
on the stack's MoE runs by benchmarks/fit_grouped_gemm.py; its fit and in-place rewrite are checked here on data whose
answer is derived by hand."""

import importlib.util
import sys
import tomllib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import tpopt
from tpopt.catalogs.stacks import stack_names, stack_profile
from tpopt.models import ops, steptime
from tpopt.models import terms as T

ROOT = Path(__file__).resolve().parents[1]


def scenario(model="qwen3-30b-a3b", stack=None, precision="bf16-mixed"):
    hw = {"accelerator": ["h100-sxm"]}
    if stack:
        hw["stack"] = stack
    return tpopt.scenario({"model": {"name": model}, "hardware": hw, "schedule": {"deadline": "365d"},
                           "task": {"tokens": "1B", "seq_len": 4096, "global_batch": 1024, "precision": precision}})


def expert_kernels(a, ep):
    lay = ops.Layout(tp=1.0, micro_batch=1.0, seq_len=4096, ep=ep, expert_tp=1.0)
    return {(k.op, k.phase): k for k in ops.moe_kernels(a, lay)}


def test_call_time_is_the_modelled_time_over_g():
    # g = 0.8: a 1 ms call takes 1 / 0.8 = 1.25 ms; g = 1 leaves it
    assert float(steptime.grouped_call_time(1e-3, 0.8)) == pytest.approx(1.25e-3, rel=1e-12)
    assert float(steptime.grouped_call_time(2e-3, 1.0)) == 2e-3


@pytest.mark.parametrize("ep", [1.0, 64.0])
def test_grouped_calls_divide_by_g_at_the_floor_and_at_the_roofline(ep):
    # Qwen3-30B-A3B, 4,096 tokens, BF16 on H100: at EP 1 the up projection's call sits at its host floor (128 local
    # experts x 33.4 us), at EP 64 at its roofline (2 experts of 16,384 rows); either way the stack's call takes
    # the time modelled at g = 1, divided by g
    sc = scenario()
    r = T.rates(sc, "h100-sxm")
    g = stack_profile("megatron-core").grouped_gemm_efficiency
    assert r.grouped_ratio == g and 0.0 < g < 1.0
    ks = expert_kernels(sc.model, ep)
    for key in (("expert.up", "fwd"), ("expert.up", "dx"), ("expert.down", "dw")):
        as_modelled = float(steptime.kernel_time(ks[key], replace(r, grouped_ratio=1.0)))
        assert float(steptime.kernel_time(ks[key], r)) == pytest.approx(as_modelled / g, rel=1e-12)
    if ep == 1.0:  # the floor: 128 x 33.4 us / g
        assert float(steptime.kernel_time(ks[("expert.up", "fwd")], r)) == pytest.approx(128 * 33.4e-6 / g,
                                                                                          rel=1e-9)


def test_router_shared_experts_and_dense_gemms_keep_their_time():
    # DeepSeek-V3 has a shared expert (a dense MLP) and a router GEMM: neither is a grouped call
    sc = scenario(model="deepseek-v3")
    r = T.rates(sc, "h100-sxm")
    one = replace(r, grouped_ratio=1.0)
    ks = expert_kernels(sc.model, 64.0)
    for key in (("router", "fwd"), ("mlp.up", "fwd"), ("mlp.down", "dw")):
        assert float(steptime.kernel_time(ks[key], r)) == float(steptime.kernel_time(ks[key], one))
    dense = ops._linear("qkv", "", 4096.0, 2048.0, 64.0, 2.0)[0]
    assert float(steptime.kernel_time(dense, r)) == float(steptime.kernel_time(dense, one))


def test_a_dense_plan_does_not_move():
    # Llama 3 8B: no grouped call, so the step is the same at any g
    sc = scenario(model="llama3-8b")
    slow = replace(sc, stack=replace(sc.stack, grouped_gemm_efficiency=0.5))
    kw = {"tp": 1, "mb": 1}
    a, b = (T.op_times(s, acc="h100-sxm", recompute="none", **kw)[0] for s in (sc, slow))
    assert (float(a.fwd), float(a.dx), float(a.dw)) == (float(b.fwd), float(b.dx), float(b.dw))


def test_moe_layer_grows_by_its_grouped_calls_only():
    # the MoE layer's time at g against g = 1 grows by (1 / g - 1) x its grouped calls' modelled time, nothing else
    sc = scenario()
    g = sc.stack.grouped_gemm_efficiency
    one = replace(sc, stack=replace(sc.stack, grouped_gemm_efficiency=1.0))
    kw = {"tp": 1, "mb": 1, "ep": 8, "etp": 1}
    t, t1 = (T.op_times(s, acc="h100-sxm", recompute="none", **kw)[0] for s in (sc, one))
    r1 = T.rates(one, "h100-sxm")
    lay = T.layout(one, tp=1, mb=1, ep=8, etp=1)
    grouped = {ph: sum(float(steptime.kernel_time(k, r1)) for k in ops.moe_kernels(one.model, lay)
                       if k.op.startswith("expert.") and k.kind == "gemm" and k.phase == ph)
               for ph in ("fwd", "dx", "dw")}
    for ph in ("fwd", "dx", "dw"):
        assert float(getattr(t, ph)) - float(getattr(t1, ph)) == pytest.approx(grouped[ph] * (1 / g - 1), rel=1e-9)


def test_catalog_value_is_fitted_with_its_source_and_other_stacks_keep_one():
    mc = stack_profile("megatron-core")
    assert mc.sources["grouped_gemm_efficiency"].startswith("fitted: benchmarks/fit_grouped_gemm.py on the ")
    for name in stack_names():
        if name != "megatron-core":
            assert stack_profile(name).grouped_gemm_efficiency == 1.0


def _fit():
    spec = importlib.util.spec_from_file_location("fit_grouped_gemm", ROOT / "benchmarks" / "fit_grouped_gemm.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["fit_grouped_gemm"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_fit_root_is_where_the_median_log_error_crosses_zero():
    fg = _fit()
    g = fg.GRID
    # runs whose calls are all of their time: ln(predicted / published) = ln(c / g), zero at g = c; the median of
    # three such runs crosses zero at the middle c
    errs = np.log(np.array([[0.7], [0.85], [1.2]]) / g[None, :])
    assert fg.median_root(errs) == pytest.approx(0.85, abs=1e-3)
    # leave-one-out of the middle run: the median of the other two (0.7, 1.2) crosses at ln(0.7 / g) = -ln(1.2 / g),
    # g = sqrt(0.84) = 0.9165
    assert fg.median_root(np.delete(errs, 1, axis=0)) == pytest.approx(0.84 ** 0.5, abs=2e-3)


def test_write_adds_then_rewrites_only_the_value_and_its_source(tmp_path):
    fg = _fit()
    path = tmp_path / "stacks.toml"
    text = fg.STACKS_TOML.read_text()
    path.write_text(text)
    res = {"stack": "megatron-core", "g": 0.777, "runs": ["M1", "M2"], "tables": ["t"], "cards": ["h100-sxm"],
           "before": np.array([-0.1, -0.2]), "after": np.array([0.01, -0.01]), "loo": np.array([0.02, -0.02])}
    fg.write([res], path)
    new = path.read_text()
    changed = [(a, b) for a, b in zip(text.splitlines(), new.splitlines(), strict=True) if a != b]
    assert len(changed) == 2
    assert changed[0][1] == "grouped_gemm_efficiency = 0.777"
    assert changed[1][1].startswith('grouped_gemm_efficiency = "fitted: benchmarks/fit_grouped_gemm.py on the 2 MoE')
    assert tomllib.loads(new)["megatron-core"]["grouped_gemm_efficiency"] == 0.777
    # a stack without the key gets it after its kernel_efficiency, value and source
    res2 = dict(res, stack="torchtitan")
    fg.write([res2], path)
    table = tomllib.loads(path.read_text())["torchtitan"]
    assert table["grouped_gemm_efficiency"] == 0.777
    assert table["sources"]["grouped_gemm_efficiency"].startswith("fitted: benchmarks/fit_grouped_gemm.py")
