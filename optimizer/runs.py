"""Measured runs from a CSV file: one row per run (or two, for a full / selective recompute pair).

Columns (others are ignored; ``#`` starts a comment line):

* name: ``run`` (else the row number);
* model: ``model`` (a catalog name), or ``hidden, layers, heads, ffn, vocab`` with optional
  ``kv_heads``, ``head_dim`` and ``arch`` (``gpt``, the default: LayerNorm, GELU MLP, biases, learned
  positions, tied embeddings, as Megatron-LM's GPT; or ``llama``: RMSNorm, SwiGLU, RoPE, no biases);
  without either, the ``--scenario``'s model;
* task and layout: ``seq_len``, ``global_batch``, ``tp``, ``pp``, ``dp`` or ``gpus`` (or ``cards``); optional
  ``micro_batch``, ``virtual_stages`` (1 = plain 1F1B), ``schedule``, ``recompute``, ``zero_stage``;
  a missing micro-batch makes the row a set of candidate plans (micro-batch 1, 2, 4, 8) and the
  prediction is the fastest candidate that fits memory, as tpopt would choose; a missing schedule is
  Megatron-LM's default, plain 1F1B (``schedules="fastest"`` also tries interleaved with 2-4 virtual
  stages where every stage's layers split evenly);
* measurement: ``iteration_s`` / ``measured_step_s`` / ``iteration_s_derived`` (one run), or
  ``iteration_s_full_recompute`` and ``iteration_s_sp_selective`` (two runs: full recompute without
  sequence parallelism; selective recompute of the attention core with sequence parallelism), or only
  ``measured_tflops_per_gpu`` (iteration = Megatron-LM's FLOPs per iteration / (gpus x TFLOP/s));
* hardware: ``accelerator``; else inferred from ``measured_tflops_per_gpu / measured_pct_of_peak``
  (the catalog card whose FP16/BF16 peak matches within 3 %); else the scenario's, else a100-80gb-sxm;
* software stack: a row's ``stack`` cell, or a ``# stack.RUN RUN ... = NAME`` comment line naming the runs that
  ran another stack variant (torchtitan with torch.compile), else the table's ``# stack = NAME`` (defaults: the
  ``--scenario``'s settings when one is given, else Megatron-LM as in Narayanan et al. 2021 and Korthikanti et
  al. 2022):
  ``precision`` (fp16-mixed-fp32-grad), ``dropout`` (true), ``flash_attention`` (false),
  ``sequence_parallel`` (false, true for the selective column), ``tp_overlap`` (0: Megatron-LM of
  2021-22 does not overlap TP collectives), ``dp_overlap`` (0: its gradient all-reduce runs after the
  backward), ``recompute`` (full);
* the stack's recipe for the row's model, card and precision (catalogs/recipes.toml, :func:`row_moe`): its MoE
  dispatcher and all-to-all overlap where the ``--scenario`` states no [moe] value, its attention backend where
  neither the row nor the scenario states one, and its selective recompute where the row's recompute is "not
  stated (recipe default)"; the run's ``extra["recipe"]`` says which applied;
* published memory for comparison: ``weights_optimizer_gib``, ``activations_gib_tp_no_recompute``,
  ``activations_gib_sp_selective`` (GiB per GPU).
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from tpopt.catalogs import Catalog, load_catalog, read_text_capped
from tpopt.catalogs.recipes import Recipe, find_recipe
from tpopt.catalogs.scenario import build_scenario
from tpopt.catalogs.stacks import DEFAULT_STACK, stack_profile
from tpopt.catalogs.tables import csv_rows
from tpopt.errors import InputError
from tpopt.models import memory
from tpopt.models import terms as T
from tpopt.models.arch import ModelArch
from tpopt.models.evaluate import resolve_plan, with_plan_options
from tpopt.models.plan import Plan, Scenario, schedule_name
from tpopt.models.units import GIB
from tpopt.optimizer.calibrate import MeasuredRun

_R = TypeVar("_R")
DEFAULT_ACCELERATOR = "a100-80gb-sxm"
DEFAULT_TABLE_STACK = "megatron-lm-2021"  # a table without a ``# stack = NAME`` line
STACK = {"precision": "fp16-mixed-fp32-grad", "dropout": True, "flash_attention": False, "sequence_parallel": False,
         "tp_overlap": 0.0, "dp_overlap": 0.0, "recompute": "full"}
#: Precision cells of published tables -> tpopt's recipes (FP8 with per-tensor scaling keeps BF16 masters).
PRECISIONS = {"fp8 (current scaling)": "fp8-mixed", "fp8 (delayed scaling)": "fp8-mixed", "fp8": "fp8-mixed",
              "mxfp8": "mxfp8-mixed", "nvfp4": "nvfp4-mixed", "bf16": "bf16-mixed", "fp16": "fp16-mixed"}
#: optimizer_sharding cells -> ZeRO stage.
SHARDING = {"distributed optimizer (zero-1)": 1, "distributed optimizer": 1, "fsdp (zero-3)": 3, "fsdp": 3,
            "none": 0}
UNSTATED = ("", "not stated")
#: A row's ``stack`` cell (its first word: "megatron-bridge (Megatron-Core + Transformer Engine)") -> the stack
#: profile of catalogs/stacks.toml. Megatron-Bridge and NeMo run Megatron-Core with Transformer Engine.
STACK_NAMES = {"megatron-bridge": "megatron-core", "nemo": "megatron-core", "megatron-core": "megatron-core",
               "megatron-lm": "megatron-lm-2021", "torchtitan": "torchtitan", "maxtext": "maxtext",
               "deepspeed": "deepspeed"}
#: Hybrid sharding cells: "fsdp 8 inside host x data parallel 16 across hosts" = ZeRO-3 over groups of 8 ranks.
HYBRID = re.compile(r"fsdp\s+(\d+)\s+inside\s+host")
#: Keys a table's ``# note.TEXT = key=value; ...`` line may set on the rows whose hardware_note contains TEXT.
NOTE_KEYS = ("accelerator", "hardware.nic", "hardware.nics_per_host")


def unstated(cell: str) -> bool:
    """A cell that states nothing: empty, or "not stated" with or without a remark ("not stated (recipe default)")."""
    return cell in UNSTATED or cell.startswith("not stated")


def row_stack(row: dict[str, str], default: str, where: str) -> str:
    """The row's software stack: its ``stack`` cell (a stack name, or the first word of a published stack's
    description, STACK_NAMES), else the table's."""
    cell = str(row.get("stack") or "").strip().lower()
    if not cell:
        return default
    word = re.split(r"[\s(]", cell, maxsplit=1)[0]
    for key in (cell, word):
        if key in STACK_NAMES:
            return STACK_NAMES[key]
    raise InputError(f"{where}: stack {row.get('stack')!r} unknown (known: {', '.join(sorted(STACK_NAMES))})")


