"""One transformer layer as a table of kernels: FLOPs, bytes moved and GEMM shape per operation.

Each operation of a decoder block (pre-norm; Llama / Qwen / GPT / parallel-block styles) becomes one
:class:`Kernel` per phase: ``fwd`` (forward), ``dx`` (gradient of the inputs, which the previous layer
and the previous pipeline stage wait for) and ``dw`` (gradient of the weights, which only the optimizer
waits for). A kernel carries its FLOPs, the bytes it reads and writes in device memory, its GEMM shape
``C[m, n] = A[m, k] B[k, n]`` x ``batch`` (0 for non-GEMM kernels), its launch count and the
activation-recompute group whose forward it belongs to. :mod:`tpopt.models.roofline` turns a kernel
into time; :mod:`tpopt.models.steptime` sums them into stage times.

Per micro-batch of b sequences of s tokens on one card of a tensor-parallel group of t:
T = b s tokens pass through the tensor-parallel region (the linear layers and attention, widths / t);
the norms, residual adds and dropouts see T / t tokens with sequence parallelism, T without.

Forward FLOPs of the linear layers sum to 2 T x (linear parameters of the block) / t, so over the
model the GEMM FLOPs are 6 x GEMM parameters per token (forward + dX + dW), the chapter's count.
Attention: with flash attention a causal query sees (s + 1) / 2 keys on average (the kernel skips
masked blocks; s_w for a sliding window of w, when w < s), its forward costs 4 d_attn per (query, key)
pair and its backward 2.5 x the forward (it recomputes the scores); without flash attention
the score and context products are batched GEMMs over the whole s x s square (masking does not skip
work), and the softmax, dropout and their backward are memory-bound passes over b (heads / t) s^2
elements. Megatron-LM's ``num_floating_point_operations`` counts the same GEMMs (dense, non-flash case).

Designed to grow: context parallelism divides s by cp in the attention kernels and adds a KV
exchange, as more entries of the same table. A mixture-of-experts block (:func:`moe_kernels`) replaces
the MLP with a router GEMM, permutation passes, the routed experts as grouped GEMMs whose rows carry
the load factor (capacity padding, the busiest rank's surplus) and grow with EP (E / ep local experts
share the rows of ep ranks' tokens), and the shared experts as a dense MLP; the all-to-all between the
permutations is :func:`tpopt.models.terms.ep_link`'s. A MoE model's blocks without routed experts
(DeepSeek's leading ``dense_layers``, Qwen-MoE's ``mlp_only_layers`` and ``moe_step``;
:func:`tpopt.models.arch.is_moe_layer`) keep the dense MLP of width ``ffn`` (``layer_kernels(...,
moe_block=False)``); the stage times add each block's own kernels. Multi-head latent attention folds its
latent projections into the QKV GEMM (same FLOPs).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple, cast

import numpy as np
from numpy.typing import ArrayLike

from tpopt.models.arch import ModelArch, attention_linear_params, mean_keys_per_query, mlp_activation_width
from tpopt.models.moe import clamped_apart, distinct_ranks
from tpopt.models.numeric import FloatArray, Floats

PHASES = ("fwd", "dx", "dw")

GROUPED_GEMM_STREAMS = 4
"""CUDA streams Transformer Engine's grouped linear layer spreads its per-expert GEMMs over (its multi-stream
cuBLAS path, 4 compute streams): the per-kernel overhead of E / ep expert GEMMs is paid 1 + (E / ep - 1) / 4
times per projection and phase, and at most 4 expert GEMMs are on the SMs at once, so their waves are
quantised over 4 experts' tiles, not all E / ep: 4 experts of 256 rows (2 x 12 output tiles of 128 x 128
each for Qwen3-30B-A3B's up projection) fill 96 of an H100's 132 SMs."""


MAIN_GRAD_BYTES = 4.0
"""Bytes per element of the gradient a routed expert's weight-gradient GEMM accumulates into: Megatron-Core's
gradient_accumulation_fusion (on by default; Transformer Engine's GroupedLinear ``fuse_wgrad_accumulation``)
has each expert's dW GEMM add into its FP32 ``main_grad`` (read and written, 8 bytes per weight) every
micro-batch: 8 k n bytes beside 2 m_per k n FLOPs, m_per / 4 FLOP per byte. With few rows per expert the
expert's dW turns memory-bound (m_per = 1,024 rows: 256 FLOP per byte, below an H100's BF16 ridge of
989 TFLOP/s / 3.35 TB/s = 295), where a dense layer's, over every token of the micro-batch, stays
compute-bound (its dW is left as it was)."""


def _f(x: ArrayLike) -> FloatArray:
    return np.asarray(x, dtype=float)


class RingMergeBytes(NamedTuple):
    """Bytes a context-parallel ring's merges move on one card and layer, per element: per ring step after the first
    (``*_step``, cp - 1 of them) and once per layer under CP (``*_once``); ``q``: per element of the attention output
    (forward) or of dQ (backward), ``kv``: per element of each of K and V (dK, dV) as the ring holds them (d_kv wide,
    d_attn under the stack's kv_repeat). The relation is models.terms.layer_times.ring_merge_bytes."""

    fwd_step_q: float
    fwd_step_kv: float
    fwd_once_q: float
    fwd_once_kv: float
    dx_step_q: float
    dx_step_kv: float
    dx_once_q: float
    dx_once_kv: float


@dataclass(frozen=True)
class Layout:
    """How one micro-batch of one layer runs on one card (arrays broadcast over the layout grid)."""

    tp: ArrayLike  # tensor-parallel size t (array)
    micro_batch: ArrayLike  # sequences per micro-batch b (array)
    seq_len: int
    sequence_parallel: bool = True  # norms, dropout, residuals split by t under TP (Korthikanti et al.)
    flash_attention: bool = True
    dropout: bool = False  # dropout on attention probabilities and after each block output
    act_bytes: float = 2.0  # bytes per activation element (BF16/FP16)
    ep: ArrayLike = 1.0  # expert parallelism (MoE): E / ep experts per card
    expert_tp: ArrayLike = 0.0  # expert tensor parallelism (0: the same as tp)
    load: ArrayLike = 1.0  # load factor phi: rows of the busiest rank over a balanced router (models/moe.py)
    attention_scale: ArrayLike = 1.0  # the busiest card's attention work over the balanced share (context.imbalance)
    cp_steps: ArrayLike = 0.0  # ring attention's steps beyond the first (cp - 1 under ring CP, else 0)
    cp_kv_repeat: bool = False  # the ring's K, V at the query heads (the stack's kv_repeat: context.ring_kv_arch)
    dispatcher: str = "direct"  # MoE token dispatcher (models/moe.py DISPATCHERS): what the permutation passes move
    rope_scaled_unfused: bool = False  # the stack runs a RoPE with a YaRN attention factor unfused (rope_kernels)
    expert_bias_loop: bool = False  # the stack adds the experts' output bias expert by expert (expert_bias_kernels)
    activation_clamp_unfused: bool = False  # a clamped activation clamped eagerly (activation_clamp_kernels)
    cp_merge_bytes: RingMergeBytes | None = None  # a torch ring's merge bytes (terms.layer_times.ring_merge_bytes)
    fused_grouped_mlp: bool = False  # the experts' FC1, gated activation and FC2 as one fused launch (_mlp_kernels)
    tp_gather_bytes: float = 0.0  # bytes per element of the TP all-gathers (0: act_bytes; tp_collectives)
    tp_regather: bool = True  # the backward gathers the column-parallel layers' input again (tp_collectives)

    @property
    def tokens(self) -> FloatArray:
        """T = b s: tokens of a micro-batch in the tensor-parallel region."""
        return _f(self.micro_batch) * self.seq_len

    @property
    def seq_tokens(self) -> FloatArray:
        """Tokens the sequence-region kernels (norms, residuals, dropout) see on a card: T / t with SP."""
        t = _f(self.tp)
        per_card: FloatArray = self.tokens / np.where(self.sequence_parallel, t, 1.0)
        return per_card


class Kernel(NamedTuple):
    op: str  # operation name, e.g. "qkv", "attn.softmax"
    phase: str  # "fwd", "dx" or "dw"
    kind: str  # "gemm", "attention" (fused flash kernel) or "memory"
    group: str  # recompute group of the op's forward: "norm", "attn", "mlp" or "" (kept)
    flops: ArrayLike
    bytes: ArrayLike
    m: ArrayLike = 0.0
    n: ArrayLike = 0.0
    k: ArrayLike = 0.0
    batch: ArrayLike = 1.0
    # kernel launches; the field shadows tuple.count (never called on a Kernel), kept as the public name
    count: float = 1.0  # type: ignore[assignment]
    linear: bool = False  # a weight GEMM (runs in FP8 under an FP8 recipe)
    resident: ArrayLike = 0.0  # products of a batched GEMM on the SMs at once (0: all of ``batch``, one launch)


def _linear(op: str, group: str, tokens: Floats, k_in: Floats, n_out: Floats, e: float,
            count_fwd: float = 1.0) -> list[Kernel]:
    """Y[T, n] = X[T, k] W[k, n]: forward, dX = dY W^T, dW = X^T dY (2 T k n FLOPs each)."""
    flops = 2.0 * tokens * k_in * n_out
    return [
        Kernel(op, "fwd", "gemm", group, flops, e * (tokens * k_in + k_in * n_out + tokens * n_out),
               tokens, n_out, k_in, 1.0, count_fwd, True),
        Kernel(op, "dx", "gemm", group, flops, e * (tokens * n_out + k_in * n_out + tokens * k_in),
               tokens, k_in, n_out, 1.0, 1.0, True),
        Kernel(op, "dw", "gemm", group, flops, e * (tokens * k_in + tokens * n_out + k_in * n_out),
               k_in, n_out, tokens, 1.0, 1.0, True),
    ]


def _elementwise(op: str, group: str, fwd_bytes: ArrayLike, bwd_bytes: ArrayLike, fwd_count: float = 1.0,
                 bwd_count: float = 1.0) -> list[Kernel]:
    """A memory-bound pass forward (reads + writes) and its backward (all of it is dX work)."""
    z = 0.0 * _f(fwd_bytes)
    return [Kernel(op, "fwd", "memory", group, z, fwd_bytes, count=fwd_count),
            Kernel(op, "dx", "memory", group, z, bwd_bytes, count=bwd_count)]


def attention_keys(a: ModelArch, seq_len: int, flash: bool) -> float:
    """Average keys a query is scored against, over the layers: (s + 1) / 2 causal with flash
    attention (arch.mean_keys_per_query; windowed layers see about w); the whole square s without it
    (masked scores are computed, then discarded)."""
    if not flash:
        return float(seq_len)
    w_layers = a.window_layers
    full = float(mean_keys_per_query(seq_len))
    if not w_layers:
        return full
    windowed = float(mean_keys_per_query(seq_len, a.sliding_window))
    return (w_layers * windowed + (a.layers - w_layers) * full) / a.layers


def norm_kernels(op: str, a: ModelArch, lay: Layout, group: str = "norm") -> list[Kernel]:
    """LayerNorm / RMSNorm over h on the sequence region: forward reads x, writes y (2 Ts h e);
    backward reads x and dy, writes dx (3 Ts h e) and reduces the weight gradient."""
    e, ts, h = lay.act_bytes, lay.seq_tokens, a.hidden
    return _elementwise(op, group, 2.0 * ts * h * e, 3.0 * ts * h * e, 1.0, 2.0)


def residual_kernels(op: str, a: ModelArch, lay: Layout) -> list[Kernel]:
    """(Bias-)dropout-add on the block output: forward reads branch and residual, writes the sum
    (3 Ts h e, + a 1-byte mask with dropout); backward adds the two gradient streams (3 Ts h e) and,
    with dropout, applies the mask (+ Ts h (e + 1))."""
    e, ts, h = lay.act_bytes, lay.seq_tokens, a.hidden
    drop = 1.0 if lay.dropout else 0.0
    return _elementwise(op, "", ts * h * (3.0 * e + drop), ts * h * (3.0 * e + drop * (e + 1.0)))


ROPE_UNFUSED_FWD_PASSES, ROPE_UNFUSED_BWD_PASSES = 12.0, 10.0
"""Element passes (bytes per element of q or k, in units of the activation's bytes) of Megatron-Core's unfused RoPE,
_apply_rotary_pos_emb_bshd (megatron/core/models/common/embeddings/rope_utils.py: ``t * cos + rotate_half(t) * sin``,
then ``cat((t, t_pass))``) over the whole head dimension: forward t cos read and written (2), rotate_half's -x2 on half
of t (1) and its concatenation (2), the product by sin (2), the sum read twice and written (3), the final
concatenation with the empty pass-through part (2): 12, in 6 kernels; backward the gradient times sin (2), -x2's (1),
the two halves assembled (2), times cos (2) and the two gradients of t summed (3): 10, in 5 kernels (the
concatenations' gradients are views). The fused kernel reads and writes each element once each way (2 and 2)."""


def rope_kernels(a: ModelArch, lay: Layout) -> list[Kernel]:
    """Rotary position embedding on the card's queries and keys, T (d_attn + d_kv) / t elements: one fused pass
    each way (read and write), or, where the model's RoPE carries a YaRN attention factor other than 1 and the
    stack then runs it unfused (``lay.rope_scaled_unfused``: Megatron-Core's apply_rotary_pos_emb falls back to
    PyTorch when mscale != 1, "not supported by TE's fused RoPE"), :data:`ROPE_UNFUSED_FWD_PASSES` and
    :data:`ROPE_UNFUSED_BWD_PASSES` passes on each of q and k. gpt-oss-120b, one 4,096-token sequence: 18.9M
    elements, 75 MB each way fused, 453 MB forward and 377 MB backward unfused."""
    t, e, T = _f(lay.tp), lay.act_bytes, lay.tokens
    elements = T * (a.d_attn + a.d_kv) / t
    if lay.rope_scaled_unfused and a.rope_attention_factor != 1.0:
        return _elementwise("rope", "", ROPE_UNFUSED_FWD_PASSES * elements * e, ROPE_UNFUSED_BWD_PASSES * elements * e,
                            2.0 * 6.0, 2.0 * 5.0)
    return _elementwise("rope", "", 2.0 * elements * e, 2.0 * elements * e)


def layer_kernels(a: ModelArch, lay: Layout, moe_block: bool | None = None) -> list[Kernel]:
    """Every kernel of one transformer block for one micro-batch on one card (see the module docstring).

    Order: norm, QKV, (q/k norm, RoPE), attention core, output projection, residual, norm, MLP up
    (gate and up fused), activation, MLP down, residual. A parallel block (GPT-J, NeoX, Falcon) has
    one norm feeding both branches and one residual add. ``moe_block``: the block's MLP is routed
    experts (:func:`moe_kernels`) or dense (width ``ffn``); None = MoE for every block of a MoE model.
    """
    moe_block = a.moe if moe_block is None else bool(moe_block) and a.moe
    t = _f(lay.tp)
    e, T = lay.act_bytes, lay.tokens
    h, dq, dkv = a.hidden, a.d_attn, a.d_kv
    f = a.ffn if a.moe else mlp_activation_width(a)  # a MoE model's dense blocks: their own ffn
    dv = a.d_v
    out: list[Kernel] = []
    out += norm_kernels("norm.attn", a, lay)
    # q, k, v projections as one GEMM of the width that carries their weights (MLA: the latent
    # down / up projections folded in, the same FLOPs); the output projection reads d_v
    # MLA: the up-projections are rebuilt under mla_up recompute (the folded GEMM reruns whole: its
    # down-projection share, about a fifth for DeepSeek-V3, is counted again)
    qkv_group = "mla_up" if a.kv_lora_rank > 0 else ""
    out += _linear("qkv", qkv_group, T, h, (attention_linear_params(a) - dv * h) / h / t, e)
    if a.qk_norm:
        out += _elementwise("qk_norm", "", 2.0 * T * (dq + dkv) / t * e, 3.0 * T * (dq + dkv) / t * e)
    if a.positions == "rope":
        out += rope_kernels(a, lay)
    out += attention_kernels(a, lay)
    out += _linear("proj", "", T, dv / t, h, e)
    if not a.parallel_block:
        out += residual_kernels("residual.attn", a, lay)
        out += norm_kernels("norm.mlp", a, lay)
    if moe_block:
        out += moe_kernels(a, lay)
        out += residual_kernels("residual.mlp", a, lay)
        return out
    width = (2.0 if a.gated_mlp else 1.0) * f / t
    out += _linear("mlp.up", "", T, h, width, e)
    if a.gated_mlp:  # act(gate) x up, fused: read 2 T f, write T f; backward reads g, u, dy, writes dg, du
        out += _elementwise("mlp.act", "mlp", 3.0 * T * f / t * e, 5.0 * T * f / t * e)
    else:  # bias + GELU fused: read T f, write T f; backward reads x, dy, writes dx
        out += _elementwise("mlp.act", "mlp", 2.0 * T * f / t * e, 3.0 * T * f / t * e)
    out += _linear("mlp.down", "", T, f / t, h, e)
    out += residual_kernels("residual.mlp", a, lay)
    return out


def _mlp_kernels(prefix: str, a: ModelArch, rows: Floats, width: Floats, e: float, group: str = "mlp",
                 m_per: Floats | None = None, batch: Floats = 1.0, fused: bool = False) -> list[Kernel]:
    """Up (gate and up fused), activation and down of an MLP of ``width`` per card on ``rows`` tokens;
    with ``batch`` > 1 a grouped GEMM of ``batch`` experts of ``m_per`` rows each.

    ``fused`` (a grouped MLP run as one fused launch, Transformer Engine's CuTe DSL kernel that Megatron-Core's
    experts build as FC1, scaled gated activation and FC2): each phase of each projection is one kernel over every
    local expert, whose tiles all share the waves (resident = batch), and the activation is computed in the up
    projection's epilogue (its gradient in the down projection's dX), so it makes no memory pass of its own:
        launches = 1, resident = E / ep, activation passes = 0
    against 1 + (E / ep - 1) / GROUPED_GEMM_STREAMS launches, GROUPED_GEMM_STREAMS resident and the activation's
    3 + 5 element passes of the multi-stream grouped linear layer."""
    up = (2.0 if a.gated_mlp else 1.0) * width
    out: list[Kernel] = []
    for op, k_in, n_out in ((f"{prefix}.up", a.hidden, up), (f"{prefix}.down", width, a.hidden)):
        ks = _linear(op, "", rows, k_in, n_out, e)
        if m_per is not None:  # E / ep independent products of m_per rows each, one GEMM launch per expert
            moved = e * (rows * (k_in + n_out) + batch * k_in * n_out)  # every local expert's weights
            # dW: each expert's gradient accumulated into its FP32 main_grad (read and written)
            moved_dw = e * rows * (k_in + n_out) + 2.0 * MAIN_GRAD_BYTES * batch * k_in * n_out
            # one GEMM per local expert, GROUPED_GEMM_STREAMS at a time: 1 + (E / ep - 1) / streams overheads
            launches = 1.0 if fused else cast(float, 1.0 + (_f(batch) - 1.0) / GROUPED_GEMM_STREAMS)
            # the streams hold GROUPED_GEMM_STREAMS expert GEMMs at once: their tiles share the SMs' waves (a fused
            # launch holds every local expert's)
            resident = _f(batch) if fused else np.minimum(_f(batch), GROUPED_GEMM_STREAMS)
            ks = [k._replace(m=m_per, batch=batch, bytes=moved, count=launches, resident=resident)
                  if k.phase != "dw" else
                  k._replace(k=m_per, batch=batch, bytes=moved_dw, count=launches, resident=resident) for k in ks]
        out += ks
        if op.endswith(".up") and not (fused and m_per is not None):
            act = ((3.0, 5.0) if a.gated_mlp else (2.0, 3.0))
            out += _elementwise(f"{prefix}.act", group, act[0] * rows * width * e, act[1] * rows * width * e)
    return out


ROUTER_FWD_PASSES, ROUTER_BWD_PASSES = 5.0, 4.0
"""Memory passes of Megatron-Core's TopKRouter over the T x E routing scores (router.py, moe_utils.py):
forward, the score function (softmax / sigmoid), the top-k, the scatter of the chosen probabilities and
the routing map into dense T x E tensors, and the load-balancing loss (switch_load_balancing_loss: the
per-expert sums of probabilities and of routed tokens); backward, the loss's gradient, the gather of the
top-k gradient into T x E, its sum with the loss's, and the score function's backward."""

ROUTER_FWD_BYTES = 4.0 + 4.0 + 4.0 + 5.0 + 5.0
"""Bytes per (token, expert) the router's forward passes move, FP32 scores (moe_router_dtype fp32):
score function 4 read + 4 written, top-k 4 read, dense probabilities 4 + routing map 1 written, the
load-balancing loss 4 + 1 read: 22 (the gating GEMM's own output is the GEMM's)."""

ROUTER_BWD_BYTES = 4.0 + 4.0 + 12.0 + 12.0
"""Bytes per (token, expert) of the router's backward: the loss's gradient 4 written, the top-k gradient
scattered 4 written, their sum 8 read + 4 written, the score function's backward (probabilities and
gradient read, gradient written) 12: 32."""


def permutation_row_passes(top_k: int, ep: ArrayLike, local: ArrayLike,
                           dispatcher: str) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Bytes the permutation passes of one MoE block move per routed row of width h and byte of
    activation, (permute forward, permute backward, unpermute forward, unpermute backward), by dispatcher.

    A routed row is one (token, expert) pair the card's experts run, R of them. Megatron-Core's
    token dispatchers (token_dispatcher.py, moe_utils.py permute / unpermute / sort_chunks_by_idxs):

    - ``direct`` (MoEAlltoAllTokenDispatcher): before the all-to-all the card's tokens are gathered into
      expert order (read R, write R); after it, with E / ep > 1 local experts and EP > 1, the received
      chunks are re-sorted from source-rank order into local-expert order (read R, write R); the combine
      sorts them back (2 R) and unpermutes, scattering each row weighted by its probability into its token
      (read R, write R): permute 2 + 2 sort, unpermute 2 + 2 sort forward; the backward runs the inverse
      gathers and scatters (the same bytes; the unpermute's also reads the rows for the probabilities'
      gradient, + 1).
    - ``per-host`` (MoEFlexTokenDispatcher with DeepEP / HybridEP): the tokens go out as they are, one copy
      per destination rank (moe.distinct_ranks D of the k experts), and the card permutes the copies it
      receives into its experts' rows: read R D / k copies, write R rows; the combine's unpermute reads the R
      rows and writes the R D / k copies, each the weighted sum of its rows: 1 + D / k each way (the
      backward: the same, the unpermute + 1).
    - ``all-gather``: the gathered tokens are permuted into the local experts' rows and back, 2 each way.

    Qwen3-30B-A3B (k = 8) at EP 8 (16 local experts): direct 4 / 4 / 4 / 5, per-host 1.66 / 1.66 / 1.66 / 2.66.
    """
    ep_, n = _f(ep), _f(local)
    if dispatcher == "per-host":
        d = distinct_ranks(top_k, ep_) / top_k
        one = 1.0 + d
        return one, one, one, one + 1.0
    sort = np.where((ep_ > 1) & (n > 1), 2.0, 0.0) if dispatcher == "direct" else 0.0 * ep_
    return 2.0 + sort, 2.0 + sort, 2.0 + sort, 3.0 + sort


def expert_bias_kernels(a: ModelArch, lay: Layout, rows: Floats, local: Floats) -> list[Kernel]:
    """The experts' output bias as Megatron-Core adds it when the experts have biases (gpt-oss): TEGroupedMLP
    builds its second grouped linear layer with ``skip_bias_add`` and adds the bias after it in PyTorch, one local
    expert at a time, weighted by the router probability (``_apply_bias``: ``t + b * p`` on each expert's rows,
    the results concatenated; megatron/core/transformer/moe/experts.py), on the R routed rows of width h:
        forward   b p written (e bytes per element), t + b p read 2 e and written e, the concatenation read e and
                  written e: 6 e bytes per element of R x h; 2 kernels per local expert and the concatenation
        backward  the product's two gradients, sum over rows of g p (the bias's) and sum over h of g b (the
                  probability's): each a product read e and written e, and its reduction read e: 6 e bytes;
                  4 kernels per local expert (the sum passes its gradient on as it is, the concatenation as views)
    with the probabilities in the activation's dtype (the router's own with moe_router_dtype unset, as the gpt-oss
    recipes leave it). gpt-oss-120b at EP 8 (16 local experts), one 4,096-token sequence: R h = 47.2M elements,
    0.57 GB each way and 33 + 64 kernels. None where the stack adds the bias in the GEMM or the experts have none."""
    if not (a.mlp_bias and lay.expert_bias_loop):
        return []
    e, n = lay.act_bytes, _f(local)
    moved = 6.0 * e * _f(rows) * a.hidden
    return _elementwise("expert.bias", "", moved, moved, cast(float, 2.0 * n + 1.0), cast(float, 4.0 * n))


CLAMP_FWD_PASSES = 8.0
"""Bytes per element of the experts' activation width w, in units of the activation's bytes e, that Megatron-Core's
eager clamp moves forward per routed row (weighted_bias_quick_geglu_impl: the gate half clamped from above, the linear
half both ways, each read and written, w e + w e apiece, then the two concatenated, 2 w e read and written): 8, in 3
kernels."""

CLAMP_BWD_BYTES = (11.0, 8.0)
"""(per byte of e, plus bytes) per element of w of the clamp's backward per routed row, as PyTorch's autograd runs
it (FunctionsManual.cpp clamp_backward, 1-byte masks): the gate's one-sided clamp ``where(x <= v, g, 0)``, a compare
(e + 1) and the where (1 + 2 e): 3 e + 2; the linear half's ``where((x >= -v).logical_and_(x <= v), g, 0)``, two
compares (2 e + 2), the and (3) and the where (1 + 2 e): 4 e + 6; the chunk's gradient, the two halves concatenated
(split_backward: 2 w e read and written): 4 e. In all 11 e + 8 bytes (30 at e = 2) in 9 kernels (two of them the
one-element zero each where takes). The concatenation's own gradient is two views (no kernel)."""


