"""Evaluate plans: a pure function of (model, system, task, plan) composing every relation.

``evaluate_arrays`` takes the numeric plan fields as numpy arrays that broadcast (tp, pp, dp,
micro-batch, ZeRO stage, NICs per host, save interval) and the categorical ones as scalars, so the
brute-force enumerator and the solvers' table builders run exactly this code. ``evaluate`` wraps it
for one plan and returns an :class:`Evaluation` with metrics and named constraint checks.

Step time (one optimizer step, per card):
    t_step = t_compute x (1 + sigma E[max_n]) + t_exposed_dp + t_tp + t_offload + t_ep + t_input_wait
where t_compute is the pipeline completion time of the micro-batches (the plain sum when pp = 1).
Finish time: T = T_reserved + ceil(D / b) x t_step x (1 + L(tau)) (chapter 10.6.1).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias

import numpy as np
from numpy.typing import ArrayLike, NDArray

from tpopt.errors import InputError
from tpopt.frames import records_frame
from tpopt.models import context, memory, moe
from tpopt.models import families as F
from tpopt.models import terms as T
from tpopt.models.layout import Layout
from tpopt.models.numeric import FloatArray
from tpopt.models.plan import OFFLOADS, SAVE_MODES, Plan, Scenario, schedule_name, split_schedule
from tpopt.models.units import DAY, GIB, HOUR
from tpopt.models.variables import FIELD_VARIABLE, evaluate_keywords, moe_record, plan_record
from tpopt.models.violations import rule_violation

ConstraintSpec = F.Family  # a family's declaration: name, unit, scale, statement, structural flag

# Every constraint family, in report order (declared in tpopt.models.families). value <= limit is feasible.
MOE_FAMILIES = F.MOE_FAMILIES  # shown for MoE models only
CONSTRAINTS = F.PRETRAINING_FAMILIES
CONSTRAINT_NAMES = F.PRETRAINING_NAMES
SPEC = {c.name: c for c in CONSTRAINTS}

if TYPE_CHECKING:
    import pandas as pd

Arrays: TypeAlias = dict[str | tuple[str, str], Any]
"""What :func:`evaluate_arrays` returns: metric name -> array, ``("c", family)`` -> (value, limit) arrays,
``"feasible"`` -> boolean array."""


LAYOUT_DEFAULTS = {f.name: f.default for f in fields(Layout)}
"""A :class:`Layout` field's default (a variable :func:`evaluate_arrays` is not given)."""


def _f(x: ArrayLike) -> FloatArray:
    """``x`` as an array of floats."""
    return np.asarray(x, dtype=float)


class ClassMemory(NamedTuple):
    """The memory family's terms on one stage class, each the heaviest stage of the class (arrays)."""

    stage: str  # tpopt.models.terms.STAGE_CLASSES, or PEAK (the flat model's one class)
    states: Any
    copies: Any  # weight copies a schedule keeps (DualPipe)
    activations: Any
    temporary: Any
    total: Any  # ((states + copies) + activations) + temporary


def memory_by_class(sc: Scenario, term: Callable[..., Any]) -> list[ClassMemory]:
    """The memory family's terms per stage class k (tpopt.models.terms.stage_classes: first, middle and
    last in the per-operation model, the one class "peak" in the flat model), each term the heaviest
    stage of its class, and their sum in the evaluator's order. The family's value is the rank's peak:

        memory_per_card = max_k (states_k + copies_k + activations_k + temporary_k) <= usable memory

    ``term(fn, **options)`` evaluates a term of the plan (grid), here with ``stage=k`` among its options."""
    out: list[ClassMemory] = []
    for k in T.stage_classes(sc):
        opt = {} if k == T.PEAK else {"stage": k}
        states, copies = term(T.states, **opt), term(T.param_copies, **opt)
        acts, temp = term(T.activations, **opt), term(T.temporary, **opt)
        out.append(ClassMemory(k, states, copies, acts, temp, ((states + copies) + acts) + temp))
    return out


def _heaviest(values: list[Any]) -> Any:
    """Elementwise maximum of the classes' values of one term: the heaviest stage's (the classes cover
    every stage)."""
    best = values[0]
    for v in values[1:]:
        best = np.maximum(best, v)
    return best


