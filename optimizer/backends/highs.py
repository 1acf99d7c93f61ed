"""The HiGHS MILP as a backend: the floating-point encoding (``optimizer/highs.py``) and its
decomposition master (``optimizer/decompose.py``)."""

from __future__ import annotations

from tpopt.optimizer.backends.verify import RelaxedBackend
from tpopt.optimizer.decompose import HighsMaster
from tpopt.optimizer.highs import HighsModel

HIGHS = RelaxedBackend("HiGHS", HighsModel, HighsMaster)
