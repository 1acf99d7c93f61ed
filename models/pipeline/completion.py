"""The completion time vectorised over many duration sets (the solver's path, :func:`completion_time`): the
max-plus recurrence in waves over the compiled program, per shape, with a bounded memo of answers.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import NamedTuple, TypeAlias

import numpy as np
from numpy.typing import ArrayLike, NDArray

from tpopt.errors import InputError
from tpopt.models.numeric import FloatArray
from tpopt.models.pipeline.program import CACHE_OPS, TICK_EVERY, _program, _ShapeCache, _tick
from tpopt.models.pipeline.schedules import Index, _check_schedule, _check_shape
from tpopt.models.pipeline.simulation import _chunk_fractions

# =============================================================================================
# vectorised completion time (solver)


class _Wave(NamedTuple):  # a tuple: thousands are made per shape, a frozen dataclass costs 3x as much
    at: int  # the wave's ops are rows at .. at+n-1 of the ring of recent end times (wrapping around)
    n: int
    stage: slice | Index  # their stages (a slice when they are consecutive stages)
    full: bool  # every stage present: stage == arange(p)
    in_rows: slice | Index  # rows of the wave that wait for a message (a slice when contiguous) ...
    in_slots: Index  # ... and the ring rows holding the senders' end times


_Plan: TypeAlias = tuple[tuple[_Wave, ...], int, Index, Index, Index]
"""A shape's waves, its ring's length, every op's duration code (program order) and each wave's first and last + 1
program rows."""


def _wave_plan(schedule: str, p: int, m: int, v: int) -> tuple[_Plan, int]:
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
    # every wave's rows, stages and inputs as views of whole-program arrays (one numpy pass each, not
    # one per wave); a run of consecutive rows or stages is a slice (numpy then works on views, without copies).
    # A wave's stages are strictly increasing (an op's level exceeds its stage's previous op's)
    stage, code, dep = (a.astype(np.int64) for a in (prog.stage, prog.code, prog.dep))
    inputs = np.flatnonzero(has)  # rows that wait for a message ...
    slots = dep[inputs] % ring  # ... and the ring rows holding the senders' end times
    los, his = bounds[:-1], bounds[1:]
    if not prog.n_ops:
        los, his = [], []
    lo_a, hi_a = np.asarray(los, dtype=np.int64), np.asarray(his, dtype=np.int64)
    first, last = stage[lo_a].tolist(), stage[hi_a - 1].tolist()
    cut_lo, cut_hi = np.searchsorted(inputs, lo_a).tolist(), np.searchsorted(inputs, hi_a).tolist()
    in_first = inputs[np.minimum(np.asarray(cut_lo, dtype=np.int64), max(len(inputs) - 1, 0))].tolist() \
        if len(inputs) else [0] * len(los)
    in_last = inputs[np.maximum(np.asarray(cut_hi, dtype=np.int64) - 1, 0)].tolist() if len(inputs) else [0] * len(los)
    waves: list[_Wave] = []
    for i, (lo, hi) in enumerate(zip(los, his, strict=True)):
        if i % TICK_EVERY == TICK_EVERY - 1:
            _tick()
        n, a, b = hi - lo, cut_lo[i], cut_hi[i]
        st: slice | Index = slice(first[i], last[i] + 1) if last[i] - first[i] == n - 1 else stage[lo:hi]
        full = n == p and first[i] == 0 and last[i] == p - 1  # strictly increasing stages: every stage once
        rows_in: slice | Index = slice(in_first[i] - lo, in_last[i] - lo + 1) \
            if b > a and in_last[i] - in_first[i] == b - a - 1 else inputs[a:b] - lo
        waves.append(_Wave(lo % ring, n, st, full, rows_in, slots[a:b]))
    return (tuple(waves), ring, code, lo_a, hi_a), prog.n_ops


_waves = _ShapeCache(_wave_plan, CACHE_OPS)


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
    plan = _waves(schedule, p, m, v)
    out = np.empty(flat[0].shape[0])
    step = max(1, min(int(block), RECURRENCE_CELLS // plan[1]))
    for lo in range(0, out.size, step):
        _tick()
        hi = min(out.size, lo + step)
        out[lo:hi] = _completion_block(p, v, plan, frac, *(a[lo:hi] for a in flat))
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


def _completion_block(p: int, v: int, plan: _Plan, frac: Sequence[Sequence[float]],
                      tf: FloatArray, bx: FloatArray, bw: FloatArray, tr: FloatArray, upd: FloatArray) -> FloatArray:
    waves, ring, code, starts, stops = plan
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
    # every op's duration row, and whether a wave's ops share one (most waves), from passes over the program: in the
    # many short waves of a long pipeline, per-wave lookups and checks would cost as much as the recurrence itself
    rows_all = row_of[code]
    changes = np.concatenate(([0], np.cumsum(rows_all[1:] != rows_all[:-1])))  # changes of row up to each op
    uniform = (changes[stops - 1] == changes[starts]).tolist() if len(waves) else []
    first_row, starts_l = rows_all[starts].tolist(), starts.tolist()
    # preallocated work arrays: fresh megabyte-sized temporaries per wave would dominate the time; the gathers are
    # the arrays' own ``take`` (the same C routine as ``np.take``, without its Python dispatch in every wave)
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
            free.take(w.stage, axis=0, out=start, mode="clip")
        n_in = len(w.in_slots)
        if n_in:  # arrival = the sender's end + transfer
            arr = tmp[:n_in]
            ends.take(w.in_slots, axis=0, out=arr, mode="clip")
            np.add(arr, tr, out=arr)
            if isinstance(w.in_rows, slice):
                sub = start[w.in_rows]
                np.maximum(sub, arr, out=sub)
            else:
                start[w.in_rows] = np.maximum(start[w.in_rows], arr)
        if uniform[i]:
            np.add(start, table[first_row[i]], out=start)  # one duration row for the whole wave
        else:
            dur = tmp[:n]
            table.take(rows_all[starts_l[i]:starts_l[i] + n], axis=0, out=dur, mode="clip")
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
