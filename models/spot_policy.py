"""Spot with a deadline-aware fallback: "spot until day d, then on-demand" as pure relations.

A run needs ``mu0`` seconds on on-demand cards (the mean finish of its on-demand plan, reserved time, saves
and failures included) with a spread ``s0`` (the sd of that plan's finish-time law). The policy runs it on
spot cards of the same layout until wall time ``d`` (or the end, if it comes first), then switches what is
left to on-demand. Spot differs in two random ways (:class:`SpotTerms`, each with its source or marked as
an assumption):

- **availability**: each day spot capacity is obtainable with probability ``a`` (independent days; a day
  without it makes no progress and bills nothing). Available time in ``t`` seconds: mean ``a t``, variance
  ``a (1 - a) t DAY`` (``t / DAY`` Bernoulli blocks of one day);
- **preemption**: while running, ``n`` cards are preempted at ``lam = n rho`` per second, ``rho`` itself
  uncertain (gamma, mean ``rho``, coefficient of variation ``cv``: a mixed Poisson count); each preemption
  loses ``X = r + d_r + U tau`` seconds (restore, reacquire, the redo since the last save, ``U`` uniform),
  ``E[X] = L``, ``E[X^2] = (r + d_r)^2 + (r + d_r) tau + tau^2 / 3``.

Progress on spot by wall time ``t`` (:func:`progress_mean`, :func:`progress_var`)::

    E[P(t)] = g t,            g = a (1 - lam L)                               (the spot yield)
    Var[P(t)] = v t + u t^2,  v = a (1 - a) DAY (1 - lam L)^2 + a lam E[X^2],  u = (cv a lam L)^2

The policy's finish (:func:`finish_mean`, :func:`finish_var`; a switch costs ``s = r + tau / 2``, a restore and
the redo since the last save; ``d = 0`` is all on-demand, no switch)::

    T(d) = d + s + (mu0 - P(d)):   E[T] = mu0 + s + (1 - g) d,   Var[T] = s0^2 + v d + u d^2

taken as normal (stated: the sum of many days' availability and many preemptions, and the on-demand law's
spread): ``P(on time) = Phi((D - E[T]) / sd[T])``. Mean and variance are exact for the process; the normal
shape is the approximation. Against a Monte Carlo of the process (tests/test_spot_policy.py) its largest CDF
error is 0.024 after 2 whole days of spot, 0.021 after 4, 0.016 after 8; near P = 0.9 it is optimistic by
under 0.01. All-spot (:func:`all_spot_mean`) finishes when
``P(t) = mu0``: ``E[T] = mu0 / g``, ``sd[T] = sqrt(s0^2 + v t + u t^2) / g`` at ``t = mu0 / g`` (delta method).

Expected bill per card-hour price (:func:`expected_cost`): spot bills the available time less the reacquire
waits, ``a d (1 - lam d_r)`` seconds per card; on-demand bills the rest of the run, ``mu0 + s - g d``::

    C(d) = n / 3600 x [p_od (mu0 + s) + d (p_spot a (1 - lam d_r) - p_od g)]      (d > 0; C(0) = n p_od mu0 / 3600)

linear in ``d``: every day on spot saves money iff ``p_spot < p* = p_od (1 - lam L) / (1 - lam d_r)``
(:func:`break_even_price`), and the policy beats all on-demand iff the days saved pay for the switch.

**Monotonicity relied on** (tests/test_spot_policy.py checks it): ``E[T]`` is non-decreasing in ``d``
(``g <= 1``) and ``Var[T]`` is increasing. So for a confidence ``q >= 0.5`` (``z_q >= 0``) the days
``d > 0`` meeting ``P(on time) >= q`` form an interval ``(0, d*]``: if ``d`` meets it, ``D - E[T(d)] >=
z_q sd >= 0``, and any smaller ``d`` has a larger margin and a smaller sd. With a cheaper spot the cost
falls with ``d``, so the cheapest policy is ``d*`` (:func:`latest_switch`, bisection to 1e-9 of the span).

Units: seconds, prices USD per card-hour, rates per card-hour in the inputs and per second inside.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tpopt.errors import InputError
from tpopt.models.finish import uniform_moments
from tpopt.models.units import DAY, HOUR

DEFAULT_AVAILABILITY = 0.9
DEFAULT_AVAILABILITY_SOURCE = ("assumption: illustrative (spot capacity of the type obtainable on 9 days in 10; "
                               "no provider publishes a per-day figure)")
DEFAULT_RATE_CV = 0.5
DEFAULT_RATE_CV_SOURCE = ("assumption: the rate's coefficient of variation 0.5 (the AWS EC2 Spot Instance "
                          "Advisor publishes interruption frequency only in buckets of 5 points per month)")


@dataclass(frozen=True)
class SpotTerms:
    """A spot offer's random terms: preemptions per card-hour (mean) and the rate's coefficient of
    variation, the probability that spot capacity is obtainable on a day, the delay to reacquire cards."""

    preempt_per_card_hour: float
    reacquire_s: float
    availability: float = DEFAULT_AVAILABILITY
    rate_cv: float = DEFAULT_RATE_CV
    preempt_source: str = ""
    availability_source: str = DEFAULT_AVAILABILITY_SOURCE
    rate_cv_source: str = DEFAULT_RATE_CV_SOURCE

    def __post_init__(self) -> None:
        if not 0.0 < self.availability <= 1.0:
            raise InputError(f"spot availability must lie in (0, 1], got {self.availability!r}")
        for name in ("preempt_per_card_hour", "reacquire_s", "rate_cv"):
            v = getattr(self, name)
            if not math.isfinite(v) or v < 0:
                raise InputError(f"spot {name} must be a finite number >= 0, got {v!r}")


@dataclass(frozen=True)
class Run:
    """The run the policy splits: its cards, the mean and sd of its on-demand finish (s), its save interval
    and restore time (s)."""

    cards: int
    ondemand_mean_s: float
    ondemand_sd_s: float
    save_interval_s: float
    restore_s: float


def preemptions_per_s(terms: SpotTerms, run: Run) -> float:
    """``lam = n rho / 3600``: preemptions per second of the run's cards on spot."""
    return run.cards * terms.preempt_per_card_hour / HOUR


