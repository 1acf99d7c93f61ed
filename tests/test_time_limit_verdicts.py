"""Commands that solve for the scenario's plan before reporting on it (tpopt checkpoint and tpopt stragglers without
--cards, tpopt export without --plan or plan flags) take --time-limit, and say what the solve's status allows: no
plan within the limit and no proof is exit 4 with one line (not 'no feasible plan'), a plan the solve did not prove
optimal is not called optimal."""

from __future__ import annotations

from dataclasses import replace

import pytest
from click.testing import CliRunner

import tpopt.cli.export as X
import tpopt.cli.reliability as R
from tpopt.cli.main import cli
from tpopt.optimizer.result import Status


def run(*args):
    return CliRunner().invoke(cli, list(args))


def unknown_solve(real, seen):
    """``real`` (a solve) as it ends when its time limit runs out before any plan: status unknown, no plans; the
    request's time limit recorded in ``seen``."""
    def solve(*a, **k):
        req = next(x for x in (*a, *k.values()) if hasattr(x, "time_limit"))
        seen.append(req.time_limit)
        r = real(*a, **k)
        r.status, r.plans = Status.UNKNOWN, []
        return r
    return solve


@pytest.mark.parametrize("cmd", [["checkpoint"], ["stragglers", "--sigma", "5%"], ["export", "--format", "megatron"]])
def test_no_plan_within_the_time_limit_is_exit_4_in_one_line(cmd, monkeypatch):
    seen: list[float] = []
    if cmd[0] == "export":
        monkeypatch.setattr(X.P, "plan", unknown_solve(X.P.plan, seen))
    else:
        monkeypatch.setattr(R, "solve", unknown_solve(R.solve, seen))
    res = run(*cmd, "--time-limit", "7s")
    assert seen == [7.0]  # the flag's limit is the solve's
    assert res.exit_code == 4, res.output
    lines = [ln for ln in res.output.strip().splitlines() if ln.startswith("tpopt: error")]
    assert len(lines) == 1 and "no plan found within the time limit (7 s)" in lines[0], res.output
    assert "no proof that none exists" in lines[0] and "--time-limit" in lines[0]
    assert "Traceback" not in res.output and "no feasible plan" not in res.output


def test_a_plan_the_solve_did_not_prove_optimal_is_not_called_optimal(monkeypatch):
    real = R.solve
    monkeypatch.setattr(R, "solve", lambda *a, **k: replace(real(*a, **k), status=Status.FEASIBLE))
    out = run("stragglers", "--sigma", "5%").output
    assert "the best plan found within the time limit (60 s; not proven optimal)" in " ".join(out.split())
    assert "optimal plan" not in out
    monkeypatch.setattr(R, "solve", real)
    assert "the scenario's optimal plan" in run("stragglers", "--sigma", "5%").output


def test_export_says_when_its_plan_is_not_proven_optimal(monkeypatch):
    real = X.P.plan

    def unproven(*a, **k):
        pr = real(*a, **k)
        pr.status = Status.FEASIBLE
        return pr

    monkeypatch.setattr(X.P, "plan", unproven)
    res = run("export", "--format", "megatron", "--time-limit", "45s")
    assert res.exit_code == 0, res.output
    assert "the exported plan is the best found within the time limit (45 s), not proven optimal" in res.output
    monkeypatch.setattr(X.P, "plan", real)
    assert "not proven optimal" not in run("export", "--format", "megatron").output
