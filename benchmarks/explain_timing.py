"""How long each step of an infeasibility explanation takes (conflict, then each relaxation).

    .venv/bin/python benchmarks/explain_timing.py [--scenario S] [--solver cpsat] [--set table.key=value ...]

Defaults to the chapter's design case capped at 32 cards (REFERENCE 10.6: infeasible for 30 days).
Prints one line per step: seconds, exact solves, and the answer.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import build_scenario, read_scenario_file, with_overrides
from tpopt.optimizer.core import solve
from tpopt.optimizer.explain import Context, conflict, conflict_detail, minimal_conflict, relaxations
from tpopt.optimizer.result import Request
from tpopt.optimizer.space import Space

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = {"search.max_cards": "32", "schedule.deadline": "30d", "hardware.accelerator": ["rtx4090"],
           "search.accelerator": ["rtx4090"]}


def _value(text: str):
    if "," in text:
        return [x.strip() for x in text.split(",")]
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default=str(ROOT / "examples" / "design-case.toml"))
    ap.add_argument("--solver", default="cpsat", choices=("cpsat", "highs", "enumerate"))
    ap.add_argument("--set", action="append", default=[], help="raw override table.key=value (repeatable)")
    args = ap.parse_args()
    ov = dict(DEFAULT) if not args.set else {}
    for item in args.set:
        k, _, v = item.partition("=")
        ov[k] = _value(v)
    raw = with_overrides(read_scenario_file(args.scenario), ov)
    cat = load_catalog()
    sc = build_scenario(raw, cat)
    req = Request(workers=1, seed=0)
    space = Space.from_scenario(sc)
    print(f"scenario {sc.name}: {space.size():,} plans in the space, solver {args.solver}")

    t = time.perf_counter()
    r = solve(sc, args.solver, req, space=space)
    print(f"{'solve':<16} {time.perf_counter() - t:8.3f} s  status {r.status.value}")
    if r.feasible:
        return
    t = time.perf_counter()
    raw_core = conflict(space, req)
    print(f"{'cp-sat core':<16} {time.perf_counter() - t:8.3f} s  {raw_core}")
    ctx = Context.of(sc, args.solver, req, raw=raw, catalog=cat)
    t = time.perf_counter()
    core = minimal_conflict(space, args.solver, req, ctx=ctx)
    print(f"{'minimal conflict':<16} {time.perf_counter() - t:8.3f} s  {core}")
    t = time.perf_counter()
    conflict_detail(ctx, core or [])
    print(f"{'conflict detail':<16} {time.perf_counter() - t:8.3f} s")
    t = time.perf_counter()
    rels = relaxations(sc, args.solver, req, raw=raw, catalog=cat, core=core)
    for x in rels:
        ans = (f"{x.direction} {x.required} {x.unit}" if x.helps else
               ("cannot help" if x.helps is False else "undecided"))
        print(f"{x.parameter:<16} {x.seconds:8.3f} s  {x.solves:3d} solves  {ans}")
    print(f"{'all relaxations':<16} {time.perf_counter() - t:8.3f} s")


if __name__ == "__main__":
    main()
