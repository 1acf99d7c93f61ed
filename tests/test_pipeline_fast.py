"""The solver's fast pipeline paths against the event model (issue 16, item 1).

The event model (`simulate`, and its vectorised recurrence) stays the reference. Checked here on every
shape up to the sizes below, with whole-number durations (so every sum is exact in floating point and
"equal" means bit for bit) and with random real durations (equal within rounding):

* the closed forms of fill-drain and 1F1B equal the event model;
* the closed-form bounds of the other schedules hold (lo <= completion <= hi) and are tight where the
  docstring says so;
* the closed-form in-flight peaks equal the walk over the slot order (the chapter's DualPipe: bounds).
"""

import math

import numpy as np
import pytest

from tpopt.errors import InputError
from tpopt.models import pipeline as pl
from tpopt.models.pipeline import completion as pl_completion

P_MAX, M_MAX = 8, 32
RNG = np.random.default_rng(16)


def recurrence(schedule, p, m, f, x, w, t, u, v=2):
    """The event model's recurrence, whatever completion_time dispatches to."""
    p, m, v = pl._check_shape(schedule, p, m, v)
    flat = [np.broadcast_to(np.asarray(a, dtype=float), np.broadcast(f, x, w, t, u).shape).reshape(-1)
            for a in (f, x, w, t, u)]
    return pl._completion_recurrence(schedule, p, m, v, pl._chunk_fractions(schedule, p, v, None), flat)


def whole_durations(k=24):
    d = RNG.integers(0, 40, size=(5, k)).astype(float)
    d[:, :5] = np.eye(5)  # each duration alone
    d[3, 5:9] = RNG.integers(50, 400, size=4)  # transfers longer than the work
    return d


def shapes(schedule):
    for p in range(2, P_MAX + 1):
        for m in range(1, M_MAX + 1):
            if pl.shape_error(schedule, p, m) is None:
                yield p, m


@pytest.mark.parametrize("schedule", sorted(pl.CLOSED_FORM))
def test_closed_forms_equal_the_event_model_bit_for_bit(schedule):
    n = 0
    for p, m in shapes(schedule):
        d = whole_durations()
        exact = recurrence(schedule, p, m, *d)
        assert np.array_equal(pl.completion_closed_form(schedule, p, m, *d), exact), (schedule, p, m)
        assert np.array_equal(pl.completion_time(schedule, p, m, *d), exact)
        n += 1
    assert n == (P_MAX - 1) * M_MAX
    # and one full simulation per schedule, with the chapter's numbers (REFERENCE.md 10.3: 347 ms)
    r = pl.simulate("1f1b", 4, 8, 10.0, 20.0, 0.0, 1.0, 1.0)
    assert r.completion == 347.0 == float(pl.completion_closed_form("1f1b", 4, 8, 10.0, 20.0, 0.0, 1.0, 1.0))


def test_closed_forms_with_real_durations_and_shape_arrays():
    p = np.array([2, 4, 7])[:, None]
    m = np.array([1, 5, 8, 33])[None, :]
    d = RNG.uniform(0, 3, size=5)
    for schedule in pl.CLOSED_FORM:
        got = pl.completion_closed_form(schedule, p, m, *d)
        assert got.shape == (3, 4)
        for i in range(3):
            for j in range(4):
                ref = pl.simulate(schedule, int(p[i, 0]), int(m[0, j]), *d).completion
                assert math.isclose(got[i, j], ref, rel_tol=1e-12)
    # transfers on the critical path: 2 (p - 1) + the steady-state round trips
    assert pl.transfers_1f1b(4, 8) == 16 and pl.transfers_1f1b(2, 1) == 2


@pytest.mark.parametrize("schedule", [s for s in pl.SCHEDULES if s not in pl.CLOSED_FORM])
def test_bounds_hold_on_every_shape(schedule):
    for v in ((1, 2, 3, 4) if schedule == "interleaved" else (2,)):
        for p, m in shapes(schedule):
            if schedule == "interleaved" and v != 2 and (p > 5 or m > 20):
                continue
            d = whole_durations(16)
            d = np.concatenate([d, RNG.uniform(0, 3, size=(5, 8))], axis=1)
            exact = pl.completion_time(schedule, p, m, *d, v=v)
            lo, hi = pl.completion_bounds(schedule, p, m, *d, v=v)
            assert np.all(lo <= exact) and np.all(exact <= hi), (schedule, p, m, v)


