"""The cooperative clock (issue 24 items 1-2): nothing is raised asynchronously; a limit stops a phase only
at its own checkpoints; a limit reached at *any* checkpoint gives an honest status.

* unit tests of :class:`~tpopt.optimizer.limits.Clock` on an injected time source (deterministic);
* the k-th reading: a fake clock that runs out at its k-th reading, for k over the whole run, on the
  monolithic, decomposed and enumerated solves, a batch choice and a staged scenario: every answer is the
  proven optimum, a feasible plan with the limit said, or "unknown" with the limit said; never a plan that
  is not feasible, a wrong "optimal", an "infeasible" for a feasible request, or an analysis item that
  contradicts the unlimited run;
* regressions: the staged solve cut short said "No plan at all" with time_limit_reached false and gap
  0.0; a limit inside numpy became a TypeError; HiGHS in a sweep worker broke on an interrupted import;
  the enumeration's chunks grew with the space (3.7x the limit on the widest GPT-3 space).
"""

import csv
import itertools
import json
import math
import signal
import sys
import time
from dataclasses import replace

import numpy as np
import pytest
from click.testing import CliRunner

from tests.conftest import ROOT
from tpopt.catalogs.rl import load_rl_scenario
from tpopt.catalogs.scenario import load_scenario
from tpopt.cli.confidence import reachable_line
from tpopt.cli.main import cli, main
from tpopt.models import pipeline
from tpopt.models.evaluate import evaluate
from tpopt.optimizer import confidence as C
from tpopt.optimizer import enumerate as E
from tpopt.optimizer import limits, rl
from tpopt.optimizer.core import solve
from tpopt.optimizer.limits import Clock, TimeLimitReached, checkpoint
from tpopt.optimizer.plan import plan
from tpopt.optimizer.plan_rl import plan_rl
from tpopt.optimizer.result import Request, Status
from tpopt.optimizer.space import Space

EX = ROOT / "examples"


class Readings:
    """A time source that stands still for the clock's start and its next ``k`` readings, then jumps past
    any deadline (``n``: the readings so far, the start included)."""

    def __init__(self, k: float = math.inf):
        self.k, self.n = k, 0

    def __call__(self) -> float:
        self.n += 1
        return 0.0 if self.n <= self.k + 1 else 1e12


# ---------------------------------------------------------------------------------------------
# the clock itself


def test_clock_reads_only_its_time_source():
    t = [100.0]
    c = Clock(10.0, now=lambda: t[0])
    assert c.remaining() == 10.0 and not c.expired("a") and not c.reached
    t[0] = 109.5
    assert c.remaining() == pytest.approx(0.5) and c.elapsed() == pytest.approx(9.5)
    t[0] = 110.0
    assert c.expired("tables") and c.reached and c.phase == "tables"
    assert c.remaining() == 0.0 and c.remaining(0.01) == 0.01
    t[0] = 50.0  # a clock that ran out stays run out, and keeps the first phase
    assert c.expired("later") and c.phase == "tables"


def test_clock_without_limit_never_expires_and_caps_solver_limits():
    c = Clock(None, now=lambda: 1e9)
    assert not c.expired() and c.remaining() == limits.MAX_TIME_LIMIT


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
def test_clock_refuses_a_limit_that_is_not_a_positive_finite_number(bad):
    with pytest.raises(ValueError):
        Clock(bad)


def test_checkpoint_raises_only_inside_a_stoppable_phase():
    c = Clock(1.0, now=Readings(0))  # run out from the first reading on
    checkpoint()  # outside any stoppable phase: nothing happens
    with pytest.raises(TimeLimitReached) as exc:
        with Clock(1.0, now=Readings(1)).stoppable("building the term tables"):  # entry check passes
            checkpoint()
    assert exc.value.phase == "building the term tables"
    assert limits.active_clock() is None  # the phase is left on the way out
    with pytest.raises(TimeLimitReached):
        with c.stoppable("outer"):
            pass  # the entry check


def test_nested_stoppable_phases_name_the_inner_one_and_restore_the_outer():
    outer, inner = Clock(1.0, now=Readings()), Clock(1.0, now=Readings(3))
    with outer.stoppable("outer"):
        with pytest.raises(TimeLimitReached) as exc:
            with inner.stoppable("inner"):
                checkpoint()  # reading 2: fine
                checkpoint()  # reading 3: fine
                checkpoint()  # reading 4: run out
        assert exc.value.phase == "inner"
        assert limits.active_clock() is outer
        checkpoint()  # the outer clock has time: nothing happens


