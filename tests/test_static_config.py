"""The static checks give the same verdict in a clone of any name, and mypy is strict over the whole package.

The repository root *is* the `tpopt` package, so ruff cannot tell from the layout whether `tpopt` is first-party:
it guessed from the folder's name, and a clone into a folder named `tpopt` wanted another import order (57
findings) than a clone into any other folder. pyproject.toml now says so (known-first-party).
"""

import importlib.util
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())

#: What mypy's --strict turns on (the options .ci/typecheck relies on), each required of every module.
STRICT = ("disallow_untyped_defs", "disallow_incomplete_defs", "disallow_untyped_calls", "disallow_untyped_decorators",
          "disallow_any_generics", "disallow_subclassing_any", "check_untyped_defs", "warn_return_any",
          "no_implicit_reexport", "strict_equality", "extra_checks")


def test_ruff_is_told_tpopt_is_first_party():
    assert CONFIG["tool"]["ruff"]["lint"]["isort"]["known-first-party"] == ["tpopt"]


def test_mypy_is_strict_for_every_module():
    """Strict globally, and no per-module override turns a strict option off (or names a module at all)."""
    mypy = CONFIG["tool"]["mypy"]
    assert all(mypy.get(option) is True for option in STRICT), [o for o in STRICT if mypy.get(o) is not True]
    relaxed = [(o["module"], k) for o in mypy.get("overrides", []) for k in STRICT if o.get(k) is False]
    assert relaxed == []


def _python_sources() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "*.py", "pyproject.toml"], cwd=ROOT,
                         capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("not a git checkout")
    return [ROOT / line for line in out.stdout.splitlines() if (ROOT / line).is_file()]


@pytest.mark.skipif(importlib.util.find_spec("ruff") is None, reason="ruff is in the test extra")
def test_ruff_verdict_does_not_depend_on_the_folder_name(tmp_path):
    """The Python files and pyproject.toml copied into a folder named `tpopt` and into one named otherwise:
    ruff finds nothing in either (the same verdict as in this checkout)."""
    sources = _python_sources()
    for folder in ("tpopt", "a-clone"):
        dest = tmp_path / folder
        for f in sources:
            target = dest / f.relative_to(ROOT)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, target)
        r = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=dest, capture_output=True,
                           text=True)
        assert r.returncode == 0, f"in a folder named {folder}:\n{r.stdout[-3000:]}"
