"""Pareto sweeps: the optimal plan at every point of a grid of scenario inputs, and the cost/finish front.

A *point* is one accelerator plus one value of every sweep input. For each point tpopt finds the
cost-minimal plan that meets every constraint (the same model ``tpopt solve`` optimises), and the
sweep reports the Pareto-optimal set of (cost, finish time) plans across all points and accelerators.

Sweep inputs
------------
Every input may be given on the command line or in a ``[sweep]`` table of the scenario file (the
command line wins, key by key). Each takes a single value, a comma list (``"20d,25d,30d"`` or a TOML
list) or an inclusive range ``"start:end:step"`` (``"20d:40d:1d"`` = 21 values). Inputs left out keep
the scenario's own value.

============ ================ ================================================= ==========================
``[sweep]``  command line     what                                              example
============ ================ ================================================= ==========================
hw           --hw             accelerators, each swept separately (one series)   ``["rtx4090", "h100-sxm"]``
deadline     --deadline       deadline ([schedule] deadline)                     ``"20d:40d:1d"``
reserved     --reserved       reserved days inside the deadline                  ``"3d,5d,7d"``
tokens       --tokens         training tokens ([task] tokens)                    ``"50B:200B:50B"``
efficiency   --efficiency     flat-model compute efficiency (MFU); 0 = per-op    ``"30%:50%:5%"``
max_cards    --max-cards      largest card count a plan may use                  ``"16:128:16"``
card_hour    --card-hour      price per card-hour for every accelerator (USD)    ``"0.4:0.8:0.1"``
max_cost     --max-cost       budget cap (USD, or card-hours without prices)     ``"15000,20000"``
solver       --solver         auto (default), enumerate, cpsat or highs          ``"auto"``
breakdown_cards --breakdown-cards  card counts for the finish-time breakdown plot  ``[32, 48]``
============ ================ ================================================= ==========================

Other scenario inputs are fixed for the whole sweep (``--usable-memory`` may still override one).
An unknown ``[sweep]`` key is an error, as in every other table.

How points are solved
---------------------
Deadline, card cap and budget only change *constraints*; the other inputs (accelerator, tokens,
efficiency, reserved days, price) change the *term tables*. Points are grouped by their
table-changing inputs. With ``--solver auto`` a group whose design space has at most
``AUTO_TABLE_LIMIT`` (300,000) plans is enumerated exactly once (:class:`PointTable`) and every
deadline/card-cap/budget point of the group is answered by a mask over that table; a larger group
falls back to one CP-SAT solve per point (:func:`tpopt.optimizer.core.solve`). ``enumerate`` forces
the table path (the whole table is held in memory), ``cpsat`` / ``highs`` force one solve per point.
All paths are exact, so they agree on the optimal cost and finish time (ties between equally good
plans may be broken differently). One exception makes the deadline a table input: a scenario with
``save_interval = "auto"`` and no failures uses the deadline as the save interval.

The front is computed among points that share the table-changing inputs other than the accelerator
(tokens, efficiency, reserved days, price), across accelerators, deadlines, card caps and budgets:
plans for different token counts are different problems and do not dominate each other.

Output and resuming
-------------------
``--out`` (``.csv``, ``.parquet`` or ``.json``) gets one row per point: the inputs, the status
(``optimal``, ``infeasible``; ``feasible`` / ``unknown`` only when a solver hit its time limit), the plan
(cards, hosts, zero, tp, pp, dp, micro_batch, grad_accum, recompute, offload, schedule, save interval
and mode, NICs), the metrics (cost, finish_days, train_days, overhead_days, step_s,
memory_per_card_gib, overhead_fraction, card_hours), for infeasible points ``fastest_days`` (the
earliest finish any plan reaches under the other constraints), ``pareto`` (on the front) and the
point key and scenario fingerprint. Rows are appended to a journal as they finish (the ``.csv``
itself, or ``<out>.journal.csv`` next to a ``.parquet`` / ``.json``) with flush and fsync; at the end
the final file is written atomically, rows sorted by their inputs, so the same inputs give the same
bytes. Re-running with the same ``--out`` skips the points already in it (a torn last line from a
killed run is discarded; unproven rows from a solver time limit are solved again). A point is
identified by its inputs plus a fingerprint of the rest of the scenario (its tables, the built model,
hardware, memory, input, checkpoint and search settings, the tpopt version): an ``--out`` written for
another scenario, or not by a tpopt sweep at all, is refused unless ``--force``. Only the points of
the current sweep are written; rows of other points found in ``--out`` are dropped (with a note).
"""

from __future__ import annotations

import csv
import hashlib
import io
import itertools
import json
import math
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np

from tpopt import __version__
from tpopt.errors import InputError
from tpopt.models.units import DAY, parse_count, parse_duration, parse_fraction, parse_int, parse_number

FORMAT = 1
AUTO_TABLE_LIMIT = 300_000  # plans per group enumerated exactly with --solver auto
MAX_VALUES = 100_000  # values one range may expand to
MAX_POINTS = 2_000_000  # points in one sweep
SOLVERS = ("auto", "enumerate", "cpsat", "highs")
OUT_FORMATS = (".csv", ".parquet", ".json")
# constraint families whose limit is a sweep input (answered by masks on the table path)
SWEPT_FAMILIES = ("deadline.finish", "cards.max", "budget.cost")


# ---------------------------------------------------------------------------------------------
# sweep inputs


@dataclass(frozen=True)
class Dim:
    """One sweepable scenario input."""

    name: str  # [sweep] key
    flag: str  # command-line flag
    raw_key: str  # scenario table.key it overrides
    kind: str  # "table" (changes term tables) or "constraint" (changes only a limit)
    parse: Callable  # (value, what) -> SI number
    step: Callable  # parser of a range step (zero allowed here, rejected with a clearer message)
    integer: bool = False


DIMS = {
    "deadline": Dim("deadline", "--deadline", "schedule.deadline", "constraint",
                    lambda v, w: parse_duration(v, w, allow_zero=False), lambda v, w: parse_duration(v, w)),
    "reserved": Dim("reserved", "--reserved", "schedule.reserved", "table", lambda v, w: parse_duration(v, w),
                    lambda v, w: parse_duration(v, w)),
    "tokens": Dim("tokens", "--tokens", "task.tokens", "table", lambda v, w: parse_count(v, w, allow_zero=False),
                  lambda v, w: parse_count(v, w)),
    "efficiency": Dim("efficiency", "--efficiency", "hardware.efficiency", "table",
                      lambda v, w: parse_fraction(v, w), lambda v, w: parse_fraction(v, w, allow_zero=True)),
    "max_cards": Dim("max_cards", "--max-cards", "search.max_cards", "constraint",
                     lambda v, w: parse_int(v, w, minimum=1), lambda v, w: parse_int(v, w, minimum=0), integer=True),
    "card_hour": Dim("card_hour", "--card-hour", "cost.card_hour", "table", lambda v, w: parse_number(v, w),
                     lambda v, w: parse_number(v, w)),
    "max_cost": Dim("max_cost", "--max-cost", "cost.max_cost", "constraint", lambda v, w: parse_number(v, w),
                    lambda v, w: parse_number(v, w)),
}
SWEEP_KEYS = ("hw", *DIMS, "solver", "breakdown_cards")


