"""Pipeline-parallel step time and activation lifetime: a discrete-event model (chapter 10.3.2).

One training step runs ``m`` micro-batches through ``p`` pipeline stages (one card each). Every stage
executes its operations one at a time in a fixed **slot order** chosen by the schedule; an operation
starts when the stage is free *and* its input has arrived:

* ``F`` forward of a micro-batch on a stage (or on one chunk of the stage, interleaved);
* ``B`` backward.  With a split backward (``zb-*``, ``dualpipe*``) ``B`` is only dX, the gradient
  with respect to the stage input, which the previous stage waits for; otherwise ``B`` is the whole
  backward (dX + dW in one operation, ``Event.fused``);
* ``W`` dW, the weight gradient of the same micro-batch on the same stage; it only has to follow its
  own ``B`` and fills gaps;
* ``U`` the optimizer update of the stage, after all of the stage's backward work.

Relations (times in seconds)::

    start(op) = max(end(previous op on the stage), arrival(input))
    arrival   = end(producer on the neighbouring stage) + transfer
    end(op)   = start(op) + duration(op)
    U_s       starts at the end of stage s's last B/W;  completion = max_s end(U_s)

A boundary transfer crosses one link; the forward direction (activations, stage s -> s+1) and the
backward direction (gradients, s+1 -> s) are independent links, and a link is modelled as a pure
latency (no queueing: at most one message per operation end, so a link is never contended when the
transfer is shorter than the operations). Idle time of a stage = completion - its busy time; the bubble
fraction is idle / completion (= 1 - u for fill-drain with zero transfer).

Durations are given per *layer group* ``k = 0 .. p-1`` (the layers stage k holds in the plain
schedules): ``forward[k]``, ``backward_input[k]`` (dX), ``backward_weight[k]`` (dW). Interleaved splits a
group into ``v`` chunks whose times are proportional to their layer counts; DualPipe runs group ``s`` for
the down direction and group ``p-1-s`` for the up direction on stage ``s`` (two parameter copies).

Activation memory is counted from the slot order alone: a micro-batch's activations on a stage (or
chunk) are live from the start of its ``F`` until the end of the operation that finishes its backward
there -- the fused ``B``, or ``W`` when the backward is split (the chapter keeps the whole set until dW,
as the event model of 10.3.2 does; the zero-bubble paper counts a smaller dW working set).

The op order depends only on ``(schedule, p, m, v)``; :func:`completion_time` therefore runs the same
max-plus recurrence once for many duration sets (numpy, vectorised over the duration arrays).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple, Sequence

import numpy as np

from tpopt.errors import InputError

SCHEDULES = ("fill-drain", "1f1b", "interleaved", "zb-h1", "zb-h2", "dualpipe", "dualpipe-deepseek")
"""Schedule names accepted by :func:`simulate`, :func:`completion_time` and :func:`peak_inflight`."""

SPLIT_BACKWARD = frozenset({"zb-h1", "zb-h2", "dualpipe", "dualpipe-deepseek"})
"""Schedules that run dX and dW as separate operations (the others fuse them into one ``B``)."""

KINDS = ("F", "B", "W", "U")

_F, _B, _W = 0, 1, 2
_KIND_NAME = ("F", "B", "W")
# duration codes: kind x group x chunk
_DF, _DBX, _DBF, _DW = 0, 1, 2, 3  # forward, dX only, fused dX+dW, dW
# message kinds on a dependency: 0 none / same stage, 1 forward link, 2 backward link
_MSG_NONE, _MSG_FWD, _MSG_BWD = 0, 1, 2


# =============================================================================================
# closed forms (chapter 10.3.2; balanced stages, zero transfer and update unless stated)


def fill_drain_time(p: int, m: int, tf, tb):
    """Fill-drain (GPipe) step time: ``T = (m + p - 1)(t_f + t_b)`` [s].

    ``m`` micro-batches of real work plus ``p - 1`` slots to fill and drain the pipeline.
    p = 4, m = 8, 10 ms + 20 ms -> 330 ms (REFERENCE.md 10.3).
    """
    return (m + p - 1) * (np.asarray(tf, dtype=float) + tb) if not _scalar(tf, tb) else (m + p - 1) * (tf + tb)


def utilisation(p: int, m: int) -> float:
    """Fill-drain time utilisation of a card: ``u = m / (m + p - 1)``; p = 4, m = 8 -> 72.7 %."""
    return m / (m + p - 1)


def bubble_ratio_1f1b(p: int, m: int) -> float:
    """Bubble time over useful time of 1F1B / fill-drain: ``(p - 1) / m`` (37.5 % at p = 4, m = 8)."""
    return (p - 1) / m


def bubble_ratio_interleaved(p: int, m: int, v: int = 2) -> float:
    """Interleaved 1F1B bubble over useful time: ``(1/v) (p - 1) / m`` (Megatron-LM; v chunks per stage)."""
    return (p - 1) / (v * m)


def bubble_1f1b(p: int, tf, tb, tw=0.0):
    """Per-stage bubble of 1F1B (and fill-drain): ``(p - 1)(T_F + T_B + T_W)`` [s].

    ``T_B`` is dX and ``T_W`` dW; with an unsplit backward pass the whole backward as ``tb`` and
    ``tw = 0``. p = 4, 10 + 10 + 10 ms -> 90 ms.
    """
    return (p - 1) * (tf + tb + tw)


def bubble_zb_h1(p: int, tf, tb, tw):
    """Per-stage bubble of ZB-H1: ``(p - 1)(T_F + T_B - T_W)`` [s] (zero-bubble paper, table 2).

    dW is postponed into the gaps of the drain. p = 4, 10 + 10 - 10 ms -> 30 ms. In this event model
    the value is exact (zero transfer, balanced stages) while ``T_W <= T_F`` and ``T_W <= T_B``.
    """
    return (p - 1) * (tf + tb - tw)


def bubble_zb_h2(p: int, tf, tb, tw):
    """Per-stage bubble of ZB-H2 as the zero-bubble paper states it: ``(p - 1)(T_F + T_B - 2 T_W)`` [s].

    p = 4, 10 + 10 - 20 ms -> 0. The paper measures it on a staggered (parallelogram) step whose
    optimizer synchronisation is bypassed; one synchronous step cannot end before the last stage has
    received its first input and done all its work, so in this event model a stage idles at least
    ``(p - 1) T_F`` -- see :func:`bubble_zb_h2_synchronous`.
    """
    return (p - 1) * (tf + tb - 2 * tw)


def bubble_zb_h2_synchronous(p: int, tf, tb, tw):
    """Per-stage bubble of ZB-H2 in one synchronous step: ``(p - 1) max(T_F, T_F + T_B - 2 T_W)`` [s].

    The larger of the paper's bound and the fill skew ``(p - 1) T_F`` the last stage waits before its
    first forward. Exact in this event model (zero transfer, balanced stages) while
    ``T_W <= T_F`` and ``T_W <= T_B``.
    """
    return (p - 1) * np.maximum(tf, tf + tb - 2 * tw) if not _scalar(tf, tb, tw) else (p - 1) * max(tf, tf + tb - 2 * tw)


def bubble_dualpipe(p: int, f_and_b, b, w):
    """Per-stage bubble of DualPipe (DeepSeek-V3 table 2): ``(PP/2 - 1)(F&B + B - 3W)`` [s].

    ``F&B`` is the time of a forward and a backward executed overlapped, ``B`` the whole backward and
    ``W`` its dW part. Without overlap ``F&B = F + B``: p = 4, 30 + 20 - 30 ms -> 20 ms.
    """
    return (p // 2 - 1) * (f_and_b + b - 3 * w)


def parameter_copies(schedule: str) -> int:
    """Copies of a stage's parameters a card holds: 2 for DualPipe (one per direction), else 1."""
    _check_schedule(schedule)
    return 2 if schedule.startswith("dualpipe") else 1


