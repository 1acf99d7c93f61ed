"""MoE physics of the per-operation model: the dispatcher's rows and messages per tier, node-limited routing,
what hides behind what under each schedule, grouped-GEMM launches, ZeRO over the expert weights, routed-token
memory under FP8, and the dropped share under context parallelism. Every expected number is derived in the
test from the formula it checks (the module docstrings cite the sources)."""

import math
from dataclasses import replace

import numpy as np
import pytest

import tpopt
from tpopt.models import moe, network, ops, steptime
from tpopt.models import terms as T
from tpopt.models.evaluate import evaluate_arrays
from tpopt.models.network import host_fabric


def scenario(model="deepseek-v3", acc="h100-sxm", seq=4096, batch=1024, precision="bf16-mixed", moe_keys=None):
    raw = {"model": {"name": model}, "task": {"tokens": "1B", "seq_len": seq, "global_batch": batch,
                                               "precision": precision},
           "schedule": {"deadline": "365d"}, "hardware": {"accelerator": [acc]}}
    if moe_keys:
        raw["moe"] = moe_keys
    return tpopt.scenario(raw)


# ---------------------------------------------------------------------------------------------
# dispatcher: rows per tier and messages


def test_rows_per_token_by_dispatcher():
    # EP 64 over H = 8 hosts (m = 8 members each), k = 8.
    # direct: every dispatch to another rank is a row: k (m - 1)/ep = 8 x 7/64 inside, k (ep - m)/ep = 7 across
    intra, inter = moe.a2a_rows_per_token(8, 64, 8, "direct")
    assert float(intra) == pytest.approx(8 * 7 / 64) and float(inter) == pytest.approx(8 * 56 / 64)
    # per-host: distinct hosts of k uniform experts H (1 - (1 - 1/H)^k), the other ones' share (H - 1)/H crosses;
    # NVLink forwards one copy per distinct destination rank (DeepEP's is_token_in_rank), ep (1 - (1 - 1/ep)^k)
    # of them, the share (m - 1)/m of which sits on other cards: 64 (1 - (63/64)^8) x 7/8 = 6.63 (not k x 7/8 = 7)
    intra, inter = moe.a2a_rows_per_token(8, 64, 8, "per-host")
    assert float(inter) == pytest.approx(8 * (1 - (7 / 8) ** 8) * 7 / 8)
    assert float(intra) == pytest.approx(64 * (1 - (63 / 64) ** 8) * 7 / 8)
    # node-limited to 4 hosts: 4 x 7/8 = 3.5 copies cross
    assert float(moe.a2a_rows_per_token(8, 64, 8, "per-host", 4)[1]) == pytest.approx(3.5)
    # all-gather: a ring of 64 sends ep - 1 = 63 rows per token whatever k, on the tier the ring crosses
    assert [float(x) for x in moe.a2a_rows_per_token(8, 64, 8, "all-gather")] == [0.0, 63.0]
    assert [float(x) for x in moe.a2a_rows_per_token(8, 8, 1, "all-gather")] == [7.0, 0.0]


def test_messages_and_latency_per_exchange():
    # direct: one message per peer, 63; per-host: 7 NVLink peers + 7 other hosts = 14
    assert float(moe.a2a_messages(64, 8, "direct")) == 63 and float(moe.a2a_messages(64, 8, "per-host")) == 14
    # fixed cost = call latency + messages x 0.5 us (DeepEP's per-peer growth): 20 + 63 x 0.5 = 51.5 us
    assert float(moe.a2a_latency(64, 8, "direct", 20e-6)) == pytest.approx(51.5e-6)
    assert float(moe.a2a_latency(64, 8, "per-host", 20e-6)) == pytest.approx(27e-6)
    # the all-gather ring's 63 sequential steps at the step latency given: 20 + 63 x 6 = 398 us
    assert float(moe.a2a_latency(64, 8, "all-gather", 20e-6, 6e-6)) == pytest.approx(398e-6)
    assert float(moe.a2a_latency(1, 1, "direct", 20e-6)) == 0.0


def test_ep_group_tier_is_the_scale_up_domain():
    # 4-card hosts in a 72-card NVLink domain (GB200 NVL72): EP 64 stays in one domain, EP 128 spans two
    assert float(moe.ep_domains(64, 1, 72)) == 1 and float(moe.ep_domains(128, 1, 72)) == 2
    assert moe.ep_placement(64, 1, 4, 72) == "in one scale-up domain"
    assert moe.ep_placement(128, 1, 4, 72) == "across 2 scale-up domains"
    assert moe.ep_placement(16, 1, 8, 8) == "across 2 hosts" and moe.ep_placement(8, 1, 8, 8) == "in-host"
    # the all-to-all's NIC rows vanish inside the domain: direct EP 64 over one domain puts all 63/64 of k on NVLink
    assert float(moe.a2a_rows_per_token(8, 64, moe.ep_domains(64, 1, 72), "direct")[1]) == 0.0
    # the same tiers network.route decides for the group
    fabric = host_fabric(4, 900e9, 50e9, scale_up_cards=72)
    assert int(np.asarray(network.route(fabric, 64, 1).level)) == 0
    assert int(np.asarray(network.route(fabric, 128, 1).level)) == 1


