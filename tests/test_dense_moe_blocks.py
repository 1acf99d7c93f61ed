"""Dense-MLP blocks of a mixture-of-experts model in the per-operation model (DeepSeek's leading
``dense_layers``, Qwen-MoE's ``moe_step`` / ``mlp_only_layers``).

A stage runs its own blocks: (MoE blocks) x (MoE block time) + (dense blocks) x (dense block time), plus the
embedding on the first stage and the head on the last. The expectations below are derived here from the
kernel lists of models/ops.py (each block type's kernels timed one by one and summed) and from the pipeline
schedules' textbook shapes (one micro-batch through two stages; 1F1B keeps p - g micro-batches on stage g).
"""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_solver_properties import check_agreement  # the backends-agree check, reused

import tpopt
from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import build_scenario
from tpopt.models import memory, moe, ops, steptime
from tpopt.models import terms as T
from tpopt.models.arch import is_moe_layer

ACC = "h100-sxm"


def tiny(layers=4, dense_layers=1, hidden=1024, ffn=4096, experts=8, top_k=2, expert_ffn=512, batch=1, seq=2048,
         **more):
    """A small MoE scenario on the per-operation model (no hardware.efficiency), arch edited in place."""
    sc = tpopt.scenario({"model": {"name": "qwen3-30b-a3b"},
                         "task": {"tokens": "1B", "seq_len": seq, "global_batch": batch},
                         "schedule": {"deadline": "365d"}, "hardware": {"accelerator": [ACC]}})
    a = replace(sc.model, layers=layers, hidden=hidden, heads=8, kv_heads=4, head_dim=hidden // 8, ffn=ffn,
                vocab=4096, experts=experts, top_k=top_k, expert_ffn=expert_ffn, dense_layers=dense_layers, **more)
    return replace(sc, model=a)


def block_time(sc, moe_block, tp=1, mb=1, ep=1):
    """One block's fwd + dX + dW for one micro-batch: every kernel of its ops.layer_kernels list, timed
    one by one (tp = 1: no tensor-parallel collectives; recompute none)."""
    lay = T.layout(sc, tp=tp, mb=mb, ep=ep)
    r = T.rates(sc, ACC)
    return sum(float(steptime.kernel_time(k, r, lay.act_bytes)) for k in ops.layer_kernels(sc.model, lay, moe_block))


def extras_time(sc, mb=1):
    lay = T.layout(sc, tp=1, mb=mb)
    r = T.rates(sc, ACC)
    emb = sum(float(steptime.kernel_time(k, r, lay.act_bytes)) for k in ops.embedding_kernels(sc.model, lay))
    head = sum(float(steptime.kernel_time(k, r, lay.act_bytes)) for k in ops.head_kernels(sc.model, lay))
    return emb, head


def stage_parts(sc, mb=1):
    """(fwd, bwd) of each stage of a pp = 2 split of the 4-block tiny model, from the kernel lists."""
    lay, r = T.layout(sc, tp=1, mb=mb), T.rates(sc, ACC)
    e = lay.act_bytes

    def phases(ks):
        f = sum(float(steptime.kernel_time(k, r, e)) for k in ks if k.phase == "fwd")
        b = sum(float(steptime.kernel_time(k, r, e)) for k in ks if k.phase != "fwd")
        return f, b

    a = sc.model
    blocks = [phases(ops.layer_kernels(a, lay, is_moe_layer(a, i))) for i in range(a.layers)]
    emb, head = phases(ops.embedding_kernels(a, lay)), phases(ops.head_kernels(a, lay))
    s0 = [sum(x) for x in zip(emb, *blocks[:2], strict=False)]
    s1 = [sum(x) for x in zip(head, *blocks[2:], strict=False)]
    return s0, s1


def test_dense_block_kernels_are_a_dense_mlp():
    sc = tiny()
    a, lay = sc.model, T.layout(sc, tp=1, mb=1)
    dense_ops = {k.op for k in ops.layer_kernels(a, lay, False)}
    moe_ops = {k.op for k in ops.layer_kernels(a, lay, True)}
    assert "router" in moe_ops and "router" not in dense_ops and "mlp.up" in dense_ops
    # dense MLP forward FLOPs: gated up (2 x ffn) and down, 2 T h (2 f) + 2 T f h = 6 T h f
    tokens = 2048.0
    up_down = sum(float(k.flops) for k in ops.layer_kernels(a, lay, False)
                  if k.op in ("mlp.up", "mlp.down") and k.phase == "fwd")
    assert up_down == pytest.approx(6.0 * tokens * a.hidden * a.ffn, rel=1e-12)


