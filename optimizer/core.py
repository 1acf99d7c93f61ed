"""`solve`: one design space, any registered backend, one result type.

The solver backends (CP-SAT, HiGHS) optimise integer-scaled / floating-point encodings of the term
tables. Their encodings are *relaxations* by construction (every table value rounded towards
feasibility and a lower objective), so no plan that is feasible in exact arithmetic is cut off.
Every candidate they return is re-evaluated with the exact evaluator; an infeasible candidate is
excluded with a no-good cut, and the search continues until no unexamined assignment can beat the
best verified plan (solve-verify loop). The result is therefore the exact optimum of the same model
the enumerator evaluates, which the property tests check.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from tpopt.errors import InputError
from tpopt.models import terms as T
from tpopt.models.evaluate import Evaluation
from tpopt.models.plan import Scenario
from tpopt.optimizer import backends
from tpopt.optimizer.backends import Solver
from tpopt.optimizer.backends.protocol import SolverFailure
from tpopt.optimizer.backends.verify import verify_loop
from tpopt.optimizer.limits import EncodingError, TimeLimitReached, clock_of
from tpopt.optimizer.memory_plan import enforce as enforce_memory
from tpopt.optimizer.result import Request, SolveResult, SolverInfo, Status
from tpopt.optimizer.space import FAMILIES, Space

MONOLITHIC_LIMIT = 2_000  # largest term table (rows) for which "auto" uses the monolithic encoding
# (measured in benchmarks/solve_scaling.py: the layout decomposition is as fast at small sizes and
# far faster beyond; the monolithic model stays for tiny spaces and for conflict cores)


TINY_SPACE = 20_000
"""Plans up to which ``--method auto`` proves the optimum by evaluating every plan (vectorised): faster
than loading a solver, whose import alone takes longer than such a space's whole enumeration."""
TINY_NOTE = "tiny space: every plan evaluated"


def tiny_solver(space: Space, solver: Solver, method: str = "auto", named: bool = False) -> Solver:
    """The solver to run: the enumerator for tiny spaces under ``--method auto`` (when the chosen
    backend declares ``tiny_by_enumeration``), else the one asked for. A solver the user ``named``
    (``--solver``) is replaced only on flat spaces, where enumeration is measured faster at every size up
    to :data:`TINY_SPACE`; on per-operation spaces, whose every plan simulates its pipeline, it is not
    (benchmarks/tiny_space.py: 4,096 plans enumerated in 4.2 s where CP-SAT takes 0.35 s and HiGHS 0.26 s;
    docs/benchmarks.md). The default solver is still replaced there: the stages of the long-context
    example are enumerated in 2.5 s and 0.3 s where CP-SAT takes 17 s and 29 s."""
    if solver.capabilities.tiny_by_enumeration and method == "auto" and space.size() <= TINY_SPACE \
            and space.cheap_pipeline() and not (named and T.per_op_model(space.sc)):
        return backends.resolve(backends.EXHAUSTIVE)
    return solver


ON_DEMAND_ROWS = 1_000_000
"""Largest term table (rows) beyond which "auto" builds the tables one layout group at a time
(:mod:`tpopt.optimizer.ondemand`) even when every table would fit the memory budget. Measured
(benchmarks/solve_scaling.py, Llama-3-70B ladder, CPU s): 2.2e7 plans (largest table 0.11 M rows) 0.15 full vs
0.13 on demand; 2.2e8 plans (1.08 M rows) 0.60 vs 0.25; 1.1e9 plans (3.8 M rows) 2.67 vs 0.87."""


def use_on_demand(space: Space, req: Request, method: str) -> bool:
    """Tables per layout group, on demand: as requested, or under "auto" when the memory plan chose it
    (``method``: :attr:`MemoryPlan.method`) or the largest table exceeds :data:`ON_DEMAND_ROWS`."""
    if req.method == "on-demand":
        return True
    return req.method == "auto" and (method == "on-demand" or space.largest_table() > ON_DEMAND_ROWS)


def use_decomposition(space: Space, req: Request) -> bool:
    """Monolithic encoding for small term tables, layout decomposition beyond (or as requested)."""
    if req.method in ("monolithic", "decomposed", "on-demand"):
        return req.method != "monolithic"
    if req.method != "auto":
        raise InputError(f"unknown solve method {req.method!r} (use auto, monolithic, decomposed or on-demand)")
    return space.largest_table() > MONOLITHIC_LIMIT


