"""`tpopt export --format torchtitan|deepspeed` fed to the framework's own code on CPU, at the version the catalog
names (the ``frameworks`` extra: torch, torchtitan, deepspeed): each torchtitan export is loaded by
torchtitan's ConfigManager into its JobConfig and its degrees by ParallelDims (world size from the plan); each
DeepSpeed JSON by DeepSpeedConfig (batch check included). The plan's settings are read back from the framework's
objects: parallel sizes, batch, micro-batch, ZeRO stage, offload, recompute, precision, checkpoint interval.

Without the extra the module is skipped, except under CI (``CI=true``), where a missing package fails.
Stand-ins, each for one thing a CPU cannot do, none for a rule checked here:

* torchtitan/models/moe/kernels.py compiles a Triton kernel (the MoE token permutation) when torchtitan is
  imported; Triton needs a GPU build. The module is stood in by one whose functions raise: no config rule calls it.
* DeepSpeedConfig asks torch.distributed for the world size (runtime/config.py line 698) and falls back to 1 with
  no process group; the stand-in answers the plan's world size (nodes x GPUs per node) -- the rule it feeds, the
  batch identity train_batch_size = micro x accumulation x data-parallel size, is DeepSpeed's own.
* Under PP, deepspeed.initialize passes the PipelineModule's grid as ``mpu`` (deepspeed/__init__.py line 243); the
  stand-in answers the grid's data-parallel size from DeepSpeed's own PipeDataParallelTopology.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import re
import shlex
import sys
import types
from functools import cache
from pathlib import Path

import pytest

from tpopt import frameworks as FW
from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import build_scenario
from tpopt.models.evaluate import evaluate

ROOT = Path(__file__).resolve().parents[1]


def need(name: str) -> types.ModuleType:
    """The package of the frameworks extra: skipped when absent, except under CI, which installs it."""
    if os.environ.get("CI") == "true":
        return importlib.import_module(name)
    return pytest.importorskip(name)


if importlib.util.find_spec("triton") is None and "torchtitan.models.moe.kernels" not in sys.modules:
    # stand-in for the Triton MoE permutation kernel (see the module docstring): raises if anything calls it
    _kernels = types.ModuleType("torchtitan.models.moe.kernels")

    def _triton_kernel(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the Triton MoE permutation kernel needs a GPU")

    _kernels.generate_permute_indices = _triton_kernel  # type: ignore[attr-defined]
    _kernels.fill_indices_wrapper = _triton_kernel  # type: ignore[attr-defined]
    sys.modules["torchtitan.models.moe.kernels"] = _kernels

need("torch")
manager = need("torchtitan.config.manager")
parallel_dims = need("torchtitan.distributed.parallel_dims")
ds_config = need("deepspeed.runtime.config")
ds_topology = need("deepspeed.runtime.pipe.topology")
schedules = need("torch.distributed.pipelining.schedules")


def test_the_installed_versions_are_the_catalogs():
    from importlib.metadata import version

    assert version("torchtitan") == FW.schema("torchtitan").framework["version"].lstrip("v")
    assert version("deepspeed") == FW.schema("deepspeed").framework["version"].lstrip("v")


# ---------------------------------------------------------------------------------------------
# the frameworks' own readers


def torchtitan_job(text: str, tmp_path: Path, extra: list[str] | None = None):
    """torchtitan's JobConfig of the exported TOML (ConfigManager, as ``torchtitan.train --job.config_file``)."""
    f = tmp_path / "job.toml"
    f.write_text(text)
    return manager.ConfigManager().parse_args(["--job.config_file", str(f), *(extra or [])])


