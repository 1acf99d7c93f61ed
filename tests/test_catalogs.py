"""Catalog data: every number has a source; user catalogs extend and override; HF configs load."""

import json
import re
import tomllib
from dataclasses import fields, replace

import pytest
from click.testing import CliRunner

from tpopt.catalogs import ACCELERATOR_KEYS, BUILTIN_DIR, load_catalog, model_from_hf_config
from tpopt.catalogs.architectures import MODEL_KEYS, MODEL_REQUIRED, ArchKeys
from tpopt.catalogs.entry_keys import AcceleratorKeys, PerfKeys
from tpopt.catalogs.schema import spec
from tpopt.cli.main import cli
from tpopt.errors import InputError
from tpopt.models.arch import ModelArch, param_count
from tpopt.models.roofline import PerfParams

#: The accelerator keys whose values need a source: those declared ``source`` (every number among them, see
#: test_every_number_key_is_declared_sourced).
SOURCED_ACC_KEYS = tuple(f.name for f in fields(AcceleratorKeys) if spec(f).source)
# issue 14 item 8: the cards a user expects to find
REQUIRED_CARDS = {"rtx4090", "rtx5090", "l40s", "a100-40gb-sxm", "a100-80gb-sxm", "a100-40gb-pcie", "a100-80gb-pcie",
                  "h100-sxm", "h100-pcie", "h100-nvl", "h200", "h800", "h20", "b200", "gb200-nvl72", "mi250x", "mi300x",
                  "mi325x", "gaudi3"}


def test_every_accelerator_number_has_a_source():
    raw = tomllib.loads((BUILTIN_DIR / "accelerators.toml").read_text())
    assert REQUIRED_CARDS <= set(raw) and len(raw) >= 20
    for name, t in raw.items():
        for field in SOURCED_ACC_KEYS:
            if field in t:
                assert t["sources"].get(field), (name, field)
        # every precision peak is given, or its source says why not (not supported / not given)
        for peak in ("peak_bf16", "peak_fp16", "peak_fp8", "peak_tf32"):
            assert peak in t or "not " in t["sources"].get(peak, ""), (name, peak)
        # prices are indicative and dated
        assert "price_card_hour" in t and t.get("price_date", "").startswith("202"), name
        assert "indicative" in t["sources"]["price_card_hour"] or "assumption" in t["sources"]["price_card_hour"]


def test_every_number_key_is_declared_sourced():
    """Every key read as a quantity (a unit parser), and each link or NIC choice, must carry a source; text
    (display, price_date, notes, the sources table itself) and the interconnect's name need none."""
    declared = {f.name: spec(f) for f in fields(AcceleratorKeys)}
    assert ACCELERATOR_KEYS == tuple(declared)  # the known keys are the declared ones
    quantities = {name for name, k in declared.items() if k.kind.parser is not None}
    assert len(quantities) >= 16 and all(declared[name].source for name in quantities)
    assert {"host_link", "nic", "p2p"} <= set(SOURCED_ACC_KEYS)
    assert not {"display", "price_date", "notes", "sources", "interconnect"} & set(SOURCED_ACC_KEYS)


def test_neutral_accelerator_keys_stay_out_of_fingerprints():
    """A key declared neutral: an entry without it builds the model's default for the field it sets, and the
    Accelerator's repr (hashed by sweep fingerprints) leaves that field out at the default and shows it set;
    every other key that sets a field is in the repr, except the card's maker (vendor), which moves no figure."""
    rtx = tomllib.loads((BUILTIN_DIR / "accelerators.toml").read_text())["rtx4090"]
    cat = load_catalog()
    acc = cat.accelerator("rtx4090")
    defaults = {f.name: f.default for f in fields(acc)}
    for f in fields(AcceleratorKeys):
        k = spec(f)
        target = k.to or f.name
        if target not in defaults or target in ("sources", "display"):
            continue
        if target == "vendor":  # the card's maker moves no figure of a plan: never in a fingerprint
            assert "vendor=" not in repr(replace(acc, vendor="AMD")) and acc.vendor == "NVIDIA"
            continue
        if k.neutral:
            assert f.name not in rtx and getattr(acc, target) == defaults[target], f.name
            assert f"{target}=" not in repr(acc), f.name
            assert f"{target}=" in repr(replace(acc, **{target: 2})), f.name
        else:
            assert f"{target}=" in repr(acc), f.name
    assert {"scale_up_cards", "pod_hosts", "spine_oversubscription"} == {
        f.name for f in fields(AcceleratorKeys) if spec(f).neutral}


