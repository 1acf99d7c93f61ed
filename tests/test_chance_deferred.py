"""The chance roots of the card counts a solve rules out by the layout alone, left out of the chance table's bound
(issue 39, item 2: ``Space.defer_chance``): the bound is the chance table itself at every other card count and
above it at those, each layout's own entries are the table's bit for bit, and the widest GPT-3 space at 95 %
proves and reports the same with and without it."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tpopt.catalogs.scenario import load_scenario
from tpopt.models import families as F
from tpopt.optimizer.result import Request
from tpopt.optimizer.space import CHANCE_BOUND, CHANCE_TABLE, FAMILIES, LAYOUT, Space, cards_of

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture(scope="module")
def widest_95():
    sc = load_scenario(EXAMPLES / "gpt3-175b-widest.toml")
    return replace(sc, task=replace(sc.task, confidence=0.95))


def test_the_bound_is_the_table_at_the_card_counts_kept_and_above_it_elsewhere(widest_95):
    sc = widest_95
    exact = Space.from_scenario(sc).tables[CHANCE_TABLE]
    space = Space.from_scenario(sc)
    space.defer_chance(FAMILIES)
    assert space.chance_deferred() == (F.limit(F.CARDS, sc), True)
    bound = space.bound_table(CHANCE_TABLE, "hi")
    assert bound.name == CHANCE_BOUND and bound.vars == exact.vars
    assert not dict.__contains__(space.tables, CHANCE_TABLE)  # the exact table is not built for the bound
    d = space.domains
    grids = np.ix_(*[np.asarray(d[v], dtype=float) for v in exact.vars[3:]])
    cards = np.broadcast_to(cards_of(**dict(zip(exact.vars[3:], grids, strict=True)))[None, None, None],
                            exact.values.shape)
    kept = (cards <= 1024) & (cards % 8 == 0)  # the example's card cap; eight A100s a host
    assert 0 < kept.sum() < kept.size
    assert np.array_equal(bound.values[kept], exact.values[kept])  # the same roots, bit for bit
    admits = np.where(np.isnan(exact.values), -np.inf, exact.values)  # NaN: no step meets it (its plans never finish)
    assert np.isnan(exact.values[~kept]).any() and not np.isnan(bound.values).any()
    assert (bound.values[~kept] >= admits[~kept]).all()  # an upper bound where left out
    room = F.limit(F.DEADLINE, sc) - sc.task.reserved_s
    assert (admits <= room).all() and (bound.values[~kept] > 0).all()


def test_each_layout_s_entries_are_the_table_s(widest_95):
    """Space.chance_layout at every layout of the space (the evaluator's step limits on a deferring space) against
    the whole table's slice there: equal bit for bit."""
    sc = widest_95
    exact = Space.from_scenario(sc).tables[CHANCE_TABLE].values
    space = Space.from_scenario(sc)
    space.defer_chance(FAMILIES)
    d = space.domains
    assert LAYOUT[0] == "acc" and CHANCE_TABLE in space._specs
    checked = 0
    for a, tp, cp, pp, dp in itertools.product(*(range(len(d[v])) for v in ("acc", "tp", "cp", "pp", "dp"))):
        h = dict(acc=a, tp=tp, cp=cp, pp=pp, dp=dp, mb=0)
        got = space.chance_layout(tuple(h[v] for v in LAYOUT))
        assert got.shape == (1, len(d["mode"]), len(d["tau"]), 1, 1, 1, 1)
        assert np.array_equal(got[0, :, :, 0, 0, 0, 0], exact[a, :, :, tp, cp, pp, dp], equal_nan=True)
        checked += 1
    assert checked == 4 * 12 * len(d["dp"]) and len(d["dp"]) > 10  # every TP x PP x DP layout of the example


def test_a_shared_space_takes_neither_the_bound_nor_its_reductions(widest_95):
    space = Space.from_scenario(widest_95)
    space.defer_chance(FAMILIES)
    space.__dict__["_reduced"] = {}
    space.bound_table(CHANCE_TABLE, "hi")
    space.__dict__["_reduced"][(CHANCE_TABLE, "max", ("acc",))] = np.zeros(1)
    bigger = replace(widest_95, search=replace(widest_95.search, max_cards=4096))
    shared = space.sharing(bigger, ())
    assert CHANCE_BOUND not in dict.keys(shared.tables) and shared.chance_deferred() is None
    assert not any(k[0] == CHANCE_TABLE for k in shared.__dict__["_reduced"])


def test_another_solve_that_keeps_more_card_counts_undoes_it(widest_95):
    space = Space.from_scenario(widest_95)
    space.defer_chance(FAMILIES)
    space.bound_table(CHANCE_TABLE, "hi")
    space.defer_chance(set(FAMILIES) - {F.CARDS})  # the card cap dropped: its card counts are read
    assert space.chance_deferred() is None and not dict.__contains__(space.tables, CHANCE_BOUND)
    assert space.bound_table(CHANCE_TABLE, "hi") is space.tables[CHANCE_TABLE]


def test_the_widest_gpt3_space_at_95_percent_proves_and_reports_the_same_without_it(widest_95, monkeypatch):
    """The on-demand solve and its report (binding families, alternatives, the "without cards.max" question that
    walks the left-out card counts) with the roots deferred and with every root found: the same JSON."""
    from tpopt.optimizer.plan import plan

    def run() -> str:
        res = plan(widest_95, req=Request(seed=0, workers=1))
        assert res.feasible and res.solver.note == "layout decomposition on demand"
        d = json.loads(json.dumps(res.report, default=str))
        d["solver"].pop("wall_s", None)
        return json.dumps(d, sort_keys=True)

    deferred = run()
    assert '"cards.max"' in deferred and '"alternatives"' in deferred
    monkeypatch.setattr(Space, "defer_chance", lambda self, enforced: None)
    assert run() == deferred
