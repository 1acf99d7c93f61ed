"""Uneven pipeline stages (issue 35): Megatron-Core runs Llama 3.1 405B (126 layers) on PP 16 x VP 8 by
counting the input embedding and the loss as one layer each of the first and the last virtual chunk
(``account_for_embedding_in_pipeline_split`` / ``account_for_loss_in_pipeline_split``, the Megatron-Bridge
405B recipes): 126 + 2 = 128 = 16 x 8 chunks of one layer. And no infinity reaches JSON."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tpopt.cli.common import dump_json
from tpopt.cli.main import cli
from tpopt.models import pipeline
from tpopt.models.terms.shapes import chunk_layers

SCENARIO = """
[scenario]
name = "llama31-405b-pp16-vp8"
[model]
name = "llama3-405b"
[task]
tokens = "100B"
seq_len = 8192
global_batch = 1536
precision = "bf16-mixed"
[schedule]
deadline = "300d"
reserved = "0d"
[hardware]
accelerator = "h100-sxm"
[search]
max_cards = 16384
"""


def _strict(text: str) -> dict:
    """JSON as the standard has it: Python's parser accepts Infinity and NaN, RFC 8259 does not."""
    def refuse(token: str) -> None:
        raise AssertionError(f"non-standard JSON token {token}")
    return json.loads(text, parse_constant=refuse)


def test_126_layers_fill_16_x_8_chunks():
    # automatic split: 126 = 16 x 7 + 14, the 14 extra layers on the middle stages -> 7, 8 x 14, 7;
    # with the embedding and the loss counted as a layer, every chunk holds one: 128 chunks
    split = [7] + [8] * 14 + [7]
    chunks = chunk_layers(split, 8)
    assert chunks is not None and len(chunks) == 128
    assert chunks[0] == 0 and chunks[-1] == 0  # the embedding's chunk (stage 0, chunk 0), the loss's
    assert chunks[1:-1] == [1] * 126
    assert sum(chunks) == 126
    # a middle stage with fewer layers than chunks still cannot run, nor a first stage two short
    assert chunk_layers([8, 7, 8, 8], 8) is None
    assert chunk_layers([6, 8, 8, 8], 8) is None


def test_uneven_chunks_in_the_simulator():
    # stage 0 holds 7 one-layer chunks and the empty embedding chunk; the last stage 7 and the loss chunk.
    # Each chunk of one layer takes 1 ms forward and 2 ms backward (stage totals 7 or 8 ms, 14 or 16 ms).
    # Removing two chunks' work from a balanced 8-layer-per-stage pipeline can only shorten it.
    p, m, v = 4, 8, 8
    split = [7, 8, 8, 7]
    chunks = chunk_layers(split, v)
    fwd = [1e-3 * n for n in split]
    bwd = [2e-3 * n for n in split]
    uneven = pipeline.simulate("interleaved", p, m, fwd, bwd, v=v, chunk_layers=chunks).completion
    balanced = pipeline.simulate("interleaved", p, m, 8e-3, 16e-3, v=v).completion
    assert 0 < uneven < balanced
    # and it is no faster than the same pipeline with 7 layers on every stage (less work everywhere)
    seven = pipeline.simulate("interleaved", p, m, 7e-3, 14e-3, v=v).completion
    assert uneven >= seven - 1e-12


def _evaluate(tmp_path, *extra: str):
    path = tmp_path / "s.toml"
    path.write_text(SCENARIO, encoding="utf-8")
    return CliRunner().invoke(cli, ["evaluate", "--scenario", str(path), "--cards", "2048", "--tp", "8", "--pp", "16",
                                    "--zero", "1", "--micro-batch", "1", "--recompute", "full", "--json", *extra],
                              catch_exceptions=False)


def test_405b_pp16_vp8_evaluates(tmp_path):
    res = _evaluate(tmp_path, "--virtual-stages", "8")
    d = _strict(res.stdout)
    assert "non_finite" not in d
    assert d["plan"]["stage_layers"] == [7] + [8] * 14 + [7]
    shape = [c for c in d["constraints"] if c["name"] == "layout.schedule_shape"][0]
    assert shape["slack"] >= 0
    assert d["metrics"]["step_s"] > 0


def test_unrunnable_shape_writes_null_with_a_note(tmp_path):
    # VP 9: a middle stage of 8 layers cannot fill 9 chunks, the plan's times are infinite
    res = _evaluate(tmp_path, "--virtual-stages", "9")
    assert res.exit_code == 3  # a violated constraint, reported all the same
    d = _strict(res.stdout)
    assert d["metrics"]["step_s"] is None
    assert "metrics.step_s: inf" in d["non_finite"]


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_dump_json_never_writes_non_finite(value):
    text = dump_json({"a": [1.0, {"b": value}], "c": (value,)})
    d = _strict(text)
    assert d["a"][1]["b"] is None and d["c"] == [None]
    assert d["non_finite"] == [f"a[1].b: {value}", f"c[0]: {value}"]
    assert _strict(dump_json([value])) == [None]  # a list has no place for the note: null alone


@pytest.mark.parametrize("m", [16, 96])
def test_closed_form_bounds_hold_with_the_empty_chunks(m):
    # the solver's closed-form bounds bracket the simulated completion of the 126-layer PP 16 x VP 8 pipeline
    split = [7] + [8] * 14 + [7]
    chunks = chunk_layers(split, 8)
    fwd = [1e-3 * n for n in split]
    bwd = [2e-3 * n for n in split]
    exact = float(pipeline.completion_time("interleaved", 16, m, fwd, bwd, 0.0, 1e-4, 0.0, v=8, chunk_layers=chunks,
                                           per_group=True))
    lo, hi = pipeline.completion_bounds("interleaved", 16, m, fwd, bwd, 0.0, 1e-4, 0.0, v=8, chunk_layers=chunks,
                                        per_group=True)
    assert float(lo) <= exact <= float(hi)