def test_first_stage_runs_its_dense_block():
    """dense_layers = 1, L = 4, PP 2: stage 0 = embedding + 1 dense + 1 MoE block, stage 1 = 2 MoE blocks +
    head; the busiest stage's micro-batch is the larger of the two sums."""
    # dense block well above the MoE block (top_k x expert_ffn = 1024, whose grouped GEMMs take at least their local
    # experts' dispatch, steptime.expert_gemm_floor)
    sc = tiny(ffn=65536)
    dense, moe_b = block_time(sc, False), block_time(sc, True)
    assert dense > moe_b  # the premise of this case
    emb, head = extras_time(sc)
    s0, s1 = emb + dense + moe_b, 2 * moe_b + head
    got = sum(float(x) for x in T.microbatch_times(sc, acc=ACC, recompute="none", schedule="1f1b", tp=1, pp=2, mb=1))
    assert got == pytest.approx(max(s0, s1), rel=1e-9)
    # pp = 1: every block, each of its own type
    one = sum(float(x) for x in T.microbatch_times(sc, acc=ACC, recompute="none", schedule="1f1b", tp=1, pp=1, mb=1))
    assert one == pytest.approx(emb + dense + 3 * moe_b + head, rel=1e-9)


def test_pipeline_durations_follow_block_types():
    """One micro-batch through two stages (1F1B, m = 1): F0 + x + F1 + B1 + x + B0, x the boundary
    transfer; pure compute is the busiest stage's F + B."""
    sc = tiny(ffn=16384, batch=1)
    (f0, b0), (f1, b1) = stage_parts(sc)
    x = float(T.pipeline_transfer(sc, acc=ACC, tp=1, pp=2, dp=1, mb=1, nics=1))
    total, pure, bubble, _ = (float(v) for v in T.compute(sc, acc=ACC, recompute="none", schedule="1f1b", tp=1, pp=2,
                                                                  dp=1, mb=1, nics=1))
    assert pure + bubble == pytest.approx(f0 + f1 + b1 + b0 + 2 * x, rel=1e-9)
    assert pure == pytest.approx(max(f0 + b0, f1 + b1), rel=1e-9)


def test_all_to_all_counts_moe_blocks_only():
    """EP 2: the exchange count per micro-batch follows the MoE blocks of the busiest stage: 3 of the 4
    blocks on one stage; on PP 2, stage 0 has 1 MoE block and stage 1 has 2."""
    sc = tiny(batch=2)
    link = [float(T.ep_link(sc, acc=ACC, recompute="none", tp=1, pp=p, mb=1, nics=1, ep=2, etp=0, cap=0.0))
            for p in (1, 2)]
    assert link[0] > 0 and link[0] / link[1] == pytest.approx(3 / 2, rel=1e-12)
    all_moe = tiny(dense_layers=0, batch=2)
    assert float(T.ep_link(all_moe, acc=ACC, recompute="none", tp=1, pp=1, mb=1, nics=1, ep=2, etp=0,
                           cap=0.0)) == pytest.approx(link[0] * 4 / 3, rel=1e-12)


def test_inflight_activations_of_the_busiest_stage():
    """1F1B on PP 2 with m >= 2 micro-batches keeps 2 on stage 0 and 1 on stage 1. Stage 0 holds
    2 x (2 A + 1 R), stage 1 holds 1 x (2 A + 2 R) (A: one block's stored activations, R: one MoE block's
    routed tokens), so the peak is 4 A + 2 R, not 4 A + 4 R as if every block were a MoE block."""
    sc = tiny(batch=4)
    a = sc.model
    A = float(memory.activation_bytes_per_microbatch(a, 2048, 1.0, 1.0, 1, "none", **T._stored_kw(sc)))
    R = float(moe.routed_activation_extra(a, 2048.0, float(T.load_factor(sc, 1, 0.0)), 1.0,
                                          sc.memory.activation_bytes,
                                          combine_keeps_outputs=not sc.stack.moe_probs_in_activation))
    assert R > 0
    got = float(T.activations(sc, schedule="1f1b", recompute="none", tp=1, pp=2, dp=1, mb=1))
    assert got == pytest.approx(4 * A + 2 * R, rel=1e-12)
    # the routed tokens alone: stage 0 holds 2 x 1 MoE block, stage 1 holds 1 x 2
    assert float(T.moe_activations(sc, schedule="1f1b", recompute="none", tp=1, pp=2, dp=1, mb=1, ep=1, etp=0,
                                             cap=0.0)) == pytest.approx(2 * R, rel=1e-12)
    # closed-form bounds bracket the exact value
    lo = float(T.activations(sc, schedule="1f1b", recompute="none", tp=1, pp=2, dp=1, mb=1, peak="lo"))
    hi = float(T.activations(sc, schedule="1f1b", recompute="none", tp=1, pp=2, dp=1, mb=1, peak="hi"))
    assert lo <= got * (1 + 1e-12) and got <= hi * (1 + 1e-12)


