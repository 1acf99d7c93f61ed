"""Scenario files (TOML) -> :class:`tpopt.models.plan.Scenario`.

A scenario names the model, the task, the schedule, the hardware candidates and the assumptions
(memory, input, checkpoint, stragglers, cost), plus the ``[search]`` domains the solver explores.
Every key is documented in docs/scenarios.md; unknown keys are rejected so a typo cannot be ignored.
Command-line overrides are applied to the raw tables (:func:`with_overrides`) before building, so
``solve``, ``sweep`` and ``explain`` share one path from text to numbers.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields, replace
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tpopt.catalogs import Catalog, build_model, load_catalog, model_from_hf_config, read_text_capped
from tpopt.catalogs.market import check_date, parse_power, parse_pue
from tpopt.catalogs.schema import (
    CARD_KEYS,
    DEFAULT_SAVE_INTERVAL,
    DEFAULT_SAVE_MODES,
    KEYS,
    STAGE_KEYS,
    BatchKeys,
    BudgetKeys,
    CardKeys,
    CheckpointKeys,
    CommKeys,
    HardwareKeys,
    InputKeys,
    MarketKeys,
    MemoryKeys,
    ModelKeys,
    MoeKeys,
    MoeSearchKeys,
    PriceKeys,
    RiskKeys,
    ScenarioKeys,
    ScheduleKeys,
    SearchKeys,
    StragglerKeys,
    TaskKeys,
    VariableSearchKeys,
    as_list,
    check_keys,
    read_table,
    targets,
)
from tpopt.catalogs.stacks import dispatcher_on_card, stack_profile
from tpopt.catalogs.tables import loads_toml
from tpopt.catalogs.uncertainty import load_evidence
from tpopt.errors import InputError
from tpopt.models.arch import ModelArch
from tpopt.models.context import sequence_splits, split_rule
from tpopt.models.finish import Risk
from tpopt.models.hardware import Accelerator, StackProfile
from tpopt.models.market import SPOT, MarketOptions, Offer, Power, mix, months_between
from tpopt.models.moe import STACK_DISPATCHERS
from tpopt.models.moe import stack_defaults as moe_stack_defaults
from tpopt.models.plan import (
    CostOptions,
    InputPipeline,
    MemoryOptions,
    MoeOptions,
    Reliability,
    Scenario,
    SearchSpace,
    Stage,
    System,
    Task,
    schedule_name,
)
from tpopt.models.pools import Pool
from tpopt.models.units import DAY, parse_fraction, parse_int

if TYPE_CHECKING:  # lazy: start-up time (recipes: MoE models only; sites: [[sites]] scenarios only)
    from tpopt.catalogs.recipes import Recipe
    from tpopt.models.sites import SitesInput
    from tpopt.models.sites import WanLink as SiteLink

#: The built-in default scenario (the chapter's design case), used by every command without --scenario.
BUILTIN_SCENARIO = Path(__file__).resolve().parent / "design-case.toml"
BUILTIN_NAME = "design-case"
#: The built-in RL scenario (GRPO on a Qwen3-8B policy, chapter 10.5), used by `tpopt rl` without --scenario.
BUILTIN_RL_SCENARIO = Path(__file__).resolve().parent / "rl-grpo-qwen3-8b.toml"
DEFAULT_EFFICIENCY = 0.40  # what `tpopt explain` / sweeps start from when a flat efficiency is asked for
MAX_FILE_BYTES = 1024 * 1024  # a scenario file larger than 1 MiB is refused (e.g. --scenario /dev/zero)


def read_scenario_file(path: str | PathLike[str] | Mapping[str, Any]) -> dict[str, Any]:
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
    raw = loads_toml(text, str(p))
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
    "global_batch": ("search.global_batch",),  # as --global-batch: the batches a plan may take (one fixes it)
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
    if tables:  # a key of several tables names none of them alone
        choices = " or ".join(repr(f"{t}.{name}") for t in tables)
        raise InputError(f"scenario input {name!r} is a key of the tables {' and '.join(tables)}: give {choices}")
    known = sorted(set(NATURAL) | {k for keys in KEYS.values() if keys for k in keys})
    import difflib  # lazy: start-up time (an unknown name only)

    close = difflib.get_close_matches(name, known, n=3)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    raise InputError(f"unknown scenario input {name!r} ({hint}give a key of one table, e.g. 'deadline', "
                     "or 'table.key')")


def _natural(overrides: dict[str, Any]) -> dict[str, Any]:
    """Overrides with natural names expanded to ``table.key`` (dotted keys pass through)."""
    out = {}
    for name, value in overrides.items():
        if "." in name:
            out[name] = value
            continue
        keys = natural_keys(name)
        if name == "model" and isinstance(value, (str, PathLike)) and str(value).lower().endswith(".json"):
            keys, value = ("model.config",), str(Path(value).resolve())  # a config.json path, as --model takes it
        if keys[0] == "hardware.accelerator" and isinstance(value, str):
            value = [x.strip() for x in value.split(",") if x.strip()]
        for k in keys:
            out[k] = value
    return out


def with_overrides(raw: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
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
        if table == "model" and key in ("name", "config"):  # a model given replaces the one the file names
            t.pop("name", None)
            t.pop("config", None)
        if table == "hardware" and key == "accelerator":
            _retarget_card_overrides(t, value)
        if table == "hardware" and key in CARD_KEYS:
            # an explicit override beats per-card values the file (or a retarget) put in sub-tables
            for sub in t.values():
                if isinstance(sub, dict) and key in sub:
                    sub[key] = value
        t[key] = value
    return out


def _retarget_card_overrides(hw: dict[str, Any], new: object) -> None:
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


def build_scenario(raw: dict[str, Any], catalog: Catalog | None = None) -> Scenario:
    """Validate the raw tables against their declarations (:mod:`tpopt.catalogs.schema`) and convert every
    value to SI units exactly once."""
    raw, pool_tables = split_pools(raw)
    check_keys(raw)
    cat = catalog or load_catalog()
    raw = market_hardware(raw, cat)
    model = _model(raw["model"], Path(raw.get("_base_dir", ".")), cat)
    stage_tables = _stage_tables(raw["task"])
    task = _task(raw, stage_tables, model)
    stack = stack_profile(read_table(HardwareKeys, raw["hardware"], "hardware.").stack)
    systems = _systems(raw["hardware"], raw.get("cost", {}), cat, stack)
    mem = MemoryOptions(**targets(read_table(MemoryKeys, raw.get("memory", {}), "memory.")))
    if "prefetch" not in raw.get("memory", {}) and any(s.perf is not None for s in systems.values()):
        mem = replace(mem, prefetch=stack.fsdp_prefetch)  # the stack's FSDP / ZeRO-3 prefetch depth
    if mem.activation_offload_layers and not stack.activation_offload:
        raise InputError(f"memory.activation_offload_layers: stack {stack.name} does not offload activations "
                         "(catalogs/stacks.toml activation_offload); drop the key or pick a stack that does")
    if mem.zero_group and model.moe:
        raise InputError("memory.zero_group: hybrid sharding is modelled for dense models only (a MoE model's "
                         "expert state shards over its expert-data-parallel group); drop the key")
    inp = InputPipeline(**targets(read_table(InputKeys, raw.get("input", {}), "input.")))
    ck = read_table(CheckpointKeys, raw.get("checkpoint", {}), "checkpoint.", cat)
    rel = _reliability(ck, read_table(StragglerKeys, raw.get("stragglers", {}), "stragglers."),
                       raw.get("checkpoint", {}), cat)
    se = raw.get("search", {})
    space = _search_space(se, raw.get("checkpoint", {}), mem, systems)
    recipe: Recipe | None = None
    if model.moe:
        from tpopt.catalogs.recipes import find_recipe  # lazy: start-up time (MoE models only)

        recipe = find_recipe(stack.name, model.name, tuple(systems), task.precision)
    if recipe is not None and recipe.flash_attention() is not None and "flash_attention" not in raw.get("memory", {}):
        mem = replace(mem, flash_attention=bool(recipe.flash_attention()))  # the recipe's attention backend
    moe_opts, moe_domains = _moe_inputs(raw.get("moe", {}), model, se, stack, recipe,
                                        {name: s.acc.vendor for name, s in systems.items()})
    space = replace(space, **moe_domains)
    if stage_tables and task.confidence is not None:
        raise InputError("schedule.confidence applies to one training stage: the finish-time distribution of "
                         "[[task.stages]] (a sum over stages) is not modelled; drop one of the two")
    stages = _stages(stage_tables, raw, cat) if stage_tables else ()
    if stages:
        task, space = stages[0].task, stages[0].search
    else:
        _check_batch_choices(task, space, "task")
    comm = stack_comm_defaults(read_table(CommKeys, raw.get("comm", {}), "comm."), raw.get("comm", {}), stack,
                               per_op=any(s.perf is not None for s in systems.values()))
    kept_cp = splittable_cp(space.cp, task.seq_len, comm.cp_split)
    space = replace(space, cp=kept_cp, cp_dropped=tuple(c for c in space.cp if c not in kept_cp))
    sk = read_table(ScenarioKeys, raw.get("scenario", {}), "scenario.")
    name = sk.name or Path(raw.get("_path", "scenario")).stem
    budget = read_table(BudgetKeys, raw.get("cost", {}), "cost.")
    return Scenario(model=model, task=task, systems=systems, memory=mem, input=inp, reliability=rel, search=space,
                    risk=_risk(read_table(RiskKeys, raw.get("risk", {}), "risk.")),
                    cost=CostOptions(budget.max_cost), moe=moe_opts, overlap=comm.overlap, name=str(name),
                    tp_overlap=comm.tp_overlap, dp_overlap=comm.dp_overlap, stages=stages, cp_method=comm.cp_method,
                    cp_split=comm.cp_split, stack=stack,
                    market=market_options(raw.get("market"), cat, tuple(systems)),
                    pools=read_pools(pool_tables, systems))


def splittable_cp(domain: tuple[int, ...], seq_len: int, split: str) -> tuple[int, ...]:
    """search.cp without the sizes that cannot split a sequence into equal pieces
    (:func:`tpopt.models.context.sequence_splits`), so every backend searches the same sizes; a domain left
    empty is an input error that states the rule."""
    kept = tuple(c for c in domain if sequence_splits(seq_len, c, split))
    if not kept:
        bad = ", ".join(str(c) for c in domain)
        raise InputError(f"search.cp = {bad}: {split_rule(seq_len, domain[0], split)}")
    return kept


POOL_KEYS = ("accelerator", "max_cards", "card_hour", "owned")


def split_pools(raw: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``[[hardware.pools]]`` taken out of the raw tables (a mixed plan, :mod:`tpopt.optimizer.pools`); the
    hardware's accelerators become the pools' (in order). No pools: the tables unchanged."""
    hw = raw.get("hardware")
    if not isinstance(hw, dict) or "pools" not in hw:
        return raw, []
    tables = hw["pools"]
    if not isinstance(tables, list) or not tables or not all(isinstance(t, dict) for t in tables):
        raise InputError("hardware.pools: give one [[hardware.pools]] table per accelerator pool")
    for t in tables:
        if not isinstance(t.get("accelerator"), str):
            raise InputError("hardware.pools: each pool needs accelerator = \"<catalog name>\"")
    names = [t["accelerator"] for t in tables]
    if len(set(names)) != len(names):
        raise InputError("hardware.pools: one pool per accelerator (merge the tables of a repeated accelerator)")
    rest = {k: v for k, v in hw.items() if k != "pools"}
    return {**raw, "hardware": {**rest, "accelerator": names}}, tables


