"""The plan model as a sum of terms, each a function of exactly the decision variables it uses.

Every term broadcasts over numpy arrays of its variables. The evaluator adds them up; the solvers
tabulate each one over the joint domain of its own variables (a far smaller table than the whole
design space) and glue the tables with sums, products and maxima. The variables are:

    acc (scalar per call)  tp  pp  dp  micro_batch  zero  offload  recompute  schedule  nics
    save_interval  save_mode

with cards = tp pp dp and grad_accum = batch / (dp micro_batch). Categorical variables (acc,
offload, recompute, schedule, save_mode) are scalars; the numeric ones may be arrays.

    memory  = states + param_copies + activations + temporary                 <= usable
    busy    = compute (incl. bubbles, stragglers) + exposed_dp + tp_comm + offload_wait
    step    = busy + input_wait
    finish  = reserved + iterations x step x (1 + overhead)                   <= deadline
    cost    = rate x finish
"""

from __future__ import annotations

import numpy as np

from tpopt.models import comm, memory, reliability
from tpopt.models.arch import flops_per_token, param_count
from tpopt.models.batch import iterations_with_ramp
from tpopt.models.compute import iterations
from tpopt.models.plan import Scenario
from tpopt.models.units import HOUR

CPU_ADAM_BYTES_PER_PARAM = 36.0
"""Bytes a CPU Adam step touches per parameter: cast BF16->FP32 (read 2, write 4), read grad, master,
m, v (16), write master, m, v (12), write the BF16 copy (2)."""


def _f(x):
    return np.asarray(x, dtype=float)


def modelled_activations(sc: Scenario) -> bool:
    """True when activations are modelled per recompute group (no fixed reserve in the scenario)."""
    return sc.memory.activation_reserve is None


def effective_recompute(sc: Scenario, recompute: str) -> str:
    """A fixed activation reserve already is the team's measured budget: recompute then changes nothing."""
    return memory.parse_recompute(recompute) if modelled_activations(sc) else "none"


def grad_accum(sc: Scenario, dp, micro_batch):
    """Micro-batches per step per card: batch / (dp x micro_batch) (fractional when it does not divide)."""
    return sc.task.global_batch / (_f(dp) * _f(micro_batch))


def iteration_count(sc: Scenario) -> float:
    """Optimizer steps: ceil(D / b), plus the steps of a batch ramp-up when the task has one
    (batch.iterations_with_ramp; each ramp step is budgeted as a full-batch step, an upper bound)."""
    t = sc.task
    if t.ramp is None:
        return float(iterations(t.tokens, t.tokens_per_step))
    return iterations_with_ramp(t.tokens, t.global_batch, t.seq_len, t.ramp)


def batch_remainder(sc: Scenario, dp, micro_batch):
    """Sequences left over when the batch is split into dp x micro_batch: B mod (dp x mb), and with a
    ramp-up also its start and increment mod (dp x mb) (Megatron-LM requires every ramp batch to split
    into whole micro-batches on every data-parallel rank)."""
    t = sc.task
    unit = np.asarray(dp) * np.asarray(micro_batch)
    rem = t.global_batch % unit
    if t.ramp is not None and t.ramp[0] < t.global_batch:
        rem = np.maximum(rem, np.maximum(int(t.ramp[0]) % unit, int(t.ramp[1]) % unit))
    return rem


# ---------------------------------------------------------------------------------------------
# memory terms (bytes per card)


def states(sc: Scenario, zero, offload_cpu, tp, pp, dp):
    """Persistent training state of the heaviest stage's card under ZeRO (memory.zero_state_bytes)."""
    rec = memory.recipe(sc.task.precision)
    return memory.zero_state_bytes(memory.stage_params(sc.model, tp, pp), dp, zero, rec, offload_cpu)


def param_copies(sc: Scenario, schedule, tp, pp):
    """Extra weight copies a pipeline schedule keeps (DualPipe: one more copy of the stage weights)."""
    rec = memory.recipe(sc.task.precision)
    extra = 1.0 if str(schedule).startswith("dualpipe") else 0.0
    return np.where(_f(pp) > 1, extra * rec.weights * memory.stage_params(sc.model, tp, pp), 0.0)


