"""2. Minimal relaxations (:func:`relaxations`): one input freed at a time, every other input and family unchanged.

One ``relax_*`` function per input states the relation it uses: the fastest plan for the deadline, the least of
a metric over the plans (:func:`~tpopt.optimizer.explain.context.argmin_metric`) for cards and memory, a
bisection over a monotone-in-practice input (:func:`_threshold`: efficiency, NIC bandwidth), the closed form over
every plan for tokens and reserved time (:func:`most_iterations`, :func:`most_reserved`). The budget, the card
price and the accelerator are in :mod:`tpopt.optimizer.explain.cost`.

Tests switch the closed forms off by patching ``most_iterations`` and ``most_reserved`` on this module.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import replace
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from tpopt.catalogs import Catalog, load_catalog
from tpopt.models import families as F
from tpopt.models import terms as T
from tpopt.models.evaluate import Evaluation
from tpopt.models.plan import Scenario
from tpopt.models.roofline import PerfParams
from tpopt.models.units import DAY, GB, GIB
from tpopt.optimizer.backends import Solver
from tpopt.optimizer.explain import cost
from tpopt.optimizer.explain.conflicts import other_conflict
from tpopt.optimizer.explain.context import Context, NotOnDemand, argmin_metric, largest_over_plans, tabulated
from tpopt.optimizer.explain.cost import relax_accelerator, relax_card_price, relax_max_cost
from tpopt.optimizer.explain.inputs import (
    PARAMS,
    Relaxation,
    _applies,
    _apply_dict,
    _cannot,
    _relaxation,
    _settle,
    _single,
    with_deadline,
    with_efficiency,
    with_input_rate,
    with_max_cards,
    with_max_drop,
    with_nic_factor,
    with_nics_per_host,
    with_reserved,
    with_tokens,
    with_usable_memory,
    with_write_bandwidth,
)
from tpopt.optimizer.limits import CLOCK_STOP, Clock, TimeLimitReached, Undecided, clock_of
from tpopt.optimizer.result import Request
from tpopt.optimizer.space import VARS, Space, card_counts

THROUGHPUT_SCALE_MAX = 3.0  # per-operation model: the largest throughput scale the relaxation searches
EFFICIENCY_TOL = 1e-5  # relative tolerance on the efficiency threshold (0.0005 points at 47 %)
NIC_FACTOR_MAX = 1000.0  # NIC bandwidth is searched up to this multiple of the current one
NIC_REL_TOL = 1e-6  # relative tolerance on the NIC bandwidth threshold
RESERVED_TOL_S = 1.0  # bisection tolerance on reserved time (only with a budget cap)
GRID = 8  # probes below the upper end when it is infeasible (feasibility may not be monotone)


def _fastest(ctx: Context, drop: Iterable[str]) -> Evaluation | None:
    return ctx.best(objective="time", drop=drop)


def relax_deadline(ctx: Context, core: list[str] | None = None) -> Relaxation:
    """Required deadline T* = min over plans meeting every other family of
    T_finish = T_reserved + ceil(D / b) x t_step x (1 + L)   (objective "time", deadline.finish freed)."""
    p = PARAMS["deadline"]
    cur = F.limit(F.DEADLINE, ctx.sc) / DAY
    method = "min finish time with deadline.finish relaxed (objective time)"
    fastest = _fastest(ctx, [F.DEADLINE])
    if fastest is None:
        return _cannot(p, cur, "no plan meets the other constraints at any deadline", method, core)
    t_star = fastest.metrics["finish_days"] * DAY
    if ctx.sc.task.confidence is not None:  # the chance form: the fastest plan's q-quantile (an upper bound)
        t_star = next(c.value for c in fastest.constraints if c.name == F.DEADLINE) * DAY
        method = "the fastest plan's finish quantile at the confidence (deadline.finish relaxed, objective time)"
    value, ev, apply = _settle(ctx, p, t_star / DAY, lambda s: with_deadline(ctx.sc, s))
    if ev is None:
        return _cannot(p, cur, "the fastest plan could not be confirmed at its own finish time", method, core)
    return _relaxation(p, cur, required=value, required_exact=t_star / DAY, helps=True, plan=ev, apply=apply,
                       method=method)


def relax_max_cards(ctx: Context, core: list[str] | None = None) -> Relaxation:
    """Required cards n* = min { n formable : a plan exists with max_cards = n } (cards.max freed one
    count at a time; "a plan with at most n cards" is monotone in n, so bisection over the sorted
    card counts tp x pp x dp of the search space is exact)."""
    p = PARAMS["max_cards"]
    sc = ctx.sc
    cur = int(F.limit(F.CARDS, sc))
    method = "smallest card count whose max_cards-restricted problem is feasible (bisection over counts)"
    d = Space.from_scenario(sc).domains
    counts = card_counts(d)
    counts = [n for n in counts if n > cur]
    if not counts:
        return _cannot(p, cur, f"the search space forms no card count above {cur}", method, core)

    def ok(n: int) -> Evaluation | None:
        return ctx.feasible(with_max_cards(sc, n))

    if tabulated(Space.from_scenario(sc)):
        # small space: n* = min cards over plans meeting every other family (one enumeration)
        method = "fewest cards over plans meeting the other constraints (exhaustive)"
        m = argmin_metric(ctx, "cards", [f for f in ctx.enforced if f != F.CARDS])
        if m is None:
            return _cannot(p, cur, f"no plan even with max_cards = {counts[-1]} (the largest count the search "
                                   "space forms)", method, core)
        n = int(m[0])
        ev = ok(n)
        if ev is not None:
            return _relaxation(p, cur, required=n, required_exact=float(n), helps=True, plan=ev,
                               apply=_apply_dict(ctx, p, n), method=method)
    top = ok(counts[-1])
    if top is None:
        r = _cannot(p, cur, f"no plan even with max_cards = {counts[-1]} (the largest count the search space "
                            "forms)", method, core)
        if F.DEADLINE in ctx.enforced:  # what stops more cards from helping: storage, then the batch
            from tpopt.optimizer.explain.chain import beyond_cards  # lazy: only when cards cannot help

            r.chain = beyond_cards(ctx, counts)
        return r
    lo, hi, best = -1, len(counts) - 1, top  # counts[hi] feasible, counts[lo] (or cur) not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        ev = ok(counts[mid])
        if ev is not None:
            hi, best = mid, ev
        else:
            lo = mid
    n = counts[hi]
    return _relaxation(p, cur, required=n, required_exact=float(n), helps=True, plan=best,
                       apply=_apply_dict(ctx, p, n), method=method)


def relax_usable_memory(ctx: Context, core: list[str] | None = None) -> Relaxation:
    """Required usable memory M* = min over plans meeting every other family of the peak per card
    (the memory family's value: the largest stage-class sum of states + activations + temporary): usable
    memory enters memory.per_card only, so the plan with the least memory becomes feasible exactly when
    usable >= M* (exhaustive, exact)."""
    p = PARAMS["usable_memory"]
    sc = ctx.sc
    cur = min(F.limit(F.MEMORY_PER_CARD, sc, k) for k in sc.systems) / GIB
    by_card = {k: F.limit(F.MEMORY_PER_CARD, sc, k) / GIB for k in sc.systems} if len(sc.systems) > 1 else None
    method = "min peak memory per card over plans meeting the other constraints (exhaustive)"
    m = argmin_metric(ctx, "memory_per_card", [f for f in ctx.enforced if f != F.MEMORY_PER_CARD])
    if m is None:
        r = _cannot(p, cur, "no plan meets the other constraints with any amount of memory", method, core)
        r.current_by_card = by_card
        return r
    need = m[0]
    single = _single(sc) is not None
    value, ev, apply = _settle(ctx, p, need / GIB, lambda s: with_usable_memory(sc, s),
                               None if single else (lambda u: u * GIB))
    if ev is None or value is None:  # _settle gives both or neither
        return _cannot(p, cur, "could not be confirmed by re-solving", method, core)
    cat = ctx.catalog or load_catalog()
    largest = max(cat.accelerators.values(), key=lambda a: a.memory_usable)
    note = ""
    if value * GIB > largest.memory_usable:
        note = (f"more than any catalog card offers (largest: {largest.name}, "
                f"{largest.memory_usable / GIB:.1f} GiB usable)")
    elif not single:
        note = "raises every candidate accelerator to at least this much"
    r = _relaxation(p, cur, required=value, required_exact=need / GIB, helps=True, plan=ev, apply=apply,
                    method=method, note=note)
    r.current_by_card = by_card
    return r


def relax_max_drop(ctx: Context, core: list[str] | None = None) -> Relaxation | None:
    """Required maximum drop rate d* = min over plans meeting every other family of the share of
    dispatches their capacity factor drops (moe.routing_drops): the rate enters moe.capacity_drops only,
    so that plan becomes feasible exactly when max_drop >= d* (exhaustive, exact). None for a dense model."""
    sc = ctx.sc
    if not sc.model.moe or F.CAPACITY_DROPS not in ctx.enforced:
        return None
    p = PARAMS["max_drop"]
    cur = F.limit(F.CAPACITY_DROPS, sc) * 100
    method = "min dropped share over plans meeting the other constraints (exhaustive)"
    m = argmin_metric(ctx, "dropped_fraction", [f for f in ctx.enforced if f != F.CAPACITY_DROPS])
    if m is None:
        return _cannot(p, cur, "no plan meets the other constraints at any drop rate", method, core)
    value, ev, apply = _settle(ctx, p, m[0] * 100, lambda s: with_max_drop(sc, s))
    if ev is None:
        return _cannot(p, cur, "could not be confirmed by re-solving", method, core)
    return _relaxation(p, cur, required=value, required_exact=m[0] * 100, helps=True, plan=ev, apply=apply,
                       method=method)


def _threshold(ctx: Context, make: Callable[[float], Scenario], lo: float, hi: float, tol: float
               ) -> tuple[float, Evaluation | None] | None:
    """Smallest x in (lo, hi] at which the request admits a plan, to ``tol`` relative to x.

    feasible(x) <=> T*(x) <= T_deadline, where T*(x) is the least finish time over plans meeting
    every other family (objective "time", deadline.finish freed). For efficiency and bandwidth T* is
    nonincreasing in x and nearly affine in u = 1/x (compute ~ 1/eta, link time ~ 1/B), so a secant
    on u lands next to the crossing; each estimate is closed by one solve ``tol`` to its other side,
    and a bisection step follows whenever the bracket did not halve. ``lo`` must be infeasible.

    Faster steps raise the input demand, so input.throughput can make feasibility non-monotone. If
    ``hi`` is infeasible: with input.throughput dropped too, T* is monotone, so T*(hi) > T_deadline
    proves no x <= hi helps; otherwise GRID points below ``hi`` are probed for a feasible window.
    Returns (x, fastest plan at x) or None.
    """
    deadline = F.limit(F.DEADLINE, ctx.sc)

    made: dict[float, Scenario] = {}  # one scenario per value: its tables are built once (Context.space_for)

    def t(x: float, drop: Iterable[str] = ()) -> tuple[float, Evaluation | None]:
        sc = made.get(x)
        if sc is None:
            sc = made[x] = make(x)
        ev = ctx.best(sc, objective="time", drop=(F.DEADLINE,) + tuple(drop))
        return (_finish_against_deadline(sc, ev) if ev is not None else math.inf), ev

    t_hi, ev_hi = t(hi)
    if t_hi > deadline:
        if F.INPUT_THROUGHPUT not in ctx.enforced or t(hi, (F.INPUT_THROUGHPUT,))[0] > deadline:
            return None
        prev = lo
        for k in range(1, GRID):
            x = lo + (hi - lo) * k / GRID
            tx, ex = t(x)
            if tx <= deadline:
                hi, t_hi, ev_hi, lo = x, tx, ex, prev
                break
            prev = x
        else:
            return None
    t_lo, _ = t(lo)
    while hi - lo > tol * hi:
        before = hi - lo
        if math.isfinite(t_lo) and t_lo > t_hi:
            u = 1 / hi + (1 / lo - 1 / hi) * (deadline - t_hi) / (t_lo - t_hi)
            x = 1 / u
        else:
            x = 0.5 * (lo + hi)
        x = min(max(x, lo + 1e-3 * before), hi - 1e-3 * before)
        for probe in (x, None):
            if probe is None:  # close the estimate from its other side
                probe = x - tol * x if hi == x else x + tol * x
                if not lo < probe < hi:
                    break
            tp, ep = t(probe)
            if tp <= deadline:
                hi, t_hi, ev_hi = probe, tp, ep
            else:
                lo, t_lo = probe, tp
            if hi - lo <= tol * hi:
                break
        if hi - lo > 0.5 * before and hi - lo > tol * hi:
            m = 0.5 * (lo + hi)
            tm, em = t(m)
            if tm <= deadline:
                hi, t_hi, ev_hi = m, tm, em
            else:
                lo, t_lo = m, tm
    return hi, ev_hi


def _finish_against_deadline(sc: Scenario, ev: Evaluation) -> float:
    """What the deadline family compares with the deadline for the plan ``ev`` (seconds): its finish time, or
    under a confidence its finish quantile at that confidence (the chance form, as :func:`relax_deadline` reads
    it): the median finish would call a plan on time that the request's own solve rules out."""
    if sc.task.confidence is None:
        return float(ev.metrics["finish_days"]) * DAY
    return float(next(c.value for c in ev.constraints if c.name == F.DEADLINE)) * DAY


def fitted_words(name: str, perf: PerfParams) -> str:
    """Whether a card's performance numbers are fitted or priors, as the performance catalog's ``calibrated`` list
    says (catalogs/performance.toml: the fields fitted to measured runs; the others are priors): "NAME: prior" (none
    fitted) or "NAME: F, G calibrated, the rest prior"."""
    if not perf.calibrated:
        return f"{name}: prior"
    return f"{name}: {', '.join(perf.calibrated)} calibrated, the rest prior"


def efficiency_ceiling(ctx: Context) -> tuple[float, str]:
    """The highest efficiency the relaxation considers, and why: the flat model's MFU cannot exceed the
    fraction of the matrix peak a large GEMM reaches on the card (its ``gemm_efficiency`` eta_max in
    catalogs/performance.toml; the largest among the candidates), nor 100 %; the per-operation model's
    scale cannot exceed 100 % of the modelled throughput (the model already runs every operation at the
    efficiency the performance catalog gives: more would be faster than the catalog says the card runs). Whether
    those numbers were calibrated on runs or are priors is said as the catalog's ``calibrated`` list says it
    (:func:`fitted_words`), never "measured" for a prior."""
    sc = ctx.sc
    if any(s.per_op for s in sc.systems.values()):
        basis = "; ".join(fitted_words(name, s.perf) for name, s in sc.systems.items() if s.per_op and s.perf)
        return 1.0, ("100 % of the modelled throughput: every operation at the efficiency the performance catalog "
                     f"gives the card ({basis})")
    cat = ctx.catalog or load_catalog()
    perfs = {name: s.perf or cat.perf(name) for name, s in sc.systems.items()}
    peaks = {name: p.gemm_efficiency for name, p in perfs.items()}
    name = max(peaks, key=lambda k: peaks[k])
    how = "calibrated" if "gemm_efficiency" in perfs[name].calibrated else "prior"
    return min(1.0, peaks[name]), (f"{name}'s large-GEMM efficiency eta_max {peaks[name] * 100:.4g} % ({how}, "
                                   "catalogs/performance.toml)")


def relax_efficiency(ctx: Context, core: list[str] | None = None) -> Relaxation:
    """Required efficiency eta* = min { eta in (eta_0, 1] : T*(eta) <= T_deadline }. Efficiency divides
    the compute time (t = F / (p P eta)), so a higher eta never slows a plan (see ``_threshold``)."""
    p = PARAMS["efficiency"]
    sc = ctx.sc
    eta0 = min(s.efficiency for s in sc.systems.values())
    # per-operation model: the efficiency is a scale on the modelled throughput (100 % = as calibrated)
    per_op = any(s.per_op for s in sc.systems.values())
    hi, why = efficiency_ceiling(ctx)
    method = (f"min finish time as a function of efficiency in ({eta0:g}, {hi:g}] crossing the deadline (secant on "
              f"1/eta, bracketed), relative tolerance {EFFICIENCY_TOL:g}"
              + ("; per-operation model: percent of the modelled throughput" if per_op else ""))
    if eta0 >= hi:
        return _cannot(p, eta0 * 100, f"skipped: already at the ceiling ({why})", method, core)
    found = _threshold(ctx, lambda e: with_efficiency(sc, e), eta0, hi, EFFICIENCY_TOL)
    if found is None:
        return _cannot(p, eta0 * 100, f"skipped: no plan even at {hi * 100:.4g} % "
                       + ("of the modelled throughput" if per_op else "efficiency") + f", the most any run reaches "
                       f"({why}); a change nobody can make", method, core)
    eta, _ = found
    value, ev, apply = _settle(ctx, p, min(eta * 100, 100.0 * hi), lambda s: with_efficiency(sc, s))
    if ev is None or per_op:  # rounding up crossed 100 %; per-operation: no flat efficiency to write back
        value, ev, apply = (value if ev is not None else eta * 100), (ev or found[1]), None
    return _relaxation(p, eta0 * 100, required=value, required_exact=eta * 100, helps=True, plan=ev, apply=apply,
                       method=method)


def relax_nic_bandwidth(ctx: Context, core: list[str] | None = None) -> Relaxation:
    """Required NIC bandwidth B* = k* x B_nic with k* = min { k in (1, 1000] : T*(k) <= T_deadline }.
    NIC bandwidth only shortens communication (B = min(intra, k_nic B_nic / tp) across hosts; see
    ``_threshold``). With several candidate accelerators the factor k* is reported ("x current")."""
    p = PARAMS["nic_bandwidth"]
    sc = ctx.sc
    single = _single(sc)
    method = (f"min finish time as a function of the NIC bandwidth factor in (1, {NIC_FACTOR_MAX:g}] crossing "
              f"the deadline (secant on 1/B, bracketed), relative tolerance {NIC_REL_TOL:g}")
    cur = single.acc.nic_bw / GB if single else 1.0
    unit = "GB/s" if single else "x current"
    found = None if cost.over_budget_at(ctx, with_nic_factor(sc, NIC_FACTOR_MAX)) else \
        _threshold(ctx, lambda k: with_nic_factor(sc, k), 1.0, NIC_FACTOR_MAX, NIC_REL_TOL)
    if found is None:
        r = _cannot(p, cur, f"no plan even with {NIC_FACTOR_MAX:g}x the NIC bandwidth: compute or the card's own "
                            "link limits the step", method, core)
        r.unit = unit
        return r
    k, ev0 = found
    if single:
        bw0 = single.acc.nic_bw
        value, ev, apply = _settle(ctx, p, k * bw0 / GB, lambda s: with_nic_factor(sc, s / bw0))
        exact = k * bw0 / GB
    else:
        value, ev, apply = _settle(ctx, replace(p, unit="x"), k, lambda s: with_nic_factor(sc, s), lambda u: u)
        exact = k
    if ev is None:
        value, ev, apply = exact, ev0, None
    r = _relaxation(p, cur, required=value, required_exact=exact, helps=True, plan=ev, apply=apply, method=method)
    r.unit = unit
    return r


def _nic_counts(sc: Scenario) -> tuple[tuple[int, ...], int, int]:
    """The NICs per host the request searches (``[search] nics_per_host``, else each accelerator's default), the
    most of them, and the most NICs a host of any candidate accelerator takes (its catalog ``max_nics_per_host``)."""
    accs = [s.acc for s in sc.systems.values()]
    searched = tuple(sorted(set(sc.search.nics_per_host or (a.nics_per_host for a in accs))))
    return searched, max(searched), max(max(a.max_nics_per_host, a.nics_per_host) for a in accs)


def relax_nics_per_host(ctx: Context, core: list[str] | None = None) -> Relaxation:
    """Required NICs per host n* = min { n in (n_0, n_max] : a plan exists with n NICs per host searched }, n_0 the
    most the request searches, n_max the most a host of a candidate accelerator takes: each NIC adds B_nic to a
    host's bandwidth across hosts (B = n B_nic / tp) and its price to the cost, so each count is one re-solve
    (the NIC count is a plan variable: its values are searched again, the other variables narrowed as for any
    input). Cannot help when the hosts already have their most NICs."""
    p = PARAMS["nics_per_host"]
    sc = ctx.sc
    searched, cur, most = _nic_counts(sc)
    method = f"each NIC count per host in ({cur}, {most}] added to the search, re-solved"
    if cur >= most:
        return _cannot(p, cur, f"the hosts already have the most NICs they take ({most})", method, core)
    keep_vars, ctx.keep_vars = ctx.keep_vars, tuple(v for v in ctx.keep_vars if v != "nics")
    try:
        for n in range(cur + 1, most + 1):
            counts = (*searched, n)
            ev = ctx.feasible(with_nics_per_host(sc, counts))
            if ev is not None:
                apply = _apply_dict(ctx, p, list(counts))
                return _relaxation(p, cur, required=n, required_exact=float(n), helps=True, plan=ev,
                                   apply=apply if apply is not None and _applies(ctx, apply) else None,
                                   method=method)
    finally:
        ctx.keep_vars = keep_vars
    return _cannot(p, cur, f"no plan even with {most} NICs per host: the bandwidth across hosts does not limit "
                           "the plan", method, core)


STORAGE_FACTOR_MAX = 1000.0  # storage bandwidth is searched up to this multiple of the current one
STORAGE_REL_TOL = 1e-4  # relative tolerance on the storage bandwidth threshold
INPUT_FACTOR_MAX = 1000.0  # the input rate per worker is searched up to this multiple of the current one
INPUT_REL_TOL = 1e-4  # relative tolerance on the input rate threshold


def relax_write_bandwidth(ctx: Context, core: list[str] | None = None) -> Relaxation:
    """Required storage bandwidth W* = min { W in (W_0, 1000 W_0] : T*(W) <= T_deadline }: the bandwidth only
    shortens checkpoint writes (save overhead c / tau, the backlog write <= interval), so the least finish time
    T* is nonincreasing in W (see ``_threshold``)."""
    p = PARAMS["write_bandwidth"]
    sc = ctx.sc
    bw0 = sc.reliability.write_bandwidth
    method = (f"min finish time as a function of the storage bandwidth in (1, {STORAGE_FACTOR_MAX:g}] x the current "
              f"crossing the deadline (secant on 1/W, bracketed), relative tolerance {STORAGE_REL_TOL:g}")
    found = None if cost.over_budget_at(ctx, with_write_bandwidth(sc, bw0 * STORAGE_FACTOR_MAX)) else \
        _threshold(ctx, lambda k: with_write_bandwidth(sc, k * bw0), 1.0, STORAGE_FACTOR_MAX, STORAGE_REL_TOL)
    if found is None:
        return _cannot(p, bw0 / GB, f"no plan even with {STORAGE_FACTOR_MAX:g}x the storage bandwidth: checkpoint "
                                    "writes do not limit the plan", method, core)
    k, _ = found
    value, ev, apply = _settle(ctx, p, k * bw0 / GB, lambda s: with_write_bandwidth(sc, s))
    if ev is None or value is None:  # e.g. the chance form: its finish quantile, not the mean, binds
        return _cannot(p, bw0 / GB, f"the fastest plan meets the deadline from {k * bw0 / GB:.4g} GB/s on, but no "
                                    "plan of the request at that bandwidth was confirmed by re-solving", method, core)
    return _relaxation(p, bw0 / GB, required=value, required_exact=k * bw0 / GB, helps=True, plan=ev, apply=apply,
                       method=method)


def _fixed_batch(ctx: Context) -> bool:
    """The batch is one stated number: no batch choices, no critical batch (tokens then depend on it)."""
    sc = ctx.sc
    return not sc.search.global_batch and sc.task.critical_batch is None and sc.task.ramp is None


def relax_global_batch(ctx: Context, core: list[str] | None = None) -> Relaxation | None:
    """Required global batch b* = the smallest of the batch's multiples (explain.chain.BATCH_FACTORS, up to 16x)
    with which a plan exists, tokens unchanged (fewer, larger steps: more data parallelism, fewer pipeline
    bubbles); each candidate is one solve, every layout searched again (the batch moves the divisibility rule).
    None when the batch is a choice, follows a critical batch or ramps up. One solve with the batch a decision over
    the candidates would answer another question (the cheapest batch, not the smallest with a plan) and is not
    faster (benchmarks/timed_checks.py: 0.3-1.8 s against 0.01-0.9 s for the solves in order on the design case and
    Llama-3-405B); the first solve's bounds do not carry to another batch (every table moves with it)."""
    from tpopt.optimizer.explain.chain import BATCH_FACTORS, with_global_batch  # lazy: explain only

    if not _fixed_batch(ctx):
        return None
    p = PARAMS["global_batch"]
    sc = ctx.sc
    b0 = sc.task.global_batch
    method = f"smallest multiple of the batch (x {', '.join(map(str, BATCH_FACTORS[1:]))}) with a plan, re-solved"
    keep, ctx.keep = ctx.keep, None
    try:
        for k in BATCH_FACTORS[1:]:
            ev = ctx.feasible(with_global_batch(sc, b0 * k))
            if ev is not None:
                apply = _apply_dict(ctx, p, b0 * k)
                return _relaxation(p, b0, required=b0 * k, required_exact=float(b0 * k), helps=True, plan=ev,
                                   apply=apply, method=method, note=f"{b0 * k * sc.task.seq_len:,} tokens per step")
    finally:
        ctx.keep = keep
    return _cannot(p, b0, f"no plan even with {BATCH_FACTORS[-1]}x the batch", method, core)


def _has_input(ctx: Context) -> bool:
    inp = ctx.sc.input
    return F.INPUT_THROUGHPUT in ctx.enforced and inp.per_worker_rate > 0 and (inp.workers > 0 or
                                                                                 inp.workers_per_host > 0)


def relax_input_rate(ctx: Context, core: list[str] | None = None) -> Relaxation | None:
    """Required input rate r* = min { r : a plan exists with r sequences per worker-second }: the rate enters
    input.throughput's limit only (supply = workers x r), so feasibility is monotone in r: bisection on
    (r_0, 1000 r_0], relative tolerance 1e-4. None without an input pipeline."""
    if not _has_input(ctx):
        return None
    p = PARAMS["input_rate"]
    sc = ctx.sc
    r0 = sc.input.per_worker_rate
    method = (f"bisection on feasibility over the rate per worker in ({r0:g}, {INPUT_FACTOR_MAX * r0:g}], relative "
              f"tolerance {INPUT_REL_TOL:g}")
    top = ctx.feasible(with_input_rate(sc, r0 * INPUT_FACTOR_MAX))
    if top is None:
        return _cannot(p, r0, f"no plan even at {INPUT_FACTOR_MAX:g}x the rate: the input pipeline does not limit "
                              "the plan", method, core)
    lo, hi = r0, r0 * INPUT_FACTOR_MAX  # lo infeasible (the request is), hi feasible
    while hi - lo > INPUT_REL_TOL * hi:
        mid = math.sqrt(lo * hi) if hi / lo > 4 else 0.5 * (lo + hi)
        if ctx.feasible(with_input_rate(sc, mid)) is not None:
            hi = mid
        else:
            lo = mid
    value, ev, apply = _settle(ctx, p, hi, lambda s: with_input_rate(sc, s))
    if ev is None or value is None:  # _settle gives both or neither
        return _cannot(p, r0, "could not be confirmed by re-solving", method, core)
    workers = sc.input.workers if sc.input.workers > 0 else None
    note = f"{workers * value:g} sequences/s from {workers:g} workers" if workers else ""
    return _relaxation(p, r0, required=value, required_exact=hi, helps=True, plan=ev, apply=apply, method=method,
                       note=note)


def _time_candidates(ctx: Context) -> Evaluation | None:
    """The fastest plan with deadline.finish and budget.cost freed: its training time
    train (1 + L) = T* - T_reserved bounds every input that only scales the finish time."""
    return _fastest(ctx, [F.DEADLINE, F.BUDGET])


def relax_reserved(ctx: Context, core: list[str] | None = None,
                   fastest: Evaluation | None | Literal["unset"] = "unset") -> Relaxation:
    """Required reserved time R* = T_deadline - (T* - T_reserved): finish = reserved + train (1 + L),
    and reserved enters nothing else but the cost. With a budget cap the candidate is confirmed and,
    if the cap fails, replaced by bisection on [0, R*] (less reserved time never costs more)."""
    p = PARAMS["reserved"]
    sc = ctx.sc
    r0, dl = sc.task.reserved_s, F.limit(F.DEADLINE, sc)
    method = "R* = deadline - (min finish - reserved), min finish with deadline.finish relaxed"
    fastest = _time_candidates(ctx) if fastest == "unset" else fastest
    if fastest is None:
        return _cannot(p, r0 / DAY, "no plan meets the other constraints at any deadline", method, core)
    run = fastest.metrics["finish_days"] * DAY - r0
    cand = dl - run
    if cand < 0:
        return _cannot(p, r0 / DAY, f"even with no reserved time the fastest plan needs {run / DAY:.2f} d "
                                    f"> {dl / DAY:.2f} d", method, core)
    closed = most_reserved(ctx) if _budget(ctx) < math.inf else None
    if closed is not None:  # the budget cap may bind: the largest reserved time over plans, in closed form
        method = ("R* = max over plans of min(deadline, budget / rate) - (finish - reserved), rate = cost / "
                  "finish (deadline.finish and budget.cost relaxed)")
        if closed < 0:
            return _cannot(p, r0 / DAY, "no plan even with no reserved time", method, core)
        cand = min(cand, closed)
    elif ctx.feasible(with_reserved(sc, cand)) is None:  # the budget cap still binds: bisection
        method = "bisection on feasibility over reserved time in [0, R*] (budget cap), tolerance 1 s"
        if ctx.feasible(with_reserved(sc, 0.0)) is None:
            return _cannot(p, r0 / DAY, "no plan even with no reserved time", method, core)
        lo, hi = 0.0, cand  # lo feasible, hi infeasible
        while hi - lo > RESERVED_TOL_S:
            m = 0.5 * (lo + hi)
            if ctx.feasible(with_reserved(sc, m)) is not None:
                lo = m
            else:
                hi = m
        cand = lo
    value, ev, apply = _settle(ctx, p, cand / DAY, lambda s: with_reserved(sc, s))
    if ev is None:
        return _cannot(p, r0 / DAY, "could not be confirmed by re-solving", method, core)
    return _relaxation(p, r0 / DAY, required=value, required_exact=cand / DAY, helps=True, plan=ev, apply=apply,
                       method=method)


def _budget(ctx: Context) -> float:
    """The budget cap a relaxation keeps (inf without one, or when budget.cost is not enforced)."""
    return F.limit(F.BUDGET, ctx.sc) if F.BUDGET in ctx.enforced else math.inf


def most_iterations(ctx: Context) -> int | None:
    """I* = max over plans meeting every family but deadline.finish and budget.cost of the most iterations
    each can run within the deadline D and the budget C: with finish(I) = R + I y and cost(I) = rate x
    finish(I), y = (finish - R) / I_0 and rate = cost / finish read at today's I_0 iterations,
    I <= (D - R) / y and I <= (C / rate - R) / y. Tokens enter nothing else, so the request is feasible with
    I iterations exactly when I <= I* (:func:`largest_over_plans`). A layout's bound: every plan of it
    finishes no sooner than finish_min and costs at least cost_min at I_0, and finish and cost grow with I
    (cost(I) >= (I / I_0) cost(I_0) for I <= I_0), so I <= I_0 min((D - R) / (finish_min - R), C / cost_min)."""
    sc = ctx.sc
    r, i0, d, cap = sc.task.reserved_s, T.iteration_count(sc), F.limit(F.DEADLINE, sc), _budget(ctx)

    def figure(finish: NDArray[Any], cost: NDArray[Any]) -> NDArray[Any]:
        with np.errstate(divide="ignore", invalid="ignore"):
            y = (finish - r) / i0
            most = np.minimum((d - r) / y, (cap / (cost / finish) - r) / y)
        return np.where(np.isnan(most), -np.inf, most)

    def bound(finish: NDArray[Any], cost: NDArray[Any]) -> NDArray[Any]:
        with np.errstate(divide="ignore", invalid="ignore"):
            most = i0 * np.minimum((d - r) / (finish - r), cap / cost)
        return np.where(np.isnan(most), np.inf, most)

    got = largest_over_plans(ctx, figure, bound)
    if got is None or got == math.inf:
        return None
    return max(0, int(math.floor(got))) if math.isfinite(got) else 0


def most_reserved(ctx: Context) -> float | None:
    """R* = max over plans meeting every family but deadline.finish and budget.cost of the most reserved
    time each leaves within the deadline D and the budget C: finish(R) = R + t and cost(R) = rate (R + t),
    t = finish - R_0 and rate = cost / finish at today's R_0, so R <= D - t and R <= C / rate - t
    (:func:`largest_over_plans`). A layout's bound: t >= t_min = finish_min - R_0, and for R <= R_0 with
    cost(R_0) >= cost_min, C / rate - t <= C R_0 / cost_min + t (C / cost_min - 1), at most
    C R_0 / cost_min + t_min (C / cost_min - 1) when C < cost_min (no bound from the budget otherwise)."""
    sc = ctx.sc
    r0, d, cap = sc.task.reserved_s, F.limit(F.DEADLINE, sc), _budget(ctx)

    def figure(finish: NDArray[Any], cost: NDArray[Any]) -> NDArray[Any]:
        with np.errstate(divide="ignore", invalid="ignore"):
            most = np.minimum(d, cap / (cost / finish)) - (finish - r0)
        return np.where(np.isnan(most), -np.inf, most)

    def bound(finish: NDArray[Any], cost: NDArray[Any]) -> NDArray[Any]:
        t = finish - r0
        with np.errstate(divide="ignore", invalid="ignore"):
            by_budget = np.where(cap < cost, cap * r0 / cost + t * (cap / cost - 1.0), np.inf)
            most = np.minimum(d - t, by_budget)
        return np.where(np.isnan(most), np.inf, most)

    return largest_over_plans(ctx, figure, bound)


def relax_tokens(ctx: Context, core: list[str] | None = None,
                 fastest: Evaluation | None | Literal["unset"] = "unset") -> Relaxation:
    """Largest token count D* = I* x b with I* = floor((T_deadline - T_reserved) / y_min), where
    y_min = min over plans of t_step (1 + L) = (T* - T_reserved) / ceil(D / b): tokens enter only
    through iterations = ceil(D / b). I* is confirmed by re-solving (I* feasible, I* + 1 not); with a
    budget cap that fails, integer bisection on [1, I*] (fewer iterations never cost more)."""
    p = PARAMS["tokens"]
    sc = ctx.sc
    tps = sc.task.tokens_per_step
    d0 = sc.task.tokens
    i0 = math.ceil(d0 / tps)
    method = "I* = floor((deadline - reserved) / min step x (1 + L)), tokens = I* x tokens per step"
    fastest = _time_candidates(ctx) if fastest == "unset" else fastest
    if fastest is None:
        return _cannot(p, d0 / 1e9, "no plan meets the other constraints with any token count", method, core)
    y = (fastest.metrics["finish_days"] * DAY - sc.task.reserved_s) / i0
    i_star = int(math.floor((F.limit(F.DEADLINE, sc) - sc.task.reserved_s) / y))
    closed = most_iterations(ctx)
    if closed is not None:
        i_star = closed
        method = ("I* = max over plans of the most iterations within the deadline and the budget, "
                  "min((deadline - reserved) / y, (budget / rate - reserved) / y), y = step x (1 + L); "
                  "tokens = I* x tokens per step")
    i_star = min(i_star, i0 - 1)

    def ok(i: int) -> Evaluation | None:
        return ctx.feasible(with_tokens(sc, i * tps)) if i >= 1 else None

    if i_star < 1:
        return _cannot(p, d0 / 1e9, "not even one optimizer step fits", method, core)
    at_star = ok(i_star)
    if at_star is None and closed is not None and ok(i_star - 1) is not None:  # floating point at the boundary
        i_star -= 1
    elif at_star is None:  # floating point, or a budget cap: bisection for the largest feasible
        if ok(1) is None:
            return _cannot(p, d0 / 1e9, "not even one optimizer step fits", method, core)
        lo, hi = 1, i_star  # lo feasible, hi infeasible
        while hi - lo > 1:
            m = (lo + hi) // 2
            if ok(m) is not None:
                lo = m
            else:
                hi = m
        i_star = lo
    while i_star + 1 < i0 and ok(i_star + 1) is not None:  # floating point at the boundary
        i_star += 1
    exact = i_star * tps
    value, ev, apply = _settle(ctx, p, exact / 1e9, lambda s: with_tokens(sc, s))
    if ev is None:
        return _cannot(p, d0 / 1e9, "could not be confirmed by re-solving", method, core)
    return _relaxation(p, d0 / 1e9, required=value, required_exact=exact / 1e9, helps=True, plan=ev, apply=apply,
                       method=method, note=f"{i_star:,} optimizer steps of {tps:,} tokens")


# In the order a user can act on them: money (a larger budget, a lower price, another card), then the request
# (deadline, cards, tokens, reserved time, the batch), then the machine (storage, input pipeline, NICs, memory) and
# last what a run can hardly change (the MoE drop rate, the efficiency): a time limit cuts the least useful answers.
RELAXATIONS = ("max_cost", "card_price", "accelerator", "deadline", "max_cards", "tokens", "reserved",
               "global_batch", "write_bandwidth", "input_rate",
               "nics_per_host", "nic_bandwidth", "usable_memory", "max_drop", "efficiency")


def relaxations(sc: Scenario, backend: str | Solver = "cpsat", req: Request | None = None, *,
                raw: dict[str, Any] | None = None, catalog: Catalog | None = None, core: list[str] | None = None,
                enforced: Iterable[str] | None = None, only: Collection[str] | None = None,
                ctx: Context | None = None, progress: Callable[[str], None] | None = None) -> list[Relaxation]:
    """The smallest single change of each relaxable input that makes the request feasible.

    ``raw`` (the scenario's raw tables with the command-line overrides applied) and ``catalog`` are
    used by the accelerator relaxation. For an input that cannot help, ``blocked_by`` names an
    irreducible conflict among the families it does not enter, when there is one. ``core`` (the conflict,
    when the caller has it) sets the order of asking (:func:`asking_order`: its inputs first). ``only``
    restricts the inputs. ``ctx`` (a :class:`Context` of the same request) shares its solves and tables;
    ``progress(text)`` is told which input is being relaxed.

    Each input's re-solves search only the layouts that meet the families the input does not enter
    (:meth:`Context.narrowed`): exact, and much smaller when memory or divisibility rule most out.
    """
    req = req or Request()
    if ctx is None:
        ctx = Context.of(sc, backend, req, enforced, raw, catalog)
    names = asking_order([n for n in RELAXATIONS if only is None or n in only], core)
    out: list[Relaxation] = []
    clock = clock_of(ctx.req)  # the run's one clock: no relaxation starts once it has run out
    with clock.budget(RELAX_WORK):  # counted work: the same answers on every machine (the clock stays the guard)
        _relax_all(ctx, names, core, clock, progress, out)
    return sorted(out, key=lambda r: RELAXATIONS.index(r.parameter))  # listed in the fixed order


def _relax_all(ctx: Context, names: list[str], core: list[str] | None, clock: Clock,
               progress: Callable[[str], None] | None, out: list[Relaxation]) -> None:
    """:func:`relaxations`' loop over the inputs ``names``, appending each answer to ``out``; an input left
    unanswered says whether the work budget (the same on every machine) or the time limit stopped it."""
    shared: dict[str, Evaluation | None] = {}
    for k, name in enumerate(names):
        t0, s0 = time.perf_counter(), ctx.solves
        if name in NOT_APPLICABLE and NOT_APPLICABLE[name](ctx):
            continue  # the input does not apply to this request (its relax_* returns None): nothing to ask
        if clock.expired(RELAXING):
            out.append(_relaxation(PARAMS[name], None, required=None, helps=None, method="undecided",
                                   note=_stopped(ctx, clock, " before it was asked")))
            continue
        if progress is not None:
            progress(f"smallest change of the {PARAMS[name].label} ({k + 1}/{len(names)})")
        ctx.keep = frozenset(ctx.enforced) - set(PARAMS[name].affects)
        r: Relaxation | None
        try:
            with clock.stoppable(RELAXING, keep_finished=True):  # a table being built stops at its next slice
                r = _relax_one(ctx, name, core, shared)
        except TimeLimitReached:
            r = _relaxation(PARAMS[name], None, required=None, helps=None, method="undecided",
                            note=_stopped(ctx, clock))
        except Undecided as exc:
            p = PARAMS[name]
            off_path = isinstance(exc, NotOnDemand)
            stopped = not off_path and (clock.worked_out or clock.reached)
            r = _relaxation(p, None, required=None, helps=None, note=_stopped(ctx, clock) if stopped else str(exc),
                            method="not on the on-demand path" if off_path else "undecided")
        finally:
            ctx.keep, ctx.keep_vars = None, VARS
        if r is None:
            continue
        if r.helps is False and not r.blocked_by and name != "accelerator" and not clock.expired(RELAXING):
            try:
                with clock.stoppable(RELAXING, keep_finished=True):
                    r.blocked_by = other_conflict(ctx, PARAMS[name].affects)
            except (Undecided, TimeLimitReached):
                pass  # the relaxation's verdict stands; what else conflicts is left unsaid
        r.seconds, r.solves = time.perf_counter() - t0, ctx.solves - s0
        out.append(r)


BROAD = ("accelerator",)
"""The relaxations that search other scenarios whole (every catalog card): they enter every family, so a
conflict always names one of theirs; they are asked after the conflict's own inputs."""


def asking_order(names: list[str], core: Collection[str] | None) -> list[str]:
    """``names`` in the order the relaxations are asked (listed in :data:`RELAXATIONS`' order): first the
    inputs that enter a family of the conflict ``core``, those entering the fewest families outside it first
    (the input rate, which enters the input pipeline's family alone, before the global batch, which also
    reshapes the layouts); then the broad searches (:data:`BROAD`) that enter one; then the rest. Ties keep the
    order of ``names``. The work budget is shared, so an input of the conflict is never left undecided while
    the budget went to an input outside it (without a conflict: ``names`` as given)."""
    conflict = set(core or ())

    def key(name: str) -> tuple[int, int]:
        affects = set(PARAMS[name].affects)
        if not conflict & affects:
            return (2, 0)
        return (1, 0) if name in BROAD else (0, len(affects - conflict))

    return sorted(names, key=key)  # sorted is stable: ties keep the given order


RELAX_WORK = 10_000
"""The relaxations' work budget (:meth:`tpopt.optimizer.limits.Clock.budget`): safe points counted over all
the inputs of one request together. Counted, not timed, so which inputs are answered does not depend on the
machine's speed or load; the time limit stays the last guard, and says so where it stops one."""


def _stopped(ctx: Context, clock: Clock, when: str = "") -> str:
    """Why an input was left undecided: the work budget (the same on every machine), else the time limit (the
    answer may then differ on another machine or under another load, and says so)."""
    if clock.budget_stopped:
        return f"work budget reached ({RELAX_WORK:,} steps){when}"
    return f"time limit reached ({ctx.req.time_limit:g} s){when}; {CLOCK_STOP}"


RELAXING = "finding the smallest changes"
"""The clock's phase while :func:`relaxations` runs (a relaxation the limit stops is left undecided)."""

NOT_APPLICABLE: dict[str, Callable[[Context], bool]] = {
    "max_cost": lambda ctx: ctx.sc.cost.max_cost is None or F.BUDGET not in ctx.enforced,
    "card_price": lambda ctx: ctx.sc.cost.max_cost is None or F.BUDGET not in ctx.enforced or any(
        s.price_card_hour is None or s.price_card_hour <= 0 for s in ctx.sc.systems.values()),
    "max_drop": lambda ctx: not ctx.sc.model.moe or F.CAPACITY_DROPS not in ctx.enforced,
    "input_rate": lambda ctx: not _has_input(ctx),
    "global_batch": lambda ctx: not _fixed_batch(ctx),
}
"""The inputs a request has no relaxation of (their ``relax_*`` returns None), told without asking: a relaxation
skipped by the time limit is listed as undecided only where it would have been asked."""


def _relax_one(ctx: Context, name: str, core: list[str] | None, shared: dict[str, Evaluation | None]
               ) -> Relaxation | None:
    """The relaxation of input ``name`` (None: the input does not apply); ``shared`` keeps the fastest plan
    that the tokens and reserved-time relaxations both start from."""
    if name in ("tokens", "reserved"):
        if "fastest" not in shared:
            shared["fastest"] = _time_candidates(ctx)
        return (relax_tokens if name == "tokens" else relax_reserved)(ctx, core, fastest=shared["fastest"])
    fn = {"deadline": relax_deadline, "max_cards": relax_max_cards, "efficiency": relax_efficiency,
          "usable_memory": relax_usable_memory, "nic_bandwidth": relax_nic_bandwidth,
          "accelerator": relax_accelerator, "max_cost": relax_max_cost,
          "card_price": relax_card_price, "max_drop": relax_max_drop, "write_bandwidth": relax_write_bandwidth,
          "input_rate": relax_input_rate, "global_batch": relax_global_batch,
          "nics_per_host": relax_nics_per_host}[name]
    r: Relaxation | None = fn(ctx, core)
    return r
