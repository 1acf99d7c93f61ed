"""The market catalog (``offers.toml``): regions and offers, read and validated once; SkyPilot import.

``load_market(dirs)`` reads the built-in ``offers.toml`` and then each ``--catalog DIR``'s, whose regions
and offers replace built-in entries of the same name. Every bad offer is one :class:`InputError` line
(negative price, unknown region or accelerator, missing date, no cards available).

``read_skypilot(path, ...)`` reads a SkyPilot catalog ``vms.csv`` (schema: InstanceType, AcceleratorName,
AcceleratorCount, vCPUs, MemoryGiB, GpuInfo, Price, SpotPrice, Region, AvailabilityZone; prices per
instance-hour) into the same offers: SkyPilot's accelerator names map to catalog entries by default
(:data:`SKYPILOT_NAMES`, the GpuInfo memory telling two parts of one name apart), one on-demand offer per
(region, accelerator) and one spot offer where SpotPrice is given (the zones' lowest by default, as SkyPilot's
own ``get_hourly_cost`` takes it, or their median), priced per card-hour = price / AcceleratorCount; CPU rows
and unknown accelerators are counted and named (:meth:`SkyPilotImport.skipped_line`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from os import PathLike
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

from tpopt.catalogs.declare import Kind, duration, fraction, key, number, quantity, raw, read_entry, whole
from tpopt.catalogs.tables import builtin_toml, check_keys, csv_rows, loads_toml, read_text_capped
from tpopt.errors import InputError
from tpopt.models.market import MARKETS, RESERVED, SPOT, Energy, Offer, Power, Storage, unique_ids
from tpopt.models.units import HOUR, parse_duration, parse_int, parse_number

BUILTIN = Path(__file__).resolve().parent / "offers.toml"
FILE = "offers.toml"
ENERGY_FILE = "energy.toml"
_DATE = re.compile(r"^(\d{4})-(0[1-9]|1[0-2])(-(0[1-9]|[12]\d|3[01]))?$")
SKYPILOT_COLUMNS = ("InstanceType", "AcceleratorName", "AcceleratorCount", "Region", "Price", "SpotPrice")


@dataclass
class Market:
    """Offers by id (catalog order), the regions they may name, the market's date, the spot defaults."""

    offers: dict[str, Offer] = field(default_factory=dict)
    regions: dict[str, str] = field(default_factory=dict)  # "provider/region" -> source
    pue: dict[str, tuple[float, str]] = field(default_factory=dict)  # "provider/region" -> (PUE, source)
    power: dict[str, Power] = field(default_factory=dict)  # accelerator -> power
    storage: dict[str, Storage] = field(default_factory=dict)  # "provider/region" -> checkpoint storage, egress
    energy: dict[str, Energy] = field(default_factory=dict)  # "provider/region" -> energy price, carbon intensity
    as_of: str = ""
    preempt_per_card_hour: float = 0.0
    preempt_source: str = ""
    reacquire_s: float = 0.0
    reacquire_source: str = ""
    default_pue: tuple[float, str] = (1.2, "")

    def select(self, hw: str | None = None, region: str | None = None) -> list[Offer]:
        """Offers of accelerator ``hw`` and/or region ``region`` (``region`` or ``provider/region``)."""
        return [o for o in self.offers.values() if (hw is None or o.accelerator == hw)
                and (region is None or region in (o.region, f"{o.provider}/{o.region}"))]


def check_date(value: object, where: str) -> str:
    if not isinstance(value, str) or not _DATE.match(value):
        raise InputError(f"{where}: date must be YYYY-MM or YYYY-MM-DD, got {value!r}")
    return value


class OfferContext(NamedTuple):
    """What an offer's keys are read against: its table, the market read so far (regions, spot defaults) and
    the catalog's accelerators (None: any)."""

    table: dict[str, Any]
    market: Market
    accelerators: set[str] | None


def _where(what: str) -> tuple[str, str]:
    """(``offer NAME``, key) of ``"offer NAME: key"``."""
    where, _, name = what.rpartition(": ")
    return where, name


def _text(value: Any, _what: str, _context: Any) -> str:
    return str(value)


WORDS = Kind(_text, "text")
"""Text as given, any value taken as its string (offers.toml's names and sources; declare.TEXT refuses a
non-string)."""


