"""The starting scenario: the commented file ``tpopt init`` writes, and the scenario a question asked on the
command line (``tpopt solve --model llama3-70b --tokens 2T ...``, no ``--scenario``) is built from.

One template serves both, so a question on the command line answers exactly what ``tpopt init`` followed by
``tpopt solve --scenario`` would: the per-operation step-time model (no ``hardware.efficiency``; the flat
``efficiency = 0.40`` line only when asked for), and every value the command line did not give taken from the
template and listed by :func:`stated_defaults` so the output can state it.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from tpopt.catalogs import Catalog
from tpopt.errors import InputError

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
                  name: str = "my-training-run", flat: bool = False) -> str:
    """The commented scenario file for ``model`` (or a Hugging Face ``config`` path) on ``hw``: the
    per-operation step-time model (no ``efficiency`` line, the line shown commented), or with ``flat`` the
    chapter's flat model (``efficiency = 0.40`` stated)."""
    design_model = config is None and model == DESIGN_MODEL
    design_hw = tuple(hw) == DESIGN_HW
    model_line = f"config = {_toml_str(config)}" if config else f"name = {_toml_str(model)}"
    model_alt = ('# name = "qwen3-8b"             # or a catalog model instead (tpopt catalog models)' if config
                 else '# config = "path/to/config.json"  # or a Hugging Face config (dense Llama/Mistral/Qwen2/Qwen3)')
    acc = accelerator_value(hw)
    hw_specific = _comment_out(
        f"[hardware.{hw[0]}]" + " " * max(1, 26 - len(hw[0]) - 11)
        + "# this card's own values: a card added to the list above keeps its catalog values\n"
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
    efficiency = FLAT_LINE if flat else PER_OPERATION_LINE
    origin = ("the training-systems chapter's design case" if design_model and design_hw
              else f"{config or model} on {', '.join(hw)}")
    return f'''# tpopt scenario, written by `tpopt init` as a starting point ({origin}).
# Edit the values, then:   tpopt solve --scenario THIS_FILE
# Every value carries its unit (100B, 1.5T, 30d, 720h, 22GiB, 7GB/s, 40%); unknown keys are rejected.
# Keys left out take the defaults listed in docs/scenarios.md ("Scenario files"); commented lines show options.

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
{efficiency}
# nic = "200g"             # NIC type from the catalog (tpopt catalog links), or a bandwidth such as 25GB/s
# nics_per_host = 8

{hw_specific}

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


FLAT_LINE = (
    "efficiency = 0.40          # flat model: MFU of the matrix work (Llama 3 reports 38-43 % in BF16); delete this\n"
    "                           # line for the per-operation model (catalogs/performance.toml, tpopt calibrate)")
PER_OPERATION_LINE = (
    "# efficiency = 0.40        # left out: the per-operation step-time model (catalogs/performance.toml, tpopt\n"
    "                           # calibrate); uncomment for the chapter's flat model (MFU of the matrix work)")
ALL_HARDWARE = "all"
"""``--hw all``: every accelerator that has a market offer, the offer chosen by the solver."""
NOT_DEFAULTS = ("scenario.", "model.")
"""Template entries that are no assumption (the file's name and description, the model the user named)."""


def accelerator_value(hw: tuple[str, ...]) -> str:
    """``[hardware] accelerator`` as TOML: one name, a list, or ``"all"``."""
    return _toml_str(hw[0]) if len(hw) == 1 else "[" + ", ".join(_toml_str(h) for h in hw) + "]"


def hardware_names(text: str | None, default: tuple[str, ...], cat: Catalog | None,
                   flag: str = "--hw") -> tuple[str, ...]:
    """The accelerators of ``--hw`` (comma-separated catalog names, or ``all``), each checked against the
    catalog ``cat`` (None: checked later, when the scenario is built); ``default`` when the option is not
    given. An empty value is refused in one line."""
    if text is None:
        return default
    names = tuple(h.strip() for h in text.split(",") if h.strip())
    if not names:
        raise InputError(f"{flag}: {text!r} names no accelerator (give catalog names, comma-separated, or "
                         f"'{ALL_HARDWARE}'; tpopt catalog accelerators lists them)")
    if ALL_HARDWARE in names:
        if len(names) > 1:
            raise InputError(f"{flag}: '{ALL_HARDWARE}' stands alone (every accelerator with a market offer)")
        return names
    if cat is not None:
        for h in names:
            cat.accelerator(h)  # an unknown name -> one line with the known ones
    return names


def model_entry(model: str, cat: Catalog) -> dict[str, str]:
    """``[model]`` for ``--model``: a path ending in ``.json`` is a Hugging Face config (made absolute, so it
    reads the same from any scenario folder); anything else a catalog name or a Hugging Face id
    ``org/name[@revision]`` from the local cache (never downloaded), resolved now so that an unknown name
    fails in one line before any work."""
    text = model.strip()
    if not text:
        raise InputError("--model: give a catalog model (tpopt catalog models), a Hugging Face id org/name in "
                         "the local cache, or the path of a config.json")
    if text.lower().endswith(".json"):
        if not Path(text).is_file():
            raise InputError(f"--model: Hugging Face config {text!r} not found")
        return {"config": str(Path(text).resolve())}
    cat.model(text)
    return {"name": text}


def question_tables(model: str, hw: tuple[str, ...], cat: Catalog) -> dict[str, Any]:
    """The raw tables of the starting scenario for ``model`` on ``hw`` (:func:`scenario_text`, per-operation
    model), ready for :func:`tpopt.catalogs.scenario.with_overrides`; relative paths from the working folder."""
    entry = model_entry(model, cat)
    text = scenario_text(entry.get("name", DESIGN_MODEL), hw, config=entry.get("config"), name="command-line")
    raw = tomllib.loads(text)
    raw["_base_dir"], raw["_path"] = str(Path.cwd()), "the command line"
    return raw


def stated_defaults(raw: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """The template's values the command line left as they are (``{"task.seq_len": 8192, ...}``, in the
    file's order), ``given`` the overrides as ``table.key`` -> value (None: not given)."""
    out: dict[str, Any] = {}
    for table, keys in raw.items():
        if table.startswith("_") or not isinstance(keys, dict) or f"{table}." in NOT_DEFAULTS:
            continue
        for key, value in keys.items():
            dotted = f"{table}.{key}"
            if given.get(dotted) is None:
                out[dotted] = value
    return out


def defaults_text(defaults: dict[str, Any]) -> str:
    """The defaults as one line's worth of ``key value`` items (``tokens 100B, seq_len 8192, ...``)."""
    def show(v: Any) -> str:
        if isinstance(v, dict):
            return "{" + ", ".join(f"{k} {show(x)}" for k, x in v.items()) + "}"
        if isinstance(v, list):
            return ",".join(show(x) for x in v)
        return str(v)
    return ", ".join(f"{k.split('.', 1)[1]} {show(v)}" for k, v in defaults.items())
