"""Terminal rendering of results (presentation only: numbers come from models/ and optimizer/).

Output is deterministic: without a terminal (pipes, files, tests) tables are 100 columns wide and
uncoloured, so the same inputs give the same bytes; in a terminal the width follows it (rich's
detection) and ``COLUMNS`` sets it anywhere.
"""

from __future__ import annotations

import io
import os
import re
import sys
import textwrap
from collections.abc import Sequence
from typing import Any, cast

from rich.console import Console, JustifyMethod, RenderableType
from rich.measure import Measurement
from rich.table import Table

from tpopt.models import families as F
from tpopt.models.plan import Scenario
from tpopt.models.units import fmt_count
from tpopt.presentation import (  # the plain-text pieces, shared with the API
    COUNT_UNITS,
    change_text,
    cp_note_text,
    footing_lines,
    layout_text,
    limit_line,
    model_text,
    moe_short,
    plan_line,
    quantity_text,
)

WIDTH = 100  # columns when stdout is not a terminal and COLUMNS is not set
MIN_WIDTH = 60


def output_width() -> int:
    """COLUMNS when set, else the terminal's width when stdout is one (rich's detection), else WIDTH."""
    cols = os.environ.get("COLUMNS", "").strip()
    if cols.isdigit() and int(cols) > 0:
        return max(int(cols), MIN_WIDTH)
    if sys.stdout.isatty():
        return max(Console(file=sys.stdout).width, MIN_WIDTH)
    return WIDTH


_TABLE_CHARS = frozenset("│┃━╇─┼")
_FLAG = re.compile(r"\[--[^\]]{0,40}\]")  # a flag to copy: "[--hw h100-sxm]"
_QTY = re.compile(r"(\d) (s|ms|d|h|%|GiB|GB|TB|GB/s|USD|cards|tokens|steps)(?=[\s,;.)]|$)")
_WALL = re.compile(r", [0-9.]+ s on [0-9]+ workers?")  # the sweep's timing, normalised by the transcripts
_LABEL = re.compile(r"^(\s*\S+(?: \S+)?\s{2,})\S")  # "  max_cost       now ...": continue under "now"


def fit_lines(text: str, width: int | None = None) -> str:
    """Plain report text fitted to ``width`` columns (default :func:`output_width`: COLUMNS, the terminal's
    width, or 100 when stdout is not a terminal): a longer line is wrapped at spaces, its continuation lines
    indented under the text after its label (or two columns deeper than the line). Words are never broken,
    so a number or a flag stays whole (a single word wider than the width keeps its line); table rows (box
    characters) are left as rich laid them out. JSON never comes through here."""
    width = width or output_width()
    out = []
    for line in text.split("\n"):
        if len(line) <= width or _TABLE_CHARS.intersection(line):
            out.append(line)
            continue
        lead = len(line) - len(line.lstrip(" "))
        m = _LABEL.match(line)
        hang = len(m.group(1)) if m and len(m.group(1)) <= width // 2 else lead + 2
        kept = _FLAG.sub(lambda f: f.group(0).replace(" ", "\x00"), line)  # "[--deadline 34.34d]" stays whole
        kept = _WALL.sub(lambda f: f.group(0).replace(" ", "\x00"), kept)  # ", 0.09 s on 2 workers" (timings)
        kept = _QTY.sub("\\1\x00\\2", kept)  # and "1,101 s": a number keeps its unit
        out += [w.replace("\x00", " ") for w in textwrap.wrap(kept, width, subsequent_indent=" " * hang,
                                                              break_long_words=False, break_on_hyphens=False)
                ] or [line]
    return "\n".join(out)


def width_groups(least: Sequence[int], width: int, sep: int) -> list[list[int]]:
    """Column indices in groups whose natural width (each column's ``least`` width plus ``sep`` between columns)
    fits ``width``; every group starts with column 0 (the name a row is read by), a column alone with it stays
    even when wider: one group when the whole table fits."""
    def need(idx: list[int]) -> int:
        return sum(least[i] for i in idx) + sep * (len(idx) - 1)

    groups: list[list[int]] = [[0]]
    for i in range(1, len(least)):
        if len(groups[-1]) > 1 and need(groups[-1] + [i]) > width:
            groups.append([0])
        groups[-1].append(i)
    return groups


NOTE_MIN = 24  # the narrowest a wrapped note column gets before the table is split into column groups instead


