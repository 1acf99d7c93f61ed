"""Solver backends behind one interface, selected by name in one place.

A backend answers one design space (:class:`~tpopt.optimizer.space.Space`) under a
:class:`~tpopt.optimizer.result.Request` through one of three doors, which its
:class:`Capabilities` declare:

- ``monolithic``: ``model(name, space, req)`` returns a model of the whole space with ``solve(bound,
  time_limit)`` and ``exclude(assignment)``; :func:`tpopt.optimizer.backends.verify.verify_loop` verifies
  its candidates exactly (CP-SAT, HiGHS, Pyomo);
- ``decomposed``: ``master(name, space, bounds, allowed, req)`` returns the layout decomposition's master
  problem (:func:`tpopt.optimizer.decompose.solve_decomposed`);
- neither: ``solve_space(name, space, req, info)`` returns ``(plans, status)`` itself (the enumerator,
  which evaluates every plan exactly).

:meth:`Solver.require` raises :class:`~tpopt.errors.InputError` when the solver cannot run here (a
Pyomo solver that is not installed), before any work. A *family* backend is selected as
``prefix:NAME`` (``pyomo:highs``, ``pyomo:scip``): one entry, any NAME its ``check_name`` accepts.

The registry (:func:`register`, :func:`entry`) is the one place names are known: the names ``--solver``
takes, the sweep's check and every "unknown solver" message are derived from it. Heavy solver libraries
stay unimported until used (start-up time): an entry names its backend's module as a string, and
:meth:`Entry.load` imports it on first use -- the package's one lazy-import boundary. The capability flags
live in the entry, so asking what a backend can do loads nothing. A name is resolved once where it comes in
(:func:`resolve`, :func:`checked`): the :class:`Solver` it gives travels through the solve, the analysis, the
reports, explain (``Context.backend``) and the RL search (``RLProblem.backend``), which ask it for its capabilities
and its backend instead of looking the name up again.

Each backend owns its code in one module of this package: ``cpsat_model.py`` (the CP-SAT encoding, its
decomposition master, ``CPSAT``), ``highs_model.py`` (HiGHS), ``pyomo_model.py`` (the Pyomo MILP, master and
export, ``PYOMO``), ``enumeration.py`` (the enumerator's adapter). What they share with the solve-verify loop
(``verify.py``) and the layout decomposition is :mod:`tpopt.optimizer.backends.protocol`; what the CP-SAT and HiGHS
encodings share without a solver library is :mod:`tpopt.optimizer.backends.encoding`. A new backend is one
module implementing :class:`~tpopt.optimizer.backends.protocol.Backend` plus its :func:`register` call below.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from tpopt.errors import InputError
from tpopt.optimizer.backends.protocol import Backend, CapabilityError

__all__ = ["Capabilities", "CapabilityError", "Backend", "Entry", "Solver", "resolve", "checked", "register",
           "unregister", "entry", "names", "is_known", "accepts_syntax", "not_a_solver", "check_solver",
           "unknown_solver", "listing", "metavar", "EXHAUSTIVE", "DEFAULT", "SWEEP_AUTO", "sweep_names",
           "check_sweep_solver"]


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do (each flag a yes/no the callers branch on, never the backend's name)."""

    exact_integer_scaling: bool = False
    """Integer-scaled encoding, rounded towards feasibility (CP-SAT); floating-point MILPs are not."""
    proves_optimality: bool = True
    """A finished solve proves its plans optimal (status ``optimal``, gap 0)."""
    time_limits: bool = True
    """Stops at the request's clock and reports the best verified plans with their gap."""
    model_export: bool = False
    """Can write its model to a file for another solver (``--export``)."""
    monolithic: bool = False
    """Has a model of the whole space that the solve-verify loop drives (``model``)."""
    decomposed: bool = False
    """Has a master problem for the layout decomposition (``master``)."""
    needs_tables: bool = True
    """Reads the space's term tables (built inside the time limit before the solve)."""
    tiny_by_enumeration: bool = False
    """Under ``--method auto`` a tiny space is answered by the enumerator instead: loading this solver takes
    longer than evaluating every plan."""
    sweep_table: bool = False
    """A sweep with this solver evaluates each group's whole table at once (no per-point solve)."""


