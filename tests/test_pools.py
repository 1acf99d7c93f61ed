"""Mixed plans over accelerator pools (issue 40, form (a)): the decision against a brute-force enumeration
written here, the balance rule by hand, homogeneous scenarios untouched, bad pool input in one line."""

from __future__ import annotations

import itertools
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpopt.catalogs.scenario import load_scenario
from tpopt.errors import InputError
from tpopt.models import families as F
from tpopt.models import pools as PM
from tpopt.models import terms as T
from tpopt.models.arch import param_count
from tpopt.models.evaluate import evaluate_arrays
from tpopt.models.units import DAY, HOUR
from tpopt.optimizer import pools as OP

ROOT = Path(__file__).resolve().parents[1]


def _raw(deadline: str, a100_price: float = 1.8, h100_owned: bool = True) -> dict:
    """Two small pools (16 H100, 16 A100: two 8-card hosts each), a 0.6B model, 32 sequences a step."""
    h100 = {"accelerator": "h100-sxm", "max_cards": 16, "owned": True} if h100_owned else \
        {"accelerator": "h100-sxm", "max_cards": 16, "card_hour": 3.0}
    return {"model": {"name": "qwen3-0.6b"},
            "task": {"tokens": "200B", "seq_len": 4096, "global_batch": 32, "precision": "bf16-mixed"},
            "schedule": {"deadline": deadline, "reserved": "0d"},
            "hardware": {"efficiency": 0.4, "pools": [h100, {"accelerator": "a100-80gb-sxm", "max_cards": 16,
                                                            "card_hour": a100_price}]},
            "checkpoint": {"write_bandwidth": "7GB/s", "restore": "120s",
                           "job_mtbf": {"cards": 1024, "interval": "7.9h"}},
            "search": {"zero_stage": [1], "tp": [1, 2], "pp": [1, 2], "micro_batch": [1, 2],
                       "recompute": ["none"], "save_interval": ["auto"]}}


def _value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return json.dumps(v)


def _toml(raw: dict) -> str:
    """The tables as a TOML file (the pools as [[hardware.pools]])."""
    out = []
    for table, body in raw.items():
        out.append(f"[{table}]")
        out += [f"{k} = {_value(v)}" for k, v in body.items() if k != "pools"]
        for pool in body.get("pools", []):
            out.append(f"[[{table}.pools]]")
            out += [f"{k} = {_value(v)}" for k, v in pool.items()]
    return "\n".join(out) + "\n"


def brute_force(sc, objective: str = "cost") -> tuple[float, float] | None:
    """Every (layout, DP) of each pool (the pool's own cards, whole hosts) at every integer split of the batch,
    each group evaluated alone through evaluate_arrays at its share, the job written out
    (:func:`brute_force_k`, the enumeration over any number of pools, here two). (cost, finish) of the best."""
    return brute_force_k(sc, objective)


@pytest.mark.parametrize("deadline, price, owned, objective", [
    ("40d", 1.8, True, "cost"),   # loose: the owned pool alone, free
    ("1.75d", 1.8, True, "cost"),    # tight: the owned pool needs rented help
    ("1.75d", 0.2, False, "cost"),   # both rented, A100 cheap
    ("1.75d", 1.8, True, "finish"),  # the fastest plan
    ("0.5d", 1.8, True, "cost"),  # too tight for any plan
])
def test_mixed_solve_equals_brute_force(deadline, price, owned, objective):
    sc = load_scenario(_raw(deadline, price, owned))
    ps = OP.solve_pools(sc, objective)
    want = brute_force(sc, objective)
    if want is None:
        assert ps.best is None
        return
    assert ps.best is not None
    assert math.isclose(ps.best.cost, want[0], rel_tol=1e-9, abs_tol=1e-9)
    assert math.isclose(ps.best.finish_s, want[1], rel_tol=1e-9)


def test_the_tight_deadline_needs_both_pools():
    """At 1.75 days the 16 owned H100 alone miss the deadline: the cheapest plan rents A100 beside them, and the
    group shares sum to the batch."""
    sc = load_scenario(_raw("1.75d"))
    ps = OP.solve_pools(sc)
    assert ps.alone[0] is None and ps.best is ps.mixed and ps.best is not None
    assert sum(ps.best.shares) == 32 and all(s > 0 for s in ps.best.shares)
    assert ps.fastest[0] is not None and ps.fastest[0].finish_s > 1.75 * DAY
    assert any("mixed wins against h100-sxm (owned) alone" in line for line in OP.verdict(ps))


