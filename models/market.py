"""Market offers: where a card is rented, on what terms, and what a run on it is billed.

An :class:`Offer` is one (provider, region, accelerator, market) row of the market catalog
(``catalogs/offers.toml``): a price per card-hour, how it is billed, how many cards are available, when
the price was read and from where. Its bill for a run of ``n`` cards finishing in ``f`` seconds is a closed
form that grows with ``f`` (:func:`billed_cost`):

- on-demand and spot: ``n x p x max(m, g ceil(f / g)) / 3600`` (``g`` billing granularity in s, ``m``
  minimum commitment in s; per-second billing, ``g <= 1 s``, bills ``f`` itself);
- reserved for a term ``T``: ``n x p x T ceil(f / T) / 3600`` (the term is paid whole, used or not).

Checkpoints are stored in the offer's region and may leave it (:func:`checkpoint_cost`): ``K`` kept copies
of ``G`` GB for the run's ``f`` seconds at ``s`` USD per GB-month, ``K G s f / month`` (month = 365.25 / 12
days, billed pro rata), plus ``E`` copies sent out of the region at ``e`` USD per GB, ``E G e``. Both are
part of ``budget.cost`` and grow with ``f`` at a fixed card count.

A spot offer is preempted at ``rho`` per card-hour; each preemption costs the redo since the last
checkpoint and a reacquisition delay ``d`` on top of the restore (:func:`preemption_rate`,
:mod:`tpopt.models.terms` folds both into the long-run overhead).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from tpopt.models.spot_policy import DEFAULT_AVAILABILITY, DEFAULT_AVAILABILITY_SOURCE
from tpopt.models.units import DAY, HOUR

ON_DEMAND = "on-demand"
SPOT = "spot"
RESERVED = "reserved"
MARKETS = (ON_DEMAND, SPOT, RESERVED)
STALE_MONTHS = 6
"""A price read more than this many months before the market's date is flagged as old in every report."""
MONTH_S = 365.25 / 12 * DAY
"""The storage month, s (30.4375 d): GB-month prices are billed pro rata over it."""
GB = 1e9
"""Bytes per GB of the storage and egress prices (decimal; a provider billing per 2^30 bytes bills 7 % less)."""


@dataclass(frozen=True)
class Storage:
    """A region's object storage: USD per GB-month kept, USD per GB leaving the region, when and where read."""

    gb_month: float
    egress_gb: float
    date: str
    source: str


@dataclass(frozen=True)
class Power:
    """Power of a card type in watts: board power, the average drawn in training, the host's overhead."""

    board_w: float
    training_w: float
    host_overhead_w: float
    source: str = ""


@dataclass(frozen=True)
class Energy:
    """A region's electricity: USD per kWh and grid gCO2e per kWh (None: no published figure), each dated
    and sourced (the energy catalog, catalogs/energy.toml)."""

    price_kwh: float | None = None
    price_date: str = ""
    price_source: str = ""
    carbon_g_kwh: float | None = None
    carbon_date: str = ""
    carbon_source: str = ""