def read_pools(tables: list[dict[str, Any]], systems: dict[str, System]) -> tuple[Pool, ...]:
    """The pools of ``[[hardware.pools]]``: accelerator, ``max_cards`` (availability), ``card_hour`` (USD per
    card-hour; default the accelerator's price, or 0 for ``owned = true``: an owned pool bills only a stated
    internal price)."""
    pools = []
    for t in tables:
        name = t["accelerator"]
        unknown = sorted(set(t) - set(POOL_KEYS))
        if unknown:
            raise InputError(f"hardware.pools ({name}): unknown key {unknown[0]!r} (use {', '.join(POOL_KEYS)})")
        cards = t.get("max_cards")
        if not isinstance(cards, int) or isinstance(cards, bool) or cards < 1:
            raise InputError(f"hardware.pools ({name}): max_cards must be a positive whole number of cards")
        owned = t.get("owned", False)
        if not isinstance(owned, bool):
            raise InputError(f"hardware.pools ({name}): owned must be true or false")
        price = t.get("card_hour", 0.0 if owned else systems[name].price_card_hour)
        if price is None:  # none stated and none in the catalog
            raise InputError(f"hardware.pools ({name}): card_hour must be a price in USD per card-hour "
                             "(the catalog has none for this accelerator; state it, or owned = true)")
        if isinstance(price, bool) or not isinstance(price, (int, float)) or price < 0:
            raise InputError(f"hardware.pools ({name}): card_hour {price!r} is not a price in USD per card-hour "
                             "(a number, 0 or more)")
        source = ("scenario: [[hardware.pools]] card_hour" if "card_hour" in t else
                  "scenario: [[hardware.pools]] owned = true, no internal price stated" if owned else
                  systems[name].price_source)
        pools.append(Pool(accelerator=name, max_cards=cards, price_card_hour=float(price), owned=owned,
                          price_source=source))
    return tuple(pools)


