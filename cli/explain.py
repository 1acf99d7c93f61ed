"""`tpopt explain` and the infeasibility report of `tpopt solve`.

Presentation only: the numbers come from :mod:`tpopt.optimizer.explain`.

    tpopt explain --scenario S [--max-cards 32 ...]          the request: optimum and what binds it,
                                                           or (no plan) the conflict and minimal relaxations
    tpopt explain --scenario S --cards 32 [--zero 3 ...]     one plan: what it violates, or what limits it
    tpopt explain ... --sensitivity                        + objective change per unit of each main input

Exit codes: 0 feasible, 2 bad input, 3 infeasible (the request, or the given plan), 4 no answer in time.
"""

from __future__ import annotations

import click

from tpopt.cli.common import (
    EXIT_INFEASIBLE,
    dump_json,
    EXIT_UNKNOWN,
    handle_errors,
    load_scenario_from,
    overrides_from,
    plan_from,
    plan_options,
    scenario_options,
)
from tpopt.cli.solve import request_from, solve_options


# command-line flag that sets each relaxable input (None: only the scenario file can)
FLAGS = {"deadline": "--deadline", "reserved": "--reserved", "tokens": "--tokens", "efficiency": "--efficiency",
         "max_cards": "--max-cards", "usable_memory": "--usable-memory", "accelerator": "--hw",
         "max_cost": "--max-cost", "nic_bandwidth": None}
PLAN_FLAGS = ("zero_stage", "tp", "pp", "micro_batch", "recompute", "offload", "pipe_schedule", "save_interval",
              "save_mode", "nics_per_host")


# ---------------------------------------------------------------------------------------------
# formatting helpers


def _num(x, digits: int = 2) -> str:
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    return f"{x:,.{digits}f}"


def _qty(x, unit: str, digits: int = 2) -> str:
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    if unit == "cards":
        return f"{x:,.0f} cards"
    if unit == "B tokens":
        return f"{x:,.{digits}f}B tokens"
    if unit in ("USD", "card-hours"):
        return f"{x:,.2f} {unit}"
    sep = "" if unit in ("%",) else " "
    return f"{x:,.{digits}f}{sep}{unit}" if unit else f"{x:,.{digits}f}"


def _plan_short(p: dict) -> str:
    return (f"{p['accelerator']} x {p['cards']} (ZeRO-{p['zero_stage']}, TP {p['tp']}, PP {p['pp']}, "
            f"mb {p['micro_batch']})")


def _money(x: float, unit: str) -> str:
    return f"{x:,.0f} {unit}"


def _objective_text(value: float, objective: str, unit: str) -> str:
    return _money(value, unit) if objective == "cost" else f"{value:.2f} d"


def _toml_value(v) -> str:
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return str(v)


def _apply_flag(r: dict) -> str:
    """How to apply a relaxation: the command-line flag when one override does it, else the scenario
    edit (e.g. a per-card key inside [hardware.<name>])."""
    apply = r.get("apply")
    if not apply or r.get("required") is None:
        return ""
    flag = FLAGS.get(r["parameter"])
    if r["parameter"] == "accelerator":
        return f"{flag} {r['required']}"
    if flag and len(apply) == 1:
        return f"{flag} {next(iter(apply.values()))}"
    edits = []
    for key, value in apply.items():
        table, _, k = key.partition(".")
        if isinstance(value, dict):
            edits += [f"[{table}.{k}] {kk} = {_toml_value(vv)}" for kk, vv in value.items()
                      if kk in ("usable_memory", "nic")]
        elif len(apply) == 1:
            edits.append(f"[{table}] {k} = {_toml_value(value)}")
    return "scenario: " + "; ".join(edits)


# ---------------------------------------------------------------------------------------------
# infeasible request


def conflict_lines(detail: list[dict]) -> list[str]:
    if not detail:
        return ["Conflict: no plan of the requested card counts exists in the search space, whatever the "
                "constraints."]
    n = len(detail)
    head = ("Conflict: this constraint alone admits no plan:" if n == 1 else
            f"Conflict: these {n} constraints cannot hold together (dropping any one of them admits a plan):")
    lines = [head]
    width = max(len(d["name"]) for d in detail)
    for d in detail:
        lines.append(f"  {d['name']:<{width}}  {d['rule']}")
        if "value" in d:
            lead = f"{d['closest']} meeting the others" if n > 1 else f"even {d['closest']}"
            lines.append(f"  {'':<{width}}  {lead}, {_plan_short(d['plan'])}, has "
                         f"{_qty(d['value'], d['unit'])} against a limit of {_qty(d['limit'], d['unit'])}")
    return lines


