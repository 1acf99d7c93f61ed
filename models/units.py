"""Units: parse once at the edge, compute in SI base units, print with the unit a figure needs.

Inside tpopt every quantity is a float in a base unit:

========== ============ =========================================================
dimension  base unit    accepted suffixes when parsing
========== ============ =========================================================
duration   second       ``us`` ``ms`` ``s`` ``min`` ``h`` ``d`` ``w``
bytes      byte         decimal ``B kB MB GB TB PB`` and binary ``KiB MiB GiB TiB``
bandwidth  byte/second  ``B/s kB/s MB/s GB/s TB/s GiB/s ...`` and bits ``Mbit/s Gbit/s Tbit/s``
                        (also ``Gbps``); 200 Gbit/s = 25 GB/s
count      1            ``K`` = 1e3, ``M`` = 1e6, ``B``/``G`` = 1e9, ``T`` = 1e12 (token counts)
rate       FLOP/s       ``TFLOP/s PFLOP/s GFLOP/s`` (also ``TFLOPS``)
fraction   1            ``40%`` or ``0.4``
========== ============ =========================================================

Decimal (GB, TB) and binary (GiB, MiB) prefixes are both legal and never mixed silently: ``24GB`` is
24e9 bytes = 22.35 GiB. A string without a unit is rejected for dimensioned quantities, so that
``--deadline 30`` cannot mean thirty seconds by accident.
"""

from __future__ import annotations

import math
import re

from tpopt.errors import InputError

SECOND = 1.0
MINUTE = 60.0
HOUR = 3600.0
DAY = 86400.0
WEEK = 7 * DAY

KB = 1e3
MB = 1e6
GB = 1e9
TB = 1e12
KIB = 1024.0
MIB = 1024.0**2
GIB = 1024.0**3
TIB = 1024.0**4

_DURATION = {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": SECOND, "sec": SECOND, "min": MINUTE, "h": HOUR, "d": DAY,
             "w": WEEK}
_BYTES = {
    "B": 1.0,
    "kB": KB,
    "KB": KB,
    "MB": MB,
    "GB": GB,
    "TB": TB,
    "PB": 1e15,
    "KiB": KIB,
    "MiB": MIB,
    "GiB": GIB,
    "TiB": TIB,
}
_BITS_PER_S = {"bit/s": 1.0, "kbit/s": 1e3, "Mbit/s": 1e6, "Gbit/s": 1e9, "Tbit/s": 1e12,
               "Mbps": 1e6, "Gbps": 1e9, "Tbps": 1e12, "Gb/s": 1e9, "Tb/s": 1e12, "Mb/s": 1e6}
_COUNT = {"": 1.0, "K": 1e3, "k": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}
_FLOPS = {"FLOP/s": 1.0, "GFLOP/s": 1e9, "TFLOP/s": 1e12, "PFLOP/s": 1e15,
          "FLOPS": 1.0, "GFLOPS": 1e9, "TFLOPS": 1e12, "PFLOPS": 1e15}

# Bounds at the parsing edge: every quantity is finite and below a stated magnitude, so that no
# downstream product (iterations x step x (1 + L), bytes in 64-bit integers) can overflow. Each
# parse_* function has a generous default; callers pass tighter, meaningful ones (a deadline of a
# century, 10^15 training tokens, 16 TiB per card) and the message states the bound.
MAX_DURATION_S = 1000 * 365 * DAY  # any duration (MTBF, intervals, ...): 1,000 years
# deadlines and reserved time: 1,000 years (validation runs use "no deadline" = 100,000 d)
MAX_DEADLINE_S = 1000 * 365 * DAY
MAX_BYTES = 1e18  # any size: 1 EB
MAX_CARD_BYTES = 16 * TIB  # memory per card (usable memory, activation reserve)
MAX_BANDWIDTH = 1e15  # 1 PB/s
MAX_FLOPS = 1e21  # per card
MAX_COUNT = 1e18
MAX_TOKENS = 1e15  # training tokens: 1,000T (about 30x the largest published pre-training run)
MAX_INT = 2**53  # integers stay exact in float64
MAX_NUMBER = 1e15  # prices, rates, ratios

_NUM = r"([+-]?(?:\d[\d_,]*\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)"
_RX = re.compile(r"^\s*" + _NUM + r"\s*([A-Za-z/%]*)\s*$")


def _show(value: object) -> str:
    """A value for a message, shortened (a 300-digit number is not echoed whole)."""
    text = repr(value)
    return text if len(text) <= 40 else text[:20] + "..." + text[-8:] + f" ({len(text)} characters)"


