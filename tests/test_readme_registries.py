"""The README's lists of constraint families and solver backends are the registries' (declare once, derive
everywhere): a family or backend registered without a word in the README fails here."""

from pathlib import Path

from tpopt.models import families as F
from tpopt.optimizer import backends as B

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_every_registered_family_is_documented():
    missing = [f.name for f in F.REGISTRY if f"`{f.name}`" not in README]
    assert not missing, f"families without a word in README.md: {missing}"


def test_every_registered_backend_is_documented():
    spelled = [B.entry(n).spelled() for n in B.names()] + [e.spelled() for e in B._families()]
    missing = [s for s in spelled if f"**`{s}`**" not in README]
    assert not missing, f"backends without their README entry (**`name`**): {missing}"
    assert len(spelled) >= 4  # cpsat, highs, enumerate and the pyomo family
