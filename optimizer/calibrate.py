"""Calibration: fit several of an accelerator's performance parameters at once to measured step times.

A :class:`MeasuredRun` is a scenario, the plan that ran (or candidate plans, when a publication does
not say which micro-batch or schedule it used: the fastest one that fits memory is predicted, as
tpopt itself would choose) and the measured step time. :func:`fit` finds the posterior mode of a
lognormal model: with x = ln(theta) the log of the free parameters of
:class:`tpopt.models.roofline.PerfParams`,

    minimise  sum over runs  (ln(t_pred(x) / t_meas) / sigma_n)^2  +  sum over parameters  ((x - x0) / sigma_p)^2

with ``scipy.optimize.least_squares`` inside the physical bounds, where x0 is the catalog's value (the
prior), sigma_p the prior's lognormal width per parameter (:data:`PARAMS`: 0.25 for an efficiency, a
factor of about 1.28 either way) and sigma_n = :data:`NOISE_SIGMA` the assumed scatter of one measured
step time about the model. The prior term is the regularisation: a parameter the runs cannot tell
apart from another stays where its catalog value put it.

Uncertainty: the Laplace approximation at the optimum, covariance = (J^T J / s^2 + diag(1 / sigma_p^2))^-1
with J = d ln t_pred / dx (finite differences, one vectorised evaluation) and s = max(sigma_n, the
residual spread). A parameter is *identified* by the runs when its posterior sigma is under half its
prior sigma (the runs, not the prior, fixed it); a parameter no run is sensitive to is not fitted.

Residual spread: residual_sigma = sqrt(sum ln(t_meas / t_pred)^2 / (n - p)) over the n runs with p
identified parameters (the lognormal sigma of measured / predicted); with n <= p it cannot be estimated
and sigma_n is written, marked as assumed. The Confidence model reads it (``residual_sigma``).

A fit that reaches a physical ceiling (an efficiency of 1.0: the measured step is faster than the card
can run the plan) is an error naming the parameter; one that reaches a lower bound is reported.

Fitting is not a pure relation, so it lives here and calls :mod:`tpopt.models` (never the other way).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.optimize import least_squares

from tpopt.catalogs.uncertainty import covers_lines
from tpopt.errors import InputError
from tpopt.files import refuse_symlink, write_atomic, write_error
from tpopt.models import families as F
from tpopt.models import terms as T
from tpopt.models.evaluate import evaluate_arrays, resolve_plan, with_plan_options
from tpopt.models.evidence import Envelope, recipe_class
from tpopt.models.plan import Plan, Scenario
from tpopt.models.roofline import PerfParams
from tpopt.models.units import fmt_duration_exact
from tpopt.models.variables import evaluate_keywords

CHOICE_CONSTRAINTS = F.CHOICE_FAMILIES
"""Constraints a candidate plan must meet to be chosen (what the run could physically do)."""
MEMORY_CONSTRAINTS = F.TRAINER_MEMORY
"""Constraints a plan that ran must meet: it fitted in memory, or the model of the run is wrong."""
NOISE_SIGMA = 0.03
"""Assumed lognormal scatter of a measured step time about the model (run-to-run variation and what the
model leaves out): the data term's unit, and the floor of the uncertainty's residual scale."""
IDENTIFIED_RATIO = 0.5
"""A parameter is identified when its posterior sigma is below this share of its prior sigma."""
SENSITIVITY_FLOOR = 1e-4
"""d ln t / d ln theta below this on every run: the runs do not exercise the parameter (not fitted)."""


@dataclass(frozen=True)
class Param:
    """A fittable performance parameter: its name in PerfParams, words, prior width, print unit."""

    name: str
    what: str
    prior_sigma: float  # lognormal sigma of the prior around the catalog value
    unit: str = ""
    scale: float = 1.0  # multiply SI values by this to print in ``unit``
    bounds: tuple[float, float] | None = None  # physical range (default: PerfParams.BOUNDS)

    def show(self, value: float) -> str:
        return f"{value * self.scale:.4g}{self.unit}"

    @property
    def range(self) -> tuple[float, float]:
        return self.bounds or PerfParams.BOUNDS[self.name]


PARAMS: tuple[Param, ...] = (
    Param("gemm_efficiency", "GEMM: large-GEMM fraction of the matrix peak", 0.25),
    Param("attention_efficiency", "attention: fused-attention fraction of the matrix peak", 0.35),
    Param("memory_efficiency", "memory-bound kernels: fraction of the HBM bandwidth", 0.25),
    Param("tp_efficiency", "scale-up fabric tier: collective fraction of the link bandwidth", 0.25),
    Param("dp_efficiency", "scale-out fabric tier: collective fraction of the ring bandwidth", 0.25),
    Param("kernel_overhead", "fixed time per kernel (launch, ramp-up, tail)", 0.7, "us", 1e6),
)
"""Parameters :func:`fit` frees by default (every one the runs exercise), with their prior widths."""
KERNEL_PARAMS: tuple[Param, ...] = (
    Param("gemm_k_half", "GEMM k at which it reaches half of its large-GEMM efficiency", 0.7, bounds=(1.0, 4096.0)),
    Param("collective_latency", "fixed time per collective call", 0.7, "us", 1e6, bounds=(1e-7, 1e-3)),
)
"""Further parameters kernel micro-benchmarks (``tpopt calibrate --measure``) identify."""
BY_NAME = {p.name: p for p in PARAMS + KERNEL_PARAMS}
FRACTIONS = tuple(n for n, p in BY_NAME.items() if p.range[1] == 1.0)
"""Parameters whose upper bound is physical (a fraction of a datasheet figure cannot exceed 1)."""


@dataclass
class MeasuredRun:
    """One measured step: a scenario, the plan(s) it may have run, and the measured step time [s]."""

    name: str
    scenario: Scenario
    plans: tuple[Plan, ...]  # one Plan, or candidates (the fastest that fits memory is the prediction)
    measured_step_s: float
    table: str = ""
    extra: dict[str, Any] = field(default_factory=dict)  # published figures to compare (memory, ...)

    @property
    def accelerator(self) -> str:
        return self.plans[0].accelerator


@dataclass
class Prediction:
    step_s: NDArray[np.float64]  # (K,) predicted step for each parameter set
    choice: NDArray[np.int_]  # (K,) index of the chosen candidate plan (-1: none fits)


def with_perf(sc: Scenario, accelerator: str, perf: PerfParams) -> Scenario:
    """The scenario with one accelerator's performance parameters replaced."""
    sysm = sc.system(accelerator)
    if sysm.perf is None:
        raise InputError("calibration needs the per-operation model: remove hardware.efficiency from the scenario")
    return replace(sc, systems={**sc.systems, accelerator: replace(sysm, perf=perf)})


