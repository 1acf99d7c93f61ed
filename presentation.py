"""Text of results shared by the API and the command line: plan lines, relative changes, and the text of
explanations (conflicts, minimal relaxations, one plan's verdict, sensitivities).

Presentation only, plain strings (no terminal, no click, no rich): the numbers come from
:mod:`tpopt.optimizer.explain` and :mod:`tpopt.optimizer.plan`. ``str()`` of a
:class:`tpopt.api.Explanation` and the ``tpopt`` commands (through :mod:`tpopt.cli.render` and
``tpopt explain`` / ``tpopt solve``) print the same lines.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # typing only
    from tpopt.models.plan import Scenario

from tpopt.models.variables import BY_NAME, line_parts

# ---------------------------------------------------------------------------------------------
# plans and changes


def change_text(fraction: float, *, signed: bool = False, better: str = "better", worse: str = "worse") -> str:
    """A relative change at one decimal, honest at the ends: ``"tie"`` when there is none, ``"< 0.1 %"``
    when it rounds to 0.0 (never "0.0 % better"). ``fraction`` > 0 means better (``signed``: an
    increase, printed with its sign and no word)."""
    if abs(fraction) < 1e-12:
        return "tie"
    pct = abs(fraction) * 100
    size = "< 0.1" if pct < 0.05 else f"{pct:.1f}"
    if signed:
        return f"{'+' if fraction > 0 else '-'}{size.replace(' ', '')} %"
    return f"{size} % {better if fraction > 0 else worse}"


def accumulation_text(plan: dict[str, Any]) -> str:
    """'micro-batch 1 x 8 accumulation', or what is wrong when the global batch does not divide."""
    mb, ga = plan["micro_batch"], plan.get("grad_accum")
    if ga:
        return f"micro-batch {mb} x {ga} accumulation"
    return f"micro-batch {mb}, no whole accumulation (DP {plan['dp']} x micro-batch {mb} does not divide the batch)"


def layout_text(p: dict[str, Any], sep: str = " / ") -> str:
    """TP / CP / PP / DP of a plan dict (CP shown only when the plan splits sequences)."""
    cp = [f"CP {p['cp']}"] if p.get("cp", 1) > 1 else []
    return sep.join([f"TP {p['tp']}", *cp, f"PP {p['pp']}"] + ([f"DP {p['dp']}"] if sep == " / " else []))


def model_text(scenario: dict[str, Any]) -> str:
    """'Model: NAME, N 8.19B parameters, training FLOPs per token 52.7 GFLOP at 8,192 tokens' from a report's
    ``scenario`` entry (:func:`tpopt.optimizer.report.scenario_entry`); MoE: the activated parameters too."""
    m = scenario["model"]
    n, act = m["params"], m["activated_params"]
    params = f"N {_count(n)} parameters" + (f" ({_count(act)} activated per token)" if act != n else "")
    flops = "; ".join(f"{f['flops'] / 1e9:,.1f} GFLOP at {f['seq_len']:,} tokens"
                      + (f" ({f['stage']})" if f["stage"] else "") for f in m["flops_per_token"])
    return f"Model: {m['name']}, {params}, training FLOPs per token {flops}"


def cp_note_text(e: dict[str, Any]) -> str:
    """The long-context note of a report's ``context_parallel`` entry
    (:func:`tpopt.optimizer.report.cp_not_searched`): what leaving CP out of the search costs, or a hint."""
    head = f"Context parallelism: not searched (search.cp = [1]) with {e['seq_len']:,} tokens per sequence; "
    b = e.get("best_with_cp")
    if e["checked"] and b is not None and e["saving"]:
        better = "cheaper" if e.get("objective", "cost") == "cost" else "faster"
        return (head + f"{e['flag']} finds {b['accelerator']} x {b['cards']} ({layout_text(b)}), "
                f"{b['cost']:,.0f} {b['cost_unit']} in {b['finish_days']:.1f} d: "
                f"{change_text(e['saving'], better=better)} than this plan")
    if e["checked"]:
        return head + f"searching it ({e['flag']}) finds nothing better."
    why = f" ({e['reason']})" if e.get("reason") else ""
    return head + f"search it with {e['flag']} or search.cp = {e['suggested']}{why}."


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """A count with its noun in the right number: "1 host", "8 hosts", "1,024 cards" (``plural``: a noun whose
    plural is not noun + "s"). The one text of a counted noun in every report."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def _count(x: float) -> str:
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if x >= scale:
            return f"{x / scale:.3g}{suffix}"
    return f"{x:,.0f}"


def plan_line(plan: dict[str, Any]) -> str:
    parts = [
        f"{plan['accelerator']} x {plan['cards']} ({counted(plan['hosts'], 'host')})",
        BY_NAME["zero"].wording(plan["zero_stage"]),  # the declared labels (models/variables.py)
        layout_text(plan),
        accumulation_text(plan),
        BY_NAME["recompute"].wording(plan["recompute"]),
    ]
    parts += line_parts(plan)  # the switches a variable declares shown (models/variables.py: offload, ...)
    if plan["pp"] > 1 and plan.get("schedule"):
        parts.append(f"schedule {plan['schedule']}")
    if plan.get("ep") is not None:
        parts.append(moe_plan_text(plan))
    parts.append(f"save every {plan['save_interval_s']:,.0f} s ({plan['save_mode']})")
    parts.append(f"{counted(plan['nics_per_host'], 'NIC')}/host")
    return " | ".join(parts)


def moe_plan_text(plan: dict[str, Any]) -> str:
    """"EP 8 in-host, expert-TP 1, dropless" / "EP 64 across 8 hosts, expert-TP 1, capacity 1.25"."""
    where = "" if plan["ep"] <= 1 else f" {plan['ep_placement']}"
    cap = "dropless" if not plan.get("capacity_factor") else f"capacity {plan['capacity_factor']:g}"
    return f"EP {plan['ep']}{where}, expert-TP {plan['expert_tp']}, {cap}"


def moe_short(p: dict[str, Any]) -> str:
    """", EP 8, capacity 1.25" for a MoE plan summary ("" for a dense one)."""
    if p.get("ep") is None:
        return ""
    cap = "dropless" if not p.get("capacity_factor") else f"capacity {p['capacity_factor']:g}"
    return f", EP {p['ep']}, {cap}"


