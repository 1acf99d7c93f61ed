"""What a plan runs on: one accelerator type with its host, links and NICs (numbers only)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from tpopt.models.network import Fabric, host_fabric, route


@dataclass(frozen=True)
class Accelerator:
    """One rentable accelerator type, in SI units (FLOP/s, bytes, bytes/s per direction, USD/h).

    Its network is :attr:`fabric` (tiers in :mod:`tpopt.models.network`): the scale-up domain of
    ``scale_up_cards`` cards (0: one host) at the card-to-card fabric's bandwidth (NVLink) when the
    card supports peer-to-peer, otherwise its host link (PCIe), because without P2P every transfer
    crosses the card's own PCIe link through host memory (chapter 10.3.3, RTX 4090); then the hosts'
    NICs.
    """

    name: str
    peak_flops: float  # dense BF16 matrix peak (the catalog's peak_bf16)
    memory_nominal: float
    memory_usable: float
    hbm_bandwidth: float
    host_link_bw: float
    p2p: bool
    interconnect_bw: float  # 0 when the host has no card-to-card fabric
    cards_per_host: int
    nic_bw: float
    nics_per_host: int
    max_nics_per_host: int
    nic_price_hour: float = 0.0
    host_memory: float = 0.0
    host_memory_bw: float = 0.0
    price_card_hour: float | None = None
    peak_fp16: float = 0.0  # dense FP16 matrix peak (0 = not given in the catalog)
    peak_fp8: float = 0.0  # dense FP8 matrix peak (0 = not supported / not given)
    peak_tf32: float = 0.0  # dense TF32 matrix peak (0 = not given)
    display: str = ""
    host_link: str = ""
    interconnect: str = "none"
    nic: str = ""
    scale_up_cards: int = 0  # cards in one scale-up domain (0: one host)
    pod_hosts: int = 0  # hosts in one scale-out pod (0: every host in one pod)
    spine_oversubscription: float = 1.0  # taper of the spine between pods (2 = 2:1; 1 = none)
    sources: dict = field(default_factory=dict, compare=False, hash=False)

    @cached_property
    def fabric(self) -> Fabric:
        """The card's network tiers: scale-up domain (NVLink with P2P, else the host link), NICs, spine."""
        up = self.interconnect_bw if self.p2p and self.interconnect_bw > 0 else self.host_link_bw
        return host_fabric(self.cards_per_host, up, self.nic_bw, host_link_bw=self.host_link_bw, p2p=self.p2p,
                           scale_up_cards=self.scale_up_cards, pod_hosts=self.pod_hosts,
                           spine_oversubscription=self.spine_oversubscription)

    @cached_property
    def intra_host_bw(self) -> float:
        """Per-direction bandwidth of a group inside one host (network.route over the host's cards):
        NVLink with P2P, else the host link."""
        return float(route(self.fabric, self.cards_per_host).bandwidth)
