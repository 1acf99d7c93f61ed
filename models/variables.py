"""The decision variables of a plan and the plan's fields at the user's edge, declared once.

Three small tables, read by every layer (light: no numpy, no solver; models/ may read it):

* :data:`VARIABLES`: the solvers' decision variables (name, :class:`~tpopt.models.plan.Plan` field,
  ``[search]`` domain and key, type, role in the layout evaluator and in the decomposition's bounds).
  The design space (:mod:`tpopt.optimizer.space`), the layout evaluator's axes (``enumerate.GRID`` /
  ``SAVE``), the decomposition's coupling extras (``decompose.COUPLING``) and the memory plan's
  ``[search]`` keys (``memory_plan.SEARCH_KEY``) are derived from it.
* :data:`PLAN_INPUTS`: the fields a user gives to fix one plan, in the order the command line lists them
  (flag, help, keyword of :func:`tpopt.evaluate`, the ``[search]`` domain a field left out takes). The
  plan flags of ``tpopt evaluate`` / ``explain`` / ``export`` (``cli.common.plan_options``, their
  ``PLAN_FLAGS``), ``tpopt.api.PLAN_FIELDS`` and :func:`tpopt.plan_fields.plan_from` read it.
* :data:`PLAN_RECORD`: a plan as reports write it (JSON key, value, sweep column and type, whether the
  reports' short quote carries it): ``Evaluation.plan_dict`` / ``moe_plan``, the sweep's plan columns
  (``sweep.rows.PLAN_COLUMNS``) and ``result.plan_summary`` read it.

A new decision variable is one :class:`Variable`, one :class:`PlanInput` (when a user may fix it) and one
:class:`RecordField` (when reports show it) here, beside its Plan field and the relations that read it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from tpopt.models.plan import Plan

# ---------------------------------------------------------------------------------------------
# the solvers' decision variables


@dataclass(frozen=True)
class Variable:
    """One decision variable, declared once: its name in the solvers, the :class:`Plan` field it
    sets (also the keyword of ``evaluate_arrays``), the ``[search]`` domain it reads (a
    :class:`~tpopt.models.plan.SearchSpace` attribute; None: built in ``Space.from_scenario``), its
    Python type in a Plan, whether term functions get it as a scalar (categorical) or as a broadcast
    array, and whether it belongs to the core layout (the hub the backends branch on and bound by; the
    card count is the product of the ``cards`` factors).

    Its roles elsewhere: ``key``, the ``[search]`` key a user writes to narrow it (the refusal of a too
    large space names it; "": its name); ``grid``, its axis among the layout evaluator's grid of extras
    (``enumerate.GRID``, that order; None: a hub or save variable); ``save``, a variable of the save
    decision (``enumerate.SAVE``, the evaluator's last axes); ``coupling``, its rank among the extras the
    decomposition's bounds keep jointly with the layout (``decompose.COUPLING``; None: never kept);
    ``label``, how a report words one of its values (``"ZeRO-{}"``, the value through ``shown`` where given),
    and ``alternative``, its rank among the variables whose other values ``tpopt solve``'s report offers as
    same-scale alternatives (``ALTERNATIVES``; None: not offered); ``line``, whether a plan's one-line text
    shows it, worded by its label, when it is set and not the Plan's default (:func:`line_parts`)."""

    name: str
    field: str
    search: str | None
    type: type = int
    categorical: bool = False
    layout: bool = False
    cards: bool = False  # a factor of the card count
    key: str = ""
    grid: int | None = None
    save: bool = False
    coupling: int | None = None
    label: str = ""
    shown: Callable[[Any], object] | None = None
    alternative: int | None = None
    line: bool = False

    def wording(self, value: Any) -> str:
        """One of the variable's values as reports word it (its ``label``)."""
        return self.label.format(value if self.shown is None else self.shown(value))

    @property
    def search_key(self) -> str:
        """The ``[search]`` key a user writes for this variable."""
        return self.key or self.name


VARIABLES = (
    Variable("acc", "accelerator", "accelerators", str, categorical=True, layout=True, key="accelerator"),
    Variable("tp", "tp", "tp", layout=True, cards=True, label="TP {}", alternative=1),
    Variable("cp", "cp", "cp", layout=True, cards=True, label="CP {}", alternative=2),  # models/context.py
    Variable("pp", "pp", "pp", layout=True, cards=True, label="PP {}", alternative=3),
    Variable("dp", "dp", None, layout=True, cards=True),  # divisors of the batch
    Variable("mb", "micro_batch", "micro_batch", layout=True, key="micro_batch", label="micro-batch {}",
             alternative=4),
    Variable("zero", "zero_stage", "zero_stage", key="zero_stage", grid=0, coupling=1, label="ZeRO-{}",
             alternative=0),
    Variable("offload", "offload", "offload", str, categorical=True, grid=1, coupling=4, label="offload {}",
             alternative=6, line=True),
    Variable("recompute", "recompute", None, str, categorical=True, grid=2,  # collapsed with a fixed reserve
             coupling=0, label="recompute {}", alternative=5),
    Variable("schedule", "schedule", "schedule", str, categorical=True, grid=4, coupling=7),
    Variable("nics", "nics_per_host", None, key="nics_per_host", grid=5, coupling=8),  # per accelerator
    Variable("tau", "save_interval_s", "save_interval_s", float, key="save_interval", save=True),
    Variable("mode", "save_mode", "save_mode", str, categorical=True, key="save_mode", save=True, label="{} saves",
             alternative=7),
    # the mixture-of-experts variables; a dense model's domains are (1,), (0,), (0.0,)
    Variable("ep", "ep", "ep", grid=6, coupling=2, label="EP {}", alternative=8),
    Variable("etp", "expert_tp", "expert_tp", key="expert_tp", grid=7, coupling=5, label="expert-TP {}",
             shown=lambda v: "= TP" if not v else v, alternative=9),
    Variable("cap", "capacity_factor", "capacity_factor", float, key="capacity_factor", grid=8, coupling=3,
             label="capacity {}", shown=lambda v: "none (dropless)" if not v else f"{v:g}", alternative=10),
    # [search] sequence_parallel, else the scenario's
    Variable("sp", "sequence_parallel", None, bool, categorical=True, key="sequence_parallel", grid=3, coupling=6),
)
VARS = tuple(v.name for v in VARIABLES)
CATEGORICAL = tuple(v.name for v in VARIABLES if v.categorical)
NUMERIC = tuple(v.name for v in VARIABLES if not v.categorical)
LAYOUT = tuple(v.name for v in VARIABLES if v.layout)  # the core layout: (acc, tp, cp, pp, dp, mb)
CARD_FACTORS = tuple(v.name for v in VARIABLES if v.cards)  # cards = tp x cp x pp x dp
MOE_VARS = tuple((v.name, v.field, v.type) for v in VARIABLES if v.name in ("ep", "etp", "cap"))
GRID = tuple(v.name for v in sorted((v for v in VARIABLES if v.grid is not None), key=lambda v: v.grid or 0))
"""The layout evaluator's grid axes (every variable neither in the hub nor of the save decision), in
their declared axis order."""
SAVE = tuple(v.name for v in VARIABLES if v.save)
"""The save decision's variables: the layout evaluator's last axes."""
COUPLING = tuple(v.name for v in sorted((v for v in VARIABLES if v.coupling is not None),
                                        key=lambda v: v.coupling or 0))
"""The extras the decomposition's bounds may keep jointly with the layout, in the order they are taken."""
ALTERNATIVES = tuple(sorted((v for v in VARIABLES if v.alternative is not None), key=lambda v: v.alternative or 0))
"""The variables whose other values ``tpopt solve``'s report offers as same-scale alternatives, in rank order."""
SEARCH_KEY = {v.name: v.search_key for v in VARIABLES}
"""A variable's key in ``[search]``, as a user writes it."""
BY_NAME = {v.name: v for v in VARIABLES}
"""A variable by its solver name."""


def plan_fields_of(values: Mapping[str, Any], derived: Callable[[str, Any], Any] | None = None) -> dict[str, Any]:
    """The :class:`Plan` fields an assignment of the variables sets (variable name -> value): each given
    variable's field, its value converted to the field's type; ``derived(name, value)`` where given
    replaces a value the assignment does not hold as such (None: the plain value)."""
    out: dict[str, Any] = {}
    for v in VARIABLES:
        if v.name in values:
            x = values[v.name] if derived is None else derived(v.name, values[v.name])
            out[v.field] = v.type(x)
    return out


PLAN_DEFAULTS = {f.name: f.default for f in fields(Plan)}
"""A :class:`Plan` field's default (what a field takes when nothing sets it)."""


def line_parts(plan: Mapping[str, Any]) -> list[str]:
    """The parts of a plan's one-line text that its switches give (:attr:`Variable.line`): each worded by its
    label when set (``plan``: a plan as reports write it) and not the Plan's default, in declaration order."""
    out = []
    for v in VARIABLES:
        value = plan.get(v.field)
        if v.line and value and value != PLAN_DEFAULTS[v.field]:
            out.append(v.wording(value))
    return out


FIELD_VARIABLE = {v.field: v for v in VARIABLES if v.field != "accelerator"}
"""A decision variable by its Plan field: the keywords of :func:`tpopt.models.evaluate.evaluate_arrays` (the
accelerator is its positional argument)."""


def evaluate_keywords(plan: Plan) -> dict[str, Any]:
    """The keywords of :func:`tpopt.models.evaluate.evaluate_arrays` for one plan (:data:`FIELD_VARIABLE`): the
    one Plan -> layout mapping of an evaluation."""
    return {f: getattr(plan, f) for f in FIELD_VARIABLE}


# ---------------------------------------------------------------------------------------------
# the plan's fields at the user's edge


@dataclass(frozen=True)
class PlanInput:
    """A field a user gives to fix one plan: ``key``, its keyword in
    :func:`tpopt.plan_fields.plan_from` (the click destination of its flag); ``flag``, the
    command-line flag of ``tpopt evaluate`` / ``explain`` / ``export`` (``"--a/--no-a"`` for an on/off
    field; None: given by a scenario option, such as ``--hw``) with its ``help`` and value ``type``
    (``choices``: a closed set); ``api``, its keyword in :func:`tpopt.evaluate` / :func:`tpopt.explain`
    (None: not taken there); ``field``, the :class:`Plan` field it sets (None: it shapes another, as
    ``virtual_stages`` the schedule); ``domain``, for a field set the simple way, the
    :class:`~tpopt.models.plan.SearchSpace` domain a field left out takes, its only value when
    ``single`` (else the Plan's default), else its first value."""

    key: str
    flag: str | None
    help: str = ""
    type: type | None = None
    choices: tuple[str, ...] = ()
    api: str | None = None
    field: str | None = None
    domain: str | None = None
    single: bool = False

    @property
    def boolean(self) -> bool:
        """An on/off flag (``--a/--no-a``, default None: the scenario's)."""
        return self.flag is not None and "/" in self.flag


PLAN_INPUTS = (
    PlanInput("hw", None, api="accelerator", field="accelerator"),
    PlanInput("cards", "--cards", "Card count (a multiple of the host size).", int, api="cards", field="cards"),
    PlanInput("zero_stage", "--zero", "ZeRO stage 0-3.", int, api="zero_stage", field="zero_stage",
              domain="zero_stage", single=True),
    PlanInput("tp", "--tp", "Tensor-parallel size.", int, api="tp", field="tp", domain="tp", single=True),
    PlanInput("pp", "--pp", "Pipeline-parallel size.", int, api="pp", field="pp", domain="pp", single=True),
    PlanInput("cp", "--cp", "Context-parallel size (each sequence split over cp cards).", int, field="cp",
              domain="cp", single=True),
    PlanInput("micro_batch", "--micro-batch", "Sequences per micro-batch.", int, api="micro_batch",
              field="micro_batch", domain="micro_batch", single=True),
    PlanInput("recompute", "--recompute", "none, full, or groups norm+mlp+attn.", api="recompute", field="recompute",
              domain="recompute"),
    PlanInput("offload", "--offload", "Optimizer offload.", choices=("none", "cpu"), api="offload", field="offload",
              domain="offload"),
    PlanInput("pipe_schedule", "--schedule", "Pipeline schedule (pp > 1), e.g. 1f1b, zb-h1.", api="schedule",
              field="schedule"),
    PlanInput("save_interval", "--save-interval", "Checkpoint interval, e.g. 1800s, or 'auto'.", api="save_interval",
              field="save_interval_s"),
    PlanInput("save_mode", "--save-mode", "Checkpoint save mode.", choices=("sync", "async"), api="save_mode",
              field="save_mode", domain="save_mode"),
    PlanInput("nics_per_host", "--nics-per-host", "NICs per host.", int, api="nics_per_host", field="nics_per_host"),
    PlanInput("ep", "--ep", "Expert parallelism (MoE models); must divide the routed experts.", int, api="ep",
              field="ep"),
    PlanInput("expert_tp", "--expert-tp", "Expert tensor parallelism (MoE models), or 'tp' for the same as TP.",
              api="expert_tp", field="expert_tp"),
    PlanInput("capacity", "--capacity", "Capacity factor (MoE models), e.g. 1.25, or 'none' for dropless.",
              api="capacity", field="capacity_factor"),
    PlanInput("virtual_stages", "--virtual-stages",
              "Interleaved schedule: model chunks per card (sets --schedule interleaved:N).", int),
    PlanInput("sequence_parallel", "--sequence-parallel/--no-sequence-parallel",
              "Sequence parallelism under TP (default: the scenario's memory.sequence_parallel).",
              api="sequence_parallel", field="sequence_parallel"),
    PlanInput("flash_attention", "--flash-attention/--no-flash-attention",
              "Flash attention (default: the scenario's memory.flash_attention).", api="flash_attention",
              field="flash_attention"),
    PlanInput("first_stage_layers", "--first-stage-layers", "Layers on the first pipeline stage (uneven stages).",
              int, api="first_stage_layers", field="first_stage_layers"),
    PlanInput("last_stage_layers", "--last-stage-layers", "Layers on the last pipeline stage (uneven stages).",
              int, api="last_stage_layers", field="last_stage_layers"),
)
PLAN_FLAGS = tuple(i.key for i in PLAN_INPUTS if i.flag is not None)
"""The click destinations of every plan flag, in the order the commands list them."""
API_FIELDS = tuple(i.api for i in PLAN_INPUTS if i.api is not None)
"""The plan keywords of :func:`tpopt.evaluate` and :func:`tpopt.explain`."""
API_KEY = {i.api: i.key for i in PLAN_INPUTS if i.api is not None}
"""An API plan keyword -> its key in :func:`tpopt.plan_fields.plan_from`."""
SIMPLE_INPUTS = tuple(i for i in PLAN_INPUTS if i.domain is not None)
"""The inputs set the simple way: the given value, else their ``[search]`` domain's (see :class:`PlanInput`)."""
PLAN_FIELD_NAMES = tuple(f.name for f in fields(Plan))
"""Every field of a :class:`Plan` (the names a caller may mean as a plan field)."""


def flag_of(key: str) -> str:
    """The command-line flag (its on form for an on/off field) of the plan input ``key``."""
    for i in PLAN_INPUTS:
        if i.key == key and i.flag is not None:
            return i.flag.split("/")[0]
    raise KeyError(key)


# ---------------------------------------------------------------------------------------------
# a plan as reports write it


def _moe(metrics: Mapping[str, Any]) -> bool:
    """Whether the evaluation is of a mixture-of-experts model (its metrics place the EP group)."""
    return "ep_placement" in metrics


def _stage_layers(p: Plan, m: Mapping[str, Any]) -> Any:
    return m.get("stage_layers") if p.pp > 1 and m.get("step_model") == "per-operation" else None


@dataclass(frozen=True)
class RecordField:
    """A key of a plan in reports (``plan`` of every JSON report): its ``value`` from the plan and its
    evaluation's metrics; its sweep ``column`` (None: no plan column of a sweep row) of ``type``;
    whether the reports' short quote of a plan carries it (``summary``); ``moe``: a mixture-of-experts
    key (None for a dense model, quoted after the headline figures)."""

    key: str
    value: Callable[[Plan, Mapping[str, Any]], Any]
    column: str | None = None
    type: type = int
    summary: bool = False
    moe: bool = False

    def of(self, p: Plan, metrics: Mapping[str, Any]) -> Any:
        """The key's value for plan ``p`` evaluated to ``metrics``."""
        if self.moe and not _moe(metrics):
            return None
        return self.value(p, metrics)


def _field(name: str) -> Callable[[Plan, Mapping[str, Any]], Any]:
    """The plan's own field ``name``."""
    return lambda p, _m: getattr(p, name)


PLAN_RECORD = (
    RecordField("accelerator", _field("accelerator"), summary=True),
    RecordField("cards", _field("cards"), "cards", summary=True),
    RecordField("hosts", lambda p, m: int(m["hosts"]), "hosts", summary=True),
    RecordField("zero_stage", _field("zero_stage"), "zero", summary=True),
    RecordField("tp", _field("tp"), "tp", summary=True),
    RecordField("cp", _field("cp"), "cp", summary=True),
    RecordField("pp", _field("pp"), "pp", summary=True),
    RecordField("dp", _field("dp"), "dp", summary=True),
    RecordField("micro_batch", _field("micro_batch"), "micro_batch", summary=True),
    RecordField("grad_accum", _field("grad_accum"), "grad_accum"),
    RecordField("recompute", _field("recompute"), "recompute", str, summary=True),
    RecordField("offload", _field("offload"), "offload", str, summary=True),
    RecordField("schedule", lambda p, _m: p.schedule if p.pp > 1 else None, "schedule", str, summary=True),
    RecordField("save_interval_s", _field("save_interval_s"), "save_interval_s", float),
    RecordField("save_mode", _field("save_mode"), "save_mode", str),
    RecordField("nics_per_host", _field("nics_per_host"), "nics_per_host"),
    RecordField("global_batch", _field("global_batch"), summary=True),  # a sweep point's own column
    RecordField("sequence_parallel", lambda p, _m: p.sequence_parallel if p.tp > 1 else None),
    RecordField("flash_attention", _field("flash_attention")),
    RecordField("stage_layers", _stage_layers),
    RecordField("ep", _field("ep"), "ep", summary=True, moe=True),
    RecordField("expert_tp", lambda p, _m: p.expert_tp or p.tp, "expert_tp", summary=True, moe=True),
    RecordField("capacity_factor", lambda p, _m: p.capacity_factor or None, "capacity_factor", float, summary=True,
                moe=True),
    RecordField("ep_placement", lambda _p, m: m["ep_placement"], summary=True, moe=True),
)
RECORD_COLUMNS = {f.column: f.type for f in PLAN_RECORD if f.column is not None}
"""The plan's own sweep columns (column -> type), in report order."""


def plan_record(p: Plan, metrics: Mapping[str, Any]) -> dict[str, Any]:
    """A plan as reports write it (every :data:`PLAN_RECORD` key, in order)."""
    return {f.key: f.of(p, metrics) for f in PLAN_RECORD}


def moe_record(p: Plan, metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The mixture-of-experts keys of a plan's record (None for a dense model)."""
    return {f.key: f.of(p, metrics) for f in PLAN_RECORD if f.moe}
