"""The footing of a report: what a plan's figures stand on (issue 23 item 7, issue 25 item 1).

Every report (solve, evaluate, explain, sweep rows, rl) carries, in its JSON and its text from the same dict:

* the step-time model that ran: ``per-operation`` (no ``hardware.efficiency`` in the scenario: kernels
  from the performance catalog, :mod:`tpopt.models.steptime`) or ``flat`` (``hardware.efficiency``
  stated: compute = FLOPs / (peak x efficiency), the chapter's model) and what switches it;
* the MFU the plan implies: MFU = F_model x tokens per step / (cards x P x t_step), F_model the model
  FLOPs per token as :func:`tpopt.models.arch.flops_per_token` counts them (6 x the parameters a token
  multiplies, activated experts only, + causal attention 12 L d_attn (s + 1) / 2; no recompute, no
  padding, no MoE imbalance), P the card's dense matrix peak of the precision (FP16 for fp16 recipes,
  else BF16; FP8 runs are quoted against the BF16 peak) and t_step the modelled step (input wait included);
* the software stack the figures assume (``[hardware] stack``; ``megatron-core`` by default);
* for each performance parameter that moves the plan's step time, where its value comes from
  (performance.toml ``sources``): ``calibrated`` (on which runs), ``measured`` (by ``tpopt calibrate
  --measure`` on a machine, or a published measurement cited in the catalog), ``measured x fitted gap``
  (such a measurement scaled by the fitted cards' measured-to-training ratio, ``prior_scale_from``) or
  ``prior`` (an assumption; a value carried over from another card);
* the price's provenance: the scenario's own ``[cost]``/``[hardware] card_hour``, or the catalog's list
  price with its source and date; an illustrative price (not a market quote) is flagged, and so is a catalog
  price read more than 6 months (:data:`tpopt.models.market.STALE_MONTHS`) before the market catalog's date
  (``as_of`` of offers.toml, or ``[market] as_of``: a fixed date, never the clock, so reports stay
  reproducible);
* the stated inputs that move the plan (:func:`stated_inputs`, issue 37): values the scenario (or a default)
  states rather than the model computes, each with the figure the model would use where it has one (the
  modelled activations of a stated activation budget, and in a solve the plan they lead to) or with what it
  costs the plan (the input pipeline's rate against the demand, NICs per host, the card MTBF, the storage
  bandwidth's checkpoint overhead, the price's date, the stack on a card it does not target, a stack whose
  kernel factor no run of its own fitted (the pooled factor of the fitted stacks, :func:`pooled_stack`), a MoE
  model's grouped expert GEMM calls at the stack's fitted share of their modelled speed
  (:func:`fitted_grouped_gemm`), a context-parallel plan's later ring steps at the stack's fitted share of
  their modelled speed (:func:`fitted_ring_steps`), the reserved days billed at the plan's card count);
* the evidence (:func:`evidence`, issue 35): whether the card and the stack were fitted, the plan's own
  step-time sigma with its reasons (tpopt.models.evidence: by distance from the evidence), P(on time) at that
  sigma, and the memory margin against the memory model's stated error ("may not fit").
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from tpopt.models import families as F
from tpopt.models import terms as T
from tpopt.models.arch import flops_per_token
from tpopt.models.evaluate import evaluate
from tpopt.models.evidence import memory_margin as margin_of
from tpopt.models.market import STALE_MONTHS, months_between
from tpopt.models.memory import LOW_PRECISION_MATRIX, recipe
from tpopt.models.plan import Plan, Reliability, Scenario
from tpopt.models.roofline import PerfParams
from tpopt.models.terms.layer_times import recipe_peak
from tpopt.models.units import DAY, GIB, HOUR
from tpopt.optimizer.limits import clock_of
from tpopt.optimizer.result import Request

DEFAULT_STACK = "megatron-core"
COMPUTE_PARAMS = ("gemm_efficiency", "attention_efficiency", "attention_bwd_ratio", "memory_efficiency",
                  "kernel_overhead")
"""Performance parameters every per-operation step time depends on."""
LOW_PRECISION_PARAMS = {"fp8": "fp8_gemm_ratio", "fp4": "fp4_gemm_ratio", "mxfp8": "mxfp8_gemm_ratio"}
"""The GEMM ratio a precision's matrix units add (by the recipe's ``matrix``)."""
SCALE_UP_PARAM, SCALE_OUT_PARAM = "tp_efficiency", "dp_efficiency"
MFU_CONVENTION = ("model FLOPs per token 6 N_active + causal attention 12 L d_attn (s+1)/2 (no recompute), "
                  "x tokens per step / (cards x dense {peak} peak x step time)")


def stack_of(sc: Scenario) -> str:
    """The software stack the scenario names (``[hardware] stack``), else the default."""
    name = getattr(sc, "stack", None)
    name = getattr(name, "name", name)
    return name if isinstance(name, str) and name else DEFAULT_STACK


def provenance(source: str | None) -> str:
    """``calibrated``, ``measured``, ``measured x fitted gap`` (a published measurement scaled by how far the same
    measurement proved from training on fitted cards, performance.toml ``prior_scale_from``) or ``prior`` from a
    catalog source text (none: a prior)."""
    text = (source or "").strip().lower()
    if text.startswith("calibrated"):
        return "calibrated"
    if not text or text.startswith("assumption") or "assumed" in text or "carried over" in text:
        return "prior"
    if "the fitted / prior gemm share of" in text:  # catalogs._scaled_prior: a measurement x fitted cards' gap
        return "measured x fitted gap"
    return "measured"


def moving_params(sc: Scenario, plan: dict[str, Any]) -> tuple[str, ...]:
    """The performance parameters the plan's step time depends on: the compute ones always, the
    scale-up tier's collectives when a group spans several cards, the scale-out tier's when the plan
    spans several hosts."""
    acc = sc.system(plan["accelerator"]).acc
    group = int(plan.get("tp") or 1) * int(plan.get("cp") or 1) * int(plan.get("ep") or 1)
    names = list(COMPUTE_PARAMS)
    matrix = recipe(sc.task.precision).matrix
    if recipe_peak(acc, matrix) > 0:  # a card without the recipe's matrix units runs it at the 16-bit peak
        names += [p for key, p in LOW_PRECISION_PARAMS.items() if key in matrix]
    if group > 1 or int(plan.get("dp") or 1) > 1:
        names.append(SCALE_UP_PARAM)
    if int(plan["cards"]) > acc.cards_per_host:
        names.append(SCALE_OUT_PARAM)
    return tuple(n for n in names if n in PerfParams.__dataclass_fields__)


def parameters(sc: Scenario, plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Each parameter that moves the plan: value, provenance, source (per-operation model)."""
    perf: PerfParams | None = sc.system(plan["accelerator"]).perf
    if perf is None:
        return []
    out = []
    for name in moving_params(sc, plan):
        src = perf.sources.get(name, "")
        out.append({"name": name, "value": float(getattr(perf, name)), "provenance": provenance(src),
                    "source": src or "no source in the performance catalog"})
    return out


