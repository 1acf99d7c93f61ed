"""Scenario files (TOML) -> :class:`tpopt.models.plan.Scenario`.

A scenario names the model, the task, the schedule, the hardware candidates and the assumptions
(memory, input, checkpoint, stragglers, cost), plus the ``[search]`` domains the solver explores.
Every key is documented in the README; unknown keys are rejected so a typo cannot be ignored.
Command-line overrides are applied to the raw tables (:func:`with_overrides`) before building, so
``solve``, ``sweep`` and ``explain`` share one path from text to numbers.
"""

from __future__ import annotations

import copy
import tomllib
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from tpopt.catalogs import Catalog, build_model, load_catalog, model_from_hf_config, read_text_capped
from tpopt.errors import InputError
from tpopt.models import memory
from tpopt.models.hardware import Accelerator
from tpopt.models.plan import (
    OFFLOADS,
    SAVE_MODES,
    CostOptions,
    InputPipeline,
    MemoryOptions,
    MoeOptions,
    Reliability,
    Scenario,
    SearchSpace,
    System,
    Task,
    schedule_name,
    split_schedule,
)
from tpopt.models.units import (
    MAX_CARD_BYTES,
    MAX_DEADLINE_S,
    MAX_TOKENS,
    parse_bandwidth,
    parse_bytes,
    parse_count,
    parse_duration,
    parse_flops_rate,
    parse_fraction,
    parse_int,
    parse_number,
)

#: The built-in default scenario (the chapter's design case), used by every command without --scenario.
BUILTIN_SCENARIO = Path(__file__).resolve().parent / "design-case.toml"
BUILTIN_NAME = "design-case"
#: The built-in RL scenario (GRPO on a Qwen3-8B policy, chapter 10.5), used by `tpopt rl` without --scenario.
BUILTIN_RL_SCENARIO = Path(__file__).resolve().parent / "rl-grpo-qwen3-8b.toml"

# table -> allowed keys (None: any key, parsed elsewhere)
KEYS = {
    "model": {"name", "config"},
    "task": {"tokens", "seq_len", "global_batch", "precision", "critical_batch", "batch_ramp", "stages"},
    "schedule": {"deadline", "reserved"},
    "hardware": {"accelerator", "usable_memory", "efficiency", "cards_per_host", "nics_per_host", "nic", "peak",
                 "max_nics_per_host", "card_hour"},
    "memory": {"activation_reserve", "flash_attention", "activation_bytes", "loss_chunks", "prefetch",
               "sequence_parallel", "dropout"},
    "input": {"workers", "sequences_per_worker_s", "wait", "workers_per_host"},
    "checkpoint": {"write_bandwidth", "storage", "restore", "card_mtbf", "job_mtbf", "save_interval", "mode",
                   "snapshot_copy", "bytes_per_param", "loss_spike_interval", "failure_model"},
    "stragglers": {"sigma"},
    "comm": {"overlap", "tp_overlap", "dp_overlap", "cp_method", "cp_split"},
    "cost": {"card_hour", "nic_hour", "max_cost"},
    "search": {"zero_stage", "tp", "pp", "micro_batch", "recompute", "offload", "schedule", "nics_per_host",
               "save_interval", "save_mode", "max_cards", "accelerator", "dp", "virtual_stages", "ep", "expert_tp",
               "capacity_factor", "global_batch", "cp", "sequence_parallel"},
    "moe": {"imbalance", "hot_experts", "max_drop", "a2a_overlap", "dispatcher", "node_limit"},
    "sweep": None,
    "rl": None,  # RL post-training, parsed by tpopt.catalogs.rl
    "scenario": {"name", "description"},
}
REQUIRED = {"model": (), "task": ("tokens", "seq_len", "global_batch"), "schedule": ("deadline",),
            "hardware": ("accelerator",)}
CARD_KEYS = ("usable_memory", "cards_per_host", "nics_per_host", "nic", "peak", "max_nics_per_host", "card_hour")
STAGE_TASK_KEYS = ("tokens", "seq_len", "global_batch")
STAGE_KEYS = {"name", "tokens", "seq_len", "global_batch", "critical_batch", "batch_ramp", "search"}
DEFAULT_EFFICIENCY = 0.40  # what `tpopt explain` / sweeps start from when a flat efficiency is asked for
AUTO_INTERVAL = "auto"
MAX_FILE_BYTES = 1024 * 1024  # a scenario file larger than 1 MiB is refused (e.g. --scenario /dev/zero)
MAX_LIST = 1024  # entries in one [search] list
MAX_SEQ_LEN = 2**24  # tokens per sequence
MAX_BATCH = 2**20  # sequences per step (dp ranges over its divisors)
MAX_CARDS = 2**24  # cards in a plan (search.max_cards, job_mtbf.cards)
MAX_DOMAIN_INT = 2**20  # tp, pp, dp, micro-batch, NIC counts in [search]
MAX_HOST_INT = 1024  # cards or NICs per host
# Checkpoint defaults do not bias a plan: unless the scenario states them, the save interval is the
# optimum for each card count ("auto", tau* = sqrt(2c / lambda)) and both save modes are searched.
DEFAULT_SAVE_INTERVAL = AUTO_INTERVAL
DEFAULT_SAVE_MODES = ("sync", "async")


