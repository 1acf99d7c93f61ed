"""`tpopt export`: every format round-trips (the text parsed back is the plan exported, on the fields the format
carries), over layouts from small solved spaces (hypothesis); every key and value written lies in the framework's
transcribed argument definitions; what a framework cannot express is an error naming it; output files follow
the no-overwrite rule."""

import inspect
import json
import re
import tomllib
from dataclasses import replace

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tpopt import frameworks as FW
from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import build_scenario
from tpopt.cli.main import cli
from tpopt.models.evaluate import evaluate
from tpopt.optimizer import core
from tpopt.optimizer.estimate import enforced_families
from tpopt.optimizer.result import Request


def run(*args):
    """The command through click; ``.stdout`` is stdout alone (notes go to stderr)."""
    runner = CliRunner(mix_stderr=False) if "mix_stderr" in inspect.signature(CliRunner.__init__).parameters \
        else CliRunner()
    return runner.invoke(cli, list(args))


def tables(model: str, precision: str = "bf16-mixed") -> dict:
    return {"scenario": {"name": "export-test"}, "model": {"name": model},
            "task": {"tokens": "10B", "seq_len": 2048, "global_batch": 64, "precision": precision},
            "schedule": {"deadline": "3650d"}, "hardware": {"accelerator": "h100-sxm"},
            "checkpoint": {"save_interval": "1800s", "mode": "sync"},
            "search": {"tp": [1, 2, 4], "cp": [1, 2], "pp": [1, 2, 4], "micro_batch": [1, 2],
                       "zero_stage": [0, 1, 2, 3], "offload": ["none", "cpu"], "recompute": ["none", "full"],
                       "schedule": ["1f1b"], "max_cards": 32}}


def solved(model: str, top: int = 40):
    """The ``top`` fastest plans of a small space (enumeration), and the scenario."""
    sc = build_scenario(tables(model), load_catalog())
    res = core.solve(sc, "enumerate", Request(objective="time", top=top, enforce=enforced_families()))
    assert res.plans
    return sc, [ev.plan for ev in res.plans]


DENSE = solved("qwen3-1.7b")
MOE = solved("qwen1.5-moe-a2.7b", 20)
PRECISIONS = ("bf16-mixed", "bf16-mixed-fp32-grad", "fp16-mixed", "fp8-mixed", "mxfp8-mixed")


ANY = {"zero_stage": [0, 1, 2, 3], "offload": ["none", "cpu"], "recompute": ["none", "full", "attn", "norm+mlp"],
       "flash_attention": [True, False], "sequence_parallel": [True, False], "precision": list(PRECISIONS),
       "schedule": ["1f1b", "interleaved", "fill-drain", "zb-h1"], "capacity": [True, False]}
"""Every choice the round trip draws from."""
EXPRESSIBLE = {
    "megatron": {"precision": ["bf16-mixed", "bf16-mixed-fp32-grad", "fp8-mixed", "mxfp8-mixed"],
                 "schedule": ["1f1b", "interleaved"]},
    "nemo": {"precision": ["bf16-mixed", "bf16-mixed-fp32-grad", "fp8-mixed", "mxfp8-mixed"],
             "schedule": ["1f1b", "interleaved"]},
    "torchtitan": {"zero_stage": [0, 2, 3], "offload": ["none"], "recompute": ["none", "full"],
                   "flash_attention": [True], "sequence_parallel": [True],
                   "precision": ["bf16-mixed-fp32-grad", "bf16-mixed", "fp8-mixed"],
                   "schedule": ["1f1b", "interleaved", "fill-drain"], "capacity": [False]},
    "deepspeed": {"recompute": ["none", "full"], "sequence_parallel": [False],
                  "precision": ["bf16-mixed", "fp16-mixed"], "schedule": ["1f1b"], "capacity": [False]},
}
"""Per format, the choices it can express (the rest of ANY is an error naming the feature)."""


