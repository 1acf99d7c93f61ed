"""What the CP-SAT and HiGHS encodings share and no solver library: table values clamped where the deadline alone
decides, so that the encodings stay relaxations while the outliers no longer set their ranges.

- :func:`lower`: a table's values for a "<=" side or the objective, clamped to a cap (never above the true value);
- :func:`caps`: the caps (step term, (1 + L), memory term) and the least step, from the space's tables;
- :func:`all_late`: every plan misses the deadline (decided exactly in floating point);
- :func:`finite`, :func:`max_finite`: non-finite table entries (plans a structural family excludes) set aside.

Imports numpy and the models only: loading the HiGHS backend (:mod:`tpopt.optimizer.backends.highs_model`) loads no
OR-Tools.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from tpopt.models import families as F
from tpopt.models import terms as T
from tpopt.optimizer.space import BUSY_TERMS, CHANCE_TABLE, Space, chance_on

__all__ = ["finite", "lower", "max_finite", "all_late", "caps"]


def finite(x: ArrayLike) -> NDArray[np.float64]:
    """Table values with non-finite entries (plans a structural family excludes) set to 0."""
    x = np.asarray(x, dtype=float)
    kept: NDArray[np.float64] = np.where(np.isfinite(x), x, 0.0)
    return kept


def lower(x: ArrayLike, cap: float) -> NDArray[np.float64]:
    """Values for a "<=" side or the objective, clamped to ``cap``: NaN -> 0, above cap (+inf
    included) -> cap. Never above the true value, so the encoding stays a relaxation; a plan whose
    value was clamped is excluded by the cap's own constraint or by the exact verification."""
    x = np.asarray(x, dtype=float)
    return np.minimum(np.where(np.isnan(x) | (x == -np.inf), 0.0, x), cap)


def max_finite(x: ArrayLike, default: float = 0.0) -> float:
    """The largest finite value of ``x`` (``default`` when none is finite)."""
    x = np.asarray(x, dtype=float)
    f = x[np.isfinite(x)]
    return float(f.max()) if f.size else default


def all_late(space: Space) -> bool:
    """Every plan misses the deadline: reserved + iterations x (least step) x (least 1 + L) > deadline,
    with each least value a minimum over its whole table (a valid lower bound for every plan)."""
    sc = space.sc
    tabs = space.tables
    step_min = sum(float(np.min(lower(tabs[n].values, np.inf))) for n in BUSY_TERMS) + float(sc.input.wait_s)
    ov = np.asarray(tabs["overhead"].values, dtype=float) + 1.0
    ov_min = max(float(np.min(np.where(np.isnan(ov), 1.0, ov))), 1.0)
    if chance_on(sc):  # the chance form: even the least step exceeds every step the confidence allows
        return step_min > float(np.max(tabs[CHANCE_TABLE].values)) * (1 + 1e-9)
    least = sc.task.reserved_s + float(T.iteration_count(sc)) * step_min * ov_min
    return least > F.limit(F.DEADLINE, sc) * (1 + 1e-9)


def caps(space: Space, deadline_enforced: bool) -> tuple[float, float, float, float]:
    """(step term cap s, (1 + L) cap, memory term cap bytes, least step s) for :func:`lower`.

    Without the deadline the caps are the largest finite table values (an infinite entry is
    clamped to them). With it, a plan whose step or (1 + L) alone overshoots the deadline is
    infeasible, so both are clamped 1 % beyond that point: such plans stay excluded while the
    outliers no longer set the integer ranges."""
    sc = space.sc
    tabs = space.tables
    iters = float(T.iteration_count(sc))
    wait = float(sc.input.wait_s)
    mem_cap = max_finite(space.usable(), 1.0) * 1.01 + 1.0
    ov = np.asarray(tabs["overhead"].values, dtype=float) + 1.0
    ov_min = max(float(np.min(np.where(np.isfinite(ov), ov, np.inf))) if np.isfinite(ov).any() else 1.0, 1.0)
    busy_min = sum(float(np.min(lower(tabs[n].values, np.inf))) for n in BUSY_TERMS)
    step_min = max(busy_min + wait, 0.0)
    step_cap = sum(max_finite(tabs[n].values) for n in BUSY_TERMS) + 1e-6
    ov_cap = max(max_finite(ov, 1.0), 1.0)
    if deadline_enforced and chance_on(sc):  # chance form: a step beyond every allowed step is infeasible
        step_cap = min(step_cap, 1.01 * float(np.max(tabs[CHANCE_TABLE].values)) + 1e-6)
    elif deadline_enforced:
        room = max(F.limit(F.DEADLINE, sc) - sc.task.reserved_s, 0.0)
        step_cap = min(step_cap, 1.01 * room / (iters * ov_min) + 1e-6)
        if step_min > 0:
            ov_cap = max(ov_min, min(ov_cap, 1.01 * room / (iters * step_min) + 1e-9))
    return step_cap, ov_cap, mem_cap, step_min
