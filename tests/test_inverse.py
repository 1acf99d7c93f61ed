"""`tpopt inverse` (issue 41): model size and tokens as decisions.

Golden figures come from the publications' formulas written here: Hoffmann et al. 2022's Approach-3 loss, the
Besiroglu et al. 2024 constants, Muennighoff et al. 2023's effective data. The chosen (size, tokens) is checked
against a brute force written here: every plan of the small space evaluated with ``evaluate()`` for every
(size, tokens), the cheapest on-time plan's cost per candidate, the loss from the formula, the best picked by
hand; the pruning's premise (the cheapest on-time cost does not decrease in the tokens) is checked on the same
table."""

from __future__ import annotations

import functools
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tpopt.catalogs import Catalog, load_catalog
from tpopt.catalogs.scaling import load_scaling
from tpopt.catalogs.scenario import build_scenario, load_scenario, read_scenario_file, with_overrides
from tpopt.models.arch import param_count
from tpopt.models.evaluate import evaluate
from tpopt.models.plan import Plan
from tpopt.models.scaling import effective_tokens, loss, repeated_tokens_for, tokens_for_loss

SCENARIO = """\
[scenario]
name = "inverse-test"
[model]
name = "qwen3-8b"
[task]
tokens = "100B"
seq_len = 4096
global_batch = 512
[schedule]
deadline = "30d"
reserved = "2d"
[hardware]
accelerator = "rtx4090"
usable_memory = "22GiB"
efficiency = 0.40
cards_per_host = 8
[memory]
activation_reserve = "8GiB"
[checkpoint]
write_bandwidth = "7GB/s"
restore = "120s"
mode = "sync"
save_interval = "1800s"
[search]
max_cards = 32
micro_batch = [1]
zero_stage = [3]
tp = [1]
pp = [1]
"""
SIZES = ("qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-8b")
GRID = (10e9, 20e9, 40e9, 80e9, 160e9, 320e9)


def chinchilla(n: float, d: float) -> float:
    """Hoffmann et al. 2022, eq. 10 (Approach 3): L = 1.69 + 406.4 / N^0.34 + 410.7 / D^0.28."""
    return 1.69 + 406.4 / n ** 0.34 + 410.7 / d ** 0.28


@pytest.fixture(scope="module")
def scenario_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("inverse") / "scenario.toml"
    p.write_text(SCENARIO)
    return p


@functools.cache
def builtin_catalog() -> Catalog:
    """The built-in catalog, read once per process (reading it is most of a :func:`cheapest` call)."""
    return load_catalog()


def cheapest(path: Path, model: str, tokens: float, deadline: str = "30d",
             reserved: str | None = None) -> tuple[int, float | None]:
    """(N, the cheapest on-time cost or None) by evaluating every plan of the space: the search space is
    ZeRO-3, TP 1, PP 1, micro-batch 1, card counts in whole 8-card hosts up to 32 (``reserved``: the schedule's
    reserved time instead of the scenario's)."""
    raw = with_overrides(read_scenario_file(path), {
        "model.name": model, "task.tokens": tokens, "schedule.deadline": deadline,
        **({} if reserved is None else {"schedule.reserved": reserved})})
    sc = build_scenario(raw, builtin_catalog())  # load_scenario's steps, the built-in catalog read once
    costs = []
    for cards in range(8, 33, 8):
        ev = evaluate(sc, Plan(accelerator="rtx4090", cards=cards, zero_stage=3, tp=1, pp=1, micro_batch=1,
                               save_interval_s=1800.0, save_mode="sync"))
        if ev.feasible:
            costs.append(float(ev.metrics["cost"]))
    return param_count(sc.model), (min(costs) if costs else None)


@pytest.fixture(scope="module")
def table(scenario_file: Path) -> dict[tuple[str, float], tuple[int, float | None]]:
    return {(m, t): cheapest(scenario_file, m, t) for m in SIZES for t in GRID}


