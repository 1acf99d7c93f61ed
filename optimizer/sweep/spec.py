"""The sweep specification: the swept inputs (parsed from ranges, lists or single values), the grid of
points, and the scenario fingerprint that identifies a sweep's results across runs."""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

from tpopt._version import __version__
from tpopt.catalogs import Catalog, load_catalog
from tpopt.catalogs.scenario import build_scenario, read_scenario_file, with_overrides
from tpopt.errors import InputError
from tpopt.models import families as F
from tpopt.models.plan import Scenario
from tpopt.models.units import DAY, parse_count, parse_duration, parse_fraction, parse_int, parse_number
from tpopt.optimizer import backends
from tpopt.optimizer.result import Request
from tpopt.optimizer.sweep.rows import FORMAT, Point

AUTO_TABLE_LIMIT = 300_000  # plans per group enumerated exactly with --solver auto
MAX_VALUES = 100_000  # values one range may expand to
MAX_POINTS = 2_000_000  # points in one sweep
# constraint families whose limit is a sweep input (answered by masks on the table path)
SWEPT_FAMILIES = F.SWEPT


# ---------------------------------------------------------------------------------------------
# sweep inputs


@dataclass(frozen=True)
class Dim:
    """One sweepable scenario input."""

    name: str  # [sweep] key
    flag: str  # command-line flag
    raw_key: str  # scenario table.key it overrides
    kind: str  # "table" (changes term tables) or "constraint" (changes only a limit)
    parse: Callable[[Any, str], float]  # (value, what) -> SI number
    step: Callable[[Any, str], float]  # parser of a range step (zero allowed here, rejected with a clearer message)
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
    # the global batch is a plan choice (with a critical batch the tokens follow E(B)): every batch
    # value competes on the same front; the sequence length changes the task, a case of its own
    "global_batch": Dim("global_batch", "--global-batch", "search.global_batch", "table",
                        lambda v, w: parse_int(v, w, minimum=1), lambda v, w: parse_int(v, w, minimum=0),
                        integer=True),
    "seq_len": Dim("seq_len", "--seq-len", "task.seq_len", "table", lambda v, w: parse_int(v, w, minimum=1),
                   lambda v, w: parse_int(v, w, minimum=0), integer=True),
}
SWEEP_KEYS = ("hw", *DIMS, "solver", "breakdown_cards")


def _canon(x: float) -> float:
    """12 significant digits: range arithmetic (0.3 + 0.05 k) must not leak float noise into keys."""
    return float(f"{x:.12g}")


def _expand(dim: Dim, text: str, what: str) -> list[float]:
    parts = text.split(":")
    if len(parts) != 3 or not all(p.strip() for p in parts):
        raise InputError(f"{what}: {text!r} is not a range start:end:step (e.g. 20d:40d:1d, or 256:4096:x2)")
    a, b = (dim.parse(p.strip(), what) for p in parts[:2])
    if b < a:
        raise InputError(f"{what}: {text!r}: the end ({parts[1].strip()}) is before the start ({parts[0].strip()})")
    last = parts[2].strip()
    if last[:1] in ("x", "*"):  # geometric: start, start x k, start x k^2, ... up to end
        k = parse_number(last[1:], what)
        if k <= 1 or a <= 0:
            raise InputError(f"{what}: {text!r}: a geometric range needs a positive start and a factor above 1")
        n = int(math.floor(math.log(b / a) / math.log(k) + 1e-9)) + 1
        if n > MAX_VALUES:
            raise InputError(f"{what}: {text!r} expands to {n:,} values (at most {MAX_VALUES:,})")
        return [a * k ** i for i in range(n)]
    step = dim.step(last, what)
    if step <= 0:
        raise InputError(f"{what}: {text!r}: the step must be positive")
    n = int(math.floor((b - a) / step + 1e-9)) + 1
    if n > MAX_VALUES:
        raise InputError(f"{what}: {text!r} expands to {n:,} values (at most {MAX_VALUES:,})")
    return [a + i * step for i in range(n)]


def parse_values(dim: Dim, value: Any, what: str) -> tuple[float, ...]:
    """Sorted distinct SI values of a sweep input given as one value, a comma list, a TOML list or a range."""
    items = value if isinstance(value, list) else [value]
    out: list[float] = []
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


