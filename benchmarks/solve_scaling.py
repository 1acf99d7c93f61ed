"""Solver scaling: a ladder of design spaces from 1e4 to 1e12 plans, and CP-SAT and HiGHS against enumeration.

The ladder (default; ``--quick``: up to 1e8 plans): four families -- a dense model (Llama-3-70B, 2T tokens, 60
days, up to 16,384 cards) under the flat step-time model (40 % MFU) and the per-operation model, and a MoE model
(DeepSeek-V3, 1T tokens) under both -- each opening its [search] axes one after another in a fixed order
(:data:`DENSE_MOVES`, :data:`MOE_MOVES`: layout axes, per-card choices, accelerators, save intervals, ...); a
rung is the shortest prefix of moves reaching 10^k plans. Each rung is solved by CP-SAT (method ``auto``: full
tables, or one layout group at a time when the memory plan says so or the space is large,
:mod:`tpopt.optimizer.ondemand`) in a fresh process, printing the wall and CPU time and the peak resident memory
of each phase (the space, the memory plan, the solve), how the tables were built, the groups tabulated and the
certificate that proved the optimum; then the fitted growth exponent (least squares of log time and log peak
RSS against log plans over 1e8-1e12). ``--ladder-check N`` also runs enumeration's bounded estimate on rungs up
to 10^N plans.

``--spaces``: the named spaces below (the earlier table of this benchmark):

For each space: its size; for each solver backend (method ``auto``) the wall time of each phase --
tables, solve (with exact verification), and the default report's analysis -- and the peak resident
memory of each phase, every backend in a fresh process; the enumeration's time, measured when it
fits ``--enum-budget`` (default 10 minutes) and otherwise *estimated* from a timed sample and marked
"~"; the ratio enumeration / solve; and whether every backend that ran returned the same optimum
(the enumeration's included when it ran). The estimator is checked against one measured row
(``--check-row``): both numbers are printed for it. Then the cold start of the README's command.
The estimate samples for at most ``--estimate-budget`` CPU seconds (default 60) and extrapolates. Not a test:
figures depend on the machine and its load. Run:

    .venv/bin/python benchmarks/solve_scaling.py [--quick] [--family dense-flat,moe-per-op] [--max-exp 12]
    .venv/bin/python benchmarks/solve_scaling.py --spaces [--rows 5,6] [--enum-budget 600]
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "examples" / "design-case.toml"

ALL_SCHEDULES = ["fill-drain", "1f1b", "interleaved", "zb-h1", "zb-h2", "dualpipe", "dualpipe-deepseek"]
ALL_RECOMPUTE = ["none", "full", "norm", "mlp", "attn", "norm+mlp", "norm+attn", "mlp+attn", "norm+mlp+attn"]
INTERVALS = ["auto"] + [f"{s}s" for s in (300, 600, 900, 1200, 1500, 1800, 2400, 3000, 3600, 4500, 5400, 7200, 9000,
                                          10800, 14400, 18000, 21600, 28800, 43200)]
FIVE = ["rtx4090", "h100-sxm", "a100-80gb-sxm", "h200", "b200"]
LLAMA = {
    "model.name": "llama3-70b", "task.global_batch": 1536, "task.tokens": "2T", "schedule.deadline": "60d",
    "memory.activation_reserve": None, "input.workers": None, "input.workers_per_host": 8,
    "hardware.accelerator": FIVE, "search.accelerator": FIVE, "search.max_cards": 16384,
    "search.zero_stage": [0, 1, 2, 3], "search.tp": [1, 2, 4, 8], "search.pp": [1, 2, 4, 8, 16],
    "search.dp": [16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1536],
    "search.schedule": ["1f1b", "zb-h1", "interleaved"], "search.micro_batch": [1, 2, 4, 8],
    "search.recompute": ["none", "norm", "mlp", "norm+mlp", "full"], "search.offload": ["none", "cpu"],
    "search.nics_per_host": [1, 2, 4, 6, 8], "search.save_interval": INTERVALS, "search.save_mode": ["sync", "async"]}

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
    ("Llama-3-70B, 2T tokens, 5 accelerators, up to 16,384 cards, all layouts", LLAMA),
    ("GPT-3 175B, 300B tokens, 1,024 A100s: the widest space", ROOT / "examples" / "gpt3-175b-widest.toml"),
    ("Llama-3-70B, 2T tokens, 5 accelerators, up to 16,384 cards: the widest space", dict(LLAMA, **{
        "search.schedule": ALL_SCHEDULES, "search.pp": [1, 2, 4, 5, 8, 10, 16, 20],
        "search.micro_batch": [1, 2, 3, 4, 6, 8], "search.recompute": ALL_RECOMPUTE,
        "search.dp": [8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1536]})),
]
QUICK = 3  # --spaces --quick: the first three spaces

# ---------------------------------------------------------------------------------------------
# the ladder


ACCS = ["h100-sxm", "b200", "h200", "a100-80gb-sxm", "rtx4090", "mi300x", "h100-pcie", "l40s", "gaudi3", "mi355x",
        "b300", "h20", "a100-40gb-sxm", "h800", "mi325x", "h100-nvl", "h200-nvl", "a800-80gb-sxm", "a100-80gb-pcie",
        "rtx5090", "mi250x", "a100-40gb-pcie", "gb200-nvl72", "gb300-nvl72"]


def _intervals(n: int) -> list[str]:
    """"auto" and n - 1 save intervals on a 5-minute grid."""
    return ["auto"] + [f"{300 * i}s" for i in range(1, n)]


RECOMPUTE9 = ["none", "norm", "mlp", "attn", "norm+mlp", "norm+attn", "mlp+attn", "norm+mlp+attn", "full"]
DENSE_MOVES = [
    ("tp", [1, 2, 4, 8]), ("pp", [1, 2, 4, 8]), ("dp", [16, 32, 64, 128, 256, 512]), ("micro_batch", [1, 2, 4]),
    ("zero_stage", [0, 1, 2, 3]), ("recompute", ["none", "full", "mlp", "norm+mlp"]), ("accelerator", ACCS[:3]),
    ("schedule", ["1f1b", "zb-h1", "interleaved"]), ("offload", ["none", "cpu"]), ("nics_per_host", [1, 2, 4, 8]),
    ("save_interval", _intervals(20)), ("save_mode", ["sync", "async"]), ("accelerator", ACCS[:6]),
    ("dp", [16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1536]), ("micro_batch", [1, 2, 3, 4, 6, 8]),
    ("recompute", RECOMPUTE9), ("schedule", ALL_SCHEDULES), ("pp", [1, 2, 4, 5, 8, 10, 16, 20]),
    ("save_interval", _intervals(60)), ("cp", [1, 2]), ("sequence_parallel", [False, True]),
    ("accelerator", ACCS[:12]), ("nics_per_host", [1, 2, 4, 6, 8]), ("save_interval", _intervals(144)),
    ("accelerator", ACCS), ("cp", [1, 2, 4]), ("micro_batch", [1, 2, 3, 4, 6, 8, 12, 16]),
    ("nics_per_host", [1, 2, 3, 4, 5, 6, 7, 8]),
    ("dp", [8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1536]), ("save_interval", _intervals(288))]
"""The dense ladder's moves, in order: each sets one [search] axis (cumulatively)."""
DENSE_BASE = {"accelerator": ["h100-sxm"], "tp": [1], "pp": [1], "dp": [16], "micro_batch": [1], "zero_stage": [1],
              "recompute": ["none"], "schedule": ["1f1b"], "offload": ["none"], "save_interval": ["auto"],
              "save_mode": ["sync"]}