def activation_clamp_kernels(a: ModelArch, lay: Layout, rows: Floats, width: Floats) -> list[Kernel]:
    """The clamp of a clamped gated activation (gpt-oss: swiglu_limit 7, ``a.activation_clamp``) where the stack runs
    it apart from the fused activation (``lay.activation_clamp_unfused``: Megatron-Core clamps the experts' fc1 output
    in eager PyTorch, concatenates it and only then calls the fused weighted quick-GEGLU), on the R routed rows of
    width w (the expert's f / etp; the fc1 output is 2 w wide):
        forward   :data:`CLAMP_FWD_PASSES` x R w e bytes, 3 kernels (in the activation's recompute group: the
                  checkpoint Megatron-Core's moe_act recompute puts around the activation reruns the clamps)
        backward  (11 e + 8) x R w bytes (:data:`CLAMP_BWD_BYTES`), 9 kernels
    gpt-oss-120b at EP 8, one 4,096-token sequence in BF16: R w = 16,384 x 2,880 = 47.2M elements, 0.75 GB forward
    and 1.42 GB backward. None where the activation has no clamp, the stack fuses it, or the grouped MLP is one fused
    kernel (its epilogue computes the activation)."""
    if not clamped_apart(a, lay.activation_clamp_unfused, lay.fused_grouped_mlp):
        return []
    e, n = lay.act_bytes, _f(rows) * _f(width)
    per_e, fixed = CLAMP_BWD_BYTES
    return _elementwise("expert.act_clamp", "mlp", CLAMP_FWD_PASSES * n * e, (per_e * e + fixed) * n, 3.0, 9.0)


