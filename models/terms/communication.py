"""The communication terms of the step time family (seconds per step): exposed tensor- and
context-parallel time, the data-parallel gradient reduction and ZeRO gathers (bandwidth, latency, the
part the backward does not hide, hybrid sharding's replica all-reduce), optimizer offload's wait, the
expert-parallel all-to-all and the rules and quality terms of expert groups (node limit, capacity
drops, group shape).
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
from numpy.typing import ArrayLike, NDArray

from tpopt.models import comm, context, memory, moe, network, ops, steptime
from tpopt.models.numeric import ArrayMemo, FloatArray, Floats
from tpopt.models.plan import Scenario
from tpopt.models.terms.layer_times import (
    _busiest,
    _dense_layer,
    _perf,
    microbatch_times,
    op_times,
    pipeline_transfer,
    rates,
)
from tpopt.models.terms.memory import _moe_stages, _sharded, _stored_per_layer, card_tokens, heaviest_stage_params
from tpopt.models.terms.shapes import (
    _f,
    effective_recompute,
    grad_accum,
    load_factor,
    per_op_model,
    schedule_parts,
    shard_ranks,
    with_sequence_parallel,
    zero_ranks,
)

CPU_ADAM_BYTES_PER_PARAM = 36.0
"""Bytes a CPU Adam step touches per parameter: cast BF16->FP32 (read 2, write 4), read grad, master,
m, v (16), write master, m, v (12), write the BF16 copy (2)."""


def replica_link(sc: Scenario, *, acc: str, zero: ArrayLike, tp: ArrayLike, pp: ArrayLike, dp: ArrayLike,
                 cp: ArrayLike, nics: ArrayLike, n: ArrayLike) -> FloatArray:
    """Hybrid sharding: the per-step all-reduce of each card's gradient shard over the r = dp x cp / s
    replicas of its shard group (s ranks, :func:`shard_ranks`), once a step after the last micro-batch:
        t = 2 (r-1)/r x g N / s / B_r + calls x (t_call + network.collective_latency, an all-reduce),
    the ring's members tp x s ranks apart, so with s x tp >= a host every card of a host is in its own ring
    and they share the host's NICs: B_r = nics x B_nic / min(tp s, cards per host) (network.route), x the
    collective efficiency. MaxText's Llama 2 7B on A3 High (8-way FSDP per host, 16 hosts, 4 x 200 Gb/s NICs:
    12.5 GB/s a card; the gradients reduced in BF16 as MaxText's sharding guide counts them, catalogs/stacks.toml):
    2 x 15/16 x 2 x 6.7e9 / 8 B / 12.5 GB/s = 0.25 s a step, of which :func:`replica_tail` shows whole."""
    full = zero_ranks(dp, cp)
    s = shard_ranks(sc, dp, cp, zero)
    r = full / s
    if not np.any(r > 1):
        return 0.0 * r
    rec = sc.state_recipe()
    A = sc.system(acc).acc
    stride = _f(tp) * s
    bw: Floats = network.route(A.fabric, r, stride, np.minimum(stride, A.cards_per_host), nics).bandwidth
    lat: Floats = 0.0
    if per_op_model(sc):
        p = _perf(sc, acc)
        bw = bw * p.dp_efficiency
        layers = np.ceil(sc.model.layers / _f(pp))
        bucket = comm.dp_bucket_bytes(sc.stack.dp_bucket, sc.stack.dp_bucket_per_rank, full)
        calls = comm.dp_collective_calls(0, _f(n) / s, layers, 1, bucket, rec.weights, rec.grads)
        sent = comm.dp_call_bytes(0, _f(n) / s, layers, r, bucket, rec.weights, rec.grads)
        lat = calls * (p.collective_latency + network.collective_latency(
            A.fabric, r, stride, p.up_step_latency, p.out_step_latency, allreduce=True, call_bytes=sent, bandwidth=bw))
    t = comm.allreduce_bytes(rec.grads * _f(n) / s, r) / bw + lat
    out: FloatArray = np.where(r > 1, t, 0.0)
    return out


def replica_tail(sc: Scenario, *, acc: str, zero: ArrayLike, tp: ArrayLike, pp: ArrayLike, dp: ArrayLike,
                 cp: ArrayLike, nics: ArrayLike, n: ArrayLike) -> FloatArray:
    """Per-operation model, hybrid sharding: the last of the replica all-reduce's calls (:func:`replica_link`),
    which starts when the backward has produced its last gradients and so has no compute left to hide behind:
        t = 2 (r-1)/r x u / B_r + t_call + network.collective_latency,   u = min(bucket, g N / s),
    the stack's gradient bucket (comm.dp_bucket_bytes; without one a layer's shard, g N / (s L)) as the unit the
    stack reduces in one call, B_r as in :func:`replica_link`. MaxText on GPU: XLA combines the gradient
    all-reduces up to --xla_gpu_all_reduce_combine_threshold_bytes (1 GiB in its 8- and 16-host A3 recipes), so
    Llama 2 7B on 16 A3 High hosts (1.68 GB of BF16 gradients a card, 8-way FSDP) leaves one 1 GiB all-reduce,
    2 x 15/16 x 1.07 GB / 12.5 GB/s = 0.16 s, after the backward. 0 without replicas and in the flat model."""
    full = zero_ranks(dp, cp)
    s = shard_ranks(sc, dp, cp, zero)
    r = full / s
    if not per_op_model(sc) or not np.any(r > 1):
        return 0.0 * r
    rec = sc.state_recipe()
    A = sc.system(acc).acc
    p = _perf(sc, acc)
    stride = _f(tp) * s
    bw: Floats = network.route(A.fabric, r, stride, np.minimum(stride, A.cards_per_host), nics).bandwidth
    bw = bw * p.dp_efficiency
    layers = np.ceil(sc.model.layers / _f(pp))
    bucket = comm.dp_bucket_bytes(sc.stack.dp_bucket, sc.stack.dp_bucket_per_rank, full)
    grads = rec.grads * _f(n) / s
    unit = np.where(bucket > 0, np.minimum(bucket, grads), grads / layers)
    sent = comm.allreduce_bytes(unit, r)
    lat = p.collective_latency + network.collective_latency(
        A.fabric, r, stride, p.up_step_latency, p.out_step_latency, allreduce=True, call_bytes=sent, bandwidth=bw)
    out: FloatArray = np.where(r > 1, sent / bw + lat, 0.0)
    return out


def tp_exposed(sc: Scenario, *, acc: str, recompute: str, tp: ArrayLike, cp: ArrayLike = 1, pp: ArrayLike,
               dp: ArrayLike, mb: ArrayLike, ep: ArrayLike = 1, etp: ArrayLike = 0, cap: ArrayLike = 0.0) -> FloatArray:
    """Per-operation model: exposed tensor-parallel time per step on the busiest stage (inside the
    compute term; reported separately)."""
    kernels: dict[str, Any] = dict(acc=acc, recompute=recompute, tp=tp, cp=cp, mb=mb, ep=ep, etp=etp, cap=cap)
    layer, first, last = op_times(sc, **kernels)
    dense = _dense_layer(sc, **kernels)
    tp_stage = _busiest(sc, pp, (layer.tp,), (first.tp,), (last.tp,), 1, None if dense is None else (dense.tp,))[0]
    return grad_accum(sc, dp, mb) * tp_stage


def cp_exposed(sc: Scenario, *, acc: str, recompute: str, tp: ArrayLike, cp: ArrayLike = 1, pp: ArrayLike,
               dp: ArrayLike, mb: ArrayLike, nics: ArrayLike, ep: ArrayLike = 1, etp: ArrayLike = 0,
               cap: ArrayLike = 0.0) -> Floats:
    """Exposed context-parallel exchange per step on the busiest stage (inside the compute term;
    reported separately): micro-batches x the stage's layers x :func:`cp_exchange`."""
    ga = grad_accum(sc, dp, mb)
    if per_op_model(sc):
        layer, first, last = op_times(sc, acc=acc, recompute=recompute, tp=tp, cp=cp, mb=mb, ep=ep, etp=etp, cap=cap,
                                      nics=nics)
        return ga * _busiest(sc, pp, (_f(layer.cp),), (0.0,), (0.0,), 1)[0]
    stage: dict[str, Any] = dict(acc=acc, recompute=recompute, schedule="1f1b", tp=tp, cp=cp, pp=pp, mb=mb, ep=ep,
                                 etp=etp, cap=cap)
    with_x = microbatch_times(sc, **stage, nics=nics)
    without = microbatch_times(sc, **stage)
    return ga * (sum(with_x) - sum(without))


