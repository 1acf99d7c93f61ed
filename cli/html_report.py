"""``--html FILE``: one self-contained page to hand to the person who signs (solve, explain, sweep).

Built from the same report dict the command prints with ``--json`` (one source of truth) and the same text lines
the terminal shows; nothing is computed here but the drawing. The page opens offline: inline CSS, inline SVG (its
``<title>`` elements are the hover tooltips) and a few lines of inline script, no external URL of any kind.
The bytes are deterministic: no time stamps, no wall times, figures printed at fixed precision.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import click

from tpopt.cli.confidence import distribution_lines
from tpopt.cli.render import WIDTH, binding_lines, is_rule
from tpopt.errors import InputError
from tpopt.files import write_atomic
from tpopt.models import families as F
from tpopt.models.plan import Scenario
from tpopt.presentation import COUNT_UNITS, footing_lines, layout_text, plan_line, probability_text

Z90 = 1.2815515655446004  # the standard normal's 0.9 quantile (P90 = P50 exp(z90 sigma) for a lognormal)
DAY_S = 86400.0
WALL = re.compile(r", [0-9.]+ s on [^\n]*")  # a sweep's wall time and workers: not part of a fixed page
ANSI = re.compile(r"\x1b\[[0-9;]*m")  # a terminal's colour codes (rich colours tables when stdout is a terminal)

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:0 auto;max-width:1080px;
padding:16px 24px;color:#1c2430;background:#fff}
h1{font-size:22px;margin:4px 0 2px}h2{font-size:17px;margin:22px 0 6px;border-bottom:1px solid #d8dee6}
.sub{color:#5a6573;margin:0 0 10px}.cards{display:flex;flex-wrap:wrap;gap:10px;margin:10px 0}
.card{border:1px solid #d8dee6;border-radius:6px;padding:8px 12px;min-width:150px}
.card .k{font-size:12px;color:#5a6573}.card .v{font-size:19px;font-weight:600}
.status-optimal,.status-feasible{color:#17693a}.status-infeasible,.status-unknown{color:#a12a1f}
table{border-collapse:collapse;margin:4px 0}td,th{border-bottom:1px solid #e6eaef;padding:3px 10px 3px 0;
text-align:left;vertical-align:top}td.n{text-align:right;font-variant-numeric:tabular-nums}
tr.bind td{font-weight:600}tr.hi td{background:#fff3c4}pre{background:#f5f7f9;border:1px solid #e6eaef;
padding:8px;overflow-x:auto;font:12px/1.4 ui-monospace,Menlo,Consolas,monospace}
ul{margin:4px 0;padding-left:20px}svg text{font:11px system-ui,sans-serif;fill:#1c2430}
.axis{stroke:#5a6573}.grid{stroke:#e6eaef}.curve{fill:none;stroke:#1f5fa8;stroke-width:2}
.deadline{stroke:#a12a1f;stroke-dasharray:4 3}.front{fill:#1f5fa8}.other{fill:#9aa5b1}
.step{fill:none;stroke:#1f5fa8;stroke-width:1.5}circle:hover{stroke:#000;stroke-width:2}
"""

SCRIPT = """
document.querySelectorAll('[data-row]').forEach(function(p){
 var r=document.getElementById(p.getAttribute('data-row'));if(!r)return;
 p.addEventListener('mouseenter',function(){r.classList.add('hi')});
 p.addEventListener('mouseleave',function(){r.classList.remove('hi')});});
"""


def esc(x: Any) -> str:
    import html  # lazy: start-up time (a page is written only with --html; the headline does not load it)

    return html.escape(str(x), quote=True)


def num(x: Any, digits: int = 0) -> str:
    """A figure as the terminal prints it: thousands separated, fixed digits; '-' when absent."""
    if x is None:
        return "-"
    if isinstance(x, bool) or not isinstance(x, int | float):
        return str(x)
    if not math.isfinite(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:,.{digits}f}"


def page(title: str, subtitle: str, body: Sequence[str]) -> str:
    """The whole document: head with the inline style, the sections, the inline script."""
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            "<meta name=\"generator\" content=\"tpopt\">\n"
            f"<title>{esc(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
            f"<h1 id=\"title\">{esc(title)}</h1>\n<p class=\"sub\">{esc(subtitle)}</p>\n"
            + "\n".join(body) + f"\n<script>{SCRIPT}</script>\n</body>\n</html>\n")