def split_layers(layers: int, chunks: int) -> list[int]:
    """Split ``layers`` into ``chunks`` contiguous chunks, the first ``layers mod chunks`` one layer larger.

    36 layers, 8 chunks -> [5, 5, 5, 5, 4, 4, 4, 4] (chapter 10.3.2, interleaved v = 2 on 4 stages).
    """
    if chunks < 1 or layers < chunks:
        raise InputError(f"cannot split {layers} layers into {chunks} chunks of at least one layer")
    q, r = divmod(layers, chunks)
    return [q + 1 if i < r else q for i in range(chunks)]


def _scalar(*xs) -> bool:
    return all(isinstance(x, (int, float)) for x in xs)


# =============================================================================================
# slot orders


def _check_schedule(schedule: str) -> None:
    if schedule not in SCHEDULES:
        raise InputError(f"unknown pipeline schedule {schedule!r} (use one of: {', '.join(SCHEDULES)})")


def _check_shape(schedule: str, p: int, m: int, v: int) -> None:
    _check_schedule(schedule)
    for name, x, lo in (("stages p", p, 1), ("micro-batches m", m, 1), ("chunks v", v, 1)):
        if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < lo:
            raise InputError(f"{name} must be a whole number >= {lo}, got {x!r}")
    if schedule == "dualpipe-deepseek":
        if p % 2 or m % 2 or m < 2 * p:
            raise InputError(
                f"dualpipe-deepseek needs an even number of stages and an even m >= 2p "
                f"(DeepSeek's ordering asserts it); got p = {p}, m = {m}")
    elif schedule == "dualpipe" and m < 2:
        raise InputError("dualpipe needs at least 2 micro-batches (one per direction)")


