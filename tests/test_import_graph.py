"""The tpopt-internal import graph, function-level imports included, has no cycle, and the layers point
one way: models/ imports none of optimizer/, catalogs/, cli/; optimizer/ never imports cli/.

Every product module (the package minus tests/ and benchmarks/) is parsed with :mod:`ast`; each
``import tpopt.x`` / ``from tpopt.x import y`` anywhere in it (module level, inside a function, under
``TYPE_CHECKING``) is an edge to the module it names (``from tpopt.x import y`` to ``tpopt.x.y`` when
that is a module). The backend registry loads a backend's module by name on first use
(``tpopt.optimizer.backends``): that one lazy boundary is not an import statement, so it is no edge.

Where imports sit (the rule; :func:`test_function_level_imports_are_lazy_by_rule`): every import is at
module level, except at the one lazy-import boundary, which exists for start-up time only:

* loaders by name (``importlib.import_module``, no import statement) in the modules of
  :data:`DYNAMIC_LOADERS` only: ``tpopt/__init__.py`` loads the API on first attribute access,
  ``cli/main.py`` each command's module when that command runs (so a command's module-level imports
  never load another command's, nor the solvers, at start-up), the backend registry a solver's module on
  first lookup, :func:`tpopt.errors.require` an optional library, the sweep's worker pools their
  modules ahead of the first task;
* an import statement inside a function is either of a heavy third-party library of
  :data:`LAZY_LIBRARIES` (solvers, plotting, data frames, clusters, the Hugging Face hub) or carries the
  marker ``# lazy: <why>`` on its line (``# lazy: start-up time``: a module the headline command
  ``tpopt solve`` does not need, such as the Hugging Face config reader or the Pyomo model).

Imports under ``if TYPE_CHECKING:`` are typing only and count as module level.
"""

from __future__ import annotations

import ast
import functools
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SKIP = {"tests", "benchmarks", "examples", ".venv", "build", "dist"}

LAZY_LIBRARIES = frozenset({"ortools", "highspy", "pyomo", "pyscipopt", "matplotlib", "pyarrow", "pandas",
                            "distributed", "dask", "huggingface_hub"})
"""Heavy third-party libraries imported where used (inside functions), for start-up time."""

DYNAMIC_LOADERS = frozenset({"__init__.py", "cli/main.py", "optimizer/backends/__init__.py", "errors.py",
                             "optimizer/sweep/local.py", "optimizer/sweep/executor.py"})
"""The modules that may load a module by name (``importlib.import_module``): see the module's rule."""



def _python_files():
    """Every .py file under the root, skipping tests, benchmarks, virtual environments and hidden folders."""
    for folder, dirs, files in os.walk(ROOT):
        top = Path(folder) == ROOT
        dirs[:] = [d for d in dirs if not d.startswith(".") and not (top and d in SKIP) and d != "__pycache__"]
        yield from (Path(folder) / f for f in files if f.endswith(".py"))


def product_modules() -> dict[str, Path]:
    """``tpopt.optimizer.core`` -> its file, for every product module (packages by their __init__)."""
    mods = {}
    for path in _python_files():
        rel = path.relative_to(ROOT)
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(["tpopt", *parts])] = path
    return mods


