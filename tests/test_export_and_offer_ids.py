"""No traceback from ``solve --export`` on a model another solver cannot read reliably, and offer ids that name
exactly one offer (issue 36 item 5)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from tests.conftest import ROOT
from tests.test_market import REGIONS, offer_table, raw_scenario
from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import build_scenario
from tpopt.cli.main import cli
from tpopt.errors import InputError
from tpopt.optimizer import plan as P
from tpopt.optimizer.result import Request, Status

EX = ROOT / "examples"


# ---------------------------------------------------------------------------------------------
# --export


def test_export_of_a_model_beyond_the_coefficient_range_is_one_line_and_writes_nothing(tmp_path):
    # the MoE example's plan MILP spans coefficients 3.5e-4 .. 4.1e6 (beyond the range check of the MILP
    # formulation): before, an EncodingError traceback, exit 1
    out = tmp_path / "plan.lp"
    r = CliRunner().invoke(cli, ["solve", "--scenario", str(EX / "qwen3-30b-a3b.toml"), "--export", str(out)])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and r.exception is None or isinstance(r.exception, SystemExit)
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("tpopt: error: --export") and "coefficients" in lines[0]
    assert not out.exists() and list(tmp_path.iterdir()) == []  # nothing written, no temporary left


def test_export_of_the_flat_design_case_still_writes_the_model(tmp_path):
    out = tmp_path / "plan.mps"
    r = CliRunner().invoke(cli, ["solve", "--export", str(out), "--json"])
    assert r.exit_code == 0, r.output
    assert out.exists() and out.stat().st_size > 0


# ---------------------------------------------------------------------------------------------
# offer ids

TWIN = REGIONS + offer_table("p5", "cloud-a", "east", "h100-sxm", "on-demand", 3.0) + \
    offer_table("p5e", "cloud-a", "east", "h100-sxm", "on-demand", 2.5) + \
    offer_table("spot", "cloud-a", "east", "h100-sxm", "spot", 1.6, extra='preempt_per_card_hour = 0.002')


@pytest.fixture
def twin_catalog(tmp_path):
    d = tmp_path / "cat"
    d.mkdir()
    (d / "offers.toml").write_text(TWIN)
    return d


def test_offers_of_the_same_provider_region_card_and_market_get_distinct_ids(twin_catalog):
    cat = load_catalog([twin_catalog])
    ids = [o.id for o in cat.market.offers.values()]
    assert len(ids) == len(set(ids)), [i for i in ids if ids.count(i) > 1]
    p5, p5e, spot = (cat.market.offers[n] for n in ("p5", "p5e", "spot"))
    assert p5.id == "cloud-a/east/h100-sxm/on-demand#p5" and p5e.id == "cloud-a/east/h100-sxm/on-demand#p5e"
    assert spot.id == "cloud-a/east/h100-sxm/spot"  # alone of its kind: the plain id


def test_selecting_an_offer_by_id_picks_that_offer(twin_catalog):
    cat = load_catalog([twin_catalog])
    for name, price in (("p5", 3.0), ("p5e", 2.5)):
        raw = raw_scenario(offers=[cat.market.offers[name].id])
        raw["hardware"]["accelerator"] = ["h100-sxm"]
        sc = build_scenario(raw, cat)
        assert [o.price_card_hour for o in sc.market.offers] == [price]


def test_the_shared_id_without_its_suffix_is_refused_naming_both(twin_catalog):
    cat = load_catalog([twin_catalog])
    raw = raw_scenario(offers=["cloud-a/east/h100-sxm/on-demand"])
    raw["hardware"]["accelerator"] = ["h100-sxm"]
    with pytest.raises(InputError) as exc:
        build_scenario(raw, cat)
    msg = str(exc.value)
    assert "2 offers" in msg and "p5 (" in msg and "p5e (" in msg


def test_a_market_report_names_each_twin_once_and_mixes_stay_distinct(twin_catalog):
    cat = load_catalog([twin_catalog])
    raw = raw_scenario(offers="all")
    raw["hardware"]["accelerator"] = ["h100-sxm"]
    raw["market"].update(spot_shares=[0.5], regions=["cloud-a/east"])  # this catalog's offers, not the built-ins
    sc = build_scenario(raw, cat)
    ids = [o.id for o in sc.market.offers]
    assert len(ids) == len(set(ids)) == 5, ids  # two on-demand, one spot, two mixes (one per on-demand base)
    r = P.plan(sc, "cpsat", Request(time_limit=120.0))
    assert r.status == Status.OPTIMAL
    rows = [row["offer"] for row in r.report["market"]["offers"]]
    assert rows == ids