def aligned_lines(rows: Sequence[Sequence[str]], left: Sequence[int] = (0,), indent: str = "  ", gap: int = 2,
                  width: int | None = None, note: bool = False) -> list[str]:
    """A plain-text table (first row the header) fitted to ``width`` columns (default :func:`output_width`):
    columns padded to their widest cell, those in ``left`` left-aligned, the others right-aligned. As before
    where it fits; else, with ``note`` (the last column free text), the note wraps at spaces inside its own
    column when the other columns leave it at least :data:`NOTE_MIN`; else the columns split into groups that
    each fit (every group repeats column 0, a blank line between; :func:`width_groups`). Words are never cut."""
    width = width or output_width()
    n = len(rows[0])
    least = [max(len(r[i]) for r in rows) for i in range(n)]

    def line(cells: Sequence[str], idx: Sequence[int], widths: Sequence[int]) -> str:
        return (indent + (" " * gap).join(cells[k].ljust(widths[k]) if i in left else cells[k].rjust(widths[k])
                                          for k, i in enumerate(idx))).rstrip()

    def block(idx: Sequence[int]) -> list[str]:
        """The rows over the columns ``idx``, the note wrapped in its column where it is among them and the
        others leave it room (at least NOTE_MIN), or where it is alone with column 0."""
        widths = [least[i] for i in idx]
        room = width - len(indent) - sum(widths[:-1]) - gap * (len(idx) - 1)
        if not (note and idx[-1] == n - 1 and widths[-1] > room and (room >= NOTE_MIN or len(idx) <= 2)):
            return [line([r[i] for i in idx], idx, widths) for r in rows]
        out = []
        for r in rows:
            cells = [r[i] for i in idx]
            parts = textwrap.wrap(cells[-1], max(room, 1), break_long_words=False, break_on_hyphens=False) or [""]
            out.append(line([*cells[:-1], parts[0]], idx, [*widths[:-1], room]))
            out += [line([""] * (len(idx) - 1) + [q], idx, [*widths[:-1], room]) for q in parts[1:]]
        return out

    whole = len(indent) + sum(least) + gap * (n - 1)
    if whole <= width or (note and width - (whole - least[-1]) >= NOTE_MIN):
        return block(list(range(n)))
    out: list[str] = []
    for g, idx in enumerate(width_groups(least, width - len(indent), gap)):
        out += ([""] if g else []) + block(idx)
    return out


def console_text(*renderables: RenderableType, width: int | None = None) -> str:
    """The renderables as text ``width`` columns wide (default :func:`output_width`); a table that cannot
    fit without cutting cells is printed at its natural width instead (the terminal wraps its lines)."""
    buf = io.StringIO()
    width = width or output_width()
    probe = Console(file=io.StringIO(), width=10_000, emoji=False, highlight=False, markup=False)  # as printed
    sizes = [Measurement.get(probe, probe.options, r) for r in renderables if isinstance(r, Table)]
    need = [m.maximum for m in sizes if m.minimum > width]
    con = Console(file=buf, width=max([width] + need),
                  color_system="standard" if sys.stdout.isatty() else None, highlight=False, emoji=False,
                  markup=False)  # text as written: "[hardware] stack" or a name with "[/x]" is not a style tag
    for r in renderables:  # text lines wrap as fit_lines does (continuations indented), never by rich
        con.print(fit_lines(r, width) if isinstance(r, str) else r, soft_wrap=isinstance(r, str))
    return buf.getvalue()


def _num(x: float, digits: int) -> str:
    return f"{x:,.{digits}f}"


