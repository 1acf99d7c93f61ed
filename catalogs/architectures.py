"""Model architectures from tables: one schema for catalog ``models.toml`` entries and Hugging Face
configs (:mod:`tpopt.catalogs.hf` maps a config onto the same keys), checked and built into a
:class:`~tpopt.models.arch.ModelArch`."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar

from tpopt.catalogs.declare import FLAG, TEXT, Kind, key, number, read_entry, spec
from tpopt.catalogs.tables import check_keys, need
from tpopt.errors import InputError
from tpopt.models.arch import ACTIVATIONS, NORMS, POSITIONS, ModelArch, moe_layer_count

#: Largest architecture integer accepted (widths, counts, vocabularies): far above any real model,
#: low enough that products of a few of them stay exact in float64 FLOP counts.
ARCH_INT_MAX = 100_000_000


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


def width(minimum: int) -> Kind:
    """A whole number in [minimum, :data:`ARCH_INT_MAX`] (no units): ``model NAME KEY: ...`` in errors."""
    return Kind(lambda value, what, _context: arch_int(value, what, minimum), f"whole number >= {minimum}",
                arch_int, {"minimum": minimum, "maximum": ARCH_INT_MAX})


def one_of(options: tuple[str, ...]) -> Kind:
    """One of ``options``: ``model NAME: KEY must be one of ...`` in errors."""

    def read(value: Any, what: str, _context: Any) -> str:
        if value not in options:
            raise InputError(f"{what} must be one of {', '.join(options)}, got {value!r}")
        text: str = value
        return text

    return Kind(read, " | ".join(options), sep=": ")


def _notes(value: Any, what: str, _context: Any) -> list[str]:
    """A note or a list of notes."""
    notes = [value] if isinstance(value, str) else value
    if not isinstance(notes, list) or not all(isinstance(x, str) for x in notes):
        raise InputError(f"{what} must be a string or a list of strings")
    return list(notes)


def _block_indices(value: Any, what: str, table: dict[str, Any]) -> tuple[int, ...]:
    """Sorted distinct block indices below ``layers`` (context: the entry's table, whose layers is read)."""
    if not isinstance(value, list):
        raise InputError(f"{what} must be a list of block indices")
    where, _, field = what.rpartition(": ")
    layers = arch_int(table["layers"], f"{where} layers", 1)
    return tuple(sorted({arch_int(i, f"{where} {field}", 0, layers - 1) for i in value}))


@dataclass(frozen=True, eq=False, repr=False)
class ArchKeys:
    """One ``[NAME]`` table of models.toml, or a Hugging Face config mapped to the same keys
    (:mod:`tpopt.catalogs.hf`); context: the table itself. Each key sets the
    :class:`~tpopt.models.arch.ModelArch` field of its name (``to``: source and notes elsewhere); its default is
    that field's (None: derived from other keys, or not given)."""

    layers: int = key(width(1), required=True, help="transformer blocks")
    hidden: int = key(width(1), required=True, help="model width h")
    heads: int = key(width(1), required=True, help="attention (query) heads")
    kv_heads: int | None = key(width(1), help="key/value heads (default: heads)")
    head_dim: int | None = key(width(1), help="per-head width (default: hidden / heads; MLA: nope + rope)")
    ffn: int = key(width(1), required=True, help="width of a dense MLP block")
    vocab: int = key(width(1), required=True, help="vocabulary size")
    learned_positions: int = key(width(0), 0, help="rows of a learned position-embedding table")
    sliding_window: int = key(width(0), 0, help="attention window in tokens (0: full causal attention)")
    sliding_layers: int | None = key(width(0), help="layers using the window (default: all)")
    layer_norms: int = key(width(0), 2, help="hidden-width norms per block")
    rope_attention_factor: float = key(number(allow_zero=False), 1.0,
                                       help="RoPE scaling: YaRN's attention factor on cos and sin (1: none)")
    activation_clamp: float = key(number(), 0.0, help="the gated activation's inputs clamped to this limit, the gate "
                                  "from above and the linear half both ways (gpt-oss swiglu_limit; 0: none)")
    q_lora_rank: int = key(width(0), 0, help="MLA: low-rank query projection (0: a full projection)")
    kv_lora_rank: int = key(width(0), 0, help="MLA: joint key/value latent width (> 0 switches MLA on)")
    qk_rope_dim: int = key(width(0), 0, help="MLA: per-head q/k dims carrying RoPE")
    qk_nope_dim: int = key(width(0), 0, help="MLA: per-head q/k dims without RoPE")
    v_head_dim: int = key(width(0), 0, help="MLA: per-head value width")
    experts: int = key(width(0), 0, help="MoE: routed experts per MoE block")
    top_k: int = key(width(0), 0, help="MoE: routed experts per token")
    expert_ffn: int = key(width(0), 0, help="MoE: width of one routed expert")
    shared_experts: int = key(width(0), 0, help="MoE: experts every token passes through")
    shared_ffn: int = key(width(0), 0, help="MoE: width of one shared expert")
    dense_layers: int = key(width(0), 0, help="MoE: leading blocks with a dense MLP")
    moe_step: int = key(width(1), 1, help="MoE: after the dense layers, every moe_step-th block is MoE")
    mtp_layers: int = key(width(0), 0, help="multi-token-prediction depth")
    router_groups: int = key(width(0), 0, help="MoE: group-limited routing, experts in this many groups")
    router_group_topk: int = key(width(0), 0, help="MoE: a token's experts come from at most this many groups")
    tied_embeddings: bool = key(FLAG, False, help="the LM head shares the embedding's weights")
    qk_norm: bool = key(FLAG, False, help="norms on queries and keys")
    gated_mlp: bool = key(FLAG, True, help="SwiGLU-style MLP (gate, up, down); false: up, down")
    qkv_bias: bool = key(FLAG, False, help="bias on the q, k, v projections only")
    linear_bias: bool = key(FLAG, False, help="bias on every linear layer")
    parallel_block: bool = key(FLAG, False, help="attention and MLP read one norm's output in parallel")
    norm_bias: bool = key(FLAG, True, help="a LayerNorm has a bias")
    o_bias: bool = key(FLAG, False, help="bias on the attention output projection")
    mlp_bias: bool = key(FLAG, False, help="biases on the MLP (and expert) linear layers")
    head_bias: bool = key(FLAG, False, help="bias on the LM head")
    embedding_norm: bool = key(FLAG, False, help="a norm right after the embedding")
    attn_sinks: bool = key(FLAG, False, help="one learned sink logit per head and layer")
    shared_expert_gate: bool = key(FLAG, False, help="MoE: sigmoid gate on the shared expert output")
    router_bias: bool = key(FLAG, False, help="MoE: bias on the router")
    norm: str = key(one_of(NORMS), "rmsnorm", help="hidden-width norm")
    activation: str = key(one_of(ACTIVATIONS), "silu", help="MLP non-linearity")
    positions: str | None = key(one_of(POSITIONS), help="position encoding (default: learned with "
                                                       "learned_positions, else rope)")
    source: str = key(TEXT, "", optional=True, help="where the numbers come from")
    notes: list[str] = key(Kind(_notes, "text or list of text", sep=": "), [], to="extra",
                           help="assumptions stated with the model")
    mlp_only_layers: tuple[int, ...] = key(Kind(_block_indices, "list of block indices", sep=": "), [],
                                           help="MoE: further block indices with a dense MLP")

    #: Keys that describe multi-head latent attention or mixture-of-experts blocks (rules of build_model).
    MLA_ONLY: ClassVar = ("q_lora_rank", "qk_rope_dim", "qk_nope_dim", "v_head_dim")
    MOE_ONLY: ClassVar = ("top_k", "expert_ffn", "shared_experts", "shared_ffn", "dense_layers", "router_groups",
                          "router_group_topk")


MODEL_KEYS = tuple(f.name for f in fields(ArchKeys))
MODEL_REQUIRED = tuple(f.name for f in fields(ArchKeys) if spec(f).required)


def build_model(name: str, t: dict[str, Any]) -> ModelArch:
    """A :class:`ModelArch` from a catalog table (or a Hugging Face config mapped to the same keys).

    Required: layers, hidden, heads, ffn, vocab; kv_heads defaults to heads, head_dim to hidden /
    heads (MLA: nope + rope). Every other field has the default of a Llama block. Unknown keys,
    wrong types and inconsistent combinations (top_k > experts, MLA dims without a kv latent, a
    learned position table without positions = "learned", ...) are one :class:`InputError`.
    """
    where = f"model {name}"
    check_keys(t, MODEL_KEYS, where)
    for k in MODEL_REQUIRED:
        need(t, k, where)
    read: ArchKeys = read_entry(ArchKeys, t, where, t)
    kw: dict[str, Any] = {f.name: getattr(read, f.name) for f in fields(read)
                          if f.name not in ("source", "notes") and getattr(read, f.name) is not None}
    source, notes = read.source, read.notes
    layers, heads = kw["layers"], kw["heads"]

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
        given = [k for k in ArchKeys.MLA_ONLY if kw.get(k, 0)]
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
        given = [k for k in ArchKeys.MOE_ONLY + ("shared_expert_gate", "router_bias") if kw.get(k)]
        given += ["moe_step"] if kw.get("moe_step", 1) != 1 else []
        given += ["mlp_only_layers"] if kw["mlp_only_layers"] else []
        if given:
            raise InputError(f"{where}: {', '.join(given)} describe(s) mixture-of-experts blocks, which need "
                             f"experts >= 1")
    arch = ModelArch(name=name, source=source, extra={"notes": list(notes)}, **kw)
    if experts and moe_layer_count(arch) == 0:
        raise InputError(f"{where}: no block has routed experts (check dense_layers, moe_step, mlp_only_layers)")
    return arch
