"""One row per sweep point: the columns (with their types), how a row is built from an evaluation, its
checksum, and the order rows are written in.

Statuses: ``optimal`` and ``infeasible`` are proven; ``feasible`` (a plan found, optimality not proven)
and ``unknown`` (no plan and no proof) mean a solver hit its time limit; ``error`` means the point's task
failed twice (a worker died or raised), with the reason in ``note``. Only proven rows are reused when
a sweep resumes; the others are solved again.

Every row carries ``checksum``: the first 16 hex digits of the SHA-256 of its cells (as written to
CSV, joined by the unit separator), every column except ``pareto`` (recomputed at the end of every
run) and the checksum itself. A row whose content no longer matches (edited by hand, corrupted) is
solved again instead of being trusted.
"""

from __future__ import annotations

import hashlib
import math
from typing import TYPE_CHECKING, Any, NamedTuple

from tpopt.models.units import DAY
from tpopt.models.variables import PLAN_RECORD, RECORD_COLUMNS
from tpopt.optimizer import footing

if TYPE_CHECKING:
    from tpopt.models.evaluate import Evaluation
    from tpopt.models.plan import Scenario

# 2: note and checksum columns; 3: ep, expert_tp, capacity_factor; 4: global_batch, seq_len, train_tokens, cp;
# 5: the footing (step_model, mfu, stack, parameter_provenance, price_provenance)
FORMAT = 5

Row = dict[str, Any]
"""One sweep row: column name -> cell (a value of the column's type, or None)."""


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
    global_batch: int | None = None  # None: the scenario's batch
    seq_len: int | None = None  # None: the scenario's sequence length

    def key(self) -> str:
        """Stable identity of the point's inputs (the scenario fingerprint covers everything else)."""
        return (f"{self.accelerator}|deadline={_g(self.deadline_s / DAY)}d|reserved={_g(self.reserved_s / DAY)}d"
                f"|tokens={_g(self.tokens)}|efficiency={_g(self.efficiency)}|max_cards={self.max_cards}"
                f"|card_hour={'catalog' if self.card_hour is None else _g(self.card_hour)}"
                f"|max_cost={'none' if self.max_cost is None else _g(self.max_cost)}"
                + ("" if self.global_batch is None else f"|global_batch={self.global_batch}")
                + ("" if self.seq_len is None else f"|seq_len={self.seq_len}"))

    def group(self, deadline_in_table: bool) -> tuple[str | float | int | None, ...]:
        """The table-changing inputs: points sharing them share one enumeration."""
        g = (self.accelerator, self.tokens, self.efficiency, self.reserved_s, self.card_hour, self.global_batch,
             self.seq_len)
        return g + ((self.deadline_s,) if deadline_in_table else ())


def _g(x: float) -> str:
    return f"{x:.12g}"


COLUMNS: dict[str, type] = {  # name -> type (None allowed everywhere)
    "point_key": str,
    "accelerator": str, "deadline_days": float, "reserved_days": float, "tokens": float, "efficiency": float,
    "max_cards": int, "card_hour": float, "max_cost": float, "global_batch": int, "seq_len": int,
    "status": str,
    **RECORD_COLUMNS,  # the plan's own columns (cards, hosts, zero, tp, ..., capacity_factor)
    "train_tokens": float,
    "cost": float, "cost_unit": str, "finish_days": float, "train_days": float, "overhead_days": float,
    "step_s": float, "memory_per_card_gib": float, "overhead_fraction": float,
    "card_hours": float, "price_card_hour": float,
    "step_model": str, "mfu": float, "stack": str, "parameter_provenance": str, "price_provenance": str,
    "fastest_days": float, "solver": str, "note": str, "pareto": bool, "fingerprint": str, "checksum": str,
}
COLUMN_NAMES = tuple(COLUMNS)
PLAN_COLUMNS = (*RECORD_COLUMNS, "global_batch", "train_tokens")
"""The columns a plan fills: its own, then the point's global batch (the plan's choice where the scenario gives a
critical batch) and the tokens it trains."""
STATUSES = ("optimal", "feasible", "infeasible", "unknown", "error")
FEASIBLE = ("optimal", "feasible")  # a plan is in the row
PROVEN = ("optimal", "infeasible")  # the answer is final: reused on resume
NO_ANSWER = ("unknown", "error")  # neither a plan nor a proof
INT_COLUMNS = tuple(c for c, t in COLUMNS.items() if t is int)
CHECKSUMMED = tuple(c for c in COLUMNS if c not in ("pareto", "checksum"))


