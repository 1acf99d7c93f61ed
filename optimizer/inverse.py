"""The inverse question: which model size and how many tokens a budget and a date buy, and what binds.

Model size (a listed family) and training tokens (a grid) are decisions above the plan: each candidate
(size, tokens) is the scenario with that model and those tokens, solved by :func:`tpopt.optimizer.plan.plan`
(the cheapest plan meeting the date, every plan constraint, the confidence and the hardware in force), and
the predicted loss comes from a scaling law (:mod:`tpopt.models.scaling`). Objectives:

* ``loss``: the least predicted loss whose cheapest plan meets the date and costs at most the budget;
* ``cost``: the least cost whose predicted loss is at most a target; each size trains on exactly the tokens the
  target needs (:func:`exact_tokens`: L(N, D) = target solved for D in closed form, through the inverse of
  Muennighoff's effective data where the data is limited), not a grid value above them: at a fixed size the
  cost does not decrease in the tokens, so the fewest tokens reaching the target are the cheapest.

Inference-aware (Sardana et al. 2024, Beyond Chinchilla-Optimal): with a stated number of inference tokens T,
each size's cost adds the serving cost 2 N T FLOPs at a stated price per 1e15 FLOP; the least total picks a
smaller model trained longer where that pays, and under a budget the budget covers the total (the serving cost
is fixed per size, so the tokens a size affords remain a prefix of the grid).

Exact pruning. The loss decreases in N and in D (and in D through the effective data of repeated tokens).
At a fixed size the cost of the cheapest on-time plan does not decrease in the tokens: every plan's step
count, and so its time and cost, grows with the tokens, and the plans meeting the date only shrink. So at
each size the candidates the budget and date allow are a prefix of the token grid: a bisection finds its
end (log2 of the grid's length solves, not all), the best candidate of a size is its most tokens, and a
size whose loss at the grid's top cannot beat the best found is never solved.

Continuous tokens. Where the tokens are a range (``token_resolution`` set), the grid only locates each size's
bracket (grid[i] allowed, grid[i+1] not); a bisection over the token count inside it (geometric midpoints,
whole tokens, each probe a proven solve) narrows it until its ends are within the resolution, by the same
monotonicity: the most tokens the budget and date allow lies in [lo, hi) with hi <= lo (1 + resolution), and
lo is the answer. A size whose loss at its bracket's upper end cannot beat the best found is not refined (its
loss stays above the best at any tokens it can afford), so the chosen size is always refined.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tpopt.catalogs import load_catalog
from tpopt.catalogs.scaling import ScalingCatalog, load_scaling
from tpopt.catalogs.scenario import build_scenario, with_overrides
from tpopt.errors import InputError
from tpopt.models import families as F
from tpopt.models.arch import ModelArch, param_count
from tpopt.models.plan import Scenario
from tpopt.models.scaling import (
    ScalingLaw,
    effective_tokens,
    extrapolated,
    loss,
    repeated_tokens_for,
    serving_cost,
    tokens_for_loss,
    usd_per_pflop,
)
from tpopt.models.shapes import ladder
from tpopt.models.units import parse_count, parse_number
from tpopt.optimizer import plan as P
from tpopt.optimizer.explain.inputs import with_deadline
from tpopt.optimizer.result import Request, Status

#: Why a candidate is left out, or what stops more tokens at its size.
BUDGET, DATE, DATA, NO_PLAN, GRID, LOSS = "budget", "date", "data", "no plan", "token grid", "target loss"


@dataclass(frozen=True)
class InverseQuestion:
    """The decision space and the objective: sizes (catalog model names), the ascending token grid, the fit,
    the unique tokens available and the epochs allowed over them (None: no data limit), the budget
    (None: none) and, for the least-cost objective, the target loss."""

    models: tuple[str, ...]
    tokens: tuple[float, ...]
    law: ScalingLaw
    repeat_decay: float = 15.4
    unique_tokens: float | None = None
    max_epochs: float = 1.0
    budget: float | None = None
    target_loss: float | None = None
    inference_tokens: float = 0.0
    serve_usd_per_pflop: float = 0.0
    serving_basis: str = ""  # how the serving price was set (stated in the output)
    token_resolution: float | None = None  # refine tokens inside the grid's bracket to this fraction (None: grid)

    def serve_cost(self, params: float) -> float:
        """The serving cost of a size (0 without inference tokens)."""
        return serving_cost(params, self.inference_tokens, self.serve_usd_per_pflop) if self.inference_tokens else 0.0

    def train_budget(self, params: float) -> float | None:
        """What the budget leaves for training a size: the budget less its serving cost (None: no budget)."""
        return None if self.budget is None else self.budget - self.serve_cost(params)

    @property
    def objective(self) -> str:
        return "loss" if self.target_loss is None else "cost"

    @property
    def data_limit(self) -> float | None:
        """The most tokens the data allows: unique tokens x epochs (None: no limit)."""
        return None if self.unique_tokens is None else self.unique_tokens * self.max_epochs


@dataclass
class Solved:
    """One (size, tokens) solved: the cheapest on-time plan's cost and finish (None: no plan meets the date)."""

    tokens: float
    cost: float | None
    finish_days: float | None
    plan: dict[str, Any] | None
    view: Scenario | None = None
    report: dict[str, Any] | None = None
    cost_unit: str = "USD"  # "card-hours" where the card has no price

    def allowed(self, budget: float | None) -> bool:
        return self.cost is not None and (budget is None or self.cost <= budget)


