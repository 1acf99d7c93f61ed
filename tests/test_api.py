"""The Python API (issue 14 item 2): the README's example as it stands, natural override names, results as
dicts and DataFrames with integer columns kept integers, and a cheap `import tpopt`.

Golden figures: the design case (REFERENCE.md 10.6): 48 RTX 4090 cards for 30 days, 32 cards take 34.33 d.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import tpopt

ROOT = Path(__file__).resolve().parents[1]


def readme_api_example() -> str:
    """The first Python block of the Python API page (docs/python-api.md, moved there from the README)."""
    text = (ROOT / "docs" / "python-api.md").read_text()
    section = text.split("# Python API", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert blocks, "the Python API page has no python block"
    return blocks[0]


def test_readme_api_example_runs(capsys):
    code = readme_api_example()
    assert "tpopt.solve" in code and "to_frame" in code
    exec(compile(code, "docs/python-api.md", "exec"), {"__name__": "readme_example"})
    out = capsys.readouterr().out
    assert "Conflict: these 2 constraints cannot hold together" in out


def test_import_is_lazy_and_cheap():
    # a fresh interpreter: importing tpopt loads no solver, numpy or pandas
    code = ("import sys, tpopt; heavy = [m for m in ('numpy', 'pandas', 'ortools', 'highspy', 'click', 'rich') "
            "if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    assert {"scenario", "solve", "evaluate", "explain", "sweep", "InputError"} <= set(dir(tpopt))
    with pytest.raises(AttributeError):
        tpopt.no_such_name  # noqa: B018


def test_natural_names_and_dotted_keys_agree():
    a = tpopt.scenario({"deadline": "20d", "hw": "h100-sxm,rtx4090", "efficiency": "45%", "workers": 8})
    b = tpopt.scenario(None, {"schedule.deadline": "20d", "hardware.accelerator": ["h100-sxm", "rtx4090"],
                              "search.accelerator": ["h100-sxm", "rtx4090"], "hardware.efficiency": "45%",
                              "input.workers": 8})
    c = tpopt.scenario(deadline="20d", hw="h100-sxm,rtx4090", efficiency="45%", workers=8)
    assert a == b == c
    assert a.task.deadline_s == 20 * 86400 and tuple(a.systems) == ("h100-sxm", "rtx4090")
    assert a.search.accelerators == ("h100-sxm", "rtx4090") and a.input.workers == 8
    with pytest.raises(tpopt.InputError, match="did you mean 'deadline'"):
        tpopt.scenario({"deadlin": "20d"})


@pytest.mark.parametrize("name, tables, value", [("sequence_parallel", ("memory", "search"), True)])
def test_a_name_of_two_tables_is_ambiguous_not_unknown(name, tables, value):
    """A key two tables hold is no natural name: the one error line names it as a key of both and the dotted
    names that choose one, where it said "unknown scenario input 'sequence_parallel' (did you mean
    'sequence_parallel'?)"."""
    with pytest.raises(tpopt.InputError) as err:
        tpopt.scenario({name: value})
    message = str(err.value)
    assert "unknown" not in message and "did you mean" not in message, message
    assert all(f"'{t}.{name}'" in message for t in tables) and "\n" not in message, message
    tpopt.scenario({f"{tables[0]}.{name}": value})  # the dotted name the message offers is taken


def test_global_batch_is_the_command_lines_global_batch():
    """global_batch names the batches a plan may take, as --global-batch does on every command (search.global_batch;
    the task's batch stays the reference of its critical-batch curve). Before, it was read as no scenario input:
    tpopt.solve refused it as a plan field and sent the caller to tpopt.evaluate, which refused it as not one of its
    plan fields. The design case at 192 sequences: 48 cards, DP 48 x micro-batch 1 x 4 accumulation = 192."""
    assert tpopt.scenario(global_batch=192) == tpopt.scenario({"search.global_batch": 192})
    best = tpopt.solve(global_batch=192).best
    assert best is not None and best.plan.global_batch == 192 and best.plan.cards == 48
    assert best.plan.dp * best.plan.micro_batch * best.plan.grad_accum == 192
    fixed = tpopt.evaluate(cards=48, global_batch=192)
    assert fixed.feasible and fixed.to_dict()["plan"]["global_batch"] == 192


def test_sources_file_tables_and_builtin_are_the_same_scenario():
    from tpopt.catalogs.scenario import read_scenario_file

    tables = {k: v for k, v in read_scenario_file(ROOT / "examples" / "design-case.toml").items()
              if not k.startswith("_")}
    built_in = tpopt.scenario()
    assert tpopt.scenario(ROOT / "examples" / "design-case.toml") == built_in
    assert tpopt.scenario(tables) == built_in
    again = tpopt.scenario(built_in, tokens="50B")  # a built scenario keeps its inputs for further overrides
    assert again.task.tokens == 50e9 and again.task.deadline_s == built_in.task.deadline_s


