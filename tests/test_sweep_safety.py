"""Sweeps are safe under kill, concurrency, tampering and failure, and honest about what they do not know
(issue 17): workers die with the sweep, a second writer is refused, an edited row is solved again with a
note that says so, a point whose task fails twice is an error row (never lost), "unknown" (time limit)
stays apart from "infeasible" in rows, summaries, text and plots, and integer columns stay integers."""

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from tpopt.cli.main import cli
from tpopt.errors import InputError
from tpopt.optimizer import sweep as sw
from tpopt.optimizer.sweep import rows as rows_mod

ROOT = Path(__file__).resolve().parents[1]
SWEEP_FILE = ROOT / "examples" / "design-case-sweep.toml"
SMALL = {"hw": "rtx4090,h100-sxm", "deadline": "22d,25d,36d"}  # 6 points: 1 infeasible + 2 optimal per card


def run(args):
    r = CliRunner().invoke(cli, ["sweep", "--scenario", str(SWEEP_FILE)] + args)
    return r.exit_code, r.stdout, r.stderr


# ---------------------------------------------------------------------------------------------
# kill -9 and concurrency


def test_kill_9_of_the_sweep_leaves_no_worker_behind(tmp_path, live_in_group):
    from sweep_hold import held_after

    out = tmp_path / "r.csv"
    # the driver holds after 3 saved rows (tests/sweep_hold.py): killed mid-sweep however loaded the machine
    proc = subprocess.Popen(held_after(3, ["sweep", "--scenario", str(SWEEP_FILE), "--deadline", "20d:200d:1d",
                                           "--solver", "cpsat", "--workers", "2", "--out", str(out), "-q"]),
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t_end = time.monotonic() + 600  # wait on what can be seen (three rows saved), not on a fixed time
    while time.monotonic() < t_end and proc.poll() is None and \
            not (out.exists() and out.read_text().count("\n") >= 1 + 3):
        time.sleep(0.01)
    assert proc.poll() is None, f"the sweep ended before it was killed: {proc.returncode}"
    assert len(live_in_group(proc.pid)) >= 3  # the driver and its 2 workers
    os.kill(proc.pid, signal.SIGKILL)  # the driver only, as `kill -9 PID` does
    proc.wait()
    t_end = time.monotonic() + 120  # the workers' exit, seen (a loaded machine takes its time)
    while time.monotonic() < t_end and live_in_group(proc.pid):
        time.sleep(0.05)
    assert live_in_group(proc.pid) == []


def test_a_second_writer_of_the_same_output_is_refused(tmp_path):
    from sweep_hold import held_after

    out, release = tmp_path / "r.csv", tmp_path / "release"
    args = ["sweep", "--scenario", str(SWEEP_FILE), "--deadline", "20d:60d:1d", "--solver", "cpsat", "--workers",
            "1", "--out", str(out), "-q"]
    # the first writer holds after 2 saved rows until released (tests/sweep_hold.py): it is still writing when
    # the second comes, however loaded the machine
    first = subprocess.Popen(held_after(2, args, str(release)), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True)
    t_end = time.monotonic() + 600
    while time.monotonic() < t_end and first.poll() is None and \
            not (out.exists() and out.read_text().count("\n") >= 1 + 2):
        time.sleep(0.01)
    assert first.poll() is None, f"the first sweep ended early: {first.returncode}"
    code, stdout, err = run(["--deadline", "30d:40d:1d", "--out", str(out)])  # another grid, same file
    release.touch()
    assert code == 2 and stdout == ""
    assert err.strip() == (f"tpopt: error: {str(out)!r} is being written by another tpopt sweep (pid {first.pid}); "
                           f"wait for it to finish or choose another --out")
    _, err1 = first.communicate(timeout=600)
    assert first.returncode == 0, err1
    assert out.read_text().count("\n") == 1 + 41  # the first grid, whole
    assert not (tmp_path / ".r.csv.lock").exists()  # removed at the end
    code, _, err = run(["--deadline", "30d:40d:1d", "--out", str(out)])  # afterwards: fine
    assert code == 0, err


def test_the_lock_is_released_on_errors_and_by_a_killed_holder(tmp_path):
    out = tmp_path / "r.json"
    out.write_text('{"mine": 1}')
    with pytest.raises(InputError, match="not written by"):
        sw.run_sweep(sw.build_spec(SWEEP_FILE, SMALL), out=out, workers=1)
    assert not (tmp_path / ".r.json.lock").exists()
    # a holder killed with its lock file left behind does not block the next run (flock dies with it)
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from pathlib import Path; "
                               "from tpopt.optimizer.sweep.store import OutputLock; "
                               "OutputLock(Path(sys.argv[1])).acquire(); print('locked', flush=True); "
                               "time.sleep(60)", str(tmp_path / "s.csv")], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    with pytest.raises(InputError, match="being written by another tpopt sweep"):
        sw.run_sweep(sw.build_spec(SWEEP_FILE, SMALL), out=tmp_path / "s.csv", workers=1)
    holder.kill()
    holder.wait()
    assert (tmp_path / ".s.csv.lock").exists()
    res = sw.run_sweep(sw.build_spec(SWEEP_FILE, SMALL), out=tmp_path / "s.csv", workers=1)
    assert res.computed == 6


