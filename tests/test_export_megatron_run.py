"""`tpopt export --format megatron` fed to Megatron-LM itself: the exported arguments (with the model's own
shape arguments a user's script adds) go through Megatron-LM's ``parse_args`` and ``validate_args`` at the
pinned version, with the world size of the plan and the environment the export states, and the settings the
plan assumed are read back from Megatron's own parsed namespace: parallel sizes, batch, sequence length,
recompute, schedule, ZeRO / Megatron-FSDP, FP8 recipe, MoE dispatcher and grouped GEMM, checkpoints.

The framework comes from the ``frameworks`` extra (pyproject.toml); without it the module is skipped, except
under CI (``CI=true``), which installs the extra: there a missing framework fails. Nothing of Megatron is copied
here; what needs a GPU is stood in for narrowly (each stand-in names the rule it covers)."""

import importlib
import importlib.util
import os
import shlex
import sys
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tpopt import api
from tpopt import frameworks as FW

EXAMPLES_DIR = Path(__file__).resolve().parent.parent / "examples"


def _require(name: str) -> None:
    """Skip the module when ``name`` is not installed, except under CI, which installs the frameworks extra:
    there it fails. (Found, not imported: megatron.core imports CUDA-only modules stood in below.)"""
    if importlib.util.find_spec(name) is not None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{name} is not installed: CI installs the frameworks extra (pip install -e '.[frameworks]')",
                    pytrace=False)
    pytest.skip(f"{name} not installed (the frameworks extra: pip install -e '.[frameworks]')",
                allow_module_level=True)


_require("megatron.training")
_require("torch")


class _CudaOnly:
    """What a stood-in CUDA-only module hands out: constructing it fails (nothing here runs a kernel)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError("a CUDA-only Megatron component, stood in by tests/test_export_megatron_run.py")


def _cuda_only(name: str) -> types.ModuleType:
    m = types.ModuleType(name)

    def attr(key: str) -> object:
        if key.startswith("__"):
            raise AttributeError(key)
        return _CudaOnly

    m.__getattr__ = attr  # type: ignore[method-assign]
    return m


@pytest.fixture(scope="module")
def megatron() -> Iterator[Any]:
    """megatron.training.arguments, imported with the narrow stand-ins below."""
    with pytest.MonkeyPatch.context() as mp:
        # Stand-in 1: megatron/core/transformer/moe/paged_stash.py imports Triton and defines @triton.jit
        # kernels (the MoE paged activation stash, CUDA only) at import; schedules.py and gpt_model.py import
        # names from it. No argument rule reads it.
        mp.setitem(sys.modules, "megatron.core.transformer.moe.paged_stash",
                   _cuda_only("megatron.core.transformer.moe.paged_stash"))
        if not hasattr(typing, "override"):
            # Stand-in 2: megatron-core 0.18 declares Python >= 3.12 and imports typing.override (PEP 698) in
            # megatron/training/models; on 3.11 the same decorator comes from typing_extensions. No rule reads it.
            import typing_extensions

            mp.setattr(typing, "override", typing_extensions.override, raising=False)
        yield importlib.import_module("megatron.training.arguments")


COMPUTE_CAPABILITY = {"h100-sxm": 9, "h800": 9, "a100-80gb-sxm": 8, "rtx4090": 8, "b200": 10, "gb200-nvl72": 10,
                      "mi300x": 9, "mi325x": 9, "mi355x": 9}
"""The cards' CUDA compute capability (major): 10 = Blackwell (B200, GB200), 9 = Hopper, 8 = Ampere and Ada (8.9)
(NVIDIA CUDA GPUs list). AMD Instinct cards under PyTorch on ROCm report their gfx target's major: gfx942
(MI300X, MI325X) 9.4, gfx950 (MI355X) 9.5 (AMD ROCm documentation, GPU hardware specifications) -- inside the
range Megatron-Bridge's HybridEP check accepts, so that check cannot tell an AMD card from a Hopper."""

