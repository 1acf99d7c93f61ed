"""Stacks as data that decide what they decide: a stack's kernel efficiency scales the card's kernel
efficiencies (catalogs/stacks.toml kernel_efficiency, models/roofline.stack_scaled), the stack's own overlap
defaults apply where a scenario is silent, the published torchtitan rows run on the Grand Teton H100 and on the
stack variant they ran (eager or torch.compile), cards derived from another card's entry, prior cards with their
sources, and benchmarks/fit_stacks.py's fit and in-place rewrite.

Expected values are derived here: the roofline's t = max(F / (P eta), Q / (B eta_m)) + c t_k gives, with every
efficiency multiplied by f (no efficiency reaching 1), (t - c t_k)(f) = (t - c t_k)(1) / f for every kernel.
"""

import importlib.util
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import tpopt
from tpopt.catalogs import load_catalog
from tpopt.catalogs.stacks import stack_names, stack_profile
from tpopt.models import ops, steptime
from tpopt.models import terms as T
from tpopt.models.roofline import STACK_SCALED, PerfParams, stack_scaled
from tpopt.optimizer.runs import runs_from_csv

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = ROOT / "benchmarks" / "data" / "published-2024-2026.csv"
ACC = "h100-sxm"


def per_op(stack="megatron-core", comm=None, **hw):
    raw = {"model": {"name": "llama3-8b"}, "task": {"tokens": "1B", "seq_len": 4096, "global_batch": 64},
           "schedule": {"deadline": "365d"}, "hardware": {"accelerator": [ACC], "stack": stack, **hw}}
    if comm is not None:
        raw["comm"] = comm
    return tpopt.scenario(raw)


def kernel_work(sc, tp=2, mb=2):
    """Sum over one block's kernels of (kernel time - its fixed launch cost): the part the efficiencies set."""
    lay = T.layout(sc, tp=tp, mb=mb)
    r = T.rates(sc, ACC)
    return sum(float(steptime.kernel_time(k, r, lay.act_bytes)) - float(np.asarray(k.count)) * r.perf.kernel_overhead
               for k in ops.layer_kernels(sc.model, lay))


def test_stack_kernel_efficiency_divides_every_kernels_work_time_by_its_factor():
    sc = per_op()
    assert sc.stack.kernel_efficiency == 1.0
    f = 0.6
    slow = replace(sc, stack=replace(sc.stack, kernel_efficiency=f))
    # every efficiency x 0.6 stays below 1, so each kernel's max(F / (P eta f), Q / (B eta_m f)) is 1/f of f = 1's
    assert kernel_work(slow) == pytest.approx(kernel_work(sc) / f, rel=1e-9)
    # and the step of a fixed plan grows (the same plan, only the stack's factor changed)
    plan = {"cards": 8, "accelerator": ACC, "tp": 2, "pp": 1, "micro_batch": 2, "zero_stage": 1}
    assert tpopt.evaluate(slow, **plan).metrics["step_s"] > tpopt.evaluate(sc, **plan).metrics["step_s"]


def test_stack_scaled_caps_each_efficiency_at_one_and_leaves_the_rest():
    perf = PerfParams(gemm_efficiency=0.8, attention_efficiency=0.5, memory_efficiency=0.7)
    up = stack_scaled(perf, 1.5)
    assert (up.gemm_efficiency, up.attention_efficiency, up.memory_efficiency) == pytest.approx((1.0, 0.75, 1.0))
    assert up.tp_efficiency == perf.tp_efficiency and up.kernel_overhead == perf.kernel_overhead
    assert stack_scaled(perf, 1.0) is perf
    assert set(STACK_SCALED) == {"gemm_efficiency", "attention_efficiency", "memory_efficiency"}


def test_every_stack_states_its_kernel_efficiency_with_a_source_and_references_are_one():
    for name in stack_names():
        p = stack_profile(name)
        assert 0.0 < p.kernel_efficiency <= 2.0 and p.sources.get("kernel_efficiency")
    for ref in ("megatron-core", "megatron-lm-2021"):
        assert stack_profile(ref).kernel_efficiency == 1.0
    for fitted in ("torchtitan", "torchtitan-compile", "maxtext"):
        assert stack_profile(fitted).sources["kernel_efficiency"].startswith("fitted: benchmarks/fit_stacks.py")
    # torch.compile fuses what eager torchtitan runs op by op: the compiled variant is the faster one
    assert stack_profile("torchtitan-compile").kernel_efficiency > stack_profile("torchtitan").kernel_efficiency


