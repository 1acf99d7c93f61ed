"""Closed forms and bounds for the solver, vectorised over shapes and durations: exact closed forms for
fill-drain and 1F1B, lower and upper bounds of the completion time for the other schedules, and bounds
of the activation peak (:func:`peak_inflight_bounds`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from tpopt.errors import InputError
from tpopt.models.numeric import FloatArray
from tpopt.models.pipeline.completion import CLOSED_FORM, _as_array, _ints, completion_closed_form, group_shapes
from tpopt.models.pipeline.schedules import SPLIT_BACKWARD, _check_schedule, _check_shape, _halves, _whole, shape_error
from tpopt.models.pipeline.simulation import _chunk_fractions, peak_inflight

BOUND_SLACK = 1e-12
"""Relative slack on the closed-form bounds of the other schedules: the bounds sum the same
durations as the event model in another order, so they may differ from it in the last bits."""


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
        return _bounds_per_group((schedule,), *_check_shape(schedule, p, m, v), forward, backward_input,
                                 backward_weight, transfer, update, chunk_layers)[0]
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
    return completion_bounds_rows_of((schedule,), p, m, forward, backward_input, backward_weight, transfer, update,
                                     v=v, chunk_layers=chunk_layers, columns=columns)[0]


def completion_bounds_rows_of(schedules: Sequence[str], p: int, m: ArrayLike, forward: ArrayLike,
                              backward_input: ArrayLike, backward_weight: ArrayLike, transfer: ArrayLike,
                              update: ArrayLike = 0.0, *, v: int = 2, chunk_layers: Iterable[int] | None = None,
                              columns: NDArray[np.intp] | None = None) -> list[tuple[FloatArray, FloatArray]]:
    """:func:`completion_bounds_rows` of each of ``schedules`` (all of one :func:`bound_pass`) on the same durations,
    in one pass: the parts of their bounds that do not depend on the schedule (the per-stage maximum, the prefix
    sums, the serial timetable) are formed once. Each schedule's ``(lo, hi)`` is the bits a call of its own gives
    (the same arithmetic on the same arrays), inf on the shapes it cannot run."""
    for schedule in schedules:
        _check_schedule(schedule)
    if len({bound_pass(s) for s in schedules}) != 1:
        raise InputError("completion_bounds_rows_of: the schedules must share one bound pass")
    p = _whole(p, "stages p", 1)
    v = _whole(v, "chunks v", 1) if "interleaved" in schedules else 1
    m = _ints(m)
    if np.any(m < 1):
        raise InputError("micro-batches m must be whole numbers >= 1")
    shapes = np.unique(m).tolist()
    pairs = _bounds_per_group(tuple(schedules), p, m, v, forward, backward_input, backward_weight, transfer, update,
                              chunk_layers, columns)
    out = []
    for schedule, (lo, hi) in zip(schedules, pairs, strict=True):
        bad = np.zeros(m.shape, dtype=bool)
        for mv in shapes:
            if shape_error(schedule, p, int(mv), v):
                bad |= m == mv
        out.append((np.where(bad, np.inf, lo), np.where(bad, np.inf, hi)))
    return out




def group_bound_form(schedule: str) -> str:
    """The closed form :func:`_bounds_per_group` bounds a (base) schedule with; schedules of one form get the same
    ``(lo, hi)`` from the same durations, bit for bit, but on the shapes :func:`shape_ok` rules out (inf there):
    ``"fused"`` for fill-drain and 1F1B (one fused backward, the same paths), ``"dualpipe"`` for both DualPipe
    orderings, the schedule itself otherwise (interleaved, ZB-H1, ZB-H2)."""
    if schedule.startswith("dualpipe"):
        return "dualpipe"
    return "fused" if schedule not in SPLIT_BACKWARD and schedule != "interleaved" else schedule


def bound_pass(schedule: str) -> str:
    """Which schedules :func:`completion_bounds_rows_of` bounds in one pass: those of one :func:`group_bound_form`,
    and ZB-H1 with ZB-H2 (``"split"``: the same per-stage maximum, prefix sums and serial timetable of the same
    split durations; only their last stage's pending dW and stage 0's warm-up differ)."""
    return "split" if schedule in ("zb-h1", "zb-h2") else group_bound_form(schedule)


def _bounds_per_group(schedules: tuple[str, ...], p: int, m: int | NDArray[np.int64], v: int, forward: ArrayLike,
                      backward_input: ArrayLike, backward_weight: ArrayLike, transfer: ArrayLike, update: ArrayLike,
                      chunk_layers: Iterable[int] | None,
                      columns: NDArray[np.intp] | None = None) -> list[tuple[FloatArray, FloatArray]]:
    """:func:`completion_bounds` for durations per layer group (arrays (p, ...)), one pair per schedule of
    ``schedules`` (all of one :func:`bound_pass`: what does not depend on the schedule is formed once); ``m`` a
    whole number or an integer array broadcasting with the rows; ``columns``: see :func:`completion_bounds_rows`."""
    schedule = schedules[0]
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
        return [(exact, exact)] * len(schedules)
    form = group_bound_form(schedule)  # the schedule is read through its form alone (and whether it fuses dX, dW)
    fused = schedule not in SPLIT_BACKWARD
    if fused:  # one backward op of dX + dW
        X, W = X + W, 0.0 * W
    w = F + X + W
    col = (p,) + (1,) * len(lead)

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
        pF, both = pre(F), np.asarray(up) > 0

        def dual(s: int) -> FloatArray:  # stage s: its start, then its down and up micro-batches' work
            fill = G(pF[s]) + float(s) * t
            start = np.where(both, np.minimum(fill, G(pF[p - 1 - s]) + float(p - 1 - s) * t), fill)
            row: FloatArray = ((start + down * G(w[s])) + up * G(w[p - 1 - s])) + G(U[s])
            return row

        lo = _stage_max(p, dual)
        los = [np.maximum(lo, (down - 1) * G(F[0]) + G(_stage_sum(F + X)) + G(W[0]) + 2 * (p - 1) * t + G(U[0]))]
        hops = p - 1
    elif form == "interleaved":
        frac = np.asarray(_chunk_fractions(schedule, p, v, chunk_layers))[:, 0].reshape(col)  # chunk 0 of each group
        pf = pre(F * frac)
        lo = G(pf[p - 1]) + (p - 1) * t + m * G(w[p - 1]) + G(pre(X * frac)[p - 1]) + (p - 1) * t + G(U[0])
        los = [np.maximum(lo, _stage_max(p, lambda s: ((G(pf[s]) + float(s) * t) + m * G(w[s])) + G(U[s])))]
        hops = v * p - 1
    else:  # fill-drain, 1F1B, ZB-H1, ZB-H2: stage s holds group s
        pf, px = pre(F), pre(X)
        fill = G(pf[p - 1]) + (p - 1) * t
        lo_a = _stage_max(p, lambda s: ((G(pf[s]) + float(s) * t) + m * G(w[s])) + G(U[s]))
        los = []
        for form in (group_bound_form(s) for s in schedules):  # ZB-H1 and ZB-H2 differ from here on only
            k = {"zb-h1": np.minimum(p, m), "zb-h2": np.minimum(2 * p - 1, m)}.get(form, 0)
            lo_b = fill + m * G((F + X)[p - 1]) + (m - k) * G(W[p - 1]) + G(px[p - 1]) + (p - 1) * t + G(W[0])
            lo = np.maximum(lo_a, lo_b + G(U[0]))
            if not fused:
                a0 = (p - 1) if form == "zb-h1" else 2 * (p - 1)
                lo_d = fill + G((F + X)[p - 1]) + G(px[p - 1]) + (p - 1) * t + (m - 1) * G(X[0]) \
                    + m * G(W[0]) + np.maximum(0, m - a0 - 1) * G(F[0])
                lo = np.maximum(lo, lo_d + G(U[0]))
            los.append(lo)
        hops = p - 1
    hi = out((m * G(_stage_sum(w)) + 2 * m * hops * t + G(u_max)) * (1 + BOUND_SLACK))
    los = los * len(schedules) if len(los) == 1 else los  # a form without a schedule's own part: one for all
    return [(out(lo * (1 - BOUND_SLACK)), hi) for lo in los]


def _stage_max(p: int, row: Callable[[int], FloatArray]) -> FloatArray:
    """``max over s < p of row(s)``, one stage at a time: the same bits as stacking the p rows into one (p, plans)
    array and taking its maximum over the stage axis (numpy reduces that axis row after row, in this order), without
    the (p, plans) temporaries (3x less CPU on the unit builds' (16, 11,520) arrays: they no longer fit the cache)."""
    out = np.array(row(0), dtype=float)
    for s in range(1, p):
        np.maximum(out, row(s), out=out)
    return out


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