def stack_comm_defaults(comm: CommKeys, stated: dict[str, Any], stack: StackProfile, *, per_op: bool) -> CommKeys:
    """[comm] as the stack runs it where the scenario is silent (per-operation model): ``tp_overlap`` and
    ``dp_overlap`` the stack's (catalogs/stacks.toml; Megatron-Core: chunked TP overlap, Transformer Engine
    userbuffers as its tp_comm_overlap runs it); a stated key, ``comm.overlap = false`` or the chapter's flat
    model (``hardware.efficiency``) keeps the scenario's value or the documented default."""
    if not per_op or not comm.overlap:
        return comm
    kw: dict[str, Any] = {}
    if "tp_overlap" not in stated:
        kw["tp_overlap"] = (0.0, 1.0) if stack.tp_overlap == "async" else (float(bool(stack.tp_overlap)),) * 2
    if "dp_overlap" not in stated:
        kw["dp_overlap"] = stack.dp_overlap
    return replace(comm, **kw) if kw else comm


def market_hardware(raw: dict[str, Any], cat: Catalog) -> dict[str, Any]:
    """``hardware.accelerator = "all"`` (``--hw all``): every accelerator that has an offer, chosen by market (a
    card with only a catalog price has its list-price offer, flagged illustrative:
    catalogs.market.list_price_offers)."""
    acc = raw["hardware"].get("accelerator")
    if acc not in ("all", ["all"]):
        return raw
    names = list(dict.fromkeys(o.accelerator for o in cat.market.offers.values()))
    search = {k: v for k, v in raw.get("search", {}).items() if k != "accelerator"}
    return {**raw, "hardware": {**raw["hardware"], "accelerator": names}, "search": search,
            "market": {"offers": "all", **raw.get("market", {})}}


def judged_before_read(as_of: str, offers: Sequence[Offer], default: str) -> None:
    """Refuse a ``[market] as_of`` before an offer's price date: a price is judged at a date on or after it was
    read (its age, months_between(date, as_of), is what the report states; before it the age is negative, "-75
    months before", and the offer did not exist at that date)."""
    late = [o for o in offers if months_between(o.date, as_of) < 0]
    if late:
        newest = max((o.date for o in offers), key=lambda d: tuple(int(x) for x in d.split("-")))
        first = min(late, key=lambda o: tuple(int(x) for x in o.date.split("-")))
        raise InputError(f"market.as_of {as_of} is before the price date of {len(late)} offer(s), e.g. "
                         f"{first.id} ({first.date}): prices are judged at a date on or after they were read; "
                         f"give {newest} or later, or leave as_of out (the catalog's {default})")