@pytest.mark.parametrize("schedule", ["zb-h1", "zb-h2", "interleaved"])
def test_bounds_are_tight_where_documented(schedule):
    # no transfers; ZB: m >= 2p and dW <= min(F, dX) (the zero-bubble paper's regime); interleaved:
    # m a multiple of p (Megatron-LM's bubble (p - 1)(F + B) / v)
    for p in range(2, 8):
        for m in range(1, 30):
            if (schedule != "interleaved" and m < 2 * p) or (schedule == "interleaved" and m % p):
                continue
            f = RNG.integers(1, 30, 20).astype(float)
            x = RNG.integers(1, 30, 20).astype(float)
            w = np.minimum(RNG.integers(0, 30, 20), np.minimum(f, x)).astype(float)
            if schedule == "interleaved":
                f, x, w = 2 * f, 2 * x + 2 * w, 0 * w
            exact = pl.completion_time(schedule, p, m, f, x, w, 0.0, 0.0)
            lo, _ = pl.completion_bounds(schedule, p, m, f, x, w, 0.0, 0.0)
            assert np.allclose(lo, exact, rtol=1e-11), (schedule, p, m)


def test_bounds_broadcast_over_shapes():
    p = np.array([1, 4, 8])[:, None]
    m = np.array([1, 16, 64])[None, :]
    lo, hi = pl.completion_bounds("zb-h1", p, m, 1.0, 1.0, 1.0, 0.0, 0.5)
    assert lo.shape == hi.shape == (3, 3)
    assert np.allclose(lo[0], [3.5, 48.5, 192.5])  # one stage: m (F + dX + dW) + update, exactly
    assert lo[1, 1] == pytest.approx(16 * 3 + 3 * 1 + 0.5)  # ZB-H1 bubble (p - 1)(F + dX - dW)


def test_peak_closed_forms_equal_the_walk():
    for schedule in pl.SCHEDULES:
        for v in ((1, 2, 3, 4) if schedule == "interleaved" else (2,)):
            for p in range(1, 11):
                for m in range(1, 49):
                    if pl.shape_error(schedule, p, m) or (v != 2 and (p > 6 or m > 30)):
                        continue
                    walk = max(pl.peak_inflight(schedule, p, m, v=v))
                    lo, hi = pl.peak_inflight_bounds(schedule, p, m, v=v)
                    assert lo <= walk + 1e-12 and walk <= hi + 1e-12, (schedule, p, m, v)
                    if schedule != "dualpipe":
                        assert math.isclose(lo, walk) and math.isclose(hi, walk), (schedule, p, m, v, walk)
                    assert math.isclose(float(pl.peak_inflight_max(schedule, p, m, v=v)), walk)


def test_shape_arrays():
    p = np.array([1, 2, 3, 4, 4, 4])
    m = np.array([1, 4, 8, 6, 8, 9])
    for schedule in pl.SCHEDULES:
        ok = pl.shape_ok(schedule, p, m)
        assert ok.tolist() == [pi == 1 or pl.shape_error(schedule, int(pi), int(mi)) is None
                               for pi, mi in zip(p, m, strict=False)]
        d = RNG.uniform(0.1, 2, size=(4, len(p)))
        got = pl.completion_for_shapes(schedule, np.maximum(p, 2), m, d[0], d[1], d[2], d[3])
        for i in range(len(p)):
            pi = max(int(p[i]), 2)
            if pl.shape_error(schedule, pi, int(m[i])):
                assert got[i] == np.inf
            else:
                ref = pl.simulate(schedule, pi, int(m[i]), d[0, i], d[1, i], d[2, i], d[3, i]).completion
                assert math.isclose(got[i], ref, rel_tol=1e-12)


def test_memo_returns_the_same_numbers_and_stays_bounded(monkeypatch):
    memo = pl._CompletionMemo(limit=50)
    monkeypatch.setattr(pl_completion, "_MEMO", memo)  # the module whose completion_time reads it
    d = RNG.uniform(0.1, 2, size=(5, 20))
    first = pl.completion_time("zb-h1", 4, 8, *d)
    assert np.array_equal(pl.completion_time("zb-h1", 4, 8, *d), first)  # served from the memo
    assert np.array_equal(pl.completion_time("zb-h1", 4, 8, *d[:, ::-1])[::-1], first)
    for m in range(9, 14):
        pl.completion_time("zb-h2", 4, m, *d)
    assert memo.size <= 50 + 20
    assert np.array_equal(pl.completion_time("zb-h1", 4, 8, *d), first)