@dataclass
class Candidate:
    """One size's answer: its best tokens (most within budget and date, or fewest reaching the target),
    the predicted loss, the cost, and what stops it (``binds``)."""

    model: str
    params: int
    tokens: float | None = None
    loss: float | None = None
    effective_tokens: float | None = None
    cost: float | None = None
    serve_cost: float = 0.0
    finish_days: float | None = None
    binds: str = ""
    detail: str = ""
    extrapolated: list[str] = field(default_factory=list)
    pruned: bool = False
    loss_bound: float | None = None  # pruned: the size's loss at the grid's top, no better than the best
    best: Solved | None = None
    bracket: tuple[float, float] | None = None  # refined: the most tokens lie in [lo, hi) (lo allowed, hi not)
    coarse: bool = False  # not refined: its loss at the bracket's upper end cannot beat the best; tokens on the grid

    @property
    def total_cost(self) -> float | None:
        """Training plus serving cost (None: not trained)."""
        return None if self.cost is None else self.cost + self.serve_cost

    def row(self) -> dict[str, Any]:
        return {"model": self.model, "params": self.params, "tokens": self.tokens, "loss": self.loss,
                "effective_tokens": self.effective_tokens, "cost": self.cost, "serve_cost": self.serve_cost,
                "total_cost": self.total_cost, "finish_days": self.finish_days,
                "binds": self.binds, "detail": self.detail, "extrapolated": self.extrapolated, "pruned": self.pruned,
                "loss_bound": self.loss_bound, "tokens_bracket": None if self.bracket is None else list(self.bracket),
                "coarse": self.coarse}


@dataclass
class InverseResult:
    question: InverseQuestion
    candidates: list[Candidate]
    chosen: Candidate | None
    solves: int


Build = Callable[[str, float], Scenario]
"""A scenario with the given catalog model and training tokens, everything else as stated."""


def predicted_loss(q: InverseQuestion, params: float, tokens: float) -> tuple[float, float]:
    """(L(N, D'), D'): the fit's loss at the effective data of ``tokens`` over the unique data."""
    d_eff = effective_tokens(tokens, q.unique_tokens, q.repeat_decay)
    return loss(q.law, params, d_eff), d_eff


class _Solver:
    """Solves (size, tokens) once each, counting the solves."""

    def __init__(self, build: Build, backend: str, req: Request) -> None:
        self.build, self.backend, self.req = build, backend, req
        self.cache: dict[tuple[str, float], Solved] = {}

    def __call__(self, model: str, tokens: float) -> Solved:
        key = (model, tokens)
        if key not in self.cache:
            sc = self.build(model, tokens)
            pr = P.plan(sc, self.backend, self.req, analyse=False, why=False)
            _proven(pr, model, tokens)
            if pr.feasible and pr.best is not None:
                m = pr.best.metrics
                self.cache[key] = Solved(tokens, float(m["cost"]), float(m["finish_days"]),
                                         pr.best.plan_dict(), pr.view, pr.report, str(m["cost_unit"]))
            else:
                self.cache[key] = Solved(tokens, None, None, None)
        return self.cache[key]


def _proven(pr: P.PlanReport, model: str, tokens: float) -> None:
    """Only proven answers (the cheapest plan, or none exists) keep the pruning exact: a solve cut short
    by the time limit is one error line naming the candidate."""
    if pr.status not in (Status.OPTIMAL, Status.INFEASIBLE):
        raise InputError(f"the solve of {model} at {tokens:.3g} tokens ended {pr.status.value} (not proven); "
                         f"raise --time-limit, which bounds the whole command")


def _unsolvable_why(s: _Solver, model: str, tokens: float, budget: float | None) -> tuple[str, str]:
    """Why the smallest candidate of a size is out: over budget, no plan by the date, or no plan at all
    (the same solve with the deadline 1000 times longer finds none either: memory, layout or input bind)."""
    first = s(model, tokens)
    if first.cost is not None:
        return BUDGET, f"{tokens:.3g} tokens cost {first.cost:,.0f} > budget {budget:,.0f} {first.cost_unit}"
    sc = s.build(model, tokens)
    long = with_deadline(sc, F.limit(F.DEADLINE, sc) * 1000.0)
    pr = P.plan(long, s.backend, s.req, analyse=False, why=False)
    _proven(pr, model, tokens)
    if pr.feasible:
        return DATE, f"no plan finishes {tokens:.3g} tokens by the deadline"
    return NO_PLAN, (f"no plan meets the plan constraints (memory, layout, input) at any deadline; tpopt solve with "
                     f"this scenario and --model {model} names the conflict")