MOE_MOVES = [
    ("tp", [1, 2, 4, 8]), ("pp", [1, 2, 4, 8, 16]), ("ep", [8, 16, 32, 64]), ("dp", [32, 64, 128, 256, 512]),
    ("micro_batch", [1, 2]), ("zero_stage", [0, 1, 2, 3]), ("capacity_factor", ["none", 1.0, 1.25]),
    ("recompute", ["none", "full", "mlp"]), ("accelerator", ACCS[:3]), ("schedule", ["1f1b", "zb-h1", "dualpipe"]),
    ("offload", ["none", "cpu"]), ("nics_per_host", [1, 2, 4, 8]), ("save_interval", _intervals(20)),
    ("save_mode", ["sync", "async"]), ("ep", [1, 2, 4, 8, 16, 32, 64, 128]), ("expert_tp", ["tp", 1]),
    ("accelerator", ACCS[:6]), ("dp", [16, 32, 64, 128, 256, 512, 1024]), ("micro_batch", [1, 2, 4]),
    ("recompute", ["none", "norm", "mlp", "norm+mlp", "full"]), ("save_interval", _intervals(60)),
    ("schedule", ALL_SCHEDULES), ("capacity_factor", ["none", 1.0, 1.25, 1.5, 2.0]), ("accelerator", ACCS[:12]),
    ("save_interval", _intervals(144)), ("sequence_parallel", [False, True])]
