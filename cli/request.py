"""Request building shared by ``tpopt solve`` and ``tpopt explain`` (and anything else that solves).

The solver options, the :class:`~tpopt.optimizer.result.Request` they make, and the scenario's raw tables
with the command-line overrides (the explanation's accelerator relaxation rebuilds the scenario from them).
Both commands import from here; neither imports the other.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import click
from click.core import ParameterSource

from tpopt.catalogs import Catalog, load_catalog
from tpopt.catalogs.scenario import read_scenario_file, with_overrides
from tpopt.cli.common import CommandFn, SolverName, check_run_options, overrides_from, scenario_source
from tpopt.errors import InputError
from tpopt.models.units import parse_duration
from tpopt.optimizer import backends, limits
from tpopt.optimizer.result import Request

TIME_LIMIT_HELP = "One time limit for the whole command (tables, solve, analysis): 60s, 5min, or seconds."


def time_limit_option(help_text: str = TIME_LIMIT_HELP) -> Callable[[CommandFn], CommandFn]:
    """The ``--time-limit`` option (60 s by default) every command that solves takes."""
    return click.option("--time-limit", default="60s", show_default=True, help=help_text)


def request_with_limit(text: str | float) -> Request:
    """A default request whose one clock runs ``--time-limit`` from the command's start (the solve a command
    makes for a plan it reads figures from: tpopt checkpoint, tpopt stragglers)."""
    limit = time_limit_seconds(text)
    check_run_options(limit, 0, 1, 1)
    return Request(time_limit=limit, clock=limits.Clock(limit, start=limits.command_start()))


def solve_options(fn: CommandFn) -> CommandFn:
    opts = [
        click.option("--solver", type=SolverName(), default=backends.DEFAULT, show_default=True,
                     help="Backend: CP-SAT, HiGHS MILP, brute-force enumeration, or pyomo:NAME (the MILP through "
                          "Pyomo with solver NAME: highs, scip, cbc, glpk, gurobi, ... where installed)."),
        click.option("--method", type=click.Choice(["auto", "monolithic", "decomposed", "on-demand"]),
                     default="auto", show_default=True,
                     help="cpsat/highs formulation: one model, the layout decomposition, or the decomposition with "
                          "tables per layout group built on demand (auto: by size and the memory budget)."),
        click.option("--objective", type=click.Choice(["cost", "time"]), default="cost", show_default=True,
                     help="Minimise cost (then finish time) or finish time (then cost)."),
        click.option("--max-cost", help="Budget cap (currency, or card-hours without prices)."),
        time_limit_option(),
        click.option("--seed", type=int, default=0, show_default=True,
                     help="Random seed: the solver's (and the simulated runs' in tpopt simulate)."),
        click.option("--workers", type=int, default=1, show_default=True,
                     help="Solver threads (1 = deterministic)."),
        click.option("--memory-budget", help="Memory the solve may plan to use, e.g. 8GiB (overrides [search] "
                                             "memory_budget; default: half the machine's). A space whose tables "
                                             "would need more is refused before anything is allocated."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def time_limit_seconds(text: str | float) -> float:
    """``--time-limit``: a duration with its unit (``5s``, ``2min``) or a bare number of seconds."""


    try:
        x = float(text)
    except (TypeError, ValueError):
        return parse_duration(str(text), "--time-limit", allow_zero=False)
    if not math.isfinite(x):
        raise InputError(f"--time-limit: {text!r} must be a positive number of seconds")
    return x


def request_from(kw: dict[str, Any], top: int = 1) -> Request:
    """The request of the solver options, with one clock for every phase of this command (the time
    limit bounds tables, solve, verification and analysis together; see optimizer/limits.py)."""

    limit = time_limit_seconds(kw["time_limit"])
    check_run_options(limit, kw["seed"], kw["workers"], top)
    clock = limits.Clock(limit, start=limits.command_start())  # the limit counts from the command's start
    ctx = click.get_current_context(silent=True)  # --solver given (not its default): the tiny-space rule keeps it
    named = ctx is not None and ctx.get_parameter_source("solver") not in (None, ParameterSource.DEFAULT)
    return Request(objective=kw["objective"], top=top, time_limit=limit, seed=kw["seed"],
                   workers=kw["workers"], method=kw.get("method", "auto"), clock=clock, solver_named=named)


def raw_and_catalog(kw: dict[str, Any]) -> tuple[dict[str, Any], Catalog]:
    """The scenario's raw tables with this command's overrides, and the catalog (for the
    accelerator relaxation)."""

    ov = overrides_from(kw)
    ov["cost.max_cost"] = kw.get("max_cost")
    ov["search.cp"] = search_list(kw.get("cp_sizes"))
    raw = with_overrides(read_scenario_file(scenario_source(kw)), ov)
    return raw, load_catalog(kw.get("catalog_dirs") or ())


def search_list(text: str | None, flag: str = "--cp") -> list[str] | None:
    """A comma-separated search domain from the command line (``--cp 1,2,4``), as the scenario reads a list."""
    if text is None:
        return None
    values = [v.strip() for v in str(text).split(",") if v.strip()]
    if not values:
        raise InputError(f"{flag}: expected a comma-separated list of sizes, got {text!r}")
    return values