def test_node_limit_from_the_models_router_groups():
    a = scenario().model  # DeepSeek-V3: 256 experts in 8 groups, a token's experts from 4 of them
    assert (a.router_groups, a.router_group_topk) == (8, 4)
    # EP 64, etp 1, 8-card hosts: a group is 64 / 8 = 8 cards = 1 host, so a token reaches at most 4 x 1 hosts
    assert float(moe.routed_domain_limit(a, 64, 1, 8)) == 4
    # EP 256: a group spans 32 cards = 4 hosts: 4 x 4 = 16
    assert float(moe.routed_domain_limit(a, 256, 1, 8)) == 16
    # EP 4 (< 8 groups): each card holds two groups; the 4 groups sit on at most 4 cards, 4 domains
    assert float(moe.routed_domain_limit(a, 4, 1, 8)) == 4
    assert float(moe.routed_domain_limit(scenario("qwen3-235b-a22b").model, 64, 1, 8)) == 0  # no groups


def test_h100_deepseek_all_to_all_per_host_and_node_limited():
    # DeepSeek-V3 on H100, TP 2 (sequence parallel: 2,048 tokens per card), EP 64 across 8 hosts, force-balanced,
    # per-host dispatch: 4 hosts per token (router groups), 3.5 copies over the NICs, one copy per distinct rank
    # over NVLink: 64 (1 - (63/64)^8) x 7/8 = 6.63 rows.
    sc = scenario(moe_keys={"imbalance": 1.0})
    assert sc.moe.dispatcher == "per-host"  # the default stack's flex dispatcher (DeepEP / HybridEP)
    p = sc.system("h100-sxm").perf
    row = 2048 * 7168 * 2  # bytes of one row per token of the card
    nvlink = 64 * (1 - (63 / 64) ** 8) * 7 / 8 * row / (450e9 * p.tp_efficiency)
    nic = 3.5 * row / (50e9 * p.dp_efficiency)  # 8 x 400 Gbit/s NICs shared by 8 cards: 50 GB/s each
    fixed = p.collective_latency + 14 * moe.A2A_PEER_LATENCY
    one = max(nvlink, nic) + fixed
    blocks = 8  # PP 8 of 61 blocks (3 dense first): the heaviest stage holds 8 MoE blocks
    got = float(T.ep_link(sc, acc="h100-sxm", recompute="none", tp=2, pp=8, mb=1, nics=8, ep=64, etp=1))
    assert got == pytest.approx(4 * blocks * one, rel=1e-9)


# ---------------------------------------------------------------------------------------------
# what hides behind what


def test_unpaired_share_by_schedule():
    # 1F1B, p = 8, m = 128: the first stage's 7 warm-up forwards and 7 cool-down backwards are unpaired: 7/128
    assert float(moe.a2a_unpaired_share("1f1b", 1, 8, 128)) == pytest.approx(7 / 128)
    # interleaved, p = 8, v = 4: 2 (p - 1) + (v - 1) p = 38 warm-up chunks of 512
    assert float(moe.a2a_unpaired_share("interleaved", 4, 8, 128)) == pytest.approx(38 / 512)
    # p = 1: the first forward and the last backward: 1 of 10; fewer micro-batches than warm-up: all unpaired
    assert float(moe.a2a_unpaired_share("1f1b", 1, 1, 10)) == pytest.approx(0.1)
    assert float(moe.a2a_unpaired_share("1f1b", 1, 16, 8)) == 1.0


def test_exposed_all_to_all_under_overlap():
    # A = 1 s per micro-batch, C = 3 s, u = 0.1, s = 0.15, m = 10: 10 (0.1 x 1 + 0.9 x (0 + 0.15 x 1)) = 2.35 s
    assert float(moe.a2a_exposed(1.0, 3.0, 10, True, 0.1, 0.15)) == pytest.approx(2.35)
    # without overlap: every exchange, 10 s
    assert float(moe.a2a_exposed(1.0, 3.0, 10, False, 0.1, 0.15)) == pytest.approx(10.0)
    # an exchange longer than its partner's compute: A = 4, C = 3, all paired: (4 - 3) + 0.2 x 3 = 1.6 s
    assert float(moe.a2a_exposed(4.0, 3.0, 1, True, 0.0, 0.2)) == pytest.approx(1.6)


def test_overlap_all_is_not_free_in_the_per_operation_model():
    # EP overlap on (a2a_overlap = all) keeps the unpaired chunks and the contention: between none and zero
    kw = dict(acc="h100-sxm", recompute="none", schedule="1f1b", tp=2, pp=8, dp=64, mb=1, nics=8, ep=64, etp=1)
    none = float(T.ep_comm(scenario(moe_keys={"imbalance": 1.0, "a2a_overlap": "none"}), **kw))
    sc_all = scenario(moe_keys={"imbalance": 1.0, "a2a_overlap": "all"})
    both = float(T.ep_comm(sc_all, **kw))
    link = float(T.ep_link(sc_all, acc="h100-sxm", recompute="none", tp=2, pp=8, mb=1, nics=8, ep=64, etp=1))
    t_f, t_dx, t_dw = T.microbatch_times(sc_all, acc="h100-sxm", recompute="none", schedule="1f1b", tp=2, pp=8, mb=1,
                                         ep=64, etp=1)
    c = float(t_f + t_dx + t_dw)
    m = 1024 / 64
    u = 7 / m  # 1F1B, p = 8
    kappa = sc_all.system("h100-sxm").perf.overlap_contention
    want = m * (u * link + (1 - u) * (max(0.0, link - c) + kappa * min(link, c)))
    assert both == pytest.approx(want, rel=1e-9)
    assert none == pytest.approx(m * link, rel=1e-9) and 0 < both < none


