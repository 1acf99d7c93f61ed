"""Why a request is infeasible, the smallest single change that makes it feasible, what limits a plan.

Every answer is computed by optimisation on the exact model, never guessed: from one table of every
plan for spaces of up to ``report.TABLE_LIMIT`` points that are cheap to simulate (:func:`tabulated`),
otherwise by the solve's own layout decomposition, each question asked of the solve's tables (shared by
every re-solve whose change leaves them as they are: :meth:`Space.sharing`) and its layout bounds
(:func:`scan_best`), monotone thresholds (tokens, reserved time) in closed form over the plans
(:func:`largest_over_plans`), or the chosen solver with its solve-verify loop where neither applies.

1. Conflict. CP-SAT's sufficient assumptions (:func:`conflict`) name constraint families that cannot
   hold together, but not necessarily a minimal set. :func:`minimal_conflict` shrinks it with a
   deletion filter, least informative families first:
       for f in C:  if C \\ {f} admits no plan: C := C \\ {f}
   so that C admits no plan while C \\ {f} admits one for every f left (C is irreducible).
2. Minimal relaxations (:func:`relaxations`): one input freed at a time, every other input and
   family unchanged; one ``relax_*`` function per input states the relation it uses. Each reported
   value is rounded in the safe direction to the printed precision and re-solved: the plan shown is
   the cheapest plan of the scenario with exactly that value.
3. A given plan (:func:`explain_plan`): what it violates and by how much, or, when it is feasible,
   what stops one host fewer and whether a cheaper plan exists; and the worth of one unit of each
   main input at the optimum (:func:`sensitivities`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Final, Literal

import numpy as np
from numpy.typing import NDArray

from tpopt.catalogs import Catalog, load_catalog
from tpopt.catalogs.scenario import build_scenario, with_overrides
from tpopt.errors import InputError
from tpopt.models import families as F
from tpopt.models import terms as T
from tpopt.models.arch import gemm_params
from tpopt.models.evaluate import SPEC, ConstraintCheck, Evaluation, at_plan_batch, evaluate
from tpopt.models.plan import Plan, Scenario, System
from tpopt.models.units import (
    DAY,
    GB,
    GIB,
    parse_bandwidth,
    parse_bytes,
    parse_count,
    parse_duration,
    parse_fraction,
    parse_int,
    parse_number,
)
from tpopt.optimizer import analysis, footing, outer
from tpopt.optimizer.backends import with_model
from tpopt.optimizer.backends.verify import feasible_for
from tpopt.optimizer.core import TINY_NOTE, tiny_backend, use_decomposition
from tpopt.optimizer.core import solve as solve_space
from tpopt.optimizer.decompose import HUB, HUB_RULES, KEY_RTOL, LayoutBounds, _reduced
from tpopt.optimizer.enumerate import EXTRAS, NUMERIC_AXES, PointTable, chunks, layout_evaluator
from tpopt.optimizer.limits import (
    EncodingError,
    TimeLimitReached,
    Undecided,  # a solver hit the time limit: the question has no proven answer
    clock_of,
)
from tpopt.optimizer.memory_plan import enforce as enforce_memory
from tpopt.optimizer.report import RELAXABLE, TABLE_LIMIT, Binding, binding_families, make_oracle
from tpopt.optimizer.result import Request, Status, objective_key, objective_value, plan_summary
from tpopt.optimizer.space import (
    FAMILIES,
    STRUCTURAL,
    VARS,
    Space,
    Table,
    card_counts,
    cards_of,
    chance_on,
    rebuilt_tables,
    reduce_to,
)

# Deletion order of the filter: families tried first are dropped whenever the rest still conflict,
# so the conflict is stated in the families a user can act on (deadline, memory, cards) when possible.
DELETION_ORDER = F.DELETION_ORDER  # STRUCTURAL, then each family's deletion_rank

THROUGHPUT_SCALE_MAX = 3.0  # per-operation model: the largest throughput scale the relaxation searches
EFFICIENCY_TOL = 1e-5  # relative tolerance on the efficiency threshold (0.0005 points at 47 %)
NIC_FACTOR_MAX = 1000.0  # NIC bandwidth is searched up to this multiple of the current one
NIC_REL_TOL = 1e-6  # relative tolerance on the NIC bandwidth threshold
RESERVED_TOL_S = 1.0  # bisection tolerance on reserved time (only with a budget cap)
GRID = 8  # probes below the upper end when it is infeasible (feasibility may not be monotone)
REL = 1e-9


OWN_SPACES = 2  # changed scenarios whose own tables a context keeps (each as large as a solve's)
SHARED_SPACES = 8  # spaces sharing the base tables a context keeps (each with its own layout evaluations)


class _Empty(Enum):
    """The type of :data:`EMPTY`."""

    EMPTY = "empty"


EMPTY: Final = _Empty.EMPTY  # a narrowed search space without any point (see Context.narrowed)
# families that depend on the model and the batch only, whatever the hardware
MODEL_FAMILIES = F.MODEL_FAMILIES


# ---------------------------------------------------------------------------------------------
# exact best plan of a (modified) scenario


@dataclass
class Context:
    """The request being explained: scenario, backend, request, enforced families, solve counter.

    ``raw`` (the scenario's raw tables, overrides applied) and ``catalog`` let the accelerator
    relaxation rebuild the scenario for any catalog accelerator with the file's own assumptions.
    """

    sc: Scenario
    backend: str = "cpsat"
    req: Request = field(default_factory=Request)
    enforced: frozenset[str] = frozenset(FAMILIES)
    raw: dict[str, Any] | None = None
    catalog: Catalog | None = None
    solves: int = 0
    # families the input being relaxed leaves unchanged (see :meth:`narrowed`); None: no narrowing
    keep: frozenset[str] | None = None
    keep_vars: tuple[str, ...] = VARS  # the variables :meth:`narrowed` may restrict for the input being relaxed
    progress: Callable[[str], None] | None = None  # told what is being computed (None: silent)
    _set_oracle: _SetOracle | None = field(default=None, repr=False)
    # best plans of the unmodified scenario: (objective, enforced families) -> plan
    _memo: dict[tuple[str, frozenset[str]], Evaluation | None] = field(default_factory=dict, repr=False)
    _shared: dict[int, Space] = field(default_factory=dict, repr=False)  # id(scenario) -> its sharing space
    _own: dict[int, Space] = field(default_factory=dict, repr=False)  # id(scenario) -> its own space (newest last)

    @classmethod
    def of(cls, sc: Scenario, backend: str, req: Request, enforced: Iterable[str] | None = None,
           raw: dict[str, Any] | None = None, catalog: Catalog | None = None) -> Context:
        enf = req.enforced(FAMILIES) if enforced is None else frozenset(enforced)
        return cls(sc=sc, backend=backend, req=req, enforced=enf, raw=raw, catalog=catalog)

    def backend_for(self, space: Space) -> str:
        """Enumeration for small spaces (exact and fastest there), else the chosen solver."""
        if tabulated(space):
            return "enumerate"
        return with_model(self.backend)

    def best(self, sc: Scenario | None = None, objective: str | None = None, drop: Iterable[str] = (),
             space: Space | None = None, cards: Iterable[int] | None = None) -> Evaluation | None:
        """The proven best plan of ``sc`` with the enforced families minus ``drop`` (None: no plan)."""
        base = sc is None or sc is self.sc
        sc = sc or self.sc
        enforce = frozenset(f for f in self.enforced if f not in set(drop))
        if sc.cost.max_cost is None:
            enforce -= {F.BUDGET}  # cost <= inf: dropping it changes nothing (one cache entry)
        key = (objective or self.req.objective, enforce) if (base and space is None and cards is None) else None
        if key is not None and key in self._memo:
            return self._memo[key]
        choices = space is None and outer.has_task_choices(sc)  # the batch is a choice: every batch, best of all
        table = self._set_oracle.table if self._set_oracle is not None and not choices else None
        if key is not None and table is not None:
            # the base scenario's table holds every point's families, cost and finish: the same
            # answer as an enumeration (same values, same order on ties), without one
            found = table.best(table.mask(enforce, cards=self.req.cards), key[0])
            self._memo[key] = evaluate(sc, table.space.plan(found[0])) if found else None
            return self._memo[key]
        if space is None and not base and self.keep and not choices:
            narrowed = self.narrowed(sc, self.keep & enforce, self.keep_vars)
            if narrowed is EMPTY:
                return None  # no plan meets the families this change leaves as they were
            space = narrowed
        try:
            if space is None and not choices and table is None:
                space = self.space_for(sc)  # the base space's tables where the change leaves them as they are
            space = space or (None if choices else Space.from_scenario(sc))
        except InputError:
            return None  # e.g. no NIC count the accelerator can take: no plan
        req = Request(objective=objective or self.req.objective, enforce=enforce, top=1,
                      time_limit=self.req.time_limit, seed=self.req.seed, workers=self.req.workers,
                      cards=self.req.cards if cards is None else tuple(cards), clock=self.req.clock,
                      method="on-demand" if self.req.method == "on-demand" else "auto")
        self.solves += 1
        if space is not None and scanned(space, req):
            scan = scan_best(space, req)
            if key is not None:
                self._memo[key] = scan
            return scan
        # the batch may be a choice (no space then): one solve per batch
        r = outer.solve(sc, self.backend if space is None else self.backend_for(space), req, space=space)
        if r.status not in (Status.OPTIMAL, Status.INFEASIBLE):
            raise Undecided(f"time limit reached ({self.req.time_limit:g} s)")
        if key is not None:
            self._memo[key] = r.best
        return r.best

    def feasible(self, sc: Scenario, drop: Iterable[str] = ()) -> Evaluation | None:
        return self.best(sc, drop=drop)

    def narrowed(self, sc: Scenario, families: Collection[str], variables: Iterable[str] = VARS
                 ) -> Space | Literal[_Empty.EMPTY] | None:
        """``sc``'s search space with each variable restricted to the values that some point of the
        base scenario meeting ``families`` takes (``EMPTY`` when no point does; None without a base
        table, i.e. for spaces too large to enumerate, or when ``families`` is empty).

        Exact for a scenario that differs from the base one only in inputs that leave ``families``
        as they were (each relaxation names the families its input enters): a plan of ``sc`` meeting
        them is a base point meeting them, so its value of every variable is kept. The layouts that no
        deadline, budget or efficiency can rescue (memory, divisibility, ...) drop out of every
        re-solve; the 405B example of the README shrinks from 49,152 plans to 13,824 (pp 4 and 8 do
        not divide its 126 layers).
        """
        if not families:
            return None
        oracle = self.set_oracle()
        table = oracle.table
        if table is None:
            return None
        m = table.mask([f for f in FAMILIES if f in families])
        if not m.any():
            return EMPTY
        dom = table.space.domains
        restrict = {v: [dom[v][i] for i in np.unique(table.idx[v][m])] for v in variables}
        try:
            return Space.from_scenario(sc, restrict=restrict)
        except InputError:
            return EMPTY

    def shared_space(self, sc: Scenario) -> Space | None:
        """A space of ``sc`` that reuses the base space's tables (:meth:`Space.sharing`) when ``sc``
        differs from the base scenario only in the task's tokens, deadline or reserved time, the card or
        budget caps, or the prices (:func:`rebuilt_tables`); None otherwise, or before the base space is known."""
        base = self._set_oracle.space if self._set_oracle is not None else None
        if base is None:
            return None
        if sc is base.sc:
            return base
        rebuild = rebuilt_tables(base.sc, sc)
        if rebuild is None:
            return None
        got = self._shared.get(id(sc))
        if got is not None and got.sc is sc:
            return got
        out = base.sharing(sc, rebuild)
        share_pipeline(base, out)
        if not rebuild:  # the same tables, iterations and reserved time: the same cap-free layout bounds
            out.__dict__["_explain_bounds"] = base.__dict__.setdefault("_explain_bounds", {})
        if len(self._shared) >= SHARED_SPACES:
            self._shared.clear()
        self._shared[id(sc)] = out
        return out

    def space_for(self, sc: Scenario) -> Space:
        """The space of ``sc`` for a question: :meth:`shared_space`, else one sharing the tables of a changed
        scenario asked about before (the last few are kept), else its own: several questions on one changed
        scenario build its tables once."""
        shared = self.shared_space(sc)
        if shared is not None:
            return shared
        got = self._own.get(id(sc))
        if got is not None and got.sc is sc:
            return got
        for own in list(self._own.values()):  # a changed scenario's tables serve its own price or task changes
            rebuild = rebuilt_tables(own.sc, sc)
            if rebuild is not None:
                got = own.sharing(sc, rebuild)
                share_pipeline(own, got)
                break
        else:
            got = self.derived(sc) or Space.from_scenario(sc)
        while len(self._own) >= OWN_SPACES:
            self._own.pop(next(iter(self._own)))
        self._own[id(sc)] = got
        return got

    def card_space(self, sc: Scenario, name: str) -> Space:
        """The space of ``sc``, the base scenario with accelerator ``name`` alone (:meth:`derived`, else its own)."""
        return self.derived(sc) or Space.from_scenario(sc)

    def derived(self, sc: Scenario) -> Space | None:
        """A space of ``sc`` made of the base space's tables: sliced at the card when ``sc`` is the base
        scenario with one of its cards alone, at that card's prices or others (:func:`card_slice`, the price
        table rebuilt), else borrowing the tables the change leaves as they are (:func:`borrowed`); None when
        neither applies or before the base space is known."""
        base = self._set_oracle.space if self._set_oracle is not None else None
        if base is None:
            return None
        if len(sc.systems) == 1 and (name := next(iter(sc.systems))) in base.sc.systems:
            own, was = sc.systems[name], base.sc.systems[name]
            at_base = replace(sc, systems={name: replace(own, price_card_hour=was.price_card_hour,
                                                         nic_price_hour=was.nic_price_hour)})
            sliced = card_slice(base, at_base, name)
            if sliced is not None:
                rebuild = rebuilt_tables(at_base, sc)
                return sliced if not rebuild else sliced.sharing(sc, rebuild)
        return borrowed(base, sc)

    def set_oracle(self, space: Space | None = None) -> _SetOracle:
        """Which sets of families admit a plan of this context's scenario (built once, cached)."""
        if self._set_oracle is None:
            self._set_oracle = _SetOracle(space or Space.from_scenario(self.sc), self)
        return self._set_oracle


