"""CLI tests for ``tpopt pipeline`` (REFERENCE.md 10.3 worked example: p = 4, m = 8, F 10 ms,
B 20 ms, transfer 1 ms, update 1 ms)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tpopt.cli.main import cli

EXAMPLE = ["-p", "4", "-m", "8", "--forward", "10ms", "--backward", "20ms", "--transfer", "1ms",
           "--update", "1ms"]


def run(*args):
    return CliRunner().invoke(cli, ["pipeline", *args], catch_exceptions=False)


def test_help_lists_schedules():
    res = run("--help")
    assert res.exit_code == 0
    assert "dualpipe-deepseek" in res.output and "--split-backward" in res.output


def test_summary_1f1b():
    # REFERENCE.md 10.3: 1F1B 347 ms, 106 ms idle per card, 24 forward messages
    res = run("--schedule", "1f1b", *EXAMPLE)
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "schedule 1f1b: p = 4 stages, m = 8 micro-batches" in out
    assert "completion      347.0 ms" in out
    assert "24 forward, 48 in total" in out
    assert "    0     241.0 ms     106.0 ms          4" in out
    assert "    3     241.0 ms     106.0 ms          1" in out
    assert res.stderr == ""


@pytest.mark.parametrize("args, ms", [
    (["--schedule", "fill-drain"], "337.0 ms"),
    (["--schedule", "interleaved", "--layers", "36"], "297.7 ms"),  # printed 298 ms
    (["--schedule", "interleaved", "--chunk-layers", "5,5,5,5,4,4,4,4"], "297.7 ms"),
    (["--schedule", "zb-h1", "--split-backward"], "283.0 ms"),
    (["--schedule", "zb-h1", "--backward-weight", "10ms"], "283.0 ms"),
    (["--schedule", "dualpipe", "--split-backward"], "306.0 ms"),
    (["--schedule", "dualpipe-deepseek", "--split-backward"], "258.0 ms"),
])
def test_summary_schedules(args, ms):
    # REFERENCE.md 10.3: 337 / 298 / 283 / 306 ms; DeepSeek's ordering 258 ms
    res = run(*args, *EXAMPLE)
    assert res.exit_code == 0, res.output
    assert f"completion      {ms}" in res.stdout


def test_unsplit_backward_note():
    res = run("--schedule", "zb-h1", *EXAMPLE)
    assert res.exit_code == 0
    assert "dW = 0" in res.stdout and "347.0 ms" in res.stdout  # empty dW slots: times like 1F1B


def test_memory_column():
    # 1F1B stage 0 keeps 4 sets: 4 x 230 MiB + 2 x 1 MiB buffers = 922 MiB
    res = run("--schedule", "1f1b", *EXAMPLE, "--activation", "230MiB", "--buffer", "1MiB")
    assert res.exit_code == 0, res.output
    assert "peak memory" in res.stdout and "922 MiB" in res.stdout


def test_json_shape_and_determinism():
    args = ("--schedule", "zb-h1", "--split-backward", *EXAMPLE, "--json")
    res = run(*args)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert list(doc)[:2] == ["inputs", "schedule"]
    assert doc["schedule"] == "zb-h1" and doc["stages"] == 4 and doc["microbatches"] == 8
    assert abs(doc["completion_s"] - 0.283) < 1e-12
    assert len(doc["busy_s"]) == len(doc["idle_s"]) == len(doc["peak_inflight"]) == 4
    assert doc["forward_messages"] == 24 and doc["messages"] == 48
    assert doc["inputs"]["backward_input_s"] == [0.01] * 4 and doc["inputs"]["backward_weight_s"] == [0.01] * 4
    assert "events" not in doc
    assert run(*args).stdout == res.stdout  # deterministic
    res = run(*args, "--events")
    doc = json.loads(res.stdout)
    assert len(doc["events"]) == 4 * (3 * 8 + 1)  # F, dX, dW per micro-batch and stage, plus the update
    assert set(doc["events"][0]) == {"stage", "kind", "microbatch", "chunk", "direction", "fused", "start_s", "end_s"}


def test_events_table():
    res = run("--schedule", "1f1b", *EXAMPLE, "--events")
    assert res.exit_code == 0
    # REFERENCE.md 10.3 / figure 10-19: on stage 3, B1 ends at 93 ms and F2 starts at 95 ms
    rows = [line.split() for line in res.stdout.splitlines()]
    assert ["3", "B1", "73.0", "ms", "93.0", "ms"] in rows
    assert ["3", "F2", "95.0", "ms", "105.0", "ms"] in rows


@pytest.mark.parametrize("name, magic", [("timeline.svg", b"<svg"), ("timeline.png", b"\x89PNG")])
def test_plot_writes_file(tmp_path, name, magic):
    path = tmp_path / name
    res = run("--schedule", "dualpipe", "--split-backward", *EXAMPLE, "--plot", str(path))
    assert res.exit_code == 0, res.output
    data = path.read_bytes()
    assert magic in data[:400]
    assert len(data) > 2000
    if name.endswith(".svg"):
        text = data.decode()
        assert text.rstrip().endswith("</svg>") and "dW" in text and "update" in text
    assert f"timeline written to {path}" in res.stdout


def test_plot_with_json_keeps_stdout_json(tmp_path):
    path = tmp_path / "t.svg"
    res = run("--schedule", "interleaved", "--layers", "36", *EXAMPLE, "--plot", str(path), "--json")
    assert res.exit_code == 0
    json.loads(res.stdout)
    assert path.exists()


@pytest.mark.parametrize("args, fragment", [
    (["--schedule", "gpipe", *EXAMPLE], "unknown schedule"),
    (["--schedule", "1f1b", "-p", "4", "--forward", "10x", "--backward", "20ms"], "10x"),
    (["--schedule", "1f1b", "-p", "0", "--forward", "10ms", "--backward", "20ms"], "at least 1"),
    (["--schedule", "1f1b", "--backward", "20ms"], "--forward is required"),
    (["--schedule", "1f1b", *EXAMPLE, "--backward-weight", "30ms"], "cannot exceed"),
    (["--schedule", "1f1b", *EXAMPLE, "--split-backward", "--backward-weight", "5ms"], "not both"),
    (["--schedule", "dualpipe-deepseek", "-p", "4", "-m", "6", "--forward", "1ms", "--backward", "2ms"], "even"),
    (["--schedule", "1f1b", *EXAMPLE, "--layers", "36"], "interleaved only"),
    (["--schedule", "1f1b", *EXAMPLE, "--plot", "out.eps"], ".pdf, .svg or .png"),
    (["--schedule", "1f1b", *EXAMPLE, "--activation", "230"], "needs a unit"),
    (["--schedule", "1f1b", *EXAMPLE[:4], "--forward", "1ms,2ms", "--backward", "2ms"], "one per stage"),
])
def test_bad_input_one_line_exit_2(args, fragment):
    res = run(*args)
    assert res.exit_code == 2
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tpopt: error:"), res.stderr
    assert fragment in lines[0]
    assert "Traceback" not in res.output


def test_per_stage_durations():
    # a slow last stage: every 1F1B slot waits for it
    res = run("--schedule", "1f1b", "-p", "2", "-m", "2", "--forward", "1ms,2ms", "--backward", "2ms,4ms", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    # derivation: F0 s0 0-1, F0 s1 1-3, B0 s1 3-7, F1 s0 1-2, F1 s1 7-9, B1 s1 9-13,
    # B0 s0 7-9, B1 s0 13-15 -> 15 ms
    assert abs(doc["completion_s"] - 0.015) < 1e-12
