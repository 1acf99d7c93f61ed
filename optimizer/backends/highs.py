"""The HiGHS MILP as a backend: the floating-point encoding (``optimizer/highs.py``) and its
decomposition master (``optimizer/decompose.py``)."""

from __future__ import annotations

from tpopt.optimizer.decompose import HighsMaster
from tpopt.optimizer.highs import HighsModel


class Highs:
    """A relaxed model for the solve-verify loop and a master for the layout decomposition."""

    def require(self, name: str, req) -> None:
        """Nothing to check: highspy is a dependency."""

    def model(self, name: str, space, req) -> HighsModel:
        return HighsModel(space, req)

    def master(self, name: str, space, bounds, allowed: dict, req) -> HighsMaster:
        return HighsMaster(space, bounds, allowed, req)

    def solve_space(self, name: str, space, req, info):
        raise NotImplementedError("HiGHS answers through its model and the solve-verify loop")


HIGHS = Highs()