def read_scenario_file(path) -> dict:
    """The raw TOML tables of a scenario file (with ``_base_dir`` for relative paths).

    ``path`` may also be a mapping of tables as a TOML file would give them (``{"model": {"name":
    "qwen3-8b"}, "task": {...}, ...}``); relative paths in it are taken from the working directory.
    """
    if isinstance(path, Mapping):
        raw = copy.deepcopy(dict(path))
        raw.setdefault("_base_dir", str(Path.cwd()))
        raw.setdefault("_path", str(raw.get("scenario", {}).get("name", "scenario"))
                       if isinstance(raw.get("scenario"), Mapping) else "scenario")
        return raw
    p = Path(path)
    text = read_text_capped(p, "scenario file", MAX_FILE_BYTES)
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{p}: malformed TOML ({exc})") from None
    raw["_base_dir"] = str(p.resolve().parent)
    raw["_path"] = str(p)
    return raw


# natural names for overrides (``{"deadline": "30d"}``) -> the table keys they set. Keys that appear in
# one table only ("efficiency", "workers", ...) are found there; these are the names that need a choice.
NATURAL = {
    "model": ("model.name",),
    "name": ("scenario.name",),
    "hw": ("hardware.accelerator", "search.accelerator"),
    "accelerator": ("hardware.accelerator", "search.accelerator"),
    "nics_per_host": ("hardware.nics_per_host",),
    "card_hour": ("cost.card_hour",),
    "save_interval": ("search.save_interval",),
    "save_mode": ("search.save_mode",),
    "mode": ("search.save_mode",),
    "schedule": ("search.schedule",),
    "pipeline_schedule": ("search.schedule",),
    "input_wait": ("input.wait",),
    "sigma": ("stragglers.sigma",),
}


def natural_keys(name: str) -> tuple[str, ...]:
    """The ``table.key`` entries a natural override name sets (``deadline`` -> ``schedule.deadline``)."""
    if name in NATURAL:
        return NATURAL[name]
    tables = [t for t, keys in KEYS.items() if keys and name in keys]
    if len(tables) == 1:
        return (f"{tables[0]}.{name}",)
    import difflib

    known = sorted(set(NATURAL) | {k for keys in KEYS.values() if keys for k in keys})
    close = difflib.get_close_matches(name, known, n=3)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    raise InputError(f"unknown scenario input {name!r} ({hint}give a key of one table, e.g. 'deadline', "
                     "or 'table.key')")


def _natural(overrides: dict) -> dict:
    """Overrides with natural names expanded to ``table.key`` (dotted keys pass through)."""
    out = {}
    for name, value in overrides.items():
        if "." in name:
            out[name] = value
            continue
        keys = natural_keys(name)
        if keys[0] == "hardware.accelerator" and isinstance(value, str):
            value = [x.strip() for x in value.split(",") if x.strip()]
        for k in keys:
            out[k] = value
    return out


def with_overrides(raw: dict, overrides: dict) -> dict:
    """A copy of ``raw`` with overrides applied (``None`` values skipped): ``{"table.key": value}``, or
    natural names such as ``{"deadline": "30d", "hw": "h100-sxm,b200", "efficiency": "45%"}``."""
    out = copy.deepcopy(raw)
    for dotted, value in _natural(overrides).items():
        if value is None:
            continue
        table, _, key = dotted.partition(".")
        t = out.setdefault(table, {})
        if not isinstance(t, dict):
            raise InputError(f"scenario: [{table}] must be a table")
        if table == "hardware" and key == "accelerator":
            _retarget_card_overrides(t, value)
        if table == "hardware" and key in CARD_KEYS:
            # an explicit override beats per-card values the file (or a retarget) put in sub-tables
            for sub in t.values():
                if isinstance(sub, dict) and key in sub:
                    sub[key] = value
        t[key] = value
    return out


