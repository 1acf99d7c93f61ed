"""The RL solve (optimizer/rl/): exact against brute force, the example scenario, the sync/async flip,
reports, and the chapter's figures through the tool's own outputs."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tpopt.catalogs.rl import build_rl_scenario, load_rl_scenario
from tpopt.models import generation as gen
from tpopt.models import rl as R
from tpopt.models.arch import param_count
from tpopt.models.units import DAY, GIB
from tpopt.optimizer import rl as O

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "rl-grpo-qwen3-8b.toml"
EXAMPLES = int(os.environ.get("TPOPT_RL_EXAMPLES", "20"))


def small(**rl) -> dict:
    """A small RL scenario: Qwen3-0.6B on up to 32 H100, a 16-point learner space."""
    base = {"prompts_per_step": 8, "samples_per_prompt": 4, "prompt_length": 256,
            "response_length": {"mean": 1024, "p99": 4096}, "steps": 200, "kept": 0.8, "staleness": 1,
            "verifier": {"workers": 16, "per_sample": "0.2s"}, "rollout_tp": [1, 2]}
    base.update(rl)
    return {"model": {"name": "qwen3-0.6b"}, "schedule": {"deadline": "10d"},
            "hardware": {"accelerator": "h100-sxm"},
            "search": {"max_cards": 32, "zero_stage": [1, 3], "tp": [1, 2], "pp": [1], "micro_batch": [1, 2]},
            "rl": base}


@pytest.fixture(scope="module")
def example():
    rsc = load_rl_scenario(EXAMPLE)
    pb = O.RLProblem(rsc)
    return pb, O.solve(pb)


# --- exactness ------------------------------------------------------------------------------


@st.composite
def rl_scenarios(draw):
    model = draw(st.sampled_from(["qwen3-0.6b", "qwen3-8b"]))
    acc = draw(st.sampled_from(["h100-sxm", "rtx4090"]))
    raw = small(
        prompts_per_step=draw(st.sampled_from([2, 4, 8, 16])),
        samples_per_prompt=draw(st.sampled_from([1, 2, 4, 8])),
        prompt_length=draw(st.sampled_from([64, 256, 1024])),
        response_length=draw(st.sampled_from([256, {"mean": 1024, "p99": 4096}, {"mean": 2048, "p95": 3000,
                                                                                   "max": 2500}])),
        kept=draw(st.sampled_from([0.3, 0.9, 1.0, 1.0])),
        kept_sync=draw(st.sampled_from([0.7, 1.0])),
        staleness=draw(st.sampled_from([0, 1, 1])),
        verifier=draw(st.sampled_from(["none", {"workers": 4, "per_sample": "1s"},
                                       {"workers": 64, "per_sample": "0.1s"}])),
        weight_sync=draw(st.sampled_from([["sharded", "broadcast"], ["broadcast"]])),
        extra_forwards=draw(st.sampled_from([0, 1])),
        placement=draw(st.sampled_from([["separate", "shared"], ["separate"]])),
    )
    if draw(st.booleans()):
        raw["rl"]["kv_pool"] = draw(st.sampled_from(["2GiB", "8GiB"]))
    raw["hardware"]["accelerator"] = acc
    raw["model"]["name"] = model
    raw["schedule"]["deadline"] = draw(st.sampled_from(["6h", "1d", "10d"]))
    raw["search"]["max_cards"] = draw(st.sampled_from([16, 24, 32]))
    if draw(st.booleans()):
        raw["cost"] = {"max_cost": draw(st.sampled_from([50, 500, 5000]))}
    if draw(st.booleans()):
        raw["hardware"]["usable_memory"] = draw(st.sampled_from(["10GiB", "20GiB"]))
    drop = draw(st.sets(st.sampled_from(O.RELAXABLE), max_size=2))
    return raw, draw(st.sampled_from(["cost", "time"])), [f for f in O.FAMILIES if f not in drop]


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(rl_scenarios())
def test_solve_equals_brute_force(case):
    raw, objective, enforced = case
    pb = O.RLProblem(build_rl_scenario(raw))
    got = O.solve(pb, objective, enforced).best
    want = O.brute_force(pb, objective, enforced)
    assert (got is None) == (want is None)
    event("feasible" if got is not None else "infeasible")
    if got is not None:
        event(f"{got.decision.placement}, staleness {got.decision.staleness}")
        assert got.key(objective)[0] == pytest.approx(want.key(objective)[0], rel=1e-9)
        assert got.feasible(enforced)


@pytest.mark.parametrize("raw", [small(), small(placement=["shared"], staleness=0),
                                 small(kept=0.5, prompts_per_step=16)])
def test_learner_from_the_solver_equals_the_table(raw):
    # the learner's optimum per card count comes from the existing solver for large spaces; on small ones
    # from one tabulation: both give the same RL optimum
    rsc = build_rl_scenario(raw)
    table = O.solve(O.RLProblem(rsc)).best
    caches = O.new_caches()
    caches["force_solver"] = True
    solver = O.solve(O.RLProblem(rsc, "cpsat", caches=caches)).best
    assert solver.key("cost")[0] == pytest.approx(table.key("cost")[0], rel=1e-9)
    assert solver.learner.plan is not None and table.learner.plan is not None


def test_learner_from_a_pyomo_solver_equals_the_table():
    # every backend tpopt solve takes drives the learner: pyomo:highs as cpsat above
    rsc = build_rl_scenario(small())
    table = O.solve(O.RLProblem(rsc)).best
    caches = O.new_caches()
    caches["force_solver"] = True
    res = O.solve(O.RLProblem(rsc, "pyomo:highs", caches=caches))
    assert res.stats["learner_solves"] > 0 and res.status.value == "optimal"
    assert res.best.key("cost")[0] == pytest.approx(table.key("cost")[0], rel=1e-9)


def test_learner_bound_is_below_every_learner_plan():
    pb = O.RLProblem(build_rl_scenario(small()))
    for cards, rows in O.trainer_points(pb, "h100-sxm").items():
        assert all(r[0] >= pb.learner_bound("h100-sxm", cards).step_s for r in rows)


# --- the example scenario -----------------------------------------------------------------


def test_example_picks_a_split_and_names_the_bottleneck(example):
    pb, res = example
    best = res.best
    d, m = best.decision, best.metrics
    assert res.status.value == "optimal"
    assert d.placement == "separate" and d.learner_cards >= 8 and d.rollout_cards >= 8 and d.cards <= 64
    rates = m["stage_rates"]
    assert m["bottleneck"] == min(rates, key=rates.get)
    # the pipeline bound is the chapter's formula applied to the plan's stage rates
    q = m["kept"]
    assert m["pipeline_bound"] == pytest.approx(min(m["r_learn"], q * min(m["r_gen"], m["r_verify"])))
    # and the cycle is the chapter's async cycle max(rollout, learn) + sync when the plan is async
    if d.staleness:
        assert m["cycle_s"] == pytest.approx(max(m["rollout"]["rollout_s"], m["learn_s"]) + m["sync_s"])
    assert m["finish_s"] <= pb.sc.task.deadline_s
    assert m["finish_s"] == pytest.approx(pb.sc.task.reserved_s + m["steps"] * m["cycle_s"] * (1 + m["overhead"]))


def test_example_is_exact(example):
    pb, res = example
    want = O.brute_force(pb)
    assert res.best.key("cost")[0] == pytest.approx(want.key("cost")[0], rel=1e-9)


def test_kept_fraction_across_the_break_even_flips_sync_and_async(example):
    pb, res = example
    be = O.async_break_even(pb, "cost", res.enforced)["kept"]
    assert be is not None and 0 < be < pb.task.kept
    above = O.solve(pb.with_task(kept=min(1.0, be + 0.01))).best
    below = O.solve(pb.with_task(kept=be - 0.01)).best
    assert above.decision.staleness == 1 and below.decision.staleness == 0


def test_break_even_of_a_plan_matches_its_cycles(example):
    # the per-plan break-even is where q / T_async(q) = q_sync / T_sync for the plan's own stage times
    _, res = example
    m = res.best.metrics
    q = m["break_even_kept"]
    roll, full, sync = m["rollout"]["rollout_s"], m["learn_full_s"], m["sync_s"]
    assert q / R.cycle_time(roll, q * full, sync, 1) == pytest.approx(1.0 / R.cycle_time(roll, full, sync, 0))


def test_staleness_binds_when_async_is_not_allowed(example):
    pb, res = example
    sync_only = pb.with_task(staleness=0)
    r0 = O.solve(sync_only)
    assert r0.best.decision.staleness == 0
    binds = {b["name"]: b for b in O.binding(sync_only, r0.best, "cost", r0.enforced)}
    assert "rl.staleness" in binds
    assert binds["rl.staleness"]["objective_without"] == pytest.approx(res.best.metrics["cost"])


# --- the chapter's figures through the planner -------------------------------------------


def test_planner_uses_the_chapters_kv_and_weights():
    # chapter 10.5.2-10.5.3 through the planner's rollout stage: Qwen3-8B on one H100 engine (TP 1) holds
    # 15.3 GiB of BF16 weights and 144 KiB of KV per token (1.125 GiB per 8K tokens)
    pb = O.RLProblem(load_rl_scenario(EXAMPLE))
    ro = pb.rollout("h100-sxm", 8, 1, 0)
    assert round(ro["weights"] / GIB, 1) == 15.3
    assert ro["kv_per_token"] * 8192 == 1.125 * GIB
    usable = pb.sc.system("h100-sxm").acc.memory_usable
    assert ro["kv_pool"] == pytest.approx(usable - ro["weights"] - 4 * GIB)


def test_shared_hand_off_peaks_through_the_planner():
    # a shared plan's naive and staged peaks are the chapter's phase sums of its own components
    pb = O.RLProblem(load_rl_scenario(EXAMPLE, {"rl.placement": ["shared"]}))
    ev = O.solve(pb).best
    m, ro = ev.metrics, ev.metrics["rollout"]
    recv = m["sync_bytes_per_card"]
    assert m["handoff_naive"] == pytest.approx(m["learner_memory"] + recv + ro["kv_pool"] + m["common"])
    assert m["handoff_staged"] == pytest.approx(max(m["learner_memory"] + recv, ro["weights"] + ro["kv_pool"])
                                                + m["common"])
    assert m["handoff_naive"] > m["usable"] >= m["handoff_staged"]


def test_weight_sync_volumes_through_the_planner():
    # sharded sync sends each rollout card its TP shard; broadcast sends every card the whole policy:
    # the totals differ by the TP degree (the chapter's 6,768 vs 423 GiB with EP16 in place of TP)
    pb = O.RLProblem(load_rl_scenario(EXAMPLE))
    lb = pb.learner_bound("h100-sxm", 8)
    n = param_count(pb.sc.model)
    evs = {m: pb.evaluate(O.RLDecision("h100-sxm", "separate", 8, 16, 8, 0, 1, m), lb)
           for m in ("sharded", "broadcast")}
    assert evs["sharded"].metrics["sync_bytes_total"] == pytest.approx(16 * 2 * n / 8)
    assert evs["broadcast"].metrics["sync_bytes_total"] == pytest.approx(16 * 2 * n)
    assert evs["broadcast"].metrics["sync_s"] > evs["sharded"].metrics["sync_s"]


# --- infeasible requests -------------------------------------------------------------------


def test_infeasible_deadline_explained_and_fixed():
    rsc = load_rl_scenario(EXAMPLE, {"schedule.deadline": "1d"})
    pb = O.RLProblem(rsc)
    res = O.solve(pb)
    assert res.best is None
    ex = O.explain_infeasible(pb, "cost", res.enforced)
    assert "deadline.finish" in ex["conflict"]
    fix = {r["parameter"]: r for r in ex["relaxations"]}["deadline"]
    assert fix["helps"] and fix["required"] > 1.0
    again = O.solve(O.RLProblem(load_rl_scenario(EXAMPLE, {"schedule.deadline": f"{fix['required']}d"})))
    assert again.best is not None and again.best.metrics["finish_s"] <= fix["required"] * DAY


def test_report_is_json_ready(example):
    import json

    pb, res = example
    out = O.report(pb, res, analyse=False, break_even=False)
    json.dumps(out, allow_nan=False)
    assert out["stages"]["bottleneck"] == res.best.metrics["bottleneck"]
    assert not math.isinf(out["finish"]["finish_days"])
    assert any("lognormal" in a for a in out["assumptions"]) and any("HBM" in a for a in out["assumptions"])
    assert gen.longest_of(pb.task.response, pb.task.batch) == \
        pytest.approx(out["stages"]["generation"]["longest_response"])


def test_extra_forwards_run_at_the_stacks_kernels():
    # The extra forward passes (reference / old-policy log-probs) run on the stack's kernels, as the learner's own
    # step does (per-operation model: eta = min(1, f x the card's GEMM efficiency), f the stack's kernel factor,
    # catalogs/stacks.toml): on DeepSpeed (its pooled factor) they take 1 / min(1, f x eta) / (1 / eta) of the
    # reference stack's time; the flat model does not read the stack.
    from tpopt.catalogs.stacks import stack_profile

    def seconds(stack, **hw):
        raw = small(extra_forwards=1)
        raw["hardware"] = {**raw["hardware"], "stack": stack, **hw}
        return O.RLProblem(build_rl_scenario(raw)).extra_forward_s("h100-sxm", 8)

    f = stack_profile("deepspeed").kernel_efficiency
    eta = O.RLProblem(build_rl_scenario(small(extra_forwards=1))).sc.system("h100-sxm").perf.gemm_efficiency
    assert f < 1.0 and seconds("megatron-core") > 0
    assert seconds("deepspeed") / seconds("megatron-core") == pytest.approx(eta / min(1.0, f * eta), rel=1e-12)
    assert seconds("deepspeed", efficiency=0.4) == pytest.approx(seconds("megatron-core", efficiency=0.4), rel=1e-12)
