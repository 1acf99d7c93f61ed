"""The registry of constraint families (tpopt.models.families) is the only place family names are listed.

- no product .py file outside models/families.py quotes a family name (docstrings and comments may);
- every family the evaluator and the RL evaluator return is registered, in report order;
- every derived view equals the hand-kept list it replaced (report and deletion order are observable).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tpopt.catalogs.rl import load_rl_scenario
from tpopt.catalogs.scenario import load_scenario
from tpopt.models import evaluate as E
from tpopt.models import families as F
from tpopt.models.plan import Plan
from tpopt.optimizer import calibrate, decompose, enumerate, explain, outer, report, space
from tpopt.optimizer import rl as RL
from tpopt.optimizer.sweep import spec as sweep_spec

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("models", "optimizer", "catalogs", "cli", "benchmarks", "api.py", "errors.py", "frames.py", "__main__.py")
SCENARIO_KEYS = {("catalogs/rl.py", F.RL_STALENESS), ("cli/rl.py", F.RL_STALENESS)}  # the [rl] staleness input key


def _product_files():
    for entry in PRODUCT:
        path = ROOT / entry
        yield from ([path] if path.is_file() else sorted(path.rglob("*.py")))


def _docstrings(tree) -> set:
    """ids of the string constants that are docstrings or bare expression statements."""
    return {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}


def _quoted_family_names(path: Path) -> list[tuple[int, str]]:
    """(line, name) of every string constant in ``path`` that is a family name or its "ok." table."""
    rel = path.relative_to(ROOT).as_posix()
    tree = ast.parse(path.read_text(), rel)
    skip = _docstrings(tree)
    names = set(F.BY_NAME) | {"ok." + n for n in F.BY_NAME}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names
            and id(node) not in skip and (rel, node.value) not in SCENARIO_KEYS]


def test_the_registry_is_the_only_place_family_names_are_quoted():
    registry = ROOT / "models" / "families.py"
    found = {f"{p.relative_to(ROOT)}:{line}": name for p in _product_files() if p != registry
             for line, name in _quoted_family_names(p)}
    assert not found, f"quoted family names outside models/families.py (use its constants): {found}"
    assert _quoted_family_names(registry)  # the check sees quoted names where they are


def test_declarations_are_well_formed():
    assert len(F.BY_NAME) == len(F.REGISTRY)
    for f in F.REGISTRY:
        assert f.kind in F.KINDS and set(f.scopes) <= set(F.SCOPES) and f.scopes
        assert f.structural == (f.kind == F.KIND_RULE)
        assert f.form_of is None or F.BY_NAME[f.form_of].encoded
        assert set(f.moved_by) <= set(explain.PARAMS)
        assert f.statement(F.PRETRAINING) == f.doc
    assert F.family(F.BUDGET) is F.BY_NAME["budget.cost"]
    assert (F.BUDGET, F.DEADLINE, F.CARDS, F.STEP_BUDGET) == ("budget.cost", "deadline.finish", "cards.max",
                                                               "step.budget")


@pytest.mark.parametrize("example", ["design-case.toml", "qwen3-30b-a3b.toml"])
def test_every_family_the_evaluator_returns_is_registered_in_report_order(example):
    sc = load_scenario(ROOT / "examples" / example)
    acc = sc.search.accelerators[0]
    plan = E.resolve_plan(sc, Plan(acc, sc.system(acc).acc.cards_per_host, zero_stage=1))
    r = E.evaluate_arrays(sc, acc, tp=plan.tp, pp=plan.pp, dp=plan.dp, micro_batch=plan.micro_batch,
                          zero_stage=plan.zero_stage, nics_per_host=plan.nics_per_host,
                          save_interval_s=plan.save_interval_s)
    returned = tuple(k[1] for k in r if isinstance(k, tuple) and k[0] == "c")
    assert returned == F.PRETRAINING_NAMES
    names = [c.name for c in E.evaluate(sc, plan).constraints]
    assert names == [n for n in F.PRETRAINING_NAMES if n in names]


def test_every_family_the_rl_evaluator_returns_is_registered():
    pb = RL.RLProblem(load_rl_scenario(ROOT / "examples" / "rl-grpo-qwen3-8b.toml"))
    lb = pb.learner_bound("h100-sxm", 8)
    seen = set()
    for placement in ("separate", "shared"):
        ev = pb.evaluate(RL.RLDecision("h100-sxm", placement, 8, 16, 8, 0, 0, "sharded"), lb)
        assert set(ev.checks) <= set(F.RL_NAMES)
        seen |= set(ev.checks)
    assert seen == set(F.RL_NAMES) - set(F.RL_STRUCTURAL)
    best = RL.solve(pb).best
    rows = [row["name"] for row in RL.constraint_rows(best, RL.FAMILIES)]
    assert rows == [n for n in F.RL_REPORTED if n in rows]


# the hand-kept lists the registry replaced, as they were (report and deletion order are observable)
OLD_CONSTRAINTS = ("memory.per_card", "memory.host", "batch.divisibility", "layout.whole_hosts",
                   "layout.tp_within_host", "layout.heads_divisible", "layout.pp_divides_layers",
                   "layout.schedule_shape", "layout.ep_divides_experts", "layout.ep_group", "moe.capacity_drops",
                   "step.budget", "input.throughput", "checkpoint.backlog", "deadline.finish", "cards.max",
                   "budget.cost")
OLD_STRUCTURAL = ("batch.divisibility", "layout.whole_hosts", "layout.tp_within_host", "layout.heads_divisible",
                  "layout.pp_divides_layers", "layout.schedule_shape", "layout.ep_divides_experts", "layout.ep_group")
OLD_RL_FAMILIES = ("rl.learner_layout", "rl.learner_memory", "rl.kv_capacity", "rl.rollout_memory",
                   "rl.handoff_memory", "rl.staleness", "checkpoint.backlog", "deadline.finish", "cards.max",
                   "budget.cost")
OLD_RL_SPEC = {
    "rl.learner_layout": ("", 1.0, "a learner layout exists at the card count (batch, host and head rules)"),
    "rl.learner_memory": ("GiB", 2**30, "learner peak memory per card <= usable memory"),
    "rl.kv_capacity": ("GiB", 2**30, "KV of the rollout batch (and of one longest sequence) <= KV pool"),
    "rl.rollout_memory": ("GiB", 2**30, "rollout card: weights + KV pool + common, and the sync buffer, <= usable"),
    "rl.handoff_memory": ("GiB", 2**30, "shared cards: staged hand-off peak (learner peak + received weights + "
                                        "common) <= usable"),
    "rl.staleness": ("steps", 1.0, "policy lag <= staleness allowed"),
    "rl.stage_balance": ("samples/s", 1.0, "useful samples/s the deadline needs <= min(r_learn, q min(r_gen, "
                                           "r_verify)) (per-stage form of deadline.finish)"),
    "checkpoint.backlog": ("s", 1.0, "checkpoint write time <= save interval"),
    "deadline.finish": ("d", 86400.0, "T_finish <= deadline"),
    "cards.max": ("cards", 1.0, "learner + rollout cards <= max_cards"),
    "budget.cost": ("USD", 1.0, "cost <= budget cap"),
}
OLD_AFFECTS = {"deadline": {"deadline.finish", "checkpoint.backlog"}, "max_cards": {"cards.max"},
               "tokens": {"deadline.finish", "budget.cost"},
               "efficiency": {"deadline.finish", "budget.cost", "input.throughput"},
               "usable_memory": {"memory.per_card"},
               "nic_bandwidth": {"deadline.finish", "budget.cost", "input.throughput"},
               "reserved": {"deadline.finish", "budget.cost"}, "max_cost": {"budget.cost"},
               "max_drop": {"moe.capacity_drops"}, "accelerator": set(OLD_CONSTRAINTS) - {"step.budget"},
               "card_price": {"budget.cost"}}  # added with issue 25: the price per card-hour that fits the budget


def test_derived_views_equal_the_old_lists():
    assert E.CONSTRAINT_NAMES == OLD_CONSTRAINTS
    assert E.MOE_FAMILIES == ("layout.ep_divides_experts", "layout.ep_group", "moe.capacity_drops")
    assert [(c.unit, c.scale, c.structural) for c in E.CONSTRAINTS][:2] == [("GiB", 2**30, False)] * 2
    assert E.SPEC["deadline.finish"].doc == "T_finish <= deadline" and E.SPEC["moe.capacity_drops"].scale == 0.01
    assert space.FAMILIES == tuple(n for n in OLD_CONSTRAINTS if n != "step.budget")
    assert space.STRUCTURAL == OLD_STRUCTURAL
    assert space.EXACT == ("checkpoint.backlog", "memory.host", "moe.capacity_drops")
    assert report.RELAXABLE == tuple(n for n in space.FAMILIES if n not in OLD_STRUCTURAL)
    assert explain.DELETION_ORDER == OLD_STRUCTURAL + ("budget.cost", "checkpoint.backlog", "memory.host",
                                                       "input.throughput", "deadline.finish", "memory.per_card",
                                                       "cards.max")
    assert explain.MODEL_FAMILIES == ("batch.divisibility", "layout.heads_divisible", "layout.pp_divides_layers",
                                      "layout.schedule_shape")
    assert explain.EVIDENCE == {"deadline.finish": ("finish_s", "time", "the fastest plan"),
                                "memory.per_card": ("memory_per_card", None, "the plan with the least memory per card"),
                                "cards.max": ("cards", None, "the plan with the fewest cards")}
    assert {name: set(p.affects) for name, p in explain.PARAMS.items()} == OLD_AFFECTS
    assert outer.LIMIT_FAMILIES == ("deadline.finish", "budget.cost")
    assert sweep_spec.SWEPT_FAMILIES == ("deadline.finish", "cards.max", "budget.cost")
    assert decompose.HUB_RULES == OLD_STRUCTURAL[:5]
    assert calibrate.CHOICE_CONSTRAINTS == ("memory.per_card", "memory.host") + OLD_STRUCTURAL[:6]
    assert set(enumerate._RULES) == set(OLD_STRUCTURAL) | {"memory.host", "moe.capacity_drops"}
    assert RL.FAMILIES == OLD_RL_FAMILIES and RL.STRUCTURAL == ("rl.learner_layout",)
    assert RL.RELAXABLE == OLD_RL_FAMILIES[1:]
    assert RL.SPEC == OLD_RL_SPEC and tuple(RL.SPEC) == tuple(OLD_RL_SPEC)
    assert RL.TRAINER_STRUCTURAL == frozenset(OLD_STRUCTURAL[:6])
    assert RL.TRAINER_MEMORY == frozenset({"memory.per_card", "memory.host"})
    assert F.RL_REPORTED == OLD_RL_FAMILIES + ("rl.stage_balance",)