def test_every_performance_key_sets_its_parameter():
    """Each declared performance.toml key names the PerfParams field it sets (tile: tile_m and tile_n); only the
    sources table (merged), the calibration notes (kept for the reader), the two keys that build an entry on
    another card's (derived_from, clock_ratio: they scale inherited fields) and prior_scale_from (it scales the
    entry's own gemm_efficiency by other cards' fits) set none."""
    params = {f.name for f in fields(PerfParams)}
    declared = [f.name for f in fields(PerfKeys)]
    assert [k for k in declared if k not in params] == ["tile", "calibration", "derived_from", "clock_ratio",
                                                               "prior_scale_from"]
    assert {"tile_m", "tile_n"} <= params and "sources" in declared
    perf = load_catalog().perf("rtx4090")
    assert perf.name == "rtx4090" and 0 < perf.gemm_efficiency <= 1


def test_every_model_key_sets_its_field_with_its_default():
    """Each declared models.toml key sets the ModelArch field it names (notes: the extra notes), and its declared
    default, read by its kind, is that field's default (None: derived from other keys, or the field's None);
    the required keys are those without a default; the file's header comment lists every key."""
    arch = {f.name: f for f in fields(ModelArch)}
    assert MODEL_KEYS == tuple(f.name for f in fields(ArchKeys))
    for f in fields(ArchKeys):
        k = spec(f)
        target = k.to or f.name
        assert target in arch, f.name
        if k.required:
            assert f.name in MODEL_REQUIRED and k.default is None, f.name
        elif k.default is not None and target != "extra":
            assert k.kind.read(k.default, f.name, {"layers": 1}) == arch[target].default, f.name
    assert MODEL_REQUIRED == ("layers", "hidden", "heads", "ffn", "vocab")
    header = " ".join(line for line in (BUILTIN_DIR / "models.toml").read_text().splitlines() if line.startswith("#"))
    assert [name for name in MODEL_KEYS if name not in re.findall(r"\w+", header)] == []


def test_dense_peaks_are_consistent():
    # every peak parses into Accelerator.peak_*; FP8 (where given) is twice BF16 on NVIDIA/AMD parts, FP16
    # equals BF16, TF32 is half of BF16 -- the datasheets' dense ratios, so a mistyped number shows
    cat = load_catalog()
    for a in cat.accelerators.values():
        assert a.peak_flops > 0
        if a.peak_fp16:
            assert a.peak_fp16 == a.peak_flops, a.name
        if a.peak_tf32:
            assert a.peak_tf32 == pytest.approx(a.peak_flops / 2, rel=0.02), a.name  # datasheet rounding (L40S)
        if a.peak_fp8 and a.name != "gaudi3":  # Gaudi 3's MME runs FP8 at the BF16 rate (white paper)
            assert a.peak_fp8 == pytest.approx(2 * a.peak_flops, rel=0.02), a.name
    assert cat.accelerator("gaudi3").peak_fp8 == cat.accelerator("gaudi3").peak_flops
    # Ampere and CDNA 2 have no FP8: 0 = not given
    assert cat.accelerator("a100-80gb-sxm").peak_fp8 == 0 and cat.accelerator("mi250x").peak_tf32 == 0


def test_gb200_nvl72_is_one_72_card_nvlink_domain():
    a = load_catalog().accelerator("gb200-nvl72")
    assert a.cards_per_host == 72 and a.p2p and a.interconnect == "nvlink5"
    assert a.intra_host_bw == 900e9  # NVLink 5: 1.8 TB/s bidirectional per GPU


def test_tpu_decision_is_documented():
    text = (BUILTIN_DIR / "accelerators.toml").read_text()
    assert "TPU v5p / v6e" in text and "torus" in text


def test_links_storage_models_have_sources():
    for fname, key in (("links.toml", "source"), ("storage.toml", "source"), ("models.toml", "source")):
        raw = tomllib.loads((BUILTIN_DIR / fname).read_text())
        tables = [t for group in raw.values() for t in group.values()] if fname == "links.toml" else raw.values()
        for t in tables:
            assert t.get(key), (fname, t)
    links = tomllib.loads((BUILTIN_DIR / "links.toml").read_text())
    assert {"pcie3-x16", "pcie4-x16", "pcie5-x16", "nvlink3", "nvlink4", "nvlink5"} <= set(links["link"])
    assert {"100g", "200g", "400g"} <= set(links["nic"])
    for nic in links["nic"].values():
        assert nic.get("price_source")


