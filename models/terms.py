"""The plan model as a sum of terms, each a function of exactly the decision variables it uses.

Every term broadcasts over numpy arrays of its variables. The evaluator adds them up; the solvers
tabulate each one over the joint domain of its own variables (a far smaller table than the whole
design space) and glue the tables with sums, products and maxima. The variables are:

    acc (scalar per call)  tp  pp  dp  micro_batch  zero  offload  recompute  schedule  nics
    save_interval  save_mode  ep  expert_tp  capacity_factor (MoE models; see models/moe.py)

with cards = tp pp dp and grad_accum = batch / (dp micro_batch). Categorical variables (acc,
offload, recompute, schedule, save_mode) are scalars; the numeric ones may be arrays.

    memory  = states + param_copies + activations + temporary                 <= usable
    busy    = compute (incl. bubbles, stragglers) + exposed_dp + tp_comm + offload_wait + ep_comm
    step    = busy + input_wait
    finish  = reserved + iterations x step x (1 + overhead)                   <= deadline
    cost    = rate x finish
"""

from __future__ import annotations

import numpy as np

from tpopt.models import comm, memory, moe, reliability
from tpopt.models.arch import flops_per_token, param_count
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
    return float(iterations(sc.task.tokens, sc.task.tokens_per_step))


# ---------------------------------------------------------------------------------------------
# memory terms (bytes per card)


def load_factor(sc: Scenario, ep, capacity_factor):
    """Rows the busiest expert-parallel rank processes over a balanced router (moe.load_factor; 1 if dense)."""
    o = sc.moe
    return moe.load_factor(sc.model.experts, ep, capacity_factor, o.imbalance, o.hot)


def card_params(sc: Scenario, tp, pp, ep=1, expert_tp=0):
    """Parameters on one card of the heaviest stage (experts split by ep x expert-TP; memory.stage_params
    for a dense model)."""
    if not sc.model.moe:
        return memory.stage_params(sc.model, tp, pp)
    return moe.card_params(sc.model, tp, pp, ep, expert_tp)


def _sharded(sc: Scenario, tp, pp, dp, ep, expert_tp, fn):
    """max over the stages of fn(non-expert params, dp) + fn(expert params per card, edp): ZeRO shards the
    non-expert state over dp and the expert state over the expert-data-parallel group edp = tp dp / (ep etp)."""
    if not sc.model.moe:
        return fn(memory.stage_params(sc.model, tp, pp), dp)
    etp = moe.expert_tp_size(expert_tp, tp)
    edp = moe.expert_dp_size(tp, dp, ep, expert_tp)
    return moe.heaviest_stage(sc.model, tp, pp, lambda d, xl, xb, n: fn(d, dp) + fn(xl / (_f(ep) * etp) + xb / _f(ep),
                                                                                    edp))


def states(sc: Scenario, zero, offload_cpu, tp, pp, dp, ep=1, expert_tp=0):
    """Persistent training state of the heaviest stage's card under ZeRO (memory.zero_state_bytes); for a
    MoE model the expert weights and optimizer state are split by ep x expert-TP and ZeRO shards them over
    the expert-data-parallel group."""
    rec = memory.recipe(sc.task.precision)
    return _sharded(sc, tp, pp, dp, ep, expert_tp, lambda n, d: memory.zero_state_bytes(n, d, zero, rec, offload_cpu))


def param_copies(sc: Scenario, schedule, tp, pp, ep=1, expert_tp=0):
    """Extra weight copies a pipeline schedule keeps (DualPipe: one more copy of the stage weights)."""
    rec = memory.recipe(sc.task.precision)
    extra = 1.0 if str(schedule).startswith("dualpipe") else 0.0
    return np.where(_f(pp) > 1, extra * rec.weights * card_params(sc, tp, pp, ep, expert_tp), 0.0)


def activations(sc: Scenario, schedule, recompute, tp, pp, dp, micro_batch, ep=1, expert_tp=0, capacity_factor=0.0):
    """Saved activations at the peak: in-flight micro-batches x one micro-batch's stage activations.

    With a fixed reserve (chapter accounting: activations, gathered module parameters and workspace for
    micro-batches of one sequence, 10.2.4) the term is the reserve times the micro-batch size
    (conservative: the whole reserve scales, not only its activation share). A MoE model adds its routed
    tokens' surplus (moe_activations).
    """
    mem = sc.memory
    if not modelled_activations(sc):
        shape = np.broadcast(_f(tp), _f(pp), _f(dp), _f(micro_batch), _f(ep), _f(expert_tp),
                             _f(capacity_factor)).shape
        return np.broadcast_to(_f(mem.activation_reserve) * _f(micro_batch), shape)
    rc = effective_recompute(sc, recompute)
    stage_layers = np.ceil(sc.model.layers / _f(pp))
    act_mb = memory.activation_bytes_per_microbatch(sc.model, sc.task.seq_len, micro_batch, tp, stage_layers, rc,
                                                    mem.activation_bytes, mem.flash_attention)
    if sc.model.moe:
        act_mb = act_mb + moe_activations(sc, rc, tp, pp, micro_batch, ep, expert_tp, capacity_factor)
    return pipeline_inflight(schedule, pp, grad_accum(sc, dp, micro_batch)) * act_mb


