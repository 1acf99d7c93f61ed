"""Cross-check every backend and method on N random scenarios; print disagreements and tracebacks.

    python benchmarks/cross_check.py                  # 1,000 scenarios, seed 0
    python benchmarks/cross_check.py --n 10000 --seed 7 --out cross-check/ --jobs 2

Each scenario is drawn from a wide region on purpose: the Poisson failure model, save intervals from
minutes to days, card MTBF from hours to a year, tokens from 1e9 to the parser's bound, deadlines from
hours to a century, usable memory from 1 GiB to 16 TiB, budget caps, job-wide loss spikes, async
saves, stragglers, pipelines. It is solved by enumeration (the reference), CP-SAT and HiGHS with
every method (auto, monolithic, decomposed). A *disagreement* is a different verdict (optimal /
infeasible), a different optimal objective (relative 1e-9), a status other than optimal or
infeasible without the time limit having been reached, or a returned plan that fails the exact
evaluation; a *traceback* is any exception. Each is printed and written to ``--out`` as a
reproducer scenario file (``case-<i>.toml``) with a note of what differed.

Under a time limit (``--limited K``): each case that has a verdict is solved K more times, by every
backend and method of :data:`LIMITED_RUNS` in turn, each with a limit drawn log-uniformly from 1 ms to
1 s; ``--sweeps S`` runs S sweeps (the sweep workers, two processes each) of a few points under such a
limit. A limited answer must be the proven optimum (the reference's verdict and objective), a feasible
plan that passes the exact evaluation with the limit said (objective no better than the optimum, a gap
that is unknown or bounds it), or "unknown" (exit 4) with the limit said and no plan -- never a
traceback, never a wrong status. The counts are printed::

    python benchmarks/cross_check.py --n 2000 --limited 6 --sweeps 20 --jobs 2   # >= 10,000 limited solves

The question paths (``--questions N``, issue 36): scenarios with ``[market]`` offers (a spot offer at 1e-4 to
0.05 preemptions per card-hour, on-demand beside it, mixes at spot shares), global-batch choices, two training
stages, half of them under a confidence, answered as ``tpopt solve`` (``plan()`` on CP-SAT, HiGHS, the
enumerator, Pyomo) and ``tpopt explain`` do. The reference is ``plan()`` on the enumerator without a limit (with
batch choices also a brute force over each batch's own scenario); the unlimited CP-SAT solve and explain must
give its verdict and optimum; then ``--limited K`` answers per case under limits from 1 ms to 1 s, each judged as
above and timed at the API (imports done first): past max(0.5 s, 10 %) of its limit in this process's CPU time
is an overrun of the code, in wall time only one of the machine's load (both are counted)::

    python benchmarks/cross_check.py --questions 900 --limited 12 --jobs 2   # >= 10,000 limited answers
"""

from __future__ import annotations

import argparse
import contextlib
import math
import multiprocessing as mp
import os
import sys
import time
import traceback
from pathlib import Path

import numpy as np

RUNS = (("enumerate", "auto"), ("cpsat", "auto"), ("cpsat", "monolithic"), ("cpsat", "decomposed"),
        ("highs", "monolithic"), ("highs", "decomposed"))
MAX_POINTS = 3_000  # keeps the monolithic encodings quick; the decomposition is checked on the same spaces
LIMITED_RUNS = (("enumerate", "auto"), ("cpsat", "auto"), ("cpsat", "monolithic"), ("cpsat", "decomposed"),
                ("highs", "monolithic"), ("highs", "decomposed"), ("pyomo:highs", "monolithic"),
                ("pyomo:highs", "decomposed"))
LIMIT_RANGE = (1e-3, 1.0)  # limited solves: limits drawn log-uniformly between these (s)
LIMITED_STATUSES = ("optimal", "feasible", "unknown", "infeasible")


def _pick(rng, values, lo=1, hi=None):
    """A non-empty random subset of ``values`` (in the original order)."""
    hi = min(hi or len(values), len(values))
    k = int(rng.integers(lo, hi + 1))
    idx = sorted(rng.choice(len(values), size=k, replace=False))
    return [values[i] for i in idx]


