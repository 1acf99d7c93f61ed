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
"""

from __future__ import annotations

import math
import operator
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import replace
from functools import lru_cache
from typing import Any, Literal, NamedTuple, TypeAlias, cast, overload

import numpy as np
from numpy.typing import ArrayLike, NDArray

from tpopt.models import comm, context, finish, memory, moe, network, ops, pipeline, reliability, steptime
from tpopt.models.arch import ModelArch, attention_flops_per_token, flops_per_token, is_moe_layer, param_count
from tpopt.models.batch import iterations_with_ramp
from tpopt.models.compute import iterations
from tpopt.models.layout import Layout  # noqa: F401  (re-exported: the record whose fields the terms' keywords name)
from tpopt.models.numeric import ArrayMemo, FloatArray, Floats
from tpopt.models.plan import Scenario, split_schedule
from tpopt.models.roofline import PerfParams
from tpopt.models.units import HOUR

CPU_ADAM_BYTES_PER_PARAM = 36.0
"""Bytes a CPU Adam step touches per parameter: cast BF16->FP32 (read 2, write 4), read grad, master,
m, v (16), write master, m, v (12), write the BF16 copy (2)."""

Weigh: TypeAlias = Callable[[FloatArray, FloatArray, FloatArray, FloatArray], Floats]
"""What a stage weighs, from its (non-expert params per card, routed-expert linear params, routed-expert
biases, MoE blocks) (moe.heaviest_stage)."""

Groups: TypeAlias = Callable[[int], Sequence[float]]
"""Layers per pipeline stage for p stages (:func:`stage_split`)."""

DenseGroups: TypeAlias = Callable[[int], Sequence[int] | None]
"""Dense-MLP blocks per pipeline stage for p stages, None without them (:func:`dense_split`)."""

OpTimes: TypeAlias = tuple[steptime.PhaseTimes, steptime.PhaseTimes, steptime.PhaseTimes]
"""(layer, first-stage extras, last-stage extras) of one micro-batch (:func:`op_times`)."""


PEAK = "peak"
"""The stage selector of a memory term that takes every pipeline stage: the heaviest stage's value."""
STAGE_CLASSES = ("first", "middle", "last")
"""The pipeline-stage classes a rank's memory peak is bounded on in the per-operation model
(:func:`class_stages`): the first stage holds the embedding and the most in-flight micro-batches, the
last the LM head and the FP32 logits, the middle stages neither."""


def class_stages(stage: str, p: int) -> range:
    """The stages (indices among ``p``) a memory term's ``stage`` selector takes the heaviest of:
    ``"first"`` stage 0, ``"last"`` stage p - 1, ``"middle"`` stages 1 .. p - 2 (with no stage of its
    own, p <= 2, the first stage again: a repeated class bounds nothing new), :data:`PEAK` every stage.
    One stage (p = 1) is every class."""
    if stage == PEAK or p <= 1:
        return range(p if stage == PEAK else 1)
    if stage == "first":
        return range(1)
    if stage == "last":
        return range(p - 1, p)
    if stage == "middle":
        return range(1, p - 1) if p > 2 else range(1)
    raise ValueError(f"unknown stage class {stage!r}")


def stage_classes(sc: Scenario) -> tuple[str, ...]:
    """The stage classes the memory family sums its terms on: :data:`STAGE_CLASSES` in the
    per-operation model (uneven stages: the embedding on the first, the head and logits on the last,
    in-flight micro-batches falling from first to last), the single class :data:`PEAK` in the flat
    model (the chapter's accounting: balanced stages, each term at the heaviest stage)."""
    return STAGE_CLASSES if per_op_model(sc) else (PEAK,)


def _f(x: ArrayLike) -> FloatArray:
    return np.asarray(x, dtype=float)


def modelled_activations(sc: Scenario) -> bool:
    """True when activations are modelled per recompute group (no fixed reserve in the scenario)."""
    return sc.memory.activation_reserve is None


def effective_recompute(sc: Scenario, recompute: str) -> str:
    """A fixed activation reserve already is the team's measured budget: recompute then changes nothing."""
    return memory.parse_recompute(recompute) if modelled_activations(sc) else "none"


# (id(scenario), on) -> (scenario, the scenario with sequence parallelism on / off)
_SP_SCENARIOS: dict[tuple[int, bool], tuple[Scenario, Scenario]] = {}


def with_sequence_parallel(sc: Scenario, sp: bool | None) -> Scenario:
    """The scenario with sequence parallelism under TP on or off (``sp``; None: as it is). The same object
    for the scenario's own value, and the same derived object on every call, so that the memos keyed on
    the scenario (:func:`op_times`) keep hitting across a table's rows."""
    if sp is None or bool(sp) == sc.memory.sequence_parallel:
        return sc
    key = (id(sc), bool(sp))
    hit = _SP_SCENARIOS.get(key)
    if hit is not None and hit[0] is sc:  # the scenario itself is kept, so its id is not reused while cached
        return hit[1]
    if len(_SP_SCENARIOS) >= 64:
        _SP_SCENARIOS.clear()
    out = replace(sc, memory=replace(sc.memory, sequence_parallel=bool(sp)))
    _SP_SCENARIOS[key] = (sc, out)
    return out


def grad_accum(sc: Scenario, dp: ArrayLike, micro_batch: ArrayLike) -> FloatArray:
    """Micro-batches per step per card: batch / (dp x micro_batch) (fractional when it does not divide)."""
    return sc.task.global_batch / (_f(dp) * _f(micro_batch))


def iteration_count(sc: Scenario) -> float:
    """Optimizer steps: ceil(D / b), plus the steps of a batch ramp-up when the task has one
    (batch.iterations_with_ramp; each ramp step is budgeted as a full-batch step, an upper bound)."""
    t = sc.task
    if t.ramp is None:
        return float(iterations(t.tokens, t.tokens_per_step))
    return iterations_with_ramp(t.tokens, t.global_batch, t.seq_len, t.ramp)


def batch_remainder(sc: Scenario, *, dp: ArrayLike, mb: ArrayLike) -> NDArray[Any]:
    """Sequences left over when the batch is split into dp x mb: B mod (dp x mb), and with a
    ramp-up also its start and increment mod (dp x mb) (Megatron-LM requires every ramp batch to split
    into whole micro-batches on every data-parallel rank)."""
    t = sc.task
    unit = np.asarray(dp) * np.asarray(mb)
    rem: NDArray[Any] = t.global_batch % unit
    if t.ramp is not None and t.ramp[0] < t.global_batch:
        rem = np.maximum(rem, np.maximum(int(t.ramp[0]) % unit, int(t.ramp[1]) % unit))
    return rem


def cp_shape(sc: Scenario, micro_batch: ArrayLike, cp: ArrayLike) -> tuple[FloatArray, FloatArray]:
    """(sequence length, micro-batch) one card's activations see under context parallelism, the same
    b s / cp tokens either way: ring, (s / cp, b): a piece of every sequence, attention blockwise
    (one (s / cp)^2 score block at a time without flash attention); all-to-all, (s, b / cp): after the
    exchange a card holds heads / cp over whole sequences (b / cp x heads x s^2 scores without flash)."""
    c = _f(cp)
    if sc.cp_method == "ring":
        return sc.task.seq_len / c, _f(micro_batch) * (0.0 * c + 1.0)
    return sc.task.seq_len * (0.0 * c + 1.0), _f(micro_batch) / c


def cp_imbalance(sc: Scenario, cp: ArrayLike) -> FloatArray:
    """The busiest card's causal attention work over the balanced share: the sequence split's
    (context.imbalance; 1 for the zig-zag split) with ring attention; 1 with all-to-all, where every
    card attends whole sequences for its heads."""
    if sc.cp_method == "all-to-all":
        return 0.0 * _f(cp) + 1.0
    ratio: FloatArray = context.imbalance(cp, sc.cp_split)
    return ratio


def zero_ranks(dp: ArrayLike, cp: ArrayLike) -> FloatArray:
    """Ranks a ZeRO shard and a gradient reduction span: dp x cp (context-parallel ranks hold the same
    weights and see other tokens, as Megatron-Core's data-parallel-with-context group)."""
    return _f(dp) * _f(cp)


def shard_ranks(sc: Scenario, dp: ArrayLike, cp: ArrayLike, zero: ArrayLike) -> FloatArray:
    """Ranks one ZeRO shard spans: dp x cp, or under hybrid sharding (``[memory] zero_group`` = G > 0, ZeRO
    >= 1) min(G, dp x cp): FSDP / the distributed optimizer inside groups of G consecutive data-parallel
    ranks, replicas of the group across them (torchtitan's data_parallel_shard_degree, MaxText's
    ici_fsdp_parallelism, Megatron's distributed-optimizer instances)."""
    full = zero_ranks(dp, cp)
    g = sc.memory.zero_group
    if g <= 0:
        return full
    out: FloatArray = np.where(_f(zero) >= 1, np.minimum(full, float(g)), full)
    return out


def replica_link(sc: Scenario, *, acc: str, zero: ArrayLike, tp: ArrayLike, pp: ArrayLike, dp: ArrayLike,
                 cp: ArrayLike, nics: ArrayLike, n: ArrayLike) -> FloatArray:
    """Hybrid sharding: the per-step all-reduce of each card's gradient shard over the r = dp x cp / s
    replicas of its shard group (s ranks, :func:`shard_ranks`), once a step after the last micro-batch:
        t = 2 (r-1)/r x g N / s / B_r + calls x (t_call + ring latency),
    the ring's members tp x s ranks apart, so with s x tp >= a host every card of a host is in its own ring
    and they share the host's NICs: B_r = nics x B_nic / min(tp s, cards per host) (network.route), x the
    collective efficiency. MaxText's Llama 2 7B on A3 High (8-way FSDP per host, 16 hosts, FP32 gradients,
    4 x 200 Gb/s NICs: 12.5 GB/s a card): 2 x 15/16 x 4 x 6.7e9 / 8 B / 12.5 GB/s = 0.5 s a step."""
    full = zero_ranks(dp, cp)
    s = shard_ranks(sc, dp, cp, zero)
    r = full / s
    if not np.any(r > 1):
        return 0.0 * r
    rec = sc.state_recipe()
    A = sc.system(acc).acc
    stride = _f(tp) * s
    bw: Floats = network.route(A.fabric, r, stride, np.minimum(stride, A.cards_per_host), nics).bandwidth
    lat: Floats = 0.0
    if per_op_model(sc):
        p = _perf(sc, acc)
        bw = bw * p.dp_efficiency
        calls = comm.dp_collective_calls(0, _f(n) / s, np.ceil(sc.model.layers / _f(pp)), 1, sc.stack.dp_bucket,
                                         rec.weights, rec.grads)
        lat = calls * (p.collective_latency + network.ring_latency(A.fabric, r, stride, p.up_step_latency,
                                                                   p.out_step_latency))
    t = comm.allreduce_bytes(rec.grads * _f(n) / s, r) / bw + lat
    out: FloatArray = np.where(r > 1, t, 0.0)
    return out


# ---------------------------------------------------------------------------------------------
# step-time model and pipeline shape


def per_op_model(sc: Scenario) -> bool:
    """True when the per-operation step-time model applies (no flat ``hardware.efficiency`` stated).

    The mode is scenario-wide: every candidate accelerator uses the same model."""
    return any(s.per_op for s in sc.systems.values())


def schedule_parts(schedule: str) -> tuple[str, int]:
    """(base schedule, virtual stages) of a schedule value such as "interleaved:3"."""
    return split_schedule(str(schedule))


def stage_split(sc: Scenario, pp: int) -> Sequence[float]:
    """Layers per pipeline stage: the per-operation model splits whole layers (first / last stage
    counts from the plan, else steptime.stage_layers' automatic rule); the flat model balances
    fractional stages of L / pp layers (the chapter's accounting)."""
    p = int(pp)
    if not per_op_model(sc):
        return [sc.model.layers / p] * p
    first, last = sc.stage_layers
    return _split_cached(sc.model.layers, p, first if p > 1 else 0, last if p > 1 else 0)


@lru_cache(maxsize=4096)
def _split_cached(layers: int, p: int, first: int, last: int) -> list[int]:
    try:
        return steptime.stage_layers(layers, p, first, last)
    except ValueError:
        return []  # no valid split: layout.schedule_shape rules the plan out


def dense_split(sc: Scenario, pp: int) -> tuple[int, ...] | None:
    """Per-operation model of a MoE model with dense-MLP blocks (arch.is_moe_layer false: DeepSeek's
    leading ``dense_layers``, ``moe_step``, ``mlp_only_layers``): the dense blocks of each stage of
    :func:`stage_split`, the rest of the stage's blocks being MoE blocks. None otherwise (every block of
    the stage is timed alike)."""
    a = sc.model
    if not (a.moe and per_op_model(sc)):
        return None
    p = int(pp)
    first, last = sc.stage_layers
    return _dense_cached(a, p, first if p > 1 else 0, last if p > 1 else 0)


@lru_cache(maxsize=4096)
def _dense_cached(a: ModelArch, p: int, first: int, last: int) -> tuple[int, ...] | None:
    kinds = [is_moe_layer(a, i) for i in range(a.layers)]
    if all(kinds):
        return None
    split = _split_cached(a.layers, p, first, last) or [a.layers]
    out: list[int] = []
    start = 0
    for n in split:
        out.append(sum(1 for k in kinds[start:start + n] if not k))
        start += n
    return tuple(out)


def chunk_layers(split: Sequence[float], v: int) -> list[int] | None:
    """Layers of each interleaved chunk in path order (chunk c of stage s is entry c p + s), whole
    layers spread as evenly as each stage allows; None when a stage has fewer than v layers."""
    p = len(split)
    out = [0] * (v * p)
    for s, n in enumerate(split):
        if n < v or n != int(n):
            return None
        base, extra = divmod(int(n), v)
        for c in range(v):
            out[c * p + s] = base + (1 if c < extra else 0)
    return out


# ---------------------------------------------------------------------------------------------
# memory terms (bytes per card)


def load_factor(sc: Scenario, ep: ArrayLike, capacity_factor: ArrayLike) -> Floats:
    """Rows the busiest expert-parallel rank processes over a balanced router (moe.load_factor; 1 if dense)."""
    o = sc.moe
    phi: Floats = moe.load_factor(sc.model.experts, ep, capacity_factor, o.imbalance, o.hot)
    return phi


def _moe_stages(sc: Scenario, tp: ArrayLike, pp: ArrayLike, weigh: Weigh, stage: str = PEAK) -> FloatArray:
    """moe.heaviest_stage over the stages the step-time model runs: runs of ceil(L / pp) blocks (flat, as
    memory.stage_params) or the real layer split (per-operation, as memory.stage_param_counts), there the
    stages of the class ``stage`` only (:func:`class_stages`)."""
    split: Callable[[int], list[int]] | None = None
    pick: Callable[[int], Sequence[int]] | None = None
    if per_op_model(sc):
        first, last = sc.stage_layers

        def stage_layers(p: int) -> list[int]:
            return _split_cached(sc.model.layers, p, first if p > 1 else 0, last if p > 1 else 0)

        split = stage_layers
        if stage != PEAK:
            def picked(p: int) -> Sequence[int]:
                return class_stages(stage, p)

            pick = picked
    best: FloatArray = moe.heaviest_stage(sc.model, tp, pp, weigh, split, pick)
    return best


def card_params(sc: Scenario, tp: ArrayLike, pp: ArrayLike, ep: ArrayLike = 1, expert_tp: ArrayLike = 0,
                stage: str = PEAK) -> FloatArray:
    """Parameters on one card of the heaviest stage (of the class ``stage``; routed experts split by ep x
    expert-TP)."""
    if not sc.model.moe:
        return heaviest_stage_params(sc, tp, pp, stage)
    etp = moe.expert_tp_size(expert_tp, tp)
    return _moe_stages(sc, tp, pp, lambda d, xl, xb, n: d + xl / (_f(ep) * etp) + xb / _f(ep), stage)


def _sharded(sc: Scenario, fn: Callable[[FloatArray, FloatArray], FloatArray], *, tp: ArrayLike, pp: ArrayLike,
             ranks: FloatArray, ep: ArrayLike, etp: ArrayLike, stage: str = PEAK) -> FloatArray:
    """max over the stages (of the class ``stage``) of fn(non-expert params, ranks) + fn(expert params per
    card, edp): ZeRO shards the non-expert state over its ``ranks`` (dp x cp, :func:`zero_ranks`) and the
    expert state over the expert-data-parallel group edp = tp ranks / (ep etp)."""
    if not sc.model.moe:
        return fn(heaviest_stage_params(sc, tp, pp, stage), ranks)
    etp_size = moe.expert_tp_size(etp, tp)
    edp = moe.expert_dp_size(tp, ranks, ep, etp)
    return _moe_stages(sc, tp, pp, lambda d, xl, xb, n: fn(d, ranks) + fn(xl / (_f(ep) * etp_size) + xb / _f(ep), edp),
                       stage)


