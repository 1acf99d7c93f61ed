"""Google Cloud A3 High's data NICs as GPUDirect-TCPX delivers them (links.toml nic 200g-tcpx), and what that does
to MaxText's hybrid-sharded Llama 2 7B across 16 A3 High hosts.

The published figure: dstackai/dstack examples/clusters/a3high/README.md, nccl-tests all_gather_perf on two
a3-highgpu-8g (16 H100, four 200 Gbit/s data NICs per host, the GPUDirect-TCPX NCCL plugin): bus bandwidth 49.3-50.4
GB/s from 128 MiB to 8 GiB. A ring's bus bandwidth is the bandwidth of its slowest hop, here the host boundary: the
host's four NICs, 100 GB/s at line rate. The catalog states the NIC at the line rate that gives 50 GB/s at the
H100's ring efficiency (performance.toml dp_efficiency): 4 x B x 0.9 = 50 GB/s, B = 13.9 GB/s per NIC.
"""

import pytest

from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import build_scenario
from tpopt.models import terms as T

CAT = load_catalog()
BUS_BANDWIDTH = 50e9  # B/s, nccl-tests all_gather_perf busbw at >= 128 MiB on 2 x a3-highgpu-8g (dstack's README)
H, FFN, L, V = 4096, 11008, 32, 32000
N = L * (4 * H * H + 3 * H * FFN + 2 * H) + 2 * V * H + H  # Llama 2 7B: 6.74 B


def scenario(nic: str):
    hw = {"accelerator": "h100-sxm", "nic": nic, "nics_per_host": 4, "stack": "maxtext"}
    return build_scenario({"model": {"name": "llama2-7b"}, "task": {"tokens": "1B", "seq_len": 4096,
                                                                   "global_batch": 512, "precision": "bf16-mixed"},
                           "schedule": {"deadline": "1000d"}, "hardware": hw, "memory": {"zero_group": 8}}, CAT)


def test_the_nic_gives_the_measured_bus_bandwidth_at_the_ring_efficiency():
    """4 NICs x B x dp_efficiency = the measured 50 GB/s (to the catalog's rounding), half the line rate's 100."""
    nic = CAT.nics["200g-tcpx"]
    eta = CAT.perf("h100-sxm").dp_efficiency
    assert 4 * nic.bandwidth * eta == pytest.approx(BUS_BANDWIDTH, rel=2e-3)
    assert 4 * CAT.nics["200g"].bandwidth == 100e9


def test_maxtext_last_replica_all_reduce_at_the_delivered_bandwidth():
    """16 hosts x FSDP 8: each card all-reduces its 2 N / 8 B of BF16 gradients with the 15 other hosts in calls of up
    to 1 GiB; the last call, 2 x 15/16 x 1 GiB, crosses the host's NICs shared by its 8 cards: 50 / 8 = 6.25 GB/s
    per card, so 0.32 s (0.18 s at 200 Gbit/s line rate, 0.9 efficiency), plus one call's latency."""
    p = CAT.perf("h100-sxm")
    unit = min(2**30, 2 * N / 8)
    kw = dict(acc="h100-sxm", zero=3, tp=1, pp=1, cp=1, nics=4, n=N, dp=128)
    tcpx = float(T.replica_tail(scenario("200g-tcpx"), **kw))
    line = float(T.replica_tail(scenario("200g"), **kw))
    latency = p.collective_latency + 15 * p.out_step_latency
    assert tcpx == pytest.approx(2 * 15 / 16 * unit / (BUS_BANDWIDTH / 8) + latency, rel=3e-3)
    assert line == pytest.approx(2 * 15 / 16 * unit / (p.dp_efficiency * 100e9 / 8) + latency, rel=1e-6)
    assert tcpx / line == pytest.approx(100e9 * p.dp_efficiency / BUS_BANDWIDTH, rel=0.02)