def parse_names(value: Any, what: str) -> tuple[str, ...]:
    items = value if isinstance(value, list) else str(value).split(",")
    names = [str(x).strip() for x in items]
    if not names or any(not n for n in names):
        raise InputError(f"{what}: empty accelerator name in {value!r}")
    return tuple(dict.fromkeys(names))


def parse_cards_list(value: Any, what: str) -> tuple[int, ...]:
    items = value if isinstance(value, list) else str(value).split(",")
    return tuple(sorted({parse_int(str(x).strip() if isinstance(x, str) else x, what, minimum=1) for x in items}))


# ---------------------------------------------------------------------------------------------
# the sweep specification


@dataclass
class SweepSpec:
    """Everything a sweep needs, validated: the scenario tables, the swept values and the options."""

    raw: dict[str, Any]  # scenario tables without [sweep] (command-line fixed overrides not yet applied)
    fixed: dict[str, Any]  # fixed raw overrides ({"hardware.usable_memory": "20GiB"}), applied after the hardware
    catalog_dirs: tuple[str, ...]
    hw: tuple[str, ...]
    values: dict[str, tuple[Any, ...]]  # dim name -> tuple of SI values (None: not set)
    solver: str
    time_limit: float
    breakdown_cards: tuple[int, ...] | None
    base: Scenario  # built with every swept accelerator (names, catalog data, defaults)
    fingerprint: str
    deadline_in_table: bool
    name: str = ""
    catalog: Catalog | None = None  # the Catalog loaded from catalog_dirs when the spec was built

    def points(self) -> list[Point]:
        v = self.values
        out: list[Point] = []
        for acc in self.hw:
            for d, r, t, e, mc, ch, mx, gb, sl in itertools.product(
                    v["deadline"], v["reserved"], v["tokens"], v["efficiency"], v["max_cards"], v["card_hour"],
                    v["max_cost"], v["global_batch"], v["seq_len"]):
                out.append(Point(acc, d, r, t, e, mc, ch, mx, gb, sl))
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
    def deadline_range_days(self) -> tuple[float, float]:
        """The swept deadlines' (first, last) in days (equal when one deadline is swept)."""
        d = self.values["deadline"]
        return (min(d) / DAY, max(d) / DAY)

    @property
    def plot_deadline_days(self) -> float:
        """The deadline drawn on the breakdown plot: the single swept value, else the scenario's own."""
        d = self.values["deadline"]
        return (d[0] if len(d) == 1 else self.base.task.deadline_s) / DAY


def check_solver(solver: str, what: str | None) -> str:
    """A sweep solver name: ``auto`` or a registered backend (:func:`tpopt.optimizer.backends.sweep_names`,
    or ``pyomo:NAME``); the name's syntax only: whether the solver is installed is checked by the driver
    before anything is written, :func:`require_solver`."""
    return backends.check_sweep_solver(solver, what)


def require_solver(solver: str) -> None:
    """The solver must be able to run here (a ``pyomo:NAME`` installed): one clear error (exit 2) otherwise."""
    if solver != backends.SWEEP_AUTO:
        backends.resolve(solver).require(Request())


def _file_default_card_hour(raw: dict[str, Any]) -> float | None:
    v = raw.get("cost", {}).get("card_hour") if isinstance(raw.get("cost"), dict) else None
    return None if v is None else parse_number(v, "cost.card_hour")


