"""Text of `tpopt rl` (presentation only: every number comes from :func:`tpopt.optimizer.rl.report`)."""

from __future__ import annotations

from typing import Any

from tpopt.cli.render import console_text, constraints_table, output_width, value_text
from tpopt.models.units import fmt_duration
from tpopt.presentation import footing_lines, plan_line


def _n(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f} %"


def decision_line(p: dict[str, Any]) -> str:
    """One RL plan in a line: cards, split, engines, staleness, weight sync."""
    if p["placement"] == "shared":
        split = (f"shared: {p['cards']} cards train and generate in turn (engines of TP {p['rollout_tp']}, "
                 f"batch {p['rollout_batch']:,})")
    else:
        split = (f"separate: learner {p['learner_cards']} cards, rollout {p['rollout_cards']} cards "
                 f"(engines of TP {p['rollout_tp']}, batch {p['rollout_batch']:,})")
    mode = "one-step async" if p["staleness"] else "synchronous"
    return f"{p['accelerator']} x {p['cards']} | {split} | {mode} | {p['weight_sync']} weight sync"


def _short(p: dict[str, Any]) -> str:
    return (f"{decision_line(p)}: {_n(p['cost'], 0)} {p['cost_unit']}, finish {_n(p['finish_days'], 2)} d, "
            f"bottleneck {p['bottleneck']}")


def _stage_lines(out: dict[str, Any]) -> list[str]:
    s = out["stages"]
    g, v, lr, w = s["generation"], s["verification"], s["learning"], s["weight_sync"]
    q = s["kept"]
    rates = s["stage_rates"]
    lines = [f"Stages per step ({s['samples_per_step']:,} samples; {q * 100:.1f} % kept = "
             f"{s['samples_per_step'] * q:,.1f} reach the update):",
             f"  {'stage':<13}{'time/step':>11}{'samples/s':>11}{'useful/s':>10}"]
    gen_note = (f"prefill {_n(g['prefill_s'])} s, decode {_n(g['decode_s'])} s ({g['decode_bound']}-bound"
                + (f", TP all-reduces {_n(g['tp_comm_s'])} s" if g["tp_comm_s"] else "") + f"); "
                f"{g['engines']} engine(s) x batch {g['batch']:,} (fits {g['batch_fit']:,}); longest response "
                f"{g['longest_response']:,.0f} tokens, the tail is {_pct(g['tail_stretch'])} of it")
    lines.append(f"  {'generation':<13}{_n(g['time_s']):>9} s{_n(g['rate']):>11}{_n(rates['generation']):>10}   "
                 + gen_note)
    if v["kind"] != "none":
        lines.append(f"  {'verification':<13}{_n(v['time_s']):>9} s{_n(v['rate']):>11}"
                     f"{_n(rates['verification']):>10}   {v['kind']}")
    lines.append(f"  {'learning':<13}{_n(lr['time_s']):>9} s{_n(lr['rate']):>11}{_n(rates['learning']):>10}   "
                 f"full batch {_n(lr['full_batch_s'])} s")
    sync = (f"  {'weight sync':<13}{fmt_duration(w['time_s']):>11}{'':>21}   {w['bytes_per_card'] / 1e9:,.2f} GB "
            f"per rollout card, {w['bytes_total'] / 1e9:,.1f} GB in all")
    if w["swap_s"]:
        sync += f"; learner state to host memory and back {fmt_duration(w['swap_s'])}"
    lines.append(sync)
    lines.append(f"Bottleneck: {s['bottleneck']} (pipeline bound min(r_learn, q min(r_gen, r_verify)) = "
                 f"{_n(s['pipeline_bound'])} useful samples/s; the deadline needs {_n(s['needed_rate'])}; "
                 f"this plan trains {_n(s['effective_rate'])})")
    return lines


