"""The memory plan against the memory a solve really takes (peak resident set), and the refusal of a
1e15-plan ``[search]``.

For each example: the estimate of :func:`tpopt.optimizer.memory_plan.memory_plan` (tables, peak) and, in a
fresh interpreter, the peak RSS (``resource.getrusage``) of ``tpopt solve --no-analysis``. Then the
1.41e15-plan GPT-3 space of tests/test_memory_budget.py: its one-line refusal, its wall time and peak RSS.

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
    print(f"\n1e15 space: {mp.plans:.3g} plans, estimate {mp.peak_bytes / 2**40:.1f} TiB; exit {code} in {wall:.2f} s, "
          f"peak RSS {peak / MIB:.0f} MiB:\n  {line}")


if __name__ == "__main__":
    main()
