"""Pipeline-parallel step time and activation lifetime: a discrete-event model (chapter 10.3.2).

One training step runs ``m`` micro-batches through ``p`` pipeline stages (one card each). Every stage
executes its operations one at a time in a fixed **slot order** chosen by the schedule; an operation
starts when the stage is free *and* its input has arrived:

* ``F`` forward of a micro-batch on a stage (on one chunk of the stage when interleaved);
* ``B`` backward. With a split backward (``zb-*``, ``dualpipe*``) ``B`` is only dX, the gradient with
  respect to the stage input, which the previous stage waits for; otherwise ``B`` is the whole backward
  (dX + dW in one operation, ``Event.fused``);
* ``W`` dW, the weight gradient of the same micro-batch on the same stage; it only has to follow its
  own ``B`` and fills gaps;
* ``U`` the optimizer update of a stage, right after the stage's last backward work.

Relations (times in seconds)::

    start(op)  = max(end(previous op on the stage), arrival(input))
    arrival    = end(producer on the neighbouring stage) + transfer
    end(op)    = start(op) + duration(op)
    completion = max over stages s of (end of s's last B/W + update_s)
    idle_s     = completion - busy_s            bubble fraction = sum_s idle_s / (p x completion)

The forward direction (activations, stage s -> s+1) and the backward direction (gradients,
s+1 -> s) are independent links. A link is a pure latency (no queueing): an operation sends at most one
message per link, so links only contend when a transfer outlasts the operations that feed it.

Durations are given per *layer group* ``k = 0 .. p-1`` (the layers stage k holds in the plain
schedules): ``forward[k]``, ``backward_input[k]`` (dX), ``backward_weight[k]`` (dW). Interleaved cuts a
group into ``v`` chunks whose times are proportional to their layer counts; DualPipe runs group ``s``
for the down direction and group ``p-1-s`` for the up direction on stage ``s`` (two parameter copies).

Activation memory follows from the slot order alone: a micro-batch's activations on a stage (chunk)
are live from the start of its ``F`` until the end of the operation that completes its backward there,
the fused ``B``, or ``W`` when the backward is split. The chapter's event model keeps the whole set
until dW, and so does this one; the zero-bubble paper counts the smaller working set dW needs.

The op order depends only on ``(schedule, p, m, v)``: :func:`completion_time` runs the same max-plus
recurrence once for many duration sets (numpy, vectorised over the duration arrays).

Modules (split by what each part computes): :mod:`.schedules` (names, slot orders, shape checks),
:mod:`.closed_forms` (the chapter's closed forms and bubble ratios), :mod:`.program` (the compiled op
order, its shape caches, the cancellation tick), :mod:`.simulation` (the event simulation, its record, the
activation peak), :mod:`.completion` (the completion time vectorised over duration sets, exact closed forms
of fill-drain and 1F1B, the memo of answers), :mod:`.bounds` (the solver's bounds of the completion time and
of the activation peak). This module re-exports every public name, and the private ones that other modules
and the tests reach; module state (caches, memos) lives in the module that reads it, so a test that
replaces it patches that module (``completion._MEMO``).
"""

from __future__ import annotations

from tpopt.models.pipeline.bounds import (
    BOUND_SLACK,
    _stage_sum,
    bound_pass,
    completion_bounds,
    completion_bounds_rows,
    completion_bounds_rows_of,
    group_bound_form,
    peak_inflight_bounds,
    peak_inflight_max,
    peak_inflight_stage_bounds,
)
from tpopt.models.pipeline.closed_forms import (
    bubble_1f1b,
    bubble_dualpipe,
    bubble_interleaved,
    bubble_ratio_1f1b,
    bubble_ratio_interleaved,
    bubble_zb_h1,
    bubble_zb_h2,
    bubble_zb_h2_synchronous,
    fill_drain_time,
    parameter_copies,
    split_layers,
    utilisation,
)
from tpopt.models.pipeline.completion import (
    _MEMO,
    CLOSED_FORM,
    MEMO_CALL,
    MEMO_ENTRIES,
    RECURRENCE_CELLS,
    _completion_recurrence,
    _CompletionMemo,
    _waves,
    completion_closed_form,
    completion_for_shapes,
    completion_time,
    group_shapes,
    shape_ok,
    transfers_1f1b,
)
from tpopt.models.pipeline.program import CACHE_OPS, TICK_EVERY, _program, ticking
from tpopt.models.pipeline.schedules import (
    DUALPIPE_RULE,
    KINDS,
    SCHEDULES,
    SPLIT_BACKWARD,
    Index,
    PerGroup,
    Slot,
    _check_shape,
    shape_error,
    slot_orders,
)
from tpopt.models.pipeline.simulation import (
    Event,
    PipelineResult,
    _chunk_fractions,
    buffer_counts,
    peak_inflight,
    simulate,
)

__all__ = [
    "BOUND_SLACK", "CACHE_OPS", "CLOSED_FORM", "DUALPIPE_RULE", "Event", "Index", "KINDS", "MEMO_CALL",
    "MEMO_ENTRIES", "PerGroup", "PipelineResult", "RECURRENCE_CELLS", "SCHEDULES", "SPLIT_BACKWARD", "Slot",
    "TICK_EVERY", "_CompletionMemo", "_MEMO", "_check_shape", "_chunk_fractions", "_completion_recurrence",
    "_program", "_stage_sum", "_waves", "bubble_1f1b", "bubble_dualpipe", "bubble_interleaved", "bubble_ratio_1f1b",
    "bubble_ratio_interleaved", "bound_pass", "bubble_zb_h1", "bubble_zb_h2", "bubble_zb_h2_synchronous",
    "buffer_counts", "completion_bounds", "completion_bounds_rows", "completion_bounds_rows_of",
    "completion_closed_form", "completion_for_shapes",
    "completion_time", "fill_drain_time", "group_bound_form", "group_shapes", "parameter_copies", "peak_inflight",
    "peak_inflight_bounds", "peak_inflight_max", "peak_inflight_stage_bounds", "shape_error", "shape_ok",
    "simulate", "slot_orders", "split_layers", "ticking", "transfers_1f1b", "utilisation",
]

