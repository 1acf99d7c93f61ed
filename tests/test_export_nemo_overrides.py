"""`tpopt export --format nemo`: what a Megatron-Bridge recipe must not keep of its own. A recipe switches
things on (full recompute, the distributed optimizer, its sequence length, a pipeline layout, its mixed-precision
recipe by name); overrides that only switch things on would leave them in place (issue 37). Each override
expected here is derived from the plan in the test, not read from the export code."""

from pathlib import Path

from tpopt import api
from tpopt import frameworks as FW

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def overrides(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


def test_a_plain_plan_switches_the_recipes_settings_off():
    """ZeRO-0, no recompute, TP 1, PP 1, sync saves, 8,192 tokens: every recipe default that would survive is
    written off, the sequence length goes to model and dataset, and mixed precision is the recipe's name."""
    path = EXAMPLES / "design-case.toml"
    sc = api.scenario(path)
    ev = api.evaluate(path, cards=32, zero_stage=0, tp=1, pp=1, micro_batch=1, recompute="none", save_mode="sync")
    o = overrides(FW.export_text("nemo", sc, ev))
    assert sc.task.seq_len == 8192
    for key, want in {"model.recompute_granularity": "null", "model.recompute_method": "null",
                      "model.recompute_num_layers": "null", "ddp.use_distributed_optimizer": "false",
                      "optimizer.use_distributed_optimizer": "false", "ddp.use_megatron_fsdp": "false",
                      "model.sequence_parallel": "false", "model.virtual_pipeline_model_parallel_size": "null",
                      "checkpoint.async_save": "false", "optimizer.optimizer_cpu_offload": "false",
                      "model.seq_length": "8192", "dataset.sequence_length": "8192",
                      "mixed_precision": "bf16_mixed", "train.global_batch_size": str(ev.plan.global_batch)}.items():
        assert o[key] == want, key
    assert not any(k.startswith("mixed_precision.") for k in o)  # a string field takes no sub-keys


def test_moe_fp8_and_uneven_stages_of_deepseek_v3():
    """DeepSeek-V3 (FP8, 61 layers) on PP 8: the model's split [7, 8, 8, 8, 8, 8, 7, 7] as a layout (embedding on
    the first stage, loss on the last), current FP8 scaling, the stack's token dispatcher with grouped GEMM."""
    path = EXAMPLES / "deepseek-v3.toml"
    sc = api.scenario(path)
    ev = api.evaluate(path, cards=2048, accelerator="h800", zero_stage=1, tp=1, pp=8, ep=16, micro_batch=1,
                      recompute="full", schedule="1f1b")
    stages = [int(x) for x in ev.metrics["stage_layers"]]
    assert sum(stages) == 61 and len(set(stages[1:-1])) > 1
    o = overrides(FW.export_text("nemo", sc, ev))
    assert o["model.pipeline_model_parallel_layout"] == "|".join(
        ("E" if i == 0 else "") + f"t*{n}" + ("L" if i == len(stages) - 1 else "") for i, n in enumerate(stages))
    assert o["mixed_precision"] == "bf16_with_fp8_current_scaling_mixed"
    assert o["model.moe_grouped_gemm"] == "true" and o["model.moe_token_dispatcher_type"] == "flex"
    assert o["model.num_layers_in_first_pipeline_stage"] == "null"
    assert (o["ddp.use_distributed_optimizer"], o["optimizer.use_distributed_optimizer"]) == ("true", "true")
    text = FW.export_text("nemo", sc, ev)
    assert FW.parse("nemo", text, 61).stage_layout == tuple(stages)


def test_megatron_environment_follows_the_rule():
    """CUDA_DEVICE_MAX_CONNECTIONS=1 with TP or CP and no Megatron-FSDP; nothing under FSDP or without TP/CP."""
    lp = FW.LaunchPlan
    assert FW.megatron_environment(lp(tp=2, cp=1, zero_stage=1)) == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    assert FW.megatron_environment(lp(tp=1, cp=2, zero_stage=0)) == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    assert FW.megatron_environment(lp(tp=4, cp=1, zero_stage=3)) == {}
    assert FW.megatron_environment(lp(tp=1, cp=1, zero_stage=1)) == {}