def moe_kernels(a: ModelArch, lay: Layout) -> list[Kernel]:
    """The MLP of a mixture-of-experts block for one micro-batch on one card.

    Router: logits of the card's Ts tokens (T / t with sequence parallelism), a GEMM Ts x h x E, then the
    router's memory passes over Ts x E (FP32 scores: ROUTER_FWD_BYTES, ROUTER_BWD_BYTES). Permute and
    unpermute (combine, weighted by the router probabilities): memory passes over the R = etp x (T / t) x
    k x phi rows the card's experts run (phi the load factor; expert-TP ranks hold the rows of their group),
    as many as the dispatcher makes (:func:`permutation_row_passes`). Routed experts: one grouped GEMM
    per projection over E / ep experts of R ep / E rows each, widths f_e / etp (the same FLOPs per card
    whatever etp, 2 R h x width; more rows per expert as EP grows, which the GEMM efficiency sees: the
    rows of each expert fill whole tiles, the tiles of all local experts share the waves, and the dW
    product's k loop runs over the expert's rows). Transformer Engine's grouped linear layer (Megatron-Core's
    grouped-GEMM experts on Hopper) runs one GEMM per local expert, GROUPED_GEMM_STREAMS of them at a
    time, so each phase of each projection pays 1 + (E / ep - 1) / 4 kernel overheads: what makes many
    local experts of few rows each costly.
    Shared experts: a dense MLP of shared x f_s / t on the T tokens of the tensor-parallel region.
    """
    t = _f(lay.tp)
    e, T = lay.act_bytes, lay.tokens
    ts = lay.seq_tokens
    etp = np.where(_f(lay.expert_tp) > 0, _f(lay.expert_tp), t)
    ep = _f(lay.ep)
    rows = etp * T / t * a.top_k * _f(lay.load)
    local = a.experts / ep
    out = [k._replace(linear=False) for k in _linear("router", "", ts, a.hidden, float(a.experts), e)]
    out += _elementwise("router.topk", "", ROUTER_FWD_BYTES * ts * a.experts, ROUTER_BWD_BYTES * ts * a.experts,
                        ROUTER_FWD_PASSES, ROUTER_BWD_PASSES)
    p_fwd, p_bwd, u_fwd, u_bwd = permutation_row_passes(a.top_k, ep, local, lay.dispatcher)
    out += _elementwise("moe.permute", "", p_fwd * rows * a.hidden * e, p_bwd * rows * a.hidden * e)
    out += _mlp_kernels("expert", a, rows, a.expert_ffn / etp, e, m_per=rows / local, batch=local,
                        fused=lay.fused_grouped_mlp)
    out += activation_clamp_kernels(a, lay, rows, a.expert_ffn / etp)
    out += expert_bias_kernels(a, lay, rows, local)
    out += _elementwise("moe.unpermute", "", u_fwd * rows * a.hidden * e, u_bwd * rows * a.hidden * e)
    if a.shared_experts:
        out += _mlp_kernels("mlp", a, T, a.shared_experts * a.shared_ffn / t, e)
    if a.shared_expert_gate:  # sigmoid gate h x 1 on the shared experts' output (Qwen2-MoE)
        out += [k._replace(linear=False) for k in _linear("shared.gate", "", ts, a.hidden, 1.0, e)]
    return out


