"""Every bad-input class is clean: exit 2, one line on stderr naming the problem, no traceback, nothing on
stdout and nothing written (issue 17 item 2). One row per class; the row's id says what it is.

Rows run in-process through the console entry point (``tpopt.cli.main:main``), so click's own usage
errors take the same path as in a real process. Scenario rows edit the chapter's design case by
replacing one line (or appending to a table), so each row changes exactly one thing.
"""

import os
import sys
from pathlib import Path

import pytest

from tpopt.cli.main import main

DESIGN_LINES = {  # lines of examples/design-case.toml that rows replace
    "tokens": 'tokens = "100B"          # effective tokens (padding excluded)',
    "seq": "seq_len = 8192",
    "batch": "global_batch = 384       # sequences per optimizer step",
    "precision": 'precision = "bf16-mixed" # 16 B/param of persistent state',
    "deadline": 'deadline = "30d"',
    "reserved": 'reserved = "5d"          # start-up, evaluation and planned pauses',
    "acc": 'accelerator = "rtx4090"',
    "usable": 'usable_memory = "22GiB"  # 24 GB = 22.35 GiB, less runtime reserve',
    "eff": "efficiency = 0.40        # compute efficiency (Llama 3 reports 38-43 % BF16 MFU)",
    "cph": "cards_per_host = 8",
    "reserve": 'activation_reserve = "10GiB"   # activations + gathered module params + workspace',
    "workers": "workers = 4",
    "rate": "sequences_per_worker_s = 2",
    "wait": 'wait = "0.5s"            # average input wait per step that prefetch does not hide',
    "bw": 'write_bandwidth = "7GB/s"  # DGX SuperPOD \'Good\' tier, one SU',
    "restore": 'restore = "120s"',
    "mtbf": 'job_mtbf = { cards = 1024, interval = "7.9h" }  # Meta: 1024-card jobs, one interruption per 7.9 h '
            '(= 337 d per card)',
    "interval": 'save_interval = "1800s"',
    "zero": "zero_stage = [3]",
    "tp": "tp = [1]",
    "pp": "pp = [1]",
    "mb": "micro_batch = [1]",
    "maxcards": "max_cards = 1024",
    "model": 'name = "qwen3-8b"',
}

