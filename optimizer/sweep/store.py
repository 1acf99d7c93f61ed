"""The sweep's output file and its journal: rows appended (flush + fsync) as they finish, the final file
written atomically with rows sorted, resuming from what an earlier run left, under an exclusive lock.

Only the driver writes here; workers only compute rows.
"""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpopt._version import __version__
from tpopt.errors import InputError, require
from tpopt.files import fsync_dir, open_append, open_lock, refuse_symlink, write_atomic, write_error
from tpopt.optimizer.sweep.rows import (
    COLUMN_NAMES,
    COLUMNS,
    FORMAT,
    PROVEN,
    STATUSES,
    Row,
    _clean,
    cell,
    checksum_ok,
    sort_key,
)

OUT_FORMATS = (".csv", ".parquet", ".json")

HEADER = ",".join(COLUMN_NAMES)


def _csv_line(row: Row) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow([cell(row[c]) for c in COLUMN_NAMES])
    return buf.getvalue()


def _parse_csv_line(line: str) -> Row | None:
    """A journal line as a row, or None if it is not one (torn, wrong cell count, wrong types)."""
    try:
        cells = next(csv.reader([line]))
    except (csv.Error, StopIteration):
        return None
    if len(cells) != len(COLUMN_NAMES):
        return None
    row: Row = {}
    try:
        for (name, typ), text in zip(COLUMNS.items(), cells, strict=False):
            if text == "":
                row[name] = None
            elif typ is bool:
                if text not in ("true", "false"):
                    return None
                row[name] = text == "true"
            else:
                row[name] = typ(text)
    except ValueError:
        return None
    if not row["point_key"] or not row["fingerprint"] or not row["status"]:
        return None
    return row


def _fsync_dir(path: Path) -> None:
    fsync_dir(path)


def atomic_write(path: Path, data: bytes, what: str = "--out") -> None:
    """Write to a temporary file in the same directory, fsync, rename over ``path`` (:mod:`tpopt.files`)."""
    write_atomic(path, data, what)


def check_output_path(path: str | os.PathLike[str], what: str = "--out",
                      formats: tuple[str, ...] = OUT_FORMATS) -> Path:
    """The output must have a known extension, live in an existing writable directory and not be a
    directory itself (checked before any work, so a bad path costs nothing)."""
    p = Path(path)
    if p.suffix.lower() not in formats:
        raise InputError(f"{what}: {str(p)!r} must end in {', '.join(formats)}")
    if p.suffix.lower() == ".parquet":
        require("pyarrow.parquet", "parquet", f"{what} {p.name}")
    elif p.suffix.lower() in (".pdf", ".svg", ".png"):
        require("matplotlib", "plots", f"{what} {p.name}")
    if p.is_dir():
        raise InputError(f"{what}: {str(p)!r} is a directory")
    refuse_symlink(p, what)
    if p.exists() and not p.is_file():
        raise InputError(f"{what}: {str(p)!r} exists and is not a regular file")
    folder = p.parent if str(p.parent) else Path(".")
    if not folder.is_dir():
        raise InputError(f"{what}: directory {str(folder)!r} does not exist")
    if p.exists() and not os.access(p, os.W_OK):
        raise InputError(f"{what}: {str(p)!r} is not writable")
    try:
        with tempfile.NamedTemporaryFile(prefix=f".{p.name}.probe", dir=str(folder)):  # O_EXCL | O_NOFOLLOW
            pass
    except OSError as exc:
        raise InputError(f"{what}: cannot write in {str(folder)!r} ({exc.strerror or exc})") from None
    return p



class NotOurs(Exception):
    """The file exists but was not written by a tpopt sweep (or not of this scenario)."""


class OldFormat(Exception):
    """The file was written by a tpopt sweep of another file format."""


# ---------------------------------------------------------------------------------------------
# the lock: one writer per output


_LOCK_FDS: set[int] = set()


def _close_locks_in_child() -> None:
    """A forked worker must not keep the driver's lock alive (flock belongs to the open file)."""
    for fd in list(_LOCK_FDS):
        try:
            os.close(fd)
        except OSError:
            pass
    _LOCK_FDS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_locks_in_child)


