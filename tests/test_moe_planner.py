"""Mixture-of-experts in the planner (issue 11, items 2-5): EP, expert-TP and capacity as decisions.

Golden figures, asserted against the tool's own outputs (``tpopt evaluate --json``):
- chapter 10.3.4: Qwen3-235B-A22B (E = 128, k = 8), one 8,192-token sequence, half the experts 1.5 x hot:
  65,536 dispatches; capacity 512/640/768/1,024 rows at c = 1, 1.25, 1.5, 2; 25/12.5/0/0 % dropped;
  25/30/33/50 % padding;
- chapter 10.5: its routed-expert weights, 423 GiB in BF16 on one rank, about 26.4 GiB per EP16 rank.
The other expectations are derivations written out here from the relations' formulas (models/moe.py).
"""

import json

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_solver_properties import PYOMO_RUNS, check_agreement  # the backends-agree check, reused

from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import build_scenario
from tpopt.cli.main import cli
from tpopt.models.arch import expert_params, param_count

GIB = 2**30
CAT = load_catalog()

def scenario_text(model, tokens, seq_len, batch, deadline, tail=""):
    return f"""
[model]
name = "{model}"
[task]
tokens = "{tokens}"
seq_len = {seq_len}
global_batch = {batch}
[schedule]
deadline = "{deadline}"
[hardware]
accelerator = "h100-sxm"
efficiency = 0.4
[checkpoint]
save_interval = "1800s"
mode = "sync"
{tail}"""


# the chapter's routing shape: half the experts at 1.5 x the mean
Q235 = scenario_text("qwen3-235b-a22b", "1T", 8192, 1024, "60d", '[moe]\nimbalance = 1.5\nhot_experts = "50%"\n'
                                                                  'max_drop = "30%"\n')
