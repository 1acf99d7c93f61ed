"""``tpopt checkpoint`` and ``tpopt stragglers``: the long-run overhead model (chapter 10.4.3-10.4.5).

The commands are thin: they parse units once, call the plain numeric cores
:func:`checkpoint_report` / :func:`stragglers_report` (numbers in SI units in, a JSON-ready dict
out) and print. A scenario file can later fill the same numbers and call the same cores.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, SupportsFloat, cast

import click
import numpy as np

from tpopt.catalogs import load_catalog
from tpopt.cli.common import (
    EXIT_INFEASIBLE,
    EXIT_UNKNOWN,
    dump_json,
    echo_builtin_note,
    fail,
    handle_errors,
    load_scenario_from,
    plan_from,
    scenario_options,
)
from tpopt.cli.plots import check_plot_path, pyplot, save_figure
from tpopt.cli.render import aligned_lines, fit_lines
from tpopt.cli.request import request_with_limit, time_limit_option
from tpopt.errors import InputError
from tpopt.models import families as F
from tpopt.models import reliability as rel
from tpopt.models.arch import param_count
from tpopt.models.evaluate import evaluate
from tpopt.models.units import (
    DAY,
    GB,
    HOUR,
    parse_bandwidth,
    parse_duration,
    parse_fraction,
    parse_int,
    parse_number,
)
from tpopt.optimizer.outer import solve
from tpopt.optimizer.result import Status
from tpopt.presentation import plan_line

if TYPE_CHECKING:
    from tpopt.models.evaluate import Evaluation
    from tpopt.models.plan import Scenario

#: Meta research-cluster figure used by the chapter: a 1024-card job is interrupted once per 7.9 h,
#: i.e. a per-card MTBF of 1024 x 7.9 h = 337.07 d (training-systems chapter 10.4).
DEFAULT_CARD_MTBF = cast(float, rel.card_mtbf_from_job(7.9 * HOUR, 1024))  # scalars in, a float out
DEFAULT_MODEL = "qwen3-8b"
DEFAULT_INTERVALS = "300s,900s,1800s"


# --------------------------------------------------------------------------------------------
# numeric cores (plain numbers in, JSON-ready dict out)


def checkpoint_report(*, cards: int, n_params: int, bytes_per_param: float = 14.0,
                      write_bandwidth: float = 7 * GB, restore: float = 120.0,
                      card_mtbf: float = DEFAULT_CARD_MTBF, spike_interval: float | None = None,
                      planned_interval: float | None = None, intervals: Iterable[float] = (300.0, 900.0, 1800.0),
                      mode: str = "sync", copy_time: float = 0.5) -> dict[str, Any]:
    """Interval table and optima of the checkpoint/failure overhead, all in SI units.

    ``mode = "sync"``: pause c = size / B, no commit lag. ``mode = "async"``: pause c = copy time,
    commit lag w = copy + size / B, intervals below size / B build a backlog (flagged; the optimum is
    raised to size / B). The Poisson-retry model is reported for sync saves only.
    """
    if mode not in ("sync", "async"):
        raise InputError(f"--mode: expected 'sync' or 'async', got {mode!r}")
    size = rel.checkpoint_bytes(n_params, bytes_per_param)
    upload = cast(float, rel.write_time(size, write_bandwidth))  # scalars in, a float out
    if mode == "sync":
        pause, lag, min_interval = upload, 0.0, 0.0
    else:
        lag = cast(float, rel.commit_lag(size, write_bandwidth, copy_time))  # scalars in, a float out
        pause, min_interval = cast(float, rel.async_pause(copy_time)), upload
    lam_hw = float(rel.job_failure_rate(cards, card_mtbf))
    lam_spike = float(rel.event_rate(spike_interval))
    lam_planned = float(rel.event_rate(planned_interval))
    lam = lam_hw + lam_spike + lam_planned

    rows = []
    for row in rel.interval_table(intervals, pause, lam, restore, lag):
        d = {
            "interval": row.interval,
            "save": row.save,
            "redo": row.redo,
            "restart": row.restart,
            "total": row.total,
            "poisson_total": float(rel.overhead_poisson(row.interval, pause, lam, restore))
            if mode == "sync" else None,
            "demanded_write_rate": float(rel.demanded_write_rate(size, row.interval)),
            "backlog_ok": bool(rel.backlog_ok(row.interval, upload)),
        }
        rows.append(d)

    tau_fo = float(rel.optimal_interval_first_order(pause, lam, min_interval))
    optimum = {
        "first_order": {
            "interval": tau_fo,
            "overhead": float(rel.overhead_first_order(tau_fo, pause, lam, restore, lag)),
            "backlog_bound": min_interval > math.sqrt(2 * pause / lam),
        },
        "poisson": None,
    }
    if mode == "sync":
        tau_p = float(rel.optimal_interval_poisson(pause, lam))
        optimum["poisson"] = {"interval": tau_p,
                              "overhead": float(rel.overhead_poisson(tau_p, pause, lam, restore))}
    return {
        "mode": mode,
        "inputs": {
            "cards": cards,
            "params": n_params,
            "bytes_per_param": bytes_per_param,
            "write_bandwidth": write_bandwidth,
            "restore": restore,
            "card_mtbf": card_mtbf,
            "spike_interval": spike_interval,
            "planned_interval": planned_interval,
            "copy_time": copy_time if mode == "async" else None,
        },
        "checkpoint_bytes": size,
        "write_time": upload,
        "pause": pause,
        "commit_lag": lag,
        "rates": {"hardware": lam_hw, "spike": lam_spike, "planned": lam_planned, "total": lam},
        "job_mtbf": 1.0 / lam,
        "intervals": rows,
        "optimum": optimum,
    }


def stragglers_report(*, cards: int, mu: float = 52.2, sigma: float, fixed: float = 0.58,
                      slow_k: float = 3.0, interval: float = 600.0, restore: float = 120.0) -> dict[str, Any]:
    """Expected step with per-card jitter, and wait / redistribute / evict for one slow card.

    ``sigma`` is absolute (seconds). With one card there is nobody to wait for or to take over its
    work, so ``slow_card`` is ``None``.
    """
    e_max = float(rel.expected_max_std_normal(cards))
    base = mu + fixed
    step = float(rel.straggler_step(mu, sigma, cards, fixed))
    report = {
        "inputs": {"cards": cards, "mu": mu, "sigma": sigma, "sigma_fraction": sigma / mu,
                   "fixed": fixed, "slow_k": slow_k, "interval": interval, "restore": restore},
        "expected_max_factor": e_max,
        "step": {"no_jitter": base, "expected": step, "jitter_cost": step - base},
        "slow_card": None,
    }
    if cards >= 2:
        extra = float(rel.slow_card_wait(sigma, cards, slow_k))
        evict = float(rel.evict_cost(interval, restore))
        report["slow_card"] = {
            "time": mu + slow_k * sigma,
            "expected_max_factor_others": float(rel.expected_max_std_normal(cards - 1)),
            "responses": [
                {"response": "wait", "step": float(rel.wait_step(mu, sigma, cards, slow_k, fixed)),
                 "extra_wait": extra},
                {"response": "redistribute", "step": float(rel.redistribute_step(mu, sigma, cards, fixed))},
                {"response": "evict", "one_off_cost": evict, "steps_lost": evict / step,
                 "break_even_steps": _finite_or_none(rel.evict_break_even_steps(interval, restore, extra))},
            ],
        }
    return report


def _finite_or_none(x: SupportsFloat) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


# --------------------------------------------------------------------------------------------
# parsing helpers


def _parse_sigma(text: str, mu: float) -> float:
    """Absolute sigma (s) from a fraction of mu (``5%``, ``0.05``) or a duration (``2.61s``)."""
    t = text.strip()
    if t.endswith("%") or re.fullmatch(r"[+-]?[\d_.,]+([eE][+-]?\d+)?", t):
        # at most 100 % of mu, as stragglers.sigma in a scenario: the normal jitter model would otherwise give
        # a card negative compute time with a probability above 16 %
        return parse_fraction(t, "--sigma", allow_zero=True, maximum=1.0) * mu
    try:
        sigma = parse_duration(t, "--sigma")
    except InputError:
        raise InputError(f"--sigma: cannot read {text!r}: give a fraction of --mu such as 5% or 0.05, "
                         "or a duration such as 2.61s") from None
    if sigma > mu:
        raise InputError(f"--sigma: {text!r} is above --mu ({mu:g} s); the normal jitter model needs sigma <= mu")
    return sigma


def _parse_intervals(text: str) -> list[float]:
    parts = [p for p in text.split(",") if p.strip()]
    if not parts:
        raise InputError("--intervals: give a comma-separated list such as 300s,900s,1800s")
    return [parse_duration(p, "--intervals", allow_zero=False) for p in parts]


def _optional_duration(text: str | None, what: str) -> float | None:
    if text is None or text.strip().lower() in ("none", "never", "inf", "off"):
        return None
    return parse_duration(text, what, allow_zero=False)


def _resolve_params(params: str | None, model: str | None) -> tuple[int, str]:
    if params is not None and model is not None:
        raise InputError("give either --params or --model, not both")
    if params is not None:
        return parse_int(params, "--params", minimum=1), "given"

    name = model or DEFAULT_MODEL
    return param_count(load_catalog().model(name)), name


# --------------------------------------------------------------------------------------------
# formatting


def _pct(x: float) -> str:
    return f"{x * 100:6.2f} %"


def _dur(x: float) -> str:
    if not math.isfinite(x):
        return "inf"
    if x >= 2 * DAY:
        return f"{x / DAY:.2f} d"
    if x >= 2 * HOUR:
        return f"{x / HOUR:.2f} h"
    if x >= 120:
        return f"{x:,.2f} s ({x / 60:.1f} min)"
    return f"{x:.3f} s"


def _checkpoint_text(rep: dict[str, Any], source: str) -> str:
    inp = rep["inputs"]
    lines = [
        f"checkpoint  {rep['checkpoint_bytes']:,.0f} bytes ({rep['checkpoint_bytes'] / GB:.1f} GB) = "
        f"{inp['params']:,} params x {inp['bytes_per_param']:g} B ({source})",
        f"write       {inp['write_bandwidth'] / GB:g} GB/s -> {rep['write_time']:.3f} s per checkpoint",
    ]
    if rep["mode"] == "sync":
        lines.append(f"pause       {rep['pause']:.3f} s per save (sync: the whole write)")
    else:
        lines.append(f"pause       {rep['pause']:.3f} s per save (async: snapshot copy); "
                     f"commit lag {rep['commit_lag']:.3f} s (copy + upload)")
    r = rep["rates"]
    lines.append(f"failures    {inp['cards']:,} cards, card MTBF {inp['card_mtbf'] / DAY:.2f} d -> "
                 f"{r['hardware'] * HOUR:.4f} /h")
    if r["spike"]:
        lines.append(f"spikes      one rollback per {_dur(inp['spike_interval'])} -> {r['spike'] * HOUR:.4f} /h")
    if r["planned"]:
        lines.append(f"planned     one interruption per {_dur(inp['planned_interval'])} -> "
                     f"{r['planned'] * HOUR:.4f} /h")
    lines.append(f"events      lambda {r['total'] * HOUR:.4f} /h (job MTBF {_dur(rep['job_mtbf'])}); "
                 f"restart {inp['restore']:g} s each")
    lines.append("")
    sync = rep["mode"] == "sync"
    head = f"{'interval':>10}  {'save':>8}  {'redo':>8}  {'restart':>8}  {'total':>8}"
    head += f"  {'Poisson':>8}" if sync else ""
    head += f"  {'write demand':>12}"
    lines.append(head)
    for row in rep["intervals"]:
        line = (f"{row['interval']:>8g} s  {_pct(row['save'])}  {_pct(row['redo'])}  {_pct(row['restart'])}"
                f"  {_pct(row['total'])}")
        if sync:
            line += f"  {_pct(row['poisson_total'])}"
        flag = "" if row["backlog_ok"] else "  backlog grows"
        line += f"  {row['demanded_write_rate'] / GB:>7.3f} GB/s{flag}"
        lines.append(line)
    lines.append("")
    fo = rep["optimum"]["first_order"]
    note = " (raised to size/bandwidth: backlog bound)" if fo["backlog_bound"] else ""
    lines.append(f"first-order optimum    tau* = {_dur(fo['interval'])}, overhead {fo['overhead'] * 100:.2f} %"
                 f"{note}")
    if rep["optimum"]["poisson"] is not None:
        po = rep["optimum"]["poisson"]
        lines.append(f"Poisson-retry optimum  tau* = {_dur(po['interval'])}, overhead {po['overhead'] * 100:.2f} %")
    else:
        lines.append("Poisson-retry optimum  (sync saves only)")
    return "\n".join(lines)


def _stragglers_text(rep: dict[str, Any]) -> str:
    inp, st = rep["inputs"], rep["step"]
    lines = [
        f"cards {inp['cards']}, per-card compute mu {inp['mu']:.2f} s, sigma {inp['sigma']:.3f} s "
        f"({inp['sigma_fraction'] * 100:.3g} %), fixed waits {inp['fixed']:.2f} s",
        f"E[max of {inp['cards']} standard normals] = {rep['expected_max_factor']:.4f}",
        f"step without jitter  {st['no_jitter']:.2f} s",
        f"expected step        {st['expected']:.2f} s  (+{st['jitter_cost']:.2f} s from stragglers)",
    ]
    sc = rep["slow_card"]
    if sc is None:
        lines.append("one card: no slow-card responses to compare")
        return fit_lines("\n".join(lines))
    n = inp["cards"]
    wait, redis, evict = sc["responses"]
    lines += [
        "",
        f"one persistently slow card at mu + {inp['slow_k']:g} sigma = {sc['time']:.2f} s "
        f"(E[max of the other {n - 1}] = {sc['expected_max_factor_others']:.4f} sigma)",
    ]
    be = evict["break_even_steps"]
    be_txt = "never pays off against waiting" if be is None else f"beats waiting after {be:,.0f} slow steps"
    rows = [("response", "step", "note"),
            ("wait", f"{wait['step']:.2f} s", f"the others wait {wait['extra_wait']:.2f} s per step"),
            ("redistribute", f"{redis['step']:.2f} s", f"its work spread over {n - 1} cards (x {n}/{n - 1}), no "
                                                       "migration cost"),
            ("evict", "-", f"one-off {evict['one_off_cost']:.1f} s (tau/2 + r, tau {inp['interval']:g} s, r "
                           f"{inp['restore']:g} s) = {evict['steps_lost']:.1f} steps; {be_txt}")]
    return fit_lines("\n".join(lines)) + "\n" + "\n".join(aligned_lines(rows, left=(0, 2), indent="", gap=3,
                                                                       note=True))


def _plot_curves(rep: dict[str, Any], path: str) -> None:
    """Save / redo / total cost against the interval (log x), first-order optimum marked."""

    plt = pyplot()

    pause, lag = rep["pause"], rep["commit_lag"]
    lam, r = rep["rates"]["total"], rep["inputs"]["restore"]
    opt = rep["optimum"]["first_order"]
    given = [row["interval"] for row in rep["intervals"]]
    lo = min([opt["interval"] / 10.0] + given) / 1.5
    hi = max([opt["interval"] * 10.0] + given) * 1.5
    tau = np.geomspace(lo, hi, 400)
    save = rel.save_overhead(tau, pause) * 100
    redo = rel.redo_overhead(tau, lam, lag) * 100
    total = rel.overhead_first_order(tau, pause, lam, r, lag) * 100

    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot(tau, save, color="tab:blue", label="save")
    ax.plot(tau, redo, color="tab:orange", label="redo after failures")
    ax.plot(tau, total, color="tab:green", label="total (incl. restart)")
    ax.plot(given, [row["total"] * 100 for row in rep["intervals"]], "x", color="tab:green",
            label="table intervals")
    ax.plot([opt["interval"]], [opt["overhead"] * 100], "o", color="black",
            label=f"optimum {opt['interval']:.0f} s, {opt['overhead'] * 100:.2f} %")
    ax.axvline(opt["interval"], color="black", linestyle=":", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_ylim(0, min(float(np.max(total)), 4 * max(opt["overhead"] * 100, 0.1)) * 1.05)
    ax.set_xlabel("useful training between saves (s)")
    ax.set_ylabel("overhead (% of useful time)")
    inp = rep["inputs"]
    ax.set_title(f"{inp['cards']} cards, {rep['mode']} save pause {pause:.3g} s, restart {r:g} s")
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    try:
        save_figure(fig, path)
    finally:
        plt.close(fig)


# --------------------------------------------------------------------------------------------
# commands


def _scenario_and_plan(kw: dict[str, Any], cards: int | None,
                       need_plan: bool) -> tuple[Scenario, Evaluation | None, str]:
    """The scenario of the shared options (the built-in design case without --scenario) and, when
    ``need_plan``, the plan whose figures the command uses: the scenario's plan with ``cards`` cards
    (other choices from its [search] table, as ``tpopt evaluate`` takes them) or, without ``cards``,
    its optimum. Returns (scenario, evaluation or None, description of the plan)."""

    sc = load_scenario_from(kw)
    if not need_plan:
        return sc, None, ""
    ev: Evaluation | None
    if cards is not None:
        ev = evaluate(sc, plan_from(sc, {"cards": cards}))
        how = f"the scenario's plan on {cards} cards"
    else:
        req = request_with_limit(kw.get("time_limit", "60s"))
        r = solve(sc, "cpsat", req)
        if r.status == Status.INFEASIBLE:
            fail(f"scenario {sc.name} has no feasible plan (proven); give --cards for the figures of a plan of "
                 "your choice (tpopt explain says why)", EXIT_INFEASIBLE)
        if not r.feasible:
            fail(f"scenario {sc.name}: no plan found within the time limit ({req.time_limit:g} s), and no proof "
                 "that none exists; give a longer --time-limit, or --cards for the figures of a plan of your choice",
                 EXIT_UNKNOWN)
        ev = r.best
        how = "the scenario's optimal plan" if r.status == Status.OPTIMAL else \
            f"the best plan found within the time limit ({req.time_limit:g} s; not proven optimal)"
    return sc, ev, how


def _plan_note(ev: Evaluation, how: str, sc: Scenario) -> str:
    bad = [c.name for c in ev.violated() if c.name != F.STEP_BUDGET]
    text = f"plan        {how}: {plan_line(ev.plan_dict())} (scenario {sc.name})"
    if bad:
        text += f"\n            note: this plan violates {', '.join(bad)}; its figures are indicative"
    return text


def _scenario_defaults(sc: Scenario, ev: Evaluation | None) -> dict[str, Any]:
    """Checkpoint inputs from a scenario (SI units) and, when given, its plan's interval and mode."""

    rel = sc.reliability
    tau = {t for t in sc.search.save_interval_s if t > 0}
    out = {"n_params": param_count(sc.model), "source": f"{sc.model.name}, scenario {sc.name}",
           "bytes_per_param": rel.bytes_per_param, "write_bandwidth": rel.write_bandwidth,
           "restore": rel.restore_s, "card_mtbf": rel.card_mtbf_s, "spike_interval": rel.event_interval_s,
           "mode": sc.search.save_mode[0], "copy_time": rel.snapshot_copy_s}
    if ev is not None:
        tau = {ev.plan.save_interval_s}
        out["mode"] = ev.plan.save_mode
        out["cards"] = ev.plan.cards
    out["intervals"] = sorted(tau | {300.0, 900.0, 1800.0})
    return out


