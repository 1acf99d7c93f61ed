"""Surface checks from the third new-user trial (sweep, sites, pools, inverse, replan, simulate, ...).

Each test states the user-visible property it guards; figures are derived here, never read from the tool.
"""

from __future__ import annotations

import inspect
from pathlib import Path

from click.testing import CliRunner

from tpopt.cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
SWEEP = str(ROOT / "examples" / "design-case-sweep.toml")


def _run(*args: str, width: int = 100):
    kw = {"mix_stderr": False} if "mix_stderr" in inspect.signature(CliRunner.__init__).parameters else {}
    return CliRunner(**kw).invoke(cli, list(args), env={"COLUMNS": str(width)}, catch_exceptions=False)


def _wrapped_once(block: list[str], width: int) -> bool:
    """A paragraph wrapped once at ``width``: every line fits, and no line could have taken the next line's
    first word (a paragraph wrapped at a wider width and then again leaves short lines in the middle)."""
    for a, b in zip(block, block[1:], strict=False):
        if len(a) > width or len(a) + 1 + len(b.split()[0]) <= width:
            return False
    return all(len(x) <= width for x in block)


def test_sweep_footing_wrapped_once(tmp_path):
    width = 100
    r = _run("sweep", "--scenario", SWEEP, "--hw", "rtx4090,a100-80gb-sxm", "--deadline", "30d,40d", width=width)
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    heads = [i for i, ln in enumerate(lines) if ln.startswith("Footing (")]
    assert len(heads) == 2  # one paragraph per accelerator
    for i in heads:
        block = [lines[i]]
        while i + len(block) < len(lines) and lines[i + len(block)].startswith("  "):
            block.append(lines[i + len(block)])
        assert _wrapped_once(block, width), block


def test_sites_names_the_question_and_fits_the_width():
    # the example's [schedule] deadline = "150d", [task] tokens = "15T" and its four [[sites]]; the report stated
    # neither the deadline its "no sync plan meets the deadline" is about nor the sites it chose among
    width = 100
    r = _run("sites", "--scenario", str(ROOT / "examples" / "sites-llama3-405b.toml"), width=width)
    assert r.exit_code == 0, r.output
    head = " ".join(r.output.split("\nreplica:")[0].split())
    assert head == ("tpopt sites: sites-llama3-405b: llama3-405b, 15T tokens, deadline 150.0 d (reserved 0.0 d); "
                    "4 sites (virginia, ohio, iowa, texas), WAN 400 Gbit/s each way (1 site pair with its own link)")
    assert all(len(ln) <= width for ln in r.output.splitlines())
    assert "site(s)" not in r.output and "cheapest diloco" not in r.output


def test_pools_report_names_the_question():
    # examples/pools-h100-a100.toml: Llama-3-70B, [task] tokens = "1T", deadline 44 d with 2 reserved; the mixed-pool
    # report named neither the model nor the deadline its "no plan of that pool alone" lines are about
    r = _run("solve", "--scenario", str(ROOT / "examples" / "pools-h100-a100.toml"))
    assert r.exit_code == 0, r.output
    first = r.output.splitlines()[0]
    assert first == "tpopt solve: pools-h100-a100: llama3-70b, 1T tokens, deadline 44.0 d (reserved 2.0 d)"
    assert " 1 stages " not in r.output


NOTE = "Scenario: built-in design case (the chapter's Qwen3-8B example); use --scenario FILE or tpopt init."
DEADLINE_D, RESERVED_D = 30.0, 5.0  # the design case (chapter 10.6): 30 days, 5 of them reserved


def test_simulate_names_the_builtin_scenario_and_the_deadline():
    r = _run("simulate", "--runs", "200")
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0] == NOTE
    assert any(ln.startswith(f"P(finish <= deadline {DEADLINE_D:.1f} d): analytic ") for ln in lines)


def test_replan_names_the_builtin_scenario_and_its_defaults():
    done, elapsed = 0.41, 12.0
    r = _run("replan", "--done", "41%", "--elapsed", f"{elapsed:g}d", "--cards-held", "48")
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[0] == NOTE
    flat = " ".join(r.output.split())
    left = DEADLINE_D - elapsed
    reserved = RESERVED_D * left / DEADLINE_D  # the reserved time's share of the time left: 5 x 18 / 30 = 3
    assert f"{100 * done:.1f} % done after {elapsed:.1f} d" in flat
    assert f"{left:.2f} d left (reserved {reserved:.2f} d, the reserved time's share of the time left)" in flat
    assert "confidence 95 % (the default; --confidence sets it)" in flat  # presentation.level_text


def test_inverse_names_the_builtin_scenario_and_the_budget_unit():
    budget = 50_000
    r = _run("inverse", "--models", "qwen3-8b", "--tokens", "10B:200B:4", "--max-cost", str(budget), "--hw", "h100-sxm")
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0] == NOTE
    assert f"budget {budget:,} USD" in lines[1]
    assert any(ln.split() == ["model", "params", "max", "tokens", "loss", "cost", "USD", "finish", "d", "binds", "/",
                              "note"] for ln in lines)
    # Qwen3-1.7B on one 8-card H100 host outruns the design case's input pipeline (4 workers x 2 sequences/s):
    # the row says why there is no plan, not just "no plan"
    r = _run("inverse", "--models", "qwen3-1.7b", "--tokens", "10B:200B:4", "--max-cost", str(budget), "--hw",
             "h100-sxm")
    assert r.exit_code == 3, r.output
    lines = r.output.splitlines()  # the row, with the lines its note wraps onto (indented under the note column)
    i = next(i for i, ln in enumerate(lines) if ln.strip().startswith("qwen3-1.7b"))
    row = " ".join([lines[i], *(ln for ln in lines[i + 1:] if ln.startswith("    ") and ln[:14].strip() == "")])
    assert "no plan at any deadline (memory, layout or input rule it out)" in " ".join(row.split())