def _needed(r: dict) -> str:
    if r["helps"] is None:
        return f"undecided: {r.get('note', '')}"
    if not r["helps"]:
        why = r.get("note", "")
        if r.get("blocked_by"):
            b = r["blocked_by"]
            why = f"{' + '.join(b)} still conflict{'s' if len(b) == 1 else ''} whatever its value; " + why
        return f"cannot help: {why}"
    if r["parameter"] == "accelerator":
        return f"= {r['required']}"
    exact = ""
    if r.get("required_exact") is not None and r["parameter"] not in ("max_cards",):
        exact = f" (threshold {_num(r['required_exact'], 3)})"
    return f"{r['direction']} {_qty(r['required'], r['unit'])}{exact}"


def relaxation_lines(rels: list[dict]) -> list[str]:
    if not rels:
        return []
    lines = ["Smallest single changes that make the request feasible (each alone, everything else unchanged;",
             "values rounded towards feasibility and re-solved):"]
    width = max(len(r["parameter"]) for r in rels)
    for r in rels:
        now = _qty(r["current"], r["unit"]) if r["parameter"] != "accelerator" else r["current"]
        lines.append(f"  {r['parameter']:<{width}}  now {now}: {_needed(r)}")
        if r.get("helps") and r.get("plan"):
            flag = _apply_flag(r)
            lines.append(f"  {'':<{width}}  -> {_plan_short(r['plan'])}, {r['finish_days']:.2f} d, "
                         f"{_money(r['cost'], r['cost_unit'])}" + (f"   [{flag}]" if flag else ""))
        if r.get("helps") and r.get("note"):
            lines.append(f"  {'':<{width}}  ({r['note']})")
        if r["parameter"] == "accelerator" and r.get("options"):
            opts = []
            for o in r["options"]:
                tag = " (current)" if o.get("current") else ""
                if o["feasible"]:
                    opts.append(f"{o['accelerator']}{tag} {_money(o['cost'], o['cost_unit'])} "
                                f"({o['plan']['cards']} cards, {o['finish_days']:.1f} d)")
                else:
                    opts.append(f"{o['accelerator']}{tag} no plan")
            lines.append(f"  {'':<{width}}  catalog: " + "; ".join(opts))
    return lines


def _raw_and_catalog(kw: dict):
    """The scenario's raw tables with this command's overrides, and the catalog (for the
    accelerator relaxation)."""
    from tpopt.catalogs import load_catalog
    from tpopt.catalogs.scenario import read_scenario_file, with_overrides

    if not kw.get("scenario_path"):
        return None, None
    ov = overrides_from(kw)
    ov["cost.max_cost"] = kw.get("max_cost")
    raw = with_overrides(read_scenario_file(kw["scenario_path"]), ov)
    return raw, load_catalog(kw.get("catalog_dirs") or ())


def infeasible_report(sc, space, result, req, kw, as_json, out: dict):
    """Conflict and minimal relaxations of a request without a feasible plan (JSON or text)."""
    from tpopt.optimizer.explain import Context, conflict_detail, minimal_conflict, relaxations

    command = kw.get("_command", "solve")
    proven = result.status.value == "infeasible"
    out["conflict"], out["conflict_detail"], out["relaxations"] = [], [], []
    if proven:
        from tpopt.optimizer.limits import TimeLimitReached, Undecided

        raw, catalog = _raw_and_catalog(kw)
        ctx = Context.of(sc, kw.get("solver", "cpsat"), req, result.enforced, raw, catalog)
        try:
            core = minimal_conflict(space, ctx.backend, req, ctx.enforced, ctx=ctx) or []
            out["conflict"] = core
            out["conflict_detail"] = conflict_detail(ctx, core)
        except (Undecided, TimeLimitReached):  # the verdict stands; the explanation is cut short, and says so
            core = []
            out["conflict_status"] = "time limit reached"
        rels = relaxations(sc, ctx.backend, req, raw=raw, catalog=catalog, core=core, enforced=ctx.enforced)
        out["relaxations"] = [r.as_dict() for r in rels]
    if as_json:
        click.echo(dump_json(out), nl=False)
        return
    lines = [f"tpopt {command}: {sc.name}: no feasible plan ({result.status.value})."]
    if not proven:
        where = f" while {result.solver.limit_phase}" if result.solver.limit_phase else ""
        lines.append(f"Time limit reached{where} before a plan was found or proven not to exist; "
                     "raise --time-limit.")
    else:
        lines += [""] + (["Conflict: not isolated (time limit reached before a conflict was found)."]
                         if out.get("conflict_status") else conflict_lines(out["conflict_detail"]))
        rl = relaxation_lines(out["relaxations"])
        if rl:
            lines += [""] + rl
    click.echo("\n".join(lines))


# ---------------------------------------------------------------------------------------------
# a feasible request, a given plan, sensitivities


