"""op_times of a few TP widths and micro-batches taken from a kept call over more of them (layer_times._sub_grid):
the same shapes, dtypes and bits as computing them alone, served without computing the kernels again; a call
whose other arguments differ from every kept call's is computed."""

from __future__ import annotations

import numpy as np
import pytest

import tpopt
from tpopt.models.terms import layer_times as L


def scenario(model: str, acc: str):
    """A per-operation scenario (no ``hardware.efficiency``) of ``model`` on ``acc``."""
    return tpopt.scenario({"model": {"name": model},
                           "task": {"tokens": "100B", "seq_len": 4096, "global_batch": 256, "precision": "bf16-mixed"},
                           "schedule": {"deadline": "365d"}, "hardware": {"accelerator": [acc]},
                           "search": {"max_cards": 4096}})


def grid(n: int, axis: int, values: list[float]) -> np.ndarray:
    """``values`` along ``axis`` of an ``n``-axis array (every other axis of one entry)."""
    shape = [1] * n
    shape[axis] = len(values)
    return np.asarray(values, dtype=float).reshape(shape)


def same(a: L.OpTimes, b: L.OpTimes) -> None:
    """``a`` and ``b`` equal term by term: shape, dtype and bytes."""
    for x_t, y_t in zip(a, b, strict=True):
        for x, y in zip(x_t, y_t, strict=True):
            x, y = np.asarray(x), np.asarray(y)
            assert (x.shape, x.dtype.str) == (y.shape, y.dtype.str)
            assert x.tobytes() == y.tobytes()


@pytest.mark.parametrize(("model", "acc"), [("gpt3-2.7b", "h100-sxm"), ("qwen3-30b-a3b", "mi300x"),
                                             ("deepseek-v2-lite", "gaudi3")])
@pytest.mark.parametrize("recompute", ["none", "full"])
def test_subset_of_widths_is_the_same_as_computing_it(model, acc, recompute, monkeypatch):
    sc = scenario(model, acc)
    L._OP_MEMO.clear()
    L._OP_GRIDS.clear()
    n = 6  # the compute term's layout grid: (tp, cp, pp, dp, mb, nics) after a leading axis of expert sets
    kw = dict(acc=acc, recompute=recompute, cp=grid(n + 1, 2, [1.0, 2.0]), mb=grid(n + 1, 5, [1.0, 2.0, 4.0]),
              ep=grid(n + 1, 0, [1.0, 2.0]), cap=grid(n + 1, 0, [1.0, 1.25]), etp=grid(n + 1, 0, [1.0, 1.0]),
              nics=grid(n + 1, 6, [1.0, 8.0]))
    whole = L.op_times(sc, tp=grid(n + 1, 1, [1.0, 2.0, 4.0, 8.0]), **kw)
    calls = []
    direct = L._op_times
    monkeypatch.setattr(L, "_op_times", lambda *a, **k: calls.append(k) or direct(*a, **k))
    for widths in ([2.0, 8.0], [4.0], [8.0, 1.0], [1.0, 2.0, 4.0, 8.0]):
        tp = grid(n + 1, 1, widths)
        got = L.op_times(sc, tp=tp, **kw)
        same(got, direct(sc, tp=tp, **kw))
        if widths == [1.0, 2.0, 4.0, 8.0]:
            same(got, whole)
    for tp, mb in ((4.0, 2.0), (1.0, 4.0), (8.0, 1.0)):  # one layout's: every array of one entry
        one = dict(kw, mb=grid(n + 1, 0, [mb]))
        got = L.op_times(sc, tp=grid(n + 1, 0, [tp]), **one)
        same(got, direct(sc, tp=grid(n + 1, 0, [tp]), **one))
    two = dict(kw, mb=grid(n + 1, 5, [4.0, 1.0]))
    got = L.op_times(sc, tp=grid(n + 1, 1, [8.0, 2.0]), **two)
    same(got, direct(sc, tp=grid(n + 1, 1, [8.0, 2.0]), **two))
    assert calls == []  # every subset from the kept call: no kernels computed again
    other = L.op_times(sc, tp=grid(n + 1, 1, [2.0, 16.0]), **kw)  # a width the kept call lacks: computed
    assert len(calls) == 1
    same(other, direct(sc, tp=grid(n + 1, 1, [2.0, 16.0]), **kw))


def test_a_call_with_other_arguments_is_not_served():
    sc = scenario("gpt3-2.7b", "h100-sxm")
    L._OP_MEMO.clear()
    L._OP_GRIDS.clear()
    L.op_times(sc, acc="h100-sxm", recompute="none", tp=np.asarray([1.0, 2.0, 4.0]), mb=1.0)
    for kw in (dict(recompute="full", mb=1.0), dict(recompute="none", mb=2.0)):
        got = L.op_times(sc, acc="h100-sxm", tp=np.asarray([2.0]), **kw)
        same(got, L._op_times(sc, acc="h100-sxm", tp=np.asarray([2.0]), **kw))


def test_context_parallelism_is_never_taken(monkeypatch):
    """A cp of 1 taken from a call over cp 1 and 2 would keep the exchange's zeros (and its kernels), which a call
    at cp 1 alone never forms: such a call is computed."""
    sc = scenario("gpt3-2.7b", "h100-sxm")
    L._OP_MEMO.clear()
    L._OP_GRIDS.clear()
    kw = dict(acc="h100-sxm", recompute="none", tp=grid(3, 0, [1.0, 2.0]), mb=grid(3, 2, [1.0, 2.0]),
              nics=grid(3, 0, [8.0]))
    L.op_times(sc, cp=grid(3, 1, [1.0, 2.0]), **kw)
    calls = []
    direct = L._op_times
    monkeypatch.setattr(L, "_op_times", lambda *a, **k: calls.append(k) or direct(*a, **k))
    got = L.op_times(sc, cp=grid(3, 1, [1.0]), **kw)
    assert len(calls) == 1
    same(got, direct(sc, cp=grid(3, 1, [1.0]), **kw))


def test_rows_are_taken_only_together():
    """A kept call over rows (TP and micro-batch along one axis, one plan a row): asking for its TP widths with
    one micro-batch is another grid (every width at that micro-batch), not the kept call's row: computed."""
    sc = scenario("gpt3-2.7b", "h100-sxm")
    L._OP_MEMO.clear()
    L._OP_GRIDS.clear()
    rows = dict(acc="h100-sxm", recompute="none", tp=np.asarray([1.0, 2.0, 4.0]), mb=np.asarray([1.0, 2.0, 4.0]))
    L.op_times(sc, **rows)
    for tp, mb in (([1.0, 2.0, 4.0], [2.0]), ([4.0, 1.0], [4.0, 1.0]), ([2.0], [2.0])):
        kw = dict(rows, tp=np.asarray(tp), mb=np.asarray(mb))
        same(L.op_times(sc, **kw), L._op_times(sc, **kw))
