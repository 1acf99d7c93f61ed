"""Virtual stages (the interleaved schedule's model chunks per card) split pipeline stages: given where no plan has
a pipeline stage to split, they were dropped without a word (``tpopt evaluate --virtual-stages 2`` without ``--pp``
evaluated plain PP 1). Now one line on stderr and exit 2: the plan flag on evaluate / explain / export, and the
scenario's ``[search] virtual_stages`` that ``tpopt solve`` takes (solve has no plan flags: ``--virtual-stages``
there is click's one-line unknown option)."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tpopt.cli.main import cli

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "design-case.toml"  # [search] pp = [1]


def run(*args: str):
    runner = CliRunner(mix_stderr=False) if "mix_stderr" in inspect.signature(CliRunner.__init__).parameters \
        else CliRunner()
    return runner.invoke(cli, list(args))


def one_line_refusal(res, *needles: str) -> None:
    assert res.exit_code == 2, (res.exit_code, res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr and res.stdout == "", res.stderr
    assert all(n in lines[0] for n in needles), lines[0]


@pytest.mark.parametrize("pp", [[], ["--pp", "1"]])
@pytest.mark.parametrize("command", ["evaluate", "explain", "export"])
def test_virtual_stages_without_a_pipeline_are_refused(command, pp):
    extra = ["--format", "megatron"] if command == "export" else []
    res = run(command, "--scenario", str(EXAMPLE), *extra, "--cards", "48", *pp, "--virtual-stages", "2")
    one_line_refusal(res, "--virtual-stages 2", "pp 1", "--pp 1" if pp else "no --pp given")


def test_virtual_stages_with_a_pipeline_evaluate_interleaved():
    res = run("evaluate", "--scenario", str(EXAMPLE), "--cards", "48", "--pp", "2", "--virtual-stages", "2", "--json")
    assert res.exit_code in (0, 3), res.stderr
    assert '"schedule": "interleaved"' in res.stdout and '"pp": 2' in res.stdout


def _scenario(tmp_path: Path, search: str) -> str:
    text = EXAMPLE.read_text(encoding="utf-8").replace("pp = [1]\n", search, 1)
    assert text != EXAMPLE.read_text(encoding="utf-8")
    path = tmp_path / "s.toml"
    path.write_text(text, encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("search, needles", [
    ('pp = [1]\nschedule = ["1f1b", "interleaved"]\nvirtual_stages = [2]\n', ("search.pp is [1]",)),
    ('pp = [1, 2]\nvirtual_stages = [2]\n', ('search.schedule, which lists ["1f1b"]',)),
])
def test_solve_refuses_search_virtual_stages_no_plan_runs(tmp_path, search, needles):
    one_line_refusal(run("solve", "--scenario", _scenario(tmp_path, search)), "search.virtual_stages [2]", *needles)


def test_solve_takes_search_virtual_stages_where_they_split_a_pipeline(tmp_path):
    path = _scenario(tmp_path, 'pp = [1, 2]\nschedule = ["1f1b", "interleaved"]\nvirtual_stages = [2, 3]\n')
    res = run("solve", "--scenario", path, "--solver", "enumerate")
    assert res.exit_code == 0, res.stderr


def test_solve_has_no_virtual_stages_flag():
    """The program (not click's test runner, which prints click's usage block) refuses it in one line."""
    res = subprocess.run([sys.executable, "-m", "tpopt", "solve", "--scenario", str(EXAMPLE), "--virtual-stages", "2"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 2 and res.stdout == "" and res.stderr.count("\n") == 1, res.stderr
    assert "No such option '--virtual-stages'" in res.stderr
