"""OR-Tools CP-SAT as a backend: the integer-scaled encoding (``optimizer/cpsat.py``) and its
decomposition master (``optimizer/decompose.py``). Importing this module loads ortools."""

from __future__ import annotations

from tpopt.optimizer.backends.verify import RelaxedBackend
from tpopt.optimizer.cpsat import CpSatModel
from tpopt.optimizer.decompose import CpSatMaster

CPSAT = RelaxedBackend("CP-SAT", CpSatModel, CpSatMaster)
