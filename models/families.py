"""The registry of constraint families: one declaration per family, every list of families derived.

A family is a named inequality ``value <= limit`` (SI units inside) that the evaluator checks for every
plan, the solvers encode, the reports print and explain relaxes. Each is declared once in
:data:`REGISTRY`, in declaration order; every ordered view below is a subsequence of it:

- pre-training report order (:data:`PRETRAINING`) and RL report order (:data:`RL`) are the families of
  each scope in declaration order;
- the families a solver encodes (:data:`SOLVED`, :data:`RL_SOLVED`) leave out the reported forms
  (``form_of``: ``step.budget`` is the per-step form of ``deadline.finish``, ``rl.stage_balance`` its
  per-stage form);
- explain's deletion order (:data:`DELETION_ORDER`) is the structural rules, then ``deletion_rank``.

The memory family (``memory.per_card``) is the per-rank peak. For each pipeline-stage class k the layout
has (tpopt.models.terms.stage_classes: first, middle and last in the per-operation model, the middle
class only where pp > 2; the flat model's balanced stages are one class), each term the heaviest stage
of its class::

    states_k + weight copies_k + activations_k + temporary_k <= usable memory      for every class k

and its value is the largest class sum (tpopt.models.evaluate.memory_by_class); every backend encodes one
inequality per class (tpopt.optimizer.space.Space.memory_classes), and reports name the class that peaks.

Each family also says where its value and its limit come from, so that the consumers read the
declaration instead of knowing the family by name:

- ``table``: the one table of the space (tpopt.optimizer.space.Space) that decides it exactly when the
  tables are built (True where it holds: the structural rules and :data:`EXACT`). The variables its rule
  spans are that table's (``Space.table_vars``), declared once where the space specifies the table; the
  layout evaluator glues a table over the save variables (interval, mode) with the save choice and any
  other on the layout's grid, whatever the family;
- ``terms``: the term tables whose sum is its value (the memory family per stage class, the step's busy
  time), which every backend sums;
- ``limit``: its limit where it is one number of the scenario or the catalog (:func:`limit`: the deadline,
  the card cap, the budget, the usable and host memory of an accelerator, the drop rate); None where the
  limit is a term of the plan (the save interval, the input supply) or 0 (the rules).

Code that must name one family uses its constant (``BUDGET``, ``DEADLINE``, ...) or an attribute of its
:class:`Family`, never the quoted name; code that reads a family's limit reads :func:`limit`. Adding a
family decided by one table: declare its constant and its :class:`Family` here (with its ``table``), its
term (tpopt.models.terms), its table (tpopt.optimizer.space.Space) and its (value, limit) in the evaluator
(tpopt.models.evaluate); the solvers, the layout evaluator, the decomposition and the reports read the
declaration.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

from tpopt.models.plan import Scenario
from tpopt.models.units import DAY, GIB

# kinds: what a family bounds
KIND_RULE = "rule"  # a divisibility or layout rule: met or not, never "binding"
KIND_MEMORY = "memory"  # bytes per card or per host against a capacity
KIND_QUALITY = "quality"  # a model-quality limit (dropped tokens, policy lag)
KIND_TIME = "time"  # a duration against a duration (per step, per save interval)
KIND_INPUT = "input"  # the input pipeline's rate against the demand
KIND_DEADLINE = "deadline"  # the finish time against the deadline
KIND_SIZE = "size"  # the card count against its cap
KIND_BUDGET = "budget"  # the cost against the budget cap
KIND_POWER = "power"  # a site's electrical power against its cap
KINDS = (KIND_RULE, KIND_MEMORY, KIND_QUALITY, KIND_TIME, KIND_INPUT, KIND_DEADLINE, KIND_SIZE, KIND_BUDGET,
         KIND_POWER)

# scopes: which solve reports a family
PRETRAINING = "pre-training"
RL = "rl"
MARKET = "market"  # the market solve (optimizer/market.py): checks on the offer a plan rents
SCOPES = (PRETRAINING, RL, MARKET)

# the names, for code that must name one family
MEMORY_PER_CARD = "memory.per_card"
MEMORY_HOST = "memory.host"
BATCH_DIVISIBILITY = "batch.divisibility"
WHOLE_HOSTS = "layout.whole_hosts"
TP_WITHIN_HOST = "layout.tp_within_host"
HEADS_DIVISIBLE = "layout.heads_divisible"
PP_DIVIDES_LAYERS = "layout.pp_divides_layers"
SCHEDULE_SHAPE = "layout.schedule_shape"
EP_DIVIDES_EXPERTS = "layout.ep_divides_experts"
EP_GROUP = "layout.ep_group"
CAPACITY_DROPS = "moe.capacity_drops"
STEP_BUDGET = "step.budget"
INPUT_THROUGHPUT = "input.throughput"
RL_LEARNER_LAYOUT = "rl.learner_layout"
RL_LEARNER_MEMORY = "rl.learner_memory"
RL_KV_CAPACITY = "rl.kv_capacity"
RL_ROLLOUT_MEMORY = "rl.rollout_memory"
RL_HANDOFF_MEMORY = "rl.handoff_memory"
RL_STALENESS = "rl.staleness"
RL_STAGE_BALANCE = "rl.stage_balance"
CHECKPOINT = "checkpoint.backlog"
DEADLINE = "deadline.finish"
CARDS = "cards.max"
BUDGET = "budget.cost"
MARKET_AVAILABLE = "market.available"
POWER_SITE = "power.site"

Limit: TypeAlias = Callable[[Scenario, str | None], float]
"""A family's limit from the scenario (and, for a per-card limit, the accelerator's name): SI units."""


def ok_table(name: str) -> str:
    """The name of the table that decides family ``name`` exactly: ``"ok.<name>"`` (True where it holds)."""
    return "ok." + name


def _accelerator(sc: Scenario, acc: str | None) -> str:
    """The accelerator a per-card limit is read for (ValueError when none is named)."""
    if acc is None:
        raise ValueError("a per-card limit needs the accelerator's name")
    return acc


def _usable_memory(sc: Scenario, acc: str | None) -> float:
    """memory.per_card's limit: the accelerator's usable memory per card (bytes)."""
    return float(sc.system(_accelerator(sc, acc)).acc.memory_usable)


def _host_memory(sc: Scenario, acc: str | None) -> float:
    """memory.host's limit: the host memory of the accelerator's hosts (bytes; inf where none is given)."""
    host = sc.system(_accelerator(sc, acc)).acc.host_memory
    return float(host) if host > 0 else math.inf


def _max_drop(sc: Scenario, acc: str | None = None) -> float:
    """moe.capacity_drops's limit: the largest share of dispatches a capacity factor may drop."""
    return float(sc.moe.max_drop)


