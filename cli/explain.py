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

from tpopt.cli.common import (
    EXIT_INFEASIBLE,
    EXIT_UNKNOWN,
    dump_json,
    echo_builtin_note,
    handle_errors,
    load_scenario_from,
    plan_from,
    plan_options,
    scenario_options,
)
from tpopt.cli.confidence import reachable_line
from tpopt.cli.render import fit_lines, progress_status
from tpopt.cli.request import raw_and_catalog, request_from, solve_options
from tpopt.errors import InputError
from tpopt.models import variables as V
from tpopt.optimizer import backends
from tpopt.optimizer.confidence import reachable
from tpopt.optimizer.explain import explain_plan, explain_request, sensitivities
from tpopt.presentation import infeasible_lines, plan_lines, request_lines, sensitivity_lines

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
@handle_errors
def explain(sensitivity: bool, as_json: bool, **kw: Any) -> None:
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
    sc = load_scenario_from(kw, {"cost.max_cost": kw.get("max_cost")})
    if sc.market.offers:
        raise InputError("tpopt explain does not choose among [market] offers yet: tpopt solve lists every offer's "
                         "best plan; explain the scenario without the [market] table")
    req = request_from(kw)
    backend = backends.resolve(kw["solver"])  # resolved once: explain holds the Solver
    if kw.get("cards") is None:
        given = [k for k in PLAN_FLAGS if kw.get(k) is not None]
        if given:
            raise InputError(f"{V.flag_of(given[0])} describes a plan: give --cards too (or drop it to explain the "
                             "request)")
        raw, catalog = raw_and_catalog(kw)
        with progress_status("tpopt explain") as tell:
            out = explain_request(sc, backend, req, raw=raw, catalog=catalog, progress=tell)
        if out["status"] not in ("optimal", "feasible"):
            echo_builtin_note(kw, as_json, out)
            text = infeasible_lines(out, sc, "explain")
            if sc.task.confidence is not None and out["status"] == "infeasible":  # which confidence is reachable
                out["reachable_confidence"] = reachable(sc, backend, req)
                text.append(reachable_line(sc.task.confidence, out["reachable_confidence"]))
            click.echo(dump_json(out) if as_json else fit_lines("\n".join(text)) + "\n", nl=False)
            raise SystemExit(EXIT_INFEASIBLE if out["status"] == "infeasible" else EXIT_UNKNOWN)
        if sensitivity:
            out["sensitivities"] = sensitivities(sc, backend, req)
        lines = request_lines(out, sc)
        code = 0
    else:
        plan = plan_from(sc, kw)
        out = explain_plan(sc, plan, backend, req)
        if sensitivity:
            out["sensitivities"] = sensitivities(sc, backend, req)
        lines = plan_lines(out, sc)
        code = 0 if out["status"] == "feasible" else EXIT_INFEASIBLE
    if sensitivity:
        sl = sensitivity_lines(out["sensitivities"])
        lines += [""] + (sl or ["Sensitivities: the request has no feasible plan."])
    echo_builtin_note(kw, as_json, out)
    click.echo(dump_json(out) if as_json else fit_lines("\n".join(lines)) + "\n", nl=False)
    if code:
        raise SystemExit(code)
