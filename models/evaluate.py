"""Evaluate plans: a pure function of (model, system, task, plan) composing every relation.

``evaluate_arrays`` takes the numeric plan fields as numpy arrays that broadcast (tp, pp, dp,
micro-batch, ZeRO stage, NICs per host, save interval) and the categorical ones as scalars, so the
brute-force enumerator and the solvers' table builders run exactly this code. ``evaluate`` wraps it
for one plan and returns an :class:`Evaluation` with metrics and named constraint checks.

Step time (one optimizer step, per card):
    t_step = t_compute x (1 + sigma E[max_n]) + t_exposed_dp + t_tp + t_offload + t_input_wait
where t_compute is the pipeline completion time of the micro-batches (the plain sum when pp = 1).
Finish time: T = T_reserved + ceil(D / b) x t_step x (1 + L(tau)) (chapter 10.6.1).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tpopt.errors import InputError
from tpopt.models import comm, memory, reliability
from tpopt.models.arch import embedding_params, flops_per_token, param_count
from tpopt.models.compute import iterations
from tpopt.models.plan import OFFLOADS, SAVE_MODES, Plan, Scenario
from tpopt.models.units import DAY, GIB, HOUR

# Bytes a CPU Adam step touches per parameter: cast BF16->FP32 (read 2, write 4), read grad, master,
# m, v (16), write master, m, v (12), write the BF16 copy (2).
CPU_ADAM_BYTES_PER_PARAM = 36.0


@dataclass(frozen=True)
class ConstraintSpec:
    name: str
    unit: str
    scale: float  # divide SI values by this to print in ``unit``
    doc: str
    structural: bool = False  # divisibility/layout rules: satisfied or not, never "binding"


# Every constraint family, in report order. value <= limit is feasible.
CONSTRAINTS = (
    ConstraintSpec("memory.per_card", "GiB", GIB, "peak per-card memory <= usable memory"),
    ConstraintSpec("memory.host", "GiB", GIB, "offloaded optimizer state per host <= host memory"),
    ConstraintSpec("batch.divisibility", "sequences", 1.0, "batch mod (dp x micro_batch) = 0", True),
    ConstraintSpec("layout.whole_hosts", "cards", 1.0, "cards mod cards_per_host = 0", True),
    ConstraintSpec("layout.tp_within_host", "cards", 1.0, "tp divides cards_per_host", True),
    ConstraintSpec("layout.heads_divisible", "heads", 1.0, "tp divides query and KV heads", True),
    ConstraintSpec("layout.pp_divides_layers", "layers", 1.0, "pp divides the layer count", True),
    ConstraintSpec("step.budget", "s", 1.0, "t_step <= (T_deadline - T_reserved) / (iterations (1 + L))"),
    ConstraintSpec("input.throughput", "seq/s", 1.0, "input demand <= workers x rate"),
    ConstraintSpec("checkpoint.backlog", "s", 1.0, "checkpoint write time <= save interval"),
    ConstraintSpec("deadline.finish", "d", DAY, "T_finish <= deadline"),
    ConstraintSpec("cards.max", "cards", 1.0, "cards <= max_cards"),
    ConstraintSpec("budget.cost", "USD", 1.0, "cost <= budget cap"),
)
CONSTRAINT_NAMES = tuple(c.name for c in CONSTRAINTS)
SPEC = {c.name: c for c in CONSTRAINTS}


def _f(x):
    return np.asarray(x, dtype=float)


def pipeline_compute(schedule, pp, micro_batches, t_fwd, t_bwd_input, t_bwd_weight, t_transfer):
    """Per-step compute of a pipeline: the event model's completion time for each (pp, m) pair.

    pp = 1 degenerates to m x (t_f + t_b). Arrays broadcast; the simulator is run once per
    distinct (pp, m) with vectorised durations.
    """
    pp, m, tf, tdx, tdw, tx = np.broadcast_arrays(
        np.asarray(pp), np.asarray(micro_batches), _f(t_fwd), _f(t_bwd_input), _f(t_bwd_weight), _f(t_transfer))
    out = m * (tf + tdx + tdw)
    multi = pp > 1
    if np.any(multi):
        from tpopt.models import pipeline

        mm = np.ceil(m).astype(int)
        keys = np.unique(np.stack([pp[multi], mm[multi]], axis=1), axis=0)
        out = out.copy()
        for p_val, m_val in keys:
            sel = multi & (pp == p_val) & (mm == m_val)
            out[sel] = pipeline.completion_time(schedule, int(p_val), int(m_val), tf[sel], tdx[sel], tdw[sel],
                                                tx[sel], 0.0)
    return out


def pipeline_inflight(schedule, pp, micro_batches):
    """Peak live micro-batch activation sets on the busiest stage (1 when pp = 1)."""
    pp, m = np.broadcast_arrays(np.asarray(pp), np.ceil(_f(micro_batches)).astype(int))
    out = np.ones(pp.shape, dtype=float)
    multi = pp > 1
    if np.any(multi):
        from tpopt.models import pipeline

        for p_val, m_val in np.unique(np.stack([pp[multi], m[multi]], axis=1), axis=0):
            sel = multi & (pp == p_val) & (m == m_val)
            out[sel] = max(pipeline.peak_inflight(schedule, int(p_val), int(m_val)))
    return out


def pipeline_param_copies(schedule, pp):
    """Weight copies a schedule keeps per card (DualPipe keeps two)."""
    if schedule.startswith("dualpipe"):
        return np.where(np.asarray(pp) > 1, 2.0, 1.0)
    return np.ones(np.shape(pp))


def evaluate_arrays(sc: Scenario, accelerator: str, *, tp, pp, dp, micro_batch, zero_stage, nics_per_host,
                    save_interval_s, recompute="none", offload="none", schedule="1f1b", save_mode="sync") -> dict:
    """All metrics and constraint (value, limit) pairs for a broadcastable grid of plans.

    Returns a dict of arrays; constraint families appear as ``("c", name) -> (value, limit)``.
    """
    a = sc.model
    task = sc.task
    sysm = sc.system(accelerator)
    acc = sysm.acc
    mem = sc.memory
    rel = sc.reliability
    rec = memory.recipe(task.precision)
    if offload not in OFFLOADS:
        raise InputError(f"unknown offload {offload!r} (use none or cpu)")
    if save_mode not in SAVE_MODES:
        raise InputError(f"unknown save mode {save_mode!r} (use sync or async)")
    recompute = memory.parse_recompute(recompute)

    tp = np.asarray(tp)
    pp = np.asarray(pp)
    dp = np.asarray(dp)
    mb = np.asarray(micro_batch)
    z = np.asarray(zero_stage)
    nics = np.asarray(nics_per_host)
    tau = _f(save_interval_s)
    g = acc.cards_per_host

    cards = tp * pp * dp
    hosts = np.ceil(cards / g)
    B, s = task.global_batch, task.seq_len
    ga = B / (dp * mb)  # gradient accumulation (fractional when the batch does not divide)
    n_params = param_count(a)
    n_stage = memory.stage_params(a, tp, pp)
    emb_shard = memory.embedding_shard_params(a, tp)
    stage_layers = np.ceil(a.layers / pp)
    modelled = mem.activation_reserve is None
    rc = recompute if modelled else "none"

    # ---- memory -------------------------------------------------------------------------------
    states = memory.zero_state_bytes(n_stage, dp, z, rec, offload == "cpu")
    states = states + (pipeline_param_copies(schedule, pp) - 1.0) * rec.weights * n_stage
    if modelled:
        act_mb = memory.activation_bytes_per_microbatch(a, s, mb, tp, stage_layers, rc, mem.activation_bytes,
                                                        mem.flash_attention)
        inflight = pipeline_inflight(schedule, pp, ga)
        activations = inflight * act_mb
        temporary = (memory.logits_bytes(a, s, mb, tp, mem.loss_chunks)
                     + np.where(z >= 3, memory.zero3_gather_bytes(a, tp, rec, mem.prefetch), 0.0)
                     + np.where(pp > 1, memory.pipeline_buffer_bytes(a, s, mb, tp, mem.activation_bytes), 0.0))
    else:
        activations = np.broadcast_to(_f(mem.activation_reserve), np.shape(states))
        temporary = np.zeros(np.shape(states))
    mem_total = states + activations + temporary
    host_opt = np.where(offload == "cpu", memory.host_optimizer_bytes(n_stage, dp, z, rec) * g, 0.0)

    # ---- compute ------------------------------------------------------------------------------
    fpt = flops_per_token(a, s)
    rfpt = memory.recompute_flops_per_token(a, s, rc)
    rate = acc.peak_flops * sysm.efficiency
    per_card_tokens_mb = mb * s / (tp * pp)  # micro-batch tokens' work share of one card (stage average)
    t_f = per_card_tokens_mb * fpt / 3.0 / rate
    t_b = per_card_tokens_mb * (2.0 * fpt / 3.0 + rfpt) / rate
    split = schedule.startswith("zb") or schedule.startswith("dualpipe")
    t_dw = np.where(split, per_card_tokens_mb * fpt / 3.0 / rate, 0.0)
    t_dx = t_b - t_dw
    pp_bw = comm.pp_link_bandwidth(acc.intra_host_bw, acc.nic_bw, nics, cards, g, acc.host_link_bw)
    t_x = np.where(pp > 1, comm.pp_boundary_bytes(mb * s, a.hidden, tp, mem.activation_bytes) / pp_bw, 0.0)
    compute_s = pipeline_compute(schedule, pp, ga, t_f, t_dx, t_dw, t_x)
    pure_compute_s = ga * (t_f + t_b)  # without bubbles: F_step / (cards x P x eta)
    bubble_s = compute_s - pure_compute_s

    sigma = rel.straggler_sigma
    if sigma > 0:
        emax = reliability.expected_max_std_normal(cards)
        straggler_s = sigma * emax * compute_s
    else:
        straggler_s = np.zeros(np.shape(compute_s))

    # ---- communication ------------------------------------------------------------------------
    t_mb = t_f + t_b
    dp_bw = comm.dp_ring_bandwidth(acc.intra_host_bw, acc.nic_bw, nics, tp, dp, g)
    v_dp = comm.zero_dp_volume(z, n_stage, dp, ga, rec.weights, rec.grads)
    link_dp = v_dp / dp_bw
    unhidden = comm.zero_dp_unhidden_bytes(z, emb_shard, dp, rec.weights, rec.grads) / dp_bw
    windows = np.where(z >= 2, ga, 1.0)
    exposed_dp = comm.exposed_time(unhidden, link_dp / windows, t_mb, windows, sc.overlap)
    v_tp = comm.tp_volume(mb * s, a.hidden, tp, stage_layers, ga, mem.activation_bytes, rc == "full")
    tp_s = v_tp / acc.intra_host_bw
    if offload == "cpu":
        shard = n_stage / np.where(z >= 1, dp, 1)
        cpu_bw = acc.host_memory_bw / g if acc.host_memory_bw > 0 else np.inf
        grads_down = comm.offload_wait(2.0 * shard, acc.host_link_bw, 2.0 / 3.0 * t_mb)
        offload_s = grads_down + shard * CPU_ADAM_BYTES_PER_PARAM / cpu_bw + rec.weights * shard / acc.host_link_bw
    else:
        offload_s = np.zeros(np.shape(t_mb))
    comm_link_s = link_dp + tp_s
    comm_exposed_s = exposed_dp + tp_s

    # ---- step, input --------------------------------------------------------------------------
    inp = sc.input
    busy_s = compute_s + straggler_s + comm_exposed_s + offload_s
    step_s = busy_s + inp.wait_s
    demand = B / busy_s
    supply = (inp.workers_per_host * hosts if inp.workers_per_host > 0 else inp.workers) * inp.per_worker_rate
    supply = np.broadcast_to(_f(supply), np.shape(demand)) if (inp.workers > 0 or inp.workers_per_host > 0) \
        else np.full(np.shape(demand), np.inf)

    # ---- checkpoints and failures ---------------------------------------------------------------
    ckpt = reliability.checkpoint_bytes(n_params, rel.bytes_per_param)
    write_s = ckpt / rel.write_bandwidth
    lam = np.zeros(np.shape(cards)) if rel.card_mtbf_s is None else reliability.job_failure_rate(cards, rel.card_mtbf_s)
    if rel.event_interval_s:
        lam = lam + 1.0 / rel.event_interval_s
    if save_mode == "sync":
        pause, lag = write_s, 0.0
    else:
        pause, lag = rel.snapshot_copy_s, rel.snapshot_copy_s + write_s
    if rel.failure_model == "poisson":
        # exact retry model for the pause and restart; an async commit lag adds lam x w of redo
        overhead = reliability.overhead_poisson(tau, pause, lam, rel.restore_s) + lam * lag
    else:
        overhead = reliability.overhead_first_order(tau, pause, lam, rel.restore_s, lag)

    # ---- finish and cost ----------------------------------------------------------------------
    iters = float(iterations(task.tokens, task.tokens_per_step))
    train_s = iters * step_s
    finish_s = task.reserved_s + train_s * (1.0 + overhead)
    card_hours = cards * finish_s / HOUR
    price = sysm.price_card_hour
    nic_cost = hosts * nics * sysm.nic_price_hour * finish_s / HOUR
    cost = card_hours * price + nic_cost if price is not None else card_hours
    step_limit = (task.deadline_s - task.reserved_s) / (iters * (1.0 + overhead))

    ones = np.ones(np.shape(finish_s))
    out = {
        "cards": cards * ones, "hosts": hosts * ones, "grad_accum": ga * ones,
        "memory_per_card": mem_total * ones, "states": states * ones, "activations": activations * ones,
        "temporary": temporary * ones, "compute_s": compute_s * ones, "pure_compute_s": pure_compute_s * ones,
        "bubble_s": bubble_s * ones, "straggler_s": straggler_s * ones, "comm_link_s": comm_link_s * ones,
        "comm_exposed_s": comm_exposed_s * ones, "dp_link_s": link_dp * ones, "tp_comm_s": tp_s * ones,
        "offload_s": offload_s * ones, "input_wait_s": inp.wait_s * ones, "step_s": step_s * ones,
        "overhead_fraction": overhead * ones, "iterations": iters * ones, "train_s": train_s * ones,
        "finish_s": finish_s * ones, "card_hours": card_hours * ones, "cost": cost * ones,
        "checkpoint_bytes": ckpt * ones, "checkpoint_write_s": write_s * ones, "failure_rate": lam * ones,
        "input_demand": demand * ones, "input_supply": supply * ones,
    }
    heads_ok = (a.heads % tp == 0) & (a.kv_heads % tp == 0)
    cons = {
        "memory.per_card": (mem_total, acc.memory_usable),
        "memory.host": (host_opt, acc.host_memory if acc.host_memory > 0 else np.inf),
        "batch.divisibility": (B % (dp * mb), 0.0),
        "layout.whole_hosts": (cards % g, 0.0),
        "layout.tp_within_host": (np.where(g % tp == 0, 0.0, tp), 0.0),
        "layout.heads_divisible": (np.where(heads_ok, 0.0, tp), 0.0),
        "layout.pp_divides_layers": (a.layers % pp, 0.0),
        "step.budget": (step_s, step_limit),
        "input.throughput": (demand, supply),
        "checkpoint.backlog": (write_s, tau),
        "deadline.finish": (finish_s, task.deadline_s),
        "cards.max": (cards, sc.search.max_cards),
        "budget.cost": (cost, np.inf if sc.cost.max_cost is None else sc.cost.max_cost),
    }
    for name, (v, lim) in cons.items():
        out[("c", name)] = (_f(v) * ones, _f(lim) * ones)
    feasible = np.ones(np.shape(finish_s), dtype=bool)
    for name in CONSTRAINT_NAMES:
        v, lim = out[("c", name)]
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

    @property
    def satisfied(self) -> bool:
        return self.slack >= 0

    def as_dict(self) -> dict:
        return {"name": self.name, "value": _clean(self.value), "limit": _clean(self.limit), "unit": self.unit,
                "slack": _clean(self.slack), "binding": self.binding}


def _clean(x: float):
    x = float(x)
    if x == float("inf"):
        return None
    return x


@dataclass
class Evaluation:
    plan: Plan
    metrics: dict
    constraints: list[ConstraintCheck] = field(default_factory=list)

    @property
    def feasible(self) -> bool:
        return all(c.satisfied for c in self.constraints)

    def violated(self) -> list[ConstraintCheck]:
        return [c for c in self.constraints if not c.satisfied]

    def constraint(self, name: str) -> ConstraintCheck:
        return next(c for c in self.constraints if c.name == name)

    def plan_dict(self) -> dict:
        p = self.plan
        return {"accelerator": p.accelerator, "cards": p.cards, "hosts": int(self.metrics["hosts"]),
                "zero_stage": p.zero_stage, "tp": p.tp, "pp": p.pp, "dp": p.dp, "micro_batch": p.micro_batch,
                "grad_accum": p.grad_accum, "recompute": p.recompute, "offload": p.offload,
                "schedule": p.schedule if p.pp > 1 else None, "save_interval_s": p.save_interval_s,
                "save_mode": p.save_mode, "nics_per_host": p.nics_per_host}

    def as_dict(self) -> dict:
        return {"plan": self.plan_dict(), "metrics": {k: v for k, v in self.metrics.items()},
                "constraints": [c.as_dict() for c in self.constraints], "feasible": self.feasible}


def optimal_save_interval(sc: Scenario, cards, save_mode="sync"):
    """The save interval that minimises the overhead for a card count (backlog-free).

    First order: tau* = sqrt(2 c / lam) (c = write time for sync saves, the snapshot copy for
    async ones); Poisson-retry: the exact minimiser. Raised to the write time so that uploads never
    queue (checkpoint.backlog). Without failures, the longest interval: the whole training run.
    """
    rel = sc.reliability
    n_params = param_count(sc.model)
    write_s = reliability.checkpoint_bytes(n_params, rel.bytes_per_param) / rel.write_bandwidth
    lam = np.zeros(np.shape(cards)) if rel.card_mtbf_s is None else reliability.job_failure_rate(cards, rel.card_mtbf_s)
    if rel.event_interval_s:
        lam = lam + 1.0 / rel.event_interval_s
    pause = write_s if save_mode == "sync" else rel.snapshot_copy_s
    if rel.failure_model == "poisson":
        tau = reliability.optimal_interval_poisson(pause, lam)
    else:
        tau = reliability.optimal_interval_first_order(pause, lam)
    tau = np.maximum(tau, write_s)
    return np.where(np.isfinite(tau), tau, sc.task.deadline_s)


def resolve_plan(sc: Scenario, plan: Plan) -> Plan:
    """Fill derived fields (dp, grad_accum, nics) and validate what can be validated as input."""
    sysm = sc.system(plan.accelerator)
    for field_name in ("cards", "tp", "pp", "micro_batch"):
        if getattr(plan, field_name) < 1:
            raise InputError(f"{field_name.replace('_', '-')} must be at least 1 (got {getattr(plan, field_name)})")
    if plan.zero_stage not in (0, 1, 2, 3):
        raise InputError(f"ZeRO stage must be 0, 1, 2 or 3 (got {plan.zero_stage})")
    if plan.cards % (plan.tp * plan.pp):
        raise InputError(f"cards ({plan.cards}) must be a multiple of tp x pp ({plan.tp} x {plan.pp})")
    dp = plan.cards // (plan.tp * plan.pp)
    if plan.dp not in (0, dp):
        raise InputError(f"dp ({plan.dp}) must equal cards / (tp x pp) = {dp}")
    B = sc.task.global_batch
    ga = B // (dp * plan.micro_batch) if B % (dp * plan.micro_batch) == 0 else 0
    if plan.grad_accum not in (0, ga) and ga:
        raise InputError(f"grad-accum ({plan.grad_accum}) must equal batch / (dp x micro-batch) = {ga}")
    interval = plan.save_interval_s
    if interval == 0:  # "auto": the optimal interval for this card count
        interval = float(optimal_save_interval(sc, plan.cards, plan.save_mode))
    if interval < 0:
        raise InputError("save interval must be positive")
    nics = plan.nics_per_host or sysm.acc.nics_per_host
    if nics < 1 or nics > max(sysm.acc.max_nics_per_host, 1):
        raise InputError(f"nics per host must be between 1 and {sysm.acc.max_nics_per_host} for {plan.accelerator}")
    from dataclasses import replace

    return replace(plan, dp=dp, grad_accum=ga, nics_per_host=nics, save_interval_s=interval,
                   recompute=memory.parse_recompute(plan.recompute))


def evaluate(sc: Scenario, plan: Plan, *, binding_rel: float = 1e-9) -> Evaluation:
    """Metrics and constraint checks of one plan (chapter 10.6.1 table and more)."""
    plan = resolve_plan(sc, plan)
    r = evaluate_arrays(sc, plan.accelerator, tp=plan.tp, pp=plan.pp, dp=plan.dp, micro_batch=plan.micro_batch,
                        zero_stage=plan.zero_stage, nics_per_host=plan.nics_per_host,
                        save_interval_s=plan.save_interval_s, recompute=plan.recompute, offload=plan.offload,
                        schedule=plan.schedule, save_mode=plan.save_mode)
    v = {k: float(np.asarray(x)) for k, x in r.items() if isinstance(k, str) and k != "feasible"}
    metrics = {
        "hosts": int(v["hosts"]),
        "memory_per_card_gib": v["memory_per_card"] / GIB,
        "states_gib": v["states"] / GIB,
        "activations_gib": v["activations"] / GIB,
        "temporary_gib": v["temporary"] / GIB,
        "memory_limit_gib": sc.system(plan.accelerator).acc.memory_usable / GIB,
        "compute_s": v["compute_s"],
        "bubble_s": v["bubble_s"],
        "straggler_s": v["straggler_s"],
        "comm_link_s": v["comm_link_s"],
        "comm_exposed_s": v["comm_exposed_s"],
        "tp_comm_s": v["tp_comm_s"],
        "offload_s": v["offload_s"],
        "input_wait_s": v["input_wait_s"],
        "step_s": v["step_s"],
        "overhead_fraction": v["overhead_fraction"],
        "iterations": int(v["iterations"]),
        "train_days": v["train_s"] / DAY,
        "finish_days": v["finish_s"] / DAY,
        "card_hours": v["card_hours"],
        "cost": v["cost"],
        "cost_unit": "USD" if sc.system(plan.accelerator).price_card_hour is not None else "card-hours",
        "checkpoint_gb": v["checkpoint_bytes"] / 1e9,
        "checkpoint_write_s": v["checkpoint_write_s"],
        "input_demand_seq_s": v["input_demand"],
        "input_supply_seq_s": _clean(v["input_supply"]),
    }
    checks = []
    for spec in CONSTRAINTS:
        val, lim = (float(np.asarray(x)) for x in r[("c", spec.name)])
        if spec.name == "memory.host" and val == 0.0:
            continue  # no offload: nothing on the host
        if spec.name == "budget.cost" and lim == float("inf"):
            continue
        if spec.name == "input.throughput" and lim == float("inf"):
            continue
        slack = lim - val
        scale = spec.scale
        if spec.structural:
            tight = slack < 0
        else:
            tight = slack <= binding_rel * max(abs(lim), 1.0) if lim != float("inf") else False
        checks.append(ConstraintCheck(spec.name, val / scale, lim / scale, spec.unit,
                                      slack / scale if lim != float("inf") else float("inf"), tight, spec.doc))
    return Evaluation(plan=plan, metrics=metrics, constraints=checks)
