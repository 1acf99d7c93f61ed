"""`tpopt init`: write a commented scenario file to start from.

Without options the file holds the chapter's design case (Qwen3-8B on RTX 4090 hosts) with the
search space and the checkpoint settings left open; ``--model`` and ``--hw`` put other catalog entries
in and leave out the design case's hardware- and model-specific assumptions (they would be wrong for
another model or card). The file is validated by building the scenario before it is written, and an
existing file is never overwritten without ``--force``.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import click

from tpopt.catalogs import load_catalog
from tpopt.catalogs.rl import build_rl_scenario
from tpopt.catalogs.scenario import build_scenario
from tpopt.cli.common import handle_errors
from tpopt.errors import InputError
from tpopt.files import refuse_symlink, write_atomic

DESIGN_MODEL = "qwen3-8b"
DESIGN_HW = ("rtx4090",)


def _toml_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _comment_out(block: str, keep: bool) -> str:
    """The block as is, or every line commented out (a value the user may want, not a default)."""
    if keep:
        return block
    return "\n".join(("# " + ln) if ln and not ln.startswith("#") else ln for ln in block.splitlines())


def scenario_text(model: str = DESIGN_MODEL, hw: tuple[str, ...] = DESIGN_HW, *, config: str | None = None,
                  name: str = "my-training-run") -> str:
    """The commented scenario file for ``model`` (or a Hugging Face ``config`` path) on ``hw``."""
    design_model = config is None and model == DESIGN_MODEL
    design_hw = tuple(hw) == DESIGN_HW
    model_line = f"config = {_toml_str(config)}" if config else f"name = {_toml_str(model)}"
    model_alt = ('# name = "qwen3-8b"             # or a catalog model instead (tpopt catalog models)' if config
                 else '# config = "path/to/config.json"  # or a Hugging Face config (dense Llama/Mistral/Qwen2/Qwen3)')
    acc = _toml_str(hw[0]) if len(hw) == 1 else "[" + ", ".join(_toml_str(h) for h in hw) + "]"
    hw_specific = _comment_out(
        'usable_memory = "22GiB"   # design case: 24 GB = 22.35 GiB less a runtime reserve (catalog value if omitted)\n'
        "cards_per_host = 8        # design case: 8-card hosts (catalog value if omitted)", design_hw)
    reserve = _comment_out(
        '[memory]\n'
        'activation_reserve = "10GiB"  # design case: measured budget for activations, gathered parameters and\n'
        '                              # workspace per one-sequence micro-batch; omit to model activations per\n'
        '                              # recompute group (then recompute is a decision)', design_model and design_hw)
    inputs = _comment_out(
        "[input]\n"
        "workers = 4                   # CPU data workers, job-wide (or workers_per_host = 4)\n"
        "sequences_per_worker_s = 2    # sequences each worker prepares per second\n"
        'wait = "0.5s"                 # input wait per step that prefetch does not hide', design_model and design_hw)
    origin = ("the training-systems chapter's design case" if design_model and design_hw
              else f"{config or model} on {', '.join(hw)}")
    return f'''# tpopt scenario, written by `tpopt init` as a starting point ({origin}).
# Edit the values, then:   tpopt solve --scenario THIS_FILE
# Every value carries its unit (100B, 1.5T, 30d, 720h, 22GiB, 7GB/s, 40%); unknown keys are rejected.
# Keys left out take the defaults listed in the README ("Scenario files"); commented lines show options.

[scenario]
name = {_toml_str(name)}
description = "what is trained, on what, by when"

# What is trained.
[model]
{model_line}
{model_alt}

# What must be done, and by when.
[task]
tokens = "100B"            # effective training tokens (padding excluded), e.g. 100B or 1.5T
seq_len = 8192             # tokens per sequence
global_batch = 384         # sequences per optimizer step
precision = "bf16-mixed"   # bf16-mixed (16 B/param), bf16-mixed-fp32-grad (18), fp8-mixed

[schedule]
deadline = "30d"           # wall clock from start to finish, e.g. 30d or 720h
reserved = "5d"            # inside the deadline: start-up, evaluation, planned pauses

# What it runs on: one catalog accelerator or a list of candidates (tpopt catalog accelerators).
[hardware]
accelerator = {acc}
efficiency = 0.40          # flat model: MFU of the matrix work (Llama 3 reports 38-43 % in BF16); delete this
                           # line for the per-operation model (catalogs/performance.toml, tpopt calibrate)
{hw_specific}
# nic = "200g"             # NIC type from the catalog (tpopt catalog links), or a bandwidth such as 25GB/s
# nics_per_host = 8

{reserve}

{inputs}

# Checkpoints and failures.
[checkpoint]
write_bandwidth = "7GB/s"  # aggregate storage write bandwidth (or storage = "<catalog tier>")
restore = "120s"           # restart time after a failure or rollback
job_mtbf = {{ cards = 1024, interval = "7.9h" }}  # Meta: one interruption per 7.9 h on 1,024 cards (337 d per card)
# save_interval = "auto"   # default: the optimal interval for each card count; or "1800s", or a list
# mode = ["sync", "async"] # default: both save modes searched; "sync" pauses for the whole write

# [stragglers]
# sigma = "5%"             # per-card compute jitter, as a fraction of the mean

# [cost]
# card_hour = 0.45         # USD per card-hour (default: the catalog's indicative price)
# max_cost = 50000         # budget cap

# Domains the solver searches (each key left out keeps its full default domain).
[search]
max_cards = 1024
# zero_stage = [0, 1, 2, 3]
# tp = [1, 2, 4, 8]
# pp = [1, 2, 4, 8]
# cp = [1, 2, 4, 8]        # context parallelism (each sequence split over cp cards): search it from 32K tokens
#                          # per sequence on; left out, cp = 1 and tpopt solve says what that may cost
# micro_batch = [1, 2, 4, 8]
# recompute = ["none", "full"]
# offload = ["none", "cpu"]
# schedule = ["1f1b", "zb-h1"]
'''


def rl_scenario_text(model: str = DESIGN_MODEL, hw: tuple[str, ...] = ("h100-sxm",), *, config: str | None = None,
                     name: str = "my-rl-run") -> str:
    """The commented RL post-training scenario (``tpopt rl``) for the policy ``model`` on ``hw``: the shipped
    GRPO example's loop (examples/rl-grpo-qwen3-8b.toml) with the policy and the cards replaced."""
    model_line = f"config = {_toml_str(config)}" if config else f"name = {_toml_str(model)}"
    acc = _toml_str(hw[0]) if len(hw) == 1 else "[" + ", ".join(_toml_str(h) for h in hw) + "]"
    origin = f"{config or model} on {', '.join(hw)}"
    return f'''# tpopt RL scenario, written by `tpopt init --rl` as a starting point ({origin}).
# Edit the values, then:   tpopt rl --scenario THIS_FILE
# The learner is planned as pre-training ([hardware], [memory], [checkpoint] and [search] apply to it);
# [rl] says what the loop must do and which RL-level choices the solver may make. Tokens, sequence length and
# batch are derived from [rl] (prompts x samples per step, prompt and response lengths, steps).

[scenario]
name = {_toml_str(name)}
description = "what policy is trained, on what, by when"

[model]
{model_line}                # the policy (a catalog model, or config = "path/config.json")

[schedule]
deadline = "3.5d"          # wall clock from start to finish
reserved = "0.25d"         # inside the deadline: start-up, evaluation runs

[hardware]
accelerator = {acc}
efficiency = 0.40          # learner: MFU of the matrix work; delete for the per-operation model

[checkpoint]
save_interval = "auto"     # the optimal interval for the job's card count

[search]                   # the learner's layouts
max_cards = 64             # learner + rollout cards
zero_stage = [1, 2, 3]
tp = [1, 2, 4, 8]
pp = [1, 2]
micro_batch = [1, 2, 4]
recompute = ["none", "full"]

[rl]
prompts_per_step = 512
samples_per_prompt = 8                                  # GRPO group size
prompt_length = {{ mean = 512, p99 = 1536 }}              # tokens
response_length = {{ mean = 2048, p99 = 8192, max = 16384 }}
steps = 1500                                            # full batches of useful samples
verifier = {{ workers = 64, per_sample = "0.5s" }}        # rule-based checks on CPU workers
kept = 0.90                # samples one policy step old that still reach the update (one-step async)
kept_sync = 1.0            # on-policy samples all reach it
staleness = 1              # one-step async allowed; 0 = synchronous only
placement = ["separate", "shared"]                      # rollout on its own cards, or sharing the learner's
rollout_tp = [1, 2, 4, 8]
weight_sync = ["sharded", "broadcast"]
'''


