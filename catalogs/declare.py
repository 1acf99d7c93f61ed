"""Keys declared once, the mechanism shared by scenarios (:mod:`tpopt.catalogs.schema`) and catalog entries
(:mod:`tpopt.catalogs.entry_keys`, :mod:`tpopt.catalogs.architectures`, :mod:`tpopt.catalogs.stacks`): a
:class:`Kind` says how one value is read (type, unit and bound, through the unit parsers of
:mod:`tpopt.models.units`), a :class:`Key` declares one key (kind, default, help, the field it sets, required,
source, neutral), and :func:`read_table` / :func:`read_entry` read a table whose record class declares its keys
as fields. Kept light (units and errors only) so that reading a catalog does not import the scenario schema.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from tpopt.errors import InputError
from tpopt.models.units import (
    MAX_INT,
    parse_bandwidth,
    parse_bytes,
    parse_count,
    parse_duration,
    parse_flops_rate,
    parse_fraction,
    parse_int,
    parse_number,
)

MAX_DOMAIN_INT = 2**20  # tp, pp, dp, micro-batch, NIC counts in [search]; the default bound of a whole number


# ---------------------------------------------------------------------------------------------
# kinds: how one value is read (type, unit and bound), each a unit parser with its bounds


@dataclass(frozen=True)
class Kind:
    """How one value is read: ``read(value, what, context)`` -> the value in SI units; ``unit`` says
    what a user writes (for help texts). ``context`` is what :func:`read_table` was given for the values
    that are looked up elsewhere (the catalog for NICs and storage tiers, the model for MoE domains)."""

    read: Callable[[Any, str, Any], Any]
    unit: str
    parser: Callable[..., Any] | None = None  # the unit parser of a quantity
    bounds: Mapping[str, Any] = field(default_factory=dict)  # its bounds (minimum, maximum, allow_zero)
    sep: str = " "  # between a catalog entry and the key in errors (:func:`read_entry`): "accelerator x memory: ..."


def quantity(parser: Callable[..., Any], unit: str, **bounds: Any) -> Kind:
    """A value read by the unit parser ``parser`` with ``bounds``; ``unit`` says what a user writes."""
    return Kind(lambda value, what, _context: parser(value, what, **bounds), unit, parser, bounds)


def duration(**bounds: Any) -> Kind:
    """Seconds from ``30d``, ``720h``, ``1800s`` (:func:`parse_duration` with ``bounds``)."""
    return quantity(parse_duration, "duration (30d, 720h, 1800s)", **bounds)


def size(**bounds: Any) -> Kind:
    """Bytes from ``22GiB`` or ``24GB``."""
    return quantity(parse_bytes, "bytes (22GiB, 24GB)", **bounds)


def flops_rate(**bounds: Any) -> Kind:
    """FLOP/s from ``989TFLOP/s``."""
    return quantity(parse_flops_rate, "FLOP/s (989TFLOP/s)", **bounds)


def bandwidth(**bounds: Any) -> Kind:
    """Bytes per second from ``7GB/s`` or ``200Gbit/s``."""
    return quantity(parse_bandwidth, "bytes/s (7GB/s, 200Gbit/s)", **bounds)


def count(**bounds: Any) -> Kind:
    """A count from ``100B``, ``1.5T`` or a number."""
    return quantity(parse_count, "count (100B, 1.5T)", **bounds)


def integer(minimum: int = 1, maximum: int = MAX_DOMAIN_INT) -> Kind:
    """A whole number in [minimum, maximum]."""
    return quantity(parse_int, f"whole number >= {minimum}", minimum=minimum, maximum=maximum)


def whole(minimum: int) -> Kind:
    """A whole number >= ``minimum`` up to :data:`~tpopt.models.units.MAX_INT` (the unit parser's own bound):
    the counts of catalog entries, stacks and the [rl] table."""
    return integer(minimum=minimum, maximum=MAX_INT)


def fraction(**bounds: Any) -> Kind:
    """A fraction from ``40%`` or ``0.4``."""
    return quantity(parse_fraction, "fraction (40% or 0.4)", **bounds)


def number(**bounds: Any) -> Kind:
    """A plain number (prices, ratios)."""
    return quantity(parse_number, "number", **bounds)


def choice(options: tuple[str, ...], message: str = "{what} {value!r} unknown (use one of: {options})") -> Kind:
    """One of ``options`` (as text); anything else -> ``message``."""

    def read(value: Any, what: str, _context: Any) -> str:
        text = str(value)
        if text not in options:
            raise InputError(message.format(what=what, value=text, options=", ".join(options)))
        return text

    return Kind(read, " | ".join(options))


# catalog wording: ``<where>: <key> must be ...`` (the scenario schema's TEXT and FLAG word their errors otherwise)


def _text(value: Any, what: str, _context: Any) -> str:
    if not isinstance(value, str):
        raise InputError(f"{what} must be a string, got {value!r}")
    return value


def _flag(value: Any, what: str, _context: Any) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"{what} must be true or false, got {value!r}")
    return value


def _sources(value: Any, what: str, _context: Any) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise InputError(f"{what} must be a table of strings")
    return dict(value)


TEXT = Kind(_text, "text", sep=": ")
FLAG = Kind(_flag, "true | false", sep=": ")
SOURCES = Kind(_sources, "table of strings", sep=": ")


def raw(unit: str) -> Kind:
    """A value kept as given, read where its meaning is (``unit`` says what it is)."""
    return Kind(lambda value, _what, _context: value, unit)


# ---------------------------------------------------------------------------------------------
# keys and tables (a table's record class is a declaration: frozen, without comparison and text methods,
# which would only cost import time on every command's start)


@dataclass(frozen=True)
class Key:
    """One scenario key: how it is read, its default (as a file writes it; None: no value unless given),
    help text, the name errors use (``<table>.<key>`` unless ``label``), the model field it sets (``to``,
    default its own name), and whether it is required, may be set per training stage, or takes a given
    None as not given (``optional``). ``check`` = (test on the read value, message) for a bound that the
    parser does not know. A catalog key (:func:`read_entry`) also says whether the entry's ``sources`` table
    must source its value (``source``) and whether its default is neutral (``neutral``: it changes nothing,
    so the model leaves the field out of fingerprints at that default)."""

    kind: Kind
    default: Any = None
    help: str = ""
    label: str | None = None
    to: str | None = None
    required: bool = False
    per_stage: bool = False
    optional: bool = False
    check: tuple[Callable[[Any], bool], str] | None = None
    source: bool = False  # a catalog key whose value the entry's ``sources`` table must source
    neutral: bool = False  # a catalog key whose default changes nothing (left out of fingerprints)


def key(kind: Kind, default: Any = None, help: str = "", **options: Any) -> Any:
    """A table field declaring one scenario key (see :class:`Key`)."""
    return field(default=None, metadata={"key": Key(kind, default, help, **options)})


def spec(f: Any) -> Key:
    declared: Key = f.metadata["key"]
    return declared


def read_table(cls: type, table: Mapping[str, Any], prefix: str, context: Any = None) -> Any:
    """The declared keys of ``cls`` read from ``table`` (given values, else the declared defaults), in
    declaration order; errors name ``prefix + key`` (or the key's label). Two keys of an ``EXCLUSIVE``
    pair may not both be given; each of the ``RULES`` (after, test, message) tests the values read once
    the key ``after`` is read, and its message is formatted with them."""
    exclusive = getattr(cls, "EXCLUSIVE", ())
    rules = getattr(cls, "RULES", ())
    values: dict[str, Any] = {}
    for f in fields(cls):
        for a, b in exclusive:
            if f.name in (a, b) and a in table and b in table:
                raise InputError(f"{prefix.rstrip('. ')}: give {a} or {b}, not both")
        values[f.name] = _read_key(spec(f), f.name, table, prefix, context)
        for after, test, message in rules:
            if after == f.name and test(values):
                raise InputError(message.format(**values))
    return cls(**values)


def read_entry(cls: type, table: Mapping[str, Any], where: str, context: Any = None) -> Any:
    """The declared keys of a catalog entry (``where``: ``"accelerator NAME"``) read from ``table`` as
    :func:`read_table` reads a scenario table, in the catalog's wording: a value is named ``<where><sep><key>``
    (its kind's ``sep``), a missing ``required`` key is ``<where>: missing required key 'KEY'``, and each of the
    ``RULES`` (after, test, message) is formatted with ``where`` and the values read. The keys named in
    ``READ_FIRST`` are read before the others (in that order), the rest in declaration order."""
    rules = getattr(cls, "RULES", ())
    first: tuple[str, ...] = getattr(cls, "READ_FIRST", ())
    values: dict[str, Any] = {}
    for f in sorted(fields(cls), key=lambda f: first.index(f.name) if f.name in first else len(first)):
        k = spec(f)
        values[f.name] = _read_key(k, f.name, table, where + k.kind.sep, context)
        if k.required and values[f.name] is None:
            raise InputError(f"{where}: missing required key {f.name!r}")
        for after, test, message in rules:
            if after == f.name and test(values):
                raise InputError(message.format(where=where, **values))
    return cls(**values)


def _read_key(k: Key, name: str, table: Mapping[str, Any], prefix: str, context: Any) -> Any:
    """One key's value: given (a None given to an ``optional`` key counts as not given), else the default
    (None: no value); then the key's own check."""
    given = name in table and not (k.optional and table[name] is None)
    value = table[name] if given else k.default
    read = k.kind.read(value, k.label or prefix + name, context) if given or value is not None else None
    if k.check is not None and read is not None and k.check[0](read):
        raise InputError(k.check[1])
    return read


def targets(record: Any, *names: str) -> dict[str, Any]:
    """``{model field: value}`` of a read table's keys (all of them, or ``names``) that have a value."""
    return {spec(f).to or f.name: getattr(record, f.name) for f in fields(record)
            if (not names or f.name in names) and getattr(record, f.name) is not None}
