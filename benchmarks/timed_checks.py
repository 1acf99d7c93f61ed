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
- E[max of 10^5 normals] (tests/test_reliability.py counts the fixed 6,656-point grid).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "examples" / "design-case.toml"


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--skip-cli", action="store_true", help="leave out the command run in a fresh process")
    args = ap.parse_args()
    enumeration()
    if not args.skip_cli:
        cli_highs()
    pipeline()
    expected_max()


if __name__ == "__main__":
    main()