def _path_length(schedule: str, p: int, v: int) -> int:
    """Positions a micro-batch passes through: ``v p`` chunks interleaved, else ``p`` stages."""
    return v * p if schedule == "interleaved" else p


def _halves(m: int) -> tuple[int, int]:
    """DualPipe split of the micro-batches: the down direction gets ``ceil(m/2)``."""
    return (m + 1) // 2, m // 2


def _stage_of(schedule: str, p: int, m: int, mb: int, pos: int) -> int:
    if schedule == "interleaved":
        return pos % p
    if schedule.startswith("dualpipe") and mb >= _halves(m)[0]:
        return p - 1 - pos
    return pos


def _zb_family(m: int, a: int, c: int, mbs: Sequence[int], pos: int, split: bool) -> list[tuple]:
    """Slot order ``(F_x, B_{x-a}, W_{x-c})`` for x = 0, 1, ...: ``a`` warm-up forwards, dW lagging.

    1F1B is ``a = p-1-s`` with the backward fused; ZB-H1 adds ``c = p-1`` (dW of micro-batch i right
    after dX of micro-batch i+s); ZB-H2 is ``a = 2(p-1-s)``, ``c = 2(p-1)``.
    """
    n = len(mbs)
    ops = []
    last = n + max(a, c) if split else n + a
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


def _order_fill_drain(p, m):
    """GPipe: every forward, then every backward in reverse micro-batch order (last in, first out)."""
    return [[(_F, i, s, False) for i in range(m)] + [(_B, i, s, True) for i in reversed(range(m))]
            for s in range(p)]


def _order_1f1b(p, m):
    """1F1B (PipeDream-flush): stage s runs min(p-1-s, m) warm-up forwards, then alternates F, B."""
    mbs = range(m)
    return [_zb_family(m, p - 1 - s, 0, mbs, s, split=False) for s in range(p)]


def _order_zb_h1(p, m):
    """ZB-H1: 1F1B slots with dX as B; stage s runs dW(i) right after dX(i+s), its last s dW at the end."""
    mbs = range(m)
    return [_zb_family(m, p - 1 - s, p - 1, mbs, s, split=True) for s in range(p)]


def _order_zb_h2(p, m):
    """ZB-H2: stage s runs 2(p-1-s) extra warm-up forwards, then (F_x, dX_{x-2(p-1-s)}, dW_{x-2(p-1)})."""
    mbs = range(m)
    return [_zb_family(m, 2 * (p - 1 - s), 2 * (p - 1), mbs, s, split=True) for s in range(p)]


