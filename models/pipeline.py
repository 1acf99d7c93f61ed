"""Pipeline-parallel step time and activation lifetime: a discrete-event model (chapter 10.3.2).

One training step runs ``m`` micro-batches through ``p`` pipeline stages (one card each). Every stage
executes its operations one at a time in a fixed **slot order** chosen by the schedule; an operation
starts when the stage is free *and* its input has arrived:

* ``F`` forward of a micro-batch on a stage (on one chunk of the stage when interleaved);
* ``B`` backward. With a split backward (``zb-*``, ``dualpipe*``) ``B`` is only dX, the gradient with
  respect to the stage input, which the previous stage waits for; otherwise ``B`` is the whole backward
  (dX + dW in one operation, ``Event.fused``);
* ``W`` dW, the weight gradient of the same micro-batch on the same stage; it only has to follow its
  own ``B`` and fills gaps;
* ``U`` the optimizer update of a stage, right after the stage's last backward work.

Relations (times in seconds)::

    start(op)  = max(end(previous op on the stage), arrival(input))
    arrival    = end(producer on the neighbouring stage) + transfer
    end(op)    = start(op) + duration(op)
    completion = max over stages s of (end of s's last B/W + update_s)
    idle_s     = completion - busy_s            bubble fraction = sum_s idle_s / (p x completion)

The forward direction (activations, stage s -> s+1) and the backward direction (gradients,
s+1 -> s) are independent links. A link is a pure latency (no queueing): an operation sends at most one
message per link, so links only contend when a transfer outlasts the operations that feed it.

Durations are given per *layer group* ``k = 0 .. p-1`` (the layers stage k holds in the plain
schedules): ``forward[k]``, ``backward_input[k]`` (dX), ``backward_weight[k]`` (dW). Interleaved cuts a
group into ``v`` chunks whose times are proportional to their layer counts; DualPipe runs group ``s``
for the down direction and group ``p-1-s`` for the up direction on stage ``s`` (two parameter copies).

Activation memory follows from the slot order alone: a micro-batch's activations on a stage (chunk)
are live from the start of its ``F`` until the end of the operation that completes its backward there,
the fused ``B``, or ``W`` when the backward is split. The chapter's event model keeps the whole set
until dW, and so does this one; the zero-bubble paper counts the smaller working set dW needs.

The op order depends only on ``(schedule, p, m, v)``: :func:`completion_time` runs the same max-plus
recurrence once for many duration sets (numpy, vectorised over the duration arrays).
"""

from __future__ import annotations

import contextlib
import contextvars
import heapq
import math
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Generic, NamedTuple, TypeAlias, TypeVar, overload

import numpy as np
from numpy.typing import ArrayLike, NDArray

from tpopt.errors import InputError
from tpopt.models.numeric import FloatArray, Floats

SCHEDULES = ("fill-drain", "1f1b", "interleaved", "zb-h1", "zb-h2", "dualpipe", "dualpipe-deepseek")
"""Schedule names accepted by :func:`simulate`, :func:`completion_time` and :func:`peak_inflight`."""

SPLIT_BACKWARD = frozenset({"zb-h1", "zb-h2", "dualpipe", "dualpipe-deepseek"})
"""Schedules that run dX and dW as separate operations (the others fuse them into one ``B``)."""

KINDS = ("F", "B", "W", "U")

_F, _B, _W = 0, 1, 2
_KIND_NAME = ("F", "B", "W")
_DF, _DBX, _DBF, _DW = 0, 1, 2, 3  # duration kinds: forward, dX only, fused dX + dW, dW
_MSG_NONE, _MSG_FWD, _MSG_BWD = 0, 1, 2  # link an input arrives on

Slot: TypeAlias = tuple[int, int, int, bool]
"""One op of a slot order: (kind 0 F / 1 B / 2 W, micro-batch, path position, fused backward)."""

PerGroup: TypeAlias = float | Iterable[float]
"""A time or size given once for every layer group, or one value per group."""

Index: TypeAlias = NDArray[np.integer[Any]]
"""An array of whole numbers (rows, stages, shapes)."""

_T = TypeVar("_T")


# =============================================================================================
# closed forms (chapter 10.3.2; balanced stages; zero transfer unless stated)


def fill_drain_time(p: int, m: int, tf: Floats, tb: Floats) -> Floats:
    """Fill-drain (GPipe) step time ``T = (m + p - 1)(t_f + t_b)`` [s].

    ``m`` slots of real work plus ``p - 1`` to fill and drain the pipeline; p = 4, m = 8,
    t_f = 10 ms, t_b = 20 ms -> 330 ms (training-systems chapter 10.3).
    """
    return (m + p - 1) * (np.add(tf, tb) if not _scalar(tf, tb) else tf + tb)


def utilisation(p: int, m: int) -> float:
    """Fill-drain time utilisation of a card ``u = m / (m + p - 1)``; p = 4, m = 8 -> 72.7 %."""
    return m / (m + p - 1)


def bubble_ratio_1f1b(p: int, m: int) -> float:
    """Bubble over useful time of fill-drain and 1F1B ``(p - 1) / m``; p = 4: m = 8 -> 37.5 %, m = 16 -> 18.8 %."""
    return (p - 1) / m


def bubble_ratio_interleaved(p: int, m: int, v: int = 2) -> float:
    """Bubble over useful time of interleaved 1F1B ``(1/v)(p - 1)/m`` (Megatron-LM, v chunks per stage)."""
    return (p - 1) / (v * m)


def bubble_1f1b(p: int, tf: Floats, tb: Floats, tw: Floats = 0.0) -> Floats:
    """Per-stage bubble of 1F1B and fill-drain ``(p - 1)(T_F + T_B + T_W)`` [s].

    ``T_B`` is dX and ``T_W`` dW (or the whole backward as ``tb`` and ``tw = 0``);
    p = 4, 10 + 10 + 10 ms -> 90 ms. Exact in this model with zero transfer (for any m; a uniform update adds to
    busy and completion alike).
    """
    return (p - 1) * (tf + tb + tw)


def bubble_interleaved(p: int, tf: Floats, tb: Floats, tw: Floats = 0.0, v: int = 2) -> Floats:
    """Per-stage bubble of interleaved 1F1B ``(1/v)(p - 1)(T_F + T_B + T_W)`` [s] (equal chunks).

    Exact in this model for ``m`` a multiple of ``p`` with zero transfer.
    """
    return (p - 1) * (tf + tb + tw) / v


def bubble_zb_h1(p: int, tf: Floats, tb: Floats, tw: Floats) -> Floats:
    """Per-stage bubble of ZB-H1 ``(p - 1)(T_F + T_B - T_W)`` [s] (zero-bubble paper, table 2).

    dW is postponed into the drain; p = 4, 10 + 10 - 10 ms -> 30 ms. Exact in this model (zero
    transfer, balanced stages) for ``m >= p`` while ``T_W <= T_F`` and ``T_W <= T_B``.
    """
    return (p - 1) * (tf + tb - tw)


def bubble_zb_h2(p: int, tf: Floats, tb: Floats, tw: Floats) -> Floats:
    """Per-stage bubble of ZB-H2 as the zero-bubble paper gives it ``(p - 1)(T_F + T_B - 2 T_W)`` [s].

    p = 4, 10 + 10 - 20 ms -> 0. The paper measures it on staggered steps whose optimizer
    synchronisation is bypassed; a synchronous step cannot end before the last stage has waited
    ``(p - 1) T_F`` for its first input and then done all its work: see
    :func:`bubble_zb_h2_synchronous`.
    """
    return (p - 1) * (tf + tb - 2 * tw)


def bubble_zb_h2_synchronous(p: int, tf: Floats, tb: Floats, tw: Floats) -> Floats:
    """Per-stage bubble of ZB-H2 in one synchronous step ``(p - 1) max(T_F, T_F + T_B - 2 T_W)`` [s].

    The larger of the paper's bound and the fill skew ``(p - 1) T_F``. Exact in this model (zero
    transfer, balanced stages) for ``m >= 2p`` while ``T_W <= T_F`` and ``T_W <= T_B``.
    """
    # plain numbers (what _scalar tests), spelled out so that mypy narrows the three
    if isinstance(tf, (int, float)) and isinstance(tb, (int, float)) and isinstance(tw, (int, float)):
        return (p - 1) * max(tf, tf + tb - 2 * tw)
    bubble: FloatArray = (p - 1) * np.maximum(tf, np.add(tf, tb) - 2 * np.asarray(tw))
    return bubble