def _max_tokens(s: _Solver, q: InverseQuestion, model: str, grid: Sequence[float],
                budget: float | None) -> tuple[int, str, str]:
    """The index of the most tokens the budget and date allow (-1: none) by bisection over the monotone
    prefix, and what stops the next step: budget, date, the data limit or the grid's end."""
    lo, hi = -1, len(grid)  # grid[:lo+1] allowed, grid[hi:] not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if s(model, grid[mid]).allowed(budget):
            lo = mid
        else:
            hi = mid
    if lo == len(grid) - 1:
        limit = q.data_limit
        if limit is not None and grid[-1] >= limit * (1 - 1e-12) and limit < q.tokens[-1]:
            return lo, DATA, (f"the data allows {limit:.3g} tokens ({q.unique_tokens:.3g} unique x "
                              f"{q.max_epochs:g} epochs)")
        return lo, GRID, f"the grid's largest, {grid[-1]:.3g} tokens, is within budget and date"
    nxt = s(model, grid[lo + 1])
    if nxt.cost is not None:
        assert budget is not None
        return lo, BUDGET, (f"{grid[lo + 1]:.3g} tokens cost {nxt.cost:,.0f} > budget {budget:,.0f} {nxt.cost_unit}"
                            + _less_serving(q))
    if lo < 0:
        why, detail = _unsolvable_why(s, model, grid[0], budget)
        return lo, why, detail
    return lo, DATE, f"no plan finishes {grid[lo + 1]:.3g} tokens by the deadline"


def _refine(s: _Solver, q: InverseQuestion, model: str, lo: float, hi: float, budget: float | None,
            resolution: float) -> tuple[float, tuple[float, float], str, str]:
    """The most tokens the budget and date allow, to ``resolution``, inside the bracket ``lo`` (allowed) to
    ``hi`` (not): a bisection over whole token counts at geometric midpoints, sqrt(lo hi), until
    hi <= lo (1 + resolution) (ceil(log2(ln(hi/lo) / ln(1 + resolution))) solves at most). Returns the tokens
    (the bracket's allowed end), the final bracket, and what stops more: budget or date."""
    while hi > lo * (1 + resolution):
        mid = float(round(math.sqrt(lo * hi)))
        if not lo < mid < hi:
            break
        if s(model, mid).allowed(budget):
            lo = mid
        else:
            hi = mid
    nxt = s(model, hi)
    within = f" (refined to {resolution:.2%}: {lo:.4g} allowed, {hi:.4g} not)"
    if nxt.cost is not None:
        assert budget is not None
        return lo, (lo, hi), BUDGET, (f"{hi:.4g} tokens cost {nxt.cost:,.0f} > budget {budget:,.0f} {nxt.cost_unit}"
                                      + _less_serving(q) + within)
    return lo, (lo, hi), DATE, f"no plan finishes {hi:.4g} tokens by the deadline" + within


def solve_inverse(q: InverseQuestion, build: Build, params: Callable[[str], int], backend: str,
                  req: Request | None = None, solver: _Solver | None = None) -> InverseResult:
    """The best (size, tokens) for the question (see the module), every size's row, and the solves made
    (``solver``: one shared across questions of the same scenario, each (size, tokens) solved once)."""
    req = req or Request()
    s = solver or _Solver(build, backend, req)
    limit = q.data_limit
    grid = tuple(t for t in q.tokens if limit is None or t <= limit * (1 + 1e-12))
    if limit is not None and limit < q.tokens[-1] and (not grid or grid[-1] < limit):
        grid = (*grid, limit)  # "any tokens up to the data": the limit itself is a candidate
    cands = [Candidate(m, params(m)) for m in q.models]
    if q.target_loss is None:
        chosen = _least_loss(s, q, grid, cands)
    else:
        chosen = _least_cost(s, q, grid, cands, q.target_loss)
    return InverseResult(q, cands, chosen, len(s.cache))


def _fill(c: Candidate, q: InverseQuestion, solved: Solved) -> None:
    c.tokens, c.best = solved.tokens, solved
    c.loss, c.effective_tokens = predicted_loss(q, c.params, solved.tokens)
    c.cost, c.finish_days = solved.cost, solved.finish_days
    c.extrapolated = extrapolated(q.law, c.params, c.effective_tokens)


