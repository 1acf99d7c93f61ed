"""torch's context-parallel ring merges its steps with its own ops (stacks.toml ``cp_merge``; the relation
models.terms.layer_times.ring_merge_bytes): eagerly (torchtitan without torch.compile) every op of
pytorch/pytorch torch/distributed/tensor/experimental/_attention.py is a pass over HBM; under torch.compile
(torchtitan-compile: each TransformerBlock compiled with fullgraph=True, the ring traced into it) Inductor fuses each
step's pointwise chain. Transformer Engine's ring (p2p: Megatron-Core, NeMo) keeps ops.ring_merge_kernels' count.

The byte counts below are written out from the source's op list (torch 1963fc8), BF16 activations (e = 2 B) and
FP32 accumulators (convert_to_f32 = True), the busiest rank's step (the full-query steps, i <= rank); none comes
from the code under test."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import build_scenario
from tpopt.catalogs.stacks import stack_profile
from tpopt.models import ops
from tpopt.models.terms import layer_times as LT

CAT = load_catalog()
E, F = 2.0, 4.0  # BF16 activations, FP32 accumulators


def _passes(*ops_rw: tuple[float, float]) -> float:
    """Bytes per element of a list of passes, each (read, written)."""
    return sum(r + w for r, w in ops_rw)


# _SDPAMerger.step + _merge_one, one step after the first, eager: out.to(float32); out - block_out;
# F.sigmoid(block_lse - lse) * (...) (the factor is per row); out - (...)
EAGER_FWD_STEP_Q = _passes((E, F), (2 * F, F), (F, F), (2 * F, F))
# torch.cat([key.flatten(), value.flatten()]) before every send: read and write each element of K and of V
EAGER_FWD_STEP_KV = _passes((E, E))
# the first step's cast to FP32 and results()' cast back
EAGER_FWD_ONCE_Q = _passes((E, F), (F, E))
# backward step, i <= rank: grad_query += grad_query_; for each of dK, dV: _partial_update (in-place add on one half,
# then torch.cat of the halves), torch.cat for the next rank, and the K, V cat
EAGER_DX_STEP_Q = _passes((F + E, F))
EAGER_DX_STEP_KV = _passes(((F + E) / 2, F / 2), (F, F), (F, F), (E, E))
# torch.zeros_like accumulators, the first step's adds (and the dK, dV cat), the casts back to BF16
EAGER_DX_ONCE_Q = _passes((0.0, F), (F + E, F), (F, E))
EAGER_DX_ONCE_KV = _passes((0.0, F), (F + E, F), (F, F), (F, E))
# fused by Inductor: every step reads the accumulator and the step's block once and writes the accumulator once
FUSED_STEP = _passes((F + E, F))


def test_the_relation_is_the_source_op_list():
    unfused = LT.ring_merge_bytes("allgather", "unfused", E)
    assert unfused is not None
    assert (unfused.fwd_step_q, unfused.fwd_step_kv, unfused.fwd_once_q, unfused.fwd_once_kv) == pytest.approx(
        (EAGER_FWD_STEP_Q, EAGER_FWD_STEP_KV, EAGER_FWD_ONCE_Q, 0.0))
    assert (unfused.dx_step_q, unfused.dx_step_kv, unfused.dx_once_q, unfused.dx_once_kv) == pytest.approx(
        (EAGER_DX_STEP_Q, EAGER_DX_STEP_KV, EAGER_DX_ONCE_Q, EAGER_DX_ONCE_KV))
    assert (EAGER_FWD_STEP_Q, EAGER_DX_STEP_Q, EAGER_DX_STEP_KV) == (38.0, 10.0, 25.0)
    fused = LT.ring_merge_bytes("allgather", "fused", E)
    assert fused is not None
    assert (fused.fwd_step_q, fused.dx_step_q, fused.dx_step_kv) == pytest.approx((FUSED_STEP,) * 3)
    assert fused.fwd_step_kv == 0.0  # the concatenations no collective uses are dropped
    assert fused.fwd_once_kv == pytest.approx(_passes((E, E)))  # the one the all-gather sends
    # Transformer Engine's ring keeps ops.ring_merge_kernels' own count
    assert LT.ring_merge_bytes("p2p", "unfused", E) is None and LT.ring_merge_bytes("p2p", "fused", E) is None


def test_llama3_8b_256k_cp8_merge_bytes():
    """Table 2's CP 8 layout of pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md: 32,768 tokens a card,
    K, V repeated to 32 heads of 128 (torchtitan's repeat_kv), 7 ring steps after the first."""
    a = CAT.model("llama3-8b")
    n = 32768 * 32 * 128  # elements of the output, of dQ and of each of K, V on the card
    steps = 7
    lay = dict(tp=1, micro_batch=1.0 / 8, seq_len=262144, cp_steps=float(steps), cp_kv_repeat=True)
    for merge in ("unfused", "fused"):
        m = LT.ring_merge_bytes("allgather", merge, E)
        fwd, dx = ops.ring_merge_kernels(a, ops.Layout(**lay, cp_merge_bytes=m))
        assert m is not None
        want_fwd = n * (steps * (m.fwd_step_q + 2 * m.fwd_step_kv) + m.fwd_once_q + 2 * m.fwd_once_kv)
        want_dx = n * (steps * (m.dx_step_q + 2 * m.dx_step_kv) + m.dx_once_q + 2 * m.dx_once_kv)
        assert (float(fwd.bytes), float(dx.bytes)) == pytest.approx((want_fwd, want_dx))
    eager_fwd = n * (steps * (EAGER_FWD_STEP_Q + 2 * EAGER_FWD_STEP_KV) + EAGER_FWD_ONCE_Q)
    assert eager_fwd / 1e9 == pytest.approx(44.8, abs=0.05)  # the docstring's figure
    # Transformer Engine's count on the same layout: 10 B forward, 8 + 2 x 8 backward per element and step
    te_fwd, te_dx = ops.ring_merge_kernels(a, ops.Layout(**lay))
    assert (float(te_fwd.bytes), float(te_dx.bytes)) == pytest.approx((n * steps * 10.0, n * steps * 24.0))


def _layer(stack: str, cp: int, merge: str | None = None) -> float:
    raw = {"model": {"name": "llama3-8b"}, "task": {"tokens": "10B", "seq_len": 32768 * cp, "global_batch": 1,
                                                    "precision": "bf16-mixed"},
           "schedule": {"deadline": "1000d"}, "hardware": {"accelerator": "h100-sxm", "stack": stack}}
    sc = build_scenario(raw, CAT)
    if merge is not None:
        sc = replace(sc, stack=replace(sc.stack, cp_merge=merge))
    layer, _, _ = LT.op_times(sc, acc="h100-sxm", recompute="none", tp=1, cp=cp, mb=1)
    return float(layer.fwd + layer.dx)


def test_the_stacks_state_their_merge_and_it_costs_only_under_a_torch_ring():
    assert stack_profile("torchtitan").cp_merge == "unfused"
    assert stack_profile("torchtitan-compile").cp_merge == "fused"
    assert stack_profile("megatron-core").cp_merge == stack_profile("nemo-2403").cp_merge == "fused"
    # without CP there is nothing to merge
    assert _layer("torchtitan", 1, "unfused") == _layer("torchtitan", 1, "fused")
    # eager merges cost more than fused ones on torch's ring ...
    assert _layer("torchtitan", 8, "unfused") > _layer("torchtitan", 8, "fused")
    # ... and Transformer Engine's ring ignores the key (NeMo's and Megatron-Core's runs stay as they were)
    assert _layer("megatron-core", 8, "unfused") == _layer("megatron-core", 8, "fused")
