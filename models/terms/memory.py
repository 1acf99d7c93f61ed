"""The memory family's terms (bytes per card; the host's for offload): optimizer states, parameter copies,
stored activations (dense and MoE, per stage class, with the micro-batches a schedule keeps in flight),
the recompute workspace, temporaries, the per-stage-class sum (:func:`memory_by_stage`) and the host memory
of offloaded optimizer state.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any, NamedTuple, TypeAlias, cast

import numpy as np
from numpy.typing import ArrayLike

from tpopt.models import context, memory, moe, pipeline
from tpopt.models.arch import ModelArch
from tpopt.models.numeric import ArrayMemo, FloatArray, Floats
from tpopt.models.plan import Scenario
from tpopt.models.terms.shapes import (
    PEAK,
    _dense_cached,
    _f,
    _split_cached,
    chunk_layers,
    class_stages,
    cp_shape,
    dense_split,
    effective_recompute,
    grad_accum,
    load_factor,
    modelled_activations,
    per_op_model,
    schedule_parts,
    shard_ranks,
    stage_split,
    with_sequence_parallel,
)

Weigh: TypeAlias = Callable[[FloatArray, FloatArray, FloatArray, FloatArray], Floats]
"""What a stage weighs, from its (non-expert params per card, routed-expert linear params, routed-expert
biases, MoE blocks) (moe.heaviest_stage)."""


def _moe_stages(sc: Scenario, tp: ArrayLike, pp: ArrayLike, weigh: Weigh, stage: str = PEAK) -> FloatArray:
    """moe.heaviest_stage over the stages the step-time model runs: runs of ceil(L / pp) blocks (flat, as
    memory.stage_params) or the real layer split (per-operation, as memory.stage_param_counts), there the
    stages of the class ``stage`` only (:func:`class_stages`)."""
    split: Callable[[int], list[int]] | None = None
    pick: Callable[[int], Sequence[int]] | None = None
    if per_op_model(sc):
        first, last = sc.stage_layers

        def stage_layers(p: int) -> list[int]:
            return _split_cached(sc.model.layers, p, first if p > 1 else 0, last if p > 1 else 0)

        split = stage_layers
        if stage != PEAK:
            def picked(p: int) -> Sequence[int]:
                return class_stages(stage, p)

            pick = picked
    best: FloatArray = moe.heaviest_stage(sc.model, tp, pp, weigh, split, pick)
    return best


def card_params(sc: Scenario, tp: ArrayLike, pp: ArrayLike, ep: ArrayLike = 1, expert_tp: ArrayLike = 0,
                stage: str = PEAK) -> FloatArray:
    """Parameters on one card of the heaviest stage (of the class ``stage``; routed experts split by ep x
    expert-TP)."""
    if not sc.model.moe:
        return heaviest_stage_params(sc, tp, pp, stage)
    etp = moe.expert_tp_size(expert_tp, tp)
    return _moe_stages(sc, tp, pp, lambda d, xl, xb, n: d + xl / (_f(ep) * etp) + xb / _f(ep), stage)


def _sharded(sc: Scenario, fn: Callable[[FloatArray, FloatArray], FloatArray], *, tp: ArrayLike, pp: ArrayLike,
             ranks: FloatArray, ep: ArrayLike, etp: ArrayLike, stage: str = PEAK) -> FloatArray:
    """max over the stages (of the class ``stage``) of fn(non-expert params, ranks) + fn(expert params per
    card, edp): ZeRO shards the non-expert state over its ``ranks`` (dp x cp, :func:`zero_ranks`) and the
    expert state over the expert-data-parallel group edp = tp ranks / (ep etp)."""
    if not sc.model.moe:
        return fn(heaviest_stage_params(sc, tp, pp, stage), ranks)
    etp_size = moe.expert_tp_size(etp, tp)
    edp = moe.expert_dp_size(tp, ranks, ep, etp)
    return _moe_stages(sc, tp, pp, lambda d, xl, xb, n: fn(d, ranks) + fn(xl / (_f(ep) * etp_size) + xb / _f(ep), edp),
                       stage)


def states(sc: Scenario, *, zero: ArrayLike, offload: str, tp: ArrayLike, cp: ArrayLike = 1, pp: ArrayLike,
           dp: ArrayLike, ep: ArrayLike = 1, etp: ArrayLike = 0, stage: str = PEAK) -> FloatArray:
    """Persistent training state of the heaviest stage's card under ZeRO (memory.zero_state_bytes), sharded
    over the dp x cp ranks; for a MoE model the expert weights and optimizer state are split by ep x
    expert-TP and ZeRO shards them over the expert-data-parallel group. ``stage``: the heaviest of one
    stage class only (:func:`class_stages`; per-operation model)."""
    rec = sc.state_recipe()
    return _sharded(sc, lambda n, d: memory.zero_state_bytes(n, d, zero, rec, offload == "cpu"),
                    tp=tp, pp=pp, ranks=shard_ranks(sc, dp, cp, zero), ep=ep, etp=etp, stage=stage)


def heaviest_stage_params(sc: Scenario, tp: ArrayLike, pp: ArrayLike, stage: str = PEAK) -> FloatArray:
    """Parameters of the heaviest stage's card: memory.stage_params (ceil(L/pp) blocks) in the flat
    model; the largest of memory.stage_param_counts over the real layer split in the per-operation one
    (over the stages of the class ``stage``: :func:`class_stages`)."""
    if not per_op_model(sc):
        return memory.stage_params(sc.model, tp, pp)
    first, last = sc.stage_layers
    return _by_unique(lambda p, t: _heaviest_cached(sc.model, int(p), first, last, t, stage), pp, tp)


@lru_cache(maxsize=4096)
def _heaviest_cached(a: ModelArch, p: int, first: int, last: int, tp: float, stage: str = PEAK) -> float:
    split = _split_cached(a.layers, p, first if p > 1 else 0, last if p > 1 else 0) or [a.layers]
    counts = memory.stage_param_counts(a, tp, split)
    return float(max(counts[g] for g in class_stages(stage, len(split))))


def _by_unique(fn: Callable[..., float], *arrays: ArrayLike) -> FloatArray:
    """``fn(*scalars)`` once per distinct combination of the broadcast arrays' values, placed back."""
    arrs = np.broadcast_arrays(*(np.asarray(x) for x in arrays))
    shape = arrs[0].shape
    # each array's distinct values, then one mixed-radix code per combination: a 1-D unique of integers
    # (np.unique over columns compares rows element by element, ~100x slower on large tables); the codes
    # sort as the combinations do, so ``fn`` sees them in the same lexicographic order
    levels, codes = zip(*(np.unique(a.reshape(-1).astype(float), return_inverse=True) for a in arrs), strict=True)
    if math.prod(len(lv) for lv in levels) >= 2**62:  # the codes would overflow int64: compare columns
        stacked = np.stack([a.reshape(-1).astype(float) for a in arrs])
        both, back = np.unique(stacked, axis=1, return_inverse=True)
        return np.array([fn(*col) for col in both.T], dtype=float)[np.reshape(back, -1)].reshape(shape)
    code = np.zeros(codes[0].size, dtype=np.int64)
    for lv, c in zip(levels, codes, strict=True):
        code = code * len(lv) + np.reshape(c, -1)
    uniq, inverse = np.unique(code, return_inverse=True)
    cols = []
    for lv in reversed(levels):  # the code's digits back to each array's value
        uniq, digit = np.divmod(uniq, len(lv))
        cols.append(lv[digit])
    vals = np.array([fn(*col) for col in zip(*reversed(cols), strict=True)], dtype=float)
    return vals[np.reshape(inverse, -1)].reshape(shape)