def _region(value: Any, what: str, context: OfferContext) -> str:
    """A region of the market, named with the entry's provider."""
    region, provider = str(value), str(context.table["provider"])
    if f"{provider}/{region}" not in context.market.regions:
        raise InputError(f"{_where(what)[0]}: unknown region {provider}/{region} "
                         f"(known: {', '.join(sorted(context.market.regions))})")
    return region


def _accelerator(value: Any, what: str, context: OfferContext) -> str:
    acc = str(value)
    if context.accelerators is not None and acc not in context.accelerators:
        raise InputError(f"{_where(what)[0]}: unknown accelerator {acc!r} (tpopt catalog accelerators)")
    return acc


def _market(value: Any, what: str, _context: Any) -> str:
    if value not in MARKETS:
        raise InputError(f"{what} {value!r} unknown (use one of: {', '.join(MARKETS)})")
    kind: str = value
    return kind


def _term(value: Any, what: str, context: OfferContext) -> float:
    """The reserved term (seconds); any other market takes none."""
    where, name = _where(what)
    if context.table["market"] != RESERVED:
        raise InputError(f"{where}: term applies to the reserved market only")
    return parse_duration(value, f"{where} {name}", allow_zero=False)


def spot_only(kind: Kind) -> Kind:
    """``kind`` read on a spot offer; on any other market the value is not read (None)."""

    def read(value: Any, what: str, context: OfferContext) -> Any:
        if context.table["market"] != SPOT:
            return None
        where, name = _where(what)
        return kind.read(value, f"{where}{kind.sep}{name}", context)

    return Kind(read, f"{kind.unit} (spot offers)", kind.parser, kind.bounds, sep=": ")


def _date(value: Any, what: str, _context: Any) -> str:
    return check_date(value, _where(what)[0])


@dataclass(frozen=True, eq=False, repr=False)
class OfferKeys:
    """One ``[offer.NAME]`` table of offers.toml (context: :class:`OfferContext`), in the order its values are
    checked; the spot keys left out (None) take the market's ``[defaults]``."""

    provider: str = key(WORDS, required=True, help="the provider (with region: a market region)")
    region: str = key(Kind(_region, "region of the market", sep=": "), required=True, help="the provider's region")
    accelerator: str = key(Kind(_accelerator, "catalog accelerator", sep=": "), required=True,
                           help="the card offered")
    market: str = key(Kind(_market, " | ".join(MARKETS), sep=": "), required=True, help="how the cards are sold")
    price_card_hour: float = key(number(), required=True, help="USD per card-hour")
    available: int = key(quantity(parse_int, "whole number >= 1", minimum=0), required=True,
                         help="cards available")
    term: float | None = key(Kind(_term, "duration (reserved only)", sep=": "),
                             help="the reserved market's commitment (required there)")
    preempt_per_card_hour: float | None = key(spot_only(number()),
                                              help="spot preemptions per card-hour (default: the market's)")
    date: str = key(Kind(_date, "YYYY-MM or YYYY-MM-DD", sep=": "), required=True, help="when the price held")
    source: str = key(WORDS, required=True, help="where the price comes from")
    cards_per_host: int = key(whole(1), 8, help="cards per host")
    billing: float = key(duration(allow_zero=False), "1s", help="billing increment")
    min_commitment: float = key(duration(), "0s", help="shortest rental billed")
    illustrative: bool = key(Kind(lambda value, _what, _context: bool(value), "true | false"), False,
                             help="an example price, not a quote")
    preempt_source: str | None = key(spot_only(WORDS),
                                     help="where the preemption rate comes from (default: the market's)")
    reacquire: float | None = key(spot_only(duration()),
                                  help="time to get preempted cards back (default: the market's)")
    availability: float | None = key(spot_only(fraction()),
                                     help="P(spot capacity obtainable on a day), 90% or 0.9 (default: an assumption)")
    availability_source: str | None = key(spot_only(WORDS), help="where the availability comes from")
    preempt_rate_cv: float | None = key(spot_only(number()),
                                        help="coefficient of variation of the preemption rate (default: 0.5)")
    preempt_rate_cv_source: str | None = key(spot_only(WORDS), help="where the rate's variation comes from")
    notes: Any = key(raw("text"), help="free text")

    RULES: ClassVar = (
        ("available", lambda v: v["available"] <= 0, "{where}: available must be at least 1 card, got {available}"),
        ("term", lambda v: v["market"] == RESERVED and v["term"] is None, "{where}: missing required key 'term'"),
    )


