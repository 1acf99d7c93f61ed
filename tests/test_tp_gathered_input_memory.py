"""Saved activations where the column-parallel layers keep their gathered input (memory.kept_gathered_input).

Under DTensor tensor parallelism (torchtitan: stacks.toml ``tp_input_regather = false``) ColwiseParallel
redistributes the sequence-sharded norm output to Replicate before wq / wk / wv and w1 / w3, and autograd saves that
gathered tensor for the weight gradient. Derivation, per block, per micro-batch of S tokens, width h, TP t:
- Megatron-Core (regather): the two norm outputs are kept sharded, 2 x S h e / t bytes per card.
- DTensor (kept gathered): 2 x S h g per card, g = e (BF16, 2 B) or 1 B where the gather moves torchao's e4m3 copy
  (Float8ColwiseParallel under tensor-wise scaling; Float8Linear's manual_float8_matmul_with_args_in_float8 saves
  that input_fp8).
So the block keeps 2 S h (g - e / t) bytes more; nothing changes at t = 1, nor where the norm outputs are not kept
(full recompute keeps only the block input; torchtitan's per-op checkpointing and the 'norm' group rebuild them).
"""

from dataclasses import replace

import pytest

import tpopt
from tpopt.catalogs import load_catalog
from tpopt.models import memory
from tpopt.models.terms import memory as TM

LLAMA = load_catalog().model("llama3-70b")
S, H, T, L = 8192, 8192, 8, 80  # Llama 3 70B width and depth, one 8K sequence, TP 8


def _extra(g: float, e: float = 2.0, t: int = T) -> float:
    """Bytes one block keeps more per card when its two norm outputs are kept gathered (module docstring)."""
    return 2 * S * H * (g - e / t)


def stored(recompute: str, tp: int = T, **kw: object) -> float:
    return float(memory.activation_bytes_per_microbatch(LLAMA, S, 1, tp, L, recompute, **kw))


def test_gathered_norm_outputs_are_kept_whole_per_tp_rank():
    # 2 x 8192 x 8192 x (2 - 2/8) = 234,881,024 B per block (224 MiB), 80 blocks: 17.5 GiB more per card
    assert _extra(2.0) == 234_881_024
    assert stored("none", input_regather=False) - stored("none") == pytest.approx(L * _extra(2.0))
    # the FP8 gather's e4m3 copy: 2 x 8192 x 8192 x (1 - 2/8) = 100,663,296 B per block
    assert _extra(1.0) == 100_663_296
    fp8 = stored("none", input_regather=False, gathered_input_bytes=1.0)
    assert fp8 - stored("none") == pytest.approx(L * _extra(1.0))


def test_nothing_changes_without_tp_or_where_the_norm_outputs_are_rebuilt():
    for kw in ({"input_regather": False}, {"input_regather": False, "gathered_input_bytes": 1.0}):
        assert stored("none", tp=1, **kw) == pytest.approx(stored("none", tp=1))
        for rc in ("full", "op", "norm", "norm+mlp"):
            assert stored(rc, **kw) == pytest.approx(stored(rc)), rc
    # selective 'mlp' keeps the norm outputs: the gathered copy counts there too
    assert stored("mlp", input_regather=False) - stored("mlp") == pytest.approx(L * _extra(2.0))


def scenario(precision: str):
    return tpopt.scenario({"model": {"name": "llama3-70b"},
                           "task": {"tokens": "1B", "seq_len": S, "global_batch": 64, "precision": precision},
                           "schedule": {"deadline": "365d"},
                           "hardware": {"accelerator": ["h100-sxm"], "stack": "torchtitan-compile"}})


@pytest.mark.parametrize(("precision", "g"), [("bf16-mixed", 2.0), ("fp8-mixed", 1.0)])
def test_torchtitan_stack_keeps_the_gathered_input(precision: str, g: float):
    """The stack's keys reach the memory terms: torchtitan-compile against the same stack gathering again."""
    sc = scenario(precision)
    assert not sc.stack.tp_input_regather and sc.stack.fp8_tp_gather
    megatron_like = replace(sc, stack=replace(sc.stack, tp_input_regather=True))
    got = float(TM._stored_per_layer(sc, recompute="none", tp=T, mb=1))
    ref = float(TM._stored_per_layer(megatron_like, recompute="none", tp=T, mb=1))
    assert got - ref == pytest.approx(_extra(g))
    assert float(TM._stored_per_layer(sc, recompute="full", tp=T, mb=1)) == pytest.approx(
        float(TM._stored_per_layer(megatron_like, recompute="full", tp=T, mb=1)))
