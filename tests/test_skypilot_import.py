"""SkyPilot catalog import on real-format samples (issue 38 item 4).

The three files under tests/data/skypilot are written by hand in the format of SkyPilot's catalog
(github.com/skypilot-org/skypilot-catalog, ``<cloud>/vms.csv``: InstanceType, AcceleratorName,
AcceleratorCount, vCPUs, MemoryGiB, GpuInfo, Price, SpotPrice, Region, AvailabilityZone; Lambda's file puts
GpuInfo last and has no AvailabilityZone): CPU rows with empty accelerator fields, GpuInfo as a quoted
Python-literal dict (or a bare name, as GCP's A100 rows), one row per zone, zones without a spot price,
a row with neither price, GCP's attachable GPUs without an instance type, accelerators the catalog does not
know (T4, Inferentia2, TPU, A10, GH200). Expected prices are the files' numbers divided by hand below.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tpopt.catalogs import load_catalog
from tpopt.catalogs.market import Market, from_skypilot, gpu_memory_bytes, read_skypilot, skypilot_accelerator
from tpopt.errors import InputError

DATA = Path(__file__).resolve().parent / "data" / "skypilot"
CAT = load_catalog()
MEMORY = {k: a.memory_nominal for k, a in CAT.accelerators.items()}


def _import(name: str, zone_price: str = "min", names: dict[str, str] | None = None):
    provider = name.split("-")[0]
    market = Market(regions=dict(CAT.market.regions), as_of=CAT.market.as_of)
    return read_skypilot(DATA / f"{name}-vms.csv", provider, "2026-11-01", names or {}, market, 256, MEMORY,
                         zone_price)


def _prices(imp) -> dict[str, float]:
    return {i: o.price_card_hour for i, o in imp.offers.items()}


def test_aws_sample_imports_every_known_card_without_a_map():
    imp = _import("aws")
    want = {
        "aws/us-east-1/h100-sxm/on-demand": 55.04 / 8,
        "aws/us-east-1/h100-sxm/spot": 20.1 / 8,  # the lowest of the zones that state one (az6 states none)
        "aws/us-east-1/a100-40gb-sxm/on-demand": 21.96125 / 8,  # 'A100' with 40,960 MiB per GPU
        "aws/us-east-1/a100-40gb-sxm/spot": 8.9 / 8,
        "aws/us-east-1/a100-80gb-sxm/on-demand": 27.44705 / 8,  # no spot price: no spot offer
        "aws/us-east-2/h200/on-demand": 63.296 / 8,  # p5e states neither price: p5en gives the offer
        "aws/us-east-2/h200/spot": 25.7 / 8,
        "aws/us-east-1/l40s/on-demand": 1.861,  # g6e.xlarge (1 card) beats g6e.48xlarge's 30.13118 / 8
        "aws/us-east-1/l40s/spot": 0.71,
        "aws/us-east-1/b200/on-demand": 113.9328 / 8,
    }
    assert _prices(imp) == pytest.approx(want)
    assert imp.offers["aws/us-east-1/l40s/on-demand"].cards_per_host == 1
    assert imp.offers["aws/us-east-1/h100-sxm/on-demand"].cards_per_host == 8
    assert (imp.cpu_rows, imp.unknown, imp.unpriced) == (2, {"Inferentia2": 1, "T4": 1}, 1)
    line = imp.skipped_line()
    assert line == ("skipped 2 CPU rows (no accelerator); 2 rows of accelerators the catalog does not know: "
                    "Inferentia2 (1), T4 (1); 1 row with neither Price nor SpotPrice")


def test_zone_median_is_the_middle_zone():
    # spot zones of p5.48xlarge in us-east-1: 20.1, 22.3, 24.9 (az6 has none) -> median 22.3
    imp = _import("aws", zone_price="median")
    assert imp.offers["aws/us-east-1/h100-sxm/spot"].price_card_hour == pytest.approx(22.3 / 8)
    assert "median" in imp.offers["aws/us-east-1/h100-sxm/spot"].source
    gcp = _import("gcp", zone_price="median")  # 19.4, 18.2, 21.0 -> 19.4
    assert gcp.offers["gcp/us-central1/h100-sxm/spot"].price_card_hour == pytest.approx(19.4 / 8)


def test_gcp_sample_bare_gpuinfo_takes_the_default_part():
    imp = _import("gcp")
    want = {
        "gcp/us-central1/h100-sxm/on-demand": 88.253 / 8,
        "gcp/us-central1/h100-sxm/spot": 18.2 / 8,
        "gcp/us-central1/a100-40gb-sxm/on-demand": 3.673385,  # GpuInfo 'A100' alone: SkyPilot's A100 = 40 GB
        "gcp/us-central1/a100-40gb-sxm/spot": 1.1,
        "gcp/us-central1/a100-80gb-sxm/on-demand": 5.0688,
        "gcp/us-central1/a100-80gb-sxm/spot": 1.57,
        "gcp/us-central1/h200/on-demand": 84.806908 / 8,
    }
    assert _prices(imp) == pytest.approx(want)
    assert (imp.cpu_rows, imp.unknown) == (2, {"T4": 1, "tpu-v5p-8": 1})


def test_lambda_sample_pcie_instance_and_no_spot():
    imp = _import("lambda")
    want = {
        "lambda/us-east-1/h100-pcie/on-demand": 2.49,  # gpu_1x_h100_pcie: the PCIe part of 80 GB
        "lambda/us-east-1/h100-sxm/on-demand": 23.92 / 8,
        "lambda/us-west-3/h100-sxm/on-demand": 23.92 / 8,
        "lambda/us-east-1/a100-40gb-sxm/on-demand": 10.32 / 8,
        "lambda/us-east-1/a100-80gb-sxm/on-demand": 14.32 / 8,
        "lambda/us-east-1/b200/on-demand": 39.92 / 8,
    }
    assert _prices(imp) == pytest.approx(want)
    assert not [o for o in imp.offers.values() if o.market == "spot"]
    assert (imp.cpu_rows, imp.unknown) == (1, {"A10": 1, "GH200": 1})


def test_memory_tells_two_parts_of_one_name_apart():
    info = "{'Gpus': [{'Name': 'A100', 'Manufacturer': 'NVIDIA', 'Count': 8, 'MemoryInfo': {'SizeInMiB': %d}}]}"
    assert gpu_memory_bytes(info % 81920) == 81920 * 2**20
    assert gpu_memory_bytes("A100") is None
    assert skypilot_accelerator("A100", "p4d.24xlarge", info % 40960, {}, MEMORY) == "a100-40gb-sxm"
    assert skypilot_accelerator("A100", "p4de.24xlarge", info % 81920, {}, MEMORY) == "a100-80gb-sxm"
    assert skypilot_accelerator("A100", "x", "", {}, MEMORY) == "a100-40gb-sxm"  # no memory: the default
    assert skypilot_accelerator("MI300X", "x", "", {}, MEMORY) == "mi300x"
    assert skypilot_accelerator("RTX4090", "x", "", {}, MEMORY) == "rtx4090"
    assert skypilot_accelerator("T4", "x", "", {}, MEMORY) is None
    assert skypilot_accelerator("T4", "x", "", {"T4": "l40s"}, MEMORY) == "l40s"  # --map wins


def test_map_only_path_keeps_its_contract():
    market = Market(regions=dict(CAT.market.regions), as_of=CAT.market.as_of)
    got = from_skypilot(DATA / "aws-vms.csv", "aws", "2026-11-01", {"H100": "h100-sxm"}, market, 8,
                        set(CAT.accelerators))
    # names not mapped stand for themselves lower-cased: 'A100' and 'A100-80GB' are no catalog entry then
    assert {o.accelerator for o in got.values()} == {"h100-sxm", "h200", "l40s", "b200"}


def test_bad_zone_reduction_is_one_line():
    with pytest.raises(InputError, match="--zone-price 'mean' unknown"):
        _import("aws", zone_price="mean")


def test_cli_import_prints_one_skipped_line(tmp_path, capsys, monkeypatch):
    from tpopt.cli.main import main
    monkeypatch.setattr(sys, "argv", ["tpopt", "catalog", "import", "--skypilot", str(DATA / "aws-vms.csv"),
                                      "--provider", "aws", "--date", "2026-11-01"])
    with pytest.raises(SystemExit) as exc:
        main()
    out, err = capsys.readouterr()
    assert exc.value.code in (0, None), err
    skipped = [ln for ln in err.splitlines() if "skipped" in ln]
    assert len(skipped) == 1 and "2 CPU rows" in skipped[0] and "Inferentia2 (1), T4 (1)" in skipped[0]
    d = tmp_path / "imported"
    d.mkdir()
    (d / "offers.toml").write_text(out)
    ids = {o.id for o in load_catalog([d]).market.offers.values()}
    assert {"aws/us-east-1/b200/on-demand", "aws/us-east-1/l40s/spot", "aws/us-east-2/h200/spot"} <= ids
