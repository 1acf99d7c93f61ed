"""`tpopt rl`: plan RL post-training (rollout / verification / learning split) as a solve.

Parsing and rendering only: the solve and its report are :func:`tpopt.optimizer.plan_rl.plan_rl`."""

from __future__ import annotations

from typing import Any

import click

from tpopt.catalogs.rl import load_rl_scenario
from tpopt.catalogs.scenario import BUILTIN_RL_SCENARIO
from tpopt.cli.common import (
    EXIT_INFEASIBLE,
    EXIT_UNKNOWN,
    SolverName,
    check_run_options,
    dump_json,
    echo_builtin_note,
    handle_errors,
    overrides_from,
    scenario_options,
)
from tpopt.cli.plots import check_plot_path
from tpopt.cli.render import fit_lines
from tpopt.cli.request import time_limit_seconds
from tpopt.cli.rl_plot import plot_cycle
from tpopt.cli.rl_render import rl_text
from tpopt.optimizer import backends, limits
from tpopt.optimizer.plan_rl import plan_rl
from tpopt.optimizer.result import Request, Status

RL_DERIVED = ("tokens", "global-batch", "critical-batch", "seq-len",  # from [rl]: samples, group size, lengths
              "confidence", "step-sigma")  # no finish-time distribution for RL plans


@click.command()
@scenario_options(without=RL_DERIVED, default_help="the built-in RL example")
@click.option("--solver", type=SolverName(), default=backends.DEFAULT, show_default=True,
              help="Backend for the learner's layout when its space is too large to tabulate: CP-SAT, HiGHS MILP, "
                   "enumeration, or pyomo:NAME (the MILP through Pyomo with solver NAME, where installed).")
@click.option("--objective", type=click.Choice(["cost", "time"]), default="cost", show_default=True,
              help="Minimise cost (then finish time) or finish time (then cost).")
@click.option("--max-cost", help="Budget cap (currency, or card-hours without prices).")
@click.option("--kept", help="Kept fraction at one-step async, e.g. 80% (overrides [rl] kept).")
@click.option("--staleness", type=click.IntRange(0, 1), help="Policy lag allowed: 0 synchronous, 1 one-step async.")
@click.option("--no-analysis", is_flag=True, help="Skip binding constraints, alternatives and the break-even search.")
@click.option("--plot", "plot_path", help="Stage utilisation over one cycle of the chosen plan (.pdf, .svg or .png; "
                                          "written only when a plan is feasible).")
@click.option("--force", is_flag=True, help="Overwrite --plot if the file exists.")
@click.option("--timing", is_flag=True, help="Print the solve's wall time (the only non-deterministic output).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text (solver.wall_s is the wall time).")
@click.option("--time-limit", default="60s", show_default=True,
              help="One time limit for the whole command (search, learner solves, analysis): 60s, 5min, or seconds. "
                   "At the limit the best plan found is returned, not proven optimal (exit 0); none found: exit 4.")
@handle_errors
def rl(solver: str, objective: str, max_cost: str | None, kept: str | None, staleness: int | None, no_analysis: bool,
       plot_path: str | None, force: bool, timing: bool, as_json: bool, time_limit: str | float, **kw: Any) -> None:
    """Plan RL post-training: cards for rollout vs learning (or shared), rollout TP and batch, the
    learner's layout, sync or one-step async, weight sync; cheapest (or fastest) by the deadline.

    Without --scenario: the built-in RL example (GRPO on a Qwen3-8B policy, up to 64 H100).

    Example: tpopt rl --kept 90%
    """
    time_limit = time_limit_seconds(time_limit)
    check_run_options(time_limit)  # finite, positive, at most 7 days
    chosen = backends.resolve(solver)  # resolved once: the RL search holds the Solver
    chosen.require(Request(time_limit=time_limit))  # a missing solver fails here, before any work
    if plot_path:
        check_plot_path(plot_path, force=force)
    ov = overrides_from(kw)
    ov.update({"cost.max_cost": max_cost, "rl.kept": kept, "rl.staleness": staleness})
    kw["_builtin"] = "rl"
    rsc = load_rl_scenario(kw["scenario_path"] or BUILTIN_RL_SCENARIO, ov, kw.get("catalog_dirs") or ())
    # one clock for the whole command, counted from its start (loading included)
    clock = limits.Clock(time_limit, start=limits.command_start())
    req = Request(objective=objective, time_limit=time_limit, clock=clock)
    pr = plan_rl(rsc, chosen, req, analyse=not no_analysis)
    out = pr.report
    if plot_path and pr.feasible:
        plot_cycle(out, plot_path)
    echo_builtin_note(kw, as_json, out)
    if as_json:
        click.echo(dump_json(out), nl=False)
    else:
        click.echo(fit_lines(rl_text(out, timing)), nl=False)
    if pr.status == Status.UNKNOWN:
        raise SystemExit(EXIT_UNKNOWN)
    if not pr.feasible:
        raise SystemExit(EXIT_INFEASIBLE)
