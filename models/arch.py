"""What is trained: a dense decoder-only transformer, its exact parameter count and FLOPs per token.

Conventions (as the training-systems chapter counts parameters):

* N counts every trainable tensor: input embedding, untied LM head, per-layer attention and MLP
  matrices (+ biases where the architecture has them), two norms per layer, q/k norms (head_dim each)
  where present, the final norm, and learned position embeddings where present.
  Qwen3-8B (36 x 4096, 32/8 heads of 128, FFN 12288, vocab 151936, untied) -> N = 8,190,735,360.
* Training FLOPs per token = 6 x (parameters of every linear layer incl. the LM head, excluding the
  input-embedding lookup) + causal attention 12 x L x d_attn x (s + 1) / 2, d_attn = heads x head_dim.
  Qwen3-8B at s = 8192 -> 52.7 GFLOP/token, 4.31e14 FLOP per sequence.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ModelArch:
    """Architecture fields of a dense decoder-only model (Llama / Qwen2 / Qwen3 / Mistral / GPT-3)."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
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
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    # -- derived widths ------------------------------------------------------------------------
    @property
    def d_attn(self) -> int:
        """Width of the query/attention-output space: heads x head_dim."""
        return self.heads * self.head_dim

    @property
    def d_kv(self) -> int:
        """Width of each of the key and value projections: kv_heads x head_dim."""
        return self.kv_heads * self.head_dim

    @property
    def norm_params(self) -> int:
        """Parameters of one hidden-width norm (RMSNorm: h; LayerNorm: 2h)."""
        return self.hidden * (2 if self.norm == "layernorm" else 1)


def layer_linear_params(a: ModelArch) -> int:
    """Weights of the linear layers of one transformer block.

    attention: h*d_attn (q) + 2*h*d_kv (k, v) + d_attn*h (o); MLP: (3 if gated else 2) * h * ffn.
    """
    attn = a.hidden * a.d_attn + 2 * a.hidden * a.d_kv + a.d_attn * a.hidden
    mlp = (3 if a.gated_mlp else 2) * a.hidden * a.ffn
    return attn + mlp


def layer_params(a: ModelArch) -> int:
    """All trainable parameters of one block: linears + biases + 2 norms + q/k norms."""
    n = layer_linear_params(a) + 2 * a.norm_params
    if a.qk_norm:
        n += 2 * a.head_dim
    if a.linear_bias:
        n += a.d_attn + 2 * a.d_kv + a.hidden  # q, k, v, o biases
        n += (2 if a.gated_mlp else 1) * a.ffn + a.hidden  # up(/gate) and down biases
    elif a.qkv_bias:
        n += a.d_attn + 2 * a.d_kv
    return n


def embedding_params(a: ModelArch) -> int:
    """Input embedding table: vocab x hidden (the LM head, when untied, is the same size)."""
    return a.vocab * a.hidden


def param_count(a: ModelArch) -> int:
    """Exact trainable parameter count N.

    N = L * layer_params + V*h (embedding) + V*h (LM head, if untied) + final norm
        + learned position table.
    """
    n = a.layers * layer_params(a) + embedding_params(a) + a.norm_params
    if not a.tied_embeddings:
        n += embedding_params(a)
    n += a.learned_positions * a.hidden
    return n


def gemm_params(a: ModelArch) -> int:
    """Parameters that take part in matrix multiplies: all linear layers incl. the LM head.

    The input-embedding lookup is a gather, not a GEMM, so it is excluded; with tied embeddings the
    shared table still multiplies once as the LM head.
    """
    return a.layers * layer_linear_params(a) + a.vocab * a.hidden


def attention_flops_per_token(a: ModelArch, seq_len):
    """Causal attention FLOPs per token, forward + backward: 12 * L * d_attn * (s + 1) / 2.

    Forward QK^T and PV each cost 2 * d_attn FLOPs per (query, key) pair; backward is twice the
    forward; a causal query sees on average (s + 1) / 2 keys.
    """
    return 12.0 * a.layers * a.d_attn * (seq_len + 1) / 2.0


def flops_per_token(a: ModelArch, seq_len):
    """Training FLOPs per token: 6 * gemm_params + 12 * L * d_attn * (s + 1) / 2."""
    return 6.0 * gemm_params(a) + attention_flops_per_token(a, seq_len)



def largest_unit_params(a: ModelArch) -> int:
    """Largest unit that ZeRO-3/FSDP gathers at once: a block, the embedding or the LM head."""
    return max(layer_params(a), embedding_params(a))
