"""Reading a sweep's rows: the Pareto marking, the front, the per-accelerator summary, and the data of
the cost/finish plot and of the finish-time breakdown bars."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, Protocol

from tpopt.models.evaluate import evaluate
from tpopt.models.market import Power
from tpopt.models.units import DAY, fmt_count
from tpopt.optimizer import backends
from tpopt.optimizer.outer import solve
from tpopt.optimizer.result import Request
from tpopt.optimizer.space import FAMILIES, STRUCTURAL
from tpopt.optimizer.sweep.rows import FEASIBLE, NO_ANSWER, PLAN_COLUMNS, Point, Row, case_of, make_row
from tpopt.optimizer.sweep.spec import AUTO_TABLE_LIMIT, SWEPT_FAMILIES, SweepSpec
from tpopt.optimizer.sweep.tasks import _payload, group_scenario, space_size


class Answered(Protocol):
    """What the plot and the breakdown read of a sweep's answer (:class:`tpopt.optimizer.sweep.run.SweepResult`):
    its specification, its rows, and their Pareto front."""

    spec: SweepSpec
    rows: list[Row]

    def front(self) -> list[Row]: ...


Case = tuple[Any, ...]  # the table inputs of a case (tpopt.optimizer.sweep.rows.case_of)


def mark_pareto(rows: list[Row]) -> None:
    """Set ``pareto`` on every row: True iff its (cost, finish) is not dominated within its case."""
    by_case: dict[Case, list[Row]] = {}
    for r in rows:
        r["pareto"] = False
        if r["status"] in FEASIBLE and r["cost"] is not None:
            by_case.setdefault(case_of(r), []).append(r)
    for members in by_case.values():
        pairs = sorted({(r["finish_days"], r["cost"]) for r in members})
        front: set[tuple[float, float]] = set()
        best = math.inf
        for fin, cost in pairs:
            if cost < best:
                front.add((fin, cost))
                best = cost
        for r in members:
            r["pareto"] = (r["finish_days"], r["cost"]) in front


def _plan_id(row: Row) -> tuple[Any, ...]:
    return (case_of(row), row["accelerator"]) + tuple(row[c] for c in PLAN_COLUMNS) + (row["cost"],
                                                                                       row["finish_days"])


def front_plans(rows: list[Row]) -> list[Row]:
    """The Pareto-optimal plans (one entry per distinct plan), fastest first, with the deadlines
    for which each one is the optimum."""
    plans: dict[tuple[Any, ...], Row] = {}
    for r in rows:
        if not r["pareto"]:
            continue
        pid = _plan_id(r)
        e = plans.get(pid)
        if e is None:
            e = plans[pid] = {k: r[k] for k in ("accelerator", "tokens", "efficiency", "card_hour", "reserved_days",
                                                "seq_len", *PLAN_COLUMNS, "cost", "cost_unit", "finish_days",
                                                "train_days", "overhead_days", "step_s", "memory_per_card_gib",
                                                "overhead_fraction")}
            e["efficiency"] = e["efficiency"] or None  # 0 in rows of files written before: the per-op model
            e["deadlines"] = []
            e["points"] = 0
        e["deadlines"].append(r["deadline_days"])
        e["points"] += 1
    out = []
    for e in plans.values():
        ds = sorted(set(e.pop("deadlines")))
        e["deadline_min_days"], e["deadline_max_days"] = ds[0], ds[-1]
        out.append(e)
    out.sort(key=lambda e: (e["tokens"], e["efficiency"] or 0.0, -1 if e["card_hour"] is None else e["card_hour"],
                            e["reserved_days"], e["finish_days"], e["cost"], e["accelerator"]))
    return out


def summarize(rows: list[Row], hw: Iterable[str] = ()) -> list[Row]:
    """Per accelerator (and case): points; feasible, infeasible (proven), unknown (time limit, no
    answer), error and unproven (time limit, plan not proven optimal) counts; earliest feasible
    deadline, cheapest and fastest plans, the distinct card counts chosen."""
    order = {a: i for i, a in enumerate(hw)}
    groups: dict[tuple[Case, str], list[Row]] = {}
    for r in rows:
        groups.setdefault((case_of(r), r["accelerator"]), []).append(r)
    out = []
    for (case, acc), members in groups.items():
        feas = [r for r in members if r["status"] in FEASIBLE]
        inf = [r for r in members if r["status"] == "infeasible"]
        e = {"accelerator": acc, "tokens": case[0], "efficiency": case[1], "card_hour": case[2],
             "reserved_days": case[3], "seq_len": case[4], "points": len(members), "feasible": len(feas),
             "infeasible": len(inf),
             "unknown": sum(r["status"] == "unknown" for r in members),
             "error": sum(r["status"] == "error" for r in members),
             "unproven": sum(r["status"] == "feasible" for r in members),
             "earliest_deadline_days": min((r["deadline_days"] for r in feas), default=None),
             "cheapest": None, "fastest": None, "cards_chosen": sorted({r["cards"] for r in feas}),
             "on_front": sum(1 for r in members if r["pareto"]),
             "fastest_possible_days": min((r["fastest_days"] for r in inf if r["fastest_days"] is not None),
                                          default=None)}
        if feas:
            c = min(feas, key=lambda r: (r["cost"], r["finish_days"]))
            f = min(feas, key=lambda r: (r["finish_days"], r["cost"]))
            e["cheapest"] = {k: c[k] for k in ("cards", "cost", "finish_days", "deadline_days")}
            e["fastest"] = {k: f[k] for k in ("cards", "cost", "finish_days", "deadline_days")}
            e["fastest_possible_days"] = f["finish_days"]
        out.append(e)
    out.sort(key=lambda e: (e["tokens"], e["efficiency"] or 0.0, -1 if e["card_hour"] is None else e["card_hour"],
                            e["reserved_days"], order.get(e["accelerator"], len(order)), e["accelerator"]))
    return out


def case_label(case: Case, spec: SweepSpec) -> str:
    """A short label of a case's swept table inputs ('' when only one case exists)."""
    tokens, eff, price, reserved, seq = case
    parts = []
    if len(spec.values["tokens"]) > 1:
        parts.append(f"{fmt_count(tokens)} tok")
    if len(spec.values["efficiency"]) > 1:
        parts.append(f"MFU {eff * 100:g}%" if eff else "per-op model")
    if len(spec.values["card_hour"]) > 1:
        parts.append("catalog $" if price is None else f"${price:g}/h")
    if len(spec.values["reserved"]) > 1:
        parts.append(f"res {reserved:g}d")
    if len(spec.values["seq_len"]) > 1 and seq is not None:
        parts.append(f"seq {seq:,}")
    return ", ".join(parts)


