"""Multi-datacenter plans whose sites hold their own card type at their own price (issue 40, items 2 and 4).

A ``[[sites]]`` table may name ``accelerator`` (its card type; default ``hardware.accelerator``) and
``card_hour`` (its all-in price per card-hour; default the type's price in the scenario). Then every site runs
its own replica layout of its type, and the decision is this module's, exact over its grids:

**The space.** The replicas of one type take one share ``m_t`` of the global batch ``B`` per step, each type
its own (``m_t`` divides ``B``, a multiple of the layout's micro-batch); site ``s`` of type ``t`` runs
``n_s >= 1`` replicas of one layout of its type (TP, PP, ZeRO, micro-batch, recompute of ``[search]``; schedule,
offload and save mode the lists' first values, as :mod:`tpopt.optimizer.pools`; NICs per host the first of
``search.nics_per_host``, else the type's own), within the site's cards and power cap, and
``sum_s n_s x m_t(s) = B`` (the batch stays whole; the pools' form (a) balance, per type): a faster type takes
more sequences instead of idling. A plan spans at most :data:`MAX_TYPES` card types. The sites used, the ring
order, synchronous or DiLoCo with H and F are decisions as in :mod:`tpopt.optimizer.sites`.

**The job.** Step = the slowest site's replica step + the exposed WAN time
(:func:`tpopt.models.pools.mixed_step_s`, the pools' form (a) rule: the sites wait for the slowest, then reduce
over the WAN). DiLoCo: each site runs its H inner steps at its own pace and the outer synchronisation needs every
site's outer gradient (Douillard et al. 2023, "DiLoCo: Distributed Low-Communication Training of Language
Models", Algorithm 1), so a round takes ``H x max_s t_s`` + the outer all-reduce's exposed time, the same
``max_s t_s + exposed / H`` per inner step; a streamed fragment overlaps tau inner steps of the slowest site.
Finish = reserved + iterations x token factor x step x (1 + L), L the checkpoint and failure overhead at the
job's cards (every card at the scenario's MTBF; :func:`tpopt.optimizer.pools._job`); cost = sum over sites of
cards x price x finish (:func:`tpopt.models.pools.pool_cost`) + egress. A replica's step is the type's model at
``D`` replicas (the data-parallel all-reduce inside a site as over the job's replicas, as the one-type decision).

**Decomposition (the space does not multiply).** Per type, once: every layout at every share is evaluated
(vectorised), and for each replica card count the fastest feasible layout is kept (a layout with as many cards and
a slower step is never better: same price, power and cards). Then per set of sites and per threshold ``T`` among
the kept steps (the plan's slowest replica step): each site takes, at each share, the fewest-card replica whose
step is within ``T`` (fewest cards: the lowest price, power and failure rate, the most replicas under its caps;
any plan whose slowest step is ``T`` is matched or beaten by it). A type's ``D_t`` replicas go to its sites at the
lowest price per replica first (:func:`tpopt.models.sites.cheapest_fill`, exact within a type: one replica size,
so the cards are ``D_t`` x it). The two types are joined exactly on the batch (for each option of the first,
the second's sequences ``B - D_1 m_1`` give its ``D_2`` at each of its shares), keeping the joined splits whose
slowest step is ``T`` and that no other beats on both the bill rate and the cards (the finish grows with the
cards, the cost with both); each is scored at every undominated ring, mode, H and F. A lower bound per (sites,
``T``) -- every sequence of the batch at the least price and the fewest cards per sequence, the finish at ``T``
stretched by the mode's least WAN time (sync at its fastest ring) or token factor (DiLoCo) -- orders the pairs
and skips one only where it cannot beat the cheapest plan found of any mode it could meet the deadline in, so
the answer (and the cheapest plan per mode) is exact over the grids.

**Sets of more than MAX_TYPES types** are not joined: the same bound is evaluated for each at every threshold and
mode it could meet the deadline in, and where every bound is at least the best plan's cost (per mode: the
cheapest plan of that mode) no plan of such a set can be cheaper, and the answer is proven over every plan; else
the report names the sets not scored and the answer holds only over plans of at most MAX_TYPES types.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from os import PathLike
from typing import Any

import numpy as np

from tpopt.catalogs.scenario import load_mixed_sites_scenario, load_sites_scenario, read_scenario_file, split_sites
from tpopt.errors import InputError
from tpopt.models import families as F
from tpopt.models import pools as PM
from tpopt.models import sites as S
from tpopt.models import terms as T
from tpopt.models.arch import param_count
from tpopt.models.evaluate import evaluate_arrays
from tpopt.models.market import Power
from tpopt.models.plan import Scenario
from tpopt.models.units import DAY, HOUR
from tpopt.optimizer import backends
from tpopt.optimizer.footing import storage_words
from tpopt.optimizer.pools import POOL_FAMILIES, _job, fixed_choices, pool_nics
from tpopt.optimizer.sites import (
    GBPS,
    MAX_SITES,
    Candidate,
    Ring,
    crossover_lines,
    crossover_of,
    lines,
    mode_configs,
    mode_lines,
    replica_power_w,
    report,
    request,
    request_lines,
    rings,
    site_count,
    site_footing,
    solve_sites,
    wan_relaxation,
    wan_terms,
    with_bandwidth,
)
from tpopt.presentation import scale_out_relaxation_lines

REPLICA_FAMILIES = tuple(n for n in POOL_FAMILIES if n != F.CARDS)
"""Families a site's replica meets, as a pool's group does (the deadline, budget, step budget, input pipeline and
checkpoint backlog are the job's: the deadline and budget checked with the WAN, the save interval ``auto`` at the
job's cards; the sites' caps replace the card cap)."""


@dataclass
class TypeTable:
    """One card type's replicas: for each replica card count (TP x PP, ascending) and each per-replica share
    (columns), the fastest feasible step (s; inf: none) and its layout."""

    accelerator: str
    cards: tuple[int, ...]
    steps: np.ndarray[Any, Any]
    layouts: dict[tuple[int, int], dict[str, Any]]
    evaluated: int


def replica_shares(batch: int, micro_batches: tuple[int, ...]) -> tuple[int, ...]:
    """Every per-replica share ``m``: ``m`` divides the global batch and is a multiple of a micro-batch."""
    return tuple(m for m in range(1, batch + 1) if batch % m == 0 and any(m % mb == 0 for mb in micro_batches))


def type_table(sc: Scenario, acc: str, shares: tuple[int, ...]) -> TypeTable:
    """The type's kept replicas (see the module): every layout of ``[search]`` at every share, one vectorised
    evaluation per recompute choice, the replica families enforced."""
    se, batch = sc.search, sc.task.global_batch
    rows = np.array([(tp, pp, z, mb, m) for tp, pp, z, mb in itertools.product(se.tp, se.pp, se.zero_stage,
                                                                              se.micro_batch)
                     for m in shares if m % mb == 0], dtype=int).reshape(-1, 5).T
    cards = tuple(sorted({int(c) for c in rows[0] * rows[1]}))
    steps = np.full((len(cards), len(shares)), np.inf)
    layouts: dict[tuple[int, int], dict[str, Any]] = {}
    col = {m: j for j, m in enumerate(shares)}
    fixed = fixed_choices(sc)
    nics = pool_nics(sc, acc)  # the type's default unless [search] states one
    for rc in se.recompute:
        with np.errstate(divide="ignore", invalid="ignore"):
            r = evaluate_arrays(sc, acc, tp=rows[0], pp=rows[1], zero_stage=rows[2], micro_batch=rows[3],
                                dp=batch // rows[4], recompute=rc, nics_per_host=nics, **fixed)
        ok = np.ones(rows.shape[1], dtype=bool)
        for name in REPLICA_FAMILIES:
            v, lim = r[("c", name)]
            ok &= np.asarray(v <= lim)
        step = np.broadcast_to(np.asarray(r["step_s"], dtype=float), ok.shape)
        for k in np.flatnonzero(ok & np.isfinite(step)):
            tp, pp, z, mb, m = (int(x) for x in rows[:, k])
            i, j = cards.index(tp * pp), col[m]
            if step[k] < steps[i, j]:
                steps[i, j] = float(step[k])
                layouts[(i, j)] = {"tp": tp, "pp": pp, "zero_stage": z, "micro_batch": mb, "recompute": rc,
                                   "grad_accum": m // mb, "schedule": fixed["schedule"]}
    return TypeTable(accelerator=acc, cards=cards, steps=steps, layouts=layouts,
                     evaluated=rows.shape[1] * len(se.recompute))


@dataclass(frozen=True)
class SitePart:
    """One used site: its type, replica layout and cards, replicas, batch share, replica step, price."""

    site: str
    accelerator: str
    layout: dict[str, Any]
    replica_cards: int
    replicas: int
    share: int
    step_s: float
    card_hour: float
    power_w: float | None  # facility W of the site's replicas (None: no power figure)
    cap_w: float | None
    max_cards: int
    replica_share: int  # sequences one replica takes per step (the type's m_t)


@dataclass(frozen=True)
class MixedCandidate:
    """One plan: the used sites in ring order, mode, H and F, and its figures (s, bytes, USD)."""

    parts: tuple[SitePart, ...]
    mode: str
    inner_steps: int
    fragments: int
    cards: int
    compute_step_s: float
    exposed_s: float
    token_factor: float
    steps: float
    wan_bytes_step: float
    egress_usd: float
    overhead: float
    finish_s: float
    cost: float
    ring: Ring
    group: _Group

    def key(self) -> tuple[float, float, int, str, int, int, tuple[str, ...]]:
        return (self.cost, self.finish_s, self.cards, self.mode, self.inner_steps, self.fragments,
                tuple(p.site for p in self.parts))


@dataclass
class MixedSolve:
    """The decision: the best plan (None: none within the deadline and budget), the cheapest per mode, the
    synchronous and DiLoCo plans at the best's sites and replicas, and the search's size."""

    best: MixedCandidate | None
    per_mode: dict[str, MixedCandidate]
    best_sync: MixedCandidate | None
    best_diloco: MixedCandidate | None
    scored: int
    exhaustive: int  # (set of sites, step threshold) pairs joined (the bound did not rule them out)
    layouts_evaluated: int
    si: S.SitesInput
    cpu_s: float = 0.0
    types: list[str] = field(default_factory=list)
    crossover_bps: float | None = None  # DiLoCo wins below it at the best plan's sites, replicas and ring
    relaxations: list[dict[str, Any]] = field(default_factory=list)  # no plan: the "WAN bandwidth" relaxation
    wide_sets: int = 0  # sets of sites of more than MAX_TYPES types (not joined: bounded)
    wide_open: list[dict[str, Any]] = field(default_factory=list)  # their (sites, threshold, mode) not ruled out
    wide_best_proven: bool = True  # every bound of those sets >= the best plan's cost (no plan: none could meet)


def site_price(sc: Scenario, site: S.Site) -> float:
    """USD per card-hour at ``site``: its ``card_hour``, else its type's price (cards and NICs, per card)."""
    if site.card_hour is not None:
        return site.card_hour
    acc = site.accelerator or next(iter(sc.systems))
    sysm = sc.system(acc)
    if sysm.price_card_hour is None:
        raise InputError(f"[[sites]] {site.name}: {acc} has no price; give the site's card_hour (USD per card-hour)")
    return sysm.price_card_hour + sysm.acc.nics_per_host * sysm.nic_price_hour / sysm.acc.cards_per_host


