"""The device layer of ``tpopt calibrate --measure``: time kernels on this machine's GPU, then fit.

What is timed (:func:`observations`), each next to the per-operation model's prediction of it:

* GEMMs of :data:`GEMM_SHAPES` (BF16, C = A B with A m x k, B k x n): the large squares fix
  ``gemm_efficiency``, the short-k ones ``gemm_k_half``, the small ones ``kernel_overhead``; predicted
  by :func:`tpopt.models.roofline.gemm_time` with F = 2 m n k and Q = 2 (m k + k n + m n) bytes;
* device-to-device copies of :data:`COPY_BYTES` (read + write = 2 x bytes over HBM):
  ``memory_efficiency`` (:func:`tpopt.models.roofline.memory_time`);
* one Llama-style transformer block (RMSNorm, causal flash attention with RoPE, SwiGLU MLP, BF16),
  forward + backward, at :data:`BLOCKS` (long sequences: ``attention_efficiency``), predicted by the
  per-operation model's layer times (:func:`tpopt.models.terms.op_times`, TP 1, no recompute);
* with several GPUs, an all-reduce over all of them of :data:`ALL_REDUCE_BYTES`: ring traffic per rank
  2 (p - 1) / p x S over the card-to-card link, ``tp_efficiency`` and ``collective_latency``
  (:func:`tpopt.models.roofline.collective_time`).

The times go to :func:`tpopt.optimizer.calibrate.fit_observations` (the same prior and uncertainty as
``--runs``). :class:`TorchDevice` measures with PyTorch and CUDA events (median of repeats after warm-up;
the ``measure`` extra); :class:`FakeDevice` returns deterministic times from known parameters by the
closed forms above (the tests check that the fit recovers them, without a GPU).
"""

from __future__ import annotations

import math
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from tpopt.errors import InputError, require
from tpopt.models import roofline
from tpopt.models import terms as T
from tpopt.models.arch import ModelArch
from tpopt.models.evidence import Envelope
from tpopt.models.hardware import Accelerator
from tpopt.models.plan import Scenario
from tpopt.models.roofline import PerfParams
from tpopt.optimizer.calibrate import Calibration, Observation, fit_observations

GEMM_SHAPES: tuple[tuple[int, int, int], ...] = (
    (8192, 8192, 8192), (4096, 4096, 4096), (16384, 8192, 2048), (8192, 8192, 256), (8192, 8192, 128),
    (8192, 8192, 64), (1024, 1024, 1024), (256, 256, 256), (128, 128, 128))
"""(m, n, k) of the timed GEMMs."""
COPY_BYTES: tuple[int, ...] = (2 << 30, 256 << 20, 4 << 20, 64 << 10)
"""Sizes of the timed device-to-device copies [bytes]."""


@dataclass(frozen=True)
class Block:
    """One Llama-style transformer block as timed: width, heads (no GQA), MLP width, micro-batch, sequence."""

    hidden: int
    heads: int
    ffn: int
    batch: int
    seq_len: int

    @property
    def name(self) -> str:
        return f"block h{self.hidden} s{self.seq_len} b{self.batch}"

    def arch(self) -> ModelArch:
        return ModelArch(self.name, layers=1, hidden=self.hidden, heads=self.heads, kv_heads=self.heads,
                         head_dim=self.hidden // self.heads, ffn=self.ffn, vocab=32000, norm="rmsnorm",
                         gated_mlp=True, activation="silu", positions="rope")


BLOCKS: tuple[Block, ...] = (Block(2048, 16, 5632, 4, 2048), Block(2048, 16, 5632, 1, 8192),
                             Block(2048, 16, 5632, 1, 32768))
"""The timed blocks: from GEMM-dominated to attention-dominated."""