def param_copies(sc: Scenario, *, schedule: str, tp: ArrayLike, pp: ArrayLike, ep: ArrayLike = 1,
                 etp: ArrayLike = 0, stage: str = PEAK) -> FloatArray:
    """Extra weight copies a pipeline schedule keeps (DualPipe: one more copy of the stage weights; of the
    heaviest stage of the class ``stage``)."""
    rec = sc.state_recipe()
    extra = 1.0 if str(schedule).startswith("dualpipe") else 0.0
    if not extra:
        return np.zeros(np.broadcast(_f(tp), _f(pp), _f(ep), _f(etp)).shape)
    return np.where(_f(pp) > 1, extra * rec.weights * card_params(sc, tp, pp, ep, etp, stage), 0.0)


def _stored_kw(sc: Scenario) -> dict[str, Any]:
    mem = sc.memory
    return dict(act_bytes=mem.activation_bytes, flash_attention=mem.flash_attention, dropout=mem.dropout,
                sequence_parallel=mem.sequence_parallel, quantized_input_bytes=quantized_input_bytes(sc))


def _gathered_kw(sc: Scenario) -> dict[str, Any]:
    """The stored-activation arguments of :func:`_stored_kw` plus how the column-parallel layers keep their inputs
    under TP (the stack's ``tp_input_regather``; :func:`tp_gathered_input_bytes`)."""
    return dict(_stored_kw(sc), input_regather=sc.stack.tp_input_regather,
                gathered_input_bytes=tp_gathered_input_bytes(sc))


def tp_gathered_input_bytes(sc: Scenario) -> float:
    """Bytes per element of the gathered input a column-parallel layer keeps when its TP all-gather moves FP8
    copies (the stack's ``fp8_tp_gather`` under a tensor-wise dynamic FP8 recipe: torchao's Float8ColwiseParallel
    casts the input to e4m3 before the gather and Float8Linear saves that copy): 1; 0 otherwise (the 16-bit
    input, memory.kept_gathered_input)."""
    fp8 = memory.recipe(sc.task.precision).matrix == "fp8" and sc.stack.fp8_recipe == "current"
    return 1.0 if fp8 and sc.stack.fp8_tp_gather else 0.0


def quantized_input_bytes(sc: Scenario) -> float:
    """Bytes per element of the input copy a linear layer saves for its backward when the stack keeps the
    quantised one (StackProfile.quantized_saved_inputs) under an FP8 recipe (1) or MXFP8 (1 + 1/32, its
    E8M0 scale per 32 elements); 0 otherwise (the 16-bit input is saved)."""
    matrix = memory.recipe(sc.task.precision).matrix
    if not sc.stack.quantized_saved_inputs:
        return 0.0
    return {"fp8": 1.0, "mxfp8": 1.0 + 1.0 / 32.0}.get(matrix, 0.0)


