"""The relaxations of money: the budget, the card price, another accelerator; and the cost floors that skip them.

:func:`cost_floor` and :func:`compute_cost_floor` bound the cost of every plan from below (the compute alone),
so a question whose budget is below the floor is answered without a solve (:func:`over_budget_at`). Tests switch
the floors off by patching ``compute_cost_floor`` and ``over_budget_at`` on this module (:mod:`.relax` calls
``cost.over_budget_at``).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import build_scenario, with_overrides
from tpopt.errors import InputError
from tpopt.models import families as F
from tpopt.models import terms as T
from tpopt.models.arch import gemm_params
from tpopt.models.plan import Scenario, System
from tpopt.optimizer.decompose import HUB, HUB_RULES, _reduced
from tpopt.optimizer.explain import context
from tpopt.optimizer.explain.context import Context, on_demand, tabulated
from tpopt.optimizer.explain.inputs import (
    PARAMS,
    Relaxation,
    _applies,
    _cannot,
    _relaxation,
    _settle,
    with_card_price_scale,
    with_max_cost,
)
from tpopt.optimizer.space import VARS, Space, cards_of, reduce_to

# families that depend on the model and the batch only, whatever the hardware
MODEL_FAMILIES = F.MODEL_FAMILIES


def relax_max_cost(ctx: Context, core: list[str] | None = None) -> Relaxation | None:
    """Required budget C* = min cost over plans meeting every other family (budget.cost freed)."""
    sc = ctx.sc
    if sc.cost.max_cost is None or F.BUDGET not in ctx.enforced:
        return None
    p = PARAMS["max_cost"]
    cap = F.limit(F.BUDGET, sc)
    method = "min cost with budget.cost relaxed"
    cheapest = ctx.best(objective="cost", drop=[F.BUDGET])
    if cheapest is None:
        return _cannot(p, cap, "no plan meets the other constraints at any cost", method, core)
    exact = cheapest.metrics["cost"]
    value, ev, apply = _settle(ctx, p, exact, lambda s: with_max_cost(sc, s))
    if ev is None:
        return _cannot(p, cap, "could not be confirmed by re-solving", method, core)
    r = _relaxation(p, cap, required=value, required_exact=exact, helps=True, plan=ev, apply=apply,
                    method=method)
    r.unit = cheapest.metrics["cost_unit"]
    return r


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
    budget = F.limit(F.BUDGET, sc)
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


def compute_card_seconds(sc: Scenario, name: str) -> float | None:
    """A lower bound on the card-seconds n x iterations x t_step of any plan of ``sc`` on accelerator ``name``:
    the weight GEMMs alone, 6 N_gemm D FLOPs, at the card's fastest matrix peak P times the highest efficiency
    its step model can reach (flat: the stated efficiency; per-operation: eta_max x the throughput scale, since
    every GEMM runs at most at eta_max of its peak): n I t >= W = 6 N_gemm D / (P eta) (bubbles, communication
    and the other terms of the step only add). None where the card states no peak or efficiency."""
    s = sc.systems[name]
    acc = s.acc
    peak = max(acc.peak_flops, acc.peak_fp16, acc.peak_fp8)
    eta = s.perf.gemm_efficiency * s.efficiency if s.perf is not None else s.efficiency
    if not (peak > 0 and eta > 0):
        return None
    return 6.0 * gemm_params(sc.model) * sc.task.tokens / (peak * eta)


def cost_floor(sc: Scenario, name: str) -> float | None:
    """A lower bound on the cost of any plan of ``sc`` on accelerator ``name``: the card-seconds floor W
    (:func:`compute_card_seconds`) priced per card-hour: C >= W / 3600 x price (overheads, reserved days and
    NICs only add). None without a price."""
    price = sc.systems[name].price_card_hour
    if price is None:
        return None
    w = compute_card_seconds(sc, name)
    return None if w is None else w / 3600.0 * price


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
    ok = cards_of(**{v: np.asarray(dom[v])[grid[i]] for i, v in enumerate(HUB)}) <= F.limit(F.CARDS, sc)
    for f in HUB_RULES:
        ok &= np.broadcast_to(_reduced(space, F.ok_table(f), np.max), n).reshape(-1) > 0.5
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
        space = context.borrowed(base, sc) or Space.from_scenario(sc)
    except InputError:
        return False
    if tabulated(space) or on_demand(space, ctx.req):
        return False
    return compute_cost_floor(space, floor=True) > F.limit(F.BUDGET, ctx.sc)


def option_flags(sc: Scenario, ev: Any) -> dict[str, Any]:
    """What a suggested card rests on, for the line that suggests it: ``priors_only`` (no run fitted on the
    card, tpopt.models.terms.evidence_of), ``illustrative_price`` (a catalog price that is no market quote),
    and the plan's own step-time ``sigma``."""
    from tpopt.optimizer.footing import price  # lazy: start-up time (explain only)

    p = ev.plan
    e = T.evidence_of(sc, p.accelerator, float(p.cards), float(p.ep))
    return {"priors_only": e["card"] == "prior", "illustrative_price": bool(price(sc, p.accelerator)["illustrative"]),
            "sigma": e["sigma"]}


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
            if floor is not None and floor > F.limit(F.BUDGET, sc):
                ev, entry["note"] = None, (f"over the budget without a solve: the weight GEMMs alone at the card's "
                                           f"peak cost at least {floor:,.0f}")
            elif floor is not None and floor_enforced(ctx) and not tabulated(space := ctx.card_space(sc, name)) \
                    and not on_demand(space, ctx.req):
                # the compute floor first where the compute table is still to build (a card the base space
                # does not search); the pipeline's lower bound only where the floor leaves the card in: its
                # table serves the card's solve
                cheap = not any(k in dict.keys(space.tables) for k in ("time.compute", "time.compute.lo"))
                least = compute_cost_floor(space, floor=True) if cheap else -math.inf
                if least <= F.limit(F.BUDGET, sc):
                    least = compute_cost_floor(space)
                if least > F.limit(F.BUDGET, sc):
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
                          "finish_days": ev.metrics["finish_days"], "plan": ev.plan_dict(), "_ev": ev,
                          **option_flags(sc, ev)})
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