def card_slice(base: Space, sc: Scenario, name: str) -> Space | None:
    """A space of ``sc`` (``base``'s scenario with ``name`` its only accelerator) made of ``base``'s built
    tables sliced at ``name`` and at the NIC counts its hosts take; None when ``sc`` differs from the base
    scenario in anything else or a domain other than the accelerator's and the NICs' differs. Every table
    is tabulated per accelerator from that accelerator's system alone, so the slice is the table the new
    space would build."""
    if name not in base.domains["acc"] or set(sc.systems) != {name} or sc.systems[name] != base.sc.systems.get(name):
        return None
    if replace(base.sc, systems=sc.systems, search=replace(base.sc.search, accelerators=sc.search.accelerators)) != sc:
        return None
    out = Space.from_scenario(sc)  # its domains (no table is built yet)
    if any(out.domains[v] != base.domains[v] for v in base.domains if v not in ("acc", "nics")) or \
            not set(out.domains["nics"]) <= set(base.domains["nics"]):
        return None
    at = {"acc": [base.domains["acc"].index(name)],
          "nics": [base.domains["nics"].index(k) for k in out.domains["nics"]]}
    for key, t in dict.items(base.tables):
        values = t.values
        for axis, v in enumerate(t.vars):
            if v in at:
                values = np.take(values, at[v], axis=axis)
        dict.__setitem__(out.tables, key, Table(t.name, t.vars, values))
    if "_pipeline_work" in base.__dict__:
        out.__dict__["_pipeline_work"] = base.__dict__["_pipeline_work"]
    return out


def moved_variables(base: Scenario, sc: Scenario) -> frozenset[str] | None:
    """The variables whose tables a space of ``sc`` cannot take from a space of ``base``: ``{"nics"}`` when the
    two differ only in the cards' NIC bandwidth, ``{"acc", "nics"}`` when only in the candidate systems (the
    cards, their prices, efficiency or step model) and the accelerators searched; None when in anything else.

    A term reads an accelerator's system only for its ``acc`` variable, and the NIC bandwidth only with a NIC
    count, its ``nics`` variable (B = nics x B_nic over the path's cards, :func:`tpopt.models.network.route`):
    a table over neither variable is the same for any card, and one without ``nics`` for any NIC bandwidth
    (tests/test_explain_scan.py builds both and compares them)."""
    if replace(sc, systems=base.systems, search=replace(sc.search, accelerators=base.search.accelerators)) != base:
        return None
    if set(sc.systems) == set(base.systems) and sc.search.accelerators == base.search.accelerators and all(
            replace(s, acc=replace(s.acc, nic_bw=base.systems[k].acc.nic_bw)) == base.systems[k]
            for k, s in sc.systems.items()):
        return frozenset({"nics"})
    return frozenset({"acc", "nics"})


def borrowed(base: Space, sc: Scenario) -> Space | None:
    """A space of ``sc`` holding ``base``'s built tables over none of the variables :func:`moved_variables`
    names (and their reductions onto the layouts, kept on the space: ``_reduced``), the others built when first
    read; None when ``sc`` differs from the base scenario in more than its systems, or a domain of another
    variable differs (or the step model: :func:`~tpopt.models.terms.per_op_model` is scenario-wide, and a flat
    and a per-operation scenario tabulate other terms). The accelerator relaxation's other cards take the memory
    tables, the layout rules and the checkpoint tables (no card enters them), the NIC relaxation every table but
    the compute and communication terms."""
    moved = moved_variables(base.sc, sc)
    if moved is None or T.per_op_model(sc) != T.per_op_model(base.sc):  # the step model is scenario-wide
        return None
    out = Space.from_scenario(sc)
    if any(out.domains[v] != base.domains[v] for v in base.domains if v not in moved):
        return None
    keep = {n: t for n, t in dict.items(base.tables) if not moved & set(t.vars)}
    dict.update(out.tables, keep)
    cache = base.__dict__.get("_reduced")
    if cache is not None:
        out.__dict__["_reduced"] = {k: v for k, v in cache.items() if k[0] in keep}
    return out


def share_pipeline(base: Space, out: Space) -> None:
    """``out`` takes ``base``'s exactly simulated pipeline terms per layout (they read the step model
    alone, never the task's totals or the prices): one simulation per layout for every question."""
    if "time.compute" in dict.keys(out.tables) and "mem.activations" in dict.keys(out.tables):
        layout_evaluator(out).exact_terms = layout_evaluator(base).exact_terms


def tabulated(space: Space) -> bool:
    """Whether explain answers a space's questions from one table of all its plans: at most
    ``report.TABLE_LIMIT`` plans under the flat step model whose pipelines are cheap to simulate
    (:meth:`Space.cheap_pipeline`). Not under the per-operation model, whose enumeration evaluates each
    plan's operations (about 1 ms a plan: Llama-3.1-405B's 24,576 plans took 25 s to tabulate against
    0.4 s for the decomposed solve); its questions go to the layout decomposition."""
    return space.size() <= TABLE_LIMIT and not T.per_op_model(space.sc) and space.cheap_pipeline()


def scanned(space: Space, req: Request) -> bool:
    """Whether a question on ``space`` is answered by :func:`scan_best`: spaces not tabulated
    (:func:`tabulated`) whose solves use the layout decomposition (:func:`~tpopt.optimizer.core.use_decomposition`)
    with every table at once (not :func:`on_demand`)."""
    return not tabulated(space) and use_decomposition(space, req) and not on_demand(space, req)


ON_DEMAND_NOTE = ("not answered on the on-demand path (the tables are built one layout group at a time, the memory "
                  "plan's choice or --method on-demand): the least {what} over every plan reads every table at once")


class NotOnDemand(Undecided):
    """A question that needs every table of a space at once, asked where the solve builds them one layout
    group at a time (:func:`on_demand`): no answer, and the relaxation says why in one line."""


def on_demand(space: Space, req: Request) -> bool:
    """Whether questions on ``space`` are solved with tables per layout group (:mod:`tpopt.optimizer.ondemand`),
    as its solve is: on request (``--method on-demand``), or under ``auto`` when the memory plan chose it (every
    table at once would exceed the memory budget). Each question is then an on-demand solve (its layout oracle
    and group bounds); the closed forms over every plan (:func:`largest_over_plans`, :func:`compute_cost_floor`)
    step aside for re-solves, and the least memory or drop rate over every plan is not answered
    (:class:`NotOnDemand`). Where auto chose on demand for speed alone, every table fits and the questions
    read them all (the scan of the layout bounds)."""
    got = space.__dict__.get("_explain_on_demand")
    if got is None:
        if req.method not in ("auto", "on-demand") or tabulated(space):
            got = False
        else:
            try:
                got = req.method == "on-demand" or enforce_memory(space).method == "on-demand"
            except InputError:  # over the budget either way: the solve refuses it, on its own path
                got = True
        space.__dict__["_explain_on_demand"] = got
    return bool(got)


def layout_bounds(space: Space, objective: str, enforce: frozenset[str]) -> LayoutBounds:
    """The decomposition's per-layout bounds for the objective and the enforced families other than the
    caps (deadline, cards, budget: F.SWEPT) and the layout rules, built once per space and shared by the
    spaces that differ from it only in those caps (:meth:`Context.shared_space`); the caps and the layout
    rules are applied per question, layout by layout (:func:`allowed_layouts`). Valid at any cap, so one
    build serves every re-solve of a deadline, card-cap or budget relaxation. The reductions of the tables
    behind them are kept on the space."""
    cache: dict[tuple[str, frozenset[str]], LayoutBounds] = space.__dict__.setdefault("_explain_bounds", {})
    space.__dict__.setdefault("_reduced", {})
    # the layout rules (HUB_RULES) are decided per layout whatever the families (LayoutBounds.rules): bounds
    # built with or without them are the same arrays, so questions that differ in them share one build
    key = (objective, frozenset(enforce) - set(F.SWEPT) - set(HUB_RULES))
    got = cache.get(key)
    if got is None:
        got = cache[key] = LayoutBounds(space, objective, key[1])
    return got


def allowed_layouts(space: Space, bounds: LayoutBounds, enforce: Collection[str], cards: Iterable[int] | None
                    ) -> NDArray[np.bool_]:
    """The layouts every enforced family's relaxed condition allows (:meth:`LayoutBounds.allowed`), with
    a finite objective bound and, when given, one of the card counts ``cards``."""
    sc = space.sc
    ok: NDArray[np.bool_] = np.isfinite(bounds.objective_min)
    for family_ok in bounds.allowed(enforce, sc.search.max_cards, sc.task.deadline_s, sc.cost.max_cost).values():
        ok &= family_ok
    if cards is not None:
        ok &= np.isin(bounds.cards, list(cards))
    return ok


def scan_best(space: Space, req: Request) -> Evaluation | None:
    """The proven best plan of a large space under ``req`` (objective, enforced families, card counts),
    by the solve's own layout decomposition with its master problem replaced by a scan: the layouts
    every family allows, in order of their bound b(h) (:class:`~tpopt.optimizer.decompose.LayoutBounds`,
    ties by layout index), each solved exactly (:meth:`~tpopt.optimizer.enumerate.LayoutEvaluator.best`), until
    b(h) exceeds the best verified objective. Exact: b(h) never exceeds the best plan of h, so no layout
    left can beat the plan found. The master of a solve finds the least bound among the layouts left one
    round at a time; with only domain restrictions and a per-layout bound that is the sorted order."""
    clock = clock_of(req)
    enforce = req.enforced(FAMILIES)
    bounds = layout_bounds(space, req.objective, enforce)
    ok = allowed_layouts(space, bounds, enforce, req.cards)
    cand = np.flatnonzero(ok)
    obj = bounds.objective_min[cand]
    order = cand[np.argsort(obj, kind="stable")]
    fams = [f for f in FAMILIES if f in enforce]
    best: tuple[tuple[float, float], Evaluation] | None = None
    for h in order:
        if best is not None and bounds.objective_min[h] > best[0][0]:
            break
        if clock.expired("searching the layouts"):
            raise Undecided(f"time limit reached ({req.time_limit:g} s)")
        layout = tuple(int(bounds.coords[v][h]) for v in HUB)
        # with a plan in hand only the schedules whose bounded plans may reach its objective are simulated
        cutoff = None if best is None else best[0][0] * (1 + KEY_RTOL)
        found = layout_evaluator(space).best(layout, fams, req.objective, 1, cutoff=cutoff)
        if req.cards is not None:
            found = [kv for kv in found if int(bounds.cards[h]) in set(req.cards)]
        for k, a in found:
            if best is not None and k[0] > best[0][0] * (1 + KEY_RTOL):
                continue
            ev = evaluate(space.sc, space.plan(a))
            key = objective_key(ev, req.objective)
            if best is None or key < best[0]:
                best = (key, ev)
    return best[1] if best is not None else None


# ---------------------------------------------------------------------------------------------
# conflict


def conflict(space: Space, req: Request, enforced: Iterable[str] | None = None) -> list[str] | None:
    """A set of enforced families that cannot hold together (CP-SAT sufficient assumptions), or None
    when the request is feasible (or the solver ran out of time)."""
    from tpopt.optimizer.cpsat import CpSatModel  # lazy: start-up time (ortools)

    enforced = frozenset(FAMILIES) if enforced is None else frozenset(enforced)
    clock = clock_of(req)
    if clock.expired("finding the conflict"):
        return None
    try:  # a hint only: the deletion filter starts from every enforced family without it
        with clock.stoppable("finding the conflict"):
            model = CpSatModel(space, Request(objective=req.objective, enforce=enforced, seed=req.seed,
                                              cards=req.cards), assumptions=True)
    except (EncodingError, TimeLimitReached):
        return None
    return model.conflict(time_limit=clock.remaining(0.01))


