"""The exact RL solve (:func:`solve`) and its oracle (:func:`brute_force`).

:func:`solve` evaluates every RL decision against a valid lower bound of the learner (:func:`vector_checks`, the
relations of :meth:`~tpopt.optimizer.rl.problem.RLProblem.evaluate` over arrays), then solves the learner keys
in the order of their best bound until the next bound exceeds the best verified plan. :func:`brute_force`
enumerates every RL decision with every learner plan, no solver and no bound: the property tests' oracle.
"""

from __future__ import annotations

import math
import time
from collections.abc import Collection
from dataclasses import replace
from typing import Any

import numpy as np

from tpopt.errors import InputError
from tpopt.models import families as F
from tpopt.models import rl as R
from tpopt.optimizer.limits import Clock, TimeLimitReached, clock_of
from tpopt.optimizer.result import Status
from tpopt.optimizer.rl.problem import (
    FAMILIES,
    OBJECTIVES,
    STRUCTURAL,
    DecisionGrid,
    Learner,
    Rank,
    Restrict,
    RLEvaluation,
    RLProblem,
    RLResult,
    trainer_points,
)


def vector_checks(pb: RLProblem, grid: DecisionGrid, idx: np.ndarray, full_s: np.ndarray | float,
                  swap_s: np.ndarray | float, memory: np.ndarray | float, enforced: Collection[str],
                  objective: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(feasible, first key, second key) of the decisions ``idx`` with learners of full-batch time
    ``full_s``, state swap ``swap_s`` and peak memory ``memory`` (scalars or one per decision): the
    relations of :meth:`RLProblem.evaluate`, term for term in the same order, over arrays."""
    task, sc = pb.task, pb.sc
    S = grid.static(pb, F.RL_KV_CAPACITY in enforced, F.CHECKPOINT in enforced)
    whole = idx.size == grid.size  # the whole grid (idx is then 0 .. size - 1): no copies
    c = S if whole else {k: v[idx] for k, v in S.items()}
    st, shared = (grid.st, grid.shared) if whole else (grid.st[idx], grid.shared[idx])
    cards = grid.cards if whole else grid.cards[idx]
    stale = st >= 1
    Rb = task.batch
    q = np.where(stale, task.kept, task.kept_sync)
    full = np.broadcast_to(np.asarray(full_s, dtype=float), idx.shape)
    learn = q * full
    swap = np.where(shared, np.broadcast_to(np.asarray(swap_s, dtype=float), idx.shape), 0.0)
    cycle = np.where(stale, np.maximum(c["rollout_s"], learn) + c["sync_s"],
                     c["rollout_s"] + learn + c["sync_s"] + swap)
    steps = np.where(stale, float(R.steps_needed(task.samples, task.kept, Rb)),
                     float(R.steps_needed(task.samples, task.kept_sync, Rb)))
    L = c["overhead"]
    finish = sc.task.reserved_s + steps * cycle * (1.0 + L)
    cost = c["rate"] * finish
    positive = full > 0
    r_learn = np.where(positive, Rb / np.where(positive, full, 1.0), math.inf)
    bound = np.minimum(r_learn, q * np.minimum(c["r_gen"], c["r_verify"]))
    needed = task.samples * (1.0 + L) / (F.limit(F.DEADLINE, sc) - sc.task.reserved_s)
    common, pool, w_gen, recv = task.common, c["kv_pool"], c["weights"], c["recv"]
    mem = np.broadcast_to(np.asarray(memory, dtype=float), idx.shape)
    received = recv + w_gen - c["policy_weights"]
    staged = np.maximum(np.maximum(mem + common, mem + received + common),
                        np.maximum(w_gen + common, w_gen + pool + common))
    broadcast = np.array([m == "broadcast" for m in grid.methods] + [False], dtype=bool)[grid.ws[idx]]
    sync_peak = w_gen + common + np.where(broadcast, recv, 0.0)
    rollout_mem = np.where(shared, w_gen + pool + common, np.maximum(w_gen + pool + common, sync_peak))
    checks: dict[str, tuple[Any, Any]] = {
        F.RL_LEARNER_MEMORY: (mem, c["usable"]), F.RL_KV_CAPACITY: (c["kv_need"], pool),
        F.RL_ROLLOUT_MEMORY: (rollout_mem, c["usable"]),
        F.RL_STALENESS: (st.astype(float), float(task.staleness)),
        F.CHECKPOINT: (c["write_s"], c["save_interval_s"]), F.DEADLINE: (finish, F.limit(F.DEADLINE, sc)),
        F.RL_STAGE_BALANCE: (needed, bound), F.CARDS: (cards.astype(float), F.limit(F.CARDS, sc)),
        F.BUDGET: (cost, F.limit(F.BUDGET, sc))}
    ok = np.ones(idx.shape, dtype=bool)
    for f in enforced:
        if f in STRUCTURAL:
            continue
        if f == F.RL_HANDOFF_MEMORY:
            ok &= ~shared | (staged <= c["usable"] * (1 + 1e-12))
        elif f in checks:
            v, lim = checks[f]
            ok &= v <= lim * (1 + 1e-12)
    if objective == "cards":
        return ok, cards.astype(float), cost
    return (ok, cost, finish) if objective == "cost" else (ok, finish, cost)


# ---------------------------------------------------------------------------------------------
# the exact search and the brute-force oracle


def solve(pb: RLProblem, objective: str = "cost", enforced: Collection[str] = FAMILIES,
          restrict: Restrict | None = None) -> RLResult:
    """The best RL plan (lexicographic (cost, finish) or (finish, cost)), proven optimal.

    One time limit for the whole RL solve: the request's clock (``pb.req.clock``, shared by every
    solve of one ``tpopt rl`` run, its analysis included) or, without one, a clock of
    ``pb.req.time_limit`` for this call. The search and every learner solve draw on what is left of
    it. When it runs out, the best verified RL plan so far is returned with status ``feasible`` (not
    proven optimal: a better plan may use a learner key not yet solved, or a learner plan the cut-short
    solve did not find), or ``unknown`` when none was found; ``stats`` says where it stopped."""
    if objective not in OBJECTIVES + ("cards",):
        raise InputError(f"unknown objective {objective!r} (use cost or time)")
    enforced = tuple(f for f in FAMILIES if f in set(enforced))
    if pb.req.clock is None:  # no shared clock: this solve's own limit
        pb = pb.with_request(replace(pb.req))
    clock = clock_of(pb.req)
    t0 = time.perf_counter()
    solves0 = pb.caches["solves"][0]
    while True:
        bound_ok = pb.caches["bound_ok"][0]
        best, stats, limited = _search(pb, objective, enforced, restrict, clock)
        if limited or pb.caches["bound_ok"][0] == bound_ok:  # else a learner beat the bound: search again
            break
    stats.update(wall_s=time.perf_counter() - t0, learner_solves=pb.caches["solves"][0] - solves0,
                 time_limit_reached=limited, limit_phase=(clock.phase or None) if limited else None,
                 time_limit_s=clock.seconds)
    if limited:
        status = Status.FEASIBLE if best else Status.UNKNOWN
    else:
        status = Status.OPTIMAL if best else Status.INFEASIBLE
    return RLResult(status, objective, best, enforced, stats)


def _search(pb: RLProblem, objective: str, enforced: tuple[str, ...], restrict: Restrict | None, clock: Clock
            ) -> tuple[RLEvaluation | None, dict[str, Any], bool]:
    """The bound-ordered search; returns (best, stats, limited): ``limited`` when the clock stopped it
    before the optimum was proven (``best`` is then the best verified plan so far, or None).

    Vectorised over the decision grid (:class:`DecisionGrid`, :func:`vector_checks`): every decision is
    bounded at once, and each solved learner key's decisions are checked at once; only the best of a
    key is evaluated in full (:meth:`RLProblem.evaluate`). Ties go to the earlier decision of the grid."""
    stats: dict[str, Any] = {"points": None, "learner_keys": 0, "learner_keys_solved": 0}
    try:
        grid = pb.decisions(clock)
        if grid.blocks:  # as listing the decisions checks the clock once per learner card count
            clock.check("building the RL decisions")
    except TimeLimitReached:  # cut short while listing the decisions: nothing verified yet
        return None, stats, True
    sel = grid.select(restrict)
    stats["points"] = int(sel.size)
    if sel.size and clock.expired("bounding the RL decisions"):
        return None, stats, True
    # the learner bound per (accelerator, learner cards)
    bkey = grid.acc[sel] * (grid.cl.max(initial=0) + 1) + grid.cl[sel]
    bu, bfirst, binv = np.unique(bkey, return_index=True, return_inverse=True)
    lb = np.array([pb.learner_bound(grid.accs[grid.acc[sel[j]]], int(grid.cl[sel[j]])).full_s for j in bfirst])
    ok, k1, k2 = vector_checks(pb, grid, sel, lb[binv], 0.0, 0.0, enforced, objective)
    fsel, k1, k2 = sel[ok], k1[ok], k2[ok]  # a relaxation: infeasible here is infeasible with any learner plan
    gid, keys = grid.learner_keys(pb, fsel, enforced)
    stats["learner_keys"] = len(keys)
    order = np.lexsort((fsel, k2, k1))  # by (bound key, grid index)
    gsorted, ksorted = gid[order], k1[order]
    seen = np.sort(np.unique(gsorted, return_index=True)[1])
    ranked = gsorted[seen].tolist()  # keys by their best bound
    group_min = dict(zip(ranked, ksorted[seen].tolist(), strict=True))
    members = np.argsort(gid, kind="stable")
    starts = np.searchsorted(gid[members], np.arange(len(keys) + 1))
    best: RLEvaluation | None = None
    best_rank: Rank | None = None
    limited = False
    for g in ranked:
        if best_rank is not None and group_min[g] > best_rank[0][0]:
            break  # every remaining bound is worse than the best verified plan
        if clock.expired("solving the learner plans"):
            limited = True
            break
        try:
            learner = pb.learner(keys[g])
        except TimeLimitReached:
            limited = True
            break
        stats["learner_keys_solved"] += 1
        if learner is not None:
            idx = fsel[members[starts[g]:starts[g + 1]]]
            ok, a, b = vector_checks(pb, grid, idx, learner.full_s, learner.swap_s, learner.memory, enforced,
                                     objective)
            if ok.any():
                cand = idx[ok][np.lexsort((idx[ok], b[ok], a[ok]))[0]]
                ev = pb.evaluate(grid.decision(int(cand)), learner, enforced)
                if ev.feasible(enforced):
                    rank = (ev.key(objective), int(cand))
                    if best_rank is None or rank < best_rank:
                        best, best_rank = ev, rank
        if clock.reached:  # the learner solve was cut short: its plan is feasible, not proven the fastest
            limited = True
            break
    return best, stats, limited


def brute_force(pb: RLProblem, objective: str = "cost", enforced: Collection[str] = FAMILIES) -> RLEvaluation | None:
    """Every RL decision with every learner plan, no solver and no bound: the oracle."""
    enforced = tuple(f for f in FAMILIES if f in set(enforced))
    best: RLEvaluation | None = None
    best_rank: Rank | None = None
    plans = {acc: trainer_points(pb, acc) for acc in pb.accelerators()}
    for i, d in enumerate(pb.grid()):
        shared = d.placement == "shared"
        memory_rules = F.RL_LEARNER_MEMORY in enforced or (shared and F.RL_HANDOFF_MEMORY in enforced)
        for step, states, mem, host_ok, _ in plans[d.accelerator].get(d.learner_cards, []):
            if memory_rules and not host_ok:
                continue  # the learner's host-memory rule (offload) goes with its memory families
            swap = R.state_swap_time(states, pb.swap_bandwidth(d.accelerator)) if shared else 0.0
            ln = Learner(None, step, step + pb.extra_forward_s(d.accelerator, d.learner_cards), states, mem, swap)
            ev = pb.evaluate(d, ln, enforced)
            if ev.feasible(enforced):
                rank = (ev.key(objective), i)
                if best_rank is None or rank < best_rank:
                    best, best_rank = ev, rank
    return best