def section(ident: str, heading: str, inner: str) -> str:
    return f"<section id=\"{ident}\">\n<h2>{esc(heading)}</h2>\n{inner}\n</section>"


def lines_html(lines: Sequence[str]) -> str:
    items = [x.strip() for x in lines if x.strip()]
    return "<ul>" + "".join(f"<li>{esc(x)}</li>" for x in items) + "</ul>" if items else "<p>-</p>"


def table(head: Sequence[str], rows: Sequence[Sequence[Any]], numeric: Sequence[bool] = (),
          classes: Sequence[str] = (), ids: Sequence[str] = ()) -> str:
    """A plain table; ``numeric[j]`` right-aligns column j; ``classes``/``ids`` name the rows."""
    out = ["<table><thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr></thead><tbody>"]
    for i, row in enumerate(rows):
        cls = f" class=\"{classes[i]}\"" if i < len(classes) and classes[i] else ""
        ident = f" id=\"{ids[i]}\"" if i < len(ids) else ""
        cells = "".join(f"<td class=\"n\">{esc(c)}</td>" if j < len(numeric) and numeric[j] else f"<td>{esc(c)}</td>"
                        for j, c in enumerate(row))
        out.append(f"<tr{cls}{ident}>{cells}</tr>")
    return "\n".join(out) + "</tbody></table>"


def figure_cards(figures: Sequence[tuple[str, str, str]]) -> str:
    """The headline figures as cards: (id, label, value)."""
    return "<div class=\"cards\">" + "".join(
        f"<div class=\"card\" id=\"fig-{ident}\"><div class=\"k\">{esc(k)}</div><div class=\"v\">{esc(v)}</div></div>"
        for ident, k, v in figures) + "</div>"


# ---------------------------------------------------------------------------------------------
# one plan (solve, explain)


def deadline_days(d: dict[str, Any]) -> float | None:
    """The deadline the report checked the plan against (its deadline.finish constraint), in days."""
    c = next((c for c in d.get("constraints") or () if c.get("name") == F.DEADLINE), None)
    return None if c is None else float(c["limit"])


def metrics_of(d: dict[str, Any]) -> dict[str, Any]:
    """The report's metrics (a solve's ``metrics``; an explained plan carries cost and finish at the top)."""
    m: dict[str, Any] = d.get("metrics") or {k: d[k] for k in ("cost", "cost_unit", "finish_days") if k in d}
    return m


def binding_names(d: dict[str, Any]) -> set[str]:
    """The binding families' names (a solve lists dicts, an explained plan names)."""
    return {b["name"] if isinstance(b, dict) else str(b) for b in d.get("binding") or ()}


def plan_cards(d: dict[str, Any]) -> str:
    p, m = d["plan"], metrics_of(d)
    unit = m.get("cost_unit", "USD")
    figs = [("status", "status", str(d.get("status", "-")))]
    if "cost" in m:
        figs.append(("cost", f"cost ({unit})", num(m["cost"])))
    if "finish_days" in m:
        figs.append(("finish", "finish (days)", num(m["finish_days"], 1)))
    figs.append(("cards", "cards", f"{p['accelerator']} x {num(p['cards'])}"))
    figs.append(("layout", "layout TP / PP / DP", layout_text(p)))
    if "memory_per_card_gib" in m:
        figs.append(("memory", "memory per card (GiB)",
                     f"{num(m['memory_per_card_gib'], 1)} of {num(m.get('memory_limit_gib'), 1)}"))
    return figure_cards(figs)


def _digits(c: dict[str, Any]) -> int:
    """Decimals of a constraint's figures: none for counts of whole things (cards, hosts), else 2."""
    return 0 if c.get("unit") in COUNT_UNITS else 2


def constraint_rows(d: dict[str, Any]) -> str:
    """Each constraint against its limit, the binding ones marked (an explained plan's ``tightness``)."""
    cs = d.get("constraints") or d.get("tightness") or []
    names = binding_names(d)
    binds = [bool(c.get("binding")) or c["name"] in names for c in cs]
    rows = [((c["name"], "broken" if (c.get("slack") or 0) < 0 else "holds", "", "rule", "") if is_rule(c["name"]) else
             (c["name"], num(c.get("value"), _digits(c)), num(c.get("limit"), _digits(c)), c.get("unit", ""),
              num(c.get("slack"), _digits(c))))
            + ("binding" if b else ("violated" if (c.get("slack") or 0) < 0 else ""),) for c, b in zip(cs, binds,
                                                                                                       strict=True)]
    return table(("constraint", "value", "limit", "unit", "slack", ""), rows, (False, True, True, False, True),
                 ["bind" if b else "" for b in binds])


