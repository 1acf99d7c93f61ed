"""Validation: tpopt's per-operation step-time and memory model against published training runs.

Reads every table of measured runs under benchmarks/data/ (the four shared tables: Narayanan et al. 2021
Table 1, Korthikanti et al. 2022, NVIDIA Megatron-Bridge's modern performance summary, and the published runs
2024-2026 of Megatron-Bridge, NeMo, torchtitan and MaxText) or any CSV files of the same columns (``--data FILE
...``; the columns are described in tpopt/optimizer/runs.py), fixes ONE calibration per accelerator on the rows
named by ``--fit-on`` (all by default) whose stack the card's calibration is for (``[acc.calibration] stacks``,
else Megatron-Core and Megatron-LM: :data:`REFERENCE_STACKS`; other stacks' runs are predicted, never fitted into a
card; an accelerator without such a run keeps the catalog's parameters), and prints per run the predicted against
the published iteration time with the error, the leave-one-out error (the run predicted by a calibration fitted
without it), the leave-one-source-out error (every fit without the run's publishing source, :func:`run_source`:
an accelerator no other source has keeps the public measurements its catalog entry started from,
``[acc.calibration] prior``) and the error of the shipped performance catalog; the predicted per-GPU memory peak
(allocated, as the stack's allocator reserves it) against the usable memory, and the peak rank's stage with its
own allocated and reserved peaks; per table its figures (the full / selective recompute ratio of Korthikanti,
the percent of peak of Narayanan, per-GPU memory against published figures); then the median, maximum and signed
median of the errors per table, stack, card and source, the leave-one-source-out coverage of the sigma tpopt
states for each run's plan (:func:`stated_sigma`), memory as a residual (runs over the usable memory, predicted
peaks against torchtitan's published ones) and the verdict on issue 35's targets. Not a test: a fit takes
seconds, leave-one-out a few minutes (``--no-loo`` skips it), leave-one-source-out one fit per source
(``--no-loso``).

Plan choices the tables leave open: Narayanan et al. state neither micro-batch nor schedule. The
micro-batch is tpopt's choice, the fastest of 1, 2, 4, 8 that fits memory; the schedule is Megatron-LM's
default, plain 1F1B (its interleaved schedule needs an explicit flag the paper does not give);
``--schedules fastest`` lets tpopt pick interleaved schedules too and prints what that changes.

    .venv/bin/python benchmarks/validate_published.py [--no-loo] [--no-loso] [--data runs.csv ...]
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = sorted((ROOT / "benchmarks" / "data").glob("*.csv"))

import fit_ring_steps  # noqa: E402
from fit_stacks import own_kernels, pooled_prior  # noqa: E402

from tpopt.catalogs import calibration_prior, load_catalog, scaled_share  # noqa: E402
from tpopt.catalogs.scenario import build_scenario  # noqa: E402
from tpopt.catalogs.stacks import DEFAULT_STACK, stack_names, stack_profile  # noqa: E402
from tpopt.errors import InputError  # noqa: E402
from tpopt.models import evidence as E  # noqa: E402
from tpopt.models import families as F  # noqa: E402
from tpopt.models.evaluate import evaluate, evaluate_arrays, resolve_plan, with_plan_options  # noqa: E402
from tpopt.models.finish import ANCHOR_SPEEDS, DEFAULT_STEP_SIGMA, SIGMA_MIN_RUNS, residual_sigma  # noqa: E402
from tpopt.models.memory import recipe  # noqa: E402
from tpopt.models.terms import step_sigma  # noqa: E402
from tpopt.models.units import GIB  # noqa: E402
from tpopt.optimizer import calibrate as C  # noqa: E402
from tpopt.optimizer.runs import megatron_flops, memory_figures, runs_from_csv, table_stack  # noqa: E402


def spearman(x, y) -> float:
    rx, ry = np.argsort(np.argsort(x)), np.argsort(np.argsort(y))
    return float(np.corrcoef(rx, ry)[0, 1])


def pct(x: float) -> str:
    return f"{x * 100:+6.1f}%"


def summary(errors) -> str:
    """median |error|, max |error| and the signed median of a list of relative errors."""
    s = np.asarray(errors, dtype=float)
    e = np.abs(s)
    return (f"median |error| {np.median(e) * 100:4.1f} %, max {e.max() * 100:4.1f} %, signed median "
            f"{np.median(s) * 100:+5.1f} %" if len(e) else "-")


def memory_peak(run, perf) -> tuple[float, float, float]:
    """(allocated peak, reserved peak, usable memory) per card of a run's plan in GiB, from the memory
    family's (value, limit) pair and the stack's allocator reserve and communicator buffers."""
    plan = C.chosen_plan(run, perf) or run.plans[0]
    p = resolve_plan(run.scenario, plan)
    sc = with_plan_options(C.with_perf(run.scenario, p.accelerator, perf), p)
    r = evaluate_arrays(sc, p.accelerator, tp=p.tp, pp=p.pp, dp=p.dp, micro_batch=p.micro_batch,
                        zero_stage=p.zero_stage, nics_per_host=p.nics_per_host, save_interval_s=p.save_interval_s,
                        recompute=p.recompute, offload=p.offload, schedule=p.schedule, save_mode=p.save_mode,
                        ep=p.ep, expert_tp=p.expert_tp, capacity_factor=p.capacity_factor, cp=p.cp,
                        sequence_parallel=p.sequence_parallel)
    v, lim = r[("c", F.MEMORY_PER_CARD)]
    st = run.scenario.stack
    alloc, fill = float(np.max(v)), float(np.max(lim))
    # the allocator's view: reserved = allocated x (1 + reserve) + communicator buffers, against the card's
    # usable memory (the limit is usable memory net of the stack's overheads; StackProfile.usable)
    return (alloc / GIB, (alloc * (1.0 + st.allocator_reserve) + st.communicator_buffers) / GIB,
            (fill * (1.0 + st.allocator_reserve) + st.communicator_buffers) / GIB)


def rank_peak(run, perf) -> str:
    """The peak rank of a run's plan, per-operation model: ``stage g: allocated/reserved`` in GiB
    (tpopt.models.terms.memory_by_stage: each stage's own states, in-flight activations and buffers)."""
    plan = C.chosen_plan(run, perf) or run.plans[0]
    m = evaluate(C.with_perf(run.scenario, plan.accelerator, perf), plan).metrics
    if "peak_stage" not in m:
        return "-"
    return f"{m['peak_stage']}:{m['peak_rank_allocated_gib']:5.1f}/{m['peak_rank_reserved_gib']:5.1f}"


OVERLAPPED_FREE = ("gemm_efficiency",)
"""What a calibration frees on runs whose stack overlaps communication with compute (Megatron-Core): the
sustained GEMM share; the other parameters stay at their published measurements (a fit that also frees
the overlap contention or attention drives them to their bounds on these few runs)."""


SERIAL_FREE = ("gemm_efficiency", "memory_efficiency", "kernel_overhead")
"""What a calibration frees on runs without overlap (the A100 tables): the shipped A100 calibration's three."""


def fit_parameters(runs) -> tuple[str, ...]:
    """The free parameters of a fit on ``runs`` (at most one per run)."""
    if runs and any(r.scenario.dp_overlap > 0 or max(r.scenario.tp_overlap) > 0 for r in runs):
        return OVERLAPPED_FREE[:len(runs)]
    return SERIAL_FREE[:len(runs)]


def measured_prior(cat, acc: str):
    """The accelerator's parameters before any calibration: the catalog entry with each calibrated field
    back at the prior its ``[acc.calibration] prior`` records (the public measurement it started from)."""
    perf = cat.perf(acc)
    prior = calibration_prior(cat.raw.get("performance", {}).get(acc, {}), perf)
    return perf.with_values(**prior) if prior else perf


def scale_sources(cat, acc: str) -> tuple[str, ...]:
    """The calibrated cards whose fitted / prior GEMM share scales ``acc``'s prior (performance.toml
    ``prior_scale_from``; () for none)."""
    return tuple(cat.raw.get("performance", {}).get(acc, {}).get("prior_scale_from", ()))


def fold_prior(cat, acc: str, cals: dict):
    """:func:`measured_prior` within one fit: a card whose prior is scaled by other cards' fits
    (``prior_scale_from``) takes the ratio of the fits ``cals`` made here (fitted / that card's measured
    prior); a source card not fitted here counts for nothing, as an unfitted one does in the catalog, so a
    left-out source leaves its share of the ratio out too (tpopt.catalogs.scaled_share)."""
    names = scale_sources(cat, acc)
    if not names:
        return measured_prior(cat, acc)
    own = float(cat.raw["performance"][acc]["gemm_efficiency"])
    pairs = [(float(cals[n][0].perf.gemm_efficiency), float(measured_prior(cat, n).gemm_efficiency))
             for n in names if n in cals]
    return cat.perf(acc).with_values(gemm_efficiency=scaled_share(own, pairs))


REFERENCE_STACKS = ("megatron-core", "megatron-lm-2021")
"""The stacks a card's calibration is fitted on when its ``[acc.calibration]`` does not name them (``stacks``):
Megatron-Core and Megatron-LM, whose kernels (Transformer Engine, Megatron's fused kernels) the per-operation
parameters describe. Runs of other stacks (torchtitan, MaxText) are predicted, never fitted into a card."""


def calibration_stacks(cat, acc: str) -> tuple[str, ...]:
    """The stacks whose runs calibrate ``acc``: its ``[acc.calibration] stacks`` (performance.toml), else
    REFERENCE_STACKS."""
    table = cat.raw.get("performance", {}).get(acc, {}).get("calibration", {})
    return tuple(table.get("stacks", REFERENCE_STACKS))


ENVELOPE_MAX_SEQ = 8192
"""The calibration envelope: a card's kernel parameters are fitted on its dense runs at up to 8,192 tokens per
sequence, where the GEMMs, attention and memory-bound kernels those parameters describe are what the step rests
on. MoE and long-context runs are predicted and judged, never fitted into the card: the physics they add (expert
GEMMs, dispatch, ring attention) keeps its own error, which the MoE and sequence factors of
catalogs/uncertainty.toml state; folding it into the card's GEMM share would move every dense plan."""


def in_envelope(run) -> bool:
    """Whether a run is inside the calibration envelope (:data:`ENVELOPE_MAX_SEQ`): dense, at most 8,192 tokens."""
    return not run.scenario.model.moe and run.scenario.task.seq_len <= ENVELOPE_MAX_SEQ


TABLE_SOURCES = {"megatron-bridge-modern": "Megatron-Bridge"}
"""Tables without a ``source`` column that transcribe a source another table cites: the modern table is the
Megatron-Bridge performance summary too (NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md), so
leaving that source out leaves both tables' runs out."""


def run_source(run) -> str:
    """The publishing source of a run, the unit left out by leave-one-source-out: the repository its
    ``source`` cell names first (``NVIDIA-NeMo/Megatron-Bridge docs/...`` -> Megatron-Bridge; torchtitan,
    NeMo, maxtext), else its table's (:data:`TABLE_SOURCES`; the papers' tables are one source each)."""
    cell = str(run.extra.get("row", {}).get("source") or "").strip()
    return cell.split()[0].rsplit("/", 1)[-1] if cell else TABLE_SOURCES.get(run.table, run.table)


RELEASE = re.compile(r"(?<![\d.])(\d{2}\.\d{2}(?:\.\d+)?)(?![\d.])")
"""A container release in a row's source cell (Megatron-Bridge's performance summary: 25.11, 26.04.01, ...)."""


def run_release(run) -> str:
    """The release a run was published with: its source (:func:`run_source`) and the container version its row
    names (``source``, else ``source_table``: ``... performance-summary-archive.md 26.04.01 ...`` -> ``Megatron-Bridge
    26.04.01``); "" where the row names none. The unit benchmarks/uncertainty_fit.py leaves out for a factor only
    one source's runs carry: one container's software (graphs, fused kernels, presets) moves all of its runs at
    once, as a publisher's does."""
    row = run.extra.get("row", {})
    for cell in (row.get("source"), row.get("source_table")):
        m = RELEASE.search(str(cell or ""))
        if m:
            return f"{run_source(run)} {m.group(1)}"
    return ""


def stated_sigma(run, evidence=None) -> float:
    """The step-time sigma tpopt states for a run's plan (models.terms.step_sigma, by the plan's cards and expert
    parallelism), with the shipped uncertainty table, or ``evidence`` in its place (:func:`loso_evidence`: the
    envelopes of the other sources only, as the tool would state it had the run's source never been seen)."""
    plan = run.plans[0]
    sc = run.scenario
    if evidence is not None and sc.risk.evidence is not None:
        sc = replace(sc, risk=replace(sc.risk, evidence=evidence))
    return float(step_sigma(sc, run.accelerator, cards=plan.cards, ep=plan.ep)[0])


def facts_of(run) -> E.PlanFacts:
    """What the uncertainty factors read from a run (its first candidate plan)."""
    sc, p = run.scenario, run.plans[0]
    experts = float(sc.model.experts) / max(int(p.ep or 1), 1) if sc.model.moe else 0.0
    return E.PlanFacts(acc=run.accelerator, stack=sc.stack.name, seq=int(sc.task.seq_len),
                       matrix=recipe(sc.task.precision).matrix, experts_per_card=experts, cards=float(p.cards))


def envelopes(runs) -> tuple[tuple[str, E.Envelope], ...]:
    """Each card's envelope (what the runs on it cover: stacks, sequence lengths, cards, recipes, experts per
    card), from the runs of ``runs`` inside the calibration envelope (:func:`in_envelope`): a MoE or long-context
    run checks the card and its stack, but its own physics is predicted, not fitted, so it does not widen the
    fitted sequence range or experts per card (their error is the MoE and sequence factors')."""
    out: dict[str, E.Envelope] = {}
    for r in (r for r in runs if in_envelope(r)):
        f = facts_of(r)
        env = E.Envelope((f.stack,), (f.seq, f.seq), f.cards, (E.recipe_class(f.matrix),), f.experts_per_card)
        out[f.acc] = out[f.acc].union(env) if f.acc in out else env
    return tuple(out.items())


def stack_sources(runs) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Each stack's publishing sources (:func:`run_source`) among ``runs``, every run (a stack's kernel factor
    is fitted on all of its runs, benchmarks/fit_stacks.py): a stack checked by one source counts as not fitted
    for the sigma (tpopt.models.evidence.SOURCES_MIN)."""
    out: dict[str, dict[str, None]] = {}
    for r in runs:
        out.setdefault(r.scenario.stack.name, {})[run_source(r)] = None
    return tuple((st, tuple(srcs)) for st, srcs in out.items())


def loso_evidence(runs, src: str, ev):
    """The uncertainty table ``ev`` with the envelopes and the stacks' sources of the runs of the sources other
    than ``src``: what the tool would know had ``src`` never been seen (None without a table)."""
    if ev is None:
        return None
    rest = [r for r in runs if run_source(r) != src]
    return replace(ev, envelopes=envelopes(rest), stack_sources=stack_sources(rest) if ev.stack_sources else ())


def stack_left_out(runs, src: str) -> list:
    """``runs`` with every stack whose shared runs all come from ``src`` at the prior of a stack no run fitted on
    ``src``'s runs: its fitted efficiency (benchmarks/fit_stacks.py) used only the runs being predicted, so leaving
    the source out leaves that fit out too. The prior is what the catalog gives such a stack
    (fit_stacks.pooled_prior): for a stack with kernels of its own, the geometric mean of the fitted factors of
    the OTHER sources' stacks with kernels of their own (1 when there is none); for a stack on the reference
    kernels (fit_stacks.REFERENCE_KERNELS: NeMo's Megatron-Core with Transformer Engine), 1. The same for a stack's
    grouped expert GEMM efficiency (benchmarks/fit_grouped_gemm.py) where its MoE runs all come from ``src``, and
    torch's ring's later-step efficiency (benchmarks/fit_ring_steps.py) where its CP runs all do: back at 1."""
    others = {r.scenario.stack.name: r.scenario.stack.kernel_efficiency for r in runs if run_source(r) != src}
    moe_others = {r.scenario.stack.name for r in runs if run_source(r) != src and r.scenario.model.moe}
    ring_others = bool(fit_ring_steps.ring_runs([r for r in runs if run_source(r) != src]))
    pool, _ = pooled_prior(others)
    out = []
    for r in runs:
        st = r.scenario.stack
        f = pool if own_kernels(st.name) else 1.0
        if run_source(r) == src and st.name not in others and st.kernel_efficiency != f:
            st = replace(st, kernel_efficiency=f)
        if run_source(r) == src and st.name not in moe_others and st.grouped_gemm_efficiency != 1.0:
            st = replace(st, grouped_gemm_efficiency=1.0)
        if run_source(r) == src and not ring_others and st.ring_step_efficiency != 1.0:
            st = replace(st, ring_step_efficiency=1.0)
        if st is not r.scenario.stack:
            r = replace(r, scenario=replace(r.scenario, stack=st))
        out.append(r)
    return out


def loso_predictions(runs, fit_tables, cat, all_shapes: bool = False) -> dict[str, float]:
    """Leave-one-source-out: each source's runs predicted by the calibration fitted on the other sources only
    (their stacks' efficiencies too, :func:`stack_left_out`); a card no other source has keeps the public
    measurements its catalog entry started from."""
    loso: dict[str, float] = {}
    for src in dict.fromkeys(run_source(r) for r in runs):
        p, _, _, _ = fit_all(stack_left_out(runs, src), fit_tables, cat, False, False, all_shapes, priors=True,
                             leave_out=src)
        loso.update({r.name: p[r.name] for r in runs if run_source(r) == src})
        print(f"\r  leave-one-source-out {src}", end=" " * 20, flush=True, file=sys.stderr)
    print(file=sys.stderr)
    return loso


def fit_all(runs, fit_tables, cat, loo: bool, log: bool, all_shapes: bool = False, priors: bool = False,
            leave_out: str = ""):
    """One calibration per accelerator on the runs of ``fit_tables`` whose stack the card's calibration is
    for (:func:`calibration_stacks`) inside the calibration envelope (:func:`in_envelope`; every shape with
    ``all_shapes``; none of the source
    ``leave_out``): (predictions, chosen plans, fitted parameters, leave-one-out predictions); an
    accelerator without such a run keeps the catalog's."""
    pred, chosen, cals, loo_pred = {}, {}, {}, {}
    accs = list(dict.fromkeys(r.accelerator for r in runs))
    for acc in sorted(accs, key=lambda a: bool(scale_sources(cat, a))):  # a prior-scaled card after its sources
        mine = [r for r in runs if r.accelerator == acc]
        stacks = calibration_stacks(cat, acc)
        fit_runs = [r for r in mine if r.table in fit_tables and run_source(r) != leave_out
                    and r.scenario.stack.name in stacks and (all_shapes or in_envelope(r))]
        prior0 = cat.perf(acc)
        for r in list(fit_runs):  # memory is a residual; only a plan beyond the memory model's error is refused
            try:
                C.check_memory(r, prior0)
            except InputError as exc:
                fit_runs.remove(r)
                if log:
                    print(f"{acc}: not fitted on {r.name}: {exc}")
        prior = fold_prior(cat, acc, cals) if priors else cat.perf(acc)
        perf = prior
        free = fit_parameters(fit_runs)
        if fit_runs:
            t0 = time.perf_counter()
            cal = C.fit(fit_runs, acc, free, prior=prior)
            cals[acc] = (cal, len(fit_runs), time.perf_counter() - t0)
            perf = cal.perf
        elif log:
            print(f"{acc}: no run to fit on; the catalog's parameters are used")
        for r in mine:
            pred[r.name] = float(C.predict(r, perf).step_s[0])
            chosen[r.name] = (C.chosen_plan(r, perf), perf)
        if loo and len(fit_runs) > 1:
            for i, r in enumerate(fit_runs):
                rest = fit_runs[:i] + fit_runs[i + 1:]
                c = C.fit(rest, acc, fit_parameters(rest), prior=prior)
                loo_pred[r.name] = float(C.predict(r, c.perf).step_s[0])
                print(f"\r  leave-one-out {acc} {i + 1}/{len(fit_runs)}", end="", flush=True, file=sys.stderr)
            print(file=sys.stderr)
    return pred, chosen, cals, loo_pred


DEFAULT_TABLE = "megatron-bridge-modern"
"""The table whose leave-one-source-out RMS is the default sigma of cards no table covers (models/finish.py
DEFAULT_STEP_SIGMA): modern cards on the stack the model is fitted on; the 2024-2026 table's spread is mostly
stacks, MoE and long context, which the stack sigmas and the per-operation factors carry."""


def print_residual_sigma(runs, loo: dict, loso: dict) -> None:
    """The step-time sigma the Confidence model uses (models/finish.py): the RMS of ln(predicted / published)
    (finish.residual_sigma). Cards no table covers: the RMS of the modern table's leave-one-source-out
    predictions (:data:`DEFAULT_TABLE` predicted from the others: how far the model is off on cards it was not
    fitted on, on a fitted stack), DEFAULT_STEP_SIGMA, printed beside the value models/finish.py states (from
    its VALIDATION_LOSO_ERRORS). A covered card: its leave-one-out RMS when at least finish.SIGMA_MIN_RUNS runs
    estimate it, else the larger of that and the default; catalogs/performance.toml ``residual_sigma``."""
    print("\nstep-time residual sigma (RMS of ln(predicted / published), models/finish.py):")
    default = 0.0
    for t in dict.fromkeys(r.table for r in runs):
        ratios = [loso[r.name] / r.measured_step_s for r in runs if r.table == t and r.name in loso]
        if ratios:
            if t == DEFAULT_TABLE:
                default = residual_sigma(ratios)
            print(f"  leave-one-source-out {t:24s} {residual_sigma(ratios):.3f}  ({len(ratios)} runs)")
    if default > 0:
        print(f"  cards no table covers: DEFAULT_STEP_SIGMA = {default:.3f} ({DEFAULT_TABLE}'s; models/finish.py "
              f"states {DEFAULT_STEP_SIGMA:.3f})")
    for acc in dict.fromkeys(r.accelerator for r in runs):
        ratios = [loo[r.name] / r.measured_step_s for r in runs if r.accelerator == acc and r.name in loo]
        if ratios:
            own = residual_sigma(ratios)
            value = own if len(ratios) >= SIGMA_MIN_RUNS else max(own, default)
            print(f"  [{acc}] residual_sigma = {value:.3f}  (leave-one-out RMS {own:.3f} over {len(ratios)} runs"
                  f"{'' if len(ratios) >= SIGMA_MIN_RUNS else f'; under {SIGMA_MIN_RUNS} runs: the default'})")
    print("  per stack (catalogs/stacks.toml residual_sigma; a card's own applies on the stacks it was measured on,"
          " elsewhere the larger of the two):")
    fitted = []
    for stack in dict.fromkeys(r.scenario.stack.name for r in runs):
        ratios = [loo[r.name] / r.measured_step_s for r in runs if r.scenario.stack.name == stack and r.name in loo]
        if ratios:
            fitted.append(stack)
            mine = Counter(r.accelerator for r in runs if r.scenario.stack.name == stack and r.name in loo)
            cards = ", ".join(f"{n} {a}" for a, n in mine.items())
            print(f"  [{stack}] residual_sigma = {residual_sigma(ratios):.3f}  (leave-one-out RMS over {len(ratios)} "
                  f"runs: {cards})")
    ran = list(dict.fromkeys(r.scenario.stack.name for r in runs if r.scenario.stack.name not in fitted))
    if ran:
        why = "leave-one-out skipped (--no-loo)" if not loo else "no card is fitted on their runs"
        print(f"  [{', '.join(ran)}] {why}: a stack whose kernel factor is fitted on its runs takes its "
              f"residual_sigma from benchmarks/fit_stacks.py (the leave-one-out RMS of that fit)")
    rest = [s for s in stack_names() if s not in fitted and s not in ran]
    if rest:
        print(f"  [{', '.join(rest)}] no fitted runs: residual_sigma = {residual_sigma(ANCHOR_SPEEDS):.3f}, the public "
              f"anchors' RMS log error (stacks the model was not fitted on)")


TARGET_MEDIAN, TARGET_MAX, TARGET_SIGNED, TARGET_LOSO = 0.05, 0.15, 0.02, 0.08
"""Issue 35's step-time targets: per table, stack and card median |error|, max |error| and |signed median| of
the calibrated predictions; the leave-one-source-out median |error|."""
TARGET_COVERAGE = (0.60, 0.90)
"""Share of runs within tpopt's stated 1 sigma and 2 sigma when their source is left out of every fit."""
TARGET_MEMORY = 0.10
"""Median |error| of the predicted per-card peak against published peaks."""


def _errors(rows, values) -> list[float]:
    return [values[r.name] / r.measured_step_s - 1 for r in rows if r.name in values]


def print_errors(rows, pred, loo, loso, shipped, indent: str = "  ") -> bool:
    """The calibrated, leave-one-out, leave-one-source-out and catalog summaries of ``rows``; whether the
    calibrated errors meet the targets (TARGET_MEDIAN, TARGET_MAX, TARGET_SIGNED)."""
    errs = _errors(rows, pred)
    print(f"{indent}calibrated:    {summary(errs)}")
    if _errors(rows, loo):
        print(f"{indent}leave-one-out: {summary(_errors(rows, loo))}")
    if _errors(rows, loso):
        print(f"{indent}leave-one-source-out: {summary(_errors(rows, loso))}")
    print(f"{indent}catalog:       {summary(_errors(rows, shipped))}")
    e = np.abs(errs)
    return bool(np.median(e) <= TARGET_MEDIAN and e.max() <= TARGET_MAX and abs(np.median(errs)) <= TARGET_SIGNED)


def print_coverage(runs, loso) -> bool:
    """Leave-one-source-out coverage: the share of runs whose |ln(predicted / published)| is within the sigma
    tpopt states for the run's plan (:func:`stated_sigma`) had the run's source never been seen
    (:func:`loso_evidence`), and within twice it, overall and per stack; and the overall leave-one-source-out
    median |error|. Whether both meet TARGET_COVERAGE and TARGET_LOSO."""
    rows = [r for r in runs if r.name in loso]
    if not rows:
        return True
    ev = rows[0].scenario.risk.evidence
    unseen = {src: loso_evidence(runs, src, ev) for src in dict.fromkeys(run_source(r) for r in rows)}
    sigma = {r.name: stated_sigma(r, unseen[run_source(r)]) for r in rows}
    print("\n== leave-one-source-out coverage of the stated step-time sigma (models.terms.step_sigma)")
    out = True
    for label, group in [("all", rows)] + [(f"stack {s}", [r for r in rows if r.scenario.stack.name == s])
                                           for s in dict.fromkeys(r.scenario.stack.name for r in rows)]:
        z = np.array([abs(np.log(loso[r.name] / r.measured_step_s)) / sigma[r.name] for r in group])
        one, two = float(np.mean(z <= 1)), float(np.mean(z <= 2))
        sig = np.median([sigma[r.name] for r in group])
        rms = residual_sigma([loso[r.name] / r.measured_step_s for r in group])
        print(f"  {label:28s} {len(group):3d} runs: within 1 sigma {one * 100:5.1f} %, within 2 sigma "
              f"{two * 100:5.1f} % (median stated sigma {sig:.3f}; RMS ln error {rms:.3f})")
        if label == "all":
            out = one >= TARGET_COVERAGE[0] and two >= TARGET_COVERAGE[1]
    med = float(np.median(np.abs(_errors(rows, loso))))
    print(f"  leave-one-source-out median |error| {med * 100:.1f} % (target <= {TARGET_LOSO * 100:.0f} %)")
    return out and med <= TARGET_LOSO


def print_memory(runs, mem) -> bool:
    """Memory as a residual: runs whose predicted reserved peak exceeds the usable memory (they ran), and the
    predicted allocated and reserved peaks against published peaks (torchtitan's logged max reserved memory,
    max over ranks). Whether every run fits and the median |error| of the reserved peak meets TARGET_MEMORY."""
    over = [(r, mem[r.name]) for r in runs if mem[r.name][1] > mem[r.name][2] * (1 + 1e-9)]
    print(f"\n== memory: {len(runs) - len(over)} of {len(runs)} runs fit the memory model as they ran"
          + (": over the usable memory " + ", ".join(f"{r.name} {m[1]:.1f}/{m[2]:.1f} GiB" for r, m in over)
             if over else ""))
    pub = [r for r in runs if r.extra.get("memory_gib_published")]
    ok = not over
    if pub:
        print("  published peak per GPU (GiB, max reserved over ranks) vs predicted allocated / reserved peak")
        ea, er = [], []
        for r in pub:
            m, p = mem[r.name], float(r.extra["memory_gib_published"])
            ea.append(m[0] / p - 1)
            er.append(m[1] / p - 1)
            print(f"    {r.name:10s} {r.accelerator:14s} published {p:6.1f}  allocated {m[0]:6.1f} "
                  f"{pct(m[0] / p - 1)}  reserved {m[1]:6.1f} {pct(m[1] / p - 1)}  usable {m[2]:6.1f}")
        print(f"    allocated: {summary(ea)}")
        print(f"    reserved:  {summary(er)}")
        ok &= float(np.median(np.abs(er))) <= TARGET_MEMORY
    return ok


def print_table_figures(rows, pred) -> bool:
    """A table's own figures (issue 23): the full / selective recompute ratio (Korthikanti), percent of peak
    rising with width (Narayanan), per-GPU memory against the published figures; whether they meet theirs."""
    ok = True
    pairs = [(r, s) for r in rows for s in rows if r.name.endswith(" full") and s.name == r.name[:-5] + " sp+sel"]
    if pairs:
        print("  full / selective recompute ratio: predicted vs published")
        for r, s in pairs:
            a, b = pred[r.name] / pred[s.name], r.measured_step_s / s.measured_step_s
            ok &= abs(a / b - 1) <= 0.03
            print(f"    {r.name[:-5]:22s} {a:6.3f} vs {b:6.3f}  {pct(a / b - 1)}")
    peak_rows = [r for r in rows if r.extra.get("row", {}).get("measured_pct_of_peak")]
    if peak_rows:
        print("  percent of peak (the paper's FLOP count / (GPUs x time x FP16 peak)): predicted vs measured")
        widths, preds = [], []
        for r in peak_rows:
            a = r.scenario.model
            acc = r.scenario.system(r.accelerator).acc
            peak = acc.peak_fp16 or acc.peak_flops
            f = megatron_flops(a.hidden, a.layers, a.vocab, r.scenario.task.seq_len, r.scenario.task.global_batch)
            share = f / (r.plans[0].cards * pred[r.name] * peak) * 100
            widths.append(a.hidden)
            preds.append(share)
            measured = float(r.extra['row']['measured_pct_of_peak'])
            print(f"    {r.name:22s} h = {a.hidden:6d}  {share:5.1f} % vs {measured:5.1f} %")
        rho = spearman(widths, preds)
        print(f"    rank correlation with width {rho:+.2f}; {preds[0]:.1f} % -> {preds[-1]:.1f} % from the "
              f"narrowest to the widest")
        ok &= rho > 0 and preds[-1] > preds[0]
    mem = [(r, memory_figures(r)) for r in rows if any(k in r.extra for k in
                                                       ("weights_optimizer_gib", "activations_gib_sp_selective"))
           and not r.name.endswith("sp+sel")]
    if mem:
        print("  memory per GPU (GiB): predicted vs published")
        by_col: dict = {}
        for r, figs in mem:
            for col, (p, m) in figs.items():
                by_col.setdefault(col, []).append(p / m - 1)
                print(f"    {r.name.replace(' full', ''):22s} {col:34s} {p:8.2f} vs {m:8.2f}  {pct(p / m - 1)}")
        for col, e in by_col.items():
            print(f"    {col}: {summary(e)}")
            ok &= float(np.median(np.abs(e))) <= 0.05
    return bool(ok)


FSDP_CARDS = (8, 16, 32, 64, 128)
FSDP_FABRICS = (("DGX H100, 8 x 400 Gb/s per host", "400g", 8, {}),
                ("4 x 200 Gb/s per host (A3 High-like)", "200g", 4, {}),
                ("  hybrid, FSDP in host, FP32 gradients", "200g", 4, {"zero_group": 8}))
"""(label, NIC, NICs per host, [memory] keys); the hybrid row is MaxText's A3 layout (ici_fsdp_parallelism = 8,
dcn_data_parallelism = hosts) with FP32 gradients (bf16-mixed-fp32-grad)."""


def attention_share(run, plan, perf) -> float:
    """Share of one layer's predicted micro-batch time (forward, dX with recompute, dW; the context-parallel exchange
    left out) spent in the attention core (models.steptime.attention_times; a full recompute reruns its forward)."""
    from tpopt.models import steptime
    from tpopt.models.terms import layer_times as LT
    sc = C.with_perf(run.scenario, run.accelerator, perf)
    kw = dict(tp=plan.tp, cp=plan.cp, mb=plan.micro_batch)
    a_f, a_dx = steptime.attention_times(sc.model, LT.layout(sc, **kw), LT.rates(sc, run.accelerator))
    layer, _, _ = LT.op_times(sc, acc=run.accelerator, recompute=plan.recompute, **kw)
    redo = a_f if plan.recompute == "full" else 0.0
    return float(np.asarray((a_f + a_dx + redo) / (layer.fwd + layer.dx + layer.dw)).ravel()[0])


def print_long_context(runs, pred, chosen) -> None:
    """Runs beyond the envelope's sequence length (dense): the attention core's share of a layer's predicted time and
    the factor k on the attention time alone that would close the run's error, k = 1 + (published / predicted - 1) /
    share. A k that stays flat over the context-parallel degree points at the attention kernel the run's container
    ran; a k that grows with cp points at the exchange."""
    rows = [r for r in runs if not r.scenario.model.moe and r.scenario.task.seq_len > ENVELOPE_MAX_SEQ]
    if not rows:
        return
    print("\nlong sequences: attention core's share of a layer's predicted time, and the factor on the attention time "
          "alone that closes the error")
    print(f"  {'run':8s} {'tokens':>9s} {'tp':>3s} {'cp':>3s} {'stack':>19s} {'error':>7s} {'share':>6s} {'k':>6s}")
    for r in rows:
        plan, perf = chosen[r.name]
        if plan is None:
            continue
        share = attention_share(r, plan, perf)
        ratio = r.measured_step_s / pred[r.name]
        print(f"  {r.name:8s} {r.scenario.task.seq_len:9d} {plan.tp:3d} {plan.cp:3d} {r.scenario.stack.name:>19s} "
              f"{pct(1 / ratio - 1):>7s} {share:6.2f} {1 + (ratio - 1) / share:6.2f}")


def print_fsdp_scaling(cat) -> None:
    """ZeRO-3 / FSDP from one host to 16 (issue 23 item 4): Llama 3 8B, BF16, 8192 tokens per card (one
    sequence a card, tokens per card fixed), H100 with the catalog's parameters, the step at each card count
    over the 8-card step, on two host fabrics (tests/test_fsdp_scale.py derives the bands)."""
    print("\nFSDP (ZeRO-3) scaling, Llama 3 8B BF16, 8192 tokens per card, H100 (catalog parameters): "
          "step / 8-card step")
    print(f"  {'host fabric':38s} " + " ".join(f"{c:>6d}" for c in FSDP_CARDS) + "   8-card step")
    for label, nic, nics, mem in FSDP_FABRICS:
        steps = []
        for cards in FSDP_CARDS:
            task = {"tokens": "1B", "seq_len": 8192, "global_batch": cards}
            if mem:
                task["precision"] = "bf16-mixed-fp32-grad"
            raw = {"model": {"name": "llama3-8b"}, "task": task, "memory": mem,
                   "schedule": {"deadline": "1000d"}, "hardware": {"accelerator": "h100-sxm", "nic": nic,
                                                                   "nics_per_host": nics}}
            r = evaluate_arrays(build_scenario(raw, cat), "h100-sxm", tp=1, pp=1, dp=cards, micro_batch=1,
                                zero_stage=3, nics_per_host=nics, save_interval_s=1800.0, recompute="none")
            steps.append(float(r["step_s"]))
        print(f"  {label:38s} " + " ".join(f"{x / steps[0]:6.3f}" for x in steps) + f"   {steps[0]:.3f} s")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", nargs="+", default=[str(p) for p in DATA], help="CSV files of measured runs")
    ap.add_argument("--fit-on", default="all", help="tables (file stems, comma-separated) to fit on, 'all' or 'none'")
    ap.add_argument("--fit-all-shapes", action="store_true",
                    help="fit cards on MoE and long-context runs too, not only inside the calibration envelope")
    ap.add_argument("--no-loo", action="store_true", help="skip the leave-one-out fits")
    ap.add_argument("--no-loso", action="store_true", help="skip the leave-one-source-out fits")
    ap.add_argument("--schedules", choices=["default", "fastest"], default="default",
                    help="missing schedules: Megatron-LM's default 1F1B, or tpopt's fastest incl. interleaved")
    ap.add_argument("--accelerator", help="accelerator of every row (else the accelerator column / inference)")
    ap.add_argument("--catalog", action="append", default=[], help="extra catalog directory")
    args = ap.parse_args(argv)
    try:
        cat = load_catalog(args.catalog)
        runs = [r for path in args.data for r in runs_from_csv(path, cat, accelerator=args.accelerator,
                                                                schedules=args.schedules)]
    except InputError as exc:
        print(f"validate_published: error: {exc}", file=sys.stderr)
        return 2
    tables = list(dict.fromkeys(r.table for r in runs))
    fit_tables = tables if args.fit_on == "all" else [] if args.fit_on == "none" else \
        [t.strip() for t in args.fit_on.split(",")]
    stacks = {Path(p).stem: table_stack(p) for p in args.data}
    print(f"{len(runs)} measured runs from {', '.join(tables)}; schedules: {args.schedules}; "
          f"fitted on: {', '.join(fit_tables) or 'none (catalog parameters)'}")
    for t in tables:
        print(f"  {t}: stack {stacks.get(t, '?')} ({stack_profile(stacks.get(t, DEFAULT_STACK)).display})")

    pred, chosen, cals, loo = fit_all(runs, fit_tables, cat, not args.no_loo, True, args.fit_all_shapes)
    for acc, (cal, n, dt) in cals.items():
        prior = cat.perf(acc)
        print(f"\n{acc}: fitted on {n} runs in {dt:.0f} s")
        for name in cal.fitted:
            unit, scale = ("us", 1e6) if name in ("kernel_overhead", "collective_latency") else ("", 1.0)
            print(f"  {name:18s} {getattr(cal.perf, name) * scale:8.4g}{unit}   "
                  f"(catalog {getattr(prior, name) * scale:.4g}{unit})")
    shipped = {r.name: float(C.predict(r, cat.perf(r.accelerator)).step_s[0]) for r in runs}
    sources = list(dict.fromkeys(run_source(r) for r in runs))
    loso: dict = {}
    if not args.no_loso and len(sources) > 1:
        loso = loso_predictions(runs, fit_tables, cat, args.fit_all_shapes)

    ok = True
    mem_fit: dict = {}
    for table in tables:
        rows = [r for r in runs if r.table == table]
        print(f"\n== {table}: iteration time per run (s); memory per GPU (GiB): allocated peak > reserved peak "
              f"(x allocator reserve + communicator buffers) / usable; the peak rank's stage: allocated/reserved")
        print(f"{'run':34s} {'plan (recompute)':>30s} {'published':>9s} {'predicted':>9s} {'error':>7s} {'LOO':>7s} "
              f"{'LOSO':>7s} {'catalog':>7s} {'alloc>reserved/usable':>21s} {'peak rank':>13s}")
        for r in rows:
            p, perf = chosen[r.name]
            plan = f"mb {p.micro_batch}, {p.schedule if p.pp > 1 else '-'}, {p.recompute}" if p else "none fits"
            e = pred[r.name] / r.measured_step_s - 1
            c = shipped[r.name] / r.measured_step_s - 1
            lo = loo[r.name] / r.measured_step_s - 1 if r.name in loo else None
            ls = loso[r.name] / r.measured_step_s - 1 if r.name in loso else None
            m = memory_peak(r, perf)
            mem_fit[r.name] = m
            mem = f"{m[0]:5.1f}>{m[1]:5.1f}/{m[2]:5.1f}{'' if m[1] <= m[2] * (1 + 1e-9) else '!'}"
            print(f"{r.name:34s} {plan:>30s} {r.measured_step_s:9.2f} {pred[r.name]:9.2f} {pct(e):>7s} "
                  f"{pct(lo) if lo is not None else '-':>7s} {pct(ls) if ls is not None else '-':>7s} "
                  f"{pct(c):>7s} {mem:>21s} {rank_peak(r, perf):>13s}")
        ok &= print_errors(rows, pred, loo, loso, shipped)
        ok &= print_table_figures(rows, pred)

    print("\n== summaries: calibrated (fitted on the reference stacks' runs), leave-one-out, leave-one-source-out "
          "(the run's publishing source left out of every fit), catalog (as shipped)")
    for label, key in (("table", lambda r: r.table), ("stack", lambda r: r.scenario.stack.name),
                       ("card", lambda r: r.accelerator), ("source", run_source)):
        for group in dict.fromkeys(key(r) for r in runs):
            rows = [r for r in runs if key(r) == group]
            print(f"  [{label} {group}] {len(rows)} runs")
            met = print_errors(rows, pred, loo, loso, shipped, indent="    ")
            if label != "source":
                ok &= met
    ok &= print_coverage(runs, loso)
    ok &= print_memory(runs, mem_fit)
    print_residual_sigma(runs, loo, loso)
    print_long_context(runs, pred, chosen)
    print_fsdp_scaling(cat)
    print("\nissue 35 targets (per table, per stack and per card: median |error| <= 5 %, max <= 15 %, signed median "
          "within +-2 %; leave-one-source-out median <= 8 %; LOSO coverage of the stated sigma >= 60 % within 1 sigma "
          "and >= 90 % within 2 sigma; every run fits the memory model, published peaks within 10 % (median); issue "
          "23's: recompute ratio within 3 %, published memory figures median <= 5 %, percent of peak rising with "
          f"width): {'met' if ok else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
