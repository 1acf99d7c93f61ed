"""The decision variables and the plan's user-facing fields, declared once (:mod:`tpopt.models.variables`):
every view derived from them is checked by its property, not pinned as a literal list, so a new variable
edits no test here.

Properties: each variable names a Plan field, a [search] domain and a [search] key that exist; the layout
evaluator's hub, grid and save axes partition the variables, grid axes and coupling ranks are distinct; the
decomposition couples grid variables only; every plan flag of the commands maps back to a Plan field (or shapes
one) and is a real option of ``tpopt evaluate`` and ``tpopt export``; every API plan keyword reaches a flag key of
``plan_from``; every sweep plan column is a column of a row and comes from a key of the plan's record;
``Space.plan`` sets each variable's field from its domain value.
"""

from __future__ import annotations

import inspect
import typing
from dataclasses import fields

import pytest
from click.testing import CliRunner

import tpopt.api as api
from tpopt.catalogs import schema
from tpopt.catalogs.schema import KEYS
from tpopt.cli.evaluate import evaluate as evaluate_command
from tpopt.cli.explain import PLAN_FLAGS as EXPLAIN_FLAGS
from tpopt.cli.export import export as export_command
from tpopt.errors import InputError
from tpopt.models import variables as V
from tpopt.models.evaluate import FIELD_VARIABLE, evaluate, evaluate_arrays, layout_of
from tpopt.models.layout import VARIABLE_NAMES
from tpopt.models.plan import Plan, SearchSpace
from tpopt.optimizer import decompose, memory_plan
from tpopt.optimizer import enumerate as E
from tpopt.optimizer.space import LAYOUT, VARS, Space
from tpopt.optimizer.sweep.rows import COLUMNS, PLAN_COLUMNS

PLAN_FIELDS = {f.name for f in fields(Plan)}


def test_each_variable_names_a_plan_field_a_domain_and_a_search_key():
    """Field, SearchSpace attribute and [search] key of every variable exist; names and fields are unique."""
    search_attrs = {f.name for f in fields(SearchSpace)}
    assert len(set(VARS)) == len(VARS) and len({v.field for v in V.VARIABLES}) == len(V.VARIABLES)
    for v in V.VARIABLES:
        assert v.field in PLAN_FIELDS, v
        assert v.search is None or v.search in search_attrs, v
        assert V.SEARCH_KEY[v.name] in KEYS["search"], v  # the refusal names a key the user can write


def test_variable_types_match_the_plan():
    """A variable's declared type is its Plan field's type (bool | None for an on/off field the scenario may fix)."""
    hints = typing.get_type_hints(Plan)
    for v in V.VARIABLES:
        assert v.type in (hints[v.field], *typing.get_args(hints[v.field])), v


def test_evaluator_axes_partition_the_variables():
    """Hub (the core layout), grid and save axes: every variable in exactly one, grid axes numbered 0..n-1."""
    assert E.HUB == LAYOUT
    axes = (*E.HUB, *E.GRID, *E.SAVE)
    assert sorted(axes) == sorted(VARS) and len(set(axes)) == len(axes)
    assert sorted(v.grid for v in V.VARIABLES if v.grid is not None) == list(range(len(E.GRID)))
    assert all(V.BY_NAME[n].grid == i for i, n in enumerate(E.GRID))
    assert all(not V.BY_NAME[n].layout for n in E.GRID + E.SAVE)


def test_coupling_is_over_grid_variables_in_rank_order():
    """The decomposition keeps grid extras only, each once, in their declared rank."""
    ranks = [V.BY_NAME[n].coupling for n in decompose.COUPLING]
    assert ranks == sorted(ranks) and len(set(ranks)) == len(ranks)
    assert set(decompose.COUPLING) <= set(E.GRID)
    assert memory_plan.SEARCH_KEY == V.SEARCH_KEY


def test_every_plan_flag_maps_back_to_a_plan_field_and_is_an_option():
    """Each flag's key is a Plan field's input (or shapes the schedule); `tpopt evaluate` and `tpopt export` take
    each flag; `tpopt explain`'s plan flags are some of them, --cards aside."""
    params = {p.name: p for p in evaluate_command.params}
    for i in V.PLAN_INPUTS:
        assert i.field is None or i.field in PLAN_FIELDS, i
        if i.flag is None:
            continue
        assert i.key in params, i  # the click destination is the plan input's key
        assert V.flag_of(i.key) in params[i.key].opts, i
        assert i.field is not None or i.key == "virtual_stages", i
    assert set(V.PLAN_FLAGS) <= {p.name for p in export_command.params}  # --plan refuses each of them
    assert set(EXPLAIN_FLAGS) < set(V.PLAN_FLAGS) and "cards" not in EXPLAIN_FLAGS
    help_text = CliRunner().invoke(evaluate_command, ["--help"], terminal_width=200).output
    assert all(V.flag_of(k) in help_text for k in V.PLAN_FLAGS)


