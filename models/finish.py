"""The finish-time distribution of a plan: its sources of variation, the analytic law, quantiles.

A plan's nominal finish is ``R + W (1 + L)`` (R reserved, W = iterations x step the useful training time,
L the checkpoint and failure overhead). Its finish *time* is random:

    T = R + W' E + S_E,   W' = W (1 + c / tau)

- ``E`` the step-time model error, lognormal with median 1 and log-sd sigma (measured / predicted step);
  it scales the whole run, saves included (``c`` the save pause, ``tau`` the save interval).
- ``S_E`` the delays of random events, a compound Poisson sum: each source ``s`` (:data:`SOURCES`) fires at
  ``rate_s`` events per second of useful training, so ``N_s ~ Poisson(rate_s W E)`` (a slower run is
  exposed longer), and each event costs ``a_s + b_s U`` seconds, ``U ~ Uniform(0, 1)``: a restart ``r``
  plus the work since the last committed save (``b = tau``, plus the commit lag ``w`` of async saves),
  or a fixed delay (a fail-slow episode).

Exact parts: the lognormal (integrated by Gauss-Legendre quadrature over its normal score on the window
where the event part's CDF moves, :func:`cdf`), the cumulants of the compound Poisson sum
(kappa_n = sum_s rate_s W E E[X_s^n], exact). Moment matching, stated: given E, the event sum is the
translated gamma with those three cumulants (Seal's approximation); :func:`matching_error` measures its
largest CDF error against the exact lattice law (FFT of the compound Poisson), and the tests bound it.
No Monte Carlo here: :mod:`tpopt.models.simulate` is the oracle that checks this module.

Adding a source: one :class:`Source` in :data:`SOURCES` with its rate and its per-event cost as functions of
:class:`Exposure`, and its inputs in :class:`Risk`. Spot preemptions read the :class:`Risk` of the plan's offer
(tpopt.models.terms.law_risk: a spot offer's rate and reacquisition delay; the ``[risk]`` table's elsewhere).

Units: seconds, events per second, fractions. One quantile: SciPy's brentq (:meth:`Distribution.quantile`);
many at once and the chance roots: verified Newton rounds in probit-log coordinates (:func:`max_work`),
SciPy's bracketing root finder for what they leave.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Generator
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike, NDArray

from tpopt.errors import InputError
from tpopt.models.cephes import gammainc_array, ndtr_array, ndtri, ndtri_array
from tpopt.models.evidence import Evidence
from tpopt.models.numeric import FloatArray, Floats
from tpopt.models.units import DAY, HOUR

# ---------------------------------------------------------------------------------------------
# inputs

VALIDATION_LOO_ERRORS = (-5.4, -1.5, 4.2, 1.9, -0.3, -3.1, -0.1, -2.4, -2.1, -4.6,
                         3.4, 1.3, 2.3, 0.7, -0.6, -2.7, 4.4, 4.6)
"""Leave-one-out step-time errors (%) of the calibration on the A100 validation tables (docs/model.md: Narayanan et
al. 2021 table 1, ten runs; Korthikanti et al. 2022, four models x full / selective recompute): their RMS
log error, 0.029, is the A100-80GB-SXM's ``residual_sigma`` in catalogs/performance.toml."""

VALIDATION_LOSO_ERRORS = (-7.7, 3.9, -9.1, -11.9, -9.9, -12.5, -5.3, 3.0, 5.6)
"""Leave-one-source-out step-time errors (%) on the modern table, the LOSO column of
benchmarks/validate_published.py for megatron-bridge-modern in its row order (NVIDIA Megatron-Bridge's H100 /
B200 / GB200 runs on Megatron-Core: mb2511 H100 405B FP8, H100 8B FP8 FSDP, B200 8B, B200 405B, GB200 8B,
GB200 DeepSeek-V3, GB200 Qwen3-235B, mb H100 DeepSeek-V3, H100 70B), each predicted by the calibrations fitted on
the other tables only, or the catalog's public measurements where no other table has the card."""


def residual_sigma(ratios: ArrayLike) -> float:
    """The lognormal sigma of predicted / measured step-time ratios: sqrt(mean(ln(ratio)^2)) (the RMS log
    error; a median-1 lognormal's log-sd). benchmarks/validate_published.py prints it over its leave-one-out
    and leave-one-source-out predictions: the catalog's ``residual_sigma`` and :data:`DEFAULT_STEP_SIGMA`."""
    r = np.asarray(ratios, dtype=float)
    if r.size == 0 or not np.all(np.isfinite(r)) or np.any(r <= 0):
        raise InputError("residual_sigma needs positive, finite step-time ratios")
    return float(np.sqrt(np.mean(np.log(r) ** 2)))


DEFAULT_STEP_SIGMA = round(residual_sigma([1 + e / 100 for e in VALIDATION_LOSO_ERRORS]), 3)
"""The catalog sigmas (the flat model's, and where no uncertainty table is attached; under the per-operation model
each plan's own sigma comes from catalogs/uncertainty.toml by its distance from the evidence,
tpopt.models.evidence). Log-sd of measured / predicted step time on a card no validation table covers (no
``residual_sigma`` in performance.toml, no calibration of one's own): the RMS log error of the modern table's
leave-one-source-out predictions (:data:`VALIDATION_LOSO_ERRORS`: 0.087), how far the model is off on cards it was
not fitted on, on the stack its fit ran (Megatron-Core); the A100 tables' are 0.035; the 2024-2026 table's larger
spread comes mostly from stacks, MoE and long context no other table ran, which the stack sigmas below and the
per-operation model's factors carry. benchmarks/validate_published.py prints it beside this value. Covered cards
ship their own leave-one-out RMS (``residual_sigma``: A100 0.029, H100 0.057, GB200 0.063; B200, under 4 runs, this
default), with the stacks it
was measured on (``residual_sigma_stacks``); ``tpopt calibrate`` replaces it with a calibration's residual spread.
Stacks carry their own (catalogs/stacks.toml ``residual_sigma``: their runs' leave-one-out RMS, Megatron-LM 2021
0.029, Megatron-Core 0.054; a stack no table ran, the public anchors' RMS log error 0.154, :data:`ANCHOR_SPEEDS`:
7-28 % optimism on stacks the model was not fitted on); off the stacks a card was measured on, the larger of the
two applies (tpopt.models.terms.step_sigma)."""
DEFAULT_STEP_SIGMA_SOURCE = ("default for a card no validation table covers: the leave-one-source-out RMS log "
                             "error of benchmarks/validate_published.py on the modern table (Megatron-Bridge "
                             f"H100 / B200 / GB200), {DEFAULT_STEP_SIGMA:.3f}")

ANCHOR_SPEEDS = (1.09, 1.07, 1.18, 1.23, 1.09, 1.28, 1.13)
"""tpopt's speed over the published one on the seven public anchors (docs/model.md, "Public anchors": Llama 3 405B
x2, BLOOM-176B, OPT-175B, MegaScale 175B, Megatron-LM on MegaScale's run, DeepSeek-V3)."""

