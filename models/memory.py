"""Per-card memory: training states (precision recipe x ZeRO stage x offload), activations by
recompute group, temporary buffers. Peak = max over time of the sum, never a sum of maxima
(chapter 10.1.2); the terms below are what is simultaneously live at the peak of a step.

All functions broadcast over numpy arrays of tp / pp / dp / zero stage / micro-batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from tpopt.errors import InputError
from tpopt.models.arch import (
    ModelArch,
    attention_flops_per_token,
    block_gemm_params,
    block_param_arrays,
    embedding_params,
    largest_unit_params,
    layer_linear_params,
    layer_params,
    mlp_activation_width,
    mtp_linear_params,
    mtp_params,
)
from tpopt.models.numeric import ArrayMemo, FloatArray, Floats

# ---------------------------------------------------------------------------------------------
# precision recipes: bytes per parameter of each persistent training state


@dataclass(frozen=True)
class StateRecipe:
    """Bytes per parameter of each persistent training state (mixed-precision Adam)."""

    name: str
    weights: float  # copy used by the matrix units
    grads: float
    master: float  # FP32 master weights
    moments: float  # Adam first + second moments
    matrix: str = "bf16"  # precision of the matrix units: which peak the step-time model uses

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.master + self.moments

    @property
    def optimizer(self) -> float:
        """Master + moments: what ZeRO-1 shards first and CPU offload moves to the host."""
        return self.master + self.moments


RECIPES = {
    # BF16 weights 2 + BF16 grads 2 + FP32 master 4 + m 4 + v 4 = 16 B/param (chapter 10.1.2)
    "bf16-mixed": StateRecipe("bf16-mixed", 2.0, 2.0, 4.0, 8.0),
    # FP32 gradients: 18 B/param (chapter 10.1.2)
    "bf16-mixed-fp32-grad": StateRecipe("bf16-mixed-fp32-grad", 2.0, 4.0, 4.0, 8.0),
    # FP8 (E4M3) operand copy with one FP32 scale per 128x128 block replaces the BF16 copy:
    # 1 + 4/16384 B/param; grads, master and moments unchanged (chapter 10.1.2, exercise 10-3)
    "fp8-mixed": StateRecipe("fp8-mixed", 1.0 + 4.0 / 16384.0, 2.0, 4.0, 8.0, "fp8"),
    # MXFP8 (OCP microscaling: E4M3 with one E8M0 scale byte per 32 elements): 1 + 1/32 B/param (Blackwell)
    "mxfp8-mixed": StateRecipe("mxfp8-mixed", 1.0 + 1.0 / 32.0, 2.0, 4.0, 8.0, "mxfp8"),
    # NVFP4 (E2M1 with one E4M3 scale per 16 elements and a per-tensor FP32 scale): 0.5 + 1/16 B/param
    "nvfp4-mixed": StateRecipe("nvfp4-mixed", 0.5 + 1.0 / 16.0, 2.0, 4.0, 8.0, "nvfp4"),
    # FP16 with loss scaling (Megatron-LM's published runs): the same bytes, the FP16 matrix peak
    "fp16-mixed": StateRecipe("fp16-mixed", 2.0, 2.0, 4.0, 8.0, "fp16"),
    # ... with FP32 gradient accumulation buffers (Megatron-LM: 18 B/param, Korthikanti et al. 2022)
    "fp16-mixed-fp32-grad": StateRecipe("fp16-mixed-fp32-grad", 2.0, 4.0, 4.0, 8.0, "fp16"),
}


def recipe(name: str) -> StateRecipe:
    try:
        return RECIPES[name]
    except KeyError:
        raise InputError(f"unknown precision {name!r} (known: {', '.join(RECIPES)})") from None


LOW_PRECISION_MATRIX = ("fp8", "mxfp8", "nvfp4")
"""Matrix precisions whose operand copy a stack may keep in place of the BF16 weights (fp8_param_gather)."""


def stored_recipe(name: str, low_precision_params: bool) -> StateRecipe:
    """The recipe as a stack stores it: under an FP8 / MXFP8 / NVFP4 recipe without ``low_precision_params``
    (Megatron-Core's default, ``--fp8-param-gather`` off) the weights stay BF16, w = 2 B/param, and each GEMM
    casts them (the cast is workspace, not state); with it the low-precision copy replaces them (w = 1 + 4/16384
    for FP8, chapter 10.1.2) and ZeRO gathers that copy. Other recipes are unchanged.
    fp8-mixed: (w, g, master, moments) = (2, 2, 4, 8) = 16 B/param stored, (1.0002, 2, 4, 8) with the flag."""
    r = recipe(name)
    if r.matrix in LOW_PRECISION_MATRIX and not low_precision_params:
        return replace(r, weights=2.0)
    return r


def persistent_state_bytes(n_params: Floats, r: StateRecipe) -> Floats:
    """Unsharded persistent training state: N x (weights + grads + master + moments).

    Qwen3-8B, bf16-mixed: 16 N = 131.1 GB = 122.1 GiB.
    """
    return n_params * r.total


# ---------------------------------------------------------------------------------------------
# ZeRO sharding


def zero_state_bytes(n_params: ArrayLike, dp: ArrayLike, zero_stage: ArrayLike, r: StateRecipe,
                     offload_optimizer: ArrayLike = False) -> FloatArray:
    """Per-card persistent state under ZeRO stage 0-3 over a data-parallel group of size d.

    M0 = (w + g + o) N,  M1 = (w + g) N + o N/d,  M2 = w N + (g + o) N/d,  M3 = (w + g + o) N/d,
    where w, g, o are bytes/param of weights, gradients and optimizer (master + moments).
    For bf16-mixed (w, g, o) = (2, 2, 12): M1 = 4N + 12N/d, M2 = 2N + 14N/d, M3 = 16N/d
    (chapter 10.2.1; d = 8 -> 122.1 / 42.0 / 28.6 / 15.3 GiB for Qwen3-8B).
    With ``offload_optimizer`` the optimizer share o lives in host memory instead.
    """
    n = np.asarray(n_params, dtype=float)
    d = np.asarray(dp, dtype=float)
    z = np.asarray(zero_stage)
    w = r.weights * n / np.where(z >= 3, d, 1.0)
    g = r.grads * n / np.where(z >= 2, d, 1.0)
    o = r.optimizer * n / np.where(z >= 1, d, 1.0)
    o = np.where(offload_optimizer, 0.0, o)
    return w + g + o


def host_optimizer_bytes(n_params: ArrayLike, dp: ArrayLike, zero_stage: ArrayLike, r: StateRecipe) -> FloatArray:
    """Optimizer state a card offloads to host memory: o N / d (ZeRO >= 1) or o N (ZeRO-0)."""
    d = np.asarray(dp, dtype=float)
    return r.optimizer * np.asarray(n_params, dtype=float) / np.where(np.asarray(zero_stage) >= 1, d, 1.0)


def _codes(x: NDArray[Any]) -> tuple[NDArray[Any], NDArray[np.signedinteger[Any]]]:
    """(distinct values, index of each element's value): O(n) for small whole numbers (tp, pp)."""
    if x.size and x.min() >= 0 and x.max() <= 65536 and np.all(x == np.floor(x)):
        ints = x.astype(np.int64)
        values = np.flatnonzero(np.bincount(ints.ravel()))
        lookup = np.zeros(values[-1] + 1, dtype=np.int64)
        lookup[values] = np.arange(len(values))
        return values.astype(float), lookup[ints]
    distinct, inverse = np.unique(x, return_inverse=True)
    return distinct, inverse.reshape(x.shape)


def stage_params(a: ModelArch, tp: ArrayLike, pp: ArrayLike) -> FloatArray:
    """Parameters held by one card of the heaviest pipeline stage, before ZeRO sharding.

    A stage holds ceil(L / pp) blocks; the first also holds the input embedding, the last the LM
    head (if untied), the final norm and any MTP modules; with pp = 1 one stage holds everything.
    Tensor parallelism splits every linear layer and the (vocab-parallel) embedding and LM head by
    tp; norms are replicated. With tp = pp = 1 this is exactly N. When blocks differ (dense blocks
    before MoE blocks), the heaviest stage is the largest of the first stage, the last stage and any
    run of ceil(L / pp) consecutive blocks. A MoE block holds every expert (EP = 1; models/moe.py splits
    them by expert parallelism).
    """
    t = np.asarray(tp, dtype=float)
    p = np.asarray(pp)
    linear = layer_linear_params(a)
    other = layer_params(a) - linear  # norms, biases, q/k norms: replicated under TP

    def ends(tt: Floats) -> tuple[Floats, Floats]:
        return stage_end_params(a, tt)

    lin, oth = block_param_arrays(a)
    if np.all(lin == linear) and np.all(oth == other):  # every block alike
        blocks = np.ceil(a.layers / p)
        per_block = linear / t + other
        head_end, tail_end = ends(t)
        first = blocks * per_block + head_end
        last = blocks * per_block + tail_end
        single = a.layers * per_block + head_end + tail_end
        return np.where(p <= 1, single, np.maximum(first, last))
    t, p = np.broadcast_arrays(t, p)
    (tu, ti), (pu, pi) = _codes(t), _codes(p)
    cl, co = np.concatenate([[0.0], np.cumsum(lin)]), np.concatenate([[0.0], np.cumsum(oth)])
    table = np.empty((len(tu), len(pu)))  # one value per distinct (tp, pp): plan grids repeat them
    for i, tt in enumerate(tu):
        head_end, tail_end = ends(float(tt))
        for j, stages in enumerate(pu):
            if stages <= 1:
                table[i, j] = cl[-1] / tt + co[-1] + head_end + tail_end
                continue
            b = min(-(-a.layers // int(stages)), a.layers)
            run = (cl[b:] - cl[:-b]) / tt + (co[b:] - co[:-b])  # every run of b consecutive blocks
            table[i, j] = max(run[0] + head_end, run[-1] + tail_end, run.max())
    per_card: FloatArray = table[ti, pi]
    return per_card


def stage_end_params(a: ModelArch, tp: ArrayLike, tied_copy: bool = False) -> tuple[Floats, Floats]:
    """(first-stage extra, last-stage extra) parameters per card: the embedding (/ tp) with learned
    positions and an embedding norm; the final norm, the LM head (/ tp; when tied only as the copy
    Megatron-LM keeps on a separate last stage, ``tied_copy``), its bias and any MTP modules."""
    emb = embedding_params(a) / np.asarray(tp, dtype=float)
    pos = a.learned_positions * a.hidden + (a.norm_params if a.embedding_norm else 0)
    mtp_lin = mtp_linear_params(a)
    tail_other = a.norm_params + (a.vocab if a.head_bias else 0) + mtp_params(a) - mtp_lin
    head = emb if (not a.tied_embeddings or tied_copy) else 0.0
    return emb + pos, head + mtp_lin / np.asarray(tp, dtype=float) + tail_other


def stage_param_counts(a: ModelArch, tp: ArrayLike, layers: Sequence[float]) -> list[Floats]:
    """Parameters one card of each pipeline stage holds, for an explicit split of the layers into
    consecutive blocks (stage g holds blocks sum(layers[:g]) .. sum(layers[:g+1]) - 1).

    Stage 0 adds the first-stage extras, the last stage the last-stage extras (:func:`stage_end_params`);
    with tied embeddings and more than one stage the last stage keeps its own copy of the table for the
    head (Megatron-LM all-reduces the two copies' gradients). Linear layers are split by tp.
    """
    t = np.asarray(tp, dtype=float)
    lin, oth = block_param_arrays(a)
    cl, co = np.concatenate([[0.0], np.cumsum(lin)]), np.concatenate([[0.0], np.cumsum(oth)])
    head_end, tail_end = stage_end_params(a, t, tied_copy=len(layers) > 1)
    out: list[Floats] = []
    start = 0
    for g, n in enumerate(layers):
        end = start + int(n)
        x = (cl[end] - cl[start]) / t + (co[end] - co[start])
        if g == 0:
            x = x + head_end
        if g == len(layers) - 1:
            x = x + tail_end
        out.append(x)
        start = end
    return out


def embedding_shard_params(a: ModelArch, tp: ArrayLike) -> FloatArray:
    """Input-embedding parameters per card (vocab-parallel under TP): V h / tp."""
    return embedding_params(a) / np.asarray(tp, dtype=float)


# ---------------------------------------------------------------------------------------------
# activations: per-layer inventory of saved tensors by recompute group (Korthikanti et al. 2022,
# generalised to RMSNorm / SwiGLU / GQA / q-k norm / flash attention / optional dropout)

RECOMPUTE_GROUPS = ("norm", "mlp", "attn", "mla_up")

MEGATRON_MODULES = {"layernorm": "norm", "core_attn": "attn", "moe_act": "mlp", "mla_up_proj": "mla_up"}
"""Megatron-Core's selective-recompute module names (TransformerConfig.recompute_modules) that are tpopt
groups: layernorm = norm, core_attn = attn, moe_act = mlp (the experts' activation rebuilt from the saved
fc1 output, as the dense MLP's), mla_up_proj = mla_up (multi-head latent attention's up-projected q, k, v
rebuilt from the saved latents)."""


OP_RECOMPUTE = "op"
"""torchtitan's selective per-op activation checkpointing (activation_checkpoint.mode = "selective",
selective_ac_option = "op"): a recompute mode of its own (:func:`op_sac_saved_tensors`), not a set of groups."""

OP_NAMES = ("op", "selective-op", "selective_op")
"""Names :func:`parse_recompute` reads as :data:`OP_RECOMPUTE`."""


def parse_recompute(value: object) -> str:
    """Canonical recompute name: "none", "full", "op" (torchtitan's selective per-op checkpointing:
    :data:`OP_RECOMPUTE`), or a '+'-joined subset of norm / mlp / attn / mla_up (Megatron-Core's module names
    accepted too: MEGATRON_MODULES)."""
    if isinstance(value, (list, tuple, set, frozenset)):
        parts = set(value)
    else:
        text = str(value).strip().lower()
        if text in ("none", "", "off"):
            return "none"
        if text in ("full", "layer", "whole"):
            return "full"
        if text == "selective":
            return "attn"
        if text in OP_NAMES:
            return OP_RECOMPUTE
        parts = {x.strip() for x in text.split("+")}
    parts.discard("none")
    if parts & (set(OP_NAMES) | {OP_RECOMPUTE}):
        raise InputError(f"recompute {OP_RECOMPUTE!r} (torchtitan's selective per-op checkpointing) is a mode of its "
                         "own; do not combine it with groups")
    parts = {MEGATRON_MODULES.get(p, p) for p in parts}
    if "full" in parts:
        if len(parts) > 1:
            raise InputError("recompute 'full' rebuilds whole layers; do not combine it with groups")
        return "full"
    bad = parts - set(RECOMPUTE_GROUPS)
    if bad:
        raise InputError(f"unknown recompute group(s) {sorted(bad)} (use none, full, or norm/mlp/attn/mla_up joined "
                         "by '+')")
    if not parts:
        return "none"
    return "+".join(g for g in RECOMPUTE_GROUPS if g in parts)


class SavedTensor(NamedTuple):
    """One tensor a block keeps for its backward, per micro-batch, before any split across cards."""

    name: str
    group: str  # "keep" (needed whatever is rebuilt) or the recompute group that rebuilds it
    region: str  # "tp": split by t under tensor parallelism; "seq": split by t only with sequence parallelism
    bytes: Floats
    gemm_input: bool  # an input a matrix product needs for its backward
    unit: str  # tensors rebuilt together (the recompute workspace is the largest such unit)


_SAVED = ArrayMemo(entries=512, cells=4096)
"""(model, tokens, flags) whose saved tensors are kept, oldest first out, up to 4,096 sequence-length and
micro-batch entries (together) per call."""


def saved_tensors(a: ModelArch, seq_len: ArrayLike, micro_batch: ArrayLike, act_bytes: float = 2.0,
                  flash_attention: bool = True, dropout: bool = False) -> list[SavedTensor]:
    """:func:`_saved_tensors`, remembered for small grids (every table slice of the memory terms asks again for
    the same tokens: once per recompute set, schedule and stage class)."""
    s, b = np.asarray(seq_len, dtype=float), np.asarray(micro_batch, dtype=float)
    key = _SAVED.key((s, b), a, float(act_bytes), bool(flash_attention), bool(dropout))
    if key is None:
        return _saved_tensors(a, s, b, act_bytes, flash_attention, dropout)
    got: list[SavedTensor] | None = _SAVED.get(key)
    if got is None:
        got = _saved_tensors(a, s, b, act_bytes, flash_attention, dropout)
        for t in got:  # shared between callers: read-only
            if isinstance(t.bytes, np.ndarray):
                t.bytes.flags.writeable = False
        _SAVED.put(key, got)
    return list(got)


def _saved_tensors(a: ModelArch, seq_len: ArrayLike, micro_batch: ArrayLike, act_bytes: float = 2.0,
                   flash_attention: bool = True, dropout: bool = False) -> list[SavedTensor]:
    """Tensors one block saves for backward (bytes per micro-batch of ``micro_batch`` sequences, tp = 1).

    Per token, h = hidden, f = ffn, d_q = heads x head_dim, d_kv = kv_heads x head_dim, e = act_bytes:
    keep:  the norm inputs (h each; one norm in a parallel block), q/k-norm inputs (d_q + d_kv, Qwen3),
           q, k, v after RoPE (d_q + 2 d_kv), attention output (d_q), log-sum-exp (4 bytes x heads, flash
           only), MLP gate and up outputs (2 f; the up output f without a gate), and with dropout a
           1-byte mask after each block output (h).
    norm:  the normalised outputs feeding QKV and MLP up (h each; sequence region).
    mlp:   the input of the down projection: act(gate) x up (f), or act(up) without a gate (f).
    attn:  without flash attention the softmax output (heads x s per token) and, with dropout, its
           1-byte mask and the dropped output; nothing with flash attention (it stores no scores).
    Megatron GPT (LayerNorm, GELU 4h, dropout, no flash): 34 s b h + 5 heads s^2 b bytes at e = 2,
    Korthikanti et al.'s per-layer total; under TP without SP 10 s b h stay whole and the rest is / t.
    """
    s = np.asarray(seq_len, dtype=float)
    tokens = s * np.asarray(micro_batch, dtype=float)
    h, f, dq, dkv, e = a.hidden, mlp_activation_width(a), a.d_attn, a.d_kv, act_bytes
    norms = 1 if a.parallel_block else 2
    out = [SavedTensor("norm inputs", "keep", "seq", tokens * norms * h * e, False, "")]
    if a.qk_norm:
        out.append(SavedTensor("q/k-norm inputs", "keep", "tp", tokens * (dq + dkv) * e, False, ""))
    # multi-head latent attention: q, k, v are the up-projections' outputs, rebuilt from the saved latents
    # (small, not counted) under mla_up (Megatron-Core's mla_up_proj)
    mla = a.kv_lora_rank > 0
    out.append(SavedTensor("q, k, v", "mla_up" if mla else "keep", "tp", tokens * (dq + 2 * dkv) * e, True,
                           "mla_up" if mla else ""))
    out.append(SavedTensor("attention output", "keep", "tp", tokens * a.d_v * e, True, ""))
    if flash_attention:
        out.append(SavedTensor("log-sum-exp", "keep", "tp", tokens * a.heads * 4.0, False, ""))
    out.append(SavedTensor("MLP gate and up" if a.gated_mlp else "MLP up", "keep", "tp",
                           tokens * (2 * f if a.gated_mlp else f) * e, False, ""))
    if dropout:
        out.append(SavedTensor("dropout masks", "keep", "seq", tokens * (1 if a.parallel_block else 2) * h, False, ""))
    for i in range(norms):
        out.append(SavedTensor(f"norm output {i + 1}", "norm", "seq", tokens * h * e, True, f"norm{i}"))
    out.append(SavedTensor("MLP product" if a.gated_mlp else "MLP activation", "mlp", "tp", tokens * f * e, True,
                           "mlp"))
    if not flash_attention:
        out.append(SavedTensor("softmax output", "attn", "tp", tokens * a.heads * s * e, False, "attn"))
        if dropout:
            out.append(SavedTensor("attention dropout mask + output", "attn", "tp",
                                   tokens * a.heads * s * (1.0 + e), True, "attn"))
    return out


def _split(t: SavedTensor, tp: ArrayLike, sequence_parallel: bool) -> Floats:
    """Bytes of one saved tensor on one card: / t in the TP region, / t in the sequence region with SP; whole
    in the "partial" region (a row-parallel GEMM's output before its reduce-scatter: every token, full width);
    the "scatter" region exists under TP only (a reduce-scatter's output, / t; nothing at t = 1)."""
    tp = np.asarray(tp, dtype=float)
    if t.region == "partial":
        return t.bytes * np.ones_like(tp)
    if t.region == "scatter":
        return np.where(tp > 1, t.bytes / tp, 0.0)
    return t.bytes / (tp if (t.region == "tp" or sequence_parallel) else 1.0)


def layer_activation_groups(a: ModelArch, seq_len: ArrayLike, micro_batch: ArrayLike, act_bytes: float = 2.0,
                            flash_attention: bool = True, dropout: bool = False) -> dict[str, Floats]:
    """Bytes one block saves for backward by group (keep / norm / mlp / attn), tp = 1.

    The chapter's 10.2.2 example (Qwen3-8B, 128 tokens, FP32): the product (6 MiB) and the two norm
    outputs (2 MiB each) are the 10 MiB per block that can be rebuilt (see :func:`saved_tensors`).
    """
    tensors = saved_tensors(a, seq_len, micro_batch, act_bytes, flash_attention, dropout)
    zero = 0.0 * np.asarray(seq_len, dtype=float) * np.asarray(micro_batch, dtype=float)
    return {g: sum((t.bytes for t in tensors if t.group == g), zero) for g in ("keep",) + RECOMPUTE_GROUPS}


def _rebuilt(recompute: str) -> set[str]:
    if recompute == "full":
        return {"keep", *RECOMPUTE_GROUPS}
    return set() if recompute == "none" else set(recompute.split("+"))


def activation_bytes_per_microbatch(a: ModelArch, seq_len: ArrayLike, micro_batch: ArrayLike, tp: ArrayLike,
                                    layers: ArrayLike, recompute: str, act_bytes: float = 2.0,
                                    flash_attention: bool = True, dropout: bool = False,
                                    sequence_parallel: bool = True, quantized_input_bytes: float = 0.0,
                                    input_regather: bool = True, gathered_input_bytes: float = 0.0) -> Floats:
    """Activation bytes one micro-batch keeps *until its backward* on one card of a stage of ``layers``
    blocks (the recompute workspace is separate: :func:`recompute_workspace_bytes`); with
    ``quantized_input_bytes`` > 0 the linear layers keep their quantised inputs (:func:`quantized_inputs`);
    with ``input_regather`` false the column-parallel layers keep their gathered inputs
    (:func:`kept_gathered_input`, ``gathered_input_bytes`` per element where the gather moves FP8 copies).

    none:      layers x every saved tensor
    selective: layers x the tensors of the groups not rebuilt
    full:      layers x the block input (h per token, sequence region)
    op:        layers x torchtitan's per-op saved set (:func:`op_sac_saved_tensors`)
    Tensor parallelism divides the TP-region tensors by t; sequence parallelism also the others.
    """
    if recompute == OP_RECOMPUTE:
        saved = op_sac_saved_tensors(a, seq_len, micro_batch, act_bytes)
        zero_op = 0.0 * np.asarray(tp, dtype=float) * np.asarray(micro_batch, dtype=float)
        return np.asarray(layers, dtype=float) * sum((_split(t, tp, sequence_parallel) for t in saved), zero_op)
    tensors = saved_tensors(a, seq_len, micro_batch, act_bytes, flash_attention, dropout)
    if quantized_input_bytes > 0:
        tensors = quantized_inputs(tensors, a, seq_len, micro_batch, quantized_input_bytes, act_bytes)
    layers = np.asarray(layers, dtype=float)
    if recompute == "full":
        tokens = np.asarray(seq_len, dtype=float) * np.asarray(micro_batch, dtype=float)
        block_input = SavedTensor("block input", "keep", "seq", tokens * a.hidden * act_bytes, False, "")
        return layers * _split(block_input, tp, sequence_parallel)
    gone = _rebuilt(recompute)
    zero = 0.0 * np.asarray(tp, dtype=float) * np.asarray(micro_batch, dtype=float)
    gathered = 0.0 if quantized_input_bytes > 0 else gathered_input_bytes
    return layers * sum((_held_bytes(t, tp, sequence_parallel, act_bytes, input_regather, gathered)
                         for t in tensors if t.group not in gone), zero)


def _held_bytes(t: SavedTensor, tp: ArrayLike, sequence_parallel: bool, act_bytes: float, input_regather: bool,
                gathered_bytes: float) -> Floats:
    """One saved tensor's bytes on one card: a column-parallel layer's input (a norm output) kept gathered where
    the stack does not gather it again (:func:`kept_gathered_input`), else :func:`_split`."""
    if not input_regather and t.group == "norm":
        return kept_gathered_input(t, tp, sequence_parallel, act_bytes, gathered_bytes)
    return _split(t, tp, sequence_parallel)


def kept_gathered_input(t: SavedTensor, tp: ArrayLike, sequence_parallel: bool, act_bytes: float = 2.0,
                        gathered_bytes: float = 0.0) -> Floats:
    """Bytes on one card of a column-parallel layer's saved input (a norm output: the input of wq / wk / wv or
    w1 / w3) where autograd keeps the input gathered over the TP group for the weight gradient instead of the
    sequence-sharded one (DTensor's ColwiseParallel, stacks.toml ``tp_input_regather = false``):

        t > 1:  s b h x g   (every token at full width on each TP rank; g = ``gathered_bytes`` per element where
                             the gather moves FP8 copies (torchao's Float8ColwiseParallel: e4m3, 1 byte), else e)
        t = 1:  s b h x e   (nothing is gathered: :func:`_split`)

    against s b h e / t under sequence parallelism when the sharded input is kept and gathered again."""
    tp = np.asarray(tp, dtype=float)
    scale = gathered_bytes / act_bytes if gathered_bytes > 0 else 1.0
    return np.where(tp > 1, t.bytes * scale, _split(t, tp, sequence_parallel))


def recompute_workspace_bytes(a: ModelArch, seq_len: ArrayLike, micro_batch: ArrayLike, tp: ArrayLike, recompute: str,
                              act_bytes: float = 2.0, flash_attention: bool = True, dropout: bool = False,
                              sequence_parallel: bool = True, quantized_input_bytes: float = 0.0,
                              input_regather: bool = True, gathered_input_bytes: float = 0.0) -> Floats:
    """Memory the rebuilt tensors occupy while the backward uses them: one block at a time, reused
    block after block and micro-batch after micro-batch, so it counts once per card (chapter 10.2.2:
    "the largest product workspace is 6 MiB; the next layer reuses it").

    selective: the largest unit rebuilt at once (a norm output, the MLP product, or the attention
               core's softmax output with its dropout mask and output)
    full, op:  one whole block's saved tensors (its forward is rerun, then its backward consumes them; under
               torchtitan's per-op checkpointing the rerun takes the saved outputs from its cache, and the
               rebuilt rest of the block is live with them)
    With ``input_regather`` false (DTensor TP) the rebuilt block's column-parallel layers hold their inputs
    gathered, as the stored ones are (:func:`kept_gathered_input`): torchtitan's full checkpointing
    (parallelize_llama.py ``_apply_ac_to_transformer_block`` at 9dec370: ``ptd_checkpoint_wrapper(module,
    preserve_rng_state=False)``, torch's non-reentrant torch.utils.checkpoint) reruns the block's forward in its
    backward and autograd saves what it saved in the forward, the Replicate input of ColwiseParallel's matmuls
    among it; its per-op checkpointing saves the matrix products' outputs (``_save_list``: aten.mm, SDPA,
    reduce_scatter_tensor), not the all-gathers', so the rerun gathers them and keeps them the same way.
    Per card, t > 1, sequence parallelism, n norms per block (2; 1 in a parallel block), g bytes per gathered
    element (1 under FP8 TP gathers, else e):

        workspace(regather false) - workspace(regather true) = n s b h (g - e / t)

    Llama 3 70B, s b = 16 x 8192, h = 8192, e4m3 gathers (g = 1, e = 2), t = 8: 2 x 2^30 x 0.75 B = 1.5 GiB.
    """
    tensors = saved_tensors(a, seq_len, micro_batch, act_bytes, flash_attention, dropout)
    if quantized_input_bytes > 0:
        tensors = quantized_inputs(tensors, a, seq_len, micro_batch, quantized_input_bytes, act_bytes)
    zero: FloatArray = 0.0 * np.asarray(tp, dtype=float) * np.asarray(micro_batch, dtype=float)
    if recompute == "none":
        return zero
    gathered = 0.0 if quantized_input_bytes > 0 else gathered_input_bytes

    def held(t: SavedTensor) -> Floats:
        return _held_bytes(t, tp, sequence_parallel, act_bytes, input_regather, gathered)

    if recompute in ("full", OP_RECOMPUTE):
        return sum((held(t) for t in tensors), zero)
    gone = _rebuilt(recompute)
    units: dict[str, Floats] = {}
    for t in tensors:
        if t.group in gone:
            units[t.unit] = units.get(t.unit, zero) + held(t)
    largest: FloatArray = np.maximum.reduce([zero] + list(units.values())) if units else zero
    return largest


def gemm_input_bytes(a: ModelArch, seq_len: ArrayLike, micro_batch: ArrayLike, recompute: str, act_bytes: float = 2.0,
                     flash_attention: bool = True, dropout: bool = False) -> Floats:
    """Saved inputs of the block's matrix products that stay until the backward (tp = 1): norm outputs,
    q / k / v, attention output, the MLP product (chapter 10.2.2: 15 MiB per block, 5 MiB once the
    norm outputs and the product are rebuilt)."""
    if recompute == OP_RECOMPUTE:
        return sum(t.bytes for t in op_sac_saved_tensors(a, seq_len, micro_batch, act_bytes) if t.gemm_input)
    gone = _rebuilt(recompute)
    tensors = saved_tensors(a, seq_len, micro_batch, act_bytes, flash_attention, dropout)
    return sum(t.bytes for t in tensors if t.gemm_input and t.group not in gone)


def recompute_flops_per_token(a: ModelArch, seq_len: Floats, recompute: str) -> Floats:
    """Extra forward FLOPs per token spent rebuilding saved tensors in backward.

    norm: 2 norms x ~4 FLOP per element x h; mlp: activation + product ~5 FLOP per element x f;
    attn (no flash): QK^T and softmax again, 2 x d_attn x (s+1)/2 per token;
    full: one whole forward of every block, 2 x block linear params + 4 x d_attn x (s+1)/2;
    op: the GEMMs torchtitan's per-op checkpointing reruns (2 x their weights: :func:`op_sac_linears`) with
    the norms and the MLP activation (Llama 3 8B: 2 x (h d_kv + d_q h + h f) = 159 MFLOP per token per block).
    """
    keys = (np.asarray(seq_len, dtype=float) + 1) / 2.0
    if recompute == "none":
        return 0.0 * keys
    if recompute == "full":
        return 2.0 * block_gemm_params(a) + attention_flops_per_token(a, seq_len) / 3.0
    if recompute == OP_RECOMPUTE:  # the GEMMs op_sac_linears reruns, the norms and the MLP activation
        rerun = sum(k_in * n * (1.0 - share) for _, k_in, n, share in op_sac_linears(a))
        return keys * 0.0 + a.layers * (2.0 * rerun + 8.0 * a.hidden + 5.0 * mlp_activation_width(a))
    total = 0.0 * keys
    parts = set(recompute.split("+"))
    if "norm" in parts:
        total = total + a.layers * 8.0 * a.hidden
    if "mlp" in parts:
        total = total + a.layers * 5.0 * mlp_activation_width(a)
    if "attn" in parts:
        total = total + a.layers * 2.0 * a.d_attn * keys
    if "mla_up" in parts and a.kv_lora_rank > 0:  # the q and kv up-projection GEMMs again
        total = total + a.layers * 2.0 * mla_up_params(a)
    return total


def mla_up_params(a: ModelArch) -> int:
    """Weights of multi-head latent attention's up-projections in one block: q (q_lora_rank x heads x
    (nope + rope), or 0 without a q latent) and kv (kv_lora_rank x heads x (nope + v))."""
    q = a.q_lora_rank * a.heads * (a.qk_nope_dim + a.qk_rope_dim) if a.q_lora_rank > 0 else 0
    return q + a.kv_lora_rank * a.heads * (a.qk_nope_dim + a.v_head_dim)


FUSED_LOSS_BYTES_PER_LOGIT = 4.0
"""A fused (vocab-parallel) cross-entropy holds one FP32 buffer of the logits at its peak: Megatron-Core's
vocab_parallel_cross_entropy computes the softmax in place in the FP32 logits and keeps them as the gradient."""

EAGER_LOSS_BYTES_PER_LOGIT = 4.0 + 4.0 + 4.0
"""An unfused eager ``cross_entropy(logits.float(), labels)`` (torchtitan's loss): at the peak of its backward
the saved FP32 log-softmax output (4 B), the FP32 gradient nll_loss hands to log_softmax's backward (4 B) and
the FP32 gradient log_softmax's backward writes (4 B) are live together; the BF16 logits are freed before the
backward (``del pred``), their forward peak is 2 + 4 + 4 = 10 B (BF16 logits, the FP32 copy, its log-softmax)."""


def op_sac_linears(a: ModelArch) -> list[tuple[str, float, float, float]]:
    """A dense block's matrix products in torchtitan's order, as its per-op checkpointing treats them:
    (tpopt kernel, input width, output width, share of the kernel whose output is saved).

    pytorch/torchtitan (parallelize_llama.py at 9dec370, the Dec 2024 benchmarks; activation_checkpoint.py
    since): the policy saves the outputs of aten.mm "except every second mm", counted per block forward, and
    of the SDPA kernels. The block's linears run wq, wk, wv, wo, then w1, w3, w2 (SwiGLU; up, down without a
    gate): the 1st, 3rd, 5th and 7th are saved (q, v, the gate, the MLP output), the 2nd, 4th and 6th (k, the
    attention projection, the up projection) rerun in the backward. tpopt's kernels fuse q / k / v ("qkv") and
    gate / up ("mlp.up"): the share is the saved outputs' width over the fused kernel's.
    MoE blocks and multi-head latent attention run other products: not modelled (InputError)."""
    if a.moe or a.kv_lora_rank > 0:
        raise InputError("recompute 'op' (torchtitan's selective per-op checkpointing) is modelled for dense blocks "
                         "without multi-head latent attention; use none, full or recompute groups")
    h, f, dq, dkv = float(a.hidden), float(a.ffn), float(a.d_attn), float(a.d_kv)
    mlp = [("mlp.up", h, f), ("mlp.up", h, f), ("mlp.down", f, h)] if a.gated_mlp else \
        [("mlp.up", h, f), ("mlp.down", f, h)]
    order = [("qkv", h, dq), ("qkv", h, dkv), ("qkv", h, dkv), ("proj", float(a.d_v), h), *mlp]
    width: dict[str, float] = {}
    saved: dict[str, float] = {}
    for i, (op, _, n) in enumerate(order):
        width[op] = width.get(op, 0.0) + n
        saved[op] = saved.get(op, 0.0) + (n if i % 2 == 0 else 0.0)  # 1st, 3rd, ... (1-based odd) saved
    out: list[tuple[str, float, float, float]] = []
    for op in width:
        k_in = next(k for o, k, _ in order if o == op)
        out.append((op, k_in, width[op], saved[op] / width[op]))
    return out


def op_sac_saved_tensors(a: ModelArch, seq_len: ArrayLike, micro_batch: ArrayLike,
                         act_bytes: float = 2.0) -> list[SavedTensor]:
    """What one block keeps for its backward under torchtitan's selective per-op checkpointing (tp = 1 sizes;
    :func:`_split` divides them): the block input (the checkpoint's argument, sequence region), the outputs of
    the saved matrix products (:func:`op_sac_linears`: q, v, the MLP gate and the MLP output), the SDPA output
    and its FP32 log-sum-exp, and under TP the two reduce-scatter outputs (saved too). The MLP output is the
    row-parallel GEMM's partial sum before its reduce-scatter: every token at full width on each TP rank.
    Everything else (norms, k, the attention projection, the up projection, the SwiGLU product, RoPE) is
    rebuilt in the backward. torchao's FP8 linears run torch._scaled_mm, which the policy does not list; the
    published peaks do not show the difference (Table 1 of torchtitan's Dec 2024 benchmarks: 77.0 GiB with
    torch.compile, 76.8 GiB with torch.compile + Float8), so the set is the same under FP8.
    Llama 3 8B, per token: 2 x (h + d_q + d_kv + d_q + f + h) + 4 x heads = 63,616 B against 94,336 B of the
    norm+mlp groups' keep set."""
    op_sac_linears(a)  # dense blocks only
    tokens = np.asarray(seq_len, dtype=float) * np.asarray(micro_batch, dtype=float)
    h, e = a.hidden, act_bytes
    return [
        SavedTensor("block input", "keep", "seq", tokens * h * e, False, ""),
        SavedTensor("q (wq output)", "keep", "tp", tokens * a.d_attn * e, True, ""),
        SavedTensor("v (wv output)", "keep", "tp", tokens * a.d_kv * e, True, ""),
        SavedTensor("attention output", "keep", "tp", tokens * a.d_v * e, True, ""),
        SavedTensor("log-sum-exp", "keep", "tp", tokens * a.heads * 4.0, False, ""),
        SavedTensor("MLP gate (w1 output)" if a.gated_mlp else "MLP up (w1 output)", "keep", "tp",
                    tokens * a.ffn * e, False, ""),
        SavedTensor("MLP output (w2, before its reduce-scatter)", "keep", "partial", tokens * h * e, False, ""),
        SavedTensor("reduce-scatter outputs", "keep", "scatter", tokens * 2 * h * e, False, ""),
    ]


EAGER_LOSS_PARALLEL_BYTES_PER_LOGIT = 4.0 * 4.0
"""The same eager loss under PyTorch's loss_parallel (the vocabulary split over TP ranks, torchtitan's default with
TP): torch/distributed/tensor/parallel/loss.py fuses nll_loss's and log_softmax's backward into
``(grad_input + torch.exp(x)) * grad_output`` with ``grad_input = torch.zeros_like(x)``: the saved FP32 log-softmax
output x, the zeros, exp(x) and their sum are live together (the product replaces exp(x)), 4 x 4 B per logit."""

COMPILED_LOSS_BYTES_PER_LOGIT = 2.0 + 2.0
"""The same loss compiled with torch.compile (Inductor fuses the FP32 upcast, the log-softmax and its backward):
the BF16 logits kept for the backward and their BF16 gradient, no FP32 copy materialised (assumption; the same
under loss_parallel)."""

TE_LOSS_BYTES_PER_LOGIT = 2.0
"""Transformer Engine's Triton cross-entropy (Megatron-Core ``cross_entropy_fusion_impl = "te"``; NVIDIA/
TransformerEngine transformer_engine/pytorch/triton/cross_entropy.py): an online softmax over the 16-bit logits,
the gradient written back in place over them in their own dtype (``cross_entropy_backward_kernel``), plus three
FP32 values per token (max, sum, target logit: per token, not per logit, left out). So the BF16 logits alone,
2 B per logit (assumption: the same with the vocabulary split over TP ranks, where Megatron-Core passes its TP
group to the kernel)."""

LOSS_KINDS: dict[str, tuple[float, float]] = {
    "fused": (FUSED_LOSS_BYTES_PER_LOGIT, FUSED_LOSS_BYTES_PER_LOGIT),
    "te": (TE_LOSS_BYTES_PER_LOGIT, TE_LOSS_BYTES_PER_LOGIT),
    "eager": (EAGER_LOSS_BYTES_PER_LOGIT, EAGER_LOSS_PARALLEL_BYTES_PER_LOGIT),
    "compiled": (COMPILED_LOSS_BYTES_PER_LOGIT, COMPILED_LOSS_BYTES_PER_LOGIT),
}
"""How a stack computes its cross-entropy -> bytes per logit at its peak (one TP rank holding the whole vocabulary,
the vocabulary split over TP ranks): Megatron-Core's fused vocab-parallel loss, Transformer Engine's in-place
Triton loss, an eager unfused
``cross_entropy(logits.float(), labels)`` (torchtitan's), the same compiled."""


def loss_bytes_per_logit(loss: str, tp: ArrayLike) -> FloatArray:
    """Bytes per logit the loss of kind ``loss`` (:data:`LOSS_KINDS`) holds at its peak: eager 12 at tp = 1, 16
    under loss parallelism (tp > 1); fused and compiled 4; te 2."""
    try:
        one, split = LOSS_KINDS[loss]
    except KeyError:
        raise InputError(f"unknown loss {loss!r} (known: {', '.join(LOSS_KINDS)})") from None
    out: FloatArray = np.where(np.asarray(tp, dtype=float) > 1, split, one)
    return out


def logits_bytes(a: ModelArch, seq_len: ArrayLike, micro_batch: ArrayLike, tp: ArrayLike,
                 loss_chunks: float = 1, loss: str = "fused") -> FloatArray:
    """Loss workspace on the last stage: s x b x V / tp logits x the bytes per logit the loss holds at its peak
    (:func:`loss_bytes_per_logit`: 4 fused, 2 te, 12 eager unfused, 16 eager under loss parallelism), divided by loss
    chunks. Llama 3 (V = 128,256), 32,768 tokens: 15.7 GiB fused, 47.0 GiB eager."""
    workspace: FloatArray = (np.asarray(seq_len, dtype=float) * np.asarray(micro_batch, dtype=float) * a.vocab
                             * loss_bytes_per_logit(loss, tp) / np.asarray(tp, dtype=float) / loss_chunks)
    return workspace


def zero3_gather_bytes(a: ModelArch, tp: ArrayLike, r: StateRecipe, prefetch: float = 1) -> FloatArray:
    """ZeRO-3 temporary buffers: (1 + prefetch) gathered units plus one unit's unreduced gradient.

    The largest unit is a block or the embedding / LM head (V h); sizes divided by tp.
    """
    unit = largest_unit_params(a) / np.asarray(tp, dtype=float)
    return unit * ((1 + prefetch) * r.weights + r.grads)


PIPELINE_GRAD_BYTES = 4.0
"""Bytes per parameter of the unsharded gradients ZeRO-3 accumulates over a pipeline's micro-batches: PyTorch FSDP2
accumulates them in its reduce dtype while gradient sync is off, FP32 in torchtitan (mixed_precision_reduce =
"float32" by default)."""


def zero3_pipeline_bytes(stage_params: ArrayLike, r: StateRecipe,
                         grad_bytes: float = PIPELINE_GRAD_BYTES, grad_share: ArrayLike = 1.0) -> FloatArray:
    """ZeRO-3 (FSDP) under pipeline parallelism: the stage's parameters on a card stay gathered from the first
    micro-batch's forward to the last one's backward (no reshard after forward, else every micro-batch gathers
    them again: torchtitan's default whenever PP is on) and its unsharded gradients accumulate over the
    micro-batches (PyTorch pipelining turns FSDP's gradient sync off for all but the last backward):
    stage params x (w + g_acc x grad_share), in place of the per-unit gather buffers of :func:`zero3_gather_bytes`
    (``grad_share``: the share of the stage whose gradients are live at once, :func:`pipeline_grad_chunks_live`)."""
    out: FloatArray = np.asarray(stage_params, dtype=float) * (r.weights + grad_bytes * np.asarray(grad_share,
                                                                                                     dtype=float))
    return out


def pipeline_grad_chunks_live(base: str, stages: ArrayLike, micro_batches: ArrayLike, v: int) -> FloatArray:
    """Share of a rank's stage whose unsharded accumulated gradients (:func:`zero3_pipeline_bytes`) are live at
    once under torch.distributed.pipelining with FSDP2: 1 / v when an interleaved rank's v chunks run their
    backwards one chunk after the other (one round, m <= p), else 1.

    PipelineStage.backward_maybe_with_nosync (pytorch/pytorch torch/distributed/pipelining/stage.py, torch 2.5-2.6)
    runs each chunk's backward without gradient sync and, on its last micro-batch (PipelineScheduleMulti:
    last_backward = backward_counter[stage_index] == n_microbatches, counted per virtual stage), calls the
    chunk's FSDP post_backward: its unsharded gradients are reduce-scattered and freed, its weights resharded.
    ScheduleInterleaved1F1B's backward_stage_index takes chunk v - 1 - ((step - warmup) // per_round) % v with
    per_round = m / max(1, m // p) micro-batches: with m <= p every chunk's m backwards are contiguous (chunk
    v - 1's, then v - 2's ...), so one chunk's gradients live at a time; with more rounds the chunks alternate
    and all v accumulate together (1F1B, one stage a rank: 1). Llama 3.1 405B, PP 8 x v 2, 8 micro-batches: half
    of the rank's 6.3e9 parameters' FP32 gradients, 11.8 GiB less (chunks taken as equal halves)."""
    one_round = np.asarray(micro_batches, dtype=float) <= np.asarray(stages, dtype=float)
    out: FloatArray = np.where(one_round & (base == "interleaved") & (v > 1), 1.0 / max(v, 1), 1.0)
    return out


def pipeline_buffer_bytes(a: ModelArch, seq_len: ArrayLike, micro_batch: ArrayLike, tp: ArrayLike,
                          act_bytes: float = 2.0) -> FloatArray:
    """Send + receive buffers of one boundary activation per direction: 2 x 2 x s b h / tp."""
    buffers: FloatArray = 4.0 * np.asarray(seq_len, dtype=float) * np.asarray(micro_batch, dtype=float) * a.hidden \
        * act_bytes / np.asarray(tp, dtype=float)
    return buffers


PP_BUFFERS = ("send-recv", "per-microbatch", "per-microbatch-outputs")
"""How a stack's pipeline runtime holds its boundary tensors (catalogs/stacks.toml ``pp_buffers``). send-recv
(Megatron-Core's p2p_communication): one send and one receive buffer per direction, made for each transfer
(:func:`pipeline_buffer_bytes`). per-microbatch (torch.distributed.pipelining, PipelineStage): one receive buffer per
micro-batch for the activations (_prepare_forward_infra) and one for the output gradients (_prepare_backward_infra),
allocated once and kept for the whole step; the last stage keeps every micro-batch's output (its logits) for the
merge at the end of the step (output_chunks). per-microbatch-outputs: as per-microbatch, and every stage keeps its
micro-batches' outputs for the step too (output_chunks of every stage, before pytorch/pytorch#153383)."""


def per_microbatch_buffer_units(stages: int, micro_batches: int, inflight: Sequence[float] | None,
                                keep_outputs: bool, v: int = 1) -> list[tuple[float, float]]:
    """Per pipeline rank r, (boundary tensors, last-stage outputs) held by a per-micro-batch pipeline runtime
    (:data:`PP_BUFFERS`), over the rank's v virtual stages j = r + i p (first j = 0, last j = v p - 1), m
    micro-batches, K_r chunk micro-batches in flight at the rank's peak (``inflight``: v x pipeline.peak_inflight of
    the rank, whose unit is a whole stage's set, 1 / v a chunk; None: 0, the upper bound):

        boundary = sum over non-first j of m  -  credit_r  +  sum over non-last j of (m + o_j)
        outputs  = m on the rank holding the last stage, else 0

    a non-first stage's receive buffers of the micro-batches in flight are its first block's inputs, already among
    the stored activations: credit_r = K_r, on rank 0 only beyond the m its first chunk may hold, max(0, K_0 - m)
    (one stage per rank: k_r - on the others, none on the first); a non-last stage holds its gradient receive buffers
    (m) and the outputs it sent, o_j = m when ``keep_outputs`` (output_chunks, to the end of the step), else those
    in flight (fwd_cache until their backward; at most K_r in all, m a chunk). 1F1B, p = 8, m = 8 (k = 8 on the
    first stage, 7 on the second), outputs kept: 16 on the first rank, 17 on the second, 7 boundary tensors and
    8 logits on the last."""
    p, m = int(stages), float(micro_batches)
    chunks = max(int(v), 1)
    out: list[tuple[float, float]] = []
    for r in range(p):
        k = float(inflight[r]) if inflight is not None else 0.0
        firsts = [r + i * p for i in range(chunks)]
        recv = sum(m for j in firsts if j > 0) - (max(0.0, k - m) if r == 0 and chunks > 1 else 0.0 if r == 0 else k)
        senders = sum(1 for j in firsts if j < p * chunks - 1)
        kept = senders * m if keep_outputs or inflight is None else min(k, senders * m)
        out.append((max(recv, 0.0) + senders * m + kept, m if r == p - 1 else 0.0))
    return out


def peak_with_reuse(persistent: Floats, *phases: ArrayLike) -> Floats:
    """Peak of a sequence of phases that reuse memory: persistent + max(phase totals).

    Chapter 10.1.2: 8 GiB of activations and a 4 GiB gather buffer live together need 12 GiB; if the
    activations are freed before the gather, the same space is reused and the peak is 8 GiB.
    """
    return persistent + (np.maximum.reduce([np.asarray(p, dtype=float) for p in phases]) if phases else 0.0)


def offloaded_activation_layers(offload_layers: int, layers: int, pp: ArrayLike) -> FloatArray:
    """Layers whose stored activations are off the card at the memory peak under activation offloading
    (Megatron-Core's ``cpu_offloading_num_layers`` on Transformer Engine's CPU offload):

        n_off = min(N, L - 1)   with pp = 1,   0 with pp > 1

    The first N of the L layers offload in the forward (at most L - 1: Megatron-Core's check "CPU offloading
    can be done only for layers less than num_layers"). The peak is the end of the forward: by then every
    offloaded layer's copy has finished behind the layers that follow it, and in the backward one layer is
    reloaded ahead of use while the layers above it have already freed theirs. Megatron-Core refuses
    offloading with pipeline parallelism ("Currently there is no support for Pipeline parallelism with CPU
    offloading", transformer_config.py), so a pipelined plan keeps every layer's activations."""
    n = max(0, min(int(offload_layers), int(layers) - 1))
    return np.where(np.asarray(pp, dtype=float) == 1, float(n), 0.0)


def quantized_inputs(tensors: list[SavedTensor], a: ModelArch, seq_len: ArrayLike, micro_batch: ArrayLike,
                     q: float, act_bytes: float = 2.0) -> list[SavedTensor]:
    """The saved tensors of a block whose linear layers keep the quantised copy of their input for the weight
    gradient (Transformer Engine under an FP8-family recipe), ``q`` bytes per element with its scales (FP8 1,
    MXFP8 1 + 1/32):

        norm outputs (QKV and MLP-up inputs), MLP product (down-projection input):   e -> q per element
        attention output: the fused attention keeps its e-byte copy, the projection adds q x d_v per token

    q, k, v (the attention kernel's inputs), the norm inputs and the MLP gate / up outputs (the activation's
    backward) stay e bytes. Llama 3 70B (h = 8192, f = 28672) at e = 2, q = 1: 2h + f - d_v = 4.5 h bytes per
    token less per layer (33.5 h -> 29 h)."""
    tokens = np.asarray(seq_len, dtype=float) * np.asarray(micro_batch, dtype=float)
    out = [t._replace(bytes=t.bytes * q / act_bytes) if t.group in ("norm", "mlp") else t for t in tensors]
    out.append(SavedTensor("projection input (quantised)", "keep", "tp", tokens * a.d_v * q, True, ""))
    return out
