"""The layout decomposition on demand (issue 27): tables per layout group, built when the group is reached.

Properties: on random small spaces the on-demand path, with groups as small as one layout (every group bound
and every table slice exercised) and with its default groups, proves the same optimum as enumeration; its group
bound (the compute floor: the busiest stage's work, no pipeline simulated) never exceeds the pipeline's
closed-form lower bound nor the exact compute term; the memory plan chooses it instead of refusing a space
whose tables do not fit the budget, and the certificate it prints closes the gap.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.test_solver_properties import check_agreement, scenarios
from tpopt.catalogs.scenario import load_scenario
from tpopt.models import families as F
from tpopt.models import terms as T
from tpopt.optimizer import memory_plan as M
from tpopt.optimizer import ondemand
from tpopt.optimizer import space as space_mod
from tpopt.optimizer.core import solve
from tpopt.optimizer.result import Request, Status
from tpopt.optimizer.space import FAMILIES, Space, Table

EXAMPLES = int(os.environ.get("TPOPT_PROPERTY_EXAMPLES", "60"))
ROOT = Path(__file__).resolve().parents[1]


@settings(max_examples=max(6, EXAMPLES // 3), deadline=None, suppress_health_check=[HealthCheck.too_slow],
          derandomize=True)
@given(st.one_of(scenarios(), scenarios(pipeline=True)))
def test_on_demand_with_one_layout_per_group_agrees_with_enumeration(case):
    sc, objective = case
    with mock.patch.object(ondemand, "GROUP_ROWS", 1):  # every hub variable fixed: one layout per group
        space = Space.from_scenario(sc)
        wide = {v for v in ondemand.GROUP_ORDER if len(space.domains[v]) > 1}
        assert wide <= set(ondemand.group_vars(space))
        check_agreement(sc, objective, runs=[("cpsat", "on-demand"), ("highs", "on-demand")])


@settings(max_examples=max(4, EXAMPLES // 6), deadline=None, suppress_health_check=[HealthCheck.too_slow],
          derandomize=True)
@given(scenarios(pipeline=True))
def test_on_demand_with_its_default_groups_agrees_with_enumeration(case):
    sc, objective = case
    check_agreement(sc, objective, runs=[("cpsat", "on-demand")])


@pytest.mark.parametrize("name", ["gpt3-175b-widest.toml", "design-case.toml", "deepseek-v3.toml"])
def test_the_compute_floor_is_below_the_pipeline_bound(name):
    """floor <= exact compute entry by entry (a pipeline's step is never shorter than its busiest stage's work), on
    the large flat spaces through floor <= closed-form lower bound <= exact; equal where there is one stage."""
    space = Space.from_scenario(load_scenario(ROOT / "examples" / name))
    f = space.compute_floor()
    lo_t = space.tables["time.compute.lo"]
    assert f.vars == tuple(v for v in lo_t.vars if v != "schedule")  # the floor has no schedule axis
    lo = lo_t.values
    floor = np.broadcast_to(np.expand_dims(f.values, lo_t.vars.index("schedule")), lo.shape)
    # small spaces: against the exact term (DeepSeek-V3: per-operation, DualPipe, whose closed-form lower bound is
    # below the floor on some entries)
    if space.table_rows("time.compute") <= 100_000:
        lo = space.tables["time.compute"].values
    fin = np.isfinite(lo)
    assert fin.any()
    assert np.all(floor[fin] <= lo[fin] * (1 + 1e-12))
    shape = [1] * lo.ndim
    shape[lo_t.vars.index("pp")] = -1
    one = np.broadcast_to(np.asarray(space.domains["pp"]).reshape(shape) == 1, lo.shape)
    np.testing.assert_allclose(floor[one & fin], lo[one & fin], rtol=1e-12)


@pytest.mark.parametrize("name", ["gpt3-175b-widest.toml", "design-case.toml", "deepseek-v3.toml"])
def test_the_compute_floor_table_holds_each_plans_floor(name):
    """The floor tables (built per accelerator, recompute and SP on broadcast inputs, the expert combinations
    laid out; the busiest stage's and DualPipe's paired) hold at each entry the floor of that one plan:
    :func:`space.compute_floor` of :func:`terms.compute_inputs` at the entry's scalar values (per-operation dense,
    flat dense, per-operation MoE)."""
    check_floor_table(Space.from_scenario(load_scenario(ROOT / "examples" / name)), np.random.default_rng(27), 60)


def check_floor_table(space, rng, draws):
    """``draws`` random entries of the space's floor tables, each against the floor of its one plan."""
    d, sc = space.domains, space.sc
    floors = space.compute_floors()
    f = floors[0]
    assert f.values.shape == tuple(len(d[v]) for v in f.vars)
    sched = d["schedule"][0]
    for _ in range(draws):
        idx = tuple(int(rng.integers(n)) for n in f.values.shape)
        at = {v: d[v][i] for v, i in zip(f.vars, idx, strict=True)}
        at = {v: at.get(v, d[v][0]) for v in ("acc", "recompute", "sp", "tp", "cp", "pp", "dp", "mb", "nics", "ep",
                                              "etp", "cap")}
        nums = {v: float(at[v]) for v in ("tp", "cp", "pp", "dp", "mb", "nics", "ep", "etp", "cap")}
        inputs = T.compute_inputs(sc, acc=at["acc"], recompute=at["recompute"], sp=at["sp"], schedule=sched, **nums)
        for paired, table in zip((False, True), floors, strict=True):
            want = float(np.asarray(space_mod.compute_floor(sc, sched, nums["pp"], inputs, paired)))
            assert math.isclose(float(table.values[idx]), want, rel_tol=1e-12), (at, paired, want)


