"""`tpopt calibrate`: fit an accelerator's performance parameters to measured step times."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import read_scenario_file, with_overrides
from tpopt.cli.common import (
    dump_json,
    handle_errors,
    load_scenario_from,
    overrides_from,
    plan_from,
    plan_options,
    scenario_options,
    scenario_source,
)
from tpopt.errors import InputError
from tpopt.models.units import GIB, parse_duration
from tpopt.optimizer import calibrate as C
from tpopt.optimizer import device
from tpopt.optimizer.commands import calibrate_runs, calibration_report, calibration_rows, measured_run
from tpopt.optimizer.runs import runs_from_csv, stacks_of_runs

CARDS_HELP = ("Card count of the plan that ran, whose step --measured-step gives (with the other plan flags; "
              "not used with --runs or --measure).")


@click.command()
@scenario_options
@plan_options(require_cards=False, cards_help=CARDS_HELP)
@click.option("--measured-step", help="Measured time of one optimizer step of the plan, e.g. 12.0s.")
@click.option("--runs", "runs_csv", type=click.Path(dir_okay=False),
              help="CSV of measured runs (plan columns and iteration_s; see tpopt/optimizer/runs.py).")
@click.option("--fit", "fit_names", help="Parameters to fit, comma-separated (default: every one the runs exercise "
                                         "of " + ", ".join(p.name for p in C.PARAMS) + ").")
@click.option("--measure", is_flag=True, help="Time GEMMs, HBM copies, a transformer block and (several GPUs) "
                                            "all-reduces on this machine's CUDA GPU and fit the scenario's "
                                            "accelerator to them (needs pip install 'tpopt[measure]').")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Directory for the calibrated performance.toml (use it with --catalog DIR).")
@click.option("--force", is_flag=True, help="Overwrite an existing performance.toml in --out.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@handle_errors
def calibrate(measured_step: str | None, runs_csv: str | None, fit_names: str | None, measure: bool, out_dir: str,
              force: bool, as_json: bool, **kw: Any) -> None:
    """Fit the accelerator's free performance parameters to measured steps and write a catalog override.

    Example: tpopt calibrate --scenario my.toml --cards 64 --tp 8 --measured-step 12.0s --out tuned/
    then:    tpopt solve --scenario my.toml --catalog tuned/
    """

    if sum(x for x in (measured_step is not None, runs_csv is not None, measure)) != 1:
        raise InputError("give one of --measured-step (with the plan flags), --runs FILE or --measure")
    C.target(out_dir, force)
    free = tuple(x.strip() for x in fit_names.split(",") if x.strip()) if fit_names else None
    if measure:
        measure_and_fit(kw, free, out_dir, force, as_json)
        return
    sc = load_scenario_from(kw)
    if runs_csv:
        raw = with_overrides(read_scenario_file(scenario_source(kw)), overrides_from(kw))
        stated = None if kw.get("scenario_path") else [k for k in ("seq_len", "global_batch") if kw.get(k)]
        runs = runs_from_csv(runs_csv, load_catalog(kw.get("catalog_dirs") or ()), base_raw=raw, task_keys=stated)
    else:
        if kw.get("cards") is None:
            raise InputError("--measured-step needs the plan that ran: give at least --cards")
        t = parse_duration(measured_step, "--measured-step", allow_zero=False)
        runs = [measured_run(sc, plan_from(sc, kw), t)]
    cal, path = calibrate_runs(runs, free, out_dir, force)
    emit(cal, path, out_dir, as_json)


def measure_and_fit(kw: dict[str, Any], free: tuple[str, ...] | None, out_dir: str, force: bool, as_json: bool) -> None:
    """--measure: open the GPU (one line, exit 2 without PyTorch or CUDA), time, fit, write, print."""
    dev = device.open_device()
    sc = load_scenario_from(kw)
    acc = next(iter(sc.systems))
    base = load_catalog(kw.get("catalog_dirs") or ()).perf(acc)
    cal = device.measure(dev, sc, acc, base, free)
    path = C.write_override(cal, out_dir, force=force, how=f"tpopt calibrate --measure on {dev.name}",
                            label="measured", covers=device.kernels_covered(dev.count))
    emit(cal, path, out_dir, as_json, f"{acc} from kernels timed on {dev.name} ({dev.count} GPU(s))")


def emit(cal: C.Calibration, path: Path, out_dir: str, as_json: bool, what: str = "") -> None:
    """Print a calibration (text or JSON, from the same figures)."""
    if as_json:
        click.echo(dump_json(calibration_report(cal, path)), nl=False)
        return
    rows = calibration_rows(cal)
    click.echo("\n".join(text_lines(cal, rows, what) + [f"Wrote {path}; use it with --catalog {out_dir}"]))


def text_lines(cal: C.Calibration, rows: list[dict[str, Any]], what: str = "") -> list[str]:
    what = what or f"{cal.accelerator} on {len(rows)} measured run(s)"
    lines = [f"Calibrated {what}:",
             "  (least squares on ln time, lognormal prior around the catalog's values; +- one posterior sigma)"]
    stacks = stacks_of_runs(cal.runs)
    lines += [f"  stack: {st['stack']} ({st['source']})" + (f" for {', '.join(st['runs'])}" if len(stacks) > 1 else "")
              for st in stacks]
    for e in cal.estimates:
        spec = C.BY_NAME[e.name]
        if not e.exercised:
            lines.append(f"  {e.name:20s} {spec.show(e.value):>9s}  {e.status}")
            continue
        pm = f"+- {spec.show(e.value * e.sigma)}"
        note = "" if e.identified else f"  {e.status}"
        bound = f"  (stopped at its {e.at_bound} bound)" if e.at_bound else ""
        lines.append(f"  {e.name:20s} {spec.show(e.value):>9s} {pm:12s} (prior {spec.show(e.prior)} "
                     f"+-{spec.prior_sigma * 100:.0f} %){note}{bound}")
    lines.append(f"  {'run':24s} {'measured':>10s} {'predicted':>10s} {'residual':>9s}")
    for r in rows:
        lines.append(f"  {r['run']:24s} {r['measured_s']:9.4g}s {r['predicted_s']:9.4g}s {r['error'] * 100:+8.2f}%")
    if cal.dof >= 1:
        lines.append(f"Residual spread: lognormal sigma of measured/predicted {cal.residual_sigma:.3f} "
                     f"({cal.dof} degree(s) of freedom)")
    else:
        lines.append(f"Residual spread: not estimable from {len(rows)} run(s) for {len(cal.identified)} identified "
                     f"parameter(s); {cal.residual_sigma:g} assumed (more runs than parameters estimate it)")
    for m in cal.memory:  # a run that ran is fitted: its memory is a residual of the model, not a refusal
        if not m.fits:
            lines.append(f"Memory residual: {m.run} ran, tpopt's model puts its peak at {m.predicted / GIB:.1f} GiB "
                         f"against {m.limit / GIB:.1f} usable ({m.ratio:.2f}x)")
    return lines
