"""Logic-based Benders decomposition over the core layout, for design spaces too large to encode whole.

Master problem (the backend's own): choose a layout h = (accelerator, tp, pp, dp, micro-batch). It
carries every constraint family that depends on the layout alone, exactly (batch divisibility, whole
hosts, TP inside a host, heads, layers, max cards), and valid relaxations of the others: for each
layout, each term's minimum (or maximum) over the remaining choices bounds memory, busy time, finish
time and cost, so the master's objective theta >= bound[h] never exceeds the true optimum of h. The
most coupled remaining choices (recompute, ZeRO, EP, capacity, ...) are kept jointly with the layout
while the bounds are built, and the combinations no plan can make feasible are left out of a
layout's bound (:class:`LayoutBounds`): a MoE layout whose cheapest expert choices drop too many
tokens, or a layout that only fits with full recompute, is then ranked by what it can really run.

Subproblem: the remaining choices of one layout (ZeRO stage, offload, recompute, schedule, NICs,
save interval and mode) solved exactly with the evaluator, vectorised over that small space.

Cuts: an evaluated layout is fully known, so it is removed from the master (a no-good). The loop
stops when the master's bound exceeds the K-th best verified plan or no layout remains: the result
is the exact optimum, as the property tests check against plain enumeration. A subproblem's plan is
evaluated in full (:func:`tpopt.models.evaluate.evaluate`) only when it can enter the K best.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Collection
from typing import Any, cast

import numpy as np
from numpy.typing import ArrayLike, NDArray

from tpopt.models import families as F
from tpopt.models import terms as T
from tpopt.models import variables as V
from tpopt.models.evaluate import Evaluation, evaluate
from tpopt.models.plan import Scenario
from tpopt.optimizer.backends.protocol import CandidateResult, MasterOf, SolverFailure, relative_gap, solver_stopped
from tpopt.optimizer.enumerate import layout_best
from tpopt.optimizer.limits import clock_of
from tpopt.optimizer.result import Request, Status, objective_key
from tpopt.optimizer.space import BUSY_TERMS as BUSY
from tpopt.optimizer.space import (
    CHANCE_TABLE,
    LAYOUT,
    Domains,
    Reducer,
    Space,
    cards_of,
    chance_on,
    reduce_axes,
    reduce_to,
)

HUB = LAYOUT
HUB_RULES = F.HUB_RULES
KEY_RTOL = 1e-9
"""A subproblem's plan is evaluated in full only when its key from the tables is within this relative
margin of the K-th best verified plan (the tables and the evaluator agree to rounding, far inside it)."""


def _reduced(space: Space, name: str, fn: Reducer, values: NDArray[Any] | None = None,
             target: tuple[str, ...] = HUB) -> NDArray[Any]:
    """A table reduced over its variables outside ``target`` (ignoring non-finite entries), on the
    joint grid of ``target`` (:func:`~tpopt.optimizer.space.reduce_to`), with size-1 axes for the target
    variables it does not have (it broadcasts). Minima come from lower-bound tables, maxima from upper-bound
    tables (:meth:`Space.bound_table`: closed-form bounds of the pipeline terms on large spaces, the
    exact tables otherwise)."""
    # kept only where a caller asked for it (explain sets ``space.__dict__["_reduced"] = {}``: many questions
    # on one space); the table name first, so that Space.sharing keeps the entries of the tables it keeps
    cache: dict[tuple[Any, ...], NDArray[Any]] | None = space.__dict__.get("_reduced")
    key = (name, fn.__name__, target)
    if cache is not None and values is None and key in cache:
        return cache[key]
    t = space.bound_table(name, "lo" if fn is np.min else "hi")
    out = reduced_values(t.values if values is None else values, t.vars, space.domains, fn, target)
    if cache is not None and values is None:
        out.flags.writeable = False  # shared by every question asked of the space
        cache[key] = out
    return out


def reduced_values(values: NDArray[Any], vars: tuple[str, ...], domains: Domains, fn: Reducer,
                   target: tuple[str, ...] = HUB) -> NDArray[Any]:
    """:func:`_reduced` of a table's ``values`` over ``vars`` on ``domains`` (a space's, or a layout group's: the
    reduction of a slice of a table is the whole reduction's slice, entry for entry)."""
    vals, dom = _unbroadcast(values, vars, domains)
    # floats reduced as they are, again only where a non-finite entry shows (to leave out); integers become floats
    plain = vals.dtype.kind in "bf"
    out = reduce_to(dom, vals, vars, target, fn, broadcast=False) if plain else vals
    if vals.dtype != bool and (not plain or not _unaffected(out, fn)):
        vals = np.where(np.isfinite(vals), vals, np.inf if fn is np.min else -np.inf)
        out = reduce_to(dom, vals, vars, target, fn, broadcast=False)
    if dom is not domains:  # the axes the table was broadcast along, broadcast again (a read-only view)
        out = np.broadcast_to(out, [len(domains[v]) if v in vars else 1 for v in target])
    return out