def test_balance_rule_by_hand():
    """t_1(b) = 2 + 0.5 b, t_2(b) = 1 + 1.0 b, B = 30: both finish together when 2 + 0.5 b = 1 + (30 - b),
    i.e. 1.5 b = 29, b = 19.333...; then each group takes 2 + 9.667 = 11.667 s. The integer splits 19/11 and
    20/10 both give a 12 s step (max(11.5, 12) and max(12, 11)), better than 18/12 (13 s) or 21/9 (12.5 s)."""
    b = PM.balanced_share((2.0, 1.0), (0.5, 1.0), 30)
    assert math.isclose(b, 29 / 1.5)
    assert math.isclose(2 + 0.5 * b, 1 + 1.0 * (30 - b))
    steps = {k: max(2 + 0.5 * k, 1 + 1.0 * (30 - k)) for k in range(31)}
    assert min(steps.values()) == 12.0 and {k for k, v in steps.items() if v == 12.0} == {19, 20}
    assert PM.balanced_share((100.0, 0.0), (1.0, 1.0), 30) == 0.0  # a slow fixed cost: all to group 2


def test_cross_pool_and_failure_relations_by_hand():
    """Two pools, G = 141.2 GB of BF16 gradients (70.6B params x 2 B): the ring moves 2 (2 - 1) / 2 x G = G
    across; 12 hosts of the smaller pool at 200 GB/s (8 x 25 GB/s NICs) against 64 hosts at 400 GB/s: the
    slower per-host bandwidth, 12 x 200e9 = 2.4e12 B/s, so 141.2e9 / 2.4e12 = 0.0588 s. Failure rates add."""
    g = 70.6e9 * 2
    assert PM.cross_pool_bytes(g, 2) == g and PM.cross_pool_bytes(g, 1) == 0.0
    assert math.isclose(PM.cross_pool_s(g, (64, 12), (400e9, 200e9)), g / 2.4e12)
    assert PM.cross_pool_s(g, (64,), (400e9,)) == 0.0
    assert PM.mixed_step_s((15.9, 11.3), 0.06) == pytest.approx(15.96)
    assert PM.idle_s((15.9, 11.3)) == pytest.approx([0.0, 4.6])
    assert PM.mixed_failure_rate((1e-5, 2e-5)) == pytest.approx(3e-5)
    assert PM.mixed_failure_rate((1e-5, 2e-5), 1e-6) == pytest.approx(3.1e-5)


def test_the_job_failure_rate_is_the_summed_cards_rate():
    """The report's mixed rate (sum of the pools' card rates + job events once) is the rate of all the cards:
    Meta's 1,024-card jobs, one interruption per 7.9 h, so n cards fail n / 1024 / 7.9 per hour."""
    sc = load_scenario(_raw("1.75d"))
    ps = OP.solve_pools(sc)
    assert ps.best is not None
    e = OP.pick_entry(ps, ps.best, sc)
    n = sum(ps.best.cards)
    assert e["failure_rate_per_h"] == pytest.approx(n / 1024 / 7.9, rel=1e-9)
    assert sum(g["failure_rate_per_h"] for g in e["pools"]) == pytest.approx(e["failure_rate_per_h"])
    assert PM.pool_cost(96, 1.8, 2 * HOUR) == pytest.approx(96 * 1.8 * 2)


def test_homogeneous_scenario_has_no_pools():
    """No [[hardware.pools]]: the scenario carries none and its repr (sweep fingerprints) is unchanged."""
    sc = load_scenario(ROOT / "examples" / "design-case.toml")
    assert sc.pools == () and "pools" not in repr(sc)


@pytest.mark.parametrize("pool, words", [
    ({"accelerator": "a100-80gb-sxm"}, "max_cards"),
    ({"accelerator": "a100-80gb-sxm", "max_cards": 8, "card_hour": -1.0}, "card_hour"),
    ({"accelerator": "a100-80gb-sxm", "max_cards": 8, "price": 1.0}, "unknown key"),
    ({"accelerator": "a100-80gb-sxm", "max_cards": 8, "owned": "yes"}, "owned"),
])
def test_bad_pool_is_one_line(tmp_path, capsys, monkeypatch, pool, words):
    raw = _raw("1.75d")
    raw["hardware"]["pools"] = [raw["hardware"]["pools"][0], pool]
    with pytest.raises(InputError, match=words):
        load_scenario(raw)
    p = tmp_path / "s.toml"
    p.write_text(_toml(raw))
    from tpopt.cli.main import main
    monkeypatch.setattr(sys, "argv", ["tpopt", "solve", "--scenario", str(p)])
    with pytest.raises(SystemExit) as exc:
        main()
    err = capsys.readouterr().err
    assert exc.value.code != 0 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


