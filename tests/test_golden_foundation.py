"""Golden figures of the training-systems chapter (sections 10.1-10.6).

Each test cites the chapter section it reproduces and compares what tpopt computes -- ``tpopt evaluate
--json`` through click's CliRunner, the public API (:func:`tpopt.evaluate`), or the model function that
owns the relation -- with the chapter's printed figure, at its printed rounding. Where a figure is a
quotient of two tool outputs (a rate from the step budget), the quotient is written out in the test.
A figure tpopt cannot produce is listed in :data:`NOT_EXPRESSIBLE` with the reason, never asserted by a
tautology.
"""

import json
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

import tpopt
from tpopt.catalogs import load_catalog
from tpopt.cli.main import cli
from tpopt.models import batch, comm, compute, memory
from tpopt.models.arch import flops_per_token, gemm_params, param_count
from tpopt.models.network import host_fabric
from tpopt.models.units import DAY, GB, GIB, MIB

CAT = load_catalog()
DESIGN_DIR = Path(__file__).resolve().parents[1] / "examples"
QWEN = CAT.model("qwen3-8b")
N = 8_190_735_360
S = 8192
B = 384
TOKENS = 100e9
RTX = 165.2e12
H100 = 989e12


def rel(x, printed, digits):
    """|x - printed| within half a unit of the printed last digit."""
    return abs(x - printed) <= 0.5 * 10 ** (-digits) + 1e-12


NOT_EXPRESSIBLE = {
    "10.2.3 GPU-cast peak 288 MiB (G + 2G for G = 96 MiB)":
        "tpopt models the two cast paths' times (comm.cast_path_times: 4.13 vs 6.59 ms, tested below), not the "
        "transient buffers of the GPU-cast path; no report or function holds that peak",
    "10.6 F = 120 N^2 with D = 20N":
        "an identity of F = 6ND, not a figure of a plan; the plan figures at D = 20T are tested below",
}
"""Chapter figures tpopt cannot produce, with the reason (nothing asserts them)."""


def evaluate_json(*args):
    """``tpopt evaluate ARGS --json`` as the command prints it (exit 0 or 3: a plan that breaks a rule
    still has its figures)."""
    r = CliRunner().invoke(cli, ["evaluate", *args, "--json"])
    assert r.exit_code in (0, 3), r.output
    return json.loads(r.output[r.output.index("{"):])


def constraint(report, name):
    return next(c for c in report["constraints"] if c["name"] == name)


def design_without_overhead(tmp_path):
    """The design case with no failures (card_mtbf none) and a 1 PB/s checkpoint tier: the overhead L is
    below 1e-7, so the per-step budget is (deadline - reserved) / iterations, the chapter's 10.1 budget."""
    text = (DESIGN_DIR / "design-case.toml").read_text()
    for old, new in (('job_mtbf = { cards = 1024, interval = "7.9h" }', 'card_mtbf = "none"'),
                     ('write_bandwidth = "7GB/s"', 'write_bandwidth = "1PB/s"')):
        assert old in text
        text = text.replace(old, new, 1)
    p = tmp_path / "no-overhead.toml"
    p.write_text(text)
    return p


# ---------------------------------------------------------------- REFERENCE "Conventions"

def test_conventions_param_count_exact():
    # REFERENCE Conventions: Qwen3-8B N = 8,190,735,360 exactly (untied, q/k norm, 2 norms per layer)
    assert param_count(QWEN) == N


def test_conventions_published_param_counts():
    # Published counts of the catalog models (model cards / config.json)
    assert param_count(CAT.model("llama3-8b")) == 8_030_261_248
    assert param_count(CAT.model("llama3-70b")) == 70_553_706_496
    assert round(param_count(CAT.model("qwen3-32b")) / 1e9, 1) == 32.8
    assert round(param_count(CAT.model("gpt3-175b")) / 1e9) == 175