def states(sc: Scenario, *, zero: ArrayLike, offload: str, tp: ArrayLike, cp: ArrayLike = 1, pp: ArrayLike,
           dp: ArrayLike, ep: ArrayLike = 1, etp: ArrayLike = 0, stage: str = PEAK) -> FloatArray:
    """Persistent training state of the heaviest stage's card under ZeRO (memory.zero_state_bytes), sharded
    over the dp x cp ranks; for a MoE model the expert weights and optimizer state are split by ep x
    expert-TP and ZeRO shards them over the expert-data-parallel group. ``stage``: the heaviest of one
    stage class only (:func:`class_stages`; per-operation model)."""
    rec = sc.state_recipe()
    return _sharded(sc, lambda n, d: memory.zero_state_bytes(n, d, zero, rec, offload == "cpu"),
                    tp=tp, pp=pp, ranks=shard_ranks(sc, dp, cp, zero), ep=ep, etp=etp, stage=stage)


def heaviest_stage_params(sc: Scenario, tp: ArrayLike, pp: ArrayLike, stage: str = PEAK) -> FloatArray:
    """Parameters of the heaviest stage's card: memory.stage_params (ceil(L/pp) blocks) in the flat
    model; the largest of memory.stage_param_counts over the real layer split in the per-operation one
    (over the stages of the class ``stage``: :func:`class_stages`)."""
    if not per_op_model(sc):
        return memory.stage_params(sc.model, tp, pp)
    first, last = sc.stage_layers
    return _by_unique(lambda p, t: _heaviest_cached(sc.model, int(p), first, last, t, stage), pp, tp)


@lru_cache(maxsize=4096)
def _heaviest_cached(a: ModelArch, p: int, first: int, last: int, tp: float, stage: str = PEAK) -> float:
    split = _split_cached(a.layers, p, first if p > 1 else 0, last if p > 1 else 0) or [a.layers]
    counts = memory.stage_param_counts(a, tp, split)
    return float(max(counts[g] for g in class_stages(stage, len(split))))


def _by_unique(fn: Callable[..., float], *arrays: ArrayLike) -> FloatArray:
    """``fn(*scalars)`` once per distinct combination of the broadcast arrays' values, placed back."""
    arrs = np.broadcast_arrays(*(np.asarray(x) for x in arrays))
    shape = arrs[0].shape
    # each array's distinct values, then one mixed-radix code per combination: a 1-D unique of integers
    # (np.unique over columns compares rows element by element, ~100x slower on large tables); the codes
    # sort as the combinations do, so ``fn`` sees them in the same lexicographic order
    levels, codes = zip(*(np.unique(a.reshape(-1).astype(float), return_inverse=True) for a in arrs), strict=True)
    if math.prod(len(lv) for lv in levels) >= 2**62:  # the codes would overflow int64: compare columns
        stacked = np.stack([a.reshape(-1).astype(float) for a in arrs])
        both, back = np.unique(stacked, axis=1, return_inverse=True)
        return np.array([fn(*col) for col in both.T], dtype=float)[np.reshape(back, -1)].reshape(shape)
    code = np.zeros(codes[0].size, dtype=np.int64)
    for lv, c in zip(levels, codes, strict=True):
        code = code * len(lv) + np.reshape(c, -1)
    uniq, inverse = np.unique(code, return_inverse=True)
    cols = []
    for lv in reversed(levels):  # the code's digits back to each array's value
        uniq, digit = np.divmod(uniq, len(lv))
        cols.append(lv[digit])
    vals = np.array([fn(*col) for col in zip(*reversed(cols), strict=True)], dtype=float)
    return vals[np.reshape(inverse, -1)].reshape(shape)


def param_copies(sc: Scenario, *, schedule: str, tp: ArrayLike, pp: ArrayLike, ep: ArrayLike = 1,
                 etp: ArrayLike = 0, stage: str = PEAK) -> FloatArray:
    """Extra weight copies a pipeline schedule keeps (DualPipe: one more copy of the stage weights; of the
    heaviest stage of the class ``stage``)."""
    rec = sc.state_recipe()
    extra = 1.0 if str(schedule).startswith("dualpipe") else 0.0
    if not extra:
        return np.zeros(np.broadcast(_f(tp), _f(pp), _f(ep), _f(etp)).shape)
    return np.where(_f(pp) > 1, extra * rec.weights * card_params(sc, tp, pp, ep, etp, stage), 0.0)


def _stored_kw(sc: Scenario) -> dict[str, Any]:
    mem = sc.memory
    return dict(act_bytes=mem.activation_bytes, flash_attention=mem.flash_attention, dropout=mem.dropout,
                sequence_parallel=mem.sequence_parallel)


def activations(sc: Scenario, *, schedule: str, recompute: str, sp: bool | None = None, tp: ArrayLike,
                cp: ArrayLike = 1, pp: ArrayLike, dp: ArrayLike, mb: ArrayLike, ep: ArrayLike = 1, etp: ArrayLike = 0,
                cap: ArrayLike = 0.0, peak: str = "exact", stage: str = PEAK) -> FloatArray:
    """Activations at the peak: in-flight micro-batches x one micro-batch's stored stage activations,
    plus the recompute workspace once (it is reused block after block and micro-batch after micro-batch).

    The flat model uses the peak in-flight count of the busiest stage times a stage of ceil(L/pp)
    blocks; the per-operation model takes the maximum over stages of (in-flight on stage g) x
    (stored activations of its layers). With a fixed reserve (chapter accounting: activations,
    gathered module parameters and workspace for micro-batches of one sequence, 10.2.4) the term is
    the reserve times the micro-batch size (conservative: the whole reserve scales, not only its
    activation share; under context parallelism the reserve is kept whole, conservative too). A MoE model
    adds its routed tokens (:func:`moe_activations`); with dense-MLP blocks among its MoE blocks the
    per-operation model takes the busiest stage of both together (:func:`_weighted_layer_sets`).
    ``peak="lo"`` / ``"hi"`` bound the in-flight counts in closed form instead (solver pruning; exact where
    :func:`tpopt.models.pipeline.peak_inflight_stage_bounds` is). ``stage``: the busiest stage of one
    stage class only (:func:`class_stages`; per-operation model, where the workspace is every stage's).
    """
    sc = with_sequence_parallel(sc, sp)
    mem = sc.memory
    if not modelled_activations(sc):
        shape = np.broadcast(_f(tp), _f(pp), _f(dp), _f(mb), _f(ep), _f(etp),
                             _f(cap), _f(cp)).shape
        reserve = cast(float, mem.activation_reserve)  # not None: activations are not modelled
        return np.broadcast_to(_f(reserve) * _f(mb), shape)
    workspace = recompute_workspace(sc, recompute=recompute, tp=tp, cp=cp, mb=mb)
    if dense_split(sc, 1) is not None and effective_recompute(sc, recompute) != "full":
        # stages mix dense and MoE blocks: the busiest stage of (dense inventory of every block + routed
        # tokens of its MoE blocks), max_g k_g (n_g A + m_g R), not the two maxima taken apart
        per_layer = _stored_per_layer(sc, recompute=recompute, tp=tp, cp=cp, mb=mb)
        one = _routed_per_block(sc, tp=tp, cp=cp, mb=mb, ep=ep, etp=etp, cap=cap)
        ga = grad_accum(sc, dp, mb)
        return _weighted_layer_sets(sc, schedule, pp, ga, peak, per_layer, one, stage) + workspace
    out = stored_activations(sc, schedule=schedule, recompute=recompute, tp=tp, cp=cp, pp=pp, dp=dp, mb=mb,
                             peak=peak, stage=stage) + workspace
    if sc.model.moe:
        out = out + moe_activations(sc, schedule=schedule, recompute=recompute, tp=tp, cp=cp, pp=pp, dp=dp, mb=mb,
                                    ep=ep, etp=etp, cap=cap, peak=peak, stage=stage)
    return out


def card_tokens(sc: Scenario, tp: ArrayLike, micro_batch: ArrayLike, cp: ArrayLike = 1) -> FloatArray:
    """Tokens of one micro-batch on one card: micro-batch x s / (tp cp) (sequence parallelism under TP,
    context parallelism)."""
    return _f(micro_batch) * sc.task.seq_len / (_f(tp) * _f(cp))


def moe_activations(sc: Scenario, *, schedule: str, recompute: str, tp: ArrayLike, cp: ArrayLike = 1, pp: ArrayLike,
                    dp: ArrayLike, mb: ArrayLike, ep: ArrayLike, etp: ArrayLike, cap: ArrayLike,
                    peak: str = "exact", stage: str = PEAK) -> FloatArray:
    """Routed-token activations beyond the dense inventory (moe.routed_activation_extra per MoE block and
    micro-batch), for every MoE block whose activations are in flight at the busiest stage's peak: the
    flat model's in-flight micro-batches x MoE blocks of the stage; the per-operation model's in-flight
    layer sets of MoE blocks (a stage's dense-MLP blocks hold none: :func:`dense_split`). With full
    recompute only the block being rebuilt holds them (the workspace, once)."""
    rc = effective_recompute(sc, recompute)
    one = _routed_per_block(sc, tp=tp, cp=cp, mb=mb, ep=ep, etp=etp, cap=cap)
    if rc == "full":
        return one * np.ones(np.broadcast(_f(pp), _f(dp)).shape)
    ga = grad_accum(sc, dp, mb)
    if not per_op_model(sc):
        return pipeline_inflight(schedule, pp, ga, peak=peak) * _moe_stages(sc, 1.0, pp, lambda d, xl, xb, n: n) * one
    if dense_split(sc, 1) is not None:  # only the MoE blocks of each stage hold routed tokens
        return _weighted_layer_sets(sc, schedule, pp, ga, peak, 0.0, one, stage)
    return _layer_sets(sc, schedule, pp, ga, peak, stage) * one


def _routed_per_block(sc: Scenario, *, tp: ArrayLike, cp: ArrayLike = 1, mb: ArrayLike, ep: ArrayLike, etp: ArrayLike,
                      cap: ArrayLike) -> FloatArray:
    """Routed-token activations of one MoE block and micro-batch (moe.routed_activation_extra); under an FP8
    recipe the expert GEMM's saved input rows are its FP8 copy (1 byte, + one 8-bit scale per 32 elements
    for MXFP8); a stack that applies the router probabilities in the experts' activation keeps no expert
    output rows for the combine (StackProfile.moe_probs_in_activation)."""
    phi = load_factor(sc, ep, cap)
    matrix = memory.recipe(sc.task.precision).matrix
    b_in = {"fp8": 1.0, "mxfp8": 1.0 + 1.0 / 32.0}.get(matrix)
    extra: FloatArray = moe.routed_activation_extra(sc.model, card_tokens(sc, tp, mb, cp), phi,
                                                    moe.expert_tp_size(etp, tp), sc.memory.activation_bytes, b_in,
                                                    not sc.stack.moe_probs_in_activation)
    return extra


def _stored_per_layer(sc: Scenario, *, recompute: str, tp: ArrayLike, cp: ArrayLike = 1, mb: ArrayLike) -> Floats:
    """One block's stored activations per micro-batch in the per-operation model (memory module)."""
    s, b = cp_shape(sc, mb, cp)
    return memory.activation_bytes_per_microbatch(sc.model, s, b, tp, 1, effective_recompute(sc, recompute),
                                                  **_stored_kw(sc))


def stored_activations(sc: Scenario, *, schedule: str, recompute: str, tp: ArrayLike, cp: ArrayLike = 1, pp: ArrayLike,
                       dp: ArrayLike, mb: ArrayLike, peak: str = "exact", stage: str = PEAK) -> FloatArray:
    """Activations kept until their backward, at the busiest stage's peak (of the class ``stage`` in the
    per-operation model; see :func:`activations`); a card keeps its b s / cp tokens under context
    parallelism (:func:`cp_shape`)."""
    rc = effective_recompute(sc, recompute)
    a, kw = sc.model, _stored_kw(sc)
    s, b = cp_shape(sc, mb, cp)
    ga = grad_accum(sc, dp, mb)
    if not per_op_model(sc):
        stage_layers = np.ceil(a.layers / _f(pp))
        per_mb = memory.activation_bytes_per_microbatch(a, s, b, tp, stage_layers, rc, **kw)
        return pipeline_inflight(schedule, pp, ga, peak=peak) * per_mb
    per_layer = memory.activation_bytes_per_microbatch(a, s, b, tp, 1, rc, **kw)
    return _layer_sets(sc, schedule, pp, ga, peak, stage) * per_layer


def _weighted_layer_sets(sc: Scenario, schedule: str, pp: ArrayLike, ga: ArrayLike, peak: str, per_layer: ArrayLike,
                         per_moe_block: ArrayLike, stage: str = PEAK) -> FloatArray:
    """Per-operation model of a MoE model with dense blocks: max over stages g (of the class ``stage``) of
    k_g (n_g x per_layer + m_g x per_moe_block), k_g the stage's peak in-flight micro-batches (exact, or
    the ``peak="lo"`` / ``"hi"`` closed-form bounds), n_g its blocks and m_g its MoE blocks
    (:func:`dense_split`)."""
    first, last = sc.stage_layers
    arrs = np.broadcast_arrays(np.asarray(pp, dtype=float), np.ceil(_f(ga) - 1e-9), _f(per_layer), _f(per_moe_block))
    shape = arrs[0].shape
    p_a, m_a, w_all, w_moe = (x.reshape(-1) for x in arrs)
    out = np.empty(p_a.shape)
    for p_val, m_val in np.unique(np.stack([p_a, m_a]), axis=1).T:
        sel = (p_a == p_val) & (m_a == m_val)
        p = int(p_val)
        coeffs = _stage_peak_coeffs(str(schedule), sc.model, p, int(m_val), first if p > 1 else 0,
                                    last if p > 1 else 0, peak)
        best = np.full(int(sel.sum()), -np.inf)
        if not np.isfinite(coeffs[0][0]):
            out[sel] = np.inf
            continue
        for k_n, k_m in (coeffs[g] for g in class_stages(stage, len(coeffs))):
            best = np.maximum(best, k_n * w_all[sel] + k_m * w_moe[sel])
        out[sel] = best
    return out.reshape(shape)


@lru_cache(maxsize=4096)
def _stage_peak_coeffs(schedule: str, a: ModelArch, p: int, m: int, first: int, last: int,
                       peak: str) -> tuple[tuple[float, float], ...]:
    """Per stage (k_g n_g, k_g m_g) for :func:`_weighted_layer_sets` ((inf, inf) for a shape the
    schedule cannot run)."""
    split = _split_cached(a.layers, p, first, last) if p > 1 else [a.layers]
    dense = _dense_cached(a, p, first, last) or (0,) * len(split or [0])
    if p <= 1:
        return ((float(a.layers), float(a.layers - dense[0])),)
    base, v = schedule_parts(schedule)
    chunks = chunk_layers(split, v) if split and base == "interleaved" else None
    if not split or (base == "interleaved" and chunks is None) or pipeline.shape_error(base, p, m, v):
        return ((np.inf, np.inf),)
    if peak == "exact":
        ks = pipeline.peak_inflight(base, p, m, v=v, chunk_layers=chunks)
    else:
        ks = pipeline.peak_inflight_stage_bounds(base, p, m, v=v, chunk_layers=chunks)[0 if peak == "lo" else 1]
    return tuple((float(k * n), float(k * (n - d))) for k, n, d in zip(ks, split, dense, strict=False))


