"""The RL report's footing describes the learner's plan, but an RL job fails, saves and is billed on all its
cards: its reserved time is billed at the job's cards and its failure and save shares are the job's overhead
(the learner alone, 8 of the example's 24 cards, said "reserved time 0.25 d billed at 8 cards")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tpopt.cli.main import cli

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "rl-grpo-qwen3-8b.toml"


@pytest.fixture(scope="module")
def report() -> dict:
    out = CliRunner().invoke(cli, ["rl", "--scenario", str(EXAMPLE), "--json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)


def stated(report: dict, name: str) -> dict:
    return next(s for s in report["footing"]["stated"] if s["input"] == name)


def test_reserved_time_is_billed_at_the_jobs_cards(report):
    job, learner = report["plan"]["cards"], report["plan"]["learner"]["cards"]
    assert learner < job  # separate learner and rollout cards: the case where the two differ
    reserved = stated(report, "reserved time")
    assert f"billed at {job:,} cards" in reserved["stated"]
    fin = report["finish"]  # cost = rate x finish with the reserved days inside the finish: share = R / T
    assert reserved["reserved_share"] == pytest.approx(fin["reserved_days"] / fin["finish_days"], rel=1e-9)


def test_failure_and_save_shares_are_the_jobs_overhead(report):
    """L = save + redo + restart (first order) for the job's cards and save interval: the two stated shares add
    up to the overhead the finish line uses."""
    mtbf, storage = stated(report, "card MTBF"), stated(report, "storage bandwidth")
    assert f"on {report['plan']['cards']:,} cards" in mtbf["stated"]
    total = mtbf["failure_overhead"] + storage["save_overhead"]
    assert total == pytest.approx(report["finish"]["overhead"], rel=1e-3)
