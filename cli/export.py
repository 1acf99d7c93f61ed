"""`tpopt export --format megatron|nemo|torchtitan|deepspeed`: a plan as a framework's launch configuration.

The plan is the one ``tpopt evaluate`` takes (the same scenario and plan flags) or the ``plan`` object of a
``tpopt solve --json`` / ``tpopt evaluate --json`` report (``--plan FILE``, with the scenario it was solved
on). Parsing and file handling only: the mapping is :mod:`tpopt.frameworks`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from tpopt.catalogs.tables import loads_json, read_text_capped
from tpopt.cli.common import (
    builtin_note,
    check_new_file,
    handle_errors,
    load_scenario_from,
    plan_from,
    plan_options,
    scenario_options,
)
from tpopt.errors import InputError
from tpopt.files import write_atomic
from tpopt.frameworks import FORMATS, export_text, plan_from_report
from tpopt.models import variables as V
from tpopt.models.evaluate import evaluate


@click.command()
@click.option("--format", "fmt", type=click.Choice(FORMATS), required=True,
              help="megatron: Megatron-LM arguments; nemo: Megatron-Bridge recipe overrides; torchtitan: a TOML "
                   "job config; deepspeed: a config JSON.")
@click.option("--plan", "plan_path", type=click.Path(dir_okay=False),
              help="A tpopt solve --json (or evaluate --json) report; its plan is exported (give the same "
                   "--scenario it was solved on). Without it, the plan flags below fix the plan.")
@click.option("--out", type=click.Path(dir_okay=False), help="Write to this file instead of stdout.")
@click.option("--force", is_flag=True, help="Overwrite --out if it exists.")
@scenario_options
@plan_options(require_cards=False)
@handle_errors
def export(fmt: str, plan_path: str | None, out: str | None, force: bool, **kw: Any) -> None:
    """Write a plan as a training framework's own launch configuration, checked against that framework's
    argument definitions (catalogs/frameworks/*.toml: source file, version and line of each). A plan feature
    the framework cannot express is an error naming it (exit 2).

    Example: tpopt export --format megatron --hw h100-sxm --cards 64 --tp 8
    """
    if out:
        check_new_file(out, "--out", force)  # the no-overwrite rule of every output
    sc = load_scenario_from(kw)
    note = builtin_note(kw)  # printed once the export succeeded: an error stays one line
    if sc.stages:
        raise InputError("export takes one training stage: staged scenarios are not supported")
    if plan_path:
        given = [k for k in V.PLAN_FLAGS if kw.get(k) is not None]  # every plan flag (models/variables.py)
        if given:
            raise InputError(f"--plan fixes the plan: drop {V.flag_of(given[0])}")
        plan = plan_from_report(_read_report(plan_path))
        if plan.accelerator not in sc.systems:
            raise InputError(f"--plan: its accelerator {plan.accelerator!r} is not in the scenario "
                             f"(give the --scenario it was solved on, or --hw {plan.accelerator})")
    else:
        if kw.get("cards") is None:
            raise InputError("give --cards (and the other plan flags), or --plan FILE from tpopt solve --json")
        plan = plan_from(sc, kw)
    ev = evaluate(sc, plan)
    text = export_text(fmt, sc, ev)
    if out:  # written before any note: a failed write stays one line
        write_atomic(out, text, "--out")
    if note:  # on stderr: stdout is the launch configuration alone
        click.echo(f"tpopt: {note}", err=True)
    if not ev.feasible:
        click.echo(f"tpopt: note: the plan violates {', '.join(c.name for c in ev.violated())} on this scenario "
                   "(tpopt evaluate shows the figures)", err=True)
    if not out:
        click.echo(text, nl=False)
        return
    click.echo(f"tpopt: wrote {out} ({fmt})", err=True)


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
