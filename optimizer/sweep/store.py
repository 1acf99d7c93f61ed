"""The sweep's output file and its journal: rows appended (flush + fsync) as they finish, the final file
written atomically with rows sorted, resuming from what an earlier run left."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

from tpopt import __version__
from tpopt.errors import InputError
from tpopt.optimizer.sweep.rows import COLUMN_NAMES, COLUMNS, FORMAT, _clean, sort_key

OUT_FORMATS = (".csv", ".parquet", ".json")

HEADER = ",".join(COLUMN_NAMES)


def _cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def _csv_line(row: dict) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow([_cell(row[c]) for c in COLUMN_NAMES])
    return buf.getvalue()


def _parse_csv_line(line: str) -> dict | None:
    try:
        cells = next(csv.reader([line]))
    except (csv.Error, StopIteration):
        return None
    if len(cells) != len(COLUMN_NAMES):
        return None
    row = {}
    try:
        for (name, typ), text in zip(COLUMNS.items(), cells):
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
    try:
        fd = os.open(str(path), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Write to a temporary file in the same directory, fsync, rename over ``path``."""
    tmp = path.parent / f".{path.name}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise InputError(f"cannot write {str(path)!r} ({exc.strerror or exc})") from None
    _fsync_dir(path.parent)


def check_output_path(path, what: str = "--out", formats=OUT_FORMATS) -> Path:
    """The output must have a known extension, live in an existing writable directory and not be a
    directory itself (checked before any work, so a bad path costs nothing)."""
    p = Path(path)
    if p.suffix.lower() not in formats:
        raise InputError(f"{what}: {str(p)!r} must end in {', '.join(formats)}")
    if p.is_dir():
        raise InputError(f"{what}: {str(p)!r} is a directory")
    folder = p.parent if str(p.parent) else Path(".")
    if not folder.is_dir():
        raise InputError(f"{what}: directory {str(folder)!r} does not exist")
    if p.exists() and not os.access(p, os.W_OK):
        raise InputError(f"{what}: {str(p)!r} is not writable")
    probe = folder / f".{p.name}.probe{os.getpid()}"
    try:
        with open(probe, "wb"):
            pass
        probe.unlink()
    except OSError as exc:
        raise InputError(f"{what}: cannot write in {str(folder)!r} ({exc.strerror or exc})") from None
    return p


class NotOurs(Exception):
    """The file exists but was not written by a tpopt sweep (or not of this scenario)."""


