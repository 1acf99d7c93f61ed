"""What is trained: a decoder-only transformer (dense or mixture-of-experts), its exact parameter
count and its FLOPs per token.

Conventions (as the training-systems chapter counts parameters, 10.1):

* N counts every trainable tensor: input embedding, untied LM head, per-layer attention and MLP
  matrices (+ biases where the architecture has them), the norms of each block, q/k norms (head_dim
  each) where present, the final norm, and learned position embeddings where present.
  Qwen3-8B (36 x 4096, 32/8 heads of 128, FFN 12288, vocab 151936, untied) -> N = 8,190,735,360.
* Training FLOPs per token = 6 x (parameters of every linear layer a token passes through, incl. the
  LM head, excluding the input-embedding lookup) + causal attention 12 x L x d_attn x (s + 1) / 2,
  d_attn = heads x head_dim. Qwen3-8B at s = 8192 -> 52.7 GFLOP/token, 4.31e14 FLOP per sequence.

Extensions, each exact for the architectures that have them:

* GPT-style blocks: LayerNorm (with or without bias), a non-gated GELU/ReLU MLP, biases on every
  linear layer or on some (q/k/v only, output projection, MLP), learned or ALiBi positions, a
  parallel attention + MLP block with one or two norms, extra norms (Gemma 2/3: four per block), an
  embedding LayerNorm (BLOOM), a bias on the LM head (Phi-2), attention sinks (gpt-oss).
* Sliding-window attention on some or all layers: a query sees min(i, w) keys instead of i, so the
  attention term uses the mean of min(i, w) over the sequence for those layers.
* Multi-head latent attention (DeepSeek-V2/V3): low-rank q (q_lora_rank) and joint kv (kv_lora_rank)
  projections with decoupled RoPE dims; QK^T runs over nope + rope dims, PV over v_head_dim.
* Mixture of experts: routed experts (count E, top-k, expert FFN width), shared experts, a router
  (h x E, optional bias), an optional sigmoid gate on the shared expert (Qwen2-MoE), dense blocks
  before the first MoE block (DeepSeek ``first_k_dense_replace``) or interleaved (``moe_step``).
  *Total* parameters count every expert; *activated* parameters count the top-k routed experts a
  token uses (plus everything else, the whole embedding table included). FLOPs per token are the
  activated ones: 6 x activated GEMM parameters (router included) + attention.
* Multi-token prediction (DeepSeek-V3, ``mtp_layers`` = D): each depth adds a projection 2h x h, three
  norms and one block (of the model's last kind); embedding and LM head are shared with the main
  model, but each depth multiplies by the LM head once more.

These functions count every expert on one card (EP = 1); expert parallelism splits the routed experts
over ep cards in :mod:`tpopt.models.moe`, which the planner uses for MoE models.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from tpopt.errors import InputError

#: Canonical MLP non-linearities (``activation``). "silu" with a gated MLP is SwiGLU, "gelu" or
#: "gelu_tanh" with a gated MLP is GeGLU; "gelu_tanh" is the tanh approximation (GPT-2's gelu_new).
ACTIVATIONS = ("silu", "gelu", "gelu_tanh", "relu", "quick_gelu")
POSITIONS = ("rope", "learned", "alibi", "none")
NORMS = ("rmsnorm", "layernorm")


@dataclass(frozen=True)
class ModelArch:
    """Architecture fields of a decoder-only model (dense: Llama / Qwen / Mistral / Gemma / GPT-2/3 /
    NeoX / BLOOM / Falcon / MPT / OPT / Phi; MoE: Mixtral / Qwen-MoE / DeepSeek / gpt-oss)."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int  # width of a dense MLP block (unused when every block is MoE)
    vocab: int
    tied_embeddings: bool = False
    qk_norm: bool = False
    gated_mlp: bool = True  # SwiGLU: gate, up, down (3 matrices); False: up, down (2 matrices)
    norm: str = "rmsnorm"  # "rmsnorm" (weight only) or "layernorm" (weight and bias)
    qkv_bias: bool = False  # bias on q, k, v projections only (Qwen2)
    linear_bias: bool = False  # bias on every linear layer (GPT-3)
    learned_positions: int = 0  # rows of a learned position-embedding table (GPT-3: 2048)
    activation: str = "silu"  # MLP non-linearity: "silu" (SwiGLU when gated), "gelu", "gelu_tanh", "relu", ...
    parallel_block: bool = False  # attention and MLP read one norm's output in parallel (GPT-J, NeoX, Falcon)
    positions: str = "rope"  # "rope", "learned" (a table of learned_positions rows), "alibi" or "none"
    sliding_window: int = 0  # attention window in tokens (0 = full causal attention)
    source: str = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    # -- further dense-block details (defaults: a Llama block) ------------------------------------
    layer_norms: int = 2  # hidden-width norms per block (Falcon-7B, Phi-2: 1; Gemma 2/3: 4)
    norm_bias: bool = True  # a LayerNorm has a bias (MPT: no); RMSNorm never has one
    o_bias: bool = False  # bias on the attention output projection (Llama attention_bias, gpt-oss)
    mlp_bias: bool = False  # biases on the MLP (and expert) linear layers
    head_bias: bool = False  # bias on the LM head (Phi-2)
    embedding_norm: bool = False  # a norm right after the embedding (BLOOM)
    attn_sinks: bool = False  # one learned sink logit per head and layer (gpt-oss)
    sliding_layers: int | None = None  # layers using the window (None = all when sliding_window > 0)
    rope_attention_factor: float = 1.0  # YaRN attention factor on RoPE cos and sin (gpt-oss: 0.1 ln 32 + 1); 1: none
    activation_clamp: float = 0.0  # gated activation's inputs clamped to this limit (gpt-oss swiglu_limit 7); 0: none
    # -- multi-head latent attention (DeepSeek-V2/V3); 0 = standard attention -----------------------
    q_lora_rank: int = 0  # low-rank query projection (0 = a full h x heads*(nope+rope) projection)
    kv_lora_rank: int = 0  # joint key/value latent width (> 0 switches MLA on)
    qk_rope_dim: int = 0  # per-head q/k dims carrying RoPE (shared k rope across heads)
    qk_nope_dim: int = 0  # per-head q/k dims without RoPE
    v_head_dim: int = 0  # per-head value width
    # -- mixture of experts; experts = 0 is a dense model --------------------------------------------
    experts: int = 0  # routed experts per MoE block
    top_k: int = 0  # routed experts per token
    expert_ffn: int = 0  # width of one routed expert
    shared_experts: int = 0  # experts every token passes through
    shared_ffn: int = 0  # width of one shared expert
    shared_expert_gate: bool = False  # sigmoid gate h x 1 on the shared expert output (Qwen2-MoE)
    router_bias: bool = False  # bias on the router (gpt-oss)
    router_groups: int = 0  # group-limited routing: experts in this many groups (DeepSeek-V3 n_group; 0 = none)
    router_group_topk: int = 0  # a token's experts come from at most this many groups (DeepSeek-V3 topk_group)
    dense_layers: int = 0  # leading blocks with a dense MLP (DeepSeek first_k_dense_replace)
    moe_step: int = 1  # after them, every moe_step-th block is MoE (Qwen2-MoE decoder_sparse_step)
    mlp_only_layers: tuple[int, ...] = ()  # further block indices with a dense MLP (Qwen-MoE mlp_only_layers)
    mtp_layers: int = 0  # multi-token-prediction depth (DeepSeek-V3 num_nextn_predict_layers)

    # -- derived widths ------------------------------------------------------------------------
    @property
    def d_attn(self) -> int:
        """Width of the query/attention-output space: heads x head_dim (MLA: heads x (nope + rope))."""
        return self.heads * self.head_dim

    @property
    def d_kv(self) -> int:
        """Width of each of the key and value projections: kv_heads x head_dim."""
        return self.kv_heads * self.head_dim

    @property
    def d_v(self) -> int:
        """Width of the attention values and of the output projection's input (MLA: heads x v_head_dim)."""
        return self.heads * (self.v_head_dim if self.mla else self.head_dim)

    @property
    def norm_params(self) -> int:
        """Parameters of one hidden-width norm (RMSNorm: h; LayerNorm: 2h, h without bias)."""
        return self.hidden * (2 if self.norm == "layernorm" and self.norm_bias else 1)

    @property
    def mla(self) -> bool:
        """Multi-head latent attention (DeepSeek-V2/V3)."""
        return self.kv_lora_rank > 0

    @property
    def moe(self) -> bool:
        """A mixture-of-experts model (routed experts in at least one block)."""
        return self.experts > 0

    @property
    def window_layers(self) -> int:
        """Layers whose attention is limited to ``sliding_window`` keys."""
        if self.sliding_window <= 0:
            return 0
        return self.layers if self.sliding_layers is None else self.sliding_layers


