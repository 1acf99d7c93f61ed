"""torch's context_parallel ring (torchtitan's context parallelism; stacks.toml ``cp_ring = "allgather"``), as
pytorch/pytorch torch/distributed/tensor/experimental/_attention.py runs it by default: _AllGatherRotater gathers
every card's K, V once, issued at the first ring step and waited at the second, so only the first step's attention
(attention / cp) hides the whole gather, forward and again in the backward; the backward passes its FP32 dK, dV
accumulators (convert_to_f32 = True) to the next card step by step. Transformer Engine's ring (p2p) sends one
16-bit block a step behind that step's attention, dK, dV in the activations' precision."""

from __future__ import annotations

import pytest

from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import build_scenario
from tpopt.catalogs.stacks import stack_profile
from tpopt.models import context
from tpopt.models.evaluate import evaluate_arrays

CAT = load_catalog()


def test_the_gather_hides_behind_the_first_step_only():
    # 3 blocks of 10 MB at 1 GB/s and 3 hops of 1 ms: 33 ms, beside 4 x 20 ms of attention: 20 ms hides it
    assert float(context.gathered_ring_exposed(3 * 10e6, 1e9, 80e-3, 4, 1e-3, 0.2)) == pytest.approx(
        (33e-3 - 20e-3) + 0.2 * 20e-3)
    # sent step by step the same bytes hide behind each step's 20 ms: only the contention share shows
    assert float(context.ring_exposed(3 * 10e6, 1e9, 80e-3, 4, 1e-3, 0.2)) == pytest.approx(0.2 * 3 * 11e-3)
    # a gather shorter than the first step: hidden, 0.2 of it shows
    assert float(context.gathered_ring_exposed(3 * 1e6, 1e9, 80e-3, 4, 0.0, 0.2)) == pytest.approx(0.2 * 3e-3)
    assert float(context.gathered_ring_exposed(3 * 10e6, 1e9, 80e-3, 1, 1e-3, 0.2)) == 0.0  # no CP, no gather


def test_fp32_gradients_make_the_backward_three_blocks_a_step():
    a = CAT.model("llama3-8b")
    blk = 2 * (131072 / 4) * 1024 * 2  # K and V of 32,768 tokens x 8 KV heads of 128, BF16: 128 MiB
    fwd, bwd = context.ring_transfer_bytes(a, 131072, 1, 1, 4, 2.0)
    assert (float(fwd), float(bwd)) == pytest.approx((3 * blk, 3 * 2 * blk))  # K, V and BF16 dK, dV
    fwd, bwd = context.ring_transfer_bytes(a, 131072, 1, 1, 4, 2.0, 4.0)
    assert (float(fwd), float(bwd)) == pytest.approx((3 * blk, 3 * (blk + 2 * blk)))  # FP32 dK, dV: twice the bytes


def test_the_stacks_name_their_ring():
    assert stack_profile("torchtitan").cp_ring == stack_profile("torchtitan-compile").cp_ring == "allgather"
    assert stack_profile("megatron-core").cp_ring == stack_profile("nemo-2403").cp_ring == "p2p"


def _exposed(stack: str) -> float:
    raw = {"model": {"name": "llama3-8b"}, "task": {"tokens": "10B", "seq_len": 262144, "global_batch": 1,
                                                    "precision": "bf16-mixed"},
           "schedule": {"deadline": "1000d"}, "hardware": {"accelerator": "h100-sxm", "stack": stack}}
    sc = build_scenario(raw, CAT)
    r = evaluate_arrays(sc, "h100-sxm", tp=1, pp=1, dp=1, cp=8, micro_batch=1, zero_stage=3, nics_per_host=8,
                        save_interval_s=1800.0, recompute="none")
    return float(r["cp_exposed_s"])


def test_llama3_8b_cp8_256k_on_one_host_hides_its_exchange_either_way():
    """pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md Table 2's CP 8 layout (Llama 3.1 8B, 262,144
    tokens, FSDP 1 x CP 8 on one host): a card's K, V block is 2 x 32,768 x 1,024 x 2 B = 128 MiB; NVLink 4 at
    450 GB/s a direction x the catalog's tp_efficiency, each hop paying up_step_latency. The first step's attention,
    1/8 of the card's 2 x 32,768 x 262,144 / 2 keys x 4 x 4,096 FLOPs (88 TFLOP forward, 11 a step) at several
    hundred TFLOP/s, takes over 10 ms against a gather of 7 x 128 MiB (under 3 ms): hidden, so what shows is the
    contention share: per layer forward kappa t_g, backward kappa t_g + kappa x 7 steps of the FP32 dK, dV
    (2 x 128 MiB) plus their latency, and the eighth dK, dV send, awaited after the last step, whole;
    Transformer Engine's ring: kappa x 7 steps of one block forward, two backward. torchtitan's Llama repeats K and
    V to the 32 query heads before SDPA (torchtitan/models/llama/model.py at 9dec370, repeat_kv; stacks.toml
    kv_repeat), so its ring's blocks are 4x: 512 MiB, a gather of 7 x 512 MiB in about 10.5 ms, still hidden behind
    a first step of 32,768 queries x 131,072 keys on average x 4 x 4,096 / 8 = 8.8 TFLOP at FlashAttention-2's
    published 335 TFLOP/s (Shah et al. 2024), 26 ms."""
    p = CAT.perf("h100-sxm")
    blk = 2 * 32768 * 1024 * 2
    bw = p.tp_efficiency * 450e9
    lat, kappa = p.up_step_latency, p.overlap_contention
    assert 7 * blk / bw + 7 * lat < 3e-3
    blk_t = 32 // 8 * blk  # torchtitan's repeated K, V: 32 heads instead of 8
    t_g = 7 * blk_t / bw + 7 * lat
    assert t_g < 32768 * 131072 * 4 * 4096 / 8 / 335e12
    last_hop = 2 * blk_t / bw + lat  # the last FP32 dK, dV send, awaited after the loop: nothing hides it
    torch_ring = 32 * (kappa * (t_g + t_g + 7 * (2 * blk_t / bw + lat)) + last_hop)
    te_ring = 32 * kappa * (7 * (blk / bw + lat) + 7 * (2 * blk / bw + lat))
    assert _exposed("torchtitan-compile") == pytest.approx(torch_ring, rel=1e-6)
    assert _exposed("megatron-core") == pytest.approx(te_ring, rel=1e-6)


def test_the_gathered_ring_holds_every_block():
    """torch's ring keeps the gathered K, V of all cp cards and the copy of its own it sends (cp + 1 blocks), and in
    the backward the FP32 dK, dV accumulator, the copy it sends and the one arriving (3 blocks at 4 bytes);
    Transformer Engine's: two blocks in flight and two FP32 dK, dV."""
    a = CAT.model("llama3-8b")
    blk = 2 * 32768 * 1024 * 2  # CP 8 at 262,144 tokens: 128 MiB
    assert float(context.buffer_bytes(a, 262144, 1, 1, 8, "ring", 2.0, "allgather")) == pytest.approx(
        9 * blk + 3 * 2 * blk)
    assert float(context.buffer_bytes(a, 262144, 1, 1, 8, "ring", 2.0)) == pytest.approx(2 * blk + 2 * 2 * blk)
    assert float(context.buffer_bytes(a, 262144, 1, 1, 1, "ring", 2.0, "allgather")) == 0.0