"""The MoE ladder's moves (DeepSeek-V3: 256 routed experts, 3 dense then 58 MoE blocks)."""
MOE_BASE = {"accelerator": ["h100-sxm"], "tp": [1], "pp": [1], "ep": [8], "dp": [64], "micro_batch": [1],
            "zero_stage": [1], "recompute": ["none"], "schedule": ["1f1b"], "offload": ["none"],
            "save_interval": ["auto"], "save_mode": ["sync"], "capacity_factor": ["none"]}
FAMILIES = {"dense-flat": (False, False), "dense-per-op": (False, True), "moe-flat": (True, False),
            "moe-per-op": (True, True)}
"""Ladder family -> (MoE model, per-operation step-time model)."""


def ladder_raw(moe: bool, per_op: bool, n_moves: int) -> dict:
    """The raw scenario of a ladder rung: the base [search] with the first ``n_moves`` moves applied."""
    search = dict(MOE_BASE if moe else DENSE_BASE)
    for key, values in (MOE_MOVES if moe else DENSE_MOVES)[:n_moves]:
        search[key] = values
    raw = {"model": {"name": "deepseek-v3" if moe else "llama3-70b"},
           "task": {"tokens": "1T" if moe else "2T", "seq_len": 4096 if moe else 8192,
                    "global_batch": 2048 if moe else 1536},
           "schedule": {"deadline": "60d"}, "hardware": {"accelerator": search["accelerator"]},
           "checkpoint": {"storage": "superpod-good"}, "search": dict(search, max_cards=16384)}
    if not per_op:
        raw["hardware"]["efficiency"] = 0.40
    return raw


def ladder_scenario(moe: bool, per_op: bool, n_moves: int):
    from tpopt.catalogs import load_catalog
    from tpopt.catalogs.scenario import build_scenario

    return build_scenario(ladder_raw(moe, per_op, n_moves), load_catalog())


def ladder_rungs(moe: bool, max_exp: int, min_exp: int = 4) -> list[tuple[int, int, int]]:
    """(10^k target, moves, plans) of each rung: the shortest prefix of moves with at least 10^k plans."""
    from tpopt.optimizer.space import Space

    out = []
    moves = MOE_MOVES if moe else DENSE_MOVES
    n = 0
    for k in range(min_exp, max_exp + 1):
        while n <= len(moves):
            plans = Space.from_scenario(ladder_scenario(moe, False, n)).size()
            if plans >= 10 ** k:
                out.append((k, n, plans))
                break
            n += 1
    return out


def child_rung(family: str, n_moves: int) -> dict:
    """One rung in a fresh process: build the space, the memory plan, solve with CP-SAT (method auto)."""
    from tpopt.optimizer.core import solve
    from tpopt.optimizer.memory_plan import enforce
    from tpopt.optimizer.result import Request
    from tpopt.optimizer.space import Space

    moe, per_op = FAMILIES[family]
    log = {"time": {}, "rss_mb": {}}
    phase(log, "import", lambda: __import__("tpopt.optimizer.backends.cpsat_model"))
    sc = phase(log, "scenario", lambda: ladder_scenario(moe, per_op, n_moves))
    space = phase(log, "space", lambda: Space.from_scenario(sc))
    mp = phase(log, "memory plan", lambda: enforce(space))
    r = phase(log, "solve", lambda: solve(sc, "cpsat", Request(time_limit=600, seed=0, workers=1), space=space))
    s = r.solver
    log.update(points=space.size(), status=r.status.value, method=s.note, rounds=s.rounds, evaluated=s.evaluated,
               certificate=s.certificate, memory=mp.method, full_mb=mp.peak_bytes / 2**20,
               on_demand_mb=(mp.on_demand_bytes or 0) / 2**20, cost=r.best.metrics["cost"] if r.best else None,
               plan=None if r.best is None else _plan(r.best))
    return log


