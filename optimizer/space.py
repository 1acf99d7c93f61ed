"""The design space of a scenario and the term tables every backend shares.

A plan is an assignment of the base variables below, declared once in :data:`VARIABLES`
(:mod:`tpopt.models.variables`: name, Plan field, [search] domain and key, categorical or numeric, core layout
or not, role in the layout evaluator and the decomposition). The term functions of :mod:`tpopt.models.terms`
are tabulated over the joint domain of *their own* variables only; the
backends glue those tables together (CP-SAT with element constraints, HiGHS with joint binaries, the
enumerator by broadcasting). So all three backends optimise the very same model.

Base variables and domains:
    acc        scenario accelerators ([search] accelerator)
    tp, pp     [search] tp, pp
    cp         [search] cp: context-parallel size (cards = tp x cp x pp x dp; models/context.py)
    dp         divisors of the global batch (each rank gets whole, equal micro-batches), optionally
               restricted by [search] dp
    mb         [search] micro_batch
    zero       [search] zero_stage
    offload    [search] offload (none / cpu)
    recompute  [search] recompute (collapsed to "none" when the scenario fixes an activation reserve)
    schedule   [search] schedule (meaningful only when pp > 1; pinned to the first value otherwise)
    nics       NICs per host ([search] nics_per_host, else each accelerator's default)
    tau        save intervals ([search] save_interval; "auto" = the optimum for the card count)
    mode       save modes (sync / async)
    ep         expert parallelism ([search] ep; MoE models, else 1)
    etp        expert tensor parallelism ([search] expert_tp; 0 = the same as tp)
    cap        capacity factor ([search] capacity_factor; 0 = dropless)
    sp         sequence parallelism under TP on / off ([search] sequence_parallel; else the scenario's)
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeAlias, cast

import numpy as np
from numpy.typing import ArrayLike, NDArray

from tpopt.errors import InputError
from tpopt.models import context, pipeline
from tpopt.models import families as F
from tpopt.models import terms as T
from tpopt.models.layout import term_variables
from tpopt.models.numeric import FloatArray
from tpopt.models.plan import Plan, Scenario
from tpopt.models.variables import CARD_FACTORS as CARD_FACTORS  # declared once there, re-exported for the solvers
from tpopt.models.variables import CATEGORICAL as CATEGORICAL
from tpopt.models.variables import LAYOUT as LAYOUT
from tpopt.models.variables import MOE_VARS as MOE_VARS
from tpopt.models.variables import NUMERIC as NUMERIC
from tpopt.models.variables import VARIABLES as VARIABLES
from tpopt.models.variables import VARS as VARS
from tpopt.models.variables import plan_fields_of
from tpopt.optimizer.limits import checkpoint

if TYPE_CHECKING:  # the views dict's methods return (typeshed names them in _collections_abc)
    from _collections_abc import dict_items, dict_keys, dict_values

Domains: TypeAlias = dict[str, list[Any]]
"""Variable name -> its domain (values of the variable's Plan type: str, int, float or bool)."""
Builder: TypeAlias = Callable[..., Any]
"""A table builder: called with one keyword per table variable, returns its values (broadcast)."""
Spec: TypeAlias = tuple[tuple[str, ...], Builder | None]
"""(variables, builder) of a table; None: built from other tables."""
Reducer: TypeAlias = Callable[..., Any]
"""np.min or np.max (or another ``fn(vals, axis=...)``)."""




CHANCE_TABLE = "deadline.step_max"
"""With a confidence: the largest step whose finish meets the deadline with that probability, over
(acc, mode, tau, card factors) (:func:`tpopt.models.terms.chance_step_max`); the encoded form of the
deadline family is then step <= this table instead of the nominal finish <= deadline."""


def chance_on(sc: Scenario) -> bool:
    """Whether the scenario asks for a confidence (the deadline family in its chance form)."""
    return sc.task.confidence is not None


CHANCE_BOUND = CHANCE_TABLE + ".hi"
"""The chance table as an upper bound (:meth:`Space.bound_table`) on a space whose solve rules card counts out by
its card cap and whole-host rule (:meth:`Space.defer_chance`): the chance table's own entries at every other card
count, the largest step that can finish at all, (D - R) / iterations (1 + 1e-9), at those (their roots are found
when a layout of theirs is evaluated, :meth:`Space.chance_layout`)."""
CHANCE_DEFER = "_chance_defer"
"""The key (in a space's ``__dict__``) of :meth:`Space.defer_chance`: (card cap, whole hosts only)."""


def cards_of(**vals: Any) -> Any:
    """The card count of a layout: the product of the card factors (arrays broadcast)."""
    out = 1
    for v in CARD_FACTORS:
        out = out * vals[v]
    return out


def whole_hosts(sc: Scenario, acc: str, cards: Any) -> Any:
    """The whole-hosts rule (:data:`F.WHOLE_HOSTS`): a card count that fills whole hosts of ``acc``, cards mod
    cards per host = 0 (arrays broadcast)."""
    return cards % sc.system(acc).acc.cards_per_host == 0


def card_counts(domains: Domains) -> list[int]:
    """Every card count the domains can form (tp x cp x pp x dp), ascending."""
    return sorted({int(np.prod(c)) for c in itertools.product(*(domains[v] for v in CARD_FACTORS))})

# constraint families the solvers encode (step.budget is the per-step form of deadline.finish and is
# reported, not encoded twice)
FAMILIES = F.SOLVED
STRUCTURAL = F.STRUCTURAL
# the terms every backend sums, as their families declare them: memory per card (per stage class, see
# memory_tables) and busy time per step
MEMORY_TERMS = F.family(F.MEMORY_PER_CARD).terms
BUSY_TERMS = F.family(F.STEP_BUDGET).terms
# single-table conditions decided exactly when the tables are built (each family's ``table``)
EXACT = F.EXACT


def memory_tables(stage: str) -> tuple[str, ...]:
    """The memory family's tables of one stage class (tpopt.models.terms.stage_classes), in
    :data:`MEMORY_TERMS` order: the base names for the flat model's one class (``T.PEAK``),
    ``"<term>.<class>"`` for the per-operation model's first, middle and last. Every backend encodes, per
    class k of the space (:meth:`Space.memory_classes`), sum over these tables <= usable memory."""
    return MEMORY_TERMS if stage == T.PEAK else tuple(f"{n}.{stage}" for n in MEMORY_TERMS)


ACTIVATION_TABLES = tuple(memory_tables(k)[2] for k in (T.PEAK, *T.STAGE_CLASSES))
"""The activation tables of every stage class (the pipeline's in-flight micro-batches: bounded in closed form
on large spaces)."""
# closed-form bounds of the pipeline terms (Space.bound_table)
PIPELINE_TERMS = ("time.compute", *ACTIVATION_TABLES)
EXACT_PIPELINE_WORK = 5_000
"""Pipeline operations (:meth:`Space.pipeline_work`) up to which bound tables are exact tables: beyond,
the closed-form bounds prune as well (measured: the same solve rounds) at a fraction of the cost."""
CHEAP_PIPELINE_WORK = 300_000
"""Pipeline operations up to which enumerating a space is cheap (the report's exact table, the tiny-space
enumeration of ``tpopt solve``)."""


def reduce_axes(vals: NDArray[Any], drop: tuple[int, ...], fn: Reducer = np.min) -> NDArray[Any]:
    """``fn(vals, axis=drop)`` for np.min / np.max, without numpy's slow paths: adjacent axes merged
    (a free reshape), and a short innermost axis reduced as an elementwise minimum (maximum) of its
    slices instead of one tiny reduction per row (30 ms -> 4 ms on a MoE space's tables)."""
    ufunc = {np.min: np.minimum, np.max: np.maximum}.get(fn)
    if ufunc is None or not drop:
        return fn(vals, axis=drop) if drop else np.asarray(vals)
    vals = np.asarray(vals)  # the merge below is a reshape: a view where the merged axes allow (a slice at a
    shape: list[int] = []  # layout group's values, its axes of one entry aside, mostly does), a copy otherwise
    dropped: list[bool] = []
    for i, n in enumerate(vals.shape):
        d = i in drop
        if dropped and dropped[-1] == d:
            shape[-1] *= n
        else:
            shape.append(n)
            dropped.append(d)
    v = vals.reshape(shape)
    # the other dropped axes first (from the last back: an axis reduced leaves those before it in place), the
    # innermost last: each of those passes reads the array once, contiguous runs at a time, and leaves the innermost
    # pass (k strided passes) the smaller array (the widest GPT-3 space's time.exposed_dp on nine accelerators, 20 M
    # entries: 0.2 -> 0.04 CPU s a reduction). Minima and maxima: the same in any order (as numbers: the sign of a
    # zero may follow the order)
    for ax in range(len(shape) - 2, -1, -1):
        if dropped[ax]:
            v = fn(v, axis=ax)
    if dropped[-1]:
        k = v.shape[-1]
        if 1 < k <= 16 and v.size >= 64 * k:
            out = v[..., 0].copy()
            for i in range(1, k):
                ufunc(out, v[..., i], out=out)
            v = out
        else:
            v = fn(v, axis=-1)
    reduced: NDArray[Any] = v.reshape(tuple(n for i, n in enumerate(vals.shape) if i not in drop))
    return reduced


def reduce_to(domains: Domains, vals: NDArray[Any], vars: Iterable[str], target_vars: Iterable[str],
              fn: Reducer = np.min, broadcast: bool = True) -> NDArray[Any]:
    """Reduce a table over ``vars`` with ``fn`` along the variables not in ``target_vars`` and lay it
    out on the joint grid of ``target_vars`` (broadcast along target variables it does not have;
    ``broadcast=False``: size-1 axes there instead, which sums of many such tables broadcast faster)."""
    vars, target_vars = tuple(vars), tuple(target_vars)
    drop = tuple(i for i, v in enumerate(vars) if v not in target_vars)
    red = reduce_axes(vals, drop, fn)
    kept = [v for v in vars if v in target_vars]
    red = np.transpose(red, [kept.index(v) for v in target_vars if v in kept])
    shape = [len(domains[v]) if v in kept else 1 for v in target_vars]
    if not broadcast:
        return red.reshape(shape)
    return np.broadcast_to(red.reshape(shape), tuple(len(domains[v]) for v in target_vars))


def compute_floor(sc: Scenario, schedule: str, pp: ArrayLike, inputs: tuple[Any, ...], paired: bool = False
                  ) -> FloatArray:
    """A lower bound of :func:`tpopt.models.terms.compute_from`'s compute with stragglers, without the
    pipeline model: a stage runs its own operations one after another, so no schedule completes a step
    before its busiest stage's work, m (t_f + t_dX + t_dW) (the flat model's balanced stage; the
    per-operation model's busiest stage, :func:`~tpopt.models.terms._busiest`); times the straggler
    factor, plus the stack's host time per step (per-operation model). Bubbles are left out, so it is
    exact for one stage and below the pipeline's completion otherwise (tests/test_on_demand.py checks
    it against the closed-form lower bound on every entry).

    ``paired``: the DualPipe schedules' floor. There stage s runs layer group s for the down direction's
    ceil(m/2) micro-batches and group p-1-s for the up direction's floor(m/2) (:mod:`tpopt.models.pipeline`),
    so stages s and p-1-s do m (w_s + w_{p-1-s}) between them and the busier of the two at least half of it:
    m max_s (w_s + w_{p-1-s}) / 2, which is below the busiest group's m max_s w_s when the groups are uneven
    (the per-operation model's embedding and head, uneven layer splits); equal in the flat model."""
    lf, ldx, ldw, ef, edx, edw, hf, hdx, hdw, _t_x, ga, cards, host = inputs[:13]
    if T.per_op_model(sc):
        dense = T.dense_inputs(inputs)
        work = ((lf + ldx + ldw,), (ef + edx + edw,), (hf + hdx + hdw,),
                None if dense is None else (dense[0] + dense[1] + dense[2],))
        busy = _paired_busiest(sc, pp, *work) if paired else T._busiest(sc, pp, *work[:3], 1, work[3])[0]
    else:
        busy = lf + ldx + ldw
    out: FloatArray = np.asarray(ga * busy * T.straggler_factor(sc, cards) + host, dtype=float)
    return out


def compute_bounds_of_twin(schedule: str, pp: ArrayLike, ga: ArrayLike, twin: list[NDArray[np.float64]]
                           ) -> list[NDArray[np.float64]]:
    """The per-operation compute bounds (:func:`tpopt.models.terms.compute_bounds`) of ``schedule`` from those
    ``twin`` of a schedule of the same closed form (:func:`tpopt.models.pipeline.group_bound_form`) on the same
    inputs (``ga``: their micro-batches per step): equal, bit for bit, but inf on the shapes ``schedule`` cannot
    run (:func:`tpopt.models.pipeline.shape_ok`, as :func:`~tpopt.models.pipeline.completion_bounds_rows` marks
    them; inf stays inf through the host time and the straggler factor)."""
    base = T.schedule_parts(schedule)[0]
    m = np.ceil(np.asarray(ga, dtype=float) - 1e-9).astype(int)
    bad = ~pipeline.shape_ok(base, pp, m)
    return [t if not bad.any() else np.where(bad, np.inf, t) for t in twin]


def bound_mates(schedules: Sequence[str], forms: Sequence[tuple[Any, ...]], si: int,
                twins: Mapping[tuple[Any, ...], Any]) -> list[int]:
    """Schedule ``si`` and the schedules whose per-operation compute bounds one pass forms with its
    (:func:`tpopt.models.terms.compute_bounds_of`: ZB-H1 with ZB-H2): one of each other form (``forms``: (inputs
    key, :func:`~tpopt.models.pipeline.group_bound_form`, chunks) per schedule) with its inputs key, chunks and
    :func:`~tpopt.models.pipeline.bound_pass`, none of whose form ``twins`` holds yet."""
    def bound_pass(i: int) -> str:
        return pipeline.bound_pass(T.schedule_parts(schedules[i])[0])

    out, seen = [si], {forms[si]}
    for i, form in enumerate(forms):
        if (form not in seen and form not in twins and (form[0], form[2]) == (forms[si][0], forms[si][2])
                and bound_pass(i) == bound_pass(si)):
            out.append(i)
            seen.add(form)
    return out


def _stacked(parts: list[Any], grid: tuple[int, ...]) -> NDArray[np.float64]:
    """The arrays ``parts`` (each broadcasting to ``grid``) stacked along the first axis of ``grid``, kept at their
    common broadcast shape (an axis none of them varies along stays of length 1): the compute term's inputs vary
    along a few of the layout axes only, and the pipeline bounds run on that grid, broadcast
    (:func:`tpopt.models.terms._bounds_on_grid`)."""
    shape = np.broadcast_shapes((grid[0],) + (1,) * (len(grid) - 1), *(np.shape(p) for p in parts))
    # filled by assignment (np.stack's values and dtype, without a broadcast view per part: 60,000 of them in the
    # nine-accelerator GPT-3 analysis's unit builds)
    out: NDArray[np.float64] = np.empty((len(parts),) + shape, dtype=np.result_type(*(np.asarray(p) for p in parts)))
    for i, p in enumerate(parts):
        out[i] = p
    return out.reshape((len(parts) * shape[0],) + shape[1:])
def _paired_busiest(sc: Scenario, pp: ArrayLike, layer: tuple[Any, ...], first: tuple[Any, ...],
                    last: tuple[Any, ...], dense: tuple[Any, ...] | None) -> FloatArray:
    """Elementwise max over s of (w_s + w_{p-1-s}) / 2, w_g a layer group's per-micro-batch work
    (:func:`tpopt.models.terms._group_times`, every group: the pairs, not only the candidate stages)."""
    shape = np.broadcast(np.asarray(pp), *(np.asarray(x) for x in (*layer, *first, *last, *(dense or ())))).shape
    pp_a = np.broadcast_to(np.asarray(pp), shape)
    out = np.zeros(shape)
    for p_val in np.unique(pp_a):
        sel = pp_a == p_val
        split = T.stage_split(sc, int(p_val)) or [sc.model.layers]
        dsplit = T.dense_split(sc, int(p_val)) if dense is not None and len(split) == int(p_val) else None
        n = len(split)
        for g in range((n + 1) // 2):
            a, b = (T._group_times(split, k, layer, first, last, 1, dense if dsplit is not None else None,
                                   dsplit)[0] for k in (g, n - 1 - g))
            out[sel] = np.maximum(out[sel], np.broadcast_to((a + b) / 2, shape)[sel])
    return out


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@dataclass
class Table:
    """A term tabulated over the joint domain of ``vars`` (C order, one axis per variable)."""

    name: str
    vars: tuple[str, ...]
    values: NDArray[Any]

    def flat(self) -> NDArray[Any]:
        return self.values.reshape(-1)


def round_up32(x: ArrayLike) -> NDArray[np.float32]:
    """float32 values no smaller than ``x`` (an upper bound stored in half the memory).

    Where the cast rounded down, the next float32 up: ``nextafter(y, inf)`` is the bit pattern one up for
    ``y >= 0`` and one down (toward zero) for ``y < 0`` (``-inf`` to ``-max``; NaN never rounds down), so the
    step is added to the cast's bits in place (the same bits as ``np.where(y < x, np.nextafter(y, inf), y)``,
    without its two whole temporaries)."""
    x = np.asarray(x, dtype=float)
    y: NDArray[np.float32] = x.astype(np.float32)
    down = y < x
    bits = y.view(np.int32)
    if bits.size and bits.min() < 0:  # a negative value (or NaN): its step is -1
        bits += down.view(np.int8).astype(np.int32) * ((bits >> 31) | 1)
    else:
        bits += down
    return y


TASK_TABLES = ("interval", "overhead", F.ok_table(F.CHECKPOINT), CHANCE_TABLE)
"""The tables that read the task's tokens, deadline, reserved time or confidence (the automatic save
interval falls back to the deadline where no failure is modelled; the chance table reads all four).
Every other table is the same for any value of them, or of the card and budget caps."""
PRICE_TABLES = ("rate",)
"""The tables that read the prices per card-hour and per NIC-hour."""


def rebuilt_tables(base: Scenario, sc: Scenario) -> tuple[str, ...] | None:
    """The tables a space of ``sc`` cannot take from a space of ``base``: none when they differ only in
    the card or budget caps or the deadline (no table reads them, but for the automatic save interval and
    the chance form), the chance table alone when only in the confidence level (both with one),
    :data:`TASK_TABLES` when in the task's tokens or reserved time (or a deadline those read),
    :data:`PRICE_TABLES` when in the prices; None when anything else differs (every table is rebuilt)."""
    if set(sc.systems) != set(base.systems):
        return None
    levels = sc.task.confidence is not None and base.task.confidence is not None  # a level read by the chance table
    task = replace(sc.task, tokens=base.task.tokens, deadline_s=base.task.deadline_s,
                   reserved_s=base.task.reserved_s, confidence=base.task.confidence if levels else sc.task.confidence)
    systems = {k: replace(s, price_card_hour=base.systems[k].price_card_hour,
                          nic_price_hour=base.systems[k].nic_price_hour) for k, s in sc.systems.items()}
    probe = replace(sc, task=task, systems=systems, cost=replace(sc.cost, max_cost=base.cost.max_cost),
                    search=replace(sc.search, max_cards=base.search.max_cards))
    if probe != base:
        return None
    rebuild: tuple[str, ...] = ()
    deadline_only = replace(sc.task, deadline_s=base.task.deadline_s) == base.task
    if sc.task != base.task and replace(sc.task, confidence=base.task.confidence) == base.task:
        rebuild += (CHANCE_TABLE,)  # another confidence level alone: the chance table alone reads it
    elif sc.task != base.task and not (deadline_only and sc.task.confidence is None
                                       and 0.0 not in sc.search.save_interval_s):
        rebuild += TASK_TABLES  # (a deadline alone is read only by the automatic interval and the chance table)
    if sc.systems != base.systems:
        rebuild += PRICE_TABLES
    return rebuild


class Tables(dict[str, Table]):
    """Term tables by name, each built on first access (see :meth:`Space.tables`). Iterating over them
    (``values()``, ``items()``, ``keys()``) builds every exact table first; ``name in tables`` and
    ``tables.get(name)`` look only at the tables built so far."""

    def __init__(self, space: Space) -> None:
        super().__init__()
        self.space = space

    def __missing__(self, name: str) -> Table:
        table = self[name] = self.space._build(name)
        return table

    def build_all(self) -> Tables:
        """Build every exact table (the monolithic encodings use them all)."""
        for name in self.space._specs:
            if not name.endswith((".lo", ".hi")):
                self[name]
        return self

    def values(self) -> dict_values[str, Table]:
        return super(Tables, self.build_all()).values()

    def items(self) -> dict_items[str, Table]:
        return super(Tables, self.build_all()).items()

    def keys(self) -> dict_keys[str, Table]:
        return super(Tables, self.build_all()).keys()

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())


def nic_domain(sc: Scenario, acc: str) -> list[int]:
    """NICs per host searched on ``acc``'s hosts: the ``[search] nics_per_host`` values its hosts can take, else
    the card's catalog count."""
    A = sc.system(acc).acc
    if sc.search.nics_per_host:
        return [k for k in sc.search.nics_per_host if 1 <= k <= max(A.max_nics_per_host, A.nics_per_host)]
    return [A.nics_per_host]


@dataclass
class Space:
    sc: Scenario
    domains: Domains = field(default_factory=dict)

    @classmethod
    def from_scenario(cls, sc: Scenario, restrict: Mapping[str, Iterable[Any]] | None = None) -> Space:
        """Domains from the scenario's [search] table, optionally restricted further by ``restrict``
        (variable -> allowed values)."""
        s = sc.search
        reserve = not T.modelled_activations(sc)
        rec = list(dict.fromkeys(T.effective_recompute(sc, r) for r in s.recompute))
        if reserve:
            rec = rec[:1]
        nics = sorted({k for a in s.accelerators for k in cls._nic_domain(sc, a)})
        built: dict[str, list[Any]] = {
            "acc": list(s.accelerators or sc.systems),
            "dp": [d for d in divisors(sc.task.global_batch) if not s.dp or d in s.dp],
            "recompute": rec,
            "nics": nics,
            # sequence parallelism changes nothing under the chapter's accounting (flat model, fixed reserve)
            "sp": (list(s.sequence_parallel) or [sc.memory.sequence_parallel])[:1 if reserve and not
                                                                              T.per_op_model(sc) else None],
        }
        dom: dict[str, list[Any]] = {
            v.name: built[v.name] if v.search is None or v.name in built else list(getattr(s, v.search))
            for v in VARIABLES}
        for k, allowed in (restrict or {}).items():
            if k not in dom:
                raise InputError(f"cannot restrict unknown variable {k!r}")
            keep = [v for v in dom[k] if v in set(allowed)]
            dom[k] = keep
        for k, v in dom.items():
            if not v:
                raise InputError(f"the search domain of {k} is empty")
        return cls(sc=sc, domains=dom)

    @staticmethod
    def _nic_domain(sc: Scenario, acc: str) -> list[int]:
        return nic_domain(sc, acc)

    # -- sizes ----------------------------------------------------------------------------------
    def size(self) -> int:
        """Number of points (assignments) in the design space, NICs counted per accelerator."""
        other = 1
        for k, v in self.domains.items():
            if k not in ("acc", "nics", "schedule", "pp"):
                other *= len(v)
        n = 0
        for a in self.domains["acc"]:
            ks = len([k for k in self.domains["nics"] if k in self._nic_domain(self.sc, a)])
            for p in self.domains["pp"]:
                n += ks * (len(self.domains["schedule"]) if p > 1 else 1)
        return n * other

    # -- allowed pairs that are not constraints but domain facts --------------------------------
    def nic_allowed(self) -> NDArray[np.bool_]:
        """(acc, nics) pairs a host can take."""
        out = np.zeros((len(self.domains["acc"]), len(self.domains["nics"])), dtype=bool)
        for i, a in enumerate(self.domains["acc"]):
            dom = set(self._nic_domain(self.sc, a))
            for j, k in enumerate(self.domains["nics"]):
                out[i, j] = k in dom
        return out

    # -- tabulation -----------------------------------------------------------------------------
    def tabulate(self, name: str, vars: tuple[str, ...], fn: Builder, dtype: Any = float) -> Table:
        """Evaluate ``fn(**{var: values})`` on the joint domain of ``vars``.

        Categorical variables are looped over (they are scalars in the term functions); numeric ones
        are passed as broadcastable open-grid arrays.
        """
        shape = tuple(len(self.domains[v]) for v in vars)
        out = np.empty(shape, dtype=dtype)
        cats = [v for v in vars if v in CATEGORICAL]
        nums = [v for v in vars if v not in CATEGORICAL]
        grids = np.ix_(*[np.asarray(self.domains[v], dtype=float) for v in nums]) if nums else ()
        sub_shape = tuple(len(self.domains[v]) for v in nums)
        for combo in itertools.product(*(range(len(self.domains[c])) for c in cats)):
            checkpoint()  # a time limit stops table building here, between two complete slices
            kw = {c: self.domains[c][i] for c, i in zip(cats, combo, strict=False)}
            kw.update({v: g for v, g in zip(nums, grids, strict=False)})
            val = np.asarray(fn(**kw))
            idx = tuple(combo[cats.index(v)] if v in CATEGORICAL else slice(None) for v in vars)
            out[idx] = np.broadcast_to(val, sub_shape)
        return Table(name, vars, out)

    @cached_property
    def tables(self) -> Tables:
        """Every term table (one per relation family of :mod:`tpopt.models.terms`), each built on first
        use: a solve that needs only some of them (the layout decomposition's bounds) builds only those;
        iterating over them builds every exact table."""
        return Tables(self)

    def _term(self, fn: Callable[..., Any], then: Callable[[Any], Any] | None = None, **options: Any) -> Spec:
        """(variables, builder) of a table built from a term function: its variables are the ones the
        term declares (:func:`tpopt.models.layout.term_variables`: MoE variables only for a MoE model);
        ``then`` maps its values (a bound's rounding, a rule's condition); ``options`` are keywords that
        are not variables (``peak=``)."""
        sc = self.sc

        def build(**kw: Any) -> Any:
            value = fn(sc, **kw, **options)
            return value if then is None else then(value)

        return term_variables(fn, sc.model.moe), build

    @cached_property
    def _specs(self) -> dict[str, Spec]:
        """Table name -> (variables, builder). A term function's table has the variables the term
        declares (:meth:`_term`); the few tables below that are not one term (the card count and what
        is read from it, the layout rules of the context module) name their variables themselves;
        ``None`` builders are built from other tables (:meth:`_build`)."""
        sc = self.sc
        a = sc.model
        B = sc.task.global_batch
        cf = CARD_FACTORS
        per_op = T.per_op_model(sc)  # uneven stages are modelled, not ruled out
        term = self._term
        compute = term_variables(T.compute, a.moe)

        moe_ep = ("ep",) if a.moe else ()  # a MoE plan's sigma reads its experts per card (T.step_sigma)
        chance = {CHANCE_TABLE: (("acc", "mode", "tau", *cf, *moe_ep), lambda acc, mode, tau, ep=1, **f:
                                 T.chance_step_max(sc, acc, mode, cards_of(**f),
                                                   self.interval(tau, cards_of(**f), mode), ep))} \
            if chance_on(sc) else {}
        bound: dict[str, Spec] = {CHANCE_BOUND: (chance[CHANCE_TABLE][0], None)} if chance else {}  # _chance_bound
        mem: dict[str, Spec] = {}
        for k, (states, copies, acts, temp) in self.memory_classes():  # the memory family per stage class
            opt: dict[str, Any] = {} if k == T.PEAK else {"stage": k}
            mem |= {states: term(T.states, **opt), copies: term(T.param_copies, **opt),
                    acts: term(T.activations, **opt), f"{acts}.lo": term(T.activations, peak="lo", **opt),
                    f"{acts}.hi": term(T.activations, round_up32, peak="hi", **opt), temp: term(T.temporary, **opt)}
        return chance | bound | mem | {
            "mem.host": term(T.host_memory),
            "time.compute": (compute, None),
            "time.compute.lo": (compute, None),
            "time.compute.hi": (compute, None),
            "time.exposed_dp": term(T.exposed_dp),
            "time.tp_comm": term(T.tp_comm),
            "time.offload": term(T.offload_wait),
            "time.ep_comm": term(T.ep_comm),
            # functions of the card count (tp x cp x pp x dp)
            "overhead": (("mode", "tau", *cf),
                         lambda mode, tau, **f: T.overhead(sc, mode, cards_of(**f),
                                                           self.interval(tau, cards_of(**f), mode))),
            "interval": (("mode", "tau", *cf), lambda mode, tau, **f: self.interval(tau, cards_of(**f), mode)),
            "input.min_busy": (("acc", *cf), lambda acc, **f: B / T.input_supply(sc, acc, cards_of(**f))),
            "rate": (("acc", *cf, "nics"), lambda acc, nics, **f: T.rate_per_second(sc, acc, cards_of(**f), nics)),
            "cards": (cf, cards_of),
            # structural facts (True = the rule holds)
            F.ok_table(F.BATCH_DIVISIBILITY): term(T.batch_remainder, lambda r: r == 0),
            F.ok_table(F.WHOLE_HOSTS): (("acc", *cf),
                                      lambda acc, **f: whole_hosts(sc, acc, cards_of(**f))),
            F.ok_table(F.TP_WITHIN_HOST): (("acc", "tp", "cp"),
                                         lambda acc, tp, cp: context.placement_ok(tp, cp,
                                                                                  sc.system(acc).acc.cards_per_host)),
            F.ok_table(F.HEADS_DIVISIBLE): (("tp", "cp"), lambda tp, cp: context.heads_ok(a, tp, cp, sc.cp_method)),
            F.ok_table(F.PP_DIVIDES_LAYERS): (("pp",), lambda pp: (a.layers % pp == 0) | per_op),
            F.ok_table(F.SCHEDULE_SHAPE): term(T.schedule_shape_ok),
            F.ok_table(F.EP_DIVIDES_EXPERTS): (("ep",), lambda ep: np.mod(a.experts, ep) == 0),
            F.ok_table(F.EP_GROUP): term(T.ep_group_ok),
            F.ok_table(F.CAPACITY_DROPS): term(T.capacity_drops, lambda drops: drops <= F.limit(F.CAPACITY_DROPS, sc)),
            # exact single-table conditions: backlog (write time <= interval), host memory <= capacity
            F.ok_table(F.CHECKPOINT): (("mode", "tau", *cf), None),
            F.ok_table(F.MEMORY_HOST): (term_variables(T.host_memory, a.moe), None),
        }

    def memory_classes(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """(stage class, its memory tables) for each class the memory family is encoded on: one inequality
        sum over the tables <= usable memory per class (:func:`memory_tables`; the flat model's one class
        has the base tables)."""
        return tuple((k, memory_tables(k)) for k in T.stage_classes(self.sc))

    def memory_names(self) -> tuple[str, ...]:
        """Every exact memory-family table of the space (all classes)."""
        return tuple(n for _, names in self.memory_classes() for n in names)

    def table_vars(self, name: str) -> tuple[str, ...]:
        """The variables of a table, without building it."""
        return self._specs[name][0]

    def table_rows(self, name: str) -> int:
        """Rows of a table (the joint domain of its variables), without building it."""
        return int(np.prod([len(self.domains[v]) for v in self.table_vars(name)]))

    def largest_table(self) -> int:
        """Rows of the largest exact term table (how the monolithic encodings would grow)."""
        return max(self.table_rows(n) for n in self._specs if not n.endswith((".lo", ".hi")))

    def pipeline_work(self) -> int:
        """Operations the event model would simulate to tabulate the pipeline terms exactly: the sum
        over the distinct (schedule, pp, micro-batches) shapes without a closed form of their op count."""
        d = self.domains
        pps = [p for p in d["pp"] if p > 1]
        if not pps:
            return 0
        B = self.sc.task.global_batch
        ms = {int(np.ceil(B / (dp * mb) - 1e-9)) for dp in d["dp"] for mb in d["mb"]}
        per = sum(p * m for p in pps for m in ms)
        work = 0
        for s in d["schedule"]:
            base, v = T.schedule_parts(s)
            if base in pipeline.CLOSED_FORM and not T.per_op_model(self.sc):
                continue
            work += per * (3 if base in pipeline.SPLIT_BACKWARD else 2) * (v if base == "interleaved" else 1)
        return work

    def _work(self) -> int:
        work = self.__dict__.get("_pipeline_work")
        if work is None:
            work = self.__dict__["_pipeline_work"] = self.pipeline_work()
        return work

    def exact_pipeline_tables(self) -> bool:
        """Whether the pipeline terms are tabulated exactly (:meth:`pipeline_work` within
        :data:`EXACT_PIPELINE_WORK`) or only bounded in closed form."""
        return self._work() <= EXACT_PIPELINE_WORK

    def cheap_pipeline(self) -> bool:
        """Whether every pipeline shape of the space is cheap to simulate (:data:`CHEAP_PIPELINE_WORK`)."""
        return self._work() <= CHEAP_PIPELINE_WORK

    def bound_table(self, name: str, side: str) -> Table:
        """A table of valid lower (``side="lo"``) or upper (``"hi"``) bounds of a term, for pruning.

        The pipeline terms (``time.compute``, ``mem.activations``) come from closed-form bounds
        (:func:`tpopt.models.pipeline.completion_bounds`, :func:`~tpopt.models.pipeline.peak_inflight_bounds`)
        when simulating every shape exactly would cost more than :data:`EXACT_PIPELINE_WORK` operations;
        the chance table's upper bound, where the space's solve deferred card counts (:meth:`defer_chance`), is
        :data:`CHANCE_BOUND`; every other table is exact, and so is its own bound.
        """
        if side not in ("lo", "hi"):
            raise ValueError(side)
        if name in PIPELINE_TERMS and not self.exact_pipeline_tables():
            return self.tables[f"{name}.{side}"]
        if name == CHANCE_TABLE and side == "hi" and self.chance_deferred() is not None:
            return self.tables[CHANCE_BOUND]
        return self.tables[name]

    def defer_chance(self, enforced: Collection[str]) -> None:
        """Let the chance table's bound (:data:`CHANCE_BOUND`) leave out the roots of the card counts a solve enforcing
        ``enforced`` rules out by the layout alone: above the card cap (:data:`F.CARDS`) and not whole hosts
        (:data:`F.WHOLE_HOSTS`). Their layouts' bounds are then the loosest valid ones (the largest step that can
        finish at all): a solve that enforces both drops those layouts anyway (the same bounds, the same answer
        and proof), and a question that drops one of them (the report's "without cards.max") walks its layouts
        from bounds that still hold, each layout's roots found when it is evaluated (:meth:`chance_layout`). The
        widest GPT-3 space at 95 %: 360 of 1,080 (cards, interval) pairs per save mode are found for the solve.

        Only on a space whose chance table is not built yet (then every reader keeps the exact table), of a dense
        model (a MoE plan's sigma reads its expert parallelism too); a later call that leaves out other card counts
        undoes it (the bound and its reductions dropped: the exact table from then on)."""
        if not chance_on(self.sc) or self.sc.model.moe:
            return
        keep = (F.limit(F.CARDS, self.sc) if F.CARDS in enforced else math.inf, F.WHOLE_HOSTS in enforced)
        had = self.__dict__.get(CHANCE_DEFER)
        if had is None and not any(dict.__contains__(self.tables, n) for n in (CHANCE_TABLE, CHANCE_BOUND)):
            self.__dict__[CHANCE_DEFER] = keep
        elif had is not None and had != keep:
            self.undefer_chance()

    def undefer_chance(self) -> None:
        """Undo :meth:`defer_chance`: the chance bound and the reductions made of it dropped, the exact table read
        from then on (bounds that hold at any card cap: the explain questions' shared bounds)."""
        if self.__dict__.pop(CHANCE_DEFER, None) is None:
            return
        dict.pop(self.tables, CHANCE_BOUND, None)
        cache = self.__dict__.get("_reduced")
        for key in [k for k in cache or {} if k[0] == CHANCE_TABLE]:
            del cast(dict[tuple[Any, ...], Any], cache)[key]

    def chance_deferred(self) -> tuple[float, bool] | None:
        """The (card cap, whole hosts only) of :meth:`defer_chance` on this space or the space it is a layout group
        of (``_group_of``), None where the chance table's bound is the table itself."""
        owner = self.__dict__.get("_group_of", (self,))[0]
        got: tuple[float, bool] | None = owner.__dict__.get(CHANCE_DEFER)
        return got

    def _chance_bound(self) -> Table:
        """:data:`CHANCE_BOUND`: the chance table's entries (:func:`T.chance_step_max`, the same call on the card
        counts kept, hence the same bits) where the card count is within :meth:`chance_deferred`'s cap and, if
        asked, whole hosts; elsewhere (D - R) / iterations (1 + 1e-9), above every root (a root is at most D - R,
        :func:`tpopt.models.finish.max_work`)."""
        sc = self.sc
        vars = self.table_vars(CHANCE_TABLE)
        cap, whole = self.chance_deferred() or (math.inf, False)
        loose = max(F.limit(F.DEADLINE, sc) - sc.task.reserved_s, 0.0) / T.iteration_count(sc) * (1.0 + 1e-9)

        def fn(acc: str, mode: str, tau: Any, **f: Any) -> NDArray[np.float64]:
            cards = np.asarray(cards_of(**f), dtype=float)
            c, t = np.broadcast_arrays(cards, np.asarray(self.interval(tau, cards, mode), dtype=float))
            kept = c <= cap
            if whole:
                kept &= whole_hosts(sc, acc, c)
            out = np.full(c.shape, loose)
            if kept.any():
                out[kept] = T.chance_step_max(sc, acc, mode, c[kept], t[kept])
            return out

        return self.tabulate(CHANCE_BOUND, vars, fn)

    def chance_layout(self, h: tuple[int, ...]) -> NDArray[np.float64]:
        """The chance table's entries at layout ``h`` (indices over :data:`LAYOUT`), over its variables with an axis
        of one entry for each layout variable, without the whole table: each (mode, interval) entry by
        :func:`T.chance_step_max` at the layout's card count and the intervals of its save choices, as the table
        computes it (element-wise: the same bits; tests/test_confidence_sharing.py compares every layout). Kept
        per (accelerator, card count) on the space (a layout group's: on the space it is a group of)."""
        d = self.domains
        at = dict(zip(LAYOUT, h, strict=True))
        acc = d["acc"][at["acc"]]
        cards = float(np.prod([float(d[v][at[v]]) for v in CARD_FACTORS]))
        owner = self.__dict__.get("_group_of", (self,))[0]
        memo: dict[tuple[str, float], NDArray[np.float64]] = owner.__dict__.setdefault("_chance_layouts", {})
        got = memo.get((acc, cards))
        if got is None:
            vars = self.table_vars(CHANCE_TABLE)
            tau = np.asarray(d["tau"], dtype=float)
            c = np.full(tau.shape, cards)
            rows = np.stack([T.chance_step_max(self.sc, acc, mode, c, self.interval(tau, c, mode))
                             for mode in d["mode"]])
            got = memo[acc, cards] = rows.reshape([len(d[v]) if v in ("mode", "tau") else 1 for v in vars])
        return got

    def build_tables(self, check: Callable[[], object] | None = None) -> Tables:
        """Build every table a solve reads, as one phase: the exact tables, except that the pipeline
        terms of a space too large to simulate shape by shape come as closed-form bounds
        (:meth:`bound_table`). ``check()``, if given, runs before each table (a time limit can raise
        there; the tables built so far stay valid)."""
        t = self.tables
        for name in self._specs:
            if name.endswith((".lo", ".hi")):
                continue
            if check is not None:
                check()
            if name in PIPELINE_TERMS:
                self.bound_table(name, "lo")
                self.bound_table(name, "hi")
            else:
                t[name]
        return t

    def _build(self, name: str) -> Table:
        vars, fn = self._specs[name]
        t = self.tables
        if name == "time.ep_comm" and not self.sc.model.moe:  # a dense model exchanges no tokens (T.ep_comm: zeros)
            return Table(name, vars, np.broadcast_to(np.zeros(()), tuple(len(self.domains[v]) for v in vars)))
        if fn is not None:  # the smallest dtype that holds each table exactly
            dtype = bool if name.startswith("ok.") else np.int64 if name == "cards" else \
                np.float32 if name.endswith(".hi") else float
            return self.tabulate(name, vars, fn, dtype)
        if name.startswith("time.compute"):
            return self._compute_table(name)
        if name == CHANCE_BOUND:
            return self._chance_bound()
        if name == F.ok_table(F.CHECKPOINT):
            return Table(name, vars, T.checkpoint_write_time(self.sc) <= t["interval"].values)
        if name == F.ok_table(F.MEMORY_HOST):
            h = t["mem.host"]
            cap = self.host_capacity()
            shape = [1] * h.values.ndim
            shape[h.vars.index("acc")] = len(cap)
            return Table(name, vars, h.values <= cap.reshape(shape))
        raise KeyError(name)

    def moe_rules(self) -> dict[str, Table]:
        """The MoE families' conditions (family -> its table, True = the rule holds), each over its own few
        variables."""
        return {n: self.tables[F.ok_table(n)] for n in F.MOE_FAMILIES}

    def inert(self) -> frozenset[str]:
        """MoE families no plan of this space can violate (all three for a dense model; capacity drops when
        every capacity is dropless or drops little enough). Reports skip them: dropping one cannot admit a
        better plan."""
        return frozenset(n for n, t in self.moe_rules().items() if bool(np.all(t.values)))

    def compute_floor(self) -> Table:
        """A lower bound of the compute term that simulates no pipeline (:func:`compute_floor`), over the compute
        table's variables but the schedule, valid for every schedule of the space: the busiest stage's work, or
        where the space has a DualPipe schedule the paired stages' (below it). The on-demand decomposition's
        group bound (not kept in :attr:`tables`)."""
        dual = any(str(s).startswith("dualpipe") for s in self.domains["schedule"])
        return self.compute_floors((dual,))[0]

    def _expert_combinations(self) -> tuple[NDArray[np.int64], list[tuple[Any, ...]]]:
        """(index of each (ep, etp, cap) combination's distinct compute key, one combination per key): the
        compute term reads the expert choices only through :func:`T.compute_key`, so the compute tables and
        floors evaluate one representative per key and lay it out over every combination of that key (a dense
        model: the one combination (1, 0, 0))."""
        d = self.domains
        combos = list(itertools.product(d["ep"], d["etp"], d["cap"])) if self.sc.model.moe else [(1, 0, 0.0)]
        keys = [T.compute_key(self.sc, *c) for c in combos]
        unique = list(dict.fromkeys(keys))
        return np.array([unique.index(k) for k in keys]), [combos[keys.index(k)] for k in unique]

    def compute_floors(self, kinds: tuple[bool, ...] = (False, True)) -> list[Table]:
        """Lower bounds of the compute term, one per kind: the busiest stage's work (False) or DualPipe's
        paired stages' (True; :func:`compute_floor`, ``paired``), over the compute table's variables but the
        schedule: the work t_f + t_dX + t_dW does not depend on it (a schedule only decides whether dW is split
        from dX, :func:`tpopt.models.terms._fold`), so it is computed for the first schedule. In the flat model,
        whose stages are balanced, the two are one array.

        Computed per (accelerator, recompute, SP) on the inputs as :func:`T.compute_inputs` returns them (each
        array only as large as the variables it depends on), so only the floor itself is laid out on the full
        grid; for a MoE model, once per distinct expert combination (:func:`T.compute_key`), laid out over
        (ep, etp, cap) like the compute table."""
        sc, d = self.sc, self.domains
        asked = kinds
        moe = ("ep", "etp", "cap") if sc.model.moe else ()
        vars = tuple(v for v in self.table_vars("time.compute") if v != "schedule")
        nums = ("tp", "cp", "pp", "dp", "mb", "nics")
        sub = tuple(len(d[v]) for v in nums)
        which, reps = self._expert_combinations()
        R = len(reps)
        # the expert combinations as the leading axis, then one axis per number of the layout
        ex = [np.asarray([c[i] for c in reps], dtype=float).reshape((R,) + (1,) * len(sub)) for i in range(3)]
        g = dict(zip(nums, (x[None] for x in np.ix_(*[np.asarray(d[v], dtype=float) for v in nums])), strict=True))
        kinds = tuple(dict.fromkeys(kinds if T.per_op_model(sc) else (False,)))
        outs = [np.empty((len(d["acc"]), len(d["recompute"]), len(d["sp"])) + sub + tuple(len(d[v]) for v in moe))
                for _ in kinds]
        sched = d["schedule"][0]
        for a, acc in enumerate(d["acc"]):
            for r, rec in enumerate(d["recompute"]):
                for s, sp in enumerate(d["sp"]):
                    checkpoint()
                    inputs = [np.asarray(x, dtype=float) for x in T.compute_inputs(
                        sc, acc=acc, recompute=rec, sp=sp, schedule=sched, tp=g["tp"], cp=g["cp"], pp=g["pp"],
                        dp=g["dp"], mb=g["mb"], nics=g["nics"], ep=ex[0], etp=ex[1], cap=ex[2])]
                    for out, paired in zip(outs, kinds, strict=True):
                        total = np.broadcast_to(compute_floor(sc, sched, g["pp"], tuple(inputs), paired), (R,) + sub)
                        laid = total[which]  # (combinations,) + layout
                        out[a, r, s] = np.moveaxis(laid, 0, -1).reshape(sub + tuple(len(d[v]) for v in moe)) \
                            if moe else laid[0]
        return [Table("time.compute.floor", vars, outs[kinds.index(k) if k in kinds else 0]) for k in asked]

    def _compute_table(self, name: str = "time.compute") -> Table:
        """The compute term (or its bounds, ``time.compute.lo`` / ``.hi``, both from one pass), with
        every (accelerator, recompute) combination of a schedule stacked into one array so that the
        pipeline model runs once per (schedule, pp, micro-batches) shape (closed forms: once per
        schedule). For a MoE model the expert work depends on (ep, etp, cap) too: each distinct
        combination (T.compute_key: the load factor alone in the flat model) is stacked like another
        accelerator."""
        sc, d = self.sc, self.domains
        moe = ("ep", "etp", "cap") if sc.model.moe else ()
        vars = self.table_vars(name)
        nums = ("tp", "cp", "pp", "dp", "mb", "nics")
        grids = dict(zip(nums, np.ix_(*[np.asarray(d[v], dtype=float) for v in nums]), strict=False))
        sub = tuple(len(d[v]) for v in nums)
        which, reps = self._expert_combinations()
        exact = name == "time.compute"
        full = tuple(len(d[v]) for v in vars)
        outs = [np.empty(full)] if exact else [np.empty(full), np.empty(full)]  # both bounds in one pass

        lead = (len(d["acc"]), len(d["recompute"]), len(d["sp"]))

        identity = bool(np.array_equal(which, np.arange(len(reps))))  # every combination its own (no copy)

        def lay(total: NDArray[np.float64]) -> NDArray[np.float64]:
            total = total.reshape(lead + (len(reps),) + sub)
            total = total if identity else total[:, :, :, which]
            if moe:  # (acc, rec, sp, combo) + sub -> (acc, rec, sp) + sub + (ep, etp, cap)
                return np.moveaxis(total, 3, -1).reshape(lead + sub + tuple(len(d[v]) for v in moe))
            return total[:, :, :, 0]

        # the distinct expert combinations as one leading axis of every call (the kernels broadcast over
        # it): one pass per (accelerator, recompute, SP) instead of one per combination
        R = len(reps)
        rsub = (R,) + sub
        ex = [np.asarray([c[i] for c in reps], dtype=float).reshape((R,) + (1,) * len(sub)) for i in range(3)]
        g = {k: v[None] for k, v in grids.items()}
        n_parts = len(d["acc"]) * len(d["recompute"]) * len(d["sp"])
        # the stage count on its own axis (the pipeline bounds run on the plan grid, terms._bounds_on_grid)
        pp = grids["pp"][None]
        pp_rows = np.broadcast_to(grids["pp"], sub)[None].repeat(n_parts * R, axis=0)
        # the inputs read only whether a schedule splits dW from dX (T.inputs_schedule_key): they are built once
        # per key, the schedules taken key by key so that one key's stacked inputs are alive at a time
        keys_of = [T.inputs_schedule_key(s) for s in d["schedule"]]
        # the per-operation bounds of schedules of one closed form (pipeline.group_bound_form) on the same inputs are
        # one pass's, inf on the shapes a schedule cannot run (compute_bounds_of_twin)
        forms = [(keys_of[i], pipeline.group_bound_form(T.schedule_parts(s)[0]), T.schedule_parts(s)[1])
                 for i, s in enumerate(d["schedule"])] if not exact and T.per_op_model(sc) else None
        twins: dict[tuple[Any, ...], list[NDArray[np.float64]]] = {}  # form -> its bounds (of the key's inputs)
        inputs_of: tuple[bool | None, tuple[NDArray[np.float64], ...]] = (None, ())  # (key, its stacked inputs)
        kept: dict[str, Any] = {}  # per accelerator: the inputs no recompute, SP or schedule changes (one grid)
        for si in sorted(range(len(d["schedule"])), key=lambda i: keys_of.index(keys_of[i])):
            sched = d["schedule"][si]
            checkpoint()
            if inputs_of[0] is None or inputs_of[0] != keys_of[si]:
                inputs_of = (None, ())  # the previous key's inputs go before the next key's are built
                twins.clear()
                parts = [T.compute_inputs(sc, acc=acc, recompute=rec, sp=sp, schedule=sched, tp=g["tp"], cp=g["cp"],
                                          pp=g["pp"], dp=g["dp"], mb=g["mb"], nics=g["nics"], ep=ex[0], etp=ex[1],
                                          cap=ex[2], kept=kept)
                         for acc in d["acc"] for rec in d["recompute"] for sp in d["sp"]]
                inputs_of = (keys_of[si], tuple(_stacked([p[k] for p in parts], rsub) for k in range(len(parts[0]))))
                del parts
            stacked = inputs_of[1]
            twin = twins.get(forms[si]) if forms is not None else None
            if exact:
                totals = [T.compute_total(sc, sched, pp_rows, stacked)]
            elif twin is not None:
                totals = compute_bounds_of_twin(sched, pp, stacked[10], twin)
            elif forms is not None:  # with the schedules of other forms its pass bounds too (bound_mates)
                mates = bound_mates(d["schedule"], forms, si, twins)
                for i, pair in zip(mates, T.compute_bounds_of(sc, [d["schedule"][i] for i in mates], pp, stacked),
                                   strict=True):
                    twins[forms[i]] = list(pair)
                totals = twins[forms[si]]
            else:
                totals = list(T.compute_bounds(sc, sched, pp, stacked))
            for out, total in zip(outs, totals, strict=False):
                out[:, :, :, si] = lay(total)
        if exact:
            return Table(name, vars, outs[0])
        self.tables["time.compute.lo"] = Table("time.compute.lo", vars, outs[0])  # exact where it can be: float64
        self.tables["time.compute.hi"] = Table("time.compute.hi", vars, round_up32(outs[1]))
        return self.tables[name]

    def sharing(self, sc: Scenario, rebuild: Iterable[str]) -> Space:
        """A space of ``sc`` on the same domains that reuses every table built here except ``rebuild``
        (and the reductions cached on them, ``_reduced``), for a scenario that differs from this one only
        in inputs those tables alone read (:data:`TASK_TABLES`, :data:`PRICE_TABLES`)."""
        drop = set(rebuild)
        if self.chance_deferred() is not None:  # the chance bound and its reductions (keyed by the chance table's
            drop |= {CHANCE_TABLE, CHANCE_BOUND}  # name) read this space's card cap: not another scenario's
        out = Space(sc=sc, domains=self.domains)
        built = {n: t for n, t in dict.items(self.tables) if n not in drop}
        dict.update(out.tables, built)
        if "_pipeline_work" in self.__dict__:
            out.__dict__["_pipeline_work"] = self.__dict__["_pipeline_work"]
        cache = self.__dict__.get("_reduced")
        if cache is not None:
            out.__dict__["_reduced"] = {k: v for k, v in cache.items() if k[0] not in drop}
        return out

    def with_sp(self, sp: bool) -> Scenario:
        """The scenario with sequence parallelism on or off (:func:`tpopt.models.terms.with_sequence_parallel`:
        the same object for the scenario's own value, so the per-operation memo keeps hitting)."""
        return T.with_sequence_parallel(self.sc, sp)

    def interval(self, tau: ArrayLike, cards: ArrayLike, mode: str) -> FloatArray:
        """Save interval in seconds for a tau choice (0 = auto: the optimum for the card count)."""
        tau = np.asarray(tau, dtype=float)
        auto = T.optimal_save_interval(self.sc, cards, mode)
        chosen: FloatArray = np.where(tau == 0.0, auto, tau)
        return chosen

    def usable(self) -> FloatArray:
        """The memory family's limit per accelerator of the space (bytes per card)."""
        return np.array([F.limit(F.MEMORY_PER_CARD, self.sc, a) for a in self.domains["acc"]])

    def host_capacity(self) -> FloatArray:
        """The host-memory family's limit per accelerator of the space (bytes per host; inf where none)."""
        return np.array([F.limit(F.MEMORY_HOST, self.sc, a) for a in self.domains["acc"]])

    # -- plans ----------------------------------------------------------------------------------
    def plan(self, idx: Mapping[str, int]) -> Plan:
        """The :class:`Plan` of an assignment given as variable -> index into its domain."""
        d = {k: self.domains[k][i] for k, i in idx.items()}
        cards = cards_of(**d)
        tau = float(self.interval(d["tau"], cards, d["mode"]))
        B = self.sc.task.global_batch
        ga = B // (d["dp"] * d["mb"]) if B % (d["dp"] * d["mb"]) == 0 else 0
        derived = {"tau": tau, "schedule": d["schedule"] if d["pp"] > 1 else self.domains["schedule"][0]}
        return Plan(cards=int(cards), grad_accum=ga, global_batch=B,
                    **plan_fields_of(d, lambda v, x: derived.get(v, x)))

    def key(self, idx: Mapping[str, int]) -> tuple[int, ...]:
        """A canonical assignment key (schedule pinned when pp = 1)."""
        i = dict(idx)
        if self.domains["pp"][i["pp"]] == 1:
            i["schedule"] = 0
        return tuple(i[v] for v in VARS)