def _retarget_card_overrides(hw: dict, new) -> None:
    """Card-specific top-level overrides (usable memory, ...) belong to the accelerator(s) the file
    named; when the command line picks other hardware they move under [hardware.<old name>]."""
    old = hw.get("accelerator")
    old_list = [old] if isinstance(old, str) else list(old or [])
    moved = {k: hw.pop(k) for k in CARD_KEYS if k in hw}
    if moved:
        for name in old_list:
            sub = hw.setdefault(name, {})
            for k, v in moved.items():
                sub.setdefault(k, v)


def _check_keys(raw: dict) -> None:
    for table, value in raw.items():
        if table.startswith("_"):
            continue
        if table not in KEYS:
            raise InputError(f"scenario: unknown table [{table}] (known: {', '.join(sorted(KEYS))})")
        if not isinstance(value, dict):
            raise InputError(f"scenario: [{table}] must be a table")
        allowed = KEYS[table]
        if allowed is None:
            continue
        for key, v in value.items():
            if table == "hardware" and isinstance(v, dict):
                bad = set(v) - set(CARD_KEYS)
                if bad:
                    raise InputError(f"scenario: unknown key(s) {sorted(bad)} in [hardware.{key}]")
                continue
            if key not in allowed:
                raise InputError(f"scenario: unknown key {key!r} in [{table}] (known: {', '.join(sorted(allowed))})")
    if "rl" in raw and "tokens" not in raw.get("task", {}):
        raise InputError("scenario: this is an RL scenario ([rl] table); plan it with tpopt rl")
    for table, keys in REQUIRED.items():
        if table not in raw:
            raise InputError(f"scenario: missing required table [{table}]")
        for key in keys:
            if table == "task" and "stages" in raw[table] and key in STAGE_TASK_KEYS:
                continue  # each stage gives (or inherits) its own
            if key not in raw[table]:
                raise InputError(f"scenario: missing required key {key!r} in [{table}]")
    if "name" not in raw["model"] and "config" not in raw["model"]:
        raise InputError("scenario: [model] needs name = \"...\" or config = \"path/to/config.json\"")


def _as_list(value, what: str) -> list:
    if isinstance(value, list):
        if not value:
            raise InputError(f"{what}: the list is empty")
        if len(value) > MAX_LIST:
            raise InputError(f"{what}: {len(value):,} entries, above the bound of {MAX_LIST:,}")
        return value
    if isinstance(value, str) and "," in value:
        return [x.strip() for x in value.split(",") if x.strip()]
    return [value]


def _int_list(value, what: str, minimum: int = 1, maximum: int = MAX_DOMAIN_INT) -> tuple[int, ...]:
    return tuple(sorted({parse_int(v, what, minimum=minimum, maximum=maximum) for v in _as_list(value, what)}))


def _accelerator_with_overrides(acc: Accelerator, o: dict, cat: Catalog, where: str) -> Accelerator:
    from dataclasses import replace

    kw = {}
    if "usable_memory" in o:
        kw["memory_usable"] = parse_bytes(o["usable_memory"], f"{where} usable_memory", allow_zero=False,
                                          maximum=MAX_CARD_BYTES)
    if "cards_per_host" in o:
        kw["cards_per_host"] = parse_int(o["cards_per_host"], f"{where} cards_per_host", minimum=1,
                                         maximum=MAX_HOST_INT)
    if "peak" in o:
        kw["peak_flops"] = parse_flops_rate(o["peak"], f"{where} peak")
    if "nic" in o:
        name = o["nic"]
        if name in cat.nics:
            kw["nic_bw"] = cat.nics[name].bandwidth
            kw["nic_price_hour"] = cat.nics[name].price_hour
            kw["nic"] = name
        else:
            kw["nic_bw"] = parse_bandwidth(name, f"{where} nic")
            kw["nic"] = str(name)
    if "nics_per_host" in o:
        kw["nics_per_host"] = parse_int(o["nics_per_host"], f"{where} nics_per_host", minimum=1,
                                        maximum=MAX_HOST_INT)
        kw["max_nics_per_host"] = max(acc.max_nics_per_host, kw["nics_per_host"])
    if "max_nics_per_host" in o:
        kw["max_nics_per_host"] = parse_int(o["max_nics_per_host"], f"{where} max_nics_per_host", minimum=1,
                                            maximum=MAX_HOST_INT)
    if "card_hour" in o:
        kw["price_card_hour"] = parse_number(o["card_hour"], f"{where} card_hour")
    return replace(acc, **kw)