def sensitivity_lines(rows: list[dict]) -> list[str]:
    """Text for :func:`tpopt.optimizer.explain.sensitivities` rows (also used by `tpopt solve`)."""
    if not rows:
        return []
    obj, unit = rows[0]["objective"], rows[0]["objective_unit"]
    lines = [f"Sensitivities of the optimum (re-solved; objective {obj}, base "
             f"{_objective_text(rows[0]['base'], obj, unit)}):"]
    width = max(len(r["change"]) for r in rows)
    for r in rows:
        move = f"{_num(r['from'])} -> {_num(r['to'])} {r['unit']}" if r["unit"] != "cards" else \
            f"max {r['to']} cards (optimum uses {r['from']})"
        if r["status"] != "optimal":
            lines.append(f"  {r['change']:<{width}}  {move}: {r['status']}")
            continue
        d = r["delta"]
        dtxt = f"{d:+,.0f} {unit}" if obj == "cost" else f"{d:+.2f} d"
        pct = f" ({r['delta_fraction'] * 100:+.1f} %)" if r.get("delta_fraction") is not None else ""
        lines.append(f"  {r['change']:<{width}}  {move}: {_objective_text(r['value'], obj, unit)}, "
                     f"delta {dtxt}{pct}; {_plan_short(r['plan'])}")
    return lines


def sensitivity_text(rows: list[dict]) -> str:
    return "\n".join(sensitivity_lines(rows)) + ("\n" if rows else "")


def _violation_line(v: dict, width: int) -> str:
    pct = f", {v['excess_fraction'] * 100:+.1f} %" if v.get("excess_fraction") is not None else ""
    return (f"  {v['name']:<{width}}  {_qty(v['value'], v['unit'])} against {_qty(v['limit'], v['unit'])} "
            f"(over by {_qty(v['excess'], v['unit'])}{pct}); rule: {v['rule']}")


def plan_lines(d: dict, sc) -> list[str]:
    from tpopt.cli.render import plan_line

    unit = d["cost_unit"]
    lines = [f"tpopt explain: {sc.name}: plan {plan_line(d['plan'])}",
             f"Cost {_money(d['cost'], unit)}, finish {d['finish_days']:.2f} d."]
    if d["violated"]:
        w = max(len(v["name"]) for v in d["violated"])
        lines += ["", f"Status: infeasible: violates {len(d['violated'])} constraint"
                      f"{'s' if len(d['violated']) != 1 else ''}:"]
        lines += [_violation_line(v, w) for v in d["violated"]]
    else:
        lines += ["", "Status: feasible."]
        if d["tightness"]:
            w = max(len(t["name"]) for t in d["tightness"])
            lines.append("Tightness (slack against the limit, tightest first):")
            for t in d["tightness"]:
                rel = f" ({t['relative_slack'] * 100:.1f} % of the limit)" if t["relative_slack"] is not None else ""
                tag = "  <- binds: one host fewer breaks it" if t["name"] in d["binding"] else ""
                lines.append(f"  {t['name']:<{w}}  {_qty(t['value'], t['unit'])} of {_qty(t['limit'], t['unit'])}, "
                             f"slack {_qty(t['slack'], t['unit'])}{rel}{tag}")
        for f in d.get("fewer_hosts", []):
            k = f"{f['hosts_fewer']} host{'s' if f['hosts_fewer'] != 1 else ''} fewer ({f['cards']} cards)"
            if not f.get("formable"):
                lines.append(f"{k}: not a valid plan ({f['reason']}).")
            elif f["feasible"]:
                lines.append(f"{k}: also feasible, {_money(f['plan']['cost'], f['plan']['cost_unit'])}, "
                             f"{f['plan']['finish_days']:.2f} d.")
            else:
                w = max(len(v["name"]) for v in f["violates"])
                lines.append(f"{k} would violate:")
                lines += [_violation_line(v, w) for v in f["violates"]]
    o = d["optimum"]
    lines.append("")
    if o["exists"] is None:
        lines.append(f"The optimum of the request: not decided ({o.get('undecided', 'time limit reached')}).")
    elif not o["exists"]:
        lines.append("The request has no feasible plan at all (run without --cards for the conflict and relaxations).")
    elif o.get("this_plan_is_optimal"):
        lines.append(f"This plan is optimal (minimising {d['objective']}).")
        for b in o.get("binding", []):
            lines.append(f"  binding {b['name']}: without it {_plan_short(b['plan_without'])} would reach "
                         f"{_objective_text(b['objective_without'], d['objective'], unit)}")
        for name in o.get("binding_undecided", []):
            lines.append(f"  {name}: not decided (time limit reached)")
    else:
        p = o["plan"]
        ch = o.get("change", 0.0)
        rel = f"{-ch * 100:.1f} % better than this plan" if ch < 0 else f"{ch * 100:.1f} % more than this plan"
        head = "A better plan exists" if d["status"] == "feasible" else "The best feasible plan"
        lines.append(f"{head} (minimising {d['objective']}): {_plan_short(p)}, "
                     f"{_money(p['cost'], p['cost_unit'])}, {p['finish_days']:.2f} d ({rel}).")
    return lines