def _order_interleaved(p, m, v):
    """Interleaved 1F1B (Megatron-LM virtual pipeline), chunk c of stage s at path position c p + s.

    Forwards go in groups of p micro-batches, chunk 0 .. v-1 within a group; backwards the same with
    the chunks reversed. Stage s runs ``min(2(p-1-s) + (v-1) p, m v)`` warm-up forwards, then
    alternates one forward and one backward, then drains the backwards.
    """
    fwd, bwd = [], []
    for g in range(0, m, p):
        group = range(g, min(g + p, m))
        for c in range(v):
            fwd.extend((c, i) for i in group)
        for c in reversed(range(v)):
            bwd.extend((c, i) for i in group)
    total = m * v
    orders = []
    for s in range(p):
        w = min(2 * (p - 1 - s) + (v - 1) * p, total)
        ops = [(_F, i, c * p + s, False) for c, i in fwd[:w]]
        for k in range(total - w):
            c, i = fwd[w + k]
            ops.append((_F, i, c * p + s, False))
            c, i = bwd[k]
            ops.append((_B, i, c * p + s, True))
        ops.extend((_B, i, c * p + s, True) for c, i in bwd[total - w:])
        orders.append(ops)
    return orders


def _order_dualpipe_chapter(p, m):
    """The chapter's DualPipe rule (see :data:`DUALPIPE_RULE`)."""
    down, up = _halves(m)
    orders = []
    for s in range(p):
        seqs = []
        for d, (n, first) in enumerate(((down, 0), (up, down))):
            pos = s if d == 0 else p - 1 - s
            a = p - 1 - pos
            seqs.append(_zb_family(n, a, 2 * a, range(first, first + n), pos, split=True))
        orders.append(_merge_alternate(seqs[0], seqs[1]))
    return orders


def _merge_alternate(x, y):
    out = []
    for i in range(max(len(x), len(y))):
        if i < len(x):
            out.append(x[i])
        if i < len(y):
            out.append(y[i])
    return out


def _order_dualpipe_deepseek(p, m):
    """DeepSeek-V3's published DualPipe ordering (deepseek-ai/DualPipe ``DualPipe.step``), per rank.

    Phase 0 is the direction in which the rank sits in the first half (position h = min(r, p-1-r)),
    phase 1 the other one. Steps: (p/2-h-1)*2 x F0; (h+1) x [F0, F1]; (p/2-h-1) x [dX1, W, F1];
    (m/2-p+h+1) x [F0, B1, F1, B0]; (p/2-h-1) x [B1, F1, B0]; (h+1) x [B1, B0] switching to split
    backward half-way; (p/2-h-1) x [W, dX0]; (h+1) x W. B without a following W is the full backward;
    the F&B pairs are not overlapped in this model (F then B). W pops split backwards first in, first out.
    """
    half = m // 2
    P2 = p // 2
    orders = []
    for r in range(p):
        h = min(r, p - 1 - r)
        second = r >= P2
        # phase -> (direction, position on this rank, first micro-batch id)
        phase_dir = (1, 0) if second else (0, 1)
        nf, nb = [0, 0], [0, 0]
        wq: deque = deque()
        ops: list = []

        def key(ph, k):
            d = phase_dir[ph]
            pos = r if d == 0 else p - 1 - r
            return k + (half if d == 1 else 0), pos

        def F(ph):
            mb, pos = key(ph, nf[ph])
            nf[ph] += 1
            ops.append((_F, mb, pos, False))

        def B(ph, zb):
            mb, pos = key(ph, nb[ph])
            nb[ph] += 1
            ops.append((_B, mb, pos, not zb))
            if zb:
                wq.append((mb, pos))

        def W():
            mb, pos = wq.popleft()
            ops.append((_W, mb, pos, False))

        for _ in range((P2 - h - 1) * 2):
            F(0)
        for _ in range(h + 1):
            F(0)
            F(1)
        for _ in range(P2 - h - 1):
            B(1, True)
            W()
            F(1)
        for _ in range(half - p + h + 1):
            F(0)
            B(1, False)
            F(1)
            B(0, False)
        for _ in range(P2 - h - 1):
            B(1, False)
            F(1)
            B(0, False)
        zb = False
        for i in range(h + 1):
            if i == (h + 1) // 2 and h % 2 == 1:
                zb = True
            B(1, zb)
            if i == (h + 1) // 2 and h % 2 == 0:
                zb = True
            B(0, zb)
        for _ in range(P2 - h - 1):
            W()
            B(0, True)
        for _ in range(h + 1):
            W()
        assert not wq and nf == [half, half] and nb == [half, half]
        orders.append(ops)
    return orders


