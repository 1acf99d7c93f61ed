"""`plan`: one solve of a scenario as ``tpopt solve`` and :func:`tpopt.solve` both run it.

The orchestration above the single-space solve (:func:`tpopt.optimizer.core.solve`): staged scenarios
(:func:`tpopt.optimizer.outer.solve_stages`), a global batch that is a choice (one exact solve per
batch, :func:`tpopt.optimizer.outer.solve_batches`), the enumerator for tiny spaces, then what the
command reports about the optimum -- the binding families, the alternatives, robustness, the batch
figures, sensitivities -- and the MILP export. :func:`plan` returns a :class:`PlanReport` (a solve
result) whose ``report`` is the dict the command prints as JSON (the CLI only adds ``scenario_source``
and renders). :func:`plan_rl` is the same entry for ``tpopt rl`` (:mod:`tpopt.optimizer.rl`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any

from tpopt.errors import InputError
from tpopt.models import families as F
from tpopt.models.plan import Scenario
from tpopt.models.units import DAY
from tpopt.optimizer import backends, core, footing, outer
from tpopt.optimizer.backends import Solver
from tpopt.optimizer.core import TINY_NOTE, TINY_SPACE, tiny_solver  # noqa: F401 (TINY_SPACE: re-exported)
from tpopt.optimizer.enumerate import LEVEL_TWIN, WALKED_TABLE, keep_point_table, layout_evaluator
from tpopt.optimizer.limits import EncodingError
from tpopt.optimizer.memory_plan import enforce as enforce_memory
from tpopt.optimizer.ondemand import WHOLE_TABLES, slice_whole_tables
from tpopt.optimizer.report import analysis, cp_not_searched, scenario_entry, tabled
from tpopt.optimizer.result import Request, SolveResult, Status, objective_key
from tpopt.optimizer.space import CHANCE_TABLE, FAMILIES, Space, rebuilt_tables

if TYPE_CHECKING:
    from tpopt.optimizer.infeasible import RelaxationInputs

@dataclass
class PlanReport(SolveResult):
    """A :class:`~tpopt.optimizer.result.SolveResult` (status, objective, plans, solver, enforced; for a
    staged scenario the stage picks as plans) with everything the command reports: ``report`` (the
    command's JSON: the best plan with each constraint's ``binding``, ``analysis``, ``binding``,
    ``binding_undecided``, ``alternatives``, ``analysis_by``, ``robustness``, ``top``, the batch figures,
    ``sensitivities``, ``export``), ``view`` (the scenario the plan is shown in: with batch choices, at the
    chosen batch), ``space`` (where a conflict is computed when no plan is feasible), and the staged /
    batch-choice solves' own records."""

    report: dict[str, Any] = field(default_factory=dict)
    view: Scenario | None = None
    space: Space | None = None
    batches: outer.BatchSolve | None = None
    staged: outer.StagedSolve | None = None

    @classmethod
    def of(cls, result: SolveResult, report: dict[str, Any], view: Scenario, space: Space | None = None,
           batches: outer.BatchSolve | None = None, staged: outer.StagedSolve | None = None) -> PlanReport:
        return cls(status=result.status, objective=result.objective, plans=result.plans, solver=result.solver,
                   enforced=result.enforced, report=report, view=view, space=space, batches=batches, staged=staged)

    @property
    def binding(self) -> list[dict[str, Any]] | None:
        """The families that bind the optimum (dropping one alone admits a better plan); None: not analysed."""
        found: list[dict[str, Any]] | None = self.report.get("binding")
        return found

    @property
    def alternatives(self) -> list[dict[str, Any]] | None:
        """Why not cheaper: the next plans and what rules them out; None: not analysed."""
        found: list[dict[str, Any]] | None = self.report.get("alternatives")
        return found

    @property
    def robustness(self) -> dict[str, Any] | None:
        found: dict[str, Any] | None = self.report.get("robustness")
        return found

    @property
    def analysis(self) -> str | None:
        """``done``, ``time limit reached`` or ``skipped`` (None: no plan to analyse)."""
        found: str | None = self.report.get("analysis")
        return found


