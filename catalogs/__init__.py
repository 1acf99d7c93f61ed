"""Catalog data (accelerators, links/NICs, storage tiers, model architectures) and their loader.

The built-in catalog is the set of TOML files next to this module. Users extend or override it
without code: ``--catalog DIR`` (repeatable) reads ``accelerators.toml``, ``links.toml``,
``storage.toml`` and ``models.toml`` from DIR, if present, and entries there replace built-in
entries of the same name. Every value is parsed with its unit exactly once, here.
"""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from os import PathLike
from pathlib import Path
from typing import Any

from tpopt.catalogs.architectures import ARCH_INT_MAX, MODEL_KEYS, arch_int, build_model
from tpopt.catalogs.market import Market, load_market
from tpopt.catalogs.stacks import stack_names
from tpopt.catalogs.tables import (
    MAX_INPUT_BYTES,
    check_keys,
    flag_field,
    need,
    read_text_capped,
    sources_field,
    text_field,
)
from tpopt.errors import InputError
from tpopt.models.arch import ModelArch
from tpopt.models.hardware import Accelerator
from tpopt.models.roofline import PerfParams
from tpopt.models.units import (
    parse_bandwidth,
    parse_bytes,
    parse_duration,
    parse_flops_rate,
    parse_fraction,
    parse_int,
    parse_number,
)

BUILTIN_DIR = Path(__file__).resolve().parent
CATALOG_FILES = ("accelerators.toml", "links.toml", "storage.toml", "models.toml", "performance.toml")

__all__ = ["ARCH_INT_MAX", "BUILTIN_DIR", "CATALOG_FILES", "MAX_INPUT_BYTES", "MODEL_KEYS", "Catalog", "Nic",
           "arch_int", "build_model", "build_perf", "load_catalog", "model_from_hf_cache", "model_from_hf_config",
           "read_text_capped"]
@dataclass(frozen=True)
class Nic:
    name: str
    bandwidth: float  # bytes/s per direction
    price_hour: float  # USD per NIC-hour
    source: str = ""


@dataclass
class Catalog:
    accelerators: dict[str, Accelerator] = field(default_factory=dict)
    models: dict[str, ModelArch] = field(default_factory=dict)
    links: dict[str, float] = field(default_factory=dict)  # name -> bytes/s per direction
    nics: dict[str, Nic] = field(default_factory=dict)
    storage: dict[str, float] = field(default_factory=dict)  # tier -> write bytes/s
    performance: dict[str, PerfParams] = field(default_factory=dict)  # accelerator -> step-time parameters
    raw: dict[str, dict[str, Any]] = field(default_factory=dict)  # file stem -> merged raw tables
    market: Market = field(default_factory=Market)  # offers.toml (tpopt.catalogs.market)

    def accelerator(self, name: str) -> Accelerator:
        try:
            return self.accelerators[name]
        except KeyError:
            known = ", ".join(sorted(self.accelerators))
            raise InputError(f"unknown accelerator {name!r} (known: {known})") from None

    def model(self, name: str) -> ModelArch:
        """A catalog model, or a Hugging Face id (``org/name``) resolved in the local cache."""
        if name in self.models:
            return self.models[name]
        if "/" in name:
            return model_from_hf_cache(name)
        known = ", ".join(sorted(self.models))
        raise InputError(f"unknown model {name!r} (known: {known}; or a Hugging Face id org/name from the "
                         f"local cache)")

    def perf(self, name: str) -> PerfParams:
        """Performance parameters of an accelerator (performance.toml), or the [default] entry."""
        if name in self.performance:
            return self.performance[name]
        return self.performance.get("default", PerfParams(name="default"))

    def storage_tier(self, name: str) -> float:
        try:
            return self.storage[name]
        except KeyError:
            known = ", ".join(sorted(self.storage))
            raise InputError(f"unknown storage tier {name!r} (known: {known})") from None


def _read_toml(path: Path) -> dict[str, Any]:
    text = read_text_capped(path, "catalog file")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: malformed TOML ({exc})") from None


