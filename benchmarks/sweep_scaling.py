"""How long a 1,000-point sweep takes: 3 accelerators x 331 deadlines (10 d to 43 d in 0.1 d steps) on the
design case, with its [search] restrictions kept (16 plans per accelerator) and removed (4,096 plans per
accelerator), through the table path (one exact enumeration per accelerator, masks per deadline), end to end
on the command line, and the per-point CP-SAT path on a sample of points for comparison. Target: < 60 s.

    .venv/bin/python benchmarks/sweep_scaling.py [--workers N] [--cpsat-sample 4]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "examples" / "design-case.toml"
HW = "rtx4090,h100-sxm,a100-80gb-sxm"
DEADLINES = "10d:43d:0.1d"  # 331 values


def unrestricted(tmp: Path) -> Path:
    text = DESIGN.read_text()
    p = tmp / "design-case-free.toml"
    p.write_text(text[:text.index("[search]")] + "[search]\nmax_cards = 1024\n")
    return p


def timed_sweep(scenario: Path, workers: int, solver: str = "auto", deadlines: str = DEADLINES, out=None):
    from tpopt.optimizer import sweep as sw

    t0 = time.perf_counter()
    spec = sw.build_spec(scenario, {"hw": HW, "deadline": deadlines, "solver": solver})
    res = sw.run_sweep(spec, workers=workers, out=out)
    wall = time.perf_counter() - t0
    sizes = {acc: sw.space_size(spec, acc) for acc in spec.hw}
    return wall, res, sizes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=0, help="worker processes (0: the core count)")
    ap.add_argument("--cpsat-sample", type=int, default=4,
                    help="deadlines per accelerator solved with CP-SAT one point at a time (0: skip)")
    args = ap.parse_args()
    from tpopt.optimizer.sweep import default_workers

    workers = args.workers or default_workers()
    print(f"tpopt sweep scaling on {os.cpu_count()} cores, {workers} workers; "
          f"3 accelerators x 331 deadlines = 993 points")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        free = unrestricted(tmp)
        rows = []
        for label, scen in (("design case, [search] kept", DESIGN), ("design case, [search] removed", free)):
            for w in sorted({1, workers}):
                wall, res, sizes = timed_sweep(scen, w, out=tmp / f"r{w}{len(rows)}.csv")
                feas = sum(r["status"] == "optimal" for r in res.rows)
                rows.append((f"{label}, table path, {w} worker{'s' if w > 1 else ''}", len(res.rows), wall,
                             f"{max(sizes.values()):,} plans/accelerator, {res.tasks} enumerations, "
                             f"{feas} feasible, front {len(res.front())} plans"))
        # end to end on the command line (interpreter start, imports, CSV journal, final file, plot)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "tpopt.cli.main", "sweep", "--scenario", str(free), "--hw", HW,
                        "--deadline", DEADLINES, "--out", str(tmp / "cli.parquet"), "--plot", str(tmp / "p.svg"),
                        "--workers", str(workers), "--quiet"], check=True, stdout=subprocess.DEVNULL)
        rows.append(("CLI end to end, [search] removed, .parquet + SVG plot", 993, time.perf_counter() - t0, ""))
        # the per-point solver path on a sample, extrapolated to 993 points
        k = args.cpsat_sample
        if k > 0:
            dl = ",".join(f"{10 + 33 * (i + 0.5) / k:.1f}d" for i in range(k))
            for label, scen in (("[search] kept", DESIGN), ("[search] removed", free)):
                wall, res, _ = timed_sweep(scen, workers, solver="cpsat", deadlines=dl)
                per = wall / len(res.rows)
                rows.append((f"CP-SAT per point, {label}, {workers} workers (sample)", len(res.rows), wall,
                             f"{per:.3f} s/point -> ~{per * 993:,.0f} s for 993 points"))
    width = max(len(r[0]) for r in rows)
    print(f"{'case':<{width}}  {'points':>6}  {'wall s':>7}  notes")
    for label, pts, wall, note in rows:
        print(f"{label:<{width}}  {pts:>6}  {wall:>7.2f}  {note}")


if __name__ == "__main__":
    main()
