"""Task-level choices solved exactly around the plan solvers: the global batch and training stages.

**Batch.** With a critical batch (B_noise) the global batch B is a plan choice: at B the run needs
E(B) = E_min (1 + B / B_noise) tokens in S(B) = E(B) / B steps (McCandlish et al., "An Empirical
Model of Large-Batch Training"; chapter 10.1.1). Every other term of the model depends on B only
through the task (grad accumulation, DP divisors, iterations), so each batch value is an exact
sub-problem: the same plan model at ``Task.at_batch(B)``. The optimum over batches is the best of
the sub-problems' proven optima (an outer decomposition). Every backend solves the same
sub-problems, so the backends agree on batch scenarios exactly as they agree on fixed ones, and
reports, explain and sweeps name the batch of each plan (``Plan.global_batch``). We chose the outer
decomposition over a batch variable inside the encodings because batch values are few (a handful
of powers of two), each sub-problem keeps the solvers' tables small (the DP domain is the divisors
of *that* batch), and the encodings stay unchanged for every other helper's backend work.

**Stages.** A staged scenario (e.g. 15T tokens at 8K then 800B at 128K) plans every stage on its own
layout; the deadline and the budget cover all stages. Between stages the job saves a checkpoint on
the old layout and restores it on the new one (the chapter's 10.4 relations: write time = checkpoint
bytes / write bandwidth, then the restore time), charged to the stage whose cards do it. Stages share
nothing else, so the joint optimum is: per stage the Pareto front of (finish, cost) over its plans
(every batch choice included), then the cheapest combination whose finishes sum to at most the
deadline (a multiple-choice knapsack solved exactly by merging the fronts). A front comes from one
exact enumeration for spaces of up to ``report.TABLE_LIMIT`` plans, otherwise from a sequence of
proven solves, each at a deadline just below the previous point's finish (the epsilon-constraint
method), limited to the window the other stages leave.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, cast

import numpy as np

from tpopt.errors import InputError
from tpopt.models import batch as B
from tpopt.models import families as F
from tpopt.models import terms as T
from tpopt.models.evaluate import Evaluation, evaluate
from tpopt.models.plan import CostOptions, Scenario
from tpopt.models.units import DAY
from tpopt.optimizer import backends, core
from tpopt.optimizer import report as R
from tpopt.optimizer.backends import Solver
from tpopt.optimizer.enumerate import PointTable
from tpopt.optimizer.limits import Clock, TimeLimitReached, Undecided, clock_of
from tpopt.optimizer.report import TABLE_LIMIT
from tpopt.optimizer.result import (
    Request,
    SolveResult,
    SolverInfo,
    Status,
    objective_key,
    objective_value,
    plan_summary,
)
from tpopt.optimizer.space import FAMILIES, Space

LIMIT_FAMILIES = F.STAGE_SHARED  # the families the stages share (checked on the sums)
REL = 1e-9


# ---------------------------------------------------------------------------------------------
# batch choices


def batch_choices(sc: Scenario) -> tuple[int, ...]:
    """The global batches a plan may use: [search] global_batch, else the task's."""
    return tuple(sc.search.global_batch) or (sc.task.global_batch,)


def has_task_choices(sc: Scenario) -> bool:
    """True when the solve goes through this module: several batches, a batch other than the task's,
    or training stages."""
    return bool(sc.stages) or batch_choices(sc) != (sc.task.global_batch,)


def at_batch(sc: Scenario, batch: int) -> Scenario:
    """The scenario at ``batch`` sequences per step (tokens from the critical-batch model)."""
    if batch == sc.task.global_batch:
        return sc
    return replace(sc, task=sc.task.at_batch(batch), search=replace(sc.search, global_batch=(int(batch),)))