SITES = ROOT / "examples" / "sites-llama3-405b.toml"


def _sites_variant(tmp_path: Path, name: str, *edits: tuple[str, str]) -> str:
    text = SITES.read_text()
    for old, new in edits:
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_sites_without_a_plan_exits_3_with_a_way_to_see_why(tmp_path):
    # Llama-3-405B on 15T tokens needs 6 N D = 6 x 405e9 x 15e12 = 3.6e25 FLOP; the four sites' 112,000 H100s
    # (32,000 + 32,000 + 24,000 + 24,000) at their 989 TFLOP/s dense BF16 peak need 3.8 d even at 100 % MFU, so a
    # 3-day deadline has no plan: a well-formed request without a plan is exit 3, not a bad-input error (exit 2)
    total = 32_000 + 32_000 + 24_000 + 24_000
    assert 6 * 405e9 * 15e12 / (total * 989e12) / 86400 > 3
    path = _sites_variant(tmp_path, "three-days.toml", ('deadline = "150d"', 'deadline = "3d"'))
    r = _run("sites", "--scenario", path)
    assert r.exit_code == 3, r.output
    flat = " ".join(r.output.split())
    assert flat.startswith(f"tpopt sites: no plan fits even one site of {total:,} cards")
    # the way to see why is a command that runs: tpopt solve refuses a file with [[sites]]
    assert f"tpopt solve on the scenario without its [[sites]] and [wan] tables, with --max-cards {total}" in flat
    assert "error" not in r.output


def test_sites_with_no_multi_site_plan_exits_3(tmp_path):
    # synchronous only over a 1 Gbit/s WAN: every step all-reduces the 405B-parameter bf16 gradient across sites,
    # 2 x 810 GB x 8 / 1e9 b/s = 13,000 s a step (the example's replica plan takes ~146,000 steps), and one site
    # alone holds at most 40 MW / 1,530 W = 26,000 cards, fewer than the 43,904 the 150-day answer needs
    assert 2 * 810e9 * 8 / 1e9 > 10_000 and 40e6 / 1530 < 43_904
    path = _sites_variant(tmp_path, "slow-wan.toml", ("bandwidth_gbps = 400 ", "bandwidth_gbps = 1 "),
                          ('modes = ["sync", "diloco"]', 'modes = ["sync"]'),
                          ("bandwidth_gbps = 800", "bandwidth_gbps = 1"))
    r = _run("sites", "--scenario", path)
    assert r.exit_code == 3, r.output
    assert r.output.rstrip().splitlines()[-1].startswith("no multi-site plan meets the deadline")


def test_estimate_says_where_its_usable_memory_comes_from():
    # H100 SXM: the catalog's 74 GiB usable; megatron-core's communicator buffers 1.5 GiB and allocator reserve 6 %
    # (catalogs/stacks.toml) leave (74 - 1.5) / 1.06 = 68.4 GiB to the per-operation model; the flat model keeps 74
    usable = (74.0 - 1.5) / 1.06
    r = _run("estimate", "llama3-70b", "--hw", "h100-sxm", "--cards", "64")
    assert r.exit_code == 0, r.output
    flat = " ".join(r.output.split())
    # and the catalog's 74 GiB is the card's 80 GB = 74.51 GiB less a 0.51 GiB runtime reserve
    card = (f"card memory 80 GB = {80e9 / 2 ** 30:.1f} GiB less a {80e9 / 2 ** 30 - 74:.2f} GiB runtime reserve = "
            "74.0 GiB, the catalog's usable_memory")
    assert (f"usable {usable:.1f} GiB per card ({card}; less megatron-core's communicator buffers 1.5 GiB, over 1 + "
            f"its allocator reserve 6% = {usable:.1f} GiB (catalogs/stacks.toml))") in flat, flat
    r = _run("estimate", "llama3-70b", "--hw", "h100-sxm", "--cards", "64", "--efficiency", "0.4")
    assert f"usable 74.0 GiB per card ({card})" in " ".join(r.output.split())


def test_solve_limits_carry_their_unit():
    # the design case (30-day deadline): 32 cards finish in 34.3 d (chapter 10.6) and are ruled out by the deadline;
    # the limit printed beside the value carries the value's unit, as explain's 'it has 63.42 d against 30.00 d'
    import re

    r = _run("solve", "--deadline", "30d", "--hw", "rtx4090")
    assert r.exit_code == 0, r.output
    flat = " ".join(r.output.split())
    assert re.search(r"rtx4090 x 32: ruled out by deadline\.finish \(34\.3\d d > 30\.00 d\)", flat), flat
    assert re.search(r"it would have deadline\.finish = [\d.]+ d against 30\.00 d", flat), flat


def test_a_broken_rule_is_violated_not_binding_in_json():
    # b300 x 3 on 8-card hosts: layout.whole_hosts is broken (3 mod 8 = 3); a rule holds or not, never "binding"
    import json

    r = _run("evaluate", "--hw", "b300", "--cards", "3", "--json")
    assert r.exit_code == 3
    c = next(x for x in json.loads(r.output)["constraints"] if x["name"] == "layout.whole_hosts")
    assert c["slack"] < 0 and c["binding"] is False
    assert c["violation"] == "3 cards is not a whole number of 8-card hosts (one host holds 8 cards)"
