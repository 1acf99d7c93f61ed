"""Sweeps (optimizer/sweep.py): inputs, golden switch points of the design case, exactness of the
mask path against the solvers, the Pareto front, fingerprints and the resumable output files.

Golden figures: REFERENCE.md 10.6 (32 cards finish in 34.3 d, 48 cards in 24.6 d) and the relations of
10.1, 10.3, 10.4 and 10.6 for the other card counts (derived below, never taken from the code).
"""

import json
import math
from pathlib import Path

import pytest

from tpopt.errors import InputError
from tpopt.models.units import DAY
from tpopt.optimizer import sweep as sw

SWEEP_FILE = Path(__file__).resolve().parents[1] / "examples" / "design-case-sweep.toml"


# ---------------------------------------------------------------------------------------------
# derivation of the design case's finish times (REFERENCE.md), per card count n (ZeRO-3, DP = n)

# FLOPs per token (REFERENCE conventions): 6 x GEMM parameters (q 4096x4096, k and v 4096x1024, o 4096x4096,
# MLP 3 x 4096x12288 per layer, 36 layers, lm_head 4096x151936) + causal attention 12 L d_attn (s+1)/2
GEMM = 36 * (4096 * 4096 * 2 + 4096 * 1024 * 2 + 3 * 4096 * 12288) + 4096 * 151_936
FLOP_PER_TOKEN = 6 * GEMM + 12 * 36 * 4096 * (8192 + 1) / 2  # 52.7 GFLOP
SEQ_S = FLOP_PER_TOKEN * 8192 / (165.2e12 * 0.40)  # one sequence on one card at 40 % (10.1: 6.53 s per micro-batch)
ITERS = 31_790  # ceil(1e11 / 3,145,728)
C_S, TAU_S, R_S = 16.381, 1800.0, 120.0  # checkpoint write (10.4: 115 GB at 7 GB/s), interval, restore
CARD_MTBF_S = 1024 * 7.9 * 3600  # 10.4: one interruption per 7.9 h on 1,024 cards (337 d per card)


def derived_finish_days(n: int) -> float:
    compute = 384 / n * SEQ_S  # 10.1: 78.3 s on 32 cards, 52.2 s on 48
    exposed = 2 * 1.2447e9 * (n - 1) / n / 32e9  # 10.3: first AllGather + last ReduceScatter, 0.08 s
    step = compute + exposed + 0.5  # + input wait (10.3: 78.9 / 52.8 s)
    lam = n / CARD_MTBF_S
    overhead = C_S / TAU_S + lam * (TAU_S / 2 + R_S)  # 10.4: 1.02 % (32), 1.08 % (48)
    return 5.0 + ITERS * step * (1 + overhead) / DAY  # 10.6: T = T_reserved + iterations x step x (1 + L)


def test_derivation_reproduces_reference_figures():
    assert FLOP_PER_TOKEN == pytest.approx(52.7e9, rel=1e-3)
    assert 384 / 32 * SEQ_S == pytest.approx(78.3, abs=0.05) and 384 / 48 * SEQ_S == pytest.approx(52.2, abs=0.05)
    assert derived_finish_days(32) == pytest.approx(34.3, abs=0.05)
    assert derived_finish_days(48) == pytest.approx(24.6, abs=0.05)


# cost = (cards x price + NICs x NIC price) x finish: cards x finish = 5 n + (n-independent training work),
# so with any positive price fewer cards are always cheaper; the optimum at a deadline d is the smallest
# card count that finishes by d. Card counts: multiples of 8 (whole hosts) dividing the 384-sequence batch.
CANDIDATES = (16, 24, 32, 48, 64, 96)


def expected_cards(deadline_days: float, allowed=CANDIDATES):
    ok = [n for n in allowed if derived_finish_days(n) <= deadline_days]
    return min(ok) if ok else None


def _rows_by_deadline(result, acc="rtx4090"):
    return {round(r["deadline_days"], 6): r for r in result.rows if r["accelerator"] == acc}


