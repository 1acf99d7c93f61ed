"""Text of the finish-time distribution (``tpopt solve --confidence``), ``tpopt simulate`` and ``tpopt replan``."""

from __future__ import annotations

from typing import Any

from tpopt.models import finish as Fn
from tpopt.optimizer.confidence import clock_stop
from tpopt.presentation import level_text
from tpopt.presentation import probability_text as _pct  # a probability or share reached (a level asked: level_text)


def distribution_lines(e: dict[str, Any], unit: str = "USD") -> list[str]:
    """The report's ``finish_distribution`` entry as text lines."""
    f, c = e["finish_days"], e["cost"]
    asked = "" if e["confidence"] is None else f" (asked: {level_text(e['confidence'])})"
    labels = {s["name"]: s["label"] for s in e["sources"]}
    labels[Fn.STEP_ERROR] = "step-time model error"
    shares = ", ".join(f"{labels[k]} {_pct(v)}" for k, v in e["risk_shares"].items() if v > 0) or "none"
    lines = ["", "Finish-time distribution (models: lognormal step-time error, Poisson events; docs/confidence.md):",
             f"  P(finish <= deadline) = {_pct(e['probability_by_deadline'])}{asked}",
             f"  finish P50 / P90 / P99: {f['p50']:.2f} / {f['p90']:.2f} / {f['p99']:.2f} d "
             f"(mean {e['mean_finish_days']:.2f} d)",
             f"  cost   P50 / P90 / P99: {c['p50']:,.0f} / {c['p90']:,.0f} / {c['p99']:,.0f} {unit}",
             f"  risk at P{100 * e['risk_level']:g} by source: {shares}; dominant: {labels[e['dominant_source']]}",
             f"  step-time sigma {e['step_sigma']:.3f} ({e['step_sigma_source']})"]
    ev = ", ".join(f"{s['label']} {s['events']:.1f}" for s in e["sources"] if s["events"] > 0)
    if ev:
        lines.append(f"  expected events: {ev}")
    marks = "; ".join(f"by day {m['day']:.0f}: {_pct(m['done'])} (replan below {_pct(m['replan_below'])})"
                      for m in e["progress"])
    lines.append(f"  progress checkpoints: {marks}")
    up = e.get("step_up")
    if up:
        if up["plan"] is not None:
            cut = "" if up.get("decided", True) else " (time limit reached: not proven the cheapest)"
            lines.append(f"  +5 points (P >= {level_text(up['target'])}): {up['cards']} cards, "
                         f"{up['extra_cost']:+,.0f} {unit} ({up['extra_cards']:+d} cards){cut}")
        elif up["status"] == "infeasible":
            reach = _reach(up["reachable"], up.get("reachable_undecided"))
            lines.append(f"  +5 points (P >= {level_text(up['target'])}): no plan; reachable {reach}")
        elif up["status"] != "already":
            lines.append(f"  +5 points (P >= {level_text(up['target'])}): not decided within the time limit")
    return lines


def _reach(reachable: float | None, why: str | None = None) -> str:
    return (why or clock_stop()) if reachable is None else _pct(reachable)


def reachable_line(q: float, reachable: float | None, why: str | None = None) -> str:
    """What the infeasible report adds under a confidence (None: left undecided, ``why``: by the work budget or
    the clock, :func:`tpopt.optimizer.confidence.reach`; the clock when not said)."""
    if reachable is None:
        return f"Confidence: {level_text(q)} is not reachable; the highest reachable was {why or clock_stop()}."
    if reachable <= 0:
        return f"Confidence: no plan reaches even 1 % (asked {level_text(q)})."
    return f"Confidence: {level_text(q)} is not reachable; the highest reachable is {_pct(reachable)}."