Q30 = scenario_text("qwen3-30b-a3b", "100B", 4096, 256, "30d")


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def write(tmp_path, text, name="s.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def evaluate_json(path, *flags):
    r = run("evaluate", "--scenario", path, "--json", *flags)
    assert r.exit_code in (0, 3), r.output  # 3: the plan is evaluated but infeasible
    return json.loads(r.stdout)


# ---------------------------------------------------------------------------------------------
# the chapter's MoE figures through tpopt evaluate


@pytest.mark.parametrize("c,rows,dropped,padded", [(1.0, 512, 25.0, 25), (1.25, 640, 12.5, 30), (1.5, 768, 0.0, 33),
                                                   (2.0, 1024, 0.0, 50)])
def test_capacity_rows_and_drops_chapter_10_3_4(tmp_path, c, rows, dropped, padded):
    p = write(tmp_path, Q235)
    d = evaluate_json(p, "--cards", 256, "--tp", 1, "--pp", 8, "--micro-batch", 1, "--ep", 16, "--capacity", c)
    m = d["metrics"]
    assert m["dispatches_per_block"] == 65_536  # 8,192 tokens x k = 8
    assert m["capacity_rows"] == rows
    assert round(m["dropped_fraction"] * 100, 1) == dropped
    assert round(m["padded_fraction"] * 100) == padded
    assert d["plan"]["capacity_factor"] == c and d["plan"]["ep"] == 16
    drops = next(x for x in d["constraints"] if x["name"] == "moe.capacity_drops")
    assert drops["value"] == pytest.approx(dropped) and drops["limit"] == pytest.approx(30.0)


def test_expert_weights_423_gib_and_ep16_share_chapter_10_5(tmp_path):
    p = write(tmp_path, Q235)
    whole = evaluate_json(p, "--cards", 8, "--tp", 1, "--pp", 1, "--ep", 1)["metrics"]
    ep16 = evaluate_json(p, "--cards", 16, "--tp", 1, "--pp", 1, "--ep", 16)["metrics"]
    assert round(whole["expert_weights_gib"]) == 423  # every routed expert, BF16, on one rank
    assert round(ep16["expert_weights_gib"], 1) == 26.4  # one EP16 rank's share
    assert round(16 * whole["expert_weights_gib"]) == 6768  # every receiver sent all experts (chapter 10.5)
    # 94 MoE blocks x 128 experts x 3 x 4096 x 1536 parameters
    assert ep16["expert_params_per_card"] == 94 * 128 * 3 * 4096 * 1536 / 16


def test_plan_line_shows_ep_and_capacity(tmp_path):
    p = write(tmp_path, Q235)
    r = run("evaluate", "--scenario", p, "--cards", 256, "--pp", 8, "--ep", 16, "--capacity", "1.25")
    assert "EP 16 across 2 hosts, expert-TP 1, capacity 1.25" in r.output
    r = run("evaluate", "--scenario", p, "--cards", 256, "--pp", 8, "--ep", 8)
    assert "EP 8 in-host, expert-TP 1, dropless" in r.output
    assert "dispatches per MoE block" in r.output and "all-to-all" in r.output


# ---------------------------------------------------------------------------------------------
# relations, derived here


def test_expert_state_sharded_by_ep_and_zero_over_expert_data_parallel(tmp_path):
    # Qwen3-30B-A3B on 16 H100, TP = PP = 1, ZeRO-1, EP 8: the non-expert state is ZeRO-1 over dp = 16
    # (4 N_ne + 12 N_ne / 16); each card holds 1/8 of the routed experts, ZeRO-1 over edp = 16 / 8 = 2
    p = write(tmp_path, Q30)
    m = evaluate_json(p, "--cards", 16, "--zero", 1, "--tp", 1, "--pp", 1, "--ep", 8)["metrics"]
    a = CAT.model("qwen3-30b-a3b")
    x = expert_params(a)
    n_ne = param_count(a) - x
    want = 4 * n_ne + 12 * n_ne / 16 + (4 * x / 8 + 12 * x / 8 / 2)
    assert m["states_gib"] == pytest.approx(want / GIB, rel=1e-12)
    assert m["expert_dp"] == 2 and m["expert_states_gib"] == pytest.approx((4 * x / 8 + 6 * x / 8) / GIB)
    # EP 1: every expert on every card, ZeRO-1 over all 16 (the dense formula with N = total)
    m1 = evaluate_json(p, "--cards", 16, "--zero", 1, "--tp", 1, "--pp", 1, "--ep", 1)["metrics"]
    n = param_count(a)
    assert m1["states_gib"] == pytest.approx((4 * n + 12 * n / 16) / GIB, rel=1e-12)


def test_all_to_all_volume_on_nvlink_and_nics(tmp_path):
    # one card's 4,096 tokens, k = 8, h = 2048, BF16, dropless with the default routing shape (half the experts
    # at 1.25 x): the busiest EP rank's load factor is 1.25. 48 MoE blocks, 4 exchanges each per micro-batch,
    # 16 micro-batches per step on 16 cards (256 / 16).
    p = write(tmp_path, Q30 + "[moe]\ndispatcher = 'direct'\n")  # Megatron-Core's alltoall: a row per dispatch
    rows = 4096 * 1.25 * 2048 * 2  # bytes per row-per-token
    # EP 8 inside one host: k x 7/8 rows per token over NVLink (450 GB/s per direction)
    m = evaluate_json(p, "--cards", 16, "--zero", 1, "--ep", 8)["metrics"]
    one = rows * 8 * 7 / 8 / 450e9
    assert m["ep_link_s"] == pytest.approx(4 * 48 * one * 16, rel=1e-12)
    assert m["ep_placement"] == "in-host" and m["load_factor"] == 1.25
    assert m["ep_exposed_s"] == pytest.approx(m["ep_link_s"])  # 1F1B: no overlap by default
    # EP 16 across 2 hosts: k x 8/16 rows leave the host through 8 x 400 Gbit/s NICs shared by 8 cards
    # (50 GB/s each), k x 7/16 stay on NVLink at the same time
    m = evaluate_json(p, "--cards", 16, "--zero", 1, "--ep", 16)["metrics"]
    one = max(rows * 8 * 7 / 16 / 450e9, rows * 8 * 8 / 16 / 50e9)
    assert m["ep_link_s"] == pytest.approx(4 * 48 * one * 16, rel=1e-12)
    assert m["ep_placement"] == "across 2 hosts" and m["ep_hosts"] == 2
    # EP 1: no all-to-all
    assert evaluate_json(p, "--cards", 16, "--zero", 1, "--ep", 1)["metrics"]["ep_link_s"] == 0
    # the default stack (Megatron-Core's flex dispatcher, DeepEP / HybridEP): one copy per destination host.
    # EP 16 over H = 2 hosts: a token's 8 experts sit on H (1 - (1 - 1/H)^8) = 1.9921875 distinct hosts on
    # average, the other one of them (x (H - 1)/H) gets a copy over the NICs: 0.99609375 rows; NVLink then
    # forwards one copy per distinct destination rank, 16 (1 - (15/16)^8) x 7/8 = 5.65 rows (the NICs pace it).
    # In-host (EP 8) flex sends 7 (1 - (7/8)^8) = 4.59 copies where the direct dispatcher sends 7 rows.
    d = evaluate_json(write(tmp_path, Q30, "d.toml"), "--cards", 16, "--zero", 1, "--ep", 16)["metrics"]
    one = max(rows * 16 * (1 - (15 / 16) ** 8) * 7 / 8 / 450e9, rows * 0.99609375 / 50e9)
    assert d["moe_assumptions"]["dispatcher"] == "per-host"
    assert d["ep_link_s"] == pytest.approx(4 * 48 * one * 16, rel=1e-12)
    d8 = evaluate_json(write(tmp_path, Q30, "d.toml"), "--cards", 16, "--zero", 1, "--ep", 8)["metrics"]
    assert d8["ep_link_s"] == pytest.approx(4 * 48 * rows * 7 * (1 - (7 / 8) ** 8) / 450e9 * 16, rel=1e-12)


def test_load_factor_stretches_expert_compute(tmp_path):
    # dropless at EP 8: the busiest rank runs 1.25 x the balanced expert rows; at EP 1 every card runs its own
    # tokens through all experts (1 x). Extra FLOPs per token 6 x 0.25 x 48 blocks x k 8 x 3 x 2048 x 768.
    p = write(tmp_path, Q30)
    m1 = evaluate_json(p, "--cards", 16, "--zero", 1, "--ep", 1)["metrics"]
    m8 = evaluate_json(p, "--cards", 16, "--zero", 1, "--ep", 8)["metrics"]
    extra = 6 * 0.25 * 48 * 8 * 3 * 2048 * 768 * 256 * 4096 / 16 / (989e12 * 0.4)
    assert m8["compute_s"] - m1["compute_s"] == pytest.approx(extra, rel=1e-9)
    # capacity 2.0 pads every expert to twice the mean: 6 x 1.0 x ... extra
    m2 = evaluate_json(p, "--cards", 16, "--zero", 1, "--ep", 8, "--capacity", 2)["metrics"]
    assert m2["compute_s"] - m1["compute_s"] == pytest.approx(4 * extra, rel=1e-9)
    assert m2["padded_fraction"] == pytest.approx(1 - (0.5 * 1.25 + 0.5 * 0.75) / 2)


def test_dualpipe_overlaps_the_all_to_all(tmp_path):
    # auto overlap: under DualPipe the exchange hides behind the paired micro-batch's compute
    p = write(tmp_path, Q30)
    one = evaluate_json(p, "--cards", 32, "--pp", 2, "--ep", 16, "--schedule", "1f1b")["metrics"]
    dual = evaluate_json(p, "--cards", 32, "--pp", 2, "--ep", 16, "--schedule", "dualpipe")["metrics"]
    assert one["ep_exposed_s"] == pytest.approx(one["ep_link_s"])
    assert dual["ep_link_s"] == pytest.approx(one["ep_link_s"])
    assert dual["ep_exposed_s"] < dual["ep_link_s"]


# ---------------------------------------------------------------------------------------------
# bad MoE input: one clear line, exit 2


def _bad(r, message):
    assert r.exit_code == 2, r.output
    err = r.stderr.strip()
    assert err.startswith("tpopt: error:") and "\n" not in err and "Traceback" not in r.output
    assert message in err, err


def test_ep_not_dividing_experts(tmp_path):
    p = write(tmp_path, Q30)
    _bad(run("evaluate", "--scenario", p, "--cards", 24, "--ep", 3),
         "ep 3 does not divide the 128 routed experts of qwen3-30b-a3b")
    p2 = write(tmp_path, Q30 + "[search]\nep = [1, 3, 8]\n", "s2.toml")
    _bad(run("solve", "--scenario", p2), "search.ep: 3 does not divide the 128 routed experts")
    _bad(run("explain", "--scenario", p, "--cards", 24, "--ep", 6), "ep 6 does not divide")


def test_moe_choices_on_a_dense_model_and_bad_values(tmp_path, design_path):
    _bad(run("evaluate", "--scenario", design_path, "--cards", 48, "--ep", 2), "qwen3-8b is dense")
    dense = design_path.read_text() + "\n[moe]\nimbalance = 1.2\n"
    _bad(run("solve", "--scenario", write(tmp_path, dense)), "[moe] applies to mixture-of-experts models")
    p = write(tmp_path, Q30)
    _bad(run("evaluate", "--scenario", p, "--cards", 16, "--capacity", "-1"), "--capacity")
    _bad(run("evaluate", "--scenario", p, "--cards", 16, "--capacity", "lots"), "--capacity")
    _bad(run("solve", "--scenario", write(tmp_path, Q30 + "[moe]\nimbalance = 0.8\n", "i.toml")), "at least 1")
    _bad(run("solve", "--scenario", write(tmp_path, Q30 + "[moe]\nimbalance = 3\n", "h.toml")),
         "would take more than every dispatch")
    _bad(run("solve", "--scenario", write(tmp_path, Q30 + "[moe]\na2a_overlap = 'maybe'\n", "o.toml")),
         "moe.a2a_overlap 'maybe' unknown")


MOE_CONFIG = {"model_type": "qwen3_moe", "hidden_size": 256, "intermediate_size": 512, "moe_intermediate_size": 64,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "num_hidden_layers": 4,
              "num_experts": 16, "num_experts_per_tok": 4, "vocab_size": 1000}


@pytest.mark.parametrize("change,message", [
    ({"num_experts_per_tok": 32}, "top_k must be between 1 and experts"),
    ({"num_experts_per_tok": None}, "num_experts_per_tok"),
    ({"model_type": "mixtral", "num_local_experts": 8, "num_experts": None, "num_experts_per_tok": None,
      "moe_intermediate_size": None}, "num_experts_per_tok"),
])
def test_bad_router_keys_in_a_config(tmp_path, change, message):
    cfg = {k: v for k, v in {**MOE_CONFIG, **change}.items() if v is not None}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    text = Q30.replace('name = "qwen3-30b-a3b"', 'config = "config.json"')
    _bad(run("solve", "--scenario", write(tmp_path, text)), message)


# ---------------------------------------------------------------------------------------------
# the solver: EP and capacity are decisions, their families bind and are named


def test_solve_returns_ep_and_capacity_with_binding_families(tmp_path):
    # a capacity factor that drops dispatches is cheaper than dropless (less padding than the hot ranks'
    # surplus); the maximum drop rate is what keeps the optimum where it is
    text = Q30 + """
[search]
tp = [1]
pp = [1]
micro_batch = [1]
zero_stage = [1, 3]
ep = [8, 16]
capacity_factor = ["none", 1.0, 1.1]
max_cards = 64
[moe]
imbalance = 1.5
max_drop = "10%"
"""
    r = run("solve", "--scenario", write(tmp_path, text), "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    plan = d["plan"]
    assert plan["ep"] in (8, 16) and plan["capacity_factor"] in (None, 1.0, 1.1)
    assert set(plan) >= {"tp", "pp", "dp", "ep", "expert_tp", "capacity_factor", "ep_placement"}
    names = [b["name"] for b in d["binding"]]
    assert "moe.capacity_drops" in names
    b = next(b for b in d["binding"] if b["name"] == "moe.capacity_drops")
    assert b["plan_without"]["capacity_factor"] == 1.0 and b["violates"]["value"] > 10.0
    # EP and capacity alternatives at the same scale are reported
    alts = [a["alternative"] for a in d["alternatives"]]
    assert any(a.startswith("EP ") for a in alts) and any(a.startswith("capacity ") for a in alts)


def test_explain_names_the_ep_group_rule(tmp_path):
    p = write(tmp_path, Q30)
    r = run("explain", "--scenario", p, "--cards", 8, "--ep", 16, "--json")
    assert r.exit_code in (0, 3), r.output
    d = json.loads(r.stdout)
    assert "layout.ep_group" in json.dumps(d)


# backends agree on MoE design spaces (CP-SAT monolithic and decomposed, HiGHS likewise, enumeration)

def subset(values, min_size=1, max_size=None):
    return st.lists(st.sampled_from(values), min_size=min_size, max_size=max_size or len(values), unique=True)


@st.composite
def moe_scenarios(draw):
    model = draw(st.sampled_from(["qwen1.5-moe-a2.7b", "deepseek-v2-lite", "mixtral-8x7b", "qwen3-30b-a3b"]))
    experts = CAT.model(model).experts
    eps = [e for e in (1, 2, 4, 8, 16) if experts % e == 0]
    imbalance = draw(st.sampled_from([1.0, 1.25, 1.5, 2.0]))
    hot = draw(st.sampled_from([0.25, 0.5]))
    raw = {
        "model": {"name": model},
        "task": {"tokens": draw(st.floats(1e9, 3e10)), "seq_len": draw(st.sampled_from([2048, 4096])),
                 "global_batch": draw(st.sampled_from([32, 64, 128]))},
        "schedule": {"deadline": f"{draw(st.floats(2.0, 60.0))}d"},
        "hardware": {"accelerator": draw(subset(["h100-sxm", "a100-80gb-sxm", "rtx4090"], max_size=2)),
                     "efficiency": draw(st.floats(0.25, 0.5))},
        "checkpoint": {"save_interval": "1800s", "mode": "sync"},
        "search": {
            "zero_stage": draw(subset([0, 1, 2, 3], max_size=2)),
            "tp": draw(subset([1, 2], max_size=2)),
            "pp": draw(subset([1, 2, 4], max_size=2)),
            "micro_batch": draw(subset([1, 2], max_size=2)),
            "recompute": draw(subset(["none", "full"])),
            "ep": draw(subset(eps, max_size=3)),
            "capacity_factor": draw(subset(["none", 1.0, 1.25, 1.5], max_size=3)),
            "max_cards": draw(st.sampled_from([16, 64, 256])),
        },
        "moe": {"imbalance": imbalance, "hot_experts": hot, "max_drop": draw(st.sampled_from([0, 0.05, 0.2])),
                "a2a_overlap": draw(st.sampled_from(["auto", "none", "all"])),
                "dispatcher": draw(st.sampled_from(["direct", "per-host"])),
                "node_limit": draw(st.sampled_from([0, 2]))},
    }
    if imbalance * hot > 1:
        raw["moe"]["hot_experts"] = 0.25
    if draw(st.booleans()):  # the per-operation step-time model (MoE kernels, uneven stages)
        del raw["hardware"]["efficiency"]
    if draw(st.booleans()):
        raw["search"]["expert_tp"] = draw(subset(["tp", 1, 2], max_size=2))
    if draw(st.booleans()):
        raw["search"]["schedule"] = draw(subset(["1f1b", "dualpipe", "zb-h1"], max_size=2))
    return build_scenario(raw, CAT), draw(st.sampled_from(["cost", "time"]))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(moe_scenarios())
def test_backends_agree_on_moe_spaces(case):
    check_agreement(*case)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(moe_scenarios())
def test_pyomo_agrees_on_moe_spaces(case):
    check_agreement(*case, runs=PYOMO_RUNS[:2])


def test_dense_spaces_keep_their_tables():
    # a dense model's tables do not grow with the MoE variables (their domains are single values)
    sc = build_scenario({"model": {"name": "qwen3-8b"}, "task": {"tokens": "1B", "seq_len": 4096, "global_batch": 64},
                         "schedule": {"deadline": "10d"}, "hardware": {"accelerator": "h100-sxm"}}, CAT)
    from tpopt.optimizer.space import Space

    sp = Space.from_scenario(sc)
    assert sp.domains["ep"] == [1] and sp.domains["etp"] == [0] and sp.domains["cap"] == [0.0]
    assert all(v not in sp.tables[n].vars for n in (*sp.memory_names(), "time.compute") for v in ("ep", "etp", "cap"))
    assert sp.inert() == {"layout.ep_divides_experts", "layout.ep_group", "moe.capacity_drops"}


# ---------------------------------------------------------------------------------------------
# the per-operation model's MoE kernels


@pytest.mark.parametrize("name", ["qwen3-30b-a3b", "qwen1.5-moe-a2.7b", "deepseek-v3", "mixtral-8x7b"])
def test_moe_kernel_flops_are_six_times_the_activated_weights(name):
    # one MoE block, one 4,096-token sequence, tp = 1, balanced router (phi = 1): the GEMM FLOPs (forward,
    # dX, dW) are 6 x T x (attention + router + k experts + shared experts [+ shared gate]) linear weights
    from tpopt.models import ops
    from tpopt.models.arch import _block

    a = CAT.model(name)
    s = 4096
    ks = ops.layer_kernels(a, ops.Layout(tp=1, micro_batch=1, seq_len=s))
    assert float(ops.flops(ks, kind="gemm")) == pytest.approx(6 * s * _block(a, True)[2], rel=1e-12)
    # the routed-expert GEMMs carry the load factor and run E / ep products of rows x ep / E rows each
    for ep, load in ((1, 1.0), (8, 1.25)):
        lay = ops.Layout(tp=1, micro_batch=1, seq_len=s, ep=ep, load=load)
        up = next(k for k in ops.layer_kernels(a, lay) if k.op == "expert.up" and k.phase == "fwd")
        rows = s * a.top_k * load
        assert float(up.flops) == pytest.approx(2 * rows * a.hidden * 2 * a.expert_ffn)
        assert float(up.batch) == a.experts / ep and float(up.m) == pytest.approx(rows * ep / a.experts)


def test_larger_expert_groups_run_larger_gemms():
    # per-operation model, dropless and perfectly balanced: EP only changes the grouped GEMMs' shapes. At
    # EP 1 each of the 128 experts gets 256 of one card's 32,768 rows (and every expert's weights are read);
    # at EP 8, 16 experts get 2,048 rows each: the same FLOPs run faster
    import tomllib

    text = scenario_text("qwen3-30b-a3b", "100B", 4096, 256, "30d", "[moe]\nimbalance = 1.0\n")
    sc = build_scenario(tomllib.loads(text.replace("efficiency = 0.4\n", "")), CAT)
    from tpopt.models import terms as T

    t1, t8 = (float(sum(T.microbatch_times(sc, acc="h100-sxm", recompute="none", schedule="1f1b", tp=1, pp=1,
                                                  mb=1, ep=ep, cap=0.0))) for ep in (1, 8))
    assert t1 > 1.1 * t8


@pytest.mark.parametrize("example,hw", [("deepseek-v3.toml", None), ("qwen3-30b-a3b.toml", "h100-sxm"),
                                        ("qwen3-30b-a3b.toml", "rtx4090")])
def test_examples_plan_ep_tp_pp_dp_and_capacity(example, hw):
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "examples" / example
    r = run("solve", "--scenario", path, "--json", *(["--hw", hw] if hw else []))
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["status"] == "optimal"
    p = d["plan"]
    assert all(p[k] is not None for k in ("tp", "pp", "dp", "ep", "expert_tp", "ep_placement"))
    assert "capacity_factor" in p
    assert d["binding"], "an optimum held by nothing"
    if hw:
        assert p["accelerator"] == hw


def test_explain_relaxes_the_maximum_drop_rate(tmp_path):
    # capacity 1.0 only, half the experts 1.5 x hot: every plan drops 25 % of dispatches (chapter 10.3.4);
    # with at most 1 % allowed the request is infeasible, and the smallest change is max_drop >= 25 %
    text = Q30 + ('[search]\ntp = [1]\npp = [1]\nmicro_batch = [1]\nzero_stage = [1, 3]\nep = [1, 8]\n'
                  'capacity_factor = [1.0]\n[moe]\nimbalance = 1.5\nmax_drop = "1%"\n')
    r = run("solve", "--scenario", write(tmp_path, text), "--json")
    assert r.exit_code == 3, r.output
    d = json.loads(r.stdout)
    assert d["conflict"] == ["moe.capacity_drops"]
    drop = next(x for x in d["relaxations"] if x["parameter"] == "max_drop")
    assert drop["helps"] and drop["required"] == pytest.approx(25.0) and drop["unit"] == "%"


def test_python_api_takes_the_moe_plan_fields(tmp_path):
    import tpopt

    ev = tpopt.evaluate(str(write(tmp_path, Q235)), cards=256, pp=8, ep=16, capacity=1.25)
    assert (ev.plan.ep, ev.plan.capacity_factor) == (16, 1.25)
    assert ev.metrics["capacity_rows"] == 640 and ev.plan_dict()["ep_placement"] == "across 2 hosts"
