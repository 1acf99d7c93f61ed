"""The compiled program of a schedule: every op of its slot orders in a topological order, with its one input
from another stage; compiled once per ``(schedule, p, m, v)`` and kept in a bounded shape cache. The
simulation ticks a cancellation callback between waves (:func:`ticking`).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeAlias, TypeVar

import numpy as np
from numpy.typing import NDArray

from tpopt.models.pipeline.schedules import (
    _B,
    _DBF,
    _DBX,
    _DF,
    _DW,
    _F,
    _MSG_BWD,
    _MSG_FWD,
    _MSG_NONE,
    _W,
    _check_shape,
    slot_orders,
)

_T = TypeVar("_T")


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
