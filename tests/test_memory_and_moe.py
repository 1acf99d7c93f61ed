"""Activation-memory relations (derivations written here) and MoE capacity (REFERENCE 10.3.4)."""

import pytest

from tpopt.catalogs import load_catalog
from tpopt.models import memory, moe

QWEN = load_catalog().model("qwen3-8b")
S, H, F = 8192, 4096, 12288


def per_layer_none(flash=True):
    """bf16 bytes one Qwen3 block keeps per sequence with nothing rebuilt (see layer_activation_groups):
    norm inputs 2h + q/k-norm inputs (d_q + d_kv) + q, k, v (d_q + 2 d_kv) + attention output d_q + log-sum-exp
    2 x heads + gate and up outputs 2f + norm outputs 2h + act and product 2f (+ heads x s without flash)."""
    dq, dkv = 32 * 128, 8 * 128
    per_token = 2 * H + (dq + dkv) + (dq + 2 * dkv) + dq + 2 * 32 + 2 * F + 2 * H + 2 * F
    if not flash:
        per_token += 32 * S
    return S * per_token * 2


def test_activations_no_recompute_and_tp_division():
    got = memory.activation_bytes_per_microbatch(QWEN, S, 1, 1, 36, "none")
    assert float(got) == pytest.approx(36 * per_layer_none())
    # sequence parallelism with TP t divides every saved tensor by t (Korthikanti et al. 2022)
    assert float(memory.activation_bytes_per_microbatch(QWEN, S, 1, 4, 36, "none")) == pytest.approx(float(got) / 4)
    # a micro-batch of b sequences keeps b times as much
    assert float(memory.activation_bytes_per_microbatch(QWEN, S, 2, 1, 36, "none")) == pytest.approx(2 * float(got))


def test_attention_scores_without_flash():
    # without flash attention the softmax probabilities (heads x s^2 per sequence, bf16) are kept too
    got = memory.activation_bytes_per_microbatch(QWEN, S, 1, 1, 1, "none", flash_attention=False)
    assert float(got) == pytest.approx(per_layer_none(flash=False))
    rebuilt = memory.activation_bytes_per_microbatch(QWEN, S, 1, 1, 1, "attn", flash_attention=False)
    assert float(got) - float(rebuilt) == pytest.approx(0)  # one layer: its rebuilt workspace is live at the peak
    many = memory.activation_bytes_per_microbatch(QWEN, S, 1, 1, 36, "attn", flash_attention=False)
    assert float(many) == pytest.approx(36 * per_layer_none() + 32 * S * S * 2)


def test_full_recompute_keeps_layer_inputs_plus_one_layer():
    # full recompute: every block keeps its input (s x h, bf16) and one block is rebuilt at a time
    got = memory.activation_bytes_per_microbatch(QWEN, S, 1, 1, 36, "full")
    assert float(got) == pytest.approx(36 * S * H * 2 + per_layer_none())


def test_selective_recompute_saves_its_groups():
    none = float(memory.activation_bytes_per_microbatch(QWEN, S, 1, 1, 36, "none"))
    mlp = float(memory.activation_bytes_per_microbatch(QWEN, S, 1, 1, 36, "mlp"))
    # the act and product tensors (2 f per token) leave 35 blocks; one block's worth stays as workspace
    assert none - mlp == pytest.approx(35 * S * 2 * F * 2)
    assert memory.recompute_flops_per_token(QWEN, S, "none") == 0
    full = memory.recompute_flops_per_token(QWEN, S, "full")
    # one extra forward of the blocks: 2 x block linear params + 4 x d_attn x (s + 1)/2 per token per layer
    block_linear = 4096 * 4096 * 2 + 4096 * 1024 * 2 + 3 * 4096 * 12288
    assert float(full) == pytest.approx(36 * (2 * block_linear + 4 * 4096 * (S + 1) / 2))


def test_moe_toy_capacity():
    # REFERENCE 10.3.4: 128 dispatches on E = 2 experts (loads 96/32), k = 1: c = 1, 1.25, 1.5, 2 ->
    # 64/80/96/128 rows, dropped 32/16/0/0, padded 32/48/64/128
    caps = [moe.expert_capacity(128, 1, 2, c) for c in (1, 1.25, 1.5, 2)]
    assert caps == [64, 80, 96, 128]
    assert [moe.dropped_and_padded([96, 32], c) for c in caps] == [(32, 32), (16, 48), (0, 64), (0, 128)]


def test_moe_qwen3_235b_capacity():
    # REFERENCE 10.3.4: E = 128, k = 8, 8,192 tokens, half the experts 1.5x hot (768 rows), half 0.5x (256):
    # capacity 512/640/768/1,024; dropped 25/12.5/0/0 %; padding 25/30/33/50 %
    loads = [768] * 64 + [256] * 64
    assert sum(loads) == 8192 * 8
    caps = [moe.expert_capacity(8192, 8, 128, c) for c in (1, 1.25, 1.5, 2)]
    assert caps == [512, 640, 768, 1024]
    fr = [moe.drop_and_padding_fractions(loads, c) for c in caps]
    assert [round(d * 100, 1) for d, _ in fr] == [25.0, 12.5, 0.0, 0.0]
    assert [round(p * 100) for _, p in fr] == [25, 30, 33, 50]
