"""The vectorised fast paths give the numbers of the scalar paths they replace, bit for bit: the RL decision grid
as columns and its checks (optimizer/rl.py: DecisionGrid, vector_checks) against RLProblem.grid / evaluate, and the
pipeline bounds per distinct duration set (models/pipeline.py: completion_bounds_rows(columns=...),
models/terms.py: _duration_sets) against the bounds of every row's own durations."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tpopt.catalogs.rl import load_rl_scenario
from tpopt.catalogs.scenario import load_scenario
from tpopt.models import families as F
from tpopt.models import pipeline as P
from tpopt.models import terms as T
from tpopt.optimizer import rl as O
from tpopt.optimizer.space import Space

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "rl-grpo-qwen3-8b.toml"


@pytest.fixture(scope="module")
def problem():
    return O.RLProblem(load_rl_scenario(EXAMPLE))


def test_grid_columns_list_the_grid_in_order(problem):
    for pb in (problem, problem.with_card_limit(24), problem.with_card_limit(8 * problem.card_limit)):
        listed = pb.grid()
        cols = pb.decisions()
        assert cols.size == len(listed) == pb.grid_size()
        assert [cols.decision(j) for j in range(cols.size)] == listed
        ask = {"cards": set(range(1, 41)), "placement": ["separate"], "rollout_tp": [2, 8], "staleness": [1]}
        assert [listed[j] for j in cols.select(ask)] == pb.grid(ask)


DROPS = [(), (F.RL_KV_CAPACITY,), (F.CHECKPOINT,), (F.RL_LEARNER_MEMORY, F.RL_HANDOFF_MEMORY), (F.DEADLINE, F.BUDGET)]


@pytest.mark.parametrize("drop", DROPS)
@pytest.mark.parametrize("objective", ["cost", "time", "cards"])
def test_vector_checks_match_the_scalar_evaluation(problem, drop, objective):
    """Every decision with a learner of the given figures: the same feasibility and the same key bits."""
    enforced = tuple(f for f in O.FAMILIES if f not in drop)
    cols = problem.decisions()
    idx = np.arange(cols.size)
    learner = O.Learner(None, 96.0, 101.5, states=20 * 2**30, memory=50 * 2**30, swap_s=3.25)
    ok, k1, k2 = O.vector_checks(problem, cols, idx, learner.full_s, learner.swap_s, learner.memory, enforced,
                                 objective)
    for j in range(0, cols.size, 3):
        ev = problem.evaluate(cols.decision(j), learner, enforced)
        assert bool(ok[j]) == ev.feasible(enforced), cols.decision(j)
        assert (float(k1[j]), float(k2[j])) == tuple(float(x) for x in ev.key(objective))
    assert ok.any()
    if not drop:  # every family enforced: some decisions fail, so both outcomes are compared
        assert not ok.all()


def test_bounds_per_duration_set_equal_the_rows_bounds():
    rng = np.random.default_rng(7)
    sets, rows, p = 5, 200, 4
    col = rng.integers(0, sets, rows)
    f, x, w = (rng.uniform(0.1, 2.0, (p, sets)) for _ in range(3))
    m = rng.integers(1, 40, rows)
    t = rng.uniform(0.0, 0.3, rows)
    for schedule, v in (("fill-drain", 1), ("1f1b", 1), ("zb-h1", 1), ("zb-h2", 1), ("interleaved", 2),
                        ("dualpipe", 1)):
        ms = 2 * m if schedule == "dualpipe" else m
        lo, hi = P.completion_bounds_rows(schedule, p, ms, f[:, col], x[:, col], w[:, col], t, 0.0, v=v,
                                          chunk_layers=[1] * (v * p) if v > 1 else None)
        lo_c, hi_c = P.completion_bounds_rows(schedule, p, ms, f, x, w, t, 0.0, v=v,
                                              chunk_layers=[1] * (v * p) if v > 1 else None, columns=col)
        assert np.array_equal(lo, lo_c) and np.array_equal(hi, hi_c), schedule


def test_duration_sets_group_equal_rows_only():
    a = np.tile([1.0, 2.0, 1.0, 2.0, 1.0, 3.0, 1.0, 2.0], 4)  # 32 rows, 4 sets: worth grouping
    b = np.tile([5.0, 5.0, 5.0, 5.0, 6.0, 5.0, 5.0, 5.0], 4)
    sets = T._duration_sets([a, b])
    assert sets is not None
    inverse, first = sets
    for arr in (a, b):
        assert np.array_equal(arr[first][inverse], arr)
    assert len(first) == 4  # (1, 5), (2, 5), (1, 6), (3, 5)
    assert T._duration_sets([np.arange(32.0)]) is None  # all distinct: no saving
    assert T._duration_sets([np.array([0.0, -0.0] * 16)])[1].size == 2  # same value, other bits: kept apart


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
    monkeypatch.setattr(T, "GRID_STAGE_COUNTS", 0)  # every stage count on flattened rows, as before
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