# ---------------------------------------------------------------------------------------------
# one block: attention, dense MLP, MoE MLP


def is_moe_layer(a: ModelArch, i: int) -> bool:
    """Block i (0-based) has routed experts: i >= dense_layers, (i - dense_layers + 1) % moe_step == 0
    and i not in mlp_only_layers."""
    return (a.experts > 0 and i >= a.dense_layers and (i - a.dense_layers + 1) % a.moe_step == 0
            and i not in a.mlp_only_layers)


def moe_layer_count(a: ModelArch) -> int:
    """Number of blocks with routed experts (MTP blocks not included)."""
    return sum(is_moe_layer(a, i) for i in range(a.layers))


def attention_linear_params(a: ModelArch) -> int:
    """Weights of one block's attention projections.

    standard: h d_attn (q) + 2 h d_kv (k, v) + d_attn h (o);
    MLA: q = h r_q + r_q H (n + r)  (or h H (n + r) without a low-rank q),
         kv = h (r_kv + r) + r_kv H (n + v),  o = H v h,
    with H heads, n / r the nope / rope dims, v the value dim, r_q / r_kv the latent ranks.
    """
    h = a.hidden
    if not a.mla:
        return h * a.d_attn + 2 * h * a.d_kv + a.d_attn * h
    qk = a.heads * (a.qk_nope_dim + a.qk_rope_dim)
    q = h * a.q_lora_rank + a.q_lora_rank * qk if a.q_lora_rank else h * qk
    kv = h * (a.kv_lora_rank + a.qk_rope_dim) + a.kv_lora_rank * a.heads * (a.qk_nope_dim + a.v_head_dim)
    return q + kv + a.d_v * h


