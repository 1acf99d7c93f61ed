"""torchtitan's selective per-op activation checkpointing as a recompute mode of its own (issue 35, item 4).

pytorch/torchtitan (parallelize_llama.py at 9dec370, the Dec 2024 benchmarks; train_configs/llama3_8b.toml:
activation_checkpoint.mode = "selective", selective_ac_option = "op"): the policy saves the outputs of aten.mm
"except every second mm" (counted per block) and of the SDPA kernels, and recomputes everything else. A Llama block
runs its linears as wq, wk, wv, wo, w1, w3, w2: the 1st, 3rd, 5th and 7th outputs (q, v, the gate, the MLP output)
are saved, k, the attention projection and the up projection rerun. Derived here for Llama 3 8B (h = 4,096,
f = 14,336, 32 query heads, 8 KV heads of 128):

- saved per token and block, BF16: block input h + q 4,096 + v 1,024 + SDPA output 4,096 + gate f + MLP output h
  = 31,744 values x 2 B = 63,488 B, + the FP32 log-sum-exp 4 B x 32 heads = 63,616 B;
- the norm+mlp groups' keep set (what the table used to run): norm inputs 2h + q, k, v 6,144 + attention output
  4,096 + gate and up 2f = 47,104 x 2 + 128 = 94,336 B;
- rerun GEMMs: 2 x (h x 1,024 + 4,096 x h + h x f) = 159,383,552 FLOP per token and block, with the norms
  (8 h) and the SwiGLU product (5 f).
"""

from __future__ import annotations

import pytest

from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import build_scenario
from tpopt.errors import InputError
from tpopt.models import memory, ops, steptime

CAT = load_catalog()


def llama3_8b():
    raw = {"model": {"name": "llama3-8b"}, "task": {"tokens": "5B", "seq_len": 8192, "global_batch": 8},
           "schedule": {"deadline": "600d"}, "hardware": {"accelerator": "h100-sxm", "stack": "torchtitan"}}
    return build_scenario(raw, CAT).model


def test_the_name_is_a_mode_of_its_own():
    assert memory.parse_recompute("op") == memory.parse_recompute("selective-op") == "op"
    with pytest.raises(InputError, match="mode of its own"):
        memory.parse_recompute("op+norm")


def test_saved_set_per_token_llama3_8b():
    a = llama3_8b()
    assert (a.hidden, a.ffn, a.d_attn, a.d_kv, a.heads) == (4096, 14336, 4096, 1024, 32)
    op = float(memory.activation_bytes_per_microbatch(a, 1, 1, 1, 1, "op"))
    groups = float(memory.activation_bytes_per_microbatch(a, 1, 1, 1, 1, "norm+mlp"))
    assert op == 63616 and groups == 94336
    # 32 blocks, two 8,192-token sequences (Table 1 of the Dec 2024 benchmarks): 31.1 GiB against 46.1 GiB
    assert float(memory.activation_bytes_per_microbatch(a, 8192, 2, 1, 32, "op")) / 2**30 == pytest.approx(
        63616 * 16384 * 32 / 2**30)


def test_tensor_parallel_split_keeps_the_partial_mlp_output_whole():
    """Under TP t with sequence parallelism every saved tensor is / t but the row-parallel w2 output before its
    reduce-scatter (h per token on every rank), and the two reduce-scatter outputs (2 h / t) appear."""
    a = llama3_8b()
    t = 8
    got = float(memory.activation_bytes_per_microbatch(a, 1, 1, t, 1, "op"))
    want = (2 * (4096 + 4096 + 1024 + 4096 + 14336) + 4 * 32) / t + 2 * 4096 + 2 * 2 * 4096 / t
    assert got == pytest.approx(want)


def test_rerun_gemms_and_their_time_share():
    a = llama3_8b()
    shares = {op: share for op, _, _, share in memory.op_sac_linears(a)}
    assert shares == {"qkv": pytest.approx(5120 / 6144), "proj": 0.0, "mlp.up": 0.5, "mlp.down": 1.0}
    per_token = float(memory.recompute_flops_per_token(a, 8192.0, "op"))
    assert per_token == pytest.approx(32 * (2 * (4096 * 1024 + 4096 * 4096 + 4096 * 14336) + 8 * 4096 + 5 * 14336))
    # the per-operation model's executed FLOPs: the backward adds exactly the rerun GEMMs' FLOPs (and no memory-bound
    # kernel FLOPs, which are 0 in ops) for one block of 8,192 tokens
    lay = ops.Layout(tp=1.0, micro_batch=1.0, seq_len=8192)
    _, dx_none, _ = steptime.executed_flops(a, lay, "none")
    _, dx_op, _ = steptime.executed_flops(a, lay, "op")
    assert float(dx_op) - float(dx_none) == pytest.approx(8192 * 2 * (4096 * 1024 + 4096 * 4096 + 4096 * 14336),
                                                          rel=1e-9)


def test_moe_blocks_are_refused():
    raw = {"model": {"name": "mixtral-8x7b"}, "task": {"tokens": "5B", "seq_len": 4096, "global_batch": 8},
           "schedule": {"deadline": "600d"}, "hardware": {"accelerator": "h100-sxm"}}
    with pytest.raises(InputError, match="dense blocks"):
        memory.op_sac_linears(build_scenario(raw, CAT).model)


def test_rerun_collectives_under_tensor_parallelism():
    """torchtitan's policy saves reduce-scatter outputs but no all-gather: with sequence parallelism a block's
    backward reruns the two all-gathers of its four equal forward collectives, half the forward TP time; the
    forward itself is unchanged."""
    from tpopt.models.roofline import PerfParams

    a = llama3_8b()
    lay = ops.Layout(tp=8.0, micro_batch=1.0, seq_len=8192)
    r = steptime.Rates(peak=989e12, linear_peak=989e12, hbm=3.35e12, tp_bandwidth=450e9, perf=PerfParams())
    none = steptime.layer_times(a, lay, r, "none")
    op = steptime.layer_times(a, lay, r, "op")
    assert float(op.fwd) == pytest.approx(float(none.fwd))
    free = steptime.Rates(peak=989e12, linear_peak=989e12, hbm=3.35e12, tp_bandwidth=1e30,
                          perf=PerfParams(collective_latency=0.0))
    tp_fwd = float(none.fwd) - float(steptime.layer_times(a, lay, free, "none").fwd)  # the forward collectives
    assert tp_fwd > 0
    assert float(op.tp) - float(none.tp) == pytest.approx(0.5 * tp_fwd)
    assert steptime.op_sac_collective_rerun(True) == 0.5 and steptime.op_sac_collective_rerun(False) == 1.0


def test_a_stack_with_the_per_op_mode_offers_it_for_dense_models_only():
    """torchtitan's recompute vocabulary (stacks.toml recompute_modules: full, op, layer) gives an unstated row the
    choice of its per-op mode, never joined with groups; a MoE model has no such choice."""
    from tpopt.optimizer.runs import recompute_options

    assert recompute_options("torchtitan", llama3_8b()) == ("none", "op", "full")
    moe = build_scenario({"model": {"name": "mixtral-8x7b"}, "task": {"tokens": "5B", "seq_len": 4096,
                                                                      "global_batch": 8},
                          "schedule": {"deadline": "600d"}, "hardware": {"accelerator": "h100-sxm"}}, CAT).model
    assert "op" not in recompute_options("torchtitan", moe)
