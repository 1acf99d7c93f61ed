"""Per-layer and per-micro-batch times of the per-operation model (seconds): the rates a card runs at, the
kernel layout of a card's micro-batch, the forward / dX / dW times of a layer and of the first and last
stages' extras (memoised, :func:`op_times`), the context-parallel exchange, layer groups per stage and
the busiest stage, and the pipeline's stage-to-stage transfer.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, TypeAlias, cast

import numpy as np
from numpy.typing import ArrayLike

from tpopt.models import comm, context, memory, moe, ops, steptime
from tpopt.models.arch import attention_flops_per_token, flops_per_token
from tpopt.models.hardware import Accelerator
from tpopt.models.numeric import FloatArray, Floats
from tpopt.models.plan import Scenario
from tpopt.models.roofline import PerfParams, portable_attention, stack_scaled
from tpopt.models.terms.shapes import (
    _f,
    cp_attention_scale,
    cp_imbalance,
    dense_split,
    effective_recompute,
    load_factor,
    per_op_model,
    schedule_parts,
    stage_split,
)

OpTimes: TypeAlias = tuple[steptime.PhaseTimes, steptime.PhaseTimes, steptime.PhaseTimes]
"""(layer, first-stage extras, last-stage extras) of one micro-batch (:func:`op_times`)."""


# ---------------------------------------------------------------------------------------------
# time terms (seconds per step per card)


def rates(sc: Scenario, acc: str) -> steptime.Rates:
    """What the per-operation model runs on: the precision's matrix peak (FP16 / BF16; FP8 for weight
    GEMMs under fp8-mixed when the card has an FP8 peak), HBM, the TP link and the performance catalog, its
    GEMM, attention and memory-bound efficiencies as the scenario's stack reaches them (its kernel_efficiency,
    catalogs/stacks.toml; roofline.stack_scaled)."""
    sysm = sc.system(acc)
    A = sysm.acc
    rec = memory.recipe(sc.task.precision)
    peak = A.peak_fp16 if rec.matrix == "fp16" and A.peak_fp16 > 0 else A.peak_flops
    perf = cast(PerfParams, sysm.perf)
    if sc.stack.attention_kernel == "portable":  # an attention kernel not written for the card
        perf = portable_attention(perf)
    perf = stack_scaled(perf, sc.stack.kernel_efficiency)  # the stack's kernels
    low = {"fp8": (recipe_peak(A, "fp8"), perf.fp8_gemm_ratio, sc.stack.fp8_recipe if sc.stack.fp8_recipe in
                   ("current", "delayed") else "current"),
           "mxfp8": (recipe_peak(A, "mxfp8"), mxfp8_gemm_share(perf), "mxfp8"),
           "nvfp4": (recipe_peak(A, "nvfp4"), perf.fp4_gemm_ratio, "nvfp4")}.get(rec.matrix)
    # the stack's per-expert floor of a grouped expert GEMM call, none where the recipe fuses the grouped MLP
    dispatch = steptime.expert_dispatch(sc.stack.expert_gemm_dispatch, sc.moe.fused_grouped_mlp)
    if low is None or low[0] <= 0:  # BF16 / FP16, or a card without the precision's matrix units
        return steptime.Rates(peak=peak, linear_peak=peak, hbm=A.hbm_bandwidth, tp_bandwidth=A.intra_host_bw,
                              perf=perf, fp8=False, scale=sysm.efficiency, expert_dispatch=dispatch,
                              grouped_ratio=sc.stack.grouped_gemm_efficiency)
    e = sc.memory.activation_bytes
    return steptime.Rates(peak=peak, linear_peak=low[0], hbm=A.hbm_bandwidth, tp_bandwidth=A.intra_host_bw,
                          perf=perf, fp8=True, scale=sysm.efficiency,
                          operand_bytes=steptime.OPERAND_BYTES["fp8" if rec.matrix == "fp8" else rec.matrix],
                          cast_bytes=steptime.QUANTISATION_BYTES[low[2]](e) * 2.0 / e, linear_ratio=low[1],
                          expert_dispatch=dispatch, grouped_ratio=sc.stack.grouped_gemm_efficiency)


def block_scaled(A: Accelerator) -> bool:
    """Whether the card's matrix units take block-scaled operands (MXFP8, NVFP4: one scale per 32 / 16
    elements, applied inside the MMA): the generation that also has an FP4 peak (NVIDIA Blackwell data-centre
    B200 / GB200 / B300 / GB300, AMD CDNA 4 MI355X). NVIDIA Transformer Engine's "Datatype and hardware support
    matrix" lists MXFP8 and NVFP4 on compute capability 10.0 / 10.3 only: Ada (8.9) and Hopper (9.0) run
    per-tensor FP8, Ampere (8.0) none."""
    return bool(A.peak_fp4 > 0)


def recipe_peak(A: Accelerator, matrix: str) -> float:
    """The dense peak a low-precision recipe's weight GEMMs run at on card ``A`` (``matrix`` ``fp8``, ``mxfp8``,
    ``nvfp4``), 0 where the card has no matrix units for it (:func:`rates` then runs them at the 16-bit peak):
    per-tensor FP8 at the FP8 peak; MXFP8 at it on a card with block-scaled units only; NVFP4 at the FP4 peak."""
    if matrix == "fp8":
        return float(A.peak_fp8)
    if matrix == "mxfp8":
        return float(A.peak_fp8) if block_scaled(A) else 0.0
    return float(A.peak_fp4) if matrix == "nvfp4" else 0.0


def mxfp8_gemm_share(perf: PerfParams) -> float:
    """An MXFP8 weight GEMM's share of the FP8 peak over gemm_efficiency:
        r_mxfp8 = fp8_gemm_ratio x mxfp8_gemm_ratio
    the per-tensor FP8 GEMM's share (the card's maximum-achievable matmul ratio) times the block-scaled kernel's
    speed against it (performance.toml ``mxfp8_gemm_ratio``; 1 where no measurement is given). Blackwell:
    Transformer Engine's GEMM profiling guide, pre-quantised GEMMs of a 5B config on B300, 6.812 ms per layer
    per-tensor FP8 against 7.161 ms MXFP8 (0.951); B200: 0.983 x 0.951 = 0.935."""
    return float(perf.fp8_gemm_ratio * perf.mxfp8_gemm_ratio)


def _perf(sc: Scenario, acc: str) -> PerfParams:
    """The accelerator's performance catalog (the per-operation model's; every system has one then)."""
    return cast(PerfParams, sc.system(acc).perf)


def layout(sc: Scenario, *, acc: str | None = None, tp: ArrayLike, cp: ArrayLike = 1, mb: ArrayLike, ep: ArrayLike = 1,
           etp: ArrayLike = 0, cap: ArrayLike = 0.0) -> ops.Layout:
    """One card's micro-batch for the kernel table. Under context parallelism the card runs b / cp
    sequences' worth of tokens through every token-wise kernel, and its queries attend over the whole
    sequence (the same work as b / cp whole sequences, with the causal imbalance of the split and the stack's
    later ring steps: :func:`cp_attention_scale`). ``acc``: the card, whose MoE token dispatcher the layout runs
    (MoeOptions.dispatcher_on; None: the scenario's, MoeOptions.dispatcher)."""
    mem = sc.memory
    moe_kw: dict[str, Any] = ({"ep": ep, "expert_tp": etp, "load": load_factor(sc, ep, cap)}
              if sc.model.moe else {})
    return ops.Layout(tp=tp, micro_batch=_f(mb) / _f(cp), seq_len=sc.task.seq_len,
                      sequence_parallel=mem.sequence_parallel, flash_attention=mem.flash_attention,
                      dropout=mem.dropout, act_bytes=mem.activation_bytes, attention_scale=cp_attention_scale(sc, cp),
                      cp_steps=np.maximum(_f(cp) - 1.0, 0.0) if sc.cp_method == "ring" else 0.0,
                      cp_kv_repeat=sc.stack.kv_repeat,
                      cp_merge_bytes=ring_merge_bytes(sc.stack.cp_ring, sc.stack.cp_merge, mem.activation_bytes),
                      dispatcher=sc.moe.dispatcher if acc is None else sc.moe.dispatcher_on(acc),
                      expert_bias_loop=sc.stack.expert_bias_loop,
                      rope_scaled_unfused=sc.stack.rope_scaled_unfused, fused_grouped_mlp=sc.moe.fused_grouped_mlp,
                      activation_clamp_unfused=sc.stack.activation_clamp_unfused,
                      tp_regather=sc.stack.tp_input_regather, **moe_kw)


FP32 = 4.0  # bytes of torch's ring accumulators (_ContextParallelOptions.convert_to_f32 = True)


def ring_merge_bytes(ring: str, merge: str, e: float) -> ops.RingMergeBytes | None:
    """Bytes torch's context-parallel ring (stack ``cp_ring = "allgather"``) moves to merge its steps, per element
    (ops.RingMergeBytes: per ring step after the first and once per layer; per element of the output / dQ, and of
    each of K and V as the ring holds them), e = the activations' bytes, FP32 accumulators (4 B); None for
    Transformer Engine's ring (``p2p``: ops.ring_merge_kernels' own count). From _attention.py (torch 1963fc8):
    the forward's _SDPAMerger.step casts each step's output to FP32 and merges
    acc <- acc - sigmoid(lse_step - lse) (acc - out_step), the load-balanced steps through _partial_update
    (a torch.cat of the accumulator's halves); every step before the last concatenates its K, V
    (torch.cat([key.flatten(), value.flatten()])), which only the first hands to the all-gather; the backward adds
    each step's dQ into an FP32 accumulator, adds its dK, dV into the FP32 blocks arriving from the previous rank
    (_partial_update: an in-place add on a half, then a torch.cat) and concatenates them for the next rank, starting
    from three torch.zeros_like accumulators and ending with the casts back to e. The busiest rank per step runs
    the full-query steps (i <= rank: half of K, V), which move more than the half-query ones.

    ``merge = "unfused"`` (eager: every op one pass; lse terms, 1 / head_dim of these, left out):
        forward per step:  out 36 + e (cast e + 4; acc - out 12; x factor 8; acc - that 12), K, V 2e (the cat);
        forward once:      out 8 + 2e (the first step's cast e + 4, the result's cast 4 + e);
        backward per step: dQ 8 + e (read 4 + e, write 4); dK, dV 20 + 5e/2 (half add 4 + e/2, cat 8, cat for the
                           next rank 8, the K, V cat 2e);
        backward once:     dQ 16 + 2e (zeros 4, first add 8 + e, cast 4 + e); dK, dV 24 + 2e (zeros 4, first
                           add 8 + e, cat 8, the cast of the last arrival 4 + e).
    ``merge = "fused"`` (compiled: Inductor fuses each step's pointwise chain, reading operands and writing the
    result once; the unused K, V cats are dropped):
        forward per step:  out 8 + e (as Transformer Engine's); forward once: K, V 2e (the gathered cat);
        backward per step: dQ 8 + e; dK, dV 8 + e (read the arriving 4 and the step's e, write 4);
        backward once:     dQ 4 + e (the first add from zeros); dK, dV 8 + 4e (first add 4 + e, the gathered cat
                           2e, the last arrival's cast 4 + e).
    BF16 (e = 2), per step, forward / backward: unfused 38 / 10 + 25 x 2, fused 10 / 10 + 10 x 2 bytes per element
    (Transformer Engine's 10 / 8 + 8 x 2). Llama 3 8B at 256K tokens on CP 8 (32K tokens a card, K, V at the query
    heads: 134M elements each): unfused 44.8 GB forward and 66.6 GB backward a layer, fused 10.5 and 33.3 GB
    (Transformer Engine's count: 9.4 and 22.5 GB)."""
    if ring != "allgather":
        return None
    f = FP32
    if merge == "unfused":
        return ops.RingMergeBytes(
            fwd_step_q=e + f + 3.0 * f + 2.0 * f + 3.0 * f, fwd_step_kv=2.0 * e,
            fwd_once_q=(e + f) + (f + e), fwd_once_kv=0.0,
            dx_step_q=2.0 * f + e, dx_step_kv=(2.0 * f + e) / 2.0 + 2.0 * f + 2.0 * f + 2.0 * e,
            dx_once_q=f + (2.0 * f + e) + (f + e), dx_once_kv=f + (2.0 * f + e) + 2.0 * f + (f + e))
    return ops.RingMergeBytes(
        fwd_step_q=2.0 * f + e, fwd_step_kv=0.0, fwd_once_q=0.0, fwd_once_kv=2.0 * e,
        dx_step_q=2.0 * f + e, dx_step_kv=2.0 * f + e, dx_once_q=f + e, dx_once_kv=(f + e) + 2.0 * e + (f + e))


def tp_gather_bytes(sc: Scenario, r: steptime.Rates) -> float:
    """Bytes per element of the tensor-parallel all-gathers: 1 where the stack gathers FP8 copies under
    tensor-wise dynamic scaling (``fp8_tp_gather``: torchao's Float8ColwiseParallel / Float8RowwiseParallel cast
    the forward input to e4m3 and the backward output gradient to e5m2 before gathering; they require dynamic
    scaling) and the card runs FP8 GEMMs; else 0, the activation's own bytes (ops.tp_collectives)."""
    fp8 = r.fp8 and memory.recipe(sc.task.precision).matrix == "fp8" and sc.stack.fp8_recipe == "current"
    return steptime.OPERAND_BYTES["fp8"] if fp8 and sc.stack.fp8_tp_gather else 0.0


# recent op_times results, least recently used first
_OP_MEMO: OrderedDict[tuple[Any, ...], tuple[Scenario, OpTimes]] = OrderedDict()


OP_MEMO_SIZE = 1024  # a MoE space's layouts revisit (tp, micro-batch, EP, capacity) kernel sets round after round


def op_times(sc: Scenario, *, acc: str, recompute: str, tp: ArrayLike, cp: ArrayLike = 1, mb: ArrayLike,
             ep: ArrayLike = 1, etp: ArrayLike = 0, cap: ArrayLike = 0.0, nics: ArrayLike | None = None,
             dense: bool = False) -> OpTimes:
    """Per-operation times of one micro-batch: (layer, first-stage extras, last-stage extras), each a
    steptime.PhaseTimes (fwd, dX incl. recompute, dW, exposed TP, exposed CP). A MoE layer's expert
    kernels depend on EP, expert-TP and the load factor (ops.moe_kernels); ``dense=True`` gives a MoE
    model's dense-MLP block as the layer instead (:func:`dense_split`). The context-parallel exchange
    is included when ``nics`` (its path's NICs per host) is given."""
    arrays = [np.asarray(x) for x in (tp, mb, ep, cap, etp, cp,
                                      -1 if nics is None else nics)]
    key = (id(sc), acc, str(recompute), dense) + tuple((x.shape, x.dtype.str, x.tobytes()) for x in arrays)
    hit = _OP_MEMO.get(key)
    if hit is not None and hit[0] is sc:  # the scenario itself is kept, so its id is not reused while cached
        _OP_MEMO.move_to_end(key)
        return hit[1]
    grid = key[:4] + tuple((x.ndim, x.dtype.str) for x in arrays)
    value = _sub_grid(sc, grid, arrays)
    if value is None:
        value = _op_times(sc, acc=acc, recompute=recompute, tp=tp, cp=cp, mb=mb, ep=ep, etp=etp, cap=cap, nics=nics,
                          dense=dense)
        _keep_grid(grid, arrays, key)
    _OP_MEMO[key] = (sc, value)
    while len(_OP_MEMO) > OP_MEMO_SIZE:
        _OP_MEMO.popitem(last=False)
    return value


# the op_times calls kept in the memo by what they read besides their arrays' values: (the scenario's id, the
# accelerator, the recompute, dense, each array's rank and dtype) -> {memo key: its arrays}
_OP_GRIDS: dict[tuple[Any, ...], dict[tuple[Any, ...], tuple[np.ndarray[Any, Any], ...]]] = {}


def _keep_grid(grid: tuple[Any, ...], arrays: Sequence[np.ndarray[Any, Any]], key: tuple[Any, ...]) -> None:
    """Note memo entry ``key``, computed at ``arrays``, for :func:`_sub_grid`; the notes of entries the memo no
    longer holds are dropped once there are more notes than the memo holds entries."""
    _OP_GRIDS.setdefault(grid, {})[key] = tuple(arrays)
    if sum(len(g) for g in _OP_GRIDS.values()) > OP_MEMO_SIZE:
        for g in list(_OP_GRIDS):
            kept = {k: a for k, a in _OP_GRIDS[g].items() if k in _OP_MEMO}
            if kept:
                _OP_GRIDS[g] = kept
            else:
                del _OP_GRIDS[g]


def _positions(want: np.ndarray[Any, Any], have: np.ndarray[Any, Any]) -> tuple[int, list[int]] | None:
    """Where ``want`` lies in ``have`` (arrays of one rank): ``have``'s one axis of several entries and, for each
    entry of ``want`` along it, a position of ``have`` holding its value; None where ``have`` varies along several
    axes or none, ``want`` along another axis, or a value of ``want`` is not in ``have``."""
    axes = [i for i, n in enumerate(have.shape) if n > 1]
    if len(axes) != 1 or any(n > 1 for i, n in enumerate(want.shape) if i != axes[0]):
        return None
    first: dict[Any, int] = {}
    for i, v in enumerate(have.ravel().tolist()):
        first.setdefault(v, i)
    at = [first.get(v, -1) for v in want.ravel().tolist()]
    return None if -1 in at else (axes[0], at)


def _sub_grid(sc: Scenario, grid: tuple[Any, ...], arrays: Sequence[np.ndarray[Any, Any]]) -> OpTimes | None:
    """The op_times at ``arrays`` taken from a kept call whose arrays hold them (:func:`_keep_grid`; ``grid``: what
    both read besides their arrays' values), None where none does. A kept call holds them when each of its
    arrays equals the asked one or (TP and micro-batch: :data:`TAKEN`) varies along one axis only and holds the
    asked values there, every array of
    the kept call that varies along such an axis being taken along it at the same positions. Every term is
    computed entry by entry from its own layout's values (the kernels broadcast over the layout axes; nothing
    reduces along them), so the kept call's entries at those positions are the bits a call at the asked values
    computes, in the shape it gives them: a term that varies along such an axis taken at the positions, the
    others as they are. The nine-accelerator GPT-3 analysis asks for 180 kernel sets of a few TP widths (its
    block builds) and 243 of one layout, each within a call the solve made over every width and micro-batch."""
    for key, have in list(_OP_GRIDS.get(grid, {}).items()):
        hit = _OP_MEMO.get(key)
        if hit is None or hit[0] is not sc:
            del _OP_GRIDS[grid][key]  # evicted, or its scenario gone
            continue
        takes = _takes(arrays, have)
        if takes is not None:
            return cast(OpTimes, tuple(steptime.PhaseTimes(*(_taken(x, takes) for x in t)) for t in hit[1]))
    return None


TAKEN = (0, 1)
"""The arrays of an op_times call (TP, micro-batch: op_times' order) :func:`_sub_grid` takes at positions of a kept
call's; the others (experts, context parallelism, NICs) must be the kept call's own (the context-parallel terms and
kernels are formed only where some entry has cp > 1: taking a cp of 1 from a call with 2 would keep their zeros)."""


def _takes(arrays: Sequence[np.ndarray[Any, Any]], have: Sequence[np.ndarray[Any, Any]]
           ) -> dict[int, list[int]] | None:
    """The positions (axis counted from the right -> positions) at which the kept arrays ``have`` hold ``arrays``
    (:func:`_sub_grid`), None where they do not: an array asked as kept takes none, the others (of :data:`TAKEN`
    only) one axis each (:func:`_positions`), the same positions for every array taken along one axis, and no
    array asked as kept varies along an axis another one is taken along."""
    takes: dict[int, list[int]] = {}
    whole: set[int] = set()  # the axes an array asked as kept varies along
    for j, (want, kept) in enumerate(zip(arrays, have, strict=True)):
        if want.shape == kept.shape and want.tobytes() == kept.tobytes():
            whole.update(kept.ndim - i for i, n in enumerate(kept.shape) if n > 1)
            continue
        found = _positions(want, kept) if j in TAKEN else None
        if found is None or takes.setdefault(kept.ndim - found[0], found[1]) != found[1]:
            return None
    return None if whole & set(takes) else takes


def _taken(x: Floats, takes: dict[int, list[int]]) -> Floats:
    """Term ``x`` at the positions ``takes`` (axis counted from the right -> positions) along each axis it varies
    along (:func:`_sub_grid`)."""
    for back, at in takes.items():
        a = np.ndim(x) - back
        if a >= 0 and np.shape(x)[a] > 1:
            x = np.take(x, at, axis=a)
    return x


def _op_times(sc: Scenario, *, acc: str, recompute: str, tp: ArrayLike, cp: ArrayLike = 1, mb: ArrayLike,
              ep: ArrayLike = 1, etp: ArrayLike = 0, cap: ArrayLike = 0.0, nics: ArrayLike | None = None,
              dense: bool = False) -> OpTimes:
    rc = effective_recompute(sc, recompute)
    r = rates(sc, acc)
    lay = layout(sc, acc=acc, tp=tp, cp=cp, mb=mb, ep=ep, etp=etp, cap=cap)
    lay = replace(lay, tp_gather_bytes=tp_gather_bytes(sc, r))
    layer = steptime.layer_times(sc.model, lay, r, rc, sc.overlap_fractions()[0], False if dense else None)
    first, last = steptime.stage_extras(sc.model, lay, r)
    if nics is not None and np.any(_f(cp) > 1):
        a_f, a_dx = steptime.attention_times(sc.model, lay, r)
        x_f, x_dx = cp_exchange(sc, acc=acc, tp=tp, cp=cp, mb=mb, nics=nics, attention_fwd=a_f, attention_dx=a_dx)
        redo = x_f if rc == "full" else 0.0 * x_f  # a full recompute reruns the forward exchange
        layer = steptime.PhaseTimes(layer.fwd + x_f, layer.dx + x_dx + redo, layer.dw, layer.tp, x_f + x_dx + redo)
    return layer, first, last


def cp_exchange(sc: Scenario, *, acc: str, tp: ArrayLike, cp: ArrayLike, mb: ArrayLike, nics: ArrayLike,
                attention_fwd: Floats, attention_dx: Floats) -> tuple[FloatArray, FloatArray]:
    """Exposed context-parallel exchange of one layer and micro-batch, (forward, backward).

    Ring (context.ring_exposed): each of the cp - 1 steps passes one K, V block (backward: K, V and
    dK, dV) while the card computes that step's share of the attention, attention / cp, which still loses the
    contention share of the hidden transfer (per-operation model); all-to-all
    (context.alltoall_bytes): the q, k, v and output exchanges are on the critical path, forward and
    backward alike. Bandwidth: context.cp_bandwidth (in the per-operation model on the fabric derated by the
    collective efficiencies, tp_efficiency on the scale-up links and dp_efficiency across the NICs, and each
    ring step paying its send's latency, context.cp_step_latency); 0 when cp = 1."""
    A = sc.system(acc).acc
    a, e = context.ring_kv_arch(sc.model, sc.stack.kv_repeat), sc.memory.activation_bytes
    fabric = A.fabric
    step: Floats = 0.0
    kappa = 0.0
    if per_op_model(sc):  # the collective efficiencies of the tiers the group crosses, each step's send latency
        p = _perf(sc, acc)
        fabric = fabric.derated(p.tp_efficiency, p.dp_efficiency)
        step = context.cp_step_latency(fabric, tp, cp, p.up_step_latency, p.out_step_latency)
        kappa = p.overlap_contention
    bw = context.cp_bandwidth(fabric, tp, cp, nics, sc.cp_method)
    if sc.cp_method == "ring" and sc.stack.cp_ring == "allgather":
        return _gathered_ring(sc, tp=tp, cp=cp, mb=mb, bw=bw, step=step, kappa=kappa, attention_fwd=attention_fwd,
                              attention_dx=attention_dx)
    if sc.cp_method == "ring":
        f_bytes, b_bytes = context.ring_transfer_bytes(a, sc.task.seq_len, mb, tp, cp, e)
        return (context.ring_exposed(f_bytes, bw, attention_fwd, cp, step, kappa),
                context.ring_exposed(b_bytes, bw, attention_dx, cp, step, kappa))
    t = np.where(_f(cp) > 1, context.alltoall_bytes(a, sc.task.seq_len, mb, tp, cp, e) / bw, 0.0)
    return t, t


FP32_BYTES = 4.0  # torch's context_parallel accumulates and passes dK, dV in FP32 (convert_to_f32 = True)


def _gathered_ring(sc: Scenario, *, tp: ArrayLike, cp: ArrayLike, mb: ArrayLike, bw: Floats, step: Floats,
                   kappa: float, attention_fwd: Floats, attention_dx: Floats) -> tuple[FloatArray, FloatArray]:
    """(forward, backward) exposed exchange of torch's context_parallel ring (stack ``cp_ring = "allgather"``,
    context.CP_RINGS): the forward gathers the other cards' K, V once behind the first step's attention
    (context.gathered_ring_exposed); the backward gathers them again the same way behind the first step's
    attention backward, and passes the FP32 dK, dV accumulators on step by step: cp sends, the send of step i
    awaited after step i + 1's attention backward (context.ring_exposed on cp - 1 of them at 4 bytes an
    element), the last one after the loop with nothing to hide it (_templated_ring_attention_backward:
    dkv_rotater.next_buffer() after the last step): one dK, dV block's transfer and latency exposed. K, V as the
    stack's attention takes them (context.ring_kv_arch)."""
    a, e = context.ring_kv_arch(sc.model, sc.stack.kv_repeat), sc.memory.activation_bytes
    kv, both = context.ring_transfer_bytes(a, sc.task.seq_len, mb, tp, cp, e, FP32_BYTES)
    grads = both - kv  # the cp - 1 FP32 dK, dV blocks of the steps after the first
    last = np.where(_f(cp) > 1, grads / np.maximum(_f(cp) - 1.0, 1.0) / bw + step, 0.0)
    fwd = context.gathered_ring_exposed(kv, bw, attention_fwd, cp, step, kappa)
    dx = (context.gathered_ring_exposed(kv, bw, attention_dx, cp, step, kappa)
          + context.ring_exposed(grads, bw, attention_dx, cp, step, kappa) + last)
    return fwd, dx


def _split_backward(schedule: str) -> bool:
    base, _ = schedule_parts(schedule)
    return base.startswith("zb") or base.startswith("dualpipe")


def microbatch_times(sc: Scenario, *, acc: str, recompute: str, schedule: str, tp: ArrayLike, cp: ArrayLike = 1,
                     pp: ArrayLike, mb: ArrayLike, ep: ArrayLike = 1, etp: ArrayLike = 0, cap: ArrayLike = 0.0,
                     nics: ArrayLike | None = None) -> tuple[Floats, Floats, Floats]:
    """(t_forward, t_backward_input, t_backward_weight) of one micro-batch on the busiest stage's card.

    Flat model: work per token, forward 1/3 of the training FLOPs, backward 2/3 plus any recompute, at
    peak x efficiency; stages balanced (the LM head counted in the average); a MoE model's expert work
    stretched by the load factor phi (padding, the busiest rank's surplus: moe.extra_flops_per_token).
    Per-operation model: the stage's layers x the layer's kernel times plus the embedding (first stage)
    or head and loss (last stage), the phases of the stage whose micro-batch takes longest (one card's
    window of work; per-phase maxima taken over different stages would overstate it). A card has b s / cp
    of the tokens under context parallelism, its attention share scaled by the split's causal imbalance
    (:func:`cp_imbalance`); with ``nics`` the context-parallel exchange is included (:func:`cp_exchange`;
    the data-parallel overlap windows leave it out). With a split backward (zero-bubble, DualPipe) dW is
    separate; otherwise it is folded into the backward and t_backward_weight is 0.
    """
    if per_op_model(sc):
        kernels: dict[str, Any] = dict(acc=acc, recompute=recompute, tp=tp, cp=cp, mb=mb, ep=ep, etp=etp, cap=cap,
                                       nics=nics)
        layer, first, last = op_times(sc, **kernels)
        parts = _busiest_stage(sc, pp, layer, first, last, _dense_layer(sc, **kernels))
        return _fold(schedule, *parts)
    sysm = sc.system(acc)
    a, s = sc.model, sc.task.seq_len
    rc = effective_recompute(sc, recompute)
    attn = attention_flops_per_token(a, s)
    fpt = flops_per_token(a, s) + (cp_imbalance(sc, cp) - 1.0) * attn
    rfpt = memory.recompute_flops_per_token(a, s, rc)
    if a.moe:
        extra = moe.extra_flops_per_token(a, load_factor(sc, ep, cap))
        fpt = fpt + extra
        rfpt = rfpt + (extra / 3.0 if rc == "full" else 0.0)
    rate = sysm.acc.peak_flops * sysm.efficiency
    tokens = _f(mb) * s / (_f(tp) * _f(cp) * _f(pp))
    t_f = tokens * fpt / 3.0 / rate
    t_b = tokens * (2.0 * fpt / 3.0 + rfpt) / rate
    if nics is not None and np.any(_f(cp) > 1):  # the exchange of every layer of the stage
        layer_attn = _f(mb) * s / _f(cp) * cp_imbalance(sc, cp) * attn / a.layers / _f(tp)
        x_f, x_dx = cp_exchange(sc, acc=acc, tp=tp, cp=cp, mb=mb, nics=nics, attention_fwd=layer_attn / 3.0 / rate,
                                attention_dx=2.0 * layer_attn / 3.0 / rate)
        stage = np.ceil(a.layers / _f(pp))
        t_f = t_f + stage * x_f
        t_b = t_b + stage * (x_dx + (x_f if rc == "full" else 0.0))
    t_w = tokens * fpt / 3.0 / rate if _split_backward(schedule) else 0.0 * t_f
    return t_f, t_b - t_w, t_w


def _dense_layer(sc: Scenario, *, acc: str, recompute: str, tp: ArrayLike, cp: ArrayLike = 1, mb: ArrayLike,
                 ep: ArrayLike = 1, etp: ArrayLike = 0, cap: ArrayLike = 0.0,
                 nics: ArrayLike | None = None) -> steptime.PhaseTimes | None:
    """A MoE model's dense-MLP block (op_times(dense=True)'s layer), or None when every block is a MoE
    block or the model is dense (per-operation model)."""
    if dense_split(sc, 1) is None:
        return None
    return op_times(sc, acc=acc, recompute=recompute, tp=tp, cp=cp, mb=mb, ep=ep, etp=etp, cap=cap, nics=nics,
                    dense=True)[0]


def _fold(schedule: str, t_f: Floats, t_dx: Floats, t_dw: Floats) -> tuple[Floats, Floats, Floats]:
    if _split_backward(schedule):
        return t_f, t_dx, t_dw
    return t_f, t_dx + t_dw, 0.0 * t_dw


def _group_times(split: Sequence[float], g: int, layer: Sequence[Floats], first: Sequence[Floats],
                 last: Sequence[Floats], k: int, dense: Sequence[Floats] | None = None,
                 dsplit: Sequence[int] | None = None) -> list[FloatArray]:
    """(fwd, dX, dW) of layer group g: n_g x layer + embedding (g = 0) + head and loss (g = last); with a
    MoE model's dense blocks, (n_g - d_g) x layer + d_g x dense (d_g of ``dsplit``)."""
    n = split[g]
    out: list[FloatArray] = []
    for i in range(k):
        if dsplit is None:
            x = n * _f(layer[i])
        else:  # the callers pass dsplit with dense
            x = (n - dsplit[g]) * _f(layer[i]) + dsplit[g] * _f(cast(Sequence[Floats], dense)[i])
        if g == 0:
            x = x + first[i]
        if g == len(split) - 1:
            x = x + last[i]
        out.append(x)
    return out


def _candidate_stages(sc: Scenario, pp: int) -> tuple[Sequence[float], list[int], tuple[int, ...] | None]:
    """(layer split, the stages that can be the busiest, dense blocks per stage or None): stage times
    grow with the layer count, so only the first stage, the last stage and the middle stage with the most
    layers can take longest; with a MoE model's dense blocks, every middle stage whose (MoE blocks,
    dense blocks) no other middle stage has at least as many of both (either block can be the heavier)."""
    split = stage_split(sc, int(pp)) or [sc.model.layers]
    dsplit = dense_split(sc, int(pp)) if len(split) == int(pp) else None
    groups = {0, len(split) - 1}
    if len(split) > 2 and dsplit is None:
        groups.add(1 + int(np.argmax(split[1:-1])))
    elif len(split) > 2 and dsplit is not None:
        kinds = {g: (split[g] - dsplit[g], dsplit[g]) for g in range(1, len(split) - 1)}
        seen = set()
        for g, (m, d) in kinds.items():
            if (m, d) not in seen and not any(o != (m, d) and o[0] >= m and o[1] >= d for o in kinds.values()):
                groups.add(g)
                seen.add((m, d))
    return split, sorted(groups), dsplit


def _busiest(sc: Scenario, pp: ArrayLike, layer: Sequence[Floats], first: Sequence[Floats], last: Sequence[Floats],
             k: int = 3, dense: Sequence[Floats] | None = None) -> list[FloatArray]:
    """Elementwise (over the plan grid) the largest per-stage value of each of the first k phase times
    (``dense``: a MoE model's dense-block times, :func:`_group_times`).

    Stage times grow with the layer count, so only the first stage, the last stage and the middle stage
    with the most layers can be the largest (:func:`_candidate_stages`)."""
    extra = () if dense is None else tuple(_f(x) for x in dense[:k])
    shape = np.broadcast(np.asarray(pp), *(_f(x) for x in (*layer[:k], *first[:k], *last[:k])), *extra).shape
    pp_a = np.broadcast_to(np.asarray(pp), shape)
    out = [np.zeros(shape) for _ in range(k)]
    for p_val in np.unique(pp_a):
        sel = pp_a == p_val
        split, groups, dsplit = _candidate_stages(sc, p_val)
        dsplit = dsplit if dense is not None else None
        for g in groups:
            vals = _group_times(split, g, layer, first, last, k, dense, dsplit)
            for i in range(k):
                out[i][sel] = np.maximum(out[i][sel], np.broadcast_to(vals[i], shape)[sel])
    return out


def _busiest_stage(sc: Scenario, pp: ArrayLike, layer: Sequence[Floats], first: Sequence[Floats],
                   last: Sequence[Floats], dense: Sequence[Floats] | None = None) -> list[FloatArray]:
    """Elementwise (over the plan grid) the (fwd, dX, dW) times of the stage with the largest sum
    (the candidate stages of :func:`_busiest`; the first of them on ties)."""
    extra = () if dense is None else tuple(_f(x) for x in dense[:3])
    shape = np.broadcast(np.asarray(pp), *(_f(x) for x in (*layer[:3], *first[:3], *last[:3])), *extra).shape
    pp_a = np.broadcast_to(np.asarray(pp), shape)
    out = [np.zeros(shape) for _ in range(3)]
    best = np.full(shape, -np.inf)
    for p_val in np.unique(pp_a):
        sel = pp_a == p_val
        split, groups, dsplit = _candidate_stages(sc, p_val)
        dsplit = dsplit if dense is not None else None
        for g in groups:
            vals = [np.broadcast_to(v, shape) for v in _group_times(split, g, layer, first, last, 3, dense, dsplit)]
            total = vals[0] + vals[1] + vals[2]
            take = sel & (total > best)
            best = np.where(take, total, best)
            for i in range(3):
                out[i] = np.where(take, vals[i], out[i])
    return out


def pipeline_transfer(sc: Scenario, *, acc: str, tp: ArrayLike, cp: ArrayLike = 1, pp: ArrayLike, dp: ArrayLike,
                      mb: ArrayLike, nics: ArrayLike) -> FloatArray:
    """Boundary transfer per micro-batch and direction: s b h x bytes / (tp cp) over the stage link."""
    A = sc.system(acc).acc
    bw = comm.pp_link_bandwidth(A.fabric, pp, _f(tp) * _f(cp) * _f(dp), nics)
    size = comm.pp_boundary_bytes(_f(mb) * sc.task.seq_len / _f(cp), sc.model.hidden, tp,
                                  sc.memory.activation_bytes)
    return np.where(_f(pp) > 1, size / bw, 0.0)
