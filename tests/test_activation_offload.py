"""Activation offloading (Megatron-Core's cpu_offloading_num_layers on Transformer Engine's CPU offload): the
recipe that runs it, the stored activations it takes off the card and the transfer time compute does not hide.

Expected values are derived here: the recipe's settings from NVIDIA-NeMo/Megatron-Bridge
scripts/performance/configs/llama/llama3_workload_base_configs.py at commit abdaeb62522e
(LLAMA3_70B_PRETRAIN_CONFIG_GB200_FP8_CS_V2: micro_batch_size=2, use_megatron_fsdp=True,
cpu_offloading_num_layers=40; no recompute), Megatron-Core's rules (no offload under pipeline parallelism, at most
L - 1 layers) and Llama 3 70B's shapes (meta-llama/Meta-Llama-3-70B config.json: h = 8192, f = 28672, 64 heads,
8 KV heads of 128)."""

from __future__ import annotations

import numpy as np
import pytest

from tpopt.catalogs import recipes as R
from tpopt.catalogs.scenario import build_scenario
from tpopt.errors import InputError
from tpopt.models import comm, memory
from tpopt.models import terms as T
from tpopt.models.terms import communication as TC
from tpopt.optimizer.runs import runs_from_csv

HEADER = "run,model,accelerator,gpus,precision,global_batch,micro_batch,seq_len,tp,pp,sharding,recompute,iteration_s\n"
B4 = "B4,llama3-70b,gb200-nvl72,64,fp8,256,2,8192,1,1,fsdp (ZeRO-3),not stated (recipe default),7.76\n"

# Llama 3 70B, bytes one layer saves per token without recompute (BF16, flash attention; memory.saved_tensors):
# norm inputs 2 x 2h, q k v (h + 2 x 1024) x 2, attention output 2h, log-sum-exp 64 heads x 4 B,
# gate and up 2 x 2f, norm outputs 2 x 2h, MLP product 2f
H, F = 8192, 28672
PER_TOKEN = 2 * 2 * H + (H + 2 * 1024) * 2 + 2 * H + 64 * 4 + 2 * 2 * F + 2 * 2 * H + 2 * F  # 274,688 B
# under FP8 with Transformer Engine the linear layers keep their 1-byte quantised inputs (linear.py: "Discard
# row-wise data since it is not needed in backward pass"): the two norm outputs 2h -> h each, the MLP product
# 2f -> f, and the projection adds a 1-byte copy of the attention output (h) beside flash attention's 2h
PER_TOKEN_FP8 = PER_TOKEN - 2 * H - F + H  # 237,824 B = 29 h


def _row(tmp_path, row: str = B4):
    p = tmp_path / "runs.csv"
    p.write_text("# stack = megatron-core\n" + HEADER + row)
    run, = runs_from_csv(p)
    return run


def test_the_gb200_fp8_fsdp_recipe_offloads_40_layers_and_does_not_recompute(tmp_path):
    run = _row(tmp_path)
    assert run.scenario.memory.activation_offload_layers == 40
    assert {p.recompute for p in run.plans} == {"none"}  # Megatron-Core refuses recompute with offloading
    assert "40 layers offloaded" in run.extra["recipe"]
    stated = _row(tmp_path, B4.replace("not stated (recipe default)", "full"))
    assert stated.scenario.memory.activation_offload_layers == 0  # a row that states its recompute runs it
    mx = _row(tmp_path, B4.replace(",fp8,", ",mxfp8,"))
    assert mx.scenario.memory.activation_offload_layers == 0  # the MXFP8 preset runs TP2 PP4 without offload


def test_layers_off_the_card():
    assert float(memory.offloaded_activation_layers(40, 80, 1)) == 40  # all 40 copies done by the forward's end
    assert float(memory.offloaded_activation_layers(40, 80, 4)) == 0  # no offload under pipeline parallelism
    assert float(memory.offloaded_activation_layers(200, 80, 1)) == 79  # at most L - 1 offload
    assert float(memory.offloaded_activation_layers(0, 80, 1)) == 0


def test_offloaded_layers_leave_the_peak(tmp_path):
    run = _row(tmp_path)
    sc, p = run.scenario, run.plans[0]
    plain = build_scenario({"model": {"name": "llama3-70b"}, "task": {"tokens": "1T", "seq_len": 8192,
                                                                       "global_batch": 256, "precision": "fp8-mixed"},
                            "hardware": {"accelerator": "gb200-nvl72", "stack": "megatron-core"},
                            "schedule": {"deadline": "30d"}, "memory": {"prefetch": sc.memory.prefetch}})
    off = build_scenario({"model": {"name": "llama3-70b"}, "task": {"tokens": "1T", "seq_len": 8192,
                                                                     "global_batch": 256, "precision": "fp8-mixed"},
                          "hardware": {"accelerator": "gb200-nvl72", "stack": "megatron-core"},
                          "schedule": {"deadline": "30d"},
                          "memory": {"prefetch": sc.memory.prefetch, "activation_offload_layers": 40}})
    kw = dict(schedule="1f1b", recompute="none", tp=1, pp=1, dp=64, mb=2)
    saved = float(T.activations(plain, **kw)) - float(T.activations(off, **kw))
    assert saved == pytest.approx(40 * PER_TOKEN_FP8 * 2 * 8192, rel=1e-9)
    stages = T.memory_by_stage(off, zero=3, offload="none", **kw)
    whole = T.memory_by_stage(plain, zero=3, offload="none", **kw)
    assert whole[0].activations - stages[0].activations == pytest.approx(saved, rel=1e-9)
    piped = dict(kw, pp=4, dp=16)
    assert float(T.activations(off, **piped)) == float(T.activations(plain, **piped))
    assert p.recompute == "none"


