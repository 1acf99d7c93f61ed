"""Multi-datacenter plans (``[[sites]]`` and ``[wan]``): which sites, how many replicas at each, synchronous or
DiLoCo, and DiLoCo's H and F, at the least cost under the deadline and each site's card and power caps.

The decision, exact over its grids:

1. **The replica.** The scenario is solved as one site (:func:`tpopt.optimizer.plan.plan`, with the card cap
   the sites' total): its optimum fixes the data-parallel replica's layout (TP, PP, CP, micro-batch, ZeRO,
   recompute, schedule, save interval). A single site never beats it (a WAN only adds time and tokens), so no
   plan is lost when the one-site solve finds none: the scenario is infeasible over the sites too.
2. **Replicas D.** Every count D of replicas with D x replica cards within the sites' cards and the global batch
   whole over them is evaluated (:func:`tpopt.models.evaluate.evaluate`): compute step, run time and cost as
   one site; the memory and layout checks must hold (the deadline, step budget and card cap are checked below,
   with the WAN).
3. **Sites, ring order, mode, H, F.** For every non-empty set of sites that holds D replicas (each site's
   replicas: whole replicas under its card cap and its power cap), every ring order of it, synchronous and
   DiLoCo with every H and F of the grids (F <= H / tau), the WAN figures of :mod:`tpopt.models.sites`: exposed
   WAN time per step, utilisation, tokens x (1 + penalty) for DiLoCo, bytes crossing sites and their egress.
   Finish = the one-site finish x token factor x (compute + exposed) / compute (assumption: checkpoint and
   failure overheads scale with the run's length); cost = the one-site cost scaled the same way + egress.
   Nothing is pruned: every candidate is scored, the least cost (then finish) within the deadline (and the
   budget, ``cost.max_cost``, where one is set) wins.

How the replicas split among the used sites does not change a figure (each replica's step is the same; the
ring carries the same bytes), so any split within the caps is optimal: the report's is balanced (water-filling).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from tpopt.errors import InputError
from tpopt.models import families as F
from tpopt.models import sites as S
from tpopt.models.arch import param_count
from tpopt.models.evaluate import Evaluation, evaluate
from tpopt.models.market import Power, site_power_w
from tpopt.models.plan import Scenario
from tpopt.models.units import DAY, fmt_count
from tpopt.optimizer import backends
from tpopt.optimizer import footing as FT
from tpopt.optimizer import plan as P
from tpopt.optimizer.backends import Solver
from tpopt.optimizer.pools import smallest_feasible
from tpopt.optimizer.result import Request
from tpopt.presentation import counted, footing_lines, scale_out_relaxation_lines

MAX_SITES = 8
# the checks the WAN changes (re-checked here with the WAN time), and the card cap the sites replace
RECHECKED = frozenset({F.DEADLINE, F.STEP_BUDGET, F.CARDS, F.BUDGET})


@dataclass(frozen=True)
class Candidate:
    """One multi-site plan: the sites in ring order, replicas per site, mode, H and F (1 and 1 for synchronous
    training), and its figures (seconds, bytes, USD)."""

    sites: tuple[str, ...]
    replicas: tuple[int, ...]
    mode: str
    inner_steps: int
    fragments: int
    dp: int
    cards: int
    compute_step_s: float
    exposed_s: float
    utilisation: float
    token_factor: float
    steps: float
    wan_bytes_step: float
    wan_bytes_total: float
    egress_usd: float
    finish_s: float
    cost: float
    one_site_cost: float  # the same replicas at one site (no WAN), USD
    one_site_finish_s: float  # and its finish time

    def key(self) -> tuple[float, float, int, str, int, int, tuple[str, ...]]:
        return (self.cost, self.finish_s, self.cards, self.mode, self.inner_steps, self.fragments, self.sites)


@dataclass(frozen=True)
class Ring:
    """The WAN ring over the used sites in one order: slowest link (bit/s), slowest hop latency (s), and the
    egress price summed over the ring's links (USD per TB sent on every link)."""

    order: tuple[str, ...]
    bandwidth_bps: float
    latency_s: float
    egress_usd_tb_sum: float


