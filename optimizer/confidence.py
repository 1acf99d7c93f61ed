"""What a plan's finish-time distribution says in a report (``tpopt solve --confidence``), and replanning.

:func:`distribution_entry` is the ``finish_distribution`` entry of a solve report: P50 / P90 / P99 finish
and cost, P(finish <= deadline), each source's share of the risk, the step-time sigma and its source,
progress checkpoints at which to replan, and the cheapest change that buys 5 points of confidence (the
optimum re-solved at the higher level). :func:`reachable` is the highest confidence any plan of a space
reaches (explain and the infeasible report say it when the asked one is not). :func:`replan` re-solves
the remainder of a run that is under way (``tpopt replan``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from tpopt.errors import InputError
from tpopt.models import evaluate as E
from tpopt.models import families as F
from tpopt.models import finish as Fn
from tpopt.models import terms as T
from tpopt.models.evaluate import Evaluation
from tpopt.models.market import run_finish_s
from tpopt.models.plan import Scenario
from tpopt.models.units import DAY
from tpopt.models.variables import evaluate_keywords
from tpopt.optimizer import core
from tpopt.optimizer.backends import Solver
from tpopt.optimizer.enumerate import LEVEL_BOUND  # the families a confidence level moves
from tpopt.optimizer.limits import CLOCK_STOP, Undecided, clock_of
from tpopt.optimizer.result import Request, SolveResult, Status

LEVELS = (0.5, 0.9, 0.99)
"""The quantiles every report prints."""
STEP_UP = 0.05
"""The confidence the "cheapest change" buys: 5 points."""
PROGRESS_MARKS = (0.25, 0.5, 0.75)
"""Shares of the P50 finish at which the report gives a progress checkpoint."""

Solve = Callable[[Scenario, "str | Solver", Request], tuple[SolveResult, Scenario]]
"""A re-solve of a scenario: its result and the scenario its plan runs in. :func:`one_space` here; the
commands pass ``tpopt solve``'s whole decision (batch choices, offers: :mod:`tpopt.optimizer.question`)."""


def one_space(sc: Scenario, backend: str | Solver, req: Request) -> tuple[SolveResult, Scenario]:
    """The scenario's one design space solved (core.solve); the plan runs in ``sc`` itself."""
    return core.solve(sc, backend, req), sc


def law_of(sc: Scenario, ev: Evaluation) -> Fn.Distribution:
    """The finish-time distribution of an evaluated plan."""
    p = ev.plan
    return T.finish_law(sc, p.accelerator, p.save_mode, p.cards, p.save_interval_s, ev.metrics["step_s"], p.ep)


def dominant(shares: dict[str, float]) -> str:
    """The source with the largest share (the first in :data:`tpopt.models.finish.SOURCE_NAMES` on ties)."""
    return max(Fn.SOURCE_NAMES, key=lambda n: (shares.get(n, 0.0), -Fn.SOURCE_NAMES.index(n)))


def progress_marks(law: Fn.Distribution, q: float) -> list[dict[str, float]]:
    """Checkpoints of progress: at day d the plan is on its median pace with d / T_P50 of the tokens done
    (reserved time spread evenly over the run, stated); below d / T_q it has fallen behind the pace that
    still finishes by the q-quantile, and a replan should be asked for."""
    p50, pq = law.quantile(0.5), law.quantile(q)
    out = []
    for share in PROGRESS_MARKS:
        day = max(1, round(share * p50 / DAY))
        out.append({"day": float(day), "done": min(day * DAY / p50, 1.0), "replan_below": min(day * DAY / pq, 1.0)})
    return out


