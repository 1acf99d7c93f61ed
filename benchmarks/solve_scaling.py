"""Solver scaling: CP-SAT and HiGHS against brute-force enumeration on growing design spaces.

Prints, for each space: points, build+solve time of each backend, enumeration time (measured, or
extrapolated from a timed sample of chunks when the full run would take longer than --enum-budget,
marked "~"), the ratio enumeration / solver, and whether every backend found the same optimum.
Not a test: figures depend on the machine. Run:

    .venv/bin/python benchmarks/solve_scaling.py [--quick] [--enum-budget 120]
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from tpopt.catalogs import load_catalog  # noqa: E402
from tpopt.catalogs.scenario import build_scenario, read_scenario_file, with_overrides  # noqa: E402
from tpopt.optimizer.core import solve  # noqa: E402
from tpopt.optimizer.result import Request  # noqa: E402
from tpopt.optimizer.space import Space  # noqa: E402

DESIGN = ROOT / "examples" / "design-case.toml"


def design(overrides: dict):
    raw = read_scenario_file(DESIGN)
    for key, value in overrides.items():
        if value is None:  # delete the key (e.g. the activation reserve: model activations instead)
            table, _, name = key.partition(".")
            raw.get(table, {}).pop(name, None)
    raw = with_overrides(raw, {k: v for k, v in overrides.items() if v is not None})
    return build_scenario(raw, load_catalog())


SPACES = [
    ("design case as printed ([search] fixed)", {}),
    ("design case, open layout search", {
        "search.zero_stage": [0, 1, 2, 3], "search.tp": [1, 2, 4, 8], "search.pp": [1],
        "search.micro_batch": [1, 2, 4]}),
    ("+ pipeline (pp 1/2/4, 3 schedules), modelled activations, recompute", {
        "memory.activation_reserve": None, "search.zero_stage": [0, 1, 2, 3], "search.tp": [1, 2, 4, 8],
        "search.pp": [1, 2, 4], "search.schedule": ["1f1b", "zb-h1", "fill-drain"], "search.micro_batch": [1, 2, 4],
        "search.recompute": ["none", "mlp", "norm+mlp", "full"]}),
    ("+ 3 accelerators, NICs, offload, save interval and mode", {
        "memory.activation_reserve": None, "hardware.accelerator": ["rtx4090", "h100-sxm", "a100-80gb-sxm"],
        "search.accelerator": ["rtx4090", "h100-sxm", "a100-80gb-sxm"],
        "search.zero_stage": [0, 1, 2, 3], "search.tp": [1, 2, 4, 8], "search.pp": [1, 2, 4],
        "search.schedule": ["1f1b", "zb-h1", "fill-drain"], "search.micro_batch": [1, 2, 4],
        "search.recompute": ["none", "mlp", "norm+mlp", "full"], "search.offload": ["none", "cpu"],
        "search.nics_per_host": [1, 2, 4, 8], "search.save_interval": ["auto", "900s", "1800s", "3600s"],
        "search.save_mode": ["sync", "async"]}),
    ("Llama-3-70B, 5 accelerators, batch 1536, up to 16,384 cards", {
        "model.name": "llama3-70b", "task.global_batch": 1536, "task.tokens": "2T", "schedule.deadline": "60d",
        "memory.activation_reserve": None,
        "hardware.accelerator": ["rtx4090", "h100-sxm", "a100-80gb-sxm", "h200", "b200"],
        "search.accelerator": ["rtx4090", "h100-sxm", "a100-80gb-sxm", "h200", "b200"],
        "search.max_cards": 16384, "search.zero_stage": [0, 1, 2, 3], "search.tp": [1, 2, 4, 8],
        "search.pp": [1, 2, 4, 8, 16], "search.schedule": ["1f1b", "zb-h1"], "search.micro_batch": [1, 2, 4],
        "search.recompute": ["none", "full"], "search.offload": ["none", "cpu"],
        "search.nics_per_host": [1, 4, 8], "search.save_interval": ["auto", "1800s", "3600s"],
        "search.save_mode": ["sync", "async"]}),
]


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def enumeration_estimate(space: Space, budget: float):
    """Run enumeration if it fits the budget, else time a sample of chunks and extrapolate."""
    from tpopt.optimizer.enumerate import chunks

    t0 = time.perf_counter()
    points = 0
    for _, _, shape, _ in chunks(space):
        points += math.prod(shape)
        if time.perf_counter() - t0 > budget / 10 and points < space.size():
            rate = points / (time.perf_counter() - t0)
            return space.size() / rate, True
    return None, False


def cli_cold_start(repeats: int = 3) -> list[float]:
    """Wall time of the README's main command in a fresh process (imports included)."""
    import subprocess

    exe = Path(sys.executable).with_name("tpopt")
    cmd = [str(exe), "solve", "--scenario", str(DESIGN), "--deadline", "30d", "--hw", "rtx4090"]
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        out.append(time.perf_counter() - t0)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="only the first three spaces")
    ap.add_argument("--enum-budget", type=float, default=120.0, help="seconds allowed for a full enumeration")
    ap.add_argument("--time-limit", type=float, default=600.0)
    ap.add_argument("--skip-highs-above", type=float, default=5e6, help="skip HiGHS on larger spaces")
    args = ap.parse_args(argv)
    spaces = SPACES[:3] if args.quick else SPACES
    cold = cli_cold_start()
    print(f"tpopt solve --scenario examples/design-case.toml --deadline 30d --hw rtx4090, cold start: "
          f"{', '.join(f'{t:.2f}' for t in cold)} s (best {min(cold):.2f} s; target < 2 s)")
    print(f"{'space':<64} {'points':>12} {'cpsat s':>9} {'highs s':>9} {'enum s':>10} {'enum/cpsat':>11} "
          f"{'enum/highs':>11}  same optimum")
    for label, ov in spaces:
        sc = design(ov)
        space = Space.from_scenario(sc)
        n = space.size()
        req = Request(time_limit=args.time_limit, seed=0, workers=1)
        r_cp, t_cp = timed(lambda: solve(sc, "cpsat", req))
        if n <= args.skip_highs_above:
            r_hi, t_hi = timed(lambda: solve(sc, "highs", req))
        else:
            r_hi, t_hi = None, float("nan")
        est, extrapolated = enumeration_estimate(space, args.enum_budget)
        if extrapolated:
            r_en, t_en = None, est
        else:
            r_en, t_en = timed(lambda: solve(sc, "enumerate", req))
        costs = [r.best.metrics["cost"] for r in (r_cp, r_hi, r_en) if r is not None and r.best is not None]
        same = "yes" if costs and max(costs) - min(costs) <= 1e-9 * max(costs) else ("n/a" if not costs else "NO")
        enum_txt = f"~{t_en:.1f}" if extrapolated else f"{t_en:.2f}"
        hi_txt = "skipped" if r_hi is None else f"{t_hi:.2f}"
        ratio_hi = "" if r_hi is None else f"{t_en / t_hi:.1f}x"
        print(f"{label:<64} {n:>12,} {t_cp:>9.2f} {hi_txt:>9} {enum_txt:>10} {t_en / t_cp:>10.1f}x {ratio_hi:>11}  "
              f"{same} ({r_cp.status.value}, {r_cp.solver.note}, {r_cp.solver.rounds} rounds, "
              f"{r_cp.solver.evaluated:,} plans evaluated exactly)")
        if r_cp.best is not None:
            p = r_cp.best.plan
            print(f"{'':<64} optimum: {p.accelerator} x {p.cards}, ZeRO-{p.zero_stage}, TP {p.tp}, PP {p.pp}, "
                  f"mb {p.micro_batch}, recompute {p.recompute}, cost {r_cp.best.metrics['cost']:,.0f}")
        sys.stdout.flush()
    print("~ = extrapolated from a timed sample of the enumeration (the full run would exceed the budget).")


if __name__ == "__main__":
    main()
