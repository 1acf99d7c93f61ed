"""Software-stack profiles (catalogs/stacks.toml) and the [hardware] stack key."""

from dataclasses import fields

import pytest

from tpopt.catalogs.declare import spec
from tpopt.catalogs.stacks import (
    DEFAULT_STACK,
    KEYS,
    OPTIONAL,
    SOURCED,
    StackKeys,
    build_stack,
    stack_names,
    stack_profile,
)
from tpopt.errors import InputError
from tpopt.models.hardware import StackProfile
from tpopt.models.units import GIB


def test_default_stack_is_megatron_core_and_every_profile_is_sourced():
    assert DEFAULT_STACK == "megatron-core"
    assert {"megatron-core", "torchtitan", "deepspeed", "maxtext"} <= set(stack_names())
    for name in stack_names():
        p = stack_profile(name)
        assert p.name == name and p.display
        assert all(p.sources.get(k) for k in ("step_overhead", "communicator_buffers", "allocator_reserve"))


def test_megatron_recompute_vocabulary_names_its_selective_modules():
    mods = stack_profile("megatron-core").recompute_modules
    assert {"core_attn", "mlp", "moe_act", "layernorm", "shared_experts"} <= set(mods)


def test_usable_memory_subtracts_buffers_then_divides_by_the_reserve():
    p = stack_profile("megatron-core")
    # (74 GiB - buffers) / (1 + reserve), written out from the profile's own two numbers
    assert p.usable(74 * GIB) == pytest.approx((74 * GIB - p.communicator_buffers) / (1 + p.allocator_reserve))
    assert p.usable(74 * GIB) < 74 * GIB


def test_unknown_stack_and_unsourced_value_are_one_line_errors():
    with pytest.raises(InputError, match="unknown stack 'nemo'"):
        stack_profile("nemo")
    t = {"display": "x", "tp_overlap": True, "dp_overlap": True, "fsdp_prefetch": 1, "dp_bucket": "40MB",
         "moe_dispatcher": "alltoall", "moe_a2a_overlap": "none", "flash_attention": True, "sequence_parallel": True,
         "dropout": False, "recompute": "none", "recompute_modules": [], "activation_offload": False,
         "fp8_recipe": "current", "fp8_param_gather": False, "moe_probs_in_activation": False, "step_overhead": "1ms",
         "microbatch_overhead": "0s",
         "cuda_context": "0GiB",
         "communicator_buffers": "0GiB", "allocator_reserve": 0.0, "sources": {}}
    with pytest.raises(InputError, match="no source for tp_overlap"):
        build_stack("x", t)


def test_every_stack_key_sets_its_profile_field_and_needs_a_source():
    """The known keys are the declared ones, each sets the StackProfile field of its name; every key but the
    display name and the sources table itself must be sourced; only residual_sigma, dp_bucket_per_rank,
    quantized_saved_inputs, kernel_efficiency, attention_kernel, loss, expert_gemm_dispatch, grouped_gemm_efficiency,
    ring_step_efficiency, moe_host_launch, expert_bias_loop, rope_scaled_unfused, activation_clamp_unfused, cp_ring,
    kv_repeat, pp_buffers, cp_merge, tp_input_regather and fp8_tp_gather may be left out, at the profile's default."""
    profile = {f.name: f for f in fields(StackProfile)}
    assert KEYS == tuple(f.name for f in fields(StackKeys)) and set(KEYS) == set(profile) - {"name"}
    assert set(KEYS) - set(SOURCED) == {"display", "sources"}
    assert OPTIONAL == ("dp_bucket_per_rank", "quantized_saved_inputs", "residual_sigma", "kernel_efficiency",
                        "attention_kernel", "loss", "expert_gemm_dispatch", "grouped_gemm_efficiency",
                        "ring_step_efficiency", "moe_host_launch", "expert_bias_loop", "rope_scaled_unfused",
                        "activation_clamp_unfused", "cp_ring", "kv_repeat", "pp_buffers", "cp_merge",
                        "tp_input_regather", "fp8_tp_gather")
    assert stack_profile("megatron-core").ring_step_efficiency == profile["ring_step_efficiency"].default == 1.0
    assert stack_profile("torchtitan").moe_host_launch == profile["moe_host_launch"].default == 0.0
    assert stack_profile("torchtitan").expert_bias_loop is profile["expert_bias_loop"].default is False
    assert stack_profile("torchtitan").rope_scaled_unfused is profile["rope_scaled_unfused"].default is False
    assert (stack_profile("torchtitan").activation_clamp_unfused is profile["activation_clamp_unfused"].default
            is False)
    assert stack_profile("deepspeed").cp_ring == profile["cp_ring"].default == "p2p"  # left out: the default
    assert stack_profile("deepspeed").kv_repeat is profile["kv_repeat"].default is False  # left out: the default
    assert stack_profile("deepspeed").cp_merge == profile["cp_merge"].default == "fused"  # left out: the default
    assert stack_profile("torchtitan").expert_gemm_dispatch == profile["expert_gemm_dispatch"].default == 0.0
    assert stack_profile("torchtitan").grouped_gemm_efficiency == profile["grouped_gemm_efficiency"].default == 1.0
    assert spec(next(f for f in fields(StackKeys) if f.name == "attention_kernel")).default == profile[
        "attention_kernel"].default == "native"
    assert stack_profile("megatron-lm-2021").loss == profile["loss"].default == "fused"  # left out: the default
    assert stack_profile("megatron-core").loss == "te"  # stated: the Megatron-Bridge recipes' loss
    assert spec(next(f for f in fields(StackKeys) if f.name == "residual_sigma")).default == profile[
        "residual_sigma"].default
    assert stack_profile("torchtitan").dp_bucket_per_rank == profile["dp_bucket_per_rank"].default == 0.0
    assert stack_names() and all(stack_profile(n).display for n in stack_names())
