"""Check (not a fit): the MXFP8 recipe's cost against per-tensor FP8 on the same run, predicted vs published.

Megatron-Bridge's performance summary for container 25.11 (NVIDIA-NeMo/Megatron-Bridge,
docs/performance-summary-archive.md, "25.11 NeMo Container", DGX-B200 and DGX-GB200 tables) publishes three of the
FP8 current-scaling runs of the shared table megatron-bridge-modern.csv with a second throughput in parentheses:
the same model, cards and layout under MXFP8 ("FP8-CS (FP8-MX)"). The MXFP8 figures are not in the shared tables
and nothing is fitted on them; this script predicts each of the three runs under both recipes with the shipped
catalog and prints the predicted step ratio MXFP8 / FP8 beside the published one (FP8-CS tokens/s over FP8-MX
tokens/s). ``--catalog DIR`` overrides the catalog (e.g. a performance.toml with ``mxfp8_gemm_ratio = 1.0``).

    .venv/bin/python benchmarks/mxfp8_pairs.py
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from tpopt.catalogs import load_catalog
from tpopt.optimizer import calibrate as C
from tpopt.optimizer.runs import runs_from_csv

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "benchmarks" / "data" / "megatron-bridge-modern.csv"

#: Tokens / s / GPU, FP8-CS and (FP8-MX) on the same row: Megatron-Bridge performance-summary-archive.md, 25.11.
PUBLISHED = {"mb2511-b200-llama3-8b-fp8": (30624.0, 29521.0),
             "mb2511-b200-llama31-405b-fp8": (661.0, 624.0),
             "mb2511-gb200-llama3-8b-fp8": (31508.0, 29789.0)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--catalog", action="append", default=[], help="catalog directory overriding the built-in")
    args = ap.parse_args(argv)
    cat = load_catalog(args.catalog)
    runs = [r for r in runs_from_csv(str(TABLE), cat) if r.name in PUBLISHED]
    print(f"{'run':30s} {'FP8 s':>7s} {'MXFP8 s':>8s} {'predicted':>9s} {'published':>9s}")
    for run in runs:
        sc = run.scenario
        mx = replace(run, scenario=replace(sc, task=replace(sc.task, precision="mxfp8-mixed")))
        perf = cat.perf(run.accelerator)
        fp8_s, mx_s = (float(C.predict(r, perf).step_s[0]) for r in (run, mx))
        cs, fm = PUBLISHED[run.name]
        print(f"{run.name:30s} {fp8_s:7.3f} {mx_s:8.3f} {mx_s / fp8_s:9.4f} {cs / fm:9.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
