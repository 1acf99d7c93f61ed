"""`tpopt explain` and the infeasibility report of `tpopt solve`."""

from __future__ import annotations

import click

from tpopt.cli.common import dump_json


def infeasible_report(sc, space, result, req, kw, as_json, out: dict):
    from tpopt.optimizer.explain import conflict

    core = conflict(space, req, result.enforced) if result.status.value == "infeasible" else None
    out["conflict"] = core or []
    if as_json:
        click.echo(dump_json(out), nl=False)
        return
    click.echo(f"tpopt solve: {sc.name}: no feasible plan ({result.status.value}).")
    if core:
        click.echo("Conflicting constraints: " + ", ".join(core))
