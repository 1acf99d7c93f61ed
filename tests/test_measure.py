"""`tpopt calibrate --measure` without a GPU (issue 23 item 6): the fake device times kernels from known
parameters by closed forms; the whole measurement -> fit -> performance.toml path must recover them
within the stated uncertainty. PyTorch is never needed (nor imported)."""

import json
import math
import sys
from pathlib import Path

import pytest

from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import build_scenario
from tpopt.optimizer import device as D

sys.path.insert(0, str(Path(__file__).parent))
from test_step_model import raw_scenario  # noqa: E402

CAT = load_catalog()
ACC = "h100-sxm"
SC = build_scenario(raw_scenario(), CAT)
BASE = CAT.perf(ACC)
TRUTH = BASE.with_values(gemm_efficiency=0.68, gemm_k_half=48.0, memory_efficiency=0.82, kernel_overhead=9e-6,
                         attention_efficiency=0.55, tp_efficiency=0.85, collective_latency=15e-6)
JITTER = (0.004, -0.003, 0.002, -0.005, 0.001)  # deterministic "measurement noise", rms 0.34 %


def fake(count=8, jitter=JITTER):
    return D.FakeDevice(SC.system(ACC).acc, TRUTH, SC, count=count, jitter=jitter)


def test_fake_gemm_is_the_closed_form():
    # 8192^3 BF16 GEMM on an H100 SXM (989 TFLOP/s dense BF16, 132 SMs, 128 x 128 tiles):
    # tiles 64 x 64 = 4,096 in ceil(4096 / 132) = 32 waves: q_wave = 4096 / (32 x 132) = 0.96970;
    # eta = 0.68 x 1 x 0.96970 x 8192 / (8192 + 48) = 0.65554; t = 2 x 8192^3 / (989e12 x 0.65554) + 9 us
    acc = SC.system(ACC).acc
    assert acc.peak_flops == pytest.approx(989e12, rel=0.01) and BASE.sms == 132
    eta = 0.68 * (4096 / (32 * 132)) * 8192 / (8192 + 48)
    expected = 2 * 8192 ** 3 / (acc.peak_flops * eta) + 9e-6
    assert fake(jitter=(0.0,)).gemm_s(8192, 8192, 8192) == pytest.approx(expected, rel=1e-12)
    # and the model's prediction of the same GEMM with the true parameters is that time
    obs = D.observations(fake(jitter=(0.0,)), SC, ACC)
    g = next(o for o in obs if o.name == "gemm 8192x8192x8192")
    assert float(g.predict(TRUTH)[0]) == pytest.approx(expected, rel=1e-9)
    # a 2 GiB copy reads and writes 4 GiB: 2 x 2^31 / (3.35e12 x 0.82) + 9 us
    assert fake(jitter=(0.0,)).copy_s(2 << 30) == pytest.approx(2 * 2 ** 31 / (acc.hbm_bandwidth * 0.82) + 9e-6)


@pytest.fixture(scope="module")
def measured():
    return D.measure(fake(), SC, ACC, BASE)


def test_measure_recovers_the_parameters_within_their_uncertainty(measured):
    est = {e.name: e for e in measured.estimates}
    for name in ("gemm_efficiency", "gemm_k_half", "memory_efficiency", "kernel_overhead", "attention_efficiency",
                 "tp_efficiency", "collective_latency"):
        e, truth = est[name], getattr(TRUTH, name)
        assert e.identified, e
        assert abs(math.log(e.value / truth)) < 3 * e.sigma, (name, e.value, truth, e.sigma)
    # the large-GEMM, HBM and collective efficiencies are pinned to a few per cent
    for name in ("gemm_efficiency", "memory_efficiency", "tp_efficiency"):
        assert est[name].sigma < 0.05 and est[name].value == pytest.approx(getattr(TRUTH, name), rel=0.03)
    # nothing on one host times the scale-out fabric: not identified, the prior kept
    assert not est["dp_efficiency"].exercised and est["dp_efficiency"].value == BASE.dp_efficiency
    # 19 timings, 7 identified parameters: the spread is of the injected jitter's size (rms 0.34 %)
    assert measured.dof == 19 - 7 and 0.001 < measured.residual_sigma < 0.01


def test_one_gpu_times_no_collective():
    cal = D.measure(fake(count=1), SC, ACC, BASE)
    est = {e.name: e for e in cal.estimates}
    assert not est["tp_efficiency"].exercised and not est["collective_latency"].exercised
    assert est["gemm_efficiency"].identified


def test_device_module_needs_no_torch():
    # in a fresh interpreter: the suite's framework-export tests import torch themselves (the frameworks extra)
    import subprocess

    code = "import sys, tpopt.optimizer.device\nprint('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_cli_measure_writes_a_measured_performance_table(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from tpopt.cli.main import cli

    monkeypatch.setattr(D, "open_device", lambda: fake())
    scen = tmp_path / "s.toml"
    scen.write_text('[model]\nname = "qwen3-8b"\n[task]\ntokens = "10B"\nseq_len = 4096\nglobal_batch = 64\n'
                    '[schedule]\ndeadline = "300d"\n[hardware]\naccelerator = "h100-sxm"\n')
    out = tmp_path / "tuned"
    r = CliRunner().invoke(cli, ["calibrate", "--measure", "--scenario", str(scen), "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    got = {p["name"]: p for p in d["parameters"]}
    assert got["gemm_efficiency"]["value"] == pytest.approx(0.68, rel=0.03)
    perf = load_catalog((str(out),)).perf(ACC)
    assert perf.gemm_k_half == pytest.approx(got["gemm_k_half"]["value"], rel=1e-9)
    assert perf.sources["gemm_efficiency"].startswith("measured: tpopt calibrate --measure on fake device")
    assert perf.residual_sigma == pytest.approx(d["residual_sigma"], abs=1e-6)
    # the footing of a plan on the measured table says so
    r = CliRunner().invoke(cli, ["evaluate", "--scenario", str(scen), "--cards", "8", "--catalog", str(out),
                                 "--json"])
    foot = {p["name"]: p["provenance"] for p in json.loads(r.output)["footing"]["parameters"]}
    assert foot["gemm_efficiency"] == "measured" and foot["memory_efficiency"] == "measured"
