"""`tpopt rl`: text, JSON, plot, the sync/async flip through the command, bad input (exit 2, one line)."""

from __future__ import annotations

import inspect
import json
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from tpopt.cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = str(ROOT / "examples" / "rl-grpo-qwen3-8b.toml")


def _runner() -> CliRunner:
    if "mix_stderr" in inspect.signature(CliRunner.__init__).parameters:
        return CliRunner(mix_stderr=False)
    return CliRunner()


def run(*args):
    return _runner().invoke(cli, list(args))


@pytest.fixture(scope="module")
def text():
    r = run("rl", "--scenario", EXAMPLE)
    assert r.exit_code == 0, (r.stdout, r.stderr)
    return r.stdout


def test_text_names_split_bottleneck_and_finish(text):
    assert "Plan: h100-sxm x" in text and "separate: learner" in text
    assert "Bottleneck: " in text and "Cycle: " in text and "Finish: " in text
    assert "One-step async pays off" in text
    assert "Binding constraints" in text and "deadline.finish" in text
    flat = " ".join(text.split())  # the text is wrapped to the terminal's width (issue 25)
    assert "Assumptions:" in flat and "HBM bandwidth" in flat and "lognormal" in flat


def test_text_is_deterministic(text):
    again = run("rl", "--scenario", EXAMPLE)
    assert again.stdout == text


def test_json_and_the_flip_at_the_break_even():
    r = run("rl", "--scenario", EXAMPLE, "--json")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["status"] == "optimal" and out["plan"]["placement"] == "separate"
    assert out["stages"]["bottleneck"] in ("generation", "verification", "learning")
    be = out["cycle"]["break_even_kept"]
    kept = tomllib.loads(Path(EXAMPLE).read_text())["rl"]["kept"]
    assert 0 < be < kept and out["plan"]["staleness"] == 1
    below = json.loads(run("rl", "--scenario", EXAMPLE, "--json", "--no-analysis",
                           "--kept", f"{(be - 0.01) * 100:.3f}%").stdout)
    above = json.loads(run("rl", "--scenario", EXAMPLE, "--json", "--no-analysis",
                           "--kept", f"{min(1.0, be + 0.01) * 100:.3f}%").stdout)
    assert below["plan"]["staleness"] == 0 and above["plan"]["staleness"] == 1


def test_plot_svg_is_written_and_deterministic(tmp_path):
    a, b = tmp_path / "a.svg", tmp_path / "b.svg"
    for p in (a, b):
        r = run("rl", "--scenario", EXAMPLE, "--no-analysis", "--plot", str(p))
        assert r.exit_code == 0, r.stderr
    assert a.read_bytes() == b.read_bytes() and b"<svg" in a.read_bytes()


def test_infeasible_exit_3_with_conflict():
    r = run("rl", "--scenario", EXAMPLE, "--deadline", "1d")
    assert r.exit_code == 3
    assert "Conflict:" in r.stdout and "deadline.finish" in r.stdout and "deadline >= " in r.stdout
    j = run("rl", "--scenario", EXAMPLE, "--deadline", "1d", "--json")
    out = json.loads(j.stdout)
    assert j.exit_code == 3 and out["status"] == "infeasible" and "deadline.finish" in out["conflict"]


def _scenario(tmp_path, edit) -> str:
    raw = tomllib.loads(Path(EXAMPLE).read_text())
    edit(raw)
    lines = []
    for table, body in raw.items():
        lines.append(f"[{table}]")
        for k, v in body.items():
            lines.append(f"{k} = {json.dumps(v) if not isinstance(v, dict) else _inline(v)}")
    p = tmp_path / "bad.toml"
    p.write_text("\n".join(lines) + "\n")
    return str(p)


def _inline(d: dict) -> str:
    return "{ " + ", ".join(f"{json.dumps(k) if '.' in k else k} = {json.dumps(v)}" for k, v in d.items()) + " }"


BAD = {
    "unknown key": (lambda r: r["rl"].update(prompt_per_step=4), "unknown key"),
    "missing key": (lambda r: r["rl"].pop("samples_per_prompt"), "samples_per_prompt"),
    "kept above 100 %": (lambda r: r["rl"].update(kept="120%"), "rl.kept"),
    "tail below mean": (lambda r: r["rl"].update(response_length={"mean": 2048, "p99": 1000}), "below the mean"),
    "two tails": (lambda r: r["rl"].update(response_length={"mean": 2048, "p99": 8000, "p90": 4000}), "one tail"),
    "staleness 2": (lambda r: r["rl"].update(staleness=2), "staleness"),
    "samples and steps": (lambda r: r["rl"].update(samples="1M"), "exactly one of samples"),
    "verifier keys": (lambda r: r["rl"].update(verifier={"workers": 8}), "rl.verifier"),
    "unknown reward model": (lambda r: r["rl"].update(verifier={"reward_model": "no-such-model"}), "unknown model"),
    "input table": (lambda r: r.update(input={"workers": 4, "sequences_per_worker_s": 2}), "[input]"),
    "task tokens": (lambda r: r.update(task={"tokens": "1B"}), "derived from [rl]"),
    "rollout tp 0": (lambda r: r["rl"].update(rollout_tp=[0, 8]), "rl.rollout_tp"),
    "placement": (lambda r: r["rl"].update(placement=["colocated"]), "rl.placement"),
    "negative samples": (lambda r: (r["rl"].pop("steps"), r["rl"].update(samples="-5")), "rl.samples"),
    "kv pool unit": (lambda r: r["rl"].update(kv_pool="24"), "rl.kv_pool"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_rl_input_one_line_exit_2(tmp_path, name):
    edit, needle = BAD[name]
    r = run("rl", "--scenario", _scenario(tmp_path, edit))
    _one_line(r, needle)


@pytest.mark.parametrize("args,needle", [
    # --tokens, --seq-len, --global-batch, --critical-batch: not options of tpopt rl (issue 25: they are derived
    # from [rl]; tests/test_user_surface.py)
    (("--kept", "1.5"), "kept"),
    (("--plot", "cycle.txt"), ".pdf, .svg or .png"),
    (("--deadline", "30x"), "unknown unit"),
    (("--hw", "no-such-card"), "unknown accelerator"),
])
def test_bad_flags_one_line_exit_2(args, needle):
    _one_line(run("rl", "--scenario", EXAMPLE, *args), needle)


def test_pretraining_scenario_is_not_an_rl_scenario():
    _one_line(run("rl", "--scenario", str(ROOT / "examples" / "design-case.toml")), "no [rl] table")


def test_rl_scenario_is_not_a_pretraining_scenario():
    _one_line(run("solve", "--scenario", EXAMPLE), "plan it with tpopt rl")


def _one_line(r, needle):
    assert r.exit_code == 2, (r.exit_code, r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("tpopt: error:"), r.stderr
    assert needle in lines[0], lines[0]
    assert "Traceback" not in r.stderr