def test_required_models_are_present():
    cat = load_catalog()
    assert {"qwen3-8b", "qwen3-32b", "llama3-8b", "llama3-70b", "gpt3-175b"} <= set(cat.models)
    # issue 14 item 8 / issue 11: families and the MoE entries the chapter and users need
    assert {"mixtral-8x7b", "qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3", "gemma2-9b", "gemma3-27b", "phi-4",
            "qwen2.5-7b", "mistral-7b", "llama3.2-1b", "gpt2", "bloom-176b", "falcon-40b"} <= set(cat.models)
    assert len(cat.models) >= 25


def test_hf_config_matches_catalog(tmp_path):
    # the published Qwen3-8B config.json fields give the same exact N as the catalog entry (8,190,735,360)
    cfg = {"model_type": "qwen3", "num_hidden_layers": 36, "hidden_size": 4096, "num_attention_heads": 32,
           "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 12288, "vocab_size": 151936,
           "tie_word_embeddings": False}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    assert param_count(model_from_hf_config(p)) == 8_190_735_360
    # Llama 3 8B (no q/k norm): 8,030,261,248
    llama = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
             "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
             "tie_word_embeddings": False}
    p.write_text(json.dumps(llama))
    assert param_count(model_from_hf_config(p)) == 8_030_261_248


def test_hf_config_errors(tmp_path):
    p = tmp_path / "config.json"
    p.write_text("{not json")
    with pytest.raises(InputError, match="malformed JSON"):
        model_from_hf_config(p)
    # mixture-of-experts configs are understood now; one missing a router key is still an error
    p.write_text(json.dumps({"model_type": "qwen3_moe", "num_experts": 128, "num_hidden_layers": 2, "hidden_size": 64,
                             "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100,
                             "moe_intermediate_size": 32}))
    with pytest.raises(InputError, match="num_experts_per_tok"):
        model_from_hf_config(p)
    p.write_text(json.dumps({"model_type": "llama", "hidden_size": 4096}))
    with pytest.raises(InputError, match="missing required key"):
        model_from_hf_config(p)


def test_scenario_can_name_a_config_json(tmp_path, design_path):
    cfg = {"model_type": "qwen3", "num_hidden_layers": 36, "hidden_size": 4096, "num_attention_heads": 32,
           "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 12288, "vocab_size": 151936,
           "tie_word_embeddings": False}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    text = design_path.read_text().replace('name = "qwen3-8b"', 'config = "config.json"')
    (tmp_path / "s.toml").write_text(text)
    r = CliRunner().invoke(cli, ["evaluate", "--scenario", str(tmp_path / "s.toml"), "--cards", "48", "--json"])
    assert r.exit_code == 0, r.output
    assert round(json.loads(r.stdout)["metrics"]["finish_days"], 1) == 24.6  # REFERENCE 10.6, same model


def test_user_catalog_extends_and_overrides(tmp_path, design_path):
    (tmp_path / "accelerators.toml").write_text('''
[rtx4090d]
peak_bf16 = "147TFLOP/s"
memory = "24GB"
usable_memory = "22GiB"
host_link = "pcie4-x16"
cards_per_host = 8
nic = "200g"
nics_per_host = 8
price_card_hour = 0.50
[rtx4090d.sources]
peak_bf16 = "test fixture"
''')
    cat = load_catalog([tmp_path])
    assert "rtx4090d" in cat.accelerators and "rtx4090" in cat.accelerators
    r = CliRunner().invoke(cli, ["evaluate", "--scenario", str(design_path), "--catalog", str(tmp_path),
                                 "--hw", "rtx4090d", "--cards", "48", "--json"])
    assert r.exit_code == 0, r.output
    m = json.loads(r.stdout)["metrics"]
    # compute scales with the peak: 52.2 s x 165.2 / 147 (10.1 relation T = F / (p P eta))
    assert m["compute_s"] == pytest.approx(52.2237 * 165.2 / 147, rel=1e-4)
    # an override of a built-in entry replaces it
    (tmp_path / "accelerators.toml").write_text((BUILTIN_DIR / "accelerators.toml").read_text().replace(
        'price_card_hour = 0.59', 'price_card_hour = 1.18'))
    cat2 = load_catalog([tmp_path])
    assert cat2.accelerator("rtx4090").price_card_hour == 1.18


def test_bad_catalog_dir_is_one_line_error(design_path):
    r = CliRunner().invoke(cli, ["evaluate", "--scenario", str(design_path), "--catalog", "/nonexistent/dir",
                                 "--cards", "48"])
    assert r.exit_code == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
