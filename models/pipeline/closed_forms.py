"""Closed forms of the pipeline step and its bubble (chapter 10.3.2; balanced stages; zero transfer unless
stated): fill-drain, 1F1B, interleaved, zero-bubble and DualPipe, and the parameter copies a schedule keeps.
"""

from __future__ import annotations

import numpy as np

from tpopt.errors import InputError
from tpopt.models.numeric import FloatArray, Floats
from tpopt.models.pipeline.schedules import _check_schedule

# =============================================================================================
# closed forms (chapter 10.3.2; balanced stages; zero transfer unless stated)


def fill_drain_time(p: int, m: int, tf: Floats, tb: Floats) -> Floats:
    """Fill-drain (GPipe) step time ``T = (m + p - 1)(t_f + t_b)`` [s].

    ``m`` slots of real work plus ``p - 1`` to fill and drain the pipeline; p = 4, m = 8,
    t_f = 10 ms, t_b = 20 ms -> 330 ms (training-systems chapter 10.3).
    """
    return (m + p - 1) * (np.add(tf, tb) if not _scalar(tf, tb) else tf + tb)


def utilisation(p: int, m: int) -> float:
    """Fill-drain time utilisation of a card ``u = m / (m + p - 1)``; p = 4, m = 8 -> 72.7 %."""
    return m / (m + p - 1)


def bubble_ratio_1f1b(p: int, m: int) -> float:
    """Bubble over useful time of fill-drain and 1F1B ``(p - 1) / m``; p = 4: m = 8 -> 37.5 %, m = 16 -> 18.8 %."""
    return (p - 1) / m


def bubble_ratio_interleaved(p: int, m: int, v: int = 2) -> float:
    """Bubble over useful time of interleaved 1F1B ``(1/v)(p - 1)/m`` (Megatron-LM, v chunks per stage)."""
    return (p - 1) / (v * m)


def bubble_1f1b(p: int, tf: Floats, tb: Floats, tw: Floats = 0.0) -> Floats:
    """Per-stage bubble of 1F1B and fill-drain ``(p - 1)(T_F + T_B + T_W)`` [s].

    ``T_B`` is dX and ``T_W`` dW (or the whole backward as ``tb`` and ``tw = 0``);
    p = 4, 10 + 10 + 10 ms -> 90 ms. Exact in this model with zero transfer (for any m; a uniform update adds to
    busy and completion alike).
    """
    return (p - 1) * (tf + tb + tw)


def bubble_interleaved(p: int, tf: Floats, tb: Floats, tw: Floats = 0.0, v: int = 2) -> Floats:
    """Per-stage bubble of interleaved 1F1B ``(1/v)(p - 1)(T_F + T_B + T_W)`` [s] (equal chunks).

    Exact in this model for ``m`` a multiple of ``p`` with zero transfer.
    """
    return (p - 1) * (tf + tb + tw) / v


def bubble_zb_h1(p: int, tf: Floats, tb: Floats, tw: Floats) -> Floats:
    """Per-stage bubble of ZB-H1 ``(p - 1)(T_F + T_B - T_W)`` [s] (zero-bubble paper, table 2).

    dW is postponed into the drain; p = 4, 10 + 10 - 10 ms -> 30 ms. Exact in this model (zero
    transfer, balanced stages) for ``m >= p`` while ``T_W <= T_F`` and ``T_W <= T_B``.
    """
    return (p - 1) * (tf + tb - tw)


def bubble_zb_h2(p: int, tf: Floats, tb: Floats, tw: Floats) -> Floats:
    """Per-stage bubble of ZB-H2 as the zero-bubble paper gives it ``(p - 1)(T_F + T_B - 2 T_W)`` [s].

    p = 4, 10 + 10 - 20 ms -> 0. The paper measures it on staggered steps whose optimizer
    synchronisation is bypassed; a synchronous step cannot end before the last stage has waited
    ``(p - 1) T_F`` for its first input and then done all its work: see
    :func:`bubble_zb_h2_synchronous`.
    """
    return (p - 1) * (tf + tb - 2 * tw)


def bubble_zb_h2_synchronous(p: int, tf: Floats, tb: Floats, tw: Floats) -> Floats:
    """Per-stage bubble of ZB-H2 in one synchronous step ``(p - 1) max(T_F, T_F + T_B - 2 T_W)`` [s].

    The larger of the paper's bound and the fill skew ``(p - 1) T_F``. Exact in this model (zero
    transfer, balanced stages) for ``m >= 2p`` while ``T_W <= T_F`` and ``T_W <= T_B``.
    """
    # plain numbers (what _scalar tests), spelled out so that mypy narrows the three
    if isinstance(tf, (int, float)) and isinstance(tb, (int, float)) and isinstance(tw, (int, float)):
        return (p - 1) * max(tf, tf + tb - 2 * tw)
    bubble: FloatArray = (p - 1) * np.maximum(tf, np.add(tf, tb) - 2 * np.asarray(tw))
    return bubble


def bubble_dualpipe(p: int, f_and_b: Floats, b: Floats, w: Floats) -> Floats:
    """Per-stage bubble of DualPipe, DeepSeek-V3 table 2: ``(PP/2 - 1)(F&B + B - 3W)`` [s].

    ``F&B`` is a forward and a backward executed overlapped, ``B`` the whole backward, ``W`` its dW
    part. Without overlap ``F&B = F + B``: p = 4, 30 + 20 - 30 ms -> 20 ms. This event model does not
    overlap F and B, and neither DualPipe ordering meets the formula in general (it is neither an
    upper nor a lower bound of the simulated idle time).
    """
    return (p // 2 - 1) * (f_and_b + b - 3 * w)


def parameter_copies(schedule: str) -> int:
    """Copies of its parameters a stage holds: 2 for DualPipe (one per direction), else 1."""
    _check_schedule(schedule)
    return 2 if schedule.startswith("dualpipe") else 1


def split_layers(layers: int, chunks: int) -> list[int]:
    """Split ``layers`` into ``chunks`` contiguous chunks, the first ``layers mod chunks`` one layer larger.

    36 layers into 8 chunks -> [5, 5, 5, 5, 4, 4, 4, 4] (interleaved v = 2 on 4 stages, chapter 10.3.2).
    """
    if chunks < 1 or layers < chunks:
        raise InputError(f"cannot split {layers} layers into {chunks} chunks of at least one layer each")
    q, r = divmod(layers, chunks)
    return [q + 1 if i < r else q for i in range(chunks)]


def _scalar(*xs: object) -> bool:
    return all(isinstance(x, (int, float)) for x in xs)