def batch_figures(sc: Scenario, ev: Evaluation | None = None) -> dict[str, Any]:
    """The critical-batch figures of a task at its batch (chapter 10.1.1), and with a plan the
    token-efficiency cost: tokens beyond E_min and what they cost.

    reference run (stated tokens D at batch B_ref) -> S_min = D / B_ref / (1 + B_noise / B_ref),
    E_min = B_noise S_min; at the plan's batch B: E(B) = E_min (1 + B / B_noise) tokens in
    S(B) = S_min (1 + B_noise / B) steps; the tokens above E_min (E_min B / B_noise) are the price
    of the batch's gradient noise, in USD their share of the training cost (reserved time excluded).
    """
    t = sc.task
    out: dict[str, Any] = {
        "global_batch": t.global_batch, "seq_len": t.seq_len, "tokens_per_step": t.tokens_per_step,
        "tokens": t.tokens, "reference_batch": t.ref_batch, "reference_tokens": t.ref_tokens,
        "critical_batch_tokens": t.critical_batch, "critical_batch_source": t.critical_batch_source,
        "iterations": T.iteration_count(sc), "ramp": None}
    if t.ramp is not None and t.ramp[0] < t.global_batch:
        steps, seqs = B.ramp_steps(t.ramp[0], t.ramp[1], t.global_batch, min(t.ramp[2], t.tokens) / t.seq_len)
        out["ramp"] = {"start": t.ramp[0], "increment": t.ramp[1], "tokens": seqs * t.seq_len, "steps": steps}
    bn = t.critical_batch
    if bn is not None:
        ref_bt = t.ref_batch * t.seq_len
        s_min = float(B.min_steps(t.ref_tokens / ref_bt, ref_bt, bn))
        e_min = float(B.min_examples(s_min, bn))
        out.update({"s_min": s_min, "e_min": e_min, "reference_steps": math.ceil(t.ref_tokens / ref_bt - 1e-9),
                    "reference_ratio": ref_bt / bn, "ratio": t.tokens_per_step / bn,
                    "steps_at_batch": float(B.steps_at_batch(s_min, bn, t.tokens_per_step)),
                    "weak_scaling_limit": float(B.weak_scaling_limit(t.tokens_per_step, bn)),
                    "reference_weak_scaling_limit": float(B.weak_scaling_limit(ref_bt, bn)),
                    "extra_tokens": t.tokens - e_min, "tokens_vs_reference": t.tokens - t.ref_tokens})
        if ev is not None:
            m = ev.metrics
            train_share = (m["finish_days"] - sc.task.reserved_s / DAY) / m["finish_days"] if m["finish_days"] else 0
            training_cost = m["cost"] * train_share
            out["extra_cost"] = training_cost * (t.tokens - e_min) / t.tokens
            out["cost_vs_reference"] = training_cost * (t.tokens - t.ref_tokens) / t.tokens
            out["cost_unit"] = m["cost_unit"]
    return out


@dataclass
class Choice:
    """One batch value: its scenario, space and proven result."""

    batch: int
    sc: Scenario
    space: Space
    result: SolveResult


@dataclass
class BatchSolve:
    result: SolveResult  # the merged result (best plans over every batch)
    choices: list[Choice]

    def choice_of(self, ev: Evaluation) -> Choice:
        return next(c for c in self.choices if c.batch == ev.plan.global_batch)


def merge_status(statuses: Iterable[Status]) -> Status:
    """Proven optimal only when every sub-problem is proven (optimal or infeasible)."""
    statuses = list(statuses)
    if all(s == Status.INFEASIBLE for s in statuses):
        return Status.INFEASIBLE
    proven = all(s in (Status.OPTIMAL, Status.INFEASIBLE) for s in statuses)
    found = any(s in (Status.OPTIMAL, Status.FEASIBLE) for s in statuses)
    if found:
        return Status.OPTIMAL if proven else Status.FEASIBLE
    return Status.UNKNOWN


