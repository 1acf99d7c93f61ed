"""Any MILP solver Pyomo drives as a backend (``pyomo:NAME``): the HiGHS encoding built in Pyomo
(``optimizer/pyomo_model.py``); the solver itself is resolved, and checked installed, by name."""

from __future__ import annotations

from typing import NoReturn

from tpopt.optimizer.backends import CapabilityError
from tpopt.optimizer.decompose import Allowed, LayoutBounds
from tpopt.optimizer.pyomo_model import PyomoMaster, PyomoMilp, PyomoSolver, model_class
from tpopt.optimizer.result import Request, SolverInfo
from tpopt.optimizer.space import Space


class Pyomo:
    """A family: one entry, any ``pyomo:NAME`` whose solver Pyomo can run here."""

    def require(self, name: str, req: Request) -> None:
        """A missing solver fails here, before anything is written."""
        PyomoSolver(name, req)

    def model(self, name: str, space: Space, req: Request) -> PyomoMilp:
        return model_class(name)(space, req)

    def master(self, name: str, space: Space, bounds: LayoutBounds, allowed: Allowed, req: Request) -> PyomoMaster:
        return PyomoMaster(space, bounds, allowed, req, name)

    def solve_space(self, name: str, space: Space, req: Request, info: SolverInfo) -> NoReturn:
        raise CapabilityError("Pyomo", "whole-space solve (it answers through its model and the solve-verify loop)")


PYOMO = Pyomo()
