"""Fit each software stack's kernel efficiency on the published runs of that stack, the cards fixed.

A stack other than the reference ones (Megatron-Core with Transformer Engine, and Megatron-LM as in
Narayanan et al. 2021 / Korthikanti et al. 2022, on whose runs the cards of catalogs/performance.toml are
calibrated) reaches its own share of a card's GEMM, attention and memory-bound efficiencies: one factor f
per stack (catalogs/stacks.toml ``kernel_efficiency``; models/roofline.py ``stack_scaled``: eta -> min(1, f eta)).
This script fits f on the runs of the tables under benchmarks/data/ that ran the stack (a row's ``stack`` cell,
or the table's ``# stack.RUN ... = NAME`` lines), with every card's parameters as the catalog has them (run it
after a card refit): the f at which the median of ln(predicted / published) over the stack's runs is zero (a
1-D fit, robust to runs whose error lies in other physics), and the leave-one-out error of each run (f fitted
on the stack's other runs). ``--write`` rewrites each fitted stack's ``kernel_efficiency`` and its source in
catalogs/stacks.toml in place. The reference stacks' ``grouped_gemm_efficiency`` is fitted after, on their MoE runs
(benchmarks/fit_grouped_gemm.py; written with ``--write`` too).

    .venv/bin/python benchmarks/fit_stacks.py [--write] [--data runs.csv ...]
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = sorted((ROOT / "benchmarks" / "data").glob("*.csv"))
STACKS_TOML = ROOT / "catalogs" / "stacks.toml"

from tpopt.errors import InputError  # noqa: E402
from tpopt.models.roofline import stack_scaled  # noqa: E402
from tpopt.optimizer import calibrate as C  # noqa: E402
from tpopt.optimizer.calibrate import MeasuredRun  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fit_grouped_gemm  # noqa: E402

REFERENCE = ("megatron-core", "megatron-lm-2021")
"""Stacks whose runs calibrate the cards: kernel_efficiency 1 by definition."""

GRID = np.round(np.arange(0.30, 1.6001, 0.002), 4)
"""Candidate factors (the fit interpolates between neighbours)."""


def log_errors(runs: Sequence[MeasuredRun], cat) -> np.ndarray:
    """ln(predicted / published) per run (rows) and factor of :data:`GRID` (columns), the card's catalog
    parameters scaled by each factor and the stack's own kernel_efficiency set aside."""
    rows = []
    for r in runs:
        sc = replace(r.scenario, stack=replace(r.scenario.stack, kernel_efficiency=1.0))
        run = replace(r, scenario=sc)
        perf = stack_scaled(cat.perf(r.accelerator), GRID)
        rows.append(np.log(C.predict(run, perf).step_s / r.measured_step_s))
    return np.vstack(rows)


def median_root(errs: np.ndarray) -> float:
    """The factor at which the median over runs (rows) of the log errors crosses zero (they fall as f grows),
    by linear interpolation between grid points; the grid's end where it never does."""
    return fit_grouped_gemm.median_root(errs, GRID)


def at(errs: np.ndarray, f: float) -> np.ndarray:
    """Relative errors (predicted / published - 1) of each run at factor f (interpolated on the grid)."""
    return fit_grouped_gemm.at(errs, f, GRID)


def fit_stack(name: str, runs: Sequence[MeasuredRun], cat) -> dict:
    """f, the errors at f = 1 and at f, and the leave-one-out errors of one stack's runs."""
    errs = log_errors(runs, cat)
    f = median_root(errs)
    loo = []
    for i in range(len(runs)):
        rest = np.delete(errs, i, axis=0)
        loo.append(float(at(errs[i:i + 1], median_root(rest))[0]) if len(rest) else float("nan"))
    return {"stack": name, "f": f, "runs": [r.name for r in runs], "before": at(errs, 1.0),
            "current": at(errs, runs[0].scenario.stack.kernel_efficiency), "after": at(errs, f),
            "loo": np.array(loo), "cards": sorted({r.accelerator for r in runs}),
            "tables": sorted({r.table for r in runs})}