def short_plan(p: dict[str, Any]) -> str:
    """A plan in a few words (the binding table's plan without the constraint, which carries no save fields)."""
    return (f"{p['accelerator']} x {p['cards']}, {layout_text(p)}, ZeRO-{p.get('zero_stage')}: cost "
            f"{num(p.get('cost'))} {p.get('cost_unit', '')}, finish {num(p.get('finish_days'), 1)} d")


def binding_html(d: dict[str, Any], binding: Sequence[str]) -> str:
    """What binds: the terminal's lines, then the table of each binding family's saving."""
    rows = [(b["name"], num(b.get("objective_without")), f"{b['saving'] * 100:.1f} %" if b.get("saving") is not None
             else "-", short_plan(b["plan_without"]) if b.get("plan_without") else "-")
            for b in d.get("binding") or [] if isinstance(b, dict)]
    alts = [(a.get("alternative", "-"), a.get("kind", ""), "feasible" if a.get("feasible") else "ruled out",
             ", ".join(r["name"] for r in a.get("ruled_out_by") or []))
            for a in d.get("alternatives") or []]
    inner = lines_html(binding)
    if rows:
        inner += table(("binding constraint", "objective without it", "saving", "plan without it"), rows,
                       (False, True, True, False))
    if alts:
        inner += "<h3>Why not cheaper</h3>" + table(("alternative", "kind", "verdict", "ruled out by"), alts)
    return inner


def distribution_svg(e: dict[str, Any], deadline: float | None) -> str:
    """The finish-time distribution: the lognormal through the reported P50 and P90 (its CDF), the three reported
    quantiles as points, the deadline as a dashed line; each mark's ``<title>`` is its tooltip."""
    f = e["finish_days"]
    p50, p90, p99 = float(f["p50"]), float(f["p90"]), float(f["p99"])
    sigma = max(math.log(p90 / p50) / Z90, 1e-6) if p90 > 0 and p50 > 0 else 1e-6
    lo = min(p50 * math.exp(-3 * sigma), deadline or math.inf)
    hi = max(p99 * math.exp(sigma), deadline or 0.0)
    W, H, L, B, T, R = 640, 240, 50, 30, 10, 16

    def x(v: float) -> float:
        return L + (v - lo) / (hi - lo) * (W - L - R)

    def y(q: float) -> float:
        return T + (1 - q) * (H - T - B)

    pts = []
    for i in range(121):
        v = lo + (hi - lo) * i / 120
        q = 0.5 * (1 + math.erf(math.log(v / p50) / (sigma * math.sqrt(2)))) if v > 0 else 0.0
        pts.append(f"{x(v):.1f},{y(q):.1f}")
    out = [f"<svg id=\"finish-svg\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" role=\"img\" "
           "xmlns=\"http://www.w3.org/2000/svg\"><title>finish-time distribution (CDF)</title>"]
    for q in (0.0, 0.5, 0.9, 1.0):
        out.append(f"<line class=\"grid\" x1=\"{L}\" x2=\"{W - R}\" y1=\"{y(q):.1f}\" y2=\"{y(q):.1f}\"/>"
                   f"<text x=\"{L - 6}\" y=\"{y(q) + 4:.1f}\" text-anchor=\"end\">{q:.1f}</text>")
    for i in range(6):
        v = lo + (hi - lo) * i / 5
        out.append(f"<text x=\"{x(v):.1f}\" y=\"{H - 12}\" text-anchor=\"middle\">{v:.1f} d</text>")
    out.append(f"<line class=\"axis\" x1=\"{L}\" x2=\"{W - R}\" y1=\"{H - B}\" y2=\"{H - B}\"/>")
    out.append(f"<polyline class=\"curve\" points=\"{' '.join(pts)}\"><title>lognormal through the reported P50 "
               f"and P90 (sigma {sigma:.3f})</title></polyline>")
    if deadline is not None:
        pon = e.get("probability_by_deadline")
        tip = f"deadline {deadline:.1f} d" + (f": P(on time) {probability_text(pon)}" if pon is not None else "")
        out.append(f"<line class=\"deadline\" x1=\"{x(deadline):.1f}\" x2=\"{x(deadline):.1f}\" y1=\"{T}\" "
                   f"y2=\"{H - B}\"><title>{esc(tip)}</title></line>")
    for q, v in ((0.5, p50), (0.9, p90), (0.99, p99)):
        out.append(f"<circle class=\"front\" cx=\"{x(v):.1f}\" cy=\"{y(q):.1f}\" r=\"5\"><title>P{round(q * 100)}: "
                   f"{v:.2f} d</title></circle>")
    return "".join(out) + "</svg>"