def cp_link(sc: Scenario, *, acc: str, tp: ArrayLike, cp: ArrayLike = 1, pp: ArrayLike, dp: ArrayLike, mb: ArrayLike,
            nics: ArrayLike) -> FloatArray:
    """Context-parallel link time per step on a card: micro-batches x the stage's layers x the
    exchange's bytes (forward + backward) at context.cp_bandwidth (hidden or not)."""
    A = sc.system(acc).acc
    a, e, s = context.ring_kv_arch(sc.model, sc.stack.kv_repeat), sc.memory.activation_bytes, sc.task.seq_len
    bw = context.cp_bandwidth(A.fabric, tp, cp, nics, sc.cp_method)
    if sc.cp_method == "ring":
        grad = 4.0 if sc.stack.cp_ring == "allgather" else None  # torch's ring passes FP32 dK, dV
        per_layer = sum(context.ring_transfer_bytes(a, s, mb, tp, cp, e, grad))
    else:
        per_layer = 2.0 * context.alltoall_bytes(a, s, mb, tp, cp, e)
    layers = np.ceil(a.layers / _f(pp))  # the busiest stage's layers (whole layers)
    link: FloatArray = grad_accum(sc, dp, mb) * layers * per_layer / bw
    return link


def dp_bandwidth(sc: Scenario, *, acc: str, tp: ArrayLike, dp: ArrayLike, nics: ArrayLike) -> Floats:
    """Per-card DP ring bandwidth (comm.dp_ring_bandwidth), x the collective efficiency in the
    per-operation model."""
    A = sc.system(acc).acc
    bw: Floats = comm.dp_ring_bandwidth(A.fabric, tp, dp, nics)
    if per_op_model(sc):
        bw = bw * _perf(sc, acc).dp_efficiency
    return bw