class OutputLock:
    """An exclusive lock on an output and its journal: ``.<name>.lock`` next to it, held (``flock``)
    for the whole run and removed at the end. The kernel drops the lock when its holder dies, so a
    killed run never blocks the next one; a second sweep writing the same output at the same time
    is refused with one line. (``flock`` covers local file systems and NFSv4 on Linux.)"""

    def __init__(self, path: Path):
        self.path = path.parent / f".{path.name}.lock"
        self.target = path
        self.fd: int | None = None

    def acquire(self) -> OutputLock:
        try:
            import fcntl  # lazy: POSIX only (the ImportError below is the fallback)
        except ImportError:  # not POSIX: no lock
            return self
        while True:
            fd = open_lock(self.path, "--out lock file")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = os.read(fd, 64).decode("ascii", "replace").strip()
                os.close(fd)
                raise InputError(f"{str(self.target)!r} is being written by another tpopt sweep"
                                 f"{f' (pid {holder})' if holder.isdigit() else ''}; wait for it to finish or "
                                 f"choose another --out") from None
            try:  # the file may have been removed by the previous holder between open and flock
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self.fd = fd
        _LOCK_FDS.add(fd)
        return self

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            os.unlink(self.path)  # while still holding it (see acquire)
        except OSError:
            pass
        _LOCK_FDS.discard(self.fd)
        os.close(self.fd)
        self.fd = None


# ---------------------------------------------------------------------------------------------
# resuming


@dataclass
class Resume:
    """What an earlier run left in ``--out``, sorted out: the rows reused and what was not, and why."""

    rows: dict[str, Row] = field(default_factory=dict)  # point key -> proven row of this sweep (reused)
    torn: int = 0  # a torn last line of a killed run
    unreadable: int = 0  # lines that are not rows (cut, wrong cell count, wrong types)
    tampered: int = 0  # rows whose checksum does not match their content: solved again
    invalid: int = 0  # rows whose status is not a status: solved again
    unproven: dict[str, int] = field(default_factory=dict)  # status (feasible / unknown / error) -> rows solved again
    outside: int = 0  # rows of points outside this sweep: dropped
    duplicates: int = 0  # a point's row found more than once: the last one counts

    @property
    def discarded(self) -> int:
        return self.torn + self.unreadable

    def notes(self, out: object, total: int | None = None) -> list[str]:
        """One line per thing that happened, in words (``total``: the sweep's points)."""
        where = f" in {out}" if out else ""
        n = []
        if self.rows:
            n.append(f"resumed: {len(self.rows):,}{f' of {total:,}' if total else ''} points reused from {out}")
        if self.torn:
            n.append(f"discarded 1 torn line of an interrupted run{where}")
        if self.unreadable:
            n.append(f"discarded {self.unreadable} unreadable line(s){where} (not rows: cut, wrong cell count "
                     f"or types); their points are solved again")
        if self.tampered:
            n.append(f"{self.tampered} row(s){where} no longer match their checksum (edited by hand or corrupted); "
                     f"their points are solved again")
        if self.invalid:
            n.append(f"{self.invalid} row(s){where} have a status that is not one of {', '.join(STATUSES)}; "
                     f"their points are solved again")
        why = {"feasible": "time limit: plan not proven optimal", "unknown": "time limit: no answer",
               "error": "failed"}
        for status, k in sorted(self.unproven.items()):
            n.append(f"{k} point(s) whose earlier answer was {status!r} ({why.get(status, status)}) are solved again")
        if self.duplicates:
            n.append(f"{self.duplicates} point(s) had more than one row{where}; the last one was used")
        if self.outside:
            n.append(f"dropped {self.outside:,} row(s) of points outside this sweep from {out}")
        return n


