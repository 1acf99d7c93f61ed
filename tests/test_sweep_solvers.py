"""`tpopt sweep --solver` takes every name `tpopt solve --solver` takes (pyomo:NAME too), in the local
pool, on Dask and through the Python API; a solver that is not installed is one line, exit 2, and no file."""

import csv
from pathlib import Path

import pytest
from click.testing import CliRunner

from tpopt.cli.main import cli
from tpopt.errors import InputError
from tpopt.optimizer import sweep as sw

ROOT = Path(__file__).resolve().parents[1]
SWEEP_FILE = str(ROOT / "examples" / "design-case-sweep.toml")
# 20 d is infeasible (fastest 24.6 d: the chapter's 48 cards, 10.6), 25 d and 30 d optimal at 48 cards
SMALL = ["--deadline", "20d,25d,30d", "--quiet"]


def run(args):
    r = CliRunner().invoke(cli, ["sweep", "--scenario", SWEEP_FILE] + args)
    return r.exit_code, r.stdout, r.stderr


def rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_pyomo_highs_sweep_gives_the_rows_of_highs(tmp_path):
    files = {}
    for solver in ("highs", "pyomo:highs"):
        files[solver] = tmp_path / f"{solver.replace(':', '_')}.csv"
        code, _, err = run(SMALL + ["--solver", solver, "--workers", "1", "--out", str(files[solver])])
        assert code == 0, err
    a, b = rows(files["highs"]), rows(files["pyomo:highs"])
    assert [r["status"] for r in a] == ["infeasible", "optimal", "optimal"]
    assert [r["cards"] for r in a] == ["", "48", "48"]
    assert [r["solver"] for r in a] == ["highs"] * 3 and [r["solver"] for r in b] == ["pyomo:highs"] * 3
    # every column the same except the solver and the row checksum (which covers the solver column)
    for x, y in zip(a, b, strict=False):
        differ = {k for k in x if x[k] != y[k]}
        assert differ == {"solver", "checksum"}, differ


@pytest.mark.parametrize("where", ["file", "cli"])
def test_missing_pyomo_solver_is_one_line_and_writes_nothing(tmp_path, where):
    out = tmp_path / "res.csv"
    if where == "cli":
        code, stdout, err = run(["--deadline", "30d", "--solver", "pyomo:nosuch", "--out", str(out)])
    else:  # the same check for a [sweep] solver key
        scen = tmp_path / "s.toml"
        scen.write_text(Path(SWEEP_FILE).read_text().replace('\n[sweep]\n', '\n[sweep]\nsolver = "pyomo:nosuch"\n', 1))
        r = CliRunner().invoke(cli, ["sweep", "--scenario", str(scen), "--deadline", "30d", "--out", str(out)])
        code, stdout, err = r.exit_code, r.stdout, r.stderr
    assert code == 2, (code, stdout, err)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "pyomo:nosuch" in lines[0] and "Traceback" not in err, err
    assert stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == (["s.toml"] if where == "file" else [])


def test_existing_out_is_untouched_by_a_missing_solver(tmp_path):
    out = tmp_path / "res.csv"
    code, _, err = run(SMALL + ["--solver", "highs", "--workers", "1", "--out", str(out)])
    assert code == 0, err
    before = out.read_bytes()
    code, _, err = run(SMALL + ["--solver", "pyomo:nosuch", "--out", str(out)])
    assert code == 2 and "pyomo:nosuch" in err
    assert out.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["res.csv"]


def test_python_api_takes_the_same_names():
    res = sw.sweep(SWEEP_FILE, deadline="25d", solver="pyomo:highs", workers=1)
    ref = sw.sweep(SWEEP_FILE, deadline="25d", solver="highs", workers=1)
    assert [r["solver"] for r in res.rows] == ["pyomo:highs"]
    assert [(r["status"], r["cards"], r["cost"]) for r in res.rows] == \
        [(r["status"], r["cards"], r["cost"]) for r in ref.rows]
    with pytest.raises(InputError, match="pyomo:nosuch"):
        sw.sweep(SWEEP_FILE, deadline="25d", solver="pyomo:nosuch")
    import tpopt

    table = tpopt.sweep(SWEEP_FILE, deadline="25d", solver="pyomo:highs", workers=1)
    assert [(r["status"], r["cards"], r["cost"], r["solver"]) for r in table.rows] == \
        [(r["status"], r["cards"], r["cost"], "pyomo:highs") for r in ref.rows]
    with pytest.raises(InputError, match="pyomo:nosuch"):
        tpopt.sweep(SWEEP_FILE, deadline="25d", solver="pyomo:nosuch")
    for bad in ("pyomo:", "gurobi", "pyomo:a b"):
        with pytest.raises(InputError, match="--solver"):
            sw.build_spec(SWEEP_FILE, {"solver": bad})


def test_dask_executor_runs_pyomo_points(tmp_path):
    pytest.importorskip("distributed")
    out = tmp_path / "dask.csv"
    ref = tmp_path / "local.csv"
    cli_ = {"deadline": "20d,25d", "solver": "pyomo:highs"}
    sw.run_sweep(sw.build_spec(SWEEP_FILE, cli_), out=ref, workers=1)
    res = sw.run_sweep(sw.build_spec(SWEEP_FILE, cli_), out=out, cluster="local:1")
    assert res.executor == "dask" and res.paths == {"pyomo:highs": 2}
    assert out.read_bytes() == ref.read_bytes()
