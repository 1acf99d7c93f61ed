"""Hugging Face ``config.json`` -> :class:`tpopt.models.arch.ModelArch`, one key map per family.

Each family (a set of ``model_type`` values) declares the keys it *reads* (they decide parameter
counts, FLOPs or activation memory) and the keys it *knows to be irrelevant* to those (RoPE bases,
norm epsilons, router loss weights, token ids, ...). A key that is neither, in the family's map or
in the generic map shared by every family (``PretrainedConfig`` metadata, generation defaults), is an
error naming the key: tpopt refuses to guess what an unknown architecture switch does. Values that
change the architecture in a way tpopt does not model (a post-norm OPT, q/k LayerNorm in MPT,
bidirectional attention, an activation it does not know) are errors too, never silently dropped.

Families: GPT-2, GPT-NeoX (Pythia), BLOOM, Falcon, MPT, OPT, Phi (Phi-2), Llama, Mistral, Qwen2,
Qwen3, Phi-3/Phi-4, Gemma, Gemma 2, Gemma 3 (text), Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek-V2/V3,
gpt-oss. Counting conventions are those of :mod:`tpopt.models.arch`.

Assumptions stated with every model built (``ModelArch.extra["notes"]``): non-zero dropout rates are
not in the activation model; ``quantization_config`` describes stored weights, not training; a
DeepSeek-V3 router's score-correction bias is a buffer (updated by rule, not by the optimizer) and is
not counted; gpt-oss's clamped SwiGLU is counted as a SwiGLU.
"""

from __future__ import annotations

import builtins
import json
import math
import os
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from os import PathLike
from pathlib import Path
from typing import Any, TypeVar

from tpopt.catalogs.architectures import ARCH_INT_MAX, arch_int, build_model
from tpopt.catalogs.tables import loads_json, read_text_capped
from tpopt.errors import InputError
from tpopt.models.arch import ModelArch, param_count
from tpopt.models.units import fmt_count

#: HF activation names -> the canonical ``ModelArch.activation``.
HF_ACTIVATIONS = {
    "silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_python": "gelu", "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh", "quick_gelu": "quick_gelu", "relu": "relu",
}

#: Keys every config may carry that do not change counts, FLOPs or memory: PretrainedConfig metadata
#: and generation defaults, token ids, numerical epsilons, RoPE parameters, router loss weights.
GENERIC_IGNORED = frozenset("""
_name_or_path _commit_hash _attn_implementation _attn_implementation_autoset attn_implementation architectures
auto_map model_type transformers_version torch_dtype dtype use_cache initializer_range init_std
bos_token_id eos_token_id pad_token_id unk_token_id sep_token_id decoder_start_token_id tokenizer_class
return_dict output_hidden_states output_attentions torchscript use_bfloat16 tf_legacy_loss pruned_heads
chunk_size_feed_forward is_encoder_decoder is_decoder cross_attention_hidden_size tie_encoder_decoder
max_length min_length do_sample early_stopping num_beams num_beam_groups diversity_penalty temperature top_k
top_p typical_p repetition_penalty length_penalty no_repeat_ngram_size encoder_no_repeat_ngram_size
bad_words_ids num_return_sequences output_scores return_dict_in_generate forced_bos_token_id
forced_eos_token_id remove_invalid_values exponential_decay_length_penalty suppress_tokens
begin_suppress_tokens finetuning_task id2label label2id prefix task_specific_params problem_type
quantization_config max_position_embeddings rope_theta rope_scaling rope_parameters rms_norm_eps
layer_norm_eps layer_norm_epsilon pretraining_tp gradient_checkpointing output_router_logits
router_aux_loss_coef router_z_loss_coef router_jitter_noise norm_topk_prob use_return_dict
""".split())

#: Dropout keys: known; a non-zero rate is stated as an assumption (masks not in the activation model).
DROPOUT_KEYS = frozenset("""
attention_dropout hidden_dropout resid_pdrop embd_pdrop attn_pdrop emb_pdrop dropout activation_dropout
classifier_dropout layerdrop
""".split())

T = TypeVar("T")


@dataclass(frozen=True)
class Family:
    """One family of configs: its model types, the keys it reads and those known to be irrelevant."""

    name: str
    model_types: tuple[str, ...]
    reads: frozenset[str]
    ignores: frozenset[str]
    build: Callable[[Config], dict[str, Any]]


