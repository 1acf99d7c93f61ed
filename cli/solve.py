"""`tpopt solve`: the cost-minimal (or fastest) plan, proven optimal, with what binds and why."""

from __future__ import annotations

import click
from tpopt.cli.common import (
    EXIT_INFEASIBLE,
    EXIT_UNKNOWN,
    dump_json,
    echo_builtin_note,
    handle_errors,
    load_scenario_from,
    scenario_options,
)
from tpopt.cli.request import request_from, solve_options
from tpopt.models import families as F

TINY_SPACE = 20_000
"""Plans up to which ``--method auto`` proves the optimum by evaluating every plan (vectorised): faster
than loading a solver, whose import alone takes longer than such a space's whole enumeration."""


def tiny_backend(space, kw: dict) -> str:
    """The backend to run: the enumerator for tiny spaces under ``--method auto``, else the one asked for."""
    if kw["solver"] in ("cpsat", "highs") and kw.get("method", "auto") == "auto" and space.size() <= TINY_SPACE \
            and space.cheap_pipeline():
        return "enumerate"
    return kw["solver"]


@click.command()
@scenario_options
@solve_options
@click.option("--top", type=int, default=1, show_default=True, help="List the K best plans.")
@click.option("--no-analysis", is_flag=True, help="Skip the binding-constraint and alternatives report.")
@click.option("--sensitivity", is_flag=True,
              help="Also re-solve with the deadline +/- 1 d, one host fewer and 1 GiB more per card.")
@click.option("--timing", is_flag=True, help="Print the solver's wall time (the only non-deterministic output).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables (solver.wall_s is the wall time).")
@click.option("--export", type=click.Path(dir_okay=False),
              help="Also write the MILP (Pyomo) to this .lp or .mps file for another solver.")
@handle_errors
def solve(top, no_analysis, sensitivity, timing, as_json, export, **kw):
    """Find the cheapest plan that meets the deadline, prove it optimal, and say what limits it.

    Example: tpopt solve --deadline 30d --hw rtx4090   (the built-in design case: 48 RTX 4090 cards)
    """
    from tpopt.cli.render import solve_text
    from tpopt.errors import InputError
    from tpopt.optimizer import outer
    from tpopt.optimizer.core import solve as run
    from tpopt.optimizer.report import analysis
    from tpopt.optimizer.result import Status
    from tpopt.optimizer.space import Space

    if top < 1:
        raise InputError("--top must be at least 1")
    if export:
        from tpopt.optimizer.pyomo_model import check_export_path

        check_export_path(export)
    sc = load_scenario_from(kw, {"cost.max_cost": kw.get("max_cost")})
    req = request_from(kw, top)
    if kw["solver"].startswith("pyomo:"):
        from tpopt.optimizer.pyomo_model import PyomoSolver

        PyomoSolver(kw["solver"], req)  # a missing solver fails here, before anything is written
    if export and outer.has_task_choices(sc):
        raise InputError("--export writes one plan MILP: give one global batch (--global-batch) and no stages")
    if sc.stages:
        from tpopt.cli.choices import solve_staged

        return solve_staged(sc, kw, req, no_analysis, timing, as_json)
    bs = outer.solve_batches(sc, kw["solver"], req) if outer.has_task_choices(sc) else None
    space = bs.choices[0].space if bs else Space.from_scenario(sc)
    exported = None
    if export:
        from tpopt.optimizer.pyomo_model import export_model

        exported = export_model(space, req, export)
        click.echo(f"tpopt: wrote {exported['path']}: the plan MILP, {exported['variables']:,} variables, "
                   f"{exported['constraints']:,} constraints, minimising {exported['objective']}", err=True)
    if bs:
        result = bs.result
    else:
        backend = tiny_backend(space, kw)
        result = run(sc, backend, req, space=space)
        if backend != kw["solver"]:
            result.solver.note = "tiny space: every plan evaluated"  # --method monolithic runs the solver asked for
    out = {"status": result.status.value, "objective": result.objective, "solver": result.solver.as_dict()}
    echo_builtin_note(kw, as_json, out)
    if exported:
        out["export"] = exported
    if result.feasible:
        best = result.best
        view = sc  # the scenario the plan is shown in (with batch choices: at its batch)
        if bs:  # the global batch is a choice: analysis over every batch, the chosen batch's scenario
            view, space = bs.choice_of(best).sc, bs.choice_of(best).space
            ana = None if no_analysis else outer.batch_analysis(bs, kw["solver"], req, set(result.enforced))
        else:
            ana = None if no_analysis else analysis(space, best, kw["solver"], req, set(result.enforced))
        d = best.as_dict()
        binding = {b["name"] for b in ana["binding"]} if ana else set()
        undecided = set(ana["undecided"]) if ana else set()
        for c in d["constraints"]:
            name = F.DEADLINE if c["name"] == F.STEP_BUDGET else c["name"]
            # without the analysis, or where the time limit cut it short, nobody knows: None, not False
            c["binding"] = None if (ana is None or name in undecided) else name in binding
            if name in undecided:
                c["undecided"] = True  # the analysis ran out of time on this family
        out.update(d)
        out["analysis"] = "skipped" if ana is None else ana["analysis"]
        out["binding"] = ana["binding"] if ana else None
        out["binding_undecided"] = sorted(undecided, key=list(result.enforced).index) if ana else []
        out["alternatives"] = ana["alternatives"] if ana else None
        out["analysis_by"] = ana["oracle"] if ana else None
        out["robustness"] = ana["robustness"] if ana else None
        out["top"] = [dict(ev.as_dict(), rank=i + 1) for i, ev in enumerate(result.plans)]
        if bs or sc.task.critical_batch is not None:
            out["batch"] = outer.batch_figures(view, best)
            out["batch_choices"] = outer.batch_rows(bs, req.objective) if bs else []
        if sensitivity:
            from tpopt.optimizer.explain import sensitivities

            out["sensitivities"] = sensitivities(sc, kw["solver"], req, base=best)
        if as_json:
            click.echo(dump_json(out), nl=False)
            return
        from tpopt.cli.choices import batch_lines

        text = solve_text(out, view, timing, batch_lines(out))
        if sensitivity:
            from tpopt.cli.explain_text import sensitivity_text

            text += "\n" + sensitivity_text(out["sensitivities"])
        click.echo(text, nl=False)
        return
    # no feasible plan (or none found in time)
    from tpopt.cli.explain_text import infeasible_report

    if bs:  # conflict at the task's batch (or the first choice); relaxations over every batch
        from tpopt.cli.choices import batch_infeasible

        space = batch_infeasible(bs, sc, kw, req, as_json, out)
    infeasible_report(sc, space, result, req, kw, as_json, out)
    raise SystemExit(EXIT_INFEASIBLE if result.status == Status.INFEASIBLE else EXIT_UNKNOWN)