def solve(sc: Scenario, backend: str | Solver = backends.DEFAULT, req: Request | None = None,
          restrict: R.Restrict | None = None, space: Space | None = None) -> SolveResult:
    """The best ``req.top`` plans of any unstaged scenario: one exact solve per global batch when the
    batch is a choice (:func:`solve_batches`), else :func:`tpopt.optimizer.core.solve` of its one space."""
    if space is None and sc.stages:
        raise InputError(core.STAGED)
    solver = backends.checked(backend)
    if space is None and has_task_choices(sc):
        return solve_batches(sc, solver, req, restrict).result
    return core.solve(sc, solver, req, restrict, space)


def solve_batches(sc: Scenario, solver: Solver, req: Request | None = None,
                  restrict: R.Restrict | None = None,
                  share: Callable[[Scenario], Space | None] | None = None,
                  floors: Mapping[int, tuple[float, float] | None] | None = None) -> BatchSolve:
    """The best ``req.top`` plans over every batch choice (each batch's exact optimum, merged). ``share``: a
    batch's space made of tables already built, or None (a re-solve at another confidence level shares the
    report's batch spaces: :func:`tpopt.optimizer.plan.shared_space`); not with ``restrict``. ``floors``: a
    proven lower bound of a batch's objective key (None: the batch has no plan), for the best plan alone
    (``req.top`` 1): the batches are solved from the lowest floor up, and one whose floor is above the best plan
    found (strictly) or that has no plan is not solved (it cannot hold the best: the confidence report's step up,
    whose higher level admits no plan a lower level ruled out); the result keeps the batches' order."""
    req = req or Request()
    clock = clock_of(req)  # one clock over every batch's solve
    t0 = time.perf_counter()
    choices: list[Choice] = []
    order = batch_choices(sc)
    bounds = dict(floors or {}) if max(1, req.top) == 1 else {}

    def rank(b: int) -> tuple[int, tuple[float, ...]]:  # unbounded first, then by floor, those without a plan last
        if b not in bounds:
            return 0, ()
        f = bounds[b]
        return (2, ()) if f is None else (1, f)

    for b in sorted(order, key=rank):
        floor = bounds.get(b, ())
        best = min((objective_key(ev, req.objective) for c in choices for ev in c.result.plans), default=None)
        if choices and b in bounds and (floor is None or (best is not None and floor > best)):
            continue  # proven not to hold the best plan
        clock.report("solving the global batches", len(choices), len(order), objective=req.objective)
        sub = at_batch(sc, b)
        space = (share(sub) if share is not None and restrict is None else None) or Space.from_scenario(sub, restrict)
        r = core.solve(sub, solver, req, space=space)
        choices.append(Choice(b, sub, space, r))
    choices.sort(key=lambda c: order.index(c.batch))
    K = max(1, req.top)
    plans = sorted((ev for c in choices for ev in c.result.plans), key=lambda ev: objective_key(ev, req.objective))
    info = SolverInfo(name=solver.name, wall_s=time.perf_counter() - t0,
                      points=sum(c.result.solver.points for c in choices),
                      evaluated=sum(c.result.solver.evaluated for c in choices),
                      rounds=sum(c.result.solver.rounds for c in choices),
                      note=f"{choices[0].result.solver.note or solver.name}, one exact solve per global batch "
                           f"({len(choices)})")
    status = merge_status(c.result.status for c in choices)
    info.gap = 0.0 if status == Status.OPTIMAL else None
    info.limit_reached, info.limit_phase = clock.reached, clock.phase
    info.fallback = "; ".join(dict.fromkeys(c.result.solver.fallback for c in choices if c.result.solver.fallback))
    enforced = choices[0].result.enforced
    return BatchSolve(SolveResult(status=status, objective=req.objective, plans=plans[:K], solver=info,
                                  enforced=enforced), choices)


# ---------------------------------------------------------------------------------------------
# analysis over batch choices


