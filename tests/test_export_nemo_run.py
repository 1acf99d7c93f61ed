"""`tpopt export --format nemo` fed to Megatron-Bridge itself (v0.5.0, the version
catalogs/frameworks/megatron-bridge.toml names): the model's pre-training recipe builds its ConfigContainer, the
exported overrides go through Bridge's own Hydra mechanism (``process_config_with_overrides``, struct mode: an
unknown or mistyped key is rejected), then ``runtime_config_update`` (what ``pretrain`` runs before initialisation:
the mixed-precision recipe resolved by name and set up, communication overlap, ``ConfigContainer.validate`` with
each section's finalisation and the cross-section rules) with the plan's world size, and the plan's settings are
read back from Bridge's objects, including those the recipe had on.

Megatron-Bridge declares Python >= 3.12 and its package ``__init__`` imports every model bridge (transformers,
Transformer Engine, ModelOpt, diffusers, Energon). Installed with ``--no-deps --ignore-requires-python``
(.ci/extras), only its config code is imported here, through the stand-ins below, each naming what it covers.
Without Bridge the module skips, except under CI (``CI=true``), where it fails."""

import importlib
import importlib.util
import shlex
import sys
import types
import typing
from collections.abc import Iterator
from typing import Any

import pytest

from tests.test_export_megatron_run import (
    AMD_CASES,
    CASES,
    COMPUTE_CAPABILITY,
    CUDA_NAME,
    _cuda_only,
    _CudaOnly,
    _require,
    amd_case,
    dispatcher_why,
    example,
)
from tpopt import api
from tpopt import frameworks as FW

_require("megatron.bridge")
_require("hydra")


def _path_only(name: str) -> types.ModuleType:
    """A package whose ``__init__`` is not run: its submodules import from the real directory."""
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.submodule_search_locations is not None
    pkg = types.ModuleType(name)
    pkg.__path__ = list(spec.submodule_search_locations)
    return pkg


class _ShapeBridge:
    """Stand-in for ``AutoBridge.from_hf_pretrained(hf_id).to_megatron_provider(load_weights=False)``: the recipes
    read the model's shape from its Hugging Face config (a download, and transformers). The same shape comes from
    tpopt's catalog (set per test): layers, widths, heads, KV groups, vocabulary, experts. Parallel rules read it
    (layers divisible by PP stages, heads and groups by TP, experts by EP)."""

    model: Any = None

    @classmethod
    def from_hf_pretrained(cls, *args: object, **kwargs: object) -> "_ShapeBridge":
        return cls()

    def to_megatron_provider(self, load_weights: bool = False) -> Any:
        from megatron.bridge.models.gpt_provider import GPTModelProvider

        m = self.model
        kw: dict[str, Any] = dict(num_layers=m.layers, hidden_size=m.hidden, ffn_hidden_size=m.ffn,
                                  num_attention_heads=m.heads, num_query_groups=m.kv_heads, vocab_size=m.vocab,
                                  normalization="RMSNorm", gated_linear_unit=True, position_embedding_type="rope",
                                  add_bias_linear=False)  # as the Qwen3, Llama 3, DeepSeek bridges set it (mlp_bias)
        if m.moe:
            kw.update(num_moe_experts=m.experts, moe_router_topk=m.top_k, moe_ffn_hidden_size=m.expert_ffn)
        return GPTModelProvider(**kw)


