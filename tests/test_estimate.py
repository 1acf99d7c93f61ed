"""`tpopt estimate`: parameters and FLOPs per token against a hand derivation, the memory table cell by cell
against `tpopt evaluate` run through the tool on the same scenario, the fastest layout against a plain
enumeration of the same card count, and bad input as one line with exit 2."""

import json

import pytest
from click.testing import CliRunner

from tpopt.cli.main import cli
from tpopt.models import families as F
from tpopt.optimizer import core
from tpopt.optimizer.estimate import EstimateInputs, enforced_families, estimate, scenario_of
from tpopt.optimizer.result import Request


def run(*args):
    return CliRunner().invoke(cli, list(args))


def toml_of(tables: dict) -> str:
    """A scenario file from the estimate's tables (strings, numbers and lists of them only)."""

    def val(v):
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, list):
            return "[" + ", ".join(val(x) for x in v) + "]"
        return repr(v)

    return "\n".join(f"[{name}]\n" + "\n".join(f"{k} = {val(v)}" for k, v in t.items()) + "\n"
                     for name, t in tables.items())


@pytest.fixture(scope="module")
def seventy():
    r = run("estimate", "llama3-70b", "--hw", "h100-sxm", "--cards", "64", "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_parameters_and_flops_per_token_match_a_hand_derivation(seventy):
    # Llama 3 70B (catalogs/models.toml; meta-llama/Meta-Llama-3-70B config.json): 80 layers, h 8192, 64 heads,
    # 8 KV heads of 128, FFN 28672 (SwiGLU: 3 matrices), vocabulary 128256, untied embeddings.
    h, L, kv, ffn, V, s = 8192, 80, 8 * 128, 28672, 128256, 4096
    per_layer = 2 * h * h + 2 * h * kv + 3 * h * ffn  # q, o; k, v; gate, up, down
    norms = L * 2 * h + h
    N = L * per_layer + 2 * V * h + norms
    assert N == 70_553_706_496  # the config.json count the catalog cites
    m = seventy["model"]
    assert m["parameters"] == N and m["active_parameters"] == N and not m["moe"]
    gemm = L * per_layer + V * h  # the input embedding is a lookup, the LM head a GEMM
    attention = 12 * L * h * (s + 1) / 2  # causal: a query sees (s + 1) / 2 keys on average
    assert m["flops_per_token"] == pytest.approx(6 * gemm + attention, rel=1e-12)
    assert "6 x matrix-multiplied parameters" in m["flops_convention"]


def test_memory_table_matches_evaluate_cell_by_cell(seventy, tmp_path):
    """Every cell of the table is what `tpopt evaluate` reports for that plan on the scenario the estimate
    states (scenario_tables), called through the command line."""
    f = tmp_path / "estimate.toml"
    f.write_text(toml_of(seventy["scenario_tables"]))
    lay = seventy["memory_layout"]
    assert len(seventy["memory_table"]) == 4 * 2 * 3
    fits = 0
    for cell in seventy["memory_table"]:
        r = run("evaluate", "--scenario", str(f), "--cards", "64", "--tp", str(lay["tp"]), "--cp", str(lay["cp"]),
                "--pp", str(lay["pp"]), "--micro-batch", str(lay["micro_batch"]), "--zero", str(cell["zero_stage"]),
                "--offload", cell["offload"], "--recompute", cell["recompute"], "--schedule", "1f1b", "--json")
        assert r.exit_code in (0, 3), r.output
        ev = json.loads(r.output)
        assert cell["memory_per_card_gib"] == ev["metrics"]["memory_per_card_gib"], cell
        limit = ev["metrics"]["memory_limit_gib"]
        assert cell["fits"] == (ev["metrics"]["memory_per_card_gib"] <= limit)
        fits += cell["fits"]
    assert 0 < fits < 24  # 70B on 64 H100: some stages fit, ZeRO-0 does not (1.1 TB of states alone)
    zero0 = next(c for c in seventy["memory_table"] if (c["zero_stage"], c["offload"], c["recompute"]) == (0, "none",
                                                                                                          "none"))
    # the heaviest pipeline stage holds its layers and one embedding table (Llama 3 70B: vocabulary 128,256,
    # hidden 8,192, 80 layers, input and output embeddings untied): 16 bytes of state per parameter over TP
    embed = 128_256 * 8192
    stage = (70_553_706_496 - 2 * embed) / lay["pp"] + embed
    assert zero0["states_gib"] == pytest.approx(stage * 16 / 2**30 / lay["tp"], rel=0.001)


def test_fastest_layout_and_its_step_match_evaluate(seventy, tmp_path):
    f = tmp_path / "estimate.toml"
    f.write_text(toml_of(seventy["scenario_tables"]))
    p = seventy["fastest"]["plan"]
    assert p["cards"] == 64 and p["tp"] * p["cp"] * p["pp"] * p["dp"] == 64
    r = run("evaluate", "--scenario", str(f), "--cards", "64", "--tp", str(p["tp"]), "--cp", str(p["cp"]),
            "--pp", str(p["pp"]), "--micro-batch", str(p["micro_batch"]), "--zero", str(p["zero_stage"]),
            "--offload", p["offload"], "--recompute", p["recompute"], "--schedule", "1f1b", "--json")
    ev = json.loads(r.output)
    assert seventy["fastest"]["step_s"] == ev["metrics"]["step_s"]
    assert seventy["fastest"]["memory_per_card_gib"] <= ev["metrics"]["memory_limit_gib"]
    # implied MFU = 6N-style model FLOPs of the step / (cards x peak x step)
    mfu = seventy["model"]["flops_per_token"] * seventy["task"]["tokens_per_step"] / (
        64 * seventy["accelerator"]["peak_flops"] * seventy["fastest"]["step_s"])
    assert seventy["fastest"]["implied_mfu"] == pytest.approx(mfu, rel=1e-12)


def test_fastest_layout_equals_plain_enumeration_at_that_card_count():
    """The sorted-bound search returns the enumeration's fastest plan on exactly that card count."""
    inp = EstimateInputs("qwen3-1.7b", "h100-sxm", cards=16, seq_len=2048)
    d = estimate(inp)
    sc, _ = scenario_of(inp)
    res = core.solve(sc, "enumerate", Request(objective="time", enforce=enforced_families(), cards=(16,)))
    best = res.best
    assert best is not None and d["fastest"] is not None
    assert d["fastest"]["step_s"] == pytest.approx(best.metrics["step_s"], rel=1e-12)
    assert F.DEADLINE not in enforced_families() and F.MEMORY_PER_CARD in enforced_families()


def test_without_cards_the_fewest_hosts_that_fit():
    d = estimate(EstimateInputs("llama3-70b", "h100-sxm"))
    assert d["fastest"] is not None and d["cards_source"].startswith("fewest hosts")
    smaller = d["cards"] // 2
    if smaller >= 8:
        assert estimate(EstimateInputs("llama3-70b", "h100-sxm", cards=smaller))["fastest"] is None


def test_no_layout_fits_is_said_and_the_table_is_pure_data_parallel():
    d = estimate(EstimateInputs("llama3-70b", "rtx4090", cards=8))
    assert d["fastest"] is None
    assert d["memory_layout"]["source"].startswith("pure data parallelism")
    assert not any(c["fits"] for c in d["memory_table"])
    r = run("estimate", "llama3-70b", "--hw", "rtx4090", "--cards", "8")
    assert r.exit_code == 0 and "none fits" in r.output


def test_text_fits_80_columns_and_names_its_assumptions():
    r = run("estimate", "qwen3-8b", "--hw", "h100-sxm", "--cards", "8")
    assert r.exit_code == 0, r.output
    assert max(len(line) for line in r.output.splitlines()) <= 80
    for needle in ("FLOPs per token", "implied MFU", "step-time model", "ZeRO-3 + CPU offload", "convention"):
        assert needle in r.output


@pytest.mark.parametrize("args, needle", [
    (["no-such-model", "--hw", "h100-sxm"], "unknown model"),
    (["llama3-70b", "--hw", "no-such-card"], "no-such-card"),
    (["llama3-70b", "--hw", "h100-sxm", "--cards", "0"], "--cards"),
    (["llama3-70b", "--hw", "h100-sxm", "--seq-len", "0"], "--seq-len"),
    (["llama3-70b", "--hw", "h100-sxm,b200"], "one accelerator"),
    (["missing/config.json", "--hw", "h100-sxm"], "does not exist"),
    (["llama3-70b", "--hw", "h100-sxm", "--efficiency", "140%"], "--efficiency"),
])
def test_bad_input_is_one_line_and_exit_2(args, needle):
    r = run("estimate", *args)
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in r.output


def test_a_config_json_is_a_model(tmp_path):
    cfg = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
           "num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 1000, "tie_word_embeddings": False,
           "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "hidden_act": "silu"}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    d = estimate(EstimateInputs(str(p), "h100-sxm", cards=8, seq_len=1024))
    h, kv = 256, 2 * 64
    assert d["model"]["parameters"] == 2 * (2 * h * h + 2 * h * kv + 3 * h * 512 + 2 * h) + 2 * 1000 * h + h


def test_pure_data_parallel_table_is_the_16_bytes_per_parameter_arithmetic():
    """`tpopt estimate qwen3-32b --hw h100-sxm` prints, beside the fastest layout's table, the model states per
    card at pure data parallelism as DeepSpeed's / accelerate's estimators count them: N from Qwen3-32B's
    config.json, bf16-mixed = weights 2 + grads 2 + Adam 12 (FP32 master 4 + two moments 8) B/param; ZeRO-1
    shards the Adam states over DP, ZeRO-2 the gradients too, ZeRO-3 the weights too; offloading the optimizer
    moves the 12 B to the host, offloading the parameters (ZeRO-3 only) the 2 B of weights as well."""
    # Qwen/Qwen3-32B config.json: 64 layers, hidden 5120, 64 query heads and 8 KV heads of 128, FFN 25600 (SwiGLU),
    # vocabulary 151936, untied embeddings, RMSNorm on q and k per head.
    h, L, q, kv, ffn, V, hd = 5120, 64, 64 * 128, 8 * 128, 25600, 151936, 128
    per_layer = 2 * h * q + 2 * h * kv + 3 * h * ffn + 2 * h + 2 * hd  # q, o; k, v; gate, up, down; 2 norms; q/k norm
    N = L * per_layer + 2 * V * h + h  # embedding, LM head, final norm
    assert N == 32_762_123_264  # 32.8 B, the Qwen3 technical report's figure
    r = run("estimate", "qwen3-32b", "--hw", "h100-sxm")
    assert r.exit_code == 0, r.output
    text = r.output
    assert "Memory per card, GiB" in text and "(the fastest plan)" in text  # the fastest layout's table, labelled
    start = text.index("Model states per card, GiB, at pure data parallelism")
    head = " ".join(text[start:].split("offload:")[0].split())
    d = int(head.split("(DP ")[1].split(",")[0])
    cards = int(text.split("Hardware: h100-sxm x ")[1].split()[0])
    assert d == cards and f"{N:,} parameters" in head and "DeepSpeed's and accelerate's estimators" in head
    rows = {}
    for line in text[start:].splitlines():
        if line.startswith("ZeRO-"):
            cells = line.replace("!", "").split()
            rows[int(cells[0][5:])] = [None if c == "-" else float(c.replace(",", "")) for c in cells[1:]]
    gib = 2**30
    w, g, o = 2, 2, 12
    want = {0: [(w + g + o) * N, (w + g) * N, None],
            1: [(w + g) * N + o * N / d, (w + g) * N, None],
            2: [w * N + (g + o) * N / d, w * N + g * N / d, None],
            3: [(w + g + o) * N / d, (w + g) * N / d, g * N / d]}
    assert set(rows) == {0, 1, 2, 3}
    for z, cells in want.items():
        for got, exp in zip(rows[z], cells, strict=True):
            if exp is None:
                assert got is None, (z, rows[z])
            else:
                assert got == pytest.approx(exp / gib, abs=0.05), (z, rows[z])
    assert rows[0][0] == pytest.approx(488.2, abs=0.05)  # 16 x 32.76 B = 524.2 GB


def test_footing_is_evaluates_on_the_same_scenario_without_p_on_time(seventy, tmp_path):
    """The estimate states what its plan rests on: the footing `tpopt evaluate` prints for the fastest plan on
    scenario_tables (step-time model, parameters by provenance, price, the card's evidence and the plan's own
    step-time sigma), except P(on time), which an estimate has no deadline for."""
    f = tmp_path / "estimate.toml"
    f.write_text(toml_of(seventy["scenario_tables"]))
    p = seventy["fastest"]["plan"]
    r = run("evaluate", "--scenario", str(f), "--cards", "64", "--tp", str(p["tp"]), "--cp", str(p["cp"]),
            "--pp", str(p["pp"]), "--micro-batch", str(p["micro_batch"]), "--zero", str(p["zero_stage"]),
            "--offload", p["offload"], "--recompute", p["recompute"], "--schedule", "1f1b", "--json")
    ev = json.loads(r.output)["footing"]
    mine = seventy["footing"]
    assert ev["evidence"]["p_on_time"] is not None and mine["evidence"]["p_on_time"] is None
    assert "no deadline" in mine["evidence"]["p_on_time_note"]
    for key in ("step_time_model", "stack", "mfu", "parameters", "price", "stated"):
        assert mine[key] == ev[key], key
    for key in ("card", "stack", "sigma", "reasons"):
        assert mine["evidence"][key] == ev["evidence"][key], key


def test_footing_text_flags_a_card_on_priors_and_its_sigma():
    """rtx4090 has no performance entry fitted on runs (catalogs/performance.toml): the estimate's text says the
    card rests on priors and prints the plan's step-time sigma, within 80 columns."""
    r = run("estimate", "qwen3-8b", "--hw", "rtx4090", "--cards", "8", "--json")
    d = json.loads(r.output)
    assert d["footing"]["evidence"]["card"] == "prior"
    r = run("estimate", "qwen3-8b", "--hw", "rtx4090", "--cards", "8")
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "Footing: per-operation step time" in text
    assert "rtx4090 rests on priors" in text
    assert f"step-time sigma {d['footing']['evidence']['sigma']:.3f}" in text
    assert "P(on time) not stated: an estimate has no deadline" in text
    assert max(len(line) for line in r.output.splitlines()) <= 80


def test_one_host_is_singular():
    """qwen3-8b fits on one 8-card H100 host: "8 cards (1 host)", never "(1 hosts)"."""
    r = run("estimate", "qwen3-8b", "--hw", "h100-sxm", "--cards", "8")
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "Fastest layout on 8 cards (1 host):" in text and "hosts)" not in text
