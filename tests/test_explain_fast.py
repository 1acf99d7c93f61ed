"""Explain's fast paths against the slow ones they replace, each answer compared with the one computed without it:

- a changed card's or NIC bandwidth's space borrows the base tables its change cannot move (:func:`E.borrowed`):
  every borrowed table (and every borrowed reduction) equals the one a fresh space builds;
- the accelerator relaxation rules cards out by the compute floor's cost bound before their compute tables, and
  the NIC relaxation proves "cannot help" under a budget by that bound: the same answers as the solves;
- layout bounds built once for questions that differ only in the layout rules: the same arrays;
- the on-demand path (tables one layout group at a time): every question an on-demand solve, the same answers as
  the scan of the layout bounds, and the least-memory question declined in one line.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import build_scenario, read_scenario_file, with_overrides
from tpopt.models import families as F
from tpopt.optimizer import explain as E
from tpopt.optimizer.decompose import HUB_RULES, LayoutBounds, _reduced
from tpopt.optimizer.result import Request
from tpopt.optimizer.space import FAMILIES, Space

DESIGN = Path(__file__).resolve().parents[1] / "examples" / "design-case.toml"
REQ = Request(workers=1, seed=0)
THREE = ["rtx4090", "h100-sxm", "a100-80gb-sxm"]
OPEN = {"search.zero_stage": [0, 1, 2, 3], "search.tp": [1, 2, 4, 8], "search.micro_batch": [1, 2, 4],
        "search.pp": [1, 2], "search.schedule": ["1f1b", "zb-h1"], "search.nics_per_host": [1, 2, 8],
        "hardware.accelerator": THREE, "search.accelerator": THREE}


def design_raw(overrides: dict, per_op: bool) -> dict:
    """The design case with ``overrides``; ``per_op``: the per-operation step model (no stated efficiency) with
    modelled activations (no reserve), the model whose compute term reads the NIC count."""
    raw = with_overrides(read_scenario_file(DESIGN), overrides)
    if per_op:
        raw["hardware"].pop("efficiency", None)
        raw["memory"].pop("activation_reserve", None)
    return raw


def every_table(space: Space) -> Space:
    for name in space._specs:
        space.tables[name]
    return space


@pytest.mark.parametrize("per_op", [False, True], ids=["flat", "per-op"])
def test_borrowed_tables_are_the_tables_a_fresh_space_builds(per_op):
    """Another card alone, or every card's NIC bandwidth x 7.5: each table and reduction the new space takes from
    the base space equals the fresh space's own, and the ones it cannot take (the card's, the NIC count's) are left
    to build."""
    raw = design_raw(OPEN, per_op)
    cat = load_catalog()
    sc = build_scenario(raw, cat)
    base = every_table(Space.from_scenario(sc))
    base.__dict__["_reduced"] = {}
    E.layout_bounds(base, "cost", frozenset(FAMILIES))  # the reductions a question keeps on the space
    ctx = E.Context.of(sc, "cpsat", REQ, None, raw, cat)
    others = {name: E._scenario_for_accelerator(ctx, name) for name in ("h200", "mi300x", "gaudi3")}
    cases = dict(others, nic=E.with_nic_factor(sc, 7.5))
    for label, changed in cases.items():
        got = E.borrowed(base, changed)
        assert got is not None, label
        fresh = Space.from_scenario(changed)
        taken = set(dict.keys(got.tables))
        moved = {"nics"} if label == "nic" else {"acc", "nics"}
        assert taken == {n for n, t in dict.items(base.tables) if not moved & set(t.vars)}, label
        assert "time.exposed_dp" not in taken and "time.compute" not in taken, label  # the card's and the NICs'
        assert any(n.startswith("mem.activations") for n in taken) and "ok." + F.CHECKPOINT in taken, label
        # the card's tables, not the NIC bandwidth's
        assert ({"time.offload", "input.min_busy", "mem.host"} <= taken) == (label == "nic"), label
        for name in taken:
            assert np.array_equal(got.tables[name].values, fresh.tables[name].values, equal_nan=True), (label, name)
        reductions = got.__dict__["_reduced"]
        assert reductions, label
        for (name, fn, target), values in reductions.items():
            ref = _reduced(fresh, name, {"min": np.min, "amin": np.min, "max": np.max, "amax": np.max}[fn], None,
                           target)
            assert np.array_equal(values, ref, equal_nan=True), (label, name, fn)


def test_moved_variables():
    sc = build_scenario(design_raw(OPEN, False), load_catalog())
    assert E.moved_variables(sc, E.with_nic_factor(sc, 2.0)) == {"nics"}
    assert E.moved_variables(sc, E.with_efficiency(sc, 0.5)) == {"acc", "nics"}
    assert E.moved_variables(sc, E.with_tokens(sc, 5e10)) is None  # the task: every table (or rebuilt_tables)
    assert E.moved_variables(sc, E.with_usable_memory(sc, 80 * 2**30)) == {"acc", "nics"}


def test_layout_bounds_do_not_depend_on_the_layout_rules():
    sc = build_scenario(design_raw(OPEN, True), load_catalog())
    space = Space.from_scenario(sc)
    full = frozenset(FAMILIES) - set(F.SWEPT)
    a, b = LayoutBounds(space, "cost", full), LayoutBounds(space, "cost", full - set(HUB_RULES))
    for attr in ("finish_min", "cost_min", "busy_max", "input_need", "mem_min", "objective_min"):
        assert np.array_equal(getattr(a, attr), getattr(b, attr), equal_nan=True), attr
    assert all(np.array_equal(a.rules[f], b.rules[f]) for f in HUB_RULES)


def _slow(monkeypatch):
    """Explain without its fast paths: no borrowed tables, no card slices, no floor bounds."""
    monkeypatch.setattr(E.context, "borrowed", lambda base, sc: None)
    monkeypatch.setattr(E.context, "card_slice", lambda base, sc, name: None)
    monkeypatch.setattr(E.cost, "over_budget_at", lambda ctx, sc: False)
    whole = E.compute_cost_floor
    monkeypatch.setattr(E.cost, "compute_cost_floor", lambda space, floor=False: whole(space))


def _relax(raw, only, monkeypatch, slow, req=REQ):
    if slow:
        _slow(monkeypatch)
    cat = load_catalog()
    sc = build_scenario(raw, cat)
    out = {r.parameter: r for r in E.relaxations(sc, "cpsat", req, raw=raw, catalog=cat, only=only)}
    monkeypatch.undo()
    return out


BUDGET = dict(OPEN, **{"cost.max_cost": 7000, "search.max_cards": 256})  # per-op: a budget conflict


def test_fast_relaxations_give_the_slow_answers(monkeypatch):
    """Under a budget cap on the per-operation model (not tabulated: the layout decomposition answers): the
    accelerator relaxation (cards ruled out by the floor, the others solved on borrowed tables), the NIC relaxation
    (proven by the floor where it cannot help) and the price relaxation (the card's slice at a new price) give the
    answers of the same questions without the fast paths."""
    raw = design_raw(BUDGET, True)
    sc = build_scenario(raw, load_catalog())
    assert not E.tabulated(Space.from_scenario(sc))
    only = ("accelerator", "nic_bandwidth", "card_price", "max_cost")
    fast = _relax(raw, only, monkeypatch, False)
    slow = _relax(raw, only, monkeypatch, True)
    assert set(fast) == set(slow) >= {"accelerator", "nic_bandwidth"}
    for name, a in fast.items():
        b = slow[name]
        assert (a.helps, a.required, a.note) == (b.helps, b.required, b.note), name
        if a.plan is not None:
            assert a.plan.metrics["cost"] == b.plan.metrics["cost"], name
            assert a.plan.plan_dict() == b.plan.plan_dict(), name
    assert fast["nic_bandwidth"].solves < slow["nic_bandwidth"].solves  # proven by the floor, not by solves
    ruled_out = [o for o in fast["accelerator"].options if "without a full solve" in o.get("note", "")]
    solved = [o for o in fast["accelerator"].options if o["feasible"]]
    assert ruled_out and solved  # both paths taken
    for a, b in zip(fast["accelerator"].options, slow["accelerator"].options, strict=True):
        assert (a["accelerator"], a["feasible"], a.get("cost")) == (b["accelerator"], b["feasible"], b.get("cost"))


def test_nic_threshold_on_borrowed_tables(monkeypatch):
    """A deadline the NICs can rescue (per-operation model on RTX 4090 hosts, up to 256 cards: the fastest plan
    finishes in 23.1945 d at today's NICs and 23.1936 d at 4x, measured): the threshold search on spaces that
    borrow every table but the compute and communication terms finds the bandwidth the fresh spaces find."""
    raw = design_raw(dict(OPEN, **{"schedule.deadline": "23.194d", "search.max_cards": 256,
                                   "hardware.accelerator": ["rtx4090"], "search.accelerator": ["rtx4090"]}), True)
    fast = _relax(raw, ("nic_bandwidth",), monkeypatch, False)["nic_bandwidth"]
    slow = _relax(raw, ("nic_bandwidth",), monkeypatch, True)["nic_bandwidth"]
    assert fast.helps and fast.plan is not None and slow.plan is not None
    assert (fast.helps, fast.required, fast.note) == (slow.helps, slow.required, slow.note)
    assert fast.required_exact == slow.required_exact
    assert fast.plan.plan_dict() == slow.plan.plan_dict()


def test_on_demand_path_gives_the_scan_answers(monkeypatch):
    """``--method on-demand``: every question is an on-demand solve (tables one layout group at a time; the scan of
    the whole space's layout bounds is never built), with the answers of the scan; the least memory per card is
    declined in one line that says why."""
    raw = design_raw(BUDGET, True)
    only = ("max_cost", "card_price", "deadline", "max_cards", "tokens", "reserved", "usable_memory")
    scan = _relax(raw, only, monkeypatch, False)

    def whole_bounds(*args, **kw):
        raise AssertionError("the whole space's layout bounds on the on-demand path")

    monkeypatch.setattr(E.context, "layout_bounds", whole_bounds)
    req = Request(workers=1, seed=0, method="on-demand")
    cat = load_catalog()
    sc = build_scenario(raw, cat)
    space = Space.from_scenario(sc)
    assert E.on_demand(space, req) and not E.scanned(space, req)
    core = E.minimal_conflict(space, "cpsat", req)
    ondemand = {r.parameter: r for r in E.relaxations(sc, "cpsat", req, raw=raw, catalog=cat, only=only)}
    monkeypatch.undo()
    assert core == E.minimal_conflict(Space.from_scenario(sc), "cpsat", REQ)
    assert set(ondemand) == set(scan)
    for name, a in scan.items():
        b = ondemand[name]
        if name == "usable_memory":
            assert b.helps is None and b.method == "not on the on-demand path"
            assert b.note.startswith("not answered on the on-demand path") and "\n" not in b.note
            continue
        assert (a.helps, a.required) == (b.helps, b.required), name
        if a.plan is not None:
            assert b.plan is not None and b.plan.metrics["cost"] == pytest.approx(a.plan.metrics["cost"], rel=1e-12)


def test_on_demand_follows_the_memory_plan(monkeypatch):
    """Under ``auto`` the questions go on demand exactly where the memory plan chose it for the solve."""
    from tpopt.optimizer import memory_plan

    sc = build_scenario(design_raw(BUDGET, True), load_catalog())
    assert not E.on_demand(Space.from_scenario(sc), REQ)
    tight = memory_plan.memory_plan(Space.from_scenario(sc)).peak_bytes - 1.0
    monkeypatch.setattr(memory_plan, "budget_of", lambda stated: memory_plan.Budget(tight, "test"))
    space = Space.from_scenario(sc)
    assert memory_plan.enforce(space).method == "on-demand"
    assert E.on_demand(space, REQ) and not E.scanned(space, REQ)


def test_explain_of_a_feasible_request_skips_the_analysis_where_the_memory_plan_goes_on_demand(monkeypatch):
    """A feasible request whose every table would exceed the memory budget: the optimum (solved on demand) is the
    one the full tables give, and the binding constraints, which read every table, are left out in one line."""
    from tpopt import presentation
    from tpopt.optimizer import memory_plan

    raw = design_raw(dict(OPEN, **{"search.max_cards": 256}), True)
    sc = build_scenario(raw, load_catalog())
    full = E.explain_request(sc, "cpsat", REQ, raw=raw)
    assert full["status"] == "optimal" and "analysis_skipped" not in full
    tight = memory_plan.memory_plan(Space.from_scenario(sc)).peak_bytes - 1.0
    monkeypatch.setattr(memory_plan, "budget_of", lambda stated: memory_plan.Budget(tight, "test"))

    def every_table_at_once(*args, **kw):
        raise AssertionError("the analysis on the on-demand path")

    monkeypatch.setattr(E.request, "make_oracle", every_table_at_once)
    lean = E.explain_request(sc, "cpsat", REQ, raw=raw)
    assert lean["solver"]["method"] == "layout decomposition on demand"
    assert (lean["status"], lean["plan"], lean["cost"]) == (full["status"], full["plan"], full["cost"])
    assert lean["binding"] == [] and lean["analysis_skipped"] == E.ANALYSIS_SKIPPED
    lines = presentation.request_lines(lean, sc)
    assert f"Binding constraints: not analysed: {E.ANALYSIS_SKIPPED}." in lines


def test_no_tables_borrowed_across_step_models():
    """A flat-model card in a per-operation scenario's place (or the reverse) tabulates other memory terms: nothing
    is borrowed."""
    from dataclasses import replace

    per_op = build_scenario(design_raw(OPEN, True), load_catalog())
    flat = replace(per_op, systems={k: replace(s, perf=None, efficiency=0.4) for k, s in per_op.systems.items()})
    base = Space.from_scenario(per_op)
    base.tables["mem.states.first"]
    assert E.moved_variables(per_op, flat) == {"acc", "nics"}  # the systems alone differ
    assert E.borrowed(base, flat) is None
    assert E.borrowed(base, E.with_efficiency(per_op, 0.9)) is not None  # the throughput scale: the same model
