"""Framework recipes (catalogs/recipes.toml): the settings a published recipe of a software stack runs for a model
family (token dispatcher, EP all-to-all overlap, shared-expert overlap, attention backend, selective recompute),
each with its source. Public accessors: :func:`find_recipe` (the entry that applies to a stack, model, cards and
precision), :func:`recipes` (all entries of a stack); :class:`Recipe` says what an entry implies for a scenario's
[moe] and [memory] tables (:meth:`Recipe.moe_settings`, :meth:`Recipe.flash_attention`) and for a measured row's
recompute (:meth:`Recipe.recompute`), and states itself as an assumption (:meth:`Recipe.assumption`)."""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from functools import cache
from pathlib import Path
from typing import Any

from tpopt.catalogs.stacks import settings_off_cards, stack_names
from tpopt.catalogs.tables import builtin_toml, read_text_capped
from tpopt.errors import InputError
from tpopt.models import memory
from tpopt.models.moe import STACK_DISPATCHERS
from tpopt.models.moe import stack_defaults as moe_stack_defaults

RECIPES_FILE = Path(__file__).resolve().parent / "recipes.toml"
ATTENTION = {"fused": True, "unfused": False}
"""Attention backends of a recipe -> [memory] flash_attention (fused: no S x S scores kept)."""
SETTINGS = ("moe_dispatcher", "moe_a2a_overlap", "moe_shared_expert_overlap", "attention", "recompute_modules",
            "activation_offload_layers", "moe_cuda_graphs", "moe_fused_grouped_mlp")
MATCH_KEYS = ("name", "models", "accelerators", "precisions", "sources")
MOE_KEYS = {"moe_dispatcher": "dispatcher", "moe_a2a_overlap": "a2a_overlap", "moe_cuda_graphs": "cuda_graphs",
            "moe_fused_grouped_mlp": "fused_grouped_mlp"}
"""Recipe settings -> the [moe] keys they supply (:meth:`Recipe.moe_settings`)."""
SETTING_WORDS = {"moe_a2a_overlap": "EP all-to-all overlap", "moe_cuda_graphs": "CUDA graphs of the MoE blocks",
                 "moe_fused_grouped_mlp": "fused grouped MLP"}
"""How the report names a recipe's MoE setting that a card's maker does not run (:meth:`Recipe.moe_settings_on`)."""
PER_CARD = ("moe_cuda_graphs",)
"""Vendor-only settings each plan's card decides alone (the MoE blocks' host launch time, a per-card input of the
compute term: stage_compute.moe_host_launch); the others hold for every card of a scenario or none."""
DENSE_ONLY_MODULES = ("mlp",)
"""Megatron-Core selective-recompute modules that act on dense blocks only: ``mlp`` checkpoints a block's whole MLP
where the block is not a MoE layer (NVIDIA/Megatron-LM megatron/core/transformer/transformer_layer.py at 2edffad,
the Megatron-Core of Megatron-Bridge v0.4.2 / the NeMo 26.04.01 container: ``if "mlp" in recompute_modules: if not
self.is_moe_layer: self.recompute_mlp = True``; the experts' activation is ``moe_act``, the shared experts'
``shared_experts``). On a MoE model such a module leaves every MoE block's tensors in place, so a recipe's ``mlp``
there maps to no tpopt group; the MLP rerun of its few dense blocks (DeepSeek-V3: the first 3 of 61, on the first
pipeline stage) is not modelled."""


