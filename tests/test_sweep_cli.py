"""`tpopt sweep` on the command line: tables, JSON, kill-and-resume, plots, bad input, determinism."""

import json
import os
import signal
import struct
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from tpopt.cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
SWEEP_FILE = str(ROOT / "examples" / "design-case-sweep.toml")
SVG = "{http://www.w3.org/2000/svg}"


def run(args):
    r = CliRunner().invoke(cli, ["sweep", "--scenario", SWEEP_FILE] + args)
    return r.exit_code, r.stdout, r.stderr


def test_table_and_json_output():
    code, out, err = run(["--deadline", "24d,30d,36d"])
    assert code == 0, err
    assert err == ""  # not a terminal: no progress bar, no notes on a fresh run
    assert "Pareto front" in out and "Per accelerator" in out and "rtx4090" in out
    code, out, _ = run(["--deadline", "24d,30d,36d", "--json"])
    d = json.loads(out)
    assert [e["cards"] for e in d["front"]] == [48, 32]  # 24.6 d and 34.3 d (10.6)
    assert [round(e["finish_days"], 1) for e in d["front"]] == [24.6, 34.3]
    assert d["summary"][0]["infeasible"] == 1 and d["summary"][0]["earliest_deadline_days"] == 30.0


def test_sweep_table_in_file_and_flags_override_it(tmp_path):
    out = tmp_path / "r.csv"
    code, _, err = run(["--out", str(out)])  # [sweep]: rtx4090, 20d:40d:1d
    assert code == 0, err
    lines = out.read_text().strip().split("\n")
    assert len(lines) == 1 + 21
    out2 = tmp_path / "r2.csv"
    code, _, err = run(["--out", str(out2), "--deadline", "30d", "--hw", "rtx4090,h100-sxm"])
    assert code == 0, err
    assert len(out2.read_text().strip().split("\n")) == 1 + 2


def _rows(path: Path) -> list[str]:
    text = path.read_text()
    head, _, body = text.partition("\n")
    return [ln for ln in body.split("\n") if ln]