def distribution_entry(sc: Scenario, ev: Evaluation, backend: str | Solver, req: Request,
                       step_up: bool = True, whole: Scenario | None = None, solve: Solve = one_space
                       ) -> dict[str, Any]:
    """The ``finish_distribution`` entry of a solve report for the plan ``ev`` run in ``sc`` (see the module);
    the step up re-solves ``whole`` (the request ``sc`` came from: with its batch choices) by ``solve``."""
    law = law_of(sc, ev)
    q = sc.task.confidence if sc.task.confidence is not None else 0.95
    billed = law.without(Fn.CAPACITY) if law.risky(Fn.CAPACITY) else law  # a day without capacity bills nothing
    rate = ev.metrics["cost"] / run_finish_s(ev.metrics)  # cost per second on capacity (the nominal run's)
    Fn.find_quantiles([(law, level) for level in LEVELS] + law.risk_asks(q)
                      + ([(billed, level) for level in LEVELS] if billed is not law else []))  # in lockstep
    quant = {f"p{round(level * 100)}": law.quantile(level) for level in LEVELS}
    shares = law.risk_shares(q)
    p_deadline = float(law.cdf(F.limit(F.DEADLINE, sc)))
    entry: dict[str, Any] = {
        "confidence": sc.task.confidence,
        "probability_by_deadline": p_deadline,
        "finish_days": {k: v / DAY for k, v in quant.items()},
        "cost": {f"p{round(level * 100)}": billed.quantile(level) * rate for level in LEVELS},
        "mean_finish_days": law.mean() / DAY,
        "risk_level": q,
        "risk_shares": shares,
        "dominant_source": dominant(shares),
        "step_sigma": law.sigma,
        "step_sigma_source": law.sigma_source,
        "sources": [{"name": s.name, "label": s.label, "events": float(law.events.rate[i] * law.work),
                     "basis": s.basis} for i, s in enumerate(Fn.SOURCES)],
        "progress": progress_marks(law, q),
    }
    if step_up:
        entry["step_up"] = _step_up(whole or sc, ev, p_deadline, backend, req, solve)
    return entry


def _on_clock(req: Request, objective: str) -> Request:
    """A re-solve's request on the run's one clock (``req.clock``): it gets what is left of the limit,
    never a fresh one."""
    return Request(objective=objective, time_limit=req.time_limit, seed=req.seed, workers=req.workers,
                   clock=clock_of(req))


def _step_up(sc: Scenario, ev: Evaluation, p_now: float, backend: str | Solver, req: Request,
             solve: Solve = one_space) -> dict[str, Any]:
    """The cheapest plan whose confidence is 5 points higher than this plan's P(finish <= deadline): one
    re-solve on the run's clock. Cut short by the time limit it is not decided (``decided`` false, status
    ``unknown`` without a plan, ``feasible`` with one not proven the cheapest)."""
    target = min(max(p_now, sc.task.confidence or 0.0) + STEP_UP, 0.999)
    if target <= p_now:
        return {"target": target, "status": "already", "plan": None}
    sub = _on_clock(req, req.objective)
    r, _ = solve(replace(sc, task=replace(sc.task, confidence=target)), backend, sub)
    limited = r.solver.limit_reached
    if not r.feasible or r.best is None:
        if r.status != Status.INFEASIBLE:  # no answer within the limit: neither a plan nor a proof of none
            return {"target": target, "status": r.status.value, "plan": None, "decided": False,
                    "time_limit_reached": limited}
        level, why = reach(sc, backend, req, solve=solve, met=sc.task.confidence, missed=target)
        return {"target": target, "status": r.status.value, "plan": None, "decided": True, "reachable": level,
                **({} if why is None else {"reachable_undecided": why})}
    b = r.best
    return {"target": target, "status": r.status.value, "plan": b.plan_dict(), "cards": b.plan.cards,
            "cost": b.metrics["cost"], "extra_cost": b.metrics["cost"] - ev.metrics["cost"],
            "extra_cards": b.plan.cards - ev.plan.cards, "decided": r.status == Status.OPTIMAL,
            "time_limit_reached": limited}


def reachable(sc: Scenario, backend: str | Solver, req: Request, tol: float = 1e-3, solve: Solve = one_space,
              met: float | None = None, missed: float | None = None) -> float | None:
    """The highest confidence some plan of the scenario reaches (:func:`reach`'s level; None: not decided)."""
    return reach(sc, backend, req, tol, solve, met, missed)[0]