def ring_merge_kernels(a: ModelArch, lay: Layout) -> list[Kernel]:
    """Ring attention's merge of each step's partial result (Transformer Engine's AttnFuncWithCPAndKVP2P, the
    blockwise softmax of Ring Attention), memory-bound passes on one card's T tokens, for each of the cp - 1
    steps after the first (none without ring context parallelism):
        forward: the FP32 output accumulator rescaled by the new log-sum-exp and the step's output added:
                 read 4 + e, write 4 bytes per element of T x d_v / t;
        backward: dQ accumulated in FP32 (read and write 4 + 4 bytes per element of T x d_attn / t) and the
                 arriving dK, dV added to the card's own (read and write 4 + 4 bytes per element of 2 T x d_kv / t;
                 heads x head_dim wide where the stack repeats K, V to the query heads, ``lay.cp_kv_repeat``).
    Llama 2 7B, TP 8, 32,768 tokens a card, BF16: 0.17 GB forward and 0.40 GB backward per step and layer.
    A stack running torch's ring states its own bytes (``lay.cp_merge_bytes``, :class:`RingMergeBytes`): per step
    and once per layer, per element of the output / dQ and of each of K, V."""
    steps = _f(lay.cp_steps)
    if not np.any(steps > 0):
        return []
    t, e, T = _f(lay.tp), lay.act_bytes, lay.tokens
    d_kv = a.heads * a.head_dim if lay.cp_kv_repeat else a.d_kv
    m = lay.cp_merge_bytes
    if m is None:
        fwd = steps * T * a.d_v / t * (4.0 + e + 4.0)
        dx = steps * (T * a.d_attn / t * 8.0 + 2.0 * T * d_kv / t * 8.0)
    else:
        out, q, kv, once = T * a.d_v / t, T * a.d_attn / t, 2.0 * T * d_kv / t, np.where(steps > 0, 1.0, 0.0)
        fwd = (steps * (out * m.fwd_step_q + kv * m.fwd_step_kv)
               + once * (out * m.fwd_once_q + kv * m.fwd_once_kv))
        dx = steps * (q * m.dx_step_q + kv * m.dx_step_kv) + once * (q * m.dx_once_q + kv * m.dx_once_kv)
    z = 0.0 * steps
    return [Kernel("attn.cp_merge", "fwd", "memory", "attn", z, fwd, count=steps),  # type: ignore[arg-type]
            Kernel("attn.cp_merge", "dx", "memory", "attn", z, dx, count=steps)]  # type: ignore[arg-type]


