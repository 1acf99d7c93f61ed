"""Catalog data (accelerators, links/NICs, storage tiers, model architectures) and their loader.

The built-in catalog is the set of TOML files next to this module. Users extend or override it
without code: ``--catalog DIR`` (repeatable) reads ``accelerators.toml``, ``links.toml``,
``storage.toml`` and ``models.toml`` from DIR, if present, and entries there replace built-in
entries of the same name. Every value is parsed with its unit exactly once, here.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from tpopt.errors import InputError
from tpopt.models.arch import ACTIVATIONS, NORMS, POSITIONS, ModelArch, moe_layer_count
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
#: Largest input file tpopt reads (catalog TOML, config.json): 16 MiB. Real ones are a few kB; the
#: cap keeps ``/dev/zero`` or a mistaken multi-gigabyte path from exhausting memory.
MAX_INPUT_BYTES = 16 * 2**20


def read_text_capped(path, what: str = "file", limit: int = MAX_INPUT_BYTES) -> str:
    """The UTF-8 text of a file of at most ``limit`` bytes, or one :class:`InputError` line.

    Reads at most ``limit + 1`` bytes, so an endless or huge file costs no more than the cap.
    """
    p = Path(path)
    try:
        with p.open("rb") as fh:
            data = fh.read(limit + 1)
    except FileNotFoundError:
        raise InputError(f"{what} {str(p)!r} not found") from None
    except IsADirectoryError:
        raise InputError(f"{what} {str(p)!r} is a directory, not a file") from None
    except OSError as exc:
        raise InputError(f"{what} {str(p)!r}: cannot read ({exc.strerror or exc})") from None
    if len(data) > limit:
        raise InputError(f"{what} {str(p)!r} is larger than the bound of {limit / 2**20:g} MiB; not a tpopt input")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{what} {str(p)!r} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
                         f"{exc.start})") from None


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


def _read_toml(path: Path) -> dict:
    text = read_text_capped(path, "catalog file")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: malformed TOML ({exc})") from None


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
                    if stem == "links":
                        if key not in ("link", "nic"):
                            raise InputError(f"{p}: unknown table [{key}] (links.toml holds [link.NAME] and "
                                             f"[nic.NAME] tables)")
                        if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
                            raise InputError(f"{p}: {key} must hold tables such as [{key}.NAME], got {value!r}")
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


def _check_keys(t, allowed, where: str) -> dict:
    """The table itself, after checking it is a table and holds only known keys."""
    if not isinstance(t, dict):
        raise InputError(f"{where}: expected a table, got {t!r}")
    unknown = sorted(set(t) - set(allowed))
    if unknown:
        raise InputError(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(allowed))})")
    return t


def _text(t: dict, key: str, where: str, default: str | None = None) -> str | None:
    value = t.get(key, default)
    if value is not None and not isinstance(value, str):
        raise InputError(f"{where}: {key} must be a string, got {value!r}")
    return value


def _flag(t: dict, key: str, where: str, default: bool = False) -> bool:
    value = t.get(key, default)
    if not isinstance(value, bool):
        raise InputError(f"{where}: {key} must be true or false, got {value!r}")
    return value


def _sources(t: dict, where: str) -> dict:
    src = t.get("sources", {})
    if not isinstance(src, dict) or not all(isinstance(v, str) for v in src.values()):
        raise InputError(f"{where}: sources must be a table of strings")
    return dict(src)


LINK_KEYS = ("bandwidth", "source", "notes")
NIC_KEYS = ("bandwidth", "price_nic_hour", "source", "price_source", "notes")
STORAGE_KEYS = ("write_bandwidth", "source", "notes")


def _build_nics(raw_links: dict) -> tuple[dict[str, float], dict[str, Nic]]:
    links = {}
    for name, t in raw_links.get("link", {}).items():
        where = f"link {name}"
        _check_keys(t, LINK_KEYS, where)
        _text(t, "source", where)
        links[name] = parse_bandwidth(_need(t, "bandwidth", where), f"{where} bandwidth", allow_zero=False)
    nics = {}
    for name, t in raw_links.get("nic", {}).items():
        where = f"nic {name}"
        _check_keys(t, NIC_KEYS, where)
        nics[name] = Nic(
            name=name,
            bandwidth=parse_bandwidth(_need(t, "bandwidth", where), f"{where} bandwidth", allow_zero=False),
            price_hour=parse_number(t.get("price_nic_hour", 0.0), f"{where} price_nic_hour"),
            source=_text(t, "source", where, "") or "",
        )
    return links, nics


ACCELERATOR_KEYS = ("display", "peak_bf16", "peak_fp16", "peak_fp8", "peak_tf32", "memory", "usable_memory",
                    "hbm_bandwidth", "host_link", "p2p", "interconnect", "cards_per_host", "nic", "nics_per_host",
                    "max_nics_per_host", "host_memory", "host_memory_bandwidth", "price_card_hour", "price_date",
                    "scale_up_cards", "pod_hosts", "spine_oversubscription", "sources", "notes")


def _oversubscription(t: dict, where: str) -> float:
    """The spine's taper, a number >= 1 (2 = 2:1); 1 = none."""
    value = parse_number(t.get("spine_oversubscription", 1.0), f"{where} spine_oversubscription")
    if value < 1.0:
        raise InputError(f"{where}: spine_oversubscription must be at least 1 (1 = none, 2 = 2:1), got {value:g}")
    return value