# ---------------------------------------------------------------------------------------------
# grouped GEMM, ZeRO over experts, memory, drops


def test_grouped_gemm_launches_one_gemm_per_local_expert():
    # Transformer Engine's grouped linear: one GEMM per local expert over 4 streams, so 1 + (E / ep - 1) / 4 kernel
    # overheads per projection and phase: 128 experts at EP 1 -> 32.75, EP 8 -> 4.75, EP 128 -> 1
    sc = scenario("qwen3-30b-a3b")  # 128 experts
    assert ops.GROUPED_GEMM_STREAMS == 4
    for ep, launches in ((1, 32.75), (8, 4.75), (128, 1.0)):
        lay = T.layout(sc, tp=1, mb=1, ep=ep, etp=1)
        experts = [k for k in ops.moe_kernels(sc.model, lay) if k.op.startswith("expert.") and k.kind == "gemm"]
        assert len(experts) == 6  # up and down, fwd / dX / dW
        assert all(float(np.asarray(k.count)) == launches for k in experts)
        assert all(float(np.asarray(k.batch)) == 128 / ep for k in experts)


def test_expert_zero3_pays_ring_steps_per_block_and_micro_batch():
    # ZeRO-3 over the expert-data-parallel group: 3 calls (gather forward, gather backward, reduce-scatter) per
    # MoE block and micro-batch, each the call latency + NCCL's ring latency: 640 members 2 apart, 4 on each of
    # 160 hosts: 640 - 160 steps over NVLink and 159 across the NICs (NVIDIA/nccl tuning.cc: nInterSteps)
    sc = scenario()
    p = sc.system("h100-sxm").perf
    blocks, m, edp = 58.0, 4.0, 640
    ring = 480 * p.up_step_latency + 159 * p.out_step_latency
    got = float(T.dp_latency(sc, acc="h100-sxm", zero=3, tp=2, pp=1, ranks=edp, ga=m, n=1e9, units=blocks))
    want = 3 * m * blocks * (p.collective_latency + ring)
    assert got == pytest.approx(want, rel=1e-12)
    # ZeRO-1 reduces and gathers the 1e9 expert parameters (BF16) once per step in the stack's buckets, which
    # Megatron-Core grows to max(40M, 1M x ranks) = 640 MB at 640 ranks: 2 x ceil(2e9 / 640e6) = 8 calls
    assert sc.stack.dp_bucket == 40e6 and sc.stack.dp_bucket_per_rank == 1e6
    z1 = float(T.dp_latency(sc, acc="h100-sxm", zero=1, tp=2, pp=1, ranks=edp, ga=m, n=1e9, units=blocks))
    assert z1 == pytest.approx(8 * (p.collective_latency + ring), rel=1e-12)


def test_routed_rows_saved_in_fp8_under_an_fp8_recipe():
    # DeepSeek-V3, one card's 4,096 tokens (TP 1), phi = 1: the fc1 input rows 4,096 x 8 x 7,168 x (1 byte under FP8,
    # 2 in BF16), the expert outputs the combine keeps at 2 bytes, the FP32 router probabilities 4,096 x 256 x 4
    a = scenario().model
    rows = 4096 * 8 * 7168
    assert float(moe.routed_activation_extra(a, 4096, 1.0, 1, 2.0)) == pytest.approx(rows * 4 + 4096 * 256 * 4)
    assert float(moe.routed_activation_extra(a, 4096, 1.0, 1, 2.0, 1.0)) == pytest.approx(rows * 3 + 4096 * 256 * 4)
    # Megatron-Core applies the probabilities in the experts' activation (before fc2): the combine keeps no
    # expert output, rows x 2 bytes fewer (its fc1 input rows and the router probabilities stay)
    assert float(moe.routed_activation_extra(a, 4096, 1.0, 1, 2.0, combine_keeps_outputs=False)) == \
        pytest.approx(rows * 2 + 4096 * 256 * 4)
    sc = scenario(moe_keys={"imbalance": 1.0})
    assert sc.stack.name == "megatron-core" and sc.stack.moe_probs_in_activation
    bf16 = float(T._routed_per_block(sc, tp=1, mb=1, ep=64, etp=1, cap=0.0))
    assert bf16 == pytest.approx(rows * 2 + 4096 * 256 * 4)
    fp8 = float(T._routed_per_block(scenario(precision="fp8-mixed", moe_keys={"imbalance": 1.0}), tp=1, mb=1, ep=64,
                                    etp=1, cap=0.0))
    assert bf16 - fp8 == pytest.approx(rows * 1.0)


