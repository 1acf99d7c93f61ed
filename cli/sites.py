"""`tpopt sites --scenario FILE`: a job over several datacenters ([[sites]] and [wan]). Parsing and rendering
only: the decision is :func:`tpopt.optimizer.sites.solve_sites`, or
:func:`tpopt.optimizer.sites_mixed.solve_mixed_sites` where a site names its own card type or price."""

from __future__ import annotations

import click

from tpopt.cli.common import EXIT_INFEASIBLE, dump_json, handle_errors
from tpopt.cli.render import fit_lines, output_width
from tpopt.optimizer import backends
from tpopt.optimizer.sites import NoReplicaPlan
from tpopt.optimizer.sites_mixed import answer, answer_lines


@click.command()
@click.option("--scenario", "scenario_path", required=True, type=click.Path(dir_okay=False),
              help="Scenario TOML with [[sites]] and [wan].")
@click.option("--solver", default=backends.DEFAULT, show_default=True, help="Solver of the one-site replica plan.")
@click.option("--catalog", "catalog_dirs", multiple=True, type=click.Path(file_okay=False),
              help="Extra catalog directory (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@handle_errors
def sites(scenario_path: str, solver: str, catalog_dirs: tuple[str, ...], as_json: bool) -> None:
    """Plan one training job over several datacenters: the sites used, replicas per site, synchronous or DiLoCo
    (H inner steps, F fragments), at the least cost under the deadline and each site's card and power caps.

    Example: tpopt sites --scenario examples/sites-llama3-405b.toml
    """
    try:
        d = answer(scenario_path, catalog_dirs, solver)
    except NoReplicaPlan as exc:  # well-formed, without a plan: the answer, exit 3 (not a bad-input line)
        click.echo(dump_json({"status": "infeasible", "detail": str(exc)}) if as_json
                   else fit_lines(f"tpopt sites: {exc}") + "\n", nl=False)
        raise SystemExit(EXIT_INFEASIBLE) from None
    click.echo(dump_json(d) if as_json else fit_lines("\n".join(answer_lines(d, output_width()))) + "\n", nl=False)
    if d["best"] is None:
        raise SystemExit(EXIT_INFEASIBLE)