def test_conventions_flops_per_token():
    # REFERENCE Conventions: 6 x GEMM params + 12 L d_attn (s+1)/2 -> 52.7 GFLOP/token, 4.31e14 per sequence
    gemm = 36 * (4096 * 4096 * 2 + 4096 * 1024 * 2 + 3 * 4096 * 12288) + 151936 * 4096
    assert gemm_params(QWEN) == gemm
    expected = 6 * gemm + 12 * 36 * 4096 * (S + 1) / 2
    assert flops_per_token(QWEN, S) == pytest.approx(expected, rel=1e-15)
    assert rel(flops_per_token(QWEN, S) / 1e9, 52.7, 1)
    assert rel(flops_per_token(QWEN, S) * S / 1e14, 4.31, 2)
    # 6N + attention would give 56.4 and must not be what we use
    assert not rel((6 * N + 12 * 36 * 4096 * (S + 1) / 2) / 1e9, 52.7, 1)


def test_conventions_units_and_iterations():
    # REFERENCE Conventions: 24 GB = 22.35 GiB, 80 GB = 74.5 GiB, 200 Gbit/s = 25 GB/s, ceil(1e11/3,145,728)
    from tpopt.models.units import parse_bandwidth, parse_bytes
    assert rel(parse_bytes("24GB") / GIB, 22.35, 2)
    assert rel(parse_bytes("80GB") / GIB, 74.5, 1)
    assert parse_bandwidth("200Gbit/s") == 25e9
    assert compute.iterations(TOKENS, B * S) == 31_790


# ---------------------------------------------------------------- 10.1

def test_10_1_budget(tmp_path):
    # 10.1: 25 usable days / 31,790 steps = 67.9 s per step; 38,600 token/s over 30 d, 46,300 over 25 d.
    # tpopt's step.budget limit is that budget (without failures); the throughput a plan must sustain is
    # the tool's tokens per step over it.
    p = design_without_overhead(tmp_path)
    r = evaluate_json("--scenario", str(p), "--cards", "48")
    assert r["metrics"]["overhead_fraction"] < 1e-7 and r["metrics"]["iterations"] == 31_790
    budget = constraint(r, "step.budget")
    assert budget["unit"] == "s" and rel(budget["limit"], 67.9, 1)
    assert round(r["metrics"]["tokens_per_step"] / budget["limit"], -2) == 46_300
    r30 = evaluate_json("--scenario", str(p), "--cards", "48", "--reserved", "0d")  # all 30 days usable
    assert round(r30["metrics"]["tokens_per_step"] / constraint(r30, "step.budget")["limit"], -2) == 38_600


def test_10_1_states():
    # REFERENCE 10.1: 16 B/param -> 131.1 GB = 122.1 GiB; FP32 grads 18 B/param; FP8 copy 1.0002 B (8.2 GB)
    r = memory.recipe("bf16-mixed")
    assert r.total == 16
    assert rel(memory.persistent_state_bytes(N, r) / GB, 131.1, 1)
    assert rel(memory.persistent_state_bytes(N, r) / GIB, 122.1, 1)
    assert memory.recipe("bf16-mixed-fp32-grad").total == 18
    fp8 = memory.recipe("fp8-mixed")
    assert rel(fp8.weights, 1.0002, 4)
    assert rel(fp8.weights * N / GB, 8.2, 1)
    assert fp8.master + fp8.moments == 12  # master and optimizer unchanged


def test_10_1_compute():
    # REFERENCE 10.1: 5.27e21 FLOP; H100 at 40 % = 7,500 token/s/card -> 6 cards; RTX 4090 31 cards;
    # per step 1.66e17: 78.3 s on 32 cards, 52.2 s on 48 (6.53 s per micro-batch on 48)
    fpt = flops_per_token(QWEN, S)
    total = TOKENS * fpt
    assert rel(total / 1e21, 5.27, 2)
    assert round(compute.tokens_per_second_per_card(H100, 0.4, fpt), -2) == 7_500
    assert compute.cards_for_deadline(total, H100, 0.4, 30 * DAY) == 6
    assert compute.cards_for_deadline(total, RTX, 0.4, 30 * DAY) == 31
    step = B * S * fpt
    assert rel(step / 1e17, 1.66, 2)
    assert rel(compute.compute_time(step, 32, RTX, 0.4), 78.3, 1)
    assert rel(compute.compute_time(step, 48, RTX, 0.4), 52.2, 1)
    assert rel(compute.compute_time(step, 48, RTX, 0.4) / 8, 6.53, 2)
    # two 80 GB cards hold the 131.1 GB state but would need ~77 days of compute: the tool's compute per
    # step on two H100s (40 %) times its iterations
    m = tpopt.evaluate(cards=2, hw="h100-sxm").metrics
    assert round(m["compute_s"] * m["iterations"] / DAY) == 77


