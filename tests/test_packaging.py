"""The wheel contains every subpackage and catalog file, under the single `tpopt` namespace."""

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SKIP = {"tests", "benchmarks", "examples", "build", "dist"}


def _subpackages() -> list[str]:
    """Every folder of the source tree with an ``__init__.py`` (tests, benchmarks, examples and hidden
    folders aside), as a path relative to the root: derived, so a new subpackage is checked without an edit."""
    out = []
    for folder, dirs, files in os.walk(ROOT):
        here = Path(folder)
        dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__" and not (here == ROOT and d in SKIP)]
        if here != ROOT and "__init__.py" in files:
            out.append(here.relative_to(ROOT).as_posix())
    return sorted(out)


def _source_files():
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                         text=True)
    if out.returncode != 0:
        pytest.skip("not a git checkout")
    return [ROOT / line for line in out.stdout.splitlines() if (ROOT / line).is_file()]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    src = tmp_path_factory.mktemp("src")
    for f in _source_files():
        dest = src / f.relative_to(ROOT)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, dest)
    out = tmp_path_factory.mktemp("dist")
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                        "-w", str(out), str(src)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-2000:]
    wheels = list(out.glob("tpopt-*.whl"))
    assert len(wheels) == 1
    return zipfile.ZipFile(wheels[0])


def test_every_subpackage_is_in_the_wheel(wheel):
    names = set(wheel.namelist())
    assert "tpopt/__init__.py" in names
    subs = _subpackages()
    assert {"models", "models/terms", "models/pipeline", "optimizer", "catalogs", "cli"} <= set(subs)
    for sub in subs:
        assert f"tpopt/{sub}/__init__.py" in names, sub
        for py in (ROOT / sub).glob("*.py"):
            assert f"tpopt/{sub}/{py.name}" in names, py


def test_api_main_and_type_marker_are_in_the_wheel(wheel):
    names = set(wheel.namelist())
    for f in ("api.py", "frames.py", "__main__.py", "py.typed"):
        assert f"tpopt/{f}" in names, f
    assert "tpopt/catalogs/design-case.toml" in names  # the built-in default scenario


def test_catalog_files_are_in_the_wheel(wheel):
    names = set(wheel.namelist())
    tomls = list((ROOT / "catalogs").glob("*.toml")) + list((ROOT / "catalogs").glob("frameworks/*.toml"))
    assert tomls and any(t.parent.name == "frameworks" for t in tomls)
    for t in tomls:
        assert f"tpopt/{t.relative_to(ROOT).as_posix()}" in names


def test_no_generic_top_level_packages(wheel):
    tops = {n.split("/")[0] for n in wheel.namelist()}
    assert not tops & {"cli", "models", "optimizer", "catalogs", "tests", "benchmarks"}
    assert not any(n.startswith("tpopt/tests/") or n.startswith("tpopt/benchmarks/") for n in wheel.namelist())


def test_the_version_is_declared_once(wheel):
    """pyproject.toml names no version of its own: setuptools reads the ground module ``_version.py``, and the
    wheel's metadata carries that version (the package face re-exports the same object)."""
    import tomllib

    import tpopt
    from tpopt._version import __version__

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "tpopt._version.__version__"}
    meta = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    assert f"\nVersion: {__version__}\n" in wheel.read(meta).decode()
    assert tpopt.__version__ is __version__


def test_console_script_declared(wheel):
    ep = next(n for n in wheel.namelist() if n.endswith("entry_points.txt"))
    assert "tpopt = tpopt.cli.main:main" in wheel.read(ep).decode()


def test_readme_commands_and_ci_agree():
    """The README's first lines give the install-and-solve and the test commands; .ci/run runs the latter."""
    lines = [ln for ln in (ROOT / "README.md").read_text().splitlines() if ln.startswith("python3 -m venv")]
    main_cmd, test_cmd = lines[0], lines[1]
    assert main_cmd.endswith("tpopt solve --deadline 30d --hw rtx4090")  # the built-in design case
    assert (ROOT / "catalogs" / "design-case.toml").exists() and (ROOT / "examples" / "design-case.toml").exists()
    assert "pytest" in test_cmd
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_cmd in ci.splitlines()
    readme_head = (ROOT / "README.md").read_text().splitlines()[:6]
    assert main_cmd in readme_head and test_cmd in readme_head
