"""Sites with their own card type and price (issue 40, items 2 and 4): the decision equals a brute force written
here on small spaces (every per-replica share, set of sites, layout per site, replica split, ring order and
mode), the cheapest fill and the slowest-site step by hand, and homogeneous sites keep the one-type decision."""

from __future__ import annotations

import itertools
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import load_mixed_sites_scenario
from tpopt.models import families as F
from tpopt.models import pools as PM
from tpopt.models import sites as S
from tpopt.models import terms as T
from tpopt.models.arch import param_count
from tpopt.models.evaluate import evaluate_arrays
from tpopt.models.market import site_power_w
from tpopt.models.plan import Scenario
from tpopt.models.units import HOUR
from tpopt.optimizer import sites_mixed as M
from tpopt.optimizer.pools import POOL_FAMILIES, _job, fixed_choices

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "sites-mixed-405b.toml"


def test_cheapest_fill_by_hand() -> None:
    """7 replicas over caps (3, 2, 4) at 5, 1 and 2 USD a replica-hour: one each (3 placed), then the cheapest
    first: site 2 takes its 1 more (2 in all), site 3 its 3 more: (1, 2, 4), 5 + 2 + 8 = 15 USD/h. Every other
    split within the caps costs more (enumerated here)."""
    fill = S.cheapest_fill(7, (3, 2, 4), (5.0, 1.0, 2.0))
    assert fill == (1, 2, 4)
    splits = [s for s in itertools.product(range(1, 4), range(1, 3), range(1, 5)) if sum(s) == 7]
    assert min(5 * a + b + 2 * c for a, b, c in splits) == 15
    assert S.cheapest_fill(10, (3, 2, 4), (5.0, 1.0, 2.0)) is None  # 9 replicas at most
    assert S.cheapest_fill(2, (3, 2, 4), (5.0, 1.0, 2.0)) is None  # every used site holds one


def test_slowest_site_sets_the_step() -> None:
    """Sites at 10 s and 12.5 s a step and 1.5 s of exposed WAN: the step is 12.5 + 1.5 = 14 s; the faster site
    idles 2.5 s (the pools' form (a) relations, reused)."""
    assert PM.mixed_step_s([10.0, 12.5], 1.5) == 14.0
    assert PM.idle_s([10.0, 12.5]) == [2.5, 0.0]


WAN = {"bandwidth_gbps": 3200, "latency_ms": 10, "egress_usd_tb": 30, "inner_steps": [20, 100],
       "fragments": [1, 2], "token_penalty": 0.05,
       "links": [{"sites": ["a", "b"], "bandwidth_gbps": 12800, "latency_ms": 1}]}
SITES = [{"name": "a", "max_cards": 128, "card_hour": 2.0},
         {"name": "b", "max_cards": 128, "card_hour": 1.2, "power": "150kW"},
         {"name": "c", "accelerator": "b200", "max_cards": 32, "card_hour": 3.1}]


def small(deadline: str, sites: list[dict[str, Any]] = SITES) -> dict[str, Any]:
    """Llama-3-70B on 5B tokens, 16 sequences a step: per-replica shares 1..16, replicas of 16 or 32 cards."""
    return {"model": {"name": "llama3-70b"}, "task": {"tokens": "5B", "seq_len": 8192, "global_batch": 16},
            "schedule": {"deadline": deadline}, "hardware": {"accelerator": "h100-sxm", "efficiency": 0.4},
            "checkpoint": {"save_interval": "auto", "mode": "sync"},
            "search": {"zero_stage": [1], "tp": [8], "pp": [2, 4], "micro_batch": [1, 2], "recompute": ["full"]},
            "sites": sites, "wan": WAN}


Plan = tuple[float, float, int, tuple[str, ...]]