def test_three_pools_are_planned():
    """A third pool is no longer refused (the search runs over k pools): the best plan's shares sum to the
    batch and every pool it uses holds cards."""
    raw = _raw("1.75d")
    raw["hardware"]["pools"].append({"accelerator": "b200", "max_cards": 8, "card_hour": 5.0})
    ps = OP.solve_pools(load_scenario(raw))
    assert ps.best is not None and sum(ps.best.shares) == 32 and len(ps.best.cards) == 3
    assert all((s > 0) == (c > 0) for s, c in zip(ps.best.shares, ps.best.cards, strict=True))


def test_kept_layouts_are_undominated():
    """Dropping a row that another row with the same cards matches at every share loses no optimum."""
    cards = np.array([8, 8, 8, 16])
    steps = np.array([[1.0, 2.0], [1.0, 3.0], [0.5, np.inf], [np.inf, np.inf]])
    assert OP.undominated(cards, steps) == [0, 2]


@pytest.mark.parametrize("argv", [["evaluate", "--cards", "16"], ["sweep", "--deadline", "1d:2d:1d"], ["explain"]])
def test_commands_that_do_not_plan_pools_say_so(tmp_path, capsys, monkeypatch, argv):
    """Only solve plans [[hardware.pools]]; every other command refuses the pools in one line (exit 2)."""
    p = tmp_path / "s.toml"
    p.write_text(_toml(_raw("1.75d")))
    from tpopt.cli.main import main
    monkeypatch.setattr(sys, "argv", ["tpopt", argv[0], "--scenario", str(p), *argv[1:]])
    with pytest.raises(SystemExit) as exc:
        main()
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "[[hardware.pools]]" in err and len(err.strip().splitlines()) == 1, err


def test_solve_prints_the_pools_report(tmp_path, capsys, monkeypatch):
    """`tpopt solve` on pools: the per-pool layout, share, idle time, the cross-pool all-reduce and the
    comparison with each pool alone; --json carries the same figures."""
    p = tmp_path / "s.toml"
    p.write_text(_toml(_raw("1.75d")))
    from tpopt.cli.main import main
    monkeypatch.setattr(sys, "argv", ["tpopt", "solve", "--scenario", str(p)])
    with pytest.raises(SystemExit) as exc:
        main()
    out = capsys.readouterr().out
    assert not exc.value.code
    assert "share" in out and "idle" in out and "cross-pool all-reduce" in out
    assert "mixed wins against h100-sxm (owned) alone" in out
    monkeypatch.setattr(sys, "argv", ["tpopt", "solve", "--scenario", str(p), "--json"])
    with pytest.raises(SystemExit):
        main()
    d = json.loads(capsys.readouterr().out)
    assert d["status"] == "optimal" and sum(g["share"] for g in d["best"]["pools"]) == 32
    assert d["alone"]["h100-sxm (owned)"] is None
    assert all(0 < g["memory_per_card_gib"] <= g["usable_gib"] for g in d["best"]["pools"])


def _a100_cards(raw: dict, cards: int) -> dict:
    raw["hardware"]["pools"][1]["max_cards"] = cards
    return raw


def test_pool_availability_relaxation_is_the_smallest_cap():
    """At 1.75 days the 16 owned H100 miss the deadline and 2 rented A100 are too few: the relaxation names the
    A100 cap that makes the question feasible, and re-solving there finds a plan while one card fewer finds
    none (the threshold derived by the re-solve one step below, as test_explain_chain does)."""
    sc = load_scenario(_a100_cards(_raw("1.75d"), 2))
    ps = OP.solve_pools(sc)
    assert ps.best is None
    [rel] = ps.relaxations  # the owned pool is not relaxed
    assert rel["parameter"] == "pool availability" and rel["helps"] and rel["current"] == 2
    need = rel["required"]
    at = OP.solve_pools(OP.with_pool_cards(sc, 1, need), relax=False)
    below = OP.solve_pools(OP.with_pool_cards(sc, 1, need - 1), relax=False)
    assert at.best is not None and below.best is None
    assert at.best.cards[1] <= need and math.isclose(at.best.cost, rel["cost"])
    text = OP.pools_text(ps, sc)
    assert f"pool availability  now 2 cards (a100-80gb-sxm, rented): >= {need:,} cards" in text


def test_pool_availability_cannot_help_past_the_useful_cards():
    """At half a day no A100 count helps: even B x TP x PP = 32 x 2 x 2 = 128 A100 (every layout a group can
    take) beside the 16 H100 miss the deadline, so the relaxation says it cannot help."""
    sc = load_scenario(_raw("0.5d"))
    assert OP.useful_pool_cards(sc) == 32 * 2 * 2
    assert OP.solve_pools(OP.with_pool_cards(sc, 1, 128), relax=False).best is None
    ps = OP.solve_pools(sc)
    assert ps.best is None and not ps.relaxations[0]["helps"] and "cannot help" in OP.pools_text(ps, sc)