def _split(text: str, what: str) -> tuple[float, str]:
    if len(text) > 200:
        raise InputError(f"{what}: {_show(text)} is too long to be a quantity")
    m = _RX.match(text)
    if not m:
        raise InputError(f"{what}: cannot read {_show(text)} as a number with a unit")
    number = float(m.group(1).replace("_", "").replace(",", ""))
    return number, m.group(2)


def _float(value: float, what: str) -> float:
    try:
        return float(value)
    except OverflowError:  # an integer beyond float range (a 400-digit TOML integer)
        raise InputError(f"{what}: {_show(value)} is too large") from None


def _parse(value: object, what: str, table: dict[str, float], example: str, *, allow_bare: bool = False,
           allow_negative: bool = False, allow_zero: bool = True, maximum: float | None = None,
           bound: str = "") -> float:
    if isinstance(value, bool):
        raise InputError(f"{what}: expected a quantity like {example}, got {value!r}")
    if isinstance(value, (int, float)):
        if not allow_bare:
            raise InputError(f"{what}: {value!r} needs a unit, e.g. {example}")
        number, factor = _float(value, what), 1.0
    elif isinstance(value, str):
        number, unit = _split(value, what)
        if unit == "":
            if not allow_bare:
                raise InputError(f"{what}: {value!r} needs a unit, e.g. {example}")
            factor = 1.0
        elif unit not in table:
            known = ", ".join(k for k in table if k)
            raise InputError(f"{what}: unknown unit {unit!r} in {value!r} (use one of: {known})")
        else:
            factor = table[unit]
    else:
        raise InputError(f"{what}: expected a quantity like {example}, got {value!r}")
    result = number * factor
    if not math.isfinite(result):
        raise InputError(f"{what}: {_show(value)} is not a finite quantity")
    if result < 0 and not allow_negative:
        raise InputError(f"{what}: {_show(value)} must not be negative")
    if result == 0 and not allow_zero:
        raise InputError(f"{what}: {_show(value)} must be greater than zero")
    if maximum is not None and abs(result) > maximum:
        raise InputError(f"{what}: {_show(value)} is above the bound of {bound or f'{maximum:g}'}")
    return result


def parse_duration(value: object, what: str = "duration", *, allow_zero: bool = True,
                   maximum: float = MAX_DURATION_S) -> float:
    """Seconds from ``"30d"``, ``"720h"``, ``"1800s"``, ``"10ms"``, ``"2w"`` (at most ``maximum``)."""
    return _parse(value, what, _DURATION, "30d or 1800s", allow_zero=allow_zero, maximum=maximum,
                  bound=f"{maximum / DAY:,.0f} d ({maximum / (365 * DAY):,.0f} years)")


def parse_bytes(value: object, what: str = "size", *, allow_zero: bool = True, maximum: float = MAX_BYTES) -> float:
    """Bytes from ``"22GiB"`` (binary) or ``"24GB"`` (decimal); the two are never conflated."""
    bound = f"{maximum / TIB:,.0f} TiB" if maximum < 1e15 else f"{maximum / 1e15:,.0f} PB"
    return _parse(value, what, _BYTES, "22GiB or 24GB", allow_zero=allow_zero, maximum=maximum, bound=bound)


def parse_bandwidth(value: object, what: str = "bandwidth", *, allow_zero: bool = True) -> float:
    """Bytes per second from ``"7GB/s"``, ``"32 GB/s"``, ``"200Gbit/s"`` (= 25e9 B/s)."""
    table = {f"{k}/s": v for k, v in _BYTES.items()}
    table.update({k: v / 8.0 for k, v in _BITS_PER_S.items()})
    return _parse(value, what, table, "7GB/s or 200Gbit/s", allow_zero=allow_zero, maximum=MAX_BANDWIDTH,
                  bound="1 PB/s")


def parse_count(value: object, what: str = "count", *, allow_zero: bool = True, maximum: float = MAX_COUNT) -> float:
    """A count from ``"100B"`` (1e11), ``"1.5T"``, ``"8K"``, ``"384"`` or a TOML number.

    ``B`` here means billion (token counts), not bytes: a count has no byte unit.
    """
    bound = f"{maximum:,.0f}" if maximum < 1e7 else f"{maximum:.3g}" + (
        f" ({maximum / 1e12:,.0f}T)" if maximum >= 1e12 else "")
    return _parse(value, what, _COUNT, "100B or 1.5T", allow_bare=True, allow_zero=allow_zero, maximum=maximum,
                  bound=bound)


