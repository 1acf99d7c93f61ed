"""A broken layout or divisibility rule is said in words, never as "3 cards against a limit of 0 cards".

The rule families (models/families.py, KIND_RULE) are checked as value <= 0 where the value is a
remainder or an offending group size; the reports print the sentence of models/violations.py instead.
Each expected sentence below is derived here from published sizes:

- NVIDIA HGX B300 and the RTX 4090 servers of the design case hold 8 cards per host;
- Qwen3-8B (Qwen/Qwen3-8B config.json): 36 layers, 32 query heads, 8 KV heads;
- Qwen3-30B-A3B (its config.json): 128 routed experts;
- the design case's batch: 384 sequences; DeepSeek's DualPipe needs an even m >= 2p micro-batches.
"""

from __future__ import annotations

import inspect
from pathlib import Path

from click.testing import CliRunner

from tpopt.catalogs.scenario import build_scenario, read_scenario_file, with_overrides
from tpopt.cli.main import cli
from tpopt.models import families as F
from tpopt.models.evaluate import evaluate
from tpopt.models.plan import Plan
from tpopt.models.violations import rule_violation

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "examples" / "design-case.toml"
MOE = ROOT / "examples" / "qwen3-30b-a3b.toml"
HOST = 8  # cards per host: HGX B300 and the design case's RTX 4090 hosts
BATCH = 384  # the design case's global batch (sequences)
LAYERS, HEADS, KV_HEADS = 36, 32, 8  # Qwen3-8B
EXPERTS = 128  # Qwen3-30B-A3B's routed experts


def _scenario(path: Path = DESIGN, **over: str):
    return build_scenario(with_overrides(read_scenario_file(path), over))


def _broken(sc, plan: Plan) -> dict[str, str]:
    """{family: sentence} of the rules the plan breaks."""
    return {c.name: c.violation for c in evaluate(sc, plan).violated() if F.family(c.name).structural}


def _run(*args: str):
    kw = {"mix_stderr": False} if "mix_stderr" in inspect.signature(CliRunner.__init__).parameters else {}
    return CliRunner(**kw).invoke(cli, list(args), catch_exceptions=False)


def test_whole_hosts_in_words():
    sc = _scenario(hw="b300")
    cards = 3  # 3 mod 8 = 3: no whole host
    assert _broken(sc, Plan("b300", cards)) == {
        F.WHOLE_HOSTS: f"{cards} cards is not a whole number of {HOST}-card hosts (one host holds {HOST} cards)"}
    cards = 12  # 12 = 1 x 8 + 4: one whole host holds 8, two hold 16
    words = _broken(sc, Plan("b300", cards, dp=cards))[F.WHOLE_HOSTS]
    assert words == (f"{cards} cards is not a whole number of {HOST}-card hosts "
                     f"(whole hosts give {HOST} or {2 * HOST} cards)")


def test_batch_divisibility_in_words():
    sc = _scenario()
    dp = 40  # 384 = 9 x 40 + 24
    assert BATCH % dp == BATCH - (BATCH // dp) * dp == 24
    assert _broken(sc, Plan("rtx4090", dp)) == {
        F.BATCH_DIVISIBILITY: f"the batch of {BATCH} sequences does not split into DP {dp} x micro-batch 1 = {dp} "
                              f"(remainder {BATCH % dp} sequences)"}


def test_tp_and_heads_in_words():
    sc = _scenario()
    tp = 3  # 8 mod 3 = 2 and 32 mod 3 = 2: both rules break
    assert HOST % tp and HEADS % tp
    assert _broken(sc, Plan("rtx4090", 48, tp=tp)) == {
        F.TP_WITHIN_HOST: f"TP {tp} does not divide the {HOST}-card host (TP stays inside one host)",
        F.HEADS_DIVISIBLE: f"TP {tp} does not divide the {HEADS} query heads and {KV_HEADS} KV heads"}


def test_pp_and_schedule_in_words():
    sc = _scenario()  # the flat model (efficiency stated): stages of L / pp layers
    pp = 5  # 36 = 7 x 5 + 1; 40 cards = 5 hosts, DP 8 divides the batch
    assert _broken(sc, Plan("rtx4090", 40, pp=pp)) == {
        F.PP_DIVIDES_LAYERS: f"PP {pp} does not divide the {LAYERS} layers ({LAYERS % pp} left over)"}
    mb, dp = 8, 24  # 48 cards at PP 2: m = 384 / (24 x 8) = 2 micro-batches < 2p = 4
    m = BATCH // (dp * mb)
    assert m < 2 * 2
    words = _broken(sc, Plan("rtx4090", 48, pp=2, micro_batch=mb, schedule="dualpipe-deepseek"))
    assert list(words) == [F.SCHEDULE_SHAPE]
    assert words[F.SCHEDULE_SHAPE].endswith(f"got p = 2, m = {m}")


def test_expert_rules_in_words():
    sc = _scenario(MOE, hw="h100-sxm")
    ep = 3  # 128 mod 3 = 2 (a plan with it is refused as input; a solver's table still names the rule)
    assert EXPERTS % ep
    assert rule_violation(sc, Plan("h100-sxm", 48, dp=48, ep=ep), F.EP_DIVIDES_EXPERTS) == \
        f"EP {ep} does not divide the {EXPERTS} routed experts"
    assert rule_violation(sc, Plan("h100-sxm", 48, dp=48, ep=4), F.EP_DIVIDES_EXPERTS) == ""
    ep = 32  # 8 cards at TP 1: the TP x DP group is 8 cards, and 32 does not divide 8
    assert _broken(sc, Plan("h100-sxm", 8, ep=ep)) == {
        F.EP_GROUP: f"EP {ep} x expert-TP 1 = {ep} does not divide the TP x DP group of 8 cards"}


def test_a_plan_meeting_the_rules_has_no_words():
    sc = _scenario()
    ev = evaluate(sc, Plan("rtx4090", 48))
    assert ev.feasible and not any(c.violation for c in ev.constraints)
    assert all("violation" not in c.as_dict() for c in ev.constraints)


def test_solve_conflict_says_whole_hosts_in_words():
    # the lead's finding: b300 on the design case; the whole-hosts rule's closest plan was printed as
    # "3 cards against a limit of 0 cards"
    r = _run("solve", "--deadline", "30d", "--hw", "b300", "--no-analysis")
    assert r.exit_code == 3
    flat = " ".join(r.output.split())
    assert f"is not a whole number of {HOST}-card hosts" in flat
    assert "against a limit of 0 cards" not in flat


def test_tables_print_rules_as_holds_or_broken():
    r = _run("evaluate", "--hw", "b300", "--cards", "3")
    assert r.exit_code == 3
    rows = {ln.split("│")[0].strip(): [x.strip() for x in ln.split("│")[1:]] for ln in r.output.splitlines()
            if "│" in ln}
    assert rows[F.WHOLE_HOSTS] == ["broken", "", "rule", "", "VIOLATED"]
    assert rows[F.BATCH_DIVISIBILITY] == ["holds", "", "rule", "", "ok"]
    flat = " ".join(r.output.split())
    assert f"Broken rules: {F.WHOLE_HOSTS}: 3 cards is not a whole number of {HOST}-card hosts" in flat
    r = _run("explain", "--hw", "b300", "--cards", "3")
    assert r.exit_code == 3
    flat = " ".join(r.output.split())
    assert f"{F.WHOLE_HOSTS} 3 cards is not a whole number of {HOST}-card hosts" in flat
    assert "3 cards against 0 cards" not in flat
