"""Regression: minimising finish time on every backend and formulation (bounds compared in seconds).

Found by the deep property search: objective keys in days against solver bounds in seconds made the
layout decomposition stop after its first layout. Scenario from the falsifying example.
"""

import math

import pytest

from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import build_scenario
from tpopt.optimizer.core import solve
from tpopt.optimizer.result import Request


def scenario():
    raw = {"model": {"name": "qwen3-8b"}, "task": {"tokens": 1e9, "seq_len": 2048, "global_batch": 16},
           "schedule": {"deadline": "3d"}, "hardware": {"accelerator": "h100-sxm", "efficiency": 0.5},
           "checkpoint": {"write_bandwidth": "1GB/s", "card_mtbf": "30d"},
           "search": {"zero_stage": [0], "tp": [1, 2], "pp": [1], "micro_batch": [1], "offload": ["none", "cpu"],
                      "save_interval": ["auto"], "max_cards": 16}}
    return build_scenario(raw, load_catalog())


@pytest.mark.parametrize("backend,method", [("cpsat", "monolithic"), ("cpsat", "decomposed"),
                                            ("highs", "monolithic"), ("highs", "decomposed")])
def test_time_objective_matches_enumeration(backend, method):
    sc = scenario()
    ref = solve(sc, "enumerate", Request(objective="time", top=3))
    got = solve(sc, backend, Request(objective="time", top=3, method=method))
    assert [round(e.metrics["finish_days"], 9) for e in got.plans] == \
        [round(e.metrics["finish_days"], 9) for e in ref.plans]
    assert math.isclose(got.best.metrics["finish_days"], ref.best.metrics["finish_days"], rel_tol=1e-9)


@pytest.mark.parametrize("backend,method", [("highs", "monolithic"), ("highs", "decomposed"), ("cpsat", "monolithic")])
def test_highs_solve_error_falls_back_without_presolve(backend, method):
    """Found by the deep property search: HiGHS's presolve fails ("Solve error") on this small model once
    two no-good rows and the objective bound are in; the solve is retried without presolve."""
    raw = {"model": {"name": "qwen3-0.6b"},
           "task": {"tokens": 41651732365.0, "seq_len": 2048, "global_batch": 16, "precision": "bf16-mixed-fp32-grad"},
           "schedule": {"deadline": "5d"}, "hardware": {"accelerator": "a100-80gb-sxm", "efficiency": 0.203125},
           "checkpoint": {"write_bandwidth": "1GB/s", "restore": "120s", "card_mtbf": "30d"},
           "memory": {"activation_reserve": "1GiB"},
           "search": {"zero_stage": [0], "tp": [1, 2], "pp": [1, 2], "micro_batch": [1, 2], "offload": ["none", "cpu"],
                      "schedule": ["fill-drain"], "save_interval": ["auto", "600s"], "save_mode": ["sync", "async"],
                      "max_cards": 16}}
    sc = build_scenario(raw, load_catalog())
    ref = solve(sc, "enumerate", Request())
    got = solve(sc, backend, Request(method=method))
    assert got.status.value == "optimal"
    assert math.isclose(got.best.metrics["cost"], ref.best.metrics["cost"], rel_tol=1e-9)
