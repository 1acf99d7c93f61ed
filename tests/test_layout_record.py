"""Layouts as records (issue 22, item 4): term functions take their decision variables as keywords named
as the solvers name them, the space's tables read their variables from the terms' signatures, and the
evaluator calls the same terms through one :class:`~tpopt.models.layout.Layout` record.

A swapped argument would show here: the tables (built from the signatures) and the evaluator (built from
the record) must agree plan by plan on random layouts of a dense and a MoE space, and the variables of
every table must be the ones the space had before the refactor (so table sizes and axis orders are kept).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import random
from pathlib import Path

import numpy as np
import pytest

from tpopt.catalogs.scenario import load_scenario
from tpopt.models import layout as L
from tpopt.models import terms as T
from tpopt.models.evaluate import evaluate_arrays
from tpopt.optimizer import space as S

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def old_table_variables(moe: bool) -> dict:
    """The variables of each term table as ``Space._specs`` listed them by hand before the refactor."""
    ep, cap = (("ep", "etp"), ("cap",)) if moe else ((), ())
    acts = ("schedule", "recompute", "sp", "tp", "cp", "pp", "dp", "mb") + ep + cap
    compute = ("acc", "recompute", "sp", "schedule", "tp", "cp", "pp", "dp", "mb", "nics") + ep + cap
    host = ("acc", "offload", "zero", "tp", "cp", "pp", "dp") + ep
    return {
        "mem.states": ("zero", "offload", "tp", "cp", "pp", "dp") + ep,
        "mem.copies": ("schedule", "tp", "pp") + ep,
        "mem.activations": acts, "mem.activations.lo": acts, "mem.activations.hi": acts,
        # the schedule and data parallelism joined it with torch pipelining's interleaved gradient release
        # (terms.memory._zero3_grad_share: one chunk's unsharded gradients live when m <= pp)
        "mem.temporary": ("zero", "tp", "cp", "pp", "mb") + ep + cap + ("schedule", "dp"),
        "mem.host": host, "ok.memory.host": host,
        "time.compute": compute, "time.compute.lo": compute, "time.compute.hi": compute,
        "time.exposed_dp": ("acc", "zero", "recompute", "sp", "tp", "cp", "pp", "dp", "mb", "nics") + ep + cap,
        "time.tp_comm": ("acc", "recompute", "tp", "cp", "pp", "dp", "mb"),
        "time.offload": ("acc", "offload", "zero", "recompute", "sp", "tp", "cp", "pp", "dp", "mb") + ep + cap,
        "time.ep_comm": ("acc", "recompute", "schedule", "tp", "cp", "pp", "dp", "mb", "nics") + ep + cap,
        "ok.batch.divisibility": ("dp", "mb"),
        "ok.layout.schedule_shape": ("schedule", "pp", "dp", "mb"),
        "ok.layout.ep_group": ("acc", "tp", "cp", "dp", "ep", "etp"),
        "ok.moe.capacity_drops": ("tp", "cp", "mb", "cap"),
    }


@pytest.fixture(scope="module")
def dense_space():
    sc = load_scenario(EXAMPLES / "design-case.toml")
    return S.Space.from_scenario(sc, restrict={"tp": [1, 2, 4], "pp": [1, 2], "mb": [1, 2]})


@pytest.fixture(scope="module")
def moe_space():
    sc = load_scenario(EXAMPLES / "qwen3-30b-a3b.toml")
    return S.Space.from_scenario(sc, restrict={"tp": [1, 2], "pp": [1, 2], "ep": [1, 2, 8], "mb": [1, 2]})


@pytest.fixture(scope="module")
def per_op_space():
    """The per-operation model (no stated efficiency): memory per stage class (first, middle, last)."""
    sc = load_scenario(EXAMPLES / "qwen3-30b-a3b.toml", {"hardware.efficiency": None})
    return S.Space.from_scenario(sc, restrict={"tp": [1, 2], "pp": [1, 3, 4], "ep": [1, 8], "mb": [1, 2]})


def test_record_fields_are_the_space_variables():
    assert set(L.VARIABLE_NAMES) == set(S.VARS)
    assert set(L.MOE_VARIABLES) == {v for v, _, _ in S.MOE_VARS}


def test_terms_take_layout_variables_as_keywords():
    """No function of the terms package (its modules) takes four or more decision variables positionally
    (the long positional lists in which a swap would go unnoticed)."""
    offenders = {}
    modules = [importlib.import_module(f"{T.__name__}.{m.name}") for m in pkgutil.iter_modules(T.__path__)]
    assert len(modules) >= 2  # the package's modules, each with the functions it defines
    for name, fn in [(n, f) for mod in modules for n, f in inspect.getmembers(mod, inspect.isfunction)
                     if f.__module__ == mod.__name__]:
        positional = [p.name for p in inspect.signature(fn).parameters.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name in L.VARIABLE_NAMES]
        if len(positional) >= 4:
            offenders[name] = positional
    assert offenders == {}


@pytest.mark.parametrize("which", ["dense_space", "moe_space"])
def test_table_variables_derived_from_signatures_match_the_old_lists(which, request):
    space = request.getfixturevalue(which)
    old = old_table_variables(space.sc.model.moe)
    for name, vars_ in old.items():
        assert space.table_vars(name) == vars_, name
    for name in space._specs:
        assert set(space.table_vars(name)) <= set(S.VARS), name
    # the MoE variables with a default enter only a MoE model's term tables
    assert ("ep" in space.table_vars("mem.states")) == space.sc.model.moe
    assert L.term_variables(T.states, moe=False) == ("zero", "offload", "tp", "cp", "pp", "dp")


def test_record_args_follow_the_signature():
    lay = L.Layout(acc="h100-sxm", tp=2, cp=1, pp=4, dp=8, mb=2, zero=1, offload="cpu", ep=4, etp=1, cap=1.25)
    assert lay.args(T.states) == dict(zero=1, offload="cpu", tp=2, cp=1, pp=4, dp=8, ep=4, etp=1)
    assert int(lay.cards) == 64
    assert float(lay.grad_accum(256)) == 16.0


def _random_points(space, n, seed):
    rng = random.Random(seed)
    return [{v: rng.randrange(len(space.domains[v])) for v in S.VARS} for _ in range(n)]


def _at(space, name, idx):
    t = space.tables[name]
    return float(t.values[tuple(idx[v] for v in t.vars)])


@pytest.mark.parametrize("which", ["dense_space", "moe_space", "per_op_space"])
def test_tables_equal_the_record_evaluation_on_random_layouts(which, request):
    """The solvers' tables (each term called with the keywords of its own table's variables) and the
    evaluator (every term called through one Layout record) give the same memory, busy time and rule
    outcomes for random plans."""
    space = request.getfixturevalue(which)
    sc, d = space.sc, space.domains
    for idx in _random_points(space, 12, seed=22):
        v = {k: d[k][i] for k, i in idx.items()}
        r = evaluate_arrays(sc, v["acc"], tp=v["tp"], pp=v["pp"], dp=v["dp"], micro_batch=v["mb"],
                            zero_stage=v["zero"], nics_per_host=v["nics"], save_interval_s=300.0,
                            recompute=v["recompute"], offload=v["offload"], schedule=v["schedule"],
                            save_mode=v["mode"], ep=v["ep"], expert_tp=v["etp"], capacity_factor=v["cap"], cp=v["cp"],
                            sequence_parallel=v["sp"])
        memory = max(sum(_at(space, n, idx) for n in names) for _, names in space.memory_classes())
        busy = sum(_at(space, n, idx) for n in S.BUSY_TERMS)
        assert float(r["memory_per_card"]) == pytest.approx(memory, rel=1e-12), v
        if np.isfinite(busy):
            assert float(r["busy_s"]) == pytest.approx(busy, rel=1e-12), v
        else:
            assert not np.isfinite(float(r["busy_s"])), v
        assert float(r[("c", "memory.host")][0]) == pytest.approx(_at(space, "mem.host", idx), rel=1e-12), v
        for family in ("batch.divisibility", "layout.schedule_shape", "layout.ep_group", "moe.capacity_drops"):
            value, limit = (float(x) for x in r[("c", family)])
            assert (value <= limit) == bool(_at(space, "ok." + family, idx)), (family, v)
