"""How long each step of an infeasibility explanation takes (conflict, then each relaxation).

    .venv/bin/python benchmarks/explain_timing.py [--case design|llama3-405b] [--scenario S] [--solver cpsat]
                                                  [--row N [--deadline 7d]] [--set table.key=value ...]

``design`` (default): the chapter's design case capped at 32 cards (the chapter, 10.6: infeasible for 30 days).
``llama3-405b``: Llama-3.1-405B on 2T tokens in 90 days on H100 / A100 / H200 / B200 with the search
space open, 1,800 s synchronous checkpoints (issue 14's example): a conflict between the deadline and
the 1,024-card cap. ``llama3-70b-budget``: the Llama-3-70B budget case of docs/optimiser.md (space 4 of
benchmarks/solve_scaling.py, 2T tokens, 60 days, five accelerators, per-operation model, budget cap
800,000 USD). ``--row N``: space N (0-based) of benchmarks/solve_scaling.py with the deadline cut to
``--deadline`` (default 7 d; infeasible). Prints one line per step: seconds (wall, and CPU for the solve and
the conflict), exact solves, and the answer. The "cp-sat core" line times the monolithic CP-SAT model with
assumption literals; the conflict step builds it only where the solves are monolithic (explain.monolithic_hint),
so on the large rows that line is what the conflict step cost before.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import build_scenario, read_scenario_file, with_overrides
from tpopt.optimizer.core import solve
from tpopt.optimizer.explain import PARAMS, RELAXATIONS, conflict, infeasibility, monolithic_hint
from tpopt.optimizer.result import Request
from tpopt.optimizer.space import Space

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = {"search.max_cards": "32", "schedule.deadline": "30d", "hardware.accelerator": ["rtx4090"],
           "search.accelerator": ["rtx4090"]}
LLAMA_405B = {
    "scenario": {"name": "llama3-405b-2T-90d"},
    "model": {"name": "llama3-405b"},
    "task": {"tokens": "2T", "seq_len": 8192, "global_batch": 2048},
    "schedule": {"deadline": "90d"},
    "hardware": {"accelerator": ["h100-sxm", "a100-80gb-sxm", "h200", "b200"]},
    "checkpoint": {"save_interval": "1800s", "mode": "sync"},
}


def _value(text: str):
    if "," in text:
        return [x.strip() for x in text.split(",")]
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=("design", "llama3-405b", "llama3-70b-budget"), default="design")
    ap.add_argument("--scenario", default=None)
    ap.add_argument("--solver", default="cpsat", choices=("cpsat", "highs", "enumerate"))
    ap.add_argument("--skip-core", action="store_true", help="skip timing the monolithic CP-SAT core")
    ap.add_argument("--set", action="append", default=[], help="raw override table.key=value (repeatable)")
    ap.add_argument("--row", type=int, default=None, help="a space of benchmarks/solve_scaling.py (0-based)")
    ap.add_argument("--deadline", default="7d", help="the deadline that makes --row infeasible (default 7d)")
    args = ap.parse_args()
    from tpopt.cli.main import tune_allocator

    tune_allocator()  # measured as the `tpopt` program runs (the library leaves the process's allocator alone)
    if args.case == "llama3-70b-budget" and args.row is None:
        from solve_scaling import LLAMA, design_raw  # this directory (run as a script)

        raw = design_raw(dict(LLAMA, **{"hardware.efficiency": None, "cost.max_cost": 800000}))
        cat = load_catalog()
        explain(build_scenario(raw, cat), raw, cat, args.solver, args.skip_core)
        return
    if args.row is not None:
        from solve_scaling import SPACES, design_raw  # this directory (run as a script)

        base = SPACES[args.row][1]
        raw = with_overrides(design_raw(base), {"schedule.deadline": args.deadline})
        raw = with_overrides(raw, {k: _value(v) for k, _, v in (item.partition("=") for item in args.set)})
        cat = load_catalog()
        explain(build_scenario(raw, cat), raw, cat, args.solver, args.skip_core)
        return
    if args.scenario:
        raw, ov = read_scenario_file(args.scenario), {}
    elif args.case == "llama3-405b":
        raw, ov = read_scenario_file(LLAMA_405B), {}
    else:
        raw, ov = read_scenario_file(ROOT / "examples" / "design-case.toml"), dict(DEFAULT)
    for item in args.set:
        k, _, v = item.partition("=")
        ov[k] = _value(v)
    raw = with_overrides(raw, ov)
    cat = load_catalog()
    explain(build_scenario(raw, cat), raw, cat, args.solver, args.skip_core)


def explain(sc, raw, cat, solver, skip_core=False):
    """Time each step of the explanation of ``sc`` (wall seconds; CPU seconds where it matters)."""
    req = Request(workers=1, seed=0)
    space = Space.from_scenario(sc)
    print(f"scenario {sc.name}: {space.size():,} plans in the space (largest term table "
          f"{space.largest_table():,} rows), solver {solver}")

    t, c = time.perf_counter(), time.process_time()
    r = solve(sc, solver, req, space=space)
    print(f"{'solve':<16} {time.perf_counter() - t:8.3f} s  cpu {time.process_time() - c:7.3f} s  "
          f"status {r.status.value}")
    if r.feasible:
        return
    if not skip_core:
        used = monolithic_hint(space, req)
        t, c = time.perf_counter(), time.process_time()
        raw_core = conflict(space, req)
        print(f"{'cp-sat core':<16} {time.perf_counter() - t:8.3f} s  cpu {time.process_time() - c:7.3f} s  "
              f"{'used as the hint' if used else 'not built by explain (above the monolithic threshold)'}: {raw_core}")
    steps = []
    t0, c0 = time.perf_counter(), time.process_time()
    out = infeasibility(sc, space, solver, req, r.enforced, raw=raw, catalog=cat,
                        progress=lambda text: steps.append((text, time.perf_counter(), time.process_time())))
    end, cend = time.perf_counter(), time.process_time()
    steps.append(("", end, cend))
    for (text, ts, cs), (_, nt, nc) in zip(steps[:2], steps[1:3], strict=False):
        print(f"{text[:16]:<16} {nt - ts:8.3f} s  cpu {nc - cs:7.3f} s")
    print(f"{'conflict':<16} {out['conflict']}")
    # one progress line per relaxation tried, in RELAXATIONS order (those that do not apply return nothing)
    cpu = {}
    for (text, _, cs), (_, _, nc) in zip(steps[2:], steps[3:], strict=False):
        cpu[next((n for n in RELAXATIONS if PARAMS[n].label in text), text)] = nc - cs
    for x in out["relaxations"]:
        ans = (f"{x['direction']} {x['required']} {x['unit']}" if x["helps"] else
               ("cannot help" if x["helps"] is False else "undecided"))
        print(f"{x['parameter']:<16} {x['seconds']:8.3f} s  cpu {cpu.get(x['parameter'], 0.0):7.3f} s  "
              f"{x['solves']:3d} solves  {ans}")
    print(f"{'whole explanation':<16} {end - t0:8.3f} s  cpu {cend - c0:7.3f} s (after the solve)")


if __name__ == "__main__":
    main()