CUDA_NAME = {"b200": "NVIDIA B200", "gb200-nvl72": "NVIDIA GB200", "mi300x": "AMD Instinct MI300X",
             "mi325x": "AMD Instinct MI325X", "mi355x": "AMD Instinct MI355X"}
"""torch.cuda.get_device_properties(0).name where a rule reads it (Megatron-Bridge's DeepEP check accepts the
Blackwell names starting "NVIDIA B200" / "NVIDIA B300", not "NVIDIA GB200"; its HybridEP check reads the
capability; the AMD cards' names as ROCm reports them); other cards: "NVIDIA <catalog name>", which no rule
reads."""


def run_megatron(mg: Any, mp: pytest.MonkeyPatch, sc: Any, ev: Any) -> tuple[Any, FW.LaunchPlan, str]:
    """The plan's export through Megatron-LM's parse_args + validate_args; (Megatron's args, the plan, text)."""
    text = FW.export_text("megatron", sc, ev)
    lp = FW.launch_plan(sc, ev, layout=True)
    body = text.split("TPOPT_ARGS=(", 1)[1].rsplit(")", 1)[0]
    exported = [t.replace("${CHECKPOINT_DIR}", "/checkpoints") for t in shlex.split(body)]
    m = sc.model
    shape = ["--num-layers", str(m.layers), "--hidden-size", str(m.hidden), "--num-attention-heads", str(m.heads),
             "--ffn-hidden-size", str(m.ffn), "--max-position-embeddings", str(sc.task.seq_len),
             "--vocab-size", str(m.vocab), "--mock-data", "--tokenizer-type", "NullTokenizer"]
    if m.kv_heads != m.heads:
        shape += ["--group-query-attention", "--num-query-groups", str(m.kv_heads)]
    if sc.model.moe:
        shape += ["--num-experts", str(m.experts), "--moe-router-topk", str(m.top_k),
                  "--moe-ffn-hidden-size", str(m.expert_ffn)]
    arch = COMPUTE_CAPABILITY[ev.plan.accelerator]
    # Stand-in 3: the card's compute capability, read from CUDA by validate_args. It decides two rules:
    # CUDA_DEVICE_MAX_CONNECTIONS must be 1 with TP / CP before Blackwell (arch < 10), and grouped GEMM needs
    # arch >= 8 (arguments.py). The plan's card answers, not this machine (no CUDA here).
    mp.setattr(mg, "get_device_arch_version", lambda: arch)
    import torch

    mp.setattr(torch.cuda, "get_device_capability", lambda *a: (arch, 0))
    mp.setenv("WORLD_SIZE", str(lp.nodes * lp.cards_per_node))
    mp.setenv("RANK", "0")
    mp.delenv("CUDA_DEVICE_MAX_CONNECTIONS", raising=False)
    for k, v in FW.megatron_environment(lp).items():  # what the export's environment lines set
        mp.setenv(k, v)
    mp.setattr(sys, "argv", ["pretrain_gpt.py", *shape, *exported])
    args = mg.parse_args()
    mg.validate_args(args)
    return args, lp, text