def test_10_1_critical_batch():
    # REFERENCE 10.1.1: S_min = 19,434, E_min = 38.9B; weak 19.4/15.7/13.8/12.8/12.1 d, strong
    # 19.4/9.8/5.0/2.6/0.8 d; limit 1.64x (2M), 7.36x (20M)
    b_tok = B * S
    s_min = batch.min_steps(31_790, b_tok, 2e6)
    assert round(float(s_min)) == 19_434
    assert rel(float(batch.min_examples(s_min, 2e6)) / 1e9, 38.9, 1)
    weak = [batch.weak_scaling_days(s_min, 2e6, b_tok * c / 48, 52.80) for c in (48, 96, 192, 384, 1536)]
    for got, want in zip(weak, (19.4, 15.7, 13.8, 12.8, 12.1), strict=False):
        assert rel(float(got), want, 1)
    strong = [batch.strong_scaling_days(31_790, 52.224, 48, c, 0.576) for c in (48, 96, 192, 384, 1536)]
    for got, want in zip(strong, (19.4, 9.8, 5.0, 2.6, 0.8), strict=False):
        assert rel(float(got), want, 1)
    assert rel(float(batch.weak_scaling_limit(b_tok, 2e6)), 1.64, 2)
    assert rel(float(batch.weak_scaling_limit(b_tok, 20e6)), 7.36, 2)


# ---------------------------------------------------------------- 10.2

def test_10_2_zero_states():
    # REFERENCE 10.2: d = 8 -> 122.1 / 42.0 / 28.6 / 15.3 GiB
    r = memory.recipe("bf16-mixed")
    got = [memory.zero_state_bytes(N, 8, z, r) / GIB for z in range(4)]
    for g, want in zip(got, (122.1, 42.0, 28.6, 15.3), strict=False):
        assert rel(float(g), want, 1)
    # and the formulas themselves: M1 = 4N + 12N/d, M2 = 2N + 14N/d, M3 = 16N/d
    for d in (2, 7, 48):
        assert float(memory.zero_state_bytes(N, d, 1, r)) == pytest.approx(4 * N + 12 * N / d)
        assert float(memory.zero_state_bytes(N, d, 2, r)) == pytest.approx(2 * N + 14 * N / d)
        assert float(memory.zero_state_bytes(N, d, 3, r)) == pytest.approx(16 * N / d)


def test_10_2_design_memory():
    # 10.2: 16N/d + 10 GiB on 22 GiB: d=8 25.3 (3.3 over); d=16 17.6; 32 cards 3.8 + 10 = 13.8
    # (8.2 margin); 48 cards 2.5 + 10 = 12.5 (9.5 margin). tpopt evaluate's memory per card and the
    # memory.per_card constraint's slack (negative: over the limit) on the design case (ZeRO-3, DP = cards).
    printed = {8: (25.3, -3.3), 16: (17.6, None), 32: (13.8, 8.2), 48: (12.5, 9.5)}
    for cards, (peak, margin) in printed.items():
        r = evaluate_json("--cards", str(cards))
        assert r["plan"]["dp"] == cards and r["plan"]["zero_stage"] == 3
        assert rel(r["metrics"]["memory_per_card_gib"], peak, 1), cards
        mem = constraint(r, "memory.per_card")
        assert mem["unit"] == "GiB" and mem["limit"] == 22.0
        assert rel(r["metrics"]["states_gib"], peak - 10, 1) and r["metrics"]["activations_gib"] == 10.0
        if margin is not None:
            assert rel(mem["slack"], margin, 1), cards