class MultiOracle:
    """Report queries answered over every batch choice: the best plan over all of them (``restrict``
    may name ``global_batch`` to select some), so a family "binds" when dropping it admits a better
    plan at any batch."""

    def __init__(self, oracles: dict[int, R.Oracle], space: Space):
        self.oracles = oracles  # batch -> oracle of that batch's space
        self.space = space  # the chosen batch's space (the families no plan can violate do not depend on the batch)
        self.name = "/".join(sorted({o.name for o in oracles.values()}))

    def _pick(self, restrict: R.Restrict | None) -> tuple[list[tuple[int, R.Oracle]], R.Restrict | None]:
        restrict = dict(restrict or {})
        batches = restrict.pop("global_batch", None)
        items = [(b, o) for b, o in self.oracles.items() if batches is None or b in set(batches)]
        return items, restrict or None

    def best(self, enforced: Collection[str], objective: str, restrict: R.Restrict | None = None,
             cards: R.Cards = None) -> Evaluation | None:
        items, rest = self._pick(restrict)
        found = [ev for _, o in items for ev in [o.best(enforced, objective, rest, cards)] if ev is not None]
        return min(found, key=lambda ev: objective_key(ev, objective)) if found else None


def batch_analysis(bs: BatchSolve, solver: Solver, req: Request, enforced: Collection[str]) -> dict[str, Any]:
    """Binding families over every batch, the usual alternatives at the chosen batch, and one
    alternative per other batch (feasible but worse, or ruled out by what); under the request's clock
    like :func:`tpopt.optimizer.report.analysis` (items it leaves open are marked so)."""
    best = bs.result.best
    assert best is not None, "analysed after a feasible solve"
    chosen = bs.choice_of(best)
    objective = req.objective
    clock = clock_of(req)
    undecided: list[str] = []
    try:
        with clock.stoppable("analysing the optimum"):
            oracles: dict[int, R.Oracle] = {c.batch: R.make_oracle(c.space, solver, req) for c in bs.choices}
    except TimeLimitReached:
        return {"oracle": None, "binding": [], "alternatives": [], "robustness": R.robustness(chosen.sc, best),
                "undecided": [f for f in R.RELAXABLE if f in enforced], "analysis": "time limit reached"}
    multi = MultiOracle(oracles, chosen.space)
    binds = R.binding_families(multi, best, objective, enforced, undecided)
    own = oracles[chosen.batch]
    # fewer cards and other accelerators at any batch; other choices at the same scale at the chosen batch
    alts = R.why_not_cheaper(multi, chosen.space, best, objective, enforced, same_scale=False)
    if isinstance(own, R.TableOracle):
        alts += [a for a in R.why_not_cheaper(own, chosen.space, best, objective, enforced, fewer_cards=0)
                 if a["kind"] == "same scale"]
    for c in bs.choices:
        if c.batch == chosen.batch:
            continue
        label = f"global batch {c.batch:,} ({c.batch * c.sc.task.seq_len / 1e6:,.2f}M tokens per step)"
        if c.result.best is not None:
            alt = c.result.best
            alts.append({"alternative": label, "kind": "batch", "feasible": True,
                         "plan": plan_summary(alt), "objective": objective_value(alt, objective),
                         "delta": objective_value(alt, objective) / objective_value(best, objective) - 1})
        elif c.result.status == Status.INFEASIBLE:
            try:
                why = R._ruled_out(oracles[c.batch], objective, enforced)
                alts.append({"alternative": label, "kind": "batch", "feasible": False, "ruled_out_by": why})
            except Undecided:
                alts.append({"alternative": label, "kind": "batch", "feasible": None,
                             "undecided": "time limit reached"})
    done = not undecided and all(a["feasible"] is not None for a in alts)
    return {"oracle": multi.name, "binding": [b.as_dict(best, objective) for b in binds], "alternatives": alts,
            "robustness": R.robustness(chosen.sc, best), "undecided": undecided,
            "analysis": "done" if done else "time limit reached"}


