"""RL scenario files: the ``[rl]`` table plus the usual tables -> :class:`tpopt.models.rl.RLScenario`.

An RL scenario is a pre-training scenario without ``[task]`` sizes (and without ``[input]``): the
policy is ``[model]``, the hardware, memory, checkpoint, cost and ``[search]`` tables describe the
learner exactly as for pre-training, and ``[rl]`` says what the loop must do. The learner's own
scenario is derived from ``[rl]`` (one optimizer step per rollout step of prompts x samples
sequences of the mean prompt + response length) and built by the pre-training reader, so every
learner relation is the one ``tpopt solve`` uses.

Keys of ``[rl]`` (units explicit, unknown keys rejected):

    prompts_per_step, samples_per_prompt     whole numbers (GRPO: 8 samples per prompt)
    prompt_length, response_length           tokens: a number, or { mean = 2048, p99 = 8192, max = 16384 }
    samples | steps                          useful samples to train ("1M"), or steps of a full batch
    kept, kept_sync                          fractions of verified samples reaching the update, one-step
                                             async and on-policy (defaults 1.0 and 1.0)
    staleness                                policy lag allowed: 0 = synchronous, 1 = one-step async
    verifier                                 { workers = 64, per_sample = "0.5s" } (CPU), or
                                             { reward_model = "qwen3-8b" } / { reward_model_config = "..." }
    extra_forwards                           forward passes per step besides the update (default 0)
    placement, rollout_tp, rollout_batch, weight_sync   decision domains
    weight_bytes, kv_bytes, kv_pool, common, hbm_efficiency, inference_efficiency,
    allreduce_latency, max_sequences         engine assumptions (see README "RL post-training")
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Sequence
from os import PathLike
from pathlib import Path
from typing import Any

from tpopt.catalogs import Catalog, load_catalog, model_from_hf_config
from tpopt.catalogs.scenario import build_scenario, read_scenario_file, with_overrides
from tpopt.errors import InputError
from tpopt.models.generation import Lengths
from tpopt.models.rl import PLACEMENTS, SYNC_METHODS, RLScenario, RLSearch, RLTask, Verifier
from tpopt.models.units import parse_bytes, parse_count, parse_duration, parse_fraction, parse_int, parse_number

RL_KEYS = {"prompts_per_step", "samples_per_prompt", "prompt_length", "response_length", "samples", "steps",
           "kept", "kept_sync", "staleness", "verifier", "extra_forwards", "placement", "rollout_tp",
           "rollout_batch", "weight_sync", "weight_bytes", "kv_bytes", "kv_pool", "common", "hbm_efficiency",
           "inference_efficiency", "allreduce_latency", "max_sequences"}
RL_REQUIRED = ("prompts_per_step", "samples_per_prompt", "prompt_length", "response_length")
TABLES = {"scenario", "model", "task", "schedule", "hardware", "memory", "checkpoint", "stragglers", "comm", "cost",
          "search", "rl"}
_PCT = re.compile(r"^p(\d+(?:\.\d+)?)$")


def _lengths(value: Any, what: str) -> Lengths:
    """A token length: a number (every sample that long) or { mean, pNN, max }."""
    if not isinstance(value, dict):
        return Lengths(mean=parse_count(value, what, allow_zero=False))
    if "mean" not in value:
        raise InputError(f"{what}: give mean = <tokens> (and optionally one percentile like p99 and max)")
    matches = {k: m for k in value if (m := _PCT.match(k))}
    tails = list(matches)
    bad = set(value) - {"mean", "max"} - set(tails)
    if bad:
        raise InputError(f"{what}: unknown key(s) {sorted(bad)} (use mean, one percentile such as p99, max)")
    if len(tails) > 1:
        raise InputError(f"{what}: give one tail percentile, not {len(tails)} ({', '.join(sorted(tails))})")
    tail = tail_p = None
    if tails:
        digits = matches[tails[0]].group(1)
        tail_p = 0.999 if digits == "999" else float(digits) / 100.0
        tail = parse_count(value[tails[0]], f"{what}.{tails[0]}", allow_zero=False)
    cap = parse_count(value["max"], f"{what}.max", allow_zero=False) if "max" in value else None
    try:
        return Lengths(mean=parse_count(value["mean"], f"{what}.mean", allow_zero=False), tail=tail, tail_p=tail_p,
                       cap=cap)
    except InputError as exc:
        raise InputError(f"{what}: {exc}") from None


def _verifier(value: Any, cat: Catalog, base: Path) -> Verifier:
    if value is None or value == "none":
        return Verifier()
    if not isinstance(value, dict):
        raise InputError('rl.verifier must be a table: { workers = 64, per_sample = "0.5s" } or '
                         '{ reward_model = "qwen3-8b" }')
    keys = set(value)
    if keys == {"workers", "per_sample"}:
        workers = parse_number(value["workers"], "rl.verifier.workers", allow_zero=False)
        per = parse_duration(value["per_sample"], "rl.verifier.per_sample", allow_zero=False)
        return Verifier(kind="cpu", workers=workers, seconds_per_sample=per)
    if keys == {"reward_model"}:
        return Verifier(kind="reward-model", reward_model=cat.model(str(value["reward_model"])))
    if keys == {"reward_model_config"}:
        p = Path(value["reward_model_config"])
        return Verifier(kind="reward-model", reward_model=model_from_hf_config(p if p.is_absolute() else base / p))
    raise InputError(f"rl.verifier: unknown or incomplete keys {sorted(keys)} (CPU workers: workers and per_sample; "
                     "a reward model: reward_model or reward_model_config)")


def _choices(value: Any, what: str, allowed: Sequence[str]) -> tuple[str, ...]:
    vals = value if isinstance(value, list) else [value]
    if not vals:
        raise InputError(f"{what}: the list is empty")
    out = tuple(dict.fromkeys(str(v) for v in vals))
    for v in out:
        if v not in allowed:
            raise InputError(f"{what}: {v!r} unknown (use {', '.join(allowed)})")
    return out


def _ints(value: Any, what: str) -> tuple[int, ...]:
    vals = value if isinstance(value, list) else [value]
    if not vals:
        raise InputError(f"{what}: the list is empty")
    return tuple(sorted({parse_int(v, what, minimum=1) for v in vals}))


def rl_task(t: dict[str, Any], cat: Catalog, base: Path) -> tuple[RLTask, RLSearch]:
    """The ``[rl]`` table -> (what the loop must do, the RL-level decision domains)."""
    if not isinstance(t, dict):
        raise InputError("scenario: [rl] must be a table")
    bad = set(t) - RL_KEYS
    if bad:
        raise InputError(f"scenario: unknown key(s) {sorted(bad)} in [rl] (known: {', '.join(sorted(RL_KEYS))})")
    for k in RL_REQUIRED:
        if k not in t:
            raise InputError(f"scenario: missing required key {k!r} in [rl]")
    if ("samples" in t) == ("steps" in t):
        raise InputError("scenario: [rl] needs exactly one of samples (useful samples to train) or steps")
    prompts = parse_int(t["prompts_per_step"], "rl.prompts_per_step", minimum=1)
    per = parse_int(t["samples_per_prompt"], "rl.samples_per_prompt", minimum=1)
    kept = parse_fraction(t.get("kept", 1.0), "rl.kept")
    kept_sync = parse_fraction(t.get("kept_sync", 1.0), "rl.kept_sync")
    if "samples" in t:
        samples = parse_count(t["samples"], "rl.samples", allow_zero=False)
    else:
        samples = parse_int(t["steps"], "rl.steps", minimum=1) * prompts * per * kept_sync
    staleness = parse_int(t.get("staleness", 0), "rl.staleness", minimum=0)
    if staleness > 1:
        raise InputError(f"rl.staleness: {t['staleness']!r} is not modelled "
                         f"(use 0 = synchronous or 1 = one-step async)")
    pool = t.get("kv_pool")
    task = RLTask(
        prompts_per_step=prompts, samples_per_prompt=per,
        prompt=_lengths(t["prompt_length"], "rl.prompt_length"),
        response=_lengths(t["response_length"], "rl.response_length"),
        samples=samples, kept=kept, kept_sync=kept_sync, staleness=staleness,
        verifier=_verifier(t.get("verifier"), cat, base),
        extra_forwards=parse_int(t.get("extra_forwards", 0), "rl.extra_forwards", minimum=0),
        weight_bytes=parse_number(t.get("weight_bytes", 2), "rl.weight_bytes", allow_zero=False),
        kv_bytes=parse_number(t.get("kv_bytes", 2), "rl.kv_bytes", allow_zero=False),
        kv_pool=None if pool is None else parse_bytes(pool, "rl.kv_pool", allow_zero=False),
        common=parse_bytes(t.get("common", "4GiB"), "rl.common"),
        hbm_efficiency=parse_fraction(t.get("hbm_efficiency", 0.70), "rl.hbm_efficiency"),
        inference_efficiency=parse_fraction(t.get("inference_efficiency", 0.50), "rl.inference_efficiency"),
        allreduce_latency=parse_duration(t.get("allreduce_latency", "0.02ms"), "rl.allreduce_latency"),
        max_sequences=parse_int(t.get("max_sequences", 1024), "rl.max_sequences", minimum=1),
    )
    rb = t.get("rollout_batch", "auto")
    search = RLSearch(
        placement=_choices(t.get("placement", list(PLACEMENTS)), "rl.placement", PLACEMENTS),
        rollout_tp=_ints(t.get("rollout_tp", [1, 2, 4, 8]), "rl.rollout_tp"),
        rollout_batch=() if rb == "auto" else _ints(rb, "rl.rollout_batch"),
        weight_sync=_choices(t.get("weight_sync", list(SYNC_METHODS)), "rl.weight_sync", SYNC_METHODS),
    )
    return task, search


def trainer_tables(raw: dict[str, Any], task: RLTask) -> dict[str, Any]:
    """The learner's pre-training scenario tables: every table but [rl], with [task] derived.

    One optimizer step per rollout step on prompts x samples sequences packed to the mean sample
    length (prompt + response); tokens are those of the steps a synchronous run takes.
    """
    for table in raw:
        if not table.startswith("_") and table not in TABLES:
            if table == "input":
                raise InputError("scenario: [input] does not apply to an RL run (the rollout feeds the learner)")
            raise InputError(f"scenario: unknown table [{table}] in an RL scenario "
                             f"(known: {', '.join(sorted(TABLES))})")
    tr = {k: copy.deepcopy(v) for k, v in raw.items() if k != "rl"}
    given = tr.get("task", {})
    if not isinstance(given, dict):
        raise InputError("scenario: [task] must be a table")
    extra = set(given) - {"precision"}
    if extra:
        raise InputError(f"scenario: [task] {', '.join(sorted(extra))} are derived from [rl] in an RL scenario "
                         "(only precision may be given)")
    seq = max(1, int(round(task.prompt.mean + task.response.mean)))
    steps = math.ceil(task.samples / (task.kept_sync * task.batch) - 1e-9)
    tr["task"] = dict(given, tokens=float(steps * task.batch * seq), seq_len=seq, global_batch=task.batch)
    return tr


def build_rl_scenario(raw: dict[str, Any], catalog: Catalog | None = None) -> RLScenario:
    """Validate an RL scenario's tables and build the learner's scenario with the pre-training reader."""
    cat = catalog or load_catalog()
    if "rl" not in raw:
        raise InputError("scenario: no [rl] table (tpopt rl plans RL post-training; use tpopt solve for pre-training)")
    task, search = rl_task(raw["rl"], cat, Path(raw.get("_base_dir", ".")))
    trainer = build_scenario(trainer_tables(raw, task), cat)
    if trainer.task.confidence is not None:
        raise InputError("schedule.confidence applies to pre-training plans; tpopt rl models no finish-time "
                         "distribution")
    nics = trainer.search.nics_per_host
    if len(nics) > 1:
        raise InputError("rl: give one [search] nics_per_host (NICs are not an RL decision)")
    name = raw.get("scenario", {}).get("name") or Path(raw.get("_path", "rl")).stem
    return RLScenario(trainer=trainer, task=task, search=search, nics_per_host=nics[0] if nics else 0, name=str(name))


def load_rl_scenario(path: str | PathLike[str], overrides: dict[str, Any] | None = None,
                     catalog_dirs: Sequence[str | PathLike[str]] = ()) -> RLScenario:
    """Read, override (``{"table.key": value}``, including ``rl.*``) and build an RL scenario."""
    raw = read_scenario_file(path)
    if overrides:
        raw = with_overrides(raw, overrides)
    return build_rl_scenario(raw, load_catalog(catalog_dirs))