def matrix_peak(sc: Scenario, accelerator: str) -> tuple[float, str]:
    """The dense matrix peak MFU is quoted against, and its name."""
    acc = sc.system(accelerator).acc
    if recipe(sc.task.precision).matrix == "fp16" and acc.peak_fp16 > 0:
        return acc.peak_fp16, "FP16"
    return acc.peak_flops, "BF16"


def mfu(sc: Scenario, plan: dict[str, Any], step_s: float) -> float | None:
    """Implied MFU (module docstring); None when the step is not a positive finite time."""
    if not (step_s > 0 and step_s < float("inf")):
        return None
    peak, _ = matrix_peak(sc, plan["accelerator"])
    seq = sc.task.seq_len
    batch = int(plan.get("global_batch") or sc.task.global_batch)
    model = float(flops_per_token(sc.model, seq)) * batch * seq
    return model / (int(plan["cards"]) * peak * step_s)


LISTED = ("catalog", "user catalog")
"""Price provenances of a catalog's price: the shipped catalog's, or a ``--catalog`` directory's file's (an offer of
its offers.toml, a card of its accelerators.toml), never labelled as the other."""


def price(sc: Scenario, accelerator: str) -> dict[str, Any]:
    """The card-hour price and where it comes from: ``provenance`` "scenario", "catalog" (the shipped catalog's
    list price or offer) or "user catalog" (a ``--catalog`` file's, the file named in ``source``)."""
    sysm = sc.system(accelerator)
    src = getattr(sysm, "price_source", "") or ""
    acc_src = sysm.acc.sources.get("price_card_hour", "")
    if sysm.price_card_hour is None:
        return {"card_hour": None, "unit": "card-hours", "provenance": "none", "date": None,
                "source": "no price: costs are card-hours", "illustrative": False, "kind": "none"}
    if not src:  # a System built without provenance: the catalog's price when it matches
        src = f"catalog undated: {acc_src}" if sysm.price_card_hour == sysm.acc.price_card_hour and acc_src \
            else "scenario"
    m = re.match(r"(user catalog|catalog) (\S+): (.*)", src, re.S)
    kind, date, text = (m.group(1), m.group(2), m.group(3)) if m else ("scenario", None, src)
    lowered = text.lower()
    illustrative = kind in LISTED and ("illustrative" in lowered or "assumption" in lowered)
    words = ("the scenario's own" if kind == "scenario" else "ILLUSTRATIVE, not a market quote" if illustrative
             else "the price your catalog file states" if kind == "user catalog"
             else "indicative list price" if "indicative" in lowered else "list price")
    as_of = sc.market.as_of
    dated = date if kind in LISTED and date and re.match(r"\d{4}-\d{2}(-\d{2})?$", date) else None
    age = months_between(dated, as_of) if dated and as_of else None
    return {"card_hour": sysm.price_card_hour, "unit": "USD/card-h", "provenance": kind, "date": date,
            "source": text, "illustrative": illustrative, "kind": words, "as_of": as_of or None,
            "age_months": age, "stale": age is not None and age > STALE_MONTHS,
            "nic_hour": sysm.nic_price_hour}  # the cost bills NIC-hours too (terms.rate_per_second)


