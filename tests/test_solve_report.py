"""`tpopt solve` reports: status, plan, binding families, why-not-cheaper, top-K, JSON shape, determinism."""

import json

import pytest
from click.testing import CliRunner

from tpopt.cli.main import cli

N = 8_190_735_360
GIB = 2**30


def run(*args):
    r = CliRunner().invoke(cli, ["solve", *args])
    return r


def test_design_case_json_report(design_path):
    r = run("--scenario", str(design_path), "--deadline", "30d", "--hw", "rtx4090", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["status"] == "optimal"
    assert {"name", "wall_s", "gap"} <= set(d["solver"]) and d["solver"]["gap"] == 0.0
    p = d["plan"]
    assert (p["cards"], p["zero_stage"], p["tp"], p["pp"], p["micro_batch"], p["grad_accum"]) == (48, 3, 1, 1, 1, 8)
    # deadline.finish binds: without it 16 cards (the smallest that fits 16N/d + 10 GiB in 22 GiB) is cheaper
    assert [b["name"] for b in d["binding"]] == ["deadline.finish"]
    assert d["binding"][0]["plan_without"]["cards"] == 16
    assert 16 * N / 16 / GIB + 10 <= 22 < 16 * N / 8 / GIB + 10  # REFERENCE 10.2: 17.6 vs 25.3 GiB
    binding = {c["name"]: c["binding"] for c in d["constraints"]}
    assert binding["deadline.finish"] and binding["step.budget"] and not binding["memory.per_card"]
    # 32 cards ruled out by the deadline at 34.3 days (REFERENCE 10.6)
    alt = {a["alternative"]: a for a in d["alternatives"]}
    a32 = alt["rtx4090 x 32"]
    assert not a32["feasible"] and a32["ruled_out_by"][0]["name"] == "deadline.finish"
    assert round(a32["ruled_out_by"][0]["value"], 1) == 34.3
    assert d["top"][0]["plan"] == d["plan"]


def test_open_search_explains_the_layout(design_path, tmp_path):
    # [search] removed: the answer keeps its layout and says why alternatives at 48 cards lose
    text = design_path.read_text().split("[search]")[0]
    p = tmp_path / "open.toml"
    p.write_text(text)
    d = json.loads(run("--scenario", str(p), "--json").stdout)
    assert d["status"] == "optimal"
    assert (d["plan"]["cards"], d["plan"]["zero_stage"], d["plan"]["micro_batch"]) == (48, 3, 1)
    alt = {a["alternative"]: a for a in d["alternatives"]}
    # micro-batch 2 doubles the one-sequence reserve: 16N/48 + 2 x 10 GiB = 22.54 GiB > 22 GiB
    mb2 = alt["micro-batch 2 on rtx4090 x 48"]
    assert not mb2["feasible"]
    reason = mb2["ruled_out_by"][0]
    assert reason["name"] == "memory.per_card"
    assert reason["value"] == pytest.approx(16 * N / 48 / GIB + 20, rel=1e-9)
    # PP 8 does not divide Qwen3-8B's 36 layers
    assert alt["PP 8 on rtx4090 x 48"]["ruled_out_by"][0]["name"] == "layout.pp_divides_layers"
    # alternatives that are feasible are never cheaper than the optimum
    for a in d["alternatives"]:
        if a["feasible"]:
            assert a["delta"] >= 0


def test_top_k(design_path, tmp_path):
    text = design_path.read_text().split("[search]")[0]
    p = tmp_path / "open.toml"
    p.write_text(text)
    d = json.loads(run("--scenario", str(p), "--top", "4", "--json").stdout)
    costs = [t["metrics"]["cost"] for t in d["top"]]
    assert len(costs) == 4 and costs == sorted(costs) and [t["rank"] for t in d["top"]] == [1, 2, 3, 4]


def test_text_output_is_byte_deterministic(design_path):
    a = run("--scenario", str(design_path)).stdout
    b = run("--scenario", str(design_path)).stdout
    assert a == b and "Status: optimal" in a and "Binding constraints" in a and "Why not cheaper" in a


def test_json_is_deterministic_but_for_wall_time(design_path):
    outs = []
    for _ in range(2):
        d = json.loads(run("--scenario", str(design_path), "--solver", "highs", "--json").stdout)
        d["solver"].pop("wall_s")
        outs.append(json.dumps(d, sort_keys=True))
    assert outs[0] == outs[1]


@pytest.mark.parametrize("solver", ["cpsat", "highs", "enumerate"])
def test_every_solver_prints_the_same_plan(design_path, solver):
    d = json.loads(run("--scenario", str(design_path), "--solver", solver, "--method", "monolithic", "--json").stdout)
    assert d["solver"]["name"] == solver and d["plan"]["cards"] == 48


def test_tiny_spaces_are_proven_by_enumeration_and_say_so(design_path):
    # issue 16, item 5: 16 plans are evaluated faster than a solver loads; the output names what ran
    d = json.loads(run("--scenario", str(design_path), "--json").stdout)
    assert d["status"] == "optimal" and d["plan"]["cards"] == 48
    assert d["solver"]["name"] == "enumerate" and "every plan evaluated" in d["solver"]["method"]
    assert d["solver"]["evaluated"] == d["solver"]["points"] == 16


def test_objective_time_and_budget_cap(design_path, tmp_path):
    text = design_path.read_text().split("[search]")[0]
    p = tmp_path / "open.toml"
    p.write_text(text)
    fast = json.loads(run("--scenario", str(p), "--objective", "time", "--json").stdout)
    cheap = json.loads(run("--scenario", str(p), "--json").stdout)
    assert fast["metrics"]["finish_days"] <= cheap["metrics"]["finish_days"]
    # a cap below the cheapest plan's cost is infeasible (exit 3); at its cost it is feasible
    c = cheap["metrics"]["cost"]
    assert run("--scenario", str(p), "--max-cost", str(c * 0.99)).exit_code == 3
    assert run("--scenario", str(p), "--max-cost", str(c * 1.000001)).exit_code == 0


def test_bad_solver_flags(design_path):
    r = run("--scenario", str(design_path), "--top", "0")
    assert r.exit_code == 2 and "Traceback" not in r.stderr


def test_robustness_without_overlap(design_path, tmp_path):
    # REFERENCE 10.6: with 8 NICs per host even the fully exposed 12.0 s gives a 64.8 s step (meets 30 d)
    d = json.loads(run("--scenario", str(design_path), "--json").stdout)
    rob = d["robustness"]["without_overlap"]
    assert round(rob["step_s"], 1) == 64.8 and rob["feasible"]
    # NICs opened as a decision: one shared 200G NIC per host is cheaper and still meets 30 d with prefetch,
    # but without overlap the step is 68.1 s (REFERENCE 10.3) and the deadline is missed
    text = design_path.read_text().replace("max_cards = 1024", "max_cards = 1024\nnics_per_host = [1, 2, 4, 8]")
    p = tmp_path / "nics.toml"
    p.write_text(text)
    d1 = json.loads(run("--scenario", str(p), "--json").stdout)
    assert d1["plan"]["nics_per_host"] == 1 and d1["metrics"]["cost"] < d["metrics"]["cost"]
    rob1 = d1["robustness"]["without_overlap"]
    assert round(rob1["step_s"], 1) == 68.1 and not rob1["feasible"] and "deadline.finish" in rob1["violates"]


def test_design_case_solve_loads_no_solver_library(design_path):
    # cold start (issue 16, item 5; issue 39, item 4): the design case never imports OR-Tools (which pulls in
    # pandas and pyarrow) nor HiGHS, and no longer SciPy: the footing's P(on time) (the finish-time law's
    # translated-gamma CDF) comes from models/cephes.py, SciPy's own algorithms in Python floats (bit-identical,
    # tests/test_cephes.py); the test asserts SciPy stays unloaded while the probability is printed
    import subprocess
    import sys

    code = ("import sys\nfrom tpopt.cli.main import main\nsys.argv = ['tpopt', 'solve', '--scenario', "
            f"{str(design_path)!r}, '--deadline', '30d', '--hw', 'rtx4090']\n"
            "try:\n    main()\nexcept SystemExit as e:\n    assert e.code == 0, e.code\n"
            "bad = sorted(m for m in ('ortools', 'pandas', 'pyarrow', 'highspy') if m in sys.modules)\n"
            "print('LOADED', bad, 'scipy' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "Status: optimal" in out and "LOADED [] False" in out and "P(on time)" in out


def test_headline_and_help_load_only_what_they_need():
    # cold start (issue 39, item 4): the headline does not import the market or explain modules (no [market]
    # offers), numpy.ma (np.unique imports it, numpy 2.x), rich's emoji table (tables are printed emoji=False)
    # nor tempfile (no file is written); `tpopt --help` imports no numpy at all (no subcommand runs)
    import subprocess
    import sys

    unwanted = ("numpy.ma", "tpopt.optimizer.market", "tpopt.optimizer.explain", "rich._emoji_codes", "tempfile")
    code = ("import sys\nfrom tpopt.cli.main import main\nsys.argv = ['tpopt', 'solve', '--deadline', '30d', "
            "'--hw', 'rtx4090']\ntry:\n    main()\nexcept SystemExit as e:\n    assert e.code == 0, e.code\n"
            f"print('LOADED', sorted(m for m in {unwanted!r} if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "Status: optimal" in out and "LOADED []" in out
    code = ("import sys\nfrom tpopt.cli.main import main\nsys.argv = ['tpopt', '--help']\ntry:\n    main()\n"
            "except SystemExit as e:\n    assert e.code == 0, e.code\nprint('NUMPY', 'numpy' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "Commands:" in out and "NUMPY False" in out
