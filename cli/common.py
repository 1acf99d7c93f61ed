"""Shared CLI plumbing: one-line errors, exit codes, JSON output. No domain logic here."""

from __future__ import annotations

import functools
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, ParamSpec, TypeVar, overload

import click

from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import BUILTIN_SCENARIO, load_scenario
from tpopt.catalogs.starter import (
    DESIGN_HW,
    defaults_text,
    hardware_names,
    model_entry,
    question_tables,
    stated_defaults,
)
from tpopt.cli.render import fit_lines
from tpopt.errors import InputError
from tpopt.files import refuse_symlink
from tpopt.models.plan import Plan, Scenario
from tpopt.models.variables import PLAN_INPUTS, PlanInput
from tpopt.optimizer import backends
from tpopt.optimizer.limits import MAX_TIME_LIMIT
from tpopt.plan_fields import plan_from as plan_of_fields

EXIT_OK = 0
EXIT_INPUT = 2  # bad input: unknown names, malformed files, bad units
EXIT_INFEASIBLE = 3  # a well-formed request that no plan satisfies
EXIT_UNKNOWN = 4  # no plan found and no proof of infeasibility within the time limit

P = ParamSpec("P")
R = TypeVar("R")
CommandFn = TypeVar("CommandFn", bound=Callable[..., Any])  # a command function, before click wraps it


def fail(message: str, code: int = EXIT_INPUT) -> NoReturn:
    """Print one line on stderr and exit with ``code`` (no traceback)."""
    click.echo(f"tpopt: error: {message}", err=True)
    sys.exit(code)


def handle_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn :class:`InputError` (and unreadable files) into one stderr line and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except InputError as exc:
            fail(str(exc))
        except click.exceptions.Exit:
            raise
        except KeyboardInterrupt:
            fail("interrupted", 130)

    return wrapper


MAX_SEED = 2**31 - 1  # CP-SAT and HiGHS take 32-bit seeds
MAX_WORKERS = 64  # solver threads / sweep processes


def check_run_options(time_limit: float | None = None, seed: int | None = None, workers: int | None = None,
                      top: int | None = None) -> None:
    """Bounds of the solver options (finite, in range, the bound in the message)."""


    if time_limit is not None and not (math.isfinite(time_limit) and 0 < time_limit <= MAX_TIME_LIMIT):
        raise InputError(f"--time-limit: {time_limit!r} must be a positive number of seconds up to "
                         f"{MAX_TIME_LIMIT:,.0f} (7 days)")
    if seed is not None and not 0 <= seed <= MAX_SEED:
        raise InputError(f"--seed: {seed} must be between 0 and {MAX_SEED:,}")
    if workers is not None and not 1 <= workers <= MAX_WORKERS:
        raise InputError(f"--workers: {workers} must be between 1 and {MAX_WORKERS}")
    if top is not None and not 1 <= top <= 1000:
        raise InputError(f"--top: {top} must be between 1 and 1,000")


def check_output_path(path: str | Path, what: str = "output") -> None:
    """An output file path must not be a directory and its folder must exist (checked before any work,
    so that nothing is computed for a file that cannot be written)."""

    p = Path(path)
    if p.is_dir():
        raise InputError(f"{what}: {str(p)!r} is a directory, not a file")
    refuse_symlink(p, what)
    if not p.parent.is_dir():
        raise InputError(f"{what}: folder {str(p.parent)!r} does not exist")


def check_new_file(path: str | Path, what: str, force: bool = False) -> None:
    """An output file the command will write: not a directory, in an existing folder this process can
    write in (probed with a temporary file, removed at once), and not an existing file unless ``force``
    (the no-overwrite rule of every output). Checked before any work."""
    check_output_path(path, what)
    p = Path(path)
    if p.exists() and not force:
        raise InputError(f"{what} {path}: the file exists; pass --force to overwrite it")
    import tempfile  # lazy: start-up time (only when a file is written)

    try:
        with tempfile.NamedTemporaryFile(prefix=".tpopt-probe-", dir=str(p.parent)):
            pass
    except OSError as exc:
        raise InputError(f"{what} {path}: cannot write in folder {str(p.parent)!r} "
                         f"({exc.strerror or type(exc).__name__})") from None


