"""Sweeps within the memory plan (issue 42 item 2): each accelerator's space is checked against the budget
``tpopt solve`` keeps before any table is built; a space whose shared tables do not fit is swept point by point
one layout group at a time (as ``solve`` does), one that fits neither way is refused in one line; local workers
running at once share the budget. And the one-line note on a plain ``tcp://`` cluster address (item 5)."""

import csv
import json
import subprocess
import sys
import textwrap

import pytest

from tpopt.optimizer import memory_plan as M
from tpopt.optimizer import sweep as sw
from tpopt.optimizer.space import Space
from tpopt.optimizer.sweep.executor import plain_tcp_note
from tpopt.optimizer.sweep.tasks import on_demand_accelerators, plan_tasks

GIB = 2**30
ACCS = ["h100-sxm", "b200"]
PEAK = textwrap.dedent("""\
    import resource, subprocess, sys
    r = subprocess.run(sys.argv[1:], capture_output=True, text=True)
    sys.stdout.write(r.stdout)
    sys.stderr.write(r.stderr)
    sys.stderr.write("PEAK %d\\n" % (resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024))
    sys.exit(r.returncode)
    """)


def wide_scenario(path, budget):
    """Rung 12 of benchmarks/solve_scaling.py (Llama-3-70B, 2T tokens) on two accelerators: 4.78e10 plans each,
    about 1.04 GiB with every table at once and 0.53 GiB one layout group at a time (memory_plan's estimates)."""
    intervals = ", ".join(['"auto"'] + [f'"{300 * i}s"' for i in range(1, 288)])
    accs = ", ".join(f'"{a}"' for a in ACCS)
    path.write_text(textwrap.dedent(f"""\
        [model]
        name = "llama3-70b"
        [task]
        tokens = "2T"
        seq_len = 8192
        global_batch = 1536
        [schedule]
        deadline = "60d"
        [hardware]
        accelerator = [{accs}]
        efficiency = 0.4
        [checkpoint]
        storage = "superpod-good"
        [search]
        accelerator = [{accs}]
        tp = [1, 2, 4, 8]
        pp = [1, 2, 4, 5, 8, 10, 16, 20]
        dp = [8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1536]
        micro_batch = [1, 2, 3, 4, 6, 8, 12, 16]
        zero_stage = [0, 1, 2, 3]
        recompute = ["none", "norm", "mlp", "attn", "norm+mlp", "norm+attn", "mlp+attn", "norm+mlp+attn", "full"]
        schedule = ["fill-drain", "1f1b", "interleaved", "zb-h1", "zb-h2", "dualpipe", "dualpipe-deepseek"]
        offload = ["none", "cpu"]
        save_interval = [{intervals}]
        save_mode = ["sync", "async"]
        nics_per_host = [1, 2, 3, 4, 5, 6, 7, 8]
        cp = [1, 2, 4]
        sequence_parallel = [false, true]
        max_cards = 16384
        memory_budget = "{budget}"
        """))
    return path


def test_the_estimates_put_the_shared_tables_over_1_gib_and_one_group_under(tmp_path):
    spec = sw.build_spec(wide_scenario(tmp_path / "w.toml", "1GiB"), {"deadline": "60d"})
    for acc in ACCS:
        space = Space.from_scenario(spec.base, restrict={"acc": [acc]})
        assert space.size() > 4e10
        assert M.memory_plan(space).peak_bytes > GIB > M.on_demand_bytes(space)
    tasks = plan_tasks(spec, spec.points())
    assert [t.kind for t in tasks] != ["layouts"] * len(tasks)  # not the shared tables
    assert all(t.kind not in ("table", "layouts") for t in tasks)
    assert on_demand_accelerators(tasks, spec) == frozenset(ACCS)
    # without the budget (half this machine), the shared tables fit: the layouts path, as before
    roomy = sw.build_spec(wide_scenario(tmp_path / "r.toml", "64GiB"), {"deadline": "60d"})
    assert {t.kind for t in plan_tasks(roomy, roomy.points())} == {"layouts"}


def test_a_sweep_point_of_a_1e11_plan_space_stays_within_1_gib_and_answers_as_solve(tmp_path):
    p = wide_scenario(tmp_path / "w.toml", "1GiB")
    out = tmp_path / "r.csv"
    r = subprocess.run([sys.executable, "-c", PEAK, sys.executable, "-m", "tpopt.cli.main", "sweep", "--scenario",
                        str(p), "--deadline", "60d", "--workers", "1", "-q", "--out", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    peak = int(r.stderr.splitlines()[-1].split()[1])
    assert peak < GIB, peak  # every process of the sweep (the driver and its worker)
    rows = {r["accelerator"]: r for r in csv.DictReader(out.read_text().splitlines())}
    assert sorted(rows) == sorted(ACCS)
    for acc in ACCS:
        row = rows[acc]
        assert row["status"] == "optimal", row
        s = subprocess.run([sys.executable, "-m", "tpopt.cli.main", "solve", "--scenario", str(p), "--hw", acc,
                            "--no-analysis", "--json"], capture_output=True, text=True, timeout=600)

        rep = json.loads(s.stdout)
        assert rep["status"] == "optimal"
        assert float(row["cost"]) == pytest.approx(rep["metrics"]["cost"], rel=1e-9)
        assert int(row["cards"]) == rep["plan"]["cards"]


@pytest.mark.parametrize("budget,workers,needle", [
    ("300MiB", "1", "one layout group at a time), over the memory budget of 300.0 MiB"),
    ("1GiB", "4", "shared by 2 sweep workers"),  # two groups at once: 512 MiB each, below one group's 0.53 GiB
], ids=["over-the-budget", "shared-by-the-workers"])
def test_a_sweep_over_the_memory_plan_is_refused_in_one_line(tmp_path, budget, workers, needle):
    p = wide_scenario(tmp_path / "w.toml", budget)
    r = subprocess.run([sys.executable, "-m", "tpopt.cli.main", "sweep", "--scenario", str(p), "--deadline", "60d",
                        "--workers", workers, "-q", "--out", str(tmp_path / "r.csv")],
                       capture_output=True, text=True, timeout=300)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and "Traceback" not in r.stderr and "MemoryError" not in r.stderr, r.stderr
    assert len(lines) == 1 and lines[0].startswith("tpopt: error:") and needle in lines[0], lines
    assert sorted(x.name for x in tmp_path.iterdir()) == ["w.toml"]  # no output, lock or journal


@pytest.mark.parametrize("address,warned", [
    ("tcp://scheduler:8786", True), ("tcp://10.0.0.5:8786", True), ("tcp://[2001:db8::1]:8786", True),
    ("tcp://127.0.0.1:8786", False), ("tcp://localhost:8786", False), ("tcp://[::1]:8786", False),
    ("tls://scheduler:8786", False),
])
def test_a_plain_tcp_cluster_off_loopback_gets_one_line(address, warned):
    note = plain_tcp_note(address)
    assert (note is not None) == warned
    if warned:
        assert "\n" not in note and "unauthenticated, unencrypted and pickle-based" in note and "tls://" in note