def dp_link(sc: Scenario, *, acc: str, zero: ArrayLike, tp: ArrayLike, cp: ArrayLike = 1, pp: ArrayLike, dp: ArrayLike,
            mb: ArrayLike, nics: ArrayLike, ep: ArrayLike = 1, etp: ArrayLike = 0) -> FloatArray:
    """Data-parallel (ZeRO) link time per step: V / B on the real path (comm.zero_dp_volume, dp_ring_bandwidth),
    over the dp x cp ranks (:func:`zero_ranks`).

    A MoE model's expert state is reduced over its expert-data-parallel group (edp members, one ring per
    card of an EP x expert-TP block): the two rings' times add up (they share the links)."""
    rec = sc.state_recipe()
    ga = grad_accum(sc, dp, mb)
    ranks = shard_ranks(sc, dp, cp, zero)
    bw = dp_bandwidth(sc, acc=acc, tp=tp, dp=ranks, nics=nics)
    if not sc.model.moe:
        n = heaviest_stage_params(sc, tp, pp)
        link: FloatArray = comm.zero_dp_volume(zero, n, ranks, ga, rec.weights, rec.grads) / bw
        return (link + dp_latency(sc, acc=acc, zero=zero, tp=tp, pp=pp, ranks=ranks, ga=ga, n=n, bw=bw)
                + replica_link(sc, acc=acc, zero=zero, tp=tp, pp=pp, dp=dp, cp=cp, nics=nics, n=n))
    g = sc.system(acc).acc.cards_per_host
    etp_size = moe.expert_tp_size(etp, tp)
    edp = moe.expert_dp_size(tp, ranks, ep, etp)
    bw_e = dp_bandwidth(sc, acc=acc, tp=np.minimum(_f(ep) * etp_size, g), dp=edp, nics=nics)
    stride = _f(ep) * etp_size

    def t(d: FloatArray, xl: FloatArray, xb: FloatArray, n: FloatArray) -> FloatArray:
        experts = xl / (_f(ep) * etp_size) + xb / _f(ep)
        both: FloatArray = (comm.zero_dp_volume(zero, d, ranks, ga, rec.weights, rec.grads) / bw
                            + comm.zero_dp_volume(zero, experts, edp, ga, rec.weights, rec.grads) / bw_e
                            + dp_latency(sc, acc=acc, zero=zero, tp=tp, pp=pp, ranks=ranks, ga=ga, n=d, bw=bw)
                            + dp_latency(sc, acc=acc, zero=zero, tp=stride, pp=pp, ranks=edp, ga=ga, n=experts,
                                         units=n, bw=bw_e))
        return both

    return _moe_stages(sc, tp, pp, t)