def _canon(x: float) -> float:
    """12 significant digits: range arithmetic (0.3 + 0.05 k) must not leak float noise into keys."""
    return float(f"{x:.12g}")


def _g(x: float) -> str:
    return f"{x:.12g}"


def _expand(dim: Dim, text: str, what: str) -> list:
    parts = text.split(":")
    if len(parts) != 3 or not all(p.strip() for p in parts):
        raise InputError(f"{what}: {text!r} is not a range start:end:step (e.g. 20d:40d:1d)")
    a, b = (dim.parse(p.strip(), what) for p in parts[:2])
    step = dim.step(parts[2].strip(), what)
    if step <= 0:
        raise InputError(f"{what}: {text!r}: the step must be positive")
    if b < a:
        raise InputError(f"{what}: {text!r}: the end ({parts[1].strip()}) is before the start ({parts[0].strip()})")
    n = int(math.floor((b - a) / step + 1e-9)) + 1
    if n > MAX_VALUES:
        raise InputError(f"{what}: {text!r} expands to {n:,} values (at most {MAX_VALUES:,})")
    return [a + i * step for i in range(n)]


def parse_values(dim: Dim, value, what: str) -> tuple:
    """Sorted distinct SI values of a sweep input given as one value, a comma list, a TOML list or a range."""
    items = value if isinstance(value, list) else [value]
    out = []
    for item in items:
        if isinstance(item, str):
            text = item.strip()
            if ":" in text:
                out += _expand(dim, text, what)
                continue
            pieces = [x.strip() for x in text.split(",")]
            if not text or any(not x for x in pieces):
                raise InputError(f"{what}: {item!r} has an empty value")
            out += [dim.parse(x, what) for x in pieces]
        else:
            out.append(dim.parse(item, what))
    if not out:
        raise InputError(f"{what}: no values")
    vals = sorted({int(round(v)) if dim.integer else _canon(v) for v in out})
    return tuple(vals)


def parse_names(value, what: str) -> tuple[str, ...]:
    items = value if isinstance(value, list) else str(value).split(",")
    names = [str(x).strip() for x in items]
    if not names or any(not n for n in names):
        raise InputError(f"{what}: empty accelerator name in {value!r}")
    return tuple(dict.fromkeys(names))


def parse_cards_list(value, what: str) -> tuple[int, ...]:
    items = value if isinstance(value, list) else str(value).split(",")
    return tuple(sorted({parse_int(str(x).strip() if isinstance(x, str) else x, what, minimum=1) for x in items}))


class Point(NamedTuple):
    """One sweep point: an accelerator and one value of every input (SI units; None = not set)."""

    accelerator: str
    deadline_s: float
    reserved_s: float
    tokens: float
    efficiency: float
    max_cards: int
    card_hour: float | None  # None: the catalog/scenario price of each accelerator
    max_cost: float | None  # None: no budget cap

    def key(self) -> str:
        """Stable identity of the point's inputs (the scenario fingerprint covers everything else)."""
        return (f"{self.accelerator}|deadline={_g(self.deadline_s / DAY)}d|reserved={_g(self.reserved_s / DAY)}d"
                f"|tokens={_g(self.tokens)}|efficiency={_g(self.efficiency)}|max_cards={self.max_cards}"
                f"|card_hour={'catalog' if self.card_hour is None else _g(self.card_hour)}"
                f"|max_cost={'none' if self.max_cost is None else _g(self.max_cost)}")

    def group(self, deadline_in_table: bool) -> tuple:
        """The table-changing inputs: points sharing them share one enumeration."""
        g = (self.accelerator, self.tokens, self.efficiency, self.reserved_s, self.card_hour)
        return g + ((self.deadline_s,) if deadline_in_table else ())


# ---------------------------------------------------------------------------------------------
# the sweep specification


@dataclass
class SweepSpec:
    """Everything a sweep needs, validated: the scenario tables, the swept values and the options."""

    raw: dict  # scenario tables without [sweep] (command-line fixed overrides not yet applied)
    fixed: dict  # fixed raw overrides ({"hardware.usable_memory": "20GiB"}), applied after the hardware
    catalog_dirs: tuple
    hw: tuple[str, ...]
    values: dict  # dim name -> tuple of SI values
    solver: str
    time_limit: float
    breakdown_cards: tuple[int, ...] | None
    base: object  # Scenario built with every swept accelerator (names, catalog data, defaults)
    fingerprint: str
    deadline_in_table: bool
    name: str = ""

    def points(self) -> list[Point]:
        v = self.values
        out = []
        for acc in self.hw:
            for d, r, t, e, mc, ch, mx in itertools.product(v["deadline"], v["reserved"], v["tokens"],
                                                           v["efficiency"], v["max_cards"], v["card_hour"],
                                                           v["max_cost"]):
                out.append(Point(acc, d, r, t, e, mc, ch, mx))
        return out

    def size(self) -> int:
        n = len(self.hw)
        for vals in self.values.values():
            n *= len(vals)
        return n

    def swept(self) -> list[str]:
        """The inputs that take more than one value (plus hw when more than one accelerator)."""
        out = ["hw"] if len(self.hw) > 1 else []
        return out + [k for k, vals in self.values.items() if len(vals) > 1]

    @property
    def plot_deadline_days(self) -> float:
        """The deadline drawn on the breakdown plot: the single swept value, else the scenario's own."""
        d = self.values["deadline"]
        return (d[0] if len(d) == 1 else self.base.task.deadline_s) / DAY


def _file_default_card_hour(raw: dict):
    v = raw.get("cost", {}).get("card_hour") if isinstance(raw.get("cost"), dict) else None
    return None if v is None else parse_number(v, "cost.card_hour")


