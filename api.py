"""The Python API: the same answers as the ``tpopt`` commands, as objects.

    import tpopt

    sc = tpopt.scenario(deadline="30d", hw="rtx4090")     # the built-in design case, two inputs changed
    result = tpopt.solve(sc)                              # proven optimal: rtx4090 x 48
    result.best.plan.cards, result.best.metrics["cost"]
    result.to_frame()                                     # pandas, one row per plan

A scenario comes from the built-in design case (no source), a TOML file, or a mapping of tables as a
TOML file would give them; inputs are changed with natural names (``deadline``, ``tokens``, ``hw``,
``efficiency``, ``max_cards``, ... -- any key of one scenario table) or dotted ``table.key`` names,
given as a mapping or as keyword arguments. Values carry their units exactly as in a scenario file
(``"30d"``, ``"1.5T"``, ``"45%"``, ``"22GiB"``). Every function also takes such a source in place of a
built scenario, so ``tpopt.solve(deadline="20d")`` works too.

Bad input raises :class:`tpopt.InputError` with the one-line message the command line prints.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union, cast

from tpopt.catalogs import load_catalog
from tpopt.catalogs.rl import load_rl_scenario
from tpopt.catalogs.scenario import (
    BUILTIN_RL_SCENARIO,
    BUILTIN_SCENARIO,
    build_scenario,
    natural_keys,
    read_scenario_file,
    with_overrides,
)
from tpopt.errors import InputError
from tpopt.frames import records_frame
from tpopt.frameworks import export_text
from tpopt.models.evaluate import Evaluation
from tpopt.models.evaluate import evaluate as evaluate_plan
from tpopt.models.plan import Scenario
from tpopt.models.units import parse_duration, parse_fraction
from tpopt.models.variables import API_FIELDS, API_KEY, PLAN_FIELD_NAMES, PLAN_INPUTS
from tpopt.optimizer import backends
from tpopt.optimizer import calibrate as CAL
from tpopt.optimizer.commands import MAX_SIMULATED_RUNS, calibrate_runs, calibration_report, measured_run, simulation
from tpopt.optimizer.estimate import EstimateInputs
from tpopt.optimizer.estimate import estimate as estimate_report
from tpopt.optimizer.explain import explain_plan
from tpopt.optimizer.inverse import ask
from tpopt.optimizer.limits import clock_of
from tpopt.optimizer.plan import PlanReport, plan
from tpopt.optimizer.plan_rl import plan_rl
from tpopt.optimizer.question import explain_request
from tpopt.optimizer.question import replan as replan_report
from tpopt.optimizer.result import Request
from tpopt.optimizer.runs import runs_from_csv
from tpopt.optimizer.sites_mixed import answer as sites_answer
from tpopt.optimizer.sweep import sweep as run_sweep
from tpopt.plan_fields import plan_from
from tpopt.presentation import infeasible_lines, plan_lines, request_lines

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pandas

    from tpopt.models.plan import Plan
    from tpopt.optimizer.sweep import SweepResult

Source = Union[str, "PathLike[str]", Mapping[str, Any], Scenario, None]
#: A swept input: one value, a list, or a range "start:end:step" (as on the command line).
Swept = str | float | Sequence[str | float] | None

__all__ = ["LoadedScenario", "Explanation", "SweepTable", "scenario", "solve", "evaluate", "explain", "sweep",
           "estimate", "export", "calibrate", "simulate", "replan", "rl", "inverse", "sites", "pools"]

PLAN_FIELDS = API_FIELDS
"""The plan keywords of :func:`evaluate` and :func:`explain` (accelerator, cards, zero_stage, ...; declared in
:data:`tpopt.models.variables.PLAN_INPUTS`)."""
PLAN_NAMES = frozenset(PLAN_FIELD_NAMES) | {i.key for i in PLAN_INPUTS} | set(PLAN_FIELDS)
"""Every name that means a plan field (a :class:`~tpopt.models.plan.Plan` field, a plan flag's or keyword's name)."""


@dataclass(frozen=True)
class LoadedScenario(Scenario):
    """A built :class:`~tpopt.models.plan.Scenario` that remembers where it came from: its raw tables
    (overrides applied) and catalog directories, so that a sweep, an explanation (which rebuilds the
    scenario for other accelerators) or further overrides start from the same inputs."""

    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    catalog_dirs: tuple[str, ...] = field(default=(), compare=False, repr=False)
    builtin: bool = field(default=False, compare=False, repr=False)


def scenario(source: Source = None, overrides: Mapping[str, Any] | None = None, /, *,
             catalog: str | PathLike[str] | Iterable[str | PathLike[str]] = (), **inputs: Any) -> LoadedScenario:
    """Build a scenario.

    ``source``: None (the built-in design case: Qwen3-8B, 100B tokens, 8,192 x 384, RTX 4090 hosts,
    30 d with 5 d reserved), a TOML file path, a mapping of tables (``{"model": {"name": ...},
    "task": {...}, ...}``), or a scenario built here before (its inputs are reused). ``overrides`` and
    keyword ``inputs``: natural names (``deadline="30d"``, ``hw="h100-sxm,b200"``) or ``"table.key"``.
    A mapping whose values are not all tables is read as overrides of the built-in design case, so
    ``tpopt.scenario({"deadline": "30d"})`` works. ``catalog``: extra catalog directories.
    """
    ov = dict(overrides or {})
    ov.update(inputs)
    dirs = tuple(str(d) for d in ((catalog,) if isinstance(catalog, (str, PathLike)) else catalog))
    builtin = False
    if isinstance(source, LoadedScenario):
        raw, dirs, builtin = source.raw, dirs or source.catalog_dirs, source.builtin
    elif isinstance(source, Scenario):
        if ov or dirs:
            raise InputError("overrides need the scenario's inputs: build it with tpopt.scenario(...) first")
        return LoadedScenario(**{f.name: getattr(source, f.name) for f in fields(Scenario)})
    elif isinstance(source, Mapping) and not all(isinstance(v, Mapping) for v in source.values()):
        raw, builtin = read_scenario_file(BUILTIN_SCENARIO), True
        ov = {**dict(source), **ov}
    elif source is None:
        raw, builtin = read_scenario_file(BUILTIN_SCENARIO), True
    else:
        raw = read_scenario_file(source)
    if ov:
        raw = with_overrides(raw, ov)
    built = build_scenario(raw, load_catalog(dirs))
    return LoadedScenario(**{f.name: getattr(built, f.name) for f in fields(Scenario)}, raw=raw, catalog_dirs=dirs,
                          builtin=builtin)


def _split(kw: dict[str, Any], names: Collection[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    picked = {k: kw.pop(k) for k in list(kw) if k in names}
    return picked, kw


def _scenario_input(name: str) -> bool:
    """Whether ``name`` is a scenario input (a dotted ``table.key`` or a natural name of one)."""
    if "." in name:
        return True
    try:
        natural_keys(name)
    except InputError:
        return False
    return True


def _reject_plan_fields(inputs: Mapping[str, Any], function: str, takes_plan: bool) -> None:
    """An :class:`InputError` for a keyword that names a plan field ``function`` does not take (and no scenario
    input): it would otherwise be dropped, or read as an unknown scenario input."""
    for name in inputs:
        if name in PLAN_NAMES and not _scenario_input(name):
            if takes_plan:
                raise InputError(f"tpopt.{function}: {name!r} is not a plan field it takes (plan fields: "
                                 f"{', '.join(PLAN_FIELDS)}; other keywords change the scenario)")
            raise InputError(f"tpopt.{function}: {name!r} is a plan field, and {function} chooses the plan (fix a "
                             f"plan with tpopt.evaluate, whose plan fields are {', '.join(PLAN_FIELDS)})")


def _scenario_of(source: Source, inputs: dict[str, Any]) -> LoadedScenario:
    if isinstance(source, LoadedScenario) and not inputs:
        return source
    return scenario(source, inputs)


def _request(objective: str, top: int, time_limit: float, seed: int, workers: int, method: str) -> Request:
    if objective not in ("cost", "time"):
        raise InputError(f"objective must be 'cost' or 'time' (got {objective!r})")
    if top < 1:
        raise InputError("top must be at least 1")
    if not time_limit > 0:
        raise InputError("time_limit must be positive")
    req = Request(objective=objective, top=top, time_limit=float(time_limit), seed=seed, workers=max(1, workers),
                  method=method)
    clock_of(req)  # the limit counts from here: the caller makes the request first, before loading the scenario
    return req


def solve(source: Source = None, /, *, solver: str = backends.DEFAULT, objective: str = "cost", top: int = 1,
          time_limit: float = 60.0, seed: int = 0, workers: int = 1, method: str = "auto", analysis: bool = True,
          sensitivity: bool = False, **inputs: Any) -> PlanReport:
    """The cost-minimal (``objective="time"``: fastest) plan, proven optimal, as ``tpopt solve`` finds it
    (:func:`tpopt.optimizer.plan.plan`): a :class:`~tpopt.optimizer.plan.PlanReport`, a
    :class:`~tpopt.optimizer.result.SolveResult` (``.status``, ``.best``, ``.plans``, ``.to_frame()``,
    ``.to_dict()``) with what the command prints besides: ``.binding``, ``.alternatives``,
    ``.robustness``, ``.analysis`` and ``.report`` (the command's JSON; ``analysis=False`` skips the binding
    analysis as ``--no-analysis`` does, ``sensitivity=True`` adds ``report["sensitivities"]``). ``solver``:
    ``cpsat``, ``highs``, ``enumerate`` or ``pyomo:NAME`` (the MILP through Pyomo with solver NAME: ``highs``,
    ``scip``, ``cbc``, ``glpk``, ``gurobi``, ...), or any backend registered in
    :mod:`tpopt.optimizer.backends`; keyword ``inputs`` change the scenario (``deadline="20d"``).
    Deterministic with the default seed and one worker."""
    if not backends.is_known(solver):
        raise backends.unknown_solver(solver)
    _reject_plan_fields(inputs, "solve", takes_plan=False)
    req = _request(objective, top, time_limit, seed, workers, method)  # its clock runs from the call's start
    req.solver_named = solver != backends.DEFAULT  # a solver other than the default: the tiny-space rule keeps it
    sc = _scenario_of(source, inputs)
    if sc.pools:
        raise InputError("[[hardware.pools]]: a mixed plan over accelerator pools is planned by tpopt.pools(...)")
    return plan(sc, solver, req, analyse=analysis, sensitivity=sensitivity,
                inputs=lambda: (sc.raw or None, load_catalog(sc.catalog_dirs)))


def _plan(sc: Scenario, plan_kw: dict[str, Any]) -> Plan:
    kw = {API_KEY[k]: v for k, v in plan_kw.items()}
    if kw.get("cards") is None:
        raise InputError("give the plan's cards (e.g. cards=48)")
    return plan_from(sc, kw)


def evaluate(source: Source = None, /, *, cards: int | None = None, **inputs: Any) -> Evaluation:
    """One fixed plan: memory, step time, finish time, cost and every constraint check (the chapter's
    10.6.1 table), as an :class:`~tpopt.models.evaluate.Evaluation` (``.feasible``, ``.metrics``,
    ``.violated()``, ``.to_frame()``, ``.to_dict()``).

    Plan fields (``cards``, ``accelerator``, ``zero_stage``, ``tp``, ``pp``, ``micro_batch``,
    ``recompute``, ``offload``, ``schedule``, ``save_interval``, ``save_mode``, ``nics_per_host``; for a
    MoE model ``ep``, ``expert_tp`` (a number or "tp"), ``capacity`` (a factor or "none")) fix
    the plan; fields left out take the scenario's single-valued ``[search]`` domain (or its first value);
    every other keyword changes the scenario."""
    plan_kw, rest = _split(dict(inputs), PLAN_FIELDS)
    _reject_plan_fields(rest, "evaluate", takes_plan=True)
    sc = _scenario_of(source, rest)
    return evaluate_plan(sc, _plan(sc, dict(plan_kw, cards=cards)))


@dataclass
class Explanation:
    """What ``tpopt explain`` reports, as data: ``status`` (``optimal``/``feasible`` for a request with
    a plan, ``infeasible``/``unknown`` without one; ``feasible``/``infeasible`` for a given plan), and
    the report itself (:meth:`to_dict`: the command's JSON). ``str()`` gives the command's text."""

    kind: str  # "request" or "plan"
    report: dict[str, Any]
    scenario: LoadedScenario

    @property
    def status(self) -> str:
        return cast(str, self.report["status"])

    @property
    def feasible(self) -> bool:
        return self.status in ("optimal", "feasible")

    @property
    def conflict(self) -> list[str]:
        """An irreducible set of constraint families that cannot hold together ([] when feasible)."""
        return list(self.report.get("conflict", []))

    def to_dict(self) -> dict[str, Any]:
        return self.report

    def to_frame(self) -> pandas.DataFrame:
        """Rows worth a table: the smallest single changes (a request without a plan), the binding
        families (a request with one), or the constraint checks that fail or are tightest (a plan)."""
        r = self.report
        if self.kind == "plan":
            rows = [dict(v, violated=True) for v in r["violated"]] or [dict(t, violated=False) for t in r["tightness"]]
        elif self.feasible:
            rows = [{"name": b["name"], "objective_without": b["objective_without"],
                     **{f"without_{k}": v for k, v in b["plan_without"].items()}} for b in r.get("binding", [])]
        else:
            rows = [{k: v for k, v in x.items() if k not in ("plan", "apply", "options", "blocked_by")}
                    for x in r.get("relaxations", [])]
        return records_frame(rows)

    def __str__(self) -> str:
        if self.kind == "plan":
            lines = plan_lines(self.report, self.scenario)
        elif self.scenario.stages:  # each stage's plan, as tpopt solve prints it
            from tpopt.cli.choices import staged_text  # lazy: start-up time (staged scenarios only)

            return staged_text(self.report, self.scenario, False).replace("tpopt solve:", "tpopt explain:", 1)
        elif self.feasible:
            lines = request_lines(self.report, self.scenario)
        else:
            lines = infeasible_lines(self.report, self.scenario, "explain")
        return "\n".join(lines) + "\n"


def explain(source: Source = None, /, *, cards: int | None = None, solver: str = backends.DEFAULT,
            objective: str = "cost", time_limit: float = 60.0, seed: int = 0, workers: int = 1, method: str = "auto",
            **inputs: Any) -> Explanation:
    """Why a request (no ``cards``) or a plan (``cards=...`` and other plan fields, as in
    :func:`evaluate`) is infeasible, or what limits it: a minimal conflict and the smallest single
    change of each input that fixes the request; the constraints a plan violates, or how tight each is."""
    plan_kw, rest = _split(dict(inputs), PLAN_FIELDS)
    _reject_plan_fields(rest, "explain", takes_plan=True)
    req = _request(objective, 1, time_limit, seed, workers, method)  # its clock runs from the call's start
    sc = _scenario_of(source, rest)
    if cards is None:
        if plan_kw:
            raise InputError(f"{sorted(plan_kw)[0]} describes a plan: give cards too (or drop it to explain the "
                             "request)")
        report = explain_request(sc, solver, req, raw=sc.raw or None, catalog=load_catalog(sc.catalog_dirs))
        return Explanation("request", report, sc)  # tpopt solve's question: plan() with batches, stages, offers
    return Explanation("plan", explain_plan(sc, _plan(sc, dict(plan_kw, cards=cards)), solver, req), sc)


@dataclass
class SweepTable:
    """A sweep's rows (one per point: inputs, status, plan, cost, finish, ``pareto``) and its result."""

    result: SweepResult

    @property
    def rows(self) -> list[dict[str, Any]]:
        return self.result.rows

    def front(self) -> list[dict[str, Any]]:
        """The Pareto front of cost against finish time (per case)."""
        return self.result.front()

    def summary(self) -> list[dict[str, Any]]:
        """Per accelerator (and case): the cheapest and the fastest feasible plan."""
        return self.result.summary()

    def to_dict(self) -> dict[str, Any]:
        return {"scenario": self.result.spec.name, "points": len(self.rows), "rows": self.rows,
                "front": self.front(), "summary": self.summary()}

    def to_frame(self) -> pandas.DataFrame:
        """One row per point (integer columns such as cards, tp and zero stay integers)."""
        return records_frame(self.rows)


def sweep(source: Source = None, /, *, hw: Swept = None, deadline: Swept = None, reserved: Swept = None,
          tokens: Swept = None, efficiency: Swept = None, max_cards: Swept = None, card_hour: Swept = None,
          max_cost: Swept = None, solver: str | None = None, time_limit: float | None = None,
          out: str | Path | None = None, force: bool = False, workers: int | None = None, cluster: str | None = None,
          **inputs: Any) -> SweepTable:
    """The optimal plan at every point of a grid and the cost/finish Pareto front (``tpopt sweep``).

    Each swept input is one value, a list, or a range ``"start:end:step"`` (``deadline="20d:40d:1d"``);
    ``hw`` a list or comma string (each accelerator is its own series). ``out`` (.csv, .parquet, .json)
    is written and resumed as by the command; ``cluster`` runs it on Dask (``"local:2"``, ``"tcp://host:8786"``).
    ``solver``: ``auto`` (default), ``enumerate``, ``cpsat``, ``highs`` or ``pyomo:NAME`` (as :func:`solve`; one
    that is not installed raises :class:`~tpopt.errors.InputError` before ``out`` is touched); ``time_limit``:
    seconds per point. Other keywords change the scenario."""
    sc = _scenario_of(source, inputs)
    values: dict[str, Any] = {
        "hw": list(hw) if isinstance(hw, tuple) else hw, "deadline": deadline, "reserved": reserved,
        "tokens": tokens, "efficiency": efficiency, "max_cards": max_cards, "card_hour": card_hour,
        "max_cost": max_cost, "solver": solver, "time_limit": time_limit}
    return SweepTable(run_sweep(sc.raw, out=out, force=force, workers=workers, cluster=cluster,
                          catalog_dirs=sc.catalog_dirs, **{k: v for k, v in values.items() if v is not None}))


# ---------------------------------------------------------------------------------------------
# the other commands: each returns the dict its --json prints (issue 37), from the function the command calls


def estimate(model: str, /, *, hw: str, cards: int | None = None, seq_len: int = 4096, batch: int | None = None,
             efficiency: float | None = None,
             catalog: str | PathLike[str] | Iterable[str | PathLike[str]] = ()) -> dict[str, Any]:
    """``tpopt estimate MODEL --hw HW``: parameters, FLOPs per token, memory per card across ZeRO 0-3 x offload x
    recompute and the fastest layout's step time at ``cards`` (default: the fewest hosts on which a layout fits),
    as :func:`tpopt.optimizer.estimate.estimate` reports it (the command's ``--json``). ``model``: a catalog
    model, a Hugging Face id from the local cache or a config.json; ``efficiency`` a fraction (flat model)."""
    if "," in hw:
        raise InputError("hw: an estimate takes one accelerator")
    return estimate_report(EstimateInputs(model=model, accelerator=hw.strip(), cards=cards, seq_len=seq_len,
                                          global_batch=batch, efficiency=efficiency, catalog_dirs=_dirs(catalog)))


def export(source: Source = None, /, *, format: str, cards: int | None = None, **inputs: Any) -> str:
    """``tpopt export --format FORMAT``: the plan (``cards`` and other plan fields, as in :func:`evaluate`) as the
    framework's launch configuration, the text the command prints (:func:`tpopt.frameworks.export_text`)."""
    plan_kw, rest = _split(dict(inputs), PLAN_FIELDS)
    _reject_plan_fields(rest, "export", takes_plan=True)
    sc = _scenario_of(source, rest)
    if sc.stages:
        raise InputError("export takes one training stage: staged scenarios are not supported")
    return export_text(format, sc, evaluate_plan(sc, _plan(sc, dict(plan_kw, cards=cards))))


def calibrate(source: Source = None, /, *, out: str | Path, measured_step: str | float | None = None,
              runs: str | PathLike[str] | None = None, fit: Sequence[str] | None = None, force: bool = False,
              cards: int | None = None, **inputs: Any) -> dict[str, Any]:
    """``tpopt calibrate``: fit the accelerator's performance parameters to measured steps (``runs``, a CSV of
    measured runs, or ``measured_step`` of the plan given by ``cards`` and plan fields) and write the
    performance.toml override in ``out``; the command's ``--json``
    (:func:`tpopt.optimizer.commands.calibration_report`)."""
    if (measured_step is None) == (runs is None):
        raise InputError("give one of measured_step (with the plan's cards) or runs (a CSV of measured runs)")
    plan_kw, rest = _split(dict(inputs), PLAN_FIELDS)
    _reject_plan_fields(rest, "calibrate", takes_plan=True)
    CAL.target(out, force)
    sc = _scenario_of(source, rest)
    if runs is not None:
        measured = runs_from_csv(str(runs), load_catalog(sc.catalog_dirs), base_raw=sc.raw or None)
    else:
        step = parse_duration(measured_step if isinstance(measured_step, str) else f"{measured_step}s",
                              "measured_step", allow_zero=False)
        measured = [measured_run(sc, _plan(sc, dict(plan_kw, cards=cards)), step)]
    cal, path = calibrate_runs(measured, tuple(fit) if fit else None, out, force)
    return calibration_report(cal, path)


def simulate(source: Source = None, /, *, runs: int = 10_000, solver: str = backends.DEFAULT, objective: str = "cost",
             time_limit: float = 60.0, seed: int = 0, workers: int = 1, method: str = "auto",
             **inputs: Any) -> dict[str, Any] | None:
    """``tpopt simulate``: ``runs`` whole runs of the plan :func:`solve` chooses (seeded) against the analytic
    finish-time law: the command's ``--json``, or None when no plan was found (infeasible or out of time)."""
    if not 1 <= runs <= MAX_SIMULATED_RUNS:
        raise InputError(f"runs must lie in 1..{MAX_SIMULATED_RUNS:,}, got {runs}")
    _reject_plan_fields(inputs, "simulate", takes_plan=False)
    req = _request(objective, 1, time_limit, seed, workers, method)
    return simulation(_scenario_of(source, inputs), solver, req, runs, seed).report


def replan(source: Source = None, /, *, done: str | float, elapsed: str, cards_held: int | None = None,
           solver: str = backends.DEFAULT, objective: str = "cost", time_limit: float = 60.0, seed: int = 0,
           workers: int = 1, method: str = "auto", **inputs: Any) -> dict[str, Any]:
    """``tpopt replan``: re-solve the rest of a run under way (``done``: share of the tokens trained, e.g. "41%";
    ``elapsed``: wall time so far, e.g. "12d"; ``cards_held``: cards the run holds) and decide whether to stay,
    add or release cards; the command's ``--json`` (:func:`tpopt.optimizer.question.replan`)."""
    frac = parse_fraction(done, "done", allow_zero=True, maximum=1.0)
    spent = parse_duration(elapsed, "elapsed")
    if cards_held is not None and cards_held < 1:
        raise InputError("cards_held must be at least 1")
    _reject_plan_fields(inputs, "replan", takes_plan=False)
    req = _request(objective, 1, time_limit, seed, workers, method)
    return replan_report(_scenario_of(source, inputs), frac, spent, cards_held, solver, req)


def rl(source: str | PathLike[str] | None = None, /, *, solver: str = backends.DEFAULT,
       objective: str = "cost", time_limit: float = 60.0, analysis: bool = True,
       catalog: str | PathLike[str] | Iterable[str | PathLike[str]] = (), **inputs: Any) -> dict[str, Any]:
    """``tpopt rl``: plan RL post-training (rollout vs learner cards, rollout TP, sync or one-step async, weight
    sync, the learner's layout) on an RL scenario file (None: the built-in GRPO example); keyword ``inputs`` change it
    (``deadline="3d"``, ``"rl.kept": "80%"``). The command's ``--json`` (:func:`tpopt.optimizer.plan_rl.plan_rl`)."""
    req = _request(objective, 1, time_limit, 0, 1, "auto")
    chosen = backends.resolve(solver)
    chosen.require(req)
    rsc = load_rl_scenario(BUILTIN_RL_SCENARIO if source is None else source, dict(inputs), _dirs(catalog))
    return plan_rl(rsc, chosen, req, analyse=analysis).report


def inverse(source: Source = None, /, *, models: str | Sequence[str] = "qwen3",
            tokens: str | Sequence[float | str] = "10B:2T:16", law: str = "chinchilla",
            target_loss: str | float | None = None, unique_tokens: str | float | None = None,
            max_epochs: str | float = 1, max_cost: str | float | None = None,
            inference_tokens: str | float | None = None, serving_price: str | float | None = None,
            serving_mfu: str | float = "0.3", front: bool = False, generated: str | None = None,
            token_resolution: str | float | None = None, solver: str = backends.DEFAULT,
            time_limit: float = 60.0, seed: int = 0, workers: int = 1, method: str = "auto",
            catalog: str | PathLike[str] | Iterable[str | PathLike[str]] = (), **inputs: Any) -> dict[str, Any]:
    """``tpopt inverse``: the model size (``models``: a family such as ``"qwen3"`` or catalog names) and training
    tokens (``tokens``: ``"LO:HI[:COUNT]"`` or the values) that give the least predicted loss under the budget
    (``max_cost``; None: the scenario's) by the deadline, or the least cost for ``target_loss``; each candidate's
    plan is the cheapest meeting the date; ``generated``: ``"MIN:MAX[:COUNT]"`` parameters of the family's
    rule-generated sizes offered too; ``token_resolution``: how finely a ``"LO:HI"`` range's most tokens are
    refined (default 0.5 %; a list offers its values only). The command's ``--json``
    (:func:`tpopt.optimizer.inverse.ask`)."""
    _reject_plan_fields(inputs, "inverse", takes_plan=False)
    req = _request("cost", 1, time_limit, seed, workers, method)
    sc = scenario(source, inputs, catalog=catalog)
    if not sc.raw:
        raise InputError("inverse needs the scenario's inputs: build it with tpopt.scenario(...) first")
    return ask(sc.raw, sc.catalog_dirs, solver, req, models=models, tokens=tokens, law=law, target_loss=target_loss,
               unique_tokens=unique_tokens, max_epochs=max_epochs, max_cost=max_cost,
               inference_tokens=inference_tokens, serving_price=serving_price, serving_mfu=serving_mfu,
               front=front, generated=generated, token_resolution=token_resolution).out


def sites(source: str | PathLike[str] | Mapping[str, Any], /, *, solver: str = backends.DEFAULT,
          catalog: str | PathLike[str] | Iterable[str | PathLike[str]] = (), **inputs: Any) -> dict[str, Any]:
    """``tpopt sites``: one job over several datacenters (a scenario with ``[[sites]]`` and ``[wan]``): the sites
    used, replicas per site, synchronous or DiLoCo, at the least cost under the deadline and each site's caps;
    keyword ``inputs`` change the scenario. The command's ``--json`` (:func:`tpopt.optimizer.sites.report`)."""
    raw = with_overrides(read_scenario_file(source), inputs) if inputs else source
    return sites_answer(raw, _dirs(catalog), solver)  # a site's own card type or price: the mixed decision


def pools(source: Source = None, /, *, objective: str = "cost", **inputs: Any) -> dict[str, Any]:
    """``tpopt solve`` on a scenario with ``[[hardware.pools]]``: the cheapest (``objective="time"``: earliest)
    mixed plan of data-parallel groups per accelerator type, each pool alone and the comparison; the command's
    ``--json`` (:func:`tpopt.optimizer.pools.pools_dict`)."""
    if objective not in ("cost", "time"):
        raise InputError(f"objective must be 'cost' or 'time' (got {objective!r})")
    sc = _scenario_of(source, inputs)
    if not sc.pools:
        raise InputError("pools: the scenario has no [[hardware.pools]] (plan it with tpopt.solve)")
    from tpopt.optimizer import pools as mixed  # lazy: only mixed-pool scenarios need it (as in tpopt solve)

    return mixed.pools_dict(mixed.solve_pools(sc, "finish" if objective == "time" else "cost"), sc)


def _dirs(catalog: str | PathLike[str] | Iterable[str | PathLike[str]]) -> tuple[str, ...]:
    """Catalog directories: one path or several."""
    return tuple(str(d) for d in ((catalog,) if isinstance(catalog, (str, PathLike)) else catalog))