def tpopt(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tpopt", *args], capture_output=True, text=True, timeout=300)


def inverse_json(path: Path, *args: str) -> dict:
    p = tpopt("inverse", "--scenario", str(path), "--models", ",".join(SIZES),
              "--tokens", ",".join(f"{t:.0f}" for t in GRID), "--json", *args)
    assert p.returncode in (0, 3), p.stderr
    return json.loads(p.stdout)


def test_published_constants_in_the_catalog() -> None:
    """The built-in fits carry the published constants (Hoffmann et al. 2022 eq. 10; Besiroglu et al. 2024,
    Chinchilla Scaling: A replication attempt, their refit) and the fitted range of 70M-16B parameters, 5B-500B
    tokens."""
    cat = load_scaling()
    c, b = cat.law("chinchilla"), cat.law("besiroglu")
    assert (c.E, c.A, c.B, c.alpha, c.beta) == (1.69, 406.4, 410.7, 0.34, 0.28)
    assert (b.E, b.A, b.B, b.alpha, b.beta) == (1.8172, 482.01, 2085.43, 0.3478, 0.3658)
    assert (c.min_params, c.max_params, c.min_tokens, c.max_tokens) == (7e7, 1.6e10, 5e9, 5e11)
    assert "Hoffmann" in c.source and "Besiroglu" in b.source
    assert cat.repeat_decay == 15.4 and "Muennighoff" in cat.repeat_source


def test_chinchilla_loss_formula_and_inverse() -> None:
    law = load_scaling().law("chinchilla")
    assert loss(law, 70e9, 1.4e12) == pytest.approx(chinchilla(70e9, 1.4e12), rel=1e-12)
    assert chinchilla(70e9, 1.4e12) == pytest.approx(1.9367, abs=5e-4)  # Chinchilla itself: 70B params, 1.4T tokens
    d = tokens_for_loss(law, 70e9, 2.0)
    assert d is not None and chinchilla(70e9, d) == pytest.approx(2.0, rel=1e-12)
    assert tokens_for_loss(law, 70e9, 1.69 + 406.4 / 70e9 ** 0.34) is None  # N alone cannot go lower


def test_muennighoff_effective_data() -> None:
    """D' = U + U R* (1 - exp(-R/R*)), R = D/U - 1 repetitions (Muennighoff et al. 2023, eq. 5), R* = 15.4."""
    u = 100e9
    assert effective_tokens(80e9, u, 15.4) == 80e9  # fresh data counts in full
    expected = u + u * 15.4 * (1 - math.exp(-3 / 15.4))  # 4 epochs
    assert effective_tokens(400e9, u, 15.4) == pytest.approx(expected, rel=1e-12)
    assert expected / 400e9 > 0.9  # "up to 4 epochs ... negligible changes": over 90 % of fresh data's worth
    back = repeated_tokens_for(expected, u, 15.4)
    assert back == pytest.approx(400e9, rel=1e-9)
    assert repeated_tokens_for(u * (1 + 15.4) * 1.01, u, 15.4) is None  # beyond what repeats can ever give


def test_cost_does_not_decrease_in_tokens(table: dict[tuple[str, float], tuple[int, float | None]]) -> None:
    """The pruning's premise on the brute-force table: at each size the cheapest on-time cost is non-decreasing
    in the tokens, and once no plan meets the date none does at more tokens."""
    for m in SIZES:
        costs = [table[m, t][1] for t in GRID]
        seen_none = False
        for a, b in zip(costs, costs[1:], strict=False):
            if a is None:
                seen_none = True
            if seen_none:
                assert b is None
            elif b is not None:
                assert b >= a
        assert any(c is None for c in costs) == (m in ("qwen3-4b", "qwen3-8b"))  # 32 cards: the date binds these


def brute_least_loss(table: dict[tuple[str, float], tuple[int, float | None]],
                     budget: float | None) -> tuple[str, float, float]:
    best = None
    for (m, t), (n, cost) in table.items():
        if cost is None or (budget is not None and cost > budget):
            continue
        cand = (chinchilla(n, t), m, t)
        best = cand if best is None or cand < best else best
    assert best is not None
    return best[1], best[2], best[0]


@pytest.mark.parametrize("budget", [None, 2000.0, 6000.0])
def test_least_loss_equals_brute_force(scenario_file: Path, table: dict, budget: float | None) -> None:
    args = () if budget is None else ("--max-cost", f"{budget:g}")
    out = inverse_json(scenario_file, *args)
    model, tokens, expected_loss = brute_least_loss(table, budget)
    chosen = out["chosen"]
    assert (chosen["model"], chosen["tokens"]) == (model, tokens)
    assert chosen["loss"] == pytest.approx(expected_loss, rel=1e-12)
    assert chosen["cost"] == pytest.approx(table[model, tokens][1], rel=1e-9)
    nxt = [t for t in GRID if t > tokens]
    if budget is not None and nxt and table[model, nxt[0]][1] is not None:
        assert chosen["binds"] == "budget"  # the next token step is on time but over the budget
    elif nxt:
        assert chosen["binds"] == "date"
    assert out["solves"] < len(SIZES) * len(GRID)  # bisection and the loss bound skip candidates
    if budget is None:  # the date alone binds: the 8B model cannot train past 80B tokens, a 4B model wins
        assert (chosen["model"], chosen["binds"]) == ("qwen3-4b", "date")


def chinchilla_tokens(n: float, target: float) -> float | None:
    """The fewest whole tokens reaching ``target`` at N: Hoffmann eq. 10 solved for D,
    D = (410.7 / (target - 1.69 - 406.4 / N^0.34))^(1 / 0.28), rounded up (None: N alone cannot reach it)."""
    room = target - 1.69 - 406.4 / n ** 0.34
    return None if room <= 0 else float(math.ceil((410.7 / room) ** (1 / 0.28)))


_CHEAPEST: dict[tuple[str, str, float, str], tuple[int, float | None]] = {}


def cheapest_at(path: Path, model: str, tokens: float, deadline: str = "30d") -> tuple[int, float | None]:
    """:func:`cheapest`, each (model, tokens, deadline) evaluated once per test session."""
    key = (str(path), model, tokens, deadline)
    if key not in _CHEAPEST:
        _CHEAPEST[key] = cheapest(path, model, tokens, deadline)
    return _CHEAPEST[key]


def test_least_cost_for_a_target_equals_brute_force(scenario_file: Path, table: dict) -> None:
    """Each size trains on exactly the tokens the target needs (the formula solved for D, not the grid value
    above it); its cost is every plan evaluated at those tokens; the least wins."""
    target = 2.45
    out = inverse_json(scenario_file, "--target-loss", str(target))
    reach = {}
    for m, t in fewest_reaching(table, target).items():
        cost = cheapest_at(scenario_file, m, t)[1]
        if cost is not None:
            reach[m] = (t, cost)
    best = min(reach, key=lambda m: reach[m][1])
    assert out["chosen"]["model"] == best
    assert out["chosen"]["tokens"] == pytest.approx(reach[best][0], abs=1.0)
    assert out["chosen"]["cost"] == pytest.approx(reach[best][1], rel=1e-9)
    assert out["chosen"]["loss"] <= target and out["chosen"]["binds"] == "target loss"
    assert out["chosen"]["loss"] == pytest.approx(target, abs=1e-9)  # exactly the tokens needed, no grid rounding


def test_printed_loss_and_extrapolation_flag(scenario_file: Path) -> None:
    """Llama 3 70B at 1.4T tokens (a deadline long enough): the printed loss is the formula's at its exact N;
    N is above the fit's 16B, so the line says extrapolated; Qwen3-4B at 40B tokens lies inside."""
    p = tpopt("inverse", "--scenario", str(scenario_file), "--models", "llama3-70b", "--tokens", "1.4T",
              "--deadline", "2000d", "--max-cards", "512")
    assert p.returncode == 0, p.stderr
    n = param_count(load_scenario(scenario_file, {"model.name": "llama3-70b"}).model)
    assert f"predicted loss {chinchilla(n, 1.4e12):.4f} (chinchilla, extrapolated: N = " in " ".join(p.stdout.split())
    inside = inverse_json(scenario_file, "--max-cost", "2000")
    assert inside["chosen"]["extrapolated"] == []


def test_data_limit_binds(scenario_file: Path) -> None:
    out = inverse_json(scenario_file, "--unique-tokens", "40B")
    assert out["chosen"]["tokens"] == 40e9 and out["chosen"]["binds"] == "data"
    two = inverse_json(scenario_file, "--unique-tokens", "40B", "--max-epochs", "2")
    assert two["chosen"]["tokens"] == 80e9
    n = two["chosen"]["params"]
    assert two["chosen"]["loss"] == pytest.approx(chinchilla(n, 40e9 + 40e9 * 15.4 * (1 - math.exp(-1 / 15.4))))
    between = inverse_json(scenario_file, "--unique-tokens", "50B", "--max-epochs", "2")  # 100B: not on the grid
    assert (between["chosen"]["tokens"], between["chosen"]["binds"]) == (100e9, "data")


def test_user_fit_from_catalog(scenario_file: Path, tmp_path: Path) -> None:
    (tmp_path / "scaling.toml").write_text(
        '[law.mine]\nE = 2.0\nA = 400.0\nB = 400.0\nalpha = 0.3\nbeta = 0.3\nmin_params = 1e8\nmax_params = 1e10\n'
        'min_tokens = 1e9\nmax_tokens = 1e12\nsource = "our own runs, 2026"\n')
    out = inverse_json(scenario_file, "--catalog", str(tmp_path), "--law", "mine", "--max-cost", "2000")
    n, t = out["chosen"]["params"], out["chosen"]["tokens"]
    assert out["chosen"]["loss"] == pytest.approx(2.0 + 400 / n ** 0.3 + 400 / t ** 0.3, rel=1e-12)
    assert out["law"]["source"] == "our own runs, 2026"


@pytest.mark.parametrize(("args", "words"), [
    (("--law", "nope"), "unknown scaling law 'nope'"),
    (("--tokens", "5T:1T"), "LO must be at most HI"),
    (("--models", "qwen9-1b"), "qwen9-1b"),
    (("--objective", "time"), "--objective must be cost"),
    (("--target-loss", "-1"), "--target-loss"),
])
def test_bad_input_is_one_line(args: tuple[str, ...], words: str) -> None:
    p = tpopt("inverse", *args)
    assert p.returncode == 2
    assert words in p.stderr and len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr


def test_bad_user_fit_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "scaling.toml").write_text("[law.x]\nE = 1.0\n")
    p = tpopt("inverse", "--catalog", str(tmp_path), "--law", "x")
    assert p.returncode == 2 and "missing required key" in p.stderr and len(p.stderr.strip().splitlines()) == 1


