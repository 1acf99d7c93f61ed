"""Refit every card of catalogs/performance.toml on the shared tables of published runs, in place.

For each accelerator with runs of the stacks its calibration is for (``[acc.calibration] stacks``, else the
reference stacks Megatron-Core and Megatron-LM: benchmarks/validate_published.py ``calibration_stacks``;
torchtitan and MaxText rows never enter a card's fit, their kernels are a stack's efficiency) inside the
calibration envelope (dense runs at up to 8,192 tokens: validate_published ``in_envelope``), the fit of
validate_published (one free parameter per run up to the card's set, from the public measurement the
calibration started from, ``[acc.calibration] prior``) is redone and written back into the file: the fitted
fields, ``calibrated``, ``residual_sigma`` (the leave-one-out RMS of ln(predicted / published) over the card's
runs, at least finish.DEFAULT_STEP_SIGMA under finish.SIGMA_MIN_RUNS runs) with its source and stacks, the
fitted fields' sources, and ``[acc.calibration]`` runs / prior / stacks. Every other line, comments included,
stays as it is. Memory is a residual, not a gate: only a run whose plan is beyond the memory model's error is
left out (optimizer/calibrate.py check_memory), and said so.

    .venv/bin/python benchmarks/refit_catalog.py [--file catalogs/performance.toml] [--dry-run] [--data runs.csv ...]
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from validate_published import (  # noqa: E402
    DATA,
    calibration_stacks,
    fit_parameters,
    in_envelope,
    measured_prior,
)

from tpopt.catalogs import load_catalog  # noqa: E402
from tpopt.errors import InputError  # noqa: E402
from tpopt.models.finish import DEFAULT_STEP_SIGMA, SIGMA_MIN_RUNS, residual_sigma  # noqa: E402
from tpopt.optimizer import calibrate as C  # noqa: E402
from tpopt.optimizer.runs import runs_from_csv  # noqa: E402

KEY_LINE = re.compile(r"^\s*([A-Za-z0-9_\-]+)\s*=")
TIME_FIELDS = ("kernel_overhead", "collective_latency")
"""Fields performance.toml writes as a time with its unit ("12us")."""


def toml_value(v: object) -> str:
    """One TOML value on one line (C._toml_value, with times as "N us")."""
    return C._toml_value(v)


def _table_end(lines: list[str], start: int) -> int:
    """The index after the last line of the table whose header is ``lines[start]`` (the next header, or the end)."""
    return next((i for i in range(start + 1, len(lines)) if lines[i].lstrip().startswith("[")
                 and not KEY_LINE.match(lines[i])), len(lines))


def set_key(lines: list[str], section: str, key: str, value: str, after: str = "") -> list[str]:
    """``lines`` of a TOML file with ``key = value`` in the table ``[section]``: the key's line replaced where it is,
    else appended after the table's last line; a missing table is inserted after the table ``[after]`` (else at
    the end of the file). Only one-line values are edited (a multi-line value is an error: edit it by hand)."""
    header = f"[{section}]"
    try:
        start = next(i for i, ln in enumerate(lines) if ln.strip() == header)
    except StopIteration:
        at = next((i for i, ln in enumerate(lines) if after and ln.strip() == f"[{after}]"), None)
        if at is None:
            return lines + ["", header, f"{key} = {value}"]
        end = _table_end(lines, at)
        while end > at + 1 and not lines[end - 1].strip():
            end -= 1
        return lines[:end] + [header, f"{key} = {value}"] + lines[end:]
    end = _table_end(lines, start)
    for i in range(start + 1, end):
        m = KEY_LINE.match(lines[i])
        if m and m.group(1) == key:
            old = lines[i].split("=", 1)[1].strip()
            if old.startswith("[") and not old.rstrip().endswith("]"):
                raise InputError(f"[{section}] {key}: a value over several lines; edit it by hand")
            return lines[:i] + [f"{key} = {value}"] + lines[i + 1:]
    last = end
    while last > start + 1 and not lines[last - 1].strip():
        last -= 1
    return lines[:last] + [f"{key} = {value}"] + lines[last:]


def prior_text(source: str) -> str:
    """The part of a calibrated field's source that says where its prior came from ("prior 0.681 from ...")."""
    i = source.find("prior ")
    return source[i:] if i >= 0 else ""


def loo_sigma(fit_runs, acc: str, prior) -> float:
    """RMS of ln(predicted / published) over the runs, each predicted by a fit without it."""
    ratios = []
    for i, r in enumerate(fit_runs):
        rest = fit_runs[:i] + fit_runs[i + 1:]
        c = C.fit(rest, acc, fit_parameters(rest), prior=prior)
        ratios.append(float(C.predict(r, c.perf).step_s[0]) / r.measured_step_s)
        print(f"\r  {acc}: leave-one-out {i + 1}/{len(fit_runs)}", end="", flush=True, file=sys.stderr)
    print(file=sys.stderr)
    return residual_sigma(ratios)


