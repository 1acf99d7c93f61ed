"""The user surface (issue 25, points 2-9): each point a user hit, as a regression test.

Golden figures come from the design case (REFERENCE.md 10.6: 48 RTX 4090 cards, 24.6 d, 17,880 USD; 32 cards miss
30 days at 34.33 d) or from derivations written here.
"""

from __future__ import annotations

import json
import os
import stat
import struct
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from tpopt.cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
DC = str(ROOT / "examples" / "design-case.toml")


def run(*args, env=None):
    r = CliRunner().invoke(cli, [str(a) for a in args], env=env)
    return r.exit_code, r.stdout, r.stderr


# --- 2. sweep --plot-breakdown without --breakdown-cards ----------------------------------------------------


def test_breakdown_plot_without_cards_draws_the_front_and_says_so(tmp_path):
    png = tmp_path / "f.png"
    code, out, err = run("sweep", "--hw", "rtx4090,h100-sxm", "--deadline", "20d,30d", "--plot-breakdown", png)
    assert code == 0, err
    assert "Traceback" not in err
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", data[16:24])[0] >= 600
    assert "Pareto-front plan" in err and "--breakdown-cards" in err  # the default it took, and the way out


# --- 9. paper cuts -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("limit", ["60s", "2min", "30"])
def test_sweep_time_limit_takes_units(limit):
    code, out, err = run("sweep", "--deadline", "30d", "--time-limit", limit, "-q", "--json")
    assert code == 0, err
    assert json.loads(out)["front"][0]["cards"] == 48


def test_sweep_time_limit_bad_is_one_line():
    code, out, err = run("sweep", "--deadline", "30d", "--time-limit", "0s")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "--time-limit" in err


def test_rl_help_lists_only_flags_it_takes():
    code, out, _ = run("rl", "--help")
    assert code == 0
    for flag in ("--tokens", "--global-batch", "--critical-batch", "--seq-len"):
        assert flag not in out, flag  # derived from [rl]: listing them invited an error
    assert "--deadline" in out and "--max-cards" in out and "built-in RL example" in out
    # every flag --help lists is accepted
    flags = sorted({w.split()[0].rstrip(",") for w in out.split("\n  ") if w.strip().startswith("--")})
    values = {"--deadline": "3.5d", "--reserved": "0.25d", "--efficiency": "40%", "--hw": "h100-sxm",
              "--max-cards": "64", "--usable-memory": "70GiB", "--solver": "cpsat", "--objective": "cost",
              "--max-cost": "100000", "--kept": "90%", "--staleness": "1", "--time-limit": "60s",
              "--model": "qwen3-8b"}
    for flag in flags:
        if flag in ("--help", "--scenario", "--catalog", "--plot", "--json", "--timing", "--no-analysis",
                    "--force"):  # flags without a value (--force: the --plot file)
            continue
        code, _, err = run("rl", flag, values[flag], "--no-analysis")
        assert code == 0, (flag, err)


def test_export_file_has_normal_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        path = tmp_path / "plan.mps"
        code, _, err = run("solve", "--scenario", DC, "--export", path)
        assert code == 0, err
        assert stat.S_IMODE(path.stat().st_mode) == 0o644  # 0666 less the umask, as any file the user writes
    finally:
        os.umask(old)


def test_init_writes_an_rl_template_that_tpopt_rl_solves(tmp_path):
    path = tmp_path / "rl.toml"
    code, out, err = run("init", path, "--rl")
    assert code == 0, err
    assert "tpopt rl --scenario" in out
    raw = tomllib.loads(path.read_text())
    assert "rl" in raw and raw["hardware"]["accelerator"] == "h100-sxm"
    code, out, err = run("rl", "--scenario", path, "--no-analysis", "--json")
    assert code == 0, err
    assert json.loads(out)["status"] == "optimal"


def test_init_writes_a_cp_line(tmp_path):
    path = tmp_path / "s.toml"
    assert run("init", path)[0] == 0
    assert any(ln.lstrip("# ").startswith("cp = ") for ln in path.read_text().splitlines())