def _spec(tmp_path, extra_input: str = "", **cli):
    text = open(SWEEP_FILE).read()
    if extra_input:
        text = text.replace("[input]\n", "[input]\n" + extra_input + "\n")
    p = tmp_path / "s.toml"
    p.write_text(text)
    return sw.build_spec(p, cli)


# ---------------------------------------------------------------------------------------------
# golden sweeps of the design case


def test_design_case_with_input_scaled_per_host_switches_64_48_32(tmp_path):
    """Input workers per host (4 x 2 seq/s per 8-card host): nothing but the deadline limits the plan."""
    spec = _spec(tmp_path, "workers_per_host = 4", deadline="20d:40d:1d", hw="rtx4090")
    res = sw.run_sweep(spec, workers=1)
    # derived: 64 cards 19.8 d, 48 cards 24.6 d, 32 cards 34.3 d, 24 cards 44.0 d
    assert derived_finish_days(64) == pytest.approx(19.78, abs=0.02)
    assert derived_finish_days(24) == pytest.approx(44.03, abs=0.02)
    rows = _rows_by_deadline(res)
    assert len(rows) == 21
    for d, r in rows.items():
        assert r["status"] == "optimal", d
        assert r["cards"] == expected_cards(d), d
        assert r["finish_days"] == pytest.approx(derived_finish_days(r["cards"]), abs=0.02)
    assert [rows[d]["cards"] for d in (20, 24, 25, 30, 34, 35, 40)] == [64, 64, 48, 48, 48, 32, 32]
    front = res.front()
    assert [e["cards"] for e in front] == [64, 48, 32]
    assert [(e["deadline_min_days"], e["deadline_max_days"]) for e in front] == [(20, 24), (25, 34), (35, 40)]
    costs = [rows[d]["cost"] for d in sorted(rows)]
    assert all(a >= b for a, b in zip(costs, costs[1:], strict=False))  # a longer deadline never costs more


def test_design_case_as_published_is_input_bound_below_24_6_days(tmp_path):
    """The chapter's job-wide input pipeline (4 workers x 2 seq/s = 8 seq/s, 10.4) caps throughput:
    64 cards would consume 384 / 39.2 s = 9.8 seq/s, so no plan finishes before the 48-card 24.6 d."""
    assert 384 / (384 / 64 * SEQ_S + 0.0766) > 8.0
    assert 384 / (384 / 48 * SEQ_S + 0.0766) < 8.0  # 7.3 seq/s (10.4)
    spec = sw.build_spec(SWEEP_FILE, {})  # the file's [sweep]: rtx4090, 20d:40d:1d
    res = sw.run_sweep(spec, workers=1)
    rows = _rows_by_deadline(res)
    assert sorted(rows) == list(range(20, 41))
    for d, r in rows.items():
        if d < 24.6:
            assert r["status"] == "infeasible" and r["cards"] is None
            assert r["fastest_days"] == pytest.approx(24.6, abs=0.05)
        else:
            assert r["status"] == "optimal"
            assert r["cards"] == expected_cards(d, allowed=(16, 24, 32, 48))
    assert [e["cards"] for e in res.front()] == [48, 32]
    assert [r["pareto"] for r in rows.values()].count(True) == 16


def test_breakdown_bars_of_32_and_48_cards_match_10_6():
    spec = sw.build_spec(SWEEP_FILE, {"deadline": "30d"})
    res = sw.run_sweep(spec, workers=1)
    bars, notes = sw.breakdown_bars(res, (32, 48, 64))
    by = {b["cards"]: b for b in bars}
    assert set(by) == {32, 48} and len(notes) == 1 and "64" in notes[0]  # 64 cards: input-bound
    for n, base in ((32, 29.0), (48, 19.4)):  # 10.6 table: base training days
        b = by[n]
        assert b["train_days"] == pytest.approx(base, abs=0.05)
        assert b["reserved_days"] == 5.0
        assert b["train_days"] + b["overhead_days"] + b["reserved_days"] == pytest.approx(b["finish_days"])
    assert by[32]["overhead_days"] / by[32]["train_days"] == pytest.approx(0.0102, abs=5e-5)
    assert by[48]["overhead_days"] / by[48]["train_days"] == pytest.approx(0.0108, abs=5e-5)
    assert spec.plot_deadline_days == 30.0