def _build_accelerator(name: str, t: dict, links: dict[str, float], nics: dict[str, Nic]) -> Accelerator:
    where = f"accelerator {name}"
    _check_keys(t, ACCELERATOR_KEYS, where)
    for key in ("display", "price_date", "notes"):
        _text(t, key, where)
    host_link = _text(t, "host_link", where, None)
    if host_link is None:
        raise InputError(f"{where}: missing required key 'host_link'")
    if host_link not in links:
        raise InputError(f"{where}: unknown host_link {host_link!r} (known: {', '.join(sorted(links))})")
    inter = _text(t, "interconnect", where, "none")
    if inter != "none" and inter not in links:
        raise InputError(f"{where}: unknown interconnect {inter!r} (known: none, {', '.join(sorted(links))})")
    nic_name = _text(t, "nic", where, None)
    if nic_name is None:
        raise InputError(f"{where}: missing required key 'nic'")
    if nic_name not in nics:
        raise InputError(f"{where}: unknown nic {nic_name!r} (known: {', '.join(sorted(nics))})")
    nic = nics[nic_name]
    memory = parse_bytes(_need(t, "memory", where), f"{where} memory", allow_zero=False)
    usable = parse_bytes(t.get("usable_memory", t["memory"]), f"{where} usable_memory", allow_zero=False)
    if usable > memory:
        raise InputError(f"{where}: usable_memory exceeds memory")
    price = t.get("price_card_hour")
    nph = parse_int(t.get("nics_per_host", 1), f"{where} nics_per_host", minimum=0)
    cards = parse_int(_need(t, "cards_per_host", where), f"{where} cards_per_host", minimum=1)
    scale_up = parse_int(t.get("scale_up_cards", cards), f"{where} scale_up_cards", minimum=1)
    if scale_up % cards:
        raise InputError(f"{where}: scale_up_cards ({scale_up}) must be a whole number of hosts of {cards} cards")

    def peak(key):
        return parse_flops_rate(t[key], f"{where} {key}") if key in t else 0.0

    return Accelerator(
        name=name,
        display=t.get("display", name),
        peak_flops=parse_flops_rate(_need(t, "peak_bf16", where), f"{where} peak_bf16"),
        memory_nominal=memory,
        memory_usable=usable,
        hbm_bandwidth=parse_bandwidth(t.get("hbm_bandwidth", "0GB/s"), f"{where} hbm_bandwidth"),
        host_link=host_link,
        host_link_bw=links[host_link],
        p2p=_flag(t, "p2p", where),
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
        peak_tf32=peak("peak_tf32"),
        scale_up_cards=scale_up if "scale_up_cards" in t else 0,
        pod_hosts=parse_int(t.get("pod_hosts", 0), f"{where} pod_hosts", minimum=0),
        spine_oversubscription=_oversubscription(t, where),
        sources=_sources(t, where),
    )


# ---------------------------------------------------------------------------------------------
# model architectures: one schema for catalog tables and Hugging Face configs