@pytest.fixture(scope="module")
def bridge() -> Iterator[dict[str, Any]]:
    """Bridge's recipes and override function, imported with the narrow stand-ins below."""
    with pytest.MonkeyPatch.context() as mp:
        # Stand-in 1 (as for Megatron-LM): megatron/core/transformer/moe/paged_stash.py defines Triton kernels at
        # import (CUDA only); no config rule reads it.
        mp.setitem(sys.modules, "megatron.core.transformer.moe.paged_stash",
                   _cuda_only("megatron.core.transformer.moe.paged_stash"))
        if not hasattr(typing, "override"):  # Stand-in 2: PEP 698's decorator on 3.11 (typing_extensions)
            import typing_extensions

            mp.setattr(typing, "override", typing_extensions.override, raising=False)
        # Stand-in 3: megatron.bridge's __init__ imports every Hugging Face model bridge (transformers, ModelOpt,
        # diffusers). Run without it; AutoBridge, the only name the recipes take from it, is stand-in 6.
        pkg = _path_only("megatron.bridge")
        mp.setitem(sys.modules, "megatron.bridge", pkg)
        # Stand-in 4: megatron.bridge.models' and .recipes' __init__ import all models' bridges and recipes
        # (transformers, Transformer Engine); config.py takes the two providers from the former, real ones.
        models = _path_only("megatron.bridge.models")
        mp.setitem(sys.modules, "megatron.bridge.models", models)
        mp.setitem(sys.modules, "megatron.bridge.recipes", _path_only("megatron.bridge.recipes"))
        # (the DeepSeek recipes' __init__ imports DeepSeek-V4's, which imports its Hugging Face bridge)
        mp.setitem(sys.modules, "megatron.bridge.recipes.deepseek", _path_only("megatron.bridge.recipes.deepseek"))
        models.GPTModelProvider = importlib.import_module("megatron.bridge.models.gpt_provider").GPTModelProvider
        models.T5ModelProvider = importlib.import_module("megatron.bridge.models.t5_provider").T5ModelProvider
        # Stand-in 5: recipes/common.py imports the fine-tuning pieces (a vision-language HF dataset provider:
        # transformers + Energon; LoRA: Transformer Engine). Pre-training recipes never construct them.
        mp.setitem(sys.modules, "megatron.bridge.data.vlm_datasets", _path_only("megatron.bridge.data.vlm_datasets"))
        for name in ("megatron.bridge.data.vlm_datasets.hf_provider", "megatron.bridge.peft.lora"):
            mp.setitem(sys.modules, name, _cuda_only(name))
        # Stand-in 6: AutoBridge (the model's shape from its Hugging Face config), see _ShapeBridge.
        pkg.AutoBridge = _ShapeBridge  # type: ignore[attr-defined]
        ou = importlib.import_module("megatron.bridge.training.utils.omegaconf_utils")
        config = importlib.import_module("megatron.bridge.training.config")
        yield {"override": ou.process_config_with_overrides, "update": config.runtime_config_update,
               "recipes": {
                   "gpt3-175b": importlib.import_module("megatron.bridge.recipes.gpt.gpt3_175b")
                   .gpt3_175b_pretrain_config,
                   "qwen3-8b": importlib.import_module("megatron.bridge.recipes.qwen.qwen3").qwen3_8b_pretrain_config,
                   "llama3-8b": importlib.import_module("megatron.bridge.recipes.llama.llama3")
                   .llama3_8b_pretrain_config,
                   "qwen3-30b-a3b": importlib.import_module("megatron.bridge.recipes.qwen.qwen3_moe")
                   .qwen3_30b_a3b_pretrain_config,
                   "deepseek-v3": importlib.import_module("megatron.bridge.recipes.deepseek.deepseek_v3")
                   .deepseek_v3_pretrain_config,
                   "llama3-405b": importlib.import_module("megatron.bridge.recipes.llama.llama3")
                   .llama31_405b_pretrain_config}}


PLACEHOLDERS = {"DATA_PATH": "/data/corpus_text_document", "TOKENIZER_PATH": "/tokenizer",
                "CHECKPOINT_DIR": "/checkpoints"}
"""What a user sets for the launch script's required placeholders."""