def plan(sc: Scenario, backend: str | Solver = backends.DEFAULT, req: Request | None = None, *, analyse: bool = True,
         sensitivity: bool = False, export: str | None = None,
         on_export: Callable[[dict[str, Any]], None] | None = None, inputs: RelaxationInputs | None = None,
         progress: Callable[[str], None] | None = None, why: bool = True, distribution: bool = True,
         space: Space | None = None, with_footing: bool = True,
         batch_share: Callable[[Scenario], Space | None] | None = None,
         batch_floors: dict[int, tuple[float, float] | None] | None = None) -> PlanReport:
    """Solve ``sc`` as ``tpopt solve`` does (see the module); ``export``: also write the plan MILP to this
    .lp/.mps file (``on_export(figures)`` is told as soon as it is written, before the solve). Without a
    plan, the report has the conflict and the relaxations (:func:`~tpopt.optimizer.infeasible.infeasible_entries`;
    ``inputs()``: the raw tables and catalog they rebuild the scenario from; ``progress(text)``: each step).
    ``backend``: a solver's name (the command line's, the API's) or a :class:`~tpopt.optimizer.backends.Solver`.
    ``why`` False: without a plan, the status alone (no conflict, relaxations or fastest plans; the commands that
    only need the plan solve chose, :mod:`tpopt.optimizer.question`). ``distribution`` False: no
    ``finish_distribution`` entry with a confidence (the re-solves of :mod:`tpopt.optimizer.confidence` read
    the plan and status alone; each entry costs a dozen quantile roots). ``space``: the scenario's design space
    when the caller holds one (without batch choices: :func:`_chosen` passes one sharing the report's tables).
    ``with_footing`` False: no ``footing`` entry (the confidence report's re-solves read the plan and status alone).
    ``batch_share``, ``batch_floors``: with batch choices, a batch's space made of tables already built and the
    proven floors of the batches' objectives (:func:`tpopt.optimizer.outer.solve_batches`; :func:`_chosen`)."""
    req = req or Request()
    if sc.pools:
        raise InputError("[[hardware.pools]]: a mixed plan over accelerator pools is solved by "
                         "tpopt.optimizer.pools.solve_pools (`tpopt solve`), not by one design space")
    solver = backends.checked(backend)  # resolved once: the modules below are handed the Solver
    solver.require(req)  # a missing solver fails here, before anything is written
    if export and outer.has_task_choices(sc):
        raise InputError("--export writes one plan MILP: give one global batch (--global-batch) and no stages")
    if sensitivity and (outer.has_task_choices(sc) or sc.market.offers):
        raise InputError("--sensitivity re-solves one design space: give one global batch, one stage and no [market]")
    if export and sc.market.offers:
        raise InputError("--export writes one plan MILP: the [market] offers are one sub-problem each (drop [market])")
    if sc.market.offers:  # the offer is a choice: one exact sub-problem per offer
        return _market(sc, solver, req, distribution, progress if why else None, why)
    if sc.stages:
        return _staged(sc, solver, req, analyse)
    bs = outer.solve_batches(sc, solver, req, share=batch_share, floors=batch_floors) \
        if outer.has_task_choices(sc) else None
    space = bs.choices[0].space if bs else (space if space is not None else Space.from_scenario(sc))
    skipped = None  # why the analysis is left out when it was asked for
    if analyse or solver.capabilities.needs_tables:  # the solve or its analysis builds the tables
        mp = enforce_memory(space)
        if mp.method == "on-demand":
            if analyse:  # the analysis reads every table at once; the solve builds one layout group at a time
                skipped = (f"the memory plan builds the tables one layout group at a time (about "
                           f"{mp.on_demand_bytes / 2**20:,.1f} MiB; every table at once, which the analysis reads, "
                           f"about {mp.peak_bytes / 2**20:,.1f} MiB, is over the memory budget)")
            analyse = False
    exported = None
    if export:
        exported = _export(space, req, export)
        if on_export is not None:
            on_export(exported)
    if bs:
        result = bs.result
    else:
        run = tiny_solver(space, solver, req.method, req.solver_named)
        if analyse:  # the analysis reads the whole tables: an on-demand solve's layout groups slice them
            slice_whole_tables(space)
        if analyse and tabled(space):  # the analysis asks every plan: an enumeration keeps the table it walks
            keep_point_table(space)
        result = core.solve(sc, run, req, space=space)
        if run != solver:
            result.solver.note = TINY_NOTE  # --method monolithic runs the solver asked for
    out: dict[str, Any] = {"status": result.status.value, "objective": result.objective,
                           "solver": result.solver.as_dict(), "scenario": scenario_entry(sc)}
    if exported:
        out["export"] = exported
    if not result.feasible and not why:
        return PlanReport.of(result, out, sc, space, bs)
    if not result.feasible:
        if bs:  # conflict at the task's batch (or the first choice); relaxations over every batch
            out["batch_choices"] = fastest_per_batch(bs, solver, req)
            space = conflict_space(bs, sc)
        from tpopt.optimizer.infeasible import infeasible_entries  # lazy: start-up time (only without a plan)

        out.update(infeasible_entries(sc, space, solver, req, result, inputs, progress))
        return PlanReport.of(result, out, sc, space, bs)
    view = sc  # the scenario the plan is shown in (with batch choices: at its batch)
    best = result.best
    assert best is not None, "a feasible result has a best plan"
    if bs:  # the global batch is a choice: analysis over every batch, the chosen batch's scenario
        view, space = bs.choice_of(best).sc, bs.choice_of(best).space
        ana = outer.batch_analysis(bs, solver, req, set(result.enforced)) if analyse else None
    else:
        names = footing.fitted_cards(view, best) if analyse and len(view.systems) > 1 and req.enforce is None else ()
        ana = analysis(space, best, solver, req, set(result.enforced),  # the fitted alternative asked of its oracle
                       restricted={"acc": list(names)} if names else None) if analyse else None
    out.update(best_entries(result, ana, skipped))
    if view.task.confidence is not None and distribution:  # the finish-time distribution (only with a confidence)
        from tpopt.optimizer.confidence import distribution_entry  # lazy: start-up time (SciPy)

        out["finish_distribution"] = distribution_entry(
            view, best, solver, req, step_up=analyse, whole=sc,
            solve=partial(_chosen, batches=bs) if bs else partial(_chosen, base=space))
    if with_footing:
        out["footing"] = footing.of_evaluation(view, out)
    if analyse and len(view.systems) > 1:  # a prior card chosen among fitted ones: the fitted option, named
        found = ana["restricted_best"] if ana is not None and "restricted_best" in ana else footing.ANSWER_UNKNOWN
        out["footing"]["evidence"]["fitted_alternative"] = footing.fitted_alternative(view, best, solver, req, found)
    if analyse and view.memory.activation_reserve is not None:  # the plan modelled activations lead to
        for e in out["footing"]["stated"]:
            if e["input"] == "activation budget":
                e["modelled_plan"] = footing.modelled_activations(view, best, solver, req)
    if analyse:
        cp = cp_not_searched(view, solver, req, best)
        if cp is not None:
            out["context_parallel"] = cp
    if bs or sc.task.critical_batch is not None:
        out["batch"] = outer.batch_figures(view, best)
        out["batch_choices"] = outer.batch_rows(bs, req.objective) if bs else []
    if sensitivity:
        from tpopt.optimizer.explain import sensitivities  # lazy: start-up time (only with --sensitivity)

        out["sensitivities"] = sensitivities(sc, solver, req, base=best)
    return PlanReport.of(result, out, view, space, bs)


