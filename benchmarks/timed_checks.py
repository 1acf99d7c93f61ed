"""The seconds the unit tests no longer assert: each figure a test used to bound with a wall-clock or CPU limit, printed
here (the tests now count what the time stood for: chunks walked, compilations, grid points, solves).

    .venv/bin/python benchmarks/timed_checks.py [--skip-cli]

One line each, this process's wall and CPU seconds:

- enumeration under a 0.05 s limit, the design case over 3 cards and every layout (1.0 M plans): the time to
  stop, the plans evaluated and the chunks walked (tests/test_limits_and_scaling.py counts one chunk after the
  limit);
- ``tpopt solve --solver highs --method monolithic --time-limit 1s`` on the widened design case (HiGHS alone
  takes ~14 s): the command's wall time in a fresh process (the same test counts the limit each HiGHS solve is handed);
- the event model at p = 64, m = 512 once compiled (tests/test_pipeline.py counts one compilation and 2 p m
  operations; benchmarks/pipeline_sim.py prints the model's other shapes);
- E[max of 10^5 normals] (tests/test_reliability.py counts the fixed 6,656-point grid);
- explain's global-batch relaxation (optimizer/explain/relax.py relax_global_batch): one solve per multiple of the
  batch (x 2 ... 16, stopping at the first with a plan), against one solve with the batch a decision over the seven
  candidates (search.global_batch, tokens kept): the seconds and solves of each on the design case at 32 cards (no
  candidate has a plan), at 24.5 days (3x is the first with a plan) and on Llama-3-405B (tests/test_explain_chain.py's
  case), and which batch the one solve picks (its cheapest, not the smallest with a plan).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import replace
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "examples" / "design-case.toml"
L405 = {"model": {"name": "llama3-405b"}, "schedule": {"deadline": "30d"}, "hardware": {"accelerator": "h100-sxm"},
        "task": {"tokens": "15T", "seq_len": 8192, "global_batch": 2048, "precision": "bf16-mixed"},
        "search": {"max_cards": 4096}}
"""tests/test_explain_chain.py's case: Llama-3-405B on 15T tokens in 30 days on at most 4,096 H100."""


