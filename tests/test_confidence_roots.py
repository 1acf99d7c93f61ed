"""The chance roots (issue 28): the largest useful time W_max meeting P(finish <= deadline) >= q, and the
q-quantile, found by verified Newton rounds in probit-log coordinates (models/finish.py).

The oracle is SciPy's brentq on the untransformed condition, per element, to 1e-14 relative: every root
this module finds must lie on the safe side of it (W_max never above the exact root, the quantile never
below it) and within the stated 2 x ROOT_RTOL. The grid spans the regimes of the finish law: cards from
8 to 65,536 (from a fraction of one expected failure to thousands), save intervals of 10 min and 2 h,
sync and async commit lags, rollbacks on and off, no step error to sigma 0.3, levels 50 % to 99.9 %,
a short and a long run.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import optimize

from tpopt.models import finish as Fn
from tpopt.models.units import DAY

CARDS = (8, 512, 16384, 65536)
TAUS = (600.0, 7200.0)
LAGS = (0.0, 30.0)
SPIKES = (None, 3 * DAY)
SIGMAS = (0.0, 0.03, 0.15, 0.3)
LEVELS = (0.5, 0.95, 0.999)
ROOMS = (5 * DAY, 25 * DAY)
RESTORE_S, MTBF_S, PAUSE_S = 120.0, 337 * DAY, 16.4


def grid():
    """(sigma, q, room, saves, kappa (3, n)) over the product of the axes above, one row per element."""
    rows = list(itertools.product(CARDS, TAUS, LAGS, SPIKES, SIGMAS, LEVELS, ROOMS))
    cards, tau, lag = (np.array([r[i] for r in rows], dtype=float) for i in range(3))
    spike = np.array([0.0 if r[3] is None else 1.0 / r[3] for r in rows])
    risk = Fn.Risk()
    rate = np.stack([cards / MTBF_S, spike, cards * risk.slow_rate_per_card_s, 0 * cards])
    slow = np.full_like(cards, risk.slow_duration_s * (risk.slow_factor - 1))
    fixed = np.stack([RESTORE_S + lag, RESTORE_S + lag, slow, RESTORE_S + lag])
    width = np.stack([tau, tau, 0 * tau, tau])
    sigma, q, room = (np.array([r[i] for r in rows], dtype=float) for i in (4, 5, 6))
    return sigma, q, room, 1.0 + PAUSE_S / tau, Fn.event_cumulants(rate, fixed, width)


SIGMA, Q, ROOM, SAVES, KAPPA = grid()


def p_meet(i: int, w: float) -> float:
    """P(T <= D | W = w) of grid element i (reserved 0, deadline = room)."""
    return float(Fn.cdf(ROOM[i], 0.0, w, SAVES[i], SIGMA[i], (KAPPA[0][i], KAPPA[1][i], KAPPA[2][i])))


def groups():
    """Index sets sharing (q, room): max_work takes one level and one deadline per call."""
    for q in LEVELS:
        for room in ROOMS:
            yield np.flatnonzero((Q == q) & (ROOM == room)), q, room


def max_work_all() -> np.ndarray:
    out = np.empty(Q.size)
    for i, q, room in groups():
        out[i] = Fn.max_work(q, room, 0.0, SAVES[i], SIGMA[i], (KAPPA[0][i], KAPPA[1][i], KAPPA[2][i]))
    return out


@pytest.fixture(scope="module")
def roots() -> np.ndarray:
    return max_work_all()


def exact_root(i: int) -> float:
    """brentq on P(T <= D | W) - q over (1e-9 room, room]: the oracle (NaN: no interior root)."""
    lo, hi = ROOM[i] * 1e-9, ROOM[i]
    f = lambda w: p_meet(i, w) - Q[i]  # noqa: E731
    if f(hi) >= 0 or f(lo) < 0:
        return float("nan")
    return optimize.brentq(f, lo, hi, xtol=1e-300, rtol=1e-14, maxiter=500)


def sample(n: int = 160) -> np.ndarray:
    """A fixed spread of grid elements (every stride-th), for the per-element oracle."""
    return np.arange(0, Q.size, max(Q.size // n, 1))


def test_max_work_is_met_where_it_is_returned(roots):
    """Never looser than exact: at every returned W the computed P(finish <= deadline) reaches q."""
    inside = (roots > 0) & (roots < ROOM)
    assert inside.sum() > 0.8 * Q.size
    for i in np.flatnonzero(inside):
        assert p_meet(i, roots[i]) >= Q[i], i


def test_max_work_lies_within_the_stated_bound_below_the_exact_root(roots):
    bound = 2 * Fn.ROOT_RTOL * (1 + 1e-6)
    checked = 0
    for i in sample():
        w = exact_root(i)
        if not np.isfinite(w):
            continue
        checked += 1
        assert roots[i] <= w * (1 + 1e-14), (i, roots[i], w)
        assert np.log(w / roots[i]) <= bound, (i, roots[i], w)
    assert checked > 100


def test_quantile_lies_on_the_safe_side_within_the_stated_bound():
    """The q-quantile of a plan never understates its finish: P(T <= t) >= q at the t returned, and the
    exact quantile (brentq on P(T <= t) - q) is within 2 ROOT_RTOL of t - R below it."""
    idx = sample(120)
    work = 0.6 * ROOM[idx]
    checked = 0
    for q in LEVELS:
        j = idx[Q[idx] == q]
        w = work[Q[idx] == q]
        t = Fn.quantiles(q, 0.0, w, SAVES[j], SIGMA[j], (KAPPA[0][j], KAPPA[1][j], KAPPA[2][j]))
        for k, i in enumerate(j):
            kap = (KAPPA[0][i], KAPPA[1][i], KAPPA[2][i])
            f = lambda x: float(Fn.cdf(x, 0.0, w[k], SAVES[i], SIGMA[i], kap)) - q  # noqa: E731,B023
            assert f(t[k]) >= 0, (i, t[k])
            hi = t[k]
            lo = hi * 0.5
            while f(lo) >= 0:
                lo *= 0.5
            exact = optimize.brentq(f, lo, hi, xtol=1e-300, rtol=1e-14, maxiter=500)
            assert exact <= t[k] and np.log(t[k] / exact) <= 2 * Fn.ROOT_RTOL * (1 + 1e-6), (i, t[k], exact)
            checked += 1
    assert checked >= 100


def test_plans_with_a_step_error_close_in_the_newton_rounds(monkeypatch):
    """NEWTON_ROUNDS' claim: every grid element with a step error (sigma > 0) and an event spread below 5 %
    of the room closes in the verified Newton rounds; the bracketing fallback is not called for them."""

    def refuse(*a, **k):
        raise AssertionError("fell back to chandrupatla_root")

    monkeypatch.setattr(Fn, "chandrupatla_root", refuse)
    w0 = ROOM / ((SAVES + KAPPA[0]) * np.exp(SIGMA * 1.645))
    calm = (SIGMA > 0) & (np.sqrt(KAPPA[1] * w0) / ROOM < 0.05)
    assert calm.sum() > 100
    for i, q, room in groups():
        j = i[calm[i]]
        Fn.max_work(q, room, 0.0, SAVES[j], SIGMA[j], (KAPPA[0][j], KAPPA[1][j], KAPPA[2][j]))


def test_no_event_spread_is_the_closed_form():
    """Without events (kappa = 0) the chance root is W = (D - R) / ((1 + c/tau) e^(sigma z_q)) exactly: the
    lognormal's quantile, derived here (Phi^-1(0.95) = 1.6448536269514722)."""
    z95 = 1.6448536269514722
    room, saves, sigma = 25 * DAY, 1.0 + 16.4 / 1800, 0.087
    w = float(Fn.max_work(0.95, 30 * DAY, 5 * DAY, saves, sigma, (0.0, 0.0, 0.0)))
    closed = room / (saves * np.exp(sigma * z95))
    assert w <= closed and w == pytest.approx(closed, rel=3e-9)