# (id, key of the line to replace (or "+table" to append to [table]), new text, needle in the error)
SCENARIO_ROWS = [
    ("tokens-300-digits", "tokens", "tokens = " + "9" * 300, "task.tokens"),
    ("tokens-400-digit-int", "tokens", "tokens = " + "9" * 400, "too large"),
    ("tokens-inf", "tokens", "tokens = inf", "not a finite"),
    ("tokens-nan", "tokens", "tokens = nan", "not a finite"),
    ("tokens-negative", "tokens", 'tokens = "-5B"', "must not be negative"),
    ("tokens-zero", "tokens", "tokens = 0", "greater than zero"),
    ("tokens-above-bound", "tokens", 'tokens = "5000T"', "bound of 1e+15 (1,000T)"),
    ("tokens-bool", "tokens", "tokens = true", "expected a quantity"),
    ("tokens-bytes-unit", "tokens", 'tokens = "100GB"', "unknown unit"),
    ("tokens-long-string", "tokens", 'tokens = "' + "1" * 500 + '"', "too long"),
    ("tokens-array", "tokens", "tokens = [1, 2]", "expected a quantity"),
    ("seq-zero", "seq", "seq_len = 0", "at least 1"),
    ("seq-fraction", "seq", "seq_len = 8192.5", "whole number"),
    ("seq-above-bound", "seq", "seq_len = 1e9", "bound of"),
    ("batch-300-digits", "batch", "global_batch = " + "3" * 300, "global_batch"),
    ("batch-float-huge", "batch", "global_batch = 1e300", "bound of"),
    ("batch-above-bound", "batch", "global_batch = 2097152", "bound of 1,048,576"),
    ("batch-zero", "batch", "global_batch = 0", "at least 1"),
    ("batch-negative", "batch", "global_batch = -384", "must not be negative"),
    ("batch-string", "batch", 'global_batch = "many"', "cannot read"),
    ("precision-unknown", "precision", 'precision = "fp4-magic"', "fp4-magic"),
    ("deadline-1e300d", "deadline", 'deadline = "1e300d"', "bound of 365,000 d"),
    ("deadline-1e400d", "deadline", 'deadline = "1e400d"', "not a finite"),
    ("deadline-no-unit", "deadline", "deadline = 30", "needs a unit"),
    ("deadline-zero", "deadline", 'deadline = "0d"', "greater than zero"),
    ("deadline-negative", "deadline", 'deadline = "-30d"', "must not be negative"),
    ("deadline-unknown-unit", "deadline", 'deadline = "30x"', "unknown unit"),
    ("deadline-nan", "deadline", 'deadline = "nan d"', "cannot read"),
    ("reserved-longer-than-deadline", "reserved", 'reserved = "31d"', "shorter than the deadline"),
    ("reserved-above-bound", "reserved", 'reserved = "1e9d"', "bound of"),
    ("accelerator-unknown", "acc", 'accelerator = "tpu-v9"', "tpu-v9"),
    ("accelerator-twice", "acc", 'accelerator = ["rtx4090", "rtx4090"]', "twice"),
    ("accelerator-empty-list", "acc", "accelerator = []", "empty"),
    ("usable-1e10GiB", "usable", 'usable_memory = "1e10GiB"', "bound of 16 TiB"),
    ("usable-zero", "usable", 'usable_memory = "0GiB"', "greater than zero"),
    ("usable-bits", "usable", 'usable_memory = "22Gb"', "unknown unit"),
    ("usable-no-unit", "usable", "usable_memory = 22", "needs a unit"),
    ("efficiency-above-one", "eff", "efficiency = 1.4", "efficiency"),
    ("efficiency-zero", "eff", "efficiency = 0", "efficiency"),
    ("efficiency-nan", "eff", "efficiency = nan", "efficiency"),
    ("cards-per-host-zero", "cph", "cards_per_host = 0", "at least 1"),
    ("cards-per-host-above-bound", "cph", "cards_per_host = 5000", "bound of 1,024"),
    ("activation-reserve-negative", "reserve", 'activation_reserve = "-1GiB"', "must not be negative"),
    ("activation-reserve-above-bound", "reserve", 'activation_reserve = "1PB"', "bound of 16 TiB"),
    ("workers-negative", "workers", "workers = -4", "must not be negative"),
    ("workers-inf", "workers", "workers = inf", "not a finite"),
    ("worker-rate-zero", "rate", "sequences_per_worker_s = 0", "must be positive"),
    ("input-wait-no-unit", "wait", "wait = 0.5", "needs a unit"),
    ("write-bandwidth-zero", "bw", 'write_bandwidth = "0GB/s"', "greater than zero"),
    ("write-bandwidth-above-bound", "bw", 'write_bandwidth = "1e20GB/s"', "bound of 1 PB/s"),
    ("restore-unknown-unit", "restore", 'restore = "2 fortnights"', "unknown unit"),
    ("job-mtbf-malformed", "mtbf", 'job_mtbf = "7.9h"', "job_mtbf must be a table"),
    ("job-mtbf-cards-zero", "mtbf", 'job_mtbf = { cards = 0, interval = "7.9h" }', "at least 1"),
    ("job-mtbf-cards-huge", "mtbf", 'job_mtbf = { cards = 1e30, interval = "7.9h" }', "bound of"),
    ("job-mtbf-and-card-mtbf", "mtbf", 'job_mtbf = { cards = 1024, interval = "7.9h" }\ncard_mtbf = "337d"',
     "not both"),
    ("card-mtbf-zero", "mtbf", 'card_mtbf = "0d"', "greater than zero"),
    ("card-mtbf-above-bound", "mtbf", 'card_mtbf = "1e9d"', "bound of"),
    ("save-interval-zero", "interval", 'save_interval = "0s"', "greater than zero"),
    ("save-interval-inf", "interval", "save_interval = inf", "needs a unit"),
    ("save-interval-huge", "interval", 'save_interval = "1e300s"', "bound of"),
    ("save-interval-word", "interval", 'save_interval = "often"', "cannot read"),
    ("zero-stage-four", "zero", "zero_stage = [4]", "0, 1, 2 or 3"),
    ("zero-stage-negative", "zero", "zero_stage = [-1]", "must not be negative"),
    ("tp-empty", "tp", "tp = []", "empty"),
    ("tp-zero", "tp", "tp = [0]", "at least 1"),
    ("tp-huge", "tp", "tp = [1e300]", "bound of"),
    ("tp-long-list", "tp", "tp = [" + ", ".join(["1"] * 2000) + "]", "bound of 1,024"),
    ("pp-fraction", "pp", "pp = [1.5]", "whole number"),
    ("micro-batch-string", "mb", 'micro_batch = ["one"]', "cannot read"),
    ("max-cards-zero", "maxcards", "max_cards = 0", "at least 1"),
    ("max-cards-huge", "maxcards", "max_cards = 1e30", "bound of"),
    ("model-unknown", "model", 'name = "qwen9-1t"', "qwen9-1t"),
    ("model-config-missing", "model", 'config = "no-such-config.json"', "no-such-config.json"),
    ("schedule-unknown", "+search", 'schedule = ["zigzag"]', "zigzag"),
    ("offload-unknown", "+search", 'offload = ["disk"]', "disk"),
    ("save-mode-unknown", "+search", 'save_mode = ["lazy"]', "lazy"),
    ("recompute-unknown", "+search", 'recompute = ["everything"]', "everything"),
    ("search-accelerator-not-in-hardware", "+search", 'accelerator = ["h100-sxm"]', "not in hardware.accelerator"),
    ("search-unknown-key", "+search", "tq = [1]", "unknown key 'tq'"),
    ("search-nics-zero", "+search", "nics_per_host = [0]", "at least 1"),
    ("search-dp-zero", "+search", "dp = [0]", "at least 1"),
    ("storage-and-bandwidth", "+checkpoint", 'storage = "nvme"', "not both"),
    ("failure-model-unknown", "+checkpoint", 'failure_model = "weibull"', "failure_model"),
    ("checkpoint-unknown-key", "+checkpoint", 'interval = "1h"', "unknown key 'interval'"),
    ("bytes-per-param-zero", "+checkpoint", "bytes_per_param = 0", "greater than zero"),
    ("loss-spike-zero", "+checkpoint", 'loss_spike_interval = "0h"', "greater than zero"),
    ("snapshot-copy-negative", "+checkpoint", 'snapshot_copy = "-1s"', "must not be negative"),
    ("sigma-above-one", "+stragglers", "sigma = 2", "above 1"),
    ("overlap-not-bool", "+comm", 'overlap = "yes"', "true or false"),
    ("flash-attention-not-bool", "+memory", "flash_attention = 1", "true or false"),
    ("loss-chunks-zero", "+memory", "loss_chunks = 0", "at least 1"),
    ("activation-bytes-zero", "+memory", "activation_bytes = 0", "greater than zero"),
    ("max-cost-negative", "+cost", "max_cost = -5", "must not be negative"),
    ("max-cost-inf", "+cost", "max_cost = inf", "not a finite"),
    ("card-hour-word", "+cost", 'card_hour = "cheap"', "cannot read"),
    ("nic-hour-above-bound", "+cost", "nic_hour = 1e300", "bound of"),
    ("hardware-peak-zero", "+hardware", 'peak = "0TFLOP/s"', "greater than zero"),
    ("hardware-nic-word", "+hardware", 'nic = "fast"', "cannot read"),
    ("hardware-nics-per-host-zero", "+hardware", "nics_per_host = 0", "at least 1"),
    ("batch-ramp-start-above-batch", "batch", 'global_batch = 384\nbatch_ramp = { start = 512, increment = 32, '
     'tokens = "4B" }', "the ramp starts at 512 sequences, above the batch 384"),
    ("batch-ramp-longer-than-run", "batch", 'global_batch = 384\nbatch_ramp = { start = 32, increment = 32, '
     'tokens = "400B" }', "the ramp (400B tokens) is longer than the run (task.tokens = 100B)"),
    ("hardware-unknown-card-table", "+hardware", "[hardware.tpu-v9]\nusable_memory = \"1GiB\"", "tpu-v9"),
    ("unknown-table", "+scenario", "[weather]\nrain = 1", "unknown table [weather]"),
]

