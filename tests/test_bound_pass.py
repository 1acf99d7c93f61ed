"""Schedules of one bound pass bounded together (issue 39): ZB-H1 and ZB-H2 share their per-stage maximum, prefix
sums and serial timetable, so pipeline.completion_bounds_rows_of forms them once for both, and terms.compute_bounds_of
bounds both schedules' compute term in one pass on the plan grid. Each schedule's pair must be the bits a call of its
own gives (the reference: completion_bounds_rows and compute_bounds, schedule by schedule); schedules of different
passes are refused.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tpopt.catalogs.scenario import load_scenario
from tpopt.errors import InputError
from tpopt.models import pipeline as P
from tpopt.models import terms as T
from tpopt.optimizer.space import bound_mates

ROOT = Path(__file__).resolve().parents[1]


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("columns", [False, True])
@pytest.mark.parametrize("p", [1, 2, 5, 16])
def test_rows_of_a_pass_are_each_schedules_own_bits(p, columns):
    """Uneven random durations per group (some zero dW), micro-batch counts below and above 2p - 1 (where ZB-H2's
    pending dW differs from ZB-H1's), transfers per row, given per row or per distinct set (``columns``)."""
    rng = np.random.default_rng(p)
    rows, sets = 40, 7
    m = rng.integers(1, 4 * p + 3, size=rows)
    t = rng.uniform(0.0, 1e-3, size=rows)
    f, x = rng.uniform(1e-3, 1e-2, size=(2, p, sets))
    w = rng.uniform(0.0, 1e-2, size=(p, sets)) * (rng.random((p, sets)) < 0.7)
    cols = rng.integers(0, sets, size=rows)
    args = (f, x, w) if columns else (f[:, cols], x[:, cols], w[:, cols])
    kw = {"columns": cols} if columns else {}
    for group in (("zb-h1", "zb-h2"), ("zb-h2", "zb-h1"), ("fill-drain", "1f1b"), ("dualpipe", "dualpipe-deepseek")):
        if "dualpipe-deepseek" in group and p % 2:
            continue
        together = P.completion_bounds_rows_of(group, p, m, *args, t, 0.0, **kw)
        for schedule, (lo, hi) in zip(group, together, strict=True):
            want_lo, want_hi = P.completion_bounds_rows(schedule, p, m, *args, t, 0.0, **kw)
            assert _same(lo, want_lo) and _same(hi, want_hi), (group, schedule)
    if p > 1:  # the two ZB schedules' lower bounds differ somewhere: each kept its own part
        (lo1, _), (lo2, _) = P.completion_bounds_rows_of(("zb-h1", "zb-h2"), p, m, *args, t, 0.0, **kw)
        assert not np.array_equal(lo1, lo2)


def test_schedules_of_different_passes_are_refused():
    assert P.bound_pass("zb-h1") == P.bound_pass("zb-h2") != P.bound_pass("1f1b")
    with pytest.raises(InputError):
        P.completion_bounds_rows_of(("zb-h1", "1f1b"), 2, np.array([4]), np.ones((2, 1)), 1.0, 1.0, 0.0)


@pytest.mark.parametrize("name,acc,moe", [("gpt3-175b-widest.toml", "a100-80gb-sxm", {}),
                                          ("deepseek-v3.toml", "h800", {"ep": 8.0, "etp": 1.0, "cap": 1.0})])
def test_compute_bounds_of_a_pass_on_a_per_op_grid(tmp_path, name, acc, moe):
    """compute_bounds_of on an example's per-operation inputs (GPT-3: uneven first and last stages; DeepSeek-V3: dense
    and MoE blocks) over a plan grid of TP, stage, DP and micro-batch counts equals compute_bounds schedule by
    schedule, bit for bit, for ZB-H1 with ZB-H2 and for schedules of other passes (bounded one by one)."""
    text = (ROOT / "examples" / name).read_text(encoding="utf-8")
    path = tmp_path / name
    path.write_text("\n".join(line for line in text.splitlines() if not line.startswith("efficiency")) + "\n",
                    encoding="utf-8")
    sc = load_scenario(path)
    assert T.per_op_model(sc)
    g = dict(zip(("tp", "pp", "dp", "mb", "nics"), np.ix_(*(np.asarray(x, dtype=float) for x in
                                                            ([1, 2, 8], [1, 2, 4, 8], [16, 32], [1, 2], [1, 8]))),
                 strict=True))
    for group in (["zb-h1", "zb-h2"], ["zb-h2", "zb-h1"], ["1f1b", "interleaved"]):
        inputs = T.compute_inputs(sc, acc=acc, recompute="full", schedule=group[0], **g, **moe)
        got = T.compute_bounds_of(sc, group, g["pp"], inputs)
        for schedule, (lo, hi) in zip(group, got, strict=True):
            want_lo, want_hi = T.compute_bounds(sc, schedule, g["pp"], inputs)
            assert _same(lo, want_lo) and _same(hi, want_hi), (group, schedule)
            assert np.isfinite(lo).any()


def test_bound_mates_take_one_schedule_of_each_other_form():
    schedules = ("fill-drain", "1f1b", "interleaved", "zb-h1", "zb-h2", "dualpipe", "dualpipe-deepseek")
    forms = [(T.inputs_schedule_key(s), P.group_bound_form(T.schedule_parts(s)[0]), T.schedule_parts(s)[1])
             for s in schedules]
    assert [schedules[i] for i in bound_mates(schedules, forms, 3, {})] == ["zb-h1", "zb-h2"]
    assert [schedules[i] for i in bound_mates(schedules, forms, 3, {forms[4]: []})] == ["zb-h1"]
    assert [schedules[i] for i in bound_mates(schedules, forms, 0, {})] == ["fill-drain"]
    assert [schedules[i] for i in bound_mates(schedules, forms, 5, {})] == ["dualpipe"]