def _clean(v: Any, typ: type) -> Any:
    if v is None:
        return None
    if typ is bool:
        return bool(v)
    if typ is int:
        return int(v)
    if typ is float:
        x = float(v)
        return x if math.isfinite(x) else None
    s = " ".join(str(v).splitlines())  # one row, one line
    return s or None


def cell(v: object) -> str:
    """A value as written to CSV (and hashed): '' for None, true/false, floats by repr (round-trip exact)."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def row_checksum(row: Row) -> str:
    """SHA-256 (16 hex digits) of the row's cells except ``pareto`` and ``checksum``."""
    text = "\x1f".join(cell(row[c]) for c in CHECKSUMMED)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def checksum_ok(row: Row) -> bool:
    return row.get("checksum") == row_checksum(row)


def seal(row: Row) -> Row:
    """Set the row's checksum (after its last change other than ``pareto``)."""
    row["checksum"] = row_checksum(row)
    return row


def make_row(point: Point, status: str, fingerprint_: str, solver: str, ev: Evaluation | None = None,
             fastest_s: float | None = None, price: float | None = None, note: str | None = None,
             sc: Scenario | None = None) -> Row:
    """A sweep row; with ``ev`` the plan's columns, and with ``sc`` (the point's scenario) its footing."""
    row: Row = dict.fromkeys(COLUMN_NAMES)
    row.update(point_key=point.key(), accelerator=point.accelerator, deadline_days=point.deadline_s / DAY,
               reserved_days=point.reserved_s / DAY, tokens=point.tokens,
               efficiency=point.efficiency or None,  # None: the per-operation model (no flat efficiency)
               max_cards=point.max_cards, card_hour=point.card_hour, max_cost=point.max_cost, status=status,
               solver=solver, fingerprint=fingerprint_, price_card_hour=price, note=note,
               global_batch=point.global_batch, seq_len=point.seq_len)
    if ev is not None:
        p, m = ev.plan_dict(), ev.metrics
        row.update({f.column: p[f.key] for f in PLAN_RECORD if f.column is not None})  # MoE keys: None when dense
        row.update(global_batch=p["global_batch"], train_tokens=m["tokens"], cost=m["cost"],
                   cost_unit=m["cost_unit"], finish_days=m["finish_days"], train_days=m["train_days"],
                   overhead_days=m["train_days"] * m["overhead_fraction"], step_s=m["step_s"],
                   memory_per_card_gib=m["memory_per_card_gib"],
                   overhead_fraction=m["overhead_fraction"], card_hours=m["card_hours"])
        if sc is not None:
            row.update(footing.row_cells(footing.footing(sc, p, m["step_s"])))
    if fastest_s is not None:
        row["fastest_days"] = fastest_s / DAY
    return seal({k: _clean(row[k], COLUMNS[k]) for k in COLUMN_NAMES})


def sort_key(row: Row) -> tuple[Any, ...]:
    def num(x: Any, none: Any) -> Any:
        return none if x is None else x

    return (row["tokens"], row["efficiency"] or 0.0, num(row["card_hour"], -1.0), row["reserved_days"],
            num(row["seq_len"], 0), row["accelerator"], num(row["max_cost"], math.inf), row["max_cards"],
            row["deadline_days"], num(row["global_batch"], 0), row["point_key"])


def case_of(row: Row) -> tuple[Any, ...]:
    """Rows sharing a case compete on one front (everything but accelerator, constraint limits and
    the global batch, a plan choice whose token-efficiency cost is in the row's cost)."""
    return (row["tokens"], row["efficiency"] or None, row["card_hour"], row["reserved_days"], row.get("seq_len"))