QWEN3 = ("qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-8b", "qwen3-14b", "qwen3-32b")


@pytest.mark.parametrize("budget", ["3000", "300000"])
def test_budget_alone_matches_the_closed_form_allocation(scenario_file: Path, budget: str) -> None:
    """The budget alone binding (a deadline far away), Chinchilla's fit: the chosen size is one of the two listed
    sizes around the closed-form compute-optimal N for the compute spent, C = 6 N D (Hoffmann et al. 2022,
    eq. 4: N_opt = G (C/6)^(beta/(alpha+beta)), G = (alpha A / (beta B))^(1/(alpha+beta)))."""
    p = tpopt("inverse", "--scenario", str(scenario_file), "--deadline", "100000d", "--reserved", "0d",
              "--models", "qwen3", "--tokens", "1B:100T:100", "--max-cost", budget, "--json")
    assert p.returncode == 0, p.stderr
    c = json.loads(p.stdout)["chosen"]
    assert c["binds"] == "budget"
    alpha, beta, a, b = 0.34, 0.28, 406.4, 410.7
    g = (alpha * a / (beta * b)) ** (1 / (alpha + beta))
    n_opt = g * (6 * c["params"] * c["tokens"] / 6) ** (beta / (alpha + beta))
    cat = load_catalog()
    sizes = [param_count(cat.model(m)) for m in QWEN3]
    below = max((n for n in sizes if n <= n_opt), default=0)
    above = min((n for n in sizes if n >= n_opt), default=math.inf)
    assert below <= c["params"] <= above, (c["model"], n_opt)
    # tokens continuous (the range refined to 0.5 %): D is the most the budget buys at that N, to 0.5 % (the
    # grid's spacing was (1e5)^(1/99) - 1 = 12.3 %); the brute force prices the bracket's two ends
    lo, hi = c["tokens_bracket"]
    assert lo == c["tokens"] and hi <= lo * 1.005
    assert cheapest(scenario_file, c["model"], lo, "100000d", "0d")[1] == pytest.approx(c["cost"], rel=1e-9)
    over = cheapest(scenario_file, c["model"], hi, "100000d", "0d")[1]
    assert over is not None and over > float(budget) >= c["cost"]


