"""The plan model as a Pyomo MILP: one formulation for any solver Pyomo drives, and LP/MPS export.

``--solver pyomo:NAME`` solves the plan model with any MILP solver Pyomo can run: ``highs``
(highspy), ``scip`` (PySCIPOpt, else a ``scip`` executable), ``gurobi`` (gurobipy, else the
``gurobi_cl`` shell), ``cbc`` and ``glpk`` (their executables on PATH), and every other name Pyomo's
``SolverFactory`` knows (``cplex``, ``xpress``, ...). ``tpopt solve --export plan.lp|plan.mps``
writes the same model for a team's own solver.

Which model: the *monolithic* MILP of :mod:`tpopt.optimizer.backends.highs_model` (one-hot choices, joint weights
per term table tied to a shared layout hub, the two products disaggregated over omega), built by the
very same code and translated column by column and row by row into Pyomo. It is the one complete
formulation: its optimum *is* a plan, so an exported file is useful on its own, and it is the same
matrix the ``highs`` backend solves, so the two cannot drift apart. For design spaces whose term
tables are too large to encode whole (``--method auto`` picks by table size, as for the other
backends) the Pyomo solver instead runs the layout decomposition's master problem
(:class:`PyomoMaster`: one binary per layout, its valid lower bound as cost), whose subproblems the
vectorised evaluator solves exactly; that keeps large spaces fast with any solver.

Exactness: the MILP is solved inside the same solve-verify loop as every backend
(:func:`tpopt.optimizer.core.verify_loop`): each candidate is re-evaluated with the exact evaluator,
cut with a no-good constraint, and the loop stops only when the solver proves that no remaining
assignment can beat the best verified plan. Solver tolerances therefore cost rounds, never answers.

Names in the model (and in exported files): ``choose_<variable>(<value>)`` is 1 for the chosen value
of each decision variable (acc, tp, pp, dp, mb, zero, offload, recompute, schedule, nics, tau (``auto``
= the optimal interval for the card count), mode, ep, etp (0 = as tp), cap (0 = dropless));
``joint_<variables>(k)`` are the joint weights of
a term table (k = C-order index over those variables' domains); ``busy_s`` (step busy time, s),
``finish_days`` and ``cost`` (currency, or card-hours without prices) carry the units of the HiGHS
model; ``busy_split(k)`` are the disaggregated busy times; rows are ``row(i)``.

Pyomo is imported only here, and this module only when a Pyomo solver or an export is asked for.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, NoReturn, TypeAlias, cast

import numpy as np

from tpopt.errors import InputError
from tpopt.files import refuse_symlink
from tpopt.optimizer.backends.highs_model import INF, HighsModel
from tpopt.optimizer.backends.protocol import Allowed, CandidateResult, CapabilityError, MasterAnswer, MasterBounds
from tpopt.optimizer.limits import checkpoint
from tpopt.optimizer.result import Request
from tpopt.optimizer.space import VARS, Space

if TYPE_CHECKING:
    from tpopt.optimizer.result import SolverInfo

Options: TypeAlias = Callable[[int], dict[str, Any]]
"""A solver's options for a random seed."""

PREFIX = "pyomo:"
EXPORT_FORMATS = (".lp", ".mps")
# coefficients below this fraction of their row's largest are dropped: far inside every solver's
# tolerances, but left in they wreck the scaling of some (GLPK declared a model with a reserved time of
# 1e-37 d, i.e. 1e-34 coefficients in the cost row, infeasible); the verify loop re-checks every plan
NEGLIGIBLE = 1e-12
EXPORT_LIMIT = 1_000_000  # columns; beyond this an export (and a Pyomo build) would take minutes

# tpopt name -> (API, Pyomo name) interfaces to try in order; "v2" is pyomo.contrib.solver's
# interface (in-process, persistent: no-good cuts are added incrementally), "legacy" the classic
# SolverFactory (executables are re-run on a written file each round)
INTERFACES = {
    "highs": (("v2", "highs"),),
    "scip": (("v2", "scip_persistent"), ("legacy", "scip")),
    "gurobi": (("v2", "gurobi_persistent"), ("legacy", "gurobi")),
    "cbc": (("legacy", "cbc"),),
    "glpk": (("legacy", "glpk"),),
}
KNOWN = tuple(INTERFACES)