def limit_line(s: dict[str, Any]) -> str:
    """What a run stopped by its time limit returns (the phase it stopped in, the gap if known)."""
    gap = "unknown" if s.get("gap") is None else f"{s['gap'] * 100:.2f} %"
    where = f" while {s['limit_phase']}" if s.get("limit_phase") else ""
    return f"Time limit reached{where}: best plan found, not proven optimal, gap {gap}"


# ---------------------------------------------------------------------------------------------
# explanations

# command-line flag that sets each relaxable input (None: only the scenario file can)
FLAGS = {"deadline": "--deadline", "reserved": "--reserved", "tokens": "--tokens", "efficiency": "--efficiency",
         "max_cards": "--max-cards", "usable_memory": "--usable-memory", "accelerator": "--hw",
         "max_cost": "--max-cost", "nic_bandwidth": None, "global_batch": "--global-batch"}


# ---------------------------------------------------------------------------------------------
# formatting helpers


def _num(x: float | str | None, digits: int = 2) -> str:
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    return f"{x:,.{digits}f}"


COUNT_UNITS = ("cards", "hosts", "GPUs", "sequences", "NICs")  # whole things: printed without decimals


def quantity_text(x: float | str | None, unit: str, digits: int = 2) -> str:
    """A value with its unit as a report prints it: counts of whole things (``COUNT_UNITS``) as integers
    ("88 cards", never "88.00 cards"), money at cents, anything else at ``digits`` decimals; ``-`` for None."""
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    if unit in COUNT_UNITS:
        return f"{x:,.0f} {unit}"
    if unit == "B tokens":  # x in billions at ``digits`` decimals, printed exactly: 2T, 1.74306T, 85.23B
        big = abs(x) >= 1000
        text = f"{x / 1000:.{digits + 3}f}" if big else f"{x:.{digits}f}"
        return f"{text.rstrip('0').rstrip('.') if '.' in text else text}{'T' if big else 'B'} tokens"
    if unit in ("USD", "card-hours"):
        return f"{x:,.2f} {unit}"
    sep = "" if unit in ("%",) else " "
    return f"{x:,.{digits}f}{sep}{unit}" if unit else f"{x:,.{digits}f}"


def _plan_short(p: dict[str, Any]) -> str:
    return (f"{p['accelerator']} x {p['cards']} ({BY_NAME['zero'].wording(p['zero_stage'])}, {layout_text(p, ', ')}"
            f"{moe_short(p)}, mb {p['micro_batch']})")


def _money(x: float, unit: str) -> str:
    return f"{x:,.0f} {unit}"


def _objective_text(value: float, objective: str, unit: str) -> str:
    return _money(value, unit) if objective == "cost" else f"{value:.2f} d"


def _toml_value(v: object) -> str:
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return str(v)


def _apply_flag(r: dict[str, Any]) -> str:
    """How to apply a relaxation: the command-line flag when one override does it, else the scenario
    edit (e.g. a per-card key inside [hardware.<name>])."""
    apply = r.get("apply")
    if not apply or r.get("required") is None:
        return ""
    flag = FLAGS.get(r["parameter"])
    if r["parameter"] == "accelerator":
        return f"{flag} {r['required']}"
    if r["parameter"] == "card_price":  # the price of the plan's card: that card alone, at that price
        return f"--hw {apply['hardware.accelerator'][0]} and scenario: [cost] card_hour = {apply['cost.card_hour']}"
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


def conflict_lines(detail: list[dict[str, Any]]) -> list[str]:
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
            broken = (f"breaks it: {d['violation']}" if d.get("violation") else
                      f"has {quantity_text(d['value'], d['unit'])} against a limit of "
                      f"{quantity_text(d['limit'], d['unit'])}")
            lines.append(f"  {'':<{width}}  {lead}, {_plan_short(d['plan'])}, {broken}")
        elif d.get("note"):
            lines.append(f"  {'':<{width}}  {d['note']}")
        if d.get("reason"):  # why the rule cannot hold here, and the way out
            lines.append(f"  {'':<{width}}  why: {d['reason']}")
    return lines


def _needed(r: dict[str, Any]) -> str:
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
    if r.get("required_exact") is not None and r["parameter"] not in ("max_cards", "global_batch", "nics_per_host"):
        thr = (quantity_text(r["required_exact"], r["unit"], 3) if r["unit"] == "B tokens" else
               _num(r["required_exact"], 3))
        exact = f" (threshold {thr})"
    return f"{r['direction']} {quantity_text(r['required'], r['unit'])}{exact}"


def evidence_words(o: dict[str, Any]) -> list[str]:
    """What a suggested card rests on: "priors only", "illustrative price", both or none."""
    return [w for k, w in (("priors_only", "priors only"), ("illustrative_price", "illustrative price")) if o.get(k)]


def qualifiers_text(words: Sequence[str]) -> str:
    """Qualifiers of one figure in one bracket after it, joined by "; " (" (priors only; illustrative price)"),
    or nothing: the one way the reports attach them."""
    return f" ({'; '.join(words)})" if words else ""


def evidence_flags(o: dict[str, Any]) -> str:
    """The qualifiers of :func:`evidence_words` in one bracket ("(priors only; illustrative price)"), or nothing."""
    return qualifiers_text(evidence_words(o))


CHAIN_FLAGS = {"write_bandwidth": "scenario: [checkpoint] write_bandwidth = \"{}GB/s\"",
               "global_batch": "--global-batch {}", "max_cards": "--max-cards {}"}
"""How each change of a chain is applied (tpopt.optimizer.explain.chain)."""


