"""The sweep's layouts path (one group's tables and layout fronts shared by every point) against
independent solves of each point's own scenario: every optimum's cost, finish and card count, every
infeasible point's fastest finish, on a sweep with deadlines, card caps and budgets that make some
points infeasible."""

from __future__ import annotations

from pathlib import Path

import pytest

from tpopt.models import families as F
from tpopt.models.units import DAY
from tpopt.optimizer import sweep as sw
from tpopt.optimizer.core import solve
from tpopt.optimizer.result import Request
from tpopt.optimizer.space import FAMILIES
from tpopt.optimizer.sweep import tasks

SWEEP_FILE = Path(__file__).resolve().parents[1] / "examples" / "design-case-sweep.toml"


def _free_spec(tmp_path, **cli):
    """The design case with its [search] restrictions removed (ZeRO, TP, PP, micro-batch, recompute ... all
    searched: thousands of plans per accelerator, many layouts)."""
    text = SWEEP_FILE.read_text()
    p = tmp_path / "free.toml"
    p.write_text(text[:text.index("[search]")] + "[search]\nmax_cards = 1024\n")
    return sw.build_spec(p, cli)


@pytest.fixture(scope="module")
def layouts_sweep(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("layouts")
    spec = _free_spec(tmp, hw="rtx4090,h100-sxm", deadline="8d,20d,26d,31d,40d", max_cards="16,48,1024",
                      max_cost="15000,1e9")
    limit = tasks.AUTO_TABLE_LIMIT
    tasks.AUTO_TABLE_LIMIT = 0  # every group "large": the layouts path
    try:
        res = sw.run_sweep(spec, workers=1)
    finally:
        tasks.AUTO_TABLE_LIMIT = limit
    return spec, res


def test_every_point_takes_the_layouts_path(layouts_sweep):
    spec, res = layouts_sweep
    assert res.paths == {tasks.LAYOUTS: 60} and res.tasks == 2  # one task per accelerator: tables built once
    assert {r["solver"] for r in res.rows} == {tasks.LAYOUTS}


def test_layouts_path_equals_independent_solves(layouts_sweep):
    """Each point re-solved from scratch: its own scenario (deadline, card cap and budget applied), a fresh
    space, the exhaustive enumeration; for infeasible points the fastest plan with deadline.finish dropped."""
    spec, res = layouts_sweep
    payload = sw._payload(spec)
    rows = {r["point_key"]: r for r in res.rows}
    statuses = set()
    for point in spec.points():
        row = rows[point.key()]
        sc = sw.point_scenario(sw.group_scenario(payload, point), point)
        ref = solve(sc, "enumerate")
        statuses.add(row["status"])
        if ref.feasible:
            assert row["status"] == "optimal", point.key()
            assert row["cost"] == pytest.approx(ref.best.metrics["cost"], rel=1e-12)
            assert row["finish_days"] == pytest.approx(ref.best.metrics["finish_days"], rel=1e-12)
            assert row["cards"] == ref.best.plan.cards
        else:
            assert row["status"] == "infeasible", point.key()
            fast = solve(sc, "enumerate", Request(objective="time",
                                                 enforce=frozenset(f for f in FAMILIES if f != F.DEADLINE)))
            if fast.feasible:
                assert row["fastest_days"] == pytest.approx(fast.best.metrics["finish_days"], rel=1e-12)
            else:
                assert row["fastest_days"] is None
    assert statuses == {"optimal", "infeasible"}


def test_layouts_path_equals_the_table_path(layouts_sweep):
    """The same sweep through the exhaustive table path (one enumeration per group, masks per point)."""
    spec, res = layouts_sweep
    table = sw.run_sweep(spec, workers=1)
    assert table.paths == {"table": 60}
    for a, b in zip(res.rows, table.rows, strict=True):
        assert (a["point_key"], a["status"], a["cards"]) == (b["point_key"], b["status"], b["cards"])
        for col in ("cost", "finish_days", "fastest_days"):
            assert (a[col] is None) == (b[col] is None)
            if a[col] is not None:
                assert a[col] == pytest.approx(b[col], rel=1e-12)


def test_a_neighbour_hint_never_changes_an_answer(tmp_path):
    """A point answered alone (no neighbour) and after every other point of its group give the same plan:
    the neighbour's optimum is only an upper bound."""
    spec = _free_spec(tmp_path, hw="rtx4090", deadline="26d,31d,40d", max_cards="48,1024")
    payload = sw._payload(spec)
    points = spec.points()
    together = {r["point_key"]: r for r in tasks.run_task(tasks.LAYOUTS, payload, points)}
    for p in points:
        alone = tasks.run_task(tasks.LAYOUTS, payload, [p])[0]
        assert {k: alone[k] for k in ("status", "cost", "finish_days", "cards", "tp", "pp", "dp", "zero")} == \
            {k: together[p.key()][k] for k in ("status", "cost", "finish_days", "cards", "tp", "pp", "dp", "zero")}


def test_groups_differing_in_tokens_share_tables(tmp_path):
    """Two token counts: the second group's space reuses the first's tables (only the task's tables are
    rebuilt) and its answers equal a fresh solve."""
    spec = _free_spec(tmp_path, hw="rtx4090", deadline="31d", tokens="80B,100B")
    payload = sw._payload(spec)
    first, second = sorted(spec.points(), key=lambda q: q.tokens)
    tasks._SPACES.clear()
    tasks.run_task(tasks.LAYOUTS, payload, [first])
    base = next(iter(tasks._SPACES.values()))
    row = tasks.run_task(tasks.LAYOUTS, payload, [second])[0]
    shared = next(iter(tasks._SPACES.values()))
    assert shared is not base and dict.get(shared.tables, "mem.states") is dict.get(base.tables, "mem.states")
    ref = solve(sw.point_scenario(sw.group_scenario(payload, second), second), "enumerate")
    assert row["cost"] == pytest.approx(ref.best.metrics["cost"], rel=1e-12)
    assert row["finish_days"] * DAY == pytest.approx(ref.best.metrics["finish_days"] * DAY, rel=1e-12)