def parse_int(value: object, what: str = "integer", *, minimum: int | None = None, maximum: int = MAX_INT) -> int:
    """A whole number (accepts ``"8K"``-style suffixes) between ``minimum`` and ``maximum``."""
    x = parse_count(value, what, maximum=maximum)
    if x != int(x):
        raise InputError(f"{what}: {_show(value)} must be a whole number")
    if minimum is not None and x < minimum:
        raise InputError(f"{what}: {_show(value)} must be at least {minimum}")
    return int(x)


def parse_flops_rate(value: object, what: str = "peak") -> float:
    """FLOP/s from ``"989TFLOP/s"`` or ``"165.2 TFLOPS"``."""
    return _parse(value, what, _FLOPS, "989TFLOP/s", allow_zero=False, maximum=MAX_FLOPS, bound="1e21 FLOP/s")


def parse_fraction(value: object, what: str = "fraction", *, allow_zero: bool = False,
                   maximum: float | None = 1.0) -> float:
    """A fraction from ``"40%"`` or ``0.4``; must lie in (0, 1] unless told otherwise."""
    if isinstance(value, str) and value.strip().endswith("%"):
        number, _ = _split(value.strip()[:-1], what)
        x = number / 100.0
    else:
        x = _parse(value, what, {"": 1.0}, "40% or 0.4", allow_bare=True, allow_negative=True)
    if not math.isfinite(x) or x < 0 or (x == 0 and not allow_zero):
        raise InputError(f"{what}: {value!r} must be a positive fraction such as 40% or 0.4")
    if maximum is not None and x > maximum:
        raise InputError(f"{what}: {value!r} is above {maximum:g} ({maximum * 100:g}%)")
    return x


def parse_number(value: object, what: str = "number", *, allow_zero: bool = True,
                 allow_negative: bool = False, maximum: float = MAX_NUMBER) -> float:
    """A plain dimensionless number (prices, ratios), at most ``maximum`` in magnitude."""
    return _parse(value, what, {"": 1.0}, "2.0", allow_bare=True, allow_zero=allow_zero,
                  allow_negative=allow_negative, maximum=maximum)


# ---------------------------------------------------------------------------------------------
# formatting: the unit is always printed next to the number


def fmt_duration(x: float) -> str:
    """A human duration with its unit: ``"24.6 d"``, ``"3.2 h"``, ``"52.8 s"``, ``"12 ms"``."""
    if x >= 2 * DAY:
        return f"{x / DAY:.1f} d"
    if x >= 2 * HOUR:
        return f"{x / HOUR:.1f} h"
    if x >= 1.0:
        return f"{x:.1f} s"
    return f"{x * 1e3:.3g} ms"


def fmt_duration_exact(x: float) -> str:
    """A duration as the catalogs write one, unit attached: ``"33.4us"``, ``"2.31ms"``, ``"12.5s"`` (us below 1 ms,
    ms below 1 s, else s), in the fewest significant digits that :func:`parse_duration` reads back as ``x`` to
    within one unit in the last place (a file written and read again gives the same seconds; "20us" reads back as
    20 x 1e-6, one ulp above 2e-05)."""
    unit = "us" if x < 1e-3 else "ms" if x < 1.0 else "s"
    for digits in range(1, 18):
        text = f"{x / _DURATION[unit]:.{digits}g}{unit}"
        if "e" not in text and abs(parse_duration(text) - x) <= math.ulp(x):  # "20us", never "2e+01us"
            return text
    return f"{x!r}s"  # seconds as Python writes the float: always read back exactly


def fmt_durations(*xs: float) -> tuple[str, ...]:
    """Durations side by side in one unit, the one :func:`fmt_duration` picks for the largest, so they compare at a
    glance: (6 h, 1 h) -> ("6.0 h", "1.0 h"), not "6.0 h" against "3600.0 s"."""
    top = max(xs)
    if top < 1.0:
        return tuple(f"{x * 1e3:.3g} ms" for x in xs)
    unit, scale = ("d", DAY) if top >= 2 * DAY else ("h", HOUR) if top >= 2 * HOUR else ("s", 1.0)
    return tuple(f"{x / scale:.1f} {unit}" for x in xs)


def fmt_count(x: float, digits: int = 6) -> str:
    """A count with the largest suffix that keeps it at least 1, as ``parse_count`` reads it back:
    ``"100B"``, ``"1T"`` (not 1,000B), ``"1.5T"``, ``"85.23B"``, ``"512M"``; ``digits`` significant digits."""
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(x) >= scale:
            return f"{x / scale:.{digits}g}{suffix}"
    return f"{x:.{digits}g}"