def test_dualpipe_has_its_own_floor_below_its_exact_compute():
    """DualPipe runs layer groups s and p-1-s on stage s (half the micro-batches each), so with uneven groups (the
    per-operation model's embedding and head) its step can be shorter than the busiest group's work: measured,
    DeepSeek's ordering 4 % below it for Llama-3-70B on Gaudi 3 at 8 stages. The paired floor m max_s (w_s +
    w_{p-1-s}) / 2 stays below the exact compute on every DualPipe entry, the busiest-stage floor below every
    other schedule's, the space's floor (the paired one when DualPipe is searched) below all; and the on-demand
    path's group bound, built on that floor, proves the enumeration's optimum."""
    from tpopt.catalogs import load_catalog
    from tpopt.catalogs.scenario import build_scenario

    raw = {"model": {"name": "llama3-70b"}, "task": {"tokens": "2T", "seq_len": 8192, "global_batch": 1536},
           "schedule": {"deadline": "120d"}, "hardware": {"accelerator": ["gaudi3"]},
           "checkpoint": {"storage": "superpod-good"},
           "search": {"accelerator": ["gaudi3"], "tp": [1], "pp": [1, 2, 4, 8], "dp": [32, 64], "micro_batch": [1],
                      "recompute": ["none", "norm+mlp", "full"], "nics_per_host": [8], "zero_stage": [1, 2, 3],
                      "offload": ["none", "cpu"], "max_cards": 16384,
                      "schedule": ["1f1b", "zb-h1", "interleaved", "dualpipe", "dualpipe-deepseek"]}}
    sc = build_scenario(raw, load_catalog())
    space = Space.from_scenario(sc)
    exact = space.tables["time.compute"]
    stage, paired = space.compute_floors()
    whole = space.compute_floor()
    axis = exact.vars.index("schedule")
    over = []
    for i, name in enumerate(space.domains["schedule"]):
        e = exact.values.take(i, axis=axis)
        fin = np.isfinite(e)
        assert fin.any()
        own = paired if name.startswith("dualpipe") else stage
        assert np.all(own.values[fin] <= e[fin] * (1 + 1e-12)), name
        assert np.all(whole.values[fin] <= e[fin] * (1 + 1e-12)), name
        over.append(float(np.max(stage.values[fin] / e[fin])))
    assert over[-1] > 1.02  # the busiest-stage floor is no bound of DeepSeek's DualPipe here
    ref = solve(sc, "enumerate", Request(seed=0, workers=1, time_limit=300))
    got = solve(sc, "cpsat", Request(seed=0, workers=1, time_limit=300, method="on-demand"))
    assert ref.status == got.status == Status.OPTIMAL
    assert math.isclose(got.best.metrics["cost"], ref.best.metrics["cost"], rel_tol=1e-9)


