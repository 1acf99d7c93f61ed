"""Critical batch size and weak vs strong scaling (chapter 10.1.1).

Empirical steps/examples trade-off (McCandlish et al. 2018; Kaplan et al. 2020):
    (S / S_min - 1)(E / E_min - 1) = 1,   B_crit = E_min / S_min ~ B_noise,
so at batch B (tokens per step): S = S_min (1 + B_noise / B) and E = E_min (1 + B / B_noise).
"""

from __future__ import annotations

import numpy as np


def min_steps(steps, batch_tokens, b_noise):
    """S_min from a reference run that reaches the target in ``steps`` at ``batch_tokens``:
    S_min = S / (1 + B_noise / B). 31,790 steps of 3,145,728 tokens, B_noise = 2M -> 19,434."""
    return np.asarray(steps, dtype=float) / (1.0 + b_noise / np.asarray(batch_tokens, dtype=float))


def min_examples(s_min, b_noise):
    """E_min = B_noise x S_min (tokens): 38.9B for the reference run."""
    return b_noise * np.asarray(s_min, dtype=float)


def steps_at_batch(s_min, b_noise, batch_tokens):
    """Steps to the same loss at batch B: S = S_min (1 + B_noise / B)."""
    return np.asarray(s_min, dtype=float) * (1.0 + b_noise / np.asarray(batch_tokens, dtype=float))


def weak_scaling_limit(batch_tokens, b_noise):
    """Largest speed-up from growing the batch without bound: S / S_min = 1 + B_noise / B
    (1.64x for B_noise = 2M at 3.1M tokens per step; 7.36x for 20M)."""
    return 1.0 + b_noise / np.asarray(batch_tokens, dtype=float)


def weak_scaling_days(s_min, b_noise, batch_tokens, step_s):
    """Weak scaling: the batch grows with the cards, the step time stays; days = S(B) x t_step."""
    return steps_at_batch(s_min, b_noise, batch_tokens) * step_s / 86400.0


def strong_scaling_days(steps, compute_s_ref, cards_ref, cards, fixed_s):
    """Strong scaling: fixed batch, compute divides by the cards, a fixed wait stays per step:
    days = S x (t_compute x p_ref / p + t_fixed) / 86400."""
    step = np.asarray(compute_s_ref, dtype=float) * cards_ref / np.asarray(cards, dtype=float) + fixed_s
    return np.asarray(steps, dtype=float) * step / 86400.0