def build_scenario(raw: dict, catalog: Catalog | None = None) -> Scenario:
    """Validate the raw tables and convert every value to SI units exactly once."""
    _check_keys(raw)
    cat = catalog or load_catalog()
    base = Path(raw.get("_base_dir", "."))

    # model
    m = raw["model"]
    if "config" in m:
        cfg = Path(m["config"])
        model = model_from_hf_config(cfg if cfg.is_absolute() else base / cfg)
    else:
        model = cat.model(str(m["name"]))

    # task and schedule (a staged task: the first stage stands for the task; every stage is built below)
    stage_tables = _stage_tables(raw["task"])
    t = dict(stage_tables[0], **{k: v for k, v in raw["task"].items() if k not in stage_tables[0]}) \
        if stage_tables else raw["task"]
    tokens = parse_count(t["tokens"], "task.tokens", allow_zero=False, maximum=MAX_TOKENS)
    seq = parse_int(t["seq_len"], "task.seq_len", minimum=1, maximum=MAX_SEQ_LEN)
    batch = parse_int(t["global_batch"], "task.global_batch", minimum=1, maximum=MAX_BATCH)
    precision = str(t.get("precision", "bf16-mixed"))
    memory.recipe(precision)
    sch = raw["schedule"]
    deadline = parse_duration(sch["deadline"], "schedule.deadline", allow_zero=False, maximum=MAX_DEADLINE_S)
    reserved = parse_duration(sch.get("reserved", "0d"), "schedule.reserved", maximum=MAX_DEADLINE_S)
    if reserved >= deadline:
        raise InputError("schedule.reserved must be shorter than the deadline")
    task = Task(tokens=tokens, seq_len=seq, global_batch=batch, precision=precision, deadline_s=deadline,
                reserved_s=reserved)
    task = _batch_options(task, t, model, "task")

    # hardware candidates
    hw = raw["hardware"]
    names = [str(x) for x in _as_list(hw["accelerator"], "hardware.accelerator")]
    if len(set(names)) != len(names):
        raise InputError("hardware.accelerator lists a name twice")
    # a stated efficiency selects the chapter's flat model (compute = FLOPs / (peak x efficiency)); without
    # one every accelerator runs the per-operation model of its performance-catalog entry
    flat = "efficiency" in hw
    eff = parse_fraction(hw["efficiency"], "hardware.efficiency") if flat else 1.0
    cost = raw.get("cost", {})
    card_hour = cost.get("card_hour")
    nic_hour = cost.get("nic_hour")
    systems = {}
    for name in names:
        acc = cat.accelerator(name)
        o = {k: hw[k] for k in CARD_KEYS if k in hw}
        o.update(hw.get(name, {}) if isinstance(hw.get(name), dict) else {})
        acc = _accelerator_with_overrides(acc, o, cat, f"hardware ({name})")
        price = acc.price_card_hour if card_hour is None else parse_number(card_hour, "cost.card_hour")
        nic_price = acc.nic_price_hour if nic_hour is None else parse_number(nic_hour, "cost.nic_hour")
        if not flat and acc.hbm_bandwidth <= 0:
            raise InputError(f"accelerator {name!r} has no hbm_bandwidth, which the per-operation step-time model "
                             "needs (add it to the catalog, or state hardware.efficiency for the flat model)")
        systems[name] = System(acc=acc, efficiency=eff, price_card_hour=price, nic_price_hour=nic_price,
                               perf=None if flat else cat.perf(name))
    for key, value in hw.items():
        if isinstance(value, dict) and key not in systems:
            cat.accelerator(key)  # unknown name -> clear error; known but unused -> ignored

    # memory
    mt = raw.get("memory", {})
    reserve = mt.get("activation_reserve")
    mem = MemoryOptions(
        activation_reserve=None if reserve is None else parse_bytes(reserve, "memory.activation_reserve",
                                                                    maximum=MAX_CARD_BYTES),
        flash_attention=_bool(mt.get("flash_attention", True), "memory.flash_attention"),
        activation_bytes=parse_number(mt.get("activation_bytes", 2), "memory.activation_bytes", allow_zero=False),
        loss_chunks=parse_int(mt.get("loss_chunks", 1), "memory.loss_chunks", minimum=1, maximum=MAX_DOMAIN_INT),
        prefetch=parse_int(mt.get("prefetch", 1), "memory.prefetch", minimum=0, maximum=MAX_HOST_INT),
        sequence_parallel=_bool(mt.get("sequence_parallel", True), "memory.sequence_parallel"),
        dropout=_bool(mt.get("dropout", False), "memory.dropout"),
    )

    # input
    it = raw.get("input", {})
    inp = InputPipeline(
        workers=parse_number(it.get("workers", 0), "input.workers"),
        per_worker_rate=parse_number(it.get("sequences_per_worker_s", 0), "input.sequences_per_worker_s"),
        wait_s=parse_duration(it.get("wait", "0s"), "input.wait"),
        workers_per_host=parse_number(it.get("workers_per_host", 0), "input.workers_per_host"),
    )
    if (inp.workers > 0 or inp.workers_per_host > 0) and inp.per_worker_rate <= 0:
        raise InputError("input.sequences_per_worker_s must be positive when workers are given")

    # checkpoint / failures / stragglers
    ck = raw.get("checkpoint", {})
    if "write_bandwidth" in ck and "storage" in ck:
        raise InputError("checkpoint: give write_bandwidth or storage, not both")
    if "storage" in ck:
        write_bw = cat.storage_tier(str(ck["storage"]))
    else:
        write_bw = parse_bandwidth(ck.get("write_bandwidth", "7GB/s"), "checkpoint.write_bandwidth", allow_zero=False)
    if "card_mtbf" in ck and "job_mtbf" in ck:
        raise InputError("checkpoint: give card_mtbf or job_mtbf, not both")
    if "job_mtbf" in ck:
        j = ck["job_mtbf"]
        if not isinstance(j, dict) or "cards" not in j or "interval" not in j:
            raise InputError('checkpoint.job_mtbf must be a table like { cards = 1024, interval = "7.9h" }')
        mtbf = parse_int(j["cards"], "checkpoint.job_mtbf.cards", minimum=1, maximum=MAX_CARDS) * parse_duration(
            j["interval"], "checkpoint.job_mtbf.interval", allow_zero=False)
    elif str(ck.get("card_mtbf", "")).lower() in ("none", "inf", "never"):
        mtbf = None
    else:
        mtbf = parse_duration(ck.get("card_mtbf", "337d"), "checkpoint.card_mtbf", allow_zero=False)
    spike = ck.get("loss_spike_interval")
    fm = str(ck.get("failure_model", "first-order"))
    if fm not in ("first-order", "poisson"):
        raise InputError("checkpoint.failure_model must be 'first-order' or 'poisson'")
    st = raw.get("stragglers", {})
    rel = Reliability(
        bytes_per_param=parse_number(ck.get("bytes_per_param", 14), "checkpoint.bytes_per_param", allow_zero=False),
        write_bandwidth=write_bw,
        restore_s=parse_duration(ck.get("restore", "120s"), "checkpoint.restore"),
        card_mtbf_s=mtbf,
        event_interval_s=None if spike is None else parse_duration(spike, "checkpoint.loss_spike_interval",
                                                                     allow_zero=False),
        snapshot_copy_s=parse_duration(ck.get("snapshot_copy", "0.5s"), "checkpoint.snapshot_copy"),
        failure_model=fm,
        straggler_sigma=parse_fraction(st.get("sigma", 0), "stragglers.sigma", allow_zero=True),
    )

    # search space (file [search] first, then checkpoint defaults)
    se = raw.get("search", {})
    intervals = se.get("save_interval", ck.get("save_interval", DEFAULT_SAVE_INTERVAL))
    ivals = []
    for v in _as_list(intervals, "save_interval"):
        if isinstance(v, str) and v.strip().lower() == AUTO_INTERVAL:
            ivals.append(0.0)  # 0.0 marks "the optimal interval for the card count"
        else:
            ivals.append(parse_duration(v, "save_interval", allow_zero=False))
    modes = tuple(str(x) for x in _as_list(se.get("save_mode", ck.get("mode", list(DEFAULT_SAVE_MODES))),
                                           "save_mode"))
    for x in modes:
        if x not in SAVE_MODES:
            raise InputError(f"save mode {x!r} unknown (use sync or async)")
    offl = tuple(str(x) for x in _as_list(se.get("offload", "none"), "search.offload"))
    for x in offl:
        if x not in OFFLOADS:
            raise InputError(f"offload {x!r} unknown (use none or cpu)")
    schedules = _schedules(se)
    rec_default = ["none", "full"] if reserve is None else ["none"]
    recs = tuple(dict.fromkeys(memory.parse_recompute(x) for x in _as_list(se.get("recompute", rec_default),
                                                                           "search.recompute")))
    zs = _int_list(se.get("zero_stage", [0, 1, 2, 3]), "search.zero_stage", minimum=0)
    if any(z > 3 for z in zs):
        raise InputError("search.zero_stage values must be 0, 1, 2 or 3")
    accs = tuple(str(x) for x in _as_list(se.get("accelerator", names), "search.accelerator"))
    for x in accs:
        if x not in systems:
            raise InputError(f"search.accelerator {x!r} is not in hardware.accelerator")
    max_cards = parse_int(se.get("max_cards", 1024), "search.max_cards", minimum=1, maximum=MAX_CARDS)
    space = SearchSpace(
        accelerators=accs,
        zero_stage=zs,
        tp=_int_list(se.get("tp", [1, 2, 4, 8]), "search.tp"),
        pp=_int_list(se.get("pp", [1, 2, 4, 8]), "search.pp"),
        micro_batch=_int_list(se.get("micro_batch", [1, 2, 4, 8]), "search.micro_batch"),
        recompute=recs,
        offload=offl,
        schedule=schedules,
        save_interval_s=tuple(sorted(set(ivals))),
        save_mode=modes,
        nics_per_host=_int_list(se["nics_per_host"], "search.nics_per_host") if "nics_per_host" in se else (),
        dp=_int_list(se["dp"], "search.dp") if "dp" in se else (),
        max_cards=max_cards,
        global_batch=_int_list(se["global_batch"], "search.global_batch") if "global_batch" in se else (),
        cp=_int_list(se.get("cp", [1]), "search.cp"),
        sequence_parallel=tuple(dict.fromkeys(_bool(x, "search.sequence_parallel") for x in
                                              _as_list(se["sequence_parallel"], "search.sequence_parallel")))
        if "sequence_parallel" in se else (),
    )
    moe_opts, ep_dom, etp_dom, cap_dom = _moe_inputs(raw, model, se)
    space = replace(space, ep=ep_dom, expert_tp=etp_dom, capacity_factor=cap_dom)
    stages = _stages(stage_tables, raw, cat) if stage_tables else ()
    if stages:
        task, space = stages[0].task, stages[0].search
    else:
        _check_batch_choices(task, space, "task")
    max_cost = cost.get("max_cost")
    ct = raw.get("comm", {})
    overlap = _bool(ct.get("overlap", True), "comm.overlap")
    tp_overlap = _tp_overlap(ct.get("tp_overlap", False))
    dp_overlap = _overlap(ct.get("dp_overlap", True), "comm.dp_overlap")
    name = raw.get("scenario", {}).get("name") or Path(raw.get("_path", "scenario")).stem
    cp_method, cp_split = _context_options(ct)
    return Scenario(model=model, task=task, systems=systems, memory=mem, input=inp, reliability=rel, search=space,
                    cost=CostOptions(None if max_cost is None else parse_number(max_cost, "cost.max_cost")),
                    moe=moe_opts, overlap=overlap, name=str(name), tp_overlap=tp_overlap, dp_overlap=dp_overlap,
                    stages=stages, cp_method=cp_method, cp_split=cp_split)


