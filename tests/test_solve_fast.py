"""Large-space fast paths stay exact (issue 16, items 1, 2 and 4).

On random small design spaces, with the pipeline terms forced onto their closed-form *bounds* (what
large spaces use):

* the layout decomposition (CP-SAT and HiGHS masters) still finds the enumerator's optimum;
* the per-layout evaluator finds the same best plans as enumerating the layout's sub-space;
* the report's layout oracle answers every question (binding families, why not cheaper) like the
  exact enumeration table.
"""

import math
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_solver_properties import check_agreement, scenarios

from tpopt.optimizer import report
from tpopt.optimizer import space as space_mod
from tpopt.optimizer.core import solve
from tpopt.optimizer.enumerate import HUB, enumerate_best, layout_evaluator
from tpopt.optimizer.result import Request
from tpopt.optimizer.space import Space

EXAMPLES = max(4, int(os.environ.get("TPOPT_PROPERTY_EXAMPLES", "60")) // 8)  # raise for a deeper search


@pytest.fixture
def bounds_only(monkeypatch):
    """Tabulate the pipeline terms as closed-form bounds whatever the space's size."""
    monkeypatch.setattr(space_mod, "EXACT_PIPELINE_WORK", -1)


# the property tests below: derandomised (same examples every run), slow examples and the fixture allowed
DERANDOMIZED = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@DERANDOMIZED
@given(scenarios(pipeline=True))
def test_decomposition_with_pipeline_bounds_agrees(bounds_only, case):
    sc, objective = case
    assert not Space.from_scenario(sc).exact_pipeline_tables()
    check_agreement(sc, objective)


@DERANDOMIZED
@given(scenarios(pipeline=True))
def test_layout_evaluator_equals_enumeration(bounds_only, case):
    sc, objective = case
    sp = Space.from_scenario(sc)
    ev = layout_evaluator(sp)
    d = sp.domains
    req = Request(objective=objective, top=3)
    enforced = req.enforced(space_mod.FAMILIES)
    assert HUB == ("acc", "tp", "cp", "pp", "dp", "mb")
    for h in [(a, t, c, p, q, b) for a in range(len(d["acc"])) for t in range(len(d["tp"])) for c in range(len(d["cp"]))
              for p in range(len(d["pp"])) for q in range(len(d["dp"]))[::3] for b in range(len(d["mb"]))]:
        sub = Space(sc=sc, domains={k: ([d[k][h[HUB.index(k)]]] if k in HUB else list(v)) for k, v in d.items()})
        want, _, _ = enumerate_best(sub, req)
        got = ev.best(h, enforced, objective, top=3)
        assert len(got) == len(want)
        ref = [solve_key(sc, sub, a, objective) for a in want]
        for (key, idx), r in zip(got, ref, strict=False):
            assert math.isclose(key[0], r, rel_tol=1e-12), (h, key, r)
            assert math.isclose(solve_key(sc, sp, idx, objective), key[0], rel_tol=1e-12)
        one = ev.best(h, enforced, objective, top=1)  # the save grid reduced to its least overhead
        assert [k for k, _ in one] == [k for k, _ in got[:1]]
        low = ev.best(h, enforced, objective, top=1, level="bound")
        if got:
            assert low and low[0][0][0] <= got[0][0][0] * (1 + 1e-12)


def solve_key(sc, sp, idx, objective):
    from tpopt.models.evaluate import evaluate

    ev = evaluate(sc, sp.plan(idx))
    return ev.metrics["cost"] if objective == "cost" else ev.metrics["finish_days"] * 86400.0


@DERANDOMIZED
@given(scenarios(pipeline=True))
def test_layout_oracle_answers_like_the_table(bounds_only, case):
    sc, objective = case
    req = Request(objective=objective)
    r = solve(sc, "enumerate", req)
    if not r.feasible:
        return
    sp = Space.from_scenario(sc)
    enforced = set(r.enforced)
    table, layouts = report.TableOracle(sp), report.LayoutOracle(sp)
    got = {}
    for name, oracle in (("table", table), ("layouts", layouts)):
        binds = report.binding_families(oracle, r.best, objective, enforced)
        alts = report.why_not_cheaper(oracle, sp, r.best, objective, enforced, same_scale=True)
        got[name] = ([(b.name, value(b.without, objective)) for b in binds],
                     [(a["alternative"], a["feasible"], a.get("objective"),
                       sorted(x["name"] for x in a.get("ruled_out_by", []))) for a in alts])
    (b1, a1), (b2, a2) = got["table"], got["layouts"]
    assert [n for n, _ in b1] == [n for n, _ in b2]
    assert all(math.isclose(x, y, rel_tol=1e-9) for (_, x), (_, y) in zip(b1, b2, strict=False))
    assert len(a1) == len(a2)
    for x, y in zip(a1, a2, strict=False):
        assert x[:2] == y[:2] and x[3] == y[3], (x, y)
        if x[1]:
            assert math.isclose(x[2], y[2], rel_tol=1e-9)


def value(ev, objective):
    return ev.metrics["cost"] if objective == "cost" else ev.metrics["finish_days"]


@pytest.mark.parametrize("backend", ["cpsat", "highs"])
def test_decomposition_master_with_no_layout_left_is_infeasible(design, backend):
    # every layout fails the relaxed deadline (5 d reserved inside a 4 d deadline): the master has nothing
    # to choose from and the answer is a proof of infeasibility, not a solver error
    from dataclasses import replace

    from tpopt.optimizer.result import Status

    sc = replace(design, task=replace(design.task, deadline_s=4 * 86400.0))
    r = solve(sc, backend, Request(method="decomposed"))
    assert r.status == Status.INFEASIBLE


def test_widest_gpt3_space_solves_and_backends_agree():
    # issue 16: the 1.15-billion-plan GPT-3 space (examples/gpt3-175b-widest.toml) is solved with its tables
    # in one process, both masters agree, and the plan re-evaluates as feasible
    from pathlib import Path

    from tpopt.catalogs.scenario import load_scenario
    from tpopt.models.evaluate import evaluate
    from tpopt.optimizer.result import Status

    sc = load_scenario(Path(__file__).resolve().parents[1] / "examples" / "gpt3-175b-widest.toml")
    sp = Space.from_scenario(sc)
    assert sp.size() == 4 * 78 * 20 * 8 * 4 * 2 * 9 * 8 * 20 * 2 == 1_150_156_800  # tp, pp x schedule, dp, ...
    assert not sp.exact_pipeline_tables()
    r = solve(sc, "cpsat", Request(), space=sp)
    assert r.status == Status.OPTIMAL and evaluate(sc, r.best.plan).feasible
    h = solve(sc, "highs", Request(), space=sp)
    assert math.isclose(h.best.metrics["cost"], r.best.metrics["cost"], rel_tol=1e-9)
    assert r.solver.evaluated < sp.size() // 1000  # a few layouts, not the space
    # tables in the smallest dtype that holds them; the upper bounds rounded up to float32
    t = sp.tables
    assert t["ok.batch.divisibility"].values.dtype == bool and t["cards"].values.dtype.kind == "i"
    lo, hi = t["time.compute.lo"].values, t["time.compute.hi"].values
    assert hi.dtype == np.float32 and np.all(hi >= lo)
    acts = [names[2] for _, names in sp.memory_classes()]  # the activation tables of every stage class
    assert "time.compute" not in t and not any(n in t for n in acts)  # never the exact pipeline tables


def test_per_operation_model_with_pipeline_bounds(bounds_only, design_path):
    # the per-operation step-time model (no flat efficiency): uneven stages, per-group durations; the
    # bounds, the layout evaluator and the layout oracle stay exact against the enumeration
    from tpopt.catalogs import load_catalog
    from tpopt.catalogs.scenario import build_scenario, read_scenario_file
    from tpopt.models import terms as T

    raw = read_scenario_file(design_path)
    raw["hardware"].pop("efficiency", None)
    raw["memory"].pop("activation_reserve", None)
    raw["search"].update({"tp": [1, 2], "pp": [1, 2, 4], "micro_batch": [1, 2], "zero_stage": [1, 3],
                          "recompute": ["none", "full"],
                          "schedule": ["1f1b", "zb-h1", "interleaved", "dualpipe", "fill-drain"]})
    sc = build_scenario(raw, load_catalog())
    assert T.per_op_model(sc)
    r = solve(sc, "enumerate", Request())
    for backend in ("cpsat", "highs"):
        got = solve(sc, backend, Request(method="decomposed"))
        assert got.status == r.status and math.isclose(got.best.metrics["cost"], r.best.metrics["cost"],
                                                       rel_tol=1e-9)
    sp = Space.from_scenario(sc)
    table, layouts = report.TableOracle(sp), report.LayoutOracle(sp)
    enforced = set(r.enforced)
    for oracle in (table, layouts):
        binds = report.binding_families(oracle, r.best, "cost", enforced)
        alts = report.why_not_cheaper(oracle, sp, r.best, "cost", enforced, same_scale=True)
        oracle.answers = ([(b.name, round(value(b.without, "cost"), 6)) for b in binds],
                          [(a["alternative"], a["feasible"], None if a.get("objective") is None
                            else round(a["objective"], 6)) for a in alts])
    assert table.answers == layouts.answers


@st.composite
def chance_pipeline_scenarios(draw):
    """:func:`scenarios` with pipelines and a confidence level (the deadline family in its chance form)."""
    from dataclasses import replace

    sc, objective = draw(scenarios(pipeline=True))
    q = draw(st.sampled_from([0.5, 0.9, 0.95, 0.99]))
    search = sc.search
    if draw(st.booleans()):  # many (interval, mode) pairs, where the chance form picks one per point
        search = replace(search, save_interval_s=(0.0, 600.0, 1800.0, 3600.0, 7200.0, 43200.0),
                         save_mode=("sync", "async"))
    return replace(sc, task=replace(sc.task, confidence=q), search=search), objective


@DERANDOMIZED
@given(chance_pipeline_scenarios())
def test_decomposition_with_pipeline_bounds_agrees_under_a_chance_constraint(bounds_only, case):
    """Under a confidence the per-layout evaluator simulates only the schedules whose bounded plans (the least
    overhead of the save pairs, the chance condition at the bounded step) may reach the incumbent: the
    on-demand and decomposed solves still prove the enumerator's optimum."""
    sc, objective = case
    assert not Space.from_scenario(sc).exact_pipeline_tables()
    check_agreement(sc, objective, runs=[("cpsat", "on-demand"), ("cpsat", "decomposed")])


@DERANDOMIZED
@given(chance_pipeline_scenarios())
def test_layout_evaluator_with_a_cutoff_finds_the_same_plan_under_a_chance_constraint(bounds_only, case):
    """The best plan of a layout with a cutoff at or above its key (only the schedules that may reach it
    simulated) is the plan found without one, key and choices alike; the least point is lexsort's first."""
    sc, objective = case
    sp = Space.from_scenario(sc)
    ev = layout_evaluator(sp)
    d = sp.domains
    enforced = Request(objective=objective).enforced(space_mod.FAMILIES)
    for h in [(a, t, 0, p, q, b) for a in range(len(d["acc"])) for t in range(len(d["tp"]))
              for p in range(len(d["pp"])) for q in range(len(d["dp"]))[::3] for b in range(len(d["mb"]))]:
        got = ev.best(h, enforced, objective, top=1)
        three = ev.best(h, enforced, objective, top=3)  # sorted by lexsort
        assert got == three[:1]
        if got:
            key = got[0][0][0]
            assert ev.best(h, enforced, objective, top=1, cutoff=key) == got
            assert ev.best(h, enforced, objective, top=1, cutoff=key * 1.5) == got


def test_layout_evaluator_picks_one_plan_under_a_chance_constraint_as_the_full_grid_does(bounds_only, design_path):
    """The chance form's one-plan shortcut (each grid point's least admissible overhead, then the full pairs of the
    grid points that tie for the least key) returns lexsort's first point of the full grid: on a design space
    with pipelines, 20 save intervals and both modes, at a deadline where the chance condition rules some pairs
    out (50 %, 95 % and 99.9 %), every layout's plan (key and choices) equals the first of its top 3."""
    from dataclasses import replace
    from unittest import mock

    from tpopt.catalogs import load_catalog
    from tpopt.catalogs.scenario import build_scenario, read_scenario_file
    from tpopt.optimizer import enumerate as E

    raw = read_scenario_file(design_path)
    raw["checkpoint"].pop("save_interval", None)
    raw["checkpoint"].pop("mode", None)
    raw["search"].update({"tp": [1, 2], "pp": [1, 2, 4], "micro_batch": [1, 2], "zero_stage": [1, 3],
                          "schedule": ["1f1b", "zb-h1", "interleaved"],
                          "save_interval": ["auto", "300s", "900s", "1800s", "3600s", "7200s", "14400s", "43200s"],
                          "save_mode": ["sync", "async"], "max_cards": 256})
    base = build_scenario(raw, load_catalog())
    taken = []
    real = E.LayoutEvaluator._chance_least

    def counted(self, *a, **k):
        out = real(self, *a, **k)
        taken.append(out is not None and len(out) > 0)
        return out

    with mock.patch.object(E.LayoutEvaluator, "_chance_least", counted):
        for q in (0.5, 0.95, 0.999):
            sc = replace(base, task=replace(base.task, confidence=q))
            sp = Space.from_scenario(sc)
            ev = layout_evaluator(sp)
            d = sp.domains
            enforced = Request().enforced(space_mod.FAMILIES)
            for h in [(0, t, 0, p, k, b) for t in range(len(d["tp"])) for p in range(len(d["pp"]))
                      for k in range(len(d["dp"])) for b in range(len(d["mb"]))]:
                for objective in ("cost", "time"):
                    got = ev.best(h, enforced, objective, top=1)
                    assert got == ev.best(h, enforced, objective, top=3)[:1], (q, h, objective)
                    assert ev.best(h, enforced, objective, top=1, level="bound") == \
                        ev.best(h, enforced, objective, top=3, level="bound")[:1]
    assert sum(taken) > 50
