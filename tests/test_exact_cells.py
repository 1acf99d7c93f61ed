"""The exact pipeline terms of a layout simulated (recompute, schedule) cell by cell (issue 39: the analysis after
a nine-accelerator solve). Asked with a cutoff, :meth:`LayoutEvaluator.best` simulates only the cells whose bounded
points may reach it; each cell's values are the bits a simulation of every recompute set and schedule gives (each
recompute set's durations are formed on their own and the pipeline recurrence is elementwise over duration sets),
and the best plan at the cutoff is the one found without it."""
from __future__ import annotations

import numpy as np
import pytest

from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import build_scenario, read_scenario_file
from tpopt.optimizer import space as space_mod
from tpopt.optimizer.enumerate import EXTRAS, LayoutEvaluator
from tpopt.optimizer.result import Request
from tpopt.optimizer.space import Space


@pytest.fixture
def bounds_only(monkeypatch):
    """Tabulate the pipeline terms as closed-form bounds whatever the space's size (exact terms simulated per
    layout, as on large spaces)."""
    monkeypatch.setattr(space_mod, "EXACT_PIPELINE_WORK", -1)


def per_op_space(design_path) -> Space:
    """The design case under the per-operation model, with pipelines, four recompute sets and four schedules."""
    raw = read_scenario_file(design_path)
    raw["hardware"].pop("efficiency", None)
    raw.pop("memory", None)  # the activations modelled (a reserve would stand in for them)
    raw["search"].update({"tp": [1, 2], "pp": [1, 2, 4], "micro_batch": [1, 2], "zero_stage": [1, 3],
                          "recompute": ["none", "full", "mlp", "attn"],
                          "schedule": ["1f1b", "zb-h1", "interleaved", "dualpipe"], "max_cards": 256})
    return Space.from_scenario(build_scenario(raw, load_catalog()))


def same_cells(entry, full, rax, sax) -> int:
    """Assert every cell ``entry`` marks done holds the bits of ``full`` (every cell simulated); the cells compared."""
    compared = 0
    for term, done in entry["done"].items():
        for r, i in done:
            a, b = np.take(entry[term], [i], axis=sax), np.take(full[term], [i], axis=sax)
            if a.shape[rax] > 1:
                a, b = np.take(a, [r], axis=rax), np.take(b, [r], axis=rax)
            assert a.tobytes() == b.tobytes(), (term, r, i)
            compared += 1
    return compared


def test_cells_simulated_alone_are_the_bits_of_every_cell_simulated(bounds_only, design_path):
    sp = per_op_space(design_path)
    assert not sp.exact_pipeline_tables()
    d = sp.domains
    enforced = Request().enforced(space_mod.FAMILIES)
    rax, sax = EXTRAS.index("recompute"), EXTRAS.index("schedule")
    cells = len(d["recompute"]) * len(d["schedule"])
    whole, cut = LayoutEvaluator(sp), LayoutEvaluator(sp)  # every cell simulated; the cells a cutoff reaches
    layouts = [(0, t, 0, p, k, b) for t in range(len(d["tp"])) for p in range(len(d["pp"]))
               for k in range(len(d["dp"])) for b in range(len(d["mb"]))]
    compared = 0
    for h in layouts:
        for objective in ("cost", "time"):
            got = whole.best(h, enforced, objective, top=1)
            if got:  # the same plan, key and choices at a cutoff at its key
                assert cut.best(h, enforced, objective, top=1, cutoff=got[0][0][0]) == got
        full = whole._exact_pipeline(h)
        assert all(len(done) == cells for done in full["done"].values())
        if h in cut.exact_terms:
            compared += same_cells(cut.exact_terms[h], full, rax, sax)
        # two recompute sets of one schedule alone (neither the first), schedule by schedule
        for i in range(len(d["schedule"])):
            alone = LayoutEvaluator(sp)._exact_pipeline(h, [(1, i), (3, i)])
            compared += same_cells(alone, full, rax, sax)
            if d["pp"][h[3]] > 1 and d["schedule"][i] != "1f1b":  # a closed form is simulated for every set
                assert {(1, i), (3, i)} <= alone["exact"] and (2, i) not in alone["exact"]
    assert compared > 1000