def table_notes(path: str | Path) -> list[tuple[str, dict[str, str]]]:
    """Hardware a table states for the rows whose ``hardware_note`` contains a text, in ``# note.TEXT = key=value;
    key=value`` comment lines (e.g. ``# note.A3 High = hardware.nic=200g; hardware.nics_per_host=4``)."""
    out = []
    for ln in read_text_capped(Path(path), "runs file").splitlines():
        t = ln.strip()
        if t.startswith("#") and t[1:].strip().startswith("note."):
            text, _, body = t[1:].strip()[5:].partition("=")
            sets = {}
            for part in body.split(";"):
                key, _, value = part.partition("=")
                if key.strip() not in NOTE_KEYS or not value.strip():
                    raise InputError(f"{Path(path).name}: '# note.{text.strip()}': {part.strip()!r} is not one of "
                                     f"{', '.join(k + '=VALUE' for k in NOTE_KEYS)}")
                sets[key.strip()] = value.strip()
            out.append((text.strip(), sets))
    return out


def _note_settings(row: dict[str, str], notes: list[tuple[str, dict[str, str]]]) -> dict[str, str]:
    """The ``# note.`` settings that apply to a row (its hardware_note contains their text)."""
    note = str(row.get("hardware_note") or "")
    out: dict[str, str] = {}
    for text, sets in notes:
        if text and text in note:
            out.update(sets)
    return out


def table_run_stacks(path: str | Path) -> dict[str, str]:
    """Stacks a table states for named runs in ``# stack.RUN RUN ... = NAME`` comment lines (e.g. the torchtitan
    runs that ran torch.compile: ``# stack.T2 T3 = torchtitan-compile``); they replace the row's stack cell."""
    out: dict[str, str] = {}
    for ln in read_text_capped(Path(path), "runs file").splitlines():
        t = ln.strip()
        if t.startswith("#") and t[1:].strip().startswith("stack."):
            names, _, value = t[1:].strip()[6:].partition("=")
            stack_profile(value.strip())  # unknown -> one clear error
            out.update(dict.fromkeys(re.split(r"[\s,]+", names.strip()), value.strip()))
    return out


def table_run_recompute(path: str | Path) -> dict[str, str]:
    """Recompute a table states for named runs in ``# recompute.RUN RUN ... = NAME`` comment lines (e.g. the
    torchtitan runs whose "selective activation checkpointing" is its per-op policy: ``# recompute.T1 T2 = op``);
    they replace the row's recompute cell."""
    out: dict[str, str] = {}
    for ln in read_text_capped(Path(path), "runs file").splitlines():
        t = ln.strip()
        if t.startswith("#") and t[1:].strip().startswith("recompute."):
            names, _, value = t[1:].strip()[len("recompute."):].partition("=")
            memory.parse_recompute(value.strip())  # unknown -> one clear error
            out.update(dict.fromkeys(re.split(r"[\s,]+", names.strip()), value.strip()))
    return out


