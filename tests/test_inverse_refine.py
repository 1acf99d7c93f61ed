"""`tpopt inverse` with tokens continuous over a range (issue 41, item 3): the ``LO:HI:COUNT`` grid only locates each
size's bracket, a bisection over the token count refines the most tokens the budget and date allow to the stated
resolution.

The brute force written here evaluates every plan of the small space (ZeRO-3, TP 1, PP 1, micro-batch 1, 8 to 32
cards in whole hosts; ``tests.test_inverse.cheapest``) at every value of a fine token grid (0.5 % steps, four
times finer than the 2 % resolution asked), takes each size's most tokens within the budget and date there, and
bounds the refined answer by it: the refined tokens are allowed, no further than the resolution below the fine
grid's most and below the next fine value; the chosen loss lies between the best loss at those ends."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.test_inverse import SCENARIO, cheapest, chinchilla, tpopt
from tpopt.catalogs.scenario import read_scenario_file
from tpopt.optimizer.inverse import ask
from tpopt.optimizer.result import Request

SIZES = ("qwen3-0.6b", "qwen3-1.7b", "qwen3-4b")
RANGE = "40B:320B:4"  # the grid 40B, 80B, 160B, 320B: a factor 2 between neighbours
RESOLUTION = 0.02
FINE_STEP = 1.005


@pytest.fixture(scope="module")
def space_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("inverse-refine") / "scenario.toml"
    p.write_text(SCENARIO)
    return p


@pytest.fixture(scope="module")
def fine(space_file: Path) -> dict[str, list[tuple[float, int, float | None]]]:
    """Each size's (tokens, N, cheapest on-time cost or None) at every fine-grid value from 40B to 320B."""
    count = math.floor(math.log(8) / math.log(FINE_STEP))
    grid = [float(round(40e9 * FINE_STEP ** k)) for k in range(count + 1)] + [320e9]
    return {m: [(t, *cheapest(space_file, m, t)) for t in grid] for m in SIZES}


def most_allowed(rows: list[tuple[float, int, float | None]],
                 budget: float | None) -> tuple[float | None, float | None]:
    """(the most fine-grid tokens within budget and date, the next fine value above it), None where none is
    allowed / none is above; the allowed values form a prefix (the pruning's premise, asserted)."""
    ok = [cost is not None and (budget is None or cost <= budget) for _, _, cost in rows]
    last = max((i for i, a in enumerate(ok) if a), default=-1)
    assert all(ok[: last + 1]) and not any(ok[last + 1:])
    return (None if last < 0 else rows[last][0]), (rows[last + 1][0] if last + 1 < len(rows) else None)


def inverse(path: Path, budget: float | None, resolution: float | None = RESOLUTION) -> dict:
    req = Request(objective="cost", seed=0, workers=1, time_limit=120)
    return ask(read_scenario_file(path), (), "enumerate", req, models=list(SIZES), tokens=RANGE, max_cost=budget,
               token_resolution=resolution if resolution is not None else 0).out


@pytest.mark.parametrize("budget", [None, 2000.0, 6000.0])
def test_refined_tokens_agree_with_a_fine_brute_force(space_file: Path, fine: dict, budget: float | None) -> None:
    """Budget 2,000: the budget stops the 1.7B size inside its bracket, the 0.6B size is not refined (its
    bracket's upper end cannot beat the 1.7B) and the 4B affords no grid value; 6,000: the budget stops the 1.7B
    and 4B sizes inside their brackets; none: the date stops the 4B size (32 cards)."""
    out = inverse(space_file, budget)
    assert out["token_resolution"] == RESOLUTION and out["chosen"]["solve"]["solver"]["name"] == "enumerate"
    ends: dict[str, tuple[float, float]] = {}
    for row in out["candidates"]:
        m = row["model"]
        top, nxt = most_allowed(fine[m], budget)
        if row["pruned"] or top is None:
            continue
        n = fine[m][0][1]
        ends[m] = (chinchilla(n, top / (1 + RESOLUTION)), chinchilla(n, nxt if nxt is not None else top))
        if row["coarse"]:  # not refined: its loss just below the bracket's upper end already loses
            assert row["tokens_bracket"] is None and row["loss"] > out["chosen"]["loss"]
            continue
        t = row["tokens"]
        cost = cheapest(space_file, m, t)[1]
        assert cost is not None and (budget is None or cost <= budget) and cost == pytest.approx(row["cost"], rel=1e-9)
        if nxt is None:  # the grid's top allowed: nothing to refine
            assert t == 320e9 and row["binds"] == "token grid" and row["tokens_bracket"] is None
            continue
        lo, hi = row["tokens_bracket"]
        assert lo == t and hi <= lo * (1 + RESOLUTION)
        assert top <= hi and t < nxt  # the fine grid's most lies in the bracket [lo, hi)
        assert top / (1 + RESOLUTION) <= t
        hi_cost = cheapest(space_file, m, hi)[1]
        assert row["binds"] == ("date" if hi_cost is None else "budget")
        assert hi_cost is None or (budget is not None and hi_cost > budget)
    chosen = out["chosen"]
    worst = min(w for w, _ in ends.values())  # each size's loss at its answer lies between its two ends
    best = min(b for _, b in ends.values())
    assert best <= chosen["loss"] <= worst
    assert chosen["model"] == min(ends, key=lambda m: ends[m][0])


@pytest.mark.parametrize("budget", [2000.0, 6000.0])
def test_refinement_beats_the_grid_at_a_few_more_solves(space_file: Path, budget: float) -> None:
    """The same question with the grid's values only (resolution 0): the refined answer's loss is lower (its
    tokens lie above the grid's bracket end), and the bisection adds at most ceil(log2(ln 2 / ln 1.02)) = 6
    solves per refined size."""
    grid, refined = inverse(space_file, budget, None), inverse(space_file, budget)
    assert grid["token_resolution"] is None
    assert refined["chosen"]["loss"] < grid["chosen"]["loss"]
    refined_sizes = sum(1 for r in refined["candidates"] if r["tokens_bracket"] is not None)
    probes = math.ceil(math.log2(math.log(2) / math.log(1 + RESOLUTION)))
    assert grid["solves"] < refined["solves"] <= grid["solves"] + probes * refined_sizes + len(SIZES)


def test_resolution_is_printed(space_file: Path) -> None:
    p = tpopt("inverse", "--scenario", str(space_file), "--models", ",".join(SIZES), "--tokens", RANGE,
              "--max-cost", "2000", "--token-resolution", "2%")
    assert p.returncode == 0, p.stderr
    flat = " ".join(p.stdout.split())  # the header wraps at the terminal's width
    assert "most tokens refined to 2.00%" in flat and "(refined to 2.00%:" in flat


@pytest.mark.parametrize(("args", "words"), [
    (("--tokens", "10B,20B", "--token-resolution", "1%"), "refines a --tokens LO:HI range"),
    (("--tokens", "10B:20B", "--token-resolution", "0.9"), "from 0 (the grid's values only) to 0.5"),
    (("--tokens", "10B:20B", "--token-resolution", "x%"), "--token-resolution"),
])
def test_bad_resolution_is_one_line(args: tuple[str, ...], words: str) -> None:
    p = tpopt("inverse", "--models", "qwen3-0.6b", *args)
    assert p.returncode == 2 and words in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