class Config:
    """Typed, audited access to a config dict: every read key must be declared by the family."""

    def __init__(self, raw: dict[str, Any], where: str, family: Family):
        self.raw, self.where, self.family = raw, where, family
        self.notes: list[str] = []

    def _key(self, key: str) -> Any:
        if key not in self.family.reads:  # a programming error in a family map, not bad input
            raise AssertionError(f"family {self.family.name} reads undeclared key {key!r}")
        return self.raw.get(key)

    def has(self, key: str) -> bool:
        return self._key(key) is not None

    def first(self, *keys: str) -> tuple[str, Any]:
        """(key, value) of the first key present with a non-null value, else (keys[0], None)."""
        for k in keys:
            v = self._key(k)
            if v is not None:
                return k, v
        return keys[0], None

    def int(self, *keys: str, default: int | None = None, minimum: int = 1) -> int:
        key, v = self.first(*keys)
        if v is None:
            if default is None:
                raise InputError(f"{self.where}: missing required key {' or '.join(repr(k) for k in keys)}")
            return default
        return arch_int(v, f"{self.where}: {key}", minimum, ARCH_INT_MAX)

    def opt_int(self, *keys: str, minimum: builtins.int = 0) -> builtins.int | None:  # int, bool: methods here
        key, v = self.first(*keys)
        return None if v is None else arch_int(v, f"{self.where}: {key}", minimum, ARCH_INT_MAX)

    def _typed(self, key: str, default: T, kind: type[T], what: str) -> T:
        v = self._key(key)
        if v is None:
            return default
        if not isinstance(v, kind):
            raise InputError(f"{self.where}: {key} must be {what}, got {v!r}")
        return v

    def bool(self, key: str, default: bool) -> bool:
        return self._typed(key, default, bool, "true or false")

    def table(self, key: str) -> dict[str, Any]:
        return self._typed(key, {}, dict, "an object")

    def require(self, key: str, allowed: Collection[Any], default: Any, why: str) -> Any:
        """A key whose only modelled values are ``allowed``; anything else is an error saying why."""
        v = self._key(key)
        v = default if v is None else v
        if v not in allowed:
            raise InputError(f"{self.where}: {key} = {json.dumps(v)} is not supported ({why})")
        return v

    def activation(self, *keys: str, default: str) -> str:
        key, v = self.first(*keys)
        v = default if v is None else v
        if not isinstance(v, str) or v not in HF_ACTIVATIONS:
            raise InputError(f"{self.where}: {key} = {json.dumps(v)} is not an activation tpopt knows "
                             f"({', '.join(sorted(HF_ACTIVATIONS))})")
        return HF_ACTIVATIONS[v]

    def window(self, t: dict[str, Any], keys: tuple[str, ...] = ("sliding_window",),
               every_layer: builtins.bool = True) -> None:
        """Set sliding_window (and sliding_layers from ``layer_types``) when the config uses one;
        without ``layer_types`` the window applies to every layer if ``every_layer``."""
        w = self.opt_int(*keys, minimum=0)
        types = self._key("layer_types") if "layer_types" in self.family.reads else None
        if types is not None:
            if not isinstance(types, list) or len(types) != t["layers"] or \
                    not set(types) <= {"full_attention", "sliding_attention"}:
                raise InputError(f"{self.where}: layer_types must list 'full_attention' / 'sliding_attention' "
                                 f"for each of the {t['layers']} layers")
            n = types.count("sliding_attention")
            if n and not w:
                raise InputError(f"{self.where}: layer_types has sliding layers but sliding_window is not set")
            if n:
                t["sliding_window"], t["sliding_layers"] = w, n
            return
        if w and every_layer:
            t["sliding_window"] = w


# ---------------------------------------------------------------------------------------------
# family builders: each returns a catalog-style table for build_model


def _base(c: Config, t: dict[str, Any] | None = None) -> dict[str, Any]:
    """Keys shared by the Llama-style families."""
    layers = c.int("num_hidden_layers")
    heads = c.int("num_attention_heads")
    t = dict(t or {})
    t.update(layers=layers, hidden=c.int("hidden_size"), heads=heads,
             kv_heads=c.int("num_key_value_heads", default=heads), vocab=c.int("vocab_size"))
    if c.has("head_dim"):
        t["head_dim"] = c.int("head_dim")
    t["tied_embeddings"] = c.bool("tie_word_embeddings", t.pop("_tied_default", False))
    return t


def _llama_biases(c: Config, t: dict[str, Any]) -> dict[str, Any]:
    if c.bool("attention_bias", False):
        t["qkv_bias"] = t["o_bias"] = True
    if "mlp_bias" in c.family.reads and c.bool("mlp_bias", False):
        t["mlp_bias"] = True
    return t


def _qwen_window(c: Config, t: dict[str, Any]) -> None:
    if c.bool("use_sliding_window", False):
        if c._key("layer_types") is None:
            raise InputError(f"{c.where}: use_sliding_window = true without layer_types: which layers use the "
                             f"window is not stated; add layer_types")
        c.window(t)
    else:
        c.opt_int("sliding_window", minimum=0)
        c.opt_int("max_window_layers", minimum=0)


