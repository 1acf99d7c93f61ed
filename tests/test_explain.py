"""Explaining infeasibility: minimal conflicts, minimal relaxations, plan explanations, sensitivities.

Golden values come from REFERENCE.md (chapter 10.6 design case) or from derivations written out
here, never from the code under test. Tolerances are the printed rounding of the source figure.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tpopt.catalogs.scenario import build_scenario, read_scenario_file, with_overrides
from tpopt.models.plan import Plan
from tpopt.models.units import GIB
from tpopt.optimizer.core import solve
from tpopt.optimizer.explain import (
    Context,
    conflict,
    conflict_detail,
    explain_plan,
    minimal_conflict,
    relaxations,
    sensitivities,
)
from tpopt.optimizer.result import Request, Status
from tpopt.optimizer.space import Space

DESIGN = Path(__file__).resolve().parents[1] / "examples" / "design-case.toml"
REQ = Request(workers=1, seed=0)
# REFERENCE.md conventions: Qwen3-8B N = 8,190,735,360; tokens per step 384 x 8,192 = 3,145,728
N_QWEN3_8B = 8_190_735_360
TOKENS_PER_STEP = 384 * 8192
# the design case, capped at 32 cards (four 8-card hosts) and one accelerator (REFERENCE 10.6)
INFEASIBLE = {"search.max_cards": 32, "schedule.deadline": "30d", "hardware.accelerator": ["rtx4090"],
              "search.accelerator": ["rtx4090"]}


def raw_of(design_path, overrides):
    return with_overrides(read_scenario_file(design_path), overrides)


def scenario(design_path, overrides):
    return build_scenario(raw_of(design_path, overrides))


def feasible(sc, backend="enumerate") -> bool:
    r = solve(sc, backend, REQ)
    assert r.status in (Status.OPTIMAL, Status.INFEASIBLE)
    return r.feasible


@pytest.fixture(scope="module")
def design_infeasible():
    raw = raw_of(DESIGN, INFEASIBLE)
    sc = build_scenario(raw)
    rels = relaxations(sc, "cpsat", REQ, raw=raw)
    return raw, sc, {r.parameter: r for r in rels}


# --- conflict ------------------------------------------------------------------------------------


def test_design_case_is_infeasible_with_32_cards(design_path):
    # REFERENCE 10.6: 32 cards finish in 34.3 d > 30 d; 40 cards do not divide the batch (384 mod 40 = 24)
    sc = scenario(design_path, INFEASIBLE)
    for backend in ("enumerate", "cpsat"):
        assert solve(sc, backend, REQ).status == Status.INFEASIBLE


def test_design_case_conflict_is_deadline_and_max_cards(design_path):
    sc = scenario(design_path, INFEASIBLE)
    space = Space.from_scenario(sc)
    core = minimal_conflict(space, "cpsat", REQ)
    assert core == ["deadline.finish", "cards.max"]


def test_minimal_conflict_is_irreducible_and_no_larger_than_cpsat_core(design_path):
    sc = scenario(design_path, INFEASIBLE)
    space = Space.from_scenario(sc)
    raw_core = conflict(space, REQ)
    core = minimal_conflict(space, "cpsat", REQ)
    assert raw_core is not None and set(core) <= set(raw_core)
    # the conflict alone admits no plan; without any one of its families a plan exists
    assert solve(sc, "enumerate", Request(enforce=frozenset(core), workers=1)).status == Status.INFEASIBLE
    for f in core:
        rest = frozenset(core) - {f}
        assert solve(sc, "enumerate", Request(enforce=rest, workers=1)).feasible, f


def test_conflict_detail_quotes_the_reference_figures(design_path):
    sc = scenario(design_path, INFEASIBLE)
    detail = {d["name"]: d for d in conflict_detail(Context.of(sc, "cpsat", REQ), ["deadline.finish", "cards.max"])}
    # fastest plan within 32 cards: 32 cards, 34.3 d (REFERENCE 10.6 table)
    assert detail["deadline.finish"]["plan"]["cards"] == 32
    assert detail["deadline.finish"]["value"] == pytest.approx(34.3, abs=0.05)
    assert detail["deadline.finish"]["limit"] == 30.0
    # fewest cards that meet 30 d: 48 (24.6 d); 40 does not divide the batch
    assert detail["cards.max"]["value"] == 48 and detail["cards.max"]["limit"] == 32


def test_feasible_request_has_no_conflict(design):
    assert minimal_conflict(Space.from_scenario(design), "cpsat", REQ) is None


def test_unformable_card_count_gives_empty_conflict(design):
    # 40 cards: dp = 40 is no divisor of the batch of 384, so no plan exists whatever the constraints
    req = Request(workers=1, cards=(40,))
    assert minimal_conflict(Space.from_scenario(design), "cpsat", req) == []


# --- relaxations of the design case --------------------------------------------------------------


def test_relaxation_deadline(design_infeasible):
    _, _, r = design_infeasible
    d = r["deadline"]
    # REFERENCE 10.6: 32 cards finish in 34.3 d
    assert d.helps and d.current == 30.0 and d.unit == "d"
    assert d.required_exact == pytest.approx(34.3, abs=0.05)
    assert d.required >= d.required_exact and d.required - d.required_exact < 0.01 + 1e-9
    assert d.plan.plan.cards == 32 and d.plan.feasible


def test_relaxation_max_cards(design_infeasible):
    _, _, r = design_infeasible
    c = r["max_cards"]
    # 40 cards: 384 mod 40 = 24 (no whole micro-batches); 48 cards finish in 24.6 d (REFERENCE 10.6)
    assert c.helps and c.current == 32 and c.required == 48
    assert c.plan.plan.cards == 48
    assert c.plan.metrics["finish_days"] == pytest.approx(24.6, abs=0.05)


def test_relaxation_tokens(design_infeasible):
    _, _, r = design_infeasible
    t = r["tokens"]
    # max iterations = floor(25 d / (78.9 s x 1.0102)) = floor(2,160,000 / 79.705) = 27,099 (+-18 for the
    # printed rounding of 78.9 s); tokens = iterations x 3,145,728 -> ~85.2B
    steps = math.floor(25 * 86400 / (78.9 * 1.0102))
    assert t.helps and t.direction == "<=" and t.current == 100.0
    assert abs(t.required_exact * 1e9 / TOKENS_PER_STEP - steps) <= 18
    assert (t.required_exact * 1e9) % TOKENS_PER_STEP == 0
    assert t.required_exact == pytest.approx(85.2, abs=0.1)
    assert t.required <= t.required_exact


def test_relaxation_efficiency(design_infeasible):
    _, _, r = design_infeasible
    e = r["efficiency"]
    # REFERENCE 10.6: "32 cards would need MFU ~47 %". Budget per step 25 d / (31,790 x 1.0102) = 67.26 s;
    # compute 78.3 s at 40 % scales as 1/eta, plus 0.08 s exposed and 0.5 s input wait:
    # 78.3 x 0.40 / eta + 0.58 <= 67.26  ->  eta >= 0.4697
    budget = 25 * 86400 / (31790 * 1.0102)
    eta = 78.3 * 0.40 / (budget - 0.58)
    assert e.helps and e.unit == "%" and e.current == pytest.approx(40.0)
    assert e.required_exact == pytest.approx(eta * 100, abs=0.1)
    assert e.required >= e.required_exact


def test_relaxation_reserved(design_infeasible):
    _, _, r = design_infeasible
    v = r["reserved"]
    # finish 34.3 d with 5 reserved: 29.3 d of training incl. overhead -> reserved <= 30 - 29.3 = 0.7 d
    assert v.helps and v.direction == "<=" and v.current == 5.0
    assert v.required_exact == pytest.approx(0.7, abs=0.05)
    assert v.required <= v.required_exact


def test_relaxations_that_cannot_help_say_so(design_infeasible):
    _, _, r = design_infeasible
    mem = r["usable_memory"]
    # memory does not enter the conflict (32 cards need 13.8 GiB of 22): deadline + cards still conflict
    assert mem.helps is False and mem.required is None
    assert mem.blocked_by == ["deadline.finish", "cards.max"]
    # RTX 4090: the DP ring runs at min(PCIe 32 GB/s, 8 x 25 GB/s) and the exposed part is 0.08 s
    # (REFERENCE 10.3.3): no NIC makes 32 cards fast enough
    assert r["nic_bandwidth"].helps is False
    assert "max_cost" not in r  # no budget cap in the scenario


def test_relaxation_accelerator(design_infeasible):
    _, _, r = design_infeasible
    a = r["accelerator"]
    assert a.helps and a.current == "rtx4090" and a.required != "rtx4090"
    names = {o["accelerator"] for o in a.options}
    assert {"rtx4090", "h100-sxm", "a100-80gb-sxm"} <= names  # every catalog card, not only the scenario's
    ok = [o for o in a.options if o["feasible"]]
    assert a.required == min(ok, key=lambda o: o["cost"])["accelerator"]
    # REFERENCE 10.1: H100 at 40 % needs 6 cards for 30 days -> one 8-card host
    h100 = next(o for o in a.options if o["accelerator"] == "h100-sxm")
    assert h100["feasible"] and h100["plan"]["cards"] == 8
    rtx = next(o for o in a.options if o["accelerator"] == "rtx4090")
    assert rtx["current"] and not rtx["feasible"]


APPLY_AND_SHRINK = {
    # parameter: (override key, how to print a value in the override's unit)
    "deadline": ("schedule.deadline", lambda x: f"{x:.6f}d"),
    "tokens": ("task.tokens", lambda x: f"{x:.6f}B"),
    "efficiency": ("hardware.efficiency", lambda x: f"{x:.6f}%"),
    "reserved": ("schedule.reserved", lambda x: f"{x:.6f}d"),
    "max_cards": ("search.max_cards", lambda x: int(math.floor(x))),
}


@pytest.mark.parametrize("parameter", sorted(APPLY_AND_SHRINK))
def test_applying_a_relaxation_makes_it_feasible_and_one_percent_less_does_not(design_infeasible, parameter):
    raw, _, r = design_infeasible
    rel = r[parameter]
    assert rel.helps and rel.apply
    assert feasible(build_scenario(with_overrides(raw, rel.apply)))
    # a change 1 % smaller than the exact threshold (these relations are monotone) stays infeasible
    key, fmt = APPLY_AND_SHRINK[parameter]
    smaller = rel.current + 0.99 * (rel.required_exact - rel.current)
    assert not feasible(build_scenario(with_overrides(raw, {key: fmt(smaller)})))


def test_applied_relaxation_is_feasible_for_the_solver_backends(design_infeasible):
    raw, _, r = design_infeasible
    sc = build_scenario(with_overrides(raw, r["deadline"].apply))
    assert feasible(sc, "cpsat") and feasible(sc, "highs")
    sc = build_scenario(with_overrides(raw, r["accelerator"].apply))
    assert feasible(sc, "cpsat")


# --- memory: a model that fits on no card --------------------------------------------------------


def test_llama3_405b_on_few_cards_needs_more_memory_than_any_card(design_path):
    # N(Llama 3.1 405B), counted as REFERENCE.md counts Qwen3-8B (untied embeddings, two RMSNorms per layer,
    # final norm; no q/k norm): 2 x 128,256 x 16,384 + 126 x (2 x 16,384^2 + 2 x 16,384 x 1,024
    # + 3 x 16,384 x 53,248 + 2 x 16,384) + 16,384 = 405,853,388,800.
    n = 2 * 128256 * 16384 + 126 * (2 * 16384**2 + 2 * 16384 * 1024 + 3 * 16384 * 53248 + 2 * 16384) + 16384
    assert n == 405_853_388_800
    ov = {"model.name": "llama3-405b", "task.tokens": "10B", "schedule.deadline": "2000d",
          "search.max_cards": 16, "hardware.accelerator": ["rtx4090"], "search.accelerator": ["rtx4090"]}
    raw = raw_of(design_path, ov)
    sc = build_scenario(raw)
    space = Space.from_scenario(sc)
    core = minimal_conflict(space, "cpsat", REQ)
    assert "memory.per_card" in core
    rels = {r.parameter: r for r in relaxations(sc, "cpsat", REQ, raw=raw)}
    mem = rels["usable_memory"]
    # ZeRO-3 on 16 cards: 16 N / 16 = N bytes of state per card, plus the 10 GiB activation reserve
    need = n / GIB + 10.0
    assert mem.helps and mem.required_exact == pytest.approx(need, abs=1e-6)
    assert mem.required >= mem.required_exact and mem.plan.plan.cards == 16
    assert "more than any catalog card" in mem.note
    assert feasible(build_scenario(with_overrides(raw, mem.apply)))
    # more cards: memory 16N/d + 10 GiB > 22 GiB up to the 384 cards the batch allows -> cannot help
    assert rels["max_cards"].helps is False
    assert rels["accelerator"].helps is False


def test_activation_reserve_larger_than_any_card(design_path):
    # 200 GiB of activations fit on no catalog card (largest usable: 166 GiB)
    raw = raw_of(design_path, {"memory.activation_reserve": "200GiB"})
    sc = build_scenario(raw)
    assert minimal_conflict(Space.from_scenario(sc), "cpsat", REQ) == ["memory.per_card"]
    rels = {r.parameter: r for r in relaxations(sc, "cpsat", REQ, raw=raw,
                                                only=("usable_memory", "max_cards", "deadline"))}
    mem = rels["usable_memory"]
    # the least memory among plans meeting every other family: 48 cards (REFERENCE 10.4: 64 cards would
    # demand 384 / 39.7 s = 9.7 seq/s > 8 from the input workers), states 16 N / 48
    need = 200.0 + 16 * N_QWEN3_8B / 48 / GIB
    assert mem.helps and mem.required_exact == pytest.approx(need, abs=1e-6)
    assert mem.plan.plan.cards == 48
    assert feasible(build_scenario(with_overrides(raw, mem.apply)))
    smaller = 22.0 + 0.99 * (mem.required_exact - 22.0)
    assert not feasible(build_scenario(with_overrides(raw, {"hardware.usable_memory": f"{smaller:.6f}GiB"})))
    assert rels["max_cards"].helps is False and rels["deadline"].helps is False
    assert rels["deadline"].blocked_by == ["memory.per_card"]


# --- budget cap and NIC bandwidth -----------------------------------------------------------------


def test_budget_cap_relaxation(design_path):
    # design case optimum: 48 cards x 0.59 USD + 6 hosts x 8 NICs x 0.04 USD = 30.24 USD/h for 24.6 d
    raw = raw_of(design_path, {"cost.max_cost": 15500, "hardware.accelerator": ["rtx4090"],
                               "search.accelerator": ["rtx4090"]})
    sc = build_scenario(raw)
    core = minimal_conflict(Space.from_scenario(sc), "cpsat", REQ)
    assert core == ["deadline.finish", "budget.cost"]
    rels = {r.parameter: r for r in relaxations(sc, "cpsat", REQ, raw=raw, only=("max_cost", "deadline"))}
    b = rels["max_cost"]
    assert b.helps and b.required_exact == pytest.approx(30.24 * 24 * 24.6, abs=30.24 * 24 * 0.05)
    assert feasible(build_scenario(with_overrides(raw, b.apply)))
    assert not feasible(build_scenario(with_overrides(raw, {"cost.max_cost": 15500 + 0.99 * (b.required_exact
                                                                                               - 15500)})))


def test_nic_bandwidth_relaxation_when_one_shared_nic_limits(design_path):
    # REFERENCE 10.6.2: one shared 200G NIC per 8-card host makes the ring 25 GB/s (link 15.4 s on 48 cards)
    # and "if prefetch fails" the whole link time is exposed: 52.2 + 15.4 + 0.5 = 68.1 s > 67.2 s budget.
    # The ring runs at min(PCIe 32 GB/s, B_nic) -> 48 cards need 25 x 15.4 / (67.2 - 52.2 - 0.5) GB/s.
    ov = {"hardware.nics_per_host": 1, "comm.overlap": False, "search.max_cards": 48,
          "hardware.accelerator": ["rtx4090"], "search.accelerator": ["rtx4090"]}
    raw = raw_of(design_path, ov)
    sc = build_scenario(raw)
    assert not feasible(sc)
    nic = relaxations(sc, "cpsat", REQ, raw=raw, only=("nic_bandwidth",))[0]
    assert nic.helps and nic.current == pytest.approx(25.0)
    assert nic.required_exact == pytest.approx(25 * 15.4 / (67.2 - 52.2 - 0.5), rel=0.02)
    assert nic.required_exact < 32.0  # below the PCIe cap, so a faster NIC does help
    assert feasible(build_scenario(with_overrides(raw, nic.apply)))
    smaller = 25.0 + 0.99 * (nic.required_exact - 25.0)
    assert not feasible(build_scenario(with_overrides(raw, {"hardware.nic": f"{smaller:.6f}GB/s"})))


# --- a given plan ---------------------------------------------------------------------------------


def test_explain_infeasible_plan(design):
    d = explain_plan(design, Plan("rtx4090", 32), "cpsat", REQ)
    assert d["status"] == "infeasible"
    v = {x["name"]: x for x in d["violated"]}
    assert set(v) == {"step.budget", "deadline.finish"}
    # REFERENCE 10.6: 34.3 d against 30; step 78.9 s against 25 d / (31,790 x 1.0102) = 67.3 s
    assert v["deadline.finish"]["value"] == pytest.approx(34.3, abs=0.05)
    assert v["deadline.finish"]["excess"] == pytest.approx(4.3, abs=0.05)
    assert v["step.budget"]["value"] == pytest.approx(78.9, abs=0.05)
    assert v["step.budget"]["limit"] == pytest.approx(25 * 86400 / (31790 * 1.0102), abs=0.05)
    assert d["optimum"]["plan"]["cards"] == 48 and not d["optimum"]["this_plan_is_optimal"]


def test_explain_feasible_optimal_plan(design):
    d = explain_plan(design, Plan("rtx4090", 48), "cpsat", REQ)
    assert d["status"] == "feasible" and d["violated"] == []
    # one host fewer = 40 cards: 384 mod 40 = 24, no valid layout; two fewer = 32 cards: 34.3 d > 30
    f40, f32 = d["fewer_hosts"][:2]
    assert f40["cards"] == 40 and not f40["valid_layout"]
    assert {v["name"] for v in f40["violates"]} == {"batch.divisibility"}
    assert f32["cards"] == 32 and f32["valid_layout"] and not f32["feasible"]
    assert "deadline.finish" in d["binding"]
    assert d["optimum"]["this_plan_is_optimal"]
    assert [b["name"] for b in d["optimum"]["binding"]] == ["deadline.finish"]
    tight = {t["name"]: t for t in d["tightness"]}
    assert tight["deadline.finish"]["slack"] == pytest.approx(5.4, abs=0.05)  # REFERENCE: 5.4 days to spare
    assert tight["memory.per_card"]["slack"] == pytest.approx(9.5, abs=0.05)  # REFERENCE 10.2: 9.5 GiB margin


def test_explain_feasible_but_dearer_plan(design):
    # 64 cards violate the input pipeline: 8 seq/s supply (4 workers x 2) vs 384 / 39.7 s demand
    d = explain_plan(design, Plan("rtx4090", 64), "cpsat", REQ)
    assert [v["name"] for v in d["violated"]] == ["input.throughput"]
    assert d["violated"][0]["limit"] == pytest.approx(8.0)


# --- sensitivities ---------------------------------------------------------------------------------


def test_sensitivities_design_case(design_path):
    sc = scenario(design_path, {"hardware.accelerator": ["rtx4090"], "search.accelerator": ["rtx4090"]})
    rows = {r["change"]: r for r in sensitivities(sc, "cpsat", REQ)}
    assert set(rows) == {"deadline +1 d", "deadline -1 d", "one host fewer", "usable memory +1 GiB"}
    # 48 cards stay the optimum at 29 and 31 days (24.6 d finish; 32 cards need 34.3 d)
    assert rows["deadline +1 d"]["delta"] == pytest.approx(0.0, abs=1e-6)
    assert rows["deadline -1 d"]["delta"] == pytest.approx(0.0, abs=1e-6)
    assert rows["usable memory +1 GiB"]["delta"] == pytest.approx(0.0, abs=1e-6)
    # one host fewer: 40 cards do not divide the batch, 32 miss the deadline
    assert rows["one host fewer"]["status"] == "infeasible" and rows["one host fewer"]["to"] == 40


def test_sensitivity_of_a_deadline_that_just_admits_32_cards(design_path):
    # deadline 35 d: 32 cards (34.3 d, 20.16 USD/h) are optimal; at 34 d they miss and 48 cards (24.6 d,
    # 30.24 USD/h) take over: delta = 24 x (30.24 x 24.6 - 20.16 x 34.3) USD (+-60 for the printed rounding)
    sc = scenario(design_path, {"schedule.deadline": "35d", "hardware.accelerator": ["rtx4090"],
                                "search.accelerator": ["rtx4090"]})
    rows = {r["change"]: r for r in sensitivities(sc, "enumerate", REQ)}
    assert rows["deadline -1 d"]["plan"]["cards"] == 48
    assert rows["deadline -1 d"]["delta"] == pytest.approx(24 * (30.24 * 24.6 - 20.16 * 34.3), abs=60)
    assert rows["deadline +1 d"]["delta"] == pytest.approx(0.0, abs=1e-6)
    # one host fewer than 32: 24 cards finish in 44.0 d (REFERENCE 10.6 "why not cheaper") > 35
    assert rows["one host fewer"]["status"] == "infeasible"


def test_sensitivities_of_infeasible_request_are_empty(design_path):
    assert sensitivities(scenario(design_path, INFEASIBLE), "enumerate", REQ) == []


# --- issue 14: the plans a conflict names meet every other family; narrowed re-solves are exact ----------

OPEN_ZERO = dict(INFEASIBLE, **{"search.zero_stage": [0, 1, 2, 3]})


def test_conflict_names_only_plans_meeting_every_other_family(design_path):
    # With ZeRO 0-3 open and 32 cards at most, the fastest plan that meets cards.max *alone* is ZeRO-0
    # (no parameter gathers), which needs 16 N = 122 GiB per card (REFERENCE 10.2) against 22 GiB: it is
    # no plan at all. The plan shown for deadline.finish must meet memory too: ZeRO-3 at 32 cards,
    # 34.33 d (REFERENCE 10.6), and the plan shown for cards.max must be the 48-card ZeRO-3 plan.
    raw = raw_of(design_path, OPEN_ZERO)
    sc = build_scenario(raw)
    ctx = Context.of(sc, "cpsat", REQ)
    core = minimal_conflict(Space.from_scenario(sc), "cpsat", REQ, ctx=ctx)
    assert core == ["deadline.finish", "cards.max"]
    detail = {d["name"]: d for d in conflict_detail(ctx, core)}
    for name, d in detail.items():
        assert d["violates"] == [name], d  # the named plan breaks the conflict's family and nothing else
        assert d["plan"]["zero_stage"] == 3
    assert detail["deadline.finish"]["plan"]["cards"] == 32 and round(detail["deadline.finish"]["value"], 2) == 34.33
    assert detail["cards.max"]["plan"]["cards"] == 48
    assert 16 * N_QWEN3_8B / GIB > 22  # why ZeRO-0 was never a plan: 122.1 GiB of states alone


def _without_narrowing(monkeypatch):
    monkeypatch.setattr(Context, "narrowed", lambda self, sc, families, variables=None: None)


@pytest.mark.parametrize("overrides", [OPEN_ZERO, dict(OPEN_ZERO, **{"search.micro_batch": [1, 2], "search.tp": [1, 2],
                                                                    "schedule.reserved": "8d"})])
def test_narrowed_resolves_give_the_same_relaxations(design_path, overrides, monkeypatch):
    # Context.narrowed restricts each re-solve to the layouts meeting the families the relaxed input does
    # not enter; it must never change an answer (value, plan, verdict) -- only the work.
    raw = raw_of(design_path, overrides)
    sc = build_scenario(raw)

    def answers():
        return [{k: v for k, v in r.as_dict().items() if k not in ("seconds", "solves")}
                for r in relaxations(sc, "cpsat", REQ, raw=raw)]

    fast = answers()
    _without_narrowing(monkeypatch)
    assert answers() == fast
