"""The declared scenario schema (catalogs/schema.py, issue 22 item 6): every declared key reads back from a TOML
string to its SI value, every declared bound, rule and choice is enforced with its one-line message, and the
declarations cover every key the shipped scenario files use."""

from __future__ import annotations

import re
import tomllib
from dataclasses import fields
from pathlib import Path

import pytest

from tpopt.catalogs import load_catalog
from tpopt.catalogs.scenario import BUILTIN_RL_SCENARIO, BUILTIN_SCENARIO, split_sites
from tpopt.catalogs.schema import (
    CARD_KEYS,
    KEYS,
    STAGE_KEYS,
    TABLES,
    check_keys,
    declared,
    key_table,
    read_table,
)
from tpopt.errors import InputError
from tpopt.models.pipeline import SCHEDULES
from tpopt.models.plan import Task
from tpopt.models.units import (
    DAY,
    GIB,
    HOUR,
    parse_bandwidth,
    parse_bytes,
    parse_count,
    parse_duration,
    parse_flops_rate,
    parse_fraction,
    parse_int,
    parse_number,
)

ROOT = Path(__file__).resolve().parents[1]
CAT = load_catalog()
DENSE = CAT.model("qwen3-8b")
MOE = CAT.model("qwen3-30b-a3b")  # 128 routed experts
TASK = Task(tokens=1e11, seq_len=8192, global_batch=384)
SYSTEMS = {"rtx4090": None, "h100-sxm": None}  # [search] looks names up in the systems
CLASSES = {f"{table}.{f.name}": cls for table, classes in TABLES.items() for cls in classes or () for f in fields(cls)}
CONTEXT = {"CardKeys": CAT, "CheckpointKeys": CAT, "BatchKeys": (DENSE, TASK), "SearchKeys": SYSTEMS,
           "MoeSearchKeys": MOE}
BASE = {"ScheduleKeys": {"deadline": "30d"}, "InputKeys": {"sequences_per_worker_s": 2}}  # what the rules need

