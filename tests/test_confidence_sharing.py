"""A request at another confidence level solved on a space that shares the report's tables (issue 39: the
step up and the bisection of the reachable level rebuild the chance table alone), and the fitted alternative
asked of the analysis oracle: the same answers as a space of their own."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tpopt.catalogs.scenario import load_scenario
from tpopt.models import terms as T
from tpopt.optimizer import core
from tpopt.optimizer.plan import shared_space
from tpopt.optimizer.result import Request
from tpopt.optimizer.space import CHANCE_TABLE, TASK_TABLES, Space, rebuilt_tables

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def at(sc, q):
    return replace(sc, task=replace(sc.task, confidence=q))


def test_a_confidence_level_alone_rebuilds_the_chance_table_alone():
    sc = at(load_scenario(EXAMPLES / "design-case.toml"), 0.9)
    assert rebuilt_tables(sc, at(sc, 0.95)) == (CHANCE_TABLE,)
    assert rebuilt_tables(sc, sc) == ()
    assert rebuilt_tables(at(sc, None), sc) is None  # the chance form switched on: every table of its own
    assert rebuilt_tables(sc, at(sc, None)) is None
    both = replace(sc, task=replace(sc.task, confidence=0.95, tokens=sc.task.tokens * 2))
    assert set(rebuilt_tables(sc, both)) == set(TASK_TABLES)  # tokens too: every task table


def test_a_shared_space_at_another_level_solves_as_its_own():
    """The Llama-3-8B confidence example (1,536 cards, TP 1/2, sync/async saves) at 80, 95 and 99 %: each
    solved on a space sharing the 80 % space's built tables equals the solve on a space of its own, and
    its chance table is its own level's (never the base's)."""
    base_sc = at(load_scenario(EXAMPLES / "llama3-8b-confidence.toml"), 0.8)
    base = Space.from_scenario(base_sc)
    req = Request(seed=0, workers=1)
    first = core.solve(base_sc, "enumerate", req, space=base)
    assert first.best is not None
    dict.__getitem__(base.tables, CHANCE_TABLE)  # built by the solve: the one table a level moves
    for q in (0.95, 0.99):
        sc = at(base_sc, q)
        shared = shared_space(base, sc)
        assert shared is not None and CHANCE_TABLE not in dict.keys(shared.tables)
        assert dict.keys(shared.tables) == dict.keys(base.tables) - {CHANCE_TABLE}
        for solver in ("enumerate", "cpsat"):
            got = core.solve(sc, solver, req, space=shared)
            own = core.solve(sc, solver, req, space=Space.from_scenario(sc))
            assert got.status == own.status
            assert (got.best is None) == (own.best is None)
            if own.best is not None:
                assert got.best.plan_dict() == own.best.plan_dict()
                assert got.best.metrics["cost"] == own.best.metrics["cost"]
        assert (shared.tables[CHANCE_TABLE].values != base.tables[CHANCE_TABLE].values).any()


def test_the_law_inputs_remembered_are_the_ones_computed():
    """The law inputs a level's roots read (remembered across levels) equal a fresh computation."""
    sc = at(load_scenario(EXAMPLES / "llama3-8b-confidence.toml"), 0.9)
    acc = next(iter(sc.systems))
    T.chance_step_max(sc, acc, "sync", [512.0, 1024.0], [600.0, 1800.0])
    remembered = T.chance_step_max(at(sc, 0.97), acc, "sync", [512.0, 1024.0], [600.0, 1800.0])
    T._CHANCE_MEMO.clear()
    from tpopt.models.terms.deadline import _LAW_MEMO

    _LAW_MEMO.clear()
    fresh = T.chance_step_max(at(sc, 0.97), acc, "sync", [512.0, 1024.0], [600.0, 1800.0])
    assert remembered.tolist() == fresh.tolist()