def _merge(dirs: list[Path]) -> dict[str, dict[str, Any]]:
    raw: dict[str, dict[str, Any]] = {Path(f).stem: {} for f in CATALOG_FILES}
    for d in dirs:
        if not d.is_dir():
            raise InputError(f"catalog directory {str(d)!r} does not exist")
        for fname in CATALOG_FILES:
            p = d / fname
            if p.exists():
                data = _read_toml(p)
                stem = p.stem
                for key, value in data.items():
                    if stem == "links":
                        if key not in ("link", "nic"):
                            raise InputError(f"{p}: unknown table [{key}] (links.toml holds [link.NAME] and "
                                             f"[nic.NAME] tables)")
                        if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
                            raise InputError(f"{p}: {key} must hold tables such as [{key}.NAME], got {value!r}")
                        raw[stem].setdefault(key, {}).update(value)
                    elif stem == "performance" and isinstance(value, dict):
                        entry = raw[stem].setdefault(key, {})  # field by field over the built-in
                        if "residual_sigma" in value and "residual_sigma_source" not in value:
                            entry.pop("residual_sigma_source", None)  # a new sigma states its own source
                        if "residual_sigma" in value and "residual_sigma_stacks" not in value:
                            entry.pop("residual_sigma_stacks", None)  # and its stacks (none: one's own runs)
                        for k2, v2 in value.items():
                            both = isinstance(v2, dict) and isinstance(entry.get(k2), dict)
                            entry[k2] = {**entry[k2], **v2} if both else v2
                    else:
                        raw[stem][key] = value
    return raw


LINK_KEYS = ("bandwidth", "source", "notes")
NIC_KEYS = ("bandwidth", "price_nic_hour", "source", "price_source", "notes")
STORAGE_KEYS = ("write_bandwidth", "source", "notes")


def _build_nics(raw_links: dict[str, Any]) -> tuple[dict[str, float], dict[str, Nic]]:
    links = {}
    for name, t in raw_links.get("link", {}).items():
        where = f"link {name}"
        check_keys(t, LINK_KEYS, where)
        text_field(t, "source", where)
        links[name] = parse_bandwidth(need(t, "bandwidth", where), f"{where} bandwidth", allow_zero=False)
    nics = {}
    for name, t in raw_links.get("nic", {}).items():
        where = f"nic {name}"
        check_keys(t, NIC_KEYS, where)
        nics[name] = Nic(
            name=name,
            bandwidth=parse_bandwidth(need(t, "bandwidth", where), f"{where} bandwidth", allow_zero=False),
            price_hour=parse_number(t.get("price_nic_hour", 0.0), f"{where} price_nic_hour"),
            source=text_field(t, "source", where, "") or "",
        )
    return links, nics


ACCELERATOR_KEYS = ("display", "peak_bf16", "peak_fp16", "peak_fp8", "peak_fp4", "peak_tf32", "memory",
                    "usable_memory", "hbm_bandwidth", "host_link", "p2p", "interconnect", "cards_per_host", "nic",
                    "nics_per_host",
                    "max_nics_per_host", "host_memory", "host_memory_bandwidth", "price_card_hour", "price_date",
                    "scale_up_cards", "pod_hosts", "spine_oversubscription", "sources", "notes")


def _oversubscription(t: dict[str, Any], where: str) -> float:
    """The spine's taper, a number >= 1 (2 = 2:1); 1 = none."""
    value = parse_number(t.get("spine_oversubscription", 1.0), f"{where} spine_oversubscription")
    if value < 1.0:
        raise InputError(f"{where}: spine_oversubscription must be at least 1 (1 = none, 2 = 2:1), got {value:g}")
    return value