# ---------------------------------------------------------------------------------------------
# the mask path is exact: same optimum as a fresh solve of each point


def test_mask_path_equals_fresh_solves(tmp_path):
    """Deadlines x card caps x budgets on an unrestricted [search] space (4,096 plans): every mask answer
    equals an independent enumeration (core.solve) of the point's own scenario."""
    from tpopt.optimizer.core import solve

    text = open(SWEEP_FILE).read()
    p = tmp_path / "free.toml"
    p.write_text(text[:text.index("[search]")] + "[search]\nmax_cards = 1024\n")
    spec = sw.build_spec(p, {"deadline": "20d,26d,40d", "max_cards": "32,1024", "max_cost": "17000,1e9",
                             "hw": "rtx4090"})
    assert sw.space_size(spec, "rtx4090") > 1000
    table = sw.run_sweep(spec, workers=1)
    assert table.paths == {"table": 12} and table.tasks == 1
    payload = sw._payload(spec)
    statuses = set()
    for row, point in zip(sorted(table.rows, key=lambda r: r["point_key"]),
                          sorted(spec.points(), key=lambda q: q.key()), strict=False):
        assert row["point_key"] == point.key()
        sc = sw.point_scenario(sw.group_scenario(payload, point), point)
        ref = solve(sc, "enumerate")
        statuses.add(row["status"])
        if ref.feasible:
            assert row["status"] == "optimal"
            assert row["cost"] == ref.best.metrics["cost"]
            assert row["finish_days"] == ref.best.metrics["finish_days"]
            assert row["cards"] == ref.best.plan.cards
            assert row["cards"] <= row["max_cards"] and row["finish_days"] <= row["deadline_days"]
            assert row["cost"] <= row["max_cost"]
        else:
            assert row["status"] == "infeasible"
    assert statuses == {"optimal", "infeasible"}


def test_highs_per_point_agrees_with_the_mask_path():
    spec = sw.build_spec(SWEEP_FILE, {"deadline": "20d,26d,36d", "max_cost": "17000,1e9"})
    table = sw.run_sweep(spec, workers=1)
    spec.solver = "highs"
    highs = sw.run_sweep(spec, workers=2)
    assert table.paths == {"table": 6} and highs.paths == {"highs": 6}
    for a, b in zip(table.rows, highs.rows, strict=False):
        assert (a["point_key"], a["status"], a["cards"]) == (b["point_key"], b["status"], b["cards"])
        if a["status"] == "optimal":
            assert b["cost"] == pytest.approx(a["cost"], rel=1e-9)
            assert b["finish_days"] == pytest.approx(a["finish_days"], rel=1e-9)
        else:
            assert b["fastest_days"] == pytest.approx(a["fastest_days"], rel=1e-9)
    assert [r["status"] for r in table.rows].count("infeasible") == 3  # 20 d (input-bound) + 26 d, 36 d at 17,000


def test_cpsat_per_point_agrees_on_a_few_points():
    spec = sw.build_spec(SWEEP_FILE, {"deadline": "24d,30d,36d", "solver": "cpsat"})
    a = sw.run_sweep(spec, workers=1)
    spec.solver = "auto"
    b = sw.run_sweep(spec, workers=1)
    assert a.paths == {"cpsat": 3} and b.paths == {"table": 3}
    assert [(r["status"], r["cards"], r["cost"]) for r in a.rows] == [(r["status"], r["cards"], r["cost"])
                                                                       for r in b.rows]


def test_deadline_is_a_table_input_with_auto_interval_and_no_failures(tmp_path):
    text = open(SWEEP_FILE).read().replace('job_mtbf = { cards = 1024, interval = "7.9h" }', 'card_mtbf = "never"')
    text = text.replace('save_interval = "1800s"', 'save_interval = "auto"')
    p = tmp_path / "nofail.toml"
    p.write_text(text)
    spec = sw.build_spec(p, {"deadline": "26d,35d"})
    assert spec.deadline_in_table
    tab = sw.run_sweep(spec, workers=1)
    assert tab.tasks == 2  # one enumeration per deadline
    spec.solver = "highs"
    sol = sw.run_sweep(spec, workers=1)
    for a, b in zip(tab.rows, sol.rows, strict=False):
        assert a["cards"] == b["cards"] and a["cost"] == pytest.approx(b["cost"], rel=1e-9)
        assert a["save_interval_s"] == pytest.approx(a["deadline_days"] * DAY)  # interval = deadline


