"""Logic-based Benders decomposition over the core layout, for design spaces too large to encode whole.

Master problem (CP-SAT or HiGHS): choose a layout h = (accelerator, tp, pp, dp, micro-batch). It
carries every constraint family that depends on the layout alone, exactly (batch divisibility, whole
hosts, TP inside a host, heads, layers, max cards), and valid relaxations of the others: for each
layout, each term's minimum (or maximum) over the remaining choices bounds memory, busy time, finish
time and cost, so the master's objective theta >= bound[h] never exceeds the true optimum of h.

Subproblem: the remaining choices of one layout (ZeRO stage, offload, recompute, schedule, NICs,
save interval and mode) solved exactly with the evaluator, vectorised over that small space.

Cuts: an evaluated layout is fully known, so it is removed from the master (a no-good). The loop
stops when the master's bound exceeds the K-th best verified plan or no layout remains: the result
is the exact optimum, as the property tests check against plain enumeration.
"""

from __future__ import annotations

import math

import numpy as np

from tpopt.models import terms as T
from tpopt.models.evaluate import evaluate
from tpopt.optimizer.enumerate import layout_best
from tpopt.optimizer.result import Request, Status, objective_key
from tpopt.optimizer.space import BUSY_TERMS as BUSY
from tpopt.optimizer.space import LAYOUT, Space, cards_of, reduce_to
from tpopt.optimizer.space import MEMORY_TERMS as MEMORY

HUB = LAYOUT
HUB_RULES = ("batch.divisibility", "layout.whole_hosts", "layout.tp_within_host", "layout.heads_divisible",
             "layout.pp_divides_layers")
SCALE_BITS = 2**52  # objective bounds are scaled to integers below this for CP-SAT


def _reduce_to_hub(space: Space, name: str, fn, values=None) -> np.ndarray:
    """A table reduced over its non-layout variables (ignoring non-finite entries), on the layout grid.
    Minima come from lower-bound tables, maxima from upper-bound tables (:meth:`Space.bound_table`:
    closed-form bounds of the pipeline terms on large spaces, the exact tables otherwise)."""
    t = space.bound_table(name, "lo" if fn is np.min else "hi")
    vals = t.values if values is None else values
    vals = np.where(np.isfinite(vals), vals, np.inf if fn is np.min else -np.inf)
    return reduce_to(space.domains, vals, t.vars, HUB, fn).reshape(-1)


class LayoutBounds:
    """Per-layout valid bounds of the extras-dependent quantities."""

    def __init__(self, space: Space, objective: str):
        sc = space.sc
        dom = space.domains
        self.sizes = [len(dom[v]) for v in HUB]
        self.n = int(np.prod(self.sizes))
        busy_min = sum(_reduce_to_hub(space, n, np.min) for n in BUSY)
        self.busy_max = sum(_reduce_to_hub(space, n, np.max) for n in BUSY)
        self.mem_min = sum(_reduce_to_hub(space, n, np.min) for n in MEMORY)
        l_min = _reduce_to_hub(space, "overhead", np.min)
        nic_ok = space.nic_allowed()  # (acc, nics)
        rate = space.tables["rate"]  # (acc, card factors..., nics)
        shape = [1] * rate.values.ndim
        shape[rate.vars.index("acc")], shape[rate.vars.index("nics")] = nic_ok.shape
        masked = np.where(nic_ok.reshape(shape), rate.values, np.inf)
        rate_min = _reduce_to_hub(space, "rate", np.min, masked)
        iters = T.iteration_count(sc)
        wait = sc.input.wait_s
        with np.errstate(over="ignore", invalid="ignore"):  # inf: every plan of the layout infinitely late
            self.finish_min = sc.task.reserved_s + iters * (busy_min + wait) * (1.0 + l_min)
            self.cost_min = rate_min * self.finish_min
        self.objective_min = self.cost_min if objective == "cost" else self.finish_min
        grid = np.indices(self.sizes).reshape(len(HUB), -1)
        self.coords = {v: grid[i] for i, v in enumerate(HUB)}
        vals = {v: np.asarray(dom[v])[self.coords[v]] for v in HUB}
        self.cards = cards_of(**vals)
        self.usable = space.usable()[self.coords["acc"]]
        need = _reduce_to_hub(space, "input.min_busy", np.max)
        self.input_need = np.where(np.isfinite(need), need, 0.0)
        # layout-only rules, decided exactly
        self.rules = {f: _reduce_to_hub(space, "ok." + f, np.max) > 0.5 for f in HUB_RULES}

    def allowed(self, enforced, max_cards, deadline, max_cost) -> dict:
        """Per family, the layouts its (relaxed) condition allows."""
        ok = {f: self.rules[f] for f in HUB_RULES if f in enforced}
        if "cards.max" in enforced:
            ok["cards.max"] = self.cards <= max_cards
        if "memory.per_card" in enforced:
            ok["memory.per_card"] = self.mem_min <= self.usable
        if "deadline.finish" in enforced:
            ok["deadline.finish"] = self.finish_min <= deadline
        if "input.throughput" in enforced:
            ok["input.throughput"] = self.busy_max >= self.input_need
        if "budget.cost" in enforced and max_cost is not None:
            ok["budget.cost"] = self.cost_min <= max_cost
        return ok


