"""models/cephes.py reproduces SciPy's ndtr, ndtri and gammainc to the last bit (the reports print the
probabilities they give in full): over more than a million random and edge inputs, compared bit for bit with
scipy.special (the reference: the same Cephes algorithms compiled in SciPy's xsf)."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable

import numpy as np
import pytest
from scipy import special

from tpopt.models import cephes as C

RNG_SEED = 20261206


def _mismatches(f: Callable[..., float], g: Callable[..., np.ndarray], *args: np.ndarray) -> list[tuple[float, ...]]:
    mine = np.array([f(*v) for v in zip(*(a.tolist() for a in args), strict=True)], dtype=float)
    ref = np.asarray(g(*args), dtype=float)
    same = (mine.view(np.int64) == ref.view(np.int64)) | (np.isnan(mine) & np.isnan(ref))
    return [tuple(float(a[i]) for a in args) for i in np.flatnonzero(~same)[:5]]


EDGES = [0.0, -0.0, 5e-324, -5e-324, 1e-300, -1e-300, math.inf, -math.inf, math.nan, 1.0, -1.0, 8.0, -8.0,
         math.sqrt(2.0), -math.sqrt(2.0), 37.5, -37.5, 38.6, -38.6, 1e10, -1e10]


def test_ndtr_bit_identical() -> None:
    rng = np.random.default_rng(RNG_SEED)
    x = np.concatenate([rng.normal(0.0, 3.0, 250_000), rng.uniform(-40.0, 40.0, 50_000), EDGES])
    assert _mismatches(C.ndtr, special.ndtr, x) == []


def test_ndtri_bit_identical() -> None:
    rng = np.random.default_rng(RNG_SEED + 1)
    p = np.concatenate([rng.uniform(0.0, 1.0, 200_000), 10.0 ** rng.uniform(-320.0, 0.0, 50_000),
                        1.0 - 10.0 ** rng.uniform(-16.0, 0.0, 50_000),
                        [0.0, 1.0, 0.5, -1.0, 2.0, math.nan, 5e-324, 1.0 - 2.0**-53, 0.13533528323661269,
                         1.0 - 0.13533528323661269, 1.2664165549e-14, 0.95, 0.05, 0.5 + 2.0**-53]])
    assert _mismatches(C.ndtri, special.ndtri, p) == []


@pytest.mark.parametrize("region", ["near", "wide", "integer", "small"])
def test_gammainc_bit_identical(region: str) -> None:
    """Every branch of Cephes igam: the asymptotic series (a > 20 near x), the power series, the continued
    fraction, the small-x series of igamc, the Lanczos and the log Gamma prefactors."""
    rng = np.random.default_rng(RNG_SEED + 2 + ["near", "wide", "integer", "small"].index(region))
    n = 120_000
    if region == "near":  # a ~ x: the asymptotic regime and the Lanczos prefactor
        a = 10.0 ** rng.uniform(-3.0, 5.0, n)
        x = a * np.exp(rng.normal(0.0, 0.4, n))
    elif region == "wide":
        a = 10.0 ** rng.uniform(-4.0, 6.0, n)
        x = 10.0 ** rng.uniform(-8.0, 6.0, n)
    elif region == "integer":  # the event cumulants' shapes 2, 3, 4
        a = rng.integers(1, 6, n).astype(float)
        x = 10.0 ** rng.uniform(-12.0, 3.0, n)
    else:  # x <= 1.1 with a small shape: igamc's series and lgam1p's Taylor series
        a = 10.0 ** rng.uniform(-6.0, 0.3, n)
        x = rng.uniform(0.0, 1.2, n)
    edges = np.array([(0.0, 0.0), (0.0, 1.0), (1.0, 0.0), (math.inf, 1.0), (math.inf, math.inf), (1.0, math.inf),
                      (math.nan, 1.0), (1.0, math.nan), (-1.0, 1.0), (1.0, -1.0), (20.0, 20.0), (200.0, 200.0),
                      (2.0, 1.1), (2.0, 0.5), (0.3, 1.05), (1e-300, 1e-300), (1e300, 1e300)])
    a, x = np.concatenate([a, edges[:, 0]]), np.concatenate([x, edges[:, 1]])
    assert _mismatches(C.gammainc, special.gammainc, a, x) == []


def test_zeta_table_is_scipys() -> None:
    """The Taylor coefficients of lgam1p are SciPy's zeta(n, 1), bit for bit."""
    assert [float(special.zeta(n, 1.0)) for n in range(2, 42)] == list(C._ZETA)


def test_array_functions_both_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """Small arrays evaluate in Python while scipy.special is not loaded, large ones in SciPy: the same bits,
    the input's shape kept."""
    calls: list[int] = []
    python_ndtr = C.ndtr
    monkeypatch.setattr(C, "ndtr", lambda v: calls.append(1) or python_ndtr(v))
    monkeypatch.delitem(sys.modules, "scipy.special")
    rng = np.random.default_rng(RNG_SEED + 9)
    a, x = 10.0 ** rng.uniform(-2, 3, (3, 7)), 10.0 ** rng.uniform(-2, 3, (3, 7))
    for small, ref in ((C.gammainc_array(a, x), special.gammainc(a, x)), (C.ndtr_array(x - 10), special.ndtr(x - 10)),
                       (C.ndtri_array(x / 1e3), special.ndtri(x / 1e3))):
        assert small.shape == ref.shape
        assert np.array_equal(small, ref, equal_nan=True)
    assert len(calls) == 21  # the ndtr array went through Python
    big = 10.0 ** rng.uniform(-2, 3, C.PYTHON_LIMIT + 1)
    assert np.array_equal(C.gammainc_array(big, big * 1.1), special.gammainc(big, big * 1.1))