# ---------------------------------------------------------------------------------------------
# inputs


def test_ranges_lists_and_canonical_values():
    d = sw.DIMS
    assert sw.parse_values(d["deadline"], "10d:13d:1d", "x") == tuple(float(k * DAY) for k in (10, 11, 12, 13))
    assert sw.parse_values(d["deadline"], "10d:13.5d:1d", "x")[-1] == 13 * DAY  # end not on the grid
    assert sw.parse_values(d["efficiency"], "30%:50%:5%", "x") == (0.3, 0.35, 0.4, 0.45, 0.5)
    assert sw.parse_values(d["tokens"], "50B,100B,50B", "x") == (5e10, 1e11)
    assert sw.parse_values(d["max_cards"], ["16:32:8", 64], "x") == (16, 24, 32, 64)
    assert sw.parse_values(d["card_hour"], 0.59, "x") == (0.59,)
    assert sw.parse_values(d["deadline"], "1w", "x") == (7 * DAY,)


@pytest.mark.parametrize("text,needle", [
    ("10d:5d:1d", "before the start"),
    ("10x:20d:1d", "unknown unit 'x'"),
    ("10d:20d:0d", "step must be positive"),
    ("10d:20d", "not a range"),
    ("10d::1d", "not a range"),
    ("1s:2d:1s", "at most"),
    ("10d,,20d", "empty value"),
    ("0d", "greater than zero"),
])
def test_bad_ranges(text, needle):
    with pytest.raises(InputError, match=needle):
        sw.parse_values(sw.DIMS["deadline"], text, "--deadline")


def test_sweep_table_is_read_and_overridden_key_by_key(tmp_path):
    spec = sw.build_spec(SWEEP_FILE, {})
    assert spec.hw == ("rtx4090",) and len(spec.values["deadline"]) == 21
    assert spec.breakdown_cards == (32, 48)
    spec2 = sw.build_spec(SWEEP_FILE, {"deadline": "30d", "hw": "h100-sxm,rtx4090"})
    assert spec2.values["deadline"] == (30 * DAY,) and spec2.hw == ("h100-sxm", "rtx4090")
    assert spec2.values["tokens"] == (1e11,) and spec2.values["max_cards"] == (1024,)
    p = tmp_path / "bad.toml"
    p.write_text(open(SWEEP_FILE).read().replace("[sweep]\n", "[sweep]\ndeadlines = \"20d\"\n"))
    with pytest.raises(InputError, match="unknown key"):
        sw.build_spec(p, {})
    with pytest.raises(InputError, match="unknown accelerator 'tpu-v9'"):
        sw.build_spec(SWEEP_FILE, {"hw": "rtx4090,tpu-v9"})
    with pytest.raises(InputError, match="unknown solver"):
        p.write_text(open(SWEEP_FILE).read().replace("[sweep]\n", "[sweep]\nsolver = \"gurobi\"\n"))
        sw.build_spec(p, {})


def test_fingerprint_covers_the_scenario_but_not_the_swept_inputs(tmp_path):
    text = open(SWEEP_FILE).read()
    base = sw.build_spec(SWEEP_FILE, {}).fingerprint
    assert base == sw.build_spec(SWEEP_FILE, {"deadline": "30d", "tokens": "50B"}).fingerprint
    p = tmp_path / "a.toml"
    p.write_text(text.replace('deadline = "30d"', 'deadline = "45d"'))  # a swept input: not in the fingerprint
    assert sw.build_spec(p, {}).fingerprint == base
    p.write_text(text.replace('write_bandwidth = "7GB/s"', 'write_bandwidth = "20GB/s"'))
    assert sw.build_spec(p, {}).fingerprint != base
    assert sw.build_spec(SWEEP_FILE, {}, fixed={"hardware.usable_memory": "20GiB"}).fingerprint != base


