"""Type aliases of the model functions: a quantity is a float or a numpy array of floats.

Every relation in :mod:`tpopt.models` broadcasts over numpy arrays, so that the solver can tabulate
it over arrays of layout choices; called with plain numbers it returns a number.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, TypeAlias

import numpy as np
from numpy.typing import NDArray

FloatArray: TypeAlias = NDArray[np.float64]
"""An array of float64 values (a relation tabulated over its arguments)."""

Floats: TypeAlias = float | NDArray[np.float64]
"""A float, or an array of them where the arguments were arrays."""


class ArrayMemo:
    """Answers of a pure function of small arrays, remembered by the arrays' bytes (shape, dtype and values) and
    the other arguments, at most ``entries`` of them, oldest first out. Arrays of more than ``cells`` entries
    together are not remembered (:meth:`key` is None: the caller computes as it comes). A table's slices ask the
    model's terms again for the same small grids (once per recompute set, schedule, stage class or accelerator):
    :func:`tpopt.models.memory.saved_tensors`, :func:`tpopt.models.terms._layer_sets`,
    :func:`tpopt.models.terms._dp_window_free`. Whatever is stored is shared between callers: store read-only
    arrays or hand out copies."""

    def __init__(self, entries: int, cells: int) -> None:
        self.entries, self.cells = entries, cells
        self._store: dict[tuple[Any, ...], Any] = {}

    def key(self, arrays: Sequence[NDArray[Any]], *rest: Hashable) -> tuple[Any, ...] | None:
        """The key of ``arrays`` and the other arguments ``rest``; None when the arrays are too large to keep."""
        if sum(a.size for a in arrays) > self.cells:
            return None
        return rest + tuple((a.shape, a.dtype.str, a.tobytes()) for a in arrays)

    def get(self, key: tuple[Any, ...]) -> Any:
        """The answer kept for ``key``, or None."""
        return self._store.get(key)

    def __len__(self) -> int:
        return len(self._store)

    def values(self) -> list[Any]:
        """The answers kept, oldest first."""
        return list(self._store.values())

    def clear(self) -> None:
        self._store.clear()

    def put(self, key: tuple[Any, ...], value: Any) -> Any:
        """Keep ``value`` for ``key`` (the oldest answer out when full); returns ``value``."""
        if len(self._store) >= self.entries:
            self._store.pop(next(iter(self._store)))
        self._store[key] = value
        return value


def unique_rows(a: NDArray[Any]) -> NDArray[Any]:
    """The distinct rows of a 2-D array, sorted lexicographically: ``np.unique(a, axis=0)`` without its import of
    ``numpy.ma`` (about 30 ms of start-up, numpy 2.x), by a stable sort on each column from the last to the first."""
    if len(a) == 0:
        return a
    order = np.lexsort(a.T[::-1])
    s = a[order]
    keep = np.ones(len(s), dtype=bool)
    keep[1:] = np.any(s[1:] != s[:-1], axis=1)
    return s[keep]
