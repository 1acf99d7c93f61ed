"""Pure analytic relations of the training-plan model.

Every function takes and returns plain numbers (or numpy arrays that broadcast) in SI base units:
bytes, seconds, FLOP, FLOP/s, bytes/s. Conversions to GB/GiB/days happen only at the edges
(:mod:`tpopt.models.units`). Nothing here imports a solver.
"""
