"""The question on the command line (issue 37 items 1, 3 and 8): ``--model`` wherever ``--scenario`` is, the
starting scenario of ``tpopt init`` (per-operation model) with every default it takes stated, and the frictions
(``--hw ""``, ``estimate --cards 7``, ``calibrate --cards`` help, ``init --hw all``)."""

from __future__ import annotations

import inspect
import json
import tomllib
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_catalog_inputs import hf_cache  # noqa: F401  (the fixture: acme/tiny-llama in a local hub cache)

from tpopt.cli.main import cli

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "examples" / "design-case.toml"
QUESTION = ["--model", "llama3-70b", "--tokens", "2T", "--seq-len", "8192", "--global-batch", "1024",
            "--deadline", "45d", "--hw", "h100-sxm"]
# a two-layer Llama (the shape of tests/test_user_surface.py's LLAMA_TINY)
LLAMA_TINY = {"model_type": "llama", "hidden_act": "silu", "hidden_size": 256, "intermediate_size": 512,
              "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2, "vocab_size": 1000,
              "tie_word_embeddings": False, "rms_norm_eps": 1e-5}


def runner() -> CliRunner:
    return CliRunner(mix_stderr=False) if "mix_stderr" in inspect.signature(CliRunner.__init__).parameters \
        else CliRunner()


def run(*args: str):
    return runner().invoke(cli, [str(a) for a in args])


def one_line_error(r, *words: str) -> None:
    assert r.exit_code == 2, r.output
    err = r.stderr.strip()
    assert err.startswith("tpopt: error: ") and len(err.splitlines()) == 1, err
    assert "Traceback" not in r.output
    for w in words:
        assert w in err, err


# --- the one-line question ---------------------------------------------------------------------------------


def test_the_question_on_the_command_line_equals_init_then_solve(tmp_path):
    """No scenario file: the answer is the one tpopt init's file for that model gives with the same flags
    (one code path), on the per-operation model, with the defaults it took listed."""
    r = run("solve", *QUESTION, "--no-analysis", "--json")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["status"] == "optimal" and d["scenario_source"] == "command line"
    assert d["footing"]["step_time_model"] == "per-operation" and d["footing"]["efficiency"] is None
    # the defaults taken are the starting scenario's values the command line left alone
    defaults = d["stated_defaults"]
    assert defaults["task.precision"] == "bf16-mixed" and defaults["schedule.reserved"] == "5d"
    assert defaults["checkpoint.write_bandwidth"] == "7GB/s" and defaults["search.max_cards"] == 1024
    for given in ("task.tokens", "task.seq_len", "task.global_batch", "schedule.deadline", "hardware.accelerator"):
        assert given not in defaults
    # 2T tokens at 1,024 sequences of 8,192 tokens: ceil(2e12 / 8,388,608) = 238,419 steps (the flags, not 384)
    assert d["metrics"]["iterations"] == pytest.approx(2e12 / (1024 * 8192), abs=1)
    path = tmp_path / "llama.toml"
    assert run("init", path, "--model", "llama3-70b", "--hw", "h100-sxm").exit_code == 0
    flags = [a for a in QUESTION if a not in ("--model", "llama3-70b")]
    f = json.loads(run("solve", "--scenario", path, *flags, "--no-analysis", "--json").stdout)
    assert f["plan"] == d["plan"] and f["metrics"]["cost"] == d["metrics"]["cost"]


def test_the_question_states_its_defaults_in_the_text():
    r = run("evaluate", "--model", "llama3-8b", "--hw", "h100-sxm", "--cards", "16", "--tokens", "1.5T")
    assert r.exit_code in (0, 3), r.stderr
    head = " ".join(r.stdout.split("Model:")[0].split())
    assert head.startswith("Scenario: llama3-8b from the command line") and "per-operation" in head
    assert "defaults taken:" in head and "seq_len 8192" in head and "deadline 30d" in head
    assert "tokens 100B" not in head  # given on the command line, so no default
    assert "Model: llama3-8b" in r.stdout and "Footing: per-operation step time" in r.stdout


def test_model_overrides_the_scenarios_model_and_takes_a_config_path(tmp_path):
    d = json.loads(run("evaluate", "--scenario", DESIGN, "--cards", "48", "--json").stdout)
    m = run("evaluate", "--scenario", DESIGN, "--model", "llama3-8b", "--cards", "48")
    assert "Model: llama3-8b" in m.stdout and "Scenario:" not in m.stdout.splitlines()[0]
    # the design case states a flat efficiency: --model keeps the rest of the file
    assert "Footing: flat step time" in m.stdout and "footing" in d
    cfg = tmp_path / "tiny" / "config.json"
    cfg.parent.mkdir()
    cfg.write_text(json.dumps(LLAMA_TINY))
    r = run("evaluate", "--scenario", DESIGN, "--model", cfg, "--cards", "8", "--json")
    assert r.exit_code in (0, 3), r.stderr
    # 2 layers x (q, o: 256 x 256; k, v: 256 x 128; gate, up, down: 256 x 512; 2 norms) + embeddings and head
    # (2 x 1000 x 256) + final norm: fewer bytes of state than Qwen3-8B by four orders of magnitude
    n_tiny = 2 * (2 * 256 * 256 + 2 * 256 * 128 + 3 * 256 * 512 + 2 * 256) + 2 * 1000 * 256 + 256
    t = run("evaluate", "--model", cfg, "--cards", "8", "--hw", "h100-sxm")
    assert t.exit_code in (0, 3), t.stderr
    assert f"Model: tiny, N {n_tiny / 1e6:.2f}M parameters" in t.stdout  # the folder names the model