def kernels_covered(count: int) -> Envelope:
    """What a calibration on timed kernels covered (its ``[acc.calibration.covers]``): no training stack (the
    kernels run alone), the blocks' sequence lengths, ``count`` cards, 16-bit, dense blocks."""
    seqs = [b.seq_len for b in BLOCKS]
    return Envelope((), (min(seqs), max(seqs)), float(count), ("16-bit",), 0.0)
ALL_REDUCE_BYTES: tuple[int, ...] = (1 << 30, 64 << 20, 1 << 20)
"""Sizes of the timed all-reduces [bytes] (several GPUs only)."""


class Device(Protocol):
    """What ``--measure`` needs from a device: its name, how many GPUs, and four timings [s]."""

    name: str
    count: int

    def gemm_s(self, m: int, n: int, k: int) -> float: ...

    def copy_s(self, nbytes: int) -> float: ...

    def block_s(self, block: Block) -> float: ...

    def all_reduce_s(self, nbytes: int) -> float: ...


# ---------------------------------------------------------------------------------------------
# the model's predictions of what is timed


def gemm_bytes(m: int, n: int, k: int) -> float:
    """BF16 operands and result: 2 (m k + k n + m n) bytes."""
    return 2.0 * (m * k + k * n + m * n)


def ring_bytes(nbytes: float, ranks: int) -> float:
    """Bytes each rank sends in a ring all-reduce of ``nbytes``: 2 (p - 1) / p x S."""
    return 2.0 * (ranks - 1) / ranks * nbytes


def block_scenario(sc: Scenario, accelerator: str, block: Block, perf: PerfParams) -> Scenario:
    """The scenario that runs one block on one card with ``perf`` (per-operation model, flash attention)."""
    sysm = replace(sc.system(accelerator), perf=perf, efficiency=1.0)
    return replace(sc, model=block.arch(), task=replace(sc.task, seq_len=block.seq_len),
                   memory=replace(sc.memory, flash_attention=True, dropout=False, activation_reserve=None),
                   systems={accelerator: sysm}, stages=())


def predict_block(sc: Scenario, accelerator: str, block: Block, perf: PerfParams) -> NDArray[np.float64]:
    """The model's forward + backward time of one block (its layer times, TP 1, no recompute)."""
    s1 = block_scenario(sc, accelerator, block, perf)
    layer = T.op_times(s1, acc=accelerator, recompute="none", tp=1, mb=block.batch)[0]
    return np.atleast_1d(np.asarray(layer.fwd + layer.dx + layer.dw, dtype=float))


def _gemm_model(m: int, n: int, k: int, peak: float, hbm: float, perf: PerfParams) -> NDArray[np.float64]:
    return np.atleast_1d(roofline.gemm_time(2.0 * m * n * k, gemm_bytes(m, n, k), m, n, k, 1, peak, hbm, perf))


def _copy_model(nbytes: int, hbm: float, perf: PerfParams) -> NDArray[np.float64]:
    return np.atleast_1d(roofline.memory_time(2.0 * nbytes, hbm, perf))


def _all_reduce_model(nbytes: int, ranks: int, bandwidth: float, perf: PerfParams) -> NDArray[np.float64]:
    return np.atleast_1d(roofline.collective_time(ring_bytes(nbytes, ranks), bandwidth, perf.tp_efficiency,
                                                  perf.collective_latency))


def observations(device: Device, sc: Scenario, accelerator: str) -> list[Observation]:
    """Time every kernel of the module docstring on ``device``; each with the model's prediction."""
    acc = sc.system(accelerator).acc
    peak, hbm = acc.peak_flops, acc.hbm_bandwidth
    out: list[Observation] = []

    def add(name: str, kind: str, measured: float, fn: Callable[[PerfParams], NDArray[np.float64]]) -> None:
        if not (math.isfinite(measured) and measured > 0):
            raise InputError(f"--measure: {name} timed {measured!r} s on {device.name} (not a positive time)")
        out.append(Observation(name, measured, fn, kind))

    for m, n, k in GEMM_SHAPES:
        add(f"gemm {m}x{n}x{k}", "gemm", device.gemm_s(m, n, k), partial(_gemm_model, m, n, k, peak, hbm))
    for nbytes in COPY_BYTES:
        add(f"copy {nbytes / 2**20:g} MiB", "copy", device.copy_s(nbytes), partial(_copy_model, nbytes, hbm))
    for block in BLOCKS:
        add(block.name, "block", device.block_s(block), partial(predict_block, sc, accelerator, block))
    if device.count > 1:
        for nbytes in ALL_REDUCE_BYTES:
            add(f"all-reduce {nbytes / 2**20:g} MiB x {device.count}", "all-reduce", device.all_reduce_s(nbytes),
                partial(_all_reduce_model, nbytes, device.count, acc.intra_host_bw))
    return out


