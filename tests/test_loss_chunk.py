"""The LM head and the loss run in the last virtual chunk of an interleaved pipeline (Megatron-Core's model
chunks; with account_for_loss_in_pipeline_split that chunk holds one transformer layer fewer), so the pipeline
model gives that chunk their time instead of spreading it over the last stage's chunks by layer count
(shapes.chunk_weights, shapes.loss_chunk_layers; stage_compute.pipeline_compute's ``loss_layers``).

Expected values are derived here: the head's cost in layers from the model's shape, and the completion of a
pipeline whose stages all take the same time from the closed form of interleaved 1F1B with equal chunks,
m x T + (p - 1) x T / v (closed_forms.bubble_interleaved)."""

import pytest

from tpopt.catalogs import load_catalog
from tpopt.models.terms import shapes
from tpopt.models.terms.stage_compute import pipeline_compute

CAT = load_catalog()


def test_head_in_layers_from_the_model_shape():
    """Llama 3.1 405B: V h = 128,256 x 16,384; a block's linear weights q + k + v + o + gated MLP =
    h (h + 2 x 1,024 + h) + 3 h x 53,248 = 3.188e9; 2.101e9 / 3.188e9 = 0.659 of a layer."""
    h, kv, ffn, vocab = 16384, 8 * 128, 53248, 128256
    block = h * (h + 2 * kv + h) + 3 * h * ffn
    assert shapes.loss_chunk_layers(CAT.model("llama3-405b")) == pytest.approx(vocab * h / block, rel=1e-3)
    assert 0.6 < vocab * h / block < 0.7
    assert block == 3_187_671_040 and vocab * h / block == pytest.approx(0.659, abs=5e-4)  # the docstring's figures


def test_weights_put_the_head_on_the_last_chunk_only():
    """126 layers + embedding + loss on PP 16 x VP 4: stages 7, 8 x 14, 7; chunk c of stage s is entry c p + s.
    The last stage's chunks hold 2, 2, 2, 1 layers: weights 16, 16, 16 and 8 + round(8 x 0.659) = 13."""
    split = [7] + [8] * 14 + [7]
    w = shapes.chunk_weights(split, 4, 0.659)
    layers = shapes.chunk_layers(split, 4)
    assert w is not None and layers is not None
    assert [w[c * 16 + 15] for c in range(4)] == [16, 16, 16, 13]
    assert w[:-1] == [8 * n for n in layers[:-1]]
    assert shapes.chunk_weights(split, 4, 0.0) == [8 * n for n in layers]


def test_a_stage_no_busier_than_the_others_adds_no_bubble():
    """p = 4, v = 2, m = 8, stages of 4, 4, 4, 3 layers and a head worth one layer: every stage takes T = 4 layer
    times and, with the head in the last chunk, every chunk 2: the balanced closed form m T + (p - 1) T / v. Spread
    by layer count (the head on no chunk of its own: loss_layers 0), the last stage's two-layer chunk takes 8/3 and
    the step is longer."""
    t_layer, head = 0.01, 0.01
    p, v, m = 4, 2, 8
    zero = 0.0

    def step(loss_layers: float) -> float:
        return float(pipeline_compute(f"interleaved:{v}", p, m, (t_layer, zero, head), (zero, zero, zero),
                                      (zero, zero, zero), 0.0, groups=lambda q: [4, 4, 4, 3],
                                      loss_layers=loss_layers))

    stage = 4 * t_layer
    assert step(1.0) == pytest.approx(m * stage + (p - 1) * stage / v, rel=1e-12)
    assert step(0.0) > step(1.0) * 1.01
