"""`tpopt explain` on a market (``--hw all``: one sub-problem per catalog offer) with no plan on any offer.

A new user's trial: it listed "infeasible" for every offer and suggested raising the availability or the caps,
with no conflict and without naming the real cause (the input pipeline and the deadline). It now answers as a
single-card request does (:mod:`tpopt.optimizer.market_explain`): the conflict on the offer nearest a plan, and
the smallest changes; the inputs every offer shares are re-solved on the whole market, and every such change is
checked here by `tpopt solve` on the market: with it a plan (exit 0), one printed unit less favourable none
(exit 3)."""

import json

import pytest
from click.testing import CliRunner

from tests.conftest import ROOT
from tpopt.cli.main import cli

DESIGN = (ROOT / "examples" / "design-case.toml").read_text()


def _run(*args):
    r = CliRunner().invoke(cli, list(args))
    assert r.exit_code in (0, 3), r.output
    return r.exit_code, r.output


def _scenario(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def _solves(path, *args):
    """Does `tpopt solve` on the market find a plan (the oracle for "this change fixes it")?"""
    return _run("solve", "--scenario", path, "--hw", "all", "--json", *args)[0] == 0


@pytest.fixture(scope="module")
def input_bound():
    """The design case (Qwen3-8B, 4 input workers of 2 sequences/s of 8,192 tokens, 30 d with 5 reserved) on
    every offer, with 200B tokens. The input pipeline delivers 4 x 2 x 8,192 = 65,536 tokens/s, so 200B tokens
    take 200e9 / 65,536 = 3.05e6 s = 35.3 d > 25 d on any card: the input pipeline and the deadline conflict
    on every offer (a faster card only raises the demand on the pipeline)."""
    code, text = _run("explain", "--hw", "all", "--tokens", "200B", "--json")
    assert code == 3
    return json.loads(text)


def test_the_market_names_the_conflict_not_only_infeasible_offers(input_bound):
    assert 200e9 / (4 * 2 * 8192) / 86400 > 30 - 5  # the derivation: 35.3 d of input against 25 d
    d = input_bound
    assert d["status"] == "infeasible" and all(o["status"] == "infeasible" for o in d["market"]["offers"])
    assert set(d["conflict"]) == {"input.throughput", "deadline.finish"}  # before: [] (offers listed only)
    near = d["market_conflict"]
    assert near["offer"] in {o["offer"] for o in d["market"]["offers"]}
    fastest = next(x for x in d["conflict_detail"] if x["name"] == "deadline.finish")
    assert fastest["value"] == pytest.approx(near["fastest_finish_days"])  # its fastest plan meeting the others
    assert fastest["value"] > 30


def test_each_market_change_fixes_it_and_is_the_smallest(input_bound, tmp_path):
    rel = {r["parameter"]: r for r in input_bound["relaxations"]}
    assert "accelerator" not in rel  # the offers are the accelerators
    assert rel["deadline"]["helps"] and rel["tokens"]["helps"] and rel["input_rate"]["helps"]
    assert all(rel[k]["scope"] == "market" for k in ("deadline", "tokens", "reserved", "input_rate"))
    base = _scenario(tmp_path, "base.toml", DESIGN)
    dl = rel["deadline"]["required"]
    assert _solves(base, "--tokens", "200B", "--deadline", f"{dl:.2f}d")
    assert not _solves(base, "--tokens", "200B", "--deadline", f"{dl - 0.01:.2f}d")
    tok = rel["tokens"]["required"]  # billions
    assert _solves(base, "--tokens", f"{tok:.2f}B") and not _solves(base, "--tokens", f"{tok + 0.01:.2f}B")
    assert tok < 200 * 25 / 35.3  # the input pipeline alone allows 25 / 35.3 of the tokens; the rest is overhead
    rate = rel["input_rate"]["required"]
    assert rate > 2 * 35.3 / 25  # at least the rate that feeds 200B tokens in 25 d

    def at_rate(r):
        return _scenario(tmp_path, f"rate{r:.2f}.toml", DESIGN.replace("sequences_per_worker_s = 2",
                                                                        f"sequences_per_worker_s = {r:.2f}"))
    assert _solves(at_rate(rate), "--tokens", "200B") and not _solves(at_rate(rate - 0.01), "--tokens", "200B")
    assert rel["reserved"]["helps"] is False  # 35.3 d of input exceed the 30 d deadline with no reserved time


AVAIL = (DESIGN.replace('name = "qwen3-8b"', 'name = "qwen3-32b"')
         .replace("sequences_per_worker_s = 2", "sequences_per_worker_s = 1000")
         .replace("max_cards = 1024", "max_cards = 100000")
         .replace("global_batch = 384 ", "global_batch = 16384 "))


def test_an_offers_availability_is_named_and_max_cards_is_not_suggested(tmp_path):
    """Qwen3-32B, 10T tokens in 30 days, an input pipeline that never binds and a batch of 16,384 sequences:
    the fastest offer runs out of available cards (market.available), not out of max_cards (100,000)."""
    path = _scenario(tmp_path, "avail.toml", AVAIL)
    code, text = _run("explain", "--scenario", path, "--hw", "all", "--tokens", "10000B", "--deadline", "30d",
                      "--json")
    d = json.loads(text)
    assert code == 3 and d["status"] == "infeasible"
    near = d["market_conflict"]
    offers = json.loads(_run("catalog", "offers", "--json")[1])
    available = next(o["available"] for o in offers if o["id"] == near["offer"])  # the catalog's own figure
    assert near["cards_cap"] == "market.available" and near["max_cards"] == available < 100_000
    assert set(d["conflict"]) == {"market.available", "deadline.finish"}
    cards = next(r for r in d["relaxations"] if r["parameter"] == "market.available")
    assert cards["helps"] and cards["required"] > available and cards["apply"] is None
    assert "--max-cards alone does not raise it" in cards["note"] and "max_cards (now" not in cards["note"]
    dl = next(r for r in d["relaxations"] if r["parameter"] == "deadline")["required"]
    assert _solves(path, "--tokens", "10000B", "--deadline", f"{dl:.2f}d")
    assert not _solves(path, "--tokens", "10000B", "--deadline", f"{dl - 0.01:.2f}d")
    text = _run("explain", "--scenario", path, "--hw", "all", "--tokens", "10000B", "--deadline", "30d")[1]
    assert f"Nearest offer: {near['offer']}" in " ".join(text.split())
    assert "--max-cards 2" not in text  # the old advice raised a cap the offer does not have


def test_where_max_cards_equals_the_offers_availability_both_are_named(tmp_path):
    """max_cards 1,024 and the nearest offer's 1,024 available: raising max_cards alone (what the single-card
    answer, `--max-cards`, would say) leaves the offer at its 1,024 cards, so the change names both."""
    path = _scenario(tmp_path, "both.toml", AVAIL.replace("max_cards = 100000", "max_cards = 1024"))
    d = json.loads(_run("explain", "--scenario", path, "--hw", "all", "--tokens", "10000B", "--deadline", "30d",
                        "--json")[1])
    near = d["market_conflict"]
    assert near["max_cards"] == near["available"] == 1024 and near["cards_cap"] == "market.available"
    cards = next(r for r in d["relaxations"] if r["parameter"] == "market.available")
    assert cards["required"] > 1024 and cards["apply"] is None
    assert "raise max_cards (now 1,024) too" in cards["note"]


@pytest.mark.parametrize("over", [{}, {"input.sequences_per_worker_s": 1000, "schedule.reserved": "0d"}])
def test_the_finish_floor_is_below_each_offers_fastest_plan(over):
    """The nearest-offer search stops at an offer whose finish floor R + W / max_cards (W: the weight GEMMs'
    card-seconds at the card's peak and best efficiency) is above the best finish found, and the market's
    re-solves skip an offer whose floor passes the deadline: the floor must be at most the fastest plan of every
    offer, here checked against the brute force (enumeration) on each offer of the design market at 200B tokens
    (the fastest plan with the deadline and budget dropped, as the search asks it); and with an input pipeline that
    never binds and no reserved days, where the compute floor W / max_cards is all of it."""
    from tpopt.catalogs import load_catalog
    from tpopt.catalogs.scenario import build_scenario, read_scenario_file, with_overrides
    from tpopt.models import families as F
    from tpopt.optimizer import core
    from tpopt.optimizer import market as MK
    from tpopt.optimizer.market_explain import finish_floor_s
    from tpopt.optimizer.result import Request
    from tpopt.optimizer.space import FAMILIES

    cat = load_catalog()
    raw = with_overrides(read_scenario_file(ROOT / "examples" / "design-case.toml"),
                         {"task.tokens": "200B", "hardware.accelerator": "all", **over})  # --hw all
    sc = build_scenario(raw, cat)
    enforce = frozenset(FAMILIES) - {F.DEADLINE, F.BUDGET}
    seen, checked = set(), 0
    for offer in sc.market.offers:
        sub = MK.offer_scenario(sc, offer)
        key = (offer.accelerator, sub.search.max_cards)
        if key in seen:
            continue
        seen.add(key)
        floor = finish_floor_s(sub)
        assert floor > sub.task.reserved_s == (0 if over else 5 * 86400)  # the design case reserves 5 of 30 days
        r = core.solve(sub, "enumerate", Request(objective="time", enforce=enforce))
        if r.best is not None:
            assert floor <= r.best.metrics["finish_days"] * 86400, (offer.id, floor, r.best.metrics["finish_days"])
            checked += 1
    assert checked > 10


def test_max_cards_is_answered_on_the_market_not_on_the_nearest_offer(tmp_path):
    """The design case on every offer with --max-cards 4 (a new user's trial). No H100 plan fits 4 cards: an
    H100 host has 8 (catalog), and plans are whole hosts. The nearest offer under that cap is a card sold in
    hosts of at most 4, where no card count helps; the answer said "max_cards: cannot help" although 8 cards
    give the market a plan. Derivation that one 8-card H100 host does: 100B tokens x 52.7 GFLOP per token
    (solve's model line) at 8 x 989 TFLOP/s x 0.40 (the flat model's stated efficiency) take 19.3 d, within
    the 30 - 5 = 25 days. So max_cards is re-solved on the market: with it a plan, one card fewer none."""
    days = 100e9 * 52.7e9 / (8 * 989e12 * 0.40) / 86400
    assert days < 30 - 5
    code, text = _run("explain", "--hw", "all", "--max-cards", "4", "--json")
    d = json.loads(text)
    assert code == 3 and d["market_conflict"]["cards_cap"] == "search.max_cards"
    cards = next(r for r in d["relaxations"] if r["parameter"] == "max_cards")
    assert cards["helps"] is True and cards["scope"] == "market"  # before: False, "offer list/catalog/..."
    assert cards["required"] == 8 and cards["plan"]["accelerator"] == "h100-sxm" and cards["plan"]["cards"] == 8
    assert cards["finish_days"] < 30 and cards["apply"] == {"search.max_cards": 8}
    base = _scenario(tmp_path, "base.toml", DESIGN)
    assert _solves(base, "--max-cards", "8") and not _solves(base, "--max-cards", "7")
    text = " ".join(_run("explain", "--hw", "all", "--max-cards", "4")[1].split())
    assert "max_cards now 4 cards: >= 8 cards" in text and "budget, max cards and storage bandwidth" in text
