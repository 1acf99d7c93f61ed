"""3. A given plan (:func:`explain_plan`): what it violates and by how much, or, when it is feasible, what stops one
host fewer (:func:`fewer_hosts`) and whether a cheaper plan exists; and the worth of one unit of each main input
at the optimum (:func:`sensitivities`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import replace
from typing import Any

from tpopt.errors import InputError
from tpopt.models import families as F
from tpopt.models.evaluate import ConstraintCheck, Evaluation, at_plan_batch, evaluate
from tpopt.models.plan import Plan, Scenario
from tpopt.models.units import DAY, GIB
from tpopt.optimizer import footing
from tpopt.optimizer.backends import Solver
from tpopt.optimizer.backends.verify import feasible_for
from tpopt.optimizer.explain.context import Context
from tpopt.optimizer.explain.inputs import with_deadline, with_max_cards
from tpopt.optimizer.limits import Undecided
from tpopt.optimizer.report import binding_families, make_oracle
from tpopt.optimizer.result import Request, objective_value, plan_summary
from tpopt.optimizer.space import STRUCTURAL, Space

REL = 1e-9


# ---------------------------------------------------------------------------------------------
# a given plan


def violation(c: ConstraintCheck) -> dict[str, Any]:
    """A violated check: excess = value - limit (in the family's unit) and excess / limit."""
    excess = c.value - c.limit
    return {**c.quoted(), "excess": excess,
            "excess_fraction": excess / abs(c.limit) if c.limit not in (0, float("inf")) else None,
            "rule": c.doc}


def explain_plan(sc: Scenario, plan: Plan, backend: str | Solver = "cpsat", req: Request | None = None,
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
                           "footing": footing.footing(sc, ev.plan_dict(), ev.metrics["step_s"], metrics=ev.metrics),
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
            oracle = make_oracle(space, ctx.backend, req)
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


def sensitivities(sc: Scenario, backend: str | Solver = "cpsat", req: Request | None = None, *,
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
    dl, res = F.limit(F.DEADLINE, sc), sc.task.reserved_s
    mem0 = min(F.limit(F.MEMORY_PER_CARD, sc, k) for k in sc.systems)
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
