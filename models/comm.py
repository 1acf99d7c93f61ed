"""Communication: collective volumes per card, link bandwidth on the real path, exposure under
overlap. Volumes are bytes sent (= received) per card per direction; bandwidths are per direction.

Layout convention: TP ranks are the innermost (adjacent cards of one host), then DP, then PP, so a
DP ring of d members with stride tp stays inside one scale-up domain iff d x tp <= its cards; which
tiers a group crosses is decided in one place, :func:`tpopt.models.network.route`.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from tpopt.models.network import Fabric, route
from tpopt.models.numeric import FloatArray, Floats


def _f(x: ArrayLike) -> FloatArray:
    """``x`` as an array of floats."""
    return np.asarray(x, dtype=float)

# ---------------------------------------------------------------------------------------------
# collective volumes (ring algorithms)


def allgather_bytes(size: ArrayLike, n: ArrayLike) -> FloatArray:
    """Ring AllGather / ReduceScatter: each rank sends (n - 1)/n x size."""
    n = np.asarray(n, dtype=float)
    sent: FloatArray = (n - 1.0) / n * np.asarray(size, dtype=float)
    return sent


def allreduce_bytes(size: ArrayLike, n: ArrayLike) -> FloatArray:
    """Ring AllReduce = ReduceScatter + AllGather: each rank sends 2 (n - 1)/n x size."""
    return 2.0 * allgather_bytes(size, n)


def ring_allreduce_time(size: ArrayLike, n: ArrayLike, bandwidth: Floats, latency: Floats = 0.0,
                        buckets: Floats = 1) -> FloatArray:
    """Time of a ring AllReduce split into equal buckets: buckets x (2(n-1)/n x size/buckets / B + latency).

    Chapter 10.3.4: 72 MiB over 4 ranks at 25 GB/s with 0.02 ms per call: 4.55 ms in one bucket,
    three 24 MiB buckets 1.53 ms each (4.59 ms in total); at 400 Gbit/s 2.28 ms.
    """
    per = allreduce_bytes(np.asarray(size, dtype=float) / buckets, n) / bandwidth + latency
    return buckets * per


def zero_dp_volume(zero_stage: ArrayLike, n_shard: ArrayLike, dp: ArrayLike, micro_batches: ArrayLike,
                   weight_bytes: float = 2.0, grad_bytes: float = 2.0) -> FloatArray:
    """Data-parallel bytes per card per step, by ZeRO stage, for a model shard of n_shard params.

    ZeRO-0: one AllReduce of the gradients per step            2 (d-1)/d g N
    ZeRO-1: ReduceScatter of gradients + AllGather of weights   (d-1)/d (g + w) N
    ZeRO-2: ReduceScatter after every micro-batch + AllGather   (d-1)/d (m g + w) N
    ZeRO-3: per micro-batch AllGather before forward and before backward and ReduceScatter after
            (chapter 10.3.3): V = 3 m (d-1)/d x 2N for BF16 weights and gradients
            -> 385 GB for Qwen3-8B on 48 cards (m = 8), 571 GB on 32 cards (m = 12).
    """
    z = np.asarray(zero_stage)
    m = np.asarray(micro_batches, dtype=float)
    base = allgather_bytes(n_shard, dp)  # (d-1)/d N
    v0 = 2.0 * grad_bytes * base
    v1 = (grad_bytes + weight_bytes) * base
    v2 = (m * grad_bytes + weight_bytes) * base
    v3 = m * (2.0 * weight_bytes + grad_bytes) * base
    return np.select([z == 0, z == 1, z == 2], [v0, v1, v2], v3)


def zero_dp_unhidden_bytes(zero_stage: ArrayLike, emb_shard: ArrayLike, dp: ArrayLike, weight_bytes: float = 2.0,
                           grad_bytes: float = 2.0) -> FloatArray:
    """Bytes that no prefetch can hide: the first gather and the last reduction of a step.

    Both act on the input embedding, the first unit of the forward and the last gradient of the
    backward (chapter 10.3.3, after MegaScale):
    ZeRO-3: AllGather + ReduceScatter of the embedding, 2 x (d-1)/d x 2 x V h (1.24 GB for Qwen3-8B)
            -> 0.08 s at 32 GB/s; ZeRO-1/2: the same pair (gradient reduction, weight gather);
    ZeRO-0: the embedding-gradient AllReduce, 2 (d-1)/d x g x V h.
    """
    z = np.asarray(zero_stage)
    base = allgather_bytes(emb_shard, dp)
    return np.where(z == 0, 2.0 * grad_bytes * base, (weight_bytes + grad_bytes) * base)


def tp_volume(tokens_per_microbatch: ArrayLike, hidden: Floats, tp: ArrayLike, layers: Floats,
              micro_batches: ArrayLike, act_bytes: float = 2.0, recompute_full: bool = False) -> FloatArray:
    """Tensor-parallel bytes per card per step (Megatron with sequence parallelism).

    Each block does two AllGather + ReduceScatter pairs forward and two backward on the
    s x b x h activation, each pair moving 2 (t-1)/t x s b h x bytes: 4 pairs per block per
    micro-batch, 6 when the block is recomputed in full.
    """
    pairs = 6.0 if recompute_full else 4.0
    size = np.asarray(tokens_per_microbatch, dtype=float) * hidden * act_bytes
    volume: FloatArray = pairs * allreduce_bytes(size, tp) * layers * np.asarray(micro_batches, dtype=float)
    return volume


def pp_boundary_bytes(tokens_per_microbatch: ArrayLike, hidden: Floats, tp: ArrayLike,
                      act_bytes: float = 2.0) -> FloatArray:
    """Activation (forward) or gradient (backward) crossing one stage boundary: s b h x bytes / tp."""
    boundary: FloatArray = (np.asarray(tokens_per_microbatch, dtype=float) * hidden * act_bytes
                            / np.asarray(tp, dtype=float))
    return boundary


# ---------------------------------------------------------------------------------------------
# bandwidth on the real path


def dp_ring_bandwidth(fabric: Fabric, tp: ArrayLike, dp: ArrayLike, nics: ArrayLike) -> FloatArray:
    """Per-card bandwidth of a DP ring (bytes/s per direction): dp members tp apart, the tp rings of a
    host sharing its ``nics`` NICs (network.route).

    Inside one scale-up domain the ring runs at the card's scale-up bandwidth (NVLink, or PCIe
    through host memory when the card has no P2P). A ring that spans hosts crosses each host boundary
    once per direction; with k NICs per host and tp rings leaving each host the boundary carries each
    card's whole volume at k x B_nic / tp, so

        B = B_up                                  if dp x tp <= cards in the domain
        B = min(B_up, k x B_nic / tp)             otherwise.

    RTX 4090 (PCIe 4.0 x16 = 32 GB/s, 8 x 200 Gbit/s NICs per host): 32 GB/s; with one shared
    200 Gbit/s NIC per host: 25 GB/s (chapter 10.6.2: 12.0 s -> 15.4 s).
    """
    return route(fabric, dp, tp, tp, nics).bandwidth


def pp_link_bandwidth(fabric: Fabric, pp: ArrayLike, stride: ArrayLike, nics: ArrayLike) -> FloatArray:
    """Per-card bandwidth of a pipeline boundary transfer (bytes/s per direction): pp stages ``stride``
    cards apart (tp cp dp), each a direct send through the host link (network.route).

    A job inside one scale-up domain sends boundary tensors card to card. A job that spans hosts has
    at least one boundary that crosses hosts, where all cards of a host send at once through its k
    NICs; the slowest boundary paces the pipeline (conservative):
        B = B_up                                       if cards <= cards in the domain
        B = min(host_link_bw, k x B_nic / cards_per_host)   otherwise.
    """
    return route(fabric, pp, stride, fabric.cards_per_host, nics, direct=True).bandwidth


# ---------------------------------------------------------------------------------------------
# exposure


def exposed_time(unhidden: ArrayLike, per_window_link: Floats, per_window_compute: Floats, windows: ArrayLike,
                 overlap: ArrayLike = True) -> FloatArray:
    """Communication time that extends the step.

    With overlap (prefetch and immediate reduction) only the unhidable bytes' time shows, plus,
    in every compute window whose link time exceeds its compute, the excess:
        exposed = t_unhidden + windows x max(0, t_link_window - t_compute_window).
    Without overlap every byte is on the critical path: exposed = windows x t_link_window.
    Chapter 10.3.3: 48 cards, 1.50 s of link per micro-batch against 6.53 s of compute -> only the
    embedding pair, 0.08 s, is exposed; if prefetch fails the whole 12.0 s (15.4 s) shows.
    """
    w = np.asarray(windows, dtype=float)
    excess = np.subtract(per_window_link, per_window_compute)  # this function's own array from here
    shape = np.broadcast_shapes(np.shape(unhidden), w.shape, excess.shape)
    if np.ndim(overlap) == 0 and bool(overlap) and excess.shape == shape and excess.ndim and \
            excess.dtype == np.float64 and np.asarray(unhidden).dtype == np.float64:
        # the common call (overlap on, on a grid): the same operations in place, one temporary instead of five
        np.maximum(0.0, excess, out=excess)
        np.multiply(w, excess, out=excess)
        hidden_in: FloatArray = np.add(np.asarray(unhidden, dtype=float), excess, out=excess)
        return hidden_in
    hidden = np.asarray(unhidden, dtype=float) + w * np.maximum(0.0, excess)
    return np.where(overlap, hidden, w * per_window_link)


def shared_link_time(link: ArrayLike, other: ArrayLike, span: ArrayLike) -> FloatArray:
    """Time a transfer of ``link`` seconds (alone on the link) takes when other traffic holds the link
    for ``other`` seconds spread evenly over a compute span of ``span`` seconds (share u = other / span)
    and nothing holds it afterwards:

        t = L / (1 - u)      if that ends within the span     (it shares the link all along)
        t = L + other        otherwise                         (delayed by all the other traffic)

    i.e. t = min(L / (1 - u), L + other) (the first term infinite for u >= 1). The other traffic delays
    the transfer by at most its own link time, so a longer span of pure compute (recompute, slower
    kernels) never makes the transfer slower. 10 s of DP traffic against 8 s of TP traffic over 20 s
    of compute: min(16.7, 18) = 16.7 s; over 10 s of compute: min(50, 18) = 18 s.
    """
    L = np.asarray(link, dtype=float)
    o = np.asarray(other, dtype=float)
    shape = np.broadcast_shapes(L.shape, o.shape, np.shape(span))
    if len(shape):  # on a grid: the same operations, in place on two arrays of the full shape (bit for bit)
        u = np.divide(o, np.maximum(np.asarray(span, dtype=float), 1e-300), out=np.empty(shape))
        above = np.logical_not(u < 1.0)  # NaN included
        np.subtract(1.0, u, out=u)
        np.maximum(u, 1e-300, out=u)
        with np.errstate(divide="ignore"):
            np.divide(L, u, out=u)
        np.copyto(u, np.inf, where=above)
        t_in: FloatArray = np.minimum(u, np.add(L, o, out=np.empty(shape)), out=u)
        return t_in
    u = o / np.maximum(np.asarray(span, dtype=float), 1e-300)
    with np.errstate(divide="ignore"):
        shared = np.where(u < 1.0, L / np.maximum(1.0 - u, 1e-300), np.inf)
    t: FloatArray = np.minimum(shared, L + o)
    return t


def link_busy_exposure(ready: Floats, duration: Floats, link_free: Floats, compute_end: Floats) -> FloatArray:
    """Exposure of one transfer that must wait for its data and for a busy link.

    It starts at max(ready, link_free) and extends the step by whatever runs past compute_end.
    Chapter 10.3.3: 3 ms reduce ready at 0, 5 ms of independent compute, link busy until 4 ms
    -> runs 4-7 ms, 2 ms exposed.
    """
    return np.maximum(0.0, np.maximum(ready, link_free) + duration - compute_end)


def offload_wait(volume: ArrayLike, bandwidth: Floats, window: Floats) -> FloatArray:
    """Wait for an offload transfer: T_wait = max(0, V/B - W) (chapter 10.2.3)."""
    return np.maximum(0.0, np.asarray(volume, dtype=float) / bandwidth - window)


def cast_path_times(grad_bytes_bf16: ArrayLike, link_bw: Floats, cpu_bw: Floats,
                    gpu_bw: Floats) -> tuple[FloatArray, FloatArray]:
    """Moving a BF16 gradient G to a CPU optimizer as FP32 (chapter 10.2.3).

    CPU cast: T_c = G/B + 3G/C_cpu (send BF16, read G and write 2G on the CPU);
    GPU cast: T_g = 3G/C_gpu + 2G/B (cast on the GPU, send FP32).
    Returns (T_c, T_g). PCIe 4.0 (32 GB/s), G = 96 MiB: 4.13 vs 6.59 ms.
    """
    g = np.asarray(grad_bytes_bf16, dtype=float)
    return g / link_bw + 3 * g / cpu_bw, 3 * g / gpu_bw + 2 * g / link_bw


def cast_break_even_bandwidth(cpu_bw: Floats, gpu_bw: Floats) -> Floats:
    """Link bandwidth above which casting on the GPU wins: B* = 1 / (3 (1/C_cpu - 1/C_gpu)) (147 GB/s)."""
    return 1.0 / (3.0 * (1.0 / cpu_bw - 1.0 / gpu_bw))


def dp_bucket_bytes(bucket_bytes: float, per_rank: float, ranks: ArrayLike) -> FloatArray:
    """A stack's gradient bucket at ``ranks`` data-parallel ranks: max(bucket, per_rank x ranks), 0 (one call per
    sharded unit) when the stack has no bucket. Megatron-Core sizes it max(40M, 1M x dp) elements so that the
    chunks of a large ring stay bandwidth-bound (Megatron-LM get_model): 40 MB up to 40 ranks, 336 MB at 336."""
    grown: FloatArray = np.maximum(bucket_bytes, per_rank * _f(ranks))
    return grown if bucket_bytes > 0 else 0.0 * grown


def dp_collective_calls(zero_stage: ArrayLike, n_shard: ArrayLike, layers: ArrayLike, micro_batches: ArrayLike,
                        bucket_bytes: ArrayLike, weight_bytes: float = 2.0, grad_bytes: float = 2.0) -> FloatArray:
    """Data-parallel collective calls per card per step, each paying a collective's latency.

    ZeRO-3 / FSDP gathers every layer's weights before its forward and again before its backward and
    reduce-scatters its gradients after: 3 L calls per micro-batch. ZeRO-0/1/2 reduce gradients in
    buckets of ``bucket_bytes`` (Megatron-Core's DDP buckets, :func:`dp_bucket_bytes`; one call per sharded unit
    when 0), once per step (ZeRO-2: every micro-batch), and ZeRO-1/2 gather the updated weights once per step:
        calls = ceil(N g / bucket) (x m for ZeRO-2) [+ ceil(N w / bucket) for ZeRO >= 1].
    """
    z = np.asarray(zero_stage)
    n = np.asarray(n_shard, dtype=float)
    m = np.asarray(micro_batches, dtype=float)
    unit = np.asarray(layers, dtype=float)
    b = _f(bucket_bytes)
    safe = np.where(b > 0, b, 1.0)
    grads = np.where(b > 0, np.ceil(n * grad_bytes / safe), unit)
    gathers = np.where(b > 0, np.ceil(n * weight_bytes / safe), unit)
    calls: FloatArray = np.select([z == 0, z == 1, z == 2], [grads, grads + gathers, m * grads + gathers],
                                  3.0 * m * unit)
    return calls


def dp_call_bytes(zero_stage: ArrayLike, n_shard: ArrayLike, layers: ArrayLike, dp: ArrayLike,
                  bucket_bytes: ArrayLike, weight_bytes: float = 2.0, grad_bytes: float = 2.0) -> FloatArray:
    """Bytes one rank sends in one data-parallel call (what NCCL's choice of algorithm weighs): a bucket's
    all-reduce 2 (d-1)/d x B (ZeRO-0), its reduce-scatter or all-gather (d-1)/d x B (ZeRO-1/2), a layer's
    gather (d-1)/d x w N / L (ZeRO-3 / FSDP, or a stack without buckets: B = the layer's gradients)."""
    z = np.asarray(zero_stage)
    n = _f(n_shard)
    unit = n / np.maximum(_f(layers), 1.0)
    b = _f(bucket_bytes)
    size = np.where(z >= 3, unit * weight_bytes, np.where(b > 0, np.minimum(b, n * grad_bytes), unit * grad_bytes))
    sent: FloatArray = np.where(z == 0, 2.0, 1.0) * allgather_bytes(size, dp)
    return sent


def dp_tail_bytes(zero_stage: ArrayLike, n_shard: ArrayLike, layers: ArrayLike, dp: ArrayLike, bucket_bytes: ArrayLike,
                  weight_bytes: float = 2.0, grad_bytes: float = 2.0) -> tuple[FloatArray, FloatArray]:
    """(bytes per card, calls) of a step's data-parallel collectives that nothing can hide beyond the
    embedding pair: the first unit gathered before the forward can start and the last reduced after the
    backward has ended. A unit is one layer (ZeRO-3 / FSDP, or a stack without buckets) or one bucket:
        ZeRO-3:   (d-1)/d (w + g) N / L                       2 calls
        ZeRO-1/2: (d-1)/d (min(B, g N) + min(B, w N))         2 calls (last gradient bucket, first weight bucket)
        ZeRO-0:   2 (d-1)/d min(B, g N)                        1 call  (the last bucket's all-reduce)
    with B the bucket (N g / L without one). Llama 3 8B layer (218 M parameters) at d = 128: 0.87 GB."""
    z = np.asarray(zero_stage)
    n = np.asarray(n_shard, dtype=float)
    unit = n / np.maximum(np.asarray(layers, dtype=float), 1.0)
    b = _f(bucket_bytes)
    gb = np.where(b > 0, np.minimum(b, n * grad_bytes), unit * grad_bytes)
    wb = np.where(b > 0, np.minimum(b, n * weight_bytes), unit * weight_bytes)
    share = allgather_bytes(1.0, dp)
    size: FloatArray = share * np.select([z == 0, z >= 3], [2.0 * gb, unit * (weight_bytes + grad_bytes)], gb + wb)
    calls: FloatArray = np.where(z == 0, 1.0, 2.0) + 0.0 * size
    return size, calls


def activation_offload_exposed(offloaded_layers: ArrayLike, layer_bytes: ArrayLike, bandwidth: Floats,
                               t_forward_layer: ArrayLike, t_backward_layer: ArrayLike) -> FloatArray:
    """Exposed time of activation offloading per micro-batch: each offloaded layer's stored activations V go
    to the host while the next layer's forward runs and come back while the layer above runs its backward
    (Transformer Engine's CPU offload: copies on a side stream, one layer ahead), so each direction shows
    only what the neighbouring layer's compute does not hide:

        T = N (max(0, V / B - t_f) + max(0, V / B - t_b))

    with B the card's host path per direction (bytes/s), t_f / t_b one layer's forward / backward."""
    v = np.asarray(layer_bytes, dtype=float) / bandwidth
    n = np.asarray(offloaded_layers, dtype=float)
    t: FloatArray = n * (np.maximum(0.0, v - np.asarray(t_forward_layer, dtype=float))
                         + np.maximum(0.0, v - np.asarray(t_backward_layer, dtype=float)))
    return t
