"""CLI tests for ``tpopt checkpoint`` and ``tpopt stragglers`` (REFERENCE.md 10.4 figures)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tpopt.cli.main import cli
from tpopt.cli.reliability import checkpoint_report, stragglers_report


def run(*args):
    runner = CliRunner()
    return runner.invoke(cli, list(args), catch_exceptions=False)


def printed(x, value, decimals):
    return abs(float(x) - value) <= 0.5 * 10.0**-decimals * (1 + 1e-9)


# --- checkpoint -------------------------------------------------------------------------------


def test_checkpoint_text_default_is_chapter_case():
    # REFERENCE.md 10.4: 1024 cards, Qwen3-8B, 7 GB/s, r = 120 s: tau* 965.29 s, Poisson 954.40 s
    res = run("checkpoint", "--cards", "1024")
    assert res.exit_code == 0, res.output
    out = res.output
    assert "114,670,295,040 bytes" in out
    assert "16.381 s" in out
    assert "965.29 s" in out
    assert "954.40 s" in out
    for line in ("300 s    5.46 %    0.53 %    0.42 %    6.41 %",
                 "900 s    1.82 %    1.58 %    0.42 %    3.82 %",
                 "1800 s    0.91 %    3.16 %    0.42 %    4.50 %"):
        assert line in out


def test_checkpoint_json_shape_and_values():
    res = run("checkpoint", "--cards", "1024", "--model", "qwen3-8b", "--card-mtbf", "8089.6h", "--json")
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["mode"] == "sync"
    assert d["checkpoint_bytes"] == 114_670_295_040
    assert set(d["rates"]) == {"hardware", "spike", "planned", "total"}
    assert [r["interval"] for r in d["intervals"]] == [300.0, 900.0, 1800.0]
    assert set(d["intervals"][0]) == {"interval", "save", "redo", "restart", "total", "poisson_total",
                                      "demanded_write_rate", "backlog_ok"}
    assert [printed(r["total"] * 100, t, 1)
            for r, t in zip(d["intervals"], (6.4, 3.8, 4.5), strict=False)] == [True] * 3
    assert printed(d["optimum"]["first_order"]["interval"], 965.29, 2)
    assert printed(d["optimum"]["poisson"]["interval"], 954.40, 2)


def test_checkpoint_params_equals_model():
    a = json.loads(run("checkpoint", "--cards", "48", "--params", "8190735360", "--json").output)
    b = json.loads(run("checkpoint", "--cards", "48", "--model", "qwen3-8b", "--json").output)
    assert a["checkpoint_bytes"] == b["checkpoint_bytes"] == 114_670_295_040


def test_checkpoint_loss_spikes_48_cards():
    # REFERENCE.md 10.4: 48 cards + a rollback per 7 days: 600 s 2.87 %, 1800 s 1.25 %, tau* 3,150 s
    res = run("checkpoint", "--cards", "48", "--spike-interval", "7d", "--intervals", "600s,1800s", "--json")
    d = json.loads(res.output)
    assert printed(d["intervals"][0]["total"] * 100, 2.87, 2)
    assert printed(d["intervals"][1]["total"] * 100, 1.25, 2)
    assert printed(d["optimum"]["first_order"]["interval"], 3150, 0)


def test_checkpoint_async_backlog_flag():
    # 112 GB at 7 GB/s: a snapshot every 10 s demands 11.2 GB/s (backlog grows), every 20 s 5.6 GB/s
    res = run("checkpoint", "--cards", "1024", "--params", "8e9", "--mode", "async", "--intervals", "10s,20s",
              "--json")
    d = json.loads(res.output)
    assert d["checkpoint_bytes"] == 112e9
    assert d["pause"] == 0.5 and d["commit_lag"] == pytest.approx(16.5)
    assert [r["backlog_ok"] for r in d["intervals"]] == [False, True]
    assert [round(r["demanded_write_rate"] / 1e9, 1) for r in d["intervals"]] == [11.2, 5.6]
    assert d["optimum"]["poisson"] is None
    text = run("checkpoint", "--cards", "1024", "--params", "8e9", "--mode", "async", "--intervals", "10s,20s")
    assert "backlog grows" in text.output


@pytest.mark.parametrize("ext, magic", [("svg", b"<svg"), ("png", b"\x89PNG\r\n\x1a\n"), ("pdf", b"%PDF-")])
def test_checkpoint_plot(tmp_path, ext, magic):
    path = tmp_path / f"curves.{ext}"
    res = run("checkpoint", "--cards", "1024", "--plot", str(path))
    assert res.exit_code == 0, res.output
    data = path.read_bytes()
    if ext == "svg":
        assert b"<?xml" in data[:100] and magic in data and data.rstrip().endswith(b"</svg>")
    else:
        assert data.startswith(magic)


def test_numeric_core_takes_plain_numbers():
    d = checkpoint_report(cards=32, n_params=8_190_735_360, intervals=[1800.0])
    assert printed(d["intervals"][0]["total"] * 100, 1.02, 2)  # REFERENCE.md 10.6 design case
    s = stragglers_report(cards=48, sigma=0.05 * 52.2)
    assert printed(s["step"]["expected"], 58.6, 1)  # REFERENCE.md 10.4


# --- stragglers -------------------------------------------------------------------------------


def test_stragglers_text():
    # REFERENCE.md 10.4: 48 cards, sigma 5 % -> 58.6 s, from the design case's plan on 48 cards (compute
    # 52.2 s, fixed waits 0.58 s: REFERENCE 10.6); evicting at tau = 600 s costs tau/2 + r = 420 s
    res = run("stragglers", "--cards", "48", "--sigma", "5%", "--interval", "600s")
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[0].startswith("Scenario: built-in design case")
    line = next(ln for ln in res.output.splitlines() if ln.startswith("expected step"))
    assert printed(line.split()[2], 58.6, 1)
    for word in ("wait", "redistribute", "evict", "420.0 s"):
        assert word in res.output


def test_stragglers_json_shape_and_values():
    # REFERENCE.md 10.4: 8 cards, sigma 2 %: step 54.3 s, extra wait 1.72 s, redistribute 61.6 s, evict 420 s
    res = run("stragglers", "--cards", "8", "--sigma", "2%", "--mu", "52.2s", "--fixed", "0.58s", "--slow-k", "3",
              "--interval", "600s", "--restore", "120s", "--json")
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert set(d) == {"inputs", "expected_max_factor", "step", "slow_card"}
    assert printed(d["expected_max_factor"], 1.42, 2)
    assert printed(d["step"]["expected"], 54.3, 1)
    wait, redis, evict = d["slow_card"]["responses"]
    assert [wait["response"], redis["response"], evict["response"]] == ["wait", "redistribute", "evict"]
    assert printed(wait["extra_wait"], 1.72, 2)
    assert printed(redis["step"], 61.6, 1)
    assert evict["one_off_cost"] == 420.0


def test_stragglers_absolute_sigma_and_one_card():
    a = json.loads(run("stragglers", "--cards", "48", "--sigma", "1.044s", "--mu", "52.2s", "--json").output)
    b = json.loads(run("stragglers", "--cards", "48", "--sigma", "0.02", "--mu", "52.2s", "--json").output)
    assert a["step"]["expected"] == pytest.approx(b["step"]["expected"])
    one = json.loads(run("stragglers", "--cards", "1", "--sigma", "5%", "--json").output)
    assert one["slow_card"] is None and one["step"]["jitter_cost"] == 0.0
    res = run("stragglers", "--cards", "1024", "--sigma", "2%", "--json")
    d = json.loads(res.output)
    assert d["slow_card"]["responses"][0]["extra_wait"] == 0.0
    assert d["slow_card"]["responses"][2]["break_even_steps"] is None


# --- bad input: one stderr line, exit 2, no traceback ------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("stragglers", "--cards", "48", "--sigma", "5x"),
        ("stragglers", "--cards", "-3", "--sigma", "5%"),
        ("checkpoint", "--cards", "-3"),
        ("checkpoint", "--cards", "1024", "--write-bandwidth", "7GB"),
        ("checkpoint", "--cards", "1024", "--intervals", "300,900"),
        ("checkpoint", "--cards", "1024", "--model", "no-such-model"),
        ("checkpoint", "--cards", "1024", "--model", "qwen3-8b", "--params", "8e9"),
        ("checkpoint", "--cards", "1024", "--plot", "curves.eps"),
        ("checkpoint", "--cards", "1024", "--card-mtbf", "0d"),
    ],
)
def test_bad_input_exits_2_with_one_line(args):
    runner = CliRunner(mix_stderr=False) if _has_mix_stderr() else CliRunner()
    res = runner.invoke(cli, list(args))
    assert res.exit_code == 2
    assert res.exception is None or isinstance(res.exception, SystemExit)
    err = res.stderr
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tpopt: error: ")
    assert res.stdout == ""


def _has_mix_stderr() -> bool:
    import inspect

    return "mix_stderr" in inspect.signature(CliRunner.__init__).parameters