# whole-file rows: (id, file bytes (None: the path is special), needle)
FILE_ROWS = [
    ("file-not-utf8", b"[model]\nname = \"qwen3-8b\"\n# \xff\xfe\n", "is not UTF-8 text (byte 0xff at offset 28)"),
    ("file-malformed", b"[task\ntokens = 1", "malformed TOML"),
    ("file-empty", b"", "missing required table"),
    ("file-binary", bytes(range(256)) * 4, "is not UTF-8 text (byte 0x80 at offset 128)"),
    ("file-too-large", b"# " + b"x" * (1024 * 1024 + 10) + b"\n", "larger than the bound of 1 MiB"),
    ("file-task-not-table", b"task = 5\n", "must be a table"),
    ("file-missing-task", None, "missing required table [task]"),
]

BASE_SOLVE = ["solve", "--no-analysis"]

# command-line rows: (id, argv after `tpopt` with {S} = design case, {D} = a directory, {T} = tmp dir, needle)
CLI_ROWS = [
    # the shared scenario overrides
    ("deadline-30x", ["evaluate", "--cards", "48", "--deadline", "30x"], "unknown unit 'x'"),
    ("deadline-1e300d", BASE_SOLVE + ["--deadline", "1e300d"], "bound of 365,000 d"),
    ("deadline-inf", BASE_SOLVE + ["--deadline", "inf d"], "cannot read"),
    ("deadline-empty", BASE_SOLVE + ["--deadline", ""], "cannot read"),
    ("deadline-bare-number", BASE_SOLVE + ["--deadline", "30"], "needs a unit"),
    ("deadline-unit-only", BASE_SOLVE + ["--deadline", "d"], "cannot read"),
    ("deadline-negative", BASE_SOLVE + ["--deadline", "-5d"], "must not be negative"),
    ("reserved-negative", BASE_SOLVE + ["--reserved", "-1d"], "must not be negative"),
    ("reserved-over-deadline", BASE_SOLVE + ["--reserved", "40d"], "shorter than the deadline"),
    ("tokens-20000T", BASE_SOLVE + ["--tokens", "20000T"], "bound of 1e+15 (1,000T)"),
    ("tokens-5000T", BASE_SOLVE + ["--tokens", "5000T"], "bound of 1e+15 (1,000T)"),
    ("tokens-negative", BASE_SOLVE + ["--tokens", "-100B"], "must not be negative"),
    ("tokens-1e400", BASE_SOLVE + ["--tokens", "1e400"], "not a finite"),
    ("tokens-nan", BASE_SOLVE + ["--tokens", "nan"], "cannot read"),
    ("tokens-unknown-suffix", BASE_SOLVE + ["--tokens", "100X"], "unknown unit"),
    ("efficiency-140", BASE_SOLVE + ["--efficiency", "140%"], "efficiency"),
    ("efficiency-negative", BASE_SOLVE + ["--efficiency", "-0.1"], "efficiency"),
    ("efficiency-word", BASE_SOLVE + ["--efficiency", "high"], "cannot read"),
    ("hw-unknown", BASE_SOLVE + ["--hw", "tpu-v9"], "unknown accelerator 'tpu-v9'"),
    ("hw-twice", BASE_SOLVE + ["--hw", "rtx4090,rtx4090"], "twice"),
    ("max-cards-zero", BASE_SOLVE + ["--max-cards", "0"], "at least 1"),
    ("max-cards-fraction", BASE_SOLVE + ["--max-cards", "1.5"], "whole number"),
    ("max-cards-huge", BASE_SOLVE + ["--max-cards", "1e30"], "bound of"),
    ("usable-memory-1e10GiB", BASE_SOLVE + ["--usable-memory", "1e10GiB"], "bound of 16 TiB"),
    ("usable-memory-negative", BASE_SOLVE + ["--usable-memory", "-1GiB"], "must not be negative"),
    ("usable-memory-bits", BASE_SOLVE + ["--usable-memory", "22Gb"], "unknown unit"),
    ("catalog-dir-missing", BASE_SOLVE + ["--catalog", "{T}/no-such-dir"], "no-such-dir"),
    # solver options
    ("time-limit-nan", BASE_SOLVE + ["--time-limit", "nan"], "--time-limit"),
    ("time-limit-inf", BASE_SOLVE + ["--time-limit", "inf"], "--time-limit"),
    ("time-limit-zero", BASE_SOLVE + ["--time-limit", "0"], "--time-limit"),
    ("time-limit-negative", BASE_SOLVE + ["--time-limit", "-1"], "--time-limit"),
    ("time-limit-a-year", BASE_SOLVE + ["--time-limit", "3e7"], "7 days"),
    ("time-limit-word", BASE_SOLVE + ["--time-limit", "soon"], "time-limit"),
    ("time-limit-unknown-unit", BASE_SOLVE + ["--time-limit", "5x"], "unknown unit"),
    ("time-limit-ten-days", BASE_SOLVE + ["--time-limit", "10d"], "7 days"),
    ("seed-2^40", BASE_SOLVE + ["--seed", "1099511627776"], "--seed"),
    ("seed-negative", BASE_SOLVE + ["--seed", "-1"], "--seed"),
    ("workers-100000", BASE_SOLVE + ["--workers", "100000"], "--workers"),
    ("workers-zero", BASE_SOLVE + ["--workers", "0"], "--workers"),
    ("top-zero", BASE_SOLVE + ["--top", "0"], "--top"),
    ("top-huge", BASE_SOLVE + ["--top", "100000"], "--top"),
    ("solver-unknown", BASE_SOLVE + ["--solver", "gurobi"], "gurobi"),
    ("method-unknown", BASE_SOLVE + ["--method", "magic"], "magic"),
    ("objective-unknown", BASE_SOLVE + ["--objective", "joy"], "joy"),
    ("max-cost-negative", BASE_SOLVE + ["--max-cost", "-5"], "must not be negative"),
    ("max-cost-word", BASE_SOLVE + ["--max-cost", "cheap"], "cannot read"),
    ("scenario-directory", ["solve", "--scenario", "{D}"], "directory"),
    ("scenario-dev-zero", ["solve", "--scenario", "/dev/zero"], "is a device, not a regular file"),
    ("scenario-missing", ["solve", "--scenario", "{T}/none.toml"], "not found"),
    ("rl-time-limit-nan", ["rl", "--scenario", "{R}", "--time-limit", "nan"], "--time-limit"),
    ("rl-time-limit-negative", ["rl", "--scenario", "{R}", "--time-limit", "-5"], "--time-limit"),
    # explain and evaluate plan flags
    ("explain-plan-flag-without-cards", ["explain", "--zero", "3"], "give --cards"),
    ("evaluate-cards-not-multiple", ["evaluate", "--cards", "50", "--tp", "4"], "multiple of tp x pp"),
    ("evaluate-cards-word", ["evaluate", "--cards", "many"], "many"),
    ("evaluate-zero-stage-5", ["evaluate", "--cards", "48", "--zero", "5"], "ZeRO"),
    ("evaluate-save-interval-zero", ["evaluate", "--cards", "48", "--save-interval", "0s"], "greater than zero"),
    ("evaluate-save-interval-word", ["evaluate", "--cards", "48", "--save-interval", "often"], "cannot read"),
    ("evaluate-recompute-unknown", ["evaluate", "--cards", "48", "--recompute", "everything"], "everything"),
    ("evaluate-offload-unknown", ["evaluate", "--cards", "48", "--offload", "disk"], "disk"),
    # pipeline
    ("pipeline-1e6-shape", ["pipeline", "--schedule", "1f1b", "-p", "1000000", "-m", "1000000", "--forward", "10ms",
                            "--backward", "20ms"], "bound of 4,096"),
    ("pipeline-slots", ["pipeline", "--schedule", "1f1b", "-p", "4000", "-m", "16000", "--forward", "10ms",
                        "--backward", "20ms"], "bound of 262,144"),
    ("pipeline-interleaved-slots", ["pipeline", "--schedule", "interleaved", "-p", "512", "-m", "512", "-v", "4",
                                    "--forward", "10ms", "--backward", "20ms"], "-p x -m x -v"),
    ("pipeline-m-huge", ["pipeline", "--schedule", "1f1b", "-p", "4", "-m", "1e9", "--forward", "10ms",
                         "--backward", "20ms"], "bound of 65,536"),
    ("pipeline-v-huge", ["pipeline", "--schedule", "interleaved", "-p", "4", "-m", "8", "-v", "1000",
                         "--forward", "10ms", "--backward", "20ms"], "bound of 64"),
    ("pipeline-p-zero", ["pipeline", "--schedule", "1f1b", "-p", "0", "-m", "8", "--forward", "10ms",
                         "--backward", "20ms"], "at least 1"),
    ("pipeline-m-word", ["pipeline", "--schedule", "1f1b", "-p", "4", "-m", "eight", "--forward", "10ms",
                         "--backward", "20ms"], "cannot read"),
    ("pipeline-schedule-unknown", ["pipeline", "--schedule", "zigzag", "-p", "4", "-m", "8", "--forward", "10ms",
                                   "--backward", "20ms"], "zigzag"),
    ("pipeline-forward-unit", ["pipeline", "--schedule", "1f1b", "-p", "4", "-m", "8", "--forward", "10x",
                               "--backward", "20ms"], "unknown unit"),
    ("pipeline-forward-count", ["pipeline", "--schedule", "1f1b", "-p", "4", "-m", "8", "--forward", "10ms,20ms",
                                "--backward", "20ms"], "one per stage"),
    ("pipeline-backward-missing", ["pipeline", "--schedule", "1f1b", "-p", "4", "-m", "8", "--forward", "10ms"],
     "--backward is required"),
    ("pipeline-weight-above-backward", ["pipeline", "--schedule", "zb-h1", "-p", "4", "-m", "8", "--forward", "10ms",
                                       "--backward", "20ms", "--backward-weight", "30ms"], "cannot exceed"),
    ("pipeline-split-and-weight", ["pipeline", "--schedule", "zb-h1", "-p", "4", "-m", "8", "--forward", "10ms",
                                   "--backward", "20ms", "--backward-weight", "5ms", "--split-backward"], "not both"),
    ("pipeline-layers-not-interleaved", ["pipeline", "--schedule", "1f1b", "-p", "4", "-m", "8", "--forward", "10ms",
                                         "--backward", "20ms", "--layers", "32"], "interleaved only"),
    ("pipeline-transfer-nan", ["pipeline", "--schedule", "1f1b", "-p", "4", "-m", "8", "--forward", "10ms",
                               "--backward", "20ms", "--transfer", "nan ms"], "cannot read"),
    ("pipeline-activation-negative", ["pipeline", "--schedule", "1f1b", "-p", "4", "-m", "8", "--forward", "10ms",
                                      "--backward", "20ms", "--activation", "-1MiB"], "must not be negative"),
    ("pipeline-plot-directory", ["pipeline", "--schedule", "1f1b", "-p", "4", "-m", "8", "--forward", "10ms",
                                 "--backward", "20ms", "--plot", "{D}"], "is a directory"),
    ("pipeline-plot-extension", ["pipeline", "--schedule", "1f1b", "-p", "4", "-m", "8", "--forward", "10ms",
                                 "--backward", "20ms", "--plot", "{T}/t.txt"], ".svg or .png"),
    ("pipeline-plot-no-folder", ["pipeline", "--schedule", "1f1b", "-p", "4", "-m", "8", "--forward", "10ms",
                                 "--backward", "20ms", "--plot", "{T}/nofolder/t.svg"], "does not exist"),
    # checkpoint and stragglers
    ("checkpoint-cards-zero", ["checkpoint", "--cards", "0"], "at least 1"),
    ("checkpoint-cards-word", ["checkpoint", "--cards", "many"], "cannot read"),
    ("checkpoint-plot-directory", ["checkpoint", "--cards", "1024", "--plot", "{D}"], "is a directory"),
    ("checkpoint-restore-negative", ["checkpoint", "--cards", "1024", "--restore", "-1s"], "must not be negative"),
    ("checkpoint-write-bandwidth-zero", ["checkpoint", "--cards", "1024", "--write-bandwidth", "0GB/s"],
     "greater than zero"),
    ("stragglers-cards-zero", ["stragglers", "--cards", "0", "--sigma", "5%"], "at least 1"),
    ("stragglers-sigma-negative", ["stragglers", "--cards", "48", "--sigma", "-5%"], "sigma"),
    ("stragglers-sigma-word", ["stragglers", "--cards", "48", "--sigma", "some"], "cannot read"),
    ("stragglers-sigma-above-mu", ["stragglers", "--cards", "48", "--sigma", "200%"], "above 1"),
    ("stragglers-sigma-duration-above-mu", ["stragglers", "--cards", "48", "--mu", "10s", "--sigma", "20s"],
     "above --mu"),
    ("stragglers-slow-k-negative", ["stragglers", "--cards", "48", "--sigma", "5%", "--slow-k", "-3"],
     "--slow-k: '-3' must not be negative"),
    ("memory-budget-zero", BASE_SOLVE + ["--memory-budget", "0GiB"], "greater than zero"),
    ("memory-budget-below-the-interpreter", BASE_SOLVE + ["--memory-budget", "1MiB"],
     "the memory budget of 1.0 MiB ([search] memory_budget / --memory-budget) is below the 256.0 MiB"),
    ("export-unwritable-folder", BASE_SOLVE + ["--export", "/proc/plan.lp"], "cannot write in folder '/proc'"),
    # the command line itself
    ("catalog-unknown-kind", ["catalog", "widgets"], "widgets"),
    ("unknown-command", ["nosuchcmd"], "nosuchcmd"),
    ("unknown-option", ["solve", "--scenario", "{S}", "--speed", "max"], "--speed"),
]


