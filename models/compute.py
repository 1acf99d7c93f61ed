"""Compute: work per step, time at an efficiency, resource lower bounds (chapter 10.1.3, 10.6.4)."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray


def iterations(tokens: ArrayLike, tokens_per_step: ArrayLike) -> NDArray[np.float64]:
    """Training iterations: ceil(D / b). 1e11 tokens / (384 x 8192) -> 31,790; the last, partial,
    step is budgeted as a full one."""
    steps: NDArray[np.float64] = np.ceil(np.asarray(tokens, dtype=float) / np.asarray(tokens_per_step, dtype=float))
    return steps


def compute_time(flops: ArrayLike, cards: ArrayLike, peak: float, efficiency: float) -> NDArray[np.float64]:
    """Per-card compute time of evenly divided work: T = F / (p x P x eta).

    Chapter 10.1.3: 1.66e17 FLOP per step on RTX 4090s (165.2 TFLOP/s at 40 %) -> 78.3 s on 32
    cards, 52.2 s on 48. The efficiency applies to compute only; exposed communication, bubbles
    and input waits are added on top.
    """
    return np.asarray(flops, dtype=float) / (np.asarray(cards, dtype=float) * peak * efficiency)


def cards_for_deadline(total_flops: ArrayLike, peak: float, efficiency: float,
                       available_s: float) -> NDArray[np.float64]:
    """Compute-bound card count: p >= ceil(F / (P x eta x T_available)).

    5.27e21 FLOP in 30 days at 40 %: H100 (989 TFLOP/s) 6 cards, RTX 4090 (165.2) 31 cards.
    """
    return np.ceil(np.asarray(total_flops, dtype=float) / (peak * efficiency * available_s) - 1e-12)


def tokens_per_second_per_card(peak: float, efficiency: float, flops_per_token: float) -> float:
    """Throughput of one card: P x eta / (FLOP per token) (H100 at 40 %: ~7,500 token/s)."""
    return peak * efficiency / flops_per_token


def dense_training_flops(n_params: ArrayLike, tokens: ArrayLike) -> NDArray[np.float64]:
    """Rule-of-thumb dense training work F = 6 N D (chapter 10.6.4); with D = 20 N, F = 120 N^2."""
    flops: NDArray[np.float64] = 6.0 * np.asarray(n_params, dtype=float) * np.asarray(tokens, dtype=float)
    return flops


def amdahl_ratio(fraction: ArrayLike, speedup: ArrayLike) -> NDArray[np.float64]:
    """New/old time when a share f of the time runs r times faster: T'/T = 1 - f + f/r.

    5 ms of 100 ms communication at half the bandwidth (r = 0.5) -> 1.05; 50 ms -> 1.5.
    """
    f = np.asarray(fraction, dtype=float)
    ratio: NDArray[np.float64] = 1.0 - f + f / np.asarray(speedup, dtype=float)
    return ratio
