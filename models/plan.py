"""The four separate inputs (model, system, task, plan) and the search space, as plain data.

Following Calculon's split (what is trained / what it runs on / how it is run) plus the task:
``ModelArch`` (arch.py) is what is trained, ``System`` what it runs on, ``Task`` what must be done
and by when, ``Plan`` one decision vector. A ``Scenario`` bundles everything a solve needs; the
TOML reader lives in :mod:`tpopt.catalogs.scenario`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, cast

from tpopt.errors import InputError
from tpopt.models.arch import ModelArch
from tpopt.models.batch import tokens_at_batch
from tpopt.models.finish import Risk
from tpopt.models.hardware import Accelerator, StackProfile
from tpopt.models.market import MarketOptions
from tpopt.models.memory import StateRecipe, stored_recipe
from tpopt.models.pools import Pool
from tpopt.models.roofline import PerfParams

SAVE_MODES = ("sync", "async")
OFFLOADS = ("none", "cpu")
from tpopt.models.pipeline import SCHEDULES  # noqa: E402  (the schedules the event model simulates)


def split_schedule(name: str) -> tuple[str, int]:
    """("interleaved", v) from "interleaved:v" (plain "interleaved" is v = 2); (name, 1) otherwise.

    The number of virtual stages (model chunks per card) rides on the schedule value, so it is a
    solver decision without a new variable: ``[search] virtual_stages = [2, 3, 4]`` expands
    "interleaved" into "interleaved:2", "interleaved:3", "interleaved:4".
    """
    base, sep, v = str(name).partition(":")
    if base not in SCHEDULES:
        raise InputError(f"pipeline schedule {name!r} unknown (use one of: {', '.join(SCHEDULES)})")
    if base != "interleaved":
        if sep:
            raise InputError(f"only the interleaved schedule takes virtual stages (got {name!r})")
        return base, 1
    if not sep:
        return base, 2
    try:
        n = int(v)
    except ValueError:
        raise InputError(f"virtual stages must be a whole number >= 2 (got {name!r})") from None
    if n < 2:
        raise InputError(f"virtual stages must be a whole number >= 2 (got {name!r})")
    return base, n


def schedule_name(base: str, virtual_stages: int) -> str:
    """Inverse of :func:`split_schedule` ("interleaved" with v = 2 stays "interleaved")."""
    return base if base != "interleaved" or virtual_stages == 2 else f"{base}:{virtual_stages}"


@dataclass(frozen=True)
class Task:
    """What must be done: tokens at a sequence length and global batch, before a deadline.

    With a critical batch (B_noise, tokens per step) the batch is a plan choice: ``tokens`` at
    ``global_batch`` is one point of the curve E(B) = E_min (1 + B / B_noise) (chapter 10.1.1), and
    :meth:`at_batch` moves along it. ``ramp`` = (start, increment, tokens) is a linear batch ramp-up
    (sequences, sequences, tokens) whose steps count in the iterations.
    """

    tokens: float  # effective (non-padding) tokens this run processes at ``global_batch``
    seq_len: int
    global_batch: int  # sequences per optimizer step
    precision: str = "bf16-mixed"
    deadline_s: float = 30 * 86400.0
    reserved_s: float = 0.0  # start-up, evaluation and planned pauses inside the deadline
    critical_batch: float | None = None  # B_noise in tokens per step; None: tokens independent of the batch
    critical_batch_source: str = ""  # how B_noise was obtained ("given", a scaling fit), for reports
    ramp: tuple[float, float, float] | None = None  # (start sequences, increment sequences, ramp tokens)
    reference_tokens: float = 0.0  # the tokens the scenario states (0: ``tokens``)
    reference_batch: int = 0  # the batch at which it states them (0: ``global_batch``)
    stage: str = ""  # training stage name (staged scenarios)
    confidence: float | None = None  # chance constraint: P(finish <= deadline) >= confidence; None: nominal

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq_len

    @property
    def ref_tokens(self) -> float:
        return self.reference_tokens or self.tokens

    @property
    def ref_batch(self) -> int:
        return self.reference_batch or self.global_batch

    def at_batch(self, batch: int) -> Task:
        """The same task run at ``batch`` sequences per step: tokens E(B) from the critical-batch
        model (unchanged without a critical batch), the reference kept."""
        tokens = float(tokens_at_batch(self.ref_tokens, self.ref_batch * self.seq_len, self.critical_batch,
                                       int(batch) * self.seq_len))
        return replace(self, tokens=tokens, global_batch=int(batch), reference_tokens=self.ref_tokens,
                       reference_batch=self.ref_batch)


@dataclass(frozen=True)
class System:
    """What a plan runs on: one accelerator type plus the run's efficiency and prices.

    Two step-time models: with ``perf`` None the chapter's flat model (compute = FLOPs / (peak x
    efficiency), efficiency = MFU of the matrix work); with ``perf`` set the per-operation model
    (:mod:`tpopt.models.steptime`), where ``efficiency`` is a scale on the modelled throughput
    (1.0 = as the performance catalog predicts).
    """

    acc: Accelerator
    efficiency: float  # flat: MFU of the matrix work, e.g. 0.40; per-operation: throughput scale
    price_card_hour: float | None  # USD; None -> costs are reported in card-hours
    nic_price_hour: float = 0.0
    perf: PerfParams | None = None  # accelerator performance parameters (per-operation model)
    price_source: str = field(default="", compare=False, repr=False)  # where price_card_hour comes from

    @property
    def name(self) -> str:
        return self.acc.name

    @property
    def per_op(self) -> bool:
        """True when the per-operation step-time model applies (no flat efficiency was stated)."""
        return self.perf is not None


@dataclass(frozen=True)
class MemoryOptions:
    """How activations and temporary buffers are accounted.

    ``activation_reserve`` (bytes) reproduces the chapter's accounting: a fixed budget for
    activations, gathered module parameters and workspace, whatever the recompute choice (which
    then only changes nothing). Without it, activations are modelled per recompute group.
    """

    activation_reserve: float | None = None
    flash_attention: bool = True
    sequence_parallel: bool = True  # under TP, norms / dropout / residuals (and their saved inputs) split by t
    dropout: bool = False  # dropout layers: 1-byte masks saved, extra memory-bound passes
    activation_bytes: float = 2.0  # BF16 activations
    loss_chunks: int = 1  # chunked cross-entropy divides the FP32 logits buffer
    prefetch: int = 1  # ZeRO-3 units gathered ahead of use
    fp8_param_gather: bool | None = None  # FP8-family weights kept (and gathered) in FP8; None: the stack's default
    loss: str | None = None  # the cross-entropy: fused, te, eager or compiled (memory.LOSS_KINDS); None: the stack's
    zero_group: int = 0  # data-parallel ranks one ZeRO shard spans (hybrid sharding); 0: all of them
    activation_offload_layers: int = 0  # layers whose stored activations go to host memory (pp = 1 only)


@dataclass(frozen=True)
class InputPipeline:
    """CPU data preparation: workers x sequences per worker-second vs demand; unhidden wait."""

    workers: float = 0.0  # job-wide worker count (0: no input constraint)
    per_worker_rate: float = 0.0  # sequences per second per worker
    wait_s: float = 0.0  # average input wait per step that prefetch does not hide
    workers_per_host: float = 0.0  # if > 0, workers scale with hosts (overrides ``workers``)


@dataclass(frozen=True)
class Reliability:
    """Checkpoint, failure and straggler inputs (chapter 10.4)."""

    bytes_per_param: float = 14.0  # weights 2 + master 4 + two moments 8
    write_bandwidth: float = 7e9  # aggregate storage write, bytes/s
    storage_tier: str = field(default="", compare=False, repr=False)  # the catalog tier named ([checkpoint] storage),
    # or the tier of the same bandwidth where the scenario states a bandwidth or takes the default ("": none)
    storage_stated_by: str = field(default="default", compare=False, repr=False)  # "storage" (a tier named),
    # "write_bandwidth" (a bandwidth stated) or "default" (tpopt.optimizer.footing.storage_words prints it)
    restore_s: float = 120.0
    card_mtbf_s: float | None = 337 * 86400.0  # None: no hardware failures
    event_interval_s: float | None = None  # job-wide rollbacks (loss spikes, planned stops)
    snapshot_copy_s: float = 0.5  # async save: foreground copy to a host buffer
    failure_model: str = "first-order"  # or "poisson"
    straggler_sigma: float = 0.0  # per-card compute jitter, fraction of the mean


@dataclass(frozen=True)
class Plan:
    """One decision vector. ``cards = tp x cp x pp x dp``; ``dp x micro_batch x grad_accum = batch``."""

    accelerator: str
    cards: int
    zero_stage: int = 3
    tp: int = 1
    pp: int = 1
    dp: int = 0  # 0: derived as cards / (tp x pp)
    micro_batch: int = 1
    grad_accum: int = 0  # 0: derived as batch / (dp x micro_batch)
    recompute: str = "none"
    offload: str = "none"
    schedule: str = "1f1b"  # pipeline schedule, meaningful when pp > 1 ("interleaved:3": 3 virtual stages)
    save_interval_s: float = 1800.0
    save_mode: str = "sync"
    nics_per_host: int = 0  # 0: the accelerator's default
    sequence_parallel: bool | None = None  # None: the scenario's memory.sequence_parallel
    flash_attention: bool | None = None  # None: the scenario's memory.flash_attention
    first_stage_layers: int = 0  # 0: automatic split (steptime.stage_layers)
    last_stage_layers: int = 0
    ep: int = 1  # expert parallelism (MoE models): routed experts split over ep cards of the tp x dp group
    expert_tp: int = 0  # expert tensor parallelism; 0: the same as tp
    capacity_factor: float = 0.0  # rows per expert = c x the mean; 0: dropless (no capacity)
    global_batch: int = 0  # sequences per step; 0: the task's (a choice when the scenario gives a critical batch)
    cp: int = 1  # context-parallel size: each sequence split over cp cards (models/context.py)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SearchSpace:
    """Domains of the decision variables (the scenario's [search] table restricts them)."""

    accelerators: tuple[str, ...] = ()
    zero_stage: tuple[int, ...] = (0, 1, 2, 3)
    tp: tuple[int, ...] = (1, 2, 4, 8)
    pp: tuple[int, ...] = (1, 2, 4, 8)
    micro_batch: tuple[int, ...] = (1, 2, 4, 8)
    recompute: tuple[str, ...] = ("none", "full")
    offload: tuple[str, ...] = ("none",)
    schedule: tuple[str, ...] = ("1f1b",)
    save_interval_s: tuple[float, ...] = (1800.0,)
    save_mode: tuple[str, ...] = ("sync",)
    nics_per_host: tuple[int, ...] = ()  # empty: each accelerator's default only
    dp: tuple[int, ...] = ()  # empty: every divisor of the global batch
    max_cards: int = 1024
    ep: tuple[int, ...] = (1,)  # expert parallelism (MoE models; the scenario reader's default: see MoeOptions)
    expert_tp: tuple[int, ...] = (0,)  # expert tensor parallelism, 0 = the same as tp
    capacity_factor: tuple[float, ...] = (0.0,)  # 0.0 = dropless
    global_batch: tuple[int, ...] = ()  # batch choices (sequences); empty: the task's batch only
    cp: tuple[int, ...] = (1,)  # context-parallel sizes
    sequence_parallel: tuple[bool, ...] = ()  # on / off choices; empty: the scenario's memory.sequence_parallel
    # bytes a solve may plan to use (None: a share of the machine's memory); it refuses a space, never moves a
    # plan, so it is left out of the repr (sweep fingerprints) and comparisons
    memory_budget: float | None = field(default=None, repr=False, compare=False)
    # search.cp sizes the scenario reader dropped because they cannot split the sequence into equal pieces (cp is
    # then the rest); follows from search.cp, so left out of the repr and comparisons too; the footing states it
    cp_dropped: tuple[int, ...] = field(default=(), repr=False, compare=False)


@dataclass(frozen=True)
class MoeOptions:
    """Routing assumptions of a mixture-of-experts model (the [moe] table; see :mod:`tpopt.models.moe`).

    ``imbalance``: dispatches of a hot expert over the mean; ``hot``: the share of experts that hot (the
    chapter's 10.3.4 example: half the experts at 1.5 x); ``max_drop``: the largest share of dispatches
    a capacity factor may drop (moe.capacity_drops); ``a2a_overlap``: auto (under DualPipe schedules),
    none or all; ``dispatcher``: direct (one row per dispatch on the wire) or per-host (one copy per
    destination host across the NICs, DeepSeek-V3), ``node_limit``: hosts per token (0: no limit);
    ``cuda_graphs``: the recipe captures the blocks' static parts in CUDA graphs (Megatron-Core's
    cuda_graph_scope attn / moe_router / moe_preprocess); ``fused_grouped_mlp``: the experts' FC1, activation and
    FC2 run as one fused grouped launch over every local expert (Transformer Engine's CuTe DSL grouped MLP), so no
    grouped expert GEMM pays the stack's per-expert host floor (steptime.expert_dispatch).
    """

    imbalance: float = 1.25
    hot: float = 0.5
    max_drop: float = 0.0
    a2a_overlap: str = "auto"
    dispatcher: str = "direct"
    node_limit: int = 0
    #: the blocks' static parts (attention, router, EP preprocess) replayed as CUDA graphs: no host launch time
    #: (moe.host_launch_exposed)
    cuda_graphs: bool = False
    #: the experts' grouped MLP as one fused launch (no per-expert host floor: steptime.expert_dispatch)
    fused_grouped_mlp: bool = False
    #: the framework recipe that supplied settings the scenario left unstated (catalogs/recipes.toml), as the
    #: report states it; empty: none applied
    recipe: str = field(default="", compare=False, repr=False)
    #: (card, [moe] keys) the recipe turns on that are left to the stack's defaults on that card because its maker
    #: does not run their software (catalogs.recipes.Recipe.moe_settings_on: cuda_graphs is decided card by card,
    #: :meth:`cuda_graphs_on`; the others are already off on every card); empty: none
    card_settings_off: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: (card, why) for each of card_settings_off, as the report states it
    vendor_notes: tuple[tuple[str, str], ...] = field(default=(), compare=False, repr=False)
    #: the cards on which another dispatcher runs: (card, dispatcher) where the stack's or recipe's does not run
    #: on the card's maker (catalogs.stacks.dispatcher_on_card); the others run ``dispatcher``
    card_dispatchers: tuple[tuple[str, str], ...] = ()
    #: (card, why) for each of card_dispatchers, as the report states it
    dispatcher_notes: tuple[tuple[str, str], ...] = field(default=(), compare=False, repr=False)

    def dispatcher_on(self, accelerator: str) -> str:
        """The dispatcher that runs on ``accelerator``: :attr:`dispatcher`, or the card's own where its maker
        does not run that one (:attr:`card_dispatchers`)."""
        return dict(self.card_dispatchers).get(accelerator, self.dispatcher)

    def cuda_graphs_on(self, accelerator: str) -> bool:
        """Whether the MoE blocks' static parts replay as CUDA graphs on ``accelerator``: :attr:`cuda_graphs`, unless
        the card's maker does not run the recipe's graphs (:attr:`card_settings_off`)."""
        return self.cuda_graphs and "cuda_graphs" not in dict(self.card_settings_off).get(accelerator, ())

    def vendor_note(self, accelerator: str) -> str:
        """Which recipe settings ``accelerator`` is costed without and why ("" where none)."""
        return dict(self.vendor_notes).get(accelerator, "")

    def dispatcher_note(self, accelerator: str) -> str:
        """Why ``accelerator`` runs another dispatcher than :attr:`dispatcher` ("" where it does not)."""
        return dict(self.dispatcher_notes).get(accelerator, "")


@dataclass(frozen=True)
class CostOptions:
    max_cost: float | None = None  # optional budget cap (USD, or card-hours without prices)


@dataclass(frozen=True)
class Stage:
    """One training stage of a staged scenario (e.g. 15T tokens at 8K, then 800B at 128K): its own
    task (tokens, sequence length, batch) and search domains; model, hardware and assumptions are
    the scenario's."""

    name: str
    task: Task
    search: SearchSpace


@dataclass(frozen=True)
class Scenario:
    model: ModelArch
    task: Task
    systems: dict[str, System]  # accelerator name -> System (candidates, in order)
    memory: MemoryOptions = field(default_factory=MemoryOptions)
    input: InputPipeline = field(default_factory=InputPipeline)
    reliability: Reliability = field(default_factory=Reliability)
    search: SearchSpace = field(default_factory=SearchSpace)
    cost: CostOptions = field(default_factory=CostOptions)
    moe: MoeOptions = field(default_factory=MoeOptions)
    overlap: bool = True  # prefetch / immediate reduction hide communication behind compute
    name: str = ""
    # tensor-parallel collectives that may hide behind GEMMs (per-operation model): (chunked, async) shares,
    # chunked = GEMMs split to overlap their own collectives (Transformer Engine), async = the column-parallel
    # backward collectives beside the other gradient GEMM (Megatron-LM's asynchronous TP all-reduce)
    tp_overlap: tuple[float, float] = (0.0, 0.0)
    dp_overlap: float = 1.0  # share of data-parallel traffic that may hide behind compute
    stage_layers: tuple[int, int] = (0, 0)  # (first, last) stage layer counts, 0 = automatic
    stages: tuple[Stage, ...] = ()  # training stages (Stage), in order; empty: one stage, the scenario's task
    cp_method: str = "ring"  # context parallelism: "ring" (KV exchange beside blockwise attention) or "all-to-all"
    cp_split: str = "zigzag"  # causal load balance of the sequence pieces: "zigzag" or "contiguous"
    risk: Risk = field(default_factory=Risk)  # inputs of the finish-time distribution (models/finish.py)
    stack: StackProfile = field(default_factory=StackProfile)  # the software stack ([hardware] stack)
    market: MarketOptions = field(default_factory=MarketOptions)  # offers to choose from (none: the [cost] prices)
    # accelerator pools of a mixed plan ([[hardware.pools]], models/pools.py); empty: one homogeneous cluster.
    # Left out of the repr so a homogeneous scenario's fingerprint is what it was.
    pools: tuple[Pool, ...] = field(default=(), repr=False)

    def overlap_fractions(self) -> tuple[tuple[float, float], float]:
        """((chunked, async) tensor-parallel, data-parallel) overlap; ``overlap = false`` turns all off."""
        tp = cast(tuple[float, float], tuple(self.tp_overlap))  # a copy of the (chunked, async) pair
        return (tp, self.dp_overlap) if self.overlap else ((0.0, 0.0), 0.0)

    def fp8_params(self) -> bool:
        """Whether an FP8 / MXFP8 / NVFP4 recipe keeps its weights in that format: ``[memory] fp8_param_gather``,
        else the stack's ``fp8_param_gather`` (Megatron-Core: false, BF16 weights)."""
        own = self.memory.fp8_param_gather
        return self.stack.fp8_param_gather if own is None else own

    def loss_kind(self) -> str:
        """How the cross-entropy runs (memory.LOSS_KINDS): ``[memory] loss``, else the stack's ``loss``."""
        own = self.memory.loss
        return self.stack.loss if own is None else own

    def state_recipe(self) -> StateRecipe:
        """Bytes per parameter of each persistent state as the stack stores them (memory.stored_recipe)."""
        return stored_recipe(self.task.precision, self.fp8_params())

    def system(self, accelerator: str) -> System:
        try:
            return self.systems[accelerator]
        except KeyError:
            raise InputError(
                f"accelerator {accelerator!r} is not among the scenario's hardware ({', '.join(self.systems)})"
            ) from None