def test_10_2_peak_is_max_not_sum():
    # REFERENCE 10.2 / chapter 10.1.2: 8 GiB activations + 4 GiB gather live together = 12 GiB; reused = 8
    assert memory.peak_with_reuse(0, 8 * GIB + 4 * GIB) == 12 * GIB
    assert memory.peak_with_reuse(0, 8 * GIB, 4 * GIB) == 8 * GIB


def test_10_2_recompute_example():
    # REFERENCE 10.2.2: h = [128, 12288] fp32 = 6 MiB; per layer 6 + 2 + 2 = 10 MiB rebuildable;
    # 9-layer stage 90 MiB (94 MB); GEMM inputs 135 -> 45 MiB (142 -> 47 MB); 4 waiting micro-batches 360 MiB
    # (377 MB); the largest rebuilt workspace is the 6 MiB product, reused layer after layer.
    kw = dict(act_bytes=4.0)  # FP32 activations, 128 tokens (one sequence of 128)
    g = memory.layer_activation_groups(QWEN, 128, 1, **kw)
    assert float(g["mlp"]) == 6 * MIB  # the product a (x) u
    assert float(g["norm"]) == 2 * 2 * MIB  # two normalised outputs
    assert float(g["norm"] + g["mlp"]) == 10 * MIB
    def stage(rc):
        return float(memory.activation_bytes_per_microbatch(QWEN, 128, 1, 1, 9, rc, **kw))
    saved = stage("none") - stage("norm+mlp")
    assert saved == 90 * MIB and round(saved / 1e6) == 94
    def gemm_in(rc):
        return 9 * float(memory.gemm_input_bytes(QWEN, 128, 1, rc, **kw))
    assert gemm_in("none") == 135 * MIB and round(gemm_in("none") / 1e6) == 142
    assert gemm_in("norm+mlp") == 45 * MIB and round(gemm_in("norm+mlp") / 1e6) == 47
    assert float(memory.recompute_workspace_bytes(QWEN, 128, 1, 1, "norm+mlp", **kw)) == 6 * MIB
    # a 4-stage 1F1B pipeline of Qwen3-8B's 36 layers: the first stage (9 layers) holds 4 micro-batches waiting
    # for their backward, so the kept activations shrink by 4 x 90 MiB; the workspace stays one 6 MiB product
    from tpopt.models import terms as T
    from tpopt.models.plan import MemoryOptions, Scenario, Task

    sc = Scenario(model=QWEN, task=Task(tokens=1e9, seq_len=128, global_batch=8), systems={},
                  memory=MemoryOptions(activation_bytes=4.0))
    def kept(rc):
        return float(T.stored_activations(sc, schedule="1f1b", recompute=rc, tp=1, pp=4, dp=1, mb=1))
    assert kept("none") - kept("norm+mlp") == 360 * MIB and round((kept("none") - kept("norm+mlp")) / 1e6) == 377
    acts = float(T.activations(sc, schedule="1f1b", recompute="norm+mlp", tp=1, pp=4, dp=1, mb=1))
    assert acts - kept("norm+mlp") == 6 * MIB


def test_10_2_offload_and_casting():
    # REFERENCE 10.2.3: T_wait = max(0, V/B - W); G = 96 MiB: PCIe 4.0 4.13 vs 6.59 ms; C2C 1.21 vs 0.75 ms;
    # B* = 147 GB/s; GPU-cast peak 288 MiB
    assert comm.offload_wait(64e9, 32e9, 1.5) == pytest.approx(0.5)
    assert comm.offload_wait(64e9, 32e9, 3.0) == 0.0
    G = 96 * MIB
    tc, tg = comm.cast_path_times(G, 32e9, 307.2e9, 1008e9)
    assert rel(float(tc) * 1e3, 4.13, 2) and rel(float(tg) * 1e3, 6.59, 2)
    tc, tg = comm.cast_path_times(G, 450e9, 307.2e9, 1008e9)
    assert rel(float(tc) * 1e3, 1.21, 2) and rel(float(tg) * 1e3, 0.75, 2)
    assert round(comm.cast_break_even_bandwidth(307.2e9, 1008e9) / 1e9) == 147
    # the GPU-cast peak (288 MiB) is not a tpopt figure: see NOT_EXPRESSIBLE