class SweepStore:
    """The sweep's output file and its journal.

    ``.csv``: the file itself is the journal (rows appended as they finish, rewritten sorted at the
    end). ``.parquet`` / ``.json``: rows go to ``<out>.journal.csv`` and the final file is written
    atomically from it; the journal is removed afterwards.
    """

    def __init__(self, path, fingerprint_: str, force: bool = False):
        self.path = check_output_path(path)
        self.fmt = self.path.suffix.lower()
        self.journal = self.path if self.fmt == ".csv" else self.path.with_name(self.path.name + ".journal.csv")
        self.fingerprint = fingerprint_
        self.force = force
        self.discarded = 0  # torn or unreadable journal lines dropped on load
        self._fh = None

    # -- reading ------------------------------------------------------------------------------
    def _read_csv(self, path: Path) -> list[dict]:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise InputError(f"cannot read {str(path)!r} ({exc.strerror})") from None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise NotOurs(path) from None
        if not text.startswith(HEADER + "\n"):
            raise NotOurs(path)
        lines = text[len(HEADER) + 1:].split("\n")
        if lines[-1] != "":
            self.discarded += 1  # torn last line of a killed run
        rows = []
        for line in lines[:-1]:
            row = _parse_csv_line(line)
            if row is None:
                self.discarded += 1
            else:
                rows.append(row)
        return rows

    def _read_json(self, path: Path) -> list[dict]:
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise InputError(f"cannot read {str(path)!r} ({exc.strerror})") from None
        except (ValueError, UnicodeDecodeError):
            raise NotOurs(path) from None
        meta = d.get("tpopt_sweep") if isinstance(d, dict) else None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("columns") != list(COLUMN_NAMES):
            raise NotOurs(path)
        rows = d.get("rows")
        if not isinstance(rows, list) or any(not isinstance(r, dict) or list(r) != list(COLUMN_NAMES) for r in rows):
            raise NotOurs(path)
        return [{k: _clean(r[k], COLUMNS[k]) for k in COLUMN_NAMES} for r in rows]

    def _read_parquet(self, path: Path) -> list[dict]:
        import pyarrow.parquet as pq

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
        except ValueError:
            m = None
        if not isinstance(m, dict) or m.get("format") != FORMAT or t.column_names != list(COLUMN_NAMES):
            raise NotOurs(path)
        return [{k: _clean(r[k], COLUMNS[k]) for k in COLUMN_NAMES} for r in t.to_pylist()]

    def _read(self, path: Path) -> list[dict]:
        if path == self.journal or path.suffix.lower() == ".csv":
            return self._read_csv(path)
        return self._read_json(path) if self.fmt == ".json" else self._read_parquet(path)

    def load(self) -> dict:
        """Rows already computed for this scenario: key -> row. Refuses files that are not ours."""
        if self.force:
            return {}
        done: dict = {}
        paths = [self.path] if self.journal == self.path else [self.path, self.journal]
        for path in paths:
            if not path.exists():
                continue
            try:
                rows = self._read(path)
            except NotOurs:
                raise InputError(f"{str(path)!r} exists and was not written by a tpopt sweep; "
                                 f"choose another --out or pass --force to overwrite it") from None
            other = sorted({r["fingerprint"] for r in rows} - {self.fingerprint})
            if other:
                raise InputError(f"{str(path)!r} holds a sweep of a different scenario (fingerprint {other[0]}, "
                                 f"now {self.fingerprint}); choose another --out or pass --force to overwrite it")
            for r in rows:
                r["pareto"] = None
                done[r["point_key"]] = r
        return done

    # -- writing ------------------------------------------------------------------------------
    def begin(self, rows: list[dict]) -> None:
        """Start the journal with the rows kept from earlier runs (atomically, torn lines dropped)."""
        body = HEADER + "\n" + "".join(_csv_line(r) for r in sorted(rows, key=sort_key))
        atomic_write(self.journal, body.encode("utf-8"))
        self._fh = open(self.journal, "a", encoding="utf-8", newline="")

    def append(self, rows: list[dict]) -> None:
        if not rows:
            return
        self._fh.write("".join(_csv_line(r) for r in rows))
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def finalize(self, rows: list[dict]) -> None:
        """Write the final file atomically (rows sorted) and drop a separate journal."""
        self.close()
        atomic_write(self.path, encode(rows, self.fmt, self.fingerprint))
        if self.journal != self.path:
            try:
                self.journal.unlink()
            except FileNotFoundError:
                pass
            _fsync_dir(self.path.parent)


def encode(rows: list[dict], fmt: str, fingerprint_: str) -> bytes:
    """The bytes of a final output file (rows in the given order; callers sort them)."""
    if fmt == ".csv":
        return (HEADER + "\n" + "".join(_csv_line(r) for r in rows)).encode("utf-8")
    meta = {"format": FORMAT, "tpopt": __version__, "fingerprint": fingerprint_, "columns": list(COLUMN_NAMES)}
    if fmt == ".json":
        body = ",\n".join(json.dumps(r, ensure_ascii=False, allow_nan=False, separators=(",", ":")) for r in rows)
        head = json.dumps(meta, separators=(",", ":"))
        return (f'{{"tpopt_sweep":{head},\n"rows":[\n{body}\n]}}\n' if rows
                else f'{{"tpopt_sweep":{head},\n"rows":[]}}\n').encode("utf-8")
    import pyarrow as pa
    import pyarrow.parquet as pq

    types = {str: pa.string(), float: pa.float64(), int: pa.int64(), bool: pa.bool_()}
    arrays = [pa.array([r[c] for r in rows], type=types[t]) for c, t in COLUMNS.items()]
    table = pa.Table.from_arrays(arrays, names=list(COLUMN_NAMES))
    table = table.replace_schema_metadata({"tpopt_sweep": json.dumps(meta, separators=(",", ":"))})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue().to_pybytes()
