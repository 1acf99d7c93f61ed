"""What every plot of the command line shares: the formats, the path check, a headless pyplot and a
byte-deterministic save (presentation only).

PDF, SVG and PNG are written by matplotlib's Agg-family backends without a display. The same data
give the same file: no creation date, SVG ids salted with a fixed string, SVG text kept as text.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import TYPE_CHECKING, Any

from tpopt.errors import InputError, require
from tpopt.files import atomic_path, open_nofollow, refuse_symlink

if TYPE_CHECKING:  # typing only: matplotlib is an optional dependency
    from matplotlib.figure import Figure

FORMATS = (".pdf", ".svg", ".png")
# metadata that would make two runs differ (dates, version strings), removed per format
_METADATA = {".pdf": {"CreationDate": None, "Producer": None}, ".svg": {"Date": None}, ".png": {"Software": None}}


def check_plot_path(path: str, what: str = "--plot", force: bool = False) -> None:
    """The plot file must end in .pdf, .svg or .png, its directory must exist, and it must not exist unless
    ``force`` (the no-overwrite rule of every output; checked before any work)."""
    ext = os.path.splitext(str(path))[1].lower()
    if ext not in FORMATS:
        raise InputError(f"{what}: {str(path)!r} must end in .pdf, .svg or .png")
    if os.path.isdir(path):
        raise InputError(f"{what}: {str(path)!r} is a directory")
    refuse_symlink(path, what)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise InputError(f"{what}: directory {folder!r} does not exist")
    refuse_existing(path, what, force)
    require("matplotlib", "plots", f"{what} {os.path.basename(str(path))}")


def refuse_existing(path: str, what: str, force: bool) -> None:
    """The no-overwrite rule of every output: an existing file at ``path`` only with ``force``."""
    if not force and os.path.exists(path):
        raise InputError(f"{what} {path}: the file exists; pass --force to overwrite it")


def pyplot(salt: str = "tpopt") -> ModuleType:
    """matplotlib.pyplot on the Agg backend, SVG ids salted with ``salt`` and text kept as text."""
    matplotlib = require("matplotlib", "plots", "plotting")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: start-up time

    plt.rcParams["svg.hashsalt"] = salt
    plt.rcParams["svg.fonttype"] = "none"
    return plt


def save_figure(fig: Figure, path: str, what: str = "--plot", **savefig: Any) -> None:
    """Save ``fig`` in the format its extension names, without run-dependent metadata (``savefig``:
    further matplotlib options such as ``bbox_inches``). Whether the file may be replaced was checked before the
    work (:func:`check_plot_path`): here it is replaced atomically."""
    ext = os.path.splitext(str(path))[1].lower()
    check_plot_path(path, what, force=True)
    with atomic_path(path, what) as tmp, open_nofollow(tmp) as fh:  # beside it, renamed on success: never half a plot
        fig.savefig(fh, format=ext[1:], metadata=_METADATA[ext], **savefig)
