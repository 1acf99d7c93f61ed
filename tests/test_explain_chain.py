"""Explain names what binds beyond the card limit (issue 37 item 4): Llama-3-405B on 15T tokens in 30 days with
at most 4,096 H100. No card count alone meets the deadline; explain names the storage bandwidth and then the
global batch as what stops more cards from helping, with the smallest value of each (in that order, each the
smallest with the ones before it), and the answer is verified here by solving with those values through the
command line, and by solving with each value one step smaller."""

import json

import pytest
from click.testing import CliRunner

from tpopt.cli.main import cli

SCENARIO = """
[scenario]
name = "llama3-405b-15t"

[model]
name = "llama3-405b"

[task]
tokens = "15T"
seq_len = 8192
global_batch = 2048
precision = "bf16-mixed"

[schedule]
deadline = "30d"

[hardware]
accelerator = "h100-sxm"

[search]
max_cards = 4096
"""


def run(*args):
    r = CliRunner().invoke(cli, list(map(str, args)))
    assert r.exit_code in (0, 3), r.output
    return r


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    p = tmp_path_factory.mktemp("l405") / "l405.toml"
    p.write_text(SCENARIO)
    d = json.loads(run("explain", "--scenario", p, "--json").output)
    return p, d


def with_storage(path, gb_s):
    p = path.parent / f"storage-{gb_s}.toml"
    p.write_text(SCENARIO + f'\n[checkpoint]\nwrite_bandwidth = "{gb_s}GB/s"\n')
    return p


