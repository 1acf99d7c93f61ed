"""Software-stack profiles (catalogs/stacks.toml): what a training framework overlaps, costs and keeps in
memory by default. Public accessor: :func:`stack_profile` (``stack_profile("megatron-core")``), the
names in :func:`stack_names`, the default :data:`DEFAULT_STACK`."""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from functools import cache
from pathlib import Path
from typing import Any, ClassVar

from tpopt.catalogs.declare import (
    FLAG,
    SOURCES,
    TEXT,
    Kind,
    choice,
    duration,
    fraction,
    key,
    read_entry,
    size,
    spec,
    whole,
)
from tpopt.catalogs.tables import builtin_toml, check_keys, read_text_capped
from tpopt.errors import InputError
from tpopt.models.context import CP_MERGES, CP_RINGS
from tpopt.models.hardware import StackProfile
from tpopt.models.memory import LOSS_KINDS, PP_BUFFERS
from tpopt.models.units import parse_fraction

LOSS_NAMES = tuple(LOSS_KINDS)
"""The cross-entropy kinds a stack's ``loss`` names (tpopt.models.memory.LOSS_KINDS)."""

STACKS_FILE = Path(__file__).resolve().parent / "stacks.toml"
DEFAULT_STACK = "megatron-core"
TP_OVERLAPS = (True, False, "async")
FP8_RECIPES = ("current", "delayed", "mxfp8", "none")
ATTENTION_KERNELS = ("native", "portable")
"""native: the card's own fused attention (FlashAttention-3 / cuDNN through Transformer Engine on Hopper);
portable: a kernel not written for the card (PyTorch SDPA's FlashAttention-2 backend on Hopper)."""


def _tp_overlap(value: Any, what: str, _context: Any) -> bool | str:
    if value not in TP_OVERLAPS or (isinstance(value, str) and value != "async"):
        raise InputError(f"{what} must be true, false or \"async\", got {value!r}")
    overlap: bool | str = value
    return overlap


def _dp_overlap(value: Any, what: str, _context: Any) -> float:
    """true: 1, false: 0, else a fraction; ``what`` is ``"<where>: dp_overlap"``."""
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    where, _, field = what.rpartition(": ")
    return parse_fraction(value, f"{where} {field}", allow_zero=True)


def _fp8_recipe(value: Any, what: str, _context: Any) -> str:
    recipe: str = TEXT.read(value, what, None)
    if recipe not in FP8_RECIPES:
        raise InputError(f"{what} must be one of {', '.join(FP8_RECIPES)}, got {recipe!r}")
    return recipe


def _names(value: Any, what: str, _context: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(m, str) for m in value):
        raise InputError(f"{what} must be a list of names")
    return tuple(value)


def _sigma(value: Any, what: str, _context: Any) -> float:
    """A lognormal sigma in [0, 5) (the stack's step-time residual spread)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= float(value) < 5.0:
        raise InputError(f"{what} must be a lognormal sigma between 0 and 5, got {value!r}")
    return float(value)


def _kernel_efficiency(value: Any, what: str, _context: Any) -> float:
    """A positive factor of at most 2 on the card's kernel efficiencies (1: the reference stack's kernels)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 < float(value) <= 2.0:
        raise InputError(f"{what} must be a factor in (0, 2], got {value!r}")
    return float(value)


def _attention_kernel(value: Any, what: str, _context: Any) -> str:
    kernel: str = TEXT.read(value, what, None)
    if kernel not in ATTENTION_KERNELS:
        raise InputError(f"{what} must be one of {', '.join(ATTENTION_KERNELS)}, got {kernel!r}")
    return kernel