RUNS_HEADER = "run,model,accelerator,seq_len,global_batch,tp,pp,cards,micro_batch,recompute,zero_stage,iteration_s\n"
RUNS_ROW = "r1,qwen3-8b,h100-sxm,4096,64,1,1,8,1,full,1,9.0\n"
# (id, runs CSV text, needle): `tpopt calibrate --runs FILE --out DIR` (issues 23 and 24)
CALIBRATE_ROWS = [
    ("calibrate-cards-zero", RUNS_HEADER + RUNS_ROW.replace(",8,1,full,", ",0,1,full,"),
     "cards = '0' must be at least 1"),
    ("calibrate-header-only", RUNS_HEADER, "a header and no runs"),
    ("calibrate-1ns-step", RUNS_HEADER + RUNS_ROW.replace(",9.0", ",1e-9"),
     "gemm_efficiency = 1, its physical ceiling"),
    ("calibrate-plan-does-not-fit", RUNS_HEADER + RUNS_ROW.replace(",1,full,1,", ",4,none,1,"),
     "does not fit in memory (peak per-card memory <= usable memory: 126.7 GiB against 74.0 GiB)"),
    ("calibrate-step-inf", RUNS_HEADER + RUNS_ROW.replace(",9.0", ",inf"), "positive finite"),
]


