"""Unit parsing and bad-input handling: one clear stderr line, exit code 2, no traceback."""

import subprocess
import sys

import pytest
from click.testing import CliRunner

from tpopt.cli.main import cli
from tpopt.errors import InputError
from tpopt.models import units as u


@pytest.mark.parametrize("text,seconds", [("30d", 30 * 86400), ("720h", 720 * 3600), ("1800s", 1800),
                                          ("10ms", 0.01), ("2w", 14 * 86400), ("0.5s", 0.5), ("90min", 5400)])
def test_durations(text, seconds):
    assert u.parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text,count", [("100B", 1e11), ("1.5T", 1.5e12), ("8K", 8e3), ("384", 384), (384, 384),
                                        ("100_000", 1e5)])
def test_counts(text, count):
    assert u.parse_count(text) == count


@pytest.mark.parametrize("text,nbytes", [("22GiB", 22 * 1024**3), ("24GB", 24e9), ("96MiB", 96 * 1024**2),
                                         ("1.5TB", 1.5e12)])
def test_bytes(text, nbytes):
    assert u.parse_bytes(text) == nbytes


@pytest.mark.parametrize("text,bps", [("7GB/s", 7e9), ("200Gbit/s", 25e9), ("400Gbps", 50e9), ("32 GB/s", 32e9),
                                      ("1GiB/s", 1024**3)])
def test_bandwidth(text, bps):
    assert u.parse_bandwidth(text) == bps


def test_gb_and_gib_are_never_mixed():
    assert u.parse_bytes("24GB") / u.GIB == pytest.approx(22.3517, abs=1e-4)
    assert u.parse_bytes("24GiB") != u.parse_bytes("24GB")


@pytest.mark.parametrize("call", [lambda: u.parse_duration("30x"), lambda: u.parse_duration("-5d"),
                                  lambda: u.parse_duration("30"), lambda: u.parse_duration(30),
                                  lambda: u.parse_count("-5"), lambda: u.parse_bytes("22Gb"),
                                  lambda: u.parse_fraction("140%"), lambda: u.parse_fraction("0"),
                                  lambda: u.parse_int("1.5"), lambda: u.parse_duration("nan d")])
def test_rejects(call):
    with pytest.raises(InputError):
        call()


def run(args):
    r = CliRunner().invoke(cli, args)
    return r.exit_code, r.stdout, r.stderr


def assert_one_line_error(code, out, err, needle):
    assert code == 2, (code, out, err)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert needle in lines[0]
    assert "Traceback" not in err and out == ""


BASE = ["evaluate", "--cards", "48"]


@pytest.mark.parametrize("extra,needle", [
    (["--deadline", "30x"], "unknown unit 'x'"),
    (["--deadline", "-5d"], "must not be negative"),
    (["--tokens", "-100B"], "must not be negative"),
    (["--hw", "tpu-v9"], "unknown accelerator 'tpu-v9'"),
    (["--efficiency", "140%"], "efficiency"),
])
def test_cli_bad_overrides(design_path, extra, needle):
    assert_one_line_error(*run(BASE + ["--scenario", str(design_path)] + extra), needle)


def test_cli_unknown_model(tmp_path, design_path):
    p = tmp_path / "s.toml"
    p.write_text(design_path.read_text().replace('name = "qwen3-8b"', 'name = "qwen9-1t"'))
    assert_one_line_error(*run(BASE + ["--scenario", str(p)]), "unknown model 'qwen9-1t'")


def test_cli_malformed_toml(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text("[task\ntokens = 1")
    assert_one_line_error(*run(BASE + ["--scenario", str(p)]), "malformed TOML")


def test_cli_missing_required_key(tmp_path, design_path):
    p = tmp_path / "s.toml"
    p.write_text(design_path.read_text().replace("seq_len = 8192\n", ""))
    assert_one_line_error(*run(BASE + ["--scenario", str(p)]), "missing required key 'seq_len'")


def test_cli_unknown_key_is_rejected(tmp_path, design_path):
    p = tmp_path / "s.toml"
    p.write_text(design_path.read_text().replace('deadline = "30d"', 'deadlin = "30d"'))
    assert_one_line_error(*run(BASE + ["--scenario", str(p)]), "unknown key 'deadlin'")


def test_cli_missing_file():
    assert_one_line_error(*run(BASE + ["--scenario", "/nonexistent/x.toml"]), "not found")


def test_cli_bad_plan(design_path):
    assert_one_line_error(*run(["evaluate", "--scenario", str(design_path), "--cards", "50", "--tp", "4"]),
                          "multiple of tp x pp")


def test_real_process_exit_code_and_stderr(design_path):
    # the installed console script, in a real process: exit 2, one line, no traceback
    p = subprocess.run([sys.executable, "-m", "tpopt.cli.main", "evaluate", "--scenario", str(design_path),
                        "--cards", "48", "--deadline", "30x"], capture_output=True, text=True)
    assert p.returncode == 2
    assert p.stdout == ""
    assert p.stderr.strip().count("\n") == 0 and "Traceback" not in p.stderr


@pytest.mark.parametrize("args", [["catalog", "widgets"], ["evaluate", "--scenario", "x.toml"], ["nosuchcmd"],
                                  ["evaluate", "--scenario", "x.toml", "--cards", "x"]])
def test_usage_errors_are_one_line(args):
    # click's own usage errors go through the same one-line, exit-2 path (real process: tpopt.cli.main:main)
    p = subprocess.run([sys.executable, "-m", "tpopt.cli.main", *args], capture_output=True, text=True)
    assert p.returncode == 2 and p.stdout == ""
    assert len(p.stderr.strip().splitlines()) == 1 and p.stderr.startswith("tpopt: error:")


def test_infeasible_exit_code_in_a_real_process(design_path):
    p = subprocess.run([sys.executable, "-m", "tpopt.cli.main", "solve", "--scenario", str(design_path),
                        "--max-cards", "32"], capture_output=True, text=True)
    assert p.returncode == 3 and "Conflict" in p.stdout
