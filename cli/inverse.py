"""`tpopt inverse`: which model size and how many tokens a budget and a date buy (issue 41).

Parsing and rendering only: the question and the decision are :func:`tpopt.optimizer.inverse.ask`."""

from __future__ import annotations

from typing import Any

import click

from tpopt.catalogs.scenario import read_scenario_file, with_overrides
from tpopt.cli.common import (
    EXIT_INFEASIBLE,
    dump_json,
    handle_errors,
    overrides_from,
    scenario_options,
    scenario_source,
)
from tpopt.cli.render import solve_text
from tpopt.cli.request import request_from, solve_options
from tpopt.errors import InputError
from tpopt.models.units import fmt_count
from tpopt.optimizer.inverse import SIZE_FAMILIES, InverseResult, ask


@click.command()
@scenario_options(without=("model", "tokens"))
@solve_options
@click.option("--models", "model_list", default="qwen3", show_default=True,
              help=f"Sizes to choose among: a family ({', '.join(SIZE_FAMILIES)}) or catalog model names, "
                   f"comma-separated.")
@click.option("--tokens", "token_spec", default="10B:2T:16", show_default=True,
              help="Training tokens to choose among: LO:HI[:COUNT] (COUNT values in equal ratios, default 16) "
                   "or a comma-separated list.")
@click.option("--law", default="chinchilla", show_default=True,
              help="Scaling-law fit of scaling.toml (built in: chinchilla, besiroglu; more via --catalog).")
@click.option("--target-loss", help="Least cost reaching this predicted loss (default: least loss under --max-cost).")
@click.option("--unique-tokens", help="Unique tokens of data available, e.g. 500B (default: unlimited).")
@click.option("--max-epochs", default="1", show_default=True,
              help="Epochs allowed over the unique tokens; repeats count as Muennighoff et al.'s effective data.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@handle_errors
def inverse(model_list: str, token_spec: str, law: str, target_loss: str | None, unique_tokens: str | None,
            max_epochs: str, as_json: bool, **kw: Any) -> None:
    """Choose the model size and training tokens: least predicted loss under the budget (--max-cost) by the
    deadline, or least cost for --target-loss; each candidate's plan is the cheapest meeting the date.

    Example: tpopt inverse --hw h100-sxm --deadline 30d --max-cost 500000 --models qwen3
    """
    if kw["objective"] != "cost":
        raise InputError("tpopt inverse takes each candidate's cheapest on-time plan: --objective must be cost")
    raw = with_overrides(read_scenario_file(scenario_source(kw)), overrides_from(kw))
    res, out = ask(raw, kw.get("catalog_dirs") or (), kw["solver"], request_from(kw), models=model_list,
                   tokens=token_spec, law=law, target_loss=target_loss, unique_tokens=unique_tokens,
                   max_epochs=max_epochs, max_cost=kw.get("max_cost"))
    if as_json:
        click.echo(dump_json(out), nl=False)
    else:
        click.echo(result_text(res, out), nl=False)
    if res.chosen is None:
        raise SystemExit(EXIT_INFEASIBLE)


def result_text(res: InverseResult, out: dict[str, Any]) -> str:
    q, c = res.question, res.chosen
    budget = "no budget" if q.budget is None else f"budget {q.budget:,.0f}"
    head = (f"tpopt inverse: {out['objective']}" + (f" <= {q.target_loss:g}" if q.target_loss is not None else "")
            + f", {budget}, over {len(q.models)} sizes x {len(q.tokens)} token values ({res.solves} plan solves)")
    lines = [head, f"Fit: {q.law.name}: L = {q.law.E:g} + {q.law.A:g}/N^{q.law.alpha:g} + {q.law.B:g}/D^{q.law.beta:g} "
                   f"({q.law.source}); fitted on N {q.law.min_params:.3g}-{q.law.max_params:.3g}, "
                   f"D {q.law.min_tokens:.3g}-{q.law.max_tokens:.3g}"]
    if q.unique_tokens is not None:
        lines.append(f"Data: {fmt_count(q.unique_tokens)} unique tokens, up to {q.max_epochs:g} epochs; repeats count "
                     f"as effective data D' = U + U R* (1 - exp(-R/R*)), R* = {q.repeat_decay:g} "
                     f"({out['data_constrained']['source']})")
    if c is None or c.best is None:
        lines.append("No size and token count meets the deadline" + (" within the budget" if q.budget else "")
                     + (" and the target loss" if q.target_loss is not None else "") + ".")
    else:
        assert c.loss is not None and c.tokens is not None and c.effective_tokens is not None
        where = "extrapolated: " + "; ".join(c.extrapolated) if c.extrapolated else "within the fit's range"
        lines.append(f"Chosen: {c.model} ({fmt_count(c.params, 4)} parameters), {fmt_count(c.tokens, 4)} tokens: "
                     f"predicted loss {c.loss:.4f} ({q.law.name}, {where})")
        lines.append(f"Binds: {c.binds}" + (f": {c.detail}" if c.detail else ""))
    lines += ["", "Candidates:", _table(res)]
    text = "\n".join(lines) + "\n"
    if c is not None and c.best is not None and c.best.report is not None and c.best.view is not None:
        r = c.best.report
        text += "\n" + solve_text({**{k: r[k] for k in ("status", "objective", "solver")}, **r}, c.best.view)
    return text


def _table(res: InverseResult) -> str:
    unit_tokens = "tokens" if res.question.objective == "cost" else "max tokens"
    rows = [("model", "params", unit_tokens, "loss", "cost", "finish d", "binds / note")]
    for x in res.candidates:
        rows.append((x.model, fmt_count(x.params, 4), "-" if x.tokens is None else fmt_count(x.tokens, 4),
                     f">={x.loss_bound:.4f}" if x.loss_bound is not None else "-" if x.loss is None
                     else f"{x.loss:.4f}" + ("*" if x.extrapolated else ""),
                     "-" if x.cost is None else f"{x.cost:,.0f}",
                     "-" if x.finish_days is None else f"{x.finish_days:.1f}",
                     "pruned: " + x.detail if x.pruned else x.binds))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = ["  " + "  ".join(v.ljust(w) if i in (0, 6) else v.rjust(w)
                            for i, (v, w) in enumerate(zip(r, widths, strict=True))).rstrip() for r in rows]
    if any(x.extrapolated for x in res.candidates):
        out.append("  * extrapolated: N or D outside the fit's range")
    return "\n".join(out)