def _chosen(sc: Scenario, backend: str | Solver, req: Request, base: Space | None = None,
            batches: outer.BatchSolve | None = None) -> tuple[SolveResult, Scenario]:
    """A re-solve of a whole request (its batch choices) for the confidence report's step up: plan() without
    analysis or explanation, and the scenario its plan runs in. ``base``: the report's space; a request that
    differs from its scenario only in the confidence level (the step up, the bisection of the reachable level)
    is solved on a space sharing its tables but the chance table (:func:`shared_space`). ``batches``: with batch
    choices, the report's solve over them: each batch's space shared the same way, and at a level at or above
    the report's the batches' proven optima are floors (:func:`_level_floors`)."""
    shared = shared_space(base, sc) if base is not None else None
    share = partial(_shared_batch, tuple(c.space for c in batches.choices)) if batches is not None else None
    floors = _level_floors(batches, sc, req.objective) if batches is not None else None
    pr = plan(sc, backend, req, analyse=False, why=False, distribution=False, space=shared, with_footing=False,
              batch_share=share, batch_floors=floors)
    return pr, pr.view or sc


def _shared_batch(bases: tuple[Space, ...], sub: Scenario) -> Space | None:
    """The space of one batch choice ``sub`` made of the base space at the same batch (:func:`_sharing`) when
    ``sub`` is its scenario at another confidence level; None when no base is."""
    for base in bases:
        if base.sc.task.global_batch == sub.task.global_batch:
            return _sharing(base, sub)
    return None


