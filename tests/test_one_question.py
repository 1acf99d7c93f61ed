"""Issue 36, "one question, one answer": explain, simulate, replan and sweep --confidence answer the question
``tpopt solve`` answers (plan(): global-batch choices, training stages, market offers, confidence), or refuse
in one line.

Before: explain solved the scenario's first design space only (examples/design-case-batch.toml: solve 32
cards at batch 192, 12,345 USD; explain 48 cards at batch 384, 17,880 USD "optimal"), simulate and replan
ended in a ValueError on batch choices and ignored [market]. The property test draws small flat-model
scenarios with batch choices, stages or offers; explain's optimum must equal solve's (status, plan, cost;
each stage's plan), the batch-choice optimum must equal a brute force over the batches written here (the
enumerator on each batch's own scenario), and simulate / replan must run the plan solve chose.
benchmarks/one_answer.py runs the same checks on 500+ drawn scenarios.
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tpopt
from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import build_scenario
from tpopt.cli.main import main
from tpopt.models.plan import Scenario
from tpopt.optimizer import core
from tpopt.optimizer import question as Q
from tpopt.optimizer.outer import at_batch, batch_choices
from tpopt.optimizer.plan import plan
from tpopt.optimizer.result import Request

ROOT = Path(__file__).resolve().parents[1]
BATCH, LONG = str(ROOT / "examples/design-case-batch.toml"), str(ROOT / "examples/llama3-8b-long-context.toml")


def req() -> Request:
    """A fresh request (a request keeps the clock its first solve starts: one per command)."""
    return Request(time_limit=120.0)

REL = 1e-9

OFFERS = ('[region."cloud-a/east"]\nsource = "test"\n' + "".join(
    f'[offer.{n}]\nprovider = "cloud-a"\nregion = "east"\naccelerator = "h100-sxm"\ncards_per_host = 8\n'
    f'market = "{m}"\nprice_card_hour = {p}\navailable = 128\ndate = "2026-10"\nsource = "test offer"\n{x}\n'
    for n, m, p, x in (("od", "on-demand", 3.0, ""),
                       ("spot", "spot", 1.7, 'preempt_per_card_hour = 0.005\nreacquire = "1h"\n'))))


def small_raw(rng: random.Random) -> dict[str, Any]:
    return {"model": {"name": "qwen3-0.6b"},
            "task": {"tokens": f"{rng.choice([50, 100, 200, 400, 800])}B", "seq_len": 4096, "global_batch": 256},
            "schedule": {"deadline": f"{rng.uniform(1.0, 20.0):.2f}d", "reserved": f"{rng.uniform(0, 0.5):.2f}d"},
            "hardware": {"accelerator": rng.choice([["h100-sxm"], ["h100-sxm", "a100-80gb-sxm"]]),
                         "efficiency": rng.choice([0.3, 0.4])},
            "checkpoint": {"save_interval": "auto", "mode": "sync"},
            "search": {"zero_stage": [1], "tp": [1, 2], "pp": [1], "micro_batch": [1, 2],
                       "max_cards": rng.choice([32, 64, 128])}}


def drawn(seed: int) -> tuple[Scenario, dict[str, Any]]:
    """Scenario ``seed``: batch choices (with or without a confidence), two training stages, or offers."""
    rng = random.Random(seed)
    raw = small_raw(rng)
    kind = rng.choice(["batch", "batch", "stages", "market"])
    dirs: list[str] = []
    if kind == "batch":
        raw["task"]["critical_batch"] = rng.choice(["1M", "4M"])
        raw["search"]["global_batch"] = rng.sample([64, 128, 256, 512, 1024], rng.choice([2, 3]))
        if rng.random() < 0.5:
            raw["schedule"]["confidence"] = f"{rng.choice([50, 90, 95])}%"
    elif kind == "stages":
        del raw["task"]["tokens"]
        raw["task"]["stages"] = [
            {"name": "short", "tokens": f"{rng.choice([50, 200, 400])}B", "seq_len": 4096, "global_batch": 256},
            {"name": "long", "tokens": f"{rng.choice([5, 20, 50])}B", "seq_len": 16384, "global_batch": 64}]
    else:
        raw["hardware"]["accelerator"] = ["h100-sxm"]
        raw["market"] = {"offers": ["od", "spot"]}
        if rng.random() < 0.5:
            raw["schedule"]["confidence"] = f"{rng.choice([50, 90])}%"
        with tempfile.TemporaryDirectory() as d:
            (Path(d) / "offers.toml").write_text(OFFERS)
            return build_scenario(raw, load_catalog([d])), raw
    return build_scenario(raw, load_catalog(dirs)), raw


def brute_over_batches(sc: Scenario) -> float | None:
    """The least cost over the batch choices: each batch's own scenario solved by plain enumeration."""
    costs = []
    for b in batch_choices(sc):
        one = at_batch(sc, b)
        r = core.solve(replace(one, search=replace(one.search, global_batch=(b,))), "enumerate", req())
        if r.best is not None:
            costs.append(r.best.metrics["cost"])
    return min(costs) if costs else None