def test_the_memory_plan_chooses_the_on_demand_path_instead_of_refusing():
    """GPT-3's widest example needs about 536 MiB with every table at once and 382 MiB one layout group at a time:
    under a 450 MiB budget its tables are built per group, the same optimum comes back with a certificate >= its
    cost; under 300 MiB it is refused, the on-demand estimate named."""
    sc = load_scenario(ROOT / "examples" / "gpt3-175b-widest.toml")
    space = Space.from_scenario(sc)
    full = M.memory_plan(space)
    lean = M.on_demand_bytes(space)
    assert lean < 450 * 2**20 < full.peak_bytes
    from dataclasses import replace
    tight = replace(sc, search=replace(sc.search, memory_budget=450 * 2**20))
    assert M.enforce(Space.from_scenario(tight)).method == "on-demand"
    r = solve(tight, "cpsat", Request(seed=0, workers=1, time_limit=300))
    ref = solve(sc, "cpsat", Request(seed=0, workers=1, time_limit=300, method="decomposed"))  # every table
    assert r.solver.note == "layout decomposition on demand" and ref.solver.note == "layout decomposition"
    assert r.status == ref.status == Status.OPTIMAL
    assert math.isclose(r.best.metrics["cost"], ref.best.metrics["cost"], rel_tol=1e-9)
    assert r.solver.certificate >= r.best.metrics["cost"] * (1 - 1e-9)
    assert ref.solver.certificate >= ref.best.metrics["cost"] * (1 - 1e-9)
    assert r.solver.as_dict()["certificate"] == r.solver.certificate
    from tpopt.errors import InputError
    with pytest.raises(InputError, match=r"383.8 MiB one layout group at a time\), over the memory budget of "
                                         r"300.0 MiB"):
        M.enforce(Space.from_scenario(replace(sc, search=replace(sc.search, memory_budget=300 * 2**20))))


def test_pending_groups_give_the_whole_builds_tables_and_layout_bounds():
    """The report's compute bound tables after an on-demand solve (:class:`ondemand.PendingGroups`): the slices of the
    groups the solve built, relaxed bounds elsewhere (the floor from below: valid, at most the exact term), and
    once every group is built, the tables and the per-layout bounds of a whole build, value for value (a plan's
    compute term reads its own variables only). Without group slices nothing is done."""
    from tpopt.optimizer.decompose import LayoutBounds

    sc = load_scenario(ROOT / "examples" / "gpt3-175b-widest.toml")
    keep = {"pp": [1, 2, 4, 8], "dp": [16, 32, 64, 128], "mb": [1, 2], "recompute": ["none", "full"]}
    space = Space.from_scenario(sc, keep)
    assert not space.exact_pipeline_tables()  # the pipeline terms are closed-form bounds here
    assert ondemand.PendingGroups.of(space) is None
    assert not any(n in space.tables for n in ondemand.COMPUTE_BOUNDS)  # no slices: left to the ordinary build
    fixed = ("acc", "pp")
    for idx in [(0, 1), (0, 3)]:  # two groups "solved"
        ondemand.group_space(space, fixed, idx).bound_table("time.compute", "lo")
    pending = ondemand.PendingGroups.of(space)
    tps = range(len(space.domains["tp"]))  # a group no solve built is left as units of one TP width each
    assert pending is not None and pending.fixed == fixed + ("tp",)
    assert pending.pending == {(0, p, t) for p in (0, 2) for t in tps}
    assert "_group_compute" not in space.__dict__
    whole = Space(sc=sc, domains=space.domains)
    want = LayoutBounds(whole, "cost")
    want_coupled = LayoutBounds(whole, "cost", FAMILIES)  # the report's: coupled choices' grids kept
    assert want_coupled.coupled and want_coupled.grids
    lo, exact = space.tables["time.compute.lo"].values, whole.tables["time.compute"].values
    fin = np.isfinite(exact)
    assert np.all(lo[fin] <= exact[fin] * (1 + 1e-12))  # relaxed where pending, the group's own bound elsewhere
    bounds, coupled = LayoutBounds(space, "cost"), LayoutBounds(space, "cost", FAMILIES)
    pending.adopt(bounds)
    pending.adopt(coupled)
    built = pending.build((0, 2, 1), bounds)
    assert set(np.asarray(space.domains["pp"])[bounds.coords["pp"][built]]) == {4}
    assert set(np.asarray(space.domains["tp"])[bounds.coords["tp"][built]]) == {space.domains["tp"][1]}
    units = sorted(pending.pending)
    for unit in units:
        pending.build(unit, bounds)
    for unit in [(0, 2, 1)] + units:  # the same units again, into the coupled bounds
        pending.pending.add(unit)
        pending.build(unit, coupled)
    assert not pending.pending
    for name in ondemand.COMPUTE_BOUNDS:
        got, ref = space.tables[name], whole.tables[name]
        assert got.vars == ref.vars and got.values.dtype == ref.values.dtype
        np.testing.assert_array_equal(got.values, ref.values)
    for name in ondemand.BOUNDS_OF_COMPUTE + ("mem_min", "input_need"):
        np.testing.assert_array_equal(getattr(bounds, name), getattr(want, name))
        np.testing.assert_array_equal(getattr(coupled, name), getattr(want_coupled, name))
    assert set(coupled.grids) == set(want_coupled.grids)
    for name, grid in want_coupled.grids.items():
        np.testing.assert_array_equal(np.broadcast_to(coupled.grids[name], grid.shape), grid)
    for drop in (F.DEADLINE, F.MEMORY_PER_CARD):  # a question's bounds: the grids reduced under its families
        asked = [f for f in FAMILIES if f != drop]
        ref = LayoutBounds(whole, "cost", asked, want_coupled.coupled)
        for name in ondemand.BOUNDS_OF_COMPUTE + ("mem_min", "input_need"):
            np.testing.assert_array_equal(getattr(coupled.under(asked), name), getattr(ref, name))
    assert bounds.objective_min is bounds.cost_min and coupled.objective_min is coupled.cost_min


