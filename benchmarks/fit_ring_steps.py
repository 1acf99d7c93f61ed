"""Fit the later-step efficiency of torch's context-parallel ring on the published runs that ran it, cards fixed.

torch's context parallelism (torch.distributed.tensor.experimental ``context_parallel``, the ring of the stacks
whose ``cp_ring`` is ``allgather``: torchtitan eager and compiled) runs each card's attention as cp calls: the
diagonal block, then cp - 1 non-causal blocks of the other cards' K and V (the zig-zag split gives every later
step the same 2 c x c work). tpopt times each call from its kernels (FlashAttention-2 through SDPA), its merges and
its exchange (docs/long-context.md). On the published runs of that ring (torchtitan's
llama3_h100_202412_torchtitan.md Tables 2 and 6) the later steps cost more than that: the CP 4 and CP 8 rows of the
8B and the CP 2 / 4 / 8 rows of the 405B price a later step at 1.2-1.4x tpopt's (the 8B CP 2 row at 0.8x), and no
source names a mechanism (rotate method, load balancer, per-call costs, merges, host span, memory, power cap:
checked and documented). So, like a stack's kernel efficiency, it is a fitted factor: e (catalogs/stacks.toml
``ring_step_efficiency``) divides the time of the cp - 1 later ring steps' attention calls
(models/context.py ``ring_step_cost``: the card's attention time x (1 + (cp - 1) / e) / cp); the diagonal step,
every other kernel and runs without context parallelism keep their time.

This script fits one e for torch's ring on every shared run with context parallelism on a stack whose
``cp_ring`` is ``allgather`` (cards at their catalog parameters, the stacks' kernel factors as shipped: run it
after fit_stacks.py's kernel fit, which calls it): the e at which the median of ln(predicted / published) over
those runs is zero, and each run's leave-one-out error; ``--write`` rewrites ``ring_step_efficiency`` and its
source for every stack on that ring (the same torch code). Megatron-Core / NeMo's ring (Transformer Engine's
p2p ring) is not refitted: its runs lie within the model's error as the kernels give them.

    .venv/bin/python benchmarks/fit_ring_steps.py [--write] [--data runs.csv ...]
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
STACKS_TOML = ROOT / "catalogs" / "stacks.toml"
sys.path.insert(0, str(ROOT / "benchmarks"))

import fit_grouped_gemm  # noqa: E402

from tpopt.catalogs.stacks import stack_names, stack_profile  # noqa: E402
from tpopt.optimizer.calibrate import MeasuredRun  # noqa: E402

RING = "allgather"
"""The ``cp_ring`` of torch's context_parallel (catalogs/stacks.toml): the stacks whose runs and factor this is."""

GRID = np.round(np.arange(0.40, 1.6001, 0.005), 4)
"""Candidate factors (the fit interpolates between neighbours)."""


def ring_runs(runs: Sequence[MeasuredRun]) -> list[MeasuredRun]:
    """The runs with context parallelism (cp > 1 in every candidate plan) on a stack running torch's ring."""
    return [r for r in runs if r.scenario.stack.cp_ring == RING and r.scenario.cp_method == "ring"
            and all(int(p.cp) > 1 for p in r.plans)]


def fit_ring(runs: Sequence[MeasuredRun], cat) -> dict | None:
    """e, the errors at 1, at the catalog's e and at the fitted e, and each run's leave-one-out e and error (None
    without a run of the ring)."""
    mine = ring_runs(runs)
    if not mine:
        return None
    errs = fit_grouped_gemm.log_errors(mine, cat, GRID, field="ring_step_efficiency")
    e, loo_e, loo = fit_grouped_gemm.fit_factor(errs, GRID)
    return {"e": e, "runs": [r.name for r in mine], "loo_e": loo_e, "loo": loo,
            "before": fit_grouped_gemm.at(errs, 1.0, GRID),
            "current": fit_grouped_gemm.at(errs, mine[0].scenario.stack.ring_step_efficiency, GRID),
            "after": fit_grouped_gemm.at(errs, e, GRID), "tables": sorted({r.table for r in mine}),
            "stacks": sorted({r.scenario.stack.name for r in mine})}


def source_text(res: dict) -> str:
    """The ring_step_efficiency source, as --write records it."""
    loo = res["loo"][np.isfinite(res["loo"])]
    before, after = (round(float(np.median(res[k])) * 100, 1) + 0.0 for k in ("before", "after"))
    loo_text = (f"; leave-one-run-out errors {', '.join(f'{x * 100:+.1f}' for x in loo)} %" if loo.size else "")
    return (f"fitted: benchmarks/fit_ring_steps.py on the {len(res['runs'])} context-parallel runs of torch's ring in "
            f"{', '.join(res['tables'])} ({' '.join(res['runs'])}; stacks {', '.join(res['stacks'])}, cards at "
            f"their catalog parameters): the share of their modelled speed the cp - 1 later ring steps' attention "
            f"calls reach at which the median of ln(predicted / published) is zero; signed median error "
            f"{before:+.1f} % at 1 -> {after:+.1f} %{loo_text}. No source names the mechanism (docs/long-context.md "
            f"lists what was checked); the same source's 405B CP 2 / CP 8 rows (not fitted) price a later step at "
            f"1.38 / 1.28x the kernels' time, its 8B CP 2 row at 0.81x")


def write(res: dict, path: Path = STACKS_TOML) -> list[str]:
    """Rewrite ring_step_efficiency and its source for every stack on torch's ring (added after kernel_efficiency
    where a stack has none yet); the stacks written."""
    text = path.read_text()
    names = [n for n in stack_names() if stack_profile(n).cp_ring == RING]
    for name in names:
        text = fit_grouped_gemm.rewrite(text, name, "ring_step_efficiency", f"{res['e']:.3f}", source_text(res),
                                        after="kernel_efficiency", file=path.name)
    path.write_text(text)
    return names


def fit_all(runs: Sequence[MeasuredRun], cat, log: bool = True) -> dict | None:
    """The fit, printed (``log``)."""
    res = fit_ring(runs, cat)
    if res is None or not log:
        return res
    cur = next(r for r in runs if r.name == res["runs"][0]).scenario.stack.ring_step_efficiency
    print(f"torch's ring ({', '.join(res['stacks'])}): {len(res['runs'])} CP runs, ring_step_efficiency "
          f"{res['e']:.3f} (catalog {cur:.3f})")
    fit_grouped_gemm.print_fit(res, 10)
    return res


def main(argv: Sequence[str] | None = None) -> int:
    read = fit_grouped_gemm.command_line(argv, __doc__ or "")
    if read is None:
        return 2
    cat, runs, write_back = read
    res = fit_all(runs, cat)
    if write_back and res is not None:
        names = write(res)
        print(f"wrote {', '.join(names)} ring_step_efficiency to {STACKS_TOML.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