def distribution_html(d: dict[str, Any], lines: Sequence[str]) -> str:
    e = d.get("finish_distribution")
    if not e:
        m = metrics_of(d)
        return (f"<p>No confidence asked: the finish is the expected {num(m.get('finish_days'), 2)} d. Give "
                "<code>--confidence 90%</code> for the distribution (the step-time model's stated sigma and the "
                "failure, fail-slow, preemption and spot-capacity sources).</p>")
    f, c = e["finish_days"], e["cost"]
    unit = metrics_of(d).get("cost_unit", "USD")
    rows = [(f"P{k[1:]}", num(f[k], 2), num(c[k])) for k in ("p50", "p90", "p99")]
    return (distribution_svg(e, deadline_days(d)) + table(("quantile", "finish (d)", f"cost ({unit})"), rows,
                                                          (False, True, True)) + lines_html(lines))


def export_html(export: str | None, refused: str | None) -> str:
    if export is not None:
        return "<p>Megatron-LM arguments of this plan (<code>tpopt export --format megatron</code>):</p>" \
               f"<pre id=\"export\">{esc(export)}</pre>"
    return f"<p id=\"export\">{esc(refused or 'no plan to export')}</p>"


def plan_page(command: str, d: dict[str, Any], text: str, *, binding: Sequence[str] = (),
              footing: Sequence[str] = (), distribution: Sequence[str] = (), export: str | None = None,
              refused: str | None = None) -> str:
    """The page of one answer (``tpopt solve`` / ``tpopt explain``): ``d`` its JSON report, ``text`` what the
    terminal shows, ``binding``/``footing``/``distribution`` the terminal's lines of those blocks, ``export``
    the plan's Megatron-LM arguments (or ``refused``: why there are none)."""
    name = (d.get("scenario") or {}).get("name") or d.get("scenario_name") or "scenario"
    status = d.get("status", "-")
    title = f"tpopt {command}: {name}"
    subtitle = f"status {status}, minimising {d.get('objective', 'cost')}"
    body = []
    if d.get("plan"):
        body.append(section("plan", "Plan", plan_cards(d) + f"<p>{esc(plan_line(d['plan']))}</p>"
                            + table(("field", "value"), [(k, v) for k, v in d["plan"].items() if v is not None])))
        body.append(section("footing", "Footing and stated assumptions", lines_html(footing)))
        body.append(section("binding", "What binds", binding_html(d, binding)))
        if d.get("constraints") or d.get("tightness"):
            body.append(section("constraints", "Constraints", constraint_rows(d)))
        body.append(section("distribution", "Finish-time distribution", distribution_html(d, distribution)))
        body.append(section("export-section", "Export", export_html(export, refused)))
    else:
        why = "each stage's plan" if status in ("optimal", "feasible") else "why, and what would fix it"
        body.append(section("plan", "Answer", f"<p class=\"status-{esc(status)}\" id=\"fig-status\">status "
                                              f"{esc(status)}: the report below says {why}</p>"))
    body.append(section("report", "The terminal report", f"<pre id=\"text\">{esc(text)}</pre>"))
    return page(title, subtitle, body)


# ---------------------------------------------------------------------------------------------
# a sweep


def sweep_point_tip(r: dict[str, Any], unit: str) -> str:
    return (f"{r['accelerator']} x {r['cards']}: cost {num(r['cost'])} {unit}, finish {num(r['finish_days'], 2)} d, "
            f"TP {r.get('tp')} / PP {r.get('pp')} / DP {r.get('dp')}, ZeRO-{r.get('zero')}")


