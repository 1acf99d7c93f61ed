"""Market breadth, energy and carbon (issue 38 items 3 and 6).

Breadth: dated, sourced offers for the community-cloud cards (RTX 4090/5090, L40S), neocloud H100/H200/B200
and AMD MI300X/MI325X; ``--hw all`` spans every accelerator with an offer or a catalog price (list prices
flagged illustrative). Energy: board power for every card with a published figure, energy price and grid
carbon intensity per region (catalogs/energy.toml), the report's energy cost and tCO2e, power in a unit that
fits. The expected figures are derived in the tests from the catalog's stated inputs.
"""

from __future__ import annotations

import copy
import math
import sys
from pathlib import Path

import pytest

from tpopt.catalogs import load_catalog
from tpopt.catalogs.market import LIST_REGION, load_market
from tpopt.catalogs.scenario import build_scenario, market_hardware
from tpopt.errors import InputError
from tpopt.models.market import energy_cost_usd, tonnes_co2e
from tpopt.optimizer import plan as P
from tpopt.presentation import market_lines, watts_text

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_market import _cli, raw_scenario  # noqa: E402

CAT = load_catalog()
PUBLISHED = {"runpod", "vast", "spheron", "nebius", "packet", "tensorwave", "vultr", "crusoe", "lambda", "aws", "gcp"}


def _quoted(acc: str) -> list:
    """The offers of ``acc`` with a published price (not a list price, not illustrative)."""
    return [o for o in CAT.market.offers.values() if o.accelerator == acc and not o.illustrative
            and o.provider in PUBLISHED]


@pytest.mark.parametrize("acc", ["rtx4090", "rtx5090", "l40s", "h100-sxm", "h200", "b200", "mi300x", "mi325x"])
def test_every_headline_card_has_a_dated_sourced_offer(acc):
    offers = _quoted(acc)
    assert offers, acc
    for o in offers:
        assert len(o.date) >= 7 and o.source and "assumption: illustrative" not in o.source.split(";")[0]


def test_community_and_neocloud_offers_are_there():
    providers = {(o.provider, o.accelerator) for o in CAT.market.offers.values()}
    assert {("runpod", "rtx4090"), ("vast", "rtx5090"), ("runpod", "l40s")} <= providers  # community clouds
    assert {("nebius", "h100-sxm"), ("nebius", "h200"), ("packet", "b200")} <= providers  # neoclouds
    assert {("tensorwave", "mi300x"), ("vultr", "mi300x"), ("tensorwave", "mi325x")} <= providers  # AMD


def test_hw_all_spans_every_accelerator_with_an_offer_or_a_catalog_price():
    raw = {"hardware": {"accelerator": "all"}}
    names = market_hardware(raw, CAT)["hardware"]["accelerator"]
    priced = {k for k, a in CAT.accelerators.items() if a.price_card_hour is not None}
    offered = {o.accelerator for o in CAT.market.offers.values()}
    assert set(names) == priced | offered
    assert "gb200-nvl72" in names  # no published per-GPU price found: its list price stands in
    lists = [o for o in CAT.market.offers.values() if f"{o.provider}/{o.region}" == LIST_REGION]
    assert lists and all(o.illustrative for o in lists)
    # a card with a quoted offer gets no list-price offer
    assert not [o for o in lists if o.accelerator in {"h100-sxm", "rtx4090", "mi300x"}]
    gb = next(o for o in lists if o.accelerator == "gb200-nvl72")
    assert gb.price_card_hour == CAT.accelerators["gb200-nvl72"].price_card_hour and gb.cards_per_host == 72


def test_power_figures_for_every_card_with_a_public_figure():
    without = sorted(set(CAT.accelerators) - set(CAT.market.power))
    assert without == ["b300", "gb300-nvl72", "h100-96gb-hbm2e", "h20"]
    for acc, p in CAT.market.power.items():
        assert p.board_w > 0 and p.training_w > 0 and p.source, acc
    # datasheet board powers (the sources' figures)
    want = {"rtx4090": 450, "rtx5090": 575, "l40s": 350, "b200": 1000, "mi300x": 750, "mi325x": 1000,
            "h100-sxm": 700, "a100-80gb-sxm": 400}
    assert {k: CAT.market.power[k].board_w for k in want} == want
    # DGX B200: 14.3 kW system maximum for 8 cards of 1,000 W
    assert CAT.market.power["b200"].host_overhead_w == 14300 - 8 * 1000