def dump_json(obj: object) -> str:
    """Deterministic JSON: sorted keys off (report order matters), fixed float repr, trailing newline.

    JSON has no infinity nor NaN: such a value (a plan whose shape the schedule cannot run, an unbounded
    limit) is written as null, and a top-level object lists where under "non_finite" (each path with the
    value it stood for: "metrics.step_s: inf")."""
    where: list[str] = []
    clean = _finite_json(obj, "", where)
    if where and isinstance(clean, dict):
        clean["non_finite"] = [*clean.get("non_finite", []), *where]
    return json.dumps(clean, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def _finite_json(obj: object, path: str, where: list[str]) -> object:
    """``obj`` with every non-finite float replaced by None, its path and value appended to ``where``."""
    if isinstance(obj, float):  # numpy's float64 is a float
        if math.isfinite(obj):
            return obj
        where.append(f"{path or '.'}: {obj}")
        return None
    if isinstance(obj, dict):
        return {k: _finite_json(v, f"{path}.{k}" if path else str(k), where) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite_json(v, f"{path}[{i}]", where) for i, v in enumerate(obj)]
    return obj


# ---------------------------------------------------------------------------------------------
# options shared by the commands that read a scenario


def _o(*decls: str, **attrs: Any) -> tuple[tuple[str, ...], dict[str, Any]]:
    """A click option's declarations and attributes, applied later (so a command can leave it out)."""
    return decls, attrs


@overload
def scenario_options(fn: CommandFn, *, without: tuple[str, ...] = (),
                     default_help: str | None = None) -> CommandFn: ...


@overload
def scenario_options(fn: None = None, *, without: tuple[str, ...] = (),
                     default_help: str | None = None) -> Callable[[CommandFn], CommandFn]: ...


def scenario_options(fn: CommandFn | None = None, *, without: tuple[str, ...] = (),
                     default_help: str | None = None) -> CommandFn | Callable[[CommandFn], CommandFn]:
    """--scenario plus the inputs a user most often changes from the command line. ``without`` leaves out
    options a command has no use for (``tpopt rl`` derives tokens, batch and sequence length from [rl]), so
    its --help lists only what it takes; ``default_help`` names the command's own built-in scenario."""
    if fn is None:
        return lambda f: scenario_options(f, without=without, default_help=default_help)
    opts = [
        _o("--scenario", "scenario_path", default=None, type=click.Path(dir_okay=False),
                     help=f"Scenario TOML file [default: {default_help or 'the built-in design case'}; "
                          f"'tpopt init' writes one]."),
        _o("--catalog", "catalog_dirs", multiple=True, type=click.Path(file_okay=False),
                     help="Extra catalog directory (repeatable); its entries override built-ins."),
        _o("--model", help=MODEL_HELP),
        _o("--deadline", help="Deadline, e.g. 30d or 720h (overrides [schedule] deadline)."),
        _o("--reserved", help="Reserved days inside the deadline, e.g. 5d."),
        _o("--tokens", help=TOKENS_HELP),
        _o("--efficiency", help="Compute efficiency, e.g. 40% or 0.4."),
        _o("--hw", help="Accelerator(s), comma-separated, e.g. rtx4090,h100-sxm, or 'all' (every card with a "
                        "market offer)."),
        _o("--max-cards", help="Largest card count the plan may use."),
        _o("--usable-memory", help="Usable memory per card, e.g. 22GiB."),
        _o("--global-batch", help="Global batch(es) in sequences, comma-separated: the plan's batch "
                                            "(evaluate) or the choices (solve); see --critical-batch."),
        _o("--critical-batch", help="Critical batch B_noise: tokens (2M), sequences (256seq), "
                                              "deepseek-llm (scaling fit) or none."),
        _o("--seq-len", help="Tokens per sequence (overrides [task] seq_len)."),
        _o("--confidence", help="Require P(finish <= deadline) >= this, e.g. 95% ([schedule] confidence)."),
        _o("--step-sigma", help="Log-sd of the step-time model error ([risk] step_sigma), e.g. 0.1."),
    ]
    for decls, attrs in reversed(opts):
        if decls[0].removeprefix("--") not in without:
            fn = click.option(*decls, **attrs)(fn)
    return fn


SCENARIO_KEYS = ("scenario_path", "catalog_dirs", "model", "deadline", "reserved", "tokens", "efficiency", "hw",
                 "max_cards", "usable_memory", "global_batch", "critical_batch", "seq_len", "confidence", "step_sigma")


def overrides_from(kw: dict[str, Any]) -> dict[str, Any]:
    """Raw-table overrides from the shared scenario options (None = not given)."""
    hw = kw.get("hw")
    names = list(hardware_names(hw, (), None)) if hw is not None else None
    batches = [b.strip() for b in str(kw["global_batch"]).split(",") if b.strip()] if kw.get("global_batch") \
        else None
    return {
        **model_overrides(kw),
        "schedule.deadline": kw.get("deadline"),
        "schedule.reserved": kw.get("reserved"),
        "task.tokens": kw.get("tokens"),
        "hardware.efficiency": kw.get("efficiency"),
        "hardware.accelerator": names,
        "search.accelerator": names,
        "search.max_cards": kw.get("max_cards"),
        "hardware.usable_memory": kw.get("usable_memory"),
        "search.global_batch": batches,
        # a question without a scenario file: one batch is the task's (no file states a reference batch)
        "task.global_batch": batches[0] if batches and len(batches) == 1 and asks_question(kw) else None,
        "task.critical_batch": kw.get("critical_batch"),
        "task.seq_len": kw.get("seq_len"),
        "search.memory_budget": kw.get("memory_budget"),  # the solver options' --memory-budget
        "schedule.confidence": kw.get("confidence"),
        "risk.step_sigma": kw.get("step_sigma"),
    }


MODEL_HELP = ("Model: a catalog name (tpopt catalog models), a Hugging Face id org/name from the local cache (never "
              "downloaded) or a config.json path. Overrides [model]; without --scenario the question is built on "
              "tpopt init's starting scenario (per-operation step time), every default it takes stated in the "
              "output.")
TOKENS_HELP = ("Training tokens: a number with an optional suffix k (1e3), M (1e6), B (1e9) or T (1e12), decimals "
               "allowed, e.g. 100B, 1.5T or 2e12.")


def model_overrides(kw: dict[str, Any]) -> dict[str, Any]:
    """``--model`` as the [model] table's entries (:func:`tpopt.catalogs.starter.model_entry`: a config.json path
    made absolute, or a catalog name / Hugging Face id checked now); the other key is cleared (None = not
    given is skipped, so the entry replaces the table's model, not adds a second one)."""
    if kw.get("model") is None:
        return {}
    entry = model_entry(str(kw["model"]), load_catalog(kw.get("catalog_dirs") or ()))
    return {f"model.{key}": value for key, value in entry.items()}


def asks_question(kw: dict[str, Any]) -> bool:
    """The model is named on the command line with no scenario file (and not tpopt rl's built-in example):
    the scenario is tpopt init's starting scenario for that model."""
    return kw.get("model") is not None and not kw.get("scenario_path") and kw.get("_builtin") != "rl"


def question_source(kw: dict[str, Any]) -> dict[str, Any]:
    """The starting scenario's raw tables for ``--model`` on ``--hw`` (default: tpopt init's)."""
    cat = load_catalog(kw.get("catalog_dirs") or ())
    return question_tables(str(kw["model"]), hardware_names(kw.get("hw"), DESIGN_HW, cat), cat)


def question_defaults(kw: dict[str, Any]) -> dict[str, Any]:
    """The starting scenario's values the command line did not give (``table.key`` -> value)."""
    return stated_defaults(question_source(kw), {k: v for k, v in overrides_from(kw).items() if v is not None})


def scenario_source(kw: dict[str, Any]) -> str | Path | dict[str, Any]:
    """The scenario the options name: --scenario, the starting scenario of a question asked with --model
    (raw tables), else the built-in design case."""
    if asks_question(kw):
        return question_source(kw)
    return kw.get("scenario_path") or BUILTIN_SCENARIO


def builtin_note(kw: dict[str, Any]) -> str | None:
    """The line a command prints first when it runs on the built-in scenario, or on the starting scenario of
    a question asked with --model (None with --scenario)."""
    if kw.get("scenario_path"):
        return None
    if kw.get("_builtin") == "rl":
        return "Scenario: built-in RL example (GRPO, Qwen3-8B policy, H100); use --scenario FILE for yours."
    if asks_question(kw):
        return (f"Scenario: {kw['model']} from the command line on tpopt init's starting scenario, per-operation "
                f"step time; defaults taken: {defaults_text(question_defaults(kw))} (a flag or --scenario FILE "
                f"changes them).")
    return "Scenario: built-in design case (the chapter's Qwen3-8B example); use --scenario FILE or tpopt init."


def echo_builtin_note(kw: dict[str, Any], as_json: bool = False, out: dict[str, Any] | None = None) -> None:
    """Say that the built-in scenario is used: the first line of the text output, or, with --json,
    ``"scenario_source": "built-in design case"`` in ``out`` (stdout stays one JSON document); a question
    asked with --model: ``"scenario_source": "command line"`` and ``"stated_defaults"`` (``table.key`` ->
    the starting scenario's value)."""
    note = builtin_note(kw)
    if not note:
        return
    if as_json:
        if out is not None:
            if asks_question(kw):
                out["scenario_source"] = "command line"
                out["stated_defaults"] = question_defaults(kw)
            else:
                out["scenario_source"] = "built-in RL example" if kw.get("_builtin") == "rl" \
                    else "built-in design case"
        return
    click.echo(fit_lines(note))


def load_scenario_from(kw: dict[str, Any], extra: dict[str, Any] | None = None, *, pools: bool = False) -> Scenario:
    """Build the scenario named by the shared options (plus command-specific raw overrides). ``pools``: the
    command plans [[hardware.pools]] (``tpopt solve``); every other command refuses them in one line."""

    ov = overrides_from(kw)
    if extra:
        ov.update(extra)
    sc = load_scenario(scenario_source(kw), ov, kw.get("catalog_dirs") or ())
    if sc.pools and not pools:
        raise InputError("[[hardware.pools]]: a mixed plan over accelerator pools is planned by `tpopt solve` only "
                         "(drop the pools for this command)")
    return sc


@overload
def plan_options(fn: CommandFn, *, require_cards: bool = True, cards_help: str | None = None) -> CommandFn: ...


@overload
def plan_options(fn: None = None, *, require_cards: bool = True,
                 cards_help: str | None = None) -> Callable[[CommandFn], CommandFn]: ...


def plan_options(fn: CommandFn | None = None, *, require_cards: bool = True,
                 cards_help: str | None = None) -> CommandFn | Callable[[CommandFn], CommandFn]:
    """Flags that fix one plan: --cards (required unless ``require_cards=False``, then with ``cards_help``, the
    command's own words, or :data:`OPTIONAL_CARDS_HELP`); the rest default from the scenario. Use as
    ``@plan_options`` or ``@plan_options(require_cards=False)``."""
    if fn is None:
        return lambda f: plan_options(f, require_cards=require_cards, cards_help=cards_help)
    opts = [_plan_option(i, require_cards, cards_help) for i in PLAN_INPUTS if i.flag is not None]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


OPTIONAL_CARDS_HELP = "Card count of the plan to explain (omit to explain the request as a whole)."
"""--cards where it may be left out (``require_cards=False``); required, it has its plan input's help."""


def _plan_option(i: PlanInput, require_cards: bool, cards_help: str | None = None) -> Callable[[CommandFn], CommandFn]:
    """The click option of one plan input (:data:`tpopt.models.variables.PLAN_INPUTS`)."""
    assert i.flag is not None
    help = (cards_help or OPTIONAL_CARDS_HELP) if i.key == "cards" and not require_cards else i.help
    if i.boolean:
        return click.option(i.flag, i.key, default=None, help=help)
    kind = click.Choice(list(i.choices)) if i.choices else i.type
    return click.option(i.flag, i.key, type=kind, required=require_cards and i.key == "cards", help=help)


def plan_from(sc: Scenario, kw: dict[str, Any]) -> Plan:
    """A :class:`Plan` from the plan flags (:func:`tpopt.plan_fields.plan_from`)."""

    return plan_of_fields(sc, kw)


if TYPE_CHECKING:  # newer click declares ParamType generic (value, input); the plain class at run time keeps 8.1
    _TextParam = click.ParamType[str, object]
else:
    _TextParam = click.ParamType


class SolverName(_TextParam):
    """``--solver``: a registered backend (:mod:`tpopt.optimizer.backends`: cpsat, highs, enumerate, or
    pyomo:NAME, any solver Pyomo drives). Whether NAME is installed is checked when the command runs."""

    name = "solver"

    def names(self) -> tuple[str, ...]:
        """The plain names this option takes (families come from the registry too)."""
        return backends.names()

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> str:
        v = str(value).strip()
        if v in self.names() or backends.accepts_syntax(v):
            return v
        self.fail(backends.not_a_solver(value), param, ctx)

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return backends.metavar(self.names())
