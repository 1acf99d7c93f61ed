"""Issue 36, items 1 and 2, on more drawn scenarios than the tests run: the chance law with every risk and
one question, one answer.

* chance: scenarios of tests/test_chance_spot.py (spot offers, mixes, on-demand beside them; batch choices
  with the [risk] table's preemptions), each solved at its confidence q; the plan's whole runs simulated with
  every risk stated in the test (seeded); a failure is a simulated P(on time) below q - 3 sampling errors;
* question: scenarios of tests/test_one_question.py (batch choices, two stages, offers); a failure is any
  difference between explain / simulate / replan and solve, or between the batch optimum and a brute force.

Not a test (it takes minutes); the tests run 200 / 24 drawn by Hypothesis. Run:

    .venv/bin/python benchmarks/one_answer.py [--chance 240] [--question 520] [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import test_chance_spot as chance  # noqa: E402
import test_one_question as question  # noqa: E402


def run_chance(n: int, start: int) -> None:
    t0 = time.perf_counter()
    plans = fails = 0
    margin = 1.0
    for seed in range(start, start + n):
        sc = chance.drawn(seed)
        ok, p, q = chance.check(sc)
        if p is not None:
            plans += 1
            margin = min(margin, p - q)
        if not ok:
            fails += 1
            print(f"  chance: scenario {seed}: simulated P {p:.4f} < {q:.2f} - 3 sampling errors", flush=True)
    print(f"chance: {n} scenarios ({plans} with a plan), {fails} below q - 3 sampling errors; smallest simulated "
          f"P - q {margin:+.4f}; {time.perf_counter() - t0:.0f} s", flush=True)


def run_question(n: int, start: int) -> None:
    t0 = time.perf_counter()
    kinds: dict[str, int] = {}
    fails = plans = 0
    for seed in range(start, start + n):
        sc, raw = question.drawn(seed)
        kind = "stages" if sc.stages else "market" if sc.market.offers else "batch"
        kinds[kind] = kinds.get(kind, 0) + 1
        bad, feasible = question.check(sc, raw)
        plans += feasible
        if bad:
            fails += 1
            print(f"  question: scenario {seed} ({kind}): {'; '.join(bad)}", flush=True)
    print(f"question: {n} scenarios ({', '.join(f'{v} {k}' for k, v in sorted(kinds.items()))}; {plans} with a "
          f"plan), {fails} with a difference; {time.perf_counter() - t0:.0f} s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chance", type=int, default=240)
    ap.add_argument("--question", type=int, default=520)
    ap.add_argument("--seed", type=int, default=0, help="first scenario number")
    a = ap.parse_args()
    if a.chance:
        run_chance(a.chance, a.seed)
    if a.question:
        run_question(a.question, a.seed)


if __name__ == "__main__":
    main()
