"""The registry of constraint families (tpopt.models.families) is the only place family names are listed.

- no product .py file outside models/families.py quotes a family name (docstrings and comments may);
- every family the evaluator and the RL evaluator return is registered, in report order;
- every derived view is the subsequence of the registry its declaration selects, and keeps the order of the
  hand-kept list it replaced for the families that list named (report and deletion order are observable), so
  a new family edits no test;
- every family's declared table is a table of the space, its declared limit the evaluator's limit, and the
  layout evaluator glues a table over the save variables with the save choice whatever the family;
- the readers of a family's limit and table use the declaration: no product file outside a stated list reads a
  task's ``deadline_s`` (they call ``F.limit(F.DEADLINE, sc)``) or spells an "ok." table name by hand (they call
  ``F.ok_table``).
"""

from __future__ import annotations

import ast
import itertools
from dataclasses import replace
from pathlib import Path

import numpy as np
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
#: every product module: the packages, the benchmarks and each module at the root (derived: api.py, presentation.py,
#: plan_fields.py and frameworks.py at the user's edge, ... so a module moved to the root stays checked)
PRODUCT = ("models", "optimizer", "catalogs", "cli", "benchmarks", *sorted(p.name for p in ROOT.glob("*.py")))
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


# the hand-kept lists the registry replaced, as they were: the derived views keep their order for these families
OLD_CONSTRAINTS = ("memory.per_card", "memory.host", "batch.divisibility", "layout.whole_hosts",
                   "layout.tp_within_host", "layout.heads_divisible", "layout.pp_divides_layers",
                   "layout.schedule_shape", "layout.ep_divides_experts", "layout.ep_group", "moe.capacity_drops",
                   "step.budget", "input.throughput", "checkpoint.backlog", "deadline.finish", "cards.max",
                   "budget.cost")
OLD_STRUCTURAL = ("batch.divisibility", "layout.whole_hosts", "layout.tp_within_host", "layout.heads_divisible",
                  "layout.pp_divides_layers", "layout.schedule_shape", "layout.ep_divides_experts", "layout.ep_group")
OLD_EXACT = ("checkpoint.backlog", "memory.host", "moe.capacity_drops")
OLD_DELETION = OLD_STRUCTURAL + ("budget.cost", "checkpoint.backlog", "memory.host", "input.throughput",
                                 "deadline.finish", "memory.per_card", "cards.max")
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
               "card_price": {"budget.cost"},  # added with issue 25: the price per card-hour that fits the budget
               # added with issue 37: the storage a checkpoint is written to, the input pipeline's rate
               "write_bandwidth": {"deadline.finish", "checkpoint.backlog", "budget.cost"},
               "input_rate": {"input.throughput"},
               "global_batch": {"batch.divisibility", "layout.schedule_shape", "input.throughput", "deadline.finish",
                                "budget.cost"},
               # added with issue 37: NICs per host (bandwidth across hosts, and each NIC's price)
               "nics_per_host": {"deadline.finish", "budget.cost", "input.throughput"}}
OLD_MODEL = ("batch.divisibility", "layout.heads_divisible", "layout.pp_divides_layers", "layout.schedule_shape")
OLD_HUB_RULES = OLD_STRUCTURAL[:5]
OLD_CHOICE = ("memory.per_card", "memory.host") + OLD_STRUCTURAL[:6]
OLD_LIMIT = ("deadline.finish", "budget.cost")
OLD_SWEPT = ("deadline.finish", "cards.max", "budget.cost")
OLD_EVIDENCE = {"deadline.finish": ("finish_s", "time", "the fastest plan"),
                "memory.per_card": ("memory_per_card", None, "the plan with the least memory per card"),
                "cards.max": ("cards", None, "the plan with the fewest cards")}


def _kept_order(old, derived) -> bool:
    """The families ``old`` named that ``derived`` has, in ``old``'s order (``derived`` may add families)."""
    return [n for n in derived if n in old] == [n for n in old if n in derived]


def _selected(scope, keep):
    """The names of the families of ``scope`` that ``keep`` accepts, in declaration order (computed here)."""
    return tuple(f.name for f in F.REGISTRY if scope in f.scopes and keep(f))