def plan_price(sc: Scenario, plan: dict[str, Any]) -> dict[str, Any]:
    """:func:`price` with the share of the plan's cost its NICs bill (``nic_share``): the cost rate is
    cards x card price + hosts x NICs per host x NIC price (terms.rate_per_second), so the share is
    hosts x NICs x NIC price / that rate (None without NIC price or NIC count)."""
    pr = price(sc, plan["accelerator"])
    nics, card_hour, nic_hour = plan.get("nics_per_host"), pr["card_hour"], pr.get("nic_hour") or 0.0
    pr["nic_share"] = None
    if card_hour is not None and nic_hour > 0 and nics:
        hosts = math.ceil(int(plan["cards"]) / sc.system(plan["accelerator"]).acc.cards_per_host)
        nic_rate = hosts * int(nics) * nic_hour
        pr["nic_share"] = nic_rate / (int(plan["cards"]) * card_hour + nic_rate)
    return pr


def evidence(sc: Scenario, plan: dict[str, Any], step_s: float, memory: float | None = None) -> dict[str, Any]:
    """What the plan's step time rests on (tpopt.models.terms.evidence_of): ``card`` "prior" | "fitted",
    ``stack``, ``sigma`` (its own step-time log-sd) with its ``reasons``; ``p_on_time``, P(finish <= deadline)
    at that sigma (None without a finite deadline or a save decision); with the plan's memory peak, the
    ``memory`` margin 1 - peak / limit and ``may_not_fit`` when the margin is below the memory model's
    stated error (catalogs/uncertainty.toml ``memory_error``)."""
    acc = plan["accelerator"]
    ep = float(plan.get("ep") or 1)
    e = T.evidence_of(sc, acc, float(plan["cards"]), ep)
    out: dict[str, Any] = {**e, "p_on_time": None}
    deadline = F.limit(F.DEADLINE, sc)
    if math.isfinite(deadline) and plan.get("save_mode") and plan.get("save_interval_s") and \
            0 < step_s < float("inf"):
        law = T.finish_law(sc, acc, str(plan["save_mode"]), float(plan["cards"]), float(plan["save_interval_s"]),
                           step_s, ep)
        out["p_on_time"] = float(law.cdf(deadline))
    ev = sc.risk.evidence
    if memory is not None and math.isfinite(memory) and ev is not None:  # no figure where no split places the layers
        limit = F.limit(F.MEMORY_PER_CARD, sc, acc)
        margin, tight = margin_of(memory, limit, ev.memory_error)
        out["memory"] = {"peak_gib": memory / GIB, "limit_gib": limit / GIB, "margin": margin,
                         "error": ev.memory_error, "may_not_fit": tight, "source": ev.memory_source,
                         "limit_source": usable_source(sc, acc)}
    return out


NVIDIA_STACKS = frozenset({"megatron-core", "megatron-lm-2021"})
"""Stacks whose published runs (catalogs/stacks.toml sources) are on NVIDIA cards only."""
def plan_of(plan: dict[str, Any]) -> Plan:
    """A :class:`Plan` from a report's plan dict (the fields a Plan has; derived ones such as hosts dropped)."""
    return Plan(**{k: v for k, v in plan.items() if k in Plan.__dataclass_fields__ and v is not None})


def without_activation_budget(sc: Scenario) -> Scenario:
    """The scenario with its stated activation budget removed: activations modelled per recompute group, and
    recompute none or full searched where the budget left none alone (the scenario reader's default without a
    budget, under which recompute changes nothing)."""
    search = sc.search if sc.search.recompute != ("none",) else replace(sc.search, recompute=("none", "full"))
    return replace(sc, memory=replace(sc.memory, activation_reserve=None), search=search)