def perf_sets(base: PerfParams, names: Sequence[str], values: ArrayLike) -> PerfParams:
    """One PerfParams whose ``names`` fields are arrays (K parameter sets evaluated at once)."""
    table = np.asarray(values, dtype=float)
    return base.with_values(**{n: table[:, i] for i, n in enumerate(names)})


def _evaluate(run: MeasuredRun, plan: Plan, perf: PerfParams) -> dict[Any, Any]:
    p = resolve_plan(run.scenario, plan)
    sc = with_plan_options(with_perf(run.scenario, p.accelerator, perf), p)
    return evaluate_arrays(sc, p.accelerator, **evaluate_keywords(p))


def memory_overshoot(result: dict[Any, Any]) -> NDArray[np.float64]:
    """Predicted peak over the limit of a plan's memory families, the largest (<= 1: the plan fits)."""
    out: NDArray[np.float64] = np.zeros(())
    for name in MEMORY_CONSTRAINTS:
        v, lim = (np.asarray(x, dtype=float) for x in result[("c", name)])
        with np.errstate(divide="ignore", invalid="ignore"):
            out = np.maximum(out, np.where(lim > 0, v / lim, np.where(v > 0, np.inf, 0.0)))
    return out


def predict(run: MeasuredRun, perf: PerfParams) -> Prediction:
    """Predicted step time of a run for (possibly array-valued) performance parameters.

    One plan: its step. Candidates: the fastest that meets the choice constraints and fits memory, as
    tpopt would choose. A constraint no candidate meets (the layout of a run that ran: a job on part of
    an NVL72 rack does not fill whole hosts) is the run's own and decides nothing. When no candidate fits
    memory in tpopt's model the run still ran: the candidate nearest to fitting (the smallest peak over
    the limit) is the prediction and its overshoot a memory residual (:func:`memory_residual`), not a
    refusal."""
    results = [_evaluate(run, plan, perf) for plan in run.plans]
    steps = [np.atleast_1d(np.asarray(r["step_s"], dtype=float)) for r in results]
    shape = np.broadcast_shapes(*(x.shape for x in steps))
    if len(run.plans) == 1:
        return Prediction(np.broadcast_to(steps[0], shape).copy(), np.zeros(shape, dtype=int))
    ok = [np.ones(shape, dtype=bool) for _ in results]
    for name in CHOICE_CONSTRAINTS:
        if name in MEMORY_CONSTRAINTS:
            continue
        met = [np.broadcast_to(np.asarray(r[("c", name)][0]) <= np.asarray(r[("c", name)][1]), shape)
               for r in results]
        anyone = np.logical_or.reduce(met)
        for i, m in enumerate(met):
            ok[i] &= m | ~anyone
    over = [np.broadcast_to(memory_overshoot(r), shape) for r in results]
    best = np.full(shape, np.inf)
    choice = np.full(shape, -1, dtype=int)
    for i, step in enumerate(steps):
        cand = np.where(ok[i] & (over[i] <= 1 + 1e-9), np.broadcast_to(step, shape), np.inf)
        better = cand < best
        best = np.where(better, cand, best)
        choice = np.where(better, i, choice)
    if np.any(choice < 0):  # nothing fits memory: the candidate nearest to fitting (a memory residual)
        nearest = np.argmin(np.stack([np.where(ok[i], over[i], np.inf) for i in range(len(results))]), axis=0)
        least = np.choose(nearest, [np.broadcast_to(x, shape) for x in steps])
        best = np.where(choice < 0, least, best)
        choice = np.where(choice < 0, nearest, choice)
    return Prediction(np.atleast_1d(best), np.atleast_1d(choice))


