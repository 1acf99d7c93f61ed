"""Every command has a Python API function returning the same figures as its ``--json`` (issue 37 item 8): estimate,
export, calibrate, simulate, replan, rl, inverse, sites and solve on a ``[[hardware.pools]]`` scenario
(``tpopt.pools``), each compared with the command on a shipped example."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import tpopt
from tpopt.cli.common import dump_json
from tpopt.cli.main import cli
from tpopt.errors import InputError
from tpopt.models.arch import param_count

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "examples" / "design-case.toml"
RL = ROOT / "examples" / "rl-grpo-qwen3-8b.toml"
SITES = ROOT / "examples" / "sites-llama3-405b.toml"
POOLS = ROOT / "examples" / "pools-h100-a100.toml"


def command(*args: str) -> str:
    """The command's stdout (stderr apart: notes there never reach the JSON)."""
    runner = CliRunner(mix_stderr=False) if "mix_stderr" in inspect.signature(CliRunner.__init__).parameters \
        else CliRunner()
    r = runner.invoke(cli, [str(a) for a in args])
    assert r.exit_code in (0, 3), (args, r.output)
    return r.stdout


def as_json(d: Any) -> Any:
    """What the command would print for ``d`` (non-finite floats as null, as --json writes them)."""
    return json.loads(dump_json(d))


def without_clock(d: Any) -> Any:
    """``d`` without wall-clock entries (the only non-deterministic figures: ``wall_s``, ``*_wall_s``)."""
    if isinstance(d, dict):
        return {k: without_clock(v) for k, v in d.items() if "wall" not in k}
    if isinstance(d, list):
        return [without_clock(v) for v in d]
    return d


def test_every_command_has_an_api_function():
    for name in ("scenario", "solve", "evaluate", "explain", "sweep", "estimate", "export", "calibrate", "simulate",
                 "replan", "rl", "inverse", "sites", "pools"):
        assert callable(getattr(tpopt, name)), name
        assert name in tpopt.__all__


def test_estimate():
    cli_d = json.loads(command("estimate", "qwen3-8b", "--hw", "h100-sxm", "--cards", "8", "--json"))
    assert as_json(tpopt.estimate("qwen3-8b", hw="h100-sxm", cards=8)) == cli_d
    with pytest.raises(InputError, match="one accelerator"):
        tpopt.estimate("qwen3-8b", hw="h100-sxm,b200")


def test_export_is_the_text_the_command_prints():
    text = command("export", "--scenario", DESIGN, "--format", "megatron", "--cards", "48")
    assert tpopt.export(DESIGN, format="megatron", cards=48) == text
    assert "--tensor-model-parallel-size" in text and "--global-batch-size 384" in text


def test_calibrate(tmp_path):
    scenario = tmp_path / "s.toml"  # tpopt init's file: the per-operation model, which calibration fits
    command("init", scenario, "--model", "qwen3-8b", "--hw", "h100-sxm")
    cli_d = json.loads(command("calibrate", "--scenario", scenario, "--cards", "8", "--measured-step", "60s",
                               "--out", tmp_path / "a", "--json"))
    api_d = as_json(tpopt.calibrate(scenario, out=tmp_path / "b", measured_step="60s", cards=8))
    assert cli_d.pop("written").endswith("performance.toml") and api_d.pop("written").endswith("performance.toml")
    assert api_d == cli_d
    assert (tmp_path / "a" / "performance.toml").read_text() == (tmp_path / "b" / "performance.toml").read_text()
    with pytest.raises(InputError, match="one of measured_step"):
        tpopt.calibrate(scenario, out=tmp_path / "c")


def test_simulate():
    cli_d = json.loads(command("simulate", "--scenario", DESIGN, "--runs", "300", "--seed", "3", "--json"))
    assert as_json(tpopt.simulate(DESIGN, runs=300, seed=3)) == cli_d
    assert cli_d["runs"] == 300 and cli_d["plan"]["cards"] == 48
    with pytest.raises(InputError, match="runs must lie"):
        tpopt.simulate(DESIGN, runs=0)


