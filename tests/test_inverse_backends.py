"""`tpopt inverse` through every backend (issue 41: every backend agrees with enumeration on small spaces).

Hypothesis draws small questions (a subset of four Qwen3 sizes, a subset of six token values, a budget or a
target loss); each backend (CP-SAT, HiGHS and Pyomo/HiGHS run as the MILP they are, ``method="monolithic"``
so the tiny-space rule does not hand them to the enumerator; the enumerator itself) answers the inverse question
and the answer must equal a brute force written here: every plan of the 16-plan space (8 to 32 cards in whole
hosts, ZeRO 1 or 3, micro-batch 1 or 2) evaluated with ``evaluate()`` at every (size, tokens), the loss from
Hoffmann et al. 2022's eq. 10, the best picked by hand."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.test_inverse import GRID, SCENARIO, SIZES, chinchilla, chinchilla_tokens
from tpopt.catalogs.scenario import load_scenario, read_scenario_file
from tpopt.models.arch import param_count
from tpopt.models.evaluate import evaluate
from tpopt.models.plan import Plan
from tpopt.optimizer.inverse import ask
from tpopt.optimizer.result import Request

SPACE = SCENARIO.replace("micro_batch = [1]\nzero_stage = [3]", "micro_batch = [1, 2]\nzero_stage = [1, 3]")
BACKENDS = ("enumerate", "cpsat", "highs", "pyomo:highs")


@pytest.fixture(scope="module")
def space_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("inverse-backends") / "scenario.toml"
    p.write_text(SPACE)
    return p


_BRUTE: dict[tuple[str, float], tuple[int, float | None]] = {}


def brute(path: Path, model: str, tokens: float) -> tuple[int, float | None]:
    """(N, the least cost of any feasible plan of the space, or None), every plan evaluated."""
    if (model, tokens) not in _BRUTE:
        sc = load_scenario(path, {"model.name": model, "task.tokens": tokens})
        costs = []
        for cards, zero, micro in itertools.product(range(8, 33, 8), (1, 3), (1, 2)):
            ev = evaluate(sc, Plan(accelerator="rtx4090", cards=cards, zero_stage=zero, tp=1, pp=1, micro_batch=micro,
                                   save_interval_s=1800.0, save_mode="sync"))
            if ev.feasible:
                costs.append(float(ev.metrics["cost"]))
        _BRUTE[model, tokens] = (param_count(sc.model), min(costs) if costs else None)
    return _BRUTE[model, tokens]


def expected(path: Path, sizes: list[str], grid: list[float], budget: float | None,
             target: float | None) -> tuple[str, float, float] | None:
    """(model, tokens, cost) of the best answer by brute force, None when no candidate qualifies.
    Least loss: the least Chinchilla loss of any (size, grid tokens) whose cheapest cost is within the budget.
    Least cost: each size at the fewest whole tokens reaching the target (eq. 10 solved for D, at least the
    grid's least, at most its most), the cheapest of those within the budget."""
    best: tuple[float, str, float, float] | None = None
    for m in sizes:
        if target is None:
            for t in grid:
                n, cost = brute(path, m, t)
                if cost is not None and (budget is None or cost <= budget):
                    key = (chinchilla(n, t), m, t, cost)
                    best = key if best is None or key < best else best
        else:
            need = chinchilla_tokens(brute(path, m, grid[0])[0], target)
            if need is None or need > grid[-1]:
                continue
            t = max(need, grid[0])
            cost = brute(path, m, t)[1]
            if cost is not None and (budget is None or cost <= budget):
                key = (cost, m, t, cost)
                best = key if best is None or key < best else best
    return None if best is None else (best[1], best[2], best[3])


question = st.fixed_dictionaries({
    "sizes": st.lists(st.sampled_from(SIZES), min_size=1, max_size=4, unique=True),
    "grid": st.lists(st.sampled_from(GRID), min_size=1, max_size=6, unique=True).map(sorted),
    "budget": st.one_of(st.none(), st.floats(300.0, 20000.0)),
    "target": st.one_of(st.none(), st.floats(2.25, 2.8)),
})


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=10, deadline=None, derandomize=True, phases=(Phase.explicit, Phase.generate),
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(q=question)
def test_inverse_answer_equals_brute_force_on_every_backend(space_file: Path, backend: str, q: dict) -> None:
    req = Request(objective="cost", seed=0, workers=1, time_limit=120,
                  method="auto" if backend == "enumerate" else "monolithic")
    asked = ask(read_scenario_file(space_file), (), backend, req, models=q["sizes"], tokens=q["grid"],
                max_cost=q["budget"], target_loss=q["target"])
    want = expected(space_file, q["sizes"], q["grid"], q["budget"], q["target"])
    chosen = asked.res.chosen
    if want is None:
        assert chosen is None
        return
    assert chosen is not None and chosen.best is not None and chosen.best.report is not None
    assert chosen.best.report["solver"]["name"] == backend  # the backend itself answered
    assert (chosen.model, chosen.tokens) == (want[0], pytest.approx(want[1], abs=1.0))
    assert chosen.cost == pytest.approx(want[2], rel=1e-9)
    assert chosen.loss is not None and math.isfinite(chosen.loss)