# table.key -> (TOML value, the value read in SI units)
SAMPLES = {
    "model.name": ('"qwen3-8b"', "qwen3-8b"),
    "model.config": ('"config.json"', "config.json"),
    "task.tokens": ('"100B"', 1e11),
    "task.seq_len": ("8192", 8192),
    "task.global_batch": ('"384"', 384),
    "task.precision": ('"fp8-mixed"', "fp8-mixed"),
    "task.stages": ('[{ tokens = "1B" }]', [{"tokens": "1B"}]),
    "task.critical_batch": ('"256 sequences"', (256 * 8192, "given")),
    "task.batch_ramp": ('{ start = 32, increment = 32, tokens = "4B" }', (32, 32, 4e9)),
    "schedule.deadline": ('"720h"', 30 * DAY),
    "schedule.reserved": ('"12h"', 12 * HOUR),
    "schedule.confidence": ('"95%"', 0.95),
    "risk.step_sigma": ("0.1", 0.1),
    "risk.slow_factor": ("1.34", 1.34),
    "risk.slow_duration": ('"2h"', 2 * HOUR),
    "risk.slow_per_card_day": ("0.0001", 0.0001),
    "risk.preempt_per_card_day": ("0.001", 0.001),
    "risk.reacquire": ('"30min"', 0.5 * HOUR),
    "hardware.accelerator": ('["rtx4090", "h100-sxm"]', ("rtx4090", "h100-sxm")),
    "hardware.efficiency": ('"40%"', 0.4),
    "hardware.stack": ('"torchtitan"', "torchtitan"),
    "hardware.pools": ('[{accelerator = "h100-sxm", max_cards = 512, owned = true}]',
                       [{"accelerator": "h100-sxm", "max_cards": 512, "owned": True}]),
    "hardware.usable_memory": ('"22GiB"', 22 * GIB),
    "hardware.cards_per_host": ("8", 8),
    "hardware.peak": ('"989TFLOP/s"', 989e12),
    "hardware.nic": ('"25GB/s"', {"nic_bw": 25e9, "nic": "25GB/s"}),
    "hardware.nics_per_host": ("4", 4),
    "hardware.max_nics_per_host": ("8", 8),
    "hardware.card_hour": ("2.5", 2.5),
    "memory.activation_reserve": ('"10GiB"', 10 * GIB),
    "memory.flash_attention": ("false", False),
    "memory.activation_bytes": ("4", 4.0),
    "memory.loss_chunks": ("8", 8),
    "memory.prefetch": ("0", 0),
    "memory.fp8_param_gather": ("true", True),
    "memory.loss": ('"eager"', "eager"),
    "memory.zero_group": ("8", 8),
    "memory.sequence_parallel": ("false", False),
    "memory.dropout": ("true", True),
    "memory.activation_offload_layers": ("40", 40),
    "input.workers": ("4", 4.0),
    "input.sequences_per_worker_s": ("3", 3.0),
    "input.wait": ('"500ms"', 0.5),
    "input.workers_per_host": ("4", 4.0),
    "checkpoint.storage": ('"superpod-good"', CAT.storage_tier("superpod-good")),
    "checkpoint.write_bandwidth": ('"200Gbit/s"', 25e9),
    "checkpoint.job_mtbf": ('{ cards = 1024, interval = "7.9h" }', 1024 * 7.9 * HOUR),
    "checkpoint.card_mtbf": ('"100d"', 100 * DAY),
    "checkpoint.failure_model": ('"poisson"', "poisson"),
    "checkpoint.bytes_per_param": ("16", 16.0),
    "checkpoint.restore": ('"2min"', 120.0),
    "checkpoint.loss_spike_interval": ('"10d"', 10 * DAY),
    "checkpoint.snapshot_copy": ('"1s"', 1.0),
    "checkpoint.save_interval": ('"1800s"', "1800s"),  # read as search.save_interval's default
    "checkpoint.mode": ('"sync"', "sync"),
    "stragglers.sigma": ('"5%"', 0.05),
    "comm.overlap": ("false", False),
    "comm.tp_overlap": ('"async"', (0.0, 1.0)),
    "comm.dp_overlap": ("0.5", 0.5),
    "comm.cp_method": ('"all-to-all"', "all-to-all"),
    "comm.cp_split": ('"contiguous"', "contiguous"),
    "cost.card_hour": ("2", 2.0),
    "cost.nic_hour": ("0.1", 0.1),
    "cost.max_cost": ("5e4", 5e4),
    "search.save_interval": ('["auto", "30min"]', (0.0, 1800.0)),
    "search.save_mode": ('["async"]', ("async",)),
    "search.offload": ('"none, cpu"', ("none", "cpu")),
    "search.schedule": ('["interleaved:3", "zb-h1"]', ("interleaved:3", "zb-h1")),
    "search.virtual_stages": ("[4, 2]", (2, 4)),
    "search.recompute": ('["selective", "full", "attn"]', ("attn", "full")),
    "search.zero_stage": ("[3, 1]", (1, 3)),
    "search.accelerator": ('"h100-sxm"', ("h100-sxm",)),
    "search.max_cards": ('"2K"', 2000),
    "search.tp": ("[8, 2, 2]", (2, 8)),
    "search.pp": ("4", (4,)),
    "search.micro_batch": ('"1, 2"', (1, 2)),
    "search.nics_per_host": ("[1, 8]", (1, 8)),
    "search.dp": ("[16]", (16,)),
    "search.global_batch": ("[512, 256]", (256, 512)),
    "search.cp": ("[1, 2]", (1, 2)),
    "search.sequence_parallel": ("[true, false]", (True, False)),
    "search.memory_budget": ('"8GiB"', 8 * 2**30),
    "search.ep": ("[16, 8]", (8, 16)),
    "search.expert_tp": ('["tp", 2]', (0, 2)),
    "search.capacity_factor": ('["none", 1.25]', (0.0, 1.25)),
    "moe.imbalance": ("1.5", 1.5),
    "moe.hot_experts": ('"25%"', 0.25),
    "moe.max_drop": ('"1%"', 0.01),
    "moe.a2a_overlap": ('"all"', "all"),
    "moe.dispatcher": ('"per-host"', "per-host"),
    "moe.node_limit": ("4", 4),
    "moe.cuda_graphs": ("true", True),
    "moe.fused_grouped_mlp": ("true", True),
    "scenario.name": ('"my-run"', "my-run"),
    "scenario.description": ('"what is trained"', "what is trained"),
    "market.offers": ('"all"', "all"),
    "market.regions": ('["us-east-1"]', ["us-east-1"]),
    "market.as_of": ('"2026-12-01"', "2026-12-01"),
    "market.site_power": ('"150MW"', "150MW"),
    "market.spot_shares": ("[0.5]", [0.5]),
    "market.checkpoint_copies": ("3", 3),
    "market.checkpoint_egress": ("1", 1),
}