def preemption_input(sc: Scenario, plan: dict[str, Any], m: dict[str, Any]) -> dict[str, Any] | None:
    """The ``[risk]`` table's preemptions as the footing states them (None without any, and on a spot offer,
    whose figures the market block prints): rate and reacquisition delay, preemptions per day on the plan's
    cards, the expected number over the run (lam_p x W, W = iterations x step) and their share of the training
    time in the nominal finish (T.preemption_overhead: lam_p (d + r + tau / 2 + w))."""
    rho, wait = T.preemption_terms(sc)
    if not rho or sc.market.preempt_per_card_s:
        return None
    cards = int(plan["cards"])
    share = float(T.preemption_overhead(sc, plan["save_mode"], cards, plan["save_interval_s"]))
    expected = cards * rho * float(m.get("train_days", 0.0)) * DAY
    return {"input": "preemptions", "stated": f"{rho * DAY:g} per card-day, {wait / HOUR:g} h to reacquire "
            f"([risk]): {cards * rho * DAY:,.1f} a day on {cards:,} cards, {expected:,.0f} expected over the run, "
            f"each losing the reacquisition, the restore and the work since the last save; {share * 100:,.1f} % of "
            "the training time, in the finish", "modelled": None, "preempt_per_card_day": rho * DAY,
            "reacquire_s": wait, "expected_preemptions": expected, "overhead": share}


def usable_source(sc: Scenario, accelerator: str) -> str:
    """How the usable memory per card is derived, with the figures: the card's memory less the runtime reserve
    the catalog states (usable_memory; or the scenario's usable_memory), and under the per-operation model what
    the stack's allocator can fill of that, (usable - communicator buffers) / (1 + allocator reserve)
    (StackProfile.usable; catalogs/stacks.toml)."""
    acc = sc.system(accelerator).acc
    stated = acc.memory_usable if acc.memory_usable_stated is None else acc.memory_usable_stated
    text = (f"card memory {acc.memory_nominal / 1e9:g} GB = {acc.memory_nominal / GIB:.1f} GiB less a "
            f"{(acc.memory_nominal - stated) / GIB:.2f} GiB runtime reserve = {stated / GIB:.1f} GiB, the "
            f"{acc.usable_stated_by}'s usable_memory")
    if acc.memory_usable_stated is None:
        return text
    st = sc.stack
    return (f"{text}; less {st.name}'s communicator buffers {st.communicator_buffers / GIB:.2g} GiB, over 1 + its "
            f"allocator reserve {st.allocator_reserve:.0%} = {acc.memory_usable / GIB:.1f} GiB (catalogs/stacks.toml)")