class CpSatMaster:
    """CP-SAT master: one layout variable whose domain is the layouts every family allows, and its
    bound through an element constraint.

    The layout index alone carries the master (every layout rule is decided per layout when the
    bounds are built); linking it to per-variable indices by a table constraint made CP-SAT's
    presolve take tens of seconds on 14,400 layouts, for no propagation the master needs.
    """

    name = "cpsat"

    def __init__(self, space: Space, bounds: LayoutBounds, allowed: dict, req: Request):
        from ortools.sat.python import cp_model

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

    def exclude(self, h: int):
        self.m.add(self.hub != int(h))

    def solve(self, bound, time_limit):
        if self.empty:
            return "infeasible", None
        if bound is not None and bound * self.scale < 2**62:  # a bound beyond every theta cuts nothing
            self.m.add(self.theta <= int(math.ceil(bound * self.scale)))
        from tpopt.optimizer.cpsat import solve_confirmed

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


class HighsMaster:
    """HiGHS master: one binary per allowed layout, theta = sum bound[h] y[h]."""

    name = "highs"

    def __init__(self, space: Space, bounds: LayoutBounds, allowed: dict, req: Request):
        import highspy

        from tpopt.optimizer.highs import new_highs

        self.hp = highspy
        ok = np.ones(bounds.n, dtype=bool)
        for a in allowed.values():
            ok &= a
        ok &= np.isfinite(bounds.objective_min)
        self.cols = np.flatnonzero(ok)
        obj = bounds.objective_min[self.cols]
        # normalised so that HiGHS never meets a cost it treats as infinite (>= 1e20); a power of
        # two keeps the order of the bounds exact
        top = float(np.max(np.abs(obj))) if obj.size else 1.0
        self.unit = 2.0 ** math.ceil(math.log2(top)) if top > 1.0 else 1.0
        self.obj = obj / self.unit
        self.h = new_highs(req)
        n = len(self.cols)
        if n:
            self.h.addVars(n, np.zeros(n), np.ones(n))
            self.h.changeColsIntegrality(n, np.arange(n, dtype=np.int32),
                                         np.array([highspy.HighsVarType.kInteger] * n))
            self.h.changeColsCost(n, np.arange(n, dtype=np.int32), self.obj)
            self.h.addRow(1.0, 1.0, n, np.arange(n, dtype=np.int32), np.ones(n))
        self.bound_row = None

    def exclude(self, h: int):
        j = np.flatnonzero(self.cols == h)
        if j.size:
            self.h.changeColBounds(int(j[0]), 0.0, 0.0)

    def solve(self, bound, time_limit):
        from tpopt.optimizer.highs import run_highs

        if not len(self.cols):
            return "infeasible", None
        n = len(self.cols)
        if bound is not None and math.isfinite(bound):
            lim = bound / self.unit * (1 + 1e-12) + 1e-12
            if self.bound_row is None:
                self.h.addRow(-np.inf, lim, n, np.arange(n, dtype=np.int32), self.obj)
                self.bound_row = self.h.getNumRow() - 1
            else:
                self.h.changeRowBounds(self.bound_row, -np.inf, lim)
        self.h.setOptionValue("time_limit", max(0.01, time_limit))
        st = run_highs(self.h)
        if st == self.hp.HighsModelStatus.kOptimal:
            x = np.array(self.h.getSolution().col_value)
            return "candidate", int(self.cols[int(np.argmax(x))])
        if st in (self.hp.HighsModelStatus.kInfeasible, self.hp.HighsModelStatus.kUnboundedOrInfeasible):
            return "infeasible", None
        if st == self.hp.HighsModelStatus.kTimeLimit:
            return "limit", None
        return "error", f"HiGHS status {self.h.modelStatusToString(st)}"