def test_the_report_after_an_on_demand_solve_answers_like_the_whole_tables():
    """The analysis after an on-demand solve builds the compute bounds of only the layout groups its questions reach
    (:class:`ondemand.PendingGroups`); its binding families and alternatives are those of the same questions on the
    whole space's tables, plan for plan."""
    from tpopt.optimizer import report

    sc = load_scenario(ROOT / "examples" / "gpt3-175b-widest.toml")
    keep = {"pp": [1, 2, 4, 16, 48, 96], "dp": [16, 32, 64, 128, 256], "mb": [1, 2], "recompute": ["none", "full"]}
    space = Space.from_scenario(sc, keep)
    assert not space.exact_pipeline_tables()
    with mock.patch.object(ondemand, "GROUP_ROWS", 20_000):  # several groups, not all of them solved
        r = solve(sc, "cpsat", Request(seed=0, workers=1, method="on-demand"), space=space)
    assert r.status == Status.OPTIMAL and "_group_compute" in space.__dict__
    enforced = set(r.enforced)
    lazy, whole = report.LayoutOracle(space), report.LayoutOracle(Space(sc=sc, domains=space.domains))
    assert lazy.bounds is not None and lazy.pending is not None and lazy.pending.pending  # groups left to build
    got = {}
    for name, oracle in (("lazy", lazy), ("whole", whole)):
        binds = report.binding_families(oracle, r.best, "cost", enforced)
        alts = report.why_not_cheaper(oracle, oracle.space, r.best, "cost", enforced, same_scale=False)  # as reported
        got[name] = ([(b.name, b.without.plan) for b in binds], alts)
    assert lazy.pending is not None and whole.pending is None
    assert got["lazy"] == got["whole"]
    lazy.pending.pending.add(next(iter(np.ndindex(*(len(space.domains[v]) for v in lazy.pending.fixed)))))
    lazy.release()  # a unit still relaxed: the space keeps no compute bound table the oracle relaxed
    assert not any(n in space.tables for n in ondemand.COMPUTE_BOUNDS) and "_layout_evaluator" not in space.__dict__
    assert got["lazy"][1]  # questions were asked


@pytest.mark.parametrize("coupled", [("offload",), ("offload", "recompute", "schedule")])
def test_the_pending_compute_reductions_are_the_whole_tables_reductions(coupled):
    """:meth:`ondemand.PendingGroups.compute_reductions` (the analysis's per-layout compute bounds from the floor and
    the solved groups' slices) equal, bit for bit, the reductions of the whole compute bound tables it lays out
    (:func:`decompose._reduced` on them), with the schedule kept on the grid or reduced away."""
    from tpopt.optimizer import decompose as D

    sc = load_scenario(ROOT / "examples" / "gpt3-175b-widest.toml")
    keep = {"pp": [1, 2, 4, 16, 48, 96], "dp": [16, 32, 64, 128, 256], "mb": [1, 2], "recompute": ["none", "full"]}
    space = Space.from_scenario(sc, keep)
    with mock.patch.object(ondemand, "GROUP_ROWS", 20_000):  # several groups, not all of them solved
        r = solve(sc, "cpsat", Request(seed=0, workers=1, method="on-demand"), space=space)
    assert r.status == Status.OPTIMAL
    pending = ondemand.PendingGroups.of(space)
    assert pending is not None and pending.pending  # groups a solve built and groups it did not
    target = D.HUB + coupled
    got = pending.compute_reductions(target)
    assert pending.compute_reductions(target) == {}  # the parts are let go after the one use
    assert len(got) == 2
    for (name, fn, at), values in got.items():
        assert name == "time.compute" and at == target and not values.flags.writeable
        want = D._reduced(space, name, np.min if fn == "min" else np.max, None, target)
        assert values.dtype == want.dtype and values.shape == want.shape
        assert values.tobytes() == np.ascontiguousarray(want).tobytes()