def dp_latency(sc: Scenario, *, acc: str, zero: ArrayLike, tp: ArrayLike, pp: ArrayLike, ranks: ArrayLike,
               ga: ArrayLike, n: ArrayLike, units: ArrayLike | None = None, bw: ArrayLike = np.inf) -> FloatArray:
    """Per-operation model: the latency of a step's data-parallel collectives, calls x (t_call + the call's
    latency as NCCL runs it): comm.dp_collective_calls (per-layer ZeRO-3 / FSDP gathers and reductions, the
    stack's gradient buckets otherwise, grown with the ranks as the stack sizes them, comm.dp_bucket_bytes) and
    network.collective_latency over the dp x cp ranks tp apart (the cheapest of NCCL's ring, whose latency grows
    with the scale-up domains crossed, and its tree / PAT, with their logarithm; up_step_latency on the scale-up
    links, out_step_latency across the NICs; ``bw`` the ring's bandwidth, which prices the tree's lower one). 0 in
    the flat model. ``units``: the sharded units per stage when they are not its layers (a MoE model's expert
    state: one unit per MoE block, its local experts, reduced and gathered over the expert-data-parallel group,
    ``ranks`` = edp members ``tp`` = ep x etp apart: ZeRO-3 gathers whole expert sets per block and micro-batch)."""
    if not per_op_model(sc):
        return 0.0 * _f(ranks)
    p = _perf(sc, acc)
    rec = sc.state_recipe()
    layers = np.ceil(sc.model.layers / _f(pp)) if units is None else _f(units)
    bucket = comm.dp_bucket_bytes(sc.stack.dp_bucket, sc.stack.dp_bucket_per_rank, ranks)
    calls = comm.dp_collective_calls(zero, n, layers, ga, bucket, rec.weights, rec.grads)
    sent = comm.dp_call_bytes(zero, n, layers, ranks, bucket, rec.weights, rec.grads)
    each = network.collective_latency(sc.system(acc).acc.fabric, ranks, tp, p.up_step_latency, p.out_step_latency,
                                      allreduce=_f(zero) == 0, call_bytes=sent, bandwidth=bw)
    out: FloatArray = np.where(_f(ranks) > 1, calls * (p.collective_latency + each), 0.0)
    return out


def dp_tail(sc: Scenario, *, acc: str, zero: ArrayLike, tp: ArrayLike, pp: ArrayLike, ranks: ArrayLike,
            bw: ArrayLike) -> FloatArray:
    """Per-operation model: the time of a step's first gather and last reduction of the sharded units
    (comm.dp_tail_bytes: one layer under ZeRO-3 / FSDP, one of the stack's buckets otherwise), which no
    compute can hide: bytes / B + calls x (t_call + network.collective_latency) over the dp x cp ranks ``tp``
    apart."""
    p = _perf(sc, acc)
    rec = sc.state_recipe()
    n = heaviest_stage_params(sc, tp, pp)
    layers = np.ceil(sc.model.layers / _f(pp))
    bucket = comm.dp_bucket_bytes(sc.stack.dp_bucket, sc.stack.dp_bucket_per_rank, ranks)
    size, calls = comm.dp_tail_bytes(zero, n, layers, ranks, bucket, rec.weights, rec.grads)
    each = network.collective_latency(sc.system(acc).acc.fabric, ranks, tp, p.up_step_latency, p.out_step_latency,
                                      allreduce=_f(zero) == 0, call_bytes=size / calls, bandwidth=bw)
    out: FloatArray = np.where(_f(ranks) > 1, size / _f(bw) + calls * (p.collective_latency + each), 0.0)
    return out


def exposed_dp(sc: Scenario, *, acc: str, zero: ArrayLike, recompute: str, sp: bool | None = None, tp: ArrayLike,
               cp: ArrayLike = 1, pp: ArrayLike, dp: ArrayLike, mb: ArrayLike, nics: ArrayLike, ep: ArrayLike = 1,
               etp: ArrayLike = 0, cap: ArrayLike = 0.0) -> FloatArray:
    """Exposed data-parallel communication (comm.exposed_time), with overlap share f (comm.dp_overlap):
    (1 - f) x every byte + f x (unhidable bytes + per-window excess over compute + the gathers that wait
    for their layer without prefetch, :func:`serial_gathers`).

    Windows: one per micro-batch for ZeRO-2/3 (their collectives run every micro-batch), one per
    step for ZeRO-0/1; each window's compute is one micro-batch's forward + backward on the busiest
    stage. Per-operation model, contention: a DP ring inside the host shares its link with the TP
    collectives of the same window, a ring across hosts shares the NICs with the pipeline transfers;
    the link time L becomes min(L / (1 - u), L + windows x the other traffic per window), u the other
    traffic's share of a window (comm.shared_link_time: the other traffic holds the link only while
    the windows' compute runs).
    """
    sc = with_sequence_parallel(sc, sp)
    ranks, link, unhidden, spans, pp_busy = _dp_window_free(sc, acc=acc, zero=zero, tp=tp, cp=cp, pp=pp, dp=dp, mb=mb,
                                                            nics=nics, ep=ep, etp=etp)
    t_f, t_dx, t_dw = microbatch_times(sc, acc=acc, recompute=recompute, schedule="1f1b", tp=tp, cp=cp, pp=pp,
                                       mb=mb, ep=ep, etp=etp, cap=cap)
    window = t_f + t_dx + t_dw
    windows = np.where(_f(zero) >= 2, grad_accum(sc, dp, mb), 1.0)
    if per_op_model(sc):
        ga = grad_accum(sc, dp, mb)
        tp_busy = tp_exposed(sc, acc=acc, recompute=recompute, tp=tp, cp=cp, pp=pp, dp=dp, mb=mb, ep=ep, etp=etp,
                             cap=cap) / ga
        other = np.where(spans, pp_busy, tp_busy)
        link = comm.shared_link_time(link, np.multiply(other, windows, out=_own(other, windows)), window * windows)
    serial = serial_gathers(sc, acc=acc, zero=zero, tp=tp, pp=pp, ranks=ranks, ga=grad_accum(sc, dp, mb), link=link)
    rest = link - serial  # what prefetch and immediate reduction may hide
    f = sc.overlap_fractions()[1]
    hidden = comm.exposed_time(unhidden, rest / windows, window, windows, True)
    if per_op_model(sc):  # the hidden share still costs the compute kappa of its time (overlap_contention)
        spare = _f(rest) - hidden  # this function's own array: the same operations in place (the table's 20 M)
        spare = np.maximum(spare, 0.0, out=_own(spare))
        spare = np.multiply(_perf(sc, acc).overlap_contention, spare, out=_own(spare))
        hidden = np.add(hidden, spare, out=_own(spare, hidden))
    both = np.add(hidden, serial, out=_own(hidden, serial))  # hidden: exposed_time's new array or this one's
    both = np.multiply(f, both, out=_own(both))
    exposed: FloatArray = np.add(both, (1.0 - f) * link, out=_own(both, link))
    return exposed