def measure(device: Device, sc: Scenario, accelerator: str, base: PerfParams,
            free: Sequence[str] | None = None) -> Calibration:
    """Time the kernels on ``device`` and fit ``accelerator``'s parameters to them (prior: ``base``)."""
    return fit_observations(observations(device, sc, accelerator), accelerator, base, free)


# ---------------------------------------------------------------------------------------------
# a device without a GPU: the closed forms with known parameters


@dataclass
class FakeDevice:
    """Deterministic timings from known parameters ``truth`` on ``acc`` (the closed forms of the module
    docstring, written out here), times exp(jitter[i]) for the i-th timing (cycled)."""

    acc: Accelerator
    truth: PerfParams
    sc: Scenario
    count: int = 1
    jitter: tuple[float, ...] = (0.0,)
    name: str = "fake device"
    calls: int = 0

    def _noise(self) -> float:
        e = self.jitter[self.calls % len(self.jitter)]
        self.calls += 1
        return math.exp(e)

    def gemm_s(self, m: int, n: int, k: int) -> float:
        p, a = self.truth, self.acc
        q_tile = m * n / (math.ceil(m / p.tile_m) * p.tile_m * math.ceil(n / p.tile_n) * p.tile_n)
        tiles = math.ceil(m / p.tile_m) * math.ceil(n / p.tile_n)
        q_wave = tiles / (math.ceil(tiles / p.sms) * p.sms)
        eta = p.gemm_efficiency * q_tile * q_wave * k / (k + p.gemm_k_half)
        t = max(2.0 * m * n * k / (a.peak_flops * eta), gemm_bytes(m, n, k) / (a.hbm_bandwidth * p.memory_efficiency))
        return (t + p.kernel_overhead) * self._noise()

    def copy_s(self, nbytes: int) -> float:
        p = self.truth
        return (2.0 * nbytes / (self.acc.hbm_bandwidth * p.memory_efficiency) + p.kernel_overhead) * self._noise()

    def block_s(self, block: Block) -> float:
        return float(predict_block(self.sc, self.acc.name, block, self.truth)[0]) * self._noise()

    def all_reduce_s(self, nbytes: int) -> float:
        p = self.truth
        return (ring_bytes(nbytes, self.count) / (self.acc.intra_host_bw * p.tp_efficiency)
                + p.collective_latency) * self._noise()


# ---------------------------------------------------------------------------------------------
# the real device: PyTorch and CUDA events


WARMUP, REPEATS = 3, 10


