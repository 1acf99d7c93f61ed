"""Every file tpopt writes cannot be turned against its owner and is never left half written (issue 36 item 4,
issue 42): a symlink planted at any output name (the sweep's --out, its journal and lock, export --out, init,
calibrate's catalog, solve --export, plots, sweep --confidence --out) is refused in one line and the file it
points to is left byte for byte; a write that fails (disk full, a file-size limit) is one line, leaves no
partial or temporary file, and a sweep's journal stays resumable.
"""

import csv
import errno
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_bad_input_matrix import _run  # noqa: E402  (the console entry point in-process)

from tpopt import files
from tpopt.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "examples" / "design-case.toml"
SWEEP = ROOT / "examples" / "design-case-sweep.toml"
RUNS = ("run,model,accelerator,seq_len,global_batch,tp,pp,cards,micro_batch,recompute,zero_stage,iteration_s\n"
        "r1,qwen3-8b,h100-sxm,4096,64,1,1,8,1,full,1,9.0\n")
VICTIM = b"a file someone wants to keep\n"


def _sweep(out):
    return ["sweep", "--scenario", str(SWEEP), "--hw", "rtx4090", "--deadline", "30d", "--workers", "1", "-q",
            "--out", str(out)]


def _calibrate(tmp):
    (tmp / "runs.csv").write_text(RUNS)
    return ["calibrate", "--runs", str(tmp / "runs.csv"), "--out", str(tmp / "cal")]


# (id, the name the link is planted at (relative to tmp), argv(tmp)); the link points to tmp/victim
PLANTED = [
    ("sweep-out-csv", "r.csv", lambda t: _sweep(t / "r.csv")),
    ("sweep-out-json", "r.json", lambda t: _sweep(t / "r.json")),
    ("sweep-journal", "r.json.journal.csv", lambda t: _sweep(t / "r.json")),
    ("sweep-lock", ".r.csv.lock", lambda t: _sweep(t / "r.csv")),
    ("export-out", "m.sh", lambda t: ["export", "--format", "megatron", "--hw", "h100-sxm", "--cards", "64",
                                      "--tp", "8", "--out", str(t / "m.sh"), "--force"]),
    ("init", "s.toml", lambda t: ["init", str(t / "s.toml"), "--force"]),
    ("calibrate-catalog", "cal/performance.toml", lambda t: _calibrate(t) + ["--force"]),
    ("solve-export", "m.lp", lambda t: ["solve", "--scenario", str(DESIGN), "--no-analysis", "--export",
                                        str(t / "m.lp"), "--force"]),
    ("pipeline-plot", "t.svg", lambda t: ["pipeline", "--schedule", "1f1b", "-p", "4", "-m", "8", "--forward",
                                          "10ms", "--backward", "20ms", "--plot", str(t / "t.svg")]),
    ("sweep-plot", "p.svg", lambda t: _sweep(t / "r.csv") + ["--plot", str(t / "p.svg")]),
    ("sweep-confidence-out", "c.csv", lambda t: ["sweep", "--scenario", str(DESIGN), "--confidence", "50%",
                                                 "--out", str(t / "c.csv"), "--force"]),
]


@pytest.mark.parametrize("name,argv", [r[1:] for r in PLANTED], ids=[r[0] for r in PLANTED])
def test_a_planted_symlink_is_refused_and_its_target_kept(tmp_path, capsys, monkeypatch, name, argv):
    victim = tmp_path / "victim"
    victim.write_bytes(VICTIM)
    link = tmp_path / name
    link.parent.mkdir(exist_ok=True)
    link.symlink_to(victim)
    args = argv(tmp_path)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    code, out, err = _run(args, capsys, monkeypatch)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and "Traceback" not in err, (code, err)
    assert len(lines) == 1 and lines[0].startswith("tpopt: error:"), err
    assert "symbolic link" in lines[0] or "not written by a tpopt sweep" in lines[0], lines[0]
    assert victim.read_bytes() == VICTIM  # neither truncated nor written through the link
    assert link.is_symlink()
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # no temporary file left either


def test_a_dangling_symlink_is_refused_too(tmp_path, capsys, monkeypatch):
    (tmp_path / "s.toml").symlink_to(tmp_path / "elsewhere.toml")  # would create the file it names
    code, _, err = _run(["init", str(tmp_path / "s.toml"), "--force"], capsys, monkeypatch)
    assert code == 2 and "symbolic link" in err
    assert not (tmp_path / "elsewhere.toml").exists()