# ---------------------------------------------------------------------------------------------
# the front


def _row(key, cost, finish, status="optimal", tokens=1e11, acc="a"):
    r = dict.fromkeys(sw.COLUMN_NAMES)
    r.update(point_key=key, accelerator=acc, tokens=tokens, efficiency=0.4, reserved_days=5.0, status=status,
             cost=cost if status == "optimal" else None, finish_days=finish if status == "optimal" else None)
    return r


def test_pareto_marks_non_dominated_rows_per_case():
    rows = [_row("a", 10, 30), _row("b", 12, 25), _row("c", 12, 28),  # c dominated by b
            _row("d", 10, 30), _row("e", 9, 40), _row("f", 11, 40),  # d ties a; f dominated by e
            _row("g", 0, 0, status="infeasible"), _row("h", 50, 50, tokens=5e10)]  # other case: own front
    sw.mark_pareto(rows)
    assert {r["point_key"] for r in rows if r["pareto"]} == {"a", "b", "d", "e", "h"}


# ---------------------------------------------------------------------------------------------
# output files


@pytest.fixture(scope="module")
def small_result():
    spec = sw.build_spec(SWEEP_FILE, {"deadline": "22d,25d,36d", "hw": "rtx4090,h100-sxm"})
    return spec, sw.run_sweep(spec, workers=1)


@pytest.mark.parametrize("ext", [".csv", ".json", ".parquet"])
def test_output_round_trips_and_resumes_without_solving(tmp_path, small_result, ext):
    spec, res = small_result
    out = tmp_path / f"r{ext}"
    first = sw.run_sweep(spec, out=out, workers=1)
    data = out.read_bytes()
    assert not (tmp_path / f"r{ext}.journal.csv").exists()
    again = sw.run_sweep(spec, out=out, workers=1)
    assert again.computed == 0 and again.reused == 6
    assert out.read_bytes() == data  # same bytes
    assert again.rows == first.rows == res.rows
    other = tmp_path / f"s{ext}"
    sw.run_sweep(spec, out=other, workers=2)
    assert other.read_bytes() == data  # deterministic: same inputs, same bytes