def _own(a: Any, *others: Any) -> FloatArray | None:
    """``a`` as the output of an element-wise operation of ``a`` with ``others`` (the same values as a new array,
    in place): where ``a`` is a float64 array of the operation's whole shape; None (a new array) otherwise. Only
    for arrays the caller made itself."""
    if not isinstance(a, np.ndarray) or a.dtype != np.float64 or not a.flags.writeable or \
            a.shape != np.broadcast_shapes(a.shape, *(np.shape(x) for x in others)):
        return None
    return a


_DP_MEMO = ArrayMemo(entries=1, cells=1 << 12)
"""The last answer of :func:`_dp_window_free` (input entries, all arrays together, up to 4,096)."""


def _dp_window_free(sc: Scenario, *, acc: str, zero: ArrayLike, tp: ArrayLike, cp: ArrayLike, pp: ArrayLike,
                    dp: ArrayLike, mb: ArrayLike, nics: ArrayLike, ep: ArrayLike, etp: ArrayLike) -> tuple[Any, ...]:
    """The parts of :func:`exposed_dp` that read no recompute set (nor the capacity): the ZeRO ranks, the DP link
    time :func:`dp_link`, the unhidable share (bytes / B, plus :func:`dp_tail` in the per-operation model), and in
    the per-operation model whether the ring spans hosts and the pipeline transfers' busy time. The last answer is
    kept for open grids (a table's recompute slices ask for the same; read-only arrays, the scenario held so that
    its id is not reused)."""
    arrays = [np.asarray(x) for x in (zero, tp, cp, pp, dp, mb, nics, ep, etp)]
    key = _DP_MEMO.key(arrays, id(sc), acc)
    hit = _DP_MEMO.get(key) if key is not None else None
    if hit is not None and hit[0] is sc:
        return cast(tuple[Any, ...], hit[1])
    rec = sc.state_recipe()
    ranks = shard_ranks(sc, dp, cp, zero)
    bw = dp_bandwidth(sc, acc=acc, tp=tp, dp=ranks, nics=nics)
    link = dp_link(sc, acc=acc, zero=zero, tp=tp, cp=cp, pp=pp, dp=dp, mb=mb, nics=nics, ep=ep, etp=etp)
    unhidden = comm.zero_dp_unhidden_bytes(zero, memory.embedding_shard_params(sc.model, tp), ranks, rec.weights,
                                           rec.grads) / bw
    spans = pp_busy = None
    if per_op_model(sc):
        unhidden = unhidden + dp_tail(sc, acc=acc, zero=zero, tp=tp, pp=pp, ranks=ranks, bw=bw)
        if sc.memory.zero_group > 0 and not sc.model.moe:  # hybrid sharding: the replicas' last all-reduce
            unhidden = unhidden + replica_tail(sc, acc=acc, zero=zero, tp=tp, pp=pp, dp=dp, cp=cp, nics=nics,
                                               n=heaviest_stage_params(sc, tp, pp))
        spans = network.route(sc.system(acc).acc.fabric, ranks, tp).level > 0
        pp_busy = 2.0 * pipeline_transfer(sc, acc=acc, tp=tp, cp=cp, pp=pp, dp=dp, mb=mb, nics=nics)
    out = (ranks, link, unhidden, spans, pp_busy)
    if key is not None:
        for x in out:
            if isinstance(x, np.ndarray) and x.flags.owndata and not any(x is a for a in arrays):
                x.flags.writeable = False  # shared by the slices that ask next (never a caller's own array)
        _DP_MEMO.put(key, (sc, out))
    return out


