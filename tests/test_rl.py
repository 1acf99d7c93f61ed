"""Golden figures of REFERENCE.md 10.5 (RL) and derivations of the relations the RL solve uses."""

import math
import re
from dataclasses import fields
from statistics import NormalDist

import pytest

from tpopt.catalogs import load_catalog
from tpopt.catalogs import rl as rl_catalog
from tpopt.catalogs.declare import spec
from tpopt.errors import InputError
from tpopt.models import generation as gen
from tpopt.models import rl
from tpopt.models.arch import param_count

MIB = 2**20
GIB = 2**30


def test_effective_samples():
    # REFERENCE 10.5: 12, 6, 8, q = 0.75 -> 4.5; doubling generation 4.5; doubling verification 8 (9 offered)
    assert rl.effective_sample_rate(12, 6, 8, 0.75) == 4.5
    assert rl.effective_sample_rate(24, 6, 8, 0.75) == 4.5
    assert rl.effective_sample_rate(12, 12, 8, 0.75) == 8
    assert 0.75 * min(12, 12) == 9


def test_shared_card_handoff():
    # REFERENCE 10.5: H100 80 GB = 74.5 GiB; naive order 83.3 GiB (does not fit); staged 59.3 GiB
    naive = rl.handoff_peak([[40, 4], [40, 15.3, 24, 4], [15.3, 24, 4]])
    staged = rl.handoff_peak([[40, 4], [40, 15.3, 4], [15.3, 4], [15.3, 24, 4]])
    assert naive == pytest.approx(83.3) and naive > 80e9 / 2**30
    assert staged == pytest.approx(59.3) and staged < 80e9 / 2**30


def test_expert_weight_sync():
    # REFERENCE 10.5: EP16 of 423 GiB: 6,768 GiB if each receiver gets all, 423 GiB sharded
    assert rl.weight_sync_volume(423, 16, sharded=False) == 6768
    assert rl.weight_sync_volume(423, 16, sharded=True) == 423


def test_async_rl():
    # REFERENCE 10.5: sync 40 + 16 + 4 = 60 s, async max(40, 16) + 4 = 44 s; wins iff q > 73.3 %;
    # q = 0.8 -> +9 %, q = 0.7 -> -5 %
    assert rl.cycle_times(40, 16, 4) == (60, 44)
    assert round(44 / 60 * 100, 1) == 73.3
    assert round(rl.async_gain(40, 16, 4, 0.8) * 100) == 9
    assert round(rl.async_gain(40, 16, 4, 0.7) * 100) == -5
    assert rl.async_gain(40, 16, 4, 44 / 60) == pytest.approx(0)


def test_routing_replay_record():
    # REFERENCE 10.5: 8,192 tokens x 48 layers x top-8 x 2 B = 6 MiB (uint16), 12 MiB (int32)
    assert rl.routing_record_bytes(8192, 48, 8, 2) == 6 * MIB
    assert rl.routing_record_bytes(8192, 48, 8, 4) == 12 * MIB


# --- relations added for the RL solve (models/rl.py, models/generation.py) ---------------------



def test_handoff_peaks_naive_and_staged():
    # REFERENCE 10.5: naive 83.3 GiB (over 74.5), staged 59.3 GiB; the peaks differ by exactly one KV pool
    naive, staged = rl.handoff_peaks(40, 15.3, 24, 4)
    assert naive == pytest.approx(83.3) and staged == pytest.approx(59.3)
    assert naive - staged == pytest.approx(24)
    # receiving the whole model while the training state is live raises the staged peak by the difference
    _, staged_full = rl.handoff_peaks(40, 15.3, 24, 4, receive=30.6)
    assert staged_full == pytest.approx(40 + 30.6 + 4)