def test_energy_arithmetic():
    # 10 MWh at 0.0892 USD/kWh: 10,000 kWh x 0.0892 = 892 USD; at 323.05 g/kWh: 3,230,500 g = 3.2305 t
    assert energy_cost_usd(10.0, 0.0892) == pytest.approx(892.0)
    assert tonnes_co2e(10.0, 323.05) == pytest.approx(3.2305)


def test_energy_catalog_regions_are_dated_and_sourced():
    e = CAT.market.energy
    assert e["aws/us-east-1"].price_kwh == 0.0892 and e["aws/us-east-1"].carbon_g_kwh == 323.05
    assert e["gcp/us-central1"].carbon_g_kwh == 412.72 and e["aws/us-east-2"].carbon_g_kwh is None
    for name, r in e.items():
        if r.price_kwh is not None:
            assert r.price_date and "EIA" in r.price_source, name
        if r.carbon_g_kwh is not None:
            assert r.carbon_date and "region-carbon-info" in r.carbon_source, name


def test_bad_energy_tables_are_one_line(tmp_path):
    (tmp_path / "energy.toml").write_text('[energy."nowhere/x"]\ncarbon_g_kwh = 1\ncarbon_date = "2025-01"\n'
                                          'carbon_source = "t"\n')
    with pytest.raises(InputError, match="energy nowhere/x: unknown region"):
        load_market([tmp_path])
    (tmp_path / "energy.toml").write_text('[energy."aws/us-east-1"]\nprice_kwh = 0.1\n')
    with pytest.raises(InputError, match="price_kwh needs price_date"):
        load_market([tmp_path])
    (tmp_path / "energy.toml").write_text('[energy."aws/us-east-1"]\nprice_kwh = 0.1\nprice_date = "2025-13"\n'
                                          'price_source = "t"\n')
    with pytest.raises(InputError, match="YYYY-MM"):
        load_market([tmp_path])


def _solve(offer: str):
    raw = raw_scenario(offers=[offer])
    raw["hardware"]["accelerator"] = [CAT.market.offers[offer].accelerator]
    pr = P.plan(build_scenario(raw, CAT), "enumerate")
    return pr, market_lines({"market": pr.report["market"], "status": "optimal"})


def test_report_prices_the_energy_and_its_carbon():
    pr, lines = _solve("aws-use1-h100-od")
    w = pr.report["market"]["power"]
    o = CAT.market.offers["aws-use1-h100-od"]
    cards = pr.best.plan.cards
    site_w = o.pue * (cards * 700 + math.ceil(cards / 8) * 4600)  # PUE x (cards x 700 W + hosts x 4,600 W)
    mwh = site_w * pr.best.metrics["finish_days"] * 24 / 1e6
    assert w["energy_mwh"] == pytest.approx(mwh, rel=1e-9)
    assert w["energy_cost"] == pytest.approx(mwh * 1000 * 0.0892, rel=1e-9)
    assert w["tco2e"] == pytest.approx(mwh * 323.05 / 1000, rel=1e-9)
    energy = [ln for ln in lines if ln.startswith("Energy:")]
    assert len(energy) == 1 and "tCO2e" in energy[0] and "not added to the bill" in energy[0]
    assert any(ln.startswith("Power:") and " kW at the site" in ln for ln in lines)  # 12 kW, not "0.01 MW"


def test_region_without_figures_says_so_and_card_without_power_says_no_power_figure():
    _, lines = _solve("runpod-rtx4090-od")
    assert any("no energy price for runpod/global" in ln and "no carbon figure for runpod/global" in ln
               for ln in lines)
    _, lines = _solve("list-h20")
    assert any(ln.startswith("Power: no power figure for h20") for ln in lines)
    assert not any(ln.startswith("Energy:") for ln in lines)


