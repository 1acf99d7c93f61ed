"""Presentation of task-level choices: the global batch (critical batch, token efficiency) and
training stages, for `tpopt solve` and `tpopt evaluate`. Numbers come from optimizer/outer.py and
optimizer/plan.py."""

from __future__ import annotations

from typing import Any

import click

from tpopt.cli.common import EXIT_INFEASIBLE, dump_json
from tpopt.cli.render import binding_lines, console_text, evaluation_text, footing_text
from tpopt.errors import InputError
from tpopt.models import families as F
from tpopt.models.evaluate import evaluate
from tpopt.models.plan import Plan, Scenario
from tpopt.models.units import DAY
from tpopt.optimizer import footing
from tpopt.optimizer.outer import stage_scenarios
from tpopt.presentation import model_text, plan_line


def _tok(x: float) -> str:
    """Tokens with a decimal suffix: 38.87B, 2.00M, 1.2T."""
    for div, suf in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(x) >= div:
            return f"{x / div:,.2f}{suf}"
    return f"{x:,.0f}"


def _money(x: float, unit: str) -> str:
    return f"{x:,.0f} {unit}"


def batch_lines(out: dict[str, Any]) -> list[str]:
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
        lines.append(f"  critical batch B_noise {_tok(f['critical_batch_tokens'])} tokens "
                     f"({f['critical_batch_source']}); "
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
            lines.append(f"  {r['global_batch']:>6,}{mark}   {_tok(r['tokens_per_step']):>10}   "
                         f"{_tok(r['tokens']):>7}  "
                         f"{r['iterations']:>8,.0f}   {best}")
    return lines


def batch_infeasible(rows: list[dict[str, Any]], conflict_batch: int, as_json: bool, decided: bool = True) -> None:
    """No batch admits a plan: each batch's fastest plan with the deadline and budget dropped
    (:func:`tpopt.optimizer.plan.fastest_per_batch`), and the batch the conflict below is computed at
    (the relaxations re-solve over every batch). ``decided`` False (the time limit stopped the solve, status
    unknown): no plan was found in time, which is no verdict, and no conflict follows."""
    if as_json:
        return
    if decided:
        head = (f"No global batch admits a plan (the conflict below is at {conflict_batch:,} sequences; the changes "
                "re-solve over every batch).")
    else:
        open_ = sum(r.get("fastest_status") == "unknown" for r in rows)
        head = "No plan found for any global batch within the time limit" + (
            f" ({open_} of {len(rows)} batches not decided)." if open_ else ".")
    click.echo(f"{head} Fastest finish per batch, deadline and budget dropped:")
    for r in rows:
        fin = f"{r['fastest_finish_days']:.2f} d" if r["fastest_finish_days"] is not None else \
            "not decided (time limit reached)" if r.get("fastest_status") == "unknown" else "no plan at all"
        click.echo(f"  {r['global_batch']:>6,} sequences, {_tok(r['tokens'])} tokens: {fin}")


# ---------------------------------------------------------------------------------------------
# training stages


def staged_text(d: dict[str, Any], sc: Scenario, timing: bool) -> str:
    s = d["solver"]
    took = f", {s['wall_s']:.2f} s" if timing else ""
    lines = [f"tpopt solve: {sc.name}: {sc.model.name}, {len(sc.stages)} stages, deadline "
             f"{sc.task.deadline_s / DAY:.1f} d (reserved {sc.task.reserved_s / DAY:.1f} d)",
             *([model_text(d["scenario"])] if "scenario" in d else []),
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
        lines += ["", f"Stage {i + 1} {e['name']!r}: {_tok(f['tokens'])} tokens at {f['seq_len']:,} tokens per "
                      "sequence, "
                      f"batch {f['global_batch']:,} ({_tok(f['tokens_per_step'])} tokens per step)",
                  f"  Plan: {plan_line(e['plan'])}",
                  f"  memory {m['memory_per_card_gib']:.1f} of {m['memory_limit_gib']:.1f} GiB, "
                  f"step {m['step_s']:.2f} s, "
                  f"{m['iterations']:,} steps, overhead {m['overhead_fraction'] * 100:.2f} %, "
                  f"finish {m['finish_days']:.2f} d" + (f" ({', '.join(extra)})" if extra else "")
                  + f", cost {_money(m['cost'], unit)}"]
        lines += footing_text(e, indent=2)
        if "binding" in e:
            bl = binding_lines(e["binding"], d["objective"], unit, e.get("binding_undecided") or ())
            bl[0] = bl[0].replace("Binding constraints", f"Binding at the {e['allocated_days']:.2f} d the other "
                                                         "stages leave", 1)
            lines += ["  " + x for x in bl]
    t = d["total"]
    lines += ["", f"Total: finish {t['finish_days']:.2f} d against {t['deadline_days']:.2f} d, cost "
                  f"{_money(t['cost'], unit)}"]
    return console_text(*lines)


def infeasible_stage_text(d: dict[str, Any], sc: Scenario) -> str:
    """Why no combination of stage plans fits: a stage without any plan, or the fastest plans'
    total against the deadline."""
    fast = d["fastest"]
    open_ = set(d.get("stages_undecided") or ())
    lines = []
    if open_:  # cut short by the time limit: no plan found yet, and no proof that none exists
        lines.append("Not decided within the time limit for stage(s) "
                     + ", ".join(repr(st.name) for st in sc.stages if st.name in open_)
                     + ": no plan found yet and no proof that none exists; give a longer --time-limit.")
    if any(f is None and st.name not in open_ for st, f in zip(sc.stages, fast, strict=False)):
        names = [st.name for st, f in zip(sc.stages, fast, strict=False) if f is None and st.name not in open_]
        lines.append("No plan at all for stage(s) " + ", ".join(repr(n) for n in names)
                     + " (memory, layout or card cap, before any deadline); evaluate or solve that stage alone "
                       "to see why.")
    elif open_:
        pass  # said above
    elif d["status"] == "unknown":  # every stage has a plan; the combination search was cut short
        lines.append("No combination of stage plans found within the time limit, and no proof that none exists; "
                     "give a longer --time-limit.")
    else:
        total = sum(f["finish_days"] for f in fast)
        deadline_days = F.limit(F.DEADLINE, sc) / DAY
        lines.append(f"The stages' fastest plans need {total:.2f} d together against a deadline of "
                     f"{deadline_days:.2f} d:" if total > deadline_days * (1 + 1e-9) else
                     "Every combination of stage plans that meets the deadline exceeds the budget; fastest plans:")
        for f in fast:
            lines.append(f"  {f['name']}: {f['finish_days']:.2f} d ({f['plan']['accelerator']} x {f['plan']['cards']})")
    return "\n".join(lines)


def evaluate_staged(sc: Scenario, plan: Plan, stage: str | None, as_json: bool) -> int:
    """`tpopt evaluate` on a staged scenario: the plan on one stage (--stage) or on each stage."""

    stages = stage_scenarios(sc)
    if stage is not None:
        pick = [s for i, s in enumerate(stages) if s.name == stage or str(i + 1) == str(stage)]
        if not pick:
            raise InputError(f"no stage {stage!r} (stages: {', '.join(s.name for s in stages)})")
        stages = pick
    evs = [(s, evaluate(s.sc, plan)) for s in stages]
    dicts = [dict(ev.as_dict(), name=s.name) for s, ev in evs]
    for (s, _), d in zip(evs, dicts, strict=True):
        d["footing"] = footing.of_evaluation(s.sc, d)
    if as_json:
        click.echo(dump_json({"stages": dicts, "feasible": all(ev.feasible for _, ev in evs)}), nl=False)
    else:
        for (s, _), d in zip(evs, dicts, strict=True):
            click.echo(f"Stage {s.name!r}:")
            click.echo(evaluation_text(d), nl=False)
            click.echo("")
    return 0 if all(ev.feasible for _, ev in evs) else EXIT_INFEASIBLE