def fit_exponent(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of log y against log x (None with fewer than two points)."""
    import math

    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys, strict=True) if x > 0 and y > 0]
    if len(pts) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    den = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / den if den else None


def ladder(families: list[str], max_exp: int, quick: bool) -> None:
    print("Ladder: CP-SAT, method auto, each rung in a fresh process; times in seconds (wall, CPU in parentheses),")
    print("peak RSS in MB (the process's high-water mark: the interpreter and OR-Tools included); tables: every table")
    print("at once or per layout group on demand; rounds: master rounds (full) or layout groups tabulated (on demand);")
    print("the certificate is the least bound left unexamined (>= the optimum's cost: proven).")
    for family in families:
        moe, per_op = FAMILIES[family]
        rungs = ladder_rungs(moe, min(max_exp, 8) if quick else max_exp)
        print(f"\n{family} ({'DeepSeek-V3' if moe else 'Llama-3-70B'}, "
              f"{'per-operation' if per_op else 'flat 40 % MFU'} step-time model)")
        print(f"{'rung':>5} {'plans':>10} {'tables':>9} {'space s':>7} {'plan s':>6} {'solve s (CPU)':>14} "
              f"{'CPU s':>6} {'peak MB':>7} {'rounds':>6}  status, certificate, optimum")
        xs, ts, ms = [], [], []
        for k, n, plans in rungs:
            r = run_child(["rung", family, str(n)])
            if "error" in r:
                print(f"  1e{k:<2} {plans:>10.2e}  failed: {r['error']}")
                sys.stdout.flush()
                continue
            t, c, m = r["time"], r["cpu"], r["rss_mb"]
            cpu = c["space"] + c["memory plan"] + c["solve"]
            peak = max(m.values())
            cert = "-" if r["certificate"] is None else f"{r['certificate']:,.0f}"
            tables = "on demand" if r["method"].endswith("on demand") else "full"
            print(f"  1e{k:<2} {r['points']:>10.2e} {tables:>9} {t['space']:>7.2f} {t['memory plan']:>6.2f} "
                  f"{t['solve']:>6.2f} ({c['solve']:>5.2f}) {cpu:>6.2f} {peak:>7.0f} {r['rounds']:>6}  "
                  f"{r['status']}, {cert}, {r['plan']}")
            sys.stdout.flush()
            if plans >= 1e8:
                xs.append(float(r["points"]))
                ts.append(cpu)
                ms.append(peak)
        et, em = fit_exponent(xs, ts), fit_exponent(xs, ms)
        if et is not None:
            print(f"  growth exponent over {min(xs):.1e}-{max(xs):.1e} plans: time (CPU) {et:.2f}, "
                  f"peak RSS {em:.2f}")


def design(overrides):
    """The design case with ``overrides`` (a dict; None deletes a key), or a scenario file (a path)."""
    from tpopt.catalogs import load_catalog
    from tpopt.catalogs.scenario import build_scenario

    return build_scenario(design_raw(overrides), load_catalog())


def design_raw(overrides) -> dict:
    """The raw tables :func:`design` builds its scenario from."""
    from tpopt.catalogs.scenario import read_scenario_file, with_overrides

    if isinstance(overrides, Path):
        return read_scenario_file(overrides)
    raw = read_scenario_file(DESIGN)
    for key, value in overrides.items():
        if value is None:  # delete the key (e.g. the activation reserve: model activations instead)
            table, _, name = key.partition(".")
            raw.get(table, {}).pop(name, None)
    return with_overrides(raw, {k: v for k, v in overrides.items() if v is not None})


# ---------------------------------------------------------------------------------------------
# peak memory per phase (Linux: the high-water mark can be reset; elsewhere it only grows)

def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _peak_mb() -> float:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def phase(log: dict, name: str, fn):
    """Run one phase; record its wall time, its CPU time and its peak resident memory."""
    exact = _reset_peak()
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    log["time"][name] = time.perf_counter() - t0
    log.setdefault("cpu", {})[name] = time.process_time() - c0
    log["rss_mb"][name] = _peak_mb()
    log["rss_exact"] = exact
    return out


# ---------------------------------------------------------------------------------------------
# children: one backend on one space, in a fresh process

def child_solver(row: int, backend: str, analysis: bool) -> dict:
    from tpopt.optimizer.core import solve
    from tpopt.optimizer.report import analysis as report
    from tpopt.optimizer.result import Request
    from tpopt.optimizer.space import Space

    log = {"time": {}, "rss_mb": {}}
    sc = design(SPACES[row][1])
    space = phase(log, "space", lambda: Space.from_scenario(sc))
    req = Request(time_limit=600, seed=0, workers=1)
    if backend in ("cpsat", "highs"):
        module = "tpopt.optimizer.backends.cpsat_model" if backend == "cpsat" else "highspy"
        phase(log, "import", lambda: __import__(module))
        phase(log, "tables", space.build_tables)
    r = phase(log, "solve", lambda: solve(sc, backend, req, space=space))
    if analysis and r.best is not None:
        a = phase(log, "analysis", lambda: report(space, r.best, backend, req, set(r.enforced)))
        log["analysis_by"] = a["oracle"]
    log.update(status=r.status.value, points=space.size(), rounds=r.solver.rounds, evaluated=r.solver.evaluated,
               method=r.solver.note, cost=r.best.metrics["cost"] if r.best else None,
               plan=None if r.best is None else _plan(r.best))
    return log


def _plan(ev) -> str:
    p = ev.plan
    return (f"{p.accelerator} x {p.cards}, ZeRO-{p.zero_stage}, TP {p.tp}, PP {p.pp}"
            + (f" ({p.schedule})" if p.pp > 1 else "") + f", mb {p.micro_batch}, recompute {p.recompute}, "
            f"cost {ev.metrics['cost']:,.0f}")


def enumeration_estimate(space, samples: int, seed: int = 0, budget: float = 60.0) -> tuple[float, int]:
    """CPU seconds the enumerator would take on ``space``, from a timed stratified sample of its groups
    (CPU time, not wall: on a shared machine the wall time of a sample depends on the neighbours).

    A group is one (accelerator, offload, recompute, save mode, schedule) combination with every
    numeric choice (the enumerator's unit of work). Groups cost very different amounts (pipeline
    simulations), and the groups that share a pipeline term -- same accelerator, recompute and
    schedule, other offload and mode -- reuse its results (the evaluator's memo): so the sample draws
    whole such families, stratified by (accelerator, schedule, pp = 1 or pp > 1). The first family of
    a stratum also compiles the stratum's pipeline shapes, which the others reuse (the full run pays it
    once too): each stratum is estimated as first + (families - 1) x the mean of the others.

    Bounded: within a stratum, sampling stops once its share of ``budget`` CPU seconds is spent (at least one
    family is timed), and once the whole budget is spent each remaining stratum is timed on its first family
    only; the strata not reached are extrapolated from the mean per
    family of those timed. A group itself is timed only in part when it is large: at most
    :data:`SAMPLE_GROUPS` of a family's groups, the rest extrapolated from their mean.
    """
    from tpopt.optimizer.enumerate import _groups, enumerate_best
    from tpopt.optimizer.result import Request

    d = space.domains
    families: dict = {}
    for g in _groups(space):
        fixed, pp_idx = g
        stratum = (fixed["acc"], fixed["schedule"], len(pp_idx) == 1 and d["pp"][pp_idx[0]] == 1)
        families.setdefault(stratum, {}).setdefault(fixed["recompute"], []).append(g)
    rng = random.Random(seed)
    total = 0.0
    points = 0
    per = max(2, samples // max(len(families), 1))
    start = time.process_time()
    share = budget / max(len(families), 1)
    timed: list[float] = []  # estimated seconds per family of the strata timed
    skipped = 0  # families of the strata not reached within the budget
    for _stratum, fams in sorted(families.items()):
        keys = sorted(fams)
        if time.process_time() - start > budget and timed:
            skipped += len(keys)
            continue
        pick = [keys[0]] + sorted(rng.sample(keys[1:], min(per, len(keys)) - 1))
        times = []
        t_stratum = time.process_time()
        for ri in pick:  # the real enumerator, restricted to the family's groups (a bounded sample of them)
            groups = fams[ri]
            sample = groups[:SAMPLE_GROUPS]
            t0 = time.process_time()
            points += enumerate_best(space, Request(), groups=sample)[1]
            times.append((time.process_time() - t0) * len(groups) / len(sample))
            if time.process_time() - t_stratum > share:
                break
        rest = times[1:] or times
        est = times[0] + (len(keys) - 1) * sum(rest) / len(rest)
        total += est
        timed.append(est / len(keys))
    if skipped:
        total += skipped * sum(timed) / len(timed)
    return total, points


SAMPLE_GROUPS = 4
"""Groups of one family an enumeration estimate times at most (the others extrapolated from their mean)."""


def child_enumerate(row: int, mode: str, samples: int, budget: float = 60.0) -> dict:
    """``mode`` "estimate": the timed sample; "measure": the whole enumeration (a fresh process, so
    that it starts as cold as a user's run)."""
    from tpopt.optimizer.core import solve
    from tpopt.optimizer.result import Request
    from tpopt.optimizer.space import Space

    log = {"time": {}, "rss_mb": {}}
    sc = design(SPACES[row][1])
    space = Space.from_scenario(sc)
    log["points"] = space.size()
    if mode == "estimate":
        est, sampled = phase(log, "estimate", lambda: enumeration_estimate(space, samples, budget=budget))
        log.update(estimate=est, sampled=sampled)
    else:
        r = phase(log, "enumerate", lambda: solve(sc, "enumerate", Request(time_limit=1e9)))
        log.update(measured=log["cpu"]["enumerate"], measured_wall=log["time"]["enumerate"], status=r.status.value,
                   cost=r.best.metrics["cost"] if r.best else None, plan=None if r.best is None else _plan(r.best))
    return log


def run_child(args: list[str]) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", *args]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------
# cold start

def cli_cold_start(repeats: int = 5) -> list[tuple[float, float]]:
    """(wall, CPU) seconds of the README's main command in a fresh process, imports included."""
    exe = Path(sys.executable).with_name("tpopt")
    cmd = [str(exe), "solve", "--scenario", str(DESIGN), "--deadline", "30d", "--hw", "rtx4090"]
    if not exe.exists():
        cmd = [sys.executable, "-m", "tpopt.cli.main", *cmd[1:]]
    out = []
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        out.append((wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime))
    return out


# ---------------------------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help=f"the ladder up to 1e8 plans (with --spaces: only the first {QUICK} spaces)")
    ap.add_argument("--family", default=",".join(FAMILIES), help="ladder families, comma-separated")
    ap.add_argument("--max-exp", type=int, default=12, help="the ladder's largest rung, 10^N plans")
    ap.add_argument("--spaces", action="store_true", help="the named spaces against enumeration instead of the ladder")
    ap.add_argument("--estimate-budget", type=float, default=60.0,
                    help="CPU seconds an enumeration estimate may sample (then it extrapolates)")
    ap.add_argument("--rows", help="comma-separated row numbers (0-based) instead of all")
    ap.add_argument("--enum-budget", type=float, default=600.0,
                    help="run the enumeration for real when its estimate is below this many seconds")
    ap.add_argument("--samples", type=int, default=16,
                    help="families timed for an enumeration estimate (at least 2 per stratum)")
    ap.add_argument("--check-row", type=int, default=3,
                    help="row whose enumeration is both estimated and measured (checks the estimator)")
    ap.add_argument("--backends", default="cpsat,highs")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        if args.child[0] == "rung":
            print(json.dumps(child_rung(args.child[1], int(args.child[2]))))
            return
        kind, row = args.child[0], int(args.child[1])
        if kind == "enumerate":
            out = child_enumerate(row, args.child[2], int(args.child[3]), float(args.child[4]))
        else:
            out = child_solver(row, kind, args.child[2] == "1")
        print(json.dumps(out))
        return

    if not args.spaces and not args.rows:
        ladder([f for f in args.family.split(",") if f], args.max_exp, args.quick)
        return
    rows = list(range(QUICK if args.quick else len(SPACES)))
    if args.rows:
        rows = [int(x) for x in args.rows.split(",")]
    backends = [b for b in args.backends.split(",") if b]
    cold = cli_cold_start()
    walls, cpus = zip(*cold, strict=False)
    print(f"tpopt solve --scenario examples/design-case.toml --deadline 30d --hw rtx4090, cold start: wall "
          f"{', '.join(f'{t:.2f}' for t in walls)} s (best {min(walls):.2f} s), CPU {min(cpus):.2f}-{max(cpus):.2f} s "
          f"(target < 0.5 s on a quiet 2-core machine)")
    print()
    results = []
    for row in rows:
        label = SPACES[row][0]
        res = {b: run_child([b, str(row), "1"]) for b in backends}
        en = run_child(["enumerate", str(row), "estimate", str(args.samples), str(args.estimate_budget)])
        if "error" not in en and (en["estimate"] <= args.enum_budget or row == args.check_row):
            en.update({k: v for k, v in run_child(["enumerate", str(row), "measure", "0", "0"]).items()
                       if k not in ("time", "rss_mb")} or {})
            en.setdefault("rss_mb", {})
        results.append((row, label, res, en))
        report_row(row, label, res, en, backends)
        sys.stdout.flush()
    print("Times in seconds (wall, and CPU: the machine may be shared), each backend in a fresh process: tables =")
    print("every table the solve reads (closed-form bounds of the pipeline terms on large spaces), solve = the solve")
    print("with exact verification (its tables already built), analysis = the default report (binding families, why")
    print("not cheaper); RSS = peak resident memory of each phase. Enumeration: '~' = estimated from a timed sample")
    print("(stratified families of groups, CPU time), otherwise measured; 'same optimum' compares the cost of every")
    print("backend that ran (the enumeration's included).")


def report_row(row, label, res, en, backends):
    print(f"[{row}] {label}")
    n = next((r.get("points") for r in res.values() if "points" in r), en.get("points"))
    print(f"    plans: {n:,}")
    costs = []
    for b in backends:
        r = res[b]
        if "error" in r:
            print(f"    {b:<6} failed: {r['error']}")
            continue
        t, c, m = r["time"], r["cpu"], r["rss_mb"]
        total = t.get("tables", 0) + t["solve"]
        cpu = c.get("tables", 0) + c["solve"]
        extra = (f", analysis {t['analysis']:.2f} s (CPU {c['analysis']:.2f} s, {r.get('analysis_by')})"
                 if "analysis" in t else "")
        rss = ", ".join(f"{k} {v:,.0f}" for k, v in m.items() if k in ("tables", "solve", "analysis"))
        print(f"    {b:<6} {r['status']}: tables {t.get('tables', 0):.2f} s + solve {t['solve']:.2f} s = {total:.2f} s "
              f"(CPU {cpu:.2f} s){extra}; solver import {t.get('import', 0):.2f} s; peak RSS MB: {rss}")
        print(f"           {r['method']}, {r['rounds']} rounds, {r['evaluated']:,} plans evaluated exactly; "
              f"optimum: {r['plan']}")
        if r["cost"] is not None:
            costs.append(r["cost"])
    if "error" in en:
        print(f"    enumeration failed: {en['error']}")
        enum_t = None
    else:
        est = en["estimate"]
        if "measured" in en:
            enum_t = en["measured"]
            print(f"    enumeration: measured {enum_t:.2f} s CPU ({en['measured_wall']:.2f} s wall; estimate from "
                  f"{en['sampled']:,} sampled plans: {est:.2f} s CPU, "
                  f"estimate / measured {est / max(enum_t, 1e-9):.2f}); "
                  f"optimum: {en['plan']}")
            if en.get("cost") is not None:
                costs.append(en["cost"])
        else:
            enum_t = est
            print(f"    enumeration: ~{est:,.0f} s CPU estimated "
                  f"(from {en['sampled']:,} sampled plans; over the budget)")
    if enum_t is not None:
        for b in backends:
            r = res[b]
            if "error" not in r:
                cpu = r["cpu"].get("tables", 0) + r["cpu"]["solve"]
                mark = "" if "measured" in en else "~"
                print(f"    enumeration / {b} (CPU time): {mark}{enum_t / cpu:,.1f}x")
    same = "n/a" if not costs else ("yes" if max(costs) - min(costs) <= 1e-9 * max(costs) else "NO")
    print(f"    same optimum on every backend that ran: {same} ({len(costs)} backends)")
    print()


if __name__ == "__main__":
    main()