def run_bridge(br: dict[str, Any], mp: pytest.MonkeyPatch, sc: Any, ev: Any) -> tuple[Any, FW.LaunchPlan]:
    """The model's recipe, the plan's overrides by Bridge's own mechanism, then its validation."""
    text = FW.export_text("nemo", sc, ev)
    lp = FW.launch_plan(sc, ev, layout=True)
    overrides = [line for line in text.splitlines() if line and not line.startswith("#")]
    # the launch script's own overrides after the exported file's (data, tokenizer, checkpoint, LR schedule), with
    # its placeholders filled as a user's environment would
    script = FW.launch_script("nemo", sc, ev, "job.txt")
    tail = script.split('$(grep -v "^#" job.txt)', 1)[1].replace("\\\n", " ").split("\n", 1)[0]
    for name, value in PLACEHOLDERS.items():
        tail = tail.replace(f'"${name}"', value)
    overrides += shlex.split(tail)
    mp.setattr(_ShapeBridge, "model", sc.model)
    import torch

    # Stand-in 7: the card's CUDA properties, read by the MoE recipes' apply_flex_dispatcher_backend and by
    # validate_flex_dispatcher_backend (DeepEP needs compute capability 8 or 9, or B200/B300). The plan's card
    # answers, not this machine (no CUDA here).
    card = types.SimpleNamespace(major=COMPUTE_CAPABILITY[ev.plan.accelerator], minor=0,
                                 name=CUDA_NAME.get(ev.plan.accelerator, f"NVIDIA {ev.plan.accelerator}"))
    mp.setattr(torch.cuda, "get_device_properties", lambda *a: card)
    # Stand-in 8: Transformer Engine's fused MoE permutation kernels (CUDA), whose presence TransformerConfig
    # checks when a recipe sets moe_permute_fusion (the MoE recipes do). Present on the plan's stack.
    moe_utils = importlib.import_module("megatron.core.transformer.moe.moe_utils")
    for name in ("fused_permute", "fused_permute_with_probs", "fused_sort_chunks_by_index",
                 "fused_sort_chunks_by_index_with_probs", "fused_unpermute"):
        mp.setattr(moe_utils, name, _CudaOnly, raising=False)
    # Stand-in 9: Transformer Engine's version, which TransformerConfig reads for its TE-version rules (MoE with
    # FP8 needs >= 1.7). Here none is installed (version 0.0.0); the stack runs one at least as new as every rule
    # Megatron-Core 0.18 states (2.14, transformer_config.py line 1423).
    from packaging.version import Version

    tc = importlib.import_module("megatron.core.transformer.transformer_config")
    mp.setattr(tc, "is_te_min_version", lambda v, check_equality=True: Version("2.14.0") >= Version(v))
    mp.setenv("WORLD_SIZE", str(lp.nodes * lp.cards_per_node))
    mp.setenv("RANK", "0")
    mp.setenv("LOCAL_RANK", "0")
    cfg = br["recipes"][sc.model.name]()
    br["override"](cfg, cli_overrides=overrides)
    br["update"](cfg)  # pretrain()'s step before initialisation: mixed precision, comm overlap, validate()
    return cfg, lp


def _decoders(stage: Any) -> int:
    """Transformer layers in a stage of Megatron-Core's layout (a list of layer types, or of virtual stages)."""
    return int(stage.name == "decoder") if hasattr(stage, "name") else sum(_decoders(x) for x in stage)