def _level_floors(batches: outer.BatchSolve, sc: Scenario, objective: str) -> dict[int, tuple[float, float] | None]:
    """Floors of the batches' objectives for ``sc``, the report's request at a confidence level at or above its own:
    a plan meeting the higher level meets the lower (the chance constraint is monotone in the level; every other
    input the same), so a batch's proven optimum at the report's level is a floor of its optimum at ``sc``'s
    (its key under ``objective``), and a batch proven to have no plan has none at ``sc``'s (None). Only the
    batches whose scenario differs from ``sc``'s at that batch in the level alone; none below the report's level."""
    out: dict[int, tuple[float, float] | None] = {}
    q = sc.task.confidence
    for c in batches.choices:
        level = c.sc.task.confidence
        if q is None or level is None or q < level or objective != batches.result.objective:
            continue
        if outer.at_batch(sc, c.batch) != replace(c.sc, task=replace(c.sc.task, confidence=q)):
            continue
        if c.result.status == Status.INFEASIBLE:
            out[c.batch] = None
        elif c.result.status == Status.OPTIMAL and c.result.best is not None:
            out[c.batch] = objective_key(c.result.best, objective)
    return out


def shared_space(base: Space, sc: Scenario) -> Space | None:
    """A space of ``sc`` made of ``base``'s built tables (:meth:`Space.sharing`) when ``sc`` is ``base``'s scenario
    at another confidence level (one design space, no offers: :func:`rebuilt_tables` gives the chance table
    alone), with ``base``'s simulated pipelines and whole-table slicing; None otherwise."""
    if sc.market.offers or sc.stages or outer.has_task_choices(sc):
        return None
    return _sharing(base, sc)


def _sharing(base: Space, sc: Scenario) -> Space | None:
    """:func:`shared_space` for a scenario of one design space (one batch choice's, which may still name the
    others: the space is at its task's batch)."""
    if sc.market.offers or sc.stages:
        return None
    rebuild = rebuilt_tables(base.sc, sc)
    if rebuild is None or set(rebuild) - {CHANCE_TABLE}:
        return None
    out = base.sharing(sc, rebuild)
    for key in (WHOLE_TABLES, "_floor"):  # the whole tables' slicing and the compute floor: no level reads them
        if key in base.__dict__:
            out.__dict__[key] = base.__dict__[key]
    if "_layout_evaluator" in base.__dict__:  # the exactly simulated pipelines (the step model's alone)
        layout_evaluator(out).exact_terms = layout_evaluator(base).exact_terms
    if WALKED_TABLE in base.__dict__:  # every plan walked at the base's level: an enumeration re-decides the level
        out.__dict__[LEVEL_TWIN] = base.__dict__[WALKED_TABLE]
    return out


def best_entries(result: SolveResult, ana: dict[str, Any] | None, skipped: str | None = None) -> dict[str, Any]:
    """The best plan's dict with each constraint's ``binding`` (None where nobody knows: no analysis,
    or the time limit cut it short), then the analysis entries and the top plans; ``skipped``: why an
    analysis asked for was left out (``analysis_skipped``, only then)."""
    assert result.best is not None, "entries of a feasible result"
    d = result.best.as_dict()
    binding = {b["name"] for b in ana["binding"]} if ana else set()
    undecided = set(ana["undecided"]) if ana else set()
    for c in d["constraints"]:
        name = F.encoded_as(c["name"])
        c["binding"] = None if (ana is None or name in undecided) else name in binding
        if name in undecided:
            c["undecided"] = True  # the analysis ran out of time on this family
    d["analysis"] = "skipped" if ana is None else ana["analysis"]
    if ana is None and skipped:
        d["analysis_skipped"] = skipped
    d["binding"] = ana["binding"] if ana else None
    d["binding_undecided"] = sorted(undecided, key=list(result.enforced).index) if ana else []
    d["alternatives"] = ana["alternatives"] if ana else None
    d["analysis_by"] = ana["oracle"] if ana else None
    d["robustness"] = ana["robustness"] if ana else None
    d["top"] = [dict(ev.as_dict(), rank=i + 1) for i, ev in enumerate(result.plans)]
    return d