def build_llama(c: Config) -> dict[str, Any]:
    t = _base(c)
    t["ffn"] = c.int("intermediate_size")
    t["activation"] = c.activation("hidden_act", default="silu")
    _llama_biases(c, t)
    mtype = c.raw.get("model_type")
    if mtype in ("mistral", "phi3"):
        c.window(t)
    elif mtype in ("qwen2", "qwen3"):
        _qwen_window(c, t)
    if mtype == "qwen2":
        t["qkv_bias"] = True  # Qwen2 attention always has q/k/v biases
    if mtype == "qwen3":
        t["qk_norm"] = True
    return t


def build_gemma(c: Config) -> dict[str, Any]:
    mtype = c.raw.get("model_type")
    t = _base(c, {"_tied_default": True})
    t["ffn"] = c.int("intermediate_size")
    t["activation"] = c.activation("hidden_activation", "hidden_act", default="gelu_pytorch_tanh")
    _llama_biases(c, t)
    if mtype in ("gemma2", "gemma3_text"):
        t["layer_norms"] = 4  # input, post-attention, pre-feedforward, post-feedforward
    if mtype == "gemma2":
        c.window(t, ("sliding_window", "sliding_window_size"), every_layer=False)
        if "sliding_window" not in t and c._key("layer_types") is None \
                and c.first("sliding_window", "sliding_window_size")[1]:
            t["sliding_window"] = c.int("sliding_window", "sliding_window_size")
            t["sliding_layers"] = (t["layers"] + 1) // 2  # even blocks are local
    if mtype == "gemma3_text":
        t["qk_norm"] = True
        c.require("use_bidirectional_attention", (False,), False, "tpopt counts causal attention")
        c.window(t, every_layer=False)
        if "sliding_window" not in t and c.has("sliding_window") and c._key("layer_types") is None:
            pattern = c.int("sliding_window_pattern", default=6)
            t["sliding_window"] = c.int("sliding_window")
            t["sliding_layers"] = t["layers"] - t["layers"] // pattern  # every pattern-th block is global
    return t


def build_phi(c: Config) -> dict[str, Any]:
    """Phi-1/1.5/2: parallel block with one LayerNorm, biases everywhere, LM-head bias."""
    t = _base(c)
    t.update(ffn=c.int("intermediate_size"), activation=c.activation("hidden_act", default="gelu_new"),
             gated_mlp=False, norm="layernorm", linear_bias=True, parallel_block=True, layer_norms=1,
             head_bias=True)
    c.require("qk_layernorm", (False,), False, "LayerNorm on queries and keys is not modelled")
    return t


def build_gpt2(c: Config) -> dict[str, Any]:
    hidden = c.int("n_embd", "hidden_size")
    t = {"layers": c.int("n_layer", "num_hidden_layers"), "hidden": hidden,
         "heads": c.int("n_head", "num_attention_heads"), "vocab": c.int("vocab_size"),
         "ffn": c.int("n_inner", default=4 * hidden), "gated_mlp": False, "norm": "layernorm",
         "linear_bias": True, "activation": c.activation("activation_function", default="gelu_new"),
         "learned_positions": c.int("n_positions", default=1024), "positions": "learned",
         "tied_embeddings": c.bool("tie_word_embeddings", True)}
    c.require("add_cross_attention", (False,), False, "an encoder-decoder GPT-2 is not a decoder-only model")
    return t


def build_neox(c: Config) -> dict[str, Any]:
    t = _base(c)
    t.update(ffn=c.int("intermediate_size"), activation=c.activation("hidden_act", default="gelu"),
             gated_mlp=False, norm="layernorm", parallel_block=c.bool("use_parallel_residual", True))
    if c.bool("attention_bias", True):
        t.update(linear_bias=True)
    else:
        t.update(mlp_bias=True)  # GPT-NeoX MLP linears always carry biases
    return t


def build_bloom(c: Config) -> dict[str, Any]:
    hidden = c.int("hidden_size", "n_embed")
    inner = c.opt_int("n_inner")
    if inner is not None and inner != 4 * hidden:
        raise InputError(f"{c.where}: n_inner = {inner} is not supported (BLOOM's MLP is 4 x hidden)")
    return {"layers": c.int("n_layer", "num_hidden_layers"), "hidden": hidden,
            "heads": c.int("n_head", "num_attention_heads"), "vocab": c.int("vocab_size"), "ffn": 4 * hidden,
            "gated_mlp": False, "norm": "layernorm", "linear_bias": True, "activation": "gelu_tanh",
            "positions": "alibi", "embedding_norm": True, "tied_embeddings": c.bool("tie_word_embeddings", True)}


