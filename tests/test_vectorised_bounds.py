"""The compute term's fast table paths give the numbers of the paths they replace, bit for bit: the pipeline bounds
on the plan grid (models/terms/stage_compute.py: _bounds_on_grid, the inputs at their own shapes, broadcast)
against the row pass, stage sums group after group (models/pipeline/bounds.py: _stage_sum) whatever the
columns, the distinct columns of the event model's calls (terms._distinct_columns) against np.unique, the
compute table's value alone (terms.compute_total) against compute_from, and the exact table (inputs built
once per dW-split key, terms.inputs_schedule_key) against the per-term function."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tpopt.catalogs.scenario import load_scenario
from tpopt.models import pipeline as P
from tpopt.models import terms as T
from tpopt.models.terms import stage_compute
from tpopt.optimizer.space import Space

ROOT = Path(__file__).resolve().parents[1]


def test_stage_sums_do_not_depend_on_the_columns():
    """A lone duration set of 8 or more groups sums to the same bits as the same set repeated over rows (numpy's
    own sum would take the lone column pairwise): rows, sets and the plan grid give one bound."""
    rng = np.random.default_rng(11)
    p, rows = 12, 6
    for _ in range(20):  # durations of many magnitudes: a pairwise sum of 12 differs from a sequential one often
        f, x, w = (rng.uniform(0.1, 2.0, (p, 1)) * 10.0 ** rng.integers(-3, 3, (p, 1)) for _ in range(3))
        m = rng.integers(1, 40, rows)
        t = rng.uniform(0.0, 0.3, rows)
        for schedule in ("1f1b", "zb-h2", "dualpipe"):
            ms = 2 * m if schedule == "dualpipe" else m
            lo, hi = P.completion_bounds_rows(schedule, p, ms, *(np.repeat(a, rows, axis=1) for a in (f, x, w)), t,
                                              0.0)
            lo_c, hi_c = P.completion_bounds_rows(schedule, p, ms, f, x, w, t, 0.0, columns=np.zeros(rows, np.intp))
            assert np.array_equal(lo, lo_c) and np.array_equal(hi, hi_c), schedule
        assert P._stage_sum(f)[0] == sum((f[k, 0] for k in range(1, p)), f[0, 0])  # group after group


def _per_op(tmp_path, name):
    """An example under the per-operation step-time model (its ``efficiency`` line dropped)."""
    text = (ROOT / "examples" / name).read_text(encoding="utf-8")
    path = tmp_path / name
    path.write_text("\n".join(line for line in text.splitlines() if not line.startswith("efficiency")) + "\n",
                    encoding="utf-8")
    return load_scenario(path)


CUTS = {"gpt3-175b-widest.toml": {"tp": [1, 2, 8], "pp": [1, 3, 8, 12], "dp": [16, 48, 96], "mb": [1, 2],
                                  "recompute": ["none", "full"], "nics": [1, 4]},
        "deepseek-v3.toml": {"pp": [1, 2, 8, 16], "mb": [1, 2]}}


@pytest.mark.parametrize("name", sorted(CUTS))
def test_compute_bounds_on_the_plan_grid_equal_the_row_pass(tmp_path, name, monkeypatch):
    """The compute term's bound tables on the plan grid (terms._bounds_on_grid: inputs at their own shapes,
    broadcast) equal the row pass over every plan's own inputs (the grid path off), bit for bit; so do the exact
    table and the per-term function of every (recompute, schedule) slice (the inputs are built once per dW-split
    key, terms.inputs_schedule_key)."""
    sc = _per_op(tmp_path, name)
    full = Space.from_scenario(sc)
    dom = {k: [x for x in v if x in CUTS[name].get(k, v)] for k, v in full.domains.items()}
    dom["dp"] = dom["dp"][1:4]
    fast = Space(sc=sc, domains=dom)
    lo, hi = fast.tables["time.compute.lo"].values, fast.tables["time.compute.hi"].values
    assert np.isfinite(lo).any() and (lo <= hi).all()
    monkeypatch.setattr(stage_compute, "GRID_STAGE_COUNTS", 0)  # every stage count on flattened rows, as before
    slow = Space(sc=sc, domains=dom)
    assert np.array_equal(lo, slow.tables["time.compute.lo"].values)
    assert np.array_equal(hi, slow.tables["time.compute.hi"].values)
    monkeypatch.undo()
    exact = Space(sc=sc, domains=dom).tables["time.compute"]
    grids = dict(zip(("tp", "cp", "pp", "dp", "mb", "nics"),
                     np.ix_(*(np.asarray(dom[v], dtype=float) for v in ("tp", "cp", "pp", "dp", "mb", "nics"))),
                     strict=True))
    ep, etp, cap = dom["ep"][0], dom["etp"][0], dom["cap"][0]
    for r, rec in enumerate(dom["recompute"]):
        for s, sched in enumerate(dom["schedule"]):
            one = T.compute(sc, acc=dom["acc"][0], recompute=rec, sp=dom["sp"][0], schedule=sched, ep=ep, etp=etp,
                            cap=cap, **grids)[0]
            at = {"acc": 0, "recompute": r, "sp": 0, "schedule": s, "ep": 0, "etp": 0, "cap": 0}
            got = exact.values[tuple(at.get(v, slice(None)) for v in exact.vars)]
            assert np.array_equal(got, np.broadcast_to(one, got.shape)), (rec, sched)


def test_distinct_columns_equal_numpy_unique_over_columns():
    rng = np.random.default_rng(3)
    for trial in range(200):
        k, n = rng.integers(1, 12), rng.integers(1, 120)
        base = rng.uniform(0, 3, (k, rng.integers(1, 20)))
        a = base[:, rng.integers(0, base.shape[1], n)]
        if trial % 3 == 0:  # ties in the first rows: the later rows order the columns
            a[: k // 2 + 1] = np.round(a[: k // 2 + 1])
        uniq, inverse = np.unique(a, axis=1, return_inverse=True)
        got, back = T._distinct_columns(a)
        assert got.tobytes() == uniq.tobytes() and np.array_equal(back, np.reshape(inverse, -1)), trial


@pytest.mark.parametrize("schedule", ["1f1b", "interleaved", "zb-h2", "dualpipe"])
def test_compute_total_is_compute_from_first_value(tmp_path, schedule):
    sc = _per_op(tmp_path, "gpt3-175b-widest.toml")
    g = dict(zip(("tp", "pp", "dp", "mb", "nics"), np.ix_(*(np.asarray(x, dtype=float) for x in
                                                            ([1, 2, 8], [1, 4, 8], [16, 32], [1, 2], [1, 8]))),
                 strict=True))
    inputs = T.compute_inputs(sc, acc="a100-80gb-sxm", recompute="full", schedule=schedule, **g)
    total = T.compute_total(sc, schedule, g["pp"], inputs)
    assert np.isfinite(total).any()
    assert np.array_equal(total, T.compute_from(sc, schedule, g["pp"], inputs)[0])


@pytest.mark.parametrize("peak", ["exact", "lo", "hi"])
def test_remembered_layer_sets_equal_the_direct_walk(tmp_path, peak):
    """terms._layer_sets remembers an open grid's answer (every recompute slice of a table asks again): the
    remembered answer equals the direct per-shape walk, and a caller writing into it changes nothing kept."""
    sc = load_scenario(ROOT / "examples" / "deepseek-v3.toml")
    first, last = sc.stage_layers
    pp = np.asarray([1.0, 2.0, 4.0, 8.0, 16.0]).reshape(5, 1)
    ga = (sc.task.global_batch / np.asarray([8.0, 16.0, 32.0])).reshape(1, 3)
    fn = T._peak_layer_sets if peak == "exact" else (lambda *a: T._peak_layer_set_bounds(*a)[0 if peak == "lo" else 1])
    for sched in ("1f1b", "interleaved", "dualpipe"):
        direct = np.array([[fn(sched, sc.model.layers, int(p), int(np.ceil(m - 1e-9)), first, last, T.PEAK)
                            for m in ga.reshape(-1)] for p in pp.reshape(-1)])
        got = T._layer_sets(sc, sched, pp, ga, peak)
        np.testing.assert_array_equal(got, direct)
        got[...] = -1.0
        np.testing.assert_array_equal(T._layer_sets(sc, sched, pp, ga, peak), direct)


def test_block_kinds_are_the_model_constant():
    from tpopt.models import arch as A

    sc = load_scenario(ROOT / "examples" / "deepseek-v3.toml")
    a = sc.model
    assert A._kinds(a) == tuple(A.is_moe_layer(a, i) for i in range(a.layers))
    assert any(A._kinds(a)) and not all(A._kinds(a))  # DeepSeek-V3: dense blocks first, then MoE blocks


def test_remembered_saved_tensors_equal_a_fresh_inventory():
    """memory.saved_tensors remembers small token grids: the same tensors as computed afresh, shared read-only."""
    from tpopt.models import memory as M

    sc = load_scenario(ROOT / "examples" / "deepseek-v3.toml")
    b = np.asarray([1.0, 2.0, 4.0]).reshape(3, 1)
    for flash in (True, False):
        got = M.saved_tensors(sc.model, 4096.0, b, 2.0, flash, True)
        fresh = M._saved_tensors(sc.model, 4096.0, b, 2.0, flash, True)
        assert [t.name for t in got] == [t.name for t in fresh]
        for t, u in zip(got, fresh, strict=True):
            np.testing.assert_array_equal(t.bytes, u.bytes)
        with pytest.raises(ValueError):
            got[0].bytes[...] = 0.0
        assert M.saved_tensors(sc.model, 4096.0, b, 2.0, flash, True) is not got  # a new list each time
