"""The normal CDF, its inverse and the regularized lower incomplete gamma function, in plain Python floats,
equal to the last bit to SciPy's ``scipy.special.ndtr``, ``ndtri`` and ``gammainc`` (SciPy 1.17).

Why: a report's P(on time) and quantiles need these three functions for one plan (a few hundred values);
importing ``scipy.special`` for them costs about 0.15-0.2 CPU s of every short command's start-up, more than the
headline's whole solve. The JSON reports print these probabilities in full, so an approximation of our own would
change answers: these are the algorithms SciPy runs, step for step, with the same coefficients and the same
order of floating-point operations (the Cephes Math Library, S. L. Moshier, 1984-2000, as translated into C++ by
the SciPy developers in ``scipy/xsf``: ``include/xsf/cephes/ndtr.h``, ``ndtri.h``, ``igam.h``, ``gamma.h``,
``lanczos.h``, ``unity.h``, ``polevl.h``, ``igam_asymp_coeff.h``). ``exp``, ``log``, ``sqrt`` and ``pow`` are the C
library's in both (Python's ``math`` calls them). ``tests/test_cephes.py`` checks bit-identity against SciPy over
more than a million random and edge inputs.

Element-wise Python costs about 5 us a value: the array functions evaluate a small array in Python floats and a
larger one (:data:`PYTHON_LIMIT`) in numpy (:func:`vgammainc`, :func:`vndtr`, :func:`vndtri`: the same algorithms,
each element's operations in the same order, its loops stopping where the scalar ones do; exp, log and pow still
the C library's, per element), and every array past a budget (:data:`SCIPY_LIMIT`), or once ``scipy.special`` is
imported anyway, in SciPy: the same bits on every path, and a confidence report over a few plans no longer imports
SciPy (about 0.15 CPU s). Past the budget only SciPy's ufunc extension is loaded, not the ``scipy.special``
package (:func:`scipy_ufuncs`: about 0.015 instead of 0.15-0.3 CPU s, the same function objects).
"""

from __future__ import annotations

import importlib.util
import math
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]

PYTHON_LIMIT = 256
"""Elements up to which an array function evaluates in Python floats (about 1-5 us an element, no numpy call
overhead) while SciPy is not yet imported; beyond, the numpy versions below (about 1 ms a call plus 1 us an
element); once ``scipy.special`` is loaded anyway, SciPy's ufuncs (the same bits)."""

SCIPY_LIMIT = 32768
"""Values the numpy versions evaluate in one process before an array function loads SciPy's ufuncs
(:func:`scipy_ufuncs`: about 0.015 CPU s once, what 15,000-30,000 values cost in numpy at 0.5-1 us each; the
``scipy.special`` package's import would be 0.15 s), then about 0.05-0.2 us a value: a confidence report over a
few plans (the design case: about 9,000; the Llama-3-8B example: 17,000) stays below, a space's chance roots go
over (Qwen3-30B-A3B: 91,000 in calls of 10,752; the widest GPT-3: calls of 46,080, the first one over)."""
_NUMPY_SPENT = [0]
"""Values evaluated by the numpy versions so far (:data:`SCIPY_LIMIT`)."""

MACHEP = 1.1102230246251565404236316680908203125e-16  # 2**-53
MAXLOG = 7.097827128933839730962063185871e2  # log(DBL_MAX)
SQRT2PI = 2.506628274631000502415765284811045253007
SQRT1_2 = 0.70710678118654752440
_INF, _NAN = math.inf, math.nan


def polevl(x: float, coef: Sequence[float]) -> float:
    """Cephes ``polevl``: coef[0] x^N + ... + coef[N] by Horner's rule."""
    ans = coef[0]
    for c in coef[1:]:
        ans = ans * x + c
    return ans


def p1evl(x: float, coef: Sequence[float]) -> float:
    """Cephes ``p1evl``: x^N + coef[0] x^(N-1) + ... + coef[N-1] (leading coefficient 1, not stored)."""
    ans = x + coef[0]
    for c in coef[1:]:
        ans = ans * x + c
    return ans


def ratevl(x: float, num: Sequence[float], denom: Sequence[float]) -> float:
    """Cephes ``ratevl``: num(x) / denom(x), in 1/x with the coefficients reversed when |x| > 1."""
    big = abs(x) > 1
    y = 1 / x if big else x
    n_seq, d_seq = (num[::-1], denom[::-1]) if big else (num, denom)
    n_ans = n_seq[0]
    for c in n_seq[1:]:
        n_ans = n_ans * y + c
    d_ans = d_seq[0]
    for c in d_seq[1:]:
        d_ans = d_ans * y + c
    if big:
        return math.pow(x, len(num) - len(denom)) * n_ans / d_ans
    return n_ans / d_ans


# ---------------------------------------------------------------------------------------------
# the normal CDF (ndtr.h)

_ERFC_P = (2.46196981473530512524E-10, 5.64189564831068821977E-1, 7.46321056442269912687E0,
           4.86371970985681366614E1, 1.96520832956077098242E2, 5.26445194995477358631E2,
           9.34528527171957607540E2, 1.02755188689515710272E3, 5.57535335369399327526E2)
_ERFC_Q = (1.32281951154744992508E1, 8.67072140885989742329E1, 3.54937778887819891062E2, 9.75708501743205489753E2,
           1.82390916687909736289E3, 2.24633760818710981792E3, 1.65666309194161350182E3, 5.57535340817727675546E2)
_ERFC_R = (5.64189583547755073984E-1, 1.27536670759978104416E0, 5.01905042251180477414E0,
           6.16021097993053585195E0, 7.40974269950448939160E0, 2.97886665372100240670E0)
_ERFC_S = (2.26052863220117276590E0, 9.39603524938001434673E0, 1.20489539808096656605E1,
           1.70814450747565897222E1, 9.60896809063285878198E0, 3.36907645100081516050E0)
_ERF_T = (9.60497373987051638749E0, 9.00260197203842689217E1, 2.23200534594684319226E3, 7.00332514112805075473E3,
          5.55923013010394962768E4)
_ERF_U = (3.35617141647503099647E1, 5.21357949780152679795E2, 4.59432382970980127987E3, 2.26290000613890934246E4,
          4.92673942608635921086E4)


def erfc(a: float) -> float:
    """1 - erf(a): 1 - erf below |a| 1, else exp(-a^2) P(|a|)/Q(|a|) (two rational fits, |a| < 8 and beyond)."""
    if math.isnan(a):
        return _NAN
    x = -a if a < 0.0 else a
    if x < 1.0:
        return 1.0 - erf(a)
    z = -a * a
    if z >= -MAXLOG:
        z = math.exp(z)
        if x < 8.0:
            p, q = polevl(x, _ERFC_P), p1evl(x, _ERFC_Q)
        else:
            p, q = polevl(x, _ERFC_R), p1evl(x, _ERFC_S)
        y = (z * p) / q
        if a < 0:
            y = 2.0 - y
        if y != 0.0:
            return y
    return 2.0 if a < 0 else 0.0  # underflow


def erf(x: float) -> float:
    """erf(x) = 2/sqrt(pi) int_0^x exp(-t^2) dt: x T(x^2)/U(x^2) for |x| <= 1, else 1 - erfc(x)."""
    if math.isnan(x):
        return _NAN
    if x < 0.0:
        return -erf(-x)
    if abs(x) > 1.0:
        return 1.0 - erfc(x)
    z = x * x
    return x * polevl(z, _ERF_T) / p1evl(z, _ERF_U)


def ndtr(a: float) -> float:
    """Phi(a) = (1 + erf(a / sqrt 2)) / 2 near 0, erfc(|a| / sqrt 2) / 2 (or 1 minus it) beyond."""
    if math.isnan(a):
        return _NAN
    x = a * SQRT1_2
    z = abs(x)
    if z < 1.0:
        return 0.5 + 0.5 * erf(x)
    y = 0.5 * erfc(z)
    return 1.0 - y if x > 0 else y


# ---------------------------------------------------------------------------------------------
# its inverse (ndtri.h)

_NDTRI_P0 = (-5.99633501014107895267E1, 9.80010754185999661536E1, -5.66762857469070293439E1,
             1.39312609387279679503E1, -1.23916583867381258016E0)
_NDTRI_Q0 = (1.95448858338141759834E0, 4.67627912898881538453E0, 8.63602421390890590575E1, -2.25462687854119370527E2,
             2.00260212380060660359E2, -8.20372256168333339912E1, 1.59056225126211695515E1, -1.18331621121330003142E0)
_NDTRI_P1 = (4.05544892305962419923E0, 3.15251094599893866154E1, 5.71628192246421288162E1,
             4.40805073893200834700E1, 1.46849561928858024014E1, 2.18663306850790267539E0,
             -1.40256079171354495875E-1, -3.50424626827848203418E-2, -8.57456785154685413611E-4)
_NDTRI_Q1 = (1.57799883256466749731E1, 4.53907635128879210584E1, 4.13172038254672030440E1,
             1.50425385692907503408E1, 2.50464946208309415979E0, -1.42182922854787788574E-1,
             -3.80806407691578277194E-2, -9.33259480895457427372E-4)
_NDTRI_P2 = (3.23774891776946035970E0, 6.91522889068984211695E0, 3.93881025292474443415E0,
             1.33303460815807542389E0, 2.01485389549179081538E-1, 1.23716634817820021358E-2,
             3.01581553508235416007E-4, 2.65806974686737550832E-6, 6.23974539184983293730E-9)