@dataclass(frozen=True, eq=False, repr=False)
class StackKeys:
    """One ``[NAME]`` table of stacks.toml: each key sets the :class:`~tpopt.models.hardware.StackProfile` field
    of its name; every key is required but residual_sigma, and every value but display needs a source."""

    display: str = key(TEXT, required=True, help="the stack's name in reports")
    tp_overlap: bool | str = key(Kind(_tp_overlap, 'true | false | "async"', sep=": "), required=True, source=True,
                                 help="tensor-parallel collectives overlapped by default")
    dp_overlap: float = key(Kind(_dp_overlap, "true | false | fraction", parse_fraction, {"allow_zero": True},
                                 sep=": "), required=True, source=True,
                            help="share of the data-parallel collectives hidden behind compute")
    fsdp_prefetch: int = key(whole(0), required=True, source=True,
                             help="ZeRO-3 / FSDP units gathered ahead of use")
    dp_bucket: float = key(size(), required=True, source=True, help="bytes per data-parallel / FSDP bucket")
    dp_bucket_per_rank: float = key(size(), "0MB", source=True,
                                    help="bucket growth per data-parallel rank: max(dp_bucket, this x ranks)")
    moe_dispatcher: str = key(TEXT, required=True, source=True, help="the default MoE token dispatcher")
    moe_a2a_overlap: str = key(TEXT, required=True, source=True, help="MoE all-to-all overlap by default")
    flash_attention: bool = key(FLAG, required=True, source=True, help="fused attention by default")
    sequence_parallel: bool = key(FLAG, required=True, source=True, help="sequence parallelism under TP by default")
    dropout: bool = key(FLAG, required=True, source=True, help="dropout layers by default")
    recompute: str = key(TEXT, required=True, source=True, help="the default recompute")
    recompute_modules: tuple[str, ...] = key(Kind(_names, "list of names", sep=": "), required=True, source=True,
                                             help="the stack's selective-recompute vocabulary")
    activation_offload: bool = key(FLAG, required=True, source=True, help="the stack can offload activations")
    fp8_recipe: str = key(Kind(_fp8_recipe, " | ".join(FP8_RECIPES), sep=": "), required=True, source=True,
                          help="FP8 scaling of the stack's FP8 recipes")
    fp8_param_gather: bool = key(FLAG, required=True, source=True, help="FP8 weights kept and gathered in FP8")
    moe_probs_in_activation: bool = key(FLAG, required=True, source=True,
                                        help="router probabilities scale the experts' activation")
    quantized_saved_inputs: bool = key(FLAG, False, source=True,
                                       help="under an FP8-family recipe each linear layer saves its quantised "
                                            "input for the backward instead of the 16-bit one")
    step_overhead: float = key(duration(), required=True, source=True, help="fixed time per optimizer step")
    microbatch_overhead: float = key(duration(), required=True, source=True,
                                     help="fixed time per micro-batch per pipeline stage")
    cuda_context: float = key(size(), required=True, source=True, help="device memory of the CUDA context")
    communicator_buffers: float = key(size(), required=True, source=True,
                                      help="device memory of the communicators' buffers per rank")
    allocator_reserve: float = key(fraction(allow_zero=True), required=True, source=True,
                                   help="caching allocator's reserved / allocated ratio at the peak, less 1")
    residual_sigma: float = key(Kind(_sigma, "lognormal sigma in [0, 5)", sep=": "), 0.0, source=True,
                                help="step-time model's spread on the stack's runs (0: a card's own applies)")
    kernel_efficiency: float = key(Kind(_kernel_efficiency, "factor in (0, 2]", sep=": "), 1.0, source=True,
                                   help="the stack's kernels against the reference stack's: scales the card's "
                                        "GEMM, attention and memory-bound efficiencies")
    attention_kernel: str = key(Kind(_attention_kernel, " | ".join(ATTENTION_KERNELS), sep=": "), "native",
                                source=True, help="the stack's attention kernel: the card's own fused attention "
                                                  "(native) or one not written for the card (portable)")
    loss: str = key(choice(LOSS_NAMES), "fused", source=True,
                    help="the cross-entropy: fused (4 B per logit), eager (12, 16 under loss parallelism) or "
                         "compiled (4)")
    expert_gemm_dispatch: float = key(duration(), "0s", source=True,
                                      help="time per local expert of one grouped expert GEMM call that no "
                                           "GPU work hides (a per-expert GEMM loop; 0: one launch for all)")
    grouped_gemm_efficiency: float = key(Kind(_kernel_efficiency, "factor in (0, 2]", sep=": "), 1.0, source=True,
                                         help="share of their modelled speed the routed experts' grouped GEMM calls "
                                              "reach (fitted on the stack's MoE runs; 1: as modelled)")
    ring_step_efficiency: float = key(Kind(_kernel_efficiency, "factor in (0, 2]", sep=": "), 1.0, source=True,
                                      help="share of their modelled speed the attention calls of a context-parallel "
                                           "ring's later steps reach (fitted on the stack's CP runs; 1: as "
                                           "modelled)")
    moe_host_launch: float = key(duration(), "0s", source=True,
                                 help="host launch time per MoE block per micro-batch (forward and backward) that the "
                                      "GPU waits for when the recipe does not run the block's static parts as CUDA "
                                      "graphs ([moe] cuda_graphs); 0: none")
    expert_bias_loop: bool = key(FLAG, False, source=True,
                                 help="a MoE model's expert output bias is added by an eager loop over the local "
                                      "experts, weighted by the router probabilities (Megatron-Core TEGroupedMLP)")
    rope_scaled_unfused: bool = key(FLAG, False, source=True,
                                    help="a RoPE with a YaRN attention factor other than 1 runs unfused, in PyTorch "
                                         "(Megatron-Core: Transformer Engine's fused RoPE takes no factor)")
    activation_clamp_unfused: bool = key(FLAG, False, source=True,
                                         help="a clamped gated activation (gpt-oss) clamps the experts' fc1 output in "
                                              "PyTorch before the fused activation (Megatron-Core)")
    cp_ring: str = key(choice(CP_RINGS), "p2p", source=True,
                       help="how ring context parallelism passes K, V: p2p (a block per step, behind that step) or "
                            "allgather (all blocks gathered once behind the first step; FP32 dK, dV passed back)")
    kv_repeat: bool = key(FLAG, False, source=True,
                          help="the attention call takes K, V repeated to the query heads (context.ring_kv_arch): "
                               "a context-parallel ring passes d_attn-wide blocks")
    pp_buffers: str = key(choice(PP_BUFFERS), "send-recv", source=True,
                          help="how the pipeline runtime holds boundary tensors: send-recv (a buffer per direction), "
                               "per-microbatch (a receive buffer per micro-batch for activations and gradients, the "
                               "last stage's outputs kept for the step) or per-microbatch-outputs (every stage's)")
    cp_merge: str = key(choice(CP_MERGES), "fused", source=True,
                        help="torch's context-parallel ring (cp_ring allgather): its merges and gradient accumulation "
                             "fused by the compiler (fused) or run eagerly op by op (unfused)")
    tp_input_regather: bool = key(FLAG, True, source=True, help="the backward gathers the column-parallel layers' "
                                  "sharded input again for the weight gradients (false: the gathered input is kept)")
    fp8_tp_gather: bool = key(FLAG, False, source=True,
                              help="tensor-wise dynamic FP8 gathers FP8 copies over TP; reductions stay 16-bit")
    sources: dict[str, str] = key(SOURCES, required=True, help="the source of every value, by key")

    #: The values checked before the others (the order of the hand-written reader this replaced).
    READ_FIRST: ClassVar = ("tp_overlap", "dp_overlap", "fp8_recipe", "recompute_modules")