def metrics_table(m: dict[str, Any], title: str = "Plan evaluation") -> Table:
    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    t.add_column("quantity")
    t.add_column("value", justify="right")
    t.add_column("unit")
    # per-operation model: the breakdown of the stage class whose rank peaks (the memory family's value)
    peak = next((r for r in m.get("memory_by_class", ()) if r["stage"] == m.get("memory_peak_class")), None)
    part = peak or m
    where = f"; peak on the {peak['stage']} stage" if peak else ""
    rows = [
        ("memory per card", _num(m["memory_per_card_gib"], 1), f"GiB (usable {m['memory_limit_gib']:.1f}{where})"),
        ("  persistent states", _num(part["states_gib"], 1), "GiB"),
    ]
    if "expert_weights_gib" in m:
        rows.append(("    of which expert state", _num(m["expert_states_gib"], 1),
                     f"GiB (ZeRO over {m['expert_dp']:,.0f} expert-data-parallel)"))
        rows.append(("    expert weights per EP rank", _num(m["expert_weights_gib"], 1),
                     f"GiB ({m['expert_params_per_card'] / 1e9:,.2f}B params)"))
    rows += [
        ("  activations", _num(part["activations_gib"], 1), "GiB"),
        ("  temporary buffers", _num(part["temporary_gib"], 1), "GiB"),
        ("compute per step", _num(m["compute_s"], 1), "s"),
    ]
    if m.get("bubble_s", 0) > 0:
        rows.append(("  of which pipeline bubble", _num(m["bubble_s"], 2), "s"))
    if m.get("straggler_s", 0) > 0:
        rows.append(("straggler wait (expected max)", _num(m["straggler_s"], 2), "s"))
    rows += [
        ("communication link time", _num(m["comm_link_s"], 1), "s"),
        ("exposed communication", _num(m["comm_exposed_s"], 2), "s"),
    ]
    if m.get("cp_link_s", 0) > 0:
        rows.append(("  context-parallel exchange", f"{m['cp_link_s']:,.2f} / {m['cp_exposed_s']:,.3f}",
                     "s (link / exposed)"))
    if "ep_link_s" in m:
        rows += moe_rows(m)
    if m.get("offload_s", 0) > 0:
        rows.append(("offload wait", _num(m["offload_s"], 2), "s"))
    rows += [
        ("input wait", _num(m["input_wait_s"], 2), "s"),
        ("step", _num(m["step_s"], 1), "s"),
        ("checkpoint/failure overhead", _num(m["overhead_fraction"] * 100, 2), "%"),
        ("  save / redo / restart", f"{m['overhead_save'] * 100:.2f} / {m['overhead_redo'] * 100:.2f} / "
                                    f"{m['overhead_restart'] * 100:.2f}", "% (first order)"),
        ("iterations", f"{m['iterations']:,}", ""),
        ("base training", _num(m["train_days"], 1), "d"),
        ("finish (incl. reserved)", _num(m["finish_days"], 1), "d"),
        *([("  waits for spot capacity", _num(m["capacity_wait_days"], 2),
            "d (not billed)")]
          if m.get("capacity_wait_days") else []),
        ("card-hours", _num(m["card_hours"], 0), "card-h"),
        ("cost", _num(m["cost"], 0), m.get("cost_unit", "USD")),
    ]
    for r in rows:
        t.add_row(*r)
    return t


def moe_rows(m: dict[str, Any]) -> list[tuple[str, str, str]]:
    """All-to-all and routing rows of a MoE plan (one card's micro-batch, per MoE block)."""
    a = m["moe_assumptions"]
    rows = [
        ("  of which all-to-all link", _num(m["ep_link_s"], 2),
         "s (EP 1: none)" if m["ep_placement"] == "none" else f"s (EP group {m['ep_placement']})"),
        ("  of which all-to-all exposed", _num(m["ep_exposed_s"], 2), f"s (overlap: {a['a2a_overlap']})"),
        ("dispatches per MoE block", f"{m['dispatches_per_block']:,.0f}", "per card and micro-batch"),
        ("  capacity per expert", "dropless" if m.get("capacity_rows") is None else f"{m['capacity_rows']:,}",
         "" if m.get("capacity_rows") is None else "rows"),
        ("  dropped / padded", f"{m['dropped_fraction'] * 100:.1f} / {m['padded_fraction'] * 100:.1f}",
         f"% (at most {a['max_drop'] * 100:g} % dropped)"),
        ("  busiest rank's load", f"{m['load_factor']:.3f}",
         f"x mean ({a['hot_experts'] * 100:g} % at {a['imbalance']:g} x)"),
    ]
    return rows


def _fmt_value(x: float | None, unit: str) -> str:
    if x is None:
        return "-"
    if unit in (*COUNT_UNITS, "heads", "layers"):
        return f"{x:,.0f}"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:,.2f}"