_NDTRI_Q2 = (6.02427039364742014255E0, 3.67983563856160859403E0, 1.37702099489081330271E0, 2.16236993594496635890E-1,
             1.34204006088543189037E-2, 3.28014464682127739104E-4, 2.89247864745380683936E-6, 6.79019408009981274425E-9)
_EXP_M2 = 0.13533528323661269189  # exp(-2)


def ndtri(y0: float) -> float:
    """Phi^-1(y0): a rational fit in y - 1/2 for |y - 1/2| <= 3/8, else x0 - x1 in z = sqrt(-2 log y) (two fits,
    z below 8 and from 8 to 64), the sign restored."""
    if y0 == 0.0:
        return -_INF
    if y0 == 1.0:
        return _INF
    if not (0.0 <= y0 <= 1.0):  # outside [0, 1], or NaN
        return _NAN
    negate = True
    y = y0
    if y > (1.0 - _EXP_M2):
        y = 1.0 - y
        negate = False
    if y > _EXP_M2:
        y = y - 0.5
        y2 = y * y
        x = y + y * (y2 * polevl(y2, _NDTRI_P0) / p1evl(y2, _NDTRI_Q0))
        return x * SQRT2PI
    x = math.sqrt(-2.0 * math.log(y))
    x0 = x - math.log(x) / x
    z = 1.0 / x
    if x < 8.0:
        x1 = z * polevl(z, _NDTRI_P1) / p1evl(z, _NDTRI_Q1)
    else:
        x1 = z * polevl(z, _NDTRI_P2) / p1evl(z, _NDTRI_Q2)
    x = x0 - x1
    return -x if negate else x


# ---------------------------------------------------------------------------------------------
# log Gamma and its helpers (gamma.h, lanczos.h, unity.h)

_GAMMA_A = (8.11614167470508450300E-4, -5.95061904284301438324E-4, 7.93650340457716943945E-4,
            -2.77777777730099687205E-3, 8.33333333333331927722E-2)
_GAMMA_B = (-1.37825152569120859100E3, -3.88016315134637840924E4, -3.31612992738871184744E5,
            -1.16237097492762307383E6, -1.72173700820839662146E6, -8.53555664245765465627E5)
_GAMMA_C = (-3.51815701436523470549E2, -1.70642106651881159223E4, -2.20528590553854454839E5,
            -1.13933444367982507207E6, -2.53252307177582951285E6, -2.01889141433532773231E6)
LS2PI = 0.91893853320467274178  # log(sqrt(2 pi))
LOGPI = 1.144729885849400174143427351353058711647
MAXLGM = 2.556348e305


def lgam(x: float) -> float:
    """log|Gamma(x)| for x >= 0 (the gamma shapes here; a negative x is refused): a product down to (2, 3) and a
    rational fit there below 13, Stirling's series above (its short form from 1000)."""
    if not math.isfinite(x):
        return x
    if x < 0.0:
        raise ValueError("lgam: x >= 0 only")
    if x < 13.0:
        z, p, u = 1.0, 0.0, x
        while u >= 3.0:
            p -= 1.0
            u = x + p
            z *= u
        while u < 2.0:
            if u == 0.0:
                return _INF
            z /= u
            p += 1.0
            u = x + p
        if u == 2.0:
            return math.log(z)
        p -= 2.0
        x = x + p
        p = x * polevl(x, _GAMMA_B) / p1evl(x, _GAMMA_C)
        return math.log(z) + p
    if x > MAXLGM:
        return _INF
    if x >= 1000.0:
        q = (x - 0.5) * math.log(x) - x + LS2PI
        if x > 1.0e8:
            return q
        p = 1.0 / (x * x)
        p = ((7.9365079365079365079365e-4 * p - 2.7777777777777777777778e-3) * p + 0.0833333333333333333333) / x
        return q + p
    q = (x - 0.5) * math.log(x) - x + LS2PI
    p = 1.0 / (x * x)
    return q + polevl(p, _GAMMA_A) / x


LANCZOS_G = 6.024680040776729583740234375
_LANCZOS_EXPG_NUM = (
    0.006061842346248906525783753964555936883222, 0.5098416655656676188125178644804694509993,
    19.51992788247617482847860966235652136208, 449.9445569063168119446858607650988409623,
    6955.999602515376140356310115515198987526, 75999.29304014542649875303443598909137092,
    601859.6171681098786670226533699352302507, 3481712.15498064590882071018964774556468,
    14605578.08768506808414169982791359218571, 43338889.32467613834773723740590533316085,
    86363131.28813859145546927288977868422342, 103794043.1163445451906271053616070238554,
    56906521.91347156388090791033559122686859)
_LANCZOS_EXPG_DENOM = (1.0, 66.0, 1925.0, 32670.0, 357423.0, 2637558.0, 13339535.0, 45995730.0, 105258076.0,
                       150917976.0, 120543840.0, 39916800.0, 0.0)


def lanczos_sum_expg_scaled(x: float) -> float:
    """The Lanczos sum (g = 6.0247) scaled by exp(g), as a ratio of two degree-12 polynomials."""
    return ratevl(x, _LANCZOS_EXPG_NUM, _LANCZOS_EXPG_DENOM)


_LOG1P_P = (4.5270000862445199635215E-5, 4.9854102823193375972212E-1, 6.5787325942061044846969E0,
            2.9911919328553073277375E1, 6.0949667980987787057556E1, 5.7112963590585538103336E1,
            2.0039553499201281259648E1)
_LOG1P_Q = (1.5062909083469192043167E1, 8.3047565967967209469434E1, 2.2176239823732856465394E2,
            3.0909872225312059774938E2, 2.1642788614495947685003E2, 6.0118660497603843919306E1)
_SQRT2 = 1.41421356237309504880


def log1p(x: float) -> float:
    """log(1 + x): a rational fit for 1 + x in [1/sqrt 2, sqrt 2], log(1 + x) outside."""
    z = 1.0 + x
    if z < SQRT1_2 or z > _SQRT2:
        return math.log(z) if z > 0 else (-_INF if z == 0 else _NAN)
    z = x * x
    z = -0.5 * z + x * (z * polevl(x, _LOG1P_P) / p1evl(x, _LOG1P_Q))
    return x + z


def log1pmx(x: float) -> float:
    """log(1 + x) - x: its Taylor series for |x| < 1/2, else :func:`log1p` minus x."""
    if abs(x) < 0.5:
        xfac, res = x, 0.0
        for n in range(2, 500):
            xfac *= -x
            term = xfac / n
            res += term
            if abs(term) < MACHEP * abs(res):
                break
        return res
    return log1p(x) - x


_EXPM1_P = (1.2617719307481059087798E-4, 3.0299440770744196129956E-2, 9.9999999999999999991025E-1)
_EXPM1_Q = (3.0019850513866445504159E-6, 2.5244834034968410419224E-3, 2.2726554820815502876593E-1,
            2.0000000000000000000897E0)


def expm1(x: float) -> float:
    """exp(x) - 1: a rational fit for |x| <= 1/2, exp(x) - 1 beyond."""
    if not math.isfinite(x):
        return x if (math.isnan(x) or x > 0) else -1.0
    if x < -0.5 or x > 0.5:
        return _exp(x) - 1.0
    xx = x * x
    r = x * polevl(xx, _EXPM1_P)
    r = r / (polevl(xx, _EXPM1_Q) - r)
    return r + r


EULER = 0.577215664901532860606512090082402431
_ZETA = (
    1.6449340668482266, 1.202056903159594, 1.0823232337111381, 1.0369277551433704, 1.0173430619844488,
    1.008349277381923, 1.0040773561979446, 1.0020083928260826, 1.0009945751278182, 1.0004941886041194,
    1.0002460865533078, 1.0001227133475785, 1.0000612481350586, 1.0000305882363072, 1.0000152822594084,
    1.0000076371976376, 1.000003817293265, 1.0000019082127163, 1.0000009539620338, 1.0000004769329867,
    1.0000002384505027, 1.000000119219926, 1.000000059608189, 1.0000000298035034, 1.0000000149015549,
    1.0000000074507118, 1.000000003725334, 1.0000000018626598, 1.0000000009313275, 1.0000000004656628,
    1.000000000232831, 1.0000000001164155, 1.0000000000582077, 1.0000000000291038, 1.000000000014552,
    1.000000000007276, 1.000000000003638, 1.000000000001819, 1.0000000000009095, 1.0000000000004547)
"""Hurwitz zeta(n, 1) = zeta(n) for n = 2..41, the values ``scipy.special.zeta(n, 1)`` gives (Cephes ``zeta``),
the coefficients of the Taylor series of log Gamma(1 + x); ``tests/test_cephes.py`` checks them against SciPy."""


def _lgam1p_taylor(x: float) -> float:
    if x == 0:
        return 0.0
    res = -EULER * x
    xfac = -x
    for n in range(2, 42):
        xfac *= -x
        coeff = _ZETA[n - 2] * xfac / n
        res += coeff
        if abs(coeff) < MACHEP * abs(res):
            break
    return res


def lgam1p(x: float) -> float:
    """log Gamma(1 + x), accurate near x = 0 and x = 1 (Taylor series in zeta values), else :func:`lgam`."""
    if abs(x) <= 0.5:
        return _lgam1p_taylor(x)
    if abs(x - 1) < 0.5:
        return math.log(x) + _lgam1p_taylor(x - 1)
    return lgam(x + 1)


