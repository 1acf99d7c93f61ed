"""Generation (rollout) throughput of an inference engine: prefill, decode, KV cache, long tail.

Numbers in, numbers out (bytes, seconds, FLOP); no solver imports. The model is deliberately small
and parameterised so that a shared per-operation roofline can replace its two efficiencies later:

* **Prefill** is compute-bound: F = 2 x GEMM params x prompt tokens + causal attention
  4 x L x d_attn x Lp (Lp + 1) / 2, at a stated fraction of the card's dense peak. The samples of
  one prompt share its prefill and its prompt KV (prefix sharing, as GRPO-style engines do).
* **Decode** is memory-bandwidth-bound: every decode step reads the engine's weight shard once and
  the KV of every live sequence. Over a phase of S steps that emits T tokens (roofline on the phase
  aggregates, each at its stated efficiency):
      t_decode = max((S W + T c_read k) / (B_hbm eta_hbm), T f_tok / (t P eta)) + TP all-reduces
  with W the weight bytes per card, k the KV bytes per token per card, c_read the average context a
  decode step reads, f_tok = 2 x GEMM params + 4 L d_attn c_read.
* **The long tail**: a synchronous step ends with its longest response, so the number of decode
  steps is S = max(L_max, ceil(T / b)): at least the longest response, at least the tokens over the
  concurrent batch b. L_max is the n/(n+1) quantile of a lognormal fitted to the stated mean and tail
  percentile of the response length (capped at the generation limit when one is given).
* **KV capacity**: 2 (K and V) x layers x ceil(kv_heads / t) x head_dim x bytes per value per token
  per card; Qwen3-8B in BF16: 144 KiB per token, 1.125 GiB for 8K tokens (chapter 10.5.3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import TypedDict, cast

from tpopt.errors import InputError


@dataclass(frozen=True)
class Lengths:
    """A token-length distribution as a user states it: mean, optionally one tail percentile
    (``tail`` tokens at quantile ``tail_p``), optionally a hard cap (the generation limit)."""

    mean: float
    tail: float | None = None
    tail_p: float | None = None
    cap: float | None = None

    def __post_init__(self) -> None:
        if not self.mean > 0:
            raise InputError(f"length mean must be positive (got {self.mean})")
        if self.tail is not None:
            if self.tail_p is None or not 0.5 <= self.tail_p < 1.0:
                raise InputError("length tail percentile must lie in [50, 100)")
            if self.tail < self.mean:
                raise InputError(f"length tail ({self.tail:g} tokens at p{self.tail_p * 100:g}) is below the mean "
                                 f"({self.mean:g}); give a percentile above the mean")
            z = NormalDist().inv_cdf(self.tail_p)
            if math.log(self.tail / self.mean) > z * z / 2:
                raise InputError(f"no lognormal length has mean {self.mean:g} and p{self.tail_p * 100:g} "
                                 f"{self.tail:g} (tail at most {math.exp(z * z / 2):.1f} x the mean)")
        if self.cap is not None and self.cap < self.mean:
            raise InputError(f"length cap ({self.cap:g}) is below the mean ({self.mean:g})")


def lognormal_sigma(mean: float, tail: float, p: float) -> float:
    """Shape of the lognormal with E[X] = mean and quantile_p = tail.

    ln tail = mu + z_p sigma and ln mean = mu + sigma^2 / 2 give sigma^2 / 2 - z_p sigma + ln(tail/mean) = 0;
    the smaller root sigma = z_p - sqrt(z_p^2 - 2 ln(tail / mean)) (mean 2,048, p99 8,192 -> 0.702).
    """
    z = NormalDist().inv_cdf(p)
    return z - math.sqrt(max(z * z - 2.0 * math.log(tail / mean), 0.0))


def length_sigma(d: Lengths) -> float:
    """The lognormal shape of a stated distribution (0 without a tail: every length equals the mean)."""
    # a tail comes with its percentile (Lengths.__post_init__ checks it)
    return 0.0 if d.tail is None else lognormal_sigma(d.mean, d.tail, cast(float, d.tail_p))


def longest_of(d: Lengths, n: float) -> float:
    """Expected longest of n draws, taken as the n/(n+1) quantile: mean x exp(z sigma - sigma^2/2),
    capped at the generation limit. Without a tail, the mean (lengths all equal)."""
    s = length_sigma(d)
    x = d.mean
    if s > 0.0 and n > 1:
        z = NormalDist().inv_cdf(n / (n + 1.0))
        x = max(d.mean, d.mean * math.exp(z * s - s * s / 2))
    return min(x, d.cap) if d.cap is not None else x


def second_moment(d: Lengths, longest: float) -> float:
    """E[L^2] of the fitted lognormal, mean^2 exp(sigma^2), bounded by mean x longest (no length
    exceeds the longest one planned for)."""
    s = length_sigma(d)
    return min(d.mean * d.mean * math.exp(s * s), d.mean * max(longest, d.mean))


def live_context(prompt_mean: float, resp_mean: float, resp_m2: float, share: int = 1) -> float:
    """Average context (tokens) a live sequence holds while it decodes, weighted by decode steps:
    Lp / share + E[L^2] / (2 E[L]) (a response of length L spends L steps with L/2 tokens of itself
    on average; long responses live longer). ``share`` samples of one prompt keep its KV once."""
    return prompt_mean / share + resp_m2 / (2.0 * resp_mean)


# ---------------------------------------------------------------------------------------------
# memory of an engine


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, value_bytes: float = 2.0, tp: int = 1) -> float:
    """KV bytes per token on one card of a TP engine: 2 x L x ceil(kv_heads / tp) x head_dim x bytes.

    KV heads split across TP ranks, and are replicated when tp exceeds their number. Qwen3-8B
    (36 layers, 8 KV heads of 128) in BF16: 147,456 B = 144 KiB per token; 8K tokens -> 1.125 GiB.
    """
    return 2.0 * layers * math.ceil(kv_heads / tp) * head_dim * value_bytes


def weight_bytes_per_card(params: float, tp: int, value_bytes: float = 2.0) -> float:
    """Inference weights per card of a TP engine: params x bytes / tp (Qwen3-8B BF16, tp 1: 15.3 GiB)."""
    return params * value_bytes / tp


def kv_pool(usable: float, weights: float, common: float, fixed: float | None = None) -> float:
    """KV-cache pool per card: a fixed size when given, else what usable memory leaves after the
    weights and the memory every phase holds (runtime buffers, engine workspace), at least 0."""
    return fixed if fixed is not None else max(0.0, usable - weights - common)


def max_concurrent(pool: float, kv_per_token: float, tokens_per_sequence: float) -> int:
    """Sequences whose KV fits in the pool at once: floor(pool / (k x tokens per sequence))."""
    if pool <= 0:
        return 0
    return int(math.floor(pool / (kv_per_token * tokens_per_sequence) + 1e-9))


# ---------------------------------------------------------------------------------------------
# time of an engine


def prefill_flops(gemm_params: float, layers: int, d_attn: int, prompt_tokens: float) -> float:
    """Forward FLOPs of one prompt: 2 x GEMM params x Lp + 4 L d_attn Lp (Lp + 1) / 2 (causal)."""
    lp = prompt_tokens
    return 2.0 * gemm_params * lp + 4.0 * layers * d_attn * lp * (lp + 1.0) / 2.0


def allreduce_time(size: float, tp: int, bandwidth: float, latency: float) -> float:
    """One ring all-reduce inside the engine: 2 (t-1)/t x size / B + latency (0 when tp = 1)."""
    if tp <= 1:
        return 0.0
    return 2.0 * (tp - 1) / tp * size / bandwidth + latency


def prefill_time(prompts: float, flops_per_prompt: float, tp: int, peak: float, efficiency: float,
                 tokens_per_prompt: float, hidden: int, layers: int, intra_bw: float, latency: float,
                 act_bytes: float = 2.0) -> float:
    """Compute-bound prefill of ``prompts`` prompts on one engine: F / (t P eta) plus the engine's
    two all-reduces per layer over the prompt's activations (latency per prompt and layer)."""
    comm = prompts * 2 * layers * allreduce_time(tokens_per_prompt * hidden * act_bytes, tp, intra_bw, latency)
    return prompts * flops_per_prompt / (tp * peak * efficiency) + comm


