"""The step-time uncertainty table (``uncertainty.toml``): read once into :class:`tpopt.models.evidence.Evidence`.

``[step_sigma.<factor>]`` (``base`` and each of tpopt.models.evidence.FACTORS): ``value`` (a log-sd) and
``source``; ``[memory_error]``: ``value`` (relative) and ``source``; ``[fitted.<accelerator>]``: the envelope
of the runs fitted on the card (``stacks``, ``seq_len = [min, max]``, ``cards_max``, ``precisions``,
``experts_per_card``) and ``source``; ``[stack_evidence]`` (optional): ``reference`` (the stacks the cards are
calibrated on, no stack factor of their own), ``source``, and ``[stack_evidence.sources]``: per stack the
sources whose runs checked it (a stack checked by one source counts as not fitted for the sigma,
tpopt.models.evidence.SOURCES_MIN), and ``[stack_evidence.spread]``: such a stack's own out-of-sample spread
(its stack factor where larger than the table's); ``[card_evidence.spread]`` (optional): per card fitted on one
source's runs, its own leave-one-source-out spread (its base where larger). benchmarks/uncertainty_fit.py derives
and writes it (:func:`toml_text`).
"""

from __future__ import annotations

import functools
import json
import math
import tomllib
from pathlib import Path
from typing import Any

from tpopt.catalogs.tables import builtin_toml, read_text_capped
from tpopt.errors import InputError
from tpopt.models.evidence import FACTORS, Envelope, Evidence

UNCERTAINTY_FILE = Path(__file__).resolve().parent / "uncertainty.toml"


def _sigma(table: dict[str, Any], name: str) -> tuple[float, str]:
    entry = table.get(name)
    if not isinstance(entry, dict):
        raise InputError(f"uncertainty.toml: [step_sigma.{name}] is missing")
    value, source = entry.get("value"), entry.get("source")
    if not isinstance(value, (int, float)) or not 0 <= float(value) < 5 or not math.isfinite(float(value)):
        raise InputError(f"uncertainty.toml: [step_sigma.{name}] value must be a log-sd in [0, 5)")
    if not isinstance(source, str) or not source.strip():
        raise InputError(f"uncertainty.toml: [step_sigma.{name}] needs a source")
    return float(value), source


def _envelope(acc: str, e: dict[str, Any]) -> Envelope:
    try:
        lo, hi = (int(x) for x in e["seq_len"])
        return Envelope(tuple(str(s) for s in e["stacks"]), (lo, hi), float(e["cards_max"]),
                        tuple(str(p) for p in e["precisions"]), float(e.get("experts_per_card", 0.0)))
    except (KeyError, TypeError, ValueError):
        raise InputError(f"uncertainty.toml: [fitted.{acc}] needs stacks, seq_len = [min, max], cards_max, "
                         "precisions") from None


def parse(data: dict[str, Any]) -> Evidence:
    """The table's dict (tomllib) as :class:`Evidence`; one InputError line for a bad entry."""
    sig = data.get("step_sigma", {})
    base, base_src = _sigma(sig, "base")
    parts = tuple((f, *_sigma(sig, f)) for f in FACTORS)
    mem = data.get("memory_error", {})
    if not isinstance(mem.get("value"), (int, float)) or not 0 <= float(mem["value"]) < 1 \
            or not isinstance(mem.get("source"), str):
        raise InputError("uncertainty.toml: [memory_error] needs a value in [0, 1) and a source")
    envs = tuple((acc, _envelope(acc, e)) for acc, e in data.get("fitted", {}).items())
    if not envs:
        raise InputError("uncertainty.toml: no [fitted.<accelerator>] envelope")
    ref, srcs, spread = _stack_evidence(data.get("stack_evidence", {}))
    cards = _spread(data.get("card_evidence", {}), "card_evidence")
    return Evidence(base, base_src, parts, float(mem["value"]), mem["source"], envs, srcs, ref, spread, cards)


def _spread(e: Any, name: str) -> tuple[tuple[str, float], ...]:
    """A ``[name.spread]`` table of log-sds (``[name]`` needs a source); empty without it."""
    if not e:
        return ()
    spread = e.get("spread", {}) if isinstance(e, dict) else None
    if not isinstance(spread, dict) or not isinstance(e.get("source"), str) or not all(
            isinstance(v, (int, float)) and 0 <= float(v) < 5 for v in spread.values()):
        raise InputError(f"uncertainty.toml: [{name}] needs a source and [{name}.spread] log-sds in [0, 5)")
    return tuple((str(k), float(v)) for k, v in spread.items())


def _stack_evidence(e: Any) -> tuple[tuple[str, ...], tuple[tuple[str, tuple[str, ...]], ...],
                                     tuple[tuple[str, float], ...]]:
    """([stack_evidence]'s reference stacks, its sources per stack, its single-source stacks' own spreads);
    empty without the table."""
    if not e:
        return (), (), ()
    ref = e.get("reference") if isinstance(e, dict) else None
    srcs = e.get("sources") if isinstance(e, dict) else None
    if not isinstance(ref, list) or not isinstance(srcs, dict) or not isinstance(e.get("source"), str) \
            or not all(isinstance(v, list) and v for v in srcs.values()):
        raise InputError("uncertainty.toml: [stack_evidence] needs reference = [stacks], a source and "
                         "[stack_evidence.sources] with a non-empty list of sources per stack")
    return (tuple(str(s) for s in ref), tuple((str(k), tuple(str(x) for x in v)) for k, v in srcs.items()),
            _spread(e, "stack_evidence"))