MEMORY_IMPLAUSIBLE = 1.5
"""A plan whose predicted peak exceeds its usable memory by more than this factor cannot have run as a table
states it (the memory model is within 10-20 % of published peaks: a wrong layout, recompute or precision cell,
not model error): :func:`check_memory` refuses it. Below it a run that ran is fitted and its memory is a
residual (:func:`memory_residual`)."""


@dataclass(frozen=True)
class MemoryResidual:
    """A run's predicted per-card peak against the card's usable memory (the plan the prediction uses)."""

    run: str
    family: str
    predicted: float  # bytes
    limit: float  # bytes

    @property
    def ratio(self) -> float:
        return self.predicted / self.limit if self.limit > 0 else float("inf")

    @property
    def fits(self) -> bool:
        return self.ratio <= 1 + 1e-9


def memory_residual(run: MeasuredRun, perf: PerfParams) -> MemoryResidual:
    """The memory residual of a run: the predicted peak of its chosen plan (:func:`chosen_plan`) against the
    usable memory, on the family nearest to (or furthest over) its limit."""
    plan = chosen_plan(run, perf) or run.plans[0]
    r = _evaluate(run, plan, perf)
    worst = MemoryResidual(run.name, "", 0.0, 1.0)
    for name in MEMORY_CONSTRAINTS:
        v, lim = (float(np.max(x)) for x in r[("c", name)])
        cand = MemoryResidual(run.name, name, v, lim)
        if not worst.family or cand.ratio > worst.ratio:
            worst = cand
    return worst


