"""The mixed plan as a decision over any number of accelerator pools (issue 40, item 1): form (a), data-parallel
groups per pool, and form (b), one pipeline with stages on two pools (:func:`solve_staged`).

**The space.** Each pool ``g`` (``[[hardware.pools]]``) runs one layout: TP, PP, ZeRO stage, micro-batch and
recompute from the scenario's ``[search]`` lists, ``DP_g`` replicas (any count the pool's cards admit, whole
hosts), and a share ``b_g`` of the global batch ``B`` (an integer multiple of ``micro_batch_g x DP_g``;
``sum_g b_g = B``; a pool may be left out, ``b_g = 0``). The group's step time ``t_g(b_g)`` and its memory are
the single-accelerator model's (:func:`tpopt.models.evaluate.evaluate_arrays` on the pool's accelerator at
``global_batch = b_g``), so every per-pool family holds exactly as in a homogeneous plan (memory per card and
per host, batch divisibility, whole hosts, TP within a host, heads, pipeline shape, the pool's cards).

**The job.** ``step = max_g t_g(b_g) + t_x`` (:func:`tpopt.models.pools.mixed_step_s`, the cross-pool all-reduce
:func:`tpopt.models.pools.cross_pool_s` over the slower pool's NICs), ``finish = reserved + iterations x step x
(1 + L)`` with the checkpoint and failure overhead ``L`` at the mixed job's failure rate (the sum over pools:
the scenario's card MTBF applies to every card, so the rate is the one of ``n_1 + n_2`` cards) and the save
interval of ``[search]`` (``auto``: the optimum for that rate); ``cost = sum_g n_g x p_g x finish / 3600``
(an owned pool at its internal price, 0 by default). The deadline, ``cost.max_cost`` and the input pipeline
(``B / step`` against the pools' summed supply) are checked on the job.

**Exact.** The minimum cost (ties: the earlier finish) over that space is found exactly: every pool's step
times are tabulated at every share its layouts admit (one vectorised evaluation per share); per pool and share
only the fastest layout of each card count is kept (:func:`pool_options`); the pools are combined one by one
(:func:`search_pools`), dropping after each the partial plans whose bounds break the deadline, the budget or
the best plan over two pools, and keeping of those with the same batch taken and cards per pool the fastest
split (:func:`prune`). No monotonicity of ``t_g`` in ``b_g`` or of the overhead in the cards is assumed.

**Restrictions.** One layout per pool (every replica of a pool runs the same layout); the schedule, offload,
save mode and NICs per host are the ``[search]`` lists' first values; the cross-pool reduction is not hidden
behind compute. Form (b)'s own restrictions are stated in its report (:data:`STAGED_RESTRICTIONS`). Each
homogeneous plan (one pool alone, same space) is solved too and compared. Under ``--confidence`` the deadline
binds the finish's quantile at the largest step sigma of the pools a plan uses (:func:`chance_finish`).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import numpy as np

from tpopt.errors import InputError
from tpopt.models import comm
from tpopt.models import families as F
from tpopt.models import pools as PM
from tpopt.models import terms as T
from tpopt.models.arch import param_count
from tpopt.models.evaluate import CONSTRAINT_NAMES, evaluate_arrays
from tpopt.models.plan import Scenario
from tpopt.models.units import DAY, HOUR, fmt_count
from tpopt.optimizer.footing import footing
from tpopt.optimizer.space import nic_domain
from tpopt.presentation import counted, footing_lines, level_text, probability_text, scale_out_relaxation_lines

JOB_FAMILIES = (F.DEADLINE, F.BUDGET, F.STEP_BUDGET, F.INPUT_THROUGHPUT, F.CHECKPOINT)
"""Families of the whole job, checked on the mixed plan (not per pool)."""
POOL_FAMILIES = tuple(n for n in CONSTRAINT_NAMES if n not in JOB_FAMILIES)
"""Families every pool's group meets at its share, exactly as a homogeneous plan does."""
LAYOUT_KEYS = ("tp", "pp", "zero_stage", "micro_batch", "dp")
T_Plan = TypeVar("T_Plan")


def pool_scenario(sc: Scenario, pool: PM.Pool) -> Scenario:
    """The scenario on ``pool`` alone: its accelerator at its price per card-hour (NICs included), at most its
    cards, no pools left to choose."""
    system = replace(sc.system(pool.accelerator), price_card_hour=pool.price_card_hour, nic_price_hour=0.0,
                     price_source=pool.price_source or sc.system(pool.accelerator).price_source)
    search = replace(sc.search, accelerators=(pool.accelerator,), max_cards=pool.max_cards)
    return replace(sc, systems={pool.accelerator: system}, search=search, pools=())


def at_share(sc: Scenario, share: int) -> Scenario:
    """The pool's scenario running ``share`` sequences per step (its part of the global batch)."""
    return replace(sc, task=replace(sc.task, global_batch=int(share)))


def per_pool(sc: Scenario) -> Scenario:
    """The scenario a pool's own evaluations run in: without the confidence. They read the step, the memory and
    the pool's families (:data:`POOL_FAMILIES`, :data:`STAGE_FAMILIES`), none of which the confidence moves;
    the job's deadline is checked on complete plans (:func:`deadline_ok`), so the chance roots of every
    layout's step limit, unread here, are not found."""
    return sc if sc.task.confidence is None else replace(sc, task=replace(sc.task, confidence=None))


@dataclass
class PoolTable:
    """One pool's layouts (rows) and their group step time at every share (columns; inf where the layout
    does not admit the share or breaks a per-pool family)."""

    pool: PM.Pool
    sc: Scenario
    layouts: list[dict[str, Any]]
    cards: np.ndarray[Any, Any]
    hosts: np.ndarray[Any, Any]
    steps: np.ndarray[Any, Any]  # rows x len(shares)
    supply: np.ndarray[Any, Any]  # sequences per second the pool's input workers prepare
    host_bw: float  # bytes/s per host across the scale-out network (NIC bandwidth x NICs per host)
    evaluated: int  # layouts x shares evaluated

    def fastest(self, column: int) -> int:
        return int(np.argmin(self.steps[:, column]))


