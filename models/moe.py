"""Mixture-of-experts relations: routing capacity, drops and padding, the load factor that stretches
expert work, expert-parallel sharding of the expert weights, the all-to-all dispatch and combine on
the real links, and the activation memory of routed tokens (the training-systems chapter, 10.3.4 and
10.5; the layout follows Megatron-Core's "MoE parallel folding").

Layout. A pipeline stage's attention and dense blocks run on tp x dp cards; its MoE blocks run on the
same cards regrouped as etp x ep x edp (expert tensor, expert and expert-data parallel), so
etp x ep x edp = tp x dp: "EP x expert-TP within the DP x TP group". Ranks are numbered expert-TP
innermost, then EP, then EDP, inside the stage's block of tp x dp consecutive cards (tpopt numbers TP
innermost, then DP, then PP; see :mod:`tpopt.models.comm`). One EP group is therefore ep x etp
consecutive cards: **inside one host** when ep x etp <= cards per host (the all-to-all runs on NVLink,
or PCIe on cards without peer-to-peer), otherwise **across** ceil(ep x etp / cards per host) hosts
(the share of rows bound for other hosts crosses the NICs). ``expert_tp = 0`` means "the same as tp"
(Megatron-LM's classic layout, where the rule reduces to EP dividing DP).

Routing shape. Planning needs the load of the busiest expert, not the mean. tpopt describes routing by
a two-level shape: a fraction ``hot`` of the experts receives ``imbalance`` x the mean dispatches, the
others share the rest equally (the chapter's example: half the experts 1.5 x hot). The busiest EP rank
holds E / ep experts; in the worst placement it holds as many hot experts as there are.

Capacity. With a capacity factor c an expert takes floor(c x tokens x k / E) rows per micro-batch (one
card's tokens); dispatches beyond it are dropped (the token skips the block through the residual),
unused rows are padded with zeros and still cost compute and communication, so every rank processes
exactly c x the mean. Without a capacity (dropless, c = 0 here) nothing is dropped or padded and the
busiest rank processes its routed load. Either way the rows the busiest rank handles, relative to a
perfectly balanced router, are the **load factor** phi that stretches expert compute, the all-to-all
and the routed activations.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any, TypeAlias, cast

import numpy as np
from numpy.typing import ArrayLike, NDArray

from tpopt.models.arch import (
    ModelArch,
    _mlp_bias,
    _mtp_is_moe,
    block_param_arrays,
    embedding_params,
    expert_linear_params,
    is_moe_layer,
    moe_layer_count,
    mtp_linear_params,
    mtp_params,
)
from tpopt.models.network import Route
from tpopt.models.numeric import FloatArray, Floats

DISPATCHERS = ("direct", "per-host", "all-gather")
A2A_OVERLAPS = ("auto", "none", "all")

STACK_DISPATCHERS = {"alltoall": "direct", "flex": "per-host", "deepep": "per-host", "hybridep": "per-host",
                     "allgather": "all-gather", "none": "direct"}
"""A software stack's name for its token dispatcher (catalogs/stacks.toml ``moe_dispatcher``) -> tpopt's:
Megatron-Core's ``alltoall`` sends every dispatch as its own row, ``flex`` (DeepEP, HybridEP) one copy
per destination domain, ``allgather`` gathers every token of the EP group."""


Weigh: TypeAlias = Callable[[FloatArray, FloatArray, FloatArray, FloatArray], Floats]
"""A stage's weight from its (non-expert params per card, routed-expert linear params, routed-expert biases,
MoE blocks), arrays broadcasting with tp and pp (:func:`heaviest_stage`)."""


def _f(x: ArrayLike) -> FloatArray:
    """``x`` as an array of floats."""
    return np.asarray(x, dtype=float)


# ---------------------------------------------------------------------------------------------
# capacity, drops and padding (chapter 10.3.4)


def expert_capacity(tokens: int, top_k: int, experts: int, capacity_factor: float) -> int:
    """Rows per expert: floor(c x tokens x k / E). 8,192 tokens, k = 8, E = 128: c = 1 -> 512."""
    return math.floor(capacity_factor * tokens * top_k / experts + 1e-9)


def dropped_and_padded(loads: ArrayLike, capacity: int) -> tuple[int, int]:
    """(dispatches dropped, rows padded) for per-expert loads at a capacity:
    dropped = sum max(0, load - cap), padded = sum max(0, cap - load)."""
    loads = np.asarray(loads)
    return int(np.maximum(0, loads - capacity).sum()), int(np.maximum(0, capacity - loads).sum())


def drop_and_padding_fractions(loads: ArrayLike, capacity: int) -> tuple[float, float]:
    """Dropped share of all dispatches and padded share of all executed rows (E x capacity)."""
    loads = np.asarray(loads)
    dropped, padded = dropped_and_padded(loads, capacity)
    return dropped / loads.sum(), padded / (len(loads) * capacity)


def dispatches(tokens: ArrayLike, top_k: int) -> FloatArray:
    """Token-to-expert dispatches of one MoE block: tokens x k (8,192 tokens x k = 8 -> 65,536)."""
    return _f(tokens) * top_k


def cold_load(imbalance: ArrayLike, hot: ArrayLike) -> FloatArray:
    """Load of a cold expert relative to the mean when a fraction ``hot`` of the experts takes
    ``imbalance`` x the mean: (1 - hot x imbalance) / (1 - hot) (1.5 x hot on half -> 0.5)."""
    imbalance, hot = _f(imbalance), _f(hot)
    return np.where(hot >= 1.0, imbalance, (1.0 - hot * imbalance) / np.where(hot >= 1.0, 1.0, 1.0 - hot))


def capacity_rows(tokens: ArrayLike, top_k: int, experts: int, capacity_factor: ArrayLike) -> FloatArray:
    """Rows per expert per micro-batch of ``tokens`` (one card's): floor(c x tokens x k / E); 0 when dropless."""
    c = _f(capacity_factor)
    return np.where(c > 0, np.floor(c * _f(tokens) * top_k / max(experts, 1) + 1e-9), 0.0)


def routing_drops(tokens: ArrayLike, top_k: int, experts: int, capacity_factor: ArrayLike, imbalance: ArrayLike,
                  hot: ArrayLike) -> tuple[FloatArray, FloatArray]:
    """(dropped share of dispatches, padded share of executed rows) under the routing shape.

    Mean rows per expert m = tokens x k / E; hot experts take imbalance x m, cold ones cold_load x m;
    with r = floor(c m) rows:  dropped = [hot max(0, imb m - r) + (1 - hot) max(0, cold m - r)] / m,
    padded = [hot max(0, r - imb m) + (1 - hot) max(0, r - cold m)] / r. Dropless (c = 0): (0, 0).
    Qwen3-235B-A22B (E = 128, k = 8, 8,192 tokens, half the experts 1.5 x hot): c = 1, 1.25, 1.5, 2
    -> 512/640/768/1,024 rows, 25/12.5/0/0 % dropped, 25/30/33/50 % padding (chapter 10.3.4).
    """
    c, imb, hot = _f(capacity_factor), _f(imbalance), _f(hot)
    m = _f(tokens) * top_k / max(experts, 1)
    r = capacity_rows(tokens, top_k, experts, c)
    hi, lo = imb * m, cold_load(imb, hot) * m
    dropped = (hot * np.maximum(0.0, hi - r) + (1 - hot) * np.maximum(0.0, lo - r)) / np.maximum(m, 1e-300)
    padded = (hot * np.maximum(0.0, r - hi) + (1 - hot) * np.maximum(0.0, r - lo)) / np.maximum(r, 1e-300)
    cap = c > 0
    return np.where(cap, dropped, 0.0), np.where(cap & (r > 0), padded, 0.0)


def rank_imbalance(experts: int, ep: ArrayLike, imbalance: ArrayLike, hot: ArrayLike) -> FloatArray:
    """Routed load of the busiest EP rank over the mean, worst placement: its n = E / ep experts include
    min(n, hot x E) hot ones: [min(n, hE) imb + max(0, n - hE) cold] / n. EP = 1 -> 1 (one card holds
    every expert and sees the whole routed load); n <= hot x E -> imbalance."""
    n = experts / np.maximum(_f(ep), 1.0)
    n_hot = np.minimum(n, _f(hot) * experts)
    return (n_hot * _f(imbalance) + (n - n_hot) * cold_load(imbalance, hot)) / n


def load_factor(experts: int, ep: ArrayLike, capacity_factor: ArrayLike, imbalance: ArrayLike,
                hot: ArrayLike) -> FloatArray:
    """Rows the busiest EP rank processes relative to a perfectly balanced router (phi):
    the capacity factor c when set (every expert runs c x the mean, padded or truncated), else the
    busiest rank's routed load (:func:`rank_imbalance`). Dense models: 1."""
    if experts <= 0:
        return np.ones(np.broadcast(_f(ep), _f(capacity_factor)).shape)
    c = _f(capacity_factor)
    return np.where(c > 0, c, rank_imbalance(experts, ep, imbalance, hot))


# ---------------------------------------------------------------------------------------------
# layout


def expert_tp_size(expert_tp: ArrayLike, tp: ArrayLike) -> FloatArray:
    """Expert tensor-parallel size: ``expert_tp``, or tp where it is 0 (the classic layout)."""
    e = _f(expert_tp)
    return np.where(e <= 0, _f(tp), e)


def expert_dp_size(tp: ArrayLike, dp: ArrayLike, ep: ArrayLike, expert_tp: ArrayLike) -> FloatArray:
    """Expert-data-parallel size edp = tp x dp / (ep x etp): the group ZeRO shards expert state over."""
    return _f(tp) * _f(dp) / (_f(ep) * expert_tp_size(expert_tp, tp))


def ep_group_ok(a: ModelArch, tp: ArrayLike, dp: ArrayLike, ep: ArrayLike, expert_tp: ArrayLike,
                cards_per_host: int) -> NDArray[np.bool_]:
    """EP x expert-TP divides tp x dp; an explicit expert-TP divides the host and the expert width."""
    etp = expert_tp_size(expert_tp, tp)
    group = _f(tp) * _f(dp)
    ok = np.mod(group, _f(ep) * etp) == 0
    explicit = _f(expert_tp) > 0
    width = a.expert_ffn if a.experts else 1
    rule: NDArray[np.bool_] = ok & (~explicit | ((cards_per_host % etp == 0) & (np.mod(width, etp) == 0)))
    return rule


def ep_hosts(ep: ArrayLike, expert_tp_eff: ArrayLike, cards_per_host: int) -> FloatArray:
    """Hosts one EP group spans: ceil(ep x etp / cards per host)."""
    return np.ceil(_f(ep) * _f(expert_tp_eff) / cards_per_host)


def ep_domains(ep: ArrayLike, expert_tp_eff: ArrayLike, domain_cards: float) -> FloatArray:
    """Scale-up domains one EP group spans: ceil(ep x etp / cards per domain), the domain being the
    fabric's scale-up tier (one host of NVLink, or a rack-scale NVLink domain of several hosts such as
    GB200 NVL72's 72 cards; network.route decides the tiers the same way). What the all-to-all's rows
    cross: inside a domain they stay on NVLink."""
    return np.ceil(_f(ep) * _f(expert_tp_eff) / domain_cards)


def routed_domain_limit(a: ModelArch, ep: ArrayLike, expert_tp_eff: ArrayLike, domain_cards: float) -> FloatArray:
    """Scale-up domains one token's experts can sit on under the model's group-limited routing (0: no limit).

    The router picks the token's experts from ``router_group_topk`` of ``router_groups`` groups of
    E / G consecutive experts. EP places experts in order, so a group spans (ep / G) x etp consecutive
    cards when ep >= G (inside one card otherwise) and a token reaches at most
        topk_groups x max(1, ceil((ep / G) x etp / cards per domain)) domains.
    DeepSeek-V3 (G = 8, 4 groups per token) at EP 64 over 8-card hosts: 4 hosts (the technical report's
    node-limited routing, M = 4); at EP 64 inside one NVL72 domain: no effect (1 domain)."""
    if a.router_groups <= 0 or a.router_group_topk <= 0:
        return 0.0 * _f(ep)
    span = np.maximum(_f(ep) / a.router_groups, 1.0) * _f(expert_tp_eff)
    return a.router_group_topk * np.maximum(1.0, np.ceil(span / domain_cards))


def ep_placement(ep: int, expert_tp_eff: ArrayLike, cards_per_host: int, domain_cards: float = 0) -> str:
    """"in-host" or "across N hosts" for one plan (what decides the all-to-all's links); where the
    scale-up domain holds several hosts (``domain_cards`` > cards per host), "in one scale-up domain"
    or "across N scale-up domains"."""
    if ep <= 1:
        return "none"
    if domain_cards > cards_per_host:
        d = int(ep_domains(ep, expert_tp_eff, domain_cards))
        return "in one scale-up domain" if d <= 1 else f"across {d} scale-up domains"
    h = int(ep_hosts(ep, expert_tp_eff, cards_per_host))
    return "in-host" if h <= 1 else f"across {h} hosts"


# ---------------------------------------------------------------------------------------------
# parameters per card with experts sharded by EP


@lru_cache(maxsize=256)
def _split_block_arrays(a: ModelArch) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, NDArray[np.bool_]]:
    """Per block: (non-expert linear, non-expert other, routed-expert linear, routed-expert biases)."""
    lin, oth = block_param_arrays(a)
    moe = np.array([is_moe_layer(a, i) for i in range(a.layers)], dtype=bool)
    xl = np.where(moe, a.experts * expert_linear_params(a), 0.0)
    xb = np.where(moe, a.experts * _mlp_bias(a, a.expert_ffn), 0.0)
    out = (lin - xl, oth - xb, xl, xb, moe)
    for x in out:
        x.flags.writeable = False  # cached: shared by every caller
    return out


