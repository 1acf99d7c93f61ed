"""Critical batch size and weak vs strong scaling (chapter 10.1.1).

Empirical steps/examples trade-off (McCandlish et al. 2018; Kaplan et al. 2020):
    (S / S_min - 1)(E / E_min - 1) = 1,   B_crit = E_min / S_min ~ B_noise,
so at batch B (tokens per step): S = S_min (1 + B_noise / B) and E = E_min (1 + B / B_noise).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray


def min_steps(steps: ArrayLike, batch_tokens: ArrayLike, b_noise: float) -> NDArray[np.float64]:
    """S_min from a reference run that reaches the target in ``steps`` at ``batch_tokens``:
    S_min = S / (1 + B_noise / B). 31,790 steps of 3,145,728 tokens, B_noise = 2M -> 19,434."""
    return np.asarray(steps, dtype=float) / (1.0 + b_noise / np.asarray(batch_tokens, dtype=float))


def min_examples(s_min: ArrayLike, b_noise: float) -> NDArray[np.float64]:
    """E_min = B_noise x S_min (tokens): 38.9B for the reference run."""
    return b_noise * np.asarray(s_min, dtype=float)


def steps_at_batch(s_min: ArrayLike, b_noise: float, batch_tokens: ArrayLike) -> NDArray[np.float64]:
    """Steps to the same loss at batch B: S = S_min (1 + B_noise / B)."""
    return np.asarray(s_min, dtype=float) * (1.0 + b_noise / np.asarray(batch_tokens, dtype=float))


def weak_scaling_limit(batch_tokens: ArrayLike, b_noise: float) -> NDArray[np.float64]:
    """Largest speed-up from growing the batch without bound: S / S_min = 1 + B_noise / B
    (1.64x for B_noise = 2M at 3.1M tokens per step; 7.36x for 20M)."""
    return 1.0 + b_noise / np.asarray(batch_tokens, dtype=float)


def weak_scaling_days(s_min: ArrayLike, b_noise: float, batch_tokens: ArrayLike, step_s: float) -> NDArray[np.float64]:
    """Weak scaling: the batch grows with the cards, the step time stays; days = S(B) x t_step."""
    return steps_at_batch(s_min, b_noise, batch_tokens) * step_s / 86400.0


def strong_scaling_days(steps: ArrayLike, compute_s_ref: ArrayLike, cards_ref: float, cards: ArrayLike,
                        fixed_s: float) -> NDArray[np.float64]:
    """Strong scaling: fixed batch, compute divides by the cards, a fixed wait stays per step:
    days = S x (t_compute x p_ref / p + t_fixed) / 86400."""
    step = np.asarray(compute_s_ref, dtype=float) * cards_ref / np.asarray(cards, dtype=float) + fixed_s
    days: NDArray[np.float64] = np.asarray(steps, dtype=float) * step / 86400.0
    return days


# ---------------------------------------------------------------------------------------------
# the batch as a plan choice: tokens (and steps) needed to reach the same loss at batch B


def min_tokens(ref_tokens: ArrayLike, ref_batch_tokens: ArrayLike, b_noise: float) -> NDArray[np.float64]:
    """E_min from a reference run that reaches the target with ``ref_tokens`` at ``ref_batch_tokens``
    per step: E = E_min (1 + B / B_noise) -> E_min = E / (1 + B / B_noise).
    100B tokens at 3,145,728 tokens per step, B_noise = 2M -> 38.9B."""
    return np.asarray(ref_tokens, dtype=float) / (1.0 + np.asarray(ref_batch_tokens, dtype=float) / b_noise)


def tokens_at_batch(ref_tokens: ArrayLike, ref_batch_tokens: ArrayLike, b_noise: float | None,
                    batch_tokens: ArrayLike) -> NDArray[np.float64]:
    """Tokens needed at batch B for the loss the reference run reaches:
    E(B) = E_min (1 + B / B_noise) (McCandlish et al., "An Empirical Model of Large-Batch Training").
    ``b_noise`` None (no critical batch known): the tokens do not depend on the batch."""
    if b_noise is None:
        return np.broadcast_to(np.asarray(ref_tokens, dtype=float), np.shape(batch_tokens)) * 1.0
    e_min = min_tokens(ref_tokens, ref_batch_tokens, b_noise)
    return e_min * (1.0 + np.asarray(batch_tokens, dtype=float) / b_noise)


def noise_scale_fit(compute_flops: ArrayLike) -> NDArray[np.float64]:
    """B_noise (tokens) from a scaling fit when the scenario gives none: the optimal batch of
    "DeepSeek LLM: Scaling Open-Source Language Models with Longtermism" (Bi et al. 2024),
    B_opt = 0.2920 x C^0.3271 tokens for a compute budget of C FLOPs, taken as the critical batch
    (the batch past which more tokens per step stop buying steps). 5.27e21 FLOPs -> 3.7M tokens."""
    return 0.2920 * np.asarray(compute_flops, dtype=float) ** 0.3271


def ramp_steps(start: float, increment: float, final: float, ramp_sequences: float) -> tuple[int, float]:
    """Optimizer steps and sequences consumed during a linear batch ramp-up (GPT-3 style).

    Megatron-LM's rule (``--rampup-batch-size start increment samples``): the batch starts at
    ``start`` sequences and grows by ``increment`` each time another ramp_sequences / n_inc
    sequences have been consumed, n_inc = (final - start) / increment, until it reaches ``final``.
    A step uses the batch set by the sequences consumed before it. Returns (steps, sequences) of
    the steps taken below the final batch. Start 16, increment 16, final 64 over 6,000 sequences:
    3 increments of 2,000 sequences -> 125 + 63 + 42 = 230 steps over 6,032 sequences.
    """
    start, increment, final = int(start), int(increment), int(final)
    if start >= final:
        return 0, 0.0
    n_inc = (final - start) // increment
    per_inc = float(ramp_sequences) / n_inc
    steps, consumed = 0, 0.0
    while consumed <= ramp_sequences:
        k = int(consumed // per_inc) if per_inc > 0 else n_inc
        b = start + k * increment
        if b >= final:
            break
        n = max(1, int(np.ceil(((k + 1) * per_inc - consumed) / b - 1e-12)))
        steps += n
        consumed += n * b
    return steps, consumed


def iterations_with_ramp(tokens: float, batch: float, seq_len: float,
                         ramp: tuple[float, float, float] | None = None) -> float:
    """Optimizer steps for ``tokens`` at ``batch`` sequences of ``seq_len`` tokens: ceil(D / b), or
    with a ramp (start, increment, ramp tokens) the ramp's steps plus ceil((D - ramp tokens) / b)."""
    per_step = float(batch) * seq_len
    if ramp is None:
        return float(np.ceil(float(tokens) / per_step))
    start, increment, ramp_tokens = ramp
    steps, seqs = ramp_steps(start, increment, batch, min(ramp_tokens, tokens) / seq_len)
    rest = max(0.0, float(tokens) - seqs * seq_len)
    return float(steps + np.ceil(rest / per_step))