def activations(sc: Scenario, schedule, recompute, tp, pp, dp, micro_batch):
    """Saved activations at the peak: in-flight micro-batches x one micro-batch's stage activations.

    With a fixed reserve (chapter accounting: activations, gathered module parameters and workspace for
    micro-batches of one sequence, 10.2.4) the term is the reserve times the micro-batch size
    (conservative: the whole reserve scales, not only its activation share).
    """
    mem = sc.memory
    if not modelled_activations(sc):
        shape = np.broadcast(_f(tp), _f(pp), _f(dp), _f(micro_batch)).shape
        return np.broadcast_to(_f(mem.activation_reserve) * _f(micro_batch), shape)
    rc = effective_recompute(sc, recompute)
    stage_layers = np.ceil(sc.model.layers / _f(pp))
    act_mb = memory.activation_bytes_per_microbatch(sc.model, sc.task.seq_len, micro_batch, tp, stage_layers, rc,
                                                    mem.activation_bytes, mem.flash_attention)
    return pipeline_inflight(schedule, pp, grad_accum(sc, dp, micro_batch)) * act_mb


def temporary(sc: Scenario, zero, tp, pp, micro_batch):
    """Buffers live with the activations: FP32 logits, ZeRO-3 gathered units, pipeline send/recv."""
    mem = sc.memory
    if not modelled_activations(sc):
        return np.zeros(np.broadcast(_f(zero), _f(tp), _f(pp), _f(micro_batch)).shape)
    a, s = sc.model, sc.task.seq_len
    rec = memory.recipe(sc.task.precision)
    return (memory.logits_bytes(a, s, micro_batch, tp, mem.loss_chunks)
            + np.where(_f(zero) >= 3, memory.zero3_gather_bytes(a, tp, rec, mem.prefetch), 0.0)
            + np.where(_f(pp) > 1, memory.pipeline_buffer_bytes(a, s, micro_batch, tp, mem.activation_bytes), 0.0))


def host_memory(sc: Scenario, acc: str, offload_cpu, zero, tp, pp, dp):
    """Optimizer state offloaded to one host: cards_per_host x per-card optimizer shard (0 without offload)."""
    rec = memory.recipe(sc.task.precision)
    g = sc.system(acc).acc.cards_per_host
    per_card = memory.host_optimizer_bytes(memory.stage_params(sc.model, tp, pp), dp, zero, rec)
    return np.where(offload_cpu, per_card * g, 0.0)


# ---------------------------------------------------------------------------------------------
# time terms (seconds per step per card)


def microbatch_times(sc: Scenario, acc: str, recompute, schedule, tp, pp, micro_batch):
    """(t_forward, t_backward_input, t_backward_weight) of one micro-batch on one stage's card.

    Work per token: forward 1/3 of the training FLOPs, backward 2/3 plus any recompute; with a
    split backward (zero-bubble, DualPipe) dW is the forward-sized half and dX takes the rest.
    Stages are balanced (the LM head counted in the average).
    """
    sysm = sc.system(acc)
    a, s = sc.model, sc.task.seq_len
    rc = effective_recompute(sc, recompute)
    fpt = flops_per_token(a, s)
    rfpt = memory.recompute_flops_per_token(a, s, rc)
    rate = sysm.acc.peak_flops * sysm.efficiency
    tokens = _f(micro_batch) * s / (_f(tp) * _f(pp))
    t_f = tokens * fpt / 3.0 / rate
    t_b = tokens * (2.0 * fpt / 3.0 + rfpt) / rate
    split = str(schedule).startswith("zb") or str(schedule).startswith("dualpipe")
    t_w = tokens * fpt / 3.0 / rate if split else 0.0 * t_f
    return t_f, t_b - t_w, t_w


def pipeline_transfer(sc: Scenario, acc: str, tp, pp, dp, micro_batch, nics):
    """Boundary transfer per micro-batch and direction: s b h x bytes / tp over the stage link."""
    A = sc.system(acc).acc
    cards = _f(tp) * _f(pp) * _f(dp)
    bw = comm.pp_link_bandwidth(A.intra_host_bw, A.nic_bw, nics, cards, A.cards_per_host, A.host_link_bw)
    size = comm.pp_boundary_bytes(_f(micro_batch) * sc.task.seq_len, sc.model.hidden, tp, sc.memory.activation_bytes)
    return np.where(_f(pp) > 1, size / bw, 0.0)