def check_memory(run: MeasuredRun, perf: PerfParams) -> MemoryResidual:
    """The run's memory residual (:func:`memory_residual`); a run that ran is fitted whether or not its plan
    fits tpopt's memory model, and refused only where its peak is beyond the model's error
    (:data:`MEMORY_IMPLAUSIBLE` x the usable memory: the table's layout, recompute or precision is wrong)."""
    res = memory_residual(run, perf)
    if res.ratio > MEMORY_IMPLAUSIBLE:
        fam = F.family(res.family)
        raise InputError(f"run {run.name!r}: its plan does not fit in memory ({fam.doc}: "
                         f"{res.predicted / fam.scale:.1f} {fam.unit} against {res.limit / fam.scale:.1f} {fam.unit}), "
                         f"more than {MEMORY_IMPLAUSIBLE:g}x beyond the memory model's error; check the run's layout, "
                         "recompute and precision columns")
    return res


def residuals(runs: Sequence[MeasuredRun], perf: PerfParams) -> NDArray[np.float64]:
    """ln(t_pred / t_meas) per run (rows) and parameter set (columns)."""
    return np.stack([np.log(predict(r, perf).step_s / r.measured_step_s) for r in runs])


@dataclass(frozen=True)
class Estimate:
    """One parameter of a calibration: prior, estimate and its uncertainty (lognormal sigma)."""

    name: str
    prior: float
    value: float
    sigma: float  # posterior lognormal sigma (relative uncertainty); nan when not fitted
    exercised: bool  # some run is sensitive to it (else it was not fitted and keeps its prior)
    identified: bool  # the runs, not the prior, fixed it (sigma < IDENTIFIED_RATIO x prior sigma)
    at_bound: str = ""  # "lower" or "upper" when the fit stopped at a physical bound

    @property
    def status(self) -> str:
        if not self.exercised:
            return "not identified by these runs (no run is sensitive to it; prior kept)"
        if not self.identified:
            return "not identified by these runs (the prior dominates)"
        return "calibrated"

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "prior": self.prior, "value": self.value,
                "sigma": self.sigma if np.isfinite(self.sigma) else None,
                "plus_minus": self.value * self.sigma if np.isfinite(self.sigma) else None,
                "exercised": self.exercised, "identified": self.identified, "status": self.status,
                "at_bound": self.at_bound or None}


@dataclass
class Calibration:
    accelerator: str
    perf: PerfParams  # the fitted parameters (scalars)
    fitted: tuple[str, ...]  # names of the fitted fields (the ones the runs exercise)
    prior: PerfParams
    runs: list[MeasuredRun | Observation]  # measured steps (a table, --runs) or timed kernels (--measure)
    predicted_s: list[float]  # per run
    objective: float  # the minimised sum of squares (data and prior terms)
    estimates: list[Estimate] = field(default_factory=list)
    residual_sigma: float = NOISE_SIGMA
    residual_sigma_source: str = ""
    dof: int = 0  # runs - identified parameters
    memory: list[MemoryResidual] = field(default_factory=list)  # per run: predicted peak against usable memory

    def errors(self) -> list[float]:
        """Relative error per run, predicted / measured - 1."""
        return [p / r.measured_step_s - 1.0 for p, r in zip(self.predicted_s, self.runs, strict=False)]

    @property
    def identified(self) -> tuple[str, ...]:
        return tuple(e.name for e in self.estimates if e.identified)


def _bounds(name: str) -> tuple[float, float]:
    lo, hi = BY_NAME[name].range
    return float(np.log(max(lo, 1e-9))), float(np.log(hi))


def _free_names(free: Sequence[str] | None, default: Sequence[Param] = PARAMS) -> tuple[str, ...]:
    names = tuple(free) if free else tuple(p.name for p in default)
    for n in names:
        if n not in BY_NAME:
            raise InputError(f"cannot fit {n!r} (fittable: {', '.join(BY_NAME)})")
    return tuple(dict.fromkeys(names))


@dataclass
class Observation:
    """One measured time and the model's prediction of it for (array-valued) performance parameters."""

    name: str
    measured_step_s: float  # the measured time [s] (a training step, or one timed kernel)
    predict: Callable[[PerfParams], NDArray[np.float64]]  # (K,) predicted seconds
    kind: str = ""  # what was timed (step, gemm, copy, block, all-reduce)