def activations(sc: Scenario, *, schedule: str, recompute: str, sp: bool | None = None, tp: ArrayLike,
                cp: ArrayLike = 1, pp: ArrayLike, dp: ArrayLike, mb: ArrayLike, ep: ArrayLike = 1, etp: ArrayLike = 0,
                cap: ArrayLike = 0.0, peak: str = "exact", stage: str = PEAK) -> FloatArray:
    """Activations at the peak: in-flight micro-batches x one micro-batch's stored stage activations,
    plus the recompute workspace once (it is reused block after block and micro-batch after micro-batch).

    The flat model uses the peak in-flight count of the busiest stage times a stage of ceil(L/pp)
    blocks; the per-operation model takes the maximum over stages of (in-flight on stage g) x
    (stored activations of its layers). With a fixed reserve (chapter accounting: activations,
    gathered module parameters and workspace for micro-batches of one sequence, 10.2.4) the term is
    the reserve times the micro-batch size (conservative: the whole reserve scales, not only its
    activation share; under context parallelism the reserve is kept whole, conservative too). A MoE model
    adds its routed tokens (:func:`moe_activations`); with dense-MLP blocks among its MoE blocks the
    per-operation model takes the busiest stage of both together (:func:`_weighted_layer_sets`).
    ``peak="lo"`` / ``"hi"`` bound the in-flight counts in closed form instead (solver pruning; exact where
    :func:`tpopt.models.pipeline.peak_inflight_stage_bounds` is). ``stage``: the busiest stage of one
    stage class only (:func:`class_stages`; per-operation model, where the workspace is every stage's). A stack
    whose pipeline runtime keeps boundary tensors per micro-batch (``pp_buffers``) adds them
    (:func:`per_microbatch_pipeline`: received inputs, gradients and kept outputs are activations it holds).
    """
    sc = with_sequence_parallel(sc, sp)
    mem = sc.memory
    if not modelled_activations(sc):
        shape = np.broadcast(_f(tp), _f(pp), _f(dp), _f(mb), _f(ep), _f(etp),
                             _f(cap), _f(cp)).shape
        reserve = cast(float, mem.activation_reserve)  # not None: activations are not modelled
        return np.broadcast_to(_f(reserve) * _f(mb), shape)
    workspace = recompute_workspace(sc, recompute=recompute, tp=tp, cp=cp, mb=mb)
    if dense_split(sc, 1) is not None and effective_recompute(sc, recompute) != "full":
        # stages mix dense and MoE blocks: the busiest stage of (dense inventory of every block + routed
        # tokens of its MoE blocks), max_g k_g (n_g A + m_g R), not the two maxima taken apart
        per_layer = _stored_per_layer(sc, recompute=recompute, tp=tp, cp=cp, mb=mb)
        one = _routed_per_block(sc, tp=tp, cp=cp, mb=mb, ep=ep, etp=etp, cap=cap, recompute=recompute)
        ga = grad_accum(sc, dp, mb)
        return _weighted_layer_sets(sc, schedule, pp, ga, peak, per_layer, one, stage) + workspace \
            + per_microbatch_pipeline(sc, schedule=schedule, tp=tp, cp=cp, pp=pp, dp=dp, mb=mb, stage=stage)
    out = stored_activations(sc, schedule=schedule, recompute=recompute, tp=tp, cp=cp, pp=pp, dp=dp, mb=mb,
                             peak=peak, stage=stage) + workspace \
        - offloaded_activations(sc, recompute=recompute, tp=tp, cp=cp, pp=pp, mb=mb)
    out = out + per_microbatch_pipeline(sc, schedule=schedule, tp=tp, cp=cp, pp=pp, dp=dp, mb=mb, stage=stage)
    if sc.model.moe:
        out = out + moe_activations(sc, schedule=schedule, recompute=recompute, tp=tp, cp=cp, pp=pp, dp=dp, mb=mb,
                                    ep=ep, etp=etp, cap=cap, peak=peak, stage=stage)
    return out


def card_tokens(sc: Scenario, tp: ArrayLike, micro_batch: ArrayLike, cp: ArrayLike = 1) -> FloatArray:
    """Tokens of one micro-batch on one card: micro-batch x s / (tp cp) (sequence parallelism under TP,
    context parallelism)."""
    return _f(micro_batch) * sc.task.seq_len / (_f(tp) * _f(cp))


def moe_activations(sc: Scenario, *, schedule: str, recompute: str, tp: ArrayLike, cp: ArrayLike = 1, pp: ArrayLike,
                    dp: ArrayLike, mb: ArrayLike, ep: ArrayLike, etp: ArrayLike, cap: ArrayLike,
                    peak: str = "exact", stage: str = PEAK) -> FloatArray:
    """Routed-token activations beyond the dense inventory (moe.routed_activation_extra per MoE block and
    micro-batch), for every MoE block whose activations are in flight at the busiest stage's peak: the
    flat model's in-flight micro-batches x MoE blocks of the stage; the per-operation model's in-flight
    layer sets of MoE blocks (a stage's dense-MLP blocks hold none: :func:`dense_split`). With full
    recompute only the block being rebuilt holds them (the workspace, once)."""
    rc = effective_recompute(sc, recompute)
    one = _routed_per_block(sc, tp=tp, cp=cp, mb=mb, ep=ep, etp=etp, cap=cap, recompute=recompute)
    if rc == "full":
        return one * np.ones(np.broadcast(_f(pp), _f(dp)).shape)
    ga = grad_accum(sc, dp, mb)
    if not per_op_model(sc):
        return pipeline_inflight(schedule, pp, ga, peak=peak) * _moe_stages(sc, 1.0, pp, lambda d, xl, xb, n: n) * one
    if dense_split(sc, 1) is not None:  # only the MoE blocks of each stage hold routed tokens
        return _weighted_layer_sets(sc, schedule, pp, ga, peak, 0.0, one, stage)
    return _layer_sets(sc, schedule, pp, ga, peak, stage) * one