@click.command("checkpoint")
@scenario_options(without=("model",))  # its own --model: the catalog model whose N is tabulated
@click.option("--cards", default=None,
              help="Cards in the job (any failure interrupts it) [default: the scenario's optimal plan, whose "
                   "save interval and mode are tabulated too].")
@click.option("--params", default=None, help="Parameter count N (e.g. 8190735360 or 8.19B).")
@click.option("--model", default=None, help="Catalog model whose N to use [default: the scenario's model].")
@click.option("--bytes-per-param", default=None,
              help="Checkpoint bytes per parameter [default: the scenario's, 14: weights 2 + fp32 master 4 + "
                   "Adam moments 8].")
@click.option("--write-bandwidth", default=None, help="Aggregate checkpoint write bandwidth [default: the scenario's].")
@click.option("--restore", default=None, help="Restart time after each failure or rollback [default: the scenario's].")
@click.option("--card-mtbf", default=None,
              help="Per-card MTBF [default: the scenario's; the design case's 337.07d = 1024 cards x 7.9 h].")
@click.option("--spike-interval", default=None, help="Mean time between loss-spike rollbacks (e.g. 7d).")
@click.option("--planned-interval", default=None, help="Mean time between planned interruptions.")
@click.option("--intervals", default=None,
              help=f"Checkpoint intervals to tabulate [default {DEFAULT_INTERVALS} and the plan's own].")