def _unaffected(reduced: NDArray[Any], fn: Reducer) -> bool:
    """Whether a table's plain minimum (``fn`` np.min) or maximum (np.max) ``reduced`` equals the one that leaves
    its non-finite entries out (:func:`_reduced`): a minimum propagates NaN and -inf and stays +inf only where every
    entry is +inf (left out: +inf too), so one without NaN or -inf is the same; a maximum likewise without NaN or
    +inf. A table with such entries (a pipeline shape a schedule cannot run: +inf) is reduced again."""
    if fn is np.min:
        return not bool(np.any(np.isnan(reduced) | np.isneginf(reduced)))
    return not bool(np.any(np.isnan(reduced) | np.isposinf(reduced)))


def _unbroadcast(vals: NDArray[Any], vars: tuple[str, ...], domains: Domains) -> tuple[NDArray[Any], Domains]:
    """A table's values without the axes it is broadcast along (stride 0: every entry along one equal, as a dense
    model's ``time.ep_comm``, one zero laid out on its grid), each kept as one entry, and the domains with those
    variables cut to their first value: a minimum or maximum over such an axis is that entry, so reducing these
    gives the same values as reducing the whole table (then broadcast back), without laying it out first."""
    flat = [i for i, (n, st) in enumerate(zip(vals.shape, vals.strides, strict=True)) if n > 1 and st == 0]
    if not flat:
        return vals, domains
    vals = vals[tuple(slice(0, 1) if i in flat else slice(None) for i in range(vals.ndim))]
    return vals, {**domains, **{vars[i]: domains[vars[i]][:1] for i in flat}}


def _reduce_to_hub(space: Space, name: str, fn: Reducer, values: NDArray[Any] | None = None) -> NDArray[Any]:
    """:func:`_reduced` on the layout grid, flattened (one entry per layout)."""
    return np.broadcast_to(_reduced(space, name, fn, values), tuple(len(space.domains[v]) for v in HUB)).reshape(-1)


def _largest(values: list[NDArray[Any]]) -> NDArray[Any]:
    """Elementwise maximum of arrays that broadcast together (size-1 axes kept where all have them)."""
    best = values[0]
    for v in values[1:]:
        best = np.maximum(best, v)
    return best


COUPLING = V.COUPLING  # (recompute, zero, ep, cap, offload, etp, sp, schedule, nics): Variable.coupling
"""Extras kept jointly with the layout in the solve's bounds, most strongly coupled first: recompute,
ZeRO, offload and the expert choices trade memory against time, the capacity factor decides drops."""
COUPLING_CELLS = 200_000
"""Largest layouts x coupled-choices grid the bounds are built on (each term reduced onto it once)."""


def coupling_vars(space: Space, n_layouts: int) -> tuple[str, ...]:
    """The extras the bounds keep jointly with the layout: those with a choice, in :data:`COUPLING`
    order, while layouts x their combinations stay within :data:`COUPLING_CELLS`."""
    out: list[str] = []
    cells = n_layouts
    for v in COUPLING:
        k = len(space.domains.get(v, ()))
        if k > 1 and cells * k <= COUPLING_CELLS:
            out.append(v)
            cells *= k
    return tuple(out)