SLOW_FACTOR = 1.34
"""Slowdown of the job while a fail-slow episode lasts: 1.34x (Greyhound: Hunting Fail-Slows in
Hybrid-Parallel Training at Scale, USENIX ATC 2025, measured on a 10,000-GPU cluster)."""
SLOW_DURATION_S = 2 * HOUR
"""How long an episode lasts until it is found and mitigated (assumed: 2 h)."""
SLOW_RATE_PER_CARD_S = 1.0 / (10_000 * DAY)
"""Episodes per card-second of training (assumed: one episode a day at 10,000 cards)."""


@dataclass(frozen=True)
class Risk:
    """Inputs of the distribution beyond the checkpoint and failure ones (``[risk]``); each a stated default.

    ``step_sigma`` None: with ``evidence`` (the catalog's uncertainty table) each plan's own sigma by its
    distance from the evidence (tpopt.models.evidence, tpopt.models.terms.step_sigma); without, the
    accelerator's ``residual_sigma`` from performance.toml when a calibration wrote one, else
    :data:`DEFAULT_STEP_SIGMA`. ``preempt_*``: spot preemptions (0: none; on a spot offer the offer's terms
    replace them, tpopt.models.terms.law_risk)."""

    step_sigma: float | None = None
    slow_rate_per_card_s: float = SLOW_RATE_PER_CARD_S
    slow_factor: float = SLOW_FACTOR
    slow_duration_s: float = SLOW_DURATION_S
    preempt_rate_per_card_s: float = 0.0
    reacquire_s: float = 0.0
    spot_availability: float = 1.0  # P(spot capacity obtainable on a day); 1: always (off the spot market)
    evidence: Evidence | None = None  # the uncertainty table (catalogs/uncertainty.toml); None: the catalog sigmas

    def __post_init__(self) -> None:
        for name in ("slow_rate_per_card_s", "slow_duration_s", "preempt_rate_per_card_s", "reacquire_s"):
            v = getattr(self, name)
            if not math.isfinite(v) or v < 0:
                raise InputError(f"risk.{name} must be a finite number >= 0, got {v!r}")
        if not 0.0 < self.spot_availability <= 1.0:
            raise InputError(f"spot availability must lie in (0, 1], got {self.spot_availability!r}")
        if self.step_sigma is not None and (not math.isfinite(self.step_sigma) or self.step_sigma < 0):
            raise InputError(f"risk.step_sigma must be a finite number >= 0, got {self.step_sigma!r}")
        if not math.isfinite(self.slow_factor) or self.slow_factor < 1:
            raise InputError(f"risk.slow_factor must be >= 1, got {self.slow_factor!r}")


SIGMA_MIN_RUNS = 4
"""Fewest leave-one-out predictions whose RMS a card's ``residual_sigma`` is taken from alone; with fewer
(two runs estimate no spread) the card gets the larger of theirs and :data:`DEFAULT_STEP_SIGMA`."""


def parse_confidence(text: object) -> float:
    """A confidence level from ``95%`` or ``0.95``, strictly between 0 and 1 (else InputError)."""
    raw = str(text).strip()
    try:
        q = float(raw[:-1]) / 100.0 if raw.endswith("%") else float(raw)
    except ValueError:
        raise InputError(f"confidence {raw!r} is not a number (use e.g. 95% or 0.95)") from None
    if not math.isfinite(q) or not 0.0 < q < 1.0:
        raise InputError(f"confidence {raw!r} must lie strictly between 0% and 100%")
    return q


@dataclass(frozen=True)
class Exposure:
    """What the sources read from one plan: cards, save interval tau, commit lag w, restart r (s), the
    per-card MTBF (s; None: no hardware failures), the job-wide rollback interval (s; None: none)."""

    cards: Floats  # a float, or an array of plans (events_over)
    tau: Floats
    lag: Floats
    restore: float
    card_mtbf_s: float | None
    spike_interval_s: float | None
    risk: Risk


@dataclass(frozen=True)
class Source:
    """One source of random delay: events per second of useful training, and the cost of one event,
    ``fixed + width U`` seconds with U uniform on [0, 1)."""

    name: str
    label: str
    rate: Callable[[Exposure], Floats]
    fixed: Callable[[Exposure], Floats]
    width: Callable[[Exposure], Floats]
    basis: str  # the statement reports and docs print


CAPACITY = "capacity"
"""The source of the days without spot capacity (its waits are not billed: the cost's law is the law without it)."""

SOURCES = (
    Source("failures", "hardware failures",
           lambda x: 0.0 if x.card_mtbf_s is None else x.cards / x.card_mtbf_s,
           lambda x: x.restore + x.lag, lambda x: x.tau,
           "Poisson, cards / card MTBF; each: restart + work since the last committed save"),
    Source("rollbacks", "loss-spike rollbacks",
           lambda x: 0.0 if not x.spike_interval_s else 1.0 / x.spike_interval_s,
           lambda x: x.restore + x.lag, lambda x: x.tau,
           "Poisson, one per checkpoint.loss_spike_interval; each: restart + work since the last save"),
    Source("fail-slow", "stragglers / fail-slow episodes",
           lambda x: x.cards * x.risk.slow_rate_per_card_s,
           lambda x: x.risk.slow_duration_s * (x.risk.slow_factor - 1.0), lambda x: 0.0,
           "Poisson in cards x time; each: duration x (slowdown - 1) (Greyhound, ATC'25: 1.34x)"),
    Source("preemptions", "spot preemptions",
           lambda x: x.cards * x.risk.preempt_rate_per_card_s,
           lambda x: x.risk.reacquire_s + x.restore + x.lag, lambda x: x.tau,
           "Poisson in cards x time; each: reacquire + restart + work since the last save"),
    Source(CAPACITY, "days without spot capacity",
           lambda x: (1.0 - x.risk.spot_availability) / DAY,
           lambda x: DAY / x.risk.spot_availability, lambda x: 0.0,
           "spot capacity on a day with probability a (independent days: waits of mean (1 - a) / a and variance "
           "(1 - a) / a^2 days per day of work); as (1 - a) events per day of work of a day / a each, the same "
           "mean and variance"),
)
STEP_ERROR = "step-time model"
SOURCE_NAMES = (STEP_ERROR,) + tuple(s.name for s in SOURCES)


def uniform_moments(a: ArrayLike, b: ArrayLike) -> tuple[FloatArray, FloatArray, FloatArray]:
    """E[X], E[X^2], E[X^3] of X = a + b U, U ~ Uniform(0, 1): E[U^k] = 1 / (k + 1).

    a + b/2;  a^2 + a b + b^2/3;  a^3 + 3 a^2 b / 2 + a b^2 + b^3 / 4.
    """
    a_, b_ = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return (a_ + b_ / 2, a_**2 + a_ * b_ + b_**2 / 3, a_**3 + 1.5 * a_**2 * b_ + a_ * b_**2 + b_**3 / 4)