def _export(space: Space, req: Request, path: str) -> dict[str, Any]:
    """Write the plan MILP (Pyomo) for another solver; its figures (path, variables, constraints, objective)."""
    from tpopt.optimizer.backends.pyomo_model import export_model  # lazy: start-up time (Pyomo, ortools)

    try:
        figures: dict[str, Any] = export_model(space, req, path)
    except EncodingError as exc:  # the formulation is refused before any file is made: nothing is written
        raise InputError(f"--export {path}: the plan MILP of this scenario cannot be written so that another "
                         f"solver reads it reliably ({exc}); nothing written (tpopt solve without --export "
                         "solves it exactly)") from None
    return figures


def check_export(path: str) -> None:
    """An export path must be writable and end in .lp or .mps (checked before any work)."""
    from tpopt.optimizer.backends.pyomo_model import check_export_path  # lazy: start-up time (Pyomo, ortools)

    check_export_path(path)


# ---------------------------------------------------------------------------------------------
# no batch admits a plan


def fastest_per_batch(bs: outer.BatchSolve, solver: Solver, req: Request) -> list[dict[str, Any]]:
    """Each batch's fastest plan with the deadline and budget dropped (None: no plan at all, or none found
    within the time limit: ``fastest_status`` says which, ``infeasible`` or ``unknown``); on the run's clock."""
    rows: list[dict[str, Any]] = []
    for c in bs.choices:
        enforce = frozenset(f for f in req.enforced(FAMILIES) if f not in (F.DEADLINE, F.BUDGET))
        r = core.solve(c.sc, solver, Request(objective="time", enforce=enforce, time_limit=req.time_limit,
                                              seed=req.seed, workers=req.workers, clock=req.clock), space=c.space)
        fin = r.best.metrics["finish_days"] if r.best is not None else None
        rows.append({"global_batch": c.batch, "tokens": c.sc.task.tokens, "status": c.result.status.value,
                     "fastest_finish_days": fin, "fastest_status": r.status.value})
    return rows


def conflict_choice(bs: outer.BatchSolve, sc: Scenario) -> outer.Choice:
    """The batch a conflict is computed at: the task's own, else the first choice."""
    return next((c for c in bs.choices if c.batch == sc.task.global_batch), bs.choices[0])


def conflict_space(bs: outer.BatchSolve, sc: Scenario) -> Space:
    return conflict_choice(bs, sc).space


# ---------------------------------------------------------------------------------------------
# market offers


def _market(sc: Scenario, solver: Solver, req: Request, distribution: bool = True,
            progress: Callable[[str], None] | None = None, why: bool = False) -> PlanReport:
    """The best plan over the scenario's offers (:mod:`tpopt.optimizer.market`), its offer and spot figures;
    ``why`` and every offer proven infeasible: the conflict on the offer nearest a plan and the changes verified
    on the market (:mod:`tpopt.optimizer.market_explain`)."""
    from tpopt.optimizer import market  # lazy: start-up time (only scenarios with offers need it)

    choose = partial(tiny_solver, named=req.solver_named)
    ms = market.solve_market(sc, solver, req, choose)
    out: dict[str, Any] = {"status": ms.result.status.value, "objective": ms.result.objective,
                           "solver": ms.result.solver.as_dict()}
    if why and ms.result.status == Status.INFEASIBLE:
        from tpopt.optimizer.market_explain import market_infeasibility  # lazy: only without a plan

        out.update(market_infeasibility(sc, ms, solver, req, progress))
    view = ms.pick.sc if ms.pick else sc
    if ms.result.best is not None:
        out.update(best_entries(ms.result, None))
        out["footing"] = footing.of_evaluation(view, out)  # its sigma, P(on time), memory margin, as any solve's
        out["footing"]["evidence"]["fitted_alternative"] = footing.offer_fitted_alternative(
            view, ms.result.best, [(r.sc, r.best) for r in ms.offers], req.objective,
            [(r.sc, r.offer.id, r.offer.accelerator, r.bound) for r in ms.offers if r.bound is not None],
            lambda ids: [(r.sc, r.best) for r in market.build_fronts(
                sc, tuple(o for o in sc.market.offers if o.id in ids), solver, req, choose).values()])
        if view.task.confidence is not None and distribution:  # the law on the offer's scenario: its spot terms
            from tpopt.optimizer.confidence import distribution_entry  # lazy: start-up time (SciPy)

            out["finish_distribution"] = distribution_entry(view, ms.result.best, solver, req, whole=sc,
                                                            solve=market_resolve)
    out["market"] = market.market_entries(ms, sc)
    if sc.task.confidence is not None and sc.task.confidence >= 0.5:  # spot until day d, then on-demand
        from tpopt.optimizer.spot_policy import policy_entry  # lazy: start-up time (SciPy)

        out["market"]["spot_policy"] = policy_entry([(r.offer, r.sc, r.best) for r in ms.offers],
                                                    F.limit(F.DEADLINE, sc), sc.task.confidence,
                                                    ms.pick.offer.id if ms.pick is not None else None)
    return PlanReport.of(ms.result, out, view)


