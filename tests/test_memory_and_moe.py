"""Activation-memory relations (derivations written here) and MoE capacity (REFERENCE 10.3.4)."""

import pytest

from tpopt.catalogs import load_catalog
from tpopt.models import memory, moe
from tpopt.models.arch import ModelArch

QWEN = load_catalog().model("qwen3-8b")
S, H, F = 8192, 4096, 12288


def per_layer_none(flash=True):
    """bf16 bytes one Qwen3 block keeps per sequence with nothing rebuilt (see memory.saved_tensors):
    norm inputs 2h + q/k-norm inputs (d_q + d_kv) + q, k, v (d_q + 2 d_kv) + attention output d_q + gate and
    up outputs 2f + norm outputs 2h + the product act(gate) x up f, 2 bytes each; the log-sum-exp (4 bytes per
    head) with flash attention, the softmax output (heads x s elements) without it."""
    dq, dkv = 32 * 128, 8 * 128
    per_token = (2 * H + (dq + dkv) + (dq + 2 * dkv) + dq + 2 * F + 2 * H + F) * 2
    per_token += 32 * 4 if flash else 32 * S * 2
    return S * per_token


def test_activations_no_recompute_and_tp_division():
    got = memory.activation_bytes_per_microbatch(QWEN, S, 1, 1, 36, "none")
    assert float(got) == pytest.approx(36 * per_layer_none())
    # sequence parallelism with TP t divides every saved tensor by t (Korthikanti et al. 2022)
    assert float(memory.activation_bytes_per_microbatch(QWEN, S, 1, 4, 36, "none")) == pytest.approx(float(got) / 4)
    # without SP the norm inputs and outputs (4h per token) stay whole on every TP rank
    no_sp = float(memory.activation_bytes_per_microbatch(QWEN, S, 1, 4, 36, "none", sequence_parallel=False))
    assert no_sp == pytest.approx(float(got) / 4 + 36 * S * 4 * H * 2 * (1 - 1 / 4))
    # a micro-batch of b sequences keeps b times as much
    assert float(memory.activation_bytes_per_microbatch(QWEN, S, 2, 1, 36, "none")) == pytest.approx(2 * float(got))


def test_attention_scores_without_flash():
    # without flash attention the softmax probabilities (heads x s^2 per sequence, bf16) are kept too
    got = memory.activation_bytes_per_microbatch(QWEN, S, 1, 1, 1, "none", flash_attention=False)
    assert float(got) == pytest.approx(per_layer_none(flash=False))
    # rebuilding them ("attn") keeps them only as a workspace, once, while a block's backward runs
    many = memory.activation_bytes_per_microbatch(QWEN, S, 1, 1, 36, "attn", flash_attention=False)
    assert float(many) == pytest.approx(36 * (per_layer_none(flash=False) - 32 * S * S * 2))
    ws = memory.recompute_workspace_bytes(QWEN, S, 1, 1, "attn", flash_attention=False)
    assert float(ws) == pytest.approx(32 * S * S * 2)


def test_full_recompute_keeps_layer_inputs_plus_one_layer():
    # full recompute: every block keeps its input (s x h, bf16); one block is rebuilt at a time, and that
    # workspace is counted once per card, not once per micro-batch in flight
    got = memory.activation_bytes_per_microbatch(QWEN, S, 1, 1, 36, "full")
    assert float(got) == pytest.approx(36 * S * H * 2)
    assert float(memory.recompute_workspace_bytes(QWEN, S, 1, 1, "full")) == pytest.approx(per_layer_none())


def test_selective_recompute_saves_its_groups():
    none = float(memory.activation_bytes_per_microbatch(QWEN, S, 1, 1, 36, "none"))
    mlp = float(memory.activation_bytes_per_microbatch(QWEN, S, 1, 1, 36, "mlp"))
    # "mlp" rebuilds the one FFN-wide product act(gate) x up (chapter 10.2.2): 36 blocks stop keeping it,
    # and the workspace is that one tensor
    assert none - mlp == pytest.approx(36 * S * F * 2)
    assert float(memory.recompute_workspace_bytes(QWEN, S, 1, 1, "mlp")) == pytest.approx(S * F * 2)
    # norm + mlp: the workspace is the largest rebuilt tensor (the product), not their sum
    assert float(memory.recompute_workspace_bytes(QWEN, S, 1, 1, "norm+mlp")) == pytest.approx(S * F * 2)
    assert memory.recompute_flops_per_token(QWEN, S, "none") == 0
    full = memory.recompute_flops_per_token(QWEN, S, "full")
    # one extra forward of the blocks: 2 x block linear params + 4 x d_attn x (s + 1)/2 per token per layer
    block_linear = 4096 * 4096 * 2 + 4096 * 1024 * 2 + 3 * 4096 * 12288
    assert float(full) == pytest.approx(36 * (2 * block_linear + 4 * 4096 * (S + 1) / 2))


def test_megatron_gpt_layer_matches_korthikanti():
    # Korthikanti et al. 2022, section 4.1: a GPT layer (LayerNorm, GELU 4h, dropout, no flash attention, 16-bit)
    # keeps s b h (34 + 5 a s / h) bytes; with TP t and no SP: s b h (10 + 24/t + 5 a s / (h t));
    # with SP and the attention core recomputed ("selective"): 34 s b h / t
    h, a, s, b, t = 6144, 64, 2048, 4, 8
    gpt = ModelArch("gpt-22b", layers=48, hidden=h, heads=a, kv_heads=a, head_dim=h // a, ffn=4 * h, vocab=51200,
                    tied_embeddings=True, gated_mlp=False, norm="layernorm", linear_bias=True, activation="gelu",
                    positions="learned", learned_positions=s)
    kw = dict(flash_attention=False, dropout=True)
    sbh = s * b * h
    whole = memory.activation_bytes_per_microbatch(gpt, s, b, 1, 1, "none", **kw)
    assert float(whole) == pytest.approx(sbh * (34 + 5 * a * s / h))
    no_sp = memory.activation_bytes_per_microbatch(gpt, s, b, t, 1, "none", sequence_parallel=False, **kw)
    assert float(no_sp) == pytest.approx(sbh * (10 + 24 / t + 5 * a * s / (h * t)))
    sel = memory.activation_bytes_per_microbatch(gpt, s, b, t, 1, "attn", sequence_parallel=True, **kw)
    assert float(sel) == pytest.approx(34 * sbh / t)
    # Figure 1's 22B bar (48 layers, one micro-batch in flight): 59.25 and 9.56 GiB
    assert float(no_sp) * 48 / 2**30 == pytest.approx(59.25, abs=0.005)
    assert float(sel) * 48 / 2**30 == pytest.approx(9.5625, abs=0.005)


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
