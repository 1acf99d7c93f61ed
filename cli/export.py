"""`tpopt export --format megatron|nemo|torchtitan|deepspeed`: a plan as a framework's launch configuration.

The plan is the one ``tpopt evaluate`` takes (the same scenario and plan flags; unset checkpoint choices decided
as ``tpopt solve`` decides them), the ``plan`` object of a ``tpopt solve --json`` / ``tpopt evaluate --json``
report (``--plan FILE``, with the scenario it was solved on), or -- with neither -- the plan ``tpopt solve``
finds for the scenario (its defaults: cost, the default solver, seed 0, one worker, 60 s). A staged scenario
exports one file per stage. ``--launch FILE`` also writes a torchrun / Slurm launch script. Parsing and file
handling only: the mapping is :mod:`tpopt.frameworks`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from tpopt.catalogs.scenario import read_scenario_file
from tpopt.catalogs.tables import loads_json, read_text_capped
from tpopt.cli.common import (
    EXIT_UNKNOWN,
    builtin_note,
    check_new_file,
    fail,
    handle_errors,
    load_scenario_from,
    plan_from,
    plan_options,
    scenario_options,
)
from tpopt.cli.evaluate import as_solve_would
from tpopt.cli.request import raw_and_catalog, request_from, time_limit_option
from tpopt.errors import InputError
from tpopt.files import write_atomic
from tpopt.frameworks import FORMATS, export_notes, export_text, launch_script, plan_from_report
from tpopt.models import variables as V
from tpopt.models.evaluate import Evaluation
from tpopt.models.plan import Plan, Scenario
from tpopt.optimizer import backends
from tpopt.optimizer import plan as P
from tpopt.optimizer.outer import stage_scenarios
from tpopt.optimizer.result import Status

SOLVE_DEFAULTS = {"objective": "cost", "time_limit": "60s", "seed": 0, "workers": 1}
"""`tpopt solve`'s defaults (cli/request.py solve_options): the plan export solves for without --plan or flags."""

Exported = tuple[str, Scenario, Evaluation]  # (stage name, "" unstaged; its scenario; the evaluated plan)


@click.command()
@click.option("--format", "fmt", type=click.Choice(FORMATS), required=True,
              help="megatron: Megatron-LM arguments; nemo: Megatron-Bridge recipe overrides; torchtitan: a TOML "
                   "job config; deepspeed: a config JSON.")
@click.option("--plan", "plan_path", type=click.Path(dir_okay=False),
              help="A tpopt solve --json (or evaluate --json) report; its plan is exported (give the same "
                   "--scenario it was solved on). Without it, the plan flags below fix the plan; with neither, "
                   "export solves the scenario as tpopt solve does and exports its plan.")
@click.option("--out", type=click.Path(dir_okay=False),
              help="Write to this file instead of stdout (a staged scenario: one file per stage, NAME.STAGE.EXT).")
@click.option("--launch", type=click.Path(dir_okay=False),
              help="Also write a bash launch script for the exported file (torchrun on each node, or sbatch it: "
                   "nodes, GPUs per node, environment, data / tokenizer / checkpoint placeholders); needs --out.")
@click.option("--force", is_flag=True, help="Overwrite --out / --launch if they exist.")
@scenario_options
@plan_options(require_cards=False)
@time_limit_option("Time limit of the solve for the plan, where neither --plan nor plan flags give one: 60s, 5min, "
                   "or seconds.")