@click.option("--mode", default=None, type=click.Choice(["sync", "async"]),
              help="sync: training pauses for the whole write; async: only for the snapshot copy "
                   "[default: the plan's].")
@click.option("--copy-time", default=None, help="Async snapshot copy pause [default: the scenario's, 0.5s].")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (SI units, fractions).")
@click.option("--plot", default=None, help="Write the cost curves to FILE (.pdf, .svg or .png).")
@click.option("--force", is_flag=True, help="Overwrite --plot if the file exists.")
@time_limit_option("Time limit of the solve for the scenario's optimal plan (without --cards): 60s, 5min, or seconds.")
@handle_errors
def checkpoint(cards: str | None, params: str | None, model: str | None, bytes_per_param: str | None,
               write_bandwidth: str | None, restore: str | None, card_mtbf: str | None, spike_interval: str | None,
               planned_interval: str | None, intervals: str | None, mode: str | None, copy_time: str | None,
               as_json: bool, plot: str | None, force: bool, **kw: Any) -> None:
    """Checkpoint interval table: save, redo and restart overhead, first-order and Poisson optima.

    Inputs come from the scenario (the built-in design case without --scenario) and, without --cards,
    from its optimal plan (cards, save interval and mode); every flag overrides one of them.

    Example: tpopt checkpoint --cards 1024 --plot curves.pdf
    """
    n_cards = parse_int(cards, "--cards", minimum=1) if cards is not None else None
    if plot:
        check_plot_path(plot, force=force)
    sc, ev, how = _scenario_and_plan(kw, n_cards, need_plan=n_cards is None)
    base = _scenario_defaults(sc, ev)
    if params is not None or model is not None:
        n_params, source = _resolve_params(params, model)
    else:
        n_params, source = base["n_params"], base["source"]
    mtbf = (parse_duration(card_mtbf, "--card-mtbf", allow_zero=False) if card_mtbf is not None
            else base["card_mtbf"])
    rep = checkpoint_report(
        cards=n_cards if n_cards is not None else base["cards"],
        n_params=n_params,
        bytes_per_param=(parse_number(bytes_per_param, "--bytes-per-param", allow_zero=False)
                         if bytes_per_param is not None else base["bytes_per_param"]),
        write_bandwidth=(parse_bandwidth(write_bandwidth, "--write-bandwidth", allow_zero=False)
                         if write_bandwidth is not None else base["write_bandwidth"]),
        restore=parse_duration(restore, "--restore") if restore is not None else base["restore"],
        card_mtbf=mtbf if mtbf is not None else float("inf"),
        spike_interval=(_optional_duration(spike_interval, "--spike-interval") if spike_interval is not None
                        else base["spike_interval"]),
        planned_interval=_optional_duration(planned_interval, "--planned-interval"),
        intervals=_parse_intervals(intervals) if intervals is not None else base["intervals"],
        mode=mode or base["mode"],
        copy_time=parse_duration(copy_time, "--copy-time") if copy_time is not None else base["copy_time"],
    )
    if ev is not None:
        rep["plan"] = ev.plan_dict()
    if plot:
        _plot_curves(rep, plot)
    flags = (params or model, bytes_per_param, write_bandwidth, restore, card_mtbf, spike_interval, intervals, mode,
             copy_time, cards)
    if any(f is None for f in flags):  # some figure came from the scenario
        echo_builtin_note(kw, as_json, rep)
    if as_json:
        click.echo(dump_json(rep), nl=False)
    else:
        if ev is not None:
            click.echo(fit_lines(_plan_note(ev, how, sc)))
        click.echo(fit_lines(_checkpoint_text(rep, source)))
        if plot:
            click.echo(f"plot written to {plot}")


