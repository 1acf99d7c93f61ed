"""`tpopt export` as one command from question to launch: without --plan or plan flags it exports the plan
`tpopt solve` finds; with flags, the checkpoint choices left open are decided as `tpopt solve` / `tpopt evaluate`
decide them; a staged scenario exports one file per stage; --launch writes a torchrun / Slurm script. Every bad
input is one line on stderr, exit 2, and nothing is overwritten."""

import inspect
import json
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from tpopt.cli.main import cli
from tpopt.frameworks import ENVIRONMENT, FORMATS, environment

ROOT = Path(__file__).resolve().parents[1]
CONFIDENCE = str(ROOT / "examples" / "llama3-8b-confidence.toml")  # [search] save_mode sync/async, "auto" interval


def run(*args):
    runner = CliRunner(mix_stderr=False) if "mix_stderr" in inspect.signature(CliRunner.__init__).parameters \
        else CliRunner()
    return runner.invoke(cli, list(args))


def test_export_without_a_plan_exports_the_plan_solve_finds():
    solved = run("solve", "--json", "--no-analysis")
    assert solved.exit_code == 0, solved.output
    plan = json.loads(solved.stdout)["plan"]
    r = run("export", "--format", "deepspeed")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    got = (d["train_batch_size"], d["train_micro_batch_size_per_gpu"], d["gradient_accumulation_steps"],
           d["zero_optimization"]["stage"])
    assert got == (plan["global_batch"], plan["micro_batch"], plan["grad_accum"], plan["zero_stage"])
    assert run("export", "--format", "deepspeed").stdout == r.stdout  # deterministic


def test_open_checkpoint_choices_are_decided_as_evaluate_and_solve_decide_them():
    flags = ["--scenario", CONFIDENCE, "--cards", "64", "--tp", "1", "--pp", "1", "--zero", "3"]
    ev = run("evaluate", *flags, "--json")
    assert ev.exit_code in (0, 3), ev.output
    d = json.loads(ev.stdout)
    chosen = d["defaults_chosen"]
    assert chosen["save_mode"] in ("sync", "async")
    r = run("export", "--format", "torchtitan", *flags)
    assert r.exit_code == 0, r.output
    ck = tomllib.loads(r.stdout)["checkpoint"]
    assert ck["async_mode"] == ("async" if chosen["save_mode"] == "async" else "disabled")
    # the interval in steps: the chosen seconds over the step time, rounded (frameworks.launch_plan)
    assert ck["interval"] == max(1, round(d["plan"]["save_interval_s"] / d["metrics"]["step_s"]))


def staged_scenario(tmp_path: Path) -> str:
    text = """
[scenario]
name = "staged"
[model]
name = "qwen3-8b"
[[task.stages]]
name = "short"
tokens = "90B"
seq_len = 8192
global_batch = 384
[[task.stages]]
name = "long ctx"
tokens = "10B"
seq_len = 32768
global_batch = 96
[schedule]
deadline = "30d"
[hardware]
accelerator = "h100-sxm"
[checkpoint]
save_interval = "1800s"
mode = "sync"
[search]
zero_stage = [3]
tp = [1]
pp = [1]
"""
    path = tmp_path / "staged.toml"
    path.write_text(text)
    return str(path)


