"""Solve time with a chance constraint (``--confidence``) against the same space without it.

For each space, the scenario is built and solved from scratch (term tables included, no chance roots
remembered; imports and each solver's first call paid once before timing) with and without a confidence
of 95 %, by every backend named (``NAME/decomposed``: the layout decomposition forced); it prints the
median CPU seconds of the process (all its threads; the ratio is taken on these, which a shared machine
disturbs less than wall time) and the median wall seconds of each, and the CPU ratio (the issue asks for
at most 2x). The spaces: the design case (the chapter's, 16 plans), the 1,024-card example, and a wider
Llama 3 8B space on H100 (TP, ZeRO, save intervals and modes, up to 2,048 cards). Not a test: figures
depend on the machine. Run:

    .venv/bin/python benchmarks/confidence.py [--repeat 5]
        [--solvers cpsat,highs,enumerate,cpsat/decomposed,highs/decomposed,pyomo:highs]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from tpopt.catalogs import load_catalog  # noqa: E402
from tpopt.catalogs.scenario import build_scenario, load_scenario  # noqa: E402
from tpopt.models import terms as T  # noqa: E402
from tpopt.models.terms.deadline import _LAW_MEMO  # noqa: E402
from tpopt.optimizer.core import solve  # noqa: E402
from tpopt.optimizer.result import Request  # noqa: E402
from tpopt.optimizer.space import Space  # noqa: E402


def wide():
    return build_scenario({
        "model": {"name": "llama3-8b"}, "task": {"tokens": "2T", "seq_len": 8192, "global_batch": 1536},
        "schedule": {"deadline": "6d", "reserved": "1d"}, "hardware": {"accelerator": "h100-sxm", "efficiency": 0.4},
        "risk": {"step_sigma": 0.15},
        "search": {"zero_stage": [1, 2, 3], "tp": [1, 2, 4, 8], "pp": [1, 2], "micro_batch": [1, 2],
                   "save_interval": ["auto", "600s", "1800s", "3600s"], "save_mode": ["sync", "async"],
                   "max_cards": 2048}}, load_catalog())


def spaces():
    design = load_scenario(ROOT / "examples" / "design-case.toml")
    conf = load_scenario(ROOT / "examples" / "llama3-8b-confidence.toml")
    return [("design case", design), ("1,024-card example", replace(conf, task=replace(conf.task, confidence=None))),
            ("wide Llama 3 8B", wide())]


def cpu_s() -> float:
    """CPU seconds of this process so far, user + system, all threads."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def request(backend: str) -> tuple[str, Request]:
    """``NAME`` or ``NAME/decomposed`` -> (backend, request)."""
    name, _, method = backend.partition("/")
    return name, Request(seed=0, workers=1, time_limit=300, method=method or "auto")


def timed(sc, backend: str, repeat: int) -> tuple[float, float, str]:
    cpus, walls = [], []
    status = ""
    name, req = request(backend)
    for _ in range(repeat):
        T._CHANCE_MEMO.clear()  # from scratch: no chance roots remembered from the previous run,
        _LAW_MEMO.clear()  # nor the plans' law inputs
        c0, t0 = cpu_s(), time.perf_counter()
        r = solve(sc, name, req)
        cpus.append(cpu_s() - c0)
        walls.append(time.perf_counter() - t0)
        status = f"{r.status.value}, {r.best.plan.cards if r.best else '-'} cards"
    return statistics.median(cpus), statistics.median(walls), status


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--solvers", default="cpsat,highs,enumerate,cpsat/decomposed,highs/decomposed,pyomo:highs")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from machine import load_line  # this directory (run as a script)

    print(load_line())
    warm = load_scenario(ROOT / "examples" / "design-case.toml")
    for b in args.solvers.split(","):  # imports and first calls, untimed
        name, req = request(b)
        solve(replace(warm, task=replace(warm.task, confidence=0.95)), name, req)
    print(f"{'space':<20} {'plans':>7} {'solver':<17} {'CPU s without':>13} {'with 95 %':>10} {'ratio':>6} "
          f"{'wall s without':>14} {'with 95 %':>10}  optimum without / with")
    for name, sc in spaces():
        size = Space.from_scenario(sc).size()
        with_q = replace(sc, task=replace(sc.task, confidence=0.95))
        for b in args.solvers.split(","):
            c0, w0, s0 = timed(sc, b, args.repeat)
            c1, w1, s1 = timed(with_q, b, args.repeat)
            print(f"{name:<20} {size:>7,} {b:<17} {c0:>13.4f} {c1:>10.4f} {c1 / c0:>6.2f} {w0:>14.4f} {w1:>10.4f}"
                  f"  {s0} / {s1}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
