"""Error types shared by every layer.

``InputError`` is the one exception the CLI turns into a single line on stderr and exit code 2:
bad units, unknown names, malformed files, impossible values. Anything else is a bug.
"""

import importlib
from types import ModuleType


class InputError(ValueError):
    """User input that cannot be used as given (the message says what and how to fix it)."""


def require(module: str, extra: str, what: str) -> ModuleType:
    """Import an optional dependency, or raise :class:`InputError` naming the extra that installs it.

    ``require("pyarrow.parquet", "parquet", "--out .parquet")`` -> the module, or the one-line error
    "--out .parquet needs pyarrow, which is not installed: pip install 'tpopt[parquet]'".
    """
    try:
        return importlib.import_module(module)
    except ImportError:
        dist = module.split(".")[0]
        raise InputError(f"{what} needs {dist}, which is not installed: pip install 'tpopt[{extra}]'") from None