def layout_of(accelerator: str, plan: Mapping[str, Any]) -> Layout:
    """The :class:`Layout` of :func:`evaluate_arrays`'s keywords (``plan``: Plan field -> value, a grid's
    numeric fields as broadcastable arrays): each decision variable under its solver name, mapped by its
    declaration (:data:`tpopt.models.variables.FIELD_VARIABLE`), a numeric one as an array (of floats for a float
    variable), a categorical one as given, the recompute groups parsed; one not given takes the Layout's
    default. A keyword that is no variable's Plan field is refused (TypeError, as a misspelt keyword); an
    unknown offload or save mode is bad input."""
    unknown = [k for k in plan if k not in FIELD_VARIABLE]
    if unknown:
        raise TypeError(f"evaluate_arrays() got an unexpected keyword argument {unknown[0]!r}")
    values: dict[str, Any] = {}
    for f, v in FIELD_VARIABLE.items():
        x = plan.get(f, LAYOUT_DEFAULTS[v.name])
        values[v.name] = x if v.categorical else _f(x) if v.type is float else np.asarray(x)
    if values["offload"] not in OFFLOADS:
        raise InputError(f"unknown offload {values['offload']!r} (use none or cpu)")
    if values["mode"] not in SAVE_MODES:
        raise InputError(f"unknown save mode {values['mode']!r} (use sync or async)")
    values["recompute"] = memory.parse_recompute(values["recompute"])
    return Layout(acc=accelerator, **values)


class DeadlineTerms(NamedTuple):
    """The terms of a plan beyond its step (arrays): what an offer's price, preemptions and billing move."""

    write_s: Any  # checkpoint write time c (s)
    overhead: Any  # L(tau): checkpoint + failure overhead per unit useful time
    parts: tuple[Any, Any, Any]  # L's save / redo / restart parts
    iterations: Any
    train_s: Any  # iterations x step
    finish_s: Any  # T = T_reserved + train x (1 + L)
    cost: Any  # price rate x T
    step_limit: Any  # the largest step meeting the deadline (its chance form under a confidence)
    deadline_value: Any  # the deadline family's value (finish, or its chance-equivalent / quantile)
    deadline_s: float


def deadline_terms(sc: Scenario, accelerator: str, step_s: Any, save_mode: str, cards: Any, tau: Any, nics: Any,
                   ep: Any = 1, *, quantiles: bool = False) -> DeadlineTerms:
    """The plan's terms past its step time: checkpoint write, overhead L(tau), finish
    T = T_reserved + ceil(D / b) x t_step x (1 + L), cost = rate x T, and the deadline family's limit on the
    step and value (under a confidence its chance form, see :func:`evaluate_arrays`). Every one is
    non-decreasing in ``step_s`` at fixed (save mode, cards, tau, ep): the fact the market's layout front
    (:mod:`tpopt.optimizer.market_front`) rests on."""
    task = sc.task
    write_s = T.checkpoint_write_time(sc)
    L = T.overhead(sc, save_mode, cards, tau)
    parts = T.overhead_parts(sc, save_mode, cards, tau)
    iters = T.iteration_count(sc)
    train_s = iters * step_s
    finish_s = T.finish_time(sc, step_s, L)
    cost = T.rate_per_second(sc, accelerator, cards, nics) * finish_s
    deadline_s = F.limit(F.DEADLINE, sc)
    step_limit = (deadline_s - task.reserved_s) / (iters * (1.0 + L))
    deadline_value = finish_s
    if task.confidence is not None:  # the chance form: the q-quantile of the finish time, step <= step_max
        step_limit = T.chance_step_max(sc, accelerator, save_mode, cards, tau, ep)
        deadline_value = T.finish_quantile(sc, accelerator, save_mode, cards, tau, step_s, task.confidence, ep) \
            if quantiles else T.chance_finish(task.reserved_s, deadline_s, step_s, step_limit)
    return DeadlineTerms(write_s, L, (parts[0], parts[1], parts[2]), iters, train_s, finish_s, cost, step_limit,
                         deadline_value, deadline_s)


