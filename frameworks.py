"""A plan as the launch configuration of a training framework, and back.

:func:`launch_plan` reads what a launcher needs from an evaluated plan (:class:`LaunchPlan`: the parallel sizes,
batch, ZeRO stage, offload, recompute, schedule, precision, checkpoint interval in steps). Each format maps it
onto the framework's own names -- Megatron-LM command-line arguments, NeMo Megatron-Bridge recipe overrides, a
torchtitan TOML job config, a DeepSpeed config JSON -- and every key and value written is checked against the
framework's argument definitions, transcribed with their source file, version and line into
``catalogs/frameworks/*.toml`` (no framework package installs without PyTorch). A plan feature the framework
cannot express raises :class:`ExportError` naming it. Each format also has a parser (:func:`parse`) that reads
the text back into a :class:`LaunchPlan`; the round-trip tests check that it returns what was exported, on the
fields the format carries (:data:`CARRIES`).

Mapping choices (each stated where it is made):

* ZeRO: Megatron-LM 1 = distributed optimizer, 2 / 3 = Megatron-FSDP ``optim_grads`` / ``optim_grads_params``;
  torchtitan 0 = DDP replicas, 2 / 3 = FSDP2 with ``reshard_after_forward`` never / always, 1 inexpressible;
  DeepSpeed ``zero_optimization.stage``.
* Recompute: full = whole layers (Megatron uniform, one layer per unit); groups = Megatron's selective modules
  (attn = core_attn, mlp = mlp (and moe for MoE layers), norm = layernorm).
* Checkpoint interval: seconds / step time, rounded, at least one step.

Where it lives: at the package's root, beside :mod:`tpopt.presentation`, at the user's edge: its user is
``tpopt export`` (:mod:`tpopt.cli.export`); it reads an evaluated plan and the catalogs (models/, catalogs/) and
no solver, so it is no part of the optimiser. Typed as strictly as models/ and optimizer/ (pyproject).
"""

from __future__ import annotations

import json
import math
import re
import shlex
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from functools import cache
from typing import Any

from tpopt.catalogs import BUILTIN_DIR
from tpopt.catalogs.stacks import dispatcher_on_card
from tpopt.errors import InputError
from tpopt.models import families as F
from tpopt.models.evaluate import Evaluation, evaluate
from tpopt.models.hardware import StackProfile
from tpopt.models.memory import OP_RECOMPUTE
from tpopt.models.moe import STACK_DISPATCHERS
from tpopt.models.plan import Plan, Scenario, split_schedule

FRAMEWORK_DIR = BUILTIN_DIR / "frameworks"
SCHEMA_FILES = {"megatron": "megatron-lm.toml", "nemo": "megatron-bridge.toml", "torchtitan": "torchtitan.toml",
                "deepspeed": "deepspeed.toml"}
FORMATS = tuple(SCHEMA_FILES)
"""The formats ``tpopt export --format`` takes."""


class ExportError(InputError):
    """A plan feature the target framework cannot express (or a schema violation)."""


@dataclass(frozen=True)
class LaunchPlan:
    """What a launch configuration carries of a plan. ``None``: not carried by the format it was read from."""

    nodes: int | None = None  # hosts
    cards_per_node: int | None = None  # processes per host
    tp: int | None = None
    pp: int | None = None
    cp: int | None = None
    dp: int | None = None
    ep: int | None = None  # 1 for a dense model
    expert_tp: int | None = None  # None for a dense model
    capacity_factor: float | None = None  # None: dropless
    micro_batch: int | None = None
    global_batch: int | None = None
    grad_accum: int | None = None
    zero_stage: int | None = None
    offload: str | None = None  # "none" or "cpu" (optimizer states)
    recompute: str | None = None  # "none", "full", or groups joined by "+"
    schedule: str | None = None  # "1f1b", "interleaved", "fill-drain" (None when pp = 1)
    virtual_stages: int | None = None  # model chunks per card (1 unless interleaved)
    sequence_parallel: bool | None = None  # False when tp = 1
    flash_attention: bool | None = None
    first_stage_layers: int | None = None  # 0: even split
    last_stage_layers: int | None = None
    seq_len: int | None = None
    precision: str | None = None
    train_iters: int | None = None
    save_interval_steps: int | None = None
    save_mode: str | None = None  # "sync" or "async"
    stage_layout: tuple[int, ...] = ()  # layers per pipeline stage where the middle stages are uneven (else ())

    def project(self, names: Sequence[str]) -> LaunchPlan:
        """Only the fields ``names`` (the others None)."""
        return LaunchPlan(**{n: getattr(self, n) for n in names})

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


ALL_FIELDS = tuple(f.name for f in fields(LaunchPlan))
CARRIES: dict[str, tuple[str, ...]] = {
    "megatron": ALL_FIELDS,
    "nemo": ALL_FIELDS,
    "torchtitan": tuple(n for n in ALL_FIELDS if n not in ("nodes", "cards_per_node", "offload", "flash_attention",
                                                           "capacity_factor", "first_stage_layers",
                                                           "last_stage_layers")),
    "deepspeed": ("tp", "dp", "micro_batch", "global_batch", "grad_accum", "zero_stage", "offload", "recompute",
                  "precision"),
}
"""The fields each format carries (what its parser reads back). torchtitan: offload, stage split, attention
kernel and capacity are rejected or fixed when exported; DeepSpeed's JSON holds batch, ZeRO, offload, TP and
(under PP) recompute -- the pipeline size, recompute without PP and the rest are model code or the training loop
(:func:`exported` drops what a given plan's JSON leaves out)."""


def launch_plan(sc: Scenario, ev: Evaluation, layout: bool = False, fmt: str = "") -> LaunchPlan:
    """The launch view of an evaluated plan (``ev.plan`` resolved by :func:`tpopt.models.evaluate.evaluate`).
    ``layout``: the format takes any stage split (Megatron's --pipeline-model-parallel-layout): uneven middle
    stages go into ``stage_layout`` instead of being an error. ``fmt``: the export format, which starts a refusal's
    line as every format's refusals start (:func:`format_launch_plan`)."""
    target = f"{fmt}: " if fmt else ""
    p, m = ev.plan, ev.metrics
    hosts = int(m["hosts"])
    moe = sc.model.moe
    base, v = split_schedule(p.schedule) if p.pp > 1 else ("", 1)
    first = last = 0
    layout_stages: tuple[int, ...] = ()
    if p.pp > 1:
        stages = [int(x) if float(x).is_integer() else x for x in m["stage_layers"]]
        if any(not isinstance(x, int) for x in stages):
            raise ExportError(f"{target}the plan's stages hold fractional layer counts ({stages})")
        if len(set(stages)) > 1:
            if len(set(stages[1:-1])) > 1 and layout and v == 1:
                layout_stages = tuple(int(x) for x in stages)
            elif len(set(stages[1:-1])) > 1:
                raise ExportError(f"{target}the plan's middle pipeline stages are uneven ({stages}); launchers split "
                                  "the layers between the first and last stage evenly")
            else:
                first, last = stages[0], stages[-1]
    step = float(m["step_s"])
    return LaunchPlan(
        nodes=hosts, cards_per_node=p.cards // hosts, tp=p.tp, pp=p.pp, cp=p.cp, dp=p.dp,
        ep=p.ep if moe else 1, expert_tp=(p.expert_tp or p.tp) if moe else None,
        capacity_factor=(p.capacity_factor or None) if moe else None,
        micro_batch=p.micro_batch, global_batch=p.global_batch, grad_accum=p.grad_accum, zero_stage=p.zero_stage,
        offload=p.offload, recompute=p.recompute, schedule=base or None, virtual_stages=v,
        sequence_parallel=bool(p.sequence_parallel) and p.tp > 1, flash_attention=bool(p.flash_attention),
        first_stage_layers=first, last_stage_layers=last, seq_len=sc.task.seq_len, precision=sc.task.precision,
        train_iters=int(m["iterations"]),
        save_interval_steps=max(1, round(p.save_interval_s / step)) if step > 0 else 1, save_mode=p.save_mode,
        stage_layout=layout_stages)


LAYOUT_FORMATS = ("megatron", "nemo")
"""The formats that write any stage split (Megatron-Core's --pipeline-model-parallel-layout)."""


def format_launch_plan(fmt: str, sc: Scenario, ev: Evaluation) -> LaunchPlan:
    """:func:`launch_plan` as ``fmt`` writes it: uneven stages in its layout where it has one, a refusal that
    starts with the format's name."""
    return launch_plan(sc, ev, layout=fmt in LAYOUT_FORMATS, fmt=fmt)


# ---------------------------------------------------------------------------------------------
# schemas (catalogs/frameworks/*.toml)


@dataclass(frozen=True)
class Schema:
    """A framework's argument definitions as transcribed: name -> {type, choices, file, line}, the rules
    between arguments, and where they come from."""

    format: str
    framework: dict[str, Any]
    args: dict[str, dict[str, Any]]
    requires: tuple[dict[str, Any], ...]
    launcher: dict[str, Any]
    flex_dispatcher: dict[str, Any]

    @property
    def cite(self) -> str:
        f = self.framework
        return f"{f['name']} {f['version']} ({f['source']}, commit {f['commit'][:10]})"


@cache
def schema(fmt: str) -> Schema:
    """The transcribed schema of a format."""
    path = FRAMEWORK_DIR / SCHEMA_FILES[fmt]
    raw = tomllib.loads(path.read_text(encoding="utf-8"))
    return Schema(fmt, raw["framework"], raw["args"], tuple(raw.get("requires", ())), raw.get("launcher", {}),
                  raw.get("flex_dispatcher", {}))


