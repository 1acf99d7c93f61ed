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
