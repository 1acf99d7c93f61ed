"""A new user's trial (issue 35's input round): per-card values from `tpopt init`, the context-parallel split
rule, and error / output wording.

Golden figures derived here:
- 24 GB card, `usable_memory = "22GiB"`: 22 x 2^30 bytes, for the RTX 4090 only (the value is written for it).
- The load-balanced (zig-zag) split cuts a sequence into 2 x cp equal pieces (Megatron-Core
  get_batch_on_this_cp_rank, Transformer Engine, torch's head-tail load balancer): 8,192 / 6 is not whole, so
  cp 3 is out at 8,192 tokens; 12,288 / 6 = 2,048 is whole, so cp 3 stays at 12,288 tokens; the contiguous
  split needs cp pieces only: 8,192 / 4 = 2,048 for cp 4.
"""

from __future__ import annotations

import inspect
import json
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.oracle import assert_agree_with_enumeration, solve_every_backend
from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import build_scenario
from tpopt.catalogs.starter import scenario_text
from tpopt.cli.main import cli
from tpopt.errors import InputError
from tpopt.optimizer.memory_plan import _size

ROOT = Path(__file__).resolve().parents[1]
DESIGN = str(ROOT / "examples" / "design-case.toml")
RL = str(ROOT / "examples" / "rl-grpo-qwen3-8b.toml")
CAT = load_catalog()
GIB = 2**30


def run(*args):
    kw = {"mix_stderr": False} if "mix_stderr" in inspect.signature(CliRunner.__init__).parameters else {}
    return CliRunner(**kw).invoke(cli, list(args), catch_exceptions=False)


def _one_line_error(r, *parts):
    assert r.exit_code != 0
    err = r.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for p in parts:
        assert p in err, (p, err)
    return err


# 1. tpopt init's card values belong to the card they were written for


def test_init_values_stay_with_their_card_when_a_card_is_added():
    raw = tomllib.loads(scenario_text())
    raw["hardware"]["accelerator"] = ["rtx4090", "a100-80gb-sxm"]
    sc = build_scenario(raw, CAT)
    assert sc.system("rtx4090").acc.memory_usable == 22 * GIB
    assert sc.system("rtx4090").acc.cards_per_host == 8
    a100 = sc.system("a100-80gb-sxm").acc.memory_usable
    assert a100 != 22 * GIB and a100 > 60 * GIB  # the catalog's 80 GB card under the stack, not the 4090's value


def test_init_design_case_answers_as_before():
    one = build_scenario(tomllib.loads(scenario_text()), CAT)
    assert one.system("rtx4090").acc.memory_usable == 22 * GIB


# 2. the context-parallel split rule


@pytest.mark.parametrize("seq, cp, split, ok", [(8192, 3, "zigzag", False), (12288, 3, "zigzag", True),
                                                (8192, 4, "zigzag", True), (8192, 1, "zigzag", True),
                                                (8192, 3, "contiguous", False), (6144, 3, "contiguous", True),
                                                (2 * 4 * 1000 + 4, 4, "contiguous", True),
                                                (2 * 4 * 1000 + 4, 4, "zigzag", False)])
def test_sequence_split_rule(seq, cp, split, ok):
    from tpopt.models.context import sequence_splits

    assert sequence_splits(seq, cp, split) is ok


@pytest.mark.parametrize("cmd", [["evaluate"], ["explain"], ["export", "--format", "megatron"]])
def test_explicit_cp_that_breaks_the_split_is_refused(cmd):
    r = run(*cmd, "--scenario", DESIGN, "--cards", "48", "--cp", "3")
    _one_line_error(r, "--cp 3", "8,192 tokens", "2 x cp = 6", "get_batch_on_this_cp_rank")


def test_explicit_cp_that_splits_is_accepted():
    r = run("evaluate", "--scenario", DESIGN, "--cards", "96", "--cp", "2", "--json")
    assert r.exit_code in (0, 3)  # 3: the plan is evaluated and misses the deadline; 2 would be a refusal
    assert json.loads(r.stdout)["plan"]["cp"] == 2


def test_a_scenario_cp_that_breaks_the_split_is_refused():
    r = run("solve", "--scenario", DESIGN, "--cp", "3")
    _one_line_error(r, "search.cp = 3", "2 x cp = 6")


def _cp_raw(seq_len, cp):
    return {"model": {"name": "qwen3-0.6b"}, "task": {"tokens": "2B", "seq_len": seq_len, "global_batch": 24},
            "schedule": {"deadline": "10d"}, "hardware": {"accelerator": "h100-sxm", "efficiency": 0.4},
            "search": {"zero_stage": [1], "tp": [1], "pp": [1], "micro_batch": [1], "recompute": ["none"],
                       "cp": cp, "save_interval": ["1800s"], "save_mode": ["sync"], "max_cards": 48}}


def test_search_skips_a_cp_that_breaks_the_split_in_every_backend():
    sc = build_scenario(_cp_raw(8192, [1, 2, 3]), CAT)
    assert sc.search.cp == (1, 2)
    assert build_scenario(_cp_raw(12288, [1, 2, 3]), CAT).search.cp == (1, 2, 3)
    results = solve_every_backend(sc, "time")
    assert_agree_with_enumeration(sc, "time", results, proven=True)
    assert all(r.best is None or r.best.plan.cp != 3 for r in results.values())