def read(dotted: str, toml_body: str):
    """The declaration of ``dotted``'s table read from a TOML table body (plus what its rules need)."""
    cls = CLASSES[dotted]
    table = dict(BASE.get(cls.__name__, {}), **tomllib.loads(toml_body))
    return read_table(cls, table, dotted.split(".")[0] + ".", CONTEXT.get(cls.__name__))


def message(dotted: str, toml_body: str) -> str:
    with pytest.raises(InputError) as exc:
        read(dotted, toml_body)
    return str(exc.value)


def test_samples_cover_every_declared_key():
    assert set(SAMPLES) == {f"{t}.{k}" for t, k, _ in declared()}


@pytest.mark.parametrize("dotted", sorted(SAMPLES))
def test_every_key_round_trips_from_toml(dotted):
    text, expected = SAMPLES[dotted]
    key = dotted.split(".")[1]
    got = getattr(read(dotted, f"{key} = {text}"), key)
    assert got == pytest.approx(expected) if isinstance(expected, float) else got == expected


@pytest.mark.parametrize("dotted", sorted(SAMPLES))
def test_every_key_has_help_and_a_kind(dotted):
    t, k = dotted.split(".")
    (decl,) = [d for tt, kk, d in declared() if (tt, kk) == (t, k)]
    assert decl.help and decl.kind.unit


def test_the_key_table_lists_every_declared_key_once():
    rows = key_table().splitlines()[2:]
    assert [r.split(" | ")[0] for r in rows] == [f"| `{t}.{k}`" for t, k, _ in declared()]
    assert "| `task.tokens` | count (100B, 1.5T) | required |" in key_table()
    assert "| `checkpoint.restore` | duration (30d, 720h, 1800s) | `120s` |" in key_table()


def test_the_step_sigma_help_states_the_default_the_model_takes():
    """[risk] step_sigma's help said "else 0.03", a value no code path takes: silent, the per-operation model
    gives each plan its own sigma and the flat model the card's residual_sigma, else DEFAULT_STEP_SIGMA."""
    from tpopt.models.finish import DEFAULT_STEP_SIGMA

    (decl,) = [d for t, k, d in declared() if (t, k) == ("risk", "step_sigma")]
    stated = [float(x) for x in re.findall(r"\d+\.\d+", decl.help)]
    assert stated == [DEFAULT_STEP_SIGMA], decl.help


def test_defaults_are_read_like_given_values():
    mem = read("memory.prefetch", "")
    assert (mem.flash_attention, mem.activation_bytes, mem.loss_chunks, mem.prefetch) == (True, 2.0, 1, 1)
    ck = read("checkpoint.restore", "")
    assert (ck.write_bandwidth, ck.restore, ck.card_mtbf, ck.snapshot_copy) == (7e9, 120.0, 337 * DAY, 0.5)
    assert read("schedule.reserved", "").reserved == 0.0
    assert read("checkpoint.card_mtbf", 'card_mtbf = "never"').card_mtbf is None


# the unit written after a number to make a quantity of each parser
UNIT = {parse_duration: "s", parse_bytes: "B", parse_bandwidth: "B/s", parse_flops_rate: "FLOP/s", parse_count: "",
        parse_int: "", parse_number: "", parse_fraction: ""}
BOUNDED = [(f"{t}.{k}", d) for t, k, d in declared() if d.kind.parser is not None]


def _literal(x: float, parser) -> str:
    """``x`` in TOML with the parser's unit (a bare number when it has none)."""
    unit = UNIT[parser]
    number = str(int(x)) if float(x).is_integer() and abs(x) < 2**53 else f"{x:g}"
    return f'"{number}{unit}"' if unit else number


def _wrap(decl, literal: str) -> str:
    return f"[{literal}]" if decl.kind.unit.startswith("list of") else literal


def test_every_bounded_key_is_tested():
    assert len(BOUNDED) >= 40


