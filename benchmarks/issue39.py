"""The commands of the performance issue 39, each in fresh processes, side by side with earlier revisions.

- ``--confidence 95%`` against the plain solve on the examples (the design case, the Llama-3-8B confidence
  example and its twin without a confidence, the widest GPT-3 space): the issue asks for at most 1.3x;
- the shipped DeepSeek-V3 example (its solve, analysis and fitted alternative);
- Llama-3.1-405B on 2T tokens over four cards with 1,800 s synchronous saves (benchmarks/explain_timing.py's
  case) on up to 100,000 cards in 90 days and its infeasible twin (3 days), and on up to 4,096 cards in 20 days
  (infeasible): its solve and its explain.

Each command runs in a fresh interpreter per revision, the revisions alternating (benchmarks/machine.py), best of
``--repeat``; the load is printed before and after. Not a test: figures depend on the machine and its load. Run:

    .venv/bin/python benchmarks/issue39.py [--against main] [--against 365077b] [--repeat 3] [--only NAME]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import ROOT, best_of, load_line, revision, row  # noqa: E402

LLAMA_405B = """[scenario]
name = "{name}"
[model]
name = "llama3-405b"
[task]
tokens = "2T"
seq_len = 8192
global_batch = 2048
[schedule]
deadline = "{deadline}"
[hardware]
accelerator = ["h100-sxm", "a100-80gb-sxm", "h200", "b200"]
[checkpoint]
save_interval = "1800s"
mode = "sync"
[search]
max_cards = {cards}
"""


def cases(folder: Path) -> list[tuple[str, list[str]]]:
    """(label, tpopt arguments) of every measured command."""
    ex = ROOT / "examples"
    plain8b = folder / "llama3-8b-plain.toml"
    plain8b.write_text("".join(ln for ln in (ex / "llama3-8b-confidence.toml").read_text(encoding="utf-8")
                               .splitlines(keepends=True) if not ln.startswith("confidence")), encoding="utf-8")
    big = {}
    for name, deadline, cards in (("405b-100k", "90d", 100000), ("405b-100k-infeasible", "3d", 100000),
                                  ("405b-4096-infeasible", "20d", 4096)):
        big[name] = folder / f"{name}.toml"
        big[name].write_text(LLAMA_405B.format(name=name, deadline=deadline, cards=cards), encoding="utf-8")
    conf = ["--confidence", "95%"]
    return [
        ("design case", ["solve", "--scenario", str(ex / "design-case.toml")]),
        ("design case 95 %", ["solve", "--scenario", str(ex / "design-case.toml"), *conf]),
        ("llama3-8b plain", ["solve", "--scenario", str(plain8b)]),
        ("llama3-8b 95 %", ["solve", "--scenario", str(ex / "llama3-8b-confidence.toml")]),
        ("gpt3 widest", ["solve", "--scenario", str(ex / "gpt3-175b-widest.toml")]),
        ("gpt3 widest 95 %", ["solve", "--scenario", str(ex / "gpt3-175b-widest.toml"), *conf]),
        ("deepseek-v3", ["solve", "--scenario", str(ex / "deepseek-v3.toml")]),
        ("405b 100k", ["solve", "--scenario", str(big["405b-100k"])]),
        ("405b 100k infeasible", ["solve", "--scenario", str(big["405b-100k-infeasible"])]),
        ("405b 4096 infeasible", ["solve", "--scenario", str(big["405b-4096-infeasible"])]),
        ("405b 4096 explain", ["explain", "--scenario", str(big["405b-4096-infeasible"])]),
    ]


@contextlib.contextmanager
def side_by_side(description: str, argv: list[str] | None) -> Iterator[tuple[argparse.Namespace, Path,
                                                                              dict[str, str | None]]]:
    """The options ``--against`` (repeatable), ``--repeat`` and ``--only`` parsed, the load printed, and (the
    options, a scratch folder, revision label -> its PYTHONPATH entry: this checkout's None) while the command
    runs; the revisions' worktrees and the folder are removed afterwards."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--against", action="append", default=[], help="an earlier revision (repeatable)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", action="append", default=[], help="only the cases whose label contains this")
    ns = ap.parse_args(argv)
    print(load_line(), "(before)")
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        paths: dict[str, str | None] = {"this checkout": None}
        for rev in ns.against:
            paths[rev] = stack.enter_context(revision(rev))
        yield ns, Path(tmp), paths


def main(argv: list[str] | None = None) -> int:
    with side_by_side(__doc__.splitlines()[0], argv) as (ns, tmp, paths):
        for label, args in cases(tmp):
            if ns.only and not any(o in label for o in ns.only):
                continue
            print(f"{label}: tpopt {' '.join(a if '/' not in a else Path(a).name for a in args)}", flush=True)
            for rev, runs in best_of(args, ns.repeat, paths).items():
                print("  " + row(rev, runs), flush=True)
            print("  " + load_line(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
