"""Catalog data (accelerators, links/NICs, storage tiers, model architectures) and their loader.

The built-in catalog is the set of TOML files next to this module. Users extend or override it
without code: ``--catalog DIR`` (repeatable) reads ``accelerators.toml``, ``links.toml``,
``storage.toml`` and ``models.toml`` from DIR, if present, and entries there replace built-in
entries of the same name. Every value is parsed with its unit exactly once, here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from os import PathLike
from pathlib import Path
from typing import Any, TypeVar

from tpopt.catalogs.architectures import ARCH_INT_MAX, MODEL_KEYS, arch_int, build_model
from tpopt.catalogs.declare import read_entry, spec
from tpopt.catalogs.entry_keys import AcceleratorKeys, LinkKeys, NicKeys, PerfKeys, StorageKeys
from tpopt.catalogs.market import Market, list_price_offers, load_market
from tpopt.catalogs.tables import (
    MAX_INPUT_BYTES,
    builtin_toml,
    check_keys,
    loads_toml,
    read_text_capped,
)
from tpopt.catalogs.uncertainty import COVERS, covers_of
from tpopt.errors import InputError
from tpopt.models.arch import ModelArch
from tpopt.models.hardware import Accelerator
from tpopt.models.roofline import PerfParams
from tpopt.models.units import parse_duration

_R = TypeVar("_R")

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
    origins: dict[tuple[str, str], Path] = field(default_factory=dict)  # (file stem, entry) -> the --catalog file
    # that set it (an entry of the shipped catalog is not in it)

    def origin(self, stem: str, name: str) -> str:
        """The user catalog file (a ``--catalog`` directory's) that set entry ``name`` of ``stem``.toml; "": the
        shipped catalog's."""
        path = self.origins.get((stem, name))
        return "" if path is None else str(path)

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
        """Performance parameters of an accelerator (performance.toml), or the [default] entry's values carried
        over (:func:`carried_over`)."""
        if name in self.performance:
            return self.performance[name]
        return carried_over(self.performance.get("default", PerfParams(name="default")))

    def storage_tier(self, name: str) -> float:
        try:
            return self.storage[name]
        except KeyError:
            known = ", ".join(sorted(self.storage))
            raise InputError(f"unknown storage tier {name!r} (known: {known})") from None


def _read_toml(path: Path) -> dict[str, Any]:
    return builtin_toml(path, read_text_capped(path, "catalog file"), lambda text: loads_toml(text, str(path)))


def _merge(dirs: list[Path], origins: dict[tuple[str, str], tuple[Path, bool]] | None = None
           ) -> dict[str, dict[str, Any]]:
    """The catalog files of ``dirs`` merged in order; ``origins`` gets, for each entry a directory after the
    first sets, (its file, whether it replaced an entry of that name whole)."""
    raw: dict[str, dict[str, Any]] = {Path(f).stem: {} for f in CATALOG_FILES}
    for i, d in enumerate(dirs):
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
                        if "residual_sigma" in value and isinstance(entry.get("calibration"), dict):
                            entry["calibration"] = {k: v for k, v in entry["calibration"].items() if k != COVERS}
                            # and what its runs covered (absent: not recorded)
                        for k2, v2 in value.items():
                            both = isinstance(v2, dict) and isinstance(entry.get(k2), dict)
                            entry[k2] = {**entry[k2], **v2} if both else v2
                    else:
                        if origins is not None and i:
                            origins[(stem, key)] = (p, key in raw[stem])
                        raw[stem][key] = value
                    if origins is not None and i and stem == "performance":
                        origins[(stem, key)] = (p, False)
    return raw


def _entry(origins: dict[tuple[str, str], tuple[Path, bool]], stem: str, name: str,
           build: Callable[..., _R], *args: Any) -> _R:
    """``build(*args)`` for one catalog entry; an input error of an entry a ``--catalog`` directory set names
    that file first, and, where the entry replaced a built-in one whole and misses a required key, says so."""
    try:
        return build(*args)
    except InputError as e:
        if (stem, name) not in origins:
            raise
        path, replaced = origins[(stem, name)]
        whole = (f" (an entry in {path.name} replaces the built-in {name} whole, every required key with it; "
                 "only performance.toml overrides field by field, and a price or usable memory of your own "
                 "goes in the scenario's [hardware] or [cost])") if replaced and "missing required key" in str(e) \
            else ""
        raise InputError(f"{path}: {e}{whole}") from None


LINK_KEYS = tuple(f.name for f in fields(LinkKeys))
NIC_KEYS = tuple(f.name for f in fields(NicKeys))
STORAGE_KEYS = tuple(f.name for f in fields(StorageKeys))


def _build_nics(raw_links: dict[str, Any]) -> tuple[dict[str, float], dict[str, Nic]]:
    """links.toml's links (bandwidth by name) and NICs, read as :mod:`tpopt.catalogs.entry_keys` declares them."""
    links = {}
    for name, t in raw_links.get("link", {}).items():
        where = f"link {name}"
        check_keys(t, LINK_KEYS, where)
        link: LinkKeys = read_entry(LinkKeys, t, where)
        links[name] = link.bandwidth
    nics = {}
    for name, t in raw_links.get("nic", {}).items():
        where = f"nic {name}"
        check_keys(t, NIC_KEYS, where)
        nic: NicKeys = read_entry(NicKeys, t, where)
        nics[name] = Nic(name=name, bandwidth=nic.bandwidth, price_hour=nic.price_nic_hour, source=nic.source)
    return links, nics


ACCELERATOR_KEYS = tuple(f.name for f in fields(AcceleratorKeys))


def _build_accelerator(name: str, t: dict[str, Any], links: dict[str, float], nics: dict[str, Nic]) -> Accelerator:
    """One entry of accelerators.toml, read as :class:`~tpopt.catalogs.entry_keys.AcceleratorKeys`
    declares it; the keys left out take their defaults (usable_memory: memory, max_nics_per_host:
    nics_per_host, a precision's peak: 0 = not given, scale_up_cards: 0 = one host)."""
    where = f"accelerator {name}"
    check_keys(t, ACCELERATOR_KEYS, where)
    k: AcceleratorKeys = read_entry(AcceleratorKeys, t, where, (links, nics))
    nic = nics[k.nic]
    return Accelerator(
        name=name,
        display=name if k.display is None else k.display,
        vendor=k.vendor,
        peak_flops=k.peak_bf16,
        memory_nominal=k.memory,
        memory_usable=k.memory if k.usable_memory is None else k.usable_memory,
        hbm_bandwidth=k.hbm_bandwidth,
        host_link=k.host_link,
        host_link_bw=links[k.host_link],
        p2p=k.p2p,
        interconnect=k.interconnect,
        interconnect_bw=0.0 if k.interconnect == "none" else links[k.interconnect],
        cards_per_host=k.cards_per_host,
        nic=k.nic,
        nic_bw=nic.bandwidth,
        nic_price_hour=nic.price_hour,
        nics_per_host=k.nics_per_host,
        max_nics_per_host=k.nics_per_host if k.max_nics_per_host is None else k.max_nics_per_host,
        host_memory=k.host_memory,
        host_memory_bw=k.host_memory_bandwidth,
        price_card_hour=k.price_card_hour,
        peak_fp16=0.0 if k.peak_fp16 is None else k.peak_fp16,
        peak_fp8=0.0 if k.peak_fp8 is None else k.peak_fp8,
        peak_fp4=0.0 if k.peak_fp4 is None else k.peak_fp4,
        peak_tf32=0.0 if k.peak_tf32 is None else k.peak_tf32,
        scale_up_cards=0 if k.scale_up_cards is None else k.scale_up_cards,
        pod_hosts=k.pod_hosts,
        spine_oversubscription=k.spine_oversubscription,
        sources=k.sources,
    )


_PERF_KEYS = {f.name for f in fields(PerfKeys)}


def build_perf(name: str, t: dict[str, Any], base: PerfParams | None = None) -> PerfParams:
    """:class:`PerfParams` from a performance.toml table, read as :class:`~tpopt.catalogs.entry_keys.PerfKeys`
    declares it (fields absent keep ``base``'s values)."""
    where = f"performance {name}"
    if not isinstance(t, dict):
        raise InputError(f"{where}: expected a table")
    bad = set(t) - _PERF_KEYS
    if bad:
        raise InputError(f"{where}: unknown key(s) {sorted(bad)} (known: {', '.join(sorted(_PERF_KEYS))})")
    k: PerfKeys = read_entry(PerfKeys, t, where, t)
    kept = ("tile", "sources", "calibration", "residual_sigma_source", "derived_from", "clock_ratio",
            "prior_scale_from")
    kw: dict[str, Any] = {f.name: getattr(k, f.name) for f in fields(k)
                          if f.name not in kept and getattr(k, f.name) is not None}
    if k.tile is not None:
        kw["tile_m"], kw["tile_n"] = k.tile
    if k.residual_sigma is not None:
        kw["residual_sigma_source"] = k.residual_sigma_source
    if isinstance(k.calibration, dict) and COVERS in k.calibration:
        kw["calibration_covers"] = covers_of(k.calibration[COVERS], f"{where}: calibration.{COVERS}")
    sources = dict((base.sources if base else {}) or {})
    if k.derived_from is not None:  # inherited values say where they come from
        sources = {f: f"as [{k.derived_from}] ({v})" for f, v in sources.items()}
    sources.update(k.sources or {})
    out = replace(base or PerfParams(), name=name, sources=sources, **kw)
    if k.derived_from is not None:  # the same chip: its values, its fitted status and spread not carried over
        out = replace(out, calibrated=k.calibrated or (), residual_sigma=k.residual_sigma or 0.0,
                      residual_sigma_source=str(k.residual_sigma_source or ""),
                      residual_sigma_stacks=k.residual_sigma_stacks or (),
                      calibration_covers=kw.get("calibration_covers"))
    if k.clock_ratio is not None:  # on the inherited GEMM and attention shares (an entry's own are as stated)
        scaled = {f: getattr(out, f) * k.clock_ratio for f in ("gemm_efficiency", "attention_efficiency")
                  if f not in t}
        sources.update({f: f"{sources.get(f, '')}; x clock_ratio {k.clock_ratio:g}" for f in scaled})
        out = replace(out, sources=sources, **scaled)
    return out


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
    origins: dict[tuple[str, str], tuple[Path, bool]] = {}
    raw = _merge(dirs, origins)
    links, nics = _build_nics(raw["links"])
    cat = Catalog(links=links, nics=nics, raw=raw, origins={k: path for k, (path, _) in origins.items()})
    for name, t in raw["storage"].items():
        cat.storage[name] = _entry(origins, "storage", name, _storage_tier, name, t)
    for name, t in raw["accelerators"].items():
        acc = _entry(origins, "accelerators", name, _build_accelerator, name, t, links, nics)
        cat.accelerators[name] = _unsourced_said(acc, t, origins[("accelerators", name)][0]) \
            if ("accelerators", name) in origins else acc
    for name, t in raw["models"].items():
        cat.models[name] = _entry(origins, "models", name, build_model, name, t)
    cat.market = load_market(extra_dirs, set(cat.accelerators))
    listed = list_price_offers(cat.market, {
        k: (a.price_card_hour, str(raw["accelerators"][k]["price_date"]), a.sources.get("price_card_hour", ""),
            a.cards_per_host)
        for k, a in cat.accelerators.items() if a.price_card_hour is not None
        and raw["accelerators"][k].get("price_date")})
    cat.market.offers.update({k: replace(o, origin=cat.origin("accelerators", o.accelerator))  # whose list price
                              for k, o in listed.items()})
    perf = raw["performance"]
    default = build_perf("default", perf["default"]) if "default" in perf else PerfParams(name="default")
    cat.performance["default"] = default
    for name in perf:
        if name != "default" and name not in cat.accelerators:  # a typo would leave the card on [default]
            raise InputError(f"performance.toml [{name}]: unknown accelerator {name!r} (a table per accelerator "
                             f"of accelerators.toml, or [default]; known: {', '.join(sorted(cat.accelerators))})")
        if name != "default":
            cat.performance[name] = _entry(origins, "performance", name, _derived_perf, name, perf, cat, default)
    return cat


NO_SOURCE = "no source given"
ACCELERATOR_SOURCED = tuple(f.name for f in fields(AcceleratorKeys) if spec(f).source)
"""The accelerator keys whose value a source must back (built-in files: tests/test_catalogs.py)."""


def _unsourced_said(acc: Accelerator, t: dict[str, Any], path: Path) -> Accelerator:
    """A card of a user's catalog with a number stated without a source: that source reads ``no source given
    (FILE)``, so listings, reports and the JSON say so rather than pass the number as sourced (stacks.toml and
    recipes.toml refuse such an entry; an accelerator is taken, and marked)."""
    missing = {k: f"{NO_SOURCE} ({path})" for k in ACCELERATOR_SOURCED if k in t and k not in acc.sources}
    return replace(acc, sources={**acc.sources, **missing}) if missing else acc


def unsourced(cat: Catalog) -> dict[str, list[str]]:
    """The accelerators with numbers no source backs, and those keys (declaration order)."""
    out = {name: [k for k, v in a.sources.items() if v.startswith(NO_SOURCE)] for name, a in cat.accelerators.items()}
    return {name: keys for name, keys in out.items() if keys}


def _storage_tier(name: str, t: dict[str, Any]) -> float:
    """One entry of storage.toml: its write bandwidth (bytes/s)."""
    where = f"storage {name}"
    check_keys(t, STORAGE_KEYS, where)
    tier: StorageKeys = read_entry(StorageKeys, t, where)
    return tier.write_bandwidth


def carried_over(default: PerfParams) -> PerfParams:
    """[default]'s values as a card that does not state them takes them: each source says so,
    ``carried over from [default] (SOURCE)``. A measurement [default] cites was made on another card (the A100's
    FlashAttention-2 and nccl-tests figures), so on this card it is a prior, which the reports' footing reads
    from that wording (tpopt.optimizer.footing.provenance)."""
    return replace(default, sources={f: f"carried over from [default] ({v})" for f, v in default.sources.items()})


def _derived_perf(name: str, perf: dict[str, Any], cat: Catalog, default: PerfParams,
                  seen: tuple[str, ...] = ()) -> PerfParams:
    """One performance.toml entry, built on its ``derived_from`` card's (built first) or on [default]."""
    if name in cat.performance and name != "default":
        return cat.performance[name]
    t = perf[name]
    base_name = t.get("derived_from") if isinstance(t, dict) else None
    if base_name is None:
        out = build_perf(name, t, carried_over(default))
    else:
        if base_name not in perf or base_name == "default" or base_name in seen + (name,):
            raise InputError(f"performance.toml [{name}]: derived_from {base_name!r} must name another card's "
                             "entry (no cycle)")
        base = _derived_perf(base_name, perf, cat, default, seen + (name,))
        cat.performance[base_name] = base
        out = borrowed_spread(build_perf(name, t, base), [base])
    if isinstance(t, dict) and "prior_scale_from" in t:
        out = _scaled_prior(name, out, t, perf, cat, default, seen)
    return out


def borrowed_spread(out: PerfParams, lenders: Sequence[PerfParams]) -> PerfParams:
    """A card whose GEMM share rests on other cards' fits (``derived_from``: the same chip's values;
    ``prior_scale_from``: their fitted / prior gap) borrows their spread too: ``borrowed_sigma`` = the largest
    of the lenders' own leave-one-out ``residual_sigma`` (or what they borrowed), ``borrowed_from`` its card. Its
    plans can be no surer than the fit they rest on: a stack's runs that check the card (torchtitan's on H200)
    give it an envelope, not a GEMM fit of its own (tpopt.models.terms.card_base takes the larger)."""
    best = max(((p.residual_sigma, p.name) if p.residual_sigma >= p.borrowed_sigma else (p.borrowed_sigma,
                p.borrowed_from) for p in lenders), default=(0.0, ""))
    return replace(out, borrowed_sigma=best[0], borrowed_from=best[1]) if best[0] > 0 else out


def calibration_prior(table: Any, perf: PerfParams) -> dict[str, float]:
    """The public measurement each calibrated field of a performance.toml entry started from: its
    ``[acc.calibration] prior`` list, aligned with the last ``len(prior)`` names of ``calibrated`` (as
    benchmarks/refit_catalog.py writes them), a duration with its unit as tpopt calibrate writes one ("12us");
    {} for an entry without one."""
    cal = table.get("calibration", {}) if isinstance(table, dict) else {}
    prior = list(cal.get("prior", [])) if isinstance(cal, dict) else []
    fitted = list(cal.get("fitted", [])) if isinstance(cal, dict) else []
    names = fitted if len(fitted) == len(prior) else list(perf.calibrated)[-len(prior):] if prior else []
    if len(names) != len(prior) or not all(isinstance(v, (int, float, str)) and not isinstance(v, bool)
                                           for v in prior):
        return {}
    return {n: parse_duration(v, f"performance {perf.name}: calibration.prior") if isinstance(v, str) else float(v)
            for n, v in zip(names, prior, strict=True)}


def prior_training_ratio(fitted: Sequence[tuple[float, float]]) -> float:
    """How far a public GEMM measurement lies from what training runs reach, from cards that have both: the
    geometric mean of fitted / prior over (fitted, prior) pairs,
        r = exp(mean(ln(g_fit / g_prior))).
    (0.541, 0.634) and (0.505, 0.594): r = sqrt(0.853 x 0.850) = 0.852."""
    logs = [math.log(g / p) for g, p in fitted]
    return math.exp(sum(logs) / len(logs))


def scaled_share(own: float, fitted: Sequence[tuple[float, float]]) -> float:
    """A stated prior GEMM share scaled by :func:`prior_training_ratio` of the (fitted, prior) pairs, at most 1;
    as stated without a pair (no named card fitted)."""
    return min(1.0, own * prior_training_ratio(fitted)) if fitted else own


def _scaled_prior(name: str, out: PerfParams, t: dict[str, Any], perf: dict[str, Any], cat: Catalog,
                  default: PerfParams, seen: tuple[str, ...]) -> PerfParams:
    """An entry's own prior GEMM share scaled by :func:`prior_training_ratio` of the calibrated cards its
    ``prior_scale_from`` names (each built first): a public measurement of a card no run has fitted, taken
    as far from training as the same measurement proved on the cards that have been fitted. A named card
    whose GEMM share is not fitted with a recorded prior (a user's calibration that left it out) counts for
    nothing; with none left the share stays as stated and its source says so. A user's ``tpopt calibrate``
    of a named card records the value it started from as the prior, so the ratio is then the user's fit
    against that value."""
    where = f"performance.toml [{name}]: prior_scale_from"
    if "gemm_efficiency" not in t or "gemm_efficiency" in out.calibrated:
        raise InputError(f"{where} scales the entry's own prior gemm_efficiency: state one (not a calibrated one)")
    names = tuple(str(x) for x in t["prior_scale_from"])  # a list of names (build_perf checked it)
    pairs: dict[str, tuple[float, float]] = {}
    lenders: list[PerfParams] = []
    for other in names:
        if other not in perf or other in ("default", name) or other in seen:
            raise InputError(f"{where}: {other!r} must name another card's entry (no cycle)")
        p = _derived_perf(other, perf, cat, default, seen + (name,))
        cat.performance[other] = p
        prior = calibration_prior(perf[other], p).get("gemm_efficiency")
        if prior is not None and "gemm_efficiency" in p.calibrated:
            pairs[other] = (p.gemm_efficiency, prior)
            lenders.append(p)
    sources = dict(out.sources or {})
    if not pairs:  # e.g. a user's calibration that did not fit the GEMM share: nothing to scale by
        sources["gemm_efficiency"] = (f"{sources.get('gemm_efficiency', '')}; unscaled: none of "
                                      f"{', '.join(names)} has a fitted gemm_efficiency with its recorded prior")
        return replace(out, sources=sources)
    r = prior_training_ratio(list(pairs.values()))
    why = ", ".join(f"[{o}] {f:.4g} / {q:.4g}" for o, (f, q) in pairs.items())
    sources["gemm_efficiency"] = (f"{sources.get('gemm_efficiency', '')}; x {r:.3f}, the fitted / prior GEMM share "
                                  f"of {why}{' (geometric mean)' if len(pairs) > 1 else ''}: how far the same "
                                  "public measurement lies from what the reference stacks' runs reached")
    return borrowed_spread(replace(out, gemm_efficiency=scaled_share(out.gemm_efficiency, list(pairs.values())),
                                   sources=sources), lenders)