def _cycle_lines(out: dict[str, Any]) -> list[str]:
    c, p, s = out["cycle"], out["plan"], out["stages"]
    sync = fmt_duration(s["weight_sync"]["time_s"])
    if p["staleness"]:
        head = (f"Cycle: {_n(c['cycle_s'])} s one-step async = max(rollout {_n(s['rollout_s'])} s, learning "
                f"{_n(s['learning']['time_s'])} s) + sync {sync}; synchronous would take {_n(c['sync_s'])} s")
    else:
        swap = s["weight_sync"]["swap_s"]
        head = (f"Cycle: {_n(c['cycle_s'])} s synchronous = rollout {_n(s['rollout_s'])} s + learning "
                f"{_n(s['learning']['time_s'])} s + sync {sync}"
                + (f" + state swap {fmt_duration(swap)}" if swap else "")
                + (f"; one-step async would take {_n(c['async_s'])} s" if c.get("async_s") else ""))
    lines = [head]
    be = []
    if c.get("break_even_kept_plan") is not None:
        be.append(f"for this split when kept > {_pct(c['break_even_kept_plan'])} (q_sync x T_async / T_sync)")
    if "break_even_kept" in c:
        be.append("with every plan re-optimised: never, even at kept 100 %" if c["break_even_kept"] is None else
                  f"with every plan re-optimised when kept > {_pct(c['break_even_kept'])}")
    if be:
        lines.append("One-step async pays off " + "; ".join(be))
    return lines


def rl_text(out: dict[str, Any], timing: bool = False) -> str:
    st = out["solver"]
    listed = "RL decisions not all listed" if st["points"] is None else f"{st['points']:,} RL decisions"
    head = (f"Status: {out['status']} ({out['scenario']}; {listed}, "
            f"{st['learner_keys_solved']} learner card counts examined"
            + (f", {st['wall_s']:.2f} s" if timing else "") + ")")
    if st.get("time_limit_reached"):
        head += "\n" + _limit_line(out)
    elif out.get("analysis") == "time limit reached":
        head += "\nAnalysis: time limit reached before it finished; binding constraints, alternatives and the " \
                "break-even are left out (raise --time-limit)"
    if out["status"] == "unknown":
        return _lines(head, *_assumption_lines(out))
    if out["status"] != "optimal" and out["status"] != "feasible":
        return _lines(head, *_infeasible_lines(out), *_assumption_lines(out))
    p, f, m = out["plan"], out["finish"], out["memory"]
    lines = [head, f"Plan: {decision_line(p)}"]
    if p.get("learner"):
        lines.append(f"Learner: {plan_line(p['learner'])}")
    if out.get("footing"):
        lines += footing_lines(out["footing"], max(60, output_width()))
    lines += _stage_lines(out) + _cycle_lines(out)
    lines.append(f"Finish: {_n(f['finish_days'], 2)} d = {_n(f['reserved_days'], 2)} d reserved + "
                 f"{out['stages']['steps']:,} steps x {_n(out['cycle']['cycle_s'])} s x "
                 f"(1 + {f['overhead'] * 100:.2f} % "
                 f"overhead; saves every {p['save_interval_s']:,.0f} s, {p['save_mode']}) against "
                 f"{_n(f['deadline_days'], 2)} d; cost {_n(f['cost'], 0)} {f['cost_unit']}")
    mem = (f"Memory per card: rollout weights {_n(m['rollout_weights_gib'])} + KV pool {_n(m['kv_pool_gib'])} "
           f"({_n(m['kv_need_gib'])} used, {m['kv_per_token_kib']:,.0f} KiB per token) + common "
           f"{_n(m['common_gib'])} of {_n(m['usable_gib'])} GiB; learner {_n(m['learner_gib'])} GiB")
    if m.get("handoff_staged_gib") is not None:
        mem += (f"; hand-off (staged: learner + received weights + common) {_n(m['handoff_switch_gib'])} GiB, "
                f"peak {_n(m['handoff_staged_gib'])} GiB; naive order (KV before the learner's state is freed) "
                f"{_n(m['handoff_naive_gib'])} GiB")
    lines.append(mem)
    body = [constraints_table(out["constraints"])]
    tail = []
    if out.get("binding"):
        tail.append("Binding constraints (dropping any one of these alone admits a better plan):")
        for b in out["binding"]:
            v = b["violates"]
            tail.append(f"  {b['name']}: without it, {_short(b['plan_without'])} ({b['saving'] * 100:.1f} % better); "
                        f"it has {value_text(v.get('value'), v.get('unit', ''))} against "
                        f"{value_text(v.get('limit'), v.get('unit', ''))}".rstrip())
    elif out.get("binding") is not None:
        tail.append("Binding constraints: none (dropping any single family admits no better plan)")
    if out.get("alternatives"):
        tail.append("Alternatives:")
        for a in out["alternatives"]:
            if a["feasible"]:
                tail.append(f"  {a['alternative']}: {a['delta'] * 100:+.1f} % ({_short(a['plan'])})")
            else:
                why = ", ".join(f"{r['name']}" + (f" ({value_text(r.get('value'), r.get('unit', ''))} > "
                                                  f"{value_text(r.get('limit'), r.get('unit', ''))})"
                                                  if r.get("limit") is not None else "")
                                for r in a["ruled_out_by"])
                tail.append(f"  {a['alternative']}: ruled out by {why}")
    return _lines(*lines, "") + console_text(*body) + _lines("", *tail, *_assumption_lines(out))