def med(x: np.ndarray) -> str:
    x = x[np.isfinite(x)]
    return f"{np.median(np.abs(x)) * 100:5.1f} % (signed {np.median(x) * 100:+5.1f} %)" if x.size else "-"


def source_text(res: dict) -> str:
    """The stack's kernel_efficiency source, as --write records it."""
    loo = res["loo"][np.isfinite(res["loo"])]
    loo_text = f", leave-one-out {np.median(np.abs(loo)) * 100:.1f} %" if loo.size else ""
    before, after = (np.median(np.abs(res[k])) * 100 for k in ("before", "after"))
    return (f"fitted: benchmarks/fit_stacks.py on the {len(res['runs'])} runs of this stack in "
            f"{', '.join(res['tables'])} ({' '.join(res['runs'])}; cards {', '.join(res['cards'])} at their "
            f"catalog parameters): the factor at which the median of ln(predicted / published) is zero; median "
            f"|error| {before:.1f} % at 1 -> {after:.1f} %{loo_text}")


def write(results: Sequence[dict], path: Path = STACKS_TOML) -> None:
    """Rewrite each fitted stack's kernel_efficiency and its source in stacks.toml, nothing else."""
    text = path.read_text()
    for res in results:
        name = re.escape(res["stack"])
        value = re.compile(r"(\n\[" + name + r"\]\n(?:(?!\[).*\n)*?)kernel_efficiency = [^\n]*\n")
        source = re.compile(r"(\n\[" + name + r"\.sources\]\n(?:(?!\[).*\n)*?)kernel_efficiency = [^\n]*\n")
        if not value.search(text) or not source.search(text):
            raise InputError(f"{path.name} [{res['stack']}]: no kernel_efficiency line (and source) to rewrite")
        f = res["f"]
        text = value.sub(lambda m, f=f: f"{m.group(1)}kernel_efficiency = {f:.3f}\n", text, count=1)
        src = source_text(res).replace('"', "'")
        text = source.sub(lambda m, s=src: f'{m.group(1)}kernel_efficiency = "{s}"\n', text, count=1)
    path.write_text(text)


def main(argv: Sequence[str] | None = None) -> int:
    read = fit_grouped_gemm.command_line(argv, __doc__ or "")
    if read is None:
        return 2
    cat, runs, write_back = read
    by_stack: dict[str, list[MeasuredRun]] = {}
    for r in runs:
        by_stack.setdefault(r.scenario.stack.name, []).append(r)
    results = []
    for name, mine in by_stack.items():
        if name in REFERENCE:
            continue
        res = fit_stack(name, mine, cat)
        results.append(res)
        print(f"{name}: {len(mine)} runs, kernel_efficiency {res['f']:.3f} (catalog "
              f"{mine[0].scenario.stack.kernel_efficiency:.3f})")
        print(f"  median |error| at 1 {med(res['before'])}; catalog {med(res['current'])}; fitted {med(res['after'])};"
              f" leave-one-out {med(res['loo'])}")
        for rn, b, a, lo in zip(res["runs"], res["before"], res["after"], res["loo"], strict=True):
            print(f"    {rn:<10} {b * 100:+7.1f}% -> {a * 100:+7.1f}%   LOO {lo * 100:+7.1f}%")
    if write_back and results:
        write(results)
        print(f"wrote {', '.join(r['stack'] for r in results)} to {STACKS_TOML.relative_to(ROOT)}")
    # the reference stacks' grouped expert GEMM efficiency, on their MoE runs (benchmarks/fit_grouped_gemm.py)
    grouped = fit_grouped_gemm.fit_all(runs, cat)
    if write_back and grouped:
        fit_grouped_gemm.write(grouped)
        names = ", ".join(r["stack"] for r in grouped)
        print(f"wrote {names} grouped_gemm_efficiency to {STACKS_TOML.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