def chain_lines(c: dict[str, Any], width: int) -> list[str]:
    """What stops more cards from helping (tpopt.optimizer.explain.chain), and the changes that let them, in
    the order a user can act (storage, batch, cards; explain.chain says how each is the least), confirmed by one
    solve together."""
    pad = " " * (width + 4)
    lines = [f"{pad}what binds beyond the card limit: at {c['largest_count']:,} cards the fastest plan needs "
             f"{c['fastest_days']:.1f} d, {c['overhead'] * 100:.1f} % lost to checkpoints and failures (saves "
             f"{c['save_overhead'] * 100:.1f} %), DP {c['dp']:,} of a {c['batch']:,}-sequence batch; together:"]
    flags = []
    for k, st in enumerate(c["steps"], 1):
        now = f"{st['current']:g}" if isinstance(st["current"], float) else f"{st['current']:,}"
        lines.append(f"{pad}{k}. {st['label']} >= {st['required']:,} {st['unit']} (now {now})")
        flags.append(CHAIN_FLAGS[st["parameter"]].format(st["required"]))
    lines.append(f"{pad}-> {_plan_short(c['plan'])}, {c['finish_days']:.2f} d, {_money(c['cost'], c['cost_unit'])}"
                 f"   [{'; '.join(flags)}]")
    return lines


RELAXATION_HEADER = ("Smallest single changes that make the request feasible (each alone, everything else unchanged;",
                     "values rounded towards feasibility and re-solved):")


def relaxation_finish(r: dict[str, Any]) -> str:
    """A relaxation's plan finish as the line prints it: the nominal finish, and under a confidence also the plan's
    finish quantile at it (what a deadline relaxation's threshold is), each named."""
    q = r.get("finish_quantile_days")
    if r.get("confidence") is None or q is None:
        return f"{r['finish_days']:.2f} d"
    return f"nominal finish {r['finish_days']:.2f} d, {q:.2f} d at {level_text(r['confidence'])} confidence"


def relaxation_lines(rels: list[dict[str, Any]]) -> list[str]:
    if not rels:
        return []
    lines = list(RELAXATION_HEADER)
    width = max(len(r["parameter"]) for r in rels)
    for r in rels:
        now = quantity_text(r["current"], r["unit"]) if r["parameter"] != "accelerator" else (r["current"] or "-")
        if r.get("current_by_card"):  # several candidate cards: each one's value, not the first's
            now = ", ".join(f"{k} {_num(v)}" for k, v in r["current_by_card"].items()) + f" {r['unit']}"
        if r["current"] is None and r.get("method") == "undecided":  # not read before it stopped: no "now -"
            lines.append(f"  {r['parameter']:<{width}}  {_needed(r)}")
        else:
            lines.append(f"  {r['parameter']:<{width}}  now {now}: {_needed(r)}")
        if r.get("helps") and r.get("plan"):
            flag = _apply_flag(r)
            rests = next((evidence_flags(o) for o in r.get("options") or () if o["accelerator"] == r.get("required")
                          and o["feasible"]), "") if r["parameter"] == "accelerator" else ""
            lines.append(f"  {'':<{width}}  -> {_plan_short(r['plan'])}, {relaxation_finish(r)}, "
                         f"{_money(r['cost'], r['cost_unit'])}{rests}" + (f"   [{flag}]" if flag else ""))
        if r.get("helps") and r.get("note"):
            lines.append(f"  {'':<{width}}  ({r['note']})")
        if r.get("chain"):
            lines += chain_lines(r["chain"], width)
        if r["parameter"] == "accelerator" and r.get("options"):
            nominal = " nominal" if r.get("confidence") is not None else ""  # the options' finish: nominal
            opts = []
            for o in r["options"]:
                tag = " (current)" if o.get("current") else ""
                if o["feasible"]:
                    rests = "".join(f"; {w}" for w in evidence_words(o))  # in the same bracket: one per option
                    opts.append(f"{o['accelerator']}{tag} {_money(o['cost'], o['cost_unit'])} "
                                f"({o['plan']['cards']} cards, {o['finish_days']:.1f} d{nominal}{rests})")
                else:
                    opts.append(f"{o['accelerator']}{tag} no plan")
            lines.append(f"  {'':<{width}}  catalog: " + "; ".join(opts))
    return lines


def scale_out_relaxation_lines(rels: list[dict[str, Any]]) -> list[str]:
    """The relaxation lines of a pools or sites report ("pool availability",
    "WAN bandwidth": ``tpopt.optimizer.pools`` and ``tpopt.optimizer.sites``), in the style of ``tpopt explain``'s."""
    if not rels:
        return []
    lines = list(RELAXATION_HEADER)
    width = max(len(r["parameter"]) for r in rels)
    for r in rels:
        what = f" ({r['pool']})" if r.get("pool") else ""
        need = f">= {r['required']:,} {r['unit']}" if r["helps"] else f"cannot help: {r['note']}"
        lines.append(f"  {r['parameter']:<{width}}  now {r['current']:,g} {r['unit']}{what}: {need}")
        if r["helps"]:
            plan = f"{r['plan']}, " if r.get("plan") else ""
            lines.append(f"  {'':<{width}}  -> {plan}{' + '.join(f'{c:,}' for c in r['cards'])} cards, "
                         f"{r['finish_days']:.2f} d, {r['cost']:,.0f} USD")
    return lines


def infeasible_lines(out: dict[str, Any], sc: Scenario, command: str) -> list[str]:
    """Text of a request without a plan: the conflict and the smallest single changes (proven
    infeasible), or what to do when the solver ran out of time."""
    lines = [f"tpopt {command}: {sc.name}: no feasible plan ({out['status']})."]
    if out["status"] != "infeasible":
        phase = (out.get("solver") or {}).get("limit_phase")
        where = f" while {phase}" if phase else ""
        lines.append(f"Time limit reached{where} before a plan was found or proven not to exist; "
                     "raise --time-limit.")
    else:
        lines += [""] + (["Conflict: not isolated (time limit reached before a conflict was found)."]
                         if out.get("conflict_status") else conflict_lines(out["conflict_detail"]))
        rl = relaxation_lines(out["relaxations"])
        if rl:
            lines += [""] + rl
    return lines


# ---------------------------------------------------------------------------------------------
# a feasible request, a given plan, sensitivities


def sensitivity_lines(rows: list[dict[str, Any]]) -> list[str]:
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
        pct = f" ({change_text(r['delta_fraction'], signed=True)})" if r.get("delta_fraction") is not None else ""
        lines.append(f"  {r['change']:<{width}}  {move}: {_objective_text(r['value'], obj, unit)}, "
                     f"delta {dtxt}{pct}; {_plan_short(r['plan'])}")
    return lines