def _observation(run: MeasuredRun) -> Observation:
    return Observation(run.name, run.measured_step_s, lambda perf: predict(run, perf).step_s, "step")


class _Problem:
    """The weighted residual vector of the fit and its Jacobian, both vectorised over parameter sets."""

    def __init__(self, obs: Sequence[Observation], base: PerfParams, names: tuple[str, ...],
                 x0: NDArray[np.float64], hi: NDArray[np.float64]):
        self.obs, self.base, self.names, self.x0, self.hi = obs, base, names, x0, hi
        self.sigma_p = np.array([BY_NAME[n].prior_sigma for n in names])
        self.measured = np.array([o.measured_step_s for o in obs])

    def log_ratio(self, xs: NDArray[np.float64]) -> NDArray[np.float64]:
        """(K, observations) ln(t_pred / t_meas) at K log-parameter vectors (infinite: a large finite value)."""
        perf = perf_sets(self.base, self.names, np.exp(xs))
        pred = np.stack([np.broadcast_to(np.asarray(o.predict(perf), dtype=float), (len(xs),)) for o in self.obs])
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.log(pred / self.measured[:, None]).T
        return np.where(np.isfinite(r), r, 50.0)

    def fun(self, x: NDArray[np.float64]) -> NDArray[np.float64]:
        return np.concatenate([self.log_ratio(x[None])[0] / NOISE_SIGMA, (x - self.x0) / self.sigma_p])

    def data_jacobian(self, x: NDArray[np.float64], h: float = 1e-5) -> NDArray[np.float64]:
        """d ln t_pred / dx, (runs, params): forward differences (backward at an upper bound), one evaluation."""
        steps = np.where(x + h > self.hi, -h, h)
        xs = np.vstack([x[None], x[None] + np.diag(steps)])
        r = self.log_ratio(xs)
        jac: NDArray[np.float64] = ((r[1:] - r[0]) / steps[:, None]).T
        return jac

    def jac(self, x: NDArray[np.float64]) -> NDArray[np.float64]:
        return np.vstack([self.data_jacobian(x) / NOISE_SIGMA, np.diag(1.0 / self.sigma_p)])


def fit(runs: list[MeasuredRun], accelerator: str, free: Sequence[str] | None = None, *,
        prior: PerfParams | None = None, rounds: int = 3, memory_check: bool = True) -> Calibration:
    """Fit ``free`` parameters (default: every one of :data:`PARAMS` the runs exercise) of ``accelerator``
    to the runs (module docstring).

    Runs with candidate plans are first pinned to the candidate the current parameters choose; after a
    fit the choice is made again with the fitted parameters and the fit repeated if it changed. Memory is a
    residual, not a gate: a run is refused only where its plan's peak is beyond the memory model's error
    (:func:`check_memory`, ``memory_check``)."""
    runs = [r for r in runs if r.accelerator == accelerator]
    if not runs:
        raise InputError(f"no measured run on {accelerator!r} to calibrate")
    for r in runs:
        if not (np.isfinite(r.measured_step_s) and r.measured_step_s > 0):
            raise InputError(f"run {r.name!r}: the measured step must be a positive time")
    base = prior or runs[0].scenario.system(accelerator).perf
    if base is None:
        raise InputError("calibration needs the per-operation model: remove hardware.efficiency from the scenario")
    names = _free_names(free)
    memory = [check_memory(r, base) for r in runs] if memory_check else []
    pinned = _pin(runs, base)
    current, x, exercised, cost = base, np.zeros(0), names, 0.0
    for _ in range(max(1, rounds)):
        obs = [_observation(r) for r in pinned]
        current, x, exercised, cost = _solve(obs, base, names)
        repinned = _pin(runs, current)
        if all(a.plans == b.plans for a, b in zip(repinned, pinned, strict=True)):
            break
        pinned = repinned
    cal = _summarise(accelerator, runs, [_observation(r) for r in pinned], base, current, names, exercised, x, cost)
    cal.memory = memory
    return cal


