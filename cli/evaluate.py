"""`tpopt evaluate`: one fixed plan -> memory, step time, finish time, cost and constraint checks."""

from __future__ import annotations

import click
from tpopt.cli.choices import batch_lines, evaluate_staged
from tpopt.cli.common import (
    EXIT_INFEASIBLE,
    dump_json,
    echo_builtin_note,
    handle_errors,
    load_scenario_from,
    plan_from,
    plan_options,
    scenario_options,
)
from tpopt.cli.render import evaluation_text
from tpopt.errors import InputError
from tpopt.models.evaluate import at_plan_batch
from tpopt.models.evaluate import evaluate as run
from tpopt.optimizer.outer import batch_figures


@click.command()
@scenario_options
@plan_options
@click.option("--stage", help="Staged scenarios: the stage (name or number) to evaluate the plan on (default: each).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@handle_errors
def evaluate(stage, as_json, **kw):
    """Evaluate one fixed plan (the chapter's 10.6.1 table and every constraint).

    Exit code 3 when the plan violates a constraint (the report is printed all the same).

    Example: tpopt evaluate --cards 48   (the built-in design case)
    """

    sc = load_scenario_from(kw)
    if sc.market.offers:
        raise InputError("tpopt evaluate prices a plan at the [hardware] / [cost] price, not at an offer: evaluate the "
                         "scenario without the [market] table, or solve it with tpopt solve")
    if sc.stages:
        code = evaluate_staged(sc, plan_from(sc, kw), stage, as_json)
        if code:
            raise SystemExit(code)
        return
    ev = run(sc, plan_from(sc, kw))
    d = ev.as_dict()
    echo_builtin_note(kw, as_json, d)
    if sc.task.critical_batch is not None or sc.task.ramp is not None or ev.plan.global_batch != sc.task.global_batch:
        d["batch"] = batch_figures(at_plan_batch(sc, ev.plan), ev)
        if not as_json:
            click.echo("\n".join(batch_lines(d)))
    click.echo(dump_json(d) if as_json else evaluation_text(d), nl=False)
    if not ev.feasible:
        raise SystemExit(EXIT_INFEASIBLE)