def attention_kernels(a: ModelArch, lay: Layout) -> list[Kernel]:
    """The attention core for one micro-batch on one card (heads / t of them).

    Flash: one fused kernel; forward 2 T k (d_attn + d_v) / t FLOPs (4 T k d_attn / t without MLA) for
    k average keys per query, backward
    2.5 x (recomputes QK^T and P), reading q, k, v, o (and do, writing dq, dk, dv). Under ring context
    parallelism one launch per ring step and the steps' merges (:func:`ring_merge_kernels`).
    Otherwise: scores S = Q K^T and context O = P V as batched GEMMs over b (heads / t) heads of s x s,
    a fused scale-mask-softmax pass, a dropout pass (1-byte mask), and their backward: dP = dO V^T,
    dV = P^T dO, the softmax and dropout backward passes, dQ = dS K, dK = dS^T Q.
    """
    t = _f(lay.tp)
    e, T, s = lay.act_bytes, lay.tokens, float(lay.seq_len)
    dq, dkv, hd = a.d_attn, a.d_kv, float(a.head_dim)
    b = _f(lay.micro_batch)
    keys = attention_keys(a, lay.seq_len, lay.flash_attention) * _f(lay.attention_scale)
    qkvo = T * (2.0 * dq + 2.0 * dkv) / t * e  # q, k, v read, o written
    if lay.flash_attention:
        fwd = 2.0 * T * keys * (dq + a.d_v) / t  # QK^T over d_attn, PV over d_v (equal unless MLA)
        steps = _f(lay.cp_steps)
        launches: Floats = 1.0 + steps  # one per ring step (an array: the count is the roofline's Floats)
        return [Kernel("attn.flash", "fwd", "attention", "attn", fwd, qkvo, count=launches),  # type: ignore[arg-type]
                Kernel("attn.flash", "dx", "attention", "attn", 2.5 * fwd, 2.0 * qkvo + T * dq / t * e,
                       count=2.0 * launches),  # type: ignore[arg-type]
                *ring_merge_kernels(a, lay)]
    heads = b * a.heads / t  # batched GEMM count
    scores = heads * s * s  # elements of the score matrix on this card
    gemm = 2.0 * heads * s * s * hd
    qk_bytes = e * (2.0 * heads * s * hd + scores)  # read q, k; write S
    pv_bytes = e * (scores + 2.0 * heads * s * hd)  # read P, v; write o
    return [
        Kernel("attn.scores", "fwd", "gemm", "attn", gemm, qk_bytes, s, s, hd, heads),
        *_elementwise("attn.softmax", "attn", 2.0 * e * scores, 3.0 * e * scores),
        *(_elementwise("attn.dropout", "attn", (2.0 * e + 1.0) * scores, (2.0 * e + 1.0) * scores)
          if lay.dropout else []),
        Kernel("attn.context", "fwd", "gemm", "attn", gemm, pv_bytes, s, hd, s, heads),
        # backward: dP = dO V^T (s x s, k = hd), dV = P^T dO (s x hd, k = s)
        Kernel("attn.context", "dx", "gemm", "attn", gemm, e * (2.0 * heads * s * hd + scores), s, s, hd, heads),
        Kernel("attn.context", "dx", "gemm", "attn", gemm, pv_bytes, s, hd, s, heads),
        # dQ = dS K, dK = dS^T Q (s x hd, k = s)
        Kernel("attn.scores", "dx", "gemm", "attn", 2.0 * gemm, 2.0 * pv_bytes, s, hd, s, 2.0 * heads, 2.0),
    ]