def build_falcon(c: Config) -> dict[str, Any]:
    hidden = c.int("hidden_size", "n_embed")
    heads = c.int("num_attention_heads", "n_head")
    new_arch = c.bool("new_decoder_architecture", False)
    parallel = c.bool("parallel_attn", True)
    if new_arch:
        kv = c.int("num_kv_heads", "n_head_kv", default=heads)
        norms = c.int("num_ln_in_parallel_attn", default=2)
        parallel = True
    else:
        kv = 1 if c.bool("multi_query", True) else heads
        c.opt_int("num_kv_heads", "n_head_kv")
        c.opt_int("num_ln_in_parallel_attn")
        norms = 1 if parallel else 2
    if hidden % heads:
        raise InputError(f"{c.where}: hidden_size ({hidden}) is not a multiple of num_attention_heads ({heads})")
    return {"layers": c.int("num_hidden_layers", "n_layer"), "hidden": hidden, "heads": heads, "kv_heads": kv,
            "vocab": c.int("vocab_size"), "ffn": c.int("ffn_hidden_size", default=4 * hidden), "gated_mlp": False,
            "norm": "layernorm", "linear_bias": c.bool("bias", False),
            "activation": c.activation("activation", default="gelu"), "parallel_block": parallel,
            "layer_norms": norms, "positions": "alibi" if c.bool("alibi", False) else "rope",
            "tied_embeddings": c.bool("tie_word_embeddings", True)}


_MPT_ATTN_KEYS = {"attn_type", "alibi", "qk_ln", "qk_gn", "kv_n_heads", "rope", "rope_theta", "rope_impl",
                  "rope_dail_config", "rope_hf_config", "attn_pdrop", "attn_impl", "clip_qkv", "softmax_scale",
                  "prefix_lm", "attn_uses_sequence_id", "alibi_bias_max", "sliding_window_size", "fused_qkv"}
_MPT_FFN_KEYS = {"ffn_type", "ffn_hidden_size", "ffn_act_fn"}


def build_mpt(c: Config) -> dict[str, Any]:
    hidden = c.int("d_model")
    heads = c.int("n_heads")
    attn = c.table("attn_config")
    ffn_cfg = c.table("ffn_config")
    for sub, known in (("attn_config", _MPT_ATTN_KEYS), ("ffn_config", _MPT_FFN_KEYS)):
        unknown = sorted(set(c.table(sub)) - known)
        if unknown:
            raise InputError(f"{c.where}: {sub} key(s) not understood: {', '.join(unknown)}")
    kinds = {"multihead_attention": heads, "multiquery_attention": 1}
    kind = attn.get("attn_type", "multihead_attention")
    if kind == "grouped_query_attention":
        kv = arch_int(attn.get("kv_n_heads", heads), f"{c.where}: attn_config.kv_n_heads", 1)
    elif kind in kinds:
        kv = kinds[kind]
    else:
        raise InputError(f"{c.where}: attn_config.attn_type = {json.dumps(kind)} is not supported")
    if attn.get("qk_ln") or attn.get("qk_gn"):
        raise InputError(f"{c.where}: attn_config.qk_ln / qk_gn (norms on queries and keys) are not modelled")
    if attn.get("sliding_window_size", -1) not in (-1, None):
        raise InputError(f"{c.where}: attn_config.sliding_window_size is not supported")
    if ffn_cfg.get("ffn_type", "mptmlp") != "mptmlp" or ffn_cfg.get("ffn_act_fn"):
        raise InputError(f"{c.where}: ffn_config {json.dumps(ffn_cfg)} is not supported (only the MPT GELU MLP)")
    ffn = ffn_cfg.get("ffn_hidden_size") or c.int("expansion_ratio") * hidden
    alibi = bool(attn.get("alibi", True))
    t = {"layers": c.int("n_layers"), "hidden": hidden, "heads": heads, "kv_heads": kv, "vocab": c.int("vocab_size"),
         "ffn": arch_int(ffn, f"{c.where}: ffn hidden size", 1), "gated_mlp": False, "norm": "layernorm",
         "norm_bias": not c.bool("no_bias", True), "linear_bias": not c.bool("no_bias", True), "activation": "gelu",
         "tied_embeddings": c.bool("tie_word_embeddings", True)}
    c.require("norm_type", ("low_precision_layernorm", "layernorm"), "low_precision_layernorm",
              "only MPT's LayerNorm is modelled")
    if alibi:
        t["positions"] = "alibi"  # MPT turns the learned table off when ALiBi is on
    elif attn.get("rope"):
        t["positions"] = "rope"
    elif c.bool("learned_pos_emb", True):
        t.update(positions="learned", learned_positions=c.int("max_seq_len", default=2048))
    else:
        t["positions"] = "none"
    return t