def pipeline_compute(schedule, pp, micro_batches, t_fwd, t_bwd_input, t_bwd_weight, t_transfer):
    """Per-step compute: the pipeline event model's completion time (m (t_f + t_b) when pp = 1)."""
    pp, m, tf, tdx, tdw, tx = np.broadcast_arrays(
        np.asarray(pp), _f(micro_batches), _f(t_fwd), _f(t_bwd_input), _f(t_bwd_weight), _f(t_transfer))
    shape = pp.shape
    pp, m, tf, tdx, tdw, tx = (x.reshape(-1) for x in (pp, m, tf, tdx, tdw, tx))
    out = m * (tf + tdx + tdw)
    multi = pp > 1
    if np.any(multi):
        from tpopt.models import pipeline

        mm = np.ceil(m - 1e-9).astype(int)
        for p_val, m_val in np.unique(np.stack([pp[multi], mm[multi]], axis=1), axis=0):
            sel = multi & (pp == p_val) & (mm == m_val)
            if pipeline.shape_error(schedule, int(p_val), int(m_val)):
                out[sel] = np.inf  # the schedule cannot run this shape (layout.schedule_shape)
                continue
            out[sel] = pipeline.completion_time(schedule, int(p_val), int(m_val), tf[sel], tdx[sel], tdw[sel],
                                                tx[sel], 0.0)
    return out.reshape(shape)


def pipeline_inflight(schedule, pp, micro_batches):
    """Peak live micro-batch activation sets on the busiest stage (1 when pp = 1)."""
    pp, m = np.broadcast_arrays(np.asarray(pp), np.ceil(_f(micro_batches) - 1e-9).astype(int))
    shape = pp.shape
    pp, m = pp.reshape(-1), m.reshape(-1)
    out = np.ones(pp.shape, dtype=float)
    multi = pp > 1
    if np.any(multi):
        from tpopt.models import pipeline

        for p_val, m_val in np.unique(np.stack([pp[multi], m[multi]], axis=1), axis=0):
            sel = multi & (pp == p_val) & (m == m_val)
            if pipeline.shape_error(schedule, int(p_val), int(m_val)):
                out[sel] = np.inf
                continue
            out[sel] = max(pipeline.peak_inflight(schedule, int(p_val), int(m_val)))
    return out.reshape(shape)


def schedule_shape_ok(schedule, pp, dp, micro_batch, batch):
    """1 where the pipeline schedule can run pp stages with batch / (dp x micro_batch) micro-batches
    (always when pp = 1; only DeepSeek's DualPipe ordering restricts shapes)."""
    from tpopt.models import pipeline

    pp, m = np.broadcast_arrays(np.asarray(pp), np.ceil(batch / (_f(dp) * _f(micro_batch)) - 1e-9).astype(int))
    out = np.ones(pp.shape, dtype=bool)
    for p_val, m_val in np.unique(np.stack([pp.reshape(-1), m.reshape(-1)], axis=1), axis=0):
        if p_val > 1 and pipeline.shape_error(schedule, int(p_val), int(m_val)):
            out[(pp == p_val) & (m == m_val)] = False
    return out


def straggler_factor(sc: Scenario, cards):
    """Expected slowest-card factor on compute: 1 + sigma E[max of n standard normals] (chapter 10.4.5)."""
    sigma = sc.reliability.straggler_sigma
    if sigma <= 0:
        return np.ones(np.shape(cards))
    return 1.0 + sigma * reliability.expected_max_std_normal(np.asarray(cards).astype(int))


def compute_inputs(sc: Scenario, acc: str, recompute, schedule, tp, pp, dp, micro_batch, nics):
    """Everything the compute term needs: (t_f, t_dX, t_dW, t_transfer, grad_accum, cards)."""
    t_f, t_dx, t_dw = microbatch_times(sc, acc, recompute, schedule, tp, pp, micro_batch)
    t_x = pipeline_transfer(sc, acc, tp, pp, dp, micro_batch, nics)
    return t_f, t_dx, t_dw, t_x, grad_accum(sc, dp, micro_batch), _f(tp) * _f(pp) * _f(dp)


