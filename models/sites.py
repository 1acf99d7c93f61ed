"""Multi-datacenter training: the pure relations of a job whose data-parallel replicas span sites.

One site is the single-site plan as today (its tensor / pipeline layout, its intra-site data parallelism).
Across the S sites a job uses, the replicas either

* **synchronise every step** (hierarchical all-reduce: within each site as today, then a ring all-reduce of
  the gradient over the WAN between the sites), or
* **synchronise every H inner steps** (DiLoCo, Douillard et al. 2023; "Communication-Efficient Language Model
  Training Scales Reliably and Robustly: Scaling Laws for DiLoCo", Charles et al. 2025): each site trains on its
  own for H steps, then the sites all-reduce the parameters' change (the outer gradient) over the WAN;
  optionally **streamed** in F fragments ("Streaming DiLoCo with overlapping communication: Towards a
  Distributed Free Lunch", Douillard et al. 2025): each fragment is synchronised on its own, and its
  all-reduce overlaps the next tau inner steps.

Units: bytes, seconds, bits per second (a WAN bandwidth), USD per terabyte (10^12 bytes) of egress. The WAN
all-reduce is the ring of the scaling-law paper's Appendix A: time = 2 (S - 1) / S x bytes / bandwidth +
latency terms, and is **not overlapped** with compute in synchronous mode (the gradient is complete at the end of
the backward pass; stated in every report as an assumption: the conservative bound).
"""

from __future__ import annotations

from dataclasses import dataclass

BITS_PER_BYTE = 8.0
BYTES_PER_TB = 1e12
SYNC = "sync"
DILOCO = "diloco"
MODES = (SYNC, DILOCO)


@dataclass(frozen=True)
class Site:
    """A datacenter: a name, its most cards, its power cap (W, at the facility: PUE included; None: no cap)
    and its PUE (facility over IT power); ``accelerator``: the card type it holds (None: the scenario's
    ``hardware.accelerator``); ``card_hour``: its price in USD per card-hour, all in (None: the type's price in
    the scenario / catalog)."""

    name: str
    max_cards: int
    power_cap_w: float | None = None
    pue: float = 1.2
    accelerator: str | None = None
    card_hour: float | None = None


@dataclass(frozen=True)
class WanLink:
    """One WAN link between two sites: bandwidth (bit/s, each direction), one-way latency (s) and the egress
    price of bytes leaving a site over it (USD per TB)."""

    bandwidth_bps: float
    latency_s: float
    egress_usd_tb: float = 0.0


@dataclass(frozen=True)
class SitesInput:
    """The ``[[sites]]`` and ``[wan]`` tables: the sites, the default WAN link, per-pair links (a frozenset of
    two site names -> link), the modes and the DiLoCo grids, and the DiLoCo inputs that move a plan:
    ``token_penalty`` (extra tokens to reach the same loss, a fraction: 0.02 = 2 % more tokens) with its
    ``token_penalty_source``; ``grad_bytes`` / ``outer_bytes`` per parameter on the WAN (synchronous gradient,
    DiLoCo outer gradient); ``overlap_steps`` (tau: inner steps a streamed fragment's all-reduce overlaps)."""

    sites: tuple[Site, ...]
    wan: WanLink
    links: tuple[tuple[frozenset[str], WanLink], ...] = ()
    modes: tuple[str, ...] = MODES
    inner_steps: tuple[int, ...] = (100, 500)
    fragments: tuple[int, ...] = (1,)
    overlap_steps: int = 1
    token_penalty: float = 0.0
    token_penalty_source: str = ""
    grad_bytes: float = 2.0
    outer_bytes: float = 2.0

    def link(self, a: str, b: str) -> WanLink:
        """The link between sites ``a`` and ``b`` (the default ``[wan]`` link where no pair is given)."""
        pair = frozenset((a, b))
        return next((k for p, k in self.links if p == pair), self.wan)


def ring_allreduce_wan_s(nbytes: float, sites: int, bandwidth_bps: float, latency_s: float) -> float:
    """Seconds of a ring all-reduce of ``nbytes`` over ``sites`` sites: ``2 (S - 1) / S x nbytes x 8 /
    bandwidth + 2 (S - 1) x latency`` (reduce-scatter then all-gather, S - 1 hops each; the bandwidth is the
    ring's slowest link, the latency its slowest hop). Zero for one site. As Appendix A of the DiLoCo
    scaling-law paper (2N / W x (1 - 1 / R) + epsilon, with W in bytes per second)."""
    if sites <= 1:
        return 0.0
    return 2.0 * (sites - 1) / sites * nbytes * BITS_PER_BYTE / bandwidth_bps + 2.0 * (sites - 1) * latency_s


def wan_bytes_per_sync(nbytes: float, sites: int) -> float:
    """Bytes crossing sites in one ring all-reduce of ``nbytes``: each of the S sites sends
    ``2 (S - 1) / S x nbytes`` to its neighbour, ``2 (S - 1) x nbytes`` in all (each ring link carries
    ``2 (S - 1) / S x nbytes``)."""
    return 2.0 * (sites - 1) * nbytes if sites > 1 else 0.0


def sync_exposed_s(grad_bytes: float, sites: int, bandwidth_bps: float, latency_s: float) -> float:
    """Exposed WAN seconds per step, synchronous hierarchical all-reduce: the whole WAN ring all-reduce of the
    gradient (``grad_bytes`` = parameters x bytes per gradient element), not overlapped with compute."""
    return ring_allreduce_wan_s(grad_bytes, sites, bandwidth_bps, latency_s)