def stated_inputs(sc: Scenario, plan: dict[str, Any], metrics: dict[str, Any] | None,
                  job_cards: int | None = None) -> list[dict[str, Any]]:
    """The stated inputs that move the plan (module docstring), each ``{"input", "stated", "modelled"}`` (texts;
    ``modelled`` None where the model computes no figure of its own) with the numbers behind them. ``job_cards``:
    the cards of the whole job the plan is one part of (an RL job's learner), on which its failures and reserved
    time are counted and billed (``metrics`` then hold the job's overheads and finish); None: the plan's."""
    m = metrics or {}
    acc = sc.system(plan["accelerator"]).acc
    cards = int(plan["cards"])
    billed = cards if job_cards is None else int(job_cards)
    out: list[dict[str, Any]] = []
    reserve = sc.memory.activation_reserve
    if reserve is not None:
        ev = evaluate(without_activation_budget(sc), plan_of(plan))
        peak, limit = ev.metrics["memory_per_card_gib"], ev.metrics["memory_limit_gib"]
        out.append({"input": "activation budget", "stated": f"{reserve / GIB:g} GiB per card (memory."
                    "activation_reserve)", "modelled": f"{peak:.1f} GiB per card at this plan against {limit:.1f} "
                    "GiB usable", "limit_source": usable_source(sc, plan["accelerator"]), "stated_gib": reserve / GIB,
                    "modelled_peak_gib": peak, "limit_gib": limit, "fits": peak <= limit})
    demand, supply = m.get("input_demand_seq_s"), m.get("input_supply_seq_s")
    if supply is not None and math.isfinite(float(supply)):
        inp = sc.input
        how = (f"{inp.workers_per_host:g} workers per host" if inp.workers_per_host > 0 else
               f"{inp.workers:g} workers") + f" x {inp.per_worker_rate:g} sequences/s"
        use = f"; the plan demands {float(demand):.2f}/s" if demand is not None else ""
        out.append({"input": "input pipeline", "stated": f"{float(supply):g} sequences/s ({how}){use}",
                    "modelled": None, "supply_seq_s": float(supply),
                    "demand_seq_s": None if demand is None else float(demand),
                    "binds": demand is not None and float(demand) >= float(supply) * (1 - 1e-6)})
    if cards > acc.cards_per_host:
        nics = int(plan.get("nics_per_host") or acc.nics_per_host)
        src = acc.sources.get("nics_per_host", "") or "the accelerator catalog"
        out.append({"input": "NICs per host", "stated": f"{nics} x {acc.nic_bw / 1e9:g} GB/s ({_brief(src)})",
                    "modelled": None, "nics_per_host": nics})
    rel = sc.reliability
    lost = preemption_input(sc, plan, m)
    if lost is not None:
        out.append(lost)
    if rel.card_mtbf_s is not None:
        share = m.get("overhead_redo", 0.0) + m.get("overhead_restart", 0.0) - (lost or {}).get("overhead", 0.0)
        out.append({"input": "card MTBF", "stated": f"{rel.card_mtbf_s / DAY:,.0f} d ({share * 100:.1f} % of the "
                    f"training time lost to failures on {billed:,} cards)", "modelled": None,
                    "card_mtbf_days": rel.card_mtbf_s / DAY, "failure_overhead": share})
    if m.get("checkpoint_write_s") is not None:
        gb, write_s = float(m.get("checkpoint_gb", 0.0)), float(m["checkpoint_write_s"])
        out.append({"input": "storage bandwidth", "stated": f"{rel.write_bandwidth / 1e9:g} GB/s ("
                    f"{storage_words(rel)}; {gb:,.0f} GB checkpoint in {write_s:,.0f} s; "
                    f"saves {float(m.get('overhead_save', 0.0)) * 100:.1f} % of the training time)",
                    "modelled": None, "write_gb_s": rel.write_bandwidth / 1e9, "storage_tier": rel.storage_tier or None,
                    "stated_by": rel.storage_stated_by,
                    "save_overhead": float(m.get("overhead_save", 0.0))})
    pr = price(sc, plan["accelerator"])
    if pr["provenance"] in LISTED and pr["date"] and not pr.get("stale"):  # a stale one: the price line says
        age = f", {pr['age_months']} months before the market catalog's {pr['as_of']}" \
            if pr.get("age_months") is not None else ""
        out.append({"input": "price date", "stated": f"{pr['card_hour']:g} USD/card-h listed {pr['date']}{age}",
                    "modelled": None, "date": pr["date"], "age_months": pr.get("age_months")})
    stack, vendor = stack_of(sc), acc.vendor  # the card's maker, as its catalog entry states it
    if stack in NVIDIA_STACKS and vendor != "NVIDIA":
        out.append({"input": "stack", "stated": f"{stack} assumed on {vendor} cards (its published runs are on "
                    "NVIDIA cards; [hardware] stack names another)", "modelled": None, "vendor": vendor})
    matrix = recipe(sc.task.precision).matrix
    if sc.system(plan["accelerator"]).per_op and matrix in LOW_PRECISION_MATRIX and recipe_peak(acc, matrix) <= 0:
        _, peak = matrix_peak(sc, plan["accelerator"])
        out.append({"input": "precision", "stated": f"{sc.task.precision}, but {plan['accelerator']} has no "
                    f"{matrix.upper()} matrix units (catalogs/accelerators.toml; Transformer Engine's datatype and "
                    f"hardware support matrix): its weight GEMMs at the {peak} peak", "modelled": None,
                    "matrix_units": False})
    pooled = pooled_stack(sc) if sc.system(plan["accelerator"]).per_op else None
    if pooled is not None:
        out.append({"input": "stack", "stated": f"{stack}'s kernels at {pooled:.3f} of the reference stack's: no run "
                    "of this stack was fitted, so the pooled factor of the stacks fitted on their own runs "
                    "(catalogs/stacks.toml kernel_efficiency)", "modelled": None, "kernel_efficiency": pooled})
    grouped = fitted_grouped_gemm(sc) if sc.system(plan["accelerator"]).per_op else None
    if grouped is not None:
        g, runs = grouped
        on = f"{stack}'s fit on {runs} MoE runs" if runs else f"{stack}'s fit"
        out.append({"input": "grouped expert GEMM", "stated": f"calls at {g:.3f} of their modelled speed ({on}; "
                    "catalogs/stacks.toml grouped_gemm_efficiency)", "modelled": None,
                    "grouped_gemm_efficiency": g, "fitted_runs": runs})
    ring = fitted_ring_steps(sc, plan) if sc.system(plan["accelerator"]).per_op else None
    if ring is not None:
        e, runs = ring
        on = f"{stack}'s fit on {runs} context-parallel runs" if runs else f"{stack}'s fit"
        out.append({"input": "context-parallel ring", "stated": f"at {e:.3f} of its modelled speed in its later "
                    f"steps ({on}, mechanism not known; catalogs/stacks.toml ring_step_efficiency)",
                    "modelled": None, "ring_step_efficiency": e, "fitted_runs": runs})
    dropped = cp_dropped(sc)
    if dropped is not None:
        out.append(dropped)
    finish = m.get("finish_days")
    if sc.task.reserved_s > 0 and finish:  # the billed time: the waits for spot capacity are not billed
        share = sc.task.reserved_s / DAY / (float(finish) - float(m.get("capacity_wait_days", 0.0)))
        out.append({"input": "reserved time", "stated": f"{sc.task.reserved_s / DAY:g} d billed at {billed:,} "
                    f"cards ({share * 100:.1f} % of the cost)", "modelled": None, "reserved_share": share})
    return out