def request_lines(d: dict, sc) -> list[str]:
    from tpopt.cli.render import plan_line

    unit = d["cost_unit"]
    lines = [f"tpopt explain: {sc.name}: feasible; the optimum (minimising {d['objective']}, status {d['status']}):",
             f"Plan: {plan_line(d['plan'])}",
             f"Cost {_money(d['cost'], unit)}, finish {d['finish_days']:.2f} d.", ""]
    if not d["binding"]:
        lines.append("Binding constraints: none (no single constraint holds the optimum where it is).")
    else:
        lines.append("Binding constraints (dropping any one alone admits a better plan):")
        for b in d["binding"]:
            v = b.get("violates", {})
            viol = (f"; it has {_qty(v['value'], v['unit'])} against {_qty(v['limit'], v['unit'])}"
                    if "value" in v else "")
            lines.append(f"  {b['name']}: without it {_plan_short(b['plan_without'])} would reach "
                         f"{_objective_text(b['objective_without'], d['objective'], unit)}{viol}")
    lines += [f"  {name}: not decided (time limit reached)" for name in d.get("binding_undecided", [])]
    if d["solver"].get("time_limit_reached"):
        from tpopt.cli.render import limit_line

        lines.insert(1, limit_line(d["solver"]))
    return lines


# ---------------------------------------------------------------------------------------------
# the command


@click.command()
@scenario_options
@solve_options
@plan_options(require_cards=False)
@click.option("--sensitivity", is_flag=True,
              help="Also re-solve the optimum with deadline +/-1 d, one host fewer, +1 GiB per card.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@handle_errors
def explain(sensitivity, as_json, **kw):
    """Explain a plan or a request: violated or binding constraints, conflicts, minimal relaxations.

    Without --cards the request as a whole: its optimum and what binds it, or, when no plan is
    feasible (exit 3), a minimal conflict and the smallest single change of each input that fixes it.
    With --cards (and other plan flags) one plan: what it violates (exit 3), or what limits it.

    \b
    Examples:
      tpopt explain --scenario examples/design-case.toml --max-cards 32
      tpopt explain --scenario examples/design-case.toml --cards 48 --sensitivity
    """
    from tpopt.errors import InputError
    from tpopt.optimizer.core import solve as run
    from tpopt.optimizer.explain import explain_plan, sensitivities
    from tpopt.optimizer.report import binding_families, make_oracle
    from tpopt.optimizer.result import Status
    from tpopt.optimizer.space import Space

    kw["_command"] = "explain"
    sc = load_scenario_from(kw, {"cost.max_cost": kw.get("max_cost")})
    req = request_from(kw)
    backend = kw["solver"]
    if kw.get("cards") is None:
        given = [k for k in PLAN_FLAGS if kw.get(k) is not None]
        if given:
            flag = {"zero_stage": "zero", "pipe_schedule": "schedule"}.get(given[0], given[0]).replace("_", "-")
            raise InputError(f"--{flag} describes a plan: give --cards too (or drop it to explain the request)")
        space = Space.from_scenario(sc)
        result = run(sc, backend, req, space=space)
        out = {"status": result.status.value, "objective": result.objective, "solver": result.solver.as_dict()}
        if not result.feasible:
            infeasible_report(sc, space, result, req, kw, as_json, out)
            raise SystemExit(EXIT_INFEASIBLE if result.status == Status.INFEASIBLE else EXIT_UNKNOWN)
        best = result.best
        oracle = make_oracle(space, backend, req)
        undecided: list[str] = []
        binds = binding_families(oracle, best, req.objective, set(result.enforced), undecided)
        out.update({"plan": best.plan_dict(), "cost": best.metrics["cost"], "cost_unit": best.metrics["cost_unit"],
                    "finish_days": best.metrics["finish_days"], "conflict": [], "relaxations": [],
                    "binding": [b.as_dict(best, req.objective) for b in binds], "binding_undecided": undecided})
        if sensitivity:
            out["sensitivities"] = sensitivities(sc, backend, req, base=best)
        lines = request_lines(out, sc)
        code = 0
    else:
        plan = plan_from(sc, kw)
        out = explain_plan(sc, plan, backend, req)
        if sensitivity:
            out["sensitivities"] = sensitivities(sc, backend, req)
        lines = plan_lines(out, sc)
        code = 0 if out["status"] == "feasible" else EXIT_INFEASIBLE
    if sensitivity:
        sl = sensitivity_lines(out["sensitivities"])
        lines += [""] + (sl or ["Sensitivities: the request has no feasible plan."])
    click.echo(dump_json(out) if as_json else "\n".join(lines) + "\n", nl=False)
    if code:
        raise SystemExit(code)