def serial_gathers(sc: Scenario, *, acc: str, zero: ArrayLike, tp: ArrayLike, pp: ArrayLike, ranks: ArrayLike,
                   ga: ArrayLike, link: ArrayLike) -> FloatArray:
    """ZeRO-3 / FSDP without prefetch (``[memory] prefetch = 0``): each layer's weight gather waits for the
    layer before it has finished, so the gathers (2 of the 3 collectives per layer and micro-batch, 2w of
    their 2w + g bytes per parameter) sit on the critical path and only the reductions may hide:
        serial = 2w / (2w + g) x (link - latency) + 2/3 x latency     (0 with prefetch >= 1).
    A MoE model's expert rings take the same shares."""
    if sc.memory.prefetch >= 1:
        return 0.0 * _f(link)
    rec = sc.state_recipe()
    lat = dp_latency(sc, acc=acc, zero=zero, tp=tp, pp=pp, ranks=ranks, ga=ga, n=heaviest_stage_params(sc, tp, pp))
    lat = np.minimum(lat, _f(link))
    share = 2.0 * rec.weights / (2.0 * rec.weights + rec.grads)
    out: FloatArray = np.where(_f(zero) >= 3, share * (_f(link) - lat) + 2.0 / 3.0 * lat, 0.0)
    return out


def tp_comm(sc: Scenario, *, acc: str, recompute: str, tp: ArrayLike, cp: ArrayLike = 1, pp: ArrayLike, dp: ArrayLike,
            mb: ArrayLike) -> FloatArray:
    """Tensor-parallel communication outside the compute term. Flat model: all on the critical path,
    V_tp / intra-host bandwidth. Per-operation model: 0 here, because the exposed TP time is part of
    each stage's duration (:func:`tp_exposed` reports it)."""
    if per_op_model(sc):
        return np.zeros(np.broadcast(_f(tp), _f(pp), _f(dp), _f(mb), _f(cp)).shape)
    A = sc.system(acc).acc
    rc = effective_recompute(sc, recompute)
    v = comm.tp_volume(_f(mb) * sc.task.seq_len / _f(cp), sc.model.hidden, tp,
                       np.ceil(sc.model.layers / _f(pp)),
                       grad_accum(sc, dp, mb), sc.memory.activation_bytes, rc == "full")
    t: FloatArray = v / A.intra_host_bw
    return t


def offload_wait(sc: Scenario, *, acc: str, offload: str, zero: ArrayLike, recompute: str, sp: bool | None = None,
                 tp: ArrayLike, cp: ArrayLike = 1, pp: ArrayLike, dp: ArrayLike, mb: ArrayLike, ep: ArrayLike = 1,
                 etp: ArrayLike = 0, cap: ArrayLike = 0.0) -> FloatArray:
    """Optimizer-step time per step. With CPU offload: the gradient download beyond the last backward
    (T_wait = max(0, V/B - W)), the CPU Adam pass at the host's memory bandwidth shared by its cards,
    and the BF16 upload. Without offload: 0 in the flat model (the chapter leaves the GPU optimizer
    step out); the GPU Adam pass over the card's shard in the per-operation model
    (ops.optimizer_bytes_per_param)."""
    sc = with_sequence_parallel(sc, sp)
    A = sc.system(acc).acc
    rec = sc.state_recipe()
    shard = _sharded(sc, lambda n, d: n / np.where(_f(zero) >= 1, _f(d), 1.0),
                     tp=tp, pp=pp, ranks=shard_ranks(sc, dp, cp, zero), ep=ep, etp=etp)
    t_f, t_dx, t_dw = microbatch_times(sc, acc=acc, recompute=recompute, schedule="1f1b", tp=tp, cp=cp, pp=pp,
                                       mb=mb, ep=ep, etp=etp, cap=cap)
    cpu_bw = A.host_memory_bw / A.cards_per_host if A.host_memory_bw > 0 else np.inf
    down = comm.offload_wait(2.0 * shard, A.host_link_bw, 2.0 / 3.0 * (t_f + t_dx + t_dw))
    t = down + shard * CPU_ADAM_BYTES_PER_PARAM / cpu_bw + rec.weights * shard / A.host_link_bw
    gpu: Floats = 0.0
    if per_op_model(sc):
        per_param = ops.optimizer_bytes_per_param(rec.weights, rec.grads, rec.master, rec.moments)
        gpu = steptime.optimizer_time(shard, per_param, rates(sc, acc))
    acts = activation_offload_wait(sc, acc=acc, recompute=recompute, tp=tp, cp=cp, pp=pp, dp=dp, mb=mb, ep=ep,
                                   etp=etp, cap=cap, layer_times=(t_f, t_dx + t_dw))
    return np.where(offload == "cpu", t, gpu) + acts