def brute_force(sc: Scenario, si: S.SitesInput, powers: dict[str, Any]) -> list[Plan]:
    """(cost, finish, sites, types) of every plan of the space, by enumeration (written here, not the module's
    search): every set of sites, one per-replica share m_t per type of it (B % m_t == 0; a replica's step as one
    of B / m_t), every layout per site (any feasible one, not only the fastest), every split with each used site
    >= 1 replica within its cards and power and sum_s n_s x m_t(s) = B, every ring order and every mode, H and F;
    each type at its catalog NICs per host. Step = tf x (slowest replica + exposed WAN); finish and overhead at
    the job's cards; cost = sum cards x price x finish / 3600 + egress."""
    b = sc.task.global_batch
    fixed = fixed_choices(sc)
    replica_families = [n for n in POOL_FAMILIES if n != F.CARDS]
    params = float(param_count(sc.model))
    iters = T.iteration_count(sc)
    shares = [m for m in range(1, b + 1) if b % m == 0]
    options: dict[tuple[str, int], list[tuple[int, float]]] = {}  # (type, share) -> every feasible (cards, step)
    for acc in {s.accelerator or "" for s in si.sites}:
        for m in shares:
            opts = []
            for tp, pp, mb in itertools.product(sc.search.tp, sc.search.pp, sc.search.micro_batch):
                if m % mb:
                    continue
                r = evaluate_arrays(sc, acc, tp=np.array([tp]), pp=np.array([pp]), zero_stage=np.array([1]),
                                    micro_batch=np.array([mb]), dp=np.array([b // m]), recompute="full",
                                    nics_per_host=sc.system(acc).acc.nics_per_host, **fixed)
                if all(bool(np.all(r[("c", n)][0] <= r[("c", n)][1])) for n in replica_families):
                    opts.append((tp * pp, float(np.asarray(r["step_s"]).ravel()[0])))
            options[(acc, m)] = opts
    out = []
    for k in range(1, len(si.sites) + 1):
        for used in itertools.combinations(si.sites, k):
            kinds = sorted({s.accelerator or "" for s in used})
            for ms in itertools.product(shares, repeat=len(kinds)):  # one share per type
                m_of = dict(zip(kinds, ms, strict=True))
                per_site = [m_of[s.accelerator or ""] for s in used]
                for lays in itertools.product(*(options[(s.accelerator or "", m)] for s, m in zip(used, per_site,
                                                                                                strict=True))):
                    caps = []
                    for s, (rc, _) in zip(used, lays, strict=True):
                        acc = s.accelerator or ""
                        w = site_power_w(powers[acc], s.pue, rc, sc.system(acc).acc.cards_per_host)
                        cap = s.max_cards // rc
                        if s.power_cap_w is not None:
                            cap = min(cap, int(s.power_cap_w // w))
                        caps.append(cap)
                    for n in itertools.product(*(range(1, c + 1) for c in caps)):
                        if sum(x * m for x, m in zip(n, per_site, strict=True)) != b:
                            continue
                        cards = sum(x * rc for x, (rc, _) in zip(n, lays, strict=True))
                        rate = sum(x * rc * M.site_price(sc, s) for x, (rc, _), s in zip(n, lays, used, strict=True))
                        slowest = max(t for _, t in lays)
                        for perm in itertools.permutations(used):
                            ring = [si.link(a.name, c.name) for a, c in zip(perm, perm[1:] + perm[:1], strict=True)]
                            links = ring if k > 1 else []
                            bw = min((x.bandwidth_bps for x in links), default=math.inf)
                            lat = max((x.latency_s for x in links), default=0.0)
                            egress_tb = sum(x.egress_usd_tb for x in links)
                            configs = [(S.SYNC, 1, 1)] + ([(S.DILOCO, h, f) for h in si.inner_steps
                                                           for f in si.fragments] if k > 1 else [])
                            for mode, h, f in configs:
                                if mode == S.SYNC:
                                    nbytes, per = params * 2, 1.0
                                    exposed = S.ring_allreduce_wan_s(nbytes, k, bw, lat) if k > 1 else 0.0
                                else:
                                    nbytes, per = params * 2, 1.0 / h
                                    one = S.ring_allreduce_wan_s(nbytes / f, k, bw, lat)
                                    exposed = f / h * max(0.0, one - (1 if f > 1 else 0) * slowest)
                                tf = 1.05 if mode == S.DILOCO else 1.0
                                _, _, finish = _job(sc, np.array([float(cards)]),
                                                    np.array([tf * (slowest + exposed)]))
                                fin = float(finish[0])
                                link_bytes = 2 * (k - 1) / k * nbytes * per * iters * tf if k > 1 else 0.0
                                cost = rate * fin / HOUR + link_bytes * egress_tb / 1e12
                                out.append((cost, fin, k, tuple(kinds)))
    return out


@pytest.fixture(scope="module")
def plans() -> list[Plan]:
    sc, si, powers = load_mixed_sites_scenario(small("10000d"))
    return brute_force(sc, si, powers)


@pytest.mark.parametrize(("deadline_fraction", "used"), [(None, 1), (0.3, 1), (0.1, 1), (0.05, 2), (0.01, 3)])
def test_mixed_sites_equal_brute_force(plans: list[Plan], deadline_fraction: float | None, used: int) -> None:
    """Two H100 sites (one power-capped and cheap) and a small B200 site with its own price: the decision's cost
    and finish equal the brute force's best within the deadline, from a loose deadline (one cheap site) to one
    near the fastest plan's (two, then three sites, both types, each type at its own share: the B200 replicas
    take more sequences than the H100 ones)."""
    fastest, cheapest = min(p[1] for p in plans), min(plans)[1]
    deadline_s = cheapest * 2 if deadline_fraction is None else fastest + (cheapest - fastest) * deadline_fraction
    sc, si, powers = load_mixed_sites_scenario(small(f"{deadline_s / 86400.0:.6f}d"))
    within = [p for p in plans if p[1] <= F.limit(F.DEADLINE, sc)]
    out = M.solve_mixed_sites(sc, si, powers)
    assert within and out.best is not None
    cost, finish, k, kinds = min(within)
    assert math.isclose(out.best.cost, cost, rel_tol=1e-9)
    assert math.isclose(out.best.finish_s, finish, rel_tol=1e-9)
    assert len(out.best.parts) == used == k
    assert sorted({p.accelerator for p in out.best.parts}) == list(kinds)
    if deadline_fraction is not None and deadline_fraction < 0.1:
        share = {p.accelerator: p.replica_share for p in out.best.parts}
        assert set(share) == {"h100-sxm", "b200"} and share["b200"] > share["h100-sxm"]
    assert sum(p.share for p in out.best.parts) == sc.task.global_batch


def test_fill_costs_and_the_join_by_enumeration() -> None:
    """The per-type fill's bill, and the join of two types on the global batch. Bill: sites at 16, 40 and 30 USD a
    replica-hour with caps 5, 3, 4: one each (86), then 16 x 4, then 30 x 3, then 40 x 2 (cumulative). Join: type
    A's options (D replicas at share 4 or at share 2) and type B's (share 8), batch 32, step threshold 10 s:
    every pair whose sequences sum to 32 and whose slower step is 10 s, enumerated here, has its (bill, cards)
    matched or beaten by a pair of the join's front, and every front pair is one of them."""
    bills = M.fill_costs([16.0, 40.0, 30.0], [5, 3, 4])
    want = [86.0]
    for u in [16.0] * 4 + [30.0] * 3 + [40.0] * 2:
        want.append(want[-1] + u)
    assert bills.tolist() == want

    def opts(rows: list[tuple[int, int, int, float, float, float]]) -> M._Options:
        col, d, seq, rate, cards, step = (np.array(x) for x in zip(*rows, strict=True))
        return M._Options("x", (0,), np.array([0, 0]), col, d, seq, rate, cards, step)

    # (column, D, sequences, bill, cards, step)
    a = opts([(0, d, 4 * d, 7.0 * d, 8.0 * d, 10.0) for d in range(1, 8)]
             + [(1, d, 2 * d, 3.0 * d, 4.0 * d, 6.0) for d in range(1, 16)])
    b = opts([(0, d, 8 * d, 11.0 * d + 1.0, 10.0 * d, 9.0) for d in range(1, 4)])
    ia, ib = M._joined([a, b], 32, 10.0)
    pairs = [(float(a.rate[i] + b.rate[j]), float(a.cards[i] + b.cards[j]))
             for i in range(len(a.seq)) for j in range(len(b.seq))
             if a.seq[i] + b.seq[j] == 32 and max(a.step[i], b.step[j]) == 10.0]
    front = list(zip((a.rate[ia] + b.rate[ib]).tolist(), (a.cards[ia] + b.cards[ib]).tolist(), strict=True))
    assert pairs and all(f in pairs for f in front)
    assert all(any(fr <= r and fc <= c for fr, fc in front) for r, c in pairs)
    assert all(a.step[i] == 10.0 for i in ia)  # B alone is at 9 s: A's 10 s pairs only


def test_example_uses_its_caps_and_prices() -> None:
    """The example's plan: every used site within its cards and power cap; each site's bill = cards x its price
    x finish / 3600; the bills and egress add up to the cost; the step is the slowest replica + the WAN."""
    cat = load_catalog()
    sc, si, powers = load_mixed_sites_scenario(EXAMPLE)
    out = M.solve_mixed_sites(sc, si, powers)
    assert out.best is not None
    d = M.mixed_report(out)
    bills = 0.0
    for s in d["per_site"]:
        assert s["cards"] <= s["max_cards"]
        if s["cap_mw"] is not None:
            assert s["site_mw"] <= s["cap_mw"]
        assert math.isclose(s["bill_usd"], s["cards"] * s["card_hour"] * out.best.finish_s / 3600, rel_tol=1e-12)
        bills += s["bill_usd"]
    assert math.isclose(bills + out.best.egress_usd, out.best.cost, rel_tol=1e-9)
    assert sum(s["share"] for s in d["per_site"]) == sc.task.global_batch
    assert cat.market.power["b200"] is not None


def test_cli_runs_the_mixed_example() -> None:
    p = subprocess.run([sys.executable, "-m", "tpopt", "sites", "--scenario", str(EXAMPLE)], capture_output=True,
                       text=True, check=False)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()  # the first line (and its continuation) names the question
    assert lines[0].startswith("tpopt sites: sites-mixed-405b:")
    assert any(ln.startswith("types: h100-sxm, b200, gb200-nvl72") for ln in lines)
    assert "exact over the grids" in " ".join(p.stdout.split())


def test_a_site_type_without_a_price_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    text = EXAMPLE.read_text().replace('accelerator = "b200"', 'accelerator = "no-such-card"')
    bad.write_text(text)
    p = subprocess.run([sys.executable, "-m", "tpopt", "sites", "--scenario", str(bad)], capture_output=True,
                       text=True, check=False)
    assert p.returncode != 0 and len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr


def test_a_confidence_on_mixed_sites_is_refused_in_one_line(tmp_path: Path) -> None:
    """The mixed-type decision checks the deadline at the median finish: a scenario asking for a confidence gets
    one line naming it and a non-zero exit, not the median answer printed as if the confidence held."""
    asked = tmp_path / "asked.toml"
    asked.write_text(EXAMPLE.read_text().replace('[schedule]\n', '[schedule]\nconfidence = "95%"\n', 1))
    p = subprocess.run([sys.executable, "-m", "tpopt", "sites", "--scenario", str(asked)], capture_output=True,
                       text=True, check=False)
    assert p.returncode != 0 and p.stdout == "" and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "schedule.confidence" in p.stderr


def test_the_api_answers_a_mixed_scenario_as_the_command() -> None:
    """tpopt.sites on the mixed example gives the command's JSON (the same decision, one entry point)."""
    import json

    import tpopt

    d = tpopt.sites(EXAMPLE)
    p = subprocess.run([sys.executable, "-m", "tpopt", "sites", "--scenario", str(EXAMPLE), "--json"],
                       capture_output=True, text=True, check=True)
    assert d["types"] == ["h100-sxm", "b200", "gb200-nvl72"]
    assert d["best"]["cost"] == json.loads(p.stdout)["best"]["cost"]


def test_one_type_at_its_price_equals_the_one_type_decision() -> None:
    """The one-type example with every site naming h100-sxm (so the per-site decision runs, at the catalog price):
    the same cost, cards and finish as the one-type decision (its replica layout is in this space, and a split
    among equally priced sites moves no figure)."""
    import dataclasses

    from tpopt.catalogs.scenario import load_sites_scenario
    from tpopt.optimizer import sites as O

    one = ROOT / "examples" / "sites-llama3-405b.toml"
    sc1, si1, p1 = load_sites_scenario(one)
    want = O.solve_sites(sc1, si1, p1).best
    sc, si, powers = load_mixed_sites_scenario(one)
    si = dataclasses.replace(si, sites=tuple(dataclasses.replace(s, accelerator="h100-sxm") for s in si.sites))
    got = M.solve_mixed_sites(sc, si, powers).best
    assert want is not None and got is not None
    assert got.cards == want.cards and got.mode == want.mode and got.inner_steps == want.inner_steps
    assert math.isclose(got.cost, want.cost, rel_tol=1e-9)
    assert math.isclose(got.finish_s, want.finish_s, rel_tol=1e-9)


def test_the_bound_loses_no_plan_on_the_example() -> None:
    """The bound rules out (set of sites, step threshold) pairs on the example; joining every one of them,
    whatever its bound, finds the same plan."""
    sc, si, powers = load_mixed_sites_scenario(EXAMPLE)
    pruned = M.solve_mixed_sites(sc, si, powers)
    full = M.solve_mixed_sites(sc, si, powers, prune=False)
    assert pruned.best is not None and full.best is not None
    assert 0 < pruned.exhaustive < full.exhaustive
    assert full.best.key() == pruned.best.key()


def test_mixed_crossover_flips_the_cheaper_mode() -> None:
    """The example's sync / DiLoCo crossover bandwidth (the one-type closed form on the mixed plan): re-scoring the
    best plan's sites, replicas and ring with the ring's slowest link 1 % below and 1 % above it, DiLoCo is the
    cheaper mode below and synchronous training above (the scoring path, not the closed form)."""
    import dataclasses

    sc, si, powers = load_mixed_sites_scenario(EXAMPLE)
    out = M.solve_mixed_sites(sc, si, powers)
    assert out.best is not None and out.best_diloco is not None and out.crossover_bps is not None
    x, dl = out.crossover_bps, out.best_diloco
    scorer = M._Scorer(sc, si)
    reps = np.array([[p.replicas for p in out.best.parts]], dtype=float)

    def cost(bw: float, cfg: tuple[str, int, int]) -> float:
        ring = dataclasses.replace(out.best.ring, bandwidth_bps=bw)  # type: ignore[union-attr]
        return M._candidate(scorer, out.best.group, ring, cfg, reps, 0).cost  # type: ignore[union-attr]

    cfg_dl = (S.DILOCO, dl.inner_steps, dl.fragments)
    assert cost(0.99 * x, cfg_dl) < cost(0.99 * x, (S.SYNC, 1, 1))
    assert cost(1.01 * x, cfg_dl) > cost(1.01 * x, (S.SYNC, 1, 1))
    assert M.mixed_report(out)["crossover_gbps"] == x / 1e9


def test_mixed_wan_bandwidth_relaxation_is_the_threshold() -> None:
    """A 1 Gbit/s WAN and a deadline only the three sites together meet: no plan. The relaxation names the
    smallest whole Gbit/s; re-solving with every link raised to it finds a plan, 1 Gbit/s below none."""
    from tpopt.optimizer.sites import with_bandwidth

    sc, si, powers = load_mixed_sites_scenario(small("10000d"))
    plans = brute_force(sc, si, powers)
    fastest = min(p[1] for p in plans)
    slow = {**WAN, "bandwidth_gbps": 1, "links": []}
    sc, si, powers = load_mixed_sites_scenario({**small(f"{fastest * 1.02 / 86400.0:.6f}d"), "wan": slow})
    out = M.solve_mixed_sites(sc, si, powers)
    assert out.best is None
    (rel,) = out.relaxations
    assert rel["parameter"] == "WAN bandwidth" and rel["helps"] and rel["current"] == 1
    need = rel["required"]
    assert M.solve_mixed_sites(sc, with_bandwidth(si, need * 1e9), powers, relax=False).best is not None
    assert M.solve_mixed_sites(sc, with_bandwidth(si, (need - 1) * 1e9), powers, relax=False).best is None
    text = "\n".join(M.mixed_lines(M.mixed_report(out)))
    assert f"  WAN bandwidth  now 1 Gbit/s: >= {need:,} Gbit/s" in text


THREE = [{"name": "a", "max_cards": 64, "card_hour": 2.0},
         {"name": "b", "accelerator": "b200", "max_cards": 32, "card_hour": 3.1},
         {"name": "c", "accelerator": "h200", "max_cards": 32, "card_hour": 2.6}]


@pytest.fixture(scope="module")
def three_type_plans() -> list[Plan]:
    sc, si, powers = load_mixed_sites_scenario(small("10000d", THREE))
    return brute_force(sc, si, powers)


@pytest.mark.parametrize("deadline_fraction", [None, 0.3, 0.1, 0.03, 0.0])
def test_three_type_sets_bounded_by_brute_force(three_type_plans: list[Plan], deadline_fraction: float | None
                                                ) -> None:
    """Three sites of three types (H100, B200, H200): the decision joins at most two types and bounds the
    three-type set. Whenever it says the bound rules that set out, the brute force (written here, every plan
    including the three-type ones, each type at its own share) finds no three-type plan within the deadline
    cheaper than the best plan of at most two types, and the decision's best is the best of every plan; where a
    three-type plan is the cheapest, it says the answer is not proven over it."""
    plans = three_type_plans
    fastest, cheapest = min(p[1] for p in plans), min(plans)[1]
    deadline_s = cheapest * 2 if deadline_fraction is None else fastest + (cheapest - fastest) * deadline_fraction
    sc, si, powers = load_mixed_sites_scenario(small(f"{deadline_s / 86400.0:.6f}d", THREE))
    within = [p for p in plans if p[1] <= F.limit(F.DEADLINE, sc) and p[0] <= F.limit(F.BUDGET, sc)]
    narrow = [p for p in within if len(p[3]) <= M.MAX_TYPES]
    wide = [p for p in within if len(p[3]) > M.MAX_TYPES]
    out = M.solve_mixed_sites(sc, si, powers)
    d = M.mixed_report(out)
    w = d["wider_site_sets"]
    assert w["site_sets"] == 1  # {a, b, c}
    text = "\n".join(M.mixed_lines(d))
    if w["proven"]:
        assert "proven over every plan" in text
        assert all(min(narrow)[0] <= p[0] * (1 + 1e-12) for p in wide)
        assert out.best is not None and math.isclose(out.best.cost, min(within)[0], rel_tol=1e-9)
    else:
        assert "proven only over plans of at most 2 types" in text and w["not_scored"]
    if wide and (not narrow or min(wide)[0] < min(narrow)[0]):
        assert not w["proven"]  # a cheaper three-type plan is never ruled out by the bound
    if narrow:
        assert out.best is not None and math.isclose(out.best.cost, min(narrow)[0], rel_tol=1e-9)


def test_million_cards_states_whether_three_type_sets_are_bounded() -> None:
    """The million-card benchmark's question (three types over four sites): the benchmark prints whether its
    three-type site sets are ruled out by the bound (proven over every plan) or were not scored (proven only over
    plans of at most two types)."""
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "million_cards.py"), "--repeat", "1"],
                       capture_output=True, text=True, check=True)
    line = next(x for x in p.stdout.splitlines() if x.startswith("site sets of 3+ card types (3, not joined): "))
    assert ("bounded, none can beat" in line and "proven over every plan" in line
            or "not scored" in line and "proven only over plans of at most 2 types" in line)