def pareto_svg(front: Sequence[dict[str, Any]], others: Sequence[dict[str, Any]], unit: str) -> str:
    """Cost against finish: the front (blue, joined in finish order) and each setting's cheapest and fastest plan
    off the front (grey); hovering a point shows its plan (``<title>``) and marks its table row."""
    pts = list(front) + list(others)
    W, H, L, B, T, R = 640, 300, 70, 36, 10, 16
    xs, ys = [float(p["finish_days"]) for p in pts], [float(p["cost"]) for p in pts]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    dx, dy = (x1 - x0) or max(x1, 1.0) * 0.1, (y1 - y0) or max(y1, 1.0) * 0.1
    x0, x1, y0, y1 = x0 - dx * 0.08, x1 + dx * 0.08, y0 - dy * 0.08, y1 + dy * 0.08

    def x(v: float) -> float:
        return L + (v - x0) / (x1 - x0) * (W - L - R)

    def y(v: float) -> float:
        return T + (y1 - v) / (y1 - y0) * (H - T - B)

    out = [f"<svg id=\"pareto-svg\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" role=\"img\" "
           "xmlns=\"http://www.w3.org/2000/svg\"><title>cost against finish time</title>"]
    for i in range(5):
        v, u = x0 + (x1 - x0) * i / 4, y0 + (y1 - y0) * i / 4
        out.append(f"<line class=\"grid\" x1=\"{L}\" x2=\"{W - R}\" y1=\"{y(u):.1f}\" y2=\"{y(u):.1f}\"/>"
                   f"<text x=\"{L - 6}\" y=\"{y(u) + 4:.1f}\" text-anchor=\"end\">{num(u)}</text>"
                   f"<text x=\"{x(v):.1f}\" y=\"{H - 18}\" text-anchor=\"middle\">{v:.1f} d</text>")
    out.append(f"<text x=\"{(W + L) / 2:.0f}\" y=\"{H - 3}\" text-anchor=\"middle\">finish (days)</text>"
               f"<text x=\"12\" y=\"{T + 8}\">{esc(unit)}</text>")
    ordered = sorted(front, key=lambda p: p["finish_days"])
    if len(ordered) > 1:
        path = " ".join(f"{x(p['finish_days']):.1f},{y(p['cost']):.1f}" for p in ordered)
        out.append(f"<polyline class=\"step\" points=\"{path}\"/>")
    for i, p in enumerate(front):
        out.append(f"<circle class=\"front\" data-row=\"front-{i}\" cx=\"{x(p['finish_days']):.1f}\" "
                   f"cy=\"{y(p['cost']):.1f}\" r=\"6\"><title>{esc(sweep_point_tip(p, unit))}</title></circle>")
    for p in others:
        out.append(f"<circle class=\"other\" cx=\"{x(p['finish_days']):.1f}\" cy=\"{y(p['cost']):.1f}\" r=\"4\">"
                   f"<title>{esc(p['accelerator'])} x {p['cards']}: cost {num(p['cost'])} {esc(unit)}, finish "
                   f"{num(p['finish_days'], 2)} d (off the front)</title></circle>")
    return "".join(out) + "</svg>"


def sweep_page(d: dict[str, Any], notes: Sequence[str] = (), text: str = "") -> str:
    """The page of ``tpopt sweep``'s JSON report ``d``: the front (plot with hover and table), each setting's
    summary, the statuses, the sweep's notes and ``text``, the terminal's report (its wall time dropped)."""
    front = d.get("front") or []
    unit = next((r.get("cost_unit") for r in front if r.get("cost_unit")), "USD")
    others = []
    for s in d.get("summary") or []:
        for k in ("cheapest", "fastest"):
            q = s.get(k)
            if q and not any(r["accelerator"] == s["accelerator"] and r["cards"] == q["cards"]
                             and abs(r["cost"] - q["cost"]) <= 1e-9 * max(1.0, abs(q["cost"])) for r in front):
                others.append({"accelerator": s["accelerator"], **q})
    others = list({(o["accelerator"], o["cards"], round(o["cost"], 6)): o for o in others}.values())
    st = d.get("statuses") or {}
    body = [figure_cards([("points", "points", num(d.get("points"))),
                          ("front", "plans on the front", num(len(front))),
                          ("cheapest", f"cheapest ({unit})", num(min((r["cost"] for r in front), default=None))),
                          ("fastest", "fastest (days)", num(min((r["finish_days"] for r in front), default=None), 1))]
                         )]
    if front or others:
        body.append(section("pareto", "Pareto front: cost against finish", pareto_svg(front, others, unit)))
    rows = [(r["accelerator"], num(r["cards"]), f"{r.get('tp')} / {r.get('pp')} / {r.get('dp')}",
             f"ZeRO-{r.get('zero')}", num(r["cost"]), num(r["finish_days"], 2), f"{num(r.get('deadline_min_days'), 1)}-"
             f"{num(r.get('deadline_max_days'), 1)} d") for r in front]
    body.append(section("front-table", "The front", table(
        ("accelerator", "cards", "TP / PP / DP", "ZeRO", f"cost ({unit})", "finish (d)", "for deadlines"), rows,
        (False, True, False, False, True, True, False), ids=[f"front-{i}" for i in range(len(rows))])))
    srows = [(s["accelerator"], num(s.get("points")), num(s.get("feasible")), num(s.get("infeasible")),
              num((s.get("cheapest") or {}).get("cost")), num(s.get("fastest_possible_days"), 2))
             for s in d.get("summary") or []]
    body.append(section("summary", "Per setting", table(
        ("accelerator", "points", "feasible", "infeasible", f"cheapest ({unit})", "fastest possible (d)"), srows,
        (False, True, True, True, True, True))))
    body.append(section("statuses", "Statuses and notes", lines_html(
        [", ".join(f"{k} {v:,}" for k, v in st.items()), *notes])))
    if text:
        body.append(section("report", "The terminal report", f"<pre id=\"text\">{esc(WALL.sub('', text))}</pre>"))
    return page(f"tpopt sweep: {d.get('scenario', 'scenario')}",
                f"{num(d.get('points'))} points, {num(len(front))} on the cost / finish front", body)


