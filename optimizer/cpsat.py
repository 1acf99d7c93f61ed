"""OR-Tools CP-SAT formulation of the plan model.

Decision variables: one index variable per base variable (its position in the domain). Every term
of :mod:`tpopt.models.terms` enters as a table constraint over its own variables and its (integer)
value; the glue is linear, and the two products of the model (step x (1 + L), rate x finish) are
exact linear relations selected by one literal per distinct value of the small factor. A hub
variable over the core layout carries valid lower bounds and drives a best-first search.

Integer scaling (a relaxation, see :mod:`tpopt.optimizer.core`): times in microseconds, memory in
bytes, overhead in 1e-7, all rounded *down* where they add to a "<=" side or to the objective and
*up* where they feed the one ">=" constraint (input throughput); limits rounded up. Conditions that
compare one tabulated value with a constant (layout rules, backlog, host memory) are decided exactly
in floating point when the table is built.

Every constraint family is guarded by a named literal (after the OR-Tools assumptions sample):
enforced families have their literal fixed to true, or passed as assumptions when a conflict core is
wanted (``sufficient_assumptions_for_infeasibility``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from tpopt.models import terms as T
from tpopt.optimizer.result import Request
from tpopt.optimizer.space import BUSY_TERMS, EXACT, FAMILIES, LAYOUT, MEMORY_TERMS, STRUCTURAL, VARS, Space, \
    reduce_to

US = 1e6  # time unit: microsecond
HUB = LAYOUT  # the core layout the search branches on first
LSCALE = 10_000_000  # overhead unit: 1e-7
INT_MAX = 2**61


@dataclass
class CandidateResult:
    status: str  # "candidate" | "feasible" | "infeasible" | "unknown"
    assignment: dict | None = None
    objective_lb: float | None = None


def _finite(x):
    """Table values with non-finite entries (plans a structural family excludes) set to 0."""
    x = np.asarray(x, dtype=float)
    return np.where(np.isfinite(x), x, 0.0)


def _floor(x):
    return np.floor(np.asarray(x, dtype=float)).astype(np.int64)


def _ceil(x):
    return np.ceil(np.asarray(x, dtype=float)).astype(np.int64)


class CpSatModel:
    """The CP-SAT encoding of one :class:`Space` under one :class:`Request`."""

    def __init__(self, space: Space, req: Request, assumptions: bool = False):
        self.space = space
        self.req = req
        self.m = cp_model.CpModel()
        self.enforced = req.enforced(FAMILIES)
        self.assumption_mode = assumptions
        self.lit = {}
        self._build()

    # -- helpers ------------------------------------------------------------------------------
    def _element(self, name: str, vars, values) -> cp_model.IntVar:
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
        rows = [tuple(int(c) for c in co) + (int(v),) for co, v in zip(coords, flat)]
        self.m.add_allowed_assignments([self.iv[v] for v in vars] + [target], rows)
        return target

    def _table(self, name: str, how: str, scale: float = 1.0):
        t = self.space.tables[name]
        vals = _finite(t.values) * scale
        ints = _floor(vals) if how == "floor" else _ceil(vals)
        return self._element(f"{name}.{how}", t.vars, ints), ints

    def _selectors(self, name: str, vars, ints):
        """One literal per distinct table value, true iff the joint index selects that value."""
        uniq, codes = np.unique(np.asarray(ints).reshape(-1), return_inverse=True)
        lits = [self.m.new_bool_var(f"{name}=={int(u)}") for u in uniq]
        if len(uniq) == 1:
            self.m.add(lits[0] == 1)
        else:
            code = self._element(f"{name}.code", vars, codes)
            self.m.add_map_domain(code, lits)
        return [(int(u), lit) for u, lit in zip(uniq, lits)]

    def _require(self, family: str, ok_table: str):
        """Family holds iff the tabulated 0/1 condition is 1 (decided exactly in floating point)."""
        t = self.space.tables[ok_table]
        flags = (t.values > 0.5).astype(np.int64)
        if flags.all():
            return
        if not flags.any():
            self.m.add_bool_or([self.lit[family].Not()])
            return
        ok = self._element(f"ok.{family}", t.vars, flags)
        self.m.add(ok == 1).only_enforce_if(self.lit[family])

    # -- model ----------------------------------------------------------------------------------
    def _build(self):
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
                                      [(i, j) for i, j in zip(*np.nonzero(nic_ok))])
        pp1 = [i for i, p in enumerate(dom["pp"]) if p == 1]
        if pp1 and len(dom["schedule"]) > 1:
            is_pp1 = m.new_bool_var("pp_is_1")
            m.add_element(self.iv["pp"], [int(p == 1) for p in dom["pp"]], is_pp1)
            m.add(self.iv["schedule"] == 0).only_enforce_if(is_pp1)

        # structural families and exact single-table conditions
        for f in STRUCTURAL + EXACT:
            self._require(f, "ok." + f)

        # cards
        cards, _ = self._table("cards", "floor")
        m.add(cards <= int(sc.search.max_cards)).only_enforce_if(self.lit["cards.max"])
        if self.req.cards is not None:
            m.add_linear_expression_in_domain(cards, cp_model.Domain.from_values([int(c) for c in self.req.cards]))
        self.cards = cards

        # memory per card <= usable (bytes, rounded down; usable rounded up)
        mem_names = MEMORY_TERMS
        mem_terms = [self._table(n, "floor")[0] for n in mem_names]
        usable = self._element("usable", ("acc",), _ceil(sp.usable()))
        m.add(sum(mem_terms) <= usable).only_enforce_if(self.lit["memory.per_card"])

        # busy time (us): lower bound for the deadline and objective, upper bound for input throughput
        names = BUSY_TERMS
        busy_lb = sum(self._table(n, "floor", US)[0] for n in names)
        wait_us = int(math.floor(sc.input.wait_s * US))
        mb_tab = sp.tables["input.min_busy"]
        if np.isfinite(mb_tab.values).all() and (mb_tab.values > 0).any():
            # busy >= B / supply; each floored term is at most 1 us below its value, so
            # busy_lb + len(names) >= busy is a valid upper bound (the encoding stays a relaxation)
            need, _ = self._table("input.min_busy", "floor", US)
            m.add(busy_lb + len(names) >= need).only_enforce_if(self.lit["input.throughput"])

        # step x (1 + L), finish. (1 + L) takes few distinct values: one literal per value selects an
        # exact linear relation, so no integer product constraint is needed.
        ov_ints = _floor(sp.tables["overhead"].values * LSCALE) + LSCALE
        step_max = self._max_busy_us() + wait_us
        step = m.new_int_var(0, step_max, "step_us")
        m.add(step == busy_lb + wait_us)
        y_hi = step_max * int(ov_ints.max()) // LSCALE + 1
        y = m.new_int_var(0, y_hi, "step_eff_us")  # floor(step x (1 + L)) in us
        for value, lit in self._selectors("one_plus_L", sp.tables["overhead"].vars, ov_ints):
            m.add(LSCALE * y <= value * step).only_enforce_if(lit)
            m.add(LSCALE * y >= value * step - (LSCALE - 1)).only_enforce_if(lit)
        iters = int(T.iteration_count(sc))
        reserved_us = int(math.floor(sc.task.reserved_s * US))
        finish_hi = reserved_us + iters * y_hi
        finish = m.new_int_var(0, finish_hi, "finish_us")
        m.add(finish == reserved_us + iters * y)
        self.finish = finish
        m.add(finish <= min(int(math.ceil(sc.task.deadline_s * US)), INT_MAX)).only_enforce_if(
            self.lit["deadline.finish"])

        # cost = rate x finish, scaled to stay inside 64 bits; rate again has few distinct values
        rate_tab = sp.tables["rate"].values
        rmin = float(rate_tab[rate_tab > 0].min()) if (rate_tab > 0).any() else 1.0
        self.rate_scale = min(1e6 / rmin, 1e12)
        rate_ints = _floor(rate_tab * self.rate_scale)
        rate_hi = max(1, int(rate_ints.max()))
        self.finish_unit = max(1, math.ceil(finish_hi * rate_hi / INT_MAX))  # microseconds per finish unit
        fin_u = m.new_int_var(0, finish_hi // self.finish_unit, "finish_units")
        m.add(self.finish_unit * fin_u <= finish)
        m.add(finish <= self.finish_unit * fin_u + (self.finish_unit - 1))
        cost = m.new_int_var(0, rate_hi * (finish_hi // self.finish_unit), "cost_scaled")
        for value, lit in self._selectors("rate", sp.tables["rate"].vars, rate_ints):
            m.add(cost == value * fin_u).only_enforce_if(lit)
        self.cost = cost
        self.cost_factor = self.finish_unit / US / self.rate_scale  # scaled units -> currency
        if sc.cost.max_cost is not None:
            cap = min(int(math.ceil(sc.cost.max_cost / self.cost_factor)), INT_MAX)
            m.add(cost <= cap).only_enforce_if(
                self.lit["budget.cost"])

        self.obj = cost if self.req.objective == "cost" else finish
        self.obj_factor = self.cost_factor if self.req.objective == "cost" else 1.0 / US
        m.minimize(self.obj)
        self._hub(names, mem_names, busy_lb, sum(mem_terms), usable, ov_ints, rate_ints, wait_us, reserved_us,
                  iters, finish, cost)

    def _project(self, name: str, ints: np.ndarray, fn=np.min) -> np.ndarray:
        """A table's integer values reduced over its non-hub variables and laid out on the hub grid."""
        t = self.space.tables[name]
        return reduce_to(self.space.domains, np.asarray(ints).reshape(t.values.shape), t.vars, HUB, fn).reshape(-1)

    def _hub(self, busy_names, mem_names, busy_sum, mem_sum, usable, ov_ints, rate_ints, wait_us, reserved_us,
             iters, finish, cost):
        """Best-first branch and bound on the core layout hub = (acc, tp, pp, dp, mb).

        For every hub value c, each term's minimum over the remaining variables (with the model's
        own rounding) gives valid lower bounds of memory, busy time, finish and cost. They enter as
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
        busy_min = sum(self._project(n, _floor(_finite(sp.tables[n].values) * US)) for n in busy_names)
        mem_min = sum(self._project(n, _floor(_finite(sp.tables[n].values))) for n in mem_names)
        ov_min = self._project("overhead", ov_ints)
        rate_min = self._project("rate", rate_ints)
        step_min = busy_min + wait_us
        y_min = (step_min.astype(object) * ov_min.astype(object)) // LSCALE
        finish_min = np.array([reserved_us + iters * int(v) for v in y_min], dtype=np.int64)
        fin_u_min = finish_min // self.finish_unit
        cost_min = rate_min.astype(np.int64) * fin_u_min
        bmin = self._element_on("busy_min", hub, busy_min)
        m.add(busy_sum >= bmin)
        mmin = self._element_on("mem_min", hub, mem_min)
        m.add(mmin <= usable).only_enforce_if(self.lit["memory.per_card"])
        fmin = self._element_on("finish_min", hub, finish_min)
        m.add(finish >= fmin)
        cmin = self._element_on("cost_min", hub, cost_min)
        m.add(cost >= cmin)
        key = cost_min if self.req.objective == "cost" else finish_min
        order = np.lexsort((np.arange(n_hub), key))
        rank = m.new_int_var(0, n_hub - 1, "hub_rank")
        m.add_element(rank, [int(i) for i in order], hub)
        m.add_decision_strategy([rank], cp_model.CHOOSE_FIRST, cp_model.SELECT_MIN_VALUE)
        self.hub = hub

    def _element_on(self, name: str, index, values) -> cp_model.IntVar:
        vals = [int(v) for v in np.asarray(values).reshape(-1)]
        target = self.m.new_int_var(min(vals), max(vals), name)
        self.m.add_element(index, vals, target)
        return target

    def _max_busy_us(self) -> int:
        total = 0
        for n in BUSY_TERMS:
            v = self.space.tables[n].values
            total += int(math.ceil(float(np.nanmax(np.where(np.isfinite(v), v, 0.0))) * US)) + 1
        return total

    # -- solving --------------------------------------------------------------------------------
    def exclude(self, assignment: dict):
        """No-good cut: forbid exactly this assignment."""
        self.m.add_forbidden_assignments([self.iv[v] for v in VARS], [tuple(int(assignment[v]) for v in VARS)])

    def solve(self, bound=None, time_limit: float = 60.0) -> CandidateResult:
        if bound is not None:
            self.m.add(self.obj <= min(int(math.ceil(bound / self.obj_factor)), INT_MAX))
        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = max(0.01, float(time_limit))
        solver.parameters.num_workers = max(1, int(self.req.workers))
        solver.parameters.random_seed = int(self.req.seed)
        solver.parameters.catch_sigint_signal = False  # Ctrl-C stays a KeyboardInterrupt (exit 130)
        st = solver.solve(self.m)
        if st in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            a = {v: int(solver.value(self.iv[v])) for v in VARS}
            return CandidateResult("candidate" if st == cp_model.OPTIMAL else "feasible", a,
                                   solver.objective_value * self.obj_factor)
        if st == cp_model.INFEASIBLE:
            return CandidateResult("infeasible")
        return CandidateResult("unknown")

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
        st = solver.solve(self.m)
        self.m.clear_assumptions()
        if st != cp_model.INFEASIBLE:
            return None
        core = set(solver.sufficient_assumptions_for_infeasibility())
        return [f for f in FAMILIES if f in self.enforced and self.lit[f].index in core]