def _exp(x: float) -> float:
    """The C library's exp with C's overflow (inf) instead of Python's OverflowError."""
    try:
        return math.exp(x)
    except OverflowError:
        return _INF


def _pow(x: float, y: float) -> float:
    try:
        return math.pow(x, y)
    except OverflowError:
        return _INF
    except ValueError:
        return _NAN


# ---------------------------------------------------------------------------------------------
# the regularized incomplete gamma function (igam.h)

_IGAM_MAXITER = 2000
_SMALL, _LARGE, _SMALLRATIO, _LARGERATIO = 20.0, 200.0, 0.3, 4.5
_BIG, _BIGINV = 4.503599627370496e15, 2.22044604925031308085e-16
_ASYMP_D = (
    (-3.3333333333333333e-1, 8.3333333333333333e-2, -1.4814814814814815e-2, 1.1574074074074074e-3,
     3.527336860670194e-4, -1.7875514403292181e-4, 3.9192631785224378e-5, -2.1854485106799922e-6,
     -1.85406221071516e-6, 8.296711340953086e-7, -1.7665952736826079e-7, 6.7078535434014986e-9,
     1.0261809784240308e-8, -4.3820360184533532e-9, 9.1476995822367902e-10, -2.551419399494625e-11,
     -5.8307721325504251e-11, 2.4361948020667416e-11, -5.0276692801141756e-12, 1.1004392031956135e-13,
     3.3717632624009854e-13, -1.3923887224181621e-13, 2.8534893807047443e-14, -5.1391118342425726e-16,
     -1.9752288294349443e-15),
    (-1.8518518518518519e-3, -3.4722222222222222e-3, 2.6455026455026455e-3, -9.9022633744855967e-4,
     2.0576131687242798e-4, -4.0187757201646091e-7, -1.8098550334489978e-5, 7.6491609160811101e-6,
     -1.6120900894563446e-6, 4.6471278028074343e-9, 1.378633446915721e-7, -5.752545603517705e-8,
     1.1951628599778147e-8, -1.7543241719747648e-11, -1.0091543710600413e-9, 4.1627929918425826e-10,
     -8.5639070264929806e-11, 6.0672151016047586e-14, 7.1624989648114854e-12, -2.9331866437714371e-12,
     5.9966963656836887e-13, -2.1671786527323314e-16, -4.9783399723692616e-14, 2.0291628823713425e-14,
     -4.13125571381061e-15),
    (4.1335978835978836e-3, -2.6813271604938272e-3, 7.7160493827160494e-4, 2.0093878600823045e-6,
     -1.0736653226365161e-4, 5.2923448829120125e-5, -1.2760635188618728e-5, 3.4235787340961381e-8,
     1.3721957309062933e-6, -6.298992138380055e-7, 1.4280614206064242e-7, -2.0477098421990866e-10,
     -1.4092529910867521e-8, 6.228974084922022e-9, -1.3670488396617113e-9, 9.4283561590146782e-13,
     1.2872252400089318e-10, -5.5645956134363321e-11, 1.1975935546366981e-11, -4.1689782251838635e-15,
     -1.0940640427884594e-12, 4.6622399463901357e-13, -9.905105763906906e-14, 1.8931876768373515e-17,
     8.8592218725911273e-15),
    (6.4943415637860082e-4, 2.2947209362139918e-4, -4.6918949439525571e-4, 2.6772063206283885e-4,
     -7.5618016718839764e-5, -2.3965051138672967e-7, 1.1082654115347302e-5, -5.6749528269915966e-6,
     1.4230900732435884e-6, -2.7861080291528142e-11, -1.6958404091930277e-7, 8.0994649053880824e-8,
     -1.9111168485973654e-8, 2.3928620439808118e-12, 2.0620131815488798e-9, -9.4604966618551322e-10,
     2.1541049775774908e-10, -1.388823336813903e-14, -2.1894761681963939e-11, 9.7909989511716851e-12,
     -2.1782191880180962e-12, 6.2088195734079014e-17, 2.126978363279737e-13, -9.3446887915174333e-14,
     2.0453671226782849e-14),
    (-8.618882909167117e-4, 7.8403922172006663e-4, -2.9907248030319018e-4, -1.4638452578843418e-6,
     6.6414982154651222e-5, -3.9683650471794347e-5, 1.1375726970678419e-5, 2.5074972262375328e-10,
     -1.6954149536558306e-6, 8.9075075322053097e-7, -2.2929348340008049e-7, 2.956794137544049e-11,
     2.8865829742708784e-8, -1.4189739437803219e-8, 3.4463580499464897e-9, -2.3024517174528067e-13,
     -3.9409233028046405e-10, 1.8602338968504502e-10, -4.356323005056618e-11, 1.2786001016296231e-15,
     4.6792750266579195e-12, -2.1492464706134829e-12, 4.9088156148096522e-13, -6.3385914848915603e-18,
     -5.0453320690800944e-14),
    (-3.3679855336635815e-4, -6.9728137583658578e-5, 2.7727532449593921e-4, -1.9932570516188848e-4,
     6.7977804779372078e-5, 1.419062920643967e-7, -1.3594048189768693e-5, 8.0184702563342015e-6,
     -2.2914811765080952e-6, -3.252473551298454e-10, 3.4652846491085265e-7, -1.8447187191171343e-7,
     4.8240967037894181e-8, -1.7989466721743515e-14, -6.3061945000135234e-9, 3.1624176287745679e-9,
     -7.8409242536974293e-10, 5.1926791652540407e-15, 9.3589442423067836e-11, -4.5134262161632782e-11,
     1.0799129993116827e-11, -3.661886712685252e-17, -1.210902069055155e-12, 5.6807435849905643e-13,
     -1.3249659916340829e-13),
    (5.3130793646399222e-4, -5.9216643735369388e-4, 2.7087820967180448e-4, 7.9023532326603279e-7,
     -8.1539693675619688e-5, 5.6116827531062497e-5, -1.8329116582843376e-5, -3.0796134506033048e-9,
     3.4651553688036091e-6, -2.0291327396058604e-6, 5.7887928631490037e-7, 2.338630673826657e-13,
     -8.8286007463304835e-8, 4.7435958880408128e-8, -1.2545415020710382e-8, 8.6496488580102925e-14,
     1.6846058979264063e-9, -8.5754928235775947e-10, 2.1598224929232125e-10, -7.6132305204761539e-16,
     -2.6639822008536144e-11, 1.3065700536611057e-11, -3.1799163902367977e-12, 4.7109761213674315e-18,
     3.6902800842763467e-13),
    (3.4436760689237767e-4, 5.1717909082605922e-5, -3.3493161081142236e-4, 2.812695154763237e-4,
     -1.0976582244684731e-4, -1.2741009095484485e-7, 2.7744451511563644e-5, -1.8263488805711333e-5,
     5.7876949497350524e-6, 4.9387589339362704e-10, -1.0595367014026043e-6, 6.1667143761104075e-7,
     -1.7562973359060462e-7, -1.2974473287015439e-12, 2.695423606288966e-8, -1.4578352908731271e-8,
     3.887645959386175e-9, -3.8810022510194121e-17, -5.3279941738772867e-10, 2.7437977643314845e-10,
     -6.9957960920705679e-11, 2.5899863874868481e-17, 8.8566890996696381e-12, -4.403168815871311e-12,
     1.0865561947091654e-12),
    (-6.5262391859530942e-4, 8.3949872067208728e-4, -4.3829709854172101e-4, -6.969091458420552e-7,
     1.6644846642067548e-4, -1.2783517679769219e-4, 4.6299532636913043e-5, 4.5579098679227077e-9,
     -1.0595271125805195e-5, 6.7833429048651666e-6, -2.1075476666258804e-6, -1.7213731432817145e-11,
     3.7735877416110979e-7, -2.1867506700122867e-7, 6.2202288040189269e-8, 6.5977038267330006e-16,
     -9.5903864974256858e-9, 5.2132144922808078e-9, -1.3991589583935709e-9, 5.382058999060575e-16,
     1.9484714275467745e-10, -1.0127287556389682e-10, 2.6077347197254926e-11, -5.0904186999932993e-18,
     -3.3721464474854592e-12),
    (-5.9676129019274625e-4, -7.2048954160200106e-5, 6.7823088376673284e-4, -6.4014752602627585e-4,
     2.7750107634328704e-4, 1.8197008380465151e-7, -8.4795071170685032e-5, 6.105192082501531e-5,
     -2.1073920183404862e-5, -8.8585890141255994e-10, 4.5284535953805377e-6, -2.8427815022504408e-6,
     8.7082341778646412e-7, 3.6886101871706965e-12, -1.5344695190702061e-7, 8.862466778790695e-8,
     -2.5184812301826817e-8, -1.0225912098215092e-14, 3.8969470758154777e-9, -2.1267304792235635e-9,
     5.7370135528051385e-10, -1.887749850169741e-19, -8.0931538694657866e-11, 4.2382723283449199e-11,
     -1.1002224534207726e-11),
    (1.3324454494800656e-3, -1.9144384985654775e-3, 1.1089369134596637e-3, 9.932404122642299e-7,
     -5.0874501293093199e-4, 4.2735056665392884e-4, -1.6858853767910799e-4, -8.1301893922784998e-9,
     4.5284402370562147e-5, -3.127053674781734e-5, 1.044986828530338e-5, 4.8435226265680926e-11,
     -2.1482565873456258e-6, 1.329369701097492e-6, -4.0295693092101029e-7, -1.7567877666323291e-13,
     7.0145043163668257e-8, -4.040787734999483e-8, 1.1474026743371963e-8, 3.9642746853563325e-18,
     -1.7804938269892714e-9, 9.7480262548731646e-10, -2.6405338676507616e-10, 5.794875163403742e-18,
     3.7647749553543836e-11),
    (1.579727660730835e-3, 1.6251626278391582e-4, -2.0633421035543276e-3, 2.1389686185689098e-3,
     -1.0108559391263003e-3, -3.9912705529919201e-7, 3.6235025084764691e-4, -2.8143901463712154e-4,
     1.0449513336495887e-4, 2.1211418491830297e-9, -2.5779417251947842e-5, 1.7281818956040463e-5,
     -5.6413773872904282e-6, -1.1024320105776174e-11, 1.1223224418895175e-6, -6.8693396379526735e-7,
     2.0653236975414887e-7, 4.6714772409838506e-14, -3.5609886164949055e-8, 2.0470855345905963e-8,
     -5.8091738633283358e-9, -1.332821287582869e-16, 9.0354604391335133e-10, -4.9598782517330834e-10,
     1.3481607129399749e-10),
    (-4.0725121195140166e-3, 6.4033628338080698e-3, -4.0410161081676618e-3, -2.183732802866233e-6,
     2.1740441801254639e-3, -1.9700440518418892e-3, 8.3595469747962458e-4, 1.9445447567109655e-8,
     -2.5779387120421696e-4, 1.9009987368139304e-4, -6.7696499937438965e-5, -1.4440629666426572e-10,
     1.5712512518742269e-5, -1.0304008744776893e-5, 3.304517767401387e-6, 7.9829760242325709e-13,
     -6.4097794149313004e-7, 3.8894624761300056e-7, -1.1618347644948869e-7, -2.816808630596451e-15,
     1.9878012911297093e-8, -1.1407719956357511e-8, 3.2355857064185555e-9, 4.1759468293455945e-20,
     -5.0423112718105824e-10),
    (-5.9475779383993003e-3, -5.4016476789260452e-4, 8.7910413550767898e-3, -9.8576315587856125e-3,
     5.0134695031021538e-3, 1.2807521786221875e-6, -2.0626019342754683e-3, 1.7109128573523058e-3,
     -6.7695312714133799e-4, -6.9011545676562133e-9, 1.8855128143995902e-4, -1.3395215663491969e-4,
     4.6263183033528039e-5, 4.0034230613321351e-11, -1.0255652921494033e-5, 6.612086372797651e-6,
     -2.0913022027253008e-6, -2.0951775649603837e-13, 3.9756029041993247e-7, -2.3956211978815887e-7,
     7.1182883382145864e-8, 8.925574873053455e-16, -1.2101547235064676e-8, 6.9350618248334386e-9,
     -1.9661464453856102e-9),
    (1.7402027787522711e-2, -2.9527880945699121e-2, 2.0045875571402799e-2, 7.0289515966903407e-6,
     -1.2375421071343148e-2, 1.1976293444235254e-2, -5.4156038466518525e-3, -6.3290893396418616e-8,
     1.8855118129005065e-3, -1.473473274825001e-3, 5.5515810097708387e-4, 5.2406834412550662e-10,
     -1.4357913535784836e-4, 9.9181293224943297e-5, -3.3460834749478311e-5, -3.5755837291098993e-12,
     7.1560851960630076e-6, -4.5516802628155526e-6, 1.4236576649271475e-6, 1.8803149082089664e-14,
     -2.6623403898929211e-7, 1.5950642189595716e-7, -4.7187514673841102e-8, -6.5107872958755177e-17,
     7.9795091026746235e-9),
    (3.0249124160905891e-2, 2.4817436002649977e-3, -4.9939134373457022e-2, 5.9915643009307869e-2,
     -3.2483207601623391e-2, -5.7212968652103441e-6, 1.5085251778569354e-2, -1.3261324005088445e-2,
     5.5515262632426148e-3, 3.0263182257030016e-8, -1.7229548406756723e-3, 1.2893570099929637e-3,
     -4.6845138348319876e-4, -1.830259937893045e-10, 1.1449739014822654e-4, -7.7378565221244477e-5,
     2.5625836246985201e-5, 1.0766165333192814e-12, -5.3246809282422621e-6, 3.349634863064464e-6,
     -1.0381253128684018e-6, -5.608909920621128e-15, 1.9150821930676591e-7, -1.1418365800203486e-7,
     3.3654425209171788e-8),
    (-9.9051020880159045e-2, 1.7954011706123486e-1, -1.2989606383463778e-1, -3.1478872752284357e-5,
     9.0510635276848131e-2, -9.2828824411184397e-2, 4.4412112839877808e-2, 2.7779236316835888e-7,
     -1.7229543805449697e-2, 1.4182925050891573e-2, -5.6214161633747336e-3, -2.39598509186381e-9,
     1.6029634366079908e-3, -1.1606784674435773e-3, 4.1001337768153873e-4, 1.8365800754090661e-11,
     -9.5844256563655903e-5, 6.3643062337764708e-5, -2.076250624489065e-5, -1.1806020912804483e-13,
     4.2131808239120649e-6, -2.6262241337012467e-6, 8.0770620494930662e-7, 6.0125912123632725e-16,
     -1.4729737374018841e-7),
    (-1.9994542198219728e-1, -1.5056113040026424e-2, 3.6470239469348489e-1, -4.6435192311733545e-1,
     2.6640934719197893e-1, 3.4038266027147191e-5, -1.3784338709329624e-1, 1.276467178337056e-1,
     -5.6213828755200985e-2, -1.753150885483011e-7, 1.9235592956768113e-2, -1.5088821281095315e-2,
     5.7401854451350123e-3, 1.0622382710310225e-9, -1.5335082692563998e-3, 1.0819320643228214e-3,
     -3.7372510193945659e-4, -6.6170909729031985e-12, 8.4263617380909628e-5, -5.5150706827483479e-5,
     1.7769536448348069e-5, 3.8827923210205533e-14, -3.53513697488768e-6, 2.1865832130045269e-6,
     -6.6812849447625594e-7),
    (7.2438608504029431e-1, -1.3918010932653375, 1.0654143352413968, 1.876173868950258e-4, -8.2705501176152696e-1,
     8.9352433347828414e-1, -4.4971003995291339e-1, -1.6107401567546652e-6, 1.9235590165271091e-1,
     -1.6597702160042609e-1, 6.8882222681814333e-2, 1.3910091724608687e-8, -2.146911561508663e-2,
     1.6228980898865892e-2, -5.9796016172584256e-3, -1.1287469112826745e-10, 1.5167451119784857e-3,
     -1.0478634293553899e-3, 3.5539072889126421e-4, 8.1704322111801517e-13, -7.7773013442452395e-5,
     5.0291413897007722e-5, -1.6035083867000518e-5, 1.2469354315487605e-14, 3.1369106244517615e-6),
    (1.6668949727276811, 1.165462765994632e-1, -3.3288393225018906, 4.4692325482864037, -2.6977693045875807,
     -2.600667859891061e-4, 1.5389017615694539, -1.4937962361134612, 6.8881964633233148e-1, 1.3077482004552385e-6,
     -2.5762963325596288e-1, 2.1097676102125449e-1, -8.3714408359219882e-2, -7.7920428881354753e-9,
     2.4267923064833599e-2, -1.7813678334552311e-2, 6.3970330388900056e-3, 4.9430807090480523e-11,
     -1.5554602758465635e-3, 1.0561196919903214e-3, -3.5277184460472902e-4, 9.3002334645022459e-14,
     7.5285855026557172e-5, -4.8186515569156351e-5, 1.5227271505597605e-5),
    (-6.6188298861372935, 1.3397985455142589e+1, -1.0789350606845146e+1, -1.4352254537875018e-3,
     9.2333694596189809, -1.0456552819547769e+1, 5.5105526029033471, 1.2024439690716742e-5, -2.5762961164755816,
     2.3207442745387179, -1.0045728797216284, -1.0207833290021914e-7, 3.3975092171169466e-1,
     -2.6720517450757468e-1, 1.0235252851562706e-1, 8.4329730484871625e-10, -2.7998284958442595e-2,
     2.0066274144976813e-2, -7.0554368915086242e-3, 1.9402238183698188e-12, 1.6562888105449611e-3,
     -1.1082898580743683e-3, 3.654545161310169e-4, -5.1290032026971794e-11, -7.6340103696869031e-5),
    (-1.7112706061976095e+1, -1.1208044642899116, 3.7131966511885444e+1, -5.2298271025348962e+1,
     3.3058589696624618e+1, 2.4791298976200222e-3, -2.061089403411526e+1, 2.088672775145582e+1,
     -1.0045703956517752e+1, -1.2238783449063012e-5, 4.0770134274221141, -3.473667358470195, 1.4329352617312006,
     7.1359914411879712e-8, -4.4797257159115612e-1, 3.4112666080644461e-1, -1.2699786326594923e-1,
     -2.8953677269081528e-10, 3.3125776278259863e-2, -2.3274087021036101e-2, 8.0399993503648882e-3,
     -1.177805216235265e-9, -1.8321624891071668e-3, 1.2108282933588665e-3, -3.9479941246822517e-4),
    (7.389033153567425e+1, -1.5680141270402273e+2, 1.322177542759164e+2, 1.3692876877324546e-2,
     -1.2366496885920151e+2, 1.4620689391062729e+2, -8.0365587724865346e+1, -1.1259851148881298e-4,
     4.0770132196179938e+1, -3.8210340013273034e+1, 1.719522294277362e+1, 9.3519707955168356e-7,
     -6.2716159907747034, 5.1168999071852637, -2.0319658112299095, -4.9507215582761543e-9, 5.9626397294332597e-1,
     -4.4220765337238094e-1, 1.6079998700166273e-1, -2.4733786203223402e-8, -4.0307574759979762e-2,
     2.7849050747097869e-2, -9.4751858992054221e-3, 6.419922235909132e-6, 2.1250180774699461e-3),
    (2.1216837098382522e+2, 1.3107863022633868e+1, -4.9698285932871748e+2, 7.3121595266969204e+2,
     -4.8213821720890847e+2, -2.8817248692894889e-2, 3.2616720302947102e+2, -3.4389340280087117e+2,
     1.7195193870816232e+2, 1.4038077378096158e-4, -7.52594195897599e+1, 6.651969984520934e+1,
     -2.8447519748152462e+1, -7.613702615875391e-7, 9.5402237105304373, -7.5175301113311376, 2.8943997568871961,
     -4.6612194999538201e-7, -8.0615149598794088e-1, 5.8483006570631029e-1, -2.0845408972964956e-1,
     1.4765818959305817e-4, 5.1000433863753019e-2, -3.3066252141883665e-2, 1.5109265210467774e-2),
    (-9.8959643098322368e+2, 2.1925555360905233e+3, -1.9283586782723356e+3, -1.5925738122215253e-1,
     1.9569985945919857e+3, -2.4072514765081556e+3, 1.3756149959336496e+3, 1.2920735237496668e-3,
     -7.525941715948055e+2, 7.3171668742208716e+2, -3.4137023466220065e+2, -9.9857390260608043e-6,
     1.3356313181291573e+2, -1.1276295161252794e+2, 4.6310396098204458e+1, -7.9237387133614756e-6,
     -1.4510726927018646e+1, 1.1111771248100563e+1, -4.1690817945270892, 3.1008219800117808e-3,
     1.1220095449981468, -7.6052379926149916e-1, 3.6262236505085254e-1, 2.216867741940747e-1,
     4.8683443692930507e-1),
)
"""The coefficients d_k,n of Temme's uniform asymptotic expansion (DLMF 8.12.3/8.12.4), generated in SciPy by
``_precompute/gammainc.py`` (``igam_asymp_coeff.h``)."""
_ASYMP_D_ARRAY = np.array(_ASYMP_D)


