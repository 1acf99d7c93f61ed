"""The vectorised fast paths give the numbers of the scalar paths they replace, bit for bit: the RL decision grid
as columns and its checks (optimizer/rl/: DecisionGrid, vector_checks) against RLProblem.grid / evaluate, and the
pipeline bounds per distinct duration set (models/pipeline/bounds.py: completion_bounds_rows(columns=...),
models/terms/stage_compute.py: _duration_sets) against the bounds of every row's own durations."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tpopt.catalogs.rl import load_rl_scenario
from tpopt.models import families as F
from tpopt.models import pipeline as P
from tpopt.models import terms as T
from tpopt.optimizer import rl as O

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


def test_layout_views_of_the_tables_give_the_sliced_layout_terms():
    """optimizer/enumerate.py: LayoutEvaluator._on_grid on a table of the space indexes a view of it laid out once
    (layout axes first, then the extras), instead of slicing and transposing the table per layout: the same values,
    shape and dtype as the slicing path (taken with the domains passed explicitly), on every table it reads."""
    from tpopt.catalogs.scenario import load_scenario
    from tpopt.optimizer.enumerate import HUB, LayoutEvaluator
    from tpopt.optimizer.space import Space

    sc = load_scenario(ROOT / "examples" / "gpt3-175b-widest.toml")
    sp = Space.from_scenario(sc, {"pp": [1, 2, 4], "dp": [32, 64, 128], "mb": [1, 2]})
    ev = LayoutEvaluator(sp)
    sizes = [len(sp.domains[v]) for v in HUB]
    layouts = [tuple(int(i) for i in np.unravel_index(k, sizes)) for k in range(0, int(np.prod(sizes)), 7)]
    names = [n for n in sp._specs if not n.endswith((".lo", ".hi"))]
    assert len(layouts) > 3 and "time.exposed_dp" in names
    for name in names:
        table = sp.bound_table(name, "lo").values if name in ("time.compute",) else sp.tables[name].values
        for h in layouts:
            fast, slow = ev._on_grid(name, table, h), ev._on_grid(name, table, h, sp.domains)
            assert fast.shape == slow.shape and fast.dtype == slow.dtype
            np.testing.assert_array_equal(fast, slow)
    table = sp.tables["time.exposed_dp"].values
    before = ev._on_grid("time.exposed_dp", table, layouts[1]).copy()
    table[...] += 1.0  # written into the table later: the view shows it
    np.testing.assert_array_equal(ev._on_grid("time.exposed_dp", table, layouts[1]), before + 1.0)