def check_torchtitan(text: str, lp: FW.LaunchPlan, layers: int, tmp_path: Path) -> None:
    """Loaded by torchtitan; its ParallelDims accepts the degrees at the plan's world size; the plan reads back."""
    job = torchtitan_job(text, tmp_path)
    pa, tr = job.parallelism, job.training
    world = int(lp.nodes or 1) * int(lp.cards_per_node or 1)
    pd = parallel_dims.ParallelDims(
        dp_replicate=pa.data_parallel_replicate_degree, dp_shard=pa.data_parallel_shard_degree,
        cp=pa.context_parallel_degree, tp=pa.tensor_parallel_degree, pp=pa.pipeline_parallel_degree,
        ep=pa.expert_parallel_degree, etp=pa.expert_tensor_parallel_degree, world_size=world)
    runs = FW.torchtitan_runs(lp)
    assert (pd.tp, pd.pp, pd.cp) == (lp.tp, lp.pp, lp.cp)
    assert pd.dp_replicate * pd.dp_shard == lp.dp  # the "batch" mesh dimension (parallel_dims.py build_mesh)
    if not pd.fsdp_enabled and pd.dp_replicate_enabled:
        # parallelize.py line 151: DDP only when data parallelism is the only dimension
        assert pd.dp_replicate == world
    assert pd.fsdp_enabled == (runs.zero_stage in (2, 3) or lp.cp != 1)
    if runs.zero_stage in (2, 3) and pd.dp_shard > 1:
        assert pa.fsdp_reshard_after_forward == ("never" if runs.zero_stage == 2 else "always")
    assert tr.seq_len == lp.seq_len and tr.seq_len % pd.seq_len_divisor == 0  # parallelize.py's TP/CP rule
    assert tr.global_batch_size == lp.global_batch
    local = tr.local_batch_size
    assert lp.global_batch % (local * lp.dp) == 0  # train.py's batch rule: global % (local x batch degree)
    if lp.pp and lp.pp > 1:
        assert pa.pipeline_parallel_microbatch_size == lp.micro_batch
        assert local == lp.micro_batch * lp.grad_accum  # one local batch feeds the schedule's micro-batches
        assert schedules.get_schedule_class(pa.pipeline_parallel_schedule) is not None
        assert pa.pipeline_parallel_layers_per_stage * lp.pp * int(lp.virtual_stages or 1) == layers
    else:
        assert local == lp.micro_batch and lp.global_batch // (local * lp.dp) == lp.grad_accum
    assert tr.steps == lp.train_iters and tr.mixed_precision_param == "bfloat16"
    fp8 = "quantize.linear.float8" in job.model.converters
    assert fp8 == (lp.precision == "fp8-mixed")
    if fp8:
        assert job.quantize.linear.float8.recipe_name == "tensorwise"
    assert job.activation_checkpoint.mode == lp.recompute
    assert job.checkpoint.enable and job.checkpoint.interval == lp.save_interval_steps
    assert job.checkpoint.async_mode == ("async" if lp.save_mode == "async" else "disabled")