def _by_rank(names, rank):
    """``names`` sorted by ``rank`` (each name's rank distinct, checked)."""
    ranks = [rank(n) for n in names]
    assert len(set(ranks)) == len(ranks), f"ranks not distinct: {dict(zip(names, ranks, strict=True))}"
    return tuple(n for _, n in sorted(zip(ranks, names, strict=True)))


def test_report_views_are_the_registry_in_declaration_order():
    """The evaluator's report order is the pre-training families in declaration order; the solved families are
    those less the reported forms; every view keeps the old lists' order for the families they named."""
    pre = _selected(F.PRETRAINING, lambda f: True)
    assert E.CONSTRAINT_NAMES == F.PRETRAINING_NAMES == pre
    assert set(OLD_CONSTRAINTS) <= set(pre) and _kept_order(OLD_CONSTRAINTS, pre)
    assert tuple(c.name for c in E.CONSTRAINTS) == pre and all(E.SPEC[n] is F.BY_NAME[n] for n in pre)
    assert E.MOE_FAMILIES == _selected(F.PRETRAINING, lambda f: f.moe_only)
    assert set(E.MOE_FAMILIES) >= {"layout.ep_divides_experts", "layout.ep_group", "moe.capacity_drops"}
    assert [(c.unit, c.scale, c.structural) for c in E.CONSTRAINTS][:2] == [("GiB", 2**30, False)] * 2
    assert E.SPEC["deadline.finish"].doc == "T_finish <= deadline" and E.SPEC["moe.capacity_drops"].scale == 0.01
    assert space.FAMILIES == F.SOLVED == tuple(n for n in pre if F.BY_NAME[n].form_of is None)
    assert "step.budget" in pre and "step.budget" not in space.FAMILIES
    assert all(F.BY_NAME[n].form_of in space.FAMILIES for n in pre if n not in space.FAMILIES)
    assert space.STRUCTURAL == _selected(F.PRETRAINING, lambda f: f.kind == F.KIND_RULE)
    assert set(OLD_STRUCTURAL) <= set(space.STRUCTURAL) and _kept_order(OLD_STRUCTURAL, space.STRUCTURAL)
    assert report.RELAXABLE == tuple(n for n in space.FAMILIES if n not in space.STRUCTURAL)


def test_solver_views_are_the_declarations_they_select():
    """Each view a solver, explain, the sweep or the decomposition reads is the families whose declaration
    selects it, in declaration order or the declared rank's order; old members keep their order."""
    solved = space.FAMILIES
    assert space.EXACT == _by_rank([n for n in solved if F.BY_NAME[n].exact_rank is not None],
                                   lambda n: F.BY_NAME[n].exact_rank)
    assert set(OLD_EXACT) <= set(space.EXACT) and _kept_order(OLD_EXACT, space.EXACT)
    assert not set(space.EXACT) & set(space.STRUCTURAL)
    ranked = [n for n in solved if F.BY_NAME[n].deletion_rank is not None]
    assert explain.DELETION_ORDER == space.STRUCTURAL + _by_rank(ranked, lambda n: F.BY_NAME[n].deletion_rank)
    assert not set(ranked) & set(space.STRUCTURAL) and len(set(explain.DELETION_ORDER)) == len(explain.DELETION_ORDER)
    assert set(OLD_DELETION) <= set(explain.DELETION_ORDER) and _kept_order(OLD_DELETION, explain.DELETION_ORDER)
    assert explain.MODEL_FAMILIES == _selected(F.PRETRAINING, lambda f: f.model_only)
    assert set(explain.MODEL_FAMILIES) <= set(space.STRUCTURAL)
    assert set(OLD_MODEL) <= set(explain.MODEL_FAMILIES) and _kept_order(OLD_MODEL, explain.MODEL_FAMILIES)
    assert explain.EVIDENCE == {f.name: f.evidence for f in F.PRETRAINING_FAMILIES if f.evidence is not None}
    assert OLD_EVIDENCE.items() <= explain.EVIDENCE.items()
    for name, p in explain.PARAMS.items():
        moved = set(solved) if name in F.EVERY_FAMILY_INPUTS else {n for n in solved if name in F.BY_NAME[n].moved_by}
        assert set(p.affects) == moved and OLD_AFFECTS[name] <= moved, name
    assert set(OLD_AFFECTS) == set(explain.PARAMS)
    assert outer.LIMIT_FAMILIES == _selected(F.PRETRAINING, lambda f: f.stage_shared)
    assert sweep_spec.SWEPT_FAMILIES == _selected(F.PRETRAINING, lambda f: f.swept)
    assert set(OLD_LIMIT) <= set(outer.LIMIT_FAMILIES) and _kept_order(OLD_LIMIT, outer.LIMIT_FAMILIES)
    assert set(OLD_SWEPT) <= set(sweep_spec.SWEPT_FAMILIES) and _kept_order(OLD_SWEPT, sweep_spec.SWEPT_FAMILIES)
    assert decompose.HUB_RULES == _selected(F.PRETRAINING, lambda f: f.hub_rule)
    assert set(decompose.HUB_RULES) <= set(space.STRUCTURAL)
    assert set(OLD_HUB_RULES) <= set(decompose.HUB_RULES) and _kept_order(OLD_HUB_RULES, decompose.HUB_RULES)
    assert calibrate.CHOICE_CONSTRAINTS == _selected(F.PRETRAINING, lambda f: f.trainer_rule or f.kind == F.KIND_MEMORY)
    choice = calibrate.CHOICE_CONSTRAINTS
    assert set(OLD_CHOICE) <= set(choice) and _kept_order(OLD_CHOICE, choice)
    assert enumerate.TABLED == tuple(n for n in solved if F.BY_NAME[n].table is not None)
    assert set(enumerate.TABLED) == set(space.STRUCTURAL) | set(space.EXACT)  # decided by one table each


