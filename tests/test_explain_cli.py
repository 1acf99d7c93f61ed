"""CLI tests for the infeasibility report of ``tpopt solve`` and for ``tpopt explain``.

Figures: REFERENCE.md 10.6 (design case: 32 cards finish in 34.3 d, 48 cards in 24.6 d with 5.4 d to
spare; 32 cards would need ~47 % MFU) and the derivations in tests/test_explain.py.
"""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from tpopt.cli.main import cli

DESIGN = str(Path(__file__).resolve().parents[1] / "examples" / "design-case.toml")
INFEASIBLE = ("--scenario", DESIGN, "--max-cards", "32", "--deadline", "30d", "--hw", "rtx4090")
FAST = ("--workers", "1", "--seed", "0")


def _runner() -> CliRunner:
    if "mix_stderr" in inspect.signature(CliRunner.__init__).parameters:
        return CliRunner(mix_stderr=False)
    return CliRunner()


def run(*args):
    return _runner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def solve_json():
    return run("solve", *INFEASIBLE, *FAST, "--json")


# --- tpopt solve: no feasible plan -------------------------------------------------------------------


def test_solve_infeasible_text_exit_3():
    res = run("solve", *INFEASIBLE, *FAST)
    assert res.exit_code == 3
    out = res.stdout
    assert "no feasible plan (infeasible)" in out
    conflict = out.split("Conflict:")[1].split("Smallest single changes")[0]
    assert "deadline.finish" in conflict and "cards.max" in conflict
    assert "memory.per_card" not in conflict
    # REFERENCE 10.6: 32 cards finish in 34.3 d; 48 cards are the next valid count
    assert re.search(r"deadline\s+now 30\.00 d: >= 34\.3\d d", out)
    assert re.search(r"max_cards\s+now 32 cards: >= 48 cards", out)
    assert re.search(r"tokens\s+now 100B tokens: <= 85\.\d\d?B tokens", out)  # human numbers (issue 14)
    assert re.search(r"efficiency\s+now 40\.00%: >= 4[67]\.\d\d%", out)
    assert re.search(r"usable_memory\s+now 22\.00 GiB: cannot help", out)
    assert "--deadline 34.3" in out and "--max-cards 48" in out


def test_solve_infeasible_json_shape(solve_json):
    res = solve_json
    assert res.exit_code == 3
    d = json.loads(res.stdout)
    assert d["status"] == "infeasible"
    assert d["conflict"] == ["deadline.finish", "cards.max"]
    rels = {r["parameter"]: r for r in d["relaxations"]}
    assert {"deadline", "max_cards", "tokens", "efficiency", "usable_memory", "nic_bandwidth", "reserved",
            "accelerator"} <= set(rels)
    for r in d["relaxations"]:
        assert {"parameter", "current", "required", "unit", "helps"} <= set(r)
        if r["helps"]:
            assert r["required"] is not None and "plan" in r and "cost" in r
            assert r["plan"]["cards"] >= 1 and r["cost"] > 0
        else:
            assert r["required"] is None and "plan" not in r
    assert rels["deadline"]["required"] == pytest.approx(34.3, abs=0.05) and rels["deadline"]["unit"] == "d"
    assert rels["max_cards"]["required"] == 48
    assert rels["tokens"]["required"] == pytest.approx(85.2, abs=0.1)
    assert rels["efficiency"]["required"] == pytest.approx(47.0, abs=0.1)
    assert rels["usable_memory"]["helps"] is False


def test_explain_request_infeasible_matches_solve(solve_json):
    res = run("explain", *INFEASIBLE, *FAST, "--json")
    assert res.exit_code == 3
    d, s = json.loads(res.stdout), json.loads(solve_json.stdout)
    assert d["conflict"] == s["conflict"]
    strip = [{k: v for k, v in r.items() if k not in ("seconds",)} for r in d["relaxations"]]
    assert strip == [{k: v for k, v in r.items() if k not in ("seconds",)} for r in s["relaxations"]]
    text = run("explain", *INFEASIBLE, *FAST)
    assert text.exit_code == 3 and text.stdout.startswith("tpopt explain: design-case: no feasible plan")


