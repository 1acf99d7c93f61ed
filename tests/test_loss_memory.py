"""The loss's logits at the last stage, as the stack computes it (issue 35, item 4: memory with the stack's buffers).

Megatron-Core's native fused vocab-parallel cross-entropy keeps one FP32 buffer of the logits (4 B per logit: the
softmax is computed in place and becomes the gradient). The Megatron-Bridge recipes (the megatron-core stack's
defaults) choose Transformer Engine's Triton loss instead (cross_entropy_fusion_impl = "te"): an online softmax over
the BF16 logits whose backward kernel stores the gradient over them in their own dtype, so 2 B per logit.
torchtitan's loss is ``cross_entropy(pred.float(), labels)``, eager and unfused (pytorch/torchtitan
torchtitan/components/loss.py; at 9dec370, the Dec 2024 benchmarks, not compiled even with training.compile;
compiled under training.compile since 2025-04: about 2 + 2 B, the BF16 logits and their BF16 gradient). Its
backward peak, counted tensor by tensor from autograd's rules:

- log_softmax saves its FP32 output for the backward:                                  4 B
- nll_loss's backward writes a dense FP32 gradient of that output:                      4 B
- log_softmax's backward writes the FP32 gradient of its input while both are live:      4 B
  (the BF16 logits were freed before the backward: the train step's ``del pred``)  -> 12 B per logit.

Under TP torchtitan splits the vocabulary (loss_parallel): PyTorch's torch/distributed/tensor/parallel/loss.py
computes both backwards at once as ``(torch.zeros_like(x) + torch.exp(x)) * grad_output`` from the saved FP32
log-softmax output x: x, the zeros, exp(x) and their sum live together -> 16 B per logit of the / tp shard.

Llama 3 8B (V = 128,256), one 32,768-token sequence per card: 32,768 x 128,256 x 12 B = 47.0 GiB against the fused
loss's 15.7 GiB, a difference of 8 B per logit, 31.3 GiB; the published peak of that run (torchtitan
benchmarks/llama3_h100_202412_torchtitan.md Table 2, FSDP 8, CP 1) is 83.9 GiB, reserved.
"""

from __future__ import annotations

import pytest

from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import build_scenario
from tpopt.catalogs.stacks import stack_profile
from tpopt.models import memory
from tpopt.models import terms as T
from tpopt.models.arch import ModelArch
from tpopt.models.units import GIB

CAT = load_catalog()
EAGER = 4.0 + 4.0 + 4.0  # saved log-softmax output, nll_loss's gradient, log_softmax's input gradient (FP32 each)
EAGER_TP = 4.0 * 4.0  # loss_parallel: saved output, zeros_like, exp and their sum (FP32 each)
FUSED = 4.0  # one FP32 logits buffer, the softmax in place
TE = 2.0  # Transformer Engine's Triton loss: the BF16 logits, the gradient stored over them
COMPILED = 2.0 + 2.0  # torch.compile'd loss: the BF16 logits kept for the backward and their BF16 gradient


def scenario(stack: str, seq_len: int = 32768):
    raw = {"model": {"name": "llama3-8b"}, "task": {"tokens": "5B", "seq_len": seq_len, "global_batch": 8},
           "schedule": {"deadline": "600d"}, "hardware": {"accelerator": "h100-sxm", "stack": stack}}
    return build_scenario(raw, CAT)


def test_stacks_state_the_bytes_their_loss_holds():
    assert stack_profile("torchtitan").loss == "eager"
    assert stack_profile("torchtitan-compile").loss == "compiled"  # the loss compiled since 2025-04
    assert stack_profile("megatron-core").loss == "te"  # the Megatron-Bridge recipes' cross_entropy_fusion_impl
    assert stack_profile("megatron-lm-2021").loss == "fused"
    assert [float(memory.loss_bytes_per_logit(k, t)) for k in ("fused", "te", "eager", "compiled")
            for t in (1, 8)] == [FUSED, FUSED, TE, TE, EAGER, EAGER_TP, COMPILED, COMPILED]


def test_llama3_8b_logits_at_32k_tokens():
    a: ModelArch = scenario("torchtitan").model
    assert a.vocab == 128256
    logits = 32768 * 128256
    assert float(memory.logits_bytes(a, 32768, 1, 1, loss="eager")) / GIB == pytest.approx(
        logits * 12 / 2**30, rel=1e-12)
    assert logits * 12 / 2**30 == pytest.approx(46.97, abs=0.01)
    assert float(memory.logits_bytes(a, 32768, 1, 1)) / GIB == pytest.approx(15.66, abs=0.01)


@pytest.mark.parametrize("tp", [1, 8])
def test_the_stack_sets_the_last_stage_buffer(tp):
    """Same plan, two stacks: the last stage's buffers differ by (12 - 2) B x s b V at tp = 1, (16 - 2) B x
    s b V / tp under loss parallelism, and by nothing else (both split the logits by tp)."""
    kw = dict(zero=3, tp=tp, cp=1, pp=1, mb=1, stage="last")
    titan = float(T.temporary(scenario("torchtitan"), **kw))
    mcore = float(T.temporary(scenario("megatron-core"), **kw))
    per_logit = EAGER if tp == 1 else EAGER_TP
    assert titan - mcore == pytest.approx((per_logit - TE) * 32768 * 128256 / tp, rel=1e-9)


def test_a_scenario_states_its_own_loss():
    """[memory] loss replaces the stack's (the published Dec 2024 runs of the compiled stack)."""
    raw = {"model": {"name": "llama3-8b"}, "task": {"tokens": "5B", "seq_len": 8192, "global_batch": 8},
           "schedule": {"deadline": "600d"}, "hardware": {"accelerator": "h100-sxm", "stack": "torchtitan-compile"},
           "memory": {"loss": "eager"}}
    own = build_scenario(raw, CAT)
    assert own.loss_kind() == "eager" and scenario("torchtitan-compile").loss_kind() == "compiled"
    kw = dict(zero=3, tp=1, cp=1, pp=1, mb=2, stage="last")
    plain = build_scenario({**raw, "memory": {}}, CAT)
    assert float(T.temporary(own, **kw)) - float(T.temporary(plain, **kw)) == pytest.approx(
        (EAGER - COMPILED) * 2 * 8192 * 128256, rel=1e-9)


def test_the_published_table_states_the_eager_loss_of_the_dec_2024_runs():
    from tpopt.optimizer.runs import runs_from_csv

    runs = {r.name: r for r in runs_from_csv("benchmarks/data/published-2024-2026.csv", CAT)}
    assert runs["L1"].scenario.loss_kind() == "eager"  # torchtitan-compile at 9dec370: eager loss
    assert runs["T1"].scenario.loss_kind() == "eager"  # torchtitan (eager)
    assert runs["H1"].scenario.loss_kind() == "compiled"  # e7c0cae (2025-06): compiled loss