def test_megatron_core_overlaps_tp_by_default_when_the_scenario_is_silent():
    assert stack_profile("megatron-core").tp_overlap is True
    assert per_op().tp_overlap == (1.0, 1.0)  # silent: Megatron-Core's tp_comm_overlap (chunked, both phases)
    assert per_op(comm={"tp_overlap": False}).tp_overlap == (0.0, 0.0)  # stated: kept
    assert per_op(comm={"tp_overlap": "async"}).tp_overlap == (0.0, 1.0)
    assert per_op(comm={"overlap": False}).tp_overlap == (0.0, 0.0)  # no overlap at all: documented default
    assert per_op("torchtitan").tp_overlap == (0.0, 0.0)  # async TP is opt-in there
    assert per_op("megatron-lm-2021").dp_overlap == 0.0  # its gradient all-reduce ran after the backward
    assert per_op("megatron-lm-2021", comm={"dp_overlap": True}).dp_overlap == 1.0
    # the chapter's flat model (hardware.efficiency) keeps the documented defaults
    assert per_op(efficiency=0.4).tp_overlap == (0.0, 0.0)


def test_fsdp_prefetch_is_the_stacks_unless_the_scenario_states_it(monkeypatch):
    import tpopt.catalogs.stacks as S
    from tpopt.catalogs.scenario import build_scenario

    assert per_op().memory.prefetch == stack_profile("megatron-core").fsdp_prefetch
    stacks = dict(S._builtin())
    stacks["probe"] = replace(stacks["megatron-core"], name="probe", fsdp_prefetch=2)
    monkeypatch.setattr(S, "_builtin", lambda: stacks)
    raw = {"model": {"name": "llama3-8b"}, "task": {"tokens": "1B", "seq_len": 4096, "global_batch": 64},
           "schedule": {"deadline": "365d"}, "hardware": {"accelerator": [ACC], "stack": "probe"}}
    assert build_scenario(raw).memory.prefetch == 2  # silent: the stack's
    assert build_scenario({**raw, "memory": {"prefetch": 1}}).memory.prefetch == 1  # stated: kept


def test_torchtitan_rows_run_on_the_grand_teton_card_and_the_stack_variant_they_ran():
    runs = {r.name: r for r in runs_from_csv(PUBLISHED, load_catalog())}
    for name in ("T1", "T4"):  # the plain "FSDP" rows of Tables 1 and 3: eager
        assert runs[name].scenario.stack.name == "torchtitan"
    for name in ("T2", "T3", "T5", "L1", "H1"):
        assert runs[name].scenario.stack.name == "torchtitan-compile"
    for name in ("T1", "T9", "L5"):
        assert runs[name].accelerator == "h100-96gb-hbm2e"
    assert runs["H1"].accelerator == "h200" and runs["D1"].accelerator == "h100-sxm"
    assert runs["D1"].scenario.stack.name == "megatron-core"


def test_grand_teton_h100_is_the_h100_sxm_entry_at_its_own_bandwidth_and_power():
    cat = load_catalog()
    gt, sxm = cat.accelerator("h100-96gb-hbm2e"), cat.accelerator("h100-sxm")
    assert gt.hbm_bandwidth == pytest.approx(2.4e12) and gt.memory_nominal == pytest.approx(96e9)
    assert gt.peak_flops == sxm.peak_flops  # the same GH100 at the boost clock
    p, q = cat.perf("h100-96gb-hbm2e"), cat.perf("h100-sxm")
    ratio = round((500.0 / 700.0) ** (1.0 / 3.0), 3)  # sustained clock ~ power^(1/3): 0.894
    assert p.gemm_efficiency == pytest.approx(q.gemm_efficiency * ratio)
    assert p.attention_efficiency == pytest.approx(q.attention_efficiency * ratio)
    assert (p.memory_efficiency, p.fp8_gemm_ratio, p.sms) == (q.memory_efficiency, q.fp8_gemm_ratio, q.sms)
    assert p.calibrated == () and p.residual_sigma == 0.0  # not fitted on its own runs: a prior card
    assert "h100-sxm" in p.sources["gemm_efficiency"] and "clock_ratio" in p.sources["gemm_efficiency"]


PRIOR_CARDS = {
    # card: (published sustained-matmul share the prior rests on, the source's words that must be cited)
    "h200": (698.6 / 989.0, "698.6"),
    "b300": (1769.0 / 2250.0 * 0.815, "1,769"),
    "gb300-nvl72": (1769.0 * 0.815 * (1400.0 / 1100.0) ** (1.0 / 3.0) / 2500.0, "1,769"),
    "mi300x": (668.4 / 1307.4 * 0.848, "668.4"),
    "mi325x": (784.9 / 1307.4 * 0.848, "784.9"),
    "mi355x": (1565.0 / 2500.0 * 0.815, "1,565"),
}