def test_replan():
    cli_d = json.loads(command("replan", "--scenario", DESIGN, "--confidence", "95%", "--done", "41%",
                               "--elapsed", "12d", "--cards-held", "48", "--json"))
    api_d = tpopt.replan(DESIGN, confidence="95%", done="41%", elapsed="12d", cards_held=48)
    assert without_clock(as_json(api_d)) == without_clock(cli_d)
    # 59 % of the 100B tokens are left: 59B
    assert cli_d["tokens_left"] == pytest.approx(59e9)


def test_rl():
    cli_d = json.loads(command("rl", "--scenario", RL, "--no-analysis", "--json"))
    api_d = tpopt.rl(RL, analysis=False)
    assert without_clock(as_json(api_d)) == without_clock(cli_d)
    assert api_d["status"] == "optimal"


def test_scenario_takes_a_model_name_or_config_path_as_the_command_line_does(tmp_path):
    cfg = tmp_path / "tiny" / "config.json"
    cfg.parent.mkdir()
    cfg.write_text(json.dumps({"model_type": "llama", "hidden_act": "silu", "hidden_size": 256,
                               "intermediate_size": 512, "num_attention_heads": 4, "num_hidden_layers": 2,
                               "num_key_value_heads": 2, "vocab_size": 1000, "tie_word_embeddings": False,
                               "rms_norm_eps": 1e-5}))
    assert tpopt.scenario(DESIGN, model="llama3-8b").model.name == "llama3-8b"
    tiny = tpopt.scenario(DESIGN, model=str(cfg)).model
    # 2 layers x (q, o: 256 x 256; k, v: 256 x 128; gate, up, down: 256 x 512; 2 norms) + embeddings, head, norm
    assert tiny.name == "tiny"
    assert param_count(tiny) == 2 * (2 * 256 * 256 + 2 * 256 * 128 + 3 * 256 * 512 + 2 * 256) + 2 * 1000 * 256 + 256


def same_as_command(api_d: dict[str, Any], *args: str) -> dict[str, Any]:
    """The command's ``--json`` for ``args``, asserted equal to ``api_d`` (wall-clock entries apart)."""
    cli_d = json.loads(command(*args, "--json"))
    assert without_clock(as_json(api_d)) == without_clock(cli_d)
    return cli_d


def test_inverse():
    """A small inverse question on the design case: two sizes, three token counts, a 20,000 USD budget."""
    api_d = tpopt.inverse(DESIGN, models=["qwen3-0.6b", "qwen3-1.7b"], tokens=[10e9, 40e9, 160e9], max_cost=20000)
    cli_d = same_as_command(api_d, "inverse", "--scenario", DESIGN, "--models", "qwen3-0.6b,qwen3-1.7b",
                            "--tokens", "10B,40B,160B", "--max-cost", "20000")
    assert cli_d["budget"] == 20000 and cli_d["tokens_grid"] == [10e9, 40e9, 160e9]
    assert cli_d["chosen"] is not None and cli_d["chosen"]["cost"] <= 20000
    with pytest.raises(InputError, match="--tokens"):
        tpopt.inverse(DESIGN, tokens="40B:10B:3")


def test_sites():
    assert same_as_command(tpopt.sites(SITES), "sites", "--scenario", SITES)["status"] == "optimal"
    with pytest.raises(InputError, match="no \\[\\[sites\\]\\]"):
        tpopt.sites(DESIGN)


def test_pools_is_what_solve_prints_on_a_pools_scenario():
    assert same_as_command(tpopt.pools(POOLS), "solve", "--scenario", POOLS)["status"] == "optimal"
    with pytest.raises(InputError, match="tpopt.pools"):
        tpopt.solve(POOLS)
    with pytest.raises(InputError, match="no \\[\\[hardware.pools\\]\\]"):
        tpopt.pools(DESIGN)