def _moe_inputs(raw: dict, model, se: dict):
    """[moe] routing assumptions and the [search] domains of ep, expert_tp and capacity_factor.

    Defaults: ep = every power of two dividing the routed experts (1 for a dense model), expert_tp = 0
    (the same as tp), capacity_factor = none (dropless). EP values that do not divide the experts, and
    any of these on a dense model, are bad input.
    """
    from tpopt.models.moe import A2A_OVERLAPS, DISPATCHERS

    mt = raw.get("moe", {})
    moe_given = [k for k in ("ep", "expert_tp", "capacity_factor") if k in se]
    if not model.moe:
        if mt:
            raise InputError(f"scenario: [moe] applies to mixture-of-experts models; {model.name} is dense")
        if moe_given:
            raise InputError(f"search.{moe_given[0]} applies to mixture-of-experts models; {model.name} is dense")
        return MoeOptions(), (1,), (0,), (0.0,)
    imbalance = parse_number(mt.get("imbalance", MoeOptions.imbalance), "moe.imbalance", allow_zero=False)
    hot = parse_fraction(mt.get("hot_experts", MoeOptions.hot), "moe.hot_experts")
    if imbalance < 1:
        raise InputError(f"moe.imbalance is the busiest expert's load over the mean, at least 1 (got {imbalance:g})")
    if hot * imbalance > 1 + 1e-12:
        raise InputError(f"moe: {hot:.0%} of the experts at {imbalance:g} x the mean would take more than every "
                         "dispatch; lower imbalance or hot_experts")
    max_drop = parse_fraction(mt.get("max_drop", 0), "moe.max_drop", allow_zero=True)
    overlap = str(mt.get("a2a_overlap", "auto"))
    if overlap not in A2A_OVERLAPS:
        raise InputError(f"moe.a2a_overlap {overlap!r} unknown (use one of: {', '.join(A2A_OVERLAPS)})")
    dispatcher = str(mt.get("dispatcher", "direct"))
    if dispatcher not in DISPATCHERS:
        raise InputError(f"moe.dispatcher {dispatcher!r} unknown (use one of: {', '.join(DISPATCHERS)})")
    node_limit = parse_int(mt.get("node_limit", 0), "moe.node_limit", minimum=0)
    opts = MoeOptions(imbalance=imbalance, hot=hot, max_drop=max_drop, a2a_overlap=overlap, dispatcher=dispatcher,
                      node_limit=node_limit)
    E = model.experts
    if "ep" in se:
        ep = _int_list(se["ep"], "search.ep")
        bad = [e for e in ep if E % e]
        if bad:
            raise InputError(f"search.ep: {bad[0]} does not divide the {E} routed experts of {model.name}")
    else:
        ep = tuple(e for e in (2 ** i for i in range(E.bit_length())) if E % e == 0)
    etp = tuple(sorted({0 if str(v).strip().lower() == "tp" else parse_int(v, "search.expert_tp", minimum=1)
                        for v in _as_list(se.get("expert_tp", "tp"), "search.expert_tp")}))
    caps = set()
    for v in _as_list(se.get("capacity_factor", "none"), "search.capacity_factor"):
        if str(v).strip().lower() in ("none", "dropless"):
            caps.add(0.0)
        else:
            c = parse_number(v, "search.capacity_factor", allow_zero=False)
            if c < 0:
                raise InputError(f"search.capacity_factor must be positive or none (got {v})")
            caps.add(float(c))
    return opts, ep, etp, tuple(sorted(caps))


