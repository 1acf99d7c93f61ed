"""What limits an optimum, one implementation for ``tpopt solve`` and ``tpopt rl``.

Every question is put to an :class:`Oracle`: the best plan of one problem under a set of enforced
families (optionally with some decisions restricted and the card counts fixed), or None when none
exists. :mod:`tpopt.optimizer.report` has the pre-training oracles (an enumeration table, the layout
decomposition, the monolithic solver), :mod:`tpopt.optimizer.rl` the RL one (an exact RL solve per
question). On any oracle, with B* the best plan and key its objective:

- f *binds* (:func:`binding`) when dropping f alone admits a strictly better plan:
  key(best without f) < key(B*) (1 - REL), the discrete analogue of a non-zero shadow price;
- f alone *rules out* an alternative (:func:`ruled_out`) when the alternative admits a plan with f dropped;
- a *conflict* (:func:`conflict`, :func:`deletion_filter`) is a set C of families that admits no plan while
  C without f admits one for every f of C: for f in C (in order): if C \\ {f} admits no plan, C := C \\ {f}.

How a report quotes a plan of its kind (objective in display units, summary, one family's value against
its limit) is a :class:`Quote`; :func:`binding_entry` and :func:`alternative` build the report's dicts.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from tpopt.optimizer.limits import Undecided

REL = 1e-9  # relative margin of "strictly better"

PlanT = TypeVar("PlanT")
PlanT_co = TypeVar("PlanT_co", covariant=True)


class Oracle(Protocol[PlanT_co]):
    """The best plan of one problem under ``enforced`` families for ``objective`` (None: no plan);
    ``restrict`` maps decisions to their allowed values, ``cards`` the allowed card counts. Raises
    :class:`~tpopt.optimizer.limits.Undecided` when a time limit leaves the question open."""

    def best(self, enforced: Collection[str], objective: str, restrict: dict[str, Any] | None = None,
             cards: Iterable[int] | None = None) -> PlanT_co | None: ...


@dataclass(frozen=True)
class Quote(Generic[PlanT]):
    """How a report quotes a plan: ``value(plan, objective)`` the objective in display units,
    ``summary(plan)`` its decisions and headline figures, ``violation(plan, family)`` the family's value
    against its limit in the family's unit."""

    value: Callable[[PlanT, str], float]
    summary: Callable[[PlanT], dict[str, Any]]
    violation: Callable[[PlanT, str], dict[str, Any]]


def dropped_alone(enforced: Collection[str], relaxable: Iterable[str], skip: Collection[str] = ()
                  ) -> Iterator[tuple[str, list[str]]]:
    """(f, the enforced families but f) for each relaxable family f that is enforced and not skipped, in
    ``relaxable`` order."""
    for f in relaxable:
        if f in enforced and f not in skip:
            yield f, [g for g in enforced if g != f]


def binding(oracle: Oracle[PlanT], best: PlanT, objective: str, enforced: Collection[str], relaxable: Iterable[str],
            better: Callable[[PlanT, PlanT, str], bool], skip: Collection[str] = (),
            undecided: list[str] | None = None) -> list[tuple[str, PlanT]]:
    """(f, the best plan without f) for each family f that binds: ``better(best without f, best)``.
    ``skip``: families no plan can violate (they bind nothing). A question the time limit leaves open
    names its family in ``undecided`` (never binding, never slack)."""
    out = []
    for f, others in dropped_alone(enforced, relaxable, skip):
        try:
            alt = oracle.best(others, objective)
        except Undecided:
            if undecided is not None:
                undecided.append(f)
            continue
        if alt is not None and better(alt, best, objective):
            out.append((f, alt))
    return out


def binding_entry(name: str, without: PlanT, best: PlanT, objective: str, quote: Quote[PlanT]) -> dict[str, Any]:
    """A binding family as reports give it: the objective without it, the saving
    1 - objective(without) / objective(best), the plan without it and how far that plan breaks it."""
    return {"name": name, "objective_without": quote.value(without, objective),
            "saving": 1 - quote.value(without, objective) / quote.value(best, objective),
            "plan_without": quote.summary(without), "violates": quote.violation(without, name)}


def ruled_out(oracle: Oracle[PlanT], objective: str, enforced: Collection[str], relaxable: Iterable[str],
              restrict: dict[str, Any] | None = None, cards: Iterable[int] | None = None,
              skip: Collection[str] = (), closest: Callable[..., PlanT | None] | None = None
              ) -> list[tuple[str, PlanT]]:
    """(f, a plan of the restricted alternative without f) for each family f whose drop alone admits one:
    the best such plan, or ``closest(f, others, restrict, cards)`` (the plan nearest to meeting f) where the
    oracle can tell."""
    out = []
    for f, others in dropped_alone(enforced, relaxable, skip):
        alt = closest(f, others, restrict, cards) if closest is not None else \
            oracle.best(others, objective, restrict, cards)
        if alt is not None:
            out.append((f, alt))
    return out


def alternative(oracle: Oracle[PlanT], quote: Quote[PlanT], head: dict[str, Any], best: PlanT, objective: str,
                enforced: Collection[str], restrict: dict[str, Any] | None, cards: Iterable[int] | None,
                why: Callable[[], list[dict[str, Any]]]) -> dict[str, Any]:
    """One alternative a user would ask about (``head``: its label): feasible with its plan, objective and
    delta = objective(alternative) / objective(best) - 1, or infeasible and ``why()`` (what rules it out)."""
    alt = oracle.best(enforced, objective, restrict, cards)
    if alt is not None:
        return {**head, "feasible": True, "plan": quote.summary(alt), "objective": quote.value(alt, objective),
                "delta": quote.value(alt, objective) / quote.value(best, objective) - 1}
    return {**head, "feasible": False, "ruled_out_by": why()}


def deletion_filter(admits: Callable[[set[str]], bool], core: Iterable[str], order: Iterable[str],
                    report_order: Iterable[str]) -> list[str]:
    """Shrink a set of families that admits no plan to an irreducible one: for f in C, taken in ``order``
    (its first occurrence), if C \\ {f} admits no plan, C := C \\ {f}. The families left, in ``report_order``."""
    kept = set(core)
    for f in [f for f in dict.fromkeys(order) if f in kept]:
        trial = kept - {f}
        if not admits(trial):
            kept = trial
    return [f for f in report_order if f in kept]


def conflict(admits: Callable[[set[str]], bool], families: Sequence[str]) -> list[str]:
    """An irreducible subset of ``families`` that admits no plan (deletion filter in their order, reported
    in it); [] when they admit one."""
    if admits(set(families)):
        return []
    return deletion_filter(admits, families, families, families)