def imported(path: Path, name: str, mods: dict) -> set[str]:
    """The tpopt modules one file imports (relative imports resolved against ``name``)."""
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = name.split(".") if is_pkg else name.split(".")[:-1]
                pkg = pkg[:len(pkg) - (node.level - 1)]
                base = ".".join(pkg + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in mods:  # ``import tpopt.models.units as U`` -> the module itself
                t = t.rpartition(".")[0]
            if t.startswith("tpopt") and t != name and t != "tpopt":
                out.add(t)
    return out


@functools.cache
def _graph() -> dict[str, frozenset[str]]:
    mods = product_modules()
    return {name: frozenset(imported(path, name, mods)) for name, path in mods.items()}


def graph() -> dict[str, set[str]]:
    return {m: set(ts) for m, ts in _graph().items()}




def find_cycle(g: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``g`` as a path (first == last), or None (iterative depth-first search)."""
    state: dict[str, int] = {}
    for start in sorted(g):
        if state.get(start):
            continue
        stack = [(start, iter(sorted(g[start])))]
        path = [start]
        state[start] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
                path.pop()
                continue
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if not state.get(nxt):
                state[nxt] = 1
                stack.append((nxt, iter(sorted(g.get(nxt, ())))))
                path.append(nxt)
    return None


def _within(g: dict[str, set[str]], keep) -> dict[str, set[str]]:
    return {m: {t for t in ts if keep(t)} for m, ts in g.items() if keep(m)}


def _not_catalogs(name: str) -> bool:
    return not name.startswith("tpopt.catalogs")


def test_the_import_graph_is_acyclic():
    """models/, optimizer/ (core below outer and plan, the backends below core), cli/, api and the root
    modules import one another without a circle."""
    cycle = find_cycle(_within(graph(), _not_catalogs))
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_the_catalogs_import_graph_is_acyclic():
    cycle = find_cycle(graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def _layer_edges(src: str, banned: tuple[str, ...]) -> list[str]:
    return sorted(f"{m} -> {t}" for m, ts in graph().items() if m.startswith(src) for t in ts
                  if t.startswith(banned))


def test_models_import_no_upper_layer():
    assert _layer_edges("tpopt.models", ("tpopt.optimizer", "tpopt.catalogs", "tpopt.cli")) == []


def test_optimizer_never_imports_the_cli():
    assert _layer_edges("tpopt.optimizer", ("tpopt.cli",)) == []


def test_the_edge_modules_import_neither_the_optimiser_nor_the_cli():
    """The modules at the root beside the API (a plan from the plan flags, a plan as a launch configuration, the
    plain text of results, frames) read the scenario, the catalogs and an evaluated plan, no solver: the reason
    their docstrings give for living there rather than in optimizer/; and the command line imports them, not
    the reverse."""
    for module in ("tpopt.plan_fields", "tpopt.frameworks", "tpopt.presentation", "tpopt.frames"):
        assert module in graph(), module
        assert _layer_edges(module, ("tpopt.optimizer", "tpopt.cli")) == [], module


def test_the_walk_sees_typing_only_imports():
    """An import under ``if TYPE_CHECKING:`` is an edge too (a typing circle is a circle: each module needs the
    other to be read, by a type checker or a reader); a cycle test blind to them would prove nothing about them."""
    g = graph()
    assert "tpopt.optimizer.result" in g["tpopt.optimizer.backends.protocol"]  # under TYPE_CHECKING only
    assert find_cycle({"a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]


def face_imports(path: Path, mods: dict[str, Path]) -> list[str]:
    """The imports of the package face (``tpopt/__init__.py``) in one file: ``import tpopt``, or ``from tpopt
    import x`` where ``tpopt.x`` is no module (a name the face defines or loads, such as ``__version__``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name == "tpopt"]
        elif isinstance(node, ast.ImportFrom) and node.module == "tpopt" and not node.level:
            found += [f"tpopt.{a.name}" for a in node.names if f"tpopt.{a.name}" not in mods]
    return found


def test_no_layer_below_the_face_imports_it():
    """No module below the package face imports it (models/, optimizer/, catalogs/, cli/ and the modules at the
    root beside it: api.py, presentation.py, plan_fields.py, frameworks.py, ...): the face loads the API (which
    imports them), so they read what they need from its ground modules (``tpopt._version`` for the version, as
    ``tpopt --version`` does)."""
    mods = product_modules()
    assert {"tpopt.api", "tpopt.plan_fields", "tpopt.frameworks", "tpopt.cli.main"} <= set(mods)
    bad = sorted(f"{_where(path)}: {', '.join(face_imports(path, mods))}" for name, path in mods.items()
                 if name != "tpopt" and face_imports(path, mods))
    assert bad == [], "modules importing the package face:\n" + "\n".join(bad)


def test_the_face_check_sees_a_face_import(tmp_path):
    """The check finds ``from tpopt import __version__`` and ``import tpopt``, not an import of a submodule."""
    f = tmp_path / "m.py"
    f.write_text("import tpopt\nfrom tpopt import __version__, errors\nfrom tpopt._version import __version__\n")
    assert face_imports(f, product_modules()) == ["tpopt", "tpopt.__version__"]


SOLVER_LIBRARIES = frozenset({"ortools", "highspy", "pyomo", "pyscipopt", "gurobipy"})
"""The solver libraries: a backend's own code (its encoding, master and backend object) imports them."""


def third_party_imports(path: Path) -> set[str]:
    """The top-level names of every absolute import in one file, anywhere in it (``ortools`` for
    ``from ortools.sat.python import cp_model``)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.add(node.module.split(".")[0])
    return out


def test_only_the_backends_import_the_solver_libraries():
    """Backends own their code: every import of a solver library sits in a module of optimizer/backends/ (a
    new backend is one module there plus its ``register`` call), none in the modules a solve passes through."""
    bad = sorted(f"{_where(path)}: {', '.join(sorted(third_party_imports(path) & SOLVER_LIBRARIES))}"
                 for name, path in product_modules().items()
                 if not name.startswith("tpopt.optimizer.backends") and third_party_imports(path) & SOLVER_LIBRARIES)
    assert bad == [], "solver libraries imported outside optimizer/backends/:\n" + "\n".join(bad)
    inside = [p for n, p in product_modules().items() if n.startswith("tpopt.optimizer.backends.")]
    assert {"ortools", "highspy", "pyomo"} <= set().union(*(third_party_imports(p) for p in inside))


def test_the_walk_sees_function_level_imports():
    """The graph includes imports inside functions (a cycle test blind to them would prove nothing)."""
    g = graph()
    assert len(g) > 50 and "tpopt.optimizer.core" in g and "tpopt.models.plan" in g["tpopt.optimizer.core"]


def function_level_imports(path: Path) -> list[tuple[int, str, str]]:
    """(line, imported module, source text) of every import statement inside a function of ``path``
    (relative imports keep their dots)."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    found = []

    def walk(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if in_function and isinstance(child, (ast.Import, ast.ImportFrom)):
                if isinstance(child, ast.ImportFrom):
                    module = "." * child.level + (child.module or "")
                    found.append((child.lineno, module, " ".join(lines[child.lineno - 1:child.end_lineno])))
                else:
                    found.extend((child.lineno, a.name, " ".join(lines[child.lineno - 1:child.end_lineno]))
                                 for a in child.names)
            walk(child, inside)

    walk(ast.parse(text), False)
    return found


def _where(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_function_level_imports_are_lazy_by_rule():
    """Each import inside a function is of a library in LAZY_LIBRARIES or carries ``# lazy:`` (see the
    module's rule)."""
    bad = []
    for path in product_modules().values():
        for line, module, source in function_level_imports(path):
            if module.split(".")[0] not in LAZY_LIBRARIES and "# lazy:" not in source:
                bad.append(f"{_where(path)}:{line}: {source.strip()}")
    assert bad == [], "imports inside functions, neither of a heavy library nor marked '# lazy:':\n" + "\n".join(bad)


def test_only_the_documented_loaders_load_modules_by_name():
    """``importlib.import_module`` (a lazy load the import graph cannot see) only in DYNAMIC_LOADERS."""
    users = set()
    for path in product_modules().values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr == "import_module" or \
                    isinstance(node, ast.Name) and node.id == "__import__":
                users.add(_where(path))
    assert users <= DYNAMIC_LOADERS, sorted(users - DYNAMIC_LOADERS)


def test_the_rule_sees_function_level_imports():
    """The walk finds an import inside a function (a rule blind to them would prove nothing)."""
    found = function_level_imports(ROOT / "frames.py")
    assert [m for _, m, _ in found] == ["pandas"] and "# lazy: start-up time" in found[0][2]
