"""A lean install (issue 14, item 4): heavy parts as extras with one clear message when missing, and no
declared dependency left unused. SciPy became a core dependency with the finish-time distribution and the
calibration fit (issue 28 asks for its distributions, quadrature and least squares); it is imported by the
modules that use it, never for one function elsewhere."""

import math
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

from tpopt.models.reliability import expected_max_std_normal, log_ndtr

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "examples" / "design-case.toml"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

# log Phi(x) to 20 significant digits, from mpmath (50-digit arithmetic: log(ncdf(x)), and
# log1p(-ncdf(-x)) for x > 5 where Phi rounds to 1)
LOG_PHI = {
    -1000.0: -500007.82669481218431, -200.0: -20006.217280898190402, -40.0: -804.60844201375378817,
    -38.5: -745.69527029041108133, -20.0: -203.91715537109726394, -19.99: -203.71670771720843537,
    -10.0: -53.231285150512470578, -5.0: -15.064998393988725736, -3.0: -6.6077262215103495433,
    -1.0: -1.8410216450092635058, -0.5: -1.1759117615936186089, 0.0: -0.69314718055994530942,
    0.5: -0.36894641528865639307, 1.0: -0.17275377902344988953, 3.0: -0.0013508099647481937988,
    5.0: -2.8665161296376359338e-7, 8.0: -6.2209605742717860585e-16, 10.0: -7.619853024160526066e-24,
    20.0: -2.7536241186062336951e-89,
}


@pytest.mark.parametrize("x,want", sorted(LOG_PHI.items()))
def test_log_ndtr_known_values(x, want):
    # relative error: a few ulp in the lower tail and centre; erfc's own error (~1e-14) in the upper tail
    tol = 1e-15 if x <= 1.0 else 1e-13
    assert log_ndtr(x) == pytest.approx(want, rel=tol, abs=0.0)


def test_log_ndtr_edges_and_arrays():
    assert log_ndtr(0.0) == -math.log(2.0)
    assert log_ndtr(-math.inf) == -math.inf and log_ndtr(math.inf) == 0.0 and math.isnan(log_ndtr(math.nan))
    x = np.linspace(-60.0, 8.0, 6800).reshape(17, 400)
    y = log_ndtr(x)
    assert y.shape == x.shape and np.all(np.isfinite(y))
    assert np.all(np.diff(y.ravel()) > 0)  # strictly increasing, also across the -20 switch to the series
    # Phi(x) + Phi(-x) = 1 where both are representable
    for v in (0.1, 0.7, 1.3, 2.9):
        assert math.exp(log_ndtr(v)) + math.exp(log_ndtr(-v)) == pytest.approx(1.0, abs=2e-16)
    # continuity at the series switch: the two branches agree to rounding
    assert log_ndtr(-20.0) == pytest.approx(log_ndtr(np.nextafter(-20.0, 0.0)), rel=1e-15)


def test_expected_max_closed_forms():
    # E[max of 2] = 1/sqrt(pi), E[max of 3] = 3/(2 sqrt(pi)) (order statistics of the standard normal)
    assert expected_max_std_normal(2) == pytest.approx(1 / math.sqrt(math.pi), rel=1e-13)
    assert expected_max_std_normal(3) == pytest.approx(1.5 / math.sqrt(math.pi), rel=1e-13)


def _package_sources():
    yield from ROOT.glob("*.py")
    for sub in ("models", "optimizer", "catalogs", "cli"):
        yield from (ROOT / sub).rglob("*.py")


def _imported_top_modules() -> set[str]:
    mods = set()
    for f in _package_sources():
        for m in re.finditer(r"^\s*(?:from|import)\s+([A-Za-z_][A-Za-z0-9_]*)", f.read_text(), re.M):
            mods.add(m.group(1))
        for m in re.finditer(r"require\(\"([A-Za-z_][A-Za-z0-9_]*)", f.read_text()):
            mods.add(m.group(1))
    return mods


