"""The package's own catalog files are parsed once and kept (catalogs/tables.py builtin_toml): a kept parse
serves only the exact text it came from, and nothing outside the package's catalog folder is kept."""

import tomllib

import pytest

from tpopt.catalogs import load_catalog, tables
from tpopt.catalogs.tables import builtin_toml

TEXT = 'a = 1\n[b]\nc = "x"\nd = [1.5, -0.0, 3]\n'


@pytest.fixture
def own(tmp_path, monkeypatch):
    """A stand-in for the package's catalog folder."""
    monkeypatch.setattr(tables, "BUILTIN_TABLES", tmp_path)
    return tmp_path


def counting(calls):
    def parse(text):
        calls.append(text)
        return tomllib.loads(text)
    return parse


def test_kept_parse_is_the_parse_and_skips_the_parser(own):
    path = own / "x.toml"
    path.write_text(TEXT)
    calls = []
    first = builtin_toml(path, TEXT, counting(calls))
    second = builtin_toml(path, TEXT, counting(calls))
    assert len(calls) == 1  # the second read came from the kept form
    assert first == second == tomllib.loads(TEXT)
    assert list(second) == ["a", "b"] and list(second["b"]) == ["c", "d"]  # order kept
    assert str(second["b"]["d"][1]) == "-0.0"
    second["b"]["c"] = "changed"  # each read is a fresh object
    assert builtin_toml(path, TEXT, counting(calls))["b"]["c"] == "x"


def test_edited_text_is_parsed_anew(own):
    path = own / "x.toml"
    builtin_toml(path, TEXT, tomllib.loads)
    calls = []
    edited = TEXT.replace("a = 1", "a = 2")
    assert builtin_toml(path, edited, counting(calls))["a"] == 2
    assert calls == [edited]


def test_parse_errors_pass_through_and_nothing_is_kept(own):
    path = own / "bad.toml"
    with pytest.raises(tomllib.TOMLDecodeError):
        builtin_toml(path, "a = ", tomllib.loads)
    assert not list(own.glob("__pycache__/*"))


def test_files_elsewhere_and_dates_are_not_kept(own, tmp_path_factory):
    other = tmp_path_factory.mktemp("user") / "x.toml"
    calls = []
    builtin_toml(other, TEXT, counting(calls))
    builtin_toml(other, TEXT, counting(calls))
    assert len(calls) == 2
    dated = "d = 2025-06-01\n"
    builtin_toml(own / "d.toml", dated, counting(calls))
    assert builtin_toml(own / "d.toml", dated, counting(calls)) == tomllib.loads(dated)
    assert len(calls) == 4  # marshal keeps no dates: parsed each time


def test_unwritable_folder_parses_without_keeping(own):
    (own / "__pycache__").write_text("a file where the folder would be")  # unwritable even for root
    calls = []
    for _ in range(2):
        assert builtin_toml(own / "x.toml", TEXT, counting(calls)) == tomllib.loads(TEXT)
    assert len(calls) == 2 and sorted(p.name for p in own.iterdir()) == ["__pycache__"]


def test_builtin_catalog_same_with_or_without_kept_forms(tmp_path, monkeypatch):
    """The whole built-in catalog read twice with kept forms (the second from them) equals a plain read."""
    plain = load_catalog()
    real = tables.BUILTIN_TABLES
    for f in real.glob("*.toml"):
        (tmp_path / f.name).write_bytes(f.read_bytes())
    monkeypatch.setattr(tables, "BUILTIN_TABLES", tmp_path)
    import tpopt.catalogs as C
    monkeypatch.setattr(C, "BUILTIN_DIR", tmp_path)
    load_catalog()
    assert list((tmp_path / "__pycache__").glob("*.marshal"))
    kept = load_catalog()
    assert kept.accelerators == plain.accelerators and kept.models == plain.models
    assert kept.performance == plain.performance and kept.raw == plain.raw
    assert kept.market == plain.market