OFFER_KEYS = tuple(f.name for f in fields(OfferKeys))


def build_offer(name: str, t: dict[str, Any], market: Market, accelerators: set[str] | None) -> Offer:
    """One ``[offer.NAME]`` table as an :class:`Offer`, read as :class:`OfferKeys` declares it (spot defaults
    from ``market``)."""
    where = f"offer {name}"
    check_keys(t, OFFER_KEYS, where)
    k: OfferKeys = read_entry(OfferKeys, t, where, OfferContext(t, market, accelerators))
    spot = k.market == SPOT
    pue, pue_source = market.pue.get(f"{k.provider}/{k.region}", market.default_pue)
    return Offer(provider=k.provider, region=k.region, accelerator=k.accelerator, market=k.market,
                 price_card_hour=k.price_card_hour, available=k.available, date=k.date, source=k.source,
                 cards_per_host=k.cards_per_host, term_s=k.term or 0.0, billing_s=k.billing,
                 min_commit_s=k.min_commitment, illustrative=k.illustrative,
                 preempt_per_card_hour=(market.preempt_per_card_hour if k.preempt_per_card_hour is None
                                        else k.preempt_per_card_hour) if spot else 0.0,
                 pue=pue, pue_source=pue_source, power=market.power.get(k.accelerator),
                 storage=market.storage.get(f"{k.provider}/{k.region}"),
                 energy=market.energy.get(f"{k.provider}/{k.region}"),
                 preempt_source=(str(market.preempt_source) if k.preempt_source is None else k.preempt_source)
                 if spot else "",
                 reacquire_s=(market.reacquire_s if k.reacquire is None else k.reacquire) if spot else 0.0,
                 availability=k.availability, availability_source=k.availability_source or "",
                 preempt_rate_cv=k.preempt_rate_cv, preempt_rate_cv_source=k.preempt_rate_cv_source or "")


def build_storage(t: dict[str, Any], where: str) -> Storage:
    """A region's checkpoint storage price (USD per GB-month), egress price (USD per GB), date and source:
    all four (:class:`StoragePriceKeys`), or none."""
    missing = [k for k in STORAGE_KEYS if k not in t]
    if missing:
        raise InputError(f"{where}: storage prices need {', '.join(STORAGE_KEYS)} (missing {', '.join(missing)})")
    k: StoragePriceKeys = read_entry(StoragePriceKeys, t, where)
    return Storage(gb_month=k.storage_gb_month, egress_gb=k.egress_gb, date=k.storage_date, source=k.storage_source)


_POWER = re.compile(r"^\s*([0-9.eE+-]+)\s*(W|kW|MW|GW)\s*$")
_WATTS = {"W": 1.0, "kW": 1e3, "MW": 1e6, "GW": 1e9}


def parse_power(value: object, where: str) -> float:
    """Watts from ``"150MW"``, ``"500kW"``, ``"2GW"`` (a unit is required; greater than zero)."""
    m = _POWER.match(value) if isinstance(value, str) else None
    if m is None:
        raise InputError(f"{where}: {value!r} is not a power with a unit (e.g. \"150MW\", \"500kW\")")
    watts = parse_number(m.group(1), where, allow_zero=False) * _WATTS[m.group(2)]
    return watts


def parse_pue(value: object, where: str) -> float:
    """A power usage effectiveness: facility over IT power, so at least 1 (The Green Grid's definition)."""
    pue = parse_number(value, where)
    if pue < 1.0:
        raise InputError(f"{where}: a PUE is facility over IT power, at least 1 (got {pue:g})")
    return pue


def _pue_kind(value: Any, what: str, _context: Any) -> float:
    return parse_pue(value, what)


def _storage_date(value: Any, what: str, _context: Any) -> str:
    """``what`` is ``"region NAME storage_date"``; errors name ``region NAME storage``."""
    return check_date(value, f"{what.rpartition(' ')[0]} storage")


PUE = Kind(_pue_kind, "number >= 1 (facility over IT power)")


