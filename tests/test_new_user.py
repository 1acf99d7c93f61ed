"""What a new user meets (issue 14): the built-in scenario, `tpopt init`, `python -m tpopt`, honest reports,
defaults that do not bias, reliability commands on the scenario's plan, terminal width, human numbers, plots.

Golden figures: the design case (REFERENCE.md 10.6: 48 cards, 24.6 d, 17,880 USD; 32 cards 34.33 d) and 10.4
(stragglers: 48 cards, sigma 5 % -> 58.6 s; checkpoint tau* 4,458 s for 48 cards with auto).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from tpopt.cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
NOTE = "Scenario: built-in design case"


def run(*args, env=None):
    return CliRunner().invoke(cli, list(args), env=env)


def runner_err():
    import inspect

    return CliRunner(mix_stderr=False) if "mix_stderr" in inspect.signature(CliRunner.__init__).parameters \
        else CliRunner()


# --- 1. the built-in scenario and tpopt init --------------------------------------------------------------


def test_headline_command_runs_on_the_builtin_scenario():
    r = run("solve", "--deadline", "30d", "--hw", "rtx4090")
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0].startswith(NOTE)
    plan = next(ln for ln in lines if ln.startswith("Plan: "))
    assert plan.startswith("Plan: rtx4090 x 48 (6 hosts)")
    d = json.loads(run("solve", "--deadline", "30d", "--hw", "rtx4090", "--json").output)  # stdout: JSON only
    assert d["plan"]["cards"] == 48 and d["scenario_source"] == "built-in design case"
    # with --scenario nothing is said
    r = run("solve", "--scenario", str(ROOT / "examples" / "design-case.toml"))
    assert not r.output.startswith(NOTE) and "scenario_source" not in run(
        "evaluate", "--scenario", str(ROOT / "examples" / "design-case.toml"), "--cards", "48", "--json").output


def test_builtin_scenario_is_the_shipped_example():
    def tables(path):
        with open(path, "rb") as fh:
            return tomllib.load(fh)

    assert tables(ROOT / "catalogs" / "design-case.toml") == tables(ROOT / "examples" / "design-case.toml")


def test_bad_input_on_the_builtin_scenario_prints_nothing_on_stdout():
    r = runner_err().invoke(cli, ["solve", "--deadline", "30x"])
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.strip().startswith("tpopt: error: ") and len(r.stderr.strip().splitlines()) == 1


def test_init_writes_a_scenario_that_solves_and_never_overwrites(tmp_path):
    path = tmp_path / "run.toml"
    r = run("init", str(path))
    assert r.exit_code == 0, r.output
    text = path.read_text()
    assert text.startswith("# tpopt scenario") and text.count("\n#") > 20  # commented
    s = run("solve", "--scenario", str(path), "--json")
    assert s.exit_code == 0, s.output
    d = json.loads(s.output)
    assert d["plan"]["accelerator"] == "rtx4090"
    # refuses to overwrite; --force does
    path.write_text("keep me")
    r = runner_err().invoke(cli, ["init", str(path)])
    assert r.exit_code == 2 and "--force" in r.stderr and path.read_text() == "keep me"
    assert run("init", str(path), "--force").exit_code == 0 and path.read_text() == text


def test_init_points_at_a_page_that_lists_the_defaults(tmp_path):
    """The file tpopt init writes says where the defaults of the keys it leaves out are listed: a documentation
    page that exists and holds the scenario keys' table (it named the README's "Scenario files", a section the
    README no longer has since the topics moved to docs/)."""
    path = tmp_path / "s.toml"
    assert run("init", str(path)).exit_code == 0
    line = next(ln for ln in path.read_text().splitlines() if "defaults" in ln and ln.startswith("#"))
    pages = re.findall(r"docs/[a-z-]+\.md", line)
    assert pages, line
    for page in pages:
        text = (ROOT / page).read_text()
        assert "| table.key | meaning | default |" in text, (line, page)
    for title in re.findall(r'README \("([^"]+)"\)', line):  # a README section it names must be there
        assert re.search(rf"^#+ {re.escape(title)}\s*$", (ROOT / "README.md").read_text(), flags=re.M), line


def test_the_finish_distribution_points_at_the_page_that_holds_its_models():
    """solve --confidence prints the finish-time distribution's models and where they are told: the page that
    holds them (docs/confidence.md), where it said "see README", whose topics moved to docs/."""
    r = run("solve", "--confidence", "95%")
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())  # the line may wrap at the output width
    line = text[text.index("Finish-time distribution"):].split("):", 1)[0]
    assert "README" not in line, line
    pages = re.findall(r"docs/[a-z-]+\.md", line)
    assert pages and all("lognormal" in (ROOT / p).read_text() for p in pages), line


def test_init_for_another_model_and_hardware(tmp_path):
    path = tmp_path / "l70.toml"
    r = run("init", str(path), "--model", "llama3-70b", "--hw", "h100-sxm,b200")
    assert r.exit_code == 0, r.output
    raw = tomllib.loads(path.read_text())
    assert raw["model"]["name"] == "llama3-70b" and raw["hardware"]["accelerator"] == ["h100-sxm", "b200"]
    # the design case's card- and model-specific assumptions are left out (commented)
    assert "usable_memory" not in raw["hardware"] and "memory" not in raw and "input" not in raw
    assert run("evaluate", "--scenario", str(path), "--cards", "64", "--hw", "b200").exit_code in (0, 3)
    bad = tmp_path / "bad.toml"
    r = runner_err().invoke(cli, ["init", str(bad), "--model", "no-such-model"])
    assert r.exit_code == 2 and not bad.exists()


def test_init_reads_a_user_catalog_for_its_model_and_hardware(tmp_path):
    """docs/catalogs.md: entries of a --catalog DIR are used like built-ins; a user who added a card and a model
    there starts a scenario for them with tpopt init like any other (before, init read the built-in catalog only
    and refused both as unknown), and the command it suggests carries the directory."""
    cat = tmp_path / "mine"
    cat.mkdir()
    (cat / "models.toml").write_text('[tiny-1b]\nlayers = 16\nhidden = 2048\nheads = 32\nkv_heads = 8\n'
                                     'head_dim = 64\nffn = 8192\nvocab = 128256\ntied_embeddings = true\n'
                                     'source = "Llama 3.2 1B shape"\n')
    (cat / "accelerators.toml").write_text(
        '[my-card]\npeak_bf16 = "835TFLOP/s"\nmemory = "94GB"\nhbm_bandwidth = "3900GB/s"\n'
        'host_link = "pcie5-x16"\ncards_per_host = 8\nnic = "400g"\nprice_card_hour = 2.5\n'
        'price_date = "2026-10"\n[my-card.sources]\npeak_bf16 = "a"\nmemory = "a"\nhbm_bandwidth = "a"\n'
        'host_link = "a"\ncards_per_host = "a"\nnic = "a"\nprice_card_hour = "a"\n')
    path = tmp_path / "mine.toml"
    r = run("init", str(path), "--model", "tiny-1b", "--hw", "my-card", "--catalog", str(cat))
    assert r.exit_code == 0, r.output
    assert f"tpopt solve --scenario {path} --catalog {cat}" in r.output
    raw = tomllib.loads(path.read_text())
    assert raw["model"]["name"] == "tiny-1b" and raw["hardware"]["accelerator"] in ("my-card", ["my-card"])
    d = json.loads(run("evaluate", "--scenario", str(path), "--catalog", str(cat), "--cards", "8", "--json").output)
    assert d["plan"]["accelerator"] == "my-card"
    bad = tmp_path / "bad.toml"  # without the directory: the one-line unknown-model error, nothing written
    r = runner_err().invoke(cli, ["init", str(bad), "--model", "tiny-1b", "--hw", "my-card"])
    assert r.exit_code == 2 and "unknown model 'tiny-1b'" in r.stderr and not bad.exists()


def test_python_dash_m():
    p = subprocess.run([sys.executable, "-m", "tpopt", "--help"], capture_output=True, text=True,
                       cwd=ROOT.parent if (ROOT.parent / "tpopt").exists() else None)
    assert p.returncode == 0, p.stderr
    assert "Usage:" in p.stdout and "init" in p.stdout


# --- 5. honest reports ------------------------------------------------------------------------------------


def test_no_analysis_says_it_was_skipped():
    text = run("solve", "--no-analysis").output
    assert "Binding constraints: not analysed" in text and "Binding constraints: none" not in text
    d = json.loads(run("solve", "--no-analysis", "--json").output)
    assert d["analysis"] == "skipped" and d["binding"] is None and d["alternatives"] is None
    assert all(c["binding"] is None for c in d["constraints"])
    full = json.loads(run("solve", "--json").output)  # the full run says what binds (REFERENCE 10.6)
    assert full["analysis"] == "done" and [b["name"] for b in full["binding"]] == ["deadline.finish"]


def test_evaluate_exits_3_on_an_infeasible_plan():
    r = run("evaluate", "--cards", "32")
    assert r.exit_code == 3 and "Verdict: INFEASIBLE" in r.output  # 34.33 d > 30 d (REFERENCE 10.6)
    assert run("evaluate", "--cards", "48").exit_code == 0


def test_a_batch_that_does_not_divide_is_named():
    # 384 sequences over DP 40 x micro-batch 1: 9.6 micro-batches, no whole accumulation
    r = run("evaluate", "--cards", "40")
    assert r.exit_code == 3
    assert "x 0 accumulation" not in r.output
    assert "no whole accumulation (DP 40 x micro-batch 1 does not divide the batch)" in " ".join(r.output.split())


def test_explain_shows_no_progress_when_stderr_is_not_a_terminal():
    r = runner_err().invoke(cli, ["explain", "--max-cards", "32"])
    assert r.exit_code == 3 and r.stderr == ""
    assert "Conflict: these 2 constraints" in r.stdout


def test_progress_line_speaks_only_to_a_terminal():
    import io

    from tpopt.cli.progress_line import LiveLine

    class Tty(io.StringIO):
        def isatty(self):
            return True

    clock = iter([0.0, 5.0, 5.0])
    tty = Tty()
    line = LiveLine("tpopt explain", tty, True, now=lambda: next(clock))
    line.tell("the optimum")
    seen = tty.getvalue().split("\r\x1b[K")
    assert seen[-1].startswith("tpopt explain: the optimum")


# --- 6. defaults that do not bias; reliability commands use the plan ----------------------------------------


def test_checkpoint_defaults_are_searched_unless_stated(tmp_path):
    # without [checkpoint] save_interval / mode the interval is "auto" and both modes are searched; the design
    # case states the chapter's 1,800 s sync, so its figures hold
    from tpopt.catalogs.scenario import load_scenario

    text = (ROOT / "examples" / "design-case.toml").read_text()
    assert 'save_interval = "1800s"' in text and 'mode = "sync"' in text
    stated = load_scenario(ROOT / "examples" / "design-case.toml")
    assert stated.search.save_interval_s == (1800.0,) and stated.search.save_mode == ("sync",)
    p = tmp_path / "open.toml"
    p.write_text(text.replace('save_interval = "1800s"', "#").replace('mode = "sync"', "#"))
    sc = load_scenario(p)
    assert sc.search.save_interval_s == (0.0,) and sc.search.save_mode == ("sync", "async")
    d = json.loads(run("solve", "--scenario", str(p), "--json").output)
    assert d["metrics"]["overhead_fraction"] < 0.0108  # below the 1,800 s sync figure, 1.08 % (REFERENCE 10.6)


def test_stragglers_uses_the_scenario_plan():
    # the design case's optimum: 48 cards, compute 52.2 s, fixed 0.58 s (REFERENCE 10.6) -> 58.6 s at 5 %
    d = json.loads(run("stragglers", "--sigma", "5%", "--json").output)
    assert d["inputs"]["cards"] == 48 and d["plan"]["cards"] == 48
    assert round(d["inputs"]["mu"], 1) == 52.2 and round(d["inputs"]["fixed"], 2) == 0.58
    assert round(d["step"]["expected"], 1) == 58.6
    assert d["inputs"]["interval"] == 1800.0  # the plan's own save interval
    # another scenario's plan gives other figures
    other = json.loads(run("stragglers", "--sigma", "5%", "--hw", "h100-sxm", "--json").output)
    assert other["plan"]["accelerator"] == "h100-sxm" and other["inputs"]["mu"] != d["inputs"]["mu"]


def test_checkpoint_uses_the_scenario_plan(tmp_path):
    d = json.loads(run("checkpoint", "--json").output)
    assert d["inputs"]["cards"] == 48 and d["plan"]["save_interval_s"] == 1800.0 and d["mode"] == "sync"
    # a scenario with auto intervals: the plan's optimum interval is tabulated (REFERENCE 10.4: 4,458 s on 48)
    text = (ROOT / "examples" / "design-case.toml").read_text().replace('save_interval = "1800s"',
                                                                     'save_interval = "auto"')
    p = tmp_path / "auto.toml"
    p.write_text(text)
    d = json.loads(run("checkpoint", "--scenario", str(p), "--json").output)
    assert round(d["plan"]["save_interval_s"]) == 4458
    assert 4458 in {round(r["interval"]) for r in d["intervals"]}


# --- 7. terminal width, human numbers, plots ----------------------------------------------------------------


def test_width_is_fixed_without_a_terminal_and_follows_columns():
    def plan_lines(env):
        out = run("solve", env=env).output
        assert max(len(ln) for ln in out.splitlines()) <= int(env["COLUMNS"] or 100)
        lines = out.splitlines()
        i = next(k for k, ln in enumerate(lines) if ln.startswith("Plan: "))
        return lines[i:lines.index("", i)]

    # piped (no terminal, COLUMNS unset): 100 columns, the plan line wraps once; byte-deterministic
    assert len(plan_lines({"COLUMNS": ""})) == 2
    assert run("solve").output == run("solve").output
    assert len(plan_lines({"COLUMNS": "160"})) == 1  # COLUMNS sets the width


def test_top_table_headers_are_not_cut():
    out = run("solve", "--deadline", "40d", "--top", "2").output
    header = next(ln for ln in out.splitlines() if ln.startswith("#"))
    for col in ("accelerator", "cards", "TP/PP/DP", "save", "finish d", "cost USD"):
        assert col in header, header
    assert "…" not in out


def test_human_numbers():
    from tpopt.models.units import fmt_count, parse_count

    for x, text in ((100e9, "100B"), (1e12, "1T"), (1.5e12, "1.5T"), (85.23e9, "85.23B"), (1743.06e9, "1.74306T")):
        assert fmt_count(x) == text and parse_count(text) == pytest.approx(x)
    assert "1T tokens" in run("solve", "--tokens", "1T", "--deadline", "250d", "--no-analysis").output.splitlines()[1]
    from tpopt.cli.render import change_text

    assert change_text(0.0) == "tie" and change_text(1e-5) == "< 0.1 % better" and change_text(0.142) == \
        "14.2 % better"


def test_every_plot_writes_pdf_svg_png(tmp_path):
    from tpopt.cli.plots import pyplot, save_figure

    plt = pyplot()
    for ext, magic in (("pdf", b"%PDF-"), ("svg", b"<svg"), ("png", b"\x89PNG")):
        for name in ("a", "b"):
            fig, ax = plt.subplots()
            ax.plot([1, 2], [3, 4], label="x")
            save_figure(fig, str(tmp_path / f"{name}.{ext}"))
            plt.close(fig)
        a, b = (tmp_path / f"a.{ext}").read_bytes(), (tmp_path / f"b.{ext}").read_bytes()
        assert magic in a[:200] and a == b, ext  # the same figure gives the same bytes
    # each command's --plot takes PDF (SVG and PNG are covered by their own tests)
    for args in (("checkpoint", "--cards", "48"),
                 ("pipeline", "--schedule", "1f1b", "-p", "4", "-m", "8", "--forward", "10ms", "--backward", "20ms")):
        out = tmp_path / f"{args[0]}.pdf"
        assert run(*args, "--plot", str(out)).exit_code == 0 and out.read_bytes().startswith(b"%PDF-")


def test_multi_case_breakdown_labels_cases_and_draws_the_swept_range(tmp_path):
    out = tmp_path / "b.svg"
    r = run("sweep", "--hw", "rtx4090", "--deadline", "25d:35d:5d", "--tokens", "100B,1T", "--plot-breakdown",
            str(out), "--breakdown-cards", "32,48", "--workers", "1", "-q")
    assert r.exit_code == 0, r.output
    svg = out.read_text()
    assert "rtx4090 x 48 (100B tok)" in svg and "rtx4090 x 48 (1T tok)" in svg  # never "1000B"
    assert "deadlines swept 25-35 d" in svg and 'id="deadline-range"' in svg


# --- 9. no paths outside the repository in the README, docs/ or docstrings ---------------------------------------


def test_no_paths_outside_the_repository():
    for page in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]:
        assert "../shared" not in page.read_text(), page
    for sub in ("models", "optimizer", "catalogs", "cli"):
        for f in (ROOT / sub).glob("*.py"):
            text = f.read_text()
            assert "../shared" not in text and "REFERENCE.md" not in text, f
    for f in ROOT.glob("*.py"):
        assert "REFERENCE.md" not in f.read_text(), f


# --- 10. solve and explain do not import each other ----------------------------------------------------------


def test_solve_and_explain_do_not_import_each_other():
    for a, b in (("solve", "explain"), ("explain", "solve")):
        text = (ROOT / "cli" / f"{a}.py").read_text()
        assert f"tpopt.cli.{b} import" not in text and f"from tpopt.cli import {b}" not in text, a


def test_rl_runs_on_its_builtin_scenario():
    def tables(path):
        with open(path, "rb") as fh:
            return tomllib.load(fh)

    assert tables(ROOT / "catalogs" / "rl-grpo-qwen3-8b.toml") == tables(ROOT / "examples" / "rl-grpo-qwen3-8b.toml")
    r = run("rl", "--no-analysis")
    assert r.exit_code == 0, r.output
    assert r.output.startswith("Scenario: built-in RL example")