@dataclass
class Entry:
    """One registered backend: its name (the prefix of a family), its capabilities, and where it lives
    (an object, or ``"module:attribute"`` imported on first :meth:`load`)."""

    name: str
    capabilities: Capabilities
    source: Backend | str
    family: bool = False
    name_pattern: str = r"[A-Za-z0-9_.\-]+"
    """A family member's NAME (after ``prefix:``) as the command line accepts it."""
    check_name: Callable[[str], None] | None = None
    """Callable(full name) raising InputError when a family NAME is malformed (None: the pattern only)."""
    examples: tuple[str, ...] = ()
    """Family members worth naming in an error message (``highs``, ``scip``, ...)."""
    checks_install: bool = False
    """``require`` asks the backend whether its solver is installed here (True: loads its module then;
    False: it ships with tpopt's dependencies, nothing to ask, nothing loaded)."""
    preload: tuple[str, ...] = ()
    """Libraries the backend imports only when it first solves: a process pool imports them before it forks."""

    def load(self) -> Backend:
        if isinstance(self.source, str):
            module, _, attr = self.source.partition(":")
            backend: Backend = getattr(importlib.import_module(module), attr)  # lazy: start-up time
            self.source = backend
            return backend
        return self.source

    def spelled(self, member: str = "NAME") -> str:
        return f"{self.name}:{member}" if self.family else self.name


_REGISTRY: dict[str, Entry] = {}


def register(name: str, backend: Backend | str, capabilities: Capabilities, *, family: bool = False,
             check_name: Callable[[str], None] | None = None, examples: Iterable[str] = (),
             preload: Iterable[str] = (), checks_install: bool = False) -> Entry:
    """Register ``backend`` (an object, or ``"module:attribute"`` loaded on first use) under ``name``;
    ``family=True``: selected as ``name:NAME``. A name registered again replaces the entry."""
    if not re.fullmatch(r"[a-z][a-z0-9_\-]*", name) or name == SWEEP_AUTO:
        raise ValueError(f"backend name {name!r} must be lower-case letters, digits, '_' or '-' (not 'auto')")
    e = Entry(name, capabilities, backend, family, check_name=check_name, examples=tuple(examples),
              preload=tuple(preload), checks_install=checks_install)
    _REGISTRY[name] = e
    return e


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def _entry_of(solver: str) -> Entry | None:
    s = str(solver)
    if s in _REGISTRY and not _REGISTRY[s].family:
        return _REGISTRY[s]
    prefix, sep, _ = s.partition(":")
    e = _REGISTRY.get(prefix)
    return e if sep and e is not None and e.family else None


def is_known(solver: str) -> bool:
    """``solver`` names a registered backend (``cpsat``, or ``pyomo:`` followed by anything)."""
    return _entry_of(solver) is not None


def names() -> tuple[str, ...]:
    """The plain backends' names in registration order (families excluded)."""
    return tuple(e.name for e in _REGISTRY.values() if not e.family)


def _families() -> tuple[Entry, ...]:
    return tuple(e for e in _REGISTRY.values() if e.family)


def listing(member: str = "NAME", sep: str = ", ", last: str | None = None, plain: tuple[str, ...] | None = None
            ) -> str:
    """The accepted names in words: ``cpsat, highs, enumerate, pyomo:NAME`` (``last``: the word before the
    final item, ``"or"`` gives ``cpsat, highs, enumerate or pyomo:NAME``)."""
    items = list(names() if plain is None else plain) + [e.spelled(member) for e in _families()]
    if last and len(items) > 1:
        return sep.join(items[:-1]) + f" {last} " + items[-1]
    return sep.join(items)


def metavar(plain: tuple[str, ...] | None = None) -> str:
    """``[cpsat|highs|enumerate|pyomo:NAME]``: the accepted names as a click metavar."""
    return "[" + listing(sep="|", plain=plain) + "]"


def not_a_solver(value: Any) -> str:
    """The command line's message for a name ``--solver`` does not take."""
    fams = [f"{e.spelled()} such as {', '.join(e.name + ':' + x for x in e.examples)}" if e.examples else e.spelled()
            for e in _families()]
    return f"{value!r} is not a solver (use {', '.join(names())}, or {' or '.join(fams)})"


def unknown_solver(solver: str) -> InputError:
    """The error of a name no entry takes (the Python API's and the RL solve's wording)."""
    return InputError(f"unknown solver {solver!r} (use {listing(last='or')})")


def check_solver(solver: str) -> str:
    """``solver`` if registered, else the solve entry point's one-line error."""
    if not is_known(solver):
        raise InputError(f"unknown solver {solver!r} (use one of: {listing(member='<solver>')})")
    return solver


def entry(solver: str) -> Entry:
    e = _entry_of(solver)
    if e is None:
        raise unknown_solver(solver)
    return e