def constraints_table(constraints: list[dict[str, Any]], title: str = "Constraints") -> Table:
    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    columns: tuple[tuple[str, JustifyMethod], ...] = (("constraint", "left"), ("value", "right"), ("limit", "right"),
                                                      ("unit", "left"), ("slack", "right"), ("status", "left"))
    for col, just in columns:
        t.add_column(col, justify=just)
    for c in constraints:
        if c["slack"] is not None and c["slack"] < 0:
            status = "VIOLATED"
        elif c.get("binding"):
            status = "binding"
        elif c.get("undecided"):
            status = "undecided"  # the analysis ran out of time on this family
        else:
            status = "ok"
        if is_rule(c["name"]):  # a layout / divisibility rule holds or not: its value is no quantity
            t.add_row(c["name"], "broken" if status == "VIOLATED" else "holds", "", "rule", "", status)
            continue
        t.add_row(c["name"], _fmt_value(c["value"], c["unit"]), _fmt_value(c["limit"], c["unit"]), c["unit"],
                  _fmt_value(c["slack"], c["unit"]), status)
    return t


def broken_rules(constraints: list[dict[str, Any]]) -> list[str]:
    """The text under a constraints table: each broken rule of the plan in words (none when all hold)."""
    lines = [f"  {c['name']}: {c['violation']}" for c in constraints if c.get("violation")]
    return ["Broken rules:\n" + "\n".join(lines)] if lines else []


def is_rule(name: str) -> bool:
    """A rule family (layout, divisibility, schedule shape): met or not, with no value against a limit."""
    return name in F.BY_NAME and F.BY_NAME[name].structural


def footing_text(d: dict[str, Any], indent: int = 0) -> list[str]:
    """The report's footing lines (its ``footing`` entry; none when absent), ``indent`` spaces in."""
    if not d.get("footing"):
        return []
    return [" " * indent + ln for ln in footing_lines(d["footing"], max(60, output_width() - indent))]


def evaluation_text(d: dict[str, Any]) -> str:
    """The evaluate report: plan line, metrics table (chapter 10.6.1 layout), constraints."""
    head = "\n".join([f"Plan: {plan_line(d['plan'])}", *([""] + footing_text(d) if d.get("footing") else [])])
    if "scenario" in d:
        head = f"{model_text(d['scenario'])}\n{head}"
    verdict = "feasible" if d["feasible"] else "INFEASIBLE"
    return console_text(head, "", metrics_table(d["metrics"]), "",
                        constraints_table(d["constraints"]), *broken_rules(d["constraints"]), "", f"Verdict: {verdict}")


def _objective_text(value: float, objective: str, unit: str) -> str:
    return f"{value:,.0f} {unit}" if objective == "cost" else f"{value:.2f} d"


def _batch(p: dict[str, Any], show: bool) -> str:
    """", batch N" when the global batch is a choice of the request (the plan dicts carry it)."""
    return f", batch {p['global_batch']:,}" if show and p.get("global_batch") else ""


def binding_lines(binding: list[dict[str, Any]] | None, objective: str, unit: str, undecided: Sequence[str] = (),
                  batch: bool = False, skipped: str | None = None) -> list[str]:
    if binding is None and skipped:
        return [f"Binding constraints: not analysed: {skipped}."]
    if binding is None:
        return ["Binding constraints: not analysed (--no-analysis); run without it to see what binds and why "
                "nothing cheaper is feasible."]
    if undecided:
        head = binding_lines(binding, objective, unit) if binding else [
            "Binding constraints: none among the families decided in time."]
        return head + [f"  {name}: not decided (time limit reached before this question was answered)"
                       for name in undecided]
    if not binding:
        return ["Binding constraints: none (no single constraint holds the optimum where it is)."]
    lines = ["Binding constraints (dropping any one of these alone admits a better plan):"]
    for b in binding:
        p = b["plan_without"]
        v = b["violates"]
        viol = f"; it would have {v['name']} = {value_text(v['value'], v['unit'])}{_on_stage(v)} against " \
            f"{value_text(v['limit'], v['unit'])}" if "value" in v else ""
        lines.append(f"  {b['name']}: without it, {p['accelerator']} x {p['cards']} (ZeRO-{p['zero_stage']}, "
                     f"{layout_text(p, ', ')}{moe_short(p)}{_batch(p, batch)}) would reach "
                     f"{_objective_text(b['objective_without'], objective, unit)} "
                     f"({change_text(b['saving'])}){viol}")
    return lines


def value_text(x: float | None, unit: str) -> str:
    """A constraint's value or limit beside its unit in a reason line: a count of whole things without decimals
    ("88 cards", :func:`tpopt.presentation.quantity_text`), anything else at 2 decimals and a space before the
    unit ("12.50 %", "34.33 d")."""
    if x is None or unit in COUNT_UNITS:
        return quantity_text(x, unit)
    return f"{x:,.2f} {unit}".rstrip()


