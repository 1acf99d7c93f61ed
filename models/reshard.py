"""Restoring a checkpoint into another tensor-parallel layout: which rows each new shard reads, and the bytes.

A weight matrix of ``rows x cols`` split along its rows over ``tp`` cards gives card r the global rows
[r rows / tp, (r + 1) rows / tp). Restoring into ``tp_new`` cards, new card r reads every old shard that
overlaps its new row range -- the global coordinates (a checkpoint that stores each tensor's global shape,
offset and length, as ByteCheckpoint does) link the two layouts. Master weights and the two Adam moments
are split along the same rows, each twice the BF16 weight's bytes, so one matrix's whole state is
weight x (1 + 2 + 2 + 2).

Golden (the training-systems chapter, 10.4.2): the gate projection [12288, 4096] in BF16 is 96 MiB; TP4
shards of 3,072 rows, 24 MiB; TP8 shards of 1,536 rows, 12 MiB; new rank r reads old shard floor(r / 2),
the first half for even r and the second for odd r; the matrix's checkpoint state 96 x 7 = 672 MiB.
"""

from __future__ import annotations

from dataclasses import dataclass

from tpopt.errors import InputError

STATE_MULTIPLE = 1 + 2 + 2 + 2
"""Checkpoint state per byte of BF16 weight: the weight, FP32 master (2x), Adam first and second moments
(2x each)."""


@dataclass(frozen=True)
class Read:
    """One range a new shard reads: from old shard ``old``, global rows [start, stop)."""

    new: int
    old: int
    start: int
    stop: int


def shard_rows(rows: int, tp: int, rank: int) -> tuple[int, int]:
    """Global row range [start, stop) of ``rank``'s shard of a matrix of ``rows`` rows split over tp."""
    if tp < 1 or rows % tp:
        raise InputError(f"tp {tp} must divide the {rows} rows")
    if not 0 <= rank < tp:
        raise InputError(f"rank {rank} outside 0..{tp - 1}")
    size = rows // tp
    return rank * size, (rank + 1) * size


def read_plan(rows: int, tp_old: int, tp_new: int) -> list[Read]:
    """Every range each new shard reads from the old shards (new rank order, then old rank order)."""
    out: list[Read] = []
    for r in range(tp_new):
        a, b = shard_rows(rows, tp_new, r)
        for o in range(tp_old):
            c, d = shard_rows(rows, tp_old, o)
            lo, hi = max(a, c), min(b, d)
            if lo < hi:
                out.append(Read(r, o, lo, hi))
    return out


def shard_bytes(rows: int, cols: int, tp: int, bytes_per_value: float = 2.0) -> float:
    """Bytes of one shard of a row-split matrix: rows / tp x cols x bytes per value."""
    start, stop = shard_rows(rows, tp, 0)
    return (stop - start) * cols * bytes_per_value


def state_bytes(weight_bytes: float) -> float:
    """A matrix's (or shard's) checkpoint state from its BF16 weight bytes: weight x 7."""
    return weight_bytes * STATE_MULTIPLE


def read_bytes_per_card(rows: int, cols: int, tp_old: int, tp_new: int, bytes_per_value: float = 2.0) -> float:
    """Checkpoint state bytes the busiest new card reads: its ranges x cols x bytes x 7 (= its new shard's
    state; range reads stage nothing beyond it)."""
    per: dict[int, int] = {}
    for rd in read_plan(rows, tp_old, tp_new):
        per[rd.new] = per.get(rd.new, 0) + rd.stop - rd.start
    return state_bytes(max(per.values()) * cols * bytes_per_value)


__all__ = ["STATE_MULTIPLE", "Read", "shard_rows", "read_plan", "shard_bytes", "state_bytes", "read_bytes_per_card"]