KEYS = tuple(f.name for f in fields(StackKeys))
OPTIONAL = tuple(f.name for f in fields(StackKeys) if not spec(f).required)
"""Keys a profile may leave out: residual_sigma (none: a card's own sigma applies on the stack alone),
dp_bucket_per_rank (none: a fixed bucket), kernel_efficiency (1: the reference stack's kernels), attention_kernel
(native: the card's own fused attention), loss (fused: a fused FP32 cross-entropy), expert_gemm_dispatch
(0: the stack's grouped expert GEMM is one launch, no per-expert floor), grouped_gemm_efficiency (1: the
experts' grouped GEMM calls take their modelled time), ring_step_efficiency (1: a context-parallel ring's later
attention calls take their modelled time), moe_host_launch (0: no exposed host
launch time in MoE blocks), expert_bias_loop (false: an expert bias costs nothing apart), rope_scaled_unfused
(false: every RoPE fused), activation_clamp_unfused (false: a clamp costs nothing apart), cp_ring (p2p: Transformer
Engine's ring), kv_repeat (false: the attention takes the KV heads as they are), pp_buffers (send-recv: one send and
one receive buffer per direction), cp_merge (fused: a ring's merges fused, as the reference stack's and a compiled
torch ring's are), tp_input_regather (true: the sharded input gathered again for the weight gradient) and
fp8_tp_gather (false: 16-bit TP gathers)."""
SOURCED = tuple(f.name for f in fields(StackKeys) if spec(f).source)


def build_stack(name: str, t: Any) -> StackProfile:
    """One profile from its TOML table, read as :class:`StackKeys` declares it; every key but :data:`OPTIONAL`
    is required and every value but the display name needs a source."""
    where = f"stacks.toml [{name}]"
    check_keys(t, KEYS, where)
    missing = [k for k in KEYS if k not in t and k not in OPTIONAL]
    if missing:
        raise InputError(f"{where}: missing key(s) {', '.join(missing)}")
    src = SOURCES.read(t["sources"], f"{where}{SOURCES.sep}sources", None)  # required: present
    unsourced = [k for k in SOURCED if k not in src and k in t]
    if unsourced:
        raise InputError(f"{where}: no source for {', '.join(unsourced)}")
    k: StackKeys = read_entry(StackKeys, t, where)
    return StackProfile(name=name, **{f.name: getattr(k, f.name) for f in fields(k)})