def test_export_refuses_pools_naming_the_frameworks(tmp_path, capsys, monkeypatch):
    """No export format runs several accelerator types in one job: one line naming them all (exit 2)."""
    p = tmp_path / "s.toml"
    p.write_text(_toml(_raw("1.75d")))
    from tpopt.cli.main import main
    from tpopt.frameworks import FORMATS
    monkeypatch.setattr(sys, "argv", ["tpopt", "export", "--format", "megatron", "--scenario", str(p)])
    with pytest.raises(SystemExit) as exc:
        main()
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and len(err.splitlines()) == 1, err
    assert "mixed plan over accelerator pools" in err and all(f in err for f in FORMATS)


# ---------------------------------------------------------------------------------------------
# k pools: the search against an enumeration of every share tuple and every layout of every pool

GROUPS_K: dict[tuple[str, int, int], dict[int, list[tuple[int, int, float]]]] = {}


def _raw3(deadline: str, prices: tuple[float, float, float], owned: tuple[bool, bool, bool]) -> dict:
    """Three one-host pools (8 H100, 8 A100, 8 B200), the 0.6B model, 16 sequences a step."""
    raw = _raw(deadline)
    raw["task"]["global_batch"] = 16
    raw["hardware"]["pools"] = [
        {"accelerator": acc, "max_cards": 8, **({"owned": True} if own else {}),
         **({"card_hour": price} if (price or not own) else {})}
        for acc, price, own in zip(("h100-sxm", "a100-80gb-sxm", "b200"), prices, owned, strict=True)]
    return raw


