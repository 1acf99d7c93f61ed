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
from tpopt.catalogs.starter import (
    DESIGN_HW,
    DESIGN_MODEL,
    _toml_str,
    accelerator_value,
    hardware_names,
    model_entry,
    scenario_text,
)
from tpopt.cli.common import handle_errors
from tpopt.errors import InputError
from tpopt.files import refuse_symlink, write_atomic

__all__ = ["init", "rl_scenario_text", "scenario_text", "DESIGN_MODEL", "DESIGN_HW"]

def rl_scenario_text(model: str = DESIGN_MODEL, hw: tuple[str, ...] = ("h100-sxm",), *, config: str | None = None,
                     name: str = "my-rl-run") -> str:
    """The commented RL post-training scenario (``tpopt rl``) for the policy ``model`` on ``hw``: the shipped
    GRPO example's loop (examples/rl-grpo-qwen3-8b.toml) with the policy and the cards replaced."""
    model_line = f"config = {_toml_str(config)}" if config else f"name = {_toml_str(model)}"
    acc = accelerator_value(hw)
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
              help=f"Catalog model, a Hugging Face id org/name from the local cache, or a config.json path "
                   f"[default {DESIGN_MODEL}].")
@click.option("--hw", default=None, help=f"Accelerator(s), comma-separated, or 'all' (every card with a market "
                                         f"offer) [default {','.join(DESIGN_HW)}].")
@click.option("--flat", is_flag=True,
              help="Write the chapter's flat step-time model (efficiency = 0.40 for every card) instead of the "
                   "per-operation model.")
@click.option("--rl", "rl", is_flag=True,
              help="An RL post-training scenario for tpopt rl (GRPO loop; default hardware h100-sxm).")
@click.option("--force", is_flag=True, help="Overwrite PATH if it exists.")
@click.option("--catalog", "catalog_dirs", multiple=True, type=click.Path(file_okay=False),
              help="Extra catalog directory (repeatable): --model and --hw may name its entries.")
@handle_errors
def init(path: str, model: str | None, hw: str | None, flat: bool, rl: bool, force: bool,
         catalog_dirs: tuple[str, ...]) -> None:
    """Write a commented scenario file to start from (default: scenario.toml).

    The file runs the per-operation step-time model (kernels from catalogs/performance.toml); --flat writes
    the chapter's flat model (one efficiency = 0.40 for every card) instead.

    \b
    Examples:
      tpopt init                                   the chapter's design case, search left open
      tpopt init llama.toml --model llama3-70b --hw h100-sxm,b200
      tpopt init rl.toml --rl                      an RL post-training run for tpopt rl
    """


    cat = load_catalog(catalog_dirs)
    entry = model_entry(model, cat) if model is not None else {"name": DESIGN_MODEL}
    config = entry.get("config")
    names = hardware_names(hw, ("h100-sxm",) if rl else DESIGN_HW, cat)
    target = Path(path)
    if target.exists() and not force:
        raise InputError(f"{path} exists; pass --force to overwrite it")
    if target.is_dir():
        raise InputError(f"{path} is a directory")
    refuse_symlink(target, "tpopt init")
    if not target.parent.is_dir():
        raise InputError(f"directory {str(target.parent)!r} does not exist")
    if rl:
        if flat:
            raise InputError("--flat: tpopt init --rl writes its own learner efficiency line; drop --flat")
        text = rl_scenario_text(entry.get("name", DESIGN_MODEL), names, config=config, name=target.stem)
    else:
        text = scenario_text(entry.get("name", DESIGN_MODEL), names, config=config, name=target.stem, flat=flat)
    raw = tomllib.loads(text)  # the template must build: validate before anything is written
    raw["_base_dir"], raw["_path"] = str(target.resolve().parent), str(target)
    if rl:
        build_rl_scenario(raw, cat)
    else:
        build_scenario(raw, cat)
    write_atomic(target, text, "tpopt init")
    said = "" if rl else (" (the flat step-time model: efficiency = 0.40 stated for every card)" if flat else
                          " (the per-operation step-time model: no efficiency line; --flat writes the flat one)")
    dirs = "".join(f" --catalog {d}" for d in catalog_dirs)
    click.echo(f"wrote {path}{said}: edit it, then run: tpopt {'rl' if rl else 'solve'} --scenario {path}{dirs}")
