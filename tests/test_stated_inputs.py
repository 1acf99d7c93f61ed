"""Stated inputs in the footing (issue 37 item 3): the values a scenario states that the model would compute
otherwise, or that move the plan silently, each named with the model's own figure or what it costs the plan.
Every figure is checked against the tool run on a variant of the scenario, or against the scenario's own
numbers."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tpopt.cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
DC = ROOT / "examples" / "design-case.toml"
RESERVE_LINE = 'activation_reserve = "10GiB"   # activations + gathered module params + workspace'


def run(*args):
    r = CliRunner().invoke(cli, list(map(str, args)))
    assert r.exit_code in (0, 3), r.output
    return r.output


def stated(footing: dict, name: str) -> dict:
    return next(e for e in footing["stated"] if e["input"] == name)


@pytest.fixture(scope="module")
def headline():
    return json.loads(run("solve", "--scenario", DC, "--json"))


@pytest.fixture(scope="module")
def modelled(tmp_path_factory):
    """The design case with its activation budget removed (activations modelled, recompute searched)."""
    text = DC.read_text()
    assert RESERVE_LINE in text
    p = tmp_path_factory.mktemp("modelled") / "modelled.toml"
    p.write_text(text.replace(RESERVE_LINE, ""))
    return p


def test_activation_budget_states_the_modelled_peak_and_the_plan_it_leads_to(headline, modelled):
    e = stated(headline["footing"], "activation budget")
    assert e["stated_gib"] == 10.0
    plan = headline["plan"]
    assert plan["cards"] == 48
    # the same plan evaluated with activations modelled: its peak against the usable memory
    ev = json.loads(run("evaluate", "--scenario", modelled, "--cards", 48, "--zero", plan["zero_stage"], "--tp", 1,
                        "--pp", 1, "--micro-batch", plan["micro_batch"], "--recompute", plan["recompute"], "--json"))
    assert e["modelled_peak_gib"] == pytest.approx(ev["metrics"]["memory_per_card_gib"], rel=1e-12)
    assert e["limit_gib"] == 22.0 and not e["fits"] and e["modelled_peak_gib"] > 2 * e["limit_gib"]  # 48.4 GiB
    # the question solved with activations modelled: the plan the footing names
    alt = json.loads(run("solve", "--scenario", modelled, "--json"))
    m = e["modelled_plan"]
    assert m["feasible"] and m["cards"] == alt["plan"]["cards"] == 64 and alt["plan"]["recompute"] == "full"
    assert m["value"] == pytest.approx(alt["metrics"]["cost"], rel=1e-12)
    assert m["ratio"] == pytest.approx(alt["metrics"]["cost"] / headline["metrics"]["cost"], rel=1e-12)
    text = run("solve", "--scenario", DC)
    pct = (alt["metrics"]["cost"] / headline["metrics"]["cost"] - 1) * 100
    assert "stated activation budget: 10 GiB per card" in " ".join(text.split())
    assert f"64 cards, recompute full, cost {alt['metrics']['cost']:,.0f} USD, {pct:+.1f} %)" in " ".join(text.split())
    assert f"{pct:+.1f}" == "+31.5"  # the figure: 23,518 USD against 17,880


def test_input_pipeline_reliability_storage_and_reserved_time_are_stated(headline):
    f, m = headline["footing"], headline["metrics"]
    inp = stated(f, "input pipeline")
    assert inp["supply_seq_s"] == 4 * 2  # [input] workers = 4, sequences_per_worker_s = 2
    # demand = sequences per step / the step without the unhidden input wait ([input] wait = 0.5 s)
    assert inp["demand_seq_s"] == pytest.approx(384 / (m["step_s"] - 0.5), rel=1e-9)
    mtbf = stated(f, "card MTBF")
    assert mtbf["card_mtbf_days"] == pytest.approx(1024 * 7.9 / 24, rel=1e-12)  # job_mtbf: 1,024 cards, 7.9 h
    assert mtbf["failure_overhead"] == pytest.approx(m["overhead_redo"] + m["overhead_restart"], rel=1e-12)
    st = stated(f, "storage bandwidth")
    assert st["write_gb_s"] == 7.0 and st["save_overhead"] == pytest.approx(m["overhead_save"], rel=1e-12)
    nics = stated(f, "NICs per host")
    assert nics["nics_per_host"] == headline["plan"]["nics_per_host"] == 8
    res = stated(f, "reserved time")
    # cost = rate x finish, the rate the plan's cards: the reserved days' share of it is reserved / finish
    assert res["reserved_share"] == pytest.approx(5 / m["finish_days"], rel=1e-12)
    text = " ".join(run("solve", "--scenario", DC).split())
    assert "stated input pipeline: 8 sequences/s (4 workers x 2 sequences/s)" in text
    assert "reserved time 5 d billed at 48 cards" in text and "card MTBF 337 d" in text


def test_stack_on_a_card_it_does_not_target_is_stated():
    d = json.loads(run("evaluate", "--scenario", DC, "--hw", "mi300x", "--cards", 48, "--json"))
    e = stated(d["footing"], "stack")
    assert e["vendor"] == "AMD" and "megatron-core assumed on AMD cards" in e["stated"]
    d = json.loads(run("evaluate", "--scenario", DC, "--cards", 48, "--json"))
    assert not [e for e in d["footing"]["stated"] if e["input"] == "stack"]  # an NVIDIA card: nothing to say


SWEEP = ROOT / "examples" / "design-case-sweep.toml"
WORKERS_LINE = "workers = 4"


def test_a_collapsed_sweep_names_the_constraint_that_pins_it(tmp_path):
    """The design-case sweep over three cards: its input pipeline (4 workers x 2 sequences/s = 8/s) makes every
    plan's busy step at least 384 / 8 = 48 s, so every card's fastest plan finishes in about the same time and
    the front holds one plan; the sweep names input.throughput, and the fastest plans it quotes without it are
    what `tpopt solve --objective time` gives on the scenario without the input pipeline."""
    hw = ("rtx4090", "h100-sxm", "a100-80gb-sxm")
    d = json.loads(run("sweep", "--scenario", SWEEP, "--hw", ",".join(hw), "--json"))
    assert len(d["front"]) == 1
    pins = d["front_pins"]
    assert pins["families"] == ["input.throughput"] and set(pins["fastest_days"]) == set(hw)
    text = SWEEP.read_text()
    assert WORKERS_LINE in text
    free = tmp_path / "no-input.toml"
    free.write_text(text.replace(WORKERS_LINE, ""))  # no workers: no input constraint
    ev = json.loads(run("evaluate", "--scenario", SWEEP, "--cards", 48, "--json"))
    iters, reserved = ev["metrics"]["iterations"], 5
    for acc in hw:
        got = pins["fastest_days"][acc]
        # with the pipeline: finish >= reserved + iterations x (48 s + 0.5 s wait), overhead excluded
        assert got["with"] >= reserved + iters * (384 / 8 + 0.5) / 86400
        alt = json.loads(run("solve", "--scenario", free, "--hw", acc, "--objective", "time", "--deadline", "3650d",
                             "--json"))
        assert got["without"] == pytest.approx(alt["metrics"]["finish_days"], rel=1e-9)
        assert got["without"] < got["with"] / 3
    out = " ".join(run("sweep", "--scenario", SWEEP, "--hw", ",".join(hw)).split())
    assert "The front collapses to one plan (h100-sxm x 8): input.throughput pins it on every accelerator" in out
    # a sweep whose front holds several plans says nothing of the kind
    d = json.loads(run("sweep", "--scenario", SWEEP, "--json"))
    assert len(d["front"]) == 2 and d["front_pins"] is None