def embedding_kernels(a: ModelArch, lay: Layout) -> list[Kernel]:
    """First stage: token (and learned position) embedding lookup, vocab-parallel under TP.

    Forward gathers T rows of h (read + write, + the position add and a dropout pass when present);
    backward scatter-adds the gradient into the table (FP32 accumulation: read dy, read/write rows).
    """
    e, T, h = lay.act_bytes, lay.tokens, a.hidden
    fwd = 2.0 * T * h * e
    if a.positions == "learned" or a.learned_positions:
        fwd = fwd + 3.0 * T * h * e
    if lay.dropout:
        fwd = fwd + T * h * (2.0 * e + 1.0)
    z = 0.0 * T
    return [Kernel("embedding", "fwd", "memory", "", z, fwd, count=2.0),
            Kernel("embedding", "dw", "memory", "", z, T * h * (e + 8.0), count=2.0)]


def head_kernels(a: ModelArch, lay: Layout) -> list[Kernel]:
    """Last stage: final norm, LM head (vocab-parallel GEMM, V / t columns) and cross-entropy.

    The loss reads the logits, casts to FP32 and makes max, exp-sum and gather passes (forward
    T V / t x (e + 12) bytes), then writes the softmax gradient (T V / t x (4 + e)).
    """
    t = _f(lay.tp)
    e, T = lay.act_bytes, lay.tokens
    v = a.vocab / t
    out = norm_kernels("norm.final", a, lay, group="")
    out += _linear("lm_head", "", T, a.hidden, v, e)
    out += _elementwise("loss", "", T * v * (e + 12.0), T * v * (4.0 + e), 4.0, 2.0)
    return out