def _least_loss(s: _Solver, q: InverseQuestion, grid: Sequence[float], cands: list[Candidate]) -> Candidate | None:
    best: Candidate | None = None
    if not grid:
        for c in cands:
            c.binds, c.detail = DATA, "no token value of the grid is within the data limit"
        return None
    # largest first: the loss bound at the grid's top prunes the small sizes once a large one answers
    brackets: list[tuple[Candidate, int]] = []  # sizes to refine: the candidate and its grid index
    for c in sorted(cands, key=lambda c: -c.params):
        bound, _ = predicted_loss(q, c.params, grid[-1])
        if best is not None and best.loss is not None and bound >= best.loss:
            c.pruned, c.loss_bound = True, bound
            c.detail = f"cannot beat {best.model}: loss >= {bound:.4f} even at {grid[-1]:.3g} tokens"
            continue
        c.serve_cost = q.serve_cost(c.params)
        i, c.binds, c.detail = _max_tokens(s, q, c.model, grid, q.train_budget(c.params))
        if i < 0:
            continue
        _fill(c, q, s(c.model, grid[i]))
        if q.token_resolution is not None and i + 1 < len(grid) and c.binds in (BUDGET, DATE):
            brackets.append((c, i))
        if best is None or (c.loss is not None and best.loss is not None and c.loss < best.loss):
            best = c
    # refine the brackets in the order of the least loss each could reach (at its upper end), so that a
    # refined answer prunes the brackets after it; the chosen size is always refined (module docstring)
    for c, i in sorted(brackets, key=lambda ci: predicted_loss(q, ci[0].params, grid[ci[1] + 1])[0]):
        upper, _ = predicted_loss(q, c.params, grid[i + 1])
        assert best is not None and best.loss is not None and q.token_resolution is not None
        if upper >= best.loss:
            c.coarse = True
            c.detail += f"; not refined: loss > {upper:.4f} at any tokens below, cannot beat {best.model}"
            continue
        tokens, c.bracket, c.binds, c.detail = _refine(s, q, c.model, grid[i], grid[i + 1],
                                                       q.train_budget(c.params), q.token_resolution)
        _fill(c, q, s(c.model, tokens))
        if c.loss is not None and c.loss < best.loss:
            best = c
    return best


def _least_cost(s: _Solver, q: InverseQuestion, grid: Sequence[float], cands: list[Candidate],
                target: float) -> Candidate | None:
    best: Candidate | None = None
    for c in cands:
        c.serve_cost = q.serve_cost(c.params)
        fresh = tokens_for_loss(q.law, c.params, target)
        need = None if fresh is None else repeated_tokens_for(fresh, q.unique_tokens, q.repeat_decay)
        exact = None if need is None else exact_tokens(q, c.params, need, target)
        top = grid[-1] if grid else 0.0
        if exact is None or exact > top:
            c.binds = LOSS if fresh is None else DATA if q.unique_tokens is not None and (
                need is None or limit_below(q, need)) else GRID
            c.detail = (f"E + A/N^alpha = {loss(q.law, c.params, math.inf):.4f} is above the target"
                        if fresh is None else f"needs {fresh:.3g} effective tokens, beyond the allowed tokens")
            continue
        tokens = min(max(exact, q.tokens[0]), top)
        solved = s(c.model, tokens)
        if not solved.allowed(q.train_budget(c.params)):
            c.binds, c.detail = _unsolvable_why(s, c.model, tokens, q.train_budget(c.params))
            c.tokens = tokens
            continue
        _fill(c, q, solved)
        c.binds, c.detail = LOSS, (f"the fewest tokens reaching loss <= {target:g}"
                                   + ("" if tokens == exact else " (the --tokens range's least)"))
        total, best_total = c.total_cost, None if best is None else best.total_cost
        if best is None or (total is not None and best_total is not None and total < best_total):
            best = c
    return best


def exact_tokens(q: InverseQuestion, params: float, need: float, target: float) -> float | None:
    """The fewest whole tokens whose predicted loss is at most ``target``: ``need`` (the closed-form inverse of
    L(N, D) = target for D, through Muennighoff's effective data where the data is limited) rounded up to a
    whole token, one token more where floating-point rounding leaves the loss a hair above the target; None
    beyond the data limit (unique tokens x epochs)."""
    tokens = float(math.ceil(need))
    if predicted_loss(q, params, tokens)[0] > target:
        tokens += 1.0
    limit = q.data_limit
    return None if limit is not None and tokens > limit else tokens


def _less_serving(q: InverseQuestion) -> str:
    """The note that the budget shown is what serving leaves for training."""
    return " (the budget less serving)" if q.inference_tokens else ""


def limit_below(q: InverseQuestion, need: float) -> bool:
    """True when the data limit (unique tokens x epochs) is below ``need`` tokens."""
    return q.data_limit is not None and q.data_limit < need


def token_grid(lo: float, hi: float, count: int) -> tuple[float, ...]:
    """``count`` tokens from ``lo`` to ``hi`` in equal ratios (geometric), each rounded to a whole token."""
    if count == 1 or lo == hi:
        return (float(round(lo)),)
    r = (hi / lo) ** (1.0 / (count - 1))
    return tuple(sorted({float(round(lo * r ** i)) for i in range(count)}))


def params_of(build: Build) -> Callable[[str], int]:
    """Each catalog model's exact parameter count (:func:`tpopt.models.arch.param_count`)."""
    return lambda m: param_count(build(m, 1e9).model)


#: Listed families of sizes (catalog model names, smallest first).
SIZE_FAMILIES: dict[str, tuple[str, ...]] = {
    "qwen3": ("qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-8b", "qwen3-14b", "qwen3-32b"),
    "llama3": ("llama3.2-1b", "llama3.2-3b", "llama3-8b", "llama3-70b", "llama3-405b"),
}