# ---------------------------------------------------------------- 10.3 communication

def test_10_3_zero3_volume_and_link_time():
    # REFERENCE 10.3: V = 3m (d-1)/d 2N: 48 cards (m=8) 385 GB, 32 cards (m=12) 571 GB; link 12.0 / 17.9 s
    v48 = float(comm.zero_dp_volume(3, N, 48, 8))
    v32 = float(comm.zero_dp_volume(3, N, 32, 12))
    assert v48 == pytest.approx(3 * 8 * 47 / 48 * 2 * N)
    assert round(v48 / GB) == 385 and round(v32 / GB) == 571
    bw = float(comm.dp_ring_bandwidth(host_fabric(8, 32e9, 25e9), 1, 48, 8))
    assert bw == 32e9  # PCIe 4.0 x16 without P2P; 8 NICs of 200 Gbit/s are not the bottleneck
    assert rel(v48 / bw, 12.0, 1) and rel(v32 / bw, 17.9, 1)
    # per micro-batch 1.50 s vs 6.53 s of compute
    assert rel(v48 / bw / 8, 1.50, 2)


def test_10_3_exposed_embedding_pair():
    # 10.3: exposed = 2 x 1.2447 GB x (d-1)/d / 32 GB/s = 0.08 s. The design case on 48 cards: tpopt's
    # exposed communication, and the embedding bytes it implies (exposed x 32 GB/s x d/(d-1) / 2)
    m = evaluate_json("--cards", "48")["metrics"]
    assert rel(m["comm_exposed_s"], 0.08, 2)
    assert rel(m["comm_exposed_s"] * 32e9 * 48 / 47 / 2 / GB, 1.2447, 4)
    unh = float(comm.zero_dp_unhidden_bytes(3, 151936 * 4096, 48))
    assert rel(unh / GB / 2 * 48 / 47, 1.2447, 4)
    # with enough compute per window, only the unhidable part shows
    assert float(comm.exposed_time(unh / 32e9, 1.50, 6.53, 8)) == pytest.approx(unh / 32e9)


def test_10_3_shared_nic():
    # 10.3: one 200G NIC per 8-card host: link 15.4 s > 14.5 s cap; per micro-batch 1.92 s; if prefetch
    # fails 68.1 s. tpopt evaluate on 48 cards with one NIC per host; the cap is the step budget less
    # compute and input wait; "prefetch fails" is [comm] overlap = false.
    bw = float(comm.dp_ring_bandwidth(host_fabric(8, 32e9, 25e9), 1, 48, 1))
    assert bw == 25e9
    r = evaluate_json("--cards", "48", "--nics-per-host", "1")
    m = r["metrics"]
    assert rel(m["comm_link_s"], 15.4, 1) and rel(m["comm_link_s"] / r["plan"]["grad_accum"], 1.92, 2)
    cap = constraint(r, "step.budget")["limit"] - m["compute_s"] - m["input_wait_s"]
    assert rel(cap, 14.5, 1) and m["comm_link_s"] > cap
    m = tpopt.evaluate(cards=48, nics_per_host=1, overlap=False).metrics
    assert rel(m["step_s"], 68.1, 1)


