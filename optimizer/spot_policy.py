"""The spot policy as a decision: "spot until day d, then on-demand", chosen inside the chance constraint.

For a spot offer and the on-demand offer of the same provider, region and card, the run is the on-demand
offer's best plan (its layout and cards; its finish-time law gives the mean ``mu0`` and sd ``s0``,
:func:`run_of`); the spot offer's random terms are its preemption rate with the rate's uncertainty and its
per-day availability (:func:`terms_of`: the offer's, else the stated defaults of
:mod:`tpopt.models.spot_policy`). Three candidates (:func:`decide`):

- all on-demand (``d = 0``);
- the latest switch ``d*`` meeting ``P(on time) >= q`` (:func:`tpopt.models.spot_policy.latest_switch`: the
  feasible days form an interval ``(0, d*]`` and the expected cost is linear in ``d``, so when spot is below
  the break-even price ``d*`` is the cheapest policy, exactly);
- all spot (left on spot to the end).

The cheapest in expectation among those meeting the confidence is chosen (ties: the earlier in that order);
none meeting it: all on-demand, said so. Bills are per-second at the offers' prices (granular billing,
minimum commitments and checkpoint storage are the market solve's, not repeated here).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tpopt.models import market as M
from tpopt.models import spot_policy as S
from tpopt.models.evaluate import Evaluation
from tpopt.models.plan import Scenario
from tpopt.models.units import DAY

SD_LEVELS = (0.15865525393145707, 0.8413447460685429)
"""Phi(-1), Phi(1): the on-demand law's sd is taken as half the distance between these quantiles."""


@dataclass(frozen=True)
class Candidate:
    """One way to run: its switch day (None: all on spot; 0: all on-demand), expected cost, P(on time),
    mean finish (s)."""

    name: str
    switch_s: float | None
    cost: float
    p_on_time: float
    mean_finish_s: float


@dataclass(frozen=True)
class Decision:
    """The candidates, the chosen one, whether it meets the confidence, and the break-even spot price."""

    candidates: tuple[Candidate, ...]
    chosen: Candidate
    meets: bool
    break_even_price: float


def terms_of(spot: M.Offer) -> S.SpotTerms:
    """A spot offer's random terms: its preemption rate and reacquire delay; availability and the rate's
    coefficient of variation from the offer where it states them, else the stated defaults."""
    return S.SpotTerms(preempt_per_card_hour=spot.preempt_per_card_hour, reacquire_s=spot.reacquire_s,
                       availability=M.spot_availability(spot),
                       rate_cv=S.DEFAULT_RATE_CV if spot.preempt_rate_cv is None else spot.preempt_rate_cv,
                       preempt_source=spot.preempt_source,
                       availability_source=M.spot_availability_source(spot),
                       rate_cv_source=(S.DEFAULT_RATE_CV_SOURCE if spot.preempt_rate_cv is None
                                       else spot.preempt_rate_cv_source or spot.source))


def run_of(sc: Scenario, ev: Evaluation) -> S.Run:
    """The on-demand plan as the run the policy splits: its cards, its law's mean and sd, save interval, restore."""
    from tpopt.optimizer.confidence import law_of  # lazy: start-up time (SciPy)

    law = law_of(sc, ev)
    lo, hi = (law.quantile(q) for q in SD_LEVELS)
    return S.Run(cards=ev.plan.cards, ondemand_mean_s=law.mean(), ondemand_sd_s=(hi - lo) / 2,
                 save_interval_s=ev.plan.save_interval_s, restore_s=sc.reliability.restore_s)


def decide(terms: S.SpotTerms, run: S.Run, deadline_s: float, confidence: float, spot_price: float,
           ondemand_price: float) -> Decision:
    """All on-demand, spot until ``d*`` then on-demand, or all spot: the cheapest expected cost with
    ``P(on time) >= confidence`` (module docstring)."""
    cands = [Candidate("all on-demand", 0.0, S.expected_cost(terms, run, 0.0, spot_price, ondemand_price),
                       S.p_on_time(terms, run, 0.0, deadline_s), S.finish_mean(terms, run, 0.0))]
    d = S.latest_switch(terms, run, deadline_s, confidence)
    if 0.0 < d < S.full_spot_s(terms, run):
        cands.append(Candidate(f"spot until day {d / DAY:.1f}, then on-demand", d,
                               S.expected_cost(terms, run, d, spot_price, ondemand_price),
                               S.p_on_time(terms, run, d, deadline_s), S.finish_mean(terms, run, d)))
    cands.append(Candidate("all spot", None, S.all_spot_cost(terms, run, spot_price),
                           S.all_spot_p_on_time(terms, run, deadline_s), S.all_spot_mean(terms, run)))
    ok = [c for c in cands if c.p_on_time >= confidence]
    chosen = min(ok, key=lambda c: c.cost) if ok else cands[0]
    return Decision(tuple(cands), chosen, bool(ok), S.break_even_price(terms, run, ondemand_price))


