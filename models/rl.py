"""Reinforcement-learning loop relations (chapter 10.5): throughput, hand-off peaks, weight sync, async."""

from __future__ import annotations


def effective_sample_rate(generate: float, verify: float, learn: float, kept: float) -> float:
    """Samples per second that reach the update: min(r_learn, q x min(r_gen, r_verify)).

    12 / 6 / 8 samples/s, q = 0.75 -> 4.5; doubling generation -> 4.5; doubling verification -> 8
    (9 offered, the learner caps it).
    """
    return min(learn, kept * min(generate, verify))


def handoff_peak(phases: list[list[float]]) -> float:
    """Peak memory of a hand-off: the largest sum of what is live in any phase (GiB, bytes, ...).

    Shared H100 (74.5 GiB): keeping the train state (40) while loading generation weights (15.3) and
    KV (24) with 4 common -> 83.3 GiB (does not fit); loading weights, freeing the train state, then
    allocating KV -> max(40 + 15.3 + 4, 15.3 + 24 + 4) = 59.3 GiB.
    """
    return max(sum(p) for p in phases)


def weight_sync_volume(expert_bytes: float, receivers: int, sharded: bool) -> float:
    """Bytes sent to update the generators' experts: every receiver gets all (receivers x size) or
    only its shard (size in total). EP16, 423 GiB: 6,768 GiB vs 423 GiB."""
    return expert_bytes if sharded else receivers * expert_bytes


def cycle_times(generate_s: float, learn_s: float, sync_s: float) -> tuple[float, float]:
    """(synchronous cycle, asynchronous steady-state cycle): gen + learn + sync and
    max(gen, learn) + sync. 40 / 16 / 4 s -> 60 s and 44 s."""
    return generate_s + learn_s + sync_s, max(generate_s, learn_s) + sync_s


def async_gain(generate_s: float, learn_s: float, sync_s: float, kept: float) -> float:
    """Relative change of effective samples per second going async with a kept fraction q:
    (q / T_async) / (1 / T_sync) - 1. Async wins iff q > T_async / T_sync (44 / 60 = 73.3 %);
    q = 0.8 -> +9 %, q = 0.7 -> -5 %."""
    sync, asyn = cycle_times(generate_s, learn_s, sync_s)
    return kept * sync / asyn - 1.0


def routing_record_bytes(tokens: int, layers: int, top_k: int, id_bytes: int) -> int:
    """Routing-replay record: tokens x layers x top-k expert ids. 8,192 x 48 x 8: 6 MiB in uint16,
    12 MiB in int32."""
    return tokens * layers * top_k * id_bytes