def _case_order(case: Case) -> tuple[tuple[bool, Any], ...]:
    return tuple((x is None, x) for x in case)


def plot_series(result: Answered) -> dict[str, Any]:
    """Data for the cost/finish plot: one series per accelerator (and case) with its distinct optimal
    plans, its proven-infeasible deadlines and, apart, the deadlines without an answer (time limit or
    error), and one Pareto front per case."""
    spec = result.spec
    series = []
    by: dict[tuple[Case, str], list[Row]] = {}
    for r in result.rows:
        by.setdefault((case_of(r), r["accelerator"]), []).append(r)
    order = {a: i for i, a in enumerate(spec.hw)}
    for (case, acc) in sorted(by, key=lambda k: (_case_order(k[0]), order.get(k[1], 99))):
        members = by[(case, acc)]
        plans: dict[tuple[float, float], int] = {}
        for r in members:
            if r["status"] in FEASIBLE:
                plans.setdefault((r["finish_days"], r["cost"]), r["cards"])
        label = acc + (f" ({case_label(case, spec)})" if case_label(case, spec) else "")
        series.append({
            "accelerator": acc, "label": label,
            "plans": [{"finish_days": f, "cost": c, "cards": n} for (f, c), n in sorted(plans.items())],
            "infeasible_deadlines": sorted({r["deadline_days"] for r in members if r["status"] == "infeasible"}),
            "unknown_deadlines": sorted({r["deadline_days"] for r in members if r["status"] in NO_ANSWER}),
            "deadlines": sorted({r["deadline_days"] for r in members}),
            "fastest_possible_days": min([r["finish_days"] for r in members if r["status"] in FEASIBLE]
                                         + [r["fastest_days"] for r in members if r["fastest_days"] is not None],
                                         default=None),
        })
    fronts: dict[Case, list[Row]] = {}
    for e in result.front():
        case = case_of(e)
        fronts.setdefault(case, []).append({"finish_days": e["finish_days"], "cost": e["cost"], "cards": e["cards"],
                                            "accelerator": e["accelerator"]})
    front_list: list[Row] = [
        {"label": case_label(c, spec), "points": sorted(pts, key=lambda p: (p["finish_days"], p["cost"]))}
        for c, pts in sorted(fronts.items(), key=lambda kv: _case_order(kv[0]))]
    unit = next((r["cost_unit"] for r in result.rows if r["cost_unit"]), "USD")
    return {"series": series, "fronts": front_list, "cost_unit": unit,
            "title": f"{spec.name}: cost vs finish time ({', '.join(spec.swept()) or 'one point'} swept)",
            "infeasible_points": sum(r["status"] == "infeasible" for r in result.rows),
            "unknown_points": sum(r["status"] in NO_ANSWER for r in result.rows)}