@dataclass
class SitesSolve:
    """The decision: the one-site replica plan, the best candidate (None: none meets the deadline), the best
    synchronous and best DiLoCo candidates at the best's sites and replicas, the candidates scored."""

    replica: Evaluation
    best: Candidate | None
    best_sync: Candidate | None
    best_diloco: Candidate | None
    scored: int
    si: S.SitesInput
    params: float = 0.0
    reserved_s: float = 0.0
    power: Power | None = None  # the card's power figures (per-site power in the report)
    cards_per_host: int = 1
    per_mode: dict[str, Candidate] = field(default_factory=dict)  # the cheapest within the deadline, per mode
    ring: Ring | None = None
    relaxations: list[dict[str, Any]] = field(default_factory=list)  # no plan: the "WAN bandwidth" relaxation


def rings(si: S.SitesInput, names: tuple[str, ...]) -> list[Ring]:
    """The ring orders of ``names`` that can win: every order (the first site fixed; a ring and its reverse are
    the same links) less those another order dominates. Proof of the pruning: a candidate's exposed WAN time falls
    with the ring's bandwidth and grows with its latency, its egress grows with the ring's summed egress price,
    and finish and cost grow with both, so a ring no better on all three and worse on one never wins (and without
    per-pair links every order is the same ring: one is kept)."""
    if not si.links:
        return [next(_orders(si, names))]
    kept: list[Ring] = []  # sorted by the three figures, a ring's dominators come before it
    for r in sorted(_orders(si, names), key=lambda r: (-r.bandwidth_bps, r.latency_s, r.egress_usd_tb_sum)):
        if not any(_dominates(o, r) for o in kept):
            kept.append(r)
    return kept


def _dominates(a: Ring, b: Ring) -> bool:
    at, bt = (-a.bandwidth_bps, a.latency_s, a.egress_usd_tb_sum), (-b.bandwidth_bps, b.latency_s, b.egress_usd_tb_sum)
    return all(x <= y for x, y in zip(at, bt, strict=True)) and at != bt


def _orders(si: S.SitesInput, names: tuple[str, ...]) -> Iterator[Ring]:
    first, rest = names[0], names[1:]
    seen: set[tuple[str, ...]] = set()
    for perm in itertools.permutations(rest):
        order = (first, *perm)
        if tuple(reversed(perm)) in seen:
            continue
        seen.add(perm)
        links = [si.link(a, b) for a, b in zip(order, order[1:] + order[:1], strict=True)] if len(order) > 1 else []
        if not links:
            yield Ring(order, float("inf"), 0.0, 0.0)
            continue
        # each directed ring link carries the same bytes; a two-site ring is the one link both ways
        yield Ring(order, min(k.bandwidth_bps for k in links), max(k.latency_s for k in links),
                   sum(k.egress_usd_tb for k in links))


def replica_power_w(power: Power | None, site: S.Site, replica_cards: int, cards_per_host: int) -> float:
    """Facility watts of one replica at ``site`` (PUE x (cards x training W + hosts x host W))."""
    if power is None:
        return 0.0
    return site_power_w(power, site.pue, replica_cards, cards_per_host)


