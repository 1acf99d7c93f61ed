"""Physical invariants of the plan model, and regression tests of the bugs a physics audit found.

Each property test draws random small plans (dense, GPT-style, MoE, MLA and sliding-window models on
NVLink, PCIe, AMD, Gaudi and rack-scale cards; per-operation and flat step-time models; BF16, FP16 and
FP8 recipes) and checks one physical statement, whose reason is in its docstring. A plan that breaks a
structural rule (divisibility, TP inside a host, EP group) is skipped: its figures describe no real run.
Nothing here compares against numbers the code produced; the bounds come from the statement itself.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import replace
from functools import cache

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import tpopt
from tpopt.errors import InputError
from tpopt.models import comm, memory
from tpopt.models import terms as T
from tpopt.models.arch import flops_per_token
from tpopt.models.evaluate import SPEC, evaluate
from tpopt.models.plan import Plan

MODELS = ("qwen3-8b", "gpt3-2.7b", "mixtral-8x7b", "deepseek-v2-lite", "mistral-7b", "gemma2-9b", "phi-2",
          "falcon-7b", "qwen3-30b-a3b", "gemma3-1b", "gpt-oss-20b", "bloom-7b1")
ACCELERATORS = ("h100-sxm", "a100-80gb-sxm", "rtx4090", "h100-pcie", "mi300x", "gaudi3", "b200", "mi250x", "l40s",
                "h20", "a100-40gb-pcie")
PRECISIONS = ("bf16-mixed", "fp16-mixed-fp32-grad", "fp8-mixed")
EXAMPLES = int(os.environ.get("TPOPT_PHYSICS_EXAMPLES", "60"))  # raise locally for a deeper search
SETTINGS = dict(max_examples=EXAMPLES, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


@cache
def scenario(model, acc, flat=False, precision="bf16-mixed", seq=2048, batch=64):
    hw = {"accelerator": [acc]}
    if flat:
        hw["efficiency"] = 0.4
    return tpopt.scenario({"model": {"name": model},
                           "task": {"tokens": "100B", "seq_len": seq, "global_batch": batch, "precision": precision},
                           "schedule": {"deadline": "365d"}, "hardware": hw, "search": {"max_cards": 4096}})


def run(sc, plan):
    """The plan's evaluation, or None when the plan is not a layout (input error or a structural rule)."""
    try:
        e = evaluate(sc, plan)
    except InputError:
        return None
    if any(SPEC[c.name].structural and not c.satisfied for c in e.constraints):
        return None
    return e


@st.composite
def cases(draw, flat=None, precision=None):
    """(scenario, plan) of a random small layout on one host or two."""
    model = draw(st.sampled_from(MODELS))
    acc = draw(st.sampled_from(ACCELERATORS))
    flat = draw(st.booleans()) if flat is None else flat
    precision = draw(st.sampled_from(PRECISIONS)) if precision is None else precision
    seq = draw(st.sampled_from((1024, 2048, 4096)))
    sc = scenario(model, acc, flat, precision, seq)
    a, g = sc.model, sc.system(acc).acc.cards_per_host
    tp = draw(st.sampled_from([t for t in (1, 2, 4, 8) if g % t == 0 and a.heads % t == 0 and a.kv_heads % t == 0]))
    pp = draw(st.sampled_from((1, 2, 4)))
    cards = g * draw(st.sampled_from((1, 2)))
    assume(cards % (tp * pp) == 0)
    kw = dict(tp=tp, pp=pp, micro_batch=draw(st.sampled_from((1, 2))), zero_stage=draw(st.integers(0, 3)),
              recompute=draw(st.sampled_from(("none", "norm", "norm+mlp", "full"))),
              schedule=draw(st.sampled_from(("1f1b", "interleaved", "zb-h1"))) if pp > 1 else "1f1b")
    if a.moe:
        dp = cards // (tp * pp)
        kw["ep"] = draw(st.sampled_from([e for e in (1, 2, 4, 8) if a.experts % e == 0 and (tp * dp) % e == 0]))
    plan = Plan(acc, cards, **kw)
    assume(run(sc, plan) is not None)
    return sc, plan