def test_expert_sync_per_receiver_and_in_total():
    # REFERENCE / chapter 10.5.2: EP16 of 423 GiB: each receiver needs about 26.4 GiB; 423 GiB sharded in total,
    # 16 x 423 = 6,768 GiB when every receiver gets the whole expert set
    shard = rl.sync_bytes_per_card(0.0, 423.0, tp=1, ep=16, sharded=True)
    assert round(shard, 1) == 26.4
    assert 16 * shard == pytest.approx(rl.weight_sync_volume(423, 16, sharded=True))
    assert 16 * rl.sync_bytes_per_card(0.0, 423.0, tp=1, ep=16, sharded=False) == rl.weight_sync_volume(423, 16, False)
    # dense weights shard by TP: 16 GB over TP 8 -> 2 GB per card
    assert rl.sync_bytes_per_card(16.0, 0.0, tp=8, ep=1, sharded=True) == 2.0


def test_break_even_generation_bound_is_the_chapters():
    # REFERENCE 10.5: 40 / 16 / 4 s: async wins iff q > 44 / 60 = 73.3 %
    q = rl.break_even_kept(40, 16, 4)
    assert round(q * 100, 1) == 73.3
    assert rl.async_gain(40, 16, 4, q) == pytest.approx(0)
    # the cycle relation the planner uses gives the same two cycles
    assert rl.cycle_time(40, 16, 4, staleness=0) == 60 and rl.cycle_time(40, 16, 4, staleness=1) == 44


def test_break_even_learner_bound():
    # derivation: rollout 2 s, full-batch learning 40 s, sync 10 s, q_sync = 1: T_sync = 52 s; async cycle
    # max(2, 40 q) + 10 is learner-bound near the break-even, so q / (40 q + 10) = 1 / 52 -> q = 10 / 12
    q = rl.break_even_kept(2, 40, 10)
    assert q == pytest.approx(10 / 12)
    assert q / rl.cycle_time(2, 40 * q, 10, 1) == pytest.approx(1 / rl.cycle_time(2, 40, 10, 0))


def test_cycle_steps_and_verification():
    assert rl.cycle_time(30, 10, 2, 0, swap_s=1) == 43  # sync adds the state swap of shared cards
    assert rl.cycle_time(30, 10, 2, 1, swap_s=1) == 32  # async (separate cards) has none
    assert rl.steps_needed(1000, 0.8, 100) == 13  # ceil(1000 / 80)
    assert rl.cpu_verify_time(1024, 0.5, 64) == 8.0
    assert rl.rollout_time(10, 12, "cpu", 0.5) == 12 and rl.rollout_time(10, 3, "cpu", 0.5) == 10.5
    assert rl.rollout_time(10, 3, "reward-model") == 13 and rl.rollout_time(10, 0, "none") == 10


def test_network_and_local_sync():
    # 16 rollout cards (2 hosts of 8) each receiving 2 GB; one learner host with 8 x 50 GB/s NICs
    t = rl.network_sync_time(2e9, 16, 8, 8 * 50e9, 8 * 50e9)
    assert t == pytest.approx(max(32e9 / 400e9, 16e9 / 400e9))
    assert rl.local_sync_time(2e9, 450e9) == pytest.approx(2e9 / 450e9)
    assert rl.state_swap_time(40e9, 64e9) == pytest.approx(80e9 / 64e9)


def test_kv_cache_per_token_qwen3_8b():
    # chapter 10.5.3: Qwen3-8B 8K BF16 KV = 1.125 GiB; 2 x 36 layers x 8 KV heads x 128 x 2 B = 144 KiB per token
    a = load_catalog().model("qwen3-8b")
    k = gen.kv_bytes_per_token(a.layers, a.kv_heads, a.head_dim, 2.0, tp=1)
    assert k == 147456 and 8192 * k == 1.125 * GIB
    assert gen.kv_bytes_per_token(a.layers, a.kv_heads, a.head_dim, 2.0, tp=2) == k / 2
    assert gen.kv_bytes_per_token(a.layers, a.kv_heads, a.head_dim, 2.0, tp=16) == k / 8  # one KV head, replicated


def test_generation_weights_qwen3_8b():
    # chapter 10.5.2: about 15.3 GiB of BF16 generation weights for Qwen3-8B
    n = param_count(load_catalog().model("qwen3-8b"))
    assert round(gen.weight_bytes_per_card(n, 1) / GIB, 1) == 15.3
    assert gen.weight_bytes_per_card(n, 8) == pytest.approx(2 * n / 8)