def build_spec(scenario_path: str | Path | dict[str, Any], cli: dict[str, Any] | None = None,
               catalog_dirs: Iterable[str | Path] = (), fixed: dict[str, Any] | None = None) -> SweepSpec:
    """Read the scenario (a TOML path, or a dict of its tables) and its ``[sweep]`` table, apply the
    command-line values (``cli``: key of :data:`SWEEP_KEYS` -> text or None) and validate everything
    before any work is done."""
    cli = {k: v for k, v in (cli or {}).items() if v is not None}
    unknown = set(cli) - set(SWEEP_KEYS) - {"time_limit"}
    if unknown:
        raise InputError(f"unknown sweep option(s) {sorted(unknown)}")
    if isinstance(scenario_path, dict):  # scenario tables given directly (Python API)
        raw = copy.deepcopy(scenario_path)
    else:
        raw = read_scenario_file(scenario_path)
    table = raw.pop("sweep", {})
    if not isinstance(table, dict):
        raise InputError("scenario: [sweep] must be a table")
    bad = sorted(set(table) - set(SWEEP_KEYS))
    if bad:
        raise InputError(f"scenario: unknown key(s) {bad} in [sweep] (known: {', '.join(SWEEP_KEYS)})")
    fixed = {k: v for k, v in (fixed or {}).items() if v is not None}
    dirs = tuple(str(d) for d in catalog_dirs or ())
    catalog = load_catalog(dirs)

    def source(key: str) -> tuple[Any, str | None]:
        """(value, where it was given) of a [sweep] key: the command line first; (None, None) when unset
        (so where a value is given, its place is a str: the casts below)."""
        if key in cli:
            return cli[key], f"--{key.replace('_', '-')}"
        if key in table:
            return table[key], f"[sweep] {key}"
        return None, None

    # the scenario as the file gives it (validates every table, the model and the hardware names)
    base0 = build_scenario(with_overrides(raw, fixed), catalog)
    if base0.pools:
        raise InputError("tpopt sweep does not plan [[hardware.pools]]: solve the mixed plan with tpopt solve, or "
                         "sweep without the pools")
    if base0.market.offers:
        raise InputError("tpopt sweep does not choose among [market] offers yet: solve the scenario with tpopt solve, "
                         "or sweep without the [market] table")
    hw_value, hw_what = source("hw")
    hw = parse_names(hw_value, cast(str, hw_what)) if hw_value is not None else tuple(base0.search.accelerators)
    if "all" in hw:  # the offer market ('all': every card with an offer) is solve's question, not a sweep's
        raise InputError(f"{hw_what}: tpopt sweep takes card names (each swept on its own); 'all', every card with "
                         "a market offer, is tpopt solve's and explain's (one exact sub-problem per offer): name the "
                         "cards, e.g. --hw h100-sxm,b200")
    for name in hw:
        catalog.accelerator(name)  # unknown name -> one clear error
    base = build_scenario(with_overrides(with_overrides(raw, {"hardware.accelerator": list(hw),
                                                              "search.accelerator": list(hw)}), fixed), catalog)
    if base.stages:
        raise InputError("a staged scenario ([[task.stages]]) cannot be swept as a whole: sweep a one-stage "
                         "scenario per stage (tpopt solve plans the stages together)")
    defaults = {
        "deadline": (base.task.deadline_s,),
        "reserved": (base.task.reserved_s,),
        "tokens": (base.task.tokens,),
        # 0 marks the per-operation model (no flat efficiency stated); a swept efficiency selects the flat model
        "efficiency": (0.0 if base.systems[hw[0]].per_op else base.systems[hw[0]].efficiency,),
        "max_cards": (base.search.max_cards,),
        "card_hour": (_file_default_card_hour(raw),),
        "max_cost": (base.cost.max_cost,),
        # a scenario offering several batches sweeps them all (each batch one point)
        "global_batch": tuple(base.search.global_batch) if len(base.search.global_batch) > 1 else (None,),
        "seq_len": (base.task.seq_len,),
    }
    values: dict[str, tuple[Any, ...]] = {}
    for name, dim in DIMS.items():
        value, what = source(name)
        values[name] = parse_values(dim, value, cast(str, what)) if value is not None else defaults[name]

    solver_value, solver_what = source("solver")
    solver = check_solver(str(solver_value or "auto").strip(), solver_what)
    time_limit = float(cli.get("time_limit", 60.0))
    if not time_limit > 0:
        raise InputError("--time-limit must be positive")
    bc_value, bc_what = source("breakdown_cards")
    breakdown = parse_cards_list(bc_value, cast(str, bc_what)) if bc_value is not None else None

    rel = base.reliability
    deadline_in_table = any(t == 0.0 for t in base.search.save_interval_s) and rel.card_mtbf_s is None \
        and not rel.event_interval_s
    spec = SweepSpec(raw=raw, fixed=fixed, catalog_dirs=dirs, hw=hw, values=values, solver=solver,
                     time_limit=time_limit, breakdown_cards=breakdown, base=base, fingerprint="",
                     deadline_in_table=deadline_in_table, name=base.name, catalog=catalog)
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