class SweepStore:
    """The sweep's output file and its journal.

    ``.csv``: the file itself is the journal (rows appended as they finish, rewritten sorted at the
    end). ``.parquet`` / ``.json``: rows go to ``<out>.journal.csv`` and the final file is written
    atomically from it; the journal is removed afterwards. Hold :meth:`lock` around everything.
    """

    def __init__(self, path: str | os.PathLike[str], fingerprint_: str, force: bool = False):
        self.path = check_output_path(path)
        self.fmt = self.path.suffix.lower()
        self.journal = self.path if self.fmt == ".csv" else self.path.with_name(self.path.name + ".journal.csv")
        refuse_symlink(self.journal, "--out journal")
        self.fingerprint = fingerprint_
        self.force = force
        self._fd: int | None = None

    def lock(self) -> OutputLock:
        """The exclusive lock on this output and its journal (acquired; release it when done)."""
        return OutputLock(self.path).acquire()

    # -- reading ------------------------------------------------------------------------------
    def _read_csv(self, path: Path, res: Resume) -> list[Row]:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise InputError(f"cannot read {str(path)!r} ({exc.strerror})") from None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise NotOurs(path) from None
        if not text.startswith(HEADER + "\n"):
            if text.startswith("point_key,accelerator,"):
                raise OldFormat(path)
            raise NotOurs(path)
        lines = text[len(HEADER) + 1:].split("\n")
        if lines[-1] != "":
            res.torn += 1  # torn last line of a killed run
        rows = []
        for line in lines[:-1]:
            row = _parse_csv_line(line)
            if row is None:
                res.unreadable += 1
            else:
                rows.append(row)
        return rows

    @staticmethod
    def _clean_rows(records: Iterable[dict[str, Any]], res: Resume) -> list[Row]:
        rows = []
        for r in records:
            try:
                rows.append({k: _clean(r[k], COLUMNS[k]) for k in COLUMN_NAMES})
            except (ValueError, TypeError, KeyError):
                res.unreadable += 1
        return rows

    def _read_json(self, path: Path, res: Resume) -> list[Row]:
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise InputError(f"cannot read {str(path)!r} ({exc.strerror})") from None
        except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: nested past the parser's stack
            raise NotOurs(path) from None
        meta = d.get("tpopt_sweep") if isinstance(d, dict) else None
        if not isinstance(meta, dict) or not isinstance(d.get("rows"), list):
            raise NotOurs(path)
        if meta.get("format") != FORMAT or meta.get("columns") != list(COLUMN_NAMES):
            raise OldFormat(path)
        records = [r for r in d["rows"] if isinstance(r, dict) and list(r) == list(COLUMN_NAMES)]
        res.unreadable += len(d["rows"]) - len(records)
        return self._clean_rows(records, res)

    def _read_parquet(self, path: Path, res: Resume) -> list[Row]:
        pq = require("pyarrow.parquet", "parquet", "reading a .parquet file")

        try:
            t = pq.read_table(path)
        except OSError as exc:
            if not path.exists():
                raise InputError(f"cannot read {str(path)!r}") from None
            raise NotOurs(path) from exc
        except Exception:  # pyarrow raises ArrowInvalid (a ValueError) for non-parquet data
            raise NotOurs(path) from None
        meta = (t.schema.metadata or {}).get(b"tpopt_sweep")
        try:
            m = json.loads(meta) if meta else None
        except (ValueError, RecursionError):
            m = None
        if not isinstance(m, dict):
            raise NotOurs(path)
        if m.get("format") != FORMAT or t.column_names != list(COLUMN_NAMES):
            raise OldFormat(path)
        return self._clean_rows(t.to_pylist(), res)

    def _read(self, path: Path, res: Resume) -> list[Row]:
        if path == self.journal or path.suffix.lower() == ".csv":
            return self._read_csv(path, res)
        return self._read_json(path, res) if self.fmt == ".json" else self._read_parquet(path, res)

    def load(self, keys: Iterable[str]) -> Resume:
        """Sort out what an earlier run left: proven rows of this sweep's points (``keys``) are reused;
        rows that fail their checksum, carry an invalid or unproven status, or belong to points outside
        this sweep are not (each counted). Refuses files that are not ours or of another scenario."""
        res = Resume()
        if self.force:
            return res
        found: dict[str, Row] = {}
        paths = [self.path] if self.journal == self.path else [self.path, self.journal]
        for path in paths:
            if not path.exists():
                continue
            seen: set[str] = set()
            try:
                rows = self._read(path, res)
            except NotOurs:
                raise InputError(f"{str(path)!r} exists and was not written by a tpopt sweep; "
                                 f"choose another --out or pass --force to overwrite it") from None
            except OldFormat:
                raise InputError(f"{str(path)!r} was written by a tpopt sweep of another file format (this one "
                                 f"writes format {FORMAT}); choose another --out or pass --force to overwrite it"
                                 ) from None
            good = []
            for r in rows:
                if checksum_ok(r):
                    good.append(r)
                else:
                    res.tampered += 1
            other = sorted({r["fingerprint"] for r in good} - {self.fingerprint})
            if other:
                raise InputError(f"{str(path)!r} holds a sweep of a different scenario (fingerprint {other[0]}, "
                                 f"now {self.fingerprint}); choose another --out or pass --force to overwrite it")
            for r in good:
                key = r["point_key"]
                if key in seen:
                    res.duplicates += 1
                seen.add(key)
                r["pareto"] = None
                found[key] = r  # the journal (read last) wins over the final file
        wanted = set(keys)
        for key, r in found.items():
            if key not in wanted:
                res.outside += 1
            elif r["status"] not in STATUSES:
                res.invalid += 1
            elif r["status"] not in PROVEN:
                res.unproven[r["status"]] = res.unproven.get(r["status"], 0) + 1
            else:
                res.rows[key] = r
        return res

    # -- writing ------------------------------------------------------------------------------
    def begin(self, rows: list[Row]) -> None:
        """Start the journal with the rows kept from earlier runs (atomically, torn lines dropped)."""
        body = HEADER + "\n" + "".join(_csv_line(r) for r in sorted(rows, key=sort_key))
        atomic_write(self.journal, body.encode("utf-8"))
        self._fd = open_append(self.journal, "--out journal")

    def append(self, rows: list[Row]) -> None:
        """Append whole rows and fsync; a failed write (disk full) is one line, and what it may have torn
        off the last line is dropped on resume (the rows before it are kept)."""
        if not rows:
            return
        assert self._fd is not None, "append before begin"
        view = memoryview("".join(_csv_line(r) for r in rows).encode("utf-8"))
        try:
            while view:
                view = view[os.write(self._fd, view):]
            os.fsync(self._fd)
        except OSError as exc:
            raise write_error("--out journal", self.journal, exc,
                              "the rows written so far are kept: run the same command again to resume") from None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def finalize(self, rows: list[Row]) -> None:
        """Write the final file atomically (rows sorted) and drop a separate journal."""
        self.close()
        atomic_write(self.path, encode(rows, self.fmt, self.fingerprint))
        if self.journal != self.path:
            try:
                self.journal.unlink()
            except FileNotFoundError:
                pass
            _fsync_dir(self.path.parent)