def test_results_as_dicts_and_frames_keep_integers():
    r = tpopt.solve(deadline="40d", top=2)
    d = r.to_dict()
    assert d["status"] == "optimal" and [p["rank"] for p in d["plans"]] == [1, 2]
    assert [p["plan"]["cards"] for p in d["plans"]] == [32, 48]  # REFERENCE 10.6: 32 cards meet 40 d, cheaper
    # the binding analysis the command prints comes with the result (tpopt solve --json's report)
    assert r.analysis == r.report["analysis"] == "done" and isinstance(r.binding, list)
    marked = {c["name"] for c in r.report["constraints"] if c["binding"]} - {"step.budget"}
    assert {b["name"] for b in r.binding} == marked
    assert r.report["top"][1]["plan"]["cards"] == 48 and r.alternatives is not None
    assert tpopt.solve(deadline="40d", analysis=False).report["analysis"] == "skipped"
    f = r.to_frame()
    for col in ("rank", "cards", "hosts", "zero_stage", "tp", "pp", "dp", "micro_batch", "grad_accum",
                "nics_per_host", "iterations"):
        assert str(f[col].dtype) == "int64", col
    ev = tpopt.evaluate(cards=40)
    assert not ev.feasible and ev.to_dict()["plan"]["grad_accum"] == 0
    assert str(ev.to_frame()["cards"].dtype) == "int64"


def test_sweep_frame_keeps_integers_with_missing_values():
    # 20 d is infeasible for the design case (the earliest finish is 24.6 d): its cards are missing, the
    # column stays an integer column (nullable Int64), not float64
    f = tpopt.sweep(deadline="20d,30d", workers=1).to_frame()
    assert list(f["status"]) == ["infeasible", "optimal"]
    assert str(f["cards"].dtype) == "Int64" and f["cards"].isna().tolist() == [True, False]
    assert int(f["cards"].iloc[1]) == 48


def test_explain_a_plan_and_bad_input():
    ex = tpopt.explain(cards=32)
    assert ex.status == "infeasible" and "deadline.finish" in set(ex.to_frame()["name"])
    assert "Status: infeasible" in str(ex)
    with pytest.raises(tpopt.InputError):
        tpopt.explain(zero_stage=3)  # a plan field without cards
    with pytest.raises(tpopt.InputError):
        tpopt.solve(objective="speed")


@pytest.mark.parametrize("name, value", [("grad_accum", 4), ("save_interval_s", 3600.0)])
# global_batch is a scenario input; first / last_stage_layers are plan keywords (tests/test_variables.py)
def test_evaluate_and_explain_reject_a_plan_field_they_do_not_take(name, value):
    """A Plan field that is no plan keyword of the API (and no scenario input) is an error naming it and the
    plan fields the API takes, never silently dropped."""
    for fn in (tpopt.evaluate, tpopt.explain):
        with pytest.raises(tpopt.InputError, match=rf"'{name}' is not a plan field it takes \(plan fields: "
                                                   r"accelerator, cards, zero_stage,"):
            fn(cards=48, **{name: value})


def test_solve_rejects_a_plan_field():
    """tpopt.solve chooses the plan: a plan field (not a scenario input) is named as such, not read as a
    misspelt scenario input."""
    with pytest.raises(tpopt.InputError, match=r"tpopt.solve: 'cards' is a plan field, and solve chooses the plan"):
        tpopt.solve(cards=48)
    with pytest.raises(tpopt.InputError, match="'grad_accum' is a plan field"):
        tpopt.solve(grad_accum=2)


def test_every_api_plan_field_reaches_the_plan():
    """Each plan keyword the API takes sets the evaluated plan (none is dropped on the way to plan_from)."""
    ev = tpopt.evaluate(cards=48, accelerator="rtx4090", zero_stage=2, tp=2, pp=2, micro_batch=2,
                        recompute="full", offload="none", schedule="zb-h1", save_interval="3600s", save_mode="async",
                        nics_per_host=1)
    p = ev.plan
    assert (p.accelerator, p.cards, p.zero_stage, p.tp, p.pp, p.micro_batch) == ("rtx4090", 48, 2, 2, 2, 2)
    assert (p.recompute, p.offload, p.schedule, p.save_interval_s, p.save_mode, p.nics_per_host) == \
        ("full", "none", "zb-h1", 3600.0, "async", 1)


def test_the_api_returns_what_the_command_prints():
    """tpopt.solve and tpopt solve --json run the same plan(): the same report, key for key (the wall time
    and the built-in note aside)."""
    import json

    from click.testing import CliRunner

    from tpopt.cli.main import cli

    out = CliRunner().invoke(cli, ["solve", "--deadline", "40d", "--top", "2", "--json"]).output
    printed = json.loads(out)
    report = json.loads(json.dumps(tpopt.solve(deadline="40d", top=2).report))
    for d in (printed, report):
        d["solver"].pop("wall_s")
    printed.pop("scenario_source")
    assert printed == report


def test_an_infeasible_solve_returns_the_conflict_and_relaxations_the_command_prints():
    """Without a plan, tpopt.solve's report holds the conflict and the relaxations, as tpopt solve --json prints
    them (plan() computes them; the CLI only renders)."""
    import json

    from click.testing import CliRunner

    from tpopt.cli.main import cli

    out = CliRunner().invoke(cli, ["solve", "--max-cards", "32", "--json"]).output
    printed = json.loads(out)
    report = json.loads(json.dumps(tpopt.solve(max_cards=32).report))
    for d in (printed, report):
        d["solver"].pop("wall_s")
        for r in d["relaxations"]:
            r.pop("seconds")  # each relaxation's wall time
    printed.pop("scenario_source")
    assert printed == report and report["conflict"] and report["relaxations"]