def test_calibrate_measure_without_torch_or_gpu(tmp_path, capsys, monkeypatch):
    # the suite never has PyTorch with a GPU: --measure is one line naming what it needs, exit 2
    _assert_clean(*_run(["calibrate", "--measure", "--out", str(tmp_path / "out")], capsys, monkeypatch),
                  "tpopt calibrate --measure needs")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("text,needle", [r[1:] for r in CALIBRATE_ROWS], ids=[r[0] for r in CALIBRATE_ROWS])
def test_bad_calibrate_runs(tmp_path, capsys, monkeypatch, text, needle):
    (tmp_path / "runs.csv").write_text(text)
    before = sorted(tmp_path.rglob("*"))
    _assert_clean(*_run(["calibrate", "--runs", str(tmp_path / "runs.csv"), "--out", str(tmp_path / "out")],
                        capsys, monkeypatch), needle)
    assert sorted(tmp_path.rglob("*")) == before  # nothing written


def _run(argv, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["tpopt", *argv])
    with pytest.raises(SystemExit) as exc:
        main()
    out, err = capsys.readouterr()
    return exc.value.code, out, err


def _assert_clean(code, out, err, needle):
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2, (code, out, err)
    assert "Traceback" not in err and out == "", (out, err)
    assert len(lines) == 1 and lines[0].startswith("tpopt: error:"), err
    assert needle in lines[0], lines[0]