def read_back(br: dict[str, Any], cfg: Any, lp: FW.LaunchPlan, moe: bool) -> None:
    """Bridge's validated ConfigContainer holds the plan's settings, including those a recipe had on."""
    m, t, d = cfg.model, cfg.train, cfg.ddp
    assert (m.tensor_model_parallel_size, m.pipeline_model_parallel_size, m.context_parallel_size) == \
        (lp.tp, lp.pp, lp.cp)
    assert (t.micro_batch_size, t.global_batch_size, m.seq_length, cfg.dataset.sequence_length) == \
        (lp.micro_batch, lp.global_batch, lp.seq_len, lp.seq_len)
    assert t.train_iters == lp.train_iters
    assert m.sequence_parallel == bool(lp.sequence_parallel)
    if lp.recompute == "none":
        assert m.recompute_granularity is None
    elif lp.recompute == "full":
        assert (m.recompute_granularity, m.recompute_method, m.recompute_num_layers) == ("full", "uniform", 1)
    else:
        assert m.recompute_granularity == "selective"
    z = lp.zero_stage
    assert d.use_distributed_optimizer == cfg.optimizer.use_distributed_optimizer == (z >= 1)
    assert d.use_megatron_fsdp == (z in (2, 3))
    if z in (2, 3):
        assert d.data_parallel_sharding_strategy == ("optim_grads" if z == 2 else "optim_grads_params")
    assert cfg.optimizer.optimizer_cpu_offload == (lp.offload == "cpu")
    if lp.pp and lp.pp > 1 and lp.schedule == "interleaved":
        assert m.virtual_pipeline_model_parallel_size == lp.virtual_stages
    else:
        assert m.virtual_pipeline_model_parallel_size is None
    if lp.stage_layout:  # uneven stages: Megatron-Core's own layout object (built by finalize) holds the split
        from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout as PPL

        layout = m.pipeline_model_parallel_layout
        stages = layout.layout if isinstance(layout, PPL) else PPL.parse_str_to_list(layout)
        assert [_decoders(stage) for stage in stages] == list(lp.stage_layout)
    elif lp.first_stage_layers:
        assert (m.num_layers_in_first_pipeline_stage, m.num_layers_in_last_pipeline_stage) == \
            (lp.first_stage_layers, lp.last_stage_layers)
    assert not m.mtp_num_layers  # the catalog's models plan no multi-token prediction (DeepSeek-V3's recipe has 1)
    if moe:
        assert (m.expert_model_parallel_size, m.expert_tensor_parallel_size) == (lp.ep, lp.expert_tp)
        assert m.moe_grouped_gemm
    mpc = cfg.mixed_precision  # the recipe name, resolved and set up by Bridge
    assert mpc.bf16 and m.bf16
    if lp.precision == "fp8-mixed":  # tpopt's FP8 assumes current (tensor-wise) scaling
        assert mpc.fp8 == "hybrid" and mpc.fp8_recipe == "tensorwise"
    else:
        assert mpc.fp8 is None
    assert cfg.checkpoint.save_interval == lp.save_interval_steps
    assert (cfg.checkpoint.save, cfg.scheduler.lr_decay_iters) == (PLACEHOLDERS["CHECKPOINT_DIR"], lp.train_iters)
    assert cfg.checkpoint.async_save == (lp.save_mode == "async")


BRIDGE_CASES = CASES


@pytest.mark.parametrize("name", list(BRIDGE_CASES))
def test_the_export_passes_megatron_bridge_and_reads_back_the_plan(bridge, name):
    path, kw = BRIDGE_CASES[name]
    sc = api.scenario(example(path))
    ev = api.evaluate(example(path), **kw)
    with pytest.MonkeyPatch.context() as mp:
        cfg, lp = run_bridge(bridge, mp, sc, ev)
    read_back(bridge, cfg, lp, sc.model.moe)
    if sc.model.moe:  # the dispatcher the step-time model costs (catalogs/stacks.toml), not the recipe's DeepEP
        assert cfg.model.moe_token_dispatcher_type == sc.stack.moe_dispatcher
        if sc.stack.moe_dispatcher != "flex":
            assert cfg.model.moe_flex_dispatcher_backend is None


MORE_CASES: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    # the other shipped examples: the long-context one's first stage, and the sites example's replica (TP 8, PP 14,
    # ZeRO-1, full recompute; tests/data/transcripts/sites-405b.txt) on one site (sites scenarios are not evaluated)
    "llama3-8b-long-context": ("llama3-8b-long-context", {},
                               dict(cards=512, accelerator="h100-sxm", zero_stage=1, tp=1, pp=1, micro_batch=1)),
    "llama3-405b replica (TP 8, PP 14)": ("design-case", {"model.name": "llama3-405b",
                                                          "hardware.accelerator": "h100-sxm",
                                                          "hardware.usable_memory": "76GiB"},
                                          dict(cards=1792, accelerator="h100-sxm", zero_stage=1, tp=8, pp=14,
                                               micro_batch=1, recompute="full", schedule="1f1b")),
    # the example's solved plan on B200 (tpopt solve --hw b200): the stack's flex dispatcher on HybridEP (the
    # performance recipes' backend), which Bridge's validate_flex_dispatcher_backend accepts on capability 8-10
    "qwen3-30b-a3b on B200 (PP 2, flex / HybridEP)": ("qwen3-30b-a3b", {"hardware.accelerator": "b200"},
                                                      dict(cards=16, accelerator="b200", zero_stage=1, tp=1, pp=2,
                                                           micro_batch=1, save_mode="async")),
    # one GB200 NVL72 rack (DP 72: a batch of 8 x 72 sequences): DeepEP is refused there ("NVIDIA GB200" is no
    # B200/B300 name), HybridEP runs
    "qwen3-30b-a3b on GB200 NVL72 (flex / HybridEP)": ("qwen3-30b-a3b", {"hardware.accelerator": "gb200-nvl72",
                                                                          "task.global_batch": 576},
                                                       dict(cards=72, accelerator="gb200-nvl72", zero_stage=1,
                                                            tp=1, pp=1, micro_batch=1)),
}