@dataclass
class Unreachable:
    """Why no size reaches the target loss, and the smallest change that does: the least budget at the given
    date (None: no budget does), the shortest deadline at the given budget in days (None: none up to
    ``DEADLINE_REACH`` times the deadline), each verified by a re-solve that finds a chosen candidate, and the
    least loss the given budget and date reach."""

    min_budget: Candidate | None
    min_deadline_days: float | None
    at_deadline: Candidate | None
    reachable: Candidate | None
    solves: int
    out_of_reach: str | None = None  # no budget or deadline can reach it (:func:`out_of_reach`): why; not searched


#: What stops a size without a plan solve: the target below its loss at any tokens, past the --tokens range, past
#: the data. No budget and no deadline changes any of them.
NOT_BY_MONEY_OR_TIME = frozenset({LOSS, GRID, DATA})


def out_of_reach(q: InverseQuestion, cands: Sequence[Candidate]) -> str | None:
    """Why no budget and no deadline reaches ``q.target_loss`` (None: one may): every size is stopped before any
    plan is solved, by the fit itself (L(N, D) > E + A / N^alpha for every D, so a target at or below that floor is
    out of the size's reach at any token count), by the --tokens range or by the data (:func:`_least_cost`). The
    budget and the deadline only change which plans exist, so neither changes those."""
    assert q.target_loss is not None
    if not cands or any(c.binds not in NOT_BY_MONEY_OR_TIME for c in cands):
        return None
    floor = min(cands, key=lambda c: loss(q.law, c.params, math.inf))
    least = loss(q.law, floor.params, math.inf)
    if all(c.binds == LOSS for c in cands):
        return (f"below every listed size's loss with unlimited tokens, E + A/N^alpha (the least: {floor.model}, "
                f"{least:.4f}; the fit's irreducible loss E = {q.law.E:g}); only a larger model can")
    notes = ", ".join(sorted({c.binds for c in cands}))
    return (f"no listed size reaches it within the allowed tokens (each row's note: {notes}; the least loss with "
            f"unlimited tokens: {floor.model}, {least:.4f}); a larger model, a wider --tokens range or more unique "
            "data can")


#: How far the deadline search looks: this many times the stated deadline.
DEADLINE_REACH = 100.0


def explain_unreachable(q: InverseQuestion, build: Build, params: Callable[[str], int], backend: str,
                        req: Request | None = None, days_tolerance: float = 0.1,
                        cands: Sequence[Candidate] = ()) -> Unreachable:
    """The smallest budget and the shortest deadline reaching ``q.target_loss``, and the best loss at the given ones.

    Budget: with the budget lifted each size's answer is its fewest tokens reaching the target, the cheapest
    there (the cost does not decrease in the tokens), so the least total over the sizes is the smallest budget
    that reaches the target; the re-solve at exactly that budget confirms it. Deadline: whether some size reaches
    the target within the budget only gets easier with a later deadline (every plan meeting a date meets a later
    one), so a bisection over the deadline between the stated one and ``DEADLINE_REACH`` times it, re-solving at
    each step, ends at a deadline (within ``days_tolerance`` days) whose solve found a chosen candidate. Neither
    is searched where the first answer's candidates ``cands`` show that no budget or deadline can reach the target
    (:func:`out_of_reach`)."""
    assert q.target_loss is not None
    solves = 0

    def run(question: InverseQuestion, deadline_s: float | None = None) -> InverseResult:
        nonlocal solves
        b = build if deadline_s is None else at_deadline(build, deadline_s)
        r = solve_inverse(question, b, params, backend, req)
        solves += r.solves
        return r

    why = out_of_reach(q, cands)
    if why is not None:
        return Unreachable(None, None, None, run(replace(q, target_loss=None)).chosen, solves, why)
    min_budget = None
    if q.budget is not None:
        free = run(replace(q, budget=None)).chosen
        if free is not None and free.total_cost is not None:
            check = run(replace(q, budget=free.total_cost)).chosen
            min_budget = check if check is not None else None
    deadline_s = F.limit(F.DEADLINE, build(q.models[0], q.tokens[0]))
    lo, hi = deadline_s, deadline_s * DEADLINE_REACH
    at_hi = run(q, hi).chosen
    at_min = None
    if at_hi is not None:
        at_min = at_hi
        while hi - lo > days_tolerance * 86400.0:
            mid = (lo + hi) / 2
            found = run(q, mid).chosen
            if found is not None:
                hi, at_min = mid, found
            else:
                lo = mid
    reachable = run(replace(q, target_loss=None)).chosen
    return Unreachable(min_budget, None if at_min is None else hi / 86400.0, at_min, reachable, solves)


@dataclass
class FrontPoint:
    """One point of a loss front: the budget or deadline (days) it was solved at and the best candidate there
    (None: nothing feasible)."""

    at: float
    chosen: Candidate | None


def budget_grid(lo: float, hi: float, count: int) -> tuple[float, ...]:
    """``count`` budgets from ``lo`` to ``hi`` in equal ratios, the ends exact."""
    if count == 1 or hi <= lo:
        return (hi,)
    r = (hi / lo) ** (1.0 / (count - 1))
    return tuple([lo * r ** i for i in range(count - 1)] + [hi])