def batch_rows(bs: BatchSolve, objective: str) -> list[dict[str, Any]]:
    """One row per batch choice: tokens, steps, and its best plan (or its status)."""
    rows: list[dict[str, Any]] = []
    for c in bs.choices:
        f = batch_figures(c.sc, c.result.best)
        row = {"global_batch": c.batch, "tokens_per_step": f["tokens_per_step"], "tokens": f["tokens"],
               "iterations": f["iterations"], "ratio": f.get("ratio"), "status": c.result.status.value}
        if c.result.best is not None:
            m = c.result.best.metrics
            row.update({"cards": c.result.best.plan.cards, "finish_days": m["finish_days"], "cost": m["cost"],
                        "cost_unit": m["cost_unit"], "extra_cost": f.get("extra_cost")})
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------------------------
# training stages


def transition_s(sc: Scenario) -> tuple[float, float]:
    """(save, restore) seconds between two stages: the checkpoint write time on the old layout
    (checkpoint bytes / write bandwidth, chapter 10.4.2) and the restore time on the new one."""
    return T.checkpoint_write_time(sc), sc.reliability.restore_s


@dataclass
class StageInfo:
    name: str
    sc: Scenario  # the stage's scenario (transitions inside its reserved time)
    reserved_s: float  # the scenario's reserved time charged to this stage (first stage only)
    save_s: float  # checkpoint write at the end (all but the last stage)
    restore_s: float  # restore at the start (all but the first stage)


def stage_scenarios(sc: Scenario) -> list[StageInfo]:
    """One scenario per stage, the transitions folded into its reserved time (paid at its rate)."""
    save, restore = transition_s(sc)
    out = []
    n = len(sc.stages)
    for i, st in enumerate(sc.stages):
        res = sc.task.reserved_s if i == 0 else 0.0
        sv = save if i < n - 1 else 0.0
        rs = restore if i > 0 else 0.0
        task = replace(st.task, deadline_s=sc.task.deadline_s, reserved_s=res + sv + rs)
        sub = replace(sc, task=task, search=st.search, stages=(), name=f"{sc.name} [{st.name}]")
        out.append(StageInfo(st.name, sub, res, sv, rs))
    return out


@dataclass
class FrontPoint:
    finish_s: float
    cost: float
    ev: Evaluation
    sc: Scenario  # the (batch) scenario the plan belongs to


def pareto(points: list[FrontPoint]) -> list[FrontPoint]:
    """Points no other point beats on both finish and cost, by increasing finish (ties: cheaper first)."""
    out: list[FrontPoint] = []
    for p in sorted(points, key=lambda p: (p.finish_s, p.cost)):
        if not out or p.cost < out[-1].cost * (1 - REL):
            out.append(p)
    return out


def _limits_free(sc: Scenario, deadline_s: float) -> Scenario:
    return replace(sc, task=replace(sc.task, deadline_s=deadline_s), cost=CostOptions(None))


def stage_front(st: Scenario, solver: Solver, req: Request, enforced: Collection[str], t_max: float,
                cheapest_only: bool = False) -> tuple[list[FrontPoint], bool]:
    """The Pareto front of (finish, cost) of one stage (every batch choice) up to finish ``t_max``,
    every family but the shared limits enforced; (front, proven)."""
    own = [f for f in enforced if f not in LIMIT_FAMILIES]
    points: list[FrontPoint] = []
    proven = True
    clock = clock_of(req)
    for b in batch_choices(st):
        if clock.expired("tracing a stage's Pareto front"):
            return pareto(points), False
        sub = _limits_free(at_batch(st, b), t_max)
        space = Space.from_scenario(sub)
        if space.size() <= TABLE_LIMIT:
            try:
                with clock.stoppable("tracing a stage's Pareto front"):
                    tab = PointTable.build(space)
            except TimeLimitReached:
                return pareto(points), False
            sel = np.flatnonzero(tab.mask(own) & (tab.finish <= t_max * (1 + REL)))
            sel = sel[np.lexsort((sel, tab.cost[sel], tab.finish[sel]))]
            best_cost = math.inf
            for i in sel:  # Pareto points only, in increasing finish
                if tab.cost[i] < best_cost * (1 - REL):
                    best_cost = tab.cost[i]
                    a = {v: int(tab.idx[v][i]) for v in tab.idx}
                    ev = evaluate(sub, space.plan(a))
                    points.append(FrontPoint(ev.metrics["finish_days"] * DAY, ev.metrics["cost"], ev, sub))
            continue
        t = t_max
        assert req.clock is not None, "solve_stages starts the request's clock"
        while True:
            if req.clock.expired("tracing a stage's Pareto front"):
                proven = False
                break
            r = core.solve(_limits_free(sub, t), solver,
                           Request(objective="cost", enforce=frozenset(own + [F.DEADLINE]),
                                   time_limit=req.time_limit, seed=req.seed, workers=req.workers, clock=req.clock))
            if r.status not in (Status.OPTIMAL, Status.INFEASIBLE):
                proven = False
            if r.best is None:
                break
            ev = r.best
            f = ev.metrics["finish_days"] * DAY
            points.append(FrontPoint(f, ev.metrics["cost"], ev, sub))
            if cheapest_only:
                break
            t = f * (1 - 1e-9)
    return pareto(points), proven