def test_10_3_link_busy_and_buckets():
    # REFERENCE 10.3: 3 ms reduce, 5 ms compute, link busy 4 ms -> 2 ms exposed;
    # 72 MiB over 4 ranks at 25 GB/s 4.55 ms; three buckets 1.53 ms each, 4.59 total; 400G 2.28 ms
    assert comm.link_busy_exposure(0.0, 3e-3, 4e-3, 5e-3) == pytest.approx(2e-3)
    assert comm.link_busy_exposure(0.0, 3e-3, 0.0, 5e-3) == 0.0
    t1 = float(comm.ring_allreduce_time(72 * MIB, 4, 25e9, 0.02e-3))
    t3 = float(comm.ring_allreduce_time(72 * MIB, 4, 25e9, 0.02e-3, buckets=3))
    assert rel(t1 * 1e3, 4.55, 2) and rel(t3 * 1e3, 4.59, 2) and rel(t3 / 3 * 1e3, 1.53, 2)
    assert rel(float(comm.ring_allreduce_time(72 * MIB, 4, 50e9, 0.02e-3)) * 1e3, 2.28, 2)


def test_10_3_causal_pairs():
    # 10.3: s(s+1)/2 pairs: 2 x 4096 -> 16,781,312; 7168 + 1024 -> 26,218,496 (+56 %). tpopt's compute per
    # step at sequence length s is C(s) = a s + b pairs(s) (GEMM work per token, attention work per pair);
    # a and b follow from s = 1 (one pair) and s = 2 (three), and every other length's pairs from C(s).
    C = {s: tpopt.evaluate(cards=48, seq_len=s).metrics["compute_s"] for s in (1, 2, 1024, 4096, 7168)}
    b = C[2] - 2 * C[1]
    a = C[1] - b

    def pairs(s):
        return (C[s] - a * s) / b
    assert round(2 * pairs(4096)) == 16_781_312
    assert round(pairs(7168) + pairs(1024)) == 26_218_496
    assert round(((pairs(7168) + pairs(1024)) / (2 * pairs(4096)) - 1) * 100) == 56


# ---------------------------------------------------------------- 10.6

def test_10_6_amdahl_and_scale():
    # REFERENCE 10.6: T'/T = 1 - f + f/r: 5 of 100 ms at half bandwidth -> 105 ms; 50 ms -> 150 ms
    assert float(compute.amdahl_ratio(0.05, 0.5)) * 100 == pytest.approx(105)
    assert float(compute.amdahl_ratio(0.5, 0.5)) * 100 == pytest.approx(150)

def test_10_6_scale_of_a_1t_dense_model(tmp_path):
    # 10.6: F = 6ND, D = 20T, 40 %: 1T dense on 16,384 cards: A100 679, H100 214, B200 94 days; B200 needs
    # 17,147 cards for 90 days; at 50 % 75 days. A Llama-shaped config with 1T GEMM parameters (tpopt's 6 x
    # GEMM parameters is the chapter's 6N): 232 x (4 x 16384^2 + 3 x 16384 x 65536) + 217,748 x 16384 (tied
    # lm_head) = 999,999,995,904; one-token sequences make the attention term negligible (7.6e-6).
    (tmp_path / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 16384,
        "intermediate_size": 65536, "num_hidden_layers": 232, "num_attention_heads": 128,
        "num_key_value_heads": 128, "head_dim": 128, "vocab_size": 217748, "tie_word_embeddings": True,
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-5}))
    (tmp_path / "s.toml").write_text(textwrap.dedent("""\
        [model]
        config = "config.json"
        [task]
        tokens = "20T"
        seq_len = 1
        global_batch = 1048576
        [schedule]
        deadline = "1000d"
        [hardware]
        accelerator = ["a100-80gb-sxm", "h100-sxm", "b200"]
        efficiency = 0.40
        [search]
        max_cards = 100000
        """))

    def compute_days(cards, acc, **kw):
        m = tpopt.evaluate(str(tmp_path / "s.toml"), cards=cards, accelerator=acc, **kw).metrics
        return m["compute_s"] * m["iterations"] / DAY

    assert round(compute_days(16384, "a100-80gb-sxm")) == 679
    assert round(compute_days(16384, "h100-sxm")) == 214
    assert round(compute_days(16384, "b200")) == 94
    assert round(compute_days(16384, "b200", efficiency=0.5)) == 75
    assert compute_days(17147, "b200") <= 90 < compute_days(17146, "b200")  # 17,147 cards for 90 days