def read_back(args: Any, lp: FW.LaunchPlan, moe: bool) -> None:
    """Megatron's parsed and validated settings equal the plan's."""
    assert (args.tensor_model_parallel_size, args.pipeline_model_parallel_size, args.context_parallel_size,
            args.data_parallel_size) == (lp.tp, lp.pp, lp.cp, lp.dp)
    assert (args.micro_batch_size, args.global_batch_size, args.seq_length) == (lp.micro_batch, lp.global_batch,
                                                                                 lp.seq_len)
    assert args.global_batch_size == args.micro_batch_size * args.data_parallel_size * lp.grad_accum
    assert args.sequence_parallel == bool(lp.sequence_parallel)
    if lp.recompute == "none":
        assert args.recompute_granularity is None
    elif lp.recompute == "full":
        assert (args.recompute_granularity, args.recompute_method, args.recompute_num_layers) == \
            ("full", "uniform", 1)
    else:
        assert args.recompute_granularity == "selective"
    z = lp.zero_stage
    assert args.use_distributed_optimizer == (z >= 1)  # validate_args sets it under Megatron-FSDP
    assert args.use_megatron_fsdp == (z in (2, 3))
    if z in (2, 3):
        assert args.data_parallel_sharding_strategy == ("optim_grads" if z == 2 else "optim_grads_params")
        assert args.overlap_grad_reduce and args.ckpt_format == "fsdp_dtensor"
    if lp.pp and lp.pp > 1 and lp.schedule == "interleaved":
        assert args.virtual_pipeline_model_parallel_size == lp.virtual_stages
        assert lp.grad_accum % lp.pp == 0  # the interleaved schedule's micro-batch groups (schedules.py)
    else:
        assert args.virtual_pipeline_model_parallel_size is None
    if lp.stage_layout:  # uneven middle stages: Megatron's own layout object holds the plan's split
        from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout as PPL

        PPL(args.pipeline_model_parallel_layout, args.pipeline_model_parallel_size)  # its own checks
        stages = PPL.parse_str_to_list(args.pipeline_model_parallel_layout)
        assert [sum(t.name == "decoder" for t in stage) for stage in stages] == list(lp.stage_layout)
        assert sum(lp.stage_layout) == args.num_layers
    elif lp.first_stage_layers:
        assert (args.decoder_first_pipeline_num_layers, args.decoder_last_pipeline_num_layers) == \
            (lp.first_stage_layers, lp.last_stage_layers)
    if moe:
        assert (args.expert_model_parallel_size, args.expert_tensor_parallel_size) == (lp.ep, lp.expert_tp)
        assert args.moe_grouped_gemm and args.moe_token_dispatcher_type in ("alltoall", "flex")
    # tpopt's bf16-mixed and fp8-mixed hold 2-byte gradients (models/memory.py RECIPES): reduced in BF16
    assert args.grad_reduce_in_bf16 == (lp.precision in ("bf16-mixed", "fp8-mixed"))
    if z == 1 and lp.dp and lp.dp > 1:  # the overlap the step-time model assumes (the stack's dp_overlap)
        assert args.overlap_grad_reduce and args.overlap_param_gather
    if lp.precision == "fp8-mixed":
        assert args.bf16 and args.fp8 == "hybrid" and args.fp8_recipe == "tensorwise"  # current scaling
    else:
        assert args.bf16 and args.fp8 is None
    assert (args.save, args.load, args.save_interval, args.async_save) == \
        ("/checkpoints", "/checkpoints", lp.save_interval_steps, lp.save_mode == "async")
    assert args.train_iters == lp.train_iters


def example(name: str) -> str:
    return str(EXAMPLES_DIR / f"{name}.toml")


