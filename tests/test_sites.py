"""Multi-datacenter plans (issue 40 item 2): the WAN closed forms against hand derivations and the published
DiLoCo bandwidth model, the sync / DiLoCo crossover solved by hand, one site equal to the one-site solve, the
4-site example within its caps, and bad input as one line."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from tpopt.catalogs.scenario import build_scenario, split_sites
from tpopt.errors import InputError
from tpopt.models import sites as S
from tpopt.optimizer import plan as P
from tpopt.optimizer import sites as O
from tpopt.optimizer.result import Request

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "sites-llama3-405b.toml"


# ---------------------------------------------------------------------------------------------
# closed forms


def test_ring_allreduce_by_hand() -> None:
    """4 sites, 1 GB, 100 Gbit/s, 10 ms: 2 x 3/4 x 8e9 bit / 1e11 bit/s = 0.12 s, plus 2 x 3 x 10 ms = 0.06 s."""
    assert math.isclose(S.ring_allreduce_wan_s(1e9, 4, 100e9, 0.010), 0.18, rel_tol=1e-12)
    assert S.ring_allreduce_wan_s(1e9, 1, 100e9, 0.010) == 0.0  # one site: no WAN
    # bytes crossing sites: each of 4 sites sends 2 x 3/4 GB: 6 GB in all
    assert math.isclose(S.wan_bytes_per_sync(1e9, 4), 6e9, rel_tol=1e-12)


def test_outer_sync_matches_the_published_bandwidth_model() -> None:
    """"Communication-Efficient Language Model Training Scales Reliably and Robustly: Scaling Laws for DiLoCo"
    (Charles et al. 2025), Appendix A.2-A.3, as the public (Streaming) DiLoCo calculator mino98/diloco-calculator
    quotes it ("Underlying Math"; the paper's appendix itself was not read here): an outer synchronisation of N
    bytes at W bytes/s takes 2N / W x (1 - 1/R) + epsilon, paid T / H times in T steps. R here is the ring's members,
    the sites (the calculator's R counts chips, where 1 - 1/R is about 1: a bound our form meets as S grows).
    A 1B-parameter model in bf16 (N = 2e9 B), W = 1 Gbit/s
    = 1.25e8 B/s, R = 2, epsilon = 0: 2 x 2e9 / 1.25e8 x 1/2 = 16 s; per inner step at H = 100: 0.16 s."""
    published = 2 * 2e9 / 1.25e8 * (1 - 1 / 2)
    assert published == 16.0
    assert math.isclose(S.ring_allreduce_wan_s(2e9, 2, 1e9, 0.0), published, rel_tol=1e-12)
    assert math.isclose(S.diloco_exposed_s(2e9, 2, 1e9, 0.0, 100, 1, 0, compute_step_s=1.0), 0.16, rel_tol=1e-12)
    # the paper's "orders of magnitude less bandwidth": bytes per step fall by H (same bytes per element)
    assert math.isclose(S.wan_bytes_per_sync(2e9, 2) / S.diloco_wan_bytes_per_step(2e9, 2, 100), 100, rel_tol=1e-12)


def test_streamed_fragments_by_hand() -> None:
    """Streaming DiLoCo: 2 sites, 8 GB outer gradient in F = 4 fragments of 2 GB, 100 Gbit/s, no latency: one
    fragment's all-reduce = 2 x 1/2 x 16e9 / 1e11 = 0.16 s; tau = 1 inner step of 0.1 s hides 0.1 s: 0.06 s
    exposed per fragment, 4 fragments every H = 20 steps: 4 x 0.06 / 20 = 0.012 s a step. A 0.2 s step hides
    it all."""
    assert math.isclose(S.diloco_exposed_s(8e9, 2, 100e9, 0.0, 20, 4, 1, 0.1), 0.012, rel_tol=1e-12)
    assert S.diloco_exposed_s(8e9, 2, 100e9, 0.0, 20, 4, 1, 0.2) == 0.0
    # utilisation = compute / (compute + exposed): 0.1 / 0.112
    assert math.isclose(S.utilisation(0.1, 0.012), 0.1 / 0.112, rel_tol=1e-12)
    assert math.isclose(S.egress_usd(3e12, 20.0), 60.0, rel_tol=1e-12)  # 3 TB x 20 USD/TB
    assert S.token_factor(S.DILOCO, 0.05) == 1.05 and S.token_factor(S.SYNC, 0.05) == 1.0


def test_power_caps_whole_replicas() -> None:
    """A 112-card H100 replica at PUE 1.2: 1.2 x (112 x 700 + 14 x 4,600) = 171,360 W; 40 MW holds 233 of them
    (233 x 171,360 = 39.93 MW), fewer than the 285 that 32,000 cards would."""
    w = 1.2 * (112 * 700 + 14 * 4600)
    assert S.replicas_under_power(w, 40e6, 32000, 112) == 233
    assert S.replicas_under_power(w, None, 32000, 112) == 285


# ---------------------------------------------------------------------------------------------
# the crossover, by hand


def test_crossover_by_hand() -> None:
    """x = 1 / bandwidth. Sync costs 100 + 10 x; DiLoCo 105 + max(0, x - 2) (a 5 % token penalty, WAN time
    hidden up to x = 2). Below x = 2: 100 + 10 x = 105 at x = 0.5 (in range); above: 100 + 10 x = 103 + x at
    x = 1/3 (out of range). One crossing: bandwidth 2; DiLoCo wins below it (x > 0.5)."""
    assert S.crossover_inverse_bandwidths(100, 10, 105, 1, -2) == (0.5,)
    # no hiding (offset +1): 100 + 10 x = 106 + x at x = 2/3
    (r,) = S.crossover_inverse_bandwidths(100, 10, 105, 1, 1)
    assert math.isclose(r, 2 / 3, rel_tol=1e-12)
    # DiLoCo cheaper at every bandwidth (no penalty, less traffic): no crossing
    assert S.crossover_inverse_bandwidths(100, 10, 99, 1, 0) == ()


# ---------------------------------------------------------------------------------------------
# the decision


def raw_405b(sites: list[dict[str, object]], wan: dict[str, object], deadline: str = "150d") -> dict[str, object]:
    return {"model": {"name": "llama3-405b"}, "task": {"tokens": "15T", "seq_len": 8192, "global_batch": 12544},
            "schedule": {"deadline": deadline}, "hardware": {"accelerator": "h100-sxm", "efficiency": 0.4},
            "checkpoint": {"save_interval": "auto", "mode": "sync"},
            "search": {"zero_stage": [1], "tp": [8], "pp": [14], "micro_batch": [1]},
            "sites": sites, "wan": wan}


def test_one_site_equals_the_one_site_solve() -> None:
    """One site of 100,000 cards, no WAN: the decision's plan is the one-site solve's optimum (same cards, same
    cost; no WAN time, no egress)."""
    raw, si = split_sites(raw_405b([{"name": "a", "max_cards": 100000}],
                                   {"bandwidth_gbps": 100, "latency_ms": 10, "modes": ["sync"]}, deadline="120d"))
    assert si is not None
    sc = build_scenario(raw)
    out = O.solve_sites(sc, si, None, "cpsat")
    one = P.plan(build_scenario({**raw, "search": {**raw["search"], "max_cards": 100000}}), "cpsat",
                 Request(objective="cost"), analyse=False)
    assert out.best is not None and one.best is not None
    assert out.best.cards == one.best.plan.cards and out.best.sites == ("a",)
    assert out.best.exposed_s == 0.0 and out.best.egress_usd == 0.0
    assert math.isclose(out.best.cost, one.best.metrics["cost"], rel_tol=1e-12)


def test_crossover_flips_the_cheaper_mode() -> None:
    """Two sites of 3,000 cards (26 replicas of 112 each); one is too slow for 600 days (the one-site plan of 49
    replicas, 5,488 cards, takes about 484 days), so the plan spans both. At its sites and replicas, re-score sync
    and the best DiLoCo just above and just below the solved crossover bandwidth: the cheaper mode changes there
    (DiLoCo below)."""
    raw, si = split_sites(raw_405b([{"name": "a", "max_cards": 3000}, {"name": "b", "max_cards": 3000}],
                                   {"bandwidth_gbps": 400, "latency_ms": 20, "egress_usd_tb": 20,
                                    "inner_steps": [100], "fragments": [1], "token_penalty": 0.05},
                                   deadline="600d") | {"schedule": {"deadline": "600d", "reserved": "5d"}})
    assert si is not None
    sc = build_scenario(raw)
    out = O.solve_sites(sc, si, None, "cpsat")
    assert out.best is not None and len(out.best.sites) == 2
    assert out.best_diloco is not None and out.best_sync is not None
    x = O.crossover_bps(out, out.best_diloco)
    assert x is not None
    costs = {}
    for f in (0.99, 1.01):
        ring = O.Ring(out.best.sites, x * f, 0.020, 2 * 20.0) if out.best else None
        assert ring is not None
        ev = O.evaluate(sc, O.replace(out.replica.plan, cards=out.best_sync.cards, dp=out.best_sync.dp, grad_accum=0))
        cs = list(O.candidates_for(si, ev, out.params, sc.task.tokens, out.best_sync.replicas, ring,
                                   sc.task.reserved_s))
        costs[f] = {c.mode: c.cost for c in cs}
    assert costs[0.99][S.DILOCO] < costs[0.99][S.SYNC]
    assert costs[1.01][S.DILOCO] > costs[1.01][S.SYNC]


def site_mw(cards: int, pue: float) -> float:
    """PUE x (cards x 700 W + ceil(cards / 8) x 4,600 W), MW (derivation of the test)."""
    return pue * (cards * 700 + math.ceil(cards / 8) * 4600) / 1e6


def test_example_plan_within_caps_and_deadline() -> None:
    """The 4-site example: the best plan meets the 150-day deadline, splits the job's replicas over the sites it
    uses within each site's cards and power (hand formula above), and its DiLoCo synchronises less than sync."""
    import tomllib
    raw = tomllib.loads(EXAMPLE.read_text())
    rest, si = split_sites(raw)
    assert si is not None
    from tpopt.catalogs import load_catalog
    cat = load_catalog()
    out = O.solve_sites(build_scenario(rest, cat), si, cat.market.power["h100-sxm"], "cpsat")
    b = out.best
    assert b is not None and b.finish_s <= 150 * 86400
    by = {s.name: s for s in si.sites}
    assert sum(b.replicas) == b.dp and b.cards == b.dp * 112
    for name, r in zip(b.sites, b.replicas, strict=True):
        assert r * 112 <= by[name].max_cards
        cap = by[name].power_cap_w
        assert cap is not None and site_mw(r * 112, by[name].pue) <= cap / 1e6
    if out.best_diloco is not None and out.best_sync is not None:
        assert out.best_diloco.wan_bytes_step < out.best_sync.wan_bytes_step
    for e in O.report(out)["per_site"]:  # the report's site power is the hand formula's
        assert math.isclose(e["site_mw"], site_mw(e["cards"], by[e["site"]].pue), rel_tol=1e-12)


# ---------------------------------------------------------------------------------------------
# bad input


@pytest.mark.parametrize(("sites", "wan", "message"), [
    ([{"name": "a", "max_cards": 8}], {"bandwidth_gbps": 10, "latency_ms": 1}, "token_penalty is required"),
    ([{"name": "a", "max_cards": 0}], {"bandwidth_gbps": 10, "latency_ms": 1, "modes": ["sync"]}, "max_cards"),
    ([{"name": "a", "max_cards": 8, "power": "40"}], {"bandwidth_gbps": 10, "latency_ms": 1, "modes": ["sync"]},
     "not a power with a unit"),
    ([{"name": "a", "max_cards": 8}], {"latency_ms": 1, "modes": ["sync"]}, "bandwidth_gbps is required"),
    ([{"name": "a", "max_cards": 8}], {"bandwidth_gbps": 10, "latency_ms": 1, "modes": ["async"]}, "wan.modes"),
    ([{"name": "a", "max_cards": 8}], {"bandwidth_gbps": 10, "latency_ms": 1, "modes": ["sync"],
                                       "links": [{"sites": ["a", "z"], "bandwidth_gbps": 1}]}, "two site names"),
    # a PUE is facility over IT power, so at least 1 (The Green Grid); 0.5 was taken, halving the site's power
    ([{"name": "a", "max_cards": 8, "pue": 0.5}], {"bandwidth_gbps": 10, "latency_ms": 1, "modes": ["sync"]},
     r"sites\[0\]\.pue: a PUE is facility over IT power, at least 1 \(got 0.5\)"),
])
def test_bad_sites_input(sites: list[dict[str, object]], wan: dict[str, object], message: str) -> None:
    with pytest.raises(InputError, match=message):
        split_sites(raw_405b(sites, wan))


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    text = EXAMPLE.read_text().replace("token_penalty = 0.05\n", "")
    bad = tmp_path / "bad.toml"
    bad.write_text(text)
    p = subprocess.run([sys.executable, "-m", "tpopt", "sites", "--scenario", str(bad)], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 2 and "token_penalty is required" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr


def test_solve_points_a_sites_scenario_to_tpopt_sites() -> None:
    with pytest.raises(InputError, match="tpopt sites"):
        build_scenario(raw_405b([{"name": "a", "max_cards": 8}], {"bandwidth_gbps": 10, "latency_ms": 1}))


def test_a_budget_below_the_cheapest_plan_leaves_none() -> None:
    """cost.max_cost under the cheapest plan within the deadline: no candidate may be chosen (the budget is
    re-checked with the WAN's time and egress), and the report says so."""
    import tomllib

    from tpopt.catalogs import load_catalog
    raw, si = split_sites(tomllib.loads(EXAMPLE.read_text()))
    assert si is not None
    cat = load_catalog()
    free = O.solve_sites(build_scenario(raw, cat), si, cat.market.power["h100-sxm"], "cpsat")
    assert free.best is not None
    capped = O.solve_sites(build_scenario({**raw, "cost": {"max_cost": free.best.cost * 0.999}}, cat), si,
                           cat.market.power["h100-sxm"], "cpsat")
    assert capped.best is None
    d = O.report(capped)
    assert d["status"] == "infeasible" and "no multi-site plan" in O.lines(d)[-1]


def test_dominated_rings_are_pruned() -> None:
    """Four sites, 100 Gbit/s everywhere but a-c and b-d at 10 Gbit/s: of the three rings a-b-c-d, a-b-d-c and
    a-c-b-d, only a-b-c-d avoids both slow links (the other two cross them: 10 Gbit/s), so it alone is kept."""
    link = S.WanLink(100e9, 0.010, 10.0)
    slow = S.WanLink(10e9, 0.010, 10.0)
    si = S.SitesInput(sites=tuple(S.Site(n, 8) for n in "abcd"), wan=link,
                      links=((frozenset("ac"), slow), (frozenset("bd"), slow)))
    assert len(list(O._orders(si, ("a", "b", "c", "d")))) == 3
    (kept,) = O.rings(si, ("a", "b", "c", "d"))
    assert kept.order == ("a", "b", "c", "d") and kept.bandwidth_bps == 100e9
    # without per-pair links every order is the same ring: one kept
    assert len(O.rings(S.SitesInput(sites=si.sites, wan=link), ("a", "b", "c", "d"))) == 1


def test_wan_bandwidth_relaxation_is_the_smallest_bandwidth() -> None:
    """Two sites of 3,000 cards (26 replicas each), synchronous only, over 10 Gbit/s: the 810 GB gradient takes
    2 x 1/2 x 8 x 810e9 / 1e10 = 648 s a step on the WAN against a compute step of about 290 s, so 600 days are
    missed. The relaxation names the WAN bandwidth at which a plan meets them; re-scoring there finds one and
    1 Gbit/s below finds none (the threshold derived by the re-solve one step below), and a full re-solve of
    the scenario at that bandwidth agrees."""
    sites = [{"name": "a", "max_cards": 3000}, {"name": "b", "max_cards": 3000}]
    wan = {"bandwidth_gbps": 10, "latency_ms": 20, "modes": ["sync"]}
    raw, si = split_sites(raw_405b(sites, wan, deadline="600d"))
    assert si is not None
    sc = build_scenario(raw)
    out = O.solve_sites(sc, si, None, "cpsat")
    assert out.best is None
    [rel] = out.relaxations
    assert rel["parameter"] == "WAN bandwidth" and rel["helps"] and rel["current"] == 10
    need = rel["required"]
    assert O.scored_sites(sc, O.with_bandwidth(si, need * 1e9), None, out.replica).best is not None
    assert O.scored_sites(sc, O.with_bandwidth(si, (need - 1) * 1e9), None, out.replica).best is None
    raw2, si2 = split_sites(raw_405b(sites, {**wan, "bandwidth_gbps": need}, deadline="600d"))
    assert si2 is not None
    again = O.solve_sites(build_scenario(raw2), si2, None, "cpsat")
    assert again.best is not None and math.isclose(again.best.cost, rel["cost"], rel_tol=1e-12)
    text = O.lines(O.report(out))
    assert f"  WAN bandwidth  now 10 Gbit/s: >= {need:,} Gbit/s" in text
    assert "no multi-site plan" in text[-1]


def test_export_refuses_a_sites_scenario_naming_the_frameworks() -> None:
    """No export format runs a job over several datacenters (nor DiLoCo): one line naming them (exit 2)."""
    from tpopt.frameworks import FORMATS
    p = subprocess.run([sys.executable, "-m", "tpopt", "export", "--format", "megatron", "--scenario", str(EXAMPLE)],
                       capture_output=True, text=True, check=False)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "multi-datacenter plan" in p.stderr and "DiLoCo" in p.stderr and all(f in p.stderr for f in FORMATS)


# ---------------------------------------------------------------------------------------------
# what moves the plan is stated


def test_the_report_states_the_price_and_the_overheads_behind_its_finish_and_bill() -> None:
    """A new user's trial: the 4-site example's 43,904 cards finish in 145.4 d although their steps take 52.9 d
    (153,269 steps x 29.8 s): the default card MTBF (337 d) and storage bandwidth (7 GB/s for a 5.7 TB
    checkpoint) cost 1.75 runs of overhead, and the bill rests on the catalog's 18-month-old price, none of it
    said. The report now carries the footing of its replicas at one site (the overheads scale with the run's
    length, so their shares are the plan's), and the figures it states explain the finish and the bill:
    steps = 15T x 1.05 (DiLoCo's token penalty) / (12,544 x 8,192 tokens a step), finish = steps x step x
    (1 + save share + failure share); cost = (cards x 2.99 + hosts x 8 NICs x 0.08) USD/h x finish + egress
    (catalogs/accelerators.toml's H100 SXM card-hour and NIC-hour prices)."""
    import os
    import tomllib

    from tpopt.optimizer.sites_mixed import answer

    d = answer(EXAMPLE)
    b, f = d["best"], d["footing"]
    acc = tomllib.loads((ROOT / "catalogs" / "accelerators.toml").read_text())
    assert f["price"]["card_hour"] == acc["h100-sxm"]["price_card_hour"] == 2.99
    stated = {x["input"]: x for x in f["stated"]}
    save, fail = stated["storage bandwidth"]["save_overhead"], stated["card MTBF"]["failure_overhead"]
    assert stated["card MTBF"]["card_mtbf_days"] == 337 and stated["storage bandwidth"]["write_gb_s"] == 7
    steps = 15e12 * 1.05 / (12544 * 8192)
    assert b["steps"] == pytest.approx(steps, rel=1e-12)
    assert b["finish_days"] == pytest.approx(steps * b["compute_step_s"] * (1 + save + fail) / 86400, rel=1e-4)
    assert save + fail > 1.5  # the overheads more than double the run: the figure the user was not shown
    rate = b["cards"] * 2.99 + b["cards"] // 8 * 8 * f["price"]["nic_hour"]
    assert b["cost"] == pytest.approx(rate * b["finish_days"] * 24 + b["egress_usd"], rel=1e-9)
    assert f["evidence"]["p_on_time"] is None  # the one-site finish's, not the sites plan's
    env = {**os.environ, "COLUMNS": "80"}
    p = subprocess.run([sys.executable, "-m", "tpopt", "sites", "--scenario", str(EXAMPLE)], capture_output=True,
                       text=True, timeout=300, env=env)
    text = " ".join(p.stdout.split())
    assert p.returncode == 0 and "price: 2.99 USD/card-h" in text and "plus 0.08 USD per NIC-hour" in text
    assert "card MTBF 337 d (96.3 % of the training time lost to failures on 43,904 cards)" in text
    assert "storage bandwidth 7 GB/s" in text and "saves 78.2 % of the training time" in text
    assert max(len(line) for line in p.stdout.splitlines()) <= 80


def test_the_mixed_report_states_the_mtbf_storage_and_overhead() -> None:
    """The mixed-type example (a site's own card type and price) states the card MTBF and storage bandwidth every
    site's cards share and the best plan's overhead L, the figure that stretches its finish: finish = reserved
    (0) + steps x step x (1 + L)."""
    from tpopt.optimizer.sites_mixed import answer, answer_lines

    d = answer(ROOT / "examples" / "sites-mixed-405b.toml")
    r, b = d["reliability"], d["best"]
    assert r["card_mtbf_days"] == 337 and r["write_gb_s"] == 7 and r["overhead"] == b["overhead"] > 0.5
    assert b["finish_days"] == pytest.approx(b["steps"] * (b["compute_step_s"] + b["exposed_wan_s"])
                                             * (1 + r["overhead"]) / 86400, rel=1e-3)
    text = " ".join(" ".join(answer_lines(d)).split())
    assert f"card MTBF 337 d (every card of every site), storage bandwidth 7 GB/s (default, the superpod-good " \
           f"tier's); checkpoint and failure overhead " \
           f"{100 * r['overhead']:.1f} % of the training time on {b['cards']:,} cards" in text