def optimizer_bytes_per_param(weights: float, grads: float, master: float, moments: float) -> float:
    """Bytes one Adam step moves per parameter of the shard it owns.

    Read and write master and moments, 2 (o); read the gradient for the overflow check, the norm and
    the update and zero it, 4 g; write the working copy, w: 2 o + 4 g + w
    (bf16-mixed 34 B, with FP32 gradients 42 B).
    """
    return 2.0 * (master + moments) + 4.0 * grads + weights


def optimizer_kernels(shard_params: ArrayLike, bytes_per_param: float) -> list[Kernel]:
    """The optimizer step of one card's shard: one memory-bound pass (multi-tensor kernels)."""
    q = _f(shard_params) * bytes_per_param
    return [Kernel("optimizer", "fwd", "memory", "", 0.0 * q, q, count=8.0)]


# ---------------------------------------------------------------------------------------------
# tensor-parallel collectives of one block


class Collectives(NamedTuple):
    """Bytes each card sends over its tensor-parallel link per micro-batch of one block, and the calls.

    Megatron TP: forward, an all-reduce of the T x h activation after the output projection and after
    MLP down; backward, an all-reduce of the input gradients of QKV and MLP up (each 2 (t-1)/t T h e).
    With sequence parallelism each all-reduce becomes a reduce-scatter + all-gather pair (the same
    bytes); the backward then all-gathers the output gradients before the projection and MLP down
    (``bwd_sync``), reduce-scatters the input gradients of QKV and MLP up, and all-gathers the
    sequence-sharded norm outputs once more for their weight gradients. The collectives of the
    column-parallel layers' backward (``bwd_async``) can run while that layer's other gradient GEMM
    computes (Megatron-LM's asynchronous TP all-reduce); a parallel block shares one norm output.

    The all-gathers carry ``Layout.tp_gather_bytes`` per element where the stack gathers a low-precision copy
    (torchao's Float8ColwiseParallel / Float8RowwiseParallel under torchtitan's Float8: the forward inputs cast to
    e4m3 before the gather, the backward output gradients to e5m2; the reductions stay 16-bit), and the regather
    is paid only where the stack saves the input sharded (``Layout.tp_regather``: Megatron-Core and Transformer
    Engine save the sequence-sharded input and gather it again for the weight gradient; DTensor's autograd saves
    the gathered tensor the forward made, so torchtitan does not).
    """

    fwd: FloatArray
    bwd_async: FloatArray
    bwd_sync: FloatArray
    fwd_calls: FloatArray
    async_calls: FloatArray
    sync_calls: FloatArray