@click.command("init")
@click.argument("path", default="scenario.toml", type=click.Path(dir_okay=False))
@click.option("--model", default=None,
              help=f"Catalog model, or a Hugging Face config.json path [default {DESIGN_MODEL}].")
@click.option("--hw", default=None, help=f"Accelerator(s), comma-separated [default {','.join(DESIGN_HW)}].")
@click.option("--rl", "rl", is_flag=True,
              help="An RL post-training scenario for tpopt rl (GRPO loop; default hardware h100-sxm).")
@click.option("--force", is_flag=True, help="Overwrite PATH if it exists.")
@handle_errors
def init(path: str, model: str | None, hw: str | None, rl: bool, force: bool) -> None:
    """Write a commented scenario file to start from (default: scenario.toml).

    \b
    Examples:
      tpopt init                                   the chapter's design case, search left open
      tpopt init llama.toml --model llama3-70b --hw h100-sxm,b200
      tpopt init rl.toml --rl                      an RL post-training run for tpopt rl
    """


    cat = load_catalog()
    config = None
    if model is not None and model.lower().endswith(".json"):
        if not Path(model).is_file():
            raise InputError(f"--model: Hugging Face config {model!r} not found")
        config = str(Path(model).resolve())
    elif model is not None:
        cat.model(model)  # unknown name -> one clear line
    names = tuple(h.strip() for h in (hw or ("h100-sxm" if rl else ",".join(DESIGN_HW))).split(",") if h.strip())
    if not names:
        raise InputError("--hw: give at least one accelerator")
    for h in names:
        cat.accelerator(h)
    target = Path(path)
    if target.exists() and not force:
        raise InputError(f"{path} exists; pass --force to overwrite it")
    if target.is_dir():
        raise InputError(f"{path} is a directory")
    refuse_symlink(target, "tpopt init")
    if not target.parent.is_dir():
        raise InputError(f"directory {str(target.parent)!r} does not exist")
    if rl:
        text = rl_scenario_text(model or DESIGN_MODEL, names, config=config, name=target.stem)
    else:
        text = scenario_text(model or DESIGN_MODEL, names, config=config, name=target.stem)
    raw = tomllib.loads(text)  # the template must build: validate before anything is written
    raw["_base_dir"], raw["_path"] = str(target.resolve().parent), str(target)
    if rl:
        build_rl_scenario(raw, cat)
    else:
        build_scenario(raw, cat)
    write_atomic(target, text, "tpopt init")
    click.echo(f"wrote {path}: edit it, then run: tpopt {'rl' if rl else 'solve'} --scenario {path}")