def build_opt(c: Config) -> dict[str, Any]:
    hidden = c.int("hidden_size", "d_model")
    proj = c.int("word_embed_proj_dim", default=hidden)
    if proj != hidden:
        raise InputError(f"{c.where}: word_embed_proj_dim = {proj} differs from hidden_size = {hidden} "
                         f"(OPT-350m's projected embeddings are not modelled)")
    c.require("do_layer_norm_before", (True,), True, "post-norm OPT (OPT-350m) is not modelled")
    c.require("_remove_final_layer_norm", (False,), False, "OPT without a final LayerNorm is not modelled")
    c.require("layer_norm_elementwise_affine", (True,), True, "LayerNorm without weights is not modelled")
    return {"layers": c.int("num_hidden_layers"), "hidden": hidden, "heads": c.int("num_attention_heads"),
            "vocab": c.int("vocab_size"), "ffn": c.int("ffn_dim"), "gated_mlp": False, "norm": "layernorm",
            "linear_bias": c.bool("enable_bias", True),
            "activation": c.activation("activation_function", default="relu"),
            # OPT's learned position table has 2 extra rows (the position offset of fairseq)
            "positions": "learned", "learned_positions": c.int("max_position_embeddings", default=2048) + 2,
            "tied_embeddings": c.bool("tie_word_embeddings", True)}


def build_mixtral(c: Config) -> dict[str, Any]:
    t = build_llama(c)
    c.window(t)
    t.update(experts=c.int("num_local_experts"), top_k=c.int("num_experts_per_tok"), expert_ffn=t["ffn"])
    return t


def _qwen_moe(c: Config, t: dict[str, Any]) -> dict[str, Any]:
    t.update(experts=c.int("num_experts"), top_k=c.int("num_experts_per_tok"),
             expert_ffn=c.int("moe_intermediate_size"), moe_step=c.int("decoder_sparse_step", default=1))
    only = c._key("mlp_only_layers") or []
    if not isinstance(only, list):
        raise InputError(f"{c.where}: mlp_only_layers must be a list of layer indices")
    t["mlp_only_layers"] = only
    return t


def build_qwen2_moe(c: Config) -> dict[str, Any]:
    t = _base(c)
    t.update(ffn=c.int("intermediate_size"), activation=c.activation("hidden_act", default="silu"),
             qkv_bias=c.bool("qkv_bias", True))
    _qwen_window(c, t)
    _qwen_moe(c, t)
    shared = c.int("shared_expert_intermediate_size", default=0, minimum=0)
    if shared:
        t.update(shared_experts=1, shared_ffn=shared, shared_expert_gate=True)
    return t


def build_qwen3_moe(c: Config) -> dict[str, Any]:
    t = _base(c)
    t.update(ffn=c.int("intermediate_size"), activation=c.activation("hidden_act", default="silu"), qk_norm=True)
    _llama_biases(c, t)
    _qwen_window(c, t)
    return _qwen_moe(c, t)


def build_deepseek(c: Config) -> dict[str, Any]:
    mtype = c.raw.get("model_type")
    t = _base(c)
    t.pop("head_dim", None)  # DeepSeek configs carry head_dim = qk_rope_head_dim; MLA derives its own
    if t.pop("kv_heads") != t["heads"]:
        raise InputError(f"{c.where}: num_key_value_heads differs from num_attention_heads; multi-head latent "
                         f"attention gives every head its own key and value")
    t.update(ffn=c.int("intermediate_size"), activation=c.activation("hidden_act", default="silu"),
             kv_lora_rank=c.int("kv_lora_rank"), q_lora_rank=c.int("q_lora_rank", default=0, minimum=0),
             qk_rope_dim=c.int("qk_rope_head_dim"), qk_nope_dim=c.int("qk_nope_head_dim"),
             v_head_dim=c.int("v_head_dim"))
    _llama_biases(c, t)
    if t.get("qkv_bias"):
        raise InputError(f"{c.where}: attention_bias = true with multi-head latent attention is not modelled")
    experts = c.int("n_routed_experts", default=0, minimum=0)
    if experts:
        freq = c.int("moe_layer_freq", default=1)
        if freq != 1:
            raise InputError(f"{c.where}: moe_layer_freq = {freq} is not supported (every block after the "
                             f"first_k_dense_replace dense blocks is modelled as MoE)")
        shared = c.int("n_shared_experts", default=0, minimum=0)
        t.update(experts=experts, top_k=c.int("num_experts_per_tok"), expert_ffn=c.int("moe_intermediate_size"),
                 dense_layers=c.int("first_k_dense_replace", default=0, minimum=0))
        if shared:
            t.update(shared_experts=shared, shared_ffn=t["expert_ffn"])
        groups = c.int("n_group", default=0, minimum=0)
        if groups > 1:  # group-limited (node-limited) routing: topk_group of n_group groups per token
            t.update(router_groups=groups, router_group_topk=c.int("topk_group", default=groups, minimum=1))
    mtp = c.int("num_nextn_predict_layers", default=0, minimum=0)
    if mtp:
        t["mtp_layers"] = mtp
        c.notes.append(f"{mtp} multi-token-prediction module(s) (num_nextn_predict_layers) counted: each adds one "
                       f"block, a 2h x h projection and an LM-head pass")
    if mtype == "deepseek_v3":
        c.notes.append("router score-correction bias (e_score_correction_bias) is a buffer updated by rule, "
                       "not a trained parameter: not counted")
    return t


