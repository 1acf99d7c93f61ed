"""tpopt: a training-plan optimizer for large language models.

The cheapest plan that surely finishes before the deadline, as a constraint-optimisation problem::

    import tpopt

    sc = tpopt.scenario(deadline="30d", hw="rtx4090")   # the built-in design case (or a TOML file, a dict)
    result = tpopt.solve(sc)                            # rtx4090 x 48, proven optimal
    tpopt.evaluate(sc, cards=32).feasible               # False: 34.3 d against 30 d
    print(tpopt.explain(sc, max_cards=32))              # the conflict and the smallest changes that fix it

Functions: :func:`scenario`, :func:`solve`, :func:`evaluate`, :func:`explain`, :func:`sweep`, and one per
other command (:func:`estimate`, :func:`export`, :func:`calibrate`, :func:`simulate`, :func:`replan`, :func:`rl`,
:func:`inverse`, :func:`sites`; :func:`pools` for a scenario with ``[[hardware.pools]]``;
see :mod:`tpopt.api`); results have ``.to_dict()`` and ``.to_frame()`` (pandas). Bad input raises
:class:`InputError`. The command line is ``tpopt`` (or ``python -m tpopt``).

The repository root is the ``tpopt`` package. Subpackages:

* :mod:`tpopt.models` -- pure analytic relations (numbers in, numbers out, SI units inside).
* :mod:`tpopt.catalogs` -- data files (accelerators, links, storage, models) and scenario loading.
* :mod:`tpopt.optimizer` -- CP-SAT / HiGHS formulations, the brute-force enumerator, reports.
* :mod:`tpopt.cli` -- the ``tpopt`` command line (thin; no domain logic).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tpopt._version import __version__

# Everything below is imported on first use, so `import tpopt` stays cheap (the solvers, numpy and
# pandas load only when a function needs them).
_LAZY = {
    "scenario": "tpopt.api", "solve": "tpopt.api", "evaluate": "tpopt.api", "explain": "tpopt.api",
    "sweep": "tpopt.api", "estimate": "tpopt.api", "export": "tpopt.api", "calibrate": "tpopt.api",
    "simulate": "tpopt.api", "replan": "tpopt.api", "rl": "tpopt.api", "inverse": "tpopt.api",
    "sites": "tpopt.api", "pools": "tpopt.api", "LoadedScenario": "tpopt.api",
    "Explanation": "tpopt.api", "SweepTable": "tpopt.api",
    "Scenario": "tpopt.models.plan", "Plan": "tpopt.models.plan", "Evaluation": "tpopt.models.evaluate",
    "SolveResult": "tpopt.optimizer.result", "Status": "tpopt.optimizer.result", "InputError": "tpopt.errors",
}

__all__ = ["__version__", *_LAZY]

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs (``X as X``: an explicit re-export)
    from tpopt.api import Explanation as Explanation
    from tpopt.api import LoadedScenario as LoadedScenario
    from tpopt.api import SweepTable as SweepTable
    from tpopt.api import calibrate as calibrate
    from tpopt.api import estimate as estimate
    from tpopt.api import evaluate as evaluate
    from tpopt.api import explain as explain
    from tpopt.api import export as export
    from tpopt.api import inverse as inverse
    from tpopt.api import pools as pools
    from tpopt.api import replan as replan
    from tpopt.api import rl as rl
    from tpopt.api import scenario as scenario
    from tpopt.api import simulate as simulate
    from tpopt.api import sites as sites
    from tpopt.api import solve as solve
    from tpopt.api import sweep as sweep
    from tpopt.errors import InputError as InputError
    from tpopt.models.evaluate import Evaluation as Evaluation
    from tpopt.models.plan import Plan as Plan
    from tpopt.models.plan import Scenario as Scenario
    from tpopt.optimizer.result import SolveResult as SolveResult
    from tpopt.optimizer.result import Status as Status


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tpopt' has no attribute {name!r}")

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
