"""Context parallelism (CP): one sequence split over cp cards, attention across the pieces.

Layout (Megatron-Core's rank order tp-cp-dp-pp): cards = tp x cp x pp x dp; the cp ranks of a group are
tp apart, so a CP group stays inside one host iff tp x cp <= cards per host. CP ranks hold the same
weights and see different tokens of the same sequences, so gradients are reduced (and ZeRO shards
spread) over the dp x cp ranks. Every per-token quantity of a card (activations, logits, pipeline
boundary tensors, GEMM work) divides by cp; attention needs the other pieces' keys and values:

* **ring** (Ring Attention, Liu et al. "Ring Attention with Blockwise Transformers for Near-Infinite
  Context"; Megatron-Core / Transformer Engine's default): in cp - 1 steps each card passes the K, V
  block it holds to the next card while it computes blockwise attention of its queries against the
  block it has; the backward passes K, V and the accumulating dK, dV. A step's transfer hides behind
  that step's attention: exposed = (cp - 1) max(0, t_transfer - t_attention / cp) per pass.
* **all-to-all** (DeepSpeed-Ulysses, Jacobs et al. "DeepSpeed Ulysses: System Optimizations for
  Enabling Training of Extreme Long Sequence Transformer Models"): an all-to-all turns the
  sequence-split q, k, v into head-split ones over the whole sequence, attention runs on heads / cp
  heads, and one more all-to-all brings the output back; it needs heads % (tp cp) = 0, and the
  collectives sit on the critical path.

Causal load balance: split into cp contiguous pieces, the last piece's queries see every key and the
busiest card does (2 cp - 1) / cp^2 of the attention work instead of 1 / cp. The zig-zag split
(2 cp chunks; card r holds chunks r and 2 cp - 1 - r, as Megatron-Core and Llama 3 do) gives every
card the same work: chunk j costs j + 1/2 blocks, and (r + 1/2) + (2 cp - 1 - r + 1/2) = 2 cp of the
2 cp^2 blocks in all.

Sizes are bytes per card for one micro-batch of b sequences of s tokens in one layer.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from numpy.typing import ArrayLike, NDArray

from tpopt.errors import InputError
from tpopt.models.arch import ModelArch
from tpopt.models.network import Fabric, route
from tpopt.models.numeric import FloatArray, Floats

METHODS = ("ring", "all-to-all")
CP_RINGS = ("p2p", "allgather")
"""How a stack's ring passes K and V (catalogs/stacks.toml ``cp_ring``). p2p: Transformer Engine's
AttnFuncWithCPAndKVP2P, one block sent to the next card per step behind that step's attention, dK and dV in the
activations' precision (:func:`ring_exposed`). allgather: torch.distributed.tensor.experimental context_parallel
(_attention.py: _ContextParallelOptions.rotate_method = ALL_GATHER, convert_to_f32 = True): _AllGatherRotater
gathers every card's K, V once at the first step, in the forward and again in the backward
(:func:`gathered_ring_exposed`); the backward passes the FP32 dK, dV accumulators to the next card step by step
(dkv_rotater, ALL_TO_ALL: a permute), 4 bytes an element."""
CP_MERGES = ("fused", "unfused")
"""How a stack runs torch's ring bookkeeping (catalogs/stacks.toml ``cp_merge``; read where ``cp_ring`` is allgather):
fused, by the compiler (torchtitan's torch.compile of each block traces the ring, Inductor fuses its pointwise ops:
each step's merge reads its operands once and writes its result once), or unfused, eagerly, every op of
_SDPAMerger and of the backward's accumulation a pass of its own over HBM (models.terms.layer_times.ring_merge_bytes).
"""
SPLITS = ("zigzag", "contiguous")


def _f(x: ArrayLike) -> FloatArray:
    """``x`` as an array of floats."""
    return np.asarray(x, dtype=float)


def attention_share(cp: ArrayLike, split: str = "zigzag") -> FloatArray:
    """The busiest card's share of a causal attention's work: 1 / cp (zig-zag), (2 cp - 1) / cp^2
    (contiguous pieces): cp = 4 -> 0.25 vs 0.4375."""
    c = _f(cp)
    if split == "zigzag":
        return 1.0 / c
    return (2.0 * c - 1.0) / (c * c)


def imbalance(cp: ArrayLike, split: str = "zigzag") -> FloatArray:
    """Busiest card's attention work over the balanced share: 1 (zig-zag), (2 cp - 1) / cp (contiguous)."""
    return attention_share(cp, split) * _f(cp)


def ring_step_cost(cp: ArrayLike, efficiency: ArrayLike = 1.0) -> FloatArray:
    """The busiest card's ring attention time over its modelled time when the cp - 1 later ring steps' calls
    (the non-diagonal blocks, (cp - 1) / cp of a zig-zag card's attention work) reach a share e of their modelled
    speed and the first, diagonal step its own:
        r = (1 + (cp - 1) / e) / cp.
    cp = 4, e = 0.75: (1 + 4) / 4 = 1.25; cp = 1 or e = 1: 1."""
    c = _f(cp)
    out: FloatArray = (1.0 + (c - 1.0) / _f(efficiency)) / c
    return out


def ring_kv_arch(a: ModelArch, repeated: bool) -> ModelArch:
    """The model as the stack's attention call sees K and V: ``repeated`` (the stack's ``kv_repeat``: torchtitan's
    Llama repeats K, V to the query heads before F.scaled_dot_product_attention) gives kv_heads = heads, so the
    ring's blocks, dK, dV and buffers are d_attn wide: 4x the K, V bytes of Llama 3 8B (32 query, 8 KV heads),
    16x of Llama 3.1 405B (128, 8). Unchanged otherwise (grouped-query attention passes the KV heads)."""
    return replace(a, kv_heads=a.heads) if repeated and a.kv_heads != a.heads else a


def kv_block_bytes(a: ModelArch, seq_len: Floats, micro_batch: ArrayLike, tp: ArrayLike, cp: ArrayLike,
                   act_bytes: float = 2.0) -> FloatArray:
    """K and V of one card's piece: 2 (b s / cp) (d_kv / tp) x bytes (the block a ring step passes on).
    Llama-3-8B (8 KV heads of 128), s = 128K, tp = 8, cp = 16, BF16: 2 x 8192 x 128 x 2 B = 4 MiB."""
    return 2.0 * _f(micro_batch) * seq_len / _f(cp) * a.d_kv / _f(tp) * act_bytes


def ring_transfer_bytes(a: ModelArch, seq_len: Floats, micro_batch: ArrayLike, tp: ArrayLike, cp: ArrayLike,
                        act_bytes: float = 2.0, grad_bytes: float | None = None) -> tuple[FloatArray, FloatArray]:
    """(forward, backward) bytes one card sends per layer and micro-batch in ring attention:
    (cp - 1) K, V blocks forward; (cp - 1) K, V blocks and as many dK, dV blocks backward, the dK, dV blocks at
    ``grad_bytes`` per element (default ``act_bytes``; 4 where the ring accumulates them in FP32, torch's
    context_parallel: :data:`CP_RINGS`)."""
    blk = kv_block_bytes(a, seq_len, micro_batch, tp, cp, act_bytes)
    steps = _f(cp) - 1.0
    grad = act_bytes if grad_bytes is None else grad_bytes
    return steps * blk, steps * blk * (1.0 + grad / act_bytes)


def ring_exposed(transfer_bytes: ArrayLike, bandwidth: Floats, attention_s: ArrayLike, cp: ArrayLike,
                 step_latency: Floats = 0.0, contention: float = 0.0) -> FloatArray:
    """Ring attention's exposed transfer for one pass over the cp - 1 steps: each step's transfer
    (transfer_bytes / (cp - 1) at ``bandwidth``, plus the send's ``step_latency``) runs beside that step's share
    of the attention (attention_s / cp):
        exposed = (cp - 1) [max(0, t_step - a / cp) + kappa min(t_step, a / cp)],
    kappa = ``contention``, the share of the hidden transfer's time the attention still loses to the SMs and
    HBM traffic of the send and receive kernels (the performance catalog's overlap_contention); 0 when cp = 1.
    Llama 2 7B, TP 8 x CP 32 on DGX H100, 1M tokens: a 64 MiB block a step at 45 GB/s (1.5 ms) beside 1.7 ms
    of attention: hidden, and kappa = 0.2 of it, 0.3 ms a step, shows."""
    c = _f(cp)
    steps = np.maximum(c - 1.0, 0.0)
    per_step = np.where(steps > 0, _f(transfer_bytes) / np.maximum(steps, 1.0) / bandwidth + step_latency, 0.0)
    share = _f(attention_s) / c
    exposed: FloatArray = steps * (np.maximum(0.0, per_step - share) + contention * np.minimum(per_step, share))
    return exposed


def gathered_ring_exposed(gather_bytes: ArrayLike, bandwidth: Floats, attention_s: ArrayLike, cp: ArrayLike,
                          step_latency: Floats = 0.0, contention: float = 0.0) -> FloatArray:
    """Exposed K, V exchange of one pass when the ring gathers every card's block at once (torch's
    context_parallel, rotate method all-gather: :data:`CP_RINGS`): the all-gather of the other cp - 1 blocks,
    ``gather_bytes`` at ``bandwidth`` over cp - 1 ring hops of ``step_latency``, is issued at the first step
    and waited before the second, so only the first step's attention (attention_s / cp) hides it:
        exposed = max(0, t_g - a / cp) + kappa min(t_g, a / cp),  t_g = bytes / B + (cp - 1) latency;
    kappa = ``contention`` as in :func:`ring_exposed`; 0 when cp = 1. The same transfer sent step by step
    (:func:`ring_exposed`) hides behind cp - 1 steps' attention instead of one: Llama 3 8B, CP 8 at 256K tokens,
    a 128 MiB block, 940 MB gathered at 370 GB/s (2.5 ms) beside a 25 ms first step: hidden either way."""
    c = _f(cp)
    t = np.where(c > 1.0, _f(gather_bytes) / bandwidth + np.maximum(c - 1.0, 0.0) * step_latency, 0.0)
    share = _f(attention_s) / c
    exposed: FloatArray = np.maximum(0.0, t - share) + contention * np.minimum(t, share)
    return exposed


def kv_replication(a: ModelArch, tp: ArrayLike, cp: ArrayLike) -> FloatArray:
    """All-to-all with fewer KV heads per TP rank than cp ranks: KV heads are replicated so every card
    gets one: factor max(1, cp / (kv_heads / tp))."""
    return np.maximum(1.0, _f(cp) / np.maximum(a.kv_heads / _f(tp), 1.0))


def alltoall_bytes(a: ModelArch, seq_len: Floats, micro_batch: ArrayLike, tp: ArrayLike, cp: ArrayLike,
                   act_bytes: float = 2.0) -> FloatArray:
    """Bytes one card sends per layer and micro-batch in Ulysses attention, forward = backward:
    the all-to-all of q, k, v to head-split form and of the output back, each card keeping 1 / cp:
    (cp - 1) / cp x (b s / cp) x (2 d_attn + 2 d_kv r) / tp x bytes, r = :func:`kv_replication`."""
    c = _f(cp)
    width = (2.0 * a.d_attn + 2.0 * a.d_kv * kv_replication(a, tp, cp)) / _f(tp)
    return (c - 1.0) / c * _f(micro_batch) * seq_len / c * width * act_bytes


def heads_ok(a: ModelArch, tp: ArrayLike, cp: ArrayLike, method: str = "ring") -> NDArray[np.bool_]:
    """The head rule: tp divides the query and KV heads; all-to-all also needs heads % (tp cp) = 0."""
    t, c = np.asarray(tp), np.asarray(cp)
    ok: NDArray[np.bool_] = (a.heads % t == 0) & (a.kv_heads % t == 0)
    if method == "all-to-all":
        ok = ok & (a.heads % (t * c) == 0)
    return ok


def buffer_bytes(a: ModelArch, seq_len: Floats, micro_batch: ArrayLike, tp: ArrayLike, cp: ArrayLike,
                 method: str = "ring", act_bytes: float = 2.0, ring: str = "p2p") -> FloatArray:
    """Communication buffers live during a layer's attention: the larger of the forward's and the backward's live
    sets (0 when cp = 1). ``a`` is the model as the attention call sees K and V (:func:`ring_kv_arch`: at the query
    heads under the stack's ``kv_repeat``), B = :func:`kv_block_bytes` one card's K, V block.

    The two passes of one layer never overlap (a layer's backward starts after the loss, its forward's buffers are
    freed when its output is made), so the peak is max(forward, backward), not their sum. Ring, ``ring`` = p2p
    (Transformer Engine's AttnFuncWithCPAndKVP2P, :data:`CP_RINGS`): forward, the block in use and the one arriving,
    2 B; backward, the same 2 B plus the dK, dV being accumulated and the ones arriving in FP32, 2 x B x 4 / act:
    the backward's set. Ring = allgather (torch's context_parallel, _attention.py
    _templated_ring_attention / _templated_ring_attention_backward): forward, _AllGatherRotater's gathered K, V of
    the cp cards and the torch.cat copy of the card's own that it gathers from, (cp + 1) B; backward, kv_rotater
    gathers K, V again ((cp + 1) B; the forward's buffer was freed with the forward) and dkv_rotater passes the
    FP32 dK, dV (convert_to_f32): the accumulator, the cat copy sent and the permute's output arriving,
    3 x B x 4 / act: the backward's set again, (cp + 7) B in BF16. Llama 3 8B, CP 8 at 256K tokens: 1.9 GiB at the
    KV heads (128 MiB blocks), 7.5 GiB at the query heads torchtitan passes (512 MiB). All-to-all: the head-split
    q, k, v, o of the whole sequence, received and sent: 2 x (b s)(2 d_attn + 2 d_kv r) / (tp cp) x bytes.
    """
    c = _f(cp)
    if method == "ring":
        blk = kv_block_bytes(a, seq_len, micro_batch, tp, cp, act_bytes)
        grads = blk * 4.0 / act_bytes  # one block's dK, dV in FP32
        kv = 2.0 * blk if ring == "p2p" else (c + 1.0) * blk
        forward, backward = kv, kv + (2.0 if ring == "p2p" else 3.0) * grads
        out = np.maximum(forward, backward)
    else:
        width = (2.0 * a.d_attn + 2.0 * a.d_kv * kv_replication(a, tp, cp)) / (_f(tp) * c)
        out = 2.0 * _f(micro_batch) * seq_len * width * act_bytes
    return np.where(c > 1, out, 0.0)


def sequence_pieces(cp: int, split: str = "zigzag") -> int:
    """How many equal pieces the split cuts each sequence into: 2 cp for the zig-zag split (card r holds pieces r
    and 2 cp - 1 - r), cp for the contiguous one, 1 without context parallelism."""
    if cp <= 1:
        return 1
    return 2 * cp if split == "zigzag" else cp


def sequence_splits(seq_len: int, cp: int, split: str = "zigzag") -> bool:
    """The split rule: seq_len % pieces = 0 (:func:`sequence_pieces`). The stacks cut the sequence with a view that
    needs equal pieces: Megatron-Core's ``get_batch_on_this_cp_rank`` reshapes the sequence dimension to
    (2 cp, seq_len / (2 cp)), Transformer Engine's context-parallel attention asserts the same for its
    load-balanced inputs, and torch's ``context_parallel`` (torchtitan) asserts seq_length % (2 cp) = 0 in its
    head-tail load balancer (``_load_balancer.py``); without load balance it shards the sequence into cp pieces."""
    return seq_len % sequence_pieces(cp, split) == 0


def split_rule(seq_len: int, cp: int, split: str = "zigzag") -> str:
    """The split rule in words for ``seq_len`` and ``cp``, for an error line."""
    n = sequence_pieces(cp, split)
    pieces = f"2 x cp = {n}" if split == "zigzag" else f"cp = {n}"
    fits = ", ".join(str(c) for c in range(1, 17) if sequence_splits(seq_len, c, split))
    return (f"a sequence of {seq_len:,} tokens does not split into {pieces} equal pieces, which the {split} "
            f"context-parallel split needs (sequence length divisible by {'2 x cp' if split == 'zigzag' else 'cp'}:"
            f" Megatron-Core get_batch_on_this_cp_rank, Transformer Engine, torch context_parallel); cp up to 16 "
            f"that split it: {fits}")


def require_split(seq_len: int, cp: int, split: str = "zigzag", what: str = "cp") -> None:
    """Refuse a context-parallel size that cannot split the sequence (:func:`sequence_splits`): one InputError
    line, ``what`` naming the input ("--cp" on the command line, "cp" for a plan given as an object)."""
    if not sequence_splits(seq_len, cp, split):
        raise InputError(f"{what} {cp}: {split_rule(seq_len, cp, split)}")


def placement_ok(tp: ArrayLike, cp: ArrayLike, cards_per_host: int) -> NDArray[np.bool_]:
    """The layout rule: TP stays inside a host (tp divides the host's cards) and a TP x CP group either
    divides a host or fills whole hosts, so that every CP group has the same links (8-card hosts:
    TP 2 x CP 4 or TP 8 x CP 16 are regular, TP 2 x CP 3 is not)."""
    t, c = np.asarray(tp), np.asarray(cp)
    g = int(cards_per_host)
    group = t * c
    ok: NDArray[np.bool_] = (g % t == 0) & ((g % group == 0) | (group % g == 0))
    return ok


def cp_bandwidth(fabric: Fabric, tp: ArrayLike, cp: ArrayLike, nics: ArrayLike, method: str = "ring") -> FloatArray:
    """Per-card bandwidth of the CP exchange (bytes/s per direction): cp ranks tp apart (network.route).

    The group stays inside the scale-up domain iff tp x cp <= its cards (the card's scale-up link).
    Across hosts, a ring crosses each host boundary with the tp rings of the host sharing its k NICs:
    min(B_up, k B_nic / tp) (as a DP ring, comm.dp_ring_bandwidth); an all-to-all sends most of its
    bytes off the host, every card of the host at once: min(B_up, k B_nic / g).
    """
    return route(fabric, cp, tp, _sharing(fabric, tp, method), nics).bandwidth


def _sharing(fabric: Fabric, tp: ArrayLike, method: str) -> ArrayLike:
    """Groups that send through a host's NICs at once: the host's tp rings, or every card for an all-to-all."""
    return tp if method == "ring" else fabric.cards_per_host


def cp_step_latency(fabric: Fabric, tp: ArrayLike, cp: ArrayLike, up_step: float, out_step: float) -> FloatArray:
    """Latency of one ring step's send and receive: ``up_step`` when the CP group stays inside the scale-up domain,
    ``out_step`` once it crosses the NICs (network.route)."""
    level = route(fabric, cp, tp).level
    lat: FloatArray = np.where(level > 0, out_step, up_step)
    return lat
