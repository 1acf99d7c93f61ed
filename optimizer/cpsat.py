"""OR-Tools CP-SAT formulation of the plan model.

Decision variables: one index variable per base variable (its position in the domain). Every term
of :mod:`tpopt.models.terms` enters as an element constraint over the joint index of its own
variables; the glue is linear except two exact products (step x (1 + L), rate x finish).

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
from tpopt.optimizer.space import FAMILIES, VARS, Space

US = 1e6  # time unit: microsecond
LSCALE = 10_000_000  # overhead unit: 1e-7
INT_MAX = 2**61


@dataclass
class CandidateResult:
    status: str  # "candidate" | "feasible" | "infeasible" | "unknown"
    assignment: dict | None = None
    objective_lb: float | None = None


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
    def _index(self, vars) -> cp_model.IntVar:
        dom = self.space.domains
        if len(vars) == 1:
            return self.iv[vars[0]]
        size = int(np.prod([len(dom[v]) for v in vars]))
        key = tuple(vars)
        if key in self._idx_cache:
            return self._idx_cache[key]
        idx = self.m.new_int_var(0, size - 1, "idx_" + "_".join(vars))
        strides = []
        s = 1
        for v in reversed(vars):
            strides.append(s)
            s *= len(dom[v])
        strides.reverse()
        self.m.add(idx == sum(st * self.iv[v] for st, v in zip(strides, vars)))
        self._idx_cache[key] = idx
        return idx

    def _element(self, name: str, vars, values) -> cp_model.IntVar:
        vals = [int(v) for v in np.asarray(values).reshape(-1)]
        lo, hi = min(vals), max(vals)
        target = self.m.new_int_var(lo, hi, name)
        if lo == hi:
            self.m.add(target == lo)
        else:
            self.m.add_element(self._index(vars), vals, target)
        return target

    def _table(self, name: str, how: str, scale: float = 1.0):
        t = self.space.tables[name]
        vals = t.values * scale
        vals = np.where(np.isfinite(vals), vals, 0.0)
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
        flags = t.values.reshape(-1) > 0.5
        if flags.all():
            return
        allowed = [i for i, f in enumerate(flags) if f]
        if not allowed:
            self.m.add_bool_or([self.lit[family].Not()])
            return
        idx = self._index(t.vars)
        ok = self.m.new_bool_var(f"ok.{family}")
        self.m.add_element(idx, [int(f) for f in flags], ok)
        self.m.add_implication(self.lit[family], ok)

    # -- model ----------------------------------------------------------------------------------
    def _build(self):
        sp, m = self.space, self.m
        dom = sp.domains
        sc = sp.sc
        self._idx_cache = {}
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
        for f in ("batch.divisibility", "layout.whole_hosts", "layout.tp_within_host", "layout.heads_divisible",
                  "layout.pp_divides_layers"):
            self._require(f, "ok." + f)
        self._require("checkpoint.backlog", "ok.checkpoint.backlog")
        self._require("memory.host", "ok.memory.host")

        # cards
        cards, _ = self._table("cards", "floor")
        m.add(cards <= int(sc.search.max_cards)).only_enforce_if(self.lit["cards.max"])
        if self.req.cards is not None:
            m.add_linear_expression_in_domain(cards, cp_model.Domain.from_values([int(c) for c in self.req.cards]))
        self.cards = cards

        # memory per card <= usable (bytes, rounded down; usable rounded up)
        mem_terms = [self._table(n, "floor")[0] for n in ("mem.states", "mem.copies", "mem.activations",
                                                          "mem.temporary")]
        usable = self._element("usable", ("acc",), _ceil(sp.usable()))
        m.add(sum(mem_terms) <= usable).only_enforce_if(self.lit["memory.per_card"])

        # busy time (us): lower bound for the deadline and objective, upper bound for input throughput
        names = ("time.compute", "time.exposed_dp", "time.tp_comm", "time.offload")
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

    def _max_busy_us(self) -> int:
        total = 0
        for n in ("time.compute", "time.exposed_dp", "time.tp_comm", "time.offload"):
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
        st = solver.solve(self.m)
        self.m.clear_assumptions()
        if st != cp_model.INFEASIBLE:
            return None
        core = set(solver.sufficient_assumptions_for_infeasibility())
        return [f for f in FAMILIES if f in self.enforced and self.lit[f].index in core]
