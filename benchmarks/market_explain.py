"""`tpopt explain` on a market with no plan on any offer (docs/market.md, "Explain with no plan on any offer"):
CPU seconds of the command against a baseline installation, and whether the two print the same answer.

Cases (each ``--hw all``, infeasible on every offer of the built-in catalog):

- ``design``: the design case with 200B tokens (the input pipeline and the deadline conflict on every offer);
- ``avail``: tests/test_market_explain.py's Qwen3-32B case (10T tokens in 30 days: the fastest offer runs out of
  available cards);
- ``gpt3``: the widest GPT-3 (examples/gpt3-175b-widest.toml) at a 2-day deadline.

Each run is a subprocess of the command line (start-up included) with ``--json --time-limit 600``; its CPU time
is the children's user + system time (``resource.getrusage``), best of ``--repeat``, every installation reading its
bytecode from one scratch cache warmed first (:data:`WARM`); "list" is the market solve's
own wall time (the JSON's ``solver.wall_s``: the list of offers alone). With ``--baseline`` (another
installation, e.g. another checkout's ``.venv/bin/tpopt``) each case runs there too and the line gives the ratio and
whether the answers are the same bytes (wall-clock fields aside).

    python benchmarks/market_explain.py [--baseline PATH] [--tpopt PATH] [--repeat 1] [--only gpt3]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "examples" / "design-case.toml"
TIMINGS = re.compile(r'^\s*"(seconds|wall_s)": .*$\n', re.MULTILINE)  # wall clock: differs run to run


def avail_scenario(folder: Path) -> Path:
    """tests/test_market_explain.py's AVAIL scenario (Qwen3-32B, an input pipeline that never binds, a batch of
    16,384 sequences, max_cards 100,000)."""
    text = (DESIGN.read_text().replace('name = "qwen3-8b"', 'name = "qwen3-32b"')
            .replace("sequences_per_worker_s = 2", "sequences_per_worker_s = 1000")
            .replace("max_cards = 1024", "max_cards = 100000")
            .replace("global_batch = 384 ", "global_batch = 16384 "))
    path = folder / "avail.toml"
    path.write_text(text)
    return path


def cases(folder: Path) -> dict[str, list[str]]:
    return {
        "design": ["explain", "--hw", "all", "--tokens", "200B"],
        "avail": ["explain", "--scenario", str(avail_scenario(folder)), "--hw", "all", "--tokens", "10000B",
                  "--deadline", "30d"],
        "gpt3": ["explain", "--scenario", str(ROOT / "examples" / "gpt3-175b-widest.toml"), "--hw", "all",
                 "--deadline", "2d"],
    }


WARM = """
import importlib, pkgutil, tpopt
for m in pkgutil.walk_packages(tpopt.__path__, "tpopt."):
    try:
        importlib.import_module(m.name)
    except Exception:
        pass
"""
"""Imports every module of an installation once, so that each one's bytecode is in the shared cache before a
timed run (an installation run with PYTHONDONTWRITEBYTECODE=1 would otherwise compile its sources on every
start: about 1 CPU s that the other, with its __pycache__, does not pay)."""


def child_env(cache: Path) -> dict[str, str]:
    """The children's environment: bytecode written to and read from ``cache`` alone, for every installation."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return dict(env, PYTHONPYCACHEPREFIX=str(cache))


def warm(tpopt: str, env: dict[str, str]) -> None:
    subprocess.run([str(Path(tpopt).with_name("python")), "-c", WARM], env=env, cwd=ROOT, capture_output=True,
                   check=False)


def run(tpopt: str, argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    """(CPU s of the child, its JSON answer)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([tpopt, *argv, "--time-limit", "600", "--json"], capture_output=True, text=True,
                         check=False, cwd=ROOT, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), out.stdout


def measure(tpopt: str, argv: list[str], repeat: int, env: dict[str, str]) -> tuple[float, str, float | None]:
    """(best CPU s, the answer, the market solve's wall s)."""
    best, text = float("inf"), ""
    for _ in range(repeat):
        cpu, text = run(tpopt, argv, env)
        best = min(best, cpu)
    try:
        wall = json.loads(text)["solver"]["wall_s"]
    except (json.JSONDecodeError, KeyError):
        wall = None
    return best, text, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tpopt", default=str(Path(sys.executable).with_name("tpopt")))
    ap.add_argument("--baseline", default=None, help="another installation's tpopt (the 'before')")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--only", choices=("design", "avail", "gpt3"), action="append")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = child_env(Path(tmp) / "bytecode")
        for tpopt in (args.tpopt, args.baseline):
            if tpopt:
                warm(tpopt, env)
        for name, argv in cases(Path(tmp)).items():
            if args.only and name not in args.only:
                continue
            cpu, text, wall = measure(args.tpopt, argv, args.repeat, env)
            line = f"{name:<7} {cpu:7.2f} CPU s (list {wall if wall is not None else '?'} s wall)"
            if args.baseline:
                was, before, was_wall = measure(args.baseline, argv, args.repeat, env)
                same = TIMINGS.sub("", text) == TIMINGS.sub("", before)
                line += (f"; before {was:7.2f} CPU s (list {was_wall if was_wall is not None else '?'} s wall): "
                         f"{was / cpu:.2f}x faster, answer {'the same' if same else 'DIFFERS'}")
            load = Path("/proc/loadavg").read_text().split()[0] if os.path.exists("/proc/loadavg") else "?"
            print(f"{line} (load {load})", flush=True)


if __name__ == "__main__":
    main()
