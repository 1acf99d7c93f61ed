"""Per-operation step time: the kernels of :mod:`tpopt.models.ops` timed by :mod:`tpopt.models.roofline`.

One layer, one micro-batch, one card:

    t_fwd = sum of forward kernel times + exposed forward TP collectives
    t_dX  = sum of dX kernel times + recompute (forward kernels rebuilt before the backward)
            + exposed backward TP collectives
    t_dW  = sum of dW kernel times

Recompute: ``full`` reruns every forward kernel of the block (and its forward collectives); the
groups rerun the forward of their ops: ``norm`` the two norms, ``mlp`` the activation, ``attn`` the
attention core without flash attention (flash attention stores nothing to rebuild; its backward
already recomputes the scores and is counted in its 2.5 x).

Tensor-parallel overlap (fraction o, ``comm.tp_overlap``): a phase's collectives C can hide behind the
phase's weight GEMMs W (Megatron-Core / Transformer Engine overlap the gathers and reductions with the
GEMMs that produce or consume them):  exposed = (1 - o) C + o (max(0, C - W) + kappa min(C, W)), where
kappa (PerfParams.overlap_contention) is what the hidden part still costs the GEMMs it hides behind.

A stage of ``n`` layers runs n x (t_fwd, t_dX, t_dW); the first stage adds the embedding, the last the
final norm, LM head and loss (:func:`stage_extras`). A MoE model's stage adds its own blocks' times:
n_moe x (MoE block) + n_dense x (dense-MLP block) (``moe_block`` of :func:`layer_times`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from tpopt.models import memory, ops, roofline
from tpopt.models.arch import ModelArch
from tpopt.models.numeric import FloatArray, Floats
from tpopt.models.roofline import PerfParams


def _f(x: ArrayLike) -> FloatArray:
    return np.asarray(x, dtype=float)


@dataclass(frozen=True)
class Rates:
    """What the kernels run on: matrix peak for the precision, the FP8 peak for weight GEMMs under an
    FP8 recipe, HBM and tensor-parallel link bandwidth, performance parameters, and a throughput
    scale (1 = as modelled; ``tpopt explain`` relaxes it)."""

    peak: float  # FLOP/s for attention and non-FP8 GEMMs
    linear_peak: float  # FLOP/s for the weight GEMMs (FP8 peak under fp8-mixed)
    hbm: float  # bytes/s
    tp_bandwidth: float  # bytes/s per direction on the tensor-parallel link
    perf: PerfParams
    fp8: bool = False  # weight GEMMs in a low precision (FP8, MXFP8 or NVFP4: ``linear_peak``)
    scale: float = 1.0
    operand_bytes: float = 1.0  # bytes per operand element of a low-precision GEMM (scales included)
    cast_bytes: float = 3.0  # bytes moved per element to quantise a GEMM input (QUANTISATION_BYTES)
    linear_ratio: float = 1.0  # the low precision's GEMM efficiency relative to BF16 (fp8_gemm_ratio, ...)
    expert_dispatch: float = 0.0  # s per local expert of one grouped expert GEMM call (the stack's; 0: none)
    grouped_ratio: Floats = 1.0  # the stack's grouped expert GEMM calls: share of their modelled speed


#: Bytes one element of a BF16 (e = 2) GEMM input costs to quantise, per scaling recipe:
#: delayed (per-tensor, amax history: one fused cast reads e, writes 1), current (per-tensor current
#: scaling: an amax pass reads e, then the cast reads e and writes 1), mxfp8 (per-32-element E8M0 scales:
#: one pass reads e and writes row- and column-wise copies, 2 (1 + 1/32), the backward needing the
#: transposed one), nvfp4 (per-16-element E4M3 scales: an amax pass, then row- and column-wise copies
#: 2 (0.5 + 1/16), plus a random Hadamard transform of the weight-gradient inputs, read and write e).
QUANTISATION_BYTES = {"delayed": lambda e: e + 1.0, "current": lambda e: 2.0 * e + 1.0,
                      "mxfp8": lambda e: e + 2.0 * (1.0 + 1.0 / 32.0),
                      "nvfp4": lambda e: 2.0 * e + 2.0 * (0.5 + 1.0 / 16.0) + 2.0 * e}
#: Bytes per operand element of a low-precision GEMM (its block scales included).
OPERAND_BYTES = {"fp8": 1.0, "mxfp8": 1.0 + 1.0 / 32.0, "nvfp4": 0.5 + 1.0 / 16.0}


class PhaseTimes(NamedTuple):
    fwd: Floats
    dx: Floats
    dw: Floats
    tp: Floats = 0.0  # exposed tensor-parallel time inside fwd + dx (for reports)
    cp: Floats = 0.0  # exposed context-parallel exchange inside fwd + dx (for reports)


def kernel_time(k: ops.Kernel, r: Rates, act_bytes: float = 2.0) -> FloatArray:
    """Time of one kernel on one card (roofline.*_time), divided by the throughput scale.

    Under a low-precision recipe (FP8, MXFP8, NVFP4), weight GEMMs run at that precision's peak x
    ``linear_ratio``, read their two operands in ``operand_bytes`` per element of the batch x (m k + k n)
    operand elements (the output stays in e bytes) and first quantise their activation input (the batch x
    m x k operand: a grouped expert GEMM quantises the rows of every local expert; ``cast_bytes`` per
    element: :data:`QUANTISATION_BYTES` of the stack's scaling recipe); the dW GEMM reuses the quantised
    copies. A grouped GEMM's waves are quantised over the products resident at once (``resident``, the
    grouped linear layer's streams), the call takes at least :func:`expert_gemm_floor`, and its time is divided by
    the stack's grouped_gemm_efficiency (:func:`grouped_call_time`). Flash-attention
    backward kernels run at the attention efficiency x attention_bwd_ratio."""
    p = r.perf
    if k.kind == "gemm":
        fp8 = r.fp8 and k.linear
        peak = r.linear_peak if k.linear else r.peak
        moved = k.bytes
        if fp8:
            moved = _f(k.bytes) - (act_bytes - r.operand_bytes) * _f(k.batch) * (_f(k.m) * _f(k.k)
                                                                                 + _f(k.k) * _f(k.n))
        grouped = not (isinstance(k.resident, float) and k.resident <= 0)
        waves = np.minimum(k.batch, k.resident) if grouped else k.batch
        t = roofline.gemm_time(k.flops, moved, k.m, k.n, k.k, waves, peak, r.hbm, p, k.count,
                               r.linear_ratio if fp8 else 1.0)
        if fp8 and k.phase != "dw":  # every product's input: batch x m x k (a grouped GEMM's experts each cast)
            t = t + roofline.memory_time(_f(k.batch) * _f(k.m) * _f(k.k) * r.cast_bytes * act_bytes / 2.0, r.hbm, p)
        if r.expert_dispatch > 0 and grouped:
            t = np.maximum(t, expert_gemm_floor(k.batch, r.expert_dispatch))
        if grouped:
            t = grouped_call_time(t, r.grouped_ratio)
    elif k.kind == "attention":
        t = roofline.attention_time(k.flops, k.bytes, r.peak, r.hbm, p, k.count, backward=k.phase != "fwd")
    else:
        t = roofline.memory_time(k.bytes, r.hbm, p, k.count)
    return t / r.scale


def grouped_call_time(modelled: Floats, efficiency: Floats) -> FloatArray:
    """Time of one grouped expert GEMM call (one projection and phase over every local expert) as the stack runs it:
        t_call = t_model / g
    t_model the call as the roofline and the host floor time it (tiles, waves over the resident experts, k-loop,
    FP8 casts; at least :func:`expert_gemm_floor`), g the stack's grouped_gemm_efficiency (catalogs/stacks.toml,
    fitted on the stack's MoE runs: benchmarks/fit_grouped_gemm.py). The share g applies to the call whatever
    bounds it, the GPU's work or the host's per-expert set-up. Dense GEMMs, the router's and the shared experts'
    are not grouped calls and keep their time. g = 0.8: a 1 ms call takes 1.25 ms."""
    out: FloatArray = _f(modelled) / _f(efficiency)
    return out


def expert_gemm_floor(local_experts: ArrayLike, dispatch: float) -> FloatArray:
    """The least time of one grouped expert GEMM call that runs one GEMM per local expert (Transformer Engine's
    multi-stream grouped linear layer: a host loop that sets up and enqueues each expert's cuBLASLt GEMM):
        t_call >= n_local x t_dispatch
    the host's per-expert set-up, which the GPU waits for once the experts' own GEMMs take less (few rows per
    expert, narrow experts). ``dispatch``: the stack's expert_gemm_dispatch (catalogs/stacks.toml). With 16 local
    experts and 33.4 us per expert a call takes at least 0.53 ms, whatever its FLOPs."""
    floor: FloatArray = _f(local_experts) * dispatch
    return floor


def expert_dispatch(stack_dispatch: float, fused_grouped_mlp: bool) -> float:
    """The per-expert host time of a grouped expert GEMM call (:func:`expert_gemm_floor`'s ``dispatch``):
        t_dispatch = 0                 where the grouped MLP is one fused launch over every local expert
        t_dispatch = the stack's value otherwise (a host loop of one GEMM per expert)
    The fused path (Transformer Engine's CuTe DSL grouped MLP, NVTE_CUTEDSL_FUSED_GROUPED_MLP, that
    Megatron-Core's experts call once per block with the tokens per expert on the device) enqueues FC1, the
    gated activation and FC2 for all local experts at once, so the GPU no longer waits for a per-expert set-up:
    with 16 local experts and 33.4 us per expert each call's 0.53 ms floor goes, and the call takes its
    roofline time."""
    return 0.0 if fused_grouped_mlp else stack_dispatch


def _sum(kernels: Iterable[ops.Kernel], r: Rates, e: float, keep: Callable[[ops.Kernel], bool]) -> Floats:
    total: Floats = 0.0
    for k in kernels:
        if keep(k):
            total = total + kernel_time(k, r, e)
    return total


def rebuilt_share(recompute: str, flash: bool, a: ModelArch) -> Callable[[ops.Kernel], float]:
    """Share of each forward kernel rerun before the backward under ``recompute``: 0 or 1 (:func:`rebuilt`),
    and under torchtitan's per-op checkpointing (memory.OP_RECOMPUTE) every memory-bound kernel, no fused
    attention kernel, and of each GEMM the share of its outputs the policy does not save
    (memory.op_sac_linears: k of the fused qkv, the attention projection, the up half of gate / up)."""
    if recompute != memory.OP_RECOMPUTE:
        keep = rebuilt(recompute, flash)
        return lambda k: 1.0 if keep(k) else 0.0
    saved = {op: share for op, _, _, share in memory.op_sac_linears(a)}

    def share(k: ops.Kernel) -> float:
        if k.phase != "fwd" or k.kind == "attention":
            return 0.0
        return 1.0 - saved.get(k.op, 0.0) if k.kind == "gemm" else 1.0

    return share


def _share_sum(kernels: Iterable[ops.Kernel], r: Rates, e: float, share: Callable[[ops.Kernel], float]) -> Floats:
    total: Floats = 0.0
    for k in kernels:
        w = share(k)
        if w:
            total = total + w * kernel_time(k, r, e)
    return total


def op_sac_collective_rerun(sequence_parallel: bool, gather_ratio: float = 1.0) -> float:
    """Share of a block's forward TP collectives torchtitan's per-op checkpointing reruns in the backward: its
    policy saves reduce-scatter outputs (_c10d_functional.reduce_scatter_tensor) but no all-gather or all-reduce,
    so with sequence parallelism the two all-gathers of the block's four collectives rerun, 2 g / (2 g + 2) of the
    forward bytes with ``gather_ratio`` g = the all-gathers' bytes per element over the reductions' (0.5 at g = 1;
    1/3 for FP8 gathers of BF16 activations, ops.tp_gather_ratio), without it both all-reduces (1)."""
    return gather_ratio / (gather_ratio + 1.0) if sequence_parallel else 1.0


def rebuilt(recompute: str, flash: bool) -> Callable[[ops.Kernel], bool]:
    """Predicate: is this forward kernel rerun before the backward under ``recompute``?"""
    if recompute == "none":
        return lambda k: False
    if recompute == "full":
        return lambda k: k.phase == "fwd"
    groups = set(recompute.split("+"))
    if flash:
        groups.discard("attn")
    return lambda k: k.phase == "fwd" and k.group in groups


def tp_exposed(coll_bytes: ArrayLike, calls: ArrayLike, window: ArrayLike, r: Rates, overlap: float) -> FloatArray:
    """Exposed collective time: C = bytes / (B eff) + calls x latency;
    exposed = (1 - o) C + o (max(0, C - W) + kappa min(C, W)), kappa = overlap_contention (the share of
    the hidden time the GEMMs lose to the SMs and HBM traffic of the communication kernels)."""
    p = r.perf
    c = roofline.collective_time(coll_bytes, r.tp_bandwidth, p.tp_efficiency, p.collective_latency, calls)
    w = _f(window)
    return (1.0 - overlap) * c + overlap * (np.maximum(0.0, c - w) + p.overlap_contention * np.minimum(c, w))


def layer_times(a: ModelArch, lay: ops.Layout, r: Rates, recompute: str, tp_overlap: tuple[float, float] = (0.0, 0.0),
                moe_block: bool | None = None) -> PhaseTimes:
    """(t_fwd, t_dX, t_dW, exposed TP) of one block for one micro-batch (module docstring); ``moe_block``
    as :func:`tpopt.models.ops.layer_kernels` (False: a MoE model's dense-MLP block).

    ``tp_overlap = (o_chunked, o_async)``: o_chunked hides the forward collectives behind the forward
    weight GEMMs and the backward output-gradient gathers behind the row-parallel dX GEMMs (GEMMs split
    into chunks that overlap their communication, as Transformer Engine does); o_async hides the
    column-parallel layers' backward collectives behind their own gradient GEMMs (Megatron-LM's
    asynchronous TP all-reduce / reduce-scatter)."""
    ks = ops.layer_kernels(a, lay, moe_block)
    e = lay.act_bytes
    o_chunk, o_async = tp_overlap
    fwd = _sum(ks, r, e, lambda k: k.phase == "fwd")
    dx = _sum(ks, r, e, lambda k: k.phase == "dx")
    dw = _sum(ks, r, e, lambda k: k.phase == "dw")
    redo = _share_sum(ks, r, e, rebuilt_share(recompute, lay.flash_attention, a))
    c = ops.tp_collectives(a, lay)
    w_fwd = _sum(ks, r, e, lambda k: k.linear and k.phase == "fwd")
    w_col = _sum(ks, r, e, lambda k: k.op in ("qkv", "mlp.up") and k.phase != "fwd")
    w_row = _sum(ks, r, e, lambda k: k.op in ("proj", "mlp.down") and k.phase == "dx")
    tp_f = tp_exposed(c.fwd, c.fwd_calls, w_fwd, r, o_chunk)
    tp_b = tp_exposed(c.bwd_async, c.async_calls, w_col, r, o_async) + tp_exposed(c.bwd_sync, c.sync_calls, w_row,
                                                                                   r, o_chunk)
    rerun = op_sac_collective_rerun(lay.sequence_parallel, ops.tp_gather_ratio(lay))
    tp_redo = tp_f * rerun if recompute == memory.OP_RECOMPUTE else (tp_f if recompute == "full" else 0.0 * tp_f)
    return PhaseTimes(fwd + tp_f, dx + redo + tp_redo + tp_b, dw, tp_f + tp_redo + tp_b)


def stage_extras(a: ModelArch, lay: ops.Layout, r: Rates) -> tuple[PhaseTimes, PhaseTimes]:
    """(embedding on the first stage, final norm + LM head + loss on the last stage) per micro-batch.

    Under TP the vocab-parallel embedding reduces its output (all-reduce, or reduce-scatter with SP)
    and the head gathers its input with SP (and reduces the input gradient); their collectives are
    counted exposed.
    """
    e = lay.act_bytes
    emb = ops.embedding_kernels(a, lay)
    head = ops.head_kernels(a, lay)
    t = _f(lay.tp)
    share = np.where(t > 1, (t - 1.0) / t, 0.0)
    size = lay.tokens * a.hidden * e
    calls = np.where(t > 1, 1.0, 0.0)
    p = r.perf
    emb_c = roofline.collective_time((1.0 if lay.sequence_parallel else 2.0) * share * size, r.tp_bandwidth,
                                     p.tp_efficiency, p.collective_latency, calls)
    head_c = roofline.collective_time(share * size * (1.0 if lay.sequence_parallel else 0.0), r.tp_bandwidth,
                                      p.tp_efficiency, p.collective_latency, calls if lay.sequence_parallel else 0.0)
    first = PhaseTimes(_sum(emb, r, e, lambda k: k.phase == "fwd") + emb_c, 0.0 * emb_c,
                       _sum(emb, r, e, lambda k: k.phase == "dw"), emb_c)
    last = PhaseTimes(_sum(head, r, e, lambda k: k.phase == "fwd") + head_c,
                      _sum(head, r, e, lambda k: k.phase == "dx") + head_c,
                      _sum(head, r, e, lambda k: k.phase == "dw"), 2.0 * head_c)
    return first, last


def attention_times(a: ModelArch, lay: ops.Layout, r: Rates) -> tuple[Floats, Floats]:
    """(forward, dX) time of one block's attention core (the kernels ops.attention_kernels lists): the
    work a ring attention exchange can hide behind (models/context.py)."""
    ks = ops.attention_kernels(a, lay)
    e = lay.act_bytes
    return _sum(ks, r, e, lambda k: k.phase == "fwd"), _sum(ks, r, e, lambda k: k.phase == "dx")


def optimizer_time(shard_params: ArrayLike, bytes_per_param: float, r: Rates) -> Floats:
    """Optimizer step of one card's shard (memory-bound): Q / (B_hbm eta_mem) + kernels."""
    return _sum(ops.optimizer_kernels(shard_params, bytes_per_param), r, 2.0, lambda k: True)


def executed_flops(a: ModelArch, lay: ops.Layout, recompute: str,
                   moe_block: bool | None = None) -> tuple[Floats, Floats, Floats]:
    """FLOPs one card executes per micro-batch of one block: (fwd, dX incl. recompute, dW)."""
    ks = ops.layer_kernels(a, lay, moe_block)
    share = rebuilt_share(recompute, lay.flash_attention, a)
    redo = sum((share(k) * _f(k.flops) for k in ks if share(k)), 0.0)
    return ops.flops(ks, "fwd"), ops.flops(ks, "dx") + redo, ops.flops(ks, "dw")


def stage_layers(layers: int, pp: int, first: int = 0, last: int = 0) -> list[int]:
    """Transformer layers per pipeline stage.

    Given counts for the first and/or last stage (0 = automatic), the rest split evenly over the other
    stages. Automatic: L / pp each when pp divides L; otherwise the L mod pp extra layers go to the
    middle stages first (stage 1, 2, ...), then the first stage, and the last stage (which also runs the
    LM head and loss) gets one only when every other stage has one. Raises ValueError if the counts
    leave a stage without a layer.
    """
    if pp <= 1:
        return [layers]
    fixed: dict[int, int] = {}
    if first:
        fixed[0] = first
    if last:
        fixed[pp - 1] = last
    rest = [g for g in range(pp) if g not in fixed]
    remaining = layers - sum(fixed.values())
    if not rest:
        if remaining != 0:
            raise ValueError(f"first + last stage layers ({sum(fixed.values())}) must equal the {layers} layers")
        return [fixed[0], fixed[pp - 1]]
    base, extra = divmod(remaining, len(rest))
    if base < 1:
        raise ValueError(f"{layers} layers cannot give every one of {pp} stages a layer")
    order = [g for g in rest if 0 < g < pp - 1] + [g for g in rest if g == 0] + [g for g in rest if g == pp - 1]
    counts = dict(fixed)
    for i, g in enumerate(order):
        counts[g] = base + (1 if i < extra else 0)
    return [counts[g] for g in range(pp)]
