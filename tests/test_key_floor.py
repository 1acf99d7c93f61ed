"""LayoutEvaluator.key_floor: a lower bound of the key best() returns at the bound level (and so at the exact level)
for any question, which is what lets a report's walk skip a layout's glued bound check when the floor is already
above its incumbent (issue 39: the analysis after a nine-accelerator solve)."""
from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from test_moe_planner import moe_scenarios
from test_solver_properties import scenarios

from tpopt.models.families import MEMORY_PER_CARD
from tpopt.optimizer.decompose import LayoutBounds
from tpopt.optimizer.enumerate import HUB, LayoutEvaluator
from tpopt.optimizer.space import FAMILIES, Space

SETTINGS = settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


def check_floor(sc, objective):
    """Every layout, with every family enforced and with none: floor <= the bound-level and the exact least key."""
    space = Space.from_scenario(sc)
    b = LayoutBounds(space, objective)
    compared = 0
    for enforced in (list(FAMILIES), []):
        ev = LayoutEvaluator(space)  # fresh: the floors are formed before any layout is glued
        for h in range(b.n):
            layout = tuple(int(b.coords[v][h]) for v in HUB)
            floor = ev.key_floor(layout, objective)
            assert floor != -math.inf  # nothing glued yet: a floor is formed
            fit = ev.key_floor(layout, objective, enforced)  # the question's: over the points that fit in memory
            assert fit >= floor or math.isnan(floor) or math.isnan(fit)
            none = ev.no_plan(layout, enforced)
            for level in ("bound", "exact"):
                found = ev.best(layout, enforced, objective, 1, level=level)
                assert not (none and found), (layout, level, found)  # no plan proven: best() finds none
                if found and not math.isnan(floor):
                    assert floor <= found[0][0][0], (layout, level, floor, found[0][0])
                    compared += 1
                if found and not math.isnan(fit):
                    assert fit <= found[0][0][0], (layout, level, fit, found[0][0])
            assert ev.key_floor(layout, objective) == floor or math.isnan(floor)  # kept once formed
            assert ev.key_floor(layout, objective, enforced) == fit or math.isnan(fit)
            assert ev.no_plan(layout, enforced) == none
    return compared


@SETTINGS
@given(scenarios())
def test_key_floor_below_best_on_dense_spaces(case):
    check_floor(*case)


@SETTINGS
@given(moe_scenarios())
def test_key_floor_below_best_on_moe_spaces(case):
    check_floor(*case)


def check_batched(sc):
    """form_floors_ahead over every layout at once: the same fits and floors, bit for bit, as layout by layout."""
    space = Space.from_scenario(sc)
    b = LayoutBounds(space, "cost")
    layouts = [tuple(int(b.coords[v][h]) for v in HUB) for h in range(b.n)]
    memory = [MEMORY_PER_CARD]
    for question in (memory, []):
        one, many = LayoutEvaluator(space), LayoutEvaluator(space)
        many.form_floors_ahead(layouts, bool(question))
        for layout in layouts:
            for objective in ("cost", "finish"):
                for enforced in {(), tuple(question)}:
                    x = one.key_floor(layout, objective, enforced)
                    y = many.key_floor(layout, objective, enforced)  # formed by the batch (kept), never again
                    assert x == y or (math.isnan(x) and math.isnan(y)), (layout, objective, enforced, x, y)
            assert one.no_plan(layout, memory) == many.no_plan(layout, memory)
        # the batch formed them all (the spaces' tables are float64): nothing was left to the checks
        assert all(layout in many._fits for layout in layouts)
        assert all((layout, "cost") in (many._fit_floors if question else many._floors) for layout in layouts)


@SETTINGS
@given(scenarios())
def test_batched_floors_are_the_layout_by_layout_bits_on_dense_spaces(case):
    check_batched(case[0])


@SETTINGS
@given(moe_scenarios())
def test_batched_floors_are_the_layout_by_layout_bits_on_moe_spaces(case):
    check_batched(case[0])
