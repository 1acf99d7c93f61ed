"""Any MILP solver Pyomo drives as a backend (``pyomo:NAME``): the HiGHS encoding built in Pyomo
(``optimizer/pyomo_model.py``); the solver itself is resolved, and checked installed, by name."""

from __future__ import annotations

from tpopt.optimizer.pyomo_model import PyomoMaster, PyomoSolver, model_class


class Pyomo:
    """A family: one entry, any ``pyomo:NAME`` whose solver Pyomo can run here."""

    def require(self, name: str, req) -> None:
        """A missing solver fails here, before anything is written."""
        PyomoSolver(name, req)

    def model(self, name: str, space, req):
        return model_class(name)(space, req)

    def master(self, name: str, space, bounds, allowed: dict, req) -> PyomoMaster:
        return PyomoMaster(space, bounds, allowed, req, name)

    def solve_space(self, name: str, space, req, info):
        raise NotImplementedError("Pyomo answers through its model and the solve-verify loop")


PYOMO = Pyomo()
