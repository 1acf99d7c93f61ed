"""Sweeps on a Dask cluster (optimizer/sweep/cluster.py): a real LocalCluster of 2 worker processes gives
the same bytes as the local pool, a worker that dies mid-sweep costs nothing, a killed driver resumes
with nothing lost or duplicated, and without Dask ``--cluster`` is one clear line."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from tpopt.cli.main import cli
from tpopt.optimizer import sweep as sw

distributed = pytest.importorskip("distributed")

ROOT = Path(__file__).resolve().parents[1]
SWEEP_FILE = ROOT / "examples" / "design-case-sweep.toml"
CPSAT = {"hw": "rtx4090,h100-sxm", "deadline": "24d:36d:3d", "solver": "cpsat"}  # 10 CP-SAT points
TABLE = {"hw": "rtx4090,h100-sxm,a100-80gb-sxm", "deadline": "20d:40d:1d"}  # 63 points, 3 table tasks


def _body(path: Path) -> list[str]:
    return [ln for ln in path.read_text().split("\n")[1:] if ln]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The local executor's files (the byte-for-byte reference)."""
    d = tmp_path_factory.mktemp("ref")
    out = {}
    for name, cli_ in (("cpsat", CPSAT), ("table", TABLE)):
        out[name] = d / f"{name}.csv"
        sw.run_sweep(sw.build_spec(SWEEP_FILE, cli_), out=out[name], workers=2)
    return out


@pytest.fixture(scope="module")
def cluster():
    """A real LocalCluster of 2 worker processes, as ``--cluster local:2`` starts it."""
    from tpopt.optimizer.sweep.cluster import local_cluster

    with local_cluster(2) as c, distributed.Client(c) as client:
        yield c, client


def test_local_cluster_output_is_byte_identical_to_the_local_executor(tmp_path, reference, cluster):
    scheduler_file = tmp_path / "scheduler.json"  # as `dask scheduler --scheduler-file` writes it
    cluster[1].write_scheduler_file(str(scheduler_file))
    for name, cli_, where in (("cpsat", CPSAT, str(scheduler_file)), ("table", TABLE, cluster[0].scheduler_address)):
        out = tmp_path / f"{name}.csv"
        res = sw.run_sweep(sw.build_spec(SWEEP_FILE, cli_), out=out, cluster=where)
        assert res.executor == "dask" and res.workers == 2 and res.computed == len(res.rows)
        assert out.read_bytes() == reference[name].read_bytes(), name
    assert res.paths == {"table": 63} and res.tasks == 3


def _kill_self_once(marker: str, victim: str):
    """Install on every worker: the first task of point ``victim`` kills its worker process (SIGKILL)."""

    def patch():
        import os
        import signal

        from tpopt.optimizer.sweep import tasks

        real = tasks.run_task

        def run_task(kind, payload, points):
            if points[0].key() == victim:
                try:
                    fd = os.open(marker, os.O_CREAT | os.O_EXCL)
                except FileExistsError:
                    pass
                else:
                    os.close(fd)
                    os.kill(os.getpid(), signal.SIGKILL)
            return real(kind, payload, points)

        tasks.run_task = run_task
        return True

    return patch


def test_a_worker_dying_mid_sweep_costs_nothing(tmp_path, reference, cluster):
    """A worker dies while it solves a point: the scheduler reports it (allowed-failures 0), the driver
    submits the point again, the nanny restarts the worker, and every point is in the output."""
    spec = sw.build_spec(SWEEP_FILE, CPSAT)
    victim = spec.points()[5].key()
    marker = tmp_path / "killed"
    assert all(cluster[1].run(_kill_self_once(str(marker), victim)).values())
    notes = []

    class Notes(sw.Progress):
        def note(self, text):
            notes.append(text)

    out = tmp_path / "r.csv"
    res = sw.run_sweep(spec, out=out, cluster=cluster[0].scheduler_address, progress=Notes())
    assert marker.exists()  # the victim's worker did die
    assert res.retried == 1 and len(notes) == 1
    assert notes[0].startswith(victim) and "worker process died; retrying" in notes[0]
    assert len(res.rows) == 10 and {r["status"] for r in res.rows} <= {"optimal", "infeasible"}
    assert out.read_bytes() == reference["cpsat"].read_bytes()


def _cli(out: Path, cluster: str) -> list[str]:
    return [sys.executable, "-m", "tpopt.cli.main", "sweep", "--scenario", str(SWEEP_FILE), "--hw", CPSAT["hw"],
            "--deadline", CPSAT["deadline"], "--solver", "cpsat", "--cluster", cluster, "--out", str(out)]


