"""The ``tpopt`` program's data classes run code compiled in an earlier run (cli/kept_code.py): the same functions as
``dataclasses`` compiles itself, kept per exact source text, the built-in ``exec`` back in ``dataclasses`` afterwards,
and nothing kept where it cannot be written."""

import dataclasses
import subprocess
import sys
from dataclasses import dataclass, field

import pytest

from tpopt.cli import kept_code
from tpopt.cli.kept_code import KeptCode, dataclass_code_kept


def make_classes():
    """Two data classes of every generated kind: frozen (__setattr__, __delattr__, __hash__), ordered, defaults
    and a default factory, and a plain one."""

    @dataclass(frozen=True, order=True)
    class Point:
        x: int
        y: float = 2.5
        tags: list = field(default_factory=list, compare=False)

    @dataclass
    class Box:
        name: str
        size: int = 3

    return Point, Box


def behaviour(point, box):
    p, q = point(1), point(1, 3.0, ["a"])
    try:
        p.x = 5  # type: ignore[misc]
        frozen = False
    except dataclasses.FrozenInstanceError:
        frozen = True
    b = box("b")
    b.size = 4
    return (repr(p), repr(q), p == point(1), p < q, hash(p) == hash(point(1)), frozen, repr(b), b == box("b", 4),
            point.__init__.__annotations__, box.__init__.__annotations__)


GENERATED = ("__init__", "__repr__", "__eq__", "__lt__", "__hash__", "__setattr__", "__delattr__")


def functions(cls):
    """The code of each generated function (``__repr__`` under its recursion guard's wrapper)."""
    found = {name: getattr(cls, name) for name in GENERATED if name in vars(cls)}
    return {name: getattr(fn, "__wrapped__", fn).__code__ for name, fn in found.items() if hasattr(fn, "__code__")}


def same_code(a, b):
    assert a.keys() == b.keys()
    for name in a:
        # code objects compare by bytecode, constants, names and flags (a __future__ flag too), not by identity
        assert a[name] == b[name], name
        assert a[name].co_flags == b[name].co_flags and a[name].co_filename == b[name].co_filename == "<string>"


def test_kept_functions_are_the_compiled_ones(tmp_path):
    plain = make_classes()
    path = tmp_path / "kept.marshal"
    with dataclass_code_kept(path) as first:
        compiled_now = make_classes()
    assert first.new and not first.kept and path.exists()
    with dataclass_code_kept(path) as second:
        read_back = make_classes()
    assert not second.new and second.used <= set(second.kept)  # every function came from the file
    for cls, now, kept in zip(plain, compiled_now, read_back, strict=True):
        same_code(functions(cls), functions(now))
        same_code(functions(cls), functions(kept))
    assert behaviour(*plain) == behaviour(*compiled_now) == behaviour(*read_back)
    # this test module has no `from __future__ import annotations`: nor do the generated functions (kept_code has)
    assert read_back[1].__init__.__annotations__ == {"name": str, "size": int, "return": None}


def test_an_edited_class_is_compiled_anew(tmp_path):
    path = tmp_path / "kept.marshal"
    with dataclass_code_kept(path):
        make_classes()
    with dataclass_code_kept(path) as again:
        @dataclass
        class Box:
            name: str
            size: int = 3
            weight: float = 1.0  # another field: another __init__, __repr__ and __eq__ text

        assert Box("b", weight=2.0) != Box("b") and repr(Box("b")) == "test_an_edited_class_is_compiled_anew.<locals>" \
            ".Box(name='b', size=3, weight=1.0)"
    assert len(again.new) == 3 and all("weight" in text for text in again.new)


@pytest.mark.parametrize("content", [b"", b"not marshal", "bytecode", "optimize"])
def test_unreadable_or_foreign_files_are_ignored(tmp_path, content):
    import importlib.util
    import marshal

    path = tmp_path / "kept.marshal"
    # another interpreter's bytecode, or another -O level
    foreign = ((b"\x00\x00\r\n", sys.flags.optimize) if content == "bytecode" else
               (importlib.util.MAGIC_NUMBER, sys.flags.optimize + 1))
    path.write_bytes(content if isinstance(content, bytes) else
                     marshal.dumps((kept_code.KEPT_FORMAT, foreign, {"x": compile("1", "<string>", "exec")})))
    assert kept_code.compiled_by() == (importlib.util.MAGIC_NUMBER, sys.flags.optimize) != foreign
    with dataclass_code_kept(path) as kept:
        point, box = make_classes()
    assert kept.kept == {} and kept.new  # nothing read, everything compiled
    assert behaviour(point, box) == behaviour(*make_classes())


def test_unwritable_folder_keeps_nothing(tmp_path):
    (tmp_path / "folder").write_text("a file where the folder would be")
    path = tmp_path / "folder" / "kept.marshal"
    for _ in range(2):
        with dataclass_code_kept(path) as kept:
            assert behaviour(*make_classes()) == behaviour(*make_classes())
        assert kept.new and kept.kept == {}


def test_exec_is_back_even_after_an_error(tmp_path):
    with pytest.raises(ValueError), dataclass_code_kept(tmp_path / "kept.marshal"):
        assert "exec" in vars(dataclasses)
        raise ValueError("boom")
    assert "exec" not in vars(dataclasses)
    assert (tmp_path / "kept.marshal").exists() is False  # nothing new: nothing written


MODULE_VALUE = 11


def test_exec_without_globals_uses_the_callers_namespaces(tmp_path):
    """Not a call ``dataclasses`` makes (it always passes its globals), but the built-in's meaning all the same."""
    kept = KeptCode(tmp_path / "kept.marshal")

    def caller(run):
        ns = {}
        run("out = MODULE_VALUE * 2", None, ns)
        return ns["out"]

    assert caller(kept.exec) == caller(exec) == 22


def test_oversized_store_keeps_only_this_runs_functions(tmp_path, monkeypatch):
    path = tmp_path / "kept.marshal"
    with dataclass_code_kept(path):
        make_classes()
    monkeypatch.setattr(kept_code, "MAX_KEPT", 1)
    with dataclass_code_kept(path) as run:
        @dataclass
        class Other:
            z: bytes

    assert run.new
    assert set(KeptCode(path).kept) == run.used


def test_the_program_keeps_its_data_classes_code(tmp_path):
    """The headline, run as the ``tpopt`` program, leaves ``dataclasses`` as it found it and its kept file
    serves every function of a second run."""
    probe = ("import dataclasses, sys\nfrom tpopt.cli import kept_code, main as m\nseen = []\n"
             "orig = kept_code.KeptCode.save\n"
             "def save(self):\n    seen.append((len(self.used), len(self.new)))\n    orig(self)\n"
             "kept_code.KeptCode.save = save\n"
             f"kept_code.PYCACHE = __import__('pathlib').Path({str(tmp_path)!r})\n"
             "sys.argv = ['tpopt', 'solve', '--deadline', '30d', '--hw', 'rtx4090']\n"
             "try:\n    m.main()\nexcept SystemExit as e:\n    assert e.code == 0\n"
             "print('KEPT', seen, 'exec' in vars(dataclasses))\n")
    runs = [subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
            for _ in range(2)]
    assert runs[0].split("KEPT")[0] == runs[1].split("KEPT")[0]  # the same answer, byte for byte
    first, second = (eval(r.split("KEPT")[1].rsplit(" ", 1)[0]) for r in runs)
    assert first[0][0] > 100 and first[0][1] == first[0][0]  # everything compiled and kept by the first run
    assert second == [(first[0][0], 0)]  # and read back by the second
    assert all(r.rstrip().endswith("False") for r in runs)