def _log_uniform(rng, lo, hi):
    return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def random_raw(rng) -> tuple[dict, str]:
    """One raw scenario (TOML tables) and an objective."""
    pipeline = rng.random() < 0.3
    deadline_d = _log_uniform(rng, 0.1, 36_500.0)
    raw = {
        "model": {"name": str(rng.choice(["qwen3-0.6b", "qwen3-8b", "llama3-8b", "qwen3-14b"]))},
        "task": {"tokens": f"{_log_uniform(rng, 1e9, 1e15):.6g}", "seq_len": int(rng.choice([2048, 4096, 8192])),
                 "global_batch": int(rng.choice([16, 24, 32, 64, 96, 384])),
                 "precision": str(rng.choice(["bf16-mixed", "bf16-mixed-fp32-grad"]))},
        "schedule": {"deadline": f"{deadline_d:.6g}d", "reserved": f"{deadline_d * rng.uniform(0, 0.4):.6g}d"},
        "hardware": {"accelerator": _pick(rng, ["rtx4090", "h100-sxm", "a100-80gb-sxm"], hi=2),
                     "efficiency": round(float(rng.uniform(0.1, 0.7)), 4)},
        "checkpoint": {"write_bandwidth": f"{_log_uniform(rng, 0.5, 50.0):.4g}GB/s",
                       "restore": f"{_log_uniform(rng, 10, 3600):.4g}s",
                       "failure_model": str(rng.choice(["first-order", "poisson"]))},
        "search": {
            "zero_stage": _pick(rng, [0, 1, 2, 3], hi=3),
            "tp": _pick(rng, [1, 2, 4, 8], hi=2),
            "pp": _pick(rng, [1, 2, 4], hi=2) if pipeline else [1],
            "micro_batch": _pick(rng, [1, 2, 4], hi=2),
            "offload": _pick(rng, ["none", "cpu"]),
            "save_interval": _pick(rng, ["auto", "600s", "1800s", "2h", "12h", "2d"], hi=2),
            "save_mode": _pick(rng, ["sync", "async"]),
            "max_cards": int(rng.choice([16, 64, 256, 1024, 4096])),
        },
    }
    ck = raw["checkpoint"]
    if rng.random() < 0.15:
        ck["job_mtbf"] = {"cards": int(rng.choice([256, 1024, 16384])), "interval": f"{_log_uniform(rng, 1, 100):.4g}h"}
    else:
        ck["card_mtbf"] = f"{_log_uniform(rng, 2.0, 400 * 24):.4g}h"
    if rng.random() < 0.2:
        ck["loss_spike_interval"] = f"{_log_uniform(rng, 1, 1000):.4g}h"
    if pipeline:
        raw["search"]["schedule"] = _pick(rng, ["fill-drain", "1f1b", "zb-h1", "zb-h2", "interleaved", "dualpipe"],
                                          hi=2)
    if rng.random() < 0.5:
        raw["memory"] = {"activation_reserve": f"{_log_uniform(rng, 0.5, 60):.4g}GiB"}
    else:
        raw["search"]["recompute"] = _pick(rng, ["none", "full", "mlp", "norm+mlp"], hi=2)
    if rng.random() < 0.3:
        raw["hardware"]["usable_memory"] = f"{_log_uniform(rng, 1, 16 * 1024):.4g}GiB"
    if rng.random() < 0.4:
        raw["input"] = {"workers": int(rng.integers(1, 17)),
                        "sequences_per_worker_s": round(float(rng.uniform(0.5, 4)), 3),
                        "wait": f"{rng.uniform(0, 2):.3g}s"}
    if rng.random() < 0.3:
        raw["stragglers"] = {"sigma": round(float(rng.uniform(0, 0.1)), 4)}
    if rng.random() < 0.3:
        raw["search"]["nics_per_host"] = _pick(rng, [1, 2, 8], hi=2)
    if rng.random() < 0.3:
        raw["cost"] = {"max_cost": round(_log_uniform(rng, 1e2, 1e9), 2)}
    objective = str(rng.choice(["cost", "time"]))
    # drawn last, so that the draws above (and the cases of earlier versions' seeds) stay as they were
    if rng.random() < 0.2:  # a mixture-of-experts model: EP and the capacity factor are decisions
        raw["model"]["name"] = str(rng.choice(["qwen3-30b-a3b", "mixtral-8x7b", "deepseek-v2-lite"]))
        raw["search"]["ep"] = _pick(rng, [1, 2, 4, 8], hi=3)
        raw["search"]["capacity_factor"] = _pick(rng, ["none", 1.0, 1.25], hi=2)
        raw["moe"] = {"imbalance": round(float(rng.uniform(1.0, 1.6)), 3), "max_drop": f"{rng.uniform(0, 20):.3g}%"}
    if rng.random() < 0.15:  # the per-operation step-time model (no flat efficiency stated)
        del raw["hardware"]["efficiency"]
    return raw, objective