def peak(sc, acc):
    """The highest matrix peak the recipe's GEMMs may use (FP8 under fp8-mixed, FP16 under fp16 recipes)."""
    A, rec = sc.system(acc).acc, memory.recipe(sc.task.precision)
    if rec.matrix == "fp8" and A.peak_fp8 > 0:
        return A.peak_fp8
    if rec.matrix == "fp16" and A.peak_fp16 > 0:
        return A.peak_fp16
    return A.peak_flops


# ---------------------------------------------------------------------------------------------
# bounds


@settings(**SETTINGS)
@given(cases())
def test_every_figure_is_finite_and_non_negative(case):
    """Times, bytes, days and costs of a real layout are finite numbers >= 0 (a bubble, a wait or a
    memory term is never negative; no term divides by zero)."""
    sc, plan = case
    m = run(sc, plan).metrics
    for k, v in m.items():
        if isinstance(v, float):
            assert math.isfinite(v) and v >= 0.0, (k, v)


@settings(**SETTINGS)
@given(cases())
def test_mfu_stays_below_what_the_hardware_can_do(case):
    """Model FLOPs per second per card over the matrix peak: at most 80 % in the per-operation model
    (the best large GEMMs reach about 75-80 % of peak; attention, memory-bound kernels and
    communication only lower it), and at most the stated efficiency in the flat model (compute there
    is FLOPs / (peak x efficiency), and every other term adds time)."""
    sc, plan = case
    m = run(sc, plan).metrics
    flops = flops_per_token(sc.model, sc.task.seq_len) * sc.task.global_batch * sc.task.seq_len
    mfu = flops / (m["step_s"] * plan.cards * peak(sc, plan.accelerator))
    limit = sc.system(plan.accelerator).efficiency if not T.per_op_model(sc) else 0.8
    assert 0.0 < mfu <= limit * (1 + 1e-9)


@settings(**SETTINGS)
@given(cases())
def test_parts_add_up(case):
    """Memory is states + activations + temporary buffers (per-operation model: on each stage class, the
    largest class's sum being the rank's peak, and each term's heaviest stage at least that class's); the
    finish time is reserved days plus iterations x step x (1 + overhead); card-hours are cards x finish
    time (one unit each: GiB, s, d, h)."""
    sc, plan = case
    m = run(sc, plan).metrics
    parts = m["states_gib"] + m["activations_gib"] + m["temporary_gib"]
    if "memory_by_class" not in m:
        assert parts == pytest.approx(m["memory_per_card_gib"], rel=1e-9)
    else:
        rows = m["memory_by_class"]
        for r in rows:
            assert r["states_gib"] + r["activations_gib"] + r["temporary_gib"] == pytest.approx(r["total_gib"],
                                                                                                rel=1e-9)
            assert all(r[k] <= m[k] * (1 + 1e-12) for k in ("states_gib", "activations_gib", "temporary_gib"))
        peak = max(rows, key=lambda r: r["total_gib"])
        assert peak["total_gib"] == m["memory_per_card_gib"] and peak["stage"] == m["memory_peak_class"]
        assert m["memory_per_card_gib"] <= parts * (1 + 1e-12)  # never above the old sum of the maxima
    finish = (sc.task.reserved_s + m["iterations"] * m["step_s"] * (1 + m["overhead_fraction"])) / 86400.0
    assert finish == pytest.approx(m["finish_days"], rel=1e-9)
    assert plan.cards * m["finish_days"] * 24.0 == pytest.approx(m["card_hours"], rel=1e-9)
    assert m["step_s"] >= m["compute_s"] + m["input_wait_s"] - 1e-12


# ---------------------------------------------------------------------------------------------
# monotonicity: memory


@settings(**SETTINGS)
@given(cases(), st.sampled_from(("tp", "pp")))
def test_more_model_parallelism_does_not_raise_per_card_state(case, axis):
    """Doubling TP (or PP) at the same DP splits the weights, gradients and optimizer state of each card
    over twice the ranks: the per-card state cannot grow (replicated norms and biases stay the same)."""
    sc, plan = case
    bigger = replace(plan, cards=plan.cards * 2, **{axis: getattr(plan, axis) * 2})
    e2 = run(sc, bigger)
    assume(e2 is not None)
    assert e2.metrics["states_gib"] <= run(sc, plan).metrics["states_gib"] * (1 + 1e-12)


