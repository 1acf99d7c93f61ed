"""What a stack's tensor-parallel collectives move (ops.tp_collectives): torchtitan's Float8 tensor parallelism
gathers FP8 copies (torchao Float8ColwiseParallel / Float8RowwiseParallel / PrepareFloat8ModuleInput: the forward
input cast to e4m3 before its all-gather, the backward output gradient cast to float8 before its all-gather; the
reduce-scatters stay BF16), and DTensor's autograd keeps the gathered input of the column-parallel layers, so
torchtitan's backward gathers no input again (Megatron-Core and Transformer Engine save the sequence-sharded input
and gather it again for the weight gradient: stacks.toml tp_input_regather).

Expected bytes are written out per block from the layer's shape: with sequence parallelism, per micro-batch of
T tokens and width h on t cards, one all-gather or reduce-scatter moves (t - 1) / t x T h x bytes; the block has
2 forward all-gathers, 2 forward reduce-scatters, 2 backward output-gradient all-gathers, 2 backward input-gradient
reduce-scatters and (Megatron) 2 backward input all-gathers again.
"""

from dataclasses import replace

import pytest

import tpopt
from tpopt.models import ops, steptime
from tpopt.models.terms import layer_times as LT

ACC = "h100-sxm"
H, TP, MB, S = 8192, 8, 1, 8192  # Llama 3 70B width, TP 8, one 8K sequence


def scenario(stack: str, precision: str = "fp8-mixed", acc: str = ACC):
    return tpopt.scenario({"model": {"name": "llama3-70b"},
                           "task": {"tokens": "1B", "seq_len": S, "global_batch": 64, "precision": precision},
                           "schedule": {"deadline": "365d"}, "hardware": {"accelerator": [acc], "stack": stack}})


def collectives(sc):
    lay = replace(LT.layout(sc, tp=TP, mb=MB), tp_gather_bytes=LT.tp_gather_bytes(sc, LT.rates(sc, ACC)))
    return ops.tp_collectives(sc.model, lay)


ONE = (TP - 1) / TP * MB * S * H  # elements of one all-gather or reduce-scatter of the block's activation


def test_megatron_core_moves_bf16_and_gathers_the_input_again():
    """Megatron-Core under FP8: every collective in BF16 (2 B); the backward holds 2 reduce-scatters + 2 regathers
    (async, beside the column-parallel gradient GEMMs) and 2 output-gradient gathers (sync)."""
    c = collectives(scenario("megatron-core"))
    assert float(c.fwd) == pytest.approx(4 * 2 * ONE)
    assert float(c.bwd_async) == pytest.approx(4 * 2 * ONE)
    assert float(c.bwd_sync) == pytest.approx(2 * 2 * ONE)


def test_torchtitan_float8_gathers_fp8_and_keeps_the_gathered_input():
    """torchtitan with Float8 (tensor-wise dynamic scaling): forward 2 gathers at 1 B + 2 reduce-scatters at 2 B;
    backward 2 gradient gathers at 1 B, 2 input-gradient reduce-scatters at 2 B, no regather. Per block
    6 + 4 + 2 = 12 B x ONE against Megatron's 8 + 8 + 4 = 20: 0.6 of the bytes."""
    c = collectives(scenario("torchtitan-compile"))
    assert float(c.fwd) == pytest.approx((2 * 1 + 2 * 2) * ONE)
    assert float(c.bwd_async) == pytest.approx(2 * 2 * ONE)
    assert float(c.bwd_sync) == pytest.approx(2 * 1 * ONE)
    assert float(c.async_calls) == 2 and float(c.sync_calls) == 2 and float(c.fwd_calls) == 4
    total = float(c.fwd + c.bwd_async + c.bwd_sync)
    assert total / (20 * ONE) == pytest.approx(0.6)


def test_torchtitan_bf16_moves_bf16_and_keeps_the_gathered_input():
    """In BF16 torchtitan's gathers are BF16; only the regather is gone: 8 + 4 + 4 = 16 B x ONE."""
    c = collectives(scenario("torchtitan-compile", "bf16-mixed"))
    assert float(c.fwd) == pytest.approx(4 * 2 * ONE)
    assert float(c.bwd_async) == pytest.approx(2 * 2 * ONE)
    assert float(c.bwd_sync) == pytest.approx(2 * 2 * ONE)


def test_per_op_checkpointing_reruns_the_gathers_at_their_own_bytes():
    """torchtitan's per-op policy reruns the forward all-gathers, not the saved reduce-scatters: 2 g / (2 g + 2 e)
    of the forward bytes, a half at g = e and a third with FP8 gathers of BF16 activations (g = 1, e = 2)."""
    assert steptime.op_sac_collective_rerun(True) == 0.5
    assert steptime.op_sac_collective_rerun(True, 0.5) == pytest.approx(1 / 3)
    assert steptime.op_sac_collective_rerun(False, 0.5) == 1.0


def test_fp8_gathers_need_tensorwise_dynamic_scaling():
    """torchao's Float8 TP styles require dynamic scaling (_float8_linear_supports_float8_allgather); torchtitan
    uses them under tensor-wise scaling only: a stack on delayed scaling keeps 16-bit gathers, as does MXFP8."""
    sc = scenario("torchtitan-compile")
    r = LT.rates(sc, ACC)
    assert LT.tp_gather_bytes(sc, r) == 1.0
    assert LT.tp_gather_bytes(replace(sc, stack=replace(sc.stack, fp8_recipe="delayed")), r) == 0.0
    assert LT.tp_gather_bytes(replace(sc, stack=replace(sc.stack, fp8_tp_gather=False)), r) == 0.0
    bf16 = scenario("torchtitan-compile", "bf16-mixed")
    assert LT.tp_gather_bytes(bf16, LT.rates(bf16, ACC)) == 0.0
    mx = scenario("torchtitan-compile", "mxfp8-mixed", "b200")
    assert LT.tp_gather_bytes(mx, LT.rates(mx, "b200")) == 0.0
