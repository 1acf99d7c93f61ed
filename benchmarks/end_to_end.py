"""End-to-end cost of two commands of the performance issue, each in a fresh process: CPU seconds (user +
system, the figure to quote on a shared machine), wall seconds and peak resident memory.

- ``tpopt rl`` on the RL example widened to 256 cards and learner PP 1/2/4 (8,192 RL decisions; the speed
  row of ``benchmarks/rl_solve.py``), the whole report: solve, binding families, alternatives, break-even.
- ``tpopt solve`` on the widest GPT-3 space (``examples/gpt3-175b-widest.toml``, 1.15 billion plans) under the
  per-operation step-time model (the example without ``hardware.efficiency``), analysis included.

Targets (issue 27): the RL command <= 1 s; the GPT-3 per-operation command <= 2 s and <= 500 MB.
Compile the bytecode first (``.venv/bin/python -m compileall -q .``): with PYTHONDONTWRITEBYTECODE set and no
cache, start-up alone costs about a second. Not a test: figures depend on the machine and its load. Run:

    .venv/bin/python benchmarks/end_to_end.py [--repeat 2]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RL_EXAMPLE = ROOT / "examples" / "rl-grpo-qwen3-8b.toml"
GPT3_WIDEST = ROOT / "examples" / "gpt3-175b-widest.toml"


def _edited(path: Path, edits: list[tuple[str, str]], out: Path) -> Path:
    """``path`` with whole lines replaced (each old line must occur exactly once)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    for old, new in edits:
        hits = [i for i, line in enumerate(lines) if line.split("#")[0].strip() == old]
        if len(hits) != 1:
            raise SystemExit(f"{path.name}: expected one line {old!r}, found {len(hits)}")
        if new:
            lines[hits[0]] = new
        else:
            del lines[hits[0]]
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def scenarios(folder: Path) -> list[tuple[str, list[str], float, float | None]]:
    """(label, tpopt arguments, CPU-second target, MB target) of each measured command."""
    rl = _edited(RL_EXAMPLE, [("max_cards = 64", "max_cards = 256"), ("pp = [1, 2]", "pp = [1, 2, 4]")],
                 folder / "rl-256.toml")
    gpt3 = _edited(GPT3_WIDEST, [("efficiency = 0.40", "")], folder / "gpt3-175b-widest-per-op.toml")
    return [("tpopt rl, 256 cards (8,192 RL decisions)", ["rl", "--scenario", str(rl)], 1.0, None),
            ("tpopt solve, widest GPT-3, per-operation model", ["solve", "--scenario", str(gpt3)], 2.0, 500.0)]


def measure(args: list[str]) -> tuple[float, float, float, int]:
    """(CPU s, wall s, peak RSS MB, exit code) of ``python -m tpopt.cli.main ARGS`` in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "tpopt.cli.main", *args], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, cwd=ROOT, env=dict(os.environ), check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    # ru_maxrss of the children is the largest child so far (KiB on Linux): one command per call keeps it exact
    return cpu, wall, after.ru_maxrss / 1024 * 1.048576, proc.returncode


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=1, help="fresh processes per command (default 1)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from machine import load_line  # this directory (run as a script)

    print(load_line(), "(before; CPU seconds are the figure to quote, wall seconds move with the load)")
    print(f"{'command':<50}{'CPU':>8}{'wall':>8}{'peak RSS':>10}  target")
    with tempfile.TemporaryDirectory() as tmp:
        for label, cmd, cpu_target, mb_target in scenarios(Path(tmp)):
            for _ in range(args.repeat):
                # a fresh interpreter per run: the RSS of RUSAGE_CHILDREN is a maximum over children, so
                # each run is measured from its own child process that reports on itself
                cpu, wall, mb, rc = fresh(cmd)
                target = f"<= {cpu_target:g} s" + (f", <= {mb_target:g} MB" if mb_target else "")
                status = "" if rc == 0 else f"  (exit {rc})"
                print(f"{label:<50}{cpu:>7.2f}s{wall:>7.2f}s{mb:>7.0f} MB  {target}{status}")
    print(load_line(), "(after; benchmarks/machine.py --against REV runs a command beside an earlier revision)")
    return 0


def fresh(cmd: list[str]) -> tuple[float, float, float, int]:
    """:func:`measure` run inside a child of its own, so that the peak RSS is this command's alone."""
    code = ("import sys, json; sys.path.insert(0, sys.argv[1]); import end_to_end as E; "
            "print(json.dumps(E.measure(json.loads(sys.argv[2]))))")
    out = subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent), json.dumps(cmd)],
                         capture_output=True, text=True, cwd=ROOT, check=True)
    cpu, wall, mb, rc = json.loads(out.stdout)
    return float(cpu), float(wall), float(mb), int(rc)


if __name__ == "__main__":
    sys.exit(main())