def decode_steps(longest: float, tokens: float, batch: int) -> float:
    """Decode steps of a phase: max(longest response, ceil(tokens / concurrent batch))."""
    return max(float(math.ceil(longest - 1e-9)), float(math.ceil(tokens / batch - 1e-9)))


class DecodeTime(TypedDict):
    """The decode phase of one engine: its memory, compute and TP-communication times (s), the phase's
    time max(memory, compute) + TP (s), and which of memory or compute bounds it."""

    memory_s: float
    compute_s: float
    tp_comm_s: float
    time_s: float
    bound: str


def decode_time(steps: float, tokens: float, weights: float, kv_per_token: float, context: float,
                gemm_params: float, layers: int, d_attn: int, hidden: int, tp: int, peak: float,
                hbm_bw: float, hbm_efficiency: float, efficiency: float, intra_bw: float,
                latency: float, act_bytes: float = 2.0) -> DecodeTime:
    """Decode phase of one engine (roofline on the phase totals, plus TP all-reduces).

    memory:  (steps x W + tokens x context x k) / (B_hbm eta_hbm)
    compute: tokens x (2 GEMM params + 4 L d_attn context) / (t P eta)
    TP:      steps x 2L x latency + tokens x 2L x 2(t-1)/t x hidden x 2 B / B_intra
    """
    mem = (steps * weights + tokens * context * kv_per_token) / (hbm_bw * hbm_efficiency)
    comp = tokens * (2.0 * gemm_params + 4.0 * layers * d_attn * context) / (tp * peak * efficiency)
    comm = 0.0
    if tp > 1:
        comm = steps * 2 * layers * latency + tokens * 2 * layers * 2.0 * (tp - 1) / tp * hidden * act_bytes / intra_bw
    return {"memory_s": mem, "compute_s": comp, "tp_comm_s": comm, "time_s": max(mem, comp) + comm,
            "bound": "memory" if mem >= comp else "compute"}


def tail_stretch(with_tail: float, without_tail: float) -> float:
    """Share of a synchronous generation phase spent waiting for the longest responses:
    (t_gen - t_gen with steps = ceil(T / b)) / t_gen."""
    return 0.0 if with_tail <= 0 else max(0.0, (with_tail - without_tail) / with_tail)