def table_run_memory(path: str | Path) -> dict[str, dict[str, str]]:
    """[memory] settings a table states for named runs in ``# memory.RUN RUN ... = KEY=VALUE`` comment lines (e.g.
    the torchtitan runs whose loss ran eager: ``# memory.T2 T3 = loss=eager``); the scenario checks the value."""
    return _table_run_settings(path, "memory", MEMORY_RUN_KEYS)


def table_run_comm(path: str | Path) -> dict[str, dict[str, str]]:
    """[comm] settings a table states for named runs in ``# comm.RUN RUN ... = KEY=VALUE`` comment lines (e.g. the
    torchtitan runs with asynchronous tensor parallelism: ``# comm.T8 T9 = tp_overlap=true``); they replace the
    stack's default for those rows."""
    return _table_run_settings(path, "comm", COMM_RUN_KEYS)


def _table_run_settings(path: str | Path, section: str, keys: tuple[str, ...]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for ln in read_text_capped(Path(path), "runs file").splitlines():
        t = ln.strip()
        if t.startswith("#") and t[1:].strip().startswith(f"{section}."):
            names, _, setting = t[1:].strip()[len(section) + 1:].partition("=")
            k, _, v = setting.partition("=")
            if k.strip() not in keys:
                raise InputError(f"{Path(path).name}: '# {section}.' sets {', '.join(keys)}, not {k.strip()!r}")
            value = v.strip()
            for n in re.split(r"[\s,]+", names.strip()):
                out.setdefault(n, {})[k.strip()] = value
    return out


MEMORY_RUN_KEYS = ("loss", "fp8_param_gather")
"""[memory] keys a table's ``# memory.RUN ... = KEY=VALUE`` line may set (:func:`table_run_memory`)."""
COMM_RUN_KEYS = ("tp_overlap", "dp_overlap")
"""[comm] keys a table's ``# comm.RUN ... = KEY=VALUE`` line may set (:func:`table_run_comm`)."""


def stated_table_stack(path: str | Path) -> str | None:
    """The software stack a table names in a ``# stack = NAME`` comment line, None without one."""
    for ln in read_text_capped(Path(path), "runs file").splitlines():
        t = ln.strip()
        if t.startswith("#") and t[1:].strip().startswith("stack"):
            key, _, value = t[1:].partition("=")
            if key.strip() == "stack" and value.strip():
                return value.strip()
    return None


def table_stack(path: str | Path) -> str:
    """The software stack a table names in a ``# stack = NAME`` comment line (else :data:`DEFAULT_TABLE_STACK`,
    Megatron-LM 2021-22)."""
    return stated_table_stack(path) or DEFAULT_TABLE_STACK


STACK_ASSUMED = "assumed: the table has no '# stack = NAME' line"
"""Why a run's stack is :data:`DEFAULT_TABLE_STACK`: nothing (row cell, run line, table line, scenario) named one."""


def run_stack(row: dict[str, str], name: str, table: str | None, run_stacks: dict[str, str],
              base_raw: dict[str, Any] | None, where: str) -> tuple[str, str]:
    """A run's software stack and where it comes from, as its stack line says it: with a scenario its
    ``[hardware] stack``; else a ``# stack.RUN`` line naming the run, else the row's ``stack`` cell; then the
    table's ``# stack = NAME`` line (``table``), else :data:`DEFAULT_TABLE_STACK` (:data:`STACK_ASSUMED`). The one
    place the choice is made: a row's stack cell is checked whichever source wins (an unknown one is an error naming
    the run, with a scenario too), unless a ``# stack.RUN`` line replaces it."""
    cell = "" if name in run_stacks else row_stack(row, "", where)
    hardware = base_raw.get("hardware", {}) if base_raw is not None else {}
    if "stack" in hardware:
        return str(hardware["stack"]), "the scenario's [hardware] stack"
    if base_raw is None and name in run_stacks:
        return run_stacks[name], "the table's '# stack.RUN' line"
    if base_raw is None and cell:
        return cell, "the row's stack cell"
    return (DEFAULT_TABLE_STACK, STACK_ASSUMED) if table is None else (table, "the table's '# stack = NAME' line")


def stacks_of_runs(runs: Sequence[object]) -> list[dict[str, Any]]:
    """The stacks the runs were modelled on, each with where it comes from and its runs, in first-seen order
    (``{"stack", "source", "assumed", "runs"}``): a default stack is an assumption the output states. Only measured
    runs read from a table name one; the timed kernels of ``calibrate --measure`` (its observations) do not."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for r in runs:
        if not isinstance(r, MeasuredRun) or not (st := r.extra.get("stack") or {}):
            continue
        key = (st["name"], st["source"])
        out.setdefault(key, {"stack": st["name"], "source": st["source"], "assumed": st["source"] == STACK_ASSUMED,
                             "runs": []})["runs"].append(r.name)
    return list(out.values())


def table_moe(path: str | Path) -> dict[str, float]:
    """Routing a table states for its MoE runs in ``# moe.KEY = NUMBER`` comment lines (e.g. ``# moe.imbalance =
    1``: force-balanced tokens), as [moe] keys of the rows' scenarios."""
    out: dict[str, float] = {}
    for ln in read_text_capped(Path(path), "runs file").splitlines():
        t = ln.strip()
        if t.startswith("#") and t[1:].strip().startswith("moe."):
            key, _, value = t[1:].strip()[4:].partition("=")
            try:
                out[key.strip()] = float(value)
            except ValueError:
                raise InputError(f"{Path(path).name}: '# moe.{key.strip()} = {value.strip()}' is not a number"
                                 ) from None
    return out