def storage_words(rel: Reliability) -> str:
    """Where the storage bandwidth comes from, naming its tier (catalogs/storage.toml): "storage tier NAME" (named
    by [checkpoint] storage), "[checkpoint] write_bandwidth, the NAME tier's" (a bandwidth stated, a tier of the
    same bandwidth in the catalog; "..., no catalog tier" where none is), "default, the NAME tier's"."""
    tier = rel.storage_tier
    if rel.storage_stated_by == "storage":
        return f"storage tier {tier}"
    head = "[checkpoint] write_bandwidth" if rel.storage_stated_by == "write_bandwidth" else "default"
    return f"{head}, the {tier} tier's" if tier else f"{head}, no catalog tier"


def cp_dropped(sc: Scenario) -> dict[str, Any] | None:
    """The search.cp sizes the scenario reader dropped (tpopt.catalogs.scenario.splittable_cp: they cannot split a
    sequence into equal pieces, tpopt.models.context.sequence_splits) and why, as a stated input; None where none
    was dropped."""
    dropped = sc.search.cp_dropped
    if not dropped:
        return None
    pieces = "2 x cp" if sc.cp_split == "zigzag" else "cp"
    return {"input": "context parallelism", "stated": f"search.cp {', '.join(map(str, dropped))} dropped: a "
            f"sequence of {sc.task.seq_len:,} tokens does not split into {pieces} equal pieces, which the "
            f"{sc.cp_split} context-parallel split needs; searched cp {', '.join(map(str, sc.search.cp))}",
            "modelled": None, "cp_dropped": list(dropped), "cp_searched": list(sc.search.cp)}


def pooled_stack(sc: Scenario) -> float | None:
    """The scenario's stack's kernel factor where no run of that stack fitted it and it is the pool of the fitted
    stacks' factors instead (catalogs/stacks.toml: its source says ``pooled:``, as benchmarks/fit_stacks.py
    writes it for a stack with kernels of its own that no shared-table run ran; DeepSpeed today), else None: a
    factor that moves every step time of the per-operation model without a run of the stack behind it."""
    st = sc.stack
    source = str(getattr(st, "sources", {}).get("kernel_efficiency", ""))
    return float(st.kernel_efficiency) if source.strip().lower().startswith("pooled") else None


def fitted_grouped_gemm(sc: Scenario) -> tuple[float, int | None] | None:
    """(g, runs) where the scenario's model is MoE and its stack's grouped expert GEMM calls take t_model / g with
    g != 1 (catalogs/stacks.toml grouped_gemm_efficiency, fitted by benchmarks/fit_grouped_gemm.py; ``runs`` the
    number of MoE runs its source names, None if it names none), else None: a fitted factor that moves every MoE
    step time of the per-operation model."""
    st = sc.stack
    g = float(getattr(st, "grouped_gemm_efficiency", 1.0))
    if not sc.model.moe or g == 1.0:
        return None
    return g, _fitted_runs(st, "grouped_gemm_efficiency", "MoE runs")


def fitted_ring_steps(sc: Scenario, plan: dict[str, Any]) -> tuple[float, int | None] | None:
    """(e, runs) where the plan runs ring context parallelism (cp > 1) on a stack whose later ring steps take
    their modelled time / e with e != 1 (catalogs/stacks.toml ring_step_efficiency, fitted by
    benchmarks/fit_ring_steps.py; ``runs`` the number of CP runs its source names), else None."""
    st = sc.stack
    e = float(getattr(st, "ring_step_efficiency", 1.0))
    if int(plan.get("cp") or 1) <= 1 or sc.cp_method != "ring" or e == 1.0:
        return None
    return e, _fitted_runs(st, "ring_step_efficiency", "context-parallel runs")


def _fitted_runs(st: Any, key: str, runs: str) -> int | None:
    """The number of runs a stack factor's source says it was fitted on ("... on the N <runs> ..."), None where
    it names none."""
    found = re.search(r"on the (\d+) " + re.escape(runs), str(getattr(st, "sources", {}).get(key, "")))
    return int(found.group(1)) if found else None


def _brief(source: str) -> str:
    """A catalog source, its first clause."""
    return source.split(";")[0].strip()


