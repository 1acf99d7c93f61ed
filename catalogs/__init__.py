"""Catalog data (accelerators, links/NICs, storage tiers, model architectures) and their loader.

The built-in catalog is the set of TOML files next to this module. Users extend or override it
without code: ``--catalog DIR`` (repeatable) reads ``accelerators.toml``, ``links.toml``,
``storage.toml`` and ``models.toml`` from DIR, if present, and entries there replace built-in
entries of the same name. Every value is parsed with its unit exactly once, here.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

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
    raw: dict[str, dict] = field(default_factory=dict)  # file stem -> merged raw tables

    def accelerator(self, name: str) -> Accelerator:
        try:
            return self.accelerators[name]
        except KeyError:
            known = ", ".join(sorted(self.accelerators))
            raise InputError(f"unknown accelerator {name!r} (known: {known})") from None

    def model(self, name: str) -> ModelArch:
        try:
            return self.models[name]
        except KeyError:
            known = ", ".join(sorted(self.models))
            raise InputError(f"unknown model {name!r} (known: {known})") from None

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


def _read_toml(path: Path) -> dict:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: malformed TOML ({exc})") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None


def _merge(dirs: list[Path]) -> dict[str, dict]:
    raw: dict[str, dict] = {Path(f).stem: {} for f in CATALOG_FILES}
    for d in dirs:
        if not d.is_dir():
            raise InputError(f"catalog directory {str(d)!r} does not exist")
        for fname in CATALOG_FILES:
            p = d / fname
            if p.exists():
                data = _read_toml(p)
                stem = p.stem
                for key, value in data.items():
                    if stem == "links" and key in ("link", "nic") and isinstance(value, dict):
                        raw[stem].setdefault(key, {}).update(value)
                    elif stem == "performance" and isinstance(value, dict):
                        entry = raw[stem].setdefault(key, {})  # field by field over the built-in
                        for k2, v2 in value.items():
                            both = isinstance(v2, dict) and isinstance(entry.get(k2), dict)
                            entry[k2] = {**entry[k2], **v2} if both else v2
                    else:
                        raw[stem][key] = value
    return raw


def _need(table: dict, key: str, where: str):
    if key not in table:
        raise InputError(f"{where}: missing required key {key!r}")
    return table[key]


def _build_nics(raw_links: dict) -> tuple[dict[str, float], dict[str, Nic]]:
    links = {}
    for name, t in raw_links.get("link", {}).items():
        links[name] = parse_bandwidth(_need(t, "bandwidth", f"link {name}"), f"link {name} bandwidth")
    nics = {}
    for name, t in raw_links.get("nic", {}).items():
        nics[name] = Nic(
            name=name,
            bandwidth=parse_bandwidth(_need(t, "bandwidth", f"nic {name}"), f"nic {name} bandwidth"),
            price_hour=parse_number(t.get("price_nic_hour", 0.0), f"nic {name} price_nic_hour"),
            source=t.get("source", ""),
        )
    return links, nics


def _build_accelerator(name: str, t: dict, links: dict[str, float], nics: dict[str, Nic]) -> Accelerator:
    where = f"accelerator {name}"
    if not isinstance(t, dict):
        raise InputError(f"{where}: expected a table")
    host_link = _need(t, "host_link", where)
    if host_link not in links:
        raise InputError(f"{where}: unknown host_link {host_link!r} (known: {', '.join(sorted(links))})")
    inter = t.get("interconnect", "none")
    if inter != "none" and inter not in links:
        raise InputError(f"{where}: unknown interconnect {inter!r}")
    nic_name = _need(t, "nic", where)
    if nic_name not in nics:
        raise InputError(f"{where}: unknown nic {nic_name!r} (known: {', '.join(sorted(nics))})")
    nic = nics[nic_name]
    memory = parse_bytes(_need(t, "memory", where), f"{where} memory", allow_zero=False)
    usable = parse_bytes(t.get("usable_memory", t["memory"]), f"{where} usable_memory", allow_zero=False)
    if usable > memory:
        raise InputError(f"{where}: usable_memory exceeds memory")
    price = t.get("price_card_hour")
    nph = parse_int(t.get("nics_per_host", 1), f"{where} nics_per_host", minimum=0)
    return Accelerator(
        name=name,
        display=t.get("display", name),
        peak_flops=parse_flops_rate(_need(t, "peak_bf16", where), f"{where} peak_bf16"),
        memory_nominal=memory,
        memory_usable=usable,
        hbm_bandwidth=parse_bandwidth(t.get("hbm_bandwidth", "0GB/s"), f"{where} hbm_bandwidth"),
        host_link=host_link,
        host_link_bw=links[host_link],
        p2p=bool(t.get("p2p", False)),
        interconnect=inter,
        interconnect_bw=0.0 if inter == "none" else links[inter],
        cards_per_host=parse_int(_need(t, "cards_per_host", where), f"{where} cards_per_host", minimum=1),
        nic=nic_name,
        nic_bw=nic.bandwidth,
        nic_price_hour=nic.price_hour,
        nics_per_host=nph,
        max_nics_per_host=parse_int(t.get("max_nics_per_host", nph), f"{where} max_nics_per_host", minimum=0),
        host_memory=parse_bytes(t.get("host_memory", "0GB"), f"{where} host_memory"),
        host_memory_bw=parse_bandwidth(t.get("host_memory_bandwidth", "0GB/s"), f"{where} host_memory_bandwidth"),
        price_card_hour=None if price is None else parse_number(price, f"{where} price_card_hour"),
        peak_fp16=parse_flops_rate(t["peak_fp16"], f"{where} peak_fp16") if "peak_fp16" in t else 0.0,
        peak_fp8=parse_flops_rate(t["peak_fp8"], f"{where} peak_fp8") if "peak_fp8" in t else 0.0,
        peak_tf32=parse_flops_rate(t["peak_tf32"], f"{where} peak_tf32") if "peak_tf32" in t else 0.0,
        sources=dict(t.get("sources", {})),
    )


_ARCH_INT = ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "vocab")
_ARCH_BOOL = ("tied_embeddings", "qk_norm", "gated_mlp", "qkv_bias", "linear_bias")


def build_model(name: str, t: dict) -> ModelArch:
    """A :class:`ModelArch` from a catalog table (all architecture fields required)."""
    where = f"model {name}"
    if not isinstance(t, dict):
        raise InputError(f"{where}: expected a table")
    kw = {k: parse_int(_need(t, k, where), f"{where} {k}", minimum=1) for k in _ARCH_INT}
    for k in _ARCH_BOOL:
        if k in t:
            if not isinstance(t[k], bool):
                raise InputError(f"{where}: {k} must be true or false")
            kw[k] = t[k]
    if "norm" in t:
        if t["norm"] not in ("rmsnorm", "layernorm"):
            raise InputError(f"{where}: norm must be 'rmsnorm' or 'layernorm'")
        kw["norm"] = t["norm"]
    kw["learned_positions"] = parse_int(t.get("learned_positions", 0), f"{where} learned_positions", minimum=0)
    if kw["heads"] % kw["kv_heads"]:
        raise InputError(f"{where}: heads ({kw['heads']}) must be a multiple of kv_heads ({kw['kv_heads']})")
    return ModelArch(name=name, source=t.get("source", ""), **kw)


def model_from_hf_config(path: str | Path) -> ModelArch:
    """A dense decoder-only :class:`ModelArch` from a Hugging Face ``config.json``.

    Reads Llama / Mistral / Qwen2 / Qwen3 style keys. Qwen3 adds q/k RMSNorm, Qwen2 adds q/k/v
    biases. Mixture-of-experts configs are rejected (this model is dense-only).
    """
    p = Path(path)
    try:
        cfg = json.loads(p.read_text())
    except OSError as exc:
        raise InputError(f"{p}: cannot read ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{p}: malformed JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(cfg, dict):
        raise InputError(f"{p}: expected a JSON object")
    for moe_key in ("num_experts", "num_local_experts", "n_routed_experts"):
        if cfg.get(moe_key):
            raise InputError(f"{p}: mixture-of-experts configs are not supported (found {moe_key})")
    mtype = str(cfg.get("model_type", "")).lower()
    try:
        heads = int(cfg["num_attention_heads"])
        hidden = int(cfg["hidden_size"])
        t = {
            "layers": int(cfg["num_hidden_layers"]),
            "hidden": hidden,
            "heads": heads,
            "kv_heads": int(cfg.get("num_key_value_heads") or heads),
            "head_dim": int(cfg.get("head_dim") or hidden // heads),
            "ffn": int(cfg["intermediate_size"]),
            "vocab": int(cfg["vocab_size"]),
        }
    except KeyError as exc:
        raise InputError(f"{p}: missing required key {exc.args[0]!r}") from None
    except (TypeError, ValueError):
        raise InputError(f"{p}: architecture fields must be integers") from None
    t["tied_embeddings"] = bool(cfg.get("tie_word_embeddings", False))
    t["qk_norm"] = mtype.startswith("qwen3")
    t["qkv_bias"] = mtype.startswith("qwen2") or bool(cfg.get("attention_bias", False))
    name = cfg.get("_name_or_path") or p.parent.name or p.stem
    t["source"] = f"Hugging Face config {p}"
    return build_model(str(name), t)


_PERF_FRACTIONS = ("gemm_efficiency", "memory_efficiency", "attention_efficiency", "tp_efficiency", "dp_efficiency")
_PERF_KEYS = set(_PERF_FRACTIONS) | {"gemm_k_half", "tile", "sms", "kernel_overhead", "collective_latency",
                                     "calibrated", "sources", "calibration"}


def build_perf(name: str, t: dict, base: PerfParams | None = None) -> PerfParams:
    """:class:`PerfParams` from a performance.toml table (fields absent keep ``base``'s values)."""
    where = f"performance {name}"
    if not isinstance(t, dict):
        raise InputError(f"{where}: expected a table")
    bad = set(t) - _PERF_KEYS
    if bad:
        raise InputError(f"{where}: unknown key(s) {sorted(bad)} (known: {', '.join(sorted(_PERF_KEYS))})")
    kw: dict = {}
    for k in _PERF_FRACTIONS:
        if k in t:
            kw[k] = parse_fraction(t[k], f"{where} {k}")
    if "gemm_k_half" in t:
        kw["gemm_k_half"] = parse_number(t["gemm_k_half"], f"{where} gemm_k_half")
    if "sms" in t:
        kw["sms"] = parse_int(t["sms"], f"{where} sms", minimum=1)
    if "tile" in t:
        tile = t["tile"]
        if not (isinstance(tile, list) and len(tile) == 2):
            raise InputError(f"{where}: tile must be [rows, columns]")
        kw["tile_m"], kw["tile_n"] = (parse_int(x, f"{where} tile", minimum=1) for x in tile)
    for k in ("kernel_overhead", "collective_latency"):
        if k in t:
            kw[k] = parse_duration(t[k], f"{where} {k}")
    if "calibrated" in t:
        cal = t["calibrated"]
        if not isinstance(cal, list) or any(c not in PerfParams.field_names() for c in cal):
            raise InputError(f"{where}: calibrated must list parameter names")
        kw["calibrated"] = tuple(cal)
    sources = dict((base.sources if base else {}) or {})
    sources.update(t.get("sources", {}) or {})
    from dataclasses import replace

    return replace(base or PerfParams(), name=name, sources=sources, **kw)


def load_catalog(extra_dirs=()) -> Catalog:
    """The built-in catalog, extended/overridden by each directory in ``extra_dirs`` in order."""
    dirs = [BUILTIN_DIR] + [Path(d) for d in extra_dirs]
    raw = _merge(dirs)
    links, nics = _build_nics(raw["links"])
    cat = Catalog(links=links, nics=nics, raw=raw)
    for name, t in raw["storage"].items():
        cat.storage[name] = parse_bandwidth(_need(t, "write_bandwidth", f"storage {name}"),
                                            f"storage {name} write_bandwidth")
    for name, t in raw["accelerators"].items():
        cat.accelerators[name] = _build_accelerator(name, t, links, nics)
    for name, t in raw["models"].items():
        cat.models[name] = build_model(name, t)
    perf = raw["performance"]
    default = build_perf("default", perf["default"]) if "default" in perf else PerfParams(name="default")
    cat.performance["default"] = default
    for name, t in perf.items():
        if name != "default":
            cat.performance[name] = build_perf(name, t, default)
    return cat
