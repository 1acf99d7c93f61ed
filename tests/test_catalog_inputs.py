"""Bad catalog and config files are one clear line with exit 2 (issue 17), and Hugging Face ids resolve
through a local cache the test builds (no network)."""

import json
import sys

import pytest
from click.testing import CliRunner

from tpopt.catalogs import BUILTIN_DIR, MAX_INPUT_BYTES, load_catalog, read_text_capped
from tpopt.cli.main import cli
from tpopt.errors import InputError
from tpopt.models.arch import param_count

LLAMA_TINY = {"model_type": "llama", "hidden_act": "silu", "hidden_size": 256, "intermediate_size": 512,
              "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2, "vocab_size": 1000,
              "tie_word_embeddings": False, "rms_norm_eps": 1e-5}
# 2 blocks of (q 256x256, k/v 256x128, o 256x256, SwiGLU 3x256x512, 2 RMSNorms) + embedding + head + final norm
N_TINY = 2 * (2 * 256 * 256 + 2 * 256 * 128 + 3 * 256 * 512 + 2 * 256) + 2 * 1000 * 256 + 256


def run(args):
    r = CliRunner().invoke(cli, args)
    return r


def assert_one_line_exit_2(r, fragment=""):
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert fragment in r.stderr, r.stderr


def scenario_with_config(tmp_path, design_path, config_name="config.json"):
    text = design_path.read_text().replace('name = "qwen3-8b"', f'config = "{config_name}"')
    (tmp_path / "s.toml").write_text(text)
    return str(tmp_path / "s.toml")


@pytest.mark.parametrize("raw,fragment", [
    (json.dumps({**LLAMA_TINY, "num_attention_heads": 0}), "num_attention_heads"),
    (json.dumps(LLAMA_TINY).replace('"hidden_size": 256', '"hidden_size": 1e400'), "hidden_size"),
    (json.dumps(LLAMA_TINY).replace('"hidden_size": 256', '"hidden_size": NaN'), "hidden_size"),
    (json.dumps({**LLAMA_TINY, "num_hidden_layers": -2}), "num_hidden_layers"),
    ("[1, 2]", "expected a JSON object"),
    ("[" * 100000, "JSON"),
])
def test_bad_hf_configs_exit_2(tmp_path, design_path, raw, fragment):
    (tmp_path / "config.json").write_text(raw)
    r = run(["evaluate", "--scenario", scenario_with_config(tmp_path, design_path), "--cards", "48"])
    assert_one_line_exit_2(r, fragment)


def test_non_utf8_config_and_catalog_exit_2(tmp_path, design_path):
    (tmp_path / "config.json").write_bytes(b'{"model_type": "llama", "name": "\xff\xfe"}')
    r = run(["evaluate", "--scenario", scenario_with_config(tmp_path, design_path), "--cards", "48"])
    assert_one_line_exit_2(r, "not UTF-8")
    cat = tmp_path / "cat"
    cat.mkdir()
    (cat / "accelerators.toml").write_bytes(b'[x]\ndisplay = "\xe9"\n')
    r = run(["catalog", "accelerators", "--catalog", str(cat)])
    assert_one_line_exit_2(r, "not UTF-8")


def test_oversized_and_endless_inputs_are_capped(tmp_path, design_path):
    big = tmp_path / "config.json"
    with big.open("wb") as fh:  # sparse: costs no disk
        fh.truncate(MAX_INPUT_BYTES + 1)
    r = run(["evaluate", "--scenario", scenario_with_config(tmp_path, design_path), "--cards", "48"])
    assert_one_line_exit_2(r, "larger than the bound of 16 MiB")
    with pytest.raises(InputError, match="is a device, not a regular file"):  # endless: refused before any read
        read_text_capped("/dev/zero", "config file")
    (tmp_path / "adir").mkdir()
    r = run(["evaluate", "--scenario", scenario_with_config(tmp_path, design_path, "adir"), "--cards", "48"])
    assert_one_line_exit_2(r, "is a directory")


@pytest.mark.parametrize("fname,text,fragment", [
    ("links.toml", "link = 5\n", "link must hold tables"),
    ("links.toml", "[link.fast]\nbandwidth = 5\n", "needs a unit"),
    ("links.toml", "[wires.x]\nbandwidth = \"5GB/s\"\n", "unknown table [wires]"),
    ("accelerators.toml", "x = 5\n", "accelerator x: expected a table"),
    ("accelerators.toml", "[rtx4090]\npeak_bf61 = \"1TFLOP/s\"\n", "unknown key(s) peak_bf61"),
    ("accelerators.toml", None, "p2p must be true or false"),
    ("accelerators.toml", "[y]\npeak_bf16 = \"1TFLOP/s\"\nmemory = \"8GB\"\nhost_link = 5\nnic = \"200g\"\n"
                          "cards_per_host = 8\n", "host_link must be a string"),
    ("models.toml", "[m]\nlayers = 2.5\nhidden = 8\nheads = 2\nffn = 8\nvocab = 8\n", "layers: expected a whole"),
    ("models.toml", "[m]\nlayers = 2\nhidden = 8\nheads = 2\nffn = 8\nvocab = 8\nnorm = \"batchnorm\"\n", "norm must"),
    ("models.toml", "[m]\nlayers = 2\nhidden = 8\nheads = 2\nffn = 8\nvocab = 8\nwidth = 3\n", "unknown key(s) width"),
    ("models.toml", "[m]\nlayers = 2\nhidden = 8\nheads = 2\nffn = 8\nvocab = 8\nlearned_positions = 16\n"
                    "positions = \"rope\"\n", "learned_positions"),
    ("storage.toml", "[fast]\nwrite_bandwidth = \"0GB/s\"\n", "greater than zero"),
])
def test_bad_catalog_files_exit_2(tmp_path, fname, text, fragment):
    if text is None:  # the built-in entry with one wrongly typed value
        text = (BUILTIN_DIR / "accelerators.toml").read_text().replace("p2p = false", 'p2p = "no"', 1)
    (tmp_path / fname).write_text(text)
    r = run(["catalog", "models", "--catalog", str(tmp_path)])
    assert_one_line_exit_2(r, fragment)