def solve_decomposed(space: Space, backend: str, req: Request, enforced):
    """Benders loop; returns (evaluations best first, status, rounds, evaluated points, gap).

    Stops when the shared clock runs out (status feasible or unknown; the gap compares the K-th
    best verified plan with the master's last proven bound, the least bound of the layouts left).
    Raises :class:`~tpopt.optimizer.core.SolverFailure` when the master fails for another reason.
    """
    from tpopt.optimizer.core import SolverFailure, relative_gap, solver_stopped
    from tpopt.optimizer.cpsat import CandidateResult
    from tpopt.optimizer.limits import clock_of

    sc = space.sc
    clock = clock_of(req)
    bounds = LayoutBounds(space, req.objective)
    allowed = bounds.allowed(enforced, sc.search.max_cards, sc.task.deadline_s, sc.cost.max_cost)
    if req.cards is not None:
        allowed["cards"] = np.isin(bounds.cards, list(req.cards))
    if backend.startswith("pyomo:"):
        from tpopt.optimizer.pyomo_model import PyomoMaster

        master = PyomoMaster(space, bounds, allowed, req, backend)
    else:
        master = (CpSatMaster if backend == "cpsat" else HighsMaster)(space, bounds, allowed, req)
    K = max(1, req.top)
    best: list[tuple[tuple, object]] = []
    rounds = evaluated = 0
    lower = None  # least master bound over the layouts not yet evaluated
    phase = "solving the layout decomposition"
    status = None
    while status is None:
        rounds += 1
        bound = best[K - 1][0][0] if len(best) >= K else None
        if clock.expired(phase):
            break
        st, h = master.solve(bound, clock.remaining(0.01))
        clock.report(phase, rounds)
        if st == "infeasible":
            status = Status.OPTIMAL if best else Status.INFEASIBLE
            break
        if st == "error":
            raise SolverFailure(f"master problem: {h}")
        if st == "limit":
            solver_stopped(clock, CandidateResult("limit"), phase)
            break
        if st == "candidate":
            lower = float(bounds.objective_min[h])
        master.exclude(h)
        layout = tuple(int(bounds.coords[v][h]) for v in HUB)
        sub_req = Request(objective=req.objective, enforce=frozenset(enforced), top=K, cards=req.cards, clock=clock)
        found, n = layout_best(space, layout, sub_req)
        evaluated += n
        for a in found:
            ev = evaluate(sc, space.plan(a))
            best.append((objective_key(ev, req.objective), ev))
        best.sort(key=lambda kv: kv[0])
        best = best[:K]
        if st == "feasible":
            solver_stopped(clock, CandidateResult("limit"), phase)
            break
    plans = [ev for _, ev in best]
    if status is not None:
        return plans, status, rounds, evaluated, (0.0 if plans else None)
    kth = best[K - 1][0][0] if len(best) >= K else None
    return plans, (Status.FEASIBLE if plans else Status.UNKNOWN), rounds, evaluated, relative_gap(kth, lower)