@dataclass(frozen=True)
class Events:
    """The event sources of one plan: per source (rate /s of useful time, fixed s, width s)."""

    names: tuple[str, ...]
    rate: FloatArray
    fixed: FloatArray
    width: FloatArray

    @classmethod
    def of(cls, x: Exposure) -> Events:
        return cls(tuple(s.name for s in SOURCES), np.array([s.rate(x) for s in SOURCES], dtype=float),
                   np.array([s.fixed(x) for s in SOURCES], dtype=float),
                   np.array([s.width(x) for s in SOURCES], dtype=float))

    def cumulants(self) -> FloatArray:
        """kappa_1..3 of the event delay per second of useful progress (exact for this renewal model).

        Rollback sources (width tau > 0) together fire at lam = sum of their rates per second of work.
        A segment of tau seconds of progress is attempted until one attempt sees no event: the failed
        attempts K are geometric, P(K = k) = (1 - p)^k p with p = exp(-lam tau) (mean (1 - p)/p, variance
        (1 - p)/p^2, third cumulant (1 - p)(2 - p)/p^3), each losing Y = X + F: X the work done, an
        exponential of rate lam truncated to [0, tau) (E[X^n] = n! P(n + 1, lam tau) / (lam^n (1 - p)),
        P the regularised incomplete gamma; lam -> 0: tau^n / (n + 1)), F the fixed part of a source drawn
        with probability rate / lam. The segment's delay is compound geometric:
        k1 = E[K] m1,  k2 = E[K] Var Y + Var K m1^2,  k3 = E[K] mu3(Y) + 3 Var K m1 Var Y + k3(K) m1^3,
        and the job's is the sum over W E / tau independent segments: per second of progress, k_n / tau.
        Fixed-delay sources (fail-slow) are Poisson in work time: rate x (work per second of progress,
        (exp(lam tau) - 1) / (lam tau)) x fixed^n.
        """
        col = event_cumulants(self.rate[:, None], self.fixed[:, None], self.width[:, None])
        out: FloatArray = col[:, 0]
        return out


def event_cumulants(rate: ArrayLike, fixed: ArrayLike, width: ArrayLike) -> FloatArray:
    """:meth:`Events.cumulants` for many plans at once: arrays of shape (sources, plans) -> (3, plans).
    Every rollback source of one plan shares its width (the plan's save interval tau)."""
    r, f, w = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (rate, fixed, width)))
    roll = (w > 0) & (r > 0)
    lam = np.sum(np.where(roll, r, 0.0), axis=0)
    tau = np.max(np.where(roll, w, 0.0), axis=0)
    x = lam * tau
    has = x > 0
    xs = np.where(has, x, 1.0)
    lam_s, tau_s = np.where(has, lam, 1.0), np.where(has, tau, 1.0)
    p, q1 = np.exp(-xs), -np.expm1(-xs)
    small = xs < 1e-8
    mx = [np.where(small, tau_s**n / (n + 1), math.factorial(n) * gammainc_array(n + 1, xs) / (lam_s**n * q1))
          for n in (1, 2, 3)]
    pi = np.where(roll, r, 0.0) / lam_s
    mf = [np.sum(pi * f**n, axis=0) for n in (1, 2, 3)]
    # raw moments of Y = X + F (independent)
    y1 = mx[0] + mf[0]
    y2 = mx[1] + 2 * mx[0] * mf[0] + mf[1]
    y3 = mx[2] + 3 * mx[1] * mf[0] + 3 * mx[0] * mf[1] + mf[2]
    var_y = y2 - y1**2
    mu3_y = y3 - 3 * y1 * y2 + 2 * y1**3
    ek, vk, k3k = q1 / p, q1 / p**2, q1 * (1.0 + q1) / p**3  # geometric failures before a success
    seg = np.stack([ek * y1, ek * var_y + vk * y1**2, ek * mu3_y + 3 * vk * y1 * var_y + k3k * y1**3]) / tau_s
    seg = np.where(has, seg, 0.0)
    growth = np.where(has & (xs > 1e-12), np.expm1(xs) / xs, 1.0)
    only = (w <= 0) & (r > 0)
    fixed_part = np.stack([growth * np.sum(np.where(only, r * f ** (n + 1), 0.0), axis=0) for n in range(3)])
    out: FloatArray = seg + fixed_part
    return out