# --- 5. what is planned: the model's name, N and FLOPs per token -------------------------------------------

LLAMA_TINY = {"model_type": "llama", "hidden_act": "silu", "hidden_size": 256, "intermediate_size": 512,
              "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2, "vocab_size": 1000,
              "tie_word_embeddings": False, "rms_norm_eps": 1e-5}
# 2 layers x (q, o: 256 x 256; k, v: 256 x 128 (2 KV heads of 64); gate, up, down: 256 x 512; 2 norms)
# + embeddings and head (2 x 1000 x 256) + final norm
N_TINY = 2 * (2 * 256 * 256 + 2 * 256 * 128 + 3 * 256 * 512 + 2 * 256) + 2 * 1000 * 256 + 256


def _scenario_with_config(tmp_path, folder: str) -> Path:
    cfg = tmp_path / folder / "config.json"
    cfg.parent.mkdir(parents=True)
    cfg.write_text(json.dumps(LLAMA_TINY))
    text = Path(DC).read_text().replace('name = "qwen3-8b"', f'config = "{cfg}"')
    path = tmp_path / "s.toml"
    path.write_text(text)
    return path


def test_config_in_a_generic_folder_is_named_from_its_fields(tmp_path):
    from tpopt.catalogs.scenario import load_scenario

    sc = load_scenario(_scenario_with_config(tmp_path, "hf"))
    assert sc.model.name != "hf"
    assert N_TINY == 1_692_928
    assert sc.model.name == "llama-1.69M"  # model_type and N (derived above)
    sc = load_scenario(_scenario_with_config(tmp_path / "b", "my-tiny-llama"))
    assert sc.model.name == "my-tiny-llama"  # a folder that names the model names it


def test_solve_json_and_text_carry_scenario_model_n_and_flops():
    code, out, err = run("solve", "--scenario", DC, "--json")
    assert code == 0, err
    d = json.loads(out)
    # Qwen3-8B: 36 layers, d 4096, 32 heads of 128, 8 KV heads, SwiGLU 12288, vocab 151,936 untied, q/k norms
    L, d_model, h, kv, hd, f, V = 36, 4096, 32, 8, 128, 12288, 151936
    attn, mlp = d_model * h * hd + 2 * d_model * kv * hd + h * hd * d_model, 3 * d_model * f
    n = 2 * V * d_model + L * (attn + mlp + 2 * d_model + 2 * hd) + d_model
    flops = 6 * (L * (attn + mlp) + V * d_model) + 12 * L * h * hd * (8192 + 1) / 2  # 6 N_gemm + attention
    assert d["scenario"]["name"] == "design-case" and d["scenario"]["model"]["name"] == "qwen3-8b"
    assert d["scenario"]["model"]["params"] == n == 8_190_735_360
    assert d["scenario"]["model"]["flops_per_token"][0]["flops"] == pytest.approx(flops, rel=1e-12)
    code, out, _ = run("solve", "--scenario", DC)
    assert "Model: qwen3-8b, N 8.19B parameters" in out and f"{flops / 1e9:,.1f} GFLOP at 8,192 tokens" in out
    code, out, _ = run("evaluate", "--scenario", DC, "--cards", "48")
    assert "Model: qwen3-8b, N 8.19B parameters" in out
    d = json.loads(run("evaluate", "--scenario", DC, "--cards", "48", "--json")[1])
    assert d["scenario"]["model"]["params"] == n


# --- 4. long context: cp not searched is said, with its cost; solve --cp ------------------------------------

LLAMA8_128K = """
[scenario]
name = "llama3-8b-128k"
[model]
name = "llama3-8b"
[task]
tokens = "20B"
seq_len = 131072
global_batch = 32
[schedule]
deadline = "14d"
reserved = "1d"
[hardware]
accelerator = "h100-sxm"
[search]
max_cards = 256
"""


