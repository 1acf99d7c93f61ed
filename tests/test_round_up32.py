"""``space.round_up32``: the least float32 no smaller than each value, bit for bit the ``nextafter`` form."""
from __future__ import annotations

import warnings

import numpy as np

from tpopt.optimizer.space import round_up32


def _reference(x: np.ndarray) -> np.ndarray:
    """The definition: the float32 cast, and the next float32 toward +inf where the cast fell below."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        y = x.astype(np.float32)
        return np.where(y < x, np.nextafter(y, np.float32(np.inf)), y)


def _values() -> np.ndarray:
    rng = np.random.default_rng(39)
    x = rng.random(20_000) * 10.0 ** rng.uniform(-40, 40, 20_000)
    x[::5] = x[::5].astype(np.float32).astype(float)  # exact float32 values stay as they are
    edges = [0.0, -0.0, 1e-46, 7e-46, 4e-45, 3.4028234663852886e38, 3.4028235e38, 1e39, np.inf, np.nan]
    return np.concatenate([x, edges])


def test_same_bits_as_nextafter_for_every_sign() -> None:
    x = _values()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for xs in (x, -x, np.concatenate([x, -x]), x.reshape(-1, 2)[:, 0], x[:6].reshape(2, 3), np.float64(0.1),
                   np.zeros(0)):
            got, want = round_up32(xs), _reference(np.asarray(xs, dtype=float))
            assert got.dtype == np.float32 and got.shape == want.shape
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_least_float32_not_below() -> None:
    x = _values()
    x = x[np.isfinite(x) & (np.abs(x) < 3.4e38)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for xs in (x, -x):
            up = round_up32(xs)
            assert np.all(up.astype(float) >= xs)
            below = np.nextafter(up, np.float32(-np.inf)).astype(float)
            assert np.all(below < xs)
