"""The compute inputs' layout part kept across a table's calls (issue 39): ``compute_inputs(..., kept=...)`` forms the
boundary transfer, micro-batches per step and cards once per accelerator and hands them to every recompute policy,
SP setting and schedule on the same layout arrays. Each call's 12 (or 15) arrays must be the bits a call without
``kept`` gives; the reference is the same function called without the dict.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tpopt.catalogs.scenario import load_scenario
from tpopt.models import terms as T

ROOT = Path(__file__).resolve().parents[1]


def _same(a: object, b: object) -> bool:
    x, y = np.asarray(a), np.asarray(b)
    return x.shape == y.shape and x.dtype == y.dtype and x.tobytes() == y.tobytes()


@pytest.mark.parametrize("name,accs,moe", [("gpt3-175b-widest.toml", ("a100-80gb-sxm", "h100-sxm"), {}),
                                           ("deepseek-v3.toml", ("h800",), {"ep": 8.0, "etp": 1.0, "cap": 1.0})])
def test_kept_layout_inputs_are_each_calls_own_bits(tmp_path, name, accs, moe):
    """Per-operation inputs (the example without its flat efficiency, on the accelerators asked) over a grid of
    TP, stage, DP, micro-batch and NIC counts: every (accelerator, recompute, SP, schedule) call sharing one dict
    equals the call without it, and the dict holds one entry per accelerator (the transfer formed once for each)."""
    text = (ROOT / "examples" / name).read_text(encoding="utf-8")
    path = tmp_path / name
    lines = [f"accelerator = {list(accs)!r}".replace("'", '"') if line.startswith("accelerator") else line
             for line in text.splitlines() if not line.startswith("efficiency")]  # every accelerator asked
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    sc = load_scenario(path)
    assert T.per_op_model(sc)
    g = dict(zip(("tp", "pp", "dp", "mb", "nics"), np.ix_(*(np.asarray(x, dtype=float) for x in
                                                            ([1, 2, 8], [1, 2, 4, 8], [16, 32], [1, 2], [1, 8]))),
                 strict=True))
    kept: dict[str, tuple[object, object, object]] = {}
    calls = 0
    for acc in accs:
        for rec in ("none", "full", "mlp"):
            for sp in (False, True):
                for schedule in ("1f1b", "zb-h1"):
                    got = T.compute_inputs(sc, acc=acc, recompute=rec, sp=sp, schedule=schedule, **g, **moe,
                                           kept=kept)
                    want = T.compute_inputs(sc, acc=acc, recompute=rec, sp=sp, schedule=schedule, **g, **moe)
                    assert len(got) == len(want)
                    assert all(_same(a, b) for a, b in zip(got, want, strict=True)), (acc, rec, sp, schedule)
                    calls += 1
    assert calls == 12 * len(accs) and sorted(kept) == sorted(accs)
    # the transfer moves with the layout (a pipeline of one stage sends nothing; more stages do)
    t_x = np.broadcast_to(kept[accs[0]][0], np.broadcast_shapes(*(a.shape for a in g.values())))
    assert np.all(t_x[:, 0] == 0.0) and np.all(t_x[:, 1:] > 0.0)
