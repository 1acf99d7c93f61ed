"""Cold start of the headline (issue 39, item 4): what `tpopt solve --deadline 30d --hw rtx4090` leaves unloaded,
and the one-thread OpenBLAS default of the ``tpopt`` program (cli/main.py blas_one_thread)."""

import os
import subprocess
import sys

import pytest

from tpopt.cli import main as cli_main

HEADLINE = ("import os, sys\nfrom tpopt.cli.main import main\nsys.argv = ['tpopt', 'solve', '--deadline', '30d', "
            "'--hw', 'rtx4090']\ntry:\n    main()\nexcept SystemExit as e:\n    assert e.code == 0, e.code\n")


def run_headline(extra: str, env: dict[str, str]) -> str:
    return subprocess.run([sys.executable, "-c", HEADLINE + extra], capture_output=True, text=True, check=True,
                          env=env).stdout


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in cli_main.BLAS_THREAD_VARS}


def test_headline_leaves_sites_recipes_and_shutil_unloaded():
    # the design case has no [[sites]] and a dense model (no MoE recipe); no unknown name to suggest for;
    # its progress line is not drawn (not a terminal), so shutil (with bz2 and lzma) stays out
    unwanted = ("tpopt.models.sites", "tpopt.catalogs.recipes", "difflib", "shutil", "bz2", "lzma")
    out = run_headline(f"print('LOADED', sorted(m for m in {unwanted!r} if m in sys.modules))\n", clean_env())
    assert "Status: optimal" in out and "LOADED []" in out


def test_headline_runs_openblas_on_one_thread_unless_asked():
    probe = "print('THREADS', os.environ.get('OPENBLAS_NUM_THREADS'), os.environ.get('OMP_NUM_THREADS'))\n"
    assert "THREADS 1 None" in run_headline(probe, clean_env())
    assert "THREADS None 3" in run_headline(probe, {**clean_env(), "OMP_NUM_THREADS": "3"})
    assert "THREADS 2 None" in run_headline(probe, {**clean_env(), "OPENBLAS_NUM_THREADS": "2"})


@pytest.mark.parametrize("given", [None, *cli_main.BLAS_THREAD_VARS])
def test_blas_one_thread_sets_only_an_unset_environment(monkeypatch, given):
    for v in cli_main.BLAS_THREAD_VARS:
        monkeypatch.delenv(v, raising=False)
    if given is not None:
        monkeypatch.setenv(given, "4")
    cli_main.blas_one_thread()
    assert os.environ.get("OPENBLAS_NUM_THREADS") == ("1" if given is None else "4" if given ==
                                                      "OPENBLAS_NUM_THREADS" else None)


def test_help_loads_no_ctypes_and_a_command_sets_the_allocator():
    # tune_allocator (glibc mallopt through ctypes) runs as the program loads a command, not for `tpopt --help`
    probe = ("import sys\nfrom tpopt.cli import main as m\ncalls = []\nm.tune_allocator = lambda: calls.append(1)\n"
             "sys.argv = ['tpopt'] + sys.argv[1:]\ntry:\n    m.main()\n"
             "except SystemExit as e:\n    assert e.code == 0\n"
             "print('CTYPES', 'ctypes' in sys.modules, 'TUNED', len(calls))\n")
    run = [sys.executable, "-c", probe]
    assert "CTYPES False TUNED 0" in subprocess.run(run + ["--help"], capture_output=True, text=True,
                                                     check=True).stdout
    out = subprocess.run(run + ["solve", "--deadline", "30d", "--hw", "rtx4090"], capture_output=True, text=True,
                         check=True).stdout
    assert "Status: optimal" in out and "TUNED 1" in out