def timed(fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def enumeration() -> None:
    from tpopt.catalogs import load_catalog
    from tpopt.catalogs.scenario import build_scenario, read_scenario_file, with_overrides
    from tpopt.optimizer.core import solve
    from tpopt.optimizer.result import Request

    three = ["rtx4090", "h100-sxm", "a100-80gb-sxm"]
    raw = read_scenario_file(DESIGN)
    raw["checkpoint"].pop("job_mtbf", None)
    raw["checkpoint"].pop("save_interval", None)
    sc = build_scenario(with_overrides(raw, {
        "hardware.accelerator": three, "search.accelerator": three, "search.zero_stage": [0, 1, 2, 3],
        "search.tp": [1, 2, 4, 8], "search.pp": [1, 2, 4], "search.schedule": ["1f1b", "zb-h1", "fill-drain"],
        "search.micro_batch": [1, 2, 4], "search.offload": ["none", "cpu"], "search.nics_per_host": [1, 2, 4, 8],
        "search.save_interval": ["auto", "900s", "1800s", "3600s"], "search.save_mode": ["sync", "async"]}),
        load_catalog())
    r, wall, cpu = timed(lambda: solve(sc, "enumerate", Request(time_limit=0.05)))
    print(f"enumeration, 0.05 s limit, {r.solver.points:,} plans: {wall:.2f} s wall, {cpu:.2f} s CPU; "
          f"{r.solver.evaluated:,} evaluated in {r.solver.rounds} chunks, {r.status.value}")


def cli_highs() -> None:
    text = DESIGN.read_text().replace('activation_reserve = "10GiB"', "# modelled")
    text = text.replace("zero_stage = [3]", "zero_stage = [0, 1, 2, 3]").replace("tp = [1]", "tp = [1, 2, 4, 8]")
    text = text.replace("pp = [1]", 'pp = [1, 2, 4]\nschedule = ["1f1b", "zb-h1", "fill-drain"]\n'
                                    'recompute = ["none", "mlp", "norm+mlp", "full"]')
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "s.toml"
        p.write_text(text.replace("micro_batch = [1]", "micro_batch = [1, 2, 4]"))
        args = [sys.executable, "-m", "tpopt", "solve", "--scenario", str(p), "--solver", "highs", "--method",
                "monolithic", "--time-limit", "1s", "--no-analysis"]
        w = time.perf_counter()
        out = subprocess.run(args, capture_output=True, text=True, cwd=ROOT)
        wall = time.perf_counter() - w
    said = "says 'Time limit reached'" if "Time limit reached" in out.stdout else "no time-limit line"
    print(f"tpopt solve --solver highs --method monolithic --time-limit 1s: {wall:.2f} s wall (interpreter start "
          f"included), exit {out.returncode}, {said}")


def pipeline() -> None:
    from tpopt.models import pipeline as pl

    pl.simulate("1f1b", 64, 512, 1.0, 2.0)  # compiles the shape
    _, wall, cpu = timed(lambda: pl.simulate("1f1b", 64, 512, 1.0, 2.0))
    print(f"event model, 1F1B, p = 64, m = 512, compiled: {wall:.3f} s wall, {cpu:.3f} s CPU")


def expected_max() -> None:
    from tpopt.models import reliability as rel

    _, wall, cpu = timed(lambda: rel.expected_max_std_normal(100_000))
    print(f"E[max of 100,000 standard normals], first call: {wall * 1e3:.1f} ms wall, {cpu * 1e3:.1f} ms CPU")


def _each_batch(ctx, sc, candidates):
    """As relax_global_batch asks: one solve per candidate, in order, up to the first with a plan."""
    from tpopt.optimizer.explain.chain import with_global_batch

    ctx.keep = None
    for b in candidates:
        if ctx.feasible(with_global_batch(sc, b)) is not None:
            return b, ctx.solves
    return None, ctx.solves


def _one_solve(ctx, sc, candidates):
    """One solve with the batch a decision over the candidates (tokens kept whatever the batch)."""
    ctx.keep = None
    choice = replace(sc, task=replace(sc.task, critical_batch_source="none: tokens kept"),
                     search=replace(sc.search, global_batch=tuple(candidates)))
    ev = ctx.feasible(choice)
    return (None if ev is None else ev.plan.global_batch), ctx.solves


def batch_relaxation() -> None:
    from tpopt.catalogs import load_catalog
    from tpopt.catalogs.scenario import build_scenario, read_scenario_file, with_overrides
    from tpopt.optimizer import explain as E
    from tpopt.optimizer.explain.chain import BATCH_FACTORS
    from tpopt.optimizer.result import Request

    cases = {"design case, 32 cards": (read_scenario_file(DESIGN), {"search.max_cards": 32}),
             "design case, 24.5 days": (read_scenario_file(DESIGN), {"schedule.deadline": "24.5d"}),
             "Llama-3-405B, 15T tokens, 4,096 H100": (L405, {})}
    for label, (base, over) in cases.items():
        cat = load_catalog()
        raw = with_overrides(base, over)
        sc = build_scenario(raw, cat)
        candidates = [sc.task.global_batch * k for k in BATCH_FACTORS[1:]]
        got = []
        for way in (_each_batch, _one_solve):
            ctx = E.Context.of(sc, "cpsat", Request(workers=1, seed=0), None, raw, cat)
            (batch, solves), wall, _ = timed(partial(way, ctx, sc, candidates))
            got.append((batch, solves, wall))
        (smallest, n_each, w_each), (picked, _, w_one) = got
        print(f"explain, global batch, {label}: {n_each} solves one batch each, {w_each:.2f} s (smallest "
              f"with a plan: {smallest}); one solve over the 7 batches, {w_one:.2f} s (its plan's batch: "
              f"{picked})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--skip-cli", action="store_true", help="leave out the command run in a fresh process")
    args = ap.parse_args()
    enumeration()
    if not args.skip_cli:
        cli_highs()
    pipeline()
    expected_max()
    batch_relaxation()


if __name__ == "__main__":
    main()