def card_tokens(sc: Scenario, tp, micro_batch):
    """Tokens of one micro-batch on one card: micro-batch x s / tp (sequence parallelism under TP)."""
    return _f(micro_batch) * sc.task.seq_len / _f(tp)


def moe_activations(sc: Scenario, recompute: str, tp, pp, micro_batch, ep, expert_tp, capacity_factor):
    """Routed-token activations of one micro-batch on the stage with the most MoE blocks, beyond the dense
    inventory (moe.routed_activation_extra per block); with full recompute only the block being rebuilt
    holds them."""
    phi = load_factor(sc, ep, capacity_factor)
    one = moe.routed_activation_extra(sc.model, card_tokens(sc, tp, micro_batch), phi,
                                      moe.expert_tp_size(expert_tp, tp), sc.memory.activation_bytes)
    blocks = 1.0 if recompute == "full" else moe.moe_blocks_per_stage(sc.model, pp)
    return blocks * one


def temporary(sc: Scenario, zero, tp, pp, micro_batch, ep=1, expert_tp=0, capacity_factor=0.0):
    """Buffers live with the activations: FP32 logits, ZeRO-3 gathered units, pipeline send/recv, and a
    MoE block's all-to-all send buffer (moe.dispatch_buffer)."""
    mem = sc.memory
    if not modelled_activations(sc):
        return np.zeros(np.broadcast(_f(zero), _f(tp), _f(pp), _f(micro_batch), _f(ep), _f(expert_tp),
                                     _f(capacity_factor)).shape)
    a, s = sc.model, sc.task.seq_len
    rec = memory.recipe(sc.task.precision)
    if a.moe:
        unit = moe.largest_unit_per_card(a, tp, ep, expert_tp)
        gather = unit * ((1 + mem.prefetch) * rec.weights + rec.grads)  # as memory.zero3_gather_bytes
        send = moe.dispatch_buffer(a, card_tokens(sc, tp, micro_batch), load_factor(sc, ep, capacity_factor),
                                   mem.activation_bytes)
    else:
        gather, send = memory.zero3_gather_bytes(a, tp, rec, mem.prefetch), 0.0
    return (memory.logits_bytes(a, s, micro_batch, tp, mem.loss_chunks) + send
            + np.where(_f(zero) >= 3, gather, 0.0)
            + np.where(_f(pp) > 1, memory.pipeline_buffer_bytes(a, s, micro_batch, tp, mem.activation_bytes), 0.0))


def host_memory(sc: Scenario, acc: str, offload_cpu, zero, tp, pp, dp, ep=1, expert_tp=0):
    """Optimizer state offloaded to one host: cards_per_host x per-card optimizer shard (0 without offload)."""
    rec = memory.recipe(sc.task.precision)
    g = sc.system(acc).acc.cards_per_host
    per_card = _sharded(sc, tp, pp, dp, ep, expert_tp, lambda n, d: memory.host_optimizer_bytes(n, d, zero, rec))
    return np.where(offload_cpu, per_card * g, 0.0)


# ---------------------------------------------------------------------------------------------
# time terms (seconds per step per card)


def microbatch_times(sc: Scenario, acc: str, recompute, schedule, tp, pp, micro_batch, ep=1, capacity_factor=0.0):
    """(t_forward, t_backward_input, t_backward_weight) of one micro-batch on one stage's card.

    Work per token: forward 1/3 of the training FLOPs, backward 2/3 plus any recompute; with a
    split backward (zero-bubble, DualPipe) dW is the forward-sized half and dX takes the rest.
    Stages are balanced (the LM head counted in the average). A MoE model's expert work is stretched by
    the load factor phi (padding, the busiest rank's surplus: moe.extra_flops_per_token).
    """
    sysm = sc.system(acc)
    a, s = sc.model, sc.task.seq_len
    rc = effective_recompute(sc, recompute)
    fpt = flops_per_token(a, s)
    rfpt = memory.recompute_flops_per_token(a, s, rc)
    if a.moe:
        extra = moe.extra_flops_per_token(a, load_factor(sc, ep, capacity_factor))
        fpt = fpt + extra
        rfpt = rfpt + (extra / 3.0 if rc == "full" else 0.0)
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