def test_each_copy_shows_only_what_the_neighbouring_layer_does_not_hide():
    # 2 layers, 10 B at 2 B/s = 5 s each way; 3 s of forward hides 3, 6 s of backward all of it
    assert float(comm.activation_offload_exposed(2, 10.0, 2.0, 3.0, 6.0)) == pytest.approx(2 * (5 - 3))
    assert float(comm.activation_offload_exposed(0, 10.0, 2.0, 0.0, 0.0)) == 0.0


def test_the_step_pays_the_exposed_copies_on_the_grace_path(tmp_path):
    run = _row(tmp_path)
    sc = run.scenario
    kw = dict(acc="gb200-nvl72", recompute="none", tp=1, pp=1, dp=64, mb=2)
    t_f, t_dx, t_dw = T.microbatch_times(sc, schedule="1f1b", acc="gb200-nvl72", recompute="none", tp=1, pp=1, mb=2)
    # B = min(NVLink-C2C 450 GB/s per direction, Grace LPDDR5X 18,432 GB/s per rack / 72 GPUs = 256 GB/s)
    v = PER_TOKEN_FP8 * 2 * 8192 / 256e9
    per_mb = 40 * (max(0.0, v - float(t_f) / 80) + max(0.0, v - float(t_dx + t_dw) / 80))
    assert float(TC.activation_offload_wait(sc, **kw)) == pytest.approx(256 / 64 / 2 * per_mb, rel=1e-9)
    assert float(TC.activation_offload_wait(sc, **dict(kw, pp=4, dp=16))) == 0.0
    assert np.isfinite(float(TC.activation_offload_wait(sc, **kw)))


def test_bad_offload_entries_are_one_line_errors():
    ok = {"name": "x", "models": ["llama3-70b"], "activation_offload_layers": 40,
          "sources": {"activation_offload_layers": "a recipe file"}}
    assert R.build_recipe("megatron-core", ok, "w").activation_offload_layers == 40
    for bad in (-1, 2.5, True, "40"):
        with pytest.raises(InputError, match="activation_offload_layers"):
            R.build_recipe("megatron-core", dict(ok, activation_offload_layers=bad), "w")
    with pytest.raises(InputError, match="no source"):
        R.build_recipe("megatron-core", dict(ok, sources={}), "w")


def test_transformer_engine_keeps_the_quantised_inputs_torchao_the_16_bit_ones():
    def per_layer(stack: str, precision: str) -> float:
        sc = build_scenario({"model": {"name": "llama3-70b"},
                             "task": {"tokens": "1T", "seq_len": 8192, "global_batch": 256, "precision": precision},
                             "hardware": {"accelerator": "gb200-nvl72", "stack": stack},
                             "schedule": {"deadline": "30d"}})
        return float(T.activations(sc, schedule="1f1b", recompute="none", tp=1, pp=1, dp=64, mb=1)) / 80 / 8192
    assert per_layer("megatron-core", "bf16-mixed") == pytest.approx(PER_TOKEN)
    assert per_layer("megatron-core", "fp8-mixed") == pytest.approx(PER_TOKEN_FP8)
    # MXFP8: 1 + 1/32 bytes per element (one E8M0 scale per 32)
    q = 1 + 1 / 32
    mx = PER_TOKEN - 2 * 2 * H - 2 * F + q * (2 * H + F + H)
    assert per_layer("megatron-core", "mxfp8-mixed") == pytest.approx(mx)
    # torchao's Float8Linear keeps input_hp (matmul_with_hp_or_float8_args.forward: save_for_backward)
    assert per_layer("torchtitan", "fp8-mixed") == pytest.approx(per_layer("torchtitan", "bf16-mixed"))


def test_a_stack_that_cannot_offload_refuses_the_key():
    raw = {"model": {"name": "llama3-8b"}, "task": {"tokens": "1T", "seq_len": 8192, "global_batch": 256},
           "hardware": {"accelerator": "h100-sxm", "stack": "torchtitan"}, "schedule": {"deadline": "30d"},
           "memory": {"activation_offload_layers": 4}}
    with pytest.raises(InputError, match="does not offload activations"):
        build_scenario(raw)


def test_a_table_states_the_tp_overlap_of_named_runs(tmp_path):
    p = tmp_path / "runs.csv"
    header = "# stack = torchtitan-compile\n# comm.A = tp_overlap=async\n"
    p.write_text(header + "run,model,accelerator,gpus,precision,global_batch,micro_batch,seq_len,tp,pp,recompute,"
                 "iteration_s\nA,llama3-70b,h100-sxm,64,bf16,64,1,8192,8,1,full,20\n"
                 "B,llama3-70b,h100-sxm,64,bf16,64,1,8192,8,1,full,20\n")
    a, b = runs_from_csv(p)
    assert tuple(a.scenario.tp_overlap) == (0.0, 1.0)  # async: the column-parallel backward collectives hidden
    assert tuple(b.scenario.tp_overlap) == (0.0, 0.0)  # the stack's default (torchtitan-compile: no TP overlap)
    p.write_text("# comm.A = tp_chunks=4\n" + p.read_text())
    with pytest.raises(InputError, match="comm"):
        runs_from_csv(p)
