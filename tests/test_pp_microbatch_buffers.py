"""A per-micro-batch pipeline runtime (torch.distributed.pipelining's PipelineStage, torchtitan's pipeline: the stack's
``pp_buffers``) holds a receive buffer per micro-batch for the activations and one for the gradients for the whole
step, and keeps the outputs it produced (output_chunks; on every stage in the torch of torchtitan's Dec 2024
benchmarks, on the last stage since pytorch/pytorch#153383).

Golden counts derived here from that source and the 1F1B in-flight counts min(m, p - g) of torch's Schedule1F1B
(warmup_chunks = min(n_microbatches, num_stages - stage_index)), not from the code under test."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import build_scenario
from tpopt.catalogs.stacks import stack_profile
from tpopt.models import memory
from tpopt.models import terms as T

CAT = load_catalog()


def test_units_per_rank_under_1f1b():
    """p = 4, m = 8, k = 4, 3, 2, 1. Outputs kept: first 8 gradient buffers + 8 outputs = 16; middle stage g adds
    8 - k_g receive buffers beyond the inputs in flight: 16 + 5 = 21, 16 + 6 = 22; last: 8 - 1 = 7 receive
    buffers and 8 outputs. Outputs not kept: a non-last stage holds only its k_g outputs in flight."""
    ks = [4.0, 3.0, 2.0, 1.0]
    assert memory.per_microbatch_buffer_units(4, 8, ks, True) == [(16.0, 0.0), (21.0, 0.0), (22.0, 0.0), (7.0, 8.0)]
    assert memory.per_microbatch_buffer_units(4, 8, ks, False) == [(12.0, 0.0), (16.0, 0.0), (16.0, 0.0), (7.0, 8.0)]


def test_interleaved_counts_every_virtual_stage_without_in_flight_credit():
    """p = 2, v = 2: rank 0 holds virtual stages 0 and 2, rank 1 stages 1 and 3 (the last). m = 4, outputs kept:
    rank 0: stage 0 8, stage 2 4 + 8 = 12 -> 20; rank 1: stage 1 4 + 8 = 12, stage 3 4 -> 16, and 4 outputs."""
    assert memory.per_microbatch_buffer_units(2, 4, None, True, v=2) == [(20.0, 0.0), (16.0, 4.0)]


def _scenario():
    return build_scenario({"model": {"name": "llama3-405b"},
                           "task": {"tokens": "1B", "seq_len": 8192, "global_batch": 256, "precision": "fp8-mixed"},
                           "schedule": {"deadline": "1000d"},
                           "hardware": {"accelerator": "h100-sxm", "stack": "torchtitan-compile"}}, CAT)


def test_torchtitan_keeps_the_pipeline_tensors_of_every_micro_batch():
    """Llama 3.1 405B, TP 8 x PP 8 x DP 8, 1F1B, micro-batches of 4 x 8,192 tokens (m = 256 / (8 x 4) = 8): one
    boundary tensor 4 x 8,192 x 16,384 x 2 B / 8 = 128 MiB; the first rank holds 16 (2 GiB) where Megatron's send /
    receive pair holds 4 (0.5 GiB, in the temporaries); the last rank 7 of them and 8 BF16 logit shards
    (4 x 8,192 x 128,256 / 8 x 2 B each)."""
    assert stack_profile("torchtitan-compile").pp_buffers == "per-microbatch-outputs"
    assert stack_profile("megatron-core").pp_buffers == "send-recv"
    sc = _scenario()
    plain = replace(sc, stack=replace(sc.stack, pp_buffers="send-recv"))
    beta = 4 * 8192 * 16384 * 2 / 8
    logit = 4 * 8192 * 128256 / 8 * 2
    kw = dict(schedule="1f1b", recompute="full", tp=8, pp=8, dp=8, mb=4)
    first = float(T.activations(sc, **kw, stage="first")) - float(T.activations(plain, **kw, stage="first"))
    assert first == pytest.approx(16 * beta)
    last = float(T.activations(sc, **kw, stage="last")) - float(T.activations(plain, **kw, stage="last"))
    assert last == pytest.approx(7 * beta + 8 * logit)
    tk = dict(zero=3, tp=8, pp=8, mb=4, stage="first")
    assert float(T.temporary(plain, **tk)) - float(T.temporary(sc, **tk)) == pytest.approx(4 * beta)


def test_interleaved_credits_the_chunk_inputs_in_flight():
    """p = 8, v = 2, m = 8: rank 0 forwards all 8 micro-batches of both chunks before its first backward (K = 16):
    its second chunk's 8 receive buffers all hold inputs in flight (credit 16 - 8 = 8), so 0 of them count, plus
    2 x 8 gradient buffers and 2 x 8 kept outputs = 32. The last rank with K = 9 chunk micro-batches in flight:
    16 receive buffers - 9 = 7, its first chunk's 8 gradient buffers and 8 outputs: 23, and 8 logit shards."""
    units = memory.per_microbatch_buffer_units(8, 8, [16.0] * 7 + [9.0], True, v=2)
    assert units[0] == (32.0, 0.0)
    assert units[7] == (23.0, 8.0)


def test_interleaved_chunks_in_one_round_hold_one_chunks_unsharded_gradients():
    """torch's PipelineScheduleMulti calls a chunk's FSDP post_backward after that chunk's own last micro-batch
    (last_backward = backward_counter[stage_index] == n_microbatches): its unsharded FP32 gradients are
    reduce-scattered and freed. ScheduleInterleaved1F1B runs the backwards chunk by chunk in rounds of p micro-batches
    (backward_stage_index: v - 1 - ((step - warmup) // per_round) % v), so with m = p = 8 (one round) a rank holds one
    of its v = 2 chunks' gradients at a time: half the stage's. Middle stage of Llama 3.1 405B (16 layers, TP 8): a
    layer has h (h + 2 x 1,024) + h^2 attention and 3 h x 53,248 MLP parameters (h = 16,384) = 3,187,671,040 (norms
    aside); 16 / 8 of them x 4 B x (1 - 1/2) less than under 1F1B. With m = 16 (DP 4: 256 / (4 x 4)) the chunks
    alternate (two rounds) and every gradient accumulates; Megatron's runtime (send-recv) is not torch's."""
    sc = _scenario()
    h = 16384
    layer = h * (h + 2 * 1024) + h * h + 3 * h * 53248
    tk = dict(zero=3, tp=8, pp=8, mb=4, stage="middle")
    drop = float(T.temporary(sc, **tk, schedule="1f1b", dp=8)) - float(T.temporary(sc, **tk, schedule="interleaved:2",
                                                                                       dp=8))
    assert drop == pytest.approx(16 * layer / 8 * 4 * 0.5, rel=1e-4)
    assert float(T.temporary(sc, **tk, schedule="interleaved:2", dp=4)) == float(T.temporary(sc, **tk, schedule="1f1b",
                                                                                               dp=4))
    plain = replace(sc, stack=replace(sc.stack, pp_buffers="send-recv"))
    assert float(T.temporary(plain, **tk, schedule="interleaved:2", dp=8)) == float(
        T.temporary(plain, **tk, schedule="1f1b", dp=8))
