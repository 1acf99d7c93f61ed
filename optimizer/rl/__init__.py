"""RL post-training as a solve (chapter 10.5): rollout / verification / learning split, shared or
separate cards, synchronous or one-step async, weight sync; exact, with binding reports.

Decisions. RL level: accelerator, placement (``separate`` card groups or ``shared`` cards with a
staged hand-off), learner cards, rollout cards, rollout TP, rollout batch, staleness (0 / 1) and the
weight-sync method (``sharded`` / ``broadcast``); the save interval and mode are picked per card
count (they only move the overhead L). Learner level: the whole pre-training plan (ZeRO, TP, PP,
micro-batch, recompute, offload, schedule) on the learner's cards, chosen by the existing solver.

Why taking the learner's optimum per card count is exact. Every RL quantity depends on the learner
plan only through its step time t (and, on shared cards, the state swap h(states) and its memory,
which bounds the plan through its usable memory): cycle, finish and cost are non-decreasing in
q_s t + h, and the memory families are enforced inside the learner solve by lowering the usable
memory. So for a learner card count and memory limit the best RL plan uses the learner plan that
minimises t (separate cards: the solver's ``time`` optimum at that card count) or q_s t + h (shared
cards: the solver's K best plans by t, K grown until q_s t_K can no longer beat the best q_s t + h).

Search. Every RL decision is first evaluated with a valid lower bound of the learner
(t >= 6 x GEMM params x tokens / (cards x the card's highest dense peak), h >= 0, memory 0): a
relaxation of every family. Learner keys (accelerator, cards, memory limit) are then solved in the
order of their best bound; the search stops when the next bound exceeds the best verified plan.
:func:`brute_force` enumerates every RL decision with every learner plan (no solver, no bound):
the oracle of the property tests.

Families (value <= limit, SI units inside): ``rl.learner_memory``, ``rl.kv_capacity``,
``rl.rollout_memory``, ``rl.handoff_memory``, ``rl.staleness``, ``checkpoint.backlog``,
``deadline.finish`` (with its per-stage form ``rl.stage_balance``, reported like ``step.budget``),
``cards.max``, ``budget.cost``; ``rl.learner_layout`` (some learner layout exists at the card count)
is structural.

The package, one module per part, each importing only those above it:

* :mod:`.problem` -- the decisions (:class:`RLDecision`), the learner plans they use and one RL plan's figures
  (:class:`RLProblem`), the decisions as columns (:class:`.problem.DecisionGrid`);
* :mod:`.search` -- the exact solve (:func:`solve`) and the brute-force oracle (:func:`brute_force`);
* :mod:`.oracle` -- the questions of :mod:`tpopt.optimizer.analysis` put to an :class:`.oracle.RLOracle` (binding
  families, alternatives, infeasibility, the async break-even);
* :mod:`.answer` -- the JSON-ready answer of ``tpopt rl`` (:func:`report`).

Shared with the pre-training solve, not restated here: the families and their derived views
(:mod:`tpopt.models.families`, ``F.RL_*``, ``F.TRAINER_*``), the report's questions and their oracle protocol
(:mod:`tpopt.optimizer.analysis`), the learner's plans (:func:`tpopt.optimizer.enumerate.chunks`,
:func:`tpopt.optimizer.core.solve`). RL's own: its decision grid and the relations of one RL plan.

This module re-exports the names callers use.
"""

from tpopt.optimizer.rl.answer import (
    constraint_rows,
    report,
)
from tpopt.optimizer.rl.oracle import (
    GRID_LIMIT,
    _wider_problem,
    async_break_even,
    binding,
    explain_infeasible,
)
from tpopt.optimizer.rl.problem import (
    FAMILIES,
    RELAXABLE,
    SPEC,
    STRUCTURAL,
    TRAINER_MEMORY,
    TRAINER_STRUCTURAL,
    Learner,
    RLDecision,
    RLProblem,
    RLResult,
    new_caches,
    trainer_points,
)
from tpopt.optimizer.rl.search import (
    brute_force,
    solve,
    vector_checks,
)

__all__ = [
    "SPEC",
    "FAMILIES",
    "STRUCTURAL",
    "RELAXABLE",
    "TRAINER_STRUCTURAL",
    "TRAINER_MEMORY",
    "RLDecision",
    "Learner",
    "RLResult",
    "new_caches",
    "RLProblem",
    "trainer_points",
    "vector_checks",
    "solve",
    "brute_force",
    "GRID_LIMIT",
    "_wider_problem",
    "binding",
    "async_break_even",
    "explain_infeasible",
    "constraint_rows",
    "report",
]
