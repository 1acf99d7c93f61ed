"""The plan model as a sum of terms, each a function of exactly the decision variables it uses.

Every term broadcasts over numpy arrays of its variables. The evaluator adds them up; the solvers
tabulate each one over the joint domain of its own variables (a far smaller table than the whole
design space) and glue the tables with sums, products and maxima. A term takes the scenario and then,
keyword-only, the variables it depends on, named as the solvers name them (the fields of
:class:`tpopt.models.layout.Layout`; a table's variables are read from the signature,
:func:`tpopt.models.layout.term_variables`):

    acc (scalar per call)  tp  cp  pp  dp  mb (micro-batch)  zero  offload ("none" / "cpu")  recompute
    schedule  nics  sp (sequence parallelism; None: the scenario's)  ep  etp  cap (MoE; models/moe.py)

with cards = tp cp pp dp and grad_accum = batch / (dp mb). Categorical variables (acc, offload,
recompute, schedule, sp) are scalars; the numeric ones may be arrays.

Context parallelism (cp, models/context.py) splits every sequence over cp cards: per-token work and
memory of a card divide by cp (:func:`cp_shape`), ZeRO shards and gradient reductions span the
dp x cp ranks, and the attention exchange (ring or all-to-all) is added to each layer's time
(:func:`cp_exchange`).

    memory  = max over stage classes k of
              states_k + param_copies_k + activations_k + temporary_k          <= usable
    busy    = compute (incl. bubbles, stragglers) + exposed_dp + tp_comm + offload_wait + ep_comm
    step    = busy + input_wait
    finish  = reserved + iterations x step x (1 + overhead)                   <= deadline
    cost    = rate x finish

Modules, by the kind of family a term serves: :mod:`.shapes` (what the others share: stage classes, batch
and context-parallel shapes, ZeRO ranks, layer splits), :mod:`.memory` (the memory family),
:mod:`.layer_times` (per-layer and per-micro-batch times of the per-operation model), :mod:`.stage_compute`
(the step's compute over the pipeline, with its bounds), :mod:`.communication` (tensor-, context-, data- and
expert-parallel communication, offload), :mod:`.deadline` (checkpoints, failures, input supply, price,
the finish-time distribution). This module re-exports every public name, and the private ones that other
modules and the tests reach, so ``from tpopt.models import terms as T; T.name`` keeps working; module state
(memos, caches, limits such as ``stage_compute.GRID_STAGE_COUNTS``) lives in the module that reads it, so a
test that replaces it patches that module.
"""

from __future__ import annotations

from tpopt.models.layout import Layout  # the record whose fields the terms' keywords name
from tpopt.models.terms.communication import (
    _DP_MEMO,
    CPU_ADAM_BYTES_PER_PARAM,
    capacity_drops,
    comm_sm_share,
    cp_exposed,
    cp_link,
    dp_bandwidth,
    dp_latency,
    dp_link,
    dp_tail,
    ep_comm,
    ep_group_ok,
    ep_link,
    exposed_dp,
    node_limit,
    offload_wait,
    replica_link,
    replica_tail,
    serial_gathers,
    tp_comm,
    tp_exposed,
)
from tpopt.models.terms.deadline import (
    _CHANCE_MEMO,
    card_base,
    catalog_sigma,
    chance_fill,
    chance_finish,
    chance_step_max,
    checkpoint_write_time,
    evidence_for,
    evidence_of,
    experts_per_card,
    exposure,
    failure_rate,
    finish_law,
    finish_quantile,
    finish_time,
    input_supply,
    law_risk,
    optimal_save_interval,
    overhead,
    overhead_parts,
    own_calibration,
    plan_facts,
    preemption_overhead,
    preemption_rate,
    preemption_terms,
    rate_per_second,
    reacquire_overhead,
    save_pause_lag,
    step_sigma,
)
from tpopt.models.terms.layer_times import (
    _OP_MEMO,
    OP_MEMO_SIZE,
    OpTimes,
    _busiest,
    _group_times,
    cp_exchange,
    layout,
    microbatch_times,
    op_times,
    pipeline_transfer,
    rates,
)
from tpopt.models.terms.memory import (
    StageMemory,
    Weigh,
    _layer_sets,
    _peak_layer_set_bound,
    _peak_layer_set_bounds,
    _peak_layer_sets,
    _routed_per_block,
    _stored_kw,
    activations,
    card_params,
    card_tokens,
    heaviest_stage_params,
    host_memory,
    memory_by_stage,
    moe_activations,
    param_copies,
    pipeline_inflight,
    recompute_workspace,
    states,
    stored_activations,
    temporary,
)
from tpopt.models.terms.shapes import (
    PEAK,
    STAGE_CLASSES,
    _split_cached,
    batch_remainder,
    chunk_layers,
    class_stages,
    cp_attention_scale,
    cp_imbalance,
    cp_shape,
    dense_split,
    effective_recompute,
    grad_accum,
    iteration_count,
    load_factor,
    modelled_activations,
    per_op_model,
    schedule_parts,
    shard_ranks,
    stage_classes,
    stage_split,
    with_sequence_parallel,
    zero_ranks,
)
from tpopt.models.terms.stage_compute import (
    _COMPLETION_CACHE,
    BOUND_SLICE,
    GRID_STAGE_COUNTS,
    DenseGroups,
    Groups,
    _distinct_columns,
    _duration_sets,
    compute,
    compute_bounds,
    compute_bounds_of,
    compute_from,
    compute_inputs,
    compute_key,
    compute_total,
    dense_inputs,
    inputs_schedule_key,
    pipeline_compute,
    schedule_shape_ok,
    stack_overhead,
    straggler_factor,
)