@settings(**SETTINGS)
@given(cases())
def test_higher_zero_stage_does_not_raise_state(case):
    """Each ZeRO stage shards one more kind of state over the data-parallel group (1: optimizer,
    2: + gradients, 3: + weights); none keeps more bytes per card than the stage below."""
    sc, plan = case
    states = [run(sc, replace(plan, zero_stage=z)).metrics["states_gib"] for z in range(4)]
    assert all(b <= a * (1 + 1e-12) for a, b in zip(states, states[1:], strict=False)), states


@settings(**SETTINGS)
@given(cases(flat=False))
def test_flash_attention_and_sequence_parallelism_do_not_raise_activations(case):
    """Flash attention stores no s x s score or probability matrix; sequence parallelism splits the
    norm, dropout and residual activations over TP ranks. Neither can add stored bytes."""
    sc, plan = case
    act = run(sc, plan).metrics["activations_gib"]
    assert act <= run(sc, replace(plan, flash_attention=False)).metrics["activations_gib"] * (1 + 1e-12)
    if plan.tp > 1:
        assert act <= run(sc, replace(plan, sequence_parallel=False)).metrics["activations_gib"] * (1 + 1e-12)


@settings(**SETTINGS)
@given(cases(flat=False))
def test_recompute_trades_memory_for_time(case):
    """Recomputation stores fewer activations and redoes forward work: none <= selective <= full in
    step time, and the reverse in stored activations."""
    sc, plan = case
    e = {rc: run(sc, replace(plan, recompute=rc)).metrics for rc in ("none", "norm+mlp", "full")}
    steps = [e[rc]["step_s"] for rc in ("none", "norm+mlp", "full")]
    acts = [e[rc]["stored_activations_gib"] for rc in ("none", "norm+mlp", "full")]
    assert steps[0] <= steps[1] * (1 + 1e-12) and steps[1] <= steps[2] * (1 + 1e-12), steps
    assert acts[0] >= acts[1] * (1 - 1e-12) and acts[1] >= acts[2] * (1 - 1e-12), acts


# ---------------------------------------------------------------------------------------------
# monotonicity: time


@settings(**SETTINGS)
@given(cases(flat=False))
def test_flash_attention_is_not_slower(case):
    """A fused causal kernel skips the masked half of the s x s products and the softmax passes through
    memory; the unfused path computes the whole square at GEMM efficiency and reads and writes it."""
    sc, plan = case
    assert run(sc, plan).metrics["step_s"] <= \
        run(sc, replace(plan, flash_attention=False)).metrics["step_s"] * (1 + 1e-12)


@settings(**SETTINGS)
@given(cases(flat=False, precision="bf16-mixed"))
def test_fp8_is_not_slower_on_wide_gemms(case):
    """On a card whose FP8 peak is at least twice its BF16 peak, weight GEMMs at least 2,048 wide per
    TP rank are compute-bound: FP8 halves their time and their operand bytes, which outweighs the cast of
    their inputs. (Narrow GEMMs may be slower in FP8, as Transformer Engine warns; Gaudi 3 has the same
    FP8 and BF16 peak.) The recipes' other choices are held fixed: a published MoE recipe may capture CUDA graphs
    in one precision and not the other (Qwen3-30B-A3B on H100: BF16 graphed, FP8 not), a host-launch term that
    is not the GEMMs' precision."""
    sc, plan = case
    A = sc.system(plan.accelerator).acc
    assume(A.peak_fp8 >= 2 * A.peak_flops and sc.model.hidden / plan.tp >= 2048)
    sc8 = scenario(sc.model.name, plan.accelerator, False, "fp8-mixed", sc.task.seq_len)
    sc8 = replace(sc8, moe=replace(sc8.moe, cuda_graphs=sc.moe.cuda_graphs))
    assert run(sc8, plan).metrics["compute_s"] <= run(sc, plan).metrics["compute_s"] * (1 + 1e-12)