def test_a_report_on_the_memory_plans_on_demand_path_says_why_it_is_not_analysed():
    """When the memory plan builds the tables one layout group at a time, the report's analysis (which reads every
    table of the space) is left out, and the JSON and the text say so with both estimates, not as --no-analysis."""
    from dataclasses import replace

    from tpopt.cli import render
    from tpopt.optimizer.plan import plan

    sc = load_scenario(ROOT / "examples" / "gpt3-175b-widest.toml")  # 382 MiB on demand, 536 MiB every table
    sc = replace(sc, search=replace(sc.search, memory_budget=450 * 2**20))
    r = plan(sc, "cpsat", Request(seed=0, workers=1, time_limit=300))
    d = r.report
    assert d["analysis"] == "skipped" and d["binding"] is None and d["alternatives"] is None
    assert "one layout group at a time" in d["analysis_skipped"] and "over the memory budget" in d["analysis_skipped"]
    lines = render.binding_lines(d["binding"], "cost", "USD", skipped=d["analysis_skipped"])
    assert lines[0].startswith("Binding constraints: not analysed: the memory plan") and "--no-analysis" not in lines[0]
    assert render.binding_lines(None, "cost", "USD")[0].startswith("Binding constraints: not analysed (--no-analysis)")
@pytest.mark.parametrize("name", ["gpt3-175b-widest.toml", "design-case.toml"])
def test_a_dense_models_all_to_all_table_is_zeros_without_tabulating(name):
    """A dense model's ``time.ep_comm`` is a read-only view of one zero (no memory, nothing evaluated): the same
    values as the term tabulated on its grid."""
    space = Space.from_scenario(load_scenario(ROOT / "examples" / name))
    t = space.tables["time.ep_comm"]
    vars, fn = space._specs["time.ep_comm"]
    assert t.vars == vars and t.values.shape == tuple(len(space.domains[v]) for v in vars)
    assert not t.values.flags.writeable and t.values.strides == (0,) * len(vars)
    np.testing.assert_array_equal(space.tabulate("time.ep_comm", vars, fn).values, t.values)


@pytest.mark.parametrize("name", ["gpt3-175b-widest.toml", "deepseek-v3.toml"])
def test_the_group_bound_pass_keeps_the_whole_floor_for_the_analysis(name):
    """A space a report will analyse (:func:`ondemand.slice_whole_tables`) keeps the compute floor its group-bound
    pass computed group by group, laid out over the whole space (:meth:`ondemand.PendingGroups.of` takes it instead
    of computing it again): the floor of a whole build, value for value (each slice reads its own variables only).
    An unmarked space keeps none."""
    sc = load_scenario(ROOT / "examples" / name)
    space = Space.from_scenario(sc)
    fixed = tuple(v for v in ondemand.GROUP_ORDER if len(space.domains[v]) > 1)[:2]
    assert fixed
    want = Space(sc=sc, domains=space.domains).compute_floor()
    for marked in (True, False):
        space = Space.from_scenario(sc)
        if marked:
            ondemand.slice_whole_tables(space)
        with mock.patch.object(ondemand, "WEAK_ROWS", 1):  # the pass's groups: one per value of ``fixed``
            assert ondemand.weak_group_vars(space, fixed) == fixed
            ondemand.group_bounds(space, Request(), FAMILIES, fixed)
        kept = space.__dict__.get("_floor")
        assert "_floor_parts" not in space.__dict__
        if not marked:
            assert kept is None
            continue
        assert kept is not None and kept.vars == want.vars and kept.name == want.name
        np.testing.assert_array_equal(kept.values, want.values)