def write_page(path: str, text: str) -> None:
    """Write the page (atomically: a reader never sees half of it; the caller checked the no-overwrite rule)."""
    write_atomic(path, text, "--html")




# ---------------------------------------------------------------------------------------------
# the commands' glue: the terminal's lines of each block and the export, from the report dict


def megatron_export(d: dict[str, Any], sc: Scenario) -> tuple[str | None, str | None]:
    """The plan's Megatron-LM arguments as ``tpopt export --format megatron --plan`` writes them from this report
    (its ``plan`` object, evaluated on ``sc``: the scenario the plan is shown in), or why there are none."""
    from tpopt.frameworks import export_text, plan_from_report  # lazy: start-up time of every solve (its tables)
    from tpopt.models.evaluate import evaluate  # lazy: with the export above

    try:
        plan = plan_from_report(d)
        return export_text("megatron", sc, evaluate(sc, plan)), None
    except InputError as exc:
        return None, f"no export: {exc}"


def answer_page(command: str, d: dict[str, Any], text: str, sc: Scenario | None) -> str:
    """:func:`plan_page` of a solve or explain report ``d`` shown in scenario ``sc`` (None: no export)."""
    if not d.get("plan"):
        return plan_page(command, d, text)
    unit = metrics_of(d).get("cost_unit", "USD")
    solved = all(isinstance(b, dict) for b in d.get("binding") or ())  # a solve's (an explained plan names them)
    binding = binding_lines(d.get("binding"), d.get("objective", "cost"), unit, d.get("binding_undecided") or ()) \
        if solved else [f"Binding (one host fewer breaks it): {', '.join(sorted(binding_names(d)))}"]
    footing = footing_lines(d["footing"], 10_000) if d.get("footing") else []  # one line each, unwrapped
    dist = distribution_lines(d["finish_distribution"], unit) if d.get("finish_distribution") else []
    export, refused = megatron_export(d, sc) if sc is not None and not sc.stages else (None, "no export: a staged "
                                                                                         "plan exports per stage")
    return plan_page(command, d, text, binding=binding, footing=footing, distribution=dist, export=export,
                     refused=refused)




html_option = click.option("--html", "html", type=click.Path(dir_okay=False),
                           help="Also write the answer as one self-contained HTML page (plan, footing, what binds, "
                                "finish distribution, export; opens offline).")


@contextmanager
def report_width() -> Iterator[None]:
    """The terminal's text as a pipe would get it (100 columns), whatever the terminal: the page's bytes are fixed."""
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(WIDTH)
    try:
        yield
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old


def write_answer_page(path: str, make: Callable[[], str]) -> None:
    """Write the page ``make()`` builds (its text at :func:`report_width`), and say so on stderr."""
    with report_width():
        text = ANSI.sub("", make())
    write_page(path, text)
    click.echo(f"tpopt: wrote {path} (HTML report)", err=True)


__all__ = ["answer_page", "distribution_svg", "html_option", "megatron_export", "page", "pareto_svg", "plan_page",
           "report_width", "sweep_page", "write_answer_page", "write_page"]