@dataclass(frozen=True)
class Recipe:
    """One entry of recipes.toml: where it applies (model, card and precision patterns) and the settings it
    states (None: the stack's default)."""

    stack: str
    name: str
    models: tuple[str, ...]
    accelerators: tuple[str, ...] = ()
    precisions: tuple[str, ...] = ()
    moe_dispatcher: str | None = None
    moe_a2a_overlap: bool | None = None
    moe_shared_expert_overlap: bool | None = None
    attention: str | None = None
    recompute_modules: tuple[str, ...] | None = None
    activation_offload_layers: int | None = None
    moe_cuda_graphs: bool | None = None
    moe_fused_grouped_mlp: bool | None = None
    sources: dict[str, str] = field(default_factory=dict)

    def matches(self, model: str, accelerators: Iterable[str], precision: str) -> bool:
        """Whether the entry applies: the model matches one of ``models``, every card one of ``accelerators``
        (absent: any) and the precision one of ``precisions`` (absent: any)."""
        cards = tuple(accelerators)
        return (any(fnmatchcase(model, p) for p in self.models)
                and (not self.accelerators or (bool(cards) and all(
                    any(fnmatchcase(c, p) for p in self.accelerators) for c in cards)))
                and (not self.precisions or precision in self.precisions))

    def moe_settings(self) -> dict[str, str | bool]:
        """The [moe] keys the recipe implies (dispatcher, a2a_overlap in tpopt's names; moe.stack_defaults;
        cuda_graphs, fused_grouped_mlp): only those it states."""
        mapped = moe_stack_defaults(self.moe_dispatcher or "alltoall", "all" if self.moe_a2a_overlap else "none")
        out: dict[str, str | bool] = {}
        if self.moe_dispatcher is not None:
            out["dispatcher"] = mapped["dispatcher"]
        if self.moe_a2a_overlap is not None:
            out["a2a_overlap"] = mapped["a2a_overlap"]
        if self.moe_cuda_graphs is not None:
            out["cuda_graphs"] = self.moe_cuda_graphs
        if self.moe_fused_grouped_mlp is not None:
            out["fused_grouped_mlp"] = self.moe_fused_grouped_mlp
        return out

    def moe_settings_on(self, makers: Mapping[str, str], stated: Iterable[str] = ()
                        ) -> tuple[dict[str, str | bool], dict[str, tuple[tuple[str, ...], str]]]:
        """:meth:`moe_settings` on the cards of ``makers`` (card -> accelerators.toml ``vendor``), and per card whose
        maker does not run the software of a setting the recipe turns on (a recipe measured on one maker's cards
        carries none of that maker's own software onto another's: catalogs.stacks.settings_off_cards; the stack's
        default holds there) the [moe] keys left to the stack on it and one line saying which and why.

        A setting of :data:`PER_CARD` (CUDA graphs: the host launch time, which each plan's card decides alone,
        stage_compute.moe_host_launch) stays in the settings and is left out on those cards only
        (MoeOptions.card_settings_off); any other is left out of the settings, on every card of the scenario (as a
        recipes.toml entry must match each card), and each card's line says so. ``stated``: the [moe] keys the
        scenario states itself (not the recipe's to leave out). The token dispatcher stays: where it runs is
        catalogs.stacks.dispatcher_on_card's rule, card by card."""
        out = self.moe_settings()
        turned_on = [k for k in SETTING_WORDS if getattr(self, k) and MOE_KEYS[k] not in set(stated)]
        off = {card: settings_off_cards(turned_on, {card: maker}) for card, maker in makers.items()}
        shared = {k: why for here in off.values() for k, why in here.items() if k not in PER_CARD}
        for k in shared:
            out.pop(MOE_KEYS[k])
        lines = {}
        for card in makers:
            here = {**{k: f"{why} (a card of this scenario)" for k, why in shared.items() if k not in off[card]},
                    **off[card]}
            if here:
                keys = tuple(k for k in SETTING_WORDS if k in here)
                words = " and ".join(SETTING_WORDS[k] for k in keys)
                why = "; ".join(dict.fromkeys(here[k] for k in keys))
                lines[card] = (tuple(MOE_KEYS[k] for k in keys),
                               f"{self.name} recipe's {words} not assumed on {card}, the stack's default instead: "
                               f"{why} (catalogs/frameworks/megatron-lm.toml [vendor_settings]; where the scenario "
                               "states none)")
        return out, lines

    def flash_attention(self) -> bool | None:
        """[memory] flash_attention the recipe implies (None: not stated)."""
        return None if self.attention is None else ATTENTION[self.attention]

    def recompute(self, moe: bool = False) -> str | None:
        """The recipe's selective recompute in tpopt's groups (memory.parse_recompute; [] = none), None if
        unstated. On a MoE model (``moe``) Megatron-Core's ``mlp`` module rebuilds nothing in the MoE blocks
        (:data:`DENSE_ONLY_MODULES`), so it is not tpopt's ``mlp`` group there, which rebuilds the experts'
        activation in every block (Megatron's ``moe_act``)."""
        if self.recompute_modules is None:
            return None
        mods = [m for m in self.recompute_modules if not (moe and m in DENSE_ONLY_MODULES)]
        return memory.parse_recompute(mods) if mods else "none"

    def assumption(self, recompute: bool = True, moe_keys: Iterable[str] | None = None) -> str:
        """One line for the report: the recipe's name and the settings it supplies (without ``recompute``:
        a scenario's recompute stays a plan choice, the recipe's is not imposed; ``moe_keys``: the [moe] keys it
        supplied, the others being the scenario's own, None: all of them)."""
        keys = set(self.moe_settings() if moe_keys is None else moe_keys)
        parts = []
        if self.moe_dispatcher is not None and "dispatcher" in keys:
            parts.append(f"{self.moe_dispatcher} dispatcher")
        if self.moe_a2a_overlap is not None and "a2a_overlap" in keys:
            parts.append("EP all-to-all overlapped" if self.moe_a2a_overlap else "EP all-to-all not overlapped")
        if self.moe_shared_expert_overlap is not None:
            parts.append("shared experts overlapped" if self.moe_shared_expert_overlap else "no shared-expert overlap")
        if self.attention is not None:
            parts.append(f"{self.attention} attention")
        if recompute and self.recompute_modules is not None:
            parts.append(f"recompute {'+'.join(self.recompute_modules) or 'none'}")
        if self.moe_cuda_graphs is not None and "cuda_graphs" in keys:
            parts.append("MoE blocks' attention, router and preprocess as CUDA graphs" if self.moe_cuda_graphs
                         else "no CUDA graphs")
        if self.moe_fused_grouped_mlp and "fused_grouped_mlp" in keys:
            parts.append("experts' grouped MLP as one fused launch")
        if self.activation_offload_layers:
            parts.append(f"activations of {self.activation_offload_layers} layers offloaded to host memory")
        return f"{self.name} recipe: {', '.join(parts)} (catalogs/recipes.toml; where the scenario states none)"