def monolithic_hint(space: Space, req: Request) -> bool:
    """Whether :func:`minimal_conflict` asks the monolithic CP-SAT model for its core: only where the
    solves themselves are monolithic (``use_decomposition``: largest term table of at most
    ``MONOLITHIC_LIMIT`` rows under method ``auto``). Beyond, the model with assumption literals is
    the costly part of the conflict (14 s on a 4.1-million-plan space whose exact solves take 0.3 s)
    while the layout decomposition answers each question of the deletion filter in a fraction of a
    second; the filter then starts from every enforced family. Exact either way: the filter alone
    makes the conflict irreducible, and the same input always takes the same path (fixed order). Nor on
    spaces small enough to tabulate (``report.TABLE_LIMIT``) unless the monolithic method is asked for: the
    filter's questions are masks over one plan table there, and building the model (importing CP-SAT
    first) would cost more than the whole filter."""
    if use_decomposition(space, req):
        return False
    return req.method == "monolithic" or not tabulated(space)


class _SetOracle:
    """Does a set of families admit a plan? One enumeration table for small spaces (every question a
    mask), otherwise one exact solve per question."""

    def __init__(self, space: Space, ctx: Context):
        self.space, self.ctx = space, ctx
        self.table: PointTable | None = None
        if tabulated(space):
            try:
                with clock_of(ctx.req).stoppable("tabulating the plans"):
                    self.table = PointTable.build(space)
            except TimeLimitReached:
                raise Undecided("time limit reached") from None

    def admits(self, families: Collection[str]) -> bool:
        if self.table is not None:
            return bool(self.table.mask(families, cards=self.ctx.req.cards).any())
        drop = [f for f in self.ctx.enforced if f not in set(families)]
        return self.ctx.best(self.space.sc, drop=drop, space=self.space) is not None


def minimal_conflict(space: Space, backend: str, req: Request, enforced: Iterable[str] | None = None,
                     ctx: Context | None = None) -> list[str] | None:
    """An irreducible set of families that admits no plan (deletion filter on CP-SAT's core).

    Start from CP-SAT's sufficient assumptions (all enforced families if CP-SAT gives none: its
    encoding is a relaxation, so it may find a candidate the exact check rejects; and on spaces
    whose solves use the layout decomposition, where no monolithic model is built:
    :func:`monolithic_hint`), confirm the set admits no plan, then drop families one at a time in
    ``DELETION_ORDER`` while the rest still admit none. Returns None when the enforced families admit a
    plan; [] when no plan of the requested card counts exists even with every family dropped.
    """
    ctx = ctx or Context.of(space.sc, backend, req, enforced)
    enforced = ctx.enforced
    oracle = ctx.set_oracle(space)
    if oracle.admits(enforced):
        return None
    core = set(conflict(space, req, enforced) or ()) & set(enforced) if monolithic_hint(space, req) else set()
    if not core or oracle.admits(core):
        core = set(enforced)
    return deletion_filter(oracle, core)


def deletion_filter(oracle: _SetOracle, core: Iterable[str]) -> list[str]:
    """Shrink a set of families that admits no plan to an irreducible one:
    for f in C (DELETION_ORDER): if C \\ {f} admits no plan, C := C \\ {f}."""
    return analysis.deletion_filter(oracle.admits, core, DELETION_ORDER + FAMILIES, FAMILIES)


def other_conflict(ctx: Context, affects: Iterable[str]) -> list[str]:
    """An irreducible conflict among the enforced families an input does not enter ([] if those
    admit a plan): why freeing that input alone cannot help."""
    fams = {f for f in ctx.enforced if f not in set(affects)}
    oracle = ctx.set_oracle()
    if oracle.admits(fams):
        return []
    return deletion_filter(oracle, fams)


EVIDENCE = F.EVIDENCE  # family -> (metric, objective, words) of the plan quoted as closest


def conflict_detail(ctx: Context, core: list[str]) -> list[dict[str, Any]]:
    """For each family f of an irreducible conflict C, the plan meeting every other enforced family
    (those of C and all the rest) that comes closest to f -- least finish time, memory or cards; the
    cheapest for other families, or when the space is too large to enumerate -- and how far it breaks f.

    Only such a plan shows what f alone costs: a plan that met C's other families but broke one
    outside C (memory, say) would be no plan at all. When the other families admit no plan either
    (a second conflict that does not involve f), no plan is named.
    """
    small = tabulated(Space.from_scenario(ctx.sc))
    out: list[dict[str, Any]] = []
    for f in core:
        metric, objective, words = EVIDENCE.get(f, (None, "cost", "the cheapest plan"))
        others = [g for g in ctx.enforced if g != f]
        if metric is not None and small:
            found = argmin_metric(ctx, metric, others)
            ev = found[1] if found else None
        else:
            objective = objective or "cost"
            words = words if objective == "time" else "the cheapest plan"
            ev = ctx.best(objective=objective, drop=[f])
        d: dict[str, Any] = {"name": f, "rule": SPEC[f].doc if f in SPEC else f, "closest": words}
        if ev is not None:
            c = _check(ev, f)
            d["plan"] = plan_summary(ev)
            d["violates"] = [v.name for v in ev.violated() if v.name in ctx.enforced]
            if c is not None:
                d.update({"value": c.value, "limit": c.limit, "unit": c.unit})
        else:
            d["note"] = "no plan meets all the other constraints either (a second conflict does not involve it)"
        if f == F.WHOLE_HOSTS:
            reason = whole_hosts_reason(ctx.sc)
            if reason:
                d["reason"] = reason
        out.append(d)
    return out