def sensitivity_text(rows: list[dict[str, Any]]) -> str:
    return "\n".join(sensitivity_lines(rows)) + ("\n" if rows else "")


def _violation_line(v: dict[str, Any], width: int) -> str:
    if v.get("violation"):  # a broken rule: its value and limit are no quantities
        return f"  {v['name']:<{width}}  {v['violation']}; rule: {v['rule']}"
    pct = f", {v['excess_fraction'] * 100:+.1f} %" if v.get("excess_fraction") is not None else ""
    return (f"  {v['name']:<{width}}  {quantity_text(v['value'], v['unit'])} against "
            f"{quantity_text(v['limit'], v['unit'])} (over by {quantity_text(v['excess'], v['unit'])}{pct}); "
            f"rule: {v['rule']}")


def plan_lines(d: dict[str, Any], sc: Scenario) -> list[str]:
    unit = d["cost_unit"]
    lines = [f"tpopt explain: {sc.name}: plan {plan_line(d['plan'])}",
             f"Cost {_money(d['cost'], unit)}, finish {d['finish_days']:.2f} d.",
             *(footing_lines(d["footing"]) if d.get("footing") else [])]
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
                lines.append(f"  {t['name']:<{w}}  {quantity_text(t['value'], t['unit'])} of "
                             f"{quantity_text(t['limit'], t['unit'])}, "
                             f"slack {quantity_text(t['slack'], t['unit'])}{rel}{tag}")
        for f in d.get("fewer_hosts", []):
            k = f"{counted(f['hosts_fewer'], 'host')} fewer ({counted(f['cards'], 'card')})"
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
        rel = "a tie with this plan" if abs(ch) < 1e-12 else \
            change_text(-ch, better="better than this plan", worse="more than this plan")
        head = "A better plan exists" if d["status"] == "feasible" else "The best feasible plan"
        lines.append(f"{head} (minimising {d['objective']}): {_plan_short(p)}, "
                     f"{_money(p['cost'], p['cost_unit'])}, {p['finish_days']:.2f} d ({rel}).")
    return lines


def request_lines(d: dict[str, Any], sc: Scenario) -> list[str]:
    unit = d["cost_unit"]
    lines = [f"tpopt explain: {sc.name}: feasible; the optimum (minimising {d['objective']}, status {d['status']}):",
             f"Plan: {plan_line(d['plan'])}",
             f"Cost {_money(d['cost'], unit)}, finish {d['finish_days']:.2f} d.",
             *(footing_lines(d["footing"]) if d.get("footing") else []), ""]
    if d.get("analysis_skipped"):
        lines.append(f"Binding constraints: not analysed: {d['analysis_skipped']}.")  # as tpopt solve's report
    elif not d["binding"]:
        lines.append("Binding constraints: none (no single constraint holds the optimum where it is).")
    else:
        lines.append("Binding constraints (dropping any one alone admits a better plan):")
        for b in d["binding"]:
            v = b.get("violates", {})
            viol = (f"; it has {quantity_text(v['value'], v['unit'])} against {quantity_text(v['limit'], v['unit'])}"
                    if "value" in v else "")
            lines.append(f"  {b['name']}: without it {_plan_short(b['plan_without'])} would reach "
                         f"{_objective_text(b['objective_without'], d['objective'], unit)}{viol}")
    lines += [f"  {name}: not decided (time limit reached)" for name in d.get("binding_undecided", [])]
    if (d.get("solver") or {}).get("time_limit_reached"):
        lines.insert(1, limit_line(d["solver"]))
    return lines


# ---------------------------------------------------------------- the footing (tpopt.optimizer.footing)

def _short(source: str, limit: int = 72) -> str:
    s = " ".join(source.split())
    return s if len(s) <= limit else s[:limit - 3].rstrip() + "..."


CALIBRATED_ON_CHARS = 100
"""The longest "calibrated on ..." label the footing prints whole (its runs and tables; a longer one is cut at a word,
the whole source in the JSON's ``footing.parameters[].source``)."""


def _cut_at_word(text: str, limit: int) -> str:
    """``text`` whole when it fits ``limit`` characters, else cut at the last word that fits, with "..."."""
    s = " ".join(text.split())
    if len(s) <= limit:
        return s
    head = s[:limit - 3]
    return (head.rsplit(" ", 1)[0] if " " in head else head).rstrip(" ,;") + "..."


SHORT = {"gemm_efficiency": "GEMM", "attention_efficiency": "attention", "attention_bwd_ratio": "attention bwd",
         "memory_efficiency": "memory", "kernel_overhead": "kernel", "fp8_gemm_ratio": "FP8 GEMM",
         "fp4_gemm_ratio": "FP4 GEMM", "mxfp8_gemm_ratio": "MXFP8 GEMM", "tp_efficiency": "scale-up",
         "dp_efficiency": "scale-out"}
"""Text labels of the parameters (the JSON names them as performance.toml does)."""


def _price_text(pr: dict[str, Any]) -> str:
    if pr["card_hour"] is None:
        return "price: none (costs in card-hours)"
    if pr["provenance"] == "scenario":
        return (f"price: {pr['card_hour']:g} USD/card-h, the scenario's own ({pr['source'].split(': ')[-1]})"
                + _nic_price_text(pr))
    old = f", older than 6 months ({pr['age_months']} months at {pr['as_of']})" if pr.get("stale") else ""
    if pr["provenance"] == "user catalog":  # the file's own words and name (tpopt.optimizer.footing.price)
        return (f"price: {pr['card_hour']:g} USD/card-h, user catalog {pr['date']}, {pr['kind']}{old}: "
                f"{pr['source']}" + _nic_price_text(pr))
    return (f"price: {pr['card_hour']:g} USD/card-h, catalog {pr['date']}, {pr['kind']}{old} (check your provider)"
            + _nic_price_text(pr))


def _nic_price_text(pr: dict[str, Any]) -> str:
    """The NIC-hours the cost bills beside the card-hours (cost = card-hours x card price + NIC-hours x NIC
    price), so that card-hours x card price is not read as the whole cost."""
    nic, share = pr.get("nic_hour") or 0.0, pr.get("nic_share")
    if nic <= 0 or share is None:
        return ""
    return f"; plus {nic:g} USD per NIC-hour ({share * 100:.1f} % of the cost)"