def market_options(table: dict[str, Any] | None, cat: Catalog, accelerators: tuple[str, ...]) -> MarketOptions:
    """[market]: the offers to choose from (by name, or "all" of the scenario's accelerators), kept to
    ``regions``; prices judged at ``as_of`` (default: the market catalog's date)."""
    if not table:  # no offers to choose; the catalog prices are still judged at the market's date
        return MarketOptions(as_of=cat.market.as_of)
    m = read_table(MarketKeys, table, "market.")
    names = m.offers if m.offers is not None else "all"
    if names == "all":
        chosen = [o for o in cat.market.offers.values() if o.accelerator in accelerators]
    else:
        bad = [n for n in as_list(names, "market.offers") if not isinstance(n, str)]
        if bad:
            raise InputError(f'market.offers must be "all" or a list of offer names, got {bad[0]!r}')
        by = {**{o.id: o for o in cat.market.offers.values()}, **cat.market.offers}  # by id or by name
        unknown = [n for n in as_list(names, "market.offers") if n not in by]
        for n in unknown:  # the id several offers share without their suffix: say which ones it could mean
            same = [f"{k} ({o.id})" for k, o in cat.market.offers.items() if o.tag and o.id.split("#")[0] == n]
            if same:
                raise InputError(f"market.offers: {n} is the id of {len(same)} offers: {', '.join(same)}; name one "
                                 "by its catalog name or its id with the #suffix")
        if unknown:
            raise InputError(f"market.offers: unknown offer(s) {', '.join(map(str, unknown))} (tpopt catalog offers)")
        chosen = list(dict.fromkeys(by[n] for n in as_list(names, "market.offers")))
    if m.regions is not None:
        keep = {str(r) for r in as_list(m.regions, "market.regions")}
        chosen = [o for o in chosen if o.region in keep or f"{o.provider}/{o.region}" in keep]
    if not chosen:
        raise InputError("market: no offer of the scenario's accelerators (tpopt catalog offers)")
    if m.spot_shares is not None:
        shares = [parse_fraction(x, "market.spot_shares") for x in as_list(m.spot_shares, "market.spot_shares")]
        if any(not 0 < x < 1 for x in shares):
            raise InputError("market.spot_shares: each share is strictly between 0 and 1 (0: the base offer alone, "
                             "1: the spot offer alone, both already chosen)")
        site: Callable[[Offer], tuple[str, str, str]] = lambda o: (o.provider, o.region, o.accelerator)  # noqa: E731
        chosen += [mix(b, s, x) for x in shares for s in chosen if s.market == SPOT for b in chosen
                   if b.market != SPOT and not b.parts and site(b) == site(s)]
    as_of = check_date(m.as_of, "market.as_of") if m.as_of is not None else cat.market.as_of
    if m.as_of is not None:
        judged_before_read(as_of, chosen, cat.market.as_of)
    cap = parse_power(m.site_power, "market.site_power") if m.site_power is not None else None
    if cap is not None:
        unknown = sorted({o.accelerator for o in chosen if o.power is None})
        if unknown:
            raise InputError(f"market.site_power: no power figures for {', '.join(unknown)} (add [power.NAME] to a "
                             "catalog offers.toml)")
    copies = parse_int(m.checkpoint_copies, "market.checkpoint_copies", minimum=1) \
        if m.checkpoint_copies is not None else MarketOptions.checkpoint_copies
    egress = parse_int(m.checkpoint_egress, "market.checkpoint_egress", minimum=0) \
        if m.checkpoint_egress is not None else MarketOptions.checkpoint_egress
    return MarketOptions(offers=tuple(chosen), as_of=as_of, site_power_w=cap, checkpoint_copies=copies,
                         checkpoint_egress=egress)


def _model(table: dict[str, Any], base: Path, cat: Catalog) -> ModelArch:
    """[model]: a Hugging Face config (relative to the scenario's folder) or a catalog model."""
    m = read_table(ModelKeys, table, "model.")
    if "config" in table:
        if not isinstance(m.config, str) or not m.config:
            raise InputError(f"model.config must be the path of a config.json (a string), got {m.config!r}")
        cfg = Path(m.config)
        return model_from_hf_config(cfg if cfg.is_absolute() else base / cfg)
    return cat.model(m.name)


def _task(raw: dict[str, Any], stage_tables: list[dict[str, Any]], model: ModelArch) -> Task:
    """[task] and [schedule] (a staged task: the first stage stands for the task; every stage is built
    by :func:`_stages`)."""
    t = dict(stage_tables[0], **{k: v for k, v in raw["task"].items() if k not in stage_tables[0]}) \
        if stage_tables else raw["task"]
    tk = read_table(TaskKeys, t, "task.")
    sch = read_table(ScheduleKeys, raw["schedule"], "schedule.")
    task = Task(tokens=tk.tokens, seq_len=tk.seq_len, global_batch=tk.global_batch, precision=tk.precision,
                deadline_s=sch.deadline, reserved_s=sch.reserved, confidence=sch.confidence)
    b = read_table(BatchKeys, t, "task.", (model, task))
    kw = {} if b.critical_batch is None else dict(zip(("critical_batch", "critical_batch_source"), b.critical_batch,
                                                      strict=True))
    if b.batch_ramp is not None:
        kw["ramp"] = b.batch_ramp
    return replace(task, **kw) if kw else task


def _systems(hw: dict[str, Any], prices: dict[str, Any], cat: Catalog,
             stack: StackProfile | None = None) -> dict[str, System]:
    """[hardware]: one System per candidate accelerator, in order. A stated efficiency selects the chapter's
    flat model (compute = FLOPs / (peak x efficiency)); without one every accelerator runs the per-operation
    model of its performance-catalog entry, and a catalog card's usable memory is what the stack's allocator
    can fill: (usable - communicator buffers) / (1 + allocator reserve) (StackProfile.usable; a usable_memory
    the scenario states is taken as it is)."""
    h = read_table(HardwareKeys, hw, "hardware.")
    systems = {name: _system(name, hw, prices, h.efficiency, cat) for name in h.accelerator}
    if h.efficiency is None and stack is not None:
        for name, sysm in systems.items():
            card = dict(hw.get(name, {})) if isinstance(hw.get(name), dict) else {}
            if "usable_memory" not in hw and "usable_memory" not in card:
                acc = replace(sysm.acc, memory_usable=stack.usable(sysm.acc.memory_usable),
                              memory_usable_stated=sysm.acc.memory_usable)
                systems[name] = replace(sysm, acc=acc)
    for key, value in hw.items():
        if isinstance(value, dict) and key not in systems:
            cat.accelerator(key)  # unknown name -> clear error; known but unused -> ignored
    return systems