def build_spec(scenario_path, cli: dict | None = None, catalog_dirs=(), fixed: dict | None = None) -> SweepSpec:
    """Read the scenario and its ``[sweep]`` table, apply the command-line values (``cli``: key of
    :data:`SWEEP_KEYS` -> text or None) and validate everything before any work is done."""
    from tpopt.catalogs import load_catalog
    from tpopt.catalogs.scenario import build_scenario, read_scenario_file, with_overrides

    cli = {k: v for k, v in (cli or {}).items() if v is not None}
    unknown = set(cli) - set(SWEEP_KEYS) - {"time_limit"}
    if unknown:
        raise InputError(f"unknown sweep option(s) {sorted(unknown)}")
    raw = read_scenario_file(scenario_path)
    table = raw.pop("sweep", {})
    if not isinstance(table, dict):
        raise InputError("scenario: [sweep] must be a table")
    bad = sorted(set(table) - set(SWEEP_KEYS))
    if bad:
        raise InputError(f"scenario: unknown key(s) {bad} in [sweep] (known: {', '.join(SWEEP_KEYS)})")
    fixed = {k: v for k, v in (fixed or {}).items() if v is not None}
    catalog_dirs = tuple(str(d) for d in catalog_dirs or ())
    catalog = load_catalog(catalog_dirs)

    def source(key):
        if key in cli:
            return cli[key], f"--{key.replace('_', '-')}"
        if key in table:
            return table[key], f"[sweep] {key}"
        return None, None

    # the scenario as the file gives it (validates every table, the model and the hardware names)
    base0 = build_scenario(with_overrides(raw, fixed), catalog)
    hw_value, hw_what = source("hw")
    hw = parse_names(hw_value, hw_what) if hw_value is not None else tuple(base0.search.accelerators)
    for name in hw:
        catalog.accelerator(name)  # unknown name -> one clear error
    base = build_scenario(with_overrides(with_overrides(raw, {"hardware.accelerator": list(hw),
                                                              "search.accelerator": list(hw)}), fixed), catalog)
    defaults = {
        "deadline": (base.task.deadline_s,),
        "reserved": (base.task.reserved_s,),
        "tokens": (base.task.tokens,),
        # 0 marks the per-operation model (no flat efficiency stated); a swept efficiency selects the flat model
        "efficiency": (0.0 if base.systems[hw[0]].per_op else base.systems[hw[0]].efficiency,),
        "max_cards": (base.search.max_cards,),
        "card_hour": (_file_default_card_hour(raw),),
        "max_cost": (base.cost.max_cost,),
    }
    values = {}
    for name, dim in DIMS.items():
        value, what = source(name)
        values[name] = parse_values(dim, value, what) if value is not None else defaults[name]

    solver_value, solver_what = source("solver")
    solver = str(solver_value or "auto")
    if solver not in SOLVERS:
        raise InputError(f"{solver_what}: unknown solver {solver!r} (use one of: {', '.join(SOLVERS)})")
    time_limit = float(cli.get("time_limit", 60.0))
    if not time_limit > 0:
        raise InputError("--time-limit must be positive")
    bc_value, bc_what = source("breakdown_cards")
    breakdown = parse_cards_list(bc_value, bc_what) if bc_value is not None else None

    rel = base.reliability
    deadline_in_table = any(t == 0.0 for t in base.search.save_interval_s) and rel.card_mtbf_s is None \
        and not rel.event_interval_s
    spec = SweepSpec(raw=raw, fixed=fixed, catalog_dirs=catalog_dirs, hw=hw, values=values, solver=solver,
                     time_limit=time_limit, breakdown_cards=breakdown, base=base, fingerprint="",
                     deadline_in_table=deadline_in_table, name=base.name)
    n = spec.size()
    if n > MAX_POINTS:
        raise InputError(f"the sweep has {n:,} points (at most {MAX_POINTS:,}); use coarser ranges")
    spec.fingerprint = fingerprint(spec)
    return spec


