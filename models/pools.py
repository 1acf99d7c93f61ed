"""Heterogeneous plans, form (a): data-parallel groups per accelerator type (issue 40, item 1).

A job combines pools of different accelerator types (``[[hardware.pools]]``). Pool ``g`` runs its own layout
(TP / PP / ZeRO / micro-batch of the single-accelerator model) with ``DP_g`` replicas and a share ``b_g`` of
the global batch ``B`` (``sum_g b_g = B``; ``b_g`` a multiple of ``micro_batch_g x DP_g``). Every group runs
the same model on its share, reduces its gradients inside the pool as a homogeneous plan does, then the pools
reduce across the pool boundary. The relations here are pure (no solver): the optimizer
(:mod:`tpopt.optimizer.pools`) chooses the layouts and shares.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tpopt.models.units import HOUR


@dataclass(frozen=True)
class Pool:
    """One accelerator pool: its card type, how many cards are available, what a card-hour costs.

    ``owned``: cards the team already has; they bill ``price_card_hour`` (0 unless an internal price is
    stated). A rented pool bills its cards for the job's hours."""

    accelerator: str
    max_cards: int
    price_card_hour: float
    owned: bool = False
    price_source: str = field(default="", compare=False, repr=False)  # where price_card_hour comes from, as
    # System.price_source words it (tpopt.optimizer.footing.price reads it; "": not known)

    @property
    def label(self) -> str:
        return f"{self.accelerator} ({'owned' if self.owned else 'rented'})"


def mixed_step_s(group_steps_s: Sequence[float], cross_pool_s: float) -> float:
    """Step time of the mixed job: ``t = max_g t_g(b_g) + t_x`` (the pools wait for the slowest group, then
    reduce across the boundary; the cross-pool reduction is not hidden behind compute, a conservative bound)."""
    return max(group_steps_s) + cross_pool_s


def idle_s(group_steps_s: Sequence[float]) -> list[float]:
    """Idle time of each group per step: ``max_h t_h - t_g`` (0 for the slowest group)."""
    slowest = max(group_steps_s)
    return [slowest - t for t in group_steps_s]


def cross_pool_bytes(grad_bytes: float, pools: int) -> float:
    """Bytes each gradient shard sends across the pool boundary per step: a ring all-reduce over the ``P``
    pools' copies of the gradients, ``2 (P - 1) / P x G`` (``G`` = the gradient bytes; 0 for one pool)."""
    return 2.0 * (pools - 1) / pools * grad_bytes if pools > 1 else 0.0


def inter_pool_bandwidth(hosts: Sequence[int], host_bw: Sequence[float]) -> float:
    """Bytes/s across the pool boundary: one stream per host of the smallest pool, at the slower pool's
    per-host scale-out bandwidth (NIC bandwidth x NICs per host): ``min_g H_g x min_g bw_g``."""
    return min(hosts) * min(host_bw)


def cross_pool_s(grad_bytes: float, hosts: Sequence[int], host_bw: Sequence[float]) -> float:
    """Cross-pool gradient all-reduce time per step: ``2 (P - 1) / P x G / (min_g H_g x min_g bw_g)``; 0 for
    one pool (``P`` = pools in use)."""
    p = len(hosts)
    return cross_pool_bytes(grad_bytes, p) / inter_pool_bandwidth(hosts, host_bw) if p > 1 else 0.0


def mixed_failure_rate(pool_rates_per_s: Sequence[float], job_events_per_s: float = 0.0) -> float:
    """Interruptions per second of the mixed job: ``lam = sum_g lam_g + lam_job`` (any pool's card failure stops
    the whole synchronous job; ``lam_g = n_g / MTBF_card``; job-wide events such as planned stops count once)."""
    return float(sum(pool_rates_per_s)) + job_events_per_s


def pool_cost(cards: int, price_card_hour: float, finish_s: float) -> float:
    """What pool ``g`` bills: ``n_g x p_g x finish / 3600`` (USD; an owned pool at its internal price, 0 by
    default)."""
    return cards * price_card_hour * finish_s / HOUR


def balanced_share(fixed_s: tuple[float, float], per_sequence_s: tuple[float, float], batch: int) -> float:
    """The continuous balance of two groups with affine step times ``t_g(b) = a_g + c_g b``: the share of group
    1 at which both finish together, ``a_1 + c_1 b_1 = a_2 + c_2 (B - b_1)``, i.e.
    ``b_1 = (a_2 - a_1 + c_2 B) / (c_1 + c_2)``, kept within ``[0, B]``. The optimizer's shares are integers
    (multiples of each group's micro-batch x DP) and are searched exactly; this is the rule they round."""
    (a1, a2), (c1, c2) = fixed_s, per_sequence_s
    share = (a2 - a1 + c2 * batch) / (c1 + c2)
    return min(max(share, 0.0), float(batch))


# ---------------------------------------------------------------------------------------------
# form (b): pipeline stages on different pools


def boundary_send_s(boundary_bytes: float, nic_bw: Sequence[float]) -> float:
    """One micro-batch's activations (or their gradients) across the pool boundary: ``x = A / min_g bw_g``
    (``A`` = ``s b h x bytes / TP``, each TP rank's slice; every rank sends over its own NIC, at the slower
    pool's NIC bandwidth)."""
    return boundary_bytes / min(nic_bw)


def staged_step_s(stage_steps_s: Sequence[float], boundary_s: float, boundaries: int) -> float:
    """Step of one pipeline whose stages lie on different pools: ``t = max_g t_g + 2 k x``. ``t_g`` is pool
    ``g``'s pipeline step had all ``S`` stages its ``l_g`` layers (1F1B: ``m + S - 1`` slots of its stage
    time, its own sends and data-parallel reduction included), so the slowest pool's stages set the steady
    slots and the bubble alike; each of the ``k`` pool boundaries adds its forward send on the fill and its
    backward send on the drain (``x`` each; the steady-state sends overlap compute)."""
    return max(stage_steps_s) + 2 * boundaries * boundary_s


def stage_layers(layers: int, stages: tuple[int, int], first: int) -> int | None:
    """Layers per stage on the second pool when the first pool's ``s_1`` stages hold ``l_1`` layers each:
    ``l_2 = (L - s_1 l_1) / s_2``, None unless a positive integer (every layer placed, every stage one)."""
    rest = layers - stages[0] * first
    return rest // stages[1] if rest > 0 and rest % stages[1] == 0 else None
