"""Reader of ``scaling.toml``: the scaling-law fits (:class:`tpopt.models.scaling.ScalingLaw`) and the
data-constrained constant, built-in then each ``--catalog DIR``'s file (an entry of the same name replaces
the built-in one). Every fit states its source and fitted range; anything else is one error line."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any

from tpopt.catalogs.tables import check_keys, loads_toml, need, read_text_capped
from tpopt.errors import InputError
from tpopt.models.scaling import ScalingLaw
from tpopt.models.shapes import ShapeRule

SCALING_FILE = "scaling.toml"
LAW_NUMBERS = ("E", "A", "B", "alpha", "beta", "min_params", "max_params", "min_tokens", "max_tokens")
LAW_KEYS = (*LAW_NUMBERS, "source")
DATA_KEYS = ("repeat_decay", "source")
RULE_INTS = ("width_step", "min_hidden", "max_hidden", "head_dim", "min_heads", "kv_heads", "ffn_multiple", "vocab")
RULE_NUMBERS = ("depth_coef", "depth_exp", "ffn_ratio")
RULE_KEYS = (*RULE_INTS, *RULE_NUMBERS, "tied_below_hidden", "qk_norm", "source")


@dataclass(frozen=True)
class ScalingCatalog:
    """The fits by name and Muennighoff et al.'s repeated-data decay R*_D with its source."""

    laws: dict[str, ScalingLaw] = field(default_factory=dict)
    repeat_decay: float = 15.4
    repeat_source: str = ""
    rules: dict[str, ShapeRule] = field(default_factory=dict)

    def rule(self, name: str) -> ShapeRule:
        if name not in self.rules:
            raise InputError(f"no shape rule for {name!r} (rules: {', '.join(sorted(self.rules))}; --models names "
                             f"the family whose rule --generated applies)")
        return self.rules[name]

    def law(self, name: str) -> ScalingLaw:
        if name not in self.laws:
            raise InputError(f"unknown scaling law {name!r} (known: {', '.join(sorted(self.laws))})")
        return self.laws[name]


def _number(t: dict[str, Any], key: str, where: str) -> float:
    v = need(t, key, where)
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
        raise InputError(f"{where}: {key} must be a positive number, got {v!r}")
    return float(v)


def build_law(name: str, t: object) -> ScalingLaw:
    """One ``[law.NAME]`` table: every constant positive, the range ordered, a source stated."""
    where = f"scaling.toml [law.{name}]"
    t = check_keys(t, LAW_KEYS, where)
    nums = {k: _number(t, k, where) for k in LAW_NUMBERS}
    source = need(t, "source", where)
    if not isinstance(source, str) or not source.strip():
        raise InputError(f"{where}: source must name the publication or run the fit comes from")
    for lo, hi in (("min_params", "max_params"), ("min_tokens", "max_tokens")):
        if nums[lo] > nums[hi]:
            raise InputError(f"{where}: {lo} ({nums[lo]:g}) is above {hi} ({nums[hi]:g})")
    return ScalingLaw(name=name, source=source, **nums)


def build_rule(name: str, t: object) -> ShapeRule:
    """One ``[shape_rule.NAME]`` table: whole positive widths and counts, positive ratios, a source stated."""
    where = f"scaling.toml [shape_rule.{name}]"
    t = check_keys(t, RULE_KEYS, where)
    ints: dict[str, int] = {}
    for k in RULE_INTS:
        v = need(t, k, where)
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise InputError(f"{where}: {k} must be a positive whole number, got {v!r}")
        ints[k] = v
    nums = {k: _number(t, k, where) for k in RULE_NUMBERS}
    tied = t.get("tied_below_hidden", 0)
    qk = t.get("qk_norm", False)
    source = need(t, "source", where)
    if isinstance(tied, bool) or not isinstance(tied, int) or tied < 0:
        raise InputError(f"{where}: tied_below_hidden must be a whole number >= 0, got {tied!r}")
    if not isinstance(qk, bool):
        raise InputError(f"{where}: qk_norm must be true or false, got {qk!r}")
    if not isinstance(source, str) or not source.strip():
        raise InputError(f"{where}: source must name the configs the rule comes from")
    if ints["min_hidden"] > ints["max_hidden"]:
        raise InputError(f"{where}: min_hidden ({ints['min_hidden']}) is above max_hidden ({ints['max_hidden']})")
    return ShapeRule(name=name, tied_below_hidden=tied, qk_norm=qk, source=source, depth_coef=nums["depth_coef"],
                     depth_exp=nums["depth_exp"], ffn_ratio=nums["ffn_ratio"], **ints)


def load_scaling(extra_dirs: Sequence[str | PathLike[str]] = ()) -> ScalingCatalog:
    """The built-in fits, extended or replaced by each directory's ``scaling.toml`` in order."""
    laws: dict[str, ScalingLaw] = {}
    rules: dict[str, ShapeRule] = {}
    decay, decay_source = 15.4, ""
    for d in [Path(__file__).resolve().parent, *(Path(x) for x in extra_dirs)]:
        p = d / SCALING_FILE
        if not p.exists():
            continue
        data = loads_toml(read_text_capped(p, "catalog file"), str(p))
        check_keys(data, ("law", "data_constrained", "shape_rule"), str(p))
        law_tables = data.get("law", {})
        if not isinstance(law_tables, dict):
            raise InputError(f"{p}: law must hold tables such as [law.NAME]")
        for name, t in law_tables.items():
            laws[name] = build_law(name, t)
        rule_tables = data.get("shape_rule", {})
        if not isinstance(rule_tables, dict):
            raise InputError(f"{p}: shape_rule must hold tables such as [shape_rule.NAME]")
        for name, t in rule_tables.items():
            rules[name] = build_rule(name, t)
        if "data_constrained" in data:
            where = "scaling.toml [data_constrained]"
            t = check_keys(data["data_constrained"], DATA_KEYS, where)
            decay = _number(t, "repeat_decay", where)
            decay_source = str(need(t, "source", where))
    return ScalingCatalog(laws=laws, repeat_decay=decay, repeat_source=decay_source, rules=rules)