def fit_observations(obs: Sequence[Observation], accelerator: str, base: PerfParams,
                     free: Sequence[str] | None = None) -> Calibration:
    """Fit ``free`` parameters (default: every one of :data:`BY_NAME` the observations exercise) to
    timed observations of any kind (the posterior of the module docstring)."""
    for o in obs:
        if not (np.isfinite(o.measured_step_s) and o.measured_step_s > 0):
            raise InputError(f"{o.name}: the measured time must be a positive time")
    names = _free_names(free, tuple(BY_NAME.values()))
    current, x, exercised, cost = _solve(obs, base, names)
    return _summarise(accelerator, list(obs), obs, base, current, names, exercised, x, cost)


def _solve(obs: Sequence[Observation], base: PerfParams,
           names: tuple[str, ...]) -> tuple[PerfParams, NDArray[np.float64], tuple[str, ...], float]:
    """The posterior mode over the parameters the observations exercise: (parameters, x, exercised, cost)."""
    x_all = np.log(np.array([max(float(getattr(base, n)), 1e-9) for n in names]))
    bounds = np.array([_bounds(n) for n in names])
    x_all = np.clip(x_all, bounds[:, 0], bounds[:, 1])
    sens = np.max(np.abs(_Problem(obs, base, names, x_all, bounds[:, 1]).data_jacobian(x_all)), axis=0)
    exercised = tuple(n for n, v in zip(names, sens, strict=True) if v > SENSITIVITY_FLOOR)
    if not exercised:
        raise InputError("the runs exercise none of the parameters asked for ("
                         + ", ".join(names) + "): no step time changes with them")
    idx = [names.index(n) for n in exercised]
    x0, lo, hi = x_all[idx], bounds[idx, 0], bounds[idx, 1]
    prob = _Problem(obs, base, exercised, x0, hi)
    sol = least_squares(prob.fun, x0, jac=prob.jac, bounds=(lo, hi), method="trf", x_scale=prob.sigma_p,
                        xtol=1e-10, ftol=1e-12, gtol=1e-10, max_nfev=200)
    x = np.asarray(sol.x, dtype=float)
    return (base.with_values(**dict(zip(exercised, map(float, np.exp(x)), strict=True))), x, exercised,
            float(2.0 * sol.cost))


def _pin(runs: list[MeasuredRun], perf: PerfParams) -> list[MeasuredRun]:
    out = []
    for r in runs:
        plan = chosen_plan(r, perf) if len(r.plans) > 1 else r.plans[0]
        if plan is None:
            raise InputError(f"run {r.name!r}: no candidate plan meets the layout constraints")
        out.append(replace(r, plans=(plan,)))
    return out