def combine_fronts(fronts: list[list[FrontPoint]], deadline_s: float, max_cost: float | None, objective: str
                   ) -> tuple[FrontPoint, ...] | None:
    """The best combination (one point per stage) with finishes summing to <= deadline and costs to
    <= max_cost: pairwise merge of the fronts keeping only Pareto combinations (exact)."""
    combos: list[tuple[tuple[float, float], tuple[FrontPoint, ...]]] = [((0.0, 0.0), ())]
    for fr in fronts:
        merged = [((f + p.finish_s, c + p.cost), picks + (p,)) for (f, c), picks in combos for p in fr]
        merged = [m for m in merged if m[0][0] <= deadline_s * (1 + REL)
                  and (max_cost is None or m[0][1] <= max_cost * (1 + REL))]
        merged.sort(key=lambda m: (m[0][0], m[0][1]))
        combos = []
        for m in merged:
            if not combos or m[0][1] < combos[-1][0][1] * (1 - REL):
                combos.append(m)
    if not combos:
        return None
    key = (lambda m: (m[0][1], m[0][0])) if objective == "cost" else (lambda m: (m[0][0], m[0][1]))
    return min(combos, key=key)[1]


@dataclass
class StagedSolve:
    status: Status
    objective: str
    stages: list[StageInfo]
    picks: list[FrontPoint] = field(default_factory=list)  # one per stage (empty when infeasible)
    fronts: list[list[FrontPoint]] = field(default_factory=list)
    solver: SolverInfo = field(default_factory=lambda: SolverInfo("none"))
    enforced: tuple[str, ...] = ()
    fastest: list[Evaluation | None] = field(default_factory=list)  # per stage: its fastest plan, shared limits dropped
    decided: list[bool] = field(default_factory=list)  # per stage: fastest plan (or none) and front proven

    @property
    def feasible(self) -> bool:
        return bool(self.picks)

    @property
    def finish_s(self) -> float:
        return sum(p.finish_s for p in self.picks)

    @property
    def cost(self) -> float:
        return sum(p.cost for p in self.picks)