def test_api_plan_keywords_reach_plan_from():
    """Every API plan keyword maps to a plan input's key and names a Plan field; the simple inputs read a
    [search] domain."""
    keys = {i.key: i for i in V.PLAN_INPUTS}
    assert api.PLAN_FIELDS == V.API_FIELDS and set(api.PLAN_FIELDS) <= api.PLAN_NAMES
    for name in api.PLAN_FIELDS:
        assert keys[V.API_KEY[name]].field in PLAN_FIELDS, name
    search_attrs = {f.name for f in fields(SearchSpace)}
    assert all(i.domain in search_attrs and i.field in PLAN_FIELDS for i in V.SIMPLE_INPUTS)


def test_sweep_plan_columns_come_from_the_plan_record(design):
    """Every plan column is a row column; the record's columns are keys of plan_dict, in its order."""
    assert set(PLAN_COLUMNS) <= set(COLUMNS)
    record = {f.column: f.key for f in V.PLAN_RECORD if f.column is not None}
    assert tuple(record) == PLAN_COLUMNS[:len(record)]
    ev = evaluate(design, Plan(accelerator="rtx4090", cards=48, pp=2, schedule="1f1b"))
    d = ev.plan_dict()
    assert list(d) == [f.key for f in V.PLAN_RECORD]
    assert d["zero_stage"] == ev.plan.zero_stage and d["schedule"] == "1f1b" and d["hosts"] == ev.metrics["hosts"]
    assert all(d[f.key] is None for f in V.PLAN_RECORD if f.moe)  # a dense model


def test_space_plan_sets_each_variable_field(design):
    """Space.plan of an assignment gives each variable's field its domain value (the save interval resolved,
    the schedule pinned when pp = 1)."""
    space = Space.from_scenario(design)
    idx = {v: len(space.domains[v]) - 1 for v in VARS}
    p = space.plan(idx)
    for v in V.VARIABLES:
        if v.name in ("tau", "schedule"):
            continue
        assert getattr(p, v.field) == space.domains[v.name][idx[v.name]], v
    assert p.cards == p.tp * p.cp * p.pp * p.dp


def test_alternatives_are_worded_and_ranked():
    """The report's same-scale alternatives: distinct ranks, a label with one slot each, over variables with a
    [search] choice of their own (the accelerator and the card count have their own alternatives)."""
    ranks = [v.alternative for v in V.ALTERNATIVES]
    assert ranks == sorted(ranks) and len(set(ranks)) == len(ranks)
    for v in V.ALTERNATIVES:
        assert v.label.count("{}") == 1 and v.name not in ("acc", "dp"), v
    cap, etp = V.BY_NAME["cap"], V.BY_NAME["etp"]
    assert cap.wording(0.0) == "capacity none (dropless)" and cap.wording(1.25) == "capacity 1.25"
    assert etp.wording(0) == "expert-TP = TP" and V.BY_NAME["zero"].wording(2) == "ZeRO-2"


def test_search_keys_of_undeclared_variables_follow_from_the_declaration(monkeypatch):
    """A variable whose [search] domain no hand-written key sets gets one from its declaration: named by its
    search key, read by its type (on / off for a bool, in the order given), defaulting to the SearchSpace's
    domain and setting it; the derived table holds exactly the variables whose domain no hand-written key sets."""
    written = {schema.spec(f).to or f.name for cls in (schema.SearchKeys, schema.MoeSearchKeys) for f in fields(cls)}
    assert [(f.name, schema.spec(f).to) for f in fields(schema.VariableSearchKeys)] == \
        [(v.search_key, v.search) for v in V.VARIABLES if v.search is not None and v.search not in written]
    flag = V.Variable("aoff", "activation_offload", "sequence_parallel", bool, categorical=True,
                      key="activation_offload")
    monkeypatch.setattr(schema, "VARIABLES", (V.BY_NAME["ep"], flag))
    derived = schema._variable_keys(schema.MoeSearchKeys)
    assert [f.name for f in fields(derived)] == ["activation_offload"]  # ep: declared by hand
    read = schema.read_table(derived, {"activation_offload": [True, False]}, "search.")
    assert schema.targets(read) == {"sequence_parallel": (True, False)}
    assert schema.targets(schema.read_table(derived, {}, "search.")) == {}  # empty SearchSpace default: none
    kind = schema._variable_kind(flag)
    assert kind.read([True, False, True], "search.activation_offload", None) == (True, False)
    with pytest.raises(InputError, match="search.activation_offload must be true or false"):
        kind.read(["yes"], "search.activation_offload", None)
    assert schema._variable_kind(V.BY_NAME["tp"]).read([4, 2], "search.tp", None) == (2, 4)
    offload = schema._variable_kind(V.BY_NAME["offload"])
    assert offload.read("none, cpu", "search.offload", None) == ("none", "cpu")
    with pytest.raises(InputError, match="offload 'gpu' unknown"):
        offload.read("gpu", "search.offload", None)


