"""A new user's trial of the reports off the calibrated envelope (issue 35): what the text and JSON must say.

Each test here failed before its fix:
- text lines are printed as written: a bracketed word ("[hardware] stack names another", a scenario named
  "trial [/b]") is not a rich style tag to be eaten or to end the command in a traceback;
- every evaluation's footing carries the memory margin ("may not fit" within the memory model's error), not only
  a footing built by hand with a peak in bytes;
- a market solve (``--hw all``, offers) carries the footing of any solve: the chosen plan's own sigma with its
  reasons, P(on time) at it, and, on a card resting on priors, the best offer on a fitted card.
"""

from __future__ import annotations

import json
import math

import pytest

from tests.test_market import REGIONS, _cli, catalog_with, json_value, offer_table
from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import build_scenario
from tpopt.catalogs.uncertainty import load_evidence
from tpopt.cli.render import console_text

EV = load_evidence()


def test_text_lines_keep_bracketed_words_and_a_closing_tag_is_no_traceback():
    assert console_text("stated stack: x ([hardware] stack names another)", width=200).strip() == \
        "stated stack: x ([hardware] stack names another)"
    assert console_text("tpopt solve: trial [/b] [red]x: llama3-8b", width=200).strip() == \
        "tpopt solve: trial [/b] [red]x: llama3-8b"


def test_a_scenario_name_with_brackets_is_printed_as_written(tmp_path, capsys, monkeypatch):
    p = tmp_path / "s.toml"
    p.write_text('[scenario]\nname = "trial [/b]"\n[model]\nname = "qwen3-0.6b"\n[task]\ntokens = "2B"\n'
                 'seq_len = 2048\nglobal_batch = 64\n[schedule]\ndeadline = "20d"\n[hardware]\n'
                 'accelerator = "h100-sxm"\nefficiency = 0.4\n[search]\nmax_cards = 8\n')
    code, out, err = _cli(["solve", "--scenario", str(p)], capsys, monkeypatch)
    assert code == 0 and "Traceback" not in err, err
    assert out.splitlines()[0].startswith("tpopt solve: trial [/b]: qwen3-0.6b")


def _raw(acc, offers=None):
    raw = {"model": {"name": "qwen3-0.6b"}, "task": {"tokens": "20B", "seq_len": 4096, "global_batch": 64},
           "schedule": {"deadline": "20d", "reserved": "1d"}, "hardware": {"accelerator": acc},
           "checkpoint": {"save_interval": "auto", "mode": "sync"},
           "search": {"zero_stage": [1], "tp": [1], "pp": [1], "micro_batch": [1, 2], "max_cards": 64}}
    if offers:
        raw["market"] = {"offers": offers}
    return raw


def test_every_evaluation_states_its_memory_margin_against_the_memory_models_error(tmp_path, capsys, monkeypatch):
    p = tmp_path / "s.toml"
    raw = _raw("h100-sxm")
    p.write_text("".join(f"[{t}]\n" + "".join(f"{k} = {json_value(v)}\n" for k, v in body.items())
                         for t, body in raw.items()))
    code, out, err = _cli(["evaluate", "--scenario", str(p), "--cards", "8", "--json"], capsys, monkeypatch)
    d = json.loads(out)
    m = d["footing"]["evidence"]["memory"]
    peak, limit = d["metrics"]["memory_per_card_gib"], d["metrics"]["memory_limit_gib"]
    # the margin's definition, 1 - peak / limit, on the figures the report's own table prints
    assert m["peak_gib"] == pytest.approx(peak) and m["limit_gib"] == pytest.approx(limit)
    assert m["margin"] == pytest.approx(1 - peak / limit) and m["error"] == EV.memory_error
    assert m["may_not_fit"] == (1 - peak / limit < EV.memory_error)