def market_resolve(sc: Scenario, backend: str | Solver, req: Request) -> tuple[SolveResult, Scenario]:
    """The market solved again (the confidence's step-up: every offer at the higher level, their
    preemptions in each plan's law): the best plan over the offers and the scenario of its offer."""
    from tpopt.optimizer import market  # lazy: start-up time (only scenarios with offers need it)

    ms = market.solve_market(sc, backends.checked(backend), req, partial(tiny_solver, named=req.solver_named))
    return ms.result, ms.pick.sc if ms.pick else sc


# ---------------------------------------------------------------------------------------------
# training stages


def _staged(sc: Scenario, solver: Solver, req: Request, analyse: bool) -> PlanReport:
    ss = outer.solve_stages(sc, solver, req)
    result = SolveResult(status=ss.status, objective=ss.objective, plans=[p.ev for p in ss.picks] if ss.feasible
                         else [], solver=ss.solver, enforced=tuple(ss.enforced))
    d = staged_dict(ss, analyse, solver, req)
    d = {**{k: d[k] for k in ("status", "objective", "solver")}, "scenario": scenario_entry(sc), **d}
    return PlanReport.of(result, d, sc, staged=ss)


def _stage_entry(ss: outer.StagedSolve, i: int, analyse: bool, solver: Solver, req: Request) -> dict[str, Any]:
    st, pick = ss.stages[i], ss.picks[i]
    ev = pick.ev
    d = ev.as_dict()
    e: dict[str, Any] = {"name": st.name, **d, "batch": outer.batch_figures(pick.sc, ev),
                         "allocated_days": outer.allocated(ss, i) / DAY, "reserved_s": st.reserved_s,
                         "save_s": st.save_s, "restore_s": st.restore_s}
    e["footing"] = footing.of_evaluation(pick.sc, e)
    if analyse:  # what binds this stage at the deadline the other stages leave it
        sc_i = replace(pick.sc, task=replace(pick.sc.task, deadline_s=outer.allocated(ss, i)))
        ana = analysis(Space.from_scenario(sc_i), ev, solver, req, set(ss.enforced) - {F.BUDGET})
        e["binding"], e["alternatives"] = ana["binding"], ana["alternatives"]
        e["binding_undecided"] = list(ana["undecided"])  # cut short by the time limit: said so, never "none"
    return e


def staged_dict(ss: outer.StagedSolve, analyse: bool, solver: Solver, req: Request) -> dict[str, Any]:
    """The staged solve as the command's JSON: each stage's plan (and what binds it), the total; without
    a combination, each stage's fastest plan."""
    out: dict[str, Any] = {"status": ss.status.value, "objective": ss.objective, "solver": ss.solver.as_dict(),
                           "feasible": ss.feasible}
    if ss.feasible:
        out["stages"] = [_stage_entry(ss, i, analyse, solver, req) for i in range(len(ss.stages))]
        out["total"] = {"finish_days": ss.finish_s / DAY, "cost": ss.cost,
                        "cost_unit": ss.picks[0].ev.metrics["cost_unit"],
                        "deadline_days": F.limit(F.DEADLINE, ss.stages[0].sc) / DAY}
    else:
        out["fastest"] = [None if f is None else {"name": st.name, "finish_days": f.metrics["finish_days"],
                                                  "cost": f.metrics["cost"], "plan": f.plan_dict()}
                          for st, f in zip(ss.stages, ss.fastest, strict=False)]
        # stages whose fastest plan was cut short by the time limit: not decided (None above is no plan found)
        out["stages_undecided"] = [st.name for st, ok in zip(ss.stages, ss.decided, strict=False) if not ok]
    return out