def refit(text: str, runs, cat, log=print) -> str:
    """The performance.toml ``text`` with every card that has runs of its calibration's stacks refitted."""
    lines = text.splitlines()
    raw = tomllib.loads(text)
    for acc in dict.fromkeys(r.accelerator for r in runs):
        stacks = calibration_stacks(cat, acc)
        mine = [r for r in runs if r.accelerator == acc and r.scenario.stack.name in stacks and in_envelope(r)]
        prior = measured_prior(cat, acc)
        fit_runs = []
        for r in mine:
            try:
                C.check_memory(r, prior)
                fit_runs.append(r)
            except InputError as exc:
                log(f"{acc}: not fitted on {r.name}: {exc}")
        if len(fit_runs) < 2:
            log(f"{acc}: {len(fit_runs)} run(s) of {', '.join(stacks)}: not refitted")
            continue
        free = fit_parameters(fit_runs)
        cal = C.fit(fit_runs, acc, free, prior=prior)
        sigma = loo_sigma(fit_runs, acc, prior)
        value = sigma if len(fit_runs) >= SIGMA_MIN_RUNS else max(sigma, DEFAULT_STEP_SIGMA)
        used = list(dict.fromkeys(r.scenario.stack.name for r in fit_runs))
        names = ", ".join(r.name for r in fit_runs) if len(fit_runs) <= 12 else \
            f"listed in [{acc}.calibration] runs"
        tables = ", ".join(dict.fromkeys(r.table for r in fit_runs))
        entry = raw.get(acc, {})
        sources = entry.get("sources", {})
        log(f"{acc}: fitted on {len(fit_runs)} runs ({', '.join(used)}): "
            + ", ".join(f"{n} {getattr(prior, n):.4g} -> {getattr(cal.perf, n):.4g}" for n in cal.fitted)
            + f"; residual_sigma {value:.3f}")
        for est in cal.estimates:
            if not est.exercised:
                continue
            v = getattr(cal.perf, est.name)
            lines = set_key(lines, acc, est.name, f'"{v * 1e6:.4g}us"' if est.name in TIME_FIELDS else
                            toml_value(round(float(v), 4)))
            src = (f"calibrated: benchmarks/refit_catalog.py on the {len(fit_runs)} runs of {', '.join(used)} in "
                   f"{tables} ({names}), {len(cal.fitted)} free parameter(s) (+-{est.sigma * 100:.1f} %)")
            old = prior_text(str(sources.get(est.name, "")))
            lines = set_key(lines, f"{acc}.sources", est.name, toml_value(src + (f"; {old}" if old else "")))
        lines = set_key(lines, acc, "calibrated", toml_value(list(cal.fitted)))
        lines = set_key(lines, acc, "residual_sigma", toml_value(round(value, 3)))
        why = "" if len(fit_runs) >= SIGMA_MIN_RUNS else \
            f"; under {SIGMA_MIN_RUNS} runs, at least the default {DEFAULT_STEP_SIGMA:.3f}"
        lines = set_key(lines, acc, "residual_sigma_source", toml_value(
            f"leave-one-out RMS log error of benchmarks/refit_catalog.py over the {len(fit_runs)} {acc} runs of "
            f"{', '.join(used)} in {tables} ({sigma:.3f}{why})"))
        lines = set_key(lines, acc, "residual_sigma_stacks", toml_value(used))
        lines = set_key(lines, f"{acc}.calibration", "runs", toml_value([r.name for r in fit_runs]),
                        after=f"{acc}.sources")
        started = [C.prior_value(n, float(getattr(prior, n))) for n in cal.fitted]  # durations with their unit
        lines = set_key(lines, f"{acc}.calibration", "prior", toml_value(started))
        lines = set_key(lines, f"{acc}.calibration", "stacks", toml_value(list(stacks)))
    out = "\n".join(lines) + "\n"
    tomllib.loads(out)  # still TOML
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--file", default=str(ROOT / "catalogs" / "performance.toml"), help="performance.toml to rewrite")
    ap.add_argument("--data", nargs="+", default=[str(p) for p in DATA], help="CSV files of measured runs")
    ap.add_argument("--dry-run", action="store_true", help="print the change, write nothing")
    args = ap.parse_args(argv)
    path = Path(args.file)
    try:
        cat = load_catalog()
        runs = [r for p in args.data for r in runs_from_csv(p, cat)]
        text = path.read_text()
        new = refit(text, runs, cat)
    except (InputError, OSError, tomllib.TOMLDecodeError) as exc:
        print(f"refit_catalog: error: {exc}", file=sys.stderr)
        return 2
    if args.dry_run:
        sys.stdout.writelines(difflib.unified_diff(text.splitlines(True), new.splitlines(True), str(path), str(path)))
        return 0
    path.write_text(new)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