REACH_WORK = 2_000
"""The reachable-confidence search's work budget (:meth:`tpopt.optimizer.limits.Clock.budget`): safe points
counted over the whole bisection (each level's solve included). Counted, not timed, so whether the level is
decided does not depend on the machine's speed or load; the time limit stays the last guard, and says so where it
stops the search. The examples use at most 90 (deepseek-v3 at 95 % in 40 days, with every backend; 12 for the
design case at 99.9 %, 49 for the llama3-8b replan at 95 %, none where ``--confidence 99.9%`` finds a plan): the
budget is over twenty times that."""


def reach(sc: Scenario, backend: str | Solver, req: Request, tol: float = 1e-3, solve: Solve = one_space,
          met: float | None = None, missed: float | None = None) -> tuple[float | None, str | None]:
    """The highest confidence some plan of the scenario reaches, run on a counted work budget
    (:data:`REACH_WORK`) as well as the run's clock, and why it was not decided (None when it was): "not
    decided within a work budget of N steps" (the same on every machine), or within the time limit (then the
    answer may differ on another machine, and the reason says so)."""
    clock = clock_of(req)
    with clock.budget(REACH_WORK):
        try:
            return _bisect(sc, backend, req, tol, solve, met, missed), None
        except Undecided:
            if clock.budget_stopped:
                return None, f"not decided within a work budget of {REACH_WORK:,} steps"
            return None, clock_stop(req.time_limit)


def clock_stop(limit_s: float | None = None) -> str:
    """Why the reachable level was not decided when the wall clock (``limit_s`` seconds), not the work budget,
    stopped the search."""
    limit = "" if limit_s is None or limit_s == math.inf else f" ({limit_s:g} s)"
    return f"not decided within the time limit{limit}; {CLOCK_STOP}"


def _bisect(sc: Scenario, backend: str | Solver, req: Request, tol: float, solve: Solve,
            met: float | None, missed: float | None) -> float:
    """:func:`reach`'s bisection on the level, each a solve on the run's clock (feasibility is monotone: a plan
    meeting level q meets every lower one). 0 when even the 1 % level is out of reach; raises
    :class:`Undecided` when the work budget or the time limit left a level undecided (neither a plan nor a
    proof of none): not decided, never a guess. ``met``: a level the caller's solve met (a plan),
    ``missed``: one it proved out of reach (infeasible): by the same monotony the levels at or below ``met``
    are met and those at or above ``missed`` missed without a solve (the confidence report's step up knows
    both: about half the bisection's solves; the same levels and the same answer). A level some plan found by
    an earlier solve meets (:func:`meets`) is met without a solve too: the design case's bisection solves one
    level of six."""
    sub = _on_clock(req, "time")
    known: list[tuple[float, Scenario, Evaluation, bool, bool]] = []  # (P(on time), scenario, plan, others, smooth)

    def ok(q: float) -> bool:
        if met is not None and q <= met:
            return True
        if missed is not None and q >= missed:
            return False
        if any(p >= q and others and ((smooth and p >= q + SURE_MARGIN) or meets(at, ev, q, others=True))
               for p, at, ev, others, smooth in known):
            return True  # a plan already found meets level q: the solve would find one too
        if sub.clock is not None and sub.clock.expired("bisecting the reachable confidence"):
            raise Undecided(f"confidence {q:.4g}")
        r, at = solve(replace(sc, task=replace(sc.task, confidence=q)), backend, sub)
        if r.status == Status.INFEASIBLE:
            return False
        if r.best is None:  # unknown: cut short by the limit
            raise Undecided(f"confidence {q:.4g}")
        law = law_of(at, r.best)
        known.append((float(law.cdf(F.limit(F.DEADLINE, at))), at, r.best, level_free_met(at, r.best),
                      law.sigma >= SMOOTH_SIGMA))
        return True  # a plan meets level q (optimal, or feasible when the limit cut the solve short)

    lo, hi = 0.01, 0.999
    if not ok(lo):
        return 0.0
    if ok(hi):
        return hi
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


