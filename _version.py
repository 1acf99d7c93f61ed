"""The version of tpopt, declared once: a ground module (it imports nothing), read by pyproject.toml
(``[tool.setuptools.dynamic]``), by the package face (``tpopt.__version__``) and by the modules that stamp
what they write (the sweep's stores, tasks and cluster check)."""

__version__ = "0.1.0"