@handle_errors
def export(fmt: str, plan_path: str | None, out: str | None, launch: str | None, force: bool, **kw: Any) -> None:
    """Write a plan as a training framework's own launch configuration, checked against that framework's
    argument definitions (catalogs/frameworks/*.toml: source file, version and line of each). A plan feature
    the framework cannot express is an error naming it (exit 2).

    Example: tpopt export --format megatron --hw h100-sxm --cards 64 --tp 8
    """
    if launch and not out:
        raise InputError("--launch runs the exported file: give --out FILE too")
    if launch and out and Path(launch).resolve() == Path(out).resolve():
        raise InputError(f"--launch {launch} is the --out file: the script would replace the configuration it "
                         "runs; give it another name")
    refuse_scale_out(kw.get("scenario_path"))
    sc = load_scenario_from(kw)
    note = builtin_note(kw)  # printed once the export succeeded: an error stays one line
    given = [k for k in V.PLAN_FLAGS if kw.get(k) is not None]  # every plan flag (models/variables.py)
    if plan_path and given:
        raise InputError(f"--plan fixes the plan: drop {V.flag_of(given[0])}")
    if plan_path:
        items = _of_report(sc, _read_report(plan_path), kw)
    elif given:
        if kw.get("cards") is None:
            raise InputError("give --cards with the other plan flags (or no plan flag: export solves the scenario)")
        items = _on_stages(sc, plan_from(sc, kw), kw)
    else:
        items = _solved(sc, kw)
    if len(items) > 1 and not out:
        raise InputError(f"the scenario has {len(items)} stages, one file each: give --out FILE")
    texts = [export_text(fmt, s, ev) for _, s, ev in items]  # every stage's text before any file: errors first
    outs = [_stage_path(out, name) for name, _, _ in items] if out else []
    launches = [_stage_path(launch, name) for name, _, _ in items] if launch else []
    for path, flag in [(p, "--out") for p in outs] + [(p, "--launch") for p in launches]:
        check_new_file(path, flag, force)  # the no-overwrite rule of every output, before any is written
    scripts = [launch_script(fmt, s, ev, o) for (_, s, ev), o in zip(items, outs, strict=True)] if launch else []
    for path, text in zip(outs, texts if out else [], strict=True):  # before any note: a failed write is one line
        write_atomic(path, text, "--out")
    for path, text in zip(launches, scripts, strict=True):
        write_atomic(path, text, "--launch")
        Path(path).chmod(0o755)
    if note:  # on stderr: stdout is the launch configuration alone
        click.echo(f"tpopt: {note}", err=True)
    for name, s, ev in items:
        where = f" (stage {name})" if name else ""
        for line in export_notes(fmt, s, ev):
            click.echo(f"tpopt: note{where}: {line}", err=True)
        if not ev.feasible:
            click.echo(f"tpopt: note{where}: the plan violates {', '.join(c.name for c in ev.violated())} on this "
                       "scenario (tpopt evaluate shows the figures)", err=True)
    if not out:
        click.echo(texts[0], nl=False)
        return
    for path in outs:
        click.echo(f"tpopt: wrote {path} ({fmt})", err=True)
    for path in launches:
        click.echo(f"tpopt: wrote {path} (launch script: bash it on each node, or sbatch it)", err=True)


def refuse_scale_out(path: str | None) -> None:
    """A mixed-pool (``[[hardware.pools]]``) or multi-datacenter (``[[sites]]``, ``[wan]``) scenario: one line
    saying that none of the export formats runs such a plan (each launches one accelerator type as one
    data-parallel job in one site: no per-group layout or batch share, no WAN all-reduce, no DiLoCo outer loop)."""
    if not path or not Path(path).is_file():
        return  # load_scenario_from says what is wrong with the path
    raw = read_scenario_file(path)
    hardware = raw.get("hardware")
    if "sites" in raw or "wan" in raw:
        what = ("a multi-datacenter plan (a WAN all-reduce or DiLoCo's outer synchronisation, replicas per site)",
                "tpopt sites")
    elif isinstance(hardware, dict) and hardware.get("pools"):
        what = ("a mixed plan over accelerator pools (several card types in one job, a layout and batch share per "
                "pool)", "tpopt solve")
    else:
        return
    raise InputError(f"export: {what[0]} runs on none of the export frameworks ({', '.join(FORMATS)}: each "
                     f"launches one accelerator type in one site); {what[1]} plans it, no file is written")


def _of_report(sc: Scenario, report: dict[str, Any], kw: dict[str, Any]) -> list[Exported]:
    """The plan of a --plan report on the scenario (each stage's own plan from a staged solve's report)."""
    _same_model(sc, report)
    stages = report.get("stages")
    if not sc.stages and isinstance(stages, list) and "plan" not in report:
        listed = ", ".join(str(s.get("name")) for s in stages if isinstance(s, dict))
        raise InputError(f"--plan: a staged report (stages {listed}, one plan each): give the --scenario it was solved "
                         "on")
    if sc.stages and isinstance(stages, list) and "plan" not in report:
        infos = stage_scenarios(sc)
        names = [s.get("name") if isinstance(s, dict) else None for s in stages]
        if names != [s.name for s in infos]:
            raise InputError(f"--plan: its stages {names} are not the scenario's {[s.name for s in infos]} (give the "
                             "--scenario it was solved on)")
        return [(s.name, s.sc, as_solve_would(s.sc, _checked(sc, plan_from_report(d)), kw)[0])
                for s, d in zip(infos, stages, strict=True)]
    return _on_stages(sc, _checked(sc, plan_from_report(report)), kw)


