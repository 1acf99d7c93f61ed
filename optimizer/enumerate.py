"""Brute-force enumeration of the design space: the oracle for tests and the baseline for benchmarks.

Every point is evaluated in floating point with :func:`tpopt.models.evaluate.evaluate_arrays` (the
same code ``tpopt evaluate`` runs), vectorised with numpy over the numeric variables; categorical
variables are looped over. ``enumerate_best`` keeps the best ``top`` feasible points, ordered by the
lexicographic objective and then by enumeration order (deterministic). ``PointTable`` keeps every
point's objective and per-family satisfaction, so that report questions (what binds, why not fewer
cards) become array masks instead of new solves.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from tpopt.models.evaluate import evaluate_arrays
from tpopt.optimizer.result import Request
from tpopt.optimizer.space import CATEGORICAL, FAMILIES, NUMERIC, VARIABLES, VARS, Space, cards_of

NUMERIC_AXES = NUMERIC  # ("tp", "cp", "pp", "dp", "mb", "zero", "nics", "tau", "ep", "etp", "cap"); tp is chunked
CHUNK = 250_000  # points per evaluate_arrays call (bounds memory and the time between clock checks)
F32_MAX = float(np.finfo(np.float32).max)  # ratios beyond it are clipped (they only rank closeness)


GROUPED = tuple(v for v in CATEGORICAL if v != "schedule")  # categorical variables looped over (acc first)


def _groups(space: Space):
    """(categorical indices, pp indices) groups: every combination of the categorical variables, the
    schedule varying only when pp > 1 (its first value stands for pp = 1)."""
    d = space.domains
    pp_one = [i for i, p in enumerate(d["pp"]) if p == 1]
    pp_many = [i for i, p in enumerate(d["pp"]) if p > 1]
    for combo in itertools.product(*(range(len(d[k])) for k in GROUPED)):
        fixed = dict(zip(GROUPED, combo))
        if pp_one:
            yield dict(fixed, schedule=0), pp_one
        if pp_many:
            for si in range(len(d["schedule"])):
                yield dict(fixed, schedule=si), pp_many


def chunks(space: Space):
    """Yield (fixed categorical indices, numeric index lists, shape, evaluate_arrays result)."""
    sc = space.sc
    d = space.domains
    nic_ok = space.nic_allowed()
    field = {v.name: v.field for v in VARIABLES}
    typ = {v.name: v.type for v in VARIABLES}
    for fixed, pp_idx in _groups(space):
        ai = fixed["acc"]
        acc = d["acc"][ai]
        k_idx = [j for j in range(len(d["nics"])) if nic_ok[ai, j]]
        axes = {a: list(range(len(d[a]))) for a in NUMERIC_AXES}
        axes.update(pp=pp_idx, nics=k_idx)
        per_tp = int(np.prod([len(axes[a]) for a in NUMERIC_AXES[1:]]))
        step = max(1, CHUNK // max(per_tp, 1))
        cats = {field[v]: d[v][i] for v, i in fixed.items() if v != "acc"}
        for start in range(0, len(axes["tp"]), step):
            sub = dict(axes, tp=axes["tp"][start:start + step])
            idx_lists = [sub[a] for a in NUMERIC_AXES]
            vals = [np.asarray([d[a][i] for i in sub[a]], dtype=float) for a in NUMERIC_AXES]
            g = dict(zip(NUMERIC_AXES, np.ix_(*vals)))
            cards = cards_of(**g)
            nums = {field[a]: g[a].astype(typ[a]) for a in NUMERIC_AXES if a != "tau"}
            r = evaluate_arrays(sc, acc, save_interval_s=space.interval(g["tau"], cards, cats["save_mode"]),
                                **nums, **cats)
            shape = tuple(len(x) for x in idx_lists)
            yield dict(fixed), idx_lists, shape, r


def _ok(r, family, shape):
    v, lim = r[("c", family)]
    return np.broadcast_to(v <= lim, shape)


def enumerate_best(space: Space, req: Request):
    """Return (best assignments as index dicts, best-first; number of points evaluated; chunks).

    Stops between chunks when the request's clock (``req.clock``) runs out: the points kept are
    then the best of those evaluated, and ``evaluated < space.size()`` says the search is partial.
    """
    clock = req.clock
    total = space.size()
    enforced = [f for f in FAMILIES if f in req.enforced(FAMILIES)]
    keep_keys: list[tuple] = []
    keep_idx: list[dict] = []
    evaluated = n_chunks = order = 0
    K = max(1, req.top)
    for fixed, idx_lists, shape, r in chunks(space):
        feas = np.ones(shape, dtype=bool)
        for f in enforced:
            feas &= _ok(r, f, shape)
        if req.cards is not None:
            feas &= np.isin(np.broadcast_to(r["cards"], shape), list(req.cards))
        n = int(np.prod(shape))
        evaluated += n
        n_chunks += 1
        flat = np.flatnonzero(feas.reshape(-1))
        if flat.size:
            cost = np.broadcast_to(r["cost"], shape).reshape(-1)[flat]
            fin = np.broadcast_to(r["finish_s"], shape).reshape(-1)[flat]
            k1, k2 = (cost, fin) if req.objective == "cost" else (fin, cost)
            if flat.size > 4 * K:  # keep only candidates within the K-th smallest primary key (ties kept)
                cut = np.partition(k1, K - 1)[K - 1]
                near = k1 <= cut
                flat, k1, k2 = flat[near], k1[near], k2[near]
            ordr = order + flat
            for s in np.lexsort((ordr, k2, k1))[:K]:
                coords = np.unravel_index(flat[s], shape)
                idx = dict(fixed)
                idx.update({a: idx_lists[j][c] for j, (a, c) in enumerate(zip(NUMERIC_AXES, coords))})
                keep_keys.append((float(k1[s]), float(k2[s]), int(ordr[s])))
                keep_idx.append(idx)
            if len(keep_keys) > 4 * K:
                best = sorted(range(len(keep_keys)), key=lambda i: keep_keys[i])[:K]
                keep_keys = [keep_keys[i] for i in best]
                keep_idx = [keep_idx[i] for i in best]
        order += n
        if clock is not None:
            clock.report("enumerating plans", evaluated, total)
            if clock.expired("enumerating plans"):
                break
    best = sorted(range(len(keep_keys)), key=lambda i: keep_keys[i])[:K]
    return [keep_idx[i] for i in best], evaluated, n_chunks


@dataclass
class PointTable:
    """Every point of a space: assignment indices, cost, finish, cards and per-family satisfaction."""

    space: Space
    idx: dict  # var -> int array (index into the domain)
    cost: np.ndarray
    finish: np.ndarray
    cards: np.ndarray
    ok: dict  # family -> bool array
    ratio: dict  # family -> value / limit (float32; how far a point is from meeting the family)

    @classmethod
    def build(cls, space: Space) -> "PointTable":
        parts = {v: [] for v in VARS}
        cost, finish, cards = [], [], []
        ok = {f: [] for f in FAMILIES}
        ratio = {f: [] for f in FAMILIES}
        for fixed, idx_lists, shape, r in chunks(space):
            n = int(np.prod(shape))
            grids = np.meshgrid(*[np.asarray(x) for x in idx_lists], indexing="ij")
            for a, gi in zip(NUMERIC_AXES, grids):
                parts[a].append(gi.reshape(-1))
            for a, i in fixed.items():
                parts[a].append(np.full(n, i))
            cost.append(np.broadcast_to(r["cost"], shape).reshape(-1))
            finish.append(np.broadcast_to(r["finish_s"], shape).reshape(-1))
            cards.append(np.broadcast_to(r["cards"], shape).reshape(-1))
            for f in FAMILIES:
                ok[f].append(_ok(r, f, shape).reshape(-1))
                v, lim = (np.broadcast_to(x, shape).reshape(-1) for x in r[("c", f)])
                with np.errstate(divide="ignore", invalid="ignore"):
                    q = np.where(np.isinf(lim), 0.0, np.where(lim > 0, v / np.where(lim > 0, lim, 1.0), v))
                ratio[f].append(np.clip(q, -F32_MAX, F32_MAX).astype(np.float32))
        cat = lambda xs, dt=None: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dtype=dt)
        return cls(space=space, idx={v: cat(parts[v], np.int32) for v in VARS}, cost=cat(cost, float),
                   finish=cat(finish, float), cards=cat(cards, float), ok={f: cat(ok[f], bool) for f in FAMILIES},
                   ratio={f: cat(ratio[f], np.float32) for f in FAMILIES})

    def mask(self, enforced=FAMILIES, restrict: dict | None = None, cards=None) -> np.ndarray:
        m = np.ones(self.cost.shape, dtype=bool)
        for f in enforced:
            m &= self.ok[f]
        for v, allowed in (restrict or {}).items():
            dom = self.space.domains[v]
            m &= np.isin(self.idx[v], [i for i, x in enumerate(dom) if x in set(allowed)])
        if cards is not None:
            m &= np.isin(self.cards, list(cards))
        return m

    def closest(self, mask: np.ndarray, family: str) -> dict | None:
        """The point within ``mask`` nearest to meeting ``family`` (least value / limit; first on ties)."""
        sel = np.flatnonzero(mask)
        if not sel.size:
            return None
        i = sel[np.lexsort((sel, self.cost[sel], self.ratio[family][sel]))[0]]
        return {v: int(self.idx[v][i]) for v in VARS}

    def best(self, mask: np.ndarray, objective: str = "cost", top: int = 1) -> list[dict]:
        sel = np.flatnonzero(mask)
        if not sel.size:
            return []
        k1, k2 = (self.cost, self.finish) if objective == "cost" else (self.finish, self.cost)
        order = sel[np.lexsort((sel, k2[sel], k1[sel]))][:top]
        return [{v: int(self.idx[v][i]) for v in VARS} for i in order]
