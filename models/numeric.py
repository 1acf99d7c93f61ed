"""Type aliases of the model functions: a quantity is a float or a numpy array of floats.

Every relation in :mod:`tpopt.models` broadcasts over numpy arrays, so that the solver can tabulate
it over arrays of layout choices; called with plain numbers it returns a number.
"""

from __future__ import annotations

from typing import TypeAlias

import numpy as np
from numpy.typing import NDArray

FloatArray: TypeAlias = NDArray[np.float64]
"""An array of float64 values (a relation tabulated over its arguments)."""

Floats: TypeAlias = float | NDArray[np.float64]
"""A float, or an array of them where the arguments were arrays."""