@dataclass(frozen=True, eq=False, repr=False)
class DefaultKeys:
    """The ``[defaults]`` table of offers.toml: what a spot offer and a region take unless they say."""

    preempt_per_card_hour: float = key(number(), 0.0, help="spot preemptions per card-hour")
    preempt_source: str = key(WORDS, "", help="where the preemption rate comes from")
    reacquire: float = key(duration(), "0s", help="time to get preempted cards back")
    reacquire_source: str = key(WORDS, "", help="where the reacquire time comes from")
    pue: float = key(PUE, 1.2, help="power usage effectiveness of a region that states none")
    pue_source: str = key(WORDS, "", help="where the PUE comes from")


@dataclass(frozen=True, eq=False, repr=False)
class RegionKeys:
    """One ``[region.PROVIDER/REGION]`` table of offers.toml, besides its storage prices (:class:`StoragePriceKeys`)."""

    source: str = key(WORDS, "", help="where the region comes from")
    notes: Any = key(raw("text"), help="free text")
    pue: float | None = key(PUE, help="power usage effectiveness (default: the market's)")
    pue_source: str = key(WORDS, "", help="where the PUE comes from")


@dataclass(frozen=True, eq=False, repr=False)
class StoragePriceKeys:
    """A region's checkpoint storage and egress prices: all four keys, or none."""

    storage_gb_month: float = key(number(), required=True, help="USD per GB-month of checkpoint storage")
    egress_gb: float = key(number(), required=True, help="USD per GB leaving the region")
    storage_date: str = key(Kind(_storage_date, "YYYY-MM or YYYY-MM-DD"), required=True,
                            help="when the storage prices held")
    storage_source: str = key(WORDS, required=True, help="where the storage prices come from")


@dataclass(frozen=True, eq=False, repr=False)
class PowerKeys:
    """One ``[power.ACCELERATOR]`` table of offers.toml."""

    board_w: float = key(number(allow_zero=False), required=True, help="the card's board power, watts")
    training_w: float = key(number(allow_zero=False), required=True, help="the card's power in training, watts")
    host_overhead_w: float = key(number(allow_zero=True), required=True, help="host power per card, watts")
    source: str = key(WORDS, required=True, help="where the figures come from")
    notes: Any = key(raw("text"), help="free text")


def _energy_date(value: Any, what: str, _context: Any) -> str:
    return check_date(value, what)


ENERGY_DATE = Kind(_energy_date, "YYYY-MM or YYYY-MM-DD")


@dataclass(frozen=True, eq=False, repr=False)
class EnergyKeys:
    """One ``[energy."PROVIDER/REGION"]`` table of energy.toml: every figure optional, each dated and sourced."""

    price_kwh: float | None = key(number(), help="USD per kWh the site pays")
    price_date: str = key(ENERGY_DATE, "2000-01", help="when the price held")
    price_source: str = key(WORDS, "", help="where the price comes from")
    carbon_g_kwh: float | None = key(number(), help="grid carbon intensity, gCO2e per kWh")
    carbon_date: str = key(ENERGY_DATE, "2000-01", help="when the intensity held")
    carbon_source: str = key(WORDS, "", help="where the intensity comes from")
    notes: Any = key(raw("text"), help="free text")

    RULES: ClassVar = (
        ("price_source", lambda v: v["price_kwh"] is not None and not v["price_source"],
         "{where}: price_kwh needs price_date and price_source"),
        ("carbon_source", lambda v: v["carbon_g_kwh"] is not None and not v["carbon_source"],
         "{where}: carbon_g_kwh needs carbon_date and carbon_source"),
    )


ENERGY_KEYS = tuple(f.name for f in fields(EnergyKeys))


def build_energy(name: str, t: dict[str, Any], regions: dict[str, str]) -> Energy:
    """One ``[energy."PROVIDER/REGION"]`` table of a market region, read as :class:`EnergyKeys` declares it."""
    where = f"energy {name}"
    check_keys(t, ENERGY_KEYS, where)
    if name not in regions:
        raise InputError(f"{where}: unknown region {name} (known: {', '.join(sorted(regions))})")
    for value, date in (("price_kwh", "price_date"), ("carbon_g_kwh", "carbon_date")):
        if value in t and date not in t:
            raise InputError(f"{where}: {value} needs {date} and its source")
    k: EnergyKeys = read_entry(EnergyKeys, t, where)
    return Energy(price_kwh=k.price_kwh, price_date=k.price_date if k.price_kwh is not None else "",
                  price_source=k.price_source, carbon_g_kwh=k.carbon_g_kwh,
                  carbon_date=k.carbon_date if k.carbon_g_kwh is not None else "", carbon_source=k.carbon_source)


