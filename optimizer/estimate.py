"""``tpopt estimate``: parameters, FLOPs per token, memory per card across ZeRO x offload x recompute, and the
step time of the fastest layout at one card count, for a model and an accelerator alone (no scenario file).

Nothing here is new physics: the scenario is built by the ordinary reader from the tables of
:func:`estimate_tables` (printed with the estimate, so ``tpopt evaluate`` can be run on exactly the same
inputs), every memory figure is :func:`tpopt.models.evaluate.evaluate` of one plan, and the fastest layout
comes from the layout decomposition's own pieces: the per-layout bounds (:class:`LayoutBounds`) rank the
layouts of that card count and the layout oracle (:func:`tpopt.optimizer.enumerate.layout_best`) solves each
exactly, best bound first, until no remaining bound can beat the best plan found (the decomposition's stopping
rule with a sorted list as its master problem: exact, and without a MILP solver's start-up).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from tpopt.catalogs import Catalog, load_catalog
from tpopt.catalogs.scenario import build_scenario
from tpopt.errors import InputError
from tpopt.models import arch as A
from tpopt.models import families as F
from tpopt.models import memory
from tpopt.models.evaluate import Evaluation, at_plan_batch, evaluate, evaluate_arrays, resolve_plan, with_plan_options
from tpopt.models.plan import Plan, Scenario
from tpopt.models.units import GIB
from tpopt.models.variables import evaluate_keywords
from tpopt.optimizer.decompose import HUB, LayoutBounds
from tpopt.optimizer.enumerate import layout_best
from tpopt.optimizer.footing import of_evaluation, usable_source
from tpopt.optimizer.result import Request
from tpopt.optimizer.space import Space

TOKENS_PER_STEP = 4 * 1024 * 1024
"""Default tokens per optimizer step (4 Mi; Llama 3 pre-training used 4M-16M): the batch is
round(TOKENS_PER_STEP / seq_len) sequences."""
SEQ_LEN = 4096
"""Default tokens per sequence."""
TP, CP, PP, MICRO_BATCH = (1, 2, 4, 8), (1, 2, 4, 8), (1, 2, 4, 8, 16), (1, 2, 4, 8)
"""Layout domains searched for the fastest layout (TP is further kept inside a host by the layout rules)."""
ZERO_STAGES = (0, 1, 2, 3)
OFFLOADS = ("none", "cpu")
RECOMPUTES = ("none", "attn", "full")
"""Recompute choices of the memory table: none, core attention (Megatron-LM's "selective"), whole layers."""
DP_OFFLOADS = ("none", "optimizer", "optimizer+params")
"""Offload columns of the pure data-parallel table (DeepSpeed's offload_optimizer, and offload_param with it)."""
MAX_HOSTS_DOUBLINGS = 11
"""Without a card count: 1, 2, 4, ... 1,024 hosts are tried (up to the scenario's card limit)."""
UNENFORCED = frozenset({F.DEADLINE, F.BUDGET, F.INPUT_THROUGHPUT})
"""Families an estimate does not enforce (it has no deadline, budget or input pipeline)."""


@dataclass(frozen=True)
class EstimateInputs:
    """What an estimate is asked: model (catalog name, Hugging Face id or config.json path), accelerator,
    card count (None: the fewest hosts on which a layout fits), sequence length, batch and an optional
    flat efficiency (None: the per-operation step-time model)."""

    model: str
    accelerator: str
    cards: int | None = None
    seq_len: int = SEQ_LEN
    global_batch: int | None = None
    efficiency: float | None = None
    catalog_dirs: tuple[str, ...] = ()

    @property
    def batch(self) -> int:
        """Sequences per step: the given batch, else round(4 Mi tokens / seq_len), at least 1."""
        return self.global_batch or max(1, round(TOKENS_PER_STEP / self.seq_len))


def estimate_tables(inp: EstimateInputs, model_table: dict[str, str]) -> dict[str, Any]:
    """The scenario tables of an estimate (the same keys a scenario file takes). ``model_table`` is
    ``{"name": ...}`` or ``{"config": path}``. The deadline is long enough never to bind; the task's
    tokens only scale the iteration count (no figure of the estimate depends on them)."""
    hw: dict[str, Any] = {"accelerator": inp.accelerator}
    if inp.efficiency is not None:
        hw["efficiency"] = inp.efficiency
    search: dict[str, Any] = {"tp": list(TP), "cp": list(CP), "pp": list(PP), "micro_batch": list(MICRO_BATCH),
                              "zero_stage": list(ZERO_STAGES), "offload": list(OFFLOADS),
                              "recompute": list(RECOMPUTES), "schedule": ["1f1b"], "max_cards": 1024}
    if inp.cards is not None:
        search["max_cards"] = max(inp.cards, 1)
        search["dp"] = sorted({inp.cards // (t * c * p) for t in TP for c in CP for p in PP
                               if inp.cards % (t * c * p) == 0})
    return {"scenario": {"name": "estimate"}, "model": dict(model_table),
            "task": {"tokens": "1T", "seq_len": inp.seq_len, "global_batch": inp.batch, "precision": "bf16-mixed"},
            "schedule": {"deadline": "3650d"}, "hardware": hw,
            "checkpoint": {"save_interval": "1800s", "mode": "sync"}, "search": search}


def model_table(model: str) -> dict[str, str]:
    """``[model]`` of an argument: a config.json path (an existing file, or a folder holding one) or a name
    (catalog model or Hugging Face id)."""
    p = Path(model)
    if p.is_dir() and (p / "config.json").is_file():
        return {"config": str((p / "config.json").resolve())}
    if p.is_file() or model.endswith(".json"):
        if not p.is_file():
            raise InputError(f"model config {model!r} does not exist")
        return {"config": str(p.resolve())}
    return {"name": model}


def scenario_of(inp: EstimateInputs, catalog: Catalog | None = None) -> tuple[Scenario, dict[str, Any]]:
    """The estimate's scenario and the tables it was built from."""
    if inp.cards is not None and inp.cards < 1:
        raise InputError(f"--cards must be at least 1 (got {inp.cards})")
    if inp.seq_len < 1:
        raise InputError(f"--seq-len must be at least 1 (got {inp.seq_len})")
    if inp.global_batch is not None and inp.global_batch < 1:
        raise InputError(f"--batch must be at least 1 (got {inp.global_batch})")
    tables = estimate_tables(inp, model_table(inp.model))
    sc = build_scenario(tables, catalog or load_catalog(inp.catalog_dirs))
    check_cards(sc, inp.accelerator, inp.cards, tables["search"].get("dp"))
    return sc, tables


def check_cards(sc: Scenario, acc: str, cards: int | None, dp: list[int] | None) -> None:
    """``--cards``: whole hosts (a multiple of the card's cards per host), and some data-parallel size of a layout
    on that many cards (``dp``: cards / (TP x CP x PP)) divides the global batch; else one line that says which."""
    if cards is None:
        return
    per_host = sc.system(acc).acc.cards_per_host
    if cards % per_host:
        raise InputError(f"--cards {cards}: {acc} hosts hold {per_host} cards each and plans use whole hosts; give a "
                         f"multiple of {per_host} ({per_host}, {2 * per_host}, {3 * per_host}, ...)")
    batch = sc.task.global_batch
    if dp is not None and not any(batch % d == 0 for d in dp):
        raise InputError(f"--cards {cards}: no data-parallel size of a layout on {cards} cards "
                         f"({', '.join(str(d) for d in sorted(dp, reverse=True))}) divides the global batch of "
                         f"{batch:,} sequences; give another --cards or a --batch one of them divides")


def enforced_families() -> frozenset[str]:
    """Every pre-training family except deadline, budget and input throughput."""
    return frozenset(F.PRETRAINING_NAMES) - UNENFORCED


def fastest_at(space: Space, bounds: LayoutBounds, cards: int, enforced: frozenset[str]) -> Evaluation | None:
    """The fastest plan on exactly ``cards`` cards (least finish time, then cost), or None when no layout
    fits: layouts ranked by their finish-time bound, each solved exactly by the layout oracle until the
    next bound is no better than the best plan found."""
    sc = space.sc
    allowed = bounds.allowed_in(enforced, sc)
    ok = np.isfinite(bounds.finish_min) & (bounds.cards == cards)
    for family_ok in allowed.values():
        ok &= family_ok
    cand = np.flatnonzero(ok)
    order = cand[np.argsort(bounds.finish_min[cand], kind="stable")]
    req = Request(objective="time", enforce=enforced, top=1, cards=(cards,))
    best: tuple[tuple[float, float], dict[str, int]] | None = None
    for h in order:
        if best is not None and bounds.finish_min[h] > best[0][0]:
            break
        layout = tuple(int(bounds.coords[v][h]) for v in HUB)
        found, _ = layout_best(space, layout, req, enforced)
        if found and (best is None or found[0][0] < best[0]):
            best = found[0]
    return None if best is None else evaluate(sc, space.plan(best[1]))


def candidate_cards(sc: Scenario, acc: str) -> list[int]:
    """Card counts tried without --cards: 1, 2, 4, ... hosts up to the card limit."""
    g = sc.system(acc).acc.cards_per_host
    return [g * 2**k for k in range(MAX_HOSTS_DOUBLINGS) if g * 2**k <= F.limit(F.CARDS, sc)]


def table_plan(sc: Scenario, best: Evaluation | None, acc: str, cards: int) -> Plan:
    """The layout the memory table varies ZeRO, offload and recompute on: the fastest plan's, or pure data
    parallelism (TP = PP = CP = 1, micro-batch 1, as DeepSpeed's memory estimators assume) when none fits."""
    if best is not None:
        return best.plan
    return Plan(accelerator=acc, cards=cards, zero_stage=0, tp=1, pp=1, cp=1, micro_batch=1,
                save_interval_s=1800.0, save_mode="sync", global_batch=sc.task.global_batch)


def memory_table(sc: Scenario, base: Plan) -> list[dict[str, Any]]:
    """Memory per card (GiB) of ``base`` under every ZeRO stage x offload x recompute, with whether it fits the
    usable memory: :func:`tpopt.models.evaluate.evaluate`'s own steps (the plan resolved and its options applied
    once, then :func:`evaluate_arrays` with the ZeRO stages as one array per offload and recompute choice)."""
    sc = at_plan_batch(sc, base)
    plan = resolve_plan(sc, replace(base, dp=0, grad_accum=0))
    sc = with_plan_options(sc, plan)
    usable = F.limit(F.MEMORY_PER_CARD, sc, plan.accelerator)
    zs = np.asarray(ZERO_STAGES)
    cells: dict[tuple[int, str, str], dict[str, Any]] = {}
    for off in OFFLOADS:
        for rc in RECOMPUTES:
            r = evaluate_arrays(sc, plan.accelerator, **{**evaluate_keywords(plan), "zero_stage": zs,
                                                         "recompute": memory.parse_recompute(rc), "offload": off})
            col = {k: np.broadcast_to(np.asarray(r[k], dtype=float), zs.shape) for k in
                   ("memory_per_card", "states", "activations", "temporary", "step_s")}
            for i, z in enumerate(ZERO_STAGES):
                mem = float(col["memory_per_card"][i])
                cells[(z, off, rc)] = {"zero_stage": z, "offload": off, "recompute": rc,
                                       "memory_per_card_gib": mem / GIB, "states_gib": float(col["states"][i]) / GIB,
                                       "activations_gib": float(col["activations"][i]) / GIB,
                                       "temporary_gib": float(col["temporary"][i]) / GIB, "fits": mem <= usable,
                                       "step_s": float(col["step_s"][i])}
    return [cells[(z, off, rc)] for z in ZERO_STAGES for off in OFFLOADS for rc in RECOMPUTES]


def pure_dp_states(sc: Scenario, cards: int) -> dict[str, Any]:
    """Model states per card at pure data parallelism (DP = cards, TP = PP = CP = 1, EP = 1), as DeepSpeed's and
    accelerate's estimators count them: weights w, gradients g and Adam states o (FP32 master + two moments)
    per parameter of the precision recipe, bf16-mixed (w, g, o) = (2, 2, 12) = 16 B/param, sharded by ZeRO
    (:func:`tpopt.models.memory.zero_state_bytes`): M0 = (w + g + o) N, M1 = (w + g) N + o N/d,
    M2 = w N + (g + o) N/d, M3 = (w + g + o) N/d. Offload ``optimizer`` moves o to host memory; ``optimizer+params``
    (ZeRO-3 only, as DeepSpeed's offload_param) moves w as well, leaving g N/d. Activations, gathered
    parameters and buffers are excluded (the estimators' "model states"); a cell is None where the offload
    does not apply."""
    n = float(A.param_count(sc.model))
    rec = memory.stored_recipe(sc.task.precision, False)
    d = max(int(cards), 1)
    rows: list[dict[str, Any]] = []
    for z in ZERO_STAGES:
        row: dict[str, Any] = {"zero_stage": z}
        for off in DP_OFFLOADS:
            if off == "optimizer+params" and z < 3:
                row[off] = None
                continue
            states = float(memory.zero_state_bytes(n, d, z, rec, off != "none"))
            if off == "optimizer+params":
                states -= rec.weights * n / d
            row[off] = states / GIB
        rows.append(row)
    return {"dp": d, "parameters": int(n), "bytes_per_param": {"weights": rec.weights, "grads": rec.grads,
                                                                "optimizer": rec.optimizer},
            "rows": rows}


def model_figures(sc: Scenario) -> dict[str, Any]:
    """Parameters (total, and activated per token for MoE) and training FLOPs per token."""
    a = sc.model
    s = sc.task.seq_len
    return {"name": a.name, "moe": a.moe, "parameters": A.param_count(a),
            "active_parameters": A.activated_params(a) if a.moe else A.param_count(a),
            "matrix_parameters": A.gemm_params(a),
            "flops_per_token": float(A.flops_per_token(a, s)),
            "attention_flops_per_token": float(A.attention_flops_per_token(a, s)),
            "flops_convention": "training FLOPs per token = 6 x matrix-multiplied parameters (activated experts, "
                                "LM head; the embedding lookup excluded) + causal attention "
                                "12 x layers x d_attn x (s + 1) / 2; forward + backward, recompute not counted"}


def step_figures(sc: Scenario, ev: Evaluation) -> dict[str, Any]:
    """The fastest plan: its layout, step time, throughput and the MFU its step time implies
    (model FLOPs of the step / (cards x dense matrix peak x step time))."""
    p, m = ev.plan, ev.metrics
    acc = sc.system(p.accelerator).acc
    peak = acc.peak_flops
    tokens = sc.task.tokens_per_step
    flops = float(A.flops_per_token(sc.model, sc.task.seq_len)) * tokens
    plan = {k: v for k, v in ev.plan_dict().items() if k in (
        "cards", "hosts", "tp", "cp", "pp", "dp", "micro_batch", "grad_accum", "zero_stage", "offload", "recompute",
        "schedule", "sequence_parallel", "ep", "expert_tp")}
    return {"plan": plan, "step_s": m["step_s"], "memory_per_card_gib": m["memory_per_card_gib"],
            "tokens_per_s": tokens / m["step_s"], "tokens_per_s_per_card": tokens / m["step_s"] / p.cards,
            "implied_mfu": flops / (p.cards * peak * m["step_s"]), "peak_flops": peak,
            "step_model": m["step_model"]}


NO_DEADLINE = "not stated: an estimate has no deadline (the 3650 d of scenario_tables keeps it from binding)"
"""Why an estimate's footing states no P(on time)."""


def estimate_footing(sc: Scenario, ev: Evaluation, fits: bool) -> dict[str, Any]:
    """The footing (:func:`tpopt.optimizer.footing.of_evaluation`) of the estimate's plan ``ev``, as ``tpopt evaluate``
    on scenario_tables states it (step-time model, stack, parameters by provenance, price, stated inputs, whether
    the card rests on priors and the plan's own step-time sigma), but with no P(on time): the estimate has no
    deadline (:data:`NO_DEADLINE`), and a probability against the placeholder 3650 d would state a certainty
    nobody asked about. ``fits`` False: ``ev`` is the memory table's pure data-parallel plan (no layout fits),
    and the footing says so."""
    f = of_evaluation(sc, ev.as_dict())
    f["evidence"]["p_on_time"] = None
    f["evidence"]["p_on_time_note"] = NO_DEADLINE
    if not fits:
        f["of"] = "the memory table's pure data-parallel plan; no layout fits"
    return f


def estimate(inp: EstimateInputs) -> dict[str, Any]:
    """The estimate as a report dict (``tpopt estimate --json``)."""
    cat = load_catalog(inp.catalog_dirs)
    sc, tables = scenario_of(inp, cat)
    acc = inp.accelerator
    space = Space.from_scenario(sc)
    space.build_tables()
    enforced = enforced_families()
    bounds = LayoutBounds(space, "time", enforced)
    tried = [inp.cards] if inp.cards is not None else candidate_cards(sc, acc)
    best: Evaluation | None = None
    cards = tried[0]
    for n in tried:
        cards = n
        best = fastest_at(space, bounds, n, enforced)
        if best is not None:
            break
    base = table_plan(sc, best, acc, cards)
    card = sc.system(acc).acc
    cat_perf = acc in cat.performance
    out: dict[str, Any] = {
        "model": model_figures(sc),
        "accelerator": {"name": acc, "usable_memory_gib": card.memory_usable / GIB,
                        "usable_memory_source": usable_source(sc, acc),
                        "cards_per_host": card.cards_per_host, "peak_flops": card.peak_flops},
        "task": {"seq_len": sc.task.seq_len, "global_batch": sc.task.global_batch,
                 "tokens_per_step": sc.task.tokens_per_step, "precision": sc.task.precision,
                 "batch_source": "given" if inp.global_batch else f"default: {TOKENS_PER_STEP:,} tokens / seq_len"},
        "cards": cards,
        "cards_source": "given" if inp.cards is not None else "fewest hosts (1, 2, 4, ...) on which a layout fits",
        "step_model": "flat (efficiency x peak)" if inp.efficiency is not None else
        ("per-operation (performance catalog entry)" if cat_perf else "per-operation (the catalog's default prior)"),
        "search": {k: tables["search"][k] for k in ("tp", "cp", "pp", "micro_batch", "schedule")}
        | {"cp": list(sc.search.cp)},  # the sizes that split the sequence (catalogs.scenario.splittable_cp)
        "fastest": None if best is None else step_figures(sc, best),
        "memory_layout": {"tp": base.tp, "cp": base.cp, "pp": base.pp,
                          "dp": base.cards // (base.tp * base.cp * base.pp),
                          "micro_batch": base.micro_batch, "source": "the fastest plan" if best is not None
                          else "pure data parallelism (no layout fits)"},
        "memory_table": memory_table(sc, base),
        "pure_dp_states": pure_dp_states(sc, cards),
        "footing": estimate_footing(sc, best if best is not None else evaluate(sc, base), best is not None),
        "scenario_tables": tables,
    }
    if not math.isfinite(out["accelerator"]["usable_memory_gib"]):
        raise InputError(f"accelerator {acc!r} has no usable memory")
    return out
