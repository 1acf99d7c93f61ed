"""Model architectures from tables: one schema for catalog ``models.toml`` entries and Hugging Face
configs (:mod:`tpopt.catalogs.hf` maps a config onto the same keys), checked and built into a
:class:`~tpopt.models.arch.ModelArch`."""

from __future__ import annotations

from typing import Any

from tpopt.catalogs.tables import check_keys, flag_field, need, text_field
from tpopt.errors import InputError
from tpopt.models.arch import ACTIVATIONS, NORMS, POSITIONS, ModelArch, moe_layer_count

#: Largest architecture integer accepted (widths, counts, vocabularies): far above any real model,
#: low enough that products of a few of them stay exact in float64 FLOP counts.
ARCH_INT_MAX = 100_000_000
_ARCH_REQUIRED = ("layers", "hidden", "heads", "ffn", "vocab")
_ARCH_INT = {  # key -> minimum (maximum ARCH_INT_MAX)
    "layers": 1, "hidden": 1, "heads": 1, "kv_heads": 1, "head_dim": 1, "ffn": 1, "vocab": 1,
    "learned_positions": 0, "sliding_window": 0, "sliding_layers": 0, "layer_norms": 0,
    "q_lora_rank": 0, "kv_lora_rank": 0, "qk_rope_dim": 0, "qk_nope_dim": 0, "v_head_dim": 0,
    "experts": 0, "top_k": 0, "expert_ffn": 0, "shared_experts": 0, "shared_ffn": 0, "dense_layers": 0,
    "moe_step": 1, "mtp_layers": 0, "router_groups": 0, "router_group_topk": 0,
}
_ARCH_BOOL = ("tied_embeddings", "qk_norm", "gated_mlp", "qkv_bias", "linear_bias", "parallel_block", "norm_bias",
              "o_bias", "mlp_bias", "head_bias", "embedding_norm", "attn_sinks", "shared_expert_gate", "router_bias")
_ARCH_ENUM = {"norm": NORMS, "activation": ACTIVATIONS, "positions": POSITIONS}
MODEL_KEYS = tuple(_ARCH_INT) + _ARCH_BOOL + tuple(_ARCH_ENUM) + ("mlp_only_layers", "source", "notes")
_MOE_ONLY = ("top_k", "expert_ffn", "shared_experts", "shared_ffn", "dense_layers", "router_groups",
             "router_group_topk")
_MLA_ONLY = ("q_lora_rank", "qk_rope_dim", "qk_nope_dim", "v_head_dim")


def arch_int(value: object, what: str, minimum: int = 0, maximum: int = ARCH_INT_MAX) -> int:
    """A whole number in [minimum, maximum] given as a TOML/JSON integer (no units, no fractions)."""
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer() and abs(value) <= maximum:
            value = int(value)
        else:
            raise InputError(f"{what}: expected a whole number, got {value!r}")
    if value < minimum or value > maximum:
        raise InputError(f"{what}: {value:,} is outside [{minimum:,}, {maximum:,}]")
    return value