def attention_other_params(a: ModelArch) -> int:
    """Non-matrix attention parameters of one block: biases, q/k norms, MLA latent norms, sinks.

    q/k/v biases d_attn + 2 d_kv (qkv_bias or linear_bias); output bias h (o_bias or linear_bias);
    q/k RMSNorm 2 head_dim; MLA norms on the q and kv latents r_q + r_kv; sinks one per head.
    """
    n = 0
    if a.linear_bias or a.qkv_bias:
        n += a.d_attn + 2 * a.d_kv
    if a.linear_bias or a.o_bias:
        n += a.hidden
    if a.qk_norm:
        n += 2 * a.head_dim
    if a.mla:
        n += a.q_lora_rank + a.kv_lora_rank
    if a.attn_sinks:
        n += a.heads
    return n


def _mlp_matrices(a: ModelArch) -> int:
    return 3 if a.gated_mlp else 2


def _mlp_bias(a: ModelArch, width: int) -> int:
    """Biases of one MLP of this width: up (and gate) width each, down h."""
    if not (a.linear_bias or a.mlp_bias):
        return 0
    return (2 if a.gated_mlp else 1) * width + a.hidden


def dense_mlp_linear_params(a: ModelArch) -> int:
    """Weights of a dense MLP: (3 if gated else 2) x h x ffn."""
    return _mlp_matrices(a) * a.hidden * a.ffn


def expert_linear_params(a: ModelArch) -> int:
    """Weights of one routed expert: (3 if gated else 2) x h x expert_ffn."""
    return _mlp_matrices(a) * a.hidden * a.expert_ffn


def expert_params_one(a: ModelArch) -> int:
    """All parameters of one routed expert: its weights plus biases (gpt-oss) where present."""
    return expert_linear_params(a) + _mlp_bias(a, a.expert_ffn)


def _moe_common_linear(a: ModelArch) -> int:
    """Linear weights of a MoE block every token uses: router h E, shared experts, shared gate h."""
    n = a.hidden * a.experts + a.shared_experts * _mlp_matrices(a) * a.hidden * a.shared_ffn
    if a.shared_expert_gate:
        n += a.hidden
    return n


def _moe_common_other(a: ModelArch) -> int:
    """Router bias E and shared-expert biases (when the MLPs have biases)."""
    return (a.experts if a.router_bias else 0) + a.shared_experts * _mlp_bias(a, a.shared_ffn)


def _block(a: ModelArch, moe: bool) -> tuple[int, int, int]:
    """(linear weights, other parameters, activated linear weights) of one block of a kind."""
    norms = a.layer_norms * a.norm_params
    attn_lin, attn_other = attention_linear_params(a), attention_other_params(a)
    if moe:
        lin = attn_lin + a.experts * expert_linear_params(a) + _moe_common_linear(a)
        other = attn_other + norms + a.experts * _mlp_bias(a, a.expert_ffn) + _moe_common_other(a)
        act = attn_lin + a.top_k * expert_linear_params(a) + _moe_common_linear(a)
        return lin, other, act
    lin = attn_lin + dense_mlp_linear_params(a)
    return lin, attn_other + norms + _mlp_bias(a, a.ffn), lin


