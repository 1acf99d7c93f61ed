import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "examples" / "design-case.toml"

os.environ.setdefault("MPLBACKEND", "Agg")
# Reports fit COLUMNS (cli/render.py output_width); tests that assert on wrapped text pass the width they mean
# (CliRunner env), so a width inherited from the shell or set by pytest-xdist's workers (80) must not leak in.
os.environ.pop("COLUMNS", None)
os.environ.pop("LINES", None)


@pytest.fixture
def design_path():
    return DESIGN


@pytest.fixture(scope="session")
def design():
    from tpopt.catalogs.scenario import load_scenario

    return load_scenario(DESIGN)


def _live_in_group(pgid: int) -> list[int]:
    """The processes of a process group that are alive (not zombies), read from /proc."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                out.append(int(d.name))
    return out


@pytest.fixture
def live_in_group():
    """``live_in_group(pgid)``: pids of the group still alive (tests that kill a process and its workers)."""
    if not Path("/proc/self/stat").exists():
        pytest.skip("needs /proc")
    return _live_in_group