def solve_stages(sc: Scenario, backend: str | Solver = backends.DEFAULT, req: Request | None = None) -> StagedSolve:
    """The cheapest (or fastest) plan per stage such that all stages finish by the deadline."""
    req = req or Request()
    clock = clock_of(req)  # one clock over every stage's solves
    t0 = time.perf_counter()
    enforced = req.enforced(FAMILIES)
    stages = stage_scenarios(sc)
    solver = backends.checked(backend)
    deadline = F.limit(F.DEADLINE, sc)
    info = SolverInfo(name=solver.name, note="one Pareto front per stage, merged")
    out = StagedSolve(Status.INFEASIBLE, req.objective, stages, solver=info,
                      enforced=tuple(f for f in FAMILIES if f in enforced))
    # each stage's fastest plan (every family of its own enforced): the window the others leave
    own = frozenset(f for f in enforced if f not in LIMIT_FAMILIES)
    fastest: list[Evaluation | None] = []
    proven = True
    for st in stages:
        best: Evaluation | None = None
        decided = True
        for b in batch_choices(st.sc):
            free = _limits_free(at_batch(st.sc, b), deadline)
            space = Space.from_scenario(free)  # a tiny stage is proven by its enumeration, as tpopt solve does
            r = core.solve(free, core.tiny_solver(space, solver, req.method, req.solver_named),
                           Request(objective="time", enforce=own, time_limit=req.time_limit, seed=req.seed,
                                   workers=req.workers, clock=clock), space=space)
            decided &= r.status in (Status.OPTIMAL, Status.INFEASIBLE)
            if r.best is not None and (best is None or objective_key(r.best, "time") < objective_key(best, "time")):
                best = r.best
        fastest.append(best)
        out.decided.append(decided)
        proven &= decided
    out.fastest = fastest
    if any(f is None for f in fastest):  # a stage without a plan: none exists (proven) or none found in time
        out.status = Status.INFEASIBLE if proven else Status.UNKNOWN
        return _finish_stages(out, clock, t0)
    mins = [f.metrics["finish_days"] * DAY for f in cast(list[Evaluation], fastest)]  # none is None (above)
    use_deadline = F.DEADLINE in enforced
    budget = sc.cost.max_cost if F.BUDGET in enforced else None
    windows = [(deadline - (sum(mins) - m)) if use_deadline else math.inf for m in mins]
    if use_deadline and sum(mins) > deadline * (1 + REL):
        out.status = Status.INFEASIBLE if proven else Status.UNKNOWN
        return _finish_stages(out, clock, t0)
    cap = deadline if use_deadline else math.inf
    fronts: list[list[FrontPoint]] | None = None
    if req.objective == "cost":  # each stage's cheapest plan in its window; if they fit together: optimal
        firsts = [stage_front(st.sc, solver, req, enforced, w if math.isfinite(w) else 1e300, True)
                  for st, w in zip(stages, windows, strict=False)]
        proven &= all(p for _, p in firsts)
        out.decided = [d and p for d, (_, p) in zip(out.decided, firsts, strict=True)]  # a front cut short too
        picks = [fr[-1] for fr, _ in firsts if fr]  # fronts run fastest -> cheapest
        if len(picks) == len(firsts) and sum(p.finish_s for p in picks) <= cap * (1 + REL) and \
                (budget is None or sum(p.cost for p in picks) <= budget * (1 + REL)):
            fronts = [[p] for p in picks]
    if fronts is None:
        fronts = []
        for i, (st, w) in enumerate(zip(stages, windows, strict=False)):
            fr, p = stage_front(st.sc, solver, req, enforced, w if math.isfinite(w) else 1e300)
            proven &= p
            out.decided[i] = out.decided[i] and p  # its front cut short by the limit: the stage is not decided
            fronts.append(fr)
    out.fronts = fronts
    pick = combine_fronts(fronts, cap, budget, req.objective)
    if pick:
        out.picks = list(pick)
        out.status = Status.OPTIMAL if proven else Status.FEASIBLE
    else:
        out.status = Status.INFEASIBLE if proven else Status.UNKNOWN
    return _finish_stages(out, clock, t0)


def _finish_stages(out: StagedSolve, clock: Clock, t0: float) -> StagedSolve:
    """The staged solve's solver figures, on every return: a gap only for a proven answer (0 when optimal,
    none known otherwise), the time limit as the clock saw it (a stage cut short is not decided)."""
    info = out.solver
    info.gap = 0.0 if out.status == Status.OPTIMAL else None
    info.limit_reached, info.limit_phase = clock.reached, clock.phase if clock.reached else ""
    info.wall_s = time.perf_counter() - t0
    return out


def allocated(ss: StagedSolve, i: int) -> float:
    """The deadline stage i has, given the other stages' chosen plans."""
    return F.limit(F.DEADLINE, ss.stages[i].sc) - (ss.finish_s - ss.picks[i].finish_s)
