"""The optimizer with this round's MoE stack terms (issue 35): the grouped expert GEMM calls' efficiency g
(catalogs/stacks.toml ``grouped_gemm_efficiency``: t_call = t_model / g, models/steptime.py grouped_call_time) and
Megatron-Core's eager clamp of gpt-oss's expert activations (``activation_clamp_unfused``: its memory passes,
ops.activation_clamp_kernels, and the clamped copy of the fc1 output kept unless the MLP is recomputed).

Each enters the step time or the memory through the per-operation tables that every backend and bound reads; a path
that timed grouped expert GEMMs or the clamp apart (a bound, a per-operation table, the on-demand groups) would
disagree with the exact evaluation as soon as g != 1 or the clamp is on. The other MoE property tests draw the
catalog stack only (g = the fitted 0.899) and no clamped model; here, on random small per-operation MoE spaces with
g drawn on both sides of 1, a clamped model (gpt-oss-20b) with and without the eager clamp, MLP recompute and a
memory limit that makes the clamped copy bind:
* every backend (CP-SAT, HiGHS, monolithic, decomposed and on demand, with its default groups and with one layout
  per group) proves the enumerator's optimum, and the
  enumerator's metrics are the exact evaluation's (``tpopt evaluate``) of its plan;
* the layout bounds (plain <= coupled <= the layout's exact best) and the key floor (<= the bound-level and the
  exact best) stay lower bounds;
* the compute floor table holds each plan's floor and stays below the exact compute term.
The relations themselves (g on the grouped calls only, the clamp's passes and its copy) are checked in
tests/test_grouped_gemm_efficiency.py and tests/test_moe_physics.py.
"""

from __future__ import annotations

import math
import os
from dataclasses import replace
from unittest import mock

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_key_floor import check_floor
from test_layout_bounds import check_bounds
from test_moe_planner import CAT, subset
from test_on_demand import check_floor_table
from test_solver_properties import check_agreement

from tpopt.catalogs.scenario import build_scenario
from tpopt.models.evaluate import evaluate
from tpopt.optimizer import ondemand
from tpopt.optimizer.core import solve
from tpopt.optimizer.result import Request
from tpopt.optimizer.space import Space

EXAMPLES = int(os.environ.get("TPOPT_PROPERTY_EXAMPLES", "60"))  # raise locally for a deeper search
SETTINGS = settings(max_examples=max(6, EXAMPLES // 5), deadline=None, suppress_health_check=list(HealthCheck),
                    derandomize=True)
EFFICIENCIES = (0.5, 0.899, 1.0, 1.6)  # the catalog's fitted value, one well below, 1 (none) and one above 1


@st.composite
def stack_moe_scenarios(draw):
    """A small per-operation MoE space on the default stack (Megatron-Core) with its grouped-GEMM efficiency drawn
    and, for gpt-oss, its eager clamp on or off."""
    model = draw(st.sampled_from(["gpt-oss-20b", "gpt-oss-20b", "qwen3-30b-a3b", "mixtral-8x7b"]))
    experts = CAT.model(model).experts
    eps = [e for e in (1, 2, 4, 8) if experts % e == 0]
    raw = {
        "model": {"name": model},
        "task": {"tokens": draw(st.floats(1e9, 3e10)), "seq_len": draw(st.sampled_from([2048, 4096])),
                 "global_batch": draw(st.sampled_from([32, 64]))},
        "schedule": {"deadline": f"{draw(st.floats(2.0, 60.0))}d"},
        "hardware": {"accelerator": draw(subset(["h100-sxm", "a100-80gb-sxm", "b200"], max_size=2))},
        "checkpoint": {"save_interval": "1800s", "mode": "sync"},
        "search": {
            "zero_stage": draw(subset([1, 3], max_size=2)),
            "tp": draw(subset([1, 2], max_size=2)),
            "pp": draw(subset([1, 2], max_size=2)),
            "micro_batch": draw(subset([1, 2], max_size=2)),
            "recompute": draw(subset(["none", "mlp", "norm+mlp", "full"], min_size=2, max_size=3)),
            "ep": draw(subset(eps, max_size=3)),
            "max_cards": draw(st.sampled_from([16, 64])),
        },
        "moe": {"imbalance": draw(st.sampled_from([1.0, 1.25]))},
    }
    if draw(st.booleans()):  # memory binds: the recompute choice (and with it the clamped copy) decides plans
        raw["hardware"]["usable_memory"] = f"{draw(st.sampled_from([24, 32, 48]))}GiB"
    if draw(st.booleans()):
        raw["search"]["expert_tp"] = draw(subset(["tp", 1, 2], max_size=2))
    if draw(st.booleans()):
        raw["search"]["schedule"] = draw(subset(["1f1b", "zb-h1"], max_size=2))
    sc = build_scenario(raw, CAT)
    stack = replace(sc.stack, grouped_gemm_efficiency=draw(st.sampled_from(EFFICIENCIES)),
                    activation_clamp_unfused=draw(st.booleans()))
    return replace(sc, stack=stack), draw(st.sampled_from(["cost", "time"]))


@SETTINGS
@given(stack_moe_scenarios())
def test_backends_prove_the_enumerators_optimum(case):
    check_agreement(*case)
    check_agreement(*case, runs=[("cpsat", "on-demand"), ("highs", "on-demand")])


@SETTINGS
@given(stack_moe_scenarios())
def test_on_demand_with_one_layout_per_group_proves_the_enumerators_optimum(case):
    # every hub variable fixed: each group's bound (the compute floor, the closed-form activations) and table slice
    with mock.patch.object(ondemand, "GROUP_ROWS", 1):
        check_agreement(*case, runs=[("cpsat", "on-demand")])


@SETTINGS
@given(stack_moe_scenarios())
def test_enumerators_metrics_are_the_exact_evaluations(case):
    sc, objective = case
    r = solve(sc, "enumerate", Request(objective=objective, top=3))
    for p in r.plans:
        ev = evaluate(sc, p.plan)
        assert ev.feasible
        for key in ("cost", "finish_days", "compute_s", "memory_per_card_gib", "activations_gib"):
            assert math.isclose(p.metrics[key], ev.metrics[key], rel_tol=1e-9), (key, p.plan)


@SETTINGS
@given(stack_moe_scenarios())
def test_layout_bounds_and_key_floors_stay_below_the_exact_best(case):
    check_bounds(*case)
    check_floor(*case)


@SETTINGS
@given(stack_moe_scenarios())
def test_compute_floor_table_holds_each_plans_floor_below_the_exact_term(case):
    sc, _ = case
    space = Space.from_scenario(sc)
    check_floor_table(space, np.random.default_rng(35), 20)
    lo, floor = space.tables["time.compute"], space.compute_floor()
    exact = np.moveaxis(lo.values, lo.vars.index("schedule"), -1)
    below = np.broadcast_to(floor.values[..., None], exact.shape)
    fin = np.isfinite(exact)
    assert np.all(below[fin] <= exact[fin] * (1 + 1e-12))
