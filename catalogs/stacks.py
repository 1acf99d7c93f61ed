"""Software-stack profiles (catalogs/stacks.toml): what a training framework overlaps, costs and keeps in
memory by default. Public accessor: :func:`stack_profile` (``stack_profile("megatron-core")``), the
names in :func:`stack_names`, the default :data:`DEFAULT_STACK`."""

from __future__ import annotations

import tomllib
from functools import cache
from pathlib import Path
from typing import Any

from tpopt.catalogs.tables import check_keys, read_text_capped, sources_field
from tpopt.errors import InputError
from tpopt.models.hardware import StackProfile
from tpopt.models.units import parse_bytes, parse_duration, parse_fraction, parse_int

STACKS_FILE = Path(__file__).resolve().parent / "stacks.toml"
DEFAULT_STACK = "megatron-core"
TP_OVERLAPS = (True, False, "async")
FP8_RECIPES = ("current", "delayed", "mxfp8", "none")
KEYS = ("display", "tp_overlap", "dp_overlap", "fsdp_prefetch", "dp_bucket", "moe_dispatcher", "moe_a2a_overlap",
        "flash_attention", "sequence_parallel", "dropout", "recompute", "recompute_modules", "activation_offload",
        "fp8_recipe", "fp8_param_gather", "moe_probs_in_activation", "step_overhead", "microbatch_overhead",
        "cuda_context", "communicator_buffers", "allocator_reserve", "residual_sigma", "sources")
OPTIONAL = ("residual_sigma",)
"""Keys a profile may leave out: residual_sigma (none: a card's own sigma applies on the stack alone)."""


def _bool(t: dict[str, Any], key: str, where: str) -> bool:
    v = t[key]
    if not isinstance(v, bool):
        raise InputError(f"{where}: {key} must be true or false, got {v!r}")
    return v


def _text(t: dict[str, Any], key: str, where: str) -> str:
    v = t[key]
    if not isinstance(v, str):
        raise InputError(f"{where}: {key} must be a string, got {v!r}")
    return v


def build_stack(name: str, t: Any) -> StackProfile:
    """One profile from its TOML table; every key but :data:`OPTIONAL` is required and every value needs a
    source."""
    where = f"stacks.toml [{name}]"
    check_keys(t, KEYS, where)
    missing = [k for k in KEYS if k not in t and k not in OPTIONAL]
    if missing:
        raise InputError(f"{where}: missing key(s) {', '.join(missing)}")
    src = sources_field(t, where)
    unsourced = [k for k in KEYS if k not in ("display", "sources") and k not in src and k in t]
    if unsourced:
        raise InputError(f"{where}: no source for {', '.join(unsourced)}")
    tp = t["tp_overlap"]
    if tp not in TP_OVERLAPS or (isinstance(tp, str) and tp != "async"):
        raise InputError(f"{where}: tp_overlap must be true, false or \"async\", got {tp!r}")
    dp = t["dp_overlap"]
    dp_share = (1.0 if dp else 0.0) if isinstance(dp, bool) else parse_fraction(dp, f"{where} dp_overlap",
                                                                                  allow_zero=True)
    fp8 = _text(t, "fp8_recipe", where)
    if fp8 not in FP8_RECIPES:
        raise InputError(f"{where}: fp8_recipe must be one of {', '.join(FP8_RECIPES)}, got {fp8!r}")
    mods = t["recompute_modules"]
    if not isinstance(mods, list) or not all(isinstance(m, str) for m in mods):
        raise InputError(f"{where}: recompute_modules must be a list of names")
    return StackProfile(
        name=name, display=_text(t, "display", where), tp_overlap=tp, dp_overlap=dp_share,
        fsdp_prefetch=parse_int(t["fsdp_prefetch"], f"{where} fsdp_prefetch", minimum=0),
        dp_bucket=parse_bytes(t["dp_bucket"], f"{where} dp_bucket"),
        moe_dispatcher=_text(t, "moe_dispatcher", where), moe_a2a_overlap=_text(t, "moe_a2a_overlap", where),
        flash_attention=_bool(t, "flash_attention", where), sequence_parallel=_bool(t, "sequence_parallel", where),
        dropout=_bool(t, "dropout", where), recompute=_text(t, "recompute", where), recompute_modules=tuple(mods),
        activation_offload=_bool(t, "activation_offload", where), fp8_recipe=fp8,
        fp8_param_gather=_bool(t, "fp8_param_gather", where),
        moe_probs_in_activation=_bool(t, "moe_probs_in_activation", where),
        step_overhead=parse_duration(t["step_overhead"], f"{where} step_overhead"),
        microbatch_overhead=parse_duration(t["microbatch_overhead"], f"{where} microbatch_overhead"),
        cuda_context=parse_bytes(t["cuda_context"], f"{where} cuda_context"),
        communicator_buffers=parse_bytes(t["communicator_buffers"], f"{where} communicator_buffers"),
        allocator_reserve=parse_fraction(t["allocator_reserve"], f"{where} allocator_reserve", allow_zero=True),
        residual_sigma=_sigma(t.get("residual_sigma", 0.0), where), sources=src)


def _sigma(v: Any, where: str) -> float:
    """A lognormal sigma in [0, 5) (the stack's step-time residual spread)."""
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0.0 <= float(v) < 5.0:
        raise InputError(f"{where}: residual_sigma must be a lognormal sigma between 0 and 5, got {v!r}")
    return float(v)


@cache
def _builtin() -> dict[str, StackProfile]:
    try:
        data = tomllib.loads(read_text_capped(STACKS_FILE, "catalog file"))
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