def balanced(d: int, caps: tuple[int, ...]) -> tuple[int, ...]:
    """``d`` replicas over sites with these caps, as even as the caps allow (water-filling; every site >= 1)."""
    out = [1] * len(caps)
    left = d - len(caps)
    while left > 0:
        open_ = [i for i, c in enumerate(caps) if out[i] < c]
        share = max(1, left // len(open_))
        for i in open_:
            add = min(share, caps[i] - out[i], left)
            out[i] += add
            left -= add
            if left == 0:
                break
    return tuple(out)


def mode_configs(si: S.SitesInput, nsites: int) -> list[tuple[str, int, int]]:
    """The (mode, H, F) choices over ``nsites`` sites: synchronous (H = F = 1) and, over two sites or more,
    DiLoCo at every H and F of the grids with F x tau <= H."""
    configs: list[tuple[str, int, int]] = []
    if S.SYNC in si.modes:
        configs.append((S.SYNC, 1, 1))
    if S.DILOCO in si.modes and nsites > 1:
        configs += [(S.DILOCO, h, f) for h in si.inner_steps for f in si.fragments if f * si.overlap_steps <= h]
    return configs


def wan_terms(si: S.SitesInput, ring: Ring, params: float, mode: str, inner_steps: int, fragments: int,
              compute_step_s: float) -> tuple[float, float, float]:
    """Exposed WAN seconds per (inner) step, bytes crossing sites per step and bytes on each ring link per step,
    for ``mode`` over ``ring`` (a model of ``params`` parameters, a compute step of ``compute_step_s``)."""
    nsites = len(ring.order)
    if mode == S.SYNC:
        per_sync = params * si.grad_bytes
        exposed = S.sync_exposed_s(per_sync, nsites, ring.bandwidth_bps, ring.latency_s)
        syncs_per_step = 1.0
    else:
        per_sync = params * si.outer_bytes
        tau = si.overlap_steps if fragments > 1 else 0
        exposed = S.diloco_exposed_s(per_sync, nsites, ring.bandwidth_bps, ring.latency_s, inner_steps, fragments,
                                     tau, compute_step_s)
        syncs_per_step = 1.0 / inner_steps
    step_bytes = S.wan_bytes_per_sync(per_sync, nsites) * syncs_per_step
    link_bytes_step = 2.0 * (nsites - 1) / nsites * per_sync * syncs_per_step if nsites > 1 else 0.0
    return exposed, step_bytes, link_bytes_step


def candidates_for(si: S.SitesInput, ev: Evaluation, params: float, sc_tokens: float, reps: tuple[int, ...],
                   ring: Ring, reserved_s: float = 0.0) -> Iterator[Candidate]:
    """Synchronous and every DiLoCo (H, F) candidate of ``ev`` (one-site evaluation at D replicas, a model of
    ``params`` parameters trained on ``sc_tokens`` tokens) over ``ring``; ``reserved_s``: the task's reserved
    time, inside the finish and not stretched by the WAN."""
    names = ring.order
    m = ev.metrics
    tc, finish_s, cost = float(m["step_s"]), float(m["finish_days"]) * 86400.0, float(m["cost"])
    steps = sc_tokens / float(m["tokens_per_step"])
    nsites = len(names)
    for mode, h, f in mode_configs(si, nsites):
        exposed, step_bytes, link_bytes_step = wan_terms(si, ring, params, mode, h, f, tc)
        tf = S.token_factor(mode, si.token_penalty)
        stretch = tf * (tc + exposed) / tc
        finish = reserved_s + (finish_s - reserved_s) * stretch
        run_steps = steps * tf
        egress = S.egress_usd(link_bytes_step * run_steps, ring.egress_usd_tb_sum)
        yield Candidate(sites=ring.order, replicas=reps, mode=mode, inner_steps=h, fragments=f, dp=ev.plan.dp,
                        cards=ev.plan.cards, compute_step_s=tc, exposed_s=exposed,
                        utilisation=S.utilisation(tc, exposed), token_factor=tf, steps=run_steps,
                        wan_bytes_step=step_bytes, wan_bytes_total=step_bytes * run_steps, egress_usd=egress,
                        finish_s=finish, cost=cost * finish / finish_s + egress, one_site_cost=cost,
                        one_site_finish_s=finish_s)


def _replica_plan(sc: Scenario, si: S.SitesInput, solver: Solver, req: Request) -> Evaluation:
    total = sum(s.max_cards for s in si.sites)
    one = replace(sc, search=replace(sc.search, max_cards=total))  # the sites replace search.max_cards
    res = P.plan(one, solver, req, analyse=False, why=False)
    if res.best is None:
        raise NoReplicaPlan(f"no plan fits even one site of {total:,} cards (the sites' total) by the deadline "
                            f"({res.status.value}), so none exists over the sites; tpopt solve on the scenario without "
                            f"its [[sites]] and [wan] tables, with --max-cards {total}, says why")
    return res.best


class NoReplicaPlan(InputError):
    """A well-formed sites request with no plan: the job has none even as one site of the sites' total cards
    (a WAN only adds time, tokens and egress). An InputError for the Python API; ``tpopt sites`` prints it as
    its answer and exits 3, as every command does for a request without a plan."""


def solve_sites(sc: Scenario, si: S.SitesInput, power: Power | None, backend: str | Solver = backends.DEFAULT,
                req: Request | None = None) -> SitesSolve:
    """The multi-site decision of the module's docstring; ``power``: the accelerator's catalog power figures
    (None: no figure; then no site may state a power cap)."""
    if len(si.sites) > MAX_SITES:
        raise InputError(f"[[sites]]: at most {MAX_SITES} sites (got {len(si.sites)})")
    if power is None and any(s.power_cap_w is not None for s in si.sites):
        raise InputError("[[sites]] power: the accelerator has no power figures in the catalog ([power.NAME])")
    if any(sys_.price_card_hour is None for sys_ in sc.systems.values()):
        raise InputError("[[sites]]: the card needs a price (cost.card_hour): egress in USD adds to the bill")
    solver = backends.checked(backend)
    req = req or Request(objective="cost")
    base = _replica_plan(sc, si, solver, req)
    out = scored_sites(sc, si, power, base)
    if out.best is None:
        out.relaxations = [relax_wan_bandwidth(sc, si, power, base)]
    return out


def scored_sites(sc: Scenario, si: S.SitesInput, power: Power | None, base: Evaluation) -> SitesSolve:
    """Steps 2 and 3 of the module's decision at the replica plan ``base`` (step 1's)."""
    rc = base.plan.cards // base.plan.dp
    cph = sc.systems[base.plan.accelerator].acc.cards_per_host
    params, tokens = float(param_count(sc.model)), sc.task.tokens
    caps = tuple(S.replicas_under_power(replica_power_w(power, s, rc, cph), s.power_cap_w, s.max_cards, rc)
                 for s in si.sites)
    batch = base.plan.global_batch or sc.task.global_batch
    deadline, reserved, budget = F.limit(F.DEADLINE, sc), sc.task.reserved_s, F.limit(F.BUDGET, sc)
    best: Candidate | None = None
    per_mode: dict[str, Candidate] = {}
    ring_sets: dict[tuple[int, ...], list[Ring]] = {}
    scored = 0
    for d in range(1, sum(caps) + 1):
        if batch % (d * base.plan.micro_batch):
            continue
        ev = evaluate(sc, replace(base.plan, cards=d * rc, dp=d, grad_accum=0))
        if any(c.name not in RECHECKED for c in ev.violated()):
            continue
        for k in range(1, len(si.sites) + 1):
            for idx in itertools.combinations(range(len(si.sites)), k):
                cap = tuple(caps[i] for i in idx)
                if sum(cap) < d or d < k or min(cap) < 1:
                    continue
                names = tuple(si.sites[i].name for i in idx)
                reps = balanced(d, cap)
                if idx not in ring_sets:  # the rings of a set of sites do not depend on D
                    ring_sets[idx] = rings(si, names)
                for ring in ring_sets[idx]:
                    for c in candidates_for(si, ev, params, tokens, _in_order(names, reps, ring.order), ring,
                                             reserved):
                        scored += 1
                        if c.finish_s > deadline or c.cost > budget:
                            continue
                        if best is None or c.key() < best.key():
                            best = c
                        if c.mode not in per_mode or c.key() < per_mode[c.mode].key():
                            per_mode[c.mode] = c
    out = SitesSolve(replica=base, best=best, best_sync=None, best_diloco=None, scored=scored, si=si, params=params,
                     per_mode=per_mode, power=power, cards_per_host=cph)
    if best is not None:
        _compare(out, sc, rc)
    return out


def with_bandwidth(si: S.SitesInput, bps: float) -> S.SitesInput:
    """The WAN with every link (the default and each per-pair one) raised to at least ``bps`` bit/s."""
    def up(k: S.WanLink) -> S.WanLink:
        return replace(k, bandwidth_bps=max(k.bandwidth_bps, bps))
    return replace(si, wan=up(si.wan), links=tuple((p, up(k)) for p, k in si.links))


def slowest_link_bps(si: S.SitesInput) -> float:
    """The slowest WAN link's bandwidth (bit/s)."""
    return min([si.wan.bandwidth_bps, *(k.bandwidth_bps for _, k in si.links)])


GBPS = 1e9
MAX_RELAXED_GBPS = 2**30  # about 1 Ebit/s: beyond it the ring's bandwidth term is below a nanosecond a step


def relax_wan_bandwidth(sc: Scenario, si: S.SitesInput, power: Power | None, base: Evaluation) -> dict[str, Any]:
    """The smallest WAN bandwidth (whole Gbit/s, every link raised to at least it; latency, egress, the sites'
    caps and the replica plan unchanged) at which a multi-site plan meets the deadline and the budget, verified
    by re-scoring (a plan there, none 1 Gbit/s below): :func:`wan_relaxation` over :func:`scored_sites`."""
    return wan_relaxation(si, lambda gbps: scored_sites(sc, with_bandwidth(si, gbps * GBPS), power, base).best)


def wan_relaxation(si: S.SitesInput, best_at: Callable[[int], Candidate | None]) -> dict[str, Any]:
    """The "WAN bandwidth" relaxation: the smallest whole Gbit/s at which ``best_at`` (the decision re-run with
    every link raised to at least that bandwidth) finds a plan, when none exists at ``si``'s links. Exact: every
    candidate's exposed WAN time falls as its ring's slowest link speeds up and its egress does not depend on
    bandwidth, so its finish and cost fall and feasibility is monotone in the bandwidth: doubling finds a feasible
    bound, bisection the threshold."""
    now = slowest_link_bps(si)
    rel: dict[str, Any] = {"parameter": "WAN bandwidth", "current": now / GBPS, "unit": "Gbit/s", "required": None,
                           "helps": False, "cost": None, "finish_days": None}
    lo = int(now // GBPS)  # no plan at the current links, hence none at any lower bandwidth
    hi = max(1, 2 * lo)
    got = best_at(hi)
    while got is None and hi < MAX_RELAXED_GBPS:
        lo, hi = hi, 2 * hi
        got = best_at(hi)
    if got is None:
        rel["note"] = (f"no plan even at {hi:,} Gbit/s on every link: latency, the sites' caps, the token "
                       "penalty or the deadline bind")
        return rel
    hi, got = smallest_feasible(lo, hi, got, best_at)
    assert got is not None  # smallest_feasible returns a plan
    rel.update(required=hi, helps=True, cost=got.cost, finish_days=got.finish_s / 86400.0, cards=[got.cards],
               plan=f"{'sync' if got.mode == S.SYNC else f'DiLoCo H={got.inner_steps} F={got.fragments}'} over "
                    f"{site_count(len(got.sites))}")
    return rel


def _in_order(names: tuple[str, ...], reps: tuple[int, ...], order: tuple[str, ...]) -> tuple[int, ...]:
    by = dict(zip(names, reps, strict=True))
    return tuple(by[n] for n in order)


def _compare(out: SitesSolve, sc: Scenario, rc: int) -> None:
    """The best synchronous and the best DiLoCo candidate at the best plan's sites, ring and replicas (the
    deadline not applied: the comparison names what each costs)."""
    assert out.best is not None
    b = out.best
    ev = evaluate(sc, replace(out.replica.plan, cards=b.dp * rc, dp=b.dp, grad_accum=0))
    ring = next(r for r in _orders(out.si, b.sites) if r.order == b.sites)
    out.ring = ring
    cs = list(candidates_for(out.si, ev, float(param_count(sc.model)), sc.task.tokens, b.replicas, ring,
                             sc.task.reserved_s))
    out.reserved_s = sc.task.reserved_s
    sync = [c for c in cs if c.mode == S.SYNC]
    dl = [c for c in cs if c.mode == S.DILOCO]
    out.best_sync = min(sync, key=Candidate.key) if sync else None
    out.best_diloco = min(dl, key=Candidate.key) if dl else None


def crossover_bps(out: SitesSolve, c: Candidate) -> float | None:
    """The WAN bandwidth (bit/s, the ring's slowest link; latency and egress fixed) below which DiLoCo candidate
    ``c`` costs less than synchronous training at the same sites and replicas (None: no crossing, one mode wins at
    every bandwidth): :func:`crossover_of` at the best plan's ring."""
    if out.best_sync is None or out.ring is None:
        return None
    return crossover_of(out.si, out.ring, out.params, out.reserved_s, out.best_sync, c)


def crossover_of(si: S.SitesInput, ring: Ring, params: float, reserved_s: float, sync: Candidate, c: Candidate
                 ) -> float | None:
    """The bandwidth (bit/s) below which DiLoCo candidate ``c`` costs less than ``sync`` (the same sites, replicas
    and ring; None: no crossing). Solved in closed form: :func:`tpopt.models.sites.crossover_inverse_bandwidths`
    on the costs as linear functions of x = 1 / bandwidth, from each candidate's no-WAN cost and finish
    (``one_site_cost``, ``one_site_finish_s``: the bill rate and the overhead do not depend on the WAN)."""
    n = len(c.sites)
    tc = sync.compute_step_s
    c1, f1, r = sync.one_site_cost, sync.one_site_finish_s, reserved_s
    # cost = c1 x finish / f1 + egress, finish = r + (f1 - r) x token factor x (tc + exposed) / tc
    unit = c1 * (f1 - r) / (f1 * tc)  # USD per second of exposed WAN time per step
    hop = 2.0 * (n - 1) / n * S.BITS_PER_BYTE
    lat = 2.0 * (n - 1) * ring.latency_s
    slope_sync = unit * hop * params * si.grad_bytes
    base_sync = c1 + unit * lat + sync.egress_usd
    tf = c.token_factor
    tau = si.overlap_steps if c.fragments > 1 else 0
    k = unit * tf * c.fragments / c.inner_steps
    slope_dl = k * hop * params * si.outer_bytes / c.fragments
    offset_dl = k * (lat - tau * tc)
    base_dl = c1 * (r + (f1 - r) * tf) / f1 + c.egress_usd
    roots = S.crossover_inverse_bandwidths(base_sync, slope_sync, base_dl, slope_dl, offset_dl)
    return 1.0 / roots[0] if roots else None


def _candidate_dict(c: Candidate | None) -> dict[str, Any] | None:
    if c is None:
        return None
    return {"mode": c.mode, "sites": list(c.sites), "replicas": list(c.replicas), "inner_steps": c.inner_steps,
            "fragments": c.fragments, "dp": c.dp, "cards": c.cards, "compute_step_s": c.compute_step_s,
            "exposed_wan_s": c.exposed_s, "utilisation": c.utilisation, "token_factor": c.token_factor,
            "steps": c.steps, "wan_bytes_step": c.wan_bytes_step, "wan_bytes_total": c.wan_bytes_total,
            "egress_usd": c.egress_usd, "finish_days": c.finish_s / 86400.0, "cost": c.cost}


def report(out: SitesSolve) -> dict[str, Any]:
    """The command's JSON: the replica layout, the best plan per site, the sync / DiLoCo comparison and the
    crossover bandwidth, the assumptions."""
    p = out.replica.plan
    si = out.si
    d: dict[str, Any] = {
        "replica": {"accelerator": p.accelerator, "cards": p.cards // p.dp, "tp": p.tp, "pp": p.pp, "cp": p.cp,
                    "micro_batch": p.micro_batch, "zero_stage": p.zero_stage, "recompute": p.recompute,
                    "schedule": p.schedule, "one_site_dp": p.dp},
        "status": "optimal" if out.best else "infeasible", "candidates": out.scored, "modes": list(si.modes),
        "best": _candidate_dict(out.best), "sync": _candidate_dict(out.best_sync),
        "diloco": _candidate_dict(out.best_diloco),
        "best_per_mode": {m: _candidate_dict(c) for m, c in sorted(out.per_mode.items())},
        "token_penalty": si.token_penalty, "token_penalty_source": si.token_penalty_source,
        "assumptions": [
            "synchronous WAN all-reduce not overlapped with compute (the gradient is whole after the backward pass)",
            f"gradient {si.grad_bytes:g} B/parameter and DiLoCo outer gradient {si.outer_bytes:g} B/parameter "
            "on the WAN",
            f"a streamed fragment's all-reduce overlaps {si.overlap_steps} inner step(s) (tau)",
            "checkpoint and failure overheads scale with the run's length (the reserved time does not); the bill "
            "with the finish time",
            "the intra-site data-parallel all-reduce as one site of the job's replicas"],
    }
    if out.best is None:
        d["relaxations"] = out.relaxations
    if out.best is not None:
        by = {x.name: x for x in si.sites}
        d["per_site"] = [_site_entry(out, by[n], r, p.cards // p.dp)
                         for n, r in zip(out.best.sites, out.best.replicas, strict=True)]
    if out.best_diloco is not None:
        x = crossover_bps(out, out.best_diloco)
        d["crossover_gbps"] = None if x is None else x / 1e9
    return d


def site_footing(sc: Scenario, out: SitesSolve) -> dict[str, Any]:
    """The footing (:func:`tpopt.optimizer.footing.footing`) of the plan's replicas as one site: the best
    candidate's D replicas (else the one-site replica plan) evaluated without the WAN. Its price (card-hour and
    NIC-hour, with its date), card MTBF and storage bandwidth, with the share of the run each costs, are the
    sites plan's: the checkpoint and failure overheads scale with the run's length (module, 3), so their shares
    are the same over the WAN. Its P(on time) is the one-site finish's, not the sites plan's: left out."""
    plan = out.replica.plan if out.best is None else \
        replace(out.replica.plan, cards=out.best.cards, dp=out.best.dp, grad_accum=0)
    f = FT.of_evaluation(sc, evaluate(sc, plan).as_dict())
    f["evidence"] = {**f["evidence"], "p_on_time": None}
    return {**f, "of": f"the replicas at one site, {plan.cards:,} cards, before the WAN"}


def _site_entry(out: SitesSolve, site: S.Site, replicas: int, replica_cards: int) -> dict[str, Any]:
    """One used site: replicas, cards, facility power (MW, None without the card's power figures) and its cap."""
    mw = None if out.power is None else replicas * replica_power_w(out.power, site, replica_cards,
                                                                    out.cards_per_host) / 1e6
    return {"site": site.name, "replicas": replicas, "cards": replicas * replica_cards, "site_mw": mw,
            "cap_mw": None if site.power_cap_w is None else site.power_cap_w / 1e6, "max_cards": site.max_cards}


def _power(s: dict[str, Any]) -> str:
    if s["site_mw"] is None:
        return "no power figure"
    return f"{s['site_mw']:,.1f} MW" + ("" if s["cap_mw"] is None else f" of {s['cap_mw']:,.1f} MW")


def request(sc: Scenario, si: S.SitesInput) -> dict[str, Any]:
    """What a sites report answers, for its first line: the scenario, model, tokens, deadline, reserved time,
    budget (None: none), the sites and the default WAN link (Gbit/s each direction) with the per-pair links."""
    return {"scenario": sc.name, "model": sc.model.name, "tokens": sc.task.tokens,
            "deadline_days": F.limit(F.DEADLINE, sc) / DAY, "reserved_days": sc.task.reserved_s / DAY,
            "max_cost": sc.cost.max_cost, "sites": [x.name for x in si.sites],
            "wan_gbps": si.wan.bandwidth_bps / GBPS, "wan_links": len(si.links)}


def request_lines(d: dict[str, Any]) -> list[str]:
    """The report's first line, naming the question (none for a report without ``request``)."""
    q = d.get("request")
    if q is None:
        return []
    budget = f", budget {q['max_cost']:,.0f} USD" if q["max_cost"] is not None else ""
    n = q["wan_links"]
    pairs = f" ({counted(n, 'site pair')} with {'their' if n != 1 else 'its'} own link)" if n else ""
    return [f"tpopt sites: {q['scenario']}: {q['model']}, {fmt_count(q['tokens'])} tokens, deadline "
            f"{q['deadline_days']:.1f} d (reserved {q['reserved_days']:.1f} d){budget}; {len(q['sites'])} sites "
            f"({', '.join(q['sites'])}), WAN {q['wan_gbps']:,.4g} Gbit/s each way{pairs}"]


def lines(d: dict[str, Any], width: int = 100) -> list[str]:
    """The report as text lines (the footing wrapped to ``width``)."""
    r = d["replica"]
    out = [*request_lines(d),
           f"replica: {r['cards']} x {r['accelerator']} (TP {r['tp']}, PP {r['pp']}, CP {r['cp']}, micro-batch "
           f"{r['micro_batch']}, ZeRO {r['zero_stage']}, recompute {r['recompute']}, {r['schedule']})"]
    if d["best"] is None:
        rl = scale_out_relaxation_lines(d.get("relaxations") or [])  # before the verdict, which stays the last line
        return [*out, *([""] + rl + [""] if rl else []),
                f"no multi-site plan meets the deadline ({d['candidates']:,} candidates scored)"]
    b = d["best"]
    out.append(f"best: {_mode(b)} over {site_count(len(b['sites']))}, {b['cards']:,} cards, {b['finish_days']:.1f} d, "
               f"{b['cost']:,.0f} USD ({d['candidates']:,} candidates scored, exact over the grids)")
    out += [f"  {s['site']}: {s['replicas']} replicas, {s['cards']:,} of {s['max_cards']:,} cards, {_power(s)}"
            for s in d["per_site"]]
    out += mode_lines(d)
    out += crossover_lines(d)
    out.append(f"token penalty {d['token_penalty']:.1%} ({d['token_penalty_source'] or 'stated input'})")
    out += [f"assumption: {a}" for a in d["assumptions"]]
    return out + (footing_lines(d["footing"], width) if "footing" in d else [])


def crossover_lines(d: dict[str, Any]) -> list[str]:
    """The report's sync / DiLoCo crossover bandwidth line (none without a DiLoCo comparison)."""
    if "crossover_gbps" not in d:
        return []
    x = d["crossover_gbps"]
    return ["DiLoCo wins below a WAN bandwidth of " + (f"{x:,.1f} Gbit/s" if x is not None
                                                       else "none (one mode wins at every bandwidth)")]


def mode_lines(d: dict[str, Any]) -> list[str]:
    """The report's synchronous / DiLoCo comparison at the best plan's sites and replicas, the cheapest plan per
    mode within the deadline, and the modes with none."""
    out = []
    for name in ("sync", "diloco"):
        c = d[name]
        if c is not None:
            out.append(f"at these sites and replicas, {_mode(c)}: utilisation {c['utilisation']:.1%}, "
                       f"WAN {c['wan_bytes_step'] / 1e9:,.1f} GB/step, {c['wan_bytes_total'] / 1e15:,.2f} PB in all, "
                       f"egress {c['egress_usd']:,.0f} USD, "
                       f"tokens x {c['token_factor']:.3f}, {c['finish_days']:.1f} d, {c['cost']:,.0f} USD")
    for m, c in d["best_per_mode"].items():
        out.append(f"cheapest {MODE_WORDS.get(m, m)} plan within the deadline: {_mode(c)} over "
                   f"{site_count(len(c['sites']))}, "
                   f"{c['cards']:,} cards, {c['finish_days']:.1f} d, {c['cost']:,.0f} USD")
    return out + [f"no {MODE_WORDS.get(m, m)} plan meets the deadline" for m in d["modes"]
                  if m not in d["best_per_mode"]]


MODE_WORDS = {S.SYNC: "sync", S.DILOCO: "DiLoCo"}
"""A mode as the report names it (the JSON keeps "sync" / "diloco")."""


def site_count(n: int) -> str:
    """"1 site", "2 sites"."""
    return counted(n, "site")


def _mode(c: dict[str, Any]) -> str:
    return "sync" if c["mode"] == S.SYNC else f"DiLoCo H={c['inner_steps']} F={c['fragments']}"


__all__ = ["site_footing", "Candidate", "Ring", "SitesSolve", "solve_sites", "rings", "balanced", "candidates_for",
           "crossover_bps", "report", "lines", "MAX_SITES", "mode_configs", "wan_terms", "mode_lines", "scored_sites",
           "relax_wan_bandwidth", "with_bandwidth", "wan_relaxation", "crossover_of", "crossover_lines", "GBPS"]
