"""The pipeline completion remembered per column (models/terms/stage_compute._unique_columns, issue 39).

A small call whose duration sets all have uneven stages remembers each set's completion time on its own, so a
plan evaluated after its layout was simulated reads its column. The event model's recurrence is elementwise over
duration sets, so a column read back must equal the completion time of that set simulated alone, bit for bit; a
set of balanced stages takes the closed form when its batch is all balanced, so it must never be read back from a
batch that simulated it.
"""

import numpy as np

from tpopt.models import pipeline as pl
from tpopt.models.terms import stage_compute as sc

P, M = 4, 9
RNG = np.random.default_rng(39)


def _fn(f, x, w, t):
    return pl.completion_time("1f1b", P, M, f, x, w, t, 0.0, per_group=True)


def _alone(f, x, w, t):
    """The set's completion time with nothing remembered: the reference."""
    sc._COMPLETION_CACHE.clear()
    sc._COLUMN_CACHE.clear()
    return float(_fn(f[:, None], x[:, None], w[:, None], np.asarray([t]))[0])


def test_a_column_read_back_equals_its_set_simulated_alone():
    f, x, w = (RNG.random((P, 5)) for _ in range(3))
    t = RNG.random(5)
    ref = [_alone(f[:, j], x[:, j], w[:, j], t[j]) for j in range(5)]
    sc._COMPLETION_CACHE.clear()
    sc._COLUMN_CACHE.clear()
    batch = sc._unique_columns(_fn, f, x, w, t, key=("1f1b", P, M))
    assert batch.tolist() == ref
    assert len(sc._COLUMN_CACHE) == 5  # every set remembered on its own
    for j in (3, 0):  # one plan's call, answered from the batch's columns: the same bits
        got = sc._unique_columns(_fn, f[:, [j]], x[:, [j]], w[:, [j]], t[[j]], key=("1f1b", P, M))
        assert got.tolist() == [ref[j]]
    # a column the cache does not hold (another transfer time) is simulated, and equals its set alone
    other = sc._unique_columns(_fn, f[:, [1]], x[:, [1]], w[:, [1]], t[[1]] + 0.5, key=("1f1b", P, M))
    assert other.tolist() == [_alone(f[:, 1], x[:, 1], w[:, 1], t[1] + 0.5)]


def test_a_balanced_set_is_never_read_back_from_a_batch():
    f, x, w = (RNG.random((P, 2)) for _ in range(3))
    t = RNG.random(2)
    f[:, 1], x[:, 1], w[:, 1] = f[0, 1], x[0, 1], w[0, 1]  # the second set balanced: the closed form alone
    balanced = _alone(f[:, 1], x[:, 1], w[:, 1], t[1])
    sc._COMPLETION_CACHE.clear()
    sc._COLUMN_CACHE.clear()
    sc._unique_columns(_fn, f, x, w, t, key=("1f1b", P, M))  # a mixed batch: simulated, remembered as one call
    assert not sc._COLUMN_CACHE
    got = sc._unique_columns(_fn, f[:, [1]], x[:, [1]], w[:, [1]], t[[1]], key=("1f1b", P, M))
    assert got.tolist() == [balanced]
