"""`tpopt catalog`: list what the catalogs hold (built-in plus --catalog directories)."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from tpopt.catalogs import Catalog, load_catalog, unsourced
from tpopt.cli.common import dump_json, handle_errors
from tpopt.cli.market import import_skypilot, list_offers
from tpopt.cli.render import console_text, fit_lines, output_width, width_groups
from tpopt.errors import InputError
from tpopt.models.arch import activated_params, expert_params, param_count
from tpopt.models.hardware import Accelerator

KINDS = ("accelerators", "models", "links", "storage", "offers", "import")
HEADERS = {"peak_bf16_tflops": "BF16 TFLOP/s", "peak_fp8_tflops": "FP8 TFLOP/s", "nics": "NICs/host",
           "usable_gib": "usable GiB",
           "hbm_gb_s": "HBM GB/s", "host_link": "host link", "interconnect": "fabric", "memory_gb": "GB",
           "cards_per_host": "cards/host", "nics_per_host": "NICs", "price_card_hour": "USD/card-h",
           "price_date": "price date", "bandwidth_gb_s": "GB/s", "price_nic_hour": "USD/NIC-h",
           "write_bandwidth_gb_s": "write GB/s", "kv_heads": "kv", "params": "parameters",
           "activated_params": "activated", "experts": "experts (top-k)"}
HIDDEN = ("display", "source", "sources", "notes", "peak_fp16_tflops", "peak_tf32_tflops", "expert_params",
          "price_source", "host_link", "interconnect", "p2p", "nic", "nics_per_host", "memory_gb")


def _fabric(a: Accelerator) -> str:
    """The card-to-card path inside a host, as the communication model uses it."""
    if a.p2p and a.interconnect != "none":
        return a.interconnect
    return f"{a.host_link}{'' if a.p2p else ', no p2p'}"


def _tflops(x: float) -> float | None:
    return x / 1e12 if x else None  # 0 = not given in the catalog


def catalog_rows(cat: Catalog, kind: str) -> list[dict[str, Any]]:
    if kind == "accelerators":
        raw = cat.raw.get("accelerators", {})
        return [{"name": a.name, "display": a.display, "peak_bf16_tflops": a.peak_flops / 1e12,
                 "peak_fp8_tflops": _tflops(a.peak_fp8), "peak_fp16_tflops": _tflops(a.peak_fp16),
                 "peak_tf32_tflops": _tflops(a.peak_tf32), "memory_gb": a.memory_nominal / 1e9,
                 "usable_gib": a.memory_usable / 2**30, "hbm_gb_s": a.hbm_bandwidth / 1e9,
                 "host_link": a.host_link, "interconnect": a.interconnect, "p2p": a.p2p,
                 "cards_per_host": a.cards_per_host, "nic": a.nic, "nics_per_host": a.nics_per_host,
                 "fabric": _fabric(a), "nics": f"{a.nics_per_host} x {a.nic}",
                 "price_card_hour": a.price_card_hour, "price_date": raw.get(a.name, {}).get("price_date"),
                 "sources": dict(a.sources)} for a in cat.accelerators.values()]
    if kind == "models":
        rows = []
        for m in cat.models.values():
            attention = "MLA" if m.mla else "MHA" if m.kv_heads == m.heads else "MQA" if m.kv_heads == 1 else "GQA"
            if m.window_layers:
                attention += f", window {m.sliding_window:,} on {m.window_layers}/{m.layers}"
            rows.append({"name": m.name, "params": param_count(m), "activated_params": activated_params(m),
                         "layers": m.layers, "hidden": m.hidden, "heads": m.heads, "kv_heads": m.kv_heads,
                         "ffn": m.ffn, "experts": f"{m.experts} ({m.top_k})" if m.moe else "-", "vocab": m.vocab,
                         "attention": attention, "expert_params": expert_params(m), "source": m.source,
                         "notes": list(m.extra.get("notes", []))})
        return rows
    if kind == "links":
        raw = cat.raw.get("links", {})
        rows = [{"name": n, "kind": "link", "bandwidth_gb_s": bw / 1e9,
                 "source": raw.get("link", {}).get(n, {}).get("source", "")} for n, bw in cat.links.items()]
        rows += [{"name": n.name, "kind": "nic", "bandwidth_gb_s": n.bandwidth / 1e9,
                  "price_nic_hour": n.price_hour, "source": n.source,
                  "price_source": raw.get("nic", {}).get(n.name, {}).get("price_source", "")}
                 for n in cat.nics.values()]
        return rows
    raw = cat.raw.get("storage", {})
    return [{"name": n, "write_bandwidth_gb_s": bw / 1e9, "source": raw.get(n, {}).get("source", "")}
            for n, bw in cat.storage.items()]


def _cell(row: dict[str, Any], col: str) -> str:
    v = row.get(col)
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.4g}"
    if isinstance(v, int) and not isinstance(v, bool) and col in ("params", "activated_params"):
        return f"{v / 1e9:,.2f}B" if v >= 1e9 else f"{v / 1e6:,.1f}M"
    return str(v)


def source_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Every entry's sources, one line each (accelerators: one line per field)."""
    out = []
    for r in rows:
        if "sources" in r:
            out.append(f"{r['name']}:")
            out += [f"  {k}: {v}" for k, v in r["sources"].items()]
        else:
            out.append(f"{r['name']}: {r.get('source', '')}")
            out += [f"  {k}: {r[k]}" for k in ("price_source",) if r.get(k)]
            out += [f"  note: {n}" for n in r.get("notes", [])]
    return out


