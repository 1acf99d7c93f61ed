"""The network as data: a list of fabric tiers, and the one function that maps a collective onto them.

A :class:`Fabric` is the tiers a card's traffic can cross, innermost first (as Calculon's system
files list their networks):

* **scale-up**: the card-to-card fabric of one domain of ``cards`` cards (NVLink, Infinity Fabric; a
  card without peer-to-peer reaches the others of its host only through its own host link, PCIe),
  ``bandwidth`` per card and direction;
* **scale-out**: the hosts' NICs, one rail per NIC (NIC i of every host on rail i); ``bandwidth`` per
  NIC and direction, shared by the host's cards; a pod of ``pod_hosts`` hosts (default: all of them);
* **spine** (only with pods): between pods, each NIC's uplink tapered by the spine's
  ``oversubscription`` (2 = 2:1: a ring or all-to-all that leaves a pod runs at half its NIC share).

The rank order nests the parallel dimensions (tp innermost, then cp, dp, pp), so a group of ``size``
ranks ``stride`` apart occupies a block of size x stride consecutive ranks, aligned to the tiers'
domains: it stays inside the innermost tier whose domain holds that span. :func:`route` is the only
place that decides which tiers a collective crosses; the collectives' formulas (``comm``, ``context``,
``moe``, ``rl``) only say how their group is laid out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import ArrayLike

from tpopt.models.numeric import FloatArray


def _f(x: ArrayLike) -> FloatArray:
    """``x`` as an array of floats."""
    return np.asarray(x, dtype=float)


@dataclass(frozen=True)
class Tier:
    """One level of the network.

    name               "scale-up", "scale-out" or "spine"
    cards              cards one domain of this tier holds (math.inf: every card of the cluster)
    bandwidth          bytes/s per direction: per card on the scale-up tier, per NIC on the tiers beyond it
    oversubscription   what traffic on this tier's links is divided by (a spine's taper; 1 = none)
    """

    name: str
    cards: float
    bandwidth: float
    oversubscription: float = 1.0


@dataclass(frozen=True)
class Fabric:
    """The tiers of one accelerator's cluster, innermost first, and the host they hang off.

    ``host_link_bw`` (bytes/s per direction) is a card's link to its host (PCIe): a direct send off the
    host leaves through it. ``p2p`` says whether cards of a host reach each other's memory directly
    (without it the scale-up tier's bandwidth is the host link, and every byte crosses it).
    """

    tiers: tuple[Tier, ...]
    cards_per_host: int
    host_link_bw: float
    p2p: bool = True

    @property
    def scale_up(self) -> Tier:
        return self.tiers[0]

    def derated(self, scale_up: float, scale_out: float) -> Fabric:
        """The same fabric with the scale-up tier's bandwidth x ``scale_up`` and every tier beyond it
        x ``scale_out`` (the collective efficiencies of the per-operation model)."""
        tiers = (replace(self.tiers[0], bandwidth=self.tiers[0].bandwidth * scale_up),
                 *(replace(t, bandwidth=t.bandwidth * scale_out) for t in self.tiers[1:]))
        return replace(self, tiers=tiers)


def host_fabric(cards_per_host: int, scale_up_bw: float, nic_bw: float, *, host_link_bw: float | None = None,
                p2p: bool = True, scale_up_cards: int = 0, pod_hosts: int = 0,
                spine_oversubscription: float = 1.0) -> Fabric:
    """The fabric of hosts of ``cards_per_host`` cards: a scale-up domain of ``scale_up_cards`` cards
    (0: one host; at least one host) at ``scale_up_bw`` per card, NICs of ``nic_bw`` between domains
    (bytes/s per direction) inside pods of ``pod_hosts`` hosts (0: one pod), and between pods a spine
    tapered by ``spine_oversubscription``. ``host_link_bw`` defaults to ``scale_up_bw`` (no P2P)."""
    pod = pod_hosts * cards_per_host if pod_hosts > 0 else math.inf
    tiers: tuple[Tier, ...] = (Tier("scale-up", max(scale_up_cards, cards_per_host), scale_up_bw),
                               Tier("scale-out", pod, nic_bw))
    if pod_hosts > 0:
        tiers += (Tier("spine", math.inf, nic_bw, spine_oversubscription),)
    return Fabric(tiers=tiers, cards_per_host=cards_per_host,
                  host_link_bw=scale_up_bw if host_link_bw is None else host_link_bw, p2p=p2p)


@dataclass(frozen=True, eq=False)
class Route:
    """Where a collective runs (arrays broadcast over the group's shape).

    level       index of the outermost tier the group crosses (0: inside one scale-up domain)
    bandwidth   per card and direction on the path's slowest tier (bytes/s)
    scale_up    per card on the group's hops inside a scale-up domain (bytes/s)
    scale_out   per card: its share of the host's NICs (bytes/s), what rows that leave the domain get
    """

    level: np.ndarray
    bandwidth: np.ndarray
    scale_up: float
    scale_out: np.ndarray


def route(fabric: Fabric, size: ArrayLike, stride: ArrayLike = 1, sharing: ArrayLike = 1, nics: ArrayLike = 1,
          direct: bool = False) -> Route:
    """Map a collective over a group of ranks to the tiers it crosses and its per-card bandwidth.

    The group has ``size`` members ``stride`` ranks apart (span = size x stride ranks); ``sharing``
    groups send through a host's ``nics`` NICs at the same time. Tier i beyond the scale-up domain
    gives each card the share (o_i its oversubscription)
        s_i = nics x B_i / sharing / o_i
    and the group crosses tier i when its span exceeds the domain of tier i - 1. Then
        B = B_up                                   inside one scale-up domain (level 0)
        B = min(B_first, s_1, ..., s_level)        otherwise,
    B_first the card's first hop: the scale-up tier for a ring or all-to-all (its hops inside the
    domain run there), the host link for a ``direct`` send (card -> PCIe -> NIC).

    RTX 4090 (no P2P, PCIe 4.0 x16 = 32 GB/s, 8-card hosts, 8 x 200 Gbit/s NICs), a DP ring of 48
    members 1 apart: min(32, 8 x 25 / 1) = 32 GB/s; with one shared NIC: 25 GB/s. H100 hosts in pods
    of 4 under a 2:1 spine, DP ring of 8 members 8 apart (8 hosts): min(450, 8 x 50 / 8 / 2) = 25 GB/s.
    """
    span = _f(size) * _f(stride)
    up, out, *beyond = fabric.tiers
    k, n = _f(nics), _f(sharing)
    crosses = span > up.cards
    level = crosses.astype(int)
    off = _share(k, out, n)
    for inner, tier in zip(fabric.tiers[1:-1], beyond, strict=True):
        leaves = span > inner.cards
        level = level + leaves
        off = np.where(leaves, np.minimum(off, _share(k, tier, n)), off)
    first = fabric.host_link_bw if direct else up.bandwidth
    bandwidth = np.where(crosses, np.minimum(first, off), up.bandwidth)
    return Route(level=level, bandwidth=bandwidth, scale_up=up.bandwidth, scale_out=off)


def _share(nics: FloatArray, tier: Tier, sharing: FloatArray) -> FloatArray:
    """A card's share of a tier reached through its host's NICs: nics x B / sharing / oversubscription."""
    share = nics * tier.bandwidth / sharing
    return share if tier.oversubscription == 1.0 else share / tier.oversubscription


def ring_latency(fabric: Fabric, size: ArrayLike, stride: ArrayLike, up_step: float, out_step: float) -> FloatArray:
    """Latency of one ring collective over ``size`` ranks ``stride`` apart: its size - 1 steps, each
    ``up_step`` inside one scale-up domain and ``out_step`` once the ring leaves it (the slowest hop
    paces every step):  (size - 1) x (up_step | out_step)."""
    level = route(fabric, size, stride).level
    steps: FloatArray = np.maximum(_f(size) - 1.0, 0.0) * np.where(level > 0, out_step, up_step)
    return steps


def domains_spanned(fabric: Fabric, size: ArrayLike, stride: ArrayLike) -> FloatArray:
    """Scale-up domains (NCCL's "nodes") a group of ``size`` members ``stride`` ranks apart spans: each domain of
    D cards holds m = min(size, max(1, floor(D / stride))) members, N = ceil(size / m). DGX H100 (D = 8), a DP
    group of 336 members 4 apart: m = 2, N = 168; 8 apart: m = 1, N = 336."""
    n = np.maximum(_f(size), 1.0)
    m = np.minimum(n, np.maximum(1.0, np.floor(fabric.scale_up.cards / np.maximum(_f(stride), 1.0))))
    domains: FloatArray = np.ceil(n / m - 1e-9)
    return domains


TREE_BANDWIDTH_SHARE = 0.9
"""NCCL's tuning model (NVIDIA/nccl src/graph/tuning.cc, ncclTopoTuneModel): a tree's bus bandwidth is 0.9 x the
channels' (busBw x .9, before its caps), the ring's bandwidth in full."""


def collective_latency(fabric: Fabric, size: ArrayLike, stride: ArrayLike, up_step: float, out_step: float, *,
                       allreduce: ArrayLike = False, call_bytes: ArrayLike = 0.0,
                       bandwidth: ArrayLike = np.inf) -> FloatArray:
    """Latency of one collective call beyond its fixed cost as NCCL runs it: the cheapest of the algorithms its
    tuning model weighs for the call (NVIDIA/nccl src/graph/tuning.cc: per algorithm, time = latency + bytes /
    bandwidth, the smallest taken), for n = ``size`` members ``stride`` apart spanning N scale-up domains
    (:func:`domains_spanned`), m = n / N members in each:

        ring   (n - N) x up + (N - 1) x out      one pass; a ring crosses each domain boundary once, its other
                                                 hops stay on the scale-up links (NCCL: nsteps - nInterSteps
                                                 intra-node steps, nInterSteps network steps)
        tree   (m - 1) x up + ceil(log2 N) x out + bytes x (1/0.9 - 1) / B
                                                 all-reduce across domains (NCCL's double binary tree: the
                                                 domain's chain, then log2 N network levels; its bandwidth 0.9
                                                 of the ring's, :data:`TREE_BANDWIDTH_SHARE`); for all-gather and
                                                 reduce-scatter with one member per domain as NCCL's PAT
                                                 (parallel aggregated trees, NCCL >= 2.23)

    with ``up_step`` / ``out_step`` the per-step latency on the scale-up links / across the NICs, ``call_bytes``
    what one rank sends in the call and ``bandwidth`` its ring bandwidth. Inside one domain both are the ring's
    (n - 1) x up. Unlike a ring paced by its slowest hop at every step ((n - 1) x out), the latency grows with the
    domains crossed (ring) or their logarithm (tree), not with the ranks: 336 members 4 apart on DGX H100, up 2
    us, out 6 us: ring 168 x 2 + 167 x 6 = 1.34 ms, tree 1 x 2 + 8 x 6 = 50 us (+ the bandwidth share)."""
    n = _f(size)
    N = domains_spanned(fabric, n, stride)
    m = np.maximum(n, 1.0) / N
    ring = (np.maximum(n, 1.0) - N) * up_step + np.maximum(N - 1.0, 0.0) * out_step
    with np.errstate(divide="ignore", invalid="ignore"):
        slower = np.where(np.isfinite(_f(bandwidth)), _f(call_bytes) / _f(bandwidth), 0.0)
    tree = ((m - 1.0) * up_step + np.ceil(np.log2(np.maximum(N, 1.0)) - 1e-9) * out_step
            + slower * (1.0 / TREE_BANDWIDTH_SHARE - 1.0))
    tree_ok = (N > 1) & (np.asarray(allreduce, dtype=bool) | (m <= 1.0))
    out: FloatArray = np.where(n > 1, np.where(tree_ok, np.minimum(ring, tree), ring), 0.0)
    return out