def bubble_dualpipe(p: int, f_and_b: Floats, b: Floats, w: Floats) -> Floats:
    """Per-stage bubble of DualPipe, DeepSeek-V3 table 2: ``(PP/2 - 1)(F&B + B - 3W)`` [s].

    ``F&B`` is a forward and a backward executed overlapped, ``B`` the whole backward, ``W`` its dW
    part. Without overlap ``F&B = F + B``: p = 4, 30 + 20 - 30 ms -> 20 ms. This event model does not
    overlap F and B, and neither DualPipe ordering meets the formula in general (it is neither an
    upper nor a lower bound of the simulated idle time).
    """
    return (p // 2 - 1) * (f_and_b + b - 3 * w)


def parameter_copies(schedule: str) -> int:
    """Copies of its parameters a stage holds: 2 for DualPipe (one per direction), else 1."""
    _check_schedule(schedule)
    return 2 if schedule.startswith("dualpipe") else 1


def split_layers(layers: int, chunks: int) -> list[int]:
    """Split ``layers`` into ``chunks`` contiguous chunks, the first ``layers mod chunks`` one layer larger.

    36 layers into 8 chunks -> [5, 5, 5, 5, 4, 4, 4, 4] (interleaved v = 2 on 4 stages, chapter 10.3.2).
    """
    if chunks < 1 or layers < chunks:
        raise InputError(f"cannot split {layers} layers into {chunks} chunks of at least one layer each")
    q, r = divmod(layers, chunks)
    return [q + 1 if i < r else q for i in range(chunks)]


def _scalar(*xs: object) -> bool:
    return all(isinstance(x, (int, float)) for x in xs)


# =============================================================================================
# slot orders: per stage, a list of (kind, micro-batch, path position, fused)


def _check_schedule(schedule: str) -> None:
    if schedule not in SCHEDULES:
        raise InputError(f"unknown pipeline schedule {schedule!r} (use one of: {', '.join(SCHEDULES)})")


def _whole(x: object, name: str, lo: int) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < lo:
        raise InputError(f"{name} must be a whole number >= {lo}, got {x!r}")
    return int(x)


def shape_error(schedule: str, p: int, m: int, v: int = 2) -> str | None:
    """Why ``schedule`` cannot run ``p`` stages and ``m`` micro-batches, or ``None`` if it can.

    Only DeepSeek's DualPipe ordering restricts the shape (an even p and an even m >= 2p, as its
    published code asserts); the solver can use this to leave such plans out.
    """
    _check_schedule(schedule)
    if schedule == "dualpipe-deepseek" and (p % 2 or m % 2 or m < 2 * p):
        return (f"dualpipe-deepseek needs an even number of stages and an even m >= 2p "
                f"(DeepSeek's ordering asserts it); got p = {p}, m = {m}")
    return None


def _check_shape(schedule: str, p: object, m: object, v: object) -> tuple[int, int, int]:
    """Validate and normalise ``(p, m, v)``; ``v`` is 1 except for the interleaved schedule."""
    _check_schedule(schedule)
    p = _whole(p, "stages p", 1)
    m = _whole(m, "micro-batches m", 1)
    v = _whole(v, "chunks v", 1)
    if schedule != "interleaved":
        v = 1
    err = shape_error(schedule, p, m, v)
    if err:
        raise InputError(err)
    return p, m, v


@overload
def _halves(m: int) -> tuple[int, int]: ...
@overload
def _halves(m: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]: ...


def _halves(m: int | NDArray[np.int64]) -> tuple[int | NDArray[np.int64], int | NDArray[np.int64]]:
    """DualPipe split of the micro-batches: the down direction gets ``ceil(m/2)`` (ids first), the up
    direction the rest (none when m = 1)."""
    return (m + 1) // 2, m // 2


def _zb_family(a: int, c: int, mbs: Sequence[int], pos: int, split: bool) -> list[Slot]:
    """Slot order ``(F_x, B_{x-a}, W_{x-c})`` for x = 0, 1, ...: ``a`` warm-up forwards, dW lagging.

    1F1B is ``a = p-1-s`` with the backward fused; ZB-H1 adds ``c = p-1`` (dW of micro-batch i right
    after dX of micro-batch i+s); ZB-H2 is ``a = 2(p-1-s)``, ``c = 2(p-1)``.
    """
    n = len(mbs)
    ops: list[Slot] = []
    last = n + (max(a, c) if split else a)
    for x in range(last):
        if x < n:
            ops.append((_F, mbs[x], pos, False))
        b = x - a
        if 0 <= b < n:
            ops.append((_B, mbs[b], pos, not split))
        if split:
            w = x - c
            if 0 <= w < n:
                ops.append((_W, mbs[w], pos, False))
    return ops


def _order_fill_drain(p: int, m: int) -> list[list[Slot]]:
    """Fill-drain (GPipe): every forward, then every backward in reverse micro-batch order."""
    return [[(_F, i, s, False) for i in range(m)] + [(_B, i, s, True) for i in reversed(range(m))]
            for s in range(p)]


def _order_1f1b(p: int, m: int) -> list[list[Slot]]:
    """1F1B (PipeDream-flush): stage s runs min(p-1-s, m) warm-up forwards, then alternates F, B."""
    return [_zb_family(p - 1 - s, 0, range(m), s, split=False) for s in range(p)]


def _order_zb_h1(p: int, m: int) -> list[list[Slot]]:
    """ZB-H1: the 1F1B slots with dX as B; stage s runs dW(i) right after dX(i+s), its last s dW at the end."""
    return [_zb_family(p - 1 - s, p - 1, range(m), s, split=True) for s in range(p)]


def _order_zb_h2(p: int, m: int) -> list[list[Slot]]:
    """ZB-H2: stage s runs 2(p-1-s) warm-up forwards, then ``(F_x, dX_{x-2(p-1-s)}, dW_{x-2(p-1)})``."""
    return [_zb_family(2 * (p - 1 - s), 2 * (p - 1), range(m), s, split=True) for s in range(p)]


def _order_interleaved(p: int, m: int, v: int) -> list[list[Slot]]:
    """Interleaved 1F1B (Megatron-LM virtual pipeline); chunk c of stage s is path position ``c p + s``.

    Forwards go in groups of p micro-batches, chunks 0 .. v-1 within a group; backwards the same with
    the chunks reversed. Stage s runs ``min(2(p-1-s) + (v-1) g, m v)`` warm-up forwards (g = p), then
    alternates one forward and one backward, then drains the backwards. Megatron-LM needs m to be a
    multiple of p; for other m > p the last group takes the remainder (g = p + m mod p), and the warm-up
    uses that largest group, which keeps the order free of deadlocks (checked for p <= 12, m <= 60,
    v <= 4); m <= p is one group with g = p.
    """
    starts = list(range(0, m, p))
    if m > p and m % p:
        starts.pop()  # the last full group absorbs the remainder
    bounds = starts[1:] + [m]
    g_max = max([p] + [b - a for a, b in zip(starts, bounds, strict=False)])
    fwd: list[tuple[int, int]] = []
    bwd: list[tuple[int, int]] = []
    for a, b in zip(starts, bounds, strict=False):
        for c in range(v):
            fwd.extend((c, i) for i in range(a, b))
        for c in reversed(range(v)):
            bwd.extend((c, i) for i in range(a, b))
    total = m * v
    orders: list[list[Slot]] = []
    for s in range(p):
        w = min(2 * (p - 1 - s) + (v - 1) * g_max, total)
        ops = [(_F, i, c * p + s, False) for c, i in fwd[:w]]
        for k in range(total - w):
            c, i = fwd[w + k]
            ops.append((_F, i, c * p + s, False))
            c, i = bwd[k]
            ops.append((_B, i, c * p + s, True))
        ops.extend((_B, i, c * p + s, True) for c, i in bwd[total - w:])
        orders.append(ops)
    return orders


DUALPIPE_RULE = (
    "each direction (half of the micro-batches, own parameter copy) runs as split-backward 1F1B: at "
    "path position pos, p-1-pos warm-up forwards, then F and dX alternating, dW(i) right after "
    "dX(i+p-1-pos); the two directions are merged on each stage by a list schedule (earliest possible "
    "start first; ties: dX, then F, then dW, then the down direction) evaluated once at the reference "
    "proportions F = dX = dW = 10, transfer = 1, and frozen"
)
"""How the chapter's DualPipe (``"dualpipe"``) orders its slots; the order depends only on (p, m)."""

_REF_DUR = {_F: 10, _B: 10, _W: 10}  # integer reference proportions, so ties are exact
_REF_T = 1
_PRIORITY = {_B: 0, _F: 1, _W: 2}


def _order_dualpipe_chapter(p: int, m: int) -> list[list[Slot]]:
    """The chapter's DualPipe rule, :data:`DUALPIPE_RULE`.

    Down direction: micro-batches 0 .. ceil(m/2)-1 enter at stage 0 (position pos = s); up direction:
    the others enter at stage p-1 (pos = p-1-s). Per direction and stage the order is
    ``(F_x, dX_{x-a}, dW_{x-2a})`` with ``a = p-1-pos``. The chapter does not state how a stage
    interleaves its two directions; the list schedule at reference proportions fixes it (it reproduces
    306 / 558 ms, and so do the other tie orders tried).
    """
    down, up = _halves(m)
    # every op of both directions, with integer ids: the op's producer, the link latency, and the stage
    # of the op's cross-stage consumer (to wake it up)
    ops: list[tuple[Slot, int]] = []
    seq_ids: list[list[list[int]]] = []
    id_of = [-1] * (3 * m * p)  # (kind, micro-batch, position) -> op id
    for s in range(p):
        pair: list[list[int]] = []
        for n, first, pos in ((down, 0, s), (up, down, p - 1 - s)):
            a = p - 1 - pos
            ids: list[int] = []
            for op in _zb_family(a, 2 * a, range(first, first + n), pos, split=True):
                id_of[(op[0] * m + op[1]) * p + op[2]] = len(ops)
                ids.append(len(ops))
                ops.append((op, s))
            pair.append(ids)
        seq_ids.append(pair)
    n = len(ops)
    prod = [-1] * n
    lat = [0] * n
    consumer_stage = [-1] * n
    for k, ((kind, mb, pos, _), s) in enumerate(ops):
        pkey, link = _producer(kind, mb, pos, p - 1)
        if pkey is not None:
            q = id_of[(pkey[0] * m + pkey[1]) * p + pkey[2]]
            prod[k] = q
            if link != _MSG_NONE:
                lat[k] = _REF_T
                consumer_stage[q] = s
    prio = [_PRIORITY[op[0]] for op, _ in ops]
    dur = [_REF_DUR[op[0]] for op, _ in ops]
    end = [-1] * n
    ptr0 = [0] * p  # next op of each direction on each stage
    ptr1 = [0] * p
    free = [0] * p
    version = [0] * p
    out: list[list[Slot]] = [[] for _ in range(p)]
    heap: list[tuple[int, int, int, int, int]] = []
    seq0 = [ids[0] + [-1] for ids in seq_ids]  # a sentinel ends each sequence
    seq1 = [ids[1] + [-1] for ids in seq_ids]
    heappush, heappop = heapq.heappush, heapq.heappop

    def push(s: int) -> None:
        """Queue stage s's best head: (possible start, kind priority, direction, stage, version)."""
        version[s] += 1
        fs = free[s]
        best_r = best_p = best_d = -1
        k = seq0[s][ptr0[s]]
        if k >= 0:
            q = prod[k]
            if q < 0:
                best_r, best_p, best_d = fs, prio[k], 0
            elif end[q] >= 0:
                r = end[q] + lat[k]
                best_r, best_p, best_d = (r if r > fs else fs), prio[k], 0
        k = seq1[s][ptr1[s]]
        if k >= 0:
            q = prod[k]
            r = -1
            if q < 0:
                r = fs
            elif end[q] >= 0:
                r = end[q] + lat[k]
                if r < fs:
                    r = fs
            if r >= 0 and (best_d < 0 or r < best_r or (r == best_r and prio[k] < best_p)):
                best_r, best_p, best_d = r, prio[k], 1
        if best_d >= 0:
            heappush(heap, (best_r, best_p, best_d, s, version[s]))

    for s in range(p):
        push(s)
    while heap:
        t, _, d, s, ver = heappop(heap)
        if ver != version[s]:
            continue
        if d == 0:
            k = seq0[s][ptr0[s]]
            ptr0[s] += 1
        else:
            k = seq1[s][ptr1[s]]
            ptr1[s] += 1
        end[k] = free[s] = t + dur[k]
        out[s].append(ops[k][0])
        push(s)
        c = consumer_stage[k]
        if c >= 0:  # the consumer on the neighbouring stage may now be ready
            push(c)
    if any(ptr0[s] != len(seq_ids[s][0]) or ptr1[s] != len(seq_ids[s][1]) for s in range(p)):
        raise AssertionError(f"dualpipe p={p} m={m}: the direction orders deadlock")
    return out


def _order_dualpipe_deepseek(p: int, m: int) -> list[list[Slot]]:
    """DeepSeek-V3's published DualPipe ordering (``DualPipe.step`` in deepseek-ai/DualPipe), per rank.

    Phase 0 is the direction in which rank r sits in the first half (position h = min(r, p-1-r)),
    phase 1 the other one. Steps: (p/2-h-1)*2 x F0; (h+1) x [F0, F1]; (p/2-h-1) x [dX1, W, F1];
    (m/2-p+h+1) x [F0, B1, F1, B0]; (p/2-h-1) x [B1, F1, B0]; (h+1) x [B1, B0], switching to split
    backwards half-way; (p/2-h-1) x [W, dX0]; (h+1) x W. A B without its own W is the whole backward;
    W runs the oldest pending dW. The overlapped F&B pairs run one after the other here (F, then B).
    """
    return [_deepseek_rank_order(p, m, r) for r in range(p)]


def _deepseek_rank_order(p: int, m: int, r: int) -> list[Slot]:
    """Rank r's slots of DeepSeek's DualPipe ordering (:func:`_order_dualpipe_deepseek`)."""
    half = m // 2
    p2 = p // 2
    h = min(r, p - 1 - r)
    phase_dir = (1, 0) if r >= p2 else (0, 1)
    nf, nb = [0, 0], [0, 0]
    pending: deque[tuple[int, int]] = deque()
    ops: list[Slot] = []

    def key(ph: int, k: int) -> tuple[int, int]:
        d = phase_dir[ph]
        return k + (half if d == 1 else 0), (r if d == 0 else p - 1 - r)

    def fwd(ph: int) -> None:
        mb, pos = key(ph, nf[ph])
        nf[ph] += 1
        ops.append((_F, mb, pos, False))

    def bwd(ph: int, split: bool) -> None:
        mb, pos = key(ph, nb[ph])
        nb[ph] += 1
        ops.append((_B, mb, pos, not split))
        if split:
            pending.append((mb, pos))

    def wgt() -> None:
        mb, pos = pending.popleft()
        ops.append((_W, mb, pos, False))

    for _ in range((p2 - h - 1) * 2):
        fwd(0)
    for _ in range(h + 1):
        fwd(0)
        fwd(1)
    for _ in range(p2 - h - 1):
        bwd(1, True)
        wgt()
        fwd(1)
    for _ in range(half - p + h + 1):
        fwd(0)
        bwd(1, False)
        fwd(1)
        bwd(0, False)
    for _ in range(p2 - h - 1):
        bwd(1, False)
        fwd(1)
        bwd(0, False)
    split = False
    for i in range(h + 1):
        if i == (h + 1) // 2 and h % 2 == 1:
            split = True
        bwd(1, split)
        if i == (h + 1) // 2 and h % 2 == 0:
            split = True
        bwd(0, split)
    for _ in range(p2 - h - 1):
        wgt()
        bwd(0, True)
    for _ in range(h + 1):
        wgt()
    assert not pending and nf == [half, half] and nb == [half, half]
    return ops


def slot_orders(schedule: str, p: int, m: int, v: int = 2) -> list[list[Slot]]:
    """Per-stage slot order: lists of ``(kind, micro_batch, position, fused)``.

    ``kind`` is 0 F, 1 B, 2 W; ``position`` the place on the micro-batch's path (the stage index;
    ``c p + s`` for chunk c interleaved; ``p-1-s`` for DualPipe's up direction); ``fused`` marks a
    backward that includes dW.
    """
    p, m, v = _check_shape(schedule, p, m, v)
    if schedule == "fill-drain":
        return _order_fill_drain(p, m)
    if schedule == "1f1b":
        return _order_1f1b(p, m)
    if schedule == "interleaved":
        return _order_interleaved(p, m, v)
    if schedule == "zb-h1":
        return _order_zb_h1(p, m)
    if schedule == "zb-h2":
        return _order_zb_h2(p, m)
    if schedule == "dualpipe":
        return _order_dualpipe_chapter(p, m)
    return _order_dualpipe_deepseek(p, m)


# =============================================================================================
# compiled program: every op in a topological order, with its one input from another stage


@dataclass(frozen=True)
class _Program:
    schedule: str
    p: int
    m: int
    v: int
    # per op in a topological order: by longest-path level, then stage (ops of one level are independent)
    stage: NDArray[np.int32]
    code: NDArray[np.int32]  # duration code (kind * p + group) * v + chunk
    dep: NDArray[np.int32]  # topological index of the producer on another stage, -1 if none
    msg: NDArray[np.int8]  # link of that input: 1 forward, 2 backward, 0 none
    level: NDArray[np.int32]  # longest-path depth
    # per op in slot order, stage after stage ("gid")
    offsets: tuple[int, ...]  # stage s holds gids offsets[s] .. offsets[s+1]-1
    topo: NDArray[np.int32]  # gid -> topological index
    kind_g: NDArray[np.int8]
    mb_g: NDArray[np.int64]
    pos_g: NDArray[np.int64]
    fused_g: NDArray[np.bool_]

    @property
    def n_ops(self) -> int:
        return len(self.stage)


_Trace: TypeAlias = tuple[_Program, list[float], list[float], tuple[tuple[float, float], ...]]
"""What a simulated step keeps to list its events: program, start and end per op, update span per stage."""


_TICK: contextvars.ContextVar[Callable[[], None] | None] = contextvars.ContextVar("tpopt_pipeline_tick", default=None)
"""The caller's safe-point hook while :func:`ticking` (None: none)."""

TICK_EVERY = 64
"""Waves (or compile rounds, or blocks) between two calls of the hook: each is at most a few thousand array
operations, so the hook is called every few milliseconds of a long simulation."""


@contextlib.contextmanager
def ticking(tick: Callable[[], None]) -> Iterator[None]:
    """Call ``tick()`` at safe points of every long simulation run inside (in this thread): between compile
    rounds of a shape's program, between waves of its recurrence, between blocks of duration sets. The
    hook may raise (a caller's time limit) -- it is called only between complete steps, and nothing is
    cached from a simulation it stopped, so the next call starts afresh. This module knows nothing of
    the caller: the optimizer passes its clock's checkpoint (:mod:`tpopt.optimizer.limits`)."""
    token = _TICK.set(tick)
    try:
        yield
    finally:
        _TICK.reset(token)


def _tick() -> None:
    tick = _TICK.get()
    if tick is not None:
        tick()


def _producer(kind: int, mb: int, pos: int, last_pos: int) -> tuple[tuple[int, int, int] | None, int]:
    """The op whose end an op waits for, and the link it arrives on (before same-stage elision)."""
    if kind == _F:
        return ((_F, mb, pos - 1), _MSG_FWD) if pos > 0 else (None, _MSG_NONE)
    if kind == _B:
        return ((_B, mb, pos + 1), _MSG_BWD) if pos < last_pos else ((_F, mb, pos), _MSG_NONE)
    return (_B, mb, pos), _MSG_NONE


class _ShapeCache(Generic[_T]):
    """Per-shape results (compiled programs, wave plans) kept up to a total number of operations, least
    recently used first out: sized to the space's shapes, not to a count that a table walks in a cycle."""

    def __init__(self, fn: Callable[..., tuple[_T, int]], budget: int):
        self.fn = fn
        self.budget = budget
        self.items: dict[tuple[Hashable, ...], tuple[_T, int]] = {}
        self.ops = 0

    def __call__(self, *key: Hashable) -> _T:
        got = self.items.pop(key, None)
        if got is None:
            got = self.fn(*key)
            self.ops += got[1]
            while self.items and self.ops > self.budget:
                self.ops -= self.items.pop(next(iter(self.items)))[1]
        self.items[key] = got
        return got[0]

    def cache_clear(self) -> None:
        self.items.clear()
        self.ops = 0


CACHE_OPS = 4_000_000
"""Operations (summed over shapes) whose compiled programs and wave plans are kept (~100 B each)."""


def _compile(schedule: str, p: int, m: int, v: int) -> tuple[_Program, int]:
    """Compile the slot orders into a topological order (cached; depends only on the shape)."""
    orders = slot_orders(schedule, p, m, v)
    inter = schedule == "interleaved"
    npos = v * p if inter else p
    lens = [len(ops) for ops in orders]
    offsets = [0]
    for count in lens:
        offsets.append(offsets[-1] + count)
    n = offsets[-1]
    flat = np.array([op for ops in orders for op in ops], dtype=np.int64).reshape(n, 4)
    kind, mb, pos, fused = flat[:, 0], flat[:, 1], flat[:, 2], flat[:, 3].astype(bool)
    stage_g = np.repeat(np.arange(p), lens)
    gid = np.arange(n)
    gid_of = np.full(3 * m * npos, -1, dtype=np.int64)
    gid_of[(kind * m + mb) * npos + pos] = gid
    # the op each op waits for (_producer), and the link it arrives on
    is_f, is_b = kind == _F, kind == _B
    p_kind = np.where(is_f | (is_b & (pos == npos - 1)), _F, _B)
    p_pos = np.where(is_f, pos - 1, np.where(is_b & (pos < npos - 1), pos + 1, pos))
    has = ~(is_f & (pos == 0))
    prod = np.where(has, gid_of[np.where(has, (p_kind * m + mb) * npos + p_pos, 0)], -1)
    link = np.where(is_f & has, _MSG_FWD, np.where(is_b & (pos < npos - 1), _MSG_BWD, _MSG_NONE))
    same = has & (stage_g[np.maximum(prod, 0)] == stage_g)
    bad = same & (prod >= gid)  # same stage: the slot order itself must respect the input
    if bad.any():
        g = int(np.flatnonzero(bad)[0])
        raise AssertionError(f"{schedule}: stage {stage_g[g]} runs {tuple(flat[g, :3])} before its input")
    prod = np.where(same, -1, prod)
    link = np.where(prod >= 0, link, _MSG_NONE)
    group, chunk = (pos % p, pos // p) if inter else (pos, 0 * pos)
    k = np.where(is_f, _DF, np.where(kind == _W, _DW, np.where(fused, _DBF, _DBX)))
    code = (k * p + group) * v + chunk
    # levels: place ops stage by stage as far as their inputs allow, round robin until all are placed
    prod_l = prod.tolist()
    level = [-1] * n
    ptr = offsets[:-1]
    next_level = [0] * p
    placed = 0
    rounds = 0
    while placed < n:
        rounds += 1
        if rounds % TICK_EVERY == 0:
            _tick()
        progressed = False
        for s in range(p):
            j, hi, lv0 = ptr[s], offsets[s + 1], next_level[s]
            j0 = j
            while j < hi:
                q = prod_l[j]
                lv = lv0
                if q >= 0:
                    lq = level[q]
                    if lq < 0:
                        break  # input not produced yet: go on with the other stages
                    if lq >= lv:
                        lv = lq + 1
                level[j] = lv
                lv0 = lv + 1
                j += 1
            if j != j0:
                placed += j - j0
                ptr[s] = j
                next_level[s] = lv0
                progressed = True
        if not progressed:
            stuck = {s: orders[s][ptr[s] - offsets[s]] for s in range(p) if ptr[s] < offsets[s + 1]}
            raise AssertionError(f"{schedule} p={p} m={m} v={v}: slot order deadlocks at {stuck}")
    level_g = np.asarray(level, dtype=np.int64)
    order = np.lexsort((stage_g, level_g))  # topological: by level, then stage
    topo = np.empty(n, dtype=np.int64)
    topo[order] = np.arange(n)
    dep = np.where(prod[order] >= 0, topo[np.maximum(prod[order], 0)], -1)
    i32 = np.int32
    prog = _Program(
        schedule, p, m, v, stage=stage_g[order].astype(i32), code=code[order].astype(i32), dep=dep.astype(i32),
        msg=link[order].astype(np.int8), level=level_g[order].astype(i32), offsets=tuple(offsets),
        topo=topo.astype(i32), kind_g=kind.astype(np.int8), mb_g=mb, pos_g=pos, fused_g=fused)
    return prog, n


_program = _ShapeCache(_compile, CACHE_OPS)


def _get_program(schedule: str, p: int, m: int, v: int) -> _Program:
    return _program(schedule, *_check_shape(schedule, p, m, v))


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
    5/9 and 4/9 of its time. Without ``chunk_layers`` every chunk is 1/v of its stage.
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
    if any(isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < 1 for x in layers):
        raise InputError(f"chunk layers must be whole numbers >= 1, got {layers}")
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
# vectorised completion time (solver)


@dataclass(frozen=True)
class _Wave:
    at: int  # the wave's ops are rows at .. at+n-1 of the ring of recent end times (wrapping around)
    n: int
    stage: slice | Index  # their stages (a slice when they are consecutive stages)
    code: Index
    full: bool  # every stage present: stage == arange(p)
    in_rows: slice | Index  # rows of the wave that wait for a message (a slice when contiguous) ...
    in_slots: Index  # ... and the ring rows holding the senders' end times


def _wave_plan(schedule: str, p: int, m: int, v: int) -> tuple[tuple[tuple[_Wave, ...], int], int]:
    """Group the program's ops by level (every op of a wave is independent of the others) and give
    every op a row of a ring buffer of end times, as long as the longest wait of a message in
    program rows: a row is overwritten only after its message has been read."""
    prog = _program(schedule, p, m, v)
    level = prog.level
    rows = np.arange(prog.n_ops)
    has = prog.dep >= 0
    ring = int((rows[has] - prog.dep[has]).max()) + 1 if has.any() else 1
    bounds = [0] + (np.flatnonzero(np.diff(level)) + 1).tolist() + [prog.n_ops]
    ring = max(ring, max(hi - lo for lo, hi in zip(bounds, bounds[1:], strict=False)) if prog.n_ops else 1)
    waves: list[_Wave] = []
    for i, (lo, hi) in enumerate(zip(bounds, bounds[1:], strict=False)):
        if i % TICK_EVERY == TICK_EVERY - 1:
            _tick()
        st = prog.stage[lo:hi].astype(np.int64)
        rows_in = np.flatnonzero(prog.dep[lo:hi] >= 0)
        full = hi - lo == p and bool(np.all(st == np.arange(p)))
        waves.append(_Wave(lo % ring, hi - lo, _as_slice(st), prog.code[lo:hi].astype(np.int64), full,
                           _as_slice(rows_in), prog.dep[lo:hi][rows_in].astype(np.int64) % ring))
    return (tuple(waves), ring), prog.n_ops


_waves = _ShapeCache(_wave_plan, CACHE_OPS)


def _as_slice(rows: Index) -> slice | Index:
    """A run of consecutive row numbers as a slice (numpy then works on views, without copies)."""
    if len(rows) and rows[-1] - rows[0] == len(rows) - 1:
        return slice(int(rows[0]), int(rows[-1]) + 1)
    return rows


def _as_array(x: ArrayLike, what: str) -> FloatArray:
    try:
        a = np.asarray(x, dtype=float)
    except (TypeError, ValueError):
        raise InputError(f"{what}: expected a number or an array of numbers, got {x!r}") from None
    if not np.all(np.isfinite(a)) or np.any(a < 0):
        raise InputError(f"{what}: every value must be finite and >= 0")
    return a


def completion_time(schedule: str, p: int, m: int, forward: ArrayLike, backward_input: ArrayLike,
                    backward_weight: ArrayLike, transfer: ArrayLike, update: ArrayLike, *, v: int = 2,
                    chunk_layers: Iterable[int] | None = None, block: int = 2048,
                    per_group: bool = False) -> FloatArray:
    """Step completion time [s] for many duration sets at once, vectorised over the time arguments.

    ``forward``, ``backward_input`` (dX), ``backward_weight`` (dW), ``transfer`` (both links) and
    ``update`` may be numbers or numpy arrays; they broadcast to one shape and each element is one
    balanced pipeline (the same times on every layer group). Fill-drain and 1F1B are evaluated in
    closed form (:func:`completion_closed_form`, one critical path for every duration set); the other
    schedules run the event model's max-plus recurrence ``start = max(stage free, input arrival)``,
    ``end = start + duration`` once over the ops with vector durations, level by level (the op order
    depends only on ``(schedule, p, m, v)``). Result: an array of the broadcast shape, equal
    element-wise to ``simulate(...).completion`` -- bit for bit for the recurrence, and for the closed
    forms whenever the sums are exact (whole-number durations); otherwise within rounding.

    When the backward is not split, pass ``backward_weight = 0`` and the whole backward as
    ``backward_input``: fused schedules run dX + dW as one op anyway, and split schedules (zb-*,
    dualpipe*) then keep zero-length dW ops (ZB-H1 times like 1F1B). ``block`` bounds memory: that
    many duration sets are evaluated together. Results of small calls are remembered per shape
    (:data:`MEMO_ENTRIES`), so repeated evaluations of the same plans cost a lookup.

    ``per_group=True``: ``forward``, ``backward_input``, ``backward_weight`` and ``update`` carry a
    leading axis of length p, one duration per layer group (uneven stages: embedding on the first, LM
    head on the last, unequal layer counts), like :func:`simulate`'s per-group lists; an argument without
    it (a number, or a first axis of another length) is the same on every group. ``transfer`` has no
    group axis; the remaining axes broadcast and shape the result. Alike stages take the balanced path.
    """
    p, m, v = _check_shape(schedule, p, m, v)
    if per_group:
        return _completion_per_group(schedule, p, m, v, forward, backward_input, backward_weight, transfer, update,
                                     chunk_layers, block)
    named = ((forward, "forward time"), (backward_input, "backward (dX) time"),
             (backward_weight, "backward weight (dW) time"), (transfer, "transfer time"), (update, "update time"))
    arrays: Sequence[FloatArray] = [_as_array(x, w) for x, w in named]
    try:
        arrays = np.broadcast_arrays(*arrays)
    except ValueError:
        raise InputError("completion_time: the duration arrays do not broadcast to one shape") from None
    shape = arrays[0].shape
    frac = _chunk_fractions(schedule, p, v, chunk_layers)
    if schedule in CLOSED_FORM:
        return np.asarray(completion_closed_form(schedule, p, m, *arrays), dtype=float).reshape(shape)
    flat = [a.reshape(-1) for a in arrays]
    key = (schedule, p, m, v, None if chunk_layers is None else tuple(int(x) for x in chunk_layers))
    return _MEMO.evaluate(key, flat, lambda *d: _completion_recurrence(schedule, p, m, v, frac, d, block)
                          ).reshape(shape)


def _group_arrays(p: int, forward: ArrayLike, backward_input: ArrayLike, backward_weight: ArrayLike,
                  transfer: ArrayLike, update: ArrayLike) -> tuple[list[FloatArray], FloatArray, tuple[int, ...]]:
    """Per-group durations given with a leading group axis of length p (or without one: the same on
    every group), returned with the group axis last, broadcast to (rest..., p); the transfer to (rest...)."""
    named = ((forward, "forward time"), (backward_input, "backward (dX) time"),
             (backward_weight, "backward weight (dW) time"), (update, "update time"))
    groups = []
    for x, w in named:
        g = _as_array(x, w)
        groups.append(np.moveaxis(g, 0, -1) if g.ndim and g.shape[0] == p else g[..., None])
    tr = _as_array(transfer, "transfer time")
    try:
        lead = np.broadcast_shapes(*(g.shape[:-1] for g in groups), tr.shape)
    except ValueError:
        raise InputError("completion_time: the duration arrays do not broadcast to one shape") from None
    groups = [np.broadcast_to(g, lead + (p,)) for g in groups]
    return groups, np.broadcast_to(tr, lead), lead


def _completion_per_group(schedule: str, p: int, m: int, v: int, forward: ArrayLike, backward_input: ArrayLike,
                          backward_weight: ArrayLike, transfer: ArrayLike, update: ArrayLike,
                          chunk_layers: Iterable[int] | None, block: int) -> FloatArray:
    (f, x, w, u), tr, lead = _group_arrays(p, forward, backward_input, backward_weight, transfer, update)
    if all(np.all(a == a[..., :1]) for a in (f, x, w, u)):  # balanced after all
        return completion_time(schedule, p, m, f[..., 0], x[..., 0], w[..., 0], tr, u[..., 0], v=v,
                               chunk_layers=chunk_layers, block=block)
    frac = _chunk_fractions(schedule, p, v, chunk_layers)
    flat = [a.reshape(-1, p) for a in (f, x, w)] + [tr.reshape(-1), u.reshape(-1, p)]
    return _completion_recurrence(schedule, p, m, v, frac, flat, block).reshape(lead)


def _completion_recurrence(schedule: str, p: int, m: int, v: int, frac: Sequence[Sequence[float]],
                           flat: Sequence[FloatArray], block: int = 2048) -> FloatArray:
    """The event model's recurrence over flat duration arrays (forward, dX, dW, transfer, update);
    forward, dX, dW and update are one value per set, or (sets, p) per layer group."""
    waves, ring = _waves(schedule, p, m, v)
    out = np.empty(flat[0].shape[0])
    step = max(1, min(int(block), RECURRENCE_CELLS // ring))
    for lo in range(0, out.size, step):
        _tick()
        hi = min(out.size, lo + step)
        out[lo:hi] = _completion_block(p, v, waves, ring, frac, *(a[lo:hi] for a in flat))
    return out


RECURRENCE_CELLS = 4_000_000
"""Ring rows x duration sets the recurrence holds at once (8 bytes each)."""


MEMO_ENTRIES = 250_000
"""Completion times remembered across calls (duration sets, all shapes together); oldest shapes go first."""
MEMO_CALL = 4096  # calls with more duration sets than this are computed without the memo


class _CompletionMemo:
    """Completion times by shape and exact duration tuple, for the small repeated calls of the
    evaluator and the enumerator (the same plan's compute evaluated under many other choices)."""

    def __init__(self, limit: int):
        self.limit = limit
        self.shapes: dict[Hashable, dict[tuple[float, ...], float]] = {}
        self.size = 0

    def evaluate(self, key: Hashable, flat: Sequence[FloatArray], compute: Callable[..., FloatArray]) -> FloatArray:
        n = flat[0].size
        if n > MEMO_CALL:
            return compute(*flat)
        known = self.shapes.get(key)
        if known is None:
            known = self.shapes[key] = {}
        else:  # most recently used last
            self.shapes[key] = self.shapes.pop(key)
        rows = list(zip(*(a.tolist() for a in flat), strict=False))
        out = np.empty(n)
        miss: list[int] = []
        for i, r in enumerate(rows):
            val = known.get(r)
            if val is None:
                miss.append(i)
            else:
                out[i] = val
        if miss:
            idx = np.asarray(miss)
            got = compute(*(a[idx] for a in flat))
            out[idx] = got
            for i, g in zip(miss, got.tolist(), strict=False):
                known[rows[i]] = g
            self.size += len(miss)
            while self.size > self.limit and len(self.shapes) > 1:
                oldest = next(iter(self.shapes))
                if oldest == key:
                    break
                self.size -= len(self.shapes.pop(oldest))
        return out

    def clear(self) -> None:
        self.shapes.clear()
        self.size = 0


_MEMO = _CompletionMemo(MEMO_ENTRIES)


def shape_ok(schedule: str, p: ArrayLike, m: ArrayLike) -> NDArray[np.bool_]:
    """Vectorised ``shape_error(...) is None``: False only for DeepSeek's DualPipe off its shapes."""
    _check_schedule(schedule)
    p, m = np.broadcast_arrays(_ints(p), _ints(m))
    if schedule != "dualpipe-deepseek":
        return np.ones(p.shape, dtype=bool)
    ok: NDArray[np.bool_] = (p <= 1) | ((p % 2 == 0) & (m % 2 == 0) & (m >= 2 * p))
    return ok


def group_shapes(p: ArrayLike, m: ArrayLike) -> tuple[list[tuple[int, int]], Index, Index]:
    """Group rows by shape: ``(shapes, order, cuts)`` with the distinct (p, m) pairs (sorted) and the
    rows of shape k at ``order[cuts[k]:cuts[k + 1]]`` (one sort of a combined integer key)."""
    p, m = _ints(p).reshape(-1), _ints(m).reshape(-1)
    key = p * (int(m.max(initial=0)) + 1) + m
    if key.size and 0 <= key.min() and key.max() < 2**16:  # numpy sorts 16-bit integers by radix: linear time
        key = key.astype(np.uint16)
    order = np.argsort(key, kind="stable")
    ordered = key[order]
    cuts = np.concatenate([[0], np.flatnonzero(ordered[1:] != ordered[:-1]) + 1, [len(key)]]) if key.size \
        else np.zeros(1, dtype=np.intp)
    first = order[cuts[:-1]]
    return list(zip(p[first].tolist(), m[first].tolist(), strict=False)), order, cuts


def completion_for_shapes(schedule: str, p: ArrayLike, m: ArrayLike, forward: ArrayLike, backward_input: ArrayLike,
                          backward_weight: ArrayLike, transfer: ArrayLike, update: ArrayLike = 0.0, *,
                          v: int = 2) -> FloatArray:
    """Exact completion times for arrays of shapes (p > 1 and m >= 1, whole numbers) and durations.

    Everything broadcasts. Closed-form schedules are evaluated in one vectorised expression; the
    others once per distinct shape with all of that shape's duration sets together. Shapes the
    schedule cannot run give ``inf``.
    """
    _check_schedule(schedule)
    p, m, tf, tx, tw, tr, up = np.broadcast_arrays(_ints(p), _ints(m), *(np.asarray(x, dtype=float) for x in (
        forward, backward_input, backward_weight, transfer, update)))
    shape = p.shape
    p, m, tf, tx, tw, tr, up = (a.reshape(-1) for a in (p, m, tf, tx, tw, tr, up))
    ok = shape_ok(schedule, p, m)
    if schedule in CLOSED_FORM:
        out = np.asarray(completion_closed_form(schedule, p, m, tf, tx, tw, tr, up), dtype=float)
        return np.where(ok, out, np.inf).reshape(shape)
    out = np.full(p.size, np.inf)
    sel = np.flatnonzero(ok)
    if sel.size:
        shapes, order, bounds = group_shapes(p[sel], m[sel])
        for k, (pv, mv) in enumerate(shapes):
            rows = sel[order[bounds[k]:bounds[k + 1]]]
            out[rows] = completion_time(schedule, pv, mv, tf[rows], tx[rows], tw[rows], tr[rows], up[rows], v=v)
    return out.reshape(shape)


def _completion_block(p: int, v: int, waves: Sequence[_Wave], ring: int, frac: Sequence[Sequence[float]],
                      tf: FloatArray, bx: FloatArray, bw: FloatArray, tr: FloatArray, upd: FloatArray) -> FloatArray:
    k = tf.shape[0]
    grouped = tf.ndim == 2  # (sets, p): one duration per layer group
    # distinct (duration kind, group if uneven, chunk share) rows; every code maps onto one of them
    rows_of_key: dict[tuple[int, int, float], int] = {}
    row_of = np.zeros(4 * p * v, dtype=np.int64)
    bases = (tf, bx, bx + bw, bw)
    columns: list[FloatArray] = []
    for kind in range(4):
        for g in range(p):
            for c in range(v):
                key = (kind, g if grouped else -1, frac[g][c])
                if key not in rows_of_key:
                    rows_of_key[key] = len(columns)
                    columns.append((bases[kind][:, g] if grouped else bases[kind]) * frac[g][c])
                row_of[(kind * p + g) * v + c] = rows_of_key[key]
    table = np.stack(columns)
    # preallocated work arrays: fresh megabyte-sized temporaries per wave would dominate the time
    ends = np.empty((ring, k))  # recent end times, by program row modulo the ring
    free = np.zeros((p, k))
    work = np.empty((p, k))
    tmp = np.empty((p, k))
    for i, w in enumerate(waves):
        if i % TICK_EVERY == TICK_EVERY - 1:
            _tick()
        n = w.n
        start = work[:n]
        if w.full:
            np.copyto(start, free)
        elif isinstance(w.stage, slice):
            np.copyto(start, free[w.stage])
        else:
            np.take(free, w.stage, axis=0, out=start, mode="clip")
        n_in = len(w.in_slots)
        if n_in:  # arrival = the sender's end + transfer
            arr = tmp[:n_in]
            np.take(ends, w.in_slots, axis=0, out=arr, mode="clip")
            np.add(arr, tr, out=arr)
            if isinstance(w.in_rows, slice):
                sub = start[w.in_rows]
                np.maximum(sub, arr, out=sub)
            else:
                start[w.in_rows] = np.maximum(start[w.in_rows], arr)
        rows = row_of[w.code]
        r0 = rows[0]
        if n == 1 or (rows == r0).all():
            np.add(start, table[r0], out=start)  # one duration row for the whole wave
        else:
            dur = tmp[:n]
            np.take(table, rows, axis=0, out=dur, mode="clip")
            np.add(start, dur, out=start)
        if w.full:
            free, work = work, free  # the wave covers every stage: swap instead of copying back
        else:
            free[w.stage] = start
        a = w.at
        if a + n <= ring:
            ends[a:a + n] = start
        else:
            cut = ring - a
            ends[a:] = start[:cut]
            ends[:n - cut] = start[cut:]
    if upd.ndim == 2:  # per-stage updates: completion = max over stages of (free + update)
        latest: FloatArray = (free + upd.T).max(axis=0)
        return latest
    completion: FloatArray = free.max(axis=0) + upd
    return completion


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


# =============================================================================================
# closed forms and bounds for the solver (vectorised over shapes and durations)
#
# The solver needs a pipeline's completion time and activation peak for every (schedule, p, m) shape
# of a design space and many duration sets per shape: far too many for the event model. Two facts
# keep that cheap:
#   * fill-drain and 1F1B with balanced stages have exact closed forms (one critical path for every
#     duration set, derived below and checked against the event model);
#   * every other schedule has closed-form *bounds* lo <= completion <= hi, each the length of a path
#     the event model must traverse (lo) or of a valid timetable (hi), so a solver can prune with
#     them and evaluate exactly only the few layouts it proposes.
# In-flight peaks depend on the slot order alone and have exact closed forms, except the chapter's
# list-scheduled DualPipe, which gets bounds (and the exact walk when asked for one shape).

CLOSED_FORM = frozenset({"fill-drain", "1f1b"})
"""Schedules whose balanced completion time :func:`completion_time` evaluates in closed form."""

BOUND_SLACK = 1e-12
"""Relative slack on the closed-form bounds of the other schedules: the bounds sum the same
durations as the event model in another order, so they may differ from it in the last bits."""


def _ints(x: ArrayLike) -> NDArray[np.int64]:
    return np.asarray(x, dtype=np.int64)


def transfers_1f1b(p: ArrayLike, m: ArrayLike) -> NDArray[np.int64]:
    """Transfers on the critical path of balanced 1F1B: ``2 (p - 1 + floor((m - 1)(p - 1) / p))``.

    The fill and drain cross p - 1 links each way; in the steady state every further micro-batch
    adds a round trip on (p - 1) / p of the links (stage s waits for the gradient of the micro-batch
    its neighbour has just received). p = 4, m = 8 -> 16. Fill-drain crosses each link once per
    direction: ``2 (p - 1)``.
    """
    p, m = _ints(p), _ints(m)
    return 2 * (p - 1 + ((m - 1) * (p - 1)) // p)


def completion_closed_form(schedule: str, p: ArrayLike, m: ArrayLike, forward: ArrayLike, backward_input: ArrayLike,
                           backward_weight: ArrayLike, transfer: ArrayLike, update: ArrayLike) -> FloatArray:
    """Exact completion time [s] of fill-drain and 1F1B with balanced stages (both links ``transfer``).

    ``T = (m + p - 1)(t_f + t_b) + n_x t_x + t_u`` with the whole backward ``t_b = dX + dW`` (both
    schedules fuse it) and n_x transfers on the critical path: ``2 (p - 1)`` for fill-drain,
    :func:`transfers_1f1b` for 1F1B. One path is critical for every duration set, so this equals the
    event model in real arithmetic (bit for bit when the durations are whole numbers; otherwise the
    two sum the same terms in a different order). p = 4, m = 8, 10 / 20 / 1 / 1 ms: fill-drain
    337 ms, 1F1B 347 ms (training-systems chapter 10.3). Every argument broadcasts, p and m included.
    """
    _check_schedule(schedule)
    if schedule not in CLOSED_FORM:
        raise InputError(f"no closed form for {schedule!r} (use one of: {', '.join(sorted(CLOSED_FORM))})")
    p, m = _ints(p), _ints(m)
    n_x = 2 * (p - 1) if schedule == "fill-drain" else transfers_1f1b(p, m)
    tb = np.add(backward_input, backward_weight)
    completion: FloatArray = (m + p - 1) * (np.asarray(forward, dtype=float) + tb) \
        + n_x * np.asarray(transfer, dtype=float) + np.asarray(update, dtype=float)
    return completion


def _interleaved_gmax(p: ArrayLike, m: ArrayLike) -> NDArray[np.int64]:
    """Largest micro-batch group of the interleaved order: p, or p + m mod p when m > p (the last
    full group absorbs the remainder)."""
    p, m = _ints(p), _ints(m)
    return np.where((m > p) & (m % np.maximum(p, 1) != 0), p + m % np.maximum(p, 1), p)


def completion_bounds(schedule: str, p: ArrayLike, m: ArrayLike, forward: ArrayLike, backward_input: ArrayLike,
                      backward_weight: ArrayLike, transfer: ArrayLike, update: ArrayLike, *, v: int = 2,
                      per_group: bool = False,
                      chunk_layers: Iterable[int] | None = None) -> tuple[FloatArray, FloatArray]:
    """Closed-form ``(lo, hi)`` with ``lo <= completion <= hi`` [s]; balanced stages, equal chunks.

    Arguments as :func:`completion_time`; p and m broadcast too. For fill-drain and 1F1B both are the
    exact :func:`completion_closed_form`. Otherwise (w = F + dX + dW per micro-batch, t the transfer,
    U the update; ZB schedules with a = warm-up forwards of stage 0 and k = dW left on the last stage
    after its last dX):

    * lo is the longest of a few paths every run must take, each a sum of durations along
      dependencies: the last stage waits (p - 1)(F + t) for its first input and then works m w
      (``A``); the last stage's work up to its last dX, then that gradient back to stage 0, then
      stage 0's remaining dW (``B``: ``(p-1)(F+t) + m(F+dX) + (m-k) dW + (p-1)(dX+t) + dW``); the
      first micro-batch's round trip to stage 0's first dX, then all of stage 0's remaining work
      (``D``). Interleaved uses the chunk-0 path (F/v, dX/v); DualPipe the start of the middle stage,
      ``floor((p-1)/2)(F + t)``, before its m w of work, and the round trip of the last down
      micro-batch. Without transfers, ZB-H1 and ZB-H2 with m >= 2p and dW <= min(F, dX), and
      interleaved with m a multiple of p, meet lo exactly (the zero-bubble paper's and Megatron-LM's
      bubbles);
    * hi is a serial timetable: every operation of every stage one after the other, each message
      adding t, then the update: ``p m w + 2 m (v p - 1) t + U``.

    Both carry a relative slack of :data:`BOUND_SLACK` for rounding. ``per_group=True`` (a single
    shape, durations with a leading group axis as in :func:`completion_time`) sums the same paths group
    by group.
    """
    _check_schedule(schedule)
    if per_group:
        return _bounds_per_group(schedule, *_check_shape(schedule, p, m, v), forward, backward_input,
                                 backward_weight, transfer, update, chunk_layers)
    p, m = _ints(p), _ints(m)
    F = np.asarray(forward, dtype=float)
    X = np.asarray(backward_input, dtype=float)
    W = np.asarray(backward_weight, dtype=float)
    t = np.asarray(transfer, dtype=float)
    U = np.asarray(update, dtype=float)
    if schedule in CLOSED_FORM:
        exact = completion_closed_form(schedule, p, m, F, X, W, t, U)
        return exact, exact
    w = F + X + W
    if schedule in ("zb-h1", "zb-h2"):
        a0 = (p - 1) if schedule == "zb-h1" else 2 * (p - 1)
        k = np.minimum(p, m) if schedule == "zb-h1" else np.minimum(2 * p - 1, m)
        fill = (p - 1) * (F + t)
        lo_a = fill + m * w
        lo_b = fill + m * (F + X) + (m - k) * W + (p - 1) * (X + t) + W
        lo_d = fill + F + X + (p - 1) * (X + t) + (m - 1) * X + m * W + np.maximum(0, m - a0 - 1) * F
        lo = np.maximum(np.maximum(lo_a, lo_b), lo_d)
        hops = p - 1
    elif schedule == "interleaved":
        v = _whole(v, "chunks v", 1)
        fill = (p - 1) * (F / v + t)
        lo = fill + m * w + (p - 1) * ((X + W) / v + t)
        hops = v * p - 1
    else:  # both DualPipe orderings
        start = np.where(m > 1, (p - 1) // 2, p - 1) * (F + t)
        down = (m + 1) // 2
        lo = np.maximum(start + m * w, (down - 1) * F + p * (F + X) + W + 2 * (p - 1) * t)
        hops = p - 1
    hi = p * m * w + 2 * m * hops * t + U
    lo = np.where(p > 1, lo + U, m * w + U)
    hi = np.where(p > 1, hi, m * w + U)
    return lo * (1 - BOUND_SLACK), hi * (1 + BOUND_SLACK)


def _groups_first(p: int, forward: ArrayLike, backward_input: ArrayLike, backward_weight: ArrayLike,
                  transfer: ArrayLike, update: ArrayLike) -> tuple[list[FloatArray], FloatArray, tuple[int, ...]]:
    """Per-group durations as :func:`_group_arrays` takes them, kept with the group axis first (p, rest...)
    -- a group is then a contiguous block and sums, maxima and prefix sums over groups are elementwise
    operations on whole blocks -- broadcast along the group axis only; the transfer as (rest...)."""
    named = ((forward, "forward time"), (backward_input, "backward (dX) time"),
             (backward_weight, "backward weight (dW) time"), (update, "update time"))
    groups = [_as_array(x, w) for x, w in named]
    groups = [g if g.ndim and g.shape[0] == p else g[None] for g in groups]
    tr = _as_array(transfer, "transfer time")
    try:
        lead = np.broadcast_shapes(*(g.shape[1:] for g in groups), tr.shape)
    except ValueError:
        raise InputError("completion_time: the duration arrays do not broadcast to one shape") from None
    groups = [np.broadcast_to(g.reshape(g.shape[:1] + (1,) * (len(lead) + 1 - g.ndim) + g.shape[1:]),
                              (p,) + (1,) * (len(lead) + 1 - g.ndim) + g.shape[1:]) for g in groups]
    return groups, tr, lead


def completion_bounds_rows(schedule: str, p: int, m: ArrayLike, forward: ArrayLike, backward_input: ArrayLike,
                           backward_weight: ArrayLike, transfer: ArrayLike, update: ArrayLike = 0.0, *, v: int = 2,
                           chunk_layers: Iterable[int] | None = None,
                           columns: NDArray[np.intp] | None = None) -> tuple[FloatArray, FloatArray]:
    """:func:`completion_bounds` with durations per layer group (a leading group axis, as ``per_group``)
    for one stage count ``p`` and a micro-batch count per row: ``m`` is an integer array that broadcasts
    with the durations' rows, so every pipeline shape of one p is bounded in one vectorised pass (the
    solver's tables). Rows whose shape the schedule cannot run (:func:`shape_error`) get inf.

    ``columns`` (one index per row): the durations (p, u) and the update are given once per distinct
    duration set, row r taking set ``columns[r]`` (with its own ``m`` and ``transfer``); every sum over
    the groups is formed on the u sets, and the same numbers result as from the rows' durations."""
    _check_schedule(schedule)
    p = _whole(p, "stages p", 1)
    v = _whole(v, "chunks v", 1) if schedule == "interleaved" else 1
    m = _ints(m)
    if np.any(m < 1):
        raise InputError("micro-batches m must be whole numbers >= 1")
    bad = np.zeros(m.shape, dtype=bool)
    for mv in np.unique(m).tolist():
        if shape_error(schedule, p, int(mv), v):
            bad |= m == mv
    lo, hi = _bounds_per_group(schedule, p, m, v, forward, backward_input, backward_weight, transfer, update,
                               chunk_layers, columns)
    return np.where(bad, np.inf, lo), np.where(bad, np.inf, hi)


def group_bound_form(schedule: str) -> str:
    """The closed form :func:`_bounds_per_group` bounds a (base) schedule with; schedules of one form get the same
    ``(lo, hi)`` from the same durations, bit for bit, but on the shapes :func:`shape_ok` rules out (inf there):
    ``"fused"`` for fill-drain and 1F1B (one fused backward, the same paths), ``"dualpipe"`` for both DualPipe
    orderings, the schedule itself otherwise (interleaved, ZB-H1, ZB-H2)."""
    if schedule.startswith("dualpipe"):
        return "dualpipe"
    return "fused" if schedule not in SPLIT_BACKWARD and schedule != "interleaved" else schedule


def _bounds_per_group(schedule: str, p: int, m: int | NDArray[np.int64], v: int, forward: ArrayLike,
                      backward_input: ArrayLike, backward_weight: ArrayLike, transfer: ArrayLike, update: ArrayLike,
                      chunk_layers: Iterable[int] | None,
                      columns: NDArray[np.intp] | None = None) -> tuple[FloatArray, FloatArray]:
    """:func:`completion_bounds` for durations per layer group (arrays (p, ...)); ``m`` a whole number or
    an integer array broadcasting with the rows; ``columns``: see :func:`completion_bounds_rows`."""
    if columns is None:
        (F, X, W, U), t, lead = _groups_first(p, forward, backward_input, backward_weight, transfer, update)
        lead = np.broadcast_shapes(lead, np.shape(m))

        def G(a: Any) -> Any:
            return a
    else:  # durations per distinct set (p, u); m, transfer and columns per row
        (F, X, W, U), _, _ = _groups_first(p, forward, backward_input, backward_weight, 0.0, update)
        t = _as_array(transfer, "transfer time")
        lead = np.broadcast_shapes(t.shape, np.shape(m), columns.shape)
        cols = columns

        def G(a: Any) -> Any:
            """A per-set array read per row (an axis of one set broadcasts as it is)."""
            return a if np.shape(a)[-1:] == (1,) else a[..., cols]

    def out(x: ArrayLike) -> FloatArray:
        return np.broadcast_to(x, lead).reshape(lead)

    if p == 1:
        exact = out(m * G(F[0] + X[0] + W[0]) + G(U[0]))
        return exact, exact
    form = group_bound_form(schedule)  # the schedule is read through its form alone (and whether it fuses dX, dW)
    fused = schedule not in SPLIT_BACKWARD
    if fused:  # one backward op of dX + dW
        X, W = X + W, 0.0 * W
    w = F + X + W
    col = (p,) + (1,) * len(lead)
    stage = np.arange(p, dtype=float).reshape(col)

    def pre(a: FloatArray) -> FloatArray:
        # pre(a)[k] = sum over groups 0 .. k-1 (k = 0 .. p), group by group (whole contiguous rows;
        # numpy's cumsum along the first axis strides through memory)
        out = np.empty((p + 1,) + a.shape[1:])
        out[0] = 0.0
        for k in range(p):
            out[k + 1] = out[k] + a[k]
        return out

    u_max = U.max(axis=0)
    if form == "dualpipe":
        down, up = _halves(m)
        fill = G(pre(F)[:p]) + stage * t
        start = np.where(np.asarray(up) > 0, np.minimum(fill, fill[::-1]), fill)
        lo = (start + down * G(w) + up * G(w[::-1]) + G(U)).max(axis=0)
        lo = np.maximum(lo, (down - 1) * G(F[0]) + G(_stage_sum(F + X)) + G(W[0]) + 2 * (p - 1) * t + G(U[0]))
        hops = p - 1
    elif form == "interleaved":
        frac = np.asarray(_chunk_fractions(schedule, p, v, chunk_layers))[:, 0].reshape(col)  # chunk 0 of each group
        pf = pre(F * frac)
        lo = G(pf[p - 1]) + (p - 1) * t + m * G(w[p - 1]) + G(pre(X * frac)[p - 1]) + (p - 1) * t + G(U[0])
        lo = np.maximum(lo, (G(pf[:p]) + stage * t + m * G(w) + G(U)).max(axis=0))
        hops = v * p - 1
    else:  # fill-drain, 1F1B, ZB-H1, ZB-H2: stage s holds group s
        pf, px = pre(F), pre(X)
        fill = G(pf[p - 1]) + (p - 1) * t
        lo = (G(pf[:p]) + stage * t + m * G(w) + G(U)).max(axis=0)
        k = {"zb-h1": np.minimum(p, m), "zb-h2": np.minimum(2 * p - 1, m)}.get(form, 0)
        lo_b = fill + m * G((F + X)[p - 1]) + (m - k) * G(W[p - 1]) + G(px[p - 1]) + (p - 1) * t + G(W[0])
        lo = np.maximum(lo, lo_b + G(U[0]))
        if not fused:
            a0 = (p - 1) if form == "zb-h1" else 2 * (p - 1)
            lo_d = fill + G((F + X)[p - 1]) + G(px[p - 1]) + (p - 1) * t + (m - 1) * G(X[0]) \
                + m * G(W[0]) + np.maximum(0, m - a0 - 1) * G(F[0])
            lo = np.maximum(lo, lo_d + G(U[0]))
        hops = p - 1
    hi = m * G(_stage_sum(w)) + 2 * m * hops * t + G(u_max)
    return out(lo * (1 - BOUND_SLACK)), out(hi * (1 + BOUND_SLACK))


def _stage_sum(a: FloatArray) -> FloatArray:
    """``a.sum(axis=0)`` added group after group, whatever the other axes' lengths (numpy sums a lone column of
    8 or more pairwise instead): the same bits for durations given per row, per set or on the plan grid."""
    out = np.array(a[0], dtype=float)
    for k in range(1, a.shape[0]):
        out = out + a[k]
    return out


def peak_inflight_bounds(schedule: str, p: ArrayLike, m: ArrayLike, *, v: int = 2) -> tuple[FloatArray, FloatArray]:
    """``(lo, hi)`` of the busiest stage's peak live activation sets, in closed form (p, m broadcast).

    Exact (lo = hi) for every schedule but the chapter's DualPipe (equal interleaved chunks):
    fill-drain m; 1F1B and ZB-H1 min(p, m); ZB-H2 min(2p - 1, m); DeepSeek's DualPipe p + 1 (its
    shapes: even p, even m >= 2p); interleaved ``min(2(p-1) + (v-1) g + 1, v m) / v`` on stage 0,
    g the largest micro-batch group (its warm-up forwards plus the one forward before the first
    backward, each 1/v of a set). The chapter's DualPipe: each direction at path position q holds at
    most 2(p-1-q) + 1 sets (its lag to dW) and at least that many before its first dW, so
    ``min(ceil(m/2), 2p - 1) <= peak <= min(m, 2p)``; :func:`peak_inflight` walks the exact order.
    (Like the event model, p = 1 runs the schedule's order on one card: fill-drain then holds m sets.)
    """
    _check_schedule(schedule)
    p, m = _ints(p), _ints(m)
    mf = m.astype(float)
    if schedule == "fill-drain":
        lo = hi = mf
    elif schedule in ("1f1b", "zb-h1"):
        lo = hi = np.minimum(p, m).astype(float)
    elif schedule == "zb-h2":
        lo = hi = np.minimum(2 * p - 1, m).astype(float)
    elif schedule == "interleaved":
        v = _whole(v, "chunks v", 1)
        lo = hi = np.minimum(2 * (p - 1) + (v - 1) * _interleaved_gmax(p, m) + 1, v * m) / v
    elif schedule == "dualpipe-deepseek":
        lo = hi = (p + 1).astype(float) * np.ones_like(mf)
    else:
        lo = np.minimum((m + 1) // 2, 2 * p - 1).astype(float)
        hi = np.minimum(m, 2 * p).astype(float)
    one = np.ones(np.broadcast(p, m).shape)
    return lo * one, hi * one


def peak_inflight_stage_bounds(schedule: str, p: int, m: int, *, v: int = 2,
                               chunk_layers: Iterable[int] | None = None) -> tuple[list[float], list[float]]:
    """``(lo, hi)``, lists of p: each stage's peak live activation sets, in closed form (one shape).

    Exact per stage for fill-drain (m), 1F1B (min(p - s, m)), ZB-H1 (min(p, m)), ZB-H2
    (min(2p - 1, m)) and interleaved with equal chunks (stage s's warm-up forwards plus one,
    ``min(2(p-1-s) + (v-1) g + 1, v m)`` chunk sets of 1/v); uneven chunks weigh that count by the
    stage's smallest and largest chunk share. The chapter's DualPipe: each direction at position q holds
    at most 2(p-1-q) + 1 sets and reaches that many (or its micro-batches) before its first dW, so the
    larger direction's count bounds the stage from below and their sum from above. DeepSeek's ordering
    (its shapes: even p, even m >= 2p) holds exactly p + 1 on every stage: rank r's first two phases run
    2(p/2 - h - 1) + 2(h + 1) = p forwards before any backward (h = min(r, p - 1 - r)), the third trades a
    set for a set ([dX1, W, F1]), and the fourth, run m/2 - p + h + 1 >= 1 times, starts with a forward
    (p + 1) and alternates forward and fused backward from there, so it never holds more.
    """
    p, m, v = _check_shape(schedule, p, m, v)
    stages = range(p)
    if schedule == "fill-drain":
        lo = [float(m)] * p
    elif schedule == "1f1b":
        lo = [float(min(p - s, m)) for s in stages]
    elif schedule == "zb-h1":
        lo = [float(min(p, m))] * p
    elif schedule == "zb-h2":
        lo = [float(min(2 * p - 1, m))] * p
    elif schedule == "interleaved":
        g = int(_interleaved_gmax(p, m))
        count = [min(2 * (p - 1 - s) + (v - 1) * g + 1, v * m) for s in stages]
        frac = _chunk_fractions(schedule, p, v, chunk_layers)
        return ([c * min(f) for c, f in zip(count, frac, strict=False)],
                [c * max(f) for c, f in zip(count, frac, strict=False)])
    elif schedule == "dualpipe":
        down, up = _halves(m)
        per = [(min(down, 2 * (p - 1 - s) + 1), min(up, 2 * s + 1)) for s in stages]
        return [float(max(a, b)) for a, b in per], [float(a + b) for a, b in per]
    else:  # DeepSeek's DualPipe: p + 1 on every stage, exactly (see the docstring)
        return [float(p + 1)] * p, [float(p + 1)] * p
    return lo, list(lo)


def peak_inflight_max(schedule: str, p: ArrayLike, m: ArrayLike, *, v: int = 2) -> FloatArray:
    """The busiest stage's peak live activation sets (``max(peak_inflight(...))``) for arrays of shapes.

    Closed form (:func:`peak_inflight_bounds`) where it is exact; the chapter's DualPipe walks its
    slot order once per distinct shape (cached).
    """
    lo, hi = peak_inflight_bounds(schedule, p, m, v=v)
    if schedule != "dualpipe":
        return lo
    out = np.array(hi, dtype=float)
    pb, mb = np.broadcast_arrays(_ints(p), _ints(m))
    todo = np.flatnonzero(lo != hi)
    if todo.size:
        shapes, order, cuts = group_shapes(pb.reshape(-1)[todo], mb.reshape(-1)[todo])
        flat = out.reshape(-1)
        for k, (pv, mv) in enumerate(shapes):
            flat[todo[order[cuts[k]:cuts[k + 1]]]] = max(peak_inflight(schedule, pv, mv))
        out = flat.reshape(out.shape)
    return out
