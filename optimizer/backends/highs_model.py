"""The plan model as a mixed-integer linear program, solved with HiGHS (highspy); its layout-decomposition
master, and the ``highs`` backend.

Exact linearisation over the discrete domains:

* one binary x[v, a] per base variable v and value a, with sum_a x[v, a] = 1;
* every term table over variables V gets joint weights w[t] in [0, 1] tied to the one-hots by
  marginal constraints sum_{t : t_v = a} w[t] = x[v, a] for each v in V. For integral x the only
  tuple whose coordinates all carry weight is the selected one, so w is that tuple's indicator and
  every term value sum_t val[t] w[t] is exact, with no further integer variables;
* the two products of the model are disaggregated over omega = (acc, tp, pp, dp, nics, tau, mode),
  the variables that fix both (1 + L) and the rental rate: busy = sum_omega b[omega] with
  0 <= b[omega] <= M u[omega], so that
      finish = reserved + iterations x sum_omega (1 + L[omega]) (b[omega] + wait u[omega])
      cost   = sum_omega rate[omega] (reserved u[omega] + iterations (1 + L[omega]) (b[omega] + wait u[omega]))
  are linear.

Units inside the LP: GiB, seconds, days, currency. HiGHS works to a feasibility tolerance, so its
answers go through the same solve-verify loop as CP-SAT's (:mod:`tpopt.optimizer.core`).
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from numpy.typing import ArrayLike, NDArray

from tpopt.models import families as F
from tpopt.models import terms as T
from tpopt.models.units import DAY, GIB
from tpopt.optimizer.backends.encoding import caps, lower
from tpopt.optimizer.backends.protocol import Allowed, CandidateResult, MasterAnswer, MasterBounds
from tpopt.optimizer.backends.verify import RelaxedBackend
from tpopt.optimizer.limits import EncodingError, checkpoint
from tpopt.optimizer.result import Request
from tpopt.optimizer.space import (
    BUSY_TERMS,
    CARD_FACTORS,
    CHANCE_TABLE,
    EXACT,
    FAMILIES,
    LAYOUT,
    STRUCTURAL,
    VARS,
    Space,
    chance_on,
    reduce_to,
)

if TYPE_CHECKING:  # annotations only: highspy is imported where a model is built (start-up time)
    import highspy

INF = 1e30
MAX_COEF = 1e13  # largest matrix coefficient or finite bound the encoding may use (HiGHS tolerances are
# absolute, 1e-7 to 1e-9: beyond this range a verdict could rest on rounding)
MAX_RANGE = 1e10  # largest ratio of matrix coefficients (found by benchmarks/cross_check.py: at 1e11
# HiGHS's presolve declared a feasible model infeasible)
HUB = LAYOUT + ("recompute",)  # the core layout every time and memory term shares


@contextlib.contextmanager
def _quiet_stdout() -> Iterator[None]:
    """HiGHS prints a banner from C++ on first use; keep stdout clean for JSON and tables."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        yield
        return
    sys.stdout.flush()
    saved = os.dup(fd)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), fd)
        try:
            yield
        finally:
            sys.stdout.flush()
            os.dup2(saved, fd)
            os.close(saved)


def run_highs(h: highspy.Highs) -> highspy.HighsModelStatus:
    """Run HiGHS; if its presolve fails with a solve error (seen on small models after no-good rows
    and a tightened objective bound), solve again without presolve."""
    import highspy  # lazy: start-up time

    with _quiet_stdout():
        h.run()
    if h.getModelStatus() == highspy.HighsModelStatus.kSolveError:
        h.clearSolver()
        h.setOptionValue("presolve", "off")
        with _quiet_stdout():
            h.run()
        h.setOptionValue("presolve", "choose")
    return h.getModelStatus()


