"""Explain on spaces too large to tabulate answers each question by the solve's layout decomposition
(shared tables, a scan of the layout bounds, the tokens threshold in closed form, least memory layout
by layout). The same questions on small spaces are answered by one enumeration table: forcing the
large-space path there must give every relaxation the same answer."""

from __future__ import annotations

from pathlib import Path

import pytest

from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import build_scenario, read_scenario_file, with_overrides
from tpopt.models import families as F
from tpopt.optimizer import explain as E
from tpopt.optimizer.core import solve
from tpopt.optimizer.result import Request
from tpopt.optimizer.space import FAMILIES, Space, rebuilt_tables

DESIGN = Path(__file__).resolve().parents[1] / "examples" / "design-case.toml"
REQ = Request(workers=1, seed=0)
FREE = {"search.zero_stage": [0, 1, 2, 3], "search.tp": [1, 2, 4, 8], "search.micro_batch": [1, 2, 4],
        "hardware.accelerator": ["rtx4090"], "search.accelerator": ["rtx4090"]}
CASES = {
    "cards": dict(FREE, **{"search.max_cards": 32, "schedule.deadline": "30d"}),  # deadline x card cap
    "budget": dict(FREE, **{"cost.max_cost": 15000}),  # deadline x budget
}


def _relax(raw, large: bool, monkeypatch):
    if large:  # every space "too large to tabulate", every solve decomposed: the large-space path
        monkeypatch.setattr(E.context, "TABLE_LIMIT", 0)
        monkeypatch.setattr(E.context, "use_decomposition", lambda space, req: True)
    sc = build_scenario(raw, load_catalog())
    out = {r.parameter: r for r in E.relaxations(sc, "cpsat", REQ, raw=raw, catalog=load_catalog(),
                                                 only=("deadline", "max_cards", "tokens", "reserved",
                                                       "max_cost", "usable_memory"))}
    monkeypatch.undo()
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_large_space_path_gives_the_table_answers(case, monkeypatch):
    raw = with_overrides(read_scenario_file(DESIGN), CASES[case])
    small = _relax(raw, False, monkeypatch)
    large = _relax(raw, True, monkeypatch)
    assert set(small) == set(large)
    assert any(r.helps for r in small.values()) and set(small) >= {"deadline", "tokens", "usable_memory"}
    for name, a in small.items():
        b = large[name]
        assert (a.helps, a.required) == (b.helps, b.required), name
        if a.required_exact is not None:
            assert b.required_exact == pytest.approx(a.required_exact, rel=1e-9), name
        if a.plan is not None:
            assert b.plan is not None
            assert b.plan.metrics["cost"] == pytest.approx(a.plan.metrics["cost"], rel=1e-12), name
            assert b.plan.metrics["finish_days"] == pytest.approx(a.plan.metrics["finish_days"], rel=1e-12), name


def test_scan_best_equals_a_solve_for_every_family_set():
    """The scan (layout bounds in order, each layout solved exactly) against CP-SAT's decomposed solve and
    the enumeration, with each family dropped in turn and both objectives."""
    sc = build_scenario(with_overrides(read_scenario_file(DESIGN), CASES["budget"]), load_catalog())
    space = Space.from_scenario(sc)
    for objective in ("cost", "time"):
        for drop in (None, F.DEADLINE, F.BUDGET, F.MEMORY_PER_CARD, F.INPUT_THROUGHPUT):
            enforce = frozenset(f for f in FAMILIES if f != drop)
            req = Request(objective=objective, enforce=enforce, workers=1, seed=0)
            got = E.scan_best(space, req)
            ref = solve(sc, "enumerate", req)
            assert (got is None) == (ref.best is None), (objective, drop)
            if got is not None:
                assert got.metrics["cost"] == pytest.approx(ref.best.metrics["cost"], rel=1e-12)
                assert got.metrics["finish_days"] == pytest.approx(ref.best.metrics["finish_days"], rel=1e-12)


def test_least_memory_scan_equals_the_enumeration():
    sc = build_scenario(with_overrides(read_scenario_file(DESIGN), FREE), load_catalog())
    ctx = E.Context.of(sc, "cpsat", REQ)
    space = Space.from_scenario(sc)
    for fams in ([f for f in FAMILIES if f != F.MEMORY_PER_CARD], [F.BATCH_DIVISIBILITY, F.WHOLE_HOSTS]):
        ref = E.argmin_metric(ctx, "memory_per_card", fams, sc=sc, space=space)  # exhaustive (small space)
        got = E.scan_min_metric(space, "memory_per_card", fams, REQ)
        assert ref is not None and got is not None
        assert got[0] == pytest.approx(ref[0], rel=1e-12)