def _mtp_split(a: ModelArch) -> tuple[float, float, float, float, int]:
    """MTP modules: (non-expert linear, non-expert other, expert linear, expert biases, MoE blocks)."""
    if a.mtp_layers <= 0:
        return 0.0, 0.0, 0.0, 0.0, 0
    lin, other = mtp_linear_params(a), mtp_params(a) - mtp_linear_params(a)
    if not _mtp_is_moe(a):
        return lin, other, 0.0, 0.0, 0
    xl = a.mtp_layers * a.experts * expert_linear_params(a)
    xb = a.mtp_layers * a.experts * _mlp_bias(a, a.expert_ffn)
    return lin - xl, other - xb, xl, xb, a.mtp_layers


@lru_cache(maxsize=4096)
def _stage_candidates(a: ModelArch, tp: float, pp: int, split: tuple[int, ...] | None,
                      pick: tuple[int, ...] | None = None) -> FloatArray:
    out = stage_candidates(a, tp, pp, None if split is None else list(split), pick=pick)
    out.flags.writeable = False
    return out


def stage_candidates(a: ModelArch, tp: float, pp: int, split: list[int] | None = None,
                     keep_all: bool = False, pick: Sequence[int] | None = None) -> FloatArray:
    """Stages that can be the heaviest, as rows (non-expert params per card, routed-expert linear
    params, routed-expert biases, MoE blocks): tp splits the non-expert linear layers; the expert
    columns are split later by ep x etp (weights) and ep (biases).

    Without ``split``, the same stages :func:`tpopt.models.memory.stage_params` considers: with pp > 1
    the first run of ceil(L / pp) blocks with the embedding, the last run with the final norm, LM head
    and MTP modules, and every run of ceil(L / pp) consecutive blocks (dominated rows removed); at
    ep x etp = tp the heaviest row's total is exactly stage_params. With ``split`` (layers per stage,
    the per-operation model's uneven stages) every real stage, as memory.stage_param_counts (a tied
    embedding keeps its own copy on a separate last stage). ``keep_all`` (with ``split``): one row per
    stage, in stage order, none removed. ``pick`` (with ``split``): the candidates among those stages only
    (a stage class: tpopt.models.terms.class_stages).
    """
    dl, do, xl, xb, moe = _split_block_arrays(a)
    emb = embedding_params(a)
    pos = a.learned_positions * a.hidden + (a.norm_params if a.embedding_norm else 0)
    head_ne = emb / tp + pos
    ml, mo, mxl, mxb, mblocks = _mtp_split(a)
    tied_copy = split is not None and len(split) > 1
    head = 0.0 if a.tied_embeddings and not tied_copy else emb / tp
    tail_ne = head + ml / tp + mo + a.norm_params + (a.vocab if a.head_bias else 0)
    dense = dl / tp + do

    def cum(x: ArrayLike) -> FloatArray:
        return np.concatenate([[0.0], np.cumsum(x)])

    cd, cxl, cxb, cm = cum(dense), cum(xl), cum(xb), cum(moe.astype(float))
    if pp <= 1:
        rows: list[tuple[float, ...]] = [(cd[-1] + head_ne + tail_ne, cxl[-1] + mxl, cxb[-1] + mxb, cm[-1] + mblocks)]
    elif split:
        rows, start = [], 0
        for g, n in enumerate(split):
            end = start + int(n)
            row = [cd[end] - cd[start], cxl[end] - cxl[start], cxb[end] - cxb[start], cm[end] - cm[start]]
            if g == 0:
                row[0] += head_ne
            if g == len(split) - 1:
                row = [row[0] + tail_ne, row[1] + mxl, row[2] + mxb, row[3] + mblocks]
            rows.append(tuple(row))
            start = end
        if keep_all:
            return np.array(rows, dtype=float)
        if pick is not None:
            rows = [rows[g] for g in pick]
    else:
        b = min(-(-a.layers // int(pp)), a.layers)

        def run(i: int) -> tuple[float, float, float, float]:
            return cd[i + b] - cd[i], cxl[i + b] - cxl[i], cxb[i + b] - cxb[i], cm[i + b] - cm[i]

        rows = [tuple(v + e for v, e in zip(run(0), (head_ne, 0.0, 0.0, 0.0), strict=False)),
                tuple(v + e for v, e in zip(run(a.layers - b), (tail_ne, mxl, mxb, mblocks), strict=False))]
        rows += [run(i) for i in range(1, a.layers - b)]
    arr = np.unique(np.array(rows, dtype=float), axis=0)
    keep = [i for i, r in enumerate(arr) if not any(np.all(o[:3] >= r[:3]) and np.any(o[:3] > r[:3]) for o in arr)]
    return arr[keep]


def _codes(x: NDArray[Any]) -> tuple[NDArray[Any], NDArray[np.intp]]:
    values, inverse = np.unique(x, return_inverse=True)
    return values, inverse.reshape(x.shape)


def heaviest_stage(a: ModelArch, tp: ArrayLike, pp: ArrayLike, weigh: Weigh,
                   split: Callable[[int], Sequence[int]] | None = None,
                   pick: Callable[[int], Sequence[int]] | None = None) -> FloatArray:
    """max over the stages that can be the heaviest of ``weigh(non_expert, expert_linear, expert_bias,
    moe_blocks)`` (arrays broadcasting with tp and pp; ``weigh`` broadcasts too). ``split(p)``, when
    given, returns the layers per stage for p stages (stage_candidates); ``pick(p)`` (with ``split``) the
    stages to take the heaviest of (every stage without it)."""
    t, p = np.broadcast_arrays(_f(tp), _f(pp))
    (tu, ti), (pu, pi) = _codes(t), _codes(p)
    cands = {(i, j): _stage_candidates(a, float(tt), int(pp_), tuple(split(int(pp_))) if split else None,
                                       tuple(pick(int(pp_))) if split and pick and int(pp_) > 1 else None)
             for i, tt in enumerate(tu) for j, pp_ in enumerate(pu)}
    width = max(len(c) for c in cands.values())
    table = np.empty((len(tu), len(pu), width, 4))
    for (i, j), c in cands.items():
        table[i, j] = np.concatenate([c, np.repeat(c[:1], width - len(c), axis=0)])
    g = table[ti, pi]  # shape t.shape + (width, 4)
    best: Floats | None = None
    for w in range(width):
        v = weigh(g[..., w, 0], g[..., w, 1], g[..., w, 2], g[..., w, 3])
        best = v if best is None else np.maximum(best, v)
    return cast(FloatArray, best)  # width >= 1: every stage table has a row


def card_params(a: ModelArch, tp: ArrayLike, pp: ArrayLike, ep: ArrayLike = 1, expert_tp: ArrayLike = 0) -> FloatArray:
    """Parameters one card of the heaviest stage holds: non-expert / tp (norms replicated) + expert
    weights / (ep x etp) + expert biases / ep. ep = 1, etp = tp: memory.stage_params."""
    etp = expert_tp_size(expert_tp, tp)
    return heaviest_stage(a, tp, pp, lambda d, xl, xb, n: d + xl / (_f(ep) * etp) + xb / _f(ep))


def expert_card_params(a: ModelArch, tp: ArrayLike, pp: ArrayLike, ep: ArrayLike = 1,
                       expert_tp: ArrayLike = 0) -> FloatArray:
    """Routed-expert parameters one card holds on the stage with the most of them:
    expert weights / (ep x etp) + expert biases / ep."""
    etp = expert_tp_size(expert_tp, tp)
    return heaviest_stage(a, tp, pp, lambda d, xl, xb, n: xl / (_f(ep) * etp) + xb / _f(ep))


def moe_blocks_per_stage(a: ModelArch, pp: ArrayLike) -> FloatArray:
    """MoE blocks (MTP modules included) on the stage with the most of them."""
    return heaviest_stage(a, 1.0, pp, lambda d, xl, xb, n: n)


def largest_unit_per_card(a: ModelArch, tp: ArrayLike, ep: ArrayLike = 1, expert_tp: ArrayLike = 0) -> FloatArray:
    """Largest unit ZeRO-3 gathers on one card: a block (non-expert / tp, experts / (ep x etp), expert
    biases / ep) or the embedding / LM head (V h / tp)."""
    dl, do, xl, xb, _ = _split_block_arrays(a)
    t, etp = _f(tp), expert_tp_size(expert_tp, tp)
    blocks = [(dl[i], do[i], xl[i], xb[i]) for i in sorted(set(np.unique(
        np.stack([dl, do, xl, xb], axis=1), axis=0, return_index=True)[1]))]
    unit = embedding_params(a) / t
    for l_, o_, x_, b_ in blocks:
        unit = np.maximum(unit, l_ / t + o_ + x_ / (_f(ep) * etp) + b_ / _f(ep))
    return unit


@lru_cache(maxsize=256)
def expert_gemm_params(a: ModelArch) -> int:
    """Routed-expert weights one token multiplies (k experts) summed over the MoE blocks and MTP modules."""
    blocks = moe_layer_count(a) + (a.mtp_layers if _mtp_is_moe(a) else 0)
    return blocks * a.top_k * expert_linear_params(a)


def extra_flops_per_token(a: ModelArch, phi: ArrayLike) -> FloatArray:
    """Expert FLOPs beyond a balanced router, per token: 6 x (phi - 1) x routed-expert GEMM params
    (padding and the busiest rank's surplus rows; phi = 1 adds nothing)."""
    return 6.0 * (_f(phi) - 1.0) * expert_gemm_params(a)


# ---------------------------------------------------------------------------------------------
# all-to-all dispatch and combine

A2A_PEER_LATENCY = 0.5e-6
"""Seconds each further peer adds to one exchange (message set-up and completion, the peers served
concurrently): DeepEP's README, low-latency dispatch of 128 tokens (h = 7,168, top-8) on H800 grows from
77 us at EP 8 to 194 us at EP 256, about 0.5 us per added peer."""

def distinct_ranks(top_k: int, ep: ArrayLike) -> FloatArray:
    """Expected distinct EP ranks a token's k experts sit on when they are uniform over the ep ranks
    (force-balanced or well-balanced routing, experts placed E / ep per rank): ep (1 - (1 - 1/ep)^k).
    k = 8: EP 8 -> 5.25, EP 64 -> 7.56 (few experts per rank: nearly k)."""
    e = np.maximum(_f(ep), 1.0)
    return e * (1.0 - (1.0 - 1.0 / e) ** top_k)


def a2a_rows_per_token(top_k: int, ep: ArrayLike, hosts: ArrayLike, dispatcher: str = "direct",
                       node_limit: ArrayLike = 0) -> tuple[FloatArray, FloatArray]:
    """Rows of width h one token puts on each link per all-to-all: (inside the domain, across domains).

    The EP group spans ``hosts`` scale-up domains (:func:`ep_domains`: hosts, or NVLink domains of
    several hosts) with m = ep / hosts members each; a token's k dispatches go to experts uniformly
    over the group. ``direct`` (Megatron-LM's all-to-all dispatcher): every dispatch to another rank is
    its own row, k (m - 1) / ep inside the domain and k (ep - m) / ep across.
    ``per-host`` (DeepSeek-V3's dispatch, DeepEP / HybridEP): one copy per destination domain crosses the
    NICs, the expected number of distinct other domains a token's k experts sit on,
    (H - 1)/H x H (1 - (1 - 1/H)^k), capped by ``node_limit`` domains per token where > 0 (node-limited
    routing: the scenario's ``[moe] node_limit`` or the model's group-limited routing, routed_domain_limit),
    then NVLink forwards one copy per destination *rank*, not per expert (DeepEP's dispatch layout: a
    token goes once to every rank in ``is_token_in_rank``, whose experts then share the copy; the combine
    sums a rank's expert outputs before sending one row back): the expected distinct ranks of k uniform
    experts, :func:`distinct_ranks` = ep (1 - (1 - 1/ep)^k), of which the share (m - 1)/m moves over
    NVLink. Inside one domain (H = 1) that is (ep - 1)(1 - (1 - 1/ep)^k): Qwen3-30B-A3B (k = 8) at EP 8,
    16 experts a card, 4.59 rows per token where the direct dispatcher sends 7.
    ``all-gather`` (Megatron-LM's all-gather dispatcher): every rank gathers every token of the group
    and keeps the rows of its own experts; a ring of ep members sends ep - 1 rows per token whatever
    k, all of them on the ring's slowest tier (returned as the second value when the ring crosses
    domains, else the first).
    """
    ep, H = _f(ep), np.maximum(_f(hosts), 1.0)
    m = ep / H
    if dispatcher == "all-gather":
        rows = np.maximum(ep - 1.0, 0.0)
        return np.where(H > 1, 0.0, rows), np.where(H > 1, rows, 0.0)
    if dispatcher == "per-host":
        distinct = H * (1.0 - (1.0 - 1.0 / H) ** top_k)
        limit = _f(node_limit)
        distinct = np.where(limit > 0, np.minimum(distinct, limit), distinct)
        inter = distinct * (H - 1.0) / H
        intra = distinct_ranks(top_k, ep) * (m - 1.0) / np.maximum(m, 1.0)
        return np.where(ep > 1, intra, 0.0), np.where(ep > 1, inter, 0.0)
    return top_k * (m - 1.0) / ep, top_k * (ep - m) / ep


def a2a_messages(ep: ArrayLike, hosts: ArrayLike, dispatcher: str = "direct") -> FloatArray:
    """Messages one card posts per exchange: ``direct``, one per peer (ep - 1); ``per-host``, one per
    peer of its own domain and one per other domain ((m - 1) + (H - 1)); ``all-gather``, the ring's
    ep - 1 steps."""
    ep, H = _f(ep), np.maximum(_f(hosts), 1.0)
    if dispatcher == "per-host":
        return np.maximum(ep / H - 1.0, 0.0) + (H - 1.0)
    return np.maximum(ep - 1.0, 0.0)


def a2a_latency(ep: ArrayLike, hosts: ArrayLike, dispatcher: str, base: float,
                ring_step: ArrayLike = 0.0) -> FloatArray:
    """Fixed cost of one exchange in seconds: the call's ``base`` latency plus, for the all-to-all
    dispatchers, A2A_PEER_LATENCY per message (peers served concurrently); for the all-gather ring,
    ``ring_step`` per sequential step (the performance catalog's step latency of the tier it crosses).
    0 when EP = 1. EP 64 over 8 hosts, direct: 20 + 63 x 0.5 = 51.5 us; per-host: 20 + (7 + 7) x 0.5 = 27 us."""
    ep, H = _f(ep), _f(hosts)
    n = a2a_messages(ep, H, dispatcher)
    per = _f(ring_step) if dispatcher == "all-gather" else A2A_PEER_LATENCY
    return np.where(ep > 1, base + n * per, 0.0)


def a2a_time(tokens: ArrayLike, hidden: int, act_bytes: float, rows_intra: ArrayLike, rows_inter: ArrayLike,
             phi: ArrayLike, path: Route, p2p: bool) -> FloatArray:
    """One all-to-all (dispatch or combine) of one MoE block for one card's ``tokens``, in seconds,
    without its fixed cost (:func:`a2a_latency`).

    Bytes = tokens x rows per token x phi x h x bytes, phi the load factor (the busiest receiver and
    padded rows pace the exchange). Rows inside the scale-up domain move at the card's scale-up
    bandwidth; rows across domains leave through the host's k NICs shared by its cards at the same time
    (``path``: network.route of the EP group with every card of a host sharing, k x B_nic / g each).
    Both run at once (NVLink and NIC traffic are concurrent: DeepEP forwards over NVLink while RDMA
    is in flight). A card without peer-to-peer sends both through its own host link:
        t = max(intra / B_up, inter / (k B_nic / g))            with peer-to-peer
        t = max((intra + inter) / B_up, inter / (k B_nic / g))  without
    """
    per_row = _f(tokens) * _f(phi) * hidden * act_bytes
    intra, inter = per_row * _f(rows_intra), per_row * _f(rows_inter)
    t_nic = np.where(inter > 0, inter / path.scale_out, 0.0)
    on_card = intra if p2p else intra + inter
    return np.maximum(on_card / path.scale_up, t_nic)


def allgather_dispatch_time(tokens: ArrayLike, hidden: int, act_bytes: float, rows: ArrayLike,
                            ring_bandwidth: ArrayLike) -> FloatArray:
    """One exchange of the all-gather dispatcher (the gather forward, its reduce-scatter for the
    combine): a ring moving tokens x (ep - 1) rows x h x bytes per card at the ring's bandwidth
    (network.route of ep members etp apart, the etp rings of a host sharing its NICs), seconds."""
    return _f(tokens) * _f(rows) * hidden * act_bytes / _f(ring_bandwidth)


def a2a_per_microbatch(one: ArrayLike, moe_blocks: ArrayLike, recompute_full: bool) -> FloatArray:
    """All-to-all time of one micro-batch on one stage: MoE blocks x (dispatch + combine forward, their
    gradients backward: 4 exchanges; 6 when the block is recomputed in full)."""
    return (6.0 if recompute_full else 4.0) * _f(moe_blocks) * _f(one)


def host_launch_exposed(micro_batches: ArrayLike, moe_blocks: ArrayLike, per_block: float,
                        graphed: bool) -> FloatArray:
    """Host (CPU) time per step that the GPU waits for in the MoE blocks' static parts (attention, router,
    EP preprocess) when the stack launches their kernels one by one from Python instead of replaying them
    as CUDA graphs:
        t_host = 0 if graphed, else m x n_moe x t_block
    m micro-batches, n_moe MoE blocks on the stage, t_block the exposed host time of one block's forward and
    backward (the stack's moe_host_launch, catalogs/stacks.toml). The kernels of a fine-grained MoE block are
    short, and the dispatcher's device-to-host synchronisation (the tokens per expert) drains the GPU queue
    once per block, so the host's launch rate bounds the block (NVIDIA's DeepSeek-V3 GB200 guide, Megatron-LM
    docs/discussions/deepseek-v3-gb200-optimization: "the CPU kernel launch speed cannot keep up with the
    kernel execution speed on GPU"). 48 blocks, 64 micro-batches, 2.32 ms: 7.1 s per step."""
    m, n = _f(micro_batches), _f(moe_blocks)
    out: FloatArray = m * n * (0.0 if graphed else per_block)
    return out


def a2a_unpaired_share(base: str, v: int, pp: ArrayLike, micro_batches: ArrayLike) -> FloatArray:
    """Share of a stage's micro-batch chunks whose exchanges have no other micro-batch's compute to
    hide behind when the schedule pairs a forward with a backward (Megatron-Core's EP overlap,
    ``overlap_moe_expert_parallel_comm``: the steady 1F1B phase runs the forward of one micro-batch
    merged with the backward of another; DualPipe's paired chunks). The first stage's warm-up forwards
    and cool-down backwards are unpaired: w = max(1, p - 1) chunks for 1F1B, zero-bubble and DualPipe
    schedules (1 with p = 1: the first forward and the last backward), w = 2 (p - 1) + (v - 1) p for
    the interleaved schedule (Megatron-LM's warm-up count on the first stage) over m v chunks:
        u = min(1, w / (m v)).
    PP 8, 128 micro-batches: 7 / 128 = 5.5 %; interleaved PP 8, v = 4: 38 / 512 = 7.4 %."""
    p, m = _f(pp), np.maximum(_f(micro_batches), 1.0)
    if base == "interleaved":
        w = 2.0 * (p - 1.0) + (v - 1.0) * p
        chunks = m * v
    else:
        w = np.maximum(1.0, p - 1.0)
        chunks = m
    share: FloatArray = np.minimum(1.0, w / chunks)
    return share


def a2a_exposed(per_microbatch: ArrayLike, compute_per_microbatch: ArrayLike, micro_batches: ArrayLike,
                overlapped: ArrayLike, unpaired: ArrayLike = 1.0, sm_share: ArrayLike = 0.0) -> FloatArray:
    """Exposed all-to-all per step, A the exchanges of one micro-batch, C its compute, m micro-batches.

    Without overlap every exchange is on the critical path: m A. With overlap (a paired micro-batch's
    compute hides the exchange: DualPipe, Megatron-Core's EP overlap) the unpaired share u of the
    chunks (:func:`a2a_unpaired_share`) still shows whole; a paired chunk shows what its exchange
    exceeds of the partner's compute, and the compute it hides behind loses a share s of the time they
    run together, min(A, C), to the SMs and HBM the exchange holds (the performance catalog's
    overlap_contention; DeepSeek-V3's report dedicates 20 of the H800's 132 SMs to its all-to-all):
        exposed = m [u A + (1 - u) (max(0, A - C) + s min(A, C))]
    A = 1 s, C = 3 s, u = 0.1, s = 0.15, m = 10: 10 x (0.1 + 0.9 x 0.15) = 2.35 s (10 s without overlap).
    """
    m, a, c = _f(micro_batches), _f(per_microbatch), _f(compute_per_microbatch)
    u, s = _f(unpaired), _f(sm_share)
    paired = np.maximum(0.0, a - c) + s * np.minimum(a, c)
    hidden = m * (u * a + (1.0 - u) * paired)
    return np.where(overlapped, hidden, m * a)


def stack_defaults(dispatcher: str, a2a_overlap: str) -> dict[str, str]:
    """``[moe] dispatcher`` and ``a2a_overlap`` a stack implies where the scenario states neither: its
    dispatcher (STACK_DISPATCHERS; unknown names keep ``direct``), and ``all`` when the stack overlaps
    the exchanges by default, else ``auto`` (a DualPipe schedule pairs its chunks whatever the stack)."""
    overlap = "all" if str(a2a_overlap).lower() in ("all", "true", "on") else "auto"
    return {"dispatcher": STACK_DISPATCHERS.get(str(dispatcher).lower(), "direct"), "a2a_overlap": overlap}


def a2a_overlapped(setting: str, schedule: str) -> bool:
    """Whether the all-to-all hides behind compute: ``all`` (Megatron-Core's EP overlap on any schedule),
    ``none``, or ``auto`` = under the DualPipe schedules (forward and backward chunks of two
    micro-batches paired, DeepSeek-V3)."""
    if setting == "all":
        return True
    if setting == "none":
        return False
    return str(schedule).startswith("dualpipe")


# ---------------------------------------------------------------------------------------------
# activation memory of routed tokens


def clamped_apart(a: ModelArch, clamp_unfused: bool, fused_grouped_mlp: bool) -> bool:
    """Whether the experts' gated activation is clamped apart from its fused kernel: the model clamps it
    (``a.activation_clamp`` > 0, gpt-oss's swiglu_limit), the stack clamps in PyTorch (``clamp_unfused``,
    StackProfile.activation_clamp_unfused: Megatron-Core) and the grouped MLP is not one fused kernel (whose
    epilogue computes the activation). Then the clamp costs its own passes (ops.activation_clamp_kernels) and the
    block keeps the clamped copy unless the activation is recomputed (:func:`routed_activation_extra`)."""
    return a.activation_clamp > 0.0 and clamp_unfused and not fused_grouped_mlp


def routed_activation_extra(a: ModelArch, tokens: ArrayLike, phi: ArrayLike, expert_tp_eff: ArrayLike,
                            act_bytes: float = 2.0, gemm_input_bytes: float | None = None,
                            combine_keeps_outputs: bool = True, clamp_copy: bool = False) -> FloatArray:
    """Routed-token activation bytes of one MoE block beyond what the dense inventory counts.

    The dense inventory (memory.layer_activation_groups) keeps the expert MLP tensors of k x expert_ffn
    per token at a balanced load. On the busiest card a MoE block also keeps: the surplus rows,
    (phi - 1) x tokens x k x (3 f_e, or 2 f_e without a gate); the dispatched input rows the first
    expert GEMM saves for its weight gradient, etp x tokens x k x phi x h x b_in (expert-TP ranks hold
    the rows of their whole group; b_in = ``gemm_input_bytes``: the quantised copy under an FP8 recipe,
    1 byte, as Transformer Engine saves its FP8 GEMM inputs; the activation bytes otherwise); the expert
    outputs the combine keeps for the router probabilities' gradient, etp x tokens x k x phi x h x e;
    the router probabilities, tokens x E x 4 bytes (FP32). ``tokens`` are one card's (micro-batch x s / tp).
    DeepSeek-V3, 4,096 tokens, BF16, phi = 1, etp = 1: 2 x 4,096 x 8 x 7,168 x 2 + 4,096 x 256 x 4 = 900 MiB.
    Without ``combine_keeps_outputs`` (a stack that applies the probabilities in the experts' activation,
    before fc2, as Megatron-Core does: their gradient comes from the saved fc1 output) the expert outputs
    are not kept: 4,096 x 8 x 7,168 x 2 + 4,096 x 256 x 4 = 452 MiB.
    ``clamp_copy``: the block also keeps the clamped copy of the fc1 output its fused activation saves (a clamped
    activation clamped apart, ops.activation_clamp_kernels, with the activation not recomputed), tokens x k x phi x
    2 f_e x e (expert-TP ranks: their rows of 2 f_e / etp); gpt-oss-120b, 4,096 tokens, BF16: 180 MiB.
    """
    if a.experts <= 0:
        return 0.0 * _f(tokens) * _f(phi)
    t, phi = _f(tokens), _f(phi)
    b_in = act_bytes if gemm_input_bytes is None else gemm_input_bytes
    width = (3 if a.gated_mlp else 2) * a.expert_ffn
    surplus = (phi - 1.0) * t * a.top_k * width * act_bytes
    rows = _f(expert_tp_eff) * t * a.top_k * phi * a.hidden * (b_in + (act_bytes if combine_keeps_outputs else 0.0))
    clamped = t * a.top_k * phi * 2.0 * a.expert_ffn * act_bytes if clamp_copy else 0.0 * t
    return surplus + rows + clamped + t * a.experts * 4.0


def dispatch_buffer(a: ModelArch, tokens: ArrayLike, phi: ArrayLike, act_bytes: float = 2.0) -> FloatArray:
    """The send buffer of one all-to-all, live while a MoE block runs: tokens x k x phi x h x bytes."""
    if a.experts <= 0:
        return 0.0 * _f(tokens) * _f(phi)
    return _f(tokens) * a.top_k * _f(phi) * a.hidden * act_bytes