def _typed(value: object, typ: str) -> bool:
    if typ == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if typ == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(float(value))
    if typ in ("bool", "flag"):
        return isinstance(value, bool)
    if typ == "str":
        return isinstance(value, str)
    if typ == "list":
        return isinstance(value, list) and all(isinstance(x, str) for x in value)
    raise ValueError(f"schema type {typ!r} unknown")


def validate(fmt: str, values: Mapping[str, Any], context: Mapping[str, int] | None = None) -> None:
    """Every key is an argument of the framework, every value has its type and lies in its allowed values,
    and the framework's rules between arguments hold (``context``: quantities the text does not hold, such
    as the data-parallel size). Raises :class:`ExportError` naming the first violation."""
    sch = schema(fmt)
    for key, value in values.items():
        spec = sch.args.get(key)
        if spec is None:
            raise ExportError(f"{fmt}: {key} is not an argument of {sch.cite}")
        if not _typed(value, spec["type"]):
            raise ExportError(f"{fmt}: {key} = {value!r} is not of type {spec['type']} ({sch.cite})")
        choices = spec.get("choices")
        if choices is not None:
            items = value if isinstance(value, list) else [value]
            bad = [x for x in items if x not in choices]
            if bad:
                raise ExportError(f"{fmt}: {key} = {bad[0]!r} is not one of {choices} ({sch.cite})")
    ctx = dict(context or {})
    for rule in sch.requires:
        when = values.get(rule["when"])
        if when is None or when is False or ("minimum_when" in rule and when < rule["minimum_when"]):
            continue
        got = values.get(rule["needs"])
        ok = got is not None and got is not False
        if ok and "equals" in rule:
            ok = got == rule["equals"]
        if ok and "minimum" in rule:
            ok = got >= rule["minimum"]
        if ok and "maximum" in rule:
            ok = got <= rule["maximum"]
        if ok and "product" in rule:
            factors = [int(values[k]) if k in values else int(ctx[k]) for k in rule["product"]]
            ok = got == math.prod(factors)
        if not ok:
            raise ExportError(f"{fmt}: {rule['source']}")


# ---------------------------------------------------------------------------------------------
# shared mapping pieces

MEGATRON_MODULES = {"attn": "core_attn", "mlp": "mlp", "norm": "layernorm"}
"""tpopt recompute groups -> Megatron-LM --recompute-modules (a MoE model's mlp group is "mlp" and "moe")."""
MEGATRON_SCHEDULES = ("1f1b", "interleaved")
"""Megatron-LM's pipeline schedules: 1F1B, and interleaved 1F1B with --num-virtual-stages-per-pipeline-rank."""


def _unsupported(fmt: str, feature: str, why: str) -> ExportError:
    return ExportError(f"{fmt}: the plan's {feature} cannot be expressed: {why}")


def _megatron_like(fmt: str, lp: LaunchPlan, moe: bool, stack: StackProfile | None = None) -> list[tuple[str, object]]:
    """The Megatron-Core settings shared by Megatron-LM and Megatron-Bridge, as (generic name, value); the
    generic names are the Megatron-LM argument names without their dashes, with underscores. ``stack``: the
    software stack the plan was costed on (its MoE token dispatcher); None: :class:`StackProfile`'s defaults."""
    st = stack or StackProfile()
    out: list[tuple[str, object]] = [("tensor_model_parallel_size", lp.tp), ("pipeline_model_parallel_size", lp.pp),
                                     ("context_parallel_size", lp.cp)]
    if lp.pp and lp.pp > 1:
        if lp.schedule not in MEGATRON_SCHEDULES:
            raise _unsupported(fmt, f"pipeline schedule {lp.schedule}",
                               "Megatron-LM runs 1F1B and interleaved 1F1B (arguments.py, core_v0.15.0)")
        if lp.schedule == "interleaved":
            m = int(lp.grad_accum or 0)
            if m < lp.pp or m % lp.pp:
                raise _unsupported(fmt, f"interleaved schedule with {m} micro-batches per step on PP {lp.pp}",
                                   "Megatron-Core runs interleaved micro-batches in groups of PP and needs their "
                                   "count to be a multiple of PP (pipeline_parallel/schedules.py)")
            out.append(("virtual_stages", lp.virtual_stages))
        if lp.stage_layout:
            out.append(("pipeline_model_parallel_layout", megatron_layout(lp.stage_layout)))
        elif lp.first_stage_layers:
            out += [("first_stage_layers", lp.first_stage_layers), ("last_stage_layers", lp.last_stage_layers)]
    if moe:
        out += [("expert_model_parallel_size", lp.ep), ("expert_tensor_parallel_size", lp.expert_tp)]
        if lp.capacity_factor:
            out += [("moe_expert_capacity_factor", float(lp.capacity_factor)),
                    ("moe_pad_expert_input_to_capacity", True)]
        out += [("moe_token_dispatcher_type", MEGATRON_DISPATCHERS.get(st.moe_dispatcher, "alltoall")),
                ("moe_grouped_gemm", True)]
        if st.moe_dispatcher == "flex":  # catalogs/frameworks/megatron-lm.toml [flex_dispatcher] (its sources)
            out.append(("moe_flex_dispatcher_backend", schema("megatron").flex_dispatcher["backend"]))
    if lp.sequence_parallel:
        out.append(("sequence_parallel", True))
    out += [("micro_batch_size", lp.micro_batch), ("global_batch_size", lp.global_batch)]
    if lp.recompute == "full":
        out += [("recompute_granularity", "full"), ("recompute_method", "uniform"), ("recompute_num_layers", 1)]
    elif lp.recompute == OP_RECOMPUTE:
        raise _unsupported(fmt, f"recompute {OP_RECOMPUTE!r}", "torchtitan's selective per-op checkpointing; "
                           "Megatron recomputes whole layers or its selective modules")
    elif lp.recompute and lp.recompute != "none":
        mods = []
        for g in str(lp.recompute).split("+"):
            mods.append(MEGATRON_MODULES[g])
            if g == "mlp" and moe:
                mods.append("moe")
        out += [("recompute_granularity", "selective"), ("recompute_modules", mods)]
    z = lp.zero_stage
    if z == 1:
        out.append(("use_distributed_optimizer", True))
    elif z in (2, 3):
        out += [("use_megatron_fsdp", True),
                ("data_parallel_sharding_strategy", "optim_grads" if z == 2 else "optim_grads_params"),
                ("ckpt_format", "fsdp_dtensor")]
    if z in (2, 3) or (st.dp_overlap > 0 and (lp.dp or 1) > 1):
        # Megatron-FSDP's sharded gradients require the overlapped reduce-scatter; elsewhere the step-time
        # model overlaps the gradient reduction (and ZeRO-1's parameter gather) as the stack does
        out.append(("overlap_grad_reduce", True))
        if z == 1:
            out.append(("overlap_param_gather", True))
    if lp.offload == "cpu":
        if z != 1:
            raise _unsupported(fmt, f"optimizer CPU offload at ZeRO-{z}",
                               "Megatron-LM offloads the optimizer of its distributed optimizer (ZeRO-1): "
                               "--optimizer-cpu-offload needs --use-precision-aware-optimizer, which needs "
                               "--use-distributed-optimizer (arguments.py line 1155, optimizer_config.py)")
        out += [("optimizer_cpu_offload", True), ("optimizer_offload_fraction", 1.0),
                ("use_precision_aware_optimizer", True)]
    out.append(("attention_backend", "flash" if lp.flash_attention else "unfused"))
    out += [("seq_length", lp.seq_len), ("train_iters", lp.train_iters), ("save_interval", lp.save_interval_steps)]
    if lp.save_mode == "async":  # without the persistent worker validate_args turns --async-save off
        out += [("async_save", True), ("use_persistent_ckpt_worker", True)]
    return out


def megatron_layout(stages: Sequence[int]) -> str:
    """Megatron-Core's --pipeline-model-parallel-layout of a stage split: one ``|``-separated entry per stage,
    ``t*n`` = n transformer layers, the embedding ``E`` on the first and the loss ``L`` on the last
    (megatron/core/transformer/pipeline_parallel_layer_layout.py, parse_str_to_list)."""
    parts = [f"t*{n}" for n in stages]
    parts[0], parts[-1] = "E" + parts[0], parts[-1] + "L"
    return "|".join(parts)


def _layout_stages(layout: str) -> tuple[int, ...]:
    """The inverse of :func:`megatron_layout`: transformer layers per stage."""
    return tuple(sum(int(n) for n in re.findall(r"t\*(\d+)", part)) for part in layout.split("|"))


MEGATRON_DISPATCHERS = {"alltoall": "alltoall", "flex": "flex", "allgather": "allgather"}
"""tpopt stack moe_dispatcher (catalogs/stacks.toml) -> Megatron-Core moe_token_dispatcher_type (Megatron's
default, allgather, is not what the step-time model costs; "flex" runs on the backend of
catalogs/frameworks/megatron-lm.toml [flex_dispatcher], on the card makers it lists: :func:`megatron_stack`)."""


