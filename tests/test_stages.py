"""Training stages (issue 12 item 4): each stage its own layout, one deadline and budget over all.

Exactness: the staged optimum equals brute force over every pair of stage plans (sum of finishes
within the deadline, sum of costs within the budget), on the enumeration route and on the solver
route (epsilon-constraint fronts). Transitions: a checkpoint save on the old layout (14 B/param at
the write bandwidth, chapter 10.4) and a restore on the new one, charged to the stage that does it.
"""

from __future__ import annotations

import inspect
import itertools
import json
import math

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import build_scenario
from tpopt.cli.main import cli
from tpopt.models.evaluate import evaluate
from tpopt.models.plan import Plan
from tpopt.models.units import DAY
from tpopt.optimizer import outer
from tpopt.optimizer.result import Request, Status
from tpopt.optimizer.space import Space

CAT = load_catalog()


def staged_raw(deadline="30d", max_cost=None, tokens=("90B", "10B"), seqs=(8192, 32768), batches=(384, 96)):
    raw = {
        "scenario": {"name": "staged"},
        "model": {"name": "qwen3-8b"},
        "task": {"stages": [{"name": "short", "tokens": tokens[0], "seq_len": seqs[0], "global_batch": batches[0]},
                            {"name": "long", "tokens": tokens[1], "seq_len": seqs[1], "global_batch": batches[1]}]},
        "schedule": {"deadline": deadline, "reserved": "5d"},
        "hardware": {"accelerator": "rtx4090", "usable_memory": "22GiB", "efficiency": 0.4, "cards_per_host": 8},
        "memory": {"activation_reserve": "10GiB"},
        "input": {"workers_per_host": 4, "sequences_per_worker_s": 2, "wait": "0.5s"},
        "checkpoint": {"write_bandwidth": "7GB/s", "restore": "120s", "save_interval": "1800s", "mode": "sync"},
        "search": {"zero_stage": [3], "tp": [1], "pp": [1], "micro_batch": [1], "max_cards": 1024},
    }
    if max_cost is not None:
        raw["cost"] = {"max_cost": max_cost}
    return raw


def stage_plans(info):
    """Every feasible plan of one stage (its own families; the shared deadline and budget left out)."""
    sc = outer._limits_free(info.sc, 1e12)
    dom = Space.from_scenario(sc).domains
    out = []
    for acc, tp, dp, mb, z, tau, mode in itertools.product(dom["acc"], dom["tp"], dom["dp"], dom["mb"], dom["zero"],
                                                          dom["tau"], dom["mode"]):
        ev = evaluate(sc, Plan(accelerator=acc, cards=tp * dp, zero_stage=z, tp=tp, pp=1, micro_batch=mb,
                               recompute=dom["recompute"][0], save_interval_s=tau, save_mode=mode))
        if ev.feasible:
            out.append((ev.metrics["finish_days"] * DAY, ev.metrics["cost"]))
    return out


def brute_force(sc, objective="cost"):
    stages = outer.stage_scenarios(sc)
    plans = [stage_plans(s) for s in stages]
    best = None
    for combo in itertools.product(*plans):
        f, c = sum(x[0] for x in combo), sum(x[1] for x in combo)
        if f > sc.task.deadline_s * (1 + 1e-9) or (sc.cost.max_cost is not None and c > sc.cost.max_cost * (1 + 1e-9)):
            continue
        key = (c, f) if objective == "cost" else (f, c)
        if best is None or key < best:
            best = key
    return best


@pytest.mark.parametrize("deadline", ["30d", "22d", "20d", "12d"])
def test_staged_optimum_equals_brute_force(deadline):
    sc = build_scenario(staged_raw(deadline), CAT)
    ss = outer.solve_stages(sc, "cpsat", Request(seed=0, workers=1))
    ref = brute_force(sc)
    assert (ss.status == Status.OPTIMAL) == (ref is not None)
    if ref is not None:
        assert math.isclose(ss.cost, ref[0], rel_tol=1e-9) and ss.finish_s <= sc.task.deadline_s * (1 + 1e-9)
    else:
        assert ss.status == Status.INFEASIBLE


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(st.floats(14, 40), st.sampled_from(["cost", "time"]), st.sampled_from([None, 2.2e4, 3e4]),
       st.sampled_from(["cpsat", "highs"]))
