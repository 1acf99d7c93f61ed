"""Issue 37, items 6 and 7: the live progress line on stderr and the ``--html`` report.

Progress: the optimizer reports through the run's clock (optimizer/progress.py); the command line draws one line
in place on a terminal only (cli/progress_line.py), never with --json, --quiet or TPOPT_QUIET, and stdout is the
same bytes either way. HTML: one self-contained page from the --json report, deterministic, no external URL;
rendered in headless Chromium where it is installed (in CI it must be: CI=true turns the skip into a failure).
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_market import SIX, catalog_with, raw_scenario

from tpopt.catalogs.scenario import build_scenario, load_scenario
from tpopt.cli.html_report import distribution_svg, sweep_page
from tpopt.cli.main import cli
from tpopt.cli.progress_line import LiveLine, live_progress, wanted
from tpopt.optimizer import limits
from tpopt.optimizer import plan as P
from tpopt.optimizer.progress import Tick
from tpopt.optimizer.result import Request

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
WIDEST = str(EXAMPLES / "gpt3-175b-widest.toml")  # a layout-group (on-demand) solve of a few seconds


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


class Recorder:
    def __init__(self) -> None:
        self.ticks: list[Tick] = []

    def __call__(self, tick: Tick) -> None:
        self.ticks.append(tick)


# ---------------------------------------------------------------------------------------------
# the reporter: what the loops tell


def test_layout_group_solve_reports_groups_best_and_bound():
    sc = load_scenario(WIDEST)
    rec = Recorder()
    clock = limits.Clock(120.0)
    clock.progress = rec
    pr = P.plan(sc, "highs", Request(time_limit=120.0, clock=clock), analyse=False)
    groups = [t for t in rec.ticks if t.phase == "solving the layout groups"]
    assert groups, [t.phase for t in rec.ticks]
    assert [t.done for t in groups] == list(range(1, len(groups) + 1))  # one report per group, counted
    assert all(t.total == groups[0].total and t.total >= len(groups) for t in groups)
    best = [t.best for t in groups if t.best is not None]
    assert best and all(a >= b for a, b in zip(best, best[1:], strict=False))  # the best only improves
    # the last best reported is the optimum's cost, and no bound exceeds it once it is proven
    assert best[-1] == pytest.approx(pr.best.metrics["cost"], rel=1e-12)
    assert all(t.bound is None or t.bound <= t.best * (1 + 1e-9) or t.done == groups[-1].done for t in groups
               if t.best is not None)


def test_market_solve_counts_the_offers(tmp_path):
    cat = catalog_with(tmp_path, SIX)
    ids = ["h100-od", "h100-1y", "h100-spot", "h200-od", "h200-1y", "h200-spot"]
    sc = build_scenario(raw_scenario(ids), cat)
    rec = Recorder()
    clock = limits.Clock(60.0)
    clock.progress = rec
    pr = P.plan(sc, "enumerate", Request(time_limit=60.0, clock=clock), analyse=False)
    offers = [t for t in rec.ticks if t.phase == "solving the offers"]
    assert [(t.done, t.total) for t in offers][:6] == [(i, 6) for i in range(6)]
    assert offers[0].best is None and offers[5].best is not None
    assert offers[5].best >= pr.best.metrics["cost"] * (1 - 1e-12)  # best so far: never below the optimum


# ---------------------------------------------------------------------------------------------
# the terminal line


def test_live_line_draws_after_a_second_nests_phases_and_erases_itself():
    times = iter([0.0, 0.5, 1.2, 1.3, 2.0, 2.1])
    tty = Tty()
    line = LiveLine("tpopt solve", tty, True, now=lambda: next(times), width=200)
    line(Tick("solving the offers", 0, 3))  # 0.5 s: too early, nothing drawn
    assert tty.getvalue() == ""
    line(Tick("solving the layout groups", 4, 12, best=23518.4, bound=22004.0))  # 1.2 s: drawn
    drawn = tty.getvalue().split("\r\x1b[K")[-1]
    assert drawn == ("tpopt solve: solving the offers 0/3 > solving the layout groups 4/12 | best cost 23,518 | "
                     "bound cost 22,004 | 1 s")
    line(Tick("solving the layout groups", 5, 12))  # 1.3 s: within 0.25 s of the last draw, not redrawn
    assert tty.getvalue().count("\r\x1b[K") == 1
    line(Tick("solving the offers", 1, 3, best=9e9, objective="time"))  # 2.0 s: the inner phase ended
    last = tty.getvalue().split("\r\x1b[K")[-1]
    assert last == "tpopt solve: solving the offers 1/3 | best finish 104,166.67 d | 2 s"  # 9e9 s / 86,400
    line.close()
    assert tty.getvalue().endswith("\r\x1b[K")


def test_line_is_off_without_a_terminal_with_quiet_and_with_the_environment(monkeypatch):
    monkeypatch.delenv("TPOPT_QUIET", raising=False)
    assert wanted(Tty()) and not wanted(io.StringIO()) and not wanted(Tty(), quiet=True)
    monkeypatch.setenv("TPOPT_QUIET", "1")
    assert not wanted(Tty())
    monkeypatch.setenv("TPOPT_QUIET", "0")
    assert wanted(Tty())
    clock = limits.Clock(None)
    with live_progress("t", clock, quiet=True, stream=Tty()) as line:
        assert clock.progress is line and not line.enabled


def _pty_run(args: list[str], env: dict[str, str]) -> tuple[int, bytes, bytes]:
    """The command with stderr on a pseudo-terminal (stdout a pipe): (exit code, stdout, stderr)."""
    import pty
    master, slave = pty.openpty()
    p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave, env=env)
    os.close(slave)
    err = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        err += chunk
    out = p.stdout.read() if p.stdout else b""
    p.wait()
    os.close(master)
    return p.returncode, out, err


@pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX")
def test_on_a_terminal_the_line_shows_and_stdout_is_unchanged(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("TPOPT_QUIET", "COLUMNS")}
    env["TPOPT_PROGRESS_DELAY"] = "0"  # the line from the first tick: the test does not hang on the machine's speed
    cmd = [sys.executable, "-m", "tpopt", "solve", "--scenario", WIDEST]
    code, out_tty, err = _pty_run(cmd, env)
    assert code == 0
    assert b"tpopt solve: " in err and b"solving the layout groups" in err and b"best cost" in err
    assert err.endswith(b"\r\x1b[K")  # erased before the answer
    plain = subprocess.run(cmd, capture_output=True, env=env, check=True)
    assert plain.stderr == b""  # not a terminal: no byte of progress
    assert out_tty == plain.stdout  # and the answer's bytes are the same
    code, out_q, err_q = _pty_run(cmd + ["--quiet"], env)
    assert code == 0 and b"solving" not in err_q and out_q == plain.stdout
    code, out_j, err_j = _pty_run(cmd + ["--json"], env)
    assert code == 0 and b"solving" not in err_j and json.loads(out_j)["status"] == "optimal"


# ---------------------------------------------------------------------------------------------
# the page


def _page(tmp_path: Path, name: str, *argv: str) -> tuple[str, str]:
    path = tmp_path / name
    r = CliRunner().invoke(cli, [*argv, "--html", str(path)])
    assert r.exit_code in (0, 3), r.output
    return path.read_text(), r.output


def test_solve_page_holds_the_json_figures_and_no_external_reference(tmp_path):
    args = ("solve", "--deadline", "30d", "--hw", "rtx4090", "--confidence", "90%")
    page, _ = _page(tmp_path, "a.html", *args)
    d = json.loads(CliRunner().invoke(cli, [*args, "--json"]).output)
    m, p = d["metrics"], d["plan"]
    assert f"{m['cost']:,.0f}" in page and f"{m['finish_days']:,.1f}" in page
    assert f"{p['accelerator']} x {p['cards']}" in page
    assert f"--global-batch-size {p['global_batch']}" in page and f"--train-iters {m['iterations']}" in page
    for q in ("p50", "p90", "p99"):  # the distribution's reported quantiles, as points of the curve
        assert f"{d['finish_distribution']['finish_days'][q]:.2f} d</title>" in page
    assert "deadline.finish" in page and "Footing" in page
    assert not re.search(r"(src|href)\s*=|https?://(?!www\.w3\.org/2000/svg)|@import|url\(", page)
    again, _ = _page(tmp_path, "b.html", *args)
    assert again == page  # deterministic bytes


def test_page_refuses_to_overwrite_unless_forced(tmp_path):
    path = tmp_path / "x.html"
    path.write_text("keep")
    r = CliRunner().invoke(cli, ["solve", "--deadline", "30d", "--hw", "rtx4090", "--html", str(path)])
    assert r.exit_code == 2 and "pass --force" in r.output and path.read_text() == "keep"
    r = CliRunner().invoke(cli, ["solve", "--deadline", "30d", "--hw", "rtx4090", "--html", str(path), "--force"])
    assert r.exit_code == 0 and path.read_text().startswith("<!DOCTYPE html>")


def test_explain_pages_for_a_plan_and_an_infeasible_request(tmp_path):
    page, _ = _page(tmp_path, "p.html", "explain", "--cards", "48")
    assert "17,880" in page and "Megatron-LM arguments" in page and 'class="bind"' in page
    page, _ = _page(tmp_path, "i.html", "explain", "--max-cards", "32")
    assert "status infeasible" in page and "Conflict" in page


def test_sweep_page_draws_the_front_with_a_tooltip_per_point():
    d = {"scenario": "s", "points": 4, "statuses": {"optimal": 4},
         "front": [{"accelerator": "h100-sxm", "cards": 8, "tp": 1, "pp": 1, "dp": 8, "zero": 3, "cost": 14515.6,
                    "cost_unit": "USD", "finish_days": 24.63, "deadline_min_days": 25, "deadline_max_days": 60},
                   {"accelerator": "rtx4090", "cards": 48, "tp": 1, "pp": 1, "dp": 48, "zero": 3, "cost": 17880.3,
                    "cost_unit": "USD", "finish_days": 20.1, "deadline_min_days": 21, "deadline_max_days": 24}],
         "summary": [{"accelerator": "rtx4090", "points": 2, "cheapest": {"cards": 32, "cost": 16610.8,
                                                                          "finish_days": 34.3}}]}
    page = sweep_page(d, ["a note"], "text, 0.70 s on 2 local worker processes")
    assert page.count('<circle class="front"') == 2 and page.count('<circle class="other"') == 1
    assert "<title>h100-sxm x 8: cost 14,516 USD, finish 24.63 d" in page
    assert 'data-row="front-1"' in page and 'id="front-1"' in page and "a note" in page
    assert "0.70 s" not in page  # the wall time is no part of a fixed page


def test_distribution_curve_passes_through_the_reported_quantiles():
    e = {"finish_days": {"p50": 20.0, "p90": 24.0, "p99": 28.0}, "probability_by_deadline": 0.97}
    svg = distribution_svg(e, 26.0)
    # the lognormal through P50 and P90: its CDF is 0.5 at P50, drawn at the P50 point's height
    pts = [tuple(map(float, xy.split(","))) for xy in re.search(r'points="([^"]+)"', svg).group(1).split()]
    circle = [tuple(map(float, c)) for c in re.findall(r'cx="([0-9.]+)" cy="([0-9.]+)"', svg)]
    x50, y50 = circle[0]
    near = min(pts, key=lambda p: abs(p[0] - x50))
    assert abs(near[1] - y50) < 2.5  # within a pixel or two of the P50 mark
    assert "P(on time) 97.0 %" in svg


# ---------------------------------------------------------------------------------------------
# headless Chromium: what the page shows


def _chromium() -> str | None:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None and os.environ.get("CI") == "true":
        pytest.fail("chromium is not installed; CI installs it with .ci/browser")
    return found


def _page_requests(netlog: Path) -> list[str]:
    """The URLs the page itself asked for beyond file:// (Chromium's net log: requests started from a file://
    document; the browser's own background requests carry another network isolation key)."""
    d = json.loads(netlog.read_text())
    start = d["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    return [e["params"]["url"] for e in d["events"] if e["type"] == start
            and str(e["params"].get("network_isolation_key", "")).startswith("file://")
            and not e["params"]["url"].startswith("file://")]