def megatron_stack(sc: Scenario, accelerator: str) -> tuple[StackProfile, str]:
    """The stack the Megatron-LM and Megatron-Bridge exports write for a plan on ``accelerator``: the scenario's,
    except that a MoE model's flex dispatcher becomes the catalog's fallback (alltoall) on a card whose maker
    (accelerators.toml ``vendor``) the flex backend's software does not run on (catalogs/frameworks/megatron-lm.toml
    [flex_dispatcher]); and the one line saying why ("" where the stack's dispatcher is written)."""
    if not sc.model.moe:
        return sc.stack, ""
    fallback, why = dispatcher_on_card(sc.stack.moe_dispatcher, accelerator, sc.system(accelerator).acc.vendor)
    if not why:
        return sc.stack, ""
    costed = "" if sc.moe.dispatcher_on(accelerator) == STACK_DISPATCHERS[fallback] else (
        f"; the plan was costed with the {sc.moe.dispatcher_on(accelerator)} dispatch: set [moe] dispatcher = "
        f"\"{STACK_DISPATCHERS[fallback]}\" to cost what this runs")
    return replace(sc.stack, moe_dispatcher=fallback), (
        f"MoE token dispatcher: {fallback}, not the stack's {sc.stack.moe_dispatcher}: {why} "
        f"(catalogs/frameworks/megatron-lm.toml [flex_dispatcher]){costed}")


def megatron_notes(sc: Scenario, accelerator: str) -> list[str]:
    """The lines the Megatron-LM and Megatron-Bridge exports of a plan on ``accelerator`` state in their header and
    on stderr: the dispatcher written where the stack's does not run (:func:`megatron_stack`), and the recipe's
    settings the plan was costed without because a card's maker does not run them (MoeOptions.vendor_note: the
    export writes none of them either)."""
    why = megatron_stack(sc, accelerator)[1]
    return [n for n in (why, sc.moe.vendor_note(accelerator) if sc.model.moe else "") if n]


MEGATRON_FP8_RECIPES = {"current": "tensorwise", "delayed": "delayed"}
"""tpopt stack fp8_recipe -> Megatron-Core fp8_recipe: per-tensor current scaling is "tensorwise"."""


