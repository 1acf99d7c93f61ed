"""The Pyomo formulation (issue 14, item 3): any Pyomo solver, the same exact optimum, LP/MPS export.

Golden figures: the chapter's design case (10.6) is 48 RTX 4090 cards, ZeRO-3, TP = PP = 1,
micro-batch 1 x 8 accumulation; its cost is whatever CP-SAT proves optimal, and every Pyomo solver
must return the same plan and cost. Exported files are read back with HiGHS's own reader (highspy),
never through tpopt or Pyomo.
"""

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tpopt.cli.main import cli
from tpopt.optimizer.core import solve
from tpopt.optimizer.result import Request, Status

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "examples" / "design-case.toml"
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}

# the solvers CI installs from the project's own files: HiGHS (a dependency) and SCIP (the test extra)
CI_SOLVERS = ("pyomo:highs", "pyomo:scip")
# free solvers tested where their executables are installed (apt-get install coinor-cbc glpk-utils)
OPTIONAL = [pytest.param(f"pyomo:{n}", marks=pytest.mark.skipif(shutil.which(x) is None, reason=f"{x} not installed"))
            for n, x in (("cbc", "cbc"), ("glpk", "glpsol"))]


class Run:
    def __init__(self, r):
        self.returncode, self.stdout, self.stderr = r.exit_code, r.stdout, r.stderr


def tpopt(*args):
    """The CLI in-process (click's runner; stdout and stderr apart)."""
    return Run(CliRunner().invoke(cli, [str(a) for a in args]))


def tpopt_process(*args, env=None):
    """The CLI as a user runs it (the console entry point's one-line usage errors)."""
    return subprocess.run([sys.executable, "-m", "tpopt.cli.main", *map(str, args)], capture_output=True, text=True,
                          env=env or ENV)


@pytest.fixture(scope="module")
def reference(design):
    r = solve(design, "cpsat", Request(seed=0, workers=1))
    assert r.status == Status.OPTIMAL
    return r.best


@pytest.mark.parametrize("backend", [*CI_SOLVERS, *OPTIONAL])
@pytest.mark.parametrize("method", ["monolithic", "decomposed"])
def test_design_case_same_optimum_as_cpsat(design, reference, backend, method):
    r = solve(design, backend, Request(seed=0, workers=1, method=method))
    assert r.status == Status.OPTIMAL
    assert r.solver.name == backend
    p = r.best.plan
    assert (p.accelerator, p.cards, p.zero_stage, p.tp, p.pp, p.micro_batch, p.grad_accum) == \
        ("rtx4090", 48, 3, 1, 1, 1, 8)
    assert p == reference.plan
    assert math.isclose(r.best.metrics["cost"], reference.metrics["cost"], rel_tol=1e-12)


def test_open_layout_search_time_objective(design, reference):
    """A wider space (layouts, ZeRO stages, micro-batches) and the time objective: Pyomo HiGHS and SCIP
    agree with enumeration on the fastest plan."""
    from tpopt.catalogs.scenario import load_scenario

    sc = load_scenario(DESIGN, {"search.zero_stage": [0, 1, 2, 3], "search.tp": [1, 2], "search.micro_batch": [1, 2]})
    ref = solve(sc, "enumerate", Request(objective="time"))
    assert ref.status == Status.OPTIMAL
    for backend in CI_SOLVERS:
        r = solve(sc, backend, Request(objective="time", method="monolithic"))
        assert r.status == Status.OPTIMAL, backend
        assert math.isclose(r.best.metrics["finish_days"], ref.best.metrics["finish_days"], rel_tol=1e-9), backend


def test_infeasible_request_is_proven(design):
    from tpopt.catalogs.scenario import load_scenario

    sc = load_scenario(DESIGN, {"search.max_cards": "32"})  # 48 cards are needed (README, explain example)
    for backend in CI_SOLVERS:
        for method in ("monolithic", "decomposed"):
            assert solve(sc, backend, Request(method=method)).status == Status.INFEASIBLE, (backend, method)


def test_cli_solve_with_pyomo_solvers_matches_cpsat(tmp_path):
    base = json.loads(tpopt("solve", "--scenario", DESIGN, "--json", "--no-analysis").stdout)
    for backend in CI_SOLVERS:
        r = tpopt("solve", "--scenario", DESIGN, "--solver", backend, "--json", "--no-analysis")
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["status"] == "optimal" and out["solver"]["name"] == backend
        assert out["plan"] == base["plan"]
        assert out["metrics"]["cost"] == pytest.approx(base["metrics"]["cost"], rel=1e-12)


def test_unknown_pyomo_solver_is_one_line_exit_2():
    r = tpopt("solve", "--scenario", DESIGN, "--solver", "pyomo:nosuchsolver")
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert "nosuchsolver" in r.stderr and r.stdout == ""


def test_missing_solver_executable_is_one_line_exit_2(tmp_path):
    """With no solver executables on PATH, pyomo:glpk says what to install, exits 2, and writes
    nothing (not even the requested export)."""
    target = tmp_path / "plan.lp"
    r = tpopt_process("solve", "--scenario", DESIGN, "--solver", "pyomo:glpk", "--export", target,
                      env={**ENV, "PATH": str(tmp_path)})
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert "not installed" in r.stderr and "apt-get install glpk-utils" in r.stderr
    assert not target.exists()