def _overlap(value, what: str) -> float:
    """An overlap share: true / false, or a fraction such as 0.5 or 50%."""
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    return parse_fraction(value, what, allow_zero=True)


def _tp_overlap(value) -> tuple[float, float]:
    """comm.tp_overlap: true / false / a fraction (chunked GEMM overlap of every TP collective), or
    "async" (only the column-parallel backward collectives, beside the other gradient GEMM)."""
    if isinstance(value, str) and value.strip().lower() == "async":
        return (0.0, 1.0)
    f = _overlap(value, "comm.tp_overlap (true, false, a fraction or \"async\")")
    return (f, f)


def _schedules(se: dict) -> tuple[str, ...]:
    """[search] schedule values, with "interleaved" expanded over [search] virtual_stages."""
    names = [str(x) for x in _as_list(se.get("schedule", "1f1b"), "search.schedule")]
    for x in names:
        split_schedule(x)  # unknown names -> one clear error
    if "virtual_stages" not in se:
        return tuple(names)
    vs = _int_list(se["virtual_stages"], "search.virtual_stages", minimum=2)
    out = []
    for x in names:
        if x == "interleaved":
            out += [schedule_name("interleaved", v) for v in vs]
        else:
            out.append(x)
    return tuple(dict.fromkeys(out))


