"""Stage utilisation over one cycle of an RL plan (presentation only; the numbers come from
:func:`tpopt.optimizer.rl.report`).

One row per resource (rollout cards, CPU verifier, learner cards; one row for shared cards), one
steady-state cycle on the time axis: generation (blue), verification (teal), learning (orange), weight
sync (green), state swap (grey-brown); idle time shows as the light track. Like the chapter's
figures 10-41 and 10-42, the async cycle overlaps generating the next batch with learning the last.
"""

from __future__ import annotations

from typing import Any

from tpopt.cli.plots import pyplot, save_figure

COLOURS = {"generate": "#4C78A8", "verify": "#72B7B2", "learn": "#F58518", "sync": "#54A24B", "swap": "#9D755D"}
NAMES = {"generate": "generation", "verify": "verification", "learn": "learning", "sync": "weight sync",
         "swap": "state to host and back"}


def cycle_blocks(out: dict[str, Any]) -> tuple[list[str], dict[str, Any], float]:
    """Rows, {row: [(kind, start, duration)]} and the cycle length of one steady-state cycle."""
    p, s = out["plan"], out["stages"]
    gen, roll = s["generation"]["time_s"], s["rollout_s"]
    ver, kind = s["verification"]["time_s"], s["verification"]["kind"]
    learn, sync, swap = s["learning"]["time_s"], s["weight_sync"]["time_s"], s["weight_sync"]["swap_s"]
    blocks: dict[str, Any] = {}
    rollout = [("generate", 0.0, gen)] + ([("verify", gen, roll - gen)] if kind == "reward-model" else [])
    verifier = [("verify", max(0.0, roll - ver), ver)]
    if p["placement"] == "shared":  # generate (and score), then sync, swap, learn on the same cards
        rows = ["shared cards"] + (["CPU verifier"] if kind == "cpu" else [])
        blocks["shared cards"] = rollout + [("sync", roll, sync), ("swap", roll + sync, swap),
                                           ("learn", roll + sync + swap, learn)]
        blocks["CPU verifier"] = verifier
        return rows, blocks, roll + sync + swap + learn
    rows = ["rollout cards"] + (["CPU verifier"] if kind == "cpu" else []) + ["learner cards"]
    if p["staleness"]:  # steady state: the next batch generates while the last one trains
        work, learner = max(roll, learn), [("learn", 0.0, learn)]
    else:
        work, learner = roll + learn, [("learn", roll, learn)]
    blocks["rollout cards"] = rollout + [("sync", work, sync)]
    blocks["learner cards"] = learner + [("sync", work, sync)]
    blocks["CPU verifier"] = verifier
    return rows, blocks, work + sync


def plot_cycle(out: dict[str, Any], path: str) -> None:
    """Draw one cycle of the chosen plan, each row labelled with its busy share, and save it."""
    from matplotlib.patches import Patch  # lazy: start-up time

    plt = pyplot()  # fixed element ids and no dates: the same plan gives the same bytes
    rows, blocks, total = cycle_blocks(out)
    fig, ax = plt.subplots(figsize=(10, 0.9 + 0.5 * len(rows)))
    labels = []
    for i, row in enumerate(rows):
        y = len(rows) - 1 - i
        ax.broken_barh([(0.0, total)], (y - 0.35, 0.7), facecolors="#EEEEEE", edgecolor="none")
        busy = 0.0
        for kind, start, dur in blocks[row]:
            if dur > 0:
                ax.broken_barh([(start, dur)], (y - 0.35, 0.7), facecolors=COLOURS[kind], edgecolor="white")
                busy += dur
        labels.append(f"{row} ({busy / total * 100:.0f} % busy)" if total > 0 else row)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels[::-1])
    ax.set_xlim(0, total * 1.01 if total > 0 else 1)
    ax.set_xlabel("time in one cycle / s")
    p = out["plan"]
    mode = "one-step async" if p["staleness"] else "synchronous"
    ax.set_title(f"{p['placement']} cards, {mode}: cycle {total:,.1f} s, bottleneck {out['stages']['bottleneck']}",
                 fontsize=10)
    kinds = [k for k in COLOURS if any(k == b[0] and b[2] > 0 for r in rows for b in blocks[r])]
    handles = [Patch(facecolor=COLOURS[k], label=NAMES[k]) for k in kinds] + [Patch(facecolor="#EEEEEE", label="idle")]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=len(handles), fontsize=8,
              frameon=False)
    try:
        save_figure(fig, path, bbox_inches="tight")
    finally:
        plt.close(fig)
