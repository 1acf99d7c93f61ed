"""``--confidence 95%`` against the plain command on every shipped example, in fresh processes.

Issue 39 asks for ``--confidence`` within 1.3x of the plain solve on every example. For each file of
``examples/`` it runs the example's own command (``tpopt solve``, ``tpopt sweep``, ``tpopt sites``) plain and at
95 %: with ``--confidence 95%`` where the command has the flag, else with ``confidence = "95%"`` written into the
scenario's ``[schedule]``; an example that already sets a confidence (llama3-8b-confidence.toml) is compared
against a copy without that line. ``tpopt rl`` models no finish-time distribution and refuses a confidence: it is
listed, not timed. Also the issue's 405B question (up to 100,000 cards, 90 d), which is not an example. Each
command runs in a fresh interpreter (benchmarks/machine.py: CPU s = user + system of the child), plain and 95 %
alternating (and the revisions of ``--against`` with them), best of ``--repeat``; the load is printed beside each
row. Not a test: figures depend on the machine and its load. Run:

    .venv/bin/python benchmarks/confidence_examples.py [--against main] [--repeat 3] [--only NAME]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from issue39 import LLAMA_405B, side_by_side  # noqa: E402
from machine import ROOT, Run, load_line, run_fresh  # noqa: E402

CONF = 'confidence = "95%"\n'


def with_confidence(text: str) -> str:
    """The scenario text with ``confidence = "95%"`` first in its ``[schedule]`` table (a table added if none)."""
    if "\n[schedule]\n" in text:
        return text.replace("\n[schedule]\n", "\n[schedule]\n" + CONF, 1)
    return text + "\n[schedule]\n" + CONF


def without_confidence(text: str) -> str:
    """The scenario text without its ``confidence = ...`` line."""
    return "".join(ln for ln in text.splitlines(keepends=True) if not ln.startswith("confidence"))


def cases(folder: Path) -> list[tuple[str, list[str], list[str]]]:
    """(label, plain arguments, 95 % arguments) of every example (and the 405B question)."""
    ex = ROOT / "examples"

    def write(name: str, text: str) -> str:
        path = folder / name
        path.write_text(text, encoding="utf-8")
        return str(path)

    conf = ["--confidence", "95%"]
    out: list[tuple[str, list[str], list[str]]] = []
    for path in sorted(ex.glob("*.toml")):
        text = path.read_text(encoding="utf-8")
        name = path.stem
        if name.startswith("rl-"):
            continue  # tpopt rl refuses a confidence (no finish-time distribution for RL plans)
        if name.startswith("sites-"):
            out.append((name, ["sites", "--scenario", str(path)],
                        ["sites", "--scenario", write(name + "-95.toml", with_confidence(text))]))
        elif name.endswith("-sweep"):
            out.append((name, ["sweep", "--scenario", str(path)],
                        ["sweep", "--scenario", write(name + "-95.toml", with_confidence(text))]))
        elif any(ln.startswith("confidence") for ln in text.splitlines()):
            out.append((name, ["solve", "--scenario", write(name + "-plain.toml", without_confidence(text))],
                        ["solve", "--scenario", str(path)]))
        else:
            out.append((name, ["solve", "--scenario", str(path)], ["solve", "--scenario", str(path), *conf]))
    big = write("405b-100k.toml", LLAMA_405B.format(name="405b-100k", deadline="90d", cards=100000))
    out.append(("405b 100k (not an example)", ["solve", "--scenario", big], ["solve", "--scenario", big, *conf]))
    return out


def main(argv: list[str] | None = None) -> int:
    with side_by_side(__doc__.splitlines()[0], argv) as (ns, tmp, paths):
        for label, plain, conf in cases(tmp):
            if ns.only and not any(o in label for o in ns.only):
                continue
            print(f"{label}: tpopt {plain[0]}", flush=True)
            runs: dict[tuple[str, str], list[Run]] = {(rev, kind): [] for rev in paths for kind in ("plain", "95 %")}
            for _ in range(ns.repeat):  # plain and 95 % (and the revisions) alternating
                for rev, path in paths.items():
                    for kind, args in (("plain", plain), ("95 %", conf)):
                        runs[rev, kind].append(run_fresh(args, path))
            for rev in paths:
                best = {kind: min(r.cpu for r in runs[rev, kind]) for kind in ("plain", "95 %")}
                codes = {kind: ",".join(str(c) for c in sorted({r.code for r in runs[rev, kind]}))
                         for kind in best}
                print(f"  {rev:<14} plain {best['plain']:6.2f} s (exit {codes['plain']})  95 % {best['95 %']:6.2f} s "
                      f"(exit {codes['95 %']})  ratio {best['95 %'] / best['plain']:.2f}x", flush=True)
            print("  " + load_line(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