def build_gpt_oss(c: Config) -> dict[str, Any]:
    t = _base(c)
    experts = c.int("num_local_experts")
    ffn = c.int("intermediate_size")
    t.update(ffn=ffn, activation=c.activation("hidden_act", default="silu"), experts=experts,
             top_k=c.int("num_experts_per_tok", "experts_per_token"), expert_ffn=ffn, mlp_bias=True,
             router_bias=True, attn_sinks=True)
    if c.bool("attention_bias", True):
        t["qkv_bias"] = t["o_bias"] = True
    c.window(t, every_layer=False)
    if "sliding_window" not in t and c.has("sliding_window"):
        t["sliding_window"] = c.int("sliding_window")
        t["sliding_layers"] = (t["layers"] + 1) // 2  # blocks alternate sliding / full, sliding first
    c.notes.append("the clamped SwiGLU (swiglu_limit, sigmoid gain swiglu_alpha) is counted as a SwiGLU")
    _, limit = c.first("swiglu_limit")
    if limit is not None:  # the clamp the gated activation's inputs pass through (its own memory passes, ops)
        if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not 0 < limit < 1e6:
            raise InputError(f"{c.where}: swiglu_limit must be a positive number, got {limit!r}")
        t["activation_clamp"] = float(limit)
    factor = yarn_attention_factor(c.table("rope_scaling"), f"{c.where}: rope_scaling")
    if factor != 1.0:
        t["rope_attention_factor"] = factor
    return t


def yarn_attention_factor(scaling: dict[str, Any], where: str) -> float:
    """YaRN's attention (concentration) factor on RoPE's cos and sin, as transformers' _compute_yarn_parameters and
    Megatron-Core's _yarn_get_concentration_factor compute it: ``attention_factor`` where given, else
    mscale(f, mscale) / mscale(f, mscale_all_dim) where both are given, else mscale(f) = 0.1 ln f + 1 (1 for f <= 1);
    1 without YaRN. gpt-oss (factor 32, neither given): 1.3466."""
    if scaling.get("rope_type", scaling.get("type")) != "yarn":
        return 1.0

    def num(key: str, default: float | None = None) -> float:
        v = scaling.get(key, default)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1e6:
            raise InputError(f"{where}: {key} must be a positive number, got {v!r}")
        return float(v)

    if scaling.get("attention_factor") is not None:
        return num("attention_factor")
    f = num("factor")

    def mscale(m: float) -> float:
        return 1.0 if f <= 1.0 else 0.1 * m * math.log(f) + 1.0

    if scaling.get("mscale") is not None and scaling.get("mscale_all_dim") is not None:
        return mscale(num("mscale")) / mscale(num("mscale_all_dim"))
    return mscale(1.0)


def _keys(text: str) -> frozenset[str]:
    return frozenset(text.split())


LLAMA_READS = _keys("""num_hidden_layers hidden_size num_attention_heads num_key_value_heads head_dim intermediate_size
vocab_size tie_word_embeddings hidden_act attention_bias mlp_bias""")
QWEN_WINDOW = _keys("use_sliding_window sliding_window max_window_layers layer_types")
MOE_IGNORES = _keys("output_router_logits router_aux_loss_coef norm_topk_prob")

