"""A plan's decision variables as one named record, and the variables a term declares.

Every term function of :mod:`tpopt.models.terms` takes the scenario and then *keyword-only*
parameters named after the decision variables it depends on (the names of
:data:`tpopt.optimizer.space.VARIABLES`)::

    def states(sc, *, zero, offload, tp, cp, pp, dp, ep=1, etp=0): ...

so a swapped argument cannot go unnoticed, and the solvers' tables read their variables from the
signature (:func:`term_variables`) instead of a list kept by hand. The evaluator holds one plan (or a
broadcast grid of plans) as a :class:`Layout` and calls each term with the keywords it declares
(:meth:`Layout.args`), as torchtitan's ``ParallelDims`` holds tp, cp, pp, dp and ep with the card
count derived from them.

The mixture-of-experts variables (ep, etp, cap) are special in one way: a term that declares one of
them *with a default* (``ep=1``) uses it only for a MoE model; a dense model's tables leave it out
(its domain is that single default anyway). A term that declares one without a default (the MoE
rules: ``ok.layout.ep_group``, ``ok.moe.capacity_drops``) has it in its table for every model.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import NDArray

from tpopt.models.numeric import FloatArray

MOE_VARIABLES = ("ep", "etp", "cap")
"""Mixture-of-experts variables: expert parallelism, expert tensor parallelism (0 = the same as tp)
and the capacity factor (0 = dropless)."""


@dataclass(frozen=True)
class Layout:
    """One plan's decision variables (or a broadcastable grid of them: numeric fields may be numpy
    arrays), named as the solvers name them. Categorical fields (acc, offload, recompute, schedule,
    mode, sp) are scalars."""

    acc: str = ""
    """accelerator name"""
    tp: Any = 1
    """tensor-parallel size"""
    cp: Any = 1
    """context-parallel size (models/context.py)"""
    pp: Any = 1
    """pipeline stages"""
    dp: Any = 1
    """data-parallel size"""
    mb: Any = 1
    """micro-batch (sequences)"""
    zero: Any = 0
    """ZeRO stage (0-3)"""
    offload: str = "none"
    """optimizer state offload: "none" or "cpu\""""
    recompute: str = "none"
    """recompute groups (memory.parse_recompute)"""
    schedule: str = "1f1b"
    """pipeline schedule (models/pipeline/)"""
    nics: Any = 1
    """NICs per host"""
    tau: Any = 0.0
    """save interval, seconds (0 = the optimum for the card count)"""
    mode: str = "sync"
    """save mode: "sync" or "async\""""
    ep: Any = 1
    """expert parallelism (MoE)"""
    etp: Any = 0
    """expert tensor parallelism (MoE; 0 = the same as tp)"""
    cap: Any = 0.0
    """capacity factor (MoE; 0 = dropless)"""
    sp: bool | None = None
    """sequence parallelism under TP (None: the scenario's)"""

    @property
    def cards(self) -> NDArray[Any]:
        """Cards of the layout: tp x cp x pp x dp (arrays broadcast)."""
        cards: NDArray[Any] = np.asarray(self.tp) * np.asarray(self.cp) * np.asarray(self.pp) * np.asarray(self.dp)
        return cards

    def grad_accum(self, global_batch: int) -> FloatArray:
        """Micro-batches per step per card: batch / (dp x mb) (fractional when it does not divide)."""
        ga: FloatArray = global_batch / (np.asarray(self.dp, dtype=float) * np.asarray(self.mb, dtype=float))
        return ga

    def args(self, fn: Callable[..., object]) -> dict[str, Any]:
        """The keywords ``fn`` declares among the layout's variables, from this layout:
        ``fn(sc, **layout.args(fn))`` calls a term with exactly the variables it depends on."""
        return {name: getattr(self, name) for name in declared_variables(fn)}


VARIABLE_NAMES = tuple(f.name for f in fields(Layout))
"""Every decision variable a term can declare (the fields of :class:`Layout`)."""


@lru_cache(maxsize=1024)
def _signature(fn: Callable[..., object]) -> tuple[tuple[str, bool], ...]:
    """(name, has a default) of ``fn``'s keyword-only parameters that are decision variables, in
    declaration order (read once per function)."""
    return tuple((p.name, p.default is not inspect.Parameter.empty)
                 for p in inspect.signature(fn).parameters.values()
                 if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name in VARIABLE_NAMES)


def declared_variables(fn: Callable[..., object]) -> tuple[str, ...]:
    """The decision variables ``fn`` declares (its keyword-only parameters named after a
    :class:`Layout` field), in declaration order."""
    return tuple(name for name, _ in _signature(fn))


@lru_cache(maxsize=1024)
def term_variables(fn: Callable[..., object], moe: bool) -> tuple[str, ...]:
    """The variables a term's table has, in the term's declaration order: every variable it declares,
    except, for a dense model (``moe=False``), the MoE variables it declares with a default.
    Kept per (function, ``moe``): every group or block space of a walk declares its tables again."""
    return tuple(name for name, default in _signature(fn)
                 if moe or not (default and name in MOE_VARIABLES))
