"""Mixed accelerator pools at scale (issue 40, item 1): CPU seconds of ``tpopt solve`` on two pool questions.

1. ``examples/pools-h100-a100.toml``: 512 owned H100 + up to 1,024 A100 rented at 1.80 USD/h, Llama-3-70B,
   1T tokens, 50 days (two pools; forms (a) and (b));
2. the same with a third pool, up to 1,024 B200 rented at the catalog's price (three pools).

Each run is a subprocess of the command line (start-up included); its CPU time is the children's user + system
time (``resource.getrusage``), best of ``--repeat``, printed with the load average and the plan's first line.
``--tpopt`` runs another installation (the baseline: ``/work/main/.venv/bin/tpopt``, which plans two pools at
most and refuses the third in one line).

    python benchmarks/pools_scale.py [--tpopt PATH] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "pools-h100-a100.toml"
THIRD = '\n[[hardware.pools]]\naccelerator = "b200"\nmax_cards = 1024\n'


def three_pools(folder: Path) -> Path:
    """The example with a B200 pool after the A100 one (the scenario's tables are unchanged otherwise)."""
    text = EXAMPLE.read_text()
    marker = "card_hour = 1.80\n"
    path = folder / "pools-h100-a100-b200.toml"
    path.write_text(text.replace(marker, marker + THIRD, 1))
    return path


def cpu_run(cmd: list[str]) -> tuple[float, str, int]:
    """CPU seconds of one subprocess, its output's line naming the best plan, its exit code."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = (out.stdout or out.stderr).splitlines()
    best = next((line for line in lines if line.startswith(("best:", "decision:"))), lines[0] if lines else "")
    return cpu, best, out.returncode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tpopt", default=str(Path(sys.executable).with_name("tpopt")))
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in (("2 pools", EXAMPLE), ("3 pools", three_pools(Path(tmp)))):
            runs = [cpu_run([args.tpopt, "solve", "--scenario", str(path)]) for _ in range(args.repeat)]
            cpu, best, rc = min(runs)
            print(f"{name}: {cpu:.2f} s CPU (best of {args.repeat}, exit {rc}, load {os.getloadavg()[0]:.1f})  "
                  f"{best[:150]}")


if __name__ == "__main__":
    main()