def _system(name: str, hw: dict[str, Any], prices: dict[str, Any], efficiency: float | None, cat: Catalog) -> System:
    """One candidate: the catalog card with the [hardware] values (top level, then [hardware.<name>]) and
    the [cost] prices (read after the card's own values, which they override)."""
    card = {k: hw[k] for k in CARD_KEYS if k in hw}
    card.update(hw.get(name, {}) if isinstance(hw.get(name), dict) else {})
    acc = cat.accelerator(name)
    acc = _card_overrides(acc, read_table(CardKeys, card, f"hardware ({name}) ", cat))
    cost = read_table(PriceKeys, prices, "cost.")
    if efficiency is None and acc.hbm_bandwidth <= 0:
        raise InputError(f"accelerator {name!r} has no hbm_bandwidth, which the per-operation step-time model "
                         "needs (add it to the catalog, or state hardware.efficiency for the flat model)")
    return System(acc=acc, efficiency=1.0 if efficiency is None else efficiency,
                  price_card_hour=acc.price_card_hour if cost.card_hour is None else cost.card_hour,
                  nic_price_hour=acc.nic_price_hour if cost.nic_hour is None else cost.nic_hour,
                  perf=None if efficiency is not None else cat.perf(name),
                  price_source=_price_source(name, card, cost, acc, cat))


def _price_source(name: str, card: dict[str, Any], cost: PriceKeys, acc: Accelerator, cat: Catalog) -> str:
    """Where the card-hour price comes from: the scenario ([cost] or [hardware] card_hour) or the catalog
    (its source and price date)."""
    if cost.card_hour is not None:
        return "scenario: [cost] card_hour"
    if "card_hour" in card:
        return "scenario: [hardware] card_hour"
    date = cat.raw.get("accelerators", {}).get(name, {}).get("price_date")
    source = acc.sources.get("price_card_hour", "no source")
    origin = cat.origin("accelerators", name)  # a --catalog file's card: its price is that file's, not the shipped
    return f"user catalog {date or 'undated'}: {source} ({origin})" if origin else \
        f"catalog {date or 'undated'}: {source}"


def _card_overrides(acc: Accelerator, card: CardKeys) -> Accelerator:
    """The catalog card with the scenario's per-card values; stating nics_per_host raises the NIC slots
    to at least that many unless max_nics_per_host is stated too."""
    kw = targets(card, "usable_memory", "cards_per_host", "peak", "nics_per_host", "card_hour")
    kw.update(card.nic or {})
    if card.usable_memory is not None:  # where the usable memory comes from (tpopt.optimizer.footing.usable_source)
        kw["usable_stated_by"] = "scenario"
    if card.nics_per_host is not None:
        kw["max_nics_per_host"] = max(acc.max_nics_per_host, card.nics_per_host)
    if card.max_nics_per_host is not None:
        kw["max_nics_per_host"] = card.max_nics_per_host
    return replace(acc, **kw)


def _risk(rk: RiskKeys) -> Risk:
    """[risk]: the distribution's inputs (rates per card-day -> per card-second)."""
    return Risk(step_sigma=rk.step_sigma, slow_rate_per_card_s=rk.slow_per_card_day / DAY, slow_factor=rk.slow_factor,
                slow_duration_s=rk.slow_duration, preempt_rate_per_card_s=rk.preempt_per_card_day / DAY,
                reacquire_s=rk.reacquire, evidence=load_evidence())


def _reliability(ck: CheckpointKeys, st: StragglerKeys, raw: dict[str, Any], cat: Catalog) -> Reliability:
    """[checkpoint] and [stragglers]: a storage tier stands for the write bandwidth, a job MTBF for the
    per-card one. The storage tier is kept by name: the one named, else the first catalog tier of the same
    bandwidth (storage.toml order; "" for none), with who states the bandwidth (``raw``: the [checkpoint] table)."""
    bandwidth = ck.write_bandwidth if ck.storage is None else ck.storage
    by = "storage" if "storage" in raw else "write_bandwidth" if "write_bandwidth" in raw else "default"
    tier = str(raw["storage"]) if by == "storage" else next(
        (name for name, bw in cat.storage.items() if bw == bandwidth), "")
    return Reliability(**targets(ck, "bytes_per_param", "restore", "loss_spike_interval", "snapshot_copy",
                                 "failure_model"), **targets(st), write_bandwidth=bandwidth,
                       storage_tier=tier, storage_stated_by=by,
                       card_mtbf_s=ck.card_mtbf if ck.job_mtbf is None else ck.job_mtbf)


def _search_space(se: dict[str, Any], ck: dict[str, Any], mem: MemoryOptions,
                  systems: dict[str, System]) -> SearchSpace:
    """[search] domains. Defaults that follow other tables: save_interval and save_mode from [checkpoint]
    (else every interval's optimum and both modes), recompute none and full (none alone with an activation
    reserve, under which recompute changes nothing), the accelerators of [hardware]."""
    defaults = {"save_interval": ck.get("save_interval", DEFAULT_SAVE_INTERVAL),
                "save_mode": ck.get("mode", list(DEFAULT_SAVE_MODES)),
                "recompute": ["none", "full"] if mem.activation_reserve is None else ["none"],
                "accelerator": list(systems)}
    s = read_table(SearchKeys, dict(defaults, **se), "search.", systems)
    kw = {**targets(s), **targets(read_table(VariableSearchKeys, se, "search."))}  # the variables' own keys
    kw["schedule"] = _schedules(s.schedule, kw.pop("virtual_stages", None), tuple(kw["pp"]))
    return SearchSpace(**kw)


