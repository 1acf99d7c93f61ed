"""The design space of a scenario and the term tables every backend shares.

A plan is an assignment of the base variables below, declared once in :data:`VARIABLES` (name,
Plan field, [search] domain, categorical or numeric, core layout or not). The term functions of
:mod:`tpopt.models.terms` are tabulated over the joint domain of *their own* variables only; the
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
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from tpopt.errors import InputError
from tpopt.models import context
from tpopt.models import terms as T
from tpopt.models.evaluate import CONSTRAINT_NAMES
from tpopt.models.plan import Plan, Scenario



@dataclass(frozen=True)
class Variable:
    """One decision variable, declared once: its name in the solvers, the :class:`Plan` field it
    sets (also the keyword of ``evaluate_arrays``), the ``[search]`` domain it reads (a
    :class:`SearchSpace` attribute; None: built in :meth:`Space.from_scenario`), its Python type in a
    Plan, whether term functions get it as a scalar (categorical) or as a broadcast array, and whether
    it belongs to the core layout (the hub the backends branch on and bound by; the card count is the
    product of the ``cards`` factors)."""

    name: str
    field: str
    search: str | None
    type: type = int
    categorical: bool = False
    layout: bool = False
    cards: bool = False  # a factor of the card count


VARIABLES = (
    Variable("acc", "accelerator", "accelerators", str, categorical=True, layout=True),
    Variable("tp", "tp", "tp", layout=True, cards=True),
    Variable("cp", "cp", "cp", layout=True, cards=True),  # context parallelism (models/context.py)
    Variable("pp", "pp", "pp", layout=True, cards=True),
    Variable("dp", "dp", None, layout=True, cards=True),  # divisors of the batch
    Variable("mb", "micro_batch", "micro_batch", layout=True),
    Variable("zero", "zero_stage", "zero_stage"),
    Variable("offload", "offload", "offload", str, categorical=True),
    Variable("recompute", "recompute", None, str, categorical=True),  # collapsed with a fixed reserve
    Variable("schedule", "schedule", "schedule", str, categorical=True),
    Variable("nics", "nics_per_host", None),  # per accelerator
    Variable("tau", "save_interval_s", "save_interval_s", float),
    Variable("mode", "save_mode", "save_mode", str, categorical=True),
    # the mixture-of-experts variables; a dense model's domains are (1,), (0,), (0.0,)
    Variable("ep", "ep", "ep"),
    Variable("etp", "expert_tp", "expert_tp"),
    Variable("cap", "capacity_factor", "capacity_factor", float),
    Variable("sp", "sequence_parallel", None, bool, categorical=True),  # [search] sequence_parallel, else the scenario's
)
VARS = tuple(v.name for v in VARIABLES)
CATEGORICAL = tuple(v.name for v in VARIABLES if v.categorical)
NUMERIC = tuple(v.name for v in VARIABLES if not v.categorical)
LAYOUT = tuple(v.name for v in VARIABLES if v.layout)  # the core layout: (acc, tp, cp, pp, dp, mb)
CARD_FACTORS = tuple(v.name for v in VARIABLES if v.cards)  # cards = tp x cp x pp x dp
MOE_VARS = tuple((v.name, v.field, v.type) for v in VARIABLES if v.name in ("ep", "etp", "cap"))


def cards_of(**vals):
    """The card count of a layout: the product of the card factors (arrays broadcast)."""
    out = 1
    for v in CARD_FACTORS:
        out = out * vals[v]
    return out


def card_counts(domains: dict) -> list[int]:
    """Every card count the domains can form (tp x cp x pp x dp), ascending."""
    return sorted({int(np.prod(c)) for c in itertools.product(*(domains[v] for v in CARD_FACTORS))})

# constraint families the solvers encode (step.budget is the per-step form of deadline.finish and is
# reported, not encoded twice)
FAMILIES = tuple(n for n in CONSTRAINT_NAMES if n != "step.budget")
STRUCTURAL = ("batch.divisibility", "layout.whole_hosts", "layout.tp_within_host", "layout.heads_divisible",
              "layout.pp_divides_layers", "layout.schedule_shape", "layout.ep_divides_experts", "layout.ep_group")
# the terms every backend sums: memory per card and busy time per step
MEMORY_TERMS = ("mem.states", "mem.copies", "mem.activations", "mem.temporary")
BUSY_TERMS = ("time.compute", "time.exposed_dp", "time.tp_comm", "time.offload", "time.ep_comm")
# single-table conditions decided exactly when the tables are built (family -> "ok." table)
EXACT = ("checkpoint.backlog", "memory.host", "moe.capacity_drops")


def reduce_to(domains: dict, vals: np.ndarray, vars, target_vars, fn=np.min) -> np.ndarray:
    """Reduce a table over ``vars`` with ``fn`` along the variables not in ``target_vars`` and lay it
    out on the joint grid of ``target_vars`` (broadcast along target variables it does not have)."""
    vars, target_vars = tuple(vars), tuple(target_vars)
    drop = tuple(i for i, v in enumerate(vars) if v not in target_vars)
    red = fn(vals, axis=drop) if drop else np.asarray(vals)
    kept = [v for v in vars if v in target_vars]
    red = np.transpose(red, [kept.index(v) for v in target_vars if v in kept])
    shape = [len(domains[v]) if v in kept else 1 for v in target_vars]
    return np.broadcast_to(red.reshape(shape), tuple(len(domains[v]) for v in target_vars))


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@dataclass
class Table:
    """A term tabulated over the joint domain of ``vars`` (C order, one axis per variable)."""

    name: str
    vars: tuple[str, ...]
    values: np.ndarray

    def flat(self) -> np.ndarray:
        return self.values.reshape(-1)


@dataclass
class Space:
    sc: Scenario
    domains: dict = field(default_factory=dict)

    @classmethod
    def from_scenario(cls, sc: Scenario, restrict: dict | None = None) -> "Space":
        """Domains from the scenario's [search] table, optionally restricted further by ``restrict``
        (variable -> allowed values)."""
        s = sc.search
        reserve = not T.modelled_activations(sc)
        rec = list(dict.fromkeys(T.effective_recompute(sc, r) for r in s.recompute))
        if reserve:
            rec = rec[:1]
        nics = sorted({k for a in s.accelerators for k in cls._nic_domain(sc, a)})
        built = {
            "acc": list(s.accelerators or sc.systems),
            "dp": [d for d in divisors(sc.task.global_batch) if not s.dp or d in s.dp],
            "recompute": rec,
            "nics": nics,
            # sequence parallelism changes nothing under the chapter's accounting (flat model, fixed reserve)
            "sp": (list(s.sequence_parallel) or [sc.memory.sequence_parallel])[:1 if reserve and not
                                                                              T.per_op_model(sc) else None],
        }
        dom = {v.name: built[v.name] if v.search is None or v.name in built else list(getattr(s, v.search))
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
        A = sc.system(acc).acc
        if sc.search.nics_per_host:
            return [k for k in sc.search.nics_per_host if 1 <= k <= max(A.max_nics_per_host, A.nics_per_host)]
        return [A.nics_per_host]

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

    def moe_rules(self) -> dict[str, Table]:
        """The MoE families' conditions (1 = the rule holds), each over its own few variables."""
        sc, a = self.sc, self.sc.model
        return {
            "ok.layout.ep_divides_experts": self.tabulate("ok.layout.ep_divides_experts", ("ep",),
                                                          lambda ep: (np.mod(a.experts, ep) == 0) * 1.0),
            "ok.layout.ep_group": self.tabulate("ok.layout.ep_group", ("acc", "tp", "cp", "dp", "ep", "etp"),
                                                lambda acc, tp, cp, dp, ep, etp: T.ep_group_ok(sc, acc, tp, dp, ep,
                                                                                               etp, cp) * 1.0),
            "ok.moe.capacity_drops": self.tabulate(
                "ok.moe.capacity_drops", ("tp", "cp", "mb", "cap"),
                lambda tp, cp, mb, cap: (T.capacity_drops(sc, tp, mb, cap, cp) <= sc.moe.max_drop) * 1.0),
        }

    def inert(self) -> frozenset:
        """MoE families no plan of this space can violate (all three for a dense model; capacity drops when
        every capacity is dropless or drops little enough). Reports skip them: dropping one cannot admit a
        better plan."""
        return frozenset(k[3:] for k, t in self.moe_rules().items() if bool(np.all(t.values > 0.5)))

    # -- allowed pairs that are not constraints but domain facts --------------------------------
    def nic_allowed(self) -> np.ndarray:
        """(acc, nics) pairs a host can take."""
        out = np.zeros((len(self.domains["acc"]), len(self.domains["nics"])), dtype=bool)
        for i, a in enumerate(self.domains["acc"]):
            dom = set(self._nic_domain(self.sc, a))
            for j, k in enumerate(self.domains["nics"]):
                out[i, j] = k in dom
        return out

    # -- tabulation -----------------------------------------------------------------------------
    def tabulate(self, name: str, vars: tuple[str, ...], fn) -> Table:
        """Evaluate ``fn(**{var: values})`` on the joint domain of ``vars``.

        Categorical variables are looped over (they are scalars in the term functions); numeric ones
        are passed as broadcastable open-grid arrays.
        """
        shape = tuple(len(self.domains[v]) for v in vars)
        out = np.empty(shape, dtype=float)
        cats = [v for v in vars if v in CATEGORICAL]
        nums = [v for v in vars if v not in CATEGORICAL]
        for combo in itertools.product(*(range(len(self.domains[c])) for c in cats)):
            kw = {c: self.domains[c][i] for c, i in zip(cats, combo)}
            grids = np.ix_(*[np.asarray(self.domains[v], dtype=float) for v in nums]) if nums else ()
            kw.update({v: g for v, g in zip(nums, grids)})
            val = np.asarray(fn(**kw), dtype=float)
            idx = []
            for v in vars:
                if v in CATEGORICAL:
                    idx.append(combo[cats.index(v)])
                else:
                    idx.append(slice(None))
            sub_shape = tuple(len(self.domains[v]) for v in nums)
            out[tuple(idx)] = np.broadcast_to(val, sub_shape)
        return Table(name, vars, out)

    @cached_property
    def tables(self) -> dict[str, Table]:
        """Every term table (one per relation family of :mod:`tpopt.models.terms`)."""
        sc = self.sc
        tau_vals = self.domains["tau"]
        t = {}

        def add(name, vars, fn):
            t[name] = self.tabulate(name, vars, fn)

        # MoE variables enter the tables of the terms they change (dense models leave them out: their
        # domains are single values anyway, and the tables keep their shapes)
        ep = ("ep", "etp") if sc.model.moe else ()
        cap = ("cap",) if sc.model.moe else ()
        sp_sc = self.with_sp  # sequence parallelism: the scenario with it on or off
        add("mem.states", ("zero", "offload", "tp", "cp", "pp", "dp") + ep,
            lambda zero, offload, tp, cp, pp, dp, ep=1, etp=0:
            T.states(sc, zero, offload == "cpu", tp, pp, dp, ep, etp, cp))
        add("mem.copies", ("schedule", "tp", "pp") + ep,
            lambda schedule, tp, pp, ep=1, etp=0: T.param_copies(sc, schedule, tp, pp, ep, etp))
        add("mem.activations", ("schedule", "recompute", "sp", "tp", "cp", "pp", "dp", "mb") + ep + cap,
            lambda schedule, recompute, sp, tp, cp, pp, dp, mb, ep=1, etp=0, cap=0.0:
            T.activations(sp_sc(sp), schedule, recompute, tp, pp, dp, mb, ep, etp, cap, cp))
        add("mem.temporary", ("zero", "tp", "cp", "pp", "mb") + ep + cap,
            lambda zero, tp, cp, pp, mb, ep=1, etp=0, cap=0.0: T.temporary(sc, zero, tp, pp, mb, ep, etp, cap, cp))
        add("mem.host", ("acc", "offload", "zero", "tp", "cp", "pp", "dp") + ep,
            lambda acc, offload, zero, tp, cp, pp, dp, ep=1, etp=0:
            T.host_memory(sc, acc, offload == "cpu", zero, tp, pp, dp, ep, etp, cp))
        t["time.compute"] = self._compute_table()
        add("time.exposed_dp", ("acc", "zero", "recompute", "sp", "tp", "cp", "pp", "dp", "mb", "nics") + ep + cap,
            lambda acc, zero, recompute, sp, tp, cp, pp, dp, mb, nics, ep=1, etp=0, cap=0.0:
            T.exposed_dp(sp_sc(sp), acc, zero, recompute, tp, pp, dp, mb, nics, ep, etp, cap, cp))
        add("time.tp_comm", ("acc", "recompute", "tp", "cp", "pp", "dp", "mb"),
            lambda acc, recompute, tp, cp, pp, dp, mb: T.tp_comm(sc, acc, recompute, tp, pp, dp, mb, cp))
        add("time.offload", ("acc", "offload", "zero", "recompute", "sp", "tp", "cp", "pp", "dp", "mb") + ep + cap,
            lambda acc, offload, zero, recompute, sp, tp, cp, pp, dp, mb, ep=1, etp=0, cap=0.0:
            T.offload_wait(sp_sc(sp), acc, offload == "cpu", zero, recompute, tp, pp, dp, mb, ep, etp, cap, cp))
        add("time.ep_comm", ("acc", "recompute", "schedule", "tp", "cp", "pp", "dp", "mb", "nics") + ep + cap,
            lambda acc, recompute, schedule, tp, cp, pp, dp, mb, nics, ep=1, etp=0, cap=0.0:
            T.ep_comm(sc, acc, recompute, schedule, tp, pp, dp, mb, nics, ep, etp, cap, cp))
        cf = CARD_FACTORS
        add("overhead", ("mode", "tau", *cf),
            lambda mode, tau, **f: T.overhead(sc, mode, cards_of(**f), self.interval(tau, cards_of(**f), mode)))
        add("interval", ("mode", "tau", *cf), lambda mode, tau, **f: self.interval(tau, cards_of(**f), mode))
        add("input.min_busy", ("acc", *cf),
            lambda acc, **f: sc.task.global_batch / T.input_supply(sc, acc, cards_of(**f)))
        add("rate", ("acc", *cf, "nics"), lambda acc, nics, **f: T.rate_per_second(sc, acc, cards_of(**f), nics))
        add("cards", cf, cards_of)
        # structural facts (1 = the rule holds)
        a = sc.model
        B = sc.task.global_batch
        add("ok.batch.divisibility", ("dp", "mb"), lambda dp, mb: (T.batch_remainder(sc, dp, mb) == 0) * 1.0)
        add("ok.layout.whole_hosts", ("acc", *cf),
            lambda acc, **f: (cards_of(**f) % sc.system(acc).acc.cards_per_host == 0) * 1.0)
        add("ok.layout.tp_within_host", ("acc", "tp", "cp"),
            lambda acc, tp, cp: context.placement_ok(tp, cp, sc.system(acc).acc.cards_per_host) * 1.0)
        add("ok.layout.heads_divisible", ("tp", "cp"), lambda tp, cp: context.heads_ok(a, tp, cp, sc.cp_method) * 1.0)
        per_op = T.per_op_model(sc)  # uneven stages are modelled, not ruled out
        add("ok.layout.pp_divides_layers", ("pp",), lambda pp: ((a.layers % pp == 0) | per_op) * 1.0)
        add("ok.layout.schedule_shape", ("schedule", "pp", "dp", "mb"),
            lambda schedule, pp, dp, mb: T.schedule_shape_ok(schedule, pp, dp, mb, B, sc) * 1.0)
        t.update(self.moe_rules())
        # exact single-table conditions: backlog (write time <= interval), host memory <= capacity
        write = T.checkpoint_write_time(sc)
        t["ok.checkpoint.backlog"] = Table("ok.checkpoint.backlog", t["interval"].vars,
                                           (write <= t["interval"].values) * 1.0)
        host_cap = self.host_capacity()
        h = t["mem.host"]
        shape = [1] * h.values.ndim
        shape[h.vars.index("acc")] = len(host_cap)
        t["ok.memory.host"] = Table("ok.memory.host", h.vars, (h.values <= host_cap.reshape(shape)) * 1.0)
        del tau_vals
        return t

    def _compute_table(self) -> Table:
        """The compute term, with every (accelerator, recompute) combination of a schedule stacked
        into one array so that the pipeline simulator runs once per (schedule, pp, micro-batches).
        For a MoE model the expert work depends on (ep, etp, cap) too: each distinct combination
        (T.compute_key: the load factor alone in the flat model) is stacked like another accelerator."""
        sc, d = self.sc, self.domains
        moe = ("ep", "etp", "cap") if sc.model.moe else ()
        vars = ("acc", "recompute", "sp", "schedule", "tp", "cp", "pp", "dp", "mb", "nics") + moe
        nums = ("tp", "cp", "pp", "dp", "mb", "nics")
        grids = dict(zip(nums, np.ix_(*[np.asarray(d[v], dtype=float) for v in nums])))
        sub = tuple(len(d[v]) for v in nums)
        combos = list(itertools.product(d["ep"], d["etp"], d["cap"])) if moe else [(1, 0, 0.0)]
        keys = [T.compute_key(sc, *c) for c in combos]
        unique = list(dict.fromkeys(keys))
        which = np.array([unique.index(k) for k in keys])
        reps = [combos[keys.index(k)] for k in unique]
        out = np.empty(tuple(len(d[v]) for v in vars))
        for si, sched in enumerate(d["schedule"]):
            parts = [T.compute_inputs(self.with_sp(sp), acc, rec, sched, grids["tp"], grids["pp"], grids["dp"],
                                      grids["mb"], grids["nics"], ep=e, expert_tp=t, capacity_factor=c, cp=grids["cp"])
                     for acc in d["acc"] for rec in d["recompute"] for sp in d["sp"] for e, t, c in reps]
            stacked = tuple(np.stack([np.broadcast_to(p[k], sub) for p in parts]) for k in range(len(parts[0])))
            pp = np.broadcast_to(grids["pp"], sub)[None].repeat(len(parts), axis=0)
            total = T.compute_from(sc, sched, pp, stacked)[0]
            lead = (len(d["acc"]), len(d["recompute"]), len(d["sp"]))
            total = total.reshape(lead + (len(reps),) + sub)[:, :, :, which]
            if moe:  # (acc, rec, sp, combo) + sub -> (acc, rec, sp) + sub + (ep, etp, cap)
                total = np.moveaxis(total, 3, -1).reshape(lead + sub + tuple(len(d[v]) for v in moe))
            else:
                total = total[:, :, :, 0]
            out[:, :, :, si] = total
        return Table("time.compute", vars, out)

    def with_sp(self, sp) -> Scenario:
        """The scenario with sequence parallelism on or off (the same object for the scenario's own
        value, so the per-operation memo keeps hitting)."""
        if bool(sp) == self.sc.memory.sequence_parallel:
            return self.sc
        cache = self.__dict__.setdefault("_sp_cache", {})
        if sp not in cache:
            from dataclasses import replace

            cache[sp] = replace(self.sc, memory=replace(self.sc.memory, sequence_parallel=bool(sp)))
        return cache[sp]

    def interval(self, tau, cards, mode):
        """Save interval in seconds for a tau choice (0 = auto: the optimum for the card count)."""
        tau = np.asarray(tau, dtype=float)
        auto = T.optimal_save_interval(self.sc, cards, mode)
        return np.where(tau == 0.0, auto, tau)

    def usable(self) -> np.ndarray:
        return np.array([self.sc.system(a).acc.memory_usable for a in self.domains["acc"]])

    def host_capacity(self) -> np.ndarray:
        return np.array([self.sc.system(a).acc.host_memory or np.inf for a in self.domains["acc"]])

    # -- plans ----------------------------------------------------------------------------------
    def plan(self, idx: dict) -> Plan:
        """The :class:`Plan` of an assignment given as variable -> index into its domain."""
        d = {k: self.domains[k][i] for k, i in idx.items()}
        cards = cards_of(**d)
        tau = float(self.interval(d["tau"], cards, d["mode"]))
        B = self.sc.task.global_batch
        ga = B // (d["dp"] * d["mb"]) if B % (d["dp"] * d["mb"]) == 0 else 0
        return Plan(accelerator=d["acc"], cards=int(cards), zero_stage=int(d["zero"]), tp=int(d["tp"]),
                    cp=int(d["cp"]), pp=int(d["pp"]), dp=int(d["dp"]), micro_batch=int(d["mb"]), grad_accum=ga,
                    recompute=d["recompute"], offload=d["offload"],
                    schedule=d["schedule"] if d["pp"] > 1 else self.domains["schedule"][0],
                    save_interval_s=tau, save_mode=d["mode"], nics_per_host=int(d["nics"]), global_batch=B,
                    sequence_parallel=bool(d["sp"]), **{name: typ(d[v]) for v, name, typ in MOE_VARS if v in d})

    def key(self, idx: dict) -> tuple:
        """A canonical assignment key (schedule pinned when pp = 1)."""
        i = dict(idx)
        if self.domains["pp"][i["pp"]] == 1:
            i["schedule"] = 0
        return tuple(i[v] for v in VARS)