def decision_dict(decision: Decision, terms: S.SpotTerms, run: S.Run, spot: M.Offer, ondemand: M.Offer,
                  confidence: float) -> dict[str, Any]:
    """The JSON of one offer pair's decision: the policy, its expected cost and P(on time), the others, the
    terms with their sources."""
    def cand(c: Candidate) -> dict[str, Any]:
        return {"policy": c.name, "switch_day": None if c.switch_s is None else c.switch_s / DAY,
                "expected_cost": c.cost, "p_on_time": c.p_on_time, "mean_finish_days": c.mean_finish_s / DAY}

    return {"spot_offer": spot.id, "ondemand_offer": ondemand.id, "cards": run.cards, "confidence": confidence,
            "chosen": cand(decision.chosen), "meets_confidence": decision.meets,
            "candidates": [cand(c) for c in decision.candidates],
            "spot_price": spot.price_card_hour, "ondemand_price": ondemand.price_card_hour,
            "break_even_spot_price": decision.break_even_price,
            "terms": {"preempt_per_card_hour": terms.preempt_per_card_hour, "preempt_source": terms.preempt_source,
                      "rate_cv": terms.rate_cv, "rate_cv_source": terms.rate_cv_source,
                      "availability_per_day": terms.availability, "availability_source": terms.availability_source,
                      "reacquire_s": terms.reacquire_s, "switch_s": S.switch_s(run),
                      "ondemand_mean_days": run.ondemand_mean_s / DAY, "ondemand_sd_days": run.ondemand_sd_s / DAY},
            "billing": "per second at the offers' prices; checkpoint storage and granular billing not included"}


Row = tuple[M.Offer, Scenario, "Evaluation | None"]
"""One offer of a market solve: the offer, its scenario, its best plan (None: none found)."""


def pairs(rows: list[Row]) -> list[tuple[M.Offer, M.Offer, Scenario, Evaluation]]:
    """(spot offer, on-demand offer, its scenario, its best plan) for every spot offer (not a mix) whose
    provider, region and card have an on-demand offer with a plan, and which has that plan's cards available."""
    ondemand = {(o.provider, o.region, o.accelerator): (o, sc, ev) for o, sc, ev in rows
                if o.market == M.ON_DEMAND and not o.parts and ev is not None}
    out = []
    for o, _, _ in rows:
        hit = ondemand.get((o.provider, o.region, o.accelerator))
        if o.market == M.SPOT and not o.parts and hit is not None and o.available >= hit[2].plan.cards:
            out.append((o, hit[0], hit[1], hit[2]))
    return out


def policy_entry(rows: list[Row], deadline_s: float, confidence: float,
                 pick: str | None = None) -> dict[str, Any] | None:
    """The report's ``spot_policy`` entry: every offer pair's decision and the cheapest meeting the
    confidence (``best``: its index; None when none does); None without a pair. ``pick``: the market's chosen
    offer; where it is a pair's spot offer and all spot misses the confidence under the spot terms (capacity on
    a share of days, the rate's uncertainty), ``pick_misses`` says so (:func:`pick_misses`)."""
    found = []
    for spot, od, sc, ev in pairs(rows):
        terms, run = terms_of(spot), run_of(sc, ev)
        d = decide(terms, run, deadline_s, confidence, spot.price_card_hour, od.price_card_hour)
        found.append((d, decision_dict(d, terms, run, spot, od, confidence)))
    if not found:
        return None
    meeting = [i for i, (d, _) in enumerate(found) if d.meets]
    best = min(meeting, key=lambda i: found[i][0].chosen.cost) if meeting else None
    entries = [e for _, e in found]
    missed = pick_misses(entries, pick, confidence)
    return {"pairs": entries, "best": best, **({} if missed is None else {"pick_misses": missed})}


def pick_misses(pairs_: list[dict[str, Any]], pick: str | None, confidence: float) -> dict[str, Any] | None:
    """The market's pick run all on spot, where the spot policy's model of that run says it misses the
    confidence: the market's chance law of a spot offer counts its preemptions and its days without capacity
    (tpopt.models.finish SOURCES: compound Poisson, the reserved days not stretched), the spot policy the same
    days (``availability_per_day``: a normal law over the whole run, reserved days included) and the preemption
    rate's uncertainty, which the law leaves out; near the level the two can disagree. Returns the pick's
    pair (``pair``: its index), all spot's P(on time) and mean finish under the terms, and the pair's chosen
    policy; None where the pick is no pair's spot offer or all spot meets the level."""
    for i, e in enumerate(pairs_):
        if e["spot_offer"] != pick:
            continue
        spot = next(c for c in e["candidates"] if c["switch_day"] is None)
        if spot["p_on_time"] >= confidence:
            return None
        return {"offer": pick, "pair": i, "all_spot_p_on_time": spot["p_on_time"],
                "all_spot_mean_finish_days": spot["mean_finish_days"], "availability_per_day":
                e["terms"]["availability_per_day"], "policy": e["chosen"], "policy_meets": e["meets_confidence"]}
    return None


__all__ = ["Candidate", "Decision", "SD_LEVELS", "terms_of", "run_of", "decide", "decision_dict", "Row", "pairs",
           "policy_entry", "pick_misses"]