class LayoutBounds:
    """Per-layout valid bounds of the extras-dependent quantities.

    Without ``enforced``, each quantity's bound is the sum of each term's extreme over the remaining
    choices, valid whatever families a question enforces (the report's oracle drops some). With the
    solve's ``enforced`` families, the bounds keep the most coupled choices c (:func:`coupling_vars`)
    jointly with the layout h: memory, busy time, finish and cost are bounded on (h, c), the pairs
    that no plan can make meet an enforced family (memory per card, the single-table rules, input,
    deadline, budget) are dropped, and a layout's objective bound is the least over its remaining c
    (infinite when none remains): min over feasible (c, x) of f >= min over feasible c of
    sum of min over x. That is what makes a layout whose cheap choices do not fit in memory (or drop
    too many tokens) rank by the choices that do.
    """

    def __init__(self, space: Space, objective: str, enforced: Collection[str] | None = None,
                 coupled: tuple[str, ...] | None = None) -> None:
        """``coupled``: the extras kept with the layout (default :func:`coupling_vars`; only with ``enforced``)."""
        sc = self.sc = space.sc
        dom = space.domains
        self.sizes = [len(dom[v]) for v in HUB]
        self.n = int(np.prod(self.sizes))
        grid = np.indices(self.sizes).reshape(len(HUB), -1)
        self.coords = {v: grid[i] for i, v in enumerate(HUB)}
        vals = {v: np.asarray(dom[v])[self.coords[v]] for v in HUB}
        self.cards = cards_of(**vals)
        self.usable = space.usable()[self.coords["acc"]]
        self.coupled = () if enforced is None else coupling_vars(space, self.n) if coupled is None else coupled
        target = HUB + self.coupled

        def red(name: str, fn: Reducer, values: NDArray[Any] | None = None) -> NDArray[Any]:
            return _reduced(space, name, fn, values, target)

        # sums of the (non-empty) term lists: arrays, never sum()'s start 0
        busy_min = cast(NDArray[Any], sum(red(n, np.min) for n in BUSY))
        need = red("input.min_busy", np.max)
        need = np.where(np.isfinite(need), need, 0.0)
        # the input check needs the upper bound of busy time only where input can stall a step
        busy_max = cast(NDArray[Any], sum(red(n, np.max) for n in BUSY)) if np.any(need > 0) else \
            np.full(need.shape, np.inf)
        # memory: per stage class the sum of each term's minimum, the largest class bounding the rank's peak
        mem_min = _largest([cast(NDArray[Any], sum(red(n, np.min) for n in names))
                            for _, names in space.memory_classes()])
        l_min = red("overhead", np.min)
        nic_ok = space.nic_allowed()  # (acc, nics)
        rate = space.tables["rate"]  # (acc, card factors..., nics)
        shape = [1] * rate.values.ndim
        shape[rate.vars.index("acc")], shape[rate.vars.index("nics")] = nic_ok.shape
        masked = np.where(nic_ok.reshape(shape), rate.values, np.inf)
        rate_min = red("rate", np.min, masked)
        wait = sc.input.wait_s
        with np.errstate(over="ignore", invalid="ignore"):  # inf: every plan of the layout infinitely late
            finish_min: NDArray[Any] = T.finish_time(sc, busy_min + wait, l_min)
            cost_min: NDArray[Any] = rate_min * finish_min
        if chance_on(sc):  # the chance form: the least step against the largest step the confidence allows
            step_max = red(CHANCE_TABLE, np.max)
            with np.errstate(divide="ignore", invalid="ignore"):  # a chance-equivalent finish, R + (D - R) s / s_max
                room = F.limit(F.DEADLINE, sc) - sc.task.reserved_s
                chance_finish = sc.task.reserved_s + room * (busy_min + wait) / np.where(step_max > 0, step_max, np.nan)
            due_min: NDArray[Any] = np.where(np.isfinite(chance_finish), chance_finish, np.inf)
        else:
            due_min = finish_min
        full = tuple(len(dom[v]) for v in target)

        def on_grid(x: ArrayLike) -> NDArray[Any]:
            return np.broadcast_to(x, full).reshape((self.n,) + full[len(HUB):])

        due_min = on_grid(due_min)  # what the deadline family compares with the deadline (chance form: see above)
        finish_min, cost_min, busy_max, need, mem_min = (on_grid(x) for x in (finish_min, cost_min, busy_max,
                                                                              need, mem_min))
        self.grids: dict[str, NDArray[Any]] = {}
        self.enforced = frozenset(enforced or ())
        if self.coupled:
            enforced = set(cast(Collection[str], enforced))  # coupled choices only with enforced families
            # the (h, c) bounds and the single-table rules on the (h, c) grid, kept: :meth:`under` reduces them
            # for another set of enforced families
            self.grids = {"finish": finish_min, "due": due_min, "cost": cost_min, "busy_max": busy_max,
                          "need": need, "mem": mem_min}
            self.grids |= {F.ok_table(f): on_grid(red(F.ok_table(f), np.max)) for f in sorted(enforced)
                           if f not in HUB_RULES and f in F.TABLED}
            if "nics" in self.coupled:
                on = [1] * (1 + len(self.coupled))
                on[0], on[1 + self.coupled.index("nics")] = self.n, len(dom["nics"])
                self.grids["nics"] = nic_ok[self.coords["acc"]].reshape(on)
            finish_min, due_min, cost_min, busy_max, need, mem_min = self._reduce(enforced)
        self.finish_min, self.cost_min, self.busy_max, self.input_need, self.mem_min = (
            finish_min, cost_min, busy_max, need, mem_min)
        self.objective_min = self.cost_min if objective == "cost" else self.finish_min
        # layout-only rules, decided exactly
        self.chance = chance_on(sc)
        self.due_min, self.deadline = due_min, F.limit(F.DEADLINE, sc)
        self.rules = {f: _reduce_to_hub(space, F.ok_table(f), np.max) > 0.5 for f in HUB_RULES}

    def _reduce(self, enforced: Collection[str], rows: NDArray[np.intp] | None = None) -> tuple[NDArray[Any], ...]:
        """(finish, due, cost, busy max, input need, memory) per layout (those of ``rows``, default all) from the
        (h, c) grids: the pairs no plan can make meet an ``enforced`` family dropped, the least over the rest."""
        g, sc = self.grids, self.sc
        at = (slice(None),) if rows is None else (rows,)
        grid = {k: v[at] for k, v in g.items()}
        lim = (slice(None),) + (None,) * len(self.coupled)  # a per-layout array against (h, c)
        ok = np.ones(grid["cost"].shape, dtype=bool)
        if F.MEMORY_PER_CARD in enforced:
            ok &= grid["mem"] <= self.usable[at][lim]
        if F.INPUT_THROUGHPUT in enforced:
            ok &= grid["busy_max"] >= grid["need"]
        if F.DEADLINE in enforced:
            ok &= grid["due"] <= F.limit(F.DEADLINE, sc)
        if F.BUDGET in enforced and sc.cost.max_cost is not None:
            ok &= grid["cost"] <= F.limit(F.BUDGET, sc)
        for f in sorted(enforced):
            if F.ok_table(f) in grid:
                ok &= grid[F.ok_table(f)]
        if "nics" in grid:
            ok &= grid["nics"]
        c_axes = tuple(range(1, 1 + len(self.coupled)))
        # reduce_axes: numpy reduces a short last axis one tiny reduction per layout (the nine-accelerator GPT-3
        # space's 69,120 x 2 grids: 1.8 ms a reduction, 0.05 ms so); the same minima and maxima
        least = [reduce_axes(np.where(ok, grid[k], np.inf), c_axes, np.min) for k in ("finish", "due", "cost")]
        return (*least, reduce_axes(grid["busy_max"], c_axes, np.max), reduce_axes(grid["need"], c_axes, np.max),
                reduce_axes(grid["mem"], c_axes, np.min))

    def under(self, enforced: Collection[str]) -> LayoutBounds:
        """The bounds of a question that enforces only ``enforced`` (a subset of the families these bounds were
        built with): the coupled grids reduced again, the same object's other fields (shared); without coupled
        choices the bounds themselves (they hold whatever is enforced)."""
        if not self.coupled:
            return self
        out = copy.copy(self)
        out.finish_min, out.due_min, out.cost_min, out.busy_max, out.input_need, out.mem_min = \
            self._reduce(set(enforced))
        out.objective_min = out.cost_min if self.objective_min is self.cost_min else out.finish_min
        return out

    def allowed(self, enforced: Collection[str], max_cards: float, deadline: float, max_cost: float | None
                ) -> dict[str, NDArray[np.bool_]]:
        """Per family, the layouts its (relaxed) condition allows."""
        ok = {f: self.rules[f] for f in HUB_RULES if f in enforced}
        if F.CARDS in enforced:
            ok[F.CARDS] = self.cards <= max_cards
        if F.MEMORY_PER_CARD in enforced:
            ok[F.MEMORY_PER_CARD] = self.mem_min <= self.usable
        if F.DEADLINE in enforced and not self.chance:
            ok[F.DEADLINE] = self.finish_min <= deadline
        elif F.DEADLINE in enforced and deadline == self.deadline:  # the chance form at the scenario's deadline
            ok[F.DEADLINE] = self.due_min <= deadline
        if F.INPUT_THROUGHPUT in enforced:
            ok[F.INPUT_THROUGHPUT] = self.busy_max >= self.input_need
        if F.BUDGET in enforced and max_cost is not None:
            ok[F.BUDGET] = self.cost_min <= max_cost
        return ok

    def allowed_in(self, enforced: Collection[str], sc: Scenario) -> dict[str, NDArray[np.bool_]]:
        """:meth:`allowed` under the limits of ``sc`` (the card cap, the deadline, the budget)."""
        return self.allowed(enforced, F.limit(F.CARDS, sc), F.limit(F.DEADLINE, sc), sc.cost.max_cost)