def _context_options(comm: dict) -> tuple[str, str]:
    """[comm] cp_method (ring / all-to-all) and cp_split (zigzag / contiguous) of context parallelism."""
    from tpopt.models.context import METHODS, SPLITS

    method = str(comm.get("cp_method", "ring"))
    split = str(comm.get("cp_split", "zigzag"))
    if method not in METHODS:
        raise InputError(f"comm.cp_method {method!r} unknown (use one of: {', '.join(METHODS)})")
    if split not in SPLITS:
        raise InputError(f"comm.cp_split {split!r} unknown (use one of: {', '.join(SPLITS)})")
    return method, split


# ---------------------------------------------------------------------------------------------
# the batch as a choice (critical batch, ramp-up) and training stages


def parse_critical_batch(value, seq_len: int, model, tokens: float, what: str) -> tuple[float | None, str]:
    """(B_noise in tokens per step, source) from ``"2M"`` (tokens), ``"256 sequences"``, ``"deepseek-llm"``
    (the scaling fit of :func:`tpopt.models.batch.noise_scale_fit` on the run's compute) or ``"none"``
    (tokens independent of the batch, stated on purpose)."""
    from tpopt.models.arch import flops_per_token
    from tpopt.models.batch import noise_scale_fit

    text = str(value).strip()
    low = text.lower()
    if low in ("none", "inf", "infinite"):
        return None, "none"
    if low == "deepseek-llm":
        c = (flops_per_token(model, seq_len) - 6.0 * model.vocab * model.hidden) * tokens
        return float(noise_scale_fit(c)), "DeepSeek LLM fit 0.292 C^0.3271"
    for suffix in ("sequences", "sequence", "seqs", "seq"):
        if low.endswith(suffix):
            n = parse_count(text[: -len(suffix)].strip(), what, allow_zero=False)
            return n * seq_len, "given"
    for suffix in ("tokens", "token", "tok"):
        if low.endswith(suffix):
            text = text[: -len(suffix)].strip()
            break
    return parse_count(text, what, allow_zero=False), "given"