def test_long_context_without_cp_says_what_it_costs(tmp_path):
    path = tmp_path / "lc.toml"
    path.write_text(LLAMA8_128K)
    code, out, err = run("solve", "--scenario", path, "--json")
    assert code == 0, err
    d = json.loads(out)
    note = d["context_parallel"]
    assert note["seq_len"] == 131072 and note["checked"] and note["flag"] == "--cp 1,2,4,8,16"
    with_cp = note["best_with_cp"]
    assert with_cp["cp"] > 1 and with_cp["cost"] < d["metrics"]["cost"]
    assert note["saving"] == pytest.approx(1 - with_cp["cost"] / d["metrics"]["cost"])
    # solve --cp gives that plan
    code, out2, err = run("solve", "--scenario", path, "--cp", "1,2,4,8,16", "--json")
    assert code == 0, err
    d2 = json.loads(out2)
    assert d2["plan"]["cp"] == with_cp["cp"] and d2["metrics"]["cost"] == pytest.approx(with_cp["cost"])
    assert "context_parallel" not in d2  # searched: nothing to say
    text = " ".join(run("solve", "--scenario", path)[1].split())  # the terminal's wrapping undone
    assert "Context parallelism: not searched" in text and "--cp 1,2,4,8,16 finds" in text and "cheaper" in text


def test_short_sequences_say_nothing_about_cp():
    d = json.loads(run("solve", "--scenario", DC, "--json")[1])
    assert "context_parallel" not in d


@pytest.mark.parametrize("value", ["0", "x", ","])
def test_solve_cp_bad_values_are_one_line(value):
    code, out, err = run("solve", "--scenario", DC, "--cp", value)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "cp" in err


# --- 3. budget explain: what a user can act on first, impossible changes skipped, a price per card-hour -------


def _explain(*args):
    code, out, err = run("explain", "--scenario", DC, *args, "--json")
    assert code == 3, err
    return {r["parameter"]: r for r in json.loads(out)["relaxations"]}, [r["parameter"] for r in
                                                                       json.loads(out)["relaxations"]]


def test_budget_explain_orders_by_what_a_user_can_act_on():
    rels, order = _explain("--max-cost", "15000")
    assert order[:3] == ["max_cost", "card_price", "accelerator"]  # money first
    assert order.index("deadline") < order.index("usable_memory") < order.index("efficiency")
    assert order[-1] == "efficiency"  # what a run can hardly change comes last (a time limit cuts it first)


def test_budget_explain_offers_the_price_per_card_hour():
    rels, _ = _explain("--max-cost", "15000")
    r = rels["card_price"]
    # 10.6: the 48-card plan (24.6 d) is the only one meeting the deadline on 8-card RTX 4090 hosts at 0.59 USD
    # per card-hour plus NICs; it fits 15,000 USD when card-hours x p + NIC-dollars = 15,000
    ev = json.loads(run("evaluate", "--scenario", DC, "--cards", "48", "--json")[1])["metrics"]
    nic = ev["cost"] - ev["card_hours"] * 0.59
    p_star = (15000 - nic) / ev["card_hours"]
    assert r["helps"] and r["required_exact"] == pytest.approx(p_star, rel=1e-9)
    assert r["required"] == int(p_star * 100) / 100 and r["current"] == 0.59  # rounded down to the cent
    assert r["cost"] <= 15000 and r["plan"]["cards"] == 48
    assert r["apply"] == {"hardware.accelerator": ["rtx4090"], "search.accelerator": ["rtx4090"],
                          "cost.card_hour": r["required"]}
    text = " ".join(run("explain", "--scenario", DC, "--max-cost", "15000")[1].split())
    assert "card_price now 0.59 USD/card-hour: <= 0.48 USD/card-hour" in text


def test_impossible_efficiency_is_skipped_and_says_why():
    rels, _ = _explain("--max-cost", "5000")
    r = rels["efficiency"]
    assert r["helps"] is False and "skipped" in r["note"] and "eta_max" in r["note"]
    assert r["solves"] <= 2  # one check at the ceiling, not a search up to 300 %
    assert rels["card_price"]["helps"]  # the price that would fit is still offered


