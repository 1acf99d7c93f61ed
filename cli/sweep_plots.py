"""Plots of a sweep (presentation only; the data come from :mod:`tpopt.optimizer.sweep`).

* :func:`plot_pareto`: cost against finish time, one series per accelerator (each point is the optimal
  plan of one sweep point, labelled with its card count), the Pareto front drawn over them, proven
  infeasible deadlines marked as crosses along the bottom, deadlines without an answer (time limit,
  error) as question marks, and the span no plan can reach shaded (only where that is proven).
* :func:`plot_breakdown`: the chapter's figure 10-44 layout: one horizontal stacked bar per plan
  (base training, checkpoint/failure overhead, reserved days) and the deadline as a dashed line.

Both use the Agg backend (no display) and write ``.pdf``, ``.svg`` or ``.png``. SVG text stays text (searchable)
and ids are salted, so the same data give the same file.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any

from tpopt.cli.plots import pyplot, save_figure

if TYPE_CHECKING:  # typing only: matplotlib is an optional dependency
    from matplotlib.figure import Figure

PALETTE = ("#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#B279A2", "#FF9DA6", "#9D755D", "#BAB0AC",
           "#EECA3B")
PARTS = (("train_days", "base training", "#4C78A8"), ("overhead_days", "checkpoint/failure overhead", "#F58518"),
         ("reserved_days", "reserved", "#BAB0AC"))


def _pyplot() -> ModuleType:
    return pyplot("tpopt-sweep")


def _save(fig: Figure, path: str) -> None:
    save_figure(fig, path)


def _money(x: float, unit: str) -> str:
    return f"{x:,.0f} {unit}"


def plot_pareto(data: dict[str, Any], path: str) -> None:
    """Cost vs finish days; ``data`` from :func:`tpopt.optimizer.sweep.plot_series`.

    Main panel: each series' distinct optimal plans (labelled with card counts) and each case's Pareto
    front as a staircase (for a deadline x, the least cost of a plan finishing by x). Lower strip (only
    when some point is infeasible): one row per series with a cross at every deadline where a point is
    infeasible (at some card cap or budget, when those are swept too); the span before the earliest
    achievable finish is shaded in both panels.
    """
    plt = _pyplot()
    series = data["series"]
    strip_rows = [i for i, s in enumerate(series) if s["infeasible_deadlines"] or s.get("unknown_deadlines")]
    if strip_rows:
        n = len(strip_rows)
        fig, (ax, strip) = plt.subplots(2, 1, sharex=True, figsize=(11, 6.0 + 0.12 * max(0, len(series) - 6)),
                                        gridspec_kw={"height_ratios": [5, min(1.6, max(0.8, 0.28 * n))]})
    else:
        fig, ax = plt.subplots(figsize=(11, 5.5))
        strip = None
    unit = data["cost_unit"]
    xs_all = []
    for i, s in enumerate(series):
        colour = PALETTE[i % len(PALETTE)]
        plans = s["plans"]
        xs_all += s["deadlines"]
        if plans:
            x = [p["finish_days"] for p in plans]
            y = [p["cost"] for p in plans]
            xs_all += x
            ax.plot(x, y, ":o", color=colour, label=s["label"], markersize=5, linewidth=1.0, gid=f"series-{i}")
            for p in plans:
                ax.annotate(f"{p['cards']}", (p["finish_days"], p["cost"]), textcoords="offset points",
                            xytext=(4, 4), fontsize=7, color=colour)
        else:
            none = "no feasible point" if not s.get("unknown_deadlines") else "no plan found"
            ax.plot([], [], ":o", color=colour, label=f"{s['label']} ({none})", gid=f"series-{i}")
    right = max(xs_all) if xs_all else None
    for k, f in enumerate(data["fronts"]):
        pts = f["points"]
        fx = [p["finish_days"] for p in pts]
        fy = [p["cost"] for p in pts]
        if right is not None and right > fx[-1]:
            fx, fy = fx + [right], fy + [fy[-1]]
        label = "Pareto front (least cost by deadline)" if k == 0 else None
        ax.plot(fx, fy, "-", color="black", linewidth=2.2, alpha=0.35, zorder=1, drawstyle="steps-post", label=label,
                gid="pareto-front" if k == 0 else f"pareto-front-{k}")
        ax.plot([p["finish_days"] for p in pts], [p["cost"] for p in pts], "o", markersize=11, markerfacecolor="none",
                markeredgecolor="black", markeredgewidth=1.4, zorder=3)
    earliest = [s["fastest_possible_days"] for s in series if s["fastest_possible_days"] is not None]
    if strip is not None:
        labelled = set()
        for row, i in enumerate(strip_rows):
            s = series[i]
            if s["infeasible_deadlines"]:
                strip.plot(s["infeasible_deadlines"], [row] * len(s["infeasible_deadlines"]), "x", markersize=5,
                           color=PALETTE[i % len(PALETTE)], gid=f"infeasible-{i}",
                           label=None if "x" in labelled else "infeasible deadline")
                labelled.add("x")
            unknown = s.get("unknown_deadlines") or []
            if unknown:
                strip.plot(unknown, [row] * len(unknown), linestyle="none", marker="$?$", markersize=7,
                           color=PALETTE[i % len(PALETTE)], gid=f"unknown-{i}",
                           label=None if "?" in labelled else "no answer (time limit or error)")
                labelled.add("?")
        strip.set_ylim(len(strip_rows) - 0.5, -0.5)
        if len(strip_rows) <= 6:
            strip.set_yticks(range(len(strip_rows)))
            strip.set_yticklabels([series[i]["accelerator"] if len(strip_rows) == len({s["accelerator"] for s in
                                                                                       series}) else series[i]["label"]
                                   for i in strip_rows], fontsize=7)
        else:
            strip.set_yticks([])
        strip.set_ylabel("infeasible", fontsize=8)
        strip.grid(True, axis="x", alpha=0.3)
        strip.set_xlabel("finish time / deadline, days")
        lo = min(xs_all)
        hi = min(earliest) if earliest else max(xs_all)
        # shaded only when proven: a point without an answer may hide a plan that finishes earlier
        if hi > lo and not data.get("unknown_points"):
            for a, lab in ((ax, "no plan finishes this early"), (strip, None)):
                a.axvspan(lo, hi, color="#999999", alpha=0.15, zorder=0, label=lab,
                          gid="infeasible-region" if a is ax else "infeasible-region-strip")
        strip.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    else:
        ax.set_xlabel("finish time / days")
    ax.set_ylabel(f"cost / {unit}")
    ax.yaxis.set_major_formatter(lambda v, _pos: f"{v:,.0f}")
    ax.grid(True, alpha=0.3)
    title = data["title"]
    if not data["fronts"]:
        n = data.get("unknown_points", 0)
        title += f" - no plan found ({n} point{'s' if n != 1 else ''} without an answer)" if n \
            else " - no feasible plan"
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def plot_breakdown(bars: list[dict[str, Any]], path: str, deadline_days: float | tuple[float, float], title: str,
                   unit: str = "USD") -> None:
    """Horizontal stacked bars of the finish time; the deadline as a dashed vertical line, or the swept
    deadlines (``deadline_days`` = (first, last)) as a shaded band between two dashed lines."""
    plt = _pyplot()
    n = max(1, len(bars))
    fig, ax = plt.subplots(figsize=(9, 1.9 + 0.55 * n))
    ys = list(range(len(bars)))[::-1]  # first bar on top
    for key, name, colour in PARTS:
        left = [sum(b[k] for k, _, _ in PARTS[:[p[0] for p in PARTS].index(key)]) for b in bars]
        ax.barh(ys, [b[key] for b in bars], left=left, color=colour, height=0.6, label=name, gid=f"part-{key}")
    span = tuple(deadline_days) if isinstance(deadline_days, (tuple, list)) else None
    longest = max([b["finish_days"] for b in bars] + [(span[1] if span else deadline_days) or 0.0, 1.0])
    for y, b in zip(ys, bars, strict=False):
        text = f"{b['finish_days']:.1f} d, {_money(b['cost'], unit)}"
        if b.get("note"):
            text += f" ({b['note']})"
        ax.text(b["finish_days"] + 0.01 * longest, y, text, va="center", fontsize=8, zorder=4,
                bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.85, "pad": 1.0})
    if span:
        ax.axvspan(span[0], span[1], color="black", alpha=0.07, zorder=0, gid="deadline-range",
                   label=f"deadlines swept {span[0]:g}-{span[1]:g} d")
        for x in span:
            ax.axvline(x, color="black", linestyle="--", linewidth=1.0, gid=f"deadline-{x:g}")
    elif deadline_days:
        ax.axvline(deadline_days, color="black", linestyle="--", linewidth=1.2, label=f"deadline {deadline_days:g} d",
                   gid="deadline")
    ax.set_yticks(ys)
    ax.set_yticklabels([b["label"] for b in bars])
    ax.set_xlim(0, longest * 1.45)
    ax.set_xlabel("days")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.22 if n > 2 else -0.35), ncol=4,
              frameon=False)
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)