def _deadline(sc: Scenario, acc: str | None = None) -> float:
    """deadline.finish's limit: the task's deadline (s, from the start of the job)."""
    return float(sc.task.deadline_s)


def _max_cards(sc: Scenario, acc: str | None = None) -> float:
    """cards.max's limit: the cap on the card count."""
    return float(sc.search.max_cards)


def _budget(sc: Scenario, acc: str | None = None) -> float:
    """budget.cost's limit: the budget cap (USD, or card-hours without prices; inf where none is set)."""
    return math.inf if sc.cost.max_cost is None else float(sc.cost.max_cost)


@dataclass(frozen=True)
class Family:
    """One constraint family ``value <= limit``: how it prints, where it applies, how explain moves it."""

    name: str
    kind: str  # one of KINDS
    unit: str  # the unit it prints in
    scale: float  # divide SI values by this to print in ``unit``
    doc: str  # the one-line statement the reports print (pre-training wording)
    structural: bool = False  # divisibility/layout rules: satisfied or not, never "binding"
    moe_only: bool = False  # shown for MoE models only
    scopes: tuple[str, ...] = (PRETRAINING,)  # the solves that report it
    rl_doc: str | None = None  # the RL statement where it differs from ``doc``
    form_of: str | None = None  # reported only, as a form of that family (which the solvers encode)
    moved_by: tuple[str, ...] = ()  # explain's inputs (optimizer.explain.PARAMS) that move its value or limit
    deletion_rank: int | None = None  # explain's deletion filter drops relaxable families in this order
    evidence: tuple[str, str | None, str] | None = None  # explain: (metric, objective, words) of the closest plan
    stage_shared: bool = False  # a limit the stages of an outer decomposition share (checked on the sums)
    swept: bool = False  # its limit is a sweep dimension (deadline, cards, budget)
    exact_rank: int | None = None  # decided exactly by one "ok." table when the tables are built (order encoded)
    model_only: bool = False  # depends on the model and the batch only, whatever the hardware
    hub_rule: bool = False  # decided by the hub layout of the decomposition (tp, cp, pp, dp, micro-batch)
    trainer_rule: bool = False  # a dense trainer's layout rule: what an RL learner or a measured run must meet
    shown_unbounded: bool = True  # a plan's checks list it when its limit is infinite (no cap set)
    shown_at_zero: bool = True  # a plan's checks list it when its value is 0 (nothing to hold)
    chance_doc: str | None = None  # its chance form under a confidence (value: the finish's q-quantile)
    table: str | None = None  # the one table that decides it exactly when the tables are built (ok_table)
    terms: tuple[str, ...] = ()  # the term tables whose sum is its value (memory: per stage class)
    limit: Limit | None = None  # its limit, one number of the scenario or the catalog (None: a term, or 0)

    def statement(self, scope: str = PRETRAINING, chance: bool = False) -> str:
        """The one-line statement printed for the family in ``scope`` (``chance``: under a confidence)."""
        if chance and self.chance_doc is not None:
            return self.chance_doc
        return self.rl_doc if scope == RL and self.rl_doc is not None else self.doc

    @property
    def relaxable(self) -> bool:
        """Not structural: a limit that can bind, and that explain can relax."""
        return not self.structural

    @property
    def encoded(self) -> bool:
        """Encoded by the solvers (a reported form such as step.budget is not encoded twice)."""
        return self.form_of is None

    def limit_of(self, sc: Scenario, acc: str | None = None) -> float:
        """The family's limit in ``sc`` (``acc``: the accelerator, for a per-card limit); ValueError when the
        family's limit is not one number of the scenario or the catalog (``limit`` is None)."""
        if self.limit is None:
            raise ValueError(f"{self.name}: its limit is a term of the plan, not a number of the scenario")
        return self.limit(sc, acc)