def test_pending_units_built_in_parts_give_the_whole_builds_tables_and_layout_bounds():
    """A unit built part by part (:meth:`ondemand.PendingGroups.build_part`: a few DP degrees at a time, as a report
    question reaches them), or with its sibling units in blocks (:meth:`ondemand.PendingGroups.build_block`: the TP
    widths of one pipeline depth, parts built before built again), ends with the tables and per-layout bounds of a
    whole build, value for value, into the plain and the coupled bounds; each build returns exactly the layouts
    new to it and a unit leaves ``pending`` only once every part is built."""
    from tpopt.optimizer.decompose import LayoutBounds

    sc = load_scenario(ROOT / "examples" / "gpt3-175b-widest.toml")
    keep = {"pp": [1, 2, 4, 8], "dp": [16, 32, 64, 128], "mb": [1, 2], "recompute": ["none", "full"]}
    space = Space.from_scenario(sc, keep)
    fixed = ("acc", "pp")
    ondemand.group_space(space, fixed, (0, 1)).bound_table("time.compute", "lo")  # one group "solved"
    pending = ondemand.PendingGroups.of(space)
    assert pending is not None and pending.PART not in pending.fixed
    whole = Space(sc=sc, domains=space.domains)
    want, want_coupled = LayoutBounds(whole, "cost"), LayoutBounds(whole, "cost", FAMILIES)
    bounds, coupled = LayoutBounds(space, "cost"), LayoutBounds(space, "cost", FAMILIES)
    pending.adopt(bounds)
    pending.adopt(coupled)
    units = sorted(pending.pending)
    dps = range(len(space.domains["dp"]))
    for unit in units:  # into the plain bounds: unit by unit
        done: set[int] = set()
        for parts in ([2], [0, 3], list(dps)):  # the last asks every part: only the one left is built
            built = pending.build_part(unit, parts, bounds)
            assert set(bounds.coords["dp"][built].tolist()) == set(parts) - done
            done |= set(parts)
            assert (unit in pending.pending) == (len(done) < len(dps))
            for v, i in zip(pending.fixed, unit, strict=True):
                assert set(bounds.coords[v][built].tolist()) == {i}
    assert not pending.pending
    pending.pending.update(units)  # again, into the coupled bounds: a block of TP widths at a time
    pending.parts_built.clear()
    heads = sorted({u[:-1] for u in units})
    for head in heads:
        mine = [u for u in units if u[:-1] == head]
        steps = [(mine[:2], [2]), (mine, [0, 2, 3]), (mine, list(dps))]
        for block, parts in steps:
            before = {u: set(pending.parts_built.get(u, set())) for u in mine}
            built = pending.build_block(block, parts, coupled)
            got = set(zip(coupled.coords["tp"][built].tolist(), coupled.coords["dp"][built].tolist(), strict=True))
            assert got == {(u[-1], j) for u in block for j in parts if j not in before[u]}  # the new pairs only
            assert len(built) == len(set(built.tolist()))
            for v, i in zip(pending.fixed[:-1], head, strict=True):
                assert set(coupled.coords[v][built].tolist()) == {i}
        assert not any(u in pending.pending for u in mine)
    assert not pending.pending
    for name in ondemand.COMPUTE_BOUNDS:
        np.testing.assert_array_equal(space.tables[name].values, whole.tables[name].values)
    for name in ondemand.BOUNDS_OF_COMPUTE + ("mem_min", "input_need"):
        np.testing.assert_array_equal(getattr(bounds, name), getattr(want, name))
        np.testing.assert_array_equal(getattr(coupled, name), getattr(want_coupled, name))
    for name, grid in want_coupled.grids.items():
        np.testing.assert_array_equal(np.broadcast_to(coupled.grids[name], grid.shape), grid)