@st.composite
def variants(draw, fmt=None):
    """A plan from a small solved space with its remaining choices redrawn: from everything (``fmt`` None) or
    from what ``fmt`` can express."""
    dom = dict(ANY, **(EXPRESSIBLE.get(fmt, {}) if fmt else {}))
    sc, plans = draw(st.sampled_from([DENSE, MOE]))
    if fmt == "deepspeed":  # no CP or EP in a DeepSpeed config, no AutoTP under its pipeline engine
        ok = [p for p in plans if p.cp == 1 and p.ep == 1 and (p.tp == 1 or p.pp == 1)]
        sc, plans = (sc, ok) if ok else (DENSE[0], [p for p in DENSE[1] if p.cp == 1 and (p.tp == 1 or p.pp == 1)])
    p = draw(st.sampled_from(plans))
    kw = {k: draw(st.sampled_from(dom[k])) for k in ("zero_stage", "offload", "recompute", "flash_attention",
                                                     "sequence_parallel")}
    kw["save_mode"] = draw(st.sampled_from(["sync", "async"]))
    if fmt in ("megatron", "nemo") and kw["offload"] == "cpu":
        kw["zero_stage"] = 1  # Megatron-LM offloads the distributed optimizer's states
    if fmt == "deepspeed" and p.pp > 1:
        kw["zero_stage"] = min(kw["zero_stage"], 1)
    if p.pp > 1:
        kw["schedule"] = draw(st.sampled_from(dom["schedule"]))
    if sc.model.moe and p.ep > 1 and draw(st.sampled_from(dom["capacity"])):
        kw["capacity_factor"] = 1.25
    if sc.model.moe and fmt == "torchtitan":
        kw["expert_tp"] = draw(st.sampled_from([1, p.tp]))
    precision = draw(st.sampled_from(dom["precision"]))
    sc = replace(sc, task=replace(sc.task, precision=precision))
    return sc, replace(p, dp=0, grad_accum=0, **kw)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(variants(), st.sampled_from(FW.FORMATS))
def test_round_trip(case, fmt):
    sc, plan = case
    ev = evaluate(sc, plan)
    try:
        text = FW.export_text(fmt, sc, ev)
    except FW.ExportError as exc:  # an inexpressible feature: named, one line
        msg = str(exc)
        assert msg.startswith(f"{fmt}:") and "\n" not in msg
        assert "cannot be expressed" in msg or "line" in msg or "uneven" in msg
        return
    back = FW.parse(fmt, text, sc.model.layers)
    assert back == FW.exported(fmt, sc, ev)
    lp = FW.launch_plan(sc, ev)
    # torchtitan runs ZeRO-0 with TP/PP/CP as FSDP2 without resharding; DeepSpeed derives the batch under AutoTP
    zero = FW.torchtitan_zero(lp) if fmt == "torchtitan" else ev.plan.zero_stage
    assert back.tp == ev.plan.tp and back.zero_stage == zero and back.micro_batch == ev.plan.micro_batch
    assert back.global_batch == (None if fmt == "deepspeed" and ev.plan.tp > 1 else ev.plan.global_batch)


@pytest.mark.parametrize("fmt", FW.FORMATS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_round_trip_of_expressible_plans(fmt, data):
    """Plans drawn from what the format can express export without error (uneven pipeline stages aside) and
    parse back to the plan exported."""
    sc, plan = data.draw(variants(fmt))
    ev = evaluate(sc, plan)
    try:
        text = FW.export_text(fmt, sc, ev)
    except FW.ExportError as exc:  # uneven stages, torchtitan's FP32 gradients no longer fitting, or Megatron's
        # interleaved schedule needing micro-batches in groups of PP
        assert "uneven" in str(exc) or "would need" in str(exc) or (
            fmt in ("megatron", "nemo") and "interleaved schedule with" in str(exc)), str(exc)
        return
    assert FW.parse(fmt, text, sc.model.layers) == FW.exported(fmt, sc, ev)


@pytest.mark.parametrize("fmt", FW.FORMATS)
def test_each_format_round_trips_a_plain_plan(fmt):
    """A plan every format can express (ZeRO-0, TP 2 with SP / PP 2 1F1B -- DeepSpeed: TP 1, its AutoTP does not
    run under its pipeline engine --, full recompute, FP32-gradient BF16 for torchtitan) exports and parses back."""
    precision = {"torchtitan": "bf16-mixed-fp32-grad"}.get(fmt, "bf16-mixed")
    sc = build_scenario(tables("qwen3-1.7b", precision), load_catalog())
    plan = DENSE[1][0]
    plan = replace(plan, zero_stage=0, offload="none", tp=1 if fmt == "deepspeed" else 2, pp=2, cp=1, micro_batch=1,
                   dp=0, grad_accum=0,
                   cards=16, recompute="full", schedule="1f1b", sequence_parallel=fmt != "deepspeed",
                   flash_attention=True)
    ev = evaluate(sc, plan)
    text = FW.export_text(fmt, sc, ev)
    assert FW.parse(fmt, text, sc.model.layers) == FW.exported(fmt, sc, ev)


def test_megatron_flags_derived_from_the_plan():
    """Megatron-LM arguments of one plan, each derived by hand: sizes, batch, the distributed optimizer for
    ZeRO-1, selective recompute of core attention, the save interval as seconds / step time in steps."""
    sc = DENSE[0]
    plan = replace(DENSE[1][0], zero_stage=1, tp=2, pp=1, cp=1, micro_batch=2, cards=16, dp=0, grad_accum=0,
                   recompute="attn", offload="none", sequence_parallel=True)
    ev = evaluate(sc, plan)
    text = FW.export_text("megatron", sc, ev)
    body = text.split("TPOPT_ARGS=(")[1]
    lines = [x.strip() for x in body.splitlines()]
    for want in ("--tensor-model-parallel-size 2", "--pipeline-model-parallel-size 1", "--micro-batch-size 2",
                 "--global-batch-size 64", "--use-distributed-optimizer", "--sequence-parallel",
                 "--recompute-granularity selective", "--recompute-modules core_attn", "--seq-length 2048",
                 f"--save-interval {round(1800 / ev.metrics['step_s'])}", "--bf16", "--grad-reduce-in-bf16"):
        assert want in lines, want
    assert "# launch: torchrun --nnodes 2 --nproc-per-node 8" in text  # 16 H100 = 2 hosts of 8
    assert not any(x.startswith("--use-megatron-fsdp") for x in lines)


def test_deepspeed_batch_identity_and_sections():
    sc = DENSE[0]
    plan = replace(DENSE[1][0], zero_stage=2, tp=1, pp=1, cp=1, micro_batch=2, cards=8, dp=0, grad_accum=0,
                   offload="cpu", recompute="none")
    ev = evaluate(sc, plan)
    d = json.loads(FW.export_text("deepspeed", sc, ev))
    # train_batch_size = micro x grad_accum x dp (deepspeed/runtime/config.py _batch_assertion): 64 = 2 x 4 x 8
    assert (d["train_batch_size"], d["train_micro_batch_size_per_gpu"], d["gradient_accumulation_steps"]) == (64, 2, 4)
    assert d["zero_optimization"] == {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True}}
    assert d["bf16"] == {"enabled": True}


