"""A backend registered in one place is selectable everywhere: every command that takes ``--solver`` and
the Python API run it by name and reach the same optimum as CP-SAT.

The toy backend below is the whole of what a new backend needs: an object with the four methods of
:class:`tpopt.optimizer.backends.Backend` and one :func:`~tpopt.optimizer.backends.register` call with its
capability flags. It answers a space itself (no solver model, no decomposition master): every plan is
evaluated exactly, one chunk at a time, by the enumerator, and the best ``req.top`` kept.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import tpopt
from tpopt.catalogs.rl import load_rl_scenario
from tpopt.catalogs.scenario import load_scenario
from tpopt.cli.main import cli
from tpopt.errors import InputError
from tpopt.optimizer import backends, core
from tpopt.optimizer import rl as O
from tpopt.optimizer.backends.verify import evaluate_assignment
from tpopt.optimizer.enumerate import enumerate_best
from tpopt.optimizer.result import Request, Status

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "examples" / "design-case.toml"
RL = ROOT / "examples" / "rl-grpo-qwen3-8b.toml"


class Exhaustive:
    """Every plan of the space evaluated exactly; optimal when all were (no time limit of its own)."""

    def __init__(self):
        self.calls = 0

    def require(self, name, req):
        """Nothing to install."""

    def model(self, name, space, req):
        raise backends.CapabilityError("the toy backend", "solver model")

    def master(self, name, space, bounds, allowed, req):
        raise backends.CapabilityError("the toy backend", "decomposition master")

    def solve_space(self, name, space, req, info):
        self.calls += 1
        picks, evaluated, chunks = enumerate_best(space, req)
        plans = [evaluate_assignment(space, a) for a in picks]
        info.evaluated, info.rounds, info.gap = evaluated, chunks, 0.0 if plans else None
        return plans, (Status.OPTIMAL if plans else Status.INFEASIBLE)


@pytest.fixture
def toy():
    impl = Exhaustive()
    backends.register("toy", impl, backends.Capabilities(needs_tables=False, time_limits=False))
    yield impl
    backends.unregister("toy")


def run(*args):
    r = CliRunner().invoke(cli, [str(a) for a in args])
    return r.exit_code, r.output


def solve_json(solver, *extra):
    code, out = run("solve", "--scenario", DESIGN, "--solver", solver, "--json", "--no-analysis", *extra)
    assert code == 0, out
    return json.loads(out)


def test_the_registry_lists_the_new_name_in_every_message(toy):
    assert "toy" in backends.names() and backends.is_known("toy") and not backends.is_known("toys")
    assert backends.metavar() == "[cpsat|highs|enumerate|toy|pyomo:NAME]"
    assert backends.sweep_names() == ("auto", "enumerate", "cpsat", "highs", "toy")
    with pytest.raises(InputError, match=r"use cpsat, highs, enumerate, toy or pyomo:NAME"):
        tpopt.solve(solver="toys")
    code, out = run("solve", "--solver", "toys")
    assert code == 2 and "'toys' is not a solver (use cpsat, highs, enumerate, toy, or pyomo:NAME such as" in out


def test_builtin_messages_are_the_ones_the_commands_always_printed():
    assert backends.metavar() == "[cpsat|highs|enumerate|pyomo:NAME]"
    assert backends.metavar(backends.sweep_names()) == "[auto|enumerate|cpsat|highs|pyomo:NAME]"
    assert backends.not_a_solver("x") == ("'x' is not a solver (use cpsat, highs, enumerate, or pyomo:NAME such as "
                                          "pyomo:highs, pyomo:scip, pyomo:cbc, pyomo:glpk, pyomo:gurobi)")
    assert str(backends.unknown_solver("x")) == "unknown solver 'x' (use cpsat, highs, enumerate or pyomo:NAME)"
    with pytest.raises(InputError, match=r"^unknown solver 'x' \(use one of: cpsat, highs, enumerate, "
                                         r"pyomo:<solver>\)$"):
        backends.check_solver("x")
    with pytest.raises(InputError, match=r"^--solver: unknown solver 'x' \(use one of: auto, enumerate, cpsat, highs, "
                                         r"or pyomo:NAME such as pyomo:highs\)$"):
        backends.check_sweep_solver("x", None)


def test_solve_selects_the_toy_and_finds_the_cpsat_optimum(toy):
    mine, ref = solve_json("toy"), solve_json("cpsat", "--method", "monolithic")
    assert toy.calls >= 1 and mine["solver"]["name"] == "toy" and mine["status"] == "optimal"
    assert mine["plan"] == ref["plan"] and mine["metrics"]["cost"] == pytest.approx(ref["metrics"]["cost"])


def test_the_api_selects_the_toy(toy):
    r, ref = tpopt.solve(DESIGN, solver="toy", analysis=False), tpopt.solve(DESIGN, solver="cpsat", analysis=False)
    assert toy.calls == 1 and r.solver.name == "toy" and r.status == Status.OPTIMAL
    assert r.best.plan == ref.best.plan and r.report["plan"] == ref.report["plan"]


def test_explain_selects_the_toy(toy):
    code, mine = run("explain", "--scenario", DESIGN, "--solver", "toy", "--json")
    code_ref, ref = run("explain", "--scenario", DESIGN, "--solver", "cpsat", "--json")
    assert code == code_ref == 0, mine
    a, b = json.loads(mine), json.loads(ref)
    assert a["status"] == b["status"] and a["plan"] == b["plan"]


def test_sweep_selects_the_toy(toy, tmp_path):
    rows = {}
    for solver in ("toy", "cpsat"):
        out = tmp_path / f"{solver}.json"
        code, text = run("sweep", "--scenario", DESIGN, "--deadline", "25d,30d", "--solver", solver, "--workers", 1,
                         "--out", out)
        assert code == 0, text
        rows[solver] = json.loads(out.read_text())
        rows[solver] = rows[solver]["rows"] if isinstance(rows[solver], dict) else rows[solver]
    assert {r["solver"] for r in rows["toy"]} == {"toy"}
    assert [(r["deadline_days"], r["cards"], r["cost"]) for r in rows["toy"]] == \
        [(r["deadline_days"], r["cards"], r["cost"]) for r in rows["cpsat"]]


def test_rl_selects_the_toy(toy):
    code, mine = run("rl", "--scenario", RL, "--solver", "toy", "--json", "--no-analysis")
    code_ref, ref = run("rl", "--scenario", RL, "--solver", "cpsat", "--json", "--no-analysis")
    assert code == code_ref == 0, mine
    a, b = json.loads(mine), json.loads(ref)
    assert a["status"] == b["status"] and a.get("plan") == b.get("plan")
    pb = O.RLProblem(load_rl_scenario(RL), "toy", Request(time_limit=60.0))
    pb.caches["force_solver"] = True  # the learner's layouts from the backend, not the table
    before = toy.calls
    forced = O.solve(pb)
    assert toy.calls > before and forced.status == Status.OPTIMAL


def test_a_scenario_the_toy_cannot_see_still_fails_cleanly(toy):
    sc = load_scenario(DESIGN, {"schedule.deadline": "3d", "schedule.reserved": "1d"})
    r = tpopt.solve(sc, solver="toy", analysis=False)
    assert r.status == Status.INFEASIBLE and not r.plans


def test_a_name_resolves_once_into_the_solver_that_travels():
    """:func:`backends.resolve` turns a name into a :class:`backends.Solver` (a Solver as it is); its text is the
    name, its capabilities the entry's; ``with_model`` falls to the default where the backend has no model;
    :func:`backends.checked` keeps the solve entry points' message for an unknown name."""
    s = backends.resolve("pyomo:scip")
    assert s.name == str(s) == "pyomo:scip" and s.capabilities.model_export and backends.resolve(s) is s
    assert backends.resolve("enumerate").with_model() == backends.resolve(backends.DEFAULT)
    assert backends.resolve("highs").with_model().name == "highs"
    assert backends.resolve("enumerate").with_model().name == backends.DEFAULT  # the name a report prints
    with pytest.raises(InputError, match=r"^unknown solver 'x' \(use one of: "):
        backends.checked("x")
    with pytest.raises(InputError) as unknown:
        backends.resolve("x")
    assert str(unknown.value) == str(backends.unknown_solver("x"))


