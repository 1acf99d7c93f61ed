"""`tpopt sweep --loss-front` (issue 41): the loss fronts of `tpopt inverse --front` inside the sweep command.

The fronts themselves are checked point by point against a brute force in tests/test_inverse.py; here the sweep
must give the same points as `tpopt inverse --front` on the same question, draw them, and refuse the options it
does not use in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_inverse import GRID, SCENARIO, SIZES

TOKENS = ",".join(f"{t:.0f}" for t in GRID)


def tpopt(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tpopt", *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def scenario_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("loss-front") / "scenario.toml"
    p.write_text(SCENARIO)
    return p


def test_sweep_loss_front_is_inverse_front(scenario_file: Path, tmp_path: Path) -> None:
    inv = tpopt("inverse", "--scenario", str(scenario_file), "--models", ",".join(SIZES), "--tokens", TOKENS,
                "--max-cost", "6000", "--front", "--json")
    assert inv.returncode == 0, inv.stderr
    plot = tmp_path / "front.svg"
    sw = tpopt("sweep", "--scenario", str(scenario_file), "--loss-front", ",".join(SIZES), "--loss-tokens", TOKENS,
               "--max-cost", "6000", "--json", "--plot", str(plot))
    assert sw.returncode == 0, sw.stderr
    front, out = json.loads(inv.stdout)["front"], json.loads(sw.stdout)
    assert out["cost"] == front["cost"] and out["date"] == front["date"]
    assert len(out["cost"]) == 8 and [p["at"] for p in out["date"]] == [7.5, 15.0, 30.0, 60.0, 120.0]
    losses = [p["loss"] for p in out["cost"] if p["loss"] is not None]
    assert losses == sorted(losses, reverse=True)  # more budget never predicts a worse loss
    assert plot.read_text().lstrip().startswith("<?xml") and "deadline (days)" in plot.read_text()
    text = tpopt("sweep", "--scenario", str(scenario_file), "--loss-front", ",".join(SIZES), "--loss-tokens", TOKENS,
                 "--max-cost", "6000")
    assert "Front: least predicted loss against the budget" in text.stdout
    assert "Front: least predicted loss against the deadline, within the budget" in text.stdout


@pytest.mark.parametrize(("args", "words"), [
    (("--tokens", "10B"), "--loss-tokens"),
    (("--deadline", "10d:20d:5d"), "takes one value"),
    (("--pareto", "energy"), "--pareto is not used by sweep --loss-front"),
])
def test_sweep_loss_front_bad_input_is_one_line(args: tuple[str, ...], words: str) -> None:
    p = tpopt("sweep", "--loss-front", "qwen3", "--hw", "h100-sxm", *args)
    assert p.returncode != 0 and words in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
