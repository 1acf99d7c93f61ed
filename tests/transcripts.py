"""Golden transcripts of the shipped examples: every ``examples/*.toml`` through the commands a user runs.

Each case is one command line; its transcript (stdout, stderr, exit code, and the files it writes) is
checked in under ``tests/data/transcripts/`` so that a refactor which claims "behaviour unchanged" is a
test: ``tests/test_transcripts.py`` reruns every case and compares bytes. Only wall-clock timings are
normalised (``"wall_s": 0.123`` becomes ``"wall_s": "<t>"``): they are the one thing a rerun may change.

Regenerate after an intended change of output (and review the diff):
    python tests/transcripts.py            # every case
    python tests/transcripts.py NAME ...   # some
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "transcripts"

DC, BATCH, SWEEP = "examples/design-case.toml", "examples/design-case-batch.toml", "examples/design-case-sweep.toml"
DSV3, GPT3, LONG = "examples/deepseek-v3.toml", "examples/gpt3-175b-widest.toml", "examples/llama3-8b-long-context.toml"
QWEN, RL = "examples/qwen3-30b-a3b.toml", "examples/rl-grpo-qwen3-8b.toml"
CONF = "examples/llama3-8b-confidence.toml"

# name -> argument list (after ``tpopt``); ``{out}`` is a fresh directory whose files join the transcript
CASES: dict[str, list[str]] = {
    "design-solve": ["solve", "--scenario", DC, "--deadline", "30d", "--hw", "rtx4090"],
    "design-solve-json": ["solve", "--scenario", DC, "--json"],
    "design-solve-top": ["solve", "--scenario", DC, "--top", "3", "--solver", "cpsat"],
    "design-solve-highs": ["solve", "--scenario", DC, "--solver", "highs"],
    "design-evaluate": ["evaluate", "--scenario", DC, "--cards", "48"],
    "design-evaluate-json": ["evaluate", "--scenario", DC, "--cards", "48", "--json"],
    "design-explain": ["explain", "--scenario", DC],
    "design-explain-plan": ["explain", "--scenario", DC, "--cards", "48", "--sensitivity"],
    "design-explain-infeasible": ["explain", "--scenario", DC, "--max-cards", "32"],
    "design-solve-infeasible": ["solve", "--scenario", DC, "--max-cards", "32"],
    "design-explain-budget": ["explain", "--scenario", DC, "--max-cost", "15000"],
    "batch-solve": ["solve", "--scenario", BATCH],
    "batch-solve-8d": ["solve", "--scenario", BATCH, "--deadline", "8d"],
    "batch-explain": ["explain", "--scenario", BATCH],
    "sweep-csv": ["sweep", "--scenario", SWEEP, "--out", "{out}/sweep.csv"],
    "sweep-json": ["sweep", "--scenario", SWEEP, "--hw", "rtx4090,h100-sxm", "--deadline", "20d,30d", "--json"],
    "deepseek-solve": ["solve", "--scenario", DSV3],
    "deepseek-evaluate": ["evaluate", "--scenario", DSV3, "--hw", "h800", "--cards", "2048", "--pp", "16", "--ep",
                          "64", "--zero", "1", "--micro-batch", "1", "--schedule", "dualpipe", "--recompute", "norm"],
    "gpt3-solve": ["solve", "--scenario", GPT3],
    # the default limit (60 s) is wall-clock: the two-stage solve takes ~10 s alone and can pass 60 s on a loaded
    # machine (then its output says "not decided", honestly); the transcript pins the answer, not the load
    "long-solve": ["solve", "--scenario", LONG, "--time-limit", "1h"],
    "long-solve-json": ["solve", "--scenario", LONG, "--json", "--time-limit", "1h"],
    "long-evaluate": ["evaluate", "--scenario", LONG, "--stage", "long-context", "--cards", "1024", "--cp", "16"],
    "qwen-solve": ["solve", "--scenario", QWEN],
    "qwen-solve-4090": ["solve", "--scenario", QWEN, "--hw", "rtx4090"],
    "qwen-evaluate-json": ["evaluate", "--scenario", QWEN, "--hw", "h100-sxm", "--cards", "64", "--zero", "1",
                           "--ep", "8", "--json"],
    "qwen-explain": ["explain", "--scenario", QWEN],
    "rl": ["rl", "--scenario", RL],
    "rl-kept": ["rl", "--scenario", RL, "--kept", "70%"],
    "rl-time": ["rl", "--scenario", RL, "--objective", "time"],
    "rl-json": ["rl", "--scenario", RL, "--json"],
    "rl-infeasible": ["rl", "--scenario", RL, "--deadline", "1.5d"],
    "rl-bad-deadline": ["rl", "--scenario", RL, "--deadline", "1h"],
    "bad-hw": ["solve", "--scenario", DC, "--hw", "nosuchcard"],
    "bad-deadline": ["solve", "--scenario", DC, "--deadline", "30x"],
    "confidence-solve": ["solve", "--scenario", CONF],
    "confidence-simulate": ["simulate", "--scenario", CONF, "--runs", "10000"],
    "confidence-replan": ["replan", "--scenario", CONF, "--done", "41%", "--elapsed", "2.5d", "--cards-held", "1024"],
    "design-solve-confidence": ["solve", "--scenario", DC, "--confidence", "95%"],
    "design-solve-confidence-infeasible": ["solve", "--scenario", DC, "--confidence", "95%", "--step-sigma", "0.15"],
    "bad-confidence": ["solve", "--scenario", DC, "--confidence", "150%"],
    "sites-405b": ["sites", "--scenario", "examples/sites-llama3-405b.toml"],
    "sites-405b-json": ["sites", "--scenario", "examples/sites-llama3-405b.toml", "--json"],
    "sites-mixed-405b": ["sites", "--scenario", "examples/sites-mixed-405b.toml"],
    "pools-solve": ["solve", "--scenario", "examples/pools-h100-a100.toml"],
}

_TIMING = (re.compile(r'("(?:wall_s|[a-z_]*_wall_s)": )-?[0-9.e+-]+'),  # JSON timings
           re.compile(r'(, )[0-9.]+( s on [0-9]+ workers?)'))  # the sweep's summary line


def normalise(text: str) -> str:
    """The transcript with wall-clock timings replaced (they are the only thing a rerun may change)."""
    text = _TIMING[0].sub(r'\1"<t>"', text)
    return _TIMING[1].sub(r'\1<t>\2', text)


def run_case(name: str) -> str:
    """Run one case in a fresh process, as a user would (no terminal: 100 columns, no colour)."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["PYTHONHASHSEED"] = "0"
    with tempfile.TemporaryDirectory() as out:
        args = [a.replace("{out}", out) for a in CASES[name]]
        p = subprocess.run([sys.executable, "-m", "tpopt", *args], cwd=ROOT, env=env, capture_output=True,
                           text=True, stdin=subprocess.DEVNULL, timeout=600)
        parts = [f"$ tpopt {' '.join(CASES[name])}", f"--- exit {p.returncode}", "--- stdout", p.stdout,
                 "--- stderr", p.stderr]
        for f in sorted(Path(out).rglob("*")):
            if f.is_file() and not f.name.startswith("."):
                parts += [f"--- file {f.relative_to(out)}", f.read_text(errors="replace")]
    return normalise("\n".join(parts).replace(out, "{out}"))


def path(name: str) -> Path:
    return DATA / f"{name}.txt"


if __name__ == "__main__":
    import time

    for n in sys.argv[1:] or list(CASES):
        t0 = time.perf_counter()
        path(n).write_text(run_case(n))
        print(f"{n}: {time.perf_counter() - t0:.1f} s", flush=True)