def activation_offload_wait(sc: Scenario, *, acc: str, recompute: str, tp: ArrayLike, cp: ArrayLike = 1,
                            pp: ArrayLike, dp: ArrayLike, mb: ArrayLike, ep: ArrayLike = 1, etp: ArrayLike = 0,
                            cap: ArrayLike = 0.0, layer_times: tuple[Floats, Floats] | None = None) -> FloatArray:
    """Exposed activation offloading per step (``[memory] activation_offload_layers``, one pipeline stage):
    grad_accum x comm.activation_offload_exposed over the offloaded layers, one layer's stored activations
    each way on the card's host path B = min(host link, host memory bandwidth / cards sharing it) (a Grace
    CPU's LPDDR5X serves its two Blackwell GPUs), each copy hidden behind one layer's forward or backward
    (the micro-batch's, ``layer_times`` when the caller has them, spread over the stage's layers)."""
    n = sc.memory.activation_offload_layers
    shape = np.broadcast(_f(tp), _f(cp), _f(pp), _f(dp), _f(mb)).shape
    if n <= 0:
        return np.zeros(shape)
    A = sc.system(acc).acc
    if layer_times is None:
        t_f, t_dx, t_dw = microbatch_times(sc, acc=acc, recompute=recompute, schedule="1f1b", tp=tp, cp=cp, pp=pp,
                                           mb=mb, ep=ep, etp=etp, cap=cap)
        layer_times = (t_f, t_dx + t_dw)
    layers = float(sc.model.layers)
    bw = min(A.host_link_bw, A.host_memory_bw / A.cards_per_host) if A.host_memory_bw > 0 else A.host_link_bw
    moved = memory.offloaded_activation_layers(n, sc.model.layers, pp)  # every offloaded layer crosses twice
    exposed = comm.activation_offload_exposed(moved, _stored_per_layer(sc, recompute=recompute, tp=tp, cp=cp, mb=mb),
                                              bw, _f(layer_times[0]) / layers, _f(layer_times[1]) / layers)
    t: FloatArray = np.zeros(shape) + grad_accum(sc, dp, mb) * exposed
    return t


def ep_link(sc: Scenario, *, acc: str, recompute: str, tp: ArrayLike, cp: ArrayLike = 1, pp: ArrayLike, mb: ArrayLike,
            nics: ArrayLike, ep: ArrayLike = 1, etp: ArrayLike = 0, cap: ArrayLike = 0.0) -> FloatArray:
    """All-to-all time of one micro-batch on the stage with the most MoE blocks (moe.a2a_per_microbatch):
    dispatch and combine of one card's tokens on the EP group's links, stretched by the load factor.
    Which tiers the rows cross is network.route's decision for the group (ep members etp apart): inside
    one scale-up domain (a host, or a rack-scale NVLink domain) they stay on NVLink, otherwise the share
    bound for other domains leaves through the host's NICs (``[moe] dispatcher``: direct, per-host or
    all-gather, moe.a2a_rows_per_token). The per-operation model derates the links by the collective
    efficiencies (tp_efficiency on the scale-up tier, dp_efficiency beyond) and adds each exchange's
    fixed cost, the call latency and one per message (moe.a2a_latency). 0 for a dense model or EP = 1."""
    a = sc.model
    if not a.moe:
        return 0.0 * _f(tp) * _f(pp) * _f(mb) * _f(nics) * _f(ep) * _f(etp) * _f(cap)
    A = sc.system(acc).acc
    o = sc.moe
    rc = effective_recompute(sc, recompute)
    etp_size = moe.expert_tp_size(etp, tp)
    fabric = A.fabric
    if per_op_model(sc):
        p = _perf(sc, acc)
        fabric = fabric.derated(p.tp_efficiency, p.dp_efficiency)
    domains = moe.ep_domains(ep, etp_size, fabric.scale_up.cards)
    dispatcher = o.dispatcher_on(acc)
    intra, inter = moe.a2a_rows_per_token(a.top_k, ep, domains, dispatcher,
                                          node_limit(sc, ep, etp_size, fabric.scale_up.cards))
    tokens, e = card_tokens(sc, tp, mb, cp), sc.memory.activation_bytes
    if dispatcher == "all-gather":  # a ring of ep members etp apart, the etp rings of a host sharing its NICs
        ring = network.route(fabric, ep, etp_size, etp_size, nics)
        one = moe.allgather_dispatch_time(tokens, a.hidden, e, intra + inter, ring.bandwidth)
    else:
        path = network.route(fabric, ep, etp_size, A.cards_per_host, nics)
        one = moe.a2a_time(tokens, a.hidden, e, intra, inter, load_factor(sc, ep, cap), path, A.p2p)
    if per_op_model(sc):
        p = _perf(sc, acc)
        step = np.where(domains > 1, p.out_step_latency, p.up_step_latency)
        one = one + moe.a2a_latency(ep, domains, dispatcher, p.collective_latency, step)
    one = np.where(_f(ep) > 1, one, 0.0)
    blocks = _moe_stages(sc, 1.0, pp, lambda d, xl, xb, n: n)
    per_mb: FloatArray = moe.a2a_per_microbatch(one, blocks, rc == "full")
    return per_mb