def test_interleaved_dense_blocks_spread_over_every_stage():
    """moe_step = 2 (every other block MoE): each of 2 stages of 4 blocks has 2 of each; the stages differ
    only by the embedding and the head, and pp = 1 runs 4 dense + 4 MoE blocks."""
    sc = tiny(layers=8, dense_layers=0, moe_step=2)
    assert T.dense_split(sc, 2) == (2, 2)
    dense, moe_b = block_time(sc, False), block_time(sc, True)
    emb, head = extras_time(sc)
    one = sum(float(x) for x in T.microbatch_times(sc, acc=ACC, recompute="none", schedule="1f1b", tp=1, pp=1, mb=1))
    assert one == pytest.approx(emb + 4 * dense + 4 * moe_b + head, rel=1e-9)
    two = sum(float(x) for x in T.microbatch_times(sc, acc=ACC, recompute="none", schedule="1f1b", tp=1, pp=2, mb=1))
    assert two == pytest.approx(2 * dense + 2 * moe_b + max(emb, head), rel=1e-9)


def _moe_width(a):
    return a.top_k * a.expert_ffn + a.shared_experts * a.shared_ffn


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layers=st.integers(2, 6), hidden=st.sampled_from((2048, 4096)), ratio=st.sampled_from((0.125, 8.0)),
       top_k=st.sampled_from((2, 4)), expert_ffn=st.sampled_from((1024, 2048)), pp=st.sampled_from((1, 2)),
       mb=st.sampled_from((1, 2)), dense=st.data())
def test_dense_blocks_move_step_time_with_their_flops(layers, hidden, ratio, top_k, expert_ffn, pp, mb, dense):
    """dense_layers = 0 vs d > 0 on a random small MoE arch: the busiest stage's micro-batch and the step's
    compute move in the direction of (dense MLP FLOPs - activated MoE MLP FLOPs), here far apart (a dense
    width 8 x or 1/8 x top_k x expert_ffn) on GEMM-bound shapes (h >= 2,048, 4,096-token sequences: on
    tiny shapes the MoE block's extra launches and memory passes outweigh FLOPs), and nothing is NaN or
    negative."""
    d = dense.draw(st.integers(1, layers - 1))
    ffn = int(ratio * top_k * expert_ffn)
    base = tiny(layers=layers, dense_layers=0, hidden=hidden, ffn=ffn, top_k=top_k, expert_ffn=expert_ffn,
                batch=4 * mb, seq=4096)
    mixed = replace(base, model=replace(base.model, dense_layers=d))
    sign = np.sign(ffn - _moe_width(base.model))
    for sc in (base, mixed):
        if pp > 1 and not T.stage_split(sc, pp):
            return
    vals = []
    for sc in (base, mixed):
        mbt = sum(float(x) for x in T.microbatch_times(sc, acc=ACC, recompute="none", schedule="1f1b", tp=1, pp=pp,
                                                        mb=mb))
        comp = [float(x) for x in T.compute(sc, acc=ACC, recompute="none", schedule="1f1b", tp=1, pp=pp, dp=1,
                                               mb=mb, nics=1)]
        act = float(T.activations(sc, schedule="1f1b", recompute="none", tp=1, pp=pp, dp=1, mb=mb))
        for v in (mbt, *comp, act):
            assert np.isfinite(v) and v >= 0.0
        vals.append((mbt, comp[1] + comp[2]))
    (m0, c0), (m1, c1) = vals
    if pp == 1:  # the single stage holds every block: strictly in the direction of the FLOPs
        assert np.sign(m1 - m0) == sign and np.sign(c1 - c0) == sign
    else:  # the busiest stage may be one without dense blocks: never against the direction
        assert sign * (m1 - m0) >= -1e-12 * m0 and sign * (c1 - c0) >= -1e-12 * c0


@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(schedule=st.sampled_from(["interleaved:2", "zb-h1"]))
def test_backends_agree_with_dense_blocks_on_uneven_stages(schedule):
    """DeepSeek-V2-Lite (1 dense block, 26 MoE blocks) on the per-operation model: every backend finds the
    enumerator's optimum over PP 2 / 4 (uneven stages, the dense block on stage 0)."""
    raw = {"model": {"name": "deepseek-v2-lite"},
           "task": {"tokens": 2e9, "seq_len": 2048, "global_batch": 64},
           "schedule": {"deadline": "20d"}, "hardware": {"accelerator": ["h100-sxm"]},
           "checkpoint": {"save_interval": "1800s", "mode": "sync"},
           "search": {"zero_stage": [1], "tp": [1, 2], "pp": [2, 4], "micro_batch": [1, 2],
                      "recompute": ["none", "full"], "ep": [1, 2, 4], "schedule": [schedule, "1f1b"],
                      "max_cards": 64}}
    sc = build_scenario(raw, load_catalog())
    assert T.dense_split(sc, 4) is not None
    check_agreement(sc, "cost")