def test_killed_sweep_resumes_to_the_uninterrupted_result(tmp_path):
    from sweep_hold import held_after

    sweep = ["sweep", "--scenario", SWEEP_FILE, "--deadline", "20d:60d:1d", "--solver", "cpsat", "--workers", "2",
             "--quiet"]
    args = [sys.executable, "-m", "tpopt.cli.main", *sweep]
    ref = tmp_path / "ref.csv"
    subprocess.run(args + ["--out", str(ref)], check=True, capture_output=True, timeout=600)
    assert len(_rows(ref)) == 41

    out = tmp_path / "killed.csv"
    # the driver holds after 5 saved rows (tests/sweep_hold.py): the kill lands mid-sweep however loaded the
    # machine (waiting for rows and then killing raced the sweep's end)
    proc = subprocess.Popen(held_after(5, sweep + ["--out", str(out)]), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t_end = time.monotonic() + 600  # wait on what can be seen (five rows saved), not on a fixed time
    while time.monotonic() < t_end and proc.poll() is None and \
            not (out.exists() and out.read_text().count("\n") >= 1 + 5):
        time.sleep(0.01)
    assert proc.poll() is None, f"the sweep ended before it was killed: {proc.returncode}"
    os.killpg(proc.pid, signal.SIGKILL)  # the sweep and its workers, mid-run
    proc.wait()
    partial = out.read_text()
    done = partial.count("\n") - 1
    assert 5 <= done < 41, "the sweep was not killed midway"
    from tpopt.optimizer.sweep import HEADER, _parse_csv_line

    assert partial.startswith(HEADER + "\n")
    complete = partial.split("\n")[1:-1]
    assert all(_parse_csv_line(ln) is not None for ln in complete)  # never corrupt: only whole rows
    with out.open("a") as fh:  # and a row torn by the kill is discarded on resume
        fh.write(complete[0][:40])

    r = subprocess.run(args[:-1] + ["--out", str(out)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert f"resumed: {done} of 41 points reused" in r.stderr
    assert "discarded 1 torn" in r.stderr
    assert sorted(_rows(out)) == sorted(_rows(ref))  # same rows, order-independent
    assert out.read_bytes() == ref.read_bytes()  # and, sorted, the same bytes


def test_ctrl_c_stops_cleanly_and_keeps_only_proven_rows(tmp_path):
    out = tmp_path / "r.csv"
    # 1,981 deadlines (about 75 s unloaded): the interrupt comes long before the end however loaded the machine
    # (181 points took 7 s: at a load of 6-7 the sweep once ended before the signal came, exit 0 instead of 130)
    points = 1981
    args = [sys.executable, "-m", "tpopt.cli.main", "sweep", "--scenario", SWEEP_FILE, "--deadline", "20d:2000d:1d",
            "--solver", "cpsat", "--workers", "1", "--out", str(out)]
    # Ctrl-C as at a terminal: the child's SIGINT at its default action, whatever this process inherited (a
    # shell starts background jobs with SIGINT ignored, and an ignored SIGINT stays ignored across exec, so a
    # suite launched with `cmd &` would see the sweep run to its end and exit 0)
    proc = subprocess.Popen(args, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    t_end = time.monotonic() + 600  # wait on what can be seen (three rows written), not on a fixed time
    while time.monotonic() < t_end and proc.poll() is None and \
            not (out.exists() and out.read_text().count("\n") >= 1 + 3):
        time.sleep(0.01)
    assert proc.poll() is None, f"the sweep ended before it was interrupted: {proc.returncode}"
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 130 and err.strip() == "tpopt: error: interrupted"
    from tpopt.optimizer.sweep import _parse_csv_line

    rows = [_parse_csv_line(ln) for ln in _rows(out)]
    assert 3 <= len(rows) < points
    assert all(r is not None and r["status"] in ("optimal", "infeasible") for r in rows)  # no cut-short solve


def _svg_texts(path: Path) -> list[str]:
    tree = ET.parse(path)
    return ["".join(t.itertext()) for t in tree.iter(f"{SVG}text")]


def _svg_ids(path: Path) -> set:
    return {e.get("id") for e in ET.parse(path).iter() if e.get("id")}


def test_plots_svg(tmp_path):
    p, b = tmp_path / "pareto.svg", tmp_path / "breakdown.svg"
    code, _, err = run(["--hw", "rtx4090,h100-sxm,a100-80gb-sxm", "--deadline", "20d:40d:2d", "--plot", str(p),
                        "--plot-breakdown", str(b), "--breakdown-cards", "32,48", "-q"])
    assert code == 0, err
    assert ET.parse(p).getroot().tag == f"{SVG}svg"
    texts = _svg_texts(p)
    for label in ("rtx4090", "h100-sxm", "a100-80gb-sxm", "infeasible deadline", "no plan finishes this early",
                  "finish time / deadline, days"):
        assert label in texts, label
    assert any(t.startswith("Pareto front") for t in texts)
    assert {"series-0", "series-1", "series-2", "pareto-front", "infeasible-region", "infeasible-0"} <= _svg_ids(p)
    texts = _svg_texts(b)
    # several deadlines swept: the band of swept deadlines, not only the scenario's own 30 d (issue 14)
    assert {"rtx4090 x 32", "rtx4090 x 48", "deadlines swept 20-40 d", "base training",
            "checkpoint/failure overhead", "reserved"} <= set(texts)
    assert {"part-train_days", "part-overhead_days", "part-reserved_days", "deadline-range"} <= _svg_ids(b)
    # deterministic SVG
    p2 = tmp_path / "again.svg"
    run(["--hw", "rtx4090,h100-sxm,a100-80gb-sxm", "--deadline", "20d:40d:2d", "--plot", str(p2), "-q"])
    assert p2.read_bytes() == p.read_bytes()


def test_plots_png_and_front_breakdown(tmp_path):
    p, b = tmp_path / "pareto.png", tmp_path / "breakdown.png"
    code, _, err = run(["--deadline", "20d:40d:5d", "--plot", str(p), "--plot-breakdown", str(b), "-q"])
    assert code == 0, err
    for path in (p, b):
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
        w, h = struct.unpack(">II", data[16:24])
        assert w >= 600 and h >= 150


def assert_one_line_error(code, out, err, needle):
    assert code == 2, (code, out, err)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert needle in lines[0], lines[0]
    assert "Traceback" not in err and out == ""


@pytest.mark.parametrize("extra,needle", [
    (["--deadline", "10d:5d:1d"], "is before the start"),
    (["--deadline", "10x:20d:1d"], "unknown unit 'x'"),
    (["--deadline", "10d:20d:0d"], "step must be positive"),
    (["--efficiency", "30%:150%:10%"], "efficiency"),
    (["--hw", "rtx4090,tpu-v9"], "unknown accelerator 'tpu-v9'"),
    (["--hw", "all"], "'all', every card with a market offer, is tpopt solve's"),
    (["--max-cards", "8:64"], "not a range"),
    (["--workers", "0"], "--workers"),
    (["--plot", "x.eps"], "must end in .pdf, .svg, .png"),
    (["--out", "/nonexistent-dir/r.csv"], "does not exist"),
    (["--out", "r.xlsx"], "must end in .csv, .parquet, .json"),
    (["--breakdown-cards", "32"], "needs --plot-breakdown"),
])
def test_bad_input_one_line_exit_2(extra, needle):
    assert_one_line_error(*run(extra), needle)


def test_unwritable_out_is_refused_before_work(tmp_path):
    d = tmp_path / "adir.csv"
    d.mkdir()
    assert_one_line_error(*run(["--out", str(d)]), "is a directory")
    f = tmp_path / "plain"
    f.write_text("keep")
    assert_one_line_error(*run(["--out", str(f / "r.csv")]), "does not exist")
    assert f.read_text() == "keep"


def test_foreign_out_is_never_overwritten_without_force(tmp_path):
    out = tmp_path / "results.csv"
    out.write_text("name,value\nmine,1\n")
    assert_one_line_error(*run(["--deadline", "30d", "--out", str(out)]), "not written by a tpopt sweep")
    assert out.read_text() == "name,value\nmine,1\n"
    js = tmp_path / "results.json"
    js.write_text('{"my": "data"}')
    assert_one_line_error(*run(["--deadline", "30d", "--out", str(js)]), "not written by a tpopt sweep")
    assert js.read_text() == '{"my": "data"}'
    code, _, err = run(["--deadline", "30d", "--out", str(out), "--force"])
    assert code == 0, err
    assert out.read_text().startswith("point_key,")
    # a sweep of another scenario in the same file is refused too
    assert_one_line_error(*run(["--deadline", "30d", "--out", str(out), "--usable-memory", "20GiB"]),
                          "different scenario")


@pytest.mark.parametrize("ext", [".csv", ".json", ".parquet"])
def test_same_inputs_same_bytes(tmp_path, ext):
    a, b = tmp_path / f"a{ext}", tmp_path / f"b{ext}"
    args = ["--deadline", "22d:36d:2d", "--hw", "rtx4090,h100-sxm", "-q"]
    assert run(args + ["--out", str(a), "--workers", "1"])[0] == 0
    assert run(args + ["--out", str(b), "--workers", "2"])[0] == 0
    assert a.read_bytes() == b.read_bytes()
    code, _, err = run(args[:-1] + ["--out", str(a)])  # re-run: everything reused, same bytes
    assert code == 0 and "resumed: 16 of 16" in err
    assert a.read_bytes() == b.read_bytes()


def test_real_process_bad_input_exit_code():
    p = subprocess.run([sys.executable, "-m", "tpopt.cli.main", "sweep", "--scenario", SWEEP_FILE, "--deadline",
                        "10d:5d:1d"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip().count("\n") == 0 and "Traceback" not in p.stderr