def events_over(x: Exposure) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(rate, fixed, width) of every source, shape (sources, plans), for an :class:`Exposure` whose cards,
    tau and lag may be arrays (one entry per plan)."""
    n = np.broadcast(np.asarray(x.cards, dtype=float), np.asarray(x.tau, dtype=float),
                     np.asarray(x.lag, dtype=float)).shape

    def rows(fn: Callable[[Source], Callable[[Exposure], Floats]]) -> FloatArray:
        return np.stack([np.broadcast_to(np.asarray(fn(s)(x), dtype=float), n) for s in SOURCES])

    return rows(lambda s: s.rate), rows(lambda s: s.fixed), rows(lambda s: s.width)


# ---------------------------------------------------------------------------------------------
# the law

GL_NODES = 64  # Gauss-Legendre nodes of the lognormal integral


@functools.cache
def _gauss_legendre() -> tuple[FloatArray, FloatArray]:
    """The Gauss-Legendre nodes and weights on [-1, 1], computed on first use (numpy.polynomial is not
    imported at start-up)."""
    from numpy.polynomial import legendre  # lazy: start-up time (numpy.polynomial)

    x, w = legendre.leggauss(GL_NODES)
    return x, w


_Z_MAX = 9.0  # Phi(-9) ~ 1e-19: the lognormal beyond is empty to double precision
_WINDOW = 16.0  # half-width of the integration window, in standard deviations of the event sum


def gamma_cdf(y: ArrayLike, k1: ArrayLike, k2: ArrayLike, k3: ArrayLike) -> FloatArray:
    """P(S <= y) for the translated gamma with cumulants k1, k2, k3 (Seal 1977).

    shape k = 4 k2^3 / k3^2, scale theta = k3 / (2 k2), shift x0 = k1 - k theta; S = x0 + theta Gamma(k).
    k2 = 0: the point mass at k1. k3 = 0 (no skew): the normal with mean k1, variance k2.
    """
    y_, m, v, s = (np.asarray(t, dtype=float) for t in (y, k1, k2, k3))
    y_, m, v, s = np.broadcast_arrays(y_, m, v, s)
    point = v <= 0
    skew = s > 0
    vs, ss = np.where(point, 1.0, v), np.where(skew, s, 1.0)
    shape = 4.0 * vs**3 / ss**2
    theta = ss / (2.0 * vs)
    x0 = m - shape * theta
    with np.errstate(invalid="ignore", over="ignore"):
        g = gammainc_array(shape, np.maximum(y_ - x0, 0.0) / theta)
        # the normal only where there is no skew (evaluated only when some element needs it)
        nrm = g if np.all(skew | point) else ndtr_array((y_ - m) / np.sqrt(vs))
    out: FloatArray = np.where(point, (y_ >= m).astype(float), np.where(skew, g, nrm))
    return out


def cdf(t: ArrayLike, reserved: ArrayLike, work: ArrayLike, saves: ArrayLike, sigma: ArrayLike,
        kappa: tuple[ArrayLike, ArrayLike, ArrayLike]) -> FloatArray:
    """P(T <= t) for T = R + W' E + S_E (module docstring), broadcast over every argument.

    ``work`` W (useful training, s), ``saves`` the factor 1 + c / tau, ``kappa`` the event cumulants per
    second of useful time (:meth:`Events.cumulants`). With z the normal score of E = exp(sigma z):

        P(T <= t) = integral phi(z) G(t - R - W' e^(sigma z); e^(sigma z) W kappa) dz

    G the translated gamma (:func:`gamma_cdf`). G moves from 1 to 0 on a window around z*, where the
    mean W' e + W kappa_1 e reaches t - R; outside it G is 1 (below) or 0 (above) to within 1e-12 (16
    standard deviations of the event sum), so the integral is Phi(z_lo) + Gauss-Legendre (64 nodes) on
    [z_lo, z_hi], clipped to |z| <= 9. sigma = 0: G(t - R - W'; W kappa).
    """
    x = np.asarray(t, dtype=float) - np.asarray(reserved, dtype=float)
    W = np.asarray(work, dtype=float)
    Wp = W * np.asarray(saves, dtype=float)
    sg = np.asarray(sigma, dtype=float)
    k1, k2, k3 = (np.asarray(k, dtype=float) * W for k in kappa)
    x, Wp, sg, k1, k2, k3 = np.broadcast_arrays(x, Wp, sg, k1, k2, k3)
    smooth = (sg > 0) & ~(x <= 0)
    if not smooth.all():  # the integral only where it is read: no step error, or t <= R (0), take their own branch
        out = np.zeros(x.shape)
        fixed = ~(sg > 0) & ~(x <= 0)
        if fixed.any():
            out[fixed] = np.clip(gamma_cdf(x[fixed] - Wp[fixed], k1[fixed], k2[fixed], k3[fixed]), 0.0, 1.0)
        if smooth.any():
            out[smooth] = _lognormal_cdf(x[smooth], Wp[smooth], sg[smooth], k1[smooth], k2[smooth], k3[smooth])
        return out
    return _lognormal_cdf(x, Wp, sg, k1, k2, k3)


def _lognormal_cdf(x: FloatArray, Wp: FloatArray, sg: FloatArray, k1: FloatArray, k2: FloatArray, k3: FloatArray
                   ) -> FloatArray:
    """:func:`cdf` where sigma > 0 and t > R (x = t - R, W' = W (1 + c / tau), the event cumulants over W): the
    lognormal integral, element-wise."""
    rate = Wp + k1  # mean of T - R at e = 1
    pos = (x > 0) & (rate > 0)
    e_star = np.where(pos, x / np.where(rate > 0, rate, 1.0), 1.0)
    s_pos = np.where(sg > 0, sg, 1.0)
    z_star = np.log(e_star) / s_pos
    # width of the window in z: sd of the event sum over the slope of the mean, d mean / dz = rate e sigma
    dz = np.sqrt(np.maximum(k2 * e_star, 0.0)) / np.maximum(rate * e_star * s_pos, 1e-300)
    half = _WINDOW * dz + 1e-9
    lo = np.clip(z_star - half, -_Z_MAX, _Z_MAX)
    hi = np.clip(z_star + half, -_Z_MAX, _Z_MAX)
    mid, rad = 0.5 * (lo + hi), 0.5 * (hi - lo)
    gl_x, gl_w = _gauss_legendre()
    z = mid[..., None] + rad[..., None] * gl_x
    e = np.exp(sg[..., None] * z)
    g = gamma_cdf(x[..., None] - Wp[..., None] * e, k1[..., None] * e, k2[..., None] * e, k3[..., None] * e)
    dens = np.exp(-0.5 * z**2) / math.sqrt(2.0 * math.pi)
    lognormal = ndtr_array(lo) + rad * np.sum(gl_w * dens * g, axis=-1)
    out: FloatArray = np.clip(lognormal, 0.0, 1.0)
    return out


@dataclass(frozen=True)
class Distribution:
    """The finish-time law of one plan (seconds): reserved R, useful training W, save factor 1 + c / tau,
    step-model sigma, and its event sources."""

    reserved: float
    work: float
    saves: float
    sigma: float
    events: Events
    sigma_source: str = DEFAULT_STEP_SIGMA_SOURCE
    kappa: FloatArray = field(init=False, repr=False, compare=False)
    found: dict[float, float] = field(init=False, repr=False, compare=False, default_factory=dict)
    """The quantiles found so far, by level (a report asks for the median and the confidence level twice)."""
    variants: dict[str, Distribution] = field(init=False, repr=False, compare=False, default_factory=dict)
    """The laws without one source (:meth:`without`) made so far, by source (their quantiles remembered with them)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "kappa", self.events.cumulants())

    def cdf(self, t: ArrayLike) -> FloatArray:
        """P(T <= t) (:func:`cdf`)."""
        k = self.kappa
        return cdf(t, self.reserved, self.work, self.saves, self.sigma, (k[0], k[1], k[2]))

    def mean(self) -> float:
        """E[T] = R + W' exp(sigma^2 / 2) + W kappa_1 exp(sigma^2 / 2) (E[S_E | E] = W kappa_1 E)."""
        m = math.exp(self.sigma**2 / 2)
        return self.reserved + (self.work * self.saves + self.work * float(self.kappa[0])) * m

    def quantile(self, q: float) -> float:
        """The q-quantile: the root of P(T <= t) = q (:func:`brent_root`, to 1e-9 relative)."""
        if not 0.0 < q < 1.0:
            raise InputError(f"quantile level must lie strictly between 0 and 1, got {q!r}")
        if q not in self.found:
            self.found[q] = self._quantile(q)
        return self.found[q]

    def _quantile(self, q: float) -> float:
        return drive(self.quantile_steps(q), lambda t: float(self.cdf(t)))

    def quantile_steps(self, q: float) -> Steps:
        """The q-quantile's root finding as :data:`Steps` asking for P(T <= t): the bracket [R, hi] (hi doubled
        from twice the mean's work until P(T <= hi) >= q; R itself when P(T <= R) >= q), then
        :func:`brent_steps` on P(T <= t) - q."""
        lo = self.reserved
        hi = self.reserved + (self.work * self.saves + self.work * float(self.kappa[0])) * 2.0 + 1.0
        while (yield hi) < q:
            hi = self.reserved + 2.0 * (hi - self.reserved)
        if (yield lo) >= q:
            return lo
        steps = brent_steps(lo, hi, xtol=1e-6, rtol=1e-12)
        t = next(steps)
        try:
            while True:
                t = steps.send((yield t) - q)
        except StopIteration as stop:
            out: float = stop.value
            return out

    def without(self, source: str) -> Distribution:
        """The same plan with one source of variation removed (``STEP_ERROR`` or a :data:`SOURCES` name)."""
        if source not in self.variants:
            self.variants[source] = self._without(source)
        return self.variants[source]

    def _without(self, source: str) -> Distribution:
        if source == STEP_ERROR:
            return Distribution(self.reserved, self.work, self.saves, 0.0, self.events, self.sigma_source)
        ev = self.events
        rate = np.where(np.array(ev.names) == source, 0.0, ev.rate)
        return Distribution(self.reserved, self.work, self.saves, self.sigma,
                            Events(ev.names, rate, ev.fixed, ev.width), self.sigma_source)

    def risky(self, source: str) -> bool:
        """Whether a source can add anything: the step error with sigma > 0, an event source firing at all."""
        if source == STEP_ERROR:
            return self.sigma != 0
        return float(self.events.rate[list(self.events.names).index(source)]) != 0

    def risk_asks(self, q: float) -> list[tuple[Distribution, float]]:
        """The quantiles :meth:`risk_shares` reads: its own at q and each risky source's removal's
        (:func:`find_quantiles` finds them together)."""
        return [(self, q)] + [(self.without(n), q) for n in SOURCE_NAMES if self.risky(n)]

    def risk_shares(self, q: float) -> dict[str, float]:
        """Each source's share of the risk at level q: the q-quantile's excess over the deterministic
        finish R + W' that the source's removal takes away, normalised to sum 1 (0 where nothing is
        random). A source that can add nothing gets 0."""
        base = self.reserved + self.work * self.saves
        find_quantiles(self.risk_asks(q))
        full = self.quantile(q) - base
        drops = {}
        for name in SOURCE_NAMES:
            if not self.risky(name):
                drops[name] = 0.0
                continue
            drops[name] = max(full - (self.without(name).quantile(q) - base), 0.0)
        total = sum(drops.values())
        return {k: (v / total if total > 0 else 0.0) for k, v in drops.items()}


def brent_root(f: Callable[[float], float], a: float, b: float, xtol: float, rtol: float, maxiter: int = 100
               ) -> float:
    """The root of f on [a, b] (f(a), f(b) of opposite signs) by Brent's method, step for step as
    scipy.optimize.brentq takes it (Brent 1973, ch. 4: inverse quadratic extrapolation or secant
    interpolation while the step is short enough, else bisection; stop when the bracket's half-width is below
    (xtol + rtol |x|) / 2), so the roots are the same to the last bit (tests/test_confidence_roots.py
    compares them) without importing SciPy's optimize package (about 0.1-0.25 s of start-up)."""
    return drive(brent_steps(a, b, xtol, rtol, maxiter), f)


Steps = Generator[float, float, float]
"""A root finding as a generator: it yields the points where it wants f, is sent f there, and returns the root
(:func:`drive` runs one with a scalar f; :func:`find_quantiles` runs many in lockstep, f of all at once)."""


def drive(steps: Steps, f: Callable[[float], float]) -> float:
    """Run a root finding (:data:`Steps`) with f: the same points, the same values, the same root."""
    x = next(steps)
    try:
        while True:
            x = steps.send(f(x))
    except StopIteration as stop:
        out: float = stop.value
        return out


def brent_steps(a: float, b: float, xtol: float, rtol: float, maxiter: int = 100) -> Steps:
    """:func:`brent_root` as :data:`Steps` (its every operation, f asked for by a yield)."""
    xpre, xcur = float(a), float(b)
    fpre = yield xpre
    fcur = yield xcur
    if math.isnan(fpre) or math.isnan(fcur):
        raise ValueError("brent_root: the function is NaN at an end of the bracket")
    if fpre * fcur > 0:
        raise ValueError("brent_root: f(a) and f(b) must have different signs")
    if fpre == 0:
        return xpre
    if fcur == 0:
        return xcur
    xblk = fblk = spre = scur = 0.0
    for _ in range(maxiter):
        if fpre * fcur < 0:  # the bracket [xpre, xcur]: the block end moves to the previous point
            xblk, fblk = xpre, fpre
            spre = scur = xcur - xpre
        if abs(fblk) < abs(fcur):  # the current point is the one with the smaller |f|
            xpre, xcur, xblk = xcur, xblk, xcur
            fpre, fcur, fblk = fcur, fblk, fcur
        delta = (xtol + rtol * abs(xcur)) / 2
        sbis = (xblk - xcur) / 2
        if fcur == 0 or abs(sbis) < delta:
            return xcur
        if abs(spre) > delta and abs(fcur) < abs(fpre):
            if xpre == xblk:  # secant interpolation
                stry = -fcur * (xcur - xpre) / (fcur - fpre)
            else:  # inverse quadratic extrapolation
                dpre = (fpre - fcur) / (xpre - xcur)
                dblk = (fblk - fcur) / (xblk - xcur)
                stry = -fcur * (fblk * dblk - fpre * dpre) / (dblk * dpre * (fblk - fpre))
            if 2 * abs(stry) < min(abs(spre), 3 * abs(sbis) - delta):  # a short step: take it
                spre, scur = scur, stry
            else:
                spre = scur = sbis
        else:
            spre = scur = sbis
        xpre, fpre = xcur, fcur
        xcur += scur if abs(scur) > delta else (delta if sbis > 0 else -delta)
        fcur = yield xcur
        if math.isnan(fcur):
            raise ValueError("brent_root: the function is NaN inside the bracket")
    raise RuntimeError(f"brent_root: no convergence in {maxiter} iterations")


def find_quantiles(asks: list[tuple[Distribution, float]]) -> None:
    """Find the quantiles asked (law, level) that the laws do not remember yet, all root findings in lockstep
    (:meth:`Distribution.quantile_steps`): each round evaluates every open one's P(T <= t) in ONE :func:`cdf`
    call over the laws' parameters. The same points and values as one root finding at a time (the cdf is
    element-wise: an element's bits do not depend on the others; tests/test_confidence_roots.py), so the
    same quantiles; each law remembers its own (:meth:`Distribution.quantile` then reads them)."""
    open_: dict[tuple[int, float], tuple[Distribution, float, Steps, float]] = {}
    for law, q in asks:
        if 0.0 < q < 1.0 and q not in law.found and (id(law), q) not in open_:
            steps = law.quantile_steps(q)
            open_[(id(law), q)] = (law, q, steps, next(steps))
    while open_:
        items = list(open_.items())
        laws = [law for _, (law, _, _, _) in items]
        kap = np.array([law.kappa for law in laws], dtype=float).reshape(len(laws), -1)
        p = cdf(np.array([t for _, (_, _, _, t) in items]), np.array([law.reserved for law in laws]),
                np.array([law.work for law in laws]), np.array([law.saves for law in laws]),
                np.array([law.sigma for law in laws]), (kap[:, 0], kap[:, 1], kap[:, 2])).tolist()
        for (key, (law, q, steps, _)), pk in zip(items, p, strict=True):
            try:
                open_[key] = (law, q, steps, steps.send(pk))
            except StopIteration as stop:
                law.found[q] = stop.value
                del open_[key]


def plan_distribution(*, reserved: float, work: float, pause: float, exposure: Exposure,
                      sigma: float, sigma_source: str = DEFAULT_STEP_SIGMA_SOURCE) -> Distribution:
    """The law of a plan from its figures: W = iterations x step (s), the save pause c (s), and the
    exposure (cards, tau, lag, restart, MTBF, rollbacks, :class:`Risk`)."""
    if sigma < 0 or not math.isfinite(sigma):
        raise InputError(f"step-time sigma must be a finite number >= 0, got {sigma!r}")
    return Distribution(reserved, work, 1.0 + pause / float(exposure.tau), sigma, Events.of(exposure), sigma_source)


# ---------------------------------------------------------------------------------------------
# the chance constraint as a table


_P_EDGE = (1e-300, float(np.nextafter(1.0, 0.0)))
"""Where the probit of a probability is clipped (ndtri is finite inside): the roots below solve
probit(P) = probit(q), and P = 0 or 1 far from the root must not give them infinities."""
ROOT_RTOL = 1e-9
"""Half-width of the verified bracket a chance root ends in, in ln W or ln(t - R): relative 1e-9. The root
returned is the bracket's safe end, so the chance table is never looser than the exact root of the
computed law and tighter by at most 2e-9 relative (tests/test_confidence_roots.py checks both against
brentq to 1e-14)."""
NEWTON_ROUNDS = 6
"""Verified Newton rounds (:func:`_verified_root`) before an element falls back to Chandrupatla's bracketing
root finder; on the grid of tests/test_confidence_roots.py every plan with a step error and an event
spread below 5 % of the room closes within them."""


def _probit(p: ArrayLike) -> FloatArray:
    """Phi^-1(p), clipped to :data:`_P_EDGE` (scipy.special.ndtri's bits: :mod:`tpopt.models.cephes`)."""
    out: FloatArray = ndtri_array(np.clip(p, *_P_EDGE))
    return out


Falling = Callable[..., FloatArray]


def _verified_root(f: Falling, guess: FloatArray, lo: FloatArray, hi: FloatArray,
                   args: tuple[FloatArray, ...]) -> tuple[FloatArray, FloatArray]:
    """The root of a falling f on [lo, hi], element-wise, as a verified pair (x_safe, x_over): f(x_safe)
    >= 0 > f(x_over), x_over - x_safe <= 2 :data:`ROOT_RTOL` (x_safe = hi where f(hi) >= 0, x_over = lo
    where f(lo) < 0: no root inside). Each round evaluates f at x -+ ROOT_RTOL for every element still
    open (one call): the pair either straddles the root (done) or gives f and its slope there, and the
    next x is the Newton step, clipped into the bracket the pairs have proved (bisection where the slope
    is not negative). From ``guess`` (the closed-form inverse below) f is nearly a line, so one to three
    rounds close nearly every element; the few left after :data:`NEWTON_ROUNDS` go to
    :func:`chandrupatla_root` (SciPy's find_root, step for step) on their proved bracket."""
    eps = ROOT_RTOL
    xl, xh = lo.copy(), hi.copy()
    x = np.clip(guess, lo + eps, hi - eps)
    safe, over = np.full(x.shape, np.nan), np.full(x.shape, np.nan)
    open_ = np.ones(x.shape, dtype=bool)
    for _ in range(NEWTON_ROUNDS):
        i = np.flatnonzero(open_)
        if i.size == 0:
            break
        pts = np.stack([x[i] - eps, x[i] + eps])
        fa, fb = f(pts, *(a[i] for a in args))
        xl[i] = np.where(fb >= 0, pts[1], np.where(fa >= 0, pts[0], xl[i]))
        xh[i] = np.where(fa < 0, pts[0], np.where(fb < 0, pts[1], xh[i]))
        straddle = (fa >= 0) & (fb < 0)
        top = (fb >= 0) & (x[i] >= hi[i] - 1.5 * eps)  # safe up to the upper end: no root inside
        bottom = (fa < 0) & (x[i] <= lo[i] + 1.5 * eps)  # unsafe down to the lower end
        safe[i] = np.where(straddle, pts[0], np.where(top, hi[i], safe[i]))
        over[i] = np.where(straddle, pts[1], np.where(bottom, lo[i], over[i]))
        slope = (fb - fa) / (2 * eps)
        newton = x[i] - 0.5 * (fa + fb) / np.where(slope < 0, slope, -1.0)
        x[i] = np.clip(np.where(slope < 0, newton, 0.5 * (xl[i] + xh[i])), xl[i] + eps, xh[i] - eps)
        open_[i] = ~(straddle | top | bottom)
    if open_.any():  # the rest: Chandrupatla's bracketing root finder (SciPy's find_root) on the proved bracket
        i = np.flatnonzero(open_)
        sub = tuple(a[i] for a in args)
        fl, fh = f(np.stack([xl[i], xh[i]]), *sub)
        rx, rf, bl, br, fbl, fbr = chandrupatla_root(f, xl[i], xh[i], sub, eps)
        xs = np.stack([rx, bl, br])
        fs = np.stack([rf, fbl, fbr])
        s_in = np.max(np.where(fs >= 0, xs, -np.inf), axis=0)
        o_in = np.min(np.where(fs < 0, xs, np.inf), axis=0)
        safe[i] = np.where(fh >= 0, xh[i], np.where(fl < 0, -np.inf, s_in))
        over[i] = np.where(fl < 0, xl[i], np.where(fh >= 0, np.inf, o_in))
    return safe, over


def chandrupatla_root(f: Falling, xl: FloatArray, xr: FloatArray, args: tuple[FloatArray, ...], xatol: float
                      ) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]:
    """The roots of an element-wise f on the brackets [xl, xr] by Chandrupatla's method (Chandrupatla 1997, "A new
    hybrid quadratic/bisection algorithm for finding the zero of a nonlinear function without using
    derivatives"), step for step as ``scipy.optimize.elementwise.find_root`` takes it with ``xatol`` and
    ``xrtol = 0`` (SciPy 1.17, ``scipy/optimize/_chandrupatla.py`` and ``scipy/_lib/_elementwise_iterative_method.py``:
    the same operations in the same order, the converged elements dropped from the arrays f is called with), so the
    roots are the same to the last bit (tests/test_confidence_roots.py compares them) without importing SciPy's
    optimize package (about 0.1-0.3 CPU s of a command's start-up). Returns (x, f(x), the bracket's lower and
    upper ends, f at each): x the end of the final bracket with the smaller |f| (NaN where the bracket did not
    straddle a sign change)."""
    x1, x2 = (np.asarray(x, dtype=float).reshape(-1).copy() for x in (xl, xr))
    n = x1.size
    args = tuple(np.asarray(a).reshape(-1).copy() for a in np.broadcast_arrays(*args)) if args else ()
    f1 = np.asarray(f(x1, *args), dtype=float).reshape(-1).copy()
    f2 = np.asarray(f(x2, *args), dtype=float).reshape(-1).copy()
    fatol = float(np.finfo(float).smallest_normal)
    frtol = 0.0 * np.minimum(np.abs(f1), np.abs(f2))
    maxiter = math.log2(float(np.finfo(float).max)) - math.log2(fatol)
    out = {k: np.zeros(n) for k in ("x", "fx", "x1", "f1", "x2", "f2")}
    active = np.arange(n)
    t: float | FloatArray = 0.5
    x3 = f3 = np.zeros(0)
    nit = 0

    def settle(stop: NDArray[np.bool_], xmin: FloatArray, fmin: FloatArray) -> None:  # the stopped elements' results
        at = active[stop]
        for k, v in (("x", xmin), ("fx", fmin), ("x1", x1), ("f1", f1), ("x2", x2), ("f2", f2)):
            out[k][at] = v[stop]

    def check() -> tuple[NDArray[np.bool_], FloatArray, FloatArray, FloatArray, FloatArray]:
        """SciPy's termination check: (stopped, xmin, f(xmin), bracket width, tolerance)."""
        i = np.abs(f1) < np.abs(f2)
        xmin, fmin = np.where(i, x1, x2), np.where(i, f1, f2)
        stop = np.abs(fmin) <= fatol + frtol
        i = (np.sign(f1) == np.sign(f2)) & ~stop
        xmin[i], fmin[i] = np.nan, np.nan
        stop |= i
        i = (~(np.isfinite(x1) & np.isfinite(x2)) | (np.isnan(f1) & np.isnan(f2))) & ~stop
        xmin[i], fmin[i] = np.nan, np.nan
        stop |= i
        dx = np.abs(x2 - x1)
        tol = np.abs(xmin) * 0.0 + xatol
        stop |= dx < tol
        return stop, xmin, fmin, dx, tol

    stop, xmin, fmin, dx, tol = check()
    while True:
        if stop.any():  # the converged elements leave the arrays (as SciPy's loop compresses them)
            settle(stop, xmin, fmin)
            keep = ~stop
            active = active[keep]
            x1, f1, x2, f2, frtol, dx, tol = (v[keep] for v in (x1, f1, x2, f2, frtol, dx, tol))
            if nit:
                x3, f3 = x3[keep], f3[keep]
            args = tuple(a[keep] for a in args)
        if not active.size or nit >= maxiter:
            break
        if nit:  # the next point's fraction t of the bracket (Chandrupatla's eq. 1, kept away from its ends)
            xi1 = (x1 - x2) / (x3 - x2)
            with np.errstate(divide="ignore", invalid="ignore"):
                phi1 = (f1 - f2) / (f3 - f2)
            alpha = (x3 - x1) / (x2 - x1)
            j = ((1 - np.sqrt(1 - xi1)) < phi1) & (phi1 < np.sqrt(xi1))
            f1j, f2j, f3j, alphaj = f1[j], f2[j], f3[j], alpha[j]
            tt = np.full_like(alpha, 0.5)
            tt[j] = (f1j / (f1j - f2j) * f3j / (f3j - f2j)
                     - alphaj * f1j / (f3j - f1j) * f2j / (f2j - f3j))
            tl = 0.5 * tol / dx
            t = np.clip(tt, tl, 1 - tl)
        x = x1 + t * (x2 - x1)
        fx = np.asarray(f(x, *args), dtype=float)
        x3, f3 = x2.copy(), f2.copy()
        j = np.sign(fx) == np.sign(f1)
        nj = ~j
        x3[j], f3[j] = x1[j], f1[j]
        x2[nj], f2[nj] = x1[nj], f1[nj]
        x1, f1 = x, fx
        nit += 1
        stop, xmin, fmin, dx, tol = check()
    if active.size:  # past the iteration limit: where the bracket stands
        settle(np.ones(active.size, dtype=bool), xmin, fmin)
    low = out["x1"] < out["x2"]
    return (out["x"], out["fx"], np.where(low, out["x1"], out["x2"]), np.where(low, out["x2"], out["x1"]),
            np.where(low, out["f1"], out["f2"]), np.where(low, out["f2"], out["f1"]))