def test_cost_floor_is_below_every_cheapest_plan():
    from tpopt.catalogs.scenario import load_scenario
    from tpopt.optimizer.core import solve
    from tpopt.optimizer.explain import cost_floor
    from tpopt.optimizer.result import Request

    for per_op in (False, True):
        for hw in ("rtx4090", "h100-sxm"):
            sc = load_scenario(DC, {"hardware.accelerator": [hw], "search.accelerator": [hw],
                                    "hardware.efficiency": None if per_op else 0.4, "hardware.usable_memory": None,
                                    "search.max_cards": 256})
            best = solve(sc, "enumerate", Request()).best
            assert best is not None
            assert 0 < cost_floor(sc, hw) <= best.metrics["cost"]


def test_explain_lists_usable_memory_of_every_candidate_card():
    code, out, err = run("explain", "--scenario", DC, "--hw", "rtx4090,h100-sxm", "--max-cost", "1000", "--json")
    r = {x["parameter"]: x for x in json.loads(out)["relaxations"]}["usable_memory"]
    assert set(r["current_by_card"]) == {"rtx4090", "h100-sxm"}
    text = " ".join(run("explain", "--scenario", DC, "--hw", "rtx4090,h100-sxm", "--max-cost", "1000")[1].split())
    assert "usable_memory now rtx4090 22.00, h100-sxm" in text


# --- 6. GB200 NVL72: why a power-of-two batch has no plan, and the way out -----------------------------------

NVL72 = """
[scenario]
name = "gb200"
[model]
name = "llama3-70b"
[task]
tokens = "1T"
seq_len = 8192
global_batch = 1024
[schedule]
deadline = "30d"
[hardware]
accelerator = "gb200-nvl72"
efficiency = 0.4
[search]
max_cards = 4096
"""


def test_nvl72_power_of_two_batch_says_why_and_the_way_out(tmp_path):
    path = tmp_path / "gb.toml"
    path.write_text(NVL72)
    code, out, err = run("solve", "--scenario", path, "--json")
    assert code == 3
    detail = {d["name"]: d for d in json.loads(out)["conflict_detail"]}["layout.whole_hosts"]
    # 72 = 2^3 x 3^2: with power-of-two TP x CP x PP, whole 72-card hosts need DP a multiple of 9, and DP divides
    # the batch; 1,024 = 2^10 has no factor 3. Multiples of 9 x 16 = 144 around it: 1,008 = 7 x 144, 1,152 = 8 x 144
    reason = detail["reason"]
    assert "72-card hosts" in reason and "multiple of 9" in reason and "--global-batch 1008 or 1152" in reason
    text = " ".join(run("solve", "--scenario", path)[1].split())
    assert "why: gb200-nvl72 is rented in whole 72-card hosts" in text
    for batch in ("1008", "1152"):  # the way out works
        code, out, err = run("solve", "--scenario", path, "--global-batch", batch, "--no-analysis", "--json")
        assert code == 0, err
        assert json.loads(out)["plan"]["cards"] % 72 == 0


# --- 8. secondary figures ------------------------------------------------------------------------------------