def new_highs(req: Request) -> highspy.Highs:
    """A silent, deterministic HiGHS instance solving MIPs to a zero gap."""
    import highspy  # lazy: start-up time

    with _quiet_stdout():
        h = highspy.Highs()  # type: ignore[no-untyped-call]  # highspy's stub leaves Highs() unannotated
        h.setOptionValue("output_flag", False)
    h.setOptionValue("random_seed", int(req.seed))
    h.setOptionValue("threads", max(1, int(req.workers)))
    h.setOptionValue("mip_rel_gap", 0.0)
    h.setOptionValue("mip_abs_gap", 0.0)
    return h


class _Lp:
    """Column and row accumulator for one passModel call."""

    def __init__(self) -> None:
        self.lo: list[float] = []
        self.hi: list[float] = []
        self.cost: list[float] = []
        self.integer: list[bool] = []
        self.r_lo: list[float] = []
        self.r_hi: list[float] = []
        self.r_start: list[int] = [0]
        self.r_idx: list[int] = []
        self.r_val: list[float] = []

    def cols(self, n: int, lo: ArrayLike = 0.0, hi: ArrayLike = 1.0, integer: bool = False) -> NDArray[np.int_]:
        start = len(self.lo)
        self.lo.extend(np.broadcast_to(lo, (n,)).tolist())
        self.hi.extend(np.broadcast_to(hi, (n,)).tolist())
        self.cost.extend([0.0] * n)
        self.integer.extend([integer] * n)
        return np.arange(start, start + n)

    def row(self, idx: ArrayLike, val: ArrayLike, lo: float = -INF, hi: float = INF) -> None:
        checkpoint()  # a time limit stops the model's building between two rows (a stoppable phase's clock)
        cols = np.asarray(idx, dtype=np.int64).reshape(-1)
        coefs = np.broadcast_to(np.asarray(val, dtype=float), cols.shape).reshape(-1)
        if np.unique(cols).size < cols.size:  # two terms over the same variables share weight columns: add them
            cols, inverse = np.unique(cols, return_inverse=True)
            coefs = np.bincount(inverse.reshape(-1), weights=coefs, minlength=cols.size)
        keep = coefs != 0.0
        self.r_idx.extend(cols[keep].tolist())
        self.r_val.extend(coefs[keep].tolist())
        self.r_start.append(len(self.r_idx))
        self.r_lo.append(lo)
        self.r_hi.append(hi)


