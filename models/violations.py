"""What a plan breaks when it breaks a layout or divisibility rule, in words.

A rule family (families.KIND_RULE: a divisibility, whole-host or schedule-shape rule) is checked as
``value <= 0`` with a value that only says *that* the rule fails (a remainder such as cards mod
cards_per_host, or the offending group size): "3 cards against a limit of 0 cards" reads as nonsense.
The reports print instead the sentence :func:`rule_violation` returns, built from the plan's own
sizes and the scenario's (host size, batch, heads, layers, experts), e.g. "3 cards is not a whole
number of 8-card hosts".

One function per rule, each stating the rule's arithmetic; :func:`rule_violation` dispatches by name
and returns "" for a plan that meets the rule (or a family that is not a rule).
"""

from __future__ import annotations

from collections.abc import Callable

from tpopt.models import families as F
from tpopt.models import moe
from tpopt.models import terms as T
from tpopt.models.pipeline import schedules
from tpopt.models.plan import Plan, Scenario

Words = Callable[[Scenario, Plan], str]


def whole_hosts(sc: Scenario, plan: Plan) -> str:
    """cards mod G = 0 (G cards per host): "N cards is not a whole number of G-card hosts"."""
    g = sc.system(plan.accelerator).acc.cards_per_host
    n = plan.cards
    if n % g == 0:
        return ""
    lower = n // g * g
    near = f"whole hosts give {lower:,} or {lower + g:,} cards" if lower else f"one host holds {g} cards"
    return f"{n:,} cards is not a whole number of {g}-card hosts ({near})"


def batch_divisibility(sc: Scenario, plan: Plan) -> str:
    """B mod (dp x mb) = 0, and each ramp-up batch (start, increment) too."""
    unit = plan.dp * plan.micro_batch
    t = sc.task
    parts = [(f"the batch of {t.global_batch:,} sequences", t.global_batch)]
    if t.ramp is not None and t.ramp[0] < t.global_batch:
        parts += [(f"the ramp-up's start of {int(t.ramp[0]):,} sequences", int(t.ramp[0])),
                  (f"the ramp-up's increment of {int(t.ramp[1]):,} sequences", int(t.ramp[1]))]
    for words, b in parts:
        if b % unit:
            return (f"{words} does not split into DP {plan.dp:,} x micro-batch {plan.micro_batch} = {unit:,} "
                    f"(remainder {b % unit:,} sequences)")
    return ""


def tp_within_host(sc: Scenario, plan: Plan) -> str:
    """tp divides G; a tp x cp group divides G or is a multiple of G (context.placement_ok)."""
    g = sc.system(plan.accelerator).acc.cards_per_host
    if g % plan.tp:
        return f"TP {plan.tp} does not divide the {g}-card host (TP stays inside one host)"
    group = plan.tp * plan.cp
    if g % group and group % g:
        return (f"the TP x CP group of {plan.tp} x {plan.cp} = {group} cards neither divides a {g}-card host nor "
                f"fills whole hosts")
    return ""


def heads_divisible(sc: Scenario, plan: Plan) -> str:
    """tp divides the query and KV heads; all-to-all context parallelism: tp x cp divides the heads."""
    a = sc.model
    if a.heads % plan.tp or a.kv_heads % plan.tp:
        return f"TP {plan.tp} does not divide the {a.heads} query heads and {a.kv_heads} KV heads"
    if sc.cp_method == "all-to-all" and a.heads % (plan.tp * plan.cp):
        return (f"TP x CP = {plan.tp} x {plan.cp} = {plan.tp * plan.cp} does not divide the {a.heads} query heads "
                f"(all-to-all context parallelism splits the heads)")
    return ""


def pp_divides_layers(sc: Scenario, plan: Plan) -> str:
    """layers mod pp = 0 (the flat model's balanced stages)."""
    layers = sc.model.layers
    if layers % plan.pp == 0:
        return ""
    return f"PP {plan.pp} does not divide the {layers} layers ({layers % plan.pp} left over)"


def schedule_shape(sc: Scenario, plan: Plan) -> str:
    """The schedule runs pp stages with m = ceil(B / (dp x mb)) micro-batches (stage_compute.schedule_shape_ok)."""
    if bool(T.schedule_shape_ok(sc, schedule=plan.schedule, pp=plan.pp, dp=plan.dp, mb=plan.micro_batch)):
        return ""
    base, v = T.schedule_parts(plan.schedule)
    m = -(-sc.task.global_batch // (plan.dp * plan.micro_batch))
    err = schedules.shape_error(base, plan.pp, m, v)
    if err:
        return err
    if not T.stage_split(sc, plan.pp):
        return (f"the stage layer counts leave a stage of the {plan.pp} pipeline stages without a layer "
                f"({sc.model.layers} layers)")
    return (f"the interleaved schedule with {v} virtual stages needs at least {v} layers on every middle stage; "
            f"{sc.model.layers} layers over PP {plan.pp} leave fewer")


def ep_divides_experts(sc: Scenario, plan: Plan) -> str:
    """experts mod ep = 0."""
    experts = sc.model.experts
    if not experts or experts % plan.ep == 0:
        return ""
    return f"EP {plan.ep} does not divide the {experts} routed experts"


def ep_group(sc: Scenario, plan: Plan) -> str:
    """ep x etp divides tp x dp (x cp); an explicit etp divides the host and the expert width (moe.ep_group_ok)."""
    etp = int(moe.expert_tp_size(plan.expert_tp, plan.tp))
    group = plan.tp * int(T.zero_ranks(plan.dp, plan.cp))
    if group % (plan.ep * etp):
        return (f"EP {plan.ep} x expert-TP {etp} = {plan.ep * etp} does not divide the TP x DP group of "
                f"{group:,} cards")
    g = sc.system(plan.accelerator).acc.cards_per_host
    if plan.expert_tp > 0 and g % etp:
        return f"expert-TP {etp} does not divide the {g}-card host"
    if plan.expert_tp > 0 and sc.model.experts and sc.model.expert_ffn % etp:
        return f"expert-TP {etp} does not divide the expert width {sc.model.expert_ffn:,}"
    return ""


RULES: dict[str, Words] = {
    F.WHOLE_HOSTS: whole_hosts,
    F.BATCH_DIVISIBILITY: batch_divisibility,
    F.TP_WITHIN_HOST: tp_within_host,
    F.HEADS_DIVISIBLE: heads_divisible,
    F.PP_DIVIDES_LAYERS: pp_divides_layers,
    F.SCHEDULE_SHAPE: schedule_shape,
    F.EP_DIVIDES_EXPERTS: ep_divides_experts,
    F.EP_GROUP: ep_group,
}
"""The sentence of each rule family of a pre-training plan."""


def rule_violation(sc: Scenario, plan: Plan, name: str) -> str:
    """How ``plan`` (resolved: dp set) breaks rule ``name`` in words; "" where it meets it or ``name``
    is not a rule."""
    words = RULES.get(name)
    return words(sc, plan) if words is not None else ""
