"""The discrete-event simulation of one step (:func:`simulate`): per-group inputs, the event record
(:class:`PipelineResult`), and the activation memory the slot order implies (:func:`peak_inflight`,
:func:`buffer_counts`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple

import numpy as np

from tpopt.errors import InputError
from tpopt.models.numeric import FloatArray
from tpopt.models.pipeline.closed_forms import parameter_copies
from tpopt.models.pipeline.program import _get_program, _Program, _Trace
from tpopt.models.pipeline.schedules import (
    _B,
    _F,
    _KIND_NAME,
    _MSG_FWD,
    _MSG_NONE,
    _W,
    PerGroup,
    _check_schedule,
    _halves,
    _whole,
)

# =============================================================================================
# inputs


def _per_group(value: PerGroup | None, p: int, what: str) -> list[float]:
    """A time or size given once for every layer group, or one value per group (length p)."""
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        vals = [float(value)]
    elif isinstance(value, (str, bytes, bool)) or value is None:
        raise InputError(f"{what}: expected a number or {p} numbers, got {value!r}")
    else:
        try:
            vals = [float(x) for x in value]
        except (TypeError, ValueError):
            raise InputError(f"{what}: expected a number or {p} numbers, got {value!r}") from None
        if len(vals) not in (1, p):
            raise InputError(f"{what}: expected one value per stage ({p}), got {len(vals)}")
    for x in vals:
        if not math.isfinite(x) or x < 0:
            raise InputError(f"{what}: {x!r} must be a finite value >= 0")
    return vals * p if len(vals) == 1 else vals


def _chunk_fractions(schedule: str, p: int, v: int, chunk_layers: Iterable[int] | None) -> list[list[float]]:
    """``frac[g][c]``: share of layer group g's time (and activations) taken by its chunk c.

    Interleaved: ``chunk_layers`` lists the layers of the ``v p`` chunks in path order (chunk c of
    stage s is entry ``c p + s``): [5,5,5,5,4,4,4,4] -> stage 0 holds 5 + 4 layers, its chunks take
    5/9 and 4/9 of its time. Without ``chunk_layers`` every chunk is 1/v of its stage. The first chunk of
    the path (the embedding's) and the last (the loss's) may hold 0 layers: no share of the stage's time.
    """
    if schedule != "interleaved":
        if chunk_layers is not None:
            raise InputError(f"chunk layers apply to the interleaved schedule only, not {schedule!r}")
        return [[1.0] for _ in range(p)]
    if chunk_layers is None:
        return [[1.0 / v] * v for _ in range(p)]
    layers = list(chunk_layers)
    if len(layers) != v * p:
        raise InputError(f"chunk layers: expected v x p = {v * p} chunk sizes, got {len(layers)}")
    ends = (0, v * p - 1)  # the embedding's and the loss's chunk may hold no transformer layer (shapes.chunk_layers)
    if any(isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < (0 if i in ends else 1)
           for i, x in enumerate(layers)):
        raise InputError(f"chunk layers must be whole numbers >= 1 (>= 0 for the first and the last chunk), "
                         f"got {layers}")
    out: list[list[float]] = []
    for s in range(p):
        mine = [int(layers[c * p + s]) for c in range(v)]
        total = sum(mine)
        out.append([x / total for x in mine])
    return out


def _duration_table(p: int, v: int, forward: Sequence[float], bx: Sequence[float], bw: Sequence[float],
                    frac: Sequence[Sequence[float]]) -> list[float]:
    """Duration of every code ``(kind, group, chunk)``: base time of the group x chunk share.

    Fused backward = (dX + dW) x share; both :func:`simulate` and :func:`completion_time` evaluate
    exactly these products, so their results agree bit for bit.
    """
    table = [0.0] * (4 * p * v)
    for g in range(p):
        base = (forward[g], bx[g], bx[g] + bw[g], bw[g])
        for c in range(v):
            for k in range(4):
                table[(k * p + g) * v + c] = base[k] * frac[g][c]
    return table


# =============================================================================================
# results


class Event(NamedTuple):
    """One operation on one stage; times in seconds."""

    stage: int
    kind: str  # "F", "B" (dX, or the whole backward when fused), "W" (dW), "U" (update)
    microbatch: int  # -1 for U
    start: float
    end: float
    chunk: int = 0  # interleaved model chunk 0 .. v-1
    direction: int = 0  # DualPipe: 0 enters at stage 0, 1 enters at stage p-1
    fused: bool = False  # a B that includes dW

    def label(self) -> str:
        if self.kind == "U":
            return "U"
        tag = f"{self.kind}{self.microbatch}"
        if self.chunk:
            tag += f"c{self.chunk}"
        return tag + ("'" if self.direction else "")


@dataclass(frozen=True)
class PipelineResult:
    """One simulated step. Times in seconds, sizes in bytes, counts per step; tuples are per stage."""

    schedule: str
    p: int
    m: int
    v: int
    completion: float  # end of the last update
    busy: tuple[float, ...]  # sum of the stage's operation times, update included
    idle: tuple[float, ...]  # completion - busy
    bubble_fraction: float  # sum of idle / (p x completion)
    forward_messages: int  # activation transfers between stages
    messages: int  # activation + gradient transfers
    peak_inflight: tuple[float, ...]  # peak live micro-batch activation sets (1 = one whole layer group)
    peak_activation_bytes: tuple[float, ...]
    buffer_bytes: tuple[float, ...]  # send/receive buffers held
    peak_bytes: tuple[float, ...]  # peak activations + buffers
    parameter_copies: int
    _trace: _Trace | tuple[()] = field(default=(), repr=False, compare=False)  # (program, start, end, update spans)

    @cached_property
    def events(self) -> tuple[Event, ...]:
        """Every operation as an :class:`Event`, stage after stage in slot order, each update last."""
        if not self._trace:
            return ()
        prog, start, end, u_span = self._trace
        p = prog.p
        topo = prog.topo
        down = _halves(prog.m)[0]
        dual = prog.schedule.startswith("dualpipe")
        inter = prog.schedule == "interleaved"
        kinds = [_KIND_NAME[k] for k in prog.kind_g.tolist()]
        mbs = prog.mb_g.tolist()
        pos = prog.pos_g.tolist()
        fused = prog.fused_g.tolist()
        out: list[Event] = []
        for s in range(p):
            for g in range(prog.offsets[s], prog.offsets[s + 1]):
                i = topo[g]
                out.append(Event(s, kinds[g], mbs[g], start[i], end[i], pos[g] // p if inter else 0,
                                 1 if dual and mbs[g] >= down else 0, fused[g]))
            out.append(Event(s, "U", -1, u_span[s][0], u_span[s][1]))
        return tuple(out)

    def stage_events(self, stage: int) -> list[Event]:
        return [e for e in self.events if e.stage == stage]

    def as_dict(self, *, events: bool = False) -> dict[str, Any]:
        """Plain data in a fixed key order (JSON-ready); times in seconds, sizes in bytes."""
        d: dict[str, Any] = {
            "schedule": self.schedule,
            "stages": self.p,
            "microbatches": self.m,
            "chunks": self.v,
            "completion_s": self.completion,
            "busy_s": list(self.busy),
            "idle_s": list(self.idle),
            "bubble_fraction": self.bubble_fraction,
            "forward_messages": self.forward_messages,
            "messages": self.messages,
            "peak_inflight": list(self.peak_inflight),
            "peak_activation_bytes": list(self.peak_activation_bytes),
            "buffer_bytes": list(self.buffer_bytes),
            "peak_bytes": list(self.peak_bytes),
            "parameter_copies": self.parameter_copies,
        }
        if events:
            d["events"] = [
                {"stage": e.stage, "kind": e.kind, "microbatch": e.microbatch, "chunk": e.chunk,
                 "direction": e.direction, "fused": e.fused, "start_s": e.start, "end_s": e.end}
                for e in self.events
            ]
        return d


# =============================================================================================
# simulation


def simulate(schedule: str, p: int, m: int, forward: PerGroup, backward_input: PerGroup,
             backward_weight: PerGroup = 0.0, transfer: PerGroup = 0.0, update: PerGroup = 0.0, *, v: int = 2,
             chunk_layers: Iterable[int] | None = None, transfer_backward: PerGroup | None = None,
             activation: PerGroup = 0.0, buffer: PerGroup = 0.0) -> PipelineResult:
    """Simulate one step of ``schedule`` on ``p`` stages with ``m`` micro-batches (event model above).

    Times in seconds, per layer group (one number for all groups, or ``p`` numbers):
    ``forward`` F; ``backward_input`` dX; ``backward_weight`` dW (0 when the backward is not split:
    then pass the whole backward as ``backward_input``); ``update`` each stage's optimizer step.
    ``transfer`` is the boundary transfer of an activation (forward link), ``transfer_backward`` that
    of a gradient (backward link; default the same). ``v`` and ``chunk_layers`` apply to
    ``interleaved`` (see :func:`split_layers`). ``activation`` is the bytes of one micro-batch's
    activations of a whole layer group, ``buffer`` the bytes of one send or receive buffer.

    Slot rules (training-systems chapter 10.3.2): fill-drain all F then all B; 1F1B p-1-s warm-up
    forwards then alternating; interleaved as Megatron-LM; ZB-H1 dW(i) right after dX(i+s); ZB-H2
    2(p-1-s) warm-up forwards, dW(i) after dX(i+2s); ``dualpipe`` :data:`DUALPIPE_RULE`;
    ``dualpipe-deepseek`` DeepSeek's published ordering.

    Schedules that fuse the backward run dX + dW as one ``B``. Split schedules given
    ``backward_weight = 0`` keep their dW slots as zero-length ``W`` (ZB-H1 then times exactly like
    1F1B; activations are still released at the dW slot).
    """
    prog = _get_program(schedule, p, m, v)
    p, m, v = prog.p, prog.m, prog.v
    fwd = _per_group(forward, p, "forward time")
    bx = _per_group(backward_input, p, "backward (dX) time")
    bw = _per_group(backward_weight, p, "backward weight (dW) time")
    upd = _per_group(update, p, "update time")
    tf = _per_group(transfer, 1, "transfer time")[0]
    tb = tf if transfer_backward is None else _per_group(transfer_backward, 1, "backward transfer time")[0]
    frac = _chunk_fractions(schedule, p, v, chunk_layers)
    act = _per_group(activation, p, "activation size")
    buf = _per_group(buffer, 1, "buffer size")[0]

    table = _duration_table(p, v, fwd, bx, bw, frac)
    tr = (0.0, tf, tb)
    stage, code, dep, msg = (a.tolist() for a in (prog.stage, prog.code, prog.dep, prog.msg))
    n = prog.n_ops
    start = [0.0] * n
    end = [0.0] * n
    free = [0.0] * p
    busy = [0.0] * p
    for i in range(n):
        s = stage[i]
        t = free[s]
        d = dep[i]
        if d >= 0:
            a = end[d] + tr[msg[i]]
            if a > t:
                t = a
        dur = table[code[i]]
        e = t + dur
        start[i] = t
        end[i] = e
        free[s] = e
        busy[s] += dur
    u_end = [free[s] + upd[s] for s in range(p)]
    completion = max(u_end)
    busy = [busy[s] + upd[s] for s in range(p)]
    idle = [completion - b for b in busy]
    bubble = sum(idle) / (p * completion) if completion > 0 else 0.0

    fwd_msgs = int(np.sum(prog.msg == _MSG_FWD))
    all_msgs = int(np.sum(prog.msg != _MSG_NONE))
    units = _walk_peaks(prog, _set_sizes(prog, frac, [1.0] * p))
    act_peak = _walk_peaks(prog, _set_sizes(prog, frac, act))
    buf_bytes = [k * buf for k in buffer_counts(schedule, p)]
    return PipelineResult(
        schedule=schedule, p=p, m=m, v=v, completion=completion, busy=tuple(busy), idle=tuple(idle),
        bubble_fraction=bubble, forward_messages=fwd_msgs, messages=all_msgs,
        peak_inflight=tuple(units), peak_activation_bytes=tuple(act_peak), buffer_bytes=tuple(buf_bytes),
        peak_bytes=tuple(a + b for a, b in zip(act_peak, buf_bytes, strict=False)),
        parameter_copies=parameter_copies(schedule),
        _trace=(prog, start, end, tuple(zip(free, u_end, strict=False))))


# =============================================================================================
# activation memory


def _set_sizes(prog: _Program, frac: Sequence[Sequence[float]], per_group: Sequence[float]) -> FloatArray:
    """Size of the activation set of every path position: the group's value x the chunk's share."""
    p = prog.p
    if prog.schedule == "interleaved":
        return np.array([per_group[q % p] * frac[q % p][q // p] for q in range(prog.v * p)])
    return np.array([float(x) for x in per_group])


def _walk_peaks(prog: _Program, size_of_pos: FloatArray) -> list[float]:
    """Per stage, the peak sum of live activation sets along the slot order.

    A set is allocated by its F and released by its fused B or by its W; a stage runs one op at a
    time, so the running sum over the slot order is exact whatever the durations.
    """
    size = size_of_pos[prog.pos_g]
    release = (prog.kind_g == _W) | ((prog.kind_g == _B) & prog.fused_g)
    delta = np.where(prog.kind_g == _F, size, np.where(release, -size, 0.0))
    peaks: list[float] = []
    for s in range(prog.p):
        lo, hi = prog.offsets[s], prog.offsets[s + 1]
        peaks.append(max(0.0, float(np.cumsum(delta[lo:hi]).max())) if hi > lo else 0.0)
    return peaks


def peak_inflight(schedule: str, p: int, m: int, *, v: int = 2,
                  chunk_layers: Iterable[int] | None = None) -> list[float]:
    """Per-stage peak number of live micro-batch activation sets (for the solver's memory constraint).

    Unit: one micro-batch's activations of one whole layer group. Interleaved chunks count by their
    share of the stage's layers (1/v each unless ``chunk_layers``); DualPipe counts the sets of both
    directions (group s and group p-1-s, a whole unit each) -- its doubled parameters are
    :func:`parameter_copies`. Split schedules keep a set until its dW. p = 4, m = 8: fill-drain 8 on
    every stage; 1F1B 4, 3, 2, 1 (``min(p - s, m)``); ZB-H1 4 on every stage.
    """
    prog = _get_program(schedule, p, m, v)
    frac = _chunk_fractions(schedule, prog.p, prog.v, chunk_layers)
    return _walk_peaks(prog, _set_sizes(prog, frac, [1.0] * prog.p))


def buffer_counts(schedule: str, p: int) -> list[int]:
    """Send/receive buffers a stage holds: one send and one receive buffer per direction of flow.

    Each is one boundary tensor (a micro-batch's activation, or its gradient, at a stage boundary);
    a stage consumes what it receives and sends what it produces one operation at a time, so one of
    each suffices: 2 per stage, 4 for DualPipe (two directions), none on a single stage. With
    1 MiB buffers (bf16 [128, 4096]) and the per-micro-batch activations the chapter's peaks imply,
    this reproduces its printed MiB figures within 1 MiB (see tests/test_pipeline.py).
    """
    _check_schedule(schedule)
    p = _whole(p, "stages p", 1)
    if p == 1:
        return [0]
    return [4 if schedule.startswith("dualpipe") else 2] * p