def _igam_fac(a: float, x: float) -> float:
    """x^a exp(-x) / Gamma(a): through log Gamma far from a = x, through the Lanczos sum near it."""
    if abs(a - x) > 0.4 * abs(a):
        ax = a * math.log(x) - x - lgam(a)
        if ax < -MAXLOG:
            return 0.0
        return _exp(ax)
    fac = a + LANCZOS_G - 0.5
    res = math.sqrt(fac / math.exp(1.)) / lanczos_sum_expg_scaled(a)
    if a < 200 and x < 200:
        res *= _exp(a - x) * _pow(x / fac, a)
    else:
        num = x - a - LANCZOS_G + 0.5
        res *= _exp(a * log1pmx(num / fac) + x * (0.5 - LANCZOS_G) / fac)
    return res


def _igamc_continued_fraction(a: float, x: float) -> float:
    """Q(a, x) by its continued fraction (DLMF 8.9.2)."""
    ax = _igam_fac(a, x)
    if ax == 0.0:
        return 0.0
    y = 1.0 - a
    z = x + y + 1.0
    return _cf_tail((0.0, y, z, 1.0, x + 1.0, x, z * x, (x + 1.0) / (z * x), 0.0)) * ax


def _igam_series(a: float, x: float) -> float:
    """P(a, x) by its power series (DLMF 8.11.4)."""
    ax = _igam_fac(a, x)
    if ax == 0.0:
        return 0.0
    return _series_tail(a, x, 1.0, 1.0, 0.0) * ax / a