DIST_MODULE = {"ortools": "ortools", "pyomo": "pyomo", "highspy": "highspy", "numpy": "numpy", "click": "click",
               "rich": "rich", "pyarrow": "pyarrow", "matplotlib": "matplotlib", "pyscipopt": "pyscipopt",
               "pandas": "pandas", "scipy": "scipy", "huggingface_hub": "huggingface_hub",
               "huggingface-hub": "huggingface_hub"}


def _dist(req: str) -> str:
    return re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0].strip().lower()


def test_every_declared_dependency_is_used():
    """A runtime dependency no module imports is dead weight; so is an extra nothing asks for."""
    used = _imported_top_modules()
    deps = [_dist(r) for r in PYPROJECT["project"]["dependencies"]]
    for d in deps:
        assert DIST_MODULE.get(d, d.replace("-", "_")) in used, f"{d} is declared but never imported"
    extras = PYPROJECT["project"]["optional-dependencies"]
    for name, reqs in extras.items():
        if name in ("test", "frameworks"):  # frameworks: what the exports are validated against, in tests alone
            continue
        for d in map(_dist, reqs):
            mod = DIST_MODULE.get(d, d.replace("-", "_"))
            if d == "pyscipopt":  # loaded by Pyomo's SCIP interface, not imported by tpopt
                continue
            assert mod in used, f"extra {name}: {d} is never imported"


def test_heavy_parts_are_extras_and_the_test_extra_has_them_all():
    deps = {_dist(r) for r in PYPROJECT["project"]["dependencies"]}
    assert not deps & {"pyarrow", "matplotlib", "pyscipopt"}
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert {_dist(r) for r in extras["parquet"]} == {"pyarrow"}
    assert {_dist(r) for r in extras["plots"]} == {"matplotlib"}
    test = " ".join(extras["test"])
    m = re.search(r"tpopt\[([a-z,]+)\]", test)
    assert m, "the test extra must pull in the optional parts the suite uses"
    assert {"parquet", "plots", "scip"} <= set(m.group(1).split(","))


def test_require_names_the_extra():
    from tpopt.errors import InputError, require

    assert require("math", "plots", "x") is math
    with pytest.raises(InputError, match=r"--plot needs nosuchmodule, which is not installed: "
                                         r"pip install 'tpopt\[plots\]'"):
        require("nosuchmodule.sub", "plots", "--plot")


def _run_without(blocked: str, args, cwd):
    """Run the CLI in a fresh process in which ``blocked`` cannot be imported (as if not installed)."""
    code = (f"import sys; sys.modules[{blocked!r}] = None; sys.argv = ['tpopt'] + {list(map(str, args))!r}; "
            "from tpopt.cli.main import main; main()")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd,
                          env={**__import__("os").environ, "PYTHONPATH": __import__("os").pathsep.join(sys.path)})


@pytest.mark.parametrize("blocked,args,needle", [
    ("pyarrow", ["sweep", "--scenario", DESIGN, "--deadline", "20d:22d:1d", "--out", "r.parquet"],
     "--out r.parquet needs pyarrow, which is not installed: pip install 'tpopt[parquet]'"),
    ("matplotlib", ["pipeline", "--schedule", "1f1b", "-p", "2", "-m", "4", "--forward", "1ms", "--backward", "2ms",
                    "--plot", "t.svg"], "needs matplotlib, which is not installed: pip install 'tpopt[plots]'"),
    ("matplotlib", ["sweep", "--scenario", DESIGN, "--deadline", "20d:22d:1d", "--plot", "p.svg"],
     "--plot p.svg needs matplotlib"),
])
def test_missing_extra_is_one_line_exit_2_and_writes_nothing(tmp_path, blocked, args, needle):
    r = _run_without(blocked, args, tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert needle in r.stderr
    assert list(tmp_path.iterdir()) == []
