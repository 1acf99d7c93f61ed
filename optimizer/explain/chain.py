"""What binds beyond the card limit (issue 37 item 4): when no card count alone meets the deadline, the inputs
that stop more cards from helping, each with the smallest value that, with the others, makes the request
feasible.

More cards shorten a step only while the data-parallel degree can grow (the global batch caps it:
dp x micro_batch x accumulation = batch) and while the time lost to checkpoints and failures stays small (it
grows with the card count: saves take checkpoint bytes / storage bandwidth, failures arrive at cards / MTBF).
So past the largest card count the search space forms, the fastest plan is held by the storage bandwidth
and the batch. The chain is found in the order a user can act: storage (an infrastructure purchase), then the
batch (a training choice), then the card count:

1. the smallest batch b* among the current batch's multiples (:data:`BATCH_FACTORS`) with which the fastest plan
   at the largest card count, with storage :data:`BANDWIDTH_FACTOR_MAX` x faster, meets the deadline (none:
   no chain);
2. the smallest storage bandwidth W* at (b*, largest card count): the fastest finish is nonincreasing in W (a
   faster write only shortens saves), bisected like the NIC bandwidth (relax._threshold), rounded up to 0.1
   GB/s; W* is the current bandwidth when it already suffices (then storage is not part of the chain);
3. the fewest cards n* at (b*, W*): "a plan with at most n cards" is monotone in n, bisection over the
   counts the search space forms.

The three values together are confirmed by one more solve; the plan of that solve is the answer's plan.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from tpopt.models import families as F
from tpopt.models.evaluate import Evaluation
from tpopt.models.plan import Scenario
from tpopt.models.units import DAY, GB
from tpopt.optimizer.explain.context import Context
from tpopt.optimizer.explain.inputs import with_max_cards, with_write_bandwidth

BANDWIDTH_FACTOR_MAX = 1000.0
"""Storage bandwidth is searched up to this multiple of the current one."""
BANDWIDTH_DIGITS = 1
"""The storage bandwidth is printed, and rounded up, to 0.1 GB/s."""
BATCH_FACTORS = (1, 2, 3, 4, 6, 8, 12, 16)
"""Global batches tried: these multiples of the current batch (in sequences)."""
BANDWIDTH_TOL = 1e-4
"""Relative tolerance of the storage-bandwidth bisection."""


def with_global_batch(sc: Scenario, sequences: int) -> Scenario:
    """The global batch set to ``sequences`` (tokens unchanged: fewer, larger steps)."""
    return replace(sc, task=replace(sc.task, global_batch=int(sequences)))


def beyond_cards(ctx: Context, counts: list[int]) -> dict[str, Any] | None:
    """The chain of the module docstring for the card counts ``counts`` (sorted, above today's cap), or None
    when no batch of :data:`BATCH_FACTORS` with the fastest storage meets the deadline at the largest count.
    Returns ``{"steps": [{"parameter", "label", "current", "required", "unit", "apply"}], "plan": Evaluation,
    "fastest_days": the fastest finish at the largest count today, "overhead": its checkpoint and failure
    overhead, "save_overhead": its save share}``."""
    sc = ctx.sc
    deadline = F.limit(F.DEADLINE, sc)
    keep, ctx.keep = ctx.keep, None  # the batch moves the divisibility rule: no narrowed spaces
    try:
        return _chain(ctx, sc, counts, deadline)
    finally:
        ctx.keep = keep


def _fastest(ctx: Context, sc: Scenario) -> Evaluation | None:
    return ctx.best(sc, objective="time", drop=(F.DEADLINE,))


def _finish(ctx: Context, sc: Scenario) -> float:
    ev = _fastest(ctx, sc)
    return math.inf if ev is None else float(ev.metrics["finish_days"]) * DAY


def _chain(ctx: Context, sc: Scenario, counts: list[int], deadline: float) -> dict[str, Any] | None:
    top = with_max_cards(sc, counts[-1])
    today = _fastest(ctx, top)
    if today is None:
        return None
    bw0, b0 = sc.reliability.write_bandwidth, sc.task.global_batch
    fast = bw0 * BANDWIDTH_FACTOR_MAX
    batch = next((b0 * k for k in BATCH_FACTORS
                  if _finish(ctx, with_global_batch(with_write_bandwidth(top, fast), b0 * k)) <= deadline), None)
    if batch is None:
        return None
    at_batch = with_global_batch(top, batch)
    bw = bw0
    if _finish(ctx, at_batch) > deadline:  # storage must be faster: bisection on the bandwidth
        lo, hi = bw0, fast  # lo too slow, hi fast enough
        while hi - lo > BANDWIDTH_TOL * hi:
            mid = math.sqrt(lo * hi) if hi / lo > 4 else 0.5 * (lo + hi)
            if _finish(ctx, with_write_bandwidth(at_batch, mid)) <= deadline:
                hi = mid
            else:
                lo = mid
        step = 10.0**-BANDWIDTH_DIGITS
        bw = math.ceil(hi / GB / step - 1e-9) * step * GB
        while _finish(ctx, with_write_bandwidth(at_batch, bw)) > deadline:  # rounding at the boundary
            bw += step * GB
    chosen = with_write_bandwidth(with_global_batch(sc, batch), bw)
    lo_i, hi_i = -1, len(counts) - 1  # counts[hi_i] feasible (confirmed below), counts[lo_i] (or today's cap) not
    while hi_i - lo_i > 1:
        mid = (lo_i + hi_i) // 2
        if ctx.feasible(with_max_cards(chosen, counts[mid])) is not None:
            hi_i = mid
        else:
            lo_i = mid
    cards = counts[hi_i]
    plan = ctx.feasible(with_max_cards(chosen, cards))
    if plan is None:
        return None
    steps: list[dict[str, Any]] = []
    if bw != bw0:
        steps.append({"parameter": "write_bandwidth", "label": "storage bandwidth", "current": bw0 / GB,
                      "required": round(bw / GB, BANDWIDTH_DIGITS), "unit": "GB/s",
                      "apply": {"checkpoint.write_bandwidth": f"{bw / GB:.{BANDWIDTH_DIGITS}f}GB/s"}})
    if batch != b0:
        steps.append({"parameter": "global_batch", "label": "global batch", "current": b0, "required": batch,
                      "unit": "sequences", "apply": {"task.global_batch": batch}})
    steps.append({"parameter": "max_cards", "label": "max cards", "current": int(F.limit(F.CARDS, sc)),
                  "required": cards, "unit": "cards", "apply": {"search.max_cards": cards}})
    m = today.metrics
    return {"steps": steps, "plan": plan, "largest_count": counts[-1],
            "fastest_days": float(m["finish_days"]), "overhead": float(m["overhead_fraction"]),
            "save_overhead": float(m["overhead_save"]), "dp": int(today.plan.dp), "batch": b0}

