"""Fit each reference stack's grouped expert GEMM efficiency on its published MoE runs, the cards fixed.

The cards of catalogs/performance.toml are calibrated on dense runs only (benchmarks/validate_published.py
``in_envelope``); a MoE run is predicted with every relation the model has for its layer (router, permutations,
the grouped expert GEMMs with their tiles, waves over the resident experts, FP8 casts and the per-expert host
floor, the dispatcher's all-to-all and its overlap). On the published Megatron-Core MoE runs that prediction is
too fast in the median (-5.1 % over 13 runs) while the dense runs of the same cards centre on zero. No published
per-kernel figure separates what Transformer Engine's grouped calls lose (a multi-stream loop of one cuBLASLt GEMM
per local expert with its stream synchronisation, or the fused CuTe DSL grouped MLP) from the MoE layer's other
costs, so the loss is a fitted factor, like a stack's kernel efficiency: g (catalogs/stacks.toml
``grouped_gemm_efficiency``) divides the time of each grouped expert GEMM call as modelled, whatever bounds it
(models/steptime.py ``grouped_call_time``: t_call = t_model / g). Dense GEMMs, the router and the shared experts
keep their time; dense runs do not move.

A factor on the calls' GEMM efficiency instead (inside the roofline, below the host floor) was tried and rejected:
the runs whose calls sit at the per-expert floor (Qwen3 on B200 with 16 local experts) or whose time is the
exposed all-to-all hardly respond, so closing the median takes g = 0.70 and pushes the compute-bound GB200 BF16
runs to +18 %, a worse fit (RMS ln error 0.076 at best against 0.068 for the call time).

This script fits g on the MoE runs of each reference stack (Megatron-Core: the MoE rows of the tables under
benchmarks/data/), every card at its catalog parameters (run it after a card refit, as fit_stacks.py, which
calls it): the g at which the median of ln(predicted / published) over those runs is zero (a 1-D fit, robust to
runs whose error lies in other physics), and the leave-one-out error of each run (g fitted on the stack's other
MoE runs). ``--write`` rewrites the stack's ``grouped_gemm_efficiency`` and its source in catalogs/stacks.toml.

    .venv/bin/python benchmarks/fit_grouped_gemm.py [--write] [--data runs.csv ...]
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = sorted((ROOT / "benchmarks" / "data").glob("*.csv"))
STACKS_TOML = ROOT / "catalogs" / "stacks.toml"

from tpopt.catalogs import load_catalog  # noqa: E402
from tpopt.errors import InputError  # noqa: E402
from tpopt.optimizer import calibrate as C  # noqa: E402
from tpopt.optimizer.calibrate import MeasuredRun  # noqa: E402
from tpopt.optimizer.runs import runs_from_csv  # noqa: E402

REFERENCE = ("megatron-core", "megatron-lm-2021")
"""Stacks whose runs calibrate the cards (fit_stacks.py REFERENCE is this one): their MoE runs fit g."""

GRID = np.round(np.arange(0.50, 1.5001, 0.01), 4)
"""Candidate factors (the fit interpolates between neighbours)."""


def log_errors(runs: Sequence[MeasuredRun], cat, grid: np.ndarray = GRID,
               field: str = "grouped_gemm_efficiency", perf: Callable[[str], Any] | None = None) -> np.ndarray:
    """ln(predicted / published) per run (rows) and factor of ``grid`` (columns), every card at its catalog
    parameters (or ``perf(card)``'s) and the stack's ``field`` (a StackProfile factor: grouped_gemm_efficiency,
    ring_step_efficiency) set to each factor (an array: one prediction per value)."""
    rows = []
    card = perf or cat.perf
    for r in runs:
        sc = replace(r.scenario, stack=replace(r.scenario.stack, **{field: grid}))
        rows.append(np.log(C.predict(replace(r, scenario=sc), card(r.accelerator)).step_s / r.measured_step_s))
    return np.vstack(rows)


def median_root(errs: np.ndarray, grid: np.ndarray = GRID) -> float:
    """The factor at which the median over runs (rows) of the log errors crosses zero (they fall as g grows),
    by linear interpolation between grid points; the grid's end where it never does."""
    med = np.median(errs, axis=0)
    below = np.nonzero(med <= 0.0)[0]
    if below.size == 0:
        return float(grid[-1])
    i = int(below[0])
    if i == 0:
        return float(grid[0])
    m0, m1 = med[i - 1], med[i]
    return float(grid[i - 1] + (grid[i] - grid[i - 1]) * m0 / (m0 - m1))


def at(errs: np.ndarray, g: float, grid: np.ndarray = GRID) -> np.ndarray:
    """Relative errors (predicted / published - 1) of each run at factor g (interpolated on the grid)."""
    return np.expm1(np.array([np.interp(g, grid, e) for e in errs]))


def fit_factor(errs: np.ndarray, grid: np.ndarray = GRID) -> tuple[float, list[float], np.ndarray]:
    """A 1-D factor fit on the log errors of :func:`log_errors` (runs x grid): the :func:`median_root`, each run's
    leave-one-out root (fitted on the other runs; nan with one run) and that run's relative error at it."""
    n = errs.shape[0]
    root = median_root(errs, grid)
    loo_roots = [median_root(np.delete(errs, i, axis=0), grid) if n > 1 else float("nan") for i in range(n)]
    loo = np.array([float(at(errs[i:i + 1], ri, grid)[0]) for i, ri in enumerate(loo_roots)])
    return root, loo_roots, loo


def fit_grouped(name: str, runs: Sequence[MeasuredRun], cat) -> dict:
    """g, the errors at g = 1, at the catalog's g and at the fitted g, and each run's leave-one-out g (fitted on the
    stack's other MoE runs) and error."""
    errs = log_errors(runs, cat)
    g, loo_g, loo = fit_factor(errs)
    return {"stack": name, "g": g, "loo_g": loo_g, "runs": [r.name for r in runs], "before": at(errs, 1.0),
            "current": at(errs, runs[0].scenario.stack.grouped_gemm_efficiency), "after": at(errs, g),
            "loo": loo, "cards": sorted({r.accelerator for r in runs}),
            "tables": sorted({r.table for r in runs})}


def med(x: np.ndarray) -> str:
    x = x[np.isfinite(x)]
    return (f"{np.median(np.abs(x)) * 100:5.1f} % (max {np.max(np.abs(x)) * 100:4.1f} %, signed "
            f"{np.median(x) * 100:+5.1f} %)" if x.size else "-")


def source_text(res: dict) -> str:
    """The stack's grouped_gemm_efficiency source, as --write records it."""
    loo = res["loo"][np.isfinite(res["loo"])]
    loo_text = (f"; leave-one-run-out median |error| {np.median(np.abs(loo)) * 100:.1f} %, RMS ln error "
                f"{np.sqrt(np.mean(np.log1p(loo) ** 2)):.3f}" if loo.size else "")
    before, after = (round(float(np.median(res[k])) * 100, 1) + 0.0 for k in ("before", "after"))
    return (f"fitted: benchmarks/fit_grouped_gemm.py on the {len(res['runs'])} MoE runs of this stack in "
            f"{', '.join(res['tables'])} ({' '.join(res['runs'])}; cards {', '.join(res['cards'])} at their "
            f"catalog parameters, fitted on dense runs only): the share of its modelled speed each grouped expert GEMM "
            f"call reaches (t = t_model / g) at which the median of ln(predicted / published) is zero; signed median "
            f"error "
            f"{before:+.1f} % at 1 -> {after:+.1f} %{loo_text}. No published per-kernel measurement separates it "
            f"from the MoE layer's other costs; the MoE share of the stated sigma (catalogs/uncertainty.toml moe) "
            f"carries what it leaves")


def rewrite(text: str, stack: str, key: str, value: str, source: str, *, after: str | None = None,
            file: str = STACKS_TOML.name) -> str:
    """``text`` (stacks.toml) with ``key``'s value in ``[stack]`` and its source in ``[stack.sources]`` set,
    nothing else: each line replaced where its table has one, else (``after`` given) added after that key's line
    there; an InputError naming ``file`` where neither is there (the fit scripts write every key through this)."""
    name = re.escape(stack)
    said = source.replace('"', "'")
    for section, line in (("", f"{key} = {value}\n"), (r"\.sources", f'{key} = "{said}"\n')):
        head = r"(\n\[" + name + section + r"\]\n(?:(?!\[).*\n)*?)"
        old = re.compile(head + key + r" = [^\n]*\n")
        anchor = re.compile(head + r"(" + after + r" = [^\n]*\n)") if after else None
        if old.search(text):
            text = old.sub(lambda m, s=line: m.group(1) + s, text, count=1)
        elif anchor is not None and anchor.search(text):
            text = anchor.sub(lambda m, s=line: m.group(1) + m.group(2) + s, text, count=1)
        else:
            where = f" or {after} line to add it after" if after else ""
            raise InputError(f"{file} [{stack}{section.replace(chr(92), '')}]: no {key} line to rewrite{where}")
    return text


def write(results: Sequence[dict], path: Path = STACKS_TOML) -> None:
    """Rewrite each fitted stack's grouped_gemm_efficiency and its source in stacks.toml, nothing else (the
    lines are added after kernel_efficiency where the stack has none yet)."""
    text = path.read_text()
    for res in results:
        text = rewrite(text, res["stack"], "grouped_gemm_efficiency", f"{res['g']:.3f}", source_text(res),
                       after="kernel_efficiency", file=path.name)
    path.write_text(text)


def fit_all(runs: Sequence[MeasuredRun], cat, log: bool = True) -> list[dict]:
    """One fit per reference stack with MoE runs, printed (``log``)."""
    by_stack: dict[str, list[MeasuredRun]] = {}
    for r in runs:
        if r.scenario.model.moe and r.scenario.stack.name in REFERENCE:
            by_stack.setdefault(r.scenario.stack.name, []).append(r)
    results = []
    for name, mine in by_stack.items():
        res = fit_grouped(name, mine, cat)
        results.append(res)
        if not log:
            continue
        print(f"{name}: {len(mine)} MoE runs, grouped_gemm_efficiency {res['g']:.3f} (catalog "
              f"{mine[0].scenario.stack.grouped_gemm_efficiency:.3f})")
        print_fit(res, 34)
    return results


def print_fit(res: dict, width: int) -> None:
    """A 1-D factor fit's summary (:func:`fit_grouped`'s keys): the median errors at 1, at the catalog's value, at
    the fit and left out, then each run's error before -> after and left out (run names in ``width`` columns)."""
    print(f"  median |error| at 1 {med(res['before'])}; catalog {med(res['current'])}; fitted {med(res['after'])};"
          f" leave-one-out {med(res['loo'])}")
    for rn, b, a, lo in zip(res["runs"], res["before"], res["after"], res["loo"], strict=True):
        print(f"    {rn:<{width}} {b * 100:+7.1f}% -> {a * 100:+7.1f}%   LOO {lo * 100:+7.1f}%")


def command_line(argv: Sequence[str] | None, doc: str) -> tuple[Any, list[MeasuredRun], bool] | None:
    """The fit scripts' command line (--data tables, --write): (catalog, measured runs, write), or None after one
    line on stderr when a table cannot be read."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--data", nargs="+", default=[str(p) for p in DATA], help="tables of measured runs")
    ap.add_argument("--write", action="store_true", help="rewrite the fitted values in catalogs/stacks.toml")
    args = ap.parse_args(argv)
    cat = load_catalog()
    try:
        return cat, [r for p in args.data for r in runs_from_csv(p, cat)], bool(args.write)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None


def main(argv: Sequence[str] | None = None) -> int:
    read = command_line(argv, __doc__ or "")
    if read is None:
        return 2
    cat, runs, write_back = read
    results = fit_all(runs, cat)
    if write_back and results:
        write(results)
        print(f"wrote {', '.join(r['stack'] for r in results)} to {STACKS_TOML.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
