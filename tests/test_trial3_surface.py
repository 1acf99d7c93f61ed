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
