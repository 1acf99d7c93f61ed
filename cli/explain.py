"""`tpopt explain`: why a plan or a request fails, what binds it, and the smallest change that fixes it.

Thin: the numbers come from :mod:`tpopt.optimizer.explain`, the text from :mod:`tpopt.presentation`.

    tpopt explain --scenario S [--max-cards 32 ...]          the request: optimum and what binds it,
                                                           or (no plan) the conflict and minimal relaxations
    tpopt explain --scenario S --cards 32 [--zero 3 ...]     one plan: what it violates, or what limits it
    tpopt explain ... --sensitivity                        + objective change per unit of each main input

Exit codes: 0 feasible, 2 bad input, 3 infeasible (the request, or the given plan), 4 no answer in time.
"""

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
    plan_from,
    plan_options,
    scenario_options,
)
from tpopt.cli.confidence import reachable_line
from tpopt.cli.html_report import answer_page, html_option, write_answer_page
from tpopt.cli.progress_line import live_progress, quiet_option
from tpopt.cli.render import fit_lines
from tpopt.cli.request import raw_and_catalog, request_from, solve_options
from tpopt.errors import InputError
from tpopt.models import variables as V
from tpopt.models.plan import Scenario
from tpopt.optimizer import backends
from tpopt.optimizer import question as Q
from tpopt.optimizer.explain import explain_plan, sensitivities
from tpopt.optimizer.outer import has_task_choices
from tpopt.presentation import (
    infeasible_lines,
    market_infeasible_lines,
    market_lines,
    plan_lines,
    request_lines,
    sensitivity_lines,
)

PLAN_FLAGS = tuple(i.key for i in V.PLAN_INPUTS if i.flag is not None and i.api is not None and i.key != "cards")
"""The plan flags that describe a plan (those :func:`tpopt.explain` takes as plan fields; --cards aside)."""


# ---------------------------------------------------------------------------------------------
# the command


@click.command()
@scenario_options
@solve_options
@plan_options(require_cards=False)
@click.option("--sensitivity", is_flag=True,
              help="Also re-solve the optimum with deadline +/-1 d, one host fewer, +1 GiB per card.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@html_option
@click.option("--force", is_flag=True, help="Overwrite the --html file if it exists.")
@quiet_option
@handle_errors
def explain(sensitivity: bool, as_json: bool, html: str | None, force: bool, quiet: bool, **kw: Any) -> None:
    """Explain a plan or a request: violated or binding constraints, conflicts, minimal relaxations.

    Without --cards the request as a whole: its optimum and what binds it, or, when no plan is
    feasible (exit 3), a minimal conflict and the smallest single change of each input that fixes it.
    With --cards (and other plan flags) one plan: what it violates (exit 3), or what limits it.

    \b
    Examples:
      tpopt explain --max-cards 32                (the built-in design case)
      tpopt explain --cards 48 --sensitivity
      tpopt explain --scenario my.toml
    """
    kw["_command"] = "explain"
    if html:
        check_new_file(html, "--html", force)
    sc = load_scenario_from(kw, {"cost.max_cost": kw.get("max_cost")})
    if sc.market.offers and kw.get("cards") is not None:
        raise InputError("tpopt explain --cards explains a plan on the accelerator's own price; the [market] offers "
                         "are a choice: explain the request (drop --cards) or the scenario without [market]")
    req = request_from(kw)
    backend = backends.resolve(kw["solver"])  # resolved once: explain holds the Solver
    if kw.get("cards") is None:
        given = [k for k in PLAN_FLAGS if kw.get(k) is not None]
        if given:
            raise InputError(f"{V.flag_of(given[0])} describes a plan: give --cards too (or drop it to explain the "
                             "request)")
        raw, catalog = raw_and_catalog(kw)
        if sensitivity and (has_task_choices(sc) or sc.market.offers):
            raise InputError("--sensitivity re-solves one design space: give one global batch, one stage and no "
                             "[market]")
        with live_progress("tpopt explain", req.clock, quiet or as_json) as line:  # solve's question: batches, offers
            out = Q.explain_request(sc, backend, req, raw=raw, catalog=catalog, progress=line.tell)
        if sc.stages:
            _staged(out, sc, as_json, kw, html)
        if out["status"] not in ("optimal", "feasible"):
            echo_builtin_note(kw, as_json, out)
            if "market" in out:
                text = market_infeasible_lines(out)
            else:
                if "conflict_batch" in out:
                    batch_infeasible(out["batch_choices"], out["conflict_batch"], as_json,
                                     decided=out["status"] == "infeasible")
                text = infeasible_lines(out, sc, "explain")
            if sc.task.confidence is not None and out["status"] == "infeasible":  # which confidence is reachable
                out["reachable_confidence"], why = Q.reachable(sc, backend, req)
                if why is not None:
                    out["reachable_undecided"] = why
                text.append(reachable_line(sc.task.confidence, out["reachable_confidence"], why))
            if html:
                write_answer_page(html, lambda: answer_page("explain", out, "\n".join(text), None))
            click.echo(dump_json(out) if as_json else fit_lines("\n".join(text)) + "\n", nl=False)
            raise SystemExit(EXIT_INFEASIBLE if out["status"] == "infeasible" else EXIT_UNKNOWN)
        if sensitivity:
            out["sensitivities"] = sensitivities(sc, backend, req)
        more = batch_lines(out) + [x for x in market_lines(out) if not x.startswith("Binding constraints")]
        lines = request_lines(out, sc) + ([""] + more if more else [])
        code = 0
    else:
        plan = plan_from(sc, kw)
        with live_progress("tpopt explain", req.clock, quiet or as_json):
            out = explain_plan(sc, plan, backend, req)
        if sensitivity:
            out["sensitivities"] = sensitivities(sc, backend, req)
        lines = plan_lines(out, sc)
        code = 0 if out["status"] == "feasible" else EXIT_INFEASIBLE
    if sensitivity:
        sl = sensitivity_lines(out["sensitivities"])
        lines += [""] + (sl or ["Sensitivities: the request has no feasible plan."])
    if html:
        write_answer_page(html, lambda: answer_page("explain", out, "\n".join(lines), sc))
    echo_builtin_note(kw, as_json, out)
    click.echo(dump_json(out) if as_json else fit_lines("\n".join(lines)) + "\n", nl=False)
    if code:
        raise SystemExit(code)


def _staged(out: dict[str, Any], sc: Scenario, as_json: bool, kw: dict[str, Any], html: str | None) -> None:
    """A staged request explained as ``tpopt solve`` answers it (plan()): each stage's plan and what binds it at
    the time the other stages leave it, or why no combination fits; exits."""
    if html:
        write_answer_page(html, lambda: answer_page("explain", out, staged_text(out, sc, False), sc))
    echo_builtin_note(kw, as_json, out)
    if as_json:
        click.echo(dump_json(out), nl=False)
    else:
        click.echo(staged_text(out, sc, False).replace("tpopt solve:", "tpopt explain:", 1), nl=False)
        if not out["feasible"]:
            click.echo(fit_lines(infeasible_stage_text(out, sc)))
    if out["status"] not in ("optimal", "feasible"):
        raise SystemExit(EXIT_INFEASIBLE if out["status"] == "infeasible" else EXIT_UNKNOWN)
    raise SystemExit(0)