def _names(value: Any, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise InputError(f"{what} must be a list of names")
    return tuple(value)


def _flag(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"{what} must be true or false, got {value!r}")
    return value


def build_recipe(stack: str, t: Any, where: str) -> Recipe:
    """One entry from its TOML table: known keys only, ``name`` and ``models`` required, every stated setting
    with a source in ``sources``."""
    if not isinstance(t, dict):
        raise InputError(f"{where} must be a table")
    unknown = sorted(set(t) - set(SETTINGS) - set(MATCH_KEYS))
    if unknown:
        raise InputError(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(MATCH_KEYS + SETTINGS)})")
    if not isinstance(t.get("name"), str) or not t["name"]:
        raise InputError(f"{where}: name must be a non-empty text")
    where = f"{where} ({t['name']})"
    src = t.get("sources", {})
    if not isinstance(src, dict) or not all(isinstance(v, str) and v for v in src.values()):
        raise InputError(f"{where}: sources must be a table of texts")
    unsourced = [k for k in SETTINGS if k in t and k not in src]
    if unsourced:
        raise InputError(f"{where}: no source for {', '.join(unsourced)}")
    disp = t.get("moe_dispatcher")
    if disp is not None and disp not in STACK_DISPATCHERS:
        raise InputError(f"{where}: moe_dispatcher must be one of {', '.join(STACK_DISPATCHERS)}, got {disp!r}")
    att = t.get("attention")
    if att is not None and att not in ATTENTION:
        raise InputError(f"{where}: attention must be fused or unfused, got {att!r}")
    shared = _flag(t["moe_shared_expert_overlap"], f"{where}: moe_shared_expert_overlap") \
        if "moe_shared_expert_overlap" in t else None
    if shared:
        raise InputError(f"{where}: moe_shared_expert_overlap = true is not modelled (tpopt runs the shared experts "
                         "exposed); state false or leave it out")
    offload = t.get("activation_offload_layers")
    if offload is not None and (isinstance(offload, bool) or not isinstance(offload, int) or offload < 0):
        raise InputError(f"{where}: activation_offload_layers must be a whole number >= 0, got {offload!r}")
    rec = _names(t["recompute_modules"], f"{where}: recompute_modules") if "recompute_modules" in t and \
        t["recompute_modules"] != [] else (() if "recompute_modules" in t else None)
    r = Recipe(stack=stack, name=t["name"], models=_names(t.get("models"), f"{where}: models"),
               accelerators=_names(t.get("accelerators", []), f"{where}: accelerators"),
               precisions=_names(t.get("precisions", []), f"{where}: precisions"),
               moe_dispatcher=disp,
               moe_a2a_overlap=_flag(t["moe_a2a_overlap"], f"{where}: moe_a2a_overlap")
               if "moe_a2a_overlap" in t else None,
               moe_shared_expert_overlap=shared, attention=att, recompute_modules=rec,
               activation_offload_layers=offload,
               moe_cuda_graphs=_flag(t["moe_cuda_graphs"], f"{where}: moe_cuda_graphs")
               if "moe_cuda_graphs" in t else None,
               moe_fused_grouped_mlp=_flag(t["moe_fused_grouped_mlp"], f"{where}: moe_fused_grouped_mlp")
               if "moe_fused_grouped_mlp" in t else None,
               sources=dict(src))
    if not r.models:
        raise InputError(f"{where}: models must name at least one model")
    r.recompute()  # unknown module names -> one clear error now
    return r


@cache
def _builtin() -> dict[str, tuple[Recipe, ...]]:
    try:
        data = builtin_toml(RECIPES_FILE, read_text_capped(RECIPES_FILE, "catalog file"), tomllib.loads)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{RECIPES_FILE}: malformed TOML ({exc})") from None
    known = stack_names()
    out = {}
    for stack, entries in data.items():
        if stack not in known:
            raise InputError(f"recipes.toml: unknown stack {stack!r} (known: {', '.join(known)})")
        if not isinstance(entries, list):
            raise InputError(f"recipes.toml: [{stack}] must be an array of tables ([[{stack}]])")
        out[stack] = tuple(build_recipe(stack, t, f"recipes.toml [[{stack}]] #{i + 1}") for i, t in enumerate(entries))
    return out


def recipes(stack: str) -> tuple[Recipe, ...]:
    """The recipes of a stack, in file order (none for a stack without entries)."""
    return _builtin().get(stack, ())


def find_recipe(stack: str, model: str, accelerators: Iterable[str], precision: str) -> Recipe | None:
    """The first recipe of ``stack`` that applies to the model, every card and the precision (Recipe.matches);
    None when none does (the stack's defaults apply)."""
    cards = tuple(accelerators)
    return next((r for r in recipes(stack) if r.matches(model, cards, precision)), None)