@dataclass(frozen=True)
class Solver:
    """A backend resolved once from its name where the name comes in (the command line, the Python API, a sweep
    task): the modules a solve passes through ask it what it can do and for its backend, instead of each looking
    the name up again. Its text is its name (``str(solver)``), as reports print it."""

    name: str
    """As selected: ``cpsat``, ``enumerate``, or a family member's full name (``pyomo:scip``)."""
    entry: Entry = field(repr=False, compare=False)

    def __str__(self) -> str:
        return self.name

    @property
    def capabilities(self) -> Capabilities:
        return self.entry.capabilities

    @property
    def backend(self) -> Backend:
        """The backend object, its module imported on first use."""
        return self.entry.load()

    def with_model(self) -> Solver:
        """This solver if it has a model of the whole space (the analysis' monolithic oracle asks it), else
        :data:`DEFAULT` (the enumerator has none)."""
        return self if self.capabilities.monolithic else resolve(DEFAULT)

    def require(self, req: Any) -> None:
        """Fail with one line, before any work, when this solver cannot run here (a missing Pyomo solver)."""
        if self.entry.checks_install:
            self.backend.require(self.name, req)


def resolve(solver: str | Solver) -> Solver:
    """The :class:`Solver` a name selects (a :class:`Solver` as it is); an unknown name raises
    :func:`unknown_solver`'s error."""
    if isinstance(solver, Solver):
        return solver
    return Solver(str(solver), entry(solver))


def checked(solver: str | Solver) -> Solver:
    """:func:`resolve`, a name first checked with :func:`check_solver`'s message (the solve entry points')."""
    return resolve(check_solver(solver) if isinstance(solver, str) else solver)


EXHAUSTIVE = "enumerate"
"""The backend that evaluates every plan exactly: the last fallback of every other, and RL's answer for many
plans at once."""
DEFAULT = "cpsat"
"""The backend a question that needs a solver model falls to when the chosen one has none."""


def accepts_syntax(solver: str) -> bool:
    """The command line's check: a plain name, or ``prefix:NAME`` with NAME matching its family's pattern."""
    s = str(solver)
    e = _entry_of(s)
    if e is None:
        return False
    return not e.family or re.fullmatch(re.escape(e.name) + ":" + e.name_pattern, s) is not None


# ---------------------------------------------------------------------------------------------
# the sweep's names: "auto", the table path, then the per-point solvers

SWEEP_AUTO = "auto"


def sweep_names() -> tuple[str, ...]:
    """``auto``, then the backends that evaluate whole tables, then the per-point solvers."""
    plain = names()
    table = tuple(n for n in plain if _REGISTRY[n].capabilities.sweep_table)
    return (SWEEP_AUTO, *table, *(n for n in plain if n not in table))


def check_sweep_solver(solver: str, what: str | None) -> str:
    """A sweep solver name: ``auto``, a plain backend, or a family member whose NAME is well-formed (the
    syntax only; whether it is installed is :meth:`Solver.require`'s question)."""
    if solver in sweep_names():
        return solver
    e = _entry_of(solver)
    if e is not None and e.family:
        try:
            (e.check_name or _pattern_check(e))(solver)
        except InputError as exc:
            raise InputError(f"{what or '--solver'}: {exc}") from None
        return solver
    raise InputError(f"{what or '--solver'}: unknown solver {solver!r} (use one of: {', '.join(sweep_names())}, "
                     f"or {', '.join(f.spelled() for f in _families())} such as "
                     f"{', '.join(f.name + ':highs' for f in _families())})")


def _pattern_check(e: Entry) -> Callable[[str], None]:
    def check(solver: str) -> None:
        if not accepts_syntax(solver):
            raise InputError(f"solver {solver!r}: name the solver, e.g. {e.name}:NAME")
    return check


# ---------------------------------------------------------------------------------------------
# the built-in backends (their modules import the solver libraries: loaded on first use)


def _pyomo_name(solver: str) -> None:
    """``pyomo:NAME``'s syntax, with the message of ``optimizer/backends/pyomo_model.py`` (loads the module)."""
    importlib.import_module("tpopt.optimizer.backends.pyomo_model").solver_name(solver)  # lazy: start-up time


register("cpsat", "tpopt.optimizer.backends.cpsat_model:CPSAT",
         Capabilities(exact_integer_scaling=True, monolithic=True, decomposed=True, tiny_by_enumeration=True))
register("highs", "tpopt.optimizer.backends.highs_model:HIGHS",
         Capabilities(monolithic=True, decomposed=True, tiny_by_enumeration=True))
register("enumerate", "tpopt.optimizer.backends.enumeration:ENUMERATE",
         Capabilities(exact_integer_scaling=True, needs_tables=False, sweep_table=True))
register("pyomo", "tpopt.optimizer.backends.pyomo_model:PYOMO",
         Capabilities(monolithic=True, decomposed=True, model_export=True), family=True, check_name=_pyomo_name,
         examples=("highs", "scip", "cbc", "glpk", "gurobi"), preload=("pyomo.environ",),
         checks_install=True)