def to_toml(raw: dict) -> str:
    """A minimal TOML writer for the generator's tables (strings, numbers, lists, one inline table)."""

    def val(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(val(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{k} = {val(x)}" for k, x in v.items()) + " }"
        return repr(v)

    out = []
    for table, keys in raw.items():
        if table.startswith("_"):
            continue
        out.append(f"[{table}]")
        out += [f"{k} = {val(v)}" for k, v in keys.items()]
        out.append("")
    return "\n".join(out)


def write_reproducer(path: Path, how: str, rec: dict) -> None:
    """A case's scenario file, headed by what differed and each run's answer (``how``: the run's flags)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    note = "".join(f"# {name}: {kind}: {line}\n" for name, kind, detail in rec["problems"]
                   for line in detail.strip().splitlines())
    runs = "".join(f"# {k}: {v}\n" for k, v in rec["runs"].items())
    path.write_text(f"# cross_check {how} case {rec['i']}, objective {rec['objective']}\n{note}{runs}\n"
                    + to_toml(rec["raw"]))


def check_case(i: int, seed: int, time_limit: float, limited: int = 0) -> dict:
    """Solve case ``i`` with every backend and method; return what disagreed (empty: all agree)."""
    from tpopt.catalogs import load_catalog
    from tpopt.catalogs.scenario import build_scenario
    from tpopt.errors import InputError
    from tpopt.models.evaluate import evaluate
    from tpopt.optimizer.core import solve, use_decomposition
    from tpopt.optimizer.result import Request, Status
    from tpopt.optimizer.space import Space

    rng = np.random.default_rng([seed, i])
    raw, objective = random_raw(rng)
    rec = {"i": i, "raw": raw, "objective": objective, "problems": [], "skipped": None, "runs": {}}
    try:
        sc = build_scenario(raw, load_catalog())
        space = Space.from_scenario(sc)
        if space.size() > MAX_POINTS:
            rec["skipped"] = f"{space.size()} points"
            return rec
    except InputError as exc:
        rec["skipped"] = f"input: {exc}"
        return rec
    except Exception:  # noqa: BLE001 - a traceback is a finding
        rec["problems"].append(("build", "traceback", traceback.format_exc()))
        return rec
    ref = None
    auto_is = "decomposed" if use_decomposition(space, Request()) else "monolithic"
    for backend, method in RUNS:
        name = f"{backend}/{method}"
        if method == "auto" and backend != "enumerate" and (backend, auto_is) in RUNS:
            continue  # "auto" picks one of the methods that are run anyway
        req = Request(objective=objective, time_limit=time_limit, seed=0, workers=1, method=method)
        try:
            r = solve(sc, backend, req, space=space)  # one space: its term tables are built once
        except Exception:  # noqa: BLE001
            rec["problems"].append((name, "traceback", traceback.format_exc()))
            continue
        key = "cost" if objective == "cost" else "finish_days"
        val = r.best.metrics[key] if r.feasible else None
        rec["runs"][name] = (r.status.value, val, r.solver.fallback)
        if r.status not in (Status.OPTIMAL, Status.INFEASIBLE):
            if not r.solver.limit_reached:
                rec["problems"].append((name, "status", f"{r.status.value} without reaching the time limit"))
            continue  # a time limit is not a verdict
        if r.feasible:
            ev = evaluate(sc, r.best.plan)
            if not ev.feasible:
                rec["problems"].append((name, "plan", f"returned plan violates {[c.name for c in ev.violated()]}"))
        if ref is None:
            ref = (name, r.status.value, val)
            continue
        if r.status.value != ref[1]:
            rec["problems"].append((name, "verdict", f"{r.status.value} vs {ref[0]} {ref[1]}"))
        elif val is not None and not math.isclose(val, ref[2], rel_tol=1e-9):
            rec["problems"].append((name, "objective", f"{val!r} vs {ref[0]} {ref[2]!r}"))
    rec["limited"] = {k: 0 for k in LIMITED_STATUSES}
    if limited and ref is not None and not rec["problems"]:
        lrng = np.random.default_rng([seed, i, 1])  # its own stream: the cases above stay as they were
        if not _WARM:
            warm_lazy_imports()
        for backend in sorted({b for b, _ in LIMITED_RUNS} - {b for b, _ in RUNS} - _WARM):
            _WARM.add(backend)  # API-level timing, imports done first: once per process, unlimited
            solve(sc, backend, Request(objective=objective, seed=0, workers=1), space=_fresh_space(space))
        for j in range(limited):
            backend, method = LIMITED_RUNS[(i + j) % len(LIMITED_RUNS)]
            t = _log_uniform(lrng, *LIMIT_RANGE)
            name = f"{backend}/{method} at {t * 1e3:.3g} ms"
            t0, cpu0 = time.perf_counter(), time.process_time()
            problem = check_limited(sc, space, backend, method, objective, t, ref[1], ref[2], rec["limited"])
            over, cpu_over = time.perf_counter() - t0 - t, time.process_time() - cpu0 - t
            rec["overrun"] = max(rec.get("overrun", 0.0), over)
            if problem:
                rec["problems"].append((name, *problem))
            elif over > max(OVERRUN[0], OVERRUN[1] * t):  # in CPU time too: the code's; else the machine's load
                if cpu_over > max(OVERRUN[0], OVERRUN[1] * t):
                    rec["problems"].append((name, "limit overrun", f"{over:.3f} s past, {cpu_over:.3f} s CPU"))
                else:
                    rec["wall only"] = rec.get("wall only", 0) + 1
    return rec


def check_limited(sc, space, backend: str, method: str, objective: str, t: float, verdict: str,
                  optimum: float | None, counts: dict) -> tuple[str, str] | None:
    """One solve under a limit of ``t`` s against the reference ``verdict`` / ``optimum``: (kind, detail)
    of what is wrong, None when the answer is honest (``counts[status]`` counts it)."""
    from tpopt.models.evaluate import evaluate
    from tpopt.optimizer.core import solve
    from tpopt.optimizer.result import Request, Status

    req = Request(objective=objective, time_limit=t, seed=0, workers=1, method=method)
    try:
        r = solve(sc, backend, req, space=_fresh_space(space))
    except BaseException:  # noqa: BLE001 - a traceback (or an escaped TimeLimitReached) is a finding
        return "traceback", traceback.format_exc()
    key = "cost" if objective == "cost" else "finish_days"
    s = r.solver
    counts[r.status.value] = counts.get(r.status.value, 0) + 1
    if r.status == Status.OPTIMAL:
        if verdict != "optimal" or not math.isclose(r.best.metrics[key], optimum, rel_tol=1e-9):
            return "limited status", f"optimal {r.best.metrics[key]!r} vs reference {verdict} {optimum!r}"
        if s.gap != 0.0:
            return "limited status", f"optimal with gap {s.gap!r}"
    elif r.status == Status.INFEASIBLE:
        if verdict != "infeasible":
            return "limited status", f"infeasible vs reference {verdict}"
    elif not s.limit_reached or not s.limit_phase:
        return "limited status", f"{r.status.value} without the time limit said"
    elif r.status == Status.FEASIBLE:
        val = r.best.metrics[key]
        if verdict != "optimal" or val < optimum * (1 - 1e-9):
            return "limited status", f"feasible {val!r} vs reference {verdict} {optimum!r}"
        if not evaluate(sc, r.best.plan).feasible:
            return "limited status", "feasible plan that fails the exact evaluation"
        if s.gap is not None and (s.gap < 0 or val * (1 - s.gap) > optimum * (1 + 1e-6)):
            return "limited status", f"gap {s.gap!r} excludes the optimum {optimum!r} (plan {val!r})"
    elif r.status == Status.UNKNOWN:
        if r.plans or s.gap is not None:
            return "limited status", f"unknown with {len(r.plans)} plan(s), gap {s.gap!r}"
    else:
        return "limited status", f"status {r.status.value}"
    return None


def _fresh_space(space):
    """A fresh space over the same domains (each limited solve builds its own tables: the limit covers them)."""
    from tpopt.optimizer.space import Space

    return Space(space.sc, dict(space.domains))


def check_sweep(k: int, seed: int) -> dict:
    """Sweep ``k``: the design case over a few deadlines on two worker processes under a drawn limit; every
    row must be a status of :data:`LIMITED_STATUSES` (never ``error``), an optimal row the unlimited optimum."""
    import tempfile

    from tpopt import api

    rng = np.random.default_rng([seed, 10**6 + k])
    t = _log_uniform(rng, *LIMIT_RANGE)
    solver = str(rng.choice(["highs", "cpsat", "enumerate", "auto"]))
    deadline = f"{int(rng.integers(15, 30))}d:{int(rng.integers(31, 45))}d:5d"
    rec = {"k": k, "problems": [], "limited": {s: 0 for s in LIMITED_STATUSES}, "what": f"{solver} {t * 1e3:.3g} ms"}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            rows = api.sweep(deadline=deadline, solver=solver, time_limit=t, out=f"{tmp}/s.csv", workers=2).rows
            ref = {r["point_key"]: r for r in api.sweep(deadline=deadline, solver="enumerate", out=f"{tmp}/r.csv",
                                                          workers=1).rows}
    except BaseException:  # noqa: BLE001
        rec["problems"].append(("sweep", "traceback", traceback.format_exc()))
        return rec
    for row in rows:
        st = row["status"]
        want = ref[row["point_key"]]
        rec["limited"][st] = rec["limited"].get(st, 0) + 1
        if st not in LIMITED_STATUSES:
            rec["problems"].append(("sweep", "limited status", f"row status {st!r}: {row.get('note')}"))
        elif st in ("optimal", "infeasible") and want["status"] != st:
            rec["problems"].append(("sweep", "limited status", f"{st} vs reference {want['status']}"))
        elif st == "optimal" and not math.isclose(row["cost"], want["cost"], rel_tol=1e-9):
            rec["problems"].append(("sweep", "limited status", f"cost {row['cost']!r} vs {want['cost']!r}"))
        elif st == "feasible" and not row["cost"] >= want["cost"] * (1 - 1e-9):
            rec["problems"].append(("sweep", "limited status", f"feasible {row['cost']!r} below {want['cost']!r}"))
    return rec


# ---------------------------------------------------------------------------------------------
# The question paths (issue 36): [market] offers (spot, mixes at spot shares), --confidence, training stages,
# global-batch choices and explain, each answered through plan() as `tpopt solve` / `tpopt explain` do.

PLAN_LIMITED = (("solve", "cpsat"), ("solve", "highs"), ("solve", "enumerate"), ("solve", "pyomo:highs"),
                ("explain", "cpsat"), ("explain", "highs"))
"""Limited answers of a question case, in turn: plan() (``tpopt solve``) on each backend, and explain."""
PLAN_KINDS = ("market", "market", "batch", "batch", "staged")
OVERRUN = (0.5, 0.10)  # a limit is kept when the answer comes within max(0.5 s, 10 % of the limit) of it
REGION_TOML = '[region."cloud-x/east"]\nsource = "cross_check"\n'


def _offer_toml(name: str, market: str, price: float, rho: float = 0.0, reacquire_s: float = 0.0,
                available: int = 256) -> str:
    extra = f'preempt_per_card_hour = {rho!r}\nreacquire = "{reacquire_s:.0f}s"\n' if market == "spot" else ""
    return (f'[offer.{name}]\nprovider = "cloud-x"\nregion = "east"\naccelerator = "h100-sxm"\ncards_per_host = 8\n'
            f'market = "{market}"\nprice_card_hour = {price:.4g}\navailable = {available}\ndate = "2026-10"\n'
            f'source = "cross_check offer"\n{extra}\n')


def random_question(rng) -> tuple[dict, str, str]:
    """One question scenario: (raw tables, offers TOML or "", objective). The kind is [market] offers (spot at
    1e-4 to 0.05 preemptions per card-hour, on-demand beside it, mixes at spot shares), global-batch choices
    under a critical batch, or two training stages; a confidence on half of the market and batch cases."""
    kind = str(rng.choice(PLAN_KINDS))
    deadline_d = _log_uniform(rng, 0.5, 90.0)
    raw: dict = {
        "model": {"name": str(rng.choice(["qwen3-0.6b", "qwen3-8b", "llama3-8b"]))},
        "task": {"tokens": f"{_log_uniform(rng, 1e10, 2e12):.4g}", "seq_len": 4096, "global_batch": 256},
        "schedule": {"deadline": f"{deadline_d:.4g}d", "reserved": f"{deadline_d * rng.uniform(0, 0.2):.4g}d"},
        "hardware": {"accelerator": ["h100-sxm"], "efficiency": round(float(rng.uniform(0.25, 0.55)), 3)},
        "checkpoint": {"save_interval": str(rng.choice(["auto", "auto", "900s"])),
                       "mode": str(rng.choice(["sync", "async"]))},
        "search": {"zero_stage": _pick(rng, [0, 1, 3], hi=2), "tp": _pick(rng, [1, 2, 4], hi=2), "pp": [1],
                   "micro_batch": _pick(rng, [1, 2], hi=2), "max_cards": int(rng.choice([32, 64, 128, 256]))},
    }
    objective = str(rng.choice(["cost", "cost", "time"]))
    offers = ""
    if kind == "market":
        rho, wait = _log_uniform(rng, 1e-4, 5e-2), float(rng.uniform(0, 3 * 3600))
        offers = REGION_TOML + _offer_toml("spot", "spot", float(rng.uniform(1.0, 2.2)), rho, wait)
        names = ["spot"]
        if rng.random() < 0.7:
            offers += _offer_toml("od", "on-demand", float(rng.uniform(2.0, 4.0)),
                                  available=int(rng.choice([16, 64, 256])))
            names.append("od")
            if rng.random() < 0.5:
                raw["market"] = {"spot_shares": _pick(rng, [0.25, 0.5, 0.75], hi=2)}
        raw.setdefault("market", {})["offers"] = names
    elif kind == "batch":
        raw["hardware"]["accelerator"] = _pick(rng, ["h100-sxm", "a100-80gb-sxm"], hi=2)
        raw["task"]["critical_batch"] = str(rng.choice(["1M", "4M"]))
        raw["search"]["global_batch"] = _pick(rng, [64, 128, 256, 512, 1024], lo=2, hi=3)
        if rng.random() < 0.3:
            raw["risk"] = {"preempt_per_card_day": float(rng.choice([0.01, 0.1, 0.3])),
                           "reacquire": f"{rng.uniform(0, 7200):.0f}s"}
    else:
        del raw["task"]["tokens"]
        objective = "cost"
        raw["task"]["stages"] = [
            {"name": "short", "tokens": f"{_log_uniform(rng, 1e10, 1e12):.4g}", "seq_len": 4096,
             "global_batch": 256},
            {"name": "long", "tokens": f"{_log_uniform(rng, 1e9, 1e11):.4g}", "seq_len": int(rng.choice([8192, 16384])),
             "global_batch": 64}]
    if kind != "staged" and rng.random() < 0.5:
        raw["schedule"]["confidence"] = f"{int(rng.choice([50, 80, 90, 95]))}%"
    if rng.random() < 0.15:  # the per-operation step-time model
        del raw["hardware"]["efficiency"]
    return raw, offers, objective


_WARM: set[str] = set()  # the backends this process has run once (their modules imported)

LAZY_IMPORTS = ("tpopt.optimizer.confidence", "tpopt.optimizer.infeasible", "tpopt.optimizer.explain.chain",
                "tpopt.optimizer.ondemand", "tpopt.optimizer.decompose")
"""Modules tpopt imports on first use inside a solve or an explanation (the ``# lazy:`` imports of optimizer/plan.py,
core.py and explain/), which a timed answer must not pay for."""


def warm_lazy_imports() -> None:
    """Load, before any answer is timed, what tpopt loads lazily on first use (:data:`LAZY_IMPORTS`) and SciPy's
    special-function ufuncs, which tpopt.models.cephes loads once a process has evaluated SCIPY_LIMIT values in
    numpy: when that happens depends on what ran before in the process, not on the answer timed (alone, a
    confidence question's first limited answer loaded them, and the SciPy stack that Pyomo then imports beside
    them: 1.6 CPU s against a 38 ms limit). The limits are the code's to keep, the imports a process's once."""
    import importlib

    from tpopt.models import cephes

    cephes.scipy_ufuncs()
    for name in LAZY_IMPORTS:
        importlib.import_module(name)


def _answer(pr_or_ex, objective: str) -> tuple[str, float | None, bool, bool]:
    """(status, objective value or None, limit said, has a plan) of plan()'s report or an explanation."""
    if isinstance(pr_or_ex, dict):  # an explanation
        d = pr_or_ex
        solver = d.get("solver") or {}
        limit = bool(solver.get("time_limit_reached"))
        if "total" in d and isinstance(d["total"], dict) and "stages" in d:
            has = d["status"] in ("optimal", "feasible") and bool(d.get("stages"))
            return d["status"], (d["total"].get("cost") if has else None), limit, has
        has = "plan" in d
        val = (d["cost"] if objective == "cost" else d["finish_days"]) if has else None
        return d["status"], val, limit, has
    pr = pr_or_ex
    limit = bool(pr.solver.limit_reached)
    if pr.staged is not None or "total" in pr.report:
        has = pr.feasible
        return pr.status.value, (pr.report["total"]["cost"] if has else None), limit, has
    has = pr.best is not None
    key = "cost" if objective == "cost" else "finish_days"
    return pr.status.value, (pr.best.metrics[key] if has else None), limit, has


def judge(got: tuple[str, float | None, bool, bool], verdict: str, optimum: float | None,
          rel: float = 1e-6) -> str | None:
    """What is wrong with an answer against the reference (``verdict``, ``optimum``), None when it is honest:
    optimal must be the optimum, infeasible the reference's verdict, feasible a plan no better than the
    optimum with the limit said, anything else the limit said and no plan."""
    status, val, limit, has = got
    if status == "optimal":
        if verdict != "optimal" or val is None or not math.isclose(val, optimum, rel_tol=rel):
            return f"optimal {val!r} vs reference {verdict} {optimum!r}"
    elif status == "infeasible":
        if verdict != "infeasible":
            return f"infeasible vs reference {verdict} {optimum!r}"
    elif not limit:
        return f"{status} without the time limit said"
    elif status == "feasible":
        if verdict != "optimal" or val is None or val < optimum * (1 - rel):
            return f"feasible {val!r} vs reference {verdict} {optimum!r}"
    elif has:
        return f"{status} with a plan"
    return None


def question_case(i: int, seed: int, limited: int) -> dict:
    """Question case ``i``: the reference (plan() on the enumerator, unlimited; with batch choices and no
    confidence also a brute force over the batches), the unlimited CP-SAT solve and explain against it, then
    ``limited`` answers of :data:`PLAN_LIMITED` in turn under limits drawn log-uniformly from 1 ms to 1 s,
    each judged (:func:`judge`) and timed against max(0.5 s, 10 %) of its limit."""
    import tempfile
    from dataclasses import replace

    from tpopt.catalogs import load_catalog
    from tpopt.catalogs.scenario import build_scenario
    from tpopt.errors import InputError
    from tpopt.optimizer import core
    from tpopt.optimizer import question as Q
    from tpopt.optimizer.outer import at_batch, batch_choices
    from tpopt.optimizer.plan import plan
    from tpopt.optimizer.result import Request

    rng = np.random.default_rng([seed, i, 2])
    raw, offers, objective = random_question(rng)
    kind = "market" if offers else "staged" if "stages" in raw["task"] else "batch"
    if "confidence" in raw["schedule"]:
        kind += "+confidence"
    rec = {"i": i, "raw": raw, "offers": offers, "objective": objective, "kind": kind, "problems": [],
           "skipped": None, "runs": {}, "limited": {}, "overrun": 0.0, "answers_s": 0.0}
    try:
        with tempfile.TemporaryDirectory() as d:
            if offers:
                (Path(d) / "offers.toml").write_text(offers)
            sc = build_scenario(raw, load_catalog([d] if offers else []))
    except InputError as exc:
        rec["skipped"] = f"input: {exc}"
        return rec
    except Exception:  # noqa: BLE001 - a traceback is a finding
        rec["problems"].append(("build", "traceback", traceback.format_exc()))
        return rec

    def ask(path: str, backend: str, t: float):
        req = Request(objective=objective, time_limit=t, seed=0, workers=1)
        if path == "explain":
            return Q.explain_request(sc, backend, req, raw=raw)
        return plan(sc, backend, req, analyse=False, why=False)

    try:
        ref = _answer(ask("solve", "enumerate", 600.0), objective)
    except InputError as exc:
        rec["skipped"] = f"input: {exc}"
        return rec
    except Exception:  # noqa: BLE001
        rec["problems"].append(("enumerate", "traceback", traceback.format_exc()))
        return rec
    rec["runs"]["enumerate"] = ref[:2]
    if ref[0] not in ("optimal", "infeasible"):
        rec["skipped"] = f"reference {ref[0]}"
        return rec
    verdict, optimum = ref[0], ref[1]
    if kind == "batch" and objective == "cost":  # the oracle: each batch's own scenario, enumerated
        costs = []
        for b in batch_choices(sc):
            one = at_batch(sc, b)
            r = core.solve(replace(one, search=replace(one.search, global_batch=(b,))), "enumerate",
                           Request(time_limit=600.0))
            if r.best is not None:
                costs.append(r.best.metrics["cost"])
        brute = min(costs) if costs else None
        if (brute is None) != (optimum is None) or (brute is not None and not math.isclose(brute, optimum,
                                                                                            rel_tol=1e-9)):
            rec["problems"].append(("brute force", "verdict", f"{brute!r} over the batches vs plan() {optimum!r}"))
    for path, backend in (("solve", "cpsat"), ("explain", "cpsat")):
        name = f"{path} {backend}"
        try:
            got = _answer(ask(path, backend, 600.0), objective)
        except Exception:  # noqa: BLE001
            rec["problems"].append((name, "traceback", traceback.format_exc()))
            continue
        rec["runs"][name] = got[:2]
        wrong = judge(got, verdict, optimum)
        if wrong:
            rec["problems"].append((name, "verdict", wrong))
    if limited and not _WARM:  # API-level timing, imports done first: each backend once, unlimited, per process
        warm_lazy_imports()  # first: the backends' own imports then see SciPy loaded (Pyomo imports more with it)
        _WARM.update(b for _, b in PLAN_LIMITED)
        for b in sorted(_WARM):
            ask("solve", b, 600.0)
    lrng = np.random.default_rng([seed, i, 3])
    for j in range(limited):
        path, backend = PLAN_LIMITED[(i + j) % len(PLAN_LIMITED)]
        t = _log_uniform(lrng, *LIMIT_RANGE)
        name = f"{path} {backend} at {t * 1e3:.3g} ms"
        t0, cpu0 = time.perf_counter(), time.process_time()
        try:
            got = _answer(ask(path, backend, t), objective)
        except BaseException:  # noqa: BLE001 - a traceback (or an escaped TimeLimitReached) is a finding
            rec["problems"].append((name, "traceback", traceback.format_exc()))
            continue
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        rec["answers_s"] += wall
        rec["limited"][got[0]] = rec["limited"].get(got[0], 0) + 1
        over = wall - t
        rec["overrun"] = max(rec["overrun"], over)
        rec["cpu overrun"] = max(rec.get("cpu overrun", 0.0), cpu - t)
        allowed = max(OVERRUN[0], OVERRUN[1] * t)
        if over > allowed:  # past the limit in CPU time too: the code's; in wall time only: the machine's load
            kind = "limit overrun" if cpu - t > allowed else "limit overrun (wall only)"
            rec["problems"].append((name, kind, f"answered in {wall:.3f} s ({got[0]}; this process's CPU "
                                                f"{cpu:.3f} s, load {os.getloadavg()[0]:.1f})"))
        wrong = judge(got, verdict, optimum)
        if wrong:
            rec["problems"].append((name, "limited status", wrong))
    return rec


def run_questions(n: int, start: int, seed: int, limited: int, jobs: int, out: Path) -> dict:
    """:func:`question_case` for cases ``start`` .. ``start + n``; prints each problem and the totals (answers,
    wrong verdicts, tracebacks, worst overrun, answers per second); writes a reproducer per case with one."""
    t0 = time.perf_counter()
    tot = {"cases": 0, "skipped": 0, "answers": 0, "wrong verdicts": 0, "tracebacks": 0, "overruns": 0,
           "wall-only overruns": 0, "worst overrun s": 0.0, "worst CPU overrun s": 0.0, "answer s": 0.0}
    kinds: dict[str, int] = {}
    statuses: dict[str, int] = {}
    args = [(i, seed, limited) for i in range(start, start + n)]
    with pooled(_question_worker, args, jobs, 1) as results:
        for done, rec in enumerate(results, 1):
            tot["cases"] += 1
            tot["skipped"] += bool(rec["skipped"])
            kinds[rec["kind"]] = kinds.get(rec["kind"], 0) + 1
            for st, k in rec["limited"].items():
                statuses[st] = statuses.get(st, 0) + k
                tot["answers"] += k
            tot["worst overrun s"] = max(tot["worst overrun s"], rec["overrun"])
            tot["worst CPU overrun s"] = max(tot["worst CPU overrun s"], rec.get("cpu overrun", 0.0))
            tot["answer s"] += rec["answers_s"]
            for name, kind, detail in rec["problems"]:
                key = {"traceback": "tracebacks", "limit overrun": "overruns",
                       "limit overrun (wall only)": "wall-only overruns"}.get(kind, "wrong verdicts")
                tot[key] += 1
                print(f"question {rec['i']} ({rec['kind']}, {rec['objective']}): {name}: {kind}: "
                      f"{detail.strip().splitlines()[-1]}", flush=True)
            if rec["problems"]:
                write_reproducer(out / f"question-{rec['i']}.toml", f"--questions, seed {seed}", rec)
                if rec["offers"]:
                    (out / f"question-{rec['i']}-offers.toml").write_text(rec["offers"])
            if done % 20 == 0:
                print(f"... {done:,} questions, {time.perf_counter() - t0:,.0f} s: {tot}", flush=True)
    wall = time.perf_counter() - t0
    rate = tot["answers"] / wall if wall else 0.0
    drawn = ", ".join(f"{v} {k}" for k, v in sorted(kinds.items()))
    answered = ", ".join(f"{v:,} {k}" for k, v in sorted(statuses.items()))
    print(f"cross_check questions: {n:,} scenarios (seed {seed}; {drawn}), {tot['skipped']} skipped; "
          f"{tot['answers']:,} limited answers ({answered}; {len(PLAN_LIMITED)} solve/explain paths in turn, "
          f"limits {LIMIT_RANGE[0] * 1e3:g} ms to {LIMIT_RANGE[1]:g} s): {tot['wrong verdicts']} wrong verdicts, "
          f"{tot['tracebacks']} tracebacks, {tot['overruns']} limits overrun beyond max({OVERRUN[0]:g} s, "
          f"{OVERRUN[1]:.0%}) in CPU time, {tot['wall-only overruns']} more in wall time only (the machine's load); "
          f"worst overrun {tot['worst overrun s']:.3f} s wall, {tot['worst CPU overrun s']:.3f} s CPU; "
          f"{wall:,.0f} s wall on {jobs} job(s), {rate:.2f} answers/s", flush=True)
    return tot


@contextlib.contextmanager
def pooled(fn, args: list, jobs: int, chunksize: int):
    """``fn`` over ``args`` in order, on ``jobs`` forked processes (in this one for a single job)."""
    pool = mp.get_context("fork").Pool(jobs) if jobs > 1 else None
    try:
        yield pool.imap(fn, args, chunksize=chunksize) if pool else map(fn, args)
    finally:
        if pool:
            pool.close()
            pool.join()


def _question_worker(args):
    i, seed, limited = args
    return question_case(i, seed, limited)


def _worker(args):
    i, seed, time_limit, limited = args
    if i < 0:  # a sweep (its own worker processes)
        return check_sweep(-i - 1, seed)
    return check_case(i, seed, time_limit, limited)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1000, help="number of random scenarios (default 1,000)")
    ap.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")
    ap.add_argument("--start", type=int, default=0, help="first case index (to resume or split a run)")
    ap.add_argument("--out", default="cross-check", help="directory for reproducer files")
    ap.add_argument("--time-limit", type=float, default=120.0, help="per solve, s (a limit hit is not a verdict)")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes")
    ap.add_argument("--limited", type=int, default=0, help="limited solves per case (limits from 1 ms to 1 s)")
    ap.add_argument("--sweeps", type=int, default=0, help="sweeps under a drawn limit (two workers each)")
    ap.add_argument("--questions", type=int, default=0,
                    help="question scenarios instead ([market], --confidence, stages, batch choices, explain)")
    a = ap.parse_args(argv)
    out = Path(a.out)
    if a.questions:
        tot = run_questions(a.questions, a.start, a.seed, a.limited, a.jobs, out)
        return 1 if tot["wrong verdicts"] or tot["tracebacks"] or tot["overruns"] else 0
    t0 = time.perf_counter()
    counts = {"checked": 0, "skipped": 0, "disagreements": 0, "tracebacks": 0, "limit": 0}
    limited = {s: 0 for s in LIMITED_STATUSES}
    wrong = {"tracebacks": 0, "wrong statuses": 0, "overruns": 0, "wall only": 0}
    worst = 0.0
    jobs = [(i, a.seed, a.time_limit, a.limited) for i in range(a.start, a.start + a.n)]
    sweeps = [(-k - 1, a.seed, a.time_limit, 0) for k in range(a.sweeps)]
    with pooled(_worker, jobs, a.jobs, 4) as results:
        for rec in (map(_worker, sweeps)):  # sweeps first, one at a time (each starts its own workers)
            for st, n in rec["limited"].items():
                limited[st] = limited.get(st, 0) + n
            for _, kind, detail in rec["problems"]:
                wrong["tracebacks" if kind == "traceback" else "wrong statuses"] += 1
                print(f"sweep {rec['k']} ({rec['what']}): {kind}: {detail.strip().splitlines()[-1]}", flush=True)
        for done, rec in enumerate(results, 1):
            for st, n in rec.get("limited", {}).items():
                limited[st] = limited.get(st, 0) + n
            worst = max(worst, rec.get("overrun", 0.0))
            wrong["wall only"] += rec.get("wall only", 0)
            for name, kind, _ in rec["problems"]:
                if kind == "limited status" or " ms" in name:
                    wrong[{"traceback": "tracebacks", "limit overrun": "overruns"}.get(kind, "wrong statuses")] += 1
            if rec["skipped"]:
                counts["skipped"] += 1
            else:
                counts["checked"] += 1
                stopped = [k for k, (s, _, _) in rec["runs"].items() if s not in ("optimal", "infeasible")]
                counts["limit"] += bool(stopped)
                if stopped:  # not a verdict, and not a disagreement: said, so it can be looked at
                    print(f"case {rec['i']}: time limit reached by {', '.join(stopped)}", flush=True)
            for name, kind, detail in rec["problems"]:
                counts["tracebacks" if kind == "traceback" else "disagreements"] += 1
                print(f"case {rec['i']}: {name}: {kind}: {detail.strip().splitlines()[-1]}", flush=True)
            if rec["problems"]:
                write_reproducer(out / f"case-{rec['i']}.toml", f"--seed {a.seed}", rec)
            if done % 100 == 0:
                print(f"... {done:,} cases, {time.perf_counter() - t0:,.0f} s: {counts}", flush=True)
    wall = time.perf_counter() - t0
    print(f"cross_check: {a.n:,} scenarios (seed {a.seed}), {counts['checked']:,} checked through "
          f"{len(RUNS)} backend/method runs each, {counts['skipped']:,} skipped (space above {MAX_POINTS:,} "
          f"points or input refused), {counts['limit']:,} with a run stopped by its time limit; "
          f"{counts['disagreements']} disagreements, {counts['tracebacks']} tracebacks; {wall:,.0f} s")
    if a.limited or a.sweeps:
        total = sum(limited.values())
        print(f"cross_check under time limits ({LIMIT_RANGE[0] * 1e3:g} ms to {LIMIT_RANGE[1]:g} s, log-uniform; "
              f"{len(LIMITED_RUNS)} backend/method runs in turn, {a.sweeps} sweeps): {total:,} limited answers: "
              + ", ".join(f"{n:,} {st}" for st, n in limited.items())
              + f"; {wrong['tracebacks']} tracebacks, {wrong['wrong statuses']} wrong statuses; "
              f"{wrong['overruns']} limits overrun beyond max({OVERRUN[0]:g} s, {OVERRUN[1]:.0%}) in CPU time, "
              f"{wrong['wall only']} in wall time only; worst overrun {worst:.3f} s wall")
    return 1 if counts["disagreements"] or counts["tracebacks"] else 0


if __name__ == "__main__":
    sys.exit(main())