def layout_grid(sc: Scenario, max_cards: int) -> dict[str, np.ndarray[Any, Any]]:
    """Every (TP, PP, ZeRO, micro-batch, DP) of the ``[search]`` lists with ``TP x PP x DP <= max_cards``,
    flattened."""
    se = sc.search
    rows = [(tp, pp, z, mb, dp) for tp, pp, z, mb in itertools.product(se.tp, se.pp, se.zero_stage, se.micro_batch)
            for dp in range(1, max_cards // (tp * pp) + 1)]
    if not rows:
        raise InputError(f"no layout of [search] tp x pp fits {max_cards} cards")
    cols = np.array(rows, dtype=int).T
    return dict(zip(LAYOUT_KEYS, cols, strict=True))


def fixed_choices(sc: Scenario) -> dict[str, Any]:
    """The choices a pool's layouts share: the first schedule, offload and save mode of ``[search]``."""
    return {"schedule": sc.search.schedule[0], "offload": sc.search.offload[0], "save_mode": sc.search.save_mode[0]}


def pool_nics(sc: Scenario, accelerator: str) -> int:
    """NICs per host of a pool's hosts: the first of the homogeneous space's NIC domain for the card
    (:func:`tpopt.optimizer.space.nic_domain`: ``[search] nics_per_host`` within what its hosts take, else the
    catalog count; the evaluation's own default is one NIC per host)."""
    domain = nic_domain(sc, accelerator)
    if not domain:
        raise InputError(f"the search domain of nics is empty for {accelerator}")
    return domain[0]


def pool_table(sc: Scenario, pool: PM.Pool, shares: np.ndarray[Any, Any]) -> PoolTable:
    """Step times of every layout of ``pool`` at every share (see the module: one evaluation per share and
    recompute choice, the layouts vectorised; per-pool families enforced), then the dominated layouts
    dropped (:func:`undominated`; not with an input pipeline, where a slower step may be the one it keeps up
    with)."""
    psc = pool_scenario(sc, pool)
    grid = layout_grid(psc, pool.max_cards)
    n = len(grid["tp"])
    fixed = {**fixed_choices(psc), "nics_per_host": pool_nics(psc, pool.accelerator)}
    recomputes = psc.search.recompute
    steps = np.full((n * len(recomputes), len(shares)), np.inf)
    quantum = grid["dp"] * grid["micro_batch"]
    evaluated = 0
    for j, b in enumerate(shares):
        rows = np.flatnonzero(int(b) % quantum == 0)
        if not rows.size:
            continue
        s = at_share(psc, int(b))
        for k, rc in enumerate(recomputes):
            with np.errstate(divide="ignore", invalid="ignore"):  # the grid's own finish and cost are unused
                kw: dict[str, Any] = {"recompute": rc, **fixed, **{key: grid[key][rows] for key in LAYOUT_KEYS}}
                r = evaluate_arrays(per_pool(s), pool.accelerator, **kw)
            ok = np.ones(rows.size, dtype=bool)
            for name in POOL_FAMILIES:
                v, lim = r[("c", name)]
                ok &= np.asarray(v <= lim)
            steps[k * n + rows, j] = np.where(ok, r["step_s"], np.inf)
            evaluated += rows.size
    layouts: list[dict[str, Any]] = [{**{key: int(grid[key][i]) for key in LAYOUT_KEYS}, "recompute": rc}
               for rc in recomputes for i in range(n)]
    cards = np.array([lay["tp"] * lay["pp"] * lay["dp"] for lay in layouts])
    piped = bool(np.isfinite(np.asarray(T.input_supply(psc, pool.accelerator, cards), dtype=float)).any())
    # with an input pipeline a slower layout can be the one whose step the supply keeps up with: keep them all
    keep = [int(i) for i in np.flatnonzero(np.isfinite(steps).any(axis=1))] if piped else undominated(cards, steps)
    acc = psc.system(pool.accelerator).acc
    kept_cards = cards[keep]
    return PoolTable(pool=pool, sc=psc, layouts=[layouts[i] for i in keep], cards=kept_cards,
                     hosts=np.ceil(kept_cards / acc.cards_per_host).astype(int), steps=steps[keep],
                     supply=np.asarray(T.input_supply(psc, pool.accelerator, kept_cards), dtype=float) * np.ones(
                         len(keep)),
                     host_bw=acc.nic_bw * fixed["nics_per_host"], evaluated=evaluated)


def undominated(cards: np.ndarray[Any, Any], steps: np.ndarray[Any, Any]) -> list[int]:
    """Rows worth keeping: feasible somewhere, and not matched or beaten at every share by another row with
    the same card count (the earlier row kept on ties)."""
    keep: list[int] = []
    for n in np.unique(cards):
        rows = [int(i) for i in np.flatnonzero(cards == n) if np.isfinite(steps[i]).any()]
        mine: list[int] = []
        for i in rows:
            if any(np.all(steps[k] <= steps[i]) for k in mine):
                continue
            mine = [k for k in mine if not np.all(steps[i] <= steps[k])] + [i]
        keep += mine
    return sorted(keep)


@dataclass
class Pick:
    """One plan of the mixed space: a layout row per pool (None: the pool is left out) and the shares."""

    rows: tuple[int | None, ...]
    shares: tuple[int, ...]
    group_steps_s: tuple[float, ...]
    cross_s: float
    step_s: float
    overhead: float
    save_interval_s: float
    finish_s: float
    cost: float
    cards: tuple[int, ...]


@dataclass
class PoolsSolve:
    tables: list[PoolTable]
    best: Pick | None  # the cheapest plan over the whole space (mixed or one pool alone)
    mixed: Pick | None  # the cheapest plan that uses two pools or more
    alone: list[Pick | None]  # the cheapest plan of each pool alone
    fastest: list[Pick | None]  # each pool's fastest plan alone, the deadline and the budget aside
    plans: int  # plans the search formed: one-pool plans, then partial and complete plans over the pools
    wall_s: float
    objective: str = "cost"  # "cost" (ties: the earlier finish) or "finish" (ties: the lower cost)
    relaxations: list[dict[str, Any]] = field(default_factory=list)  # no plan: "pool availability" per rented pool
    staged: StagedPick | None = None  # form (b): the best pipeline with stages on two pools


def share_list(batch: int) -> np.ndarray[Any, Any]:
    """Every integer share 1..B a group may take."""
    return np.arange(1, batch + 1)


def _job(sc: Scenario, cards: np.ndarray[Any, Any], step: np.ndarray[Any, Any]
         ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Overhead, save interval and finish time of the mixed job at ``cards`` in all and ``step`` seconds."""
    tau0 = sc.search.save_interval_s[0]
    mode = sc.search.save_mode[0]
    tau = T.optimal_save_interval(sc, cards, mode) if tau0 == 0.0 else np.full(np.shape(cards), tau0)
    lo = T.overhead(sc, mode, cards, tau)
    finish = T.finish_time(sc, step, lo)
    return np.asarray(lo), np.asarray(tau), np.asarray(finish)


def pool_sigmas(sc: Scenario, pools: tuple[PM.Pool, ...], cards: np.ndarray[Any, Any]
                ) -> list[np.ndarray[Any, Any]]:
    """Each pool's step-time sigma (log-sd of measured / predicted step) from its card's evidence
    (:func:`tpopt.models.terms.step_sigma` on the pool's scenario) at the job's ``cards``."""
    return [np.broadcast_to(np.asarray(T.step_sigma(pool_scenario(sc, p), p.accelerator, cards)[0], dtype=float),
                            np.shape(cards)) for p in pools]


def chance_finish(sc: Scenario, pools: tuple[PM.Pool, ...], used: np.ndarray[Any, Any], cards: np.ndarray[Any, Any],
                  tau: np.ndarray[Any, Any], step: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Under a confidence ``q`` (``--confidence``): the q-quantile of each plan's finish
    (:func:`tpopt.models.terms.finish_quantile`) at the largest step sigma of the pools it uses (``used``:
    plans x pools; the mixed job is as uncertain as its least-evidenced card; for ``q > 0.5`` the quantile
    grows with sigma, so the largest is the conservative one)."""
    q = sc.task.confidence
    assert q is not None
    cards, tau, step = (np.asarray(x, dtype=float).reshape(-1) for x in (cards, tau, step))
    worst = worst_pool(sc, pools, used, cards)
    out = np.full(len(cards), np.inf)
    mode = sc.search.save_mode[0]
    for g, pool in enumerate(pools):
        at = np.flatnonzero((worst == g) & np.isfinite(step))
        if at.size:
            out[at] = T.finish_quantile(pool_scenario(sc, pool), pool.accelerator, mode, cards[at], tau[at],
                                        step[at], q)
    return out


def worst_pool(sc: Scenario, pools: tuple[PM.Pool, ...], used: np.ndarray[Any, Any], cards: np.ndarray[Any, Any]
               ) -> np.ndarray[Any, Any]:
    """Each plan's pool of the largest step sigma among those it uses (``used``: plans x pools)."""
    use = np.asarray(used, dtype=bool).reshape(len(cards), len(pools))
    sig = np.stack(pool_sigmas(sc, pools, cards), axis=1) if len(cards) else np.zeros((0, len(pools)))
    out: np.ndarray[Any, Any] = np.argmax(np.where(use, sig, -np.inf), axis=1) if len(cards) \
        else np.zeros(0, dtype=int)
    return out


CHANCE_MARGIN = 1e-7
"""Relative distance from the chance step limit beyond which :func:`chance_met` takes a plan's verdict from the
limit: a step that far below (above) it leaves the finish quantile below (above) the deadline by far more than the
quantile's own 2e-9 rounding (finish.ROOT_RTOL; the quantile's distance from the deadline is about the margin
times the training time)."""


def chance_met(sc: Scenario, pools: tuple[PM.Pool, ...], used: np.ndarray[Any, Any], cards: np.ndarray[Any, Any],
               tau: np.ndarray[Any, Any], step: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Whether each plan's finish quantile (:func:`chance_finish`) is within the deadline: decided by the chance
    step limit of its card count and interval (:func:`tpopt.models.terms.chance_step_max` at the same sigma and
    law, one root per (cards, interval) pair, remembered) where the step lies more than :data:`CHANCE_MARGIN` from
    it; the quantile itself only for the plans in the band around the limit."""
    deadline = F.limit(F.DEADLINE, sc)
    cards, tau, step = (np.asarray(x, dtype=float).reshape(-1) for x in (cards, tau, step))
    u = np.asarray(used, dtype=bool).reshape(len(cards), len(pools))
    worst = worst_pool(sc, pools, u, cards)
    out = np.zeros(len(cards), dtype=bool)
    mode = sc.search.save_mode[0]
    band = np.zeros(len(cards), dtype=bool)
    for g, pool in enumerate(pools):
        at = np.flatnonzero((worst == g) & np.isfinite(step))
        if at.size:
            lim = T.chance_step_max(pool_scenario(sc, pool), pool.accelerator, mode, cards[at], tau[at])
            sure = np.isfinite(lim) & (lim > 0)
            out[at] = sure & (step[at] <= lim * (1.0 - CHANCE_MARGIN))
            band[at] = ~sure | ((step[at] > lim * (1.0 - CHANCE_MARGIN)) & (step[at] < lim * (1.0 + CHANCE_MARGIN)))
    i = np.flatnonzero(band)
    if i.size:
        out[i] = chance_finish(sc, pools, u[i], cards[i], tau[i], step[i]) <= deadline
    return out


def deadline_ok(sc: Scenario, pools: tuple[PM.Pool, ...], used: np.ndarray[Any, Any], cards: np.ndarray[Any, Any],
                tau: np.ndarray[Any, Any], step: np.ndarray[Any, Any], finish: np.ndarray[Any, Any],
                ok: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``ok`` and the deadline met: the finish by the date, or under a confidence its quantile
    (:func:`chance_met`, decided only where ``ok`` still holds)."""
    deadline = F.limit(F.DEADLINE, sc)
    if sc.task.confidence is None:
        return np.asarray(ok & (finish <= deadline))
    ok = np.asarray(ok, dtype=bool).copy()
    flat = ok.reshape(-1)
    at = np.flatnonzero(flat)
    if at.size:
        u = np.asarray(used, dtype=bool).reshape(flat.size, len(pools))[at]
        flat[at] = chance_met(sc, pools, u, np.asarray(cards).reshape(-1)[at], np.asarray(tau).reshape(-1)[at],
                              np.asarray(step).reshape(-1)[at])
    return ok


def bound_deadline(sc: Scenario) -> float:
    """The deadline the search's bounds may prune with: the date, or none under a confidence (the quantile
    is checked on complete plans only)."""
    return F.limit(F.DEADLINE, sc) if sc.task.confidence is None else np.inf


def solve_pools(sc: Scenario, objective: str = "cost", relax: bool = True, staged: bool = True) -> PoolsSolve:
    """The cheapest (``objective = "cost"``, ties: earlier finish) or earliest (``"finish"``) plan over the
    pools, exactly (see the module), with each pool alone for the comparison; ``relax``: where no plan exists,
    the "pool availability" relaxation of each rented pool (:func:`relax_pool_availability`); ``staged``: form (b)
    too (:func:`solve_staged`)."""
    t0 = time.process_time()
    batch = sc.task.global_batch
    shares = share_list(batch)
    tables = [pool_table(sc, p, shares) for p in sc.pools]
    grad_bytes = param_count(sc.model) * sc.state_recipe().grads
    max_cost = F.limit(F.BUDGET, sc)
    plans = 0
    candidates: list[Pick] = []

    def consider(rows: tuple[int | None, ...], picks: tuple[np.ndarray[Any, Any], ...], share: tuple[int, ...],
                 limited: bool = True, objective: str = objective) -> None:
        """Score a block of plans (arrays over the used pools' rows), keep the best feasible one (``limited``
        False: the deadline and the budget not enforced)."""
        nonlocal plans
        used = [g for g, r in enumerate(rows) if r is not None]
        grids = np.meshgrid(*picks, indexing="ij")
        steps = [tables[g].steps[grids[i], share[g] - 1] for i, g in enumerate(used)]
        group = np.maximum.reduce(steps) if len(steps) > 1 else steps[0]
        cards = np.asarray(sum(tables[g].cards[grids[i]] for i, g in enumerate(used)))
        if len(used) > 1:
            hosts = [tables[g].hosts[grids[i]] for i, g in enumerate(used)]
            bw = min(tables[g].host_bw for g in used)
            cross = PM.cross_pool_bytes(grad_bytes, len(used)) / (np.minimum.reduce(hosts) * bw)
        else:
            cross = np.zeros(np.shape(group))
        step = group + cross
        lo, tau, finish = _job(sc, cards, step)
        rate = sum(tables[g].cards[grids[i]] * tables[g].pool.price_card_hour for i, g in enumerate(used))
        with np.errstate(invalid="ignore"):  # an infeasible row's inf finish at a 0 price
            cost = np.where(np.isfinite(finish), rate * finish / HOUR, np.inf)
        supply = sum(tables[g].supply[grids[i]] for i, g in enumerate(used))
        ok = np.isfinite(step) & (batch / step <= supply)
        if limited:
            mask = np.zeros((*np.shape(step), len(tables)), dtype=bool)
            mask[..., used] = True
            ok = deadline_ok(sc, sc.pools, mask, cards, tau, step, finish, ok & (cost <= max_cost))
        plans += int(np.size(step))
        if not ok.any():
            return
        first, second = (cost, finish) if objective == "cost" else (finish, cost)
        key = np.where(ok, first, np.inf)
        low = key.min()
        tie = ok & (key <= low * (1 + 1e-12))
        i = np.unravel_index(int(np.argmin(np.where(tie, second, np.inf))), np.shape(step))
        chosen = [int(grids[u][i]) for u in range(len(used))]
        full: list[int | None] = [None] * len(rows)
        for u, g in enumerate(used):
            full[g] = chosen[u]
        candidates.append(Pick(rows=tuple(full), shares=share,
                               group_steps_s=tuple(float(tables[g].steps[chosen[u], share[g] - 1]) if share[g] else 0.0
                                                   for u, g in enumerate(used)),
                               cross_s=float(cross[i]), step_s=float(step[i]), overhead=float(lo[i]),
                               save_interval_s=float(tau[i]), finish_s=float(finish[i]), cost=float(cost[i]),
                               cards=tuple(int(tables[g].cards[chosen[used.index(g)]]) if g in used else 0
                                           for g in range(len(rows)))))

    alone: list[Pick | None] = []
    fastest: list[Pick | None] = []  # each pool's fastest plan alone, deadline and budget aside
    for g, tab in enumerate(tables):
        before = len(candidates)
        rows_g = np.arange(len(tab.layouts))
        share = tuple(batch if h == g else 0 for h in range(len(tables)))
        alone_rows = tuple(0 if h == g else None for h in range(len(tables)))
        consider(alone_rows, (rows_g,), share)
        alone.append(_best(candidates[before:], objective))
        before = len(candidates)
        consider(alone_rows, (rows_g,), share, limited=False, objective="finish")
        fastest.append(_best(candidates[before:], "finish"))
        del candidates[before:]
    mixed: Pick | None = None
    if len(tables) > 1:
        beat = np.inf  # the best plan over fewer pools bounds the search over all of them
        if len(tables) > 2:
            for pair in itertools.combinations(range(len(tables)), 2):
                sub, formed = search_pools(sc, [tables[g] for g in pair], grad_bytes, objective)
                plans += formed
                got = mixed_pick(sc, [tables[g] for g in pair], sub, grad_bytes, objective)
                beat = min(beat, _key(got, objective)[0]) if got is not None else beat
        final, formed = search_pools(sc, tables, grad_bytes, objective, beat)
        plans += formed
        mixed = mixed_pick(sc, tables, final, grad_bytes, objective)
    best = _best([p for p in (*alone, mixed) if p is not None], objective)
    pipeline = solve_staged(sc, objective) if len(tables) > 1 and staged else None
    rels = [relax_pool_availability(sc, g, objective) for g, p in enumerate(sc.pools)
            if not p.owned] if best is None and pipeline is None and relax else []
    return PoolsSolve(tables=tables, best=best, mixed=mixed, alone=alone, fastest=fastest, plans=plans,
                      wall_s=time.process_time() - t0, objective=objective, relaxations=rels, staged=pipeline)


# ---------------------------------------------------------------------------------------------
# the search over k pools: (share, card count) options per pool, combined pool by pool


@dataclass
class Options:
    """One pool's choices: every (share, card count) its layouts admit, with the fastest layout of that card
    count at that share (another layout with the same cards at the same share is never better: the job's
    cards, hosts, bill and input supply are the same and its step no shorter; ties: the earlier row; with an
    input pipeline every layout is kept, a faster step possibly outrunning the supply). The first option,
    share 0 and 0 cards, leaves the pool out."""

    share: np.ndarray[Any, Any]
    cards: np.ndarray[Any, Any]
    hosts: np.ndarray[Any, Any]
    step: np.ndarray[Any, Any]
    supply: np.ndarray[Any, Any]
    row: np.ndarray[Any, Any]  # the layout (row of the pool's table); -1: the pool left out


def pool_options(tab: PoolTable, fastest: bool = True) -> Options:
    """The pool's :class:`Options` from its table (see there); ``fastest`` False keeps every layout at every
    share it admits (with an input pipeline, where a faster step can outrun the supply)."""
    if not len(tab.cards):
        z = np.zeros(1, dtype=int)
        return Options(share=z, cards=z, hosts=z, step=np.zeros(1), supply=np.zeros(1), row=np.full(1, -1))
    if not fastest:
        i, j = np.nonzero(np.isfinite(tab.steps))
        by = np.lexsort((i, j))  # by share, then row
        i, j = i[by], j[by]
        return Options(share=np.r_[0, j + 1], cards=np.r_[0, tab.cards[i]], hosts=np.r_[0, tab.hosts[i]],
                       step=np.r_[0.0, tab.steps[i, j]], supply=np.r_[0.0, tab.supply[i]], row=np.r_[-1, i])
    order = np.lexsort((np.arange(len(tab.cards)), tab.cards))  # rows by card count, stable
    cards = tab.cards[order]
    starts = np.flatnonzero(np.r_[True, cards[1:] != cards[:-1]])
    ends = np.r_[starts[1:], len(order)]
    steps = tab.steps[order]  # rows x shares
    arg = np.stack([order[lo + np.argmin(steps[lo:hi], axis=0)] for lo, hi in zip(starts, ends, strict=True)])
    best = np.take_along_axis(tab.steps, arg, axis=0)  # card counts x shares
    u, j = np.nonzero(np.isfinite(best))
    order = np.lexsort((u, j))  # by share, then card count
    u, j = u[order], j[order]
    rows = arg[u, j]
    return Options(share=np.r_[0, j + 1], cards=np.r_[0, tab.cards[rows]], hosts=np.r_[0, tab.hosts[rows]],
                   step=np.r_[0.0, best[u, j]], supply=np.r_[0.0, tab.supply[rows]], row=np.r_[-1, rows])


FIELDS = ("c", "t", "n", "r", "h", "bw", "p", "s", "rows", "shares", "cards")


@dataclass
class States:
    """Partial plans over the first pools, one per entry: the batch taken ``c``, the slowest group ``t``, the
    cards ``n``, the bill per hour ``r``, the fewest hosts ``h`` and the slowest per-host bandwidth ``bw`` of
    the pools used (inf: none yet), the pools used ``p``, the input supply ``s``; per pool so far, the option
    layout (``rows``, a row of its table; -1: left out), its share and its cards."""

    c: np.ndarray[Any, Any]
    t: np.ndarray[Any, Any]
    n: np.ndarray[Any, Any]
    r: np.ndarray[Any, Any]
    h: np.ndarray[Any, Any]
    bw: np.ndarray[Any, Any]
    p: np.ndarray[Any, Any]
    s: np.ndarray[Any, Any]
    rows: np.ndarray[Any, Any]
    shares: np.ndarray[Any, Any]
    cards: np.ndarray[Any, Any]

    @classmethod
    def start(cls) -> States:
        """The empty plan: no pool chosen yet."""
        z, one = np.zeros(1, dtype=int), np.full(1, np.inf)
        return cls(c=z, t=np.zeros(1), n=z, r=np.zeros(1), h=one, bw=one, p=z, s=np.zeros(1),
                   rows=np.zeros((1, 0), dtype=int), shares=np.zeros((1, 0), dtype=int),
                   cards=np.zeros((1, 0), dtype=int))

    def take(self, keep: np.ndarray[Any, Any]) -> States:
        return States(*(getattr(self, f)[keep] for f in FIELDS))


def extend(st: States, opt: Options, price: float, bw: float, last: bool, batch: int) -> States:
    """Every partial plan with every option of the next pool: the last pool takes what is left, ``B - c``
    (nothing when the batch is taken); another takes any share that fits, or none."""
    shares, first = np.unique(opt.share, return_index=True)  # the options are sorted by share
    ends = np.r_[first[1:], len(opt.share)]
    where = {int(s): np.arange(a, b) for s, a, b in zip(shares, first, ends, strict=True)}
    pairs: list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]] = []
    if last:
        for c in np.unique(st.c):
            ks = where.get(batch - int(c))
            if ks is not None:
                i = np.flatnonzero(st.c == c)
                pairs.append((np.repeat(i, ks.size), np.tile(ks, i.size)))
    else:
        for s, ks in where.items():
            i = np.flatnonzero(st.c + s <= batch)
            pairs.append((np.repeat(i, ks.size), np.tile(ks, i.size)))
    i = np.concatenate([a for a, _ in pairs]) if pairs else np.zeros(0, dtype=int)
    k = np.concatenate([b for _, b in pairs]) if pairs else np.zeros(0, dtype=int)
    used = opt.row[k] >= 0
    return States(c=st.c[i] + opt.share[k], t=np.maximum(st.t[i], opt.step[k]), n=st.n[i] + opt.cards[k],
                  r=st.r[i] + price * opt.cards[k], h=np.where(used, np.minimum(st.h[i], opt.hosts[k]), st.h[i]),
                  bw=np.where(used, np.minimum(st.bw[i], bw), st.bw[i]), p=st.p[i] + used,
                  s=st.s[i] + opt.supply[k], rows=np.column_stack([st.rows[i], opt.row[k]]),
                  shares=np.column_stack([st.shares[i], opt.share[k]]),
                  cards=np.column_stack([st.cards[i], opt.cards[k]]))


def cross_s(st: States, grad_bytes: float) -> np.ndarray[Any, Any]:
    """Each plan's cross-pool all-reduce (:func:`tpopt.models.pools.cross_pool_s` over the pools used). It only
    grows as pools are added (more pools in the ring, no more hosts, no faster fabric), so a partial plan's is
    a lower bound of its completions'."""
    ring = np.array([PM.cross_pool_bytes(grad_bytes, q) for q in range(int(st.p.max(initial=0)) + 1)])
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(st.p > 1, ring[st.p] / (st.h * st.bw), 0.0)


def least_overhead(sc: Scenario, most_cards: int) -> np.ndarray[Any, Any]:
    """``L_min(n) = min_{n <= m <= M} L(m)``: the least checkpoint and failure overhead a plan with ``n`` cards
    so far can end with (``M``: all the pools' cards; no monotonicity of ``L`` assumed)."""
    lo, _, _ = _job(sc, np.arange(most_cards + 1), np.ones(most_cards + 1))
    return np.minimum.accumulate(np.asarray(lo, dtype=float)[::-1])[::-1]


def bounds(st: States, sc: Scenario, grad_bytes: float, least: np.ndarray[Any, Any]
           ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Lower bounds of the finish and the bill of every completion of each partial plan: its step is at least
    ``t`` + the partial cross-pool time (:func:`cross_s`), its overhead at least ``L_min(n)``
    (:func:`least_overhead`), its bill at least ``r`` per hour."""
    step = st.t + cross_s(st, grad_bytes)
    finish = T.finish_time(sc, step, least[st.n])
    with np.errstate(invalid="ignore"):
        return finish, np.where(st.r > 0, st.r * finish / HOUR, 0.0)


def prune(st: States, sc: Scenario, grad_bytes: float, least: np.ndarray[Any, Any], fastest_split: bool,
          beat: tuple[str, float]) -> States:
    """Drop the partial plans no completion can make feasible or better than ``beat`` (the objective and the
    best value a plan of the space already reached: ``"cost"`` or ``"finish"``), then (``fastest_split``)
    keep one per batch taken and cards of each pool so far: the one with the fastest slowest group (ties: the
    lower shares in pool order). Exact: a bound (:func:`bounds`) past the deadline, the budget or ``beat``
    rules out every completion (``beat`` with a 1e-9 margin, so ties survive); and two partial plans with the
    same batch taken and the same cards per pool complete alike (same cards, hosts, fabric, bill and supply),
    the faster never worse. With an input pipeline a faster step can outrun the supply, so ``fastest_split``
    is off there."""
    finish, bill = bounds(st, sc, grad_bytes, least)
    reach = finish if beat[0] == "finish" else bill
    st = st.take(np.flatnonzero((finish <= bound_deadline(sc)) & (bill <= F.limit(F.BUDGET, sc))
                                & (reach <= beat[1] * (1 + 1e-9))))
    if not fastest_split or not st.c.size:
        return st
    order = np.lexsort((*st.shares.T[::-1], st.t, *st.cards.T[::-1], st.c))
    key = np.column_stack([st.c, st.cards])[order]
    first = np.r_[True, np.any(key[1:] != key[:-1], axis=1)]
    return st.take(order[first])


def viable(opt: Options, sc: Scenario, grad_bytes: float, least: np.ndarray[Any, Any], price: float, bw: float,
           beat: tuple[str, float]) -> Options:
    """The pool's options that can be part of a feasible plan better than ``beat`` (each option's own
    :func:`bounds` as a one-pool partial plan; leaving the pool out always can)."""
    used = opt.row >= 0
    one = States(c=opt.share, t=opt.step, n=opt.cards, r=price * opt.cards, h=np.where(used, opt.hosts, np.inf),
                 bw=np.where(used, bw, np.inf), p=used.astype(int), s=opt.supply, rows=opt.row[:, None],
                 shares=opt.share[:, None], cards=opt.cards[:, None])
    finish, bill = bounds(one, sc, grad_bytes, least)
    reach = finish if beat[0] == "finish" else bill
    keep = ~used | ((finish <= bound_deadline(sc)) & (bill <= F.limit(F.BUDGET, sc))
                    & (reach <= beat[1] * (1 + 1e-9)))
    return Options(*(getattr(opt, f)[keep] for f in ("share", "cards", "hosts", "step", "supply", "row")))


def search_pools(sc: Scenario, tables: list[PoolTable], grad_bytes: float, objective: str = "cost",
                 beat: float = np.inf) -> tuple[States, int]:
    """Every plan over the pools (each pool's share and card count, the batch whole), pool by pool with
    :func:`prune` after each; each pool's options that cannot be part of a feasible plan better than ``beat``
    dropped first (their one-pool bound). Returns the complete plans left and the count of partial plans
    formed."""
    batch = sc.task.global_batch
    fastest_split = all(np.isinf(t.supply).all() for t in tables)
    opts = [pool_options(t, fastest_split) for t in tables]
    least = least_overhead(sc, int(sum(int(o.cards.max()) for o in opts)))
    st, formed = States.start(), 0
    for g, (tab, opt) in enumerate(zip(tables, opts, strict=True)):
        opt = viable(opt, sc, grad_bytes, least, tab.pool.price_card_hour, tab.host_bw, (objective, beat))
        st = extend(st, opt, tab.pool.price_card_hour, tab.host_bw, g == len(tables) - 1, batch)
        formed += st.c.size
        st = prune(st, sc, grad_bytes, least, fastest_split, (objective, beat))
    return st, formed


def mixed_pick(sc: Scenario, tables: list[PoolTable], st: States, grad_bytes: float, objective: str) -> Pick | None:
    """The best complete plan using two pools or more that meets the job's limits (the input supply, the
    deadline, the budget): the least cost (within 1e-12, then the earliest finish) or the earliest finish
    (then the least cost); ties: the lower shares in pool order."""
    st = st.take(np.flatnonzero(st.p > 1))
    if not st.c.size:
        return None
    cross = cross_s(st, grad_bytes)
    step = st.t + cross
    lo, tau, finish = _job(sc, st.n, step)
    with np.errstate(invalid="ignore"):
        cost = np.where(np.isfinite(finish), st.r * finish / HOUR, np.inf)
        ok = np.isfinite(step) & (sc.task.global_batch / step <= st.s) & (cost <= F.limit(F.BUDGET, sc))
    ok = deadline_ok(sc, tuple(t.pool for t in tables), st.rows >= 0, st.n, tau, step, finish, ok)
    if not ok.any():
        return None
    first, second = (cost, finish) if objective == "cost" else (finish, cost)
    key = np.where(ok, first, np.inf)
    tie = np.flatnonzero(ok & (key <= key.min() * (1 + 1e-12)))
    i = int(tie[np.lexsort((*st.shares[tie].T[::-1], second[tie]))[0]])
    rows = tuple(int(r) if r >= 0 else None for r in st.rows[i])
    shares = tuple(int(x) for x in st.shares[i])
    return Pick(rows=rows, shares=shares,
                group_steps_s=tuple(float(tables[g].steps[r, shares[g] - 1]) for g, r in enumerate(rows)
                                    if r is not None),
                cross_s=float(cross[i]), step_s=float(step[i]), overhead=float(lo[i]),
                save_interval_s=float(tau[i]), finish_s=float(finish[i]), cost=float(cost[i]),
                cards=tuple(int(x) for x in st.cards[i]))


# ---------------------------------------------------------------------------------------------
# form (b): one pipeline whose stages lie on two pools

STAGE_FAMILIES = tuple(n for n in POOL_FAMILIES if n not in (F.WHOLE_HOSTS, F.CARDS))
"""Families each pool's stages meet in the staged form; its cards and whole hosts are checked on the pool's
own stages (``TP x s_g x DP``), not on the all-stage pipeline used to time them."""


@dataclass
class StagedPick:
    """A plan of form (b): pools ``pools`` (two) hold ``stages`` consecutive stages of one pipeline with
    ``layers`` layers per stage; one layout (TP, all stages, DP, micro-batch, ZeRO, recompute) for both."""

    pools: tuple[int, int]
    layout: dict[str, Any]
    stages: tuple[int, int]
    layers: tuple[int, int]
    stage_steps_s: tuple[float, float]  # each pool's pipeline step had every stage its layers
    memory_gib: tuple[float, float]
    boundary_s: float
    step_s: float
    overhead: float
    save_interval_s: float
    finish_s: float
    cost: float
    cards: tuple[int, ...]  # per pool of the scenario (0: not used)
    plans: int = 0


def staged_rows(sc: Scenario) -> dict[str, np.ndarray[Any, Any]]:
    """The layouts a staged pipeline may take at the global batch ``B``: TP and micro-batch from ``[search]``,
    every DP with ``B`` a multiple of ``micro_batch x DP``."""
    batch = sc.task.global_batch
    rows = [(tp, mb, dp) for tp, mb in itertools.product(sc.search.tp, sc.search.micro_batch)
            for dp in range(1, batch // mb + 1) if batch % (mb * dp) == 0]
    cols = np.array(rows, dtype=int).T
    return {"tp": cols[0], "micro_batch": cols[1], "dp": cols[2]}


def staged_times(sc: Scenario, pool: PM.Pool, stages: int, layers: int, recompute: str,
                 rows: dict[str, np.ndarray[Any, Any]]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """(step, memory per card) of every row on ``pool`` as a pipeline of ``stages`` stages of ``layers`` layers
    each (inf where a stage family fails): the model with ``stages x layers`` layers on the pool alone."""
    psc = pool_scenario(sc, pool)
    psc = replace(psc, model=replace(psc.model, layers=stages * layers))
    with np.errstate(divide="ignore", invalid="ignore"):  # the all-stage pipeline's own finish is unused
        r = evaluate_arrays(per_pool(psc), pool.accelerator, recompute=recompute, **fixed_choices(psc),
                            nics_per_host=pool_nics(psc, pool.accelerator), pp=stages,
                            zero_stage=psc.search.zero_stage[0], tp=rows["tp"], micro_batch=rows["micro_batch"],
                            dp=rows["dp"])
    ok = np.ones(rows["tp"].size, dtype=bool)
    for name in STAGE_FAMILIES:
        v, lim = r[("c", name)]
        ok &= np.asarray(v <= lim)
    return np.where(ok, r["step_s"], np.inf), np.asarray(r["memory_per_card"], dtype=float) * np.ones(ok.size)


def solve_staged(sc: Scenario, objective: str = "cost") -> StagedPick | None:
    """Form (b), exactly over its space: every pair of pools, every stage count ``S`` of ``[search].pp``
    (``S >= 2``), every split ``s_1 + s_2 = S`` (each pool at least one stage), every ``l_1`` with ``l_2 =
    (L - s_1 l_1) / s_2`` a positive integer (:func:`tpopt.models.pools.stage_layers`), every TP, micro-batch,
    recompute and DP (at the first ZeRO stage, schedule, offload and save mode). Each pool's cards ``TP x s_g x
    DP`` within its availability and whole hosts; the step :func:`tpopt.models.pools.staged_step_s`; the job as
    in form (a). The best (cost, ties: finish; or finish, ties: cost) meeting the job's limits. A layer count
    whose first-pool step alone exceeds ``(D - R) / iterations`` for every row is not timed on the second pool
    (the step is at least it and the overhead at least 0, so no such plan meets the date ``D``)."""
    se, batch, layers = sc.search, sc.task.global_batch, sc.model.layers
    rows = staged_rows(sc)
    tp, mb, dp = rows["tp"], rows["micro_batch"], rows["dp"]
    boundary = comm.pp_boundary_bytes(mb * sc.task.seq_len, sc.model.hidden, tp, sc.memory.activation_bytes)
    cache: dict[tuple[int, int, int, str], tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]] = {}

    def times(g: int, stages: int, per_stage: int, rc: str) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        key = (g, stages, per_stage, rc)
        if key not in cache:
            cache[key] = staged_times(sc, sc.pools[g], stages, per_stage, rc, rows)
        return cache[key]

    best: StagedPick | None = None
    plans = 0
    fastest = (bound_deadline(sc) - sc.task.reserved_s) / T.iteration_count(sc)  # the slowest step meeting the date
    for a, b in itertools.combinations(range(len(sc.pools)), 2):
        pa, pb = sc.pools[a], sc.pools[b]
        acc_a, acc_b = (pool_scenario(sc, p).system(p.accelerator).acc for p in (pa, pb))
        x = np.asarray(boundary, dtype=float) / min(acc_a.nic_bw, acc_b.nic_bw)  # PM.boundary_send_s per row
        for stages in sorted(s for s in set(se.pp) if s >= 2):
            for s_a in range(1, stages):
                split = (s_a, stages - s_a)
                ca, cb = tp * split[0] * dp, tp * split[1] * dp
                fits = ((ca <= pa.max_cards) & (ca % acc_a.cards_per_host == 0)
                        & (cb <= pb.max_cards) & (cb % acc_b.cards_per_host == 0))
                if not fits.any():
                    continue
                supply = (np.asarray(T.input_supply(pool_scenario(sc, pa), pa.accelerator, ca), dtype=float)
                          + np.asarray(T.input_supply(pool_scenario(sc, pb), pb.accelerator, cb), dtype=float))
                for l_a in range(1, layers):
                    l_b = PM.stage_layers(layers, split, l_a)
                    if l_b is None:
                        continue
                    for rc in se.recompute:
                        ta, ma = times(a, stages, l_a, rc)
                        if not (fits & (ta <= fastest)).any():  # no row of the first pool can meet the date
                            continue
                        tb, mbm = times(b, stages, l_b, rc)
                        step = np.maximum(ta, tb) + 2 * x
                        lo, tau, finish = _job(sc, ca + cb, step)
                        with np.errstate(invalid="ignore"):
                            cost = np.where(np.isfinite(finish), (pa.price_card_hour * ca + pb.price_card_hour * cb)
                                            * finish / HOUR, np.inf)
                            ok = fits & np.isfinite(step) & (batch / step <= supply) & (cost <= F.limit(F.BUDGET, sc))
                        pair = np.zeros((ok.size, len(sc.pools)), dtype=bool)
                        pair[:, [a, b]] = True
                        ok = deadline_ok(sc, sc.pools, pair, ca + cb, tau, step, finish, ok)
                        plans += int(ok.size)
                        if not ok.any():
                            continue
                        first, second = (cost, finish) if objective == "cost" else (finish, cost)
                        key = np.where(ok, first, np.inf)
                        tie = np.flatnonzero(ok & (key <= key.min() * (1 + 1e-12)))
                        i = int(tie[np.argmin(second[tie])])
                        if best is not None and _staged_key(best, objective) <= (float(first[i]), float(second[i])):
                            continue
                        cards = [0] * len(sc.pools)
                        cards[a], cards[b] = int(ca[i]), int(cb[i])
                        best = StagedPick(
                            pools=(a, b), stages=split, layers=(l_a, l_b),
                            layout={"tp": int(tp[i]), "pp": stages, "dp": int(dp[i]),
                                    "zero_stage": se.zero_stage[0], "micro_batch": int(mb[i]), "recompute": rc},
                            stage_steps_s=(float(ta[i]), float(tb[i])),
                            memory_gib=(float(ma[i]) / 2**30, float(mbm[i]) / 2**30), boundary_s=float(x[i]),
                            step_s=float(step[i]), overhead=float(lo[i]), save_interval_s=float(tau[i]),
                            finish_s=float(finish[i]), cost=float(cost[i]), cards=tuple(cards))
    if best is not None:
        best.plans = plans
    return best


def _staged_key(p: StagedPick, objective: str) -> tuple[float, float]:
    return (p.cost, p.finish_s) if objective == "cost" else (p.finish_s, p.cost)



# ---------------------------------------------------------------------------------------------
# relaxation: pool availability


def with_pool_cards(sc: Scenario, g: int, max_cards: int) -> Scenario:
    """The scenario with pool ``g`` offering ``max_cards`` cards."""
    pools = list(sc.pools)
    pools[g] = replace(pools[g], max_cards=max_cards)
    return replace(sc, pools=tuple(pools))


def useful_pool_cards(sc: Scenario) -> int:
    """Cards beyond which a pool admits no new plan: ``B x max TP x max PP``. A group's share is a multiple of
    ``micro_batch x DP`` and at most the global batch ``B``, so ``DP <= B`` and a group holds at most
    ``TP x PP x B`` cards."""
    return sc.task.global_batch * max(sc.search.tp) * max(sc.search.pp)


def smallest_feasible(lo: int, hi: int, found: T_Plan, plan_at: Callable[[int], T_Plan | None]
                      ) -> tuple[int, T_Plan]:
    """Bisection of a monotone feasibility: no plan at ``lo``, ``found`` at ``hi``; returns the smallest ``k``
    in ``(lo, hi]`` with a plan and that plan (``plan_at(k - 1)`` is None, by monotonicity and the search)."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        got = plan_at(mid)
        if got is None:
            lo = mid
        else:
            hi, found = mid, got
    return hi, found


def pool_card_counts(sc: Scenario, above: int, top: int) -> list[int]:
    """The card counts ``TP x PP x DP`` of ``[search]``'s layouts in ``(above, top]``, ascending: the pool's space
    at a cap ``m`` is the one at the largest such count ``<= m``."""
    return sorted({tp * pp * dp for tp in sc.search.tp for pp in sc.search.pp
                   for dp in range(above // (tp * pp) + 1, top // (tp * pp) + 1)})


def relax_pool_availability(sc: Scenario, g: int, objective: str = "cost") -> dict[str, Any]:
    """The smallest ``max_cards`` of pool ``g`` at which the pools question has a plan of form (a), everything else
    unchanged, found by exponential search then bisection over the card counts a layout can take
    (:func:`pool_card_counts`), verified by re-solve (the plan there, none one count below). Exact:
    the space at ``m`` cards is a subset of the space at ``m + 1`` (the pool's layouts with at most ``m``
    cards; no figure of a plan depends on the cap), so feasibility is monotone in ``m``; beyond
    :func:`useful_pool_cards` no plan is added, so no plan there means no availability helps."""
    pool = sc.pools[g]
    rel: dict[str, Any] = {"parameter": "pool availability", "pool": f"{pool.accelerator}, "
                           + ("owned" if pool.owned else "rented"), "current": pool.max_cards,
                           "unit": "cards", "required": None, "helps": False, "cost": None, "finish_days": None}

    def solved(m: int) -> PoolsSolve:  # form (a)'s space: the threshold is the data-parallel groups'
        return solve_pools(with_pool_cards(sc, g, m), objective, relax=False, staged=False)

    top = useful_pool_cards(sc)
    counts = pool_card_counts(sc, pool.max_cards, top)  # the space changes only at these caps
    lo, hi = -1, -1  # indices into counts: no plan at counts[lo] (the current cap), a plan at counts[hi]
    best: Pick | None = None
    step = 1
    while best is None and hi < len(counts) - 1:  # exponential search (the cheap solves first), then bisection
        lo, hi = hi, min(hi + step, len(counts) - 1)
        step *= 2
        best = solved(counts[hi]).best
    if best is None:
        rel["note"] = (f"no plan even with {max(top, pool.max_cards):,} cards (a group uses at most B x TP x PP "
                       "cards); the deadline, the budget or the other pool binds")
        return rel
    hi, best = smallest_feasible(lo, hi, best, lambda k: solved(counts[k]).best)
    assert best is not None  # smallest_feasible returns a plan
    hi = counts[hi]
    rel.update(required=hi, helps=True, cost=best.cost, finish_days=best.finish_s / DAY, cards=list(best.cards))
    return rel


def _key(p: Pick, objective: str) -> tuple[float, float]:
    """(cost, finish) or, for ``objective = "finish"``, (finish, cost)."""
    return (p.cost, p.finish_s) if objective == "cost" else (p.finish_s, p.cost)


def _best(picks: list[Pick], objective: str) -> Pick | None:
    """The cheapest (ties: earliest) pick, or the earliest (ties: cheapest) for ``objective = "finish"``."""
    return min(picks, key=lambda p: _key(p, objective)) if picks else None


# ---------------------------------------------------------------------------------------------
# report


def card_failure_rate(sc: Scenario, cards: int) -> float:
    """A pool's card failures per second (the job-wide events, counted once for the job, left out)."""
    return float(T.failure_rate(sc, cards) - T.failure_rate(sc, 0))


def pick_entry(ps: PoolsSolve, pick: Pick, sc: Scenario) -> dict[str, Any]:
    """One plan's figures: per pool its layout, share, group step, idle time, cards and bill; the job's step,
    cross-pool traffic, failure rate, finish and cost."""
    used = [g for g, r in enumerate(pick.rows) if r is not None]
    idle = PM.idle_s(pick.group_steps_s)
    grad_bytes = param_count(sc.model) * sc.state_recipe().grads
    pools = []
    for u, g in enumerate(used):
        tab = ps.tables[g]
        row = pick.rows[g]
        assert row is not None
        lay = {**tab.layouts[row]}
        with np.errstate(divide="ignore", invalid="ignore"):  # the group's own finish is not the job's
            r = evaluate_arrays(per_pool(at_share(tab.sc, pick.shares[g])), tab.pool.accelerator,
                                **fixed_choices(tab.sc), nics_per_host=pool_nics(tab.sc, tab.pool.accelerator), **lay)
        pools.append({"memory_per_card_gib": float(r["memory_per_card"]) / 2**30,
                      "usable_gib": tab.sc.system(tab.pool.accelerator).acc.memory_usable / 2**30,
                      "pool": tab.pool.label, "accelerator": tab.pool.accelerator, "owned": tab.pool.owned,
                      "layout": tab.layouts[row], "cards": pick.cards[g], "share": pick.shares[g],
                      "group_step_s": pick.group_steps_s[u], "idle_s": idle[u],
                      "failure_rate_per_h": card_failure_rate(tab.sc, pick.cards[g]) * HOUR,
                      "cost": PM.pool_cost(pick.cards[g], tab.pool.price_card_hour, pick.finish_s)})
    rates = [card_failure_rate(ps.tables[g].sc, pick.cards[g]) for g in used]
    return {"pools": pools, "step_s": pick.step_s, "cross_pool_s": pick.cross_s,
            "checkpoint_write_s": T.checkpoint_write_time(sc),
            "cross_pool_bytes": PM.cross_pool_bytes(grad_bytes, len(used)),
            "failure_rate_per_h": PM.mixed_failure_rate(rates, float(T.failure_rate(sc, 0))) * HOUR,
            "overhead": pick.overhead,
            "save_interval_s": pick.save_interval_s, "finish_days": pick.finish_s / DAY, "cost": pick.cost,
            **chance_entry(sc, [g for g, r in enumerate(pick.rows) if r is not None], sum(pick.cards),
                           pick.save_interval_s, pick.step_s)}


def chance_entry(sc: Scenario, used: list[int], cards: int, tau: float, step: float) -> dict[str, Any]:
    """Under a confidence: the finish quantile the deadline was checked with, the step sigma it used (the
    largest of the pools'), each used pool's sigma; nothing otherwise."""
    if sc.task.confidence is None:
        return {}
    mask = np.zeros((1, len(sc.pools)), dtype=bool)
    mask[0, used] = True
    n = np.array([float(cards)])
    fq = chance_finish(sc, sc.pools, mask, n, np.array([tau]), np.array([step]))
    sig = {sc.pools[g].accelerator: float(x[0]) for g, x in zip(used, pool_sigmas(sc, tuple(sc.pools[g] for g in used),
                                                                                 n), strict=True)}
    return {"confidence": sc.task.confidence, "finish_quantile_days": float(fq[0]) / DAY,
            "step_sigma": max(sig.values()), "pool_sigmas": sig}


def chance_text(e: dict[str, Any]) -> list[str]:
    """The confidence line of a plan's text (none without a confidence)."""
    if "confidence" not in e:
        return []
    each = ", ".join(f"{acc} {v:.3f}" for acc, v in e["pool_sigmas"].items())
    return [f"  confidence {level_text(e['confidence'])}: finish quantile {e['finish_quantile_days']:.2f} d at step "
            f"sigma {e['step_sigma']:.3f}, the largest of its pools' ({each})"]


def pools_footing(ps: PoolsSolve, pick: Pick, sc: Scenario) -> dict[str, Any]:
    """What a plan's figures stand on (:func:`tpopt.optimizer.footing.footing`): per pool it uses, the footing of
    its group (its layout on its cards at its share of the batch, its group step; the step-time model, stack,
    implied MFU, parameters by provenance, the pool's price and where it comes from, whether the card rests on
    priors, the group's own step-time sigma and memory margin), without a P(on time) of its own: the job has one
    finish. ``job``: the step-time sigma the job's finish carries, the largest of its pools' at the job's cards
    (the one :func:`chance_finish` checks the deadline with), the pool it is, and P(finish <= deadline) at it
    (the pool's finish law at the job's cards, save interval and step, as :func:`chance_finish` reads it)."""
    used = [g for g, r in enumerate(pick.rows) if r is not None]
    pools = []
    for u, g in enumerate(used):
        tab, row = ps.tables[g], pick.rows[g]
        assert row is not None
        lay = tab.layouts[row]
        plan = {"accelerator": tab.pool.accelerator, "cards": pick.cards[g], "cp": 1, "global_batch": pick.shares[g],
                **{k: lay[k] for k in LAYOUT_KEYS}}
        group = per_pool(at_share(tab.sc, pick.shares[g]))
        with np.errstate(divide="ignore", invalid="ignore"):  # the group's own finish is not the job's
            r = evaluate_arrays(group, tab.pool.accelerator, **fixed_choices(tab.sc),
                                nics_per_host=pool_nics(tab.sc, tab.pool.accelerator), **lay)
        f = footing(group, plan, pick.group_steps_s[u], float(r["memory_per_card"]))
        pools.append({"pool": tab.pool.label, **f,
                      "of": f"{tab.pool.accelerator}, {'owned' if tab.pool.owned else 'rented'} pool"})
    n = np.array([float(sum(pick.cards))])
    sig = [float(x[0]) for x in pool_sigmas(sc, tuple(sc.pools[g] for g in used), n)]
    worst = used[int(np.argmax(sig))]
    pool = sc.pools[worst]
    deadline = F.limit(F.DEADLINE, sc)
    p = None
    if np.isfinite(deadline):
        law = T.finish_law(pool_scenario(sc, pool), pool.accelerator, sc.search.save_mode[0], float(n[0]),
                           pick.save_interval_s, pick.step_s)
        p = float(law.cdf(deadline))
    return {"pools": pools, "job": {"sigma": max(sig), "pool": pool.label, "cards": int(n[0]), "p_on_time": p,
                                    "deadline_days": deadline / DAY if np.isfinite(deadline) else None}}


def pools_footing_lines(f: dict[str, Any], width: int) -> list[str]:
    """The footing as text: each pool's (:func:`tpopt.presentation.footing_lines`), then the job's sigma and
    P(on time)."""
    out: list[str] = []
    for e in f["pools"]:
        out += footing_lines(e, width)
    j = f["job"]
    p = f"; P(on time) {probability_text(j['p_on_time'])} at this sigma" if j["p_on_time"] is not None else ""
    return out + [f"Job: step-time sigma {j['sigma']:.3f}, the largest of its pools' ({j['pool']}, at the job's "
                  f"{j['cards']:,} cards){p}"]


def pools_dict(ps: PoolsSolve, sc: Scenario) -> dict[str, Any]:
    """The JSON report: status, the best, mixed and each pool's own plan (None where none is feasible), the
    comparison lines and the search's size."""
    def entry(pick: Pick | None) -> dict[str, Any] | None:
        return pick_entry(ps, pick, sc) if pick is not None else None

    return {"status": "optimal" if ps.best is not None else "infeasible", "objective": ps.objective,
            "best": entry(ps.best), "mixed": entry(ps.mixed),
            "alone": {t.pool.label: entry(a) for t, a in zip(ps.tables, ps.alone, strict=True)},
            "comparison": verdict(ps), "plans": ps.plans,
            **({"staged": staged_entry(ps, sc), "form": winning_form(ps)} if len(ps.tables) > 1 else {}),
            **({"relaxations": ps.relaxations} if ps.best is None else {}),
            "evaluations": sum(t.evaluated for t in ps.tables),
            "footing": None if ps.best is None else pools_footing(ps, ps.best, sc)}


def verdict(ps: PoolsSolve) -> list[str]:
    """Why the mixed plan wins or loses against each homogeneous plan (one line each)."""
    out = []
    m = ps.mixed
    for tab, a, f in zip(ps.tables, ps.alone, ps.fastest, strict=True):
        name = tab.pool.label
        why = (f"its fastest plan finishes in {f.finish_s / DAY:.2f} d for {f.cost:,.0f} USD" if f is not None
               else "no layout of it fits")
        if m is None:
            out.append(f"no plan uses {'both pools' if len(ps.tables) == 2 else 'two pools or more'}; {name} alone: "
                       + (f"{a.cost:,.0f} USD in {a.finish_s / DAY:.2f} d" if a else f"no plan meets the job's limits "
                          f"({why})"))
        elif a is None:
            out.append(f"mixed wins against {name} alone: no plan of that pool alone meets the job's limits "
                       f"({why}; deadline {F.limit(F.DEADLINE, tab.sc) / DAY:.2f} d)")
        elif _key(m, ps.objective) < _key(a, ps.objective):
            out.append(f"mixed wins against {name} alone: {m.cost:,.0f} vs {a.cost:,.0f} USD "
                       f"({m.finish_s / DAY:.2f} vs {a.finish_s / DAY:.2f} d)")
        else:
            out.append(f"mixed loses against {name} alone: {m.cost:,.0f} vs {a.cost:,.0f} USD "
                       f"({m.finish_s / DAY:.2f} vs {a.finish_s / DAY:.2f} d): that pool meets the job's limits "
                       f"alone; the best mixed plan ({' + '.join(str(c) for c in m.cards)} cards) runs a "
                       f"{m.cross_s:.2f} s cross-pool all-reduce a step with "
                       f"{max(PM.idle_s(m.group_steps_s)):.2f} s of idle time in its faster group")
    return out


def pools_text(ps: PoolsSolve, sc: Scenario, width: int = 100) -> str:
    """The plain-text report of a pools solve (the footing wrapped to ``width``)."""
    t = sc.task
    lines = [f"tpopt solve: {sc.name}: {sc.model.name}, {fmt_count(t.tokens)} tokens, deadline "
             f"{t.deadline_s / DAY:.1f} d (reserved {t.reserved_s / DAY:.1f} d)",
             f"Mixed-pool plan (data-parallel groups per accelerator type), {t.global_batch} sequences a step"]
    if ps.best is None:
        lines.append("no plan meets the deadline, the budget and the pools' availability")
        rl = scale_out_relaxation_lines(ps.relaxations)
        lines += [""] + rl if rl else []
    mixed_title = "mixed (every pool used)" if len(ps.tables) == 2 else "mixed (two pools or more)"
    for title, pick in [("best", ps.best), (mixed_title, ps.mixed),
                        *[(f"{t.pool.label} alone", a) for t, a in zip(ps.tables, ps.alone, strict=True)]]:
        if pick is None:
            lines.append(f"\n{title}: no feasible plan")
            continue
        e = pick_entry(ps, pick, sc)
        lines.append(f"\n{title}: {e['cost']:,.0f} USD, finish {e['finish_days']:.2f} d, step {e['step_s']:.3f} s "
                     f"(cross-pool all-reduce {e['cross_pool_s']:.3f} s, {e['cross_pool_bytes'] / 1e9:.1f} GB "
                     f"a step), {e['failure_rate_per_h']:.3f} interruptions/h, save every "
                     f"{e['save_interval_s']:,.0f} s ({e['checkpoint_write_s']:.0f} s write), overhead "
                     f"{e['overhead']:.2%}")
        for p in e["pools"]:
            lay = p["layout"]
            lines.append(f"  {p['pool']:<24} {p['cards']:>5} cards  TP {lay['tp']} PP {lay['pp']} DP {lay['dp']} "
                         f"ZeRO-{lay['zero_stage']} mb {lay['micro_batch']} recompute {lay['recompute']}  "
                         f"share {p['share']:>5}  group {p['group_step_s']:.3f} s  idle {p['idle_s']:.3f} s  "
                         f"{p['memory_per_card_gib']:.1f}/{p['usable_gib']:.1f} GiB  {p['cost']:,.0f} USD")
        lines += chance_text(e)
        if title == "best":
            lines += [""] + pools_footing_lines(pools_footing(ps, pick, sc), width)
    if len(ps.tables) > 1:
        lines += [""] + staged_lines(ps, sc)
    lines.append("")
    lines += verdict(ps)
    if len(ps.tables) > 1:
        lines.append(form_line(ps))
    staged = f", {ps.staged.plans:,} staged plans" if ps.staged is not None else ""
    lines.append(f"\n{ps.plans:,} plans compared, {sum(t.evaluated for t in ps.tables):,} group evaluations, "
                 f"{sum(len(t.layouts) for t in ps.tables)} layouts kept{staged}")
    return "\n".join(lines) + "\n"


STAGED_RESTRICTIONS = ("form (b) restrictions: two pools, one layout for every stage (TP, DP, micro-batch, ZeRO, "
                       "recompute); each pool's stages timed and their memory checked as a pipeline of all its stages "
                       "with its layer count (the heaviest stage's in-flight micro-batches, embedding and head: "
                       "conservative); the pool-boundary sends exposed on the fill and the drain only")


def staged_entry(ps: PoolsSolve, sc: Scenario) -> dict[str, Any] | None:
    """Form (b)'s plan as JSON (None: no staged plan meets the job's limits), with its restrictions."""
    p = ps.staged
    if p is None:
        return None
    return {"step_s": p.step_s, "boundary_send_s": p.boundary_s, "overhead": p.overhead,
            "failure_rate_per_h": float(T.failure_rate(sc, sum(p.cards))) * HOUR,
            "save_interval_s": p.save_interval_s, "finish_days": p.finish_s / DAY, "cost": p.cost,
            "layout": p.layout, "plans": p.plans, "restrictions": STAGED_RESTRICTIONS,
            **chance_entry(sc, list(p.pools), sum(p.cards), p.save_interval_s, p.step_s),
            "pools": [{"pool": sc.pools[g].label, "accelerator": sc.pools[g].accelerator, "cards": p.cards[g],
                       "stages": p.stages[u], "layers_per_stage": p.layers[u], "stage_pipeline_s": p.stage_steps_s[u],
                       "memory_per_card_gib": p.memory_gib[u],
                       "cost": PM.pool_cost(p.cards[g], sc.pools[g].price_card_hour, p.finish_s)}
                      for u, g in enumerate(p.pools)]}


def staged_lines(ps: PoolsSolve, sc: Scenario) -> list[str]:
    """Form (b)'s plan in the text report, with its restrictions."""
    p = ps.staged
    head = "form (b), one pipeline with stages on two pools"
    if p is None:
        return [f"{head}: no feasible plan", f"  ({STAGED_RESTRICTIONS})"]
    lay = p.layout
    out = [f"{head}: {p.cost:,.0f} USD, finish {p.finish_s / DAY:.2f} d, step {p.step_s:.3f} s (TP {lay['tp']} "
           f"PP {lay['pp']} DP {lay['dp']} ZeRO-{lay['zero_stage']} mb {lay['micro_batch']} recompute "
           f"{lay['recompute']}; pool-boundary send {p.boundary_s * 1e3:.2f} ms a micro-batch), "
           f"{float(T.failure_rate(sc, sum(p.cards))) * HOUR:.3f} interruptions/h, save every "
           f"{p.save_interval_s:,.0f} s, overhead {p.overhead:.2%}"]
    for u, g in enumerate(p.pools):
        pool = sc.pools[g]
        usable = pool_scenario(sc, pool).system(pool.accelerator).acc.memory_usable / 2**30
        stages = counted(p.stages[u], "stage")
        out.append(f"  {pool.label:<24} {p.cards[g]:>5} cards  {stages} x {p.layers[u]} layers  "
                   f"stage pipeline {p.stage_steps_s[u]:.3f} s  {p.memory_gib[u]:.1f}/{usable:.1f} GiB  "
                   f"{PM.pool_cost(p.cards[g], pool.price_card_hour, p.finish_s):,.0f} USD")
    entry = staged_entry(ps, sc)
    assert entry is not None
    return out + chance_text(entry) + [f"  ({STAGED_RESTRICTIONS})"]


def winning_form(ps: PoolsSolve) -> str | None:
    """"a" (data-parallel groups, or one pool alone), "b" (stages on two pools) or None (no plan)."""
    if ps.staged is None:
        return "a" if ps.best is not None else None
    if ps.best is None:
        return "b"
    return "b" if _staged_key(ps.staged, ps.objective) < _key(ps.best, ps.objective) else "a"


def form_line(ps: PoolsSolve) -> str:
    """Which form won and why: the two plans' bills, finishes, cards and steps side by side."""
    a, b = ps.best, ps.staged
    won = winning_form(ps)
    if won is None:
        return "decision: no plan of either form meets the job's limits"
    if b is None:
        return ("decision: form (a) (data-parallel groups per pool, or one pool alone); no staged plan meets the "
                "job's limits")
    stages = " + ".join(f"{b.stages[u]} x {b.layers[u]} layers on {ps.tables[g].pool.accelerator}"
                        for u, g in enumerate(b.pools))  # stages x layers per stage, per pool
    staged = (f"form (b) pipelines {stages} at DP {b.layout['dp']}: {sum(b.cards):,} cards, step {b.step_s:.3f} s, "
              f"{b.cost:,.0f} USD in {b.finish_s / DAY:.2f} d")
    if a is None:
        return f"decision: form (b); no plan of form (a) meets the job's limits; {staged}"
    groups = (f"form (a) {' + '.join(str(c) for c in a.cards)} cards, step {a.step_s:.3f} s, {a.cost:,.0f} USD in "
              f"{a.finish_s / DAY:.2f} d")
    win, lose = (a, b) if won == "a" else (b, a)
    prices = [t.pool.price_card_hour for t in ps.tables]

    def billed(p: Pick | StagedPick) -> float:  # USD per hour the plan's cards bill
        return sum(n * price for n, price in zip(p.cards, prices, strict=True))

    if ps.objective == "cost" and billed(win) != billed(lose):
        why = f"its cards bill {billed(win):,.0f} USD an hour against {billed(lose):,.0f}"
    else:
        why = f"a step of {win.step_s:.3f} s against {lose.step_s:.3f} s"
    return f"decision: form ({won}) wins ({why}): {groups}; {staged}"