@pytest.mark.parametrize("dotted,decl", BOUNDED, ids=[d for d, _ in BOUNDED])
def test_every_bound_is_enforced_with_its_message(dotted, decl):
    key = dotted.split(".")[1]
    what = decl.label or dotted
    b, parser = decl.kind.bounds, decl.kind.parser
    checked = 0
    if parser is parse_fraction:
        assert message(dotted, f"{key} = {_wrap(decl, '1.5')}") == f"{what}: 1.5 is above 1 (100%)"
        if not b.get("allow_zero", False):
            assert message(dotted, f"{key} = {_wrap(decl, '0')}") == \
                f"{what}: 0 must be a positive fraction such as 40% or 0.4"
        return
    if "minimum" in b:
        below = b["minimum"] - 1
        expect = "must not be negative" if below < 0 else f"must be at least {b['minimum']}"
        assert message(dotted, f"{key} = {_wrap(decl, str(below))}") == f"{what}: {below} {expect}"
        checked += 1
    if b.get("allow_zero", True) is False:
        zero = _literal(0, parser)
        shown = repr(zero.strip('"')) if UNIT[parser] else zero
        assert message(dotted, f"{key} = {_wrap(decl, zero)}") == f"{what}: {shown} must be greater than zero"
        checked += 1
    if "maximum" in b:
        above = _literal(b["maximum"] * 4, parser)
        text = message(dotted, f"{key} = {_wrap(decl, above)}")
        assert text.startswith(f"{what}: ") and " is above the bound of " in text, text
        checked += 1
    negative = _literal(-1, parser)
    if "minimum" not in b:
        shown = negative.strip('"')
        assert message(dotted, f"{key} = {_wrap(decl, negative)}") == \
            f"{what}: {repr(shown) if UNIT[parser] else shown} must not be negative"
        checked += 1
    assert checked


@pytest.mark.parametrize("dotted,body,expected", [
    ("schedule.reserved", 'reserved = "30d"',
     "schedule.reserved must be shorter than the deadline: reserved 30.0 d, deadline 30.0 d (--reserved or "
     "[schedule] reserved sets it)"),
    ("input.workers", "workers = 4\nsequences_per_worker_s = 0",
     "input.sequences_per_worker_s must be positive when workers are given"),
    ("moe.imbalance", "imbalance = 0.5",
     "moe.imbalance is the busiest expert's load over the mean, at least 1 (got 0.5)"),
    ("moe.imbalance", "imbalance = 3", "moe: 50% of the experts at 3 x the mean would take more than every dispatch; "
                                       "lower imbalance or hot_experts"),
    ("search.zero_stage", "zero_stage = [4]", "search.zero_stage values must be 0, 1, 2 or 3"),
    ("hardware.stack", 'stack = "nemo-9"',
     "unknown stack 'nemo-9' (known: megatron-core, megatron-lm-2021, torchtitan, torchtitan-compile, deepspeed, "
     "maxtext, nemo-2403)"),
    ("hardware.accelerator", 'accelerator = ["rtx4090", "rtx4090"]', "hardware.accelerator lists a name twice"),
    ("checkpoint.storage", 'storage = "superpod-good"\nwrite_bandwidth = "7GB/s"',
     "checkpoint: give write_bandwidth or storage, not both"),
    ("checkpoint.card_mtbf", 'card_mtbf = "337d"\njob_mtbf = { cards = 1, interval = "1d" }',
     "checkpoint: give card_mtbf or job_mtbf, not both"),
    ("checkpoint.job_mtbf", 'job_mtbf = "7.9h"', 'checkpoint.job_mtbf must be a table like { cards = 1024, '
                                                 'interval = "7.9h" }'),
    ("checkpoint.job_mtbf", 'job_mtbf = { cards = 0, interval = "7.9h" }', "checkpoint.job_mtbf.cards: 0 must be at "
                                                                           "least 1"),
    ("checkpoint.failure_model", 'failure_model = "weibull"',
     "checkpoint.failure_model must be 'first-order' or 'poisson'"),
    ("task.batch_ramp", "batch_ramp = 32", 'task.batch_ramp must be a table like { start = 32, increment = 32, '
                                           'tokens = "4B" } (sequences, sequences, tokens)'),
    ("task.critical_batch", 'critical_batch = "0 sequences"', "task.critical_batch: '0' must be greater than zero"),
    ("task.precision", 'precision = "fp4"', "unknown precision 'fp4' (known: bf16-mixed, bf16-mixed-fp32-grad, "
                                            "fp8-mixed, mxfp8-mixed, nvfp4-mixed, fp16-mixed, fp16-mixed-fp32-grad)"),
    ("search.save_mode", 'save_mode = ["sync", "lazy"]', "save mode 'lazy' unknown (use sync or async)"),
    ("search.offload", 'offload = "disk"', "offload 'disk' unknown (use none or cpu)"),
    ("search.save_interval", 'save_interval = "often"', "save_interval: cannot read 'often' as a number with a unit"),
    ("search.schedule", 'schedule = "zigzag"',
     f"pipeline schedule 'zigzag' unknown (use one of: {', '.join(SCHEDULES)})"),
    ("search.accelerator", 'accelerator = ["b200"]', "search.accelerator 'b200' is not in hardware.accelerator"),
    ("search.ep", "ep = [3]", "search.ep: 3 does not divide the 128 routed experts of qwen3-30b-a3b"),
    ("search.tp", "tp = []", "search.tp: the list is empty"),
    ("search.tp", "tp = [" + ", ".join(["1"] * 2000) + "]", "search.tp: 2,000 entries, above the bound of 1,024"),
    ("search.sequence_parallel", "sequence_parallel = [1]", "search.sequence_parallel must be true or false"),
    ("memory.flash_attention", "flash_attention = 1", "memory.flash_attention must be true or false"),
    ("comm.cp_method", 'cp_method = "tree"', "comm.cp_method 'tree' unknown (use one of: ring, all-to-all)"),
    ("comm.tp_overlap", 'tp_overlap = "2"', "comm.tp_overlap (true, false, a fraction or \"async\"): '2' is above 1 "
                                           "(100%)"),
    ("moe.a2a_overlap", 'a2a_overlap = "some"', "moe.a2a_overlap 'some' unknown (use one of: auto, none, all)"),
    ("moe.dispatcher", 'dispatcher = "tree"',
     "moe.dispatcher 'tree' unknown (use one of: direct, per-host, all-gather)"),
    ("hardware.nic", 'nic = "fast"', "hardware.nic: cannot read 'fast' as a number with a unit"),
])
def test_rules_choices_and_shapes_have_their_messages(dotted, body, expected):
    assert message(dotted, body) == expected