SURE_MARGIN = 1e-6
"""How far a known plan's P(on time) must lie above a level for :func:`reachable` to count the level met without
finding its chance root (:func:`meets`). With a step-time error of at least :data:`SMOOTH_SIGMA` P(on time) falls
smoothly with the work W, d P / d ln W about -phi(z) / sigma, so 1e-6 of probability is at least
1e-6 x 0.01 / phi(0) = 2.5e-8 of relative work: eight times the chance root's rounding (2e-9) and
:data:`MEETS_MARGIN` (1e-9) together, so the verdict is the one :func:`meets` gives
(tests/test_confidence_sharing.py checks both on a grid of levels)."""
SMOOTH_SIGMA = 0.01
"""The least step-time sigma at which :data:`SURE_MARGIN` applies (below it, or with no step error, P(on time) may
jump with the work, and :func:`meets` decides)."""


MEETS_MARGIN = 1e-9
"""Relative slack a known plan's step must keep below the chance step limit at a level for :func:`meets` to
count it (the solve's tables and one plan's evaluation agree far closer: the margin only keeps a plan on the
boundary to the solve's own verdict)."""




def _at_level(sc: Scenario, ev: Evaluation, q: float) -> Scenario:
    """The plan ``ev``'s scenario at confidence level ``q``, with the plan's batch and options."""
    plan = ev.plan
    return E.with_plan_options(E.at_plan_batch(replace(sc, task=replace(sc.task, confidence=q)), plan), plan)


def _plan_arrays(sc: Scenario, ev: Evaluation, q: float) -> tuple[Scenario, dict[Any, Any]]:
    """The plan ``ev``'s scenario at level ``q`` (:func:`_at_level`) and its arrays evaluated there."""
    at = _at_level(sc, ev, q)
    return at, E.evaluate_arrays(at, ev.plan.accelerator, **evaluate_keywords(ev.plan))


def level_free_met(sc: Scenario, ev: Evaluation) -> bool:
    """Whether the plan ``ev`` (found in ``sc``) meets every family but the level's own (:data:`LEVEL_BOUND`):
    the same verdict at every confidence level, so :func:`reachable` evaluates it once per plan found."""
    _, r = _plan_arrays(sc, ev, sc.task.confidence if sc.task.confidence is not None else 0.95)
    return all(bool(np.all(v <= lim)) for name, (v, lim) in
               ((k[1], x) for k, x in r.items() if isinstance(k, tuple) and k[0] == "c") if name not in LEVEL_BOUND)


def meets(sc: Scenario, ev: Evaluation, q: float, *, others: bool = False) -> bool:
    """Whether the plan ``ev`` (found in ``sc`` at some level) meets confidence ``q`` as a solve at ``q`` would
    check it: its every constraint family evaluated at ``q`` (only the deadline's chance form moves with the
    level), the step at least :data:`MEETS_MARGIN` (relative) below the chance step limit. A plan that meets
    ``q`` proves level ``q`` reachable without a solve (:func:`reachable`). ``others``: the caller knows the
    plan meets every other family (:func:`level_free_met`); then only the chance step limit at ``q`` is found
    (the deadline family's chance value R + (D - R) step / limit is below D whenever the step keeps the margin
    below the limit)."""
    plan = ev.plan
    if others:
        at = _at_level(sc, ev, q)
        limit = T.chance_step_max(at, plan.accelerator, plan.save_mode, plan.cards, plan.save_interval_s, plan.ep)
        return float(ev.metrics["step_s"]) <= float(limit) * (1.0 - MEETS_MARGIN)
    _, r = _plan_arrays(sc, ev, q)
    step, limit = r[("c", F.STEP_BUDGET)]
    return bool(np.all(r["feasible"])) and float(step) <= float(limit) * (1.0 - MEETS_MARGIN)