def diloco_exposed_s(outer_bytes: float, sites: int, bandwidth_bps: float, latency_s: float, inner_steps: int,
                     fragments: int, overlap_steps: int, compute_step_s: float) -> float:
    """Exposed WAN seconds per inner step, DiLoCo: every H inner steps each of the F fragments (``outer_bytes``
    / F each) is all-reduced once; each fragment's all-reduce overlaps the next tau inner steps (Streaming
    DiLoCo; tau = 0: blocking, plain DiLoCo). Per step:
    ``F / H x max(0, ring(outer_bytes / F) - tau x compute_step_s)``. F = 1, tau = 0:
    ``ring(outer_bytes) / H``, the scaling-law paper's ``(2N / W (1 - 1/R) + epsilon) x T / H`` per step."""
    one = ring_allreduce_wan_s(outer_bytes / fragments, sites, bandwidth_bps, latency_s)
    return fragments / inner_steps * max(0.0, one - overlap_steps * compute_step_s)


def diloco_wan_bytes_per_step(outer_bytes: float, sites: int, inner_steps: int) -> float:
    """Bytes crossing sites per inner step, DiLoCo: ``2 (S - 1) x outer_bytes / H`` (fragments split the bytes,
    not their sum)."""
    return wan_bytes_per_sync(outer_bytes, sites) / inner_steps


def utilisation(compute_step_s: float, exposed_s: float) -> float:
    """Compute utilisation: ``compute / (compute + exposed communication)`` per step."""
    return compute_step_s / (compute_step_s + exposed_s)


def egress_usd(nbytes: float, usd_per_tb: float) -> float:
    """Egress cost: bytes crossing sites x USD per TB / 10^12."""
    return nbytes * usd_per_tb / BYTES_PER_TB


def token_factor(mode: str, token_penalty: float) -> float:
    """Tokens (hence steps) relative to synchronous training at the same loss: ``1 + penalty`` for DiLoCo, 1
    for synchronous training."""
    return 1.0 + token_penalty if mode == DILOCO else 1.0


def replicas_under_power(per_replica_w: float, cap_w: float | None, max_cards: int, replica_cards: int) -> int:
    """Most whole DP replicas a site holds: ``min(floor(max_cards / replica cards), floor(cap / replica W))``
    (replica W at the facility, PUE included; a replica is whole hosts, so the power adds up per replica)."""
    by_cards = max_cards // replica_cards
    if cap_w is None:
        return by_cards
    return min(by_cards, int(cap_w // per_replica_w))


def mixed(si: SitesInput) -> bool:
    """True when a site names its own card type or price: the decision of :mod:`tpopt.optimizer.sites_mixed`
    (per-site layouts, types and prices) replaces the one-replica-layout decision."""
    return any(s.accelerator is not None or s.card_hour is not None for s in si.sites)


def cheapest_fill(count: int, caps: tuple[int, ...], unit_cost: tuple[float, ...]) -> tuple[int, ...] | None:
    """``count`` replicas over sites with these caps, every site at least one, the rest to the lowest
    ``unit_cost`` first (ties: the earlier site): the least ``sum_s n_s x unit_cost_s`` subject to
    ``sum_s n_s = count`` and ``1 <= n_s <= cap_s`` (a linear cost over a box with one sum: the greedy fill is
    optimal). None when the caps cannot hold ``count`` or a site holds none."""
    if min(caps) < 1 or sum(caps) < count or count < len(caps):
        return None
    out = [1] * len(caps)
    left = count - len(caps)
    for i in sorted(range(len(caps)), key=lambda i: (unit_cost[i], i)):
        add = min(caps[i] - 1, left)
        out[i] += add
        left -= add
    return tuple(out)


def crossover_inverse_bandwidths(base_sync: float, slope_sync: float, base_dl: float, slope_dl: float,
                                 offset_dl: float) -> tuple[float, ...]:
    """Where synchronous and DiLoCo costs are equal, as values of x = 1 / bandwidth (s/bit), x > 0.

    Synchronous: ``cost_s(x) = base_sync + slope_sync x`` (its exposed WAN time is linear in x). DiLoCo:
    ``cost_d(x) = base_dl + max(0, slope_dl x + offset_dl)`` (the streamed overlap hides the WAN time below
    ``x0 = -offset_dl / slope_dl``). The difference is linear on each side of x0: one root per side at most."""
    roots: list[float] = []
    x0 = -offset_dl / slope_dl if slope_dl > 0 and offset_dl < 0 else 0.0
    # x <= x0: DiLoCo's WAN time hidden
    if slope_sync > 0:
        r = (base_dl - base_sync) / slope_sync
        if 0 < r <= x0:
            roots.append(r)
    # x >= x0
    d = slope_sync - slope_dl
    if d != 0:
        r = (base_dl + offset_dl - base_sync) / d
        if r > 0 and r >= x0 and (not roots or r != roots[-1]):
            roots.append(r)
    return tuple(roots)


__all__ = ["Site", "WanLink", "SitesInput", "SYNC", "DILOCO", "MODES", "BITS_PER_BYTE", "BYTES_PER_TB",
           "ring_allreduce_wan_s", "wan_bytes_per_sync", "sync_exposed_s", "diloco_exposed_s",
           "diloco_wan_bytes_per_step", "utilisation", "egress_usd", "token_factor", "replicas_under_power",
           "crossover_inverse_bandwidths", "mixed", "cheapest_fill"]