# options that make each known solver prove optimality to a zero gap, deterministically
LEGACY_OPTIONS: dict[str, Options] = {
    # CBC 2.10's preprocessing wrongly declares some of these models infeasible ("Cut generators found
    # to be infeasible", reproduced with Debian's 2.10.8 on a model HiGHS, SCIP and GLPK solve): off
    "cbc": lambda seed: {"ratioGap": 0.0, "allowableGap": 0.0, "randomSeed": seed + 1, "preprocess": "off"},
    "glpk": lambda seed: {"mipgap": 0.0},
    "scip": lambda seed: {"limits/gap": 0.0, "limits/absgap": 0.0, "randomization/randomseedshift": seed,
                          "presolving/implics/maxrounds": 0},
    "gurobi": lambda seed: {"MIPGap": 0.0, "MIPGapAbs": 0.0, "Seed": seed, "Threads": 1},
}
V2_OPTIONS: dict[str, Options] = {
    "highs": lambda seed: {"random_seed": seed},
    # SCIP 10's implication presolver (PySCIPOpt 6.3) wrongly proves some of these models infeasible
    # (a busy time bounded by u lo <= b <= u hi with lo and hi 1e-9 apart; HiGHS, CBC and GLPK solve them,
    # and so does SCIP without that presolver or with numerics emphasis): off
    "scip_persistent": lambda seed: {"randomization/randomseedshift": seed, "presolving/implics/maxrounds": 0},
    "gurobi_persistent": lambda seed: {"Seed": seed},
}



def _no_options(seed: int) -> dict[str, Any]:
    """The options of a solver tpopt knows nothing about: none."""
    return {}


def is_pyomo(backend: str) -> bool:
    return isinstance(backend, str) and backend.startswith(PREFIX)


def solver_name(backend: str) -> str:
    """``pyomo:cbc`` -> ``cbc`` (a bare ``pyomo`` or ``pyomo:`` is an error)."""
    name = backend[len(PREFIX):].strip() if is_pyomo(backend) else ""
    if not name or not re.fullmatch(r"[A-Za-z0-9_.\-]+", name):
        raise InputError(f"solver {backend!r}: name the Pyomo solver, e.g. pyomo:highs "
                         f"(known here: {', '.join(PREFIX + k for k in KNOWN)}, or any Pyomo SolverFactory name)")
    return name


@contextlib.contextmanager
def _quiet_pyomo() -> Iterator[None]:
    """Pyomo logs solver failures (with tracebacks) before raising; tpopt reports one line instead."""
    log = logging.getLogger("pyomo")
    level = log.level
    log.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        log.setLevel(level)


def _import_pyomo() -> ModuleType:
    try:
        import pyomo.environ as pyo  # lazy: start-up time
    except ImportError as exc:  # pragma: no cover - pyomo is a declared dependency
        raise InputError(f"the Pyomo backend needs pyomo ({exc}); install it with: pip install pyomo") from None
    module: ModuleType = pyo
    return module