def evaluate_arrays(sc: Scenario, accelerator: str, *, quantiles: bool = False, **plan: Any) -> Arrays:
    """All metrics and constraint (value, limit) pairs for a broadcastable grid of plans.

    The sum of the terms of :mod:`tpopt.models.terms`. Returns a dict of arrays; constraint families
    appear as ``("c", name) -> (value, limit)`` and ``"feasible"`` is their conjunction. Keywords are
    the :class:`Plan` fields of the decision variables (arrays that broadcast for the numeric ones; one not
    given takes its :class:`Layout` default, see :func:`layout_of`); ``sequence_parallel`` None keeps the
    scenario's. Under a confidence the deadline family is checked in its chance form: step <= the largest
    step meeting the deadline with that probability; its value is the finish's q-quantile with ``quantiles``
    (one plan's report), else the chance-equivalent finish R + (D - R) step / step_max (the same verdict, far
    cheaper over a grid).
    """
    sc = T.with_sequence_parallel(sc, plan.get("sequence_parallel"))
    a, task = sc.model, sc.task
    sysm = sc.system(accelerator)
    acc = sysm.acc
    lay = layout_of(accelerator, plan)

    def term(fn: Callable[..., Any], **options: Any) -> Any:
        """A term of the plan (grid): ``fn`` with the variables it declares, from the layout record."""
        return fn(sc, **lay.args(fn), **options)

    grid: tuple[NDArray[Any], ...] = (lay.tp, lay.pp, lay.dp, lay.cp, lay.ep)  # the keywords as arrays
    tp, pp, dp, cp, ep = grid
    mb, etp, cap = lay.mb, lay.etp, lay.cap
    tau = lay.tau
    g = acc.cards_per_host
    B = task.global_batch
    cards = lay.cards
    hosts = np.ceil(cards / g)
    ga = T.grad_accum(sc, dp, mb)

    # memory: the per-rank peak over the stage classes; each term's own heaviest stage for the report
    by_class = memory_by_class(sc, term)
    states = _heaviest([c.states for c in by_class]) + _heaviest([c.copies for c in by_class])
    acts = _heaviest([c.activations for c in by_class])
    temp = _heaviest([c.temporary for c in by_class])
    mem_total = _heaviest([c.total for c in by_class])
    mem_class = np.argmax(np.stack(np.broadcast_arrays(*(c.total for c in by_class))), axis=0) \
        if len(by_class) > 1 else np.zeros((), dtype=int)
    host_opt = term(T.host_memory)

    compute_s, pure_s, bubble_s, straggler_s = term(T.compute)
    link_dp = term(T.dp_link)
    exposed = term(T.exposed_dp)
    tp_s = term(T.tp_comm)
    offload_s = term(T.offload_wait)
    link_ep = term(T.ep_link) * ga
    exposed_ep = term(T.ep_comm)
    busy = compute_s + exposed + tp_s + offload_s + exposed_ep
    per_op = T.per_op_model(sc)
    # per-operation model: exposed TP time is inside the stage durations; split it out for reports;
    # the exposed context-parallel exchange is inside them in both models
    tp_show = term(T.tp_exposed) if per_op else tp_s
    cp_show = term(T.cp_exposed) if np.any(cp > 1) else 0.0 * tp_s
    cp_link = term(T.cp_link) if np.any(cp > 1) else 0.0 * tp_s
    inside = (tp_show if per_op else 0.0 * tp_s) + cp_show
    step_s = busy + sc.input.wait_s
    demand = B / busy
    supply = T.input_supply(sc, accelerator, cards)

    save_mode = lay.mode
    dt = deadline_terms(sc, accelerator, step_s, save_mode, cards, tau, lay.nics, ep, quantiles=quantiles)
    write_s, L, iters, train_s = dt.write_s, dt.overhead, dt.iterations, dt.train_s
    finish_s, cost = dt.finish_s, dt.cost
    o_save, o_redo, o_restart = dt.parts
    card_hours = cards * finish_s / HOUR
    step_limit, deadline_value, deadline_s = dt.step_limit, dt.deadline_value, dt.deadline_s

    ones = np.ones(np.shape(finish_s))
    out: Arrays = {
        "cards": cards * ones, "hosts": hosts * ones, "grad_accum": ga * ones,
        "memory_per_card": mem_total * ones, "memory_class": mem_class * ones.astype(int),
        "states": states * ones, "activations": acts * ones,
        "temporary": temp * ones, "compute_s": (compute_s - straggler_s - inside) * ones,
        "pure_compute_s": (pure_s - inside) * ones,
        "bubble_s": bubble_s * ones, "straggler_s": straggler_s * ones,
        "comm_link_s": (link_dp + tp_show + link_ep + cp_link) * ones,
        "comm_exposed_s": (exposed + tp_show + exposed_ep + cp_show) * ones,
        "dp_link_s": link_dp * ones, "tp_comm_s": tp_show * ones, "ep_link_s": link_ep * ones,
        "ep_exposed_s": exposed_ep * ones, "cp_exposed_s": cp_show * ones, "cp_link_s": cp_link * ones,
        "offload_s": offload_s * ones, "input_wait_s": sc.input.wait_s * ones, "busy_s": busy * ones,
        "stored_activations": (term(T.stored_activations) if T.modelled_activations(sc) else acts) * ones,
        "recompute_workspace": term(T.recompute_workspace) * ones,
        "step_s": step_s * ones, "overhead_fraction": L * ones, "overhead_save": o_save * ones,
        "overhead_redo": o_redo * ones, "overhead_restart": o_restart * ones, "iterations": iters * ones,
        "train_s": train_s * ones, "finish_s": finish_s * ones, "card_hours": card_hours * ones,
        "cost": cost * ones, "checkpoint_bytes": write_s * sc.reliability.write_bandwidth * ones,
        "checkpoint_write_s": write_s * ones, "failure_rate": T.failure_rate(sc, cards) * ones,
        "input_demand": demand * ones, "input_supply": supply * ones,
        "dropped_fraction": T.capacity_drops(sc, tp=tp, cp=cp, mb=mb, cap=cap) * ones,
    }
    heads_ok = context.heads_ok(a, tp, cp, sc.cp_method)
    cons = {
        F.MEMORY_PER_CARD: (mem_total, F.limit(F.MEMORY_PER_CARD, sc, accelerator)),
        F.MEMORY_HOST: (host_opt, F.limit(F.MEMORY_HOST, sc, accelerator)),
        F.BATCH_DIVISIBILITY: (term(T.batch_remainder), 0.0),
        F.WHOLE_HOSTS: (cards % g, 0.0),
        F.TP_WITHIN_HOST: (np.where(context.placement_ok(tp, cp, g), 0.0, tp * cp), 0.0),
        F.HEADS_DIVISIBLE: (np.where(heads_ok, 0.0, tp * cp), 0.0),
        # the per-operation model runs uneven stages; the flat model balances L / pp layers per stage
        F.PP_DIVIDES_LAYERS: (0.0 * pp if per_op else a.layers % pp, 0.0),
        F.SCHEDULE_SHAPE: (np.where(term(T.schedule_shape_ok), 0.0, 1.0), 0.0),
        F.EP_DIVIDES_EXPERTS: (np.mod(a.experts, ep), 0.0),
        F.EP_GROUP: (np.where(term(T.ep_group_ok), 0.0,
                                     ep * moe.expert_tp_size(etp, tp)), 0.0),
        F.CAPACITY_DROPS: (term(T.capacity_drops), F.limit(F.CAPACITY_DROPS, sc)),
        F.STEP_BUDGET: (step_s, step_limit),
        F.INPUT_THROUGHPUT: (demand, supply),
        F.CHECKPOINT: (write_s, tau),
        F.DEADLINE: (deadline_value, deadline_s),
        F.CARDS: (cards, F.limit(F.CARDS, sc)),
        F.BUDGET: (cost, F.limit(F.BUDGET, sc)),
    }
    for c in by_class:  # the family's terms per stage class (one plan's report reads them)
        out[("memory", c.stage)] = c
    feasible = np.ones(np.shape(finish_s), dtype=bool)
    for name in CONSTRAINT_NAMES:
        v, lim = cons[name]
        v, lim = _f(v) * ones, _f(lim) * ones
        out[("c", name)] = (v, lim)
        feasible &= v <= lim
    out["feasible"] = feasible
    return out


