"""Mixture-of-experts architectures in the existing planner (EP = 1) and the chapter's expert figures.

Golden figures: REFERENCE.md 10.5 (Qwen3-235B-A22B expert weights 423 GiB in BF16, 16 x 423 = 6,768 GiB
sent when every EP16 receiver gets all, 423 GiB sharded; chapter 10.5: about 26.4 GiB per EP16 receiver)
and derivations written out here.
"""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from tpopt.catalogs import load_catalog
from tpopt.cli.main import cli
from tpopt.errors import InputError
from tpopt.models.arch import expert_params, expert_weight_bytes, largest_unit_params, param_count
from tpopt.models.memory import stage_params

GIB = 2**30
CAT = load_catalog()


def test_qwen3_235b_expert_weights_chapter_10_5():
    m = CAT.model("qwen3-235b-a22b")
    # 94 MoE blocks x 128 experts x (gate, up, down) 3 x 4096 x 1536
    assert expert_params(m) == 94 * 128 * 3 * 4096 * 1536
    assert round(expert_weight_bytes(m) / GIB) == 423  # BF16, 2 B/param
    assert round(expert_weight_bytes(m, ep=16) / GIB, 1) == 26.4  # one EP16 receiver's share
    assert round(16 * expert_weight_bytes(m) / GIB) == 6768  # every receiver sent all experts
    with pytest.raises(InputError, match="must divide the 128 experts"):
        expert_weight_bytes(m, ep=3)
    assert expert_params(CAT.model("qwen3-8b")) == 0


def test_stage_params_count_every_expert_ep1():
    v3 = CAT.model("deepseek-v3")
    # tp = pp = 1: exactly N, every expert on every card
    assert stage_params(v3, 1, 1) == param_count(v3)
    # pp = 2: 31 blocks per stage; the heaviest is the last (31 MoE blocks + LM head + final norm), the first
    # holds the 3 dense blocks; MoE block = MLA attention + 257 experts + router + 2 norms (derivation in
    # tests/test_archs.py), all counted
    attn = 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168 + 1536 + 512
    moe_block = attn + 257 * 3 * 7168 * 2048 + 7168 * 256 + 2 * 7168
    assert stage_params(v3, 1, 2) == 31 * moe_block + 129280 * 7168 + 7168
    # vectorised over (tp, pp) arrays as the term tables call it, equal to the scalar calls
    tp, pp = np.array([1, 2, 8]), np.array([[1], [4]])
    grid = stage_params(v3, tp, pp)
    assert grid.shape == (2, 3)
    assert all(grid[i, j] == pytest.approx(stage_params(v3, int(tp[j]), int(pp[i, 0])), rel=1e-15)
               for i in range(2) for j in range(3))
    # ZeRO-3 gathers a whole MoE block (all experts) at EP = 1
    assert largest_unit_params(v3) == moe_block
    # dense models keep the original formula: N at tp = pp = 1
    q = CAT.model("qwen3-8b")
    assert stage_params(q, 1, 1) == param_count(q) == 8_190_735_360


def test_planner_uses_total_states_and_activated_flops(design_path, tmp_path):
    # Qwen3-30B-A3B on the design case, 48 RTX 4090, ZeRO-3: states 16 N / 48 with N counting all 128 experts
    # (REFERENCE 10.2: M3 = 16N/d), compute F / (p P eta) with F the activated FLOPs (REFERENCE 10.1)
    text = design_path.read_text().replace('name = "qwen3-8b"', 'name = "qwen3-30b-a3b"')
    (tmp_path / "s.toml").write_text(text)
    r = CliRunner().invoke(cli, ["evaluate", "--scenario", str(tmp_path / "s.toml"), "--cards", "48", "--zero", "3",
                                 "--json"])
    assert r.exit_code in (0, 3), r.output  # 3: evaluated, but the plan misses a constraint (README exit codes)
    m = json.loads(r.stdout)["metrics"]
    attn, router, expert = 2 * 2048 * 4096 + 2 * 2048 * 512, 2048 * 128, 3 * 2048 * 768
    n_total = 48 * (attn + 2 * 2048 + 2 * 128 + router + 128 * expert) + 2 * 151936 * 2048 + 2048
    assert n_total == param_count(CAT.model("qwen3-30b-a3b"))
    assert m["states_gib"] == pytest.approx(16 * n_total / 48 / GIB, rel=1e-9)
    s = 8192
    f_act = 6 * (48 * (attn + router + 8 * expert) + 151936 * 2048) + 12 * 48 * 4096 * (s + 1) / 2
    assert m["compute_s"] == pytest.approx(384 * s * f_act / (48 * 165.2e12 * 0.40), rel=1e-9)