def test_malformed_solver_names():
    import click

    from tpopt.cli.common import SolverName

    for bad in ("pyomo:", "pyomo", "scip", "pyomo:a b", "PYOMO:highs"):
        with pytest.raises(click.BadParameter):
            SolverName().convert(bad, None, None)
    assert SolverName().convert(" pyomo:gurobi ", None, None) == "pyomo:gurobi"
    r = tpopt_process("solve", "--scenario", DESIGN, "--solver", "pyomo:")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


# ---------------------------------------------------------------------------------------------
# export


def _read_with_highs(path):
    """Solve a model file with HiGHS's own reader; return (objective, chosen value per variable)."""
    import highspy

    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    assert h.readModel(str(path)) == highspy.HighsStatus.kOk
    h.setOptionValue("mip_rel_gap", 0.0)
    h.run()
    assert h.getModelStatus() == highspy.HighsModelStatus.kOptimal
    names = list(h.getLp().col_names_)
    x = h.getSolution().col_value
    chosen = {}
    for n, v in zip(names, x, strict=False):
        if n.startswith("choose_") and v > 0.5:
            var, val = n[len("choose_"):].split("(", 1)
            chosen[var] = val.rstrip(")")
    return h.getInfo().objective_function_value, chosen


@pytest.mark.parametrize("ext", [".lp", ".mps"])
def test_export_loads_in_highs_and_gives_the_optimum(tmp_path, reference, ext):
    target = tmp_path / f"plan{ext}"
    r = tpopt("solve", "--scenario", DESIGN, "--export", target, "--no-analysis")
    assert r.returncode == 0, r.stderr
    assert f"wrote {target}" in r.stderr and "Status: optimal" in r.stdout
    obj, chosen = _read_with_highs(target)
    assert obj == pytest.approx(reference.metrics["cost"], rel=1e-9)
    assert chosen["acc"] == "rtx4090" and chosen["dp"] == "48" and chosen["tp"] == "1" and chosen["zero"] == "3"
    assert chosen["mb"] == "1" and chosen["tau"] == "1800"


def test_export_time_objective_and_json(tmp_path, reference):
    target = tmp_path / "fast.lp"
    r = tpopt("solve", "--scenario", DESIGN, "--export", target, "--objective", "time", "--json", "--no-analysis")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["export"]["path"] == str(target) and out["export"]["objective"] == "finish_days"
    assert out["export"]["format"] == "lp" and out["export"]["variables"] > 0
    obj, _ = _read_with_highs(target)
    assert obj == pytest.approx(out["metrics"]["finish_days"], rel=1e-9)  # minimised finish, in days


def test_export_is_deterministic(tmp_path):
    a, b = tmp_path / "a.lp", tmp_path / "b.lp"
    for t in (a, b):
        assert tpopt("solve", "--scenario", DESIGN, "--export", t, "--no-analysis").returncode == 0
    assert a.read_bytes() == b.read_bytes()


def test_export_bad_input_writes_nothing(tmp_path):
    keep = tmp_path / "plan.lp"
    keep.write_text("precious\n")
    for args in (["--export", tmp_path / "plan.txt"], ["--export", tmp_path / "no" / "plan.lp"],
                 ["--export", keep, "--deadline", "30x"], ["--export", keep, "--hw", "nosuchcard"]):
        r = tpopt("solve", "--scenario", DESIGN, *args)
        assert r.returncode == 2 and r.stderr.count("\n") == 1, (args, r.stderr)
    assert keep.read_text() == "precious\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.lp"]


def test_export_size_limit(design, tmp_path, monkeypatch):
    from tpopt.errors import InputError
    from tpopt.optimizer.backends import pyomo_model
    from tpopt.optimizer.space import Space

    monkeypatch.setattr(pyomo_model, "EXPORT_LIMIT", 10)
    with pytest.raises(InputError, match="narrow the \\[search\\]"):
        pyomo_model.export_model(Space.from_scenario(design), Request(), tmp_path / "big.mps")
    assert not list(tmp_path.iterdir())


def test_pyomo_model_is_the_highs_matrix(design):
    """The Pyomo model has exactly the columns, rows and nonzeros of the HiGHS MILP it translates."""
    from tpopt.optimizer.backends.highs_model import HighsModel
    from tpopt.optimizer.backends.pyomo_model import MilpFormulation, build_pyomo
    from tpopt.optimizer.space import Space

    space = Space.from_scenario(design)
    h = HighsModel(space, Request())
    f = MilpFormulation(space, Request())
    m, var = build_pyomo(f)
    lp = h.h.getLp()
    assert len(var) == lp.num_col_ and len(m.row) == lp.num_row_
    nnz = sum(len(list(m.row[i].body.linear_vars)) for i in m.row)
    assert nnz == h.h.getNumNz()
    assert sum(1 for v in var if v.is_integer()) == sum(1 for t in lp.integrality_ if t != type(t).kContinuous)


def test_default_path_does_not_import_pyomo():
    code = ("import sys; from tpopt.catalogs.scenario import load_scenario; from tpopt.optimizer.core import solve; "
            f"solve(load_scenario({str(DESIGN)!r}), 'cpsat'); solve(load_scenario({str(DESIGN)!r}), 'highs'); "
            "print('pyomo' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"
