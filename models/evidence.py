"""What a plan's step time rests on, and the step-time uncertainty that follows (issue 35 items 1-2).

The step-time model is trusted as far as it was checked: on a card fitted on published runs, on a stack
those runs ran, within the sequence lengths, card counts, precision recipes and experts per card they
covered (the card's :class:`Envelope`). Each way a plan leaves that evidence is a *factor*
(:data:`FACTORS`, :func:`applies`) with its own contribution to the log-sd of measured / predicted step
time, and the contributions are independent log errors, so they combine in quadrature:

    sigma = sqrt(base^2 + sum over the factors f that apply of c_f^2)

``base`` the leave-one-source-out RMS log error of runs inside the envelope, ``c_f`` the part of a factor's
runs' leave-one-source-out RMS above that (benchmarks/uncertainty_fit.py derives both and writes them to
catalogs/uncertainty.toml, each with its source). A card with no envelope (no run fitted on it) rests on
priors: ``card_prior`` applies, and the other factors are judged against the union of every card's
envelope (what was fitted anywhere). Memory: a plan whose peak is within the memory model's stated
relative error of the limit "may not fit" (:func:`memory_margin`).

Pure relations on plain numbers: the catalog reader (tpopt.catalogs.uncertainty) builds :class:`Evidence`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from tpopt.models.numeric import FloatArray

CARD_PRIOR, STACK, MOE, SEQ, PRECISION, SCALE = ("card_prior", "stack_unfitted", "moe", "seq_beyond",
                                                 "precision_unfitted", "scale_beyond")
PRECISION_UNSEEN = "precision_unseen"
"""A low-precision recipe no card was fitted on (NVFP4 today): its further share on top of
``precision_unfitted`` (a recipe measured on another card says how far the recipes differ; one measured
nowhere does not)."""
FACTORS = (CARD_PRIOR, STACK, MOE, SEQ, PRECISION, PRECISION_UNSEEN, SCALE)
"""The ways a plan leaves the evidence, in the order the footing names them."""
ONE_SOURCE = "stack_one_source"
"""The footing's words for a stack whose kernel factor rests on one source's runs (the stack factor applies)."""
MOE_ON_PRIOR = "moe_on_prior"
"""The footing's words for MoE on a card with no run of its own (the MoE factor applies against what the fitted
cards ran: a prior card was fitted on no runs, dense or MoE)."""
SOURCES_MIN = 2
"""A stack's fitted kernel factor counts as fitted (for the sigma) when its runs come from at least this many
sources: a factor fitted on one source's runs reverts to the reference kernels when that source is left out
(benchmarks/validate_published.py stack_left_out), so its out-of-sample error is an unfitted stack's."""

REASONS = {CARD_PRIOR: "{acc} rests on priors (no run fitted on it)",
           STACK: "{stack} not fitted",
           ONE_SOURCE: "{stack} fitted on one source ({sources}): not checked on another, so as not fitted{spread}",
           MOE: "MoE at {experts:g} experts per card on a card fitted on {fitted}",
           MOE_ON_PRIOR: "MoE at {experts:g} experts per card, beyond what the fitted cards ran ({fitted})",
           SEQ: "sequence {seq} beyond the longest fitted, {hi}",
           PRECISION: "{recipe} not among the fitted recipes ({fitted})",
           PRECISION_UNSEEN: "{recipe} fitted on no card",
           SCALE: "{cards:g} cards beyond the fitted {hi:g}"}
"""The footing's words for each factor (formatted with the plan's and the envelope's figures)."""
OWN_REASONS = {**REASONS,
               STACK: "{stack} not the calibrated stack ({fitted})",
               MOE: "MoE at {experts:g} experts per card beyond the calibration's runs ({fitted})",
               SEQ: "sequence {seq} beyond the longest calibrated, {hi}",
               PRECISION: "{recipe} not among the calibrated recipes ({fitted})",
               SCALE: "{cards:g} cards beyond the calibrated {hi:g}"}
"""The footing's words for each factor on a calibration of one's own (``tpopt calibrate``: ``own`` of
:func:`applies`), its runs' coverage in place of the fitted envelope."""


def recipe_class(matrix: str) -> str:
    """The precision recipe as the uncertainty tells them apart: the low-precision matrix formats by name
    (``fp8`` per-tensor scaling, ``mxfp8``, ``nvfp4``), every 16-bit one (BF16, FP16) as ``16-bit``."""
    return matrix if matrix in ("fp8", "mxfp8", "nvfp4") else "16-bit"


@dataclass(frozen=True)
class Envelope:
    """What a card's fit covered: the stacks its runs ran, their sequence lengths (min, max), their largest
    card count, their precision recipes (:func:`recipe_class`) and their largest experts per card (0: dense
    runs only)."""

    stacks: tuple[str, ...]
    seq: tuple[int, int]
    cards_max: float
    recipes: tuple[str, ...]
    experts_per_card: float = 0.0

    def union(self, other: Envelope) -> Envelope:
        return Envelope(tuple(dict.fromkeys(self.stacks + other.stacks)),
                        (min(self.seq[0], other.seq[0]), max(self.seq[1], other.seq[1])),
                        max(self.cards_max, other.cards_max), tuple(dict.fromkeys(self.recipes + other.recipes)),
                        max(self.experts_per_card, other.experts_per_card))