class PipeGrid:
    """Stand-in for deepspeed.runtime.pipe.topology.PipelineParallelGrid (which needs process groups): its
    data-parallel size from DeepSpeed's own topology over the plan's world."""

    def __init__(self, pp: int, world: int) -> None:
        self.topo = ds_topology.PipeDataParallelTopology(num_pp=pp, num_dp=world // pp)

    def get_data_parallel_world_size(self) -> int:
        return int(self.topo.get_dim("data"))


def deepspeed_config(text: str, lp: FW.LaunchPlan, monkeypatch: pytest.MonkeyPatch):
    """DeepSpeedConfig of the exported JSON as deepspeed.initialize builds it for this plan."""
    world = int(lp.nodes or 1) * int(lp.cards_per_node or 1)
    monkeypatch.setattr(ds_config.dist, "get_rank", lambda *a, **k: 0)
    monkeypatch.setattr(ds_config.dist, "get_world_size", lambda *a, **k: world)
    mpu = PipeGrid(int(lp.pp or 1), world) if (lp.pp or 1) > 1 else None
    return ds_config.DeepSpeedConfig(json.loads(text), mpu)


def check_deepspeed(text: str, lp: FW.LaunchPlan, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = deepspeed_config(text, lp, monkeypatch)
    tp = int(lp.tp or 1)
    assert cfg.train_micro_batch_size_per_gpu == lp.micro_batch
    assert cfg.gradient_accumulation_steps == lp.grad_accum
    # DeepSpeed counts each AutoTP rank in its train batch (no mpu before its TP groups exist): TP x the plan's
    assert cfg.train_batch_size == lp.global_batch * tp
    assert cfg.tensor_parallel_config.autotp_size == (tp if tp > 1 else 0)
    assert cfg.zero_optimization_stage == lp.zero_stage
    assert (cfg.zero_config.offload_optimizer is not None
            and cfg.zero_config.offload_optimizer.device == "cpu") == (lp.offload == "cpu")
    assert cfg.bfloat16_config.enabled == (lp.precision == "bf16-mixed")
    assert cfg.float16_config.enabled == (lp.precision == "fp16-mixed")
    if (lp.pp or 1) > 1:  # read by the pipeline engine (runtime/pipe/engine.py line 223)
        assert cfg.pipeline["activation_checkpoint_interval"] == (1 if lp.recompute == "full" else 0)
    else:
        assert "pipeline" not in json.loads(text)


# ---------------------------------------------------------------------------------------------
# plans: every shipped training example (the plan tpopt solve finds), and chosen layouts


def tables(precision: str = "bf16-mixed") -> dict:
    return {"scenario": {"name": "export-run"}, "model": {"name": "qwen3-1.7b"},
            "task": {"tokens": "10B", "seq_len": 2048, "global_batch": 64, "precision": precision},
            "schedule": {"deadline": "3650d"}, "hardware": {"accelerator": "h100-sxm"},
            "checkpoint": {"save_interval": "1800s", "mode": "async"}}


BASE = dict(accelerator="h100-sxm", cards=16, zero_stage=1, tp=1, pp=1, cp=1, micro_batch=1, dp=0, grad_accum=0,
            offload="none", recompute="none", schedule="1f1b", save_interval_s=1800.0, save_mode="async",
            sequence_parallel=True, flash_attention=True)

LAYOUTS = {  # name: (precision, plan fields)
    "zero0-dp": ("bf16-mixed", dict(zero_stage=0)),
    "zero0-tp": ("bf16-mixed", dict(zero_stage=0, tp=2)),
    "zero0-pp": ("bf16-mixed", dict(zero_stage=0, pp=2, micro_batch=1, recompute="full")),
    "zero1": ("bf16-mixed", dict(zero_stage=1)),
    "zero1-offload": ("bf16-mixed", dict(zero_stage=1, offload="cpu")),
    "zero1-pp": ("bf16-mixed", dict(zero_stage=1, pp=4)),
    "zero2": ("bf16-mixed", dict(zero_stage=2, micro_batch=2)),
    "zero2-offload": ("bf16-mixed", dict(zero_stage=2, offload="cpu")),
    "zero2-pp": ("bf16-mixed", dict(zero_stage=2, pp=2)),
    "zero3": ("bf16-mixed", dict(zero_stage=3, recompute="full")),
    "zero3-tp-nosp": ("bf16-mixed", dict(zero_stage=3, tp=2, sequence_parallel=False)),
    "zero3-offload": ("bf16-mixed", dict(zero_stage=3, offload="cpu")),
    "tp-pp": ("bf16-mixed", dict(zero_stage=1, tp=2, pp=2, sequence_parallel=False)),
    "tp-pp-sp": ("bf16-mixed", dict(zero_stage=3, tp=2, pp=2)),
    "interleaved": ("bf16-mixed", dict(zero_stage=2, pp=2, schedule="interleaved:2")),
    "cp": ("bf16-mixed", dict(zero_stage=3, cp=2)),
    "zero0-cp": ("bf16-mixed", dict(zero_stage=0, cp=2)),
    "fp8": ("fp8-mixed", dict(zero_stage=3, tp=2)),
    "fp8-pp": ("fp8-mixed", dict(zero_stage=2, pp=2)),
    "fp16": ("fp16-mixed", dict(zero_stage=2)),
    "fp32-grad": ("bf16-mixed-fp32-grad", dict(zero_stage=3)),
}


def layout(name: str):
    precision, fields = LAYOUTS[name]
    sc = build_scenario(tables(precision), load_catalog())
    from tpopt.models.plan import Plan

    ev = evaluate(sc, Plan(**{**BASE, **fields}))
    return sc, ev


@cache
def example(name: str):
    """The plan ``tpopt solve`` finds for a shipped example (solved once for both formats)."""
    from tpopt import api

    rep = api.solve(str(ROOT / "examples" / f"{name}.toml"), analysis=False)
    assert rep.best is not None, name
    return rep.best


TRAINING_EXAMPLES = sorted(p.stem for p in (ROOT / "examples").glob("*.toml")
                           if "[rl]" not in p.read_text() and "[[stages]]" not in p.read_text()
                           and "[[sites]]" not in p.read_text()  # one job over sites or mixed pools: no
                           and "[[hardware.pools]]" not in p.read_text())  # framework runs them (export refuses)

EXPECTED = {  # (format, layout): the refusal's words, or None: it exports and passes the framework's checks
    ("torchtitan", "zero1"): "ZeRO-1", ("torchtitan", "zero1-offload"): "ZeRO-1",
    ("torchtitan", "zero1-pp"): "ZeRO-1", ("torchtitan", "tp-pp"): "ZeRO-1",
    ("deepspeed", "tp-pp-sp"): "sequence parallelism under TP", ("torchtitan", "zero2-offload"): "offloads parameters",
    ("torchtitan", "zero3-offload"): "offloads parameters", ("torchtitan", "zero3-tp-nosp"): "without sequence",
    ("torchtitan", "fp16"): "precision fp16-mixed",
    ("deepspeed", "zero0-tp"): "sequence parallelism under TP", ("deepspeed", "fp8"): "sequence parallelism",
    ("deepspeed", "tp-pp"): "TP 2 with PP 2", ("deepspeed", "interleaved"): "pipeline schedule interleaved",
    ("deepspeed", "cp"): "context parallelism", ("deepspeed", "zero0-cp"): "context parallelism",
    ("deepspeed", "fp8-pp"): "precision fp8-mixed",
    ("deepspeed", "zero2-pp"): "ZeRO-2 and ZeRO-3 are incompatible", ("deepspeed", "fp32-grad"): "precision",
}


def run_export(fmt, sc, ev, tmp_path, monkeypatch):
    text = FW.export_text(fmt, sc, ev)
    lp = FW.launch_plan(sc, ev)
    if fmt == "torchtitan":
        check_torchtitan(text, lp, sc.model.layers, tmp_path)
    else:
        check_deepspeed(text, lp, monkeypatch)
    return text


@pytest.mark.parametrize("fmt", ["torchtitan", "deepspeed"])
@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_layouts_pass_the_frameworks_checks_or_refuse_in_one_line(fmt, name, tmp_path, monkeypatch):
    sc, ev = layout(name)
    want = EXPECTED.get((fmt, name))
    if want is None:
        run_export(fmt, sc, ev, tmp_path, monkeypatch)
        return
    with pytest.raises(FW.ExportError) as err:
        FW.export_text(fmt, sc, ev)
    assert want in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("fmt", ["torchtitan", "deepspeed"])
@pytest.mark.parametrize("name", TRAINING_EXAMPLES)
def test_every_shipped_example_exports_and_runs_or_refuses_in_one_line(fmt, name, tmp_path, monkeypatch):
    """The solver's plan for each shipped example: through the framework's checks, or one line naming the plan
    feature (the design case, bf16-mixed on RTX 4090 with ZeRO-3, must export to both)."""
    ev = example(name)
    from tpopt.api import scenario

    sc = scenario(str(ROOT / "examples" / f"{name}.toml"))
    try:
        run_export(fmt, sc, ev, tmp_path, monkeypatch)
    except FW.ExportError as exc:
        assert name != "design-case", str(exc)
        assert str(exc).startswith(f"{fmt}:") or "uneven" in str(exc)
        assert "\n" not in str(exc)


def test_zero0_with_tp_runs_as_fsdp_without_resharding_in_torchtitan(tmp_path):
    """The issue's "DDP has not supported > 1D parallelism": ZeRO-0 with TP 2 becomes FSDP2 that never reshards."""
    sc, ev = layout("zero0-tp")
    job = torchtitan_job(FW.export_text("torchtitan", sc, ev), tmp_path)
    assert job.parallelism.data_parallel_shard_degree == 8 and job.parallelism.data_parallel_replicate_degree == 1
    assert job.parallelism.fsdp_reshard_after_forward == "never"
    assert any("FSDP2 without resharding" in n for n in FW.export_notes("torchtitan", sc, ev))


def test_deepspeed_activation_checkpointing_is_only_claimed_where_deepspeed_turns_it_on(monkeypatch):
    sc, ev = layout("zero3")  # full recompute without PP: model code, said in a note, not in the JSON
    d = json.loads(FW.export_text("deepspeed", sc, ev))
    assert "activation_checkpointing" not in d and "pipeline" not in d
    assert any("deepspeed.checkpointing.checkpoint" in n for n in FW.export_notes("deepspeed", sc, ev))
    sc, ev = layout("zero0-pp")  # under the pipeline engine: its interval, read by the engine
    cfg = deepspeed_config(FW.export_text("deepspeed", sc, ev), FW.launch_plan(sc, ev), monkeypatch)
    assert cfg.pipeline["activation_checkpoint_interval"] == 1
    assert any("num_stages=2" in n for n in FW.export_notes("deepspeed", sc, ev))


# ---------------------------------------------------------------------------------------------
# the command: solve, export, launch script


def _torchtitan_launch_overrides(script: str) -> list[str]:
    """The torchtitan arguments the launch script passes after the config file, placeholders filled."""
    body = script[script.index("-m torchtitan.train"):].replace("\\\n", " ")
    filled = re.sub(r'"\$\{?(\w+)(:\?[^}]*)?\}?"', lambda m: f"/x/{m.group(1)}", body)
    args = shlex.split(filled)
    return args[args.index("--job.config_file") + 2:]


def test_export_without_a_plan_solves_and_its_launch_script_is_read_by_torchtitan(tmp_path):
    from click.testing import CliRunner

    from tpopt.cli.main import cli

    out, launch = tmp_path / "job.toml", tmp_path / "run.sh"
    r = CliRunner().invoke(cli, ["export", "--format", "torchtitan", "--out", str(out), "--launch", str(launch)])
    assert r.exit_code == 0, r.output
    script = launch.read_text()
    assert "#SBATCH --nodes=6" in script and "#SBATCH --gpus-per-node=8" in script and "WORLD_SIZE=48" in script
    assert 'export PYTORCH_ALLOC_CONF="expandable_segments:True"' in script
    for var in ("DATA_PATH", "TOKENIZER_PATH", "CHECKPOINT_DIR"):
        assert f'"${{{var}:?' in script
    job = torchtitan_job(out.read_text(), tmp_path, _torchtitan_launch_overrides(script))
    assert job.training.dataset_path == "/x/DATA_PATH" and job.checkpoint.folder == "/x/CHECKPOINT_DIR"
    assert job.model.hf_assets_path == "/x/TOKENIZER_PATH"
    steps = job.training.steps
    assert job.lr_scheduler.warmup_steps == max(1, round(0.01 * steps))  # 1 % of the plan's steps