def _igamc_series(a: float, x: float) -> float:
    """Q(a, x) for small x by DLMF 8.7.3, arranged against cancellation."""
    fac, total = 1.0, 0.0
    for n in range(1, _IGAM_MAXITER):
        fac *= -x / n
        term = fac / (a + n)
        total += term
        if abs(term) <= MACHEP * abs(total):
            break
    logx = math.log(x)
    term = -expm1(a * logx - lgam1p(a))
    return term - _exp(a * logx - lgam(a)) * total


def _asymptotic_series(a: float, x: float, lower: bool) -> float:
    """P (``lower``) or Q for a near x by Temme's uniform expansion (DLMF 8.12.3/8.12.4)."""
    sgn = -1 if lower else 1
    lam = x / a
    sigma = (x - a) / a
    if lam > 1:
        eta = math.sqrt(-2 * log1pmx(sigma))
    elif lam < 1:
        eta = -math.sqrt(-2 * log1pmx(sigma))
    else:
        eta = 0.0
    res = 0.5 * erfc(sgn * eta * math.sqrt(a / 2))
    etapow = [1.0] + [0.0] * 24
    maxpow = 0
    absoldterm = _INF
    total = 0.0
    afac = 1.0
    for k in range(25):
        row = _ASYMP_D[k]
        ck = row[0]
        for n in range(1, 25):
            if n > maxpow:
                etapow[n] = eta * etapow[n - 1]
                maxpow += 1
            ckterm = row[n] * etapow[n]
            ck += ckterm
            if abs(ckterm) < MACHEP * abs(ck):
                break
        term = ck * afac
        absterm = abs(term)
        if absterm > absoldterm:
            break
        total += term
        if absterm < MACHEP * abs(total):
            break
        absoldterm = absterm
        afac /= a
    res += sgn * _exp(-0.5 * a * eta * eta) * total / math.sqrt(2 * math.pi * a)
    return res


def _asymptotic_regime(a: float, x: float) -> bool:
    r = abs(x - a) / a
    return (_SMALL < a < _LARGE and r < _SMALLRATIO) or (a > _LARGE and r < _LARGERATIO / math.sqrt(a))


def _settled(a: float, x: float, lower: bool) -> float | None:
    """P (``lower``) or Q where igam and igamc answer before their series: NaN, zero and infinite arguments, and
    the asymptotic regime a ~ x; None elsewhere."""
    if math.isnan(a) or math.isnan(x) or x < 0 or a < 0:
        return _NAN
    if a == 0:
        return (1.0 if lower else 0.0) if x > 0 else _NAN
    if x == 0:
        return 0.0 if lower else 1.0
    if math.isinf(a):
        return _NAN if math.isinf(x) else (0.0 if lower else 1.0)
    if math.isinf(x):
        return 1.0 if lower else 0.0
    if _asymptotic_regime(a, x):
        return _asymptotic_series(a, x, lower)
    return None


def gammainc(a: float, x: float) -> float:
    """P(a, x) = 1/Gamma(a) int_0^x e^-t t^(a-1) dt (Cephes ``igam``, ``scipy.special.gammainc``)."""
    settled = _settled(a, x, True)
    if settled is not None:
        return settled
    if x > 1.0 and x > a:
        return 1.0 - gammaincc(a, x)
    return _igam_series(a, x)


def gammaincc(a: float, x: float) -> float:
    """Q(a, x) = 1 - P(a, x) (Cephes ``igamc``, ``scipy.special.gammaincc``)."""
    settled = _settled(a, x, False)
    if settled is not None:
        return settled
    if x > 1.1:
        return 1.0 - _igam_series(a, x) if x < a else _igamc_continued_fraction(a, x)
    if x <= 0.5:
        return 1.0 - _igam_series(a, x) if -0.4 / math.log(x) < a else _igamc_series(a, x)
    return 1.0 - _igam_series(a, x) if x * 1.1 < a else _igamc_series(a, x)


# ---------------------------------------------------------------------------------------------
# the array functions the finish-time law calls


_UFUNCS: list[Any] = []
"""SciPy's special-function ufunc module once :func:`scipy_ufuncs` has loaded it (one entry)."""


def scipy_ufuncs() -> Any:
    """The module holding SciPy's ufuncs ``gammainc``, ``ndtr`` and ``ndtri``: ``scipy.special`` where it is loaded
    already, else its compiled ``scipy.special._ufuncs`` alone, without running the package's ``__init__``.

    ``import scipy.special`` costs about 0.15-0.3 CPU s, nearly all of it in what the package imports beside the
    ufuncs (the array-API wrappers, ``scipy._lib._array_api`` and ``array_api_compat``, the orthogonal
    polynomials, ...); the ufunc extension alone costs about 0.015 s. Its initialisation imports its sibling
    extensions (``_ufuncs_cxx``, ``_special_ufuncs``, ...) as submodules of ``scipy.special``, so the package is
    stood in for, while they load, by a module object made from its import spec and never executed, then taken out
    of ``sys.modules`` again: a later ``import scipy.special`` runs the package as usual and takes the loaded
    extensions as they are. The functions are the same objects (``scipy.special.gammainc`` is
    ``_ufuncs.gammainc``; tests/test_cephes.py checks it), hence the same bits. Where the extension cannot be loaded
    so (another SciPy layout), the whole package is imported."""
    special = sys.modules.get("scipy.special")
    if special is not None:
        return special
    if not _UFUNCS:
        _UFUNCS.append(_load_ufuncs())
    return _UFUNCS[0]