@dataclass(frozen=True)
class Evidence:
    """The uncertainty table (catalogs/uncertainty.toml) as plain numbers: the base log-sd, each factor's
    contribution and source, the memory model's relative error and source, and each fitted card's
    envelope (cards absent rest on priors)."""

    base: float
    base_source: str
    contributions: tuple[tuple[str, float, str], ...]  # (factor, c_f, source)
    memory_error: float
    memory_source: str
    envelopes: tuple[tuple[str, Envelope], ...]
    stack_sources: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (stack, the sources its runs came from)
    reference_stacks: tuple[str, ...] = ()  # the stacks the cards are calibrated on: no stack factor of their own
    stack_spread: tuple[tuple[str, float], ...] = ()  # (single-source stack, its own out-of-sample spread)
    card_spread: tuple[tuple[str, float], ...] = ()  # (card fitted on one source, its own out-of-sample spread)

    def card_spread_of(self, acc: str) -> float:
        """A card fitted on one source's runs: its own out-of-sample spread, the RMS log error of those runs
        predicted with the card at its public priors (its source left out); 0 for other cards. Its base where
        larger (tpopt.models.terms.card_base)."""
        return next((v for a, v in self.card_spread if a == acc), 0.0)

    def stack_contribution(self, stack: str) -> float:
        """The stack factor's contribution for ``stack``: the table's, or the stack's own out-of-sample spread
        where it was fitted on one source and that is larger (its runs' leave-one-source-out RMS log error less
        the base in quadrature: how far its kernels were from the reference's)."""
        own = next((v for st, v in self.stack_spread if st == stack), 0.0)
        return max(self.contribution(STACK), own)

    def sources_of(self, stack: str) -> tuple[str, ...] | None:
        """The sources whose runs checked ``stack`` (None: the table does not list stacks' sources)."""
        if not self.stack_sources:
            return None
        return next((s for st, s in self.stack_sources if st == stack), ())

    def stack_fitted(self, stack: str) -> bool:
        """Whether a stack counts as fitted for the sigma: a reference stack (the cards' calibration is its),
        else run by some card's fitted runs and, where the table lists the stacks' sources, checked by runs
        of at least :data:`SOURCES_MIN` sources."""
        if stack in self.reference_stacks:
            return True
        srcs = self.sources_of(stack)
        return stack in self.everywhere().stacks and (srcs is None or len(srcs) >= SOURCES_MIN)

    def contribution(self, factor: str) -> float:
        return next(v for f, v, _ in self.contributions if f == factor)

    def envelope(self, acc: str) -> Envelope | None:
        return next((e for a, e in self.envelopes if a == acc), None)

    def everywhere(self) -> Envelope:
        """The union of every card's envelope: what was fitted on some card."""
        envs = [e for _, e in self.envelopes]
        out = envs[0]
        for e in envs[1:]:
            out = out.union(e)
        return out


@dataclass(frozen=True)
class PlanFacts:
    """What the factors read from a plan: accelerator, stack, MoE (experts per card; 0 dense), sequence
    length, precision matrix format, cards."""

    acc: str
    stack: str
    seq: int
    matrix: str
    experts_per_card: float = 0.0
    cards: float = 1.0


def applies(ev: Evidence, facts: PlanFacts, cards: ArrayLike, experts_per_card: ArrayLike,
            own: Envelope | None = None) -> dict[str, np.ndarray]:
    """Which factors apply (bool arrays, broadcast over ``cards`` and ``experts_per_card``). ``env`` the
    card's own envelope, or for a card resting on priors the union of all envelopes (``all``); ``own`` a
    calibration of one's own (what its runs covered): ``env`` and ``all`` for the stack, the sequence and
    the scale are then ``own`` (its runs are what the card's parameters were fitted on), no card prior,
    and a recipe is unseen only where neither ``own`` nor any fitted card ran it:

    - card_prior: no envelope of its own (no run fitted on the card);
    - stack_unfitted: the stack does not count as fitted (:meth:`Evidence.stack_fitted`: no run of any card
      ran it, or its runs all come from one source; a reference stack always counts);
    - moe: experts per card above the largest ``env`` was fitted on (0 for dense-only fits);
    - seq_beyond: sequence length above the longest fitted anywhere (``all``; shorter ones are inside);
    - precision_unfitted: a low-precision recipe (FP8 per-tensor, MXFP8, NVFP4) ``env`` was not fitted on
      (16-bit is the recipe every card's priors were measured in);
    - precision_unseen: besides, a low-precision recipe no card was fitted on (``all``);
    - scale_beyond: more cards than ``env``'s largest fitted run."""
    if own is not None:
        return _applies(facts, cards, experts_per_card, own, own, own.union(ev.everywhere()), False,
                        facts.stack not in own.stacks)
    card = ev.envelope(facts.acc)
    every = ev.everywhere()
    env = card if card is not None else every
    return _applies(facts, cards, experts_per_card, env, every, every, card is None,
                    not ev.stack_fitted(facts.stack))