@functools.cache
def load_evidence() -> Evidence:
    """The built-in table, read once."""
    text = read_text_capped(UNCERTAINTY_FILE, "uncertainty catalog")
    try:
        return parse(builtin_toml(UNCERTAINTY_FILE, text, tomllib.loads))
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"uncertainty.toml: {exc}") from None


def _q(s: str) -> str:
    return json.dumps(s)  # a TOML basic string is a JSON string for these texts


def toml_text(base: float, base_source: str, parts: list[tuple[str, float, str]], memory_error: float,
              memory_source: str, envelopes: tuple[tuple[str, Envelope], ...], tables: dict[str, str],
              reference: tuple[str, ...] = (), stack_sources: tuple[tuple[str, tuple[str, ...]], ...] = (),
              stack_spread: tuple[tuple[str, float], ...] = (),
              card_spread: tuple[tuple[str, float], ...] = ()) -> str:
    """The table as benchmarks/uncertainty_fit.py writes it (the refit path)."""
    lines = ["# Step-time uncertainty by distance from the evidence (tpopt.models.evidence): sigma = sqrt(base^2 +",
             "# sum of the squares of the factors that apply), independent log errors in quadrature.",
             "# Written by benchmarks/uncertainty_fit.py --write from leave-one-source-out residuals;",
             "# do not edit by hand.",
             "", "[step_sigma.base]", f"value = {base:.3f}", f"source = {_q(base_source)}"]
    for f, v, src in parts:
        lines += ["", f"[step_sigma.{f}]", f"value = {v:.3f}", f"source = {_q(src)}"]
    lines += ["", "[memory_error]", f"value = {memory_error:.3f}", f"source = {_q(memory_source)}"]
    for acc, e in envelopes:
        lines += ["", f"[fitted.{acc}]", f"stacks = {json.dumps(list(e.stacks))}",
                  f"seq_len = [{e.seq[0]}, {e.seq[1]}]", f"cards_max = {e.cards_max:g}",
                  f"precisions = {json.dumps(list(e.recipes))}", f"experts_per_card = {e.experts_per_card:g}",
                  f"source = {_q('the runs of ' + tables[acc] + ' fitted on the card')}"]
    if stack_sources:
        lines += ["", "[stack_evidence]", f"reference = {json.dumps(list(reference))}",
                  f"source = {_q(STACK_EVIDENCE_SOURCE)}", "", "[stack_evidence.sources]"]
        lines += [f"{st} = {json.dumps(list(srcs))}" for st, srcs in stack_sources]
        if stack_spread:
            lines += ["", "[stack_evidence.spread]"] + [f"{st} = {v:.3f}" for st, v in stack_spread]
    if card_spread:
        lines += ["", "[card_evidence]", f"source = {_q(CARD_EVIDENCE_SOURCE)}", "", "[card_evidence.spread]"]
        lines += [f"{acc} = {v:.3f}" for acc, v in card_spread]
    return "\n".join(lines) + "\n"


STACK_EVIDENCE_SOURCE = ("reference: the stacks the cards' kernel parameters are calibrated on (performance.toml "
                         "[acc.calibration] stacks), whose error is the card's; sources: the publishing sources of "
                         "each stack's runs in the validation tables (benchmarks/validate_published.py run_source): a "
                         "stack whose kernel factor rests on one source reverts to the reference kernels when that "
                         "source is left out, so it counts as not fitted for the sigma; spread: such a stack's own "
                         "out-of-sample spread, the leave-one-source-out RMS log error of its runs less the base in "
                         "quadrature (benchmarks/uncertainty_fit.py), its stack factor where larger than the table's")


CARD_EVIDENCE_SOURCE = ("spread: a card whose calibrating runs (the reference stacks', inside the calibration "
                        "envelope) all come from one publishing source: the RMS log error of those runs predicted "
                        "with the card at its public priors, that source left out (benchmarks/uncertainty_fit.py); "
                        "the card's base where larger than the table's and its own leave-one-out spread")


COVERS = "covers"
"""The ``[acc.calibration.covers]`` table ``tpopt calibrate`` writes: what its runs covered (:func:`covers_lines`)."""


def covers_lines(acc: str, env: Envelope) -> list[str]:
    """``[acc.calibration.covers]`` as performance.toml text: the stacks the runs ran, their sequence lengths
    [min, max] in tokens, their largest card count, their precision recipes (tpopt.models.evidence.recipe_class)
    and their largest routed experts per card (0: dense runs only)."""
    return [f"[{acc}.calibration.{COVERS}]", f"stacks = {json.dumps(list(env.stacks))}",
            f"seq_len_tokens = [{env.seq[0]}, {env.seq[1]}]", f"cards_max = {env.cards_max:g}",
            f"precisions = {json.dumps(list(env.recipes))}", f"experts_per_card_max = {env.experts_per_card:g}"]


def covers_of(t: Any, where: str) -> Envelope:
    """The :class:`Envelope` of a ``[acc.calibration.covers]`` table (:func:`covers_lines`); one InputError line
    for a bad one."""
    try:
        lo, hi = (int(x) for x in t["seq_len_tokens"])
        cards, experts = float(t["cards_max"]), float(t["experts_per_card_max"])
        stacks, recipes = t["stacks"], t["precisions"]
        if not (isinstance(stacks, list) and isinstance(recipes, list) and 0 < lo <= hi and cards >= 1
                and experts >= 0 and all(isinstance(x, str) for x in stacks + recipes)):
            raise ValueError
    except (KeyError, TypeError, ValueError):
        raise InputError(f"{where} needs stacks = [names], seq_len_tokens = [min, max], cards_max >= 1, "
                         "precisions = [recipes], experts_per_card_max >= 0") from None
    return Envelope(tuple(stacks), (lo, hi), cards, tuple(recipes), experts)
