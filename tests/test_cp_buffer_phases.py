"""Context-parallel buffers as torch's ring attention holds them (torch.distributed.tensor.experimental._attention:
_templated_ring_attention and its backward), at the query heads where the stack repeats K, V, and in their own phase
beside the loss's logits.

Golden figures from the live sets read off that source, counted here in blocks B (one card's K, V): forward, the
all-gathered K, V of the cp cards plus the cat copy of its own, (cp + 1) B; backward, the same gather again plus the
FP32 dK, dV accumulator, the copy sent and the one arriving, 3 x 2 B; and from the published torchtitan peaks of
Llama 3.1 8B at CP 1, 4 and 8 (83.9, 84.0, 84.5 GiB: the CP buffers do not add to a peak the loss sets)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import build_scenario
from tpopt.models import context
from tpopt.models import terms as T
from tpopt.models.units import GIB

CAT = load_catalog()


def test_the_backward_set_is_the_peak_and_forward_buffers_do_not_add():
    """Llama 3 8B, CP 8 at 262,144 tokens, KV heads (8 x 128): B = 2 x 32,768 x 1,024 x 2 bytes = 128 MiB; the
    backward holds (8 + 1) B gathered again + 3 x 2 B FP32 = 15 B, the forward 9 B: 15 B, not 9 B + 15 B."""
    a = CAT.model("llama3-8b")
    blk = 2 * 32768 * 1024 * 2
    got = float(context.buffer_bytes(a, 262144, 1, 1, 8, "ring", 2.0, "allgather"))
    assert got == pytest.approx(15 * blk)
    assert got < (9 + 15) * blk


def test_query_head_width_is_four_times_for_llama3_8b():
    """torchtitan repeats K, V to the 32 query heads: B = 512 MiB, 15 B = 7.5 GiB."""
    a = context.ring_kv_arch(CAT.model("llama3-8b"), True)
    got = float(context.buffer_bytes(a, 262144, 1, 1, 8, "ring", 2.0, "allgather"))
    assert got == pytest.approx(15 * 2 * 32768 * 4096 * 2)
    assert got / GIB == pytest.approx(7.5)


def _scenario(seq_len: int, batch: int):
    return build_scenario({"model": {"name": "llama3-8b"},
                           "task": {"tokens": "1B", "seq_len": seq_len, "global_batch": batch,
                                    "precision": "fp8-mixed"},
                           "schedule": {"deadline": "1000d"},
                           "hardware": {"accelerator": "h100-sxm", "stack": "torchtitan-compile"}}, CAT)


def test_logits_and_cp_buffers_are_two_phases():
    """Llama 3 8B at 32,768 tokens a card (CP 8 at 262,144): the eager loss's logits (32,768 x 128,256 x 12 bytes,
    47 GiB) outweigh the 7.5 GiB of CP buffers, so the temporaries equal those of the same tokens at CP 1 (as the
    published peaks, flat within 0.6 GiB from CP 1 to CP 8, show); without logits (a middle pipeline stage) the CP
    buffers count whole."""
    kw = dict(zero=3, tp=1, pp=1, mb=1)
    cp8 = float(T.temporary(_scenario(262144, 1), cp=8, **kw))
    cp1 = float(T.temporary(_scenario(32768, 8), cp=1, **kw))
    assert cp8 == pytest.approx(cp1)
    sc = _scenario(262144, 1)
    staged = dict(zero=3, tp=1, pp=2, mb=1, stage="first")
    with_cp = float(T.temporary(sc, cp=8, **staged))
    plain = replace(sc, stack=replace(sc.stack, kv_repeat=False))
    assert with_cp - float(T.temporary(plain, cp=8, **staged)) == pytest.approx(15 * 2 * 32768 * (4096 - 1024) * 2)