def _catalog_with_model(tmp_path, body: str):
    d = tmp_path / "cat"
    d.mkdir(exist_ok=True)
    (d / "models.toml").write_text(body)
    return d


@pytest.mark.parametrize("body,message", [
    ("top_k = 9\nexpert_ffn = 64", "top_k must be between 1 and experts"),
    ("top_k = 2", "needs expert_ffn"),
    ("expert_ffn = 64", "top_k must be between"),
    ("top_k = 2\nexpert_ffn = 64\ndense_layers = 4", "leaves no MoE block"),
    ("top_k = 2\nexpert_ffn = 64\nshared_experts = 1", "needs shared_ffn"),
])
def test_bad_moe_catalog_entries_exit_2(tmp_path, design_path, body, message):
    base = "[tiny-moe]\nlayers = 4\nhidden = 64\nheads = 4\nffn = 128\nvocab = 1000\nexperts = 8\nsource = \"test\"\n"
    d = _catalog_with_model(tmp_path, base + body + "\n")
    text = design_path.read_text().replace('name = "qwen3-8b"', 'name = "tiny-moe"')
    (tmp_path / "s.toml").write_text(text)
    r = CliRunner().invoke(cli, ["evaluate", "--scenario", str(tmp_path / "s.toml"), "--catalog", str(d),
                                 "--cards", "8"])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert len(r.stderr.strip().splitlines()) == 1 and message in r.stderr


def test_moe_fields_without_experts_are_rejected(tmp_path):
    d = _catalog_with_model(tmp_path, "[dense]\nlayers = 2\nhidden = 64\nheads = 4\nffn = 128\nvocab = 10\n"
                                      "top_k = 2\nsource = \"test\"\n")
    with pytest.raises(InputError, match="top_k describe.*experts >= 1"):
        load_catalog([d])


def test_user_catalog_moe_model_plans(tmp_path, design_path):
    # a user-written MoE entry (Mixtral-shaped, 2 layers) loads and evaluates
    d = _catalog_with_model(tmp_path, "[tiny-moe]\nlayers = 2\nhidden = 256\nheads = 4\nkv_heads = 2\nffn = 512\n"
                                      "vocab = 1000\nexperts = 4\ntop_k = 2\nexpert_ffn = 512\nsource = \"test\"\n")
    m = load_catalog([d]).model("tiny-moe")
    h, f = 256, 512
    assert param_count(m) == 2 * (2 * h * h + 2 * h * 128 + 4 * 3 * h * f + h * 4 + 2 * h) + 2 * 1000 * h + h
    text = design_path.read_text().replace('name = "qwen3-8b"', 'name = "tiny-moe"')
    (tmp_path / "s.toml").write_text(text)
    r = CliRunner().invoke(cli, ["evaluate", "--scenario", str(tmp_path / "s.toml"), "--catalog", str(d),
                                 "--cards", "8", "--json"])
    assert r.exit_code in (0, 3), r.output  # 3: evaluated, but the plan misses a constraint (README exit codes)
    assert json.loads(r.stdout)["plan"]["cards"] == 8