def _bar(label: str, row_like: Row, note: str = "") -> Row:
    return {"label": label, "accelerator": row_like["accelerator"], "cards": row_like["cards"],
            "train_days": row_like["train_days"], "overhead_days": row_like["overhead_days"],
            "reserved_days": row_like["reserved_days"], "finish_days": row_like["finish_days"],
            "cost": row_like["cost"], "note": note}


def breakdown_bars(result: Answered, cards: Iterable[int] | None = None) -> tuple[list[Row], list[str]]:
    """Finish-time breakdown bars (base training, checkpoint/failure overhead, reserved days).

    Without ``cards``: the front plans. With ``cards``: for every swept accelerator (and case) the
    cheapest plan with exactly that many cards that satisfies every constraint except the deadline,
    card cap and budget (the chapter's figure 10-44 compares 32 and 48 cards against 30 days).
    Returns (bars, notes about card counts with no valid plan).
    """
    spec = result.spec
    bars: list[Row] = []
    if not cards:
        for e in result.front():
            rng = (f"{e['deadline_min_days']:g} d" if e["deadline_min_days"] == e["deadline_max_days"]
                   else f"{e['deadline_min_days']:g}-{e['deadline_max_days']:g} d")
            clabel = case_label(case_of(e), spec)
            bars.append(_bar(f"{e['accelerator']} x {e['cards']}" + (f" ({clabel})" if clabel else ""), e,
                             note=f"optimal for deadlines {rng}"))
        return bars, []
    payload = _payload(spec)
    enforce = frozenset(f for f in FAMILIES if f not in SWEPT_FAMILIES)
    cases = sorted({case_of(r) for r in result.rows}, key=lambda c: tuple((x is None, x) for x in c))
    missing: dict[tuple[str, int], int] = {}
    deadline_s = spec.plot_deadline_days * DAY
    for case in cases:
        tokens, eff, price, reserved, seq = case
        clabel = case_label(case, spec)
        for acc in spec.hw:
            p = Point(acc, deadline_s, reserved * DAY, tokens, eff, 10**9, price, None, None, seq)
            sc = group_scenario(payload, p, deadline_s)
            small = space_size(spec, acc) <= AUTO_TABLE_LIMIT
            for n in cards:
                res = solve(sc, backends.EXHAUSTIVE if small else backends.DEFAULT,
                            Request(objective="cost", enforce=enforce, cards=(n,), time_limit=spec.time_limit))
                label = f"{acc} x {n}" + (f" ({clabel})" if clabel else "")
                if not res.feasible:
                    missing[(acc, n)] = missing.get((acc, n), 0) + 1
                    continue
                best = res.best
                assert best is not None  # feasible: a best plan
                ev = evaluate(sc, best.plan)
                row = make_row(p, "optimal", spec.fingerprint, backends.EXHAUSTIVE, ev=ev)
                bars.append(_bar(label, row))
    notes = [f"{acc} x {n}: no valid plan with exactly {n} cards" + (f" (in {k} cases)" if len(cases) > 1 else "")
             for (acc, n), k in missing.items()]
    return bars, notes



# ---------------------------------------------------------------------------------------------
# what pins a collapsed front (issue 37 item 3)


def collapsed(result: Answered) -> bool:
    """True when the front holds one plan per case although the sweep asked more than one point per case."""
    rows = [r for r in result.rows if r["status"] in FEASIBLE]
    cases = {case_of(r) for r in rows}
    return bool(rows) and len(result.front()) == len(cases) and len(result.rows) > len(cases)