def test_nothing_is_raised_between_checkpoints():
    # a phase that runs past its deadline without reaching a checkpoint is not interrupted (no signal, no
    # timer: an import or a numpy call always completes); the limit is seen at the next check
    handler = signal.getsignal(signal.SIGALRM)
    c = Clock(0.01)
    done = False
    with pytest.raises(TimeLimitReached):
        with c.stoppable("busy"):
            t = time.monotonic()
            while time.monotonic() - t < 0.1:
                np.unique(np.arange(1000) % 7)
            assert signal.getsignal(signal.SIGALRM) is handler  # no alarm handler was installed
            done = True
    assert done and c.reached and c.phase == "busy"


def test_a_command_clock_counts_from_the_command_start():
    assert limits.command_start() is None  # the API and in-process tests: the clock starts when it is made
    before = time.monotonic()
    with limits.command_started():
        start = limits.command_start()
        assert before <= start <= time.monotonic()
        assert Clock(5.0, start=start).start == start
    assert limits.command_start() is None  # cleared: a later command in this process starts its own


def test_a_command_run_in_process_leaves_no_stale_start(monkeypatch, capsys):
    # main() run in a test process, then a click invocation: the second must not inherit the first's start
    monkeypatch.setattr(sys, "argv", ["tpopt", "solve", "--json", "--time-limit", "30s"])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 0 and limits.command_start() is None
    capsys.readouterr()
    rc, out = run("solve", "--json", "--time-limit", "30s")
    assert rc == 0 and json.loads(out)["status"] == "optimal"


# ---------------------------------------------------------------------------------------------
# a limit at the k-th reading: honest statuses


def _reference(sc, backend):
    r = plan(sc, backend, Request(time_limit=600.0))
    assert r.status == Status.OPTIMAL
    return r


def _binding_flags(report):
    return {c["name"]: c["binding"] for c in report.get("constraints", [])}


def _assert_honest(r, ref, sc, clock):
    """``r`` (a plan() under ``clock``) is consistent with the unlimited reference ``ref``."""
    s = r.report["solver"]
    assert r.status != Status.INFEASIBLE, "a feasible request called infeasible"
    if r.status == Status.OPTIMAL:
        assert r.best.metrics["cost"] == pytest.approx(ref.best.metrics["cost"], rel=1e-9)
        assert s["gap"] == 0.0
    else:
        assert s["time_limit_reached"] and clock.reached, "not proven, yet the limit was not reached"
        assert s["limit_phase"]
    if r.status == Status.FEASIBLE:
        assert evaluate(r.view or sc, r.best.plan).feasible
        assert r.best.metrics["cost"] >= ref.best.metrics["cost"] * (1 - 1e-9)
        assert s["gap"] is None or s["gap"] >= 0.0
    if r.status == Status.UNKNOWN:
        assert not r.plans and s["gap"] is None
    if r.status != Status.UNKNOWN:  # every analysis item decided agrees with the unlimited run's
        want = _binding_flags(ref.report)
        for name, flag in _binding_flags(r.report).items():
            if flag is not None and r.status == Status.OPTIMAL:
                assert flag == want[name], name


def _readings(sc, backend, **req):
    counter = Readings()
    plan(sc, backend, Request(time_limit=600.0, clock=Clock(600.0, now=counter), **req))
    return counter.n


CASES = [("design-case.toml", "cpsat", {}), ("design-case.toml", "highs", {}),
         ("design-case.toml", "enumerate", {}),
         ("design-case.toml", "cpsat", {"method": "decomposed"}), ("design-case-batch.toml", "cpsat", {})]