class PyomoSolver:
    """One Pyomo solver interface, resolved once: availability checked, options fixed.

    ``solve(model, time_limit)`` loads the solution into the model and returns "optimal",
    "feasible" (a solution without proof, at the time limit), "infeasible" or "unknown".
    """

    def __init__(self, backend: str, req: Request) -> None:
        self.backend = backend
        self.name = solver_name(backend)
        self.req = req
        self.pyo = _import_pyomo()
        with _quiet_pyomo():
            self.api, self.pyomo_name, self.opt = self._resolve()

    def _resolve(self) -> tuple[str, str, Any]:
        pyo = self.pyo
        tried: list[str] = []
        for api, pname in INTERFACES.get(self.name, (("legacy", self.name),)):
            if api == "v2":
                from pyomo.contrib.solver.common.factory import SolverFactory as V2Factory  # lazy: start-up time

                try:
                    opt = V2Factory(pname)
                    ok = bool(opt.available())
                except Exception as exc:  # a broken or unlicensed install: say so, try the next
                    ok, tried = False, tried + [f"{pname}: {_first_line(exc)}"]
                    continue
            else:
                opt = pyo.SolverFactory(pname)
                if type(opt).__name__ == "UnknownSolver":
                    raise InputError(f"solver {self.backend!r}: Pyomo knows no solver named {pname!r} "
                                     f"(known here: {', '.join(PREFIX + k for k in KNOWN)})")
                try:
                    ok = bool(opt.available(exception_flag=False))
                except Exception as exc:
                    ok, tried = False, tried + [f"{pname}: {_first_line(exc)}"]
                    continue
            if ok:
                return api, pname, opt
            tried.append(f"{pname}: not available")
        hint = HINTS.get(self.name, "install the solver so that Pyomo can find it")
        raise InputError(f"solver {self.backend!r} is not installed here ({'; '.join(tried)}); {hint}")

    def solve(self, model: Any, time_limit: float) -> str:
        seed = int(self.req.seed)
        with _quiet_pyomo():
            if self.api == "v2":
                return self._solve_v2(model, time_limit, seed)
            return self._solve_legacy(model, time_limit, seed)

    def _call(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        """Run the solver; its own failures (licence, crash, unreadable output) become one line."""
        try:
            return fn(*args, **kw)
        except subprocess.TimeoutExpired:
            raise _Timeout() from None
        except Exception as exc:
            raise InputError(f"solver {self.backend!r} failed: {_first_line(exc)}") from None

    def _solve_v2(self, model: Any, time_limit: float, seed: int) -> str:
        from pyomo.contrib.solver.common.results import SolutionStatus  # lazy: start-up time
        from pyomo.contrib.solver.common.results import TerminationCondition as TC  # lazy: start-up time

        opts = V2_OPTIONS.get(self.pyomo_name, _no_options)(seed)
        res = self._call(self.opt.solve, model, load_solutions=False, raise_exception_on_nonoptimal_result=False,
                         time_limit=max(0.01, float(time_limit)), threads=max(1, int(self.req.workers)),
                         rel_gap=0.0, abs_gap=0.0, solver_options=opts)
        tc, ss = res.termination_condition, res.solution_status
        if tc in (TC.provenInfeasible, TC.infeasibleOrUnbounded, TC.locallyInfeasible):
            return "infeasible"
        if ss in (SolutionStatus.optimal, SolutionStatus.feasible):
            res.solution_loader.load_vars()
            return "optimal" if tc == TC.convergenceCriteriaSatisfied else "feasible"
        if tc in (TC.error, TC.licensingProblems):
            raise InputError(f"solver {self.backend!r} failed ({tc.name})")
        return "unknown"

    def _solve_legacy(self, model: Any, time_limit: float, seed: int) -> str:
        from pyomo.opt import SolutionStatus as SS  # lazy: start-up time
        from pyomo.opt import TerminationCondition as TC  # lazy: start-up time

        self.opt.options.update(LEGACY_OPTIONS.get(self.pyomo_name, _no_options)(seed))
        try:
            res = self._call(self.opt.solve, model, load_solutions=False, timelimit=max(1, math.ceil(time_limit)))
        except _Timeout:  # the executable ignored its own limit and Pyomo stopped it: no answer in time
            return "unknown"
        tc = res.solver.termination_condition
        if tc in (TC.infeasible, TC.infeasibleOrUnbounded, TC.noSolution):
            return "infeasible"
        sols = len(res.solution) if res.solution is not None else 0
        if sols and res.solution(0).status in (SS.optimal, SS.globallyOptimal, SS.locallyOptimal, SS.feasible,
                                               SS.bestSoFar):
            model.solutions.load_from(res)
            return "optimal" if tc in (TC.optimal, TC.globallyOptimal) else "feasible"
        if tc in (TC.error, TC.solverFailure, TC.internalSolverError, TC.licensingProblems):
            raise InputError(f"solver {self.backend!r} failed ({tc})")
        return "unknown"


class _Timeout(Exception):
    """A solver executable outlived its time limit."""


HINTS = {
    "highs": "pip install highspy",
    "scip": "pip install 'tpopt[scip]' (PySCIPOpt), or put a scip executable built with AMPL support on PATH",
    "gurobi": "pip install gurobipy (a licence is needed beyond its size-limited trial)",
    "cbc": "install CBC, e.g. apt-get install coinor-cbc, or put a cbc executable on PATH",
    "glpk": "install GLPK, e.g. apt-get install glpk-utils (glpsol), or put glpsol on PATH",
}


def _first_line(exc: Exception) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]