def test_inference_tokens_flip_the_choice_where_the_totals_cross(scenario_file: Path, table: dict) -> None:
    """Sardana et al. 2024: total = training + 2 N T FLOPs x price. Two sizes reaching loss 2.45 at their fewest
    tokens, training costs from the brute force: the smaller (trained longer) costs more to train, less to
    serve; the totals cross at T* = (C_small - C_large) / (2 (N_large - N_small) p). Below T* the larger wins,
    above it the smaller."""
    sizes, target = ("qwen3-0.6b", "qwen3-1.7b"), 2.45
    need = {}
    for m, t in fewest_reaching(table, target).items():
        if m in sizes:
            need[m] = (table[m, GRID[0]][0], t, cheapest_at(scenario_file, m, t)[1])
    (n_s, _, c_s), (n_l, _, c_l) = need["qwen3-0.6b"], need["qwen3-1.7b"]
    assert c_s is not None and c_l is not None and c_s > c_l  # the larger size trains cheaper for this loss
    price = 0.59 / (165.2e12 * 0.3 * 3600) * 1e15  # rtx4090 0.59 USD/h, 165.2 TFLOP/s, serving MFU 0.3 (default)
    crossing = (c_s - c_l) / (2 * (n_l - n_s) * price / 1e15)

    def run(t: float) -> dict:
        p = tpopt("inverse", "--scenario", str(scenario_file), "--models", ",".join(sizes), "--tokens",
                  ",".join(f"{x:.0f}" for x in GRID), "--target-loss", str(target), "--inference-tokens", f"{t:.0f}",
                  "--json")
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)

    below, above = run(crossing * 0.95), run(crossing * 1.05)
    assert below["serving"]["usd_per_pflop"] == pytest.approx(price, rel=1e-12)
    assert below["chosen"]["model"] == "qwen3-1.7b" and above["chosen"]["model"] == "qwen3-0.6b"
    for out, t in ((below, crossing * 0.95), (above, crossing * 1.05)):
        n = out["chosen"]["params"]
        assert out["chosen"]["serve_cost"] == pytest.approx(2 * n * round(t) * price / 1e15, rel=1e-9)
        assert out["chosen"]["total_cost"] == pytest.approx(out["chosen"]["cost"] + out["chosen"]["serve_cost"])
    p = tpopt("inverse", "--scenario", str(scenario_file), "--models", ",".join(sizes), "--tokens", "10B,20B",
              "--inference-tokens", "1T", "--serving-price", "0.01", "--max-cost", "1")
    assert "training + serving" in p.stdout and "0.01 USD per 1e15 FLOP (stated" in p.stdout