def check(sc: Scenario, raw: dict[str, Any]) -> tuple[list[str], bool]:
    """(what differs between explain / simulate / replan and solve on one scenario, [] when they agree; whether
    solve found a plan)."""
    bad: list[str] = []
    solved = plan(sc, "cpsat", req())
    if solved.solver.limit_reached:
        return [f"solve reached its time limit ({solved.status.value})"], solved.feasible
    ex = Q.explain_request(sc, "cpsat", req(), raw=raw)
    if ex["status"] != solved.status.value:
        bad.append(f"status: explain {ex['status']}, solve {solved.status.value}")
    if sc.stages:
        if solved.feasible:
            got = [(s["plan"], s["metrics"]["cost"]) for s in ex["stages"]]
            want = [(s["plan"], s["metrics"]["cost"]) for s in solved.report["stages"]]
            if got != want or ex["total"]["cost"] != solved.report["total"]["cost"]:
                bad.append("staged plans differ")
        with pytest.raises(Exception, match="training stages"):  # simulate reads one plan: refused in one line
            Q.chosen(sc, "cpsat", req())
        return bad, solved.feasible
    if solved.best is None:
        return bad + (["explain has a plan, solve none"] if "plan" in ex else []), False
    best = solved.best
    if ex["plan"] != best.plan_dict() or abs(ex["cost"] - best.metrics["cost"]) > REL * best.metrics["cost"]:
        bad.append(f"explain {ex['plan']['cards']} cards {ex['cost']:.2f}, solve {best.plan.cards} cards "
                   f"{best.metrics['cost']:.2f}")
    if batch_choices(sc) != (sc.task.global_batch,) and sc.task.confidence is None:
        brute = brute_over_batches(sc)
        if brute is None or abs(brute - best.metrics["cost"]) > 1e-6 * brute:
            bad.append(f"over the batches: brute force {brute}, solve {best.metrics['cost']}")
    used, _ = Q.chosen(sc, "cpsat", req())  # what simulate runs
    if used.best is None or used.best.plan != best.plan:
        bad.append("simulate runs another plan")
    if sc.task.confidence is not None:  # replan at the start: the remainder is the whole request
        rp = Q.replan(sc, 0.0, 0.0, None, "cpsat", req())
        if rp["best"] is None or rp["best"]["plan"] != best.plan_dict():
            got = rp["best"] and {k: v for k, v in rp["best"]["plan"].items() if v != best.plan_dict()[k]}
            bad.append(f"replan at the start answers another plan ({rp['status']}, {got})")
    return bad, True


@settings(max_examples=24, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**31 - 1))
def test_explain_simulate_replan_answer_what_solve_answers(seed):
    sc, raw = drawn(seed)
    assert check(sc, raw)[0] == [], f"scenario {seed}"


# ---------------------------------------------------------------------------------------------
# the shipped examples, through the command line


@pytest.fixture
def run(capsys, monkeypatch):
    """``run(*args)`` -> (exit code, stdout + stderr) of ``tpopt args``."""
    def go(*args: str) -> tuple[int, str]:
        monkeypatch.setattr(sys, "argv", ["tpopt", *args])
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = int(exc.code or 0)
        out, err = capsys.readouterr()
        return code, out + err

    return go


def test_explain_on_the_batch_example_is_solves_answer(run):
    """design-case-batch at 30 d: solve's 32 cards at batch 192 (12,345 USD), not the first space's 48 at 384."""
    code, out = run("solve", "--scenario", BATCH, "--json")
    assert code == 0
    s = json.loads(out)
    code, out = run("explain", "--scenario", BATCH, "--json")
    assert code == 0
    e = json.loads(out)
    assert e["plan"] == s["plan"] and e["cost"] == s["metrics"]["cost"]
    assert e["plan"]["cards"] == 32 and e["batch"]["global_batch"] == 192 and round(e["cost"]) == 12345


def test_simulate_and_replan_on_batch_choices_run_solves_plan(run):
    code, out = run("solve", "--scenario", BATCH, "--confidence", "90%", "--json", "--no-analysis")
    assert code == 0
    s = json.loads(out)
    code, out = run("simulate", "--scenario", BATCH, "--confidence", "90%", "--json", "--runs", "500")
    assert code == 0, out
    assert json.loads(out)["plan"] == s["plan"]
    code, out = run("replan", "--scenario", BATCH, "--confidence", "90%", "--json", "--done", "0%",
                    "--elapsed", "0d")
    assert code == 0, out
    r = json.loads(out)
    assert r["best"]["plan"] == s["plan"] and r["status"] == "optimal" and r["time_limit_reached"] is False


def test_staged_simulate_and_replan_refuse_in_one_line(run):
    for cmd in (["simulate"], ["replan", "--done", "10%", "--elapsed", "1d"]):
        code, out = run(*cmd, "--scenario", LONG)
        assert code == 2 and "training stages" in out and "Traceback" not in out
        assert len(out.strip().splitlines()) == 1


def test_the_api_explains_a_staged_request_stage_by_stage():
    rng = random.Random(3)
    raw = small_raw(rng)
    del raw["task"]["tokens"]
    raw["task"]["stages"] = [{"name": "short", "tokens": "200B", "seq_len": 4096, "global_batch": 256},
                             {"name": "long", "tokens": "20B", "seq_len": 16384, "global_batch": 64}]
    raw["schedule"]["deadline"] = "20d"
    e = tpopt.explain(raw)
    s = tpopt.solve(raw, analysis=False)
    assert e.status == s.status.value == "optimal"
    assert [st["plan"] for st in e.report["stages"]] == [st["plan"] for st in s.report["stages"]]
    text = str(e)
    assert text.startswith("tpopt explain:") and "Stage 1 'short'" in text and "Stage 2 'long'" in text