def slot_orders(schedule: str, p: int, m: int, v: int = 2) -> list[list[tuple]]:
    """Per-stage slot order: lists of ``(kind, micro_batch, position, fused)``.

    ``kind`` is 0 F, 1 B, 2 W; ``position`` the place on the micro-batch's path (stage index, chunk
    ``c p + s`` interleaved, ``p-1-s`` for the up direction of DualPipe); ``fused`` marks a backward
    that includes dW.
    """
    _check_shape(schedule, p, m, v)
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
# compiled program: a topological order of every op with its single cross-stage input


@dataclass(frozen=True)
class _Program:
    schedule: str
    p: int
    m: int
    v: int
    orders: tuple  # per stage, tuple of (kind, mb, pos, fused)
    # topological order (one entry per op)
    stage: np.ndarray  # int
    code: np.ndarray  # duration code
    dep: np.ndarray  # topological index of the producer on another stage, -1 if none
    msg: np.ndarray  # 0 none, 1 forward link, 2 backward link
    kind: np.ndarray
    mb: np.ndarray
    pos: np.ndarray
    fused: np.ndarray
    level: np.ndarray
    # vectorised execution plan, one entry per wave
    waves: tuple
    n_slots: int


def _duration_code(schedule: str, p: int, v: int, kind: int, pos: int, fused: bool) -> int:
    group, chunk = _group_chunk(schedule, p, pos)
    k = _DF if kind == _F else _DW if kind == _W else (_DBF if fused else _DBX)
    return (k * p + group) * v + chunk


def _group_chunk(schedule: str, p: int, pos: int) -> tuple[int, int]:
    if schedule == "interleaved":
        return pos % p, pos // p
    return pos, 0


@lru_cache(maxsize=32)
def _program(schedule: str, p: int, m: int, v: int) -> _Program:
    if schedule != "interleaved":
        v_eff = 1
    else:
        v_eff = v
    orders = slot_orders(schedule, p, m, v_eff)
    L = _path_length(schedule, p, v_eff)
    index: dict = {}  # (kind, mb, pos) -> topological id
    where: dict = {}  # (kind, mb, pos) -> (stage, slot)
    for s, ops in enumerate(orders):
        for j, op in enumerate(ops):
            where[op[:3]] = (s, j)

    def producer(op):
        """The op this one waits for, and on which link: (key, msg) or None."""
        kind, mb, pos, _ = op
        if kind == _F:
            return ((_F, mb, pos - 1), _MSG_FWD) if pos > 0 else None
        if kind == _B:
            return ((_B, mb, pos + 1), _MSG_BWD) if pos < L - 1 else ((_F, mb, pos), _MSG_NONE)
        return (_B, mb, pos), _MSG_NONE

    n_total = sum(len(o) for o in orders)
    stage = np.empty(n_total, dtype=np.int64)
    code = np.empty(n_total, dtype=np.int64)
    dep = np.full(n_total, -1, dtype=np.int64)
    msg = np.zeros(n_total, dtype=np.int64)
    kind_a = np.empty(n_total, dtype=np.int8)
    mb_a = np.empty(n_total, dtype=np.int64)
    pos_a = np.empty(n_total, dtype=np.int64)
    fused_a = np.zeros(n_total, dtype=bool)
    level = np.empty(n_total, dtype=np.int64)

    ptr = [0] * p
    stage_level = [0] * p
    nxt = 0
    while nxt < n_total:
        progressed = False
        for s in range(p):
            ops = orders[s]
            j = ptr[s]
            lv_stage = stage_level[s]
            while j < len(ops):
                op = ops[j]
                prod = producer(op)
                d, mk, lv = -1, _MSG_NONE, lv_stage
                if prod is not None:
                    pkey, mk = prod
                    ps, pj = where.get(pkey, (None, None))
                    if ps is None:
                        raise AssertionError(f"{schedule}: no producer {pkey} for {op}")
                    if ps == s:  # same stage: the slot order must already respect it
                        if pj >= j:
                            raise AssertionError(f"{schedule}: stage {s} runs {op} before its input {pkey}")
                        mk = _MSG_NONE
                    else:
                        d = index.get(pkey, -1)
                        if d < 0:
                            break  # input not produced yet: try the other stages
                        if level[d] + 1 > lv:
                            lv = level[d] + 1
                    if ps == s:
                        d = -1
                t = nxt
                index[op[:3]] = t
                stage[t] = s
                code[t] = _duration_code(schedule, p, v_eff, op[0], op[2], op[3])
                dep[t] = d
                msg[t] = mk if d >= 0 else _MSG_NONE
                kind_a[t], mb_a[t], pos_a[t], fused_a[t] = op[0], op[1], op[2], op[3]
                level[t] = lv
                lv_stage = lv + 1
                nxt += 1
                j += 1
            if j != ptr[s]:
                progressed = True
                ptr[s] = j
                stage_level[s] = lv_stage
        if not progressed:
            stuck = {s: orders[s][ptr[s]] for s in range(p) if ptr[s] < len(orders[s])}
            raise AssertionError(f"{schedule} p={p} m={m} v={v}: slot order deadlocks at {stuck}")

    waves, n_slots = _plan_waves(stage, code, dep, msg, level)
    return _Program(schedule, p, m, v_eff, tuple(tuple(o) for o in orders), stage, code, dep, msg,
                    kind_a, mb_a, pos_a, fused_a, level, waves, n_slots)