def _groups(sc, pool) -> dict[int, list[tuple[int, int, float]]]:
    """share -> every (cards, hosts, step) of the pool's layouts (TP, PP, micro-batch, DP within its cards)
    that meet every per-pool family at that share, each evaluated alone through evaluate_arrays with the
    card's catalog NICs per host (the [search] lists state none: the homogeneous space's rule)."""
    B = sc.task.global_batch
    key = (pool.accelerator, pool.max_cards, B)
    if key in GROUPS_K:
        return GROUPS_K[key]
    psc = OP.pool_scenario(sc, pool)
    acc = psc.system(pool.accelerator).acc
    groups = GROUPS_K.setdefault(key, {})
    se = sc.search
    for b in range(1, B + 1):
        bsc = replace(psc, task=replace(psc.task, global_batch=b))
        for tp, pp, mb in itertools.product(se.tp, se.pp, se.micro_batch):
            for dp in range(1, pool.max_cards // (tp * pp) + 1):
                r = evaluate_arrays(bsc, pool.accelerator, tp=tp, pp=pp, dp=dp, micro_batch=mb, zero_stage=1,
                                    recompute="none", save_interval_s=1800.0, nics_per_host=acc.nics_per_host)
                if all(float(r[("c", n)][0]) <= float(r[("c", n)][1]) for n in OP.POOL_FAMILIES):
                    groups.setdefault(b, []).append((tp * pp * dp, math.ceil(tp * pp * dp / acc.cards_per_host),
                                                     float(r["step_s"])))
    return groups


def brute_force_k(sc, objective: str = "cost", mixed_only: bool = False) -> tuple[float, float] | None:  # noqa: C901
    """Every tuple of shares summing to the batch (0: the pool left out) and every layout of each pool at its
    share; the job written out here: step = slowest group + 2 (P - 1) / P x G / (fewest hosts x slowest
    per-host NIC bandwidth) over the P pools used, finish = reserved + iterations x step x (1 + overhead at
    the summed cards, auto save interval), cost = sum of cards x price x finish. (cost, finish) of the best."""
    B, k = sc.task.global_batch, len(sc.pools)
    per_pool = [_groups(sc, p) for p in sc.pools]
    bws = []
    for p in sc.pools:
        acc = OP.pool_scenario(sc, p).system(p.accelerator).acc
        bws.append(acc.nic_bw * acc.nics_per_host)
    grad = param_count(sc.model) * sc.state_recipe().grads
    best = None
    for shares in itertools.product(range(B + 1), repeat=k):
        if sum(shares) != B:
            continue
        used = [g for g in range(k) if shares[g]]
        if mixed_only and len(used) < 2:
            continue
        options = [per_pool[g].get(shares[g], []) for g in used]
        for combo in itertools.product(*options):
            step = max(c[2] for c in combo)
            if len(used) > 1:
                p = len(used)
                step += 2 * (p - 1) / p * grad / (min(c[1] for c in combo) * min(bws[g] for g in used))
            # the input workers: workers per host x hosts x sequences per worker-second, summed over the pools
            supply = sum(sc.input.workers_per_host * c[1] * sc.input.per_worker_rate for c in combo) \
                if sc.input.workers_per_host > 0 else math.inf
            if B / step > supply:
                continue
            rate = sum(c[0] * sc.pools[g].price_card_hour for c, g in zip(combo, used, strict=True))
            key = _written_job(sc, sum(c[0] for c in combo), step, rate, objective, sc.pools[used[0]])
            if key is not None and (best is None or key < best):
                best = key
    return _as_cost_finish(best, objective)


def _written_job(sc, cards: int, step: float, rate: float, objective: str, pool) -> tuple[float, float] | None:
    """The job written out: finish = reserved + iterations x step x (1 + overhead at ``cards``, auto save
    interval), cost = ``rate`` (USD per hour) x finish; None past the deadline (under a confidence its
    quantile at ``pool``'s sigma, every card's the same where used). The key ordered by the objective."""
    tau = T.optimal_save_interval(sc, cards, "sync")
    finish = float(sc.task.reserved_s + T.iteration_count(sc) * step * (1 + T.overhead(sc, "sync", cards, tau)))
    cost = rate * finish / HOUR
    due = finish
    if sc.task.confidence is not None:
        due = float(T.finish_quantile(OP.pool_scenario(sc, pool), pool.accelerator, "sync", cards, tau, step,
                                      sc.task.confidence))
    if due > F.limit(F.DEADLINE, sc):
        return None
    return (cost, finish) if objective == "cost" else (finish, cost)


def _as_cost_finish(best: tuple[float, float] | None, objective: str) -> tuple[float, float] | None:
    """The enumeration's best key as (cost, finish), whichever objective ordered it."""
    if best is None:
        return None
    return best if objective == "cost" else (best[1], best[0])


def _same(pick, want) -> None:
    if want is None:
        assert pick is None
        return
    assert pick is not None
    assert math.isclose(pick.cost, want[0], rel_tol=1e-9, abs_tol=1e-9)
    assert math.isclose(pick.finish_s, want[1], rel_tol=1e-9)


@pytest.mark.parametrize("deadline, prices, owned, objective", [
    ("3d", (0.0, 1.8, 4.5), (True, False, False), "cost"),   # the owned pool needs help: which rented one?
    ("3d", (3.0, 1.8, 4.5), (False, False, False), "cost"),  # all three rented
    ("3d", (0.0, 1.8, 4.5), (True, False, False), "finish"),
    ("0.2d", (0.0, 1.8, 4.5), (True, False, False), "cost"),  # too tight for any plan
])
def test_three_pool_solve_equals_brute_force(deadline, prices, owned, objective):
    """The best plan over three pools and the best using two pools or more both equal the enumeration."""
    sc = load_scenario(_raw3(deadline, prices, owned))
    ps = OP.solve_pools(sc, objective, relax=False)
    _same(ps.best, brute_force_k(sc, objective))
    _same(ps.mixed, brute_force_k(sc, objective, mixed_only=True))


@settings(max_examples=12, deadline=None)
@given(days=st.floats(0.3, 20.0), a100=st.floats(0.1, 6.0), b200=st.floats(0.1, 9.0), h100=st.floats(0.0, 5.0),
       objective=st.sampled_from(["cost", "finish"]))
def test_three_pool_solve_equals_brute_force_property(days, a100, b200, h100, objective):
    """Property: at any deadline and prices, the k-pool search and the enumeration agree (the H100 pool owned
    at an internal price, which may be 0)."""
    sc = load_scenario(_raw3(f"{days}d", (h100, a100, b200), (True, False, False)))
    ps = OP.solve_pools(sc, objective, relax=False)
    _same(ps.best, brute_force_k(sc, objective))
    _same(ps.mixed, brute_force_k(sc, objective, mixed_only=True))


@pytest.mark.parametrize("rate", [40.0, 60.0, 100.0])
def test_three_pools_with_an_input_pipeline_equal_brute_force(rate):
    """4 input workers a host at ``rate`` sequences a second each: a plan whose step outruns its hosts' supply
    is out (here the fastest splits do), so the search keeps every split, and still equals the enumeration."""
    raw = _raw3("3d", (0.0, 1.8, 4.5), (True, False, False))
    raw["input"] = {"workers_per_host": 4, "sequences_per_worker_s": rate}
    sc = load_scenario(raw)
    ps = OP.solve_pools(sc, relax=False)
    _same(ps.best, brute_force_k(sc))
    _same(ps.mixed, brute_force_k(sc, mixed_only=True))


def test_three_pools_all_used_equals_brute_force():
    """8 owned H100, 8 H200 at 2.0 and 8 B200 at 4.5 USD/h, 1.2 days: no pair of pools meets the date, the
    three together do (the enumeration's best uses every pool), and the search finds that plan."""
    raw = _raw3("1.2d", (0.0, 2.0, 4.5), (True, False, False))
    raw["hardware"]["pools"][1]["accelerator"] = "h200"
    sc = load_scenario(raw)
    ps = OP.solve_pools(sc, relax=False)
    _same(ps.best, brute_force_k(sc))
    assert ps.best is not None and all(c > 0 for c in ps.best.cards)
    assert "mixed (two pools or more)" in OP.pools_text(ps, sc)


# ---------------------------------------------------------------------------------------------
# form (b): one pipeline with stages on two pools


def test_staged_relations_by_hand():
    """Llama-3-70B's boundary at 8K tokens, hidden 8192, BF16, TP 8: 8192 x 8192 x 2 / 8 = 16.8 MB per rank,
    at the A100's 25 GB/s NIC (the slower of 50 and 25 GB/s): 0.671 ms. Stages 13.78 s and 13.83 s, one
    boundary: 13.83 + 2 x 0.000671 = 13.8313 s. 80 layers, 4 stages of 15 on the first pool leave 20 for 4
    stages: 5 each; 3 stages of 15 leave 35: 7 each on 5 stages, none on 4 (35 = 8 x 4 + 3); 6 x 15 = 90 leaves none."""
    a = 8192 * 8192 * 2 / 8
    assert PM.boundary_send_s(a, (50e9, 25e9)) == pytest.approx(a / 25e9) == pytest.approx(0.000671, rel=1e-3)
    assert PM.staged_step_s((13.78, 13.83), a / 25e9, 1) == pytest.approx(13.83 + 2 * a / 25e9)
    assert PM.stage_layers(80, (4, 4), 15) == 5
    assert PM.stage_layers(80, (3, 5), 15) == 7
    assert PM.stage_layers(80, (3, 4), 15) is None
    assert PM.stage_layers(80, (6, 2), 15) is None


def brute_force_staged(sc, objective: str = "cost") -> tuple[float, float] | None:
    """Every pair of pools, stage count S >= 2 of [search].pp, split s_1 + s_2 = S, layers l_1 per stage on
    the first pool with l_2 = (L - s_1 l_1) / s_2 a positive integer, every TP, micro-batch and DP with B a
    multiple of micro-batch x DP; each pool timed alone through evaluate_arrays as an S-stage pipeline of its
    layer count (the model with S x l_g layers), its cards TP x s_g x DP within the pool and whole hosts; the
    step = the slower pool's + 2 x (s x mb x h x 2 bytes / TP) / the slower NIC; the job as in form (a)."""
    B, L = sc.task.global_batch, sc.model.layers
    se = sc.search
    best = None
    for a, b in itertools.combinations(range(len(sc.pools)), 2):
        pools = (sc.pools[a], sc.pools[b])
        pscs = [OP.pool_scenario(sc, p) for p in pools]
        accs = [s.system(p.accelerator).acc for s, p in zip(pscs, pools, strict=True)]
        for S in [p for p in se.pp if p >= 2]:
            for s1 in range(1, S):
                split = (s1, S - s1)
                for l1 in range(1, L):
                    rest = L - s1 * l1
                    if rest <= 0 or rest % split[1]:
                        continue
                    lay = (l1, rest // split[1])
                    for tp, mb in itertools.product(se.tp, se.micro_batch):
                        for dp in range(1, B + 1):
                            if B % (mb * dp):
                                continue
                            cards = [tp * s * dp for s in split]
                            if any(c > p.max_cards or c % acc.cards_per_host
                                   for c, p, acc in zip(cards, pools, accs, strict=True)):
                                continue
                            steps = []
                            for psc, p, layers in zip(pscs, pools, lay, strict=True):
                                m = replace(psc, model=replace(psc.model, layers=S * layers))
                                r = evaluate_arrays(m, p.accelerator, tp=tp, pp=S, dp=dp, micro_batch=mb,
                                                    zero_stage=1, recompute="none", save_interval_s=1800.0,
                                                    nics_per_host=m.system(p.accelerator).acc.nics_per_host)
                                if all(float(r[("c", n)][0]) <= float(r[("c", n)][1]) for n in OP.STAGE_FAMILIES):
                                    steps.append(float(r["step_s"]))
                            if len(steps) < 2:
                                continue
                            send = mb * sc.task.seq_len * sc.model.hidden * 2.0 / tp / min(x.nic_bw for x in accs)
                            step = max(steps) + 2 * send
                            rate = sum(c * p.price_card_hour for c, p in zip(cards, pools, strict=True))
                            key = _written_job(sc, sum(cards), step, rate, objective, pools[0])
                            if key is not None and (best is None or key < best):
                                best = key
    return _as_cost_finish(best, objective)


@pytest.mark.parametrize("deadline, objective", [("3d", "cost"), ("3d", "finish"), ("0.3d", "cost")])
def test_staged_solve_equals_brute_force(deadline, objective):
    """Form (b) over two 16-card pools (PP 2 or 4 stages split between them) equals the enumeration."""
    raw = _raw(deadline)
    raw["search"].update(pp=[1, 2, 4], micro_batch=[1])
    sc = load_scenario(raw)
    got = OP.solve_staged(sc, objective)
    want = brute_force_staged(sc, objective)
    _same(got, want)
    if got is None:
        return
    assert sum(s * n for s, n in zip(got.stages, got.layers, strict=True)) == sc.model.layers


def test_the_report_names_the_winning_form():
    """The pools report carries form (b)'s plan, its restrictions and one decision line naming the form."""
    raw = _raw("3d")
    raw["search"].update(pp=[1, 2, 4])
    sc = load_scenario(raw)
    ps = OP.solve_pools(sc)
    text = OP.pools_text(ps, sc)
    assert "form (b), one pipeline with stages on two pools" in text and "form (b) restrictions" in text
    won = OP.winning_form(ps)
    assert won in ("a", "b") and f"decision: form ({won}) wins" in text
    assert OP.pools_dict(ps, sc)["form"] == won


# ---------------------------------------------------------------------------------------------
# pools under a confidence


@pytest.mark.parametrize("deadline, q", [("1.6d", 0.9), ("1.5d", 0.5), ("3d", 0.95)])
def test_pools_under_confidence_equal_brute_force(deadline, q):
    """With --confidence the deadline binds the finish's q-quantile: the search equals the enumeration that
    checks each plan's quantile (every card here at the same sigma, the flat model's default)."""
    raw = _raw3(deadline, (0.0, 1.8, 4.5), (True, False, False))
    raw["schedule"]["confidence"] = q
    sc = load_scenario(raw)
    sig = {float(T.step_sigma(OP.pool_scenario(sc, p), p.accelerator, 16)[0]) for p in sc.pools}
    assert len(sig) == 1
    ps = OP.solve_pools(sc, relax=False)
    _same(ps.best, brute_force_k(sc))
    _same(ps.mixed, brute_force_k(sc, mixed_only=True))


def test_mixed_sigma_is_the_largest_of_its_pools(monkeypatch):
    """A plan on H100 (sigma 0.05) and A100 (0.20) is checked at 0.20: its quantile equals the one of the
    same job with risk.step_sigma = 0.20 given, and exceeds the one at 0.05; the report states both."""
    raw = _raw("1.75d")
    raw["schedule"]["confidence"] = 0.9
    sc = load_scenario(raw)
    real = T.step_sigma

    def fake(s, acc, cards=1.0, ep=1):
        if s.risk.step_sigma is not None:
            return real(s, acc, cards, ep)
        return (0.05 if acc == "h100-sxm" else 0.20), "test"

    monkeypatch.setattr(T, "step_sigma", fake)
    monkeypatch.setattr("tpopt.models.terms.deadline.step_sigma", fake)  # the quantile's own look-up
    args = (np.array([32.0]), np.array([3600.0]), np.array([1.5]))
    both = OP.chance_finish(sc, sc.pools, np.array([[True, True]]), *args)
    h100 = OP.chance_finish(sc, sc.pools, np.array([[True, False]]), *args)
    at = replace(sc, risk=replace(sc.risk, step_sigma=0.20))
    want = T.finish_quantile(OP.pool_scenario(at, sc.pools[0]), "h100-sxm", "sync", *args, 0.9)
    assert both[0] == pytest.approx(float(want[0]), rel=1e-12) and both[0] > h100[0]
    e = OP.chance_entry(sc, [0, 1], 32, 3600.0, 1.5)
    assert e["step_sigma"] == 0.20 and e["pool_sigmas"] == {"h100-sxm": 0.05, "a100-80gb-sxm": 0.20}
    assert "the largest of its pools'" in OP.chance_text(e)[0]


@pytest.mark.parametrize("level", [0.5, 0.95, 0.999])
def test_chance_met_is_the_finish_quantile_within_the_deadline(level):
    """pools.chance_met (the verdict from the chance step limit of each card count, the quantile only near it) is
    exactly chance_finish(...) <= deadline, the finish quantile's own verdict: on one-pool and two-pool plans with
    steps from a tenth of the limit to ten times it, and at 1e-9, 1e-7 and 1e-5 relative either side of it."""
    sc = load_scenario(ROOT / "examples" / "pools-h100-a100.toml")
    sc = replace(sc, task=replace(sc.task, confidence=level))
    cards = np.repeat(np.array([64.0, 512.0, 1024.0, 1536.0]), 2)
    used = np.array([[True, False], [True, True]] * 4)
    tau = np.asarray(OP._job(sc, cards, np.ones(cards.size))[1], dtype=float)
    worst = OP.worst_pool(sc, sc.pools, used, cards)
    lim = np.array([float(T.chance_step_max(OP.pool_scenario(sc, sc.pools[g]), sc.pools[g].accelerator,
                                            sc.search.save_mode[0], c, t))
                    for g, c, t in zip(worst, cards, tau, strict=True)])
    factors = np.array([0.1, 0.5, 1 - 1e-5, 1 - 1e-7, 1 - 1e-9, 1.0, 1 + 1e-9, 1 + 1e-7, 1 + 1e-5, 2.0, 10.0])
    c, t, u = (np.repeat(x, factors.size, axis=0) for x in (cards, tau, used))
    step = (lim[:, None] * factors[None, :]).reshape(-1)
    exact = OP.chance_finish(sc, sc.pools, u, c, t, step) <= F.limit(F.DEADLINE, sc)
    assert exact.any() and not exact.all()
    assert OP.chance_met(sc, sc.pools, u, c, t, step).tolist() == exact.tolist()


def test_the_report_states_its_footing_per_pool_and_the_jobs_p_on_time():
    """Every report states what it rests on: per pool used, the footing of its group (its price and where it
    comes from, its implied MFU = model FLOPs of its share / (cards x peak x group step), whether the card
    rests on priors and its own step-time sigma), and for the job the sigma its finish carries (the largest of
    its pools') with P(on time) at it: the finish quantile at that level is the deadline (the law's inverse)."""
    from tpopt.models.arch import flops_per_token

    raw = _raw("1.75d")
    sc = load_scenario(raw)
    ps = OP.solve_pools(sc, relax=False)
    assert ps.best is ps.mixed and ps.best is not None
    f = OP.pools_dict(ps, sc)["footing"]
    by = {e["pool"]: e for e in f["pools"]}
    own, rent = by["h100-sxm (owned)"], by["a100-80gb-sxm (rented)"]
    assert own["price"]["card_hour"] == 0 and "owned = true" in own["price"]["source"]
    assert rent["price"]["card_hour"] == 1.8 and rent["price"]["source"].endswith("[[hardware.pools]] card_hour")
    for g, e in enumerate((own, rent)):
        pool, cards, share = sc.pools[g], ps.best.cards[g], ps.best.shares[g]
        peak = sc.system(pool.accelerator).acc.peak_flops
        want = float(flops_per_token(sc.model, 4096)) * share * 4096 / (cards * peak * ps.best.group_steps_s[g])
        assert e["mfu"] == pytest.approx(want, rel=1e-12)
        assert e["evidence"]["p_on_time"] is None  # the job has one finish, stated once
        assert e["evidence"]["sigma"] == pytest.approx(
            float(T.step_sigma(OP.pool_scenario(sc, pool), pool.accelerator, cards)[0]))
        assert e["evidence"]["card"] in ("prior", "fitted")
    j = f["job"]
    n = sum(ps.best.cards)
    assert j["sigma"] == max(float(T.step_sigma(OP.pool_scenario(sc, p), p.accelerator, n)[0]) for p in sc.pools)
    assert 0 < j["p_on_time"] < 1
    worst = next(p for p in sc.pools if p.label == j["pool"])
    q = T.finish_quantile(OP.pool_scenario(sc, worst), worst.accelerator, "sync", float(n), ps.best.save_interval_s,
                          ps.best.step_s, j["p_on_time"])
    assert float(np.asarray(q).reshape(-1)[0]) == pytest.approx(1.75 * DAY, rel=1e-6)
    text = OP.pools_text(ps, sc)
    assert "Footing (h100-sxm, owned pool)" in text and "Footing (a100-80gb-sxm, rented pool)" in text
    assert f"P(on time) {j['p_on_time'] * 100:.1f} % at this sigma" in " ".join(text.split())