def megatron_environment(lp: LaunchPlan) -> dict[str, str]:
    """The environment variables Megatron-LM's validate_args requires of the plan's launch: with tensor or
    context parallelism and no Megatron-FSDP, ``CUDA_DEVICE_MAX_CONNECTIONS=1`` (arguments.py asserts it before
    Blackwell, so that communication kernels are queued in issue order); Megatron-FSDP asserts it is not 1 (left
    unset: nothing to export)."""
    fsdp = lp.zero_stage in (2, 3)
    if not fsdp and ((lp.tp or 1) > 1 or (lp.cp or 1) > 1):
        return {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    return {}


MEGATRON_PRECISION: dict[str, tuple[tuple[str, object], ...]] = {
    "bf16-mixed": (("bf16", True), ("grad_reduce_in_bf16", True)),
    "bf16-mixed-fp32-grad": (("bf16", True),),
    "fp8-mixed": (("bf16", True), ("grad_reduce_in_bf16", True), ("fp8_format", "hybrid")),
    "mxfp8-mixed": (("bf16", True), ("grad_reduce_in_bf16", True), ("fp8_format", "e4m3"), ("fp8_recipe", "mxfp8")),
    "fp16-mixed-fp32-grad": (("fp16", True),),
}
"""tpopt precision recipes -> Megatron-LM flags: BF16 with gradients reduced in BF16 (2-byte gradients) or in
FP32 (Megatron's default); FP8 = BF16 with the hybrid FP8 format (E4M3 forward, E5M2 backward); MXFP8 = BF16 with
``--fp8-format e4m3 --fp8-recipe mxfp8`` (arguments.py at core_v0.15.0, _add_transformer_engine_args: the recipe
choices tensorwise, delayed, mxfp8, blockwise; E4M3 as Megatron-Bridge's bf16_with_mxfp8_mixed sets it)."""


def _precision(fmt: str, lp: LaunchPlan, table: Mapping[str, Sequence[tuple[str, object]]]) -> list[tuple[str, object]]:
    if lp.precision not in table:
        raise _unsupported(fmt, f"precision {lp.precision}", f"mapped recipes are {', '.join(table)}")
    return list(table[str(lp.precision)])


# ---------------------------------------------------------------------------------------------
# Megatron-LM: command-line arguments

MEGATRON_NAMES = {"virtual_stages": "num_virtual_stages_per_pipeline_rank",
                  "first_stage_layers": "decoder_first_pipeline_num_layers",
                  "last_stage_layers": "decoder_last_pipeline_num_layers"}


def megatron_values(lp: LaunchPlan, moe: bool, stack: StackProfile | None = None) -> dict[str, object]:
    """Megatron-LM argument -> value (True: a store_true flag)."""
    pairs = _megatron_like("megatron", lp, moe, stack) + _precision("megatron", lp, MEGATRON_PRECISION)
    pairs += _fp8_recipe("megatron", lp, stack)
    pairs += [("save", CHECKPOINT_DIR), ("load", CHECKPOINT_DIR)]
    return {"--" + MEGATRON_NAMES.get(k, k).replace("_", "-"): v for k, v in pairs}


def _header(fmt: str, title: str, summary: str, prefix: str = "# ") -> list[str]:
    f = schema(fmt).framework
    return [f"{prefix}{title}: {summary}",
            f"{prefix}written by tpopt export; checked against {f['name']} {f['version']} (commit {f['commit'][:12]}),",
            f"{prefix}as transcribed in catalogs/frameworks/{SCHEMA_FILES[fmt]}"]


CHECKPOINT_DIR = "${CHECKPOINT_DIR}"
"""The checkpoint directory placeholder of the Megatron-LM export (the shell expands it; the text stops
early when it is unset)."""


def _fp8_recipe(fmt: str, lp: LaunchPlan, stack: StackProfile | None) -> list[tuple[str, object]]:
    """The FP8 scaling recipe the step-time model assumed (the stack's fp8_recipe), for an FP8 plan."""
    if lp.precision != "fp8-mixed":
        return []
    recipe = (stack or StackProfile()).fp8_recipe
    if recipe not in MEGATRON_FP8_RECIPES:
        raise _unsupported(fmt, f"FP8 scaling {recipe!r}", f"mapped recipes are {', '.join(MEGATRON_FP8_RECIPES)}")
    return [("fp8_recipe", MEGATRON_FP8_RECIPES[recipe])]


def _megatron_env_lines(lp: LaunchPlan) -> list[str]:
    """Shell lines setting what :func:`megatron_environment` requires (and unsetting what Megatron-FSDP forbids)."""
    env = megatron_environment(lp)
    lines = [f"export {k}={v}  # required by Megatron-LM validate_args with TP / CP (arguments.py)"
             for k, v in env.items()]
    if lp.zero_stage in (2, 3):
        lines.append("unset CUDA_DEVICE_MAX_CONNECTIONS  # Megatron-FSDP asserts it is not 1 (arguments.py)")
    return lines


def megatron_text(lp: LaunchPlan, moe: bool, summary: str, stack: StackProfile | None = None,
                  notes: Sequence[str] = ()) -> str:
    """``notes``: lines for the header (:func:`megatron_stack`'s why)."""
    values = megatron_values(lp, moe, stack)
    validate("megatron", values)
    la = schema("megatron").launcher
    lines = _header("megatron", "Megatron-LM arguments", summary) + [f"# {n}" for n in notes]
    lines += [f"# validated with Megatron-LM's own parse_args + validate_args at {VALIDATED_WITH}",
              "# the model, data, optimizer and tokenizer arguments come from your own script:",
              f"# launch: torchrun {la['nodes']} {lp.nodes} {la['per_node']} {lp.cards_per_node} pretrain_gpt.py "
              '"${TPOPT_ARGS[@]}" ...']
    lines += _megatron_env_lines(lp)
    mode = "asynchronously" if lp.save_mode == "async" else "synchronously"
    lines += [f"# checkpoints: saved {mode} every {lp.save_interval_steps} steps (the plan's interval) into and "
              "resumed from CHECKPOINT_DIR",
              ': "${CHECKPOINT_DIR:?set CHECKPOINT_DIR to the checkpoint directory}"', "TPOPT_ARGS=("]
    for k, v in values.items():
        if v is True:
            lines.append(f"    {k}")
        elif isinstance(v, list):
            lines.append(f"    {k} {' '.join(v)}")
        elif v == CHECKPOINT_DIR:
            lines.append(f'    {k} "{v}"')
        else:
            lines.append(f"    {k} {_scalar(v)}")
    return "\n".join(lines + [")"]) + "\n"


VALIDATED_WITH = "megatron-core 0.18.0 (PyPI)"
"""Where the Megatron exports are checked (tests/test_export_megatron_run.py, the ``frameworks`` extra)."""


def _scalar(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def _launch_line(text: str) -> tuple[int | None, int | None]:
    """(nodes, cards per node) from the ``# launch: torchrun`` line."""
    la = schema("megatron").launcher
    m = re.search(rf"^# launch: torchrun {re.escape(la['nodes'])} (\d+) {re.escape(la['per_node'])} (\d+)", text,
                  re.MULTILINE)
    return (int(m.group(1)), int(m.group(2))) if m else (None, None)


def parse_megatron(text: str, layers: int) -> LaunchPlan:
    """A :class:`LaunchPlan` from :func:`megatron_text` output (the TPOPT_ARGS array and the launch line)."""
    body = text.split("TPOPT_ARGS=(", 1)[1].rsplit(")", 1)[0]
    tokens = shlex.split(body)
    sch = schema("megatron")
    values: dict[str, object] = {}
    i = 0
    while i < len(tokens):
        key = tokens[i]
        typ = sch.args[key]["type"]
        if typ == "flag":
            values[key], i = True, i + 1
        elif typ == "list":
            j = i + 1
            while j < len(tokens) and not tokens[j].startswith("--"):
                j += 1
            values[key], i = tokens[i + 1:j], j
        else:
            values[key], i = (int if typ == "int" else float if typ == "float" else str)(tokens[i + 1]), i + 2
    generic = {k[2:].replace("-", "_"): v for k, v in values.items()}
    inverse = {v: k for k, v in MEGATRON_NAMES.items()}
    generic = {inverse.get(k, k): v for k, v in generic.items()}
    nodes, per = _launch_line(text)
    return _from_megatron_like(generic, nodes, per, _megatron_precision(generic))


def _megatron_precision(g: Mapping[str, object]) -> str:
    flags = tuple(sorted(k for k in ("bf16", "fp16", "grad_reduce_in_bf16") if g.get(k)))
    for name, pairs in MEGATRON_PRECISION.items():
        want = dict(pairs)
        if tuple(sorted(k for k in ("bf16", "fp16", "grad_reduce_in_bf16") if want.get(k))) == flags and \
                want.get("fp8_format") == g.get("fp8_format") and \
                ("fp8_recipe" not in want or want["fp8_recipe"] == g.get("fp8_recipe")):
            return name
    raise ExportError(f"megatron: no tpopt precision has the flags {flags}")


def _from_megatron_like(g: Mapping[str, Any], nodes: int | None, per: int | None, precision: str) -> LaunchPlan:
    """The inverse of :func:`_megatron_like` (generic names)."""
    tp, pp, cp = int(g.get("tensor_model_parallel_size", 1)), int(g.get("pipeline_model_parallel_size", 1)), \
        int(g.get("context_parallel_size", 1))
    cards = (nodes or 0) * (per or 0)
    dp = cards // (tp * pp * cp) if cards else None
    mb, gb = int(g["micro_batch_size"]), int(g["global_batch_size"])
    if g.get("use_megatron_fsdp"):
        zero = 2 if g.get("data_parallel_sharding_strategy") == "optim_grads" else 3
    else:
        zero = 1 if g.get("use_distributed_optimizer") else 0
    gran = g.get("recompute_granularity")
    if gran == "full":
        recompute = "full"
    elif gran == "selective":
        inverse = {v: k for k, v in MEGATRON_MODULES.items()}
        groups = {inverse[m] for m in g["recompute_modules"] if m in inverse}
        recompute = "+".join(x for x in ("norm", "mlp", "attn") if x in groups)
    else:
        recompute = "none"
    moe = "expert_model_parallel_size" in g
    virtual = int(g.get("virtual_stages", 1) or 1)
    return LaunchPlan(
        nodes=nodes, cards_per_node=per, tp=tp, pp=pp, cp=cp, dp=dp,
        ep=int(g["expert_model_parallel_size"]) if moe else 1,
        expert_tp=int(g["expert_tensor_parallel_size"]) if moe else None,
        capacity_factor=float(g["moe_expert_capacity_factor"]) if g.get("moe_expert_capacity_factor") else None,
        micro_batch=mb, global_batch=gb, grad_accum=gb // (mb * dp) if dp else None, zero_stage=zero,
        offload="cpu" if g.get("optimizer_cpu_offload") else "none", recompute=recompute,
        schedule=("interleaved" if virtual > 1 else "1f1b") if pp > 1 else None, virtual_stages=virtual,
        sequence_parallel=bool(g.get("sequence_parallel", False)),
        flash_attention=g.get("attention_backend") == "flash",
        first_stage_layers=int(g.get("first_stage_layers", 0)), last_stage_layers=int(g.get("last_stage_layers", 0)),
        seq_len=int(g["seq_length"]), precision=precision, train_iters=int(g["train_iters"]),
        save_interval_steps=int(g["save_interval"]), save_mode="async" if g.get("async_save") else "sync",
        stage_layout=_layout_stages(str(g["pipeline_model_parallel_layout"]))
        if g.get("pipeline_model_parallel_layout") else ())


# ---------------------------------------------------------------------------------------------
# NeMo Megatron-Bridge: Hydra overrides of a recipe's ConfigContainer

BRIDGE_FIELDS = {
    "tensor_model_parallel_size": "model.tensor_model_parallel_size",
    "pipeline_model_parallel_size": "model.pipeline_model_parallel_size",
    "context_parallel_size": "model.context_parallel_size",
    "virtual_stages": "model.virtual_pipeline_model_parallel_size",
    "first_stage_layers": "model.num_layers_in_first_pipeline_stage",
    "last_stage_layers": "model.num_layers_in_last_pipeline_stage",
    "pipeline_model_parallel_layout": "model.pipeline_model_parallel_layout",
    "expert_model_parallel_size": "model.expert_model_parallel_size",
    "expert_tensor_parallel_size": "model.expert_tensor_parallel_size",
    "moe_expert_capacity_factor": "model.moe_expert_capacity_factor",
    "moe_pad_expert_input_to_capacity": "model.moe_pad_expert_input_to_capacity",
    "moe_token_dispatcher_type": "model.moe_token_dispatcher_type",
    "moe_flex_dispatcher_backend": "model.moe_flex_dispatcher_backend",
    "moe_grouped_gemm": "model.moe_grouped_gemm",
    "sequence_parallel": "model.sequence_parallel",
    "recompute_granularity": "model.recompute_granularity",
    "recompute_method": "model.recompute_method",
    "recompute_num_layers": "model.recompute_num_layers",
    "recompute_modules": "model.recompute_modules",
    "attention_backend": "model.attention_backend",
    "seq_length": "model.seq_length",
    "micro_batch_size": "train.micro_batch_size",
    "global_batch_size": "train.global_batch_size",
    "train_iters": "train.train_iters",
    "use_megatron_fsdp": "ddp.use_megatron_fsdp",
    "data_parallel_sharding_strategy": "ddp.data_parallel_sharding_strategy",
    "overlap_grad_reduce": "ddp.overlap_grad_reduce",
    "overlap_param_gather": "ddp.overlap_param_gather",
    "optimizer_cpu_offload": "optimizer.optimizer_cpu_offload",
    "optimizer_offload_fraction": "optimizer.optimizer_offload_fraction",
    "use_precision_aware_optimizer": "optimizer.use_precision_aware_optimizer",
    "ckpt_format": "checkpoint.ckpt_format",
    "save_interval": "checkpoint.save_interval",
    "async_save": "checkpoint.async_save",
    "use_persistent_ckpt_worker": "checkpoint.use_persistent_ckpt_worker",
}
"""Megatron-Core setting -> ConfigContainer field. The distributed optimizer is set in both ddp and optimizer."""
BRIDGE_OFF: dict[str, object] = {
    "model.sequence_parallel": False,
    "model.virtual_pipeline_model_parallel_size": None,
    "model.num_layers_in_first_pipeline_stage": None,
    "model.num_layers_in_last_pipeline_stage": None,
    "model.recompute_granularity": None,
    "model.recompute_method": None,
    "model.recompute_num_layers": None,
    "model.mtp_num_layers": None,
    "model.account_for_embedding_in_pipeline_split": False,  # Llama 3.1 405B's recipe counts the embedding and
    "model.account_for_loss_in_pipeline_split": False,  # the loss as layers: 128 over PP 14 fails, 126 does not
    "ddp.use_distributed_optimizer": False,
    "optimizer.use_distributed_optimizer": False,
    "ddp.use_megatron_fsdp": False,
    "ddp.overlap_grad_reduce": False,
    "ddp.overlap_param_gather": False,
    "optimizer.optimizer_cpu_offload": False,
    "optimizer.use_precision_aware_optimizer": False,
    "checkpoint.ckpt_format": "torch_dist",
    "checkpoint.async_save": False,
    "checkpoint.use_persistent_ckpt_worker": False,
    **{f"optimizer.{k}_dtype": "float32" for k in ("main_params", "main_grads", "exp_avg", "exp_avg_sq")},
}
"""What a recipe may have switched on and the plan has off: written explicitly (Hydra ``null`` = None), so the
recipe's own values cannot survive (a recipe's full recompute on a no-recompute plan, its distributed optimizer
on ZeRO-0), and the optimizer's FP32 master weights, gradients and moments the plan's memory holds (DeepSeek-V3's
recipe keeps BF16 ones, which Megatron-Core allows only with the precision-aware optimizer; Bridge's override
reader turns the names into torch dtypes)."""
BRIDGE_OFF_MOE: dict[str, object] = {"model.moe_expert_capacity_factor": None,
                                     "model.moe_pad_expert_input_to_capacity": False}
"""The same for a MoE model's dropless plan."""
BRIDGE_PRECISION: dict[tuple[str, str], str] = {
    ("bf16-mixed", ""): "bf16_mixed",
    ("bf16-mixed-fp32-grad", ""): "bf16_mixed",
    ("fp8-mixed", "current"): "bf16_with_fp8_current_scaling_mixed",
    ("fp8-mixed", "delayed"): "bf16_with_fp8_delayed_scaling_mixed",
    ("mxfp8-mixed", ""): "bf16_with_mxfp8_mixed",
}
"""(tpopt precision, the stack's FP8 scaling) -> Megatron-Bridge mixed-precision recipe name
(src/megatron/bridge/training/mixed_precision.py; bf16_with_mxfp8_mixed: fp8 "e4m3", fp8_recipe "mxfp8", v0.5.0
line 255): recipes hold ``mixed_precision`` as such a name, which a
field override (``mixed_precision.bf16=true``) cannot enter. Bridge's BF16 recipes reduce gradients in FP32
(grad_reduce_in_fp32 = True) and overwrite the DDP setting at setup: stated in the export where the plan
assumed BF16 gradients."""
BRIDGE_RECIPES = {
    "gpt3-175b": "megatron.bridge.recipes.gpt.gpt3_175b.gpt3_175b_pretrain_config",
    "llama3-8b": "megatron.bridge.recipes.llama.llama3.llama3_8b_pretrain_config",
    "llama3-70b": "megatron.bridge.recipes.llama.llama3.llama3_70b_pretrain_config",
    "llama3-405b": "megatron.bridge.recipes.llama.llama3.llama31_405b_pretrain_config",
    "qwen3-8b": "megatron.bridge.recipes.qwen.qwen3.qwen3_8b_pretrain_config",
    "qwen3-30b-a3b": "megatron.bridge.recipes.qwen.qwen3_moe.qwen3_30b_a3b_pretrain_config",
    "deepseek-v3": "megatron.bridge.recipes.deepseek.deepseek_v3.deepseek_v3_pretrain_config",
}
"""tpopt catalog model -> the Megatron-Bridge v0.5.0 pre-training recipe the export names (src/megatron/bridge/
recipes/); other models: the user's recipe."""
BRIDGE_RECIPE_DEFERS_EMBEDDING_WGRAD = ("gpt3-175b",)
"""Recipes whose CommOverlapConfig defers the embedding's weight gradient (gpt3_175b.py: defer_embedding_wgrad_compute
= True), which Megatron-Core rejects without pipeline parallelism (model_parallel_config.py: "Cannot defer
embedding wgrad compute when pipeline model parallel is not used"). Recipes without a CommOverlapConfig hold
``comm_overlap = None``, where the override cannot enter: it is written only for these."""
BRIDGE_FP32_GRADS = ("bf16-mixed-fp32-grad",)
"""The tpopt precisions whose gradients Bridge's recipes reduce as the plan assumed (FP32)."""


def _bridge_precision(lp: LaunchPlan, stack: StackProfile | None) -> str:
    scaling = (stack or StackProfile()).fp8_recipe if lp.precision == "fp8-mixed" else ""
    name = BRIDGE_PRECISION.get((str(lp.precision), scaling))
    if name is None:
        raise _unsupported("nemo", f"precision {lp.precision}" + (f" with {scaling} FP8 scaling" if scaling else ""),
                           "mapped recipes are " + ", ".join(sorted({p for p, _ in BRIDGE_PRECISION})))
    return name


def nemo_values(lp: LaunchPlan, moe: bool, stack: StackProfile | None = None, model: str = "",
                mtp: int = 0) -> dict[str, object]:
    """The overrides; ``model``: tpopt's model name, for what its Bridge recipe sets that the plan must undo;
    ``mtp``: the model's multi-token-prediction depth (DeepSeek-V3's recipe has 1; the catalog plans 0)."""
    out: dict[str, object] = dict(BRIDGE_OFF, **(BRIDGE_OFF_MOE if moe else {}))
    if mtp:
        out["model.mtp_num_layers"] = mtp
    if model in BRIDGE_RECIPE_DEFERS_EMBEDDING_WGRAD and (lp.pp or 1) == 1:
        out["comm_overlap.defer_embedding_wgrad_compute"] = False
    if lp.pp and lp.pp > 1:  # a recipe's own layout (DeepSeek-V3's) would override the stage split
        out["model.pipeline_model_parallel_layout"] = None
    for k, v in _megatron_like("nemo", lp, moe, stack):
        if k == "use_distributed_optimizer":
            out["ddp.use_distributed_optimizer"] = v
            out["optimizer.use_distributed_optimizer"] = v
        else:
            out[BRIDGE_FIELDS[k]] = v
    layout = out.get("model.pipeline_model_parallel_layout")
    if mtp and isinstance(layout, str):  # the MTP layers before the loss on the last stage, as Megatron-Core's
        out["model.pipeline_model_parallel_layout"] = layout[:-1] + "m" * mtp + "L"  # layout count asserts
    if lp.zero_stage in (2, 3):  # Megatron-FSDP runs on the distributed optimizer (Bridge switches it on)
        out["ddp.use_distributed_optimizer"] = out["optimizer.use_distributed_optimizer"] = True
    out["dataset.sequence_length"] = lp.seq_len  # ConfigContainer.validate asserts it equals model.seq_length
    out["mixed_precision"] = _bridge_precision(lp, stack)
    return out


def _hydra(v: object) -> str:
    if v is None:
        return "null"
    if isinstance(v, list):
        return "[" + ",".join(v) + "]"
    return _scalar(v)


NEMO_PRECISION_NOTE = "# tpopt precision: "


def nemo_text(lp: LaunchPlan, moe: bool, summary: str, stack: StackProfile | None = None, model: str = "",
              mtp: int = 0, notes: Sequence[str] = ()) -> str:
    """``notes``: lines for the header (:func:`megatron_stack`'s why)."""
    values = nemo_values(lp, moe, stack, model, mtp)
    validate("nemo", {k: v for k, v in values.items() if v is not None})
    la = schema("megatron").launcher
    lines = _header("nemo", "NeMo Megatron-Bridge recipe overrides (Hydra syntax)", summary) + [f"# {n}" for n in notes]
    lines += ["# pass them after your recipe script; the recipe supplies the model, data and optimizer:",
              f"# launch: torchrun {la['nodes']} {lp.nodes} {la['per_node']} {lp.cards_per_node} <recipe script> "
              "<these overrides>"]
    if model in BRIDGE_RECIPES:
        lines.append(f"# recipe: {BRIDGE_RECIPES[model]} (Megatron-Bridge v0.5.0)")
    lines += [f"# environment: {line}" for line in _megatron_env_lines(lp)]
    lines.append(f"{NEMO_PRECISION_NOTE}{lp.precision}")
    if lp.precision not in BRIDGE_FP32_GRADS:
        lines.append(f"# gradients: Bridge's {values['mixed_precision']} reduces them in FP32 (4 B/param); the plan "
                     "assumed BF16 (2 B/param): evaluate it with bf16-mixed-fp32-grad to check it still fits")
    lines += [f"{k}={_hydra(v)}" for k, v in values.items()]
    return "\n".join(lines) + "\n"


def _hydra_value(text: str, typ: str) -> object:
    if text == "null":
        return None
    if typ == "list":
        return [x for x in text.strip("[]").split(",") if x]
    if typ == "bool":
        return text == "true"
    if typ == "int":
        return int(text)
    if typ == "float":
        return float(text)
    return text


def parse_nemo(text: str, layers: int) -> LaunchPlan:
    sch = schema("nemo")
    values = {}
    precision = None
    for line in text.splitlines():
        if line.startswith(NEMO_PRECISION_NOTE):
            precision = line[len(NEMO_PRECISION_NOTE):].strip()
        if line.startswith("#") or "=" not in line:
            continue
        k, v = line.split("=", 1)
        values[k] = _hydra_value(v, sch.args[k]["type"])
    inverse = {v: k for k, v in BRIDGE_FIELDS.items()}
    g: dict[str, object] = {inverse[k]: v for k, v in values.items()
                            if k in inverse and v is not None and v is not False}
    if values.get("ddp.use_distributed_optimizer"):
        g["use_distributed_optimizer"] = True
    name = values.get("mixed_precision")
    if precision is None or all(name != v for (p, _), v in BRIDGE_PRECISION.items() if p == precision):
        raise ExportError(f"nemo: no tpopt precision has the recipe {name!r} ({precision})")
    nodes, per = _launch_line(text)
    return _from_megatron_like(g, nodes, per, precision)


# ---------------------------------------------------------------------------------------------
# torchtitan: a TOML job config

TORCHTITAN_SCHEDULES = {"1f1b": "1F1B", "interleaved": "Interleaved1F1B", "fill-drain": "GPipe"}
"""tpopt schedule -> torchtitan pipeline_parallel_schedule (torch.distributed.pipelining schedules)."""
TORCHTITAN_PRECISION = {"bf16-mixed-fp32-grad": "bfloat16", "bf16-mixed": "bfloat16", "fp8-mixed": "bfloat16"}
"""tpopt precision -> training.mixed_precision_param. FSDP2 computes in BF16 and reduces gradients into the FP32
sharded parameters' gradients (training.mixed_precision_reduce allows "float32" only, job_config.py line 290);
DDP (ZeRO-0 on data parallelism alone) runs under torch.autocast with FP32 parameters and gradients
(torchtitan/distributed/utils.py maybe_enable_amp). Either way torchtitan keeps FP32 gradients: a bf16-mixed or
fp8-mixed plan is exported only when it still fits with them (:func:`torchtitan_fits`, 18 B/param)."""
TORCHTITAN_FP8 = {"model.converters": ["quantize.linear.float8"], "quantize.linear.float8.recipe_name": "tensorwise"}
"""fp8-mixed: torchao's Float8Linear with dynamic (current) tensor-wise scaling (components/quantization/float8.py
line 238 registers the converter; job_config.py line 738 the recipe); the weights stay BF16 between steps
(enable_fsdp_float8_all_gather off), as tpopt's fp8-mixed recipe stores them without low-precision parameters."""


def torchtitan_zero(lp: LaunchPlan) -> int | None:
    """The ZeRO stage torchtitan runs for the plan: ZeRO-0 with TP, PP or CP becomes FSDP2 without resharding
    (ZeRO-2) -- torchtitan's DDP is one-dimensional ("DDP has not supported > 1D parallelism",
    models/llama3/infra/parallelize.py line 151) and its autocast is off under TP or PP. The same gradient
    traffic (reduce-scatter + all-gather = all-reduce) and less memory than the plan's replicas."""
    if lp.zero_stage == 0 and int(lp.tp or 1) * int(lp.pp or 1) * int(lp.cp or 1) > 1:
        return 2
    return lp.zero_stage


def torchtitan_runs(lp: LaunchPlan) -> LaunchPlan:
    """The plan as torchtitan runs it: :func:`torchtitan_zero`'s stage, FP32 gradients (BF16 or FP8 compute)."""
    precision = lp.precision if lp.precision == "fp8-mixed" else "bf16-mixed-fp32-grad"
    return replace(lp, zero_stage=torchtitan_zero(lp), precision=precision if lp.precision else None)


def torchtitan_fits(sc: Scenario, ev: Evaluation) -> str | None:
    """A bf16-mixed or fp8-mixed plan with torchtitan's FP32 gradients: the memory check re-run at
    bf16-mixed-fp32-grad (18 B/param, the BF16 weights FP8 training keeps as well). Raises
    :class:`ExportError` when the plan fitted and no longer does; returns the note to print (None when the plan
    is already at FP32 gradients)."""
    if sc.task.precision not in ("bf16-mixed", "fp8-mixed"):
        return None
    at = evaluate(replace(sc, task=replace(sc.task, precision="bf16-mixed-fp32-grad")), ev.plan)
    mem, was = at.constraint(F.MEMORY_PER_CARD), ev.constraint(F.MEMORY_PER_CARD)
    figures = f"{mem.value:,.1f} of {mem.limit:,.1f} {mem.unit} per card"
    if was.satisfied and not mem.satisfied:
        raise _unsupported("torchtitan", f"{sc.task.precision} recipe with 2-byte gradients",
                           f"torchtitan keeps FP32 gradients (18 B/param): the plan would need {figures}")
    return f"torchtitan keeps FP32 gradients (18 B/param, not the plan's 16): still fits, {figures}"


def torchtitan_notes(lp: LaunchPlan) -> list[str]:
    """How torchtitan runs the plan where it differs from the plan's wording."""
    if torchtitan_zero(lp) != lp.zero_stage:
        return ["ZeRO-0 with TP/PP/CP is written as FSDP2 without resharding (ZeRO-2): torchtitan's DDP is "
                "one-dimensional; the same gradient traffic and less memory than the plan's replicas"]
    return []


def torchtitan_values(lp: LaunchPlan, moe: bool, layers: int) -> dict[str, object]:
    fmt = "torchtitan"
    z = torchtitan_zero(lp)
    if z == 1:
        raise _unsupported(fmt, "ZeRO-1 (optimizer states sharded alone)",
                           "torchtitan replicates (DDP, ZeRO-0) or shards with FSDP2 (ZeRO-2 / ZeRO-3)")
    if lp.offload == "cpu":
        raise _unsupported(fmt, "optimizer CPU offload", "torchtitan's training.enable_cpu_offload (FSDP2 "
                           "CPUOffloadPolicy) offloads parameters and gradients too, not only the optimizer states")
    if lp.tp and lp.tp > 1 and not lp.sequence_parallel:
        raise _unsupported(fmt, "tensor parallelism without sequence parallelism",
                           "torchtitan's TP plans shard norms over the sequence (SequenceParallel) always")
    if not lp.flash_attention:
        raise _unsupported(fmt, "attention without a fused (flash) kernel",
                           "torchtitan runs scaled_dot_product_attention / FlexAttention")
    if moe and lp.capacity_factor:
        raise _unsupported(fmt, f"capacity factor {lp.capacity_factor}", "torchtitan's MoE is dropless")
    if moe and lp.expert_tp not in (1, lp.tp):
        raise _unsupported(fmt, f"expert TP {lp.expert_tp} with TP {lp.tp}",
                           "torchtitan supports expert TP 1 or the same as TP (job_config.py line 464)")
    if lp.recompute not in ("none", "full"):
        raise _unsupported(fmt, f"recompute of the groups {lp.recompute}",
                           "torchtitan's activation_checkpoint.mode is none, full, selective per layer or per op")
    if lp.precision not in TORCHTITAN_PRECISION:
        raise _unsupported(fmt, f"precision {lp.precision}", "torchtitan trains BF16 (FSDP2 mixed precision or "
                           f"autocast) or FP8 (Float8Linear): mapped recipes are {', '.join(TORCHTITAN_PRECISION)}")
    dp = int(lp.dp or 1)
    out: dict[str, object] = {
        "training.local_batch_size": int(lp.micro_batch or 1) * (int(lp.grad_accum or 1) if (lp.pp or 1) > 1 else 1),
        "training.global_batch_size": lp.global_batch, "training.seq_len": lp.seq_len, "training.steps": lp.train_iters,
        "training.mixed_precision_param": TORCHTITAN_PRECISION[str(lp.precision)],
        **(TORCHTITAN_FP8 if lp.precision == "fp8-mixed" else {}),
        "parallelism.data_parallel_replicate_degree": dp if z == 0 else 1,
        "parallelism.data_parallel_shard_degree": 1 if z == 0 else dp,
    }
    if z in (2, 3):
        out["parallelism.fsdp_reshard_after_forward"] = "never" if z == 2 else "always"
    out["parallelism.tensor_parallel_degree"] = lp.tp
    out["parallelism.pipeline_parallel_degree"] = lp.pp
    if lp.pp and lp.pp > 1:
        if lp.schedule not in TORCHTITAN_SCHEDULES:
            raise _unsupported(fmt, f"pipeline schedule {lp.schedule}",
                               f"mapped schedules are {', '.join(TORCHTITAN_SCHEDULES)}")
        per_stage = layers / (lp.pp * int(lp.virtual_stages or 1))
        if lp.first_stage_layers or not float(per_stage).is_integer():
            raise _unsupported(fmt, "uneven pipeline stages", "tpopt maps torchtitan's even split only "
                               "(pipeline_parallel_layers_per_stage with no first/last stage reduction)")
        out.update({"parallelism.pipeline_parallel_schedule": TORCHTITAN_SCHEDULES[str(lp.schedule)],
                    "parallelism.pipeline_parallel_microbatch_size": lp.micro_batch,
                    "parallelism.pipeline_parallel_layers_per_stage": int(per_stage),
                    "parallelism.pipeline_parallel_first_stage_less_layers": 0,
                    "parallelism.pipeline_parallel_last_stage_less_layers": 0})
    out["parallelism.context_parallel_degree"] = lp.cp
    if moe:
        out["parallelism.expert_parallel_degree"] = lp.ep
        out["parallelism.expert_tensor_parallel_degree"] = lp.expert_tp
    out["activation_checkpoint.mode"] = str(lp.recompute)
    out.update({"checkpoint.enable": True, "checkpoint.interval": lp.save_interval_steps,
                "checkpoint.async_mode": "async" if lp.save_mode == "async" else "disabled"})
    return out


def _toml_value(v: object) -> str:
    if isinstance(v, (str, list)):
        return json.dumps(v)
    return _scalar(v)


def torchtitan_text(lp: LaunchPlan, moe: bool, summary: str, layers: int) -> str:
    values = torchtitan_values(lp, moe, layers)
    validate("torchtitan", values)
    lines = _header("torchtitan", "torchtitan job config", summary)
    lines += ["# merge into your train config ([job], [model], [optimizer] and the dataset stay yours);",
              f"# world size {lp.nodes} x {lp.cards_per_node} = the product of the parallel degrees"]
    section = ""
    for k, v in values.items():
        sec, key = k.split(".", 1)
        if sec != section:
            lines += ["", f"[{sec}]"]
            section = sec
        lines.append(f"{key} = {_toml_value(v)}")
    return "\n".join(lines) + "\n"


def parse_torchtitan(text: str, layers: int) -> LaunchPlan:
    t = tomllib.loads(text)
    tr, pa, ac, ck = t["training"], t["parallelism"], t["activation_checkpoint"], t["checkpoint"]
    replicate, shard = pa["data_parallel_replicate_degree"], pa["data_parallel_shard_degree"]
    zero = 0 if shard == 1 else (2 if pa.get("fsdp_reshard_after_forward") == "never" else 3)
    tp, pp, cp = pa["tensor_parallel_degree"], pa["pipeline_parallel_degree"], pa["context_parallel_degree"]
    dp = replicate * shard
    inverse = {v: k for k, v in TORCHTITAN_SCHEDULES.items()}
    schedule = inverse[pa["pipeline_parallel_schedule"]] if pp > 1 else None
    mb = pa["pipeline_parallel_microbatch_size"] if pp > 1 else tr["local_batch_size"]
    gb = tr["global_batch_size"]
    virtual = layers // (pp * pa["pipeline_parallel_layers_per_stage"]) if pp > 1 else 1
    moe = "expert_parallel_degree" in pa
    fp8 = "quantize.linear.float8" in t.get("model", {}).get("converters", [])
    prec = "fp8-mixed" if fp8 else ("bf16-mixed-fp32-grad" if tr["mixed_precision_param"] == "bfloat16" else "fp32")
    return LaunchPlan(
        nodes=None, cards_per_node=None, tp=tp, pp=pp, cp=cp, dp=dp, ep=pa["expert_parallel_degree"] if moe else 1,
        expert_tp=pa["expert_tensor_parallel_degree"] if moe else None, micro_batch=mb, global_batch=gb,
        grad_accum=gb // (mb * dp), zero_stage=zero, recompute=ac["mode"], schedule=schedule, virtual_stages=virtual,
        sequence_parallel=tp > 1, seq_len=tr["seq_len"], precision=prec, train_iters=tr["steps"],
        save_interval_steps=ck["interval"], save_mode="async" if ck["async_mode"] != "disabled" else "sync")


# ---------------------------------------------------------------------------------------------
# DeepSpeed: a config JSON

DEEPSPEED_PRECISION = {"bf16-mixed": "bf16", "fp16-mixed": "fp16"}
"""tpopt precision -> DeepSpeed's bf16 / fp16 section: gradients accumulate in the model dtype when
data_types.grad_accum_dtype is unset (deepspeed/runtime/engine.py line 1451), i.e. 2-byte gradients."""


def deepspeed_values(lp: LaunchPlan, moe: bool) -> dict[str, object]:
    fmt = "deepspeed"
    if lp.cp and lp.cp > 1:
        raise _unsupported(fmt, f"context parallelism (cp {lp.cp})", "DeepSpeed's config has no context-parallel "
                           "size (Ulysses sequence parallelism is set up in model code)")
    if moe and lp.ep and lp.ep > 1:
        raise _unsupported(fmt, f"expert parallelism (ep {lp.ep})", "DeepSpeed sets ep_size on each "
                           "deepspeed.moe.layer.MoE in model code, not in the config")
    if moe and lp.capacity_factor:
        raise _unsupported(fmt, f"capacity factor {lp.capacity_factor}", "DeepSpeed sets it on each MoE layer in "
                           "model code")
    if lp.tp and lp.tp > 1 and lp.sequence_parallel:
        raise _unsupported(fmt, "sequence parallelism under TP", "DeepSpeed's AutoTP training (tensor_parallel."
                           "autotp_size) shards linear layers only (export the plan with --no-sequence-parallel)")
    if lp.tp and lp.tp > 1 and lp.pp and lp.pp > 1:
        raise _unsupported(fmt, f"TP {lp.tp} with PP {lp.pp}", "DeepSpeed's AutoTP training replaces the pipeline "
                           "engine's grid with a TP mesh over all ranks (runtime/engine.py line 653, "
                           "utils/groups.py line 147)")
    if lp.pp and lp.pp > 1 and lp.schedule != "1f1b":
        raise _unsupported(fmt, f"pipeline schedule {lp.schedule}", "DeepSpeed's pipeline engine runs its own 1F1B "
                           "TrainSchedule")
    if lp.pp and lp.pp > 1 and lp.first_stage_layers:
        raise _unsupported(fmt, "uneven pipeline stages", "DeepSpeed partitions layers in PipelineModule (code)")
    if lp.recompute not in ("none", "full"):
        raise _unsupported(fmt, f"recompute of the groups {lp.recompute}", "DeepSpeed checkpoints whole layers "
                           "(deepspeed.checkpointing)")
    if lp.precision not in DEEPSPEED_PRECISION:
        raise _unsupported(fmt, f"precision {lp.precision}", f"mapped recipes are {', '.join(DEEPSPEED_PRECISION)}")
    out: dict[str, object] = {"train_batch_size": lp.global_batch, "train_micro_batch_size_per_gpu": lp.micro_batch,
                              "gradient_accumulation_steps": lp.grad_accum,
                              f"{DEEPSPEED_PRECISION[str(lp.precision)]}.enabled": True,
                              "zero_optimization.stage": lp.zero_stage}
    if lp.offload == "cpu":
        out["zero_optimization.offload_optimizer.device"] = "cpu"
        out["zero_optimization.offload_optimizer.pin_memory"] = True
    if lp.tp and lp.tp > 1:
        # deepspeed.initialize builds DeepSpeedConfig before AutoTP makes its groups: without an mpu the batch
        # check counts every rank (runtime/config.py line 712), so train_batch_size is left for DeepSpeed to derive
        del out["train_batch_size"]
        out["tensor_parallel.autotp_size"] = lp.tp
    if lp.pp and lp.pp > 1:
        # the pipeline engine reads the interval (runtime/pipe/engine.py line 223); the stage count is
        # PipelineModule(num_stages=...) in model code (pipe/module.py line 127), so no pipeline.stages is written
        out["pipeline.activation_checkpoint_interval"] = 1 if lp.recompute == "full" else 0
    return out


def deepspeed_notes(lp: LaunchPlan) -> list[str]:
    """What the JSON cannot carry and model code must do (printed by ``tpopt export`` and the launch script)."""
    notes = []
    if lp.pp and lp.pp > 1:
        notes.append(f"build the model as deepspeed.pipe.PipelineModule(layers, num_stages={lp.pp}): DeepSpeed "
                     "takes the pipeline size from model code, not from the config")
    if lp.tp and lp.tp > 1:
        notes.append(f"train_batch_size is left to DeepSpeed, which counts each TP rank (it derives {lp.tp} x "
                     f"{lp.global_batch}); each step still takes the plan's {lp.global_batch} sequences")
    mode = "asynchronously" if lp.save_mode == "async" else "synchronously"
    notes.append(f"checkpoints: save every {lp.save_interval_steps} steps ({mode}; the plan's interval) with "
                 "engine.save_checkpoint in your training loop: DeepSpeed's config holds no save interval (the "
                 "launch script passes --save-interval)")
    if lp.recompute == "full" and not (lp.pp and lp.pp > 1):
        notes.append("full recompute: DeepSpeed's config turns it on only under its pipeline engine; wrap each "
                     "layer with deepspeed.checkpointing.checkpoint (or call the model's "
                     "gradient_checkpointing_enable())")
    return notes


def _nest(values: Mapping[str, object]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in values.items():
        *path, last = k.split(".")
        d = out
        for p in path:
            d = d.setdefault(p, {})
        d[last] = v
    return out


def _flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, prefix + k + "."))
        else:
            out[prefix + k] = v
    return out


def deepspeed_text(lp: LaunchPlan, moe: bool, summary: str) -> str:
    values = deepspeed_values(lp, moe)
    validate("deepspeed", values, {"data parallel size": int(lp.dp or 1)})
    return json.dumps(_nest(values), indent=2) + "\n"


def parse_deepspeed(text: str, layers: int) -> LaunchPlan:
    v = _flatten(json.loads(text))
    mb, ga = int(v["train_micro_batch_size_per_gpu"]), int(v["gradient_accumulation_steps"])
    gb = int(v["train_batch_size"]) if "train_batch_size" in v else None
    interval = v.get("pipeline.activation_checkpoint_interval")
    prec = next(k for k, s in DEEPSPEED_PRECISION.items() if v.get(f"{s}.enabled"))
    return LaunchPlan(tp=int(v.get("tensor_parallel.autotp_size", 1)), dp=gb // (mb * ga) if gb else None,
                      micro_batch=mb, global_batch=gb, grad_accum=ga, zero_stage=int(v["zero_optimization.stage"]),
                      offload="cpu" if v.get("zero_optimization.offload_optimizer.device") == "cpu" else "none",
                      recompute=None if interval is None else ("full" if interval > 0 else "none"), precision=prec)


# ---------------------------------------------------------------------------------------------
# entry points

PARSERS: dict[str, Callable[[str, int], LaunchPlan]] = {"megatron": parse_megatron, "nemo": parse_nemo,
                                                          "torchtitan": parse_torchtitan, "deepspeed": parse_deepspeed}


def summary_of(sc: Scenario, lp: LaunchPlan, accelerator: str) -> str:
    """One line naming the plan (written into the header of the text formats)."""
    return (f"{sc.model.name} on {accelerator} x {int(lp.nodes or 0) * int(lp.cards_per_node or 0)} "
            f"(TP {lp.tp} / CP {lp.cp} / PP {lp.pp} / DP {lp.dp}, ZeRO-{lp.zero_stage})")


def export_text(fmt: str, sc: Scenario, ev: Evaluation) -> str:
    """The plan as ``fmt``'s launch configuration (validated against the transcribed schema)."""
    if fmt not in FORMATS:
        raise InputError(f"export format {fmt!r} unknown (use one of: {', '.join(FORMATS)})")
    lp = format_launch_plan(fmt, sc, ev)
    moe = sc.model.moe
    summary = summary_of(sc, lp, ev.plan.accelerator)
    if fmt in ("megatron", "nemo"):
        stack = megatron_stack(sc, ev.plan.accelerator)[0]
        notes = megatron_notes(sc, ev.plan.accelerator)
        if fmt == "megatron":
            return megatron_text(lp, moe, summary, stack, notes)
        return nemo_text(lp, moe, summary, stack, sc.model.name, sc.model.mtp_layers, notes)
    if fmt == "torchtitan":
        torchtitan_fits(sc, ev)  # FP32 gradients: refused when the plan no longer fits
        return torchtitan_text(lp, moe, summary, sc.model.layers)
    return deepspeed_text(lp, moe, summary)


def parse(fmt: str, text: str, layers: int) -> LaunchPlan:
    """The :class:`LaunchPlan` an exported text holds (``layers``: the model's transformer layers, which
    torchtitan's layers-per-stage is counted against)."""
    return PARSERS[fmt](text, layers)


def exported(fmt: str, sc: Scenario, ev: Evaluation) -> LaunchPlan:
    """What ``fmt`` carries of the plan (the round trip's expected value): torchtitan as it runs the plan
    (:func:`torchtitan_runs`); DeepSpeed without the global batch under TP and recompute without PP."""
    lp = launch_plan(sc, ev, fmt=fmt).project(CARRIES[fmt])
    if fmt == "torchtitan":
        return torchtitan_runs(lp)
    if fmt == "deepspeed":
        pp = launch_plan(sc, ev, fmt=fmt).pp or 1
        return replace(lp, global_batch=None if (lp.tp or 1) > 1 else lp.global_batch,
                       dp=None if (lp.tp or 1) > 1 else lp.dp, recompute=lp.recompute if pp > 1 else None)
    return lp


__all__ = ["FORMATS", "LaunchPlan", "ExportError", "launch_plan", "export_text", "parse", "exported", "validate",
           "schema", "CARRIES", "plan_from_report", "environment", "export_notes", "launch_script"]


def plan_from_report(d: Mapping[str, Any]) -> Plan:
    """The :class:`Plan` of a ``tpopt solve --json`` or ``tpopt evaluate --json`` report (its ``plan`` object)."""
    p = d.get("plan") if isinstance(d, Mapping) else None
    if not isinstance(p, Mapping):
        raise InputError("--plan: the file holds no plan object (write it with tpopt solve --json or tpopt evaluate "
                         "--json; an infeasible solve has none)")
    try:
        stages = p.get("stage_layers") or []
        uneven = len(stages) > 1 and len(set(stages)) > 1
        return Plan(accelerator=str(p["accelerator"]), cards=int(p["cards"]), zero_stage=int(p["zero_stage"]),
                    tp=int(p["tp"]), cp=int(p.get("cp") or 1), pp=int(p["pp"]), micro_batch=int(p["micro_batch"]),
                    recompute=str(p["recompute"]), offload=str(p["offload"]), schedule=str(p.get("schedule") or "1f1b"),
                    save_interval_s=float(p["save_interval_s"]), save_mode=str(p["save_mode"]),
                    nics_per_host=int(p.get("nics_per_host") or 0),
                    sequence_parallel=p.get("sequence_parallel"), flash_attention=p.get("flash_attention"),
                    first_stage_layers=int(stages[0]) if uneven else 0,
                    last_stage_layers=int(stages[-1]) if uneven else 0,
                    ep=int(p.get("ep") or 1), expert_tp=int(p.get("expert_tp") or 0),
                    capacity_factor=float(p.get("capacity_factor") or 0.0),
                    global_batch=int(p.get("global_batch") or 0))
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"--plan: the plan object is incomplete or malformed ({exc})") from None