def test_rl_views_are_the_declarations_they_select():
    """The RL views: solved RL families in declaration order, reported forms last, statements in RL wording;
    the old lists' members keep their order and wording."""
    rl_solved = _selected(F.RL, lambda f: f.encoded)
    assert RL.FAMILIES == F.RL_SOLVED == rl_solved and _kept_order(OLD_RL_FAMILIES, rl_solved)
    assert set(OLD_RL_FAMILIES) <= set(rl_solved)
    assert RL.STRUCTURAL == _selected(F.RL, lambda f: f.structural) and "rl.learner_layout" in RL.STRUCTURAL
    assert RL.RELAXABLE == tuple(n for n in rl_solved if n not in RL.STRUCTURAL)
    assert RL.SPEC == {f.name: (f.unit, f.scale, f.statement(F.RL)) for f in F.RL_FAMILIES}
    assert OLD_RL_SPEC.items() <= RL.SPEC.items() and _kept_order(tuple(OLD_RL_SPEC), tuple(RL.SPEC))
    assert RL.TRAINER_STRUCTURAL == frozenset(_selected(F.PRETRAINING, lambda f: f.trainer_rule))
    assert RL.TRAINER_STRUCTURAL >= frozenset(OLD_STRUCTURAL[:6]) and RL.TRAINER_STRUCTURAL <= set(space.STRUCTURAL)
    assert RL.TRAINER_MEMORY == frozenset(_selected(F.PRETRAINING, lambda f: f.kind == F.KIND_MEMORY))
    assert RL.TRAINER_MEMORY >= {"memory.per_card", "memory.host"}
    assert F.RL_REPORTED == rl_solved + _selected(F.RL, lambda f: not f.encoded)
    assert "rl.stage_balance" in F.RL_REPORTED[len(rl_solved):]


@pytest.mark.parametrize("example", ["design-case.toml", "qwen3-30b-a3b.toml"])
def test_declared_tables_terms_and_limits_are_the_spaces_and_the_evaluators(example):
    """A family's ``table`` is the space's table deciding it (its "ok." table), its ``terms`` tables of the
    space, and its ``limit`` the limit the evaluator returns for it; a family without a limit says so."""
    sc = load_scenario(ROOT / "examples" / example)
    sp = space.Space.from_scenario(sc)
    for f in F.PRETRAINING_FAMILIES:
        assert (f.table is not None) == (f.encoded and (f.structural or f.exact_rank is not None)), f.name
        if f.table is not None:
            assert f.table == F.ok_table(f.name) and f.table in sp._specs
        assert set(f.terms) <= set(sp._specs), f.name
    assert space.MEMORY_TERMS == F.family(F.MEMORY_PER_CARD).terms and space.BUSY_TERMS == F.family(F.STEP_BUDGET).terms
    acc = sc.search.accelerators[0]
    plan = E.resolve_plan(sc, Plan(acc, sc.system(acc).acc.cards_per_host, zero_stage=1))
    r = E.evaluate_arrays(sc, acc, tp=plan.tp, pp=plan.pp, dp=plan.dp, micro_batch=plan.micro_batch,
                          zero_stage=plan.zero_stage, nics_per_host=plan.nics_per_host,
                          save_interval_s=plan.save_interval_s)
    limited = [f.name for f in F.PRETRAINING_FAMILIES if f.limit is not None]
    assert {"deadline.finish", "cards.max", "budget.cost", "memory.per_card"} <= set(limited)
    for name in limited:
        assert float(r[("c", name)][1]) == F.limit(name, sc, acc), name
    assert F.limit(F.DEADLINE, sc) == sc.task.deadline_s and F.limit(F.CARDS, sc) == sc.search.max_cards
    with pytest.raises(ValueError):
        F.limit(F.INPUT_THROUGHPUT, sc)
    with pytest.raises(ValueError):
        F.limit(F.MEMORY_PER_CARD, sc)  # a per-card limit needs the accelerator


