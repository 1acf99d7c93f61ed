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
    """Small arrays evaluate in Python floats while scipy.special is not loaded, large ones in numpy
    (:func:`C.vgammainc`): the same bits as SciPy, the input's shape kept."""
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


def _vec_mismatches(vf: Callable[..., np.ndarray], g: Callable[..., np.ndarray], *args: np.ndarray
                    ) -> list[tuple[float, ...]]:
    mine = vf(*(np.ascontiguousarray(a, dtype=float) for a in args))
    ref = np.asarray(g(*args), dtype=float)
    assert mine.shape == ref.shape
    same = (mine.view(np.int64) == ref.view(np.int64)) | (np.isnan(mine) & np.isnan(ref))
    return [tuple(float(a[i]) for a in args) for i in np.flatnonzero(~same)[:5]]


def test_vectorised_normal_functions_bit_identical() -> None:
    """ndtr, erf, erfc and ndtri over numpy arrays: SciPy's bits (both rational fits of erfc, the underflow, the
    three fits of ndtri, 0, 1, outside [0, 1], NaN)."""
    rng = np.random.default_rng(RNG_SEED + 20)
    x = np.concatenate([rng.normal(0.0, 3.0, 250_000), rng.uniform(-40.0, 40.0, 50_000), EDGES])
    assert _vec_mismatches(C.vndtr, special.ndtr, x) == []
    assert _vec_mismatches(C.verf, special.erf, x) == []
    assert _vec_mismatches(C.verfc, special.erfc, x) == []
    p = np.concatenate([rng.uniform(0.0, 1.0, 200_000), 10.0 ** rng.uniform(-320.0, 0.0, 50_000),
                        1.0 - 10.0 ** rng.uniform(-16.0, 0.0, 50_000),
                        [0.0, 1.0, 0.5, -1.0, 2.0, math.nan, 5e-324, 1.0 - 2.0**-53, 0.13533528323661269,
                         1.0 - 0.13533528323661269, 0.95, 0.05, -math.inf, math.inf]])
    assert _vec_mismatches(C.vndtri, special.ndtri, p) == []


