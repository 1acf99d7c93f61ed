"""Docs that cannot go stale (issue 25): every command block of the README and of every page under docs/ is
executed and its output compared (issue 34: the README's topics moved to docs/, the same rules apply there).

The fenced blocks of each page (README.md, docs/**/*.md) are read as follows:

* a ```text block whose lines start with ``$ tpopt ...`` is a transcript: each command runs (in a fresh process,
  ``COLUMNS=1000`` so that nothing wraps, in a scratch folder where ``examples/`` is the repository's), and the
  lines after the last command must appear in its output, in order (the page may leave lines out between them
  and wrap them elsewhere: runs of whitespace, line ends included, count as one space; ``...`` stands for any
  text). A ``# comment`` after a command states
  figures: every number in it must appear in that command's output.
* a ```bash block with ``tpopt ...`` lines: each command must run and exit 0 (its comment's numbers, as above).
* a ```python block runs as a script (its asserts are the check).
* a block preceded by ``<!-- readme-test: output of: tpopt ... -->`` is that command's output (compared as above).
* a block preceded by ``<!-- readme-test: skip: REASON -->`` is not run; SKIPPED below lists the reasons, and
  the test fails when the skip markers of all pages and this list disagree.

Blocks without a ``tpopt`` command (formulas, the layout tree) are prose.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def pages() -> list[Path]:
    """The README and every Markdown page under docs/ (the MkDocs site's sources), in a fixed order."""
    return [README, *sorted((ROOT / "docs").rglob("*.md"))]

# what cannot run offline or in a test, and why (each matches at least one skip marker of a page)
SKIPPED = {
    "install": "creates a virtual environment and installs from the network (minutes)",
    "cluster": "needs a Dask cluster or a running scheduler (tcp://, a scheduler file)",
    "calibrate": "the user's own scenario and measured runs (my.toml, my-runs.csv)",
    "benchmarks": "benchmarks print timings of the machine and take minutes; they are not tests",
}

EXIT = re.compile(r"exit (\d+)")  # the comment of a command block line whose exit code is the point
MARK = re.compile(r"<!--\s*readme-test:\s*(skip|output of):\s*(.*?)\s*-->")


@dataclass
class Block:
    page: str  # the page's path relative to the repository root ("README.md", "docs/model.md")
    line: int  # 1-based line of the opening fence
    lang: str
    body: list[str]
    mark: tuple[str, str] | None = None
    commands: list[tuple[str, str]] = field(default_factory=list)  # (command, comment)


def blocks(page: Path | None = None) -> list[Block]:
    """The fenced blocks of one page, or of every page (README first) when none is given."""
    if page is None:
        return [b for p in pages() for b in blocks(p)]
    name = page.relative_to(ROOT).as_posix()
    lines = page.read_text().splitlines()
    out, i, mark = [], 0, None
    while i < len(lines):
        m = MARK.search(lines[i])
        if m:
            mark = (m.group(1), m.group(2))
        fence = lines[i].lstrip()
        if fence.startswith("```"):  # a bare fence opens a block too (lang ""), so none escapes the checks
            indent = len(lines[i]) - len(fence)  # a block inside a list item is indented: its body too
            start, lang, body = i + 1, fence[3:].strip(), []
            i += 1
            while not lines[i].lstrip().startswith("```"):
                body.append(lines[i][indent:] if not lines[i][:indent].strip() else lines[i])
                i += 1
            out.append(Block(name, start, lang, body, mark))
            mark = None
        elif lines[i].strip() and not m:
            mark = None  # a marker applies to the block right after it
        i += 1
    return out


def _split_comment(text: str) -> tuple[str, str]:
    cmd, _, comment = text.partition(" #")
    return cmd.strip(), comment.strip()


def commands_of(b: Block) -> list[tuple[str, str]]:
    if b.lang == "text":
        return [_split_comment(ln[2:]) for ln in b.body if ln.startswith("$ tpopt ")]
    if b.lang == "bash":
        joined, cur = [], ""
        for ln in b.body:
            cur += ln.rstrip("\\").rstrip() + " " if ln.rstrip().endswith("\\") else ln
            if not ln.rstrip().endswith("\\"):
                joined.append(cur)
                cur = ""
        return [_split_comment(ln) for ln in joined if ln.strip().startswith("tpopt ")]
    return []


def is_command_block(b: Block) -> bool:
    return bool(commands_of(b)) or b.lang == "python" or (b.mark is not None) or \
        any(".venv/bin/tpopt" in ln or ".venv/bin/python benchmarks/" in ln for ln in b.body)


_CACHE: dict[str, subprocess.CompletedProcess] = {}


def run(command: str, cwd: Path) -> subprocess.CompletedProcess:
    if command in _CACHE:
        return _CACHE[command]
    env = {k: v for k, v in os.environ.items() if k not in ("LINES",)}
    env.update(COLUMNS="1000", PYTHONHASHSEED="0")
    args = shlex.split(command)
    assert args[0] == "tpopt"
    p = subprocess.run([sys.executable, "-m", "tpopt", *args[1:]], cwd=cwd, env=env, capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, timeout=600)
    _CACHE[command] = p
    return p


def _norm(line: str) -> str:
    return " ".join(line.split())


def _pattern(line: str) -> re.Pattern[str]:
    return re.compile(r".*?".join(re.escape(_norm(p)) for p in line.split("...")))


def missing_lines(expected: list[str], output: str) -> list[str]:
    """A page's lines (in order) that the output does not hold, in that order. Both sides are compared as one
    text with every run of whitespace a single space, so a line the page wraps differently from the terminal
    still matches; ``...`` stands for any text."""
    actual, pos, missing = _norm(output), 0, []
    for line in expected:
        if not line.strip() or line.strip() == "...":
            continue
        m = _pattern(line).search(actual, pos)
        if m is None:
            missing.append(line)
        else:
            pos = m.end()
    return missing


NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


def missing_numbers(comment: str, output: str) -> list[str]:
    text = output.replace("\u202f", " ")
    return [n for n in NUMBER.findall(comment) if n not in text]


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    d = tmp_path_factory.mktemp("readme")
    (d / "examples").symlink_to(ROOT / "examples")
    return d


def _cases():
    return [pytest.param(b, id=f"{b.page}:line-{b.line}") for b in blocks() if is_command_block(b)]


def test_every_fence_opens_or_closes_a_block():
    """Each page's fences, indented ones inside a list item included, pair into the blocks this test reads: an
    output excerpt indented under a bullet (docs/catalogs.md's footing lines) escaped every check before."""
    for page in pages():
        fences = sum(ln.lstrip().startswith("```") for ln in page.read_text().splitlines())
        assert fences == 2 * len(blocks(page)), page


def test_every_skip_marker_is_listed_with_a_reason():
    marked = {b.mark[1] for b in blocks() if b.mark and b.mark[0] == "skip"}
    assert marked == set(SKIPPED), (marked, set(SKIPPED))


def test_every_command_block_is_run_or_skipped():
    for b in blocks():
        mentions = any(re.search(r"(^|\s|/)tpopt\s", ln) and not ln.lstrip().startswith("import")
                       for ln in b.body) and b.lang in ("bash", "text", "sh", "")
        if mentions and b.lang != "python":
            assert commands_of(b) or b.mark, f"{b.page} line {b.line}: a command block the test neither runs nor skips"


@pytest.mark.parametrize("block", _cases())
def test_readme_block(block: Block, scratch: Path):
    if block.mark and block.mark[0] == "skip":
        pytest.skip(f"{block.page} line {block.line}: {SKIPPED[block.mark[1]]}")
    if block.lang == "python":
        p = subprocess.run([sys.executable, "-c", "\n".join(block.body)], cwd=scratch, capture_output=True, text=True,
                           env=dict(os.environ, PYTHONHASHSEED="0"), timeout=600)
        assert p.returncode == 0, f"{block.page} line {block.line}: the Python example fails:\n{p.stderr[-2000:]}"
        return
    if block.mark and block.mark[0] == "output of":
        p = run(block.mark[1], scratch)
        assert "Traceback" not in p.stderr, p.stderr[-2000:]
        miss = missing_lines(block.body, p.stdout)
        assert not miss, f"{block.page} line {block.line}: not in the output of {block.mark[1]!r}: {miss}"
        return
    cmds = commands_of(block)
    for cmd, comment in cmds:
        p = run(cmd, scratch)
        assert "Traceback" not in p.stderr, f"{cmd}: {p.stderr[-2000:]}"
        refusal = EXIT.fullmatch(comment)  # "$ tpopt ... # exit 2": a documented refusal, its line on stderr
        if refusal:
            where = f"{block.page} line {block.line}"
            assert p.returncode == int(refusal.group(1)), f"{where}: {cmd!r} exits {p.returncode}"
        elif block.lang == "bash":
            assert p.returncode == 0, f"{block.page} line {block.line}: {cmd!r} exits {p.returncode}: {p.stderr[-500:]}"
        else:
            assert p.returncode in (0, 3), f"{block.page} line {block.line}: {cmd!r} exits {p.returncode}: {p.stderr}"
        if comment and not refusal:
            miss = missing_numbers(comment, p.stdout + p.stderr)
            assert not miss, f"{block.page} line {block.line}: {cmd!r} # {comment}: not in its output: {miss}"
    if block.lang == "text":
        last = max(i for i, ln in enumerate(block.body) if ln.startswith("$ tpopt "))
        shown = run(cmds[-1][0], scratch)
        text = shown.stdout + (shown.stderr if EXIT.fullmatch(cmds[-1][1]) else "")
        miss = missing_lines(block.body[last + 1:], text)
        assert not miss, f"{block.page} line {block.line}: not in the output of {cmds[-1][0]!r}: {miss}"


OUTPUT_HEADS = ("Plan:", "Footing", "Scenario:", "Model:", "Status:", "Verdict:", "tpopt solve:", "tpopt explain:",
                "Fastest layout", "Memory per card", "Binding", "Calibrated", "tpopt sweep:", "tpopt simulate:")
"""Line starts that only tpopt's own output has: a block holding one is a transcript or an output excerpt."""


def test_no_output_block_goes_unchecked():
    """A block that shows tpopt's output (a line starting as only its reports do) is run: a transcript with its
    ``$ tpopt`` command, or marked ``<!-- readme-test: output of: tpopt ... -->`` (issue 37: an output block that
    no test ran went stale)."""
    for b in blocks():
        shows_output = any(ln.lstrip().startswith(OUTPUT_HEADS) for ln in b.body)
        if shows_output and b.lang != "python":
            assert is_command_block(b), f"{b.page} line {b.line}: tpopt output that no test compares"