def _summarise(accelerator: str, runs: Sequence[MeasuredRun | Observation], obs: Sequence[Observation],
               base: PerfParams, perf: PerfParams, names: tuple[str, ...], exercised: tuple[str, ...],
               x: NDArray[np.float64], cost: float) -> Calibration:
    """Uncertainties (Laplace approximation), identification, bounds reached and the residual spread."""
    bounds = np.array([_bounds(n) for n in exercised])
    lo, hi = bounds[:, 0], bounds[:, 1]
    prob = _Problem(obs, base, exercised, x, hi)
    r = prob.log_ratio(x[None])[0]
    jd = prob.data_jacobian(x)
    n = len(obs)
    spread = float(np.sqrt(np.mean(r ** 2)))
    scale = max(NOISE_SIGMA, spread)
    cov = np.linalg.inv(jd.T @ jd / scale ** 2 + np.diag(1.0 / prob.sigma_p ** 2))
    sig = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    ident = sig < IDENTIFIED_RATIO * prob.sigma_p
    estimates = []
    for name in names:
        prior_v = float(getattr(base, name))
        if name not in exercised:
            estimates.append(Estimate(name, prior_v, prior_v, float("nan"), False, False))
            continue
        i = exercised.index(name)
        edge = "upper" if x[i] >= hi[i] - 1e-6 else "lower" if x[i] <= lo[i] + 1e-6 else ""
        estimates.append(Estimate(name, prior_v, float(np.exp(x[i])), float(sig[i]), True, bool(ident[i]), edge))
    for e in estimates:
        if e.at_bound == "upper" and e.name in FRACTIONS:
            raise InputError(f"the fit reaches {e.name} = {e.value:.3g}, its physical ceiling: the measured "
                             f"time(s) are faster than {accelerator} can run them "
                             f"({', '.join(f'{q.name} {q.measured_step_s:.4g} s' for q in obs[:3])}); "
                             "check the measured times and the plan columns")
    p = int(np.sum(ident))
    dof = n - p
    names_runs = ", ".join(q.name for q in obs) if n <= 12 else f"{n} observations"
    if dof >= 1:
        sigma = float(np.sqrt(np.sum(r ** 2) / dof))
        source = (f"tpopt calibrate: lognormal sigma of measured/predicted time over {n} measurement(s) "
                  f"({dof} degree(s) of freedom after {p} identified parameter(s)): {names_runs}")
    else:
        sigma = NOISE_SIGMA
        source = (f"assumed: {n} measurement(s) for {p} identified parameter(s) leave no degree of freedom to "
                  f"estimate the spread; tpopt calibrate's assumed scatter of one measured time ({NOISE_SIGMA:g})")
    calibrated = tuple(e.name for e in estimates if e.exercised)
    fitted = perf.with_values(calibrated=tuple(dict.fromkeys(tuple(base.calibrated) + calibrated)),
                              residual_sigma=sigma, residual_sigma_source=source)
    pred = [float(np.asarray(o.predict(fitted)).reshape(-1)[0]) for o in obs]
    return Calibration(accelerator, fitted, calibrated, base, list(runs), pred, cost, estimates, sigma, source, dof)


def chosen_plan(run: MeasuredRun, perf: PerfParams) -> Plan | None:
    """The candidate plan the prediction uses (the fastest that fits memory), or None."""
    i = int(predict(run, perf).choice[0])
    return run.plans[i] if i >= 0 else None



# ---------------------------------------------------------------------------------------------
# the catalog override a calibration writes


def _toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return repr(float(v))
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    text = str(v).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'


def prior_value(name: str, value: float) -> float | str:
    """A fitted parameter's prior as ``[acc.calibration] prior`` lists it: a duration (``kernel_overhead``,
    ``collective_latency``: a Param printed in seconds' units) with its unit (:func:`fmt_duration_exact`), a
    fraction or a count as it is."""
    return fmt_duration_exact(value) if BY_NAME[name].unit == "us" else value


def source_of(cal: Calibration, e: Estimate, how: str = "tpopt calibrate", label: str = "calibrated") -> str:
    """The performance.toml source of a fitted parameter: ``label`` (calibrated: fitted to training runs;
    measured: fitted to kernels timed on a machine), how, on what, and its uncertainty."""
    on = ", ".join(r.name for r in cal.runs) if len(cal.runs) <= 12 else f"{len(cal.runs)} timed kernels"
    if not e.identified:
        return f"{label} (prior-dominated: the data do not identify it, +-{e.sigma * 100:.0f} %): {how} on {on}"
    return f"{label}: {how} on {on} (+-{e.sigma * 100:.1f} %)"


def covered(cal: Calibration) -> Envelope | None:
    """What the calibration's measured steps covered (tpopt.models.evidence.Envelope from each run's
    :func:`tpopt.models.terms.plan_facts`: its stack, sequence length, recipe, routed experts per card and card
    count; a run with candidate plans at its largest), or None where it timed no training step (kernels timed by
    ``--measure``: :func:`kernels_covered`)."""
    runs = [r for r in cal.runs if isinstance(r, MeasuredRun)]
    if not runs:
        return None
    facts = [T.plan_facts(r.scenario, r.accelerator, float(max(p.cards for p in r.plans)),
                          float(max(p.ep or 1 for p in r.plans))) for r in runs]
    envs = [Envelope((f.stack,), (f.seq, f.seq), f.cards, (recipe_class(f.matrix),), f.experts_per_card)
            for f in facts]
    out = envs[0]
    for e in envs[1:]:
        out = out.union(e)
    return out


