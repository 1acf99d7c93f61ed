"""The compute term of the step time family (seconds per step): the pipeline's completion over its stages
(closed forms, the event model's recurrence, its bounds on the plan grid or on rows), the per-layout
compute inputs and their reuse across schedules, stragglers, the framework's per-stage overhead, and
:func:`compute` itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, Literal, TypeAlias, cast, overload

import numpy as np
from numpy.typing import ArrayLike, NDArray

from tpopt.models import moe, pipeline, reliability
from tpopt.models.numeric import FloatArray, Floats, unique_rows
from tpopt.models.plan import Scenario
from tpopt.models.terms.layer_times import (
    _busiest,
    _dense_layer,
    _fold,
    _split_backward,
    microbatch_times,
    op_times,
    pipeline_transfer,
)
from tpopt.models.terms.memory import _moe_stages
from tpopt.models.terms.shapes import (
    _f,
    chunk_layers,
    chunk_weights,
    dense_split,
    grad_accum,
    load_factor,
    loss_chunk_layers,
    per_op_model,
    schedule_parts,
    stage_split,
    with_sequence_parallel,
)

Groups: TypeAlias = Callable[[int], Sequence[float]]
"""Layers per pipeline stage for p stages (:func:`stage_split`)."""


DenseGroups: TypeAlias = Callable[[int], Sequence[int] | None]
"""Dense-MLP blocks per pipeline stage for p stages, None without them (:func:`dense_split`)."""


BOUND_SLICE = 1 << 18  # group durations (stages x rows) per slice of a pipeline bound pass


GRID_STAGE_COUNTS = 256  # stage counts along the plan grid's pp axis up to which the bounds run on the grid


@overload
def pipeline_compute(schedule: str, pp: ArrayLike, micro_batches: ArrayLike, t_fwd: ArrayLike, t_bwd_input: ArrayLike,
                     t_bwd_weight: ArrayLike, t_transfer: ArrayLike, groups: Groups | None = None, *,
                     bounds: Literal[False] = False, dense: Sequence[ArrayLike] | None = None,
                     dense_groups: DenseGroups | None = None, loss_layers: float = 0.0) -> FloatArray: ...


@overload
def pipeline_compute(schedule: str, pp: ArrayLike, micro_batches: ArrayLike, t_fwd: ArrayLike, t_bwd_input: ArrayLike,
                     t_bwd_weight: ArrayLike, t_transfer: ArrayLike, groups: Groups | None = None, *,
                     bounds: Literal[True], dense: Sequence[ArrayLike] | None = None,
                     dense_groups: DenseGroups | None = None,
                     loss_layers: float = 0.0) -> tuple[FloatArray, FloatArray]: ...


def pipeline_compute(schedule: str, pp: ArrayLike, micro_batches: ArrayLike, t_fwd: ArrayLike, t_bwd_input: ArrayLike,
                     t_bwd_weight: ArrayLike, t_transfer: ArrayLike, groups: Groups | None = None, *,
                     bounds: bool = False, dense: Sequence[ArrayLike] | None = None,
                     dense_groups: DenseGroups | None = None,
                     loss_layers: float = 0.0) -> FloatArray | tuple[FloatArray, FloatArray]:
    """Per-step compute: the pipeline event model's completion time (m (t_f + t_b) when pp = 1).

    ``groups(p)``, when given, returns the per-stage layer split for p stages and the per-group
    durations are built from per-layer times plus first/last-stage extras (``t_fwd`` etc. are then
    (layer, first, last) triples); otherwise every stage takes the same (t_fwd, t_bwd_input, t_bwd_weight).
    ``bounds=True`` returns ``(lo, hi)`` from the closed-form bounds instead (solver pruning; equal to
    the exact value for pp = 1 and for balanced fill-drain and 1F1B). ``dense`` (fwd, dX, dW of a MoE
    model's dense-MLP block) with ``dense_groups(p)`` (dense blocks per stage, :func:`dense_split`): a
    group of n_g blocks, d_g of them dense, takes (n_g - d_g) x layer + d_g x dense. Interleaved chunks
    share their stage's duration in proportion to their layer counts (the pipeline model's rule), so a
    stage's dense blocks are spread over its chunks; the last chunk's share counts the LM head and loss as
    ``loss_layers`` layers (shapes.chunk_weights), where they run.
    """
    base, v = schedule_parts(schedule)
    if groups is not None:
        # with groups, each time is a (layer, first stage, last stage) triple
        f3, dx3, dw3 = cast(tuple[Sequence[ArrayLike], ...], (t_fwd, t_bwd_input, t_bwd_weight))
        return _pipeline_groups(base, v, pp, micro_batches, f3, dx3, dw3, t_transfer, groups, bounds, dense,
                                dense_groups, loss_layers)
    pp, m, tf, tdx, tdw, tx = np.broadcast_arrays(
        np.asarray(pp), _f(micro_batches), _f(t_fwd), _f(t_bwd_input), _f(t_bwd_weight), _f(t_transfer))
    shape = pp.shape
    pp, m, tf, tdx, tdw, tx = (x.reshape(-1) for x in (pp, m, tf, tdx, tdw, tx))
    out: FloatArray = m * (tf + tdx + tdw)
    multi = pp > 1
    if np.any(multi):
        # one vectorised call: closed forms, or one recurrence per distinct (pp, micro-batches) shape;
        # shapes the schedule cannot run give inf (layout.schedule_shape)
        mm = np.ceil(m[multi] - 1e-9).astype(int)
        args = (base, pp[multi], mm, tf[multi], tdx[multi], tdw[multi], tx[multi], 0.0)
        if bounds:
            lo, hi = pipeline.completion_bounds(*args, v=v)
            bad = ~pipeline.shape_ok(base, pp[multi], mm)
            hi_out = out.copy()
            out[multi] = np.where(bad, np.inf, lo)
            hi_out[multi] = np.where(bad, np.inf, hi)
            return out.reshape(shape), hi_out.reshape(shape)
        out[multi] = pipeline.completion_for_shapes(*args, v=v)
    if bounds:
        return out.reshape(shape), out.reshape(shape)
    return out.reshape(shape)


_COMPLETION_CACHE: dict[tuple[Any, ...], FloatArray] = {}
"""Answers of :func:`_unique_columns` by call: (the shape, every distinct column) -> the values (1,024 calls)."""

_COLUMN_CACHE: dict[tuple[Hashable, bytes], float] = {}
"""Answers of :func:`_unique_columns` by column, for the small calls answered column by column
(:data:`COLUMN_CALL`): (the shape, the column's bytes) -> its value."""

COLUMN_CALL = 64
"""Calls with at most this many distinct columns (one layout's durations, one plan's) remember each column on its
own: a plan evaluated after its layout was simulated reads its column instead of simulating again."""

COLUMN_ENTRIES = 65_536
"""Columns :data:`_COLUMN_CACHE` holds before it is emptied (a few hundred bytes each)."""


def _unique_columns(fn: Callable[..., ArrayLike], *arrays: FloatArray, key: Hashable | None = None) -> FloatArray:
    """``fn`` on the distinct columns of the 1-D (or (groups, n)) duration arrays only, scattered back:
    a plan grid repeats each duration set for every ZeRO stage, offload, save interval and mode. With a
    ``key`` (the pipeline shape) results are remembered across calls (the enumerator evaluates the same
    durations once per offload and save mode): per call, and per column for calls of at most
    :data:`COLUMN_CALL` columns that each differ across the rows of some (groups, n) array (uneven stages).
    ``fn`` answers such a column on its own, whatever its batch (the pipeline's recurrence is elementwise over
    duration sets; only a batch of balanced sets alone takes a closed form), so a column read back is the value
    its batch would give."""
    n = arrays[0].shape[-1]
    stacked = np.vstack([np.reshape(a, (-1, n)) for a in arrays])
    uniq, inverse = _distinct_columns(stacked)
    ck = None if key is None else (key, uniq.shape, uniq.tobytes())
    if ck is not None and ck in _COMPLETION_CACHE:
        return _COMPLETION_CACHE[ck][np.reshape(inverse, -1)]
    cuts = np.cumsum([0] + [1 if np.ndim(a) == 1 else a.shape[0] for a in arrays]).tolist()
    if ck is not None and 0 < uniq.shape[1] <= COLUMN_CALL and _uneven(uniq, cuts).all():
        if len(_COLUMN_CACHE) >= COLUMN_ENTRIES:
            _COLUMN_CACHE.clear()
        cols = [(key, uniq[:, j].tobytes()) for j in range(uniq.shape[1])]
        got = [_COLUMN_CACHE.get(c) for c in cols]
        miss = [j for j, g in enumerate(got) if g is None]
        if miss:
            vals = _columns_of(fn, arrays, cuts, uniq[:, miss]).tolist()
            for j, val in zip(miss, vals, strict=True):
                got[j] = _COLUMN_CACHE[cols[j]] = val
        result = np.asarray(got, dtype=float)
    else:
        result = _columns_of(fn, arrays, cuts, uniq)
        if ck is not None:
            if len(_COMPLETION_CACHE) >= 1024:
                _COMPLETION_CACHE.clear()
            _COMPLETION_CACHE[ck] = result
    return result[np.reshape(inverse, -1)]


def _uneven(uniq: FloatArray, cuts: Sequence[int]) -> NDArray[np.bool_]:
    """Columns of ``uniq`` that differ across the rows of some array (``cuts``: the arrays' rows) of several."""
    out = np.zeros(uniq.shape[1], dtype=bool)
    for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
        if hi - lo > 1:
            out |= (uniq[lo:hi] != uniq[lo:lo + 1]).any(axis=0)
    return out


def _columns_of(fn: Callable[..., ArrayLike], arrays: Sequence[FloatArray], cuts: Sequence[int],
                uniq: FloatArray) -> FloatArray:
    """``fn`` on the stacked columns ``uniq``, each array's rows (``cuts``) handed back in its own shape."""
    parts = [uniq[lo] if np.ndim(a) == 1 else uniq[lo:hi] for a, lo, hi in zip(arrays, cuts[:-1], cuts[1:],
                                                                                 strict=True)]
    return np.asarray(fn(*parts), dtype=float)


def _distinct_columns(stacked: FloatArray) -> tuple[FloatArray, NDArray[np.intp]]:
    """``np.unique(stacked, axis=1, return_inverse=True)`` of a 2-D float array without NaN: the distinct columns
    in lexicographic order (first row first) and each column's index among them, from one lexsort of the
    columns (np.unique over an axis sorts them as structured records, several times slower on small tables).
    Columns equal as numbers are one column (the first of them in ``stacked`` is kept)."""
    if stacked.shape[1] == 0 or np.isnan(stacked).any():
        uniq, back = np.unique(stacked, axis=1, return_inverse=True)
        return uniq, np.reshape(back, -1).astype(np.intp)
    order = np.lexsort(stacked[::-1])
    cols = stacked[:, order]
    new = np.empty(cols.shape[1], dtype=bool)
    new[0] = True
    new[1:] = np.any(cols[:, 1:] != cols[:, :-1], axis=0)
    inverse = np.empty(cols.shape[1], dtype=np.intp)
    inverse[order] = np.cumsum(new) - 1
    return cols[:, new], inverse


def _duration_sets(arrays: Sequence[FloatArray]) -> tuple[NDArray[np.intp], NDArray[np.intp]] | None:
    """(set of each row, first row of each set) of the distinct rows of equal-length 1-D arrays, equal
    meaning the same bits in every array; None when the rows are mostly distinct (no saving). The rows
    are hashed (their bit patterns mixed) and every row is checked against its set's first row, so a hash
    collision gives None, never a wrong set."""
    n = arrays[0].size
    h = np.zeros(n, dtype=np.uint64)
    bits = [np.ascontiguousarray(a, dtype=np.float64).view(np.uint64) for a in arrays]
    for b in bits:
        h = h * np.uint64(0x9E3779B97F4A7C15) + (b ^ (b >> np.uint64(29)))
    _, first, inverse = np.unique(h, return_index=True, return_inverse=True)
    if first.size * 4 > n:
        return None
    inverse = inverse.reshape(-1)
    if not all(np.array_equal(b[first][inverse], b) for b in bits):
        return None
    return inverse.astype(np.intp), first.astype(np.intp)


def _bounds_on_grid(bases: tuple[str, ...], v: int, pp: ArrayLike, micro_batches: ArrayLike,
                    durations: Sequence[ArrayLike], t_transfer: ArrayLike, groups: Groups,
                    dense_of: Callable[[int], Sequence[int]] | None,
                    loss_layers: float = 0.0) -> list[tuple[FloatArray, FloatArray]] | None:
    """The closed-form ``(lo, hi)`` of :func:`_pipeline_groups` (its ``bounds=True``) on the plan grid, one pair per
    base schedule of ``bases`` (all of one :func:`pipeline.bound_pass <tpopt.models.pipeline.bound_pass>`, bounded
    in one pass of :func:`pipeline.completion_bounds_rows_of`), when the
    stage count varies along one axis of the grid at most (an axis of at most GRID_STAGE_COUNTS entries: the pp
    axis of a table, not flattened rows); None otherwise. ``durations``: (fwd, dX, dW) of a layer, of the first
    stage's extras and of the last stage's, then those of a dense block (``dense_of``: dense blocks per stage).

    The inputs are kept at their own shapes and broadcast, not flattened into rows: the per-group durations vary
    along the few axes they depend on (recompute, TP, micro-batch: one set per cell), m along (DP, micro-batch),
    the transfer along (TP, DP, micro-batch, NICs), so every sum over a stage's durations is formed once per
    duration set and only the terms with m or the transfer are formed per plan. Each plan's bound is the same
    elementwise arithmetic as the row pass (bit for bit: tests/test_vectorised_paths.py); slabs of at most
    BOUND_SLICE group durations keep the (p, plans) temporaries small."""
    shape = np.broadcast_shapes(*(np.shape(x) for x in (pp, micro_batches, t_transfer, *durations)))
    nd = len(shape)

    def pad(x: ArrayLike) -> NDArray[Any]:
        a = np.asarray(x)
        return a.reshape((1,) * (nd - a.ndim) + a.shape)

    p_of = pad(pp)
    along = [i for i, n in enumerate(p_of.shape) if n > 1]
    if len(along) > 1 or p_of.size > GRID_STAGE_COUNTS:
        return None
    ax = along[0] if along else -1
    m_float = pad(_f(micro_batches))
    m_all, t_all = pad(np.ceil(m_float - 1e-9).astype(int)), pad(_f(t_transfer))
    d_all = [pad(_f(x)) for x in durations]
    base = bases[0]  # the chunks, and whether a stage count can run, are the pass's (interleaved is one alone)
    grids = [(np.empty(shape), np.empty(shape)) for _ in bases]
    for j in range(p_of.shape[ax] if along else 1):
        p = int(p_of.reshape(-1)[j])

        def at_p(a: NDArray[Any], j: int = j) -> NDArray[Any]:
            return a[(slice(None),) * ax + (slice(j, j + 1),)] if along and a.shape[ax] > 1 else a

        m_p, t_p, d_p = at_p(m_all), at_p(t_all), [at_p(x) for x in d_all]
        dst: list[slice] = [slice(None)] * nd
        if along:
            dst[ax] = slice(j, j + 1)
        if p <= 1:  # one stage: m x (every layer + embedding + head), as the row pass forms it
            lf, ldx, ldw, ef, edx, edw, hf, hdx, hdw, *more = d_p
            n_all = float(sum(groups(1)))
            if dense_of is not None:
                d_one = float(sum(dense_of(1)))
                one = at_p(m_float) * ((n_all - d_one) * (lf + ldx + ldw) + d_one * (more[0] + more[1] + more[2])
                                       + ef + edx + edw + hf + hdx + hdw)
            else:
                one = at_p(m_float) * (n_all * (lf + ldx + ldw) + ef + edx + edw + hf + hdx + hdw)
            for lo_grid, hi_grid in grids:
                lo_grid[tuple(dst)] = hi_grid[tuple(dst)] = one
            continue
        lead = np.broadcast_shapes(m_p.shape, t_p.shape, *(x.shape for x in d_p))
        split = groups(p)
        chunks = chunk_weights(split, v, loss_layers) if base == "interleaved" else None
        if not split or (base == "interleaved" and chunks is None):
            for lo_grid, hi_grid in grids:  # layout.schedule_shape rules these plans out
                lo_grid[tuple(dst)] = hi_grid[tuple(dst)] = np.inf
            continue
        n_g = np.asarray(split, dtype=float).reshape((-1,) + (1,) * nd)
        d_g = None if dense_of is None else np.asarray(dense_of(p), dtype=float).reshape((-1,) + (1,) * nd)
        k = 0  # slabs: p x (plans of a slab) <= BOUND_SLICE, ranges along axis k - 1, single entries before it
        while k < nd and p * math.prod(lead[k:]) > BOUND_SLICE:
            k += 1
        step = max(1, BOUND_SLICE // (p * math.prod(lead[k:])))
        heads = [()] if k == 0 else [(*h, slice(i, i + step)) for h in np.ndindex(*lead[:k - 1])
                                     for i in range(0, lead[k - 1], step)]
        for head in heads:
            cut = tuple(h if isinstance(h, slice) else slice(h, h + 1) for h in head)

            def part(a: NDArray[Any], cut: tuple[slice, ...] = cut) -> NDArray[Any]:
                return a[tuple(c if a.shape[i] > 1 else slice(None) for i, c in enumerate(cut))]

            lf, ldx, ldw, ef, edx, edw, hf, hdx, hdw, *more = (part(x) for x in d_p)
            dshape = np.broadcast_shapes(*(x.shape for x in (lf, ldx, ldw, ef, edx, edw, hf, hdx, hdw, *more)))
            grid = [np.broadcast_to(x, dshape)[None] for x in (lf, ldx, ldw, *more)]
            if d_g is not None:  # (n_g - d_g) MoE blocks + d_g dense blocks
                per = [(n_g - d_g) * x + d_g * y for x, y in zip(grid[:3], grid[3:], strict=True)]
            else:
                per = [n_g * x for x in grid[:3]]
            for arr, e, h in zip(per, (ef, edx, edw), (hf, hdx, hdw), strict=True):
                arr[0] = arr[0] + np.broadcast_to(e, dshape)
                arr[-1] = arr[-1] + np.broadcast_to(h, dshape)
            fwd, dx, dw = per
            pairs = pipeline.completion_bounds_rows_of(bases, p, part(m_p), fwd, dx, dw, part(t_p), 0.0, v=v,
                                                       chunk_layers=chunks)
            for i, c in enumerate(cut):
                if not (along and i == ax):
                    dst[i] = c
            for (lo_grid, hi_grid), (lo, hi) in zip(grids, pairs, strict=True):
                lo_grid[tuple(dst)], hi_grid[tuple(dst)] = lo, hi
    return grids


def _pipeline_groups(base: str, v: int, pp: ArrayLike, micro_batches: ArrayLike, layer_f: Sequence[ArrayLike],
                     layer_dx: Sequence[ArrayLike], layer_dw: Sequence[ArrayLike], t_transfer: ArrayLike,
                     groups: Groups, bounds: bool = False, dense: Sequence[ArrayLike] | None = None,
                     dense_groups: DenseGroups | None = None,
                     loss_layers: float = 0.0) -> FloatArray | tuple[FloatArray, FloatArray]:
    """Completion time with per-stage durations (uneven layer counts, a MoE model's dense blocks,
    embedding and head placement); with ``bounds``, (lo, hi) from the closed-form bounds summed group by
    group (no simulation)."""
    (lf, ef, hf), (ldx, edx, hdx), (ldw, edw, hdw) = layer_f, layer_dx, layer_dw
    mixed = dense is not None and dense_groups is not None and dense_groups(1) is not None
    more = tuple(_f(x) for x in cast(Sequence[ArrayLike], dense)) if mixed else ()
    dense_of = cast(Callable[[int], Sequence[int]], dense_groups)  # called only when mixed
    if bounds:  # on the plan grid where the stage count has an axis of its own
        grid = _bounds_on_grid((base,), v, pp, micro_batches, (lf, ldx, ldw, ef, edx, edw, hf, hdx, hdw, *more),
                               t_transfer, groups, dense_of if mixed else None, loss_layers)
        if grid is not None:
            return grid[0]
    arrs = np.broadcast_arrays(np.asarray(pp), _f(micro_batches), *(_f(x) for x in (lf, ldx, ldw, ef, edx, edw, hf,
                                                                                       hdx, hdw, t_transfer)), *more)
    shape = arrs[0].shape
    pp_a, m, lf, ldx, ldw, ef, edx, edw, hf, hdx, hdw, tx = (x.reshape(-1) for x in arrs[:12])
    # the dense blocks' rows are read only when mixed, the upper bounds only with bounds
    df, ddx, ddw = cast(Iterable[FloatArray], (x.reshape(-1) for x in arrs[12:]) if mixed else (None, None, None))
    out = np.empty(pp_a.shape)
    hi_out = cast(FloatArray, np.empty(pp_a.shape) if bounds else None)
    mm = np.ceil(m - 1e-9).astype(int)
    single = pp_a <= 1
    n_all = float(sum(groups(1)))
    if mixed:
        d_all = float(sum(dense_of(1)))
        out[single] = m[single] * ((n_all - d_all) * (lf + ldx + ldw) + d_all * (df + ddx + ddw)
                                   + ef + edx + edw + hf + hdx + hdw)[single]
    else:
        out[single] = m[single] * (n_all * (lf + ldx + ldw) + ef + edx + edw + hf + hdx + hdw)[single]
    if bounds:
        hi_out[single] = out[single]
    multi = np.flatnonzero(~single)

    def durations(sel: NDArray[np.intp], p: int, split: Sequence[float]) -> tuple[FloatArray, FloatArray, FloatArray]:
        """Per-group durations (p, rows): n_g x layer, + embedding on group 0, + head and loss on the
        last (the additions of _group_times, in its order)."""
        n_g = np.asarray(split, dtype=float)[:, None]
        if mixed:  # (n_g - d_g) MoE blocks + d_g dense blocks
            d_g = np.asarray(dense_of(p), dtype=float)[:, None]
            fwd, dx, dw = ((n_g - d_g) * x[sel][None] + d_g * y[sel][None]
                           for x, y in ((lf, df), (ldx, ddx), (ldw, ddw)))
        else:
            fwd, dx, dw = (n_g * x[sel][None] for x in (lf, ldx, ldw))
        for arr, e, h in ((fwd, ef, hf), (dx, edx, hdx), (dw, edw, hdw)):
            arr[0] = arr[0] + e[sel]
            arr[-1] = arr[-1] + h[sel]
        return fwd, dx, dw

    if multi.size and bounds:
        # one vectorised pass per stage count, every micro-batch count at once; the group durations of each
        # distinct duration set once (a plan grid repeats them for every DP degree, NIC count and stage count)
        sets = _duration_sets([lf, ldx, ldw, ef, edx, edw, hf, hdx, hdw] + ([df, ddx, ddw] if mixed else []))
        for p_val in np.unique(pp_a[multi]).tolist():
            sel = multi[pp_a[multi] == p_val]
            p = int(p_val)
            split = groups(p)
            chunks = chunk_weights(split, v, loss_layers) if base == "interleaved" else None
            if not split or (base == "interleaved" and chunks is None):
                out[sel] = hi_out[sel] = np.inf  # layout.schedule_shape rules these plans out
                continue
            # rows in slices of at most BOUND_SLICE group durations: the (p, rows) temporaries stay small
            # (every row is bounded on its own, so the slices give the same numbers as one pass)
            step = max(1, BOUND_SLICE // p)
            set_of, per_set = (None, None) if sets is None else (sets[0], durations(sets[1], p, split))
            for lo_row in range(0, sel.size, step):
                part = sel[lo_row:lo_row + step]
                if set_of is not None and per_set is not None:  # per_set: one row of each duration set
                    out[part], hi_out[part] = pipeline.completion_bounds_rows(
                        base, p, mm[part], *per_set, tx[part], 0.0, v=v, chunk_layers=chunks, columns=set_of[part])
                else:
                    out[part], hi_out[part] = pipeline.completion_bounds_rows(
                        base, p, mm[part], *durations(part, p, split), tx[part], 0.0, v=v, chunk_layers=chunks)
    elif multi.size:
        # every (pp, micro-batches) shape once, its rows selected once
        shapes, order, cuts = pipeline.group_shapes(pp_a[multi], mm[multi])
        for k, (p_val, m_val) in enumerate(shapes):
            sel = multi[order[cuts[k]:cuts[k + 1]]]
            p, mv = int(p_val), int(m_val)
            split = groups(p)
            chunks = chunk_weights(split, v, loss_layers) if base == "interleaved" else None
            if not split or (base == "interleaved" and chunks is None) or pipeline.shape_error(base, p, mv, v):
                out[sel] = np.inf  # layout.schedule_shape rules this plan out
                continue
            fwd, dx, dw = durations(sel, p, split)
            out[sel] = _unique_columns(lambda f, x_, w, t, p=p, mv=mv, chunks=chunks: pipeline.completion_time(
                base, p, mv, f, x_, w, t, 0.0, v=v, chunk_layers=chunks, per_group=True), fwd, dx, dw, tx[sel],
                key=(base, p, mv, v, tuple(chunks or ()), tuple(split), mixed and tuple(dense_of(p))))
    if bounds:
        return out.reshape(shape), hi_out.reshape(shape)
    return out.reshape(shape)


def schedule_shape_ok(sc: Scenario, *, schedule: str, pp: ArrayLike, dp: ArrayLike, mb: ArrayLike) -> NDArray[np.bool_]:
    """1 where the pipeline schedule can run pp stages with batch / (dp x mb) micro-batches:
    always when pp = 1; DeepSeek's DualPipe ordering restricts shapes; interleaved needs at least v
    layers on every stage but the first and the last, which may hold v - 1 beside the embedding's or
    the loss's chunk (shapes.chunk_layers); explicit first / last stage layer counts must leave every stage a layer."""
    base, v = schedule_parts(schedule)
    pp, m = np.broadcast_arrays(np.asarray(pp), np.ceil(sc.task.global_batch / (_f(dp) * _f(mb)) - 1e-9).astype(int))
    out = np.ones(pp.shape, dtype=bool)
    for p_val, m_val in unique_rows(np.stack([pp.reshape(-1), m.reshape(-1)], axis=1)):
        if p_val <= 1:
            continue
        bad = bool(pipeline.shape_error(base, int(p_val), int(m_val), v))
        if not bad:
            split = stage_split(sc, int(p_val))
            bad = not split or (base == "interleaved" and chunk_layers(split, v) is None)
        if bad:
            out[(pp == p_val) & (m == m_val)] = False
    return out


def straggler_factor(sc: Scenario, cards: ArrayLike) -> Floats:
    """Expected slowest-card factor on compute: 1 + sigma E[max of n standard normals] (chapter 10.4.5)."""
    sigma = sc.reliability.straggler_sigma
    if sigma <= 0:
        return np.ones(np.shape(cards))
    return 1.0 + sigma * reliability.expected_max_std_normal(np.asarray(cards).astype(int))


def compute_key(sc: Scenario, ep: ArrayLike, expert_tp: ArrayLike, capacity_factor: ArrayLike) -> tuple[Any, ...]:
    """What the compute term depends on among (ep, expert_tp, capacity_factor): the load factor in the
    flat model; also EP and expert-TP (grouped-GEMM shapes) in the per-operation model."""
    phi = float(load_factor(sc, ep, capacity_factor))
    return (ep, expert_tp, phi) if per_op_model(sc) and sc.model.moe else (phi,)


def inputs_schedule_key(schedule: str) -> bool:
    """What :func:`compute_inputs` reads of the schedule: whether dW runs apart from dX (:func:`_fold`); two
    schedules with the same key give the same inputs, bit for bit."""
    return _split_backward(schedule)


def compute_inputs(sc: Scenario, *, acc: str, recompute: str, sp: bool | None = None, schedule: str, tp: ArrayLike,
                   cp: ArrayLike = 1, pp: ArrayLike, dp: ArrayLike, mb: ArrayLike, nics: ArrayLike, ep: ArrayLike = 1,
                   etp: ArrayLike = 0, cap: ArrayLike = 0.0,
                   kept: dict[str, tuple[Floats, Floats, Floats]] | None = None) -> tuple[Floats, ...]:
    """Everything the compute term needs, as 13 arrays: (fwd, dX, dW) of a layer (per-operation model)
    or of a balanced stage (flat model), the first stage's and the last stage's extras (zero in the flat
    model), the boundary transfer, micro-batches per step, cards and the stack's host time per step on the card
    (:func:`stack_overhead`; zero in the flat model); for a MoE model with dense-MLP blocks (per-operation model,
    :func:`dense_split`) three more: (fwd, dX, dW) of a dense block (:func:`dense_inputs`).

    ``kept``: a dict the caller holds for calls on one scenario and the same layout arrays (tp, cp, pp, dp, mb,
    nics), keeping per accelerator the three inputs that read none of the recompute policy, sequence parallelism
    and the schedule (:func:`_layout_inputs`): the calls over a table's recompute policies then form them once."""
    base = sc
    sc = with_sequence_parallel(sc, sp)
    got = kept.get(acc) if kept is not None else None
    if got is None:
        got = _layout_inputs(base, acc=acc, tp=tp, cp=cp, pp=pp, dp=dp, mb=mb, nics=nics)
        if kept is not None:
            kept[acc] = got
    t_x, ga, cards = got
    if per_op_model(sc):
        kernels: dict[str, Any] = dict(acc=acc, recompute=recompute, tp=tp, cp=cp, mb=mb, ep=ep, etp=etp, cap=cap,
                                       nics=nics)
        layer, first, last = op_times(sc, **kernels)
        folded = [_fold(schedule, *x[:3]) for x in (layer, first, last)]
        dense = _dense_layer(sc, **kernels)
        more = () if dense is None else tuple(_fold(schedule, *dense[:3]))
        return (*folded[0], *folded[1], *folded[2], t_x, ga, cards, stack_overhead(sc, acc=acc, pp=pp, ga=ga), *more)
    t_f, t_dx, t_dw = microbatch_times(sc, acc=acc, recompute=recompute, schedule=schedule, tp=tp, cp=cp, pp=pp,
                                       mb=mb, ep=ep, etp=etp, cap=cap, nics=nics)
    z = 0.0 * _f(t_f)
    return t_f, t_dx, t_dw, z, z, z, z, z, z, t_x, ga, cards, 0.0 * _f(ga)


def dense_inputs(inputs: Sequence[Any]) -> Sequence[Any] | None:
    """(fwd, dX, dW) of a dense block from :func:`compute_inputs`' arrays (None: the model has none apart)."""
    return inputs[13:16] or None


def _layout_inputs(sc: Scenario, *, acc: str, tp: ArrayLike, cp: ArrayLike, pp: ArrayLike, dp: ArrayLike,
                   mb: ArrayLike, nics: ArrayLike) -> tuple[Floats, Floats, Floats]:
    """The inputs of :func:`compute_inputs` that read the accelerator and the layout only: the boundary transfer
    (the fabric, sequence length, hidden size and activation bytes: sequence parallelism changes none of them),
    micro-batches per step b / (dp mb) and cards tp cp pp dp."""
    t_x = pipeline_transfer(sc, acc=acc, tp=tp, cp=cp, pp=pp, dp=dp, mb=mb, nics=nics)
    return t_x, grad_accum(sc, dp, mb), _f(tp) * _f(cp) * _f(pp) * _f(dp)


def compute_from(sc: Scenario, schedule: str, pp: ArrayLike,
                 inputs: Sequence[Any]) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Compute term from its inputs (arrays may stack many plans; one simulator call per shape).

    Returns (compute_with_stragglers, pure_compute, bubble, straggler); the first includes the stack's host
    time per step (:func:`stack_overhead`, per-operation model), outside the other three; pure compute is the busiest
    stage's work, m (t_f + t_dX + t_dW).
    """
    lf, ldx, ldw, ef, edx, edw, hf, hdx, hdw, t_x, ga, cards = inputs[:12]
    completion = _completion(sc, schedule, pp, inputs)
    if per_op_model(sc):
        dense = dense_inputs(inputs)
        busy = _busiest(sc, pp, (lf + ldx + ldw,), (ef + edx + edw,), (hf + hdx + hdw,), 1,
                        None if dense is None else (dense[0] + dense[1] + dense[2],))[0]
        pure = ga * busy
    else:
        pure = ga * (lf + ldx + ldw)
    # the stack's host time (per-operation model) adds to the step outside the pipeline: not bubble, not straggler
    host = inputs[12]
    total = completion * straggler_factor(sc, cards)
    finite = np.isfinite(completion)
    return (total + host, pure, np.where(finite, np.maximum(completion - pure, 0.0), np.inf),
            np.where(finite, total - np.where(finite, completion, 0.0), 0.0))


def _completion(sc: Scenario, schedule: str, pp: ArrayLike, inputs: Sequence[Any]) -> FloatArray:
    """The pipeline's completion time per step from :func:`compute_inputs` (no stragglers, no host time)."""
    lf, ldx, ldw, ef, edx, edw, hf, hdx, hdw, t_x, ga, _cards = inputs[:12]
    if per_op_model(sc):
        return pipeline_compute(schedule, pp, ga, (lf, ef, hf), (ldx, edx, hdx), (ldw, edw, hdw), t_x,
                                groups=lambda p: stage_split(sc, p), dense=dense_inputs(inputs),
                                dense_groups=lambda p: dense_split(sc, p), loss_layers=loss_chunk_layers(sc.model))
    return pipeline_compute(schedule, pp, ga, lf, ldx, ldw, t_x)


def compute_total(sc: Scenario, schedule: str, pp: ArrayLike, inputs: Sequence[Any]) -> FloatArray:
    """:func:`compute_from`'s first value alone (the compute term's table): the completion time times the
    straggler factor, plus the stack's host time per step (per-operation model), without the busiest stage's
    pure compute the split needs."""
    total: FloatArray = _completion(sc, schedule, pp, inputs) * straggler_factor(sc, inputs[11]) + inputs[12]
    return total


def stack_overhead(sc: Scenario, *, acc: str, pp: ArrayLike, ga: ArrayLike) -> FloatArray:
    """Host-side time per step that no compute hides (per-operation model; the stack's profile,
    catalogs/stacks.toml): t_step + (m + pp - 1) t_micro, the optimizer step's launch, gradient-norm and
    loss reductions once per step, and the schedule's bookkeeping once per micro-batch slot of the
    pipeline's critical path (m micro-batches plus the pp - 1 of the fill), and the MoE blocks' launch time on
    ``acc`` (:func:`moe_host_launch`)."""
    st = sc.stack
    out: FloatArray = st.step_overhead + (_f(ga) + _f(pp) - 1.0) * st.microbatch_overhead
    return out + moe_host_launch(sc, acc=acc, pp=pp, ga=ga)


def moe_host_launch(sc: Scenario, *, acc: str, pp: ArrayLike, ga: ArrayLike) -> FloatArray:
    """Host launch time of the MoE blocks' static parts per step that the GPU waits for (moe.host_launch_exposed):
    every micro-batch's MoE blocks on the stage with the most of them, at the stack's moe_host_launch per block,
    unless the scenario's [moe] cuda_graphs (its recipe's) replays them as CUDA graphs on ``acc``
    (MoeOptions.cuda_graphs_on: not where the card's maker does not run the recipe's graphs); 0 for a dense model."""
    if not sc.model.moe or sc.stack.moe_host_launch <= 0:
        return 0.0 * _f(pp) * _f(ga)
    blocks = _moe_stages(sc, 1.0, pp, lambda d, xl, xb, n: n)
    return moe.host_launch_exposed(_f(ga), blocks, sc.stack.moe_host_launch, sc.moe.cuda_graphs_on(acc))


def compute_bounds(sc: Scenario, schedule: str, pp: ArrayLike, inputs: Sequence[Any]) -> tuple[FloatArray, FloatArray]:
    """``(lo, hi)`` of :func:`compute_from`'s compute-with-stragglers from the pipeline's closed-form
    bounds (solver pruning; exact where the pipeline term has a closed form)."""
    lf, ldx, ldw, ef, edx, edw, hf, hdx, hdw, t_x, ga, cards = inputs[:12]
    if per_op_model(sc):
        lo, hi = pipeline_compute(schedule, pp, ga, (lf, ef, hf), (ldx, edx, hdx), (ldw, edw, hdw), t_x,
                                  groups=lambda p: stage_split(sc, p), bounds=True, dense=dense_inputs(inputs),
                                  dense_groups=lambda p: dense_split(sc, p), loss_layers=loss_chunk_layers(sc.model))
        lo, hi = lo + inputs[12], hi + inputs[12]
    else:
        lo, hi = pipeline_compute(schedule, pp, ga, lf, ldx, ldw, t_x, bounds=True)
    factor = straggler_factor(sc, cards)
    return lo * factor, hi * factor


def compute_bounds_of(sc: Scenario, schedules: Sequence[str], pp: ArrayLike,
                      inputs: Sequence[Any]) -> list[tuple[FloatArray, FloatArray]]:
    """:func:`compute_bounds` of each of ``schedules`` on the same inputs: schedules of one bound pass
    (:func:`pipeline.bound_pass <tpopt.models.pipeline.bound_pass>`: ZB-H1 with ZB-H2) in one pass of the pipeline
    bounds on the plan grid where the per-operation model bounds them there (the per-stage maximum, prefix sums and
    serial timetable formed once), each other schedule on its own. Each pair is the bits :func:`compute_bounds`
    gives for its schedule: the same arithmetic on the same arrays, in the same order."""
    parts = [schedule_parts(s) for s in schedules]
    grids = None
    if (per_op_model(sc) and len(parts) > 1 and len({pipeline.bound_pass(b) for b, _ in parts}) == 1
            and len({v for _, v in parts}) == 1):  # as compute_bounds -> pipeline_compute -> _pipeline_groups
        lf, ldx, ldw, ef, edx, edw, hf, hdx, hdw, t_x, ga = inputs[:11]
        dense = dense_inputs(inputs)
        mixed = dense is not None and dense_split(sc, 1) is not None
        more = tuple(_f(x) for x in cast(Sequence[ArrayLike], dense)) if mixed else ()
        grids = _bounds_on_grid(tuple(b for b, _ in parts), parts[0][1], pp, ga,
                                (lf, ldx, ldw, ef, edx, edw, hf, hdx, hdw, *more), t_x, lambda p: stage_split(sc, p),
                                cast(Callable[[int], Sequence[int]], lambda p: dense_split(sc, p)) if mixed else None,
                                loss_chunk_layers(sc.model))
    if grids is None:
        return [compute_bounds(sc, s, pp, inputs) for s in schedules]
    host = inputs[12]
    factor = straggler_factor(sc, inputs[11])
    return [((lo + host) * factor, (hi + host) * factor) for lo, hi in grids]


def compute(sc: Scenario, *, acc: str, recompute: str, sp: bool | None = None, schedule: str, tp: ArrayLike,
            cp: ArrayLike = 1, pp: ArrayLike, dp: ArrayLike, mb: ArrayLike, nics: ArrayLike, ep: ArrayLike = 1,
            etp: ArrayLike = 0, cap: ArrayLike = 0.0) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Per-step compute incl. pipeline bubbles, times the straggler factor.

    Returns (compute_with_stragglers, pure_compute, bubble, straggler) so that reports can split it.
    """
    return compute_from(sc, schedule, pp, compute_inputs(sc, acc=acc, recompute=recompute, sp=sp, schedule=schedule,
                                                         tp=tp, cp=cp, pp=pp, dp=dp, mb=mb, nics=nics, ep=ep, etp=etp,
                                                         cap=cap))
