"""What a plan runs on: one accelerator type with its host, links and NICs (numbers only)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from functools import cached_property

from tpopt.models.network import Fabric, host_fabric

#: Marks the fields that describe network tiers beyond the card's links (models/network.py).
TIER = {"network": "tier"}


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
    peak_fp4: float = 0.0  # dense FP4 (NVFP4 / MXFP4) matrix peak (0 = not supported / not given)
    peak_tf32: float = 0.0  # dense TF32 matrix peak (0 = not given)
    display: str = ""
    host_link: str = ""
    interconnect: str = "none"
    nic: str = ""
    scale_up_cards: int = field(default=0, metadata=TIER)  # cards in one scale-up domain (0: one host)
    pod_hosts: int = field(default=0, metadata=TIER)  # hosts in one scale-out pod (0: every host in one pod)
    spine_oversubscription: float = field(default=1.0, metadata=TIER)  # spine taper between pods (2 = 2:1)
    # the usable memory the catalog (or the scenario) states where the stack's allocator leaves memory_usable of it
    # (tpopt.catalogs.scenario._systems, StackProfile.usable); None where memory_usable is that figure itself; and
    # who states it, "catalog" or "scenario" (tpopt.optimizer.footing.usable_source prints the derivation)
    memory_usable_stated: float | None = field(default=None, compare=False, hash=False, repr=False)
    usable_stated_by: str = field(default="catalog", compare=False, hash=False, repr=False)
    # the card's maker (catalogs/accelerators.toml vendor): which vendor-only software runs on it; it moves a
    # plan's figures only through the scenario's MoeOptions.card_dispatchers (compared and in the fingerprint
    # there), so it stays out of the card's comparisons and repr
    vendor: str = field(default="NVIDIA", compare=False, hash=False, repr=False)
    sources: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    def __repr__(self) -> str:
        """The dataclass repr, with a network-tier field only where it differs from its neutral default
        (a run's fingerprint on the shipped catalogs stays what it was before the tiers existed)."""
        shown = [f"{f.name}={getattr(self, f.name)!r}" for f in fields(self)
                 if f.repr and not (f.metadata.get("network") and getattr(self, f.name) == f.default)]
        return f"{type(self).__qualname__}({', '.join(shown)})"

    @cached_property
    def fabric(self) -> Fabric:
        """The card's network tiers: scale-up domain (NVLink with P2P, else the host link), NICs, spine."""
        up = self.interconnect_bw if self.p2p and self.interconnect_bw > 0 else self.host_link_bw
        return host_fabric(self.cards_per_host, up, self.nic_bw, host_link_bw=self.host_link_bw, p2p=self.p2p,
                           scale_up_cards=self.scale_up_cards, pod_hosts=self.pod_hosts,
                           spine_oversubscription=self.spine_oversubscription)

    @property
    def intra_host_bw(self) -> float:
        """Per-direction bandwidth of a group inside one host: the scale-up tier's (its domain holds at
        least one host), NVLink with P2P, else the host link."""
        return self.fabric.scale_up.bandwidth


@dataclass(frozen=True)
class StackProfile:
    """What a training framework does by default (catalogs/stacks.toml), SI units.

    The step-time model adds ``step_overhead`` once per optimizer step and ``microbatch_overhead`` per
    micro-batch and pipeline stage; the memory model adds ``communicator_buffers`` to every rank and
    divides the usable memory by ``1 + allocator_reserve`` (the caching allocator's reserved / allocated
    ratio at the peak). The overlap, attention, sequence-parallel, dropout and recompute entries are the
    defaults a scenario that states nothing gets. ``residual_sigma``: the step-time model's spread on the
    stack's runs (the finish-time distribution's step error where a card's own was not measured on it).
    ``kernel_efficiency``: the stack's kernels against the reference stack's (Megatron-Core with Transformer
    Engine, on whose runs the cards are calibrated): a factor on the card's GEMM, attention and memory-bound
    efficiencies (models/roofline.py :func:`~tpopt.models.roofline.stack_scaled`). ``loss``:
    how the cross-entropy runs, which sets what it holds per logit on the last stage (memory.logits_bytes).
    """

    name: str = "megatron-core"
    display: str = ""
    tp_overlap: bool | str = True  # True (chunked), "async", False
    dp_overlap: float = 1.0
    fsdp_prefetch: int = 1
    dp_bucket: float = 40e6  # bytes per DP / FSDP bucket (0: one collective per sharded unit)
    dp_bucket_per_rank: float = 0.0  # the bucket grows to this x the DP ranks when larger (0: fixed)
    moe_dispatcher: str = "alltoall"
    moe_a2a_overlap: str = "none"
    flash_attention: bool = True
    sequence_parallel: bool = True
    dropout: bool = False
    recompute: str = "none"
    recompute_modules: tuple[str, ...] = ()
    activation_offload: bool = False
    fp8_recipe: str = "current"
    fp8_param_gather: bool = False  # FP8 / MXFP8 / NVFP4 recipes keep the weights in that format (else BF16)
    moe_probs_in_activation: bool = False  # router probabilities applied in the experts' activation (before fc2)
    quantized_saved_inputs: bool = False  # FP8-family recipes: linear layers save their quantised input copy
    step_overhead: float = 0.0  # s per optimizer step
    microbatch_overhead: float = 0.0  # s per micro-batch per pipeline stage
    cuda_context: float = 0.0  # bytes (inside the accelerator's usable memory; for reference)
    communicator_buffers: float = 0.0  # bytes per rank
    allocator_reserve: float = 0.0  # reserved / allocated - 1 at the peak
    residual_sigma: float = 0.0  # log-sd of measured / predicted step time on this stack (0: none stated)
    kernel_efficiency: float = 1.0  # factor on the card's GEMM, attention and memory-bound efficiencies
    attention_kernel: str = "native"  # "portable": attention at the card's portable_attention_ratio (roofline)
    loss: str = "fused"  # how the cross-entropy runs: fused, te, eager or compiled (memory.LOSS_KINDS)
    expert_gemm_dispatch: float = 0.0  # s per local expert per grouped expert GEMM call (0: one launch for all)
    grouped_gemm_efficiency: float = 1.0  # share of their modelled speed the grouped expert GEMM calls reach
    ring_step_efficiency: float = 1.0  # share of their modelled speed a CP ring's later attention calls reach
    moe_host_launch: float = 0.0  # s of exposed host launch time per MoE block per micro-batch, not graphed (0: none)
    expert_bias_loop: bool = False  # expert output bias added per local expert by an eager loop (ops.moe_kernels)
    rope_scaled_unfused: bool = False  # a RoPE with a YaRN attention factor != 1 runs unfused (ops.rope_kernels)
    activation_clamp_unfused: bool = False  # a clamped gated activation's clamp runs in PyTorch (ops.moe_kernels)
    cp_ring: str = "p2p"  # how ring context parallelism passes K, V: p2p or allgather (context.CP_RINGS)
    kv_repeat: bool = False  # the attention takes K, V repeated to the query heads (context.ring_kv_arch)
    pp_buffers: str = "send-recv"  # how the pipeline runtime holds boundary tensors (memory.PP_BUFFERS)
    cp_merge: str = "fused"  # torch's ring bookkeeping fused by the compiler or run op by op (context.CP_MERGES)
    tp_input_regather: bool = True  # the backward gathers the column-parallel input again (ops.tp_collectives)
    fp8_tp_gather: bool = False  # FP8 recipes gather FP8 copies over TP (layer_times.tp_gather_bytes)
    sources: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    def usable(self, memory_usable: float) -> float:
        """Memory the allocated peak may reach: (usable - communicator buffers) / (1 + allocator reserve)."""
        return (memory_usable - self.communicator_buffers) / (1.0 + self.allocator_reserve)