def stack_defaults(name: str) -> dict[str, Any]:
    """A measured table's stack defaults (catalogs/stacks.toml): overlap, attention, sequence parallel,
    dropout and recompute as the stack runs them when the table does not say."""
    p = stack_profile(name)
    if name == DEFAULT_TABLE_STACK:
        return dict(STACK, stack=name)
    return {"precision": "bf16-mixed", "dropout": p.dropout, "flash_attention": p.flash_attention,
            "sequence_parallel": p.sequence_parallel, "tp_overlap": p.tp_overlap, "dp_overlap": p.dp_overlap,
            "recompute": p.recompute, "stack": name}
MEMORY_COLUMNS = ("weights_optimizer_gib", "activations_gib_tp_no_recompute", "activations_gib_sp_selective",
                  "memory_gib_published")


def megatron_flops(hidden: float, layers: float, vocab: float, seq_len: float, batch: float) -> float:
    """FLOPs per iteration as Narayanan et al. 2021 count them (incl. the recompute forward):
    96 B s l h^2 (1 + s / (6 h) + V / (16 l h))."""
    return 96.0 * batch * seq_len * layers * hidden ** 2 * (1 + seq_len / (6 * hidden) + vocab / (16 * layers * hidden))


CARD_KEYS = ("usable_memory", "cards_per_host", "peak", "nics_per_host", "card_hour")
"""Scenario [hardware] keys that describe its card: not carried to a row on another accelerator."""


def read_rows(path: str | Path) -> list[dict[str, str]]:
    p = Path(path)
    text = read_text_capped(p, "runs file")
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    if not lines:
        raise InputError(f"{p}: no rows")
    rows = csv_rows(lines, str(p))
    if not rows:
        raise InputError(f"{p}: a header and no runs (one row per measured run after the header)")
    for r in rows:
        if None in r:
            raise InputError(f"{p}: a row has more fields than the header")
    return rows


def _num(row: dict[str, str], key: str, where: str, kind: Callable[[str], Any] = float, default: Any = None,
         minimum: int = 1) -> Any:
    """A number cell: a positive finite float, or an integer of at least ``minimum`` (counts, sizes)."""
    v = row.get(key)
    if v is None or str(v).strip() == "":
        if default is None:
            raise InputError(f"{where}: missing column {key!r}")
        return default
    try:
        x = kind(str(v).strip())
    except ValueError:
        raise InputError(f"{where}: {key} = {v!r} is not a number") from None
    if kind is float and not (x > 0 and math.isfinite(x)):
        raise InputError(f"{where}: {key} = {v!r} must be a positive finite number")
    if kind is int and x < minimum:
        raise InputError(f"{where}: {key} = {v!r} must be at least {minimum}")
    return x


def _overlap_value(v: object) -> bool | float | str:
    """A CSV overlap cell as a scenario value: "async", true / false, or a number."""
    t = str(v).strip().lower()
    if t in ("true", "false"):
        return t == "true"
    if t == "async":
        return t
    try:
        return float(t)
    except ValueError:
        return t  # the scenario reader reports it


def _flag(row: dict[str, str], key: str, default: bool, where: str) -> bool:
    v = row.get(key)
    if v is None or str(v).strip() == "":
        return default
    t = str(v).strip().lower()
    if t in ("1", "true", "yes", "on"):
        return True
    if t in ("0", "false", "no", "off"):
        return False
    raise InputError(f"{where}: {key} = {v!r} must be true or false")