def _same_model(sc: Scenario, report: dict[str, Any]) -> None:
    """A report that names its model (``scenario.model.name``: solve's and evaluate's) was solved for that model:
    its layout (memory, layers per stage, batch split) does not carry to another one."""
    scen = report.get("scenario")
    model = scen.get("model") if isinstance(scen, dict) else None
    name = model.get("name") if isinstance(model, dict) else None
    if isinstance(name, str) and name != sc.model.name:
        raise InputError(f"--plan: its plan was solved for {name}, the scenario's model is {sc.model.name} (give the "
                         "--scenario it was solved on)")


def _checked(sc: Scenario, plan: Plan) -> Plan:
    if plan.accelerator not in sc.systems:
        raise InputError(f"--plan: its accelerator {plan.accelerator!r} is not in the scenario "
                         f"(give the --scenario it was solved on, or --hw {plan.accelerator})")
    return plan


def _on_stages(sc: Scenario, plan: Plan, kw: dict[str, Any]) -> list[Exported]:
    """A fixed plan: on the scenario, its unset checkpoint choices as ``tpopt solve`` sets them
    (:func:`tpopt.cli.evaluate.as_solve_would`); on a staged scenario, on each stage."""
    if not sc.stages:
        return [("", sc, as_solve_would(sc, plan, kw)[0])]
    return [(s.name, s.sc, as_solve_would(s.sc, plan, kw)[0]) for s in stage_scenarios(sc)]


def _solved(sc: Scenario, kw: dict[str, Any]) -> list[Exported]:
    """The plan (one per stage) ``tpopt solve`` finds for the scenario with its defaults and ``--time-limit``. No
    plan within the limit without a proof that none exists is exit 4 (as tpopt solve's); a plan the solve did not
    prove optimal is exported with one line on stderr saying so."""
    req = request_from({**SOLVE_DEFAULTS, "time_limit": kw.get("time_limit", SOLVE_DEFAULTS["time_limit"])})
    pr = P.plan(sc, backends.DEFAULT, req, analyse=False, inputs=lambda: raw_and_catalog(kw), why=False)
    unproven = f"within the time limit ({req.time_limit:g} s)"
    if pr.staged is not None:
        if not pr.staged.feasible:
            raise InputError("the staged scenario has no feasible plan to export (tpopt solve shows why)")
        return [(st.name, pick.sc, pick.ev) for st, pick in zip(pr.staged.stages, pr.staged.picks, strict=True)]
    if pr.status == Status.UNKNOWN:
        fail(f"no plan found {unproven}, and no proof that none exists: give a longer --time-limit, or the plan "
             "flags (--cards ...) or --plan FILE", EXIT_UNKNOWN)
    if pr.best is None or not pr.feasible:
        raise InputError("the scenario has no feasible plan to export (tpopt solve shows why)")
    if pr.status != Status.OPTIMAL:
        click.echo(f"tpopt: note: the exported plan is the best found {unproven}, not proven optimal "
                   "(a longer --time-limit may prove it or find a cheaper one)", err=True)
    return [("", sc, pr.best)]


def _stage_path(path: str, stage: str) -> str:
    """``path`` itself unstaged; NAME.STAGE.EXT for a stage."""
    if not stage:
        return path
    p = Path(path)
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in stage)
    return str(p.with_name(f"{p.stem}.{safe}{p.suffix}"))


def _read_report(path: str) -> dict[str, Any]:
    """The JSON report of --plan (size-capped, one clear line when unreadable)."""
    try:
        text = read_text_capped(Path(path), "--plan file")
    except FileNotFoundError:
        raise InputError(f"--plan: {path} does not exist") from None
    d = loads_json(text, f"--plan {path}")
    if not isinstance(d, dict):
        raise InputError(f"--plan: {path} holds no report object")
    return d
