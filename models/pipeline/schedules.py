"""Pipeline schedules: their names, and the slot order each one runs on every stage.

A slot order is, per stage, a list of (kind, micro-batch, path position, fused backward); it depends
only on ``(schedule, p, m, v)`` (:func:`slot_orders`). Shape checks (:func:`shape_error`) say which
``(p, m, v)`` a schedule accepts.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any, TypeAlias, overload

import numpy as np
from numpy.typing import NDArray

from tpopt.errors import InputError

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


def _producer(kind: int, mb: int, pos: int, last_pos: int) -> tuple[tuple[int, int, int] | None, int]:
    """The op whose end an op waits for, and the link it arrives on (before same-stage elision)."""
    if kind == _F:
        return ((_F, mb, pos - 1), _MSG_FWD) if pos > 0 else (None, _MSG_NONE)
    if kind == _B:
        return ((_B, mb, pos + 1), _MSG_BWD) if pos < last_pos else ((_F, mb, pos), _MSG_NONE)
    return (_B, mb, pos), _MSG_NONE
