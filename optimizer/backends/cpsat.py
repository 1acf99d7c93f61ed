"""OR-Tools CP-SAT as a backend: the integer-scaled encoding (``optimizer/cpsat.py``) and its
decomposition master (``optimizer/decompose.py``). Importing this module loads ortools."""

from __future__ import annotations

from typing import NoReturn

from tpopt.optimizer.cpsat import CpSatModel
from tpopt.optimizer.decompose import Allowed, CpSatMaster, LayoutBounds
from tpopt.optimizer.result import Request, SolverInfo
from tpopt.optimizer.space import Space


class CpSat:
    """A relaxed model for the solve-verify loop and a master for the layout decomposition."""

    def require(self, name: str, req: Request) -> None:
        """Nothing to check: ortools is a dependency."""

    def model(self, name: str, space: Space, req: Request) -> CpSatModel:
        return CpSatModel(space, req)

    def master(self, name: str, space: Space, bounds: LayoutBounds, allowed: Allowed, req: Request) -> CpSatMaster:
        return CpSatMaster(space, bounds, allowed, req)

    def solve_space(self, name: str, space: Space, req: Request, info: SolverInfo) -> NoReturn:
        raise NotImplementedError("CP-SAT answers through its model and the solve-verify loop")


CPSAT = CpSat()