def test_evaluate_of_a_solved_layout_gives_the_solved_figures(tmp_path):
    path = tmp_path / "lc.toml"
    path.write_text(LLAMA8_128K)  # save modes and intervals searched (both modes, auto interval)
    solved = json.loads(run("solve", "--scenario", path, "--json", "--no-analysis")[1])
    p = solved["plan"]
    assert p["save_mode"] == "async"  # what makes the old default (the first listed mode, sync) differ
    code, out, err = run("evaluate", "--scenario", path, "--cards", p["cards"], "--zero", p["zero_stage"],
                         "--tp", p["tp"], "--pp", p["pp"], "--cp", p["cp"], "--micro-batch", p["micro_batch"],
                         "--recompute", p["recompute"], "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["plan"]["save_mode"] == "async" and d["defaults_chosen"]["save_mode"] == "async"
    assert d["metrics"]["cost"] == pytest.approx(solved["metrics"]["cost"], rel=1e-12)
    # a flag fixes it, and then nothing is chosen
    d = json.loads(run("evaluate", "--scenario", path, "--cards", p["cards"], "--zero", p["zero_stage"],
                       "--tp", p["tp"], "--micro-batch", 1, "--save-mode", "sync", "--recompute", "full",
                       "--json")[1])
    assert d["plan"]["save_mode"] == "sync" and "defaults_chosen" not in d


def test_sweep_rows_of_dense_per_op_models_carry_no_fake_figures(tmp_path):
    path = tmp_path / "lc.toml"
    path.write_text(LLAMA8_128K)  # per-operation model (no hardware.efficiency), dense model
    code, out, err = run("sweep", "--scenario", path, "--deadline", "14d", "-q", "--json", "--out",
                         tmp_path / "r.json")
    assert code == 0, err
    front = json.loads(out)["front"]
    assert front and all(e["efficiency"] is None for e in front)  # not 0.0
    assert all(e["ep"] is None and e["expert_tp"] is None for e in front)  # not ep=1, expert_tp=TP
    rows = json.loads((tmp_path / "r.json").read_text())["rows"]
    assert all(r["efficiency"] is None and r["ep"] is None for r in rows)


def test_top_merges_plans_that_differ_only_in_the_zero_stage(tmp_path):
    path = tmp_path / "lc.toml"
    path.write_text(LLAMA8_128K)
    d = json.loads(run("solve", "--scenario", path, "--top", "8", "--json", "--no-analysis")[1])
    top = d["top"]
    assert len(top) == 8  # the JSON keeps every plan
    # near-duplicates: the same layout but for the ZeRO stage, cost and finish within 0.1 % of the group's first
    groups: list[tuple[tuple, float, float]] = []
    for e in top:
        p, m = e["plan"], e["metrics"]
        lay = (p["cards"], p["tp"], p["pp"], p["micro_batch"], p["recompute"], p["save_mode"], p["save_interval_s"])
        if not any(g[0] == lay and abs(m["cost"] - g[1]) <= 1e-3 * g[1]
                   and abs(m["finish_days"] - g[2]) <= 1e-3 * g[2] for g in groups):
            groups.append((lay, m["cost"], m["finish_days"]))
    distinct = len(groups)
    assert distinct < 8  # the case: ZeRO stages a few dollars apart on a 7,800 USD plan
    text = run("solve", "--scenario", path, "--top", "8", "--no-analysis")[1]
    table = text[text.index("Best plans"):].splitlines()
    rows = [ln for ln in table if "│" in ln]
    assert len(rows) == distinct and f"8 plans in {distinct} rows" in table[0]
    assert any("2, 3" in ln for ln in rows)


# --- 7. text fits the terminal --------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [
    ("explain", "--scenario", DC, "--max-cost", "15000"),
    ("explain", "--scenario", DC, "--max-cards", "32"),
    ("explain", "--scenario", DC, "--cards", "48", "--sensitivity"),
    ("solve", "--scenario", DC, "--max-cards", "32"),
    ("solve", "--scenario", DC, "--top", "3"),
    ("evaluate", "--cards", "48"),
    ("rl",),
    ("sweep", "--hw", "rtx4090,h100-sxm", "--deadline", "20d:40d:5d"),
    ("catalog",), ("catalog", "models"), ("catalog", "links"), ("catalog", "accelerators", "--sources"),
])
@pytest.mark.parametrize("columns", [80, 100])
def test_text_fits_the_terminal_width(args, columns):
    code, out, err = run(*args, env={"COLUMNS": str(columns)})
    assert code in (0, 3), err
    long = [ln for ln in out.splitlines() if len(ln) > columns]
    assert not long, long[:3]


def test_json_is_not_wrapped():
    code, out, _ = run("explain", "--scenario", DC, "--max-cost", "15000", "--json", env={"COLUMNS": "60"})
    d = json.loads(out)
    assert any(len(r.get("method", "")) > 60 for r in d["relaxations"])  # long strings stay whole