def _spread_sigma(sigma: FloatArray, k2: FloatArray, mean_rate: FloatArray, work: FloatArray) -> FloatArray:
    """The log-sd of the finish with the event spread folded into the lognormal, the closed-form start of
    the roots: sqrt(sigma^2 + k2 / (W (1 + c/tau + k1)^2)) (the event sum's variance W k2 over the square of
    the mean W (1 + c/tau + k1), added to the step error's)."""
    out: FloatArray = np.sqrt(sigma**2 + np.maximum(k2, 0.0) / np.maximum(work * mean_rate**2, 1e-300))
    return out


def max_work(q: float, deadline: float, reserved: float, saves: ArrayLike, sigma: ArrayLike,
             kappa: tuple[ArrayLike, ArrayLike, ArrayLike]) -> FloatArray:
    """The largest useful training time W with P(T <= deadline) >= q, element-wise.

    P(T <= D) falls strictly as W grows (every part of T - R grows with W), so the chance constraint
    P(T <= D) >= q is exactly W <= W_max, the root of

        g(x) = Phi^-1(P(T <= D | W = e^x)) - Phi^-1(q)

    in x = ln W, where g is a line of slope -1/sigma when the events add no spread (then W_max = (D - R) /
    ((1 + c/tau + k1) e^(sigma z_q)) in closed form). The closed form with the event spread folded into
    sigma (:func:`_spread_sigma`) starts :func:`_verified_root`, which closes in one to three Newton
    rounds. Rounded to the safe side: the W returned is one at which P(T <= D) >= q was evaluated, and
    the root lies within 2e-9 relative above it (:data:`ROOT_RTOL`): the chance table is never looser than
    the exact constraint, and tighter by at most that. 0 when even W -> 0 cannot (D <= R, or below
    1e-9 (D - R)); D - R when even W = D - R meets q.
    """
    room = deadline - reserved
    sv, sg, a, b, c = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (saves, sigma, *kappa)))
    shape = sv.shape
    if room <= 0:
        return np.zeros(shape)
    sv, sg, a, b, c = (v.reshape(-1) for v in (sv, sg, a, b, c))
    zq = ndtri(q)

    def g(x: NDArray[np.float64], sv: FloatArray, sg: FloatArray, a: FloatArray, b: FloatArray,
          c: FloatArray) -> FloatArray:
        return _probit(cdf(deadline, reserved, np.exp(x), sv, sg, (a, b, c))) - zq

    w0 = np.minimum(room / ((sv + a) * np.exp(sg * zq)), room)
    guess = np.log(room / (sv + a)) - _spread_sigma(sg, b, sv + a, w0) * zq
    lo, hi = np.full(sv.shape, math.log(room * 1e-9)), np.full(sv.shape, math.log(room))
    safe, _ = _verified_root(g, guess, lo, hi, (sv, sg, a, b, c))
    out: FloatArray = np.where(safe >= hi, room, np.exp(safe)).reshape(shape)
    return out


