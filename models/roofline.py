"""Time of one GPU kernel from its work: a roofline with shape-aware GEMM efficiency.

    t = max(F / (P x eta_gemm(shape)), Q / (B_hbm x eta_mem)) + t_kernel

F is the kernel's floating-point work [FLOP], Q the bytes it moves to and from device memory, P the
matrix peak of the precision it runs in, B_hbm the device-memory bandwidth, t_kernel a fixed cost per
kernel (launch, ramp-up and tail; what a stream of tiny kernels pays). Memory-bound kernels (norms,
activations, softmax, dropout, residual adds, the optimizer step) have F / P << Q / B and cost
Q / (B x eta_mem); matrix multiplies are usually compute-bound.

GEMM efficiency of C[m, n] = A[m, k] B[k, n] (``batch`` independent products in one launch):

    eta_gemm = eta_max x q_tile x q_wave x k / (k + k_half)
    q_tile   = m n / (ceil(m / t_m) t_m x ceil(n / t_n) t_n)        padding of the last row/column of tiles
    q_wave   = tiles / (ceil(tiles / SMs) x SMs),  tiles = ceil(m / t_m) ceil(n / t_n) x batch
                                                                      the last wave leaves SMs idle
    k / (k + k_half)                                                 prologue/epilogue of each tile
                                                                      amortised over the k loop

(the tile and wave quantisation of NVIDIA's "Matrix Multiplication Background User's Guide"). All
functions broadcast over numpy arrays of the shape arguments, so the solver tabulates them per term.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike

from tpopt.models.evidence import Envelope
from tpopt.models.numeric import FloatArray, Floats


@dataclass(frozen=True)
class PerfParams:
    """Performance parameters of one accelerator (catalogs/performance.toml), SI units.

    ``gemm_efficiency``, ``memory_efficiency`` and ``kernel_overhead`` are the free parameters that
    ``tpopt calibrate`` fits; the others come from datasheets and published measurements.
    """

    name: str = ""
    gemm_efficiency: float = 0.75  # eta_max: large-GEMM fraction of the matrix peak
    gemm_k_half: float = 32.0  # k at which a GEMM reaches half of eta_max (k-loop amortisation)
    tile_m: int = 128  # output tile rows of the GEMM kernels (wave / tile quantisation)
    tile_n: int = 128  # output tile columns
    sms: int = 108  # streaming multiprocessors (tiles run in waves of this many)
    memory_efficiency: float = 0.7  # fraction of HBM bandwidth memory-bound kernels reach
    kernel_overhead: float = 10e-6  # seconds per kernel
    attention_efficiency: float = 0.5  # fused (flash) attention: fraction of the matrix peak
    tp_efficiency: float = 0.8  # tensor-parallel collectives: fraction of the link bandwidth reached
    dp_efficiency: float = 0.9  # data-parallel collectives: fraction of the ring bandwidth reached
    collective_latency: float = 20e-6  # seconds per collective call
    fp8_gemm_ratio: float = 1.0  # FP8 (and block-scaled) GEMMs: their fraction of the FP8 peak / gemm_efficiency
    fp4_gemm_ratio: float = 1.0  # FP4 GEMMs: their fraction of the FP4 peak / gemm_efficiency
    mxfp8_gemm_ratio: float = 1.0  # MXFP8 GEMMs: their speed / per-tensor FP8 GEMMs' (block-scale handling)
    attention_bwd_ratio: float = 1.0  # flash-attention backward: its fraction of the peak / attention_efficiency
    portable_attention_ratio: float = 1.0  # attention kernels not written for the card's architecture
    # (FlashAttention-2 as PyTorch SDPA runs it on Hopper): their share of the peak / attention_efficiency
    portable_attention_bwd_ratio: float = 0.0  # those kernels' backward share / their forward share (0: the
    # card's attention_bwd_ratio)
    overlap_contention: float = 0.0  # share of a hidden collective's time the compute it hides behind still loses
    up_step_latency: float = 0.0  # seconds per ring step inside a scale-up domain (NVLink, Infinity Fabric)
    out_step_latency: float = 0.0  # seconds per ring step once a ring crosses the NICs
    calibrated: tuple[str, ...] = ()  # names of the fields that were fitted (the rest are priors)
    residual_sigma: float = 0.0  # lognormal sigma of measured / predicted step time (tpopt calibrate; 0: none)
    residual_sigma_source: str = ""  # how residual_sigma was obtained
    residual_sigma_stacks: tuple[str, ...] = ()  # the stacks its runs ran (empty: a calibration's, one's own stack)
    borrowed_sigma: float = 0.0  # the leave-one-out spread of the fit this card's GEMM share rests on (derived_from,
    # prior_scale_from: the largest of those cards' residual_sigma; 0: none)
    borrowed_from: str = ""  # the card whose spread borrowed_sigma is
    calibration_covers: Envelope | None = field(default=None, metadata={"neutral": True})  # what the runs of a
    # calibration of one's own covered (tpopt calibrate: stacks, sequence lengths, card count, recipes, experts per
    # card; None: not recorded, or no such calibration)
    sources: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    FREE: ClassVar[tuple[str, ...]] = ("gemm_efficiency", "memory_efficiency", "kernel_overhead")
    """Parameters a calibration may fit, in the order it frees them (one per measured run)."""

    BOUNDS: ClassVar[dict[str, tuple[float, float]]] = {
        "gemm_efficiency": (0.05, 1.0), "memory_efficiency": (0.05, 1.0), "kernel_overhead": (0.0, 1e-3),
        "attention_efficiency": (0.05, 1.0), "tp_efficiency": (0.05, 1.0), "dp_efficiency": (0.05, 1.0),
        "overlap_contention": (0.0, 1.0)}
    """Physical ranges of the fitted parameters (fractions of a datasheet figure, seconds)."""

    def __repr__(self) -> str:
        """The dataclass repr, with a neutral field only where it differs from its default (a run's fingerprint on
        the shipped catalogs stays what it was before the field existed)."""
        shown = [f"{f.name}={getattr(self, f.name)!r}" for f in fields(self)
                 if f.repr and not (f.metadata.get("neutral") and getattr(self, f.name) == f.default)]
        return f"{type(self).__qualname__}({', '.join(shown)})"

    def with_values(self, **kw: Any) -> PerfParams:
        return replace(self, **kw)

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls) if f.name not in ("name", "calibrated", "sources",
                                                                 "residual_sigma", "residual_sigma_source",
                                                                 "residual_sigma_stacks", "borrowed_sigma",
                                                                 "borrowed_from", "calibration_covers"))


def _f(x: ArrayLike) -> FloatArray:
    return np.asarray(x, dtype=float)


STACK_SCALED = ("gemm_efficiency", "attention_efficiency", "memory_efficiency")
"""The card's kernel efficiencies a software stack's ``kernel_efficiency`` scales (catalogs/stacks.toml)."""


def stack_scaled(perf: PerfParams, factor: Floats) -> PerfParams:
    """The card's parameters as another software stack's kernels reach them: eta -> min(1, f x eta) for the
    GEMM, attention and memory-bound efficiencies (:data:`STACK_SCALED`); f = 1 (the reference stack the cards
    are calibrated on) returns ``perf`` itself. ``factor`` may be an array (one parameter set per value)."""
    if np.ndim(factor) == 0 and float(np.asarray(factor)) == 1.0:
        return perf
    f = _f(factor)
    return perf.with_values(**{n: np.minimum(1.0, f * _f(getattr(perf, n))) for n in STACK_SCALED})


def portable_attention(perf: PerfParams) -> PerfParams:
    """The card's parameters as a stack whose attention kernel is not written for the card reaches them (a stack's
    ``attention_kernel = "portable"``, catalogs/stacks.toml): eta_attn -> eta_attn x portable_attention_ratio.
    H100: FlashAttention-2, PyTorch SDPA's flash backend, reaches 335 TFLOPS causal forward where FlashAttention-3
    reaches 616 (head dim 128, 16K tokens; Shah et al. 2024): 0.61 x 0.54 = 0.33 of the peak. Its backward runs at
    its own share of that forward, portable_attention_bwd_ratio (FlashAttention-2: 322 TFLOPS backward against 335
    forward, 0.96), not at the native kernel's attention_bwd_ratio; 0 keeps the card's."""
    if perf.portable_attention_ratio == 1.0 and perf.portable_attention_bwd_ratio == 0.0:
        return perf
    bwd = perf.portable_attention_bwd_ratio or perf.attention_bwd_ratio
    return perf.with_values(attention_efficiency=perf.attention_efficiency * perf.portable_attention_ratio,
                            attention_bwd_ratio=bwd)


def tile_quantisation(m: ArrayLike, n: ArrayLike, perf: PerfParams) -> FloatArray:
    """Useful share of the output tiles: m n / (ceil(m/t_m) t_m ceil(n/t_n) t_n) (1 when tiles fit)."""
    rows, cols = _f(m), _f(n)
    padded = np.ceil(rows / perf.tile_m) * perf.tile_m * np.ceil(cols / perf.tile_n) * perf.tile_n
    useful: FloatArray = (rows * cols) / padded
    return useful


def wave_quantisation(m: ArrayLike, n: ArrayLike, batch: ArrayLike, perf: PerfParams) -> FloatArray:
    """Busy share of the SMs over the waves: tiles / (ceil(tiles / SMs) SMs)."""
    tiles: FloatArray = np.ceil(_f(m) / perf.tile_m) * np.ceil(_f(n) / perf.tile_n) * _f(batch)
    busy: FloatArray = tiles / (np.ceil(tiles / perf.sms) * perf.sms)
    return busy


def gemm_efficiency(m: ArrayLike, n: ArrayLike, k: ArrayLike, batch: ArrayLike, perf: PerfParams,
                    ratio: Floats = 1.0) -> FloatArray:
    """eta_gemm = eta_max x ratio x q_tile x q_wave x k / (k + k_half) (module docstring); ``ratio`` is the
    precision's share relative to BF16 (fp8_gemm_ratio, fp4_gemm_ratio)."""
    k = _f(k)
    return (perf.gemm_efficiency * ratio * tile_quantisation(m, n, perf) * wave_quantisation(m, n, batch, perf)
            * k / (k + perf.gemm_k_half))


