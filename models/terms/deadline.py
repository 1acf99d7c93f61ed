"""The terms of the deadline family beyond one step: checkpoint writes, failure, preemption and
reacquisition rates, the long-run overhead and its optimal save interval, the input pipeline's supply,
the price rate, and the finish-time distribution (models/finish.py) with its memoised chance form of the
deadline (:func:`chance_fill`, :func:`finish_quantile`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from tpopt.models import evidence, finish, reliability
from tpopt.models import families as F
from tpopt.models.arch import param_count
from tpopt.models.memory import recipe
from tpopt.models.numeric import FloatArray, Floats
from tpopt.models.plan import Scenario
from tpopt.models.terms.layer_times import _perf
from tpopt.models.terms.shapes import _f, iteration_count
from tpopt.models.units import HOUR

# ---------------------------------------------------------------------------------------------
# long-run overhead, input, price


def checkpoint_write_time(sc: Scenario) -> float:
    rel = sc.reliability
    return float(reliability.checkpoint_bytes(param_count(sc.model), rel.bytes_per_param) / rel.write_bandwidth)


def failure_rate(sc: Scenario, cards: ArrayLike) -> Floats:
    """Job event rate: cards / card MTBF + job-wide events (loss spikes, planned stops)."""
    rel = sc.reliability
    lam = np.zeros(np.shape(cards)) if rel.card_mtbf_s is None else reliability.job_failure_rate(_f(cards),
                                                                                                rel.card_mtbf_s)
    if rel.event_interval_s:
        lam = lam + 1.0 / rel.event_interval_s
    if preemption_terms(sc)[0]:
        lam = lam + preemption_rate(sc, cards)
    return lam


def preemption_terms(sc: Scenario) -> tuple[float, float]:
    """(rho, d) of the plan's preemptions: rho per card-second and d the reacquisition delay (s). On a spot
    offer (or a mix with a spot share: ``market.preempt_per_card_s`` > 0, set per offer by the market solve)
    the offer's (a mix: its spot share x rho); elsewhere the ``[risk]`` table's ``preempt_per_card_day`` /
    ``reacquire`` (0 unless given). The one choice the nominal finish (:func:`failure_rate`,
    :func:`reacquire_overhead`) and the finish-time law (:func:`law_risk`) both read."""
    m = sc.market
    if m.preempt_per_card_s:
        return float(m.preempt_per_card_s), float(m.reacquire_s)
    return float(sc.risk.preempt_rate_per_card_s), float(sc.risk.reacquire_s)


def preemption_rate(sc: Scenario, cards: ArrayLike) -> Floats:
    """Preemptions per second of the job: cards x rho (rho per card-second, :func:`preemption_terms`; 0 unless
    a spot offer or the ``[risk]`` table gives one)."""
    return _f(cards) * preemption_terms(sc)[0]


def reacquire_overhead(sc: Scenario, cards: ArrayLike) -> Floats:
    """Reacquisition delay per unit useful time: lam_preempt x d (each preemption waits d for the cards
    on top of the redo and the restore that :func:`failure_rate` already charges)."""
    return preemption_rate(sc, cards) * preemption_terms(sc)[1]


def preemption_overhead(sc: Scenario, save_mode: str, cards: ArrayLike, save_interval: ArrayLike) -> Floats:
    """The preemptions' share of the first-order overhead per unit useful time (what the footing states):
    lam_p (d + r + tau / 2 + w), lam_p = cards x rho (:func:`preemption_rate`), d the reacquisition delay,
    r the restore, tau / 2 + w the work redone since the last committed save. 1,024 cards at 0.05 per
    card-day, d = 2 h, r = 300 s, tau = 165 s, w = 0: 51.2 / 86,400 s x 7,582.5 s = 4.49."""
    _, redo, restart = overhead_parts(sc, save_mode, cards, save_interval, lam=preemption_rate(sc, cards))
    return redo + restart


def overhead(sc: Scenario, save_mode: str, cards: ArrayLike, save_interval: ArrayLike) -> Floats:
    """Checkpoint + failure overhead per unit useful time, L(tau) (reliability.overhead_*).

    Sync saves pause for the write time c; async saves pause for the snapshot copy and redo the
    commit lag w = copy + write on top of tau/2.
    """
    rel = sc.reliability
    lam = failure_rate(sc, cards)
    pause, lag = save_pause_lag(sc, save_mode)
    tau = _f(save_interval)
    wait = reacquire_overhead(sc, cards) if preemption_terms(sc)[0] else 0.0
    if rel.failure_model == "poisson":
        return reliability.overhead_poisson(tau, pause, lam, rel.restore_s) + lam * lag + wait
    return reliability.overhead_first_order(tau, pause, lam, rel.restore_s, lag) + wait


def overhead_parts(sc: Scenario, save_mode: str, cards: ArrayLike, save_interval: ArrayLike,
                   lam: Floats | None = None) -> tuple[Floats, Floats, Floats]:
    """First-order split of the overhead: (save c/tau, redo lam (tau/2 + w), restart lam r + the preemptions'
    reacquisition), lam the failure rate (:func:`failure_rate`), or the rate of one source of failures given."""
    pause, lag = save_pause_lag(sc, save_mode)
    tau = _f(save_interval)
    rate = failure_rate(sc, cards) if lam is None else lam
    return (reliability.save_overhead(tau, pause), reliability.redo_overhead(tau, rate, lag),
            reliability.restart_overhead(rate, sc.reliability.restore_s)
            + (reacquire_overhead(sc, cards) if preemption_terms(sc)[0] else 0.0))


def optimal_save_interval(sc: Scenario, cards: ArrayLike, save_mode: str = "sync") -> FloatArray:
    """Interval minimising L for a card count, raised to the write time (no upload backlog)."""
    rel = sc.reliability
    write = checkpoint_write_time(sc)
    lam = failure_rate(sc, cards)
    pause = write if save_mode == "sync" else rel.snapshot_copy_s
    if rel.failure_model == "poisson":
        tau = reliability.optimal_interval_poisson(pause, lam)
    else:
        tau = reliability.optimal_interval_first_order(pause, lam)
    tau = np.maximum(tau, write)
    return np.where(np.isfinite(tau), tau, F.limit(F.DEADLINE, sc))


def input_supply(sc: Scenario, acc: str, cards: ArrayLike) -> Floats:
    """Sequences per second the CPU workers prepare (inf when the scenario gives no input pipeline)."""
    inp = sc.input
    if inp.workers <= 0 and inp.workers_per_host <= 0:
        return np.full(np.shape(cards), np.inf)
    if inp.workers_per_host > 0:
        hosts = np.ceil(_f(cards) / sc.system(acc).acc.cards_per_host)
        return inp.workers_per_host * hosts * inp.per_worker_rate
    return np.full(np.shape(cards), inp.workers * inp.per_worker_rate)


def rate_per_second(sc: Scenario, acc: str, cards: ArrayLike, nics: ArrayLike) -> FloatArray:
    """Rental cost per wall-clock second: (cards x card price + hosts x NICs x NIC price) / 3600;
    card-hours per second (cards / 3600) when the accelerator has no price."""
    sysm = sc.system(acc)
    hosts = np.ceil(_f(cards) / sysm.acc.cards_per_host)
    if sysm.price_card_hour is None:
        return _f(cards) / HOUR
    return (_f(cards) * sysm.price_card_hour + hosts * _f(nics) * sysm.nic_price_hour) / HOUR


# ---------------------------------------------------------------------------------------------
# the finish-time distribution (models/finish.py) and the chance form of the deadline


def step_sigma(sc: Scenario, acc: str, cards: ArrayLike = 1.0, ep: ArrayLike = 1) -> tuple[Any, str]:
    """Log-sd of measured / predicted step time of plans on ``acc`` (element-wise over ``cards`` and
    ``ep``; a float for scalars) and where it comes from: the scenario's ``risk.step_sigma`` when given
    (it overrides); else, with the catalog's uncertainty table (``risk.evidence``) and no calibration of
    one's own, under the per-operation model (:func:`evidence_for`), each plan's sigma by its distance
    from the evidence (tpopt.models.evidence):

        sigma = sqrt(base^2 + sum of c_f^2 over the factors f that apply)

    (independent log errors add in quadrature; the factors: card on priors, stack not fitted, MoE at more
    experts per card than fitted, sequence beyond the fitted, low-precision recipe not fitted, cards
    beyond the fitted), the source naming the factors that apply (:func:`evidence_of`); with a calibration of
    one's own, the same factors on its floored spread, judged against what its runs covered
    (:func:`own_calibration_sigma`); else the catalog sigmas (:func:`catalog_sigma`)."""
    if np.ndim(cards) == 0 and np.ndim(ep) == 0:  # one plan: its source says what it rests on (evidence_of)
        e = evidence_of(sc, acc, float(np.asarray(cards)), float(np.asarray(ep)))
        return e["sigma"], e["source"]
    if sc.risk.step_sigma is not None:
        return sc.risk.step_sigma, "given (risk.step_sigma)"
    ev = evidence_for(sc, acc)
    if ev is not None and own_calibration(sc, acc):
        sigma_own, source_own, _ = own_calibration_sigma(sc, acc, cards, ep)
        return sigma_own, source_own
    if ev is None or own_calibration(sc, acc):
        return catalog_sigma(sc, acc)
    facts = plan_facts(sc, acc)
    sigma = evidence.plan_sigma(ev, facts, cards, experts_per_card(sc, ep), card_base(sc, acc, ev)[0])
    return sigma, "by distance from the evidence (catalogs/uncertainty.toml)"


def evidence_for(sc: Scenario, acc: str) -> evidence.Evidence | None:
    """The uncertainty table where it measures the model that runs: the per-operation step time (its
    residuals are the table's). The flat model's step is the scenario's stated efficiency (the chapter's
    model), which the catalog sigmas cover (:func:`catalog_sigma`): None there."""
    return sc.risk.evidence if sc.system(acc).per_op else None


def card_base(sc: Scenario, acc: str, ev: evidence.Evidence) -> tuple[float, str]:
    """The base of a card's sigma: the table's (leave-one-source-out, inside the envelope), or the card's
    own leave-one-out ``residual_sigma`` (performance.toml) on a fitted card when that is larger, or the spread of
    the fit its GEMM share borrows (``borrowed_sigma``: a ``derived_from`` / ``prior_scale_from`` card that runs
    of a non-reference stack checked, H200 on H100's fit) when that is larger, or, for a card fitted on one
    source's runs, its own leave-one-source-out spread (uncertainty.toml ``[card_evidence.spread]``) when that is
    larger still. A card no run checked has no envelope: the card-prior factor carries it instead."""
    perf = _perf(sc, acc)
    seen = ev.envelope(acc) is not None
    own = float(getattr(perf, "residual_sigma", 0.0)) if seen else 0.0
    one = ev.card_spread_of(acc) if seen else 0.0
    lent = float(getattr(perf, "borrowed_sigma", 0.0)) if seen else 0.0
    if one > max(own, lent, ev.base):
        return one, f"{acc} fitted on one source: its own leave-one-source-out spread {one:.3f}"
    if own >= lent and own > ev.base:
        return own, f"the card's own leave-one-out spread {own:.3f}"
    if lent > ev.base:
        return lent, (f"{acc}'s GEMM share rests on {getattr(perf, 'borrowed_from', '')}'s fit: its leave-one-out "
                      f"spread {lent:.3f}")
    return ev.base, f"base {ev.base:.3f}"


def own_calibration(sc: Scenario, acc: str) -> bool:
    """Whether the card carries a calibration of one's own (``tpopt calibrate``: a residual_sigma with a
    source and no stacks, measured on one's own runs): its residual spread is then the sigma."""
    perf = _perf(sc, acc)
    return bool(getattr(perf, "residual_sigma_source", "")) and not tuple(getattr(perf, "residual_sigma_stacks", ()))


def experts_per_card(sc: Scenario, ep: ArrayLike) -> Floats:
    """Routed experts per card, E / ep (0 for a dense model)."""
    if not sc.model.moe:
        return np.zeros(np.shape(ep))
    return float(sc.model.experts) / np.maximum(_f(ep), 1.0)


def plan_facts(sc: Scenario, acc: str, cards: float = 1.0, ep: float = 1) -> evidence.PlanFacts:
    """What the uncertainty factors read from a plan (tpopt.models.evidence.PlanFacts)."""
    return evidence.PlanFacts(acc=acc, stack=sc.stack.name, seq=int(sc.task.seq_len),
                              matrix=recipe(sc.task.precision).matrix,
                              experts_per_card=float(experts_per_card(sc, ep)), cards=float(cards))


def evidence_of(sc: Scenario, acc: str, cards: float, ep: float = 1) -> dict[str, Any]:
    """What one plan's step time rests on: ``card`` "fitted" | "prior" (a run fitted on it or not), ``stack``
    "fitted" | "not fitted", ``sigma`` (as :func:`step_sigma`), ``reasons`` (the factors that apply, in
    words), ``source``, ``stated`` (the scenario states ``risk.step_sigma``) and ``evidence_sigma`` (the sigma
    the evidence gives, whether or not a stated one replaces it). The flags and reasons come from the evidence
    whatever the step-time model and whether or not a sigma is stated (a card on priors says so in the source,
    :func:`stated_evidence`); the sigma from the uncertainty table under the per-operation model only
    (:func:`evidence_for`)."""
    table = sc.risk.evidence
    facts = plan_facts(sc, acc, cards, ep)
    if table is None:
        out: dict[str, Any] = {"card": "fitted" if getattr(_perf(sc, acc), "calibrated", False) else "prior",
                               "stack": "unknown"}
    else:
        flags = evidence.applies(table, facts, cards, facts.experts_per_card)
        out = {"card": "prior" if bool(flags[evidence.CARD_PRIOR]) else "fitted",
               "stack": "not fitted" if bool(flags[evidence.STACK]) else "fitted"}
    ev = evidence_for(sc, acc)
    if ev is not None and own_calibration(sc, acc):
        sigma_own, source, why = own_calibration_sigma(sc, acc, cards, ep)
        out = {**out, "card": "fitted", "sigma": float(sigma_own), "reasons": why, "source": source,
               "assumption": None if own_covers(sc, acc) else OWN_UNRECORDED}
    elif ev is None or own_calibration(sc, acc):
        sigma, source = catalog_sigma(sc, acc)
        card = "fitted" if own_calibration(sc, acc) else out["card"]
        if card == "prior":  # the catalog sigma does not read the flag: the source names it
            source = f"{evidence.REASONS[evidence.CARD_PRIOR].format(acc=acc)}; {source}"
        out = {**out, "card": card, "sigma": sigma, "reasons": [], "source": source}
    else:
        why = evidence.reasons(ev, facts)
        base, base_words = card_base(sc, acc, ev)
        sigma = float(evidence.plan_sigma(ev, facts, cards, facts.experts_per_card, base))
        text = "; ".join(why) if why else "a fitted card on a fitted stack, inside the fitted range"
        out = {**out, "sigma": sigma, "reasons": why,
               "source": f"{text} ({base_words}, each factor's share in quadrature: catalogs/uncertainty.toml)"}
    return stated_evidence(out, sc.risk.step_sigma)


def stated_evidence(e: dict[str, Any], stated: float | None) -> dict[str, Any]:
    """A plan's evidence (:func:`evidence_of`) under a stated ``risk.step_sigma``: the stated value is the
    sigma used, the flags and reasons stay the evidence's, ``evidence_sigma`` keeps the sigma the evidence
    gives, and on a card that rests on priors the source says both ("given (risk.step_sigma); the
    evidence-based sigma would be 0.141: mi300x rests on priors (no run fitted on it)"), so a stated sigma
    never hides the flag."""
    if stated is None:
        return {**e, "stated": False, "evidence_sigma": e["sigma"]}
    source = "given (risk.step_sigma)"
    if e["card"] == "prior":
        why = "; ".join(e["reasons"]) or e["source"]
        source += f"; the evidence-based sigma would be {e['sigma']:.3f}: {why}"
    return {**e, "sigma": stated, "stated": True, "evidence_sigma": e["sigma"], "source": source}


FLAT_SIGMA_SOURCE = ("the flat model (a stated efficiency, which no validation table measures: they measure the "
                     f"per-operation model) takes the {finish.DEFAULT_STEP_SIGMA_SOURCE}")
"""Where the flat model's card sigma comes from: the default of a card no table covers, whatever the card."""


def catalog_sigma(sc: Scenario, acc: str) -> tuple[float, str]:
    """The catalog sigmas (no uncertainty table, or a calibration of one's own): the card's
    ``residual_sigma`` (performance.toml) when it was measured on the scenario's stack (its
    ``residual_sigma_stacks``) or is a calibration's (no stacks: one's own runs); else the larger of the
    card's (finish.DEFAULT_STEP_SIGMA for a card no table covers, and under the flat model for every card: its
    step is the stated efficiency, not the model the tables measure) and the stack's ``residual_sigma``
    (stacks.toml: its runs' spread, or the public anchors' for a stack no table ran). The source says
    which was used and why."""
    perf = _perf(sc, acc)
    source = str(getattr(perf, "residual_sigma_source", ""))  # the catalog refuses a residual_sigma without one
    on = tuple(getattr(perf, "residual_sigma_stacks", ()))
    stack = sc.stack
    if source and (not on or stack.name in on):
        return own_calibration_floor(sc, float(perf.residual_sigma), source) if not on else \
            (float(perf.residual_sigma), source)
    flat = not sc.system(acc).per_op
    card, card_source = (float(perf.residual_sigma), source) if source else \
        (finish.DEFAULT_STEP_SIGMA, FLAT_SIGMA_SOURCE if flat else finish.DEFAULT_STEP_SIGMA_SOURCE)
    where = f"measured on {', '.join(on)}" if on else "the flat model" if flat else "no table covers the card"
    if stack.residual_sigma > card:
        return stack.residual_sigma, (f"stack {stack.name}: {stack.sources.get('residual_sigma', 'stated')}; "
                                      f"the card's {card:.3f} ({where}) is smaller")
    return card, f"{card_source}; stack {stack.name}: {stack.residual_sigma:.3f}, smaller"


def own_calibration_floor(sc: Scenario, own: float, source: str) -> tuple[float, str]:
    """A calibration of one's own (``tpopt calibrate``: residual spread s over one's runs) under the per-operation
    model: sigma = max(s, base), base the uncertainty table's (the model's leave-one-source-out spread inside a
    fitted card's envelope, catalogs/uncertainty.toml). A few runs that agree within 1 % estimate s near zero,
    but the plan is a layout, scale and length those runs did not time: no calibration of one's own is surer than
    the model is on the runs it was fitted on. Without the table (the flat model) s as it is."""
    ev = sc.risk.evidence
    if ev is None or own >= ev.base:
        return own, source
    return ev.base, (f"{source}: {own:.3f}; at least the base {ev.base:.3f} (catalogs/uncertainty.toml: the model's "
                     f"out-of-sample spread inside a fitted card's envelope; one's own runs cannot make it surer)")


OWN_UNRECORDED = ("the calibration does not record what its runs covered (written before tpopt calibrate recorded "
                  "it): assumed to cover this plan's stack, sequence length, precision, experts per card and cards, "
                  "so no factor beyond them is added; rerun tpopt calibrate to record it")
"""The footing's assumption for a calibration of one's own whose file has no ``[acc.calibration.covers]``."""


def own_covers(sc: Scenario, acc: str) -> evidence.Envelope | None:
    """What the runs of the card's calibration of one's own covered (``[acc.calibration.covers]``, written by
    ``tpopt calibrate``); None where the file does not record it."""
    covers: evidence.Envelope | None = getattr(_perf(sc, acc), "calibration_covers", None)
    return covers


def own_calibration_sigma(sc: Scenario, acc: str, cards: ArrayLike, ep: ArrayLike = 1
                          ) -> tuple[Floats, str, list[str]]:
    """(sigma, source, reasons) of plans on a card calibrated on one's own runs, under the per-operation model:
    the shipped composition (:func:`step_sigma`, tpopt.models.evidence.plan_sigma) with the calibration's floored
    spread (:func:`own_calibration_floor`) as the base and what its runs covered (:func:`own_covers`) in place of
    the fitted envelope,

        sigma = sqrt(max(s, base)^2 + sum of c_f^2 over the factors f the plan goes beyond the calibration on)

    (MoE at more experts per card than its runs, a stack other than theirs, a sequence longer than theirs, a
    low-precision recipe they did not run, more cards than they ran; c_f the uncertainty table's shares). A file
    that does not record the coverage: the floored spread alone (:data:`OWN_UNRECORDED`, stated in the
    footing). The reasons name each factor (one plan: scalar ``cards``; none for arrays)."""
    perf = _perf(sc, acc)
    base, source = own_calibration_floor(sc, float(perf.residual_sigma), str(perf.residual_sigma_source))
    ev = evidence_for(sc, acc)
    covers = own_covers(sc, acc)
    if ev is None or covers is None:
        return base, source, []
    one = np.ndim(cards) == 0 and np.ndim(ep) == 0
    facts = plan_facts(sc, acc, float(np.asarray(cards)) if one else 1.0, float(np.asarray(ep)) if one else 1.0)
    sigma = evidence.plan_sigma(ev, facts, cards, experts_per_card(sc, ep), base, own=covers)
    why = evidence.reasons(ev, facts, own=covers) if one else []
    if not why:
        return (float(sigma) if one else sigma), source, []
    return float(sigma) if one else sigma, (f"{'; '.join(why)} ({source}, each factor's share in quadrature: "
                                            "catalogs/uncertainty.toml)"), why


def save_pause_lag(sc: Scenario, save_mode: str) -> tuple[float, float]:
    """(pause c, commit lag w) of one save: sync (write time, 0); async (snapshot copy, copy + write)."""
    write = checkpoint_write_time(sc)
    rel = sc.reliability
    return (write, 0.0) if save_mode == "sync" else (rel.snapshot_copy_s, rel.snapshot_copy_s + write)


def law_risk(sc: Scenario) -> finish.Risk:
    """The risk inputs of a plan's finish-time law: the scenario's ``[risk]`` table, with the spot terms of the
    offer the plan runs on in place of its preemption inputs. On a spot offer (or a mix with a spot share:
    ``market.preempt_per_card_s`` > 0, set per offer by the market solve) the law's preemption source is the
    offer's: rate rho per card-second (a mix: its spot share x rho) and reacquisition delay d, the same
    process the long-run overhead charges (:func:`failure_rate`, :func:`reacquire_overhead`); off the spot
    market the ``[risk]`` table's own preemption inputs apply (0 unless given). A spot offer's days without
    capacity (``market.spot_availability`` < 1, models/market.spot_availability) are the law's capacity source."""
    if not sc.market.preempt_per_card_s and sc.market.spot_availability >= 1.0:
        return sc.risk
    rho, wait = preemption_terms(sc)
    return replace(sc.risk, preempt_rate_per_card_s=rho, reacquire_s=wait,
                   spot_availability=sc.market.spot_availability)


def exposure(sc: Scenario, save_mode: str, cards: float, save_interval: float) -> finish.Exposure:
    """What the distribution's sources read from one plan (models/finish.py; the risk inputs :func:`law_risk`)."""
    rel = sc.reliability
    _, lag = save_pause_lag(sc, save_mode)
    return finish.Exposure(cards=float(cards), tau=float(save_interval), lag=lag, restore=rel.restore_s,
                           card_mtbf_s=rel.card_mtbf_s, spike_interval_s=rel.event_interval_s, risk=law_risk(sc))


def finish_law(sc: Scenario, acc: str, save_mode: str, cards: float, save_interval: float,
               step_s: float, ep: float = 1) -> finish.Distribution:
    """The finish-time distribution of one plan: W = iterations x step, its saves, sources and its own
    sigma (:func:`step_sigma` at its cards and expert parallelism)."""
    pause, _ = save_pause_lag(sc, save_mode)
    sigma, source = step_sigma(sc, acc, cards, ep)
    return finish.plan_distribution(reserved=sc.task.reserved_s, work=iteration_count(sc) * float(step_s),
                                    pause=pause, exposure=exposure(sc, save_mode, cards, save_interval),
                                    sigma=sigma, sigma_source=source)


_CHANCE_MEMO: dict[tuple[Any, ...], dict[complex, float]] = {}
"""Chance roots W_max (s) by what they depend on (:func:`_chance_key`), then by cards + i interval."""


_CHANCE_MEMO_SIZE = 200_000


def _law_inputs(sc: Scenario, acc: str, save_mode: str, cards: FloatArray, tau: FloatArray, ep: float = 1
                ) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(save factors 1 + c / tau, sigmas, event cumulants (3, n)) of plans given by card and interval arrays."""
    pause, lag = save_pause_lag(sc, save_mode)
    sigma = np.broadcast_to(np.asarray(step_sigma(sc, acc, cards, ep)[0], dtype=float), np.shape(cards))
    rel = sc.reliability
    x = finish.Exposure(cards=cards, tau=tau, lag=lag, restore=rel.restore_s, card_mtbf_s=rel.card_mtbf_s,
                        spike_interval_s=rel.event_interval_s, risk=law_risk(sc))
    return 1.0 + pause / tau, sigma, finish.event_cumulants(*finish.events_over(x))


_LAW_MEMO: dict[tuple[Any, ...], dict[complex, tuple[float, float, float, float, float]]] = {}
"""The law inputs of :func:`_law_inputs` (save factor, sigma, event cumulants) by what they depend on: the chance
key without the level and the deadline (``_chance_key(...)[2:]``), then by cards + i interval. The chance roots
depend on the level; these do not, so a bisection on the level (confidence.reachable), a step up and a sweep over
levels compute each plan's events once."""


def _law_inputs_remembered(sc: Scenario, acc: str, save_mode: str, pairs: NDArray[np.complex128], ep: float,
                           key: tuple[Any, ...]) -> tuple[FloatArray, FloatArray, FloatArray]:
    """:func:`_law_inputs` of the (cards + i interval) ``pairs``, each computed once per law key (:data:`_LAW_MEMO`;
    ``key`` the chance key of the ask)."""
    memo = _LAW_MEMO.setdefault(key[2:], {})
    keys = pairs.tolist()
    missing = [p for p in keys if p not in memo]
    if missing:
        todo = np.array(missing)
        saves, sigmas, kap = _law_inputs(sc, acc, save_mode, todo.real, todo.imag, ep)
        memo.update(zip(missing, zip(saves.tolist(), sigmas.tolist(), kap[0].tolist(), kap[1].tolist(),
                                     kap[2].tolist(), strict=True), strict=True))
    rows = np.array([memo[p] for p in keys], dtype=float).reshape(len(keys), 5)
    return rows[:, 0], rows[:, 1], rows[:, 2:].T


def _chance_key(sc: Scenario, acc: str, save_mode: str, ep: float = 1) -> tuple[Any, ...]:
    """What a chance root depends on besides (cards, interval): level, deadline, margins, save mode's pause and
    lag, restart, failure and rollback rates, the risk inputs (the offer's spot terms and the uncertainty table
    among them) and what the step sigma reads beyond the cards (:func:`plan_facts` at the expert parallelism, the
    card's own calibration sigma and what its runs covered)."""
    rel = sc.reliability
    pause, lag = save_pause_lag(sc, save_mode)
    ev = evidence_for(sc, acc)
    own = catalog_sigma(sc, acc)[0] if ev is None or own_calibration(sc, acc) else card_base(sc, acc, ev)[0]
    return (sc.task.confidence, F.limit(F.DEADLINE, sc), sc.task.reserved_s, pause, lag, rel.restore_s, rel.card_mtbf_s,
            rel.event_interval_s, law_risk(sc), plan_facts(sc, acc, 1.0, ep), own, own_covers(sc, acc))


def _pairs(cards: ArrayLike, interval: ArrayLike) -> tuple[NDArray[np.complex128], NDArray[np.intp], tuple[int, ...]]:
    """The distinct (cards, interval) pairs of two broadcast arrays, as complex numbers cards + i interval
    (np.unique sorts them by cards, then interval), with the inverse index and the broadcast shape."""
    c, t = np.broadcast_arrays(_f(cards), _f(interval))
    uniq, inverse = np.unique(c.reshape(-1) + 1j * t.reshape(-1), return_inverse=True)
    return uniq, inverse.reshape(-1), tuple(c.shape)


def chance_fill(sc: Scenario, acc: str, asks: list[tuple[str, ArrayLike, ArrayLike]], ep: float = 1,
                eps: list[float] | None = None) -> None:
    """Find the chance roots (finish.max_work) of every (save mode, cards, interval) asked that is not
    remembered yet, all in ONE vectorised root finding: one row per distinct (mode, cards, interval)
    tuple, whatever the number of asks (the enumerator asks for its whole space before it starts); each
    row with its plan's own sigma (:func:`step_sigma` at its cards and ``ep``; ``eps``: each ask's own
    expert parallelism instead, a MoE table's levels in the one root finding)."""
    q = sc.task.confidence
    if q is None:
        raise ValueError("chance_fill needs a confidence")
    found: list[tuple[dict[complex, float], NDArray[np.complex128]]] = []
    parts = []
    # over a whole space some plans' segments practically never complete (failure rate x interval past ~700):
    # their cumulants overflow to inf and their root is no finite work, i.e. the plan misses the level; numpy's
    # warnings on those elements are expected here, not news for the user's stderr
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        for (mode, cards, interval), e in zip(asks, eps or [ep] * len(asks), strict=True):
            key = _chance_key(sc, acc, mode, e)  # the key hashed once per ask
            memo = _CHANCE_MEMO.setdefault(key, {})
            pairs = _pairs(cards, interval)[0]
            todo = pairs[[p not in memo for p in pairs.tolist()]]
            if len(todo):
                found.append((memo, todo))
                parts.append(_law_inputs_remembered(sc, acc, mode, todo, e, key))
        if not found:
            return
        saves = np.concatenate([p[0] for p in parts])
        sigmas = np.concatenate([p[1] for p in parts])
        kap = np.concatenate([p[2] for p in parts], axis=1)
        work = finish.max_work(q, F.limit(F.DEADLINE, sc), sc.task.reserved_s, saves, sigmas,
                               (kap[0], kap[1], kap[2]))
    if sum(len(m) for m in _CHANCE_MEMO.values()) + len(work) > _CHANCE_MEMO_SIZE:
        for m in _CHANCE_MEMO.values():
            m.clear()
        _LAW_MEMO.clear()
    start = 0
    for memo, todo in found:
        memo.update(zip(todo.tolist(), work[start:start + len(todo)].tolist(), strict=True))
        start += len(todo)


def chance_step_max(sc: Scenario, acc: str, save_mode: str, cards: ArrayLike, save_interval: ArrayLike,
                    ep: ArrayLike = 1) -> FloatArray:
    """The largest step (s) whose finish meets the deadline with probability >= the confidence:
    W_max / iterations (finish.max_work), element-wise over cards, save intervals and expert parallelism
    (each plan at its own sigma): one root per distinct (cards, interval) pair and ep, all found at once
    (:func:`chance_fill`), and remembered across calls (the tables, the evaluator and every chunk of an
    enumeration ask for the same pairs)."""
    if sc.task.confidence is None:
        raise ValueError("chance_step_max needs a confidence")
    levels = np.unique(np.asarray(ep, dtype=float)) if sc.model.moe else np.array([1.0])
    if len(levels) > 1:
        c, t, e = np.broadcast_arrays(_f(cards), _f(save_interval), _f(ep))
        chance_fill(sc, acc, [(save_mode, c[e == level], t[e == level]) for level in levels],
                    eps=[float(level) for level in levels])  # every level's roots in one root finding
        res = np.empty(c.shape)
        for level in levels:
            at = e == level
            res[at] = chance_step_max(sc, acc, save_mode, c[at], t[at], float(level))
        return res
    level = float(levels[0])
    pairs, inverse, base = _pairs(cards, save_interval)
    shape = np.broadcast_shapes(base, np.shape(ep)) if sc.model.moe else base
    key = _chance_key(sc, acc, save_mode, level)
    memo = _CHANCE_MEMO.get(key, {})
    keys = pairs.tolist()
    if not all(k in memo for k in keys):
        chance_fill(sc, acc, [(save_mode, pairs.real, pairs.imag)], level)
        memo = _CHANCE_MEMO[key]
    per_pair = np.array([memo[k] for k in keys])
    out: FloatArray = np.broadcast_to(per_pair[inverse].reshape(base) / iteration_count(sc), shape).copy()
    return out


def finish_time(sc: Scenario, step_s: Any, overhead: Any) -> Any:
    """Finish time (s) of a plan of step ``step_s`` (s) and overhead share ``overhead`` (checkpoints, failures,
    restarts: :func:`overhead`):

        reserved + (iterations x step) x (1 + overhead)

    in this order, one expression for the evaluator, the enumerator's keys and floors and every bound built on them
    (the same bits wherever it is formed)."""
    return sc.task.reserved_s + (iteration_count(sc) * step_s) * (1.0 + overhead)


def chance_finish(reserved_s: float, deadline_s: float, step_s: Any, step_max: Any) -> Any:
    """The deadline family's value under a confidence, over a grid: the chance-equivalent finish (s)

        R + (D - R) x step / step_max

    (R the reserved time, D the deadline, step_max :func:`chance_step_max`): at most D exactly where the chance
    form's step <= step_max holds (the same verdict as the finish's q-quantile, far cheaper over a grid); one
    expression, so every caller gets the same bits."""
    return reserved_s + (deadline_s - reserved_s) * step_s / step_max


def finish_quantile(sc: Scenario, acc: str, save_mode: str, cards: ArrayLike, save_interval: ArrayLike,
                    step_s: ArrayLike, q: float, ep: ArrayLike = 1) -> FloatArray:
    """The q-quantile of the finish time (s) element-wise (finish.quantiles; one root per distinct plan,
    each at its own sigma), from the law inputs remembered per (cards, interval) (:data:`_LAW_MEMO`: a report
    asks the quantile of each plan it evaluates, about 1.3 ms of law inputs each)."""
    c, t, s, e = np.broadcast_arrays(_f(cards), _f(save_interval), _f(step_s), _f(ep))
    keys = np.stack([c.reshape(-1), t.reshape(-1), s.reshape(-1), e.reshape(-1)], axis=1)
    uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
    saves, sigma, kap = np.empty(len(uniq)), np.empty(len(uniq)), np.empty((3, len(uniq)))
    for level in sorted(set(uniq[:, 3].tolist())):  # the law inputs each (cards, interval) had in a chance table
        at = uniq[:, 3] == level
        saves[at], sigma[at], kap[:, at] = _law_inputs_remembered(
            sc, acc, save_mode, uniq[at, 0] + 1j * uniq[at, 1], level, _chance_key(sc, acc, save_mode, level))
    out = finish.quantiles(q, sc.task.reserved_s, iteration_count(sc) * uniq[:, 2], saves, sigma,
                           (kap[0], kap[1], kap[2]))
    res: FloatArray = out[inverse.reshape(-1)].reshape(c.shape)
    return res