def test_a_market_solve_carries_the_footing_and_names_the_fitted_offer(tmp_path, capsys, monkeypatch):
    offers = REGIONS + offer_table("mi-od", "cloud-a", "east", "mi300x", "on-demand", 1.0) + \
        offer_table("h100-od", "cloud-b", "west", "h100-sxm", "on-demand", 3.0)
    cat = catalog_with(tmp_path, offers)
    raw = _raw(["mi300x", "h100-sxm"], "all")
    p = tmp_path / "s.toml"
    p.write_text("".join(f"[{t}]\n" + "".join(f"{k} = {json_value(v)}\n" for k, v in body.items())
                         for t, body in raw.items()))
    argv = ["solve", "--scenario", str(p), "--catalog", str(tmp_path / "cat")]
    code, out, err = _cli([*argv, "--json"], capsys, monkeypatch)
    assert code == 0, err
    d = json.loads(out)
    assert d["plan"]["accelerator"] == "mi300x"  # a third of the H100's price: the card on priors wins
    e = d["footing"]["evidence"]
    sc = build_scenario(raw, cat)
    assert sc.system("mi300x").per_op
    # no run fitted on the MI300X: the base and the card-on-priors share in quadrature (catalogs/uncertainty.toml)
    prior = next(v for f, v, _ in EV.contributions if f == "card_prior")
    assert e["card"] == "prior" and e["sigma"] == pytest.approx(math.hypot(EV.base, prior))
    assert e["reasons"] == ["mi300x rests on priors (no run fitted on it)"] and 0 <= e["p_on_time"] <= 1
    # the fitted option: the cheapest plan on a fitted card as the market table lists the offers, against the
    # chosen plan's cost
    fitted = min((r for r in d["market"]["offers"] if "cards" in r and not r["priors_only"]), key=lambda r: r["cost"])
    alt = e["fitted_alternative"]
    assert alt["accelerator"] == fitted["offer"].split("/")[2] and alt["cards"] == fitted["cards"]
    assert alt["ratio"] == pytest.approx(fitted["cost"] / d["metrics"]["cost"])
    assert alt["within"] == (alt["ratio"] <= math.exp(e["sigma"]))
    # the footing's price is the chosen offer's (1.0 USD, read 2026-10 in the offer table), not the card's
    # catalog list price of another date
    pr = d["footing"]["price"]
    assert pr["card_hour"] == 1.0 and pr["date"] == "2026-10" and "mi300x/on-demand" in pr["source"]
    code, out, err = _cli(argv, capsys, monkeypatch)
    text = " ".join(out.split())
    assert "price: 1 USD/card-h, user catalog 2026-10, the price your catalog file states" in text  # its file's
    assert f"step-time sigma {e['sigma']:.3f}: mi300x rests on priors" in text
    assert f"P(on time) {e['p_on_time'] * 100:.1f} % at this sigma" in text


def test_the_catalog_used_here_has_the_mi300x_on_priors():
    assert EV.envelope("mi300x") is None and EV.envelope("h100-sxm") is not None
    assert load_catalog().accelerator("mi300x").name == "mi300x"


# ---------------------------------------------------------------------------------------------- recipes a card lacks


def _step(acc, precision):
    from tpopt.models.evaluate import evaluate, resolve_plan
    from tpopt.models.plan import Plan
    raw = {"model": {"name": "llama3-8b"}, "task": {"tokens": "100B", "seq_len": 8192, "global_batch": 64,
                                                   "precision": precision},
           "schedule": {"deadline": "60d"}, "hardware": {"accelerator": acc}}
    sc = build_scenario(raw, load_catalog())
    return evaluate(sc, resolve_plan(sc, Plan(accelerator=acc, cards=8, tp=1, pp=1, zero_stage=1, micro_batch=1)))


@pytest.mark.parametrize("acc", ["h100-sxm", "h200", "mi300x"])
def test_mxfp8_and_nvfp4_on_a_card_without_block_scaled_units_run_at_the_16_bit_rate(acc):
    # NVIDIA Transformer Engine, "Datatype and hardware support matrix": MXFP8 and NVFP4 on compute capability
    # 10.0 / 10.3 (Blackwell data-centre) only; Hopper runs per-tensor FP8; AMD's CDNA 3 (MI300X / MI325X) has
    # FP8 but no MX formats (CDNA 4, the MI355X, adds them). A plan that cannot run as stated is priced as the
    # stack falls back, at the 16-bit rate, never at the FP8 peak.
    bf16 = _step(acc, "bf16-mixed").metrics["step_s"]
    assert _step(acc, "mxfp8-mixed").metrics["step_s"] == pytest.approx(bf16)
    assert _step(acc, "nvfp4-mixed").metrics["step_s"] == pytest.approx(bf16)
    assert _step(acc, "fp8-mixed").metrics["step_s"] < 0.9 * bf16  # per-tensor FP8 runs on these cards


@pytest.mark.parametrize("acc", ["b200", "mi355x"])
def test_block_scaled_recipes_keep_their_peak_on_cards_with_those_units(acc):
    bf16 = _step(acc, "bf16-mixed").metrics["step_s"]
    assert _step(acc, "mxfp8-mixed").metrics["step_s"] < 0.9 * bf16
    assert _step(acc, "nvfp4-mixed").metrics["step_s"] < _step(acc, "mxfp8-mixed").metrics["step_s"]


def test_the_footing_says_when_the_card_has_no_units_for_the_recipe():
    from tpopt.optimizer.footing import of_evaluation
    from tpopt.presentation import footing_lines
    ev = _step("h200", "mxfp8-mixed")
    raw = {"model": {"name": "llama3-8b"}, "task": {"tokens": "100B", "seq_len": 8192, "global_batch": 64,
                                                   "precision": "mxfp8-mixed"},
           "schedule": {"deadline": "60d"}, "hardware": {"accelerator": "h200"}}
    sc = build_scenario(raw, load_catalog())
    f = of_evaluation(sc, ev.as_dict())
    said = [e for e in f["stated"] if e["input"] == "precision"]
    assert len(said) == 1 and said[0]["matrix_units"] is False
    assert "mxfp8_gemm_ratio" not in {p["name"] for p in f["parameters"]}  # not a parameter of this plan
    text = " ".join(" ".join(footing_lines(f)).split())
    assert "stated precision: mxfp8-mixed, but h200 has no MXFP8 matrix units" in text
    assert "its weight GEMMs at the BF16 peak" in text
    ok = _step("b200", "mxfp8-mixed")
    sc_b = build_scenario({**raw, "hardware": {"accelerator": "b200"}}, load_catalog())
    assert not [e for e in of_evaluation(sc_b, ok.as_dict())["stated"] if e["input"] == "precision"]