def test_dropped_fraction_metric_sees_context_parallelism():
    # Qwen3-235B-A22B (E = 128, k = 8), half the experts at 1.5 x, capacity 1.25. 200-token sequences split over
    # cp = 2: 100 tokens per card, mean m = 100 x 8 / 128 = 6.25 rows, capacity floor(1.25 m) = 7; a hot expert gets
    # 1.5 m = 9.375: dropped = 0.5 x (9.375 - 7) / 6.25 = 0.19 (the whole 200 tokens would give 0.15)
    sc = scenario("qwen3-235b-a22b", seq=200, batch=64, moe_keys={"imbalance": 1.5, "hot_experts": "50%"})
    acc = next(iter(sc.systems))
    r = evaluate_arrays(sc, acc, tp=1, pp=1, dp=32, micro_batch=1, zero_stage=1, nics_per_host=8,
                        save_interval_s=3600, ep=8, capacity_factor=1.25, cp=2)
    assert float(np.asarray(r["dropped_fraction"]).reshape(-1)[0]) == pytest.approx(0.5 * (9.375 - 7) / 6.25)
    assert not math.isclose(0.19, 0.5 * (18.75 - 15) / 12.5)


def test_deepseek_v3_default_search_uses_expert_parallelism():
    # DeepSeek-V3, 14.8T tokens in 75 days on H100 with the default search (examples/deepseek-v3.toml without its
    # [search] domains): gathering whole expert sets every micro-batch over hundreds of ranks is modelled, so the
    # planner no longer prefers EP 1 + ZeRO-3 (every published DeepSeek-V3 run uses EP >= 8)
    raw = {"model": {"name": "deepseek-v3"},
           "task": {"tokens": "14.8T", "seq_len": 4096, "global_batch": 15360, "precision": "fp8-mixed"},
           "schedule": {"deadline": "75d", "reserved": "2d"}, "hardware": {"accelerator": "h100-sxm"},
           "checkpoint": {"storage": "superpod-best", "save_interval": "auto", "mode": "async"},
           "moe": {"imbalance": 1.1, "hot_experts": "50%"}, "search": {"max_cards": 4096}}
    report = tpopt.solve(raw)
    assert report.best is not None and report.best.plan.ep >= 8


def test_flat_model_keeps_the_chapters_accounting():
    # the flat model (hardware.efficiency) adds no message latency and no overlap contention
    sc = tpopt.scenario({"model": {"name": "qwen3-30b-a3b"}, "task": {"tokens": "1B", "seq_len": 4096,
                                                                     "global_batch": 256},
                         "schedule": {"deadline": "30d"}, "hardware": {"accelerator": "h100-sxm", "efficiency": 0.4}})
    assert T.comm_sm_share(sc, "h100-sxm") == 0.0
    sc = replace(sc, moe=replace(sc.moe, dispatcher="direct"))
    one = 4096 * 1.25 * 2048 * 2 * 8 * 7 / 8 / 450e9  # EP 8 in-host, the chapter's bandwidth, no fixed cost
    got = float(T.ep_link(sc, acc="h100-sxm", recompute="none", tp=1, pp=1, mb=1, nics=8, ep=8, etp=1))
    assert got == pytest.approx(4 * 48 * one, rel=1e-12)


def test_megatron_recompute_modules_and_mla_up_projections():
    from tpopt.models import memory
    # Megatron-Core's module names: layernorm = norm, core_attn = attn, moe_act = mlp, mla_up_proj = mla_up
    assert memory.parse_recompute("mla_up_proj+moe_act+layernorm") == "norm+mlp+mla_up"
    a = scenario().model
    # DeepSeek-V3's q, k, v (d_q + 2 d_kv = 3 x 128 x 192 per token, BF16) are rebuilt from the latents under
    # mla_up: 4,096 tokens x 73,728 x 2 bytes = 576 MiB less per block and micro-batch (TP 1)
    keep = memory.activation_bytes_per_microbatch(a, 4096, 1, 1, 1, "none")
    rebuilt = memory.activation_bytes_per_microbatch(a, 4096, 1, 1, 1, "mla_up")
    assert float(keep - rebuilt) == pytest.approx(4096 * 3 * 128 * 192 * 2)
    # the up-projection GEMMs rerun: q 1,536 x 128 x 192 + kv 512 x 128 x (128 + 128) weights, 2 FLOPs each
    assert memory.mla_up_params(a) == 1536 * 128 * 192 + 512 * 128 * 256
    assert float(memory.recompute_flops_per_token(a, 4096, "mla_up")) == pytest.approx(
        61 * 2 * (1536 * 128 * 192 + 512 * 128 * 256))
    # a model without MLA keeps its q, k, v
    q = scenario("qwen3-235b-a22b").model
    assert float(memory.activation_bytes_per_microbatch(q, 4096, 1, 1, 1, "mla_up")) == pytest.approx(
        float(memory.activation_bytes_per_microbatch(q, 4096, 1, 1, 1, "none")))


# ---------------------------------------------------------------------------------------------
# issue 35: the flex dispatcher's copies per destination rank, the grouped GEMM's FP8 casts


