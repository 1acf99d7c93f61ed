"""tpopt: a training-plan optimizer for large language models.

The repository root is the ``tpopt`` package. Subpackages:

* :mod:`tpopt.models` -- pure analytic relations (numbers in, numbers out, SI units inside).
* :mod:`tpopt.catalogs` -- data files (accelerators, links, storage, models) and scenario loading.
* :mod:`tpopt.optimizer` -- CP-SAT / HiGHS formulations, the brute-force enumerator, reports.
* :mod:`tpopt.cli` -- the ``tpopt`` command line (thin; no domain logic).
"""

__version__ = "0.1.0"
