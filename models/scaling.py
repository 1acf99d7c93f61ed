"""Scaling laws: the loss a model of N parameters reaches after D training tokens, pure relations.

The parametric form of Hoffmann et al. 2022 (Training Compute-Optimal Large Language Models) with the
data-constrained effective data of Muennighoff et al. 2023 (Scaling Data-Constrained Language Models).
Fits (the constants and the range they were fitted on) are catalog data: :mod:`tpopt.catalogs.scaling`."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class ScalingLaw:
    """One published (or user) fit of L(N, D) = E + A / N^alpha + B / D^beta, in nats per token, with the
    range of parameters and tokens it was fitted on."""

    name: str
    E: float
    A: float
    B: float
    alpha: float
    beta: float
    min_params: float
    max_params: float
    min_tokens: float
    max_tokens: float
    source: str = ""


def loss(law: ScalingLaw, params: float, tokens: float) -> float:
    """L(N, D) = E + A / N^alpha + B / D^beta (Hoffmann et al. 2022, eq. 2): decreasing in N and in D."""
    return float(law.E + law.A / params ** law.alpha + law.B / tokens ** law.beta)


def effective_tokens(tokens: float, unique_tokens: float | None, repeat_decay: float) -> float:
    """D' = U + U R* (1 - exp(-R / R*)) with R = D / U - 1 repetitions (Muennighoff et al. 2023, eq. 5);
    D itself when D <= U or no unique-data limit is given. Increasing in D (dD'/dD = exp(-R / R*) > 0)."""
    if unique_tokens is None or tokens <= unique_tokens:
        return tokens
    repeats = tokens / unique_tokens - 1.0
    return unique_tokens + unique_tokens * repeat_decay * (1.0 - math.exp(-repeats / repeat_decay))


def tokens_for_loss(law: ScalingLaw, params: float, target: float) -> float | None:
    """The fresh tokens D at which L(N, D) = target: D = (B / (target - E - A / N^alpha))^(1 / beta);
    None when N alone cannot reach the target (target <= E + A / N^alpha)."""
    room = target - law.E - law.A / params ** law.alpha
    if room <= 0:
        return None
    return float((law.B / room) ** (1.0 / law.beta))


def repeated_tokens_for(effective: float, unique_tokens: float | None, repeat_decay: float) -> float | None:
    """The tokens D (repeats of U unique tokens) whose effective data is ``effective``: the inverse of
    :func:`effective_tokens`, R = -R* ln(1 - (D' / U - 1) / R*); None beyond the limit U (1 + R*) that
    repetition alone never reaches."""
    if unique_tokens is None or effective <= unique_tokens:
        return effective
    left = 1.0 - (effective / unique_tokens - 1.0) / repeat_decay
    if left <= 0:
        return None
    return unique_tokens * (1.0 - repeat_decay * math.log(left))


def extrapolated(law: ScalingLaw, params: float, tokens: float) -> list[str]:
    """Which of N and D lie outside the fit's range (empty: inside, an interpolation)."""
    out = []
    if not law.min_params <= params <= law.max_params:
        out.append(f"N = {params:.3g} outside the fit's {law.min_params:.3g}-{law.max_params:.3g} parameters")
    if not law.min_tokens <= tokens <= law.max_tokens:
        out.append(f"D = {tokens:.3g} outside the fit's {law.min_tokens:.3g}-{law.max_tokens:.3g} tokens")
    return out


def serving_flops(params: float, inference_tokens: float) -> float:
    """FLOPs to serve ``inference_tokens`` tokens with a model of N parameters: 2 N per token (the forward
    pass; Sardana et al. 2024, Beyond Chinchilla-Optimal, eq. 2's inference term)."""
    return 2.0 * params * inference_tokens


def usd_per_pflop(price_card_hour: float, peak_flops: float, mfu: float) -> float:
    """The serving price in USD per 1e15 FLOP of a card at ``price_card_hour`` USD delivering ``mfu`` of its
    ``peak_flops`` FLOP/s: price / (peak x MFU x 3600 s) x 1e15."""
    return price_card_hour / (peak_flops * mfu * 3600.0) * 1e15


def serving_cost(params: float, inference_tokens: float, price_per_pflop: float) -> float:
    """USD to serve the inference tokens: 2 N T FLOPs x the price per 1e15 FLOP / 1e15."""
    return serving_flops(params, inference_tokens) * price_per_pflop / 1e15
