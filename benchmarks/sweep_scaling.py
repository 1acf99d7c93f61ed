"""Sweep speed, in four sections (``--only`` picks some):

* ``table``: a 1,000-point sweep, 3 accelerators x 331 deadlines (10 d to 43 d in 0.1 d steps) on the design
  case, with its [search] restrictions kept (16 plans per accelerator) and removed (4,096 plans per
  accelerator), through the table path (one exact enumeration per accelerator, masks per deadline), end to
  end on the command line, and the per-point CP-SAT path on a sample of points. Target: < 60 s.
* ``executors``: points/s of a CP-SAT-bound sweep (the design case without its [search] restrictions, one
  CP-SAT solve per point) on the local pool (1 and 2 workers) and on a Dask ``local:2`` cluster (cluster
  start-up apart; cold and warm workers); the driver's journal rate (rows/s it can fsync); and from the
  measured per-point times the wall time of a 10,000-point study on N workers.
* ``large``: per-point time of CP-SAT points on a large space (Llama-3-70B, 2T tokens, every layout: the
  spaces where a study needs a cluster), local pool vs ``local:2``, fed into the same extrapolation.
* ``decomposition``: whether one large solve would gain from sending the layout decomposition's exact
  sub-evaluations to a cluster: their share of the solve, and a Dask round trip.
* ``reuse``: 1,000 points (5 accelerators x 200 deadlines, 20 d to 59.8 d) over the 108-million-plan Llama-3-70B
  space (space 4 of benchmarks/solve_scaling.py) on one worker, through the layouts path (each group's tables
  and layout fronts built once, every point a scan from its neighbour's optimum), wall and CPU seconds; and a
  sample of the same points solved one CP-SAT solve each, compared row by row. Target: <= 2 s.

    .venv/bin/python benchmarks/sweep_scaling.py [--workers N] [--cpsat-sample 4] [--only executors,large,reuse]
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


def table_section(workers: int, cpsat_sample: int) -> None:
    print(f"== table path: 3 accelerators x 331 deadlines = 993 points, {workers} workers")
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
        k = cpsat_sample
        if k > 0:
            dl = ",".join(f"{10 + 33 * (i + 0.5) / k:.1f}d" for i in range(k))
            for label, scen in (("[search] kept", DESIGN), ("[search] removed", free)):
                wall, res, _ = timed_sweep(scen, workers, solver="cpsat", deadlines=dl)
                per = wall / len(res.rows)
                rows.append((f"CP-SAT per point, {label}, {workers} workers (sample)", len(res.rows), wall,
                             f"{per:.3f} s/point -> ~{per * 993:,.0f} s for 993 points"))
    _print_rows(rows)


def _print_rows(rows) -> None:
    width = max(len(r[0]) for r in rows)
    print(f"{'case':<{width}}  {'points':>6}  {'wall s':>7}  notes")
    for label, pts, wall, note in rows:
        print(f"{label:<{width}}  {pts:>6}  {wall:>7.2f}  {note}")


# ---------------------------------------------------------------------------------------------
# executors: local pool vs Dask on CP-SAT-bound sweeps, and the 10,000-point extrapolation

STUDY = 10_000
NS = (1, 2, 8, 32, 128, 512)


def _human(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def journal_rate(tmp: Path, n: int = 300) -> float:
    """Rows per second the driver can append to its journal (one flush + fsync per task)."""
    from tpopt.optimizer import sweep as sw

    spec = sw.build_spec(DESIGN, {"deadline": "30d"})
    row = sw.run_sweep(spec, workers=1).rows[0]
    store = sw.SweepStore(tmp / "journal.csv", spec.fingerprint)
    store.begin([])
    t0 = time.perf_counter()
    for _ in range(n):
        store.append([row])
    dt = time.perf_counter() - t0
    store.close()
    return n / dt


def _sweep_timed(spec_args, out=None, **kw):
    from tpopt.optimizer import sweep as sw

    spec = sw.build_spec(*spec_args)
    t0 = time.perf_counter()
    res = sw.run_sweep(spec, out=out, **kw)
    wall = time.perf_counter() - t0
    bad = {k: res.count(k) for k in ("unknown", "error", "feasible") if res.count(k)}
    if bad:  # a figure is only worth printing for proven answers
        note = next(r["note"] for r in res.rows if r["status"] in bad)
        raise SystemExit(f"sweep_scaling: unproven or failed points {bad}: {note}")
    return wall, res


def executor_rows(label: str, spec_args, spec_args_warm, tmp: Path) -> tuple[list, dict]:
    """(table rows, per-point seconds on one worker / on local:2 per worker)."""
    from tpopt.optimizer.sweep.cluster import local_cluster

    rows, per = [], {}
    for w in (1, 2):
        wall, res = _sweep_timed(spec_args, out=tmp / f"{label[:5]}-{w}.csv", workers=w)
        n = len(res.rows)
        rows.append((f"{label}: local pool, {w} worker{'s' if w > 1 else ''}", n, wall,
                     f"{n / wall:.2f} points/s, {wall * w / n:.2f} worker-s/point"))
        per[f"local-{w}"] = wall * w / n
    t0 = time.perf_counter()
    cluster = local_cluster(2)
    start = time.perf_counter() - t0
    try:
        for phase, args in (("cold workers", spec_args), ("warm workers", spec_args_warm)):
            wall, res = _sweep_timed(args, out=tmp / f"{label[:5]}-dask-{phase[:4]}.csv",
                                     cluster=cluster.scheduler_address)
            n = len(res.rows)
            rows.append((f"{label}: Dask local:2, {phase}", n, wall,
                         f"{n / wall:.2f} points/s, {wall * 2 / n:.2f} worker-s/point"
                         + (f" (+ {start:.1f} s cluster start-up)" if phase == "cold workers" else "")))
            per[f"dask-{phase[:4]}"] = wall * 2 / n
    finally:
        t0 = time.perf_counter()
        cluster.close()
        rows.append((f"{label}: Dask local:2 start-up / shutdown", 0, start,
                     f"shutdown {time.perf_counter() - t0:.1f} s"))
    return rows, per


def extrapolate(per_point: dict, rate: float) -> None:
    """Wall time of a 10,000-point study on N workers: points x s/point / N, or the driver's journal
    rate if that is slower (independent points: the executor adds no coupling)."""
    print(f"\n== a {STUDY:,}-point study on N workers (wall = max({STUDY:,} x s/point / N, {STUDY:,} / "
          f"journal rate {rate:,.0f} rows/s); one CP-SAT thread per worker)")
    print(f"{'per-point time':<58}" + "".join(f"{'N=' + str(n):>10}" for n in NS))
    for label, t in per_point.items():
        cells = "".join(f"{_human(max(STUDY * t / n, STUDY / rate)):>10}" for n in NS)
        print(f"{label + f' ({t:.2f} s)':<58}{cells}")


def executors_section(tmp: Path) -> dict:
    free = unrestricted(tmp)
    cold = (free, {"hw": HW, "deadline": "20d:41d:3d", "solver": "cpsat"})  # 3 x 8 = 24 points
    warm = (free, {"hw": HW, "deadline": "21d:42d:3d", "solver": "cpsat"})
    print("\n== executors: CP-SAT per point, design case without [search] restrictions (4,096 plans per accelerator)")
    rows, per = executor_rows("design case, 24 CP-SAT points", cold, warm, tmp)
    _print_rows(rows)
    return {"design case, free search, CP-SAT (local, 1 worker)": per["local-1"],
            "design case, free search, CP-SAT (Dask local:2, warm)": per["dask-warm"]}


def large_raw() -> dict:
    """The Llama-3-70B space of benchmarks/solve_scaling.py as raw scenario tables."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from solve_scaling import SPACES

    from tpopt.catalogs.scenario import read_scenario_file, with_overrides

    overrides = dict(SPACES[-1][1])
    raw = read_scenario_file(DESIGN)
    for key in [k for k, v in overrides.items() if v is None]:
        table, _, name = key.partition(".")
        raw.get(table, {}).pop(name, None)
        overrides.pop(key)
    raw.pop("sweep", None)
    return with_overrides(raw, overrides)


