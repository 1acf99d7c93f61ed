"""Presentation of task-level choices: the global batch (critical batch, token efficiency) and
training stages, for `tpopt solve` and `tpopt evaluate`. Numbers come from optimizer/outer.py."""

from __future__ import annotations

import click
from tpopt.cli.common import EXIT_INFEASIBLE, EXIT_UNKNOWN, dump_json
from tpopt.models import families as F
from tpopt.models.units import DAY


def _tok(x: float) -> str:
    """Tokens with a decimal suffix: 38.87B, 2.00M, 1.2T."""
    for div, suf in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(x) >= div:
            return f"{x / div:,.2f}{suf}"
    return f"{x:,.0f}"


def _money(x: float, unit: str) -> str:
    return f"{x:,.0f} {unit}"


def batch_lines(out: dict) -> list[str]:
    """The batch block under the plan line: the chosen batch, the critical-batch figures of the
    chapter (10.1.1) and the token-efficiency cost, then one row per batch choice."""
    f = out.get("batch")
    if not f:
        return []
    rows = out.get("batch_choices") or []
    unit = f.get("cost_unit", "USD")
    choice = (" (chosen among " + " / ".join(f"{r['global_batch']:,}" for r in rows) + ")") if len(rows) > 1 else ""
    lines = [f"Global batch: {f['global_batch']:,} sequences x {f['seq_len']:,} = {_tok(f['tokens_per_step'])} tokens "
             f"per step{choice}; {_tok(f['tokens'])} tokens in {f['iterations']:,.0f} steps"]
    if f.get("ramp"):
        r = f["ramp"]
        lines.append(f"  ramp-up from {r['start']:,} sequences by {r['increment']:,}: {r['steps']:,} steps over "
                     f"{_tok(r['tokens'])} tokens (each budgeted as a full-batch step)")
    if f.get("critical_batch_tokens") is not None:
        lines.append(f"  critical batch B_noise {_tok(f['critical_batch_tokens'])} tokens ({f['critical_batch_source']}); "
                     f"reference {_tok(f['reference_tokens'])} tokens at {f['reference_batch']:,} sequences "
                     f"({f['reference_steps']:,.0f} steps, {f['reference_ratio']:.2f} x B_noise, weak-scaling limit "
                     f"{f['reference_weak_scaling_limit']:.2f}x) -> S_min {f['s_min']:,.0f} steps, "
                     f"E_min {_tok(f['e_min'])} tokens")
        eff = f"  token efficiency at {f['ratio']:.2f} x B_noise: {_tok(f['extra_tokens'])} tokens above E_min"
        if "extra_cost" in f:
            eff += f", costing {_money(f['extra_cost'], unit)}"
        if f["global_batch"] != f["reference_batch"]:
            sign = "+" if f["tokens_vs_reference"] >= 0 else "-"
            eff += f"; {sign}{_tok(abs(f['tokens_vs_reference']))} tokens"
            if "cost_vs_reference" in f:
                eff += f" ({sign}{_money(abs(f['cost_vs_reference']), unit)})"
            eff += " against the reference batch"
        lines.append(eff)
    if len(rows) > 1:
        lines.append("  batch      tokens/step   tokens    steps     best plan at this batch")
        for r in rows:
            mark = "*" if r["global_batch"] == f["global_batch"] else " "
            best = (f"{r['cards']:,} cards, {r['finish_days']:.1f} d, {_money(r['cost'], r['cost_unit'])}"
                    if "cards" in r else r["status"])
            lines.append(f"  {r['global_batch']:>6,}{mark}   {_tok(r['tokens_per_step']):>10}   {_tok(r['tokens']):>7}  "
                         f"{r['iterations']:>8,.0f}   {best}")
    return lines