def _applies(facts: PlanFacts, cards: ArrayLike, experts_per_card: ArrayLike, env: Envelope, longest: Envelope,
             seen: Envelope, prior: bool, stack: bool) -> dict[str, np.ndarray]:
    """:func:`applies` against ``env`` (MoE, precision, scale), ``longest`` (sequence) and ``seen`` (a recipe
    run anywhere), with the card-prior and stack flags given."""
    c = np.asarray(cards, dtype=float)
    e = np.asarray(experts_per_card, dtype=float)
    shape = np.broadcast_shapes(c.shape, e.shape)
    rc = recipe_class(facts.matrix)

    def const(flag: bool) -> np.ndarray:
        return np.full(shape, flag)

    return {CARD_PRIOR: const(prior),
            STACK: const(stack),
            MOE: np.broadcast_to(e > env.experts_per_card, shape),
            SEQ: const(facts.seq > longest.seq[1]),
            PRECISION: const(rc != "16-bit" and rc not in env.recipes),
            PRECISION_UNSEEN: const(rc != "16-bit" and rc not in seen.recipes),
            SCALE: np.broadcast_to(c > env.cards_max, shape)}


def combine(base: float, parts: ArrayLike, flags: ArrayLike) -> FloatArray:
    """sigma = sqrt(base^2 + sum_f flags_f c_f^2): independent log errors add in quadrature (``parts`` the
    contributions c_f, ``flags`` which apply, factor on the first axis)."""
    c = np.asarray(parts, dtype=float).reshape((-1,) + (1,) * (np.ndim(flags) - 1))
    out: FloatArray = np.sqrt(base ** 2 + np.sum(np.asarray(flags, dtype=float) * c ** 2, axis=0))
    return out


def plan_sigma(ev: Evidence, facts: PlanFacts, cards: ArrayLike, experts_per_card: ArrayLike,
               base: float | None = None, own: Envelope | None = None) -> FloatArray:
    """The step-time log-sd of plans (element-wise over cards and experts per card), module docstring;
    ``base`` replaces the table's (a fitted card's own larger leave-one-out spread, a calibration's own
    spread); ``own`` a calibration's coverage (:func:`applies`): the same factors and shares, judged against
    what its runs covered."""
    flags = applies(ev, facts, cards, experts_per_card, own)
    parts = [ev.stack_contribution(facts.stack) if f == STACK else ev.contribution(f) for f in FACTORS]
    return combine(ev.base if base is None else base, parts, np.stack([flags[f] for f in FACTORS]))


def reasons(ev: Evidence, facts: PlanFacts, own: Envelope | None = None) -> list[str]:
    """The factors that apply to one plan, in words (:data:`REASONS`; ``own`` a calibration's coverage:
    :data:`OWN_REASONS`)."""
    card = ev.envelope(facts.acc) if own is None else own
    every = ev.everywhere() if own is None else own
    env = card if card is not None else every
    flags = applies(ev, facts, facts.cards, facts.experts_per_card, own)
    fitted_moe = "dense runs only" if env.experts_per_card <= 0 else f"up to {env.experts_per_card:g} experts per card"
    words: dict[str, dict[str, Any]] = {CARD_PRIOR: {"acc": facts.acc},
             STACK: {"stack": facts.stack, "fitted": ", ".join(env.stacks) or "none: kernels timed alone"},
             MOE: {"experts": facts.experts_per_card, "fitted": fitted_moe},
             SEQ: {"seq": facts.seq, "hi": every.seq[1]},
             PRECISION: {"recipe": recipe_class(facts.matrix), "fitted": ", ".join(env.recipes)},
             PRECISION_UNSEEN: {"recipe": recipe_class(facts.matrix)},
             SCALE: {"cards": facts.cards, "hi": env.cards_max}}
    if own is not None:
        return [OWN_REASONS[f].format(**words[f]) for f in FACTORS if bool(flags[f])]
    srcs = ev.sources_of(facts.stack)
    text = dict(REASONS)
    if card is None:  # a card on priors was fitted on no runs: the MoE envelope is the fitted cards'
        text[MOE] = REASONS[MOE_ON_PRIOR]
    if srcs and facts.stack in every.stacks:  # run, but by one source's runs only
        text[STACK] = REASONS[ONE_SOURCE]
        words[STACK]["sources"] = ", ".join(srcs)
        c_own = ev.stack_contribution(facts.stack)
        words[STACK]["spread"] = (f", at its own out-of-sample spread {c_own:.3f}"
                                  if c_own > ev.contribution(STACK) else "")
    return [text[f].format(**words[f]) for f in FACTORS if bool(flags[f])]


def memory_margin(peak: float, limit: float, error: float) -> tuple[float, bool]:
    """(margin = 1 - peak / limit, may-not-fit): a plan within the memory model's relative error of the limit
    (margin < error) may not fit though the model says it does."""
    margin = 1.0 - peak / limit if limit > 0 and math.isfinite(limit) else 1.0
    return margin, margin < error
