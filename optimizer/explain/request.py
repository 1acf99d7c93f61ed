"""A request explained: the optimum and what binds it, or, when no plan is feasible, why and the least change.

:func:`explain_request` solves the request; :func:`infeasibility` puts together the conflict
(:mod:`~tpopt.optimizer.explain.conflicts`) and the relaxations (:mod:`~tpopt.optimizer.explain.relax`).
Tests that keep the analysis from reading every table patch ``make_oracle`` on this module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from tpopt.catalogs import Catalog
from tpopt.models import families as F
from tpopt.models.plan import Scenario
from tpopt.optimizer import footing
from tpopt.optimizer.backends import Solver, resolve
from tpopt.optimizer.core import TINY_NOTE, tiny_solver
from tpopt.optimizer.core import solve as solve_space
from tpopt.optimizer.explain.conflicts import conflict_detail, minimal_conflict
from tpopt.optimizer.explain.context import Context
from tpopt.optimizer.explain.relax import relaxations
from tpopt.optimizer.limits import TimeLimitReached, Undecided, clock_of
from tpopt.optimizer.memory_plan import enforce as enforce_memory
from tpopt.optimizer.report import RELAXABLE, Binding, binding_families, make_oracle
from tpopt.optimizer.result import Request, Status
from tpopt.optimizer.space import Space


def infeasibility(sc: Scenario, space: Space, backend: str | Solver, req: Request,
                  enforced: Iterable[str] | None = None, *, raw: dict[str, Any] | None = None,
                  catalog: Catalog | None = None, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Everything said about a request proven to have no plan: an irreducible conflict, each of its
    families' closest plan meeting all the others, and the smallest single change of each input.

    ``progress(text)`` (optional) is told each step as it starts. Returns a JSON-ready dict with
    ``conflict`` (family names), ``conflict_detail`` and ``relaxations`` (:meth:`Relaxation.as_dict`).
    """
    tell: Callable[[str], None] = progress or (lambda text: None)
    ctx = Context.of(sc, backend, req, enforced, raw, catalog)
    out: dict[str, Any] = {}
    try:
        with clock_of(req).stoppable("finding the conflict", keep_finished=True):  # tables stop at a slice
            tell("a minimal set of conflicting constraints")
            core = minimal_conflict(space, ctx.backend, req, ctx.enforced, ctx=ctx) or []
            tell("the plans closest to each conflicting constraint")
            detail = conflict_detail(ctx, core)
    except (Undecided, TimeLimitReached):  # the verdict stands; the explanation is cut short, and says so
        core, detail = [], []
        out["conflict_status"] = "time limit reached"
    rels = relaxations(sc, ctx.backend, req, raw=raw, catalog=catalog, core=core, enforced=ctx.enforced, ctx=ctx,
                       progress=progress)
    out.update({"conflict": core, "conflict_detail": detail,
                "relaxations": [r.as_dict(sc.task.confidence) for r in rels]})
    return out


ANALYSIS_SKIPPED = ("the memory plan builds the tables one layout group at a time, and which constraints bind "
                    "reads every table at once")
"""Why ``explain`` of a feasible request leaves the binding constraints out (``analysis_skipped``), as ``tpopt solve``
skips its analysis there."""


def explain_request(sc: Scenario, backend: str | Solver = "cpsat", req: Request | None = None, *,
                    raw: dict[str, Any] | None = None, catalog: Catalog | None = None,
                    progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The request as a whole, as ``tpopt explain`` reports it (a JSON-ready dict).

    Solved first; with a plan: the optimum and the families that bind it (dropping one alone admits
    a better plan); without one: :func:`infeasibility` when infeasibility is proven (``status``
    ``infeasible``), empty conflict and relaxations when the solver ran out of time (``unknown``).
    """
    req = req or Request()
    tell: Callable[[str], None] = progress or (lambda text: None)
    space = Space.from_scenario(sc)
    tell("the optimum")
    solver = resolve(backend)  # the name resolved once (after the space, whose errors come first)
    run = tiny_solver(space, solver, req.method, req.solver_named)  # as tpopt solve: a tiny space's plans all evaluated
    result = solve_space(sc, run, req, space=space)
    if run != solver:
        result.solver.note = TINY_NOTE
    out: dict[str, Any] = {"status": result.status.value, "objective": result.objective,
                           "solver": result.solver.as_dict(), "conflict": [], "conflict_detail": [], "relaxations": []}
    if not result.feasible:
        if result.status == Status.INFEASIBLE:
            out.update(infeasibility(sc, space, solver, req, result.enforced, raw=raw, catalog=catalog,
                                     progress=progress))
        return out
    best = result.best
    assert best is not None, "a feasible result has a best plan"
    tell("the constraints that bind the optimum")
    undecided: list[str] = []
    binds: list[Binding] = []
    if enforce_memory(space).method == "on-demand":  # as tpopt solve: the analysis reads every table at once
        out["analysis_skipped"] = ANALYSIS_SKIPPED
    else:
        try:
            with clock_of(req).stoppable("analysing the optimum"):
                oracle = make_oracle(space, solver, req)
            binds = binding_families(oracle, best, req.objective, set(result.enforced), undecided)
        except TimeLimitReached:
            binds, undecided = [], [f for f in RELAXABLE if f in result.enforced and f not in space.inert()
                                    and not (f == F.BUDGET and sc.cost.max_cost is None)]
    out.update({"plan": best.plan_dict(), "cost": best.metrics["cost"], "cost_unit": best.metrics["cost_unit"],
                "finish_days": best.metrics["finish_days"],
                "footing": footing.footing(sc, best.plan_dict(), best.metrics["step_s"], metrics=best.metrics),
                "binding": [b.as_dict(best, req.objective) for b in binds], "binding_undecided": undecided})
    return out