def fewest_reaching(table: dict, target: float) -> dict[str, float]:
    """Each size's fewest tokens whose Chinchilla loss is at most ``target`` (:func:`chinchilla_tokens`), at least
    the grid's least; sizes needing more than the grid's most are left out."""
    out = {}
    for m in SIZES:
        t = chinchilla_tokens(table[m, GRID[0]][0], target)
        if t is not None and t <= GRID[-1]:
            out[m] = max(t, GRID[0])
    return out


def test_unreachable_target_names_the_smallest_budget_and_the_loss_within_reach(scenario_file: Path,
                                                                                 table: dict) -> None:
    """Loss 2.3 under 1,500 USD: no size reaches it. The smallest budget that does is the least brute-force cost
    over the sizes at their fewest tokens reaching 2.3; the loss within reach is the brute-force least loss
    under 1,500 USD."""
    out = inverse_json(scenario_file, "--target-loss", "2.3", "--max-cost", "1500")
    assert out["chosen"] is None
    at = {m: cheapest_at(scenario_file, m, t)[1] for m, t in fewest_reaching(table, 2.3).items()}
    costs = {m: c for m, c in at.items() if c is not None}
    least = min(costs, key=lambda m: costs[m])
    assert costs[least] > 1500
    u = out["unreachable"]
    assert u["min_budget"] == pytest.approx(costs[least], rel=1e-9) and u["at_min_budget"]["model"] == least
    model, tokens, expected = brute_least_loss(table, 1500.0)
    assert (u["reachable"]["model"], u["reachable"]["tokens"]) == (model, tokens)
    assert u["reachable"]["loss"] == pytest.approx(expected, rel=1e-12)
    p = tpopt("inverse", "--scenario", str(scenario_file), "--models", ",".join(SIZES), "--tokens",
              ",".join(f"{t:.0f}" for t in GRID), "--target-loss", "2.3", "--max-cost", "1500")
    assert p.returncode == 3 and f"Smallest budget reaching it by the deadline: {costs[least]:,.0f}" in p.stdout