# ---------------------------------------------------------------------------------------------
# one plan


@dataclass
class ConstraintCheck:
    name: str
    value: float
    limit: float
    unit: str
    slack: float
    binding: bool
    doc: str = ""
    violation: str = ""  # a broken rule family in words (violations.rule_violation): its value is no quantity

    @property
    def satisfied(self) -> bool:
        return self.slack >= 0

    def as_dict(self) -> dict[str, Any]:
        out = {"name": self.name, "value": _clean(self.value), "limit": _clean(self.limit), "unit": self.unit,
               "slack": _clean(self.slack), "binding": self.binding}
        return {**out, "violation": self.violation} if self.violation else out

    def quoted(self) -> dict[str, Any]:
        """name, value, limit and unit as the reports quote a check (with ``violation`` for a broken rule)."""
        out: dict[str, Any] = {"name": self.name, "value": self.value, "limit": self.limit, "unit": self.unit}
        return {**out, "violation": self.violation} if self.violation else out


def _clean(x: float) -> float | None:
    x = float(x)
    if x == float("inf"):
        return None
    return x


@dataclass
class Evaluation:
    plan: Plan
    metrics: dict[str, Any]
    constraints: list[ConstraintCheck] = field(default_factory=list)

    @property
    def feasible(self) -> bool:
        return all(c.satisfied for c in self.constraints)

    def violated(self) -> list[ConstraintCheck]:
        return [c for c in self.constraints if not c.satisfied]

    def constraint(self, name: str) -> ConstraintCheck:
        return next(c for c in self.constraints if c.name == name)

    def plan_dict(self) -> dict[str, Any]:
        """The plan as reports write it (:data:`tpopt.models.variables.PLAN_RECORD`)."""
        return plan_record(self.plan, self.metrics)

    def moe_plan(self) -> dict[str, Any]:
        """EP, expert-TP, capacity and the EP group's placement (None for a dense model)."""
        return moe_record(self.plan, self.metrics)

    def as_dict(self) -> dict[str, Any]:
        return {"plan": self.plan_dict(), "metrics": {k: v for k, v in self.metrics.items()},
                "constraints": [c.as_dict() for c in self.constraints], "feasible": self.feasible}

    def to_dict(self) -> dict[str, Any]:
        """Plan, metrics, constraint checks and verdict (the JSON of ``tpopt evaluate``)."""
        return self.as_dict()

    def row(self) -> dict[str, Any]:
        """One flat record: the plan's fields, every metric, and ``feasible``."""
        return {**self.plan_dict(), **self.metrics, "feasible": self.feasible}

    def to_frame(self) -> pd.DataFrame:
        """A one-row pandas DataFrame of :meth:`row` (integer columns stay integers)."""
        return records_frame([self.row()])