@pytest.mark.parametrize("fname,text,fragment", [
    ("accelerators.toml", "[my-card]\npeak_bf16 = \"1TFLOP/s\"\nmemory = \"8GB\"\nhost_link = \"pcie4-x16\"\n"
                          "cards_per_host = 8\n", "accelerator my-card: missing required key 'nic'"),
    ("models.toml", "[m]\nlayers = 2\nhidden = \"8\"\nheads = 2\nffn = 8\nvocab = 8\n", "model m hidden"),
    ("storage.toml", "[fast]\nwrite_bandwidth = 5\n", "storage fast write_bandwidth"),
    ("performance.toml", "[h100-sxm]\nkernel_overhead = 1e-5\n", "performance h100-sxm kernel_overhead"),
])
def test_a_bad_entry_of_a_user_catalog_names_its_file(tmp_path, fname, text, fragment):
    """One line naming the file, the entry and the key: with several --catalog directories (a card in one, a
    calibrated performance.toml in another) the entry's name alone does not say which file to fix."""
    (tmp_path / fname).write_text(text)
    r = run(["catalog", "models", "--catalog", str(tmp_path)])
    assert_one_line_exit_2(r, f"{tmp_path / fname}: {fragment}")


def test_a_user_entry_that_replaces_a_built_in_card_says_so_when_a_key_is_missing(tmp_path):
    """docs/catalogs.md: a --catalog entry replaces the built-in of the same name (performance.toml alone
    overrides field by field). A user who writes only the key to change is told that, and where a price
    override goes, rather than only which required key is missing."""
    (tmp_path / "accelerators.toml").write_text('[h100-sxm]\nprice_card_hour = 1.99\n[h100-sxm.sources]\n'
                                                'price_card_hour = "my contract"\n')
    r = run(["catalog", "accelerators", "--catalog", str(tmp_path)])
    assert_one_line_exit_2(r, f"{tmp_path / 'accelerators.toml'}: accelerator h100-sxm: missing required key")
    assert "replaces the built-in h100-sxm whole" in r.stderr


# ------------------------------------------------------------------------------- Hugging Face cache

@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    """A Hugging Face hub cache with acme/tiny-llama at one commit (the layout huggingface_hub writes)."""
    pytest.importorskip("huggingface_hub")
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--acme--tiny-llama"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(LLAMA_TINY))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return commit


def test_hf_id_resolves_from_the_local_cache(hf_cache, tmp_path, design_path):
    cat = load_catalog()
    m = cat.model("acme/tiny-llama")
    assert m.name == "acme/tiny-llama" and param_count(m) == N_TINY
    assert param_count(cat.model(f"acme/tiny-llama@{hf_cache}")) == N_TINY
    # a scenario can name it like a catalog model
    text = design_path.read_text().replace('name = "qwen3-8b"', 'name = "acme/tiny-llama"')
    (tmp_path / "s.toml").write_text(text)
    r = run(["evaluate", "--scenario", str(tmp_path / "s.toml"), "--cards", "8", "--json"])
    assert r.exit_code in (0, 3), r.output  # 3: the plan misses a constraint (README), but it was evaluated
    assert json.loads(r.output)["plan"]["cards"] == 8


def test_hf_id_not_in_cache_never_downloads(hf_cache):
    with pytest.raises(InputError, match="never downloads"):
        load_catalog().model("acme/other-model")
    with pytest.raises(InputError, match="never downloads"):
        load_catalog().model("acme/tiny-llama@ffffffffffffffffffffffffffffffffffffffff")
    with pytest.raises(InputError, match="unknown model 'no-such-model'"):
        load_catalog().model("no-such-model")


def test_hf_id_without_huggingface_hub_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import fails as if not installed
    with pytest.raises(InputError, match=r"tpopt\[hf\]"):
        load_catalog().model("acme/tiny-llama")


# ------------------------------------------------------------------------------- tpopt catalog