def test_csv_torn_last_line_is_discarded_on_resume(tmp_path, small_result):
    spec, res = small_result
    out = tmp_path / "r.csv"
    sw.run_sweep(spec, out=out, workers=1)
    full = out.read_bytes()
    lines = full.decode().split("\n")
    # a killed run: header + 2 rows, then half of a third row without its newline
    out.write_text("\n".join(lines[:3]) + "\n" + lines[3][: len(lines[3]) // 2])
    again = sw.run_sweep(spec, out=out, workers=1)
    assert again.reused == 2 and again.computed == 4 and again.discarded == 1
    assert out.read_bytes() == full


def test_json_journal_resume(tmp_path, small_result):
    spec, res = small_result
    out = tmp_path / "r.json"
    journal = tmp_path / "r.json.journal.csv"
    ref = tmp_path / "ref.csv"
    sw.run_sweep(spec, out=ref, workers=1)
    lines = ref.read_text().split("\n")
    journal.write_text("\n".join(lines[:4]) + "\n" + lines[4][:10])  # as left by a killed run
    again = sw.run_sweep(spec, out=out, workers=1)
    assert again.reused == 3 and again.computed == 3
    assert not journal.exists()
    d = json.loads(out.read_text())
    assert d["tpopt_sweep"]["fingerprint"] == spec.fingerprint
    assert [r["point_key"] for r in d["rows"]] == [r["point_key"] for r in res.rows]


def test_refuses_foreign_files_and_other_scenarios(tmp_path, small_result):
    spec, _ = small_result
    for name, content in (("notes.csv", b"a,b\n1,2\n"), ("x.json", b'{"rows": []}'), ("y.parquet", b"PAR1junk"),
                          ("empty.csv", b"")):
        p = tmp_path / name
        p.write_bytes(content)
        with pytest.raises(InputError, match="not written by a tpopt sweep"):
            sw.run_sweep(spec, out=p, workers=1)
        assert p.read_bytes() == content  # untouched
    out = tmp_path / "r.csv"
    sw.run_sweep(spec, out=out, workers=1)
    before = out.read_bytes()
    other = sw.build_spec(SWEEP_FILE, {"deadline": "22d,25d,36d", "hw": "rtx4090,h100-sxm", "tokens": "100B"},
                          fixed={"hardware.usable_memory": "20GiB"})
    with pytest.raises(InputError, match="different scenario"):
        sw.run_sweep(other, out=out, workers=1)
    assert out.read_bytes() == before
    forced = sw.run_sweep(other, out=out, force=True, workers=1)
    assert forced.computed == 6 and out.read_bytes() != before


def test_points_outside_the_sweep_are_dropped_but_shared_points_reused(tmp_path, small_result):
    spec, _ = small_result
    out = tmp_path / "r.csv"
    sw.run_sweep(spec, out=out, workers=1)
    narrower = sw.build_spec(SWEEP_FILE, {"deadline": "25d,36d,40d", "hw": "rtx4090,h100-sxm"})
    res = sw.run_sweep(narrower, out=out, workers=1)
    assert (res.reused, res.computed, res.dropped) == (4, 2, 2)
    assert len(out.read_text().strip().split("\n")) == 1 + 6


def test_output_path_checks(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        sw.check_output_path(tmp_path / "missing" / "r.csv")
    with pytest.raises(InputError, match="must end in"):
        sw.check_output_path(tmp_path / "r.txt")
    (tmp_path / "d.csv").mkdir()
    with pytest.raises(InputError, match="is a directory"):
        sw.check_output_path(tmp_path / "d.csv")
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(InputError, match="does not exist"):
        sw.check_output_path(f / "r.csv")


def test_row_columns_cover_the_brief():
    need = {"accelerator", "deadline_days", "status", "cards", "zero", "tp", "pp", "dp", "micro_batch", "grad_accum",
            "recompute", "cost", "finish_days", "step_s", "memory_per_card_gib", "overhead_fraction", "point_key",
            "fingerprint", "pareto"}
    assert need <= set(sw.COLUMN_NAMES)
    assert math.isclose(sw.AUTO_TABLE_LIMIT, 300_000)


def test_unproven_rows_are_solved_again(tmp_path, small_result):
    spec, _ = small_result
    out = tmp_path / "r.csv"
    sw.run_sweep(spec, out=out, workers=1)
    full = out.read_bytes()
    head, *lines = full.decode().split("\n")
    i = next(k for k, ln in enumerate(lines) if ",optimal," in ln)
    row = dict(sw._parse_csv_line(lines[i]), status="feasible")
    from tpopt.optimizer.sweep.rows import seal
    from tpopt.optimizer.sweep.store import _csv_line

    lines[i] = _csv_line(seal(row)).rstrip("\n")  # a valid row (checksum included), only unproven
    out.write_text("\n".join([head] + lines))
    again = sw.run_sweep(spec, out=out, workers=1)
    assert (again.reused, again.computed) == (5, 1) and again.resume.unproven == {"feasible": 1}
    assert again.resume.tampered == 0
    assert out.read_bytes() == full


def test_one_front_per_case(tmp_path):
    spec = sw.build_spec(SWEEP_FILE, {"deadline": "26d,36d", "tokens": "50B,100B"})
    res = sw.run_sweep(spec, workers=1)
    data = sw.plot_series(res)
    assert [f["label"] for f in data["fronts"]] == ["50B tok", "100B tok"]
    # 50B tokens: exactly half the iterations (15,895 of 31,790), so half the training days (10.6 relation)
    def half(n):
        return 5.0 + (derived_finish_days(n) - 5.0) / 2

    want = [min(n for n in CANDIDATES if half(n) <= d) for d in (26, 36)]
    assert want == [24, 16]
    assert [p["cards"] for p in data["fronts"][0]["points"]] == want
    assert [p["finish_days"] for p in data["fronts"][0]["points"]] == pytest.approx([half(24), half(16)], abs=0.02)
    assert [p["cards"] for p in data["fronts"][1]["points"]] == [48, 32]
    assert {s["label"] for s in data["series"]} == {"rtx4090 (50B tok)", "rtx4090 (100B tok)"}