def _load_ufuncs() -> Any:
    """``scipy.special._ufuncs`` without the package's ``__init__`` (:func:`scipy_ufuncs`), else ``scipy.special``."""
    name = "scipy.special"
    try:
        spec = importlib.util.find_spec(name)  # imports ``scipy`` itself (about 0.01 s), not scipy.special
        if spec is None or spec.submodule_search_locations is None:
            raise ImportError(name)
        stand_in = importlib.util.module_from_spec(spec)  # not executed: only its __path__ and __spec__ are read
        sys.modules[name] = stand_in
        try:
            from scipy.special import _ufuncs  # lazy: past the numpy budget only, the extension alone

            return _ufuncs
        finally:
            if sys.modules.get(name) is stand_in:
                del sys.modules[name]
    except ImportError:  # the package as usual (it takes whatever extension loaded before the failure)
        from scipy import special  # lazy: the whole package, where the extension cannot load alone

        return special


def _each(f: Callable[..., float], vf: Callable[..., FloatArray], scipy_name: str, *args: ArrayLike) -> FloatArray:
    arrs = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in args))
    shape = arrs[0].shape
    size = arrs[0].size
    if _UFUNCS or "scipy.special" in sys.modules or (size > PYTHON_LIMIT and _NUMPY_SPENT[0] + size > SCIPY_LIMIT):
        # loaded anyway, or worth its load (SciPy's ufuncs, the same bits)
        out: FloatArray = getattr(scipy_ufuncs(), scipy_name)(*arrs)
        return out
    flat = [a.ravel().tolist() for a in arrs] if size <= PYTHON_LIMIT else []
    if flat:
        return np.array([f(*v) for v in zip(*flat, strict=True)], dtype=float).reshape(shape)
    _NUMPY_SPENT[0] += size
    with np.errstate(all="ignore"):  # the C functions' inf and NaN, without numpy's warnings
        return vf(*(a.ravel() for a in arrs)).reshape(shape)


def ndtr_array(a: ArrayLike) -> FloatArray:
    """:func:`ndtr` element-wise (``scipy.special.ndtr``)."""
    return _each(ndtr, vndtr, "ndtr", a)


def ndtri_array(p: ArrayLike) -> FloatArray:
    """:func:`ndtri` element-wise (``scipy.special.ndtri``)."""
    return _each(ndtri, vndtri, "ndtri", p)


def gammainc_array(a: ArrayLike, x: ArrayLike) -> FloatArray:
    """:func:`gammainc` element-wise (``scipy.special.gammainc``)."""
    return _each(gammainc, vgammainc, "gammainc", a, x)


# ---------------------------------------------------------------------------------------------
# the same algorithms over numpy arrays (1-D float64, one element's operations exactly as above)
#
# Each branch runs on the elements that take it, each loop on the elements still iterating (an element that
# stops keeps the value of its last iteration), the floating-point operations in the scalar functions' order;
# numpy's +, -, *, / and sqrt are IEEE's, as Python's and C's are. exp, log and pow are the C library's, called per
# element through ``math`` (numpy's own exp and log may differ from it in the last bit on some builds).


def _vpolevl(x: FloatArray, coef: Sequence[float]) -> FloatArray:
    """:func:`polevl` over an array (the same operations)."""
    ans: FloatArray = np.full(x.shape, coef[0])
    for c in coef[1:]:
        ans = ans * x + c
    return ans


def _vp1evl(x: FloatArray, coef: Sequence[float]) -> FloatArray:
    """:func:`p1evl` over an array (the same operations)."""
    ans: FloatArray = x + coef[0]
    for c in coef[1:]:
        ans = ans * x + c
    return ans


def _libm(f: Callable[..., float], safe: Callable[..., float], *args: FloatArray) -> FloatArray:
    """f element-wise through Python's math (the C library), ``safe`` (C's inf / NaN instead of Python's
    exceptions) where f raises."""
    cols = [v.tolist() for v in args]
    try:
        return np.fromiter(map(f, *cols), dtype=float, count=args[0].size)
    except (OverflowError, ValueError):
        return np.fromiter(map(safe, *cols), dtype=float, count=args[0].size)


def _log(x: float) -> float:
    """The C library's log: -inf at 0, NaN below."""
    if x > 0 or math.isnan(x):
        return math.log(x)
    return -_INF if x == 0 else _NAN


def _vexp(x: FloatArray) -> FloatArray:
    return _libm(math.exp, _exp, x)


def _vlog(x: FloatArray) -> FloatArray:
    return _libm(math.log, _log, x)


def _vpow(x: FloatArray, y: FloatArray) -> FloatArray:
    return _libm(math.pow, _pow, x, y)


def _verf_core(x: FloatArray) -> FloatArray:
    """erf for |x| <= 1: x T(x^2) / U(x^2)."""
    z = x * x
    out: FloatArray = x * _vpolevl(z, _ERF_T) / _vp1evl(z, _ERF_U)
    return out


def _verfc_tail(a: FloatArray) -> FloatArray:
    """erfc for |a| >= 1 (not NaN): exp(-a^2) P(|a|)/Q(|a|), 2 minus it below 0, the underflow's 0 or 2."""
    x = np.abs(a)
    out = np.where(a < 0, 2.0, 0.0)
    z = -a * a
    i = np.flatnonzero(z >= -MAXLOG)
    if i.size:
        ai, xi = a[i], x[i]
        ez = _vexp(z[i])
        near = xi < 8.0
        p = np.where(near, _vpolevl(xi, _ERFC_P), _vpolevl(xi, _ERFC_R))
        q = np.where(near, _vp1evl(xi, _ERFC_Q), _vp1evl(xi, _ERFC_S))
        y = (ez * p) / q
        y = np.where(ai < 0, 2.0 - y, y)
        out[i] = np.where(y != 0.0, y, out[i])
    return out


def verf(x: FloatArray) -> FloatArray:
    """:func:`erf` element-wise."""
    out = np.full(x.shape, _NAN)
    ax = np.abs(x)
    core = ax <= 1.0
    out[core] = _verf_core(x[core])
    for sign in (1.0, -1.0):
        i = np.flatnonzero((ax > 1.0) & (sign * x > 0))
        if i.size:
            v = 1.0 - _verfc_tail(sign * x[i])
            out[i] = v if sign > 0 else -v
    return out


def verfc(a: FloatArray) -> FloatArray:
    """:func:`erfc` element-wise."""
    out = np.full(a.shape, _NAN)
    ax = np.abs(a)
    core = ax < 1.0
    out[core] = 1.0 - _verf_core(a[core])
    tail = ax >= 1.0
    out[tail] = _verfc_tail(a[tail])
    return out


def vndtr(a: FloatArray) -> FloatArray:
    """:func:`ndtr` element-wise."""
    out = np.full(a.shape, _NAN)
    x = a * SQRT1_2
    z = np.abs(x)
    core = z < 1.0
    out[core] = 0.5 + 0.5 * _verf_core(x[core])
    tail = z >= 1.0
    y = 0.5 * _verfc_tail(z[tail])
    out[tail] = np.where(x[tail] > 0, 1.0 - y, y)
    return out


def vndtri(y0: FloatArray) -> FloatArray:
    """:func:`ndtri` element-wise."""
    out = np.full(y0.shape, _NAN)
    out[y0 == 0.0] = -_INF
    out[y0 == 1.0] = _INF
    inside = (y0 > 0.0) & (y0 < 1.0)
    upper = inside & (y0 > (1.0 - _EXP_M2))
    y = np.where(upper, 1.0 - y0, y0)
    mid = inside & (y > _EXP_M2)
    ym = y[mid] - 0.5
    y2 = ym * ym
    out[mid] = (ym + ym * (y2 * _vpolevl(y2, _NDTRI_P0) / _vp1evl(y2, _NDTRI_Q0))) * SQRT2PI
    i = np.flatnonzero(inside & ~mid)
    if i.size:
        x = np.sqrt(-2.0 * _vlog(y[i]))
        x0 = x - _vlog(x) / x
        z = 1.0 / x
        near = x < 8.0
        x1 = np.where(near, z * _vpolevl(z, _NDTRI_P1) / _vp1evl(z, _NDTRI_Q1),
                      z * _vpolevl(z, _NDTRI_P2) / _vp1evl(z, _NDTRI_Q2))
        x = x0 - x1
        out[i] = np.where(upper[i], x, -x)
    return out