def test_unknown_tables_and_keys_are_reported_with_the_known_ones():
    with pytest.raises(InputError) as exc:
        check_keys({"memory": {"flash": True}})
    assert str(exc.value) == ("scenario: unknown key 'flash' in [memory] (known: activation_bytes, "
                              "activation_offload_layers, activation_reserve, "
                              "dropout, flash_attention, fp8_param_gather, loss, loss_chunks, "
                              "prefetch, sequence_parallel, zero_group)")
    with pytest.raises(InputError) as exc:
        check_keys({"weather": {}})
    assert str(exc.value).startswith("scenario: unknown table [weather] (known: checkpoint, comm, cost, hardware, ")
    with pytest.raises(InputError) as exc:
        check_keys({"hardware": {"rtx4090": {"speed": 1}}})
    assert str(exc.value) == "scenario: unknown key(s) ['speed'] in [hardware.rtx4090]"


def _scenario_files():
    return sorted(ROOT.glob("examples/*.toml")) + [BUILTIN_SCENARIO, BUILTIN_RL_SCENARIO]


def _used_keys(raw: dict):
    """(where, key, allowed) for every key a scenario file uses."""
    for table, body in raw.items():
        yield "", table, set(KEYS)
        if KEYS.get(table) is None or not isinstance(body, dict):
            continue
        for key, value in body.items():
            if table == "hardware" and isinstance(value, dict):
                yield from ((f"hardware.{key}", k, set(CARD_KEYS)) for k in value)
                continue
            yield table, key, KEYS[table]
            if (table, key) == ("task", "stages"):
                for stage in value:
                    yield from (("task.stages", k, STAGE_KEYS) for k in stage)
                    yield from (("task.stages.search", k, KEYS["search"]) for k in stage.get("search", {}))


@pytest.mark.parametrize("path", _scenario_files(), ids=lambda p: p.name)
def test_declarations_cover_every_key_the_shipped_files_use(path):
    raw, _ = split_sites(tomllib.loads(path.read_text()))  # [[sites]] / [wan]: their own keys (test_sites.py)
    used = list(_used_keys(raw))
    assert len(used) > 10
    missing = [f"{where}.{key}" for where, key, allowed in used if key not in allowed]
    assert not missing, missing
