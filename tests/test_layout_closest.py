"""The layout decomposition's closest plan (``LayoutOracle.closest``) is the table's (``TableOracle.closest``).

A per-operation space larger than ``report.PER_OP_TABLE_LIMIT`` plans is answered by the layouts instead of
one enumeration (each plan simulates its pipeline there); its report must quote the same plan for a family
that rules an alternative out: among the plans meeting the other families, the one nearest to meeting it.
Checked on the shipped 960-plan per-operation example against both the table and a brute force over
:func:`evaluate` on the question's plans (value / limit from each plan's own constraint check).
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from tpopt.catalogs.scenario import load_scenario
from tpopt.models import families as F
from tpopt.models import terms as T
from tpopt.models.evaluate import evaluate
from tpopt.optimizer import report
from tpopt.optimizer.space import FAMILIES, Space, card_counts

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "llama3-8b-long-context.toml"


@pytest.fixture(scope="module")
def oracles() -> tuple[Space, report.TableOracle, report.LayoutOracle]:
    sc = load_scenario(EXAMPLE)
    assert T.per_op_model(sc)
    table = report.TableOracle(Space.from_scenario(sc))
    layouts = report.LayoutOracle(Space.from_scenario(sc), as_table=True)
    return table.space, table, layouts


def _brute(space: Space, family: str, others: list[str], restrict: dict[str, list[Any]], cards: tuple[int, ...]
           ) -> tuple[float, float] | None:
    """The least (value / limit of ``family``, cost) over every plan of the question meeting ``others``."""
    d = space.domains
    names = list(d)
    best: tuple[float, float] | None = None
    for combo in itertools.product(*(range(len(d[v])) for v in names)):
        idx = dict(zip(names, combo, strict=True))
        if any(d[v][idx[v]] not in allowed for v, allowed in restrict.items()):
            continue
        if d["tp"][idx["tp"]] * d["cp"][idx["cp"]] * d["pp"][idx["pp"]] * d["dp"][idx["dp"]] not in cards:
            continue
        ev = evaluate(space.sc, space.plan(idx))
        if any(c.name in others and not c.satisfied for c in ev.constraints):
            continue
        c = ev.constraint(family)
        key = (c.value / c.limit if c.limit > 0 else c.value, float(ev.metrics["cost"]))
        best = key if best is None or key < best else best
    return best


def _questions(space: Space) -> list[tuple[dict[str, list[Any]], tuple[int, ...]]]:
    """One accelerator at each card count, and one choice of a variable at a few card counts (the report's
    "fewer cards" and "same scale" questions)."""
    d = space.domains
    acc = d["acc"][0]
    counts = card_counts(d)
    out: list[tuple[dict[str, list[Any]], tuple[int, ...]]] = [({"acc": [acc]}, (n,)) for n in counts]
    for var in ("tp", "zero", "recompute"):
        for x in d[var]:
            out += [({"acc": [acc], var: [x]}, (n,)) for n in counts[len(counts) // 3::len(counts) // 3]]
    return out


@pytest.mark.parametrize("family,brute", [(F.MEMORY_PER_CARD, True), (F.DEADLINE, True), (F.CHECKPOINT, True),
                                          (F.INPUT_THROUGHPUT, False), (F.BUDGET, False)])
def test_the_layouts_closest_plan_is_the_tables(oracles: tuple[Space, report.TableOracle, report.LayoutOracle],
                                                family: str, brute: bool) -> None:
    """Same plan from both oracles; and, where :func:`evaluate` reports the family (no budget is set here and the
    input check is not among this example's reported constraints), the least value / limit of a brute force."""
    space, table, layouts = oracles
    others = [g for g in FAMILIES if g != family]
    answered = 0
    for restrict, cards in _questions(space):
        want = table.closest(family, others, restrict, cards)
        got = layouts.closest(family, others, restrict, cards)
        assert (got is None) == (want is None), (family, restrict, cards)
        least = _brute(space, family, others, restrict, cards) if brute else None
        if brute:
            assert (least is None) == (want is None), (family, restrict, cards)
        if want is None or got is None:
            continue
        assert got.plan == want.plan, (family, restrict, cards)
        if least is not None:
            c = got.constraint(family)
            ratio = c.value / c.limit if c.limit > 0 else c.value
            assert math.isclose(ratio, least[0], rel_tol=1e-6, abs_tol=1e-9), (family, restrict, cards)
        answered += 1
    assert answered >= 10  # the questions have plans to compare, not only empty answers


def test_a_large_per_operation_space_is_answered_by_the_layouts() -> None:
    sc = load_scenario(EXAMPLE)
    space = Space.from_scenario(sc)
    assert space.size() <= report.PER_OP_TABLE_LIMIT  # the shipped per-operation examples keep their table
    assert isinstance(report.make_oracle(space, "cpsat", report.Request()), report.TableOracle)
    with mock.patch.object(report, "PER_OP_TABLE_LIMIT", space.size() - 1):  # one plan more than the limit
        got = report.make_oracle(space, "cpsat", report.Request())
    assert isinstance(got, report.LayoutOracle) and got.as_table  # the table's questions, by the layouts