def _schedules(names: tuple[str, ...], virtual_stages: tuple[int, ...] | None,
               pp: tuple[int, ...]) -> tuple[str, ...]:
    """[search] schedule values, with "interleaved" expanded over [search] virtual_stages; virtual stages that no
    plan would run (no "interleaved" among the schedules, or no pipeline size above 1) are one clear error."""
    if virtual_stages is None:
        return names
    given = f"search.virtual_stages {list(virtual_stages)}"
    if "interleaved" not in names:
        raise InputError(f"{given} expands \"interleaved\" in search.schedule, which lists {json.dumps(names)}: add "
                         "\"interleaved\", or drop virtual_stages")
    if max(pp) < 2:
        raise InputError(f"{given} splits each pipeline stage into model chunks, and search.pp is {list(pp)}: add a "
                         "size of 2 or more, or drop virtual_stages")
    out = []
    for x in names:
        out += [schedule_name("interleaved", v) for v in virtual_stages] if x == "interleaved" else [x]
    return tuple(dict.fromkeys(out))


def _moe_inputs(mt: dict[str, Any], model: ModelArch, se: dict[str, Any],
                stack: StackProfile | None = None, recipe: Recipe | None = None,
                vendors: dict[str, str] | None = None) -> tuple[MoeOptions, dict[str, Any]]:
    """[moe] routing assumptions and the [search] domains of ep, expert_tp and capacity_factor; the
    dispatcher and the all-to-all overlap the scenario does not state are the stack's recipe's for the model
    and card (catalogs/recipes.toml: ``recipe``, stated in the report as MoeOptions.recipe), else the stack's
    (moe.stack_defaults); on a card whose maker (``vendors``: card -> accelerators.toml vendor) a flex
    dispatcher's software does not run, the one that runs there (stacks.dispatcher_on_card: MoeOptions
    card_dispatchers, each stated in the report); the recipe's settings whose software the makers of the cards do
    do not run are left to the stack there (Recipe.moe_settings_on: MoeOptions card_settings_off, each stated in the
    report).

    Defaults: ep = every power of two dividing the routed experts (1 for a dense model), expert_tp = 0
    (the same as tp), capacity_factor = none (dropless). EP values that do not divide the experts, and
    any of these on a dense model, are bad input.
    """
    if not model.moe:
        if mt:
            raise InputError(f"scenario: [moe] applies to mixture-of-experts models; {model.name} is dense")
        given = [f.name for f in fields(MoeSearchKeys) if f.name in se]
        if given:
            raise InputError(f"search.{given[0]} applies to mixture-of-experts models; {model.name} is dense")
        return MoeOptions(), {"ep": (1,), "expert_tp": (0,), "capacity_factor": (0.0,)}
    implied = moe_stack_defaults(stack.moe_dispatcher, stack.moe_a2a_overlap) if stack is not None else {}
    settings, off = recipe.moe_settings_on(vendors or {}, mt) if recipe is not None else ({}, {})
    from_recipe = {k: v for k, v in settings.items() if k not in mt}
    opts = MoeOptions(**targets(read_table(MoeKeys, {**implied, **from_recipe, **mt}, "moe.")))
    # the recipe's line states what it supplied on some card (a setting left out on every card: their lines say so)
    nowhere = set.intersection(*(set(keys) for keys, _ in off.values())) if off and len(off) == len(vendors or {}) \
        else set()
    supplied = {k: v for k, v in from_recipe.items() if k not in nowhere}
    if recipe is not None and supplied:
        opts = replace(opts, recipe=recipe.assumption(recompute=False, moe_keys=supplied))
    if off:  # settings of the recipe a card's maker does not run: the stack's defaults there
        opts = replace(opts, card_settings_off=tuple((c, keys) for c, (keys, _) in off.items()),
                       vendor_notes=tuple((c, line) for c, (_, line) in off.items()))
    named = recipe.moe_dispatcher if recipe is not None and "dispatcher" in from_recipe else \
        (stack.moe_dispatcher if stack is not None else None)
    if named is not None and "dispatcher" not in mt:  # a card whose maker does not run it runs the fallback
        runs = {card: dispatcher_on_card(named, card, maker) for card, maker in (vendors or {}).items()}
        moved = {card: r for card, r in runs.items() if r[1]}
        opts = replace(opts, card_dispatchers=tuple((c, STACK_DISPATCHERS[r[0]]) for c, r in moved.items()),
                       dispatcher_notes=tuple((c, f"MoE token dispatcher {r[0]}, not the stack's {named}: {r[1]} "
                                               "(catalogs/frameworks/megatron-lm.toml [flex_dispatcher]; where the "
                                               "scenario states no [moe] dispatcher)") for c, r in moved.items()))
    d = read_table(MoeSearchKeys, se, "search.", model)
    E = model.experts
    ep = d.ep or tuple(e for e in (2 ** i for i in range(E.bit_length())) if E % e == 0)
    return opts, {"ep": ep, "expert_tp": d.expert_tp, "capacity_factor": d.capacity_factor}


# ---------------------------------------------------------------------------------------------
# the batch as a choice (critical batch, ramp-up) and training stages


def _check_batch_choices(task: Task, space: SearchSpace, where: str) -> None:
    choices = space.global_batch or (task.global_batch,)
    if len(set(choices)) > 1 and not task.critical_batch_source:
        raise InputError(f"search.global_batch offers several batches but {where}.critical_batch is not given: the "
                         "tokens needed depend on the batch (give critical_batch, e.g. \"2M\" tokens or "
                         "\"deepseek-llm\", or \"none\" to keep the tokens whatever the batch)")
    if task.ramp is not None:
        start, inc, ramp_tokens = task.ramp
        if ramp_tokens > task.tokens:
            raise InputError(f"{where}.batch_ramp.tokens: the ramp ({ramp_tokens / 1e9:,.4g}B tokens) is longer than "
                             f"the run ({where}.tokens = {task.tokens / 1e9:,.4g}B); give a ramp shorter than the run")
        for b in choices:
            if start > b:
                raise InputError(f"{where}.batch_ramp.start: the ramp starts at {start} sequences, above the batch {b} "
                                 "it ramps up to; give a start no larger than the batch")
            if start < b and (b - start) % inc:
                raise InputError(f"{where}.batch_ramp: the batch {b} is not start {start} plus a whole number of "
                                 f"increments of {inc}")


