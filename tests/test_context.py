"""Context-parallel relations (models/context.py), each checked against a derivation written here.

Chapter 10.3.4: a causal sequence of s tokens has s (s + 1) / 2 attention pairs; context parallelism
splits the sequence over cp cards that exchange K and V.
"""

from __future__ import annotations

import numpy as np
import pytest

from tpopt.catalogs import load_catalog
from tpopt.models import context as C
from tpopt.models.network import host_fabric

CAT = load_catalog()
LLAMA8 = CAT.model("llama3-8b")


def causal_pairs_per_rank(s: int, cp: int, split: str) -> list[int]:
    """Token-level count: query i sees i + 1 keys; chunks of s / (2 cp) tokens dealt to the ranks."""
    c = s // (2 * cp)
    chunk_pairs = [sum(i + 1 for i in range(j * c, (j + 1) * c)) for j in range(2 * cp)]
    if split == "zigzag":
        return [chunk_pairs[r] + chunk_pairs[2 * cp - 1 - r] for r in range(cp)]
    return [chunk_pairs[2 * r] + chunk_pairs[2 * r + 1] for r in range(cp)]


@pytest.mark.parametrize("cp", [2, 4, 8, 16])
def test_zigzag_balances_causal_attention_exactly(cp):
    s = 4096
    per = causal_pairs_per_rank(s, cp, "zigzag")
    assert len(set(per)) == 1 and sum(per) == s * (s + 1) // 2  # every card the same work
    assert float(C.attention_share(cp, "zigzag")) == pytest.approx(max(per) / sum(per))
    cont = causal_pairs_per_rank(s, cp, "contiguous")
    # contiguous pieces: the last card's share tends to (2 cp - 1) / cp^2
    assert float(C.attention_share(cp, "contiguous")) == pytest.approx(max(cont) / sum(cont), rel=2e-3)
    assert float(C.imbalance(cp, "contiguous")) == pytest.approx((2 * cp - 1) / cp)


def test_chapter_pair_counts():
    # 10.3.4: two sequences of 4096 tokens: 16,781,312 pairs; 7168 + 1024: 26,218,496
    assert sum(causal_pairs_per_rank(4096, 1, "zigzag")) * 2 == 16_781_312
    assert sum(causal_pairs_per_rank(7168, 1, "zigzag")) + sum(causal_pairs_per_rank(1024, 1, "zigzag")) == 26_218_496


def test_ring_volumes_and_exposure():
    # Llama-3-8B: 8 KV heads of 128 -> d_kv = 1024; s = 131072, b = 1, tp = 8, cp = 16, BF16
    blk = float(C.kv_block_bytes(LLAMA8, 131072, 1, 8, 16))
    assert blk == 2 * (131072 / 16) * (1024 / 8) * 2 == 4 * 2**20
    fwd, bwd = C.ring_transfer_bytes(LLAMA8, 131072, 1, 8, 16)
    assert float(fwd) == 15 * blk and float(bwd) == 30 * blk
    # 15 steps of 4 MiB at 25 GB/s = 0.168 ms each; attention of 1.6 ms over 16 steps = 0.1 ms each
    t_step = blk / 25e9
    assert float(C.ring_exposed(fwd, 25e9, 1.6e-3, 16)) == pytest.approx(15 * (t_step - 1.6e-3 / 16))
    assert float(C.ring_exposed(fwd, 25e9, 16e-3, 16)) == 0.0  # hidden behind a longer attention
    assert float(C.ring_exposed(0.0, 25e9, 1.0, 1)) == 0.0  # no CP, nothing to exchange


def test_alltoall_volume_and_head_rule():
    # q, k, v in and o out, each card keeps 1/cp: (cp-1)/cp x (b s / cp) x (2 d_attn + 2 d_kv) / tp x 2 B
    v = float(C.alltoall_bytes(LLAMA8, 8192, 1, 1, 4))
    assert v == pytest.approx(3 / 4 * 2048 * (2 * 4096 + 2 * 1024) * 2)
    # 32 query heads: tp 4 x cp 8 divides them, tp 8 x cp 8 does not
    assert bool(C.heads_ok(LLAMA8, 4, 8, "all-to-all")) and not bool(C.heads_ok(LLAMA8, 8, 8, "all-to-all"))
    assert bool(C.heads_ok(LLAMA8, 8, 16, "ring"))  # the ring has no head rule beyond TP's
    # 8 KV heads over tp 4 = 2 per rank, cp 8: each KV head is replicated 4 times
    assert float(C.kv_replication(LLAMA8, 4, 8)) == 4.0


def test_placement_bandwidth():
    # 8-card hosts, NVLink 450 GB/s, 8 x 50 GB/s NICs: tp 2 x cp 4 stays in the host
    assert float(C.cp_bandwidth(host_fabric(8, 450e9, 50e9), 2, 4, 8)) == 450e9
    # tp 8 x cp 16 spans 16 hosts: the 8 TP rings of a host share its 8 NICs: 50 GB/s per card
    assert float(C.cp_bandwidth(host_fabric(8, 450e9, 50e9), 8, 16, 8)) == 50e9
    assert float(C.cp_bandwidth(host_fabric(8, 450e9, 50e9), 2, 8, 8, "all-to-all")) == 50e9


def test_buffers():
    blk = float(C.kv_block_bytes(LLAMA8, 131072, 1, 8, 16))
    assert float(C.buffer_bytes(LLAMA8, 131072, 1, 8, 16)) == pytest.approx(2 * blk + 2 * blk * 2)
    assert float(C.buffer_bytes(LLAMA8, 131072, 1, 8, 1)) == 0.0
    a2a = float(C.buffer_bytes(LLAMA8, 8192, 1, 1, 4, "all-to-all"))
    assert a2a == pytest.approx(2 * 8192 * (2 * 4096 + 2 * 1024) / 4 * 2)
    assert np.all(np.asarray(C.buffer_bytes(LLAMA8, 8192, 1, np.array([1, 2]), np.array([[1], [4]]))) >= 0)


def test_placement_rule():
    # 8-card hosts: TP 2 x CP 4 fills one host, TP 8 x CP 16 sixteen, TP 2 x CP 3 straddles hosts
    assert bool(C.placement_ok(2, 4, 8)) and bool(C.placement_ok(8, 16, 8)) and bool(C.placement_ok(1, 1, 8))
    assert not bool(C.placement_ok(2, 3, 8)) and not bool(C.placement_ok(3, 1, 8))