def test_reachable_skips_the_levels_the_report_decided():
    """reachable(met=q, missed=t): the levels at or below q met and those at or above t missed without a solve
    (the step up's: its own solve met q, its target t was proven out of reach); the same bisection's answer with
    fewer solves, and every level it still solves lies strictly between the two."""
    from tpopt.optimizer import confidence as C

    sc = load_scenario(EXAMPLES / "llama3-8b-confidence.toml", {"schedule.deadline": "4d"})
    asked: list[list[float]] = [[], []]

    def counting(k: int) -> C.Solve:
        def solve(s, backend, req):
            asked[k].append(s.task.confidence)
            return C.one_space(s, backend, req)
        return solve

    want = C.reachable(sc, "enumerate", Request(), solve=counting(0))
    assert 0.9 < want < 0.999  # a bisection, not an end point
    met, missed = 0.5, min(want + 0.004, 0.999)
    got = C.reachable(sc, "enumerate", Request(), solve=counting(1), met=met, missed=missed)
    assert got == want
    assert all(met < q < missed for q in asked[1])
    assert len(asked[1]) < len(asked[0])


def test_reachable_answers_every_level_as_a_solve_would():
    """reachable skips the levels a plan it already found meets (confidence.meets: the plan's families evaluated
    at the level). The reference here is the bisection written out with a solve at every level (no skipping):
    the same answer, the levels solved are among the reference's, and every level skipped is one where the
    reference's solve found a plan."""
    from tpopt.optimizer import confidence as C
    from tpopt.optimizer.result import Status

    sc = load_scenario(EXAMPLES / "llama3-8b-confidence.toml", {"schedule.deadline": "4d"})
    verdict: dict[float, bool] = {}

    def plain(q: float) -> bool:
        r = core.solve(at(sc, q), "enumerate", Request(objective="time"))
        verdict[q] = r.status != Status.INFEASIBLE
        return verdict[q]

    lo, hi = 0.01, 0.999
    assert plain(lo) and not plain(hi)
    while hi - lo > 1e-3:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if plain(mid) else (lo, mid)
    asked: list[float] = []

    def counting(s, backend, req):
        asked.append(s.task.confidence)
        return C.one_space(s, backend, req)

    assert C.reachable(sc, "enumerate", Request(), solve=counting) == lo
    assert set(asked) <= set(verdict)
    assert all(verdict[q] for q in set(verdict) - set(asked))
    assert len(asked) < len(verdict)


def test_a_plan_well_above_a_level_meets_it():
    """reachable counts a level met without its chance root when a known plan's P(on time) lies SURE_MARGIN above
    it (sigma >= SMOOTH_SIGMA): on the design case's and the Llama-3-8B example's plans, at levels from 1 % up to
    just that margin below P(on time), meets() (the plan's step against the chance step limit found at the level)
    agrees at every one."""
    from tpopt.models import families as F
    from tpopt.optimizer import confidence as C

    for name in ("design-case.toml", "llama3-8b-confidence.toml"):
        sc = at(load_scenario(EXAMPLES / name), 0.9)
        r = core.solve(sc, "enumerate", Request(objective="time"))
        assert r.best is not None
        law = C.law_of(sc, r.best)
        assert law.sigma >= C.SMOOTH_SIGMA
        p = float(law.cdf(F.limit(F.DEADLINE, sc)))
        assert 0.9 < p < 1.0
        assert C.level_free_met(sc, r.best)
        top = p - C.SURE_MARGIN
        for q in [0.01, 0.3, 0.5, 0.8, 0.9, 0.5 * (0.9 + top), top - 1e-5, top - 1e-7, top]:
            assert C.meets(sc, r.best, q, others=True), (name, q, p)
        assert not C.meets(sc, r.best, 0.5 * (p + 1.0), others=True)  # the check discriminates above p