def resolve_plan(sc: Scenario, plan: Plan) -> Plan:
    """Fill derived fields (dp, grad_accum, nics) and validate what can be validated as input."""
    sysm = sc.system(plan.accelerator)
    for field_name in ("cards", "tp", "pp", "micro_batch"):
        if getattr(plan, field_name) < 1:
            raise InputError(f"{field_name.replace('_', '-')} must be at least 1 (got {getattr(plan, field_name)})")
    if plan.zero_stage not in (0, 1, 2, 3):
        raise InputError(f"ZeRO stage must be 0, 1, 2 or 3 (got {plan.zero_stage})")
    if plan.cp < 1:
        raise InputError(f"cp must be at least 1 (got {plan.cp})")
    context.require_split(sc.task.seq_len, plan.cp, sc.cp_split)  # a sequence splits into 2 x cp equal pieces
    model_par = plan.tp * plan.cp * plan.pp
    what, sizes = ("tp x cp x pp", f"{plan.tp} x {plan.cp} x {plan.pp}") if plan.cp > 1 else \
        ("tp x pp", f"{plan.tp} x {plan.pp}")
    if plan.cards % model_par:
        raise InputError(f"cards ({plan.cards}) must be a multiple of {what} ({sizes})")
    dp = plan.cards // model_par
    if plan.dp not in (0, dp):
        raise InputError(f"dp ({plan.dp}) must equal cards / ({what}) = {dp}")
    B = sc.task.global_batch
    ga = B // (dp * plan.micro_batch) if B % (dp * plan.micro_batch) == 0 else 0
    if plan.grad_accum not in (0, ga) and ga:
        raise InputError(f"grad-accum ({plan.grad_accum}) must equal batch / (dp x micro-batch) = {ga}")
    interval = plan.save_interval_s
    if interval == 0:  # "auto": the optimal interval for this card count
        interval = float(T.optimal_save_interval(sc, plan.cards, plan.save_mode))
    if interval < 0:
        raise InputError("save interval must be positive")
    check_moe_plan(sc, plan)
    nics = plan.nics_per_host or sysm.acc.nics_per_host
    if nics < 1 or nics > max(sysm.acc.max_nics_per_host, 1):
        raise InputError(f"nics per host must be between 1 and {sysm.acc.max_nics_per_host} for {plan.accelerator}")
    base, v = split_schedule(plan.schedule)
    for name in ("first_stage_layers", "last_stage_layers"):
        if getattr(plan, name) < 0:
            raise InputError(f"{name.replace('_', '-')} must be at least 0 (got {getattr(plan, name)})")
    mem = sc.memory
    return replace(plan, dp=dp, grad_accum=ga, nics_per_host=nics, save_interval_s=interval,
                   recompute=memory.parse_recompute(plan.recompute), schedule=schedule_name(base, v),
                   sequence_parallel=(mem.sequence_parallel if plan.sequence_parallel is None
                                      else plan.sequence_parallel),
                   flash_attention=mem.flash_attention if plan.flash_attention is None else plan.flash_attention,
                   global_batch=B)


