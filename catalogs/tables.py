"""Reading catalog inputs: size-capped text files and the checks every catalog table shares (known
keys, required keys), each a one-line :class:`InputError`; a key's value is read as its declaration says
(:mod:`tpopt.catalogs.declare`: text, flags and sources tables there)."""

from __future__ import annotations

import csv
import json
import marshal
import os
import stat
import sys
import tomllib
from collections.abc import Callable, Iterable
from os import PathLike
from pathlib import Path
from typing import Any

from tpopt.errors import InputError

#: Largest input file tpopt reads (catalog TOML, config.json): 16 MiB. Real ones are a few kB; the
#: cap keeps ``/dev/zero`` or a mistaken multi-gigabyte path from exhausting memory.
MAX_INPUT_BYTES = 16 * 2**20


def read_text_capped(path: str | PathLike[str], what: str = "file", limit: int = MAX_INPUT_BYTES) -> str:
    """The UTF-8 text of a file of at most ``limit`` bytes, or one :class:`InputError` line.

    Reads at most ``limit + 1`` bytes, so an endless or huge file costs no more than the cap.
    Regular files only, opened without blocking: a FIFO, socket or device (which may never end, or
    never open) is refused in one line.
    """
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise InputError(f"{what} {str(p)!r} not found") from None
    except IsADirectoryError:
        raise InputError(f"{what} {str(p)!r} is a directory, not a file") from None
    except OSError as exc:
        raise InputError(f"{what} {str(p)!r}: cannot read ({exc.strerror or exc})") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise InputError(f"{what} {str(p)!r} is a directory, not a file")
        if not stat.S_ISREG(mode):
            kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
                    else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a plain file")
            raise InputError(f"{what} {str(p)!r} is {kind}, not a regular file; tpopt reads regular files only")
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise InputError(f"{what} {str(p)!r}: cannot read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise InputError(f"{what} {str(p)!r} is larger than the bound of {limit / 2**20:g} MiB; not a tpopt input")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{what} {str(p)!r} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
                         f"{exc.start})") from None


#: Deepest nesting of tables and arrays (JSON objects and lists) tpopt accepts in any input: real inputs
#: nest a handful of levels; the cap keeps a crafted file from exhausting the parser's or a reader's stack.
MAX_NESTING = 32


def nesting_depth(value: object, limit: int = MAX_NESTING) -> int:
    """How deep tables and arrays nest in ``value`` (a scalar: 0), counted without recursion and stopped
    once past ``limit``."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, dict):
            children: Iterable[object] = v.values()
        elif isinstance(v, list | tuple):
            children = v
        else:
            continue
        deepest = max(deepest, depth + 1)
        if deepest > limit:
            return deepest
        stack.extend((c, depth + 1) for c in children)
    return deepest


def _loads(parse: Callable[[Any], Any], text: str | bytes, where: str, fmt: str) -> Any:
    """``parse(text)``, or one :class:`InputError` line: malformed, nested deeper than :data:`MAX_NESTING`
    (checked after parsing too: the parser's own stack stops near 1,000), or holding an integer of more digits
    than Python converts (``sys.get_int_max_str_digits``)."""
    deep = InputError(f"{where}: {fmt} tables/arrays nested deeper than {MAX_NESTING} levels; not a tpopt input")
    try:
        data = parse(text)
    except RecursionError:
        raise deep from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{where}: malformed {fmt} ({exc.msg}, line {exc.lineno})") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{where}: malformed {fmt} ({exc})") from None
    except ValueError as exc:  # too many digits, or bytes that are not UTF-8
        raise InputError(f"{where}: malformed {fmt} ({str(exc).split(';')[0]})") from None
    if nesting_depth(data) > MAX_NESTING:
        raise deep
    return data


def loads_toml(text: str, where: str) -> dict[str, Any]:
    """Parsed TOML (:func:`_loads`: malformed, too deep or too long an integer is one line)."""
    return dict(_loads(tomllib.loads, text, where, "TOML"))


#: The package's own catalog folder: the TOML files there are parsed once and kept (:func:`builtin_toml`).
BUILTIN_TABLES = Path(__file__).resolve().parent
#: The kept form's version (the tuple :func:`builtin_toml` stores); a different one is parsed anew.
PARSED_FORMAT = 1


def builtin_toml(path: Path, text: str, parse: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    """``parse(text)`` of a TOML file; for tpopt's own catalog files (``catalogs/*.toml``) the result is kept in
    ``catalogs/__pycache__`` as Python keeps compiled modules, so a later run skips the parse (start-up time:
    ``tomllib`` took 17 ms of the headline's 0.3 CPU s; reading the kept forms, about 1 ms).

    The kept form holds the whole text it was parsed from and serves only that exact text, so an edited file is
    parsed anew (never stale); ``parse`` (a plain TOML parse: the kept form stands for any) raises as without it,
    and files outside the package are never kept. Nothing is kept where the folder is read-only, nor for values
    ``marshal`` does not keep (dates). Unlike bytecode it is written under ``PYTHONDONTWRITEBYTECODE`` too: an
    installer compiles the bytecode, but nothing writes this form before the first run."""
    kept = BUILTIN_TABLES / "__pycache__" / f"{path.name}.{sys.implementation.cache_tag}.marshal"
    own = path.resolve().parent == BUILTIN_TABLES
    if own:
        try:
            with open(kept, "rb") as fh:
                form, source, data = marshal.loads(fh.read())
            if form == PARSED_FORMAT and source == text and isinstance(data, dict):
                return data
        except (OSError, EOFError, ValueError, TypeError):
            pass  # none kept yet, or unreadable: parse
    data = parse(text)
    if own:
        try:
            blob = marshal.dumps((PARSED_FORMAT, text, data))
            kept.parent.mkdir(exist_ok=True)
            part = kept.with_name(f"{kept.name}.{os.getpid()}")
            try:
                part.write_bytes(blob)
                os.replace(part, kept)  # whole or not at all, whatever runs beside
            finally:
                part.unlink(missing_ok=True)
        except (OSError, ValueError):
            pass
    return data


def loads_json(text: str | bytes, where: str) -> Any:
    """Parsed JSON (:func:`_loads`: malformed, too deep or too long an integer is one line)."""
    return _loads(json.loads, text, where, "JSON")


def csv_rows(lines: Iterable[str], where: str) -> list[dict[str, str]]:
    """The rows of CSV text (header first) as dicts, or one :class:`InputError` line: a field past the
    ``csv`` module's limit (128 KiB), a stray quote or a NUL byte (the text itself is size-capped on reading)."""
    try:
        return list(csv.DictReader(lines))
    except csv.Error as exc:
        raise InputError(f"{where}: malformed CSV ({exc})") from None


def need(table: dict[str, Any], key: str, where: str) -> Any:
    """``table[key]``, or one :class:`InputError` naming the missing key."""
    if key not in table:
        raise InputError(f"{where}: missing required key {key!r}")
    return table[key]


def check_keys(t: object, allowed: Iterable[str], where: str) -> dict[str, Any]:
    """The table itself, after checking it is a table and holds only known keys."""
    if not isinstance(t, dict):
        raise InputError(f"{where}: expected a table, got {t!r}")
    unknown = sorted(set(t) - set(allowed))
    if unknown:
        raise InputError(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(allowed))})")
    return t