def loss_cost_front(q: InverseQuestion, build: Build, params: Callable[[str], int], backend: str,
                    req: Request | None = None, count: int = 8) -> tuple[list[FrontPoint], int]:
    """The least predicted loss at each of ``count`` budgets by the deadline, and the plan solves made.

    The budgets run in equal ratios from the cheapest candidate on time (the least cost of any size at the
    grid's fewest tokens) to the cost of the best loss with no budget (more buys nothing by this date); one
    solver is shared, so a (size, tokens) is solved once for the whole front."""
    req = req or Request()
    s = _Solver(build, backend, req)
    free = replace(q, budget=None, target_loss=None)
    top = solve_inverse(free, build, params, backend, req, s).chosen
    floor = [s(m, q.tokens[0]).cost for m in q.models]
    costs = [c for c in floor if c is not None]
    if top is None or top.total_cost is None or not costs:
        return [], len(s.cache)
    lo = min(c + q.serve_cost(params(m)) for m, c in zip(q.models, floor, strict=True) if c is not None)
    points = [FrontPoint(b, solve_inverse(replace(free, budget=b), build, params, backend, req, s).chosen)
              for b in budget_grid(lo, top.total_cost, count)]
    return points, len(s.cache)


def loss_date_front(q: InverseQuestion, build: Build, params: Callable[[str], int], backend: str,
                    req: Request | None = None, factors: Sequence[float] = (0.25, 0.5, 1.0, 2.0, 4.0)
                    ) -> tuple[list[FrontPoint], int]:
    """The least predicted loss within the budget at the stated deadline times each of ``factors`` (days in
    :attr:`FrontPoint.at`), and the plan solves made."""
    req = req or Request()
    deadline_s = F.limit(F.DEADLINE, build(q.models[0], q.tokens[0]))
    free = replace(q, target_loss=None)
    points, solves = [], 0
    for f in factors:
        d = deadline_s * f
        r = solve_inverse(free, at_deadline(build, d), params, backend, req)
        points.append(FrontPoint(d / 86400.0, r.chosen))
        solves += r.solves
    return points, solves


def at_deadline(build: Build, deadline_s: float) -> Build:
    """``build`` with the deadline set to ``deadline_s`` seconds."""
    return lambda model, tokens: with_deadline(build(model, tokens), deadline_s)


# ---------------------------------------------------------------------------------------------
# the question as the command and tpopt.inverse() ask it (one path: the command's --json is ``Asked.out``)

SERVING_MFU = 0.3
"""Serving MFU assumed when the serving price is derived from the card: decoding is memory-bound, so well below
training's; an assumption, stated in the output (``serving_mfu`` or ``serving_price`` replaces it)."""

SARDANA = "Sardana et al. 2024, Beyond Chinchilla-Optimal: Accounting for Inference in Language Model Scaling Laws"


@dataclass
class Asked:
    """An inverse question and its answer: the result, the command's JSON (``out``), the question, why no size
    reaches the target (None unless asked and unreachable) and the loss fronts (None unless asked)."""

    res: InverseResult
    out: dict[str, Any]
    question: InverseQuestion
    why: Unreachable | None = None
    fronts: tuple[list[FrontPoint], list[FrontPoint], int] | None = None


def serving_fields(base: Scenario, tokens: str | float | None, price: str | float | None,
                   mfu_text: str | float) -> dict[str, Any]:
    """The question's serving fields: inference tokens, USD per 1e15 FLOP and how that price was set."""
    if tokens is None:
        if price is not None:
            raise InputError("--serving-price needs --inference-tokens")
        return {}
    n = parse_count(tokens, "--inference-tokens", allow_zero=False)
    if price is not None:
        return {"inference_tokens": n, "serve_usd_per_pflop": parse_number(price, "--serving-price", allow_zero=False),
                "serving_basis": "stated (--serving-price)"}
    mfu = parse_number(mfu_text, "--serving-mfu", allow_zero=False)
    if mfu > 1:
        raise InputError(f"--serving-mfu {mfu_text}: a fraction of the peak, at most 1")
    system = next(iter(base.systems.values()))
    if system.price_card_hour is None:
        raise InputError("--inference-tokens: the scenario's card has no price; give --serving-price USD per 1e15 FLOP")
    basis = (f"{system.name} at {system.price_card_hour:g} USD/h, {system.acc.peak_flops / 1e12:g} TFLOP/s peak x "
             f"serving MFU {mfu:g}" + (" (assumed; --serving-mfu)" if str(mfu_text) == str(SERVING_MFU) else ""))
    return {"inference_tokens": n, "serve_usd_per_pflop": usd_per_pflop(system.price_card_hour, system.acc.peak_flops,
                                                                        mfu), "serving_basis": basis}


