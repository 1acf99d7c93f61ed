"""One question, one answer: ``explain``, ``simulate``, ``replan`` and ``sweep --confidence`` take their plan
from :func:`tpopt.optimizer.plan.plan`, the solve of ``tpopt solve``, never from a solve of their own.

A scenario's question is its whole decision: the global-batch choices (one exact solve per batch), the
training stages (the best combination of stage plans), the ``[market]`` offers (one exact sub-problem per
offer, with its price, availability and spot preemptions) and the confidence. ``plan()`` answers it; the
commands here read that answer:

* :func:`explain_request`: a scenario with batch choices, stages or offers is explained from ``plan()``'s
  report (its optimum, what binds it, or its conflict and relaxations); any other by
  :func:`tpopt.optimizer.explain.explain_request`, which solves the same single space the same way;
* :func:`chosen`: the plan ``plan()`` chose and the scenario it runs in (the chosen batch's, the chosen
  offer's: its price and spot terms), for ``simulate`` and :func:`replan`; a staged scenario is refused in
  one line (a simulated run and a remainder are one stage's);
* :func:`replan` and :func:`cost_against_confidence`: :mod:`tpopt.optimizer.confidence`'s, each re-solve
  through :func:`chosen`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tpopt.catalogs import Catalog
from tpopt.errors import InputError
from tpopt.models.evaluate import Evaluation
from tpopt.models.plan import Scenario
from tpopt.optimizer import confidence as C
from tpopt.optimizer import outer
from tpopt.optimizer.backends import Solver
from tpopt.optimizer.explain import explain_request as explain_space
from tpopt.optimizer.plan import PlanReport, conflict_choice, plan, shared_space
from tpopt.optimizer.result import Request, SolveResult
from tpopt.optimizer.space import Space

MARKET_NOT_ANALYSED = ("each offer is its own sub-problem (each offer's plan is proven optimal on that offer; "
                       "tpopt solve lists every offer's best plan)")
"""Why an explained market optimum has no binding constraints (as ``tpopt solve`` says it)."""
CARRIED = ("batch", "batch_choices", "market", "finish_distribution", "conflict_status", "scenario",
           "market_conflict")
"""Entries of ``plan()``'s report an explanation carries as they are."""


def one_stage(sc: Scenario, command: str) -> None:
    """A staged scenario refused in one line: ``command`` reads one stage's plan."""
    if sc.stages:
        raise InputError(f"tpopt {command} reads one plan: the scenario has {len(sc.stages)} training stages "
                         f"(tpopt solve gives each stage's plan; keep one stage to {command} it)")


def _chosen_as(command: str) -> C.Solve:
    """A solve for :mod:`tpopt.optimizer.confidence`: ``plan()`` without analysis or an explanation of an
    infeasible request, returning the plan's scenario (the chosen batch's or offer's; ``sc`` without a plan);
    a staged scenario refused in one line naming ``command``. The first space it solves on is kept: a later
    request at another confidence level alone (the levels of a reachable bisection or of ``sweep --confidence``)
    solves on a space sharing its tables but the chance table (:func:`tpopt.optimizer.plan.shared_space`)."""
    held: list[Space] = []

    def solve(sc: Scenario, backend: str | Solver, req: Request) -> tuple[SolveResult, Scenario]:
        one_stage(sc, command)
        shared = shared_space(held[0], sc) if held else None
        pr = plan(sc, backend, req, analyse=False, why=False, distribution=False, space=shared)
        if not held and pr.space is not None and pr.batches is None:
            held.append(pr.space)
        return pr, pr.view or sc

    return solve


def chosen(sc: Scenario, backend: str | Solver, req: Request) -> tuple[SolveResult, Scenario]:
    """The plan ``tpopt solve`` chooses and the scenario it runs in (``tpopt simulate``)."""
    return _chosen_as("simulate")(sc, backend, req)


def replan(sc: Scenario, done: float, elapsed_s: float, cards_held: int | None, backend: str | Solver, req: Request,
           held_tp: int | None = None) -> dict[str, Any]:
    """:func:`tpopt.optimizer.confidence.replan`, every re-solve of the remainder through ``plan()``."""
    one_stage(sc, "replan")
    return C.replan(sc, done, elapsed_s, cards_held, backend, req, held_tp, solve=_chosen_as("replan"))


def cost_against_confidence(sc: Scenario, levels: tuple[float, ...], backend: str | Solver, req: Request
                            ) -> list[dict[str, Any]]:
    """:func:`tpopt.optimizer.confidence.cost_against_confidence`, each level solved by ``plan()``."""
    one_stage(sc, "sweep --confidence")
    return C.cost_against_confidence(sc, levels, backend, req, solve=_chosen_as("sweep --confidence"))


def reachable(sc: Scenario, backend: str | Solver, req: Request) -> tuple[float | None, str | None]:
    """:func:`tpopt.optimizer.confidence.reach` over the scenario's whole decision (``plan()``): the level and
    why it was not decided (None when it was)."""
    if sc.stages:  # a confidence applies to one stage (the scenario refuses one with stages)
        return None, C.clock_stop()
    return C.reach(sc, backend, req, solve=_chosen_as("solve"))


def explain_request(sc: Scenario, backend: str | Solver, req: Request, *, raw: dict[str, Any] | None = None,
                    catalog: Catalog | None = None, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The request explained as ``tpopt explain`` reports it: from ``plan()`` when the scenario has batch
    choices, stages or offers (:func:`explained`), else by the explain package on its one space."""
    if not (outer.has_task_choices(sc) or sc.market.offers):
        return explain_space(sc, backend, req, raw=raw, catalog=catalog, progress=progress)
    pr = plan(sc, backend, req, analyse=True, inputs=lambda: (raw, catalog), progress=progress)
    return explained(pr, sc)


def explained(pr: PlanReport, sc: Scenario) -> dict[str, Any]:
    """``plan()``'s report as an explanation: status, objective, solver, conflict, conflict detail and
    relaxations (empty with a plan), and with a plan its dict, cost, finish, footing and binding families;
    a staged scenario's report as ``tpopt solve`` gives it (each stage's plan and what binds it)."""
    d = pr.report
    out: dict[str, Any] = {"status": d["status"], "objective": d["objective"], "solver": d["solver"],
                           "conflict": d.get("conflict", []), "conflict_detail": d.get("conflict_detail", []),
                           "relaxations": d.get("relaxations", [])}
    if pr.staged is not None:
        return {**out, **d}
    out.update({k: d[k] for k in CARRIED if k in d})
    if pr.batches is not None and not pr.feasible:
        out["conflict_batch"] = conflict_choice(pr.batches, sc).batch
    best: Evaluation | None = pr.best
    if best is None:
        return out
    out.update({"plan": best.plan_dict(), "cost": best.metrics["cost"], "cost_unit": best.metrics["cost_unit"],
                "finish_days": best.metrics["finish_days"], "footing": d.get("footing"),
                "binding": d.get("binding") or [], "binding_undecided": d.get("binding_undecided") or []})
    if "market" in d:
        out["analysis_skipped"] = MARKET_NOT_ANALYSED
    elif d.get("analysis_skipped"):
        out["analysis_skipped"] = d["analysis_skipped"]
    return out


__all__ = ["MARKET_NOT_ANALYSED", "one_stage", "chosen", "replan", "cost_against_confidence", "reachable",
           "explain_request", "explained"]