# ---------------------------------------------------------------------------------------------
# common to every format: notes, environment, launch script (tpopt export --launch)

ENVIRONMENT: dict[str, Callable[[LaunchPlan], dict[str, str]]] = {}
"""Per format, the environment variables its launch needs (:func:`environment`); formats register here."""


def torchtitan_environment(lp: LaunchPlan) -> dict[str, str]:
    """torchtitan's run_train.sh sets the caching allocator's expandable segments for every run."""
    return {"PYTORCH_ALLOC_CONF": "expandable_segments:True"}


def deepspeed_environment(lp: LaunchPlan) -> dict[str, str]:
    """DeepSpeed's CPU Adam (the offloaded optimizer step) runs OMP_NUM_THREADS threads per rank; torchrun sets 1
    unless told (torch.distributed.run), which serialises the host step the plan's offload time assumes at full host
    speed: the launch gives each rank its share of the host's cores."""
    if lp.offload != "cpu":
        return {}
    return {"OMP_NUM_THREADS": f"${{OMP_NUM_THREADS:-$(( $(nproc) / {int(lp.cards_per_node or 1)} ))}}"}


ENVIRONMENT.update(megatron=megatron_environment, nemo=megatron_environment,  # Bridge runs Megatron-Core's rule
                   torchtitan=torchtitan_environment, deepspeed=deepspeed_environment)