def _browse(browser: str, tmp_path: Path, page: Path, *extra: str) -> tuple[str, list[str]]:
    """(the rendered DOM or nothing, the page's own requests beyond file://) of ``page`` in headless Chromium."""
    netlog = tmp_path / f"{page.stem}-net.json"
    flags = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}", f"--log-net-log={netlog}", *extra]
    out = subprocess.run([*flags, page.as_uri()], capture_output=True, text=True, timeout=180, check=True).stdout
    return out, _page_requests(netlog)


def test_page_renders_in_headless_chromium_with_the_figures_and_no_network(tmp_path):
    browser = _chromium()
    if browser is None:
        pytest.skip("chromium is not installed (.ci/browser installs it)")
    args = ("solve", "--deadline", "30d", "--hw", "rtx4090", "--confidence", "90%")
    _page(tmp_path, "r.html", *args)
    d = json.loads(CliRunner().invoke(cli, [*args, "--json"]).output)
    dom, asked = _browse(browser, tmp_path, tmp_path / "r.html", "--dump-dom")
    text = re.sub(r"<[^>]+>", " ", dom)
    assert f"{d['metrics']['cost']:,.0f}" in text and "rtx4090 x 48" in text and "TP 1 / PP 1 / DP 48" in text
    assert 'id="fig-cost"' in dom and "finish-svg" in dom and "<circle" in dom  # the cards and the distribution
    assert asked == []  # no request left the page
    shot = tmp_path / "shot.png"
    _browse(browser, tmp_path, tmp_path / "r.html", f"--screenshot={shot}", "--window-size=1100,1600")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    # the check can fail: a page with one external image is caught
    control = tmp_path / "control.html"
    control.write_text('<!DOCTYPE html><p>x</p><img src="http://example.invalid/a.png">')
    _, asked = _browse(browser, tmp_path, control, "--dump-dom")
    assert asked == ["http://example.invalid/a.png"]


def test_sweep_html_repeats_the_notes_and_draws_the_front(tmp_path):
    # the breakdown's notes ("no valid plan with exactly 32 cards") are said on stderr and repeated on the page
    page = tmp_path / "s.html"
    r = CliRunner().invoke(cli, ["sweep", "--scenario", str(EXAMPLES / "design-case-sweep.toml"), "--hw",
                                 "rtx4090,h100-sxm", "--deadline", "20d:40d:10d", "--plot-breakdown",
                                 str(tmp_path / "b.svg"), "--breakdown-cards", "32,48", "--html", str(page)])
    assert r.exit_code == 0, r.output
    text = page.read_text()
    assert "h100-sxm x 32: no valid plan with exactly 32 cards" in r.stderr
    assert "h100-sxm x 32: no valid plan with exactly 32 cards" in text
    d = json.loads(CliRunner().invoke(cli, ["sweep", "--scenario", str(EXAMPLES / "design-case-sweep.toml"), "--hw",
                                            "rtx4090,h100-sxm", "--deadline", "20d:40d:10d", "--json"]).output)
    assert text.count('<circle class="front"') == len(d["front"]) >= 1
    assert f"{min(r['cost'] for r in d['front']):,.0f}" in text