def ask(raw: dict[str, Any], catalog_dirs: Sequence[str], backend: str, req: Request, *,
        models: str | Sequence[str] = "qwen3", tokens: str | Sequence[float | str] = "10B:2T:16",
        law: str = "chinchilla", target_loss: str | float | None = None, unique_tokens: str | float | None = None,
        max_epochs: str | float = "1", max_cost: str | float | None = None, inference_tokens: str | float | None = None,
        serving_price: str | float | None = None, serving_mfu: str | float = str(SERVING_MFU),
        front: bool = False, generated: str | None = None, token_resolution: str | float | None = None) -> Asked:
    """``tpopt inverse``'s question on the scenario tables ``raw`` (the model and tokens replaced by each
    candidate's) and its answer, shared by the command and :func:`tpopt.api.inverse`. ``models``: a family of
    :data:`SIZE_FAMILIES` or catalog names (a list or comma-separated); ``tokens``: ``LO:HI[:COUNT]`` or the
    values; ``max_cost``: the budget (None: the scenario's ``[cost] max_cost``, if any); ``inference_tokens``,
    ``serving_price``, ``serving_mfu``: the serving cost (:func:`serving_fields`); ``front``: the loss fronts
    too; ``generated``: ``MIN:MAX[:COUNT]`` parameters, the family's shape rule's sizes in that range offered next
    to the listed ones (:func:`generated_sizes`); ``token_resolution``: how finely a ``LO:HI`` range's most tokens
    are refined (:func:`resolution_of`; a list offers its values only). Where a target loss is unreachable,
    :func:`explain_unreachable` says what reaches it."""
    scaling = load_scaling(catalog_dirs)
    cat = load_catalog(catalog_dirs)
    shapes = generated_sizes(scaling, models, generated)
    if shapes:
        cat = replace(cat, models={**cat.models, **{a.name: a for a in shapes}})
    budget = None if max_cost is None else parse_number(max_cost, "--max-cost", allow_zero=False)

    def build(model: str, n_tokens: float) -> Scenario:
        sc = build_scenario(with_overrides(raw, {"model.name": model, "task.tokens": n_tokens}), cat)
        return replace(sc, cost=replace(sc.cost, max_cost=None))  # the budget is the outer decision's

    if not isinstance(models, str):
        names = tuple(models)
    elif models in SIZE_FAMILIES or shapes:
        names = SIZE_FAMILIES.get(models, ())
    else:
        names = tuple(m.strip() for m in models.split(",") if m.strip())
    if shapes:  # listed and generated sizes together, smallest first
        names = tuple(sorted({*names, *(a.name for a in shapes)}, key=lambda m: param_count(cat.model(m))))
    if not names:
        raise InputError("--models: no model given")
    for m in names:
        cat.model(m)  # an unknown name: one line
    base = build(names[0], 1e9)
    q = InverseQuestion(
        models=names, tokens=tokens_of(tokens), law=scaling.law(law), repeat_decay=scaling.repeat_decay,
        unique_tokens=None if unique_tokens is None else parse_count(unique_tokens, "--unique-tokens",
                                                                     allow_zero=False),
        max_epochs=parse_number(max_epochs, "--max-epochs", allow_zero=False),
        budget=budget if budget is not None else base.cost.max_cost,  # the scenario's own [cost] max_cost
        target_loss=None if target_loss is None else parse_number(target_loss, "--target-loss", allow_zero=False),
        token_resolution=resolution_of(tokens, token_resolution),
        **serving_fields(base, inference_tokens, serving_price, serving_mfu))
    params = params_of(build)
    res = solve_inverse(q, build, params, backend, req)
    asked = Asked(res, result_dict(res, scaling.repeat_source), q)
    if res.chosen is None and q.target_loss is not None:
        asked.why = explain_unreachable(q, build, params, backend, req, cands=res.candidates)
        asked.out["unreachable"] = unreachable_dict(asked.why)
    if front:
        by_cost, n_cost = loss_cost_front(q, build, params, backend, req)
        by_date, n_date = loss_date_front(q, build, params, backend, req)
        asked.fronts = (by_cost, by_date, n_cost + n_date)
        asked.out["front"] = {"cost": [point_dict(p) for p in by_cost], "date": [point_dict(p) for p in by_date],
                              "solves": n_cost + n_date}
    return asked


def generated_sizes(scaling: ScalingCatalog, family: str | Sequence[str], spec: str | None) -> list[ModelArch]:
    """The family's generated shapes (:func:`tpopt.models.shapes.ladder`) for ``MIN:MAX[:COUNT]`` parameters
    (COUNT default 8), or none without ``spec``; ``family`` names the shape rule (``--models``)."""
    if spec is None:
        return []
    if not isinstance(family, str) or family not in scaling.rules:
        raise InputError(f"--generated needs --models naming a family with a shape rule "
                         f"({', '.join(sorted(scaling.rules))}), got {family!r}")
    parts = spec.split(":")
    if len(parts) not in (2, 3):
        raise InputError(f"--generated {spec!r}: give MIN:MAX or MIN:MAX:COUNT parameters, e.g. 1B:100B:8")
    lo, hi = (parse_count(p, "--generated", allow_zero=False) for p in parts[:2])
    count = int(parse_number(parts[2], "--generated count", allow_zero=False)) if len(parts) == 3 else 8
    if lo > hi or not 1 <= count <= 64:
        raise InputError(f"--generated {spec!r}: MIN must be at most MAX and COUNT 1 to 64")
    shapes = ladder(scaling.rule(family), lo, hi, count)
    if not shapes:
        raise InputError(f"--generated {spec!r}: the {family} rule has no shape between {lo:.3g} and {hi:.3g} "
                         f"parameters")
    return shapes