def test_the_step_up_over_batch_choices_solves_only_the_batches_that_can_hold_its_plan():
    """The confidence report's step up over a batch choice (the design case with five batches, 95 % -> 99.9 %):
    each batch's proven optimum at 95 % is a floor of its optimum at 99.9 % (a plan meeting the higher level meets
    the lower), so the re-solve skips the batches whose floor is above the best plan it found, on spaces sharing
    the report's tables; the same status, plan and cost as the re-solve of every batch on spaces of their own.
    No floor below the report's level, nor for another objective."""
    from tpopt.optimizer import backends, outer
    from tpopt.optimizer import plan as P

    sc = at(load_scenario(EXAMPLES / "design-case-batch.toml"), 0.95)
    req = Request(seed=0, workers=1)
    base = outer.solve_batches(sc, backends.checked(backends.DEFAULT), req)
    batches = outer.batch_choices(sc)
    assert len(batches) == 5 and all(c.result.best is not None for c in base.choices)
    target = at(sc, 0.999)
    floors = P._level_floors(base, target, req.objective)
    assert set(floors) == set(batches)
    got, _ = P._chosen(target, backends.DEFAULT, req, batches=base)
    own, _ = P._chosen(target, backends.DEFAULT, req)
    assert got.status == own.status and own.best is not None and got.best is not None
    assert got.best.plan_dict() == own.best.plan_dict()
    assert got.best.metrics["cost"] == own.best.metrics["cost"]
    assert got.batches is not None and own.batches is not None
    assert len(own.batches.choices) == 5 and len(got.batches.choices) < 5  # batches skipped by their floors
    assert [c.batch for c in got.batches.choices] == [b for b in batches if b in {c.batch for c in got.batches.choices}]
    assert P._level_floors(base, at(sc, 0.9), req.objective) == {}
    assert P._level_floors(base, target, "time" if req.objective == "cost" else "cost") == {}


def test_an_enumeration_at_another_level_reads_the_walked_table():
    """A space shared at another confidence level whose base walked every plan (the report's table,
    enumerate.keep_point_table) is answered from that table (enumerate.LEVEL_TWIN: the other families' verdicts as
    walked, the chance step limit of each plan at the new level): the same status and plans, in the same order, as an
    enumeration of a space of its own, at levels below and above the base's, for both objectives and the top 3."""
    from tpopt.optimizer.enumerate import LEVEL_TWIN, WALKED_TABLE, keep_point_table

    for name in ("llama3-8b-confidence.toml", "design-case.toml"):
        base_sc = at(load_scenario(EXAMPLES / name), 0.9)
        base = Space.from_scenario(base_sc)
        keep_point_table(base)
        assert core.solve(base_sc, "enumerate", Request(seed=0, workers=1), space=base).best is not None
        assert WALKED_TABLE in base.__dict__
        for q in (0.5, 0.95, 0.99, 0.999):
            for objective, top in (("cost", 1), ("time", 1), ("cost", 3)):
                req = Request(objective=objective, top=top, seed=0, workers=1)
                shared = shared_space(base, at(base_sc, q))
                assert shared is not None and LEVEL_TWIN in shared.__dict__
                got = core.solve(at(base_sc, q), "enumerate", req, space=shared)
                own = core.solve(at(base_sc, q), "enumerate", req, space=Space.from_scenario(at(base_sc, q)))
                assert got.status == own.status, (name, q, objective)
                assert [p.plan_dict() for p in got.plans] == [p.plan_dict() for p in own.plans], (name, q, objective)
                assert [p.metrics["cost"] for p in got.plans] == [p.metrics["cost"] for p in own.plans]