def _scenario_text(design_path, key, new):
    text = design_path.read_text()
    if key.startswith("+"):
        table = key[1:]
        if new.startswith("["):  # a new table of its own
            return text + "\n" + new + "\n"
        head = f"[{table}]"
        if head in text:
            return text.replace(head + "\n", head + "\n" + new + "\n", 1)
        return text + f"\n{head}\n{new}\n"
    old = DESIGN_LINES[key]
    assert old in text, old
    return text.replace(old, new, 1)


@pytest.mark.parametrize("key,new,needle", [r[1:] for r in SCENARIO_ROWS], ids=[r[0] for r in SCENARIO_ROWS])
def test_bad_scenario(tmp_path, design_path, capsys, monkeypatch, key, new, needle):
    p = tmp_path / "s.toml"
    p.write_text(_scenario_text(design_path, key, new))
    before = sorted(tmp_path.iterdir())
    _assert_clean(*_run(["evaluate", "--scenario", str(p), "--cards", "48"], capsys, monkeypatch), needle)
    assert sorted(tmp_path.iterdir()) == before  # nothing written


@pytest.mark.parametrize("data,needle", [r[1:] for r in FILE_ROWS], ids=[r[0] for r in FILE_ROWS])
def test_bad_scenario_file(tmp_path, capsys, monkeypatch, data, needle):
    p = tmp_path / "s.toml"
    p.write_bytes(b"[model]\nname = \"qwen3-8b\"\n" if data is None else data)
    _assert_clean(*_run(["solve", "--scenario", str(p)], capsys, monkeypatch), needle)


@pytest.mark.parametrize("argv,needle", [r[1:] for r in CLI_ROWS], ids=[r[0] for r in CLI_ROWS])
def test_bad_command_line(tmp_path, design_path, capsys, monkeypatch, argv, needle):
    d = tmp_path / "dir.svg"
    d.mkdir()
    subs = {"{S}": str(design_path), "{D}": str(d), "{T}": str(tmp_path),
            "{R}": str(design_path.parent / "rl-grpo-qwen3-8b.toml")}
    args = [subs.get(a, a) for a in argv]
    args = [a.replace("{T}", str(tmp_path)) for a in args]
    if args[0] in ("solve", "evaluate", "explain") and "--scenario" not in args:
        args[1:1] = ["--scenario", str(design_path)]
    before = sorted(tmp_path.rglob("*"))
    _assert_clean(*_run(args, capsys, monkeypatch), needle)
    assert sorted(tmp_path.rglob("*")) == before  # nothing written, nothing overwritten


# rows that prepare files of their own (issue 24): (id, setup(tmp_path, design_path) -> argv, needle)
def _existing_export(tmp, design):
    (tmp / "old.lp").write_text("a file someone wants to keep\n")
    return ["solve", "--scenario", str(design), "--no-analysis", "--export", str(tmp / "old.lp")]


def _staged_with_task_tokens(tmp, design):
    text = (design.parent / "llama3-8b-long-context.toml").read_text()
    old = 'precision = "bf16-mixed"\n'
    assert old in text
    (tmp / "s.toml").write_text(text.replace(old, old + 'tokens = "1T"\n', 1))
    return ["solve", "--scenario", str(tmp / "s.toml"), "--no-analysis"]


def _unknown_performance_table(tmp, design):
    (tmp / "cat").mkdir()
    (tmp / "cat" / "performance.toml").write_text("[h100-sxmm]\ngemm_efficiency = 0.7\n")
    return ["solve", "--scenario", str(design), "--no-analysis", "--catalog", str(tmp / "cat")]


def _sweep(tmp, design, cluster):
    return ["sweep", "--scenario", str(design.parent / "design-case-sweep.toml"), "--cluster", cluster,
            "--out", str(tmp / "sweep.csv")]


def _not_a_scheduler_file(tmp, design):
    (tmp / "scheduler.json").write_text('{"workers": 4}\n')
    return _sweep(tmp, design, str(tmp / "scheduler.json"))


def _silent_scheduler(tmp, design):
    (tmp / "scheduler.json").write_text('{"address": "tcp://127.0.0.1:9"}\n')  # the discard port: nobody answers
    return _sweep(tmp, design, str(tmp / "scheduler.json"))


PREPARED_ROWS = [
    ("export-over-existing-file", _existing_export, "the file exists; pass --force to overwrite it"),
    ("task-tokens-beside-stages", _staged_with_task_tokens, "task.tokens: a staged task's tokens are each stage's"),
    ("performance-table-unknown-accelerator", _unknown_performance_table,
     "performance.toml [h100-sxmm]: unknown accelerator 'h100-sxmm'"),
    ("cluster-json-not-a-scheduler-file", _not_a_scheduler_file, "is not a Dask scheduler file"),
    ("cluster-address-silent", _silent_scheduler, "cannot reach the Dask scheduler"),
]


@pytest.mark.parametrize("setup,needle", [r[1:] for r in PREPARED_ROWS], ids=[r[0] for r in PREPARED_ROWS])
def test_bad_prepared_input(tmp_path, design_path, capsys, monkeypatch, setup, needle):
    if "cluster" in setup.__name__ or "scheduler" in setup.__name__:
        pytest.importorskip("distributed")
        from tpopt.optimizer.sweep import cluster
        monkeypatch.setattr(cluster, "CONNECT_TIMEOUT_S", 2)  # a bounded wait, shortened for the test
    argv = setup(tmp_path, design_path)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    _assert_clean(*_run(argv, capsys, monkeypatch), needle)
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before  # nothing (over)written