def _start_and_kill(args: list[str], out: Path, rows: int) -> subprocess.Popen:
    """Start a sweep in its own process group, its driver held once ``rows`` rows are saved
    (tests/sweep_hold.py: the kill lands mid-sweep however loaded the machine), and SIGKILL the driver alone."""
    from sweep_hold import held_after

    assert args[1:3] == ["-m", "tpopt.cli.main"]
    proc = subprocess.Popen(held_after(rows, args[3:] + ["-q"]), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t_end = time.monotonic() + 600  # wait on what can be seen (the rows saved), not on a fixed time
    while time.monotonic() < t_end and proc.poll() is None and \
            not (out.exists() and out.read_text().count("\n") >= 1 + rows):
        time.sleep(0.01)
    assert proc.poll() is None, f"the sweep ended before it was killed: {proc.returncode}"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    return proc


def test_driver_killed_mid_sweep_resumes_with_nothing_lost_or_duplicated(tmp_path, reference, cluster):
    out = tmp_path / "r.csv"
    args = _cli(out, cluster[0].scheduler_address)
    _start_and_kill(args, out, 3)
    done = len(_body(out))
    assert 3 <= done < 10, "the sweep was not killed midway"
    r = subprocess.run(args, capture_output=True, text=True, timeout=180)  # the same command
    assert r.returncode == 0, r.stderr
    assert f"resumed: {done} of 10 points reused" in r.stderr
    assert len(_body(out)) == 10 == len(set(_body(out)))
    assert out.read_bytes() == reference["cpsat"].read_bytes()


def test_a_killed_driver_takes_its_local_cluster_with_it(tmp_path, live_in_group):
    out = tmp_path / "r.csv"
    proc = _start_and_kill(_cli(out, "local:2"), out, 1)
    t_end = time.monotonic() + 120  # the group's exit, seen (a loaded machine takes its time to reap it)
    while time.monotonic() < t_end and live_in_group(proc.pid):
        time.sleep(0.1)
    assert live_in_group(proc.pid) == []  # scheduler, nannies and workers are gone too
    assert len(_body(out)) >= 1


def _run(args):
    r = CliRunner().invoke(cli, ["sweep", "--scenario", str(SWEEP_FILE), "--deadline", "30d"] + args)
    return r.exit_code, r.stdout, r.stderr


def _one_line(code, out, err, needle):
    assert code == 2, (code, out, err)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], err
    assert "Traceback" not in err and out == ""


def test_cluster_without_dask_is_one_line_exit_2(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "distributed", None)  # as if the extra were not installed
    out = tmp_path / "r.csv"
    _one_line(*_run(["--cluster", "local:2", "--out", str(out)]), "pip install 'tpopt[distributed]'")
    assert not out.exists()


@pytest.mark.parametrize("value,needle", [
    ("local:0", "1 to 1024 workers"),
    ("local:two", "is not local:N"),
    ("scheduler:8786", "is not a scheduler address"),
    ("/nonexistent/scheduler.json", "scheduler file '/nonexistent/scheduler.json' not found"),
])
def test_bad_cluster_values(value, needle):
    _one_line(*_run(["--cluster", value, "--solver", "cpsat"]), needle)


def test_workers_and_cluster_together_are_refused():
    _one_line(*_run(["--cluster", "local:2", "--workers", "2"]), "--workers sets local worker processes")


def test_unreachable_scheduler_is_one_line(monkeypatch, tmp_path):
    from tpopt.optimizer.sweep import cluster as cl

    monkeypatch.setattr(cl, "CONNECT_TIMEOUT_S", 1)
    out = tmp_path / "r.csv"
    assert _run(["--solver", "cpsat", "--out", str(out), "--deadline", "20d,30d"])[0] == 0
    edited = out.read_text().replace(",optimal,", ",unknown,")  # an unproven row: solved again by the next run
    out.write_text(edited)
    _one_line(*_run(["--cluster", "tcp://127.0.0.1:9", "--solver", "cpsat", "--out", str(out),
                     "--deadline", "20d,30d"]), "cannot reach the Dask scheduler at tcp://127.0.0.1:9")
    assert out.read_text() == edited  # bad input: nothing overwritten
    assert not list(tmp_path.glob(".*lock"))  # the lock is released


def test_workers_need_no_file_of_the_driver(tmp_path, reference, cluster):
    """The payload carries the catalog data and the model, not the driver's paths: a scenario built from a
    config.json and a --catalog directory still sweeps after both are gone (workers elsewhere see neither)."""
    import json
    import re
    import shutil

    cfg = {"model_type": "qwen3", "num_hidden_layers": 36, "hidden_size": 4096, "num_attention_heads": 32,
           "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 12288, "vocab_size": 151936,
           "tie_word_embeddings": False}  # Qwen3-8B's published config.json fields
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    scenario = tmp_path / "s.toml"
    scenario.write_text(SWEEP_FILE.read_text().replace('name = "qwen3-8b"', 'config = "config.json"'))
    cat = tmp_path / "cat"
    cat.mkdir()
    builtin = (ROOT / "catalogs" / "accelerators.toml").read_text()
    card = re.search(r"^\[rtx4090\]\n.*?(?=^\[(?!rtx4090\.)|\Z)", builtin, re.S | re.M).group(0)
    (cat / "accelerators.toml").write_text(card.replace("[rtx4090", "[rtx4090-cheap")
                                           .replace("price_card_hour = 0.59", "price_card_hour = 0.30"))
    spec = sw.build_spec(scenario, {"hw": "rtx4090-cheap", "deadline": CPSAT["deadline"], "solver": "cpsat"},
                         catalog_dirs=[cat])
    (tmp_path / "config.json").unlink()
    shutil.rmtree(cat)
    res = sw.run_sweep(spec, cluster=cluster[0].scheduler_address)
    ref = [r for r in map(sw._parse_csv_line, _body(reference["cpsat"])) if r["accelerator"] == "rtx4090"]
    assert [(r["status"], r["cards"], r["finish_days"]) for r in res.rows] == \
        [(r["status"], r["cards"], r["finish_days"]) for r in ref]
    assert {r["price_card_hour"] for r in res.rows} == {0.30}
