"""Pareto sweeps: the optimal plan at every point of a grid of scenario inputs, and the cost/finish front.

A *point* is one accelerator plus one value of every sweep input. For each point tpopt finds the
cost-minimal plan that meets every constraint (the same model ``tpopt solve`` optimises), and the
sweep reports the Pareto-optimal set of (cost, finish time) plans across all points and accelerators.

Sweep inputs
------------
Every input may be given on the command line or in a ``[sweep]`` table of the scenario file (the
command line wins, key by key). Each takes a single value, a comma list (``"20d,25d,30d"`` or a TOML
list) or an inclusive range ``"start:end:step"`` (``"20d:40d:1d"`` = 21 values), or a geometric one
``"start:end:xK"`` (``"256:4096:x2"`` = 256, 512, ..., 4096). Inputs left out keep the scenario's own
value; a scenario whose ``[search] global_batch`` offers several batches sweeps each of them.

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
global_batch --global-batch   global batch in sequences (a plan choice)          ``"256:4096:x2"``
seq_len      --seq-len        tokens per sequence ([task] seq_len)               ``"4096,8192"``
solver       --solver         auto (default), enumerate, cpsat, highs, pyomo:X   ``"pyomo:highs"``
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
deadline/card-cap/budget point of the group is answered by a mask over that table; a larger group is
answered from its tables built once (:mod:`.layouts`: the layout decomposition's bounds and each layout's
exact cost-finish front, every point a scan from its neighbour's optimum; groups that differ only in
tokens, reserved days or price share tables), or by one CP-SAT solve per point
(:func:`tpopt.optimizer.core.solve`) under the chance form of the deadline or when the deadline enters
the tables. ``enumerate`` forces
the table path (the whole table is held in memory), ``cpsat`` / ``highs`` / ``pyomo:NAME`` (the plan
MILP through Pyomo with solver NAME: highs, scip, cbc, glpk, gurobi, ... where installed, as in
``tpopt solve``) force one solve per point; a ``pyomo:NAME`` that is not installed is one error line (exit 2)
before ``--out`` is touched.
All paths are exact, so they agree on the optimal cost and finish time (ties between equally good
plans may be broken differently). One exception makes the deadline a table input: a scenario with
``save_interval = "auto"`` and no failures uses the deadline as the save interval.

The front is computed among points that share the table-changing inputs other than the accelerator
and the global batch (tokens, efficiency, reserved days, price, sequence length), across accelerators,
batches, deadlines, card caps and budgets: plans for different token counts or sequence lengths are
different problems and do not dominate each other, while the batch is a plan choice whose
token-efficiency loss (with ``[task] critical_batch``, E(B) = E_min (1 + B / B_noise) tokens) is in
the plan's cost and finish time, so the front trades it against speed.

Output and resuming
-------------------
``--out`` (``.csv``, ``.parquet`` or ``.json``) gets one row per point: the inputs, the status, the plan
(cards, hosts, zero, tp, pp, dp, micro_batch, grad_accum, recompute, offload, schedule, save interval
and mode, NICs, global batch and the tokens it trains, ``train_tokens``), the metrics (cost, finish_days,
train_days, overhead_days, step_s,
memory_per_card_gib, overhead_fraction, card_hours), for infeasible points ``fastest_days`` (the
earliest finish any plan reaches under the other constraints), the solver, a ``note`` (what happened
when the answer is not proven), ``pareto`` (on the front), the scenario fingerprint and a ``checksum``
of the row. Statuses: ``optimal`` and ``infeasible`` (proven); ``feasible`` (a plan, not proven optimal)
and ``unknown`` (no plan and no proof: never reported as infeasible) when a solver hit its time limit;
``error`` when the point's task failed twice (a worker died or raised; the reason in ``note``). Integer
columns stay integers in every format (parquet carries pandas metadata: ``Int64``, nullable).

Rows are appended to a journal as they finish (the ``.csv`` itself, or ``<out>.journal.csv`` next to a
``.parquet`` / ``.json``) with flush and fsync, by the driver alone; at the end the final file is
written atomically, rows sorted by their inputs, so the same inputs give the same bytes whatever the
executor and the order tasks finished in. Re-running with the same ``--out`` reuses the proven rows and
solves the rest again, with a note for each kind: a torn last line of a killed run, unreadable lines,
rows whose checksum no longer matches their content (edited by hand or corrupted), invalid statuses,
unproven answers (time limit, error). A point is identified by its inputs plus a fingerprint of the rest
of the scenario (its tables, the built model, hardware, memory, input, checkpoint and search settings,
the tpopt version): an ``--out`` written for another scenario, or not by a tpopt sweep at all, is
refused unless ``--force``. Only the points of the current sweep are written; rows of other points found
in ``--out`` are dropped (with a note). While a sweep runs, ``.<out>.lock`` holds an exclusive lock on
the output and its journal: a second sweep writing the same file is refused (the lock dies with its
holder, so a killed run never blocks the next).

Where tasks run
---------------
A sweep is a list of pure tasks (:mod:`.tasks`); an executor (:mod:`.executor`) runs them: in this
process, in a local pool of forked workers (:mod:`.local`, ``--workers N``; they die with the driver,
even on ``kill -9``), or on a Dask cluster (:mod:`.cluster`, ``--cluster local:N | tcp://host:8786 |
scheduler.json``). The driver (:mod:`.run`) streams results into the journal as they complete; a task
whose worker died or raised is submitted once more, and a second failure makes error rows.

Modules: :mod:`.spec` (inputs, points, fingerprint), :mod:`.rows` (columns, checksum), :mod:`.tasks`,
:mod:`.layouts` (a large group's points from shared tables),
:mod:`.store` (journal, final file, lock, resume), :mod:`.executor` / :mod:`.local` / :mod:`.cluster`,
:mod:`.run` (the driver, :func:`sweep`), :mod:`.front` (Pareto front, summaries, plot data).
"""