def test_brent_root_takes_brentqs_steps_to_the_last_bit():
    """Distribution.quantile's root finder (Fn.brent_root, no SciPy import) returns exactly what
    scipy.optimize.brentq returns on the same bracket and tolerances: on the report's quantile functions of
    the grid's plans and on steep, flat and odd functions (where Brent's steps switch between interpolation,
    extrapolation and bisection), at the report's tolerances and at tight ones, convergence failures alike."""
    idx = sample(60)
    calls = []
    for i in idx:
        kap = (KAPPA[0][i], KAPPA[1][i], KAPPA[2][i])
        w = 0.6 * ROOM[i]
        f = lambda x, i=i, kap=kap, w=w: float(Fn.cdf(x, 0.0, w, SAVES[i], SIGMA[i], kap)) - Q[i]  # noqa: E731
        calls.append((f, 0.0, 4.0 * w * (SAVES[i] + KAPPA[0][i]) + 1.0, 1e-6, 1e-12))
    rng = np.random.default_rng(7)
    for _ in range(400):
        a, s, p = rng.uniform(-5, 5), rng.uniform(0.1, 10), int(rng.choice([1, 2, 3, 5]))
        g = lambda x, a=a, s=s, p=p: np.tanh(s * (x - a)) * abs(x - a) ** (p - 1)  # noqa: E731
        lo, hi = a - rng.uniform(0.1, 20), a + rng.uniform(0.1, 20)
        calls += [(g, lo, hi, 1e-6, 1e-12), (g, lo, hi, 2e-12, 8.9e-16)]

    def outcome(root, f, lo, hi, xt, rt):
        try:
            return float(root(f, lo, hi, xtol=xt, rtol=rt))
        except RuntimeError:
            return "no convergence"

    for call in calls:
        assert outcome(Fn.brent_root, *call) == outcome(optimize.brentq, *call), call[1:]


