"""Why a request is infeasible, the smallest single change that makes it feasible, what limits a plan.

Every answer is computed by optimisation on the exact model, never guessed: from one table of every
plan for spaces of up to ``report.TABLE_LIMIT`` points that are cheap to simulate (:func:`tabulated`),
otherwise by the solve's own layout decomposition, each question asked of the solve's tables (shared by
every re-solve whose change leaves them as they are: :meth:`Space.sharing`) and its layout bounds
(:func:`scan_best`), monotone thresholds (tokens, reserved time) in closed form over the plans
(:func:`largest_over_plans`), or the chosen solver with its solve-verify loop where neither applies.

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
    deletion_filter,
    minimal_conflict,
    other_conflict,
    whole_hosts_reason,
)
from tpopt.optimizer.explain.context import (
    EMPTY,
    ON_DEMAND_NOTE,
    OWN_SPACES,
    SCANNED_METRICS,
    SHARED_SPACES,
    Context,
    Figure,
    NotOnDemand,
    allowed_layouts,
    argmin_metric,
    borrowed,
    card_slice,
    largest_over_plans,
    layout_bounds,
    monolithic_hint,
    moved_variables,
    on_demand,
    scan_best,
    scan_min_metric,
    scanned,
    share_pipeline,
    tabulated,
)
from tpopt.optimizer.explain.cost import (
    MODEL_FAMILIES,
    PRICE_ROUNDS,
    _scenario_for_accelerator,
    compute_cost_floor,
    cost_floor,
    floor_enforced,
    over_budget_at,
    relax_accelerator,
    relax_card_price,
    relax_max_cost,
)
from tpopt.optimizer.explain.inputs import (
    CARD_KEYS,
    PARAMS,
    Param,
    Relaxation,
    with_card_price_scale,
    with_deadline,
    with_efficiency,
    with_max_cards,
    with_max_cost,
    with_max_drop,
    with_nic_factor,
    with_reserved,
    with_tokens,
    with_usable_memory,
)
from tpopt.optimizer.explain.relax import (
    EFFICIENCY_TOL,
    GRID,
    NIC_FACTOR_MAX,
    NIC_REL_TOL,
    RELAXATIONS,
    RESERVED_TOL_S,
    THROUGHPUT_SCALE_MAX,
    efficiency_ceiling,
    most_iterations,
    most_reserved,
    relax_deadline,
    relax_efficiency,
    relax_max_cards,
    relax_max_drop,
    relax_nic_bandwidth,
    relax_reserved,
    relax_tokens,
    relax_usable_memory,
    relaxations,
)
from tpopt.optimizer.explain.request import (
    ANALYSIS_SKIPPED,
    explain_request,
    infeasibility,
)
from tpopt.optimizer.explain.sensitivity import (
    REL,
    explain_plan,
    fewer_hosts,
    sensitivities,
    violation,
)
from tpopt.optimizer.limits import Undecided

__all__ = [
    "Undecided",
    "OWN_SPACES",
    "SHARED_SPACES",
    "EMPTY",
    "Context",
    "card_slice",
    "moved_variables",
    "borrowed",
    "share_pipeline",
    "tabulated",
    "scanned",
    "ON_DEMAND_NOTE",
    "NotOnDemand",
    "on_demand",
    "layout_bounds",
    "allowed_layouts",
    "scan_best",
    "monolithic_hint",
    "argmin_metric",
    "SCANNED_METRICS",
    "scan_min_metric",
    "Figure",
    "largest_over_plans",
    "DELETION_ORDER",
    "conflict",
    "minimal_conflict",
    "deletion_filter",
    "other_conflict",
    "EVIDENCE",
    "conflict_detail",
    "whole_hosts_reason",
    "with_deadline",
    "with_reserved",
    "with_tokens",
    "with_max_cards",
    "with_max_cost",
    "with_efficiency",
    "with_usable_memory",
    "with_max_drop",
    "with_nic_factor",
    "Param",
    "PARAMS",
    "Relaxation",
    "CARD_KEYS",
    "with_card_price_scale",
    "THROUGHPUT_SCALE_MAX",
    "EFFICIENCY_TOL",
    "NIC_FACTOR_MAX",
    "NIC_REL_TOL",
    "RESERVED_TOL_S",
    "GRID",
    "relax_deadline",
    "relax_max_cards",
    "relax_usable_memory",
    "relax_max_drop",
    "efficiency_ceiling",
    "relax_efficiency",
    "relax_nic_bandwidth",
    "relax_reserved",
    "most_iterations",
    "most_reserved",
    "relax_tokens",
    "RELAXATIONS",
    "relaxations",
    "MODEL_FAMILIES",
    "relax_max_cost",
    "PRICE_ROUNDS",
    "relax_card_price",
    "_scenario_for_accelerator",
    "cost_floor",
    "compute_cost_floor",
    "floor_enforced",
    "over_budget_at",
    "relax_accelerator",
    "infeasibility",
    "ANALYSIS_SKIPPED",
    "explain_request",
    "REL",
    "violation",
    "explain_plan",
    "fewer_hosts",
    "sensitivities",
]