def test_only_the_task_and_price_tables_are_rebuilt():
    sc = build_scenario(with_overrides(read_scenario_file(DESIGN), FREE), load_catalog())
    assert rebuilt_tables(sc, E.with_max_cost(E.with_max_cards(sc, 16), 1.0)) == ()
    assert set(rebuilt_tables(sc, E.with_tokens(sc, 5e10))) == {"interval", "overhead", "ok." + F.CHECKPOINT,
                                                               "deadline.step_max"}
    assert rebuilt_tables(sc, E.with_deadline(sc, 40 * 86400.0)) == ()  # fixed save intervals: no table reads it
    auto = build_scenario(with_overrides(read_scenario_file(DESIGN), dict(FREE, **{"search.save_interval": ["auto"]})),
                          load_catalog())
    assert "interval" in rebuilt_tables(auto, E.with_deadline(auto, 40 * 86400.0))  # the optimum may be the deadline
    assert rebuilt_tables(sc, E.with_card_price_scale(sc, 0.5)) == ("rate",)
    assert rebuilt_tables(sc, E.with_efficiency(sc, 0.5)) is None  # the step model: every table


def test_a_card_slice_of_the_base_tables_is_the_card_s_own_tables():
    """The accelerator relaxation's spaces for the scenario's own cards are the base space's tables sliced
    at the card: equal, table by table, to the tables a fresh space of that card builds."""
    import numpy as np

    three = ["rtx4090", "h100-sxm", "a100-80gb-sxm"]
    raw = with_overrides(read_scenario_file(DESIGN), dict(FREE, **{"hardware.accelerator": three,
                                                                  "search.accelerator": three,
                                                                  "search.nics_per_host": [1, 2, 8]}))
    cat = load_catalog()
    sc = build_scenario(raw, cat)
    base = Space.from_scenario(sc)
    base.build_tables()
    ctx = E.Context.of(sc, "cpsat", REQ, None, raw, cat)
    for name in three:
        one = E._scenario_for_accelerator(ctx, name)
        sliced = E.card_slice(base, one, name)
        assert sliced is not None, name
        fresh = Space.from_scenario(one)
        assert sliced.domains == fresh.domains
        for key in dict.keys(sliced.tables):
            assert np.array_equal(sliced.tables[key].values, fresh.tables[key].values, equal_nan=True), (name, key)
    other = E.with_efficiency(E._scenario_for_accelerator(ctx, "h100-sxm"), 0.5)
    assert E.card_slice(base, other, "h100-sxm") is None  # another step model: its own tables


@pytest.mark.parametrize("case", sorted(CASES))
def test_closed_form_thresholds_equal_the_bisection_by_re_solves(case, monkeypatch):
    """The tokens and reserved-time thresholds in closed form against the search they replace (bisection by
    exact re-solves, kept where the closed form does not apply): the same rounded values; the tokens'
    exact threshold equal (whole iterations); the reserved time's within the bisection's 1 s tolerance."""
    raw = with_overrides(read_scenario_file(DESIGN), CASES[case])
    sc = build_scenario(raw, load_catalog())
    only = ("tokens", "reserved")
    closed = {r.parameter: r for r in E.relaxations(sc, "cpsat", REQ, raw=raw, only=only)}
    monkeypatch.setattr(E.relax, "most_iterations", lambda ctx: None)
    monkeypatch.setattr(E.relax, "most_reserved", lambda ctx: None)
    searched = {r.parameter: r for r in E.relaxations(sc, "cpsat", REQ, raw=raw, only=only)}
    for name in only:
        a, b = closed[name], searched[name]
        assert (a.helps, a.required) == (b.helps, b.required), name
    assert closed["tokens"].required_exact == searched["tokens"].required_exact
    tol = E.RESERVED_TOL_S / 86400.0
    assert searched["reserved"].required_exact - tol <= closed["reserved"].required_exact
    assert closed["reserved"].required_exact <= searched["reserved"].required_exact + tol
    if case == "budget":  # the budget binds: the bisection took ~20 re-solves, the closed form 2
        assert closed["reserved"].solves < searched["reserved"].solves