def _build_accelerator(name: str, t: dict[str, Any], links: dict[str, float], nics: dict[str, Nic]) -> Accelerator:
    where = f"accelerator {name}"
    check_keys(t, ACCELERATOR_KEYS, where)
    for key in ("display", "price_date", "notes"):
        text_field(t, key, where)
    host_link = text_field(t, "host_link", where, None)
    if host_link is None:
        raise InputError(f"{where}: missing required key 'host_link'")
    if host_link not in links:
        raise InputError(f"{where}: unknown host_link {host_link!r} (known: {', '.join(sorted(links))})")
    inter = text_field(t, "interconnect", where, "none")
    if inter != "none" and inter not in links:
        raise InputError(f"{where}: unknown interconnect {inter!r} (known: none, {', '.join(sorted(links))})")
    nic_name = text_field(t, "nic", where, None)
    if nic_name is None:
        raise InputError(f"{where}: missing required key 'nic'")
    if nic_name not in nics:
        raise InputError(f"{where}: unknown nic {nic_name!r} (known: {', '.join(sorted(nics))})")
    nic = nics[nic_name]
    memory = parse_bytes(need(t, "memory", where), f"{where} memory", allow_zero=False)
    usable = parse_bytes(t.get("usable_memory", t["memory"]), f"{where} usable_memory", allow_zero=False)
    if usable > memory:
        raise InputError(f"{where}: usable_memory exceeds memory")
    price = t.get("price_card_hour")
    nph = parse_int(t.get("nics_per_host", 1), f"{where} nics_per_host", minimum=0)
    cards = parse_int(need(t, "cards_per_host", where), f"{where} cards_per_host", minimum=1)
    scale_up = parse_int(t.get("scale_up_cards", cards), f"{where} scale_up_cards", minimum=1)
    if scale_up % cards:
        raise InputError(f"{where}: scale_up_cards ({scale_up}) must be a whole number of hosts of {cards} cards")

    def peak(key: str) -> float:
        return parse_flops_rate(t[key], f"{where} {key}") if key in t else 0.0

    return Accelerator(
        name=name,
        display=t.get("display", name),
        peak_flops=parse_flops_rate(need(t, "peak_bf16", where), f"{where} peak_bf16"),
        memory_nominal=memory,
        memory_usable=usable,
        hbm_bandwidth=parse_bandwidth(t.get("hbm_bandwidth", "0GB/s"), f"{where} hbm_bandwidth"),
        host_link=host_link,
        host_link_bw=links[host_link],
        p2p=flag_field(t, "p2p", where),
        interconnect=inter,
        interconnect_bw=0.0 if inter == "none" else links[inter],
        cards_per_host=cards,
        nic=nic_name,
        nic_bw=nic.bandwidth,
        nic_price_hour=nic.price_hour,
        nics_per_host=nph,
        max_nics_per_host=parse_int(t.get("max_nics_per_host", nph), f"{where} max_nics_per_host", minimum=0),
        host_memory=parse_bytes(t.get("host_memory", "0GB"), f"{where} host_memory"),
        host_memory_bw=parse_bandwidth(t.get("host_memory_bandwidth", "0GB/s"), f"{where} host_memory_bandwidth"),
        price_card_hour=None if price is None else parse_number(price, f"{where} price_card_hour"),
        peak_fp16=peak("peak_fp16"),
        peak_fp8=peak("peak_fp8"),
        peak_fp4=peak("peak_fp4"),
        peak_tf32=peak("peak_tf32"),
        scale_up_cards=scale_up if "scale_up_cards" in t else 0,
        pod_hosts=parse_int(t.get("pod_hosts", 0), f"{where} pod_hosts", minimum=0),
        spine_oversubscription=_oversubscription(t, where),
        sources=sources_field(t, where),
    )


_PERF_FRACTIONS = ("gemm_efficiency", "memory_efficiency", "attention_efficiency", "tp_efficiency", "dp_efficiency",
                   "fp8_gemm_ratio", "fp4_gemm_ratio", "attention_bwd_ratio")
_PERF_KEYS = set(_PERF_FRACTIONS) | {"overlap_contention", "gemm_k_half", "tile", "sms", "kernel_overhead",
                                     "collective_latency", "up_step_latency", "out_step_latency", "calibrated",
                                     "sources", "calibration", "residual_sigma", "residual_sigma_source",
                                     "residual_sigma_stacks"}