SCRATCH = "scratch.save_rule"  # a family known to no product file, decided by one table over the save variables


@pytest.mark.parametrize("over_grid", [False, True])
def test_the_layout_evaluator_glues_any_family_over_the_save_variables(monkeypatch, over_grid):
    """A family decided by one table over (mode, tau) -- and (``over_grid``) a choice of the layout's grid too --
    is glued with the save choice without being known by name: the best plan of a layout under it is the best
    of the layout's plans (every (interval, mode) pair) that meet its table."""
    sc = load_scenario(ROOT / "examples" / "design-case.toml")
    taus, modes = (0.0, 900.0, 1800.0, 3600.0), ("sync", "async")
    sc = replace(sc, search=replace(sc.search, save_interval_s=taus, save_mode=modes))
    sp = space.Space.from_scenario(sc)
    d = sp.domains
    assert len(d["tau"]) * len(d["mode"]) == 8
    grid_var = "zero" if over_grid else None
    vars = ("mode", "tau") + ((grid_var,) if grid_var else ())
    # holds for every other (mode, tau) pair (and, over the grid, for the grid variable's last choice only there)
    shape = tuple(len(d[v]) for v in vars)
    rule = np.zeros(shape, dtype=bool)
    flat = rule.reshape(shape[0] * shape[1], -1)
    flat[1::2, -1] = True
    if not over_grid:
        flat[1::2] = True
    sp._specs[F.ok_table(SCRATCH)] = (vars, None)
    sp.tables[F.ok_table(SCRATCH)] = space.Table(F.ok_table(SCRATCH), vars, rule)
    monkeypatch.setattr(enumerate, "TABLED", enumerate.TABLED + (SCRATCH,))
    ev = enumerate.LayoutEvaluator(sp)
    spans = {f: set(sp.table_vars(F.ok_table(f))) for f in enumerate.TABLED}
    assert ev.save_rules() == {f: bool(v & set(enumerate.GRID)) for f, v in spans.items() if v & set(enumerate.SAVE)}
    assert ev.save_rules()[F.CHECKPOINT] is False and ev.save_rules()[SCRATCH] is over_grid
    # the layout's own rules and the backlog (the scenario's deadline and caps left out: more layouts have plans)
    enforced = [f for f in space.FAMILIES if f in space.STRUCTURAL or f in (F.MEMORY_PER_CARD, F.CHECKPOINT)]
    found = moved = 0
    for h in _layouts(sp):
        every = ev.best(h, enforced, top=10**6)
        meets = [(k, p) for k, p in every
                 if rule[(p["mode"], p["tau"]) + ((p[grid_var],) if grid_var else ())]]
        got = ev.best(h, enforced + [SCRATCH])
        assert got == meets[:1], h
        found += bool(meets)
        moved += bool(meets) and every[0] != meets[0]
    assert found and moved  # some layouts have plans that meet the scratch family, some a better one that does not