@settings(**SETTINGS)
@given(cases())
def test_more_cards_at_fixed_layout_do_not_slow_compute(case):
    """Doubling the data-parallel degree at the same TP, PP and micro-batch halves the micro-batches each
    card runs per step: compute (and state per card) cannot grow; only communication may."""
    sc, plan = case
    dp = plan.cards // (plan.tp * plan.pp)
    assume(sc.task.global_batch % (2 * dp * plan.micro_batch) == 0)
    e1, e2 = run(sc, plan), run(sc, replace(plan, cards=plan.cards * 2))
    assume(e2 is not None)
    assert e2.metrics["compute_s"] <= e1.metrics["compute_s"] * (1 + 1e-12)
    assert e2.metrics["states_gib"] <= e1.metrics["states_gib"] * (1 + 1e-12)


@settings(**SETTINGS)
@given(cases())
def test_more_micro_batches_do_not_shrink_compute(case):
    """Twice the global batch at the same plan gives every card twice the micro-batches per step: the
    step's compute cannot shrink (the pipeline's fill and drain are paid once either way)."""
    sc, plan = case
    big = scenario(sc.model.name, plan.accelerator, not T.per_op_model(sc), sc.task.precision, sc.task.seq_len,
                   2 * sc.task.global_batch)
    e2 = run(big, plan)
    assume(e2 is not None)
    assert e2.metrics["compute_s"] >= run(sc, plan).metrics["compute_s"] * (1 - 1e-12)


@settings(**SETTINGS)
@given(cases())
def test_more_nics_do_not_slow_the_step(case):
    """More NICs per host can only add bandwidth to the rings and pipeline boundaries that cross hosts."""
    sc, plan = case
    A = sc.system(plan.accelerator).acc
    assume(A.max_nics_per_host > 1)
    one = run(sc, replace(plan, nics_per_host=1))
    assert run(sc, replace(plan, nics_per_host=A.max_nics_per_host)).metrics["step_s"] <= \
        one.metrics["step_s"] * (1 + 1e-12)


# ---------------------------------------------------------------------------------------------
# regressions (bugs the audit found)


def test_shared_link_never_waits_longer_than_the_other_traffic():
    """comm.shared_link_time: 10 s of DP traffic against 8 s of TP traffic spread over 20 s of compute
    shares the link all along, 10 / (1 - 0.4) = 16.7 s; over 10 s of compute the share would be 80 %
    (50 s), but the TP traffic can delay it by its own 8 s at most: 18 s. At a share of 100 % or more
    the first term is infinite and the second holds."""
    assert float(comm.shared_link_time(10.0, 8.0, 20.0)) == pytest.approx(10.0 / 0.6)
    assert float(comm.shared_link_time(10.0, 8.0, 10.0)) == pytest.approx(18.0)
    assert float(comm.shared_link_time(10.0, 8.0, 4.0)) == pytest.approx(18.0)
    assert float(comm.shared_link_time(10.0, 0.0, 4.0)) == pytest.approx(10.0)


def test_contention_does_not_make_slower_kernels_faster():
    """Regression: a DP-bound ZeRO-3 plan on PCIe cards (Qwen3-30B-A3B, 8 x H100 PCIe, TP 4) was 22 %
    slower WITH flash attention: the DP ring's link time was divided by (1 - TP share of the window), so
    a longer window (unfused attention) shrank the stretch. The TP traffic delays the ring by at most its
    own link time, so the link-bound step is the same with or without flash attention. The plan runs EP 1, 128
    local experts: with the stack's per-expert floor of the grouped GEMM (steptime.expert_gemm_floor, 128 x 33.4 us
    per call) its compute exceeds the DP link, so the link-bound case is the same plan on a stack whose grouped
    GEMM is one launch."""
    base = scenario("qwen3-30b-a3b", "h100-pcie", seq=4096, batch=256)
    plan = Plan("h100-pcie", 8, zero_stage=3, tp=4, recompute="attn")
    floored = run(base, plan).metrics
    assert floored["compute_s"] > floored["comm_link_s"]
    sc = replace(base, stack=replace(base.stack, expert_gemm_dispatch=0.0))
    flash, plain = run(sc, plan).metrics, run(sc, replace(plan, flash_attention=False)).metrics
    assert flash["step_s"] <= plain["step_s"] * (1 + 1e-12)
    # link-bound: the step is the DP link plus at most every TP byte it waits for (+ unhidden, offload)
    bound = flash["comm_link_s"] + flash["offload_s"] + 1.0
    assert flash["step_s"] <= bound