def test_flex_dispatch_sends_one_copy_per_destination_rank():
    # inside one domain (H = 1), k = 8 uniform experts over EP 8 (16 experts a card): a token reaches
    # 8 (1 - (7/8)^8) = 5.25 distinct ranks, 7/8 of them other cards: 4.59 rows, where the direct
    # (alltoall) dispatcher sends one row per dispatch to another rank, 8 x 7/8 = 7
    flex, _ = moe.a2a_rows_per_token(8, 8, 1, "per-host")
    direct, _ = moe.a2a_rows_per_token(8, 8, 1, "direct")
    assert float(flex) == pytest.approx(7 * (1 - (7 / 8) ** 8))
    assert float(direct) == pytest.approx(7.0)
    # the saving fades as experts per card fall: EP 64, one domain: 63 (1 - (63/64)^8) = 7.56 of k (63/64) = 7.875
    assert float(moe.a2a_rows_per_token(8, 64, 1, "per-host")[0]) == pytest.approx(63 * (1 - (63 / 64) ** 8))
    # k = 1: one expert, one rank: the same row either way
    assert float(moe.a2a_rows_per_token(1, 8, 1, "per-host")[0]) == pytest.approx(
        float(moe.a2a_rows_per_token(1, 8, 1, "direct")[0]))
    assert float(moe.distinct_ranks(8, 1)) == pytest.approx(1.0)


def test_grouped_expert_gemm_quantises_every_experts_rows():
    # Under an FP8 recipe a weight GEMM first quantises its m x k input; a grouped GEMM over E / ep experts
    # of m_per rows each quantises all E / ep x m_per rows, the same bytes as one GEMM over those rows.
    from tpopt.models import steptime
    sc = scenario("qwen3-30b-a3b", precision="fp8-mixed")
    r = T.rates(sc, "h100-sxm")
    assert r.fp8
    local, m_per, k_in, n_out = 8, 4096.0, 2048.0, 1536.0
    rows = local * m_per
    flops = 2.0 * rows * k_in * n_out
    one = ops.Kernel("x", "fwd", "gemm", "", flops, 2.0 * (rows * (k_in + n_out) + local * k_in * n_out),
                     rows, n_out, k_in, 1.0, 1.0, True)
    grouped = one._replace(m=m_per, batch=float(local))
    no_cast = r.__class__(**{**r.__dict__, "cast_bytes": 0.0})
    cast_one = float(steptime.kernel_time(one, r)) - float(steptime.kernel_time(one, no_cast))
    cast_grouped = float(steptime.kernel_time(grouped, r)) - float(steptime.kernel_time(grouped, no_cast))
    # the cast pass: rows x k x cast_bytes bytes at HBM x memory efficiency (its launch cancels in the difference)
    expected = rows * k_in * r.cast_bytes / (r.hbm * r.perf.memory_efficiency)
    assert cast_one == pytest.approx(expected, rel=1e-9)
    assert cast_grouped == pytest.approx(expected, rel=1e-9)


def test_permutation_passes_by_dispatcher():
    # direct (Megatron-Core's alltoall dispatcher), 16 local experts at EP 8: gather into expert order (2 R) plus
    # the chunk sort after the all-to-all (2 R); the combine mirrors it; the unpermute's backward reads the rows
    # once more for the probabilities' gradient
    assert [float(x) for x in ops.permutation_row_passes(8, 8, 16, "direct")] == [4.0, 4.0, 4.0, 5.0]
    # one local expert (or EP 1): no chunk sort
    assert [float(x) for x in ops.permutation_row_passes(8, 128, 1, "direct")] == [2.0, 2.0, 2.0, 3.0]
    assert [float(x) for x in ops.permutation_row_passes(8, 1, 128, "direct")] == [2.0, 2.0, 2.0, 3.0]
    # per-host (DeepEP / HybridEP): the card receives D / k copies per row, D = 8 (1 - (7/8)^8), and expands
    # them into rows: 1 + D / k each way
    d = 8 * (1 - (7 / 8) ** 8) / 8
    got = [float(x) for x in ops.permutation_row_passes(8, 8, 16, "per-host")]
    assert got == pytest.approx([1 + d, 1 + d, 1 + d, 2 + d])


def test_permutation_bytes_in_the_kernel_table():
    # Qwen3-30B-A3B (k = 8, h = 2,048, E = 128), 4,096 tokens a card, TP 1, EP 8, balanced: R = 4,096 x 8 rows;
    # the direct dispatcher's permute moves 4 R h e forward, the flex one (1 + D/k) R h e
    a = scenario("qwen3-30b-a3b").model
    rows, h, e = 4096 * 8, a.hidden, 2.0
    for dispatcher, passes in (("direct", 4.0), ("per-host", 1 + 8 * (1 - (7 / 8) ** 8) / 8)):
        lay = ops.Layout(tp=1.0, micro_batch=1.0, seq_len=4096, ep=8.0, expert_tp=1.0, dispatcher=dispatcher)
        ks = {(k.op, k.phase): k for k in ops.moe_kernels(a, lay)}
        assert float(ks[("moe.permute", "fwd")].bytes) == pytest.approx(passes * rows * h * e)
    # the router's passes over the 4,096 x 128 FP32 scores: 22 bytes a score forward, 32 backward
    router = {(k.op, k.phase): k for k in ops.moe_kernels(a, lay)}
    assert float(router[("router.topk", "fwd")].bytes) == pytest.approx(22.0 * 4096 * 128)
    assert float(router[("router.topk", "dx")].bytes) == pytest.approx(32.0 * 4096 * 128)


