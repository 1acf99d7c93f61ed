"""Shared CLI plumbing: one-line errors, exit codes, JSON output. No domain logic here."""

from __future__ import annotations

import functools
import json
import sys

import click

from tpopt.errors import InputError

EXIT_OK = 0
EXIT_INPUT = 2  # bad input: unknown names, malformed files, bad units
EXIT_INFEASIBLE = 3  # a well-formed request that no plan satisfies


def fail(message: str, code: int = EXIT_INPUT):
    """Print one line on stderr and exit with ``code`` (no traceback)."""
    click.echo(f"tpopt: error: {message}", err=True)
    sys.exit(code)


def handle_errors(fn):
    """Turn :class:`InputError` (and unreadable files) into one stderr line and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except InputError as exc:
            fail(str(exc))
        except click.exceptions.Exit:
            raise
        except KeyboardInterrupt:
            fail("interrupted", 130)

    return wrapper


def dump_json(obj) -> str:
    """Deterministic JSON: sorted keys off (report order matters), fixed float repr, trailing newline."""
    return json.dumps(obj, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
