"""Result rows as pandas DataFrames whose integer columns stay integers.

pandas turns a column of ints with a missing value into float64 (48 -> 48.0); counts such as cards,
TP or the ZeRO stage are not measurements, so a column whose present values are all integers becomes
``int64`` (nothing missing) or the nullable ``Int64`` (something missing), and a column of booleans
``bool`` or ``boolean``. pandas is imported only when a frame is asked for.
"""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd


def _kind(values: list[Any]) -> str | None:
    present = [v for v in values if v is not None]
    if not present:
        return None
    if all(isinstance(v, (bool,)) or type(v).__name__ == "bool_" for v in present):
        return "bool"
    if all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in present):
        return "int"
    return None


def records_frame(rows: list[dict[str, Any]], columns: list[str] | None = None) -> pd.DataFrame:
    """A DataFrame with one row per dict (columns in first-seen order unless ``columns``)."""
    import pandas as pd  # lazy: start-up time

    if columns is None:
        columns = list(dict.fromkeys(k for r in rows for k in r))
    df = pd.DataFrame.from_records([{c: r.get(c) for c in columns} for r in rows], columns=columns)
    for c in columns:
        values = [r.get(c) for r in rows]
        kind = _kind(values)
        missing = any(v is None for v in values)
        if kind == "int":
            df[c] = pd.array(values, dtype="Int64") if missing else df[c].astype("int64")
        elif kind == "bool":
            df[c] = pd.array(values, dtype="boolean") if missing else df[c].astype(bool)
    return df
