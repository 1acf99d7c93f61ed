"""The documentation's lists of constraint families and solver backends are the registries' (declare once, derive
everywhere): a family or backend registered without a word in the README or a page under docs/ fails here (the
lists themselves live on docs/optimiser.md since issue 34 split the README into topic pages)."""

from pathlib import Path

from tpopt.models import families as F
from tpopt.optimizer import backends as B

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").rglob("*.md"))
README = "\n".join(p.read_text() for p in [ROOT / "README.md", *DOCS])  # the README and every page


def test_the_pages_are_read():
    assert any(p.name == "optimiser.md" for p in DOCS), DOCS  # where the families and backends are listed


def test_every_registered_family_is_documented():
    missing = [f.name for f in F.REGISTRY if f"`{f.name}`" not in README]
    assert not missing, f"families without a word in README.md or docs/: {missing}"


def test_every_registered_backend_is_documented():
    spelled = [B.entry(n).spelled() for n in B.names()] + [e.spelled() for e in B._families()]
    missing = [s for s in spelled if f"**`{s}`**" not in README]
    assert not missing, f"backends without their entry (**`name`**) in README.md or docs/: {missing}"
    assert len(spelled) >= 4  # cpsat, highs, enumerate and the pyomo family