from __future__ import annotations

from tpopt.optimizer.sweep.front import (
    breakdown_bars,
    case_label,
    energy_front,
    front_pins,
    front_plans,
    mark_pareto,
    plot_series,
    summarize,
)
from tpopt.optimizer.sweep.rows import (
                                         COLUMN_NAMES,
                                         COLUMNS,
                                         FEASIBLE,
                                         FORMAT,
                                         INT_COLUMNS,
                                         NO_ANSWER,
                                         PLAN_COLUMNS,
                                         PROVEN,
                                         STATUSES,
                                         Point,
                                         case_of,
                                         checksum_ok,
                                         make_row,
                                         row_checksum,
                                         sort_key,
)
from tpopt.optimizer.sweep.run import Progress, SweepResult, default_workers, run_sweep, sweep
from tpopt.optimizer.sweep.spec import (
                                         AUTO_TABLE_LIMIT,
                                         DIMS,
                                         MAX_POINTS,
                                         MAX_VALUES,
                                         SWEEP_KEYS,
                                         SWEPT_FAMILIES,
                                         Dim,
                                         SweepSpec,
                                         build_spec,
                                         fingerprint,
                                         parse_values,
)
from tpopt.optimizer.sweep.store import (
                                         HEADER,
                                         OUT_FORMATS,
                                         OutputLock,
                                         Resume,
                                         SweepStore,
                                         _parse_csv_line,
                                         atomic_write,
                                         check_output_path,
                                         encode,
)
from tpopt.optimizer.sweep.tasks import Task, _payload, group_scenario, plan_tasks, point_scenario, run_task, space_size

__all__ = [
    "AUTO_TABLE_LIMIT", "COLUMN_NAMES", "COLUMNS", "DIMS", "FEASIBLE", "FORMAT", "HEADER", "INT_COLUMNS",
    "MAX_POINTS", "MAX_VALUES", "NO_ANSWER", "OUT_FORMATS", "PLAN_COLUMNS", "PROVEN", "STATUSES",
    "SWEEP_KEYS", "SWEPT_FAMILIES", "Dim", "OutputLock", "Point", "Progress", "Resume", "SweepResult", "SweepSpec",
    "SweepStore", "Task", "_parse_csv_line", "_payload", "atomic_write", "breakdown_bars", "build_spec",
    "case_label", "case_of", "check_output_path", "energy_front", "checksum_ok", "default_workers", "encode",
    "fingerprint",
    "front_pins", "front_plans", "group_scenario", "make_row", "mark_pareto", "parse_values", "plan_tasks",
    "plot_series",
    "point_scenario", "row_checksum", "run_sweep", "run_task", "sort_key", "space_size", "summarize", "sweep",
]