def _routed_per_block(sc: Scenario, *, tp: ArrayLike, cp: ArrayLike = 1, mb: ArrayLike, ep: ArrayLike, etp: ArrayLike,
                      cap: ArrayLike, recompute: str = "none") -> FloatArray:
    """Routed-token activations of one MoE block and micro-batch (moe.routed_activation_extra); under an FP8
    recipe the expert GEMM's saved input rows are its FP8 copy (1 byte, + one 8-bit scale per 32 elements
    for MXFP8); a stack that applies the router probabilities in the experts' activation keeps no expert
    output rows for the combine (StackProfile.moe_probs_in_activation); a stack that clamps a clamped activation
    apart (StackProfile.activation_clamp_unfused: gpt-oss on Megatron-Core) keeps the clamped fc1 output too unless
    ``recompute`` rebuilds the activation (its mlp group, Megatron-Core's moe_act)."""
    phi = load_factor(sc, ep, cap)
    matrix = memory.recipe(sc.task.precision).matrix
    b_in = {"fp8": 1.0, "mxfp8": 1.0 + 1.0 / 32.0}.get(matrix)
    clamp = moe.clamped_apart(sc.model, sc.stack.activation_clamp_unfused, sc.moe.fused_grouped_mlp) \
        and "mlp" not in effective_recompute(sc, recompute).split("+")
    extra: FloatArray = moe.routed_activation_extra(sc.model, card_tokens(sc, tp, mb, cp), phi,
                                                    moe.expert_tp_size(etp, tp), sc.memory.activation_bytes, b_in,
                                                    not sc.stack.moe_probs_in_activation, clamp)
    return extra


def offloaded_activations(sc: Scenario, *, recompute: str, tp: ArrayLike, cp: ArrayLike = 1, pp: ArrayLike,
                          mb: ArrayLike) -> FloatArray:
    """Stored activations off the card at the peak under ``[memory] activation_offload_layers``: the layers
    memory.offloaded_activation_layers counts x one layer's stored activations per micro-batch (one
    stage: one micro-batch in flight); 0 without offloading or with pipeline parallelism."""
    n = sc.memory.activation_offload_layers
    shape = np.broadcast(_f(tp), _f(cp), _f(pp), _f(mb)).shape
    if n <= 0 or not modelled_activations(sc):
        return np.zeros(shape)
    off = memory.offloaded_activation_layers(n, sc.model.layers, pp)
    out: FloatArray = np.zeros(shape) + off * _stored_per_layer(sc, recompute=recompute, tp=tp, cp=cp, mb=mb)
    return out


def _stored_per_layer(sc: Scenario, *, recompute: str, tp: ArrayLike, cp: ArrayLike = 1, mb: ArrayLike) -> Floats:
    """One block's stored activations per micro-batch in the per-operation model (memory module)."""
    s, b = cp_shape(sc, mb, cp)
    return memory.activation_bytes_per_microbatch(sc.model, s, b, tp, 1, effective_recompute(sc, recompute),
                                                  **_gathered_kw(sc))


def stored_activations(sc: Scenario, *, schedule: str, recompute: str, tp: ArrayLike, cp: ArrayLike = 1, pp: ArrayLike,
                       dp: ArrayLike, mb: ArrayLike, peak: str = "exact", stage: str = PEAK) -> FloatArray:
    """Activations kept until their backward, at the busiest stage's peak (of the class ``stage`` in the
    per-operation model; see :func:`activations`); a card keeps its b s / cp tokens under context
    parallelism (:func:`cp_shape`)."""
    rc = effective_recompute(sc, recompute)
    a, kw = sc.model, _gathered_kw(sc)
    s, b = cp_shape(sc, mb, cp)
    ga = grad_accum(sc, dp, mb)
    if not per_op_model(sc):
        stage_layers = np.ceil(a.layers / _f(pp))
        per_mb = memory.activation_bytes_per_microbatch(a, s, b, tp, stage_layers, rc, **kw)
        return pipeline_inflight(schedule, pp, ga, peak=peak) * per_mb
    per_layer = memory.activation_bytes_per_microbatch(a, s, b, tp, 1, rc, **kw)
    return _layer_sets(sc, schedule, pp, ga, peak, stage) * per_layer


def _weighted_layer_sets(sc: Scenario, schedule: str, pp: ArrayLike, ga: ArrayLike, peak: str, per_layer: ArrayLike,
                         per_moe_block: ArrayLike, stage: str = PEAK) -> FloatArray:
    """Per-operation model of a MoE model with dense blocks: max over stages g (of the class ``stage``) of
    k_g (n_g x per_layer + m_g x per_moe_block), k_g the stage's peak in-flight micro-batches (exact, or
    the ``peak="lo"`` / ``"hi"`` closed-form bounds), n_g its blocks and m_g its MoE blocks
    (:func:`dense_split`)."""
    first, last = sc.stage_layers
    arrs = np.broadcast_arrays(np.asarray(pp, dtype=float), np.ceil(_f(ga) - 1e-9), _f(per_layer), _f(per_moe_block))
    shape = arrs[0].shape
    p_a, m_a, w_all, w_moe = (x.reshape(-1) for x in arrs)
    out = np.empty(p_a.shape)
    for p_val, m_val in np.unique(np.stack([p_a, m_a]), axis=1).T:
        sel = (p_a == p_val) & (m_a == m_val)
        p = int(p_val)
        coeffs = _stage_peak_coeffs(str(schedule), sc.model, p, int(m_val), first if p > 1 else 0,
                                    last if p > 1 else 0, peak)
        best = np.full(int(sel.sum()), -np.inf)
        if not np.isfinite(coeffs[0][0]):
            out[sel] = np.inf
            continue
        for k_n, k_m in (coeffs[g] for g in class_stages(stage, len(coeffs))):
            best = np.maximum(best, k_n * w_all[sel] + k_m * w_moe[sel])
        out[sel] = best
    return out.reshape(shape)