def test_laid_out_tables_fill_a_unit_when_read_and_give_the_whole_layout():
    """:class:`ondemand.LaidTable` (the whole compute bound tables :meth:`ondemand.PendingGroups.of` lays out): read
    whole, right after, it is the floor along the schedules where no solve built the group and the group's slices
    where one did (the tables laid out eagerly); read at a few layouts first and written by builds in parts, it ends
    with the same bytes as the same builds into tables read whole before them. A unit is filled when read, never
    before; a pickled table is the plain table of its values."""
    import pickle

    sc = load_scenario(ROOT / "examples" / "gpt3-175b-widest.toml")
    keep = {"pp": [1, 2, 4, 8], "dp": [16, 32, 64, 128], "mb": [1, 2], "recompute": ["none", "full"]}
    fixed = ("acc", "pp")
    spaces, pendings = [], []
    for _ in range(2):
        space = Space.from_scenario(sc, keep)
        ondemand.group_space(space, fixed, (0, 1)).bound_table("time.compute", "lo")  # one group "solved"
        got = space.__dict__["_group_compute"][fixed][(0, 1)]
        floor = space.compute_floor()
        pending = ondemand.PendingGroups.of(space)
        assert pending is not None
        spaces.append(space)
        pendings.append(pending)
    eager, lazy = spaces
    vars = eager.table_vars("time.compute")
    lo_t, hi_t = (dict.__getitem__(eager.tables, n) for n in ondemand.COMPUTE_BOUNDS)
    cut = pendings[0]._cut((0, 1), fixed=fixed)
    want_lo = np.empty(lo_t.raw.shape)
    want_lo[...] = np.expand_dims(floor.values, vars.index("schedule"))
    want_hi = np.full(hi_t.raw.shape, np.finfo(hi_t.raw.dtype).max, dtype=hi_t.raw.dtype)
    want_lo[cut], want_hi[cut] = got[0].values, got[1].values
    assert lo_t.values.tobytes() == want_lo.tobytes() and hi_t.values.tobytes() == want_hi.tobytes()
    lazy_lo = dict.__getitem__(lazy.tables, "time.compute.lo")
    unit = sorted(lazy_lo._units.pending)[0]
    d = lazy.domains
    # the solved group's units hold its slices, every DP degree of them; nothing else before a read
    solved = {((0, 1, t), p) for t in range(len(d["tp"])) for p in range(len(d["dp"]))}
    assert lazy_lo._filled == solved
    layout = (unit[0], unit[2], 0, unit[1], 3, 0)  # HUB order: acc, tp, cp, pp, dp, mb
    lazy_lo.layouts_ready([layout])
    assert lazy_lo._filled == solved | {(unit, 3)}  # the slice read (its unit at its DP degree), and no other
    from tpopt.optimizer.decompose import LayoutBounds
    for space, pending in zip(spaces, pendings, strict=True):
        bounds = LayoutBounds(space, "cost")
        pending.adopt(bounds)
        head = sorted(pending.pending)[0][:-1]
        block = [u for u in sorted(pending.pending) if u[:-1] == head][:2]
        pending.build_block(block, [1, 2], bounds)
    for name in ondemand.COMPUTE_BOUNDS:
        a, b = (s.tables[name] for s in spaces)
        assert a.values.tobytes() == b.values.tobytes()
        plain = pickle.loads(pickle.dumps(b))
        assert type(plain) is Table and plain.vars == b.vars and plain.values.tobytes() == b.values.tobytes()


@settings(max_examples=max(4, EXAMPLES // 6), deadline=None, suppress_health_check=[HealthCheck.too_slow],
          derandomize=True)
@given(scenarios(pipeline=True))
def test_a_cutoff_finds_the_optimum_by_it_and_proves_none_below(case):
    """Request.cutoff (the market explanation's nearest-offer search): the on-demand decomposition given the brute
    force's optimum as the cutoff finds that optimum; given a cutoff just below it, no plan (every plan is above
    it). Without a plan at all, none either way."""
    sc, objective = case
    ref = solve(sc, "enumerate", Request(objective=objective, time_limit=120, seed=0, workers=1))
    assert ref.status in (Status.OPTIMAL, Status.INFEASIBLE)
    if not ref.feasible:
        cut = solve(sc, "cpsat", Request(objective=objective, time_limit=120, method="on-demand", cutoff=1e30))
        assert cut.best is None
        return
    want = ref.best.metrics["cost"] if objective == "cost" else ref.best.metrics["finish_days"] * 86400.0
    at = solve(sc, "cpsat", Request(objective=objective, time_limit=120, method="on-demand", cutoff=want))
    key = "cost" if objective == "cost" else "finish_days"
    assert at.best is not None and math.isclose(at.best.metrics[key], ref.best.metrics[key], rel_tol=1e-9)
    below = solve(sc, "cpsat", Request(objective=objective, time_limit=120, method="on-demand",
                                       cutoff=want * (1 - 1e-6)))
    assert below.best is None and below.status == Status.INFEASIBLE
