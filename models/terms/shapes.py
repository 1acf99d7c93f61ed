"""Shapes the other terms share: the stage classes a memory bound takes, the batch and gradient-accumulation
arithmetic, context-parallel shapes, ZeRO and shard ranks, whether the per-operation model applies, the
schedule's parts, the layer split over pipeline stages (whole layers, dense-MLP blocks, chunks) and the
MoE router's load factor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from tpopt.models import context, memory, moe, steptime
from tpopt.models.arch import ModelArch, block_gemm_params, is_moe_layer
from tpopt.models.batch import iterations_with_ramp
from tpopt.models.compute import iterations
from tpopt.models.numeric import FloatArray, Floats
from tpopt.models.plan import Scenario, split_schedule

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


def cp_attention_scale(sc: Scenario, cp: ArrayLike) -> FloatArray:
    """The busiest card's attention time over a balanced, as-modelled share (per-operation model): the split's
    imbalance (:func:`cp_imbalance`) x, under ring attention, the stack's later-step cost
    (context.ring_step_cost at the stack's ring_step_efficiency; 1 where the stack states none)."""
    scale: FloatArray = cp_imbalance(sc, cp)
    if sc.cp_method == "ring":
        scale = scale * context.ring_step_cost(cp, sc.stack.ring_step_efficiency)
    return scale


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
    layers spread as evenly as each stage allows; None when a stage has fewer than v layers.

    Megatron-Core's ``account_for_embedding_in_pipeline_split`` / ``account_for_loss_in_pipeline_split``:
    the input embedding counts as one layer of the first virtual chunk and the LM head with the loss as
    one layer of the last, so a first (last) stage of v - 1 transformer layers runs v chunks, the first
    (last) of them holding only the embedding (the loss), 0 transformer layers here. Llama 3.1 405B, 126
    layers on PP 16 x VP 8: 126 + 2 = 128 = 16 x 8, stages of 7, 8 x 14, 7 layers, every chunk one layer
    but the embedding's and the loss's."""
    p = len(split)
    out = [0] * (v * p)
    for s, n in enumerate(split):
        if n != int(n):
            return None
        empty = [c for c, ok in ((0, s == 0), (v - 1, s == p - 1)) if ok and v > 1 and int(n) < v]
        held = [c for c in range(v) if c not in empty[:v - int(n)]]
        if int(n) < len(held) or int(n) < 1:
            return None
        base, extra = divmod(int(n), len(held))
        for i, c in enumerate(held):
            out[c * p + s] = base + (1 if i < extra else 0)
    return out



CHUNK_WEIGHT_UNIT = 8
"""Time weight of one transformer layer in :func:`chunk_weights` (the head's cost in eighths of a layer)."""


def chunk_weights(split: Sequence[float], v: int, loss_layers: float) -> list[int] | None:
    """Time weights of the interleaved chunks in path order, by which the pipeline model divides a stage's time
    among its chunks: u x (the chunk's layers, :func:`chunk_layers`), the last chunk of the path plus
    round(u x loss_layers), u = :data:`CHUNK_WEIGHT_UNIT`; None where :func:`chunk_layers` is None.

    The LM head and the loss run in the last virtual chunk of the last stage only (Megatron-Core's model chunks;
    with ``account_for_loss_in_pipeline_split`` that chunk holds one transformer layer fewer), so they take no
    share of the stage's other chunks: ``loss_layers`` is their cost in layers (:func:`loss_chunk_layers`).
    Llama 3.1 405B on PP 16 x VP 4: the last stage's chunks hold 2, 2, 2, 1 layers and the head 0.66 of a layer,
    weights 16, 16, 16, 13 (by layers alone 2/7 of the head would sit on each two-layer chunk)."""
    chunks = chunk_layers(split, v)
    if chunks is None:
        return None
    out = [CHUNK_WEIGHT_UNIT * n for n in chunks]
    out[-1] += int(round(CHUNK_WEIGHT_UNIT * loss_layers))
    return out


def loss_chunk_layers(a: ModelArch) -> float:
    """The LM head's matrix work in transformer layers: V h / (the linear weights one token multiplies in a
    block, activated experts only): Llama 3.1 405B 128,256 x 16,384 / 3.19e9 = 0.66, Llama 3 70B 1.23, Llama 3
    8B 2.4 (its GEMMs run at the blocks' rates; the loss's own memory passes are left out)."""
    per_block = block_gemm_params(a) / a.layers
    return float(a.vocab * a.hidden / per_block) if per_block > 0 else 0.0

# ---------------------------------------------------------------------------------------------
# memory terms (bytes per card)


def load_factor(sc: Scenario, ep: ArrayLike, capacity_factor: ArrayLike) -> Floats:
    """Rows the busiest expert-parallel rank processes over a balanced router (moe.load_factor; 1 if dense)."""
    o = sc.moe
    phi: Floats = moe.load_factor(sc.model.experts, ep, capacity_factor, o.imbalance, o.hot)
    return phi
