"""The ``tpopt`` command group. Each subcommand lives in its own module and stays thin."""

from __future__ import annotations

import gc
import importlib
import importlib.util
import os
import sys
from types import ModuleType

import click

from tpopt._version import __version__
from tpopt.cli.kept_code import dataclass_code_kept
from tpopt.optimizer import limits

# subcommand name -> "module:attribute"; modules are imported only when the command runs,
# so `tpopt --help` and each command start fast.
COMMANDS = {
    "evaluate": "tpopt.cli.evaluate:evaluate",
    "solve": "tpopt.cli.solve:solve",
    "explain": "tpopt.cli.explain:explain",
    "sweep": "tpopt.cli.sweep:sweep",
    "pipeline": "tpopt.cli.pipeline:pipeline",
    "checkpoint": "tpopt.cli.reliability:checkpoint",
    "stragglers": "tpopt.cli.reliability:stragglers",
    "catalog": "tpopt.cli.catalog:catalog",
    "calibrate": "tpopt.cli.calibrate:calibrate",
    "init": "tpopt.cli.init:init",
    "rl": "tpopt.cli.rl:rl",
    "estimate": "tpopt.cli.estimate:estimate",
    "export": "tpopt.cli.export:export",
    "simulate": "tpopt.cli.simulate:simulate",
    "replan": "tpopt.cli.simulate:replan",
    "inverse": "tpopt.cli.inverse:inverse",
    "sites": "tpopt.cli.sites:sites",
}

HELP = {
    "evaluate": "Evaluate one fixed plan: memory, step time, finish time, cost, constraints.",
    "solve": "Find the cost-minimal plan that meets the deadline (CP-SAT, HiGHS or enumeration).",
    "explain": "Explain a plan or an infeasible request: conflicts and minimal relaxations.",
    "sweep": "Pareto sweep of cost against finish time across hardware and deadlines.",
    "pipeline": "Simulate one pipeline-parallel step under a schedule (event model).",
    "checkpoint": "Checkpoint interval table: save, redo and restart overhead.",
    "stragglers": "Expected step time with per-card jitter; wait / redistribute / evict.",
    "catalog": "List catalog entries (accelerators, models, links, storage).",
    "calibrate": "Fit an accelerator's performance parameters to measured steps; write a catalog override.",
    "init": "Write a commented scenario file to start from.",
    "rl": "Plan RL post-training: rollout vs learner cards, shared or separate, sync or async.",
    "estimate": "Quick estimate by model name: parameters, FLOPs/token, memory across ZeRO x offload x recompute.",
    "export": "Write a plan as Megatron-LM, NeMo (Megatron-Bridge), torchtitan or DeepSpeed launch config.",
    "simulate": "Simulate the plan's whole run (seeded) against its analytic finish-time distribution.",
    "replan": "Re-solve the rest of a run under way: stay, add or release cards.",
    "inverse": "Choose model size and training tokens: least predicted loss for a budget and date (scaling laws).",
    "sites": "Plan one job over several datacenters: sites, replicas, synchronous or DiLoCo (H, fragments).",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name in COMMANDS if self._available(name)]

    @staticmethod
    def _available(name: str) -> bool:
        module = COMMANDS[name].split(":")[0]
        return importlib.util.find_spec(module) is not None

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS or not self._available(name):
            return None
        module, attr = COMMANDS[name].split(":")
        if FREEZE_IMPORTS[0]:  # the tpopt program: its allocator set before the command's arrays (not for --help)
            tune_allocator()
        command: click.Command = getattr(import_quietly(module), attr)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, HELP.get(name, "")) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


FREEZE_IMPORTS = [False]
"""Whether this is the ``tpopt`` program (which also sets its allocator as a command loads: :func:`tune_allocator`),
whose :func:`import_quietly` moves what the import left into the collector's permanent generation: set by
the ``tpopt`` program alone (:func:`_main`), never on import nor under click's test runner, whose process goes on
running other code (a freeze there would keep that code's garbage cycles for good)."""


