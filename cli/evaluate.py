"""`tpopt evaluate`: one fixed plan -> memory, step time, finish time, cost and constraint checks."""

from __future__ import annotations

import click

from tpopt.cli.common import EXIT_INFEASIBLE, dump_json, echo_builtin_note, handle_errors, load_scenario_from, \
    plan_from, plan_options, scenario_options
from tpopt.cli.render import evaluation_text


@click.command()
@scenario_options
@plan_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@handle_errors
def evaluate(as_json, **kw):
    """Evaluate one fixed plan (the chapter's 10.6.1 table and every constraint).

    Exit code 3 when the plan violates a constraint (the report is printed all the same).

    Example: tpopt evaluate --cards 48   (the built-in design case)
    """
    from tpopt.models.evaluate import evaluate as run

    sc = load_scenario_from(kw)
    ev = run(sc, plan_from(sc, kw))
    d = ev.as_dict()
    echo_builtin_note(kw, as_json, d)
    click.echo(dump_json(d) if as_json else evaluation_text(d), nl=False)
    if not ev.feasible:
        raise SystemExit(EXIT_INFEASIBLE)
