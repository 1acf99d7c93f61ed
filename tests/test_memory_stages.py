"""The memory family as the per-rank peak (issue 23, item 5): per pipeline-stage class.

In the per-operation model the first stage holds the embedding and the most in-flight micro-batches
(1F1B: min(m, p) sets), the last the LM head and the FP32 logits. The family used to add each term's
heaviest stage (states of one stage + activations of another + buffers of a third), which rejects plans
whose every rank fits. It is now, for each stage class k (first, middle, last),

    states_k + copies_k + activations_k + temporary_k <= usable memory,

in the evaluator and in every backend. The figures below come from the evaluator's own per-stage report
(``memory_by_stage``: each real stage's allocated peak) and from the usable memory the test sets.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from oracle import assert_agree_with_enumeration, solve_every_backend

from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import build_scenario
from tpopt.models import families as F
from tpopt.models import terms as T
from tpopt.models.evaluate import evaluate
from tpopt.models.plan import Plan
from tpopt.models.units import GIB
from tpopt.optimizer.core import solve
from tpopt.optimizer.memory_plan import memory_plan
from tpopt.optimizer.result import Request, Status
from tpopt.optimizer.space import Space

CAT = load_catalog()


def raw_scenario(usable: str, **search) -> dict:
    """Qwen3-8B on H100s in the per-operation model (no stated efficiency), one layout unless ``search``
    widens it: TP 1, PP 4 (1F1B), DP 2, micro-batch 1 (16 micro-batches), ZeRO-1, nothing recomputed."""
    return {"model": {"name": "qwen3-8b"}, "task": {"tokens": "5B", "seq_len": 4096, "global_batch": 32},
            "schedule": {"deadline": "600d"}, "hardware": {"accelerator": "h100-sxm", "usable_memory": usable},
            "search": {"tp": [1], "pp": [4], "zero_stage": [1], "micro_batch": [1], "max_cards": 8,
                       "recompute": ["none"], "schedule": ["1f1b"], **search}}


PLAN = Plan("h100-sxm", 8, zero_stage=1, tp=1, pp=4, micro_batch=1, recompute="none", schedule="1f1b")


def stage_figures(usable_gib: float) -> tuple[float, float, list[dict]]:
    """(old sum of the per-term maxima, per-rank peak, the stages) of PLAN in GiB, from memory_by_stage."""
    sc = build_scenario(raw_scenario(f"{usable_gib}GiB"), CAT)
    stages = evaluate(sc, PLAN).metrics["memory_by_stage"]
    old = sum(max(s[k] for s in stages) for k in ("states_gib", "activations_gib", "temporary_gib"))
    return old, max(s["allocated_gib"] for s in stages), stages


def test_stage_classes_cover_every_stage():
    for p in range(1, 9):
        covered = set().union(*(set(T.class_stages(k, p)) for k in T.STAGE_CLASSES))
        assert covered == set(range(p)) == set(T.class_stages(T.PEAK, p))
    assert list(T.class_stages("middle", 5)) == [1, 2, 3] and list(T.class_stages("last", 5)) == [4]
    assert list(T.class_stages("middle", 2)) == [0]  # no middle stage: the first again


def test_the_per_rank_peak_admits_a_plan_the_sum_of_maxima_rejected():
    old, peak, stages = stage_figures(1000.0)
    # the activations peak on the first stage (4 in flight of 16), the logits on the last: the maxima of the
    # three terms come from different ranks, so their sum exceeds every rank's own peak
    acts = [s["activations_gib"] for s in stages]
    temp = [s["temporary_gib"] for s in stages]
    assert acts.index(max(acts)) == 0 and temp.index(max(temp)) == len(stages) - 1
    assert old > peak * 1.02
    usable = (old + peak) / 2  # between the two: the old family rejected the plan, every rank fits
    sc = build_scenario(raw_scenario(f"{usable}GiB"), CAT)
    ev = evaluate(sc, PLAN)
    check = ev.constraint(F.MEMORY_PER_CARD)
    assert check.value == pytest.approx(peak, rel=1e-9) and check.limit == pytest.approx(usable, rel=1e-12)
    assert check.value < check.limit < old and ev.feasible
    assert ev.metrics["memory_peak_class"] == "first"
    for backend in ("enumerate", "cpsat", "highs", "pyomo:highs"):
        r = solve(sc, backend, Request(workers=1, seed=0))
        assert r.status == Status.OPTIMAL, backend
        assert r.best.metrics["memory_per_card_gib"] == pytest.approx(peak, rel=1e-9), backend
    # just below the peak no backend finds the plan
    tight = build_scenario(raw_scenario(f"{peak * (1 - 1e-4)}GiB"), CAT)
    for backend in ("enumerate", "cpsat", "highs"):
        assert solve(tight, backend, Request(workers=1, seed=0)).status == Status.INFEASIBLE, backend


def test_the_solver_tables_give_the_evaluator_peak_of_the_chosen_plan():
    """The solvers' memory figure (per class, the sum of the tables at the chosen assignment; the largest
    class) equals the evaluator's largest allocated peak over the real stages."""
    sc = build_scenario(raw_scenario("60GiB", pp=[1, 2, 3, 4], micro_batch=[1, 2], recompute=["none", "full"],
                                     schedule=["1f1b", "interleaved", "zb-h1"]), CAT)
    space = Space.from_scenario(sc)
    for backend in ("cpsat", "highs"):
        r = solve(sc, backend, Request(workers=1, seed=0))
        assert r.status == Status.OPTIMAL
        p = r.best.plan
        idx = {v: space.domains[v].index(x) for v, x in (
            ("acc", p.accelerator), ("tp", p.tp), ("cp", p.cp), ("pp", p.pp), ("dp", p.dp), ("mb", p.micro_batch),
            ("zero", p.zero_stage), ("offload", p.offload), ("recompute", p.recompute), ("ep", p.ep),
            ("etp", p.expert_tp), ("cap", p.capacity_factor), ("sp", p.sequence_parallel))}
        idx["schedule"] = space.domains["schedule"].index(p.schedule) if p.pp > 1 else 0
        tables = space.tables
        figure = max(sum(float(tables[n].values[tuple(idx[v] for v in tables[n].vars)]) for n in names)
                     for _, names in space.memory_classes())
        stages = r.best.metrics["memory_by_stage"]
        assert figure / GIB == pytest.approx(max(s["allocated_gib"] for s in stages), rel=1e-9)
        assert figure / GIB == pytest.approx(r.best.metrics["memory_per_card_gib"], rel=1e-12)