def test_per_group_bounds_with_shared_durations():
    # per-group durations next to ones shared by every group (no group axis) and scalars, over a plan axis
    for schedule in pl.SCHEDULES:
        for p in (2, 3, 4):
            for m in (2 * p, 2 * p + 3):
                if pl.shape_error(schedule, p, m):
                    continue
                f = RNG.integers(1, 30, size=(p, 7)).astype(float)
                x = RNG.integers(1, 30, size=7).astype(float)  # the same on every group
                t = RNG.integers(0, 10, size=7).astype(float)
                u = RNG.integers(0, 5, size=(p, 1)).astype(float)  # per group, the same for every plan
                got = pl.completion_time(schedule, p, m, f, x, 3.0, t, u, per_group=True)
                lo, hi = pl.completion_bounds(schedule, p, m, f, x, 3.0, t, u, per_group=True)
                assert lo.shape == hi.shape == (7,)
                assert np.all(lo <= got) and np.all(got <= hi), (schedule, p, m)


def test_bounds_rows_equal_the_per_shape_bounds():
    # one stage count, a micro-batch count per row: each row's bounds are those of its own shape, and a
    # shape the schedule cannot run (DeepSeek's DualPipe: odd m or m < 2p) is inf
    for schedule in pl.SCHEDULES:
        for p in (2, 4):
            m = np.array([1, 2, 3, 2 * p, 2 * p + 1, 4 * p])
            f, x, w = (RNG.integers(1, 30, size=(p, len(m))).astype(float) for _ in range(3))
            t = RNG.integers(0, 10, size=len(m)).astype(float)
            lo, hi = pl.completion_bounds_rows(schedule, p, m, f, x, w, t, 0.0)
            for i, mv in enumerate(m.tolist()):
                if pl.shape_error(schedule, p, mv):
                    assert lo[i] == hi[i] == np.inf
                    continue
                want = pl.completion_bounds(schedule, p, mv, f[:, i], x[:, i], w[:, i], t[i], 0.0, per_group=True)
                assert (lo[i], hi[i]) == (float(want[0]), float(want[1])), (schedule, p, mv)
    with pytest.raises(InputError):
        pl.completion_bounds_rows("1f1b", 2, np.array([0, 2]), np.ones((2, 2)), 1.0, 1.0, 0.0)


def test_closed_form_rejects_other_schedules():
    with pytest.raises(InputError):
        pl.completion_closed_form("zb-h1", 4, 8, 1.0, 1.0, 1.0, 0.0, 0.0)


def test_per_group_durations_exact_and_bounded():
    # uneven stages (first stage with the embedding, last with the head): one duration per layer group
    for schedule in pl.SCHEDULES:
        for p in range(2, 7):
            for m in (1, 3, 2 * p, 2 * p + 3):
                if pl.shape_error(schedule, p, m):
                    continue
                f, x, w, u = (RNG.integers(0, 30, size=(p, 6)).astype(float) for _ in range(4))
                t = RNG.integers(0, 10, size=6).astype(float)
                got = pl.completion_time(schedule, p, m, f, x, w, t, u, per_group=True)
                ref = [pl.simulate(schedule, p, m, f[:, i], x[:, i], w[:, i], t[i], u[:, i]).completion
                       for i in range(6)]
                assert np.array_equal(got, ref), (schedule, p, m)  # bit for bit: the same recurrence
                lo, hi = pl.completion_bounds(schedule, p, m, f, x, w, t, u, per_group=True)
                assert np.all(lo <= got) and np.all(got <= hi), (schedule, p, m)
    # alike stages take the balanced path
    same = pl.completion_time("1f1b", 4, 8, np.full(4, 10.0), np.full(4, 20.0), 0.0, 1.0, np.full(4, 1.0),
                              per_group=True)
    assert float(same) == 347.0
    with pytest.raises(InputError):  # a first axis that is not the groups must broadcast with the rest
        pl.completion_time("1f1b", 4, 8, np.ones(3), np.ones(5), 0.0, 0.0, 0.0, per_group=True)