def test_window_is_one_stage_not_a_sum_of_maxima():
    """Regression: the compute window that hides DP traffic summed each phase's maximum over stages (the
    forward of the head stage, the backward of the embedding stage), longer than any card's micro-batch,
    so full recompute made a DP-bound step shorter. The window is now the busiest stage's own sum."""
    sc = scenario("deepseek-v2-lite", "h100-sxm", seq=4096, batch=256)
    acc, rc, tp, pp, mb = "h100-sxm", "full", 2, 2, 1
    layer, first, last = T.op_times(sc, acc=acc, recompute=rc, tp=tp, mb=mb)
    dense = T.op_times(sc, acc=acc, recompute=rc, tp=tp, mb=mb, dense=True)[0]  # its leading dense-MLP block
    split, dsplit = T.stage_split(sc, pp), T.dense_split(sc, pp)
    totals = [(n - d) * (layer.fwd + layer.dx + layer.dw) + d * (dense.fwd + dense.dx + dense.dw)
              + (first.fwd + first.dx + first.dw if g == 0 else 0.0)
              + (last.fwd + last.dx + last.dw if g == pp - 1 else 0.0)
              for g, (n, d) in enumerate(zip(split, dsplit, strict=True))]
    window = sum(float(x) for x in T.microbatch_times(sc, acc=acc, recompute=rc, schedule="1f1b", tp=tp, pp=pp, mb=mb))
    assert window == pytest.approx(max(float(t) for t in totals), rel=1e-12)
    plan = Plan(acc, 32, zero_stage=3, tp=tp, pp=pp, schedule="interleaved")
    steps = [run(sc, replace(plan, recompute=r)).metrics["step_s"] for r in ("none", "full")]
    assert steps[0] <= steps[1]


def test_fp8_gemms_read_one_byte_operands():
    """Regression: FP8 weight GEMMs were charged BF16 operand bytes, so a memory-bound GEMM (few rows)
    cost as much as in BF16 plus the cast. Operands of C[m, n] = A[m, k] B[k, n] in FP8 move
    m k + k n bytes (the output stays in 2-byte BF16): a 16 x 4096 x 32768 GEMM moves 269.6 MB in BF16
    and 135.3 MB in FP8; on an H100 both are memory-bound (4.3 GFLOP at 0.75 x 16/128 of the peak take
    48 us, against 115 us and 58 us of memory traffic at the catalog's 70 % of 3.35 TB/s). Before the FP8 GEMM
    its activation input is quantised with per-tensor current scaling (amax pass, then the cast)."""
    from tpopt.models import ops, steptime

    sc16 = scenario("qwen3-8b", "h100-sxm")
    sc8 = scenario("qwen3-8b", "h100-sxm", precision="fp8-mixed")
    r16, r8 = T.rates(sc16, "h100-sxm"), T.rates(sc8, "h100-sxm")
    m, k, n = 16.0, 4096.0, 32768.0
    gemm = ops._linear("mlp.down", "", m, k, n, 2.0)[0]
    bf16_bytes, fp8_bytes = 2.0 * (m * k + k * n + m * n), (m * k + k * n) + 2.0 * m * n
    assert float(gemm.bytes) == bf16_bytes
    hbm = r16.hbm * r16.perf.memory_efficiency
    t16 = float(steptime.kernel_time(gemm, r16))
    t8 = float(steptime.kernel_time(gemm, r8))
    # per-tensor current scaling (the megatron-core stack's FP8 recipe): an amax pass reads the BF16 input
    # (2 bytes), the cast reads it again and writes 1 byte: 5 bytes per element of the m x k input
    cast = m * k * 5.0 / hbm + r8.perf.kernel_overhead
    assert t16 == pytest.approx(bf16_bytes / hbm + r16.perf.kernel_overhead, rel=1e-9)
    assert t8 == pytest.approx(fp8_bytes / hbm + r8.perf.kernel_overhead + cast, rel=1e-9)