@pytest.mark.parametrize("name", list(MORE_CASES))
def test_more_plans_pass_megatron_bridge(bridge, name):
    path, changes, kw = MORE_CASES[name]
    sc = api.scenario(example(path), changes)
    ev = api.evaluate(sc, **kw)
    with pytest.MonkeyPatch.context() as mp:
        cfg, lp = run_bridge(bridge, mp, sc, ev)
    read_back(bridge, cfg, lp, sc.model.moe)
    if sc.model.moe and sc.stack.moe_dispatcher == "flex":
        assert cfg.model.moe_flex_dispatcher_backend == "hybridep"
    if lp.pp and lp.pp > 1:  # Llama 3.1 405B's recipe counts embedding and loss as layers: switched off
        assert not cfg.model.account_for_embedding_in_pipeline_split
        assert not cfg.model.account_for_loss_in_pipeline_split


@pytest.mark.parametrize("name", list(AMD_CASES))
def test_an_amd_moe_plan_runs_megatron_bridge_with_the_alltoall_dispatcher(bridge, name):
    """Bridge's own DeepEP / HybridEP checks pass an AMD card (capability 9): the export itself writes alltoall.
    (The Qwen3-MoE recipe's DeepEP backend stays set on the model config; only the flex dispatcher reads it.)"""
    sc, ev = amd_case(name)
    with pytest.MonkeyPatch.context() as mp:
        cfg, lp = run_bridge(bridge, mp, sc, ev)
    read_back(bridge, cfg, lp, True)
    assert cfg.model.moe_token_dispatcher_type == "alltoall"
    why = dispatcher_why(FW.export_text("nemo", sc, ev))
    assert len(why) == 1 and "made by AMD" in why[0] and "CUDA graphs" in sc.moe.vendor_note(ev.plan.accelerator)
    assert FW.export_notes("nemo", sc, ev) == [why[0][2:], sc.moe.vendor_note(ev.plan.accelerator)]


def test_fp8_of_a_dense_plan(bridge):
    sc = api.scenario(example("design-case"), {"task.precision": "fp8-mixed"})
    ev = api.evaluate(sc, cards=32, zero_stage=1, tp=2, pp=1, micro_batch=1)
    with pytest.MonkeyPatch.context() as mp:
        cfg, lp = run_bridge(bridge, mp, sc, ev)
    read_back(bridge, cfg, lp, False)


def test_without_the_recipe_undo_bridge_rejects_the_plan(bridge):
    """The lines that undo a recipe's settings are not decoration: GPT-3 175B's recipe defers the embedding's
    weight gradient, which Megatron-Core refuses without pipeline parallelism; DeepSeek-V3's keeps BF16 optimizer
    state, refused with the plan's (FP32, not precision-aware) optimizer."""
    for case, key, match in (("gpt3-175b (ZeRO-3, async)", "comm_overlap.defer_embedding_wgrad_compute",
                              "Cannot defer embedding wgrad compute"),
                             ("FP8 (DeepSeek-V3, uneven stages)", "optimizer.main_grads_dtype",
                              "main_grads_dtype can only be fp32")):
        path, kw = CASES[case]
        sc, ev = api.scenario(example(path)), api.evaluate(example(path), **kw)
        assert key in FW.export_text("nemo", sc, ev)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(FW, "nemo_values", lambda *a, _real=FW.nemo_values, _key=key, **k:
                       {x: v for x, v in _real(*a, **k).items() if x != _key})
            with pytest.raises((ValueError, AssertionError), match=match):
                run_bridge(bridge, mp, sc, ev)
