"""Reading catalog inputs: size-capped text files and the checks every catalog table shares (known
keys, required keys), each a one-line :class:`InputError`; a key's value is read as its declaration says
(:mod:`tpopt.catalogs.declare`: text, flags and sources tables there)."""

from __future__ import annotations

from collections.abc import Iterable
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
    """
    p = Path(path)
    try:
        with p.open("rb") as fh:
            data = fh.read(limit + 1)
    except FileNotFoundError:
        raise InputError(f"{what} {str(p)!r} not found") from None
    except IsADirectoryError:
        raise InputError(f"{what} {str(p)!r} is a directory, not a file") from None
    except OSError as exc:
        raise InputError(f"{what} {str(p)!r}: cannot read ({exc.strerror or exc})") from None
    if len(data) > limit:
        raise InputError(f"{what} {str(p)!r} is larger than the bound of {limit / 2**20:g} MiB; not a tpopt input")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{what} {str(p)!r} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
                         f"{exc.start})") from None


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