_BOTH = (PRETRAINING, RL)

# Every family, in declaration order (pre-training and RL report orders are its subsequences).
REGISTRY = (
    Family(MEMORY_PER_CARD, KIND_MEMORY, "GiB", GIB, "peak per-card memory <= usable memory",
           moved_by=("usable_memory",), deletion_rank=6,
           evidence=("memory_per_card", None, "the plan with the least memory per card"),
           terms=("mem.states", "mem.copies", "mem.activations", "mem.temporary"), limit=_usable_memory),
    Family(MEMORY_HOST, KIND_MEMORY, "GiB", GIB, "offloaded optimizer state per host <= host memory",
           deletion_rank=3, exact_rank=2, shown_at_zero=False,
           table=ok_table(MEMORY_HOST), limit=_host_memory),
    Family(BATCH_DIVISIBILITY, KIND_RULE, "sequences", 1.0,
           "batch (and every ramp-up batch) mod (dp x micro_batch) = 0", True,
           model_only=True, hub_rule=True, trainer_rule=True, moved_by=("global_batch",),
           table=ok_table(BATCH_DIVISIBILITY)),
    Family(WHOLE_HOSTS, KIND_RULE, "cards", 1.0, "cards mod cards_per_host = 0", True,
           hub_rule=True, trainer_rule=True,
           table=ok_table(WHOLE_HOSTS)),
    Family(TP_WITHIN_HOST, KIND_RULE, "cards", 1.0,
           "tp divides cards_per_host; a TP x CP group fills whole hosts or divides one", True,
           hub_rule=True, trainer_rule=True,
           table=ok_table(TP_WITHIN_HOST)),
    Family(HEADS_DIVISIBLE, KIND_RULE, "heads", 1.0,
           "tp divides query and KV heads (all-to-all context parallelism: tp x cp divides the heads)", True,
           model_only=True, hub_rule=True, trainer_rule=True,
           table=ok_table(HEADS_DIVISIBLE)),
    Family(PP_DIVIDES_LAYERS, KIND_RULE, "layers", 1.0, "pp divides the layer count", True,
           model_only=True, hub_rule=True, trainer_rule=True,
           table=ok_table(PP_DIVIDES_LAYERS)),
    Family(SCHEDULE_SHAPE, KIND_RULE, "", 1.0, "the pipeline schedule supports pp and the micro-batch count", True,
           model_only=True, trainer_rule=True, moved_by=("global_batch",),
           table=ok_table(SCHEDULE_SHAPE)),
    Family(EP_DIVIDES_EXPERTS, KIND_RULE, "experts", 1.0, "ep divides the routed experts", True, moe_only=True,
           table=ok_table(EP_DIVIDES_EXPERTS)),
    Family(EP_GROUP, KIND_RULE, "cards", 1.0,
           "ep x expert-tp divides tp x dp (an explicit expert-tp divides the host and the expert width)", True,
           moe_only=True,
           table=ok_table(EP_GROUP)),
    Family(CAPACITY_DROPS, KIND_QUALITY, "%", 0.01, "dispatches a capacity factor drops <= the maximum drop rate",
           moe_only=True, moved_by=("max_drop",), exact_rank=3,
           table=ok_table(CAPACITY_DROPS), limit=_max_drop),
    Family(STEP_BUDGET, KIND_TIME, "s", 1.0, "t_step <= (T_deadline - T_reserved) / (iterations (1 + L))",
           form_of=DEADLINE,
           terms=("time.compute", "time.exposed_dp", "time.tp_comm", "time.offload", "time.ep_comm")),
    Family(INPUT_THROUGHPUT, KIND_INPUT, "seq/s", 1.0, "input demand <= workers x rate",
           moved_by=("efficiency", "nic_bandwidth", "input_rate", "global_batch", "nics_per_host"), deletion_rank=4,
           shown_unbounded=False),
    Family(RL_LEARNER_LAYOUT, KIND_RULE, "", 1.0,
           "a learner layout exists at the card count (batch, host and head rules)", True, scopes=(RL,)),
    Family(RL_LEARNER_MEMORY, KIND_MEMORY, "GiB", GIB, "learner peak memory per card <= usable memory", scopes=(RL,),
           limit=_usable_memory),
    Family(RL_KV_CAPACITY, KIND_MEMORY, "GiB", GIB,
           "KV of the rollout batch (and of one longest sequence) <= KV pool", scopes=(RL,)),
    Family(RL_ROLLOUT_MEMORY, KIND_MEMORY, "GiB", GIB,
           "rollout card: weights + KV pool + common, and the sync buffer, <= usable", scopes=(RL,),
           limit=_usable_memory),
    Family(RL_HANDOFF_MEMORY, KIND_MEMORY, "GiB", GIB,
           "shared cards: staged hand-off peak (learner peak + received weights + common) <= usable", scopes=(RL,),
           limit=_usable_memory),
    Family(RL_STALENESS, KIND_QUALITY, "steps", 1.0, "policy lag <= staleness allowed", scopes=(RL,)),
    Family(RL_STAGE_BALANCE, KIND_TIME, "samples/s", 1.0,
           "useful samples/s the deadline needs <= min(r_learn, q min(r_gen, r_verify)) (per-stage form of "
           "deadline.finish)", scopes=(RL,), form_of=DEADLINE),
    Family(CHECKPOINT, KIND_TIME, "s", 1.0, "checkpoint write time <= save interval", scopes=_BOTH,
           moved_by=("deadline", "write_bandwidth"), deletion_rank=2, exact_rank=1,
           table=ok_table(CHECKPOINT)),
    Family(DEADLINE, KIND_DEADLINE, "d", DAY, "T_finish <= deadline", scopes=_BOTH,
           moved_by=("deadline", "tokens", "efficiency", "nic_bandwidth", "reserved", "write_bandwidth",
                     "global_batch", "nics_per_host"),
           deletion_rank=5,
           evidence=("finish_s", "time", "the fastest plan"), stage_shared=True, swept=True,
           chance_doc="P(T_finish <= deadline) >= confidence: the q-quantile of T_finish <= deadline "
                      "(encoded: step <= the largest step meeting it)",
           limit=_deadline),
    Family(CARDS, KIND_SIZE, "cards", 1.0, "cards <= max_cards", scopes=_BOTH,
           rl_doc="learner + rollout cards <= max_cards", moved_by=("max_cards",), deletion_rank=7,
           evidence=("cards", None, "the plan with the fewest cards"), swept=True,
           limit=_max_cards),
    Family(BUDGET, KIND_BUDGET, "USD", 1.0, "cost <= budget cap", scopes=_BOTH,
           moved_by=("tokens", "efficiency", "nic_bandwidth", "reserved", "max_cost", "card_price", "write_bandwidth",
                     "global_batch", "nics_per_host"),
           deletion_rank=1,
           stage_shared=True, swept=True, shown_unbounded=False,
           limit=_budget),
    Family(MARKET_AVAILABLE, KIND_SIZE, "cards", 1.0, "cards <= cards available under the offer", scopes=(MARKET,),
           form_of=CARDS),
    Family(POWER_SITE, KIND_POWER, "MW", 1e6, "PUE x (cards x card power + hosts x host overhead) <= site power cap",
           scopes=(MARKET,), form_of=CARDS),
)
EVERY_FAMILY_INPUTS = ("accelerator",)
"""Explain's inputs that move every family (a different accelerator changes every table)."""