def compute_from(sc: Scenario, schedule, pp, inputs):
    """Compute term from its inputs (arrays may stack many plans; one simulator call per shape).

    Returns (compute_with_stragglers, pure_compute, bubble, straggler).
    """
    t_f, t_dx, t_dw, t_x, ga, cards = inputs
    completion = pipeline_compute(schedule, pp, ga, t_f, t_dx, t_dw, t_x)
    pure = ga * (t_f + t_dx + t_dw)
    total = completion * straggler_factor(sc, cards)
    finite = np.isfinite(completion)
    return (total, pure, np.where(finite, completion - pure, np.inf),
            np.where(finite, total - np.where(finite, completion, 0.0), 0.0))


def compute(sc: Scenario, acc: str, recompute, schedule, tp, pp, dp, micro_batch, nics):
    """Per-step compute incl. pipeline bubbles, times the straggler factor.

    Returns (compute_with_stragglers, pure_compute, bubble, straggler) so that reports can split it.
    """
    return compute_from(sc, schedule, pp, compute_inputs(sc, acc, recompute, schedule, tp, pp, dp, micro_batch, nics))


def dp_link(sc: Scenario, acc: str, zero, tp, pp, dp, micro_batch, nics):
    """Data-parallel (ZeRO) link time per step: V / B on the real path (comm.zero_dp_volume, dp_ring_bandwidth)."""
    A = sc.system(acc).acc
    rec = memory.recipe(sc.task.precision)
    bw = comm.dp_ring_bandwidth(A.intra_host_bw, A.nic_bw, nics, tp, dp, A.cards_per_host)
    v = comm.zero_dp_volume(zero, memory.stage_params(sc.model, tp, pp), dp, grad_accum(sc, dp, micro_batch),
                            rec.weights, rec.grads)
    return v / bw


def exposed_dp(sc: Scenario, acc: str, zero, recompute, tp, pp, dp, micro_batch, nics):
    """Exposed data-parallel communication (comm.exposed_time).

    Windows: one per micro-batch for ZeRO-2/3 (their collectives run every micro-batch), one per
    step for ZeRO-0/1; each window's compute is one micro-batch's forward + backward.
    """
    A = sc.system(acc).acc
    rec = memory.recipe(sc.task.precision)
    bw = comm.dp_ring_bandwidth(A.intra_host_bw, A.nic_bw, nics, tp, dp, A.cards_per_host)
    link = dp_link(sc, acc, zero, tp, pp, dp, micro_batch, nics)
    unhidden = comm.zero_dp_unhidden_bytes(zero, memory.embedding_shard_params(sc.model, tp), dp, rec.weights,
                                           rec.grads) / bw
    t_f, t_dx, t_dw = microbatch_times(sc, acc, recompute, "1f1b", tp, pp, micro_batch)
    windows = np.where(_f(zero) >= 2, grad_accum(sc, dp, micro_batch), 1.0)
    return comm.exposed_time(unhidden, link / windows, t_f + t_dx + t_dw, windows, sc.overlap)


def tp_comm(sc: Scenario, acc: str, recompute, tp, pp, dp, micro_batch):
    """Tensor-parallel communication, all on the critical path: V_tp / intra-host bandwidth."""
    A = sc.system(acc).acc
    rc = effective_recompute(sc, recompute)
    v = comm.tp_volume(_f(micro_batch) * sc.task.seq_len, sc.model.hidden, tp, np.ceil(sc.model.layers / _f(pp)),
                       grad_accum(sc, dp, micro_batch), sc.memory.activation_bytes, rc == "full")
    return v / A.intra_host_bw