CASES: dict[str, tuple[str, dict[str, Any]]] = {
    # the shipped examples' plans, as their transcripts print them (tests/data/transcripts/*-solve.txt)
    "design-case (ZeRO-3)": ("design-case", dict(cards=48, zero_stage=3, tp=1, pp=1, micro_batch=1)),
    "design-case-batch": ("design-case-batch", dict(cards=32, zero_stage=3, tp=1, pp=1, micro_batch=1)),
    "gpt3-175b (ZeRO-3, async)": ("gpt3-175b-widest", dict(cards=768, accelerator="a100-80gb-sxm", zero_stage=3,
                                                           tp=1, pp=1, micro_batch=1, recompute="mlp",
                                                           save_mode="async")),
    "llama3-8b-confidence (TP 2, ZeRO-1)": ("llama3-8b-confidence", dict(cards=1024, accelerator="h100-sxm",
                                                                         zero_stage=1, tp=2, pp=1, micro_batch=1,
                                                                         save_mode="async")),
    "qwen3-30b-a3b (MoE, ZeRO-3)": ("qwen3-30b-a3b", dict(cards=32, accelerator="h100-sxm", zero_stage=3, tp=1, pp=1,
                                                          micro_batch=2, ep=1, save_mode="async")),
    # ZeRO-0/1/2/3, interleaved, CP, EP, FP8, offload, uneven stages
    "ZeRO-0 TP 2 PP 2": ("design-case", dict(cards=64, zero_stage=0, tp=2, pp=2, micro_batch=1)),
    "ZeRO-1 TP 4 full recompute": ("design-case", dict(cards=64, zero_stage=1, tp=4, pp=1, micro_batch=1,
                                                       recompute="full")),
    "ZeRO-2 (optim_grads)": ("design-case", dict(cards=64, zero_stage=2, tp=1, pp=1, micro_batch=1)),
    "interleaved PP 4 x 2": ("design-case", dict(cards=32, zero_stage=1, tp=1, pp=4, micro_batch=1,
                                                 schedule="interleaved:2")),
    "CP 2 TP 2": ("design-case", dict(cards=64, zero_stage=1, tp=2, cp=2, pp=1, micro_batch=1)),
    "offload (ZeRO-1)": ("design-case", dict(cards=32, zero_stage=1, tp=1, pp=1, micro_batch=1, offload="cpu")),
    "EP 8 (MoE, ZeRO-1)": ("qwen3-30b-a3b", dict(cards=64, accelerator="h100-sxm", zero_stage=1, tp=1, pp=1,
                                                 micro_batch=1, ep=8)),
    "expert TP 2 (MoE, TP 2, EP 4)": ("qwen3-30b-a3b", dict(cards=64, accelerator="h100-sxm", zero_stage=1, tp=2,
                                                            pp=1, micro_batch=1, ep=4, recompute="full")),
    "FP8 (DeepSeek-V3, uneven stages)": ("deepseek-v3", dict(cards=2048, accelerator="h800", zero_stage=1, tp=1,
                                                             pp=8, ep=16, micro_batch=1, recompute="full",
                                                             schedule="1f1b")),
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_export_passes_megatron_lm_and_reads_back_the_plan(megatron, name):
    path, kw = CASES[name]
    sc = api.scenario(example(path))
    ev = api.evaluate(example(path), **kw)
    with pytest.MonkeyPatch.context() as mp:
        args, lp, _ = run_megatron(megatron, mp, sc, ev)
    read_back(args, lp, sc.model.moe)
    if sc.model.moe:  # the dispatcher the step-time model costs: the stack's (catalogs/stacks.toml), same names
        assert args.moe_token_dispatcher_type == sc.stack.moe_dispatcher


AMD_CASES: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    # MoE plans on the AMD cards of the catalog (accelerators.toml vendor = "AMD"): the stack's flex dispatcher runs
    # on NVIDIA's HybridEP / DeepEP only, so the exports write Megatron-Core's alltoall dispatcher
    "qwen3-30b-a3b on MI300X (EP 8)": ("qwen3-30b-a3b", {"hardware.accelerator": "mi300x"},
                                       dict(cards=16, accelerator="mi300x", zero_stage=1, tp=1, pp=1, micro_batch=1,
                                            ep=8)),
    "qwen3-30b-a3b on MI325X (TP 2, EP 4)": ("qwen3-30b-a3b", {"hardware.accelerator": "mi325x"},
                                             dict(cards=16, accelerator="mi325x", zero_stage=1, tp=2, pp=1,
                                                  micro_batch=1, ep=4)),
    "qwen3-30b-a3b on MI355X (PP 2)": ("qwen3-30b-a3b", {"hardware.accelerator": "mi355x"},
                                       dict(cards=16, accelerator="mi355x", zero_stage=1, tp=1, pp=2, micro_batch=1,
                                            ep=8, schedule="1f1b")),
}


