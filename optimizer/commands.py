"""The reports of ``tpopt simulate`` and ``tpopt calibrate`` as dicts, shared by the command (its ``--json``) and
the Python API (:mod:`tpopt.api`), so that both print and return the same figures from one computation.

``tpopt estimate`` (:func:`tpopt.optimizer.estimate.estimate`), ``tpopt replan``
(:func:`tpopt.optimizer.question.replan`) and ``tpopt rl`` (:func:`tpopt.optimizer.plan_rl.plan_rl`) already
return their reports from one function each.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpopt.errors import InputError
from tpopt.models import families as F
from tpopt.models import terms as T
from tpopt.models.plan import Plan, Scenario
from tpopt.models.simulate import simulate as run_simulation
from tpopt.models.units import DAY, GIB
from tpopt.optimizer import calibrate as CAL
from tpopt.optimizer import confidence as C
from tpopt.optimizer import question as Q
from tpopt.optimizer.backends import Solver
from tpopt.optimizer.result import Request
from tpopt.optimizer.runs import stacks_of_runs

MAX_SIMULATED_RUNS = 1_000_000
"""The most whole runs ``tpopt simulate`` draws (``--runs``)."""


@dataclass(frozen=True)
class Simulation:
    """``tpopt simulate``'s answer: ``report`` (its ``--json``) when a plan was found, else None and the status
    of the solve (``infeasible``, or ``unknown`` when the time limit came first)."""

    report: dict[str, Any] | None
    status: str


def simulation(sc: Scenario, backend: str | Solver, req: Request, runs: int, seed: int) -> Simulation:
    """Simulate the plan ``tpopt solve`` chooses (seeded) over ``runs`` whole runs and set the simulated quantiles
    beside the analytic finish-time law's (:data:`tpopt.optimizer.confidence.LEVELS`), with P(finish <= deadline)
    both ways and the mean number of events per run."""
    r, view = Q.chosen(sc, backend, req)  # tpopt solve's plan, in its batch's or offer's scenario
    if r.best is None:
        return Simulation(None, r.status.value)
    ev = r.best
    law = C.law_of(view, ev)
    _, lag = T.save_pause_lag(view, ev.plan.save_mode)
    sim = run_simulation(law, lag=lag, runs=runs, seed=seed)
    rows = [{"level": q, "analytic_days": law.quantile(q) / DAY, "simulated_days": sim.quantile(q) / DAY}
            for q in C.LEVELS]
    deadline = F.limit(F.DEADLINE, view)
    return Simulation({"plan": ev.plan_dict(), "runs": runs, "seed": seed, "quantiles": rows,
                       "probability_by_deadline": {"analytic": float(law.cdf(deadline)),
                                                   "simulated": sim.probability(deadline)},
                       "events_per_run": float(sim.events.mean())}, r.status.value)


def measured_run(sc: Scenario, plan: Plan, step_s: float) -> CAL.MeasuredRun:
    """One measured step of ``plan`` (``calibrate --measured-step``), named by its layout."""
    name = f"{plan.accelerator} x {plan.cards} (tp {plan.tp}, pp {plan.pp}, mb {plan.micro_batch})"
    return CAL.MeasuredRun(name, sc, (plan,), step_s)


def calibrate_runs(runs: list[CAL.MeasuredRun], free: tuple[str, ...] | None, out_dir: str | Path,
                   force: bool = False) -> tuple[CAL.Calibration, Path]:
    """Fit the one accelerator of ``runs`` (``free``: the parameters to fit, None: every one the runs exercise)
    and write its performance.toml override in ``out_dir``; the calibration and the file written."""
    accs = list(dict.fromkeys(r.accelerator for r in runs))
    if not accs:
        raise InputError("no measured run to calibrate")
    if len(accs) != 1:
        raise InputError(f"the runs use several accelerators ({', '.join(accs)}); calibrate one at a time")
    cal = CAL.fit(runs, accs[0], free)
    return cal, CAL.write_override(cal, out_dir, force=force)


def calibration_report(cal: CAL.Calibration, path: Path | str) -> dict[str, Any]:
    """``tpopt calibrate --json``: the fitted parameters, each run's measured and predicted step, the residual
    spread, the prior, each run's memory against the usable memory, the stacks a runs table's rows were modelled
    on and where each comes from (``assumed`` where none was named: tpopt.optimizer.runs.stacks_of_runs), and
    the file written."""
    return {"accelerator": cal.accelerator, "parameters": [e.as_dict() for e in cal.estimates],
            "runs": calibration_rows(cal), "residual_sigma": cal.residual_sigma,
            "residual_sigma_source": cal.residual_sigma_source, "degrees_of_freedom": cal.dof,
            "prior": {"prior_sigma": {p.name: p.prior_sigma for p in CAL.PARAMS if p.name in cal.fitted},
                      "noise_sigma": CAL.NOISE_SIGMA},
            "memory": [{"run": m.run, "predicted_gib": m.predicted / GIB, "usable_gib": m.limit / GIB, "fits": m.fits}
                       for m in cal.memory],
            **({"stacks": stacks} if (stacks := stacks_of_runs(cal.runs)) else {}),
            "written": str(path)}


def calibration_rows(cal: CAL.Calibration) -> list[dict[str, Any]]:
    """Each run: measured and predicted step (s) and the relative error predicted / measured - 1."""
    return [{"run": r.name, "measured_s": r.measured_step_s, "predicted_s": p, "error": p / r.measured_step_s - 1}
            for r, p in zip(cal.runs, cal.predicted_s, strict=False)]