@dataclass(frozen=True)
class Offer:
    """One market offer; prices in USD per card-hour, durations in seconds."""

    provider: str
    region: str
    accelerator: str
    market: str  # one of MARKETS
    price_card_hour: float
    available: int  # cards that can be rented under this offer
    date: str  # YYYY-MM or YYYY-MM-DD: when the price was read
    source: str
    cards_per_host: int = 8
    term_s: float = 0.0  # reserved: the term paid whole
    billing_s: float = 1.0  # billing granularity
    min_commit_s: float = 0.0  # the shortest time billed
    illustrative: bool = False  # "assumption: illustrative": no published price behind it
    pue: float = 1.2  # the site's power usage effectiveness (the region's, else the catalog default)
    pue_source: str = ""
    power: Power | None = None  # the card's power (the market catalog's [power] table; None: not known)
    storage: Storage | None = None  # the region's checkpoint storage and egress prices (None: not priced)
    parts: tuple[tuple[Offer, float], ...] = ()  # a mix: (offer, share of the cards) of one card type and site
    preempt_per_card_hour: float = 0.0  # spot: preemptions per card-hour
    preempt_source: str = ""
    reacquire_s: float = 0.0  # spot: time to get the cards back after a preemption
    tag: str = ""  # the catalog name, set only when another offer has the same provider, region, card and market
    energy: Energy | None = None  # the region's energy price and carbon intensity (None: not in the catalog)
    # spot: P(capacity obtainable on a day) and the preemption rate's coefficient of variation, with their
    # sources (None: the stated defaults of tpopt.models.spot_policy)
    availability: float | None = None
    availability_source: str = ""
    preempt_rate_cv: float | None = None
    preempt_rate_cv_source: str = ""
    origin: str = field(default="", compare=False, repr=False)  # the user catalog file the offer comes from
    # (--catalog DIR's offers.toml, or accelerators.toml for a list-price offer); "": the shipped catalog

    @property
    def id(self) -> str:
        """``provider/region/accelerator/market`` (reserved: ``reserved-<term>``, in months from 28 days), then
        ``#NAME`` (the catalog name) when several offers share the rest (:func:`unique_ids`)."""
        return f"{self.provider}/{self.region}/{self.accelerator}/{self.market_name}" + self.suffix

    @property
    def suffix(self) -> str:
        """``#NAME`` for an offer whose id would be another's (:attr:`tag`), else ""."""
        return f"#{self.tag}" if self.tag else ""

    @property
    def market_name(self) -> str:
        """``on-demand``, ``spot`` or ``reserved-12m`` / ``reserved-14d``; a mix ``on-demand+25%spot``."""
        if self.parts:
            return "+".join(f"{share:.0%}{o.market_name}{o.suffix}" for o, share in self.parts)
        if self.market != RESERVED:
            return self.market
        days = self.term_s / 86400
        return f"{RESERVED}-{round(days / 30.4375)}m" if days >= 28 else f"{RESERVED}-{days:g}d"

    @property
    def linear(self) -> bool:
        """Billed exactly as price x cards x seconds (per-second billing, no commitment, no term)."""
        if self.parts:
            return all(o.linear for o, _ in self.parts)
        return self.market != RESERVED and self.billing_s <= 1.0 and self.min_commit_s <= 0.0

    @property
    def spot_share(self) -> float:
        """The share of the plan's cards rented on the spot market."""
        if self.parts:
            return sum(share for o, share in self.parts if o.market == SPOT)
        return 1.0 if self.market == SPOT else 0.0

    def cards_fit(self, cards: int) -> bool:
        """A mix splits the cards into whole hosts of each part (a single offer: always)."""
        return all(float(share * cards).is_integer() and int(share * cards) % o.cards_per_host == 0
                   for o, share in self.parts)


@dataclass(frozen=True)
class MarketOptions:
    """The offers a scenario chooses from (empty: no market, the accelerators' own prices), the date
    their prices are judged against (``as_of``, YYYY-MM[-DD]), and the spot terms of the offer a plan runs
    on (what :mod:`tpopt.models.terms` reads)."""

    offers: tuple[Offer, ...] = ()
    as_of: str = ""
    # the offer a plan runs on (set per offer by the market solve; 0 off the spot market):
    preempt_per_card_s: float = 0.0  # spot preemptions per card-second
    reacquire_s: float = 0.0  # after a preemption: time to get the cards back, on top of the restore
    spot_availability: float = 1.0  # P(spot capacity obtainable on a day) (spot_availability; 1: always)
    site_power_w: float | None = None  # the site power cap (power.site, W); None: no cap
    checkpoint_copies: int = 2  # checkpoints kept in the region's storage (the latest and the one before it)
    checkpoint_egress: int = 0  # checkpoints copied out of the region over the run (0: they stay)