SCALED_BY = {  # card: the fitted cards whose fitted / prior GEMM share scales its prior (performance.toml)
    "h200": ("h100-sxm",), "b300": (), "gb300-nvl72": (),  # Blackwell Ultra: its own measurement, unscaled
    **{c: ("h100-sxm", "b200", "gb200-nvl72") for c in ("mi300x", "mi325x", "mi355x")},
}


@pytest.mark.parametrize("card", sorted(PRIOR_CARDS))
def test_prior_cards_rest_on_their_own_published_measurements_with_sources(card):
    cat = load_catalog()
    p = cat.perf(card)
    share, cited = PRIOR_CARDS[card]
    perf = cat.raw["performance"]
    assert perf[card]["gemm_efficiency"] == pytest.approx(share, abs=0.002)  # the stated prior: the measurement
    # the value used: that measurement x the geometric mean of fitted / prior over the cards it is scaled by, each
    # pair read from the catalog's own fitted value and its [card.calibration] prior (one fitted field each)
    fits = [perf[c]["gemm_efficiency"] / perf[c]["calibration"]["prior"][0] for c in SCALED_BY[card]]
    assert all(perf[c]["calibrated"] == ["gemm_efficiency"] for c in SCALED_BY[card])
    ratio = float(np.prod(fits)) ** (1.0 / len(fits)) if fits else 1.0
    assert p.gemm_efficiency == pytest.approx(share * ratio, abs=0.002)
    assert ("fitted / prior GEMM share" in p.sources["gemm_efficiency"]) == bool(fits)
    assert p.calibrated == ()  # a prior: nothing was fitted on it
    src = p.sources["gemm_efficiency"]
    assert src.startswith("prior") and cited in src
    assert "GB200" not in src or "not the GB200's fit" in src
    raw = cat.raw["performance"][card]
    assert set(raw) - {"sources"} <= set(raw["sources"])  # every stated value has a source


def test_gb300_attention_prior_is_at_least_the_gb200s_it_was_said_to_copy():
    cat = load_catalog()
    assert cat.perf("gb300-nvl72").attention_efficiency >= cat.perf("gb200-nvl72").attention_efficiency