def test_lognormal_tail_fit():
    # derivation: sigma solves sigma^2/2 - z sigma + ln(tail/mean) = 0; the fitted law has the given mean and quantile
    s = gen.lognormal_sigma(2048, 8192, 0.99)
    z = NormalDist().inv_cdf(0.99)
    mu = math.log(2048) - s * s / 2
    assert math.exp(mu + s * s / 2) == pytest.approx(2048) and math.exp(mu + z * s) == pytest.approx(8192)
    d = gen.Lengths(mean=2048, tail=8192, tail_p=0.99)
    n = 1024
    assert gen.longest_of(d, n) == pytest.approx(math.exp(mu + NormalDist().inv_cdf(n / (n + 1)) * s))
    assert gen.longest_of(gen.Lengths(2048, 8192, 0.99, cap=10000), n) == 10000
    assert gen.longest_of(gen.Lengths(512), n) == 512  # no tail: every length is the mean
    assert gen.second_moment(d, 1e9) == pytest.approx(2048**2 * math.exp(s * s))
    assert gen.second_moment(d, 3000) == pytest.approx(2048 * 3000)  # bounded by mean x longest


@pytest.mark.parametrize("kw", [dict(mean=0), dict(mean=100, tail=50, tail_p=0.99), dict(mean=100, tail=200),
                                dict(mean=100, tail=1e6, tail_p=0.9), dict(mean=100, cap=50)])
def test_length_rejects(kw):
    with pytest.raises(InputError):
        gen.Lengths(**kw)


def test_decode_phase_roofline():
    # derivation: 100 steps, 10,000 tokens, 1 GB weights per card, 100 kB KV per token, context 1,000 tokens:
    # memory (100 x 1e9 + 1e4 x 1e3 x 1e5) / (1e12 x 0.5) = 2.2 s; compute 1e4 x (2 x 1e9 + 4 x 10 x 1000 x 1000)
    # / (1 x 1e15 x 0.5) = 0.0408 s; TP 1 has no all-reduces
    d = gen.decode_time(100, 1e4, 1e9, 1e5, 1000, 1e9, 10, 1000, 1000, 1, 1e15, 1e12, 0.5, 0.5, 1e11, 2e-5)
    assert d["memory_s"] == pytest.approx(2.2) and d["compute_s"] == pytest.approx(0.0408)
    assert d["time_s"] == pytest.approx(2.2) and d["bound"] == "memory"
    # TP 2: every step 2 x 10 layers x 20 us, every token 2 x 10 x (2 x 1/2 x 1000 x 2 B) / 1e11
    d2 = gen.decode_time(100, 1e4, 1e9, 1e5, 1000, 1e9, 10, 1000, 1000, 2, 1e15, 1e12, 0.5, 0.5, 1e11, 2e-5)
    assert d2["tp_comm_s"] == pytest.approx(100 * 20 * 2e-5 + 1e4 * 20 * 2000 / 1e11)
    # the long tail: steps are at least the longest response, at least tokens / batch
    assert gen.decode_steps(8000, 1e5, 100) == 8000 and gen.decode_steps(500, 1e5, 100) == 1000
    assert gen.max_concurrent(10e9, 1e5, 1000) == 100 and gen.max_concurrent(-1, 1e5, 1000) == 0
    assert gen.prefill_flops(1e9, 10, 1000, 100) == pytest.approx(2e11 + 4 * 10 * 1000 * 100 * 101 / 2)


def test_rl_keys_are_declared_and_documented():
    """The known [rl] keys are the declared ones, the required ones those declared required (the four sizes of a
    step), and the module's key list names every declared key."""
    declared = [f.name for f in fields(rl_catalog.RLKeys)]
    assert rl_catalog.RL_KEYS == set(declared)
    assert rl_catalog.RL_REQUIRED == tuple(f.name for f in fields(rl_catalog.RLKeys) if spec(f).required)
    assert set(rl_catalog.RL_REQUIRED) == {"prompts_per_step", "samples_per_prompt", "prompt_length",
                                           "response_length"}
    documented = set(re.findall(r"\w+", (rl_catalog.__doc__ or "").split("Keys of ``[rl]``")[1]))
    assert [k for k in declared if k not in documented] == []
