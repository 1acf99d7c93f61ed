"""The shipped examples' outputs are byte-identical to their checked-in transcripts (see tests/transcripts.py).

A difference is either a regression or an intended change of output; for the latter, regenerate the named
transcript with ``python tests/transcripts.py NAME`` and review its diff in the commit.
"""

import difflib

import pytest
from transcripts import CASES, path, run_case


@pytest.mark.parametrize("name", sorted(CASES))
def test_transcript_unchanged(name):
    want = path(name).read_text()
    got = run_case(name)
    if got != want:
        diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True), "checked-in", "now", n=2))
        pytest.fail(f"transcript {name} changed:\n{diff[:6000]}")


def test_every_example_has_a_transcript():
    """Each shipped example appears in at least one case, so a new example cannot slip past."""
    from transcripts import ROOT

    used = {a for args in CASES.values() for a in args if a.endswith(".toml")}
    shipped = {f"examples/{p.name}" for p in (ROOT / "examples").glob("*.toml")}
    assert shipped <= used, shipped - used
