"""Calibration: fit an accelerator's free performance parameters to measured step times.

A :class:`MeasuredRun` is a scenario, the plan that ran (or candidate plans, when a publication does
not say which micro-batch or schedule it used: the fastest one that fits memory is predicted, as
tpopt itself would choose) and the measured step time. :func:`fit` minimises

    J(theta) = mean over runs of ln(t_pred / t_meas)^2 + w x sum over fitted params of ln(theta / theta_0)^2

over the free parameters theta of :class:`tpopt.models.roofline.PerfParams` (by default the first
min(runs, 3) of gemm_efficiency, memory_efficiency, kernel_overhead), inside their physical bounds,
starting from the catalog's values theta_0 (the weak prior term, w = 1e-4, keeps a parameter the runs
cannot tell apart where its datasheet prior put it). The fitter is a damped Gauss-Newton
(Levenberg-Marquardt) iteration in log-parameter space, projected onto the bounds: the step-time model
is vectorised over parameter sets, so the finite-difference Jacobian and the trial steps of five
damping values are one evaluation each; a fit takes a few dozen evaluations of every run.

Fitting is not a pure relation, so it lives here and calls :mod:`tpopt.models` (never the other way).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from tpopt.errors import InputError
from tpopt.models import families as F
from tpopt.models.evaluate import evaluate_arrays, resolve_plan, with_plan_options
from tpopt.models.plan import Plan, Scenario
from tpopt.models.roofline import PerfParams

PRIOR_WEIGHT = 1e-4
CHOICE_CONSTRAINTS = F.CHOICE_FAMILIES
"""Constraints a candidate plan must meet to be chosen (what the run could physically do)."""


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


def predict(run: MeasuredRun, perf: PerfParams) -> Prediction:
    """Predicted step time of a run for (possibly array-valued) performance parameters."""
    best: NDArray[np.float64] | None = None
    choice: NDArray[np.int_] | None = None
    for i, plan in enumerate(run.plans):
        p = resolve_plan(run.scenario, plan)
        sc = with_plan_options(with_perf(run.scenario, p.accelerator, perf), p)
        r = evaluate_arrays(sc, p.accelerator, tp=p.tp, pp=p.pp, dp=p.dp, micro_batch=p.micro_batch,
                            zero_stage=p.zero_stage, nics_per_host=p.nics_per_host, save_interval_s=p.save_interval_s,
                            recompute=p.recompute, offload=p.offload, schedule=p.schedule, save_mode=p.save_mode,
                            ep=p.ep, expert_tp=p.expert_tp, capacity_factor=p.capacity_factor, cp=p.cp,
                            sequence_parallel=p.sequence_parallel)
        step = np.asarray(r["step_s"], dtype=float)
        ok = np.ones(step.shape, dtype=bool)
        for name in CHOICE_CONSTRAINTS if len(run.plans) > 1 else ():  # a plan that ran needs no check
            v, lim = r[("c", name)]
            ok &= np.asarray(v) <= np.asarray(lim)
        step = np.where(ok, step, np.inf)
        if best is None or choice is None:
            best, choice = step.copy(), np.where(ok, i, -1)
        else:
            better = step < best
            best = np.where(better, step, best)
            choice = np.where(better, i, choice)
    assert best is not None and choice is not None, "a measured run has at least one plan"
    return Prediction(np.atleast_1d(best), np.atleast_1d(choice))


def residuals(runs: Sequence[MeasuredRun], perf: PerfParams) -> NDArray[np.float64]:
    """ln(t_pred / t_meas) per run (rows) and parameter set (columns)."""
    return np.stack([np.log(predict(r, perf).step_s / r.measured_step_s) for r in runs])


@dataclass
class Calibration:
    accelerator: str
    perf: PerfParams  # the fitted parameters (scalars)
    fitted: tuple[str, ...]  # names of the fitted fields
    prior: PerfParams
    runs: list[MeasuredRun]
    predicted_s: list[float]  # per run
    objective: float

    def errors(self) -> list[float]:
        """Relative error per run, predicted / measured - 1."""
        return [p / r.measured_step_s - 1.0 for p, r in zip(self.predicted_s, self.runs, strict=False)]


def default_free(n_runs: int) -> tuple[str, ...]:
    """The parameters a calibration frees by default: one per run, in PerfParams.FREE order, at most 3."""
    return PerfParams.FREE[:max(1, min(n_runs, len(PerfParams.FREE)))]


def _log_bounds(name: str) -> tuple[float, float]:
    lo, hi = PerfParams.BOUNDS.get(name, (1e-9, 1e9))
    return np.log(max(lo, 1e-9)), np.log(hi)


def fit(runs: list[MeasuredRun], accelerator: str, free: Sequence[str] | None = None, *,
        prior: PerfParams | None = None, max_iter: int = 40, rounds: int = 3) -> Calibration:
    """Fit ``free`` parameters of ``accelerator`` to the runs (module docstring).

    Runs with candidate plans are first pinned to the candidate the current parameters choose; after a
    fit the choice is made again with the fitted parameters and the fit repeated if it changed."""
    runs = [r for r in runs if r.accelerator == accelerator]
    if not runs:
        raise InputError(f"no measured run on {accelerator!r} to calibrate")
    for r in runs:
        if not (np.isfinite(r.measured_step_s) and r.measured_step_s > 0):
            raise InputError(f"run {r.name!r}: the measured step must be a positive time")
    base = prior or runs[0].scenario.system(accelerator).perf
    if base is None:
        raise InputError("calibration needs the per-operation model: remove hardware.efficiency from the scenario")
    free = tuple(free or default_free(len(runs)))
    for n in free:
        if n not in PerfParams.BOUNDS:
            raise InputError(f"cannot fit {n!r} (fittable: {', '.join(PerfParams.BOUNDS)})")
    x0 = np.log(np.array([max(float(getattr(base, n)), 1e-6) for n in free]))
    lo = np.array([_log_bounds(n)[0] for n in free])
    hi = np.array([_log_bounds(n)[1] for n in free])
    x = np.clip(x0, lo, hi)
    current = base
    for _ in range(max(1, rounds)):
        pinned = []
        for r in runs:
            plan = chosen_plan(r, current) if len(r.plans) > 1 else r.plans[0]
            if plan is None:
                raise InputError(f"run {r.name!r}: no candidate plan fits the card's memory")
            pinned.append(replace(r, plans=(plan,)))
        x, best = _least_squares(pinned, base, free, x, x0, lo, hi, max_iter)
        previous, current = current, base.with_values(**{n: float(v) for n, v in zip(free, np.exp(x), strict=False)})
        if all(len(r.plans) == 1 or chosen_plan(r, current) == chosen_plan(r, previous) for r in runs):
            break
    fitted = current.with_values(calibrated=tuple(dict.fromkeys(tuple(base.calibrated) + free)))
    pred = [float(predict(r, fitted).step_s[0]) for r in runs]
    return Calibration(accelerator, fitted, free, base, runs, pred, best)


def _least_squares(runs: list[MeasuredRun], base: PerfParams, free: tuple[str, ...], x: NDArray[np.float64],
                   x0: NDArray[np.float64], lo: NDArray[np.float64], hi: NDArray[np.float64],
                   max_iter: int) -> tuple[NDArray[np.float64], float]:
    """Damped Gauss-Newton (Levenberg-Marquardt) on the residuals [ln(t_pred/t_meas) / sqrt(n); sqrt(w) (x - x0)]
    in log-parameter space, projected onto the bounds. The Jacobian (forward differences) and the
    trial steps of five damping values are each one vectorised evaluation."""
    n_runs = len(runs)

    def res(xs: NDArray[np.float64]) -> NDArray[np.float64]:  # (K, n_runs + n_params)
        r = residuals(runs, perf_sets(base, free, np.exp(xs))).T
        r = np.where(np.isfinite(r), r, 1e3) / np.sqrt(n_runs)
        return np.hstack([r, np.sqrt(PRIOR_WEIGHT) * (xs - x0)])

    r0 = res(x[None])[0]
    best = float(r0 @ r0)
    lam = 1e-2
    h = 1e-4
    for _ in range(max_iter):
        xs = x[None] + h * np.eye(len(x))
        jac = ((res(xs) - r0) / h).T  # (residuals, params)
        jtj, g = jac.T @ jac, jac.T @ r0
        damps = lam * np.array([0.01, 0.1, 1.0, 10.0, 100.0])
        steps = []
        for d in damps:
            a = jtj + d * np.diag(np.maximum(np.diag(jtj), 1e-12))
            steps.append(np.clip(x - np.linalg.solve(a, g), lo, hi))
        trials = np.array(steps)
        rs = res(trials)
        vals = np.einsum("ij,ij->i", rs, rs)
        j = int(np.argmin(vals))
        if vals[j] < best - 1e-15:
            gain, moved = best - vals[j], float(np.max(np.abs(trials[j] - x)))
            x, r0, best, lam = trials[j], rs[j], float(vals[j]), max(damps[j], 1e-6)
            if gain < 1e-10 * best or moved < 1e-7:
                break
        else:
            lam = damps[-1] * 10.0
            if lam > 1e8:
                break
    return x, best


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


def override_text(cal: Calibration) -> str:
    """performance.toml text holding the calibrated entry (readable by ``--catalog DIR``)."""
    p = cal.perf
    name = cal.accelerator
    runs = ", ".join(r.name for r in cal.runs)
    lines = [
        f"# Written by tpopt calibrate: {name} fitted to {len(cal.runs)} measured run(s).",
        "# Use it with --catalog DIR; fields here replace the built-in performance catalog's field by field.",
        "",
        f"[{name}]",
    ]
    for f in ("gemm_efficiency", "memory_efficiency", "attention_efficiency", "tp_efficiency", "dp_efficiency",
              "gemm_k_half", "sms"):
        lines.append(f"{f} = {_toml_value(getattr(p, f))}")
    lines.append(f"tile = [{p.tile_m}, {p.tile_n}]")
    lines.append(f'kernel_overhead = "{p.kernel_overhead * 1e6:.6g}us"')
    lines.append(f'collective_latency = "{p.collective_latency * 1e6:.6g}us"')
    lines.append(f"calibrated = {_toml_value(list(p.calibrated))}")
    lines.append(f"[{name}.sources]")
    for f in cal.fitted:
        lines.append(f"{f} = {_toml_value(f'calibrated: tpopt calibrate on {runs}')}")
    lines.append(f"[{name}.calibration]")
    lines.append(f"runs = {_toml_value([r.name for r in cal.runs])}")
    lines.append(f"measured_s = {_toml_value([r.measured_step_s for r in cal.runs])}")
    lines.append(f"predicted_s = {_toml_value(cal.predicted_s)}")
    lines.append(f"prior = {_toml_value([float(getattr(cal.prior, f)) for f in cal.fitted])}")
    return "\n".join(lines) + "\n"


def write_override(cal: Calibration, directory: str | Path, force: bool = False) -> Path:
    """Write DIR/performance.toml; refuse to overwrite an existing file unless ``force``."""
    d = Path(directory)
    if d.exists() and not d.is_dir():
        raise InputError(f"{str(d)!r} exists and is not a directory")
    path = d / "performance.toml"
    if path.exists() and not force:
        raise InputError(f"{path} exists; pass --force to overwrite it")
    try:
        d.mkdir(parents=True, exist_ok=True)
        path.write_text(override_text(cal))
    except OSError as exc:
        raise InputError(f"cannot write {path} ({exc.strerror})") from None
    return path