# --- tpopt explain: a request that is feasible --------------------------------------------------------


def test_explain_request_feasible_exit_0():
    res = run("explain", "--scenario", DESIGN, "--hw", "rtx4090", *FAST, "--json")
    assert res.exit_code == 0
    d = json.loads(res.stdout)
    assert d["status"] == "optimal" and d["conflict"] == [] and d["relaxations"] == []
    assert d["plan"]["cards"] == 48  # REFERENCE 10.6: the 48-card plan meets 30 days
    assert [b["name"] for b in d["binding"]] == ["deadline.finish"]


def test_explain_request_with_sensitivity_text():
    res = run("explain", "--scenario", DESIGN, *FAST, "--solver", "enumerate", "--sensitivity")
    assert res.exit_code == 0
    out = res.stdout
    assert "Binding constraints" in out and "deadline.finish" in out
    assert "Sensitivities of the optimum" in out
    assert re.search(r"one host fewer\s+max 40 cards \(optimum uses 48\): infeasible", out)


# --- tpopt explain: a given plan ------------------------------------------------------------------------


def test_explain_plan_infeasible_exit_3():
    res = run("explain", "--scenario", DESIGN, "--cards", "32", *FAST, "--json")
    assert res.exit_code == 3
    d = json.loads(res.stdout)
    assert d["status"] == "infeasible"
    v = {x["name"]: x for x in d["violated"]}
    assert v["deadline.finish"]["value"] == pytest.approx(34.3, abs=0.05)
    assert v["deadline.finish"]["limit"] == 30.0
    assert d["optimum"]["plan"]["cards"] == 48
    text = run("explain", "--scenario", DESIGN, "--cards", "32", *FAST)
    assert text.exit_code == 3 and "Status: infeasible: violates 2 constraints" in text.stdout


def test_explain_plan_feasible_exit_0():
    res = run("explain", "--scenario", DESIGN, "--cards", "48", *FAST)
    assert res.exit_code == 0
    out = res.stdout
    assert "Status: feasible." in out
    # 5.4 days to spare (REFERENCE 10.6); one host fewer = 40 cards does not divide 384; 32 miss the deadline
    assert re.search(r"deadline\.finish\s+24\.6\d d of 30\.00 d, slack 5\.3\d d", out)
    assert "1 host fewer (40 cards) would violate" in out and "batch.divisibility" in out
    assert "2 hosts fewer (32 cards) would violate" in out
    assert "This plan is optimal" in out


def test_explain_plan_json_with_sensitivity():
    res = run("explain", "--scenario", DESIGN, "--cards", "48", "--zero", "3", *FAST, "--json", "--sensitivity")
    assert res.exit_code == 0
    d = json.loads(res.stdout)
    assert d["status"] == "feasible" and d["violated"] == []
    assert "deadline.finish" in d["binding"]
    assert {r["change"] for r in d["sensitivities"]} == {"deadline +1 d", "deadline -1 d", "one host fewer",
                                                         "usable memory +1 GiB"}


# --- bad input: one stderr line, exit 2 --------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("explain", "--scenario", "no/such/file.toml"),
        ("explain", "--scenario", DESIGN, "--hw", "no-such-card"),
        ("explain", "--scenario", DESIGN, "--deadline", "30"),
        ("explain", "--scenario", DESIGN, "--zero", "3"),  # plan flags without --cards
        ("explain", "--scenario", DESIGN, "--cards", "30", "--tp", "4"),  # 30 is no multiple of tp x pp
        ("explain", "--scenario", DESIGN, "--time-limit", "0"),
        ("solve", "--scenario", DESIGN, "--max-cards", "lots"),
    ],
)
def test_bad_input_exits_2_with_one_line(args):
    res = _runner().invoke(cli, list(args))
    assert res.exit_code == 2, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)
    err = res.stderr
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tpopt: error: ")
    assert res.stdout == ""
