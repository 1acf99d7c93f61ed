"""A stack whose attention takes K and V repeated to the query heads (stacks.toml ``kv_repeat``: torchtitan's Llama
calls repeat_kv before F.scaled_dot_product_attention) passes d_attn-wide blocks in a context-parallel ring.

Golden ratios from the models' head counts (Llama 3 8B: 32 query heads, 8 KV heads of 128; Llama 3.1 405B: 128
and 8), not from the code under test."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import build_scenario
from tpopt.catalogs.stacks import stack_profile
from tpopt.models import context
from tpopt.models import terms as T

CAT = load_catalog()


def test_ring_arch_widens_kv_to_the_query_heads_only_when_repeated():
    a = CAT.model("llama3-8b")
    assert context.ring_kv_arch(a, True).d_kv == 32 * 128
    assert context.ring_kv_arch(a, False) is a
    blk = 2 * (131072 / 4) * 32 * 128 * 2  # K and V of 32,768 tokens at 32 heads of 128, BF16: 512 MiB
    assert float(context.kv_block_bytes(context.ring_kv_arch(a, True), 131072, 1, 1, 4)) == pytest.approx(blk)
    b = CAT.model("llama3-405b")
    assert context.ring_kv_arch(b, True).d_kv == 16 * b.d_kv  # 128 query heads over 8 KV heads


def test_torchtitan_stacks_repeat_and_the_link_grows_by_the_head_ratio():
    assert stack_profile("torchtitan").kv_repeat and stack_profile("torchtitan-compile").kv_repeat
    assert not stack_profile("megatron-core").kv_repeat
    sc = build_scenario({"model": {"name": "llama3-8b"}, "task": {"tokens": "1B", "seq_len": 131072,
                                                                 "global_batch": 2, "precision": "bf16-mixed"},
                         "schedule": {"deadline": "1000d"},
                         "hardware": {"accelerator": "h100-sxm", "stack": "torchtitan-compile"}}, CAT)
    plain = replace(sc, stack=replace(sc.stack, kv_repeat=False))
    kw = dict(acc="h100-sxm", tp=1, cp=4, pp=1, dp=2, mb=1, nics=8)
    assert float(T.cp_link(sc, **kw)) == pytest.approx(4.0 * float(T.cp_link(plain, **kw)))


def test_the_merge_accumulates_dk_dv_at_the_query_heads():
    """The backward's dK, dV accumulators (read and write 4 + 4 bytes an element) are 32 x 128 wide instead of
    8 x 128 under repeated K, V: 3 steps (CP 4) of 32,768 tokens add 3 x 2 x 32,768 x (4,096 - 1,024) x 8 bytes."""
    from tpopt.models import ops
    a = CAT.model("llama3-8b")
    kw = dict(tp=1, micro_batch=0.25, seq_len=131072, cp_steps=3.0)
    plain = ops.ring_merge_kernels(a, ops.Layout(**kw))
    rep = ops.ring_merge_kernels(a, ops.Layout(**kw, cp_kv_repeat=True))
    assert float(rep[0].bytes) == pytest.approx(float(plain[0].bytes))  # the forward merge: the output only
    assert float(rep[1].bytes) - float(plain[1].bytes) == pytest.approx(3 * 2 * 32768 * (4096 - 1024) * 8)
