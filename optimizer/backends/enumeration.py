"""The enumerator as a backend: every plan evaluated exactly, vectorised (``--solver enumerate``)."""

from __future__ import annotations

from typing import NoReturn

import numpy as np

from tpopt.models import terms as T
from tpopt.models.evaluate import Evaluation
from tpopt.optimizer.backends.protocol import Allowed, CapabilityError, MasterBounds
from tpopt.optimizer.backends.verify import evaluate_assignment
from tpopt.optimizer.enumerate import LEVEL_TWIN, enumerate_best
from tpopt.optimizer.result import Request, SolverInfo, Status
from tpopt.optimizer.space import Space, card_counts, chance_on


class Enumerate:
    """Answers the space itself (:meth:`solve_space`); no solver model, no decomposition master."""

    def require(self, name: str, req: Request) -> None:
        """Nothing to check: numpy only."""

    def model(self, name: str, space: Space, req: Request) -> NoReturn:
        raise CapabilityError("the enumerator", "solver model")

    def master(self, name: str, space: Space, bounds: MasterBounds, allowed: Allowed, req: Request) -> NoReturn:
        raise CapabilityError("the enumerator", "decomposition master")

    def solve_space(self, name: str, space: Space, req: Request, info: SolverInfo
                    ) -> tuple[list[Evaluation], Status]:
        """The K best plans; ``optimal``/``infeasible`` when every plan was evaluated, else ``feasible``/
        ``unknown`` (a partial enumeration has no bound on the plans it did not reach)."""
        # every chance root of the space in one root finding, before the chunks ask; a space answered from the table
        # walked at another level (enumerate.LEVEL_TWIN) finds only the roots of the plans that table lets pass
        if chance_on(space.sc) and LEVEL_TWIN not in space.__dict__:
            d = space.domains
            cards = np.asarray(card_counts(d), dtype=float)
            for acc in d["acc"]:
                for ep in (d.get("ep", [1]) if space.sc.model.moe else [1]):  # a MoE plan's sigma reads its ep
                    T.chance_fill(space.sc, acc, [(m, cards, space.interval(tau, cards, m)) for m in d["mode"]
                                                  for tau in d["tau"]], float(ep))
        assignments, evaluated, chunks = enumerate_best(space, req)
        plans = [evaluate_assignment(space, a) for a in assignments]
        info.evaluated, info.rounds = evaluated, chunks
        if evaluated >= space.size():
            info.gap = 0.0 if plans else None
            return plans, (Status.OPTIMAL if plans else Status.INFEASIBLE)
        info.gap = None
        return plans, (Status.FEASIBLE if plans else Status.UNKNOWN)


ENUMERATE = Enumerate()