def solve_decomposed(space: Space, master_of: MasterOf, backend: str, req: Request, enforced: Collection[str],
                     proof: dict[str, float] | None = None) -> tuple[list[Evaluation], Status, int, int, float | None]:
    """Benders loop; returns (evaluations best first, status, rounds, evaluated points, gap).

    Stops when the shared clock runs out (status feasible or unknown; the gap compares the K-th
    best verified plan with the master's last proven bound, the least bound of the layouts left).
    Raises :class:`~tpopt.optimizer.backends.protocol.SolverFailure` when the master fails for another reason.
    ``master_of(name, space, bounds, allowed, req)`` is the backend's master problem
    (:meth:`tpopt.optimizer.backends.protocol.Backend.master`). ``proof``, if given, gets the ``certificate``: the least
    bound of the allowed layouts never evaluated (inf when none is left), the bound that closed the gap.
    """
    sc = space.sc
    clock = clock_of(req)
    with clock.stoppable("building the layout decomposition"):  # nothing to return yet: stops at a checkpoint
        bounds = LayoutBounds(space, req.objective, enforced)
        allowed = bounds.allowed_in(enforced, sc)
        if req.cards is not None:
            allowed["cards"] = np.isin(bounds.cards, list(req.cards))
        master = master_of(backend, space, bounds, allowed, req)
    K = max(1, req.top)
    best: list[tuple[tuple[float, float], Evaluation]] = []
    rounds = evaluated = 0
    done: list[int] = []  # layouts evaluated (excluded from the master)
    lower: float | None = None  # least master bound over the layouts not yet evaluated
    phase = "solving the layout decomposition"
    status: Status | None = None
    while status is None:
        rounds += 1
        bound = best[K - 1][0][0] if len(best) >= K else None
        if clock.expired(phase):
            break
        st, h = master.solve(bound, clock.remaining(0.01))
        clock.report(phase, rounds, best=best[0][0][0] if best else None, bound=lower, objective=req.objective)
        if st == "infeasible":
            status = Status.OPTIMAL if best else Status.INFEASIBLE
            break
        if st == "error":
            raise SolverFailure(f"master problem: {h}")
        if st == "limit":
            solver_stopped(clock, CandidateResult("limit"), phase)
            break
        h = cast(int, h)  # "candidate" or "feasible": a layout index
        if st == "candidate":
            lower = float(bounds.objective_min[h])
        master.exclude(h)
        done.append(h)
        layout = tuple(int(bounds.coords[v][h]) for v in HUB)
        sub_req = Request(objective=req.objective, enforce=frozenset(enforced), top=K, cards=req.cards, clock=clock)
        found, n = layout_best(space, layout, sub_req)
        evaluated += n
        for key, a in found:
            if len(best) >= K and key[0] > best[K - 1][0][0] * (1 + KEY_RTOL):
                break  # no better than the K-th best verified plan (found is best first): skip the evaluation
            ev = evaluate(sc, space.plan(a))
            best.append((objective_key(ev, req.objective), ev))
        best.sort(key=lambda kv: kv[0])
        best = best[:K]
        if st == "feasible":
            solver_stopped(clock, CandidateResult("limit"), phase)
            break
    plans = [ev for _, ev in best]
    if proof is not None:
        ok = np.isfinite(bounds.objective_min)
        for family_ok in allowed.values():
            ok &= family_ok
        ok[np.asarray(done, dtype=np.int64)] = False
        proof["certificate"] = float(bounds.objective_min[ok].min()) if ok.any() else math.inf
    if status is not None:
        return plans, status, rounds, evaluated, (0.0 if plans else None)
    kth = best[K - 1][0][0] if len(best) >= K else None
    return plans, (Status.FEASIBLE if plans else Status.UNKNOWN), rounds, evaluated, relative_gap(kth, lower)