# ---------------------------------------------------------------------------------------------
# the monolithic MILP


class MilpFormulation(HighsModel):
    """The HiGHS MILP's columns and rows (:class:`~tpopt.optimizer.backends.highs_model.HighsModel`), built by the
    same code, without creating a HiGHS instance."""

    def __init__(self, space: Space, req: Request) -> None:  # not super().__init__: that would also start HiGHS
        self._formulate(space, req)


def estimated_columns(space: Space) -> int:
    """An upper estimate of the MILP's columns: one weight per entry of every term table."""
    return int(sum(t.values.size for t in space.tables.values()))


def _label(value: object) -> int | float | str:
    """A domain value as an LP/MPS-safe index: 8, 600, 0.5, rtx4090, norm_mlp, fill_drain."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return int(value) if float(value).is_integer() else float(value)
    return re.sub(r"[^A-Za-z0-9_.]", "_", str(value))


def _columns(f: MilpFormulation) -> list[tuple[str, object]]:
    """(component, index) per column: the readable name each column gets in the Pyomo model."""
    n = len(f.lp.lo)
    names: list[tuple[str, object] | None] = [None] * n
    dom = f.space.domains
    for vars, w in f._w_cache.items():
        comp = "joint_" + "_".join(vars)
        for k, j in enumerate(np.asarray(w).reshape(-1).tolist()):
            names[j] = (comp, k)
    for v in VARS:
        for a, j in enumerate(f.x[v].tolist()):
            val = dom[v][a]
            names[j] = ("choose_" + v, "auto" if v == "tau" and float(val) == 0.0 else _label(val))
    names[int(f.busy)] = ("busy_s", None)
    names[int(f.finish)] = ("finish_days", None)
    names[int(f.cost)] = ("cost", None)
    k = 0
    for j in range(n):
        if names[j] is None:  # the disaggregated busy time per omega (the one unnamed block)
            names[j] = ("busy_split", k)
            k += 1
    return cast(list[tuple[str, object]], names)  # every column named by now


def build_pyomo(f: MilpFormulation, name: str = "tpopt") -> tuple[Any, list[Any]]:
    """A Pyomo ConcreteModel with exactly the columns, bounds, integrality, rows and objective of
    the formulation; returns (model, list of the Pyomo variable per column)."""
    pyo = _import_pyomo()
    from pyomo.core.expr.numeric_expr import LinearExpression  # lazy: start-up time

    lp = f.lp
    m = pyo.ConcreteModel(name=name)
    cols = _columns(f)
    groups: dict[str, list[object]] = {}
    for comp, idx in cols:
        groups.setdefault(comp, []).append(idx)
    for comp, idx in groups.items():
        if idx == [None]:
            m.add_component(comp, pyo.Var(domain=pyo.Reals))
        else:
            m.add_component(comp, pyo.Var(idx, domain=pyo.Reals))
    var: list[Any] = []
    for j, (comp, idx) in enumerate(cols):
        if j % 256 == 0:
            checkpoint()  # a time limit stops the model's building here (a stoppable phase's clock)
        c = m.component(comp)
        v = c if idx is None else c[idx]
        lo, hi = lp.lo[j], lp.hi[j]
        if lp.integer[j]:
            v.domain = pyo.Binary if (lo >= 0.0 and hi <= 1.0) else pyo.Integers
        v.setlb(None if lo <= -INF else lo)
        v.setub(None if hi >= INF else hi)
        var.append(v)

    starts = lp.r_start

    def row(_: Any, i: int) -> Any:
        a, b = starts[i], starts[i + 1]
        vals = lp.r_val[a:b]
        top = max((abs(v) for v in vals), default=0.0)
        keep = [k for k, v in enumerate(vals) if abs(v) > NEGLIGIBLE * top]
        expr = LinearExpression(constant=0.0, linear_coefs=[vals[k] for k in keep],
                                linear_vars=[var[lp.r_idx[a + k]] for k in keep])
        lo, hi = lp.r_lo[i], lp.r_hi[i]
        if lo == hi:
            return expr == lo
        return (None if lo <= -INF else lo, expr, None if hi >= INF else hi)

    checkpoint()
    m.row = pyo.Constraint(range(len(lp.r_lo)), rule=row)
    checkpoint()
    m.nogood = pyo.ConstraintList()
    m.objective = pyo.Objective(expr=sum(c * var[j] for j, c in enumerate(lp.cost) if c != 0.0),
                                sense=pyo.minimize)
    return m, var


class PyomoMilp:
    """The monolithic MILP in Pyomo, solved by a Pyomo solver inside the solve-verify loop
    (the same ``solve`` / ``exclude`` protocol as the CP-SAT and HiGHS models)."""

    def __init__(self, space: Space, req: Request, backend: str) -> None:
        self.solver = PyomoSolver(backend, req)  # first: a missing solver fails before any build
        self.space = space
        self.f = MilpFormulation(space, req)
        self.m, self.var = build_pyomo(self.f, name="tpopt_plan")
        self.obj_var = self.var[int(self.f.obj)]
        self.obj_ub = self.obj_var.ub
        self.choose = {v: [self.var[j] for j in self.f.x[v].tolist()] for v in VARS}

    def exclude(self, assignment: Mapping[str, int]) -> None:
        picked = [self.choose[v][assignment[v]] for v in VARS]
        self.m.nogood.add(sum(picked) <= len(picked) - 1)

    def solve(self, bound: float | None = None, time_limit: float = 60.0) -> CandidateResult:
        if bound is not None:
            lim = bound / self.f.obj_factor * (1 + 1e-9) + 1e-9
            self.obj_var.setub(lim if self.obj_ub is None else min(self.obj_ub, lim))
        st = self.solver.solve(self.m, time_limit)
        if st == "infeasible":
            return CandidateResult("infeasible")
        if st == "unknown":
            return CandidateResult("unknown")
        a = {v: int(np.argmax([_value(x) for x in self.choose[v]])) for v in VARS}
        obj = _value(self.obj_var) * self.f.obj_factor
        return CandidateResult("candidate" if st == "optimal" else "feasible", a, obj)


def model_class(backend: str) -> Callable[[Space, Request], PyomoMilp]:
    """``Model(space, req)`` for the solve-verify loop of :mod:`tpopt.optimizer.core`."""
    solver_name(backend)

    def make(space: Space, req: Request) -> PyomoMilp:
        return PyomoMilp(space, req, backend)

    return make


def _value(v: Any) -> float:
    x = v.value
    return float("nan") if x is None else float(x)


# ---------------------------------------------------------------------------------------------
# the layout decomposition's master


class PyomoMaster:
    """Master problem of :func:`tpopt.optimizer.decompose.solve_decomposed` in Pyomo: one binary
    per allowed layout, exactly one chosen, cost = that layout's valid lower bound."""

    name = "pyomo"

    def __init__(self, space: Space, bounds: MasterBounds, allowed: Allowed, req: Request, backend: str) -> None:
        self.solver = PyomoSolver(backend, req)
        pyo = self.solver.pyo
        ok = np.ones(bounds.n, dtype=bool)
        for a in allowed.values():
            ok &= a
        ok &= np.isfinite(bounds.objective_min)
        self.cols = np.flatnonzero(ok).tolist()
        obj = bounds.objective_min
        if not self.cols:
            return  # no layout is allowed: solve() answers "infeasible"
        self.scale = 1.0 / max(1e-300, float(np.max(np.abs(obj[ok]))))  # costs of order 1 for every solver
        m = self.m = pyo.ConcreteModel(name="tpopt_layout_master")
        m.layout = pyo.Var(self.cols, domain=pyo.Binary)
        m.one = pyo.Constraint(expr=sum(m.layout[h] for h in self.cols) == 1)
        self.theta = sum(float(obj[h]) * self.scale * m.layout[h] for h in self.cols)
        m.objective = pyo.Objective(expr=self.theta, sense=pyo.minimize)
        m.limit = pyo.Param(mutable=True, initialize=2.0)  # every theta <= 1: no limit until a plan is known
        m.bound = pyo.Constraint(expr=self.theta <= m.limit)
        self.left = len(self.cols)

    def exclude(self, h: int) -> None:
        if h in self.m.layout and not self.m.layout[h].fixed:
            self.m.layout[h].fix(0)
            self.left -= 1

    def solve(self, bound: float | None, time_limit: float) -> MasterAnswer:
        if not self.cols or not self.left:  # nothing allowed, or every layout already evaluated
            return "infeasible", None
        if bound is not None:
            self.m.limit.set_value(bound * self.scale * (1 + 1e-12) + 1e-12)
        st = self.solver.solve(self.m, time_limit)
        if st in ("infeasible", "unknown"):
            return st, None
        vals = [_value(self.m.layout[h]) for h in self.cols]
        return "candidate", int(self.cols[int(np.nanargmax(vals))])