@lru_cache(maxsize=4096)
def _stage_peak_coeffs(schedule: str, a: ModelArch, p: int, m: int, first: int, last: int,
                       peak: str) -> tuple[tuple[float, float], ...]:
    """Per stage (k_g n_g, k_g m_g) for :func:`_weighted_layer_sets` ((inf, inf) for a shape the
    schedule cannot run)."""
    split = _split_cached(a.layers, p, first, last) if p > 1 else [a.layers]
    dense = _dense_cached(a, p, first, last) or (0,) * len(split or [0])
    if p <= 1:
        return ((float(a.layers), float(a.layers - dense[0])),)
    base, v = schedule_parts(schedule)
    chunks = chunk_layers(split, v) if split and base == "interleaved" else None
    if not split or (base == "interleaved" and chunks is None) or pipeline.shape_error(base, p, m, v):
        return ((np.inf, np.inf),)
    if peak == "exact":
        ks = pipeline.peak_inflight(base, p, m, v=v, chunk_layers=chunks)
    else:
        ks = pipeline.peak_inflight_stage_bounds(base, p, m, v=v, chunk_layers=chunks)[0 if peak == "lo" else 1]
    return tuple((float(k * n), float(k * (n - d))) for k, n, d in zip(ks, split, dense, strict=False))


def _layer_sets(sc: Scenario, schedule: str, pp: ArrayLike, ga: FloatArray, peak: str = "exact",
                stage: str = PEAK) -> FloatArray:
    """Per-operation model: the busiest stage's (of the class ``stage``) in-flight layer sets for every
    (pp, micro-batches), exact (the slot-order walk) or bounded in closed form (``peak="lo"`` / ``"hi"``)."""
    first, last = sc.stage_layers
    side = 0 if peak == "lo" else 1
    fn = _peak_layer_sets if peak == "exact" else \
        (lambda *a: _peak_layer_set_bound(side, *a))
    m = np.ceil(ga - 1e-9)
    p_a, m_a = np.asarray(pp, dtype=float), np.asarray(m, dtype=float)
    key = _LAYER_SETS.key((p_a, m_a), str(schedule), sc.model.layers, first, last, peak, stage)
    if key is None:  # rows, not an open grid: computed as they come
        return _by_unique(lambda p, m: fn(str(schedule), sc.model.layers, int(p), int(m), first, last, stage), pp, m)
    got: FloatArray | None = _LAYER_SETS.get(key)
    if got is None:  # (the same for every recompute set and accelerator of a table: remembered)
        got = _LAYER_SETS.put(key, _by_unique(
            lambda p, m: fn(str(schedule), sc.model.layers, int(p), int(m), first, last, stage), pp, m))
    return got.copy()


_LAYER_SETS = ArrayMemo(entries=256, cells=4096)
"""(schedule, stage class, peak, pp, micro-batches) grids whose in-flight layer sets :func:`_layer_sets` keeps (oldest
first out, up to 4,096 pp and micro-batch entries together): a table's slices repeat them for every recompute set
and accelerator."""


def _peak_layer_sets(schedule: str, layers: int, p: int, m: int, first: int, last: int, stage: str = PEAK) -> float:
    """Max over stages (of the class ``stage``) of in-flight layer sets: (peak in-flight micro-batches of
    stage g) x (its layers)."""
    sets = _stage_layer_sets(schedule, layers, p, m, first, last)
    return max(sets[g] for g in class_stages(stage, len(sets)))


@lru_cache(maxsize=4096)
def _stage_layer_sets(schedule: str, layers: int, p: int, m: int, first: int, last: int) -> tuple[float, ...]:
    """Per stage g: (peak in-flight micro-batches of stage g) x (its layers) ((inf,) for a shape the
    schedule cannot run; one stage: its layers)."""
    if p <= 1:
        return (float(layers),)
    split = _split_cached(layers, p, first, last)
    base, v = schedule_parts(schedule)
    chunks = chunk_layers(split, v) if base == "interleaved" else None
    if not split or (base == "interleaved" and chunks is None) or pipeline.shape_error(base, p, m, v):
        return (np.inf,)
    peaks = pipeline.peak_inflight(base, p, m, v=v, chunk_layers=chunks)
    return tuple(k * n for k, n in zip(peaks, split, strict=False))


def _peak_layer_set_bounds(schedule: str, layers: int, p: int, m: int, first: int, last: int,
                           stage: str = PEAK) -> tuple[float, float]:
    """(lo, hi) of :func:`_peak_layer_sets` from the per-stage closed-form peak bounds (no simulation)."""
    return _peak_layer_set_bound(0, schedule, layers, p, m, first, last, stage), \
        _peak_layer_set_bound(1, schedule, layers, p, m, first, last, stage)


def _peak_layer_set_bound(side: int, schedule: str, layers: int, p: int, m: int, first: int, last: int,
                          stage: str = PEAK) -> float:
    """One side (0: lo, 1: hi) of :func:`_peak_layer_set_bounds`: the largest per-stage bound over the class's
    stages (a contiguous run of stages, :func:`class_stages`)."""
    per_stage = _stage_layer_set_bounds(schedule, layers, p, m, first, last)[side]
    gs = class_stages(stage, len(per_stage))
    return max(per_stage[gs.start:gs.stop])