def test_scenario_dispatcher_reaches_the_kernels():
    # the same plan with the direct dispatcher (chunk sort, one row per dispatch) costs more compute than with
    # the flex one, and a dense model's compute does not read the dispatcher
    kw = dict(acc="h100-sxm", recompute="none", tp=1, mb=1, ep=8, etp=1)
    direct = T.op_times(scenario("qwen3-30b-a3b", moe_keys={"imbalance": 1.0, "dispatcher": "direct"}), **kw)[0]
    flex = T.op_times(scenario("qwen3-30b-a3b", moe_keys={"imbalance": 1.0, "dispatcher": "per-host"}), **kw)[0]
    assert float(direct.fwd) > float(flex.fwd)


def test_expert_weight_gradient_accumulates_in_fp32():
    # Each local expert's dW GEMM reads and writes its FP32 main_grad: 8 bytes per weight beside the operands
    # (rows x (k + n) x e); with few rows per expert that term decides. gpt-oss-120b (h = f_e = 2,880, gated):
    # 16 local experts of 1,024 rows, the up projection's dW: k = 2,880, n = 5,760
    a = scenario("gpt-oss-120b").model
    lay = ops.Layout(tp=1.0, micro_batch=1.0, seq_len=4096, ep=8.0, expert_tp=1.0)
    ks = {(k.op, k.phase): k for k in ops.moe_kernels(a, lay)}
    dw = ks[("expert.up", "dw")]
    rows, local, k_in, n_out = 4096 * 4, 16, a.hidden, 2 * a.expert_ffn
    assert float(dw.bytes) == pytest.approx(2.0 * rows * (k_in + n_out) + 8.0 * local * k_in * n_out)
    assert float(dw.k) == pytest.approx(rows / local)  # the k loop runs over one expert's rows
    # the same rows spread over 4 x the local experts (EP 2: 64 experts of 256 rows each): the same FLOPs,
    # 4 x the main_grad bytes
    lay2 = ops.Layout(tp=1.0, micro_batch=1.0, seq_len=4096, ep=2.0, expert_tp=1.0)
    dw2 = {(k.op, k.phase): k for k in ops.moe_kernels(a, lay2)}[("expert.up", "dw")]
    assert float(dw2.flops) == pytest.approx(float(dw.flops))
    grad = lambda n_local: 8.0 * n_local * k_in * n_out  # noqa: E731
    assert float(dw2.bytes) - float(dw.bytes) == pytest.approx(grad(64) - grad(16))


def test_grouped_gemm_slower_per_flop_as_rows_per_expert_fall():
    # The same routed rows and FLOPs on a card, split over more local experts (fewer rows each): the expert
    # GEMMs' time rises (tile padding of each expert's last rows, more launches, the dW's k loop and main_grad).
    a = scenario("qwen3-30b-a3b").model
    sc = scenario("qwen3-30b-a3b")
    r = T.rates(sc, "h100-sxm")
    from tpopt.models import steptime

    def expert_time(ep: float) -> tuple[float, float]:
        lay = ops.Layout(tp=1.0, micro_batch=1.0, seq_len=4096, ep=ep, expert_tp=1.0)
        ks = [k for k in ops.moe_kernels(a, lay) if k.op.startswith("expert.") and k.kind == "gemm"]
        # the busiest card's rows are the same whatever EP (balanced): 4,096 tokens x k = 8
        return sum(float(steptime.kernel_time(k, r)) for k in ks), sum(float(k.flops) for k in ks)

    t64, f64 = expert_time(64.0)   # 2 local experts of 16,384 rows
    t8, f8 = expert_time(8.0)      # 16 of 2,048
    t1, f1 = expert_time(1.0)      # 128 of 256
    assert f64 == pytest.approx(f8) and f8 == pytest.approx(f1)
    assert t64 < t8 < t1