def modelled_activations(sc: Scenario, best: Any, solver: Any, req: Any) -> dict[str, Any] | None:
    """With a stated activation budget: the plan the same question gives with activations modelled (one more
    solve, on the run's clock): its cards and objective, and the ratio to the chosen plan's. None without a
    stated budget, or when no plan fits with modelled activations."""
    from tpopt.optimizer import outer  # lazy: start-up time (only with a stated activation budget)
    from tpopt.optimizer.core import tiny_solver  # lazy: as outer (only with a stated activation budget)
    from tpopt.optimizer.space import Space  # lazy: as outer

    if sc.memory.activation_reserve is None:
        return None
    modelled = without_activation_budget(sc)
    sub = Request(objective=req.objective, time_limit=req.time_limit, seed=req.seed, workers=req.workers,
                  clock=clock_of(req))
    if outer.has_task_choices(modelled):
        r = outer.solve(modelled, solver, sub)
    else:  # one space: a tiny one enumerated, as tpopt solve's own solve is (no solver library loaded)
        space = Space.from_scenario(modelled)
        r = outer.solve(modelled, tiny_solver(space, solver, req.method, req.solver_named), sub, space=space)
    if r.best is None:
        return {"feasible": False}
    key = "cost" if req.objective == "cost" else "finish_days"
    return {"feasible": True, "cards": int(r.best.plan.cards), "objective": key,
            "unit": r.best.metrics["cost_unit"] if key == "cost" else "d",
            "value": float(r.best.metrics[key]), "ratio": float(r.best.metrics[key] / best.metrics[key]),
            "recompute": r.best.plan.recompute}


def footing(sc: Scenario, plan: dict[str, Any], step_s: float, memory: float | None = None,
            metrics: dict[str, Any] | None = None, job_cards: int | None = None) -> dict[str, Any]:
    """The footing of one plan (module docstring) as a JSON-ready dict; ``memory`` the plan's peak per card
    (bytes), for the memory margin of :func:`evidence`, else the peak ``metrics`` give (``memory_per_card_gib``,
    as every evaluation writes it); ``metrics`` the plan's metrics, for the stated inputs (none without them: a
    sweep row's cells do not show them); ``job_cards``: :func:`stated_inputs`'."""
    if memory is None and metrics is not None and metrics.get("memory_per_card_gib") is not None:
        memory = float(metrics["memory_per_card_gib"]) * GIB
    sysm = sc.system(plan["accelerator"])
    per_op = sysm.per_op
    _, peak_name = matrix_peak(sc, plan["accelerator"])
    model: dict[str, Any]
    if per_op:
        model = {"step_time_model": "per-operation", "efficiency": None,
                 "switch": "no hardware.efficiency in the scenario; stating one selects the flat model"}
        if sysm.efficiency != 1.0:
            model["throughput_scale"] = sysm.efficiency
    else:
        model = {"step_time_model": "flat", "efficiency": sysm.efficiency,
                 "switch": f"hardware.efficiency = {sysm.efficiency:g} stated; without it the per-operation "
                           "model runs"}
    value = mfu(sc, plan, step_s)
    if sc.moe.recipe:  # a framework recipe supplied settings the scenario left unstated (catalogs/recipes.toml)
        model["recipe"] = sc.moe.recipe
    if sc.moe.vendor_note(plan["accelerator"]):  # recipe settings the card's maker does not run: the stack's defaults
        model["recipe_vendor"] = sc.moe.vendor_note(plan["accelerator"])
    if sc.moe.dispatcher_note(plan["accelerator"]):  # the stack's flex dispatcher does not run on this card
        model["dispatcher"] = sc.moe.dispatcher_note(plan["accelerator"])
    return {**model, "mfu": value, "mfu_convention": MFU_CONVENTION.format(peak=peak_name),
            "stack": stack_of(sc), "parameters": parameters(sc, plan), "price": plan_price(sc, plan),
            "evidence": evidence(sc, plan, step_s, memory),
            "stated": [] if metrics is None else stated_inputs(sc, plan, metrics, job_cards)}


def of_evaluation(sc: Scenario, d: dict[str, Any]) -> dict[str, Any]:
    """The footing of an evaluation dict (``plan`` and ``metrics``, as ``Evaluation.as_dict`` writes it)."""
    return footing(sc, d["plan"], float(d["metrics"]["step_s"]), None, d["metrics"])


def row_cells(f: dict[str, Any]) -> dict[str, Any]:
    """The footing as sweep-row cells: step_model, mfu, stack, parameter_provenance, price_provenance."""
    params = " ".join(f"{p['name']}:{p['provenance']}" for p in f["parameters"]) or None
    pr = f["price"]
    if pr["card_hour"] is None:
        price_text = "none"
    elif pr["provenance"] in LISTED:
        old = f", > {STALE_MONTHS} months old" if pr.get("stale") else ""
        price_text = f"{pr['provenance']} {pr['date']} ({pr['kind']}{old})"
    else:
        price_text = pr["source"]
    return {"step_model": f["step_time_model"], "mfu": f["mfu"], "stack": f["stack"],
            "parameter_provenance": params, "price_provenance": price_text}


