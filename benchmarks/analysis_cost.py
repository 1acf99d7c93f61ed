"""The analysis after a solve on nine accelerators (issue 39, item 3): solve and analysis CPU seconds.

The case: the widest GPT-3 example (``examples/gpt3-175b-widest.toml``, 1.15e9 plans per accelerator) under
the per-operation model (``hardware.efficiency`` dropped) with nine accelerators to choose from. Each run is a
fresh process (``--child``); the parent prints, per run, the CPU and wall seconds of the solve (space, tables
and the CP-SAT solve with exact verification) and of the default report's analysis (binding families, why not
another accelerator, alternatives), the optimum, and the load average beside them; then the best of the runs.
``--cli`` splits the two as ``tpopt solve`` does (:func:`tpopt.optimizer.plan.plan`): the space marked before the
solve as a report marks it (its layout groups slice the whole tables the analysis reads, so the solve builds them),
and the analysis asks the fitted alternative's question too where the chosen card rests on priors.

    .venv/bin/python benchmarks/analysis_cost.py [--runs 3] [--cli]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "gpt3-175b-widest.toml"
NINE = ["h100-sxm", "b200", "h200", "a100-80gb-sxm", "rtx4090", "mi300x", "h100-pcie", "l40s", "gaudi3"]


def load() -> str:
    """The 1-, 5- and 15-minute load averages of this machine."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def scenario():
    """The widest GPT-3 example, per-operation model, nine accelerators."""
    from tpopt.catalogs import load_catalog
    from tpopt.catalogs.scenario import build_scenario, read_scenario_file, with_overrides

    raw = read_scenario_file(EXAMPLE)
    raw["hardware"].pop("efficiency", None)
    return build_scenario(with_overrides(raw, {"hardware.accelerator": NINE}), load_catalog())


def child(cli: bool = False) -> dict:
    """One solve and its analysis in this process: CPU and wall seconds of each, the optimum (``cli``: split as
    ``tpopt solve`` splits them)."""
    from tpopt.optimizer import footing
    from tpopt.optimizer.core import solve
    from tpopt.optimizer.enumerate import keep_point_table
    from tpopt.optimizer.ondemand import slice_whole_tables
    from tpopt.optimizer.report import analysis, tabled
    from tpopt.optimizer.result import Request
    from tpopt.optimizer.space import Space

    c0, t0 = time.process_time(), time.perf_counter()
    sc = scenario()
    space = Space.from_scenario(sc)
    req = Request(time_limit=600, seed=0, workers=1)
    if cli:  # as plan() marks a space it will analyse
        slice_whole_tables(space)
        if tabled(space):
            keep_point_table(space)
    r = solve(sc, "cpsat", req, space=space)
    c1, t1 = time.process_time(), time.perf_counter()
    if r.best is None:
        return {"status": r.status.value}
    names = footing.fitted_cards(sc, r.best) if cli and len(sc.systems) > 1 else ()
    analysis(space, r.best, "cpsat", req, set(r.enforced), restricted={"acc": list(names)} if names else None)
    c2, t2 = time.process_time(), time.perf_counter()
    return {"status": r.status.value, "cost": r.best.metrics["cost"], "plans": space.size(),
            "solve_cpu": c1 - c0, "solve_wall": t1 - t0, "analysis_cpu": c2 - c1, "analysis_wall": t2 - t1}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="fresh processes (best of them reported)")
    ap.add_argument("--cli", action="store_true", help="split the solve and the analysis as tpopt solve does")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.cli)))
        return
    runs = []
    for i in range(args.runs):
        before = load()
        out = subprocess.run([sys.executable, __file__, "--child"] + (["--cli"] if args.cli else []),
                             capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        if "cost" not in r:
            print(f"run {i + 1}: {r['status']}, no plan to analyse")
            return
        runs.append(r)
        print(f"run {i + 1}: solve CPU {r['solve_cpu']:.2f} s (wall {r['solve_wall']:.2f}), analysis CPU "
              f"{r['analysis_cpu']:.2f} s (wall {r['analysis_wall']:.2f}); {r['status']}, {r['cost']:,.0f} USD, "
              f"{r['plans']:,} plans; load {before} -> {load()}")
    split = " (split as tpopt solve splits them)" if args.cli else ""
    print(f"best of {len(runs)}{split}: solve CPU {min(r['solve_cpu'] for r in runs):.2f} s, analysis CPU "
          f"{min(r['analysis_cpu'] for r in runs):.2f} s")


if __name__ == "__main__":
    main()