def node_limit(sc: Scenario, ep: ArrayLike, etp_size: ArrayLike, domain_cards: float) -> FloatArray:
    """Domains one token's experts may span (0: any): the smaller of ``[moe] node_limit`` and the model's
    group-limited routing (moe.routed_domain_limit), where either is set."""
    model = moe.routed_domain_limit(sc.model, ep, etp_size, domain_cards)
    stated = float(sc.moe.node_limit)
    both = np.where(model > 0, np.minimum(model, stated), stated)
    return np.where(stated > 0, both, model)


def comm_sm_share(sc: Scenario, acc: str) -> float:
    """Share of an overlapped exchange's time the compute beside it still loses (the SMs and HBM the
    communication kernels hold): the performance catalog's overlap_contention in the per-operation
    model; 0 in the flat model (the chapter's accounting hides an overlapped exchange completely)."""
    return _perf(sc, acc).overlap_contention if per_op_model(sc) else 0.0


def ep_comm(sc: Scenario, *, acc: str, recompute: str, schedule: str, tp: ArrayLike, cp: ArrayLike = 1, pp: ArrayLike,
            dp: ArrayLike, mb: ArrayLike, nics: ArrayLike, ep: ArrayLike = 1, etp: ArrayLike = 0,
            cap: ArrayLike = 0.0) -> FloatArray:
    """Exposed all-to-all per step (moe.a2a_exposed): every micro-batch's exchanges, or with overlap
    (``[moe] a2a_overlap``: all = Megatron-Core's EP overlap on any schedule, auto = DualPipe schedules)
    the unpaired warm-up and cool-down chunks whole (moe.a2a_unpaired_share), and of each paired chunk
    what exceeds one micro-batch's compute plus the compute slowed by the SMs and HBM the exchange holds
    (:func:`comm_sm_share`). The exchanges extend each micro-batch on the critical path; how they
    stretch pipeline bubbles is not modelled (as the flat model's tensor-parallel time)."""
    per_mb = ep_link(sc, acc=acc, recompute=recompute, tp=tp, cp=cp, pp=pp, mb=mb, nics=nics, ep=ep, etp=etp, cap=cap)
    if not sc.model.moe:
        return per_mb * _f(dp) * _f(cp)  # zeros of the right shape
    t_f, t_dx, t_dw = microbatch_times(sc, acc=acc, recompute=recompute, schedule=schedule, tp=tp, cp=cp, pp=pp,
                                       mb=mb, ep=ep, etp=etp, cap=cap)
    ga = grad_accum(sc, dp, mb)
    base, v = schedule_parts(schedule)
    unpaired = moe.a2a_unpaired_share(base, v, pp, np.ceil(ga - 1e-9))
    exposed: FloatArray = moe.a2a_exposed(per_mb, t_f + t_dx + t_dw, ga,
                                          moe.a2a_overlapped(sc.moe.a2a_overlap, schedule), unpaired,
                                          comm_sm_share(sc, acc))
    return exposed


def capacity_drops(sc: Scenario, *, tp: ArrayLike, cp: ArrayLike = 1, mb: ArrayLike, cap: ArrayLike) -> Floats:
    """Share of dispatches a capacity factor drops for one card's micro-batch (moe.routing_drops)."""
    a, o = sc.model, sc.moe
    if not a.moe:
        return 0.0 * _f(tp) * _f(mb) * _f(cap) * _f(cp)
    drops: Floats = moe.routing_drops(card_tokens(sc, tp, mb, cp), a.top_k, a.experts, cap, o.imbalance, o.hot)[0]
    return drops


def ep_group_ok(sc: Scenario, *, acc: str, tp: ArrayLike, cp: ArrayLike = 1, dp: ArrayLike, ep: ArrayLike,
                etp: ArrayLike) -> NDArray[np.bool_]:
    """1 where EP x expert-TP fits the tp x dp (x cp) group (moe.ep_group_ok)."""
    ok: NDArray[np.bool_] = moe.ep_group_ok(sc.model, tp, zero_ranks(dp, cp), ep, etp,
                                            sc.system(acc).acc.cards_per_host)
    return ok