@lru_cache(maxsize=4096)
def _stage_layer_set_bounds(schedule: str, layers: int, p: int, m: int, first: int,
                            last: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per stage, (lo, hi) bounds of :func:`_stage_layer_sets` in closed form."""
    if p <= 1:
        return (float(layers),), (float(layers),)
    split = _split_cached(layers, p, first, last)
    base, v = schedule_parts(schedule)
    chunks = chunk_layers(split, v) if base == "interleaved" else None
    if not split or (base == "interleaved" and chunks is None) or pipeline.shape_error(base, p, m, v):
        return (np.inf,), (np.inf,)
    lo, hi = pipeline.peak_inflight_stage_bounds(base, p, m, v=v, chunk_layers=chunks)
    return tuple(map(operator.mul, lo, split)), tuple(map(operator.mul, hi, split))  # k x n, stage by stage


def recompute_workspace(sc: Scenario, *, recompute: str, tp: ArrayLike, cp: ArrayLike = 1, mb: ArrayLike) -> Floats:
    """Rebuilt tensors while one block's backward uses them, counted once (memory.recompute_workspace_bytes)."""
    if not modelled_activations(sc):
        return np.zeros(np.broadcast(_f(tp), _f(mb), _f(cp)).shape)
    rc = effective_recompute(sc, recompute)
    s, b = cp_shape(sc, mb, cp)
    workspace: Floats = memory.recompute_workspace_bytes(sc.model, s, b, tp, rc, **_gathered_kw(sc))
    return workspace


def temporary(sc: Scenario, *, zero: ArrayLike, tp: ArrayLike, cp: ArrayLike = 1, pp: ArrayLike, mb: ArrayLike,
              ep: ArrayLike = 1, etp: ArrayLike = 0, cap: ArrayLike = 0.0, stage: str = PEAK,
              schedule: str = "1f1b", dp: ArrayLike = 1) -> Floats:
    """Buffers live with the activations: the loss's logits (as the stack computes its loss), ZeRO-3 gathered
    units (with pp > 1 the stage's gathered weights and accumulated unsharded gradients:
    memory.zero3_pipeline_bytes), pipeline send/recv (all of a card's b s / cp tokens), a MoE block's
    all-to-all send buffer (moe.dispatch_buffer), and the context-parallel exchange buffers
    (context.buffer_bytes: the K, V blocks in flight of ring attention, or the head-split q, k, v, o of
    all-to-all; at the query heads where the stack repeats K, V: context.ring_kv_arch); under a per-micro-batch
    pipeline runtime (the stack's ``pp_buffers``) no send/recv pair: its boundary tensors are among the
    activations (:func:`per_microbatch_pipeline`). The logits and the CP
    buffers are live in different phases (the loss; one layer's attention), so the larger of the two counts.
    ``stage``: on the stages of one class only, in the per-operation model the logits belong to the last stage
    alone (the first and middle classes of pp > 1 hold none). Under torch.distributed.pipelining (a per-micro-batch
    runtime) an interleaved rank whose chunks run their backwards one after the other holds one chunk's unsharded
    gradients at a time (:func:`_zero3_grad_share`)."""
    mem = sc.memory
    a = sc.model
    cpb: Floats = context.buffer_bytes(context.ring_kv_arch(a, sc.stack.kv_repeat), sc.task.seq_len, mb, tp, cp,
                                       sc.cp_method, mem.activation_bytes, sc.stack.cp_ring)
    if not modelled_activations(sc):
        return np.zeros(np.broadcast(_f(zero), _f(tp), _f(pp), _f(mb), _f(ep), _f(etp),
                                     _f(cap)).shape) + cpb
    s = sc.task.seq_len / _f(cp)
    rec = sc.state_recipe()
    send: Floats
    if a.moe:
        unit = moe.largest_unit_per_card(a, tp, ep, etp)
        gather = unit * ((1 + mem.prefetch) * rec.weights + rec.grads)  # as memory.zero3_gather_bytes
        send = moe.dispatch_buffer(a, card_tokens(sc, tp, mb, cp), load_factor(sc, ep, cap),
                                   mem.activation_bytes)
    else:
        gather, send = memory.zero3_gather_bytes(a, tp, rec, mem.prefetch), 0.0
    logits: Floats = memory.logits_bytes(a, s, mb, tp, mem.loss_chunks, sc.loss_kind())
    if stage in ("first", "middle") and per_op_model(sc):  # class_stages: none of them is the last of pp > 1
        logits = np.where(_f(pp) > 1, 0.0, logits)
    # ZeRO-3 with pp > 1: the stage's weights stay gathered and its unsharded gradients accumulate
    # (memory.zero3_pipeline_bytes) in place of the per-unit gather buffers
    staged = memory.zero3_pipeline_bytes(card_params(sc, tp, pp, ep, etp, stage), rec,
                                         grad_share=_zero3_grad_share(sc, schedule=schedule, pp=pp, dp=dp, mb=mb)) \
        if np.any(_f(zero) >= 3) and np.any(_f(pp) > 1) else 0.0
    # the loss's logits live from the LM head's forward to its backward, the CP buffers inside one layer's attention
    # (context.buffer_bytes), which runs before the loss or, in the backward, after the loss's backward freed them:
    # two phases, the larger one at the peak
    buffers: Floats = (np.maximum(logits, cpb) + send
                       + np.where(_f(zero) >= 3, np.where(_f(pp) > 1, staged, gather), 0.0)
                       + (0.0 if sc.stack.pp_buffers != "send-recv" else
                          np.where(_f(pp) > 1, memory.pipeline_buffer_bytes(a, s, mb, tp, mem.activation_bytes), 0.0)))
    return buffers


def _zero3_grad_share(sc: Scenario, *, schedule: str, pp: ArrayLike, dp: ArrayLike, mb: ArrayLike) -> FloatArray:
    """memory.pipeline_grad_chunks_live per plan: the share of the stage's unsharded gradients live at once, 1 but
    under a per-micro-batch runtime (torch.distributed.pipelining, the stack's ``pp_buffers``) running interleaved
    chunks in one round (m = ceil(grad_accum) <= pp)."""
    base, v = schedule_parts(str(schedule))
    m = np.ceil(grad_accum(sc, dp, mb) - 1e-9)
    if sc.stack.pp_buffers == "send-recv":
        return np.ones(np.broadcast(_f(pp), m).shape)
    return memory.pipeline_grad_chunks_live(base, pp, m, v)


def per_microbatch_pipeline(sc: Scenario, *, schedule: str, tp: ArrayLike, cp: ArrayLike, pp: ArrayLike,
                            dp: ArrayLike, mb: ArrayLike, stage: str = PEAK) -> FloatArray:
    """Boundary tensors a per-micro-batch pipeline runtime holds on the heaviest rank of the class ``stage``
    (memory.per_microbatch_buffer_units: receive buffers per micro-batch, gradient receive buffers, kept outputs),
    0 with pp = 1:

        max_g [ u_g x (b s / (tp cp)) h x bytes + o_g x (b s / cp) V / tp x bytes ]

    u_g boundary tensors (one micro-batch's hidden states, sequence-parallel under TP) and o_g last-stage outputs
    (the logits, vocabulary-split under TP, kept for the step's merge). Llama 3.1 405B, TP 8 x PP 8, 1F1B,
    8 micro-batches of 4 x 8,192 tokens: 128 MiB a boundary tensor, 16 of them (2 GiB) on the first rank; 7 and
    8 x 1 GiB of BF16 logits (8.8 GiB) on the last. 0 under a send-recv runtime (Megatron: its pair is among the
    temporary buffers, :func:`temporary`)."""
    if sc.stack.pp_buffers == "send-recv":
        return np.zeros(())
    a, e = sc.model, sc.memory.activation_bytes
    s = sc.task.seq_len / _f(cp)
    beta = memory.pipeline_buffer_bytes(a, s, mb, tp, e) / 4.0  # one boundary tensor (of the send and receive four)
    logits = s * _f(mb) * a.vocab / _f(tp) * e
    m = np.ceil(grad_accum(sc, dp, mb) - 1e-9)
    keep = sc.stack.pp_buffers == "per-microbatch-outputs"

    def one(p: float, k: float, b: float, o: float) -> float:
        units = _pipeline_units(str(schedule), int(p), int(k), keep)
        gs = class_stages(stage, len(units))
        return max(u * b + w * o for u, w in (units[g] for g in gs))

    out: FloatArray = np.where(_f(pp) > 1, _by_unique(one, pp, np.maximum(m, 1.0), beta, logits), 0.0)
    return out


def _pipeline_stage_bytes(sc: Scenario, *, schedule: str, tp: int, cp: int, p: int, ga: float,
                          mb: int) -> list[float]:
    """Per stage of a p-stage plan, :func:`per_microbatch_pipeline`'s bytes (zeros for a send-recv runtime or one
    stage)."""
    if sc.stack.pp_buffers == "send-recv" or p <= 1:
        return [0.0] * max(p, 1)
    a, e = sc.model, sc.memory.activation_bytes
    s = sc.task.seq_len / cp
    beta = float(memory.pipeline_buffer_bytes(a, s, mb, tp, e)) / 4.0
    logits = s * mb * a.vocab / tp * e
    units = _pipeline_units(str(schedule), p, int(np.ceil(ga - 1e-9)), sc.stack.pp_buffers == "per-microbatch-outputs")
    return [u * beta + w * logits for u, w in units]


@lru_cache(maxsize=4096)
def _pipeline_units(schedule: str, p: int, m: int, keep_outputs: bool) -> tuple[tuple[float, float], ...]:
    """memory.per_microbatch_buffer_units of one shape (nothing for one stage or a shape the schedule cannot run:
    the activations term refuses those)."""
    if p <= 1:
        return ((0.0, 0.0),)
    base, v = schedule_parts(schedule)
    if pipeline.shape_error(base, p, m, v):
        return tuple((0.0, 0.0) for _ in range(p))
    chunks = v if base == "interleaved" else 1
    ks = [chunks * k for k in pipeline.peak_inflight(base, p, m, v=v)]  # chunk micro-batches (1 / v a stage set)
    return tuple(memory.per_microbatch_buffer_units(p, m, ks, keep_outputs, chunks))


class StageMemory(NamedTuple):
    """One pipeline stage's rank at its memory peak (bytes): what the allocator holds there."""

    stage: int
    layers: int
    states: float
    activations: float
    temporary: float
    allocated: float  # states + activations + temporary (torch.cuda.max_memory_allocated)
    reserved: float  # allocated x (1 + allocator reserve) + communicator buffers (max_memory_reserved)


def memory_by_stage(sc: Scenario, *, schedule: str, recompute: str, zero: int, offload: str, tp: int, cp: int = 1,
                    pp: int, dp: int, mb: int, ep: int = 1, etp: int = 0, cap: float = 0.0) -> list[StageMemory]:
    """Per-rank memory of one plan in the per-operation model, stage by stage (empty in the flat model or
    with a fixed activation reserve). Stage g holds its own blocks' states (the embedding on the first,
    the final norm, LM head and MTP modules on the last: moe.stage_candidates / memory.stage_param_counts
    over the real split), k_g in-flight micro-batches of its blocks' activations (pipeline.peak_inflight:
    under 1F1B k_0 = min(m, p) on the first stage down to 1 on the last; interleaved holds more on the
    first), the recompute workspace once, and the buffers: FP32 logits on the last stage only. The
    memory family bounds the plan per stage class (:func:`memory_by_class`): its value is max over the
    classes k of states_k + copies_k + activations_k + temporary_k, each term the heaviest stage of its
    class; the first and last classes are one stage each, so the value is max_g of these allocated sums
    whenever the middle stages' terms peak on one stage (equal middle stages), and above it otherwise.
    """
    a = sc.model
    if not (per_op_model(sc) and modelled_activations(sc)):
        return []
    p = int(pp)
    split = [int(x) for x in stage_split(sc, p)] if p > 1 else [a.layers]
    if not split:
        return []
    rec = sc.state_recipe()
    ranks = shard_ranks(sc, dp, cp, zero)
    if a.moe:
        rows = moe.stage_candidates(a, float(tp), p, split if p > 1 else None, keep_all=True)
        etp_size = moe.expert_tp_size(etp, tp)
        edp = moe.expert_dp_size(tp, ranks, ep, etp)
        params = [(float(r[0]), float(r[1] / (ep * etp_size) + r[2] / ep)) for r in rows]
        moe_blocks = [min(float(r[3]), float(n)) for r, n in zip(rows, split, strict=True)]  # MTP: not timed
    else:
        params = [(float(n), 0.0) for n in memory.stage_param_counts(a, tp, split)]
        edp, moe_blocks = ranks, [0.0] * len(split)
    copies = rec.weights if (p > 1 and str(schedule).startswith("dualpipe")) else 0.0
    rc = effective_recompute(sc, recompute)
    ga = float(grad_accum(sc, dp, mb))
    if p > 1:
        base, v = schedule_parts(schedule)
        chunks = chunk_layers(split, v) if base == "interleaved" else None
        ks = list(pipeline.peak_inflight(base, p, int(np.ceil(ga - 1e-9)), v=v, chunk_layers=chunks))
    else:
        ks = [1.0]  # one stage: a micro-batch's backward frees its activations before the next forward
    per_layer = float(_stored_per_layer(sc, recompute=recompute, tp=tp, cp=cp, mb=mb))
    one = float(_routed_per_block(sc, tp=tp, cp=cp, mb=mb, ep=ep, etp=etp, cap=cap, recompute=recompute)) \
        if a.moe else 0.0
    workspace = float(recompute_workspace(sc, recompute=recompute, tp=tp, cp=cp, mb=mb))
    temp_last, temp_other = (float(temporary(sc, zero=zero, tp=tp, cp=cp, pp=pp, mb=mb, ep=ep, etp=etp, cap=cap,
                                             stage=k, schedule=schedule, dp=dp)) for k in ("last", "first"))
    pipe = _pipeline_stage_bytes(sc, schedule=schedule, tp=tp, cp=cp, p=p, ga=ga, mb=mb)
    st = sc.stack
    out: list[StageMemory] = []
    for g, n in enumerate(split):
        dense_n, expert_n = params[g]
        states_g = float(memory.zero_state_bytes(dense_n, ranks, zero, rec, offload == "cpu")
                         + memory.zero_state_bytes(expert_n, edp, zero, rec, offload == "cpu")) \
            + copies * (dense_n + expert_n)
        k = float(ks[g]) if p > 1 else float(n > 0)
        routed = (one if rc == "full" else k * moe_blocks[g] * one) if moe_blocks[g] else 0.0
        off = float(offloaded_activations(sc, recompute=recompute, tp=tp, cp=cp, pp=pp, mb=mb))
        acts_g = (k * n * per_layer if p > 1 else n * per_layer - off) + routed + workspace + pipe[g]
        temp_g = temp_last if g == len(split) - 1 else temp_other
        alloc = states_g + acts_g + temp_g
        out.append(StageMemory(g, int(n), states_g, acts_g, temp_g, alloc,
                               alloc * (1.0 + st.allocator_reserve) + st.communicator_buffers))
    return out


def host_memory(sc: Scenario, *, acc: str, offload: str, zero: ArrayLike, tp: ArrayLike, cp: ArrayLike = 1,
                pp: ArrayLike, dp: ArrayLike, ep: ArrayLike = 1, etp: ArrayLike = 0) -> FloatArray:
    """Optimizer state offloaded to one host: cards_per_host x per-card optimizer shard (0 without offload)."""
    rec = sc.state_recipe()
    g = sc.system(acc).acc.cards_per_host
    per_card = _sharded(sc, lambda n, d: memory.host_optimizer_bytes(n, d, zero, rec),
                        tp=tp, pp=pp, ranks=shard_ranks(sc, dp, cp, zero), ep=ep, etp=etp)
    return np.where(offload == "cpu", per_card * g, 0.0)


def pipeline_inflight(schedule: str, pp: ArrayLike, micro_batches: ArrayLike, *, peak: str = "exact") -> FloatArray:
    """Peak live micro-batch activation sets on the busiest stage (1 when pp = 1).

    Closed forms for every schedule but the chapter's DualPipe (:func:`tpopt.models.pipeline.peak_inflight_max`
    walks its slot order once per shape); ``peak="lo"`` / ``"hi"``: closed-form bounds only.
    """
    base, v = schedule_parts(schedule)
    pp, m = np.broadcast_arrays(np.asarray(pp), np.ceil(_f(micro_batches) - 1e-9).astype(int))
    multi = pp > 1
    out = np.ones(pp.shape, dtype=float)
    if np.any(multi):
        if peak == "exact":
            val = pipeline.peak_inflight_max(base, pp[multi], m[multi], v=v)
        else:
            val = pipeline.peak_inflight_bounds(base, pp[multi], m[multi], v=v)[0 if peak == "lo" else 1]
        out[multi] = np.where(pipeline.shape_ok(base, pp[multi], m[multi]), val, np.inf)
    return out
