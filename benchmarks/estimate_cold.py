"""Cold-process time of ``tpopt estimate`` (issue 25: "answers in under a second").

    .venv/bin/python benchmarks/estimate_cold.py [--runs 5] [MODEL --hw H --cards N ...]

Starts a fresh interpreter per run (``python -m tpopt estimate ...``, nothing cached between runs but the
operating system's file cache) and prints, per run, the wall time and the CPU time of the child (user +
system), then the medians. On a shared machine the wall time includes waiting for a core; the CPU time is
what the command itself costs.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time

DEFAULT = ["llama3-70b", "--hw", "h100-sxm", "--cards", "64"]


def child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    args, rest = ap.parse_known_args()
    cmd = [sys.executable, "-m", "tpopt", "estimate", *(rest or DEFAULT)]
    walls, cpus = [], []
    for i in range(args.runs):
        c0, t0 = child_cpu(), time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True)
        wall, cpu = time.perf_counter() - t0, child_cpu() - c0
        if p.returncode != 0:
            sys.exit(f"run {i + 1}: exit {p.returncode}: {p.stderr.strip()}")
        walls.append(wall)
        cpus.append(cpu)
        print(f"run {i + 1}: {wall:.3f} s wall, {cpu:.3f} s CPU")
    print(f"tpopt estimate {' '.join(rest or DEFAULT)}: median {statistics.median(walls):.3f} s wall, "
          f"{statistics.median(cpus):.3f} s CPU over {args.runs} cold runs")


if __name__ == "__main__":
    main()