def _on_stage(r: dict[str, Any]) -> str:
    """Where a memory figure peaks (per-operation model: the stage class of the rank), else nothing."""
    return f" on the {r['stage']} stage" if r.get("stage") else ""


def _reason(r: dict[str, Any]) -> str:
    if r.get("violation"):
        return f"{r['name']} ({r['violation']})"
    if "value" in r:
        return (f"{r['name']} ({value_text(r['value'], r['unit'])}{_on_stage(r)} > "
                f"{value_text(r['limit'], r['unit'])})")
    if "detail" in r:
        return f"{r['name']} ({r['detail']})"
    return cast(str, r["name"])


def alternative_lines(alts: list[dict[str, Any]], objective: str, unit: str, batch: bool = False) -> list[str]:
    if not alts:
        return []
    lines = ["Why not cheaper:"]
    for a in alts:
        if a["feasible"] is None:
            lines.append(f"  {a['alternative']}: not decided ({a.get('undecided', 'time limit reached')})")
        elif a["feasible"]:
            p = a["plan"]
            layout = (f"ZeRO-{p['zero_stage']}, {layout_text(p)}{moe_short(p)}, "
                      f"micro-batch {p['micro_batch']}, recompute {p['recompute']}{_batch(p, batch)}")
            lines.append(f"  {a['alternative']}: feasible ({layout}) but "
                         f"{_objective_text(a['objective'], objective, unit)} ({change_text(a['delta'], signed=True)})")
        else:
            together = any(r.get("together") for r in a["ruled_out_by"])
            joiner = " together with " if together else " or "
            lines.append(f"  {a['alternative']}: ruled out by " + joiner.join(_reason(r) for r in a["ruled_out_by"]))
    return lines


def top_table(top: list[dict[str, Any]], unit: str) -> Table:
    t = Table(title="Best plans", title_justify="left", show_edge=False, pad_edge=False)
    cols: tuple[str, ...] = ("#", "accelerator", "cards", "ZeRO", "TP/PP/DP", "mb x acc", "recompute", "save every",
                             "step s", "finish d", f"cost {unit}")
    rows: list[tuple[str, ...]] = []
    for e in top:
        p, m = e["plan"], e["metrics"]
        rows.append((str(e["rank"]), p["accelerator"], str(p["cards"]), str(p["zero_stage"]),
                     f"{p['tp']}/{p['pp']}/{p['dp']}" + (f" cp {p['cp']}" if p.get("cp", 1) > 1 else ""),
                     f"{p['micro_batch']} x {p['grad_accum'] or '-'}",
                     p["recompute"], f"{p['save_interval_s']:,.0f} s {p['save_mode']}", f"{m['step_s']:.1f}",
                     f"{m['finish_days']:.1f}", f"{m['cost']:,.0f}"))
    if any(e["plan"].get("ep") is not None for e in top):  # MoE: EP and capacity after the layout
        cols = cols[:5] + ("EP/cap",) + cols[5:]
        rows = [r[:5] + (moe_short(e["plan"])[2:].replace(", ", "/").replace("capacity ", ""),) + r[5:]
                for r, e in zip(rows, top, strict=False)]
    rows = merge_zero_stages(rows, [(e["metrics"]["cost"], e["metrics"]["finish_days"]) for e in top])
    if len(rows) < len(top):
        t.title = (f"Best plans ({len(top)} plans in {len(rows)} rows: ZeRO stages within {NEAR_DUPLICATE:.1%} in "
                   "cost and finish share a row)")
    # numbers never wrap or shrink below their widest cell or header; the text columns wrap in a
    # narrow terminal, never below their longest header word
    for j, col in enumerate(cols):
        text = col in ("accelerator", "recompute", "save every")
        least = max(len(w) for w in col.split()) if text else max([len(col)] + [len(r[j]) for r in rows])
        t.add_column(col, justify="left" if text else "right", min_width=least, no_wrap=not text)
    for r in rows:
        t.add_row(*r)
    return t


NEAR_DUPLICATE = 1e-3  # top plans whose cost and finish differ by at most 0.1 % are near-duplicates