def evidence_lines(e: dict[str, Any] | None) -> list[str]:
    """The footing's evidence (tpopt.optimizer.footing.evidence): the plan's own step-time sigma with its
    reasons (a stated sigma: its source, which names a card on priors and the evidence's sigma), the assumption
    an own calibration's file makes where it does not record what its runs covered, and P(on time) at it; "may
    not fit" with the margin; a fitted option within a prior card's uncertainty, named."""
    if not e:
        return []
    why = e["source"] if e.get("stated") else "; ".join(e["reasons"]) if e["reasons"] else \
        "a fitted card and stack, inside the fitted range" if "uncertainty.toml" in e["source"] else e["source"]
    if e.get("assumption"):  # a calibration of one's own that does not record what its runs covered
        why = f"{why}; {e['assumption']}"
    p = f"; P(on time) {probability_text(e['p_on_time'])} at this sigma" if e.get("p_on_time") is not None else \
        f"; P(on time) {e['p_on_time_note']}" if e.get("p_on_time_note") else ""
    lines = [f"step-time sigma {e['sigma']:.3f}: {why}{p}"]
    m = e.get("memory")
    if m and m["may_not_fit"] and m["margin"] >= 0:  # over the limit: the constraints table says VIOLATED
        lines.append(f"memory MAY NOT FIT: peak {m['peak_gib']:.1f} of {m['limit_gib']:.1f} GiB usable, margin "
                     f"{m['margin'] * 100:.1f} % within the memory model's error {m['error'] * 100:.0f} %; usable: "
                     f"{m['limit_source']}")
    alt = e.get("fitted_alternative")
    if alt and alt["within"]:
        lines.append(f"the card rests on priors; a fitted option is within its uncertainty: {alt['accelerator']}, "
                     f"{alt['cards']} cards, {alt['objective'].replace('_', ' ')} x{alt['ratio']:.3f} "
                     f"(within e^sigma = {math.exp(alt['sigma']):.3f})")
    return lines


def stated_lines(stated: list[dict[str, Any]] | None) -> list[str]:
    """The footing's stated inputs (tpopt.optimizer.footing.stated_inputs): "stated X: value; modelled: figure
    (the plan it leads to)" where the model has a figure, else the stated value with what it costs the plan."""
    out, rest = [], []
    for e in stated or []:
        line = f"stated {e['input']}: {e['stated']}"
        if e["input"] not in OWN_LINE:
            rest.append(f"{e['input']} {e['stated']}")
            continue
        if e.get("modelled"):
            line += f"; modelled: {e['modelled']}"
            alt = e.get("modelled_plan")
            if alt and alt.get("feasible"):
                word = "cost" if alt["objective"] == "cost" else "finish"
                line += (f" ({alt['cards']:,} cards, recompute {alt['recompute']}, {word} {alt['value']:,.0f} "
                         f"{alt['unit']}, {(alt['ratio'] - 1) * 100:+.1f} %)")
            elif alt is not None:
                line += " (no plan fits with modelled activations)"
            if e.get("limit_source"):
                line += f"; usable: {e['limit_source']}"
        elif e.get("binds"):
            line += " (binds)"
        out.append(line)
    return out + (["stated: " + "; ".join(rest)] if rest else [])


PRIOR_DOMINATED = "calibrated (prior-dominated"
"""How tpopt calibrate's source text of a fitted parameter the runs did not identify begins
(:func:`tpopt.optimizer.calibrate.source_of`)."""


OWN_LINE = ("activation budget", "input pipeline", "stack", "precision", "context parallelism")
"""Stated inputs printed on a line of their own; the others share one "stated:" line."""


def footing_lines(f: dict[str, Any], width: int = 100) -> list[str]:
    """The footing as 2-4 text lines (from the dict :func:`footing` returns, the JSON's figures): the
    model, stack and MFU; the parameters by provenance; the price; each wrapped to ``width``."""
    mfu_text = f"{f['mfu'] * 100:.1f} %" if f.get("mfu") is not None else "-"
    peak = "FP16" if "FP16" in f["mfu_convention"] else "BF16"
    if f["step_time_model"] == "flat":
        model = f"flat step time (hardware.efficiency = {f['efficiency']:g} stated; without it, per-operation)"
    else:
        model = "per-operation step time (no hardware.efficiency stated)"
        if f.get("throughput_scale") is not None:
            model += f", throughput x {f['throughput_scale']:g}"
    of = f" ({f['of']})" if f.get("of") else ""
    lines = [f"Footing{of}: {model}",
             f"stack {f['stack']}; implied MFU {mfu_text} (model FLOPs 6N + attention, dense {peak} peak)"]
    if f.get("recipe"):
        lines.append(f"assumed: {f['recipe']}")
    if f.get("recipe_vendor"):
        lines.append(f"assumed: {f['recipe_vendor']}")
    if f.get("dispatcher"):
        lines.append(f"assumed: {f['dispatcher']}")
    groups: dict[str, list[str]] = {}
    for p in f["parameters"]:
        shown = f"{p['value'] * 1e6:.3g} us" if p["name"] == "kernel_overhead" else f"{p['value']:.3g}"
        label = p["provenance"]
        if label == "calibrated":
            on = p["source"].split(" on ", 1)[1] if " on " in p["source"] else p["source"]
            on = _cut_at_word(on.split(' (')[0], CALIBRATED_ON_CHARS)
            # a parameter the runs did not identify (calibrate.source_of) is not "calibrated on" them
            label = (f"prior-dominated (not identified by {on}):" if p["source"].startswith(PRIOR_DOMINATED)
                     else f"calibrated on {on}:")
        groups.setdefault(label, []).append(f"{SHORT.get(p['name'], p['name'])} {shown}")
    if groups:
        order = sorted(groups, key=lambda g: (not g.startswith("calibrated"), g != "measured", g))
        lines.append("parameters: " + "; ".join(f"{g} {', '.join(groups[g])}" for g in order))
    lines.append(_price_text(f["price"]))
    lines += stated_lines(f.get("stated"))
    lines += evidence_lines(f.get("evidence"))
    out: list[str] = []
    for i, line in enumerate(lines):
        out += textwrap.wrap(line if i == 0 else "  " + line, width, subsequent_indent="    ",
                             break_on_hyphens=False)
    return out


