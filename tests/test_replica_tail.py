"""Hybrid sharding's last replica all-reduce (models.terms.replica_tail): the stack's gradient bucket as the unit
reduced in one call, the last of which starts after the backward and shows whole.

The expected figures are written out from the catalog's bandwidths and latencies (accelerators.toml,
performance.toml) and the model's parameter count by hand; the bucket sizes come from the stacks' sources
(MaxText's A3 recipes: --xla_gpu_all_reduce_combine_threshold_bytes=1073741824; Megatron-Core: max(40 M, 1 M x
ranks) elements)."""

import pytest

from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import build_scenario
from tpopt.models import terms as T

CAT = load_catalog()
H, KV, FFN, L, V = 4096, 1024, 14336, 32, 128256
N = L * (H * (H + 2 * KV) + H * H + 3 * H * FFN + 2 * H) + 2 * V * H + H  # Llama 3 8B: 8.03 B


def scenario(stack, zero_group=8, flat=False):
    hw = {"accelerator": "h100-sxm", "nic": "200g", "nics_per_host": 4, "stack": stack}
    if flat:
        hw["efficiency"] = 0.4
    return build_scenario({"model": {"name": "llama3-8b"}, "task": {"tokens": "1B", "seq_len": 4096,
                                                                   "global_batch": 128, "precision": "bf16-mixed"},
                           "schedule": {"deadline": "1000d"}, "hardware": hw,
                           "memory": {"zero_group": zero_group}}, CAT)


KW = dict(acc="h100-sxm", zero=3, tp=1, pp=1, cp=1, nics=4, n=N)


def test_maxtext_leaves_one_combined_all_reduce_after_the_backward():
    """16 hosts x 8-way FSDP: each card all-reduces its 2 N / 8 = 2.0 GB of BF16 gradients with the 15 other
    hosts in calls of up to 1 GiB; the last call, 2 x 15/16 x 1 GiB at the card's share of the host's NICs
    (4 x 25 GB/s / 8, x the collective efficiency), plus one call's latency (NCCL's ring over 16 hosts)."""
    p = CAT.perf("h100-sxm")
    bw = p.dp_efficiency * 4 * 25e9 / 8
    unit = min(2**30, 2 * N / 8)
    expected = 2 * 15 / 16 * unit / bw + p.collective_latency + 15 * p.out_step_latency
    got = float(T.replica_tail(scenario("maxtext"), dp=128, **KW))
    assert got == pytest.approx(expected, rel=1e-6)
    assert 0.15 < got < 0.2  # seconds: a sizeable share of a ~1.5 s step


def test_bucket_sets_the_tail_and_nothing_without_replicas_or_in_flat_mode():
    """Megatron-Core's bucket at 128 ranks is 128 MB (max(40 M, 1 M x 128)): an eighth of MaxText's tail's bytes;
    one host (no replicas) and the flat model have none."""
    mc = float(T.replica_tail(scenario("megatron-core"), dp=128, **KW))
    mx = float(T.replica_tail(scenario("maxtext"), dp=128, **KW))
    p = CAT.perf("h100-sxm")
    bw = p.dp_efficiency * 4 * 25e9 / 8
    assert mc < mx
    assert mc == pytest.approx(2 * 15 / 16 * 128e6 / bw, rel=0.2)  # bytes term dominates; latency is microseconds
    assert float(T.replica_tail(scenario("maxtext"), dp=8, **KW)) == 0.0
    assert float(T.replica_tail(scenario("maxtext", flat=True), dp=128, **KW)) == 0.0


def test_the_tail_is_exposed_in_the_step():
    """The exposed data-parallel time of the 128-card hybrid plan holds at least the tail."""
    sc = scenario("maxtext")
    tail = float(T.replica_tail(sc, dp=128, **KW))
    exposed = float(T.exposed_dp(sc, acc="h100-sxm", zero=3, recompute="full", tp=1, cp=1, pp=1, dp=128, mb=1,
                                 nics=4))
    assert exposed >= tail