def tp_collectives(a: ModelArch, lay: Layout) -> Collectives:
    """Collectives of one block and micro-batch (:class:`Collectives`). With sequence parallelism, per block:
    forward 2 all-gathers (g B per element) + 2 reduce-scatters (e B); backward 2 output-gradient all-gathers (g B,
    ``bwd_sync``), 2 input-gradient reduce-scatters (e B) and, with ``tp_regather``, r input all-gathers (e B,
    r = 2, 1 for a parallel block), each moving (t-1)/t x T h x bytes."""
    t = _f(lay.tp)
    size = lay.tokens * a.hidden * lay.act_bytes
    share = np.where(t > 1, (t - 1.0) / t, 0.0)
    live = np.where(t > 1, 1.0, 0.0)
    half = share * size  # one all-gather or one reduce-scatter
    if not lay.sequence_parallel:
        return Collectives(4.0 * half, 4.0 * half, 0.0 * half, 2.0 * live, 2.0 * live, 0.0 * live)
    gather = half * tp_gather_ratio(lay)  # one all-gather of the stack's gathered copy
    regather = (1.0 if a.parallel_block else 2.0) if lay.tp_regather else 0.0
    return Collectives(2.0 * gather + 2.0 * half, (2.0 + regather) * half, 2.0 * gather, 4.0 * live,
                       (2.0 + regather) * live, 2.0 * live)


def tp_gather_ratio(lay: Layout) -> float:
    """Bytes per element of a TP all-gather over the activation's: g / e (1 when the stack gathers the 16-bit
    activation; 0.5 for torchao's FP8 gathers of BF16 activations)."""
    return (lay.tp_gather_bytes or lay.act_bytes) / lay.act_bytes


def flops(kernels: Iterable[Kernel], phase: str | None = None, kind: str | None = None) -> Floats:
    """Total FLOPs of the kernels of a phase / kind (None = all)."""
    total: Floats = 0.0
    for k in kernels:
        if (phase is None or k.phase == phase) and (kind is None or k.kind == kind):
            total = total + _f(k.flops)
    return total
