"""`tpopt catalog` splits a wide table into column groups; no cell may be cut at any width.

At the default width (100 columns, stdout not a terminal) the accelerators table printed
"pcie4-x16, no p2" for the RTX 4090's "pcie4-x16, no p2p" (a PCIe 4.0 x16 card without peer-to-peer, as
NVIDIA ships it) and "infinity-fabric-" for AMD's fabrics: rich crops a cell rather than wrap a header.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from tpopt.catalogs import load_catalog
from tpopt.cli.catalog import HIDDEN, _cell, catalog_rows
from tpopt.cli.main import cli


@pytest.mark.parametrize("kind", ["accelerators", "models", "links", "storage"])
@pytest.mark.parametrize("width", [80, 100, 140])
def test_every_cell_whole(kind, width):
    rows = catalog_rows(load_catalog(()), kind)
    out = CliRunner().invoke(cli, ["catalog", kind], env={"COLUMNS": str(width)}).output
    lines = out.splitlines()
    for r in rows:
        mine = [ln for ln in lines if ln.split("│")[0].strip() == r["name"]]
        cells = {x.strip() for ln in mine for x in ln.split("│")[1:]}
        for c in r:
            if c not in HIDDEN and c != "name":
                assert _cell(r, c) in cells, (kind, width, r["name"], c, _cell(r, c))
    assert all(len(ln) <= width for ln in lines if "│" in ln), "a table row wider than the width"


def test_rtx4090_fabric_whole_at_the_default_width():
    out = CliRunner().invoke(cli, ["catalog", "accelerators"], env={"COLUMNS": "100"}).output
    row = next(ln for ln in out.splitlines() if "pcie4-x16" in ln and ln.startswith("rtx4090 "))
    assert "pcie4-x16, no p2p" in row