def large_section(tmp: Path) -> dict:
    raw = large_raw()
    cold = (raw, {"hw": "h100-sxm,b200", "deadline": "45d,60d", "solver": "cpsat", "time_limit": 600})
    warm = (raw, {"hw": "h100-sxm,b200", "deadline": "50d,70d", "solver": "cpsat", "time_limit": 600})
    from tpopt.optimizer import sweep as sw

    spec = sw.build_spec(*cold)
    sizes = ", ".join(f"{a} {sw.space_size(spec, a):,}" for a in spec.hw)
    print(f"\n== large space: Llama-3-70B, 2T tokens, all layouts (plans per accelerator: {sizes}), CP-SAT per point")
    rows, per = executor_rows("Llama-3-70B, 4 CP-SAT points", cold, warm, tmp)
    _print_rows(rows)
    return {"Llama-3-70B large space, CP-SAT (local, 1 worker)": per["local-1"],
            "Llama-3-70B large space, CP-SAT (Dask local:2, warm)": per["dask-warm"]}


# ---------------------------------------------------------------------------------------------
# decomposition: would one large solve gain from the cluster?


def decomposition_section() -> None:
    import pickle

    import distributed

    from tpopt.catalogs import load_catalog
    from tpopt.catalogs.scenario import build_scenario
    from tpopt.optimizer import decompose
    from tpopt.optimizer.core import solve
    from tpopt.optimizer.result import Request
    from tpopt.optimizer.space import Space
    from tpopt.optimizer.sweep.cluster import local_cluster

    print("\n== decomposition: one large solve (Llama-3-70B, 108 million plans), where its time goes")
    sc = build_scenario(large_raw(), load_catalog())
    stats = {"sub": 0.0, "n": 0}
    real = decompose.enumerate_best

    def timed_enum(*a, **k):
        t = time.perf_counter()
        out = real(*a, **k)
        stats["sub"] += time.perf_counter() - t
        stats["n"] += 1
        return out

    decompose.enumerate_best = timed_enum
    try:
        for backend in ("cpsat", "highs"):
            stats.update(sub=0.0, n=0)
            space = Space.from_scenario(sc)
            t0 = time.perf_counter()
            res = solve(sc, backend, Request(time_limit=600, workers=1), space=space)
            wall = time.perf_counter() - t0
            share = stats["sub"] / wall
            print(f"{backend}: {wall:.2f} s ({res.status.value}, {res.solver.rounds} rounds, "
                  f"{res.solver.evaluated:,} plans evaluated exactly); exact sub-evaluations {stats['sub']:.3f} s in "
                  f"{stats['n']} calls ({1e3 * stats['sub'] / max(1, stats['n']):.1f} ms each) = {100 * share:.1f} % "
                  f"of the solve: N workers save at most {100 * share:.1f} % x (1 - 1/N)")
        size = len(pickle.dumps(space))
    finally:
        decompose.enumerate_best = real
    with local_cluster(2) as cluster, distributed.Client(cluster) as client:
        client.submit(abs, -1).result()
        t0 = time.perf_counter()
        n = 50
        for i in range(n):
            client.submit(abs, -i, pure=False).result()
        rt = (time.perf_counter() - t0) / n
    print(f"a Dask round trip (local:2, a no-op task) {1e3 * rt:.1f} ms; a sub-evaluation would also need the "
          f"space's tables on the worker ({size / 1e6:.1f} MB pickled, or rebuilt there)")