def sweep_footing_lines(rows: list[dict[str, Any]]) -> list[str]:
    """One footing line per accelerator of a sweep, from its rows' footing cells (the CSV/JSON columns), unwrapped."""
    out = []
    for acc in dict.fromkeys(r["accelerator"] for r in rows if r.get("step_model")):
        mine = [r for r in rows if r["accelerator"] == acc and r.get("step_model")]
        mfus = sorted(r["mfu"] for r in mine if r.get("mfu") is not None)
        span = "-" if not mfus else f"{mfus[0] * 100:.1f} %" if mfus[0] == mfus[-1] else \
            f"{mfus[0] * 100:.1f}-{mfus[-1] * 100:.1f} %"
        line = (f"Footing ({acc}): {mine[0]['step_model']} step time; stack {mine[0]['stack']}; implied MFU "
                f"{span}; price {mine[0]['price_provenance']}")
        cells = mine[0].get("parameter_provenance")
        if cells:
            groups: dict[str, list[str]] = {}
            for item in cells.split():
                name, _, how = item.partition(":")
                groups.setdefault(how, []).append(SHORT.get(name, name))
            line += "; parameters " + "; ".join(f"{g} {', '.join(v)}" for g, v in groups.items())
        out.append(line)  # one line: the command wraps it at its output width (wrapped here at 118, it wrapped twice)
    return out


# ---------------------------------------------------------------------------------------------
# market offers


def _offer_terms(o: dict[str, Any]) -> str:
    if o.get("parts"):
        return "a mix: " + " + ".join(f"{p['share']:.0%} {p['offer']}" for p in o["parts"])
    if o["term_days"] is not None:
        terms = f"term {o['term_days']:g} d paid whole"
    else:
        terms = "per-second billing" if o["billing_s"] <= 1 else f"billed per {o['billing_s']:g} s"
        if o["min_commitment_h"] > 0:
            terms += f", at least {o['min_commitment_h']:g} h"
    return terms


def _usd(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.2f}"


def checkpoint_cost_lines(c: dict[str, Any]) -> list[str]:
    """The bill as cost lines: compute, checkpoint storage, checkpoint egress (prices, date, source)."""
    size = f"{c['copies']} x {c['checkpoint_gb']:,.1f} GB checkpoints"
    if not c["priced"]:
        return [f"Cost lines: compute {c['compute_cost']:,.0f} USD; checkpoint storage and egress not priced "
                f"for {c['region']} ({size}: add storage_gb_month to its [region] in offers.toml)"]
    out = [f"Cost lines: compute {_usd(c['compute_cost'])} USD; checkpoint storage {_usd(c['storage_cost'])} USD "
           f"({size} at {c['storage_gb_month']:g} USD per GB-month over the run); egress {_usd(c['egress_cost'])} "
           f"USD ({c['egress_copies']} cop{'y' if c['egress_copies'] == 1 else 'ies'} out of {c['region']} at "
           f"{c['egress_gb']:g} USD per GB); storage prices dated {c['date']} ({c['source']})"]
    return out + [f"  note: {n}" for n in c["notes"]]


def market_infeasible_lines(out: dict[str, Any]) -> list[str]:
    """No offer admits a plan: each offer's status (the relaxations of one space do not span offers)."""
    m = out["market"]
    lines = [f"No plan on any offer (status {out['status']}; as of {m['as_of']}):"]
    if (out.get("solver") or {}).get("time_limit_reached"):  # not a proof: the offers were cut short
        lines = [f"No plan found on any offer within the time limit (status {out['status']}: not decided; "
                 f"as of {m['as_of']}):"]
    lines += [f"  {r['offer']}: {r['status']}" for r in m["offers"]]
    if out["status"] != "infeasible":  # some offer not proven infeasible: never the advice for infeasibility
        phase = (out.get("solver") or {}).get("limit_phase")
        lines.append(f"Time limit reached{f' while {phase}' if phase else ''}: give it more time (--time-limit) "
                     "to decide the offers marked unknown.")
        return lines
    lines.append("Each offer is at most its available cards (market.available) and under the site power cap "
                 "(power.site); relax the deadline, the budget or the caps, or add offers (tpopt catalog offers).")
    return lines + (market_conflict_lines(out) if "market_conflict" in out else [])


def market_conflict_lines(out: dict[str, Any]) -> list[str]:
    """No offer admits a plan, explained (:mod:`tpopt.optimizer.market_explain`): the offer nearest a plan, its
    conflict, and the smallest single changes (the shared inputs verified on the whole market)."""
    near = out["market_conflict"]
    why = (f"its fastest plan, with the deadline and budget dropped, finishes in {near['fastest_finish_days']:.2f} d, "
           "the soonest of any offer" if near["fastest_finish_days"] is not None else
           "no offer has a plan at any deadline; it can use the most cards")
    cap = {"search.max_cards": "max_cards"}.get(near["cards_cap"]) or (
        f"{near['available']:,} available ({near['cards_cap']})" if near["cards_cap"].startswith("market")
        else f"the site power cap ({near['cards_cap']})")
    lines = ["", f"Nearest offer: {near['offer']} ({why}; at most {near['max_cards']:,} cards: {cap})."]
    if near.get("run_deadline_days") is not None:  # a spot offer: its plans wait for capacity
        share = level_text(near["spot_availability"])
        lines.append(f"Its plans wait for spot capacity (obtainable on {share} of days): its "
                     f"deadline.finish below is the run on capacity against R + a (D - R) = "
                     f"{near['run_deadline_days']:.2f} d, the expected calendar finish R + (T - R) / a against D.")
    lines += [""] + (["Conflict: not isolated (time limit reached before a conflict was found)."]
                     if out.get("conflict_status") else
                     [f"On {near['offer']}: " + conflict_lines(out["conflict_detail"])[0]]
                     + conflict_lines(out["conflict_detail"])[1:])
    rl = relaxation_lines(out["relaxations"])
    if rl:
        cap = ", max cards" if any(r["parameter"] == "max_cards" and r.get("scope") == "market"
                                   for r in out["relaxations"]) else ""
        lines += ["", f"Deadline, tokens, reserved days, input rate, budget{cap} and storage bandwidth, where they "
                      "help: the smallest value that gives the market a plan (re-solved on every offer; one printed "
                      f"unit less gives none); everything else: on {near['offer']}."] + rl
    return lines