#: How finely a ``LO:HI`` token range's most tokens are found by default: 0.5 % of the tokens.
TOKEN_RESOLUTION = 0.005


def resolution_of(spec: str | Sequence[float | str], text: str | float | None) -> float | None:
    """The token resolution of a ``--tokens`` spec: a ``LO:HI[:COUNT]`` range is continuous, its most tokens
    found to ``text`` (a fraction, or a percentage such as ``0.5%``; default :data:`TOKEN_RESOLUTION`; ``0``: the
    grid's values only); a list offers its values only (None), and takes no resolution."""
    ranged = isinstance(spec, str) and ":" in spec
    if text is None:
        return TOKEN_RESOLUTION if ranged else None
    raw = str(text).strip()
    value = parse_number(raw[:-1], "--token-resolution") / 100 if raw.endswith("%") else parse_number(
        raw, "--token-resolution")
    if not 0 <= value <= 0.5:
        raise InputError(f"--token-resolution {text}: a fraction from 0 (the grid's values only) to 0.5, e.g. 0.5%")
    if not ranged:
        raise InputError(f"--token-resolution {text}: refines a --tokens LO:HI range; a list offers its values only")
    return value or None


def tokens_of(spec: str | Sequence[float | str]) -> tuple[float, ...]:
    """The token grid: ``LO:HI[:COUNT]`` (COUNT values in equal ratios, default 16; :func:`token_grid`), or the
    values (a comma-separated string or a list), ascending."""
    if isinstance(spec, str) and ":" in spec:
        parts = spec.split(":")
        if len(parts) not in (2, 3):
            raise InputError(f"--tokens {spec!r}: give LO:HI or LO:HI:COUNT, or a comma-separated list")
        lo, hi = (parse_count(p, "--tokens", allow_zero=False) for p in parts[:2])
        count = int(parse_number(parts[2], "--tokens count", allow_zero=False)) if len(parts) == 3 else 16
        if lo > hi or count < 1 or count > 1000:
            raise InputError(f"--tokens {spec!r}: LO must be at most HI and COUNT 1 to 1000")
        return token_grid(lo, hi, count)
    items = [p for p in spec.split(",") if p.strip()] if isinstance(spec, str) else list(spec)
    values = sorted({parse_count(p, "--tokens", allow_zero=False) for p in items})
    if not values:
        raise InputError("--tokens: no token count given")
    return tuple(values)


def result_dict(res: InverseResult, repeat_source: str) -> dict[str, Any]:
    """The command's JSON: the objective, the fit, the budget and data limits, the serving cost, every candidate
    and the chosen one with its plan and its solve's report."""
    q, c = res.question, res.chosen
    d: dict[str, Any] = {
        "objective": "least predicted loss" if q.objective == "loss" else "least cost for the target loss",
        "law": {"name": q.law.name, "source": q.law.source, "E": q.law.E, "A": q.law.A, "B": q.law.B,
                "alpha": q.law.alpha, "beta": q.law.beta, "params_range": [q.law.min_params, q.law.max_params],
                "tokens_range": [q.law.min_tokens, q.law.max_tokens]},
        "budget": q.budget, "target_loss": q.target_loss, "unique_tokens": q.unique_tokens,
        "max_epochs": q.max_epochs, "tokens_grid": list(q.tokens), "token_resolution": q.token_resolution,
        "solves": res.solves,
        "candidates": [x.row() for x in res.candidates], "chosen": None}
    if q.inference_tokens:
        d["serving"] = {"inference_tokens": q.inference_tokens, "usd_per_pflop": q.serve_usd_per_pflop,
                        "basis": q.serving_basis, "source": SARDANA}
    if q.unique_tokens is not None:
        d["data_constrained"] = {"repeat_decay": q.repeat_decay, "source": repeat_source}
    if c is not None and c.best is not None:
        d["chosen"] = {**c.row(), "plan": c.best.plan, "solve": c.best.report}
    return d


def where_dict(c: Candidate | None) -> dict[str, Any] | None:
    """A chosen candidate as the JSON's fronts and unreachable entries show it (None: none)."""
    return None if c is None else {"model": c.model, "tokens": c.tokens, "loss": c.loss, "cost": c.total_cost}


def point_dict(p: FrontPoint) -> dict[str, Any]:
    """A front point in the JSON: where it is taken and what it chooses."""
    return {"at": p.at, **(where_dict(p.chosen) or {"model": None, "tokens": None, "loss": None, "cost": None})}


def unreachable_dict(u: Unreachable) -> dict[str, Any]:
    """Why no size reaches the target, in the JSON."""
    return {"min_budget": None if u.min_budget is None else u.min_budget.total_cost,
            "at_min_budget": where_dict(u.min_budget), "min_deadline_days": u.min_deadline_days,
            "at_min_deadline": where_dict(u.at_deadline), "reachable": where_dict(u.reachable), "solves": u.solves,
            "out_of_reach": u.out_of_reach}