def _fit_stacks():
    spec = importlib.util.spec_from_file_location("fit_stacks", ROOT / "benchmarks" / "fit_stacks.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["fit_stacks"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_fit_root_is_where_the_median_log_error_crosses_zero():
    fs = _fit_stacks()
    g = fs.GRID
    # three runs whose log error is ln(c / f): the median crosses zero at the median c
    errs = np.log(np.array([[0.5], [0.8], [1.1]]) / g[None, :])
    assert fs.median_root(errs) == pytest.approx(0.8, abs=1e-3)


def test_write_rewrites_only_the_fitted_value_and_its_source(tmp_path):
    fs = _fit_stacks()
    path = tmp_path / "stacks.toml"
    text = fs.STACKS_TOML.read_text()
    path.write_text(text)
    res = {"stack": "maxtext", "f": 0.777, "runs": ["X1", "X2"], "tables": ["t"], "cards": ["h100-sxm"],
           "before": np.array([-0.1, -0.2]), "after": np.array([0.01, -0.01]), "loo": np.array([0.02, -0.02])}
    fs.write([res], path)
    new = path.read_text()
    changed = [(a, b) for a, b in zip(text.splitlines(), new.splitlines(), strict=True) if a != b]
    assert len(changed) == 2
    assert changed[0][1] == "kernel_efficiency = 0.777"
    assert changed[1][1].startswith('kernel_efficiency = "fitted: benchmarks/fit_stacks.py on the 2 runs')
    import tomllib
    assert tomllib.loads(new)["maxtext"]["kernel_efficiency"] == 0.777


def test_a_stack_no_run_fitted_takes_the_geometric_mean_of_the_stacks_with_kernels_of_their_own():
    """fit_stacks.pooled_prior: exp(mean ln f) over the fitted stacks with kernels of their own, one vote per stack;
    the reference stacks and NeMo 24.03 (Megatron-Core with Transformer Engine underneath) are not pooled."""
    fs = _fit_stacks()
    f, pooled = fs.pooled_prior({"megatron-core": 1.0, "a": 0.64, "b": 0.81, "nemo-2403": 1.5})
    assert pooled == ("a", "b") and f == pytest.approx(0.72)  # sqrt(0.64 x 0.81)
    assert fs.pooled_prior({"megatron-core": 1.0, "nemo-2403": 1.01}) == (1.0, ())
    # the catalog: DeepSpeed, which no shared-table run ran, at the pool of the three fitted stacks' factors
    own = [stack_profile(s).kernel_efficiency for s in ("torchtitan", "torchtitan-compile", "maxtext")]
    want = float(np.prod(own)) ** (1.0 / 3.0)
    ds = stack_profile("deepspeed")
    assert ds.kernel_efficiency == pytest.approx(want, abs=6e-4) and ds.kernel_efficiency < 1.0
    src = ds.sources["kernel_efficiency"]
    assert src.startswith("pooled: benchmarks/fit_stacks.py")
    eager = f"torchtitan {stack_profile('torchtitan').kernel_efficiency:.3f}"  # each pooled factor named with its value
    assert all(s in src for s in (eager, "torchtitan-compile", "maxtext", "T1 T4", "X1 X2"))
    assert "nemo-2403" in src and fs.unfitted_stacks(["torchtitan", "torchtitan-compile", "maxtext"]) == [
        "deepspeed"]


def test_leaving_a_stacks_only_source_out_sends_it_to_the_other_stacks_pool():
    """validate_published.stack_left_out: a stack whose runs all come from the source left out takes the pool of
    the OTHER sources' stacks (an out-of-sample prior): MaxText out, the geometric mean of torchtitan's two
    factors; torchtitan out (both of its stacks), MaxText's factor alone; NeMo out, the reference kernels' 1."""
    from tests.test_validation_machinery import _module
    vp = _module("validate_published")
    runs = runs_from_csv(PUBLISHED, load_catalog())
    f = {s: stack_profile(s).kernel_efficiency for s in ("torchtitan", "torchtitan-compile", "maxtext")}

    def factors(src):
        return {r.scenario.stack.name: r.scenario.stack.kernel_efficiency
                for r in vp.stack_left_out(runs, src) if vp.run_source(r) == src}

    assert factors("maxtext") == {"maxtext": pytest.approx((f["torchtitan"] * f["torchtitan-compile"]) ** 0.5)}
    assert factors("torchtitan") == {"torchtitan": pytest.approx(f["maxtext"]),
                                     "torchtitan-compile": pytest.approx(f["maxtext"])}
    assert factors("NeMo") == {"nemo-2403": 1.0}
    kept = {r.name: r.scenario.stack.kernel_efficiency for r in vp.stack_left_out(runs, "maxtext")}
    assert kept["T1"] == f["torchtitan"] and kept["D1"] == 1.0  # the other sources' runs keep their own


def test_the_pool_and_the_stack_sigmas_are_written_in_place(tmp_path):
    """fit_stacks.write_pool_and_sigmas: each fitted stack's residual_sigma (its leave-one-out RMS, or the anchors'
    under 4 runs) and each unfitted stack's kernel_efficiency, value and source, nothing else."""
    import tomllib

    fs = _fit_stacks()
    path = tmp_path / "stacks.toml"
    text = fs.STACKS_TOML.read_text()
    path.write_text(text)
    loo = np.array([0.1, -0.1, 0.1, -0.1])
    res = [{"stack": "maxtext", "f": 0.64, "runs": ["X1", "X2", "X3", "X4"], "tables": ["t"], "cards": ["h100-sxm"],
            "loo": loo},
           {"stack": "torchtitan", "f": 0.81, "runs": ["T1", "T4"], "tables": ["t"], "cards": ["h100-sxm"],
            "loo": np.array([0.01, -0.01])}]
    assert fs.write_pool_and_sigmas(res, path) == ["maxtext", "torchtitan", "torchtitan-compile", "deepspeed"]
    new = tomllib.loads(path.read_text())
    assert new["maxtext"]["residual_sigma"] == pytest.approx(round(float(np.log(1.1) ** 2 + np.log(0.9) ** 2) ** 0.5
                                                                   / 2 ** 0.5, 3))
    assert new["torchtitan"]["residual_sigma"] == 0.154  # two runs: the anchors'
    assert "under 4 runs estimate no spread" in new["torchtitan"]["sources"]["residual_sigma"]
    # torchtitan-compile is not among these results: an unfitted stack with kernels of its own takes the pool
    assert new["deepspeed"]["kernel_efficiency"] == new["torchtitan-compile"]["kernel_efficiency"] == 0.72
    old = tomllib.loads(text)
    changed = {(s, k) for s in old for k in old[s] if k != "sources" and old[s][k] != new[s][k]}
    assert changed <= {("maxtext", "residual_sigma"), ("deepspeed", "kernel_efficiency"),
                       ("torchtitan-compile", "kernel_efficiency"), ("torchtitan-compile", "residual_sigma"),
                       ("nemo-2403", "residual_sigma"), ("torchtitan", "residual_sigma")}
    assert ("deepspeed", "kernel_efficiency") in changed
