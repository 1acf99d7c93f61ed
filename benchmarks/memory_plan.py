"""The memory plan against the memory a solve really takes (peak resident set), and the refusal of a
1e15-plan ``[search]``.

For each example: the estimate of :func:`tpopt.optimizer.memory_plan.memory_plan` (tables, peak) and, in a
fresh interpreter, the peak RSS (``resource.getrusage``) of ``tpopt solve --no-analysis``. Then the
1.41e15-plan GPT-3 space of tests/test_memory_budget.py: its one-line refusal, its wall time and peak RSS. Then
a sweep within the memory plan (issue 42): one point (60 d) of the 4.8e10-plan-per-card Llama-3-70B space of
tests/test_sweep_memory.py on two cards, under ``memory_budget = "1GiB"`` (swept one layout group at a time)
and under 64 GiB (the shared per-group tables), the peak RSS of every process of the sweep.

    .venv/bin/python benchmarks/memory_plan.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tpopt.catalogs.scenario import load_scenario
from tpopt.optimizer.memory_plan import memory_plan
from tpopt.optimizer.space import Space

ROOT = Path(__file__).resolve().parents[1]

MIB = 2**20
EXAMPLES = ("design-case.toml", "gpt3-175b-widest.toml", "llama3-8b-long-context.toml", "qwen3-30b-a3b.toml")
PEAK = ("import resource, sys\nfrom tpopt.cli.main import main\nsys.argv = ['tpopt'] + sys.argv[1:]\n"
        "try:\n    main()\nfinally:\n"
        "    sys.stderr.write('PEAK %d\\n' % (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024))\n")


def measured(args: list[str]) -> tuple[int, float, float, str]:
    """(exit code, wall s, peak RSS bytes, first stderr line) of ``tpopt ARGS`` in a fresh interpreter."""
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", PEAK, *args], capture_output=True, text=True, cwd=ROOT.parent)
    wall = time.perf_counter() - t0
    lines = r.stderr.splitlines()
    peak = float(lines[-1].split()[1]) if lines and lines[-1].startswith("PEAK") else float("nan")
    first = next((ln for ln in lines if not ln.startswith("PEAK")), "")
    return r.returncode, wall, peak, first


def main() -> None:
    print(f"{'space':32} {'plans':>9} {'tables MiB':>10} {'estimate MiB':>12} {'peak RSS MiB':>12} {'exit':>4}")
    for name in EXAMPLES:
        path = ROOT / "examples" / name
        space = Space.from_scenario(load_scenario(path))
        mp = memory_plan(space)
        code, _, peak, _ = measured(["solve", "--scenario", str(path), "--no-analysis", "--time-limit", "60"])
        print(f"{name:32} {mp.plans:9.3g} {mp.tables_bytes / MIB:10.1f} {mp.peak_bytes / MIB:12.1f} "
              f"{peak / MIB:12.1f} {code:4d}")
    sys.path.insert(0, str(ROOT / "tests"))
    from test_memory_budget import huge_scenario  # the test's 1.41e15-plan space

    with tempfile.TemporaryDirectory() as d:
        p = huge_scenario(Path(d) / "huge.toml")
        mp = memory_plan(Space.from_scenario(load_scenario(p)))
        code, wall, peak, line = measured(["solve", "--scenario", str(p)])
    sweep_figures()
    print(f"\n1e15 space: {mp.plans:.3g} plans, estimate {mp.peak_bytes / 2**40:.1f} TiB; exit {code} in {wall:.2f} s, "
          f"peak RSS {peak / MIB:.0f} MiB:\n  {line}")


CHILD_PEAK = ("import resource, subprocess, sys\n"
              "r = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
              "sys.stderr.write(r.stderr.splitlines()[-1] + '\\n' if r.returncode and r.stderr else '')\n"
              "sys.stderr.write('PEAK %d\\n' % (resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024))\n"
              "sys.exit(r.returncode)\n")


def sweep_figures() -> None:
    """One sweep point of a 4.8e10-plan-per-card space under a 1 GiB budget and a roomy one: peak RSS."""
    sys.path.insert(0, str(ROOT / "tests"))
    from test_sweep_memory import wide_scenario

    print(f"\n{'sweep, one point, 2 cards':32} {'budget':>9} {'peak RSS MiB':>12} {'wall s':>7} {'exit':>4}")
    for budget in ("1GiB", "64GiB"):
        with tempfile.TemporaryDirectory() as d:
            p = wide_scenario(Path(d) / "wide.toml", budget)
            t0 = time.perf_counter()
            r = subprocess.run([sys.executable, "-c", CHILD_PEAK, sys.executable, "-m", "tpopt.cli.main", "sweep",
                                "--scenario", str(p), "--deadline", "60d", "--workers", "1", "-q",
                                "--out", str(Path(d) / "r.csv")], capture_output=True, text=True, cwd=ROOT.parent)
            wall = time.perf_counter() - t0
            peak = float(r.stderr.splitlines()[-1].split()[1])
        print(f"{'llama3-70b rung 12':32} {budget:>9} {peak / MIB:12.1f} {wall:7.1f} {r.returncode:4d}")


if __name__ == "__main__":
    main()
