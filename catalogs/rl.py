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
    allreduce_latency, max_sequences         engine assumptions (see docs/rl.md)
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, fields
from os import PathLike
from pathlib import Path
from typing import Any

from tpopt.catalogs import Catalog, load_catalog, model_from_hf_config
from tpopt.catalogs.declare import Kind, count, duration, fraction, key, number, read_table, size, spec, whole
from tpopt.catalogs.scenario import build_scenario, read_scenario_file, with_overrides
from tpopt.errors import InputError
from tpopt.models.generation import Lengths
from tpopt.models.rl import PLACEMENTS, SYNC_METHODS, RLScenario, RLSearch, RLTask, Verifier
from tpopt.models.units import parse_count, parse_duration, parse_int, parse_number

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


def _staleness(value: Any, what: str, _context: Any) -> int:
    """0 (synchronous) or 1 (one-step async)."""
    lag = parse_int(value, what, minimum=0)
    if lag > 1:
        raise InputError(f"{what}: {value!r} is not modelled (use 0 = synchronous or 1 = one-step async)")
    return lag


def _verifier_kind(value: Any, _what: str, context: tuple[Catalog, Path]) -> Verifier:
    return _verifier(value, *context)


def _rollout_batch(value: Any, what: str, _context: Any) -> tuple[int, ...]:
    return () if value == "auto" else _ints(value, what)


def _lengths_kind() -> Kind:
    return Kind(lambda value, what, _context: _lengths(value, what), "tokens, or { mean, pNN, max }")


def _choices_kind(allowed: tuple[str, ...]) -> Kind:
    return Kind(lambda value, what, _context: _choices(value, what, allowed), f"list of {' | '.join(allowed)}")


@dataclass(frozen=True, eq=False, repr=False)
class RLKeys:
    """The ``[rl]`` table (context: the catalog and the scenario's folder), in the order its values are read;
    errors name ``rl.<key>``. samples or steps: exactly one."""

    prompts_per_step: int = key(whole(1), required=True, help="prompts per rollout step")
    samples_per_prompt: int = key(whole(1), required=True, help="samples per prompt (GRPO: 8)")
    kept: float = key(fraction(), 1.0, help="share of verified samples reaching the update, one-step async")
    kept_sync: float = key(fraction(), 1.0, help="share of verified samples reaching the update, on-policy")
    samples: float | None = key(count(allow_zero=False), help="useful samples to train (or steps)")
    steps: int | None = key(whole(1), help="steps of a full batch (or samples)")
    staleness: int = key(Kind(_staleness, "0 | 1"), 0, help="policy lag allowed: 0 synchronous, 1 one-step async")
    prompt_length: Lengths = key(_lengths_kind(), required=True, help="prompt tokens")
    response_length: Lengths = key(_lengths_kind(), required=True, help="response tokens")
    verifier: Verifier | None = key(Kind(_verifier_kind, "{ workers, per_sample } or { reward_model }"),
                                    help="CPU workers or a reward model (default: none)")
    extra_forwards: int = key(whole(0), 0, help="forward passes per step besides the update")
    weight_bytes: float = key(number(allow_zero=False), 2, help="bytes per weight in the rollout engine")
    kv_bytes: float = key(number(allow_zero=False), 2, help="bytes per KV-cache value")
    kv_pool: float | None = key(size(allow_zero=False), optional=True, help="KV-cache pool per rollout replica")
    common: float = key(size(), "4GiB", help="engine memory besides weights and KV cache")
    hbm_efficiency: float = key(fraction(), 0.70, help="achieved share of the HBM bandwidth in decoding")
    inference_efficiency: float = key(fraction(), 0.50, help="achieved share of the peak in prefill")
    allreduce_latency: float = key(duration(), "0.02ms", help="latency of one decoding all-reduce")
    max_sequences: int = key(whole(1), 1024, help="sequences one engine replica decodes at once")
    placement: tuple[str, ...] = key(_choices_kind(PLACEMENTS), list(PLACEMENTS), help="decision domain")
    rollout_tp: tuple[int, ...] = key(Kind(lambda value, what, _context: _ints(value, what), "list of whole numbers"),
                                      [1, 2, 4, 8], help="decision domain")
    rollout_batch: tuple[int, ...] = key(Kind(_rollout_batch, "auto or list of whole numbers"), "auto",
                                         help="decision domain (auto: derived)")
    weight_sync: tuple[str, ...] = key(_choices_kind(SYNC_METHODS), list(SYNC_METHODS), help="decision domain")


RL_KEYS = {f.name for f in fields(RLKeys)}
RL_REQUIRED = tuple(f.name for f in fields(RLKeys) if spec(f).required)


def rl_task(t: dict[str, Any], cat: Catalog, base: Path) -> tuple[RLTask, RLSearch]:
    """The ``[rl]`` table -> (what the loop must do, the RL-level decision domains), read as :class:`RLKeys`
    declares it."""
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
    r: RLKeys = read_table(RLKeys, t, "rl.", (cat, base))
    if r.samples is not None:
        samples = r.samples
    else:
        assert r.steps is not None  # exactly one of samples and steps is given (checked above)
        samples = r.steps * r.prompts_per_step * r.samples_per_prompt * r.kept_sync
    task = RLTask(
        prompts_per_step=r.prompts_per_step, samples_per_prompt=r.samples_per_prompt, prompt=r.prompt_length,
        response=r.response_length, samples=samples, kept=r.kept, kept_sync=r.kept_sync, staleness=r.staleness,
        verifier=Verifier() if r.verifier is None else r.verifier, extra_forwards=r.extra_forwards,
        weight_bytes=r.weight_bytes, kv_bytes=r.kv_bytes, kv_pool=r.kv_pool, common=r.common,
        hbm_efficiency=r.hbm_efficiency, inference_efficiency=r.inference_efficiency,
        allreduce_latency=r.allreduce_latency, max_sequences=r.max_sequences,
    )
    search = RLSearch(placement=r.placement, rollout_tp=r.rollout_tp, rollout_batch=r.rollout_batch,
                      weight_sync=r.weight_sync)
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