# ---------------------------------------------------------------------------------------------
# checksums and honest notes


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    d = tmp_path_factory.mktemp("small")
    out = d / "ref.csv"
    res = sw.run_sweep(sw.build_spec(SWEEP_FILE, SMALL), out=out, workers=1)
    return res, out.read_bytes()


def test_every_row_carries_the_checksum_of_its_content(small):
    res, data = small
    for r in res.rows:
        assert r["checksum"] == rows_mod.row_checksum(r) and len(r["checksum"]) == 16
        changed = dict(r, cost=1.0 if r["cost"] != 1.0 else 2.0)
        assert rows_mod.row_checksum(changed) != r["checksum"]
        assert rows_mod.row_checksum(dict(r, pareto=not r["pareto"])) == r["checksum"]  # recomputed each run


def _edit(path: Path, old: str, new: str, reseal: bool = False) -> None:
    """Change one cell of the first row holding ``old`` (as a hand edit would), optionally fixing its checksum."""
    lines = path.read_text().split("\n")
    for i, line in enumerate(lines[1:], 1):
        if old in line:
            row = sw._parse_csv_line(line.replace(old, new, 1))
            assert row is not None
            if reseal:
                row = rows_mod.seal(row)
            from tpopt.optimizer.sweep.store import _csv_line

            lines[i] = _csv_line(row).rstrip("\n")
            break
    else:
        raise AssertionError(old)
    path.write_text("\n".join(lines))


def test_a_hand_edited_row_is_detected_and_solved_again(tmp_path, small):
    res, data = small
    out = tmp_path / "r.csv"
    out.write_bytes(data)
    cost = next(r["cost"] for r in res.rows if r["cost"] is not None)
    _edit(out, f",{cost!r},", ",1.0,")  # cost 17,880 -> 1.0: would corrupt the front if trusted
    code, _, err = run(["--hw", SMALL["hw"], "--deadline", SMALL["deadline"], "--out", str(out)])
    assert code == 0
    assert "1 row(s) in" in err and "no longer match their checksum (edited by hand or corrupted); their points " \
                                    "are solved again" in err
    assert "resumed: 5 of 6 points reused" in err and "outside this sweep" not in err
    assert out.read_bytes() == data


def test_a_bad_status_is_solved_again_with_an_honest_note(tmp_path, small):
    _, data = small
    out = tmp_path / "r.csv"
    for reseal, needle in ((True, "have a status that is not one of optimal, feasible, infeasible, unknown, error"),
                           (False, "no longer match their checksum")):
        out.write_bytes(data)
        _edit(out, ",optimal,", ",optimall,", reseal=reseal)
        code, _, err = run(["--hw", SMALL["hw"], "--deadline", SMALL["deadline"], "--out", str(out)])
        assert code == 0 and needle in err and "outside this sweep" not in err, err
        assert out.read_bytes() == data


def test_unproven_rows_say_why_they_are_solved_again(tmp_path, small):
    _, data = small
    out = tmp_path / "r.csv"
    out.write_bytes(data)
    _edit(out, ",optimal,", ",feasible,", reseal=True)  # as a time-limited solve leaves it
    code, _, err = run(["--hw", SMALL["hw"], "--deadline", SMALL["deadline"], "--out", str(out)])
    assert code == 0
    assert "1 point(s) whose earlier answer was 'feasible' (time limit: plan not proven optimal) are solved " \
           "again" in err
    assert out.read_bytes() == data