def test_the_405b_case_offers_storage_then_batch_then_cards(case):
    path, d = case
    assert d["status"] == "infeasible"
    cards = next(r for r in d["relaxations"] if r["parameter"] == "max_cards")
    assert cards["helps"] is False  # alone it cannot help ...
    chain = cards["chain"]  # ... and the answer says why, and what lets it
    assert [s["parameter"] for s in chain["steps"]] == ["write_bandwidth", "global_batch", "max_cards"]
    assert chain["steps"][0]["current"] == 7.0  # the default 7 GB/s storage
    assert chain["steps"][1]["current"] == 2048
    assert chain["overhead"] > 1.0 and chain["dp"] * 2 <= 2048  # at the largest count: overhead > 100 %
    bw, batch, n = (s["required"] for s in chain["steps"])
    assert batch % 2048 == 0 and bw > 7.0 and n > 4096
    # verified: solving with the three values finds a plan within the deadline
    ok = run("solve", "--scenario", with_storage(path, bw), "--global-batch", batch, "--max-cards", n, "--json")
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.output)["metrics"]["finish_days"] <= 30.0
    assert chain["finish_days"] == pytest.approx(json.loads(ok.output)["metrics"]["finish_days"], rel=1e-9)
    # and each is the smallest with the others: one step less of any one is infeasible
    slower = run("solve", "--scenario", with_storage(path, round(bw - 0.1, 1)), "--global-batch", batch,
                 "--max-cards", n)
    assert slower.exit_code == 3
    factors = (1, 2, 3, 4, 6, 8, 12, 16)  # the batch: the smallest multiple of 2,048 tried that works at all
    smaller = 2048 * factors[factors.index(batch // 2048) - 1]
    fastest_storage = run("solve", "--scenario", with_storage(path, 7000), "--global-batch", smaller, "--max-cards",
                          131072)
    assert fastest_storage.exit_code == 3
    fewer = run("solve", "--scenario", with_storage(path, bw), "--global-batch", batch, "--max-cards", n - 1)
    assert fewer.exit_code == 3
    text = " ".join(run("explain", "--scenario", path).output.split())
    assert "what binds beyond the card limit" in text
    assert f"1. storage bandwidth >= {bw:,} GB/s (now 7) 2. global batch >= {batch:,} sequences (now 2,048)" in text


def test_at_4096_cards_storage_costs_a_fifth_of_the_training_time(case):
    """The issue's figure: at the card cap the fastest plan loses 18.9 % to checkpoints and failures at the
    default 7 GB/s storage."""
    path, _ = case
    r = run("solve", "--scenario", path, "--objective", "time", "--deadline", "3650d", "--json")
    m = json.loads(r.output)["metrics"]
    assert m["overhead_fraction"] == pytest.approx(0.189, abs=0.0005)


DC = __import__("pathlib").Path(__file__).resolve().parents[1] / "examples" / "design-case.toml"
RATE_LINE = "sequences_per_worker_s = 2"
STORAGE_LINE = 'write_bandwidth = "7GB/s"'


def relaxation(d, name):
    return next(r for r in d["relaxations"] if r["parameter"] == name)


def test_input_rate_and_storage_bandwidth_are_relaxations(tmp_path):
    """The design case at a 23-day deadline: its input pipeline (4 workers x 2 sequences/s) holds every plan's
    step at 48 s or more, so the answer offers the rate per worker that admits a plan; with 1 GB/s storage and a
    24.7-day deadline, the saves' overhead does, and the answer offers the storage bandwidth. Each value is
    verified by solving the scenario edited to it, and to one printed step less."""
    text = DC.read_text()
    assert RATE_LINE in text and STORAGE_LINE in text
    d = json.loads(run("explain", "--scenario", DC, "--deadline", "23d", "--json").output)
    r = relaxation(d, "input_rate")
    assert r["current"] == 2.0 and r["helps"] and r["unit"] == "seq/s"
    names = [x["parameter"] for x in d["relaxations"]]
    assert names.index("reserved") < names.index("write_bandwidth") < names.index("input_rate") < \
        names.index("nic_bandwidth")  # the request, then the storage and the input pipeline, then the network

    def solve_at(line, new, *extra):
        p = tmp_path / "edited.toml"
        p.write_text(text.replace(line, new))
        return run("solve", "--scenario", p, *extra)

    ok = solve_at(RATE_LINE, f"sequences_per_worker_s = {r['required']}", "--deadline", "23d")
    assert ok.exit_code == 0, ok.output
    assert solve_at(RATE_LINE, f"sequences_per_worker_s = {r['required'] - 0.01:.2f}", "--deadline",
                    "23d").exit_code == 3
    slow = tmp_path / "slow.toml"
    slow.write_text(text.replace(STORAGE_LINE, 'write_bandwidth = "1GB/s"'))
    d = json.loads(run("explain", "--scenario", slow, "--deadline", "24.7d", "--json").output)
    w = relaxation(d, "write_bandwidth")
    assert w["current"] == 1.0 and w["helps"] and 1.0 < w["required"] < 7.0
    assert w["apply"] == {"checkpoint.write_bandwidth": f"{w['required']:.1f}GB/s"}
    ok = solve_at(STORAGE_LINE, f'write_bandwidth = "{w["required"]:.1f}GB/s"', "--deadline", "24.7d")
    assert ok.exit_code == 0, ok.output
    assert solve_at(STORAGE_LINE, f'write_bandwidth = "{w["required"] - 0.1:.1f}GB/s"', "--deadline",
                    "24.7d").exit_code == 3


def test_the_global_batch_is_a_relaxation():
    """The design case at 24.5 days: 48 cards need 24.64 d at 384 sequences; a larger batch (the same tokens in
    fewer steps) spends less of each step in the data-parallel exchange. The answer is the smallest multiple of
    384 with a plan, verified by solving at it and at the multiple below."""
    d = json.loads(run("explain", "--scenario", DC, "--deadline", "24.5d", "--json").output)
    r = relaxation(d, "global_batch")
    assert r["current"] == 384 and r["helps"] and r["required"] % 384 == 0 and r["apply"] == {
        "task.global_batch": r["required"]}
    ok = run("solve", "--scenario", DC, "--deadline", "24.5d", "--global-batch", r["required"], "--json")
    assert ok.exit_code == 0 and json.loads(ok.output)["metrics"]["finish_days"] <= 24.5
    factors = (1, 2, 3, 4, 6, 8, 12, 16)
    # one solve per multiple tried, in order, up to the answer: 2x, ..., the required one (and no more)
    assert r["solves"] == factors.index(r["required"] // 384)
    below = 384 * factors[factors.index(r["required"] // 384) - 1]
    assert run("solve", "--scenario", DC, "--deadline", "24.5d", "--global-batch", below).exit_code == 3
    text = " ".join(run("explain", "--scenario", DC, "--deadline", "24.5d").output.split())
    assert f"global_batch now 384 sequences: >= {r['required']:,} sequences -> " in text


def nic_case(tmp_path, nics, name="nics.toml"):
    """The design case made bandwidth-bound: 2,048-token sequences (a quarter of the compute per step, the same
    ZeRO-3 exchange of the weights and gradients), one 100 Gbit/s NIC (12.5 GB/s) per 8-card host searched, and
    the input pipeline widened (400 workers) so that it does not bind."""
    text = DC.read_text()
    for old, new in (("seq_len = 8192", "seq_len = 2048"), ("workers = 4\n", "workers = 400\n"),
                     ("cards_per_host = 8\n", 'cards_per_host = 8\nnic = "100g"\n'),
                     ("max_cards = 1024\n", f"max_cards = 1024\nnics_per_host = {nics}\n")):
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    p = tmp_path / name
    p.write_text(text)
    return p


def test_nics_per_host_is_a_relaxation(tmp_path):
    """At 10 days one NIC per host leaves the fastest plan at 11.95 d (384 cards, the batch's most data
    parallelism: the step is the exchange across hosts); a second NIC halves that exchange's time. The answer is
    the smallest count with a plan, verified by solving with it added to the search and with the counts below
    only; the RTX 4090 host takes 8 NICs (catalog max_nics_per_host)."""
    path = nic_case(tmp_path, "[1]")
    d = json.loads(run("explain", "--scenario", path, "--deadline", "10d", "--json").output)
    r = relaxation(d, "nics_per_host")
    assert r["current"] == 1 and r["helps"] and r["unit"] == "NICs" and r["required"] >= 2
    assert r["apply"] == {"search.nics_per_host": [1, r["required"]]}
    assert r["plan"]["nics_per_host"] == r["required"]
    ok = run("solve", "--scenario", nic_case(tmp_path, f"[1, {r['required']}]", "ok.toml"), "--deadline", "10d",
             "--json")
    assert ok.exit_code == 0 and json.loads(ok.output)["metrics"]["finish_days"] <= 10.0
    assert json.loads(ok.output)["metrics"]["cost"] == pytest.approx(r["cost"], rel=1e-9)
    below = nic_case(tmp_path, str(list(range(1, r["required"]))), "below.toml")
    assert run("solve", "--scenario", below, "--deadline", "10d").exit_code == 3
    names = [x["parameter"] for x in d["relaxations"]]
    assert names.index("input_rate") < names.index("nics_per_host") < names.index("nic_bandwidth")
    text = " ".join(run("explain", "--scenario", path, "--deadline", "10d").output.split())
    assert f"nics_per_host now 1 NICs: >= {r['required']} NICs -> " in text


def test_nics_per_host_cannot_help_where_compute_binds(tmp_path):
    """At 8 days even 8 NICs per host (the host's most) leave no plan: the step's compute alone is too long at
    the batch's most data parallelism; and on the design case as shipped (8 NICs, the most) nothing is left to
    add."""
    d = json.loads(run("explain", "--scenario", nic_case(tmp_path, "[1]"), "--deadline", "8d", "--json").output)
    r = relaxation(d, "nics_per_host")
    assert r["helps"] is False and r["required"] is None and "8 NICs per host" in r["note"]
    eight = nic_case(tmp_path, "[1, 2, 3, 4, 5, 6, 7, 8]", "eight.toml")
    assert run("solve", "--scenario", eight, "--deadline", "8d").exit_code == 3
    d = json.loads(run("explain", "--scenario", DC, "--deadline", "20d", "--json").output)
    r = relaxation(d, "nics_per_host")
    assert r["current"] == 8 and r["helps"] is False and "already have the most NICs" in r["note"]
