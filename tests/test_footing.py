"""The footing of every report (issue 23 item 7, issue 25 item 1): which step-time model ran and what
switches it, the implied MFU by its stated convention, the stack, where each performance parameter and the
price come from; in the JSON and in the text, from the same dict."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tpopt.cli.main import cli
from tpopt.presentation import footing_lines

ROOT = Path(__file__).resolve().parents[1]
DC = ROOT / "examples" / "design-case.toml"
EFF_LINE = "efficiency = 0.40        # compute efficiency (Llama 3 reports 38-43 % BF16 MFU)"


def run(*args):
    r = CliRunner().invoke(cli, list(map(str, args)))
    assert r.exit_code in (0, 3), r.output
    return r.output


def per_op_case(tmp_path):
    text = DC.read_text()
    assert EFF_LINE in text
    p = tmp_path / "per-op.toml"
    p.write_text(text.replace(EFF_LINE, "").replace('accelerator = "rtx4090"', 'accelerator = "h100-sxm"')
                 .replace('usable_memory = "22GiB"  # 24 GB = 22.35 GiB, less runtime reserve', ""))
    return p


def test_flat_mfu_is_the_stated_efficiency_times_the_compute_share():
    # flat model, no recompute, dense model: compute = model FLOPs / (cards x peak x efficiency), so
    # MFU = F / (cards x peak x step) = efficiency x compute_s / step_s (the rest of the step is exposed
    # communication and input wait); the design case: 0.40 x 52.22 / 52.80 = 39.6 %
    d = json.loads(run("evaluate", "--scenario", DC, "--cards", "48", "--json"))
    f, m = d["footing"], d["metrics"]
    assert f["step_time_model"] == "flat" and f["efficiency"] == 0.4
    assert f["mfu"] == pytest.approx(0.4 * m["compute_s"] / m["step_s"], rel=1e-9)
    assert "6 N_active" in f["mfu_convention"] and "BF16" in f["mfu_convention"]
    assert f["stack"] == "megatron-core"
    assert f["parameters"] == []  # the flat model has no performance parameters


def test_deleting_the_efficiency_line_switches_the_model_and_the_footing_says_so(tmp_path):
    flat = run("evaluate", "--scenario", DC, "--cards", "48")
    assert "Footing: flat step time (hardware.efficiency = 0.4 stated; without it, per-operation)" in flat
    p = per_op_case(tmp_path)
    text = run("evaluate", "--scenario", p, "--cards", "8")
    d = json.loads(run("evaluate", "--scenario", p, "--cards", "8", "--json"))
    f = d["footing"]
    assert f["step_time_model"] == "per-operation" and f["efficiency"] is None
    assert "Footing: per-operation step time (no hardware.efficiency stated)" in text
    # every parameter that moves an 8-card, one-host plan: the compute ones and the scale-up tier
    names = [q["name"] for q in f["parameters"]]
    assert names == ["gemm_efficiency", "attention_efficiency", "attention_bwd_ratio", "memory_efficiency",
                     "kernel_overhead", "tp_efficiency"]
    assert all(q["provenance"] in ("measured", "prior", "calibrated", "measured x fitted gap")
               for q in f["parameters"])
    # the text is the JSON's footing rendered (same source): MFU printed to 0.1 %
    assert f"implied MFU {f['mfu'] * 100:.1f} %" in text
    for line in footing_lines(f, 100):
        assert line in text


def test_provenance_follows_the_performance_toml(tmp_path):
    cat = tmp_path / "cat"
    cat.mkdir()
    (cat / "performance.toml").write_text(
        '[h100-sxm]\ngemm_efficiency = 0.6\nresidual_sigma = 0.04\nresidual_sigma_source = "test"\n'
        '[h100-sxm.sources]\ngemm_efficiency = "calibrated: tpopt calibrate on my-run-1 (+-2.0 %)"\n'
        'memory_efficiency = "measured: tpopt calibrate --measure on fake device (+-1.0 %)"\n'
        'kernel_overhead = "assumption: my guess"\n')
    p = per_op_case(tmp_path)
    d = json.loads(run("evaluate", "--scenario", p, "--cards", "8", "--catalog", cat, "--json"))
    prov = {q["name"]: q["provenance"] for q in d["footing"]["parameters"]}
    assert prov["gemm_efficiency"] == "calibrated" and prov["memory_efficiency"] == "measured"
    assert prov["kernel_overhead"] == "prior"
    text = run("evaluate", "--scenario", p, "--cards", "8", "--catalog", cat)
    assert "calibrated on my-run-1: GEMM 0.6" in text


def test_a_scaled_prior_says_so_in_text_and_json(tmp_path):
    """The H200's GEMM share is its published measurement x the fitted H100's fitted / prior ratio
    (performance.toml prior_scale_from): the footing names it as such, not as a plain measurement, and the
    value is that product (the two ratios read from the catalog's raw tables)."""
    from tpopt.catalogs import load_catalog

    raw = load_catalog().raw["performance"]
    h100 = raw["h100-sxm"]
    want = raw["h200"]["gemm_efficiency"] * h100["gemm_efficiency"] / h100["calibration"]["prior"][0]
    p = tmp_path / "h200.toml"
    p.write_text(per_op_case(tmp_path).read_text().replace('accelerator = "h100-sxm"', 'accelerator = "h200"'))
    d = json.loads(run("evaluate", "--scenario", p, "--cards", "8", "--json"))
    gemm = next(q for q in d["footing"]["parameters"] if q["name"] == "gemm_efficiency")
    assert gemm["provenance"] == "measured x fitted gap" and gemm["value"] == pytest.approx(want)
    assert "h100-sxm" in gemm["source"] and "698.6" in gemm["source"]
    assert f"measured x fitted gap GEMM {want:.3g}" in run("evaluate", "--scenario", p, "--cards", "8")


def test_price_provenance(tmp_path):
    f = json.loads(run("evaluate", "--scenario", DC, "--cards", "48", "--json"))["footing"]["price"]
    assert f["provenance"] == "catalog" and f["date"] == "2025-06" and not f["illustrative"]
    own = tmp_path / "own.toml"
    own.write_text(DC.read_text() + '\n[cost]\ncard_hour = 0.45\n')
    f = json.loads(run("evaluate", "--scenario", own, "--cards", "48", "--json"))["footing"]["price"]
    assert f["provenance"] == "scenario" and f["card_hour"] == 0.45
    # the H20's catalog price is "assumption: illustrative": flagged in the JSON and the text
    out = run("evaluate", "--scenario", DC, "--hw", "h20", "--cards", "48")
    d = json.loads(run("evaluate", "--scenario", DC, "--hw", "h20", "--cards", "48", "--json"))
    assert d["footing"]["price"]["illustrative"] and "ILLUSTRATIVE, not a market quote" in out


def test_solve_explain_and_rl_carry_the_footing():
    solve = json.loads(run("solve", "--scenario", DC, "--json"))
    assert solve["footing"]["step_time_model"] == "flat"
    explain = json.loads(run("explain", "--scenario", DC, "--cards", "48", "--json"))
    assert explain["footing"] == json.loads(run("evaluate", "--scenario", DC, "--cards", "48", "--json"))["footing"]
    rl = json.loads(run("rl", "--scenario", ROOT / "examples" / "rl-grpo-qwen3-8b.toml", "--json"))
    assert rl["footing"]["of"] == "learner" and 0 < rl["footing"]["mfu"] < 1


def test_sweep_rows_carry_the_footing(tmp_path):
    out = tmp_path / "s.json"
    run("sweep", "--scenario", ROOT / "examples" / "design-case-sweep.toml", "--deadline", "30d", "--out", out)
    rows = json.loads(out.read_text())
    rows = rows["rows"] if isinstance(rows, dict) else rows
    ok = [r for r in rows if r["status"] == "optimal"]
    assert ok and all(r["step_model"] == "flat" and r["stack"] == "megatron-core" and 0 < r["mfu"] < 0.4
                      and r["price_provenance"].startswith("catalog 2025-06") for r in ok)


def test_a_stack_on_the_pooled_kernel_factor_says_so(tmp_path):
    # DeepSpeed: no shared-table run ran it, so its kernel factor is the pool of the stacks fitted on their own runs
    # with kernels of their own (benchmarks/fit_stacks.py pooled_prior): their geometric mean, one vote per stack,
    # derived here from the catalog's fitted factors; the footing states it (it moves every step time), in the
    # JSON and the text. A fitted stack (torchtitan-compile), the reference stack and the flat model state none.
    import math

    from tpopt.catalogs.stacks import stack_profile

    fitted = [stack_profile(s).kernel_efficiency for s in ("torchtitan", "torchtitan-compile", "maxtext")]
    pool = math.exp(sum(math.log(f) for f in fitted) / len(fitted))
    ds = stack_profile("deepspeed")
    assert ds.sources["kernel_efficiency"].startswith("pooled")
    assert ds.kernel_efficiency == pytest.approx(pool, abs=5e-4)  # written to three decimals
    per_op = per_op_case(tmp_path)
    text = per_op.read_text()

    def stated(stack, flat=False):
        p = tmp_path / f"{stack}-{flat}.toml"
        body = text.replace("[hardware]\n", f'[hardware]\nstack = "{stack}"\n' + (EFF_LINE + "\n" if flat else ""))
        p.write_text(body)
        d = json.loads(run("evaluate", "--scenario", p, "--cards", "48", "--json"))
        assert d["footing"]["stack"] == stack
        return [s for s in d["footing"]["stated"] if "kernel_efficiency" in s], "\n".join(footing_lines(d["footing"]))

    got, lines = stated("deepspeed")
    assert [s["kernel_efficiency"] for s in got] == [ds.kernel_efficiency]
    assert f"deepspeed's kernels at {ds.kernel_efficiency:.3f} of the reference stack's" in lines.replace("\n    ", " ")
    for stack in ("torchtitan-compile", "megatron-core"):
        assert stated(stack)[0] == []
    assert stated("deepspeed", flat=True)[0] == []  # the flat model does not read the stack's kernels


def test_a_moe_plan_states_the_fitted_grouped_gemm_factor(tmp_path):
    # The grouped expert GEMM calls take t_model / g, g fitted on the stack's MoE runs (catalogs/stacks.toml
    # grouped_gemm_efficiency, benchmarks/fit_grouped_gemm.py): a fitted factor that moves every MoE step time, so
    # the footing states it with the number of runs its source names, in the JSON and the text; a dense model
    # states none (nor does the flat model, which does not read the stack's kernels).
    import re

    from tpopt.catalogs.stacks import stack_profile

    mc = stack_profile("megatron-core")
    runs = int(re.search(r"on the (\d+) MoE runs", mc.sources["grouped_gemm_efficiency"]).group(1))
    assert mc.grouped_gemm_efficiency != 1.0 and runs > 0
    moe = tmp_path / "qwen3-per-op.toml"
    flat = "efficiency = 0.40         # MFU of the matrix work (flat step-time model)\n"
    text = (ROOT / "examples" / "qwen3-30b-a3b.toml").read_text()
    assert flat in text
    moe.write_text(text.replace(flat, ""))
    d = json.loads(run("evaluate", "--scenario", moe, "--hw", "h100-sxm", "--cards", "64", "--zero", "1", "--ep", "8",
                       "--json"))
    got = [s for s in d["footing"]["stated"] if s["input"] == "grouped expert GEMM"]
    assert [(s["grouped_gemm_efficiency"], s["fitted_runs"]) for s in got] == [(mc.grouped_gemm_efficiency,
                                                                                  runs)]
    lines = "\n".join(footing_lines(d["footing"])).replace("\n    ", " ")
    g = mc.grouped_gemm_efficiency
    said = f"grouped expert GEMM calls at {g:.3f} of their modelled speed (megatron-core's fit on {runs} MoE runs"
    assert said in lines
    dense = json.loads(run("evaluate", "--scenario", per_op_case(tmp_path), "--cards", "48", "--json"))
    assert not [s for s in dense["footing"]["stated"] if s["input"] == "grouped expert GEMM"]
    flat_moe = json.loads(run("evaluate", "--scenario", ROOT / "examples" / "qwen3-30b-a3b.toml", "--hw", "h100-sxm",
                              "--cards", "64", "--zero", "1", "--ep", "8", "--json"))
    assert not [s for s in flat_moe["footing"]["stated"] if s["input"] == "grouped expert GEMM"]


CUSTOM_CARD = """[nvl-custom]
peak_bf16 = "835TFLOP/s"
memory = "94GB"
usable_memory = "87GiB"
hbm_bandwidth = "3900GB/s"
host_link = "pcie5-x16"
cards_per_host = 8
nic = "400g"
nics_per_host = 2
price_card_hour = 2.5
price_date = "2026-10"
[nvl-custom.sources]
peak_bf16 = "my datasheet"
memory = "my datasheet"
usable_memory = "my datasheet"
hbm_bandwidth = "my datasheet"
host_link = "my datasheet"
cards_per_host = "my server"
nic = "my server"
nics_per_host = "my server"
price_card_hour = "my quote"
"""


@pytest.mark.parametrize("own_entry", [True, False])
def test_a_value_a_card_takes_from_default_is_a_prior_not_a_measurement(tmp_path, own_entry):
    """performance.toml's [default] cites measurements made on other cards (FlashAttention-2 on the A100,
    nccl-tests on a DGX A100's NVLink 3). A card that takes a value from [default] -- a user's new card with a
    partial entry, or none -- was never measured: the value is carried over, which docs/catalogs.md's footing
    calls a prior ("an assumption or a value carried over"); only the values the card's own entry states keep
    their provenance."""
    (tmp_path / "accelerators.toml").write_text(CUSTOM_CARD)
    if own_entry:
        (tmp_path / "performance.toml").write_text(
            '[nvl-custom]\ngemm_efficiency = 0.7\n[nvl-custom.sources]\n'
            'gemm_efficiency = "nccl-free matmul benchmark on my card"\n')
    d = json.loads(run("evaluate", "--catalog", tmp_path, "--hw", "nvl-custom", "--cards", "8", "--model",
                       "qwen3-0.6b", "--tokens", "1B", "--seq-len", "4096", "--global-batch", "64",
                       "--deadline", "30d", "--json"))
    prov = {q["name"]: (q["provenance"], q["source"]) for q in d["footing"]["parameters"]}
    # [default]'s attention (Dao 2023 on the A100) and scale-up (nccl-tests on DGX A100) are measurements there
    assert prov["attention_efficiency"][0] == "prior" and "[default]" in prov["attention_efficiency"][1]
    assert prov["tp_efficiency"][0] == "prior" and "[default]" in prov["tp_efficiency"][1]
    assert prov["gemm_efficiency"][0] == ("measured" if own_entry else "prior")
    text = run("evaluate", "--catalog", tmp_path, "--hw", "nvl-custom", "--cards", "8", "--model", "qwen3-0.6b",
               "--tokens", "1B", "--seq-len", "4096", "--global-batch", "64", "--deadline", "30d")
    params = text.split("parameters: ")[1].split("price:")[0]
    assert ("measured GEMM 0.7;" in params) if own_entry else ("measured" not in params)


def test_the_default_entry_itself_keeps_its_sources():
    from tpopt.catalogs import load_catalog
    from tpopt.optimizer.footing import provenance

    cat = load_catalog()
    assert provenance(cat.performance["default"].sources["tp_efficiency"]) == "measured"
    assert provenance(cat.perf("gaudi3").sources["tp_efficiency"]) == "prior"  # no entry of its own


@pytest.mark.parametrize("line, words", [
    ('write_bandwidth = "7GB/s"  # DGX SuperPOD \'Good\' tier, one SU',
     "7 GB/s ([checkpoint] write_bandwidth, the superpod-good tier's;"),
    ('storage = "superpod-better"', "20 GB/s (storage tier superpod-better;"),
    ('write_bandwidth = "13GB/s"', "13 GB/s ([checkpoint] write_bandwidth, no catalog tier;"),
    ("", "7 GB/s (default, the superpod-good tier's;"),
])
def test_the_storage_line_names_the_storage_tier(tmp_path, line, words):
    """The footing's storage line names where the bandwidth comes from and its tier (catalogs/storage.toml:
    superpod-good 7 GB/s, superpod-better 20 GB/s; no tier holds 13 GB/s; the default is 7 GB/s)."""
    text = DC.read_text()
    old = "write_bandwidth = \"7GB/s\"  # DGX SuperPOD 'Good' tier, one SU"
    assert old in text
    p = tmp_path / "s.toml"
    p.write_text(text.replace(old, line))
    d = json.loads(run("evaluate", "--scenario", p, "--cards", "48", "--json"))
    (st,) = [e for e in d["footing"]["stated"] if e["input"] == "storage bandwidth"]
    assert st["stated"].startswith(words)
    out = " ".join(run("evaluate", "--scenario", p, "--cards", "48").split())
    assert "storage bandwidth " + words in out


USER_OFFER = """[region."mycloud/lab"]
source = "my lab"

[offer.my-h100]
provider = "mycloud"
region = "lab"
accelerator = "h100-sxm"
cards_per_host = 8
market = "on-demand"
price_card_hour = 1.11
available = 64
date = "2026-11"
source = "my negotiated quote"
"""


def test_a_user_catalogs_price_is_labelled_by_its_file(tmp_path):
    """A price a --catalog directory states (an offer of its offers.toml, a card of its accelerators.toml) is the
    user's number: the footing labels it 'user catalog' with the file, never the shipped catalog's 'list price';
    the shipped catalog's offer keeps 'catalog'."""
    (tmp_path / "offers.toml").write_text(USER_OFFER)
    (tmp_path / "accelerators.toml").write_text(CUSTOM_CARD)
    sc = tmp_path / "s.toml"
    sc.write_text(DC.read_text() + '\n[market]\noffers = ["my-h100"]\n')
    d = json.loads(run("solve", "--scenario", sc, "--catalog", tmp_path, "--hw", "h100-sxm", "--json"))
    pr = d["footing"]["price"]
    assert pr["provenance"] == "user catalog" and pr["card_hour"] == 1.11 and pr["date"] == "2026-11"
    assert str(tmp_path / "offers.toml") in pr["source"] and "list price" not in pr["kind"]
    text = " ".join(run("solve", "--scenario", sc, "--catalog", tmp_path, "--hw", "h100-sxm").split())
    assert (f"price: 1.11 USD/card-h, user catalog 2026-11, the price your catalog file states: offer "
            f"mycloud/lab/h100-sxm/on-demand in {tmp_path / 'offers.toml'}") in text
    # a card of the user's accelerators.toml, at its own price
    d = json.loads(run("evaluate", "--catalog", tmp_path, "--hw", "nvl-custom", "--cards", "8", "--model",
                       "qwen3-0.6b", "--tokens", "1B", "--seq-len", "4096", "--global-batch", "64",
                       "--deadline", "30d", "--json"))
    pr = d["footing"]["price"]
    assert pr["provenance"] == "user catalog" and pr["card_hour"] == 2.5
    assert pr["source"] == f"my quote ({tmp_path / 'accelerators.toml'})"
    # the shipped catalog's offer of the same card: 'catalog', as before
    shipped = tmp_path / "shipped.toml"
    shipped.write_text(DC.read_text() + '\n[market]\noffers = ["nebius-h100-od"]\n')
    pr = json.loads(run("solve", "--scenario", shipped, "--hw", "h100-sxm", "--json"))["footing"]["price"]
    assert pr["provenance"] == "catalog" and pr["kind"] == "list price"