def test_catalog_cli_lists_cards_and_models_with_sources():
    acc = json.loads(run(["catalog", "accelerators", "--json"]).stdout)
    assert len(acc) >= 20
    assert all(r["sources"].get("peak_bf16") and r["sources"].get("memory") and r["price_date"] for r in acc)
    models = json.loads(run(["catalog", "models", "--json"]).stdout)
    assert len(models) >= 25 and all(r["source"] for r in models)
    moe = {r["name"]: r for r in models if r["experts"] != "-"}
    assert {"mixtral-8x7b", "qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3"} <= set(moe)
    assert all(r["activated_params"] < r["params"] for r in moe.values())
    text = run(["catalog", "models"]).stdout
    assert "activated" in text and "671.03B" in text and "37.55B" in text
    src = run(["catalog", "accelerators", "--sources"]).stdout
    assert "gb200-nvl72:" in src and "peak_fp8:" in src


def test_calibration_runs_file_not_utf8_or_endless_exit_2(tmp_path):
    """`tpopt calibrate --runs` reads its CSV through the same capped UTF-8 reader as catalogs and configs
    (a non-UTF-8 file raised a UnicodeDecodeError traceback; /dev/zero read without end)."""
    bad = tmp_path / "runs.csv"
    bad.write_bytes(b"run,step_s\n\xff\xfe,1\n")
    out = tmp_path / "out"
    r = run(["calibrate", "--runs", str(bad), "--out", str(out)])
    assert_one_line_exit_2(r, "runs file")
    assert "not UTF-8 text (byte 0xff at offset 11)" in r.stderr
    r = run(["calibrate", "--runs", "/dev/zero", "--out", str(out)])  # a device: refused before any read (issue 42)
    assert_one_line_exit_2(r, "is a device, not a regular file")
    assert not out.exists()


@pytest.mark.parametrize("text, fragment", [
    ('[h200]\nprior_scale_from = ["no-such-card"]\n', "no-such-card"),
    ('[h200]\nprior_scale_from = ["h200"]\n', "no cycle"),
    ('[h200]\nprior_scale_from = []\n', "accelerator names"),
    ('[h100-96gb-hbm2e]\nprior_scale_from = ["h100-sxm"]\n', "own prior gemm_efficiency"),  # inherits, states none
])
def test_bad_prior_scale_from_exits_2_with_one_line(tmp_path, text, fragment):
    (tmp_path / "performance.toml").write_text(text)
    assert_one_line_exit_2(run(["catalog", "models", "--catalog", str(tmp_path)]), fragment)


def test_a_card_named_without_a_fitted_gemm_share_leaves_the_prior_unscaled_and_says_so(tmp_path):
    """rtx4090 has no fitted GEMM share: nothing to scale by, so the H200 keeps its stated measurement (a user's
    calibration that fits only other fields must not make the catalog unreadable)."""
    from tpopt.catalogs import load_catalog

    (tmp_path / "performance.toml").write_text('[h200]\nprior_scale_from = ["rtx4090"]\n')
    cat = load_catalog([tmp_path])
    assert cat.perf("h200").gemm_efficiency == cat.raw["performance"]["h200"]["gemm_efficiency"]
    assert "unscaled: none of rtx4090" in cat.perf("h200").sources["gemm_efficiency"]


def test_a_user_card_scaled_by_a_fitted_card(tmp_path):
    """A user's entry can take a fitted card's gap to training: its own prior x that card's fitted / prior."""
    from tpopt.catalogs import load_catalog

    (tmp_path / "performance.toml").write_text('[h200]\ngemm_efficiency = 0.5\nprior_scale_from = ["b200"]\n')
    cat = load_catalog([tmp_path])
    b200 = cat.raw["performance"]["b200"]
    assert cat.perf("h200").gemm_efficiency == pytest.approx(0.5 * b200["gemm_efficiency"]
                                                             / b200["calibration"]["prior"][0])


def test_a_user_card_with_an_unsourced_number_is_not_said_to_be_sourced(tmp_path):
    """`tpopt catalog accelerators` ends with "Every number has a source"; the built-in files are held to it by
    tests, a user's accelerators.toml is not refused for a number without one (stacks.toml and recipes.toml
    entries are). So the listing says which numbers have none, --sources and the JSON mark each one, and the
    sentence is printed only when it is true."""
    (tmp_path / "accelerators.toml").write_text(
        '[my-card]\npeak_bf16 = "835TFLOP/s"\nmemory = "94GB"\nhbm_bandwidth = "3900GB/s"\nhost_link = "pcie5-x16"\n'
        'cards_per_host = 8\nnic = "400g"\n[my-card.sources]\nmemory = "my datasheet"\nhost_link = "my datasheet"\n'
        'cards_per_host = "my server"\nnic = "my server"\n')
    r = run(["catalog", "accelerators", "--catalog", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert "Every number has a source" not in r.stdout
    assert "No source for my-card peak_bf16, hbm_bandwidth" in " ".join(r.stdout.split())
    listed = run(["catalog", "accelerators", "--catalog", str(tmp_path), "--sources"]).stdout
    assert f"peak_bf16: no source given ({tmp_path / 'accelerators.toml'})" in " ".join(listed.split())
    assert "Every number has a source" in run(["catalog", "accelerators"]).stdout  # the built-in catalog: true