def gemm_time(flops: ArrayLike, bytes_: ArrayLike, m: ArrayLike, n: ArrayLike, k: ArrayLike, batch: ArrayLike,
              peak: float, hbm: float, perf: PerfParams, count: Floats = 1.0, ratio: Floats = 1.0) -> FloatArray:
    """GEMM kernel time: max(F / (P eta_gemm), Q / (B eta_mem)) + count x t_kernel."""
    eff = gemm_efficiency(m, n, k, batch, perf, ratio)
    return np.maximum(_f(flops) / (peak * eff), _f(bytes_) / (hbm * perf.memory_efficiency)) \
        + count * perf.kernel_overhead


def memory_time(bytes_: ArrayLike, hbm: float, perf: PerfParams, count: Floats = 1.0) -> FloatArray:
    """Memory-bound kernel time: Q / (B_hbm eta_mem) + count x t_kernel."""
    return _f(bytes_) / (hbm * perf.memory_efficiency) + count * perf.kernel_overhead


def attention_time(flops: ArrayLike, bytes_: ArrayLike, peak: float, hbm: float, perf: PerfParams,
                   count: Floats = 1.0, backward: bool = False) -> FloatArray:
    """Fused (flash) attention kernel: max(F / (P eta_attn), Q / (B eta_mem)) + count x t_kernel, with
    eta_attn x attention_bwd_ratio for the backward kernels (they reach a lower share of the peak)."""
    eta = perf.attention_efficiency * (perf.attention_bwd_ratio if backward else 1.0)
    return np.maximum(_f(flops) / (peak * eta), _f(bytes_) / (hbm * perf.memory_efficiency)) \
        + count * perf.kernel_overhead


def collective_time(bytes_on_link: ArrayLike, bandwidth: float, efficiency: float, latency: float,
                    calls: ArrayLike = 1.0) -> FloatArray:
    """Collective time: bytes each rank sends over its link / (B x efficiency) + calls x latency."""
    return _f(bytes_on_link) / (bandwidth * efficiency) + _f(calls) * latency