def fingerprint(spec: SweepSpec) -> str:
    """Hash of everything a point's result depends on that is not in its key."""
    raw = {k: v for k, v in spec.raw.items() if not k.startswith("_")}
    raw = json.loads(json.dumps(raw, default=str))
    for dim in DIMS.values():
        table, _, key = dim.raw_key.partition(".")
        if isinstance(raw.get(table), dict):
            raw[table].pop(key, None)
    if isinstance(raw.get("search"), dict):
        raw["search"].pop("accelerator", None)
    if isinstance(raw.get("scenario"), dict):
        raw["scenario"].pop("description", None)
    b = spec.base
    parts = {
        "format": FORMAT,
        "tpopt": __version__,
        "raw": raw,
        "fixed": spec.fixed,
        # built values: what catalog entries (model, accelerators, NICs, storage tiers) resolved to
        "model": repr(b.model),
        "accelerators": {name: repr((b.systems[name].acc, b.systems[name].perf)) for name in spec.hw},
        "built": repr((b.memory, b.input, b.reliability, b.overlap, b.task.seq_len, b.task.global_batch,
                       b.task.precision, replace(b.search, accelerators=(), max_cards=0))),
    }
    text = json.dumps(parts, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------------------------
# rows


COLUMNS = {  # name -> type (None allowed everywhere)
    "point_key": str,
    "accelerator": str, "deadline_days": float, "reserved_days": float, "tokens": float, "efficiency": float,
    "max_cards": int, "card_hour": float, "max_cost": float,
    "status": str,
    "cards": int, "hosts": int, "zero": int, "tp": int, "pp": int, "dp": int, "micro_batch": int,
    "grad_accum": int, "recompute": str, "offload": str, "schedule": str, "save_interval_s": float,
    "save_mode": str, "nics_per_host": int,
    "cost": float, "cost_unit": str, "finish_days": float, "train_days": float, "overhead_days": float,
    "step_s": float, "memory_per_card_gib": float, "overhead_fraction": float,
    "card_hours": float, "price_card_hour": float,
    "fastest_days": float, "solver": str, "pareto": bool, "fingerprint": str,
}
COLUMN_NAMES = tuple(COLUMNS)
PLAN_COLUMNS = ("cards", "hosts", "zero", "tp", "pp", "dp", "micro_batch", "grad_accum", "recompute", "offload",
                "schedule", "save_interval_s", "save_mode", "nics_per_host")
FEASIBLE = ("optimal", "feasible")
PROVEN = ("optimal", "infeasible")


def _clean(v, typ):
    if v is None:
        return None
    if typ is bool:
        return bool(v)
    if typ is int:
        return int(v)
    if typ is float:
        x = float(v)
        return x if math.isfinite(x) else None
    s = str(v)
    return s or None


def make_row(point: Point, status: str, fingerprint_: str, solver: str, ev=None, fastest_s=None,
             price=None) -> dict:
    row = dict.fromkeys(COLUMN_NAMES)
    row.update(point_key=point.key(), accelerator=point.accelerator, deadline_days=point.deadline_s / DAY,
               reserved_days=point.reserved_s / DAY, tokens=point.tokens, efficiency=point.efficiency,
               max_cards=point.max_cards, card_hour=point.card_hour, max_cost=point.max_cost, status=status,
               solver=solver, fingerprint=fingerprint_, price_card_hour=price)
    if ev is not None:
        p, m = ev.plan_dict(), ev.metrics
        row.update(cards=p["cards"], hosts=p["hosts"], zero=p["zero_stage"], tp=p["tp"], pp=p["pp"], dp=p["dp"],
                   micro_batch=p["micro_batch"], grad_accum=p["grad_accum"], recompute=p["recompute"],
                   offload=p["offload"], schedule=p["schedule"], save_interval_s=p["save_interval_s"],
                   save_mode=p["save_mode"], nics_per_host=p["nics_per_host"], cost=m["cost"],
                   cost_unit=m["cost_unit"], finish_days=m["finish_days"], train_days=m["train_days"],
                   overhead_days=m["train_days"] * m["overhead_fraction"], step_s=m["step_s"],
                   memory_per_card_gib=m["memory_per_card_gib"],
                   overhead_fraction=m["overhead_fraction"], card_hours=m["card_hours"])
    if fastest_s is not None:
        row["fastest_days"] = fastest_s / DAY
    return {k: _clean(row[k], COLUMNS[k]) for k in COLUMN_NAMES}


def sort_key(row: dict) -> tuple:
    def num(x, none):
        return none if x is None else x

    return (row["tokens"], row["efficiency"], num(row["card_hour"], -1.0), row["reserved_days"], row["accelerator"],
            num(row["max_cost"], math.inf), row["max_cards"], row["deadline_days"], row["point_key"])


def case_of(row: dict) -> tuple:
    """Rows sharing a case compete on one front (everything but accelerator and constraint limits)."""
    return (row["tokens"], row["efficiency"], row["card_hour"], row["reserved_days"])


def mark_pareto(rows: list[dict]) -> None:
    """Set ``pareto`` on every row: True iff its (cost, finish) is not dominated within its case."""
    by_case: dict = {}
    for r in rows:
        r["pareto"] = False
        if r["status"] in FEASIBLE and r["cost"] is not None:
            by_case.setdefault(case_of(r), []).append(r)
    for members in by_case.values():
        pairs = sorted({(r["finish_days"], r["cost"]) for r in members})
        front, best = set(), math.inf
        for fin, cost in pairs:
            if cost < best:
                front.add((fin, cost))
                best = cost
        for r in members:
            r["pareto"] = (r["finish_days"], r["cost"]) in front


# ---------------------------------------------------------------------------------------------
# workers (run in child processes; everything they need travels in the task)


@dataclass(frozen=True)
class _Payload:
    raw: dict
    fixed: dict
    catalog_dirs: tuple
    fingerprint: str
    solver: str
    time_limit: float
    deadline_in_table: bool


_CACHE: dict = {}


def _catalog(dirs: tuple):
    from tpopt.catalogs import load_catalog

    key = ("catalog", dirs)
    if key not in _CACHE:
        _CACHE[key] = load_catalog(dirs)
    return _CACHE[key]


def group_scenario(payload: _Payload, point: Point, deadline_s: float | None = None):
    """The scenario of a point's group: its accelerator and table-changing inputs (the deadline is
    the point's when it is a table input, else any valid value; card cap and budget are lifted)."""
    from tpopt.catalogs.scenario import build_scenario, with_overrides

    d = point.deadline_s if deadline_s is None else deadline_s
    key = ("group", payload.fingerprint, point.group(payload.deadline_in_table),
           d if payload.deadline_in_table else None)
    sc = _CACHE.get(key)
    if sc is None:
        raw = with_overrides(payload.raw, {"hardware.accelerator": [point.accelerator],
                                           "search.accelerator": [point.accelerator]})
        ov = dict(payload.fixed)
        ov.update({"task.tokens": point.tokens, "hardware.efficiency": point.efficiency or None,
                   "schedule.reserved": f"{point.reserved_s!r}s",
                   "schedule.deadline": f"{max(d, point.reserved_s + DAY)!r}s",
                   "cost.card_hour": point.card_hour})
        sc = build_scenario(with_overrides(raw, ov), _catalog(payload.catalog_dirs))
        sc = replace(sc, search=replace(sc.search, max_cards=10**9), cost=replace(sc.cost, max_cost=None))
        if len(_CACHE) > 256:
            _CACHE.clear()
        _CACHE[key] = sc
    return replace(sc, task=replace(sc.task, deadline_s=d))


def point_scenario(sc, point: Point):
    """A group scenario with the point's deadline, card cap and budget."""
    return replace(sc, task=replace(sc.task, deadline_s=point.deadline_s),
                   search=replace(sc.search, max_cards=point.max_cards),
                   cost=replace(sc.cost, max_cost=point.max_cost))


def _table_rows(payload: _Payload, points: list[Point]) -> list[dict]:
    """One exact enumeration for a group; every point answered by a mask over it."""
    from tpopt.models.evaluate import evaluate
    from tpopt.optimizer.core import feasible_for
    from tpopt.optimizer.enumerate import PointTable
    from tpopt.optimizer.space import FAMILIES, VARS, Space

    first = points[0]
    sc = group_scenario(payload, first, None if payload.deadline_in_table else max(p.deadline_s for p in points))
    price = sc.system(first.accelerator).price_card_hour
    space = Space.from_scenario(sc)
    table = PointTable.build(space)
    static = [f for f in FAMILIES if f not in SWEPT_FAMILIES]
    sel = np.flatnonzero(table.mask(enforced=static))
    # best-first by (cost, finish, enumeration order): PointTable.best's order
    by_cost = sel[np.lexsort((sel, table.finish[sel], table.cost[sel]))]
    by_finish = sel[np.lexsort((sel, table.cost[sel], table.finish[sel]))]
    c_cost, c_fin, c_cards = table.cost[by_cost], table.finish[by_cost], table.cards[by_cost]
    f_cost, f_fin, f_cards = table.cost[by_finish], table.finish[by_finish], table.cards[by_finish]
    evals: dict = {}
    rows = []
    for p in points:
        cap = np.inf if p.max_cost is None else p.max_cost
        ok = (c_fin <= p.deadline_s) & (c_cards <= p.max_cards) & (c_cost <= cap)
        if ok.any():
            i = int(by_cost[int(np.argmax(ok))])
            ev = evals.get(i)
            if ev is None:
                ev = evaluate(sc, space.plan({v: int(table.idx[v][i]) for v in VARS}))
                if not feasible_for(ev, static):  # the table and the evaluator are the same code
                    raise RuntimeError(f"sweep: enumerated plan {ev.plan} fails re-evaluation")
                evals[i] = ev
            rows.append(make_row(p, "optimal", payload.fingerprint, "enumerate", ev=ev, price=price))
        else:
            ok2 = (f_cards <= p.max_cards) & (f_cost <= cap)
            fastest = float(f_fin[int(np.argmax(ok2))]) if ok2.any() else None
            rows.append(make_row(p, "infeasible", payload.fingerprint, "enumerate", fastest_s=fastest, price=price))
    return rows


def _solve_rows(payload: _Payload, point: Point, backend: str) -> list[dict]:
    """One exact solve for one point (for spaces too large to enumerate)."""
    from tpopt.optimizer.core import solve
    from tpopt.optimizer.result import Request
    from tpopt.optimizer.space import FAMILIES

    sc = point_scenario(group_scenario(payload, point), point)
    price = sc.system(point.accelerator).price_card_hour
    res = solve(sc, backend, Request(objective="cost", time_limit=payload.time_limit, workers=1))
    if res.feasible:
        return [make_row(point, res.status.value, payload.fingerprint, backend, ev=res.best, price=price)]
    fastest = None
    if res.status.value == "infeasible":
        enforce = frozenset(f for f in FAMILIES if f != "deadline.finish")
        fr = solve(sc, backend, Request(objective="time", enforce=enforce, time_limit=payload.time_limit, workers=1))
        if fr.feasible and fr.status.value == "optimal":
            fastest = fr.best.metrics["finish_days"] * DAY
    return [make_row(point, res.status.value, payload.fingerprint, backend, fastest_s=fastest, price=price)]


def run_task(task) -> list[dict]:
    """Entry point of a worker: ("table", payload, points) or (backend, payload, [point])."""
    kind, payload, points = task
    if kind == "table":
        return _table_rows(payload, points)
    return _solve_rows(payload, points[0], kind)


def _payload(spec: SweepSpec) -> _Payload:
    return _Payload(raw=spec.raw, fixed=spec.fixed, catalog_dirs=spec.catalog_dirs, fingerprint=spec.fingerprint,
                    solver=spec.solver, time_limit=spec.time_limit, deadline_in_table=spec.deadline_in_table)


def space_size(spec: SweepSpec, accelerator: str) -> int:
    from tpopt.optimizer.space import Space

    return Space.from_scenario(spec.base, restrict={"acc": [accelerator]}).size()


def plan_tasks(spec: SweepSpec, points: list[Point]) -> list[tuple]:
    """Table tasks (one per group) or solve tasks (one per point), per the solver choice."""
    payload = _payload(spec)
    sizes = {acc: space_size(spec, acc) for acc in spec.hw} if spec.solver == "auto" else {}
    groups: dict = {}
    for p in points:
        groups.setdefault(p.group(spec.deadline_in_table), []).append(p)
    tasks = []
    for g in sorted(groups, key=lambda g: tuple((x is None, x) for x in g)):
        members = sorted(groups[g], key=lambda p: p.key())
        acc = members[0].accelerator
        if spec.solver == "enumerate" or (spec.solver == "auto" and sizes[acc] <= AUTO_TABLE_LIMIT):
            tasks.append(("table", payload, members))
        else:
            backend = "cpsat" if spec.solver == "auto" else spec.solver
            tasks += [(backend, payload, [p]) for p in members]
    return tasks


# ---------------------------------------------------------------------------------------------
# output files: journal (append, fsync) and final file (atomic, sorted)


HEADER = ",".join(COLUMN_NAMES)


def _cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def _csv_line(row: dict) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow([_cell(row[c]) for c in COLUMN_NAMES])
    return buf.getvalue()


def _parse_csv_line(line: str) -> dict | None:
    try:
        cells = next(csv.reader([line]))
    except (csv.Error, StopIteration):
        return None
    if len(cells) != len(COLUMN_NAMES):
        return None
    row = {}
    try:
        for (name, typ), text in zip(COLUMNS.items(), cells):
            if text == "":
                row[name] = None
            elif typ is bool:
                if text not in ("true", "false"):
                    return None
                row[name] = text == "true"
            else:
                row[name] = typ(text)
    except ValueError:
        return None
    if not row["point_key"] or not row["fingerprint"] or not row["status"]:
        return None
    return row


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(str(path), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Write to a temporary file in the same directory, fsync, rename over ``path``."""
    tmp = path.parent / f".{path.name}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise InputError(f"cannot write {str(path)!r} ({exc.strerror or exc})") from None
    _fsync_dir(path.parent)


def check_output_path(path, what: str = "--out", formats=OUT_FORMATS) -> Path:
    """The output must have a known extension, live in an existing writable directory and not be a
    directory itself (checked before any work, so a bad path costs nothing)."""
    p = Path(path)
    if p.suffix.lower() not in formats:
        raise InputError(f"{what}: {str(p)!r} must end in {', '.join(formats)}")
    if p.is_dir():
        raise InputError(f"{what}: {str(p)!r} is a directory")
    folder = p.parent if str(p.parent) else Path(".")
    if not folder.is_dir():
        raise InputError(f"{what}: directory {str(folder)!r} does not exist")
    if p.exists() and not os.access(p, os.W_OK):
        raise InputError(f"{what}: {str(p)!r} is not writable")
    probe = folder / f".{p.name}.probe{os.getpid()}"
    try:
        with open(probe, "wb"):
            pass
        probe.unlink()
    except OSError as exc:
        raise InputError(f"{what}: cannot write in {str(folder)!r} ({exc.strerror or exc})") from None
    return p


class NotOurs(Exception):
    """The file exists but was not written by a tpopt sweep (or not of this scenario)."""


class SweepStore:
    """The sweep's output file and its journal.

    ``.csv``: the file itself is the journal (rows appended as they finish, rewritten sorted at the
    end). ``.parquet`` / ``.json``: rows go to ``<out>.journal.csv`` and the final file is written
    atomically from it; the journal is removed afterwards.
    """

    def __init__(self, path, fingerprint_: str, force: bool = False):
        self.path = check_output_path(path)
        self.fmt = self.path.suffix.lower()
        self.journal = self.path if self.fmt == ".csv" else self.path.with_name(self.path.name + ".journal.csv")
        self.fingerprint = fingerprint_
        self.force = force
        self.discarded = 0  # torn or unreadable journal lines dropped on load
        self._fh = None

    # -- reading ------------------------------------------------------------------------------
    def _read_csv(self, path: Path) -> list[dict]:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise InputError(f"cannot read {str(path)!r} ({exc.strerror})") from None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise NotOurs(path) from None
        if not text.startswith(HEADER + "\n"):
            raise NotOurs(path)
        lines = text[len(HEADER) + 1:].split("\n")
        if lines[-1] != "":
            self.discarded += 1  # torn last line of a killed run
        rows = []
        for line in lines[:-1]:
            row = _parse_csv_line(line)
            if row is None:
                self.discarded += 1
            else:
                rows.append(row)
        return rows

    def _read_json(self, path: Path) -> list[dict]:
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise InputError(f"cannot read {str(path)!r} ({exc.strerror})") from None
        except (ValueError, UnicodeDecodeError):
            raise NotOurs(path) from None
        meta = d.get("tpopt_sweep") if isinstance(d, dict) else None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("columns") != list(COLUMN_NAMES):
            raise NotOurs(path)
        rows = d.get("rows")
        if not isinstance(rows, list) or any(not isinstance(r, dict) or list(r) != list(COLUMN_NAMES) for r in rows):
            raise NotOurs(path)
        return [{k: _clean(r[k], COLUMNS[k]) for k in COLUMN_NAMES} for r in rows]

    def _read_parquet(self, path: Path) -> list[dict]:
        import pyarrow.parquet as pq

        try:
            t = pq.read_table(path)
        except OSError as exc:
            if not path.exists():
                raise InputError(f"cannot read {str(path)!r}") from None
            raise NotOurs(path) from exc
        except Exception:  # pyarrow raises ArrowInvalid (a ValueError) for non-parquet data
            raise NotOurs(path) from None
        meta = (t.schema.metadata or {}).get(b"tpopt_sweep")
        try:
            m = json.loads(meta) if meta else None
        except ValueError:
            m = None
        if not isinstance(m, dict) or m.get("format") != FORMAT or t.column_names != list(COLUMN_NAMES):
            raise NotOurs(path)
        return [{k: _clean(r[k], COLUMNS[k]) for k in COLUMN_NAMES} for r in t.to_pylist()]

    def _read(self, path: Path) -> list[dict]:
        if path == self.journal or path.suffix.lower() == ".csv":
            return self._read_csv(path)
        return self._read_json(path) if self.fmt == ".json" else self._read_parquet(path)

    def load(self) -> dict:
        """Rows already computed for this scenario: key -> row. Refuses files that are not ours."""
        if self.force:
            return {}
        done: dict = {}
        paths = [self.path] if self.journal == self.path else [self.path, self.journal]
        for path in paths:
            if not path.exists():
                continue
            try:
                rows = self._read(path)
            except NotOurs:
                raise InputError(f"{str(path)!r} exists and was not written by a tpopt sweep; "
                                 f"choose another --out or pass --force to overwrite it") from None
            other = sorted({r["fingerprint"] for r in rows} - {self.fingerprint})
            if other:
                raise InputError(f"{str(path)!r} holds a sweep of a different scenario (fingerprint {other[0]}, "
                                 f"now {self.fingerprint}); choose another --out or pass --force to overwrite it")
            for r in rows:
                r["pareto"] = None
                done[r["point_key"]] = r
        return done

    # -- writing ------------------------------------------------------------------------------
    def begin(self, rows: list[dict]) -> None:
        """Start the journal with the rows kept from earlier runs (atomically, torn lines dropped)."""
        body = HEADER + "\n" + "".join(_csv_line(r) for r in sorted(rows, key=sort_key))
        atomic_write(self.journal, body.encode("utf-8"))
        self._fh = open(self.journal, "a", encoding="utf-8", newline="")

    def append(self, rows: list[dict]) -> None:
        if not rows:
            return
        self._fh.write("".join(_csv_line(r) for r in rows))
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def finalize(self, rows: list[dict]) -> None:
        """Write the final file atomically (rows sorted) and drop a separate journal."""
        self.close()
        atomic_write(self.path, encode(rows, self.fmt, self.fingerprint))
        if self.journal != self.path:
            try:
                self.journal.unlink()
            except FileNotFoundError:
                pass
            _fsync_dir(self.path.parent)


def encode(rows: list[dict], fmt: str, fingerprint_: str) -> bytes:
    """The bytes of a final output file (rows in the given order; callers sort them)."""
    if fmt == ".csv":
        return (HEADER + "\n" + "".join(_csv_line(r) for r in rows)).encode("utf-8")
    meta = {"format": FORMAT, "tpopt": __version__, "fingerprint": fingerprint_, "columns": list(COLUMN_NAMES)}
    if fmt == ".json":
        body = ",\n".join(json.dumps(r, ensure_ascii=False, allow_nan=False, separators=(",", ":")) for r in rows)
        head = json.dumps(meta, separators=(",", ":"))
        return (f'{{"tpopt_sweep":{head},\n"rows":[\n{body}\n]}}\n' if rows
                else f'{{"tpopt_sweep":{head},\n"rows":[]}}\n').encode("utf-8")
    import pyarrow as pa
    import pyarrow.parquet as pq

    types = {str: pa.string(), float: pa.float64(), int: pa.int64(), bool: pa.bool_()}
    arrays = [pa.array([r[c] for r in rows], type=types[t]) for c, t in COLUMNS.items()]
    table = pa.Table.from_arrays(arrays, names=list(COLUMN_NAMES))
    table = table.replace_schema_metadata({"tpopt_sweep": json.dumps(meta, separators=(",", ":"))})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue().to_pybytes()


# ---------------------------------------------------------------------------------------------
# running


class Progress:
    """What a sweep reports while it runs (the CLI draws a bar; the default does nothing)."""

    def start(self, total: int, done: int) -> None:  # noqa: D102
        pass

    def advance(self, n: int) -> None:  # noqa: D102
        pass

    def stop(self) -> None:  # noqa: D102
        pass


@dataclass
class SweepResult:
    spec: SweepSpec
    rows: list[dict]  # one per point, sorted by sort_key, ``pareto`` set
    computed: int = 0  # points solved in this run
    reused: int = 0  # points taken from an earlier run's --out
    dropped: int = 0  # rows of an earlier run for points outside this sweep
    discarded: int = 0  # torn/unreadable journal lines dropped on resume
    wall_s: float = 0.0
    tasks: int = 0
    workers: int = 1
    paths: dict = field(default_factory=dict)  # "table" / solver -> points solved that way

    def front(self) -> list[dict]:
        return front_plans(self.rows)

    def summary(self) -> list[dict]:
        return summarize(self.rows, self.spec.hw)


def default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def _pool(n: int):
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    methods = multiprocessing.get_all_start_methods()
    # fork: workers start instantly with everything imported; they are forked at the first submit,
    # before the caller's progress display starts any thread.
    ctx = multiprocessing.get_context("fork" if "fork" in methods else None)
    return ProcessPoolExecutor(max_workers=n, mp_context=ctx, initializer=_worker_init)


def _worker_init() -> None:
    """Workers never see Ctrl-C; the parent gets it and stops them.

    Blocked, not just ignored: CP-SAT installs its own SIGINT handler for each solve (it would cut the
    search short and return an unproven plan, which the journal would keep) and leaves the default action
    behind (the next Ctrl-C would kill the worker and break the pool). A blocked signal reaches neither.
    """
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


def _stop_pool(ex) -> None:
    """Cancel what has not started and stop the workers now (their rows are lost, nothing else)."""
    procs = list((getattr(ex, "_processes", None) or {}).values())
    ex.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        try:
            proc.terminate()
        except (OSError, AttributeError):
            pass


def _preload(kinds) -> None:
    """Import the solver backends once in the parent, so forked workers do not each pay for it."""
    import importlib

    from tpopt.optimizer import core, enumerate as _enumerate  # noqa: F401

    for kind in kinds:
        if kind in ("cpsat", "highs"):
            importlib.import_module(f"tpopt.optimizer.{kind}")


def run_sweep(spec: SweepSpec, *, out=None, force: bool = False, workers: int | None = None,
              progress: Progress | None = None) -> SweepResult:
    """Solve every point of ``spec`` (skipping those already in ``out``), write ``out`` and return
    the rows with the Pareto flags set."""
    from concurrent.futures import FIRST_COMPLETED, wait

    t0 = time.perf_counter()
    progress = progress or Progress()
    points = spec.points()
    keys = {p.key() for p in points}
    store = SweepStore(out, spec.fingerprint, force) if out is not None else None
    done: dict = {}
    dropped = 0
    if store is not None:
        prior = store.load()
        # proven rows are reused; a plan a solver found without proof (time limit) is solved again
        done = {k: r for k, r in prior.items() if k in keys and r["status"] in PROVEN}
        dropped = len(prior) - len(done)
        store.begin(list(done.values()))
    todo = [p for p in points if p.key() not in done]
    tasks = plan_tasks(spec, todo)
    n_workers = max(1, min(workers or default_workers(), len(tasks)))
    # solver tasks always run in worker processes, even one: see _worker_init (Ctrl-C and CP-SAT)
    in_process = n_workers <= 1 and all(t[0] == "table" for t in tasks)
    new: dict = {}
    paths: dict = {}

    def take(task, rows):
        if store is not None:
            store.append(rows)
        for r in rows:
            new[r["point_key"]] = r
        paths[task[0]] = paths.get(task[0], 0) + len(rows)
        progress.advance(len(rows))

    try:
        if in_process:
            progress.start(len(points), len(done))
            for task in tasks:
                take(task, run_task(task))
        else:
            _preload({t[0] for t in tasks})
            ex = _pool(n_workers)
            try:
                futures = {ex.submit(run_task, t): t for t in tasks}
                progress.start(len(points), len(done))
                pending = set(futures)
                while pending:
                    finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for f in sorted(finished, key=lambda f: futures[f][2][0].key()):
                        take(futures[f], f.result())
            except BaseException:
                _stop_pool(ex)
                raise
            ex.shutdown(wait=True)
    finally:
        progress.stop()
        if store is not None:
            store.close()
    rows = list(done.values()) + list(new.values())
    mark_pareto(rows)
    rows.sort(key=sort_key)
    if store is not None:
        store.finalize(rows)
    return SweepResult(spec=spec, rows=rows, computed=len(new), reused=len(done), dropped=dropped,
                       discarded=store.discarded if store else 0, wall_s=time.perf_counter() - t0,
                       tasks=len(tasks), workers=n_workers, paths=paths)


# ---------------------------------------------------------------------------------------------
# reading the result: front, per-accelerator summary, plot series, breakdown bars


def _plan_id(row: dict) -> tuple:
    return (case_of(row), row["accelerator"]) + tuple(row[c] for c in PLAN_COLUMNS) + (row["cost"], row["finish_days"])


def front_plans(rows: list[dict]) -> list[dict]:
    """The Pareto-optimal plans (one entry per distinct plan), fastest first, with the deadlines
    for which each one is the optimum."""
    plans: dict = {}
    for r in rows:
        if not r["pareto"]:
            continue
        pid = _plan_id(r)
        e = plans.get(pid)
        if e is None:
            e = plans[pid] = {k: r[k] for k in ("accelerator", "tokens", "efficiency", "card_hour", "reserved_days",
                                                *PLAN_COLUMNS, "cost", "cost_unit", "finish_days", "train_days",
                                                "overhead_days", "step_s", "memory_per_card_gib",
                                                "overhead_fraction")}
            e["deadlines"] = []
            e["points"] = 0
        e["deadlines"].append(r["deadline_days"])
        e["points"] += 1
    out = []
    for e in plans.values():
        ds = sorted(set(e.pop("deadlines")))
        e["deadline_min_days"], e["deadline_max_days"] = ds[0], ds[-1]
        out.append(e)
    out.sort(key=lambda e: (e["tokens"], e["efficiency"], -1 if e["card_hour"] is None else e["card_hour"],
                            e["reserved_days"], e["finish_days"], e["cost"], e["accelerator"]))
    return out


def summarize(rows: list[dict], hw=()) -> list[dict]:
    """Per accelerator (and case): points, feasible count, earliest feasible deadline, cheapest and
    fastest optimal plans, the distinct card counts chosen."""
    order = {a: i for i, a in enumerate(hw)}
    groups: dict = {}
    for r in rows:
        groups.setdefault((case_of(r), r["accelerator"]), []).append(r)
    out = []
    for (case, acc), members in groups.items():
        feas = [r for r in members if r["status"] in FEASIBLE]
        inf = [r for r in members if r["status"] not in FEASIBLE]
        e = {"accelerator": acc, "tokens": case[0], "efficiency": case[1], "card_hour": case[2],
             "reserved_days": case[3], "points": len(members), "feasible": len(feas), "infeasible": len(inf),
             "earliest_deadline_days": min((r["deadline_days"] for r in feas), default=None),
             "cheapest": None, "fastest": None, "cards_chosen": sorted({r["cards"] for r in feas}),
             "on_front": sum(1 for r in members if r["pareto"]),
             "fastest_possible_days": min((r["fastest_days"] for r in inf if r["fastest_days"] is not None),
                                          default=None)}
        if feas:
            c = min(feas, key=lambda r: (r["cost"], r["finish_days"]))
            f = min(feas, key=lambda r: (r["finish_days"], r["cost"]))
            e["cheapest"] = {k: c[k] for k in ("cards", "cost", "finish_days", "deadline_days")}
            e["fastest"] = {k: f[k] for k in ("cards", "cost", "finish_days", "deadline_days")}
            e["fastest_possible_days"] = f["finish_days"]
        out.append(e)
    out.sort(key=lambda e: (e["tokens"], e["efficiency"], -1 if e["card_hour"] is None else e["card_hour"],
                            e["reserved_days"], order.get(e["accelerator"], len(order)), e["accelerator"]))
    return out


def case_label(case: tuple, spec: SweepSpec) -> str:
    """A short label of a case's swept table inputs ('' when only one case exists)."""
    tokens, eff, price, reserved = case
    parts = []
    if len(spec.values["tokens"]) > 1:
        parts.append(f"{tokens / 1e9:g}B tok")
    if len(spec.values["efficiency"]) > 1:
        parts.append(f"MFU {eff * 100:g}%")
    if len(spec.values["card_hour"]) > 1:
        parts.append("catalog $" if price is None else f"${price:g}/h")
    if len(spec.values["reserved"]) > 1:
        parts.append(f"res {reserved:g}d")
    return ", ".join(parts)


def _case_order(case: tuple) -> tuple:
    return tuple((x is None, x) for x in case)


def plot_series(result: SweepResult) -> dict:
    """Data for the cost/finish plot: one series per accelerator (and case) with its distinct optimal
    plans and infeasible deadlines, and one Pareto front per case."""
    spec = result.spec
    series = []
    by: dict = {}
    for r in result.rows:
        by.setdefault((case_of(r), r["accelerator"]), []).append(r)
    order = {a: i for i, a in enumerate(spec.hw)}
    for (case, acc) in sorted(by, key=lambda k: (_case_order(k[0]), order.get(k[1], 99))):
        members = by[(case, acc)]
        plans = {}
        for r in members:
            if r["status"] in FEASIBLE:
                plans.setdefault((r["finish_days"], r["cost"]), r["cards"])
        label = acc + (f" ({case_label(case, spec)})" if case_label(case, spec) else "")
        series.append({
            "accelerator": acc, "label": label,
            "plans": [{"finish_days": f, "cost": c, "cards": n} for (f, c), n in sorted(plans.items())],
            "infeasible_deadlines": sorted({r["deadline_days"] for r in members if r["status"] not in FEASIBLE}),
            "deadlines": sorted({r["deadline_days"] for r in members}),
            "fastest_possible_days": min([r["finish_days"] for r in members if r["status"] in FEASIBLE]
                                         + [r["fastest_days"] for r in members if r["fastest_days"] is not None],
                                         default=None),
        })
    fronts: dict = {}
    for e in result.front():
        case = (e["tokens"], e["efficiency"], e["card_hour"], e["reserved_days"])
        fronts.setdefault(case, []).append({"finish_days": e["finish_days"], "cost": e["cost"], "cards": e["cards"],
                                            "accelerator": e["accelerator"]})
    front_list = [{"label": case_label(c, spec), "points": sorted(pts, key=lambda p: (p["finish_days"], p["cost"]))}
                  for c, pts in sorted(fronts.items(), key=lambda kv: _case_order(kv[0]))]
    unit = next((r["cost_unit"] for r in result.rows if r["cost_unit"]), "USD")
    return {"series": series, "fronts": front_list, "cost_unit": unit,
            "title": f"{spec.name}: cost vs finish time ({', '.join(spec.swept()) or 'one point'} swept)"}


def _bar(label: str, row_like: dict, note: str = "") -> dict:
    return {"label": label, "accelerator": row_like["accelerator"], "cards": row_like["cards"],
            "train_days": row_like["train_days"], "overhead_days": row_like["overhead_days"],
            "reserved_days": row_like["reserved_days"], "finish_days": row_like["finish_days"],
            "cost": row_like["cost"], "note": note}


def breakdown_bars(result: SweepResult, cards=None) -> tuple[list[dict], list[str]]:
    """Finish-time breakdown bars (base training, checkpoint/failure overhead, reserved days).

    Without ``cards``: the front plans. With ``cards``: for every swept accelerator (and case) the
    cheapest plan with exactly that many cards that satisfies every constraint except the deadline,
    card cap and budget (the chapter's figure 10-44 compares 32 and 48 cards against 30 days).
    Returns (bars, notes about card counts with no valid plan).
    """
    spec = result.spec
    if not cards:
        bars = []
        for e in result.front():
            rng = (f"{e['deadline_min_days']:g} d" if e["deadline_min_days"] == e["deadline_max_days"]
                   else f"{e['deadline_min_days']:g}-{e['deadline_max_days']:g} d")
            bars.append(_bar(f"{e['accelerator']} x {e['cards']}", e, note=f"optimal for deadlines {rng}"))
        return bars, []
    from tpopt.models.evaluate import evaluate
    from tpopt.optimizer.core import solve
    from tpopt.optimizer.result import Request
    from tpopt.optimizer.space import FAMILIES

    payload = _payload(spec)
    enforce = frozenset(f for f in FAMILIES if f not in SWEPT_FAMILIES)
    cases = sorted({case_of(r) for r in result.rows}, key=lambda c: tuple((x is None, x) for x in c))
    bars, missing = [], {}
    deadline_s = spec.plot_deadline_days * DAY
    for case in cases:
        tokens, eff, price, reserved = case
        clabel = case_label(case, spec)
        for acc in spec.hw:
            p = Point(acc, deadline_s, reserved * DAY, tokens, eff, 10**9, price, None)
            sc = group_scenario(payload, p, deadline_s)
            small = space_size(spec, acc) <= AUTO_TABLE_LIMIT
            for n in cards:
                res = solve(sc, "enumerate" if small else "cpsat",
                            Request(objective="cost", enforce=enforce, cards=(n,), time_limit=spec.time_limit))
                label = f"{acc} x {n}" + (f" ({clabel})" if clabel else "")
                if not res.feasible:
                    missing[(acc, n)] = missing.get((acc, n), 0) + 1
                    continue
                ev = evaluate(sc, res.best.plan)
                row = make_row(p, "optimal", spec.fingerprint, "enumerate", ev=ev)
                bars.append(_bar(label, row))
    notes = [f"{acc} x {n}: no valid plan with exactly {n} cards" + (f" (in {k} cases)" if len(cases) > 1 else "")
             for (acc, n), k in missing.items()]
    return bars, notes


__all__ = ["AUTO_TABLE_LIMIT", "COLUMN_NAMES", "DIMS", "SOLVERS", "SWEEP_KEYS", "Point", "Progress", "SweepResult",
           "SweepSpec", "SweepStore", "breakdown_bars", "build_spec", "check_output_path", "front_plans",
           "mark_pareto", "parse_values", "plot_series", "run_sweep", "summarize"]