def test_a_json_row_with_a_wrong_type_is_unreadable_not_a_traceback(tmp_path, small):
    res, _ = small
    out = tmp_path / "r.json"
    sw.run_sweep(res.spec, out=out, workers=1)
    good = out.read_bytes()
    d = json.loads(good)
    d["rows"][0]["cards"] = "many"
    out.write_text(json.dumps(d))
    again = sw.run_sweep(res.spec, out=out, workers=1)
    assert again.resume.unreadable == 1 and again.computed == 1
    assert out.read_bytes() == good


# ---------------------------------------------------------------------------------------------
# failures: retried once, then an error row


def test_a_point_that_kills_its_worker_twice_is_an_error_row(tmp_path, monkeypatch):
    """Workers are forked after the patch: one point kills its worker every time, another only the first
    time. The pool replaces dead workers; the first point becomes an error row, the second is retried."""
    spec = sw.build_spec(SWEEP_FILE, {"deadline": "24d,30d,36d,40d", "solver": "cpsat"})
    keys = [p.key() for p in spec.points()]
    poison, flaky = keys[1], keys[2]
    marker = tmp_path / "flaky-once"
    from tpopt.optimizer.sweep import tasks

    real = tasks.run_task

    def run_task(kind, payload, points):
        key = points[0].key()
        if key == poison:
            os.kill(os.getpid(), signal.SIGKILL)
        if key == flaky and not marker.exists():
            marker.write_text("x")
            raise MemoryError("out of memory")
        return real(kind, payload, points)

    monkeypatch.setattr(tasks, "run_task", run_task)
    out = tmp_path / "r.csv"
    notes = []

    class Notes(sw.Progress):
        def note(self, text):
            notes.append(text)

    res = sw.run_sweep(spec, out=out, workers=2, progress=Notes())
    by = {r["point_key"]: r for r in res.rows}
    assert len(by) == 4 and res.retried == 2
    assert by[poison]["status"] == "error" and by[poison]["note"] == "failed 2 times: worker process died (SIGKILL)"
    assert by[poison]["cards"] is None and by[poison]["pareto"] is False
    assert by[flaky]["status"] == "optimal"
    assert sorted(notes) == sorted([f"{poison}: worker process died (SIGKILL); retrying",
                                    f"{poison}: failed again (worker process died (SIGKILL)); recorded as status "
                                    f"'error'",
                                    f"{flaky}: MemoryError: out of memory; retrying"])
    rows = [sw._parse_csv_line(ln) for ln in out.read_text().split("\n")[1:] if ln]
    assert [r["status"] for r in rows].count("error") == 1  # in the file too, never silently lost
    # the error row is solved again by the next run (here without the poison)
    monkeypatch.setattr(tasks, "run_task", real)
    again = sw.run_sweep(spec, out=out, workers=2)
    assert again.computed == 1 and again.resume.unproven == {"error": 1}
    assert {r["status"] for r in again.rows} <= {"optimal", "infeasible"}


def test_error_rows_exit_1_with_one_line(tmp_path, monkeypatch):
    from tpopt.optimizer.sweep import tasks

    real = tasks.run_task

    def run_task(kind, payload, points):
        if points[0].deadline_s == 30 * 86400:
            raise RuntimeError("boom")
        return real(kind, payload, points)

    monkeypatch.setattr(tasks, "run_task", run_task)
    out = tmp_path / "r.csv"
    code, stdout, err = run(["--deadline", "30d,36d", "--solver", "cpsat", "--workers", "1", "--out", str(out)])
    assert code == 1
    lines = err.strip().split("\n")
    assert lines[-1] == ("tpopt: error: 1 point(s) failed twice (a worker died or raised; status 'error', the reason "
                         "in the note column); re-run with the same --out to solve them again")
    assert "RuntimeError: boom; retrying" in lines[0] and "Traceback" not in err
    assert "Pareto front" in stdout and "1 by cpsat, 1 failed" in stdout  # the answered points are still reported
    assert ",error," in out.read_text() and "failed 2 times: RuntimeError: boom" in out.read_text()


# ---------------------------------------------------------------------------------------------
# unknown is not infeasible


@pytest.fixture
def all_time_limited(monkeypatch):
    """Every solve stops at its time limit without a plan or a proof (status unknown)."""
    from tpopt.optimizer import core
    from tpopt.optimizer.result import SolveResult, SolverInfo, Status

    def solve(sc, backend="cpsat", req=None, restrict=None, space=None):
        return SolveResult(status=Status.UNKNOWN, objective="cost", solver=SolverInfo(backend))

    monkeypatch.setattr(core, "solve", solve)