def compute_inputs(sc: Scenario, acc: str, recompute, schedule, tp, pp, dp, micro_batch, nics, ep=1,
                   capacity_factor=0.0):
    """Everything the compute term needs: (t_f, t_dX, t_dW, t_transfer, grad_accum, cards)."""
    t_f, t_dx, t_dw = microbatch_times(sc, acc, recompute, schedule, tp, pp, micro_batch, ep, capacity_factor)
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


def compute(sc: Scenario, acc: str, recompute, schedule, tp, pp, dp, micro_batch, nics, ep=1, capacity_factor=0.0):
    """Per-step compute incl. pipeline bubbles, times the straggler factor.

    Returns (compute_with_stragglers, pure_compute, bubble, straggler) so that reports can split it.
    """
    return compute_from(sc, schedule, pp, compute_inputs(sc, acc, recompute, schedule, tp, pp, dp, micro_batch, nics,
                                                         ep, capacity_factor))


def dp_link(sc: Scenario, acc: str, zero, tp, pp, dp, micro_batch, nics, ep=1, expert_tp=0):
    """Data-parallel (ZeRO) link time per step: V / B on the real path (comm.zero_dp_volume, dp_ring_bandwidth).

    A MoE model's expert state is reduced over its expert-data-parallel group (edp members, one ring per
    card of an EP x expert-TP block): the two rings' times add up (they share the links)."""
    A = sc.system(acc).acc
    rec = memory.recipe(sc.task.precision)
    ga = grad_accum(sc, dp, micro_batch)
    bw = comm.dp_ring_bandwidth(A.intra_host_bw, A.nic_bw, nics, tp, dp, A.cards_per_host)
    if not sc.model.moe:
        return comm.zero_dp_volume(zero, memory.stage_params(sc.model, tp, pp), dp, ga, rec.weights, rec.grads) / bw
    etp = moe.expert_tp_size(expert_tp, tp)
    edp = moe.expert_dp_size(tp, dp, ep, expert_tp)
    bw_e = comm.dp_ring_bandwidth(A.intra_host_bw, A.nic_bw, nics, np.minimum(_f(ep) * etp, A.cards_per_host), edp,
                                  A.cards_per_host)

    def t(d, xl, xb, n):
        experts = xl / (_f(ep) * etp) + xb / _f(ep)
        return (comm.zero_dp_volume(zero, d, dp, ga, rec.weights, rec.grads) / bw
                + comm.zero_dp_volume(zero, experts, edp, ga, rec.weights, rec.grads) / bw_e)

    return moe.heaviest_stage(sc.model, tp, pp, t)


def exposed_dp(sc: Scenario, acc: str, zero, recompute, tp, pp, dp, micro_batch, nics, ep=1, expert_tp=0,
               capacity_factor=0.0):
    """Exposed data-parallel communication (comm.exposed_time).

    Windows: one per micro-batch for ZeRO-2/3 (their collectives run every micro-batch), one per
    step for ZeRO-0/1; each window's compute is one micro-batch's forward + backward.
    """
    A = sc.system(acc).acc
    rec = memory.recipe(sc.task.precision)
    bw = comm.dp_ring_bandwidth(A.intra_host_bw, A.nic_bw, nics, tp, dp, A.cards_per_host)
    link = dp_link(sc, acc, zero, tp, pp, dp, micro_batch, nics, ep, expert_tp)
    unhidden = comm.zero_dp_unhidden_bytes(zero, memory.embedding_shard_params(sc.model, tp), dp, rec.weights,
                                           rec.grads) / bw
    t_f, t_dx, t_dw = microbatch_times(sc, acc, recompute, "1f1b", tp, pp, micro_batch, ep, capacity_factor)
    windows = np.where(_f(zero) >= 2, grad_accum(sc, dp, micro_batch), 1.0)
    return comm.exposed_time(unhidden, link / windows, t_f + t_dx + t_dw, windows, sc.overlap)


def tp_comm(sc: Scenario, acc: str, recompute, tp, pp, dp, micro_batch):
    """Tensor-parallel communication, all on the critical path: V_tp / intra-host bandwidth."""
    A = sc.system(acc).acc
    rc = effective_recompute(sc, recompute)
    v = comm.tp_volume(_f(micro_batch) * sc.task.seq_len, sc.model.hidden, tp, np.ceil(sc.model.layers / _f(pp)),
                       grad_accum(sc, dp, micro_batch), sc.memory.activation_bytes, rc == "full")
    return v / A.intra_host_bw