def amd_case(name: str) -> tuple[Any, Any]:
    """The scenario and evaluated plan of an :data:`AMD_CASES` entry; its stack would write flex on NVIDIA cards."""
    path, changes, kw = AMD_CASES[name]
    sc = api.scenario(example(path), changes)
    assert sc.model.moe and sc.stack.moe_dispatcher == "flex"
    return sc, api.evaluate(sc, **kw)


def dispatcher_why(text: str) -> list[str]:
    """The export's header lines that say why its dispatcher is not the stack's."""
    return [line for line in text.splitlines() if line.startswith("# MoE token dispatcher:")]


@pytest.mark.parametrize("name", list(AMD_CASES))
def test_an_amd_moe_plan_runs_megatron_lm_with_the_alltoall_dispatcher(megatron, name):
    sc, ev = amd_case(name)
    with pytest.MonkeyPatch.context() as mp:
        args, lp, text = run_megatron(megatron, mp, sc, ev)
    read_back(args, lp, True)
    assert args.moe_token_dispatcher_type == "alltoall" and "--moe-flex-dispatcher-backend" not in text
    why = dispatcher_why(text)
    assert len(why) == 1 and "hybridep backend runs on NVIDIA cards only" in why[0] and "made by AMD" in why[0]
    # and the recipe's CUDA graphs the plan was costed without (an AMD card: tests/test_recipe_vendor.py), on stderr too
    note = sc.moe.vendor_note(ev.plan.accelerator)
    assert "CUDA graphs of the MoE blocks not assumed" in note and f"# {note}" in text
    assert FW.export_notes("megatron", sc, ev) == [why[0][2:], note]  # the same lines on stderr


def test_fp8_of_a_dense_plan(megatron):
    sc = api.scenario(example("design-case"), {"task.precision": "fp8-mixed"})
    ev = api.evaluate(sc, cards=32, zero_stage=1, tp=2, pp=1, micro_batch=1)
    with pytest.MonkeyPatch.context() as mp:
        args, lp, _ = run_megatron(megatron, mp, sc, ev)
    read_back(args, lp, False)


def test_tp_without_the_stated_environment_fails_megatrons_own_rule(megatron):
    """The environment line is not decoration: without CUDA_DEVICE_MAX_CONNECTIONS=1 Megatron-LM rejects TP."""
    path, kw = CASES["ZeRO-0 TP 2 PP 2"]
    sc, ev = api.scenario(example(path)), api.evaluate(example(path), **kw)
    assert FW.megatron_environment(FW.launch_plan(sc, ev)) == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(FW, "megatron_environment", lambda lp: {})
        with pytest.raises(AssertionError, match="CUDA_DEVICE_MAX_CONNECTIONS"):
            run_megatron(megatron, mp, sc, ev)


def test_the_refusals_are_one_line_naming_the_feature():
    """DeepSeek-V3's solved plan runs DualPipe; an interleaved plan whose micro-batches are no multiple of PP."""
    ds = dict(CASES["FP8 (DeepSeek-V3, uneven stages)"][1], schedule="dualpipe")
    sc = api.scenario(example("deepseek-v3"))
    with pytest.raises(FW.ExportError, match=r"^megatron: the plan's pipeline schedule dualpipe cannot be expressed"):
        FW.export_text("megatron", sc, api.evaluate(example("deepseek-v3"), **ds))
    odd = dict(CASES["interleaved PP 4 x 2"][1], cards=24)  # PP 4 x DP 6
    sc = api.scenario(example("design-case"), {"task.global_batch": 60})
    ev = api.evaluate(sc, **odd)  # 60 sequences / DP 6 = 10 micro-batches per step: not a multiple of PP 4
    assert FW.launch_plan(sc, ev).grad_accum == 10
    for fmt in ("megatron", "nemo"):
        with pytest.raises(FW.ExportError) as exc:
            FW.export_text(fmt, sc, ev)
        assert "\n" not in str(exc.value) and "interleaved schedule with 10 micro-batches per step on PP 4" in \
            str(exc.value)
