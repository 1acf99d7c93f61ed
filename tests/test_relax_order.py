"""The relaxations share one work budget (:data:`tpopt.optimizer.explain.relax.RELAX_WORK`), and the inputs that
enter a family of the conflict are asked first (:func:`tpopt.optimizer.explain.relax.asking_order`).

A new user's trial: on a tiny space (2 cards) the accelerator search (every catalog card) and the max_cards
search took most of the 10,000 steps, and inputs that ARE in the conflict (input rate, reserved time) ended
"undecided" while inputs outside it were answered. The invariant: an input of the conflict is never left
undecided while an input outside it was answered, whatever the budget; and the input that fixes the conflict
is answered on a budget that covers the conflict's own inputs.

The scenario: Qwen3-0.6B, 200B tokens of 8,192-token sequences, at most 2 H100 cards, 4 input workers of 2
sequences/s, 30 days with 5 reserved. The input pipeline delivers 4 x 2 x 8,192 = 65,536 tokens/s, so 200B tokens
take 200e9 / 65,536 = 3.05e6 s = 35.3 d > 25 d: the input pipeline and the deadline conflict (the compute, 6 x
0.6e9 x 200e9 = 7.2e20 FLOP on two cards, is not what binds)."""

import pytest

from tests.test_clock import Readings
from tpopt.catalogs.scenario import load_scenario
from tpopt.optimizer.explain import explain_request, relax
from tpopt.optimizer.explain.inputs import PARAMS
from tpopt.optimizer.limits import Clock
from tpopt.optimizer.result import Request

LIMIT = 1e9  # seconds: only the counted budget stops a relaxation

SCENARIO = """
[model]
name = "qwen3-0.6b"
[task]
tokens = "200B"
seq_len = 8192
global_batch = 384
precision = "bf16-mixed"
[schedule]
deadline = "30d"
reserved = "5d"
[hardware]
accelerator = "h100-sxm"
cards_per_host = 2
[memory]
activation_reserve = "10GiB"
[input]
workers = 4
sequences_per_worker_s = 2
wait = "0.5s"
[checkpoint]
write_bandwidth = "7GB/s"
restore = "120s"
save_interval = "1800s"
mode = "sync"
[search]
max_cards = 2
"""


@pytest.fixture(scope="module")
def input_bound(tmp_path_factory):
    path = tmp_path_factory.mktemp("order") / "input-bound.toml"
    path.write_text(SCENARIO)
    return load_scenario(path)


def _explain(sc, budget, monkeypatch):
    monkeypatch.setattr(relax, "RELAX_WORK", budget)
    return explain_request(sc, "cpsat", Request(time_limit=LIMIT, clock=Clock(LIMIT, now=Readings())))


def test_the_input_pipeline_and_the_deadline_conflict(input_bound):
    assert 200e9 / (4 * 2 * 8192) / 86400 > 30 - 5  # the derivation above: 35.3 d of input against 25 d
    out = explain_request(input_bound, "cpsat", Request(time_limit=LIMIT, clock=Clock(LIMIT, now=Readings())))
    assert out["status"] == "infeasible"
    assert set(out["conflict"]) == {"input.throughput", "deadline.finish"}
    rate = next(r for r in out["relaxations"] if r["parameter"] == "input_rate")
    assert rate["helps"] is True and rate["required"] > 2


@pytest.mark.parametrize("budget", [300, 1000, 2000, 3000])
def test_no_input_of_the_conflict_is_undecided_while_one_outside_it_was_answered(input_bound, budget, monkeypatch):
    """Before: asked in the fixed order (budget, card price, accelerator, deadline, max_cards, ...), the
    accelerator's search over every catalog card and max_cards' took the budget and the input rate was left
    undecided while both were answered."""
    out = _explain(input_bound, budget, monkeypatch)
    conflict = set(out["conflict"])
    rows = out["relaxations"]
    inside = [r for r in rows if conflict & set(PARAMS[r["parameter"]].affects)]
    outside = [r for r in rows if not conflict & set(PARAMS[r["parameter"]].affects)]
    assert inside and outside
    if any(r["helps"] is None for r in inside):
        assert all(r["helps"] is None for r in outside), [(r["parameter"], r["helps"]) for r in rows]
    names = [r["parameter"] for r in rows]  # asked in asking_order, listed in the fixed order
    assert names == [n for n in relax.RELAXATIONS if n in names]


def test_the_fixing_input_is_answered_on_a_budget_the_fixed_order_spent_elsewhere(input_bound, monkeypatch):
    """1,000 steps: in the fixed order the accelerator search alone took more than that before the input rate
    was reached; asked first among the conflict's inputs, the input rate is answered, and its answer is the
    unlimited one (counted work: the same bytes whatever the clock says)."""
    full = {r["parameter"]: r for r in _explain(input_bound, 10_000, monkeypatch)["relaxations"]}
    out = {r["parameter"]: r for r in _explain(input_bound, 1000, monkeypatch)["relaxations"]}
    assert out["input_rate"]["helps"] is True
    assert out["input_rate"]["required"] == full["input_rate"]["required"]
    assert out["accelerator"]["helps"] is None  # the broad search waits for the conflict's inputs


def test_asking_order_keeps_the_fixed_order_within_each_group():
    names = list(relax.RELAXATIONS)
    assert relax.asking_order(names, None) == names
    order = relax.asking_order(names, ["input.throughput"])
    # input.throughput is entered by input_rate alone (0 families outside), nics_per_host, nic_bandwidth,
    # efficiency (+ deadline.finish, budget.cost: 2 outside) and global_batch (+ batch.divisibility,
    # layout.schedule_shape, deadline.finish, budget.cost: 4 outside)
    assert order[:5] == ["input_rate", "nics_per_host", "nic_bandwidth", "efficiency", "global_batch"]
    assert order[5] == "accelerator" and sorted(order) == sorted(names)
    both = relax.asking_order(names, ["input.throughput", "deadline.finish"])
    assert both[:4] == ["input_rate", "deadline", "tokens", "reserved"]  # 0, then 1 family outside each