def import_quietly(module: str) -> ModuleType:
    """``importlib.import_module`` with the cyclic garbage collector paused: a subcommand's import creates
    tens of thousands of long-lived objects (functions, classes, dataclass fields) and no garbage, so the
    collections it would trigger find nothing; paused, the headline starts about 10-20 ms (5 %) sooner.
    The collector is switched back on as it was, whatever the import raises. In the ``tpopt`` program
    (:data:`FREEZE_IMPORTS`) those objects then go to the permanent generation (``gc.freeze``): they live as long
    as the process anyway, and the command's own collections no longer traverse them (the headline's two
    middle-generation collections took 20-35 ms of its 0.3 CPU s, 2-6 ms frozen)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        out = importlib.import_module(module)
        if FREEZE_IMPORTS[0]:
            gc.freeze()
        return out
    finally:
        if was_enabled:
            gc.enable()


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tpopt")
def cli() -> None:
    """tpopt: the cheapest training plan that surely finishes before the deadline."""


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc mallopt parameters
HEAP_ARRAYS_MAX = 32 * 1024 * 1024  # glibc's largest mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX)
HEAP_KEEP = 256 * 1024 * 1024  # freed heap kept mapped (an enumeration chunk's temporaries exceed 64 MiB)


def tune_allocator() -> None:
    """For the ``tpopt`` program only (never on import, so a Python API user's process keeps its own
    settings): serve allocations of up to 32 MiB from the heap and keep up to 256 MiB of freed heap
    mapped (glibc ``mallopt`` M_MMAP_THRESHOLD and M_TRIM_THRESHOLD).

    Enumerations allocate and free the same large temporaries chunk after chunk; with glibc's defaults
    each is mapped anew and its zeroed pages faulted in every time. Measured on the usable-memory
    relaxation of benchmarks/solve_scaling.py's 108-million-plan space: 32 CPU s with the defaults,
    16-17 s with this (same answer, lower peak memory). Only speed changes; a no-op off glibc. The program calls
    it as a command loads (:meth:`LazyGroup.get_command`), so ``tpopt --help`` loads no ``ctypes``."""
    import ctypes  # lazy: start-up time (tpopt --help; numpy loads it for every command anyway)

    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(M_MMAP_THRESHOLD, HEAP_ARRAYS_MAX)
        libc.mallopt(M_TRIM_THRESHOLD, HEAP_KEEP)
    except (OSError, AttributeError):
        pass


BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")  # OpenBLAS reads them in order


def blas_one_thread() -> None:
    """For the ``tpopt`` program only (never on import): numpy's OpenBLAS starts with one thread unless the
    environment asks for more (any of :data:`BLAS_THREAD_VARS` set is left as it is).

    Importing numpy starts OpenBLAS's thread pool, one thread per core, which no command needs: tpopt's array
    work is elementwise, and its BLAS/LAPACK calls are small (Gauss-Legendre nodes of 16 and 64 points, a
    calibration's covariance, a matrix-vector product over site replicas), bit for bit the same on one thread
    (checked against two: leggauss up to 500 points, a 20 x 20 inverse, a 100,000 x 3 product; a 300 x 300
    product is where they differ). Measured (2 cores): ``import numpy`` 0.106 -> 0.085 CPU s, more with more
    cores. Set before numpy loads; child processes (sweep workers, external solvers) inherit it."""
    if not any(v in os.environ for v in BLAS_THREAD_VARS):
        os.environ["OPENBLAS_NUM_THREADS"] = "1"


def main() -> None:
    """Entry point: click's usage errors become one stderr line and exit 2, like every input error."""

    with limits.command_started():  # --time-limit counts from here (loading the subcommand and scenario included)
        with dataclass_code_kept():  # the data classes' functions compiled in an earlier run (start-up time)
            _main()


def _main() -> None:
    blas_one_thread()
    FREEZE_IMPORTS[0] = True
    try:
        rv = cli.main(prog_name="tpopt", standalone_mode=False)
    except click.exceptions.UsageError as exc:
        hint = f" (see 'tpopt {exc.ctx.command_path.split(' ', 1)[1]} --help')" if exc.ctx and " " in \
            exc.ctx.command_path else " (see 'tpopt --help')"
        click.echo(f"tpopt: error: {exc.format_message()}{hint}", err=True)
        sys.exit(2)
    except click.exceptions.Abort:
        click.echo("tpopt: error: interrupted", err=True)
        sys.exit(130)
    except click.exceptions.ClickException as exc:
        click.echo(f"tpopt: error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":
    main()