def front_pins(result: Answered) -> dict[str, Any] | None:
    """What pins a collapsed front (:func:`collapsed`; None otherwise, or when no family does): for each swept
    accelerator of the front plan's case, the fastest plan with the swept families (deadline, budget, cards)
    not enforced, and again with each other non-structural family dropped in turn; a family pins the front when
    dropping it alone gives a faster plan on every accelerator that has one (the binding family common to the
    points). Returns the families, the fastest finish with them and without the first, per accelerator.
    Only where every swept accelerator's space is small enough to enumerate (:data:`AUTO_TABLE_LIMIT` plans):
    the re-solves are one more solve per family and accelerator, outside the sweep's memory plan, so a larger
    space is not re-solved (None: the sweep then says nothing of what pins it)."""
    if not collapsed(result):
        return None
    spec = result.spec
    if any(space_size(spec, acc) > AUTO_TABLE_LIMIT for acc in spec.hw):
        return None
    top = result.front()[0]
    tokens, eff, price, reserved, seq = case_of(top)
    enforce = frozenset(f for f in FAMILIES if f not in SWEPT_FAMILIES)
    candidates = [f for f in FAMILIES if f in enforce and f not in STRUCTURAL]
    payload = _payload(spec)
    deadline_s = spec.plot_deadline_days * DAY
    pins: set[str] | None = None
    fastest: dict[str, dict[str, float]] = {}
    for acc in spec.hw:
        p = Point(acc, deadline_s, reserved * DAY, tokens, eff, 10**9, price, None, None, seq)
        sc = group_scenario(payload, p, deadline_s)
        solver = backends.EXHAUSTIVE

        def finish(drop: frozenset[str], sc: Any = sc, solver: str = solver) -> float:
            r = solve(sc, solver, Request(objective="time", enforce=enforce - drop, time_limit=spec.time_limit))
            return float(r.best.metrics["finish_days"]) if r.best is not None else math.inf

        base = finish(frozenset())
        if not math.isfinite(base):
            continue
        mine = {f: finish(frozenset({f})) for f in candidates}
        binds = {f for f, t in mine.items() if t < base * (1 - 1e-9)}
        pins = binds if pins is None else pins & binds
        fastest[acc] = {"with": base, **{f"without {f}": t for f, t in mine.items() if f in binds}}
    if not pins:
        return None
    order = [f for f in candidates if f in pins]
    return {"families": order, "fastest_days": {a: {"with": v["with"], "without": v[f"without {order[0]}"]}
                                                for a, v in fastest.items()}}


# ---------------------------------------------------------------------------------------------
# energy against cost (tpopt sweep --pareto energy)


def plan_energy_mwh(row: Row, power: Power, pue: float) -> float:
    """Energy of a row's plan at the site, MWh: PUE x (cards x training W + hosts x host overhead W) x finish
    s / 3.6e9, at training power for the whole finish time (an upper bound, as the market reports it)."""
    watts = pue * (row["cards"] * power.training_w + row["hosts"] * power.host_overhead_w)
    return float(watts * row["finish_days"] * DAY / 3.6e9)


def energy_front(rows: list[Row], power: dict[str, Power], pue: float) -> tuple[list[Row], list[str]]:
    """The swept points' distinct plans with energy (MWh) and cost, and ``front`` True iff no other plan of
    the case has energy <= and cost <= (one strictly less): exact over the swept points, per case. Returns
    (plans, accelerators without power figures, whose plans carry energy None and stay off the front)."""
    plans: dict[tuple[Any, ...], Row] = {}
    unknown: list[str] = []
    for r in rows:
        if r["status"] not in FEASIBLE or r["cost"] is None:
            continue
        pid = _plan_id(r)
        e = plans.get(pid)
        if e is None:
            p = power.get(r["accelerator"])
            if p is None and r["accelerator"] not in unknown:
                unknown.append(r["accelerator"])
            e = plans[pid] = {"case": case_of(r), "accelerator": r["accelerator"],
                              **{k: r[k] for k in ("cards", "hosts", "tp", "pp", "dp", "cost", "cost_unit",
                                                   "finish_days")},
                              "energy_mwh": None if p is None else plan_energy_mwh(r, p, pue), "deadlines": []}
        e["deadlines"].append(r["deadline_days"])
    by_case: dict[Case, list[Row]] = {}
    for e in plans.values():
        ds = sorted(set(e.pop("deadlines")))
        e["deadline_min_days"], e["deadline_max_days"] = ds[0], ds[-1]
        e["front"] = False
        if e["energy_mwh"] is not None:
            by_case.setdefault(e["case"], []).append(e)
    for members in by_case.values():
        best = math.inf
        front: set[tuple[float, float]] = set()
        for energy, cost in sorted({(e["energy_mwh"], e["cost"]) for e in members}):
            if cost < best:
                front.add((energy, cost))
                best = cost
        for e in members:
            e["front"] = (e["energy_mwh"], e["cost"]) in front
    out = sorted(plans.values(), key=lambda e: (_case_order(e["case"]), e["energy_mwh"] is None,
                                                e["energy_mwh"] or 0.0, e["cost"], e["accelerator"], e["cards"]))
    for e in out:
        e["case"] = list(e["case"])
    return out, unknown