def with_plan_options(sc: Scenario, plan: Plan) -> Scenario:
    """The scenario as a plan runs it: the plan's sequence parallelism, flash attention and stage layer
    counts (when it sets them) replace the scenario's."""
    mem = sc.memory
    sp = mem.sequence_parallel if plan.sequence_parallel is None else plan.sequence_parallel
    flash = mem.flash_attention if plan.flash_attention is None else plan.flash_attention
    if (sp, flash) != (mem.sequence_parallel, mem.flash_attention):
        sc = replace(sc, memory=replace(mem, sequence_parallel=sp, flash_attention=flash))
    if plan.first_stage_layers or plan.last_stage_layers:
        sc = replace(sc, stage_layers=(plan.first_stage_layers, plan.last_stage_layers))
    return sc


def at_plan_batch(sc: Scenario, plan: Plan) -> Scenario:
    """The scenario at the plan's global batch (tokens from the critical-batch model, Task.at_batch);
    unchanged when the plan keeps the task's batch."""
    if not plan.global_batch or plan.global_batch == sc.task.global_batch:
        return sc
    if plan.global_batch < 1:
        raise InputError(f"global batch must be at least 1 (got {plan.global_batch})")
    return replace(sc, task=sc.task.at_batch(plan.global_batch))


def check_moe_plan(sc: Scenario, plan: Plan) -> None:
    """Bad MoE plan input (one clear line): EP on a dense model or not dividing the routed experts, a
    negative expert-TP, a capacity factor that is not positive."""
    a = sc.model
    if plan.ep < 1:
        raise InputError(f"ep must be at least 1 (got {plan.ep})")
    if plan.expert_tp < 0:
        raise InputError(f"expert-tp must be at least 1, or 0 for the same as tp (got {plan.expert_tp})")
    if plan.capacity_factor < 0:
        raise InputError(f"capacity factor must be positive, or none for dropless (got {plan.capacity_factor})")
    if not a.moe:
        if plan.ep > 1 or plan.expert_tp > 0 or plan.capacity_factor > 0:
            raise InputError(f"ep, expert-tp and capacity apply to mixture-of-experts models; {a.name} is dense")
        return
    if a.experts % plan.ep:
        raise InputError(f"ep {plan.ep} does not divide the {a.experts} routed experts of {a.name}")