FAMILIES = (
    Family("Llama", ("llama",), LLAMA_READS, _keys("rope_theta rope_scaling"), build_llama),
    Family("Mistral", ("mistral",), LLAMA_READS | {"sliding_window"}, frozenset(), build_llama),
    Family("Qwen2", ("qwen2",), LLAMA_READS | QWEN_WINDOW, _keys("use_mrope"), build_llama),
    Family("Qwen3", ("qwen3",), LLAMA_READS | QWEN_WINDOW, frozenset(), build_llama),
    Family("Phi-3", ("phi3",), LLAMA_READS | {"sliding_window"},
           _keys("original_max_position_embeddings partial_rotary_factor"), build_llama),
    Family("Gemma", ("gemma", "gemma2", "gemma3_text"),
           LLAMA_READS | _keys("""hidden_activation sliding_window sliding_window_size layer_types
           sliding_window_pattern use_bidirectional_attention"""),
           _keys("""query_pre_attn_scalar final_logit_softcapping attn_logit_softcapping cache_implementation
           rope_local_base_freq"""), build_gemma),
    Family("Phi", ("phi",), LLAMA_READS | {"qk_layernorm"}, _keys("partial_rotary_factor"), build_phi),
    Family("GPT-2", ("gpt2",), _keys("""n_embd hidden_size n_layer num_hidden_layers n_head num_attention_heads
           vocab_size n_inner activation_function n_positions tie_word_embeddings add_cross_attention"""),
           _keys("""n_ctx scale_attn_weights scale_attn_by_inverse_layer_idx reorder_and_upcast_attn summary_type
           summary_use_proj summary_activation summary_proj_to_labels summary_first_dropout"""), build_gpt2),
    Family("GPT-NeoX", ("gpt_neox",), LLAMA_READS | {"use_parallel_residual"},
           _keys("rotary_pct rotary_emb_base rotary_emb_dim partial_rotary_factor"), build_neox),
    Family("BLOOM", ("bloom",), _keys("""hidden_size n_embed n_layer num_hidden_layers n_head num_attention_heads
           vocab_size n_inner tie_word_embeddings"""),
           _keys("""apply_residual_connection_post_layernorm masked_softmax_fusion bias_dropout_fusion skip_bias_add
           skip_bias_add_qkv attention_softmax_in_fp32 slow_but_exact offset_alibi seq_length"""), build_bloom),
    Family("Falcon", ("falcon", "RefinedWeb", "RefinedWebModel"),
           _keys("""hidden_size n_embed num_hidden_layers n_layer num_attention_heads n_head num_kv_heads n_head_kv
           multi_query new_decoder_architecture parallel_attn bias alibi ffn_hidden_size activation
           num_ln_in_parallel_attn vocab_size tie_word_embeddings"""),
           _keys("apply_residual_connection_post_layernorm"), build_falcon),
    Family("MPT", ("mpt",), _keys("""d_model n_heads n_layers expansion_ratio vocab_size no_bias attn_config ffn_config
           learned_pos_emb max_seq_len norm_type tie_word_embeddings"""),
           _keys("""init_device init_config logit_scale embedding_fraction verbose tokenizer_name use_pad_tok_in_ffn
           fc_type block_overrides final_logit_softcapping use_cache"""), build_mpt),
    Family("OPT", ("opt",), _keys("""hidden_size d_model num_hidden_layers num_attention_heads ffn_dim vocab_size
           word_embed_proj_dim do_layer_norm_before _remove_final_layer_norm layer_norm_elementwise_affine
           enable_bias activation_function max_position_embeddings tie_word_embeddings"""),
           frozenset(), build_opt),
    Family("Mixtral", ("mixtral",), LLAMA_READS | _keys("num_local_experts num_experts_per_tok sliding_window"),
           MOE_IGNORES, build_mixtral),
    Family("Qwen2-MoE", ("qwen2_moe",), LLAMA_READS | QWEN_WINDOW | _keys("""qkv_bias num_experts num_experts_per_tok
           moe_intermediate_size decoder_sparse_step mlp_only_layers shared_expert_intermediate_size"""),
           MOE_IGNORES, build_qwen2_moe),
    Family("Qwen3-MoE", ("qwen3_moe",), LLAMA_READS | QWEN_WINDOW | _keys("""num_experts num_experts_per_tok
           moe_intermediate_size decoder_sparse_step mlp_only_layers"""), MOE_IGNORES, build_qwen3_moe),
    Family("DeepSeek-V2/V3", ("deepseek_v2", "deepseek_v3"), LLAMA_READS | _keys("""kv_lora_rank q_lora_rank
           qk_rope_head_dim qk_nope_head_dim v_head_dim n_routed_experts n_shared_experts num_experts_per_tok
           moe_intermediate_size first_k_dense_replace moe_layer_freq num_nextn_predict_layers n_group topk_group"""),
           MOE_IGNORES | _keys("""topk_method scoring_func routed_scaling_factor aux_loss_alpha
           seq_aux ep_size rope_interleave"""), build_deepseek),
    Family("gpt-oss", ("gpt_oss",), LLAMA_READS | _keys("""num_local_experts num_experts_per_tok experts_per_token
           sliding_window layer_types rope_scaling swiglu_limit"""),
           MOE_IGNORES | _keys("swiglu_alpha initial_context_length"), build_gpt_oss),
)
_BY_TYPE = {mt: f for f in FAMILIES for mt in f.model_types}


def family_of(cfg: dict[str, Any], where: str) -> Family:
    mtype = cfg.get("model_type")
    if mtype is None:
        raise InputError(f"{where}: no model_type; tpopt needs it to know which keys the config uses")
    if mtype in _BY_TYPE:
        return _BY_TYPE[mtype]
    if isinstance(cfg.get("text_config"), dict):
        raise InputError(f"{where}: model_type {mtype!r} is a multimodal config; tpopt plans decoder-only "
                         f"language models: save its text_config as a config.json of its own")
    known = ", ".join(sorted(_BY_TYPE, key=str.lower))
    raise InputError(f"{where}: model_type {mtype!r} is not supported (known: {known})")