def test_a_staged_scenario_exports_one_file_per_stage(tmp_path):
    sc = staged_scenario(tmp_path)
    r = run("export", "--format", "torchtitan", "--scenario", sc)
    assert r.exit_code == 2 and "2 stages" in r.output and "--out" in r.output
    out = tmp_path / "job.toml"
    r = run("export", "--format", "torchtitan", "--scenario", sc, "--out", str(out), "--launch",
            str(tmp_path / "run.sh"))
    assert r.exit_code == 0, r.output
    short, long_ = tmp_path / "job.short.toml", tmp_path / "job.long-ctx.toml"
    assert tomllib.loads(short.read_text())["training"]["seq_len"] == 8192
    assert tomllib.loads(long_.read_text())["training"]["seq_len"] == 32768
    assert tomllib.loads(long_.read_text())["training"]["global_batch_size"] == 96
    assert "--job.config_file " + str(long_) in (tmp_path / "run.long-ctx.sh").read_text()
    # each stage's own plan from a staged solve's report
    solved = run("solve", "--scenario", sc, "--json", "--no-analysis")
    assert solved.exit_code == 0, solved.output
    report = tmp_path / "staged.json"
    report.write_text(solved.stdout)
    plans = [s["plan"] for s in json.loads(solved.stdout)["stages"]]
    r = run("export", "--format", "torchtitan", "--scenario", sc, "--plan", str(report), "--out",
            str(tmp_path / "p.toml"))
    assert r.exit_code == 0, r.output
    for stage, plan in zip(("short", "long-ctx"), plans, strict=True):
        t = tomllib.loads((tmp_path / f"p.{stage}.toml").read_text())
        assert t["parallelism"]["data_parallel_shard_degree"] == plan["dp"]
        assert t["training"]["local_batch_size"] == plan["micro_batch"]
    # the same plan on each stage (plan flags)
    r = run("export", "--format", "deepspeed", "--scenario", sc, "--cards", "32", "--zero", "3", "--out",
            str(tmp_path / "ds.json"))
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "ds.long-ctx.json").read_text())["train_batch_size"] == 96


def test_launch_script_holds_world_size_environment_and_placeholders(tmp_path):
    out, launch = tmp_path / "ds.json", tmp_path / "run.sh"
    r = run("export", "--format", "deepspeed", "--hw", "h100-sxm", "--cards", "16", "--zero", "2", "--offload",
            "cpu", "--out", str(out), "--launch", str(launch))
    assert r.exit_code == 0, r.output
    s = launch.read_text()
    assert s.startswith("#!/usr/bin/env bash") and launch.stat().st_mode & 0o100
    assert "#SBATCH --nodes=2" in s and "#SBATCH --gpus-per-node=8" in s and "WORLD_SIZE=16" in s
    assert "--deepspeed_config " + str(out) in s and "OMP_NUM_THREADS" in s
    for var in ("DATA_PATH", "TOKENIZER_PATH", "CHECKPOINT_DIR"):
        assert f'"${{{var}:?' in s
    evj = json.loads(run("evaluate", "--hw", "h100-sxm", "--cards", "16", "--zero", "2", "--offload", "cpu",
                         "--json").stdout)
    assert f"--train-iters {int(evj['metrics']['iterations'])}" in s


def test_every_format_writes_a_launch_script_and_has_an_environment_hook(tmp_path):
    for fmt in FORMATS:
        out, launch = tmp_path / f"{fmt}.cfg", tmp_path / f"{fmt}.sh"
        r = run("export", "--format", fmt, "--hw", "h100-sxm", "--cards", "16", "--zero", "3", "--out", str(out),
                "--launch", str(launch))
        assert r.exit_code == 0, (fmt, r.output)
        assert "torchrun" in launch.read_text() and str(out) in launch.read_text()
        assert isinstance(environment(fmt, __import__("tpopt.frameworks").frameworks.LaunchPlan()), dict)
    assert set(ENVIRONMENT) >= {"torchtitan", "deepspeed"}


@pytest.mark.parametrize("args, needle", [
    (["--launch", "run.sh"], "give --out"),
    (["--tp", "2"], "--cards"),
    (["--plan", "nope.json", "--cards", "8"], "drop --cards"),
])
def test_bad_input_is_one_line_exit_2(args, needle):
    r = run("export", "--format", "torchtitan", *args)
    assert r.exit_code == 2, r.output
    assert needle in r.output and "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1


def test_nothing_is_overwritten_when_one_output_exists(tmp_path):
    out, launch = tmp_path / "job.toml", tmp_path / "run.sh"
    launch.write_text("mine")
    r = run("export", "--format", "torchtitan", "--hw", "h100-sxm", "--cards", "16", "--zero", "3",
            "--out", str(out), "--launch", str(launch))
    assert r.exit_code == 2 and "exists" in r.output
    assert not out.exists() and launch.read_text() == "mine"