#: Largest architecture integer accepted (widths, counts, vocabularies): far above any real model,
#: low enough that products of a few of them stay exact in float64 FLOP counts.
ARCH_INT_MAX = 100_000_000
_ARCH_REQUIRED = ("layers", "hidden", "heads", "ffn", "vocab")
_ARCH_INT = {  # key -> minimum (maximum ARCH_INT_MAX)
    "layers": 1, "hidden": 1, "heads": 1, "kv_heads": 1, "head_dim": 1, "ffn": 1, "vocab": 1,
    "learned_positions": 0, "sliding_window": 0, "sliding_layers": 0, "layer_norms": 0,
    "q_lora_rank": 0, "kv_lora_rank": 0, "qk_rope_dim": 0, "qk_nope_dim": 0, "v_head_dim": 0,
    "experts": 0, "top_k": 0, "expert_ffn": 0, "shared_experts": 0, "shared_ffn": 0, "dense_layers": 0,
    "moe_step": 1, "mtp_layers": 0,
}
_ARCH_BOOL = ("tied_embeddings", "qk_norm", "gated_mlp", "qkv_bias", "linear_bias", "parallel_block", "norm_bias",
              "o_bias", "mlp_bias", "head_bias", "embedding_norm", "attn_sinks", "shared_expert_gate", "router_bias")
_ARCH_ENUM = {"norm": NORMS, "activation": ACTIVATIONS, "positions": POSITIONS}
MODEL_KEYS = tuple(_ARCH_INT) + _ARCH_BOOL + tuple(_ARCH_ENUM) + ("mlp_only_layers", "source", "notes")
_MOE_ONLY = ("top_k", "expert_ffn", "shared_experts", "shared_ffn", "dense_layers")
_MLA_ONLY = ("q_lora_rank", "qk_rope_dim", "qk_nope_dim", "v_head_dim")


def arch_int(value, what: str, minimum: int = 0, maximum: int = ARCH_INT_MAX) -> int:
    """A whole number in [minimum, maximum] given as a TOML/JSON integer (no units, no fractions)."""
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer() and abs(value) <= maximum:
            value = int(value)
        else:
            raise InputError(f"{what}: expected a whole number, got {value!r}")
    if value < minimum or value > maximum:
        raise InputError(f"{what}: {value:,} is outside [{minimum:,}, {maximum:,}]")
    return value


def build_model(name: str, t: dict) -> ModelArch:
    """A :class:`ModelArch` from a catalog table (or a Hugging Face config mapped to the same keys).

    Required: layers, hidden, heads, ffn, vocab; kv_heads defaults to heads, head_dim to hidden /
    heads (MLA: nope + rope). Every other field has the default of a Llama block. Unknown keys,
    wrong types and inconsistent combinations (top_k > experts, MLA dims without a kv latent, a
    learned position table without positions = "learned", ...) are one :class:`InputError`.
    """
    where = f"model {name}"
    _check_keys(t, MODEL_KEYS, where)
    for k in _ARCH_REQUIRED:
        _need(t, k, where)
    kw = {k: arch_int(t[k], f"{where} {k}", lo) for k, lo in _ARCH_INT.items() if k in t}
    for k in _ARCH_BOOL:
        if k in t:
            kw[k] = _flag(t, k, where)
    for k, allowed in _ARCH_ENUM.items():
        if k in t:
            if t[k] not in allowed:
                raise InputError(f"{where}: {k} must be one of {', '.join(allowed)}, got {t[k]!r}")
            kw[k] = t[k]
    source = _text(t, "source", where, "") or ""
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


def model_from_hf_config(path: str | Path, name: str | None = None) -> ModelArch:
    """A :class:`ModelArch` from a Hugging Face ``config.json`` (see :mod:`tpopt.catalogs.hf` for the
    families understood and the keys each family reads or knows to be irrelevant)."""
    from tpopt.catalogs.hf import model_from_hf_config as parse

    return parse(path, name)


def model_from_hf_cache(repo_id: str, cache_dir=None) -> ModelArch:
    """The model a Hugging Face id names, from ``config.json`` in the local Hugging Face cache
    (``huggingface_hub``'s layout; no network). ``org/name@revision`` picks a revision."""
    from tpopt.catalogs.hf import model_from_hf_cache as resolve

    return resolve(repo_id, cache_dir)


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
        where = f"storage {name}"
        _check_keys(t, STORAGE_KEYS, where)
        cat.storage[name] = parse_bandwidth(_need(t, "write_bandwidth", where), f"{where} write_bandwidth",
                                            allow_zero=False)
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