def test_grouped_gemm_waves_over_the_resident_experts():
    # Transformer Engine's grouped linear layer runs its expert GEMMs on 4 streams: at most 4 are on the SMs at
    # once. Qwen3-30B-A3B at EP 1 (128 local experts) and 4,096 tokens: 4,096 x 8 / 128 = 256 rows per expert;
    # the up projection (n = 2 x 768 = 1,536) has ceil(256/128) x ceil(1,536/128) = 2 x 12 = 24 tiles per expert,
    # 4 experts 96 tiles on 132 H100 SMs: one wave 96/132 busy (pooled over all 128 experts: 3,072 tiles, 24 waves,
    # 3,072 / 3,168 busy)
    from tpopt.models import roofline, steptime
    a = scenario("qwen3-30b-a3b").model
    lay = ops.Layout(tp=1.0, micro_batch=1.0, seq_len=4096, ep=1.0, expert_tp=1.0)
    up = {(k.op, k.phase): k for k in ops.moe_kernels(a, lay)}[("expert.up", "fwd")]
    assert float(up.m) == 256 and float(up.batch) == 128 and float(up.resident) == 4
    r = T.rates(scenario("qwen3-30b-a3b"), "h100-sxm")
    p = r.perf
    assert p.sms == 132 and (p.tile_m, p.tile_n) == (128, 128)
    assert float(roofline.wave_quantisation(256, 1536, 4, p)) == pytest.approx(96 / 132)
    assert float(roofline.wave_quantisation(256, 1536, 128, p)) == pytest.approx(3072 / 3168)
    # the kernel's compute time is that of the resident-wave efficiency; the call takes at least its 128 experts'
    # host dispatch (steptime.expert_gemm_floor: 128 x the stack's expert_gemm_dispatch), which here decides
    eff = float(roofline.gemm_efficiency(256, 1536, 2048, 4, p))
    t = float(steptime.kernel_time(up, r))
    compute = float(up.flops) / (r.linear_peak * eff) + float(up.count) * p.kernel_overhead
    roof = max(compute, float(up.bytes) / (r.hbm * p.memory_efficiency) + float(up.count) * p.kernel_overhead)
    # (the stack's grouped call then takes that time over its fitted grouped_gemm_efficiency:
    # steptime.grouped_call_time)
    assert t == pytest.approx(max(roof, 128 * r.expert_dispatch) / r.grouped_ratio, rel=1e-9)
    # without the floor (a stack whose grouped GEMM is one launch, at grouped_gemm_efficiency 1 as every stack but
    # the fitted one) the resident-wave time is the kernel's
    assert float(steptime.kernel_time(up, replace(r, expert_dispatch=0.0, grouped_ratio=1.0))) == pytest.approx(
        roof, rel=1e-9)


def test_expert_bias_added_per_local_expert_in_megatron_core():
    # Megatron-Core's TEGroupedMLP adds the experts' output bias after the grouped GEMM, expert by expert
    # (experts.py _apply_bias: t + b * p, concatenated). gpt-oss-120b at EP 8, one 4,096-token sequence in BF16:
    # R = 4,096 x top-4 = 16,384 routed rows of h = 2,880; forward b p written, t + b p read twice and written, the
    # concatenation read and written: 6 x 2 bytes per element; backward g p and g b each written and reduced from
    # g read: 6 x 2 bytes. Kernels: 2 per local expert (16) and the concatenation forward, 4 per expert backward.
    sc = scenario("gpt-oss-120b")
    assert sc.stack.expert_bias_loop  # the megatron-core stack
    a = sc.model
    lay = ops.Layout(tp=1.0, micro_batch=1.0, seq_len=4096, ep=8.0, expert_tp=1.0, expert_bias_loop=True)
    ks = {(k.op, k.phase): k for k in ops.moe_kernels(a, lay)}
    per_way = 6.0 * 2.0 * 16384 * 2880
    assert float(ks[("expert.bias", "fwd")].bytes) == pytest.approx(per_way)  # 0.57 GB
    assert float(ks[("expert.bias", "dx")].bytes) == pytest.approx(per_way)
    assert float(ks[("expert.bias", "fwd")].count) == 33 and float(ks[("expert.bias", "dx")].count) == 64
    # nothing apart where the stack adds the bias in the GEMM, or where the experts have no bias (Qwen3)
    plain = ops.Layout(tp=1.0, micro_batch=1.0, seq_len=4096, ep=8.0, expert_tp=1.0)
    assert not any(k.op == "expert.bias" for k in ops.moe_kernels(a, plain))
    qwen = scenario("qwen3-30b-a3b").model
    assert not any(k.op == "expert.bias" for k in ops.moe_kernels(qwen, lay))
    # and it slows the layer's forward and backward, not its weight gradients
    kw = dict(acc="h100-sxm", recompute="none", tp=1, mb=1, ep=8, etp=1)
    with_loop = T.op_times(sc, **kw)[0]
    without = T.op_times(replace(sc, stack=replace(sc.stack, expert_bias_loop=False)), **kw)[0]
    assert float(with_loop.fwd) > float(without.fwd) and float(with_loop.dx) > float(without.dx)
    assert float(with_loop.dw) == pytest.approx(float(without.dw))