def _layouts(sp):
    """About 60 core layouts (index tuples over the hub variables) of the space's first accelerator, spread evenly
    over all of them."""
    d = sp.domains
    every = list(itertools.product(range(1), *(range(len(d[v])) for v in enumerate.HUB[1:])))
    return every[::max(1, len(every) // 60)]


TASK_DEADLINE_READERS = {
    # file: why it reads the task's deadline field rather than deadline.finish's limit (F.limit(F.DEADLINE, sc))
    "models/families.py": "the declaration itself: deadline.finish's limit is the task's deadline",
    "optimizer/confidence.py": "the rest of a running job: its scenario's deadline is the task's minus the time "
                               "elapsed, its reserved time the task's pro rata, and the rest's task is reported",
    "optimizer/space.py": "a probe scenario keeps the base task's tokens, deadline and reserved time (a scenario "
                          "built, and two tasks compared)",
    "optimizer/outer.py": "each stage's scenario is built with the job's deadline",
    "optimizer/sweep/spec.py": "the sweep's deadline dimension starts from the base scenario's input value",
    "cli/choices.py": "the staged solve's header echoes the scenario's inputs",
    "cli/render.py": "the solve header echoes the scenario's inputs",
    "cli/sweep.py": "the confidence sweep's header echoes the scenario's inputs",
}
OK_NAME_BUILDERS = {
    # file: why it spells an "ok." table name by hand
    "models/families.py": "the declaration itself: ok_table",
}


def _is_task(node: ast.expr) -> bool:
    """A task: ``<anything>.task`` or a name ``task``."""
    return ((isinstance(node, ast.Attribute) and node.attr == "task")
            or (isinstance(node, ast.Name) and node.id == "task"))


def _task_deadline_reads(tree: ast.AST) -> list[int]:
    """Lines where ``tree`` reads a task's ``deadline_s`` (``sc.task.deadline_s``, ``task.deadline_s``); a keyword
    ``deadline_s=`` that builds a task is not a read."""
    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Attribute) and node.attr == "deadline_s"
            and isinstance(node.ctx, ast.Load) and _is_task(node.value)]


def _ok_names_built(tree: ast.AST) -> list[int]:
    """Lines where ``tree`` builds an "ok." table name by hand: ``"ok." + name`` or an f-string starting "ok."."""
    def ok_prefix(node: ast.expr) -> bool:
        return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("ok.")
    return [node.lineno for node in ast.walk(tree)
            if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and ok_prefix(node.left))
            or (isinstance(node, ast.JoinedStr) and node.values and ok_prefix(node.values[0]))]


def _hand_reads(find, allowed: dict[str, str]) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    """(reads outside the allowed files, reads in them) of every product file, by path."""
    outside: dict[str, list[int]] = {}
    inside: dict[str, list[int]] = {}
    for path in _product_files():
        rel = path.relative_to(ROOT).as_posix()
        lines = find(ast.parse(path.read_text(), rel))
        if lines:
            known = rel in allowed
            (inside if known else outside)[rel] = lines
    return outside, inside


def test_the_readers_of_the_deadline_read_its_family():
    """No product file outside TASK_DEADLINE_READERS reads a task's deadline_s: the deadline's readers call
    ``F.limit(F.DEADLINE, sc)``; each file listed still reads it (the list keeps no stale entry)."""
    outside, inside = _hand_reads(_task_deadline_reads, TASK_DEADLINE_READERS)
    assert not outside, f"read deadline.finish's limit as F.limit(F.DEADLINE, sc), not the task's field: {outside}"
    assert set(inside) == set(TASK_DEADLINE_READERS), sorted(set(TASK_DEADLINE_READERS) - set(inside))


def test_ok_table_names_come_from_the_declaration():
    """No product file outside OK_NAME_BUILDERS spells an "ok." table name by hand (``F.ok_table(name)``);
    each entry listed still does (the list keeps no stale entry)."""
    outside, inside = _hand_reads(_ok_names_built, OK_NAME_BUILDERS)
    assert not outside, f"name a family's table as F.ok_table(name): {outside}"
    assert set(inside) == set(OK_NAME_BUILDERS), sorted(set(OK_NAME_BUILDERS) - set(inside))


def test_the_hand_read_checks_see_what_they_look_for():
    """The two checks above find a hand read where there is one (so an empty answer means none)."""
    tree = ast.parse("d = sc.task.deadline_s\nt = task.deadline_s + 1\nx = replace(task, deadline_s=d)\n"
                     "p.deadline_s\nn = 'ok.' + f\nm = f'ok.{f}'\nk = F.ok_table(f)\n")
    assert _task_deadline_reads(tree) == [1, 2]
    assert sorted(_ok_names_built(tree)) == [5, 6]