def loss_moments(terms: SpotTerms, run: Run) -> tuple[float, float]:
    """``(E[X], E[X^2])`` of the seconds one preemption loses, ``X = r + d_r + U tau``."""
    m1, m2, _ = uniform_moments(run.restore_s + terms.reacquire_s, run.save_interval_s)
    return float(m1), float(m2)


def running_yield(terms: SpotTerms, run: Run) -> float:
    """``1 - lam L``: useful seconds per second of held spot capacity (0 when preemptions eat it all)."""
    return max(0.0, 1.0 - preemptions_per_s(terms, run) * loss_moments(terms, run)[0])


def spot_yield(terms: SpotTerms, run: Run) -> float:
    """``g = a (1 - lam L)``: useful seconds per wall second on the spot market."""
    return terms.availability * running_yield(terms, run)


def progress_coefficients(terms: SpotTerms, run: Run) -> tuple[float, float]:
    """``(v, u)`` of ``Var[P(t)] = v t + u t^2`` (module docstring)."""
    a, lam = terms.availability, preemptions_per_s(terms, run)
    mean_x, sq_x = loss_moments(terms, run)
    v = a * (1 - a) * DAY * running_yield(terms, run) ** 2 + a * lam * sq_x
    u = (terms.rate_cv * a * lam * mean_x) ** 2
    return v, u


def progress_mean(terms: SpotTerms, run: Run, t: float) -> float:
    """``E[P(t)] = g t``: useful seconds done on spot by wall time ``t``."""
    return spot_yield(terms, run) * t


def progress_var(terms: SpotTerms, run: Run, t: float) -> float:
    """``Var[P(t)] = v t + u t^2``."""
    v, u = progress_coefficients(terms, run)
    return v * t + u * t * t


def switch_s(run: Run) -> float:
    """``s = r + tau / 2``: a switch to on-demand restores the last save and redoes the work since it."""
    return run.restore_s + run.save_interval_s / 2


def full_spot_s(terms: SpotTerms, run: Run) -> float:
    """``mu0 / g``: the wall time by which spot alone is expected to finish the run (inf when ``g = 0``)."""
    g = spot_yield(terms, run)
    return run.ondemand_mean_s / g if g > 0 else math.inf


def finish_mean(terms: SpotTerms, run: Run, d: float) -> float:
    """``E[T(d)] = mu0 + s + (1 - g) d`` (``d = 0``: ``mu0``, no switch)."""
    if d <= 0:
        return run.ondemand_mean_s
    return run.ondemand_mean_s + switch_s(run) + (1 - spot_yield(terms, run)) * d


def finish_var(terms: SpotTerms, run: Run, d: float) -> float:
    """``Var[T(d)] = s0^2 + Var[P(d)]``."""
    return run.ondemand_sd_s**2 + (progress_var(terms, run, d) if d > 0 else 0.0)


def normal_cdf(z: float) -> float:
    """``Phi(z) = (1 + erf(z / sqrt 2)) / 2``."""
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))


def _p_normal(deadline_s: float, mean: float, var: float) -> float:
    if var <= 0:
        return 1.0 if mean <= deadline_s else 0.0
    return normal_cdf((deadline_s - mean) / math.sqrt(var))


