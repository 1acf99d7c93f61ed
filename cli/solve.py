"""`tpopt solve`: the cost-minimal (or fastest) plan, proven optimal, with what binds and why."""

from __future__ import annotations

import click

from tpopt.cli.common import (EXIT_INFEASIBLE, EXIT_UNKNOWN, dump_json, handle_errors, load_scenario_from,
                              scenario_options)


def solve_options(fn):
    opts = [
        click.option("--solver", type=click.Choice(["cpsat", "highs", "enumerate"]), default="cpsat",
                     show_default=True, help="Backend: CP-SAT, HiGHS MILP, or brute-force enumeration."),
        click.option("--method", type=click.Choice(["auto", "monolithic", "decomposed"]), default="auto",
                     show_default=True,
                     help="cpsat/highs formulation: one model, or the layout decomposition (auto: by size)."),
        click.option("--objective", type=click.Choice(["cost", "time"]), default="cost", show_default=True,
                     help="Minimise cost (then finish time) or finish time (then cost)."),
        click.option("--max-cost", help="Budget cap (currency, or card-hours without prices)."),
        click.option("--time-limit", type=float, default=60.0, show_default=True, help="Solver time limit, s."),
        click.option("--seed", type=int, default=0, show_default=True, help="Solver random seed."),
        click.option("--workers", type=int, default=1, show_default=True,
                     help="Solver threads (1 = deterministic)."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def request_from(kw: dict, top: int = 1):
    from tpopt.optimizer.result import Request

    from tpopt.cli.common import check_run_options
    from tpopt.optimizer.limits import Clock, stderr_progress

    check_run_options(kw["time_limit"], kw["seed"], kw["workers"], top)
    clock = Clock(kw["time_limit"])  # one budget for every phase of this command
    clock.progress = stderr_progress()
    return Request(objective=kw["objective"], top=top, time_limit=kw["time_limit"], seed=kw["seed"],
                   workers=kw["workers"], method=kw.get("method", "auto"), clock=clock)


@click.command()
@scenario_options
@solve_options
@click.option("--top", type=int, default=1, show_default=True, help="List the K best plans.")
@click.option("--no-analysis", is_flag=True, help="Skip the binding-constraint and alternatives report.")
@click.option("--sensitivity", is_flag=True,
              help="Also re-solve with the deadline +/- 1 d, one host fewer and 1 GiB more per card.")
@click.option("--timing", is_flag=True, help="Print the solver's wall time (the only non-deterministic output).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables (solver.wall_s is the wall time).")
@handle_errors
def solve(top, no_analysis, sensitivity, timing, as_json, **kw):
    """Find the cheapest plan that meets the deadline, prove it optimal, and say what limits it.

    Example: tpopt solve --scenario examples/design-case.toml --deadline 30d --hw rtx4090
    """
    from tpopt.cli.render import solve_text
    from tpopt.optimizer.core import solve as run
    from tpopt.optimizer.report import analysis
    from tpopt.optimizer.result import Status
    from tpopt.optimizer.space import Space

    req = request_from(kw, top)
    sc = load_scenario_from(kw, {"cost.max_cost": kw.get("max_cost")})
    space = Space.from_scenario(sc)
    result = run(sc, kw["solver"], req, space=space)
    out = {"status": result.status.value, "objective": result.objective, "solver": result.solver.as_dict()}
    if result.feasible:
        best = result.best
        ana = None if no_analysis else analysis(space, best, kw["solver"], req, set(result.enforced))
        d = best.as_dict()
        binding = {b["name"] for b in ana["binding"]} if ana else set()
        undecided = set(ana["undecided"]) if ana else set()
        for c in d["constraints"]:
            name = "deadline.finish" if c["name"] == "step.budget" else c["name"]
            c["binding"] = None if name in undecided else name in binding  # None: not decided in time
        out.update(d)
        out["binding"] = ana["binding"] if ana else []
        out["binding_undecided"] = sorted(undecided, key=list(result.enforced).index) if ana else []
        out["analysis"] = ana["analysis"] if ana else "skipped"
        out["alternatives"] = ana["alternatives"] if ana else []
        out["analysis_by"] = ana["oracle"] if ana else None
        out["robustness"] = ana["robustness"] if ana else {}
        out["top"] = [dict(ev.as_dict(), rank=i + 1) for i, ev in enumerate(result.plans)]
        if sensitivity:
            from tpopt.optimizer.explain import sensitivities

            out["sensitivities"] = sensitivities(sc, kw["solver"], req, base=best)
        if as_json:
            click.echo(dump_json(out), nl=False)
            return
        text = solve_text(out, sc, timing)
        if sensitivity:
            from tpopt.cli.explain import sensitivity_text

            text += "\n" + sensitivity_text(out["sensitivities"])
        click.echo(text, nl=False)
        return
    # no feasible plan (or none found in time)
    from tpopt.cli.explain import infeasible_report

    infeasible_report(sc, space, result, req, kw, as_json, out)
    raise SystemExit(EXIT_INFEASIBLE if result.status == Status.INFEASIBLE else EXIT_UNKNOWN)