class HighsModel:
    def __init__(self, space: Space, req: Request) -> None:
        import highspy  # lazy: start-up time

        self.hp = highspy
        self._formulate(space, req)
        self.h = new_highs(req)
        self._pass()

    def _formulate(self, space: Space, req: Request) -> None:
        """The MILP's columns and rows in ``self.lp`` (no solver yet; the Pyomo model reuses them)."""
        self.space = space
        self.req = req
        self.enforced = req.enforced(FAMILIES)
        self.lp = _Lp()
        self._w_cache: dict[tuple[str, ...], NDArray[np.int_]] = {}
        step_cap, ov_cap, mem_cap, _ = caps(space, F.DEADLINE in self.enforced)
        self._cap = {n: step_cap for n in BUSY_TERMS}
        self._cap.update({n: mem_cap for n in space.memory_names()})
        self._cap["overhead"] = ov_cap - 1.0
        self._build()
        self._check_ranges()

    # -- building -------------------------------------------------------------------------------
    def _weights(self, vars: Sequence[str]) -> NDArray[np.int_]:
        """Joint weights over ``vars`` (C order).

        Variables of the hub (the core layout) are tied to the hub's weights through their joint
        marginal, the others to their one-hot binaries. Sharing one hub distribution keeps the
        tables consistent with each other in the LP relaxation (a junction-tree style tightening
        of plain one-hot marginals), which cuts the branch-and-bound work sharply.
        """
        vars = tuple(vars)
        if vars in self._w_cache:
            return self._w_cache[vars]
        dom = self.space.domains
        shape = tuple(len(dom[v]) for v in vars)
        w = self.lp.cols(int(np.prod(shape))).reshape(shape)
        self._w_cache[vars] = w
        core = tuple(v for v in HUB if v in vars)
        if vars != HUB and len(core) >= 2:
            h = self._weights(HUB)
            wm = self._marginal(w, vars, core)
            hm = self._marginal(h, HUB, core)
            for key in np.ndindex(*wm.shape):
                self.lp.row(np.append(wm[key], hm[key]), np.append(np.ones(len(wm[key])), -np.ones(len(hm[key]))),
                            0.0, 0.0)
            rest = [v for v in vars if v not in core]
        else:
            rest = list(vars)
        for v in rest:
            axis = vars.index(v)
            for a in range(shape[axis]):
                idx = np.take(w, a, axis=axis).reshape(-1)
                self.lp.row(np.append(idx, self.x[v][a]), np.append(np.ones(idx.size), -1.0), 0.0, 0.0)
        return w

    @staticmethod
    def _marginal(w: NDArray[np.int_], vars: Sequence[str], keep: Sequence[str]) -> NDArray[np.object_]:
        """An object array over the joint domain of ``keep``: column lists summing to each cell."""
        order = [vars.index(v) for v in keep] + [i for i, v in enumerate(vars) if v not in keep]
        moved = np.transpose(w, order)
        kshape = moved.shape[:len(keep)]
        flat = moved.reshape(kshape + (-1,))
        out = np.empty(kshape, dtype=object)
        for key in np.ndindex(*kshape):
            out[key] = flat[key]
        return out

    def _values(self, name: str) -> NDArray[np.float64]:
        """A table's values as the encoding uses them: clamped (a relaxation, see encoding.lower)."""
        t = self.space.tables[name]
        if name in self._cap:
            return lower(t.values, self._cap[name])
        finite: NDArray[np.float64] = np.where(np.isfinite(t.values), t.values, 0.0)
        return finite

    def _term(self, name: str, scale: float = 1.0) -> tuple[NDArray[np.int_], NDArray[np.float64]]:
        """(column indices, coefficients) of a term table's value."""
        t = self.space.tables[name]
        w = self._weights(t.vars)
        vals = self._values(name) * scale
        return w.reshape(-1), vals.reshape(-1)

    def _check_ranges(self) -> None:
        """Range check before solving: every coefficient and finite bound within MAX_COEF."""
        lp = self.lp
        vals = np.abs(np.asarray(lp.r_val, dtype=float))
        bounds = np.abs(np.asarray(lp.lo + lp.hi + lp.r_lo + lp.r_hi, dtype=float))
        bounds = bounds[bounds < INF]
        worst = max(float(vals.max()) if vals.size else 0.0, float(bounds.max()) if bounds.size else 0.0)
        if not np.isfinite(vals).all() or not math.isfinite(worst) or worst > MAX_COEF:
            raise EncodingError(f"the MILP needs coefficients up to {worst:.3g}, beyond HiGHS's reliable range")
        nz = vals[vals > 0]
        if nz.size and nz.max() > MAX_RANGE * nz.min():
            raise EncodingError(f"the MILP's coefficients span {nz.min():.3g} to {nz.max():.3g}, a range beyond "
                                "HiGHS's reliable one")

    def _forbid(self, family: str, ok_table: str) -> None:
        if family not in self.enforced:
            return
        t = self.space.tables[ok_table]
        w = self._weights(t.vars).reshape(-1)
        bad = t.values.reshape(-1) < 0.5
        for j in w[bad]:
            self.lp.hi[j] = 0.0

    def _build(self) -> None:
        sp, lp = self.space, self.lp
        dom = sp.domains
        sc = sp.sc
        self.x = {v: lp.cols(len(dom[v]), integer=True) for v in VARS}
        for v in VARS:
            lp.row(self.x[v], 1.0, 1.0, 1.0)
        nic_ok = sp.nic_allowed()
        for i, j in zip(*np.nonzero(~nic_ok), strict=False):
            lp.row([self.x["acc"][i], self.x["nics"][j]], 1.0, -INF, 1.0)
        pp1 = [i for i, p in enumerate(dom["pp"]) if p == 1]
        if pp1 and len(dom["schedule"]) > 1:
            lp.row(np.append(self.x["pp"][pp1], self.x["schedule"][0]), np.append(np.ones(len(pp1)), -1.0), -INF, 0.0)

        for f in STRUCTURAL + EXACT:
            self._forbid(f, F.ok_table(f))
        t = sp.tables["cards"]
        w = self._weights(t.vars).reshape(-1)
        cards = t.values.reshape(-1)
        bad = np.zeros(cards.shape, dtype=bool)
        if F.CARDS in self.enforced:
            bad |= cards > F.limit(F.CARDS, sc)
        if self.req.cards is not None:
            bad |= ~np.isin(cards, list(self.req.cards))
        for j in w[bad]:
            lp.hi[j] = 0.0

        # memory (GiB) <= usable, one row per stage class (tables over the same variables share weights)
        if F.MEMORY_PER_CARD in self.enforced:
            for _, names in sp.memory_classes():
                idx: list[NDArray[Any]] = []
                val: list[NDArray[Any]] = []
                for n in names:
                    cols, coefs = self._term(n, 1.0 / GIB)
                    idx.append(cols)
                    val.append(coefs)
                idx.append(self.x["acc"])
                val.append(-sp.usable() / GIB)
                lp.row(np.concatenate(idx), np.concatenate(val), -INF, 0.0)

        # busy time (s)
        names = BUSY_TERMS
        busy_hi = sum(float(np.max(self._values(n))) for n in names) + 1.0
        self.busy = lp.cols(1, 0.0, busy_hi)[0]
        idx, val = [np.array([self.busy])], [np.array([1.0])]
        for n in names:
            cols, coefs = self._term(n)
            idx.append(cols)
            val.append(-coefs)
        lp.row(np.concatenate(idx), np.concatenate(val), 0.0, 0.0)
        mbt = sp.tables["input.min_busy"].values
        if F.INPUT_THROUGHPUT in self.enforced and np.isfinite(mbt).all() and (mbt > 0).any():
            cols, coefs = self._term("input.min_busy")
            lp.row(np.append(cols, self.busy), np.append(-coefs, 1.0), 0.0, INF)

        # omega disaggregation for finish and cost
        omega = ("acc", *CARD_FACTORS, "nics", "tau", "mode")
        shape = tuple(len(dom[v]) for v in omega)
        one_plus_l = 1.0 + self._broadcast("overhead", omega, shape)
        rate = self._broadcast("rate", omega, shape)
        u = self._weights(omega).reshape(-1)
        n_omega = u.size
        # per-omega bounds of busy (sum of each term's min / max over the variables omega leaves
        # free) make b[omega] in [lo u, hi u] the convex hull of "b = busy if omega is chosen"
        lo_b = np.zeros(shape)
        hi_b = np.zeros(shape)
        for name in names:
            t = sp.tables[name]
            vals = self._values(name)
            lo_b = lo_b + reduce_to(self.space.domains, vals, t.vars, omega, np.min)
            hi_b = hi_b + reduce_to(self.space.domains, vals, t.vars, omega, np.max)
        lo_b, hi_b = lo_b.reshape(-1) * (1 - 1e-9), hi_b.reshape(-1) * (1 + 1e-9) + 1e-9
        b = lp.cols(n_omega, 0.0, busy_hi)
        for j in range(n_omega):
            lp.row([b[j], u[j]], [1.0, -hi_b[j]], -INF, 0.0)
            lp.row([b[j], u[j]], [1.0, -lo_b[j]], 0.0, INF)
        lp.row(np.append(b, self.busy), np.append(np.ones(n_omega), -1.0), 0.0, 0.0)
        iters = T.iteration_count(sc)
        wait = sc.input.wait_s
        reserved = sc.task.reserved_s
        k = iters * one_plus_l.reshape(-1)  # seconds of wall time per second of step
        self.finish = lp.cols(1, 0.0, INF)[0]  # days
        lp.row(np.concatenate([[self.finish], b, u]), np.concatenate([[1.0], -k / DAY, -k * wait / DAY]),
               reserved / DAY, reserved / DAY)
        if F.DEADLINE in self.enforced and chance_on(sc):  # chance form: b + wait u <= step_max u per omega
            smax = self._broadcast(CHANCE_TABLE, omega, shape).reshape(-1)
            for j in range(n_omega):
                lp.row([b[j], u[j]], [1.0, wait - smax[j]], -INF, 0.0)
        elif F.DEADLINE in self.enforced and F.limit(F.DEADLINE, sc) / DAY < INF:
            lp.hi[self.finish] = F.limit(F.DEADLINE, sc) / DAY
        r = rate.reshape(-1)
        self.cost = lp.cols(1, 0.0, INF)[0]
        lp.row(np.concatenate([[self.cost], b, u]), np.concatenate([[1.0], -r * k, -r * (reserved + k * wait)]),
               0.0, 0.0)
        if F.BUDGET in self.enforced and F.limit(F.BUDGET, sc) < INF:  # inf: no budget cap
            lp.hi[self.cost] = F.limit(F.BUDGET, sc)
        self._hub_bounds(names, omega, shape, one_plus_l, rate, iters, wait, reserved)
        self.obj = self.cost if self.req.objective == "cost" else self.finish
        self.obj_factor = 1.0 if self.req.objective == "cost" else DAY  # LP units -> cost / seconds
        lp.cost[self.obj] = 1.0

    def _hub_bounds(self, names: Sequence[str], omega: tuple[str, ...], shape: tuple[int, ...],
                    one_plus_l: NDArray[np.float64], rate: NDArray[Any], iters: float, wait: float,
                    reserved: float) -> None:
        """Valid inequalities on the hub weights: per hub value, each term's minimum over the other
        variables bounds busy time, memory, finish and cost from below (cuts off fractional LP
        points that mix cheap-but-infeasible layouts, without removing any integer plan)."""
        sp, lp = self.space, self.lp
        h = self._weights(HUB).reshape(-1)

        def hub_min(name: str) -> NDArray[Any]:
            t = sp.tables[name]
            vals = self._values(name)
            return reduce_to(self.space.domains, vals, t.vars, HUB, np.min).reshape(-1)

        busy_min = sum(hub_min(n) for n in names)
        lp.row(np.append(h, self.busy), np.append(-busy_min, 1.0), 0.0, INF)
        if F.MEMORY_PER_CARD in self.enforced:
            mem_min = np.max([cast(NDArray[Any], sum(hub_min(n) for n in names)) for _, names in sp.memory_classes()],
                             axis=0)
            usable = reduce_to(self.space.domains, sp.usable(), ("acc",), HUB, np.min).reshape(-1)
            for j in h[mem_min > usable]:
                lp.hi[j] = 0.0
        lmin = reduce_to(self.space.domains, one_plus_l, omega, HUB, np.min).reshape(-1)
        rmin = reduce_to(self.space.domains, rate, omega, HUB, np.min).reshape(-1)
        fin_min = (reserved + iters * lmin * (busy_min + wait)) / DAY
        lp.row(np.append(h, self.finish), np.append(-fin_min, 1.0), 0.0, INF)
        lp.row(np.append(h, self.cost), np.append(-rmin * fin_min * DAY, 1.0), 0.0, INF)

    def _broadcast(self, name: str, target_vars: tuple[str, ...], shape: tuple[int, ...]) -> NDArray[Any]:
        """A table laid out on the joint grid of ``target_vars`` (a superset of its variables)."""
        t = self.space.tables[name]
        return reduce_to(self.space.domains, self._values(name), t.vars, target_vars)

    def _pass(self) -> None:
        hp, lp = self.hp, self.lp
        model = hp.HighsLp()
        model.num_col_ = len(lp.lo)
        model.num_row_ = len(lp.r_lo)
        model.col_cost_ = np.array(lp.cost)
        model.col_lower_ = np.array(lp.lo)
        model.col_upper_ = np.array(lp.hi)
        model.row_lower_ = np.array(lp.r_lo)
        model.row_upper_ = np.array(lp.r_hi)
        model.a_matrix_.format_ = hp.MatrixFormat.kRowwise
        model.a_matrix_.start_ = np.array(lp.r_start, dtype=np.int32)
        model.a_matrix_.index_ = np.array(lp.r_idx, dtype=np.int32)
        model.a_matrix_.value_ = np.array(lp.r_val)
        model.integrality_ = [hp.HighsVarType.kInteger if i else hp.HighsVarType.kContinuous for i in lp.integer]
        self.h.passModel(model)

    # -- solving --------------------------------------------------------------------------------
    def exclude(self, assignment: Mapping[str, int]) -> None:
        idx = [int(self.x[v][assignment[v]]) for v in VARS]
        self.h.addRow(-INF, len(idx) - 1.0, len(idx), np.array(idx, dtype=np.int32), np.ones(len(idx)))

    def solve(self, bound: float | None = None, time_limit: float = 60.0, confirm: bool = True) -> CandidateResult:
        hp = self.hp
        if bound is not None:
            lim = bound / self.obj_factor
            self.h.changeColBounds(int(self.obj), 0.0, min(self.h.getLp().col_upper_[self.obj],
                                                            lim * (1 + 1e-9) + 1e-9))
        self.h.setOptionValue("time_limit", max(0.01, float(time_limit)))
        st = run_highs(self.h)
        if st == hp.HighsModelStatus.kOptimal:
            sol = np.array(self.h.getSolution().col_value)
            a = {v: int(np.argmax(sol[self.x[v]])) for v in VARS}
            return CandidateResult("candidate", a, float(sol[self.obj]) * self.obj_factor)
        if st in (hp.HighsModelStatus.kInfeasible, hp.HighsModelStatus.kUnboundedOrInfeasible):
            if confirm:  # an infeasibility claim ends the search: confirm it without presolve
                self.h.setOptionValue("presolve", "off")
                try:
                    return self.solve(None, time_limit, confirm=False)
                finally:
                    self.h.setOptionValue("presolve", "choose")
            return CandidateResult("infeasible")
        if st != hp.HighsModelStatus.kTimeLimit:
            return CandidateResult("error", detail=f"HiGHS status {self.h.modelStatusToString(st)}")
        info = self.h.getInfo()
        bound = float(info.mip_dual_bound) * self.obj_factor if math.isfinite(info.mip_dual_bound) else None
        if info.primal_solution_status == 2:  # feasible point at the time limit
            sol = np.array(self.h.getSolution().col_value)
            a = {v: int(np.argmax(sol[self.x[v]])) for v in VARS}
            return CandidateResult("feasible", a, float(sol[self.obj]) * self.obj_factor, bound=bound)
        return CandidateResult("limit", bound=bound)


# ---------------------------------------------------------------------------------------------
# the layout decomposition's master (:func:`tpopt.optimizer.decompose.solve_decomposed`)


class HighsMaster:
    """HiGHS master: one binary per allowed layout, theta = sum bound[h] y[h]."""

    name = "highs"

    def __init__(self, space: Space, bounds: MasterBounds, allowed: Allowed, req: Request) -> None:
        import highspy  # lazy: start-up time

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
        self.bound_row: int | None = None

    def exclude(self, h: int) -> None:
        j = np.flatnonzero(self.cols == h)
        if j.size:
            self.h.changeColBounds(int(j[0]), 0.0, 0.0)

    def solve(self, bound: float | None, time_limit: float) -> MasterAnswer:
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


HIGHS = RelaxedBackend("HiGHS", HighsModel, HighsMaster)
"""The HiGHS MILP as a backend (registered as ``highs``): the encoding above and its decomposition master."""