def reuse_section(sample: int) -> None:
    import resource

    from tpopt.optimizer import sweep as sw

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from solve_scaling import SPACES, design_raw

    raw = design_raw(SPACES[4][1])
    raw.pop("sweep", None)
    hw = "rtx4090,h100-sxm,a100-80gb-sxm,h200,b200"
    print(f"\n== reuse: {SPACES[4][0]}, 5 accelerators x 200 deadlines on one worker")
    t0, c0 = time.perf_counter(), time.process_time()
    spec = sw.build_spec(raw, {"hw": hw, "deadline": "20d:59.8d:0.2d"})
    plans = sum(sw.space_size(spec, a) for a in spec.hw)
    res = sw.run_sweep(spec, workers=1)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    n = len(res.rows)
    print(f"{n:,} points over {plans:,} plans: {wall:.2f} s wall, {cpu:.2f} s CPU ({n / wall:,.0f} points/s), "
          f"{res.tasks} tasks, paths {res.paths}, {res.count('optimal')} optimal, "
          f"{res.count('infeasible')} infeasible, "
          f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MiB")
    if sample <= 0:
        return
    step = max(1, 200 // sample)
    days = ",".join(f"{20 + 0.2 * i:g}d" for i in range(0, 200, step))
    spec_s = sw.build_spec(raw, {"hw": hw, "deadline": days, "solver": "cpsat"})
    t0 = time.perf_counter()
    ref = sw.run_sweep(spec_s, workers=1)
    wall_s = time.perf_counter() - t0
    mine = {r["point_key"]: r for r in res.rows}
    cols = ("status", "cards", "tp", "pp", "dp", "micro_batch", "zero", "cost", "finish_days", "fastest_days")
    differ = [r["point_key"] for r in ref.rows if any(r[c] != mine[r["point_key"]][c] for c in cols)]
    print(f"CP-SAT per point on {len(ref.rows)} of those points: {wall_s:.2f} s "
          f"({len(ref.rows) / wall_s:.1f} points/s, "
          f"~{wall_s / len(ref.rows) * n:,.0f} s for {n:,}); rows that differ from the layouts path: {len(differ)}"
          + (f" ({', '.join(differ[:3])} ...)" if differ else ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=0, help="worker processes for the table section (0: the core "
                                                           "count)")
    ap.add_argument("--cpsat-sample", type=int, default=4,
                    help="deadlines per accelerator solved with CP-SAT one point at a time (0: skip)")
    ap.add_argument("--only", default="table,executors,large,decomposition,reuse",
                    help="sections to run, comma-separated")
    args = ap.parse_args()
    from tpopt.optimizer.sweep import default_workers

    only = {x.strip() for x in args.only.split(",")}
    try:
        import distributed  # noqa: F401
    except ImportError:
        print("Dask is not installed (pip install 'tpopt[distributed]'): executors, large and decomposition skipped")
        only &= {"table", "reuse"}
    workers = args.workers or default_workers()
    print(f"tpopt sweep scaling on {os.cpu_count()} cores (figures from a shared machine are noisy)")
    if "table" in only:
        table_section(workers, args.cpsat_sample)
    per_point = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if "executors" in only:
            per_point.update(executors_section(tmp))
        if "large" in only:
            per_point.update(large_section(tmp))
        if per_point:
            per_point["issue 15's large-space points (25-30 s each, measured elsewhere)"] = 27.5
            extrapolate(per_point, journal_rate(tmp))
    if "decomposition" in only:
        decomposition_section()
    if "reuse" in only:
        reuse_section(args.cpsat_sample)


if __name__ == "__main__":
    main()