def test_clamped_activation_clamps_eagerly_in_megatron_core():
    # Megatron-Core's weighted_bias_quick_geglu_impl (fused_bias_geglu.py) clamps the two halves of the experts' fc1
    # output in eager PyTorch (the gate from above, the linear half both ways: gpt-oss swiglu_limit 7) and
    # concatenates them before the fused activation. gpt-oss-120b at EP 8, one 4,096-token sequence in BF16 (e = 2):
    # R = 4,096 x top-4 = 16,384 routed rows, w = 2,880 per half.
    # forward: each clamp reads and writes w e (2 of them), the concatenation reads and writes 2 w e: 8 w e per row.
    # backward (autograd): the gate's where(x <= v, g, 0): compare e + 1 (a 1-byte mask), where 1 + 2e; the linear
    # half's where((x >= -v) & (x <= v), g, 0): two compares 2 (e + 1), the and 3, where 1 + 2e; the chunk's
    # gradient concatenated: 4 e. (3e + 2) + (4e + 6) + 4e = 11e + 8 = 30 bytes per element of w.
    sc = scenario("gpt-oss-120b")
    assert sc.stack.activation_clamp_unfused and sc.model.activation_clamp == 7.0  # megatron-core; config.json
    a = sc.model
    rows, w, e = 4096 * 4, 2880, 2.0
    lay = ops.Layout(tp=1.0, micro_batch=1.0, seq_len=4096, ep=8.0, expert_tp=1.0, activation_clamp_unfused=True)
    ks = {(k.op, k.phase): k for k in ops.moe_kernels(a, lay)}
    fwd, bwd = ks[("expert.act_clamp", "fwd")], ks[("expert.act_clamp", "dx")]
    assert float(fwd.bytes) == pytest.approx(8 * rows * w * e)  # 0.75 GB
    assert float(bwd.bytes) == pytest.approx((3 * e + 2 + 4 * e + 6 + 4 * e) * rows * w)  # 1.42 GB
    assert (fwd.count, bwd.count) == (3.0, 9.0)  # 2 clamps + cat; fill, le, where + fill, ge, le, and, where + cat
    assert fwd.group == "mlp"  # rebuilt by the moe_act recompute (the checkpoint wraps bias_act_func)
    rebuilt = steptime.rebuilt_share("norm+mlp", True, a)
    assert rebuilt(fwd) == 1.0 and steptime.rebuilt_share("norm", True, a)(fwd) == 0.0
    # nothing where the activation has no clamp (Qwen3), the stack fuses it, or one fused grouped MLP computes it
    qwen = scenario("qwen3-30b-a3b").model
    assert qwen.activation_clamp == 0.0
    assert not any(k.op == "expert.act_clamp" for k in ops.moe_kernels(qwen, lay))
    assert not any(k.op == "expert.act_clamp" for k in ops.moe_kernels(a, replace(lay, activation_clamp_unfused=False)))
    assert not any(k.op == "expert.act_clamp" for k in ops.moe_kernels(a, replace(lay, fused_grouped_mlp=True)))
    # it slows the layer's forward and backward, not its weight gradients
    kw = dict(acc="h100-sxm", recompute="none", tp=1, mb=1, ep=8, etp=1)
    with_clamp = T.op_times(sc, **kw)[0]
    without = T.op_times(replace(sc, stack=replace(sc.stack, activation_clamp_unfused=False)), **kw)[0]
    assert float(with_clamp.fwd) > float(without.fwd) and float(with_clamp.dx) > float(without.dx)
    assert float(with_clamp.dw) == pytest.approx(float(without.dw))
    # memory: the fused activation saves the clamped copy of the fc1 output (rows x 2 w x e, 180 MiB here) unless the
    # activation is recomputed (moe_act, tpopt's mlp group), as every gpt-oss recipe does
    mem = dict(tp=1, mb=1, ep=8, etp=1, cap=0.0)
    phi = float(T.load_factor(sc, 8, 0.0))
    kept = float(T._routed_per_block(sc, **mem, recompute="none"))
    rebuilt_act = float(T._routed_per_block(sc, **mem, recompute="norm+mlp"))
    assert kept - rebuilt_act == pytest.approx(rows * phi * 2 * w * e)
    plain = float(T._routed_per_block(replace(sc, stack=replace(sc.stack, activation_clamp_unfused=False)), **mem))
    assert plain == pytest.approx(rebuilt_act)


def test_yarn_rope_runs_unfused_in_megatron_core():
    # Megatron-Core passes YaRN's attention factor (gpt-oss: 0.1 ln 32 + 1) to apply_rotary_pos_emb, which then
    # takes its unfused PyTorch path (t cos + rotate_half(t) sin, then the concatenation): 12 element passes forward
    # and 10 backward on q and k, against the fused kernel's 2 and 2. gpt-oss-120b, one 4,096-token sequence in
    # BF16: 4,096 x (64 + 8) x 64 = 18.9M elements of q and k.
    a = scenario("gpt-oss-120b").model
    assert a.rope_attention_factor == pytest.approx(0.1 * math.log(32.0) + 1.0, abs=1e-6)
    elements = 4096 * (64 + 8) * 64

    def rope(lay):
        return {k.phase: k for k in ops.layer_kernels(a, lay) if k.op == "rope"}

    fused = rope(ops.Layout(tp=1.0, micro_batch=1.0, seq_len=4096, ep=8.0, expert_tp=1.0))
    unfused = rope(ops.Layout(tp=1.0, micro_batch=1.0, seq_len=4096, ep=8.0, expert_tp=1.0, rope_scaled_unfused=True))
    assert float(fused["fwd"].bytes) == pytest.approx(2 * 2.0 * elements)
    assert float(unfused["fwd"].bytes) == pytest.approx(12 * 2.0 * elements)
    assert float(unfused["dx"].bytes) == pytest.approx(10 * 2.0 * elements)
    # a plain RoPE (Qwen3: no YaRN factor) stays fused on the same stack
    q = scenario("qwen3-30b-a3b")
    assert q.model.rope_attention_factor == 1.0 and q.stack.rope_scaled_unfused
    lay = ops.Layout(tp=1.0, micro_batch=1.0, seq_len=4096, ep=8.0, expert_tp=1.0, rope_scaled_unfused=True)
    qr = {k.phase: k for k in ops.layer_kernels(q.model, lay) if k.op == "rope"}
    assert float(qr["fwd"].bytes) == pytest.approx(2 * 2.0 * 4096 * (q.model.d_attn + q.model.d_kv))
