"""`tpopt sites --scenario FILE`: a job over several datacenters ([[sites]] and [wan]). Parsing and rendering
only: the decision is :func:`tpopt.optimizer.sites.solve_sites`."""

from __future__ import annotations

import click

from tpopt.catalogs.scenario import load_mixed_sites_scenario, load_sites_scenario, read_scenario_file, split_sites
from tpopt.cli.common import dump_json, handle_errors
from tpopt.models.sites import mixed
from tpopt.optimizer import backends
from tpopt.optimizer.sites import lines, report, solve_sites
from tpopt.optimizer.sites_mixed import mixed_lines, mixed_report, solve_mixed_sites


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
    _, stated = split_sites(read_scenario_file(scenario_path))
    if stated is not None and mixed(stated):  # sites with their own card types or prices
        msc, msi, powers = load_mixed_sites_scenario(scenario_path, catalog_dirs)
        d = mixed_report(solve_mixed_sites(msc, msi, powers))
        click.echo(dump_json(d) if as_json else "\n".join(mixed_lines(d)) + "\n", nl=False)
        return
    sc, si, power = load_sites_scenario(scenario_path, catalog_dirs)
    d = report(solve_sites(sc, si, power, solver))
    click.echo(dump_json(d) if as_json else "\n".join(lines(d)) + "\n", nl=False)