BY_NAME = {f.name: f for f in REGISTRY}


def family(name: str) -> Family:
    """The declaration of the family called ``name`` (KeyError if none)."""
    return BY_NAME[name]


def _names(scope: str, keep: Callable[[Family], bool] = lambda f: True) -> tuple[str, ...]:
    """Names of the families of ``scope`` that ``keep`` accepts, in declaration order."""
    return tuple(f.name for f in REGISTRY if scope in f.scopes and keep(f))


# pre-training: every family the evaluator returns, in report order, and the views the solvers read
PRETRAINING_FAMILIES = tuple(f for f in REGISTRY if PRETRAINING in f.scopes)
PRETRAINING_NAMES = _names(PRETRAINING)
MOE_FAMILIES = _names(PRETRAINING, lambda f: f.moe_only)
SOLVED = _names(PRETRAINING, lambda f: f.encoded)  # the families the solvers encode
STRUCTURAL = _names(PRETRAINING, lambda f: f.structural)
RELAXABLE = tuple(n for n in SOLVED if BY_NAME[n].relaxable)
EXACT = tuple(name for _, name in sorted(((f.exact_rank, f.name) for f in PRETRAINING_FAMILIES
                                          if f.exact_rank is not None), key=lambda ranked: ranked[0]))
DELETION_ORDER = STRUCTURAL + tuple(name for _, name in sorted(((f.deletion_rank, f.name) for f in PRETRAINING_FAMILIES
                                                                if f.deletion_rank is not None),
                                                               key=lambda ranked: ranked[0]))