def test_a_resolved_solver_answers_as_its_name(toy):
    """The solve entry points take the resolved Solver as they take its name: the same plans, the same
    report (the solver's name, a string, in the figures)."""
    sc = load_scenario(DESIGN)
    by_name = core.solve(sc, "toy", Request(top=2))
    resolved = core.solve(sc, backends.resolve("toy"), Request(top=2))
    assert toy.calls == 2 and resolved.solver.as_dict()["name"] == "toy"
    assert [ev.plan for ev in resolved.plans] == [ev.plan for ev in by_name.plans] and by_name.plans
    assert json.dumps(resolved.solver.as_dict()) == json.dumps(dict(by_name.solver.as_dict(),
                                                                     wall_s=resolved.solver.as_dict()["wall_s"]))


def test_explain_and_rl_hold_the_resolved_solver(toy):
    """Explain's context and the RL problem resolve the name once where it comes in and hold the :class:`Solver`
    (its text the name); an unknown name fails there with :func:`backends.unknown_solver`'s message, and the RL
    report prints the learner's backend by name."""
    from tpopt.optimizer.explain import Context

    ctx = Context.of(load_scenario(DESIGN), "toy", Request())
    assert isinstance(ctx.backend, backends.Solver) and ctx.backend == backends.resolve("toy")
    assert Context.of(load_scenario(DESIGN), ctx.backend, Request()).backend is ctx.backend
    pb = O.RLProblem(load_rl_scenario(RL), "toy")
    assert isinstance(pb.backend, backends.Solver) and str(pb.backend) == "toy"
    assert pb.with_card_limit(8).backend is pb.backend
    for make in (lambda: Context.of(load_scenario(DESIGN), "nope", Request()),
                 lambda: O.RLProblem(load_rl_scenario(RL), "nope")):
        with pytest.raises(InputError) as unknown:
            make()
        assert str(unknown.value) == str(backends.unknown_solver("nope"))


def test_loading_the_highs_backend_loads_no_ortools(tmp_path):
    """The HiGHS encoding shares its clamping (caps, lower) with CP-SAT through a module without a solver library:
    in a fresh interpreter (run from an empty folder), importing the HiGHS backend module, its backend object
    built, leaves OR-Tools and the CP-SAT module unloaded."""
    import subprocess
    import sys

    code = ("import sys; import tpopt.optimizer.backends.highs_model as h; print(h.HIGHS is not None, "
            "'ortools' in sys.modules, 'tpopt.optimizer.backends.cpsat_model' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         timeout=120, cwd=tmp_path)
    assert out.stdout.split() == ["True", "False", "False"], out.stderr
