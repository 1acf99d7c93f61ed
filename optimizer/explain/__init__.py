"""Why a request is infeasible, the smallest single change that makes it feasible, what limits a plan.

Every answer is computed by optimisation on the exact model, never guessed: from one table of every
plan for spaces of up to ``report.TABLE_LIMIT`` points that are cheap to simulate (:func:`tabulated`),
otherwise by the solve's own layout decomposition, each question asked of the solve's tables (shared by
every re-solve whose change leaves them as they are: :meth:`Space.sharing`) and its layout bounds
(:func:`scan_best`), monotone thresholds (tokens, reserved time) in closed form over the plans
(:func:`.context.largest_over_plans`), or the chosen solver with its solve-verify loop where neither applies.

1. Conflict. CP-SAT's sufficient assumptions (:func:`conflict`) name constraint families that cannot
   hold together, but not necessarily a minimal set. :func:`minimal_conflict` shrinks it with a
   deletion filter, least informative families first:
       for f in C:  if C \\ {f} admits no plan: C := C \\ {f}
   so that C admits no plan while C \\ {f} admits one for every f left (C is irreducible).
2. Minimal relaxations (:func:`relaxations`): one input freed at a time, every other input and
   family unchanged; one ``relax_*`` function per input states the relation it uses. Each reported
   value is rounded in the safe direction to the printed precision and re-solved: the plan shown is
   the cheapest plan of the scenario with exactly that value.
3. A given plan (:func:`explain_plan`): what it violates and by how much, or, when it is feasible,
   what stops one host fewer and whether a cheaper plan exists; and the worth of one unit of each
   main input at the optimum (:func:`sensitivities`).

The package, one module per part, each importing only those above it:

* :mod:`.context` -- :class:`Context` (the request being explained) and the paths that answer its
  questions exactly: tables, borrowed tables, layout scans, on demand, the solver;
* :mod:`.conflicts` -- 1, the irreducible conflict and the plan closest to each of its families;
* :mod:`.inputs` -- the inputs a relaxation frees (``with_*``, :data:`PARAMS`), :class:`Relaxation`, settling;
* :mod:`.cost` -- the relaxations of money (budget, card price, accelerator) and the cost floors;
* :mod:`.relax` -- 2, one ``relax_*`` per other input, and :func:`relaxations`, which asks them all;
* :mod:`.request` -- a request explained (:func:`explain_request`, :func:`infeasibility`);
* :mod:`.sensitivity` -- 3, a given plan (:func:`explain_plan`) and :func:`sensitivities`.

This module re-exports the names callers use. A test that switches a path off patches the name on the
module that looks it up (named in that module's docstring), not here.
"""

from tpopt.optimizer.explain.conflicts import (
    DELETION_ORDER,
    EVIDENCE,
    conflict,
    conflict_detail,
    minimal_conflict,
)
from tpopt.optimizer.explain.context import (
    Context,
    argmin_metric,
    borrowed,
    card_slice,
    layout_bounds,
    monolithic_hint,
    moved_variables,
    on_demand,
    scan_best,
    scan_min_metric,
    scanned,
    tabulated,
)
from tpopt.optimizer.explain.cost import (
    MODEL_FAMILIES,
    _scenario_for_accelerator,
    compute_cost_floor,
    cost_floor,
)
from tpopt.optimizer.explain.inputs import (
    PARAMS,
    with_card_price_scale,
    with_deadline,
    with_efficiency,
    with_max_cards,
    with_max_cost,
    with_nic_factor,
    with_tokens,
    with_usable_memory,
)
from tpopt.optimizer.explain.relax import (
    RELAXATIONS,
    RESERVED_TOL_S,
    relaxations,
)
from tpopt.optimizer.explain.request import (
    ANALYSIS_SKIPPED,
    explain_request,
    infeasibility,
)
from tpopt.optimizer.explain.sensitivity import (
    explain_plan,
    sensitivities,
)

__all__ = [
    "Context",
    "card_slice",
    "moved_variables",
    "borrowed",
    "tabulated",
    "scanned",
    "on_demand",
    "layout_bounds",
    "scan_best",
    "monolithic_hint",
    "argmin_metric",
    "scan_min_metric",
    "DELETION_ORDER",
    "conflict",
    "minimal_conflict",
    "EVIDENCE",
    "conflict_detail",
    "with_deadline",
    "with_tokens",
    "with_max_cards",
    "with_max_cost",
    "with_efficiency",
    "with_usable_memory",
    "with_nic_factor",
    "PARAMS",
    "with_card_price_scale",
    "RESERVED_TOL_S",
    "RELAXATIONS",
    "relaxations",
    "MODEL_FAMILIES",
    "_scenario_for_accelerator",
    "cost_floor",
    "compute_cost_floor",
    "infeasibility",
    "ANALYSIS_SKIPPED",
    "explain_request",
    "explain_plan",
    "sensitivities",
]