def moe_metrics(sc: Scenario, plan: Plan, v: dict[str, float]) -> dict[str, Any]:
    """What a MoE plan adds to the report: expert weights and state per card, the routing outcome of one
    card's micro-batch (dispatches, capacity rows, dropped and padded shares, load factor) and the
    all-to-all (link time, exposed time, where the EP group sits)."""
    a, o = sc.model, sc.moe
    if not a.moe:
        return {}
    rec = sc.state_recipe()
    tokens = float(T.card_tokens(sc, plan.tp, plan.micro_batch, plan.cp))
    etp = float(moe.expert_tp_size(plan.expert_tp, plan.tp))
    c = plan.capacity_factor
    dropped, padded = (float(x) for x in moe.routing_drops(tokens, a.top_k, a.experts, c, o.imbalance, o.hot))
    xp = float(moe.expert_card_params(a, plan.tp, plan.pp, plan.ep, plan.expert_tp))
    edp = float(moe.expert_dp_size(plan.tp, plan.dp * plan.cp, plan.ep, plan.expert_tp))
    g = sc.system(plan.accelerator).acc.cards_per_host
    return {
        "expert_params_per_card": xp,
        "expert_weights_gib": xp * rec.weights / GIB,
        "expert_states_gib": float(memory.zero_state_bytes(xp, edp, plan.zero_stage, rec, plan.offload == "cpu")) / GIB,
        "expert_dp": edp,
        "moe_blocks_per_stage": int(moe.moe_blocks_per_stage(a, plan.pp)),
        "dispatches_per_block": float(moe.dispatches(tokens, a.top_k)),
        "capacity_rows": int(moe.capacity_rows(tokens, a.top_k, a.experts, c)) if c > 0 else None,
        "dropped_fraction": dropped,
        "padded_fraction": padded,
        "load_factor": float(T.load_factor(sc, plan.ep, c)),
        "ep_link_s": v["ep_link_s"],
        "ep_exposed_s": v["ep_exposed_s"],
        "ep_hosts": int(moe.ep_hosts(plan.ep, etp, g)),
        "ep_placement": moe.ep_placement(plan.ep, etp, g, sc.system(plan.accelerator).acc.fabric.scale_up.cards),
        "moe_assumptions": {"imbalance": o.imbalance, "hot_experts": o.hot, "max_drop": o.max_drop,
                            "a2a_overlap": o.a2a_overlap, "dispatcher": o.dispatcher_on(plan.accelerator),
                            "node_limit": o.node_limit},
    }


def class_memory_metrics(r: Arrays, pp: int) -> dict[str, Any]:
    """The memory family per stage class of one plan (per-operation model with pp > 1; nothing in the flat
    model's one class nor for one stage): for each class the layout has (first and last; middle with pp > 2)
    its states (with weight copies), activations, temporary buffers and their sum in GiB, and the class
    whose sum is the family's value (the rank that peaks)."""
    classes = [r[k] for k in r if isinstance(k, tuple) and k[0] == "memory"
               and (k[1] != "middle" or pp > 2)]
    if len(classes) < 2 or pp < 2:
        return {}
    rows = [{"stage": c.stage, "states_gib": float(np.asarray(c.states + c.copies)) / GIB,
             "activations_gib": float(np.asarray(c.activations)) / GIB,
             "temporary_gib": float(np.asarray(c.temporary)) / GIB, "total_gib": float(np.asarray(c.total)) / GIB}
            for c in classes]
    every = [k[1] for k in r if isinstance(k, tuple) and k[0] == "memory"]  # the order of r["memory_class"]
    peak = every[int(np.asarray(r["memory_class"]))]  # the first class of the largest sum (pp = 2: never "middle")
    return {"memory_by_class": rows, "memory_peak_class": peak}


def stage_memory_metrics(sc: Scenario, plan: Plan) -> dict[str, Any]:
    """The per-rank memory report (per-operation model): each pipeline stage's allocated and reserved
    peak in GiB (T.memory_by_stage) and the stage whose rank peaks; nothing in the flat model."""
    stages = T.memory_by_stage(sc, schedule=plan.schedule, recompute=plan.recompute, zero=plan.zero_stage,
                               offload=plan.offload, tp=plan.tp, cp=plan.cp, pp=plan.pp, dp=plan.dp,
                               mb=plan.micro_batch, ep=plan.ep, etp=plan.expert_tp, cap=plan.capacity_factor)
    if not stages:
        return {}
    peak = max(stages, key=lambda m: m.allocated)
    return {"memory_by_stage": [{"stage": m.stage, "layers": m.layers, "states_gib": m.states / GIB,
                                 "activations_gib": m.activations / GIB, "temporary_gib": m.temporary / GIB,
                                 "allocated_gib": m.allocated / GIB, "reserved_gib": m.reserved / GIB}
                                for m in stages],
            "peak_stage": peak.stage, "peak_rank_allocated_gib": peak.allocated / GIB,
            "peak_rank_reserved_gib": peak.reserved / GIB}