def test_the_memory_plan_counts_the_stage_class_tables():
    sc = build_scenario(raw_scenario("60GiB", pp=[1, 2, 4], micro_batch=[1, 2], recompute=["none", "full"]), CAT)
    space = Space.from_scenario(sc)
    names = space.memory_names()
    assert len(names) == 12 and all(n in space._specs for n in names)
    mp = memory_plan(space)
    built = sum(t.values.nbytes for t in space.build_tables().values())
    assert built <= mp.tables_bytes  # the estimate (before any table) bounds what the solve allocates


@st.composite
def per_op_scenarios(draw):
    """Per-operation spaces with pipelines where memory binds: usable memory drawn around the peak."""
    search = {"tp": draw(st.lists(st.sampled_from([1, 2]), min_size=1, max_size=2, unique=True)),
              "pp": draw(st.lists(st.sampled_from([1, 2, 3, 4]), min_size=1, max_size=3, unique=True)),
              "micro_batch": draw(st.lists(st.sampled_from([1, 2]), min_size=1, max_size=2, unique=True)),
              "zero_stage": draw(st.lists(st.sampled_from([0, 1, 3]), min_size=1, max_size=2, unique=True)),
              "recompute": draw(st.lists(st.sampled_from(["none", "full"]), min_size=1, max_size=2, unique=True)),
              "schedule": draw(st.lists(st.sampled_from(["1f1b", "interleaved", "zb-h1", "dualpipe"]), min_size=1,
                                        max_size=2, unique=True)),
              "max_cards": 16}
    raw = raw_scenario(f"{draw(st.floats(12.0, 60.0)):.3f}GiB", **search)
    raw["model"]["name"] = draw(st.sampled_from(["qwen3-0.6b", "qwen3-8b"]))
    return build_scenario(raw, CAT), draw(st.sampled_from(["cost", "time"]))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(per_op_scenarios())
def test_every_backend_agrees_with_enumeration_per_stage_class(case):
    sc, objective = case
    results = solve_every_backend(sc, objective)
    event(f"status={results['enumerate'].status.value}")
    assert_agree_with_enumeration(sc, objective, results, proven=True)
    ref = results["enumerate"]
    if ref.feasible:  # the family's value: the largest stage-class sum, never below any real stage's peak
        m = ref.best.metrics
        top = max(s["allocated_gib"] for s in m["memory_by_stage"])
        assert m["memory_per_card_gib"] >= top * (1 - 1e-12)
        if ref.best.plan.pp <= 3:  # at most one middle stage: every class is one stage, the value exact
            assert math.isclose(m["memory_per_card_gib"], top, rel_tol=1e-9)