def _stage_tables(t: dict[str, Any]) -> list[dict[str, Any]]:
    if "stages" not in t:
        return []
    st = t["stages"]
    if not isinstance(st, list) or not st or not all(isinstance(x, dict) for x in st):
        raise InputError("task.stages must be a list of tables ([[task.stages]] with tokens, seq_len, ...)")
    if "tokens" in t:
        raise InputError("task.tokens: a staged task's tokens are each stage's own ([[task.stages]] tokens); "
                         "remove tokens from [task] (it would be ignored)")
    for i, x in enumerate(st):
        bad = set(x) - STAGE_KEYS
        if bad:
            raise InputError(f"task.stages[{i + 1}]: unknown key(s) {sorted(bad)} "
                             f"(known: {', '.join(sorted(STAGE_KEYS))})")
        if "tokens" not in x:
            raise InputError(f"task.stages[{i + 1}]: missing required key 'tokens'")
        for k in ("seq_len", "global_batch"):
            if k not in x and k not in t:
                raise InputError(f"task.stages[{i + 1}]: missing {k!r} (give it in the stage or in [task])")
    return st


def _stages(tables: list[dict[str, Any]], raw: dict[str, Any], cat: Catalog) -> tuple[Stage, ...]:
    """Every stage's task and search domains, each built exactly as a one-stage scenario whose [task]
    is the stage's keys over [task] and whose [search] is the stage's ``search`` table over [search]."""
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


def load_scenario(path: str | PathLike[str] | Mapping[str, Any], overrides: dict[str, Any] | None = None,
                  catalog_dirs: Sequence[str | PathLike[str]] = ()) -> Scenario:
    """Read, override and build a scenario in one call."""
    raw = read_scenario_file(path)
    if overrides:
        raw = with_overrides(raw, overrides)
    return build_scenario(raw, load_catalog(catalog_dirs))


# ---------------------------------------------------------------------------------------------
# [[sites]] and [wan]: a job over several datacenters (tpopt sites, :mod:`tpopt.optimizer.sites`)

SITE_KEYS = frozenset({"name", "max_cards", "power", "pue", "accelerator", "card_hour"})
WAN_KEYS = frozenset({"bandwidth_gbps", "latency_ms", "egress_usd_tb", "modes", "inner_steps", "fragments",
                      "overlap_steps", "token_penalty", "token_penalty_source", "grad_bytes", "outer_bytes", "links"})
LINK_KEYS = frozenset({"sites", "bandwidth_gbps", "latency_ms", "egress_usd_tb"})


def _known(table: Mapping[str, Any], allowed: frozenset[str], where: str) -> None:
    extra = sorted(set(table) - allowed)
    if extra:
        raise InputError(f"{where}: unknown key {extra[0]!r} (known: {', '.join(sorted(allowed))})")


def _positive(table: Mapping[str, Any], key: str, where: str, default: float | None = None, *,
              zero: bool = False) -> float:
    value = table.get(key, default)
    if value is None:
        raise InputError(f"{where}.{key} is required")
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 or (value == 0 and not zero):
        raise InputError(f"{where}.{key}: {value!r} is not a {'non-negative' if zero else 'positive'} number")
    return float(value)


def _ints(table: Mapping[str, Any], key: str, default: tuple[int, ...], where: str) -> tuple[int, ...]:
    value = table.get(key, list(default))
    if not isinstance(value, list) or not value or any(isinstance(v, bool) or not isinstance(v, int) or v < 1
                                                       for v in value):
        raise InputError(f"{where}.{key}: {value!r} is not a list of positive integers")
    return tuple(sorted(set(value)))


def _wan_link(t: Mapping[str, Any], where: str, default: SiteLink | None = None) -> SiteLink:
    from tpopt.models.sites import WanLink as SiteLink  # lazy: start-up time ([[sites]] scenarios only)

    return SiteLink(bandwidth_bps=_positive(t, "bandwidth_gbps", where, None if default is None
                                            else default.bandwidth_bps / 1e9) * 1e9,
                    latency_s=_positive(t, "latency_ms", where, None if default is None else default.latency_s * 1e3,
                                        zero=True) / 1e3,
                    egress_usd_tb=_positive(t, "egress_usd_tb", where, 0.0 if default is None
                                            else default.egress_usd_tb, zero=True))


