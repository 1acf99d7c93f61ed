"""Start-up time of the ``tpopt`` program: the functions ``dataclasses`` writes for every data class, compiled once
and kept.

Each ``@dataclass`` writes its ``__init__``, ``__repr__``, ``__eq__``, ``__hash__`` and, when frozen, ``__setattr__``
and ``__delattr__`` as Python source text and compiles it with ``exec`` when its module is imported: about 490
functions behind the headline ``tpopt solve --deadline 30d --hw rtx4090``, compiled anew in every process, about
45 ms of its 0.27 CPU s. While :func:`dataclass_code_kept` holds, ``dataclasses`` runs the code compiled from the
same text in an earlier run instead, kept in the package's ``__pycache__`` as Python keeps compiled modules.

Nothing else changes: a kept code object is the one ``compile`` returns for that exact text (the whole text is the
key, so an edited class, another Python or another ``dataclasses`` only misses), compiled as ``exec`` compiles it in
``dataclasses`` (file name ``<string>``, none of this module's ``__future__`` flags), and run with the globals and
locals ``dataclasses`` passes. Like the kept catalog parses (:func:`tpopt.catalogs.tables.builtin_toml`) the file is
written whole or not at all, also under ``PYTHONDONTWRITEBYTECODE``, and not where the folder is read-only.
"""

from __future__ import annotations

import builtins
import dataclasses
import importlib.util
import marshal
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import CodeType
from typing import Any

#: The kept file's layout version; a file of another one (or of another bytecode or ``-O``: :func:`compiled_by`) is
#: not read.
KEPT_FORMAT = 1
#: Most functions kept: past it, a save keeps only the ones its own run used (edited classes leave old texts). The
#: whole package's data classes write about 800 (the headline's 484 make a 0.8 MB file, read in about 1.5 ms).
MAX_KEPT = 2_000
#: The package's own ``__pycache__`` (the repository root is the ``tpopt`` package).
PYCACHE = Path(__file__).resolve().parents[1] / "__pycache__"


def kept_path() -> Path:
    """Where the compiled functions are kept, one file per interpreter (``cpython-311``, ...)."""
    return PYCACHE / f"dataclass-functions.{sys.implementation.cache_tag}.marshal"


def compiled_by() -> tuple[bytes, int]:
    """What the kept code was compiled for: the interpreter's bytecode (``MAGIC_NUMBER``) and ``-O`` level."""
    return importlib.util.MAGIC_NUMBER, sys.flags.optimize


def compile_as_dataclasses(source: str) -> CodeType:
    """``source`` compiled as ``exec(source, ...)`` compiles it in ``dataclasses``: file ``<string>``, the
    ``__future__`` flags of ``dataclasses`` (none), not this module's (``dont_inherit``), the interpreter's ``-O``."""
    return compile(source, "<string>", "exec", dont_inherit=True)


class KeptCode:
    """The code compiled from each text in earlier runs (``kept``) and in this one (``new``); :meth:`exec` stands
    in for the built-in within ``dataclasses``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._kept: dict[str, CodeType] | None = None
        self.new: dict[str, CodeType] = {}
        self.used: set[str] = set()

    @property
    def kept(self) -> dict[str, CodeType]:
        """The code of earlier runs, read at the first data class (``tpopt --help`` creates none)."""
        if self._kept is None:
            self._kept = self._read(self.path)
        return self._kept

    @staticmethod
    def _read(path: Path) -> dict[str, CodeType]:
        """The kept texts and their code, or none (no file yet, unreadable, another format or bytecode)."""
        try:
            with open(path, "rb") as fh:
                form, magic, kept = marshal.loads(fh.read())
        except (OSError, EOFError, ValueError, TypeError):
            return {}
        if form != KEPT_FORMAT or magic != compiled_by() or not isinstance(kept, dict):
            return {}
        return {t: c for t, c in kept.items() if isinstance(t, str) and isinstance(c, CodeType)}

    def code(self, source: str) -> CodeType:
        """The code of ``source``: kept, or compiled now (and kept at :meth:`save`)."""
        self.used.add(source)
        found = self.kept.get(source) or self.new.get(source)
        if found is None:
            found = self.new[source] = compile_as_dataclasses(source)
        return found

    def exec(self, source: Any, globals: dict[str, Any] | None = None, locals: Any = None, /) -> None:
        """``exec(source, globals, locals)`` with a text's code taken from :meth:`code`; anything else (no globals,
        a code object) goes to the built-in as given, with the caller's namespaces where none are given."""
        if isinstance(source, str) and globals is not None:
            builtins.exec(self.code(source), globals, locals)
            return
        if globals is None:
            caller = sys._getframe(1)
            globals, locals = caller.f_globals, caller.f_locals if locals is None else locals
        builtins.exec(source, globals, locals)

    def save(self) -> None:
        """Write the kept texts with this run's new ones (only this run's past :data:`MAX_KEPT`), whole or not
        at all; nothing when nothing is new, or the folder cannot be written."""
        if not self.new:
            return
        every = {**self.kept, **self.new}
        if len(every) > MAX_KEPT:
            every = {t: c for t, c in every.items() if t in self.used}
        part = self.path.with_name(f"{self.path.name}.{os.getpid()}")
        try:
            blob = marshal.dumps((KEPT_FORMAT, compiled_by(), every))
            self.path.parent.mkdir(exist_ok=True)
            try:
                part.write_bytes(blob)
                os.replace(part, self.path)  # whole or not at all, whatever runs beside
            finally:
                part.unlink(missing_ok=True)
        except (OSError, ValueError):
            pass  # a read-only install: compiled each run, as without this


@contextmanager
def dataclass_code_kept(path: Path | None = None) -> Iterator[KeptCode]:
    """While inside, data classes created anywhere in the process run kept code (:class:`KeptCode`); on leaving
    (an exception or ``sys.exit`` included) the built-in ``exec`` is back in ``dataclasses`` and the new code is
    kept. For the ``tpopt`` program only (:func:`tpopt.cli.main.main`), never on import: an API user's process
    keeps its own ``dataclasses``. Where ``dataclasses`` already has its own ``exec`` nothing is changed."""
    kept = KeptCode(kept_path() if path is None else path)
    if "exec" in vars(dataclasses):
        yield kept
        return
    namespace = vars(dataclasses)  # its functions look ``exec`` up here before the built-ins
    namespace["exec"] = kept.exec
    try:
        yield kept
    finally:
        del namespace["exec"]
        kept.save()