DEFAULT_KEYS = tuple(f.name for f in fields(DefaultKeys))
STORAGE_KEYS = tuple(f.name for f in fields(StoragePriceKeys))
REGION_KEYS = tuple(f.name for f in fields(RegionKeys)) + STORAGE_KEYS
POWER_KEYS = tuple(f.name for f in fields(PowerKeys))


def _read(path: Path) -> dict[str, Any]:
    return builtin_toml(path, read_text_capped(path, "catalog file"), lambda text: loads_toml(text, str(path)))


def load_market(extra_dirs: Sequence[str | PathLike[str]] = (), accelerators: set[str] | None = None) -> Market:
    """The built-in market, extended/overridden by each directory's ``offers.toml`` in order."""
    regions: dict[str, dict[str, Any]] = {}
    offers: dict[str, dict[str, Any]] = {}
    defaults: dict[str, Any] = {}
    power: dict[str, dict[str, Any]] = {}
    energy: dict[str, dict[str, Any]] = {}
    for p in [BUILTIN.parent / ENERGY_FILE] + [Path(d) / ENERGY_FILE for d in extra_dirs]:
        if p.exists():
            data = _read(p)
            check_keys(data, ("energy",), str(p))
            energy.update(data.get("energy", {}))
    as_of = ""
    origins: dict[str, str] = {}  # offer name -> the user catalog file that set it last ("": the shipped one)
    for p in [BUILTIN] + [Path(d) / FILE for d in extra_dirs]:
        if not p.exists():
            continue
        data = _read(p)
        check_keys(data, ("as_of", "defaults", "region", "offer", "power"), str(p))
        as_of = data.get("as_of", as_of)
        power.update(data.get("power", {}))
        defaults.update(data.get("defaults", {}))
        regions.update(data.get("region", {}))
        offers.update(data.get("offer", {}))
        origins.update(dict.fromkeys(data.get("offer", {}), "" if p == BUILTIN else str(p)))
    check_keys(defaults, DEFAULT_KEYS, "market defaults")
    date = check_date(as_of, "market as_of")
    d: DefaultKeys = read_entry(DefaultKeys, defaults, "market defaults")
    m = Market(as_of=date, preempt_per_card_hour=d.preempt_per_card_hour, preempt_source=d.preempt_source,
               reacquire_s=d.reacquire, reacquire_source=d.reacquire_source, default_pue=(d.pue, d.pue_source))
    for name, t in regions.items():
        check_keys(t, REGION_KEYS, f"region {name}")
        r: RegionKeys = read_entry(RegionKeys, t, f"region {name}")
        m.regions[name] = r.source
        if r.pue is not None:
            m.pue[name] = (r.pue, r.pue_source)
        if any(k in t for k in STORAGE_KEYS):
            m.storage[name] = build_storage(t, f"region {name}")
    for acc, t in power.items():
        where = f"power {acc}"
        check_keys(t, POWER_KEYS, where)
        if accelerators is not None and acc not in accelerators:
            raise InputError(f"{where}: unknown accelerator {acc!r} (tpopt catalog accelerators)")
        pw: PowerKeys = read_entry(PowerKeys, t, where)
        m.power[acc] = Power(board_w=pw.board_w, training_w=pw.training_w, host_overhead_w=pw.host_overhead_w,
                             source=pw.source)
    for name, t in energy.items():
        m.energy[name] = build_energy(name, t, m.regions)
    for name, t in offers.items():
        m.offers[name] = replace(build_offer(name, t, m, accelerators), origin=origins.get(name, ""))
    m.offers = unique_ids(m.offers)
    return m