def fitted_cards(sc: Scenario, best: Any) -> tuple[str, ...]:
    """The fitted cards the scenario offers when the chosen plan's card rests on priors (in the search's
    order); empty when the chosen card was fitted or none is offered."""
    p = best.plan
    if T.evidence_of(sc, p.accelerator, float(p.cards), float(p.ep))["card"] != "prior":
        return ()
    return tuple(a for a in (sc.search.accelerators or tuple(sc.systems))
                 if a in sc.systems and T.evidence_of(sc, a, 1.0)["card"] == "fitted")


ANSWER_UNKNOWN: Any = object()
"""``found`` of :func:`fitted_alternative` when no analysis answered it: the alternative is solved."""


def fitted_alternative(sc: Scenario, best: Any, solver: Any, req: Any, found: Any = ANSWER_UNKNOWN
                       ) -> dict[str, Any] | None:
    """When the chosen plan's card rests on priors and the scenario offers cards that were fitted: the
    cheapest plan on those cards alone (one more solve, on the run's clock, unless ``found``: the analysis
    oracle's best plan restricted to :func:`fitted_cards`, None when none), with ``within`` true when its
    objective is within the chosen plan's own uncertainty (ratio <= e^sigma, one sigma of its step time).
    None when the chosen card was fitted, or no fitted card is offered or admits a plan."""
    names = fitted_cards(sc, best)
    if not names:
        return None
    p = best.plan
    mine = T.evidence_of(sc, p.accelerator, float(p.cards), float(p.ep))
    if found is ANSWER_UNKNOWN:
        from tpopt.optimizer import core  # lazy: start-up time (only for a prior card among fitted ones)

        sub = replace(sc, systems={a: sc.systems[a] for a in sc.systems if a in names},
                      search=replace(sc.search, accelerators=names))
        found = core.solve(sub, solver, Request(objective=req.objective, time_limit=req.time_limit, seed=req.seed,
                                                workers=req.workers, clock=clock_of(req))).best
    return _alternative(best, found, req.objective, float(mine["sigma"]))


def _alternative(best: Any, found: Any, objective: str, sigma: float) -> dict[str, Any] | None:
    """The fitted option ``found`` against the chosen plan ``best`` (:func:`fitted_alternative`'s entry)."""
    if found is None:
        return None
    key = "cost" if objective == "cost" else "finish_days"
    ratio = float(found.metrics[key] / best.metrics[key])
    return {"accelerator": found.plan.accelerator, "cards": found.plan.cards, "objective": key,
            "value": float(found.metrics[key]), "ratio": ratio, "within": ratio <= math.exp(sigma), "sigma": sigma}


def offer_fitted_alternative(sc: Scenario, best: Any, offers: list[tuple[Scenario, Any]], objective: str,
                             bounded: Sequence[tuple[Scenario, str, str, float]] = (),
                             build: Callable[[tuple[str, ...]], list[tuple[Scenario, Any]]] | None = None
                             ) -> dict[str, Any] | None:
    """:func:`fitted_alternative` over a market's offers (``offers``: each offer's scenario and best plan, None
    where it has none or a cost bound ruled it out unsolved): the best plan on a fitted card, when the chosen plan
    (on ``sc``, its offer's scenario) rests on priors. Each solved offer's plan is already proven optimal on that
    offer. An offer a cost bound decided unsolved (``bounded``: its scenario, id, accelerator and bound b, no plan
    on it billing less) on a fitted card may still be within the chosen plan's uncertainty where
    b <= cost x e^sigma: those are solved (``build``: the offers' scenarios and best plans, by ids) and compared
    too; one above it cannot be (ratio >= b / cost > e^sigma), so it is left unsolved. ``bounded_solved`` in the
    entry: the option is such an offer's."""
    p = best.plan
    mine = T.evidence_of(sc, p.accelerator, float(p.cards), float(p.ep))
    if mine["card"] != "prior":
        return None
    sigma = float(mine["sigma"])
    key = "cost" if objective == "cost" else "finish_days"
    ceiling = float(best.metrics["cost"]) * math.exp(sigma)
    near = tuple(i for s, i, acc, b in bounded if b <= ceiling and T.evidence_of(s, acc, 1.0)["card"] == "fitted") \
        if objective == "cost" else ()
    solved = build(near) if near and build is not None else []
    fitted = [b for s, b in [*offers, *solved]
              if b is not None and T.evidence_of(s, b.plan.accelerator, 1.0)["card"] == "fitted"]
    found = min(fitted, key=lambda b: float(b.metrics[key])) if fitted else None
    out = _alternative(best, found, objective, sigma)
    if out is not None:
        out["bounded_solved"] = any(b is found for _, b in solved)
    return out
