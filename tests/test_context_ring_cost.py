"""Ring attention's cost beyond its FLOPs (issue 35, long context): the exchange that hides behind the attention
still costs the attention the contention share of its time, each ring step pays its send's latency, and every
step after the first merges its partial result into the FP32 accumulators (Transformer Engine's
AttnFuncWithCPAndKVP2P). Figures written out from the catalog: DGX H100 (450 GB/s NVLink, 8 x 400 Gb/s NICs),
collective efficiencies 0.8 (NVLink) and 0.9 (NICs), 6 us a step across the NICs, overlap_contention 0.2."""

from __future__ import annotations

import pytest

from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import build_scenario
from tpopt.models import context, ops
from tpopt.models.evaluate import evaluate_arrays

CAT = load_catalog()


def test_hidden_transfer_still_costs_its_contention_share():
    # 4 steps of 10 ms transfer beside 5 x 16 ms of attention (16 ms a step): hidden, 0.2 x 40 ms shows
    assert float(context.ring_exposed(4 * 9e6, 1e9, 80e-3, 5, 1e-3, 0.2)) == pytest.approx(0.2 * 4 * 10e-3)
    # a transfer longer than its step's attention: the excess whole and 0.2 of the overlapped part
    assert float(context.ring_exposed(4 * 20e6, 1e9, 80e-3, 5, 0.0, 0.2)) == pytest.approx(4 * (4e-3 + 0.2 * 16e-3))
    assert float(context.ring_exposed(4 * 20e6, 1e9, 80e-3, 1, 0.0, 0.2)) == 0.0  # no ring without CP


def test_merge_passes_per_ring_step():
    a = CAT.model("llama2-7b")
    lay = ops.Layout(tp=8, micro_batch=1 / 32, seq_len=1 << 20, cp_steps=31)
    merge = ops.ring_merge_kernels(a, lay)
    elements = (1 << 20) / 32 * 4096 / 8  # one card's 32,768 tokens x 4,096 / 8 channels
    assert float(merge[0].bytes) == pytest.approx(31 * elements * (4 + 2 + 4))  # FP32 accumulator r/w, BF16 step
    assert float(merge[1].bytes) == pytest.approx(31 * (elements * 8 + 2 * elements * 8))  # dQ, dK and dV in FP32
    assert ops.ring_merge_kernels(a, ops.Layout(tp=8, micro_batch=1, seq_len=4096)) == []


def test_nemo_llama2_7b_1m_tokens_cp32_exposes_the_contention_of_its_ring():
    """NVIDIA/NeMo docs/source/performance/performance_long_sequence.md, Llama 2 7B at 1M tokens: TP 8 x CP 32 on
    1,024 H100, 4 sequences a step (one micro-batch a card). K, V block of a card: 2 x 32,768 tokens x 4,096 / 8
    channels x 2 B = 64 MiB; the ring of 32 members 8 apart spans 32 hosts, its 8 rings a host sharing the host's
    8 NICs: 0.9 x 50 GB/s a card. A step: 64 MiB / 45 GB/s + 6 us = 1.497 ms forward, twice the bytes backward.
    The attention a step hides it behind, 1/32 of 4 x 32,768 x 524,288 keys x 512 FLOPs at 0.61 x 989 TFLOP/s
    = 1.82 ms forward (2.5 x the FLOPs at 0.72 of that rate backward), is longer: all hidden, so what shows is
    0.2 of the 31 steps, forward and backward, in each of the 32 layers."""
    raw = {"model": {"name": "llama2-7b"}, "task": {"tokens": "10B", "seq_len": 1 << 20, "global_batch": 4,
                                                    "precision": "fp8-mixed"},
           "schedule": {"deadline": "1000d"}, "hardware": {"accelerator": "h100-sxm"}}
    sc = build_scenario(raw, CAT)
    p = CAT.perf("h100-sxm")
    blk = 2 * 32768 * 4096 / 8 * 2
    bw = p.dp_efficiency * 8 * 50e9 / 8
    fwd, bwd = blk / bw + p.out_step_latency, 2 * blk / bw + p.out_step_latency
    attention_fwd = 4 * 32768 * 524288 * 512 / (0.61 * 989e12) / 32  # Shah et al. 2024, causal, 8K
    assert fwd < attention_fwd and bwd < attention_fwd * 2.5 / 0.72
    r = evaluate_arrays(sc, "h100-sxm", tp=8, pp=1, dp=4, cp=32, micro_batch=1, zero_stage=1, nics_per_host=8,
                        save_interval_s=1800.0, recompute="none")
    assert float(r["cp_exposed_s"]) == pytest.approx(p.overlap_contention * 32 * 31 * (fwd + bwd), rel=1e-6)