@cache
def _builtin() -> dict[str, StackProfile]:
    try:
        data = builtin_toml(STACKS_FILE, read_text_capped(STACKS_FILE, "catalog file"), tomllib.loads)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{STACKS_FILE}: malformed TOML ({exc})") from None
    return {name: build_stack(name, t) for name, t in data.items()}


def stack_names() -> tuple[str, ...]:
    """The stacks of catalogs/stacks.toml, in file order."""
    return tuple(_builtin())


def stack_profile(name: str = DEFAULT_STACK) -> StackProfile:
    """The named stack's profile, or one InputError listing the known stacks."""
    stacks = _builtin()
    if name not in stacks:
        raise InputError(f"unknown stack {name!r} (known: {', '.join(stacks)})")
    return stacks[name]


FLEX_DISPATCHERS = ("flex", "deepep", "hybridep")
"""Stack dispatcher names (catalogs/stacks.toml, recipes.toml ``moe_dispatcher``) whose software is the flex
backend of catalogs/frameworks/megatron-lm.toml [flex_dispatcher] (DeepEP / HybridEP: CUDA kernels)."""
FLEX_FILE = Path(__file__).resolve().parent / "frameworks" / "megatron-lm.toml"


@cache
def _flex_file() -> dict[str, Any]:
    """catalogs/frameworks/megatron-lm.toml, read once for its [flex_dispatcher] and [vendor_settings] tables."""
    return builtin_toml(FLEX_FILE, read_text_capped(FLEX_FILE, "catalog file"), tomllib.loads)


@cache
def _flex_table() -> dict[str, Any]:
    flex = _flex_file().get("flex_dispatcher", {})
    if not isinstance(flex.get("vendors"), list) or not isinstance(flex.get("fallback"), str):
        raise InputError(f"{FLEX_FILE}: [flex_dispatcher] needs vendors (a list) and fallback (a name)")
    return dict(flex)


@cache
def _vendor_settings() -> dict[str, tuple[str, ...]]:
    table = _flex_file().get("vendor_settings", {})
    sources = table.get("sources", {})
    out = {k: v for k, v in table.items() if k != "sources"}
    if not all(isinstance(v, list) and v and all(isinstance(m, str) for m in v) for v in out.values()) or \
            not all(isinstance(sources.get(k), str) for k in out):
        raise InputError(f"{FLEX_FILE}: [vendor_settings] needs a list of card makers and a source for each setting")
    return {k: tuple(v) for k, v in out.items()}


def settings_off_cards(settings: Iterable[str], makers: Mapping[str, str]) -> dict[str, str]:
    """Of a recipe's ``settings`` (catalogs/recipes.toml keys), those whose software does not run on every card of
    ``makers`` (card -> accelerators.toml ``vendor``), each with why ("its software runs on NVIDIA cards only and
    mi300x is made by AMD"): the settings catalogs/frameworks/megatron-lm.toml [vendor_settings] ties to card makers
    the card's is not among. The rule catalogs.recipes.Recipe.moe_settings_on applies to a recipe's MoE settings,
    card by card."""
    table = _vendor_settings()
    out = {}
    for setting in settings:
        off = [f"{card} is made by {maker}" for card, maker in makers.items()
               if maker not in table.get(setting, (maker,))]
        if off:
            out[setting] = f"its software runs on {' / '.join(table[setting])} cards only and {', '.join(off)}"
    return out


def dispatcher_on_card(name: str, card: str, maker: str) -> tuple[str, str]:
    """The stack dispatcher (its own name) that runs on ``card``, made by ``maker`` (accelerators.toml
    ``vendor``), and why it is not ``name`` ("" where it is): a flex dispatcher (:data:`FLEX_DISPATCHERS`) runs
    only on the makers catalogs/frameworks/megatron-lm.toml [flex_dispatcher] lists; on another maker's card the
    stack runs that table's fallback (alltoall). The one rule the step-time model's costing
    (catalogs.scenario) and the Megatron-LM / Megatron-Bridge exports (tpopt.frameworks.megatron_stack) apply."""
    flex = _flex_table()
    if name not in FLEX_DISPATCHERS or maker in flex["vendors"]:
        return name, ""
    return str(flex["fallback"]), (f"its {flex['backend']} backend runs on {' / '.join(flex['vendors'])} cards only "
                                   f"and {card} is made by {maker}")
