"""Golden figures of REFERENCE.md 10.5 (RL)."""

import pytest

from tpopt.models import rl

MIB = 2**20


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
