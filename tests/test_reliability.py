"""Golden and property tests for tpopt.models.reliability (chapter 10.4.3-10.4.5, design case 10.6).

Expected values are the figures printed in REFERENCE.md 10.4 / 10.6 (checked at their printed
rounding: within half a unit of the last printed digit) or derivations written out here.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpopt.errors import InputError
from tpopt.models import reliability as rel
from tpopt.models.units import DAY, GB, HOUR


def printed(x, value, decimals):
    """|x - value| <= half a unit in the last printed place (the printed rounding)."""
    return abs(float(x) - value) <= 0.5 * 10.0**-decimals * (1 + 1e-9)


N_QWEN3_8B = 8_190_735_360
SIZE = 114_670_295_040  # REFERENCE.md 10.4: 14 B/param x N
C_SYNC = SIZE / (7 * GB)  # 16.381 s
# REFERENCE.md 10.4: per-card MTBF from a 1024-card job interrupted once per 7.9 h (337.07 d, printed 337 d).
CARD_MTBF = 1024 * 7.9 * HOUR
R = 120.0


# --- checkpoint size, write time, backlog (REFERENCE.md 10.4) ----------------------------------


def test_checkpoint_bytes_qwen3_8b():
    # REFERENCE.md 10.4: 2 + 4 + 8 = 14 B/param -> 114,670,295,040 bytes (115 GB)
    assert rel.CHECKPOINT_BYTES_PER_PARAM == 14
    assert rel.checkpoint_bytes(N_QWEN3_8B) == SIZE
    assert printed(rel.checkpoint_bytes(N_QWEN3_8B) / GB, 115, 0)


def test_sync_pause_at_7_gb_s():
    # REFERENCE.md 10.4: c = 16.381 s at 7 GB/s
    assert printed(rel.write_time(SIZE, 7 * GB), 16.381, 3)
    assert rel.sync_pause(SIZE, 7 * GB) == rel.write_time(SIZE, 7 * GB)
    assert rel.async_pause(0.5) == 0.5


def test_write_demand_and_backlog():
    # REFERENCE.md 10.4: 112 GB every 10 s demands 11.2 GB/s (backlog grows at 7 GB/s), every 20 s 5.6 GB/s
    size = 112 * GB
    assert printed(rel.demanded_write_rate(size, 10.0) / GB, 11.2, 1)
    assert printed(rel.demanded_write_rate(size, 20.0) / GB, 5.6, 1)
    t = rel.write_time(size, 7 * GB)  # 16 s
    assert t == pytest.approx(16.0)
    assert not rel.backlog_ok(10.0, t)
    assert rel.backlog_ok(20.0, t)
    assert rel.backlog_ok(np.array([10.0, 16.0, 20.0]), t).tolist() == [False, True, True]


# --- failure rates (REFERENCE.md 10.4) ---------------------------------------------------------


def test_card_mtbf_from_job_figure():
    # REFERENCE.md 10.4: 1024 cards, one interrupt per 7.9 h -> per-card MTBF 337 days
    assert printed(rel.card_mtbf_from_job(7.9 * HOUR, 1024) / DAY, 337, 0)
    lam = rel.job_failure_rate(1024, CARD_MTBF)
    assert lam == pytest.approx(1 / (7.9 * HOUR))
    assert np.allclose(rel.job_failure_rate(np.array([32, 48]), CARD_MTBF),
                       [32 / CARD_MTBF, 48 / CARD_MTBF])


def test_event_rates_add():
    lam = rel.total_event_rate(48, CARD_MTBF, spike_interval=7 * DAY, planned_interval=30 * DAY)
    assert lam == pytest.approx(48 / CARD_MTBF + 1 / (7 * DAY) + 1 / (30 * DAY))
    assert rel.event_rate(None) == 0.0
    assert rel.event_rate(math.inf) == 0.0


# --- first-order overhead and optimum (REFERENCE.md 10.4) ---------------------------------------


def test_optimal_interval_1024_cards():
    # REFERENCE.md 10.4: tau* = sqrt(2c/lambda) = 965.29 s
    lam = rel.job_failure_rate(1024, CARD_MTBF)
    assert printed(rel.optimal_interval_first_order(C_SYNC, lam), 965.29, 2)


def test_optimal_interval_poisson_1024_cards():
    # REFERENCE.md 10.4: Poisson-retry model minimising (exp(lambda (tau + c)) - 1)/tau -> 954.40 s
    lam = rel.job_failure_rate(1024, CARD_MTBF)
    assert printed(rel.optimal_interval_poisson(C_SYNC, lam), 954.40, 2)


def test_poisson_optimum_is_stationary_point():
    # derivation: d/dtau [(e^{lam(tau+c)} - 1)/tau] = 0  <=>  (1 - lam tau) e^{lam(tau+c)} = 1
    lam = rel.job_failure_rate(1024, CARD_MTBF)
    tau = rel.optimal_interval_poisson(C_SYNC, lam)
    assert (1 - lam * tau) * math.exp(lam * (tau + C_SYNC)) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize(
    "tau, save, redo, restart, total",
    [  # REFERENCE.md 10.4 interval table, 1024 cards, c = 16.381 s, r = 120 s
        (300.0, 5.5, 0.5, 0.4, 6.4),
        (900.0, 1.8, 1.6, 0.4, 3.8),
        (1800.0, 0.9, 3.2, 0.4, 4.5),
    ],
)
def test_interval_table_row(tau, save, redo, restart, total):
    lam = rel.job_failure_rate(1024, CARD_MTBF)
    (row,) = rel.interval_table([tau], C_SYNC, lam, R)
    assert row.interval == tau
    assert printed(row.save * 100, save, 1)
    assert printed(row.redo * 100, redo, 1)
    assert printed(row.restart * 100, restart, 1)
    assert printed(row.total * 100, total, 1)
    assert row.total == pytest.approx(rel.overhead_first_order(tau, C_SYNC, lam, R))


def test_interval_table_many_rows():
    lam = rel.job_failure_rate(1024, CARD_MTBF)
    rows = rel.interval_table([300.0, 900.0, 1800.0], C_SYNC, lam, R)
    assert [r.interval for r in rows] == [300.0, 900.0, 1800.0]
    assert rows[1].total == min(r.total for r in rows)


@pytest.mark.parametrize("cards, overhead", [(32, 1.02), (48, 1.08)])
def test_design_case_overhead_at_1800_s(cards, overhead):
    # REFERENCE.md 10.4 and the 10.6 design-case table: checkpoint/failure overhead 1.02 % (32), 1.08 % (48)
    lam = rel.job_failure_rate(cards, CARD_MTBF)
    assert printed(rel.overhead_first_order(1800.0, C_SYNC, lam, R) * 100, overhead, 2)


def test_overhead_broadcasts_over_cards_and_intervals():
    cards = np.array([[32], [48]])
    taus = np.array([600.0, 1800.0])
    lam = rel.job_failure_rate(cards, CARD_MTBF)
    out = rel.overhead_first_order(taus, C_SYNC, lam, R)
    assert out.shape == (2, 2)
    assert printed(out[0, 1] * 100, 1.02, 2) and printed(out[1, 1] * 100, 1.08, 2)
    tau_star = rel.optimal_interval_first_order(C_SYNC, lam)
    assert tau_star.shape == (2, 1)
    assert rel.optimal_interval_poisson(C_SYNC, lam).shape == (2, 1)


def test_loss_spikes_48_cards():
    # REFERENCE.md 10.4: 48 cards + one loss-spike rollback per 7 days:
    # tau = 600 s 2.80 % -> 2.87 %; tau* 4,458 -> 3,150 s; at 1800 s 1.08 % -> 1.25 %
    hw = rel.total_event_rate(48, CARD_MTBF)
    both = rel.total_event_rate(48, CARD_MTBF, spike_interval=7 * DAY)
    assert printed(rel.overhead_first_order(600.0, C_SYNC, hw, R) * 100, 2.80, 2)
    assert printed(rel.overhead_first_order(600.0, C_SYNC, both, R) * 100, 2.87, 2)
    assert printed(rel.optimal_interval_first_order(C_SYNC, hw), 4458, 0)
    assert printed(rel.optimal_interval_first_order(C_SYNC, both), 3150, 0)
    at_1800_hw = rel.overhead_first_order(1800.0, C_SYNC, hw, R)
    at_1800_both = rel.overhead_first_order(1800.0, C_SYNC, both, R)
    assert printed(at_1800_hw * 100, 1.08, 2)
    assert printed(at_1800_both * 100, 1.25, 2)
    # (+0.03 days): base training 31,790 steps x 52.8 s (REFERENCE.md 10.6) x the overhead increase
    assert printed(31_790 * 52.8 * (at_1800_both - at_1800_hw) / DAY, 0.03, 2)


def test_optimum_with_backlog_bound():
    # async: the interval may not go below size / B; L is convex so the bound becomes the optimum
    assert rel.optimal_interval_first_order(0.5, 1e-3, min_interval=16.0) == pytest.approx(math.sqrt(1000))
    assert rel.optimal_interval_first_order(0.5, 1e-1, min_interval=16.0) == 16.0
    assert rel.optimal_interval_first_order(0.5, 0.0) == math.inf


# --- async timeline (REFERENCE.md 10.4) --------------------------------------------------------


def test_async_timeline_7_gb_s():
    # REFERENCE.md 10.4: 112 GB at 7 GB/s, copy 0.5 s, snapshots at 20 and 40 s -> commits 36.5, 56.5 s;
    # a failure at 50 s rolls back to 20 s and redoes 30 s
    tl = rel.async_upload_timeline([20.0, 40.0], 0.5, 112 * GB, 7 * GB)
    assert [s.committed for s in tl] == pytest.approx([36.5, 56.5])
    assert [s.copied for s in tl] == pytest.approx([20.5, 40.5])
    rec = rel.recovery_after_failure(tl, 50.0)
    assert rec.snapshot == 20.0
    assert rec.redo == pytest.approx(30.0)


def test_async_timeline_20_gb_s():
    # REFERENCE.md 10.4: at 20 GB/s commits 26.1 and 46.1 s, the same failure redoes 10 s
    tl = rel.async_upload_timeline([20.0, 40.0], 0.5, 112 * GB, 20 * GB)
    assert printed(tl[0].committed, 26.1, 1) and printed(tl[1].committed, 46.1, 1)
    rec = rel.recovery_after_failure(tl, 50.0)
    assert rec.snapshot == 40.0
    assert rec.redo == pytest.approx(10.0)


def test_async_timeline_queue_and_no_commit():
    # snapshot every 10 s at 7 GB/s (16 s upload): one upload at a time, so the queue grows
    # derivation: commit_k = max(t_k + 0.5, commit_{k-1}) + 16 -> 26.5, 42.5, 58.5
    tl = rel.async_upload_timeline([10.0, 20.0, 30.0], 0.5, 112 * GB, 7 * GB)
    assert [s.committed for s in tl] == pytest.approx([26.5, 42.5, 58.5])
    assert [s.upload_start for s in tl] == pytest.approx([10.5, 26.5, 42.5])
    rec = rel.recovery_after_failure(tl, 25.0)
    assert rec.snapshot is None and rec.redo == 25.0
    with pytest.raises(InputError):
        rel.async_upload_timeline([20.0, 10.0], 0.5, 1.0, 1.0)


def test_async_expected_lost_work_matches_timeline():
    # expected_lost_work(tau, w) = tau/2 + w: average the timeline's redo over uniformly spread failures
    tau, copy, size, bw = 20.0, 0.5, 112 * GB, 7 * GB
    w = rel.commit_lag(size, bw, copy)  # 16.5 s
    tl = rel.async_upload_timeline([tau * k for k in range(1, 60)], copy, size, bw)
    fails = np.linspace(600.0, 1000.0, 4001)[:-1]
    mean_redo = np.mean([rel.recovery_after_failure(tl, f).redo for f in fails])
    assert mean_redo == pytest.approx(rel.expected_lost_work(tau, w), rel=2e-3)
    assert rel.expected_lost_work(tau, w) == pytest.approx(26.5)


# --- stragglers (REFERENCE.md 10.4) ------------------------------------------------------------


@pytest.mark.parametrize("n, e", [(8, 1.42), (48, 2.23), (1024, 3.25)])
def test_expected_max_golden(n, e):
    # REFERENCE.md 10.4: E[max of N standard normals] = 1.42 / 2.23 / 3.25
    assert printed(rel.expected_max_std_normal(n), e, 2)


def test_expected_max_closed_forms():
    # derivation: E[max of 2] = 1/sqrt(pi); E[max of 3] = 3/(2 sqrt(pi)); one sample has mean 0
    assert rel.expected_max_std_normal(1) == 0.0
    assert rel.expected_max_std_normal(2) == pytest.approx(1 / math.sqrt(math.pi), rel=1e-12)
    assert rel.expected_max_std_normal(3) == pytest.approx(1.5 / math.sqrt(math.pi), rel=1e-12)


def test_expected_max_large_n_fast_and_bounded():
    # fast at any n (benchmarks/timed_checks.py prints the seconds): the integral is one sum over a fixed grid,
    # 16-point Gauss-Legendre on 416 panels (the docstring's), built once, whatever n; nothing grows with n
    rel._grid.cache_clear()
    rel._expected_max_scalar.cache_clear()
    e = rel.expected_max_std_normal(100_000)
    assert rel._grid()[0].shape == (16 * 416,) and rel._grid.cache_info().misses == 1
    rel.expected_max_std_normal(10**9)
    assert rel._grid.cache_info().misses == 1  # a larger n: the same grid, not a bigger one
    # derivation: E[max_n] <= sqrt(2 ln n) (Jensen on the MGF); and by the extreme-value expansion
    # b_n = sqrt(2 ln n) - (ln ln n + ln 4 pi) / (2 sqrt(2 ln n)), E ~ b_n + 0.5772 / sqrt(2 ln n) = 4.38
    s = math.sqrt(2 * math.log(100_000))
    assert e < s
    approx = s - (math.log(math.log(100_000)) + math.log(4 * math.pi)) / (2 * s) + 0.5772 / s
    assert e == pytest.approx(approx, abs=0.03)


def test_expected_max_array_and_bad_n():
    out = rel.expected_max_std_normal(np.array([1, 8, 48]))
    assert out.shape == (3,)
    assert printed(out[1], 1.42, 2)
    for bad in (0, -3, 2.5):
        with pytest.raises(InputError):
            rel.expected_max_std_normal(bad)


@pytest.mark.parametrize(
    "frac, steps",
    [  # REFERENCE.md 10.4: mu = 52.2 s, fixed 0.58 s, N = 8 / 48 / 1024
        (0.02, (54.3, 55.1, 56.2)),
        (0.05, (56.5, 58.6, 61.3)),
    ],
)
def test_straggler_steps(frac, steps):
    mu = 52.2
    for n, expected in zip((8, 48, 1024), steps, strict=False):
        assert printed(rel.straggler_step(mu, frac * mu, n, 0.58), expected, 1)


def test_slow_card_wait():
    # REFERENCE.md 10.4: slow card at mu + 3 sigma (sigma 2 % of 52.2 s): 1.72 s (8), 0.81 s (48), 0 (1024)
    sigma = 0.02 * 52.2
    assert printed(rel.slow_card_wait(sigma, 8, 3), 1.72, 2)
    assert printed(rel.slow_card_wait(sigma, 48, 3), 0.81, 2)
    assert rel.slow_card_wait(sigma, 1024, 3) == 0.0
    # chapter's multiples of sigma: ~1.65 sigma (8), ~0.78 sigma (48)
    assert printed(rel.slow_card_wait(1.0, 8, 3), 1.65, 2)
    assert printed(rel.slow_card_wait(1.0, 48, 3), 0.78, 2)


def test_wait_step_is_slow_card_or_others():
    sigma = 0.02 * 52.2
    # derivation: the slow card dominates the expected others' maximum for 8 cards: 52.2 + 3 sigma + 0.58
    assert rel.wait_step(52.2, sigma, 8, 3, 0.58) == pytest.approx(52.2 + 3 * sigma + 0.58)
    # for 1024 cards the others are slower anyway: the step is the 1023-card expected step
    assert rel.wait_step(52.2, sigma, 1024, 3, 0.58) == pytest.approx(rel.straggler_step(52.2, sigma, 1023, 0.58))


def test_redistribute_step():
    # REFERENCE.md 10.4: mu N/(N-1) + E[max_{N-1}] sigma (sigma unchanged) + fixed -> 61.6 s (8), 56.2 s (48);
    # both above the expected step of waiting without a slow card, 54.3 s and 55.1 s
    sigma = 0.02 * 52.2
    r8 = rel.redistribute_step(52.2, sigma, 8, 0.58)
    r48 = rel.redistribute_step(52.2, sigma, 48, 0.58)
    assert printed(r8, 61.6, 1)
    assert printed(r48, 56.2, 1)
    assert r8 > rel.straggler_step(52.2, sigma, 8, 0.58)
    assert r48 > rel.straggler_step(52.2, sigma, 48, 0.58)


def test_evict_cost():
    # REFERENCE.md 10.4: tau/2 + r = 420 s at tau = 600 s, r = 120 s (~8 steps of 52.8 s)
    assert rel.evict_cost(600.0, 120.0) == 420.0
    assert printed(rel.evict_cost(600.0, 120.0) / 52.8, 8, 0)
    assert rel.evict_break_even_steps(600.0, 120.0, 0.0) == math.inf
    assert rel.evict_break_even_steps(600.0, 120.0, 0.84) == pytest.approx(500.0)


# --- properties --------------------------------------------------------------------------------

pauses = st.floats(0.01, 600.0)
rates = st.floats(1e-8, 1e-3)
restores = st.floats(0.0, 3600.0)
taus = st.floats(1.0, 1e6)
lags = st.floats(0.0, 600.0)


@settings(max_examples=200, deadline=None)
@given(pauses, rates, restores, taus, lags)
def test_first_order_optimum_is_minimum(c, lam, r, tau, w):
    best = rel.optimal_interval_first_order(c, lam)
    assert rel.overhead_first_order(best, c, lam, r, w) <= rel.overhead_first_order(tau, c, lam, r, w) * (1 + 1e-12)


@settings(max_examples=200, deadline=None)
@given(pauses, rates, restores, taus)
def test_poisson_bounds(c, lam, r, tau):
    # derivation: exp(y) - 1 >= y + y^2/2 gives E[T]/tau - 1 >= L(tau) (first order, sync)
    lp = rel.overhead_poisson(tau, c, lam, r)
    assert lp >= rel.overhead_first_order(tau, c, lam, r) * (1 - 1e-9)
    # exp(y) - 1 <= y exp(y) gives E[T]/tau - 1 <= (1 + lam r) (tau + c)/tau exp(lam (tau + c)) - 1
    s = tau + c
    if lam * s < 700:  # beyond that E[T] overflows to inf (a segment practically never completes)
        assert lp <= (1 + lam * r) * s / tau * math.exp(lam * s) - 1 + 1e-9
    else:
        assert lp > 1e290


@settings(max_examples=200, deadline=None)
@given(pauses, rates, restores, taus)
def test_poisson_optimum(c, lam, r, tau):
    best = rel.optimal_interval_poisson(c, lam)
    assert rel.overhead_poisson(best, c, lam, r) <= rel.overhead_poisson(tau, c, lam, r) * (1 + 1e-12) + 1e-15
    # h(x) >= x^2/2 puts the Poisson optimum at or below the first-order one
    assert best <= rel.optimal_interval_first_order(c, lam) * (1 + 1e-12)


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 20_000), st.integers(1, 5_000))
def test_expected_max_increasing(n, dn):
    assert rel.expected_max_std_normal(n + dn) > rel.expected_max_std_normal(n)


@settings(max_examples=200, deadline=None)
@given(taus, rates, lags)
def test_async_redo_at_least_sync(tau, lam, w):
    assert rel.redo_overhead(tau, lam, w) >= rel.redo_overhead(tau, lam)
    assert rel.expected_lost_work(tau, w) >= rel.expected_lost_work(tau)