def arch_from_hf_dict(cfg: dict[str, Any], where: str, name: str) -> ModelArch:
    """Map a parsed config dict through its family's key map, then build and validate the model."""
    if not isinstance(cfg, dict):
        raise InputError(f"{where}: expected a JSON object")
    family = family_of(cfg, where)
    unknown = sorted(set(cfg) - family.reads - family.ignores - GENERIC_IGNORED - DROPOUT_KEYS)
    if unknown:
        raise InputError(f"{where}: key(s) not understood for {family.name} (model_type "
                         f"{cfg['model_type']!r}): {', '.join(unknown)}; tpopt does not guess what they change")
    c = Config(cfg, where, family)
    t = family.build(c)
    for k in sorted(DROPOUT_KEYS & set(cfg)):
        v = cfg[k]
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0:
            c.notes.append(f"{k} = {v}: dropout masks are not in the activation model")
    if cfg.get("quantization_config") is not None:
        c.notes.append("quantization_config describes the stored weights, not training; the scenario's "
                       "precision applies")
    t["source"] = f"Hugging Face config {where} ({family.name})"
    t["notes"] = c.notes
    return build_model(name, t)


def model_from_hf_config(path: str | PathLike[str], name: str | None = None) -> ModelArch:
    """A :class:`ModelArch` from a Hugging Face ``config.json`` (UTF-8, at most 16 MiB)."""
    p = Path(path)
    text = read_text_capped(p, "config file")
    cfg = loads_json(text, str(p))
    if name is None:
        given = cfg.get("_name_or_path") if isinstance(cfg, dict) else None
        name = given if isinstance(given, str) and given else _name_from_path(p)
    if name is None:  # nothing in the path names it: the config's own fields do (model type, parameters)
        arch = arch_from_hf_dict(cfg, str(p), "unnamed")
        return replace(arch, name=f"{cfg.get('model_type', 'model')}-{fmt_count(param_count(arch), 3)}")
    return arch_from_hf_dict(cfg, str(p), name)


GENERIC_FOLDERS = frozenset({"", ".", "..", "hf", "config", "configs", "model", "models", "tmp", "temp", "data",
                             "snapshots", "checkpoint", "checkpoints"})


def _name_from_path(p: Path) -> str | None:
    """A model name from the config's path: the file's stem unless it is ``config``, else its folder
    unless the folder's name says nothing (``hf``, ``models``, ... or a Hugging Face snapshot's commit
    hash); None when neither names the model."""
    if p.stem.lower() != "config":
        return p.stem
    folder = p.resolve().parent.name
    if folder.lower() in GENERIC_FOLDERS or (len(folder) == 40 and all(ch in "0123456789abcdef" for ch in folder)):
        return None
    return folder


def hf_cache_dir() -> str | None:
    """The Hugging Face hub cache directory, read from the environment at call time:
    HF_HUB_CACHE, else HF_HOME/hub, else huggingface_hub's default (~/.cache/huggingface/hub)."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    if os.environ.get("HF_HOME"):
        return os.path.join(os.environ["HF_HOME"], "hub")
    return None


def model_from_hf_cache(repo_id: str, cache_dir: str | None = None) -> ModelArch:
    """The model of a Hugging Face id from ``config.json`` in the local cache; never downloads.

    ``org/name`` or ``org/name@revision`` (a branch, tag or commit already in the cache). Needs the
    optional dependency ``huggingface_hub`` (``pip install 'tpopt[hf]'``). Fetch the config once with
    ``huggingface-cli download org/name config.json``.
    """
    repo, _, revision = repo_id.partition("@")
    try:
        from huggingface_hub import try_to_load_from_cache  # lazy: start-up time
        from huggingface_hub.errors import HFValidationError  # lazy: start-up time
    except ImportError:
        raise InputError(f"model {repo_id!r} looks like a Hugging Face id; resolving it needs huggingface_hub "
                         f"(pip install 'tpopt[hf]'), or give the config.json path instead") from None
    cache = cache_dir if cache_dir is not None else hf_cache_dir()
    try:
        found = try_to_load_from_cache(repo, "config.json", cache_dir=cache, revision=revision or None)
    except HFValidationError as exc:
        raise InputError(f"model {repo_id!r}: not a valid Hugging Face id ({exc})") from None
    if not isinstance(found, str):
        where = cache or "the default Hugging Face cache"
        raise InputError(f"model {repo_id!r} is neither in the catalog nor in {where} (tpopt never downloads: "
                         f"run `huggingface-cli download {repo} config.json` once, or give the config.json path)")
    return model_from_hf_config(found, name=repo_id)