def test_solver_route_fronts_equal_brute_force(deadline, objective, budget, backend):
    # force the epsilon-constraint route (no enumeration table) and compare with brute force
    from tpopt.optimizer import report

    sc = build_scenario(staged_raw(f"{deadline}d", budget), CAT)
    saved = report.TABLE_LIMIT
    report.TABLE_LIMIT = 0
    try:
        ss = outer.solve_stages(sc, backend, Request(objective=objective, seed=0, workers=1, time_limit=300))
    finally:
        report.TABLE_LIMIT = saved
    ref = brute_force(sc, objective)
    assert (ss.status == Status.OPTIMAL) == (ref is not None), (ss.status, ref)
    if ref is not None:
        got = (ss.cost, ss.finish_s) if objective == "cost" else (ss.finish_s, ss.cost)
        assert math.isclose(got[0], ref[0], rel_tol=1e-9), (got, ref)


def test_transitions_charged_to_the_stages():
    sc = build_scenario(staged_raw(), CAT)
    save, restore = outer.transition_s(sc)
    assert save == pytest.approx(114_670_295_040 / 7e9)  # Qwen3-8B, 14 B/param at 7 GB/s: 16.4 s (10.4)
    s1, s2 = outer.stage_scenarios(sc)
    assert s1.sc.task.reserved_s == pytest.approx(5 * DAY + save) and s2.sc.task.reserved_s == pytest.approx(restore)
    assert s2.sc.task.seq_len == 32768 and s2.sc.task.global_batch == 96


def run(*args):
    kw = {"mix_stderr": False} if "mix_stderr" in inspect.signature(CliRunner.__init__).parameters else {}
    return CliRunner(**kw).invoke(cli, list(args), catch_exceptions=False)


def _toml(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    return repr(v)


def write(tmp_path, raw):
    """The scenario dict as TOML (tables, [[task.stages]] arrays, scalars and lists)."""
    lines = []
    for table, body in raw.items():
        scalars = {k: v for k, v in body.items() if not (isinstance(v, list) and v and isinstance(v[0], dict))}
        lines.append(f"[{table}]")
        lines += [f"{k} = {_toml(v)}" for k, v in scalars.items()]
        for k, v in body.items():
            if k not in scalars:
                for item in v:
                    lines.append(f"[[{table}.{k}]]")
                    lines += [f"{kk} = {_toml(vv)}" for kk, vv in item.items()]
    p = tmp_path / "staged.toml"
    p.write_text("\n".join(lines) + "\n")
    return str(p)


def test_cli_staged_solve_and_evaluate(tmp_path):
    path = write(tmp_path, staged_raw("22d"))
    r = run("solve", "--scenario", path, "--json", "--workers", "1")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert [s["name"] for s in d["stages"]] == ["short", "long"]
    assert d["total"]["finish_days"] <= 22 + 1e-9
    assert d["total"]["cost"] == pytest.approx(sum(s["metrics"]["cost"] for s in d["stages"]))
    # each stage's allocation is the deadline minus the other stage's finish
    a0 = d["stages"][0]["allocated_days"]
    assert a0 == pytest.approx(22 - d["stages"][1]["metrics"]["finish_days"])
    text = run("solve", "--scenario", path, "--workers", "1").stdout
    assert "Stage 1 'short'" in text and "Stage 2 'long'" in text and "Total: finish" in text
    ev = run("evaluate", "--scenario", path, "--cards", "48", "--stage", "long", "--json")
    assert ev.exit_code in (0, 3) and json.loads(ev.stdout)["stages"][0]["name"] == "long"


def test_cli_staged_infeasible_exit_3(tmp_path):
    path = write(tmp_path, staged_raw("6d"))
    r = run("solve", "--scenario", path, "--workers", "1")
    assert r.exit_code == 3
    assert "fastest plans need" in r.stdout


@pytest.mark.parametrize("stage, message", [({"name": "a", "seq_len": 8192}, "missing required key 'tokens'"),
                                            ({"tokens": "1B", "bogus": 1}, "unknown key"),
                                            ({"tokens": "1B", "global_batch": 0}, "global_batch")])
def test_bad_stage_is_one_line_exit_2(tmp_path, stage, message):
    raw = staged_raw()
    raw["task"]["stages"][1] = dict({"seq_len": 8192, "global_batch": 96}, **stage) if "tokens" in stage else stage
    r = run("solve", "--scenario", write(tmp_path, raw))
    assert r.exit_code == 2 and message in r.stderr and r.stderr.count("\n") == 1, r.stderr
