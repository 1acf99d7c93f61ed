"""`tpopt inverse`: which model size and how many tokens a budget and a date buy (issue 41).

Parsing and rendering only: the decision is :func:`tpopt.optimizer.inverse.solve_inverse`."""

from __future__ import annotations

from typing import Any

import click

from tpopt.catalogs.scenario import read_scenario_file, with_overrides
from tpopt.cli.common import (
    EXIT_INFEASIBLE,
    dump_json,
    echo_builtin_note,
    handle_errors,
    overrides_from,
    scenario_options,
    scenario_source,
)
from tpopt.cli.plots import check_plot_path, pyplot, save_figure
from tpopt.cli.render import aligned_lines, fit_lines, solve_text
from tpopt.cli.request import request_from, solve_options
from tpopt.errors import InputError
from tpopt.models.units import fmt_count
from tpopt.optimizer.inverse import (
    DEADLINE_REACH,
    NO_PLAN,
    SARDANA,
    SERVING_MFU,
    SIZE_FAMILIES,
    Candidate,
    FrontPoint,
    InverseQuestion,
    InverseResult,
    Unreachable,
    ask,
)
from tpopt.optimizer.result import Request


@click.command()
@scenario_options(without=("model", "tokens"))
@solve_options
@click.option("--models", "model_list", default="qwen3", show_default=True,
              help=f"Sizes to choose among: a family ({', '.join(SIZE_FAMILIES)}) or catalog model names, "
                   f"comma-separated.")
@click.option("--generated", help="Also offer the family's generated sizes: MIN:MAX[:COUNT] parameters (e.g. "
                                   "1B:100B:8), shapes by the --models family's rule in scaling.toml.")
@click.option("--tokens", "token_spec", default="10B:2T:16", show_default=True,
              help="Training tokens to choose among: LO:HI[:COUNT] (COUNT values in equal ratios, default 16) "
                   "or a comma-separated list.")
@click.option("--token-resolution", help="How finely a LO:HI range's most tokens are found: the grid locates the "
                                         "bracket, a bisection over the tokens refines it to this fraction, e.g. "
                                         "0.5% (the default; 0: the grid's values only). A list offers its values.")
@click.option("--law", default="chinchilla", show_default=True,
              help="Scaling-law fit of scaling.toml (built in: chinchilla, besiroglu; more via --catalog).")
@click.option("--target-loss", help="Least cost reaching this predicted loss, each size trained on exactly the tokens "
                                    "it needs within the --tokens range (default: least loss under --max-cost).")
@click.option("--unique-tokens", help="Unique tokens of data available, e.g. 500B (default: unlimited).")
@click.option("--max-epochs", default="1", show_default=True,
              help="Epochs allowed over the unique tokens; repeats count as Muennighoff et al.'s effective data.")
@click.option("--inference-tokens", help="Tokens the model will serve, e.g. 2T: adds the serving cost 2 N x tokens "
                                          "FLOPs to each size's cost (Sardana et al. 2024).")
@click.option("--serving-price", help="Serving price in USD per 1e15 FLOP (default: the scenario's card price "
                                      "over its peak x --serving-mfu).")
@click.option("--serving-mfu", default=str(SERVING_MFU), show_default=True,
              help="Model FLOPs utilisation of serving, for the serving price derived from the card.")
@click.option("--front", is_flag=True, help="Also print the fronts of predicted loss against cost (8 budgets up "
                                           "to the best loss's cost) and against the deadline (x0.25 to x4).")
@click.option("--plot", type=click.Path(), help="Draw the loss fronts (.pdf, .svg or .png; needs the plots extra); "
                                                "implies --front.")