def _pandas_meta() -> dict[str, Any]:
    """pandas' parquet metadata, so that ``pandas.read_parquet`` keeps integer columns integers (nullable
    ``Int64``: an infeasible point has no card count) and ``pareto`` boolean, instead of floats."""
    kinds = {str: ("unicode", "object"), float: ("float64", "float64"), int: ("int64", "Int64"),
             bool: ("bool", "boolean")}
    cols = [{"name": c, "field_name": c, "pandas_type": kinds[t][0], "numpy_type": kinds[t][1], "metadata": None}
            for c, t in COLUMNS.items()]
    return {"index_columns": [], "column_indexes": [], "columns": cols, "attributes": {},
            "creator": {"library": "tpopt", "version": __version__}, "pandas_version": "2.1.0"}


def encode(rows: list[Row], fmt: str, fingerprint_: str) -> bytes:
    """The bytes of a final output file (rows in the given order; callers sort them)."""
    if fmt == ".csv":
        return (HEADER + "\n" + "".join(_csv_line(r) for r in rows)).encode("utf-8")
    meta = {"format": FORMAT, "tpopt": __version__, "fingerprint": fingerprint_, "columns": list(COLUMN_NAMES)}
    if fmt == ".json":
        body = ",\n".join(json.dumps(r, ensure_ascii=False, allow_nan=False, separators=(",", ":")) for r in rows)
        head = json.dumps(meta, separators=(",", ":"))
        return (f'{{"tpopt_sweep":{head},\n"rows":[\n{body}\n]}}\n' if rows
                else f'{{"tpopt_sweep":{head},\n"rows":[]}}\n').encode("utf-8")
    pa = require("pyarrow", "parquet", "writing a .parquet file")
    pq = require("pyarrow.parquet", "parquet", "writing a .parquet file")

    types = {str: pa.string(), float: pa.float64(), int: pa.int64(), bool: pa.bool_()}
    arrays = [pa.array([r[c] for r in rows], type=types[t]) for c, t in COLUMNS.items()]
    table = pa.Table.from_arrays(arrays, names=list(COLUMN_NAMES))
    table = table.replace_schema_metadata({"tpopt_sweep": json.dumps(meta, separators=(",", ":")),
                                           "pandas": json.dumps(_pandas_meta(), separators=(",", ":"))})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    data: bytes = sink.getvalue().to_pybytes()
    return data
