"""`tpopt evaluate`: one fixed plan -> memory, step time, finish time, cost and constraint checks."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

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
from tpopt.cli.render import evaluation_text, fit_lines
from tpopt.errors import InputError
from tpopt.models.evaluate import Evaluation, at_plan_batch
from tpopt.models.evaluate import evaluate as run
from tpopt.models.plan import Plan, Scenario, SearchSpace
from tpopt.optimizer import footing
from tpopt.optimizer.outer import batch_figures
from tpopt.optimizer.report import scenario_entry


@click.command()
@scenario_options
@plan_options
@click.option("--stage", help="Staged scenarios: the stage (name or number) to evaluate the plan on (default: each).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@handle_errors
def evaluate(stage: str | None, as_json: bool, **kw: Any) -> None:
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
    ev, chosen = as_solve_would(sc, plan_from(sc, kw), kw)
    d = {"scenario": scenario_entry(sc), **ev.as_dict()}
    d["footing"] = footing.of_evaluation(sc, d)
    if chosen:
        d["defaults_chosen"] = chosen
    echo_builtin_note(kw, as_json, d)
    if chosen and not as_json:
        click.echo(fit_lines(chosen_text(chosen)))
    if sc.task.critical_batch is not None or sc.task.ramp is not None or ev.plan.global_batch != sc.task.global_batch:
        d["batch"] = batch_figures(at_plan_batch(sc, ev.plan), ev)
        if not as_json:
            click.echo("\n".join(batch_lines(d)))
    click.echo(dump_json(d) if as_json else evaluation_text(d), nl=False)
    if not ev.feasible:
        raise SystemExit(EXIT_INFEASIBLE)


# plan fields a user rarely fixes whose [search] domain may list several values: flag -> (Plan field, domain)
# (the checkpoint schedule only: it moves the overhead, never the step's physics, so a layout stays the layout
# the flags describe; recompute and offload take the first listed value, as docs/commands.md says)
Domain = Callable[[SearchSpace], Sequence[Any]]  # a [search] domain (values of one Plan field's type)
CHOSEN: dict[str, tuple[str, Domain]] = {
    "save_mode": ("save_mode", lambda sp: sp.save_mode),
    "save_interval": ("save_interval_s", lambda sp: sp.save_interval_s)}


def as_solve_would(sc: Scenario, plan: Plan, kw: dict[str, Any]) -> tuple[Evaluation, dict[str, Any]]:
    """The plan with each unset field of CHOSEN whose [search] domain lists several values set as
    ``tpopt solve`` sets it for this layout: the combination with the lowest cost (then finish) among the
    feasible ones (the first listed when none is feasible), so that evaluating a solved layout gives the
    solved figures. Returns (evaluation, {flag: chosen value}); {} when nothing was open."""
    open_ = {flag: (field, dom(sc.search)) for flag, (field, dom) in CHOSEN.items()
             if kw.get(flag) is None and len(dom(sc.search)) > 1}
    if not open_:
        return run(sc, plan), {}
    best = None
    for combo in itertools.product(*(values for _, values in open_.values())):
        ev = run(sc, replace(plan, **{field: v for (field, _), v in zip(open_.values(), combo, strict=True)}))
        key = (not ev.feasible, ev.metrics["cost"], ev.metrics["finish_days"])
        if best is None or key < best[0]:
            best = (key, ev, combo)
    assert best is not None
    chosen = {flag: v for flag, v in zip(open_, best[2], strict=True)}
    return best[1], chosen


def chosen_text(chosen: dict[str, Any]) -> str:
    def show(flag: str, v: Any) -> str:
        if flag == "save_interval":
            return "auto" if not v else f"{v:,.0f} s"
        return str(v)

    items = ", ".join(f"{flag.replace('_', ' ')} {show(flag, v)}" for flag, v in chosen.items())
    flags = "/".join(f"--{flag.replace('_', '-')}" for flag in chosen)
    return (f"Defaults as tpopt solve chooses them for this layout: {items} (the cheapest of the scenario's "
            f"[search] values; {flags} fix them)")
