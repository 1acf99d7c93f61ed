"""A small space's report walks its plans once: the enumeration's own table answers the analysis.

``tpopt solve`` enumerates a tiny space (every plan evaluated) and then analyses the optimum with a
:class:`~tpopt.optimizer.enumerate.PointTable` of the same plans. When the report asks for the analysis
(:func:`~tpopt.optimizer.enumerate.keep_point_table`), the enumeration keeps the table of the chunks it walks
and the analysis reads it: the DeepSeek-V3 example (576 plans, each simulating its pipeline) is evaluated once,
not twice. The kept table must be the one a fresh walk builds, array for array, and only a complete walk keeps one.
"""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import numpy as np
import pytest

from tpopt.catalogs.scenario import load_scenario
from tpopt.optimizer import enumerate as E
from tpopt.optimizer.plan import plan
from tpopt.optimizer.result import Request
from tpopt.optimizer.space import Space

EX = Path(__file__).resolve().parents[1] / "examples"


def _same(a: E.PointTable, b: E.PointTable) -> None:
    assert set(a.idx) == set(b.idx) and set(a.ok) == set(b.ok) and set(a.ratio) == set(b.ratio)
    for v in a.idx:
        np.testing.assert_array_equal(a.idx[v], b.idx[v])
    for x, y in ((a.cost, b.cost), (a.finish, b.finish), (a.cards, b.cards)):
        np.testing.assert_array_equal(x, y)
    for f in a.ok:
        np.testing.assert_array_equal(a.ok[f], b.ok[f])
        np.testing.assert_array_equal(a.ratio[f], b.ratio[f])


@pytest.mark.parametrize("example", ["design-case.toml", "deepseek-v3.toml"])
def test_the_kept_table_is_the_one_a_fresh_walk_builds(example: str) -> None:
    sc = load_scenario(EX / example)
    space = Space.from_scenario(sc)
    E.keep_point_table(space)
    best, evaluated, _ = E.enumerate_best(space, Request())
    assert evaluated == space.size() and best
    kept = E.PointTable.build(space)
    assert kept is E.PointTable.build(space)  # read back, not walked again
    assert kept.cost.size == space.size()
    _same(kept, E.PointTable.build(Space.from_scenario(sc)))


def test_only_a_marked_complete_walk_keeps_a_table() -> None:
    sc = load_scenario(EX / "design-case.toml")
    unmarked = Space.from_scenario(sc)
    E.enumerate_best(unmarked, Request())
    assert E.WALKED_TABLE not in unmarked.__dict__
    partial = Space.from_scenario(load_scenario(EX / "deepseek-v3.toml"))  # 12 groups: one walked
    E.keep_point_table(partial)
    groups = list(E._groups(partial))
    assert len(groups) > 1
    _, evaluated, _ = E.enumerate_best(partial, Request(), groups=groups[:1])
    assert evaluated < partial.size() and E.WALKED_TABLE not in partial.__dict__


def test_the_deepseek_report_walks_its_plans_once() -> None:
    sc = load_scenario(EX / "deepseek-v3.toml")
    walks: list[object] = []
    real = E.chunks

    def counted(space: Space, groups: object = None):  # type: ignore[no-untyped-def]
        if groups is None:
            walks.append(space)
        return real(space, groups)  # type: ignore[arg-type]

    with mock.patch.object(E, "chunks", counted):
        report = plan(sc)
    assert report.binding and report.alternatives  # the analysis ran, and answered from the solve's walk
    assert len(walks) == 1