@pytest.mark.usefixtures("hf_cache")
def test_hf_id_from_the_local_cache():
    r = run("evaluate", "--model", "acme/tiny-llama", "--hw", "h100-sxm", "--cards", "8")
    assert r.exit_code in (0, 3), r.stderr
    assert "Model: acme/tiny-llama" in r.stdout
    one_line_error(run("evaluate", "--model", "acme/not-cached", "--cards", "8"), "never downloads")


@pytest.mark.parametrize("args, words", [
    (["--model", "no-such-model"], ("unknown model", "no-such-model")),
    (["--model", "missing/config.json"], ("--model", "not found")),
    (["--model", "llama3-8b", "--tokens", "-2T"], ("tokens", "negative")),
    (["--model", "llama3-8b", "--tokens", "lots"], ("tokens", "lots")),
    (["--model", "llama3-8b", "--hw", ""], ("--hw", "names no accelerator")),
    (["--hw", " , "], ("--hw", "names no accelerator")),
])
def test_bad_question_inputs_are_one_line(args, words):
    one_line_error(run("evaluate", *args, "--cards", "8"), *words)


def test_every_scenario_command_takes_model_and_the_help_states_token_suffixes():
    for command in ("solve", "evaluate", "explain", "export", "simulate", "calibrate", "sweep", "rl"):
        text = run(command, "--help").stdout
        assert "--model" in text, command
    tokens = " ".join(run("solve", "--help").stdout.split())
    for suffix in ("k (1e3)", "M (1e6)", "B (1e9)", "T (1e12)", "decimals"):
        assert suffix in tokens


def test_token_suffixes_read_as_stated():
    """1.5T = 1.5e12 tokens, 250B = 2.5e11 (the help's suffixes); read back from the stated defaults' absence
    and the evaluation's iterations: iterations = tokens / (global batch x seq_len)."""
    for text, tokens in (("1.5T", 1.5e12), ("250B", 2.5e11), ("800M", 8e8)):
        d = json.loads(run("evaluate", "--model", "llama3-8b", "--hw", "h100-sxm", "--cards", "16",
                           "--tokens", text, "--json").stdout)
        assert d["metrics"]["iterations"] == pytest.approx(tokens / (384 * 8192), rel=1e-9, abs=1)


# --- tpopt init ----------------------------------------------------------------------------------------------


def test_init_writes_the_per_operation_model_and_says_so(tmp_path):
    path = tmp_path / "s.toml"
    r = run("init", path, "--model", "llama3-70b", "--hw", "h100-sxm")
    assert r.exit_code == 0, r.stderr
    assert "per-operation step-time model" in r.stdout and "--flat" in r.stdout
    raw = tomllib.loads(path.read_text())
    assert "efficiency" not in raw["hardware"]
    assert any(ln.lstrip().startswith("# efficiency") for ln in path.read_text().splitlines())
    flat = tmp_path / "flat.toml"
    r = run("init", flat, "--flat")
    assert r.exit_code == 0 and "flat step-time model" in r.stdout
    assert tomllib.loads(flat.read_text())["hardware"]["efficiency"] == 0.40


def test_init_takes_hw_all_as_solve_does(tmp_path):
    path = tmp_path / "all.toml"
    r = run("init", path, "--model", "llama3-70b", "--hw", "all")
    assert r.exit_code == 0, r.stderr
    assert tomllib.loads(path.read_text())["hardware"]["accelerator"] == "all"
    one_line_error(run("init", tmp_path / "x.toml", "--hw", ""), "--hw", "names no accelerator")
    one_line_error(run("init", tmp_path / "y.toml", "--hw", "all,h100-sxm"), "stands alone")
    assert not (tmp_path / "x.toml").exists()


# --- frictions -----------------------------------------------------------------------------------------------


def test_estimate_cards_not_whole_hosts_is_one_line_naming_the_host():
    one_line_error(run("estimate", "qwen3-8b", "--hw", "rtx4090", "--cards", "7"),
                   "--cards 7", "rtx4090", "8 cards", "multiple of 8")
    # 24 cards: whole hosts, but no DP size (24, 12, 6, 3) divides the 1,024-sequence batch (4M tokens / 4,096)
    one_line_error(run("estimate", "qwen3-8b", "--hw", "rtx4090", "--cards", "24"),
                   "--cards 24", "1,024 sequences", "24, 12, 6, 3")


def test_calibrate_cards_help_is_its_own():
    def cards_help(command: str) -> str:
        text = " ".join(run(command, "--help").stdout.split())
        return text.split("--cards INTEGER", 1)[1].split(" --tp", 1)[0]

    mine, explain = cards_help("calibrate"), cards_help("explain")
    assert mine != explain and "to explain" not in mine and "--measured-step" in mine


def test_plot_breakdown_raises_no_warning(tmp_path):
    """The plot's own code emits no Python warning (numpy or matplotlib), checked with warnings as errors."""
    pytest.importorskip("matplotlib")
    out = tmp_path / "b.png"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = run("sweep", "--deadline", "20d:30d:10d", "--plot-breakdown", out, "--breakdown-cards", "32,48", "-q")
    assert r.exit_code == 0, r.stderr
    assert out.read_bytes().startswith(b"\x89PNG") and r.stderr == ""