def test_the_matrix_has_150_classes():
    assert len(SCENARIO_ROWS) + len(FILE_ROWS) + len(CLI_ROWS) + len(PREPARED_ROWS) + len(CALIBRATE_ROWS) >= 150


# market offers (issue 26): a --catalog DIR whose offers.toml has one bad line; every command reading the
# catalog stops on it (catalog offers here)
OFFER_BASE = """[region."cloud-a/east"]
source = "test"

[offer.bad]
provider = "cloud-a"
region = "east"
accelerator = "h100-sxm"
market = "on-demand"
price_card_hour = 3.0
available = 64
date = "2026-10"
source = "test"
"""
OFFER_ROWS = [
    ("offer-negative-price", "price_card_hour = 3.0", "price_card_hour = -1.0", "must not be negative"),
    ("offer-unknown-region", 'region = "east"', 'region = "mars-1"', "unknown region cloud-a/mars-1"),
    ("offer-unknown-accelerator", 'accelerator = "h100-sxm"', 'accelerator = "tpu-v9"', "unknown accelerator"),
    ("offer-missing-date", 'date = "2026-10"', "", "missing required key 'date'"),
    ("offer-bad-date", 'date = "2026-10"', 'date = "October"', "YYYY-MM"),
    ("offer-availability-zero", "available = 64", "available = 0", "at least 1 card"),
    ("offer-unknown-market", 'market = "on-demand"', 'market = "auction"', "market 'auction' unknown"),
    ("offer-reserved-without-term", 'market = "on-demand"', 'market = "reserved"', "missing required key 'term'"),
]


@pytest.mark.parametrize("old,new,needle", [r[1:] for r in OFFER_ROWS], ids=[r[0] for r in OFFER_ROWS])
def test_bad_offer(tmp_path, capsys, monkeypatch, old, new, needle):
    d = tmp_path / "cat"
    d.mkdir()
    assert old in OFFER_BASE
    (d / "offers.toml").write_text(OFFER_BASE.replace(old, new, 1))
    before = sorted(tmp_path.rglob("*"))
    _assert_clean(*_run(["catalog", "offers", "--catalog", str(d)], capsys, monkeypatch), needle)
    assert sorted(tmp_path.rglob("*")) == before


@pytest.mark.parametrize("argv,needle", [
    (["catalog", "offers", "--hw", "tpu-v9"], "no offer of tpu-v9"),
    (["catalog", "import", "--date", "2026-11"], "needs --skypilot"),
    (["catalog", "import", "--skypilot", "{T}/none.csv", "--date", "2026-11"], "none.csv"),
], ids=["offers-no-match", "import-without-csv", "import-missing-csv"])
def test_bad_market_command(tmp_path, capsys, monkeypatch, argv, needle):
    args = [a.replace("{T}", str(tmp_path)) for a in argv]
    _assert_clean(*_run(args, capsys, monkeypatch), needle)


# issue 42: the remaining classes on the new surfaces. (id, setup(tmp_path, design_path) -> argv, needle); each
# must be one line, exit 2, nothing written
DEEP = 5000  # far past the nesting cap (32) and past the parser's own recursion limit


def _nested_scenario(tmp, design):
    (tmp / "s.toml").write_text(design.read_text() + "\n[extra]\ndeep = " + "[" * DEEP + "]" * DEEP + "\n")
    return ["solve", "--scenario", str(tmp / "s.toml"), "--no-analysis"]


def _nested_offers(tmp, design):
    (tmp / "cat").mkdir()
    (tmp / "cat" / "offers.toml").write_text("deep = " + "[" * DEEP + "]" * DEEP + "\n")
    return ["catalog", "offers", "--catalog", str(tmp / "cat")]


def _offers_a_table(tmp, design):
    (tmp / "s.toml").write_text(design.read_text() + "\n[market]\noffers = {a=1}\n")
    return ["solve", "--scenario", str(tmp / "s.toml"), "--no-analysis"]


def _model_config_number(tmp, design):
    (tmp / "s.toml").write_text(design.read_text().replace(DESIGN_LINES["model"], "config = 5", 1))
    return ["solve", "--scenario", str(tmp / "s.toml"), "--no-analysis"]


def _skypilot_count_word(tmp, design):
    (tmp / "vms.csv").write_text("InstanceType,AcceleratorName,AcceleratorCount,Region,Price,SpotPrice\n"
                                 "p5.48xlarge,H100,abc,us-east-1,31.2,18.4\n")
    return ["catalog", "import", "--skypilot", str(tmp / "vms.csv"), "--date", "2026-11", "--map", "H100=h100-sxm"]


def _plan_deep_json(tmp, design):
    (tmp / "plan.json").write_text("[" * DEEP + "]" * DEEP)
    return ["export", "--format", "megatron", "--plan", str(tmp / "plan.json")]


def _plan_huge_integer(tmp, design):
    (tmp / "plan.json").write_text('{"plan": {"cards": ' + "9" * 5000 + "}}")
    return ["export", "--format", "megatron", "--plan", str(tmp / "plan.json")]


def _plan_shallow_but_past_the_cap(tmp, design):
    (tmp / "plan.json").write_text('{"plan": ' + "[" * 40 + "]" * 40 + "}")  # parses; nested past 32
    return ["export", "--format", "megatron", "--plan", str(tmp / "plan.json")]


def _fifo_scenario(tmp, design):
    os.mkfifo(tmp / "s.toml")  # nobody writes: opening it for reading would block forever
    return ["solve", "--scenario", str(tmp / "s.toml")]


def _skypilot_huge_field(tmp, design):
    (tmp / "vms.csv").write_text("InstanceType,AcceleratorName,AcceleratorCount,Region,Price,SpotPrice\n"
                                 '"' + "x" * 200_000 + '",H100,8,us-east-1,31.2,18.4\n')
    return ["catalog", "import", "--skypilot", str(tmp / "vms.csv"), "--date", "2026-11", "--map", "H100=h100-sxm"]