def grid_carbon(market: Market, region: str | None) -> tuple[float, str, float, str]:
    """(gCO2e per kWh, its source, the region's PUE, the PUE's source) of an energy.toml region with a carbon
    figure, for ``sweep --pareto carbon --grid REGION``; one InputError line otherwise."""
    known = sorted(k for k, e in market.energy.items() if e.carbon_g_kwh is not None)
    e = market.energy.get(region or "")
    if e is None or e.carbon_g_kwh is None:
        raise InputError(f"--pareto carbon needs --grid PROVIDER/REGION with a carbon figure in energy.toml "
                         f"(got {region!r}; known: {', '.join(known)})")
    pue, pue_source = market.pue.get(str(region), market.default_pue)
    return e.carbon_g_kwh, f"dated {e.carbon_date}: {e.carbon_source}", pue, pue_source


LIST_REGION = "list/catalog"
LIST_AVAILABLE = 1024


def list_price_offers(market: Market, prices: dict[str, tuple[float, str, str, int]]) -> dict[str, Offer]:
    """An on-demand offer at the catalog's indicative price (accelerators.toml ``price_card_hour``) for every
    accelerator of ``prices`` (name -> price, price_date, its source, cards per host) that has no offer in
    ``market``: ``--hw all`` then means every accelerator with an offer or a catalog price. Each is flagged
    illustrative (a list price, not a quote), at region ``list/catalog``, with LIST_AVAILABLE cards
    (assumption: illustrative)."""
    have = {o.accelerator for o in market.offers.values()}
    market.regions.setdefault(LIST_REGION, "accelerators.toml: the catalog's indicative list prices (no site)")
    out: dict[str, Offer] = {}
    for acc, (price, date, source, cards) in prices.items():
        if acc in have:
            continue
        t = {"provider": "list", "region": "catalog", "accelerator": acc, "cards_per_host": cards,
             "market": "on-demand", "price_card_hour": price, "available": LIST_AVAILABLE, "date": date,
             "illustrative": True,
             "source": f"assumption: illustrative: the catalog's list price (accelerators.toml: {source}); "
                       f"available: assumption: illustrative"}
        out[f"list-{acc}"] = build_offer(f"list-{acc}", t, market, None)
    return out


# ---------------------------------------------------------------------------------------------
# SkyPilot catalog (vms.csv)


SKYPILOT_NAMES: dict[str, tuple[str, ...]] = {
    "H100": ("h100-sxm", "h100-96gb-hbm2e"), "H100-MEGA": ("h100-sxm",), "H100-NVL": ("h100-nvl",),
    "H200": ("h200",), "H200-NVL": ("h200-nvl",), "H20": ("h20",), "H800": ("h800",),
    "A100": ("a100-40gb-sxm", "a100-80gb-sxm"), "A100-80GB": ("a100-80gb-sxm",), "A800": ("a800-80gb-sxm",),
    "B200": ("b200",), "B300": ("b300",), "GB200": ("gb200-nvl72",), "GB300": ("gb300-nvl72",),
    "L40S": ("l40s",), "RTX4090": ("rtx4090",), "RTX5090": ("rtx5090",),
    "MI250X": ("mi250x",), "MI300X": ("mi300x",), "MI325X": ("mi325x",), "MI355X": ("mi355x",), "Gaudi3": ("gaudi3",),
}
"""SkyPilot's AcceleratorName -> catalog accelerators, the first the default; a name that covers two parts
(``A100``: 40 GB or 80 GB; ``H100``: 80 GB or 96 GB) is told apart by the GpuInfo memory per GPU. An
instance type that says ``pcie`` (Lambda's ``gpu_1x_h100_pcie``) takes the PCIe part of the same memory."""

PCIE_PARTS = {"h100-sxm": "h100-pcie", "a100-40gb-sxm": "a100-40gb-pcie", "a100-80gb-sxm": "a100-80gb-pcie"}
ZONE_REDUCTIONS = ("min", "median")
_GPU_MIB = re.compile(r"[\'\"]SizeInMiB[\'\"]\s*:\s*([0-9.]+)")
MIB = 2**20


def gpu_memory_bytes(gpu_info: str) -> float | None:
    """Bytes per GPU in a SkyPilot ``GpuInfo`` (a Python-literal dict: ``{'Gpus': [{'Name': 'H100', ...,
    'MemoryInfo': {'SizeInMiB': 81920}}], ...}``); None when it states none (a bare name, an empty field)."""
    m = _GPU_MIB.search(gpu_info or "")
    return float(m.group(1)) * MIB if m else None