def test_a_sweep_whose_points_all_hit_the_limit_does_not_say_infeasible(tmp_path, all_time_limited):
    out, plot = tmp_path / "r.csv", tmp_path / "p.svg"
    args = ["--deadline", "24d,30d,36d", "--solver", "cpsat", "--time-limit", "5", "--out", str(out),
            "--plot", str(plot)]
    code, stdout, err = run(args)
    assert code == 0, err
    flat = " ".join(stdout.split())  # the text is wrapped to the terminal's width (issue 25)
    assert "No feasible plan" not in flat
    assert "No plan found: 3 reached the time limit without an answer (unknown); infeasibility is not proven at " \
           "every point." in flat
    assert "no answer" in stdout  # the summary's column
    assert "3 point(s) reached the time limit (5 s): 3 without an answer (status unknown)" in err
    rows = [sw._parse_csv_line(ln) for ln in out.read_text().split("\n")[1:] if ln]
    assert [r["status"] for r in rows] == ["unknown"] * 3
    assert all(r["note"] == "time limit 5 s reached: no plan found and no proof that none exists" for r in rows)
    assert all(r["fastest_days"] is None and r["pareto"] is False for r in rows)
    svg = plot.read_text()
    assert "no answer (time limit or error)" in svg and "infeasible deadline" not in svg
    assert "no plan found (3 points without an answer)" in svg and "no feasible plan" not in svg
    assert 'id="infeasible-region"' not in svg  # nothing is shaded as unreachable
    code, stdout, _ = run(args[:-2] + ["--json"])
    d = json.loads(stdout)
    assert d["statuses"]["unknown"] == 3 and d["statuses"]["infeasible"] == 0
    assert d["summary"][0]["unknown"] == 3 and d["summary"][0]["infeasible"] == 0


def test_summary_and_plot_data_keep_the_statuses_apart():
    spec = sw.build_spec(SWEEP_FILE, {"deadline": "20d,22d,26d,30d"})
    res = sw.run_sweep(spec, workers=1)
    res.rows[1] = dict(res.rows[1], status="unknown")  # 22 d: as if a solver had hit its limit
    s = sw.summarize(res.rows, spec.hw)[0]
    assert (s["feasible"], s["infeasible"], s["unknown"], s["error"]) == (2, 1, 1, 0)
    series = sw.plot_series(res)["series"][0]
    assert series["infeasible_deadlines"] == [20.0] and series["unknown_deadlines"] == [22.0]


# ---------------------------------------------------------------------------------------------
# integer columns and the one-call entry point


def test_integer_columns_stay_integers_in_every_format(tmp_path, small):
    import pandas as pd

    res, data = small
    text = data.decode()
    header, first = text.split("\n")[0].split(","), text.split("\n")[1:]
    row = next(ln for ln in first if ",optimal," in ln)
    cells = dict(zip(header, next(csv.reader([row])), strict=False))
    for c in sw.INT_COLUMNS:
        if c in ("ep", "expert_tp"):  # MoE fields: empty for a dense model (issue 25)
            assert cells[c] == "", (c, cells[c])
            continue
        assert cells[c].isdigit(), (c, cells[c])  # "48", never "48.0"
    js = tmp_path / "r.json"
    sw.run_sweep(res.spec, out=js, workers=1)
    for r in json.loads(js.read_text())["rows"]:
        for c in sw.INT_COLUMNS:
            assert r[c] is None or type(r[c]) is int
    pq = tmp_path / "r.parquet"
    sw.run_sweep(res.spec, out=pq, workers=1)
    df = pd.read_parquet(pq)
    for c in sw.INT_COLUMNS:
        assert str(df[c].dtype) == "Int64", c
    assert str(df["pareto"].dtype) == "boolean"
    assert df["cards"].dropna().tolist() == [r["cards"] for r in res.rows if r["cards"] is not None]
    frame = res.to_frame()
    assert all(str(frame[c].dtype) == "Int64" for c in sw.INT_COLUMNS)


def test_sweep_entry_point_takes_a_path_or_a_dict(small):
    import tomllib

    res, _ = small
    a = sw.sweep(SWEEP_FILE, workers=1, **SMALL)
    raw = tomllib.loads(SWEEP_FILE.read_text())
    b = sw.sweep(raw, workers=1, hw=["rtx4090", "h100-sxm"], deadline=["22d", "25d", "36d"])
    assert a.rows == b.rows == res.rows