# ---------------------------------------------------------------------------------------------
# export


def check_export_path(path: str | os.PathLike[str]) -> Path:
    """The export target, validated before anything is solved or written."""
    p = Path(path)
    if p.suffix.lower() not in EXPORT_FORMATS:
        raise InputError(f"--export {path}: the file name must end in .lp or .mps")
    if p.is_dir():
        raise InputError(f"--export {path}: is a directory")
    refuse_symlink(p, "--export")
    if not p.parent.exists():
        raise InputError(f"--export {path}: directory {str(p.parent)!r} does not exist")
    return p


def _umask() -> int:
    """The process's file-creation mask (read by setting it and putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def export_model(space: Space, req: Request, path: str | os.PathLike[str]) -> dict[str, Any]:
    """Write the monolithic MILP of ``space`` under ``req`` to ``path`` (.lp or .mps), atomically.

    The file is the model before any no-good cut: minimising it gives the optimal plan of the
    formulation up to the solver's tolerances (tpopt itself re-verifies every candidate exactly).
    Returns {path, format, variables, constraints, objective}.
    """
    p = check_export_path(path)
    est = estimated_columns(space)
    if est > EXPORT_LIMIT:
        raise InputError(f"--export: the model would have up to {est:,} columns (limit {EXPORT_LIMIT:,}); "
                         "narrow the [search] domains to export it")
    f = MilpFormulation(space, req)
    name = re.sub(r"[^A-Za-z0-9_]", "_", f"tpopt_{space.sc.name or 'plan'}_{req.objective}")
    fmt = p.suffix.lower()[1:]
    tmp = ""
    try:
        fd, tmp = tempfile.mkstemp(prefix="tpopt-export-", suffix=p.suffix, dir=str(p.parent))
        os.close(fd)
        with _quiet_pyomo():  # Pyomo logs to stdout; keep tables and JSON clean
            m, _ = build_pyomo(f, name=name)
            m.del_component(m.nogood)
            m.write(tmp, io_options={"symbolic_solver_labels": True})  # format from the suffix
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it 0600; the file gets what open() would give it
        os.replace(tmp, p)
    except OSError as exc:
        raise InputError(f"--export {path}: cannot write ({exc.strerror or exc})") from None
    finally:
        if tmp and os.path.exists(tmp):
            os.unlink(tmp)
    return {"path": str(p), "format": fmt, "variables": len(f.lp.lo), "constraints": len(f.lp.r_lo),
            "objective": "cost" if req.objective == "cost" else "finish_days"}


# ---------------------------------------------------------------------------------------------
# the backend


class Pyomo:
    """Any MILP solver Pyomo drives as a backend (registered as the family ``pyomo:NAME``): one entry, any
    ``pyomo:NAME`` whose solver Pyomo can run here; the solver itself is resolved, and checked installed, by
    name."""

    def require(self, name: str, req: Request) -> None:
        """A missing solver fails here, before anything is written."""
        PyomoSolver(name, req)

    def model(self, name: str, space: Space, req: Request) -> PyomoMilp:
        return model_class(name)(space, req)

    def master(self, name: str, space: Space, bounds: MasterBounds, allowed: Allowed, req: Request) -> PyomoMaster:
        return PyomoMaster(space, bounds, allowed, req, name)

    def solve_space(self, name: str, space: Space, req: Request, info: SolverInfo) -> NoReturn:
        raise CapabilityError("Pyomo", "whole-space solve (it answers through its model and the solve-verify loop)")


PYOMO = Pyomo()
