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
catalogs/stacks.toml in place, each fitted stack's ``residual_sigma`` (its runs' leave-one-out RMS log error,
:func:`stack_sigma`) and, for each stack with kernels of its own that no run fitted (DeepSpeed today), the prior
:func:`pooled_prior`: the geometric mean of the fitted factors of the stacks with kernels of their own, one vote
per stack (benchmarks/validate_published.py's leave-one-source-out fit gives a stack whose only source is left out
the same pool of the other sources' stacks). The reference stacks' ``grouped_gemm_efficiency`` is fitted after, on
their MoE runs (benchmarks/fit_grouped_gemm.py), and torch's ring's ``ring_step_efficiency`` on its context-parallel
runs (benchmarks/fit_ring_steps.py); both written with ``--write`` too. The fits share runs (a CP run's kernel
factor and ring factor), so a refit runs this script twice: the second pass starts from the first's values.

    .venv/bin/python benchmarks/fit_stacks.py [--write] [--data runs.csv ...]
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = sorted((ROOT / "benchmarks" / "data").glob("*.csv"))
STACKS_TOML = ROOT / "catalogs" / "stacks.toml"

from tpopt.catalogs.stacks import stack_names  # noqa: E402
from tpopt.models.finish import ANCHOR_SPEEDS, SIGMA_MIN_RUNS, residual_sigma  # noqa: E402
from tpopt.models.roofline import stack_scaled  # noqa: E402
from tpopt.optimizer import calibrate as C  # noqa: E402
from tpopt.optimizer.calibrate import MeasuredRun  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fit_grouped_gemm  # noqa: E402
import fit_ring_steps  # noqa: E402

REFERENCE = fit_grouped_gemm.REFERENCE
"""Stacks whose runs calibrate the cards: kernel_efficiency 1 by definition."""

GRID = np.round(np.arange(0.30, 1.6001, 0.002), 4)
"""Candidate factors (the fit interpolates between neighbours)."""

REFERENCE_KERNELS = ("nemo-2403",)
"""Stacks other than the reference ones that run the reference stack's kernels: NeMo 24.03 is Megatron-Core 0.6
with Transformer Engine 1.4 (catalogs/stacks.toml [nemo-2403] display). Their fitted factor measures a container of
the reference kernels (nemo-2403 fits 1.010), not a stack with kernels of its own, so they are another class: not
pooled into :func:`pooled_prior`, and such a stack with no fitted run keeps 1."""


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
        text = fit_grouped_gemm.rewrite(text, res["stack"], "kernel_efficiency", f"{res['f']:.3f}", source_text(res),
                                        file=path.name)
    path.write_text(text)


def own_kernels(name: str) -> bool:
    """Whether a stack runs kernels of its own (not :data:`REFERENCE`, not :data:`REFERENCE_KERNELS`): its factor
    is pooled when fitted, and it takes the pool when no run fitted it."""
    return name not in REFERENCE and name not in REFERENCE_KERNELS


def pooled_prior(factors: Mapping[str, float]) -> tuple[float, tuple[str, ...]]:
    """The prior kernel efficiency of a stack no run fitted, from the fitted factors ``factors`` (stack -> f):
    the geometric mean over the stacks with kernels of their own (:func:`own_kernels`), each stack once
    whatever its number of runs,

        f_prior = exp(mean over pooled stacks s of ln f_s)

    (the factor multiplies the card's efficiencies and the errors are judged in ln; a new stack is one draw
    from the stacks, not from their runs, so torchtitan-compile's 14 runs count as one stack; with two stacks the
    median is this mean, with three it would keep only the middle one). (f, the pooled stacks); (1.0, ())
    when no such stack is fitted: the reference kernels."""
    pooled = tuple(s for s in factors if own_kernels(s))
    if not pooled:
        return 1.0, ()
    return float(np.exp(np.mean([np.log(factors[s]) for s in pooled]))), pooled


def pool_source(results: Sequence[dict], f: float) -> str:
    """The source a pooled stack's kernel_efficiency records: the stacks and runs pooled, and why."""
    mine = [r for r in results if own_kernels(r["stack"])]
    parts = "; ".join(f"{r['stack']} {r['f']:.3f} ({' '.join(r['runs'])})" for r in mine)
    return (f"pooled: benchmarks/fit_stacks.py, no shared-table run ran this stack, so the geometric mean {f:.3f} of "
            f"the fitted factors of the stacks with kernels of their own, one vote per stack ({parts}); the "
            f"reference stacks and those running their kernels ({', '.join(REFERENCE_KERNELS)}: Megatron-Core with "
            f"Transformer Engine) are another class, not pooled")


def written(results: Sequence[dict]) -> dict[str, float]:
    """Each fitted stack's factor as stacks.toml records it (three decimals): the pool is the catalog's own."""
    return {r["stack"]: round(float(r["f"]), 3) for r in results}


def unfitted_stacks(fitted: Sequence[str]) -> list[str]:
    """The catalog's stacks with kernels of their own that no run fitted: they take :func:`pooled_prior`."""
    return [s for s in stack_names() if own_kernels(s) and s not in fitted]


def stack_sigma(res: dict) -> tuple[float, str]:
    """A fitted stack's residual_sigma and its source (catalogs/stacks.toml; the catalog sigma, models/terms
    catalog_sigma): the RMS log error of its leave-one-out predictions (its factor refitted without each run, the
    cards at their catalog parameters; megatron-core's 0.054 is its runs' leave-one-out RMS too) where at least
    finish.SIGMA_MIN_RUNS runs estimate it; with fewer, the larger of that and the public anchors' RMS log error
    (stacks the model was not fitted on), as a card's is with the default."""
    loo = res["loo"][np.isfinite(res["loo"])]
    anchors = round(residual_sigma(ANCHOR_SPEEDS), 3)
    n, where = len(loo), f"its {len(res['runs'])} runs in {', '.join(res['tables'])}"
    if not n:
        return anchors, f"no leave-one-out prediction of {where}: the public anchors' RMS log error, {anchors:.3f}"
    own = round(residual_sigma(1.0 + loo), 3)
    how = (f"leave-one-out RMS log error {own:.3f} of benchmarks/fit_stacks.py over {where} (the kernel factor "
           f"refitted without each run, the cards at their catalog parameters; errors {loo.min() * 100:+.1f} to "
           f"{loo.max() * 100:+.1f} %)")
    if n >= SIGMA_MIN_RUNS or own >= anchors:
        return own, how
    return anchors, (f"{how}; under {SIGMA_MIN_RUNS} runs estimate no spread, so the larger of that and the public "
                     f"anchors' RMS log error, {anchors:.3f} (seven published runs on stacks the model was not fitted "
                     f"on; models/finish.py ANCHOR_SPEEDS)")


def write_pool_and_sigmas(results: Sequence[dict], path: Path = STACKS_TOML) -> list[str]:
    """Rewrite each fitted stack's residual_sigma (:func:`stack_sigma`) and each unfitted stack's kernel_efficiency
    (:func:`pooled_prior`, :func:`unfitted_stacks`) with their sources in stacks.toml; the stacks written."""
    text = path.read_text()
    done = []
    for res in results:
        sigma, src = stack_sigma(res)
        text = fit_grouped_gemm.rewrite(text, res["stack"], "residual_sigma", f"{sigma:.3f}", src)
        done.append(res["stack"])
    f, pooled = pooled_prior(written(results))
    if pooled:
        for name in unfitted_stacks([r["stack"] for r in results]):
            text = fit_grouped_gemm.rewrite(text, name, "kernel_efficiency", f"{f:.3f}", pool_source(results, f))
            done.append(name)
    path.write_text(text)
    return done


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
    f, pooled = pooled_prior(written(results))
    print(f"pooled prior for a stack no run fitted: {f:.3f} (geometric mean of {', '.join(pooled) or 'none'}); "
          f"takes it: {', '.join(unfitted_stacks([r['stack'] for r in results])) or 'none'}")
    for res in results:
        print(f"  [{res['stack']}] residual_sigma = {stack_sigma(res)[0]:.3f}")
    if write_back and results:
        write(results)
        done = write_pool_and_sigmas(results)
        print(f"wrote {', '.join(r['stack'] for r in results)} (and {', '.join(done)}: residual_sigma or the pooled "
              f"kernel_efficiency) to {STACKS_TOML.relative_to(ROOT)}")
    # the reference stacks' grouped expert GEMM efficiency, on their MoE runs (benchmarks/fit_grouped_gemm.py)
    grouped = fit_grouped_gemm.fit_all(runs, cat)
    if write_back and grouped:
        fit_grouped_gemm.write(grouped)
        names = ", ".join(r["stack"] for r in grouped)
        print(f"wrote {names} grouped_gemm_efficiency to {STACKS_TOML.relative_to(ROOT)}")
    # torch's context-parallel ring's later steps, on its CP runs (benchmarks/fit_ring_steps.py)
    ring = fit_ring_steps.fit_all(runs, cat)
    if write_back and ring is not None:
        names = ", ".join(fit_ring_steps.write(ring))
        print(f"wrote {names} ring_step_efficiency to {STACKS_TOML.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
