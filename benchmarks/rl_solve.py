"""RL planning: accuracy of the decode model against published single-stream figures, and the speed
of the exact RL solve against brute force.

Accuracy rows: vLLM time per output token of Llama-3.1-8B (BF16/FP16, TP 1) at one request in
flight, predicted by tpopt.models.generation.decode_time with the [rl] defaults (70 % of HBM
bandwidth, 50 % of dense peak), against the figures the cited benchmark pages print.

Speed rows: the example scenario and a larger one (up to 256 cards): RL decisions, learner card
counts examined, solve time, brute-force time (every RL decision x every learner plan) and the ratio;
then the whole `tpopt rl` command on the 256-card scenario in a fresh process (CPU seconds, wall
seconds, peak RSS; benchmarks/end_to_end.py; target <= 1 s). Not a test: figures depend on the
machine. Run:

    .venv/bin/python benchmarks/rl_solve.py [--quick]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from tpopt.catalogs import load_catalog  # noqa: E402
from tpopt.catalogs.rl import load_rl_scenario  # noqa: E402
from tpopt.models import generation as gen  # noqa: E402
from tpopt.models.arch import gemm_params, param_count  # noqa: E402
from tpopt.optimizer import rl as O  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
import end_to_end  # noqa: E402

EXAMPLE = ROOT / "examples" / "rl-grpo-qwen3-8b.toml"

# (label, HBM bandwidth B/s, dense BF16 peak FLOP/s, prompt tokens, published ms per output token, source)
PUBLISHED = [
    ("H100 80GB SXM, vLLM 0.21, 1 request", 3.35e12, 989e12, 512, 6.48,
     "InferenceBench concurrency-sweep recipe (yobitelcomm.github.io/bench), tpot_p50 at conc 1"),
    ("A100 40GB, vLLM 0.23, 1024 in / 128 out, 1 request", 1.555e12, 312e12, 1024, 1000 / 75,
     "J. Musgrave, 'vLLM throughput-latency sweep on NVIDIA A100' (about 75 tokens/s at C = 1)"),
]


def accuracy() -> None:
    a = load_catalog().model("llama3-8b")  # Llama 3.1 8B has the same architecture as Llama 3 8B
    n, ng = param_count(a), gemm_params(a)
    kv = gen.kv_bytes_per_token(a.layers, a.kv_heads, a.head_dim, 2.0)
    print("Decode, one request in flight (Llama-3.1-8B, BF16, TP 1): predicted vs published time per token")
    print(f"{'setup':<52}{'predicted':>11}{'published':>11}{'error':>9}")
    for label, bw, peak, prompt, published, source in PUBLISHED:
        d = gen.decode_time(1, 1, gen.weight_bytes_per_card(n, 1), kv, prompt, ng, a.layers, a.d_attn, a.hidden, 1,
                            peak, bw, 0.70, 0.50, 1e12, 0.0)
        ms = d["time_s"] * 1e3
        print(f"{label:<52}{ms:>9.2f}ms{published:>9.2f}ms{(ms / published - 1) * 100:>+8.1f}%   [{source}]")
    print()


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def speed(quick: bool) -> None:
    cases = [("example (64 H100)", {})]
    if not quick:
        cases.append(("example, 256 H100, 2 learner layouts more", {"search.max_cards": 256, "search.pp": [1, 2, 4]}))
    print(f"{'RL space':<44}{'decisions':>10}{'keys':>6}{'solved':>7}{'solve':>9}{'brute':>9}{'ratio':>8}  same")
    for label, ov in cases:
        pb = O.RLProblem(load_rl_scenario(EXAMPLE, ov))
        res, t_solve = timed(lambda pb=pb: O.solve(pb))
        bf, t_bf = timed(lambda pb=pb: O.brute_force(O.RLProblem(pb.rsc)))
        same = abs(res.best.key("cost")[0] - bf.key("cost")[0]) <= 1e-9 * bf.key("cost")[0]
        st = res.stats
        print(f"{label:<44}{st['points']:>10,}{st['learner_keys']:>6}{st['learner_keys_solved']:>7}"
              f"{t_solve:>8.2f}s{t_bf:>8.2f}s{t_bf / t_solve:>7.1f}x  {'yes' if same else 'NO'}")
    if not quick:
        with tempfile.TemporaryDirectory() as tmp:
            label, cmd, target, _ = end_to_end.scenarios(Path(tmp))[0]
            cpu, wall, mb, rc = end_to_end.fresh(cmd)
        print(f"\n{label}, end to end in a fresh process: {cpu:.2f} CPU s ({wall:.2f} s wall), peak RSS {mb:.0f} MB"
              f" (target <= {target:g} s){'' if rc == 0 else f'; exit {rc}'}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="only the example scenario")
    args = ap.parse_args(argv)
    accuracy()
    speed(args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