def test_a_plan_object_whose_cp_breaks_the_split_is_refused():
    """The Python API's evaluator of a Plan object refuses it as the command line refuses --cp 3: one InputError
    that states the rule (8,192 tokens do not split into 2 x 3 = 6 equal pieces), before any figure."""
    import tpopt
    from tpopt.models.evaluate import evaluate
    from tpopt.models.plan import Plan

    sc = tpopt.scenario(DESIGN)
    with pytest.raises(InputError, match=r"^cp 3: a sequence of 8,192 tokens does not split into 2 x cp = 6"):
        evaluate(sc, Plan(next(iter(sc.systems)), 48, cp=3))
    assert evaluate(sc, Plan(next(iter(sc.systems)), 48, cp=2)).plan.cp == 2  # 8,192 = 4 x 2,048: it splits
    with pytest.raises(InputError, match="2 x cp = 6"):
        tpopt.evaluate(sc, cards=48, cp=3)


def test_the_search_states_the_cp_sizes_it_dropped():
    """search.cp = 1, 2, 3 at 8,192 tokens: 3 cannot split (8,192 / 6 is not whole); the footing says which sizes
    were dropped and why, on one line, in text and JSON."""
    raw = _cp_raw(8192, [1, 2, 3])
    sc = build_scenario(raw, CAT)
    assert sc.search.cp_dropped == (3,)
    from tpopt.optimizer.footing import cp_dropped, stated_inputs
    from tpopt.presentation import stated_lines

    want = ("search.cp 3 dropped: a sequence of 8,192 tokens does not split into 2 x cp equal pieces, which the "
            "zigzag context-parallel split needs; searched cp 1, 2")
    assert cp_dropped(sc)["stated"] == want
    plan = {"accelerator": "h100-sxm", "cards": 8, "save_mode": "sync", "save_interval_s": 1800.0}
    lines = stated_lines(stated_inputs(sc, plan, {}))
    assert f"stated context parallelism: {want}" in lines
    assert cp_dropped(build_scenario(_cp_raw(12288, [1, 2, 3]), CAT)) is None  # 12,288 / 6 = 2,048: none dropped
    r = run("solve", "--scenario", DESIGN, "--cp", "1,2,3", "--json")
    assert r.exit_code == 0, r.output
    stated = json.loads(r.stdout)["footing"]["stated"]
    assert [e["cp_dropped"] for e in stated if e["input"] == "context parallelism"] == [[3]]


def test_search_domain_left_empty_is_an_input_error():
    with pytest.raises(InputError, match=r"search.cp = 3, 6: .*2 x cp = 6"):
        build_scenario(_cp_raw(8192, [3, 6]), CAT)


# 3. wording


@pytest.mark.parametrize("nbytes, text", [(1024, "1.0 KiB"), (512, "512 B"), (3 * 2**20, "3.0 MiB"),
                                          (2 * GIB, "2.0 GiB")])
def test_sizes_print_a_unit_that_shows_the_value(nbytes, text):
    assert _size(nbytes) == text


def test_memory_budget_of_one_kib_is_shown_as_such():
    r = run("solve", "--scenario", DESIGN, "--memory-budget", "1KiB")
    err = _one_line_error(r, "1.0 KiB")
    assert "0.0 MiB" not in err


def test_reserved_error_gives_both_values():
    r = run("solve", "--scenario", DESIGN, "--reserved", "40d")
    _one_line_error(r, "shorter than the deadline", "reserved 40.0 d", "deadline 30.0 d")


def test_a_default_reserved_longer_than_the_deadline_names_the_flag():
    """A question on the command line takes tpopt init's reserved 5 d unasked (its first line lists the defaults
    taken, a line a refused scenario never prints): a 2-day deadline is refused in one line that says the 5 d
    and the flag that changes it, and with --reserved the same question is answered."""
    ask = ("solve", "--model", "qwen3-0.6b", "--tokens", "1B", "--seq-len", "2048", "--global-batch", "64",
           "--deadline", "2d", "--hw", "rtx4090")
    _one_line_error(run(*ask), "reserved 5.0 d", "deadline 2.0 d", "--reserved")
    assert run(*ask, "--reserved", "0.5d", "--no-analysis").exit_code == 0


def test_rl_wall_time_is_rounded_like_the_other_commands():
    d = json.loads(run("rl", "--scenario", RL, "--json").stdout)
    wall = d["solver"]["wall_s"]
    assert wall == round(wall, 4)


def test_estimate_searches_and_states_only_the_cp_that_split_the_sequence():
    # 4,100 = 4 x 1,025: divisible by 2 x 2 = 4, not by 2 x 4 = 8 or 2 x 8 = 16
    d = json.loads(run("estimate", "llama3-8b", "--hw", "h100-sxm", "--seq-len", "4100", "--json").stdout)
    assert d["search"]["cp"] == [1, 2]


def test_the_reserved_error_gives_both_values_in_one_unit():
    """6 h reserved inside a 1 h deadline: both in hours (the larger's unit), not "6.0 h" against "3600.0 s"."""
    from tpopt.models.units import HOUR, fmt_durations

    assert fmt_durations(6 * HOUR, 1 * HOUR) == ("6.0 h", "1.0 h")
    assert fmt_durations(40 * 86400.0, 30 * 86400.0) == ("40.0 d", "30.0 d")