@functools.lru_cache(maxsize=64)
def _kinds(a: ModelArch) -> tuple[bool, ...]:
    """Whether each block is a MoE block (a model's constant: remembered, the memory terms ask per table slice)."""
    return tuple(is_moe_layer(a, i) for i in range(a.layers))


def _mtp_is_moe(a: ModelArch) -> bool:
    return a.layers > 0 and is_moe_layer(a, a.layers - 1)


def block_param_arrays(a: ModelArch) -> tuple[np.ndarray, np.ndarray]:
    """Per block (in order): (linear weights, other parameters), all experts counted (EP = 1).

    The memory model splits the linear weights by tp and replicates the rest; MTP blocks are not
    included (see :func:`mtp_params`).
    """
    table = {m: _block(a, m) for m in (False, True)}
    kinds = _kinds(a)
    return (np.array([table[m][0] for m in kinds], dtype=float),
            np.array([table[m][1] for m in kinds], dtype=float))


def layer_linear_params(a: ModelArch) -> int:
    """Weights of the linear layers of one transformer block (the heaviest block: a MoE block counts
    every expert, the router and the shared experts).

    attention: h*d_attn (q) + 2*h*d_kv (k, v) + d_attn*h (o); MLP: (3 if gated else 2) * h * ffn.
    """
    return max(_block(a, m)[0] for m in set(_kinds(a)) or {False})


def layer_params(a: ModelArch) -> int:
    """All trainable parameters of one block (the heaviest): linears + biases + norms + q/k norms."""
    return max(sum(_block(a, m)[:2]) for m in set(_kinds(a)) or {False})


def embedding_params(a: ModelArch) -> int:
    """Input embedding table: vocab x hidden (the LM head, when untied, is the same size)."""
    return a.vocab * a.hidden


def mtp_params(a: ModelArch) -> int:
    """Multi-token-prediction modules: D x (one block + 2h x h projection + 3 norms)."""
    if a.mtp_layers <= 0:
        return 0
    lin, other, _ = _block(a, _mtp_is_moe(a))
    return a.mtp_layers * (lin + other + 2 * a.hidden * a.hidden + 3 * a.norm_params)


def mtp_linear_params(a: ModelArch) -> int:
    """Linear weights of the MTP modules: D x (one block's linears + 2h x h projection)."""
    if a.mtp_layers <= 0:
        return 0
    return a.mtp_layers * (_block(a, _mtp_is_moe(a))[0] + 2 * a.hidden * a.hidden)


def _per_model(fn: Callable[[ModelArch], int]) -> Callable[[ModelArch], int]:
    """Memoised per (frozen, hashable) architecture: the counts are pure functions of it and the solvers
    ask for them once per card count or rollout shape. An unhashable stand-in is counted afresh."""
    cached = functools.lru_cache(maxsize=1024)(fn)

    @functools.wraps(fn)
    def count(a: ModelArch) -> int:
        try:
            return cached(a)
        except TypeError:
            return fn(a)

    return count


@_per_model
def param_count(a: ModelArch) -> int:
    """Exact trainable parameter count N (every expert counted).

    N = sum over blocks of block params + V*h (embedding) + V*h (LM head, if untied) + LM-head bias
        + final norm + embedding norm + learned position table + MTP modules.
    """
    lin, other = block_param_arrays(a)
    n = int(round(lin.sum() + other.sum())) + embedding_params(a) + a.norm_params
    if not a.tied_embeddings:
        n += embedding_params(a)
    if a.head_bias:
        n += a.vocab
    if a.embedding_norm:
        n += a.norm_params
    n += a.learned_positions * a.hidden
    return n + mtp_params(a)


def expert_params(a: ModelArch) -> int:
    """Routed-expert parameters of the whole model: MoE blocks (and MoE MTP blocks) x E x one expert.

    Qwen3-235B-A22B: 94 x 128 x 3 x 4096 x 1536 = 227,096,395,776 (chapter 10.5: 423 GiB in BF16).
    """
    blocks = moe_layer_count(a) + (a.mtp_layers if _mtp_is_moe(a) else 0)
    return blocks * a.experts * expert_params_one(a)


def expert_weight_bytes(a: ModelArch, ep: int = 1, bytes_per_param: float = 2.0) -> float:
    """Routed-expert weight bytes one expert-parallel rank holds: expert_params x bytes / ep.

    Qwen3-235B-A22B in BF16: 423.0 GiB at EP 1, 26.4 GiB per rank at EP 16 (chapter 10.5).
    """
    if ep < 1 or (a.experts and a.experts % ep):
        raise InputError(f"expert parallelism {ep} must divide the {a.experts} experts")
    return expert_params(a) * bytes_per_param / ep