__all__ = [
    "BOUND_SLICE", "CPU_ADAM_BYTES_PER_PARAM", "DenseGroups", "GRID_STAGE_COUNTS", "Groups", "Layout",
    "OP_MEMO_SIZE", "OpTimes", "PEAK", "STAGE_CLASSES", "StageMemory", "Weigh", "_CHANCE_MEMO", "_COMPLETION_CACHE",
    "_DP_MEMO", "_OP_MEMO", "_busiest", "_distinct_columns", "_duration_sets", "_group_times", "_layer_sets",
    "_peak_layer_set_bound", "_peak_layer_set_bounds", "_peak_layer_sets", "_routed_per_block", "_split_cached",
    "_stored_kw", "activations", "batch_remainder", "capacity_drops", "card_params", "card_tokens", "chance_fill",
    "chance_finish", "chance_step_max", "checkpoint_write_time", "chunk_layers", "class_stages", "comm_sm_share",
    "compute",
    "compute_bounds", "compute_from", "compute_inputs", "compute_key", "compute_total", "cp_attention_scale",
    "cp_exchange", "cp_exposed", "cp_imbalance", "cp_link", "cp_shape", "dense_inputs",
    "dense_split", "dp_bandwidth", "dp_latency",
    "dp_link", "dp_tail",
    "effective_recompute", "ep_comm", "ep_group_ok", "ep_link", "exposed_dp", "exposure", "failure_rate",
    "finish_law", "finish_quantile", "finish_time", "grad_accum", "heaviest_stage_params", "host_memory",
    "input_supply", "law_risk",
    "inputs_schedule_key", "iteration_count", "layout", "load_factor", "memory_by_stage", "microbatch_times",
    "modelled_activations", "moe_activations", "node_limit", "offload_wait", "op_times", "optimal_save_interval",
    "overhead", "overhead_parts", "param_copies", "per_op_model", "pipeline_compute", "pipeline_inflight",
    "pipeline_transfer", "preemption_overhead", "preemption_rate", "preemption_terms",
    "rate_per_second", "rates", "reacquire_overhead", "recompute_workspace",
    "replica_link", "replica_tail", "save_pause_lag", "schedule_parts", "schedule_shape_ok", "serial_gathers",
    "shard_ranks",
    "stack_overhead", "stage_classes", "stage_split", "states", "step_sigma", "stored_activations",
    "straggler_factor", "temporary", "tp_comm", "tp_exposed", "with_sequence_parallel", "zero_ranks",
]
__all__ += ["compute_bounds_of"]
__all__ += ["card_base", "catalog_sigma", "evidence_for", "evidence_of", "experts_per_card", "own_calibration",
            "plan_facts"]
