"""1. Conflict: an irreducible set of constraint families that admits no plan, and what each member costs.

CP-SAT's sufficient assumptions (:func:`conflict`) name families that cannot hold together, not necessarily a
minimal set; :func:`minimal_conflict` shrinks it with a deletion filter, least informative families first
(:data:`DELETION_ORDER`):
    for f in C:  if C \\ {f} admits no plan: C := C \\ {f}
so that C admits no plan while C \\ {f} admits one for every f left. :func:`conflict_detail` quotes, for each
family of the conflict, the plan closest to meeting it (:data:`EVIDENCE`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from tpopt.models import families as F
from tpopt.models.evaluate import SPEC, ConstraintCheck, Evaluation
from tpopt.models.plan import Scenario
from tpopt.optimizer import analysis
from tpopt.optimizer.backends import Solver
from tpopt.optimizer.explain.context import Context, _SetOracle, argmin_metric, monolithic_hint, tabulated
from tpopt.optimizer.limits import EncodingError, TimeLimitReached, clock_of
from tpopt.optimizer.result import Request, plan_summary
from tpopt.optimizer.space import FAMILIES, Space

# Deletion order of the filter: families tried first are dropped whenever the rest still conflict,
# so the conflict is stated in the families a user can act on (deadline, memory, cards) when possible.
DELETION_ORDER = F.DELETION_ORDER  # STRUCTURAL, then each family's deletion_rank


# ---------------------------------------------------------------------------------------------
# conflict


def conflict(space: Space, req: Request, enforced: Iterable[str] | None = None) -> list[str] | None:
    """A set of enforced families that cannot hold together (CP-SAT sufficient assumptions), or None
    when the request is feasible (or the solver ran out of time)."""
    from tpopt.optimizer.backends.cpsat_model import CpSatModel  # lazy: start-up time (ortools)

    enforced = frozenset(FAMILIES) if enforced is None else frozenset(enforced)
    clock = clock_of(req)
    if clock.expired("finding the conflict"):
        return None
    try:  # a hint only: the deletion filter starts from every enforced family without it
        with clock.stoppable("finding the conflict"):
            model = CpSatModel(space, Request(objective=req.objective, enforce=enforced, seed=req.seed,
                                              cards=req.cards), assumptions=True)
    except (EncodingError, TimeLimitReached):
        return None
    return model.conflict(time_limit=clock.remaining(0.01))


def minimal_conflict(space: Space, backend: str | Solver, req: Request, enforced: Iterable[str] | None = None,
                     ctx: Context | None = None) -> list[str] | None:
    """An irreducible set of families that admits no plan (deletion filter on CP-SAT's core).

    Start from CP-SAT's sufficient assumptions (all enforced families if CP-SAT gives none: its
    encoding is a relaxation, so it may find a candidate the exact check rejects; and on spaces
    whose solves use the layout decomposition, where no monolithic model is built:
    :func:`monolithic_hint`), confirm the set admits no plan, then drop families one at a time in
    ``DELETION_ORDER`` while the rest still admit none. Returns None when the enforced families admit a
    plan; [] when no plan of the requested card counts exists even with every family dropped.
    """
    ctx = ctx or Context.of(space.sc, backend, req, enforced)
    enforced = ctx.enforced
    oracle = ctx.set_oracle(space)
    if oracle.admits(enforced):
        return None
    core = set(conflict(space, req, enforced) or ()) & set(enforced) if monolithic_hint(space, req) else set()
    if not core or oracle.admits(core):
        core = set(enforced)
    return deletion_filter(oracle, core)


def deletion_filter(oracle: _SetOracle, core: Iterable[str]) -> list[str]:
    """Shrink a set of families that admits no plan to an irreducible one:
    for f in C (DELETION_ORDER): if C \\ {f} admits no plan, C := C \\ {f}."""
    return analysis.deletion_filter(oracle.admits, core, DELETION_ORDER + FAMILIES, FAMILIES)


def other_conflict(ctx: Context, affects: Iterable[str]) -> list[str]:
    """An irreducible conflict among the enforced families an input does not enter ([] if those
    admit a plan): why freeing that input alone cannot help."""
    fams = {f for f in ctx.enforced if f not in set(affects)}
    oracle = ctx.set_oracle()
    if oracle.admits(fams):
        return []
    return deletion_filter(oracle, fams)


EVIDENCE = F.EVIDENCE  # family -> (metric, objective, words) of the plan quoted as closest


def conflict_detail(ctx: Context, core: list[str]) -> list[dict[str, Any]]:
    """For each family f of an irreducible conflict C, the plan meeting every other enforced family
    (those of C and all the rest) that comes closest to f -- least finish time, memory or cards; the
    cheapest for other families, or when the space is too large to enumerate -- and how far it breaks f.

    Only such a plan shows what f alone costs: a plan that met C's other families but broke one
    outside C (memory, say) would be no plan at all. When the other families admit no plan either
    (a second conflict that does not involve f), no plan is named.
    """
    small = tabulated(Space.from_scenario(ctx.sc))
    out: list[dict[str, Any]] = []
    for f in core:
        metric, objective, words = EVIDENCE.get(f, (None, "cost", "the cheapest plan"))
        others = [g for g in ctx.enforced if g != f]
        if metric is not None and small:
            found = argmin_metric(ctx, metric, others)
            ev = found[1] if found else None
        else:
            objective = objective or "cost"
            words = words if objective == "time" else "the cheapest plan"
            ev = ctx.best(objective=objective, drop=[f])
        d: dict[str, Any] = {"name": f, "rule": SPEC[f].doc if f in SPEC else f, "closest": words}
        if ev is not None:
            c = _check(ev, f)
            d["plan"] = plan_summary(ev)
            d["violates"] = [v.name for v in ev.violated() if v.name in ctx.enforced]
            if c is not None:
                d.update(c.quoted())
        else:
            d["note"] = "no plan meets all the other constraints either (a second conflict does not involve it)"
        if f == F.WHOLE_HOSTS:
            reason = whole_hosts_reason(ctx.sc)
            if reason:
                d["reason"] = reason
        out.append(d)
    return out


def whole_hosts_reason(sc: Scenario) -> str | None:
    """Why no layout fills whole hosts, and the way out, when the host size has a factor that no
    TP x CP x PP of the search holds: cards = TP x CP x PP x DP is a multiple of the host's G cards only
    if DP is a multiple of g = G / gcd(G, TP x CP x PP), and DP x micro-batch divides the batch B
    (batch.divisibility), so no plan exists when g divides no batch choice (or no DP of the search).
    The way out: a batch that g divides (the nearest multiples of g x 2^k below and above B, 2^k the
    largest power of two dividing B with g x 2^k <= B / 4), or parallel sizes with the missing factor.
    None when some batch leaves room (the conflict is elsewhere)."""
    batches = sc.search.global_batch or (sc.task.global_batch,)
    shapes = sorted({tp * cp * pp for tp in sc.search.tp for cp in sc.search.cp for pp in sc.search.pp})
    for name, s in sc.systems.items():
        hosts = s.acc.cards_per_host
        need = min(hosts // math.gcd(hosts, t) for t in shapes)
        if need == 1:
            continue
        sizes = sc.search.dp or batches  # DP divides the batch: a batch g divides is needed either way
        if any(x % need == 0 for x in sizes):
            continue
        b = batches[0]
        step = need  # a multiple of g keeping B's powers of two (up to B / 4): DP and micro-batches still split it
        while b % (2 * (step // need)) == 0 and 2 * step <= b // 4:
            step *= 2
        lo, hi = (b // step) * step, -(-b // step) * step
        batch = f"--global-batch {hi}" if lo < step else f"--global-batch {lo} or {hi}"
        return (f"{name} is rented in whole {hosts}-card hosts; with TP x CP x PP in {{{', '.join(map(str, shapes))}}}"
                f" a plan fills whole hosts only if DP is a multiple of {need}, and DP divides the batch "
                f"({b:,} sequences, batch.divisibility): {need} does not divide it, so no plan exists. Ways out: "
                f"a batch that {need} divides ({batch}), TP / PP sizes with the factor {need} where the model "
                f"allows them, or a card with power-of-two hosts")
    return None


def _check(ev: Evaluation, name: str) -> ConstraintCheck | None:
    return next((c for c in ev.constraints if c.name == name), None)
