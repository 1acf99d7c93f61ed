import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "examples" / "design-case.toml"

os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture
def design_path():
    return DESIGN


@pytest.fixture(scope="session")
def design():
    from tpopt.catalogs.scenario import load_scenario

    return load_scenario(DESIGN)