def _model_table(row: dict[str, str], where: str) -> dict[str, Any] | None:
    if row.get("model"):
        return {"name": row["model"].strip()}
    if not row.get("hidden"):
        return None
    h = _num(row, "hidden", where, int)
    heads = _num(row, "heads", where, int)
    kv = _num(row, "kv_heads", where, int, heads)
    hd = _num(row, "head_dim", where, int, h // heads)
    arch = (row.get("arch") or "gpt").strip().lower()
    t: dict[str, Any] = {"layers": _num(row, "layers", where, int), "hidden": h, "heads": heads, "kv_heads": kv,
                         "head_dim": hd, "ffn": _num(row, "ffn", where, int), "vocab": _num(row, "vocab", where, int)}
    if arch == "gpt":
        t.update(norm="layernorm", gated_mlp=False, linear_bias=True, tied_embeddings=True, activation="gelu",
                 positions="learned", learned_positions=_num(row, "seq_len", where, int))
    elif arch == "llama":
        t.update(norm="rmsnorm", gated_mlp=True, activation="silu", positions="rope")
    else:
        raise InputError(f"{where}: arch {arch!r} unknown (gpt or llama)")
    if t["heads"] % t["kv_heads"]:
        raise InputError(f"{where}: heads must be a multiple of kv_heads")
    return {"_inline": t}


def _in_run(where: str, call: Callable[..., _R], *args: Any) -> _R:
    """``call(*args)``, an input error it raises named by the run it reads (``FILE: run NAME: ...``), as the
    table's own cell errors are: an unknown model or card of one row among many."""
    try:
        return call(*args)
    except InputError as e:
        raise InputError(f"{where}: {e}") from None


def _accelerator(row: dict[str, str], cat: Catalog, base_raw: dict[str, Any] | None, where: str) -> str:
    if row.get("accelerator"):
        name = row["accelerator"].strip()
        _in_run(where, cat.accelerator, name)
        return name
    tf, pct = row.get("measured_tflops_per_gpu"), row.get("measured_pct_of_peak")
    if tf and pct:
        peak = float(tf) / (float(pct) / 100.0) * 1e12
        for name, a in cat.accelerators.items():
            for p in (a.peak_fp16, a.peak_flops):
                if p > 0 and abs(peak / p - 1.0) < 0.03:
                    return name
    if base_raw is not None:
        acc = base_raw["hardware"]["accelerator"]
        return acc if isinstance(acc, str) else acc[0]
    return DEFAULT_ACCELERATOR


def _stack_defaults(base_raw: dict[str, Any] | None, stack: str) -> dict[str, Any]:
    """Software-stack defaults of a row run on ``stack`` (:func:`run_stack`): that stack's, or, when a scenario is
    given, that scenario's own settings (the overlaps it does not state: its stack's, as build_scenario takes
    them)."""
    if base_raw is None:
        return stack_defaults(stack)
    task, mem, comm = (base_raw.get(t, {}) for t in ("task", "memory", "comm"))
    own = stack_profile(base_raw.get("hardware", {}).get("stack", DEFAULT_STACK))  # the scenario's (build_scenario)
    rec = base_raw.get("search", {}).get("recompute", "none")
    return {"precision": task.get("precision", "bf16-mixed"), "dropout": mem.get("dropout", False),
            "flash_attention": mem.get("flash_attention", True),
            "sequence_parallel": mem.get("sequence_parallel", True),
            "tp_overlap": comm.get("tp_overlap", own.tp_overlap), "dp_overlap": comm.get("dp_overlap", own.dp_overlap),
            "recompute": rec[0] if isinstance(rec, list) else rec, "stack": stack}


def _candidates(layers: int, pp: int, per_replica: int, mb: int, vs: int | None, schedule: str,
                choose: str) -> list[tuple[int, str]]:
    """(micro-batch, schedule) candidates of a row. A missing schedule is Megatron-LM's default, plain
    1F1B (interleaving needs an explicit flag), or, with ``choose = "fastest"``, also interleaved with
    2-4 virtual stages where every stage's layers split evenly."""
    mbs = [mb] if mb else [b for b in (1, 2, 4, 8) if per_replica % b == 0]
    if schedule:
        scheds = [schedule]
    elif vs is not None:
        scheds = ["1f1b" if vs <= 1 else schedule_name("interleaved", vs)]
    elif pp > 1 and choose == "fastest":
        scheds = ["1f1b"] + [schedule_name("interleaved", v) for v in (2, 3, 4)
                             if layers % pp == 0 and (layers // pp) % v == 0]
    else:
        scheds = ["1f1b"]
    return [(b, s) for b in mbs for s in scheds]


def runs_from_csv(path: str | Path, catalog: Catalog | None = None, base_raw: dict[str, Any] | None = None,
                  accelerator: str | None = None, schedules: str = "default",
                  task_keys: Sequence[str] | None = None) -> list[MeasuredRun]:
    """Measured runs of a CSV file (module docstring); ``base_raw`` is a scenario's raw tables. ``task_keys``:
    the ``[task]`` keys (``seq_len``, ``global_batch``) ``base_raw`` may supply to a row without that column
    (None: every key, a scenario the user gave; the built-in one states none, so the column is required)."""
    cat = catalog or load_catalog()
    table = Path(path).stem
    stated_stack = stated_table_stack(path)
    routing = table_moe(path)
    notes = table_notes(path)
    run_stacks = table_run_stacks(path)
    run_recompute = table_run_recompute(path)
    run_memory = table_run_memory(path)
    run_comm = table_run_comm(path)
    out = []
    for i, row in enumerate(read_rows(path)):
        name = (row.get("run") or f"{table}-{i + 1}").strip()
        where = f"{Path(path).name}: run {name}"
        raw = copy.deepcopy(base_raw) if base_raw else {}
        model = _model_table(row, where)
        if model is None and "model" not in raw:
            raise InputError(f"{where}: no model columns (hidden, layers, ...) and no --scenario to take one from")
        arch = None
        if model and "_inline" in model:
            arch = ModelArch(name=name, source=f"{Path(path).name}, run {name}", **model["_inline"])
            raw["model"] = {"name": "(inline)"}
        elif model:
            _in_run(where, cat.model, model["name"])
            raw["model"] = model
        noted = _note_settings(row, notes)
        if "accelerator" in noted and not accelerator:
            _in_run(where, cat.accelerator, noted["accelerator"])
        acc = accelerator or noted.get("accelerator") or _accelerator(row, cat, base_raw, where)
        stack, how = run_stack(row, name, stated_stack, run_stacks, base_raw, where)
        defaults = _stack_defaults(base_raw, stack)
        cells = {k: str(row.get(k) or "").strip().lower() for k in STACK}
        stated = {k: v for k, v in cells.items() if not unstated(v)}
        if name in run_recompute:
            stated["recompute"] = run_recompute[name]
        stated.update(run_comm.get(name, {}))  # the table's [comm] statement for this run
        if "precision" in stated:
            stated["precision"] = PRECISIONS.get(stated["precision"], stated["precision"])
        task = {k: v for k, v in raw.get("task", {}).items() if task_keys is None or k in task_keys}
        seq = _num(row, "seq_len", where, int, task.get("seq_len") or None)
        batch = _num(row, "global_batch", where, int, task.get("global_batch") or None)
        tp, pp = _num(row, "tp", where, int, 1), _num(row, "pp", where, int, 1)
        cp, ep = _num(row, "cp", where, int, 1), _num(row, "ep", where, int, 1)
        etp = _num(row, "expert_tp", where, int, 0, minimum=0) if row.get("expert_tp") else 0
        count = "gpus" if row.get("gpus") else "cards" if row.get("cards") else None
        gpus = _num(row, count, where, int) if count else tp * cp * pp * _num(row, "dp", where, int)
        raw["task"] = {"tokens": "1B", "seq_len": seq, "global_batch": batch,
                       "precision": str(stated.get("precision", defaults["precision"]))}
        raw["schedule"] = {"deadline": "100000d"}
        hw = {k: v for k, v in raw.get("hardware", {}).items() if k != "efficiency"}
        if hw.get("accelerator", acc) != acc:  # another card than the scenario's: none of its card figures
            hw = {k: v for k, v in hw.items() if k not in CARD_KEYS}
        hw["accelerator"] = acc
        hw["stack"] = defaults["stack"]
        if "hardware.nic" in noted:
            hw["nic"] = noted["hardware.nic"]
        if "hardware.nics_per_host" in noted:
            hw["nics_per_host"] = _num(noted, "hardware.nics_per_host", where, int)
        raw["hardware"] = hw
        mem = dict(raw.get("memory", {}))
        mem.pop("activation_reserve", None)
        mem["dropout"] = _flag(row, "dropout", defaults["dropout"], where)
        mname = arch.name if arch is not None else str(raw["model"].get("name", ""))
        recipe = find_recipe(defaults["stack"], mname, (acc,), raw["task"]["precision"])
        attention = recipe.flash_attention() if recipe is not None else None
        if attention is None or "flash_attention" in (base_raw or {}).get("memory", {}):
            attention = defaults["flash_attention"]
        mem["flash_attention"] = _flag(row, "flash_attention", attention, where)
        mem.setdefault("prefetch", stack_profile(defaults["stack"]).fsdp_prefetch)  # ZeRO-3 units gathered ahead
        if recipe is not None and recipe.activation_offload_layers and cells["recompute"].startswith("not stated"):
            mem.setdefault("activation_offload_layers", recipe.activation_offload_layers)  # the recipe's offload
        for key, value in run_memory.get(name, {}).items():  # a table's "true" / "false" as the flag it states
            mem[key] = value.lower() == "true" if value.lower() in ("true", "false") else value
        raw["memory"] = mem
        raw["comm"] = {"tp_overlap": _overlap_value(stated.get("tp_overlap", defaults["tp_overlap"])),
                       "dp_overlap": _overlap_value(stated.get("dp_overlap", defaults["dp_overlap"]))}
        raw["checkpoint"] = {"card_mtbf": "none"}
        raw.pop("input", None)
        raw.pop("search", None)
        raw.pop("sweep", None)
        sc = build_scenario(raw, cat) if arch is None else _with_model(raw, cat, arch)
        implied = row_moe(sc.model.moe, routing, recipe, (base_raw or {}).get("moe"), {acc: sc.system(acc).acc.vendor})
        if implied:  # the table's routing statement and the stack's recipe, for its MoE rows
            raw["moe"] = {**implied, **raw.get("moe", {})}
            sc = build_scenario(raw, cat) if arch is None else _with_model(raw, cat, arch)
        dp = gpus // (tp * cp * pp)
        if dp * tp * cp * pp != gpus or batch % dp:
            raise InputError(f"{where}: gpus ({gpus}) must be tp x cp x pp x dp with dp dividing the global batch")
        mb = _num(row, "micro_batch", where, int, 0) if row.get("micro_batch") else 0
        vs = _num(row, "virtual_stages", where, int, 0) if row.get("virtual_stages") else None
        zero = _num(row, "zero_stage", where, int, 0, minimum=0) if row.get("zero_stage") else 0
        sharding = str(row.get("optimizer_sharding") or row.get("sharding") or "").strip().lower()
        hybrid = HYBRID.match(sharding)
        if hybrid and not row.get("zero_stage"):
            zero = 3
            raw["memory"]["zero_group"] = int(hybrid.group(1))
            sc = build_scenario(raw, cat) if arch is None else _with_model(raw, cat, arch)
        elif sharding and not row.get("zero_stage"):
            if sharding not in SHARDING:
                raise InputError(f"{where}: optimizer_sharding {sharding!r} unknown ({', '.join(SHARDING)})")
            zero = SHARDING[sharding]
        cands = _candidates(sc.model.layers, pp, batch // dp, mb, vs, _schedule_cell(row, vs, where), schedules)
        memory = {k: float(row[k]) for k in MEMORY_COLUMNS if row.get(k)}
        sp = _flag(row, "sequence_parallel", defaults["sequence_parallel"], where)
        rec = str(stated.get("recompute", defaults["recompute"]))
        # a recompute the table says the recipe chose ("not stated (recipe default)") is a plan choice, as the
        # recipe makes it: the fastest of the stack's options that fits memory (recompute_options); a stated
        # one is the run's, an absent column the table's stack default
        recs = recompute_options(defaults["stack"], sc.model, rec) if cells["recompute"].startswith("not stated") \
            else (rec,)
        if cells["recompute"].startswith("not stated") and recipe is not None and recipe.recompute() is not None:
            recs = (str(recipe.recompute(sc.model.moe)),)  # the recipe's own selective recompute (recipes.toml)

        plans = partial(_row_plans, acc, gpus, zero, tp, pp, cands, cp, ep, etp)  # (recompute, seq. par.) -> plans
        pairs = []
        if row.get("iteration_s_full_recompute") or row.get("iteration_s_sp_selective"):
            if row.get("iteration_s_full_recompute"):
                pairs.append((f"{name} full", plans("full", False),
                              _num(row, "iteration_s_full_recompute", where)))
            if row.get("iteration_s_sp_selective"):
                pairs.append((f"{name} sp+sel", plans("attn", True), _num(row, "iteration_s_sp_selective", where)))
        else:
            for key in ("iteration_s", "measured_step_s", "iteration_s_derived"):
                if row.get(key):
                    t = _num(row, key, where)
                    break
            else:
                if not row.get("measured_tflops_per_gpu"):
                    raise InputError(f"{where}: no measured time (iteration_s, iteration_s_derived, "
                                     "iteration_s_full_recompute / _sp_selective or measured_tflops_per_gpu)")
                a = sc.model
                t = megatron_flops(a.hidden, a.layers, a.vocab, seq, batch) / (
                    gpus * _num(row, "measured_tflops_per_gpu", where) * 1e12)
            pairs.append((name, tuple(p for r in recs for p in plans(r, sp)), t))
        for run_name, ps, t in pairs:
            extra: dict[str, Any] = dict(memory, row=row, stack={"name": defaults["stack"], "source": how})
            if recipe is not None:
                extra["recipe"] = recipe.assumption()
            out.append(MeasuredRun(run_name, sc, ps, t, table=table, extra=extra))
    return out


def row_moe(moe: bool, routing: dict[str, float], recipe: Recipe | None,
            stated: dict[str, Any] | None, makers: dict[str, str] | None = None) -> dict[str, Any]:
    """[moe] keys a MoE row takes from its table and its stack's recipe: the table's ``# moe.KEY`` routing
    (when the ``--scenario`` has no [moe] table) and the recipe's dispatcher and all-to-all overlap
    (Recipe.moe_settings_on the row's card, ``makers``: card -> maker) where the scenario states neither; nothing
    for a dense model."""
    if not moe:
        return {}
    out: dict[str, Any] = dict(routing) if stated is None else {}
    if recipe is not None:
        settings, off = recipe.moe_settings_on(makers or {}, stated or {})
        left = {k for keys, _ in off.values() for k in keys}  # the row's card does not run them: not written
        out.update({k: v for k, v in settings.items() if k not in (stated or {}) and k not in left})
    return out


def recompute_options(stack: str, model: ModelArch, default: str = "none") -> tuple[str, ...]:
    """The recompute choices a recipe of ``stack`` has for a run that does not state its own, cheapest first:
    the stack's default, none, each selective group of its vocabulary (StackProfile.recompute_modules, in
    tpopt's groups: memory.parse_recompute; modules tpopt has no group for are left out, as are groups the
    model has no tensors for: mla_up without multi-head latent attention), all those groups together, the per-op
    mode of a stack that has one (torchtitan's "op", dense models), and full. Among them a row's prediction takes
    the fastest that fits memory, as tpopt itself would choose."""
    groups: list[str] = []
    modes: list[str] = []
    for module in stack_profile(stack).recompute_modules:
        try:
            g = memory.parse_recompute(module)
        except InputError:
            continue  # a stack's own name tpopt has no tensors for (shared_experts, moe, op, layer)
        if g in ("none", "full") or (g == "mla_up" and model.kv_lora_rank <= 0) or g in groups + modes:
            continue
        if g == memory.OP_RECOMPUTE:  # a mode of its own (torchtitan's per-op policy), dense blocks only
            if not (model.moe or model.kv_lora_rank > 0):
                modes.append(g)
            continue
        groups.append(g)
    joined = memory.parse_recompute("+".join(groups)) if groups else "none"
    return tuple(dict.fromkeys([memory.parse_recompute(default), "none", *groups, joined, *modes, "full"]))


def _schedule_cell(row: dict[str, str], vs: int | None, where: str) -> str:
    """A row's ``schedule`` cell as a plan schedule: a tpopt name as is; the published "1F1B" / "interleaved
    1F1B" with the row's ``virtual_stages`` (interleaved with one chunk per device is plain 1F1B); empty: none."""
    cell = str(row.get("schedule") or "").strip()
    low = cell.lower()
    if low in ("1f1b", "interleaved 1f1b", "interleaved"):
        v = vs or 1
        if low != "1f1b" and vs is None:
            raise InputError(f"{where}: schedule {cell!r} needs virtual_stages (chunks per device)")
        return "1f1b" if v <= 1 else schedule_name("interleaved", v)
    return cell


def _row_plans(acc: str, gpus: int, zero: int, tp: int, pp: int, cands: list[tuple[int, str]], cp: int, ep: int,
               etp: int, recompute: str, seq_par: bool) -> tuple[Plan, ...]:
    """A row's candidate plans, one per (micro-batch, schedule), with one recompute and sequence-parallel setting."""
    return tuple(Plan(acc, gpus, zero_stage=zero, tp=tp, pp=pp, cp=cp, ep=ep, expert_tp=etp, micro_batch=b,
                      recompute=recompute, schedule=s, sequence_parallel=seq_par, nics_per_host=0)
                 for b, s in cands)


def _with_model(raw: dict[str, Any], cat: Catalog, arch: ModelArch) -> Scenario:
    """Build a scenario whose model is given inline (not a catalog name)."""
    cat2 = copy.copy(cat)
    cat2.models = dict(cat.models)
    cat2.models[arch.name] = arch
    raw = dict(raw)
    raw["model"] = {"name": arch.name}
    return build_scenario(raw, cat2)


def memory_figures(run: MeasuredRun) -> dict[str, tuple[float, float]]:
    """Published per-GPU memory of the run's row next to tpopt's: {column: (predicted GiB, published GiB)}.

    weights_optimizer_gib: persistent state of a card of a stage holding transformer layers only (the
    papers count 12 h^2 L parameters, no embedding: a middle stage; the whole model when pp = 1);
    activations_gib_tp_no_recompute: activations kept on the first stage's card (tensor parallelism
    without sequence parallelism, nothing recomputed); activations_gib_sp_selective: the same with
    sequence parallelism and the attention core recomputed. The recompute workspace is not part of the
    published figures and is left out.
    """

    row = run.extra
    plan = resolve_plan(run.scenario, run.plans[0])
    sc = with_plan_options(run.scenario, plan)
    out = {}
    if "weights_optimizer_gib" in row:
        split = T.stage_split(sc, plan.pp)
        counts = memory.stage_param_counts(sc.model, plan.tp, split)
        n = counts[1] if plan.pp > 2 else counts[0]
        state = memory.zero_state_bytes(n, plan.dp, plan.zero_stage, sc.state_recipe())
        out["weights_optimizer_gib"] = (float(state) / GIB, row["weights_optimizer_gib"])
    for col, sp, rec in (("activations_gib_tp_no_recompute", False, "none"),
                         ("activations_gib_sp_selective", True, "attn")):
        if col in row:
            s2 = replace(sc, memory=replace(sc.memory, sequence_parallel=sp))
            acts = T.stored_activations(s2, schedule=plan.schedule, recompute=rec, tp=plan.tp, pp=plan.pp, dp=plan.dp,
                                        mb=plan.micro_batch)
            out[col] = (float(acts) / GIB, row[col])
    return out