def _batch_options(task: Task, t: dict, model, where: str) -> Task:
    """Critical batch and batch ramp-up of a task table ([task] or one stage)."""
    from dataclasses import replace

    kw = {}
    if "critical_batch" in t:
        kw["critical_batch"], kw["critical_batch_source"] = parse_critical_batch(
            t["critical_batch"], task.seq_len, model, task.tokens, f"{where}.critical_batch")
    if "batch_ramp" in t:
        r = t["batch_ramp"]
        if not isinstance(r, dict) or set(r) != {"start", "increment", "tokens"}:
            raise InputError(f'{where}.batch_ramp must be a table like {{ start = 32, increment = 32, tokens = "4B" }} '
                             "(sequences, sequences, tokens)")
        start = parse_int(r["start"], f"{where}.batch_ramp.start", minimum=1)
        inc = parse_int(r["increment"], f"{where}.batch_ramp.increment", minimum=1)
        rt = parse_count(r["tokens"], f"{where}.batch_ramp.tokens", allow_zero=False)
        kw["ramp"] = (start, inc, rt)
    return replace(task, **kw) if kw else task


def _check_batch_choices(task: Task, space: SearchSpace, where: str) -> None:
    choices = space.global_batch or (task.global_batch,)
    if len(set(choices)) > 1 and not task.critical_batch_source:
        raise InputError(f"search.global_batch offers several batches but {where}.critical_batch is not given: the "
                         "tokens needed depend on the batch (give critical_batch, e.g. \"2M\" tokens or \"deepseek-llm\", "
                         "or \"none\" to keep the tokens whatever the batch)")
    if task.ramp is not None:
        start, inc, _ = task.ramp
        for b in choices:
            if start < b and (b - start) % inc:
                raise InputError(f"{where}.batch_ramp: the batch {b} is not start {start} plus a whole number of "
                                 f"increments of {inc}")


def _stage_tables(t: dict) -> list[dict]:
    if "stages" not in t:
        return []
    st = t["stages"]
    if not isinstance(st, list) or not st or not all(isinstance(x, dict) for x in st):
        raise InputError("task.stages must be a list of tables ([[task.stages]] with tokens, seq_len, ...)")
    for i, x in enumerate(st):
        bad = set(x) - STAGE_KEYS
        if bad:
            raise InputError(f"task.stages[{i + 1}]: unknown key(s) {sorted(bad)} (known: {', '.join(sorted(STAGE_KEYS))})")
        if "tokens" not in x:
            raise InputError(f"task.stages[{i + 1}]: missing required key 'tokens'")
        for k in ("seq_len", "global_batch"):
            if k not in x and k not in t:
                raise InputError(f"task.stages[{i + 1}]: missing {k!r} (give it in the stage or in [task])")
    return st


def _stages(tables: list[dict], raw: dict, cat) -> tuple:
    """Every stage's task and search domains, each built exactly as a one-stage scenario whose [task]
    is the stage's keys over [task] and whose [search] is the stage's ``search`` table over [search]."""
    from dataclasses import replace

    from tpopt.models.plan import Stage

    out = []
    names = set()
    task_t = {k: v for k, v in raw["task"].items() if k != "stages"}
    for i, st in enumerate(tables):
        where = f"task.stages[{i + 1}]"
        name = str(st.get("name", f"stage {i + 1}"))
        if name in names:
            raise InputError(f"{where}: the stage name {name!r} is used twice")
        names.add(name)
        sub = st.get("search", {})
        if not isinstance(sub, dict):
            raise InputError(f"{where}.search must be a table")
        stage_raw = dict(raw, task=dict(task_t, **{k: v for k, v in st.items() if k not in ("name", "search")}),
                         search=dict(raw.get("search", {}), **sub))
        try:
            one = build_scenario(stage_raw, cat)
        except InputError as exc:
            raise InputError(f"{where} ({name}): {exc}") from None
        out.append(Stage(name=name, task=replace(one.task, stage=name), search=one.search))
    return tuple(out)


def _bool(value, what: str) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"{what} must be true or false")
    return value


def load_scenario(path, overrides: dict | None = None, catalog_dirs=()) -> Scenario:
    """Read, override and build a scenario in one call."""
    raw = read_scenario_file(path)
    if overrides:
        raw = with_overrides(raw, overrides)
    return build_scenario(raw, load_catalog(catalog_dirs))


__all__ = ["read_scenario_file", "with_overrides", "build_scenario", "load_scenario", "build_model", "natural_keys",
           "BUILTIN_SCENARIO"]