_QUANTILE_MEMO: dict[tuple[float, ...], float] = {}
"""The quantiles :func:`quantiles` found, by (level, R, W, save factor, sigma, cumulants): a report evaluates its
plan several times (the solve, the binding families, the alternatives, the footing), each time asking its
finish quantile. The root finding is element-wise (an element's bits do not depend on the others), so a
remembered quantile is the one a fresh root finding gives."""
_QUANTILE_MEMO_SIZE = 100_000


def quantiles(q: float, reserved: float, work: ArrayLike, saves: ArrayLike, sigma: ArrayLike,
              kappa: tuple[ArrayLike, ArrayLike, ArrayLike]) -> FloatArray:
    """The q-quantile of T element-wise: the root of P(T <= t) = q in x = ln(t - R), where
    Phi^-1(P(T <= R + e^x)) is nearly a line (exactly one without event spread: t - R = W (1 + c/tau + k1)
    e^(sigma z_q)), by :func:`_verified_root` from that closed form with the event spread folded in.
    Rounded up: the t returned is one at which P(T <= t) > q was evaluated, within 2e-9 relative (of
    t - R) above the root. The bracket is e^(-+50) around the closed form; where the root lies beyond an
    end, that end moves out (x 1e3) and the element goes again. Each distinct element is found once per
    process (:data:`_QUANTILE_MEMO`)."""
    W, sv, sg, a, b, c = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (work, saves, sigma, *kappa)))
    shape = W.shape
    keys = [(q, float(reserved), *row) for row in zip(*(v.reshape(-1).tolist() for v in (W, sv, sg, a, b, c)),
                                                    strict=True)]
    todo = [i for i, k in enumerate(keys) if k not in _QUANTILE_MEMO]
    if todo:
        found = _quantiles(q, reserved, *(v.reshape(-1)[todo] for v in (W, sv, sg, a, b, c)))
        if len(_QUANTILE_MEMO) + len(todo) > _QUANTILE_MEMO_SIZE:
            _QUANTILE_MEMO.clear()
        _QUANTILE_MEMO.update(zip((keys[i] for i in todo), found.tolist(), strict=True))
    out: FloatArray = np.array([_QUANTILE_MEMO[k] for k in keys], dtype=float).reshape(shape)
    return out


