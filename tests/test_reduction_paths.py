"""The layout bounds' fast table paths give the numbers of the paths they replace, bit for bit (issue 27): a table's
reduction onto the layout grid without first copying it with its non-finite entries replaced
(decompose._reduced: reduced as it is, again only where NaN or an infinity shows, decompose._unaffected), a
broadcast table reduced over its own entries (decompose._unbroadcast), and a layout group's tables sliced from the
whole space's tables where a report analyses the space (ondemand.slice_whole_tables) instead of built for the group,
and the compute bounds of a schedule taken from a schedule of the same closed form (pipeline.group_bound_form,
space.compute_bounds_of_twin) instead of computed again.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tpopt.catalogs.scenario import load_scenario
from tpopt.models import pipeline as P
from tpopt.optimizer import decompose as D
from tpopt.optimizer import ondemand
from tpopt.optimizer.ondemand import solve_on_demand
from tpopt.optimizer.result import Request
from tpopt.optimizer.space import FAMILIES, Space, reduce_to

ROOT = Path(__file__).resolve().parents[1]
KEEP = {"tp": [1, 2, 8], "pp": [1, 3, 8], "dp": [16, 48, 96], "mb": [1, 2], "recompute": ["none", "full", "mlp"],
        "nics": [1, 4]}


def _space(tmp_path) -> Space:
    """The widest GPT-3 example under the per-operation model (its ``efficiency`` line dropped), cut small."""
    text = (ROOT / "examples" / "gpt3-175b-widest.toml").read_text(encoding="utf-8")
    path = tmp_path / "gpt3-per-op.toml"
    path.write_text("\n".join(line for line in text.splitlines() if not line.startswith("efficiency")) + "\n",
                    encoding="utf-8")
    return Space.from_scenario(load_scenario(path), KEEP)


def _where_pass(space: Space, vars: tuple[str, ...], vals: np.ndarray, fn, target: tuple[str, ...]) -> np.ndarray:
    """The reduction the fast path replaces: the whole table copied with its non-finite entries left out."""
    if vals.dtype != bool:
        vals = np.where(np.isfinite(vals), vals, np.inf if fn is np.min else -np.inf)
    return reduce_to(space.domains, vals, vars, target, fn, broadcast=False)


def test_reductions_equal_the_where_pass(tmp_path):
    """Every table a bound reads, reduced onto the layout grid (and onto the layout x coupled-choices grid) for its
    minimum and maximum: the same values, dtype and shape as the where() pass; so are tables with NaN, -inf and
    +inf entries scattered through them, and the broadcast zeros of a dense model's all-to-all table."""
    space = _space(tmp_path)
    n = int(np.prod([len(space.domains[v]) for v in D.HUB]))
    targets = (D.HUB, D.HUB + D.coupling_vars(space, n))
    rng = np.random.default_rng(27)
    names = [name for name in space._specs if not name.endswith((".lo", ".hi"))]
    broadcast = 0
    for name in names:
        for fn, side in ((np.min, "lo"), (np.max, "hi")):
            t = space.bound_table(name, side)
            broadcast += int(any(s == 0 and k > 1 for s, k in zip(t.values.strides, t.values.shape, strict=True)))
            for target in targets:
                got = D._reduced(space, name, fn, None, target)
                want = _where_pass(space, t.vars, t.values, fn, target)
                assert got.dtype == want.dtype and got.shape == want.shape, (name, fn.__name__)
                assert np.array_equal(got, want, equal_nan=True), (name, fn.__name__)
                if t.values.dtype.kind != "f" or t.values.size < 8:
                    continue
                for bad in (np.nan, -np.inf, np.inf, None):  # non-finite entries left out (None: all three)
                    vals = np.array(t.values, dtype=t.values.dtype)
                    flat = vals.reshape(-1)
                    at = rng.choice(flat.size, size=max(1, flat.size // 7), replace=False)
                    flat[at] = bad if bad is not None else rng.choice([np.nan, -np.inf, np.inf], size=at.size)
                    got = D._reduced(space, name, fn, vals, target)
                    want = _where_pass(space, t.vars, vals, fn, target)
                    assert got.dtype == want.dtype and np.array_equal(got, want, equal_nan=True), (name, bad)
    assert broadcast  # time.ep_comm of the dense model: one zero laid out on its grid
    for fn in (np.min, np.max):
        assert D._unaffected(np.array([1.0, np.inf if fn is np.min else -np.inf]), fn)
        assert not D._unaffected(np.array([1.0, np.nan]), fn)
        assert not D._unaffected(np.array([1.0, -np.inf if fn is np.min else np.inf]), fn)


def test_group_slices_of_the_whole_tables_equal_the_groups_own_build(tmp_path, monkeypatch):
    """A space marked by ondemand.slice_whole_tables: its layout groups' tables (every one but the compute term's)
    are views of the whole space's tables, and equal, value for value, the tables a group builds for itself (every
    table its own: SHARED_ROWS 0); the on-demand solve of the marked space proves the same plans and certificate."""
    marked, plain = _space(tmp_path), _space(tmp_path)
    ondemand.slice_whole_tables(marked)
    fixed = ondemand.group_vars(marked)
    names = [n for n in marked._specs if not n.startswith("time.compute")]
    with monkeypatch.context() as m:
        m.setattr(ondemand, "SHARED_ROWS", 0)
        for idx in np.ndindex(*(len(marked.domains[v]) for v in fixed)):
            a, b = ondemand.group_space(marked, fixed, idx), ondemand.group_space(plain, fixed, idx)
            for name in names:
                got, want = a.tables[name], b.tables[name]
                assert np.shares_memory(got.values, marked.tables[name].values) or got.values.size <= 1, name
                assert got.vars == want.vars and got.values.shape == want.values.shape, name
                assert np.array_equal(got.values, want.values, equal_nan=True), (name, idx)
    enforced = Request().enforced(FAMILIES)
    again, fresh = _space(tmp_path), _space(tmp_path)
    ondemand.slice_whole_tables(again)
    got, want = solve_on_demand(again, Request(top=3), enforced), solve_on_demand(fresh, Request(top=3), enforced)
    assert [ev.plan for ev in got[0]] == [ev.plan for ev in want[0]] and got[1:] == want[1:]
    assert len(got[0]) == 3 and got[2] >= 1
    # the group-bound pass's floor of the whole space, kept for the analysis (only where the space is marked)
    assert "_floor" not in fresh.__dict__
    kept = again.__dict__["_floor"]
    ref = _space(tmp_path).compute_floor()
    assert kept.vars == ref.vars and np.array_equal(kept.values, ref.values)
    assert ondemand.PendingGroups.of(again) is not None and "_floor" not in again.__dict__  # taken by the analysis


@pytest.mark.parametrize("fn", [np.min, np.max])
def test_a_broadcast_table_reduces_over_its_own_entries(tmp_path, fn):
    """A table broadcast along some axes (stride 0) and varying along others: reduced over its one entry per
    broadcast axis, then broadcast again, it gives the values of the table laid out whole."""
    space = _space(tmp_path)
    vars = space.table_vars("time.exposed_dp")
    d = space.domains
    shape = tuple(len(d[v]) for v in vars)
    keep = [i for i, v in enumerate(vars) if v in ("tp", "dp", "zero")]
    small = np.random.default_rng(5).uniform(0.0, 1.0, [shape[i] if i in keep else 1 for i in range(len(vars))])
    view = np.broadcast_to(small, shape)
    laid = np.array(view)
    for target in (D.HUB, D.HUB + ("zero",)):
        got = D._reduced(space, "time.exposed_dp", fn, view, target)
        want = D._reduced(space, "time.exposed_dp", fn, laid, target)
        assert got.shape == want.shape and np.array_equal(got, want)


EVERY_SCHEDULE = 'schedule = ["fill-drain", "1f1b", "interleaved", "zb-h1", "zb-h2", "dualpipe", "dualpipe-deepseek"]'


def _per_op_example(tmp_path, name: str, keep=None) -> Space:
    """An example under the per-operation model searching every schedule, cut to ``keep``."""
    text = (ROOT / "examples" / name).read_text(encoding="utf-8")
    lines = [EVERY_SCHEDULE if line.startswith("schedule = [") else line for line in text.splitlines()
             if not line.startswith("efficiency")]
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return Space.from_scenario(load_scenario(path), keep)


@pytest.mark.parametrize("name,keep", [("gpt3-175b-widest.toml", {**KEEP, "pp": [1, 2, 3, 4, 8], "dp": [8, 16, 48]}),
                                       ("deepseek-v3.toml", {"pp": [1, 2, 8, 16], "mb": [1, 2]})])
def test_compute_bounds_of_a_twin_schedule_equal_its_own(tmp_path, name, keep):
    """The compute bound tables (both sides) with the bounds of 1F1B taken from fill-drain's and DeepSeek's DualPipe
    from the chapter's (one closed form each, pipeline.group_bound_form; inf where DeepSeek's ordering cannot run
    the shape) equal, schedule by schedule, the tables of a space with that schedule alone (bounded on its own), bit
    for bit; the space has both pairs and shapes DeepSeek's ordering rules out."""
    fast = _per_op_example(tmp_path, name, keep)
    schedules = fast.domains["schedule"]
    assert {"fill-drain", "1f1b", "dualpipe", "dualpipe-deepseek"} <= set(schedules)
    assert P.group_bound_form("fill-drain") == P.group_bound_form("1f1b")
    assert P.group_bound_form("dualpipe") == P.group_bound_form("dualpipe-deepseek")
    assert len({P.group_bound_form(s) for s in ("zb-h1", "zb-h2", "interleaved", "1f1b", "dualpipe")}) == 5
    ax = fast.table_vars("time.compute").index("schedule")
    for i, schedule in enumerate(schedules):
        alone = _per_op_example(tmp_path, name, {**keep, "schedule": [schedule]})
        for n in ondemand.COMPUTE_BOUNDS:
            got, want = np.take(fast.tables[n].values, [i], axis=ax), alone.tables[n].values
            assert got.dtype == want.dtype and np.array_equal(got, want), (schedule, n)
        if schedule == "dualpipe-deepseek":  # shapes it cannot run, and shapes it can
            assert np.isinf(want).any() and np.isfinite(want).any()


@pytest.mark.parametrize("name", ["gpt3-175b-widest.toml", "deepseek-v3.toml"])
def test_exposed_dp_with_its_remembered_parts_equals_a_fresh_call(tmp_path, monkeypatch, name):
    """The exposed data-parallel table, whose recompute slices share the parts that read no recompute set
    (terms._dp_window_free, remembered for the last open grid), equals each slice computed with nothing remembered
    (the memo's cells 0), bit for bit; the remembered arrays are read-only and never the caller's own."""
    from tpopt.models import terms as T

    space = _per_op_example(tmp_path, name, {"pp": [1, 2, 8], "mb": [1, 2]})
    t = space.tables["time.exposed_dp"]
    assert len(space.domains["recompute"]) > 1 and T._DP_MEMO
    (_, parts), = T._DP_MEMO.values()
    assert all(not x.flags.writeable for x in parts if isinstance(x, np.ndarray) and x.flags.owndata)
    vars, fn = space._specs["time.exposed_dp"]
    monkeypatch.setattr(T._DP_MEMO, "cells", 0)
    T._DP_MEMO.clear()
    fresh = space.tabulate("time.exposed_dp", vars, fn)
    assert not T._DP_MEMO
    assert np.array_equal(t.values, fresh.values)


def test_a_classes_layer_set_bound_is_its_largest_stage_bound():
    """terms._peak_layer_set_bound (one side, the class's stages as one slice) equals the largest of the stage's own
    closed-form in-flight bound times its layers (pipeline.peak_inflight_stage_bounds, the stage split), taken stage
    by stage over the class's stages (terms.class_stages), for every schedule, stage class and side."""
    from tpopt.models import terms as T

    sc = load_scenario(ROOT / "examples" / "deepseek-v3.toml")
    first, last = sc.stage_layers
    layers = sc.model.layers
    seen = 0
    for schedule in ("fill-drain", "1f1b", "interleaved", "zb-h1", "zb-h2", "dualpipe", "dualpipe-deepseek"):
        base, v = T.schedule_parts(schedule)
        for p in (1, 2, 3, 4, 8, 16):
            split = T._split_cached(layers, p, first, last) if p > 1 else [layers]
            for m in (1, 2, 5, 8, 32, 64):
                chunks = T.chunk_layers(split, v) if base == "interleaved" and p > 1 else None
                if p > 1 and (not split or (base == "interleaved" and chunks is None) or P.shape_error(base, p, m, v)):
                    continue
                per = P.peak_inflight_stage_bounds(base, p, m, v=v, chunk_layers=chunks) if p > 1 else \
                    ([1.0], [1.0])
                for side in (0, 1):
                    stage_bounds = [k * n for k, n in zip(per[side], split, strict=False)] if p > 1 else [float(layers)]
                    for stage in (T.PEAK, *T.STAGE_CLASSES):
                        want = max(stage_bounds[g] for g in T.class_stages(stage, len(stage_bounds)))
                        got = T._peak_layer_set_bound(side, schedule, layers, p, m, first, last, stage)
                        assert got == want, (schedule, p, m, side, stage)
                        assert T._peak_layer_set_bounds(schedule, layers, p, m, first, last, stage)[side] == want
                        seen += 1
    assert seen > 500


def test_reduce_axes_of_views_equal_numpy():
    """space.reduce_axes on views it is not given contiguous (a layout group's slice of a whole table at one or two
    of its axes, a transposed table, a strided one): numpy's own minimum and maximum, and the table left unchanged."""
    from tpopt.optimizer.space import reduce_axes

    whole = np.random.default_rng(9).random((3, 4, 5, 6, 7))
    whole[whole < 0.05] = np.inf
    keep = whole.copy()
    views = [whole[:, 1:2], whole[:, :, 2:3, :, :], whole[1:2, :, :, 3:4], whole.transpose(2, 0, 4, 1, 3),
             whole[:, ::2, :, ::3]]
    for v in views:
        assert not v.flags.c_contiguous or v.shape[1] == 1
        for drop in ((1,), (2, 3), (0, 4), (4,), (0, 1, 2, 3, 4), (1, 3)):
            for fn in (np.min, np.max):
                got = reduce_axes(v, drop, fn)
                assert got.shape == fn(v, axis=drop).shape and np.array_equal(got, fn(v, axis=drop))
    assert np.array_equal(whole, keep)
