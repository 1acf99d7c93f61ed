"""The conflict of a large space is found without a monolithic CP-SAT model (explain.monolithic_hint).

Above the threshold ``auto`` uses to choose the layout decomposition (largest term table of more than
``MONOLITHIC_LIMIT`` rows), the deletion filter starts from every enforced family instead of CP-SAT's
sufficient assumptions; the conflict stays irreducible and is the one found with the hint.

Derivation of the expected conflict (the design case, deadline 7 d): the input pipeline delivers
4 workers x 2 sequences/s = 8 sequences/s, so a step of 384 sequences takes at least 48 s whatever the
hardware; 100B tokens are ceil(1e11 / (384 x 8,192)) = 31,790 steps, at least 1,525,920 s = 17.7 d,
more than the 7 d - 5 d reserved = 2 d available. So {input.throughput, deadline.finish} admits no
plan, while each alone admits one (checked below by exact solves).
"""

from __future__ import annotations

import math

import pytest

from tpopt.catalogs.scenario import build_scenario, read_scenario_file, with_overrides
from tpopt.optimizer import core as core_mod
from tpopt.optimizer.backends import cpsat_model as cpsat_mod
from tpopt.optimizer.core import MONOLITHIC_LIMIT, solve
from tpopt.optimizer.explain import minimal_conflict, monolithic_hint
from tpopt.optimizer.report import TABLE_LIMIT
from tpopt.optimizer.result import Request, Status
from tpopt.optimizer.space import Space

REQ = Request(workers=1, seed=0)
PIPELINE = {  # benchmarks/solve_scaling.py row 2 (21,504 plans), deadline 7 d
    "schedule.deadline": "7d", "search.zero_stage": [0, 1, 2, 3], "search.tp": [1, 2, 4, 8],
    "search.pp": [1, 2, 4], "search.schedule": ["1f1b", "zb-h1", "fill-drain"], "search.micro_batch": [1, 2, 4],
    "search.recompute": ["none", "mlp", "norm+mlp", "full"]}
WIDE = dict(PIPELINE, **{  # row 3 (4,128,768 plans): 3 accelerators, NICs, offload, save interval and mode
    "hardware.accelerator": ["rtx4090", "h100-sxm", "a100-80gb-sxm"],
    "search.accelerator": ["rtx4090", "h100-sxm", "a100-80gb-sxm"], "search.offload": ["none", "cpu"],
    "search.nics_per_host": [1, 2, 4, 8], "search.save_interval": ["auto", "900s", "1800s", "3600s"],
    "search.save_mode": ["sync", "async"]})
EXPECTED = ["input.throughput", "deadline.finish"]  # derived in the module docstring (FAMILIES order)
INFEASIBLE_32 = {"search.max_cards": 32, "schedule.deadline": "30d", "hardware.accelerator": ["rtx4090"],
                 "search.accelerator": ["rtx4090"]}


def scenario(design_path, overrides):
    raw = read_scenario_file(design_path)
    raw.get("memory", {}).pop("activation_reserve", None)  # activations modelled, as in the benchmark rows
    return build_scenario(with_overrides(raw, overrides))


@pytest.fixture
def no_monolithic_model(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a monolithic CP-SAT model was built")

    monkeypatch.setattr(cpsat_mod, "CpSatModel", refuse)


def built_models(monkeypatch) -> list:
    """Count the monolithic CP-SAT models built from now on."""
    built, real = [], cpsat_mod.CpSatModel

    def counting(*args, **kwargs):
        built.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(cpsat_mod, "CpSatModel", counting)
    return built


def test_derivation_of_the_input_bound():
    steps = math.ceil(100e9 / (384 * 8192))
    assert steps == 31_790 and steps * 384 / (4 * 2) / 86_400 > 7 - 5


def assert_irreducible(sc, core, backend):
    assert solve(sc, backend, Request(enforce=frozenset(core), workers=1, seed=0)).status == Status.INFEASIBLE
    for f in core:
        assert solve(sc, backend, Request(enforce=frozenset(core) - {f}, workers=1, seed=0)).feasible, f


def test_above_threshold_no_monolithic_model_and_the_hinted_conflict(design_path, monkeypatch):
    sc = scenario(design_path, PIPELINE)
    space = Space.from_scenario(sc)
    assert space.largest_table() > MONOLITHIC_LIMIT and not monolithic_hint(space, REQ)
    with monkeypatch.context() as m:
        m.setattr(cpsat_mod, "CpSatModel", lambda *a, **k: pytest.fail("monolithic CP-SAT model built"))
        unhinted = minimal_conflict(space, "cpsat", REQ)
    # the same space with the monolithic model asked for: the hint runs, the conflict is the same
    built = built_models(monkeypatch)
    hinted = minimal_conflict(Space.from_scenario(sc), "cpsat", Request(workers=1, seed=0, method="monolithic"))
    assert built and hinted == unhinted == EXPECTED
    assert_irreducible(sc, unhinted, "enumerate")


def test_below_threshold_the_hint_runs_when_asked_and_the_threshold_decides(design_path, monkeypatch):
    # the chapter's design case capped at 32 cards (10.6): 32 cards finish in 34.3 d > 30 d and 40 do
    # not divide the batch, so {deadline, max cards} conflict
    sc = build_scenario(with_overrides(read_scenario_file(design_path), INFEASIBLE_32))
    space = Space.from_scenario(sc)
    # 16 plans: tabulated, so under auto the filter asks masks and no model is built
    assert space.largest_table() <= MONOLITHIC_LIMIT and space.size() <= TABLE_LIMIT
    assert not monolithic_hint(space, REQ)
    monolithic = Request(workers=1, seed=0, method="monolithic")
    assert monolithic_hint(space, monolithic)
    with monkeypatch.context() as m:
        m.setattr(cpsat_mod, "CpSatModel", lambda *a, **k: pytest.fail("monolithic CP-SAT model built"))
        masks = minimal_conflict(space, "cpsat", REQ)
    built = built_models(monkeypatch)
    hinted = minimal_conflict(Space.from_scenario(sc), "cpsat", monolithic)
    assert built and masks == hinted
    monkeypatch.setattr(core_mod, "MONOLITHIC_LIMIT", 0)  # every space above the threshold now
    monkeypatch.setattr(cpsat_mod, "CpSatModel", lambda *a, **k: pytest.fail("monolithic CP-SAT model built"))
    assert minimal_conflict(Space.from_scenario(sc), "cpsat", REQ) == hinted == ["deadline.finish", "cards.max"]


def test_large_space_conflict_by_exact_solves_without_monolithic_model(design_path, no_monolithic_model):
    # 4.1 million plans: too many to tabulate, so every question of the deletion filter is a solve
    sc = scenario(design_path, WIDE)
    space = Space.from_scenario(sc)
    assert space.size() > TABLE_LIMIT and space.largest_table() > MONOLITHIC_LIMIT
    core = minimal_conflict(space, "cpsat", REQ)
    assert core == EXPECTED
    assert_irreducible(sc, core, "cpsat")
