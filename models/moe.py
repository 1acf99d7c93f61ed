"""Mixture-of-experts routing capacity (chapter 10.3.4).

capacity = floor(c x tokens x k / E) rows per expert; dispatches beyond an expert's capacity are
dropped (the token skips the layer through the residual); unused capacity is padded with zeros, which
still costs compute and communication.
"""

from __future__ import annotations

import math

import numpy as np


def expert_capacity(tokens: int, top_k: int, experts: int, capacity_factor: float) -> int:
    """Rows per expert: floor(c x tokens x k / E). 8,192 tokens, k = 8, E = 128: c = 1 -> 512."""
    return math.floor(capacity_factor * tokens * top_k / experts + 1e-9)


def dropped_and_padded(loads, capacity: int) -> tuple[int, int]:
    """(dispatches dropped, rows padded) for per-expert loads at a capacity:
    dropped = sum max(0, load - cap), padded = sum max(0, cap - load)."""
    loads = np.asarray(loads)
    return int(np.maximum(0, loads - capacity).sum()), int(np.maximum(0, capacity - loads).sum())


def drop_and_padding_fractions(loads, capacity: int) -> tuple[float, float]:
    """Dropped share of all dispatches and padded share of all executed rows (E x capacity)."""
    loads = np.asarray(loads)
    dropped, padded = dropped_and_padded(loads, capacity)
    return dropped / loads.sum(), padded / (len(loads) * capacity)