def test_the_lock_file_is_opened_without_following_links_and_never_truncates_others(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(VICTIM)
    (tmp_path / "lock").symlink_to(victim)
    with pytest.raises(InputError, match="symbolic link"):
        files.open_lock(tmp_path / "lock")
    os.link(victim, tmp_path / "hard")  # a hard link planted at the name: two links, refused
    with pytest.raises(InputError, match="not a lock file tpopt left"):
        files.open_lock(tmp_path / "hard")
    (tmp_path / "notes").write_bytes(VICTIM)  # a plain file of the user's own at the name: not a lock, kept
    with pytest.raises(InputError, match="holding a process id"):
        files.open_lock(tmp_path / "notes")
    assert victim.read_bytes() == VICTIM and (tmp_path / "notes").read_bytes() == VICTIM
    fd = files.open_lock(tmp_path / "mine")  # a fresh one is created
    os.write(fd, b"12345")
    os.close(fd)
    fd = files.open_lock(tmp_path / "mine")  # and the one an earlier run left (its pid in it) is reopened
    os.close(fd)


def test_a_failed_write_leaves_no_partial_or_temporary_file(tmp_path, monkeypatch):
    target = tmp_path / "out.csv"
    target.write_bytes(VICTIM)
    real = os.write

    def full(fd, data):
        real(fd, bytes(data[:3]))  # part of it lands, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(InputError, match=r"cannot write .*\(disk full\); nothing was written there"):
        files.write_atomic(target, "x" * 10_000, "--out")
    monkeypatch.setattr(os, "write", real)
    assert target.read_bytes() == VICTIM  # the old file, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"]


def test_failed_init_export_and_calibrate_leave_nothing(tmp_path, capsys, monkeypatch):
    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", full)  # every write fails at its last step
    calibrate = _calibrate(tmp_path)
    for argv in (["init", str(tmp_path / "s.toml")],
                 ["export", "--format", "megatron", "--hw", "h100-sxm", "--cards", "64", "--tp", "8", "--out",
                  str(tmp_path / "m.sh")],
                 calibrate):
        before = sorted(tmp_path.rglob("*"))
        code, _, err = _run(argv, capsys, monkeypatch)
        assert code == 2 and "disk full" in err and len(err.strip().splitlines()) == 1, err
        assert sorted(tmp_path.rglob("*")) == before, argv  # no file, no temporary, no empty folder


LIMITED = r"""
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead of killing the process
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1])))
sys.argv = ["tpopt", *sys.argv[2:]]
from tpopt.cli.main import main
main()
"""


def _limited(limit, argv, cwd):
    return subprocess.run([sys.executable, "-c", LIMITED, str(limit), *argv], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


@pytest.mark.skipif(not hasattr(signal, "SIGXFSZ"), reason="POSIX file-size limits")
def test_disk_full_during_a_sweep_is_one_line_and_the_journal_resumes(tmp_path):
    out = tmp_path / "r.csv"
    argv = ["sweep", "--scenario", str(SWEEP), "--hw", "rtx4090,h100-sxm", "--deadline", "22d:36d:1d",
            "--workers", "1", "-q", "--out", str(out)]
    # a limit that lets the header and a few rows in, not all 30
    r = _limited(1500, argv, tmp_path)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert len(lines) == 1 and "file too large" in lines[0] and "run the same command again to resume" in lines[0]
    kept = out.read_text().splitlines()
    assert 1 < len(kept) < 31  # the header and the rows that fit
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.csv"]  # no lock, no temporary file
    # without the limit the same command resumes and ends with every point
    r = subprocess.run([sys.executable, "-m", "tpopt.cli.main", *[a for a in argv if a != "-q"]],
                       capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    assert len(out.read_text().splitlines()) == 31
    assert f"resumed: {len(kept) - 2:,} of 30 points reused" in r.stderr  # less the header and the torn line


@pytest.mark.skipif(not hasattr(signal, "SIGXFSZ"), reason="POSIX file-size limits")
def test_a_file_size_limit_leaves_no_partial_export_or_scenario(tmp_path):
    for argv in (["init", "s.toml"], ["solve", "--scenario", str(DESIGN), "--no-analysis", "--export", "m.lp"]):
        r = _limited(200, argv, tmp_path)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip() and not ln.startswith("tpopt: Scenario")]
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert len(lines) == 1 and "file too large" in lines[0].lower(), r.stderr
        assert list(tmp_path.iterdir()) == []



def test_sweep_confidence_writes_its_out_file(tmp_path, capsys, monkeypatch):
    # before issue 42 `sweep --confidence --out` wrote nothing and exited 0
    args = ["sweep", "--scenario", str(DESIGN), "--confidence", "50%,90%"]
    code, out, err = _run(args + ["--json"], capsys, monkeypatch)
    assert code in (0, None), err
    want = json.loads(out)
    for name in ("c.json", "c.csv"):
        code, _, err = _run(args + ["--out", str(tmp_path / name)], capsys, monkeypatch)
        assert code in (0, None) and f"wrote {tmp_path / name} (2 confidence level(s))" in err, err
    assert json.loads((tmp_path / "c.json").read_text()) == want
    rows = list(csv.DictReader((tmp_path / "c.csv").read_text().splitlines()))
    assert [float(r["confidence"]) for r in rows] == [0.5, 0.9]
    assert [r["status"] for r in rows] == [w["status"] for w in want["rows"]]
    assert [r["cards"] for r in rows] == [str(w["cards"] or "") for w in want["rows"]]
    code, _, err = _run(args + ["--out", str(tmp_path / "c.csv")], capsys, monkeypatch)  # the no-overwrite rule
    assert code == 2 and "the file exists; pass --force" in err