MAX_TYPES = 2
"""Card types in one plan: a plan over sites of three types or more is not a candidate (each type's share is a
decision, and two types' shares are joined exactly on the global batch; a third multiplies the join)."""


@dataclass(frozen=True)
class _Group:
    """Used sites, in ring order, each with its chosen replica (layout, cards, step), its price per replica-hour,
    its cap in replicas (cards and power) and its type's per-replica share."""

    sites: tuple[S.Site, ...]
    layouts: tuple[dict[str, Any], ...]
    rc: tuple[int, ...]
    step: tuple[float, ...]
    unit: tuple[float, ...]  # USD per replica-hour
    caps: tuple[int, ...]
    replica_w: tuple[float | None, ...]  # facility W of one replica (None: no power figure)
    card_hour: tuple[float, ...]
    shares: tuple[int, ...]  # sequences a replica takes per step (its type's m_t)

    def ordered(self, order: tuple[str, ...]) -> _Group:
        """The same group with its sites in ``order`` (their names)."""
        names = [s.name for s in self.sites]
        k = [names.index(n) for n in order]
        return _Group(*(tuple(getattr(self, f)[i] for i in k) for f in
                        ("sites", "layouts", "rc", "step", "unit", "caps", "replica_w", "card_hour", "shares")))


class _Scorer:
    """Scores candidates of one scenario: the WAN, the job's overhead, finish and cost."""

    def __init__(self, sc: Scenario, si: S.SitesInput) -> None:
        self.sc, self.si = sc, si
        self.params = float(param_count(sc.model))
        self.iters = T.iteration_count(sc)
        self.deadline, self.budget = F.limit(F.DEADLINE, sc), F.limit(F.BUDGET, sc)

    def figures(self, g: _Group, ring: Ring, mode: str, h: int, f: int, cards: np.ndarray[Any, Any],
                rate: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any], ...]:
        """Overhead, finish and cost of splits of group ``g`` (in ring order) with these ``cards`` and bill
        ``rate`` (USD/h; arrays, one entry a split), and the scalars exposed WAN s, token factor, WAN bytes per
        step, egress USD, steps."""
        tc = max(g.step)
        exposed, step_bytes, link_bytes = wan_terms(self.si, ring, self.params, mode, h, f, tc)
        tf = S.token_factor(mode, self.si.token_penalty)
        run_steps = self.iters * tf
        egress = S.egress_usd(link_bytes * run_steps, ring.egress_usd_tb_sum)
        step = tf * PM.mixed_step_s(g.step, exposed)
        lo, _, finish = _job(self.sc, cards, np.full(np.shape(cards), step))
        cost = rate * finish / HOUR + egress
        return lo, finish, cost, np.array([exposed, tf, step_bytes, egress, run_steps])

    def grid(self, tc: float, ring: Ring, cfgs: list[tuple[str, int, int]], cards: np.ndarray[Any, Any],
             rate: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """Finish and cost (rows: ``cfgs``; columns: the splits of ``cards`` and bill ``rate`` USD/h) at slowest
        replica step ``tc``, as :meth:`figures` computes them."""
        steps, egress = [], []
        for mode, h, f in cfgs:
            exposed, _, link_bytes = wan_terms(self.si, ring, self.params, mode, h, f, tc)
            tf = S.token_factor(mode, self.si.token_penalty)
            steps.append(tf * PM.mixed_step_s([tc], exposed))
            egress.append(S.egress_usd(link_bytes * self.iters * tf, ring.egress_usd_tb_sum))
        step = np.repeat(np.array(steps)[:, None], len(cards), axis=1)
        _, _, finish = _job(self.sc, np.broadcast_to(cards, step.shape), step)
        return finish, rate * finish / HOUR + np.array(egress)[:, None]


@dataclass(frozen=True)
class _Options:
    """One type's ways to take part at a step threshold over its used sites (``members``, indexes into the
    sites): per option the share column, the replicas D (over the members, cheapest first), the sequences
    D x m, the least bill (USD/h), the cards and the replica step."""

    acc: str
    members: tuple[int, ...]
    rows: np.ndarray[Any, Any]  # the table row (replica size) per share column
    col: np.ndarray[Any, Any]
    d: np.ndarray[Any, Any]
    seq: np.ndarray[Any, Any]
    rate: np.ndarray[Any, Any]
    cards: np.ndarray[Any, Any]
    step: np.ndarray[Any, Any]


def fill_costs(unit: list[float], caps: list[int]) -> np.ndarray[Any, Any]:
    """The least bill (USD/h) of ``t`` replicas over sites with these per-replica prices and caps, from ``t`` =
    the sites (one each) to their summed caps: one each, the rest cheapest first (the cumulative sum of the sorted
    prices, each site's repeated cap - 1 times; :func:`tpopt.models.sites.cheapest_fill`'s bill)."""
    order = sorted(range(len(unit)), key=lambda i: (unit[i], i))
    extra = np.repeat([unit[i] for i in order], [caps[i] - 1 for i in order])
    return sum(unit) + np.concatenate(([0.0], np.cumsum(extra)))


class _Sites:
    """The scenario's sites with their prices, types' tables and power figures: the per-site choices at a step
    threshold."""

    def __init__(self, sc: Scenario, si: S.SitesInput, powers: dict[str, Power | None],
                 tables: dict[str, TypeTable], shares: tuple[int, ...]) -> None:
        self.sc, self.si, self.powers, self.tables, self.shares = sc, si, powers, tables, shares
        self.prices = [site_price(sc, s) for s in si.sites]
        self.batch = sc.task.global_batch

    def acc(self, i: int) -> str:
        return self.si.sites[i].accelerator or ""

    def caps(self, i: int, rc: int) -> tuple[int, float | None]:
        """Site ``i``'s cap in replicas of ``rc`` cards (its cards and power) and one replica's facility W."""
        site, acc = self.si.sites[i], self.acc(i)
        power = self.powers.get(acc)
        w = replica_power_w(power, site, rc, self.sc.system(acc).acc.cards_per_host) if power is not None else None
        return S.replicas_under_power(w or 0.0, site.power_cap_w if w is not None else None, site.max_cards, rc), w

    def rows(self, acc: str, thr: float) -> np.ndarray[Any, Any]:
        """Per share column, the fewest-card row whose step is within ``thr`` (-1: none)."""
        mask = self.tables[acc].steps <= thr
        return np.where(mask.any(axis=0), mask.argmax(axis=0), -1)

    def options(self, acc: str, members: tuple[int, ...], thr: float) -> _Options:
        tab, rows = self.tables[acc], self.rows(acc, thr)
        parts: list[tuple[np.ndarray[Any, Any], ...]] = []
        for j in np.flatnonzero(rows >= 0):
            rc = tab.cards[rows[j]]
            caps = [self.caps(i, rc)[0] for i in members]
            lo, hi = len(members), min(sum(caps), self.batch // self.shares[j])
            if min(caps) < 1 or hi < lo:
                continue
            d = np.arange(lo, hi + 1)
            parts.append((np.full(d.shape, j), d, d * self.shares[j],
                          fill_costs([rc * self.prices[i] for i in members], caps)[: hi - lo + 1], d * float(rc),
                          np.full(d.shape, tab.steps[rows[j], j])))
        cols = [np.concatenate(x) if parts else np.zeros(0) for x in zip(*parts, strict=True)] if parts else \
            [np.zeros(0, dtype=int)] * 6
        return _Options(acc, members, rows, *cols)

    def bound(self, types: dict[str, tuple[int, ...]], thr: float) -> tuple[float, float] | None:
        """A lower bound on the bill rate (USD/h) and the cards of any plan of these types' sites whose slowest
        replica step is ``thr``: every sequence of the batch at the least price and the fewest cards per sequence
        among their replicas within ``thr`` (None: a type has none)."""
        usd, cards = np.inf, np.inf
        for acc, members in types.items():
            tab, rows = self.tables[acc], self.rows(acc, thr)
            ok = rows >= 0
            if not ok.any():
                return None
            per_seq = np.asarray(tab.cards)[rows[ok]] / np.asarray(self.shares)[ok]
            usd = min(usd, float(per_seq.min()) * min(self.prices[i] for i in members))
            cards = min(cards, float(per_seq.min()))
        return usd * self.batch, cards * self.batch

    def group(self, opts: list[_Options], picks: list[int]) -> tuple[_Group, dict[str, int]]:
        """The used sites (in site order) of option ``picks[k]`` of each type's ``opts[k]``: each type's replicas
        filled cheapest first over its members; and the replicas per site."""
        parts: dict[int, tuple[Any, ...]] = {}
        for o, k in zip(opts, picks, strict=True):
            j, d = int(o.col[k]), int(o.d[k])
            tab = self.tables[o.acc]
            row = int(o.rows[j])
            rc = tab.cards[row]
            cw = [self.caps(i, rc) for i in o.members]
            unit = [rc * self.prices[i] for i in o.members]
            fill = S.cheapest_fill(d, tuple(c for c, _ in cw), tuple(unit))
            assert fill is not None  # d is within the members' caps
            for i, n, (cap, w), u in zip(o.members, fill, cw, unit, strict=True):
                parts[i] = (self.si.sites[i], tab.layouts[(row, j)], rc, float(tab.steps[row, j]), u, cap, w,
                            self.prices[i], self.shares[j], n)
        ordered = [parts[i] for i in sorted(parts)]
        g = _Group(*(tuple(p[k] for p in ordered) for k in range(9)))
        return g, {p[0].name: p[9] for p in ordered}


def _joined(opts: list[_Options], batch: int, thr: float) -> list[np.ndarray[Any, Any]]:
    """Indexes (one array per type) of the combinations of one option per type whose sequences sum to the batch
    and whose slowest replica step is ``thr`` (a join on the sequences: the second type's D follows from the
    first's), less those another beats on both the bill rate and the cards (the Pareto front)."""
    a = opts[0]
    if len(opts) == 1:
        idx = [np.flatnonzero((a.seq == batch) & (a.step == thr))]
        rate, cards = a.rate[idx[0]], a.cards[idx[0]]
    else:
        b = opts[1]
        order = np.argsort(b.seq, kind="stable")
        sb = b.seq[order]
        need = batch - a.seq
        left, right = np.searchsorted(sb, need, "left"), np.searchsorted(sb, need, "right")
        cnt = right - left
        ia = np.repeat(np.arange(len(a.seq)), cnt)
        start = np.repeat(np.cumsum(cnt) - cnt, cnt)
        ib = order[np.repeat(left, cnt) + np.arange(int(cnt.sum())) - start]
        ok = np.maximum(a.step[ia], b.step[ib]) == thr
        idx = [ia[ok], ib[ok]]
        rate, cards = a.rate[idx[0]] + b.rate[idx[1]], a.cards[idx[0]] + b.cards[idx[1]]
    order = np.lexsort((rate, cards))
    best = np.minimum.accumulate(rate[order])
    front = order[np.concatenate(([True], best[1:] < best[:-1]))] if len(order) else order
    return [x[front] for x in idx]


def _candidate(scorer: _Scorer, g: _Group, ring: Ring, cfg: tuple[str, int, int], reps: np.ndarray[Any, Any],
               k: int) -> MixedCandidate:
    """Split ``k`` of ``reps`` of group ``g`` (in ring order) as a plan."""
    cards = reps @ np.asarray(g.rc, dtype=float)
    lo, finish, cost, sca = scorer.figures(g, ring, *cfg, cards, reps @ np.asarray(g.unit, dtype=float))
    n = [int(x) for x in reps[k]]
    parts = tuple(SitePart(site=s.name, accelerator=s.accelerator or "", layout=lay, replica_cards=rc, replicas=r,
                           share=r * m, step_s=t, card_hour=p, power_w=None if w is None else w * r,
                           cap_w=s.power_cap_w, max_cards=s.max_cards, replica_share=m)
                  for s, lay, rc, r, t, p, w, m in zip(g.sites, g.layouts, g.rc, n, g.step, g.card_hour, g.replica_w,
                                                       g.shares, strict=True))
    exposed, tf, step_bytes, egress, run_steps = (float(x) for x in sca)
    return MixedCandidate(parts=parts, mode=cfg[0], inner_steps=cfg[1], fragments=cfg[2],
                          cards=int(cards[k]), compute_step_s=max(g.step), exposed_s=exposed, token_factor=tf,
                          steps=run_steps, wan_bytes_step=step_bytes, egress_usd=egress, overhead=float(lo[k]),
                          finish_s=float(finish[k]), cost=float(cost[k]), ring=ring, group=g)


def solve_mixed_sites(sc: Scenario, si: S.SitesInput, powers: dict[str, Power | None], prune: bool = True,
                      relax: bool = True) -> MixedSolve:
    """The decision of the module's docstring over ``si``'s sites (each with its type; ``powers``: each type's
    catalog power figures); ``prune`` False: every (set of sites, threshold) is joined, whatever its bound (a
    check of the bound). Without a plan and with ``relax``: the "WAN bandwidth" relaxation
    (:func:`tpopt.optimizer.sites.wan_relaxation`, this decision re-run at each bandwidth tried)."""
    t0 = time.process_time()
    if sc.task.confidence is not None:
        raise InputError("schedule.confidence: tpopt sites with several card types checks the deadline at the median "
                         "finish (no finish-time distribution across types); drop confidence, or give every site one "
                         "card type")
    if len(si.sites) > MAX_SITES:
        raise InputError(f"[[sites]]: at most {MAX_SITES} sites (got {len(si.sites)})")
    for s in si.sites:
        if s.power_cap_w is not None and powers.get(s.accelerator or "") is None:
            raise InputError(f"[[sites]] {s.name} power: {s.accelerator} has no power figures in the catalog "
                             "([power.NAME])")
    batch = sc.task.global_batch
    shares = replica_shares(batch, sc.search.micro_batch)
    types = list(dict.fromkeys(s.accelerator or "" for s in si.sites))
    tables = {a: type_table(sc, a, shares) for a in types}
    ss = _Sites(sc, si, powers, tables, shares)
    scorer = _Scorer(sc, si)
    best: MixedCandidate | None = None
    per_mode: dict[str, MixedCandidate] = {}
    modes = {m for m in si.modes if m == S.SYNC or len(si.sites) > 1}
    scored = joined = 0
    ring_sets: dict[tuple[int, ...], list[Ring]] = {}
    work: list[tuple[float, dict[str, float], tuple[int, ...], dict[str, tuple[int, ...]], float]] = []
    beyond: list[tuple[dict[str, float], tuple[int, ...], float]] = []
    wide_sets = 0
    for k in range(1, len(si.sites) + 1):
        for idx in itertools.combinations(range(len(si.sites)), k):
            by_type: dict[str, tuple[int, ...]] = {}
            for i in idx:
                by_type[ss.acc(i)] = (*by_type.get(ss.acc(i), ()), i)
            wide_sets += len(by_type) > MAX_TYPES
            ring_sets[idx] = rings(si, tuple(si.sites[i].name for i in idx))
            # per mode, the least stretch of the slowest replica step: sync at its fastest ring, DiLoCo's tokens
            extra = {m: (1.0, min(wan_terms(si, r, scorer.params, S.SYNC, 1, 1, 0.0)[0] for r in ring_sets[idx]))
                     if m == S.SYNC else (S.token_factor(m, si.token_penalty), 0.0)
                     for m in modes if m == S.SYNC or k > 1}
            steps = {float(x) for a in by_type for x in tables[a].steps.ravel() if np.isfinite(x)}
            bounded = [(thr, lb) for thr in sorted(steps) if (lb := ss.bound(by_type, thr)) is not None]
            if not bounded:
                continue
            thr_v = np.array([t for t, _ in bounded])
            cards_v = np.array([lb[1] for _, lb in bounded])
            fins = {m: _job(sc, cards_v, tf * (thr_v + wan))[2] for m, (tf, wan) in extra.items()}
            for n, (thr, lb) in enumerate(bounded):
                lows = {}
                for m in extra:
                    fin = float(fins[m][n])
                    if fin <= scorer.deadline and lb[0] * fin / HOUR <= scorer.budget:
                        lows[m] = lb[0] * fin / HOUR
                if lows and len(by_type) > MAX_TYPES:
                    beyond.append((lows, idx, thr))  # not joined: bounded against the answer below
                elif lows:
                    work.append((min(lows.values()), lows, idx, by_type, thr))

    def keep(c: MixedCandidate) -> None:
        nonlocal best
        if best is None or c.key() < best.key():
            best = c
        if c.mode not in per_mode or c.key() < per_mode[c.mode].key():
            per_mode[c.mode] = c

    for low, lows, idx, by_type, thr in sorted(work, key=lambda w: w[0]):
        if prune and modes <= per_mode.keys() and low >= max(per_mode[m].cost for m in modes):
            break  # sorted: no plan of this or any later (sites, threshold) beats the cheapest of every mode
        if prune and all(m in per_mode and x >= per_mode[m].cost for m, x in lows.items()):
            continue  # the bound: no plan here beats the cheapest of any mode it could meet the deadline in
        joined += 1
        opts = [ss.options(a, m, thr) for a, m in by_type.items()]
        picks = _joined(opts, batch, thr)
        if not len(picks[0]):
            continue
        rate = sum(o.rate[p] for o, p in zip(opts, picks, strict=True))
        cards = sum(o.cards[p] for o, p in zip(opts, picks, strict=True))
        cfgs = mode_configs(si, len(idx))
        for ring in ring_sets[idx]:
            finish, cost = scorer.grid(thr, ring, cfgs, np.asarray(cards, dtype=float), np.asarray(rate, dtype=float))
            scored += cost.size
            ok = (finish <= scorer.deadline) & (cost <= scorer.budget)
            for c, k in zip(*np.nonzero(ok), strict=True):
                cur = per_mode.get(cfgs[c][0])
                if cur is None or (cost[c, k], finish[c, k]) <= (cur.cost, cur.finish_s):
                    g, reps = ss.group(opts, [int(p[k]) for p in picks])
                    keep(_candidate(scorer, g.ordered(ring.order), ring, cfgs[c],
                                    np.array([[reps[n] for n in ring.order]], dtype=float), 0))
    out = MixedSolve(best=best, per_mode=per_mode, best_sync=None, best_diloco=None, scored=scored,
                     exhaustive=joined, layouts_evaluated=sum(t.evaluated for t in tables.values()), si=si,
                     types=types, wide_sets=wide_sets,
                     wide_open=_unbounded(beyond, per_mode, [s.name for s in si.sites]),
                     wide_best_proven=all(x >= best.cost for lows, _, _ in beyond for x in lows.values())
                     if best is not None else not beyond)
    if best is not None:
        out.best_sync, out.best_diloco = _compare(scorer, best, si)
        if out.best_sync is not None and out.best_diloco is not None:
            out.crossover_bps = crossover_of(si, best.ring, scorer.params, sc.task.reserved_s,
                                             as_candidate(sc, out.best_sync), as_candidate(sc, out.best_diloco))
    elif relax:
        out.relaxations = [wan_relaxation(si, lambda gbps: _best_candidate(
            sc, solve_mixed_sites(sc, with_bandwidth(si, gbps * GBPS), powers, prune, relax=False)))]
    out.cpu_s = time.process_time() - t0
    return out


def _unbounded(beyond: list[tuple[dict[str, float], tuple[int, ...], float]],
               per_mode: dict[str, MixedCandidate], names: list[str]) -> list[dict[str, Any]]:
    """The (set of sites, threshold, mode) of sets of more than :data:`MAX_TYPES` types whose lower bound (the
    one that skips pairs) is below the cheapest plan found of that mode, or that could meet the deadline in a mode
    with no plan found: the plans there were not scored and could be cheaper (empty: the answer, and the cheapest
    plan per mode, hold over every set of sites)."""
    return [{"sites": [names[i] for i in idx], "threshold_s": thr, "mode": m, "bound_usd": x}
            for lows, idx, thr in beyond for m, x in sorted(lows.items())
            if m not in per_mode or x < per_mode[m].cost]


def _best_candidate(sc: Scenario, out: MixedSolve) -> Candidate | None:
    return None if out.best is None else as_candidate(sc, out.best)


def as_candidate(sc: Scenario, c: MixedCandidate) -> Candidate:
    """``c`` in the one-type decision's terms (:class:`tpopt.optimizer.sites.Candidate`), for its crossover and
    relaxation: the no-WAN finish ``f1 = reserved + iterations x max_s t_s x (1 + L)`` (L at the job's cards,
    independent of the WAN) and its bill ``c1 = sum_s cards_s x price_s x f1 / 3600``, so that
    ``finish = reserved + (f1 - reserved) x token factor x (t + exposed) / t`` and ``cost = c1 x finish / f1 +
    egress``, the one-type forms."""
    f1 = T.finish_time(sc, c.compute_step_s, c.overhead)
    rate = sum(p.replicas * p.replica_cards * p.card_hour for p in c.parts)
    return Candidate(sites=tuple(p.site for p in c.parts), replicas=tuple(p.replicas for p in c.parts), mode=c.mode,
                     inner_steps=c.inner_steps, fragments=c.fragments, dp=sum(p.replicas for p in c.parts),
                     cards=c.cards, compute_step_s=c.compute_step_s, exposed_s=c.exposed_s,
                     utilisation=S.utilisation(c.compute_step_s, c.exposed_s), token_factor=c.token_factor,
                     steps=c.steps, wan_bytes_step=c.wan_bytes_step, wan_bytes_total=c.wan_bytes_step * c.steps,
                     egress_usd=c.egress_usd, finish_s=c.finish_s, cost=c.cost, one_site_cost=rate * f1 / HOUR,
                     one_site_finish_s=f1)


def _compare(scorer: _Scorer, best: MixedCandidate, si: S.SitesInput
             ) -> tuple[MixedCandidate | None, MixedCandidate | None]:
    """The cheapest synchronous and the cheapest DiLoCo plan at the best plan's sites, replicas and ring (the
    deadline not applied: the comparison says what each mode costs there)."""
    reps = np.array([[p.replicas for p in best.parts]], dtype=float)
    cs = [_candidate(scorer, best.group, best.ring, cfg, reps, 0)
          for cfg in mode_configs(si, len(best.parts))]
    sync = [c for c in cs if c.mode == S.SYNC]
    dl = [c for c in cs if c.mode == S.DILOCO]
    return (min(sync, key=MixedCandidate.key) if sync else None,
            min(dl, key=MixedCandidate.key) if dl else None)


def _plan_dict(c: MixedCandidate | None) -> dict[str, Any] | None:
    if c is None:
        return None
    return {"mode": c.mode, "sites": [p.site for p in c.parts], "replicas": [p.replicas for p in c.parts],
            "inner_steps": c.inner_steps, "fragments": c.fragments, "cards": c.cards,
            "replica_shares": [p.replica_share for p in c.parts], "compute_step_s": c.compute_step_s,
            "exposed_wan_s": c.exposed_s,
            "utilisation": S.utilisation(c.compute_step_s, c.exposed_s), "token_factor": c.token_factor,
            "steps": c.steps, "wan_bytes_step": c.wan_bytes_step, "wan_bytes_total": c.wan_bytes_step * c.steps,
            "egress_usd": c.egress_usd, "overhead": c.overhead, "finish_days": c.finish_s / DAY, "cost": c.cost}


def _part_dict(c: MixedCandidate, p: SitePart, idle: float) -> dict[str, Any]:
    return {"site": p.site, "accelerator": p.accelerator, **p.layout, "replica_cards": p.replica_cards,
            "replicas": p.replicas, "cards": p.replicas * p.replica_cards, "share": p.share,
            "replica_share": p.replica_share,
            "replica_step_s": p.step_s, "idle_s": idle, "card_hour": p.card_hour,
            "bill_usd": PM.pool_cost(p.replicas * p.replica_cards, p.card_hour, c.finish_s),
            "site_mw": None if p.power_w is None else p.power_w / 1e6,
            "cap_mw": None if p.cap_w is None else p.cap_w / 1e6, "max_cards": p.max_cards}


def mixed_report(out: MixedSolve) -> dict[str, Any]:
    """The command's JSON for sites with their own types and prices."""
    si = out.si
    d: dict[str, Any] = {
        "status": "optimal" if out.best else "infeasible", "types": out.types, "candidates": out.scored,
        "thresholds_joined": out.exhaustive, "layouts_evaluated": out.layouts_evaluated, "modes": list(si.modes),
        "best": _plan_dict(out.best), "sync": _plan_dict(out.best_sync), "diloco": _plan_dict(out.best_diloco),
        "best_per_mode": {m: _plan_dict(c) for m, c in sorted(out.per_mode.items())},
        "token_penalty": si.token_penalty, "token_penalty_source": si.token_penalty_source,
        "assumptions": [
            "the replicas of one type take one share of the global batch, each type its own (shares dividing the "
            "batch); each site runs one layout of its type; a plan spans at most two card types",
            "the step waits for the slowest site (DiLoCo: the outer synchronisation waits for the slowest site's "
            "H inner steps)",
            "synchronous WAN all-reduce not overlapped with compute (the gradient is whole after the backward pass)",
            f"gradient {si.grad_bytes:g} B/parameter and DiLoCo outer gradient {si.outer_bytes:g} B/parameter "
            "on the WAN",
            f"a streamed fragment's all-reduce overlaps {si.overlap_steps} inner step(s) (tau)",
            "checkpoint and failure overhead at the job's cards, every card at the scenario's MTBF",
            "a replica's step as one of B / m replicas of its type at its share m (the data-parallel all-reduce "
            "inside a site)"],
    }
    if out.wide_sets:
        d["wider_site_sets"] = {"max_types": MAX_TYPES, "site_sets": out.wide_sets, "proven": out.wide_best_proven,
                                "per_mode_proven": not out.wide_open, "not_scored": out.wide_open}
    if out.best is None:
        d["relaxations"] = out.relaxations
    if out.best_diloco is not None:
        d["crossover_gbps"] = None if out.crossover_bps is None else out.crossover_bps / GBPS
    if out.best is not None:
        b = out.best
        idle = PM.idle_s([p.step_s for p in b.parts])
        d["per_site"] = [_part_dict(b, p, i) for p, i in zip(b.parts, idle, strict=True)]
    return d


def _mode(c: dict[str, Any]) -> str:
    return "sync" if c["mode"] == S.SYNC else f"DiLoCo H={c['inner_steps']} F={c['fragments']}"


def _site_line(s: dict[str, Any]) -> str:
    mw = "no power figure" if s["site_mw"] is None else (
        f"{s['site_mw']:,.1f} MW" + ("" if s["cap_mw"] is None else f" of {s['cap_mw']:,.1f} MW"))
    return (f"  {s['site']}: {s['accelerator']}, {s['replicas']:,} replicas of TP {s['tp']} x PP {s['pp']} "
            f"(micro-batch {s['micro_batch']} x {s['grad_accum']}, ZeRO {s['zero_stage']}, recompute "
            f"{s['recompute']}), {s['cards']:,} of {s['max_cards']:,} cards, {s['share']:,} sequences a step, "
            f"replica step {s['replica_step_s']:.2f} s (idle {s['idle_s']:.2f} s), {s['card_hour']:.2f} USD/card-h,"
            f" {s['bill_usd']:,.0f} USD, {mw}")


def wider_lines(d: dict[str, Any]) -> list[str]:
    """Whether the answer holds over the sets of sites of more than ``MAX_TYPES`` types (not joined, bounded)."""
    w = d.get("wider_site_sets")
    if not w:
        return []
    head = f"site sets of {w['max_types'] + 1}+ card types ({w['site_sets']:,}, not joined):"
    how = "(every sequence at the least price and cards per sequence, the finish at the step threshold)"
    sets = ", ".join(dict.fromkeys("+".join(x["sites"]) for x in w["not_scored"]))
    modes = "/".join(dict.fromkeys(x["mode"] for x in w["not_scored"]))
    if w["proven"] and w["per_mode_proven"]:
        what = "beat it" if d["best"] is not None else "meet the deadline and budget"
        return [f"{head} bounded, none can {what} {how}: proven over every plan"]
    if w["proven"]:
        return [f"{head} bounded, none can beat the best plan {how}: the best is proven over every plan; the "
                f"cheapest {modes} plan only over plans of at most {w['max_types']} types ({sets} not scored, "
                "their bound below it)"]
    return [f"{head} {len(w['not_scored']):,} (sites, threshold, mode) bounds below the answer or in a mode without "
            f"a plan, not scored ({sets}): proven only over plans of at most {w['max_types']} types"]


def stated_reliability(sc: Scenario, best: dict[str, Any] | None) -> dict[str, Any]:
    """The stated inputs behind the job's checkpoint and failure overhead (they move the finish and the bill):
    the card MTBF (every card of every site; None: none stated), the storage bandwidth, and the best plan's
    overhead L (finish = reserved + iterations x step x (1 + L); None without a plan)."""
    rel = sc.reliability
    return {"card_mtbf_days": None if rel.card_mtbf_s is None else rel.card_mtbf_s / DAY,
            "write_gb_s": rel.write_bandwidth / 1e9, "storage": storage_words(rel),
            "overhead": None if best is None else best["overhead"],
            "cards": None if best is None else best["cards"]}


def reliability_line(r: dict[str, Any] | None) -> list[str]:
    """The report's line of :func:`stated_reliability` (none where the report has none)."""
    if not r:
        return []
    mtbf = "no card MTBF" if r["card_mtbf_days"] is None else f"card MTBF {r['card_mtbf_days']:,.0f} d"
    lost = "" if r["overhead"] is None else \
        f"; checkpoint and failure overhead {100 * r['overhead']:.1f} % of the training time on {r['cards']:,} cards"
    return [f"stated: {mtbf} (every card of every site), storage bandwidth {r['write_gb_s']:g} GB/s "
            f"({r['storage']}){lost}"]


def mixed_lines(d: dict[str, Any]) -> list[str]:
    """The report as text lines."""
    if d["best"] is None:
        rl = scale_out_relaxation_lines(d.get("relaxations") or [])  # before the verdict, which stays the last line
        return [*request_lines(d), f"types: {', '.join(d['types'])}", *([""] + rl + [""] if rl else []),
                *wider_lines(d),
                f"no multi-site plan meets the deadline ({d['candidates']:,} candidates scored)"]
    b = d["best"]
    each = dict.fromkeys(f"{s['accelerator']} {s['replica_share']:,}" for s in d["per_site"])
    out = [*request_lines(d), f"types: {', '.join(d['types'])}; sequences a replica takes per step: {', '.join(each)}",
           f"best: {_mode(b)} over {site_count(len(b['sites']))}, {b['cards']:,} cards, {b['finish_days']:.1f} d, "
           f"{b['cost']:,.0f} USD ({d['candidates']:,} candidates scored, {d['thresholds_joined']:,} site sets x step "
           "thresholds joined, exact over the grids)"]
    out += [_site_line(s) for s in d["per_site"]]
    out += wider_lines(d)
    out += mode_lines(d)
    out += crossover_lines(d)
    out.append(f"token penalty {d['token_penalty']:.1%} ({d['token_penalty_source'] or 'stated input'})")
    out += [f"assumption: {a}" for a in d["assumptions"]]
    return out + reliability_line(d.get("reliability"))


def answer(source: str | PathLike[str] | Mapping[str, Any], catalog_dirs: Sequence[str | PathLike[str]] = (),
           solver: str = backends.DEFAULT) -> dict[str, Any]:
    """``tpopt sites`` for the command and the API: the report of this module's decision where a site names its
    own card type or price, else the one-type decision's (:func:`tpopt.optimizer.sites.report`)."""
    _, stated = split_sites(read_scenario_file(source))
    if stated is not None and S.mixed(stated):
        msc, msi, powers = load_mixed_sites_scenario(source, catalog_dirs)
        d = {"request": request(msc, msi), **mixed_report(solve_mixed_sites(msc, msi, powers))}
        return {**d, "reliability": stated_reliability(msc, d["best"])}
    sc, si, power = load_sites_scenario(source, catalog_dirs)
    out = solve_sites(sc, si, power, solver)
    return {"request": request(sc, si), **report(out), "footing": site_footing(sc, out)}


def answer_lines(d: dict[str, Any], width: int = 100) -> list[str]:
    """The text of :func:`answer`'s report (either decision's; a footing wrapped to ``width``)."""
    return mixed_lines(d) if "types" in d else lines(d, width)


__all__ = ["answer", "answer_lines", "stated_reliability", "reliability_line",
           "TypeTable", "SitePart", "MixedCandidate", "MixedSolve", "replica_shares",
           "type_table", "site_price", "solve_mixed_sites", "mixed_report", "mixed_lines", "wider_lines",
           "REPLICA_FAMILIES", "as_candidate"]