def _runs_huge_field(tmp, design):
    (tmp / "runs.csv").write_text(RUNS_HEADER + '"' + "x" * 200_000 + '"' + RUNS_ROW[2:])
    return ["calibrate", "--runs", str(tmp / "runs.csv"), "--out", str(tmp / "out")]


def _export_error_on_the_builtin_scenario(tmp, design):
    return ["export", "--format", "megatron", "--hw", "h100-sxm", "--cards", "50", "--tp", "4"]


ISSUE42_ROWS = [
    ("toml-nested-5000-deep-scenario", _nested_scenario, "nested deeper than 32 levels"),
    ("toml-nested-5000-deep-offers", _nested_offers, "offers.toml: TOML tables/arrays nested deeper than 32 levels"),
    ("market-offers-a-table", _offers_a_table, "market.offers must be \"all\" or a list of offer names"),
    ("model-config-a-number", _model_config_number, "model.config must be the path of a config.json"),
    ("skypilot-accelerator-count-word", _skypilot_count_word, "AcceleratorCount: cannot read 'abc'"),
    ("export-plan-deep-json", _plan_deep_json, "JSON tables/arrays nested deeper than 32 levels"),
    ("export-plan-5000-digit-integer", _plan_huge_integer, "value has 5000 digits"),
    ("export-plan-nested-past-the-cap", _plan_shallow_but_past_the_cap, "nested deeper than 32 levels"),
    ("scenario-fifo", _fifo_scenario, "is a FIFO, not a regular file"),
    ("skypilot-csv-field-past-the-limit", _skypilot_huge_field, "malformed CSV (field larger than field limit"),
    ("runs-csv-field-past-the-limit", _runs_huge_field, "malformed CSV (field larger than field limit"),
    ("export-error-builtin-scenario-one-line", _export_error_on_the_builtin_scenario, "multiple of tp x pp"),
]


@pytest.mark.parametrize("setup,needle", [r[1:] for r in ISSUE42_ROWS], ids=[r[0] for r in ISSUE42_ROWS])
def test_issue42_bad_input(tmp_path, design_path, capsys, monkeypatch, setup, needle):
    monkeypatch.chdir(tmp_path)
    argv = setup(tmp_path, design_path)
    before = sorted(tmp_path.rglob("*"))
    _assert_clean(*_run(argv, capsys, monkeypatch), needle)
    assert sorted(tmp_path.rglob("*")) == before  # nothing written


@pytest.mark.parametrize("argv,needle", [
    (["solve", "--no-analysis", "--confidence", "90%", "--step-sigma", "1e6"], "risk.step_sigma: '1e6' is above"),
    (["sweep", "--confidence", "50%,90%", "--out", "{T}/c.parquet"], "must end in .csv or .json"),
    (["sweep", "--confidence", "50%,90%", "--plot", "{T}/p.svg"], "--plot is not used by sweep --confidence"),
], ids=["step-sigma-1e6", "confidence-out-parquet", "confidence-plot"])
def test_issue42_bad_command_line(tmp_path, design_path, capsys, monkeypatch, argv, needle):
    args = [a.replace("{T}", str(tmp_path)) for a in argv]
    args[1:1] = ["--scenario", str(design_path)]
    before = sorted(tmp_path.rglob("*"))
    _assert_clean(*_run(args, capsys, monkeypatch), needle)
    assert sorted(tmp_path.rglob("*")) == before


def test_no_numpy_warning_reaches_stderr_under_confidence(tmp_path):
    # GPT-3's widest space holds plans whose segments practically never complete (their chance law overflows):
    # 20 RuntimeWarning lines on stderr before issue 42; warnings are errors here, so any one left fails
    import subprocess

    scenario = Path(__file__).resolve().parents[1] / "examples" / "gpt3-175b-widest.toml"
    r = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-m", "tpopt.cli.main", "solve", "--scenario",
                        str(scenario), "--confidence", "90%", "--no-analysis"], capture_output=True, text=True,
                       cwd=tmp_path, timeout=300)
    assert r.returncode == 0 and "Warning" not in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_simulate_cut_short_by_its_limit_says_so_with_its_own_exit_code(capsys, monkeypatch):
    # GPT-3's widest space is not decided in 50 ms: no plan, no proof; before issue 42 this was exit 3
    # ("no feasible plan"), now the limit's exit code 4 and its own line
    scenario = Path(__file__).resolve().parents[1] / "examples" / "gpt3-175b-widest.toml"
    code, out, err = _run(["simulate", "--scenario", str(scenario), "--time-limit", "0.05", "--runs", "100"], capsys,
                          monkeypatch)
    assert code == 4 and "Traceback" not in err, (code, out, err)
    assert "time limit reached before a plan was found" in out and "no feasible plan" not in out


@pytest.mark.parametrize("argv", [
    ["simulate", "--runs", "200"],
    ["replan", "--done", "40%", "--elapsed", "10d", "--cards-held", "32"],
    ["sweep", "--confidence", "50%,90%"],
], ids=["simulate", "replan", "sweep-confidence"])
def test_batch_choices_answer_or_refuse_in_one_line(design_path, capsys, monkeypatch, argv):
    # the shipped batch example (global-batch choices): a ValueError traceback before issue 42; now either an
    # answer through solve's plan() or one clean line
    args = [argv[0], "--scenario", str(design_path.parent / "design-case-batch.toml"), *argv[1:]]
    monkeypatch.setattr(sys, "argv", ["tpopt", *args])
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code or 0
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    if code != 0:
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert code == 2 and len(lines) == 1 and lines[0].startswith("tpopt: error:"), (code, err)