def vlgam(x: FloatArray) -> FloatArray:
    """:func:`lgam` element-wise, x >= 0 (NaN where x < 0, where the scalar function refuses)."""
    out = x.copy()  # inf and NaN as they are
    out[x < 0.0] = _NAN
    small = np.flatnonzero(np.isfinite(x) & (x >= 0.0) & (x < 13.0))
    if small.size:
        xs = x[small]
        z, p, u = np.ones(xs.size), np.zeros(xs.size), xs.copy()
        while True:
            m = u >= 3.0
            if not m.any():
                break
            p[m] -= 1.0
            u[m] = xs[m] + p[m]
            z[m] *= u[m]
        pole = np.zeros(xs.size, dtype=bool)
        while True:
            m = (u < 2.0) & ~pole
            if not m.any():
                break
            pole |= m & (u == 0.0)
            m &= ~pole
            z[m] /= u[m]
            p[m] += 1.0
            u[m] = xs[m] + p[m]
        res = np.full(xs.size, _INF)
        two = ~pole & (u == 2.0)
        res[two] = _vlog(z[two])
        j = ~pole & (u != 2.0)
        pj = p[j] - 2.0
        xj = xs[j] + pj
        pj = xj * _vpolevl(xj, _GAMMA_B) / _vp1evl(xj, _GAMMA_C)
        res[j] = _vlog(z[j]) + pj
        out[small] = res
    big = np.flatnonzero(np.isfinite(x) & (x >= 13.0))
    if big.size:
        xb = x[big]
        with np.errstate(over="ignore"):  # 1 / x^2 of x > 1e154: 0, as in C
            p = 1.0 / (xb * xb)
        with np.errstate(over="ignore"):  # (x - 1/2) log x past the largest double: inf, as in C
            q = (xb - 0.5) * _vlog(xb) - xb + LS2PI
        stirling = q + _vpolevl(p, _GAMMA_A) / xb
        short = ((7.9365079365079365079365e-4 * p - 2.7777777777777777777778e-3) * p + 0.0833333333333333333333) / xb
        res = np.where(xb >= 1000.0, np.where(xb > 1.0e8, q, q + short), stirling)
        out[big] = np.where(xb > MAXLGM, _INF, res)
    return out


def _vlanczos_sum_expg_scaled(x: FloatArray) -> FloatArray:
    """:func:`lanczos_sum_expg_scaled` element-wise (ratevl in 1/x, coefficients reversed, above 1)."""
    big = np.abs(x) > 1
    with np.errstate(divide="ignore"):
        y = np.where(big, 1 / x, x)
    num = np.where(big, _vpolevl(y, _LANCZOS_EXPG_NUM[::-1]), _vpolevl(y, _LANCZOS_EXPG_NUM))
    den = np.where(big, _vpolevl(y, _LANCZOS_EXPG_DENOM[::-1]), _vpolevl(y, _LANCZOS_EXPG_DENOM))
    out: FloatArray = num / den  # pow(x, 0) = 1 times num: num, exactly
    return out


def _vlog1p(x: FloatArray) -> FloatArray:
    z = 1.0 + x
    out = np.empty(x.shape)
    fit = (z >= SQRT1_2) & (z <= _SQRT2)
    out[~fit] = _vlog(z[~fit])
    xf = x[fit]
    zf = xf * xf
    zf = -0.5 * zf + xf * (zf * _vpolevl(xf, _LOG1P_P) / _vp1evl(xf, _LOG1P_Q))
    out[fit] = xf + zf
    return out


def vlog1pmx(x: FloatArray) -> FloatArray:
    """:func:`log1pmx` element-wise."""
    out = np.zeros(x.shape)  # x = 0: the series' terms are all zero
    far = np.abs(x) >= 0.5
    out[far] = _vlog1p(x[far]) - x[far]
    i = np.flatnonzero(~far & (x != 0.0))
    out[i] = _vseries(x[i], x[i], np.zeros(i.size), _ONES)
    return out


_ONES = (1.0,) * 498
"""log1pmx's series terms x^n / n as c_n x^n / n with c_n = 1 (1.0 times a double is that double)."""


def _vseries(x: FloatArray, xfac: FloatArray, res: FloatArray, coef: Sequence[float]) -> FloatArray:
    """res + sum_n c_n xfac (-x)^(n-1) / n for n = 2, 3, ... (one c_n each), each element stopping after its first
    term below MACHEP times its sum: the loops of :func:`log1pmx` and :func:`_lgam1p_taylor`."""
    out = np.empty(x.size)
    i = np.arange(x.size)
    for n, c in enumerate(coef, start=2):
        if not i.size:
            break
        xfac = xfac * -x
        term = c * xfac / n
        res = res + term
        done = np.abs(term) < MACHEP * np.abs(res)
        if done.any():
            out[i[done]] = res[done]
            keep = ~done
            i, x, xfac, res = i[keep], x[keep], xfac[keep], res[keep]
    out[i] = res
    return out


def _vexpm1(x: FloatArray) -> FloatArray:
    out = np.where(np.isnan(x) | (x > 0), x, -1.0)  # the non-finite
    far = np.isfinite(x) & ((x < -0.5) | (x > 0.5))
    out[far] = _vexp(x[far]) - 1.0
    fit = np.isfinite(x) & ~far
    xf = x[fit]
    xx = xf * xf
    r = xf * _vpolevl(xx, _EXPM1_P)
    r = r / (_vpolevl(xx, _EXPM1_Q) - r)
    out[fit] = r + r
    return out


def _vlgam1p_taylor(x: FloatArray) -> FloatArray:
    out = np.zeros(x.size)  # x = 0: 0
    i = np.flatnonzero(x != 0)
    out[i] = _vseries(x[i], -x[i], -EULER * x[i], _ZETA)
    return out


def _vlgam1p(x: FloatArray) -> FloatArray:
    out = np.empty(x.shape)
    t0 = np.abs(x) <= 0.5
    t1 = ~t0 & (np.abs(x - 1) < 0.5)
    rest = ~(t0 | t1)
    out[t0] = _vlgam1p_taylor(x[t0])
    out[t1] = _vlog(x[t1]) + _vlgam1p_taylor(x[t1] - 1)
    out[rest] = vlgam(x[rest] + 1)
    return out


def _vigam_fac(a: FloatArray, x: FloatArray) -> FloatArray:
    out = np.empty(a.shape)
    far = np.abs(a - x) > 0.4 * np.abs(a)
    af, xf = a[far], x[far]
    ax = af * _vlog(xf) - xf - vlgam(af)
    out[far] = np.where(ax < -MAXLOG, 0.0, _vexp(ax))
    i = np.flatnonzero(~far)
    if i.size:
        an, xn = a[i], x[i]
        fac = an + LANCZOS_G - 0.5
        res = np.sqrt(fac / math.exp(1.)) / _vlanczos_sum_expg_scaled(an)
        low = (an < 200) & (xn < 200)
        r_low = res[low] * (_vexp(an[low] - xn[low]) * _vpow(xn[low] / fac[low], an[low]))
        hi = ~low
        num = xn[hi] - an[hi] - LANCZOS_G + 0.5
        r_hi = res[hi] * _vexp(an[hi] * vlog1pmx(num / fac[hi]) + xn[hi] * (0.5 - LANCZOS_G) / fac[hi])
        res[low], res[hi] = r_low, r_hi
        out[i] = res
    return out


_TAIL = 32
"""Elements still iterating below which a vectorised loop hands them to Python floats (the same operations): a
numpy step costs about as much as 20 Python ones."""


def _cf_tail(state: tuple[float, ...]) -> float:
    """The continued fraction of :func:`_igamc_continued_fraction` from a state (c, y, z, pkm2, pkm1, qkm2, qkm1,
    ans, iterations done) on."""
    c, y, z, pkm2, pkm1, qkm2, qkm1, ans, done = state
    for _ in range(int(done), _IGAM_MAXITER):
        c += 1.0
        y += 1.0
        z += 2.0
        yc = y * c
        pk = pkm1 * z - pkm2 * yc
        qk = qkm1 * z - qkm2 * yc
        if qk != 0:
            r = pk / qk
            t = abs((ans - r) / r) if r != 0 else _INF  # C: inf or NaN, neither ends the loop
            ans = r
        else:
            t = 1.0
        pkm2, pkm1, qkm2, qkm1 = pkm1, pk, qkm1, qk
        if abs(pk) > _BIG:
            pkm2 *= _BIGINV
            pkm1 *= _BIGINV
            qkm2 *= _BIGINV
            qkm1 *= _BIGINV
        if t <= MACHEP:
            break
    return ans


def _stopped(out: FloatArray, idx: NDArray[np.intp], live: NDArray[np.bool_], done: NDArray[np.bool_],
             state: tuple[FloatArray, ...]) -> tuple[NDArray[np.intp], NDArray[np.bool_], int, tuple[FloatArray, ...]]:
    """A vectorised loop's elements that stopped this iteration (``done``): each one's result (the state's last
    array) written to ``out`` at its index, the element no longer live; once half of the arrays' elements have
    stopped, the arrays compressed to the live ones (one compression per halving, not one per iteration; a stopped
    element kept meanwhile iterates on, its result already taken). Returns (indices, live, live count, state)."""
    out[idx[done]] = state[-1][done]
    live &= ~done
    n = int(np.count_nonzero(live))
    if 2 * n <= idx.size:
        return idx[live], np.ones(n, dtype=bool), n, tuple(v[live] for v in state)
    return idx, live, n, state