def _quantiles(q: float, reserved: float, W: FloatArray, sv: FloatArray, sg: FloatArray, a: FloatArray,
               b: FloatArray, c: FloatArray) -> FloatArray:
    """:func:`quantiles` of 1-D arrays, every element found."""
    shape = W.shape
    zq = ndtri(q)
    pos = W > 0
    Ws = np.where(pos, W, 1.0)

    def f(x: FloatArray, W: FloatArray, sv: FloatArray, sg: FloatArray, a: FloatArray, b: FloatArray,
          c: FloatArray) -> FloatArray:  # falling in x: -(probit P(T <= R + e^x) - z_q)
        return zq - _probit(cdf(reserved + np.exp(x), reserved, W, sv, sg, (a, b, c)))

    centre = np.log(Ws * (sv + a))
    guess = centre + _spread_sigma(sg, b, sv + a, Ws) * zq
    lo, hi = centre - 50.0, centre + 50.0
    args = (Ws, sv, sg, a, b, c)
    safe, over = _verified_root(f, guess, lo, hi, args)
    for _ in range(20):  # a bracket that missed (the root beyond an end) moves that end out and goes again
        miss = (over <= lo) | (safe >= hi)
        if not miss.any():
            break
        lo, hi = np.where(over <= lo, lo - math.log(1e3), lo), np.where(safe >= hi, hi + math.log(1e3), hi)
        i = np.flatnonzero(miss)
        safe[i], over[i] = _verified_root(f, guess[i], lo[i], hi[i], tuple(v[i] for v in args))
    out: FloatArray = np.where(pos, reserved + np.exp(over), float(reserved)).reshape(shape)
    return out


