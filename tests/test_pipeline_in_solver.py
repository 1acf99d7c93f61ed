"""The pipeline schedule as a decision variable (issue 5, part 3).

Chapter 10.3.2: fill-drain keeps all m micro-batches' activations until the first backward, 1F1B at
most p on stage 0, so with m = 16 > p = 4 fill-drain needs ~4x the activation memory; in the event
model fill-drain is slightly *faster* (337 vs 347 ms at m = 8, REFERENCE 10.3). Hence: when memory is
tight the solver must pick 1F1B; when memory is ample it picks the faster schedule. Zero-bubble
(ZB-H1) beats 1F1B on time (283 vs 347 ms) at the same stage-0 memory, so with ample memory and
both on offer it wins.
"""

import pytest

from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import build_scenario
from tpopt.models.evaluate import evaluate
from tpopt.optimizer.core import solve
from tpopt.optimizer.result import Request, Status


def scenario(schedules, usable):
    raw = {
        "model": {"name": "qwen3-8b"},
        "task": {"tokens": "5B", "seq_len": 4096, "global_batch": 32},
        "schedule": {"deadline": "60d"},
        # the flat model's balanced stages: the chapter's event-model comparison (per-operation stages carry
        # the embedding and the LM head, which changes the schedules' order)
        "hardware": {"accelerator": "h100-sxm", "usable_memory": usable, "efficiency": "40%"},
        "search": {"tp": [1], "pp": [4], "zero_stage": [1], "micro_batch": [1], "max_cards": 8,
                   "recompute": ["none"], "schedule": schedules},
    }
    return build_scenario(raw, load_catalog())


@pytest.mark.parametrize("backend", ["cpsat", "highs", "enumerate"])
def test_tight_memory_picks_1f1b_over_fill_drain(backend):
    sc = scenario(["fill-drain", "1f1b"], "74GiB")
    r = solve(sc, backend, Request(workers=1))
    assert r.status == Status.OPTIMAL
    p = r.best.plan
    assert (p.pp, p.dp, p.grad_accum, p.schedule) == (4, 2, 16, "1f1b")
    # fill-drain on the same layout is ruled out by memory, 16 in-flight micro-batches against 4
    from dataclasses import replace
    fd = evaluate(sc, replace(p, schedule="fill-drain"))
    assert [c.name for c in fd.violated()] == ["memory.per_card"]
    assert fd.metrics["activations_gib"] == pytest.approx(4 * r.best.metrics["activations_gib"])


@pytest.mark.parametrize("backend", ["cpsat", "enumerate"])
def test_ample_memory_picks_the_faster_schedule(backend):
    sc = scenario(["fill-drain", "1f1b"], "1000GiB")
    r = solve(sc, backend, Request(workers=1))
    assert r.best.plan.schedule == "fill-drain"  # faster in the event model, memory no longer binds
    sc = scenario(["1f1b", "zb-h1"], "1000GiB")
    r = solve(sc, backend, Request(workers=1))
    assert r.best.plan.schedule == "zb-h1"
    assert r.best.metrics["bubble_s"] < evaluate(sc, r.best.plan.__class__(**{**r.best.plan.__dict__,
                                                                              "schedule": "1f1b"})).metrics["bubble_s"]


def test_deepseek_dualpipe_shapes_are_a_structural_rule():
    # DeepSeek's ordering needs an even p and an even m >= 2p; other shapes are excluded, not crashed on
    sc = scenario(["dualpipe-deepseek"], "1000GiB")
    r = solve(sc, "enumerate", Request())
    assert r.status == Status.OPTIMAL and r.best.plan.grad_accum >= 2 * r.best.plan.pp
    raw_small = {"model": {"name": "qwen3-8b"}, "task": {"tokens": "5B", "seq_len": 4096, "global_batch": 4},
                 "schedule": {"deadline": "600d"}, "hardware": {"accelerator": "h100-sxm", "usable_memory": "1000GiB"},
                 "search": {"tp": [1], "pp": [4], "zero_stage": [1], "micro_batch": [1], "max_cards": 8,
                            "schedule": ["dualpipe-deepseek"]}}
    sc2 = build_scenario(raw_small, load_catalog())  # m = 4 / 2 = 2 < 2p
    for backend in ("enumerate", "cpsat", "highs"):
        assert solve(sc2, backend, Request()).status == Status.INFEASIBLE