def _lines(*lines: str) -> str:
    """Plain lines, never wrapped (the table alone goes through rich at the fixed width)."""
    return "".join(f"{x}\n" for x in lines)


def _limit_line(out: dict[str, Any]) -> str:
    """What a run stopped by its time limit returns (``tpopt solve``'s wording)."""
    st = out["solver"]
    where = f" while {st['limit_phase']}" if st.get("limit_phase") else ""
    limit = f" ({st['time_limit_s']:g} s)" if st.get("time_limit_s") else ""
    if out["status"] == "feasible":
        return (f"Time limit reached{limit}{where}: best plan found, not proven optimal, gap unknown; no analysis "
                f"(raise --time-limit)")
    return f"Time limit reached{limit}{where}: no plan found and no proof that none exists (raise --time-limit)"


def _infeasible_lines(out: dict[str, Any]) -> list[str]:
    n = len(out["conflict"])
    if n == 0 and out.get("analysis") == "time limit reached":
        return ["No plan meets every constraint (proven); the time limit was reached before the conflict was "
                "analysed (raise --time-limit)"]
    what = "this constraint admits no plan" if n == 1 else f"these {n} constraints cannot hold together"
    lines = [f"Conflict: {what}"
             f" (dropping {'it' if n == 1 else 'any one of them'} admits a plan):"]
    for c in out["conflict_detail"]:
        if "detail" in c:
            lines.append(f"  {c['name']}: {c['detail']}")
        elif "plan" in c:
            unit = c.get("unit", "")
            lines.append(f"  {c['name']}: the best plan without it, {_short(c['plan'])}, has "
                         f"{value_text(c.get('value'), unit)} against a limit of "
                         f"{value_text(c.get('limit'), unit)}".rstrip())
        else:
            lines.append(f"  {c['name']}")
    if out.get("relaxations"):
        lines.append("Smallest single changes:")
        for r in out["relaxations"]:
            if r["helps"]:
                lines.append(f"  {r['parameter']} >= {r['required']:,} {r['unit']} (now {r['current']}): "
                             f"{_short(r['plan'])}")
            else:
                still = ", ".join(r.get("still_conflicting") or []) or "the layout rules"
                lines.append(f"  {r['parameter']}: cannot help alone ({still} still conflict)")
    return lines


def _assumption_lines(out: dict[str, Any]) -> list[str]:
    return ["", "Assumptions:"] + [f"  - {a}" for a in out.get("assumptions", [])]