# ---------------------------------------------------------------------------------------------
# the measured error of the moment matching


def lattice_cdf(events: Events, work: float, h: float, n: int, up: bool = True) -> FloatArray:
    """The exact law of the event sum S (no step error) on a lattice of step h, by FFT of the compound
    Poisson: pmf = IFFT(exp(W sum_s rate_s (phi_s - 1))), each event cost rounded up (``up``) or down to
    the lattice. Rounding up gives a CDF below the true one at every x = j h, rounding down one above it,
    and both converge as h -> 0. Returns the CDF at x = 0, h, ... (n - 1) h; n h must exceed the support
    of S with its tail (no wrap-around)."""
    costs = np.zeros(n)
    j = np.arange(n)
    for lam, a, b in zip(events.rate, events.fixed, events.width, strict=True):
        if lam <= 0:
            continue
        if b > 0:
            # up: (j - 1) h < a + b U <= j h;  down: j h <= a + b U < (j + 1) h
            lo_edge, hi_edge = ((j - 1) * h, j * h) if up else (j * h, (j + 1) * h)
            costs += lam * (np.clip((hi_edge - a) / b, 0.0, 1.0) - np.clip((lo_edge - a) / b, 0.0, 1.0))
        else:
            costs[min(int(math.ceil(a / h - 1e-12) if up else math.floor(a / h + 1e-12)), n - 1)] += lam
    total = float(costs.sum())
    f = np.fft.rfft(costs / total if total > 0 else costs)
    pmf = np.fft.irfft(np.exp(work * total * (f - 1.0)), n)
    out: FloatArray = np.minimum(np.cumsum(np.maximum(pmf, 0.0)), 1.0)
    return out


def matching_error(events: Events, work: float, points: int = 1 << 20) -> tuple[float, float]:
    """(largest CDF error of the translated gamma against the exact law of a compound Poisson event sum
    over useful time ``work`` (the sources' rates and uniform costs, without the renewal terms, which
    the lattice does not model), the lattice's own resolution). The exact CDF lies between the two lattice bounds of
    :func:`lattice_cdf`; the error counted is the gamma CDF's distance outside that bracket, the
    resolution the bracket's largest width (the error is exact to within it)."""
    moments = uniform_moments(events.fixed, events.width)
    k = np.array([float(np.sum(events.rate * mk)) for mk in moments]) * work  # the compound Poisson's
    if k[1] <= 0:
        return 0.0, 0.0
    span = k[0] + 40.0 * math.sqrt(k[1]) + float(np.max(events.fixed + events.width))
    h = span / points
    low, high = lattice_cdf(events, work, h, points, True), lattice_cdf(events, work, h, points, False)
    approx = gamma_cdf(h * np.arange(points), k[0], k[1], k[2])
    err = float(np.max(np.maximum(approx - high, low - approx).clip(min=0.0)))
    return err, float(np.max(high - low))


def normal_quantile(q: float) -> float:
    """z with Phi(z) = q: ``scipy.stats.norm.ppf``'s bits (it calls ``scipy.special.ndtri``), by the port in
    :mod:`tpopt.models.cephes` without importing SciPy."""
    return ndtri(q)


__all__ = [
    "Risk", "Source", "SOURCES", "SOURCE_NAMES", "STEP_ERROR", "CAPACITY", "Exposure", "Events", "Distribution",
    "DEFAULT_STEP_SIGMA", "DEFAULT_STEP_SIGMA_SOURCE", "ANCHOR_SPEEDS", "VALIDATION_LOO_ERRORS",
    "VALIDATION_LOSO_ERRORS",
    "SLOW_FACTOR", "SLOW_DURATION_S", "SLOW_RATE_PER_CARD_S", "SIGMA_MIN_RUNS",
    "residual_sigma", "parse_confidence", "uniform_moments", "gamma_cdf", "cdf", "plan_distribution",
    "max_work", "quantiles", "brent_root", "brent_steps", "drive", "find_quantiles", "Steps", "event_cumulants",
    "events_over", "lattice_cdf", "matching_error",
    "normal_quantile",
]