def skypilot_accelerator(name: str, instance: str, gpu_info: str, names: dict[str, str],
                         memory: dict[str, float]) -> str | None:
    """The catalog accelerator of a SkyPilot row: ``names`` (``--map``) first, then :data:`SKYPILOT_NAMES`
    (the candidate whose nominal memory is nearest the GpuInfo memory, within 15 %; the first without one),
    then the lower-cased name if the catalog knows it; None: not a catalog accelerator."""
    if name in names:
        return names[name]
    candidates = [c for c in SKYPILOT_NAMES.get(name, ()) if c in memory]
    if not candidates:
        return name.lower() if name.lower() in memory else None
    pick = candidates[0]
    per_gpu = gpu_memory_bytes(gpu_info)
    if per_gpu is not None:
        near = min(candidates, key=lambda c: abs(memory[c] - per_gpu))
        if abs(memory[near] - per_gpu) <= 0.15 * memory[near]:
            pick = near
    pcie = PCIE_PARTS.get(pick)
    return pcie if pcie in memory and "pcie" in instance.lower() else pick


@dataclass
class SkyPilotImport:
    """The offers of a SkyPilot catalog and what was left out: CPU rows (no accelerator), rows of accelerators
    the catalog does not know (name -> rows), rows with neither price."""

    offers: dict[str, Offer]
    cpu_rows: int = 0
    unknown: dict[str, int] = field(default_factory=dict)
    unpriced: int = 0
    zone_price: str = "min"

    def skipped_line(self) -> str:
        """One line naming what the import skipped (empty when nothing was)."""
        parts = []
        if self.cpu_rows:
            parts.append(f"{self.cpu_rows} CPU row{'s' * (self.cpu_rows != 1)} (no accelerator)")
        if self.unknown:
            n = sum(self.unknown.values())
            names = ", ".join(f"{k} ({v})" for k, v in sorted(self.unknown.items()))
            parts.append(f"{n} row{'s' * (n != 1)} of accelerators the catalog does not know: {names}")
        if self.unpriced:
            parts.append(f"{self.unpriced} row{'s' * (self.unpriced != 1)} with neither Price nor SpotPrice")
        return f"skipped {'; '.join(parts)}" if parts else ""


