"""The keys of catalog entries, declared once as scenario keys are (:mod:`tpopt.catalogs.schema`): links and NICs
(links.toml), storage tiers (storage.toml), performance parameters (performance.toml) and accelerators
(accelerators.toml). For each key of an accelerator:
how each value is read (type, unit and bound), its default as a catalog file writes it (None: no value unless
given), the :class:`~tpopt.models.hardware.Accelerator` field it sets (``to``), whether it is required, whether
the entry's ``sources`` table must source it (``source``: every number and every link choice), and whether its
default is neutral (``neutral``: it changes nothing, and ``Accelerator``'s repr, which sweep fingerprints hash,
leaves the field out at that default, so adding such a key keeps every stored fingerprint).

Declaration order is the order the values are checked: the first bad value of an entry is its error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from tpopt.catalogs.declare import (
    FLAG,
    SOURCES,
    TEXT,
    Kind,
    bandwidth,
    duration,
    flops_rate,
    fraction,
    key,
    number,
    raw,
    size,
    whole,
)
from tpopt.catalogs.stacks import stack_names
from tpopt.errors import InputError
from tpopt.models.roofline import PerfParams
from tpopt.models.units import parse_int

#: What an entry's named choices are looked up in: (links by name, NICs by name).
Lookups = tuple[dict[str, Any], dict[str, Any]]


def _known(value: Any, what: str, known: dict[str, Any], extra: tuple[str, ...] = ()) -> str:
    """A name of ``known`` (or of ``extra``); ``what`` is ``"<where>: <key>"``."""
    name: str = TEXT.read(value, what, None)
    if name not in known and name not in extra:
        where, _, field = what.rpartition(": ")
        raise InputError(f"{where}: unknown {field} {name!r} (known: {', '.join([*extra, *sorted(known)])})")
    return name


def _link(value: Any, what: str, names: Lookups) -> str:
    """A link of links.toml (context: the links and NICs by name)."""
    return _known(value, what, names[0])


def _fabric(value: Any, what: str, names: Lookups) -> str:
    """A link of links.toml, or ``none`` (no card-to-card fabric)."""
    return _known(value, what, names[0], ("none",))


def _nic(value: Any, what: str, names: Lookups) -> str:
    """A NIC of links.toml."""
    return _known(value, what, names[1])


@dataclass(frozen=True, eq=False, repr=False)
class LinkKeys:
    """One ``[link.NAME]`` table of links.toml."""

    source: str | None = key(TEXT, help="where the bandwidth comes from")
    bandwidth: float = key(bandwidth(allow_zero=False), required=True, help="per direction, e.g. 32GB/s")
    notes: Any = key(raw("text"), help="free text")


@dataclass(frozen=True, eq=False, repr=False)
class NicKeys:
    """One ``[nic.NAME]`` table of links.toml."""

    bandwidth: float = key(bandwidth(allow_zero=False), required=True, help="per direction, e.g. 400Gbit/s")
    price_nic_hour: float = key(number(), 0.0, help="USD per NIC-hour")
    source: str = key(TEXT, "", help="where the bandwidth comes from")
    price_source: Any = key(raw("text"), help="where the price comes from")
    notes: Any = key(raw("text"), help="free text")


@dataclass(frozen=True, eq=False, repr=False)
class StorageKeys:
    """One ``[NAME]`` table of storage.toml (a checkpoint storage tier)."""

    write_bandwidth: float = key(bandwidth(allow_zero=False), required=True, help="aggregate write bandwidth")
    source: Any = key(raw("text"), help="where the bandwidth comes from")
    notes: Any = key(raw("text"), help="free text")


def _tile(value: Any, what: str, _context: Any) -> tuple[int, int]:
    """(rows, columns) from ``[128, 256]``; ``what`` is ``"<where>: tile"``."""
    if not (isinstance(value, list) and len(value) == 2):
        raise InputError(f"{what} must be [rows, columns]")
    where, _, field = what.rpartition(": ")
    rows, columns = (parse_int(x, f"{where} {field}", minimum=1) for x in value)
    return rows, columns


def _calibrated(value: Any, what: str, _context: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or any(c not in PerfParams.field_names() for c in value):
        raise InputError(f"{what} must list parameter names")
    return tuple(value)


def _card_names(value: Any, what: str, _context: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(x, str) and x for x in value):
        raise InputError(f"{what} must list accelerator names (performance.toml entries)")
    return tuple(value)


def _sigma_stacks(value: Any, what: str, table: dict[str, Any]) -> tuple[str, ...]:
    """The stacks residual_sigma was measured on (context: the entry's table, which must state residual_sigma)."""
    if "residual_sigma" not in table or not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise InputError(f"{what} must list the stacks residual_sigma was measured on")
    known = stack_names()
    unknown = [x for x in value if x not in known]
    if unknown:
        raise InputError(f"{what}: unknown stack(s) {', '.join(unknown)} (known: {', '.join(known)})")
    return tuple(value)


@dataclass(frozen=True, eq=False, repr=False)
class PerfKeys:
    """One ``[NAME]`` table of performance.toml (an accelerator's step-time parameters, or ``[default]``); a key
    left out keeps the base entry's value (context: the entry's table)."""

    gemm_efficiency: float | None = key(fraction(), help="achieved share of the matrix peak in large GEMMs")
    memory_efficiency: float | None = key(fraction(), help="achieved share of the HBM bandwidth")
    attention_efficiency: float | None = key(fraction(), help="achieved share of the peak in attention kernels")
    tp_efficiency: float | None = key(fraction(), help="achieved share of the link in tensor-parallel collectives")
    dp_efficiency: float | None = key(fraction(), help="achieved share of the link in data-parallel collectives")
    fp8_gemm_ratio: float | None = key(fraction(), help="FP8 GEMM speed-up achieved, as a share of the peak's")
    fp4_gemm_ratio: float | None = key(fraction(), help="FP4 GEMM speed-up achieved, as a share of the peak's")
    mxfp8_gemm_ratio: float | None = key(fraction(), help="MXFP8 GEMM speed against per-tensor FP8 GEMMs' "
                                         "(block-scale handling; absent: 1)")
    attention_bwd_ratio: float | None = key(fraction(), help="attention backward speed against the forward's")
    portable_attention_ratio: float | None = key(fraction(), help="attention kernels not written for the card "
                                                 "(FlashAttention-2 on Hopper) against attention_efficiency")
    portable_attention_bwd_ratio: float | None = key(fraction(), help="those kernels' backward speed against "
                                                     "their forward's")
    overlap_contention: float | None = key(fraction(allow_zero=True), help="slow-down of compute under overlap")
    gemm_k_half: float | None = key(number(), help="GEMM depth at which half the peak is reached")
    sms: int | None = key(whole(1), help="streaming multiprocessors (wave quantisation)")
    tile: tuple[int, int] | None = key(Kind(_tile, "[rows, columns]", sep=": "), help="GEMM output tile")
    kernel_overhead: float | None = key(duration(), help="fixed time per kernel launch")
    collective_latency: float | None = key(duration(), help="fixed time per collective")
    up_step_latency: float | None = key(duration(), help="per-step latency inside the scale-up domain")
    out_step_latency: float | None = key(duration(), help="per-step latency across the scale-out network")
    calibrated: tuple[str, ...] | None = key(Kind(_calibrated, "list of parameter names", sep=": "),
                                             help="the parameters that were fitted (the rest are priors)")
    residual_sigma: float | None = key(number(), help="lognormal sigma of the step-time model's residual")
    residual_sigma_source: Any = key(raw("text"), help="how residual_sigma was obtained")
    residual_sigma_stacks: tuple[str, ...] | None = key(Kind(_sigma_stacks, "list of stacks", sep=": "),
                                                        help="the stacks residual_sigma's runs ran")
    sources: Any = key(raw("table of strings"), help="the source of every value, by key")
    calibration: Any = key(raw("table"), help="how a calibration was made (kept for the reader)")
    derived_from: str | None = key(TEXT, help="another card's entry this one starts from (the same chip in "
                                              "another part: its values, not its calibration status)")
    clock_ratio: float | None = key(fraction(), help="sustained clock against derived_from's: scales its GEMM and "
                                                    "attention efficiencies (a lower power limit)")
    prior_scale_from: tuple[str, ...] | None = key(Kind(_card_names, "list of accelerator names", sep=": "),
                                                   help="calibrated cards whose fitted / prior GEMM share (geometric "
                                                        "mean) scales this entry's own prior gemm_efficiency")

    RULES: ClassVar = (
        ("residual_sigma", lambda v: v["residual_sigma"] is not None and not 0.0 <= v["residual_sigma"] < 5.0,
         "{where}: residual_sigma must be a lognormal sigma between 0 and 5"),
        ("residual_sigma_source", lambda v: v["residual_sigma"] is not None and (
            not isinstance(v["residual_sigma_source"], str) or not v["residual_sigma_source"].strip()),
         "{where}: residual_sigma needs residual_sigma_source (how it was obtained)"),
        ("residual_sigma_source", lambda v: v["residual_sigma"] is None and v["residual_sigma_source"] is not None,
         "{where}: residual_sigma_source without residual_sigma"),
    )


@dataclass(frozen=True, eq=False, repr=False)
class AcceleratorKeys:
    """One ``[NAME]`` table of accelerators.toml (context: :data:`Lookups`)."""

    display: str | None = key(TEXT, help="the card's name in reports (default: the entry's name)")
    vendor: str = key(TEXT, "NVIDIA", help="the card's maker: which vendor-only software runs on it (the "
                                           "footing's stack line; catalogs/frameworks/megatron-lm.toml "
                                           "[flex_dispatcher])")
    price_date: str | None = key(TEXT, help="when price_card_hour was indicative (YYYY-MM)")
    notes: str | None = key(TEXT, help="free text")
    host_link: str = key(Kind(_link, "links.toml link", sep=": "), required=True, source=True,
                         help="link to the host")
    interconnect: str = key(Kind(_fabric, "links.toml link or none", sep=": "), "none",
                            help="card-to-card fabric inside a host (none: all traffic via host_link)")
    nic: str = key(Kind(_nic, "links.toml NIC", sep=": "), required=True, source=True, help="NIC model")
    memory: float = key(size(allow_zero=False), required=True, source=True, to="memory_nominal",
                        help="nominal device memory")
    usable_memory: float | None = key(size(allow_zero=False), source=True, to="memory_usable",
                                      help="what a training process can plan on (default: memory)")
    nics_per_host: int = key(whole(0), 1, source=True, help="NICs per host (the default count)")
    cards_per_host: int = key(whole(1), required=True, source=True, help="cards in one rentable host")
    scale_up_cards: int | None = key(whole(1), source=True, neutral=True,
                                     help="cards in one scale-up domain, whole hosts (default: one host)")
    peak_bf16: float = key(flops_rate(), required=True, source=True, to="peak_flops",
                           help="dense BF16 matrix peak with FP32 accumulate")
    hbm_bandwidth: float = key(bandwidth(), "0GB/s", source=True, help="device memory bandwidth")
    p2p: bool = key(FLAG, False, source=True, help="cards on one host read and write each other's memory")
    max_nics_per_host: int | None = key(whole(0), source=True, help="most NICs a host takes (default: nics_per_host)")
    host_memory: float = key(size(), "0GB", source=True, help="host memory, for CPU offload")
    host_memory_bandwidth: float = key(bandwidth(), "0GB/s", source=True, to="host_memory_bw",
                                       help="host memory bandwidth, for CPU offload")
    price_card_hour: float | None = key(number(), source=True, help="indicative on-demand USD per card-hour")
    peak_fp16: float | None = key(flops_rate(), source=True, help="dense FP16 matrix peak (absent: not given)")
    peak_fp8: float | None = key(flops_rate(), source=True, help="dense FP8 matrix peak (absent: not given)")
    peak_fp4: float | None = key(flops_rate(), source=True, help="dense FP4 matrix peak (absent: not given)")
    peak_tf32: float | None = key(flops_rate(), source=True, help="dense TF32 matrix peak (absent: not given)")
    pod_hosts: int = key(whole(0), 0, source=True, neutral=True,
                         help="hosts under one scale-out pod (0: every host in one pod, no spine)")
    spine_oversubscription: float = key(number(), 1.0, source=True, neutral=True,
                                        help="taper of the spine between pods, >= 1 (2 = 2:1; 1 = none)")
    sources: dict[str, str] = key(SOURCES, {},
                                  help="the source of every value, by key")

    RULES: ClassVar = (
        ("usable_memory", lambda v: v["usable_memory"] is not None and v["usable_memory"] > v["memory"],
         "{where}: usable_memory exceeds memory"),
        ("scale_up_cards", lambda v: v["scale_up_cards"] is not None and v["scale_up_cards"] % v["cards_per_host"],
         "{where}: scale_up_cards ({scale_up_cards}) must be a whole number of hosts of {cards_per_host} cards"),
        ("spine_oversubscription", lambda v: v["spine_oversubscription"] < 1.0,
         "{where}: spine_oversubscription must be at least 1 (1 = none, 2 = 2:1), got {spine_oversubscription:g}"),
    )
