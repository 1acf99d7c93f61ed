"""Dense-model fidelity physics (issue 23): the stack's overheads, memory as the allocator sees it, FP8 /
MXFP8 / NVFP4 quantisation costs, FSDP / DP collective latency by tier, the new accelerator entries."""

import math

import pytest

from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import build_scenario
from tpopt.catalogs.stacks import stack_profile
from tpopt.models import comm, network, steptime
from tpopt.models import terms as T
from tpopt.models.evaluate import evaluate_arrays
from tpopt.models.units import GIB

CAT = load_catalog()


def scenario(acc="h100-sxm", model="llama3-8b", precision="bf16-mixed", batch=16, **hw):
    raw = {"model": {"name": model}, "task": {"tokens": "1B", "seq_len": 8192, "global_batch": batch,
                                              "precision": precision},
           "schedule": {"deadline": "1000d"}, "hardware": {"accelerator": acc, **hw}}
    return build_scenario(raw, CAT)


def step(sc, cards, acc="h100-sxm", **kw):
    plan = dict(tp=1, pp=1, dp=cards, micro_batch=1, zero_stage=3, nics_per_host=8, save_interval_s=1800.0,
                recompute="none") | kw
    return evaluate_arrays(sc, acc, **plan)


def test_stack_overhead_is_per_step_plus_per_micro_batch_slot():
    sc = scenario()
    p = stack_profile("megatron-core")
    # t_step + (m + pp - 1) t_micro: 8 micro-batches through 4 stages occupy 11 slots of the critical path
    assert float(T.stack_overhead(sc, acc="h100-sxm", pp=4, ga=8)) == \
        pytest.approx(p.step_overhead + 11 * p.microbatch_overhead)
    assert p.step_overhead > 0 and stack_profile("megatron-lm-2021").step_overhead == 0


def test_usable_memory_is_what_the_allocator_can_fill_in_the_per_operation_model():
    p = stack_profile("megatron-core")
    per_op = scenario().system("h100-sxm").acc.memory_usable
    assert per_op == pytest.approx((74 * GIB - p.communicator_buffers) / (1 + p.allocator_reserve))
    # the flat model (the chapter's accounting) and a stated usable memory are taken as they are
    assert scenario(efficiency=0.4).system("h100-sxm").acc.memory_usable == 74 * GIB
    assert scenario(usable_memory="70GiB").system("h100-sxm").acc.memory_usable == 70 * GIB


def test_quantisation_bytes_per_recipe():
    e = 2.0
    assert steptime.QUANTISATION_BYTES["delayed"](e) == 3.0  # read 2, write 1
    assert steptime.QUANTISATION_BYTES["current"](e) == 5.0  # amax pass reads 2, cast reads 2 and writes 1
    assert steptime.QUANTISATION_BYTES["mxfp8"](e) == pytest.approx(2 + 2 * (1 + 1 / 32))
    r = T.rates(scenario("b200", precision="mxfp8-mixed"), "b200")
    assert r.fp8 and r.linear_peak == CAT.accelerator("b200").peak_fp8 and r.operand_bytes == 1 + 1 / 32
    r4 = T.rates(scenario("b200", precision="nvfp4-mixed"), "b200")
    assert r4.linear_peak == CAT.accelerator("b200").peak_fp4 == 9e15 and r4.operand_bytes == 0.5 + 1 / 16
    # a card without FP4 matrix units runs the weight GEMMs at its BF16 peak, with nothing to quantise
    r0 = T.rates(scenario("h100-sxm", precision="nvfp4-mixed"), "h100-sxm")
    assert not r0.fp8 and r0.linear_peak == r0.peak


def test_ring_latency_is_paced_by_the_tier_the_ring_crosses():
    fab = CAT.accelerator("h100-sxm").fabric
    assert float(network.ring_latency(fab, 8, 1, 2e-6, 6e-6)) == pytest.approx(7 * 2e-6)  # one host
    assert float(network.ring_latency(fab, 128, 1, 2e-6, 6e-6)) == pytest.approx(127 * 6e-6)  # 16 hosts


def test_dp_collective_calls_per_layer_for_zero3_and_per_bucket_otherwise():
    n, layers, m, bucket = 1e9, 32, 4, 40e6
    assert float(comm.dp_collective_calls(3, n, layers, m, bucket)) == 3 * m * layers
    grads = math.ceil(n * 2 / bucket)  # 2 GB of BF16 gradients in 40 MB buckets: 50 calls
    assert float(comm.dp_collective_calls(0, n, layers, m, bucket)) == grads == 50
    assert float(comm.dp_collective_calls(1, n, layers, m, bucket)) == 2 * grads
    assert float(comm.dp_collective_calls(2, n, layers, m, bucket)) == m * grads + grads


def test_fsdp_across_hosts_is_slower_than_inside_one():
    """Llama 3 8B under ZeRO-3, 2 sequences per card: the same bytes per card, but every gather and
    reduction of 128 cards crosses 16 hosts (15 ring steps across the NICs, 112 over NVLink) instead of 7 steps
    over NVLink, and what hides
    behind compute still costs it its contention share: the step grows with the card count."""
    steps = []
    for cards in (8, 16, 128):
        sc = scenario(batch=2 * cards)
        steps.append(float(step(sc, cards)["step_s"]))
    assert steps[0] < steps[1] < steps[2]
    sc8, sc128 = scenario(batch=16), scenario(batch=256)
    p = CAT.perf("h100-sxm")
    lat8 = float(T.dp_latency(sc8, acc="h100-sxm", zero=3, tp=1, pp=1, ranks=8, ga=2, n=1e9))
    lat128 = float(T.dp_latency(sc128, acc="h100-sxm", zero=3, tp=1, pp=1, ranks=128, ga=2, n=1e9))
    calls = 3 * 2 * 32  # 3 collectives per layer per micro-batch, 32 layers, 2 micro-batches
    assert lat8 == pytest.approx(calls * (p.collective_latency + 7 * p.up_step_latency))
    # NCCL's ring (NVIDIA/nccl src/graph/tuning.cc: nInterSteps network steps, the rest intra-node) over 16 hosts
    # of 8 members: 128 - 16 steps on NVLink and 15 across the NICs; all-gather and reduce-scatter have no tree
    # here (PAT needs one member per host)
    assert lat128 == pytest.approx(calls * (p.collective_latency + 112 * p.up_step_latency + 15 * p.out_step_latency))


def test_new_accelerators_have_their_own_parameters():
    for name in ("b300", "gb300-nvl72", "mi355x", "gb200-nvl72"):
        a, p = CAT.accelerator(name), CAT.perf(name)
        assert a.peak_fp4 > a.peak_fp8 > a.peak_flops > 0
        assert p.name == name and p.sms != CAT.perf("default").sms  # not the default's 108 SMs
    assert CAT.accelerator("gb200-nvl72").cards_per_host == 72 and CAT.perf("gb200-nvl72").sms == 148
    # calibrated cards keep the public measurement they started from
    raw = CAT.raw["performance"]["b200"]
    assert CAT.perf("b200").calibrated == ("gemm_efficiency",) and raw["calibration"]["prior"] == [0.634]