UNEVEN = {"pp": 4, "first_stage_layers": 5, "last_stage_layers": 6}
"""Uneven middle pipeline stages of the dense model (28 layers: 5 / 9 / 8 / 6)."""


@pytest.mark.parametrize("fmt, change, needle", [
    ("deepspeed", {"pp": 2, "zero_stage": 2, "tp": 1, "sequence_parallel": False},
     "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"),
    ("deepspeed", {"tp": 2, "sequence_parallel": True}, "sequence parallelism under TP"),
    ("deepspeed", {"cp": 2, "tp": 1}, "context parallelism"),
    ("megatron", {"zero_stage": 0, "offload": "cpu"}, "optimizer CPU offload at ZeRO-0"),
    ("megatron", {"pp": 2, "schedule": "zb-h1"}, "pipeline schedule zb-h1"),
    ("nemo", {"zero_stage": 3, "offload": "cpu"}, "optimizer CPU offload at ZeRO-3"),
    ("torchtitan", {"zero_stage": 1}, "ZeRO-1"),
    ("torchtitan", {"offload": "cpu", "zero_stage": 3}, "offloads parameters and gradients too"),
    ("torchtitan", {"recompute": "attn", "zero_stage": 3}, "recompute of the groups attn"),
    # Qwen3-1.7B's 28 layers as 5 / 9 / 8 / 6: the launchers without a layout split the middle stages evenly, and
    # Megatron's layout takes no virtual stages
    ("torchtitan", UNEVEN, "middle pipeline stages are uneven ([5, 9, 8, 6])"),
    ("deepspeed", UNEVEN, "middle pipeline stages are uneven ([5, 9, 8, 6])"),
    ("megatron", dict(UNEVEN, schedule="interleaved:2"), "middle pipeline stages are uneven ([5, 9, 8, 6])"),
    ("nemo", dict(UNEVEN, schedule="interleaved:2"), "middle pipeline stages are uneven ([5, 9, 8, 6])"),
])
def test_inexpressible_features_are_errors_naming_them(fmt, change, needle):
    """Each refusal is one line naming the feature, and starts with the target's name as every refusal does."""
    sc = DENSE[0]
    base = dict(zero_stage=1, tp=1, pp=1, cp=1, micro_batch=1, cards=16, dp=0, grad_accum=0, offload="none",
                recompute="none", schedule="1f1b")
    ev = evaluate(sc, replace(DENSE[1][0], **{**base, **change}))
    with pytest.raises(FW.ExportError, match=re.escape(needle)) as exc:
        FW.export_text(fmt, sc, ev)
    assert str(exc.value).startswith(f"{fmt}: ") and "\n" not in str(exc.value)