def solve(sc: Scenario, backend: str | Solver = backends.DEFAULT, req: Request | None = None,
          restrict: Mapping[str, Iterable[Any]] | None = None, space: Space | None = None) -> SolveResult:
    """The best ``req.top`` plans of the scenario's design space under ``req``.

    Every phase (tables, solve, verification) draws on one clock (``req.clock``, made from
    ``req.time_limit`` if absent). When it runs out the best verified plans so far are returned
    with status ``feasible`` and their gap (``None`` when no bound is known), or ``unknown`` with
    none; ``info.limit_reached`` / ``info.limit_phase`` say where. A backend that cannot encode the
    scenario exactly, or fails otherwise, falls back (monolithic -> layout decomposition ->
    enumeration) and ``info.fallback`` says why; it never reports a time limit the clock did not reach.
    ``backend``: a :class:`~tpopt.optimizer.backends.Solver`, or its name (checked here).
    """
    req = req or Request()
    solver = backends.checked(backend)
    if space is None and sc.stages:
        raise InputError(STAGED)
    if space is None and tuple(sc.search.global_batch or (sc.task.global_batch,)) != (sc.task.global_batch,):
        raise InputError("the global batch is a choice ([search] global_batch): this path solves one batch; "
                         "use tpopt solve (tpopt.optimizer.outer.solve in Python: one space each)")
    clock = clock_of(req)
    t0 = time.perf_counter()
    enforced = req.enforced(FAMILIES)
    info = SolverInfo(name=solver.name)
    plans: list[Evaluation] = []
    status = Status.UNKNOWN
    try:
        with clock.stoppable("building the term tables"):
            space = space or Space.from_scenario(sc, restrict)
            info.points = space.size()
            caps = solver.capabilities
            on_demand = False
            if caps.needs_tables:
                mp = enforce_memory(space)  # refused before any table is allocated when over the memory budget
                use_decomposition(space, req)  # an unknown method is refused here
                # one layout group's tables at a time when every table at once would not fit (or as requested)
                on_demand = caps.decomposed and use_on_demand(space, req, mp.method)
                if not on_demand:
                    space.build_tables()  # the tables the solve reads, inside the limit
        plans, status = _on_demand(space, req, enforced, info) if on_demand else \
            _dispatch(space, solver, req, enforced, info)
    except TimeLimitReached:
        status = Status.UNKNOWN
    if clock.reached:
        info.limit_reached, info.limit_phase = True, clock.phase
        info.gap = 0.0 if status == Status.OPTIMAL else info.gap if status == Status.FEASIBLE else None
    info.wall_s = time.perf_counter() - t0
    return SolveResult(status=status, objective=req.objective, plans=plans, solver=info,
                       enforced=tuple(f for f in FAMILIES if f in enforced))


def _on_demand(space: Space, req: Request, enforced: Collection[str], info: SolverInfo
               ) -> tuple[list[Evaluation], Status]:
    """The layout decomposition with tables per layout group, built on demand (:mod:`tpopt.optimizer.ondemand`)."""
    from tpopt.optimizer.ondemand import solve_on_demand  # lazy: start-up time (large spaces only)

    plans, status, groups, evaluated, gap, certificate = solve_on_demand(space, req, enforced)
    info.rounds, info.evaluated, info.gap, info.certificate = groups, evaluated, gap, certificate
    info.note = "layout decomposition on demand"
    return plans, status


def _dispatch(space: Space, solver: Solver, req: Request, enforced: Collection[str], info: SolverInfo
              ) -> tuple[list[Evaluation], Status]:
    """Run the requested formulation, falling back when it cannot answer (see :func:`solve`)."""
    caps, impl, backend = solver.capabilities, solver.backend, solver.name
    if not (caps.monolithic or caps.decomposed):  # the backend answers the space itself
        return impl.solve_space(backend, space, req, info)
    decomposed = caps.decomposed and (use_decomposition(space, req) or not caps.monolithic)
    if not decomposed:
        try:
            with clock_of(req).stoppable("building the solver model"):
                model = impl.model(backend, space, req)
            plans, status, rounds, gap, evaluated = verify_loop(model, space, req, enforced)
            info.rounds, info.gap, info.evaluated = rounds, gap, evaluated
            info.note = "monolithic"
            return plans, status
        except (EncodingError, SolverFailure) as exc:
            if not caps.decomposed:
                info.fallback = f"monolithic {backend}: {exc}; answered by enumeration"
                return _exhaustive(space, req, info)
            info.fallback = f"monolithic {backend}: {exc}; answered by the layout decomposition"
    try:
        from tpopt.optimizer.decompose import solve_decomposed  # lazy: start-up time (tiny spaces never decompose)

        proof: dict[str, float] = {}
        plans, status, rounds, evaluated, gap = solve_decomposed(space, impl.master, backend, req, enforced, proof)
    except SolverFailure as exc:
        info.fallback = (info.fallback + "; " if info.fallback else "") + \
            f"decomposition: {exc}; answered by enumeration"
        return _exhaustive(space, req, info)
    info.rounds, info.evaluated, info.gap = rounds, evaluated, gap
    info.certificate = proof.get("certificate")
    info.note = "layout decomposition"
    return plans, status


def _exhaustive(space: Space, req: Request, info: SolverInfo) -> tuple[list[Evaluation], Status]:
    """The last fallback of every backend: every plan evaluated exactly (:data:`backends.EXHAUSTIVE`)."""
    last = backends.resolve(backends.EXHAUSTIVE)
    return last.backend.solve_space(last.name, space, req, info)


STAGED = ("a staged scenario ([[task.stages]]) is planned stage by stage: use tpopt solve "
          "or tpopt evaluate")
