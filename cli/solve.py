"""`tpopt solve`: the cost-minimal (or fastest) plan, proven optimal, with what binds and why.

Parsing and rendering only: the solve and its analysis are :func:`tpopt.optimizer.plan.plan`."""

from __future__ import annotations

from typing import Any

import click

from tpopt.cli.choices import batch_infeasible, batch_lines, infeasible_stage_text, staged_text
from tpopt.cli.common import (
    EXIT_INFEASIBLE,
    EXIT_UNKNOWN,
    check_new_file,
    dump_json,
    echo_builtin_note,
    handle_errors,
    load_scenario_from,
    scenario_options,
)
from tpopt.cli.confidence import distribution_lines, reachable_line
from tpopt.cli.html_report import answer_page, html_option, write_answer_page
from tpopt.cli.progress_line import live_progress, quiet_option
from tpopt.cli.render import fit_lines, output_width, solve_text
from tpopt.cli.request import raw_and_catalog, request_from, search_list, solve_options
from tpopt.errors import InputError
from tpopt.models.plan import Scenario
from tpopt.optimizer import plan as P
from tpopt.optimizer.result import Status
from tpopt.presentation import infeasible_lines, market_infeasible_lines, market_lines, sensitivity_text


@click.command()
@scenario_options
@solve_options
@click.option("--cp", "cp_sizes", help="Context-parallel sizes to search, comma-separated, e.g. 1,2,4,8,16 "
                                       "(overrides [search] cp; default 1: sequences are not split).")
@click.option("--top", type=int, default=1, show_default=True, help="List the K best plans.")
@click.option("--no-analysis", is_flag=True, help="Skip the binding-constraint and alternatives report.")
@click.option("--sensitivity", is_flag=True,
              help="Also re-solve with the deadline +/- 1 d, one host fewer and 1 GiB more per card.")
@click.option("--timing", is_flag=True, help="Print the solver's wall time (the only non-deterministic output).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables (solver.wall_s is the wall time).")
@click.option("--export", type=click.Path(dir_okay=False),
              help="Also write the MILP (Pyomo) to this .lp or .mps file for another solver.")
@click.option("--force", is_flag=True, help="Overwrite the --export or --html file if it exists.")
@html_option
@quiet_option
@handle_errors
def solve(top: int, no_analysis: bool, sensitivity: bool, timing: bool, as_json: bool, export: str | None,
          force: bool, html: str | None, quiet: bool, **kw: Any) -> None:
    """Find the cheapest plan that meets the deadline, prove it optimal, and say what limits it.

    Example: tpopt solve --deadline 30d --hw rtx4090   (the built-in design case: 48 RTX 4090 cards)
    """
    if top < 1:
        raise InputError("--top must be at least 1")
    if export:
        P.check_export(export)
        check_new_file(export, "--export", force)
    if html:
        check_new_file(html, "--html", force)
    sc = load_scenario_from(kw, {"cost.max_cost": kw.get("max_cost"), "search.cp": search_list(kw.get("cp_sizes"))},
                            pools=True)
    req = request_from(kw, top)
    if sc.pools:  # a mixed plan over accelerator pools (optimizer/pools.py)
        return _pools(sc, req.objective, as_json)
    with live_progress("tpopt solve", req.clock, quiet or as_json) as line:
        pr = P.plan(sc, kw["solver"], req, analyse=not no_analysis, sensitivity=sensitivity, export=export,
                    on_export=_tell_export, inputs=lambda: raw_and_catalog(kw), progress=line.tell)
    if pr.staged is not None:
        if html:
            write_answer_page(html, lambda: answer_page("solve", pr.report, staged_text(pr.report, sc, False), sc))
        return _staged(pr, sc, timing, as_json)
    out = _with_source(pr.report, kw, as_json)
    if pr.feasible:
        assert pr.view is not None  # PlanReport.of sets it for every unstaged solve
        view = pr.view
        if html:  # the page shows what the terminal would (without the wall time: the page's bytes are fixed)
            write_answer_page(html, lambda: answer_page("solve", out, _plan_text(out, view, False, sensitivity), view))
        if as_json:
            click.echo(dump_json(out), nl=False)
            return
        click.echo(_plan_text(out, view, timing, sensitivity), nl=False)
        return
    # no feasible plan (or none found in time)
    if "market" in out:  # the market's answer: per-offer verdicts, no conflict of one space
        if html:
            write_answer_page(html, lambda: answer_page("solve", out, "\n".join(market_infeasible_lines(out)), None))
        click.echo(dump_json(out) if as_json else fit_lines("\n".join(market_infeasible_lines(out))), nl=not as_json)
        raise SystemExit(EXIT_INFEASIBLE if pr.status == Status.INFEASIBLE else EXIT_UNKNOWN)
    if pr.batches:  # conflict at the task's batch (or the first choice); relaxations over every batch
        batch_infeasible(out["batch_choices"], P.conflict_choice(pr.batches, sc).batch, as_json,
                         decided=pr.status == Status.INFEASIBLE)
    if sc.task.confidence is not None and pr.status == Status.INFEASIBLE:
        from tpopt.optimizer.question import reachable  # lazy: start-up time (only without a plan)

        out["reachable_confidence"], why = reachable(sc, kw["solver"], req)
        if why is not None:
            out["reachable_undecided"] = why
    lines = infeasible_lines(out, sc, "solve")
    if "reachable_confidence" in out and sc.task.confidence is not None:
        lines.append(reachable_line(sc.task.confidence, out["reachable_confidence"], out.get("reachable_undecided")))
    if html:
        write_answer_page(html, lambda: answer_page("solve", out, "\n".join(lines), None))
    click.echo(dump_json(out) if as_json else fit_lines("\n".join(lines)), nl=not as_json)
    raise SystemExit(EXIT_INFEASIBLE if pr.status == Status.INFEASIBLE else EXIT_UNKNOWN)


