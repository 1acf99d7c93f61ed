"""The request being explained (:class:`Context`) and how each of its questions is answered.

A question is the exact best plan of a (modified) scenario under a set of families. :class:`Context` answers it
from the cheapest source that is exact: one table of every plan (:func:`tabulated`), tables borrowed from the
base space where the change leaves them as they are (:func:`borrowed`, :func:`card_slice`), the layout bounds
scanned in order (:func:`scanned`, :func:`scan_best`, :func:`scan_min_metric`), the plans built one layout group
at a time (:func:`on_demand`), or the chosen solver. :func:`largest_over_plans` is the closed form of a monotone
threshold over every plan on the same paths; :class:`_SetOracle` asks whether a set of families admits a plan.

Tests switch a fast path off by patching its name on this module (``borrowed``, ``card_slice``,
``layout_bounds``, ``TABLE_LIMIT``, ``use_decomposition``): every caller looks these names up here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Final, Literal

import numpy as np
from numpy.typing import NDArray

from tpopt.catalogs import Catalog
from tpopt.errors import InputError
from tpopt.models import families as F
from tpopt.models import terms as T
from tpopt.models.evaluate import Evaluation, evaluate
from tpopt.models.plan import Scenario
from tpopt.optimizer import outer
from tpopt.optimizer.backends import DEFAULT, EXHAUSTIVE, Solver, resolve
from tpopt.optimizer.core import use_decomposition
from tpopt.optimizer.decompose import HUB, HUB_RULES, KEY_RTOL, LayoutBounds
from tpopt.optimizer.enumerate import EXTRAS, NUMERIC_AXES, PointTable, chunks, layout_evaluator
from tpopt.optimizer.limits import TimeLimitReached, Undecided, clock_of
from tpopt.optimizer.memory_plan import enforce as enforce_memory
from tpopt.optimizer.report import TABLE_LIMIT
from tpopt.optimizer.result import Request, Status, objective_key
from tpopt.optimizer.space import FAMILIES, VARS, Space, Table, chance_on, rebuilt_tables

OWN_SPACES = 2  # changed scenarios whose own tables a context keeps (each as large as a solve's)
SHARED_SPACES = 8  # spaces sharing the base tables a context keeps (each with its own layout evaluations)


class _Empty(Enum):
    """The type of :data:`EMPTY`."""

    EMPTY = "empty"


EMPTY: Final = _Empty.EMPTY  # a narrowed search space without any point (see Context.narrowed)


# ---------------------------------------------------------------------------------------------
# exact best plan of a (modified) scenario


@dataclass
class Context:
    """The request being explained: scenario, backend, request, enforced families, solve counter.

    ``raw`` (the scenario's raw tables, overrides applied) and ``catalog`` let the accelerator
    relaxation rebuild the scenario for any catalog accelerator with the file's own assumptions.
    """

    sc: Scenario
    backend: Solver = field(default_factory=lambda: resolve(DEFAULT))  # resolved once, by :meth:`of`
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
    def of(cls, sc: Scenario, backend: str | Solver, req: Request, enforced: Iterable[str] | None = None,
           raw: dict[str, Any] | None = None, catalog: Catalog | None = None) -> Context:
        enf = req.enforced(FAMILIES) if enforced is None else frozenset(enforced)
        return cls(sc=sc, backend=resolve(backend), req=req, enforced=enf, raw=raw, catalog=catalog)

    def backend_for(self, space: Space) -> Solver:
        """Enumeration for small spaces (exact and fastest there), else the chosen solver."""
        if tabulated(space):
            return resolve(EXHAUSTIVE)
        return self.backend.with_model()

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
    space.undefer_chance()  # bounds for every cap: the chance table's own, not a solve's deferred bound
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
    for family_ok in bounds.allowed_in(enforce, sc).values():
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


Figure = Callable[[NDArray[Any], NDArray[Any]], NDArray[Any]]
"""Per plan (or per layout, from its bounds): a figure of the finish and cost arrays at today's inputs."""


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