def evaluate(sc: Scenario, plan: Plan, *, binding_rel: float = 1e-9) -> Evaluation:
    """Metrics and constraint checks of one plan (chapter 10.6.1 table and more), at the plan's
    global batch when it sets one."""
    sc = at_plan_batch(sc, plan)
    plan = resolve_plan(sc, plan)
    sc = with_plan_options(sc, plan)
    r = evaluate_arrays(sc, plan.accelerator, **evaluate_keywords(plan), quantiles=True)
    v = {k: float(np.asarray(x)) for k, x in r.items() if isinstance(k, str) and k != "feasible"}
    metrics = {
        "hosts": int(v["hosts"]),
        "memory_per_card_gib": v["memory_per_card"] / GIB,
        "states_gib": v["states"] / GIB,
        "activations_gib": v["activations"] / GIB,
        "stored_activations_gib": v["stored_activations"] / GIB,
        "recompute_workspace_gib": v["recompute_workspace"] / GIB,
        "temporary_gib": v["temporary"] / GIB,
        "memory_limit_gib": F.limit(F.MEMORY_PER_CARD, sc, plan.accelerator) / GIB,
        "compute_s": v["compute_s"],
        "bubble_s": v["bubble_s"],
        "straggler_s": v["straggler_s"],
        "comm_link_s": v["comm_link_s"],
        "comm_exposed_s": v["comm_exposed_s"],
        "tp_comm_s": v["tp_comm_s"],
        "cp_exposed_s": v["cp_exposed_s"],
        "cp_link_s": v["cp_link_s"],
        "offload_s": v["offload_s"],
        "input_wait_s": v["input_wait_s"],
        "step_s": v["step_s"],
        "overhead_fraction": v["overhead_fraction"],
        "overhead_save": v["overhead_save"],
        "overhead_redo": v["overhead_redo"],
        "overhead_restart": v["overhead_restart"],
        "failure_model": sc.reliability.failure_model,
        "iterations": int(v["iterations"]),
        "tokens": sc.task.tokens,
        "tokens_per_step": sc.task.tokens_per_step,
        "train_days": v["train_s"] / DAY,
        "finish_days": v["finish_s"] / DAY,
        "card_hours": v["card_hours"],
        "cost": v["cost"],
        "cost_unit": "USD" if sc.system(plan.accelerator).price_card_hour is not None else "card-hours",
        "checkpoint_gb": v["checkpoint_bytes"] / 1e9,
        "checkpoint_write_s": v["checkpoint_write_s"],
        "input_demand_seq_s": v["input_demand"],
        "input_supply_seq_s": _clean(v["input_supply"]),
        "step_model": "per-operation" if T.per_op_model(sc) else "flat",
        **class_memory_metrics(r, plan.pp),
        **stage_memory_metrics(sc, plan),
        "stage_layers": [int(x) if float(x).is_integer() else float(x) for x in T.stage_split(sc, plan.pp)],
        **moe_metrics(sc, plan, v),
    }
    checks = []
    for spec in CONSTRAINTS:
        val, lim = (float(np.asarray(x)) for x in r[("c", spec.name)])
        if (val == 0.0 and not spec.shown_at_zero) or (lim == float("inf") and not spec.shown_unbounded):
            continue  # host memory without offload; no budget cap, no input limit
        if spec.moe_only and not sc.model.moe:
            continue
        slack = lim - val
        scale = spec.scale
        if spec.structural:
            tight = False  # a rule holds or is broken (its slack says which), never "binding"
        else:
            tight = slack <= binding_rel * max(abs(lim), 1.0) if lim != float("inf") else False
        checks.append(ConstraintCheck(spec.name, val / scale, lim / scale, spec.unit,
                                      slack / scale if lim != float("inf") else float("inf"), tight,
                                      spec.statement(chance=sc.task.confidence is not None),
                                      rule_violation(sc, plan, spec.name) if spec.structural and slack < 0 else ""))
    return Evaluation(plan=plan, metrics=metrics, constraints=checks)
