"""`tpopt simulate` and `tpopt replan`: the whole-run simulator against the analytic finish-time law, and
re-planning a run that is under way. Parsing and rendering only (models/simulate.py, optimizer/confidence.py)."""

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
    scenario_options,
)
from tpopt.cli.progress_line import live_progress
from tpopt.cli.render import fit_lines
from tpopt.cli.request import request_from, solve_options
from tpopt.errors import InputError
from tpopt.models import families as F
from tpopt.models.units import DAY, fmt_count, parse_duration, parse_fraction
from tpopt.optimizer import question as Q
from tpopt.optimizer.commands import MAX_SIMULATED_RUNS, simulation
from tpopt.optimizer.confidence import clock_stop
from tpopt.presentation import level_text

MAX_RUNS = MAX_SIMULATED_RUNS


@click.command()
@scenario_options
@solve_options
@click.option("--runs", default="10000", show_default=True, help="Simulated whole runs (1 to 1,000,000).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@handle_errors
def simulate(runs: str, as_json: bool, **kw: Any) -> None:
    """Simulate the optimal plan's whole run (seeded: --seed) and compare its quantiles with the analytic law.

    Example: tpopt simulate --confidence 95% --runs 10000
    """
    try:
        n = int(runs)
    except ValueError:
        raise InputError(f"--runs {runs!r} is not a whole number") from None
    if not 1 <= n <= MAX_RUNS:
        raise InputError(f"--runs must lie in 1..{MAX_RUNS:,}, got {n}")
    sc = load_scenario_from(kw, {"cost.max_cost": kw.get("max_cost")})
    req = request_from(kw)
    with live_progress("tpopt simulate", req.clock, as_json):
        answer = simulation(sc, kw["solver"], req, n, kw["seed"])
    if not as_json:
        echo_builtin_note(kw)
    out = answer.report
    if out is None:
        if answer.status != "infeasible":  # cut short, not proven: the limit's own exit code
            click.echo(f"tpopt simulate: {sc.name}: time limit reached before a plan was found ({answer.status}); "
                       "raise --time-limit")
            raise SystemExit(EXIT_UNKNOWN)
        click.echo(f"tpopt simulate: {sc.name}: no feasible plan ({answer.status}); nothing to simulate")
        raise SystemExit(EXIT_INFEASIBLE)
    rows = out["quantiles"]
    if as_json:
        echo_builtin_note(kw, as_json, out)
        click.echo(dump_json(out), nl=False)
        return
    lines = [f"tpopt simulate: {sc.name}: {out['plan']['accelerator']} x {out['plan']['cards']}, {n:,} runs, seed "
             f"{kw['seed']}",
             "level   analytic d   simulated d   difference"]
    for row in rows:
        a, s = row["analytic_days"], row["simulated_days"]
        lines.append(f"P{100 * row['level']:<5g} {a:>10.3f} {s:>13.3f} {100 * (s / a - 1):>+11.2f} %")
    p = out["probability_by_deadline"]
    deadline = F.limit(F.DEADLINE, sc) / DAY
    lines.append(f"P(finish <= deadline {deadline:.1f} d): analytic {100 * p['analytic']:.2f} %, "
                 f"simulated {100 * p['simulated']:.2f} %")
    lines.append("events per run (failures, rollbacks, fail-slow, preemptions, days without spot capacity): "
                 f"{out['events_per_run']:.1f}")
    click.echo("\n".join(lines))


@click.command()
@scenario_options
@solve_options
@click.option("--done", required=True, help="Share of the tokens trained so far, e.g. 41%.")
@click.option("--elapsed", required=True, help="Wall time since the start, e.g. 12d.")
@click.option("--cards-held", default=None, help="Cards the run holds now (default: none held).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@handle_errors
def replan(done: str, elapsed: str, cards_held: str | None, as_json: bool, **kw: Any) -> None:
    """Re-solve the rest of a run under way; say whether to stay, add or release cards.

    Example: tpopt replan --confidence 95% --done 41% --elapsed 12d --cards-held 48
    """
    frac = parse_fraction(done, "--done", allow_zero=True, maximum=1.0)
    spent = parse_duration(elapsed, "--elapsed")
    held = None
    if cards_held is not None:
        try:
            held = int(cards_held)
        except ValueError:
            raise InputError(f"--cards-held {cards_held!r} is not a whole number") from None
        if held < 1:
            raise InputError("--cards-held must be at least 1")
    sc = load_scenario_from(kw, {"cost.max_cost": kw.get("max_cost")})
    out = Q.replan(sc, frac, spent, held, kw["solver"], request_from(kw))
    echo_builtin_note(kw, as_json, out)
    if as_json:
        click.echo(dump_json(out), nl=False)
        _replan_exit(out["decision"])
        return
    lines = [f"tpopt replan: {sc.name}: {100 * frac:.1f} % done after {spent / DAY:.1f} d; "
             f"{fmt_count(out['tokens_left'])} tokens and {out['days_left']:.2f} d left "
             f"(reserved {out['reserved_days_left']:.2f} d, the reserved time's share of the time left), confidence "
             f"{level_text(out['confidence'])}" + (" (the default; --confidence sets it)" if sc.task.confidence is None
                                                   else "")]
    for key, name in (("best", "cheapest remainder"), ("stay", "on the cards held")):
        e = out.get(key)
        if e is not None:
            lines.append(f"  {name}: {e['plan']['accelerator']} x {e['cards']}, finish {e['finish_days']:.2f} d, "
                         f"{e['cost']:,.0f} {e['cost_unit']}")
        elif key == "stay" and held is not None:
            lines.append(f"  on the cards held: no plan meets the rest at {level_text(out['confidence'])}")
    if out.get("layout_change_s"):
        lines.append(f"  restart into the new layout: +{out['layout_change_s']:.0f} s (the checkpoint read again)")
    if out["decision"] == "not decided":
        lines.append("Contingency: not decided within the time limit (no plan found, none ruled out)")
    elif out["decision"] == "none":
        why = out.get("reachable_undecided") or clock_stop()
        reach = (f"the highest reachable was {why}" if out["reachable"] is None
                 else "no plan reaches even 1 %" if out["reachable"] <= 0
                 else f"the highest reachable is {100 * out['reachable']:.1f} %")
        lines.append(f"Contingency: nothing restores {level_text(out['confidence'])}; {reach}")
    else:
        lines.append(f"Contingency: {out['decision']}")
    click.echo(fit_lines("\n".join(lines)))
    _replan_exit(out["decision"])


def _replan_exit(decision: str) -> None:
    """Exit 3 when nothing restores the confidence, 4 when the time limit left it undecided (text and JSON)."""
    if decision == "none":
        raise SystemExit(EXIT_INFEASIBLE)
    if decision == "not decided":
        raise SystemExit(EXIT_UNKNOWN)
