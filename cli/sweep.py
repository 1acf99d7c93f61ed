"""`tpopt sweep`: the optimal plan at every point of a grid of inputs, and the cost/finish Pareto front.

Thin: options -> :func:`tpopt.optimizer.sweep.build_spec` -> :func:`run_sweep` -> tables / files / plots.
The ``[sweep]`` keys and the resume rules are documented in :mod:`tpopt.optimizer.sweep`.
"""

from __future__ import annotations

import csv
import io
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console, RenderableType
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from tpopt.catalogs.market import Market, grid_carbon
from tpopt.cli.common import (
    MODEL_HELP,
    CommandFn,
    SolverName,
    check_new_file,
    check_run_options,
    dump_json,
    echo_builtin_note,
    fail,
    handle_errors,
    load_scenario_from,
    scenario_source,
)
from tpopt.cli.html_report import sweep_page, write_answer_page
from tpopt.cli.inverse import sweep_loss_fronts
from tpopt.cli.plots import FORMATS as PLOT_FORMATS
from tpopt.cli.plots import refuse_existing
from tpopt.cli.progress_line import wanted
from tpopt.cli.render import console_text as render
from tpopt.cli.render import fit_lines
from tpopt.cli.request import time_limit_seconds
from tpopt.cli.sweep_plots import plot_breakdown as draw
from tpopt.cli.sweep_plots import plot_pareto
from tpopt.errors import InputError
from tpopt.files import write_atomic
from tpopt.models.market import tonnes_co2e
from tpopt.optimizer import backends
from tpopt.optimizer import sweep as sw
from tpopt.optimizer.result import Request
from tpopt.optimizer.sweep import case_label
from tpopt.optimizer.sweep.executor import parse_cluster, plain_tcp_note, require_dask
from tpopt.optimizer.sweep.rows import case_of
from tpopt.presentation import level_text, sweep_footing_lines

RANGE = "One value, a comma list or a range start:end:step"
#: ``--pareto energy``: the plans with energy, the accelerators without power figures, the PUE and its source.
Energy = tuple[list[dict[str, Any]], list[str], tuple[float, str]]