def test_unreachable_target_names_the_shortest_deadline(scenario_file: Path, table: dict) -> None:
    """Loss 2.18 by 30 days: no size gets there. At the deadline the tool names, some size's fewest tokens
    reaching 2.18 has an on-time plan (every plan evaluated here); 0.1 day earlier none has."""
    out = inverse_json(scenario_file, "--target-loss", "2.18")
    days = out["unreachable"]["min_deadline_days"]
    assert out["chosen"] is None and days is not None and days > 30
    need = fewest_reaching(table, 2.18)

    def on_time(d: float) -> list[str]:
        return [m for m, t in need.items() if cheapest(scenario_file, m, t, f"{d * 86400:.0f}s")[1] is not None]

    assert out["unreachable"]["at_min_deadline"]["model"] in on_time(days)
    assert on_time(days - 0.1) == []
    model, tokens, _ = brute_least_loss(table, None)
    assert (out["unreachable"]["reachable"]["model"], out["unreachable"]["reachable"]["tokens"]) == (model, tokens)


def test_loss_fronts_equal_the_brute_force(scenario_file: Path, table: dict, tmp_path: Path) -> None:
    """--front: at each budget the least loss is the brute force's under that budget; the budgets run from the
    cheapest candidate (least cost at the grid's fewest tokens) to the best loss's cost with no budget. Against
    the deadline, each point is the brute force's least loss with every plan evaluated at that deadline."""
    png = tmp_path / "front.png"
    out = inverse_json(scenario_file, "--front", "--plot", str(png))
    cost_front, date_front = out["front"]["cost"], out["front"]["date"]
    floor = min(c for (m, t), (_, c) in table.items() if t == GRID[0] and c is not None)
    top_model, top_tokens, _ = brute_least_loss(table, None)
    assert cost_front[0]["at"] == pytest.approx(floor, rel=1e-9)
    assert cost_front[-1]["at"] == pytest.approx(table[top_model, top_tokens][1], rel=1e-9) and len(cost_front) == 8
    for p in cost_front:
        model, tokens, expected = brute_least_loss(table, p["at"] * (1 + 1e-12))
        assert (p["model"], p["tokens"]) == (model, tokens) and p["loss"] == pytest.approx(expected, rel=1e-12)
    losses = [p["loss"] for p in cost_front]
    assert losses == sorted(losses, reverse=True)  # more budget never predicts a worse loss
    assert [p["at"] for p in date_front] == pytest.approx([7.5, 15.0, 30.0, 60.0, 120.0])
    for p in date_front:
        if p["at"] in (15.0, 60.0):
            at = {(m, t): cheapest(scenario_file, m, t, f"{p['at']:g}d") for m in SIZES for t in GRID}
            model, tokens, expected = brute_least_loss(at, None)
            assert (p["model"], p["tokens"]) == (model, tokens) and p["loss"] == pytest.approx(expected, rel=1e-12)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(("args", "words"), [
    (("--serving-price", "0.01"), "--serving-price needs --inference-tokens"),
    (("--inference-tokens", "1T", "--serving-mfu", "1.5"), "at most 1"),
    (("--inference-tokens", "-1T"), "--inference-tokens"),
    (("--plot", "front.txt"), "must end in .pdf, .svg or .png"),
])
def test_bad_serving_and_plot_input_is_one_line(args: tuple[str, ...], words: str) -> None:
    p = tpopt("inverse", *args)
    assert p.returncode == 2, p.stdout[-500:]
    assert words in p.stderr and len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr


def test_least_cost_with_limited_data_repeats_exactly_what_the_target_needs(scenario_file: Path) -> None:
    """Qwen3-0.6B, loss 2.5, 20B unique tokens, up to 4 epochs: eq. 10 solved for D gives the effective data
    D' the target needs (above U, so repeats); Muennighoff et al. 2023's D' = U + U R* (1 - exp(-R / R*)) solved
    for R gives R = -R* ln(1 - (D'/U - 1) / R*), the tokens D = U (1 + R), rounded up. With 1 epoch only the
    data binds."""
    n, unique, decay = 596_049_920, 20e9, 15.4
    d_eff = (410.7 / (2.5 - 1.69 - 406.4 / n ** 0.34)) ** (1 / 0.28)
    assert unique < d_eff < 4 * unique
    repeats = -decay * math.log(1 - (d_eff / unique - 1) / decay)
    tokens = unique * (1 + repeats)
    assert tokens > d_eff  # a repeated token is worth less than a fresh one
    out = inverse_json(scenario_file, "--models", "qwen3-0.6b", "--target-loss", "2.5", "--unique-tokens", "20B",
                       "--max-epochs", "4")
    c = out["chosen"]
    assert c["tokens"] == pytest.approx(math.ceil(tokens), abs=1.0)
    assert c["effective_tokens"] == pytest.approx(d_eff, rel=1e-6)
    assert c["loss"] == pytest.approx(2.5, abs=1e-9) and c["loss"] <= 2.5
    out = inverse_json(scenario_file, "--models", "qwen3-0.6b", "--target-loss", "2.5", "--unique-tokens", "20B")
    assert out["chosen"] is None and out["candidates"][0]["binds"] == "data"


@pytest.mark.parametrize("budget", ["3000", "300000"])
def test_budget_alone_with_generated_sizes_near_the_closed_form_frontier(scenario_file: Path, budget: str) -> None:
    """The budget alone binding, the Qwen3 rule's generated sizes offered too (18 sizes from 0.3B to 40B): the
    answer is no worse than the listed sizes' alone (they are a subset), and the chosen (N, D) lies within 0.1 %
    of the least loss the closed form allows for the compute it buys, C = 6 N D: L(N_opt, C / (6 N_opt)) with
    N_opt = G (C/6)^(beta/(alpha+beta)), G = (alpha A / (beta B))^(1/(alpha+beta)) (Hoffmann et al. 2022, eq. 4).
    (Which size is cheapest per FLOP differs with the plan, so the budget does not buy one fixed compute and the
    chosen N need not bracket N_opt as finely as the sizes are spaced.)"""
    def ask(*extra: str) -> dict:
        p = tpopt("inverse", "--scenario", str(scenario_file), "--deadline", "100000d", "--reserved", "0d",
                  "--models", "qwen3", "--tokens", "1B:100T:100", "--max-cost", budget, "--json", *extra)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)

    out, listed = ask("--generated", "0.3B:40B:16"), ask()
    c = out["chosen"]
    assert c["binds"] == "budget" and len(out["candidates"]) == 18
    assert c["loss"] <= listed["chosen"]["loss"]
    alpha, beta, a, b = 0.34, 0.28, 406.4, 410.7
    g = (alpha * a / (beta * b)) ** (1 / (alpha + beta))
    n_opt = g * (c["params"] * c["tokens"]) ** (beta / (alpha + beta))
    least = chinchilla(n_opt, c["params"] * c["tokens"] / n_opt)
    assert least <= c["loss"] <= least * 1.001, (c["model"], n_opt)