def _strict(text):
    def bad(c):
        raise ValueError(f"not JSON: {c}")
    return json.loads(text, parse_constant=bad)


def test_a_plan_over_the_memory_limit_is_not_called_may_not_fit_and_no_split_gives_no_margin(
        tmp_path, capsys, monkeypatch):
    p = tmp_path / "s.toml"
    raw = _raw("h100-sxm")
    raw["model"]["name"] = "llama3-8b"
    raw["task"].update({"seq_len": 8192, "global_batch": 64})
    p.write_text("".join(f"[{t}]\n" + "".join(f"{k} = {json_value(v)}\n" for k, v in body.items())
                         for t, body in raw.items()))
    # ZeRO-1 on 8 cards, 8 sequences of 8K tokens per micro-batch, no recompute: far over 74 GiB
    over = ["evaluate", "--scenario", str(p), "--cards", "8", "--micro-batch", "8", "--recompute", "none"]
    code, out, err = _cli([*over, "--json"], capsys, monkeypatch)
    d = _strict(out)
    m = d["footing"]["evidence"]["memory"]
    assert d["metrics"]["memory_per_card_gib"] > d["metrics"]["memory_limit_gib"] and m["margin"] < 0
    code, out, err = _cli(over, capsys, monkeypatch)
    assert "MAY NOT FIT" not in out and "VIOLATED" in out
    # 100 layers on the first of two stages of a 32-layer model: no split places them, no peak, no margin
    none = ["evaluate", "--scenario", str(p), "--cards", "8", "--pp", "2", "--first-stage-layers", "100"]
    code, out, err = _cli([*none, "--json"], capsys, monkeypatch)
    d = _strict(out)
    assert code == 3 and d["metrics"]["memory_per_card_gib"] is None and "memory" not in d["footing"]["evidence"]
    code, out, err = _cli(none, capsys, monkeypatch)
    assert "MAY NOT FIT" not in out


def test_a_fitted_offer_a_cost_bound_decided_is_solved_where_it_may_be_within_the_uncertainty(
        tmp_path, capsys, monkeypatch):
    """Llama-3-8B on an MI300X offer (1 USD/card-h, a card on priors) beside an H100 offer (5 USD/card-h, fitted):
    the market decides the H100 offer by its cost bound b (no plan on it bills less than b > the MI300X's bill), so
    it was never solved. With the chosen plan's sigma at 1.5 (stated), b <= cost x e^1.5: a plan on it may be within
    the uncertainty, so it is solved and named, its cost that of the H100 offer solved alone; at sigma 0.1,
    b > cost x e^0.1: no plan on it can be within (ratio >= b / cost), and it stays unsolved."""
    offers = REGIONS + offer_table("mi-od", "cloud-a", "east", "mi300x", "on-demand", 1.0) + \
        offer_table("h100-od", "cloud-b", "west", "h100-sxm", "on-demand", 5.0)
    catalog_with(tmp_path, offers)
    mi, h100 = "cloud-a/east/mi300x/on-demand", "cloud-b/west/h100-sxm/on-demand"

    def solve(ids, sigma):
        raw = _raw(["mi300x", "h100-sxm"], ids)
        raw["model"]["name"] = "llama3-8b"
        raw["risk"] = {"step_sigma": sigma}
        p = tmp_path / "s.toml"
        p.write_text("".join(f"[{t}]\n" + "".join(f"{k} = {json_value(v)}\n" for k, v in body.items())
                             for t, body in raw.items()))
        code, out, err = _cli(["solve", "--scenario", str(p), "--catalog", str(tmp_path / "cat"), "--json"],
                              capsys, monkeypatch)
        assert code == 0, err
        return json.loads(out)

    d = solve([mi, h100], 1.5)
    assert d["plan"]["accelerator"] == "mi300x"
    rows = {r["offer"]: r for r in d["market"]["offers"]}
    bound, cost = rows[h100]["bound"], d["metrics"]["cost"]
    assert rows[h100]["status"] == "bounded" and cost < bound <= cost * math.exp(1.5)
    alone = solve([h100], 1.5)["metrics"]["cost"]  # the H100 offer's best plan, solved on its own
    alt = d["footing"]["evidence"]["fitted_alternative"]
    assert alt["accelerator"] == "h100-sxm" and alt["bounded_solved"]
    assert alt["value"] == pytest.approx(alone) and alt["ratio"] == pytest.approx(alone / cost)
    assert alt["within"] == (alone / cost <= math.exp(1.5)) and alt["within"]
    small = solve([mi, h100], 0.1)
    assert small["metrics"]["cost"] == pytest.approx(cost) and bound > cost * math.exp(0.1)
    assert small["footing"]["evidence"]["fitted_alternative"] is None