def offload_wait(sc: Scenario, acc: str, offload_cpu, zero, recompute, tp, pp, dp, micro_batch):
    """CPU-offload time per step: gradient download beyond the last backward (T_wait = max(0, V/B - W)),
    the CPU Adam pass at the host's memory bandwidth shared by its cards, and the BF16 upload."""
    A = sc.system(acc).acc
    rec = memory.recipe(sc.task.precision)
    shard = memory.stage_params(sc.model, tp, pp) / np.where(_f(zero) >= 1, _f(dp), 1.0)
    t_f, t_dx, t_dw = microbatch_times(sc, acc, recompute, "1f1b", tp, pp, micro_batch)
    cpu_bw = A.host_memory_bw / A.cards_per_host if A.host_memory_bw > 0 else np.inf
    down = comm.offload_wait(2.0 * shard, A.host_link_bw, 2.0 / 3.0 * (t_f + t_dx + t_dw))
    t = down + shard * CPU_ADAM_BYTES_PER_PARAM / cpu_bw + rec.weights * shard / A.host_link_bw
    return np.where(offload_cpu, t, 0.0)


# ---------------------------------------------------------------------------------------------
# long-run overhead, input, price


def checkpoint_write_time(sc: Scenario) -> float:
    rel = sc.reliability
    return float(reliability.checkpoint_bytes(param_count(sc.model), rel.bytes_per_param) / rel.write_bandwidth)


def failure_rate(sc: Scenario, cards):
    """Job event rate: cards / card MTBF + job-wide events (loss spikes, planned stops)."""
    rel = sc.reliability
    lam = np.zeros(np.shape(cards)) if rel.card_mtbf_s is None else reliability.job_failure_rate(_f(cards),
                                                                                                rel.card_mtbf_s)
    if rel.event_interval_s:
        lam = lam + 1.0 / rel.event_interval_s
    return lam


def overhead(sc: Scenario, save_mode, cards, save_interval):
    """Checkpoint + failure overhead per unit useful time, L(tau) (reliability.overhead_*).

    Sync saves pause for the write time c; async saves pause for the snapshot copy and redo the
    commit lag w = copy + write on top of tau/2.
    """
    rel = sc.reliability
    write = checkpoint_write_time(sc)
    lam = failure_rate(sc, cards)
    if save_mode == "sync":
        pause, lag = write, 0.0
    else:
        pause, lag = rel.snapshot_copy_s, rel.snapshot_copy_s + write
    tau = _f(save_interval)
    if rel.failure_model == "poisson":
        return reliability.overhead_poisson(tau, pause, lam, rel.restore_s) + lam * lag
    return reliability.overhead_first_order(tau, pause, lam, rel.restore_s, lag)


def overhead_parts(sc: Scenario, save_mode, cards, save_interval):
    """First-order split of the overhead: (save c/tau, redo lam (tau/2 + w), restart lam r)."""
    rel = sc.reliability
    write = checkpoint_write_time(sc)
    lam = failure_rate(sc, cards)
    pause, lag = (write, 0.0) if save_mode == "sync" else (rel.snapshot_copy_s, rel.snapshot_copy_s + write)
    tau = _f(save_interval)
    return (reliability.save_overhead(tau, pause), reliability.redo_overhead(tau, lam, lag),
            reliability.restart_overhead(lam, rel.restore_s))


def optimal_save_interval(sc: Scenario, cards, save_mode="sync"):
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
    return np.where(np.isfinite(tau), tau, sc.task.deadline_s)


def input_supply(sc: Scenario, acc: str, cards):
    """Sequences per second the CPU workers prepare (inf when the scenario gives no input pipeline)."""
    inp = sc.input
    if inp.workers <= 0 and inp.workers_per_host <= 0:
        return np.full(np.shape(cards), np.inf)
    if inp.workers_per_host > 0:
        hosts = np.ceil(_f(cards) / sc.system(acc).acc.cards_per_host)
        return inp.workers_per_host * hosts * inp.per_worker_rate
    return np.full(np.shape(cards), inp.workers * inp.per_worker_rate)


def rate_per_second(sc: Scenario, acc: str, cards, nics):
    """Rental cost per wall-clock second: (cards x card price + hosts x NICs x NIC price) / 3600;
    card-hours per second (cards / 3600) when the accelerator has no price."""
    sysm = sc.system(acc)
    hosts = np.ceil(_f(cards) / sysm.acc.cards_per_host)
    if sysm.price_card_hour is None:
        return _f(cards) / HOUR
    return (_f(cards) * sysm.price_card_hour + hosts * _f(nics) * sysm.nic_price_hour) / HOUR