def level_text(q: float) -> str:
    """A confidence level as the user gave it, in percent with the space the reports put before every "%"
    (0.95 -> "95 %", 0.999 -> "99.9 %"): rounding it to whole or tenth points would state a level nobody asked
    (99.95 % read "100.0 %"). The one text of a level in every report (asked, target, reached or not)."""
    return f"{100 * q:g} %"


def probability_text(p: float) -> str:
    """A probability reached (P(on time), P(finish <= deadline)) to a tenth of a point, with the space the reports
    put before every "%" (0.885 -> "88.5 %"): the one text of a probability in every report (a level asked:
    :func:`level_text`)."""
    return f"{100 * p:.1f} %"


def spot_policy_lines(entry: dict[str, Any] | None) -> list[str]:
    """The spot policy under the chance constraint (tpopt.optimizer.spot_policy): the chosen way to run the
    cheapest offer pair, its expected cost and P(on time) against all spot and all on-demand, and its terms."""
    if not entry:
        return []
    if entry["best"] is None:
        e = entry["pairs"][0]
        return [f"Spot policy: no way to run {e['spot_offer']} / {e['ondemand_offer']} meets "
                f"P(on time) >= {level_text(e['confidence'])}; all on-demand is the nearest "
                f"(P(on time) {probability_text(e['chosen']['p_on_time'])})"] + pick_misses_lines(entry)
    e = entry["pairs"][entry["best"]]
    c, t = e["chosen"], e["terms"]
    return _policy_text(e, c, t) + pick_misses_lines(entry)


def pick_misses_lines(entry: dict[str, Any]) -> list[str]:
    """The market's pick run all on spot where the spot terms say it misses the confidence
    (tpopt.optimizer.spot_policy.pick_misses): the policy's model of the run (the rate's uncertainty too) is
    stricter than the finish-time law the pick met."""
    m = entry.get("pick_misses")
    if not m:
        return []
    e = entry["pairs"][m["pair"]]
    p = m["policy"]
    run = (f"the pair's policy meets it: {p['policy']}, expected {p['expected_cost']:,.0f} USD, P(on time) "
           f"{probability_text(p['p_on_time'])}" if m["policy_meets"] else "no way to run the pair meets it")
    return [f"Caveat: the plan runs all on spot ({m['offer']}); the spot policy's model of that run (capacity on "
            f"{level_text(m['availability_per_day'])} of days, the preemption rate uncertain, reserved days "
            f"included) gives P(on time) {probability_text(m['all_spot_p_on_time'])} (mean finish "
            f"{m['all_spot_mean_finish_days']:.2f} d), "
            f"below the {level_text(e['confidence'])} asked; {run}"]


def _policy_text(e: dict[str, Any], c: dict[str, Any], t: dict[str, Any]) -> list[str]:
    others = "; ".join(f"{o['policy']} {o['expected_cost']:,.0f} USD, P(on time) {probability_text(o['p_on_time'])}"
                       for o in e["candidates"] if o["policy"] != c["policy"])
    return [f"Spot policy ({e['spot_offer']} then {e['ondemand_offer']}, {e['cards']:,} cards): {c['policy']}: "
            f"expected {c['expected_cost']:,.0f} USD, P(on time) {probability_text(c['p_on_time'])} "
            f"(asked {level_text(e['confidence'])}); {others}; spot pays below {e['break_even_spot_price']:.3g} "
            "USD per card-hour",
            f"  spot terms: {t['preempt_per_card_hour']:g} preemptions per card-hour ({t['preempt_source']}), rate "
            f"cv {t['rate_cv']:g} ({t['rate_cv_source']}); capacity obtainable on "
            f"{level_text(t['availability_per_day'])} of days ({t['availability_source']}); a switch costs "
            f"{t['switch_s']:,.0f} s"]


def watts_text(w: float) -> str:
    """A power in the unit that fits: W below 1 kW, kW below 1 MW, then MW (a 40 kW cap is "40.0 kW")."""
    if abs(w) >= 1e6:
        return f"{w / 1e6:,.2f} MW"
    if abs(w) >= 1e3:
        return f"{w / 1e3:,.1f} kW"
    return f"{w:,.0f} W"


def energy_lines(w: dict[str, Any]) -> list[str]:
    """The energy's cost and emissions at the offer's region (the market's [power] and energy.toml figures):
    cost = MWh x 1,000 x USD/kWh, inside a rented card's price (stated, not added); tCO2e = MWh x gCO2e/kWh / 1,000."""
    mwh, region = w["energy_mwh"], w.get("region", "the region")
    if w.get("energy_cost") is None:
        cost = f"no energy price for {region}"
    else:
        cost = (f"{_usd(w['energy_cost'])} USD at {w['energy_price_kwh']:g} USD/kWh (dated "
                f"{w['energy_price_date']}: {w['energy_price_source']}; in the card-hour price, not added to the bill)")
    if w.get("tco2e") is None:
        carbon = f"no carbon figure for {region}"
    else:
        carbon = (f"{w['tco2e']:,.3g} tCO2e at {w['carbon_g_kwh']:g} gCO2e/kWh (dated {w['carbon_date']}: "
                  f"{w['carbon_source']})")
    return [f"Energy: {mwh:,.3g} MWh (site power x finish time less any waits for spot capacity, training draw for "
            "the whole run: an upper bound): "
            f"{cost}; {carbon}"]


