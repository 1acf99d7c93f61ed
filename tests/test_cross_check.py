"""benchmarks/cross_check.py: its reproducer files rebuild the very scenario that was checked, and a
small run through every backend and method finds no disagreement (the full run is a benchmark)."""

import importlib.util
import tomllib
from pathlib import Path

import numpy as np

from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import build_scenario

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("cross_check", ROOT / "benchmarks" / "cross_check.py")
cc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cc)


def test_reproducer_files_rebuild_the_scenario():
    cat = load_catalog()
    for i in range(20):
        raw, _ = cc.random_raw(np.random.default_rng([5, i]))
        again = tomllib.loads(cc.to_toml(raw))
        assert again == raw
        a, b = build_scenario(raw, cat), build_scenario(again, cat)
        assert a == b


def test_a_small_run_agrees(tmp_path, capsys):
    assert cc.main(["--n", "4", "--seed", "3", "--out", str(tmp_path / "cc")]) == 0
    out = capsys.readouterr().out
    assert "0 disagreements, 0 tracebacks" in out
    assert not (tmp_path / "cc").exists()  # nothing to reproduce


def test_a_small_limited_run_is_honest(tmp_path, capsys):
    # limits from 1 ms to 1 s on every backend and method in turn: no traceback, no wrong status
    assert cc.main(["--n", "3", "--seed", "3", "--limited", "8", "--out", str(tmp_path / "cc")]) == 0
    out = capsys.readouterr().out
    assert "0 tracebacks, 0 wrong statuses" in out and "24 limited answers" in out


def test_the_limited_check_catches_a_wrong_answer(monkeypatch, design_path):
    # the checker itself can fail: a solve claiming a wrong optimum, an unknown with a plan, a feasible
    # plan better than the optimum, a status without the limit said are each reported
    from tpopt.catalogs.scenario import load_scenario
    from tpopt.optimizer import core
    from tpopt.optimizer.result import Request, Status
    from tpopt.optimizer.space import Space

    design = load_scenario(design_path, {"search.tp": [1, 2, 4, 8], "search.zero_stage": [0, 1, 2, 3],
                                         "search.max_cards": 1024})
    space = Space.from_scenario(design)
    real = core.solve
    right = real(design, "enumerate", Request())
    opt = right.best.metrics["cost"]
    counts = {}

    def answer(status, plans, limit, gap):
        def fake(*a, **k):
            r = real(design, "enumerate", Request())
            r.status, r.plans = status, plans
            r.solver.limit_reached, r.solver.limit_phase, r.solver.gap = limit, "x" if limit else "", gap
            return r
        return fake

    worse = real(design, "enumerate", Request(objective="time")).best  # the fastest plan: feasible, dearer
    assert worse.metrics["cost"] > opt * 1.001
    cases = [(Status.OPTIMAL, [worse], False, 0.0, opt), (Status.UNKNOWN, right.plans, True, None, opt),
             (Status.FEASIBLE, right.plans, False, None, opt), (Status.INFEASIBLE, [], False, None, opt),
             (Status.FEASIBLE, [worse], True, 0.0, opt)]
    for status, plans, limit, gap, optimum in cases:
        monkeypatch.setattr(core, "solve", answer(status, plans, limit, gap))
        assert cc.check_limited(design, space, "cpsat", "auto", "cost", 0.01, "optimal", optimum, counts) is not None
    monkeypatch.setattr(core, "solve", answer(Status.FEASIBLE, [worse], True, None))
    assert cc.check_limited(design, space, "cpsat", "auto", "cost", 0.01, "optimal", opt, counts) is None


def test_a_small_question_run_is_honest(tmp_path, capsys):
    # the question paths ([market] with spot, --confidence, stages, batch choices, explain) under limits from 1 ms
    # to 1 s: no wrong verdict, no traceback, every limit kept within max(0.5 s, 10 %); what tpopt imports on first
    # use (SciPy's ufuncs past cephes' numpy budget among them) is loaded before any answer is timed
    # (cross_check.warm_lazy_imports), so run alone or after other tests it times the same answers
    assert cc.main(["--questions", "3", "--seed", "0", "--limited", "4", "--out", str(tmp_path / "cc")]) == 0
    out = capsys.readouterr().out
    assert "12 limited answers" in out and "0 wrong verdicts, 0 tracebacks, 0 limits overrun" in out
    assert not (tmp_path / "cc").exists()


def test_the_question_generator_draws_every_path():
    kinds, shares, confidence = set(), False, False
    for i in range(60):
        raw, offers, _ = cc.random_question(np.random.default_rng([0, i, 2]))
        kinds.add("market" if offers else "staged" if "stages" in raw["task"] else "batch")
        shares |= "spot_shares" in raw.get("market", {})
        confidence |= "confidence" in raw["schedule"]
        assert 'market = "spot"' in offers or not offers  # every market case has a spot offer
    assert kinds == {"market", "batch", "staged"} and shares and confidence


def test_the_question_judge_catches_a_wrong_answer():
    # (status, value, limit said, has a plan) against the reference verdict and optimum
    assert cc.judge(("optimal", 100.0, False, True), "optimal", 100.0) is None
    assert cc.judge(("feasible", 120.0, True, True), "optimal", 100.0) is None
    assert cc.judge(("unknown", None, True, False), "infeasible", None) is None
    assert cc.judge(("optimal", 90.0, False, True), "optimal", 100.0)  # not the optimum
    assert cc.judge(("infeasible", None, False, False), "optimal", 100.0)  # a plan exists
    assert cc.judge(("optimal", 100.0, False, True), "infeasible", None)
    assert cc.judge(("feasible", 90.0, True, True), "optimal", 100.0)  # better than the optimum
    assert cc.judge(("feasible", 120.0, False, True), "optimal", 100.0)  # the limit not said
    assert cc.judge(("unknown", None, False, False), "optimal", 100.0)
    assert cc.judge(("unknown", 120.0, True, True), "optimal", 100.0)  # unknown with a plan
