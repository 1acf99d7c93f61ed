"""Bounded memory (issue 24 item 3): a space's memory plan is estimated from its domains before anything is
allocated, and a space over the memory budget is refused in one line naming the axes to narrow (exit 2),
never a MemoryError."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import tpopt
from tpopt.catalogs.scenario import load_scenario
from tpopt.errors import InputError
from tpopt.optimizer import memory_plan as M
from tpopt.optimizer.space import Space

GIB = 2**30
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def huge_scenario(path):
    """A GPT-3 [search] of more than 1e15 plans: 4 accelerators, TP and CP 1-128, every PP dividing 96 layers,
    240 divisors of a 720,720-sequence batch, 256 micro-batches, 1,000 save intervals (the issue's example
    had 4.35e15 plans and tried to allocate 16.6 GiB)."""
    mbs = ", ".join(str(i) for i in range(1, 257))
    taus = ", ".join(f'"{60 * i}s"' for i in range(1, 1001))
    path.write_text(textwrap.dedent(f"""\
        [model]
        name = "gpt3-175b"
        [task]
        tokens = "300B"
        seq_len = 2048
        global_batch = 720720
        [schedule]
        deadline = "40d"
        [hardware]
        accelerator = ["a100-80gb-sxm", "h100-sxm", "h200", "b200"]
        efficiency = 0.40
        [search]
        max_cards = 100000
        zero_stage = [0, 1, 2, 3]
        tp = [1, 2, 4, 8, 16, 32, 64, 128]
        cp = [1, 2, 4, 8, 16, 32, 64, 128]
        pp = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 96]
        micro_batch = [{mbs}]
        recompute = ["none", "full", "norm", "mlp", "attn", "norm+mlp", "norm+attn", "mlp+attn", "norm+mlp+attn"]
        offload = ["none", "cpu"]
        schedule = ["fill-drain", "1f1b", "interleaved", "zb-h1", "zb-h2", "dualpipe", "dualpipe-deepseek"]
        nics_per_host = [1, 2, 3, 4, 5, 6, 7, 8]
        save_interval = [{taus}]
        save_mode = ["sync", "async"]
        """))
    return path


# the CLI run in a fresh interpreter that reports its own peak resident set (bytes): the high-water mark of its
# own address space (Linux /proc/self/status VmHWM, KiB), which starts anew at exec. getrusage's ru_maxrss also
# keeps the forked parent's resident set from before the exec, so under a long pytest run it measured pytest.
PEAK = textwrap.dedent("""\
    import resource, sys
    from pathlib import Path
    from tpopt.cli.main import main
    sys.argv = ["tpopt"] + sys.argv[1:]
    try:
        main()
    finally:
        status = Path("/proc/self/status")
        hwm = [ln.split()[1] for ln in status.read_text().splitlines() if ln.startswith("VmHWM:")] \\
            if status.exists() else []
        kib = int(hwm[0]) if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        sys.stderr.write("PEAK %d\\n" % (kib * 1024))
    """)


def test_a_1e15_plan_search_is_refused_in_one_line_within_2_gib(tmp_path):
    p = huge_scenario(tmp_path / "huge.toml")
    assert Space.from_scenario(load_scenario(p)).size() > 1e15
    # every table at once would need 6.5 TiB, one layout group at a time 3.2 GiB (issue 27): over 2 GiB both
    r = subprocess.run([sys.executable, "-c", PEAK, "solve", "--scenario", str(p), "--memory-budget", "2GiB"],
                       capture_output=True, text=True, timeout=120)
    lines = r.stderr.splitlines()
    peak = int(lines[-1].split()[1])
    assert r.returncode == 2 and r.stdout == "", r
    assert len(lines) == 2 and lines[0].startswith("tpopt: error: the design space (1.41e+15 plans)"), lines
    assert "Traceback" not in r.stderr and "MemoryError" not in r.stderr
    # the axes to narrow, widest first, and the budget with its source
    assert "narrow [search] micro_batch (256 values), dp (240 divisors of the batch)" in lines[0], lines[0]
    assert "memory budget of 2.0 GiB ([search] memory_budget / --memory-budget)" in lines[0], lines[0]
    assert "; 3.2 GiB one layout group at a time)" in lines[0], lines[0]
    assert peak < 2 * GIB, peak
    assert sorted(tmp_path.iterdir()) == [p]  # nothing written


def test_the_default_budget_is_half_the_machine(tmp_path):
    b = M.budget_of(None)
    assert b.bytes == pytest.approx(0.5 * M.machine_memory())
    assert "50% of this machine's" in b.source
    import os
    assert M.machine_memory() <= os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def test_the_estimate_is_the_tables_a_solve_allocates():
    """The memory plan's table bytes equal what building the tables allocates (GPT-3's widest example,
    pipeline terms as closed-form bounds; the design case, exact tables)."""
    for name in ("gpt3-175b-widest.toml", "design-case.toml"):
        space = Space.from_scenario(load_scenario(EXAMPLES / name))
        mp = M.memory_plan(space)
        space.build_tables()
        built = sum(t.values.nbytes for t in dict.values(space.tables))
        assert mp.tables_bytes == built, name
        assert mp.largest_rows == max(t.values.size for t in dict.values(space.tables))
        assert mp.peak_bytes > built


def test_a_stated_budget_refuses_the_design_case(tmp_path, design_path, capsys):
    text = design_path.read_text().replace("[search]", '[search]\nmemory_budget = "1MiB"', 1)
    p = tmp_path / "s.toml"
    p.write_text(text)
    with pytest.raises(InputError, match=r"the memory budget of 1.0 MiB \(\[search\] memory_budget / "
                                         r"--memory-budget\) is below the 256.0 MiB"):
        tpopt.solve(str(p))
    # GPT-3's widest example: an estimated 538 MiB with every table, 384 MiB one layout group at a time (solved
    # so under 450 MiB: tests/test_on_demand.py), refused under 300 MiB before any table is built (the temporary
    # buffers' table gained the schedule and data parallelism: torch pipelining's interleaved gradient release)
    with pytest.raises(InputError, match=r"\(1.15e\+09 plans\) would need about 538.1 MiB .* 383.8 MiB one layout "
                                         r"group at a time\), over the memory budget of 300.0 MiB .*: narrow "
                                         r"\[search\] dp \(20 divisors of the batch\), pp \(12 values\)"):
        tpopt.solve(str(EXAMPLES / "gpt3-175b-widest.toml"), memory_budget="300MiB")
    # the command-line flag overrides the scenario key: the design case solves under 4 GiB
    from click.testing import CliRunner

    from tpopt.cli.main import cli
    r = CliRunner().invoke(cli, ["solve", "--scenario", str(p), "--memory-budget", "4GiB", "--json",
                                 "--no-analysis"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["status"] == "optimal"


def test_axes_to_narrow_reach_the_factor():
    space = Space.from_scenario(load_scenario(EXAMPLES / "gpt3-175b-widest.toml"))
    mp = M.memory_plan(space)
    axes = M.axes_to_narrow(space, mp, 1e6)
    sizes = [int(a.split("(")[1].split()[0]) for a in axes]
    assert sizes == sorted(sizes, reverse=True) and np.prod(sizes) >= 1e6 or len(axes) == len(
        [v for v in mp.largest_vars if len(space.domains[v]) > 1])