def _find_root_both(f, lo, hi, args, xatol):
    """(ours, SciPy's): (x, f(x), bracket ends, f at each) of Fn.chandrupatla_root and of
    scipy.optimize.elementwise.find_root at the same bracket and tolerances."""
    from scipy.optimize import elementwise

    ours = Fn.chandrupatla_root(f, lo, hi, args, xatol)
    res = elementwise.find_root(f, (lo, hi), args=args, tolerances={"xatol": xatol, "xrtol": 0.0})
    return ours, (res.x, res.f_x, res.bracket[0], res.bracket[1], res.f_bracket[0], res.f_bracket[1])


def test_chandrupatla_root_takes_find_roots_steps_to_the_last_bit():
    """The chance roots' bracketing fallback (Fn.chandrupatla_root, no SciPy optimize import) returns exactly
    what scipy.optimize.elementwise.find_root returns: on the chance condition of every grid plan (probit of
    P(T <= D | W = e^x) less probit(q), over max_work's whole bracket, where the fallback runs), and on steep,
    flat, odd and sign-less functions (brackets that do not straddle a root give NaN alike), at the chance
    tolerance and at coarse ones."""
    calls = []
    for i, q, room in groups():
        zq = Fn.ndtri(q)

        def g(x, sv, sg, a, b, c, room=room, zq=zq):
            return Fn._probit(Fn.cdf(room, 0.0, np.exp(x), sv, sg, (a, b, c))) - zq

        lo, hi = np.full(i.size, np.log(room * 1e-9)), np.full(i.size, np.log(room))
        calls.append((g, lo, hi, (SAVES[i], SIGMA[i], KAPPA[0][i], KAPPA[1][i], KAPPA[2][i]), Fn.ROOT_RTOL))
    rng = np.random.default_rng(11)
    for p in (1, 2, 3, 5):
        a, s = rng.uniform(-5, 5, 300), rng.uniform(0.1, 10, 300)
        lo, hi = a - rng.uniform(-2, 20, 300), a + rng.uniform(0.1, 20, 300)  # some brackets miss the root

        def h(x, a, s, p=p):
            return -np.tanh(s * (x - a)) * np.abs(x - a) ** (p - 1)

        calls += [(h, lo, hi, (a, s), 1e-9), (h, lo, hi, (a, s), 1e-3)]
    for f, lo, hi, args, tol in calls:
        ours, scipys = _find_root_both(f, lo, hi, args, tol)
        for mine, theirs in zip(ours, scipys, strict=True):
            assert np.array_equal(mine, theirs, equal_nan=True), (f, tol)


def test_quantiles_found_in_lockstep_are_the_ones_found_one_at_a_time():
    """Fn.find_quantiles (every root finding of a report in lockstep, one cdf call per round over all the laws)
    returns the very bits of Distribution.quantile run one law at a time: on a sample of the grid's laws (with
    and without step error and event sources; levels from 1 % to 99.9 %) and each law's removals of a source
    (the risk shares' roots), each checked against a fresh law that finds its root alone."""
    def law(i: int, sigma: float | None = None) -> Fn.Distribution:
        names = tuple(s.name for s in Fn.SOURCES)
        ev = Fn.Events(names, np.array([1e-6 * (k + 1) * (i % 4) * (k != i % 5) for k in range(len(names))]),
                       np.full(len(names), 60.0 * (1 + i % 3)), np.full(len(names), 600.0))
        return Fn.Distribution(3600.0, 0.5 * ROOM[i], SAVES[i], SIGMA[i] if sigma is None else sigma, ev)

    asks = []
    for n, i in enumerate(sample(24)):
        d = law(int(i))
        asks += [(d, q) for q in (0.01, 0.5, 0.9, 0.99, 0.999)[n % 3:]] + d.risk_asks(float(Q[i]))
    Fn.find_quantiles(asks)
    for d, q in asks:
        alone = Fn.Distribution(d.reserved, d.work, d.saves, d.sigma, d.events)
        assert d.found[q] == alone.quantile(q), (d, q)
