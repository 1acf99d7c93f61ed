"""Reinforcement-learning loop relations (chapter 10.5): throughput, hand-off peaks, weight sync, async.

The loop of one step: generate prompts x samples responses (:mod:`tpopt.models.generation`), verify them,
learn on the kept ones, send the new weights to the generators. Stage rates combine as
r_effective = min(r_learn, q min(r_gen, r_verify)); a synchronous step takes rollout + learn + sync, a
one-step-asynchronous one max(rollout, learn) + sync, and async pays off above a kept fraction
q* = q_sync T_async / T_sync (generation-bound). On shared cards the hand-off from training to
generation peaks at train + weights + KV + common in naive order and at
max(train + weights, weights + KV) + common in staged order. Also the inputs of an RL run as plain
data (:class:`RLTask`, :class:`RLSearch`, :class:`RLScenario`); the TOML reader is
:mod:`tpopt.catalogs.rl` and the solve :mod:`tpopt.optimizer.rl`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from numpy.typing import ArrayLike

from tpopt.models.generation import Lengths
from tpopt.models.network import Fabric, route
from tpopt.models.plan import Scenario


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


# ---------------------------------------------------------------------------------------------
# the inputs of an RL run (plain data; the TOML reader is tpopt.catalogs.rl)

PLACEMENTS = ("separate", "shared")
SYNC_METHODS = ("sharded", "broadcast")


@dataclass(frozen=True)
class Verifier:
    """How samples are scored: ``none`` (free), ``cpu`` (workers x seconds per sample, streaming next
    to generation) or ``reward-model`` (a model run on the rollout cards after generation)."""

    kind: str = "none"
    workers: float = 0.0
    seconds_per_sample: float = 0.0
    reward_model: object = None  # ModelArch of the reward model


@dataclass(frozen=True)
class RLTask:
    """What an RL run must do, and the engine assumptions its relations use (SI units)."""

    prompts_per_step: int
    samples_per_prompt: int
    prompt: Lengths
    response: Lengths
    samples: float  # useful samples (kept, reaching the update) to train
    kept: float = 1.0  # fraction of verified samples that reach the update at staleness 1
    kept_sync: float = 1.0  # the same on-policy (staleness 0)
    staleness: int = 0  # allowed policy lag: 0 = synchronous only, 1 = one-step async allowed
    verifier: Verifier = field(default_factory=Verifier)
    extra_forwards: int = 0  # forward passes per step besides the update (reference / old-policy log-probs)
    weight_bytes: float = 2.0  # rollout weights, bytes per parameter
    kv_bytes: float = 2.0  # KV cache, bytes per value
    kv_pool: float | None = None  # fixed KV pool per card (None: what memory leaves)
    common: float = 4 * 2**30  # memory every phase holds (runtime buffers, engine workspace)
    hbm_efficiency: float = 0.70  # decode: fraction of HBM bandwidth reached
    inference_efficiency: float = 0.50  # prefill and decode matmuls: fraction of dense peak
    allreduce_latency: float = 2e-5  # per TP all-reduce call (chapter 10.3.4: 0.02 ms)
    max_sequences: int = 1024  # concurrent sequences per engine (engine limit)

    @property
    def batch(self) -> int:
        """Samples generated per step: prompts x samples per prompt."""
        return self.prompts_per_step * self.samples_per_prompt


@dataclass(frozen=True)
class RLSearch:
    """Domains of the RL-level decisions (the trainer's layout uses the scenario's [search])."""

    placement: tuple[str, ...] = PLACEMENTS
    rollout_tp: tuple[int, ...] = (1, 2, 4, 8)
    rollout_batch: tuple[int, ...] = ()  # empty: the largest batch that fits (up to max_sequences)
    weight_sync: tuple[str, ...] = SYNC_METHODS


@dataclass(frozen=True)
class RLScenario:
    """An RL run: the learner's pre-training scenario (its [task] derived from the loop), the loop
    itself, and the RL-level decision domains. The policy is ``trainer.model``."""

    trainer: Scenario  # the learner's pre-training scenario
    task: RLTask
    search: RLSearch = field(default_factory=RLSearch)
    nics_per_host: int = 0  # 0: each accelerator's default
    name: str = ""


# ---------------------------------------------------------------------------------------------
# relations of the loop


def steps_needed(samples: float, kept: float, batch: int) -> int:
    """Steps to train ``samples`` useful samples when each step keeps kept x batch: ceil(S / (q B))."""
    return int(math.ceil(samples / (kept * batch) - 1e-9))


def cpu_verify_time(samples: float, seconds_per_sample: float, workers: float) -> float:
    """Verification of a step on CPU workers: samples x seconds per sample / workers."""
    return samples * seconds_per_sample / workers


def rollout_time(generate_s: float, verify_s: float, verifier: str, last_sample_s: float = 0.0) -> float:
    """Rollout stage of a step. CPU verification streams next to generation and ends at
    max(t_gen + one sample's check, t_verify); a reward model on the rollout cards runs after
    generation, t_gen + t_rm; without a verifier, t_gen."""
    if verifier == "cpu":
        return max(generate_s + last_sample_s, verify_s)
    if verifier == "reward-model":
        return generate_s + verify_s
    return generate_s


def cycle_time(rollout_s: float, learn_s: float, sync_s: float, staleness: int, swap_s: float = 0.0) -> float:
    """One step of the loop: synchronous gen + learn + sync (+ the state swap of shared cards);
    one-step async max(gen, learn) + sync (chapter 10.5.3; see :func:`cycle_times`)."""
    sync, asyn = cycle_times(rollout_s, learn_s, sync_s)
    return asyn if staleness >= 1 else sync + swap_s


def break_even_kept(rollout_s: float, learn_full_s: float, sync_s: float, kept_sync: float = 1.0,
                    swap_s: float = 0.0) -> float:
    """Kept fraction above which one-step async trains more useful samples per second than sync.

    The learner's time scales with the samples it keeps: learn(q) = q x learn_full. Sync delivers
    q_s / (roll + q_s learn_full + sync + swap) per unit batch, async q / (max(roll, q learn_full) + sync).
    Generation-bound, the async cycle does not depend on q and q* = q_s T_async / T_sync, the chapter's
    44 / 60 = 73.3 %; learner-bound, q* = q_s sync / (T_sync - q_s learn_full). Returns inf when async
    can never win.
    """
    t_sync = rollout_s + kept_sync * learn_full_s + sync_s + swap_s
    q = kept_sync * (rollout_s + sync_s) / t_sync
    if q * learn_full_s <= rollout_s:
        return q
    den = t_sync - kept_sync * learn_full_s
    return kept_sync * sync_s / den if den > 0 else math.inf


def sync_bytes_per_card(dense_bytes: float, expert_bytes: float, tp: int, ep: int, sharded: bool) -> float:
    """Weights one rollout card receives per update: its shard (dense / tp + experts / ep) when the
    sync is sharded, the whole model (dense + experts) when every receiver gets everything.
    Summed over EP16 receivers of 423 GiB of experts: 423 GiB vs 6,768 GiB (:func:`weight_sync_volume`)."""
    if sharded:
        return dense_bytes / tp + expert_bytes / ep
    return dense_bytes + expert_bytes


def host_nic_bandwidth(fabric: Fabric, cards: ArrayLike, nics: ArrayLike) -> float:
    """One host's NIC bandwidth for weights sent between card groups of ``cards`` cards in all (bytes/s
    per direction): network.route with the host's cards as one flow through its ``nics`` NICs, k x B_nic."""
    return float(route(fabric, cards, 1, 1, nics).scale_out)


