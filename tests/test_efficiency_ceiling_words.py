"""explain's efficiency ceiling says whether the card's numbers are calibrated or priors, as the performance
catalog's ``calibrated`` list says (catalogs/performance.toml), never "measured" for a prior."""

import tomllib
from pathlib import Path

from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import load_scenario
from tpopt.optimizer.explain.context import Context
from tpopt.optimizer.explain.relax import efficiency_ceiling

ROOT = Path(__file__).resolve().parents[1]


def _scenario(accelerator: str, flat: bool):
    raw = tomllib.loads((ROOT / "examples" / "design-case.toml").read_text())
    raw["hardware"]["accelerator"] = accelerator
    if not flat:
        raw["hardware"].pop("efficiency", None)
    return load_scenario(raw)


def test_flat_ceiling_names_prior_or_calibrated():
    cat = load_catalog()
    assert not cat.perf("rtx4090").calibrated and "gemm_efficiency" in cat.perf("h100-sxm").calibrated
    hi, why = efficiency_ceiling(Context(sc=_scenario("rtx4090", flat=True), catalog=cat))
    assert hi == cat.perf("rtx4090").gemm_efficiency
    assert "(prior, catalogs/performance.toml)" in why and "measured" not in why
    _, why = efficiency_ceiling(Context(sc=_scenario("h100-sxm", flat=True), catalog=cat))
    assert "(calibrated, catalogs/performance.toml)" in why and "measured" not in why


def test_per_operation_ceiling_names_the_fitted_fields():
    cat = load_catalog()
    hi, why = efficiency_ceiling(Context(sc=_scenario("rtx4090", flat=False), catalog=cat))
    assert hi == 1.0 and "(rtx4090: prior)" in why and "measured" not in why
    _, why = efficiency_ceiling(Context(sc=_scenario("h100-sxm", flat=False), catalog=cat))
    fitted = ", ".join(cat.perf("h100-sxm").calibrated)
    assert f"(h100-sxm: {fitted} calibrated, the rest prior)" in why