def build_model(name: str, t: dict[str, Any]) -> ModelArch:
    """A :class:`ModelArch` from a catalog table (or a Hugging Face config mapped to the same keys).

    Required: layers, hidden, heads, ffn, vocab; kv_heads defaults to heads, head_dim to hidden /
    heads (MLA: nope + rope). Every other field has the default of a Llama block. Unknown keys,
    wrong types and inconsistent combinations (top_k > experts, MLA dims without a kv latent, a
    learned position table without positions = "learned", ...) are one :class:`InputError`.
    """
    where = f"model {name}"
    check_keys(t, MODEL_KEYS, where)
    for k in _ARCH_REQUIRED:
        need(t, k, where)
    kw: dict[str, Any] = {k: arch_int(t[k], f"{where} {k}", lo) for k, lo in _ARCH_INT.items() if k in t}
    for k in _ARCH_BOOL:
        if k in t:
            kw[k] = flag_field(t, k, where)
    for k, allowed in _ARCH_ENUM.items():
        if k in t:
            if t[k] not in allowed:
                raise InputError(f"{where}: {k} must be one of {', '.join(allowed)}, got {t[k]!r}")
            kw[k] = t[k]
    source = text_field(t, "source", where, "") or ""
    notes = t.get("notes", [])
    notes = [notes] if isinstance(notes, str) else notes
    if not isinstance(notes, list) or not all(isinstance(x, str) for x in notes):
        raise InputError(f"{where}: notes must be a string or a list of strings")
    layers, heads = kw["layers"], kw["heads"]
    only = t.get("mlp_only_layers", [])
    if not isinstance(only, list):
        raise InputError(f"{where}: mlp_only_layers must be a list of block indices")
    kw["mlp_only_layers"] = tuple(sorted({arch_int(i, f"{where} mlp_only_layers", 0, layers - 1) for i in only}))

    # multi-head latent attention
    if kw.get("kv_lora_rank", 0):
        for k in ("qk_rope_dim", "qk_nope_dim", "v_head_dim"):
            if kw.get(k, 0) < 1:
                raise InputError(f"{where}: multi-head latent attention (kv_lora_rank) needs {k} >= 1")
        qk = kw["qk_nope_dim"] + kw["qk_rope_dim"]
        if kw.setdefault("head_dim", qk) != qk:
            raise InputError(f"{where}: with MLA head_dim must be qk_nope_dim + qk_rope_dim = {qk}")
        if kw.setdefault("kv_heads", heads) != heads:
            raise InputError(f"{where}: with MLA every head has its own key and value (kv_heads = heads)")
    else:
        given = [k for k in _MLA_ONLY if kw.get(k, 0)]
        if given:
            raise InputError(f"{where}: {', '.join(given)} describe multi-head latent attention, which needs "
                             f"kv_lora_rank >= 1")
    kw.setdefault("kv_heads", heads)
    if "head_dim" not in kw:
        if kw["hidden"] % heads:
            raise InputError(f"{where}: hidden ({kw['hidden']}) is not a multiple of heads ({heads}); give head_dim")
        kw["head_dim"] = kw["hidden"] // heads
    if heads % kw["kv_heads"]:
        raise InputError(f"{where}: heads ({heads}) must be a multiple of kv_heads ({kw['kv_heads']})")

    # positions
    rows = kw.get("learned_positions", 0)
    positions = kw.setdefault("positions", "learned" if rows else "rope")
    if (positions == "learned") != (rows > 0):
        raise InputError(f"{where}: positions = \"learned\" goes with learned_positions >= 1 (a table of that many "
                         f"rows), and only with it")

    # sliding window
    if "sliding_layers" in kw:
        if not kw.get("sliding_window", 0):
            raise InputError(f"{where}: sliding_layers needs sliding_window >= 1")
        if kw["sliding_layers"] > layers:
            raise InputError(f"{where}: sliding_layers ({kw['sliding_layers']}) exceeds layers ({layers})")

    # mixture of experts
    experts = kw.get("experts", 0)
    if experts:
        if not 1 <= kw.get("top_k", 0) <= experts:
            raise InputError(f"{where}: top_k must be between 1 and experts ({experts}), got {kw.get('top_k', 0)}")
        if kw.get("expert_ffn", 0) < 1:
            raise InputError(f"{where}: a mixture-of-experts model needs expert_ffn >= 1 (one expert's width)")
        if kw.get("shared_experts", 0) and kw.get("shared_ffn", 0) < 1:
            raise InputError(f"{where}: shared_experts needs shared_ffn >= 1 (one shared expert's width)")
        groups, topk_groups = kw.get("router_groups", 0), kw.get("router_group_topk", 0)
        if bool(groups) != bool(topk_groups) or (groups and (experts % groups or topk_groups > groups)):
            raise InputError(f"{where}: group-limited routing needs router_groups dividing experts ({experts}) and "
                             f"1 <= router_group_topk <= router_groups (got {groups}, {topk_groups})")
        if kw.get("dense_layers", 0) >= layers:
            raise InputError(f"{where}: dense_layers ({kw['dense_layers']}) leaves no MoE block in {layers} layers")
    else:
        given = [k for k in _MOE_ONLY + ("shared_expert_gate", "router_bias") if kw.get(k)]
        given += ["moe_step"] if kw.get("moe_step", 1) != 1 else []
        given += ["mlp_only_layers"] if kw["mlp_only_layers"] else []
        if given:
            raise InputError(f"{where}: {', '.join(given)} describe(s) mixture-of-experts blocks, which need "
                             f"experts >= 1")
    arch = ModelArch(name=name, source=source, extra={"notes": list(notes)}, **kw)
    if experts and moe_layer_count(arch) == 0:
        raise InputError(f"{where}: no block has routed experts (check dense_layers, moe_step, mlp_only_layers)")
    return arch
