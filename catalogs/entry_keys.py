"""The keys of catalog entries, declared once as scenario keys are (:mod:`tpopt.catalogs.schema`): links and NICs
(links.toml), storage tiers (storage.toml) and accelerators (accelerators.toml). For each key of an accelerator:
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

from tpopt.catalogs.schema import Kind, bandwidth, flops_rate, integer, key, number, raw, size
from tpopt.errors import InputError
from tpopt.models.units import MAX_INT

#: What an entry's named choices are looked up in: (links by name, NICs by name).
Lookups = tuple[dict[str, Any], dict[str, Any]]


def _text(value: Any, what: str, _context: Any) -> str:
    if not isinstance(value, str):
        raise InputError(f"{what} must be a string, got {value!r}")
    return value


def _known(value: Any, what: str, known: dict[str, Any], extra: tuple[str, ...] = ()) -> str:
    """A name of ``known`` (or of ``extra``); ``what`` is ``"<where>: <key>"``."""
    name = _text(value, what, None)
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


def _flag(value: Any, what: str, _context: Any) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"{what} must be true or false, got {value!r}")
    return value


def _sources(value: Any, what: str, _context: Any) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise InputError(f"{what} must be a table of strings")
    return dict(value)


TEXT = Kind(_text, "text", sep=": ")
FLAG = Kind(_flag, "true | false", sep=": ")


def whole(minimum: int) -> Kind:
    """A whole number >= ``minimum`` (up to :data:`~tpopt.models.units.MAX_INT`)."""
    return integer(minimum=minimum, maximum=MAX_INT)


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


@dataclass(frozen=True, eq=False, repr=False)
class AcceleratorKeys:
    """One ``[NAME]`` table of accelerators.toml (context: :data:`Lookups`)."""

    display: str | None = key(TEXT, help="the card's name in reports (default: the entry's name)")
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
    sources: dict[str, str] = key(Kind(_sources, "table of strings", sep=": "), {},
                                  help="the source of every value, by key")

    RULES: ClassVar = (
        ("usable_memory", lambda v: v["usable_memory"] is not None and v["usable_memory"] > v["memory"],
         "{where}: usable_memory exceeds memory"),
        ("scale_up_cards", lambda v: v["scale_up_cards"] is not None and v["scale_up_cards"] % v["cards_per_host"],
         "{where}: scale_up_cards ({scale_up_cards}) must be a whole number of hosts of {cards_per_host} cards"),
        ("spine_oversubscription", lambda v: v["spine_oversubscription"] < 1.0,
         "{where}: spine_oversubscription must be at least 1 (1 = none, 2 = 2:1), got {spine_oversubscription:g}"),
    )