@click.command()
@click.argument("kind", type=click.Choice(KINDS), default="accelerators")
@click.option("--catalog", "catalog_dirs", multiple=True, type=click.Path(file_okay=False),
              help="Extra catalog directory (repeatable).")
@click.option("--sources", "show_sources", is_flag=True, help="Print the source of every number instead of the table.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (sources included).")
@click.option("--hw", help="offers: of this accelerator only.")
@click.option("--region", help="offers: in this region only (region or provider/region).")
@click.option("--skypilot", type=click.Path(dir_okay=False), help="import: a SkyPilot catalog vms.csv.")
@click.option("--provider", default="skypilot", show_default=True, help="import: the provider the CSV lists.")
@click.option("--date", help="import: when the CSV's prices were read (YYYY-MM[-DD]).")
@click.option("--available", type=int, default=1024, show_default=True,
              help="import: cards available per offer (SkyPilot's catalog has no availability).")
@click.option("--map", "names", multiple=True,
              help="import: SKYPILOT_NAME=catalog-accelerator (repeatable; overrides the default map).")
@click.option("--zone-price", type=click.Choice(["min", "median"]), default="min", show_default=True,
              help="import: how a region's per-zone prices reduce to one (min: as SkyPilot's own cost).")
@handle_errors
def catalog(kind: str, catalog_dirs: tuple[str, ...], show_sources: bool, as_json: bool, hw: str | None,
            region: str | None, skypilot: str | None, provider: str, date: str | None, available: int,
            names: tuple[str, ...], zone_price: str) -> None:
    """List catalog entries: accelerators (default), models, links, storage, offers (the market: --hw, --region);
    import: print the offers.toml of a SkyPilot vms.csv (--skypilot, --date; redirect it into a --catalog DIR).

    Models show total and activated parameters (they differ for mixture-of-experts models, whose
    experts every card holds until expert parallelism is a plan decision). Peaks are dense; a "-"
    means the precision is not supported or not given (see --sources).
    """

    if kind == "offers":
        return list_offers(catalog_dirs, hw, region, show_sources, as_json)
    if kind == "import":
        if not skypilot or not date:
            raise InputError("catalog import needs --skypilot vms.csv and --date YYYY-MM[-DD]")
        return import_skypilot(catalog_dirs, skypilot, provider, date, available, names, zone_price)
    cat = load_catalog(catalog_dirs)
    rows = catalog_rows(cat, kind)
    if as_json:
        click.echo(dump_json(rows), nl=False)
        return
    if show_sources:
        click.echo(fit_lines("\n".join(source_lines(rows))))
        return
    cols = list(dict.fromkeys(c for r in rows for c in r if c not in HIDDEN))  # every row's (NICs add a price)
    cells = [[_cell(r, c) for c in cols] for r in rows]
    tables = []
    for part, idx in enumerate(column_groups(cols, cells, output_width())):
        title = f"{kind} ({len(rows)})" if part == 0 else f"{kind}, continued"
        tables += ([""] if part else []) + [_table(title, [cols[i] for i in idx], [[r[i] for i in idx] for r in cells])]
    click.echo(console_text(*tables), nl=False)
    missing = unsourced(cat) if kind == "accelerators" else {}
    if missing:
        said = "; ".join(f"{name} {', '.join(keys)}" for name, keys in missing.items())
        click.echo(fit_lines(f"No source for {said}: add them to [NAME.sources] of your catalog "
                             f"(tpopt catalog {kind} --sources lists every number's)."))
    else:
        click.echo(fit_lines(f"Every number has a source: tpopt catalog {kind} --sources (or --json)."))


def _table(title: str, cols: list[str], cells: list[list[str]]) -> Table:
    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    for i, c in enumerate(cols):
        head = HEADERS.get(c, c)
        t.add_column(head, min_width=max([len(row[i]) for row in cells] + [max(len(w) for w in head.split())]))
    for row in cells:
        t.add_row(*row)
    return t


def column_groups(cols: list[str], cells: list[list[str]], width: int) -> list[list[int]]:
    """The columns in groups that each fit ``width`` whole (every group starts with the name column; no cell or
    header is cut or wrapped): one group when the whole table fits, as before on a wide terminal. A group's
    natural width is the widest cell or header of each column plus " │ " between columns (a group narrower than
    rich's measured minimum was still cut: rich crops a cell rather than wrap a header, and printed
    "pcie4-x16, no p2" for "pcie4-x16, no p2p" at 100 columns)."""
    least = [max([len(r[i]) for r in cells] + [len(HEADERS.get(c, c))]) for i, c in enumerate(cols)]
    return width_groups(least, width, 3)