def batch_infeasible(bs, sc, kw, req, as_json: bool, out: dict):
    """No batch admits a plan: each batch's fastest plan with the deadline and budget dropped, then
    the space the conflict is computed on (the task's batch, or the first choice; the relaxations
    re-solve over every batch)."""
    from tpopt.optimizer.core import solve
    from tpopt.optimizer.result import Request
    from tpopt.optimizer.space import FAMILIES

    rows = []
    for c in bs.choices:
        enforce = frozenset(f for f in req.enforced(FAMILIES) if f not in (F.DEADLINE, F.BUDGET))
        r = solve(c.sc, kw.get("solver", "cpsat"), Request(objective="time", enforce=enforce, time_limit=req.time_limit,
                                                           seed=req.seed, workers=req.workers), space=c.space)
        fin = r.best.metrics["finish_days"] if r.best is not None else None
        rows.append({"global_batch": c.batch, "tokens": c.sc.task.tokens, "status": c.result.status.value,
                     "fastest_finish_days": fin})
    out["batch_choices"] = rows
    pick = next((c for c in bs.choices if c.batch == sc.task.global_batch), bs.choices[0])
    if not as_json:
        click.echo(f"No global batch admits a plan (the conflict below is at {pick.batch:,} sequences; the changes "
                   "re-solve over every batch). Fastest finish per batch, deadline and budget dropped:")
        for r in rows:
            fin = f"{r['fastest_finish_days']:.2f} d" if r["fastest_finish_days"] is not None else "no plan at all"
            click.echo(f"  {r['global_batch']:>6,} sequences, {_tok(r['tokens'])} tokens: {fin}")
    return pick.space


# ---------------------------------------------------------------------------------------------
# training stages


def _stage_entry(ss, i: int, analysis_on: bool, backend: str, req) -> dict:
    from dataclasses import replace

    from tpopt.optimizer import outer
    from tpopt.optimizer.report import analysis
    from tpopt.optimizer.space import Space

    st, pick = ss.stages[i], ss.picks[i]
    ev = pick.ev
    d = ev.as_dict()
    e = {"name": st.name, **d, "batch": outer.batch_figures(pick.sc, ev), "allocated_days": outer.allocated(ss, i) / DAY,
         "reserved_s": st.reserved_s, "save_s": st.save_s, "restore_s": st.restore_s}
    if analysis_on:  # what binds this stage at the deadline the other stages leave it
        sc_i = replace(pick.sc, task=replace(pick.sc.task, deadline_s=outer.allocated(ss, i)))
        ana = analysis(Space.from_scenario(sc_i), ev, backend, req, set(ss.enforced) - {F.BUDGET})
        e["binding"], e["alternatives"] = ana["binding"], ana["alternatives"]
    return e


def staged_dict(ss, analysis_on: bool, backend: str, req) -> dict:
    out = {"status": ss.status.value, "objective": ss.objective, "solver": ss.solver.as_dict(), "feasible": ss.feasible}
    if ss.feasible:
        out["stages"] = [_stage_entry(ss, i, analysis_on, backend, req) for i in range(len(ss.stages))]
        out["total"] = {"finish_days": ss.finish_s / DAY, "cost": ss.cost,
                        "cost_unit": ss.picks[0].ev.metrics["cost_unit"],
                        "deadline_days": ss.stages[0].sc.task.deadline_s / DAY}
    else:
        out["fastest"] = [None if f is None else {"name": st.name, "finish_days": f.metrics["finish_days"],
                                                  "cost": f.metrics["cost"], "plan": f.plan_dict()}
                          for st, f in zip(ss.stages, ss.fastest, strict=False)]
    return out


def staged_text(d: dict, sc, timing: bool) -> str:
    from tpopt.cli.render import binding_lines, console_text, plan_line

    s = d["solver"]
    took = f", {s['wall_s']:.2f} s" if timing else ""
    lines = [f"tpopt solve: {sc.name}: {sc.model.name}, {len(sc.stages)} stages, deadline "
             f"{sc.task.deadline_s / DAY:.1f} d (reserved {sc.task.reserved_s / DAY:.1f} d)",
             f"Status: {d['status']} (solver {s['name']}, {s['method']}{took}, minimising {d['objective']})"]
    if not d["feasible"]:
        return console_text(*lines)
    unit = d["total"]["cost_unit"]
    for i, e in enumerate(d["stages"]):
        m, f = e["metrics"], e["batch"]
        extra = []
        if e["reserved_s"]:
            extra.append(f"reserved {e['reserved_s'] / DAY:.2f} d")
        if e["restore_s"]:
            extra.append(f"restore {e['restore_s']:,.0f} s")
        if e["save_s"]:
            extra.append(f"checkpoint save {e['save_s']:,.0f} s")
        lines += ["", f"Stage {i + 1} {e['name']!r}: {_tok(f['tokens'])} tokens at {f['seq_len']:,} tokens per sequence, "
                      f"batch {f['global_batch']:,} ({_tok(f['tokens_per_step'])} tokens per step)",
                  f"  Plan: {plan_line(e['plan'])}",
                  f"  memory {m['memory_per_card_gib']:.1f} of {m['memory_limit_gib']:.1f} GiB, step {m['step_s']:.2f} s, "
                  f"{m['iterations']:,} steps, overhead {m['overhead_fraction'] * 100:.2f} %, "
                  f"finish {m['finish_days']:.2f} d" + (f" ({', '.join(extra)})" if extra else "")
                  + f", cost {_money(m['cost'], unit)}"]
        if "binding" in e:
            bl = binding_lines(e["binding"], d["objective"], unit)
            bl[0] = bl[0].replace("Binding constraints", f"Binding at the {e['allocated_days']:.2f} d the other "
                                                         "stages leave", 1)
            lines += ["  " + x for x in bl]
    t = d["total"]
    lines += ["", f"Total: finish {t['finish_days']:.2f} d against {t['deadline_days']:.2f} d, cost "
                  f"{_money(t['cost'], unit)}"]
    return console_text(*lines)


