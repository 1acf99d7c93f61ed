"""Writing tpopt's output files so that they cannot be turned against their owner and are never left half
written: every file tpopt writes (sweep results, their journal and lock, exports, ``init``, calibrate's
catalog, ``solve --export``, plots) goes through here.

* A file is written to a temporary file created in the target's own folder (``O_CREAT | O_EXCL |
  O_NOFOLLOW``: a name planted there is never opened, a symlink never followed), flushed to disk and
  renamed over the target on success; on any failure the temporary file is removed, so a failed command
  leaves nothing behind and never truncates the file it would have replaced.
* A symlink at the target is refused in one line (:func:`refuse_symlink`): tpopt replaces files it may
  write, never what a link points to.
* A lock file is created exclusively, or reopened without following links, checked to be a plain file
  with one link that this user owns, and only then truncated (:func:`open_lock`).
* Disk full, a file-size limit or a read-only folder become one :class:`InputError` line
  (:func:`write_error`).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from tpopt.errors import InputError

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)

_FULL = {errno.ENOSPC: "disk full", errno.EFBIG: "file too large: the file-size limit was reached",
         getattr(errno, "EDQUOT", errno.ENOSPC): "disk quota exceeded"}


def write_error(what: str, path: str | os.PathLike[str], exc: OSError,
                after: str = "nothing was written there") -> InputError:
    """The one line for a write that failed: what, where, why (disk full named as such) and ``after``
    (what was kept)."""
    why = _FULL.get(exc.errno or 0) or exc.strerror or type(exc).__name__
    return InputError(f"{what}: cannot write {str(path)!r} ({why}); {after}")


def refuse_symlink(path: str | os.PathLike[str], what: str) -> None:
    """One :class:`InputError` line if ``path`` is a symbolic link (dangling or not)."""
    if os.path.islink(path):
        raise InputError(f"{what}: {str(path)!r} is a symbolic link; tpopt does not write through links "
                         f"(give the real path or remove the link)")


def _mode() -> int:
    """The permissions ``open()`` would give a new file (0666 less the process's umask)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def fsync_dir(folder: str | os.PathLike[str]) -> None:
    """Make a rename in ``folder`` durable (best effort: some file systems refuse a directory fsync)."""
    try:
        fd = os.open(str(folder), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def atomic_path(path: str | os.PathLike[str], what: str) -> Iterator[Path]:
    """A fresh temporary path in ``path``'s folder for a writer that takes a file name (matplotlib, Pyomo):
    the block writes it; on success it is flushed and renamed over ``path``, on any exception removed.

    The temporary file is created exclusively (``mkstemp``: ``O_EXCL | O_NOFOLLOW``); a symlink at ``path``
    is refused before and again just before the rename."""
    target = Path(path)
    refuse_symlink(target, what)
    folder = target.parent if str(target.parent) else Path(".")
    import tempfile  # lazy: start-up time (only when a file is written)

    try:
        fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=str(folder))
    except OSError as exc:
        raise write_error(what, target, exc) from None
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, _mode())  # mkstemp makes it 0600; the file gets what open() would give it
        fd = os.open(tmp, os.O_RDONLY | _NOFOLLOW)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        refuse_symlink(target, what)
        os.replace(tmp, target)
    except OSError as exc:
        raise write_error(what, target, exc) from None
    finally:
        try:
            tmp.unlink()
        except FileNotFoundError:
            pass
    fsync_dir(folder)


def open_nofollow(tmp: str | os.PathLike[str]) -> BinaryIO:
    """The temporary file of :func:`atomic_path` opened for writing without following a link (should its name
    have been swapped for one since it was created)."""
    return os.fdopen(os.open(tmp, os.O_WRONLY | os.O_TRUNC | _NOFOLLOW), "wb")


def write_atomic(path: str | os.PathLike[str], data: str | bytes, what: str = "output") -> None:
    """Write ``data`` (text as UTF-8) to ``path`` through a temporary file in its folder, renamed on
    success: the target is either the old file or the whole new one, never a part."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with atomic_path(path, what) as tmp, open_nofollow(tmp) as fh:
        view = memoryview(raw)
        while view:  # os.write: a short write (a file-size limit) goes on until the error it meets
            view = view[os.write(fh.fileno(), view):]


def open_append(path: str | os.PathLike[str], what: str) -> int:
    """A descriptor appending to ``path``, a plain file tpopt has just written (never through a link)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | _NOFOLLOW)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            refuse_symlink(path, what)
        raise write_error(what, path, exc) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise InputError(f"{what}: {str(path)!r} is not a regular file")
    return fd


def open_lock(path: str | os.PathLike[str], what: str = "lock file") -> int:
    """A read-write descriptor on the lock file ``path``, created exclusively, or the one an earlier run
    left, reopened without following links: refused unless a plain file with one link, owned by this user,
    empty or holding a process id (so truncating it never harms a file tpopt did not create)."""
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o644)
    except FileExistsError:
        pass
    except OSError as exc:
        raise write_error(what, path, exc) from None
    try:
        fd = os.open(path, os.O_RDWR | _NOFOLLOW)
    except FileNotFoundError:  # removed by its holder in between: create it again
        return open_lock(path, what)
    except OSError as exc:
        if exc.errno == errno.ELOOP or os.path.islink(path):
            refuse_symlink(path, what)
        raise write_error(what, path, exc) from None
    st = os.fstat(fd)
    head = os.pread(fd, 64, 0).strip() if stat.S_ISREG(st.st_mode) else b""
    if (not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or (hasattr(os, "getuid") and st.st_uid != os.getuid())
            or st.st_size > 32 or not (head == b"" or head.isdigit())):
        os.close(fd)
        raise InputError(f"{what}: {str(path)!r} exists and is not a lock file tpopt left (a plain file with one "
                         f"link, owned by you, holding a process id); remove it")
    return fd