def split_sites(raw: dict[str, Any]) -> tuple[dict[str, Any], SitesInput | None]:
    """The scenario's tables without ``[[sites]]`` and ``[wan]``, and those two read (None: a one-site scenario,
    the tables unchanged). Units: ``power`` with a unit ("40MW"), ``bandwidth_gbps`` Gbit/s, ``latency_ms`` ms
    (one way), ``egress_usd_tb`` USD per TB (10^12 bytes); ``token_penalty`` a fraction of extra tokens."""
    if "sites" not in raw and "wan" not in raw:
        return raw, None
    from tpopt.models.sites import MODES as SITE_MODES  # lazy: start-up time ([[sites]] scenarios only)
    from tpopt.models.sites import Site as SiteSpec  # lazy: start-up time
    from tpopt.models.sites import SitesInput  # lazy: start-up time

    rest = {k: v for k, v in raw.items() if k not in ("sites", "wan")}
    tables, wan = raw.get("sites"), raw.get("wan")
    if not isinstance(tables, list) or not tables or not all(isinstance(t, dict) for t in tables):
        raise InputError("[[sites]]: give one [[sites]] table per datacenter (name, max_cards, power)")
    if not isinstance(wan, dict):
        raise InputError("[wan]: give the WAN link (bandwidth_gbps, latency_ms, egress_usd_tb)")
    sites = []
    for i, t in enumerate(tables):
        where = f"sites[{i}]"
        _known(t, SITE_KEYS, where)
        name, cards = t.get("name"), t.get("max_cards")
        if not isinstance(name, str) or not name:
            raise InputError(f"{where}.name is required (a non-empty string)")
        if isinstance(cards, bool) or not isinstance(cards, int) or cards < 1:
            raise InputError(f"{where}.max_cards: {cards!r} is not a positive integer")
        cap = parse_power(t["power"], f"{where}.power") if "power" in t else None
        acc = t.get("accelerator")
        if acc is not None and (not isinstance(acc, str) or not acc):
            raise InputError(f"{where}.accelerator: {acc!r} is not a catalog accelerator name")
        price = _positive(t, "card_hour", where, zero=True) if "card_hour" in t else None
        pue = parse_pue(_positive(t, "pue", where, 1.2), f"{where}.pue")
        sites.append(SiteSpec(name=name, max_cards=cards, power_cap_w=cap, pue=pue, accelerator=acc, card_hour=price))
    if len({s.name for s in sites}) != len(sites):
        raise InputError("[[sites]]: site names must differ")
    _known(wan, WAN_KEYS, "wan")
    default = _wan_link(wan, "wan")
    names = {s.name for s in sites}
    links = []
    for j, t in enumerate(wan.get("links", [])):
        where = f"wan.links[{j}]"
        _known(t, LINK_KEYS, where)
        pair = t.get("sites")
        if not isinstance(pair, list) or len(pair) != 2 or len(set(pair)) != 2 or not set(pair) <= names:
            raise InputError(f"{where}.sites: {pair!r} is not two site names of [[sites]]")
        links.append((frozenset(pair), _wan_link(t, where, default)))
    modes = wan.get("modes", list(SITE_MODES))
    if not isinstance(modes, list) or not modes or not set(modes) <= set(SITE_MODES):
        raise InputError(f"wan.modes: {modes!r} is not a list of {' / '.join(SITE_MODES)}")
    penalty, source = wan.get("token_penalty"), wan.get("token_penalty_source", "")
    if "diloco" in modes and penalty is None:
        raise InputError("wan.token_penalty is required with DiLoCo (extra tokens to the same loss, a fraction; "
                         "state its source in wan.token_penalty_source)")
    return rest, SitesInput(
        sites=tuple(sites), wan=default, links=tuple(links), modes=tuple(m for m in SITE_MODES if m in modes),
        inner_steps=_ints(wan, "inner_steps", (100, 500), "wan"), fragments=_ints(wan, "fragments", (1,), "wan"),
        overlap_steps=int(_positive(wan, "overlap_steps", "wan", 1)),
        token_penalty=_positive(wan, "token_penalty", "wan", 0.0, zero=True), token_penalty_source=str(source),
        grad_bytes=_positive(wan, "grad_bytes", "wan", 2.0), outer_bytes=_positive(wan, "outer_bytes", "wan", 2.0))


def load_sites_scenario(path: str | PathLike[str] | Mapping[str, Any], catalog_dirs: Sequence[str | PathLike[str]] = ()
                        ) -> tuple[Scenario, SitesInput, Power | None]:
    """A multi-site scenario: the one-site scenario, its sites and WAN, and the accelerator's power figures."""
    raw, si = split_sites(read_scenario_file(path))
    if si is None:
        raise InputError("scenario: no [[sites]] and [wan] tables (tpopt solve plans one site)")
    cat = load_catalog(catalog_dirs)
    sc = build_scenario(raw, cat)
    if len(sc.systems) != 1:
        raise InputError("[[sites]]: give one accelerator (hardware.accelerator); mixed pools are [hardware.pools]")
    return sc, si, cat.market.power.get(next(iter(sc.systems)))


def load_mixed_sites_scenario(path: str | PathLike[str] | Mapping[str, Any],
                              catalog_dirs: Sequence[str | PathLike[str]] = ()
                              ) -> tuple[Scenario, SitesInput, dict[str, Power | None]]:
    """A multi-site scenario whose sites name their own card types or prices (``[[sites]] accelerator``,
    ``card_hour``): the scenario with every type among its hardware (``hardware.accelerator`` first: the type of
    a site that names none), the sites and WAN, and each type's catalog power figures (None: no figure)."""
    raw, si = split_sites(read_scenario_file(path))
    if si is None:
        raise InputError("scenario: no [[sites]] and [wan] tables (tpopt solve plans one site)")
    hw = raw.get("hardware")
    base = hw.get("accelerator") if isinstance(hw, dict) else None
    if not isinstance(hw, dict) or not isinstance(base, str):
        raise InputError("[[sites]]: give one accelerator (hardware.accelerator): the type of a site that names none")
    types = list(dict.fromkeys([base, *(s.accelerator for s in si.sites if s.accelerator is not None)]))
    cat = load_catalog(catalog_dirs)
    sc = build_scenario({**raw, "hardware": {**hw, "accelerator": types}}, cat)
    si = replace(si, sites=tuple(replace(s, accelerator=s.accelerator or base) for s in si.sites))
    return sc, si, {t: cat.market.power.get(t) for t in types}


__all__ = ["read_scenario_file", "with_overrides", "build_scenario", "load_scenario", "build_model", "natural_keys",
           "BUILTIN_SCENARIO", "split_sites", "load_sites_scenario",
           "load_mixed_sites_scenario"]