def environment(fmt: str, lp: LaunchPlan) -> dict[str, str]:
    """The environment variables ``fmt`` needs to run ``lp`` (empty where a format needs none)."""
    hook = ENVIRONMENT.get(fmt)
    return hook(lp) if hook else {}


def export_notes(fmt: str, sc: Scenario, ev: Evaluation) -> list[str]:
    """What the user must know beside the exported text: how the framework runs the plan where it differs from
    the plan's wording, and what model code must do (printed on stderr and in the launch script)."""
    lp = format_launch_plan(fmt, sc, ev)
    if fmt == "torchtitan":
        fits = torchtitan_fits(sc, ev)
        return torchtitan_notes(lp) + ([fits] if fits else [])
    if fmt == "deepspeed":
        return deepspeed_notes(lp)
    return megatron_notes(sc, ev.plan.accelerator)  # also in the text's header


WARMUP_SHARE = 0.01
"""The launch script's learning-rate warm-up: 1 % of the plan's steps (a common choice, stated in the script)."""

PLACEHOLDERS = {"DATA_PATH": "your tokenized training data", "TOKENIZER_PATH": "your tokenizer (a directory or file)",
                "CHECKPOINT_DIR": "where checkpoints are saved and resumed from"}


def _train_command(fmt: str, config: str, lp: LaunchPlan, warmup: int) -> list[str]:
    """The program torchrun starts, with the data, tokenizer, checkpoint and schedule placeholders."""
    if fmt == "torchtitan":
        return ["-m torchtitan.train --job.config_file " + shlex.quote(config),
                '--model.name "${MODEL_NAME:?torchtitan model, e.g. llama3}"',
                '--model.flavor "${MODEL_FLAVOR:?e.g. 8B}"',
                '--model.hf_assets_path "$TOKENIZER_PATH"', '--training.dataset_path "$DATA_PATH"',
                '--checkpoint.folder "$CHECKPOINT_DIR"', f"--lr_scheduler.warmup_steps {warmup}"]
    if fmt == "deepspeed":
        return ['"${TRAIN_SCRIPT:?your DeepSpeed training script}" --deepspeed_config ' + shlex.quote(config),
                '--data-path "$DATA_PATH"', '--tokenizer "$TOKENIZER_PATH"', '--save "$CHECKPOINT_DIR"',
                f"--save-interval {lp.save_interval_steps}", f"--train-iters {lp.train_iters}",
                f"--lr-warmup-iters {warmup}"]
    if fmt == "megatron":
        return ['"${MEGATRON_LM:?Megatron-LM checkout}/pretrain_gpt.py" "${TPOPT_ARGS[@]}"',
                '--data-path "$DATA_PATH"', '--tokenizer-type HuggingFaceTokenizer',
                '--tokenizer-model "$TOKENIZER_PATH"',  # --save/--load: in TPOPT_ARGS (megatron_text)
                f"--lr-warmup-iters {warmup}", f"--lr-decay-iters {lp.train_iters}"]
    return ['"${RECIPE_SCRIPT:?your Megatron-Bridge recipe script}" $(grep -v "^#" ' + shlex.quote(config) + ")",
            'dataset.data_path="$DATA_PATH"', 'tokenizer.tokenizer_model="$TOKENIZER_PATH"',
            'checkpoint.save="$CHECKPOINT_DIR"', f"scheduler.lr_warmup_iters={warmup}",
            f"scheduler.lr_decay_iters={lp.train_iters}"]