@pytest.mark.parametrize("force", [[], ["--force"]])
def test_launch_onto_the_exported_file_is_refused(tmp_path, force):
    """--launch naming the --out file would replace the configuration with the script that runs it (the script
    then points at itself): one line, exit 2, nothing written, with or without --force."""
    out = tmp_path / "job.toml"
    r = run("export", "--format", "torchtitan", "--hw", "h100-sxm", "--cards", "16", "--zero", "3",
            "--out", str(out), "--launch", str(tmp_path / "." / "job.toml"), *force)
    assert r.exit_code == 2, r.output
    assert "--launch" in r.output and "--out" in r.output and len(r.output.strip().splitlines()) == 1
    assert not out.exists()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_deepspeed_states_the_plans_checkpoint_interval_and_mode(tmp_path, mode):
    """DeepSpeed's JSON has no save interval (the training script calls engine.save_checkpoint): the export
    dropped the plan's interval and save mode without a word. The note (stderr and the launch script) now states
    both and the script passes --save-interval, the interval in steps as the other formats write it."""
    flags = ["--hw", "h100-sxm", "--cards", "16", "--zero", "2", "--save-interval", "1800s", "--save-mode", mode]
    d = json.loads(run("evaluate", *flags, "--json").stdout)
    steps = max(1, round(d["plan"]["save_interval_s"] / d["metrics"]["step_s"]))
    out, launch = tmp_path / "ds.json", tmp_path / "run.sh"
    r = run("export", "--format", "deepspeed", *flags, "--out", str(out), "--launch", str(launch))
    assert r.exit_code == 0, r.output
    note = f"checkpoints: save every {steps} steps ({'asynchronously' if mode == 'async' else 'synchronously'}"
    assert note in " ".join(r.stderr.split()) and note in " ".join(launch.read_text().replace("#", " ").split())
    assert f"--save-interval {steps}" in launch.read_text()


def test_a_staged_report_without_its_scenario_is_named_as_staged(tmp_path):
    """A staged solve's report holds one plan per stage; given without its scenario, the error said "the file holds
    no plan object (... an infeasible solve has none)", wrong on both counts. It now names the stages."""
    sc = staged_scenario(tmp_path)
    solved = run("solve", "--scenario", sc, "--json", "--no-analysis")
    assert solved.exit_code == 0, solved.output
    report = tmp_path / "staged.json"
    report.write_text(solved.stdout)
    names = [s["name"] for s in json.loads(solved.stdout)["stages"]]
    r = run("export", "--format", "megatron", "--plan", str(report), "--hw", "h100-sxm")
    assert r.exit_code == 2, r.output
    assert len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output
    assert "staged" in r.output and all(n in r.output for n in names) and "infeasible" not in r.output


def test_a_plan_solved_for_another_model_is_refused(tmp_path):
    """A plan's layout (memory, layers per stage, batch split) holds for the model it was solved for: exported onto
    a scenario of another model it was written under that model's name with at most a note. One line, exit 2."""
    solved = run("solve", "--hw", "h100-sxm", "--json", "--no-analysis")  # the built-in design case: qwen3-8b
    assert solved.exit_code == 0, solved.output
    report = tmp_path / "plan.json"
    report.write_text(solved.stdout)
    out = tmp_path / "job.sh"
    r = run("export", "--format", "megatron", "--plan", str(report), "--scenario",
            str(ROOT / "examples" / "qwen3-30b-a3b.toml"), "--hw", "h100-sxm", "--out", str(out))
    assert r.exit_code == 2, r.output
    assert "qwen3-8b" in r.output and "qwen3-30b-a3b" in r.output and len(r.output.strip().splitlines()) == 1
    assert not out.exists()
    same = run("export", "--format", "megatron", "--plan", str(report), "--hw", "h100-sxm")  # its own scenario
    assert same.exit_code == 0, same.output
