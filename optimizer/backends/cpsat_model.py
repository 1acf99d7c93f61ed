"""OR-Tools CP-SAT formulation of the plan model, its layout-decomposition master, and the ``cpsat`` backend.

Decision variables: one index variable per base variable (its position in the domain). Every term
of :mod:`tpopt.models.terms` enters as a table constraint over its own variables and its (integer)
value; the glue is linear, and the two products of the model (step x (1 + L), rate x finish) are
exact linear relations selected by one literal per distinct value of the small factor. A hub
variable over the core layout carries valid lower bounds and drives a best-first search.

Integer scaling (a relaxation, see :mod:`tpopt.optimizer.core`): units are chosen from the actual
ranges of the tables (:func:`choose_scales`: time at finest microseconds, overhead at finest 1e-7,
memory in bytes unless it would pass 2^58) so that no linear expression reaches 2^60; values beyond
the point where the deadline alone excludes a plan are clamped there (:func:`caps`, :func:`lower` of
:mod:`tpopt.optimizer.backends.encoding`, shared with HiGHS).
Every value is rounded *down* where it adds to a "<=" side or to the objective; the one ">="
constraint (input throughput) compares the floored busy time plus the rounding slack; limits are
rounded up. The ranges are checked before the model is used (``_fits``); a scenario that cannot be
represented raises :class:`EncodingError` and the caller falls back. Conditions that compare one
tabulated value with a constant (layout rules, backlog, host memory) are decided exactly in floating
point when the table is built.

Every constraint family is guarded by a named literal (after the OR-Tools assumptions sample):
enforced families have their literal fixed to true, or passed as assumptions when a conflict core is
wanted (``sufficient_assumptions_for_infeasibility``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from numpy.typing import ArrayLike, NDArray
from ortools.sat.python import cp_model

from tpopt.models import families as F
from tpopt.models import terms as T
from tpopt.optimizer.backends.encoding import all_late, caps, finite, lower, max_finite
from tpopt.optimizer.backends.protocol import Allowed, CandidateResult, MasterAnswer, MasterBounds
from tpopt.optimizer.backends.verify import RelaxedBackend
from tpopt.optimizer.limits import EncodingError  # noqa: F401 (raised here; the backends' shared error)
from tpopt.optimizer.result import Request
from tpopt.optimizer.space import (
    BUSY_TERMS,
    CHANCE_TABLE,
    EXACT,
    FAMILIES,
    LAYOUT,
    MEMORY_TERMS,
    STRUCTURAL,
    VARS,
    Reducer,
    Space,
    chance_on,
    reduce_to,
)

US = 1e6  # finest time unit: microsecond (coarser when the ranges demand it, see Scales)
HUB = LAYOUT  # the core layout the search branches on first
BUSY = BUSY_TERMS  # the busy-time terms (their sum is the step before the input wait)
MEMORY = MEMORY_TERMS  # the per-card memory terms (of one stage class: Space.memory_classes)
LSCALE = 10_000_000  # finest overhead unit: 1e-7
BUDGET = 2**60  # no linear expression of the model may reach this magnitude (CP-SAT works in int64)
INT_MAX = BUDGET
MIN_TICKS = 100  # coarsest useful resolution: ticks in the shortest step, units in (1 + L) = 1


@dataclass
class Scales:
    """Integer units of one model, chosen from the actual value ranges of its tables.

    ``ticks`` per second (time), ``lscale`` units per 1 of (1 + L), ``mem_unit`` bytes per memory
    unit. Caps clamp values beyond which every plan is infeasible anyway (see :func:`lower`), so
    outliers (a 12,288-card layout with a Poisson overhead of 3,000x) do not dictate the scale.
    Invariant (checked by ``CpSatModel._fits`` before solving): every linear expression stays below
    ``BUDGET`` in magnitude.
    """

    ticks: float
    lscale: int
    mem_unit: float
    step_cap_s: float
    ov_cap: float
    mem_cap: float
    all_late: bool = False  # even the least step x the least (1 + L) overshoots the deadline


def choose_scales(space: Space, deadline_enforced: bool) -> Scales:
    """Time, overhead and memory units from the tables' ranges (raises EncodingError if no choice
    keeps every product below BUDGET at a useful resolution)."""
    sc = space.sc
    tabs = space.tables
    iters = float(T.iteration_count(sc))
    wait = float(sc.input.wait_s)
    reserved = float(sc.task.reserved_s)
    step_cap, ov_cap, mem_cap, step_min = caps(space, deadline_enforced)
    S = max(sum(min(max_finite(tabs[n].values), step_cap) for n in BUSY) + wait, 1e-9)
    ticks = min(US, BUDGET / 4 / (iters * S * ov_cap + reserved + 1.0))
    lscale = min(float(LSCALE), BUDGET / 4 / (ticks * S * ov_cap))
    if lscale < 1e4:  # give resolution back to the overhead at the cost of time ticks
        ticks = min(ticks, BUDGET / 4 / (S * ov_cap * 1e4))
        lscale = min(float(LSCALE), BUDGET / 4 / (ticks * S * ov_cap))
    late = deadline_enforced and all_late(space)
    if not (math.isfinite(ticks) and math.isfinite(lscale)) or lscale < MIN_TICKS or \
            ticks * max(step_min, 1e-3) < MIN_TICKS or (ticks * step_cap < MIN_TICKS and not late):
        raise EncodingError(f"step times up to {S:.3g} s x (1 + L) up to {ov_cap:.3g} x {iters:.3g} iterations "
                            "do not fit 64-bit integers at a useful resolution")
    mem_hi = mem_cap * len(MEMORY)
    mem_unit = 1.0 if mem_hi < BUDGET / 4 else 2.0 ** math.ceil(math.log2(mem_hi / (BUDGET / 4)))
    return Scales(ticks=float(ticks), lscale=int(lscale), mem_unit=mem_unit, step_cap_s=step_cap, ov_cap=ov_cap,
                  mem_cap=mem_cap, all_late=late)


def solve_confirmed(model: cp_model.CpModel, time_limit: float, workers: int = 1, seed: int = 0
                    ) -> tuple[cp_model.CpSolver, int]:
    """Solve a CP-SAT model; an INFEASIBLE claim is confirmed by a second solve without presolve.

    An infeasibility claim ends a search (the optimum is proven, or nothing is feasible), and CP-SAT's
    presolve has wrongly proven feasible models infeasible: google/or-tools #5003 and #5274 in 9.15, and
    in 9.14 on a model found by ``benchmarks/cross_check.py`` (seed 2026, case 8136; presolve off
    solves it). Returns (solver, status) of the answering solve.
    """
    t0 = time.monotonic()
    st = None
    for presolve in (True, False):
        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = max(0.01, float(time_limit) - (time.monotonic() - t0))
        solver.parameters.num_workers = max(1, int(workers))
        solver.parameters.random_seed = int(seed)
        solver.parameters.catch_sigint_signal = False  # Ctrl-C stays a KeyboardInterrupt (exit 130)
        solver.parameters.cp_model_presolve = presolve
        # ortools annotates solve() with the status enum's wrapper class; the value is the enum's int
        st = cast(int, solver.solve(model))
        if st != cp_model.INFEASIBLE:
            break
    return solver, cast(int, st)


def _int64(x: ArrayLike) -> NDArray[np.float64]:
    """Values safe to cast: NaN -> 0, beyond +/-BUDGET (infinities included) -> +/-BUDGET, which the
    range checks (``_fits``) then refuse rather than let a cast wrap around."""
    x = np.nan_to_num(np.asarray(x, dtype=float), nan=0.0, posinf=float(BUDGET), neginf=-float(BUDGET))
    clipped: NDArray[np.float64] = np.clip(x, -float(BUDGET), float(BUDGET))
    return clipped


def _floor(x: ArrayLike) -> NDArray[np.int64]:
    return np.floor(_int64(x)).astype(np.int64)


def _ceil(x: ArrayLike) -> NDArray[np.int64]:
    return np.ceil(_int64(x)).astype(np.int64)


def _ceil_int(x: float, hi: int) -> int:
    """ceil(x) as a Python int, at most ``hi`` (a limit beyond every reachable value is vacuous)."""
    if not x < hi:  # also catches inf and nan (nan: no limit)
        return int(hi)
    return int(math.ceil(x))


class CpSatModel:
    """The CP-SAT encoding of one :class:`Space` under one :class:`Request`."""

    def __init__(self, space: Space, req: Request, assumptions: bool = False) -> None:
        self.space = space
        self.req = req
        self.m = cp_model.CpModel()
        self.enforced = req.enforced(FAMILIES)
        self.assumption_mode = assumptions
        self.lit: dict[str, cp_model.IntVar] = {}
        self._shared: dict[tuple[Any, ...], cp_model.IntVar] = {}
        self._build()

    # -- helpers ------------------------------------------------------------------------------
    def _element(self, name: str, vars: Sequence[str], values: ArrayLike) -> cp_model.IntVar:
        """target = values[assignment of vars] as a table constraint over (vars..., target).

        Table constraints are propagated through the SAT encoding of the index variables, far
        cheaper per search node than an element over a linearly combined index.
        """
        arr = np.asarray(values).reshape(tuple(len(self.space.domains[v]) for v in vars))
        flat = arr.reshape(-1)
        uniq = np.unique(flat)
        if len(uniq) == 1:
            target = self.m.new_constant(int(uniq[0]))
            return target
        target = self.m.new_int_var_from_domain(cp_model.Domain.from_values([int(u) for u in uniq]), name)
        coords = np.indices(arr.shape).reshape(len(vars), -1).T
        rows = [tuple(int(c) for c in co) + (int(v),) for co, v in zip(coords, flat, strict=False)]
        self.m.add_allowed_assignments([self.iv[v] for v in vars] + [target], rows)
        return target

    def _table(self, name: str, how: str, scale: float = 1.0, cap: float = math.inf
               ) -> tuple[cp_model.IntVar, NDArray[np.int64]]:
        """A table's value as an integer variable (rounded ``how``); tables with the same variables and
        integer values (a term alike on two stage classes) share one."""
        t = self.space.tables[name]
        vals = lower(t.values, cap) * scale if how == "floor" else finite(t.values) * scale
        ints = _floor(vals) if how == "floor" else _ceil(vals)
        key = (t.vars, ints.shape, ints.tobytes())
        var = self._shared.get(key)
        if var is None:
            var = self._shared[key] = self._element(f"{name}.{how}", t.vars, ints)
        return var, ints

    def _selectors(self, name: str, vars: Sequence[str], ints: ArrayLike) -> list[tuple[int, cp_model.IntVar]]:
        """One literal per distinct table value, true iff the joint index selects that value."""
        uniq, codes = np.unique(np.asarray(ints).reshape(-1), return_inverse=True)
        lits = [self.m.new_bool_var(f"{name}=={int(u)}") for u in uniq]
        if len(uniq) == 1:
            self.m.add(lits[0] == 1)
        else:
            code = self._element(f"{name}.code", vars, codes)
            self.m.add_map_domain(code, lits)
        return [(int(u), lit) for u, lit in zip(uniq, lits, strict=False)]

    def _require(self, family: str, ok_table: str) -> None:
        """Family holds iff the tabulated 0/1 condition is 1 (decided exactly in floating point)."""
        t = self.space.tables[ok_table]
        flags = (t.values > 0.5).astype(np.int64)
        if flags.all():
            return
        if not flags.any():
            self.m.add_bool_or([self.lit[family].Not()])
            return
        ok = self._element(F.ok_table(family), t.vars, flags)
        self.m.add(ok == 1).only_enforce_if(self.lit[family])

    # -- model ----------------------------------------------------------------------------------
    def _build(self) -> None:
        sp, m = self.space, self.m
        dom = sp.domains
        sc = sp.sc
        self.iv = {v: m.new_int_var(0, len(dom[v]) - 1, f"i_{v}") for v in VARS}
        for f in FAMILIES:
            self.lit[f] = m.new_bool_var(f"enforce[{f}]")
            if f in self.enforced and not self.assumption_mode:
                m.add(self.lit[f] == 1)
            elif f not in self.enforced:
                m.add(self.lit[f] == 0)

        # domain facts: NICs a host can take; schedule pinned when pp = 1 (canonical assignment)
        nic_ok = sp.nic_allowed()
        if not nic_ok.all():
            m.add_allowed_assignments([self.iv["acc"], self.iv["nics"]],
                                      [(i, j) for i, j in zip(*np.nonzero(nic_ok), strict=False)])
        pp1 = [i for i, p in enumerate(dom["pp"]) if p == 1]
        if pp1 and len(dom["schedule"]) > 1:
            is_pp1 = m.new_bool_var("pp_is_1")
            m.add_element(self.iv["pp"], [int(p == 1) for p in dom["pp"]], is_pp1)
            m.add(self.iv["schedule"] == 0).only_enforce_if(is_pp1)

        # structural families and exact single-table conditions
        for f in STRUCTURAL + EXACT:
            self._require(f, F.ok_table(f))

        # cards
        cards, _ = self._table("cards", "floor")
        m.add(cards <= int(F.limit(F.CARDS, sc))).only_enforce_if(self.lit[F.CARDS])
        if self.req.cards is not None:
            m.add_linear_expression_in_domain(cards, cp_model.Domain.from_values([int(c) for c in self.req.cards]))
        self.cards = cards

        # integer units from the actual ranges (every product below BUDGET; see Scales)
        # clamping at the deadline only ever lowers values, so it is a valid relaxation even when the
        # deadline family is dropped or an assumption; it is tried first only where it is enforced
        deadline_on = F.DEADLINE in self.enforced and not self.assumption_mode
        try:
            sc_ = choose_scales(sp, deadline_on)
        except EncodingError:
            if deadline_on:
                raise
            sc_ = choose_scales(sp, True)
        self.scales = sc_
        if sc_.all_late:  # decided exactly in floating point: the deadline family admits no plan
            m.add_bool_or([self.lit[F.DEADLINE].Not()])
        ticks, lscale, mu = sc_.ticks, sc_.lscale, sc_.mem_unit
        self.ticks = ticks

        # memory per card <= usable on every stage class (memory units, rounded down; usable rounded up)
        usable = self._element("usable", ("acc",), _ceil(np.minimum(sp.usable(), sc_.mem_cap) / mu))
        self._ints = {}
        mem_groups = [names for _, names in sp.memory_classes()]
        for names in mem_groups:
            mem_parts = [self._table(n, "floor", 1.0 / mu, sc_.mem_cap) for n in names]
            self._ints.update({n: p[1] for n, p in zip(names, mem_parts, strict=True)})
            m.add(sum(p[0] for p in mem_parts) <= usable).only_enforce_if(self.lit[F.MEMORY_PER_CARD])

        # busy time (ticks): lower bound for the deadline and objective, upper bound for input throughput
        names = BUSY
        busy_parts = [self._table(n, "floor", ticks, sc_.step_cap_s) for n in names]
        busy_lb = sum(p[0] for p in busy_parts)
        busy_hi = sum(int(p[1].max()) for p in busy_parts)
        self._ints.update({n: p[1] for n, p in zip(names, busy_parts, strict=False)})
        wait_t = int(math.floor(sc.input.wait_s * ticks))
        mb_tab = sp.tables["input.min_busy"]
        if np.isfinite(mb_tab.values).all() and (mb_tab.values > 0).any():
            # busy >= B / supply; each floored term is at most 1 tick below its value, so
            # busy_lb + len(names) >= busy is a valid upper bound (the encoding stays a relaxation);
            # a need beyond every reachable busy time is clamped just above it (still excluded)
            need_cap = (busy_hi + len(names) + 1) / ticks
            need, _ = self._table("input.min_busy", "floor", ticks, need_cap)
            m.add(busy_lb + len(names) >= need).only_enforce_if(self.lit[F.INPUT_THROUGHPUT])

        # step x (1 + L), finish. (1 + L) takes few distinct values: one literal per value selects an
        # exact linear relation, so no integer product constraint is needed.
        ov = lower(sp.tables["overhead"].values + 1.0, sc_.ov_cap)
        ov_ints = np.maximum(_floor(ov * lscale), 0)
        step_max = busy_hi + wait_t
        step = m.new_int_var(0, step_max, "step_t")
        m.add(step == busy_lb + wait_t)
        y_hi = step_max * int(ov_ints.max()) // lscale + 1
        y = m.new_int_var(0, y_hi, "step_eff_t")  # floor(step x (1 + L)) in ticks
        for value, lit in self._selectors("one_plus_L", sp.tables["overhead"].vars, ov_ints):
            m.add(lscale * y <= value * step).only_enforce_if(lit)
            m.add(lscale * y >= value * step - (lscale - 1)).only_enforce_if(lit)
        iters = int(T.iteration_count(sc))
        reserved_t = int(math.floor(sc.task.reserved_s * ticks))
        finish_hi = reserved_t + iters * y_hi
        self._fits("finish time", finish_hi)
        self._fits("step x (1 + L)", 2 * step_max * int(ov_ints.max()) + lscale)
        finish = m.new_int_var(0, finish_hi, "finish_t")
        m.add(finish == reserved_t + iters * y)
        self.finish = finish
        if chance_on(sc):  # the chance form: step <= the largest step meeting the deadline with probability q
            smax = sp.tables[CHANCE_TABLE]
            caps_t = np.minimum(np.ceil(smax.values * ticks), step_max + 1).astype(np.int64)
            m.add(step <= self._element("step_max_t", smax.vars, caps_t)).only_enforce_if(self.lit[F.DEADLINE])
        else:
            m.add(finish <= _ceil_int(F.limit(F.DEADLINE, sc) * ticks, finish_hi + 1)).only_enforce_if(
                self.lit[F.DEADLINE])

        # cost = rate x finish, scaled to stay below BUDGET; rate again has few distinct values
        rate_tab = finite(sp.tables["rate"].values)
        rmin = float(rate_tab[rate_tab > 0].min()) if (rate_tab > 0).any() else 1.0
        rmax = float(rate_tab.max()) if rate_tab.size else 1.0
        self.rate_scale = min(1e6 / rmin, 1e12, BUDGET / 4 / max(rmax, 1e-300))
        rate_ints = _floor(rate_tab * self.rate_scale)
        rate_hi = max(1, int(rate_ints.max()))
        self.finish_unit = max(1, math.ceil(finish_hi * rate_hi / BUDGET))  # ticks per finish unit
        fin_u = m.new_int_var(0, finish_hi // self.finish_unit, "finish_units")
        m.add(self.finish_unit * fin_u <= finish)
        m.add(finish <= self.finish_unit * fin_u + (self.finish_unit - 1))
        cost_hi = rate_hi * (finish_hi // self.finish_unit)
        self._fits("cost", cost_hi)
        cost = m.new_int_var(0, cost_hi, "cost_scaled")
        for value, lit in self._selectors("rate", sp.tables["rate"].vars, rate_ints):
            m.add(cost == value * fin_u).only_enforce_if(lit)
        self.cost = cost
        self.cost_factor = self.finish_unit / ticks / self.rate_scale  # scaled units -> currency
        if sc.cost.max_cost is not None:
            m.add(cost <= _ceil_int(F.limit(F.BUDGET, sc) / self.cost_factor, cost_hi + 1)).only_enforce_if(
                self.lit[F.BUDGET])

        self.obj = cost if self.req.objective == "cost" else finish
        self.obj_factor = self.cost_factor if self.req.objective == "cost" else 1.0 / ticks
        self.obj_hi = cost_hi if self.req.objective == "cost" else finish_hi
        m.minimize(self.obj)
        self._hub(names, mem_groups, busy_lb, usable, ov_ints, rate_ints, wait_t, reserved_t, iters, finish, cost)

    @staticmethod
    def _fits(what: str, magnitude: int) -> None:
        """Range check before the model is used: CP-SAT's overflow check must never fire."""
        if magnitude >= BUDGET:
            raise EncodingError(f"{what} reaches {magnitude:.3g} integer units, beyond the 64-bit budget")

    def _project(self, name: str, ints: ArrayLike, fn: Reducer = np.min) -> NDArray[Any]:
        """A table's integer values reduced over its non-hub variables and laid out on the hub grid."""
        t = self.space.tables[name]
        return reduce_to(self.space.domains, np.asarray(ints).reshape(t.values.shape), t.vars, HUB, fn).reshape(-1)

    def _hub(self, busy_names: Sequence[str], mem_groups: Sequence[Sequence[str]], busy_sum: cp_model.LinearExprT,
             usable: cp_model.IntVar, ov_ints: NDArray[np.int64],
             rate_ints: NDArray[np.int64], wait_t: int, reserved_t: int, iters: int, finish: cp_model.IntVar,
             cost: cp_model.IntVar) -> None:
        """Best-first branch and bound on the core layout hub = (acc, tp, pp, dp, mb).

        For every hub value c, each term's minimum over the remaining variables (with the model's
        own rounding) gives valid lower bounds of memory (the largest over the stage classes of each class's
        sum), busy time, finish and cost. They enter as
        redundant constraints on a hub index (linked to the base variables by a table constraint),
        and the search takes hub values in increasing bound order: once a plan is found, every hub
        value whose bound exceeds it is pruned at once.
        """
        m, sp = self.m, self.space
        dom = sp.domains
        sizes = [len(dom[v]) for v in HUB]
        n_hub = int(np.prod(sizes))
        hub = m.new_int_var(0, n_hub - 1, "hub")
        rows = [tuple(int(x) for x in np.unravel_index(i, sizes)) + (i,) for i in range(n_hub)]
        m.add_allowed_assignments([self.iv[v] for v in HUB] + [hub], rows)
        busy_min = sum(self._project(n, self._ints[n]) for n in busy_names)
        mem_min = np.max([cast(NDArray[np.int64], sum(self._project(n, self._ints[n]) for n in names))
                          for names in mem_groups], axis=0)
        ov_min = self._project("overhead", ov_ints)
        rate_min = self._project("rate", rate_ints)
        step_min = cast(NDArray[np.int64], busy_min + wait_t)  # a sum of hub arrays (never the empty 0)
        # exact integer arithmetic (Python ints): every bound is at most the model's own maximum
        y_min = [int(a) * int(b) // self.scales.lscale for a, b in zip(step_min, ov_min, strict=False)]
        finish_min = np.array([reserved_t + iters * v for v in y_min], dtype=np.int64)
        fin_u_min = [int(v) // self.finish_unit for v in finish_min]
        cost_min = np.array([int(r) * f for r, f in zip(rate_min, fin_u_min, strict=False)], dtype=np.int64)
        bmin = self._element_on("busy_min", hub, busy_min)
        m.add(busy_sum >= bmin)
        mmin = self._element_on("mem_min", hub, mem_min)
        m.add(mmin <= usable).only_enforce_if(self.lit[F.MEMORY_PER_CARD])
        fmin = self._element_on("finish_min", hub, finish_min)
        m.add(finish >= fmin)
        cmin = self._element_on("cost_min", hub, cost_min)
        m.add(cost >= cmin)
        key = cost_min if self.req.objective == "cost" else finish_min
        order = np.lexsort((np.arange(n_hub), key))
        rank = m.new_int_var(0, n_hub - 1, "hub_rank")
        m.add_element(rank, [int(i) for i in order], hub)
        # ortools annotates the strategies with the enum wrapper classes, not their values
        m.add_decision_strategy([rank], cp_model.CHOOSE_FIRST, cp_model.SELECT_MIN_VALUE)  # type: ignore[arg-type]
        self.hub = hub

    def _element_on(self, name: str, index: cp_model.IntVar, values: ArrayLike) -> cp_model.IntVar:
        vals = [int(v) for v in np.asarray(values).reshape(-1)]
        target = self.m.new_int_var(min(vals), max(vals), name)
        self.m.add_element(index, vals, target)
        return target

    # -- solving --------------------------------------------------------------------------------
    def exclude(self, assignment: Mapping[str, int]) -> None:
        """No-good cut: forbid exactly this assignment."""
        self.m.add_forbidden_assignments([self.iv[v] for v in VARS], [tuple(int(assignment[v]) for v in VARS)])

    def solve(self, bound: float | None = None, time_limit: float = 60.0) -> CandidateResult:
        if bound is not None:
            self.m.add(self.obj <= _ceil_int(bound / self.obj_factor, self.obj_hi))
        solver, st = solve_confirmed(self.m, time_limit, self.req.workers, self.req.seed)
        if st in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            a = {v: int(solver.value(self.iv[v])) for v in VARS}
            return CandidateResult("candidate" if st == cp_model.OPTIMAL else "feasible", a,
                                   solver.objective_value * self.obj_factor,
                                   bound=solver.best_objective_bound * self.obj_factor)
        if st == cp_model.INFEASIBLE:
            return CandidateResult("infeasible")
        if st == cp_model.UNKNOWN:  # CP-SAT's only reason for UNKNOWN here: its time limit
            return CandidateResult("limit")
        return CandidateResult("error", detail=f"CP-SAT status {solver.status_name(st)}")

    def conflict(self, time_limit: float = 30.0) -> list[str] | None:
        """A set of enforced families that cannot hold together (CP-SAT sufficient assumptions).

        Only meaningful for a model built with ``assumptions=True``. None if feasible or unknown.
        """
        lits = [self.lit[f] for f in FAMILIES if f in self.enforced]
        self.m.clear_assumptions()
        self.m.add_assumptions(lits)
        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = time_limit
        solver.parameters.num_workers = 1
        solver.parameters.random_seed = int(self.req.seed)
        solver.parameters.catch_sigint_signal = False
        st = cast(int, solver.solve(self.m))  # the enum's int (see solve_confirmed)
        self.m.clear_assumptions()
        if st != cp_model.INFEASIBLE:
            return None
        core = set(solver.sufficient_assumptions_for_infeasibility())
        return [f for f in FAMILIES if f in self.enforced and self.lit[f].index in core]


# ---------------------------------------------------------------------------------------------
# the layout decomposition's master (:func:`tpopt.optimizer.decompose.solve_decomposed`)

SCALE_BITS = 2**52  # objective bounds are scaled to integers below this for CP-SAT


class CpSatMaster:
    """CP-SAT master: one layout variable whose domain is the layouts every family allows, and its
    bound through an element constraint.

    The layout index alone carries the master (every layout rule is decided per layout when the
    bounds are built); linking it to per-variable indices by a table constraint made CP-SAT's
    presolve take tens of seconds on 14,400 layouts, for no propagation the master needs.
    """

    name = "cpsat"

    def __init__(self, space: Space, bounds: MasterBounds, allowed: Allowed, req: Request) -> None:
        self.cp = cp_model
        self.req = req
        m = self.m = cp_model.CpModel()
        obj = bounds.objective_min
        finite = np.isfinite(obj)
        ok = finite.copy()
        for family_ok in allowed.values():  # each family: the layouts it allows (a domain restriction)
            ok &= family_ok
        keep = np.flatnonzero(ok)
        self.empty = not keep.size  # CP-SAT rejects a variable with an empty domain as an invalid model
        self.hub = m.new_int_var_from_domain(cp_model.Domain.from_values([int(i) for i in keep] or [0]), "layout")
        top = float(obj[finite].max()) if finite.any() else 1.0
        self.scale = SCALE_BITS / max(top, 1e-300) / 4
        ints = np.where(finite, np.floor(obj * self.scale), 0).astype(np.int64)
        self.theta = m.new_int_var(0, int(ints.max()) if ints.size else 0, "theta")
        m.add_element(self.hub, [int(x) for x in ints], self.theta)
        m.minimize(self.theta)

    def exclude(self, h: int) -> None:
        self.m.add(self.hub != int(h))

    def solve(self, bound: float | None, time_limit: float) -> MasterAnswer:
        if self.empty:
            return "infeasible", None
        if bound is not None and bound * self.scale < 2**62:  # a bound beyond every theta cuts nothing
            self.m.add(self.theta <= int(math.ceil(bound * self.scale)))
        s, st = solve_confirmed(self.m, time_limit, self.req.workers, self.req.seed)
        if st == self.cp.OPTIMAL:
            return "candidate", int(s.value(self.hub))
        if st == self.cp.FEASIBLE:  # time limit with a layout: evaluate it, then stop (no proof)
            return "feasible", int(s.value(self.hub))
        if st == self.cp.INFEASIBLE:
            return "infeasible", None
        if st == self.cp.UNKNOWN:
            return "limit", None
        return "error", f"CP-SAT status {s.status_name(st)}"


CPSAT = RelaxedBackend("CP-SAT", CpSatModel, CpSatMaster)
"""OR-Tools CP-SAT as a backend (registered as ``cpsat``): the encoding above and its decomposition master."""