def market_lines(out: dict[str, Any]) -> list[str]:
    """The market block under the plan line: the offer used (price, terms, date, source, notes), the spot
    figures, then each offer's best plan."""
    m = out.get("market")
    if not m or not m.get("offer"):
        return []
    o = m["offer"]
    lines = [f"Offer: {o['id']}, {o['price_card_hour']:g} USD per card-hour ({_offer_terms(o)}), "
             f"{o['available']:,} cards available; price dated {o['date']} ({o['source']})"]
    lines += [f"  note: {n}" for n in o["notes"]]
    p = m.get("preemption")
    if p:
        lines.append(f"Spot share {m['spot_share']:.0%}: {p['expected_preemptions']:.2f} preemptions expected "
                     f"({p['rate_per_card_hour']:g} per card-hour: {p['rate_source']}), each losing "
                     f"{p['seconds_lost_per_preemption']:,.0f} s (redo since the checkpoint, restore, "
                     f"{p['reacquire_s']:,.0f} s to reacquire); they cost {p['time_cost_days']:.3f} d and "
                     f"{p['cost']:,.0f} USD; {save_interval_text(p)}")
    lines += capacity_lines(m.get("capacity"))
    w = m.get("power")
    if w:
        cap = ""
        if w["cap_mw"] is not None:
            verdict = "binds: without it a better plan exists" if w["binding"] else "does not bind"
            if w["binding"] is None:
                verdict = "not decided (time limit reached)"
            cap = f"; site cap {watts_text(w['cap_mw'] * 1e6)} ({w['cap_cards']:,} cards), {verdict}"
        lines.append(f"Power: {watts_text(w['site_mw'] * 1e6)} at the site ({watts_text(w['it_mw'] * 1e6)} IT x PUE "
                     f"{w['pue']:g}; {w['card_w']:g} W per card, {w['host_overhead_w']:g} W per host); energy "
                     f"{w['energy_mwh']:,.1f} MWh over the run{cap}")
        lines += energy_lines(w)
    elif m.get("power", 0) is None:
        lines.append(f"Power: no power figure for {o['accelerator']} (energy and tCO2e not reported; add a "
                     f"[power.{o['accelerator']}] table to offers.toml)")
    c = m.get("checkpoints")
    if c:
        lines += checkpoint_cost_lines(c)
    lines += spot_policy_lines(m.get("spot_policy"))
    lines.append(f"Offers compared (as of {m['as_of']}; one exact sub-problem each):")
    width = max(len(r["offer"]) for r in m["offers"])
    chosen = next((r.get("cost") for r in m["offers"] if r["offer"] == o["id"]), None)
    for r in m["offers"]:
        mark = "*" if r["offer"] == o["id"] else " "
        what = (f"{r['cards']:>6,} cards {r['finish_days']:8.2f} d {r['cost']:>14,.0f} USD" if "cards" in r
                else bounded_offer_text(r["bound"], chosen) if r.get("bound") is not None else f"{r['status']}")
        flags = ["illustrative" if n.startswith("assumption") else "old price" for n in r["notes"]]
        flags = (["priors only"] if r.get("priors_only") else []) + flags
        if r.get("spot_availability") is not None:  # the finish counts the waits for spot capacity: say on what
            flags.append(f"capacity on {level_text(r['spot_availability'])} of days: +{r['capacity_wait_days']:.2f} d")
        flags = (["not proven"] if "cards" in r and r["status"] != "optimal" else []) + flags
        lines.append(f" {mark} {r['offer']:<{width}} {what}" + qualifiers_text(flags))
    if m.get("undecided"):
        return lines + market_undecided_lines(m)
    lines.append("Binding constraints: not analysed across offers (each offer's plan above is proven optimal on "
                 "that offer; the chosen plan's checks show which limits it meets with no slack).")
    return lines


def save_interval_text(p: dict[str, Any]) -> str:
    """The spot plan's save interval and where it comes from (tpopt.optimizer.market.interval_basis): a stated
    interval beside the optimum it is not, or the auto interval as the optimum for the combined failure rate (or
    the checkpoint's write time it is raised to), each with the optimum without preemptions."""
    tau, best, calm = p["save_interval_s"], p["optimal_interval_s"], p["optimal_interval_without_s"]
    basis = p.get("interval_basis", "optimum")
    if basis == "stated":
        return (f"save interval {tau:,.0f} s, stated (checkpoint.save_interval; the optimum for the combined failure "
                f"rate is {best:,.0f} s, without preemptions {calm:,.0f} s)")
    why = "the checkpoint's write time, above the optimum for the combined failure rate" if basis == "write time" \
        else "the optimum for the combined failure rate"
    return f"save interval {tau:,.0f} s, auto ({why}; without preemptions {calm:,.0f} s)"


def capacity_lines(c: dict[str, Any] | None) -> list[str]:
    """The chosen spot plan's capacity assumption (tpopt.optimizer.market.capacity_figures): on what share of days
    spot capacity is obtainable, from where, and the expected waits its finish counts (not billed)."""
    if not c:
        return []
    if c["availability_per_day"] >= 1.0:
        return [f"Spot capacity: obtainable on every day ({c['source']}); no waits for it in the finish"]
    return [f"Spot capacity: obtainable on {level_text(c['availability_per_day'])} of days ({c['source']}); the finish "
            f"counts {c['wait_days']:.2f} d of expected waits for it ((1 - a) / a days per day on capacity, "
            "Geometric), not billed"]


def bounded_offer_text(bound: float, chosen: float | None) -> str:
    """Why an offer decided by its cost bound (tpopt.optimizer.market.offer_bound) was not solved: no plan on it
    bills less than its compute floor (the training FLOPs at the card's best rate, as card-hours at the offer's
    price), and that floor is already above the chosen plan's cost, so none of its plans can win."""
    than = "the chosen plan's" if chosen is None else f"the chosen plan's {chosen:,.0f} USD"
    return (f"not solved: its cost is at least {bound:,.0f} USD (training FLOPs at the card's best rate, "
            f"billed at this price), above {than}, so it cannot win")


def market_undecided_lines(m: dict[str, Any]) -> list[str]:
    """Offers the time limit left undecided: how many were decided, which were not, and that the plan above
    is the best found, not proven the best over the offers."""
    n, left = len(m["offers"]), m["undecided"]
    return [f"Time limit reached: {n - len(left)} of {n} offers decided; undecided: {', '.join(left)}.",
            "The plan above is the best found so far, not proven the best over the offers: an undecided offer "
            "may hold a better one (give it more time with --time-limit)."]