EVIDENCE = {f.name: f.evidence for f in PRETRAINING_FAMILIES if f.evidence is not None}
MODEL_FAMILIES = _names(PRETRAINING, lambda f: f.model_only)
HUB_RULES = _names(PRETRAINING, lambda f: f.hub_rule)
TRAINER_RULES = _names(PRETRAINING, lambda f: f.trainer_rule)
TRAINER_MEMORY = _names(PRETRAINING, lambda f: f.kind == KIND_MEMORY)
CHOICE_FAMILIES = _names(PRETRAINING, lambda f: f.trainer_rule or f.kind == KIND_MEMORY)
STAGE_SHARED = _names(PRETRAINING, lambda f: f.stage_shared)
SWEPT = _names(PRETRAINING, lambda f: f.swept)
TABLED = _names(PRETRAINING, lambda f: f.encoded and f.table is not None)  # solved, each decided by one table

# RL: every family the RL evaluator returns, in report order, and the ones its search encodes
RL_FAMILIES = tuple(f for f in REGISTRY if RL in f.scopes)
RL_NAMES = _names(RL)
RL_SOLVED = _names(RL, lambda f: f.encoded)
RL_REPORTED = RL_SOLVED + _names(RL, lambda f: not f.encoded)  # report rows: the reported forms last
RL_STRUCTURAL = _names(RL, lambda f: f.structural)
RL_RELAXABLE = tuple(n for n in RL_SOLVED if BY_NAME[n].relaxable)


def affected_by(parameter: str) -> tuple[str, ...]:
    """The solved pre-training families whose value or limit the explain input ``parameter`` moves."""
    if parameter in EVERY_FAMILY_INPUTS:
        return SOLVED
    return tuple(n for n in SOLVED if parameter in BY_NAME[n].moved_by)


def limit(name: str, sc: Scenario, acc: str | None = None) -> float:
    """The limit of family ``name`` in ``sc`` (``acc``: the accelerator, for a per-card limit): what the
    readers of a family's limit call instead of the scenario's field (:meth:`Family.limit_of`)."""
    return BY_NAME[name].limit_of(sc, acc)


def encoded_as(name: str) -> str:
    """The family a solver encodes for ``name``: itself, or the family it is a reported form of."""
    return BY_NAME[name].form_of or name


__all__ = [
    "Family", "REGISTRY", "BY_NAME", "family", "affected_by", "encoded_as", "limit", "ok_table", "Limit", "KINDS",
    "SCOPES", "TABLED",
    "PRETRAINING_FAMILIES", "PRETRAINING_NAMES", "MOE_FAMILIES", "SOLVED", "STRUCTURAL", "RELAXABLE", "EXACT",
    "DELETION_ORDER", "EVIDENCE", "MODEL_FAMILIES", "HUB_RULES", "TRAINER_RULES", "TRAINER_MEMORY",
    "CHOICE_FAMILIES", "STAGE_SHARED", "SWEPT", "EVERY_FAMILY_INPUTS",
    "MARKET", "MARKET_AVAILABLE", "POWER_SITE", "KIND_POWER",
    "RL_FAMILIES", "RL_NAMES", "RL_SOLVED", "RL_REPORTED", "RL_STRUCTURAL", "RL_RELAXABLE",
]