def test_power_in_a_unit_that_fits():
    assert watts_text(40e3) == "40.0 kW"  # the 40 kW cap printed "0.0 MW" before
    assert watts_text(999) == "999 W"
    assert watts_text(153.5e6) == "153.50 MW"


def test_sweep_pareto_carbon_at_a_grid(capsys, monkeypatch):
    """--pareto carbon --grid gcp/us-central1: energy at that region's PUE (1.10, offers.toml) and tCO2e =
    MWh x 412.72 / 1,000 (energy.toml); one grid's intensity scales every plan alike, so the carbon/cost front
    is the energy/cost front."""
    import json
    sweep = Path(__file__).resolve().parents[1] / "examples" / "design-case-sweep.toml"
    argv = ["sweep", "--scenario", str(sweep), "--hw", "h100-sxm,rtx4090", "--deadline", "20d,30d", "-q"]
    code, out, err = _cli([*argv, "--pareto", "carbon", "--grid", "gcp/us-central1", "--json"], capsys, monkeypatch)
    assert code == 0, err
    e = json.loads(out)["energy"]
    assert e["pue"] == 1.10 and e["grid"] == "gcp/us-central1" and "412.72" in e["pue_source"]
    watts = {"h100-sxm": (700, 4600), "rtx4090": (450, 0)}
    assert e["plans"]
    for p in e["plans"]:
        card_w, host_w = watts[p["accelerator"]]
        mwh = 1.10 * (p["cards"] * card_w + p["hosts"] * host_w) * p["finish_days"] * 24 / 1e6
        assert p["energy_mwh"] == pytest.approx(mwh, rel=1e-12) and p["tco2e"] == pytest.approx(mwh * 0.41272)
    code, out, _ = _cli([*argv, "--pareto", "energy", "--json"], capsys, monkeypatch)
    front_e = {(p["accelerator"], p["cards"], p["finish_days"]) for p in json.loads(out)["energy"]["plans"]
               if p["front"]}
    assert front_e == {(p["accelerator"], p["cards"], p["finish_days"]) for p in e["plans"] if p["front"]}
    code, out, _ = _cli([*argv, "--pareto", "carbon", "--grid", "gcp/us-central1"], capsys, monkeypatch)
    assert code == 0 and "tCO2e" in out


def test_sweep_pareto_carbon_needs_a_grid_with_a_figure(capsys, monkeypatch):
    sweep = Path(__file__).resolve().parents[1] / "examples" / "design-case-sweep.toml"
    argv = ["sweep", "--scenario", str(sweep), "--hw", "rtx4090", "--deadline", "20d", "-q"]
    code, _, err = _cli([*argv, "--pareto", "carbon", "--grid", "aws/us-east-2"], capsys, monkeypatch)
    assert code == 2 and "needs --grid PROVIDER/REGION with a carbon figure" in err and "Traceback" not in err
    code, _, err = _cli([*argv, "--grid", "gcp/us-central1"], capsys, monkeypatch)
    assert code == 2 and "--grid goes with --pareto carbon" in err


def test_an_offer_rows_qualifiers_share_one_bracket_joined_as_everywhere():
    """An offer row's qualifiers (not proven, priors only, illustrative, old price) in one bracket joined by "; ",
    as the rest of the reports join them (presentation.qualifiers_text): the rows joined them with ", "."""
    pr, _ = _solve("aws-use1-h100-od")
    m = copy.deepcopy(pr.report["market"])
    row = next(r for r in m["offers"] if "cards" in r)
    row.update(priors_only=True, notes=["assumption: illustrative price", "price dated 2024-01, over 6 months"])
    lines = market_lines({"market": m, "status": "optimal"})
    shown = next(line for line in lines if row["offer"] in line and f"{row['cost']:,.0f} USD" in line)
    assert shown.endswith(" (priors only; illustrative; old price)"), shown
    row.update(priors_only=False, notes=[])
    plain = next(line for line in market_lines({"market": m, "status": "optimal"})
                 if row["offer"] in line and f"{row['cost']:,.0f} USD" in line)
    assert plain.endswith(" USD") and "(" not in plain.split("USD")[-1], plain
