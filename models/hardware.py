"""What a plan runs on: one accelerator type with its host, links and NICs (numbers only)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Accelerator:
    """One rentable accelerator type, in SI units (FLOP/s, bytes, bytes/s per direction, USD/h).

    ``intra_host_bw`` is the per-direction bandwidth a card has towards the other cards of its
    host: the card-to-card fabric (NVLink) when the card supports peer-to-peer, otherwise its host
    link (PCIe), because without P2P every transfer crosses the card's own PCIe link through host
    memory (chapter 10.3.3, RTX 4090).
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
    sources: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def intra_host_bw(self) -> float:
        """Per-direction card-to-card bandwidth inside a host (NVLink with P2P, else host link)."""
        if self.p2p and self.interconnect_bw > 0:
            return self.interconnect_bw
        return self.host_link_bw