@pytest.mark.parametrize("name,backend,req", CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in CASES])
def test_a_limit_at_any_reading_gives_an_honest_status(name, backend, req):
    sc = load_scenario(EX / name)
    ref = _reference(sc, backend)
    n = _readings(sc, backend, **req)
    assert n > 5
    ks = sorted(set(range(0, min(n, 40))) | set(range(0, n + 2, max(1, n // 25))))
    seen = set()
    for k in ks:
        clock = Clock(600.0, now=Readings(k))
        r = plan(sc, backend, Request(time_limit=600.0, clock=clock, **req))
        _assert_honest(r, ref, sc, clock)
        seen.add(r.status)
    assert Status.UNKNOWN in seen and Status.OPTIMAL in seen  # both ends of the range were reached


def small_staged():
    """The long-context example over fewer layouts (the same two stages; seconds instead of a minute)."""
    # full recompute: at 128K tokens a sequence's activations need it under the allocator-level memory model
    return load_scenario(EX / "llama3-8b-long-context.toml", {"search.tp": [1, 2, 4], "search.pp": [1],
                                                              "search.zero_stage": [1], "search.recompute": ["full"]})


def test_a_staged_solve_cut_short_is_not_decided_never_no_plan():
    sc = small_staged()
    for k in (0, 1, 3, 6, 12, 24):
        clock = Clock(600.0, now=Readings(k))
        r = plan(sc, "cpsat", Request(time_limit=600.0, clock=clock))
        d = r.report
        assert d["status"] in ("unknown", "feasible", "optimal")
        if d["status"] != "optimal":
            assert d["solver"]["time_limit_reached"] and d["solver"]["gap"] is None and clock.reached
        if not d["feasible"]:
            assert d["stages_undecided"], "a stage cut short must be named as not decided"
            from tpopt.cli.choices import infeasible_stage_text

            text = infeasible_stage_text(d, sc)
            assert "Not decided within the time limit" in text and "No plan at all" not in text


def test_staged_regression_on_the_command_line():
    # issue 24: exit 4 with "No plan at all for stage(s) ..." and time_limit_reached false, gap 0.0
    rc, out = run("solve", "--scenario", EX / "llama3-8b-long-context.toml", "--time-limit", "0.001", "--json")
    assert rc == 4
    d = json.loads(out)
    assert d["status"] == "unknown" and d["solver"]["time_limit_reached"] and d["solver"]["gap"] is None
    assert d["stages_undecided"] == ["pre-training", "long-context"]
    rc, out = run("solve", "--scenario", EX / "llama3-8b-long-context.toml", "--time-limit", "0.001")
    assert rc == 4 and "Not decided within the time limit" in out and "No plan at all" not in out


def run(*args):
    r = CliRunner().invoke(cli, [str(a) for a in args])
    return r.exit_code, r.output


def test_staged_analysis_cut_short_says_so_instead_of_binding_none():
    # the stage analysis at its limit: the families it did not decide are listed, never "Binding: none"
    sc = small_staged()
    full = Readings()
    plan(sc, "cpsat", Request(time_limit=600.0, clock=Clock(600.0, now=full)))
    solved = None
    for k in range(full.n - 1, 0, -max(1, full.n // 40)):  # from the end: the analysis is cut, the solve is not
        r = plan(sc, "cpsat", Request(time_limit=600.0, clock=Clock(600.0, now=Readings(k))))
        if r.report["feasible"] and any(e.get("binding_undecided") for e in r.report["stages"]):
            solved = r
            break
    assert solved is not None, "no reading cut the stage analysis"
    from tpopt.cli.choices import staged_text

    text = staged_text(solved.report, sc, timing=False)
    assert "not decided (time limit reached" in text


# ---------------------------------------------------------------------------------------------
# regressions with a real clock (any outcome of the race must be honest)


def test_tiny_limits_never_raise_from_numpy(design_path):
    sc = load_scenario(design_path)
    for t in np.geomspace(1e-4, 0.2, 12):
        r = solve(sc, "cpsat", Request(time_limit=float(t)))
        assert r.status in (Status.OPTIMAL, Status.FEASIBLE, Status.UNKNOWN)
        assert r.status == Status.OPTIMAL or r.solver.limit_reached


def test_sweep_with_highs_and_a_tiny_limit_has_no_error_rows(tmp_path):
    # issue 24: 75 of 102 rows `error` (ImportError "ObjSense already registered") when the timer fired
    # during a worker's first `import highspy`
    out = tmp_path / "sweep.csv"
    rc, _ = run("sweep", "--scenario", EX / "design-case-sweep.toml", "--solver", "highs",
                "--time-limit", "0.02", "--workers", "2", "--out", out, "--quiet")
    assert rc in (0, 4)
    with out.open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 21 and not [r for r in rows if r["status"] == "error"]
    assert {r["status"] for r in rows} <= {"optimal", "feasible", "unknown", "infeasible"}


def test_enumeration_chunks_are_work_bounded_and_cover_the_grid_in_order():
    sc = load_scenario(EX / "gpt3-175b-widest.toml")
    space = Space.from_scenario(sc)
    d = space.domains
    pp_many = [i for i, p in enumerate(d["pp"]) if p > 1]
    axes = {a: list(range(len(d[a]))) for a in E.NUMERIC_AXES}
    axes.update(pp=pp_many)
    factor = E._pipeline_factor(space, "interleaved")
    assert factor == 4  # forward and backward, two virtual stages

    def cost(sub):
        return E._chunk_cost(space, sub, factor)

    walked = []
    for sub in itertools.islice(E._slices(axes, cost), 800):
        shapes = {(p, math.ceil(sc.task.global_batch / (d["dp"][i] * d["mb"][j])))
                  for p in sub["pp"] for i in sub["dp"] for j in sub["mb"]}
        assert cost(sub) <= 1.0 or len(shapes) == 1  # a single shape is simulated once however it is cut
        assert int(np.prod([len(sub[a]) for a in E.NUMERIC_AXES])) <= E.CHUNK
        walked.extend(itertools.product(*(sub[a] for a in E.NUMERIC_AXES)))
    everything = itertools.islice(itertools.product(*(axes[a] for a in E.NUMERIC_AXES)), len(walked))
    assert walked == list(everything)  # C order, no point twice, none skipped


def test_small_grids_are_one_chunk():
    axes = {a: [0, 1] for a in E.NUMERIC_AXES}
    subs = list(E._slices(axes, lambda sub: np.prod([len(sub[a]) for a in E.NUMERIC_AXES]) / 1e6))
    assert subs == [axes]


def test_enumeration_under_a_limit_is_partial_and_says_so():
    sc = load_scenario(EX / "gpt3-175b-widest.toml")
    sc = replace(sc)
    clock = Clock(600.0, now=Readings(30))
    r = solve(sc, "enumerate", Request(time_limit=600.0, clock=clock))
    assert r.solver.limit_reached and r.solver.evaluated < r.solver.points
    assert r.status in (Status.FEASIBLE, Status.UNKNOWN) and r.solver.gap is None


# ---------------------------------------------------------------------------------------------
# the confidence additions, the pipeline simulation and the RL grid on the same clock


def test_the_confidence_additions_share_the_clock_and_say_what_they_did_not_decide():
    # the "+5 points" re-solve used to get a fresh time limit of its own (1.96 s at --time-limit 1s); now it
    # draws on the run's clock: wherever the clock runs out, the plan's status is honest and the step-up is
    # the unlimited run's answer, a plan not proven the cheapest, or not decided -- never a wrong answer
    sc = load_scenario(EX / "llama3-8b-confidence.toml")
    ref = _reference(sc, "enumerate")
    want = ref.report["finish_distribution"]["step_up"]
    assert want["status"] == "optimal" and want["decided"]
    n = _readings(sc, "enumerate")
    seen = set()
    for k in range(0, n + 2):
        clock = Clock(600.0, now=Readings(k))
        r = plan(sc, "enumerate", Request(time_limit=600.0, clock=clock))
        _assert_honest(r, ref, sc, clock)
        if not r.plans:
            continue
        up = r.report["finish_distribution"]["step_up"]
        if up["status"] == "optimal":
            assert up["decided"] and up["cost"] == pytest.approx(want["cost"], rel=1e-9)
        else:
            assert clock.reached and up["time_limit_reached"] and not up["decided"]
            assert up["status"] in ("feasible", "unknown") and (up["plan"] is None) == (up["status"] == "unknown")
            assert "reachable" not in up  # no "no plan" claim from a solve cut short
        seen.add((r.status, up["status"]))
    assert (Status.OPTIMAL, "unknown") in seen  # the plan proven, its step-up cut short: said so
    assert (Status.OPTIMAL, "optimal") in seen


def test_reachable_confidence_is_the_unlimited_answer_or_not_decided():
    sc = load_scenario(EX / "llama3-8b-confidence.toml", {"schedule.deadline": "4d"})
    want = C.reachable(sc, "enumerate", Request(time_limit=600.0))
    assert 0.9 < want < 0.999  # a bisection, not an end point
    counter = Readings()
    C.reachable(sc, "enumerate", Request(time_limit=600.0, clock=Clock(600.0, now=counter)))
    got = {C.reachable(sc, "enumerate", Request(time_limit=600.0, clock=Clock(600.0, now=Readings(k))))
           for k in range(0, counter.n + 2, 3)}
    assert got == {None, want}
    assert reachable_line(0.95, None).endswith("was not decided within the time limit; stopped by the clock: the "
                                               "answer may differ on another machine.")


def test_a_pipeline_simulation_ticks_between_waves_and_keeps_nothing_from_a_stopped_run():
    pipeline._program.cache_clear()
    pipeline._waves.cache_clear()
    pipeline._MEMO.clear()
    shape = ("interleaved", 8, 96)  # ~6,000 ops: hundreds of waves
    ticks = []
    with pipeline.ticking(lambda: ticks.append(1)):
        full = pipeline.completion_time(*shape, 1.0, 2.0, 0.0, 0.1, 0.0, v=2)
    assert len(ticks) >= 3

    def stop():
        raise TimeLimitReached("simulating")

    pipeline._program.cache_clear()
    pipeline._waves.cache_clear()
    pipeline._MEMO.clear()
    with pytest.raises(TimeLimitReached):
        with pipeline.ticking(stop):
            pipeline.completion_time(*shape, 1.0, 2.0, 0.0, 0.1, 0.0, v=2)
    assert not pipeline._program.items and not pipeline._waves.items  # nothing half-built was kept
    assert pipeline.completion_time(*shape, 1.0, 2.0, 0.0, 0.1, 0.0, v=2) == full  # afterwards: as before


def test_a_stoppable_phase_stops_a_long_simulation_at_its_next_tick():
    pipeline._program.cache_clear()
    pipeline._waves.cache_clear()
    clock = Clock(600.0, now=Readings(1))  # the entry check passes; the first tick finds it run out
    with pytest.raises(TimeLimitReached) as exc:
        with clock.stoppable("enumerating plans"):
            pipeline.completion_time("interleaved", 8, 96, 1.0, 2.0, 0.0, 0.1, 0.0, v=2)
    assert exc.value.phase == "enumerating plans" and clock.reached
    pipeline.completion_time("interleaved", 8, 96, 1.0, 2.0, 0.0, 0.1, 0.0, v=2)  # outside: no hook, no stop


def test_the_rl_grid_checks_the_clock_and_the_wider_grid_caches_nothing_cut_short():
    rsc = load_rl_scenario(EX / "rl-grpo-qwen3-8b.toml")
    pb = rl.RLProblem(rsc, "cpsat", Request(time_limit=600.0, clock=Clock(600.0, now=Readings(0))))
    with pytest.raises(TimeLimitReached):
        pb.grid(clock=pb.req.clock)
    assert rl._wider_problem(pb) is None and pb.card_limit not in pb.caches.get("relaxed", {})
    fresh = rl.RLProblem(rsc, "cpsat", Request(time_limit=600.0))
    full, head = fresh.grid(), fresh.grid(stop_after=10)
    assert 10 <= len(head) < len(full) and head == full[:len(head)]  # a prefix: enough for a size test
    wide = rl._wider_problem(fresh)  # the largest widening whose whole grid stays enumerable, as before
    sizes = {f: len(fresh.with_card_limit(f * fresh.sc.search.max_cards).grid()) for f in (8, 4, 2)}
    want = next(f for f in (8, 4, 2) if sizes[f] <= rl.GRID_LIMIT)
    assert wide is not None and wide.card_limit == want * fresh.sc.search.max_cards


def test_the_rl_plan_at_any_reading_is_honest():
    rsc = load_rl_scenario(EX / "rl-grpo-qwen3-8b.toml")
    ref = plan_rl(rsc, "cpsat", Request(time_limit=600.0))
    assert ref.status == Status.OPTIMAL
    counter = Readings()
    plan_rl(rsc, "cpsat", Request(time_limit=600.0, clock=Clock(600.0, now=counter)))
    n = counter.n
    seen = set()
    for k in sorted({0, 1, 2, 5, 20, n // 2, n - 40, n - 10, n - 2, n + 1} | set(range(0, n, max(1, n // 8)))):
        clock = Clock(600.0, now=Readings(k))
        r = plan_rl(rsc, "cpsat", Request(time_limit=600.0, clock=clock))
        d = r.report
        assert r.status != Status.INFEASIBLE
        if r.status == Status.OPTIMAL:
            assert d["plan"]["cost"] == pytest.approx(ref.report["plan"]["cost"], rel=1e-9)
        else:
            assert d["solver"]["time_limit_reached"] and clock.reached
        if d.get("analysis") != "time limit reached" and r.status == Status.OPTIMAL:
            assert d["binding"] == ref.report["binding"]  # an analysis reported is the unlimited one
        else:
            assert d.get("binding") is None
        seen.add(r.status)
    assert {Status.OPTIMAL, Status.UNKNOWN} <= seen