def test_a_finish_quantile_from_the_remembered_law_inputs_is_the_fresh_one():
    """finish_quantile reads each (cards, interval)'s law inputs as a chance table remembered them (computed over
    a whole array of pairs): the same bits as the law inputs computed for the plan alone (deadline._law_inputs
    and step_sigma, the computation it replaced)."""
    import numpy as np

    from tpopt.models import finish
    from tpopt.models.terms.deadline import _LAW_MEMO, _law_inputs

    sc = at(load_scenario(EXAMPLES / "llama3-8b-confidence.toml"), 0.95)
    acc = next(iter(sc.systems))
    cards, tau = np.array([256.0, 512.0, 1024.0, 1536.0]), np.array([600.0, 1800.0, 3600.0, 900.0])
    step = np.array([9.0, 5.0, 2.6, 1.9])
    T._CHANCE_MEMO.clear()
    _LAW_MEMO.clear()
    T.chance_step_max(sc, acc, "async", np.repeat(cards, 4), np.tile(tau, 4))  # 16 pairs remembered at once
    got = T.finish_quantile(sc, acc, "async", cards, tau, step, 0.95)
    saves, _, kap = _law_inputs(sc, acc, "async", cards, tau)
    sigma = np.broadcast_to(np.asarray(T.step_sigma(sc, acc, cards, 1.0)[0], dtype=float), cards.shape)
    finish._QUANTILE_MEMO.clear()
    fresh = finish.quantiles(0.95, sc.task.reserved_s, T.iteration_count(sc) * step, saves, sigma,
                             (kap[0], kap[1], kap[2]))
    assert got.tolist() == fresh.tolist()


def test_a_step_up_from_the_walked_table_finds_only_the_roots_of_plans_the_walk_let_pass():
    """A re-solve at a higher level from the table walked at a lower one (enumerate.LEVEL_TWIN) finds the chance
    roots of only the (save mode, cards, interval) of plans that met the walked level (a plan missing a level misses
    every higher one; enumerate.LEVEL_UP_MARGIN), fewer than the table holds, and answers as a space of its own."""
    import numpy as np

    from tpopt.optimizer.enumerate import LEVEL_TWIN, WALKED_TABLE, keep_point_table

    base_sc = at(load_scenario(EXAMPLES / "llama3-8b-confidence.toml"), 0.95)
    base = Space.from_scenario(base_sc)
    keep_point_table(base)
    assert core.solve(base_sc, "enumerate", Request(seed=0, workers=1), space=base).best is not None
    table = base.__dict__[WALKED_TABLE]
    passed = table.mask()  # every family as walked at 95 %
    mode = np.asarray(table.idx["mode"])

    def pairs(sel):
        return {(int(m), float(c), float(t)) for m, c, t in zip(mode[sel], table.cards[sel], table.interval[sel],
                                                                 strict=True)}

    for q in (0.99, 0.999):
        T._CHANCE_MEMO.clear()
        shared = shared_space(base, at(base_sc, q))
        assert shared is not None and LEVEL_TWIN in shared.__dict__
        got = core.solve(at(base_sc, q), "enumerate", Request(seed=0, workers=1), space=shared)
        roots = sum(len(m) for k, m in T._CHANCE_MEMO.items() if k[0] == q)
        assert 0 < roots <= len(pairs(passed)) < len(pairs(np.ones(passed.shape, dtype=bool))), q
        own = core.solve(at(base_sc, q), "enumerate", Request(seed=0, workers=1),
                         space=Space.from_scenario(at(base_sc, q)))
        assert got.status == own.status and [p.plan_dict() for p in got.plans] == [p.plan_dict() for p in own.plans]


def test_a_confidence_report_does_not_load_numpy_ma():
    """The Llama-3-8B confidence example and the design case at 95 % (their reports' step up, finish quantiles and
    chance tables) do not import numpy.ma: np.unique without an index asked imports it (numpy 2.x, about 10 ms of
    a 0.3 s command), the confidence path takes distinct values through sets."""
    import subprocess
    import sys

    for args in (["--scenario", str(EXAMPLES / "llama3-8b-confidence.toml")],
                 ["--scenario", str(EXAMPLES / "design-case.toml"), "--confidence", "95%"]):
        code = ("import sys\nfrom tpopt.cli.main import main\n"
                f"sys.argv = ['tpopt', 'solve', *{args!r}]\n"
                "try:\n    main()\nexcept SystemExit as e:\n    assert e.code == 0, e.code\n"
                "print('LOADED', 'numpy.ma' in sys.modules, 'scipy.special' in sys.modules)\n")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        assert "P(on time)" in out and "LOADED False False" in out, args