@click.command("stragglers")
@scenario_options
@click.option("--cards", default=None, help="Cards in synchronous data parallelism [default: the scenario's optimal "
                                            "plan].")
@click.option("--sigma", default=None, help="Per-card jitter: fraction of --mu (5%, 0.05) or a duration (2.61s) "
                                            "[default: the scenario's stragglers.sigma].")
@click.option("--mu", default=None, help="Mean per-card compute time per step [default: the plan's].")
@click.option("--fixed", default=None,
              help="Fixed waits per step (exposed communication, input) [default: the plan's].")
@click.option("--slow-k", default="3", show_default=True, help="The slow card runs at mu + k sigma (k >= 0).")
@click.option("--interval", default=None, help="Checkpoint interval (for eviction) [default: the plan's].")
@click.option("--restore", default=None, help="Restart time (for eviction) [default: the scenario's].")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (seconds).")
@time_limit_option("Time limit of the solve for the scenario's optimal plan (without --cards): 60s, 5min, or seconds.")
@handle_errors
def stragglers(cards: str | None, sigma: str | None, mu: str | None, fixed: str | None, slow_k: str,
               interval: str | None, restore: str | None, as_json: bool, **kw: Any) -> None:
    """Expected step time with per-card jitter; wait / redistribute / evict one slow card.

    mu (compute per step), the fixed waits (exposed communication, offload and input), the checkpoint
    interval and the restart time come from the scenario's plan: the one on --cards cards, else its
    optimum (the built-in design case without --scenario: 52.2 s and 0.58 s on 48 cards).

    Example: tpopt stragglers --sigma 5%
    """
    n_cards = parse_int(cards, "--cards", minimum=1) if cards is not None else None
    k = parse_number(slow_k, "--slow-k")  # k >= 0: a slow card is not faster than the mean
    need_plan = n_cards is None or mu is None or fixed is None or interval is None
    sc, ev, how = _scenario_and_plan(kw, n_cards, need_plan=need_plan)
    m = ev.metrics if ev is not None else {}
    mu_s = parse_duration(mu, "--mu", allow_zero=False) if mu is not None else m["compute_s"]
    if sigma is None:
        if sc.reliability.straggler_sigma <= 0:
            raise InputError("give --sigma (e.g. 5%): the scenario sets no stragglers.sigma")
        sigma_s = sc.reliability.straggler_sigma * mu_s
    else:
        sigma_s = _parse_sigma(sigma, mu_s)
    # ev is a plan's evaluation whenever a figure below is not given (need_plan)
    rep = stragglers_report(
        cards=n_cards if n_cards is not None else cast("Evaluation", ev).plan.cards,
        mu=mu_s,
        sigma=sigma_s,
        fixed=(parse_duration(fixed, "--fixed") if fixed is not None
               else m["step_s"] - m["compute_s"] - m["straggler_s"]),
        slow_k=k,
        interval=(parse_duration(interval, "--interval", allow_zero=False) if interval is not None
                  else cast("Evaluation", ev).plan.save_interval_s),
        restore=parse_duration(restore, "--restore") if restore is not None else sc.reliability.restore_s,
    )
    if ev is not None:
        rep["plan"] = ev.plan_dict()
    if need_plan or sigma is None or restore is None:  # some figure came from the scenario
        echo_builtin_note(kw, as_json, rep)
    if as_json:
        click.echo(dump_json(rep), nl=False)
    else:
        if ev is not None:
            click.echo(fit_lines(_plan_note(ev, how, sc)))
        click.echo(_stragglers_text(rep))