def offload_wait(sc: Scenario, acc: str, offload_cpu, zero, recompute, tp, pp, dp, micro_batch, ep=1, expert_tp=0,
                 capacity_factor=0.0):
    """CPU-offload time per step: gradient download beyond the last backward (T_wait = max(0, V/B - W)),
    the CPU Adam pass at the host's memory bandwidth shared by its cards, and the BF16 upload."""
    A = sc.system(acc).acc
    rec = memory.recipe(sc.task.precision)
    shard = _sharded(sc, tp, pp, dp, ep, expert_tp, lambda n, d: n / np.where(_f(zero) >= 1, _f(d), 1.0))
    t_f, t_dx, t_dw = microbatch_times(sc, acc, recompute, "1f1b", tp, pp, micro_batch, ep, capacity_factor)
    cpu_bw = A.host_memory_bw / A.cards_per_host if A.host_memory_bw > 0 else np.inf
    down = comm.offload_wait(2.0 * shard, A.host_link_bw, 2.0 / 3.0 * (t_f + t_dx + t_dw))
    t = down + shard * CPU_ADAM_BYTES_PER_PARAM / cpu_bw + rec.weights * shard / A.host_link_bw
    return np.where(offload_cpu, t, 0.0)


def ep_link(sc: Scenario, acc: str, recompute, tp, pp, micro_batch, nics, ep, expert_tp, capacity_factor):
    """All-to-all time of one micro-batch on the stage with the most MoE blocks (moe.a2a_per_microbatch):
    dispatch and combine of one card's tokens on the EP group's links (NVLink inside a host, the host's
    NICs across hosts), stretched by the load factor. 0 for a dense model or EP = 1."""
    a = sc.model
    if not a.moe:
        return 0.0 * _f(tp) * _f(pp) * _f(micro_batch) * _f(nics) * _f(ep) * _f(expert_tp) * _f(capacity_factor)
    A = sc.system(acc).acc
    o = sc.moe
    rc = effective_recompute(sc, recompute)
    hosts = moe.ep_hosts(ep, moe.expert_tp_size(expert_tp, tp), A.cards_per_host)
    intra, inter = moe.a2a_rows_per_token(a.top_k, ep, hosts, o.dispatcher, o.node_limit)
    one = moe.a2a_time(card_tokens(sc, tp, micro_batch), a.hidden, sc.memory.activation_bytes, intra, inter,
                       load_factor(sc, ep, capacity_factor), A.intra_host_bw, A.nic_bw, nics, A.cards_per_host, A.p2p)
    return moe.a2a_per_microbatch(one, moe.moe_blocks_per_stage(a, pp), rc == "full")


def ep_comm(sc: Scenario, acc: str, recompute, schedule, tp, pp, dp, micro_batch, nics, ep=1, expert_tp=0,
            capacity_factor=0.0):
    """Exposed all-to-all per step (moe.a2a_exposed): every micro-batch's exchanges, or with overlap
    (``[moe] a2a_overlap``: auto = DualPipe schedules) only what exceeds one micro-batch's compute."""
    per_mb = ep_link(sc, acc, recompute, tp, pp, micro_batch, nics, ep, expert_tp, capacity_factor)
    if not sc.model.moe:
        return per_mb * _f(dp)  # zeros of the right shape
    t_f, t_dx, t_dw = microbatch_times(sc, acc, recompute, schedule, tp, pp, micro_batch, ep, capacity_factor)
    return moe.a2a_exposed(per_mb, t_f + t_dx + t_dw, grad_accum(sc, dp, micro_batch),
                           moe.a2a_overlapped(sc.moe.a2a_overlap, schedule))


def capacity_drops(sc: Scenario, tp, micro_batch, capacity_factor):
    """Share of dispatches a capacity factor drops for one card's micro-batch (moe.routing_drops)."""
    a, o = sc.model, sc.moe
    if not a.moe:
        return 0.0 * _f(tp) * _f(micro_batch) * _f(capacity_factor)
    return moe.routing_drops(card_tokens(sc, tp, micro_batch), a.top_k, a.experts, capacity_factor, o.imbalance,
                             o.hot)[0]


def ep_group_ok(sc: Scenario, acc: str, tp, dp, ep, expert_tp):
    """1 where EP x expert-TP fits the tp x dp group (moe.ep_group_ok)."""
    return moe.ep_group_ok(sc.model, tp, dp, ep, expert_tp, sc.system(acc).acc.cards_per_host)


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