def build_perf(name: str, t: dict[str, Any], base: PerfParams | None = None) -> PerfParams:
    """:class:`PerfParams` from a performance.toml table (fields absent keep ``base``'s values)."""
    where = f"performance {name}"
    if not isinstance(t, dict):
        raise InputError(f"{where}: expected a table")
    bad = set(t) - _PERF_KEYS
    if bad:
        raise InputError(f"{where}: unknown key(s) {sorted(bad)} (known: {', '.join(sorted(_PERF_KEYS))})")
    kw: dict[str, Any] = {}
    for k in _PERF_FRACTIONS:
        if k in t:
            kw[k] = parse_fraction(t[k], f"{where} {k}")
    if "overlap_contention" in t:
        kw["overlap_contention"] = parse_fraction(t["overlap_contention"], f"{where} overlap_contention",
                                                  allow_zero=True)
    if "gemm_k_half" in t:
        kw["gemm_k_half"] = parse_number(t["gemm_k_half"], f"{where} gemm_k_half")
    if "sms" in t:
        kw["sms"] = parse_int(t["sms"], f"{where} sms", minimum=1)
    if "tile" in t:
        tile = t["tile"]
        if not (isinstance(tile, list) and len(tile) == 2):
            raise InputError(f"{where}: tile must be [rows, columns]")
        kw["tile_m"], kw["tile_n"] = (parse_int(x, f"{where} tile", minimum=1) for x in tile)
    for k in ("kernel_overhead", "collective_latency", "up_step_latency", "out_step_latency"):
        if k in t:
            kw[k] = parse_duration(t[k], f"{where} {k}")
    if "calibrated" in t:
        cal = t["calibrated"]
        if not isinstance(cal, list) or any(c not in PerfParams.field_names() for c in cal):
            raise InputError(f"{where}: calibrated must list parameter names")
        kw["calibrated"] = tuple(cal)
    if "residual_sigma" in t:
        kw["residual_sigma"] = parse_number(t["residual_sigma"], f"{where} residual_sigma")
        if not 0.0 <= kw["residual_sigma"] < 5.0:
            raise InputError(f"{where}: residual_sigma must be a lognormal sigma between 0 and 5")
        if not isinstance(t.get("residual_sigma_source"), str) or not t["residual_sigma_source"].strip():
            raise InputError(f"{where}: residual_sigma needs residual_sigma_source (how it was obtained)")
        kw["residual_sigma_source"] = t["residual_sigma_source"]
    elif "residual_sigma_source" in t:
        raise InputError(f"{where}: residual_sigma_source without residual_sigma")
    if "residual_sigma_stacks" in t:
        on = t["residual_sigma_stacks"]
        if "residual_sigma" not in t or not isinstance(on, list) or not all(isinstance(x, str) for x in on):
            raise InputError(f"{where}: residual_sigma_stacks must list the stacks residual_sigma was measured on")
        known = stack_names()
        unknown = [x for x in on if x not in known]
        if unknown:
            raise InputError(f"{where}: residual_sigma_stacks: unknown stack(s) {', '.join(unknown)} "
                             f"(known: {', '.join(known)})")
        kw["residual_sigma_stacks"] = tuple(on)
    sources = dict((base.sources if base else {}) or {})
    sources.update(t.get("sources", {}) or {})
    return replace(base or PerfParams(), name=name, sources=sources, **kw)


def model_from_hf_config(path: str | Path, name: str | None = None) -> ModelArch:
    """A :class:`ModelArch` from a Hugging Face ``config.json`` (see :mod:`tpopt.catalogs.hf` for the
    families understood and the keys each family reads or knows to be irrelevant)."""
    from tpopt.catalogs.hf import model_from_hf_config as parse  # lazy: start-up time (the config reader)

    return parse(path, name)


def model_from_hf_cache(repo_id: str, cache_dir: str | None = None) -> ModelArch:
    """The model a Hugging Face id names, from ``config.json`` in the local Hugging Face cache
    (``huggingface_hub``'s layout; no network). ``org/name@revision`` picks a revision."""
    from tpopt.catalogs.hf import model_from_hf_cache as resolve  # lazy: start-up time (the config reader)

    return resolve(repo_id, cache_dir)


def load_catalog(extra_dirs: Sequence[str | PathLike[str]] = ()) -> Catalog:
    """The built-in catalog, extended/overridden by each directory in ``extra_dirs`` in order."""
    dirs = [BUILTIN_DIR] + [Path(d) for d in extra_dirs]
    raw = _merge(dirs)
    links, nics = _build_nics(raw["links"])
    cat = Catalog(links=links, nics=nics, raw=raw)
    for name, t in raw["storage"].items():
        where = f"storage {name}"
        check_keys(t, STORAGE_KEYS, where)
        cat.storage[name] = parse_bandwidth(need(t, "write_bandwidth", where), f"{where} write_bandwidth",
                                            allow_zero=False)
    for name, t in raw["accelerators"].items():
        cat.accelerators[name] = _build_accelerator(name, t, links, nics)
    for name, t in raw["models"].items():
        cat.models[name] = build_model(name, t)
    cat.market = load_market(extra_dirs, set(cat.accelerators))
    perf = raw["performance"]
    default = build_perf("default", perf["default"]) if "default" in perf else PerfParams(name="default")
    cat.performance["default"] = default
    for name, t in perf.items():
        if name != "default" and name not in cat.accelerators:  # a typo would leave the card on [default]
            raise InputError(f"performance.toml [{name}]: unknown accelerator {name!r} (a table per accelerator "
                             f"of accelerators.toml, or [default]; known: {', '.join(sorted(cat.accelerators))})")
        if name != "default":
            cat.performance[name] = build_perf(name, t, default)
    return cat