def _layer_sets(sc: Scenario, schedule: str, pp: ArrayLike, ga: FloatArray, peak: str = "exact",
                stage: str = PEAK) -> FloatArray:
    """Per-operation model: the busiest stage's (of the class ``stage``) in-flight layer sets for every
    (pp, micro-batches), exact (the slot-order walk) or bounded in closed form (``peak="lo"`` / ``"hi"``)."""
    first, last = sc.stage_layers
    side = 0 if peak == "lo" else 1
    fn = _peak_layer_sets if peak == "exact" else \
        (lambda *a: _peak_layer_set_bound(side, *a))
    m = np.ceil(ga - 1e-9)
    p_a, m_a = np.asarray(pp, dtype=float), np.asarray(m, dtype=float)
    key = _LAYER_SETS.key((p_a, m_a), str(schedule), sc.model.layers, first, last, peak, stage)
    if key is None:  # rows, not an open grid: computed as they come
        return _by_unique(lambda p, m: fn(str(schedule), sc.model.layers, int(p), int(m), first, last, stage), pp, m)
    got: FloatArray | None = _LAYER_SETS.get(key)
    if got is None:  # (the same for every recompute set and accelerator of a table: remembered)
        got = _LAYER_SETS.put(key, _by_unique(
            lambda p, m: fn(str(schedule), sc.model.layers, int(p), int(m), first, last, stage), pp, m))
    return got.copy()


_LAYER_SETS = ArrayMemo(entries=256, cells=4096)
"""(schedule, stage class, peak, pp, micro-batches) grids whose in-flight layer sets :func:`_layer_sets` keeps (oldest
first out, up to 4,096 pp and micro-batch entries together): a table's slices repeat them for every recompute set
and accelerator."""


def _peak_layer_sets(schedule: str, layers: int, p: int, m: int, first: int, last: int, stage: str = PEAK) -> float:
    """Max over stages (of the class ``stage``) of in-flight layer sets: (peak in-flight micro-batches of
    stage g) x (its layers)."""
    sets = _stage_layer_sets(schedule, layers, p, m, first, last)
    return max(sets[g] for g in class_stages(stage, len(sets)))


@lru_cache(maxsize=4096)
def _stage_layer_sets(schedule: str, layers: int, p: int, m: int, first: int, last: int) -> tuple[float, ...]:
    """Per stage g: (peak in-flight micro-batches of stage g) x (its layers) ((inf,) for a shape the
    schedule cannot run; one stage: its layers)."""
    if p <= 1:
        return (float(layers),)
    split = _split_cached(layers, p, first, last)
    base, v = schedule_parts(schedule)
    chunks = chunk_layers(split, v) if base == "interleaved" else None
    if not split or (base == "interleaved" and chunks is None) or pipeline.shape_error(base, p, m, v):
        return (np.inf,)
    peaks = pipeline.peak_inflight(base, p, m, v=v, chunk_layers=chunks)
    return tuple(k * n for k, n in zip(peaks, split, strict=False))


def _peak_layer_set_bounds(schedule: str, layers: int, p: int, m: int, first: int, last: int,
                           stage: str = PEAK) -> tuple[float, float]:
    """(lo, hi) of :func:`_peak_layer_sets` from the per-stage closed-form peak bounds (no simulation)."""
    return _peak_layer_set_bound(0, schedule, layers, p, m, first, last, stage), \
        _peak_layer_set_bound(1, schedule, layers, p, m, first, last, stage)


def _peak_layer_set_bound(side: int, schedule: str, layers: int, p: int, m: int, first: int, last: int,
                          stage: str = PEAK) -> float:
    """One side (0: lo, 1: hi) of :func:`_peak_layer_set_bounds`: the largest per-stage bound over the class's
    stages (a contiguous run of stages, :func:`class_stages`)."""
    per_stage = _stage_layer_set_bounds(schedule, layers, p, m, first, last)[side]
    gs = class_stages(stage, len(per_stage))
    return max(per_stage[gs.start:gs.stop])


