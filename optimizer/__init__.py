"""Formulations (CP-SAT, HiGHS MILP), the brute-force enumerator, and the reports built on them.

Entry point: :func:`tpopt.optimizer.core.solve`, returning a
:class:`~tpopt.optimizer.result.SolveResult` whatever the backend.
"""