def _median_ms(torch: Any, fn: Callable[[], Any]) -> float:
    """Median time of ``fn`` over REPEATS after WARMUP calls, by CUDA events [ms]."""
    for _ in range(WARMUP):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(REPEATS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return float(np.median(times))


class TorchDevice:
    """The first CUDA GPU (and, for all-reduces, every visible one) through PyTorch."""

    def __init__(self) -> None:
        torch = require("torch", "measure", "tpopt calibrate --measure")
        if not torch.cuda.is_available():
            raise InputError("tpopt calibrate --measure needs a CUDA GPU; torch sees none")
        self.torch = torch
        self.dev = torch.device("cuda:0")
        self.name = str(torch.cuda.get_device_name(0))
        self.count = int(torch.cuda.device_count())

    def gemm_s(self, m: int, n: int, k: int) -> float:
        t = self.torch
        a = t.randn(m, k, device=self.dev, dtype=t.bfloat16)
        b = t.randn(k, n, device=self.dev, dtype=t.bfloat16)
        return _median_ms(t, lambda: a @ b) / 1e3

    def copy_s(self, nbytes: int) -> float:
        t = self.torch
        src = t.empty(nbytes, device=self.dev, dtype=t.uint8)
        dst = t.empty_like(src)
        return _median_ms(t, lambda: dst.copy_(src)) / 1e3

    def block_s(self, block: Block) -> float:
        t = self.torch
        f = t.nn.functional
        h, heads, d = block.hidden, block.heads, block.hidden // block.heads
        kw = dict(device=self.dev, dtype=t.bfloat16)

        def w(*shape: int) -> Any:
            return (t.randn(*shape, **kw) * shape[0] ** -0.5).requires_grad_()

        wqkv, wo, wgu, wd = w(h, 3 * h), w(h, h), w(h, 2 * block.ffn), w(block.ffn, h)
        g1, g2 = t.ones(h, **kw, requires_grad=True), t.ones(h, **kw, requires_grad=True)
        pos = t.arange(block.seq_len, device=self.dev, dtype=t.float32)
        inv = 1.0 / (10000.0 ** (t.arange(0, d, 2, device=self.dev, dtype=t.float32) / d))
        ang = t.outer(pos, inv)
        cos, sin = t.cat([ang.cos(), ang.cos()], -1).to(t.bfloat16), t.cat([ang.sin(), ang.sin()], -1).to(t.bfloat16)
        x = t.randn(block.batch, block.seq_len, h, **kw, requires_grad=True)
        grad = t.randn_like(x)

        def rms(v: Any, g: Any) -> Any:
            return v * t.rsqrt(v.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(v.dtype) * g

        def rope(v: Any) -> Any:
            v1, v2 = v.chunk(2, -1)
            return v * cos + t.cat([-v2, v1], -1) * sin

        def step() -> None:
            b, s = block.batch, block.seq_len
            q, k, v = (rms(x, g1) @ wqkv).view(b, s, 3, heads, d).unbind(2)
            q, k, v = rope(q.transpose(1, 2)), rope(k.transpose(1, 2)), v.transpose(1, 2)
            a = f.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, h)
            y = x + a @ wo
            gate, up = (rms(y, g2) @ wgu).chunk(2, -1)
            out = y + (f.silu(gate) * up) @ wd
            out.backward(grad)

        return _median_ms(t, step) / 1e3

    def all_reduce_s(self, nbytes: int) -> float:
        mp = self.torch.multiprocessing
        ctx = mp.get_context("spawn")
        queue = ctx.Queue()
        with socket.socket() as s:  # a free local port for the process group's rendezvous
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        procs = [ctx.Process(target=_all_reduce_rank, args=(r, self.count, port, nbytes, queue))
                 for r in range(self.count)]
        for p in procs:
            p.start()
        times = [queue.get(timeout=600) for _ in procs]
        for p in procs:
            p.join(timeout=60)
        return float(max(times))


def _all_reduce_rank(rank: int, world: int, port: int, nbytes: int, queue: Any) -> None:
    """One rank of the timed all-reduce (NCCL); puts its median time [s] on ``queue``."""
    torch = require("torch", "measure", "tpopt calibrate --measure")
    dist = torch.distributed
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    buf = torch.empty(nbytes // 2, device=f"cuda:{rank}", dtype=torch.bfloat16)
    queue.put(_median_ms(torch, lambda: dist.all_reduce(buf)) / 1e3)
    dist.destroy_process_group()


def open_device() -> Device:
    """The machine's GPU (PyTorch; one line and exit 2 without PyTorch or without a CUDA GPU)."""
    return TorchDevice()