@lru_cache(maxsize=4096)
def _stage_layer_set_bounds(schedule: str, layers: int, p: int, m: int, first: int,
                            last: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per stage, (lo, hi) bounds of :func:`_stage_layer_sets` in closed form."""
    if p <= 1:
        return (float(layers),), (float(layers),)
    split = _split_cached(layers, p, first, last)
    base, v = schedule_parts(schedule)
    chunks = chunk_layers(split, v) if base == "interleaved" else None
    if not split or (base == "interleaved" and chunks is None) or pipeline.shape_error(base, p, m, v):
        return (np.inf,), (np.inf,)
    lo, hi = pipeline.peak_inflight_stage_bounds(base, p, m, v=v, chunk_layers=chunks)
    return tuple(map(operator.mul, lo, split)), tuple(map(operator.mul, hi, split))  # k x n, stage by stage


def recompute_workspace(sc: Scenario, *, recompute: str, tp: ArrayLike, cp: ArrayLike = 1, mb: ArrayLike) -> Floats:
    """Rebuilt tensors while one block's backward uses them, counted once (memory.recompute_workspace_bytes)."""
    if not modelled_activations(sc):
        return np.zeros(np.broadcast(_f(tp), _f(mb), _f(cp)).shape)
    rc = effective_recompute(sc, recompute)
    s, b = cp_shape(sc, mb, cp)
    workspace: Floats = memory.recompute_workspace_bytes(sc.model, s, b, tp, rc, **_stored_kw(sc))
    return workspace


def temporary(sc: Scenario, *, zero: ArrayLike, tp: ArrayLike, cp: ArrayLike = 1, pp: ArrayLike, mb: ArrayLike,
              ep: ArrayLike = 1, etp: ArrayLike = 0, cap: ArrayLike = 0.0, stage: str = PEAK) -> Floats:
    """Buffers live with the activations: FP32 logits, ZeRO-3 gathered units, pipeline send/recv (all of a
    card's b s / cp tokens), a MoE block's all-to-all send buffer (moe.dispatch_buffer), and the
    context-parallel exchange buffers (context.buffer_bytes: the K, V blocks in flight of ring attention,
    or the head-split q, k, v, o of all-to-all). ``stage``: on the stages of one class only, in the
    per-operation model the logits belong to the last stage alone (the first and middle classes of
    pp > 1 hold none)."""
    mem = sc.memory
    a = sc.model
    cpb: Floats = context.buffer_bytes(a, sc.task.seq_len, mb, tp, cp, sc.cp_method, mem.activation_bytes)
    if not modelled_activations(sc):
        return np.zeros(np.broadcast(_f(zero), _f(tp), _f(pp), _f(mb), _f(ep), _f(etp),
                                     _f(cap)).shape) + cpb
    s = sc.task.seq_len / _f(cp)
    rec = sc.state_recipe()
    send: Floats
    if a.moe:
        unit = moe.largest_unit_per_card(a, tp, ep, etp)
        gather = unit * ((1 + mem.prefetch) * rec.weights + rec.grads)  # as memory.zero3_gather_bytes
        send = moe.dispatch_buffer(a, card_tokens(sc, tp, mb, cp), load_factor(sc, ep, cap),
                                   mem.activation_bytes)
    else:
        gather, send = memory.zero3_gather_bytes(a, tp, rec, mem.prefetch), 0.0
    logits: Floats = memory.logits_bytes(a, s, mb, tp, mem.loss_chunks)
    if stage in ("first", "middle") and per_op_model(sc):  # class_stages: none of them is the last of pp > 1
        logits = np.where(_f(pp) > 1, 0.0, logits)
    buffers: Floats = (logits + send
                       + np.where(_f(zero) >= 3, gather, 0.0)
                       + np.where(_f(pp) > 1, memory.pipeline_buffer_bytes(a, s, mb, tp, mem.activation_bytes), 0.0)
                       + cpb)
    return buffers


class StageMemory(NamedTuple):
    """One pipeline stage's rank at its memory peak (bytes): what the allocator holds there."""

    stage: int
    layers: int
    states: float
    activations: float
    temporary: float
    allocated: float  # states + activations + temporary (torch.cuda.max_memory_allocated)
    reserved: float  # allocated x (1 + allocator reserve) + communicator buffers (max_memory_reserved)


def memory_by_stage(sc: Scenario, *, schedule: str, recompute: str, zero: int, offload: str, tp: int, cp: int = 1,
                    pp: int, dp: int, mb: int, ep: int = 1, etp: int = 0, cap: float = 0.0) -> list[StageMemory]:
    """Per-rank memory of one plan in the per-operation model, stage by stage (empty in the flat model or
    with a fixed activation reserve). Stage g holds its own blocks' states (the embedding on the first,
    the final norm, LM head and MTP modules on the last: moe.stage_candidates / memory.stage_param_counts
    over the real split), k_g in-flight micro-batches of its blocks' activations (pipeline.peak_inflight:
    under 1F1B k_0 = min(m, p) on the first stage down to 1 on the last; interleaved holds more on the
    first), the recompute workspace once, and the buffers: FP32 logits on the last stage only. The
    memory family bounds the plan per stage class (:func:`memory_by_class`): its value is max over the
    classes k of states_k + copies_k + activations_k + temporary_k, each term the heaviest stage of its
    class; the first and last classes are one stage each, so the value is max_g of these allocated sums
    whenever the middle stages' terms peak on one stage (equal middle stages), and above it otherwise.
    """
    a = sc.model
    if not (per_op_model(sc) and modelled_activations(sc)):
        return []
    p = int(pp)
    split = [int(x) for x in stage_split(sc, p)] if p > 1 else [a.layers]
    if not split:
        return []
    rec = sc.state_recipe()
    ranks = shard_ranks(sc, dp, cp, zero)
    if a.moe:
        rows = moe.stage_candidates(a, float(tp), p, split if p > 1 else None, keep_all=True)
        etp_size = moe.expert_tp_size(etp, tp)
        edp = moe.expert_dp_size(tp, ranks, ep, etp)
        params = [(float(r[0]), float(r[1] / (ep * etp_size) + r[2] / ep)) for r in rows]
        moe_blocks = [min(float(r[3]), float(n)) for r, n in zip(rows, split, strict=True)]  # MTP: not timed
    else:
        params = [(float(n), 0.0) for n in memory.stage_param_counts(a, tp, split)]
        edp, moe_blocks = ranks, [0.0] * len(split)
    copies = rec.weights if (p > 1 and str(schedule).startswith("dualpipe")) else 0.0
    rc = effective_recompute(sc, recompute)
    ga = float(grad_accum(sc, dp, mb))
    if p > 1:
        base, v = schedule_parts(schedule)
        chunks = chunk_layers(split, v) if base == "interleaved" else None
        ks = list(pipeline.peak_inflight(base, p, int(np.ceil(ga - 1e-9)), v=v, chunk_layers=chunks))
    else:
        ks = [1.0]  # one stage: a micro-batch's backward frees its activations before the next forward
    per_layer = float(_stored_per_layer(sc, recompute=recompute, tp=tp, cp=cp, mb=mb))
    one = float(_routed_per_block(sc, tp=tp, cp=cp, mb=mb, ep=ep, etp=etp, cap=cap)) if a.moe else 0.0
    workspace = float(recompute_workspace(sc, recompute=recompute, tp=tp, cp=cp, mb=mb))
    temp_last = float(temporary(sc, zero=zero, tp=tp, cp=cp, pp=pp, mb=mb, ep=ep, etp=etp, cap=cap, stage="last"))
    temp_other = float(temporary(sc, zero=zero, tp=tp, cp=cp, pp=pp, mb=mb, ep=ep, etp=etp, cap=cap, stage="first"))
    st = sc.stack
    out: list[StageMemory] = []
    for g, n in enumerate(split):
        dense_n, expert_n = params[g]
        states_g = float(memory.zero_state_bytes(dense_n, ranks, zero, rec, offload == "cpu")
                         + memory.zero_state_bytes(expert_n, edp, zero, rec, offload == "cpu")) \
            + copies * (dense_n + expert_n)
        k = float(ks[g]) if p > 1 else float(n > 0)
        routed = (one if rc == "full" else k * moe_blocks[g] * one) if moe_blocks[g] else 0.0
        acts_g = (k * n * per_layer if p > 1 else n * per_layer) + routed + workspace
        temp_g = temp_last if g == len(split) - 1 else temp_other
        alloc = states_g + acts_g + temp_g
        out.append(StageMemory(g, int(n), states_g, acts_g, temp_g, alloc,
                               alloc * (1.0 + st.allocator_reserve) + st.communicator_buffers))
    return out


def host_memory(sc: Scenario, *, acc: str, offload: str, zero: ArrayLike, tp: ArrayLike, cp: ArrayLike = 1,
                pp: ArrayLike, dp: ArrayLike, ep: ArrayLike = 1, etp: ArrayLike = 0) -> FloatArray:
    """Optimizer state offloaded to one host: cards_per_host x per-card optimizer shard (0 without offload)."""
    rec = sc.state_recipe()
    g = sc.system(acc).acc.cards_per_host
    per_card = _sharded(sc, lambda n, d: memory.host_optimizer_bytes(n, d, zero, rec),
                        tp=tp, pp=pp, ranks=shard_ranks(sc, dp, cp, zero), ep=ep, etp=etp)
    return np.where(offload == "cpu", per_card * g, 0.0)


# ---------------------------------------------------------------------------------------------
# time terms (seconds per step per card)


def rates(sc: Scenario, acc: str) -> steptime.Rates:
    """What the per-operation model runs on: the precision's matrix peak (FP16 / BF16; FP8 for weight
    GEMMs under fp8-mixed when the card has an FP8 peak), HBM, the TP link and the performance catalog."""
    sysm = sc.system(acc)
    A = sysm.acc
    rec = memory.recipe(sc.task.precision)
    peak = A.peak_fp16 if rec.matrix == "fp16" and A.peak_fp16 > 0 else A.peak_flops
    perf = cast(PerfParams, sysm.perf)  # the per-operation model's: its system has a performance catalog
    low = {"fp8": (A.peak_fp8, perf.fp8_gemm_ratio, sc.stack.fp8_recipe if sc.stack.fp8_recipe in
                   ("current", "delayed") else "current"),
           "mxfp8": (A.peak_fp8, perf.fp8_gemm_ratio, "mxfp8"),
           "nvfp4": (A.peak_fp4, perf.fp4_gemm_ratio, "nvfp4")}.get(rec.matrix)
    if low is None or low[0] <= 0:  # BF16 / FP16, or a card without the precision's matrix units
        return steptime.Rates(peak=peak, linear_peak=peak, hbm=A.hbm_bandwidth, tp_bandwidth=A.intra_host_bw,
                              perf=perf, fp8=False, scale=sysm.efficiency)
    e = sc.memory.activation_bytes
    return steptime.Rates(peak=peak, linear_peak=low[0], hbm=A.hbm_bandwidth, tp_bandwidth=A.intra_host_bw,
                          perf=perf, fp8=True, scale=sysm.efficiency,
                          operand_bytes=steptime.OPERAND_BYTES["fp8" if rec.matrix == "fp8" else rec.matrix],
                          cast_bytes=steptime.QUANTISATION_BYTES[low[2]](e) * 2.0 / e, linear_ratio=low[1])


def _perf(sc: Scenario, acc: str) -> PerfParams:
    """The accelerator's performance catalog (the per-operation model's; every system has one then)."""
    return cast(PerfParams, sc.system(acc).perf)


def layout(sc: Scenario, *, tp: ArrayLike, cp: ArrayLike = 1, mb: ArrayLike, ep: ArrayLike = 1, etp: ArrayLike = 0,
           cap: ArrayLike = 0.0) -> ops.Layout:
    """One card's micro-batch for the kernel table. Under context parallelism the card runs b / cp
    sequences' worth of tokens through every token-wise kernel, and its queries attend over the whole
    sequence (the same work as b / cp whole sequences, with the causal imbalance of the split:
    :func:`cp_imbalance`)."""
    mem = sc.memory
    moe_kw = ({"ep": ep, "expert_tp": etp, "load": load_factor(sc, ep, cap)}
              if sc.model.moe else {})
    return ops.Layout(tp=tp, micro_batch=_f(mb) / _f(cp), seq_len=sc.task.seq_len,
                      sequence_parallel=mem.sequence_parallel, flash_attention=mem.flash_attention,
                      dropout=mem.dropout, act_bytes=mem.activation_bytes, attention_scale=cp_imbalance(sc, cp),
                      **moe_kw)


# recent op_times results, least recently used first
_OP_MEMO: OrderedDict[tuple[Any, ...], tuple[Scenario, OpTimes]] = OrderedDict()
BOUND_SLICE = 1 << 18  # group durations (stages x rows) per slice of a pipeline bound pass
GRID_STAGE_COUNTS = 256  # stage counts along the plan grid's pp axis up to which the bounds run on the grid
OP_MEMO_SIZE = 1024  # a MoE space's layouts revisit (tp, micro-batch, EP, capacity) kernel sets round after round


def op_times(sc: Scenario, *, acc: str, recompute: str, tp: ArrayLike, cp: ArrayLike = 1, mb: ArrayLike,
             ep: ArrayLike = 1, etp: ArrayLike = 0, cap: ArrayLike = 0.0, nics: ArrayLike | None = None,
             dense: bool = False) -> OpTimes:
    """Per-operation times of one micro-batch: (layer, first-stage extras, last-stage extras), each a
    steptime.PhaseTimes (fwd, dX incl. recompute, dW, exposed TP, exposed CP). A MoE layer's expert
    kernels depend on EP, expert-TP and the load factor (ops.moe_kernels); ``dense=True`` gives a MoE
    model's dense-MLP block as the layer instead (:func:`dense_split`). The context-parallel exchange
    is included when ``nics`` (its path's NICs per host) is given."""
    arrays = [np.asarray(x) for x in (tp, mb, ep, cap, etp, cp,
                                      -1 if nics is None else nics)]
    key = (id(sc), acc, str(recompute), dense) + tuple((x.shape, x.dtype.str, x.tobytes()) for x in arrays)
    hit = _OP_MEMO.get(key)
    if hit is not None and hit[0] is sc:  # the scenario itself is kept, so its id is not reused while cached
        _OP_MEMO.move_to_end(key)
        return hit[1]
    value = _op_times(sc, acc=acc, recompute=recompute, tp=tp, cp=cp, mb=mb, ep=ep, etp=etp, cap=cap, nics=nics,
                      dense=dense)
    _OP_MEMO[key] = (sc, value)
    while len(_OP_MEMO) > OP_MEMO_SIZE:
        _OP_MEMO.popitem(last=False)
    return value


def _op_times(sc: Scenario, *, acc: str, recompute: str, tp: ArrayLike, cp: ArrayLike = 1, mb: ArrayLike,
              ep: ArrayLike = 1, etp: ArrayLike = 0, cap: ArrayLike = 0.0, nics: ArrayLike | None = None,
              dense: bool = False) -> OpTimes:
    rc = effective_recompute(sc, recompute)
    r = rates(sc, acc)
    lay = layout(sc, tp=tp, cp=cp, mb=mb, ep=ep, etp=etp, cap=cap)
    layer = steptime.layer_times(sc.model, lay, r, rc, sc.overlap_fractions()[0], False if dense else None)
    first, last = steptime.stage_extras(sc.model, lay, r)
    if nics is not None and np.any(_f(cp) > 1):
        a_f, a_dx = steptime.attention_times(sc.model, lay, r)
        x_f, x_dx = cp_exchange(sc, acc=acc, tp=tp, cp=cp, mb=mb, nics=nics, attention_fwd=a_f, attention_dx=a_dx)
        redo = x_f if rc == "full" else 0.0 * x_f  # a full recompute reruns the forward exchange
        layer = steptime.PhaseTimes(layer.fwd + x_f, layer.dx + x_dx + redo, layer.dw, layer.tp, x_f + x_dx + redo)
    return layer, first, last


def cp_exchange(sc: Scenario, *, acc: str, tp: ArrayLike, cp: ArrayLike, mb: ArrayLike, nics: ArrayLike,
                attention_fwd: Floats, attention_dx: Floats) -> tuple[FloatArray, FloatArray]:
    """Exposed context-parallel exchange of one layer and micro-batch, (forward, backward).

    Ring (context.ring_exposed): each of the cp - 1 steps passes one K, V block (backward: K, V and
    dK, dV) while the card computes that step's share of the attention, attention / cp; all-to-all
    (context.alltoall_bytes): the q, k, v and output exchanges are on the critical path, forward and
    backward alike. Bandwidth: context.cp_bandwidth (x the collective efficiency of the performance
    catalog in the per-operation model); 0 when cp = 1."""
    A = sc.system(acc).acc
    a, e = sc.model, sc.memory.activation_bytes
    bw = context.cp_bandwidth(A.fabric, tp, cp, nics, sc.cp_method)
    if per_op_model(sc):
        bw = bw * _perf(sc, acc).tp_efficiency
    if sc.cp_method == "ring":
        f_bytes, b_bytes = context.ring_transfer_bytes(a, sc.task.seq_len, mb, tp, cp, e)
        return (context.ring_exposed(f_bytes, bw, attention_fwd, cp),
                context.ring_exposed(b_bytes, bw, attention_dx, cp))
    t = np.where(_f(cp) > 1, context.alltoall_bytes(a, sc.task.seq_len, mb, tp, cp, e) / bw, 0.0)
    return t, t


def _split_backward(schedule: str) -> bool:
    base, _ = schedule_parts(schedule)
    return base.startswith("zb") or base.startswith("dualpipe")


def microbatch_times(sc: Scenario, *, acc: str, recompute: str, schedule: str, tp: ArrayLike, cp: ArrayLike = 1,
                     pp: ArrayLike, mb: ArrayLike, ep: ArrayLike = 1, etp: ArrayLike = 0, cap: ArrayLike = 0.0,
                     nics: ArrayLike | None = None) -> tuple[Floats, Floats, Floats]:
    """(t_forward, t_backward_input, t_backward_weight) of one micro-batch on the busiest stage's card.

    Flat model: work per token, forward 1/3 of the training FLOPs, backward 2/3 plus any recompute, at
    peak x efficiency; stages balanced (the LM head counted in the average); a MoE model's expert work
    stretched by the load factor phi (padding, the busiest rank's surplus: moe.extra_flops_per_token).
    Per-operation model: the stage's layers x the layer's kernel times plus the embedding (first stage)
    or head and loss (last stage), the phases of the stage whose micro-batch takes longest (one card's
    window of work; per-phase maxima taken over different stages would overstate it). A card has b s / cp
    of the tokens under context parallelism, its attention share scaled by the split's causal imbalance
    (:func:`cp_imbalance`); with ``nics`` the context-parallel exchange is included (:func:`cp_exchange`;
    the data-parallel overlap windows leave it out). With a split backward (zero-bubble, DualPipe) dW is
    separate; otherwise it is folded into the backward and t_backward_weight is 0.
    """
    if per_op_model(sc):
        kernels: dict[str, Any] = dict(acc=acc, recompute=recompute, tp=tp, cp=cp, mb=mb, ep=ep, etp=etp, cap=cap,
                                       nics=nics)
        layer, first, last = op_times(sc, **kernels)
        parts = _busiest_stage(sc, pp, layer, first, last, _dense_layer(sc, **kernels))
        return _fold(schedule, *parts)
    sysm = sc.system(acc)
    a, s = sc.model, sc.task.seq_len
    rc = effective_recompute(sc, recompute)
    attn = attention_flops_per_token(a, s)
    fpt = flops_per_token(a, s) + (cp_imbalance(sc, cp) - 1.0) * attn
    rfpt = memory.recompute_flops_per_token(a, s, rc)
    if a.moe:
        extra = moe.extra_flops_per_token(a, load_factor(sc, ep, cap))
        fpt = fpt + extra
        rfpt = rfpt + (extra / 3.0 if rc == "full" else 0.0)
    rate = sysm.acc.peak_flops * sysm.efficiency
    tokens = _f(mb) * s / (_f(tp) * _f(cp) * _f(pp))
    t_f = tokens * fpt / 3.0 / rate
    t_b = tokens * (2.0 * fpt / 3.0 + rfpt) / rate
    if nics is not None and np.any(_f(cp) > 1):  # the exchange of every layer of the stage
        layer_attn = _f(mb) * s / _f(cp) * cp_imbalance(sc, cp) * attn / a.layers / _f(tp)
        x_f, x_dx = cp_exchange(sc, acc=acc, tp=tp, cp=cp, mb=mb, nics=nics, attention_fwd=layer_attn / 3.0 / rate,
                                attention_dx=2.0 * layer_attn / 3.0 / rate)
        stage = np.ceil(a.layers / _f(pp))
        t_f = t_f + stage * x_f
        t_b = t_b + stage * (x_dx + (x_f if rc == "full" else 0.0))
    t_w = tokens * fpt / 3.0 / rate if _split_backward(schedule) else 0.0 * t_f
    return t_f, t_b - t_w, t_w


def _dense_layer(sc: Scenario, *, acc: str, recompute: str, tp: ArrayLike, cp: ArrayLike = 1, mb: ArrayLike,
                 ep: ArrayLike = 1, etp: ArrayLike = 0, cap: ArrayLike = 0.0,
                 nics: ArrayLike | None = None) -> steptime.PhaseTimes | None:
    """A MoE model's dense-MLP block (op_times(dense=True)'s layer), or None when every block is a MoE
    block or the model is dense (per-operation model)."""
    if dense_split(sc, 1) is None:
        return None
    return op_times(sc, acc=acc, recompute=recompute, tp=tp, cp=cp, mb=mb, ep=ep, etp=etp, cap=cap, nics=nics,
                    dense=True)[0]


def _fold(schedule: str, t_f: Floats, t_dx: Floats, t_dw: Floats) -> tuple[Floats, Floats, Floats]:
    if _split_backward(schedule):
        return t_f, t_dx, t_dw
    return t_f, t_dx + t_dw, 0.0 * t_dw


def _group_times(split: Sequence[float], g: int, layer: Sequence[Floats], first: Sequence[Floats],
                 last: Sequence[Floats], k: int, dense: Sequence[Floats] | None = None,
                 dsplit: Sequence[int] | None = None) -> list[FloatArray]:
    """(fwd, dX, dW) of layer group g: n_g x layer + embedding (g = 0) + head and loss (g = last); with a
    MoE model's dense blocks, (n_g - d_g) x layer + d_g x dense (d_g of ``dsplit``)."""
    n = split[g]
    out: list[FloatArray] = []
    for i in range(k):
        if dsplit is None:
            x = n * _f(layer[i])
        else:  # the callers pass dsplit with dense
            x = (n - dsplit[g]) * _f(layer[i]) + dsplit[g] * _f(cast(Sequence[Floats], dense)[i])
        if g == 0:
            x = x + first[i]
        if g == len(split) - 1:
            x = x + last[i]
        out.append(x)
    return out


def _candidate_stages(sc: Scenario, pp: int) -> tuple[Sequence[float], list[int], tuple[int, ...] | None]:
    """(layer split, the stages that can be the busiest, dense blocks per stage or None): stage times
    grow with the layer count, so only the first stage, the last stage and the middle stage with the most
    layers can take longest; with a MoE model's dense blocks, every middle stage whose (MoE blocks,
    dense blocks) no other middle stage has at least as many of both (either block can be the heavier)."""
    split = stage_split(sc, int(pp)) or [sc.model.layers]
    dsplit = dense_split(sc, int(pp)) if len(split) == int(pp) else None
    groups = {0, len(split) - 1}
    if len(split) > 2 and dsplit is None:
        groups.add(1 + int(np.argmax(split[1:-1])))
    elif len(split) > 2 and dsplit is not None:
        kinds = {g: (split[g] - dsplit[g], dsplit[g]) for g in range(1, len(split) - 1)}
        seen = set()
        for g, (m, d) in kinds.items():
            if (m, d) not in seen and not any(o != (m, d) and o[0] >= m and o[1] >= d for o in kinds.values()):
                groups.add(g)
                seen.add((m, d))
    return split, sorted(groups), dsplit


def _busiest(sc: Scenario, pp: ArrayLike, layer: Sequence[Floats], first: Sequence[Floats], last: Sequence[Floats],
             k: int = 3, dense: Sequence[Floats] | None = None) -> list[FloatArray]:
    """Elementwise (over the plan grid) the largest per-stage value of each of the first k phase times
    (``dense``: a MoE model's dense-block times, :func:`_group_times`).

    Stage times grow with the layer count, so only the first stage, the last stage and the middle stage
    with the most layers can be the largest (:func:`_candidate_stages`)."""
    extra = () if dense is None else tuple(_f(x) for x in dense[:k])
    shape = np.broadcast(np.asarray(pp), *(_f(x) for x in (*layer[:k], *first[:k], *last[:k])), *extra).shape
    pp_a = np.broadcast_to(np.asarray(pp), shape)
    out = [np.zeros(shape) for _ in range(k)]
    for p_val in np.unique(pp_a):
        sel = pp_a == p_val
        split, groups, dsplit = _candidate_stages(sc, p_val)
        dsplit = dsplit if dense is not None else None
        for g in groups:
            vals = _group_times(split, g, layer, first, last, k, dense, dsplit)
            for i in range(k):
                out[i][sel] = np.maximum(out[i][sel], np.broadcast_to(vals[i], shape)[sel])
    return out


def _busiest_stage(sc: Scenario, pp: ArrayLike, layer: Sequence[Floats], first: Sequence[Floats],
                   last: Sequence[Floats], dense: Sequence[Floats] | None = None) -> list[FloatArray]:
    """Elementwise (over the plan grid) the (fwd, dX, dW) times of the stage with the largest sum
    (the candidate stages of :func:`_busiest`; the first of them on ties)."""
    extra = () if dense is None else tuple(_f(x) for x in dense[:3])
    shape = np.broadcast(np.asarray(pp), *(_f(x) for x in (*layer[:3], *first[:3], *last[:3])), *extra).shape
    pp_a = np.broadcast_to(np.asarray(pp), shape)
    out = [np.zeros(shape) for _ in range(3)]
    best = np.full(shape, -np.inf)
    for p_val in np.unique(pp_a):
        sel = pp_a == p_val
        split, groups, dsplit = _candidate_stages(sc, p_val)
        dsplit = dsplit if dense is not None else None
        for g in groups:
            vals = [np.broadcast_to(v, shape) for v in _group_times(split, g, layer, first, last, 3, dense, dsplit)]
            total = vals[0] + vals[1] + vals[2]
            take = sel & (total > best)
            best = np.where(take, total, best)
            for i in range(3):
                out[i] = np.where(take, vals[i], out[i])
    return out


def pipeline_transfer(sc: Scenario, *, acc: str, tp: ArrayLike, cp: ArrayLike = 1, pp: ArrayLike, dp: ArrayLike,
                      mb: ArrayLike, nics: ArrayLike) -> FloatArray:
    """Boundary transfer per micro-batch and direction: s b h x bytes / (tp cp) over the stage link."""
    A = sc.system(acc).acc
    bw = comm.pp_link_bandwidth(A.fabric, pp, _f(tp) * _f(cp) * _f(dp), nics)
    size = comm.pp_boundary_bytes(_f(mb) * sc.task.seq_len / _f(cp), sc.model.hidden, tp,
                                  sc.memory.activation_bytes)
    return np.where(_f(pp) > 1, size / bw, 0.0)


@overload
def pipeline_compute(schedule: str, pp: ArrayLike, micro_batches: ArrayLike, t_fwd: ArrayLike, t_bwd_input: ArrayLike,
                     t_bwd_weight: ArrayLike, t_transfer: ArrayLike, groups: Groups | None = None, *,
                     bounds: Literal[False] = False, dense: Sequence[ArrayLike] | None = None,
                     dense_groups: DenseGroups | None = None) -> FloatArray: ...


@overload
def pipeline_compute(schedule: str, pp: ArrayLike, micro_batches: ArrayLike, t_fwd: ArrayLike, t_bwd_input: ArrayLike,
                     t_bwd_weight: ArrayLike, t_transfer: ArrayLike, groups: Groups | None = None, *,
                     bounds: Literal[True], dense: Sequence[ArrayLike] | None = None,
                     dense_groups: DenseGroups | None = None) -> tuple[FloatArray, FloatArray]: ...


def pipeline_compute(schedule: str, pp: ArrayLike, micro_batches: ArrayLike, t_fwd: ArrayLike, t_bwd_input: ArrayLike,
                     t_bwd_weight: ArrayLike, t_transfer: ArrayLike, groups: Groups | None = None, *,
                     bounds: bool = False, dense: Sequence[ArrayLike] | None = None,
                     dense_groups: DenseGroups | None = None) -> FloatArray | tuple[FloatArray, FloatArray]:
    """Per-step compute: the pipeline event model's completion time (m (t_f + t_b) when pp = 1).

    ``groups(p)``, when given, returns the per-stage layer split for p stages and the per-group
    durations are built from per-layer times plus first/last-stage extras (``t_fwd`` etc. are then
    (layer, first, last) triples); otherwise every stage takes the same (t_fwd, t_bwd_input, t_bwd_weight).
    ``bounds=True`` returns ``(lo, hi)`` from the closed-form bounds instead (solver pruning; equal to
    the exact value for pp = 1 and for balanced fill-drain and 1F1B). ``dense`` (fwd, dX, dW of a MoE
    model's dense-MLP block) with ``dense_groups(p)`` (dense blocks per stage, :func:`dense_split`): a
    group of n_g blocks, d_g of them dense, takes (n_g - d_g) x layer + d_g x dense. Interleaved chunks
    share their stage's duration in proportion to their layer counts (the pipeline model's rule), so a
    stage's dense blocks are spread over its chunks.
    """
    base, v = schedule_parts(schedule)
    if groups is not None:
        # with groups, each time is a (layer, first stage, last stage) triple
        f3, dx3, dw3 = cast(tuple[Sequence[ArrayLike], ...], (t_fwd, t_bwd_input, t_bwd_weight))
        return _pipeline_groups(base, v, pp, micro_batches, f3, dx3, dw3, t_transfer, groups, bounds, dense,
                                dense_groups)
    pp, m, tf, tdx, tdw, tx = np.broadcast_arrays(
        np.asarray(pp), _f(micro_batches), _f(t_fwd), _f(t_bwd_input), _f(t_bwd_weight), _f(t_transfer))
    shape = pp.shape
    pp, m, tf, tdx, tdw, tx = (x.reshape(-1) for x in (pp, m, tf, tdx, tdw, tx))
    out: FloatArray = m * (tf + tdx + tdw)
    multi = pp > 1
    if np.any(multi):
        # one vectorised call: closed forms, or one recurrence per distinct (pp, micro-batches) shape;
        # shapes the schedule cannot run give inf (layout.schedule_shape)
        mm = np.ceil(m[multi] - 1e-9).astype(int)
        args = (base, pp[multi], mm, tf[multi], tdx[multi], tdw[multi], tx[multi], 0.0)
        if bounds:
            lo, hi = pipeline.completion_bounds(*args, v=v)
            bad = ~pipeline.shape_ok(base, pp[multi], mm)
            hi_out = out.copy()
            out[multi] = np.where(bad, np.inf, lo)
            hi_out[multi] = np.where(bad, np.inf, hi)
            return out.reshape(shape), hi_out.reshape(shape)
        out[multi] = pipeline.completion_for_shapes(*args, v=v)
    if bounds:
        return out.reshape(shape), out.reshape(shape)
    return out.reshape(shape)


_COMPLETION_CACHE: dict[tuple[Any, ...], FloatArray] = {}


def _unique_columns(fn: Callable[..., ArrayLike], *arrays: FloatArray, key: Hashable | None = None) -> FloatArray:
    """``fn`` on the distinct columns of the 1-D (or (groups, n)) duration arrays only, scattered back:
    a plan grid repeats each duration set for every ZeRO stage, offload, save interval and mode. With a
    ``key`` (the pipeline shape) results are remembered across calls (the enumerator evaluates the same
    durations once per offload and save mode)."""
    n = arrays[0].shape[-1]
    stacked = np.vstack([np.reshape(a, (-1, n)) for a in arrays])
    uniq, inverse = _distinct_columns(stacked)
    ck = None if key is None else (key, uniq.shape, uniq.tobytes())
    if ck is not None and ck in _COMPLETION_CACHE:
        return _COMPLETION_CACHE[ck][np.reshape(inverse, -1)]
    parts: list[FloatArray] = []
    row = 0
    for a in arrays:
        k = 1 if np.ndim(a) == 1 else a.shape[0]
        parts.append(uniq[row] if np.ndim(a) == 1 else uniq[row:row + k])
        row += k
    result = np.asarray(fn(*parts), dtype=float)
    if ck is not None:
        if len(_COMPLETION_CACHE) >= 1024:
            _COMPLETION_CACHE.clear()
        _COMPLETION_CACHE[ck] = result
    return result[np.reshape(inverse, -1)]


def _distinct_columns(stacked: FloatArray) -> tuple[FloatArray, NDArray[np.intp]]:
    """``np.unique(stacked, axis=1, return_inverse=True)`` of a 2-D float array without NaN: the distinct columns
    in lexicographic order (first row first) and each column's index among them, from one lexsort of the
    columns (np.unique over an axis sorts them as structured records, several times slower on small tables).
    Columns equal as numbers are one column (the first of them in ``stacked`` is kept)."""
    if stacked.shape[1] == 0 or np.isnan(stacked).any():
        uniq, back = np.unique(stacked, axis=1, return_inverse=True)
        return uniq, np.reshape(back, -1).astype(np.intp)
    order = np.lexsort(stacked[::-1])
    cols = stacked[:, order]
    new = np.empty(cols.shape[1], dtype=bool)
    new[0] = True
    new[1:] = np.any(cols[:, 1:] != cols[:, :-1], axis=0)
    inverse = np.empty(cols.shape[1], dtype=np.intp)
    inverse[order] = np.cumsum(new) - 1
    return cols[:, new], inverse


def _duration_sets(arrays: Sequence[FloatArray]) -> tuple[NDArray[np.intp], NDArray[np.intp]] | None:
    """(set of each row, first row of each set) of the distinct rows of equal-length 1-D arrays, equal
    meaning the same bits in every array; None when the rows are mostly distinct (no saving). The rows
    are hashed (their bit patterns mixed) and every row is checked against its set's first row, so a hash
    collision gives None, never a wrong set."""
    n = arrays[0].size
    h = np.zeros(n, dtype=np.uint64)
    bits = [np.ascontiguousarray(a, dtype=np.float64).view(np.uint64) for a in arrays]
    for b in bits:
        h = h * np.uint64(0x9E3779B97F4A7C15) + (b ^ (b >> np.uint64(29)))
    _, first, inverse = np.unique(h, return_index=True, return_inverse=True)
    if first.size * 4 > n:
        return None
    inverse = inverse.reshape(-1)
    if not all(np.array_equal(b[first][inverse], b) for b in bits):
        return None
    return inverse.astype(np.intp), first.astype(np.intp)


def _bounds_on_grid(base: str, v: int, pp: ArrayLike, micro_batches: ArrayLike, durations: Sequence[ArrayLike],
                    t_transfer: ArrayLike, groups: Groups, dense_of: Callable[[int], Sequence[int]] | None
                    ) -> tuple[FloatArray, FloatArray] | None:
    """The closed-form ``(lo, hi)`` of :func:`_pipeline_groups` (its ``bounds=True``) on the plan grid, when the
    stage count varies along one axis of the grid at most (an axis of at most GRID_STAGE_COUNTS entries: the pp
    axis of a table, not flattened rows); None otherwise. ``durations``: (fwd, dX, dW) of a layer, of the first
    stage's extras and of the last stage's, then those of a dense block (``dense_of``: dense blocks per stage).

    The inputs are kept at their own shapes and broadcast, not flattened into rows: the per-group durations vary
    along the few axes they depend on (recompute, TP, micro-batch: one set per cell), m along (DP, micro-batch),
    the transfer along (TP, DP, micro-batch, NICs), so every sum over a stage's durations is formed once per
    duration set and only the terms with m or the transfer are formed per plan. Each plan's bound is the same
    elementwise arithmetic as the row pass (bit for bit: tests/test_vectorised_paths.py); slabs of at most
    BOUND_SLICE group durations keep the (p, plans) temporaries small."""
    shape = np.broadcast_shapes(*(np.shape(x) for x in (pp, micro_batches, t_transfer, *durations)))
    nd = len(shape)

    def pad(x: ArrayLike) -> NDArray[Any]:
        a = np.asarray(x)
        return a.reshape((1,) * (nd - a.ndim) + a.shape)

    p_of = pad(pp)
    along = [i for i, n in enumerate(p_of.shape) if n > 1]
    if len(along) > 1 or p_of.size > GRID_STAGE_COUNTS:
        return None
    ax = along[0] if along else -1
    m_float = pad(_f(micro_batches))
    m_all, t_all = pad(np.ceil(m_float - 1e-9).astype(int)), pad(_f(t_transfer))
    d_all = [pad(_f(x)) for x in durations]
    lo_grid, hi_grid = np.empty(shape), np.empty(shape)
    for j in range(p_of.shape[ax] if along else 1):
        p = int(p_of.reshape(-1)[j])

        def at_p(a: NDArray[Any], j: int = j) -> NDArray[Any]:
            return a[(slice(None),) * ax + (slice(j, j + 1),)] if along and a.shape[ax] > 1 else a

        m_p, t_p, d_p = at_p(m_all), at_p(t_all), [at_p(x) for x in d_all]
        dst: list[slice] = [slice(None)] * nd
        if along:
            dst[ax] = slice(j, j + 1)
        if p <= 1:  # one stage: m x (every layer + embedding + head), as the row pass forms it
            lf, ldx, ldw, ef, edx, edw, hf, hdx, hdw, *more = d_p
            n_all = float(sum(groups(1)))
            if dense_of is not None:
                d_one = float(sum(dense_of(1)))
                one = at_p(m_float) * ((n_all - d_one) * (lf + ldx + ldw) + d_one * (more[0] + more[1] + more[2])
                                       + ef + edx + edw + hf + hdx + hdw)
            else:
                one = at_p(m_float) * (n_all * (lf + ldx + ldw) + ef + edx + edw + hf + hdx + hdw)
            lo_grid[tuple(dst)] = hi_grid[tuple(dst)] = one
            continue
        lead = np.broadcast_shapes(m_p.shape, t_p.shape, *(x.shape for x in d_p))
        split = groups(p)
        chunks = chunk_layers(split, v) if base == "interleaved" else None
        if not split or (base == "interleaved" and chunks is None):
            lo_grid[tuple(dst)] = hi_grid[tuple(dst)] = np.inf  # layout.schedule_shape rules these plans out
            continue
        n_g = np.asarray(split, dtype=float).reshape((-1,) + (1,) * nd)
        d_g = None if dense_of is None else np.asarray(dense_of(p), dtype=float).reshape((-1,) + (1,) * nd)
        k = 0  # slabs: p x (plans of a slab) <= BOUND_SLICE, ranges along axis k - 1, single entries before it
        while k < nd and p * math.prod(lead[k:]) > BOUND_SLICE:
            k += 1
        step = max(1, BOUND_SLICE // (p * math.prod(lead[k:])))
        heads = [()] if k == 0 else [(*h, slice(i, i + step)) for h in np.ndindex(*lead[:k - 1])
                                     for i in range(0, lead[k - 1], step)]
        for head in heads:
            cut = tuple(h if isinstance(h, slice) else slice(h, h + 1) for h in head)

            def part(a: NDArray[Any], cut: tuple[slice, ...] = cut) -> NDArray[Any]:
                return a[tuple(c if a.shape[i] > 1 else slice(None) for i, c in enumerate(cut))]

            lf, ldx, ldw, ef, edx, edw, hf, hdx, hdw, *more = (part(x) for x in d_p)
            dshape = np.broadcast_shapes(*(x.shape for x in (lf, ldx, ldw, ef, edx, edw, hf, hdx, hdw, *more)))
            grid = [np.broadcast_to(x, dshape)[None] for x in (lf, ldx, ldw, *more)]
            if d_g is not None:  # (n_g - d_g) MoE blocks + d_g dense blocks
                per = [(n_g - d_g) * x + d_g * y for x, y in zip(grid[:3], grid[3:], strict=True)]
            else:
                per = [n_g * x for x in grid[:3]]
            for arr, e, h in zip(per, (ef, edx, edw), (hf, hdx, hdw), strict=True):
                arr[0] = arr[0] + np.broadcast_to(e, dshape)
                arr[-1] = arr[-1] + np.broadcast_to(h, dshape)
            fwd, dx, dw = per
            lo, hi = pipeline.completion_bounds_rows(base, p, part(m_p), fwd, dx, dw, part(t_p), 0.0, v=v,
                                                     chunk_layers=chunks)
            for i, c in enumerate(cut):
                if not (along and i == ax):
                    dst[i] = c
            lo_grid[tuple(dst)], hi_grid[tuple(dst)] = lo, hi
    return lo_grid, hi_grid


def _pipeline_groups(base: str, v: int, pp: ArrayLike, micro_batches: ArrayLike, layer_f: Sequence[ArrayLike],
                     layer_dx: Sequence[ArrayLike], layer_dw: Sequence[ArrayLike], t_transfer: ArrayLike,
                     groups: Groups, bounds: bool = False, dense: Sequence[ArrayLike] | None = None,
                     dense_groups: DenseGroups | None = None) -> FloatArray | tuple[FloatArray, FloatArray]:
    """Completion time with per-stage durations (uneven layer counts, a MoE model's dense blocks,
    embedding and head placement); with ``bounds``, (lo, hi) from the closed-form bounds summed group by
    group (no simulation)."""
    (lf, ef, hf), (ldx, edx, hdx), (ldw, edw, hdw) = layer_f, layer_dx, layer_dw
    mixed = dense is not None and dense_groups is not None and dense_groups(1) is not None
    more = tuple(_f(x) for x in cast(Sequence[ArrayLike], dense)) if mixed else ()
    dense_of = cast(Callable[[int], Sequence[int]], dense_groups)  # called only when mixed
    if bounds:  # on the plan grid where the stage count has an axis of its own
        grid = _bounds_on_grid(base, v, pp, micro_batches, (lf, ldx, ldw, ef, edx, edw, hf, hdx, hdw, *more),
                               t_transfer, groups, dense_of if mixed else None)
        if grid is not None:
            return grid
    arrs = np.broadcast_arrays(np.asarray(pp), _f(micro_batches), *(_f(x) for x in (lf, ldx, ldw, ef, edx, edw, hf,
                                                                                       hdx, hdw, t_transfer)), *more)
    shape = arrs[0].shape
    pp_a, m, lf, ldx, ldw, ef, edx, edw, hf, hdx, hdw, tx = (x.reshape(-1) for x in arrs[:12])
    # the dense blocks' rows are read only when mixed, the upper bounds only with bounds
    df, ddx, ddw = cast(Iterable[FloatArray], (x.reshape(-1) for x in arrs[12:]) if mixed else (None, None, None))
    out = np.empty(pp_a.shape)
    hi_out = cast(FloatArray, np.empty(pp_a.shape) if bounds else None)
    mm = np.ceil(m - 1e-9).astype(int)
    single = pp_a <= 1
    n_all = float(sum(groups(1)))
    if mixed:
        d_all = float(sum(dense_of(1)))
        out[single] = m[single] * ((n_all - d_all) * (lf + ldx + ldw) + d_all * (df + ddx + ddw)
                                   + ef + edx + edw + hf + hdx + hdw)[single]
    else:
        out[single] = m[single] * (n_all * (lf + ldx + ldw) + ef + edx + edw + hf + hdx + hdw)[single]
    if bounds:
        hi_out[single] = out[single]
    multi = np.flatnonzero(~single)

    def durations(sel: NDArray[np.intp], p: int, split: Sequence[float]) -> tuple[FloatArray, FloatArray, FloatArray]:
        """Per-group durations (p, rows): n_g x layer, + embedding on group 0, + head and loss on the
        last (the additions of _group_times, in its order)."""
        n_g = np.asarray(split, dtype=float)[:, None]
        if mixed:  # (n_g - d_g) MoE blocks + d_g dense blocks
            d_g = np.asarray(dense_of(p), dtype=float)[:, None]
            fwd, dx, dw = ((n_g - d_g) * x[sel][None] + d_g * y[sel][None]
                           for x, y in ((lf, df), (ldx, ddx), (ldw, ddw)))
        else:
            fwd, dx, dw = (n_g * x[sel][None] for x in (lf, ldx, ldw))
        for arr, e, h in ((fwd, ef, hf), (dx, edx, hdx), (dw, edw, hdw)):
            arr[0] = arr[0] + e[sel]
            arr[-1] = arr[-1] + h[sel]
        return fwd, dx, dw

    if multi.size and bounds:
        # one vectorised pass per stage count, every micro-batch count at once; the group durations of each
        # distinct duration set once (a plan grid repeats them for every DP degree, NIC count and stage count)
        sets = _duration_sets([lf, ldx, ldw, ef, edx, edw, hf, hdx, hdw] + ([df, ddx, ddw] if mixed else []))
        for p_val in np.unique(pp_a[multi]).tolist():
            sel = multi[pp_a[multi] == p_val]
            p = int(p_val)
            split = groups(p)
            chunks = chunk_layers(split, v) if base == "interleaved" else None
            if not split or (base == "interleaved" and chunks is None):
                out[sel] = hi_out[sel] = np.inf  # layout.schedule_shape rules these plans out
                continue
            # rows in slices of at most BOUND_SLICE group durations: the (p, rows) temporaries stay small
            # (every row is bounded on its own, so the slices give the same numbers as one pass)
            step = max(1, BOUND_SLICE // p)
            set_of, per_set = (None, None) if sets is None else (sets[0], durations(sets[1], p, split))
            for lo_row in range(0, sel.size, step):
                part = sel[lo_row:lo_row + step]
                if set_of is not None and per_set is not None:  # per_set: one row of each duration set
                    out[part], hi_out[part] = pipeline.completion_bounds_rows(
                        base, p, mm[part], *per_set, tx[part], 0.0, v=v, chunk_layers=chunks, columns=set_of[part])
                else:
                    out[part], hi_out[part] = pipeline.completion_bounds_rows(
                        base, p, mm[part], *durations(part, p, split), tx[part], 0.0, v=v, chunk_layers=chunks)
    elif multi.size:
        # every (pp, micro-batches) shape once, its rows selected once
        shapes, order, cuts = pipeline.group_shapes(pp_a[multi], mm[multi])
        for k, (p_val, m_val) in enumerate(shapes):
            sel = multi[order[cuts[k]:cuts[k + 1]]]
            p, mv = int(p_val), int(m_val)
            split = groups(p)
            chunks = chunk_layers(split, v) if base == "interleaved" else None
            if not split or (base == "interleaved" and chunks is None) or pipeline.shape_error(base, p, mv, v):
                out[sel] = np.inf  # layout.schedule_shape rules this plan out
                continue
            fwd, dx, dw = durations(sel, p, split)
            out[sel] = _unique_columns(lambda f, x_, w, t, p=p, mv=mv, chunks=chunks: pipeline.completion_time(
                base, p, mv, f, x_, w, t, 0.0, v=v, chunk_layers=chunks, per_group=True), fwd, dx, dw, tx[sel],
                key=(base, p, mv, v, tuple(chunks or ()), tuple(split), mixed and tuple(dense_of(p))))
    if bounds:
        return out.reshape(shape), hi_out.reshape(shape)
    return out.reshape(shape)


def pipeline_inflight(schedule: str, pp: ArrayLike, micro_batches: ArrayLike, *, peak: str = "exact") -> FloatArray:
    """Peak live micro-batch activation sets on the busiest stage (1 when pp = 1).

    Closed forms for every schedule but the chapter's DualPipe (:func:`tpopt.models.pipeline.peak_inflight_max`
    walks its slot order once per shape); ``peak="lo"`` / ``"hi"``: closed-form bounds only.
    """
    base, v = schedule_parts(schedule)
    pp, m = np.broadcast_arrays(np.asarray(pp), np.ceil(_f(micro_batches) - 1e-9).astype(int))
    multi = pp > 1
    out = np.ones(pp.shape, dtype=float)
    if np.any(multi):
        if peak == "exact":
            val = pipeline.peak_inflight_max(base, pp[multi], m[multi], v=v)
        else:
            val = pipeline.peak_inflight_bounds(base, pp[multi], m[multi], v=v)[0 if peak == "lo" else 1]
        out[multi] = np.where(pipeline.shape_ok(base, pp[multi], m[multi]), val, np.inf)
    return out


def schedule_shape_ok(sc: Scenario, *, schedule: str, pp: ArrayLike, dp: ArrayLike, mb: ArrayLike) -> NDArray[np.bool_]:
    """1 where the pipeline schedule can run pp stages with batch / (dp x mb) micro-batches:
    always when pp = 1; DeepSeek's DualPipe ordering restricts shapes; interleaved needs at least v
    layers on every stage; explicit first / last stage layer counts must leave every stage a layer."""
    base, v = schedule_parts(schedule)
    pp, m = np.broadcast_arrays(np.asarray(pp), np.ceil(sc.task.global_batch / (_f(dp) * _f(mb)) - 1e-9).astype(int))
    out = np.ones(pp.shape, dtype=bool)
    for p_val, m_val in np.unique(np.stack([pp.reshape(-1), m.reshape(-1)], axis=1), axis=0):
        if p_val <= 1:
            continue
        bad = bool(pipeline.shape_error(base, int(p_val), int(m_val), v))
        if not bad:
            split = stage_split(sc, int(p_val))
            bad = not split or (base == "interleaved" and min(split) < v)
        if bad:
            out[(pp == p_val) & (m == m_val)] = False
    return out


def straggler_factor(sc: Scenario, cards: ArrayLike) -> Floats:
    """Expected slowest-card factor on compute: 1 + sigma E[max of n standard normals] (chapter 10.4.5)."""
    sigma = sc.reliability.straggler_sigma
    if sigma <= 0:
        return np.ones(np.shape(cards))
    return 1.0 + sigma * reliability.expected_max_std_normal(np.asarray(cards).astype(int))


def compute_key(sc: Scenario, ep: ArrayLike, expert_tp: ArrayLike, capacity_factor: ArrayLike) -> tuple[Any, ...]:
    """What the compute term depends on among (ep, expert_tp, capacity_factor): the load factor in the
    flat model; also EP and expert-TP (grouped-GEMM shapes) in the per-operation model."""
    phi = float(load_factor(sc, ep, capacity_factor))
    return (ep, expert_tp, phi) if per_op_model(sc) and sc.model.moe else (phi,)


def inputs_schedule_key(schedule: str) -> bool:
    """What :func:`compute_inputs` reads of the schedule: whether dW runs apart from dX (:func:`_fold`); two
    schedules with the same key give the same inputs, bit for bit."""
    return _split_backward(schedule)


def compute_inputs(sc: Scenario, *, acc: str, recompute: str, sp: bool | None = None, schedule: str, tp: ArrayLike,
                   cp: ArrayLike = 1, pp: ArrayLike, dp: ArrayLike, mb: ArrayLike, nics: ArrayLike, ep: ArrayLike = 1,
                   etp: ArrayLike = 0, cap: ArrayLike = 0.0) -> tuple[Floats, ...]:
    """Everything the compute term needs, as 12 arrays: (fwd, dX, dW) of a layer (per-operation model)
    or of a balanced stage (flat model), the first stage's and the last stage's extras (zero in the flat
    model), the boundary transfer, micro-batches per step and cards; for a MoE model with dense-MLP
    blocks (per-operation model, :func:`dense_split`) three more: (fwd, dX, dW) of a dense block."""
    sc = with_sequence_parallel(sc, sp)
    t_x = pipeline_transfer(sc, acc=acc, tp=tp, cp=cp, pp=pp, dp=dp, mb=mb, nics=nics)
    ga, cards = grad_accum(sc, dp, mb), _f(tp) * _f(cp) * _f(pp) * _f(dp)
    if per_op_model(sc):
        kernels: dict[str, Any] = dict(acc=acc, recompute=recompute, tp=tp, cp=cp, mb=mb, ep=ep, etp=etp, cap=cap,
                                       nics=nics)
        layer, first, last = op_times(sc, **kernels)
        folded = [_fold(schedule, *x[:3]) for x in (layer, first, last)]
        dense = _dense_layer(sc, **kernels)
        more = () if dense is None else tuple(_fold(schedule, *dense[:3]))
        return (*folded[0], *folded[1], *folded[2], t_x, ga, cards, *more)
    t_f, t_dx, t_dw = microbatch_times(sc, acc=acc, recompute=recompute, schedule=schedule, tp=tp, cp=cp, pp=pp,
                                       mb=mb, ep=ep, etp=etp, cap=cap, nics=nics)
    z = 0.0 * _f(t_f)
    return t_f, t_dx, t_dw, z, z, z, z, z, z, t_x, ga, cards


def compute_from(sc: Scenario, schedule: str, pp: ArrayLike,
                 inputs: Sequence[Any]) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Compute term from its inputs (arrays may stack many plans; one simulator call per shape).

    Returns (compute_with_stragglers, pure_compute, bubble, straggler); the first includes the stack's host
    time per step (:func:`stack_overhead`, per-operation model), outside the other three; pure compute is the busiest
    stage's work, m (t_f + t_dX + t_dW).
    """
    lf, ldx, ldw, ef, edx, edw, hf, hdx, hdw, t_x, ga, cards = inputs[:12]
    completion = _completion(sc, schedule, pp, inputs)
    if per_op_model(sc):
        dense = inputs[12:15] or None
        busy = _busiest(sc, pp, (lf + ldx + ldw,), (ef + edx + edw,), (hf + hdx + hdw,), 1,
                        None if dense is None else (dense[0] + dense[1] + dense[2],))[0]
        pure = ga * busy
    else:
        pure = ga * (lf + ldx + ldw)
    # the stack's host time (per-operation model) adds to the step outside the pipeline: not bubble, not straggler
    host = stack_overhead(sc, pp=pp, ga=ga) if per_op_model(sc) else 0.0
    total = completion * straggler_factor(sc, cards)
    finite = np.isfinite(completion)
    return (total + host, pure, np.where(finite, np.maximum(completion - pure, 0.0), np.inf),
            np.where(finite, total - np.where(finite, completion, 0.0), 0.0))


def _completion(sc: Scenario, schedule: str, pp: ArrayLike, inputs: Sequence[Any]) -> FloatArray:
    """The pipeline's completion time per step from :func:`compute_inputs` (no stragglers, no host time)."""
    lf, ldx, ldw, ef, edx, edw, hf, hdx, hdw, t_x, ga, _cards = inputs[:12]
    if per_op_model(sc):
        return pipeline_compute(schedule, pp, ga, (lf, ef, hf), (ldx, edx, hdx), (ldw, edw, hdw), t_x,
                                groups=lambda p: stage_split(sc, p), dense=inputs[12:15] or None,
                                dense_groups=lambda p: dense_split(sc, p))
    return pipeline_compute(schedule, pp, ga, lf, ldx, ldw, t_x)


def compute_total(sc: Scenario, schedule: str, pp: ArrayLike, inputs: Sequence[Any]) -> FloatArray:
    """:func:`compute_from`'s first value alone (the compute term's table): the completion time times the
    straggler factor, plus the stack's host time per step (per-operation model), without the busiest stage's
    pure compute the split needs."""
    host = stack_overhead(sc, pp=pp, ga=inputs[10]) if per_op_model(sc) else 0.0
    total: FloatArray = _completion(sc, schedule, pp, inputs) * straggler_factor(sc, inputs[11]) + host
    return total


def stack_overhead(sc: Scenario, *, pp: ArrayLike, ga: ArrayLike) -> FloatArray:
    """Host-side time per step that no compute hides (per-operation model; the stack's profile,
    catalogs/stacks.toml): t_step + (m + pp - 1) t_micro, the optimizer step's launch, gradient-norm and
    loss reductions once per step, and the schedule's bookkeeping once per micro-batch slot of the
    pipeline's critical path (m micro-batches plus the pp - 1 of the fill)."""
    st = sc.stack
    out: FloatArray = st.step_overhead + (_f(ga) + _f(pp) - 1.0) * st.microbatch_overhead
    return out


def compute_bounds(sc: Scenario, schedule: str, pp: ArrayLike, inputs: Sequence[Any]) -> tuple[FloatArray, FloatArray]:
    """``(lo, hi)`` of :func:`compute_from`'s compute-with-stragglers from the pipeline's closed-form
    bounds (solver pruning; exact where the pipeline term has a closed form)."""
    lf, ldx, ldw, ef, edx, edw, hf, hdx, hdw, t_x, ga, cards = inputs[:12]
    if per_op_model(sc):
        lo, hi = pipeline_compute(schedule, pp, ga, (lf, ef, hf), (ldx, edx, hdx), (ldw, edw, hdw), t_x,
                                  groups=lambda p: stage_split(sc, p), bounds=True, dense=inputs[12:15] or None,
                                  dense_groups=lambda p: dense_split(sc, p))
        host = stack_overhead(sc, pp=pp, ga=ga)
        lo, hi = lo + host, hi + host
    else:
        lo, hi = pipeline_compute(schedule, pp, ga, lf, ldx, ldw, t_x, bounds=True)
    factor = straggler_factor(sc, cards)
    return lo * factor, hi * factor


def compute(sc: Scenario, *, acc: str, recompute: str, sp: bool | None = None, schedule: str, tp: ArrayLike,
            cp: ArrayLike = 1, pp: ArrayLike, dp: ArrayLike, mb: ArrayLike, nics: ArrayLike, ep: ArrayLike = 1,
            etp: ArrayLike = 0, cap: ArrayLike = 0.0) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Per-step compute incl. pipeline bubbles, times the straggler factor.

    Returns (compute_with_stragglers, pure_compute, bubble, straggler) so that reports can split it.
    """
    return compute_from(sc, schedule, pp, compute_inputs(sc, acc=acc, recompute=recompute, sp=sp, schedule=schedule,
                                                         tp=tp, cp=cp, pp=pp, dp=dp, mb=mb, nics=nics, ep=ep, etp=etp,
                                                         cap=cap))


def tp_exposed(sc: Scenario, *, acc: str, recompute: str, tp: ArrayLike, cp: ArrayLike = 1, pp: ArrayLike,
               dp: ArrayLike, mb: ArrayLike, ep: ArrayLike = 1, etp: ArrayLike = 0, cap: ArrayLike = 0.0) -> FloatArray:
    """Per-operation model: exposed tensor-parallel time per step on the busiest stage (inside the
    compute term; reported separately)."""
    kernels: dict[str, Any] = dict(acc=acc, recompute=recompute, tp=tp, cp=cp, mb=mb, ep=ep, etp=etp, cap=cap)
    layer, first, last = op_times(sc, **kernels)
    dense = _dense_layer(sc, **kernels)
    tp_stage = _busiest(sc, pp, (layer.tp,), (first.tp,), (last.tp,), 1, None if dense is None else (dense.tp,))[0]
    return grad_accum(sc, dp, mb) * tp_stage


def cp_exposed(sc: Scenario, *, acc: str, recompute: str, tp: ArrayLike, cp: ArrayLike = 1, pp: ArrayLike,
               dp: ArrayLike, mb: ArrayLike, nics: ArrayLike, ep: ArrayLike = 1, etp: ArrayLike = 0,
               cap: ArrayLike = 0.0) -> Floats:
    """Exposed context-parallel exchange per step on the busiest stage (inside the compute term;
    reported separately): micro-batches x the stage's layers x :func:`cp_exchange`."""
    ga = grad_accum(sc, dp, mb)
    if per_op_model(sc):
        layer, first, last = op_times(sc, acc=acc, recompute=recompute, tp=tp, cp=cp, mb=mb, ep=ep, etp=etp, cap=cap,
                                      nics=nics)
        return ga * _busiest(sc, pp, (_f(layer.cp),), (0.0,), (0.0,), 1)[0]
    stage: dict[str, Any] = dict(acc=acc, recompute=recompute, schedule="1f1b", tp=tp, cp=cp, pp=pp, mb=mb, ep=ep,
                                 etp=etp, cap=cap)
    with_x = microbatch_times(sc, **stage, nics=nics)
    without = microbatch_times(sc, **stage)
    return ga * (sum(with_x) - sum(without))


def cp_link(sc: Scenario, *, acc: str, tp: ArrayLike, cp: ArrayLike = 1, pp: ArrayLike, dp: ArrayLike, mb: ArrayLike,
            nics: ArrayLike) -> FloatArray:
    """Context-parallel link time per step on a card: micro-batches x the stage's layers x the
    exchange's bytes (forward + backward) at context.cp_bandwidth (hidden or not)."""
    A = sc.system(acc).acc
    a, e, s = sc.model, sc.memory.activation_bytes, sc.task.seq_len
    bw = context.cp_bandwidth(A.fabric, tp, cp, nics, sc.cp_method)
    if sc.cp_method == "ring":
        per_layer = sum(context.ring_transfer_bytes(a, s, mb, tp, cp, e))
    else:
        per_layer = 2.0 * context.alltoall_bytes(a, s, mb, tp, cp, e)
    layers = np.ceil(a.layers / _f(pp))  # the busiest stage's layers (whole layers)
    link: FloatArray = grad_accum(sc, dp, mb) * layers * per_layer / bw
    return link


def dp_bandwidth(sc: Scenario, *, acc: str, tp: ArrayLike, dp: ArrayLike, nics: ArrayLike) -> Floats:
    """Per-card DP ring bandwidth (comm.dp_ring_bandwidth), x the collective efficiency in the
    per-operation model."""
    A = sc.system(acc).acc
    bw: Floats = comm.dp_ring_bandwidth(A.fabric, tp, dp, nics)
    if per_op_model(sc):
        bw = bw * _perf(sc, acc).dp_efficiency
    return bw


def dp_link(sc: Scenario, *, acc: str, zero: ArrayLike, tp: ArrayLike, cp: ArrayLike = 1, pp: ArrayLike, dp: ArrayLike,
            mb: ArrayLike, nics: ArrayLike, ep: ArrayLike = 1, etp: ArrayLike = 0) -> FloatArray:
    """Data-parallel (ZeRO) link time per step: V / B on the real path (comm.zero_dp_volume, dp_ring_bandwidth),
    over the dp x cp ranks (:func:`zero_ranks`).

    A MoE model's expert state is reduced over its expert-data-parallel group (edp members, one ring per
    card of an EP x expert-TP block): the two rings' times add up (they share the links)."""
    rec = sc.state_recipe()
    ga = grad_accum(sc, dp, mb)
    ranks = shard_ranks(sc, dp, cp, zero)
    bw = dp_bandwidth(sc, acc=acc, tp=tp, dp=ranks, nics=nics)
    if not sc.model.moe:
        n = heaviest_stage_params(sc, tp, pp)
        link: FloatArray = comm.zero_dp_volume(zero, n, ranks, ga, rec.weights, rec.grads) / bw
        return (link + dp_latency(sc, acc=acc, zero=zero, tp=tp, pp=pp, ranks=ranks, ga=ga, n=n)
                + replica_link(sc, acc=acc, zero=zero, tp=tp, pp=pp, dp=dp, cp=cp, nics=nics, n=n))
    g = sc.system(acc).acc.cards_per_host
    etp_size = moe.expert_tp_size(etp, tp)
    edp = moe.expert_dp_size(tp, ranks, ep, etp)
    bw_e = dp_bandwidth(sc, acc=acc, tp=np.minimum(_f(ep) * etp_size, g), dp=edp, nics=nics)
    stride = _f(ep) * etp_size

    def t(d: FloatArray, xl: FloatArray, xb: FloatArray, n: FloatArray) -> FloatArray:
        experts = xl / (_f(ep) * etp_size) + xb / _f(ep)
        both: FloatArray = (comm.zero_dp_volume(zero, d, ranks, ga, rec.weights, rec.grads) / bw
                            + comm.zero_dp_volume(zero, experts, edp, ga, rec.weights, rec.grads) / bw_e
                            + dp_latency(sc, acc=acc, zero=zero, tp=tp, pp=pp, ranks=ranks, ga=ga, n=d)
                            + dp_latency(sc, acc=acc, zero=zero, tp=stride, pp=pp, ranks=edp, ga=ga, n=experts,
                                         units=n))
        return both

    return _moe_stages(sc, tp, pp, t)


def dp_latency(sc: Scenario, *, acc: str, zero: ArrayLike, tp: ArrayLike, pp: ArrayLike, ranks: ArrayLike,
               ga: ArrayLike, n: ArrayLike, units: ArrayLike | None = None) -> FloatArray:
    """Per-operation model: the latency of a step's data-parallel collectives, calls x (t_call + ring
    latency): comm.dp_collective_calls (per-layer ZeRO-3 / FSDP gathers and reductions, the stack's
    gradient buckets otherwise) and network.ring_latency over the dp x cp ranks tp apart (each step
    paced by the tier the ring crosses: up_step_latency inside the scale-up domain, out_step_latency
    across the NICs). 0 in the flat model. ``units``: the sharded units per stage when they are not its
    layers (a MoE model's expert state: one unit per MoE block, its local experts, reduced and gathered
    over the expert-data-parallel ring, ``ranks`` = edp members ``tp`` = ep x etp apart: ZeRO-3 gathers
    whole expert sets per block and micro-batch, so at edp in the hundreds each call pays hundreds of steps)."""
    if not per_op_model(sc):
        return 0.0 * _f(ranks)
    p = _perf(sc, acc)
    rec = sc.state_recipe()
    layers = np.ceil(sc.model.layers / _f(pp)) if units is None else _f(units)
    calls = comm.dp_collective_calls(zero, n, layers, ga, sc.stack.dp_bucket, rec.weights, rec.grads)
    ring = network.ring_latency(sc.system(acc).acc.fabric, ranks, tp, p.up_step_latency, p.out_step_latency)
    out: FloatArray = np.where(_f(ranks) > 1, calls * (p.collective_latency + ring), 0.0)
    return out


def dp_tail(sc: Scenario, *, acc: str, zero: ArrayLike, tp: ArrayLike, pp: ArrayLike, ranks: ArrayLike,
            bw: ArrayLike) -> FloatArray:
    """Per-operation model: the time of a step's first gather and last reduction of the sharded units
    (comm.dp_tail_bytes: one layer under ZeRO-3 / FSDP, one of the stack's buckets otherwise), which no
    compute can hide: bytes / B + calls x (t_call + ring latency) over the dp x cp ranks ``tp`` apart."""
    p = _perf(sc, acc)
    rec = sc.state_recipe()
    n = heaviest_stage_params(sc, tp, pp)
    size, calls = comm.dp_tail_bytes(zero, n, np.ceil(sc.model.layers / _f(pp)), ranks, sc.stack.dp_bucket,
                                     rec.weights, rec.grads)
    ring = network.ring_latency(sc.system(acc).acc.fabric, ranks, tp, p.up_step_latency, p.out_step_latency)
    out: FloatArray = np.where(_f(ranks) > 1, size / _f(bw) + calls * (p.collective_latency + ring), 0.0)
    return out


def exposed_dp(sc: Scenario, *, acc: str, zero: ArrayLike, recompute: str, sp: bool | None = None, tp: ArrayLike,
               cp: ArrayLike = 1, pp: ArrayLike, dp: ArrayLike, mb: ArrayLike, nics: ArrayLike, ep: ArrayLike = 1,
               etp: ArrayLike = 0, cap: ArrayLike = 0.0) -> FloatArray:
    """Exposed data-parallel communication (comm.exposed_time), with overlap share f (comm.dp_overlap):
    (1 - f) x every byte + f x (unhidable bytes + per-window excess over compute + the gathers that wait
    for their layer without prefetch, :func:`serial_gathers`).

    Windows: one per micro-batch for ZeRO-2/3 (their collectives run every micro-batch), one per
    step for ZeRO-0/1; each window's compute is one micro-batch's forward + backward on the busiest
    stage. Per-operation model, contention: a DP ring inside the host shares its link with the TP
    collectives of the same window, a ring across hosts shares the NICs with the pipeline transfers;
    the link time L becomes min(L / (1 - u), L + windows x the other traffic per window), u the other
    traffic's share of a window (comm.shared_link_time: the other traffic holds the link only while
    the windows' compute runs).
    """
    sc = with_sequence_parallel(sc, sp)
    ranks, link, unhidden, spans, pp_busy = _dp_window_free(sc, acc=acc, zero=zero, tp=tp, cp=cp, pp=pp, dp=dp, mb=mb,
                                                            nics=nics, ep=ep, etp=etp)
    t_f, t_dx, t_dw = microbatch_times(sc, acc=acc, recompute=recompute, schedule="1f1b", tp=tp, cp=cp, pp=pp,
                                       mb=mb, ep=ep, etp=etp, cap=cap)
    window = t_f + t_dx + t_dw
    windows = np.where(_f(zero) >= 2, grad_accum(sc, dp, mb), 1.0)
    if per_op_model(sc):
        ga = grad_accum(sc, dp, mb)
        tp_busy = tp_exposed(sc, acc=acc, recompute=recompute, tp=tp, cp=cp, pp=pp, dp=dp, mb=mb, ep=ep, etp=etp,
                             cap=cap) / ga
        other = np.where(spans, pp_busy, tp_busy)
        link = comm.shared_link_time(link, other * windows, window * windows)
    serial = serial_gathers(sc, acc=acc, zero=zero, tp=tp, pp=pp, ranks=ranks, ga=grad_accum(sc, dp, mb), link=link)
    rest = link - serial  # what prefetch and immediate reduction may hide
    f = sc.overlap_fractions()[1]
    hidden = comm.exposed_time(unhidden, rest / windows, window, windows, True)
    if per_op_model(sc):  # the hidden share still costs the compute kappa of its time (overlap_contention)
        hidden = hidden + _perf(sc, acc).overlap_contention * np.maximum(_f(rest) - hidden, 0.0)
    exposed: FloatArray = f * (hidden + serial) + (1.0 - f) * link
    return exposed


_DP_MEMO = ArrayMemo(entries=1, cells=1 << 12)
"""The last answer of :func:`_dp_window_free` (input entries, all arrays together, up to 4,096)."""


def _dp_window_free(sc: Scenario, *, acc: str, zero: ArrayLike, tp: ArrayLike, cp: ArrayLike, pp: ArrayLike,
                    dp: ArrayLike, mb: ArrayLike, nics: ArrayLike, ep: ArrayLike, etp: ArrayLike) -> tuple[Any, ...]:
    """The parts of :func:`exposed_dp` that read no recompute set (nor the capacity): the ZeRO ranks, the DP link
    time :func:`dp_link`, the unhidable share (bytes / B, plus :func:`dp_tail` in the per-operation model), and in
    the per-operation model whether the ring spans hosts and the pipeline transfers' busy time. The last answer is
    kept for open grids (a table's recompute slices ask for the same; read-only arrays, the scenario held so that
    its id is not reused)."""
    arrays = [np.asarray(x) for x in (zero, tp, cp, pp, dp, mb, nics, ep, etp)]
    key = _DP_MEMO.key(arrays, id(sc), acc)
    hit = _DP_MEMO.get(key) if key is not None else None
    if hit is not None and hit[0] is sc:
        return cast(tuple[Any, ...], hit[1])
    rec = sc.state_recipe()
    ranks = shard_ranks(sc, dp, cp, zero)
    bw = dp_bandwidth(sc, acc=acc, tp=tp, dp=ranks, nics=nics)
    link = dp_link(sc, acc=acc, zero=zero, tp=tp, cp=cp, pp=pp, dp=dp, mb=mb, nics=nics, ep=ep, etp=etp)
    unhidden = comm.zero_dp_unhidden_bytes(zero, memory.embedding_shard_params(sc.model, tp), ranks, rec.weights,
                                           rec.grads) / bw
    spans = pp_busy = None
    if per_op_model(sc):
        unhidden = unhidden + dp_tail(sc, acc=acc, zero=zero, tp=tp, pp=pp, ranks=ranks, bw=bw)
        spans = network.route(sc.system(acc).acc.fabric, ranks, tp).level > 0
        pp_busy = 2.0 * pipeline_transfer(sc, acc=acc, tp=tp, cp=cp, pp=pp, dp=dp, mb=mb, nics=nics)
    out = (ranks, link, unhidden, spans, pp_busy)
    if key is not None:
        for x in out:
            if isinstance(x, np.ndarray) and x.flags.owndata and not any(x is a for a in arrays):
                x.flags.writeable = False  # shared by the slices that ask next (never a caller's own array)
        _DP_MEMO.put(key, (sc, out))
    return out


def serial_gathers(sc: Scenario, *, acc: str, zero: ArrayLike, tp: ArrayLike, pp: ArrayLike, ranks: ArrayLike,
                   ga: ArrayLike, link: ArrayLike) -> FloatArray:
    """ZeRO-3 / FSDP without prefetch (``[memory] prefetch = 0``): each layer's weight gather waits for the
    layer before it has finished, so the gathers (2 of the 3 collectives per layer and micro-batch, 2w of
    their 2w + g bytes per parameter) sit on the critical path and only the reductions may hide:
        serial = 2w / (2w + g) x (link - latency) + 2/3 x latency     (0 with prefetch >= 1).
    A MoE model's expert rings take the same shares."""
    if sc.memory.prefetch >= 1:
        return 0.0 * _f(link)
    rec = sc.state_recipe()
    lat = dp_latency(sc, acc=acc, zero=zero, tp=tp, pp=pp, ranks=ranks, ga=ga, n=heaviest_stage_params(sc, tp, pp))
    lat = np.minimum(lat, _f(link))
    share = 2.0 * rec.weights / (2.0 * rec.weights + rec.grads)
    out: FloatArray = np.where(_f(zero) >= 3, share * (_f(link) - lat) + 2.0 / 3.0 * lat, 0.0)
    return out


def tp_comm(sc: Scenario, *, acc: str, recompute: str, tp: ArrayLike, cp: ArrayLike = 1, pp: ArrayLike, dp: ArrayLike,
            mb: ArrayLike) -> FloatArray:
    """Tensor-parallel communication outside the compute term. Flat model: all on the critical path,
    V_tp / intra-host bandwidth. Per-operation model: 0 here, because the exposed TP time is part of
    each stage's duration (:func:`tp_exposed` reports it)."""
    if per_op_model(sc):
        return np.zeros(np.broadcast(_f(tp), _f(pp), _f(dp), _f(mb), _f(cp)).shape)
    A = sc.system(acc).acc
    rc = effective_recompute(sc, recompute)
    v = comm.tp_volume(_f(mb) * sc.task.seq_len / _f(cp), sc.model.hidden, tp,
                       np.ceil(sc.model.layers / _f(pp)),
                       grad_accum(sc, dp, mb), sc.memory.activation_bytes, rc == "full")
    t: FloatArray = v / A.intra_host_bw
    return t


def offload_wait(sc: Scenario, *, acc: str, offload: str, zero: ArrayLike, recompute: str, sp: bool | None = None,
                 tp: ArrayLike, cp: ArrayLike = 1, pp: ArrayLike, dp: ArrayLike, mb: ArrayLike, ep: ArrayLike = 1,
                 etp: ArrayLike = 0, cap: ArrayLike = 0.0) -> FloatArray:
    """Optimizer-step time per step. With CPU offload: the gradient download beyond the last backward
    (T_wait = max(0, V/B - W)), the CPU Adam pass at the host's memory bandwidth shared by its cards,
    and the BF16 upload. Without offload: 0 in the flat model (the chapter leaves the GPU optimizer
    step out); the GPU Adam pass over the card's shard in the per-operation model
    (ops.optimizer_bytes_per_param)."""
    sc = with_sequence_parallel(sc, sp)
    A = sc.system(acc).acc
    rec = sc.state_recipe()
    shard = _sharded(sc, lambda n, d: n / np.where(_f(zero) >= 1, _f(d), 1.0),
                     tp=tp, pp=pp, ranks=shard_ranks(sc, dp, cp, zero), ep=ep, etp=etp)
    t_f, t_dx, t_dw = microbatch_times(sc, acc=acc, recompute=recompute, schedule="1f1b", tp=tp, cp=cp, pp=pp,
                                       mb=mb, ep=ep, etp=etp, cap=cap)
    cpu_bw = A.host_memory_bw / A.cards_per_host if A.host_memory_bw > 0 else np.inf
    down = comm.offload_wait(2.0 * shard, A.host_link_bw, 2.0 / 3.0 * (t_f + t_dx + t_dw))
    t = down + shard * CPU_ADAM_BYTES_PER_PARAM / cpu_bw + rec.weights * shard / A.host_link_bw
    gpu: Floats = 0.0
    if per_op_model(sc):
        per_param = ops.optimizer_bytes_per_param(rec.weights, rec.grads, rec.master, rec.moments)
        gpu = steptime.optimizer_time(shard, per_param, rates(sc, acc))
    return np.where(offload == "cpu", t, gpu)


def ep_link(sc: Scenario, *, acc: str, recompute: str, tp: ArrayLike, cp: ArrayLike = 1, pp: ArrayLike, mb: ArrayLike,
            nics: ArrayLike, ep: ArrayLike = 1, etp: ArrayLike = 0, cap: ArrayLike = 0.0) -> FloatArray:
    """All-to-all time of one micro-batch on the stage with the most MoE blocks (moe.a2a_per_microbatch):
    dispatch and combine of one card's tokens on the EP group's links, stretched by the load factor.
    Which tiers the rows cross is network.route's decision for the group (ep members etp apart): inside
    one scale-up domain (a host, or a rack-scale NVLink domain) they stay on NVLink, otherwise the share
    bound for other domains leaves through the host's NICs (``[moe] dispatcher``: direct, per-host or
    all-gather, moe.a2a_rows_per_token). The per-operation model derates the links by the collective
    efficiencies (tp_efficiency on the scale-up tier, dp_efficiency beyond) and adds each exchange's
    fixed cost, the call latency and one per message (moe.a2a_latency). 0 for a dense model or EP = 1."""
    a = sc.model
    if not a.moe:
        return 0.0 * _f(tp) * _f(pp) * _f(mb) * _f(nics) * _f(ep) * _f(etp) * _f(cap)
    A = sc.system(acc).acc
    o = sc.moe
    rc = effective_recompute(sc, recompute)
    etp_size = moe.expert_tp_size(etp, tp)
    fabric = A.fabric
    if per_op_model(sc):
        p = _perf(sc, acc)
        fabric = fabric.derated(p.tp_efficiency, p.dp_efficiency)
    domains = moe.ep_domains(ep, etp_size, fabric.scale_up.cards)
    intra, inter = moe.a2a_rows_per_token(a.top_k, ep, domains, o.dispatcher,
                                          node_limit(sc, ep, etp_size, fabric.scale_up.cards))
    tokens, e = card_tokens(sc, tp, mb, cp), sc.memory.activation_bytes
    if o.dispatcher == "all-gather":  # a ring of ep members etp apart, the etp rings of a host sharing its NICs
        ring = network.route(fabric, ep, etp_size, etp_size, nics)
        one = moe.allgather_dispatch_time(tokens, a.hidden, e, intra + inter, ring.bandwidth)
    else:
        path = network.route(fabric, ep, etp_size, A.cards_per_host, nics)
        one = moe.a2a_time(tokens, a.hidden, e, intra, inter, load_factor(sc, ep, cap), path, A.p2p)
    if per_op_model(sc):
        p = _perf(sc, acc)
        step = np.where(domains > 1, p.out_step_latency, p.up_step_latency)
        one = one + moe.a2a_latency(ep, domains, o.dispatcher, p.collective_latency, step)
    one = np.where(_f(ep) > 1, one, 0.0)
    blocks = _moe_stages(sc, 1.0, pp, lambda d, xl, xb, n: n)
    per_mb: FloatArray = moe.a2a_per_microbatch(one, blocks, rc == "full")
    return per_mb


def node_limit(sc: Scenario, ep: ArrayLike, etp_size: ArrayLike, domain_cards: float) -> FloatArray:
    """Domains one token's experts may span (0: any): the smaller of ``[moe] node_limit`` and the model's
    group-limited routing (moe.routed_domain_limit), where either is set."""
    model = moe.routed_domain_limit(sc.model, ep, etp_size, domain_cards)
    stated = float(sc.moe.node_limit)
    both = np.where(model > 0, np.minimum(model, stated), stated)
    return np.where(stated > 0, both, model)


def comm_sm_share(sc: Scenario, acc: str) -> float:
    """Share of an overlapped exchange's time the compute beside it still loses (the SMs and HBM the
    communication kernels hold): the performance catalog's overlap_contention in the per-operation
    model; 0 in the flat model (the chapter's accounting hides an overlapped exchange completely)."""
    return _perf(sc, acc).overlap_contention if per_op_model(sc) else 0.0


def ep_comm(sc: Scenario, *, acc: str, recompute: str, schedule: str, tp: ArrayLike, cp: ArrayLike = 1, pp: ArrayLike,
            dp: ArrayLike, mb: ArrayLike, nics: ArrayLike, ep: ArrayLike = 1, etp: ArrayLike = 0,
            cap: ArrayLike = 0.0) -> FloatArray:
    """Exposed all-to-all per step (moe.a2a_exposed): every micro-batch's exchanges, or with overlap
    (``[moe] a2a_overlap``: all = Megatron-Core's EP overlap on any schedule, auto = DualPipe schedules)
    the unpaired warm-up and cool-down chunks whole (moe.a2a_unpaired_share), and of each paired chunk
    what exceeds one micro-batch's compute plus the compute slowed by the SMs and HBM the exchange holds
    (:func:`comm_sm_share`). The exchanges extend each micro-batch on the critical path; how they
    stretch pipeline bubbles is not modelled (as the flat model's tensor-parallel time)."""
    per_mb = ep_link(sc, acc=acc, recompute=recompute, tp=tp, cp=cp, pp=pp, mb=mb, nics=nics, ep=ep, etp=etp, cap=cap)
    if not sc.model.moe:
        return per_mb * _f(dp) * _f(cp)  # zeros of the right shape
    t_f, t_dx, t_dw = microbatch_times(sc, acc=acc, recompute=recompute, schedule=schedule, tp=tp, cp=cp, pp=pp,
                                       mb=mb, ep=ep, etp=etp, cap=cap)
    ga = grad_accum(sc, dp, mb)
    base, v = schedule_parts(schedule)
    unpaired = moe.a2a_unpaired_share(base, v, pp, np.ceil(ga - 1e-9))
    exposed: FloatArray = moe.a2a_exposed(per_mb, t_f + t_dx + t_dw, ga,
                                          moe.a2a_overlapped(sc.moe.a2a_overlap, schedule), unpaired,
                                          comm_sm_share(sc, acc))
    return exposed


def capacity_drops(sc: Scenario, *, tp: ArrayLike, cp: ArrayLike = 1, mb: ArrayLike, cap: ArrayLike) -> Floats:
    """Share of dispatches a capacity factor drops for one card's micro-batch (moe.routing_drops)."""
    a, o = sc.model, sc.moe
    if not a.moe:
        return 0.0 * _f(tp) * _f(mb) * _f(cap) * _f(cp)
    drops: Floats = moe.routing_drops(card_tokens(sc, tp, mb, cp), a.top_k, a.experts, cap, o.imbalance, o.hot)[0]
    return drops


def ep_group_ok(sc: Scenario, *, acc: str, tp: ArrayLike, cp: ArrayLike = 1, dp: ArrayLike, ep: ArrayLike,
                etp: ArrayLike) -> NDArray[np.bool_]:
    """1 where EP x expert-TP fits the tp x dp (x cp) group (moe.ep_group_ok)."""
    ok: NDArray[np.bool_] = moe.ep_group_ok(sc.model, tp, zero_ranks(dp, cp), ep, etp,
                                            sc.system(acc).acc.cards_per_host)
    return ok


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
    if sc.market.preempt_per_card_s:
        lam = lam + preemption_rate(sc, cards)
    return lam


def preemption_rate(sc: Scenario, cards: ArrayLike) -> Floats:
    """Spot preemptions per second of the job: cards x rho (rho per card-second; 0 off the spot market)."""
    return _f(cards) * sc.market.preempt_per_card_s


def reacquire_overhead(sc: Scenario, cards: ArrayLike) -> Floats:
    """Reacquisition delay per unit useful time: lam_preempt x d (each preemption waits d for the cards
    on top of the redo and the restore that :func:`failure_rate` already charges)."""
    return preemption_rate(sc, cards) * sc.market.reacquire_s


def overhead(sc: Scenario, save_mode: str, cards: ArrayLike, save_interval: ArrayLike) -> Floats:
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
    wait = reacquire_overhead(sc, cards) if sc.market.preempt_per_card_s else 0.0
    if rel.failure_model == "poisson":
        return reliability.overhead_poisson(tau, pause, lam, rel.restore_s) + lam * lag + wait
    return reliability.overhead_first_order(tau, pause, lam, rel.restore_s, lag) + wait


def overhead_parts(sc: Scenario, save_mode: str, cards: ArrayLike,
                   save_interval: ArrayLike) -> tuple[Floats, Floats, Floats]:
    """First-order split of the overhead: (save c/tau, redo lam (tau/2 + w), restart lam r)."""
    rel = sc.reliability
    write = checkpoint_write_time(sc)
    lam = failure_rate(sc, cards)
    pause, lag = (write, 0.0) if save_mode == "sync" else (rel.snapshot_copy_s, rel.snapshot_copy_s + write)
    tau = _f(save_interval)
    return (reliability.save_overhead(tau, pause), reliability.redo_overhead(tau, lam, lag),
            reliability.restart_overhead(lam, rel.restore_s)
            + (reacquire_overhead(sc, cards) if sc.market.preempt_per_card_s else 0.0))


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
    return np.where(np.isfinite(tau), tau, sc.task.deadline_s)


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


def step_sigma(sc: Scenario, acc: str) -> tuple[float, str]:
    """Log-sd of measured / predicted step time and where it comes from, per accelerator and stack: the
    scenario's ``risk.step_sigma``; else the card's ``residual_sigma`` (performance.toml) when it was
    measured on the scenario's stack (its ``residual_sigma_stacks``) or is a calibration's (no stacks: one's
    own runs); else the larger of the card's (finish.DEFAULT_STEP_SIGMA for a card no table covers) and
    the stack's ``residual_sigma`` (stacks.toml: its runs' spread, or the public anchors' for a stack no
    table ran). The source says which was used and why."""
    if sc.risk.step_sigma is not None:
        return sc.risk.step_sigma, "given (risk.step_sigma)"
    perf = _perf(sc, acc)
    source = str(getattr(perf, "residual_sigma_source", ""))  # the catalog refuses a residual_sigma without one
    on = tuple(getattr(perf, "residual_sigma_stacks", ()))
    stack = sc.stack
    if source and (not on or stack.name in on):
        return float(perf.residual_sigma), source
    card, card_source = (float(perf.residual_sigma), source) if source else \
        (finish.DEFAULT_STEP_SIGMA, finish.DEFAULT_STEP_SIGMA_SOURCE)
    where = f"measured on {', '.join(on)}" if on else "no table covers the card"
    if stack.residual_sigma > card:
        return stack.residual_sigma, (f"stack {stack.name}: {stack.sources.get('residual_sigma', 'stated')}; "
                                      f"the card's {card:.3f} ({where}) is smaller")
    return card, f"{card_source}; stack {stack.name}: {stack.residual_sigma:.3f}, smaller"


def save_pause_lag(sc: Scenario, save_mode: str) -> tuple[float, float]:
    """(pause c, commit lag w) of one save: sync (write time, 0); async (snapshot copy, copy + write)."""
    write = checkpoint_write_time(sc)
    rel = sc.reliability
    return (write, 0.0) if save_mode == "sync" else (rel.snapshot_copy_s, rel.snapshot_copy_s + write)


def exposure(sc: Scenario, save_mode: str, cards: float, save_interval: float) -> finish.Exposure:
    """What the distribution's sources read from one plan (models/finish.py)."""
    rel = sc.reliability
    _, lag = save_pause_lag(sc, save_mode)
    return finish.Exposure(cards=float(cards), tau=float(save_interval), lag=lag, restore=rel.restore_s,
                           card_mtbf_s=rel.card_mtbf_s, spike_interval_s=rel.event_interval_s, risk=sc.risk)


def finish_law(sc: Scenario, acc: str, save_mode: str, cards: float, save_interval: float,
               step_s: float) -> finish.Distribution:
    """The finish-time distribution of one plan: W = iterations x step, its saves, sources and sigma."""
    pause, _ = save_pause_lag(sc, save_mode)
    sigma, source = step_sigma(sc, acc)
    return finish.plan_distribution(reserved=sc.task.reserved_s, work=iteration_count(sc) * float(step_s),
                                    pause=pause, exposure=exposure(sc, save_mode, cards, save_interval),
                                    sigma=sigma, sigma_source=source)


_CHANCE_MEMO: dict[tuple[Any, ...], dict[complex, float]] = {}
"""Chance roots W_max (s) by what they depend on (:func:`_chance_key`), then by cards + i interval."""
_CHANCE_MEMO_SIZE = 200_000


def _law_inputs(sc: Scenario, acc: str, save_mode: str, cards: FloatArray, tau: FloatArray
                ) -> tuple[FloatArray, float, FloatArray]:
    """(save factors 1 + c / tau, sigma, event cumulants (3, n)) of plans given by card and interval arrays."""
    pause, lag = save_pause_lag(sc, save_mode)
    sigma, _ = step_sigma(sc, acc)
    rel = sc.reliability
    x = finish.Exposure(cards=cards, tau=tau, lag=lag, restore=rel.restore_s, card_mtbf_s=rel.card_mtbf_s,
                        spike_interval_s=rel.event_interval_s, risk=sc.risk)
    return 1.0 + pause / tau, sigma, finish.event_cumulants(*finish.events_over(x))


def _chance_key(sc: Scenario, acc: str, save_mode: str) -> tuple[Any, ...]:
    """What a chance root depends on besides (cards, interval): level, deadline, margins, save mode's pause and
    lag, restart, failure and rollback rates, the risk inputs and the step sigma."""
    rel = sc.reliability
    pause, lag = save_pause_lag(sc, save_mode)
    return (sc.task.confidence, sc.task.deadline_s, sc.task.reserved_s, pause, lag, rel.restore_s, rel.card_mtbf_s,
            rel.event_interval_s, sc.risk, step_sigma(sc, acc)[0])


def _pairs(cards: ArrayLike, interval: ArrayLike) -> tuple[NDArray[np.complex128], NDArray[np.intp], tuple[int, ...]]:
    """The distinct (cards, interval) pairs of two broadcast arrays, as complex numbers cards + i interval
    (np.unique sorts them by cards, then interval), with the inverse index and the broadcast shape."""
    c, t = np.broadcast_arrays(_f(cards), _f(interval))
    uniq, inverse = np.unique(c.reshape(-1) + 1j * t.reshape(-1), return_inverse=True)
    return uniq, inverse.reshape(-1), tuple(c.shape)


def chance_fill(sc: Scenario, acc: str, asks: list[tuple[str, ArrayLike, ArrayLike]]) -> None:
    """Find the chance roots (finish.max_work) of every (save mode, cards, interval) asked that is not
    remembered yet, all in ONE vectorised root finding: one row per distinct (mode, cards, interval)
    tuple, whatever the number of asks (the enumerator asks for its whole space before it starts)."""
    q = sc.task.confidence
    if q is None:
        raise ValueError("chance_fill needs a confidence")
    found: list[tuple[dict[complex, float], NDArray[np.complex128]]] = []
    parts = []
    for mode, cards, interval in asks:
        memo = _CHANCE_MEMO.setdefault(_chance_key(sc, acc, mode), {})  # the key hashed once per ask
        pairs = _pairs(cards, interval)[0]
        todo = pairs[[p not in memo for p in pairs.tolist()]]
        if len(todo):
            found.append((memo, todo))
            parts.append(_law_inputs(sc, acc, mode, todo.real, todo.imag))
    if not found:
        return
    saves = np.concatenate([p[0] for p in parts])
    kap = np.concatenate([p[2] for p in parts], axis=1)
    work = finish.max_work(q, sc.task.deadline_s, sc.task.reserved_s, saves, parts[0][1], (kap[0], kap[1], kap[2]))
    if sum(len(m) for m in _CHANCE_MEMO.values()) + len(work) > _CHANCE_MEMO_SIZE:
        for m in _CHANCE_MEMO.values():
            m.clear()
    start = 0
    for memo, todo in found:
        memo.update(zip(todo.tolist(), work[start:start + len(todo)].tolist(), strict=True))
        start += len(todo)


def chance_step_max(sc: Scenario, acc: str, save_mode: str, cards: ArrayLike, save_interval: ArrayLike
                    ) -> FloatArray:
    """The largest step (s) whose finish meets the deadline with probability >= the confidence:
    W_max / iterations (finish.max_work), element-wise over cards and save intervals: one root per
    distinct (cards, interval) pair, all found at once (:func:`chance_fill`), and remembered across calls
    (the tables, the evaluator and every chunk of an enumeration ask for the same pairs)."""
    if sc.task.confidence is None:
        raise ValueError("chance_step_max needs a confidence")
    pairs, inverse, shape = _pairs(cards, save_interval)
    memo = _CHANCE_MEMO.get(_chance_key(sc, acc, save_mode), {})
    keys = pairs.tolist()
    if not all(k in memo for k in keys):
        chance_fill(sc, acc, [(save_mode, pairs.real, pairs.imag)])
        memo = _CHANCE_MEMO[_chance_key(sc, acc, save_mode)]
    per_pair = np.array([memo[k] for k in keys])
    out: FloatArray = (per_pair[inverse] / iteration_count(sc)).reshape(shape)
    return out


def finish_quantile(sc: Scenario, acc: str, save_mode: str, cards: ArrayLike, save_interval: ArrayLike,
                    step_s: ArrayLike, q: float) -> FloatArray:
    """The q-quantile of the finish time (s) element-wise (finish.quantiles; one root per distinct plan)."""
    c, t, s = np.broadcast_arrays(_f(cards), _f(save_interval), _f(step_s))
    keys = np.stack([c.reshape(-1), t.reshape(-1), s.reshape(-1)], axis=1)
    uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
    saves, sigma, kap = _law_inputs(sc, acc, save_mode, uniq[:, 0], uniq[:, 1])
    out = finish.quantiles(q, sc.task.reserved_s, iteration_count(sc) * uniq[:, 2], saves, sigma,
                           (kap[0], kap[1], kap[2]))
    res: FloatArray = out[inverse.reshape(-1)].reshape(c.shape)
    return res