def _gamma_inputs(region: str, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    if region == "asymptotic":  # a ~ x, a > 20: Temme's expansion (and a ~ x below 20: the Lanczos prefactor)
        a = 10.0 ** rng.uniform(0.5, 6.0, n)
        x = a * (1.0 + rng.normal(0.0, 0.1, n))
    elif region == "fraction":  # x > 1.1, x > a: igamc's continued fraction
        a = 10.0 ** rng.uniform(-4.0, 3.0, n)
        x = np.maximum(a, 1.1) * 10.0 ** rng.uniform(0.01, 2.0, n)
    elif region == "series":  # x < a or x <= 1: the power series (its log Gamma and Lanczos prefactors)
        a = 10.0 ** rng.uniform(-4.0, 4.0, n)
        x = a * 10.0 ** rng.uniform(-8.0, -0.05, n)
    elif region == "igamc_series":  # 1 < x <= 1.1 above a, and x <= 1.1 with a small: igamc's small-x series
        a = 10.0 ** rng.uniform(-6.0, 0.0, n)
        x = rng.uniform(0.0, 1.1, n)
    else:  # wide: every regime, the event cumulants' integer shapes among them
        a = np.where(rng.uniform(size=n) < 0.3, rng.integers(1, 6, n).astype(float), 10.0 ** rng.uniform(-4.0, 6.0, n))
        x = 10.0 ** rng.uniform(-12.0, 6.0, n)
    return a, x


GAMMA_EDGES = [(0.0, 0.0), (0.0, 1.0), (0.0, math.inf), (1.0, 0.0), (math.inf, 1.0), (math.inf, math.inf),
               (1.0, math.inf), (math.nan, 1.0), (1.0, math.nan), (math.nan, math.nan), (-1.0, 1.0), (1.0, -1.0),
               (20.0, 20.0), (200.0, 200.0), (2.0, 1.1), (2.0, 0.5), (0.3, 1.05), (1e-300, 1e-300),
               (1e300, 1e300), (5e-324, 1.0), (1.0, 5e-324), (13.0, 12.0), (1000.0, 1000.5), (1e8, 1e8 + 1.0),
               (0.5, 0.5), (1.0, 1.0), (1.0, 1.1), (1.05, 1.1), (30.0, 0.0), (2.0, 1e-300)]


@pytest.mark.parametrize("region", ["asymptotic", "fraction", "series", "igamc_series", "wide"])
def test_vectorised_gammainc_bit_identical(region: str) -> None:
    """:func:`C.vgammainc` (the numpy loops, each element stopping where the scalar loop does) gives SciPy's bits
    in every regime of Cephes igam, over a large array (each regime's loops in numpy, their last elements handed to
    Python floats) and over small slices (a regime with a few elements evaluated in Python floats), the settled
    cases (a = 0, x = 0, inf, NaN, negative) among them."""
    a, x = _gamma_inputs(region, 60_000, RNG_SEED + 30 + len(region))
    edges = np.array(GAMMA_EDGES)
    a, x = np.concatenate([a, edges[:, 0]]), np.concatenate([x, edges[:, 1]])
    assert _vec_mismatches(C.vgammainc, special.gammainc, a, x) == []
    rng = np.random.default_rng(RNG_SEED + 40)
    for size in (1, 3, 5, 17, 33, 70):
        i = rng.choice(a.size, size, replace=False)
        assert _vec_mismatches(C.vgammainc, special.gammainc, a[i], x[i]) == []


def test_vectorised_helpers_equal_the_scalar_ports() -> None:
    """log Gamma, log(1 + x) - x and the exp/log/pow calls per element: the scalar ports' bits (log Gamma at its
    poles and Stirling's three forms; log1pmx's series, its x = 0 and log1p beyond)."""
    rng = np.random.default_rng(RNG_SEED + 50)
    g = np.concatenate([np.abs(rng.normal(0.0, 30.0, 50_000)), 10.0 ** rng.uniform(-300.0, 306.0, 20_000),
                        [0.0, 1.0, 2.0, 3.0, 13.0, 1000.0, 1e8, 2e8, math.inf, math.nan, 2.556348e305, 3e305]])
    mine = C.vlgam(g)
    ref = np.array([C.lgam(v) for v in g.tolist()])
    assert np.array_equal(mine, ref, equal_nan=True)
    s = np.concatenate([rng.uniform(-0.99, 3.0, 50_000), [0.0, -0.0, 0.5, -0.5, 0.4999999999, -0.4999999999, 1e-300]])
    assert np.array_equal(C.vlog1pmx(s), np.array([C.log1pmx(v) for v in s.tolist()]))
    big = np.array([800.0, -800.0, 0.0, math.nan, 1.0])
    assert np.array_equal(C._vexp(big), np.array([C._exp(v) for v in big.tolist()]), equal_nan=True)
    assert np.array_equal(C._vlog(np.array([0.0, -1.0, 2.0])), np.array([-math.inf, math.nan, math.log(2.0)]),
                          equal_nan=True)


def test_no_scipy_for_a_confidence_array() -> None:
    """An array larger than :data:`C.PYTHON_LIMIT` evaluates without importing scipy.special (in a fresh
    interpreter: the import is what the confidence path no longer pays); one beyond :data:`C.SCIPY_LIMIT` loads
    SciPy's ufunc extension, and that alone: not the ``scipy.special`` package (:func:`C.scipy_ufuncs`)."""
    import subprocess

    code = ("import sys, numpy as np; from tpopt.models import cephes as C; "
            "a = np.linspace(0.5, 60.0, 4 * C.PYTHON_LIMIT); C.gammainc_array(a, a * 1.2); C.ndtr_array(a - 30); "
            "C.ndtri_array(a / 61); print('scipy.special' in sys.modules, 'scipy.special._ufuncs' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"
    big = code.replace("4 * C.PYTHON_LIMIT", "C.SCIPY_LIMIT + 1")  # a space's worth of values: SciPy's ufuncs
    out = subprocess.run([sys.executable, "-c", big], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False True"


def test_scipy_ufuncs_alone_are_scipy_special_s() -> None:
    """The ufuncs :func:`C.scipy_ufuncs` loads without the ``scipy.special`` package are the package's own objects
    (the same bits), and the package imports as usual afterwards (in a fresh interpreter: nothing loaded before)."""
    import subprocess

    code = ("import sys, numpy as np; from tpopt.models import cephes as C; u = C.scipy_ufuncs(); "
            "assert 'scipy.special' not in sys.modules, 'the package ran'; "
            "a = np.linspace(0.5, 60.0, 5000); g, n, q = u.gammainc(a, a * 1.2), u.ndtr(a - 30), u.ndtri(a / 61); "
            "import scipy.special as S; from scipy import stats; "
            "assert S.gammainc is u.gammainc and S.ndtr is u.ndtr and S.ndtri is u.ndtri; "
            "assert np.array_equal(S.gammainc(a, a * 1.2), g) and np.array_equal(S.ndtri(a / 61), q); "
            "assert C.scipy_ufuncs() is S; print(stats.norm.ppf(0.95) == C.ndtri(0.95))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_normal_quantile_is_scipy_norm_ppf() -> None:
    """finish.normal_quantile (the port's ndtri) gives scipy.stats.norm.ppf's bits, 0 and 1 included."""
    from scipy import stats

    from tpopt.models.finish import normal_quantile

    q = np.concatenate([np.random.default_rng(RNG_SEED + 60).uniform(0.0, 1.0, 2_000), [0.0, 1.0, 0.5, 0.95, 1e-300]])
    assert [normal_quantile(v) for v in q.tolist()] == [float(stats.norm.ppf(v)) for v in q.tolist()]