@click.option("--force", is_flag=True, help="Overwrite --plot if the file exists.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@handle_errors
def inverse(model_list: str, generated: str | None, token_spec: str, token_resolution: str | None, law: str,
            target_loss: str | None, unique_tokens: str | None, max_epochs: str, inference_tokens: str | None,
            serving_price: str | None, serving_mfu: str, front: bool, plot: str | None, force: bool, as_json: bool,
            **kw: Any) -> None:
    """Choose the model size and training tokens: least predicted loss under the budget (--max-cost) by the
    deadline, or least cost for --target-loss; each candidate's plan is the cheapest meeting the date.

    Example: tpopt inverse --hw h100-sxm --deadline 30d --max-cost 500000 --models qwen3
    """
    if kw["objective"] != "cost":
        raise InputError("tpopt inverse takes each candidate's cheapest on-time plan: --objective must be cost")
    if plot is not None:
        check_plot_path(plot, force=force)
    raw = with_overrides(read_scenario_file(scenario_source(kw)), overrides_from(kw))
    asked = ask(raw, kw.get("catalog_dirs") or (), kw["solver"], request_from(kw), models=model_list,
                tokens=token_spec, law=law, target_loss=target_loss, unique_tokens=unique_tokens,
                max_epochs=max_epochs, max_cost=kw.get("max_cost"), inference_tokens=inference_tokens,
                serving_price=serving_price, serving_mfu=serving_mfu, front=front or plot is not None,
                generated=generated, token_resolution=token_resolution)
    res, out, q, why, fronts = asked.res, asked.out, asked.question, asked.why, asked.fronts
    echo_builtin_note(kw, as_json, out)
    if as_json:
        click.echo(dump_json(out), nl=False)
    else:
        click.echo(result_text(res, out) + ("" if why is None else unreachable_text(q, why))
                   + ("" if fronts is None else front_text(q, *fronts)), nl=False)
    if plot is not None and fronts is not None:
        plot_fronts(fronts[0], fronts[1], q.law.name, plot)
    if res.chosen is None:
        raise SystemExit(EXIT_INFEASIBLE)


def cost_unit(res: InverseResult) -> str:
    """The unit of the candidates' costs and of the budget: USD, or card-hours on a card without a price."""
    return next((x.best.cost_unit for x in res.candidates if x.best is not None), "USD")


def result_text(res: InverseResult, out: dict[str, Any]) -> str:
    q, c = res.question, res.chosen
    unit = cost_unit(res)
    budget = "no budget" if q.budget is None else f"budget {q.budget:,.0f} {unit}"
    head = (f"tpopt inverse: {out['objective']}" + (f" <= {q.target_loss:g}" if q.target_loss is not None else "")
            + f", {budget}, over {len(q.models)} sizes x {len(q.tokens)} token values"
            + ("" if q.token_resolution is None or q.target_loss is not None
               else f", most tokens refined to {q.token_resolution:.2%}") + f" ({res.solves} plan solves)")
    lines = [head, f"Fit: {q.law.name}: L = {q.law.E:g} + {q.law.A:g}/N^{q.law.alpha:g} + {q.law.B:g}/D^{q.law.beta:g} "
                   f"({q.law.source}); fitted on N {q.law.min_params:.3g}-{q.law.max_params:.3g}, "
                   f"D {q.law.min_tokens:.3g}-{q.law.max_tokens:.3g}"]
    if q.unique_tokens is not None:
        lines.append(f"Data: {fmt_count(q.unique_tokens)} unique tokens, up to {q.max_epochs:g} epochs; repeats count "
                     f"as effective data D' = U + U R* (1 - exp(-R/R*)), R* = {q.repeat_decay:g} "
                     f"({out['data_constrained']['source']})")
    if q.target_loss is not None:
        lines.append("Tokens: each size's fewest reaching the target, D = (B / (target - E - A/N^alpha))^(1/beta) "
                     + ("through the effective data inverted, D = U (1 - R* ln(1 - (D'/U - 1)/R*)) beyond U, "
                        if q.unique_tokens is not None else "")
                     + f"rounded up to a whole token, at least {fmt_count(q.tokens[0], 4)} and at most "
                     + f"{fmt_count(q.tokens[-1], 4)} (the --tokens range)")
    if q.inference_tokens:
        lines.append(f"Serving: {fmt_count(q.inference_tokens)} inference tokens at 2 N FLOPs each, "
                     f"{q.serve_usd_per_pflop:.4g} USD per 1e15 FLOP ({q.serving_basis}); each size's cost is "
                     f"training + serving ({SARDANA})")
    if c is None or c.best is None:
        lines.append("No size and token count meets the deadline" + (" within the budget" if q.budget else "")
                     + (" and the target loss" if q.target_loss is not None else "") + ".")
    else:
        assert c.loss is not None and c.tokens is not None and c.effective_tokens is not None
        where = "extrapolated: " + "; ".join(c.extrapolated) if c.extrapolated else "within the fit's range"
        lines.append(f"Chosen: {c.model} ({fmt_count(c.params, 4)} parameters), {fmt_count(c.tokens, 4)} tokens: "
                     f"predicted loss {c.loss:.4f} ({q.law.name}, {where})")
        if q.inference_tokens and c.cost is not None:
            lines.append(f"Cost: training {c.cost:,.0f} + serving {c.serve_cost:,.0f} = {c.cost + c.serve_cost:,.0f} "
                         f"{unit}")
        lines.append(f"Binds: {c.binds}" + (f": {c.detail}" if c.detail else ""))
    text = fit_lines("\n".join(lines)) + "\n" + "\n".join(["", "Candidates:", _table(res)]) + "\n"
    if c is not None and c.best is not None and c.best.report is not None and c.best.view is not None:
        r = c.best.report
        text += "\n" + solve_text({**{k: r[k] for k in ("status", "objective", "solver")}, **r}, c.best.view)
    return text


def front_text(q: InverseQuestion, by_cost: list[FrontPoint], by_date: list[FrontPoint], solves: int) -> str:
    """The two fronts as tables: the least predicted loss at each budget, and at each deadline."""
    def rows(points: list[FrontPoint], head: str, fmt: str) -> list[str]:
        table = [(head, "loss", "model", "tokens", "cost")]
        for p in points:
            c = p.chosen
            table.append((format(p.at, fmt), "-" if c is None or c.loss is None else f"{c.loss:.4f}",
                          "-" if c is None else c.model,
                          "-" if c is None or c.tokens is None else fmt_count(c.tokens, 4),
                          "-" if c is None or c.total_cost is None else f"{c.total_cost:,.0f}"))
        return aligned_lines(table, left=(2,))

    by = "within the budget" if q.budget is not None else "no budget"
    lines = ["", fit_lines(f"Front: least predicted loss against the budget, by the deadline ({solves} plan solves "
                           f"for both fronts, {q.law.name}):"), *rows(by_cost, "budget", ",.0f"),
             "", fit_lines(f"Front: least predicted loss against the deadline, {by}:"),
             *rows(by_date, "deadline d", ".1f")]
    return "\n".join(lines) + "\n"


def plot_fronts(by_cost: list[FrontPoint], by_date: list[FrontPoint], law: str, path: str) -> None:
    """Loss against budget (log) and against deadline, side by side."""
    plt = pyplot("tpopt-inverse")
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, points, xlabel in ((left, by_cost, "budget (USD)"), (right, by_date, "deadline (days)")):
        pts = [(p.at, p.chosen.loss) for p in points if p.chosen is not None and p.chosen.loss is not None]
        ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o")
        for p in points:
            if p.chosen is not None and p.chosen.loss is not None:
                ax.annotate(p.chosen.model, (p.at, p.chosen.loss), fontsize=7, textcoords="offset points",
                            xytext=(3, 3))
        ax.set_xlabel(xlabel)
        ax.grid(True, alpha=0.3)
    left.set_xscale("log")
    left.set_ylabel(f"predicted loss ({law})")
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def unreachable_text(q: InverseQuestion, u: Unreachable) -> str:
    """What reaches the target instead: the smallest budget, the shortest deadline, the loss within reach."""
    def at(c: Candidate) -> str:
        assert c.tokens is not None
        return f"{c.model}, {fmt_count(c.tokens, 4)} tokens"

    lines = ["", f"Why no size reaches loss {q.target_loss:g} ({u.solves} further plan solves, each answer re-solved):"]
    b = u.min_budget
    if u.out_of_reach is not None:  # neither searched: no budget or deadline changes what stops every size
        lines.append(f"  No budget or deadline reaches it: {u.out_of_reach}.")
    else:
        if q.budget is not None:
            lines.append(f"  Smallest budget reaching it by the deadline: {b.total_cost:,.0f} ({at(b)})"
                         if b is not None and b.total_cost is not None else "  No budget reaches it by the deadline.")
        reach = f"{DEADLINE_REACH:g} times the deadline"
        lines.append(f"  Shortest deadline reaching it{' within the budget' if q.budget is not None else ''}: "
                     f"{u.min_deadline_days:.1f} days ({at(u.at_deadline)}; bisection to 0.1 day)"
                     if u.min_deadline_days is not None and u.at_deadline is not None
                     else f"  No deadline up to {reach} reaches it.")
    r = u.reachable
    within = "Within the budget by the deadline" if q.budget is not None else "By the deadline"
    lines.append(f"  {within}: least predicted loss {r.loss:.4f} ({at(r)}, cost "
                 f"{r.total_cost:,.0f})" if r is not None and r.loss is not None and r.total_cost is not None
                 else f"  {within} no size and token count is feasible.")
    return fit_lines("\n".join(lines)) + "\n"


def _table(res: InverseResult) -> str:
    unit_tokens = "tokens" if res.question.objective == "cost" else "max tokens"
    serve = bool(res.question.inference_tokens)
    unit = cost_unit(res)
    rows = [("model", "params", unit_tokens, "loss", f"cost {unit}" + (" (train+serve)" if serve else ""), "finish d",
             "binds / note")]
    for x in res.candidates:
        total = x.total_cost
        rows.append((x.model, fmt_count(x.params, 4), "-" if x.tokens is None else fmt_count(x.tokens, 4),
                     f">={x.loss_bound:.4f}" if x.loss_bound is not None else "-" if x.loss is None
                     else f"{x.loss:.4f}" + ("*" if x.extrapolated else ""),
                     "-" if x.cost is None or total is None else f"{total:,.0f}" if not serve
                     else f"{total:,.0f} ({x.cost:,.0f}+{x.serve_cost:,.0f})",
                     "-" if x.finish_days is None else f"{x.finish_days:.1f}",
                     "pruned: " + x.detail if x.pruned else x.binds + ("; grid value, not refined (cannot win)"
                                                                       if x.coarse else "")
                     + (" at any deadline (memory, layout or input rule it out)" if x.binds == NO_PLAN else "")))
    out = aligned_lines(rows, left=(0, 6), note=True)  # the note wraps in its column at a narrow width
    if any(x.extrapolated for x in res.candidates):
        out.append("  * extrapolated: N or D outside the fit's range")
    return "\n".join(out)


#: ``tpopt sweep`` options a loss front takes as single values (the fronts sweep the budget and the deadline).
SINGLE = ("deadline", "reserved", "efficiency", "max_cards", "max_cost", "seq_len", "global_batch")
#: ``tpopt sweep`` options a loss front does not use.
UNUSED = ("tokens", "card_hour", "confidence")


def sweep_loss_fronts(kw: dict[str, Any], models: str, tokens: str, law: str, solver: str,
                      time_limit: float | None, plot: str | None, as_json: bool, force: bool = False) -> None:
    """``tpopt sweep --loss-front MODELS``: the fronts of ``tpopt inverse --front`` (least predicted loss against
    the budget and against the deadline) on the sweep's scenario, printed (or ``--json``) and drawn at ``--plot``
    as ``tpopt inverse --plot`` draws them."""
    for key in UNUSED:
        if kw.get(key) is not None:
            flag = "--" + key.replace("_", "-")
            raise InputError(f"{flag} is not used by sweep --loss-front" + (" (the token values are --loss-tokens)"
                                                                             if key == "tokens" else "; drop it"))
    for key in SINGLE:
        value = kw.get(key)
        if value is not None and any(c in str(value) for c in ":,"):
            raise InputError(f"--{key.replace('_', '-')} {value}: sweep --loss-front takes one value (the fronts "
                             f"sweep the budget and the deadline)")
    if plot is not None:
        check_plot_path(plot, force=force)
    raw = with_overrides(read_scenario_file(scenario_source(kw)), overrides_from(kw))
    req = Request() if time_limit is None else Request(time_limit=time_limit)
    asked = ask(raw, kw.get("catalog_dirs") or (), solver, req, models=models, tokens=tokens, law=law,
                max_cost=kw.get("max_cost"), front=True)
    q, fronts = asked.question, asked.fronts
    assert fronts is not None
    if as_json:
        click.echo(dump_json({"law": asked.out["law"], "budget": q.budget, "models": list(q.models),
                              "tokens_grid": list(q.tokens), **asked.out["front"]}), nl=False)
    else:
        click.echo(f"tpopt sweep --loss-front: {len(q.models)} sizes x {len(q.tokens)} token values, each point the "
                   f"least predicted loss whose cheapest plan meets the date (as tpopt inverse)\n"
                   + front_text(q, *fronts), nl=False)
    if plot is not None:
        plot_fronts(fronts[0], fronts[1], q.law.name, plot)