def p_on_time(terms: SpotTerms, run: Run, d: float, deadline_s: float) -> float:
    """``Phi((D - E[T(d)]) / sd[T(d)])``: P(the policy "spot until d" finishes by the deadline)."""
    return _p_normal(deadline_s, finish_mean(terms, run, d), finish_var(terms, run, d))


def all_spot_mean(terms: SpotTerms, run: Run) -> float:
    """``E[T] = mu0 / g`` of a run left on spot to its end."""
    return full_spot_s(terms, run)


def all_spot_var(terms: SpotTerms, run: Run) -> float:
    """``(s0^2 + v t + u t^2) / g^2`` at ``t = mu0 / g`` (delta method; inf when ``g = 0``)."""
    g, t = spot_yield(terms, run), full_spot_s(terms, run)
    if not math.isfinite(t):
        return math.inf
    return (run.ondemand_sd_s**2 + progress_var(terms, run, t)) / g**2


def all_spot_p_on_time(terms: SpotTerms, run: Run, deadline_s: float) -> float:
    """P(a run left on spot to its end finishes by the deadline)."""
    mean = all_spot_mean(terms, run)
    return 0.0 if not math.isfinite(mean) else _p_normal(deadline_s, mean, all_spot_var(terms, run))


def spot_billed_s(terms: SpotTerms, run: Run, d: float) -> float:
    """``a d (1 - lam d_r)``: expected seconds per card billed on spot by wall time ``d``."""
    return terms.availability * d * max(0.0, 1.0 - preemptions_per_s(terms, run) * terms.reacquire_s)


def ondemand_billed_s(terms: SpotTerms, run: Run, d: float) -> float:
    """``mu0 + s - g d``: expected seconds per card billed on-demand after a switch at ``d`` (``d = 0``: ``mu0``)."""
    if d <= 0:
        return run.ondemand_mean_s
    return max(0.0, run.ondemand_mean_s + switch_s(run) - progress_mean(terms, run, d))


def expected_cost(terms: SpotTerms, run: Run, d: float, spot_price: float, ondemand_price: float) -> float:
    """``C(d) = n / 3600 x (p_spot x spot seconds + p_od x on-demand seconds)``, USD."""
    return run.cards / HOUR * (spot_price * spot_billed_s(terms, run, d)
                               + ondemand_price * ondemand_billed_s(terms, run, d))


def all_spot_cost(terms: SpotTerms, run: Run, spot_price: float) -> float:
    """``n / 3600 x p_spot x a (1 - lam d_r) mu0 / g``, USD: the whole run billed on spot."""
    return run.cards / HOUR * spot_price * spot_billed_s(terms, run, full_spot_s(terms, run))


def break_even_price(terms: SpotTerms, run: Run, ondemand_price: float) -> float:
    """``p* = p_od (1 - lam L) / (1 - lam d_r)``: the spot price below which a day on spot saves money
    (0 when preemptions eat the spot time)."""
    billed = 1.0 - preemptions_per_s(terms, run) * terms.reacquire_s
    return ondemand_price * running_yield(terms, run) / billed if billed > 0 else 0.0


def latest_switch(terms: SpotTerms, run: Run, deadline_s: float, confidence: float, tol: float = 1e-9) -> float:
    """``d*``: the latest switch day (s) in ``(0, mu0 / g)`` with ``P(on time) >= q`` (bisection on the
    monotone test of the module docstring, to ``tol`` of the span); 0 when no ``d > 0`` meets it. Needs
    ``q >= 0.5``."""
    if not 0.5 <= confidence < 1.0:
        raise InputError(f"the spot policy needs a confidence in [0.5, 1), got {confidence!r}")
    hi = full_spot_s(terms, run)
    if not math.isfinite(hi):
        hi = deadline_s
    hi = min(hi, deadline_s)

    def ok(d: float) -> bool:
        return p_on_time(terms, run, d, deadline_s) >= confidence

    lo = 0.0
    if hi <= 0 or not ok(hi * tol):
        return 0.0
    if ok(hi):
        return hi
    lo = hi * tol
    while hi - lo > tol * max(hi, 1.0):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


__all__ = ["SpotTerms", "Run", "DEFAULT_AVAILABILITY", "DEFAULT_AVAILABILITY_SOURCE", "DEFAULT_RATE_CV",
           "DEFAULT_RATE_CV_SOURCE", "preemptions_per_s", "loss_moments", "running_yield", "spot_yield",
           "progress_coefficients", "progress_mean", "progress_var", "switch_s", "full_spot_s", "finish_mean",
           "finish_var", "normal_cdf", "p_on_time", "all_spot_mean", "all_spot_var", "all_spot_p_on_time",
           "spot_billed_s", "ondemand_billed_s", "expected_cost", "all_spot_cost", "break_even_price",
           "latest_switch"]
