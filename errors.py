"""Error types shared by every layer.

``InputError`` is the one exception the CLI turns into a single line on stderr and exit code 2:
bad units, unknown names, malformed files, impossible values. Anything else is a bug.
"""


class InputError(ValueError):
    """User input that cannot be used as given (the message says what and how to fix it)."""