# ---------------------------------------------------------------------------------------------
# replanning


def remainder(sc: Scenario, done: float, elapsed_s: float) -> Scenario:
    """The rest of a run: tokens x (1 - done) (at every batch choice), deadline - elapsed, the reserved time not
    yet used (spread evenly over the deadline, stated), the same confidence (default 95 %)."""
    if not math.isfinite(done) or not 0.0 <= done < 1.0:
        raise InputError(f"--done must lie in [0%, 100%), got {done:.4g}")
    if not math.isfinite(elapsed_s) or elapsed_s < 0:
        raise InputError("--elapsed must be a duration >= 0")
    if elapsed_s >= sc.task.deadline_s:
        raise InputError(f"--elapsed {elapsed_s / DAY:g} d is not before the deadline ({sc.task.deadline_s / DAY:g} d)")
    left = sc.task.deadline_s - elapsed_s
    reserved = sc.task.reserved_s * (left / sc.task.deadline_s)  # at the start exactly the reserved time
    task = replace(sc.task, tokens=sc.task.tokens * (1.0 - done), deadline_s=left, reserved_s=reserved,
                   reference_tokens=sc.task.reference_tokens * (1.0 - done),  # every batch choice's share alike
                   confidence=sc.task.confidence if sc.task.confidence is not None else 0.95, ramp=None)
    return replace(sc, task=task)


def layout_change_s(sc: Scenario, held_tp: int | None, new_tp: int, cards_held: int | None, new_cards: int) -> float:
    """Extra seconds of the restart into another layout: every card reads its new shards' row ranges of
    the checkpoint (tpopt.models.reshard.read_plan), i.e. the whole checkpoint once more at the storage
    bandwidth (read assumed as fast as write); 0 when the layout (tp and cards) is the one held."""
    if (held_tp is None or held_tp == new_tp) and (cards_held is None or cards_held == new_cards):
        return 0.0
    return T.checkpoint_write_time(sc)


def replan(sc: Scenario, done: float, elapsed_s: float, cards_held: int | None, backend: str | Solver, req: Request,
           held_tp: int | None = None, solve: Solve = one_space) -> dict[str, Any]:
    """Re-solve the remainder (:func:`remainder`): the cheapest plan that meets the remaining deadline at the
    confidence, its restart into a new layout included; "stay" is the best plan on the cards held. Returns
    the decision ("stay", "add N cards now", "release N cards", or "none": nothing restores the confidence,
    with the confidence that is reachable); ``status`` and ``time_limit_reached`` say whether the remainder's
    solves were proven. ``solve``: each re-solve (:data:`Solve`)."""
    rest = remainder(sc, done, elapsed_s)
    out: dict[str, Any] = {"tokens_left": rest.task.tokens, "days_left": rest.task.deadline_s / DAY,
                           "reserved_days_left": rest.task.reserved_s / DAY, "confidence": rest.task.confidence,
                           "cards_held": cards_held}
    best, _ = solve(rest, backend, req)
    stay = None
    if cards_held is not None:
        stay, _ = solve(rest, backend, replace(req, cards=(int(cards_held),)))
    if best.best is not None:
        change = layout_change_s(rest, held_tp, best.best.plan.tp, cards_held, best.best.plan.cards)
        if change > 0:  # the restart into the new layout comes out of the remaining time: solve again with it
            moved = replace(rest, task=replace(rest.task, reserved_s=rest.task.reserved_s + change))
            best, _ = solve(moved, backend, req)
        out["layout_change_s"] = change
    out["status"] = best.status.value
    out["time_limit_reached"] = bool(best.solver.limit_reached or (stay is not None and stay.solver.limit_reached))
    out["best"] = None if best.best is None else _plan_entry(best.best)
    out["stay"] = None if stay is None or stay.best is None else _plan_entry(stay.best)
    if best.best is None and best.status != Status.INFEASIBLE:  # cut short by the time limit: no verdict
        out["decision"] = "not decided"
    elif best.best is None:
        out["decision"] = "none"
        out["reachable"], why = reach(rest, backend, req, solve=solve)
        if why is not None:
            out["reachable_undecided"] = why
    elif cards_held is None:
        out["decision"] = f"run {best.best.plan.cards} cards"
    elif stay is not None and stay.best is not None and stay.best.metrics["cost"] <= best.best.metrics["cost"]:
        out["decision"] = "stay"
    elif best.best.plan.cards > cards_held:
        out["decision"] = f"add {best.best.plan.cards - cards_held} cards now"
    elif best.best.plan.cards < cards_held:
        out["decision"] = f"release {cards_held - best.best.plan.cards} cards"
    else:
        out["decision"] = "stay"
    return out