def _plan_text(out: dict[str, Any], view: Scenario, timing: bool, sensitivity: bool) -> str:
    """The terminal's answer of a feasible unstaged solve."""
    text = solve_text(out, view, timing, batch_lines(out) + market_lines(out))
    if "finish_distribution" in out:
        text += fit_lines("\n".join(distribution_lines(out["finish_distribution"],
                                                        out["metrics"].get("cost_unit", "USD"))))
        text += "\n"
    if sensitivity:
        text += "\n" + sensitivity_text(out["sensitivities"])
    return text


def _pools(sc: Scenario, objective: str, as_json: bool) -> None:
    """`tpopt solve` on a scenario with [[hardware.pools]]: the mixed plan, each pool alone, the comparison."""
    from tpopt.optimizer import pools  # lazy: only mixed-pool scenarios need it

    ps = pools.solve_pools(sc, "finish" if objective == "time" else "cost")
    text = fit_lines(pools.pools_text(ps, sc, output_width()))
    click.echo(dump_json(pools.pools_dict(ps, sc)) if as_json else text, nl=False)
    if ps.best is None:
        raise SystemExit(EXIT_INFEASIBLE)


def _tell_export(exported: dict[str, Any]) -> None:
    click.echo(f"tpopt: wrote {exported['path']}: the plan MILP, {exported['variables']:,} variables, "
               f"{exported['constraints']:,} constraints, minimising {exported['objective']}", err=True)


def _with_source(report: dict[str, Any], kw: dict[str, Any], as_json: bool) -> dict[str, Any]:
    """The report with ``scenario_source`` after the solver entry (JSON on the built-in scenario), or the
    built-in note printed first (text)."""
    head = {k: report[k] for k in ("status", "objective", "solver")}
    echo_builtin_note(kw, as_json, head)
    return {**head, **report}


def _staged(pr: P.PlanReport, sc: Scenario, timing: bool, as_json: bool) -> None:
    """`tpopt solve` on a staged scenario."""
    assert pr.staged is not None  # the caller's test
    d = pr.report
    if as_json:
        click.echo(dump_json(d), nl=False)
    else:
        click.echo(staged_text(d, sc, timing), nl=False)
        if not pr.staged.feasible:
            click.echo(fit_lines(infeasible_stage_text(d, sc)))
    if not pr.staged.feasible:
        raise SystemExit(EXIT_INFEASIBLE if pr.staged.status == Status.INFEASIBLE else EXIT_UNKNOWN)