def activated_params(a: ModelArch, input_embedding: bool = True) -> int:
    """Parameters one token uses: N minus the routed experts it is not sent to,
    N - (E - k) x one expert x MoE blocks. Equals N for a dense model.

    With ``input_embedding`` (the default) the whole embedding table is counted, as Mixtral's
    "12.9B active" does; DeepSeek's and gpt-oss's model cards leave the input embedding out
    (``input_embedding=False``: gpt-oss-120b 5.13B, DeepSeek-V3 36.6B ~ "37B").
    """
    blocks = moe_layer_count(a) + (a.mtp_layers if _mtp_is_moe(a) else 0)
    n = param_count(a) - blocks * (a.experts - a.top_k) * expert_params_one(a)
    return n if input_embedding else n - embedding_params(a)


def block_gemm_params(a: ModelArch) -> int:
    """Linear weights one token multiplies in the blocks (activated experts only, router included)."""
    table = {m: _block(a, m)[2] for m in (False, True)}
    return sum(table[m] for m in _kinds(a))


@_per_model
def gemm_params(a: ModelArch) -> int:
    """Parameters a token multiplies in matrix units: all linear layers incl. the LM head (for a MoE
    model the activated ones: top-k routed experts, shared experts, router).

    The input-embedding lookup is a gather, not a GEMM, so it is excluded; with tied embeddings the
    shared table still multiplies once as the LM head. Each MTP depth adds its block, its 2h x h
    projection and another LM-head multiply.
    """
    n = block_gemm_params(a) + a.vocab * a.hidden
    if a.mtp_layers > 0:
        n += a.mtp_layers * (_block(a, _mtp_is_moe(a))[2] + 2 * a.hidden * a.hidden + a.vocab * a.hidden)
    return n


def mean_keys_per_query(seq_len: ArrayLike, window: int = 0) -> NDArray[np.float64]:
    """Average keys a causal query sees: (s + 1) / 2, or with a window w < s:
    (w (w + 1) / 2 + (s - w) w) / s (queries past the window see w keys)."""
    s = np.asarray(seq_len, dtype=float)
    full = (s + 1) / 2.0
    if window <= 0:
        return full
    w = float(window)
    windowed = (w * (w + 1) / 2.0 + (s - w) * w) / np.maximum(s, 1.0)
    return np.where(s <= w, full, windowed)


def attention_flops_per_token(a: ModelArch, seq_len: float | NDArray[np.float64]) -> float | NDArray[np.float64]:
    """Causal attention FLOPs per token, forward + backward: 12 * L * d_attn * (s + 1) / 2.

    Forward QK^T and PV each cost 2 * d_attn FLOPs per (query, key) pair; backward is twice the
    forward; a causal query sees on average (s + 1) / 2 keys. Generally, per layer,
    6 * (d_qk + d_v) * mean keys, with d_qk = heads x (nope + rope) and d_v = heads x v_head_dim under
    MLA, and min(i, w) keys on the window layers. MTP blocks attend over the full sequence.
    """
    if not a.mla and a.window_layers == 0:
        return 12.0 * (a.layers + a.mtp_layers) * a.d_attn * (seq_len + 1) / 2.0
    per_pair = 6.0 * (a.d_attn + a.d_v)
    full_layers = a.layers - a.window_layers + a.mtp_layers
    total = per_pair * full_layers * mean_keys_per_query(seq_len)
    if a.window_layers:
        total = total + per_pair * a.window_layers * mean_keys_per_query(seq_len, a.sliding_window)
    return total


def flops_per_token(a: ModelArch, seq_len: float | NDArray[np.float64]) -> float | NDArray[np.float64]:
    """Training FLOPs per token: 6 * gemm_params + 12 * L * d_attn * (s + 1) / 2."""
    return 6.0 * gemm_params(a) + attention_flops_per_token(a, seq_len)


@functools.lru_cache(maxsize=64)
def mlp_activation_width(a: ModelArch) -> int:
    """Widest MLP width one token activates in a block: ffn for a dense block,
    top_k x expert_ffn + shared experts x shared_ffn for a MoE block (what its activations scale with)."""
    widths = [a.top_k * a.expert_ffn + a.shared_experts * a.shared_ffn if m else a.ffn for m in set(_kinds(a))]
    return max(widths or [a.ffn])


def largest_unit_params(a: ModelArch) -> int:
    """Largest unit that ZeRO-3/FSDP gathers at once: a block, the embedding or the LM head."""
    return max(layer_params(a), embedding_params(a))
