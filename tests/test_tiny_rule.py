"""The tiny-space rule per step-time model (issue 36 item 6): a solver named with ``--solver`` is replaced by the
enumeration only where enumeration is measured faster (flat spaces; benchmarks/tiny_space.py), never on a
per-operation space; the default solver is replaced on both. The optimum is the same either way."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tests.conftest import ROOT
from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import build_scenario, read_scenario_file, with_overrides
from tpopt.cli.main import cli
from tpopt.models import terms as T
from tpopt.optimizer.core import TINY_NOTE, TINY_SPACE
from tpopt.optimizer.plan import plan
from tpopt.optimizer.result import Request
from tpopt.optimizer.space import Space

DESIGN = ROOT / "examples" / "design-case.toml"
WIDER = {"hardware.accelerator": "h100-sxm", "hardware.usable_memory": "76GiB", "search.tp": [1, 2],
         "search.micro_batch": [1, 2], "input.workers": 64}  # H100s read faster than 4 input workers feed


def _raw(per_op: bool) -> dict:
    raw = with_overrides(read_scenario_file(DESIGN), WIDER)
    if per_op:  # no efficiency stated: the per-operation step-time model
        raw["hardware"] = {k: v for k, v in raw["hardware"].items() if k != "efficiency"}
    return raw


@pytest.fixture(scope="module", params=[False, True], ids=["flat", "per-op"])
def case(request):
    sc = build_scenario(_raw(request.param), load_catalog())
    space = Space.from_scenario(sc)
    assert T.per_op_model(sc) is request.param
    assert space.size() <= TINY_SPACE and space.cheap_pipeline()  # a tiny space: the rule's case
    return request.param, sc


@pytest.mark.parametrize("solver", ["cpsat", "highs"])
def test_a_named_solver_is_kept_on_per_operation_spaces_and_replaced_on_flat_ones(case, solver):
    per_op, sc = case
    named = plan(sc, solver, Request(time_limit=120.0, solver_named=True), analyse=False)
    default = plan(sc, solver, Request(time_limit=120.0), analyse=False)
    assert named.status.value == default.status.value == "optimal"
    assert named.best.metrics["cost"] == pytest.approx(default.best.metrics["cost"], rel=1e-9)
    assert default.solver.note == TINY_NOTE  # the default solver: enumerated on both models
    if per_op:
        assert named.solver.name == solver and named.solver.note != TINY_NOTE
    else:
        assert named.solver.note == TINY_NOTE


def test_the_command_line_knows_a_named_solver_from_its_default(tmp_path):
    p = tmp_path / "per-op.toml"
    text = DESIGN.read_text().replace("efficiency = 0.40", "# efficiency: the per-operation model")
    text = text.replace("workers = 4", "workers = 64")
    p.write_text(text)
    base = ["solve", "--scenario", str(p), "--hw", "h100-sxm", "--usable-memory", "76GiB", "--json", "--no-analysis"]
    d_default = json.loads(CliRunner().invoke(cli, base).output)
    r = CliRunner().invoke(cli, base + ["--solver", "cpsat"])
    d_named = json.loads(r.output)
    assert d_default["solver"]["method"] == TINY_NOTE
    assert d_named["solver"]["name"] == "cpsat" and d_named["solver"]["method"] != TINY_NOTE
    assert d_named["metrics"]["cost"] == pytest.approx(d_default["metrics"]["cost"], rel=1e-9)