@dataclass(frozen=True)
class _Wave:
    ops: np.ndarray  # topological ids (for nothing but debugging)
    stage: np.ndarray
    code: np.ndarray
    full: bool  # every stage has exactly one op, in stage order
    in_rows: np.ndarray  # rows of the wave that wait for a message
    in_slots: np.ndarray
    out_rows: np.ndarray  # rows that send a message
    out_slots: np.ndarray
    out_msg: np.ndarray  # 1 forward link, 2 backward link


def _plan_waves(stage, code, dep, msg, level):
    """Group ops by level (ops of one level are independent) and give every message a buffer slot."""
    n = len(stage)
    p = int(stage.max()) + 1 if n else 1
    order = np.argsort(level, kind="stable")
    bounds = np.flatnonzero(np.diff(level[order])) + 1
    groups = np.split(order, bounds)
    # last level at which each producer's message is read
    consumer_level = np.full(n, -1, dtype=np.int64)
    has = dep >= 0
    consumer_level[dep[has]] = level[has]
    prod_msg = np.zeros(n, dtype=np.int64)
    prod_msg[dep[has]] = msg[has]
    free: list[int] = []
    slot_of = np.full(n, -1, dtype=np.int64)
    n_slots = 0
    release: dict[int, list[int]] = {}
    waves = []
    for g in groups:
        lv = int(level[g[0]])
        g = g[np.argsort(stage[g], kind="stable")]
        rows_in = np.flatnonzero(dep[g] >= 0)
        in_slots = slot_of[dep[g][rows_in]]
        # slots read at this level can be reused by this level's writes (reads happen first)
        for sl in release.pop(lv, ()):
            free.append(sl)
        rows_out = np.flatnonzero(consumer_level[g] >= 0)
        out_slots = np.empty(len(rows_out), dtype=np.int64)
        for k, r in enumerate(rows_out):
            if free:
                sl = free.pop()
            else:
                sl = n_slots
                n_slots += 1
            out_slots[k] = sl
            slot_of[g[r]] = sl
            release.setdefault(int(consumer_level[g[r]]), []).append(sl)
        out_msg = prod_msg[g[rows_out]]
        waves.append(_Wave(g, stage[g], code[g], len(g) == p, rows_in, in_slots, rows_out, out_slots,
                           out_msg))
    return tuple(waves), n_slots
