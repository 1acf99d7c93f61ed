"""`tpopt catalog offers` (the market catalog as a table) and `tpopt catalog import --skypilot vms.csv`."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from tpopt.catalogs import load_catalog
from tpopt.catalogs.market import Market, offer_toml, read_skypilot
from tpopt.cli.common import dump_json
from tpopt.cli.render import console_text, fit_lines, output_width, width_groups
from tpopt.errors import InputError
from tpopt.models.market import price_notes
from tpopt.optimizer.market import offer_dict

COLUMNS = (("name", "name"), ("id", "offer"), ("price_card_hour", "USD/card-h"), ("cards_per_host", "cards/host"),
           ("available", "available"), ("date", "date"))


def offer_rows(market: Market, hw: str | None, region: str | None) -> list[dict[str, Any]]:
    rows = [dict(offer_dict(o, market.as_of), name=name) for name, o in market.offers.items()
            if o in market.select(hw, region)]
    if not rows:
        raise InputError(f"no offer{' of ' + hw if hw else ''}{' in ' + region if region else ''} "
                         "(tpopt catalog offers lists them)")
    return rows


def list_offers(catalog_dirs: tuple[str, ...], hw: str | None, region: str | None, show_sources: bool,
                as_json: bool) -> None:
    market = load_catalog(catalog_dirs).market
    rows = offer_rows(market, hw, region)
    if as_json:
        click.echo(dump_json(rows), nl=False)
        return
    if show_sources:
        click.echo(fit_lines("\n".join(f"{r['name']} ({r['id']}, {r['date']}): {r['source']}" for r in rows)))
        return
    heads = [head for _, head in COLUMNS] + ["terms", "notes"]
    cells = [[f"{r[k]:g}" if isinstance(r[k], float) else str(r[k]) for k, _ in COLUMNS]
             + [f"term {r['term_days']:g} d" if r["term_days"] is not None else f"billed per {r['billing_s']:g} s",
                "; ".join(r["notes"]) or "-"] for r in rows]
    # every column whole but the notes, which wrap at spaces: they count with their longest word
    least = [max([len(c[i]) for c in cells] + [len(h)]) for i, h in enumerate(heads[:-1])]
    least.append(max([len(w) for c in cells for w in c[-1].split()] + [len(heads[-1])]))
    tables: list[Table | str] = []
    for part, idx in enumerate(width_groups(least, output_width(), 3)):
        title = f"offers ({len(rows)}, prices judged at {market.as_of})" if part == 0 else "offers, continued"
        t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
        for i in idx:
            t.add_column(heads[i], no_wrap=i < len(heads) - 1, min_width=least[i])
        for c in cells:
            t.add_row(*(c[i] for i in idx))
        tables += ([""] if part else []) + [t]
    click.echo(console_text(*tables), nl=False)
    click.echo(fit_lines("[market] offers takes a name or an offer; every price has a date and a source: tpopt "
                         "catalog offers --sources (or --json)."))


def import_skypilot(catalog_dirs: tuple[str, ...], path: str, provider: str, date: str, available: int,
                    names: tuple[str, ...], zone_price: str = "min") -> None:
    """Print the offers.toml of a SkyPilot vms.csv (regions and offers) to stdout; SkyPilot's accelerator
    names map to catalog entries by default (``--map`` overrides), and one stderr line names what was skipped."""
    cat = load_catalog(catalog_dirs)
    mapping = {}
    for m in names:
        if "=" not in m:
            raise InputError(f"--map {m!r}: write SKYPILOT_NAME=catalog-accelerator (e.g. H100=h100-sxm)")
        k, v = m.split("=", 1)
        mapping[k] = v
    market = Market(regions=dict(cat.market.regions), as_of=cat.market.as_of)
    memory = {k: a.memory_nominal for k, a in cat.accelerators.items()}
    imp = read_skypilot(path, provider, date, mapping, market, available, memory, zone_price)
    offers = imp.offers
    if not offers:
        raise InputError(f"{path}: no row of a catalog accelerator ({imp.skipped_line() or 'no rows'}; map "
                         "SkyPilot names with --map NAME=accelerator)")
    if imp.skipped_line():
        click.echo(f"tpopt: {path}: {imp.skipped_line()}", err=True)
    regions = sorted({f"{o.provider}/{o.region}" for o in offers.values()})
    out = [f"# imported from the SkyPilot catalog {path} ({provider}, prices dated {date})", ""]
    out += [f'[region."{r}"]\nsource = "SkyPilot catalog {path}"\n' for r in regions]
    out += [offer_toml(i.replace("/", "-"), o) for i, o in offers.items()]
    click.echo("\n".join(out), nl=False)
    for o in offers.values():
        for n in price_notes(o, cat.market.as_of):
            click.echo(f"tpopt: {o.id}: {n}", err=True)
