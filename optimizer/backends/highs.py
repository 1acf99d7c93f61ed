"""The HiGHS MILP as a backend: the floating-point encoding (``optimizer/highs.py``) and its
decomposition master (``optimizer/decompose.py``)."""

from __future__ import annotations

from typing import NoReturn

from tpopt.optimizer.decompose import Allowed, HighsMaster, LayoutBounds
from tpopt.optimizer.highs import HighsModel
from tpopt.optimizer.result import Request, SolverInfo
from tpopt.optimizer.space import Space


class Highs:
    """A relaxed model for the solve-verify loop and a master for the layout decomposition."""

    def require(self, name: str, req: Request) -> None:
        """Nothing to check: highspy is a dependency."""

    def model(self, name: str, space: Space, req: Request) -> HighsModel:
        return HighsModel(space, req)

    def master(self, name: str, space: Space, bounds: LayoutBounds, allowed: Allowed, req: Request) -> HighsMaster:
        return HighsMaster(space, bounds, allowed, req)

    def solve_space(self, name: str, space: Space, req: Request, info: SolverInfo) -> NoReturn:
        raise NotImplementedError("HiGHS answers through its model and the solve-verify loop")


HIGHS = Highs()
