"""`tpopt calibrate`: fit an accelerator's performance parameters to measured step times."""

from __future__ import annotations

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
from tpopt.models.units import parse_duration
from tpopt.optimizer import calibrate as C
from tpopt.optimizer.runs import runs_from_csv


@click.command()
@scenario_options
@plan_options(require_cards=False)
@click.option("--measured-step", help="Measured time of one optimizer step of the plan, e.g. 12.0s.")
@click.option("--runs", "runs_csv", type=click.Path(dir_okay=False),
              help="CSV of measured runs (plan columns and iteration_s; see tpopt/optimizer/runs.py).")
@click.option("--fit", "fit_names", help="Parameters to fit, comma-separated (default: one per run, in the order "
                                         "gemm_efficiency, memory_efficiency, kernel_overhead).")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Directory for the calibrated performance.toml (use it with --catalog DIR).")
@click.option("--force", is_flag=True, help="Overwrite an existing performance.toml in --out.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@handle_errors
def calibrate(measured_step, runs_csv, fit_names, out_dir, force, as_json, **kw):
    """Fit the accelerator's free performance parameters to measured steps and write a catalog override.

    Example: tpopt calibrate --scenario my.toml --cards 64 --tp 8 --measured-step 12.0s --out tuned/
    then:    tpopt solve --scenario my.toml --catalog tuned/
    """

    if (measured_step is None) == (runs_csv is None):
        raise InputError("give --measured-step (with the plan flags) or --runs FILE, not both")
    sc = load_scenario_from(kw)
    if runs_csv:
        raw = with_overrides(read_scenario_file(scenario_source(kw)), overrides_from(kw))
        runs = runs_from_csv(runs_csv, load_catalog(kw.get("catalog_dirs") or ()), base_raw=raw)
    else:
        if kw.get("cards") is None:
            raise InputError("--measured-step needs the plan that ran: give at least --cards")
        t = parse_duration(measured_step, "--measured-step", allow_zero=False)
        plan = plan_from(sc, kw)
        name = f"{plan.accelerator} x {plan.cards} (tp {plan.tp}, pp {plan.pp}, mb {plan.micro_batch})"
        runs = [C.MeasuredRun(name, sc, (plan,), t)]
    accs = list(dict.fromkeys(r.accelerator for r in runs))
    if len(accs) != 1:
        raise InputError(f"the runs use several accelerators ({', '.join(accs)}); calibrate one at a time")
    free = tuple(x.strip() for x in fit_names.split(",") if x.strip()) if fit_names else None
    cal = C.fit(runs, accs[0], free)
    path = C.write_override(cal, out_dir, force=force)
    rows = [{"run": r.name, "measured_s": r.measured_step_s, "predicted_s": p, "error": p / r.measured_step_s - 1}
            for r, p in zip(cal.runs, cal.predicted_s, strict=False)]
    params = {n: {"fitted": float(getattr(cal.perf, n)), "prior": float(getattr(cal.prior, n))} for n in cal.fitted}
    if as_json:
        click.echo(dump_json({"accelerator": cal.accelerator, "parameters": params, "runs": rows,
                              "written": str(path)}), nl=False)
        return
    lines = [f"Calibrated {cal.accelerator} on {len(rows)} measured run(s):"]
    for n, v in params.items():
        unit, scale = ("us", 1e6) if n == "kernel_overhead" else ("", 1.0)
        lines.append(f"  {n:18s} {v['fitted'] * scale:9.4g}{unit}  (was {v['prior'] * scale:.4g}{unit})")
    lines.append(f"  {'run':24s} {'measured':>10s} {'predicted':>10s} {'residual':>9s}")
    for r in rows:
        lines.append(f"  {r['run']:24s} {r['measured_s']:9.3f}s {r['predicted_s']:9.3f}s {r['error'] * 100:+8.2f}%")
    worst = max(abs(r["error"]) for r in rows)
    if worst > 0.01:
        lines.append(f"Note: a residual of {worst * 100:.1f} % remains: the fitted parameters reached their bounds "
                     "or the runs disagree (fit more parameters with --fit, or check the plan flags).")
    lines.append(f"Wrote {path}; use it with --catalog {out_dir}")
    click.echo("\n".join(lines))