def merge_zero_stages(rows: list[tuple[str, ...]], figures: list[tuple[float, float]],
                      rel: float = NEAR_DUPLICATE) -> list[tuple[str, ...]]:
    """Top-plan rows (rank, accelerator, cards, ZeRO, layout, ..., step, finish, cost) that differ only in the
    ZeRO stage, with cost and finish within ``rel`` of the group's first (best) plan, are one row: its figures,
    its ZeRO cell listing the stages ("2, 3"), numbered in order. The stages then differ in memory per card
    (which the table does not show) and in a few collective latencies, not in what the plan is chosen by."""
    groups: list[tuple[tuple[str, ...], tuple[str, ...], tuple[float, float], list[str]]] = []
    for r, (cost, finish) in zip(rows, figures, strict=True):
        key = (*r[1:3], *r[4:-3])  # every cell but the rank, the ZeRO stage and the three figures
        for gkey, _, (c0, f0), zeros in groups:
            if gkey == key and abs(cost - c0) <= rel * abs(c0) and abs(finish - f0) <= rel * abs(f0):
                zeros.append(r[3])
                break
        else:
            groups.append((key, r, (cost, finish), [r[3]]))
    return [(str(i + 1), *r[1:3], ", ".join(zeros), *r[4:]) for i, (_, r, _, zeros) in enumerate(groups)]


def certificate_line(s: dict[str, Any], objective: str, unit: str) -> str:
    """The on-demand decomposition's proof: the groups it tabulated and the least bound left unexamined."""
    c = s["certificate"]
    bound = "none left" if c is None else f"{c:,.0f} {unit}" if objective == "cost" else f"{c / 86400:,.2f} d"
    return (f"Proof: {s['rounds']:,} layout groups tabulated, {s['evaluated']:,} plans evaluated; lower bound of "
            f"every plan not evaluated: {bound}")


def solve_text(d: dict[str, Any], sc: Scenario, timing: bool = False, after_plan: Sequence[str] = ()) -> str:
    s = d["solver"]
    unit = d["metrics"].get("cost_unit", "USD")
    head = (f"tpopt solve: {sc.name}: {sc.model.name}, {fmt_count(sc.task.tokens)} tokens, "
            f"deadline {sc.task.deadline_s / 86400:.1f} d (reserved {sc.task.reserved_s / 86400:.1f} d)")
    took = f", {s['wall_s']:.2f} s" if timing else ""
    status = (f"Status: {d['status']} (solver {s['name']}, {s['method']}{took}, {s['points']:,} plans in the space, "
              f"minimising {d['objective']})")
    if s.get("time_limit_reached"):
        status += "\n" + limit_line(s)
    if s.get("method") == "layout decomposition on demand" and "certificate" in s:
        status += "\n" + certificate_line(s, d["objective"], unit)
    if s.get("fallback"):
        status += f"\nNote: {s['fallback']}"
    if d.get("analysis") == "time limit reached":
        status += "\nAnalysis: time limit reached; the items it could not answer are marked 'not decided'"
    foot = [""] + footing_text(d) if d.get("footing") else []
    parts: list[RenderableType]
    parts = [head, *([model_text(d["scenario"])] if "scenario" in d else []), status, "",
             f"Plan: {plan_line(d['plan'])}", *after_plan,
             *([cp_note_text(d["context_parallel"])] if d.get("context_parallel") else []), *foot, "",
             metrics_table(d["metrics"], title="Best plan"), "", constraints_table(d["constraints"]), ""]
    batch = len(d.get("batch_choices") or []) > 1  # name each plan's batch when the batch is a choice
    if not d.get("market"):  # a market solve says what it analysed in its own block (presentation.market_lines)
        parts += binding_lines(d.get("binding"), d["objective"], unit, d.get("binding_undecided") or (), batch,
                               d.get("analysis_skipped"))
    rob = (d.get("robustness") or {}).get("without_overlap")
    if rob:
        verdict = "still meets every constraint" if rob["feasible"] else \
            "fails " + ", ".join(n for n in rob["violates"] if n != F.STEP_BUDGET)
        parts += [f"Robustness: without communication overlap (prefetch failing) the step is {rob['step_s']:.1f} s "
                  f"and the plan finishes in {rob['finish_days']:.1f} d: it {verdict}."]
    alts = alternative_lines(d.get("alternatives") or [], d["objective"], unit, batch)
    if alts:
        parts += [""] + alts
    if len(d.get("top", [])) > 1:
        parts += ["", top_table(d["top"], unit)]
    return console_text(*parts)