def test_moe_flags():
    sc, plans = MOE
    plan = next(p for p in plans if p.ep > 1)
    ev = evaluate(sc, replace(plan, capacity_factor=1.25, dp=0, grad_accum=0, zero_stage=1, offload="none",
                              recompute="norm+mlp"))
    text = FW.export_text("megatron", sc, ev)
    assert f"--expert-model-parallel-size {plan.ep}" in text
    assert "--moe-expert-capacity-factor 1.25" in text and "--moe-pad-expert-input-to-capacity" in text
    assert "--recompute-modules layernorm mlp moe" in text  # the MoE layers' MLP is Megatron's "moe" module
    with pytest.raises(FW.ExportError, match="expert parallelism"):
        FW.export_text("deepspeed", sc, ev)


def test_the_flex_dispatcher_follows_the_cards_vendor_in_the_catalog_not_its_name():
    """Megatron-Core's flex dispatcher runs on NVIDIA's HybridEP / DeepEP only (catalogs/frameworks/megatron-lm.toml
    [flex_dispatcher] vendors): the same H100 plan, its card's catalog vendor made AMD, is written with alltoall and
    the header says why in one line; the built-in AMD cards carry vendor = "AMD"."""
    sc, plans = MOE
    assert sc.stack.moe_dispatcher == "flex"
    ev = evaluate(sc, next(p for p in plans if p.ep > 1))
    for fmt in ("megatron", "nemo"):
        text = FW.export_text(fmt, sc, ev)
        assert "flex" in text and "hybridep" in text and "MoE token dispatcher:" not in text, fmt
        assert FW.export_notes(fmt, sc, ev) == []
    systems = {k: replace(s, acc=replace(s.acc, vendor="AMD")) for k, s in sc.systems.items()}
    amd = replace(sc, systems=systems)
    for fmt, written in (("megatron", "--moe-token-dispatcher-type alltoall"),
                         ("nemo", "model.moe_token_dispatcher_type=alltoall")):
        text = FW.export_text(fmt, amd, ev)
        why = [line for line in text.splitlines() if line.startswith("# MoE token dispatcher:")]
        assert written in text and "moe_flex_dispatcher_backend" not in text.replace("-", "_"), fmt
        assert len(why) == 1 and "h100-sxm is made by AMD" in why[0], why
        assert FW.export_notes(fmt, amd, ev) == [why[0][2:]]
    cat = load_catalog()
    assert {n: cat.accelerator(n).vendor for n in ("mi300x", "mi325x", "mi355x", "h100-sxm")} == \
        {"mi300x": "AMD", "mi325x": "AMD", "mi355x": "AMD", "h100-sxm": "NVIDIA"}


def test_schemas_carry_their_source_and_every_entry_is_typed():
    for fmt in FW.FORMATS:
        s = FW.schema(fmt)
        f = s.framework
        assert f["repository"].startswith("https://github.com/") and len(f["commit"]) == 40 and f["version"]
        for name, spec in s.args.items():
            assert spec["type"] in ("int", "float", "str", "bool", "flag", "list"), name
            assert isinstance(spec["line"], int) and spec["line"] > 0, name
        for rule in s.requires:
            assert rule["when"] in s.args and rule["needs"] in s.args and rule["source"]


def test_validate_rejects_unknown_names_wrong_types_and_values():
    with pytest.raises(FW.ExportError, match="not an argument"):
        FW.validate("megatron", {"--tensor-parallel-size": 2})
    with pytest.raises(FW.ExportError, match="not of type int"):
        FW.validate("megatron", {"--tensor-model-parallel-size": "2"})
    with pytest.raises(FW.ExportError, match="not one of"):
        FW.validate("megatron", {"--recompute-granularity": "partial"})
    with pytest.raises(FW.ExportError, match="precision-aware"):
        FW.validate("megatron", {"--optimizer-cpu-offload": True})
    with pytest.raises(FW.ExportError, match="fsdp_dtensor"):
        FW.validate("nemo", {"ddp.use_megatron_fsdp": True, "checkpoint.ckpt_format": "torch_dist"})
    with pytest.raises(FW.ExportError, match="train_batch_size"):
        FW.validate("deepspeed", {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2,
                                  "gradient_accumulation_steps": 4}, {"data parallel size": 4})