def checkpoint_cost(storage: Storage | None, gb: float, copies: int, egress: int,
                    finish_s: float) -> tuple[float, float]:
    """(storage USD, egress USD) of a run's checkpoints: ``copies x gb x gb_month x finish / MONTH_S`` and
    ``egress x gb x egress_gb``; (0, 0) when the region's storage is not priced."""
    if storage is None:
        return 0.0, 0.0
    return copies * gb * storage.gb_month * finish_s / MONTH_S, egress * gb * storage.egress_gb


def site_power_w(power: Power, pue: float, cards: int, cards_per_host: int) -> float:
    """Site power in W: PUE x (cards x training power + hosts x host overhead), hosts = ceil(cards / host)."""
    return pue * (cards * power.training_w + math.ceil(cards / cards_per_host) * power.host_overhead_w)


def cards_under_power(power: Power, pue: float, cap_w: float, cards_per_host: int) -> int:
    """The most cards whose site power fits ``cap_w`` (site power grows with the cards)."""
    per_host = pue * (cards_per_host * power.training_w + power.host_overhead_w)
    hosts = int(cap_w // per_host)
    n = hosts * cards_per_host
    while site_power_w(power, pue, n + 1, cards_per_host) <= cap_w:  # a partial host's cards
        n += 1
    return n


def energy_mwh(power: Power, pue: float, cards: int, cards_per_host: int, seconds: float) -> float:
    """Energy in MWh at the site: site power x time / 3.6e9 (J per MWh)."""
    return site_power_w(power, pue, cards, cards_per_host) * seconds / 3.6e9


def energy_cost_usd(mwh: float, price_kwh: float) -> float:
    """Energy cost in USD: MWh x 1,000 kWh per MWh x USD per kWh."""
    return mwh * 1e3 * price_kwh


def tonnes_co2e(mwh: float, carbon_g_kwh: float) -> float:
    """Emissions in tCO2e: MWh x 1,000 kWh per MWh x gCO2e per kWh / 1e6 g per tonne."""
    return mwh * 1e3 * carbon_g_kwh / 1e6


def energy_figures(energy: Energy | None, mwh: float) -> dict[str, float | str | None]:
    """The report's energy keys for ``mwh`` at the site of ``energy``: the price and its cost, the grid
    intensity and its tCO2e, with dates and sources (None where the catalog has no figure)."""
    e = energy or Energy()
    return {"energy_price_kwh": e.price_kwh, "energy_price_date": e.price_date,
            "energy_price_source": e.price_source,
            "energy_cost": None if e.price_kwh is None else energy_cost_usd(mwh, e.price_kwh),
            "carbon_g_kwh": e.carbon_g_kwh, "carbon_date": e.carbon_date, "carbon_source": e.carbon_source,
            "tco2e": None if e.carbon_g_kwh is None else tonnes_co2e(mwh, e.carbon_g_kwh)}


def billed_seconds(offer: Offer, finish_s: float) -> float:
    """Seconds billed per card for a run of ``finish_s``: reserved ``T ceil(f / T)``; otherwise
    ``max(m, g ceil(f / g))``."""
    if offer.market == RESERVED:
        return offer.term_s * max(1, math.ceil(finish_s / offer.term_s - 1e-12))
    if offer.billing_s <= 1.0:  # per-second billing: the run's own seconds (the last second's fraction is < 1 ppm)
        return max(offer.min_commit_s, finish_s)
    g = offer.billing_s
    return max(offer.min_commit_s, g * math.ceil(finish_s / g - 1e-12))


def billed_cost(offer: Offer, cards: int, finish_s: float) -> float:
    """USD billed: cards x price per card-hour x billed seconds / 3600 (the offer prices the host's NICs);
    a mix: the sum of its parts' bills for their shares of the cards."""
    if offer.parts:
        return sum(billed_cost(o, round(share * cards), finish_s) for o, share in offer.parts)
    return cards * offer.price_card_hour * billed_seconds(offer, finish_s) / HOUR


def least_billed_cost(offer: Offer, cards: float) -> float:
    """The smallest bill ``cards`` can run up under the offer, whatever the finish (a lower bound)."""
    if offer.parts:
        return sum(least_billed_cost(o, share * cards) for o, share in offer.parts)
    least = offer.term_s if offer.market == RESERVED else max(offer.min_commit_s, min(offer.billing_s, 1.0))
    return cards * offer.price_card_hour * least / HOUR


def preemption_rate(offer: Offer) -> float:
    """Preemptions per card-second of the plan (0 unless spot; a mix: the spot share x its rate)."""
    if offer.parts:
        return sum(share * preemption_rate(o) for o, share in offer.parts)
    return offer.preempt_per_card_hour / HOUR if offer.market == SPOT else 0.0


def spot_availability(offer: Offer) -> float:
    """P(the offer's capacity is obtainable on a day): 1 off the spot market; on a spot offer its own
    ``availability``, else the stated default of :mod:`tpopt.models.spot_policy` (DEFAULT_AVAILABILITY); a mix
    with a spot share its spot part's (the job runs on all its cards: a day without the spot share's capacity
    makes no progress)."""
    if offer.parts:
        return min((spot_availability(o) for o, share in offer.parts if share > 0), default=1.0)
    if offer.market != SPOT:
        return 1.0
    return DEFAULT_AVAILABILITY if offer.availability is None else float(offer.availability)


def spot_availability_source(offer: Offer) -> str:
    """Where :func:`spot_availability` comes from: the offer's ``availability_source`` (else its source) where it
    states an availability, else the stated default's (DEFAULT_AVAILABILITY_SOURCE); a mix its spot part's
    (the least available one); "" off the spot market."""
    if offer.parts:
        spots = [o for o, share in offer.parts if share > 0 and o.market == SPOT]
        return spot_availability_source(min(spots, key=spot_availability)) if spots else ""
    if offer.market != SPOT:
        return ""
    return DEFAULT_AVAILABILITY_SOURCE if offer.availability is None else offer.availability_source or offer.source


def capacity_wait_s(run_s: float, availability: float) -> float:
    """Expected seconds without spot capacity while a run needs ``run_s`` seconds on capacity (``availability``
    a = P(capacity obtainable on a day), independent days; a = 1: none):

        E[waits] = run x (1 - a) / a

    Derivation: a day of the run needs a day with capacity; the days without capacity before it are the
    failures before the first success of Bernoulli(a) days, Geometric: P(K = k) = (1 - a)^k a, E[K] = (1 - a) / a
    (variance (1 - a) / a^2). Over run / day days of the run the waits add up, so the run takes
    run + run (1 - a) / a = run / a calendar seconds in expectation: the model of the finish-time law's
    capacity source (tpopt.models.finish SOURCES "capacity"). A day without capacity rents nothing: the bill
    (:func:`billed_cost`) is of ``run_s``, the waits are not billed."""
    return run_s * (1.0 - availability) / availability


def run_finish_s(metrics: Mapping[str, float]) -> float:
    """Seconds from the start to the end of the run on capacity of an evaluated plan (its ``metrics``): its finish
    less its expected waits without spot capacity (``capacity_wait_days``, :func:`capacity_wait_s`; 0 off the spot
    market)."""
    return (float(metrics["finish_days"]) - float(metrics.get("capacity_wait_days", 0.0))) * DAY


def capacity_finish_s(reserved_s: float, run_finish_s: float, availability: float) -> float:
    """The expected calendar finish (s) of a plan whose finish on capacity is ``run_finish_s``: the reserved
    time R as it is, the run's ``run_finish_s - R`` seconds on capacity stretched by their waits
    (:func:`capacity_wait_s`): R + (run_finish - R) / a. a = 1: the finish itself."""
    if availability >= 1.0:
        return run_finish_s
    return run_finish_s + capacity_wait_s(run_finish_s - reserved_s, availability)


def run_deadline_s(reserved_s: float, deadline_s: float, availability: float) -> float:
    """The latest finish on capacity whose expected calendar finish (:func:`capacity_finish_s`) meets
    ``deadline_s``: R + a (D - R), the inverse of R + (f - R) / a (increasing in f); a = 1: the deadline."""
    if availability >= 1.0:
        return deadline_s
    return reserved_s + availability * (deadline_s - reserved_s)


def mix(base: Offer, spot: Offer, share: float) -> Offer:
    """A base of ``base`` cards with ``share`` of the cards on ``spot`` (same card type and site): its
    price per card-hour is the blend, its preemption rate per card the share's, its cards at most what
    both parts have (available = min(base / (1 - share), spot / share))."""
    assert (base.provider, base.region, base.accelerator) == (spot.provider, spot.region, spot.accelerator)
    assert spot.market == SPOT and base.market != SPOT and 0 < share < 1
    avail = min(int(base.available / (1 - share) + 1e-9), int(spot.available / share + 1e-9))
    notes_date = min(base.date, spot.date)
    return replace(spot, price_card_hour=(1 - share) * base.price_card_hour + share * spot.price_card_hour,
                   available=avail, date=notes_date, illustrative=base.illustrative or spot.illustrative,
                   source=f"{base.source}; {spot.source}", preempt_per_card_hour=share * spot.preempt_per_card_hour,
                   parts=((base, 1 - share), (spot, share)), tag="",  # the parts' tags are in its market name
                   origin="; ".join(dict.fromkeys(o.origin for o in (base, spot) if o.origin)))


def months_between(earlier: str, later: str) -> int:
    """Whole calendar months from ``earlier`` to ``later`` (YYYY-MM[-DD]); days count when both give them."""
    y0, m0, *d0 = (int(x) for x in earlier.split("-"))
    y1, m1, *d1 = (int(x) for x in later.split("-"))
    months = (y1 - y0) * 12 + (m1 - m0)
    if d0 and d1 and d1[0] < d0[0]:
        months -= 1
    return months


def price_notes(offer: Offer, as_of: str) -> list[str]:
    """What a report must say about the offer's price: illustrative, and/or older than 6 months."""
    notes = []
    if offer.illustrative:
        notes.append("assumption: illustrative price")
    age = months_between(offer.date, as_of)
    if age > STALE_MONTHS:
        notes.append(f"price older than {STALE_MONTHS} months ({age} months at {as_of})")
    return notes


__all__ = ["Offer", "MarketOptions", "Power", "Storage", "checkpoint_cost", "MONTH_S", "GB",
            "site_power_w", "cards_under_power", "energy_mwh", "MARKETS", "Energy", "energy_cost_usd",
           "tonnes_co2e", "energy_figures",
           "ON_DEMAND", "SPOT", "RESERVED", "STALE_MONTHS", "billed_seconds", "billed_cost", "least_billed_cost",
           "preemption_rate", "months_between", "price_notes", "mix", "spot_availability", "spot_availability_source",
           "capacity_wait_s",
           "capacity_finish_s", "run_deadline_s"]


def unique_ids(offers: dict[str, Offer]) -> dict[str, Offer]:
    """The catalog's offers (by name) with unique ids: offers of the same provider, region, card and market
    (the same ``id``) each get their catalog name as a suffix (``aws/us-east-1/h100-sxm/on-demand#p5``), so a
    report or ``[market] offers`` names exactly one; an offer alone of its kind keeps its plain id."""
    count: dict[str, int] = {}
    for o in offers.values():
        count[o.id] = count.get(o.id, 0) + 1
    return {name: replace(o, tag=name) if count[o.id] > 1 else o for name, o in offers.items()}