def test_evaluate_keywords_are_the_evaluators_variables():
    """The one Plan -> evaluation mapping: evaluate_arrays takes (its options aside) exactly the variables' Plan
    fields but the accelerator, each landing in the Layout field of its variable's name (numeric ones as arrays
    of the plan's value, categorical ones as given); any other keyword is refused as a misspelt one; and the
    Layout's fields are exactly the variables' names."""
    params = inspect.signature(evaluate_arrays).parameters
    assert {n for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY} == {"quantiles"}
    plan = Plan(accelerator="h100-sxm", cards=64, zero_stage=1, tp=2, pp=4, dp=8, micro_batch=2, recompute="full",
                offload="cpu", schedule="zb-h1", save_interval_s=900.0, save_mode="async", nics_per_host=4,
                sequence_parallel=False, ep=1, expert_tp=0, capacity_factor=0.0, cp=1)
    keywords = V.evaluate_keywords(plan)
    assert set(keywords) == set(FIELD_VARIABLE) == {v.field for v in V.VARIABLES} - {"accelerator"}
    lay = layout_of(plan.accelerator, keywords)
    assert lay.acc == "h100-sxm"
    for v in V.VARIABLES[1:]:
        got = getattr(lay, v.name)
        assert (got == getattr(plan, v.field)) if v.categorical else float(got) == getattr(plan, v.field), v
    assert layout_of("h100-sxm", {}).tp.shape == ()  # a variable not given: its Layout default, as an array
    with pytest.raises(TypeError, match="micro_batches"):
        layout_of("h100-sxm", {"tp": 2, "micro_batches": 2})
    assert set(VARIABLE_NAMES) == set(VARS)


def test_plan_line_shows_a_declared_switch_off_its_default():
    """A variable declared shown in the plan line (``line``) has a label, appears worded when set off its Plan
    default, and is absent at the default."""
    shown = [v for v in V.VARIABLES if v.line]
    assert shown and all(v.label for v in shown)
    for v in shown:
        default = V.PLAN_DEFAULTS[v.field]
        assert V.line_parts({v.field: default}) == []
    assert V.line_parts({"offload": "cpu"}) == ["offload cpu"] and V.line_parts({"offload": "none"}) == []


def test_the_api_takes_every_plan_flag_that_names_a_plan_field():
    """tpopt.evaluate takes what tpopt evaluate's flags take (sequence parallelism, flash attention, uneven first and
    last stages; the interleaved schedule as schedule="interleaved:N"), each reaching the plan as the flag does."""
    assert {"sequence_parallel", "flash_attention", "first_stage_layers", "last_stage_layers"} <= set(api.PLAN_FIELDS)
    sc = api.scenario(hw="h100-sxm")
    kw = {"cards": 16, "tp": 2, "pp": 2}
    off = api.evaluate(sc, **kw, sequence_parallel=False, flash_attention=False, first_stage_layers=16,
                       last_stage_layers=20)
    on = api.evaluate(sc, **kw, sequence_parallel=True)
    assert (off.plan.sequence_parallel, on.plan.sequence_parallel, off.plan.flash_attention) == (False, True, False)
    assert (off.plan.first_stage_layers, off.plan.last_stage_layers) == (16, 20)
    flags = ["evaluate", "--hw", "h100-sxm", "--cards", "16", "--tp", "2", "--pp", "2", "--no-sequence-parallel",
             "--no-flash-attention", "--first-stage-layers", "16", "--last-stage-layers", "20", "--json"]
    import json

    from tpopt.cli.main import cli
    assert json.loads(CliRunner().invoke(cli, flags).output)["metrics"]["step_s"] == off.metrics["step_s"]
