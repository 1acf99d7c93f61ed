"""The user surface (issue 25, points 2-9): each point a user hit, as a regression test.

Golden figures come from the design case (REFERENCE.md 10.6: 48 RTX 4090 cards, 24.6 d, 17,880 USD; 32 cards miss
30 days at 34.33 d) or from derivations written here.
"""

from __future__ import annotations

import json
import os
import stat
import struct
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner
from tpopt.cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
DC = str(ROOT / "examples" / "design-case.toml")


def run(*args, env=None):
    r = CliRunner().invoke(cli, [str(a) for a in args], env=env)
    return r.exit_code, r.stdout, r.stderr


# --- 2. sweep --plot-breakdown without --breakdown-cards ----------------------------------------------------


def test_breakdown_plot_without_cards_draws_the_front_and_says_so(tmp_path):
    png = tmp_path / "f.png"
    code, out, err = run("sweep", "--hw", "rtx4090,h100-sxm", "--deadline", "20d,30d", "--plot-breakdown", png)
    assert code == 0, err
    assert "Traceback" not in err
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", data[16:24])[0] >= 600
    assert "Pareto-front plan" in err and "--breakdown-cards" in err  # the default it took, and the way out


# --- 9. paper cuts -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("limit", ["60s", "2min", "30"])
def test_sweep_time_limit_takes_units(limit):
    code, out, err = run("sweep", "--deadline", "30d", "--time-limit", limit, "-q", "--json")
    assert code == 0, err
    assert json.loads(out)["front"][0]["cards"] == 48


def test_sweep_time_limit_bad_is_one_line():
    code, out, err = run("sweep", "--deadline", "30d", "--time-limit", "0s")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "--time-limit" in err


def test_rl_help_lists_only_flags_it_takes():
    code, out, _ = run("rl", "--help")
    assert code == 0
    for flag in ("--tokens", "--global-batch", "--critical-batch", "--seq-len"):
        assert flag not in out, flag  # derived from [rl]: listing them invited an error
    assert "--deadline" in out and "--max-cards" in out and "built-in RL example" in out
    # every flag --help lists is accepted
    flags = sorted({w.split()[0].rstrip(",") for w in out.split("\n  ") if w.strip().startswith("--")})
    values = {"--deadline": "3.5d", "--reserved": "0.25d", "--efficiency": "40%", "--hw": "h100-sxm",
              "--max-cards": "64", "--usable-memory": "70GiB", "--solver": "cpsat", "--objective": "cost",
              "--max-cost": "100000", "--kept": "90%", "--staleness": "1", "--time-limit": "60s"}
    for flag in flags:
        if flag in ("--help", "--scenario", "--catalog", "--plot", "--json", "--timing", "--no-analysis"):
            continue
        code, _, err = run("rl", flag, values[flag], "--no-analysis")
        assert code == 0, (flag, err)


def test_export_file_has_normal_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        path = tmp_path / "plan.mps"
        code, _, err = run("solve", "--scenario", DC, "--export", path)
        assert code == 0, err
        assert stat.S_IMODE(path.stat().st_mode) == 0o644  # 0666 less the umask, as any file the user writes
    finally:
        os.umask(old)


def test_init_writes_an_rl_template_that_tpopt_rl_solves(tmp_path):
    path = tmp_path / "rl.toml"
    code, out, err = run("init", path, "--rl")
    assert code == 0, err
    assert "tpopt rl --scenario" in out
    raw = tomllib.loads(path.read_text())
    assert "rl" in raw and raw["hardware"]["accelerator"] == "h100-sxm"
    code, out, err = run("rl", "--scenario", path, "--no-analysis", "--json")
    assert code == 0, err
    assert json.loads(out)["status"] == "optimal"


def test_init_writes_a_cp_line(tmp_path):
    path = tmp_path / "s.toml"
    assert run("init", path)[0] == 0
    assert any(ln.lstrip("# ").startswith("cp = ") for ln in path.read_text().splitlines())
