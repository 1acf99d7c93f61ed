"""What a benchmark says about the machine it ran on, and a command run side by side with an earlier revision.

The machine these figures come from is shared: wall seconds move with the other processes, CPU seconds (user +
system of the process and its threads) far less. Every benchmark that imports this module prints
:func:`load_line` (``/proc/loadavg``: the 1, 5 and 15 minute run-queue averages, and the number of cores) beside
its figures, and measures each command in a fresh process with :func:`run_fresh` (CPU seconds, wall seconds,
peak resident memory). ``--against REV`` runs the same command on an earlier revision: a temporary detached
git worktree of REV (``git worktree add --detach``, removed afterwards) imported through a folder whose only
entry is a link named ``tpopt`` to it, first on ``PYTHONPATH``, with this checkout's virtual environment (the
same interpreter and libraries; a revision that needs other libraries needs its own venv). The runs alternate
between the revisions so that a change of load hits both alike; the best of ``--repeat`` runs is quoted.
Compile this checkout's bytecode first (``.venv/bin/python -m compileall -q .``; the worktree of REV is compiled
here) when PYTHONDONTWRITEBYTECODE is set.

    .venv/bin/python benchmarks/machine.py [--against REV] [--repeat 3] -- solve --scenario examples/design-case.toml

prints one line per revision: best CPU s, best wall s, peak RSS, exit code, and the load before and after.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_line() -> str:
    """``load 1.23 0.98 0.75 (1/5/15 min) on N cores``, from /proc/loadavg (``load unknown`` elsewhere)."""
    try:
        one, five, fifteen = Path("/proc/loadavg").read_text(encoding="utf-8").split()[:3]
    except OSError:
        return "load unknown"
    return f"load {one} {five} {fifteen} (1/5/15 min) on {os.cpu_count()} cores"


@dataclass(frozen=True)
class Run:
    """One fresh process: CPU s (user + system), wall s, peak resident MB, exit code."""

    cpu: float
    wall: float
    peak_mb: float
    code: int


_CHILD = ("import resource, sys, time\n"
          "from tpopt.cli.main import main\n"
          "sys.argv = ['tpopt'] + sys.argv[1:]\n"
          "code = 0\n"
          "try:\n"
          "    main()\n"
          "except SystemExit as e:\n"
          "    code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)\n"
          "r = resource.getrusage(resource.RUSAGE_SELF)\n"
          "sys.stderr.write('\\nMACHINE %r %r %r\\n' % (r.ru_utime + r.ru_stime, r.ru_maxrss / 1024, code))\n"
          "sys.exit(code)\n")


def run_fresh(args: list[str], pythonpath: str | None = None, cwd: Path = ROOT) -> Run:
    """``tpopt ARGS`` in a fresh interpreter (this venv's; ``pythonpath`` first on its path): its CPU seconds
    and peak RSS as the child reports them, the wall seconds as seen from here."""
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    else:
        env.pop("PYTHONPATH", None)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-P", "-c", _CHILD, *args], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, cwd=cwd, env=env, check=False)
    wall = time.perf_counter() - t0
    tail = [ln for ln in proc.stderr.splitlines() if ln.startswith("MACHINE ")]
    if not tail:
        raise SystemExit(f"tpopt {' '.join(args)}: no figures from the child (exit {proc.returncode}):\n"
                         f"{proc.stderr[-2000:]}")
    cpu, peak, code = (float(x) for x in tail[-1].split()[1:])
    return Run(cpu, wall, peak * 1.048576, int(code))


def cpu_s() -> float:
    """CPU seconds of this process so far, user + system, all threads (for in-process benchmarks)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


@contextlib.contextmanager
def revision(rev: str) -> Iterator[str]:
    """A PYTHONPATH entry that imports ``tpopt`` from revision ``rev`` (a temporary detached worktree)."""
    tmp = Path(tempfile.mkdtemp(prefix="tpopt-against-"))
    tree = tmp / "tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(tree), rev], check=True)
    # its bytecode compiled once, as this checkout's is (with PYTHONDONTWRITEBYTECODE set, each run would
    # otherwise compile every module again: about a second of start-up)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree)], check=False, stdout=subprocess.DEVNULL)
    try:
        path = tmp / "path"
        path.mkdir()
        (path / "tpopt").symlink_to(tree)
        yield str(path)
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
        shutil.rmtree(tmp, ignore_errors=True)


def best_of(args: list[str], repeat: int, paths: dict[str, str | None], cwd: Path = ROOT) -> dict[str, list[Run]]:
    """``repeat`` runs of ``tpopt ARGS`` per revision label (its PYTHONPATH entry), alternating between them."""
    runs: dict[str, list[Run]] = {label: [] for label in paths}
    for _ in range(repeat):
        for label, path in paths.items():
            runs[label].append(run_fresh(args, path, cwd))
    return runs


def row(label: str, runs: list[Run]) -> str:
    """One line: the best CPU and wall seconds of the runs, the largest peak RSS, the exit codes."""
    codes = sorted({r.code for r in runs})
    return (f"{label:<22} CPU {min(r.cpu for r in runs):7.2f} s  wall {min(r.wall for r in runs):7.2f} s  "
            f"peak {max(r.peak_mb for r in runs):6.0f} MB  exit {','.join(map(str, codes))}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", default=None, help="an earlier revision to run side by side (git rev)")
    ap.add_argument("--repeat", type=int, default=3, help="fresh processes per revision (default 3, best quoted)")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="-- then the tpopt arguments")
    ns = ap.parse_args(argv)
    args = ns.args[1:] if ns.args[:1] == ["--"] else ns.args
    if not args:
        ap.error("give the tpopt arguments after --")
    print(load_line(), "(before)")
    with contextlib.ExitStack() as stack:
        paths: dict[str, str | None] = {"this checkout": None}
        if ns.against:
            paths[ns.against] = stack.enter_context(revision(ns.against))
        for label, runs in best_of(args, ns.repeat, paths).items():
            print(row(label, runs))
    print(load_line(), "(after)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