def test_torchtitan_output_is_toml_with_the_three_blocks():
    sc = build_scenario(tables("qwen3-1.7b", "bf16-mixed-fp32-grad"), load_catalog())
    ev = evaluate(sc, replace(DENSE[1][0], zero_stage=3, tp=2, pp=1, cp=1, cards=16, dp=0, grad_accum=0,
                              offload="none", recompute="full", sequence_parallel=True, flash_attention=True))
    t = tomllib.loads(FW.export_text("torchtitan", sc, ev))
    assert t["parallelism"]["data_parallel_shard_degree"] == 8 and t["parallelism"]["tensor_parallel_degree"] == 2
    assert t["parallelism"]["fsdp_reshard_after_forward"] == "always"
    assert t["activation_checkpoint"]["mode"] == "full"
    assert t["training"]["global_batch_size"] == 64 and t["training"]["seq_len"] == 2048


# ---------------------------------------------------------------------------------------------
# the command


def test_cli_export_writes_once_and_refuses_to_overwrite(tmp_path):
    out = tmp_path / "args.sh"
    args = ["export", "--format", "megatron", "--hw", "h100-sxm", "--cards", "64", "--tp", "8", "--zero", "1",
            "--out", str(out)]
    r = run(*args)
    assert r.exit_code == 0, r.output
    first = out.read_text()
    assert "--tensor-model-parallel-size 8" in first
    out.write_text("mine")
    r = run(*args)
    assert r.exit_code == 2 and "exists" in r.output and out.read_text() == "mine"
    r = run(*args, "--force")
    assert r.exit_code == 0 and out.read_text() == first


def test_cli_export_of_a_solved_plan(tmp_path):
    r = run("solve", "--deadline", "30d", "--hw", "rtx4090", "--json", "--no-analysis")
    assert r.exit_code == 0, r.output
    f = tmp_path / "plan.json"
    f.write_text(r.stdout)
    plan = json.loads(r.stdout)["plan"]
    r = run("export", "--format", "deepspeed", "--plan", str(f), "--hw", "rtx4090")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["train_batch_size"] == plan["global_batch"]
    assert d["train_micro_batch_size_per_gpu"] == plan["micro_batch"]
    assert d["gradient_accumulation_steps"] == plan["grad_accum"]
    assert d["zero_optimization"]["stage"] == plan["zero_stage"]


@pytest.mark.parametrize("args, needle", [
    (["--format", "megatron", "--tp", "2"], "--cards"),  # plan flags fix the plan: cards among them
    (["--format", "megatron", "--launch", "run.sh"], "give --out"),
    (["--format", "megatron", "--plan", "nope.json"], "not found"),
    (["--format", "deepspeed", "--hw", "h100-sxm", "--cards", "16", "--tp", "2"], "sequence parallelism under TP"),
])
def test_cli_bad_input_is_one_line_exit_2(args, needle):
    r = run("export", *args)
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert needle in r.output and "Traceback" not in r.output and len(lines) <= 2


def test_an_unknown_format_is_one_line_from_the_program():
    """Through the program's entry point (click's usage errors become one stderr line there)."""
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "tpopt", "export", "--format", "yaml", "--cards", "8"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stdout == ""
    assert len(p.stderr.strip().splitlines()) == 1 and "yaml" in p.stderr and "megatron" in p.stderr


def test_mxfp8_plans_export_to_megatron_and_nemo():
    """Megatron-LM takes MXFP8 as ``--fp8-format e4m3 --fp8-recipe mxfp8`` (megatron/training/arguments.py,
    core_v0.15.0, _add_transformer_engine_args: recipe choices tensorwise, delayed, mxfp8, blockwise) and
    Megatron-Bridge as its registered recipe ``bf16_with_mxfp8_mixed`` (src/megatron/bridge/training/
    mixed_precision.py at v0.5.0: fp8 "e4m3", fp8_recipe "mxfp8"); both were refused as "cannot be expressed"."""
    sc, plans = DENSE
    sc = replace(sc, task=replace(sc.task, precision="mxfp8-mixed"))
    ev = evaluate(sc, replace(plans[0], dp=0, grad_accum=0))
    mega = FW.export_text("megatron", sc, ev)
    assert "--fp8-format e4m3" in mega and "--fp8-recipe mxfp8" in mega and "--bf16" in mega
    nemo = FW.export_text("nemo", sc, ev)
    assert "mixed_precision=bf16_with_mxfp8_mixed" in nemo.splitlines()
    for fmt, text in (("megatron", mega), ("nemo", nemo)):
        back = FW.parse(fmt, text, sc.model.layers)
        assert back.precision == "mxfp8-mixed" and back == FW.exported(fmt, sc, ev)
    fp8 = replace(sc, task=replace(sc.task, precision="fp8-mixed"))  # FP8 per-tensor still reads back as FP8
    assert FW.parse("megatron", FW.export_text("megatron", fp8, evaluate(fp8, ev.plan)), sc.model.layers
                    ).precision == "fp8-mixed"