def solve_staged(sc, kw: dict, req, no_analysis: bool, timing: bool, as_json: bool):
    """`tpopt solve` on a staged scenario."""
    from tpopt.optimizer.outer import solve_stages
    from tpopt.optimizer.result import Status

    ss = solve_stages(sc, kw["solver"], req)
    d = staged_dict(ss, not no_analysis, kw["solver"], req)
    if as_json:
        click.echo(dump_json(d), nl=False)
    else:
        click.echo(staged_text(d, sc, timing), nl=False)
        if not ss.feasible:
            click.echo(infeasible_stage_text(d, sc))
    if not ss.feasible:
        raise SystemExit(EXIT_INFEASIBLE if ss.status == Status.INFEASIBLE else EXIT_UNKNOWN)


def infeasible_stage_text(d: dict, sc) -> str:
    """Why no combination of stage plans fits: a stage without any plan, or the fastest plans'
    total against the deadline."""
    fast = d["fastest"]
    lines = []
    if any(f is None for f in fast):
        names = [st.name for st, f in zip(sc.stages, fast, strict=False) if f is None]
        lines.append("No plan at all for stage(s) " + ", ".join(repr(n) for n in names)
                     + " (memory, layout or card cap, before any deadline); evaluate or solve that stage alone "
                       "to see why.")
    else:
        total = sum(f["finish_days"] for f in fast)
        lines.append(f"The stages' fastest plans need {total:.2f} d together against a deadline of "
                     f"{sc.task.deadline_s / DAY:.2f} d:" if total > sc.task.deadline_s / DAY * (1 + 1e-9) else
                     "Every combination of stage plans that meets the deadline exceeds the budget; fastest plans:")
        for f in fast:
            lines.append(f"  {f['name']}: {f['finish_days']:.2f} d ({f['plan']['accelerator']} x {f['plan']['cards']})")
    return "\n".join(lines)


def evaluate_staged(sc, plan, stage: str | None, as_json: bool) -> int:
    """`tpopt evaluate` on a staged scenario: the plan on one stage (--stage) or on each stage."""
    from tpopt.cli.render import evaluation_text
    from tpopt.errors import InputError
    from tpopt.models.evaluate import evaluate
    from tpopt.optimizer.outer import stage_scenarios

    stages = stage_scenarios(sc)
    if stage is not None:
        pick = [s for i, s in enumerate(stages) if s.name == stage or str(i + 1) == str(stage)]
        if not pick:
            raise InputError(f"no stage {stage!r} (stages: {', '.join(s.name for s in stages)})")
        stages = pick
    evs = [(s, evaluate(s.sc, plan)) for s in stages]
    if as_json:
        click.echo(dump_json({"stages": [dict(ev.as_dict(), name=s.name) for s, ev in evs],
                              "feasible": all(ev.feasible for _, ev in evs)}), nl=False)
    else:
        for s, ev in evs:
            click.echo(f"Stage {s.name!r}:")
            click.echo(evaluation_text(ev.as_dict()), nl=False)
            click.echo("")
    return 0 if all(ev.feasible for _, ev in evs) else EXIT_INFEASIBLE