def launch_script(fmt: str, sc: Scenario, ev: Evaluation, config: str) -> str:
    """A bash launch script for the exported ``config`` file: torchrun on each node, or ``sbatch`` it under Slurm
    (its ``#SBATCH`` lines hold the nodes and GPUs per node); the world size, the environment the format needs
    (:func:`environment`), placeholders for the data, tokenizer and checkpoint paths, and the learning-rate
    schedule over the plan's step count."""
    lp = format_launch_plan(fmt, sc, ev)  # as export_text: the Megatron layouts hold uneven stages
    nodes, per = int(lp.nodes or 1), int(lp.cards_per_node or 1)
    steps = int(lp.train_iters or 1)
    warmup = max(1, round(WARMUP_SHARE * steps))
    lines = ["#!/usr/bin/env bash", f"# {summary_of(sc, lp, ev.plan.accelerator)}",
             f"# written by tpopt export --format {fmt}: {nodes} node(s) x {per} GPU(s) = world size {nodes * per};",
             f"# {steps:,} steps, learning-rate warm-up {warmup:,} steps ({WARMUP_SHARE:.0%} of them, a common "
             "choice: set yours)",
             "# run it with sbatch (Slurm), or on each node with NODE_RANK and MASTER_ADDR set",
             f"#SBATCH --nodes={nodes}", "#SBATCH --ntasks-per-node=1", f"#SBATCH --gpus-per-node={per}",
             "#SBATCH --exclusive", "set -euo pipefail"]
    lines += [f"# {n}" for n in export_notes(fmt, sc, ev)]
    lines += [f': "${{{k}:?{v}}}"' for k, v in PLACEHOLDERS.items()]
    lines += [f'export {k}="{v}"' for k, v in environment(fmt, lp).items()]
    if fmt == "megatron":
        lines.append("source " + shlex.quote(config))
    lines += [f"NNODES={nodes}", f"GPUS_PER_NODE={per}", f"WORLD_SIZE={nodes * per}",
              'if [ -n "${SLURM_JOB_ID:-}" ]; then',
              '  MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
              '  LAUNCH=(srun --ntasks-per-node=1 torchrun --node-rank "$SLURM_NODEID")',
              "else",
              '  LAUNCH=(torchrun --node-rank "${NODE_RANK:-0}")',
              "fi",
              '"${LAUNCH[@]}" --nnodes "$NNODES" --nproc-per-node "$GPUS_PER_NODE" --rdzv-backend c10d \\',
              '  --rdzv-endpoint "${MASTER_ADDR:-localhost}:${MASTER_PORT:-29500}" \\']
    cmd = _train_command(fmt, config, lp, warmup)
    lines += [f"  {c} \\" for c in cmd[:-1]] + [f"  {cmd[-1]}"]
    return "\n".join(lines) + "\n"