def test_bubble_is_never_negative():
    """Regression: the bubble (completion - busiest stage's work) printed -2e-16 s for a one-stage plan."""
    sc = scenario("phi-2", "b200", precision="fp8-mixed", seq=4096, batch=256)
    m = run(sc, Plan("b200", 32, zero_stage=2, tp=8)).metrics
    assert m["bubble_s"] >= 0.0
    arr = T.compute(sc, acc="b200", recompute="none", schedule="1f1b", tp=np.array([8, 8]), pp=np.array([1, 2]),
                    dp=np.array([4, 2]), mb=1, nics=8)
    assert np.all(arr[2] >= 0.0)


def test_public_anchors_stay_within_a_factor_of_two():
    """benchmarks/anchors.py runs, finds a plan that fits for every published run, and predicts each within a
    factor of two of the published figure (a sanity band, not an accuracy target: the benchmark prints the
    errors, 7-28 % optimistic when written; a broken relation shows up as a factor)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "anchors.py"
    spec = importlib.util.spec_from_file_location("tpopt_anchors", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    for a in mod.ANCHORS:
        sc, plan, m, slow, tried, n = mod.evaluate_anchor(a)
        assert plan is not None, a.name
        assert 0.5 <= mod.speed(a, mod.metric(a, sc, plan, m)) <= 2.0, a.name


def test_memory_by_stage_first_middle_last_rank():
    """Per-rank memory (per-operation model), Llama 3 8B on 8 H100, TP 1 PP 2 DP 4, 1F1B, m = 4 micro-batches
    (batch 16 / (dp 4 x mb 1)), ZeRO-1 over dp = 4, BF16. Derivation, stage by stage:
    - states: stage g's params N_g (its blocks; the embedding V h on the first, the final norm and the untied
      LM head V h on the last) x (w + g + o / d) = N_g x (2 + 2 + 12 / 4) bytes;
    - activations: 1F1B keeps min(m, p - g) micro-batches in flight on stage g, k = (2, 1), each with n_g blocks
      of A bytes (one block's stored activations);
    - temporary: both ranks hold the p2p send / receive buffers 4 s b h x 2 / tp; the loss's logits s b V x 2 / tp
      (Transformer Engine's in-place loss over the BF16 logits, the megatron-core stack's) are the last stage's only;
    - reserved = allocated x (1 + 0.06) + 1.5 GiB (the megatron-core profile's allocator reserve and
      communicator buffers).
    The memory family's sum of the three heaviest-stage terms is never below the peak rank's allocation."""
    from tpopt.models.arch import layer_params
    sc = tpopt.scenario({"model": {"name": "llama3-8b"}, "task": {"tokens": "1B", "seq_len": 4096, "global_batch": 16},
                         "schedule": {"deadline": "365d"}, "hardware": {"accelerator": ["h100-sxm"]}})
    a = sc.model
    plan = Plan("h100-sxm", 8, zero_stage=1, tp=1, pp=2, dp=4)
    ev = evaluate(sc, plan)
    stages = ev.metrics["memory_by_stage"]
    n0, n1 = ev.metrics["stage_layers"]
    assert n0 + n1 == 32 and [s["layers"] for s in stages] == [n0, n1]
    v, h, s = a.vocab, a.hidden, 4096
    params = [n0 * layer_params(a) + v * h, n1 * layer_params(a) + a.norm_params + v * h]
    per_param = 2 + 2 + 12 / 4
    A = float(memory.activation_bytes_per_microbatch(a, s, 1, 1, 1, "none", **T._stored_kw(sc)))
    p2p, logits = 4 * s * h * 2, s * v * 2
    want = [params[0] * per_param + 2 * n0 * A + p2p, params[1] * per_param + 1 * n1 * A + p2p + logits]
    gib = 2 ** 30
    for got, w in zip(stages, want, strict=True):
        assert got["allocated_gib"] * gib == pytest.approx(w, rel=1e-9)
        assert got["reserved_gib"] * gib == pytest.approx(w * 1.06 + 1.5 * gib, rel=1e-9)
    peak = int(np.argmax(want))
    assert ev.metrics["peak_stage"] == peak
    assert ev.metrics["peak_rank_allocated_gib"] * gib == pytest.approx(want[peak], rel=1e-9)
    assert ev.metrics["memory_per_card_gib"] * gib >= max(want) * (1 - 1e-12)
