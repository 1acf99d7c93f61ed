"""`tpopt catalog`: list what the catalogs hold (built-in plus --catalog directories)."""

from __future__ import annotations

import click

from tpopt.cli.common import dump_json, handle_errors

KINDS = ("accelerators", "models", "links", "storage")
HEADERS = {"peak_bf16_tflops": "TFLOP/s", "usable_gib": "usable GiB",
           "host_link": "host link", "interconnect": "fabric", "memory_gb": "GB", "cards_per_host": "cards/host",
           "nics_per_host": "NICs", "price_card_hour": "USD/card-h", "bandwidth_gb_s": "GB/s",
           "price_nic_hour": "USD/NIC-h", "write_bandwidth_gb_s": "write GB/s", "kv_heads": "kv",
           "params": "parameters"}


def catalog_rows(cat, kind: str) -> list[dict]:
    from tpopt.models.arch import param_count

    if kind == "accelerators":
        return [{"name": a.name, "display": a.display, "peak_bf16_tflops": a.peak_flops / 1e12,
                 "memory_gb": a.memory_nominal / 1e9, "usable_gib": a.memory_usable / 2**30,
                 "host_link": a.host_link, "interconnect": a.interconnect, "p2p": a.p2p,
                 "cards_per_host": a.cards_per_host, "nic": a.nic, "nics_per_host": a.nics_per_host,
                 "price_card_hour": a.price_card_hour} for a in cat.accelerators.values()]
    if kind == "models":
        return [{"name": m.name, "params": param_count(m), "layers": m.layers, "hidden": m.hidden, "heads": m.heads,
                 "kv_heads": m.kv_heads, "ffn": m.ffn, "vocab": m.vocab, "source": m.source}
                for m in cat.models.values()]
    if kind == "links":
        rows = [{"name": n, "kind": "link", "bandwidth_gb_s": bw / 1e9} for n, bw in cat.links.items()]
        rows += [{"name": n.name, "kind": "nic", "bandwidth_gb_s": n.bandwidth / 1e9,
                  "price_nic_hour": n.price_hour} for n in cat.nics.values()]
        return rows
    return [{"name": n, "write_bandwidth_gb_s": bw / 1e9} for n, bw in cat.storage.items()]


@click.command()
@click.argument("kind", type=click.Choice(KINDS), default="accelerators")
@click.option("--catalog", "catalog_dirs", multiple=True, type=click.Path(file_okay=False),
              help="Extra catalog directory (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@handle_errors
def catalog(kind, catalog_dirs, as_json):
    """List catalog entries: accelerators (default), models, links, storage."""
    from rich.table import Table

    from tpopt.catalogs import load_catalog
    from tpopt.cli.render import console_text

    rows = catalog_rows(load_catalog(catalog_dirs), kind)
    if as_json:
        click.echo(dump_json(rows), nl=False)
        return
    t = Table(title=f"{kind} ({len(rows)})", title_justify="left", show_edge=False, pad_edge=False)
    cols = [c for c in rows[0] if c not in ("display", "source")] if rows else []
    for c in cols:
        t.add_column(HEADERS.get(c, c), no_wrap=True)
    for r in rows:
        t.add_row(*("-" if r[c] is None else f"{r[c]:,.4g}" if isinstance(r[c], float) else f"{r[c]:,}" if c == "params" else str(r[c]) for c in cols))
    click.echo(console_text(t, width=140), nl=False)
