"""Per-stage timeline of a simulated pipeline step (presentation only; the numbers come from
:func:`tpopt.models.pipeline.simulate`).

Colours as in the chapter's figures: forward blue, backward (dX, or the whole backward) orange, dW
purple, update green; hatched blocks are an interleaved stage's later chunks or DualPipe's up
direction. Idle time shows as the grey track between blocks.
"""

from __future__ import annotations

from tpopt.cli.plots import check_plot_path, pyplot, save_figure
from tpopt.models import pipeline as pl

COLOURS = {"F": "#4C78A8", "B": "#F58518", "W": "#9467BD", "U": "#54A24B"}
NAMES = {"F": "forward", "B": "backward (dX)", "W": "dW", "U": "update"}
def check_path(path: str, force: bool = False) -> None:
    """The plot file must end in .pdf, .svg or .png, its directory must exist, and no file there unless
    ``force``."""
    check_plot_path(path, force=force)


def plot_timeline(result: pl.PipelineResult, path: str) -> None:
    """Draw one row per stage (stage 0 on top), time in ms, and save to ``path`` (.pdf, .svg or .png; whether an
    existing file may be replaced was checked before the work, :func:`check_path`)."""
    plt = pyplot()
    from matplotlib.patches import Patch  # lazy: start-up time

    p = result.p
    total = result.completion * 1e3
    fig_w = min(40.0, max(8.0, 0.03 * len(result.events) / max(p, 1) + 6.0))
    fig, ax = plt.subplots(figsize=(fig_w, 0.9 + 0.45 * p))
    height = 0.7
    few = len(result.events) <= 60 * p
    for s in range(p):
        y = p - 1 - s
        ax.broken_barh([(0.0, total)], (y - height / 2, height), facecolors="#EEEEEE", edgecolor="none")
    for e in result.events:
        y = p - 1 - e.stage
        width = (e.end - e.start) * 1e3
        if width <= 0:
            continue
        hatch = "//" if (e.chunk or e.direction) else None
        ax.broken_barh([(e.start * 1e3, width)], (y - height / 2, height), facecolors=COLOURS[e.kind],
                       edgecolor="white", linewidth=0.5, hatch=hatch)
        if few and e.kind != "U" and width > 0.012 * total:
            ax.text(e.start * 1e3 + width / 2, y, str(e.microbatch), ha="center", va="center",
                    fontsize=6, color="white")
    ax.set_yticks(range(p))
    ax.set_yticklabels([f"stage {p - 1 - y}" for y in range(p)])
    ax.set_xlim(0, total * 1.01 if total > 0 else 1)
    ax.set_ylim(-0.6, p - 0.4)
    ax.set_xlabel("time / ms")
    ax.set_title(f"{result.schedule}: p = {p}, m = {result.m}, completion {total:,.1f} ms, "
                 f"bubble {result.bubble_fraction * 100:.1f} %", fontsize=10)
    kinds = [k for k in ("F", "B", "W", "U") if any(e.kind == k and e.end > e.start for e in result.events)]
    names = dict(NAMES)
    if "W" not in kinds:
        names["B"] = "backward"
    elif any(e.fused for e in result.events):
        names["B"] = "dX, or whole backward"
    handles = [Patch(facecolor=COLOURS[k], label=names[k]) for k in kinds]
    handles.append(Patch(facecolor="#EEEEEE", label="idle"))
    if any(e.chunk or e.direction for e in result.events):
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="//",
                             label="up direction" if result.schedule.startswith("dualpipe") else "later chunk"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.25 if p > 2 else -0.45),
              ncol=len(handles), fontsize=8, frameon=False)
    fig.tight_layout()
    try:
        save_figure(fig, path)
    finally:
        plt.close(fig)
