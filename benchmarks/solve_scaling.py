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
    ("Llama-3-70B, 2T tokens: 5 accelerators, up to 16,384 cards, all layouts", {
        "model.name": "llama3-70b", "task.global_batch": 1536, "task.tokens": "2T", "schedule.deadline": "60d",
        "memory.activation_reserve": None, "input.workers": None, "input.workers_per_host": 8,
        "hardware.accelerator": ["rtx4090", "h100-sxm", "a100-80gb-sxm", "h200", "b200"],
        "search.accelerator": ["rtx4090", "h100-sxm", "a100-80gb-sxm", "h200", "b200"],
        "search.max_cards": 16384, "search.zero_stage": [0, 1, 2, 3], "search.tp": [1, 2, 4, 8],
        "search.pp": [1, 2, 4, 8, 16], "search.dp": [16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1536],
        "search.schedule": ["1f1b", "zb-h1", "interleaved"], "search.micro_batch": [1, 2, 4, 8],
        "search.recompute": ["none", "norm", "mlp", "norm+mlp", "full"], "search.offload": ["none", "cpu"],
        "search.nics_per_host": [1, 2, 4, 6, 8],
        "search.save_interval": ["auto"] + [f"{s}s" for s in (300, 600, 900, 1200, 1500, 1800, 2400, 3000, 3600, 4500,
                                                              5400, 7200, 9000, 10800, 14400, 18000, 21600, 28800,
                                                              43200)],
        "search.save_mode": ["sync", "async"]}),
]


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def enumeration_estimate(space: Space, budget: float):
    """Run enumeration if it fits the budget, else extrapolate from an even sample of the groups.

    Groups (accelerator x offload x recompute x mode x schedule, pp = 1 or pp > 1) differ a lot in
    cost (pipeline simulations), so the sample is a seeded random choice of groups across the whole
    space, run through the real enumerator; the estimate is total points / (sampled points per second).
    """
    from tpopt.optimizer.enumerate import _groups, chunks, enumerate_best

    groups = list(_groups(space))
    t0 = time.perf_counter()
    for n_done, _ in enumerate(chunks(space), 1):
        if time.perf_counter() - t0 > budget / 10:
            break
    else:
        return None, False  # finished well inside the budget: measure it properly instead
    import random

    sample = [groups[i] for i in sorted(random.Random(0).sample(range(len(groups)), min(24, len(groups))))]
    points = 0
    t0 = time.perf_counter()
    for g in sample:
        sub = Space(sc=space.sc, domains=dict(space.domains))
        d = sub.domains
        ai, oi, ri, mi, si, pp_idx = g
        sub.domains = dict(d, acc=[d["acc"][ai]], offload=[d["offload"][oi]], recompute=[d["recompute"][ri]],
                           mode=[d["mode"][mi]], schedule=[d["schedule"][si]], pp=[d["pp"][i] for i in pp_idx])
        points += enumerate_best(sub, Request())[1]  # the real enumerator, masks and selection included
    rate = points / (time.perf_counter() - t0)
    return space.size() / rate, True


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
    ap.add_argument("--skip-highs-above", type=float, default=2e8, help="skip HiGHS on larger spaces")
    ap.add_argument("--mono-above", type=float, default=1e5, help="time the monolithic encodings up to this size")
    args = ap.parse_args(argv)
    spaces = SPACES[:3] if args.quick else SPACES
    cold = cli_cold_start()
    solve(design({}), "cpsat", Request())  # warm-up: imports and caches out of the timed runs
    print(f"tpopt solve --scenario examples/design-case.toml --deadline 30d --hw rtx4090, cold start: "
          f"{', '.join(f'{t:.2f}' for t in cold)} s (best {min(cold):.2f} s; target < 2 s)")
    print(f"{'space':<64} {'points':>12} {'cpsat s':>9} {'highs s':>9} {'enum s':>10} {'enum/cpsat':>11} "
          f"{'enum/highs':>11}  same optimum")
    mono_rows = []
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
        if n <= args.mono_above:
            mono = {b: timed(lambda: solve(sc, b, Request(time_limit=args.time_limit, seed=0, workers=1,
                                                          method="monolithic"))) for b in ("cpsat", "highs")}
            mono_rows.append((label, n, mono["cpsat"][1], mono["highs"][1], t_cp, t_hi))
        if r_cp.best is not None:
            p = r_cp.best.plan
            print(f"{'':<64} optimum: {p.accelerator} x {p.cards}, ZeRO-{p.zero_stage}, TP {p.tp}, PP {p.pp}, "
                  f"mb {p.micro_batch}, recompute {p.recompute}, cost {r_cp.best.metrics['cost']:,.0f}")
        sys.stdout.flush()
    print("~ = extrapolated from a timed sample of the enumeration (the full run would exceed the budget).")
    print("Times include building the term tables. cpsat/highs use method 'auto': the monolithic encoding for")
    print("tiny tables, the layout decomposition beyond. The monolithic encodings on the same spaces:")
    print(f"{'space':<64} {'points':>12} {'cpsat mono':>11} {'highs mono':>11} {'cpsat auto':>11} {'highs auto':>11}")
    for label, n, tc, th, ac, ah in mono_rows:
        print(f"{label:<64} {n:>12,} {tc:>11.2f} {th:>11.2f} {ac:>11.2f} {ah:>11.2f}")


if __name__ == "__main__":
    main()