def _reduce(prices: list[float], how: str) -> float:
    """The zones' prices of one instance in one region as one: their lowest (``min``, as SkyPilot's
    ``get_hourly_cost`` takes it) or their median (``median``)."""
    if how == "min":
        return min(prices)
    s, n = sorted(prices), len(prices)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def read_skypilot(path: str | Path, provider: str, date: str, names: dict[str, str], market: Market,
                  available: int, memory: dict[str, float] | None = None, zone_price: str = "min",
                  accelerators: set[str] | None = None) -> SkyPilotImport:
    """Offers of a SkyPilot catalog CSV (``vms.csv``; columns InstanceType, AcceleratorName, AcceleratorCount,
    vCPUs, MemoryGiB, GpuInfo, Price, SpotPrice, Region, AvailabilityZone; prices per instance-hour).

    Each row's accelerator is :func:`skypilot_accelerator`'s (``memory``: the catalog's nominal bytes per
    card); with ``memory`` None, ``names`` alone or the name lower-cased, kept when in ``accelerators``.
    Per (instance, region, market) the zones' prices are reduced by ``zone_price`` (:func:`_reduce`); per
    (region, accelerator, market) the instance with the lowest price per card-hour (price /
    AcceleratorCount) gives the offer. A row without SpotPrice gives no spot offer (and without Price no
    on-demand one); every region met is added to ``market.regions``."""
    if zone_price not in ZONE_REDUCTIONS:
        raise InputError(f"--zone-price {zone_price!r} unknown (use one of: {', '.join(ZONE_REDUCTIONS)})")
    text = read_text_capped(path, "SkyPilot catalog")
    rows = csv_rows(text.splitlines(), str(path))
    if not rows or any(c not in rows[0] for c in SKYPILOT_COLUMNS):
        raise InputError(f"{path}: a SkyPilot vms.csv needs the columns {', '.join(SKYPILOT_COLUMNS)}")
    check_date(date, "--date")
    out = SkyPilotImport(offers={}, zone_price=zone_price)
    zones: dict[tuple[str, str, str, str], list[float]] = {}
    count: dict[tuple[str, str, str, str], int] = {}
    for i, r in enumerate(rows, start=2):
        name = (r["AcceleratorName"] or "").strip()
        if not name:
            out.cpu_rows += 1
            continue
        if memory is None:
            acc: str | None = names.get(name, name.lower())
            acc = acc if accelerators is None or acc in accelerators else None
        else:
            acc = skypilot_accelerator(name, r["InstanceType"] or "", r.get("GpuInfo") or "", names, memory)
        if acc is None:
            out.unknown[name] = out.unknown.get(name, 0) + 1
            continue
        where = f"{path}:{i}"
        n = parse_int(r["AcceleratorCount"] or 0, f"{where} AcceleratorCount", minimum=1)
        if not r["Price"] and not r["SpotPrice"]:
            out.unpriced += 1
            continue
        for kind, col in (("on-demand", "Price"), (SPOT, "SpotPrice")):
            if not r[col]:
                continue
            k = (r["Region"], acc, kind, r["InstanceType"])
            zones.setdefault(k, []).append(parse_number(r[col], f"{where} {col}") / n)
            count[k] = n
    best: dict[tuple[str, str, str], tuple[float, int]] = {}
    for (region, acc, kind, inst), prices in zones.items():
        price = _reduce(prices, zone_price)
        k3 = (region, acc, kind)
        if k3 not in best or price < best[k3][0]:
            best[k3] = (price, count[(region, acc, kind, inst)])
    known = set(memory) if memory is not None else accelerators
    for (region, acc, kind), (price, cards) in sorted(best.items()):
        market.regions.setdefault(f"{provider}/{region}", f"SkyPilot catalog {Path(path).name}")
        t = {"provider": provider, "region": region, "accelerator": acc, "cards_per_host": cards,
             "market": kind, "price_card_hour": price, "available": available, "date": date,
             "source": f"SkyPilot catalog {Path(path).name} ({provider}, price per instance-hour / cards, "
                       f"zones' {'lowest' if zone_price == 'min' else 'median'})"}
        o = build_offer(f"{provider}-{region}-{acc}-{kind}", t, market, known)
        out.offers[o.id] = o
    return out


def from_skypilot(path: str | Path, provider: str, date: str, names: dict[str, str], market: Market,
                  available: int, accelerators: set[str] | None = None) -> dict[str, Offer]:
    """Offers of a SkyPilot ``vms.csv`` under ``names`` alone (no default names): a row's accelerator is
    ``names[AcceleratorName]`` or the name lower-cased; rows whose accelerator is not in ``accelerators``
    (None: any) are skipped. :func:`read_skypilot` maps SkyPilot's own names."""
    return read_skypilot(path, provider, date, names, market, available, None, accelerators=accelerators).offers


def offer_toml(name: str, o: Offer) -> str:
    """One offer as the ``[offer.NAME]`` table ``load_market`` reads back."""
    lines = [f'[offer."{name}"]', f'provider = "{o.provider}"', f'region = "{o.region}"',
             f'accelerator = "{o.accelerator}"', f"cards_per_host = {o.cards_per_host}", f'market = "{o.market}"',
             f"price_card_hour = {o.price_card_hour!r}", f"available = {o.available}", f'date = "{o.date}"',
             f"source = {_q(o.source)}"]
    if o.market == RESERVED:
        lines.append(f'term = "{o.term_s / HOUR:g}h"')
    if o.illustrative:
        lines.append("illustrative = true")
    return "\n".join(lines) + "\n"


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def with_regions(market: Market, offers: dict[str, Offer]) -> Market:
    return replace(market, offers={**market.offers, **offers})


__all__ = ["Market", "load_market", "parse_power", "build_offer", "from_skypilot", "offer_toml", "check_date",
           "with_regions", "SKYPILOT_COLUMNS", "SKYPILOT_NAMES", "SkyPilotImport", "read_skypilot",
           "skypilot_accelerator", "gpu_memory_bytes", "ZONE_REDUCTIONS", "list_price_offers", "LIST_REGION",
           "grid_carbon"]
