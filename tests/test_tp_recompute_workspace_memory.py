"""The recompute workspace where the column-parallel layers hold their gathered input (memory module).

Under DTensor tensor parallelism (torchtitan: stacks.toml ``tp_input_regather = false``) autograd saves the
gathered (Replicate) norm output that ColwiseParallel feeds wq / wk / wv and w1 / w3. Under full checkpointing
(torchtitan 9dec370 ``_apply_ac_to_transformer_block``: ``ptd_checkpoint_wrapper(module, preserve_rng_state=False)``,
torch's non-reentrant torch.utils.checkpoint) the block's forward is rerun in its backward and autograd saves the
same tensors again; under per-op checkpointing the saved ops (``_save_list``: aten.mm, SDPA, reduce_scatter_tensor)
do not include the all-gathers, so the rerun gathers the norm outputs and keeps them the same way. The rebuilt block
is one block at a time (the workspace, once per card). Derivation, per micro-batch of S tokens, width h, TP t,
sequence parallelism:
- Megatron-Core (regather): each of the two norm outputs is held sharded in the rebuilt block, S h e / t bytes.
- DTensor (kept gathered): S h g each, g = e (BF16, 2 B) or 1 B where the gather moves torchao's e4m3 copy.
So the workspace grows by 2 S h (g - e / t) under full and per-op recompute; nothing changes at t = 1 nor without
recompute (nothing is rebuilt).
"""

from dataclasses import replace

import pytest
from test_tp_gathered_input_memory import scenario  # torchtitan-compile, Llama 3 70B at 8K

from tpopt.catalogs import load_catalog
from tpopt.models import memory
from tpopt.models.terms import memory as TM

LLAMA = load_catalog().model("llama3-70b")
S, H, T = 8192, 8192, 8  # Llama 3 70B width, one 8K sequence, TP 8


def workspace(recompute: str, tp: int = T, mb: int = 1, **kw: object) -> float:
    return float(memory.recompute_workspace_bytes(LLAMA, S, mb, tp, recompute, **kw))


def test_rebuilt_block_holds_its_gathered_inputs():
    # BF16 gathers: 2 x 8192 x 8192 x (2 - 2/8) = 234,881,024 B (224 MiB)
    bf16 = 2 * S * H * (2.0 - 2.0 / T)
    assert bf16 == 234_881_024
    # e4m3 gathers: 2 x 8192 x 8192 x (1 - 2/8) = 100,663,296 B (96 MiB)
    fp8 = 2 * S * H * (1.0 - 2.0 / T)
    assert fp8 == 100_663_296
    for rc in ("full", "op"):
        assert workspace(rc, input_regather=False) - workspace(rc) == pytest.approx(bf16), rc
        got = workspace(rc, input_regather=False, gathered_input_bytes=1.0) - workspace(rc)
        assert got == pytest.approx(fp8), rc
    # torchtitan's Table 4 micro-batch (local batch 16): 16 x 96 MiB = 1.5 GiB more per card under e4m3 gathers
    got16 = workspace("full", mb=16, input_regather=False, gathered_input_bytes=1.0) - workspace("full", mb=16)
    assert got16 == pytest.approx(1.5 * 2**30)


def test_nothing_changes_without_tp_or_without_recompute():
    for kw in ({"input_regather": False}, {"input_regather": False, "gathered_input_bytes": 1.0}):
        for rc in ("full", "op"):
            assert workspace(rc, tp=1, **kw) == pytest.approx(workspace(rc, tp=1)), rc
        assert workspace("none", **kw) == 0.0


@pytest.mark.parametrize(("precision", "g"), [("bf16-mixed", 2.0), ("fp8-mixed", 1.0)])
def test_torchtitan_stack_workspace_holds_the_gathered_input(precision: str, g: float):
    """The stack's keys reach the workspace term: torchtitan-compile against the same stack gathering again."""
    sc = scenario(precision)
    assert not sc.stack.tp_input_regather
    megatron_like = replace(sc, stack=replace(sc.stack, tp_input_regather=True))
    for rc in ("full", "op"):
        got = float(TM.recompute_workspace(sc, recompute=rc, tp=T, mb=1))
        ref = float(TM.recompute_workspace(megatron_like, recompute=rc, tp=T, mb=1))
        assert got - ref == pytest.approx(2 * S * H * (g - 2.0 / T)), rc