def sweep_input_options(fn: CommandFn) -> CommandFn:
    opts = [
        click.option("--scenario", "scenario_path", default=None, type=click.Path(dir_okay=False),
                     help="Scenario TOML file (its [sweep] table may hold the ranges) [default: the built-in "
                          "design case]."),
        click.option("--catalog", "catalog_dirs", multiple=True, type=click.Path(file_okay=False),
                     help="Extra catalog directory (repeatable)."),
        click.option("--model", help=MODEL_HELP),
        click.option("--hw", help="Accelerators, comma-separated; each is swept separately."),
        click.option("--deadline", help=f"Deadline. {RANGE}, e.g. 20d:40d:1d."),
        click.option("--reserved", help=f"Reserved days inside the deadline. {RANGE}, e.g. 3d,5d."),
        click.option("--tokens", help=f"Training tokens. {RANGE}, e.g. 50B:200B:50B."),
        click.option("--efficiency", help=f"Compute efficiency. {RANGE}, e.g. 30%:50%:5%."),
        click.option("--max-cards", help=f"Card cap. {RANGE}, e.g. 16:128:16."),
        click.option("--card-hour", help=f"Price per card-hour for every accelerator. {RANGE}, e.g. 0.4:0.8:0.1."),
        click.option("--max-cost", help=f"Budget cap. {RANGE}."),
        click.option("--global-batch", help=f"Global batch in sequences (a plan choice: every value competes on one "
                                            f"front, tokens from [task] critical_batch). {RANGE} or start:end:xK, "
                                            f"e.g. 256:4096:x2."),
        click.option("--seq-len", help=f"Tokens per sequence (a case of its own). {RANGE}, e.g. 4096,8192."),
        click.option("--usable-memory", help="Usable memory per card (fixed for the sweep), e.g. 22GiB."),
        click.option("--confidence", help="Confidence levels, e.g. 50%:99%:5% or 50%,95%,99%: cost against "
                                          "confidence (one proven solve per level; the other inputs single values)."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


class SweepSolverName(SolverName):
    """``tpopt sweep --solver``: the names ``tpopt solve`` takes, and ``auto``."""

    def names(self) -> tuple[str, ...]:
        return backends.sweep_names()


class _Bar(sw.Progress):
    """rich progress bar with ETA on stderr (only on a terminal); notes of what happens during the run
    (a worker died, a task is retried) on stderr unless --quiet."""

    def __init__(self, quiet: bool, live: bool = True) -> None:
        self.console = Console(stderr=True)
        self.quiet = quiet
        self.enabled = live and not quiet and self.console.is_terminal and wanted(sys.stderr)  # --json, TPOPT_QUIET
        self.bar: Progress | None = None

    def note(self, text: str) -> None:
        if self.quiet:
            return
        if self.bar is not None:
            self.bar.console.print(f"tpopt: {text}", markup=False, highlight=False)
        else:
            click.echo(f"tpopt: {text}", err=True)

    def start(self, total: int, done: int) -> None:
        if not self.enabled:
            return
        bar = Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TextColumn("points"),
                       TextColumn("{task.fields[best]}"), TimeElapsedColumn(), TextColumn("ETA"),
                       TimeRemainingColumn(), console=self.console)
        self.bar = bar
        self.best: float | None = None
        bar.start()
        self.task = bar.add_task("sweep", total=total, completed=done, best="")

    def advance(self, n: int, best: float | None = None) -> None:
        if self.bar is not None:
            if best is not None and (self.best is None or best < self.best):
                self.best = best
            self.bar.update(self.task, advance=n, best="" if self.best is None else f"best cost {self.best:,.0f}")

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


def _days(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def _range(lo: float, hi: float) -> str:
    return f"{lo:g} d" if lo == hi else f"{lo:g}-{hi:g} d"


def _layout(e: dict[str, Any]) -> str:
    text = f"ZeRO-{e['zero']} {e['tp']}/{e['pp']}/{e['dp']} mb {e['micro_batch']}x{e['grad_accum']}"
    if (e.get("cp") or 1) > 1:
        text += f" cp {e['cp']}"
    if e.get("recompute") not in (None, "none"):
        text += f" rc {e['recompute']}"
    if e.get("offload") not in (None, "none"):
        text += f" off {e['offload']}"
    if e.get("schedule"):
        text += f" {e['schedule']}"
    if (e.get("ep") or 1) > 1:  # MoE: expert parallelism and capacity (dropless when empty)
        text += f" EP {e['ep']}"
    if e.get("capacity_factor"):
        text += f" c {e['capacity_factor']:g}"
    return text


def front_table(front: list[dict[str, Any]], unit: str, show_case: bool, spec: sw.SweepSpec) -> Table:
    show_batch = len({e["global_batch"] for e in front}) > 1
    t = Table(title="Pareto front: cost vs finish time (layout = ZeRO, TP/PP/DP, micro-batch x accumulation)",
              title_justify="left", show_edge=False, pad_edge=False)
    cols = (["case"] if show_case else []) + ["accelerator", "cards"] + (["batch"] if show_batch else []) + \
        ["layout", "step s", "GiB/card", "finish d", f"cost {unit}",
         "optimal for deadlines" + (" (at that batch)" if show_batch else "")]
    for c in cols:
        t.add_column(c, justify="left" if c in ("case", "accelerator", "layout") or c.startswith("optimal")
                     else "right")
    for e in front:
        row = [case_label(case_of(e), spec)] if show_case else []
        row += [e["accelerator"], str(e["cards"])] + ([f"{e['global_batch']:,}"] if show_batch else [])
        row += [_layout(e), f"{e['step_s']:.1f}",
                f"{e['memory_per_card_gib']:.1f}", f"{e['finish_days']:.1f}", f"{e['cost']:,.0f}",
                _range(e["deadline_min_days"], e["deadline_max_days"])]
        t.add_row(*row)
    return t


def carbon_front(rows: list[dict[str, Any]], market: Market, grid: str | None) -> Energy:
    """``--pareto carbon``: the energy front at ``grid``'s PUE, each plan with tCO2e = MWh x gCO2e/kWh / 1,000
    (one grid's intensity: the carbon/cost front is the energy/cost front at that PUE)."""
    g, source, pue, pue_source = grid_carbon(market, grid)
    plans, missing = sw.energy_front(rows, market.power, pue)
    for p in plans:
        p["carbon_g_kwh"] = g
        p["tco2e"] = None if p["energy_mwh"] is None else tonnes_co2e(p["energy_mwh"], g)
    return plans, missing, (pue, f"{pue_source}; grid {grid}: {g:g} gCO2e/kWh ({source})")


def energy_table(plans: list[dict[str, Any]], unit: str, show_case: bool, spec: sw.SweepSpec,
                 pue: tuple[float, str]) -> Table:
    """Energy against cost per distinct plan of the swept points; ``*`` marks the energy/cost front."""
    t = Table(title=f"Energy vs cost (* on the front: no plan of its case uses less energy and costs less; energy "
                    f"at the site = PUE {pue[0]:g} x (cards x training W + hosts x host W) x finish)",
              title_justify="left", show_edge=False, pad_edge=False)
    carbon = any("tco2e" in e for e in plans)
    cols = ["", *(["case"] if show_case else []), "accelerator", "cards", "TP/PP/DP", "finish d", f"cost {unit}",
            "energy MWh", *(["tCO2e"] if carbon else []), "optimal for deadlines"]
    for c in cols:
        t.add_column(c, justify="left" if c in ("", "case", "accelerator") or c.startswith("optimal") else "right")
    for e in plans:
        energy = "-" if e["energy_mwh"] is None else f"{e['energy_mwh']:,.1f}"
        t.add_row("*" if e["front"] else "", *([case_label(tuple(e["case"]), spec)] if show_case else []),
                  e["accelerator"], str(e["cards"]), f"{e['tp']}/{e['pp']}/{e['dp']}", f"{e['finish_days']:.1f}",
                  f"{e['cost']:,.0f}", energy,
                  *([("-" if e["tco2e"] is None else f"{e['tco2e']:,.2f}")] if carbon else []),
                  _range(e["deadline_min_days"], e["deadline_max_days"]))
    return t


def summary_table(summary: list[dict[str, Any]], unit: str, show_case: bool, spec: sw.SweepSpec) -> Table:
    t = Table(title=f"Per accelerator (plans as cards / finish d / cost {unit})", title_justify="left",
              show_edge=False, pad_edge=False)
    no_answer = any(e["unknown"] or e["error"] for e in summary)
    cols = (["case"] if show_case else []) + ["accelerator", "points", "feasible"] + \
        (["no answer"] if no_answer else []) + ["earliest deadline d", "cheapest", "fastest", "cards chosen"]
    for c in cols:
        t.add_column(c, justify="right" if c in ("points", "feasible", "no answer", "earliest deadline d")
                     else "left")
    for e in summary:
        row = [case_label(case_of(e), spec)] if show_case else []

        def plan(p: dict[str, Any] | None) -> str:
            return "-" if p is None else f"{p['cards']} / {p['finish_days']:.1f} / {p['cost']:,.0f}"

        earliest = _days(e["earliest_deadline_days"])
        if e["feasible"] == 0 and e["fastest_possible_days"] is not None:
            earliest = f"none (fastest {e['fastest_possible_days']:.1f})"
        elif e["feasible"] == 0:
            earliest = "none" if e["unknown"] + e["error"] == 0 else "unknown"
        row += [e["accelerator"], str(e["points"]), str(e["feasible"])]
        if no_answer:
            row.append(str(e["unknown"] + e["error"]))
        row += [earliest, plan(e["cheapest"]), plan(e["fastest"]), ", ".join(str(c) for c in e["cards_chosen"]) or "-"]
        t.add_row(*row)
    return t


def console_text(*renderables: RenderableType) -> str:
    """The shared renderer at the output's width (COLUMNS, the terminal's, or 100 when not a terminal); the
    text columns (layout, plans, deadlines) wrap, the numbers never."""

    return render(*renderables)


def pins_text(pins: dict[str, Any], top: dict[str, Any]) -> str:
    """What pins a collapsed front (tpopt.optimizer.sweep.front_pins), one sentence."""
    first = pins["families"][0]
    each = ", ".join(f"{a} {v['with']:.1f} d -> {v['without']:.1f} d" for a, v in pins["fastest_days"].items())
    return (f"The front collapses to one plan ({top['accelerator']} x {top['cards']}): "
            f"{' and '.join(pins['families'])} pin{'s' if len(pins['families']) == 1 else ''} it on every "
            f"accelerator (the fastest plan without {first}: {each}).")


def result_text(result: sw.SweepResult, out: str | None, energy: Energy | None = None,
                pins: dict[str, Any] | None = None) -> str:
    """The sweep's terminal answer; ``pins``: what pins a collapsed front (:func:`sw.front_pins`, computed once by
    the command: its re-solves are not repeated for the page and the terminal)."""
    spec = result.spec
    sc = spec.base
    unit = next((r["cost_unit"] for r in result.rows if r["cost_unit"]), "USD")

    show_case = len({case_of(r) for r in result.rows}) > 1
    swept = ", ".join(f"{k} ({len(spec.hw) if k == 'hw' else len(spec.values[k])})" for k in spec.swept()) or "none"
    how = ", ".join(f"{n} failed" if k == "error" else f"{n} by {'one enumeration per group' if k == 'table' else k}"
                    for k, n in sorted(result.paths.items())) or "none solved"
    head = (f"tpopt sweep: {spec.name}: {sc.model.name}, {len(result.rows):,} points (swept: {swept}) on "
            f"{', '.join(spec.hw)}")
    status = (f"{result.computed:,} solved ({how}), {result.reused:,} reused"
              f"{' from ' + str(out) if out else ''}, {result.wall_s:.2f} s on {result.where}")
    parts: list[RenderableType] = [fit_lines(head), fit_lines(status), ""]  # wrapped here: a timing keeps its line
    front = result.front()
    unknown, errors, infeasible = result.count("unknown"), result.count("error"), result.count("infeasible")
    if front:
        parts += [front_table(front, unit, show_case, spec), ""]
        if pins:
            parts += [fit_lines(pins_text(pins, front[0])), ""]
    elif unknown or errors:
        why = ", ".join(x for x in (f"{unknown:,} reached the time limit without an answer (unknown)" if unknown
                                    else "", f"{errors:,} failed (error)" if errors else "",
                                    f"{infeasible:,} proven infeasible" if infeasible else "") if x)
        parts += [f"No plan found: {why}; infeasibility is not proven at every point.", ""]
    else:
        parts += ["No feasible plan at any point (proven).", ""]
    if energy is not None:
        plans, missing, pue = energy
        if plans:
            parts += [energy_table(plans, unit, show_case, spec, pue), ""]
        if missing:
            parts += [f"Energy: no power figures for {', '.join(missing)} (add \\[power.NAME] to a catalog "
                      "offers.toml)", ""]
        parts += [f"PUE {pue[0]:g}: {pue[1]}", ""] if plans else []
    parts.append(summary_table(result.summary(), unit, show_case, spec))
    foot = sweep_footing_lines(result.rows)
    parts += ["", *foot] if foot else []
    return console_text(*parts)


@click.command()
@sweep_input_options
@click.option("--solver", type=SweepSolverName(),
              help="auto (default): one exact enumeration per group when the space has <= 300k plans, else "
                   "CP-SAT per point; enumerate, cpsat, highs or pyomo:NAME (the MILP through Pyomo with solver "
                   "NAME: highs, scip, cbc, glpk, gurobi, ... where installed) for every point.")
@click.option("--time-limit", help="Solver time limit per point: 60s, 2min, or seconds (default 60s).")
@click.option("--workers", type=int, help="Local worker processes (default: the core count).")
@click.option("--cluster", help="Run the points on Dask instead: local:N (a local cluster of N worker processes), "
                                "a scheduler address tcp://host:8786, or a scheduler file (.json). Needs "
                                "pip install 'tpopt[distributed]'.")
@click.option("--out", "out", type=click.Path(), help="Results file, one row per point: .csv, .parquet or .json. "
                                                      "Re-running with the same file resumes.")
@click.option("--force", is_flag=True, help="Overwrite --out even if it holds something else, and an existing "
                                           "--plot or --plot-breakdown file.")
@click.option("--plot", "plot", type=click.Path(), help="Cost vs finish plot (.pdf, .svg or .png).")
@click.option("--plot-breakdown", "plot_breakdown", type=click.Path(),
              help="Finish-time breakdown bars (.pdf, .svg or .png) of the front plans or of --breakdown-cards.")
@click.option("--breakdown-cards", help="Card counts for --plot-breakdown, e.g. 32,48 (default: the front).")
@click.option("--pareto", "pareto", type=click.Choice(["energy", "carbon"]),
              help="energy: also print each swept plan's energy (MWh, from the market catalog's [power] figures and "
                   "its default PUE) against its cost, the energy/cost front marked; carbon: the same at the PUE "
                   "and grid carbon intensity of --grid, with tCO2e.")
@click.option("--grid", help="--pareto carbon: the energy.toml region whose grid prices the carbon "
                             "(e.g. gcp/us-central1).")
@click.option("--quiet", "-q", is_flag=True,
              help="No progress bar or notes on stderr (also: TPOPT_QUIET=1 for the bar).")
@click.option("--loss-front", "loss_front", help="Sizes (a family such as qwen3, or catalog names): sweep the "
              "budget and the deadline for the least predicted loss instead (tpopt inverse --front; --plot draws it).")
@click.option("--loss-tokens", default="10B:2T:16", show_default=True,
              help="--loss-front: the token values to choose among, LO:HI[:COUNT] in equal ratios or a comma list.")
@click.option("--law", default="chinchilla", show_default=True, help="--loss-front: the scaling-law fit.")
@click.option("--json", "as_json", is_flag=True, help="Print the front and summary as JSON.")
@click.option("--html", "html", type=click.Path(dir_okay=False),
              help="Also write the front as one self-contained HTML page (hover a point for its plan; opens offline).")
@handle_errors
def sweep(solver: str | None, time_limit: str | float | None, workers: int | None, cluster: str | None,
          out: str | None, force: bool, plot: str | None, plot_breakdown: str | None, breakdown_cards: str | None,
          pareto: str | None, grid: str | None, quiet: bool, loss_front: str | None, loss_tokens: str, law: str,
          as_json: bool, html: str | None, **kw: Any) -> None:
    """Sweep deadlines, hardware and other inputs; report the cost vs finish-time Pareto front.

    Example: tpopt sweep --scenario examples/design-case-sweep.toml --hw rtx4090,h100-sxm,a100-80gb-sxm
    --deadline 10d:60d:1d --out results.csv --plot pareto.svg
    """

    if workers is not None and workers < 1:
        raise InputError("--workers must be at least 1")
    if cluster is not None:
        if workers is not None:
            raise InputError("--workers sets local worker processes; with --cluster the cluster's workers run the "
                             "points (local:N for N local ones)")
        kind, where = parse_cluster(cluster)
        require_dask()
        warning = plain_tcp_note(str(where)) if kind == "address" and not quiet else None
        if warning:
            click.echo(f"tpopt: note: {warning}", err=True)
    if time_limit is not None:
        time_limit = time_limit_seconds(time_limit)
        check_run_options(time_limit)  # finite, positive, at most 7 days (as every --time-limit)
    if loss_front is not None:
        for flag, given in (("--plot-breakdown", plot_breakdown), ("--cluster", cluster), ("--pareto", pareto),
                            ("--html", html), ("--out", out), ("--workers", workers)):
            if given:
                raise InputError(f"{flag} is not used by sweep --loss-front; drop it")
        return sweep_loss_fronts(kw, loss_front, loss_tokens, law, backends.DEFAULT if solver in (None, "auto")
                                 else solver, time_limit, plot, as_json, force)
    if breakdown_cards and not plot_breakdown:
        raise InputError("--breakdown-cards needs --plot-breakdown")
    if kw.get("confidence"):
        for flag, given in (("--plot", plot), ("--plot-breakdown", plot_breakdown), ("--cluster", cluster),
                            ("--pareto", pareto), ("--html", html)):
            if given:
                raise InputError(f"{flag} is not used by sweep --confidence (one solve per level); drop it")
        if out:
            check_confidence_out(out, force)
        return _confidence_sweep(solver, time_limit, as_json, kw, out)
    cli = {k: kw.get(k) for k in ("hw", "deadline", "reserved", "tokens", "efficiency", "max_cards", "card_hour",
                                  "max_cost", "global_batch", "seq_len")}
    cli.update(solver=solver, breakdown_cards=breakdown_cards, time_limit=time_limit)
    spec = sw.build_spec(scenario_source(kw), cli, kw.get("catalog_dirs") or (),
                         fixed={"hardware.usable_memory": kw.get("usable_memory")})
    for path, what in ((plot, "--plot"), (plot_breakdown, "--plot-breakdown")):
        if path:
            sw.check_output_path(path, what, PLOT_FORMATS)
            refuse_existing(path, what, force)
    if out:
        sw.check_output_path(out)
    if pareto == "carbon" and spec.catalog is not None:
        grid_carbon(spec.catalog.market, grid)  # a bad --grid is one line before the sweep runs
    elif grid:
        raise InputError("--grid goes with --pareto carbon")
    if html:
        check_new_file(html, "--html", force)
    bar = _Bar(quiet, live=not as_json)
    result = sw.run_sweep(spec, out=out, force=force, workers=workers, cluster=cluster, progress=bar)
    said: list[str] = []  # the page repeats the notes (what pins a collapsed front)

    def note(text: str) -> None:
        said.append(text)
        bar.note(text)

    for text in result.resume.notes(out, len(result.rows)):
        note(text)
    if result.retried:
        note(f"{result.retried} task(s) failed once (a worker died or raised) and were run again")
    unknown, unproven = result.count("unknown"), result.count("feasible")
    if unknown or unproven:
        note(f"{unknown + unproven:,} point(s) reached the time limit ({spec.time_limit:g} s): {unknown:,} without an "
             f"answer (status unknown), {unproven:,} with a plan not proven optimal (feasible); raise --time-limit "
             f"and re-run{' with the same --out' if out else ''} to solve them again")
    unit = next((r["cost_unit"] for r in result.rows if r["cost_unit"]), "USD")
    if plot:
        plot_pareto(sw.plot_series(result), plot)
    if plot_breakdown:
        bars, notes = sw.breakdown_bars(result, spec.breakdown_cards)
        for n in notes:
            note(n)
        if not bars:
            note("--plot-breakdown: no plan to draw (no feasible front plan or card count)")
        elif not spec.breakdown_cards:
            note(f"--plot-breakdown: drawing the {len(bars)} Pareto-front plan(s) (the default; "
                 f"--breakdown-cards 32,48 draws chosen card counts instead)")
        lo, hi = spec.deadline_range_days
        draw(bars, plot_breakdown, spec.plot_deadline_days if lo == hi else (lo, hi),
             f"{spec.name}: finish-time breakdown", unit)
    energy = None
    if pareto == "energy":
        market = spec.catalog.market if spec.catalog is not None else None
        pue = market.default_pue if market is not None else (1.2, "")
        energy = (*sw.energy_front(result.rows, market.power if market is not None else {}, pue[0]), pue)
    elif pareto == "carbon" and spec.catalog is not None:
        energy = carbon_front(result.rows, spec.catalog.market, grid)
    pins = sw.front_pins(result)  # once: its re-solves serve the JSON, the page and the terminal
    d: dict[str, Any] = {}
    if as_json or html:  # the JSON document
        d = {"scenario": spec.name, "fingerprint": spec.fingerprint, "points": len(result.rows),
             "computed": result.computed, "reused": result.reused, "out": out,
             "statuses": {k: result.count(k) for k in sw.STATUSES},
             "front": result.front(), "summary": result.summary(), "front_pins": pins}
        if energy is not None:
            d["energy"] = {"plans": energy[0], "no_power_figures": energy[1], "pue": energy[2][0],
                           "pue_source": energy[2][1], **({"grid": grid} if pareto == "carbon" else {})}
    if html:  # the --json document, drawn, and the terminal's text
        pinned = [pins_text(d["front_pins"], d["front"][0])] if d.get("front_pins") and d["front"] else []
        write_answer_page(html, lambda: sweep_page(d, pinned + said, result_text(result, out, energy, pins)))
    if as_json:
        echo_builtin_note(kw, True, d)
        click.echo(dump_json(d), nl=False)
    else:
        echo_builtin_note(kw)
        click.echo(fit_lines(result_text(result, out, energy, pins)), nl=False)
    errors = result.count("error")
    if errors:
        fail(f"{errors:,} point(s) failed twice (a worker died or raised; status 'error'"
             f"{', the reason in the note column' if out else ''}); re-run{' with the same --out' if out else ''} "
             f"to solve them again", 1)


CONFIDENCE_COLUMNS = ("confidence", "status", "cards", "cost", "cost_unit", "finish_q_days", "probability_by_deadline")


def check_confidence_out(out: str, force: bool) -> None:
    """``sweep --confidence --out``: a .csv or .json file (one row per level), checked before any solve."""
    if Path(out).suffix.lower() not in (".csv", ".json"):
        raise InputError(f"--out: {out!r} must end in .csv or .json with --confidence (one row per level)")
    check_new_file(out, "--out", force)


def confidence_file(out: str, doc: dict[str, Any]) -> str:
    """The bytes of ``sweep --confidence --out``: the --json document, or CSV of :data:`CONFIDENCE_COLUMNS`."""
    if Path(out).suffix.lower() == ".json":
        return dump_json(doc)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CONFIDENCE_COLUMNS)
    for r in doc["rows"]:
        w.writerow(["" if r.get(c) is None else r.get(c) for c in CONFIDENCE_COLUMNS])
    return buf.getvalue()


def _confidence_sweep(solver: str | None, time_limit: float | None, as_json: bool, kw: dict[str, Any],
                      out: str | None = None) -> None:
    """`tpopt sweep --confidence 50%:99%:5%`: the optimum's cost at each confidence level."""
    from tpopt.optimizer import confidence as C  # lazy: start-up time (SciPy)
    from tpopt.optimizer import question as Q  # lazy: start-up time (SciPy)

    levels = C.parse_levels(kw["confidence"])
    sc = load_scenario_from(dict(kw, confidence=None), {"cost.card_hour": kw.get("card_hour"),
                                                        "cost.max_cost": kw.get("max_cost")})
    req = Request(time_limit=60.0 if time_limit is None else float(time_limit))
    backend = backends.DEFAULT if solver in (None, "auto") else solver
    rows = Q.cost_against_confidence(sc, levels, backend, req)
    if out:
        write_atomic(out, confidence_file(out, {"scenario": sc.name, "rows": rows}), "--out")
        click.echo(f"tpopt: wrote {out} ({len(rows)} confidence level(s))", err=True)
    if as_json:
        echo_builtin_note(kw, True, {})
        click.echo(dump_json({"scenario": sc.name, "rows": rows}), nl=False)
        return
    echo_builtin_note(kw)
    lines = [f"tpopt sweep: {sc.name}: cost against confidence, deadline {sc.task.deadline_s / 86400:g} d",
             "confidence   status        cards        cost   finish at level   P(by deadline)"]
    for r in rows:
        if r["cost"] is None:
            lines.append(f"{level_text(r['confidence']):>11}   {r['status']:<12}")
            continue
        lines.append(f"{level_text(r['confidence']):>11}   {r['status']:<12} {r['cards']:>6,} {r['cost']:>11,.0f} "
                     f"{r['finish_q_days']:>15.2f} d {100 * r['probability_by_deadline']:>14.1f} %")
    click.echo("\n".join(lines))
