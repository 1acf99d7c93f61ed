"""The documentation site (issue 34): `mkdocs build --strict` over docs/ passes with no warning (MkDocs checks the
links between pages and their anchors, as mkdocs.yml's `validation` asks), every page is in the navigation, the
README's relative links resolve (to a file, and to a heading of it where an anchor is given), and neither
mkdocs.yml nor docs/ travels in the wheel's package list."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml
from markdown.extensions.toc import slugify

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

LINK = re.compile(r"\]\(([^)\s]+)\)")  # an inline Markdown link's target
HEADING = re.compile(r"^#{1,6} (.+?)\s*$")


def test_mkdocs_builds_strict_without_a_warning(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                        "-d", str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    log = p.stdout + p.stderr
    assert p.returncode == 0, log[-3000:]
    assert "WARNING" not in log, log[-3000:]
    assert (tmp_path / "site" / "index.html").is_file() and (tmp_path / "site" / "extending" / "index.html").is_file()


def test_mkdocs_strict_fails_on_a_broken_anchor(tmp_path: Path) -> None:
    """The build would see a broken link: a copy of docs/ with one bad anchor fails under --strict."""
    copy = tmp_path / "docs"
    copy.mkdir()
    for page in DOCS.rglob("*.md"):
        dest = copy / page.relative_to(DOCS)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(page.read_text())
    (copy / "index.md").write_text((copy / "index.md").read_text() + "\n[broken](model.md#no-such-heading)\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text((ROOT / "mkdocs.yml").read_text())
    p = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d",
                        str(tmp_path / "site")], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.returncode != 0 and "no-such-heading" in p.stdout + p.stderr


def _nav_pages(nav: object) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [p for item in nav for p in _nav_pages(item)]
    if isinstance(nav, dict):
        return [p for value in nav.values() for p in _nav_pages(value)]
    return []


def test_every_page_is_in_the_navigation() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    listed = _nav_pages(config["nav"])
    pages = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    assert sorted(listed) == pages
    for topic in ("model.md", "optimiser.md", "scenarios.md", "catalogs.md", "market.md", "moe.md", "rl.md",
                  "long-context.md", "confidence.md", "benchmarks.md", "extending.md"):
        assert topic in listed, topic


def _anchors(page: Path) -> set[str]:
    """The heading ids MkDocs gives a page (Python-Markdown's toc slugify), fenced blocks left out."""
    out, fence = set(), False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence and (m := HEADING.match(line)):
            out.add(slugify(m.group(1), "-"))
    return out


def test_readme_relative_links_resolve() -> None:
    readme = ROOT / "README.md"
    targets = [t for t in LINK.findall(readme.read_text()) if not re.match(r"[a-z]+:", t)]
    assert any(t.startswith("docs/") for t in targets)
    for target in targets:
        path, _, anchor = target.partition("#")
        page = readme if not path else ROOT / path
        assert page.exists(), f"README links to {target!r}: no such file"
        if anchor:
            assert anchor in _anchors(page), f"README links to {target!r}: no heading with that id"


def test_readme_links_every_topic_page() -> None:
    linked = {t.partition("#")[0] for t in LINK.findall((ROOT / "README.md").read_text())}
    for page in DOCS.rglob("*.md"):
        if page.name != "index.md":
            assert f"docs/{page.relative_to(DOCS).as_posix()}" in linked, page


def test_docs_stay_out_of_the_package() -> None:
    """setuptools lists its packages explicitly and ships only py.typed and the catalogs' TOML as data: the site's
    sources are no package and no package data (tests/test_packaging.py builds the wheel itself)."""
    text = (ROOT / "pyproject.toml").read_text()
    packages = re.search(r"^packages = \[(.*?)\]", text, flags=re.M | re.S)
    assert packages is not None
    assert "docs" not in packages.group(1) and "mkdocs" not in text.split("[tool.setuptools]", 1)[1]
    assert not (DOCS / "__init__.py").exists()


def _commands() -> list[tuple[str, object]]:
    """Every command of the command line (a group's subcommands too) as (its words, the click command)."""
    import click

    from tpopt.cli.main import cli

    out, todo = [], [("tpopt", cli)]
    while todo:
        words, cmd = todo.pop()
        if isinstance(cmd, click.Group):
            ctx = click.Context(cmd)
            todo += [(f"{words} {n}", cmd.get_command(ctx, n)) for n in cmd.list_commands(ctx)]
        else:
            out.append((words, cmd))
    return out


def test_every_option_of_every_command_is_documented() -> None:
    """A flag `tpopt CMD --help` lists is named on some page (README or docs/), so a new user can find it there:
    `--[no-]x` names both forms. Before, evaluate's --offload and --nics-per-host, sweep's --breakdown-cards and
    most of pipeline's, checkpoint's and stragglers' flags were in --help alone."""
    import click

    text = "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))])
    text = re.sub(r"--\[no-\]([a-z0-9-]+)", r"--\1 --no-\1", text)
    commands = _commands()
    assert len(commands) >= 17
    named = set(re.findall(r"--[a-z0-9][a-z0-9-]*", text)) | {"--help"}
    missing = [f"{words} {flag}" for words, cmd in commands for p in cmd.params if isinstance(p, click.Option)
               for flag in p.opts + p.secondary_opts if flag.startswith("--") and flag not in named]
    assert not missing, missing


def test_catalog_counts_on_the_catalogs_page_are_the_tools() -> None:
    """docs/catalogs.md's "Accelerators (N)" and "Models (N)" are what `tpopt catalog ... --json` lists (they said
    24 and 53 while the catalogs held 25 and 54: the 96 GB H100 and Llama 2 7B came in without the page)."""
    import json

    from click.testing import CliRunner

    from tpopt.cli.main import cli

    text = (DOCS / "catalogs.md").read_text()
    for subject, title in (("accelerators", "Accelerators"), ("models", "Models")):
        stated = re.search(rf"\*\*{title} \((\d+)\)\*\*", text)
        assert stated is not None, title
        listed = json.loads(CliRunner().invoke(cli, ["catalog", subject, "--json"]).output)
        assert int(stated.group(1)) == len(listed), (title, stated.group(1), len(listed))