def _vigamc_continued_fraction(a: FloatArray, x: FloatArray) -> FloatArray:
    ax = _vigam_fac(a, x)
    out = np.zeros(a.size)
    idx = np.flatnonzero(ax != 0.0)
    xs = x[idx]
    y = 1.0 - a[idx]
    z = xs + y + 1.0
    c = 0.0  # the same for every element: the iteration count (whole numbers, exact)
    pkm2, qkm2 = np.ones(idx.size), xs
    pkm1, qkm1 = xs + 1.0, z * xs
    ans = pkm1 / qkm1
    it = 0
    live = np.ones(idx.size, dtype=bool)  # still iterating (the arrays are compressed once half of them stopped)
    n = idx.size
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # a stopped element may run on into inf
        while n > _TAIL and it < _IGAM_MAXITER:
            it += 1
            c = c + 1.0
            y = y + 1.0
            z = z + 2.0
            yc = y * c
            pk = pkm1 * z - pkm2 * yc
            qk = qkm1 * z - qkm2 * yc
            r = pk / qk
            t = np.abs((ans - r) / r)
            if not (qk.all() and r.all()):  # qk = 0: t = 1 and ans kept; r = 0: t = inf
                t = np.where(qk != 0, np.where(r != 0, t, _INF), 1.0)
                r = np.where(qk != 0, r, ans)
            ans = r
            pkm2, pkm1, qkm2, qkm1 = pkm1, pk, qkm1, qk
            big = np.abs(pk) > _BIG
            if big.any():
                pkm2, pkm1, qkm2, qkm1 = (np.where(big, v * _BIGINV, v) for v in (pkm2, pkm1, qkm2, qkm1))
            done = (t <= MACHEP) & live
            if done.any():
                idx, live, n, (y, z, pkm2, pkm1, qkm2, qkm1, ans) = _stopped(out, idx, live, done,
                                                                           (y, z, pkm2, pkm1, qkm2, qkm1, ans))
    if n:
        idx = idx[live]
        y, z, pkm2, pkm1, qkm2, qkm1, ans = (v[live] for v in (y, z, pkm2, pkm1, qkm2, qkm1, ans))
        cs, its = np.full(n, c), np.full(n, float(it))
        cols = zip(*(v.tolist() for v in (cs, y, z, pkm2, pkm1, qkm2, qkm1, ans, its)), strict=True)
        out[idx] = [_cf_tail(st) for st in cols]
    res: FloatArray = np.where(ax == 0.0, 0.0, out * ax)
    return res


def _series_tail(r: float, x: float, c: float, ans: float, done: float) -> float:
    """The power series of :func:`_igam_series` from a state (r, x, c, ans, iterations done) on."""
    for _ in range(int(done), _IGAM_MAXITER):
        r += 1.0
        c *= x / r
        ans += c
        if c <= MACHEP * ans:
            break
    return ans


def _vigam_series(a: FloatArray, x: FloatArray) -> FloatArray:
    ax = _vigam_fac(a, x)
    out = np.ones(a.size)
    idx = np.flatnonzero(ax != 0.0)
    r, xs, c, ans = a[idx], x[idx], np.ones(idx.size), np.ones(idx.size)
    it = 0
    live = np.ones(idx.size, dtype=bool)  # still iterating (the arrays are compressed once half of them stopped)
    n = idx.size
    while n > _TAIL and it < _IGAM_MAXITER:
        it += 1
        r = r + 1.0
        c = c * (xs / r)
        ans = ans + c
        done = (c <= MACHEP * ans) & live
        if done.any():
            idx, live, n, (r, xs, c, ans) = _stopped(out, idx, live, done, (r, xs, c, ans))
    if n:
        idx = idx[live]
        r, xs, c, ans = (v[live] for v in (r, xs, c, ans))
        out[idx] = [_series_tail(*st, it) for st in zip(r.tolist(), xs.tolist(), c.tolist(), ans.tolist(), strict=True)]
    res: FloatArray = np.where(ax == 0.0, 0.0, out * ax / a)
    return res


def _vigamc_series(a: FloatArray, x: FloatArray) -> FloatArray:
    total = np.zeros(a.size)
    idx = np.arange(a.size)
    xs, as_, fac, tot = x, a, np.ones(a.size), np.zeros(a.size)
    for n in range(1, _IGAM_MAXITER):
        if not idx.size:
            break
        fac = fac * (-xs / n)
        term = fac / (as_ + n)
        tot = tot + term
        done = np.abs(term) <= MACHEP * np.abs(tot)
        if done.any():
            total[idx[done]] = tot[done]
            keep = ~done
            idx = idx[keep]
            xs, as_, fac, tot = (v[keep] for v in (xs, as_, fac, tot))
    total[idx] = tot
    logx = _vlog(x)
    term = -_vexpm1(a * logx - _vlgam1p(a))
    out: FloatArray = term - _vexp(a * logx - vlgam(a)) * total
    return out


def _vasymptotic_series(a: FloatArray, x: FloatArray, lower: bool) -> FloatArray:
    """:func:`_asymptotic_series` element-wise."""
    sgn = -1 if lower else 1
    lam = x / a
    sigma = (x - a) / a
    eta = np.zeros(a.size)
    up, down = lam > 1, lam < 1
    eta[up] = np.sqrt(-2 * vlog1pmx(sigma[up]))
    eta[down] = -np.sqrt(-2 * vlog1pmx(sigma[down]))
    res = 0.5 * verfc(sgn * eta * np.sqrt(a / 2))
    etapow = np.empty((25, a.size))
    etapow[0] = 1.0
    for n in range(1, 25):
        etapow[n] = eta * etapow[n - 1]
    total = np.zeros(a.size)
    idx = np.arange(a.size)
    pw, al, absoldterm, tot, afac = etapow, a, np.full(a.size, _INF), np.zeros(a.size), np.ones(a.size)
    for k in range(25):
        if not idx.size:
            break
        # ck = d_k0 + d_k1 eta + ..., each element stopping after its first n with |d_kn eta^n| < MACHEP |ck|: every
        # term computed, the running sums left to right (np.add.accumulate), each element's taken where it stops
        terms = _ASYMP_D_ARRAY[k][:, None] * pw
        terms[0] = _ASYMP_D[k][0]
        sums = np.add.accumulate(terms, axis=0)
        small = np.abs(terms[1:]) < MACHEP * np.abs(sums[1:])
        stop = np.where(small.any(axis=0), small.argmax(axis=0) + 1, 24)
        ck = sums[stop, np.arange(idx.size)]
        term = ck * afac
        absterm = np.abs(term)
        grew = absterm > absoldterm
        tot = np.where(grew, tot, tot + term)
        done = grew | (absterm < MACHEP * np.abs(tot))
        absoldterm = absterm
        afac = afac / al
        if done.any():
            total[idx[done]] = tot[done]
            keep = ~done
            pw, idx = pw[:, keep], idx[keep]
            al, absoldterm, tot, afac = (v[keep] for v in (al, absoldterm, tot, afac))
    total[idx] = tot
    out: FloatArray = res + sgn * _vexp(-0.5 * a * eta * eta) * total / np.sqrt(2 * math.pi * a)
    return out


def _vasymptotic_regime(a: FloatArray, x: FloatArray) -> NDArray[np.bool_]:
    r = np.abs(x - a) / a
    with np.errstate(invalid="ignore"):
        out: NDArray[np.bool_] = (((_SMALL < a) & (a < _LARGE) & (r < _SMALLRATIO))
                                  | ((a > _LARGE) & (r < _LARGERATIO / np.sqrt(a))))
    return out


_FEW_ASYMPTOTIC = 48
"""Elements of the asymptotic regime (a ~ x) up to which :func:`vgammainc` evaluates them in Python floats: its
vectorised series costs about 1 ms a call whatever the count (25 x 25 terms), the scalar one about 15-30 us an
element (a finish-time cdf of a few laws has a handful; measured on the examples' own arguments)."""
_FEW_FRACTION = 128
"""The same for the continued fraction (x > a): about 5 us an element in Python, 1-1.5 ms a numpy call."""
_FEW_SERIES = 192
"""The same for the power series (x < a): about 3 us an element in Python, 1-1.3 ms a numpy call."""


def vgammainc(a: FloatArray, x: FloatArray) -> FloatArray:
    """:func:`gammainc` element-wise over two 1-D arrays of one size: the settled cases, the asymptotic series
    (a ~ x), 1 - igamc's continued fraction (x > 1.1, x > a) or small-x series (1 < x <= 1.1, x > a), the power
    series elsewhere."""
    out = np.full(a.shape, _NAN)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        valid = ~(np.isnan(a) | np.isnan(x) | (x < 0) | (a < 0))
        zero_a = valid & (a == 0)
        out[zero_a & (x > 0)] = 1.0
        rest = valid & ~zero_a
        out[rest & (x == 0)] = 0.0
        rest &= x != 0
        inf_a = rest & np.isinf(a)
        out[inf_a & ~np.isinf(x)] = 0.0
        rest &= ~inf_a
        inf_x = rest & np.isinf(x)
        out[inf_x] = 1.0
        rest &= ~inf_x
        asym = rest & _vasymptotic_regime(a, x)
        rest &= ~asym
        upper = rest & (x > 1.0) & (x > a)
        cf = upper & (x > 1.1)
        for part, f, few in ((asym, _vasymptotic_p, _FEW_ASYMPTOTIC), (cf, _vigam_by_fraction, _FEW_FRACTION),
                             (upper & ~cf, _vigam_by_igamc_series, _FEW_SERIES),
                             (rest & ~upper, _vigam_series, _FEW_SERIES)):
            i = np.flatnonzero(part)
            if i.size > few:
                out[i] = f(a[i], x[i])
            elif i.size:  # a few: in Python floats
                out[i] = [gammainc(u, v) for u, v in zip(a[i].tolist(), x[i].tolist(), strict=True)]
    return out


def _vasymptotic_p(a: FloatArray, x: FloatArray) -> FloatArray:
    return _vasymptotic_series(a, x, True)


def _vigam_by_fraction(a: FloatArray, x: FloatArray) -> FloatArray:
    out: FloatArray = 1.0 - _vigamc_continued_fraction(a, x)
    return out


def _vigam_by_igamc_series(a: FloatArray, x: FloatArray) -> FloatArray:
    out: FloatArray = 1.0 - _vigamc_series(a, x)
    return out