def network_sync_time(per_card: float, receiver_cards: int, cards_per_host: int, host_ingress: float,
                      sender_egress: float) -> float:
    """Weight sync between separate card groups over NICs: the slower of the senders' egress for the
    total and one receiving host's ingress for its cards:
    max(cards x V / egress, cards_per_host x V / ingress)."""
    return max(receiver_cards * per_card / sender_egress, min(cards_per_host, receiver_cards) * per_card / host_ingress)


def local_sync_time(per_card: float, intra_bw: float) -> float:
    """Weight hand-over on shared cards: each card gathers its rollout shard inside the host (NVLink,
    or the host link without P2P): V / B_intra."""
    return per_card / intra_bw


def state_swap_time(state_bytes: float, link_bw: float) -> float:
    """Shared cards park the training state in host memory for generation and bring it back:
    2 x state / link bandwidth per step."""
    return 2.0 * state_bytes / link_bw


def handoff_phases(train: float, weights: float, kv: float, common: float, staged: bool,
                   receive: float | None = None) -> list[list[float]]:
    """What is live in each phase of the hand-off from training to generation on shared cards.

    naive:  [train + common], [train + received + KV + common], [weights + KV + common]
    staged: [train + common], [train + received + common], [weights + common], [weights + KV + common]
    (load the generation weights, free the training state, then allocate the KV pool). ``receive``
    is what arrives while the training state is still live: the card's weight shard (default), or
    the whole model when every card receives everything and keeps its slice.
    """
    recv = weights if receive is None else receive
    if staged:
        return [[train, common], [train, recv, common], [weights, common], [weights, kv, common]]
    return [[train, common], [train, recv, kv, common], [weights, kv, common]]


def handoff_peaks(train: float, weights: float, kv: float, common: float,
                  receive: float | None = None) -> tuple[float, float]:
    """(naive, staged) hand-off peaks. 40 / 15.3 / 24 / 4 GiB -> 83.3 and 59.3 GiB (H100: 74.5 GiB)."""
    return (handoff_peak(handoff_phases(train, weights, kv, common, False, receive)),
            handoff_peak(handoff_phases(train, weights, kv, common, True, receive)))
