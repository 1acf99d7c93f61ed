"""Scenario keys declared once: table, kind (type and unit), bound, default and help text per key.

Each table of a scenario file is a frozen dataclass whose fields are its keys; a field's metadata holds
its :class:`Key` (how the value is read, the default as a scenario file would write it, the help text,
the name errors use, the model field it sets). :func:`read_table` walks the declarations and returns
the table with every value in SI units (seconds, bytes, bytes/s, FLOP/s, counts), each parsed exactly
once by the unit parsers of :mod:`tpopt.models.units`, whose one-line messages name the key
(``task.tokens: '-5B' must not be negative``). The known keys of every table, the required ones and
the keys a training stage may set (:data:`KEYS`, :data:`REQUIRED`, :data:`STAGE_KEYS`) are derived
from the declarations; :func:`check_keys` rejects unknown tables and keys with them.

Values that need the rest of the scenario (the critical batch needs the model; the MoE domains need
the routed experts; the search defaults follow the checkpoint and memory tables) are declared here
with their help text and read by :mod:`tpopt.catalogs.scenario`, which assembles the model records.

The mechanism (:class:`Kind`, :class:`Key`, :func:`read_table`, :func:`read_entry`, the quantity kinds) lives in
:mod:`tpopt.catalogs.declare`, which catalog readers import without this module (``Kind``, ``Key``, ``key`` and
``read_table`` stay importable from here).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, make_dataclass
from typing import Any, ClassVar

from tpopt.catalogs.declare import (
    MAX_DOMAIN_INT,
    Key,
    Kind,
    bandwidth,
    choice,
    count,
    duration,
    fraction,
    integer,
    key,
    number,
    quantity,
    raw,
    read_table,
    size,
    spec,
    targets,
    whole,
)
from tpopt.catalogs.stacks import DEFAULT_STACK, stack_names, stack_profile
from tpopt.errors import InputError
from tpopt.models import memory
from tpopt.models.arch import flops_per_token
from tpopt.models.batch import noise_scale_fit
from tpopt.models.context import METHODS, SPLITS
from tpopt.models.finish import SLOW_DURATION_S, SLOW_FACTOR, SLOW_RATE_PER_CARD_S, parse_confidence
from tpopt.models.moe import A2A_OVERLAPS, DISPATCHERS
from tpopt.models.plan import OFFLOADS, SAVE_MODES, MoeOptions, SearchSpace, split_schedule
from tpopt.models.units import (
    MAX_CARD_BYTES,
    MAX_DEADLINE_S,
    MAX_INT,
    MAX_TOKENS,
    fmt_durations,
    parse_bandwidth,
    parse_count,
    parse_duration,
    parse_flops_rate,
    parse_fraction,
    parse_int,
    parse_number,
)
from tpopt.models.variables import PLAN_INPUTS, VARIABLES, Variable

MAX_LIST = 1024  # entries in one [search] list
MAX_SEQ_LEN = 2**24  # tokens per sequence
MAX_BATCH = 2**20  # sequences per step (dp ranges over its divisors)
MAX_CARDS = 2**24  # cards in a plan (search.max_cards, job_mtbf.cards)
MAX_HOST_INT = 1024  # cards or NICs per host
AUTO_INTERVAL = "auto"
#: Checkpoint defaults do not bias a plan: unless the scenario states them, the save interval is the
#: optimum for each card count ("auto", tau* = sqrt(2c / lambda)) and both save modes are searched.
DEFAULT_SAVE_INTERVAL = AUTO_INTERVAL
DEFAULT_SAVE_MODES = ("sync", "async")
#: The value types of [search] domains (read as tuples): whole numbers (sizes, counts, stages), names,
#: real numbers, flags.
Sizes = tuple[int, ...]
Names = tuple[str, ...]
Reals = tuple[float, ...]
Flags = tuple[bool, ...]


# ---------------------------------------------------------------------------------------------
# scenario kinds (the quantity kinds, raw and choice are those of tpopt.catalogs.declare)


def _stack(value: Any, what: str, _context: Any) -> str:
    """A stack of catalogs/stacks.toml (its profile is checked and loaded by catalogs.stacks)."""
    if not isinstance(value, str):
        raise InputError(f"{what} must be a stack name (known: {', '.join(stack_names())})")
    stack_profile(value)
    return value


def _pool_tables(value: Any, what: str, _context: Any) -> list[dict[str, Any]]:
    """[[hardware.pools]]: one table per accelerator pool (read by catalogs.scenario.read_pools)."""
    if not isinstance(value, list) or not value or not all(isinstance(t, dict) for t in value):
        raise InputError(f"{what}: give one [[hardware.pools]] table per accelerator pool")
    return value


def _flag(value: Any, what: str, _context: Any = None) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"{what} must be true or false")
    return value


def _overlap(value: Any, what: str, _context: Any = None) -> float:
    """An overlap share: true / false, or a fraction such as 0.5 or 50%."""
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    return parse_fraction(value, what, allow_zero=True)


def _tp_overlap(value: Any, what: str, _context: Any) -> tuple[float, float]:
    """(chunked, async) shares: true / false / a fraction (chunked GEMM overlap of every TP collective),
    or "async" (only the column-parallel backward collectives, beside the other gradient GEMM)."""
    if isinstance(value, str) and value.strip().lower() == "async":
        return (0.0, 1.0)
    f = _overlap(value, what)
    return (f, f)


def _precision(value: Any, _what: str, _context: Any) -> str:
    text = str(value)
    memory.recipe(text)  # unknown -> one clear error
    return text


def _batch_ramp(value: Any, what: str, _context: Any) -> tuple[int, int, float]:
    """(start sequences, increment sequences, ramp tokens) from ``{ start, increment, tokens }``."""
    if not isinstance(value, dict) or set(value) != {"start", "increment", "tokens"}:
        raise InputError(f'{what} must be a table like {{ start = 32, increment = 32, tokens = "4B" }} '
                         "(sequences, sequences, tokens)")
    return (parse_int(value["start"], f"{what}.start", minimum=1),
            parse_int(value["increment"], f"{what}.increment", minimum=1),
            parse_count(value["tokens"], f"{what}.tokens", allow_zero=False))


def parse_critical_batch(value: Any, seq_len: int, model: Any, tokens: float, what: str) -> tuple[float | None, str]:
    """(B_noise in tokens per step, source) from ``"2M"`` (tokens), ``"256 sequences"``, ``"deepseek-llm"``
    (the scaling fit of :func:`tpopt.models.batch.noise_scale_fit` on the run's compute) or ``"none"``
    (tokens independent of the batch, stated on purpose)."""
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


def _critical_batch(value: Any, what: str, context: Any) -> tuple[float | None, str]:
    model, task = context
    return parse_critical_batch(value, task.seq_len, model, task.tokens, what)


def _card_mtbf(value: Any, what: str, _context: Any) -> float | None:
    """Seconds, or None (no hardware failures) for ``none`` / ``inf`` / ``never``."""
    if str(value).lower() in ("none", "inf", "never"):
        return None
    return parse_duration(value, what, allow_zero=False)


def _job_mtbf(value: Any, what: str, _context: Any) -> float:
    """Per-card MTBF (s) = cards x interval, from ``{ cards = 1024, interval = "7.9h" }``."""
    if not isinstance(value, dict) or "cards" not in value or "interval" not in value:
        raise InputError(f'{what} must be a table like {{ cards = 1024, interval = "7.9h" }}')
    return parse_int(value["cards"], f"{what}.cards", minimum=1, maximum=MAX_CARDS) * parse_duration(
        value["interval"], f"{what}.interval", allow_zero=False)


def _nic(value: Any, what: str, catalog: Any) -> dict[str, Any]:
    """The Accelerator fields a NIC sets: a catalog NIC (bandwidth, price per NIC-hour, name), or a bandwidth
    (context: the catalog)."""
    if value in catalog.nics:
        n = catalog.nics[value]
        return {"nic_bw": n.bandwidth, "nic_price_hour": n.price_hour, "nic": value}
    return {"nic_bw": parse_bandwidth(value, what), "nic": str(value)}


def _storage(value: Any, _what: str, catalog: Any) -> float:
    """Write bandwidth (B/s) of a catalog storage tier (context: the catalog)."""
    bandwidth: float = catalog.storage_tier(str(value))
    return bandwidth


def _save_interval(value: Any, what: str, _context: Any) -> float:
    """Seconds; 0.0 marks "auto" (the optimal interval for the card count)."""
    if isinstance(value, str) and value.strip().lower() == AUTO_INTERVAL:
        return 0.0
    return parse_duration(value, what, allow_zero=False)


def _schedule(value: Any, _what: str, _context: Any) -> str:
    text = str(value)
    split_schedule(text)  # unknown names -> one clear error
    return text


def _expert_tp(value: Any, what: str, _context: Any) -> int:
    """0 for ``tp`` (the same as tp), else a whole number >= 1."""
    return 0 if str(value).strip().lower() == "tp" else parse_int(value, what, minimum=1, maximum=MAX_INT)


def _ep(value: Any, what: str, model: Any) -> tuple[int, ...]:
    """Expert-parallel sizes, each dividing the routed experts (context: the model)."""
    ep: Sizes = INTS.read(value, what, model)
    bad = [e for e in ep if model.experts % e]
    if bad:
        raise InputError(f"{what}: {bad[0]} does not divide the {model.experts} routed experts of {model.name}")
    return ep


def _searched_accelerators(value: Any, what: str, systems: Any) -> tuple[str, ...]:
    """Names from hardware.accelerator (context: the systems built from it)."""
    names = tuple(str(x) for x in as_list(value, what))
    for x in names:
        if x not in systems:
            raise InputError(f"{what} {x!r} is not in hardware.accelerator")
    return names


def _capacity(value: Any, what: str, _context: Any) -> float:
    """0.0 for ``none`` / ``dropless``, else a positive capacity factor."""
    if str(value).strip().lower() in ("none", "dropless"):
        return 0.0
    return float(parse_number(value, what, allow_zero=False))


FLAG = Kind(_flag, "true | false")
TEXT = Kind(lambda value, _what, _context: str(value), "text")


def as_list(value: Any, what: str) -> list[Any]:
    """A list value as given (at most :data:`MAX_LIST` entries, not empty), ``"a, b"`` split at commas,
    or a single value as a one-entry list."""
    if isinstance(value, list):
        if not value:
            raise InputError(f"{what}: the list is empty")
        if len(value) > MAX_LIST:
            raise InputError(f"{what}: {len(value):,} entries, above the bound of {MAX_LIST:,}")
        return value
    if isinstance(value, str) and "," in value:
        return [x.strip() for x in value.split(",") if x.strip()]
    return [value]


def domain(item: Kind, order: str = "sorted") -> Kind:
    """A list of ``item`` values (or one value): ``sorted`` unique, ``first`` (unique in the order given)
    or ``given`` (as given)."""

    def read(value: Any, what: str, context: Any) -> tuple[Any, ...]:
        values = [item.read(v, what, context) for v in as_list(value, what)]
        if order == "sorted":
            return tuple(sorted(set(values)))
        return tuple(dict.fromkeys(values)) if order == "first" else tuple(values)

    return Kind(read, f"list of {item.unit}", item.parser, item.bounds)


INTS = domain(integer())


@dataclass(frozen=True, eq=False, repr=False)
class ScenarioKeys:
    """[scenario]: its name and description."""

    name: Any = key(raw("text"), help="the scenario's name in reports (default: the file name)")
    description: Any = key(raw("text"), help="free text")


@dataclass(frozen=True, eq=False, repr=False)
class ModelKeys:
    """[model]: what is trained (one of the two keys)."""

    name: str | None = key(TEXT, help="a catalog model (tpopt catalog models), or a Hugging Face id "
                                      "org/name[@revision] in the local Hugging Face cache")
    config: Any = key(raw("path to config.json"), help="a Hugging Face config.json (path relative to the scenario)")


@dataclass(frozen=True, eq=False, repr=False)
class TaskKeys:
    """[task]: what must be done (tokens at a sequence length and batch)."""

    tokens: float = key(count(allow_zero=False, maximum=MAX_TOKENS), required=True, per_stage=True,
                        help="effective (non-padding) training tokens, e.g. 100B or 1.5T")
    seq_len: int = key(integer(maximum=MAX_SEQ_LEN), required=True, per_stage=True, help="tokens per sequence")
    global_batch: int = key(integer(maximum=MAX_BATCH), required=True, per_stage=True,
                            help="sequences per optimizer step (with a critical batch: the batch at which "
                                 "tokens is stated)")
    precision: str = key(Kind(_precision, " | ".join(memory.RECIPES)), "bf16-mixed", help="training precision recipe")
    stages: Any = key(raw("list of tables"), help="[[task.stages]]: training stages, each with name, the per-stage "
                                                  "task keys and a search table over [search]")


@dataclass(frozen=True, eq=False, repr=False)
class BatchKeys:
    """[task] keys of the batch as a choice, read once the task and schedule are (context: (model, task))."""

    critical_batch: tuple[float | None, str] | None = key(
        Kind(_critical_batch, 'tokens ("2M"), "256 sequences", "deepseek-llm", "none"'), per_stage=True,
        help="B_noise, tokens per step (with its source); makes the batch a plan choice")
    batch_ramp: tuple[int, int, float] | None = key(
        Kind(_batch_ramp, "{ start, increment, tokens }"), per_stage=True,
        help='linear batch ramp-up { start = 32, increment = 32, tokens = "4B" }')


@dataclass(frozen=True, eq=False, repr=False)
class StageKeys:
    """A [[task.stages]] entry's own keys (beside the task keys declared ``per_stage``)."""

    name: Any = key(raw("text"), help='the stage name (default "stage <n>")')
    search: Any = key(raw("table"), help="[search] domains of this stage, over the scenario's [search]")


class ReservedMessage:
    """schedule.reserved's rule message with both values and their units (read_table formats a rule's message
    with the values read, in seconds), and the knob that sets it: a question asked on the command line takes
    tpopt init's 5 d without the user stating it, and the line that lists the defaults taken is not printed when
    the scenario is refused."""

    def format(self, **v: Any) -> str:
        reserved, deadline = fmt_durations(v["reserved"], v["deadline"])
        return (f"schedule.reserved must be shorter than the deadline: reserved {reserved}, deadline {deadline} "
                "(--reserved or [schedule] reserved sets it)")


@dataclass(frozen=True, eq=False, repr=False)
class ScheduleKeys:
    """[schedule]: by when."""

    deadline: float = key(duration(allow_zero=False, maximum=MAX_DEADLINE_S), required=True,
                          help="wall-clock deadline, e.g. 30d or 720h")
    reserved: float = key(duration(maximum=MAX_DEADLINE_S), "0d",
                          help="inside the deadline: start-up, evaluation, planned pauses")
    confidence: float | None = key(Kind(lambda v, what, _c: parse_confidence(v), "fraction in (0, 1): 95%"),
                                   optional=True, help="require P(finish <= deadline) >= this (chance constraint)")

    RULES: ClassVar = (("reserved", lambda v: v["reserved"] >= v["deadline"], ReservedMessage()),)


@dataclass(frozen=True, eq=False, repr=False)
class HardwareKeys:
    """[hardware]: the accelerator candidates and the step-time model."""

    accelerator: Names = key(domain(TEXT, "given"), required=True, help="one catalog accelerator or a list",
                             check=(lambda v: len(set(v)) != len(v), "hardware.accelerator lists a name twice"))
    efficiency: float | None = key(fraction(), help="stating it selects the flat model: compute = FLOPs / (peak x "
                                                    "efficiency); without it the per-operation model")
    stack: str = key(Kind(_stack, "catalogs/stacks.toml name"), DEFAULT_STACK,
                     help="software stack (catalogs/stacks.toml): per-step and per-micro-batch overheads, "
                          "communicator buffers and allocator reserve of the per-operation model")
    pools: list[dict[str, Any]] | None = key(Kind(_pool_tables, "[[hardware.pools]] tables"),
                                             help="accelerator pools of a mixed plan (docs/pools.md): accelerator, "
                                                  "max_cards, card_hour or owned = true")


@dataclass(frozen=True, eq=False, repr=False)
class CardKeys:
    """Per-card overrides of the catalog, in [hardware] (for the named cards) or [hardware.<name>]."""

    usable_memory: float = key(size(allow_zero=False, maximum=MAX_CARD_BYTES), to="memory_usable",
                               help="memory per card a plan may use")
    cards_per_host: int = key(integer(maximum=MAX_HOST_INT), help="cards per host")
    peak: float = key(quantity(parse_flops_rate, "FLOP/s (989TFLOP/s)"), to="peak_flops",
                      help="peak matrix throughput per card")
    nic: dict[str, Any] | None = key(Kind(_nic, "catalog NIC or bytes/s"),
                                     help="NIC type from the catalog, or a bandwidth")
    nics_per_host: int = key(integer(maximum=MAX_HOST_INT), help="NICs per host")
    max_nics_per_host: int = key(integer(maximum=MAX_HOST_INT), help="NIC slots per host")
    card_hour: float = key(number(), to="price_card_hour", help="USD per card-hour")


@dataclass(frozen=True, eq=False, repr=False)
class MemoryKeys:
    """[memory]: how activations and buffers are accounted (MemoryOptions)."""

    activation_reserve: float | None = key(size(maximum=MAX_CARD_BYTES), optional=True,
                                           help="a fixed per-card budget for activations, gathered parameters "
                                                "and workspace (the chapter's accounting); omit to model them")
    flash_attention: bool = key(FLAG, True, help="flash attention (no S x S scores saved)")
    activation_bytes: float = key(number(allow_zero=False), 2, help="bytes per activation value")
    loss_chunks: int = key(integer(), 1, help="chunked cross-entropy divides the FP32 logits buffer")
    loss: str | None = key(choice(("fused", "te", "eager", "compiled")), optional=True,
                           help="the cross-entropy: fused (4 B per logit), te (Transformer Engine's in-place loss, "
                                "2), eager (12, 16 under loss parallelism) or compiled (4); omit for the stack's")
    prefetch: int = key(integer(minimum=0, maximum=MAX_HOST_INT), 1, help="ZeRO-3 units gathered ahead of use")
    fp8_param_gather: bool | None = key(FLAG, optional=True,
                                        help="FP8-family recipes keep and gather the weights in FP8 (Megatron's "
                                             "--fp8-param-gather); omit for the stack's default (BF16 weights)")
    zero_group: int = key(integer(minimum=0, maximum=MAX_DOMAIN_INT), 0,
                          help="hybrid sharding: data-parallel ranks one ZeRO (>= 1) shard group spans, replicas "
                               "across groups all-reduce their gradient shards once a step; 0: all ranks")
    sequence_parallel: bool = key(FLAG, True, help="sequence parallelism under TP")
    dropout: bool = key(FLAG, False, help="dropout layers (1-byte masks, extra passes)")
    activation_offload_layers: int = key(integer(minimum=0, maximum=MAX_HOST_INT), 0,
                                         help="transformer layers whose stored activations are offloaded to host "
                                              "memory in the forward and reloaded for the backward (Megatron-Core's "
                                              "cpu_offloading_num_layers; one pipeline stage only)")


@dataclass(frozen=True, eq=False, repr=False)
class InputKeys:
    """[input]: CPU data preparation (InputPipeline)."""

    workers: float = key(number(), 0, help="CPU data workers, job-wide")
    sequences_per_worker_s: float = key(number(), 0, to="per_worker_rate",
                                        help="sequences each worker prepares per second")
    wait: float = key(duration(), "0s", to="wait_s", help="input wait per step that prefetch does not hide")
    workers_per_host: float = key(number(), 0, help="workers that scale with hosts (instead of workers)")

    RULES: ClassVar = (("workers_per_host",
                        lambda v: (v["workers"] > 0 or v["workers_per_host"] > 0) and v["sequences_per_worker_s"] <= 0,
                        "input.sequences_per_worker_s must be positive when workers are given"),)


@dataclass(frozen=True, eq=False, repr=False)
class CheckpointKeys:
    """[checkpoint]: checkpoints and failures (Reliability)."""

    storage: float | None = key(Kind(_storage, "catalog storage tier"), to="write_bandwidth",
                                help="a storage tier from the catalog (instead of write_bandwidth)")
    write_bandwidth: float = key(bandwidth(allow_zero=False), "7GB/s", help="aggregate storage write bandwidth")
    job_mtbf: float | None = key(Kind(_job_mtbf, "{ cards, interval }"), to="card_mtbf_s",
                                 help="a job-level MTBF the per-card figure is derived from (instead of card_mtbf)")
    card_mtbf: float | None = key(Kind(_card_mtbf, "duration or none"), "337d", to="card_mtbf_s",
                                  help="per-card MTBF (none: no hardware failures)")
    failure_model: str = key(choice(("first-order", "poisson"), "{what} must be 'first-order' or 'poisson'"),
                             "first-order", help="first-order or poisson")
    bytes_per_param: float = key(number(allow_zero=False), 14, help="checkpoint bytes per parameter")
    restore: float = key(duration(), "120s", to="restore_s", help="restart time after a failure or rollback")
    loss_spike_interval: float | None = key(duration(allow_zero=False), optional=True, to="event_interval_s",
                                            help="job-wide rollback interval (loss spikes, planned stops)")
    snapshot_copy: float = key(duration(), "0.5s", to="snapshot_copy_s", help="async save: foreground copy pause")
    save_interval: Any = key(raw("as search.save_interval"), help="the default of search.save_interval")
    mode: Any = key(raw("as search.save_mode"), help="the default of search.save_mode")

    EXCLUSIVE: ClassVar = (("write_bandwidth", "storage"), ("card_mtbf", "job_mtbf"))


@dataclass(frozen=True, eq=False, repr=False)
class StragglerKeys:
    """[stragglers]: per-card compute jitter."""

    sigma: float = key(fraction(allow_zero=True), 0, to="straggler_sigma", help="jitter as a fraction of the mean")


#: Largest step-time log-sd read: 3 is a factor of 20 at one standard deviation, far past any measured model
#: error (0.03-0.3); beyond it the lognormal's moments overflow (exp(sigma^2 / 2)).
MAX_STEP_SIGMA = 3.0


@dataclass(frozen=True, eq=False, repr=False)
class RiskKeys:
    """[risk]: the finish-time distribution's inputs beyond [checkpoint] (models/finish.py, Risk)."""

    step_sigma: float | None = key(number(maximum=MAX_STEP_SIGMA), optional=True,
                                   help="log-sd of measured / predicted step time (default: each plan's own, by "
                                        "its distance from the evidence; flat model: the card's residual_sigma, "
                                        "else 0.087)")
    slow_factor: float = key(number(allow_zero=False), SLOW_FACTOR, help="job slowdown while a fail-slow lasts")
    slow_duration: float = key(duration(), f"{SLOW_DURATION_S:g}s", to="slow_duration_s",
                               help="how long a fail-slow episode lasts")
    slow_per_card_day: float = key(number(), SLOW_RATE_PER_CARD_S * 86400.0,
                                   help="fail-slow episodes per card-day of training")
    preempt_per_card_day: float = key(number(), 0, help="spot preemptions per card-day (0: none)")
    reacquire: float = key(duration(), "0s", to="reacquire_s", help="time to get preempted capacity back")


@dataclass(frozen=True, eq=False, repr=False)
class CommKeys:
    """[comm]: communication overlap and context-parallel options."""

    overlap: bool = key(FLAG, True, help="prefetch and immediate reduction hide communication; false: no overlap")
    tp_overlap: tuple[float, float] = key(Kind(_tp_overlap, 'true | false | fraction | "async"'), False,
                                          label='comm.tp_overlap (true, false, a fraction or "async")',
                                          help="share of tensor-parallel traffic that may hide behind compute")
    dp_overlap: float = key(Kind(_overlap, "true | false | fraction"), True,
                            help="share of data-parallel traffic that may hide behind compute")
    cp_method: str = key(choice(METHODS), "ring", help="context parallelism: ring or all-to-all")
    cp_split: str = key(choice(SPLITS), "zigzag", help="causal split: zigzag or contiguous")


@dataclass(frozen=True, eq=False, repr=False)
class PriceKeys:
    """[cost] prices (read with the hardware)."""

    card_hour: float | None = key(number(), optional=True, to="price_card_hour",
                                  help="USD per card-hour (default: the catalog's)")
    nic_hour: float | None = key(number(), optional=True, to="nic_price_hour",
                                 help="USD per NIC-hour (default: the catalog's)")


@dataclass(frozen=True, eq=False, repr=False)
class BudgetKeys:
    """[cost] budget (read last, after the training stages)."""

    max_cost: float | None = key(number(), optional=True, help="budget cap (budget.cost)")


@dataclass(frozen=True, eq=False, repr=False)
class SearchKeys:
    """[search]: the domains of the decision variables (SearchSpace)."""

    save_interval: Reals | None = key(domain(Kind(_save_interval, "duration or auto")), label="save_interval",
                                      to="save_interval_s",
                                      help='1800s, a list, or "auto" (default: checkpoint.save_interval, else auto)')
    save_mode: Names | None = key(domain(choice(SAVE_MODES, "save mode {value!r} unknown (use sync or async)"),
                                         "given"), label="save_mode",
                                  help="sync and/or async (default: checkpoint.mode, else both)")
    offload: Names = key(domain(choice(OFFLOADS, "offload {value!r} unknown (use none or cpu)"), "given"), "none",
                         help="none and/or cpu")
    schedule: Names = key(domain(Kind(_schedule, "pipeline schedule"), "given"), "1f1b",
                          help="pipeline schedules (interleaved:3 = 3 virtual stages)")
    virtual_stages: Sizes | None = key(domain(integer(minimum=2)), help="expands interleaved in schedule")
    recompute: Names | None = key(domain(Kind(lambda v, _w, _c: memory.parse_recompute(v), "recompute"), "first"),
                                  help="none, full, or groups such as norm+mlp+attn (default: none and full; "
                                       "none with memory.activation_reserve)")
    zero_stage: Sizes = key(domain(integer(minimum=0)), [0, 1, 2, 3], help="ZeRO stages",
                            check=(lambda v: any(z > 3 for z in v), "search.zero_stage values must be 0, 1, 2 or 3"))
    accelerator: Names | None = key(Kind(_searched_accelerators, "list of hardware.accelerator names"),
                                    to="accelerators",
                                    help="accelerators searched (default: hardware.accelerator)")
    max_cards: int = key(integer(maximum=MAX_CARDS), 1024, help="most cards in a plan")
    tp: Sizes = key(INTS, [1, 2, 4, 8], help="tensor-parallel sizes")
    pp: Sizes = key(INTS, [1, 2, 4, 8], help="pipeline-parallel sizes")
    micro_batch: Sizes = key(INTS, [1, 2, 4, 8], help="micro-batch sizes (sequences)")
    nics_per_host: Sizes | None = key(INTS, help="NICs per host (default: each card's)")
    dp: Sizes | None = key(INTS, help="data-parallel sizes (default: every divisor of the batch)")
    global_batch: Sizes | None = key(INTS, help="batch choices, sequences (needs task.critical_batch)")
    cp: Sizes = key(INTS, [1], help="context-parallel sizes")
    sequence_parallel: Flags | None = key(domain(FLAG, "first"), help="[true, false]: a decision")
    memory_budget: float | None = key(size(allow_zero=False), help="memory a solve may plan to use, e.g. 8GiB "
                                      "(default: half the machine's; a larger space is refused)")


@dataclass(frozen=True, eq=False, repr=False)
class MoeSearchKeys:
    """[search] domains of mixture-of-experts models only (read with the model's routed experts)."""

    ep: Sizes | None = key(Kind(_ep, "list of whole numbers dividing the routed experts"),
                           help="expert-parallel sizes (default: every power of two dividing the routed experts)")
    expert_tp: Sizes = key(domain(Kind(_expert_tp, "whole number or tp")), "tp",
                           help='expert tensor-parallel sizes ("tp" = the same as tp)')
    capacity_factor: Reals = key(domain(Kind(_capacity, "number or none")), "none",
                                 help='capacity factors ("none" = dropless)')


def _variable_kind(v: Variable) -> Kind:
    """How a [search] list of the decision variable ``v``'s values is read, from its type: on / off for a
    bool, whole numbers >= 1, numbers, or one of its flag's closed set of choices for text."""
    if v.type is bool:
        return domain(FLAG, "first")
    if v.type is int:
        return INTS
    if v.type is float:
        return domain(number(allow_zero=True))
    choices = next((i.choices for i in PLAN_INPUTS if i.field == v.field and i.choices), ())
    if v.type is str and choices:
        return domain(choice(choices, f"{v.search_key} {{value!r}} unknown (use {' or '.join(choices)})"), "given")
    raise TypeError(f"[search] {v.search_key}: declare its key in SearchKeys (no kind follows from {v.type})")


def _variable_keys(*declared: type) -> type:
    """The [search] keys the decision variables' declaration gives (:data:`tpopt.models.variables.VARIABLES`):
    one per variable with a :class:`SearchSpace` domain that no key of ``declared`` sets, named by its
    ``[search]`` key, read by its type (:func:`_variable_kind`), its default the SearchSpace's (none when
    that is empty: the scenario's), its help its plan flag's. A new decision variable so needs no key here."""
    have = {spec(f).to or f.name for cls in declared for f in fields(cls)}
    domains: dict[str, Any] = {f.name: f.default for f in fields(SearchSpace)}
    keys = []
    for v in VARIABLES:
        if v.search is None or v.search in have:
            continue
        default = list(domains[v.search]) or None
        help_ = next((i.help for i in PLAN_INPUTS if i.field == v.field and i.help), f"{v.search_key} values")
        keys.append((v.search_key, Any, key(_variable_kind(v), default, help_, to=v.search)))
    return make_dataclass("VariableSearchKeys", keys, frozen=True, eq=False, repr=False)


VariableSearchKeys = _variable_keys(SearchKeys, MoeSearchKeys)
"""[search] domains of the decision variables declared in :mod:`tpopt.models.variables` alone (empty while
every variable's key is declared above)."""


@dataclass(frozen=True, eq=False, repr=False)
class MoeKeys:
    """[moe]: routing assumptions of a mixture-of-experts model (MoeOptions)."""

    imbalance: float = key(number(allow_zero=False), MoeOptions.imbalance,
                           help="a hot expert's dispatches over the mean")
    hot_experts: float = key(fraction(), MoeOptions.hot, to="hot", help="the share of experts that hot")
    max_drop: float = key(fraction(allow_zero=True), 0, help="largest share of dispatches a capacity may drop")
    a2a_overlap: str = key(choice(A2A_OVERLAPS), "auto",
                           help="all-to-all overlap: auto (DualPipe), none, all (default: the stack's)")
    dispatcher: str = key(choice(DISPATCHERS), "direct",
                          help="direct, per-host (a copy per destination domain), all-gather (default: the stack's)")
    node_limit: int = key(whole(0), 0,
                          help="domains a token's experts may span (0: the model's router groups, else any)")
    cuda_graphs: bool = key(FLAG, False,
                            help="the MoE blocks' static parts (attention, router, EP preprocess) run as CUDA graphs "
                                 "(default: the stack's recipe's, else not)")
    fused_grouped_mlp: bool = key(FLAG, False,
                                  help="the experts' FC1, activation and FC2 run as one fused grouped launch over "
                                       "every local expert, no per-expert host floor (default: the stack's recipe's, "
                                       "else not)")

    RULES: ClassVar = (
        ("hot_experts", lambda v: v["imbalance"] < 1,
         "moe.imbalance is the busiest expert's load over the mean, at least 1 (got {imbalance:g})"),
        ("hot_experts", lambda v: v["hot_experts"] * v["imbalance"] > 1 + 1e-12,
         "moe: {hot_experts:.0%} of the experts at {imbalance:g} x the mean would take more than every dispatch; "
         "lower imbalance or hot_experts"),
    )


@dataclass(frozen=True)
class MarketKeys:
    """[market]: the offers (catalogs/offers.toml, tpopt catalog offers) the plan chooses among."""

    offers: Any = key(raw('"all" or a list of offer names'),
                      help="offers to choose from (\"all\": every offer of the scenario's accelerators)")
    regions: Any = key(raw("list of regions"), help="keep the offers of these regions (region or provider/region)")
    as_of: Any = key(raw("YYYY-MM[-DD]"), help="the date offer prices are judged against (default: the catalog's)")
    site_power: Any = key(raw('power ("150MW", "500kW")'), help="the site's power cap (power.site); default: none")
    spot_shares: Any = key(raw("list of fractions"), help="also mix each on-demand/reserved offer with a spot offer of "
                           "the same card and site at these shares of the cards (default: none)")
    checkpoint_copies: Any = key(raw("integer >= 1"), help="checkpoints kept in the offer region's storage, billed "
                                 "per GB-month over the run (default 2: the latest and the one before it)")
    checkpoint_egress: Any = key(raw("integer >= 0"), help="checkpoints copied out of the offer's region over the "
                                 "run, billed per GB of egress (default 0: they stay in the region)")


#: table name -> the declarations of its keys; None: any key, read elsewhere ([sweep]: optimizer.sweep,
#: [rl]: tpopt.catalogs.rl)
TABLES: dict[str, tuple[type, ...] | None] = {
    "model": (ModelKeys,), "task": (TaskKeys, BatchKeys), "schedule": (ScheduleKeys,),
    "hardware": (HardwareKeys, CardKeys), "memory": (MemoryKeys,), "input": (InputKeys,),
    "checkpoint": (CheckpointKeys,), "stragglers": (StragglerKeys,), "risk": (RiskKeys,),
    "comm": (CommKeys,), "cost": (PriceKeys, BudgetKeys),
    "search": (SearchKeys, MoeSearchKeys, VariableSearchKeys), "moe": (MoeKeys,),
    "sweep": None, "rl": None, "scenario": (ScenarioKeys,), "market": (MarketKeys,),
}
REQUIRED_TABLES = ("model", "task", "schedule", "hardware")


def key_names(*classes: type) -> set[str]:
    return {f.name for cls in classes for f in fields(cls)}


#: table -> allowed keys (None: any key, read elsewhere)
KEYS: dict[str, set[str] | None] = {t: None if c is None else key_names(*c) for t, c in TABLES.items()}
#: table -> its required keys, in order
REQUIRED: dict[str, tuple[str, ...]] = {
    t: tuple(f.name for cls in TABLES[t] or () for f in fields(cls) if spec(f).required) for t in REQUIRED_TABLES}
CARD_KEYS = tuple(f.name for f in fields(CardKeys))
STAGE_TASK_KEYS = REQUIRED["task"]
STAGE_KEYS = key_names(StageKeys) | {f.name for f in fields(TaskKeys) if spec(f).per_stage}


def declared() -> list[tuple[str, str, Key]]:
    """(table, key, declaration) of every declared scenario key, table by table."""
    return [(t, f.name, spec(f)) for t, classes in TABLES.items() for cls in classes or () for f in fields(cls)]


def _shown(default: Any) -> str:
    """A default as a scenario file writes it."""
    if isinstance(default, bool):
        return "true" if default else "false"
    if isinstance(default, list):
        return "[" + ", ".join(_shown(x) for x in default) + "]"
    return str(default)


def key_table() -> str:
    """Every declared key as a Markdown table (table.key | value | default | meaning), from the declarations
    (the README's hand-written table groups keys and adds prose; this one is the complete list)."""
    rows = ["| table.key | value | default | meaning |", "|---|---|---|---|"]
    for table, name, k in declared():
        default = "required" if k.required else "-" if k.default is None else f"`{_shown(k.default)}`"
        rows.append(f"| `{table}.{name}` | {k.kind.unit.replace('|', chr(92) + '|')} | {default} | {k.help} |")
    return "\n".join(rows) + "\n"


def check_keys(raw: Mapping[str, Any]) -> None:
    """Unknown tables and keys, and missing required ones, as one-line errors."""
    if "sites" in raw or "wan" in raw:
        raise InputError("scenario: [[sites]] and [wan] plan one job over several datacenters: tpopt sites --scenario")
    for table, value in raw.items():
        if table.startswith("_"):
            continue
        if table not in KEYS:
            raise InputError(f"scenario: unknown table [{table}] (known: {', '.join(sorted(KEYS))})")
        if not isinstance(value, dict):
            raise InputError(f"scenario: [{table}] must be a table")
        allowed = KEYS[table]
        if allowed is not None:
            _check_table_keys(table, value, allowed)
    if "rl" in raw and "tokens" not in raw.get("task", {}):
        raise InputError("scenario: this is an RL scenario ([rl] table); plan it with tpopt rl")
    for table, keys in REQUIRED.items():
        if table not in raw:
            raise InputError(f"scenario: missing required table [{table}]")
        for k in keys:
            if table == "task" and "stages" in raw[table] and k in STAGE_TASK_KEYS:
                continue  # each stage gives (or inherits) its own
            if k not in raw[table]:
                raise InputError(f"scenario: missing required key {k!r} in [{table}]")
    if "name" not in raw["model"] and "config" not in raw["model"]:
        raise InputError("scenario: [model] needs name = \"...\" or config = \"path/to/config.json\"")


def _check_table_keys(table: str, value: Mapping[str, Any], allowed: set[str]) -> None:
    for k, v in value.items():
        if table == "hardware" and isinstance(v, dict):  # [hardware.<name>]: per-card keys
            bad = set(v) - set(CARD_KEYS)
            if bad:
                raise InputError(f"scenario: unknown key(s) {sorted(bad)} in [hardware.{k}]")
            continue
        if k not in allowed:
            raise InputError(f"scenario: unknown key {k!r} in [{table}] (known: {', '.join(sorted(allowed))})")


__all__ = ["Kind", "Key", "key", "read_table", "targets", "declared", "key_table", "check_keys", "as_list", "domain",
           "TABLES", "KEYS", "REQUIRED", "parse_critical_batch", "CARD_KEYS", "STAGE_KEYS", "VariableSearchKeys"]
