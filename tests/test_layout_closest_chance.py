"""Under a confidence, the layouts' plan closest to meeting the deadline is the table's, found without the table.

The deadline family's value under a confidence is its chance-equivalent finish R + (D - R) step / step_max
(:func:`tpopt.models.evaluate.evaluate_arrays`). :meth:`LayoutOracle.closest` forms it on each layout's glued grid
(``report._chance_finish``) and walks the layouts in order of its bound-level value, as it does for the other
glued families, instead of building the table of every plan (Llama-3.1-405B on up to 100,000 cards at 95 %: 6.6 ->
1.0 CPU s). The reference is :class:`TableOracle`, whose ratios come from ``evaluate_arrays`` point by point.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import build_scenario
from tpopt.models import families as F
from tpopt.models import terms as T
from tpopt.models.plan import Scenario
from tpopt.optimizer import report
from tpopt.optimizer.space import FAMILIES, Space, card_counts


def _scenario(deadline: str) -> Scenario:
    """Llama-3-8B on H100 at the per-operation model (pipelines of 1, 2 and 4 stages: bound and exact steps
    differ), two save intervals and modes, 95 %."""
    return build_scenario({
        "model": {"name": "llama3-8b"}, "task": {"tokens": "1T", "seq_len": 8192, "global_batch": 512},
        "schedule": {"deadline": deadline, "reserved": "1d", "confidence": "95%"},
        "hardware": {"accelerator": "h100-sxm"}, "risk": {"step_sigma": 0.15},
        "search": {"zero_stage": [1, 3], "tp": [1, 2, 4], "pp": [1, 2, 4], "micro_batch": [1],
                   "recompute": ["none", "full"], "save_interval": ["auto", "1800s"], "save_mode": ["sync", "async"],
                   "max_cards": 1024}}, load_catalog())


def _questions(space: Space) -> list[tuple[dict[str, list[Any]], tuple[int, ...]]]:
    """One accelerator at each card count, and one choice of a variable at a few card counts."""
    d = space.domains
    acc = d["acc"][0]
    counts = card_counts(d)
    out: list[tuple[dict[str, list[Any]], tuple[int, ...]]] = [({"acc": [acc]}, (n,)) for n in counts]
    for var in ("tp", "pp", "zero", "recompute"):
        for x in d[var]:
            out += [({"acc": [acc], var: [x]}, (n,)) for n in counts[len(counts) // 3::len(counts) // 3]]
    return out


@pytest.mark.parametrize("deadline", ["8d", "20d"])
def test_the_chance_closest_plan_is_the_tables_without_the_table(deadline: str) -> None:
    sc = _scenario(deadline)
    table = report.TableOracle(Space.from_scenario(sc))
    layouts = report.LayoutOracle(Space.from_scenario(sc), as_table=True)
    others = [g for g in FAMILIES if g != F.DEADLINE]
    answered = 0
    for restrict, cards in _questions(table.space):
        want = table.closest(F.DEADLINE, others, restrict, cards)
        got = layouts.closest(F.DEADLINE, others, restrict, cards)
        assert (got is None) == (want is None), (restrict, cards)
        if want is None or got is None:
            continue
        assert got.plan == want.plan, (restrict, cards)
        answered += 1
    assert answered >= 20  # questions with plans to compare, not only empty ones
    assert layouts._table is None  # every one answered by the walk, none by a table of every plan


def test_the_chance_ratio_is_the_tables_bit_for_bit_and_nan_where_it_does_not_grow_with_the_step() -> None:
    """Every plan's ratio from its step and largest step (the chance roots at its cards, interval and save mode)
    is the table's (``evaluate_arrays``' value over the deadline, float32), bit for bit."""
    sc = _scenario("8d")
    space = Space.from_scenario(sc)
    table = report.TableOracle(space).table
    modes = space.domains["mode"]
    acc = space.domains["acc"][0]
    checked = 0
    for m, mode in enumerate(modes):
        at = table.idx["mode"] == m
        step_max = T.chance_step_max(sc, acc, mode, table.cards[at], table.interval[at])
        got = report._closest_ratio({"step": table.step[at], "step_max": step_max}, F.DEADLINE, sc)
        assert got is not None and got.dtype == np.float32
        assert np.array_equal(got, table.ratio[F.DEADLINE][at], equal_nan=True)
        checked += int(at.sum())
    assert checked == table.cost.size
    # a largest step <= 0 (no finish meets the deadline at the confidence): the value falls as the step grows
    assert np.isnan(report._chance_finish({"step": np.array([1.0, 2.0]), "step_max": np.array([0.0, -1.0])}, sc)).all()