def _plan_entry(ev: Evaluation) -> dict[str, Any]:
    return {"plan": ev.plan_dict(), "cards": ev.plan.cards, "finish_days": ev.metrics["finish_days"],
            "cost": ev.metrics["cost"], "cost_unit": ev.metrics["cost_unit"]}


def quantile_table(law: Fn.Distribution, levels: tuple[float, ...] = LEVELS) -> np.ndarray:
    """The finish quantiles (s) of a law at ``levels``."""
    return np.array([law.quantile(q) for q in levels])


__all__ = ["LEVELS", "STEP_UP", "Solve", "one_space", "law_of", "dominant", "progress_marks", "distribution_entry",
           "reachable", "reach", "REACH_WORK", "clock_stop", "meets", "MEETS_MARGIN", "LEVEL_BOUND", "level_free_met",
           "remainder", "layout_change_s", "replan", "quantile_table", "parse_levels", "cost_against_confidence"]


# ---------------------------------------------------------------------------------------------
# cost against confidence


def parse_levels(text: str) -> tuple[float, ...]:
    """Confidence levels from ``50%:99%:5%`` (a range: start, end, step; the end is included when the
    steps reach it), ``50%,90%,99%`` or one level; each strictly between 0 and 100 %."""
    text = str(text).strip()
    if ":" in text:
        parts = [p.strip() for p in text.split(":")]
        if len(parts) != 3 or not all(parts):
            raise InputError(f"--confidence {text!r} is not a range start:end:step (e.g. 50%:99%:5%)")
        a, b = Fn.parse_confidence(parts[0]), Fn.parse_confidence(parts[1])
        step = Fn.parse_confidence(parts[2])
        if b < a:
            raise InputError(f"--confidence {text!r}: the end is below the start")
        n = int(math.floor((b - a) / step + 1e-9)) + 1
        levels = [round(a + i * step, 12) for i in range(n)]
        if levels[-1] < b - 1e-12:
            levels.append(b)
        return tuple(levels)
    return tuple(sorted({Fn.parse_confidence(p) for p in text.split(",") if p.strip()}))


def cost_against_confidence(sc: Scenario, levels: tuple[float, ...], backend: str | Solver, req: Request,
                            solve: Solve = one_space) -> list[dict[str, Any]]:
    """One proven solve per confidence level: the optimum's cards, cost, finish quantile, P(by deadline)."""
    rows: list[dict[str, Any]] = []
    for q in levels:
        r, at = solve(replace(sc, task=replace(sc.task, confidence=q)), backend, req)
        row: dict[str, Any] = {"confidence": q, "status": r.status.value, "cards": None, "cost": None,
                               "finish_q_days": None, "probability_by_deadline": None, "plan": None}
        if r.best is not None:
            law = law_of(at, r.best)
            row.update(cards=r.best.plan.cards, cost=r.best.metrics["cost"], plan=r.best.plan_dict(),
                       finish_q_days=law.quantile(q) / DAY,
                       probability_by_deadline=float(law.cdf(F.limit(F.DEADLINE, at))),
                       cost_unit=r.best.metrics["cost_unit"])
        rows.append(row)
    return rows