def override_text(cal: Calibration, how: str = "tpopt calibrate", label: str = "calibrated",
                  covers: Envelope | None = None) -> str:
    """performance.toml text holding the calibrated entry (readable by ``--catalog DIR``)."""
    p = cal.perf
    name = cal.accelerator
    lines = [
        f"# Written by {how}: {name} fitted to {len(cal.runs)} measured run(s).",
        "# Use it with --catalog DIR; fields here replace the built-in performance catalog's field by field.",
        "",
        f"[{name}]",
    ]
    for f in ("gemm_efficiency", "memory_efficiency", "attention_efficiency", "tp_efficiency", "dp_efficiency",
              "gemm_k_half", "sms"):
        lines.append(f"{f} = {_toml_value(getattr(p, f))}")
    lines.append(f"tile = [{p.tile_m}, {p.tile_n}]")
    lines.append(f'kernel_overhead = "{fmt_duration_exact(p.kernel_overhead)}"')
    lines.append(f'collective_latency = "{fmt_duration_exact(p.collective_latency)}"')
    lines.append(f"calibrated = {_toml_value(list(p.calibrated))}")
    lines.append(f"residual_sigma = {_toml_value(round(cal.residual_sigma, 6))}")
    lines.append(f"residual_sigma_source = {_toml_value(cal.residual_sigma_source)}")
    lines.append(f"[{name}.sources]")
    for k, v in sorted(p.sources.items()):
        if k not in cal.fitted:
            lines.append(f"{k} = {_toml_value(v)}")
    for e in cal.estimates:
        if e.exercised:
            lines.append(f"{e.name} = {_toml_value(source_of(cal, e, how, label))}")
    lines.append(f"[{name}.calibration]")
    lines.append(f"runs = {_toml_value([r.name for r in cal.runs])}")
    lines.append(f"measured = {_toml_value([fmt_duration_exact(r.measured_step_s) for r in cal.runs])}")
    lines.append(f"predicted = {_toml_value([fmt_duration_exact(t) for t in cal.predicted_s])}")
    lines.append(f"fitted = {_toml_value(list(cal.fitted))}")
    lines.append(f"identified = {_toml_value(list(cal.identified))}")
    lines.append(f"prior = {_toml_value([prior_value(f, float(getattr(cal.prior, f))) for f in cal.fitted])}")
    lines.append(f"sigma = {_toml_value([round(e.sigma, 6) for e in cal.estimates if e.exercised])}")
    lines.append(f"prior_sigma = {_toml_value([BY_NAME[f].prior_sigma for f in cal.fitted])}")
    lines.append(f"noise_sigma = {_toml_value(NOISE_SIGMA)}")
    env = covers or covered(cal)
    if env is not None:
        lines += covers_lines(name, env)
    return "\n".join(lines) + "\n"


def target(directory: str | Path, force: bool = False) -> Path:
    """DIR/performance.toml, checked before any work: DIR is a directory (or absent), the file absent or ``force``."""
    d = Path(directory)
    if d.exists() and not d.is_dir():
        raise InputError(f"{str(d)!r} exists and is not a directory")
    path = d / "performance.toml"
    if path.exists() and not force:
        raise InputError(f"{path} exists; pass --force to overwrite it")
    return path


def write_override(cal: Calibration, directory: str | Path, force: bool = False, how: str = "tpopt calibrate",
                   label: str = "calibrated", covers: Envelope | None = None) -> Path:
    """Write DIR/performance.toml; refuse to overwrite an existing file unless ``force``."""
    d = Path(directory)
    path = target(d, force)
    refuse_symlink(path, "--out")
    made = [p for p in (d, *d.parents) if not p.exists()]  # folders this call creates: removed if it fails
    try:
        d.mkdir(parents=True, exist_ok=True)
        write_atomic(path, override_text(cal, how, label, covers), "--out")
    except (OSError, InputError) as exc:
        for folder in made:  # deepest first
            try:
                folder.rmdir()
            except OSError:
                break
        if isinstance(exc, InputError):
            raise
        raise write_error("--out", path, exc) from None
    return path