def whole_hosts_reason(sc: Scenario) -> str | None:
    """Why no layout fills whole hosts, and the way out, when the host size has a factor that no
    TP x CP x PP of the search holds: cards = TP x CP x PP x DP is a multiple of the host's G cards only
    if DP is a multiple of g = G / gcd(G, TP x CP x PP), and DP x micro-batch divides the batch B
    (batch.divisibility), so no plan exists when g divides no batch choice (or no DP of the search).
    The way out: a batch that g divides (the nearest multiples of g x 2^k below and above B, 2^k the
    largest power of two dividing B with g x 2^k <= B / 4), or parallel sizes with the missing factor.
    None when some batch leaves room (the conflict is elsewhere)."""
    batches = sc.search.global_batch or (sc.task.global_batch,)
    shapes = sorted({tp * cp * pp for tp in sc.search.tp for cp in sc.search.cp for pp in sc.search.pp})
    for name, s in sc.systems.items():
        hosts = s.acc.cards_per_host
        need = min(hosts // math.gcd(hosts, t) for t in shapes)
        if need == 1:
            continue
        sizes = sc.search.dp or batches  # DP divides the batch: a batch g divides is needed either way
        if any(x % need == 0 for x in sizes):
            continue
        b = batches[0]
        step = need  # a multiple of g keeping B's powers of two (up to B / 4): DP and micro-batches still split it
        while b % (2 * (step // need)) == 0 and 2 * step <= b // 4:
            step *= 2
        lo, hi = (b // step) * step, -(-b // step) * step
        batch = f"--global-batch {hi}" if lo < step else f"--global-batch {lo} or {hi}"
        return (f"{name} is rented in whole {hosts}-card hosts; with TP x CP x PP in {{{', '.join(map(str, shapes))}}}"
                f" a plan fills whole hosts only if DP is a multiple of {need}, and DP divides the batch "
                f"({b:,} sequences, batch.divisibility): {need} does not divide it, so no plan exists. Ways out: "
                f"a batch that {need} divides ({batch}), TP / PP sizes with the factor {need} where the model "
                f"allows them, or a card with power-of-two hosts")
    return None


def _check(ev: Evaluation, name: str) -> ConstraintCheck | None:
    return next((c for c in ev.constraints if c.name == name), None)


# ---------------------------------------------------------------------------------------------
# scenario modifiers: one input changed, everything else as it was


def with_deadline(sc: Scenario, seconds: float) -> Scenario:
    return replace(sc, task=replace(sc.task, deadline_s=float(seconds)))


def with_reserved(sc: Scenario, seconds: float) -> Scenario:
    return replace(sc, task=replace(sc.task, reserved_s=float(seconds)))


def with_tokens(sc: Scenario, tokens: float) -> Scenario:
    return replace(sc, task=replace(sc.task, tokens=float(tokens)))


def with_max_cards(sc: Scenario, cards: int) -> Scenario:
    return replace(sc, search=replace(sc.search, max_cards=int(cards)))


def with_max_cost(sc: Scenario, cost: float) -> Scenario:
    return replace(sc, cost=replace(sc.cost, max_cost=float(cost)))


def with_efficiency(sc: Scenario, eta: float) -> Scenario:
    """Compute efficiency (MFU) of every candidate accelerator set to ``eta``."""
    return replace(sc, systems={k: replace(s, efficiency=float(eta)) for k, s in sc.systems.items()})


def with_usable_memory(sc: Scenario, usable: float) -> Scenario:
    """Usable memory per card raised to at least ``usable`` bytes on every candidate (never lowered)."""
    return replace(sc, systems={k: replace(s, acc=replace(s.acc, memory_usable=max(s.acc.memory_usable,
                                                                                        float(usable))))
                                for k, s in sc.systems.items()})


def with_max_drop(sc: Scenario, share: float) -> Scenario:
    """The largest share of dispatches a capacity factor may drop (MoE models) set to ``share``."""
    return replace(sc, moe=replace(sc.moe, max_drop=float(share)))


def with_nic_factor(sc: Scenario, factor: float) -> Scenario:
    """Every candidate's NIC bandwidth multiplied by ``factor``."""
    return replace(sc, systems={k: replace(s, acc=replace(s.acc, nic_bw=s.acc.nic_bw * float(factor)))
                                for k, s in sc.systems.items()})


# ---------------------------------------------------------------------------------------------
# relaxations


@dataclass(frozen=True)
class Param:
    """A relaxable input: how it prints, which way it must move, which families it enters."""

    name: str
    label: str
    unit: str
    digits: int
    direction: str  # ">=" (raise it) or "<=" (lower it)
    override: str | None = None  # raw-table key that sets it ("table.key")
    per_unit: float = 1.0  # SI value of one display unit

    @property
    def affects(self) -> tuple[str, ...]:
        """Constraint families whose value or limit depends on the input (declared by each family)."""
        return F.affected_by(self.name)


PARAMS = {
    "deadline": Param("deadline", "deadline", "d", 2, ">=", "schedule.deadline", DAY),
    "max_cards": Param("max_cards", "max cards", "cards", 0, ">=", "search.max_cards", 1.0),
    "tokens": Param("tokens", "tokens", "B tokens", 2, "<=", "task.tokens", 1e9),
    "efficiency": Param("efficiency", "efficiency (MFU)", "%", 2, ">=", "hardware.efficiency", 0.01),
    "usable_memory": Param("usable_memory", "usable memory per card", "GiB", 2, ">=", "hardware.usable_memory", GIB),
    "nic_bandwidth": Param("nic_bandwidth", "NIC bandwidth", "GB/s", 2, ">=", "hardware.nic", GB),
    "reserved": Param("reserved", "reserved days", "d", 2, "<=", "schedule.reserved", DAY),
    "max_cost": Param("max_cost", "budget cap", "USD", 2, ">=", "cost.max_cost", 1.0),
    "max_drop": Param("max_drop", "maximum drop rate", "%", 2, ">=", "moe.max_drop", 0.01),
    "accelerator": Param("accelerator", "accelerator", "", 0, "=", "hardware.accelerator"),
    "card_price": Param("card_price", "price per card-hour", "USD", 2, "<=", "cost.card_hour", 1.0),
}

_SUFFIX = {"deadline": "d", "reserved": "d", "tokens": "B", "efficiency": "%", "usable_memory": "GiB",
           "nic_bandwidth": "GB/s", "max_drop": "%"}
_PARSE: dict[str, Callable[[str], float]] = {
    "deadline": lambda s: parse_duration(s, "deadline", allow_zero=False),
    "reserved": lambda s: parse_duration(s, "reserved"),
    "tokens": lambda s: parse_count(s, "tokens", allow_zero=False),
    "efficiency": lambda s: parse_fraction(s, "efficiency"),
    "usable_memory": lambda s: parse_bytes(s, "usable memory", allow_zero=False),
    "nic_bandwidth": lambda s: parse_bandwidth(s, "NIC bandwidth", allow_zero=False),
    "max_cards": lambda s: parse_int(s, "max cards", minimum=1),
    "max_cost": lambda s: parse_number(s, "max cost"),
    "max_drop": lambda s: parse_fraction(s, "max drop", allow_zero=True)}


@dataclass
class Relaxation:
    """The smallest change of one input that makes the request feasible (or why none does)."""

    parameter: str
    current: float | str | None
    required: float | str | None  # rounded the safe way to ``digits``; applying it is verified feasible
    unit: str
    helps: bool | None  # None: undecided (time limit)
    direction: str = ">="
    required_exact: float | None = None  # the threshold itself (a bound within the stated tolerance)
    plan: Evaluation | None = None  # cheapest plan of the scenario with ``required`` applied
    apply: dict[str, Any] | None = None  # raw-table overrides ({"table.key": value}) that apply ``required``
    method: str = ""
    note: str = ""
    blocked_by: list[str] = field(default_factory=list)  # a conflict among families this input does not enter
    options: list[dict[str, Any]] = field(default_factory=list)  # accelerator: every catalog accelerator tried
    current_by_card: dict[str, float] | None = None  # a per-card input with several candidates: each card's value
    seconds: float = 0.0
    solves: int = 0

    @property
    def label(self) -> str:
        return PARAMS[self.parameter].label

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"parameter": self.parameter, "current": self.current, "required": self.required,
                             "unit": self.unit, "direction": self.direction, "helps": self.helps,
                             "required_exact": self.required_exact, "method": self.method}
        if self.plan is not None:
            d["plan"] = self.plan.plan_dict()
            d["cost"] = self.plan.metrics["cost"]
            d["cost_unit"] = self.plan.metrics["cost_unit"]
            d["finish_days"] = self.plan.metrics["finish_days"]
        d["apply"] = self.apply
        if self.note:
            d["note"] = self.note
        if self.blocked_by:
            d["blocked_by"] = list(self.blocked_by)
        if self.options:
            d["options"] = self.options
        if self.current_by_card:
            d["current_by_card"] = self.current_by_card
        d["seconds"] = round(self.seconds, 4)
        d["solves"] = self.solves
        return d


def _single(sc: Scenario) -> System | None:
    """The scenario's only candidate system, or None when it lists several."""
    return next(iter(sc.systems.values())) if len(sc.systems) == 1 else None


def _round_safe(x: float, digits: int, direction: str) -> float:
    """``x`` rounded to ``digits`` decimals towards feasibility (up for >=, down for <=)."""
    f = 10.0**digits
    v = x * f
    r = math.ceil(v - 1e-9 * max(1.0, abs(v))) if direction == ">=" else math.floor(v + 1e-9 * max(1.0, abs(v)))
    return r / f


def _fmt_value(x: float, digits: int) -> str:
    return f"{x:.{digits}f}" if digits > 0 else f"{int(round(x))}"


CARD_KEYS = {"usable_memory": "usable_memory", "nic_bandwidth": "nic"}  # per-card keys of [hardware]


def _apply_dict(ctx: Context, p: Param, value: object) -> dict[str, Any] | None:
    """Raw-table overrides that set ``value``. A per-card key ([hardware] usable_memory, nic) is also
    written into each candidate's own [hardware.<name>] table when that table sets it (the own
    table wins over the top-level key, so the top-level key alone would change nothing)."""
    if not p.override:
        return None
    out: dict[str, Any] = {p.override: value}
    key = CARD_KEYS.get(p.name)
    hw = (ctx.raw or {}).get("hardware", {})
    if key:
        for name in ctx.sc.systems:
            sub = hw.get(name)
            if isinstance(sub, dict) and key in sub:
                out[f"hardware.{name}"] = dict(sub, **{key: value})
    return out


def _applies(ctx: Context, apply: dict[str, Any]) -> bool:
    """Does the override dict, applied to the raw tables, give a feasible scenario? (True when the
    raw tables are unknown: the value itself was verified on the scenario.)"""
    if ctx.raw is None:
        return True
    try:
        sc = build_scenario(with_overrides(ctx.raw, apply), ctx.catalog)
    except InputError:
        return False
    return ctx.feasible(sc) is not None


def _settle(ctx: Context, p: Param, exact_units: float, modify: Callable[[float], Scenario],
            si_of_units: Callable[[float], float] | None = None
            ) -> tuple[float | None, Evaluation | None, dict[str, Any] | None]:
    """Round ``exact_units`` the safe way, re-solve with the rounded value and step one unit of the
    last digit further (at most 3 times) if rounding or floating point made it infeasible. The
    override dict is re-checked through the raw tables (the path a user's edit takes).

    Returns (rounded value, cheapest plan, apply dict or None).
    """
    step = 10.0**-p.digits * (1 if p.direction == ">=" else -1)
    value = _round_safe(exact_units, p.digits, p.direction)
    apply_value: int | str | None
    for _ in range(4):
        if p.name in _PARSE and si_of_units is None:
            text = _fmt_value(value, p.digits) + _SUFFIX.get(p.name, "")
            try:
                si = _PARSE[p.name](text)  # exactly what a user gets from the printed value
            except InputError:
                break  # e.g. above 100 % efficiency
            apply_value = int(round(value)) if p.digits == 0 else text
        else:
            to_si: Callable[[float], float] = si_of_units or (lambda u: u * p.per_unit)
            si = to_si(value)
            apply_value = None
        ev = ctx.feasible(modify(si))
        if ev is not None:
            apply = _apply_dict(ctx, p, apply_value) if apply_value is not None else None
            if apply is not None and not _applies(ctx, apply):
                apply = None
            return value, ev, apply
        value = round(value + step, p.digits)
        if p.direction == "<=" and value < 0:
            break
    return None, None, None


def _relaxation(p: Param, current: float | str | None, **kw: Any) -> Relaxation:
    return Relaxation(parameter=p.name, current=current, unit=p.unit, direction=p.direction, **kw)


def _cannot(p: Param, current: float | str | None, note: str, method: str, core: list[str] | None = None
            ) -> Relaxation:
    return _relaxation(p, current, required=None, helps=False, note=note, method=method)


def _fastest(ctx: Context, drop: Iterable[str]) -> Evaluation | None:
    return ctx.best(objective="time", drop=drop)


def relax_deadline(ctx: Context, core: list[str] | None = None) -> Relaxation:
    """Required deadline T* = min over plans meeting every other family of
    T_finish = T_reserved + ceil(D / b) x t_step x (1 + L)   (objective "time", deadline.finish freed)."""
    p = PARAMS["deadline"]
    cur = ctx.sc.task.deadline_s / DAY
    method = "min finish time with deadline.finish relaxed (objective time)"
    fastest = _fastest(ctx, [F.DEADLINE])
    if fastest is None:
        return _cannot(p, cur, "no plan meets the other constraints at any deadline", method, core)
    t_star = fastest.metrics["finish_days"] * DAY
    if ctx.sc.task.confidence is not None:  # the chance form: the fastest plan's q-quantile (an upper bound)
        t_star = next(c.value for c in fastest.constraints if c.name == F.DEADLINE) * DAY
        method = "the fastest plan's finish quantile at the confidence (deadline.finish relaxed, objective time)"
    value, ev, apply = _settle(ctx, p, t_star / DAY, lambda s: with_deadline(ctx.sc, s))
    if ev is None:
        return _cannot(p, cur, "the fastest plan could not be confirmed at its own finish time", method, core)
    return _relaxation(p, cur, required=value, required_exact=t_star / DAY, helps=True, plan=ev, apply=apply,
                       method=method)


def relax_max_cards(ctx: Context, core: list[str] | None = None) -> Relaxation:
    """Required cards n* = min { n formable : a plan exists with max_cards = n } (cards.max freed one
    count at a time; "a plan with at most n cards" is monotone in n, so bisection over the sorted
    card counts tp x pp x dp of the search space is exact)."""
    p = PARAMS["max_cards"]
    sc = ctx.sc
    cur = sc.search.max_cards
    method = "smallest card count whose max_cards-restricted problem is feasible (bisection over counts)"
    d = Space.from_scenario(sc).domains
    counts = card_counts(d)
    counts = [n for n in counts if n > cur]
    if not counts:
        return _cannot(p, cur, f"the search space forms no card count above {cur}", method, core)

    def ok(n: int) -> Evaluation | None:
        return ctx.feasible(with_max_cards(sc, n))

    if tabulated(Space.from_scenario(sc)):
        # small space: n* = min cards over plans meeting every other family (one enumeration)
        method = "fewest cards over plans meeting the other constraints (exhaustive)"
        m = argmin_metric(ctx, "cards", [f for f in ctx.enforced if f != F.CARDS])
        if m is None:
            return _cannot(p, cur, f"no plan even with max_cards = {counts[-1]} (the largest count the search "
                                   "space forms)", method, core)
        n = int(m[0])
        ev = ok(n)
        if ev is not None:
            return _relaxation(p, cur, required=n, required_exact=float(n), helps=True, plan=ev,
                               apply=_apply_dict(ctx, p, n), method=method)
    top = ok(counts[-1])
    if top is None:
        return _cannot(p, cur, f"no plan even with max_cards = {counts[-1]} (the largest count the search space "
                               "forms)", method, core)
    lo, hi, best = -1, len(counts) - 1, top  # counts[hi] feasible, counts[lo] (or cur) not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        ev = ok(counts[mid])
        if ev is not None:
            hi, best = mid, ev
        else:
            lo = mid
    n = counts[hi]
    return _relaxation(p, cur, required=n, required_exact=float(n), helps=True, plan=best,
                       apply=_apply_dict(ctx, p, n), method=method)


def argmin_metric(ctx: Context, metric: str, families: Iterable[str], sc: Scenario | None = None,
                  space: Space | None = None) -> tuple[float, Evaluation] | None:
    """min over plans meeting ``families`` (and the request's card counts) of an evaluator metric
    (``memory_per_card``, ``finish_s``, ``cards``, ``cost``), by enumeration of the space with the
    exact evaluator; ties go to the first point in enumeration order. None if no such plan."""
    fams = list(families)
    if sc is None and space is None:
        narrowed = ctx.narrowed(ctx.sc, frozenset(fams))  # only points meeting ``families`` can answer
        if narrowed is EMPTY:
            return None
        space = narrowed
    sc = sc or ctx.sc
    space = space or ctx.shared_space(sc) or Space.from_scenario(sc)
    if on_demand(space, ctx.req):
        what = {"memory_per_card": "peak memory per card", "dropped_fraction": "dropped share"}.get(metric, metric)
        raise NotOnDemand(ON_DEMAND_NOTE.format(what=what))
    if metric in SCANNED_METRICS and scanned(space, ctx.req):
        return scan_min_metric(space, metric, fams, ctx.req)
    clock = clock_of(ctx.req)
    best: tuple[float, dict[str, int]] | None = None
    for fixed, idx_lists, shape, r in chunks(space):
        if clock.expired("searching the plans"):  # a partial minimum is no answer
            raise Undecided("time limit reached")
        ok = np.ones(shape, dtype=bool)
        for f in fams:
            v, lim = r[("c", f)]
            ok &= np.broadcast_to(v <= lim, shape)
        if ctx.req.cards is not None:
            ok &= np.isin(np.broadcast_to(r["cards"], shape), list(ctx.req.cards))
        if not ok.any():
            continue
        vals = np.where(ok, np.broadcast_to(r[metric], shape), np.inf).reshape(-1)
        i = int(np.argmin(vals))
        if best is None or vals[i] < best[0]:
            coords = np.unravel_index(i, shape)
            idx = dict(fixed)
            idx.update({a: idx_lists[j][c] for j, (a, c) in enumerate(zip(NUMERIC_AXES, coords, strict=False))})
            best = (float(vals[i]), idx)
    if best is None:
        return None
    return best[0], evaluate(sc, space.plan(best[1]))


SCANNED_METRICS = ("memory_per_card", "cards", "cost", "finish_s")
"""The metrics :func:`scan_min_metric` minimises layout by layout (the others are enumerated)."""


def scan_min_metric(space: Space, metric: str, families: Collection[str], req: Request
                    ) -> tuple[float, Evaluation] | None:
    """min over plans of a large space meeting ``families`` (and the request's card counts) of
    ``metric`` (:data:`SCANNED_METRICS`), by the layout decomposition: each layout's lower bound of the
    metric (:class:`~tpopt.optimizer.decompose.LayoutBounds`: the least memory, finish or cost over its
    remaining choices; its cards exactly), the layouts the families allow scanned in increasing bound, each
    evaluated exactly on its whole grid of remaining choices, until the bound exceeds the least value found.
    Exact, like the enumeration it replaces (ties: the first layout scanned, then grid order); the value
    comes from the tables the enumeration's arrays share."""
    clock = clock_of(req)
    fams = frozenset(families)
    enforce = [f for f in FAMILIES if f in fams]
    bounds = layout_bounds(space, req.objective, fams)
    lower = {"memory_per_card": bounds.mem_min, "cards": bounds.cards.astype(float), "cost": bounds.cost_min,
             "finish_s": bounds.finish_min}[metric]
    cand = np.flatnonzero(allowed_layouts(space, bounds, fams, req.cards))
    order = cand[np.argsort(lower[cand], kind="stable")]
    ev = layout_evaluator(space)
    best: tuple[float, dict[str, int]] | None = None
    for h in order:
        if best is not None and lower[h] > best[0]:
            break
        if clock.expired("searching the layouts"):
            raise Undecided(f"time limit reached ({req.time_limit:g} s)")
        layout = tuple(int(bounds.coords[v][h]) for v in HUB)
        if best is not None and metric == "memory_per_card":  # the layout's own bound first (no simulation)
            low = ev._points(layout, enforce, "cost", None, True, "bound")
            if low is None or not low[2].any():
                continue
            mem = np.broadcast_to(ev._glue(layout, "bound")["mem"], low[3])
            if float(np.where(low[2], mem, np.inf).min()) > best[0]:
                continue
        got = ev._points(layout, enforce, "cost", None, True, "exact")
        if got is None:
            continue
        cost, finish, m, shape = got[:4]
        if metric == "memory_per_card":
            vals = np.broadcast_to(ev._glue(layout, "exact")["mem"], shape)
        elif metric == "cards":
            vals = np.broadcast_to(float(bounds.cards[h]), shape)
        else:
            vals = cost if metric == "cost" else finish
        flat = np.where(m, vals, np.inf).reshape(-1)
        i = int(np.argmin(flat))
        if np.isfinite(flat[i]) and (best is None or flat[i] < best[0]):
            idx = dict(zip(HUB, layout, strict=True))
            idx.update({e: int(c) for e, c in zip(EXTRAS, np.unravel_index(i, shape), strict=True)})
            best = (float(flat[i]), idx)
    if best is None:
        return None
    return best[0], evaluate(space.sc, space.plan(best[1]))


def relax_usable_memory(ctx: Context, core: list[str] | None = None) -> Relaxation:
    """Required usable memory M* = min over plans meeting every other family of the peak per card
    (the memory family's value: the largest stage-class sum of states + activations + temporary): usable
    memory enters memory.per_card only, so the plan with the least memory becomes feasible exactly when
    usable >= M* (exhaustive, exact)."""
    p = PARAMS["usable_memory"]
    sc = ctx.sc
    cur = min(s.acc.memory_usable for s in sc.systems.values()) / GIB
    by_card = {k: s.acc.memory_usable / GIB for k, s in sc.systems.items()} if len(sc.systems) > 1 else None
    method = "min peak memory per card over plans meeting the other constraints (exhaustive)"
    m = argmin_metric(ctx, "memory_per_card", [f for f in ctx.enforced if f != F.MEMORY_PER_CARD])
    if m is None:
        r = _cannot(p, cur, "no plan meets the other constraints with any amount of memory", method, core)
        r.current_by_card = by_card
        return r
    need = m[0]
    single = _single(sc) is not None
    value, ev, apply = _settle(ctx, p, need / GIB, lambda s: with_usable_memory(sc, s),
                               None if single else (lambda u: u * GIB))
    if ev is None or value is None:  # _settle gives both or neither
        return _cannot(p, cur, "could not be confirmed by re-solving", method, core)
    cat = ctx.catalog or load_catalog()
    largest = max(cat.accelerators.values(), key=lambda a: a.memory_usable)
    note = ""
    if value * GIB > largest.memory_usable:
        note = (f"more than any catalog card offers (largest: {largest.name}, "
                f"{largest.memory_usable / GIB:.1f} GiB usable)")
    elif not single:
        note = "raises every candidate accelerator to at least this much"
    r = _relaxation(p, cur, required=value, required_exact=need / GIB, helps=True, plan=ev, apply=apply,
                    method=method, note=note)
    r.current_by_card = by_card
    return r


def relax_max_drop(ctx: Context, core: list[str] | None = None) -> Relaxation | None:
    """Required maximum drop rate d* = min over plans meeting every other family of the share of
    dispatches their capacity factor drops (moe.routing_drops): the rate enters moe.capacity_drops only,
    so that plan becomes feasible exactly when max_drop >= d* (exhaustive, exact). None for a dense model."""
    sc = ctx.sc
    if not sc.model.moe or F.CAPACITY_DROPS not in ctx.enforced:
        return None
    p = PARAMS["max_drop"]
    cur = sc.moe.max_drop * 100
    method = "min dropped share over plans meeting the other constraints (exhaustive)"
    m = argmin_metric(ctx, "dropped_fraction", [f for f in ctx.enforced if f != F.CAPACITY_DROPS])
    if m is None:
        return _cannot(p, cur, "no plan meets the other constraints at any drop rate", method, core)
    value, ev, apply = _settle(ctx, p, m[0] * 100, lambda s: with_max_drop(sc, s))
    if ev is None:
        return _cannot(p, cur, "could not be confirmed by re-solving", method, core)
    return _relaxation(p, cur, required=value, required_exact=m[0] * 100, helps=True, plan=ev, apply=apply,
                       method=method)


def _threshold(ctx: Context, make: Callable[[float], Scenario], lo: float, hi: float, tol: float
               ) -> tuple[float, Evaluation | None] | None:
    """Smallest x in (lo, hi] at which the request admits a plan, to ``tol`` relative to x.

    feasible(x) <=> T*(x) <= T_deadline, where T*(x) is the least finish time over plans meeting
    every other family (objective "time", deadline.finish freed). For efficiency and bandwidth T* is
    nonincreasing in x and nearly affine in u = 1/x (compute ~ 1/eta, link time ~ 1/B), so a secant
    on u lands next to the crossing; each estimate is closed by one solve ``tol`` to its other side,
    and a bisection step follows whenever the bracket did not halve. ``lo`` must be infeasible.

    Faster steps raise the input demand, so input.throughput can make feasibility non-monotone. If
    ``hi`` is infeasible: with input.throughput dropped too, T* is monotone, so T*(hi) > T_deadline
    proves no x <= hi helps; otherwise GRID points below ``hi`` are probed for a feasible window.
    Returns (x, fastest plan at x) or None.
    """
    deadline = ctx.sc.task.deadline_s

    made: dict[float, Scenario] = {}  # one scenario per value: its tables are built once (Context.space_for)

    def t(x: float, drop: Iterable[str] = ()) -> tuple[float, Evaluation | None]:
        sc = made.get(x)
        if sc is None:
            sc = made[x] = make(x)
        ev = ctx.best(sc, objective="time", drop=(F.DEADLINE,) + tuple(drop))
        return (ev.metrics["finish_days"] * DAY if ev is not None else math.inf), ev

    t_hi, ev_hi = t(hi)
    if t_hi > deadline:
        if F.INPUT_THROUGHPUT not in ctx.enforced or t(hi, (F.INPUT_THROUGHPUT,))[0] > deadline:
            return None
        prev = lo
        for k in range(1, GRID):
            x = lo + (hi - lo) * k / GRID
            tx, ex = t(x)
            if tx <= deadline:
                hi, t_hi, ev_hi, lo = x, tx, ex, prev
                break
            prev = x
        else:
            return None
    t_lo, _ = t(lo)
    while hi - lo > tol * hi:
        before = hi - lo
        if math.isfinite(t_lo) and t_lo > t_hi:
            u = 1 / hi + (1 / lo - 1 / hi) * (deadline - t_hi) / (t_lo - t_hi)
            x = 1 / u
        else:
            x = 0.5 * (lo + hi)
        x = min(max(x, lo + 1e-3 * before), hi - 1e-3 * before)
        for probe in (x, None):
            if probe is None:  # close the estimate from its other side
                probe = x - tol * x if hi == x else x + tol * x
                if not lo < probe < hi:
                    break
            tp, ep = t(probe)
            if tp <= deadline:
                hi, t_hi, ev_hi = probe, tp, ep
            else:
                lo, t_lo = probe, tp
            if hi - lo <= tol * hi:
                break
        if hi - lo > 0.5 * before and hi - lo > tol * hi:
            m = 0.5 * (lo + hi)
            tm, em = t(m)
            if tm <= deadline:
                hi, t_hi, ev_hi = m, tm, em
            else:
                lo, t_lo = m, tm
    return hi, ev_hi


def efficiency_ceiling(ctx: Context) -> tuple[float, str]:
    """The highest efficiency the relaxation considers, and why: the flat model's MFU cannot exceed the
    fraction of the matrix peak a large GEMM reaches on the card (its ``gemm_efficiency`` eta_max in
    catalogs/performance.toml; the largest among the candidates), nor 100 %; the per-operation model's
    scale cannot exceed 100 % of the modelled throughput (the model already runs every GEMM at its
    measured efficiency: more would be faster than the card was measured to be)."""
    sc = ctx.sc
    if any(s.per_op for s in sc.systems.values()):
        return 1.0, "100 % of the modelled throughput: every operation at the card's measured efficiency"
    cat = ctx.catalog or load_catalog()
    peaks = {name: (s.perf or cat.perf(name)).gemm_efficiency for name, s in sc.systems.items()}
    name = max(peaks, key=lambda k: peaks[k])
    return min(1.0, peaks[name]), (f"{name}'s measured large-GEMM efficiency eta_max {peaks[name] * 100:.4g} %, "
                                   "catalogs/performance.toml")


def relax_efficiency(ctx: Context, core: list[str] | None = None) -> Relaxation:
    """Required efficiency eta* = min { eta in (eta_0, 1] : T*(eta) <= T_deadline }. Efficiency divides
    the compute time (t = F / (p P eta)), so a higher eta never slows a plan (see ``_threshold``)."""
    p = PARAMS["efficiency"]
    sc = ctx.sc
    eta0 = min(s.efficiency for s in sc.systems.values())
    # per-operation model: the efficiency is a scale on the modelled throughput (100 % = as calibrated)
    per_op = any(s.per_op for s in sc.systems.values())
    hi, why = efficiency_ceiling(ctx)
    method = (f"min finish time as a function of efficiency in ({eta0:g}, {hi:g}] crossing the deadline (secant on "
              f"1/eta, bracketed), relative tolerance {EFFICIENCY_TOL:g}"
              + ("; per-operation model: percent of the modelled throughput" if per_op else ""))
    if eta0 >= hi:
        return _cannot(p, eta0 * 100, f"skipped: already at the ceiling ({why})", method, core)
    found = _threshold(ctx, lambda e: with_efficiency(sc, e), eta0, hi, EFFICIENCY_TOL)
    if found is None:
        return _cannot(p, eta0 * 100, f"skipped: no plan even at {hi * 100:.4g} % "
                       + ("of the modelled throughput" if per_op else "efficiency") + f", the most any run reaches "
                       f"({why}); a change nobody can make", method, core)
    eta, _ = found
    value, ev, apply = _settle(ctx, p, min(eta * 100, 100.0 * hi), lambda s: with_efficiency(sc, s))
    if ev is None or per_op:  # rounding up crossed 100 %; per-operation: no flat efficiency to write back
        value, ev, apply = (value if ev is not None else eta * 100), (ev or found[1]), None
    return _relaxation(p, eta0 * 100, required=value, required_exact=eta * 100, helps=True, plan=ev, apply=apply,
                       method=method)


def relax_nic_bandwidth(ctx: Context, core: list[str] | None = None) -> Relaxation:
    """Required NIC bandwidth B* = k* x B_nic with k* = min { k in (1, 1000] : T*(k) <= T_deadline }.
    NIC bandwidth only shortens communication (B = min(intra, k_nic B_nic / tp) across hosts; see
    ``_threshold``). With several candidate accelerators the factor k* is reported ("x current")."""
    p = PARAMS["nic_bandwidth"]
    sc = ctx.sc
    single = _single(sc)
    method = (f"min finish time as a function of the NIC bandwidth factor in (1, {NIC_FACTOR_MAX:g}] crossing "
              f"the deadline (secant on 1/B, bracketed), relative tolerance {NIC_REL_TOL:g}")
    cur = single.acc.nic_bw / GB if single else 1.0
    unit = "GB/s" if single else "x current"
    found = None if over_budget_at(ctx, with_nic_factor(sc, NIC_FACTOR_MAX)) else \
        _threshold(ctx, lambda k: with_nic_factor(sc, k), 1.0, NIC_FACTOR_MAX, NIC_REL_TOL)
    if found is None:
        r = _cannot(p, cur, f"no plan even with {NIC_FACTOR_MAX:g}x the NIC bandwidth: compute or the card's own "
                            "link limits the step", method, core)
        r.unit = unit
        return r
    k, ev0 = found
    if single:
        bw0 = single.acc.nic_bw
        value, ev, apply = _settle(ctx, p, k * bw0 / GB, lambda s: with_nic_factor(sc, s / bw0))
        exact = k * bw0 / GB
    else:
        value, ev, apply = _settle(ctx, replace(p, unit="x"), k, lambda s: with_nic_factor(sc, s), lambda u: u)
        exact = k
    if ev is None:
        value, ev, apply = exact, ev0, None
    r = _relaxation(p, cur, required=value, required_exact=exact, helps=True, plan=ev, apply=apply, method=method)
    r.unit = unit
    return r


def _time_candidates(ctx: Context) -> Evaluation | None:
    """The fastest plan with deadline.finish and budget.cost freed: its training time
    train (1 + L) = T* - T_reserved bounds every input that only scales the finish time."""
    return _fastest(ctx, [F.DEADLINE, F.BUDGET])


def relax_reserved(ctx: Context, core: list[str] | None = None,
                   fastest: Evaluation | None | Literal["unset"] = "unset") -> Relaxation:
    """Required reserved time R* = T_deadline - (T* - T_reserved): finish = reserved + train (1 + L),
    and reserved enters nothing else but the cost. With a budget cap the candidate is confirmed and,
    if the cap fails, replaced by bisection on [0, R*] (less reserved time never costs more)."""
    p = PARAMS["reserved"]
    sc = ctx.sc
    r0, dl = sc.task.reserved_s, sc.task.deadline_s
    method = "R* = deadline - (min finish - reserved), min finish with deadline.finish relaxed"
    fastest = _time_candidates(ctx) if fastest == "unset" else fastest
    if fastest is None:
        return _cannot(p, r0 / DAY, "no plan meets the other constraints at any deadline", method, core)
    run = fastest.metrics["finish_days"] * DAY - r0
    cand = dl - run
    if cand < 0:
        return _cannot(p, r0 / DAY, f"even with no reserved time the fastest plan needs {run / DAY:.2f} d "
                                    f"> {dl / DAY:.2f} d", method, core)
    closed = most_reserved(ctx) if _budget(ctx) < math.inf else None
    if closed is not None:  # the budget cap may bind: the largest reserved time over plans, in closed form
        method = ("R* = max over plans of min(deadline, budget / rate) - (finish - reserved), rate = cost / "
                  "finish (deadline.finish and budget.cost relaxed)")
        if closed < 0:
            return _cannot(p, r0 / DAY, "no plan even with no reserved time", method, core)
        cand = min(cand, closed)
    elif ctx.feasible(with_reserved(sc, cand)) is None:  # the budget cap still binds: bisection
        method = "bisection on feasibility over reserved time in [0, R*] (budget cap), tolerance 1 s"
        if ctx.feasible(with_reserved(sc, 0.0)) is None:
            return _cannot(p, r0 / DAY, "no plan even with no reserved time", method, core)
        lo, hi = 0.0, cand  # lo feasible, hi infeasible
        while hi - lo > RESERVED_TOL_S:
            m = 0.5 * (lo + hi)
            if ctx.feasible(with_reserved(sc, m)) is not None:
                lo = m
            else:
                hi = m
        cand = lo
    value, ev, apply = _settle(ctx, p, cand / DAY, lambda s: with_reserved(sc, s))
    if ev is None:
        return _cannot(p, r0 / DAY, "could not be confirmed by re-solving", method, core)
    return _relaxation(p, r0 / DAY, required=value, required_exact=cand / DAY, helps=True, plan=ev, apply=apply,
                       method=method)


Figure = Callable[[NDArray[Any], NDArray[Any]], NDArray[Any]]
"""Per plan (or per layout, from its bounds): a figure of the finish and cost arrays at today's inputs."""


def _budget(ctx: Context) -> float:
    """The budget cap a relaxation keeps (inf without one, or when budget.cost is not enforced)."""
    cap = ctx.sc.cost.max_cost
    return cap if cap is not None and F.BUDGET in ctx.enforced else math.inf


def largest_over_plans(ctx: Context, figure: Figure, bound: Figure) -> float | None:
    """max over plans meeting every enforced family but deadline.finish and budget.cost of
    ``figure(finish, cost)`` (-inf when no plan does): from the base table on small spaces, else by a scan
    of the layouts in decreasing ``bound(finish_min, cost_min)``, an upper bound of the figure over each
    layout's plans (:class:`~tpopt.optimizer.decompose.LayoutBounds`), each layout evaluated exactly until
    the bound falls below the largest figure found. None where a finish is not reserved time plus a
    training time proportional to the iterations (a batch ramp, the chance form of the deadline, the batch
    a choice): the caller searches by re-solving."""
    sc = ctx.sc
    if sc.task.ramp is not None or chance_on(sc) or outer.has_task_choices(sc):
        return None
    fams = frozenset(ctx.enforced) - {F.DEADLINE, F.BUDGET}
    enforce = [f for f in FAMILIES if f in fams]
    oracle = ctx.set_oracle()
    if oracle.table is not None:
        t = oracle.table
        m = t.mask(enforce, cards=ctx.req.cards)
        return float(figure(t.finish[m], t.cost[m]).max()) if m.any() else -math.inf
    space = oracle.space
    if not scanned(space, ctx.req):
        return None
    clock = clock_of(ctx.req)
    bounds = layout_bounds(space, ctx.req.objective, fams)
    cand = np.flatnonzero(allowed_layouts(space, bounds, fams, ctx.req.cards))
    upper = bound(bounds.finish_min[cand], bounds.cost_min[cand])
    ev = layout_evaluator(space)
    best = -math.inf
    for k in np.argsort(-upper, kind="stable"):
        if upper[k] < best:
            break
        if clock.expired("searching the layouts"):
            raise Undecided(f"time limit reached ({ctx.req.time_limit:g} s)")
        layout = tuple(int(bounds.coords[v][cand[k]]) for v in HUB)
        # the layout's own bound first, from its terms' lower bounds (no pipeline simulated): the bound of a
        # plan holds for any finish and cost at least as large, so only a layout that may beat ``best`` is
        # evaluated exactly
        low = ev._points(layout, enforce, "cost", None, False, "bound")
        if low is None or not low[2].any():
            continue
        m = low[2]
        if float(bound(np.broadcast_to(low[1], m.shape)[m], np.broadcast_to(low[0], m.shape)[m]).max()) < best:
            continue
        got = ev._points(layout, enforce, "cost", None, False, "exact")
        if got is not None and got[2].any():
            m = got[2]
            best = max(best, float(figure(np.broadcast_to(got[1], m.shape)[m],
                                          np.broadcast_to(got[0], m.shape)[m]).max()))
    return best


def most_iterations(ctx: Context) -> int | None:
    """I* = max over plans meeting every family but deadline.finish and budget.cost of the most iterations
    each can run within the deadline D and the budget C: with finish(I) = R + I y and cost(I) = rate x
    finish(I), y = (finish - R) / I_0 and rate = cost / finish read at today's I_0 iterations,
    I <= (D - R) / y and I <= (C / rate - R) / y. Tokens enter nothing else, so the request is feasible with
    I iterations exactly when I <= I* (:func:`largest_over_plans`). A layout's bound: every plan of it
    finishes no sooner than finish_min and costs at least cost_min at I_0, and finish and cost grow with I
    (cost(I) >= (I / I_0) cost(I_0) for I <= I_0), so I <= I_0 min((D - R) / (finish_min - R), C / cost_min)."""
    sc = ctx.sc
    r, i0, d, cap = sc.task.reserved_s, T.iteration_count(sc), sc.task.deadline_s, _budget(ctx)

    def figure(finish: NDArray[Any], cost: NDArray[Any]) -> NDArray[Any]:
        with np.errstate(divide="ignore", invalid="ignore"):
            y = (finish - r) / i0
            most = np.minimum((d - r) / y, (cap / (cost / finish) - r) / y)
        return np.where(np.isnan(most), -np.inf, most)

    def bound(finish: NDArray[Any], cost: NDArray[Any]) -> NDArray[Any]:
        with np.errstate(divide="ignore", invalid="ignore"):
            most = i0 * np.minimum((d - r) / (finish - r), cap / cost)
        return np.where(np.isnan(most), np.inf, most)

    got = largest_over_plans(ctx, figure, bound)
    if got is None or got == math.inf:
        return None
    return max(0, int(math.floor(got))) if math.isfinite(got) else 0


def most_reserved(ctx: Context) -> float | None:
    """R* = max over plans meeting every family but deadline.finish and budget.cost of the most reserved
    time each leaves within the deadline D and the budget C: finish(R) = R + t and cost(R) = rate (R + t),
    t = finish - R_0 and rate = cost / finish at today's R_0, so R <= D - t and R <= C / rate - t
    (:func:`largest_over_plans`). A layout's bound: t >= t_min = finish_min - R_0, and for R <= R_0 with
    cost(R_0) >= cost_min, C / rate - t <= C R_0 / cost_min + t (C / cost_min - 1), at most
    C R_0 / cost_min + t_min (C / cost_min - 1) when C < cost_min (no bound from the budget otherwise)."""
    sc = ctx.sc
    r0, d, cap = sc.task.reserved_s, sc.task.deadline_s, _budget(ctx)

    def figure(finish: NDArray[Any], cost: NDArray[Any]) -> NDArray[Any]:
        with np.errstate(divide="ignore", invalid="ignore"):
            most = np.minimum(d, cap / (cost / finish)) - (finish - r0)
        return np.where(np.isnan(most), -np.inf, most)

    def bound(finish: NDArray[Any], cost: NDArray[Any]) -> NDArray[Any]:
        t = finish - r0
        with np.errstate(divide="ignore", invalid="ignore"):
            by_budget = np.where(cap < cost, cap * r0 / cost + t * (cap / cost - 1.0), np.inf)
            most = np.minimum(d - t, by_budget)
        return np.where(np.isnan(most), np.inf, most)

    return largest_over_plans(ctx, figure, bound)


def relax_tokens(ctx: Context, core: list[str] | None = None,
                 fastest: Evaluation | None | Literal["unset"] = "unset") -> Relaxation:
    """Largest token count D* = I* x b with I* = floor((T_deadline - T_reserved) / y_min), where
    y_min = min over plans of t_step (1 + L) = (T* - T_reserved) / ceil(D / b): tokens enter only
    through iterations = ceil(D / b). I* is confirmed by re-solving (I* feasible, I* + 1 not); with a
    budget cap that fails, integer bisection on [1, I*] (fewer iterations never cost more)."""
    p = PARAMS["tokens"]
    sc = ctx.sc
    tps = sc.task.tokens_per_step
    d0 = sc.task.tokens
    i0 = math.ceil(d0 / tps)
    method = "I* = floor((deadline - reserved) / min step x (1 + L)), tokens = I* x tokens per step"
    fastest = _time_candidates(ctx) if fastest == "unset" else fastest
    if fastest is None:
        return _cannot(p, d0 / 1e9, "no plan meets the other constraints with any token count", method, core)
    y = (fastest.metrics["finish_days"] * DAY - sc.task.reserved_s) / i0
    i_star = int(math.floor((sc.task.deadline_s - sc.task.reserved_s) / y))
    closed = most_iterations(ctx)
    if closed is not None:
        i_star = closed
        method = ("I* = max over plans of the most iterations within the deadline and the budget, "
                  "min((deadline - reserved) / y, (budget / rate - reserved) / y), y = step x (1 + L); "
                  "tokens = I* x tokens per step")
    i_star = min(i_star, i0 - 1)

    def ok(i: int) -> Evaluation | None:
        return ctx.feasible(with_tokens(sc, i * tps)) if i >= 1 else None

    if i_star < 1:
        return _cannot(p, d0 / 1e9, "not even one optimizer step fits", method, core)
    at_star = ok(i_star)
    if at_star is None and closed is not None and ok(i_star - 1) is not None:  # floating point at the boundary
        i_star -= 1
    elif at_star is None:  # floating point, or a budget cap: bisection for the largest feasible
        if ok(1) is None:
            return _cannot(p, d0 / 1e9, "not even one optimizer step fits", method, core)
        lo, hi = 1, i_star  # lo feasible, hi infeasible
        while hi - lo > 1:
            m = (lo + hi) // 2
            if ok(m) is not None:
                lo = m
            else:
                hi = m
        i_star = lo
    while i_star + 1 < i0 and ok(i_star + 1) is not None:  # floating point at the boundary
        i_star += 1
    exact = i_star * tps
    value, ev, apply = _settle(ctx, p, exact / 1e9, lambda s: with_tokens(sc, s))
    if ev is None:
        return _cannot(p, d0 / 1e9, "could not be confirmed by re-solving", method, core)
    return _relaxation(p, d0 / 1e9, required=value, required_exact=exact / 1e9, helps=True, plan=ev, apply=apply,
                       method=method, note=f"{i_star:,} optimizer steps of {tps:,} tokens")


def relax_max_cost(ctx: Context, core: list[str] | None = None) -> Relaxation | None:
    """Required budget C* = min cost over plans meeting every other family (budget.cost freed)."""
    sc = ctx.sc
    if sc.cost.max_cost is None or F.BUDGET not in ctx.enforced:
        return None
    p = PARAMS["max_cost"]
    method = "min cost with budget.cost relaxed"
    cheapest = ctx.best(objective="cost", drop=[F.BUDGET])
    if cheapest is None:
        return _cannot(p, sc.cost.max_cost, "no plan meets the other constraints at any cost", method, core)
    exact = cheapest.metrics["cost"]
    value, ev, apply = _settle(ctx, p, exact, lambda s: with_max_cost(sc, s))
    if ev is None:
        return _cannot(p, sc.cost.max_cost, "could not be confirmed by re-solving", method, core)
    r = _relaxation(p, sc.cost.max_cost, required=value, required_exact=exact, helps=True, plan=ev, apply=apply,
                    method=method)
    r.unit = cheapest.metrics["cost_unit"]
    return r


def with_card_price_scale(sc: Scenario, f: float) -> Scenario:
    """Every candidate card's price per card-hour times ``f`` (NIC prices unchanged)."""
    return replace(sc, systems={k: replace(s, price_card_hour=s.price_card_hour * f)
                                for k, s in sc.systems.items() if s.price_card_hour is not None})


PRICE_ROUNDS = 32  # Dinkelbach rounds at most (each one is a cheapest-plan solve; 2-4 are typical)


def relax_card_price(ctx: Context, core: list[str] | None = None) -> Relaxation | None:
    """The price per card-hour at which the request fits its budget B. Each plan costs
    C(f) = f x card-dollars + NIC-dollars when every card's price is scaled by f; min over plans of C(f)
    grows with f, so the largest f with min C(f) <= B is found by Dinkelbach's iteration: f_{k+1} = f_k +
    (B - C_k(f_k)) / card-dollars_k / f_k, with C_k the cheapest plan at f_k (budget.cost freed), until the
    cheapest plan costs B (exact, a few solves). Reported as the price of the plan's own card, f x its
    catalog (or scenario) price, rounded down to the cent and re-solved at that price on that card alone.
    None when there is no budget or the costs are card-hours (no prices)."""
    sc = ctx.sc
    if sc.cost.max_cost is None or F.BUDGET not in ctx.enforced:
        return None
    if any(s.price_card_hour is None or s.price_card_hour <= 0 for s in sc.systems.values()):
        return None
    p = PARAMS["card_price"]
    budget = sc.cost.max_cost
    method = "largest scale f of the card prices with min cost(f) <= budget (Dinkelbach's iteration, exact)"
    cheapest = ctx.best(objective="cost", drop=[F.BUDGET])
    first = next(iter(sc.systems))
    if cheapest is None:
        return _cannot(p, sc.systems[first].price_card_hour, "no plan meets the other constraints at any price",
                       method, core)
    if cheapest.metrics["cost"] <= budget:
        return None  # the budget does not hold the request back at today's prices
    f = 1.0
    for _ in range(PRICE_ROUNDS):
        acc = cheapest.plan.accelerator
        card = cheapest.metrics["card_hours"] * sc.systems[acc].price_card_hour * f
        nic = cheapest.metrics["cost"] - card
        if card <= 0 or nic >= budget:
            return _cannot(p, sc.systems[acc].price_card_hour, "the NICs alone cost more than the budget", method,
                           core)
        f *= (budget - nic) / card  # the price at which this plan costs the budget exactly
        nxt = ctx.best(with_card_price_scale(sc, f), objective="cost", drop=[F.BUDGET])
        assert nxt is not None, "a plan at every price: the same plans"
        cheapest = nxt
        if cheapest.metrics["cost"] >= budget * (1 - 1e-9):
            break  # no plan is cheaper than the budget at f: the largest such f
    acc = cheapest.plan.accelerator
    now = sc.systems[acc].price_card_hour
    assert now is not None, "every candidate has a price (checked above)"
    exact = now * f
    value = math.floor(exact * 100) / 100
    pinned = replace(sc, systems={acc: replace(sc.systems[acc], price_card_hour=value)},
                     search=replace(sc.search, accelerators=(acc,)))
    ev = ctx.feasible(pinned) if value > 0 else None
    if ev is None:
        return _cannot(p, now, f"could not be confirmed by re-solving at {value:.2f} per card-hour", method, core)
    apply: dict[str, Any] | None = {"hardware.accelerator": [acc], "search.accelerator": [acc], "cost.card_hour": value}
    if apply is not None and not _applies(ctx, apply):
        apply = None
    r = _relaxation(p, now, required=value, required_exact=exact, helps=True, plan=ev, apply=apply,
                    method=method + f"; {acc}: {now:g} now")
    r.unit = f"{cheapest.metrics['cost_unit']}/card-hour"
    return r


def _scenario_for_accelerator(ctx: Context, name: str) -> Scenario:
    """The scenario with ``name`` as its only accelerator. From the raw tables when known (so the
    file's card overrides stay with the card they were written for), else from the catalog entry with
    the scenario's efficiency and the catalog price."""
    if ctx.raw is not None:
        raw = with_overrides(ctx.raw, {"hardware.accelerator": [name], "search.accelerator": [name]})
        return build_scenario(raw, ctx.catalog)
    sc = ctx.sc
    if name in sc.systems:
        sysm = sc.systems[name]
    else:
        assert ctx.catalog is not None, "relax_accelerator loads the catalog"
        acc = ctx.catalog.accelerator(name)
        first = next(iter(sc.systems.values()))
        sysm = System(acc=acc, efficiency=first.efficiency, price_card_hour=acc.price_card_hour,
                      nic_price_hour=acc.nic_price_hour, perf=ctx.catalog.perf(name) if first.per_op else None)
    return replace(sc, systems={name: sysm}, search=replace(sc.search, accelerators=(name,)))


def cost_floor(sc: Scenario, name: str) -> float | None:
    """A lower bound on the cost of any plan of ``sc`` on accelerator ``name``: the weight GEMMs alone,
    6 N_gemm D FLOPs, at the card's fastest matrix peak P times the highest efficiency its step model can
    reach (flat: the stated efficiency; per-operation: eta_max x the throughput scale, since every GEMM runs at
    most at eta_max of its peak), priced per card-hour: C >= 6 N_gemm D / (P eta) / 3600 x price (bubbles,
    communication, overheads, reserved days and NICs only add). None without a price."""
    s = sc.systems[name]
    if s.price_card_hour is None:
        return None
    acc = s.acc
    peak = max(acc.peak_flops, acc.peak_fp16, acc.peak_fp8)
    eta = s.perf.gemm_efficiency * s.efficiency if s.perf is not None else s.efficiency
    if not (peak > 0 and eta > 0):
        return None
    return 6.0 * gemm_params(sc.model) * sc.task.tokens / (peak * eta) / 3600.0 * s.price_card_hour


def compute_cost_floor(space: Space, floor: bool = False) -> float:
    """A lower bound on the cost of any plan of ``space`` that meets the layout rules and the card cap,
    from its compute table alone: min over those layouts h of rate_min(h) x (R + I x (compute_min(h) +
    wait) x (1 + L_min(h))), each term's least value over the layout's other choices (NICs the host takes
    for the rate). Every other busy term (exposed communication, offload) only adds to the step, so the
    bound holds without building their tables. ``floor``: compute_min(h) from the compute floor instead
    (:meth:`Space.compute_floor`: the busiest stage's work, no pipeline simulated and no transfer, at most the
    compute table's lower bound; one tenth of its time to build, and kept off the space's tables)."""
    sc, dom = space.sc, space.domains
    n = [len(dom[v]) for v in HUB]

    def hub(name: str, values: NDArray[Any] | None = None) -> NDArray[Any]:
        return np.broadcast_to(_reduced(space, name, np.min, values), n).reshape(-1)

    def least_compute() -> NDArray[Any]:
        if not floor:
            return hub("time.compute")
        t = space.compute_floor()
        vals = np.where(np.isfinite(t.values), t.values, np.inf)
        return np.broadcast_to(reduce_to(dom, vals, t.vars, HUB, np.min, broadcast=False), n).reshape(-1)

    nic_ok = space.nic_allowed()
    rate = space.tables["rate"]
    shape = [1] * rate.values.ndim
    shape[rate.vars.index("acc")], shape[rate.vars.index("nics")] = nic_ok.shape
    rate_min = hub("rate", np.where(nic_ok.reshape(shape), rate.values, np.inf))
    with np.errstate(over="ignore", invalid="ignore"):
        cost = rate_min * (sc.task.reserved_s + T.iteration_count(sc) * (least_compute() + sc.input.wait_s)
                           * (1.0 + hub("overhead")))
    grid = np.indices(n).reshape(len(HUB), -1)
    ok = cards_of(**{v: np.asarray(dom[v])[grid[i]] for i, v in enumerate(HUB)}) <= sc.search.max_cards
    for f in HUB_RULES:
        ok &= np.broadcast_to(_reduced(space, "ok." + f, np.max), n).reshape(-1) > 0.5
    cost = np.where(ok & np.isfinite(cost), cost, np.inf)
    return float(cost.min()) if cost.size else math.inf


def floor_enforced(ctx: Context) -> bool:
    """Whether :func:`compute_cost_floor` bounds the plans a question of ``ctx`` admits: the budget, the card
    cap and the layout rules it applies are all enforced."""
    return ctx.sc.cost.max_cost is not None and {F.BUDGET, F.CARDS, *HUB_RULES} <= set(ctx.enforced)


def over_budget_at(ctx: Context, sc: Scenario) -> bool:
    """Whether no plan of ``sc`` (a change of the request that keeps its budget) fits the budget, proven by
    the compute floor's cost bound (:func:`compute_cost_floor` with ``floor``) on a space borrowing the base
    tables (:func:`borrowed`), before any other table of ``sc`` is built. False when the bound does not prove
    it (the question is then solved), or when the budget, card cap or layout rules are not all enforced."""
    if not floor_enforced(ctx):
        return False
    base = ctx.set_oracle().space
    try:
        space = borrowed(base, sc) or Space.from_scenario(sc)
    except InputError:
        return False
    if tabulated(space) or on_demand(space, ctx.req):
        return False
    return compute_cost_floor(space, floor=True) > ctx.sc.cost.max_cost  # type: ignore[operator]


def relax_accelerator(ctx: Context, core: list[str] | None = None) -> Relaxation:
    """Each catalog accelerator alone in place of the scenario's hardware: its cheapest plan (cost
    objective, every family enforced). Required: the cheapest accelerator that admits a plan."""
    p = PARAMS["accelerator"]
    if ctx.catalog is None:
        ctx.catalog = load_catalog()
    current = ", ".join(ctx.sc.search.accelerators or tuple(ctx.sc.systems))
    method = "cheapest plan with each catalog accelerator as the only hardware"
    options: list[dict[str, Any]] = []
    # the layout rules that depend on the model and the batch alone hold on any card: each card's
    # search keeps only layouts that meet them (see Context.narrowed)
    ctx.keep = frozenset(MODEL_FAMILIES) & ctx.enforced
    ctx.keep_vars = tuple(v for v in VARS if v not in ("acc", "nics"))
    for name in ctx.catalog.accelerators:
        entry: dict[str, Any] = {"accelerator": name, "current": name in ctx.sc.systems}
        try:
            sc = _scenario_for_accelerator(ctx, name)
            floor = cost_floor(sc, name) if F.BUDGET in ctx.enforced and sc.cost.max_cost is not None else None
            if floor is not None and floor > sc.cost.max_cost:  # type: ignore[operator]
                ev, entry["note"] = None, (f"over the budget without a solve: the weight GEMMs alone at the card's "
                                           f"peak cost at least {floor:,.0f}")
            elif floor is not None and floor_enforced(ctx) and not tabulated(space := ctx.card_space(sc, name)) \
                    and not on_demand(space, ctx.req):
                # the compute floor first where the compute table is still to build (a card the base space
                # does not search); the pipeline's lower bound only where the floor leaves the card in: its
                # table serves the card's solve
                cheap = not any(k in dict.keys(space.tables) for k in ("time.compute", "time.compute.lo"))
                least = compute_cost_floor(space, floor=True) if cheap else -math.inf
                if least <= sc.cost.max_cost:  # type: ignore[operator]
                    least = compute_cost_floor(space)
                if least > sc.cost.max_cost:  # type: ignore[operator]
                    ev, entry["note"] = None, (f"over the budget without a full solve: the least compute time of "
                                               f"any layout alone costs at least {least:,.0f}")
                else:
                    ev = ctx.best(sc, objective="cost", space=space)
            else:
                ev = ctx.best(sc, objective="cost")
        except InputError as exc:
            ev, entry["note"] = None, str(exc)
        entry["feasible"] = ev is not None
        if ev is not None:
            entry.update({"cost": ev.metrics["cost"], "cost_unit": ev.metrics["cost_unit"],
                          "finish_days": ev.metrics["finish_days"], "plan": ev.plan_dict(), "_ev": ev})
        options.append(entry)
    ok = sorted((o for o in options if o["feasible"]), key=lambda o: (o["cost"], o["finish_days"]))
    evs = {o["accelerator"]: o.pop("_ev") for o in ok}
    if not ok:
        r = _cannot(p, current, "no catalog accelerator alone admits a plan", method, core)
        r.options = options
        return r
    best = ok[0]
    ev = evs[best["accelerator"]]
    return _relaxation(p, current, required=best["accelerator"], helps=True, plan=ev,
                       apply={"hardware.accelerator": [best["accelerator"]],
                              "search.accelerator": [best["accelerator"]]},
                       method=method, options=options)


# In the order a user can act on them: money (a larger budget, a lower price, another card), then the request
# (deadline, cards, tokens, reserved time), then the machine (NICs, memory) and last what a run can hardly change
# (the MoE drop rate, the efficiency): a time limit cuts the least useful answers.
RELAXATIONS = ("max_cost", "card_price", "accelerator", "deadline", "max_cards", "tokens", "reserved",
               "nic_bandwidth", "usable_memory", "max_drop", "efficiency")


def relaxations(sc: Scenario, backend: str = "cpsat", req: Request | None = None, *,
                raw: dict[str, Any] | None = None, catalog: Catalog | None = None, core: list[str] | None = None,
                enforced: Iterable[str] | None = None, only: Collection[str] | None = None,
                ctx: Context | None = None, progress: Callable[[str], None] | None = None) -> list[Relaxation]:
    """The smallest single change of each relaxable input that makes the request feasible.

    ``raw`` (the scenario's raw tables with the command-line overrides applied) and ``catalog`` are
    used by the accelerator relaxation. For an input that cannot help, ``blocked_by`` names an
    irreducible conflict among the families it does not enter, when there is one. ``core`` is
    accepted for callers that have the conflict at hand. ``only`` restricts the inputs. ``ctx`` (a
    :class:`Context` of the same request) shares its solves and tables; ``progress(text)`` is told
    which input is being relaxed.

    Each input's re-solves search only the layouts that meet the families the input does not enter
    (:meth:`Context.narrowed`): exact, and much smaller when memory or divisibility rule most out.
    """
    req = req or Request()
    if ctx is None:
        ctx = Context.of(sc, backend, req, enforced, raw, catalog)
    names = [n for n in RELAXATIONS if only is None or n in only]
    shared: dict[str, Evaluation | None] = {}
    out: list[Relaxation] = []
    for k, name in enumerate(names):
        t0, s0 = time.perf_counter(), ctx.solves
        if progress is not None:
            progress(f"smallest change of the {PARAMS[name].label} ({k + 1}/{len(names)})")
        ctx.keep = frozenset(ctx.enforced) - set(PARAMS[name].affects)
        r: Relaxation | None
        try:
            if name in ("tokens", "reserved"):
                if "fastest" not in shared:
                    shared["fastest"] = _time_candidates(ctx)
                r = (relax_tokens if name == "tokens" else relax_reserved)(ctx, core, fastest=shared["fastest"])
            else:
                fn = {"deadline": relax_deadline, "max_cards": relax_max_cards, "efficiency": relax_efficiency,
                      "usable_memory": relax_usable_memory, "nic_bandwidth": relax_nic_bandwidth,
                      "accelerator": relax_accelerator, "max_cost": relax_max_cost,
                      "card_price": relax_card_price, "max_drop": relax_max_drop}[name]
                r = fn(ctx, core)
        except Undecided as exc:
            p = PARAMS[name]
            r = _relaxation(p, None, required=None, helps=None, note=str(exc),
                            method="not on the on-demand path" if isinstance(exc, NotOnDemand) else "undecided")
        finally:
            ctx.keep, ctx.keep_vars = None, VARS
        if r is None:
            continue
        if r.helps is False and not r.blocked_by and name != "accelerator":
            try:
                r.blocked_by = other_conflict(ctx, PARAMS[name].affects)
            except Undecided:
                pass  # the relaxation's verdict stands; what else conflicts is left unsaid
        r.seconds, r.solves = time.perf_counter() - t0, ctx.solves - s0
        out.append(r)
    return out


def infeasibility(sc: Scenario, space: Space, backend: str, req: Request, enforced: Iterable[str] | None = None, *,
                  raw: dict[str, Any] | None = None, catalog: Catalog | None = None,
                  progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Everything said about a request proven to have no plan: an irreducible conflict, each of its
    families' closest plan meeting all the others, and the smallest single change of each input.

    ``progress(text)`` (optional) is told each step as it starts. Returns a JSON-ready dict with
    ``conflict`` (family names), ``conflict_detail`` and ``relaxations`` (:meth:`Relaxation.as_dict`).
    """
    tell: Callable[[str], None] = progress or (lambda text: None)
    ctx = Context.of(sc, backend, req, enforced, raw, catalog)
    out: dict[str, Any] = {}
    try:
        tell("a minimal set of conflicting constraints")
        core = minimal_conflict(space, ctx.backend, req, ctx.enforced, ctx=ctx) or []
        tell("the plans closest to each conflicting constraint")
        detail = conflict_detail(ctx, core)
    except (Undecided, TimeLimitReached):  # the verdict stands; the explanation is cut short, and says so
        core, detail = [], []
        out["conflict_status"] = "time limit reached"
    rels = relaxations(sc, ctx.backend, req, raw=raw, catalog=catalog, core=core, enforced=ctx.enforced, ctx=ctx,
                       progress=progress)
    out.update({"conflict": core, "conflict_detail": detail, "relaxations": [r.as_dict() for r in rels]})
    return out


ANALYSIS_SKIPPED = ("the memory plan builds the tables one layout group at a time, and which constraints bind "
                    "reads every table at once")
"""Why ``explain`` of a feasible request leaves the binding constraints out (``analysis_skipped``), as ``tpopt solve``
skips its analysis there."""


def explain_request(sc: Scenario, backend: str = "cpsat", req: Request | None = None, *,
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
    run = tiny_backend(space, backend, req.method)  # as tpopt solve: a tiny space's plans all evaluated
    result = solve_space(sc, run, req, space=space)
    if run != backend:
        result.solver.note = TINY_NOTE
    out: dict[str, Any] = {"status": result.status.value, "objective": result.objective,
                           "solver": result.solver.as_dict(), "conflict": [], "conflict_detail": [], "relaxations": []}
    if not result.feasible:
        if result.status == Status.INFEASIBLE:
            out.update(infeasibility(sc, space, backend, req, result.enforced, raw=raw, catalog=catalog,
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
                oracle = make_oracle(space, backend, req)
            binds = binding_families(oracle, best, req.objective, set(result.enforced), undecided)
        except TimeLimitReached:
            binds, undecided = [], [f for f in RELAXABLE if f in result.enforced and f not in space.inert()
                                    and not (f == F.BUDGET and sc.cost.max_cost is None)]
    out.update({"plan": best.plan_dict(), "cost": best.metrics["cost"], "cost_unit": best.metrics["cost_unit"],
                "finish_days": best.metrics["finish_days"],
                "footing": footing.footing(sc, best.plan_dict(), best.metrics["step_s"]),
                "binding": [b.as_dict(best, req.objective) for b in binds], "binding_undecided": undecided})
    return out


# ---------------------------------------------------------------------------------------------
# a given plan


def violation(c: ConstraintCheck) -> dict[str, Any]:
    """A violated check: excess = value - limit (in the family's unit) and excess / limit."""
    excess = c.value - c.limit
    return {"name": c.name, "value": c.value, "limit": c.limit, "unit": c.unit, "excess": excess,
            "excess_fraction": excess / abs(c.limit) if c.limit not in (0, float("inf")) else None,
            "rule": c.doc}


def explain_plan(sc: Scenario, plan: Plan, backend: str = "cpsat", req: Request | None = None,
                 enforced: Iterable[str] | None = None) -> dict[str, Any]:
    """Explain one plan: the constraints it violates and by how much; if feasible, how tight each
    constraint is, what one host fewer (same choices otherwise; further down while that is no valid
    layout) would violate -- the families it violates are this plan's binding ones -- and whether a
    cheaper plan exists (else which families bind the optimum)."""
    req = req or Request()
    ctx = Context.of(sc, backend, req, enforced)
    ev = evaluate(sc, plan)
    feasible = feasible_for(ev, ctx.enforced)
    out: dict[str, Any] = {"status": "feasible" if feasible else "infeasible", "objective": req.objective,
                           "plan": ev.plan_dict(), "cost": ev.metrics["cost"], "cost_unit": ev.metrics["cost_unit"],
                           "finish_days": ev.metrics["finish_days"],
                           "footing": footing.footing(sc, ev.plan_dict(), ev.metrics["step_s"]),
                           "violated": [violation(c) for c in ev.violated()]}
    # how tight each non-structural constraint is (relative slack, smallest first)
    tight: list[dict[str, Any]] = []
    for c in ev.constraints:
        if c.name in STRUCTURAL or c.limit in (float("inf"),) or c.slack == float("inf"):
            continue
        rel = c.slack / abs(c.limit) if c.limit else None
        tight.append({"name": c.name, "value": c.value, "limit": c.limit, "unit": c.unit, "slack": c.slack,
                      "relative_slack": rel})
    tight.sort(key=lambda d: (d["relative_slack"] is None, d["relative_slack"] or 0.0))
    out["tightness"] = tight
    # one host fewer (and, while that is no valid layout, the next fewer hosts)
    out["fewer_hosts"] = fewer_hosts(sc, plan, ev, ctx.enforced)
    nxt = next((f for f in out["fewer_hosts"] if f.get("valid_layout")), None)
    out["one_host_fewer"] = out["fewer_hosts"][0] if out["fewer_hosts"] else None
    out["binding"] = sorted({v["name"] for v in nxt["violates"]}) if (feasible and nxt) else []
    # the optimum of the request (left open, and said so, when the time limit cuts it short)
    try:
        best = ctx.best()
    except Undecided as exc:
        out["optimum"] = {"exists": None, "undecided": str(exc)}
        return out
    opt: dict[str, Any] = {"exists": best is not None}
    if best is not None:
        opt["plan"] = plan_summary(best)
        opt["objective_value"] = objective_value(best, req.objective)
        if feasible and objective_value(best, req.objective) >= objective_value(ev, req.objective) * (1 - REL):
            opt["this_plan_is_optimal"] = True
            space = Space.from_scenario(at_plan_batch(sc, ev.plan))  # the plan's batch (a choice or the task's)
            oracle = make_oracle(space, backend, req)
            undecided: list[str] = []
            binds = binding_families(oracle, ev, req.objective, ctx.enforced, undecided)
            opt["binding"] = [{"name": b.name, "plan_without": plan_summary(b.without),
                               "objective_without": objective_value(b.without, req.objective)} for b in binds]
            opt["binding_undecided"] = undecided
        else:
            opt["this_plan_is_optimal"] = False
            opt["change"] = objective_value(best, req.objective) / objective_value(ev, req.objective) - 1
    out["optimum"] = opt
    return out


def fewer_hosts(sc: Scenario, plan: Plan, ev: Evaluation, enforced: Collection[str]) -> list[dict[str, Any]]:
    """The same plan on one host fewer, then two, ... until a count whose layout is valid (every
    structural family holds) or no host is left: what each would violate."""
    g = sc.system(ev.plan.accelerator).acc.cards_per_host
    out: list[dict[str, Any]] = []
    n = ev.plan.cards - g
    while n >= 1:
        entry: dict[str, Any] = {"cards": n, "hosts_fewer": (ev.plan.cards - n) // g}
        try:
            alt = evaluate(sc, replace(plan, cards=n, dp=0, grad_accum=0))
        except InputError as exc:
            entry.update({"formable": False, "valid_layout": False, "reason": str(exc)})
            out.append(entry)
            n -= g
            continue
        bad = alt.violated()
        valid = not any(c.name in STRUCTURAL for c in bad)
        entry.update({"formable": True, "valid_layout": valid, "feasible": feasible_for(alt, enforced),
                      "violates": [violation(c) for c in bad], "plan": plan_summary(alt)})
        out.append(entry)
        if valid:
            break
        n -= g
    return out


# ---------------------------------------------------------------------------------------------
# sensitivities of the optimum


def sensitivities(sc: Scenario, backend: str = "cpsat", req: Request | None = None, *,
                  base: Evaluation | None = None) -> list[dict[str, Any]]:
    """Objective change at the optimum for one unit of each main input, by re-solving:
    deadline +1 d and -1 d, one host fewer (max_cards = cards* - cards_per_host), +1 GiB usable
    memory per card. delta = objective(changed) - objective(optimum); None when the changed request
    has no plan (or the change is impossible). [] when the request itself has no plan."""
    req = req or Request()
    ctx = Context.of(sc, backend, req)
    base = base or ctx.best()
    if base is None:
        return []
    obj = req.objective
    unit = base.metrics["cost_unit"] if obj == "cost" else "d"
    b0 = objective_value(base, obj)
    g = sc.system(base.plan.accelerator).acc.cards_per_host
    dl, res = sc.task.deadline_s, sc.task.reserved_s
    mem0 = min(s.acc.memory_usable for s in sc.systems.values())
    rows = [
        ("deadline +1 d", "deadline", dl / DAY, (dl + DAY) / DAY, "d", lambda: with_deadline(sc, dl + DAY)),
        ("deadline -1 d", "deadline", dl / DAY, (dl - DAY) / DAY, "d",
         (lambda: with_deadline(sc, dl - DAY)) if dl - DAY > res else None),
        ("one host fewer", "max_cards", base.plan.cards, base.plan.cards - g, "cards",
         (lambda: with_max_cards(sc, base.plan.cards - g)) if base.plan.cards - g >= 1 else None),
        ("usable memory +1 GiB", "usable_memory", mem0 / GIB, mem0 / GIB + 1, "GiB",
         lambda: replace(sc, systems={k: replace(s, acc=replace(s.acc, memory_usable=s.acc.memory_usable + GIB))
                                      for k, s in sc.systems.items()})),
    ]
    out: list[dict[str, Any]] = []
    for change, param, frm, to, u, make in rows:
        row: dict[str, Any] = {"change": change, "parameter": param, "from": frm, "to": to, "unit": u,
                               "objective": obj, "objective_unit": unit, "base": b0}
        if make is None:
            row.update({"status": "not applicable", "value": None, "delta": None, "delta_fraction": None})
        else:
            try:
                ev = ctx.best(make())
            except Undecided:
                row.update({"status": "unknown", "value": None, "delta": None, "delta_fraction": None})
                out.append(row)
                continue
            if ev is None:
                row.update({"status": "infeasible", "value": None, "delta": None, "delta_fraction": None})
            else:
                v = objective_value(ev, obj)
                row.update({"status": "optimal", "value": v, "delta": v - b0,
                            "delta_fraction": (v - b0) / b0 if b0 else None, "plan": plan_summary(ev)})
        out.append(row)
    return out


__all__ = ["conflict", "minimal_conflict", "conflict_detail", "relaxations", "infeasibility", "explain_request",
           "Relaxation", "RELAXATIONS", "explain_plan", "sensitivities", "Context", "Undecided", "DELETION_ORDER",
           "PARAMS", "with_deadline", "with_reserved", "with_tokens", "with_max_cards", "with_max_cost",
           "with_efficiency", "with_usable_memory", "with_nic_factor"]

