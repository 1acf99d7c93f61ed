"""benchmarks/cross_check.py: its reproducer files rebuild the very scenario that was checked, and a
small run through every backend and method finds no disagreement (the full run is a benchmark)."""

import importlib.util
import tomllib
from pathlib import Path

import numpy as np
from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import build_scenario

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("cross_check", ROOT / "benchmarks" / "cross_check.py")
cc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cc)


def test_reproducer_files_rebuild_the_scenario():
    cat = load_catalog()
    for i in range(20):
        raw, _ = cc.random_raw(np.random.default_rng([5, i]))
        again = tomllib.loads(cc.to_toml(raw))
        assert again == raw
        a, b = build_scenario(raw, cat), build_scenario(again, cat)
        assert a == b


def test_a_small_run_agrees(tmp_path, capsys):
    assert cc.main(["--n", "4", "--seed", "3", "--out", str(tmp_path / "cc")]) == 0
    out = capsys.readouterr().out
    assert "0 disagreements, 0 tracebacks" in out
    assert not (tmp_path / "cc").exists()  # nothing to reproduce
