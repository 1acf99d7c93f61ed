"""Wall time of the pipeline event model (tpopt.models.pipeline): one ``simulate`` call, and the
vectorised ``completion_time`` over K duration sets, with the speed-up over K simulate calls.

    .venv/bin/python benchmarks/pipeline_sim.py            # p = 64, m = 512, K = 10,000
    .venv/bin/python benchmarks/pipeline_sim.py -p 8 -m 32 --schedules 1f1b,zb-h1

``cold`` includes compiling the slot order of the shape (cached afterwards); ``warm`` is the best of
several calls with the order cached. The vectorised check compares a few elements with simulate.
Not a test: timings depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from tpopt.models import pipeline as pl


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-p", type=int, default=64, help="stages (default 64)")
    ap.add_argument("-m", type=int, default=512, help="micro-batches (default 512)")
    ap.add_argument("-k", type=int, default=10_000, help="duration sets for completion_time (default 10,000)")
    ap.add_argument("--schedules", default=",".join(pl.SCHEDULES), help="comma-separated schedule names")
    ap.add_argument("--repeat", type=int, default=3, help="warm simulate calls, best taken (default 3)")
    args = ap.parse_args(argv)
    p, m, k = args.p, args.m, args.k
    rng = np.random.default_rng(0)
    forward = rng.uniform(5e-3, 15e-3, k)
    bx = rng.uniform(5e-3, 15e-3, k)
    bw = rng.uniform(0.0, 15e-3, k)
    transfer = rng.uniform(0.0, 2e-3, k)
    update = 1e-3

    print(f"pipeline event model: p = {p}, m = {m}; vectorised over K = {k:,} duration sets")
    head = (f"{'schedule':<18} {'ops':>8} {'cold':>8} {'warm':>8} {'events':>8} {'vector K':>9} "
            f"{'per set':>9} {'K x warm':>9} {'speed-up':>9}")
    print(head)
    print("-" * len(head))
    for schedule in args.schedules.split(","):
        schedule = schedule.strip()
        pl._program.cache_clear()
        pl._waves.cache_clear()
        t0 = time.perf_counter()
        r = pl.simulate(schedule, p, m, 10e-3, 10e-3, 10e-3, 1e-3, update)
        cold = time.perf_counter() - t0
        warm = _best(lambda schedule=schedule: pl.simulate(schedule, p, m, 10e-3, 10e-3, 10e-3, 1e-3, update),
                     args.repeat)
        t0 = time.perf_counter()
        n_events = len(r.events)
        t_events = time.perf_counter() - t0
        pl.completion_time(schedule, p, m, 10e-3, 10e-3, 10e-3, 1e-3, update)  # build the wave plan
        t0 = time.perf_counter()
        vec = pl.completion_time(schedule, p, m, forward, bx, bw, transfer, update)
        t_vec = time.perf_counter() - t0
        for i in (0, k // 2, k - 1):
            ref = pl.simulate(schedule, p, m, forward[i], bx[i], bw[i], transfer[i], update).completion
            # the recurrence repeats the event model's additions; closed forms sum them in another order
            assert vec[i] == ref or (schedule in pl.CLOSED_FORM and abs(vec[i] - ref) <= 1e-12 * ref), \
                (schedule, i, vec[i], ref)
        print(f"{schedule:<18} {n_events - p:>8,} {cold:>7.3f}s {warm:>7.3f}s {t_events:>7.3f}s {t_vec:>8.2f}s "
              f"{t_vec / k * 1e6:>7.0f}us {warm * k:>8.0f}s {warm * k / t_vec:>8.0f}x")
    print("cold: first call for the shape (slot order + topological compile); warm: order cached;")
    print("events: building the Event list on first access; speed-up = K x warm simulate / vectorised.")


if __name__ == "__main__":
    main()
