"""RL post-training as a solve (chapter 10.5): rollout / verification / learning split, shared or
separate cards, synchronous or one-step async, weight sync; exact, with binding reports.

Decisions. RL level: accelerator, placement (``separate`` card groups or ``shared`` cards with a
staged hand-off), learner cards, rollout cards, rollout TP, rollout batch, staleness (0 / 1) and the
weight-sync method (``sharded`` / ``broadcast``); the save interval and mode are picked per card
count (they only move the overhead L). Learner level: the whole pre-training plan (ZeRO, TP, PP,
micro-batch, recompute, offload, schedule) on the learner's cards, chosen by the existing solver.

Why taking the learner's optimum per card count is exact. Every RL quantity depends on the learner
plan only through its step time t (and, on shared cards, the state swap h(states) and its memory,
which bounds the plan through its usable memory): cycle, finish and cost are non-decreasing in
q_s t + h, and the memory families are enforced inside the learner solve by lowering the usable
memory. So for a learner card count and memory limit the best RL plan uses the learner plan that
minimises t (separate cards: the solver's ``time`` optimum at that card count) or q_s t + h (shared
cards: the solver's K best plans by t, K grown until q_s t_K can no longer beat the best q_s t + h).

Search. Every RL decision is first evaluated with a valid lower bound of the learner
(t >= 6 x GEMM params x tokens / (cards x the card's highest dense peak), h >= 0, memory 0): a
relaxation of every family. Learner keys (accelerator, cards, memory limit) are then solved in the
order of their best bound; the search stops when the next bound exceeds the best verified plan.
:func:`brute_force` enumerates every RL decision with every learner plan (no solver, no bound):
the oracle of the property tests.

Families (value <= limit, SI units inside): ``rl.learner_memory``, ``rl.kv_capacity``,
``rl.rollout_memory``, ``rl.handoff_memory``, ``rl.staleness``, ``checkpoint.backlog``,
``deadline.finish`` (with its per-stage form ``rl.stage_balance``, reported like ``step.budget``),
``cards.max``, ``budget.cost``; ``rl.learner_layout`` (some learner layout exists at the card count)
is structural.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

import numpy as np

from tpopt.errors import InputError
from tpopt.models import families as F
from tpopt.models import generation as gen
from tpopt.models import rl as R
from tpopt.models import terms as T
from tpopt.models.arch import ModelArch, flops_per_token, gemm_params, param_count
from tpopt.models.evaluate import Evaluation, evaluate
from tpopt.models.plan import Scenario
from tpopt.models.rl import RLScenario
from tpopt.models.units import DAY, GIB
from tpopt.optimizer import analysis, backends, core, footing
from tpopt.optimizer.enumerate import NUMERIC_AXES, chunks
from tpopt.optimizer.limits import Clock, TimeLimitReached, clock_of
from tpopt.optimizer.result import Request, Status
from tpopt.optimizer.space import Space

# family -> (unit, scale, what it says), in report order (declared in tpopt.models.families)
SPEC = {f.name: (f.unit, f.scale, f.statement(F.RL)) for f in F.RL_FAMILIES}
FAMILIES = F.RL_SOLVED
STRUCTURAL = F.RL_STRUCTURAL
RELAXABLE = F.RL_RELAXABLE
TRAINER_STRUCTURAL = frozenset(F.TRAINER_RULES)
TRAINER_MEMORY = frozenset(F.TRAINER_MEMORY)
OBJECTIVES = ("cost", "time")
MAX_TOP = 256  # shared cards: most learner plans fetched by step time before enumerating the rest
TABLE_LIMIT = 300_000  # learner spaces up to this size are tabulated once (as tpopt solve reports do)

Restrict = dict[str, Any]  # RL decision field -> the values allowed
Check = tuple[float, float]  # (value, limit) of a family, SI units
LearnerKey = tuple[str, int, float | None, bool]  # (accelerator, cards, memory limit or None, shared)
TrainerPoint = tuple[float, float, float, bool, dict[str, int]]  # (step, states, memory, host rule met, assignment)
Rank = tuple[tuple[float, float], int]  # (objective key, grid index): the search's order of RL plans


@dataclass(frozen=True)
class RLDecision:
    """One RL-level decision vector (the learner's layout is a :class:`tpopt.models.plan.Plan`)."""

    accelerator: str
    placement: str  # "separate" or "shared"
    learner_cards: int
    rollout_cards: int  # = learner_cards on shared cards
    rollout_tp: int
    rollout_batch: int  # concurrent sequences per engine; 0 = the largest that fits
    staleness: int  # 0 synchronous, 1 one-step async
    weight_sync: str  # "sharded" or "broadcast"

    @property
    def cards(self) -> int:
        return self.learner_cards if self.placement == "shared" else self.learner_cards + self.rollout_cards


@dataclass(frozen=True)
class Learner:
    """What the RL level needs from a learner plan (``plan`` is None for bounds and brute force)."""

    plan: Evaluation | None
    step_s: float  # the pre-training step time of the plan (full batch)
    full_s: float  # + extra forward passes
    states: float = 0.0  # bytes per card of persistent state
    memory: float = 0.0  # peak bytes per card
    swap_s: float = 0.0  # shared cards: state to host memory and back


@dataclass
class RLEvaluation:
    decision: RLDecision
    learner: Learner
    metrics: dict[str, Any]
    checks: dict[str, Check]  # family -> (value, limit), SI units

    def ok(self, family: str) -> bool:
        if family not in self.checks:
            return True
        v, lim = self.checks[family]
        return v <= lim * (1 + 1e-12)

    def feasible(self, enforced: Iterable[str]) -> bool:
        return all(self.ok(f) for f in enforced if f not in STRUCTURAL)

    def key(self, objective: str) -> tuple[float, float]:
        c, f = self.metrics["cost"], self.metrics["finish_s"]
        if objective == "cards":
            return (self.decision.cards, c)
        return (c, f) if objective == "cost" else (f, c)


@dataclass
class RLResult:
    status: Status
    objective: str
    best: RLEvaluation | None
    enforced: tuple[str, ...]
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def feasible(self) -> bool:
        return self.best is not None


def new_caches() -> dict[str, Any]:
    return {"learner": {}, "space": {}, "rollout": {}, "overhead": {}, "bound_ok": [True], "solves": [0], "grid": {},
            "plans": {}}


class RLProblem:
    """One RL scenario's design space, relations and caches (learner solves, rollout stages)."""

    def __init__(self, rsc: RLScenario, backend: str = backends.DEFAULT, req: Request | None = None,
                 card_limit: int | None = None, caches: dict[str, Any] | None = None) -> None:
        if not backends.is_known(backend):
            raise backends.unknown_solver(backend)
        self.rsc = rsc
        self.sc = cast(Scenario, rsc.trainer)  # the learner's pre-training scenario (typed object in RLScenario)
        self.task = rsc.task
        self.backend = backend
        self.req = req or Request()
        self.card_limit = int(card_limit or self.sc.search.max_cards)
        self.caches = caches if caches is not None else new_caches()
        self.policy_params = float(param_count(self.sc.model))
        self.gemm_params = float(gemm_params(self.sc.model))
        self.seq = self.sc.task.seq_len
        self.step_tokens = float(self.task.batch * self.seq)
        rm = cast("ModelArch | None", self.task.verifier.reward_model)  # typed object in Verifier
        self.rm_params = float(param_count(rm)) if rm is not None else 0.0

    # -- variants sharing the caches -----------------------------------------------------------
    def with_task(self, **changes: Any) -> RLProblem:
        """The same problem with loop fields changed that leave the learner's scenario as it is
        (kept fractions, staleness allowed, samples to train); the caches are shared."""
        allowed = {"kept", "kept_sync", "staleness", "samples"}
        if set(changes) - allowed:
            raise InputError(f"cannot vary {sorted(set(changes) - allowed)} without rebuilding the scenario")
        caches = dict(self.caches)
        if "kept_sync" in changes:  # weighs the state swap of shared cards in the learner choice
            caches["learner"] = {}
        return RLProblem(replace(self.rsc, task=replace(self.task, **changes)), self.backend, self.req,
                         self.card_limit, caches)

    def with_card_limit(self, card_limit: int) -> RLProblem:
        return RLProblem(self.rsc, self.backend, self.req, card_limit, self.caches)

    def with_request(self, req: Request) -> RLProblem:
        return RLProblem(self.rsc, self.backend, req, self.card_limit, self.caches)

    def clock(self) -> Clock:
        """The run's clock (``req.clock``); without one, a fresh clock of ``req.time_limit``."""
        clock = self.req.clock
        return clock if clock is not None else clock_of(replace(self.req))

    # -- the grid of RL decisions --------------------------------------------------------------
    def accelerators(self) -> list[str]:
        return list(self.sc.search.accelerators or self.sc.systems)

    def rollout_tps(self, acc: str) -> list[int]:
        g = self.sc.system(acc).acc.cards_per_host
        return [t for t in self.rsc.search.rollout_tp if g % t == 0 and self.sc.model.heads % t == 0]

    def _blocks(self, clock: Clock | None = None) -> Iterable[tuple[str, str, int, int, list[int]]]:
        """The grid's blocks in its order: (accelerator, placement, rollout TP, learner cards, the rollout
        card counts that go with them); ``clock`` is checked once per learner card count."""
        s = self.rsc.search
        P = self.task.prompts_per_step
        for acc in self.accelerators():
            g = self.sc.system(acc).acc.cards_per_host
            hosts = [h * g for h in range(1, self.card_limit // g + 1)]
            for placement in s.placement:
                for t in self.rollout_tps(acc):
                    top = max(g, math.ceil(P * t / g) * g)
                    for cl in hosts:
                        if clock is not None:
                            clock.check("building the RL decisions")
                        # separate: the hosts' card counts c <= top with cl + c <= the limit (a prefix)
                        room = min(top, self.card_limit - cl)
                        rollouts = [cl] if placement == "shared" else hosts[:max(0, room // g)]
                        yield acc, placement, t, cl, rollouts

    def _inner(self, placement: str) -> tuple[tuple[int, ...], tuple[int, ...], tuple[str, ...]]:
        """(rollout batches, staleness values, weight-sync methods) of one block, in the grid's order."""
        s = self.rsc.search
        return tuple(s.rollout_batch or (0,)), ((0,) if placement == "shared" else (0, 1)), tuple(s.weight_sync)

    def grid(self, restrict: Restrict | None = None, clock: Clock | None = None,
             stop_after: int | None = None) -> list[RLDecision]:
        """Every RL decision: whole hosts for each group, together within the card limit; rollout
        groups up to one prompt per engine (more engines than prompts would idle); staleness 0 and 1
        on separate cards (``rl.staleness`` limits it), 0 on shared cards. ``restrict`` maps decision
        fields to allowed values. ``clock``: checked once per learner card count (raises
        :class:`TimeLimitReached` there once it has run out); ``stop_after``: stop as soon as the grid
        holds that many decisions (a size test needs no more)."""
        r = restrict or {}
        out: list[RLDecision] = []
        for acc, placement, t, cl, rollouts in self._blocks(clock):
            if stop_after is not None and len(out) >= stop_after:
                return out
            batches, stales, methods = self._inner(placement)
            for cr in rollouts:
                for b in batches:
                    for st in stales:
                        for m in methods:
                            d = RLDecision(acc, placement, cl, cr, t, b, st, m)
                            if all(getattr(d, k) in v for k, v in r.items()):
                                out.append(d)
        return out

    def grid_size(self, clock: Clock | None = None) -> int:
        """How many RL decisions :meth:`grid` lists without a restriction (counted, not listed)."""
        n = 0
        for _, placement, _, _, rollouts in self._blocks(clock):
            batches, stales, methods = self._inner(placement)
            n += len(rollouts) * len(batches) * len(stales) * len(methods)
        return n

    def decisions(self, clock: Clock | None = None) -> DecisionGrid:
        """The unrestricted grid as columns (cached per card limit, shared by every solve of the problem
        and its variants): the order of :meth:`grid`, without an object per decision."""
        cache = self.caches.setdefault("grid", {})
        known: DecisionGrid | None = cache.get(self.card_limit)
        if known is None:
            known = DecisionGrid.build(self, clock)
            cache[self.card_limit] = known
        return known

    # -- learner -------------------------------------------------------------------------------
    def nics(self, acc: str) -> int:
        nics: int = self.rsc.nics_per_host or self.sc.system(acc).acc.nics_per_host
        return nics

    def extra_forward_s(self, acc: str, cards: int) -> float:
        """Extra forward passes (reference / old-policy log-probs) at the scenario's efficiency:
        n x (training FLOPs / 3) / (cards x peak x eta), without bubbles or communication (per-operation
        model: eta = the card's large-GEMM efficiency x the throughput scale)."""
        if not self.task.extra_forwards:
            return 0.0
        s = self.sc.system(acc)
        perf = s.perf
        eta = s.efficiency * (perf.gemm_efficiency if s.per_op and perf is not None else 1.0)
        fwd = float(flops_per_token(self.sc.model, self.seq)) / 3.0 * self.step_tokens
        seconds: float = self.task.extra_forwards * fwd / (cards * s.acc.peak_flops * eta)
        return seconds

    def learner_bound(self, acc: str, cards: int) -> Learner:
        """A lower bound of every learner plan at ``cards``: the GEMM work of a step at the card's
        highest dense peak, no swap, no memory (0 once a solve has shown the bound unsafe)."""
        key = (acc, cards, self.caches["bound_ok"][0])
        cache = self.caches.setdefault("bound", {})
        if key not in cache:
            A = self.sc.system(acc).acc
            peak = max(A.peak_flops, A.peak_fp8, A.peak_fp16, A.peak_tf32)
            lb = 6.0 * self.gemm_params * self.step_tokens / (cards * peak) if key[2] else 0.0
            cache[key] = Learner(plan=None, step_s=lb, full_s=lb + self.extra_forward_s(acc, cards))
        bound: Learner = cache[key]
        return bound

    def rate(self, acc: str, cards: int) -> float:
        """Rental cost per second of the job's cards and their hosts' NICs (cached)."""
        cache = self.caches.setdefault("rate", {})
        if (acc, cards) not in cache:
            cache[(acc, cards)] = float(T.rate_per_second(self.sc, acc, cards, self.nics(acc)))
        rate: float = cache[(acc, cards)]
        return rate

    def receive_bytes(self, d: RLDecision) -> float:
        """Policy weights a rollout card receives per update (its shard, or the whole policy)."""
        dense = self.task.weight_bytes * self.policy_params
        return R.sync_bytes_per_card(dense, 0.0, d.rollout_tp, 1, d.weight_sync == "sharded")

    def generation_weights(self, t: int) -> float:
        """Weights resident on a rollout card: the policy and, when scoring on cards, the reward model."""
        return gen.weight_bytes_per_card(self.policy_params + self.rm_params, t, self.task.weight_bytes)

    def learner_key(self, d: RLDecision, enforced: Collection[str]) -> LearnerKey:
        """(accelerator, cards, memory limit or None, shared) of the learner solve a decision needs.

        Shared cards in staged order need learner peak + received weights (+ the reward model) +
        common <= usable, i.e. the learner planned against usable - received - common."""
        usable = self.sc.system(d.accelerator).acc.memory_usable
        limit = usable if F.RL_LEARNER_MEMORY in enforced else None
        if d.placement == "shared" and F.RL_HANDOFF_MEMORY in enforced:
            recv = self.receive_bytes(d) + self.generation_weights(d.rollout_tp) - \
                gen.weight_bytes_per_card(self.policy_params, d.rollout_tp, self.task.weight_bytes)
            limit = min(usable if limit is None else limit, usable - recv - self.task.common)
        return (d.accelerator, d.learner_cards, limit, d.placement == "shared")

    def _space(self, acc: str, limit: float | None) -> Space:
        key = (acc, limit)
        sp: Space | None = self.caches["space"].get(key)
        if sp is None:
            sc = self.sc
            if limit is not None:
                s = sc.system(acc)
                sc = replace(sc, systems={**sc.systems, acc: replace(s, acc=replace(s.acc, memory_usable=limit))})
            restrict = {"acc": [acc], "tau": sc.search.save_interval_s[:1], "mode": sc.search.save_mode[:1]}
            sp = Space.from_scenario(sc, restrict)
            base = self.caches["space"].get((acc, "tables"))
            if base is not None:  # the term tables do not depend on usable memory: share them
                sp.__dict__["tables"] = base
            else:
                self.caches["space"][(acc, "tables")] = sp.tables
            self.caches["space"][key] = sp
        return sp

    def swap_bandwidth(self, acc: str) -> float:
        """Card-to-host bandwidth for parking the training state: the card's host link, as far as
        the host's memory bandwidth shared by its cards allows."""
        A = self.sc.system(acc).acc
        host = A.host_memory_bw / A.cards_per_host if A.host_memory_bw > 0 else math.inf
        bw: float = min(A.host_link_bw, host)
        return bw

    def _learner_from(self, ev: Evaluation, acc: str, cards: int, shared: bool) -> Learner:
        step = ev.metrics["step_s"]
        states = ev.metrics["states_gib"] * GIB
        swap = R.state_swap_time(states, self.swap_bandwidth(acc)) if shared else 0.0
        return Learner(plan=ev, step_s=step, full_s=step + self.extra_forward_s(acc, cards), states=states,
                       memory=ev.metrics["memory_per_card_gib"] * GIB, swap_s=swap)

    def learner(self, key: LearnerKey) -> Learner | None:
        """The learner plan RL decisions with this key use (cached); None if no plan exists.

        Learner spaces up to ``TABLE_LIMIT`` plans are evaluated once per accelerator by the
        vectorised evaluator (every key is then a mask, as ``tpopt solve`` reports do); larger ones
        go to the chosen solver backend with the card count fixed."""
        cache = self.caches["learner"]
        if key not in cache:
            acc, cards, limit, shared = key
            out = None
            clock = self.clock()
            if limit is None or limit > 0:
                if self._space(acc, None).size() <= TABLE_LIMIT and not self.caches.get("force_solver"):
                    with clock.stoppable("tabulating the learner plans"):
                        out = self._learner_from_table(acc, cards, limit, shared)
                else:
                    out = self._learner_from_solver(acc, cards, limit, shared)
            if out is not None and out.step_s < self.learner_bound(acc, cards).step_s * (1 - 1e-9):
                self.caches["bound_ok"][0] = False  # a learner model faster than the GEMM bound: stop pruning
            if clock.reached:  # cut short by the time limit: not proven the fastest, not kept for later solves
                return out
            cache[key] = out
        known: Learner | None = cache[key]
        return known

    def _choose(self, shared: bool, cands: Sequence[Learner]) -> int:
        """Index of the learner that serves the RL level best: least step time on separate cards,
        least q_s t + swap on shared cards (first on ties)."""
        qs = self.task.kept_sync
        score = [(qs * c.full_s + c.swap_s) if shared else c.full_s for c in cands]
        return min(range(len(cands)), key=lambda i: (score[i], i))

    def _learner_from_table(self, acc: str, cards: int, limit: float | None, shared: bool) -> Learner | None:
        every = trainer_points(self, acc).get(cards, [])
        at = [j for j, r in enumerate(every) if limit is None or (r[3] and r[2] <= limit)]
        if not at:
            return None
        rows = [every[j] for j in at]
        swap_bw = self.swap_bandwidth(acc)
        extra = self.extra_forward_s(acc, cards)
        cands = [Learner(None, r[0], r[0] + extra, r[1], r[2], R.state_swap_time(r[1], swap_bw) if shared else 0.0)
                 for r in rows]
        i = self._choose(shared, cands)
        plans = self.caches.setdefault("plans", {})  # the full evaluation of a tabulated plan, once
        if (acc, cards, at[i]) not in plans:
            sp = self._space(acc, None)
            plans[(acc, cards, at[i])] = evaluate(sp.sc, sp.plan(rows[i][4]))
        return replace(cands[i], plan=plans[(acc, cards, at[i])])

    def _learner_from_solver(self, acc: str, cards: int, limit: float | None, shared: bool) -> Learner | None:
        sp = self._space(acc, limit)
        enforce = TRAINER_STRUCTURAL | (TRAINER_MEMORY if limit is not None else frozenset())
        qs = self.task.kept_sync
        clock = self.clock()  # the RL solve's one clock: each learner solve gets what is left of it
        K = 1
        while True:
            backend = self.backend if K <= MAX_TOP else backends.EXHAUSTIVE
            clock.check("solving the learner plans")
            req = Request(objective="time", enforce=enforce, top=K, cards=(cards,), time_limit=clock.remaining(0.01),
                          seed=self.req.seed, workers=self.req.workers, clock=clock)
            res = core.solve(sp.sc, backend, req, space=sp)
            self.caches["solves"][0] += 1
            if res.status == Status.UNKNOWN:  # no answer within what was left of the limit
                clock.reached, clock.phase = True, clock.phase or "solving the learner plans"
                raise TimeLimitReached(clock.phase)
            if not res.plans:
                return None
            cands = [self._learner_from(ev, acc, cards, shared) for ev in res.plans]
            best = cands[self._choose(shared, cands)]
            # every plan not fetched is at least as slow as the last one fetched, and swaps are >= 0
            if not shared or len(res.plans) < K or qs * cands[-1].full_s >= qs * best.full_s + best.swap_s:
                return best
            K = K * 4 if K * 4 <= MAX_TOP else 10**7

    # -- rollout stages ------------------------------------------------------------------------
    def rollout(self, acc: str, cards: int, tp: int, batch: int, kv_enforced: bool = True) -> dict[str, Any]:
        """Generation and verification of one step on ``cards`` rollout cards in engines of ``tp``
        cards (cached): the relations of :mod:`tpopt.models.generation` under the scenario's
        assumptions. Without ``rl.kv_capacity`` the batch is the engine limit."""
        key = (acc, cards, tp, batch, kv_enforced)
        cache = self.caches["rollout"]
        if key in cache:
            known: dict[str, Any] = cache[key]
            return known
        task, a = self.task, self.sc.model
        A = self.sc.system(acc).acc
        P, G, Rb = task.prompts_per_step, task.samples_per_prompt, task.batch
        engines = cards // tp
        prompts_e = math.ceil(P / engines)
        n_e = prompts_e * G
        w_policy = gen.weight_bytes_per_card(self.policy_params, tp, task.weight_bytes)
        w_all = self.generation_weights(tp)
        kv_tok = gen.kv_bytes_per_token(a.layers, a.kv_heads, a.head_dim, task.kv_bytes, tp)
        pool = gen.kv_pool(A.memory_usable, w_all, task.common, task.kv_pool)
        longest = gen.longest_of(task.response, Rb)
        longest_prompt = gen.longest_of(task.prompt, P)
        m2 = gen.second_moment(task.response, longest)
        c_mem = gen.live_context(task.prompt.mean, task.response.mean, m2, share=G)
        c_read = gen.live_context(task.prompt.mean, task.response.mean, m2)
        b_fit = gen.max_concurrent(pool, kv_tok, c_mem)
        if (longest_prompt + longest) * kv_tok > pool:
            b_fit = 0
        if batch:
            b = min(batch, n_e)
        else:
            b = min(b_fit, task.max_sequences, n_e) if kv_enforced else min(task.max_sequences, n_e)
        out: dict[str, Any] = {"engines": engines, "prompts_per_engine": prompts_e, "samples_per_engine": n_e,
               "weights": w_all, "policy_weights": w_policy, "kv_per_token": kv_tok, "kv_pool": pool,
               "batch_fit": b_fit, "batch": b, "kv_need": max(b * c_mem, longest_prompt + longest) * kv_tok,
               "longest_response": longest, "longest_prompt": longest_prompt, "live_context": c_mem,
               "read_context": c_read}
        if b < 1:
            out.update(prefill_s=math.inf, decode={}, generate_s=math.inf, tail_stretch=0.0, verify_s=math.inf,
                       rollout_s=math.inf, r_gen=0.0, r_verify=0.0)
            cache[key] = out
            return out
        peak, eff, lat = A.peak_flops, task.inference_efficiency, task.allreduce_latency
        ng = gemm_params(a)
        pre = gen.prefill_time(prompts_e, gen.prefill_flops(ng, a.layers, a.d_attn, task.prompt.mean), tp, peak, eff,
                               task.prompt.mean, a.hidden, a.layers, A.intra_host_bw, lat)
        tokens = n_e * task.response.mean

        def decode(steps: float) -> gen.DecodeTime:
            return gen.decode_time(steps, tokens, w_policy, kv_tok, c_read, ng, a.layers, a.d_attn, a.hidden, tp, peak,
                                   A.hbm_bandwidth, task.hbm_efficiency, eff, A.intra_host_bw, lat)

        dec = decode(gen.decode_steps(longest, tokens, b))
        bulk = decode(gen.decode_steps(0.0, tokens, b))
        t_gen = pre + dec["time_s"]
        v = task.verifier
        if v.kind == "cpu":
            t_ver = R.cpu_verify_time(Rb, v.seconds_per_sample, v.workers)
        elif v.kind == "reward-model":
            rm = cast(ModelArch, v.reward_model)  # a reward-model verifier has its model
            seq = task.prompt.mean + task.response.mean
            t_ver = gen.prefill_time(n_e, gen.prefill_flops(gemm_params(rm), rm.layers, rm.d_attn, seq), tp, peak, eff,
                                     seq, rm.hidden, rm.layers, A.intra_host_bw, lat)
        else:
            t_ver = 0.0
        out.update(prefill_s=pre, decode=dec, generate_s=t_gen,
                   tail_stretch=gen.tail_stretch(t_gen, pre + bulk["time_s"]), verify_s=t_ver,
                   rollout_s=R.rollout_time(t_gen, t_ver, v.kind, v.seconds_per_sample),
                   r_gen=Rb / t_gen, r_verify=Rb / t_ver if t_ver > 0 else math.inf)
        cache[key] = out
        return out

    # -- long-run overhead ---------------------------------------------------------------------
    def overhead(self, cards: int, backlog_enforced: bool = True) -> dict[str, Any]:
        """The save interval and mode of the scenario's domain with the least overhead L for the
        whole job's cards (intervals shorter than the write time are avoided when enforced)."""
        key = (cards, backlog_enforced)
        cache = self.caches["overhead"]
        if key not in cache:
            sc = self.sc
            write = T.checkpoint_write_time(sc)
            best: tuple[bool, float, str, float] | None = None
            for mode in sc.search.save_mode:
                for tau in sc.search.save_interval_s:
                    iv = float(T.optimal_save_interval(sc, cards, mode)) if tau == 0.0 else float(tau)
                    cand = (backlog_enforced and write > iv, float(T.overhead(sc, mode, cards, iv)), mode, iv)
                    if best is None or cand[:2] < best[:2]:
                        best = cand
            assert best is not None  # the scenario's save modes and intervals are not empty
            cache[key] = {"overhead": best[1], "save_mode": best[2], "save_interval_s": best[3], "write_s": write}
        overhead: dict[str, Any] = cache[key]
        return overhead

    # -- one RL plan -----------------------------------------------------------------------------
    def evaluate(self, d: RLDecision, learner: Learner, enforced: Collection[str] = FAMILIES) -> RLEvaluation:
        """Metrics and family checks of one RL decision with one learner plan (pure arithmetic)."""
        task, sc = self.task, self.sc
        s = sc.system(d.accelerator)
        A = s.acc
        g = A.cards_per_host
        Rb = task.batch
        ro = self.rollout(d.accelerator, d.rollout_cards, d.rollout_tp, d.rollout_batch, F.RL_KV_CAPACITY in enforced)
        q = task.kept if d.staleness >= 1 else task.kept_sync
        recv = self.receive_bytes(d)
        nics = self.nics(d.accelerator)
        shared = d.placement == "shared"
        if shared:
            sync_s, swap_s = R.local_sync_time(recv, A.intra_host_bw), learner.swap_s
        else:
            host_bw = R.host_nic_bandwidth(A.fabric, d.cards, nics)
            sync_s = R.network_sync_time(recv, d.rollout_cards, g, host_bw, d.learner_cards // g * host_bw)
            swap_s = 0.0
        cycle = R.cycle_time(ro["rollout_s"], q * learner.full_s, sync_s, d.staleness, swap_s)
        steps = R.steps_needed(task.samples, q, Rb)
        cards = d.cards
        ov = self.overhead(cards, F.CHECKPOINT in enforced)
        L = ov["overhead"]
        finish = sc.task.reserved_s + steps * cycle * (1.0 + L)
        cost = self.rate(d.accelerator, cards) * finish
        r_learn = Rb / learner.full_s if learner.full_s > 0 else math.inf
        bound = R.effective_sample_rate(ro["r_gen"], ro["r_verify"], r_learn, q)
        needed = task.samples * (1.0 + L) / (sc.task.deadline_s - sc.task.reserved_s)
        stages = {"generation": q * ro["r_gen"], "verification": q * ro["r_verify"], "learning": r_learn}
        usable, common, pool, w_gen = A.memory_usable, task.common, ro["kv_pool"], ro["weights"]
        checks = {F.RL_LEARNER_MEMORY: (learner.memory, usable), F.RL_KV_CAPACITY: (ro["kv_need"], pool)}
        naive = staged = switch = None
        if shared:
            received = recv + w_gen - ro["policy_weights"]
            naive, staged = R.handoff_peaks(learner.memory, w_gen, pool, common, receive=received)
            switch = learner.memory + received + common
            checks[F.RL_HANDOFF_MEMORY] = (staged, usable)
            checks[F.RL_ROLLOUT_MEMORY] = (w_gen + pool + common, usable)
        else:
            sync_peak = w_gen + common + (recv if d.weight_sync == "broadcast" else 0.0)
            checks[F.RL_ROLLOUT_MEMORY] = (max(w_gen + pool + common, sync_peak), usable)
        checks[F.RL_STALENESS] = (float(d.staleness), float(task.staleness))
        checks[F.CHECKPOINT] = (ov["write_s"], ov["save_interval_s"])
        checks[F.DEADLINE] = (finish, sc.task.deadline_s)
        checks[F.RL_STAGE_BALANCE] = (needed, bound)
        checks[F.CARDS] = (float(cards), float(sc.search.max_cards))
        checks[F.BUDGET] = (cost, math.inf if sc.cost.max_cost is None else sc.cost.max_cost)
        metrics = {
            "cards": cards, "hosts": cards // g, "kept": q, "samples_per_step": Rb, "steps": steps, "rollout": ro,
            "learn_full_s": learner.full_s, "learn_s": q * learner.full_s, "learner_step_s": learner.step_s,
            "extra_forward_s": learner.full_s - learner.step_s, "sync_s": sync_s, "swap_s": swap_s,
            "sync_bytes_per_card": recv, "sync_bytes_total": recv * d.rollout_cards, "cycle_s": cycle,
            "cycle_sync_s": R.cycle_time(ro["rollout_s"], task.kept_sync * learner.full_s, sync_s, 0, swap_s),
            "cycle_async_s": None if shared else R.cycle_time(ro["rollout_s"], task.kept * learner.full_s, sync_s, 1),
            "r_gen": ro["r_gen"], "r_verify": ro["r_verify"], "r_learn": r_learn, "stage_rates": stages,
            "bottleneck": min(stages, key=stages.__getitem__), "pipeline_bound": bound,
            "effective_rate": q * Rb / cycle, "needed_rate": needed,
            "break_even_kept": None if shared else R.break_even_kept(ro["rollout_s"], learner.full_s, sync_s,
                                                                     task.kept_sync),
            "overhead": L, "save_interval_s": ov["save_interval_s"], "save_mode": ov["save_mode"],
            "train_s": steps * cycle, "finish_s": finish, "cost": cost,
            "cost_unit": "USD" if s.price_card_hour is not None else "card-hours",
            "handoff_naive": naive, "handoff_staged": staged, "handoff_switch": switch, "usable": usable,
            "common": common,
            "learner_memory": learner.memory, "learner_states": learner.states,
        }
        return RLEvaluation(decision=d, learner=learner, metrics=metrics, checks=checks)


class DecisionGrid:
    """The RL decisions of a problem's card limit as columns (one entry per decision, in the order of
    :meth:`RLProblem.grid`), with the decision-only figures of :meth:`RLProblem.evaluate` tabulated once
    per distinct (accelerator, cards, TP, batch) and per enforcement of ``rl.kv_capacity`` and
    ``checkpoint.backlog``. :func:`vector_checks` evaluates a whole selection against one learner bound
    or plan with the same arithmetic as the scalar evaluation, so both give the same bits."""

    def __init__(self, accs: list[str], placements: list[str], methods: list[str],
                 cols: dict[str, np.ndarray], blocks: int) -> None:
        self.blocks = blocks  # (accelerator, placement, TP, learner cards) blocks listed
        self.accs, self.placements, self.methods = accs, placements, methods
        self.acc, self.pl, self.cl, self.cr = cols["acc"], cols["pl"], cols["cl"], cols["cr"]
        self.tp, self.b, self.st, self.ws = cols["tp"], cols["b"], cols["st"], cols["ws"]
        self.shared = np.array([p == "shared" for p in placements], dtype=bool)[self.pl] if placements \
            else np.zeros(0, dtype=bool)
        self.cards = np.where(self.shared, self.cl, self.cl + self.cr)
        self.size = int(self.acc.size)
        self._static: dict[tuple[bool, bool], dict[str, np.ndarray]] = {}
        self._keys: dict[tuple[bool, bool], dict[int, LearnerKey]] = {}  # learner key per decision code

    @classmethod
    def build(cls, pb: RLProblem, clock: Clock | None = None) -> DecisionGrid:
        """The columns of :meth:`RLProblem.grid`: per block (accelerator, placement, TP, learner cards) its
        rollout card counts (the learner's on shared cards, else the first k hosts' g, 2g, ... kg) x
        batches x staleness values x sync methods, innermost last."""
        accs = pb.accelerators()
        placements = list(pb.rsc.search.placement)
        methods = list(pb.rsc.search.weight_sync)
        rows: list[tuple[int, int, int, int, int, int, int, int, int]] = []
        batches = pb._inner(placements[0])[0] if placements else (0,)
        for acc, placement, tp, learner, rollouts in pb._blocks(clock):
            _, st_values, ms = pb._inner(placement)
            rows.append((accs.index(acc), placements.index(placement), tp, learner, len(rollouts), len(st_values),
                         len(ms), pb.sc.system(acc).acc.cards_per_host, int(placement == "shared")))
        blk = np.array(rows, dtype=np.int64).reshape(-1, 9)
        a, pl, t, cl, k, ns, nm, g, sh = blk.T
        nb = len(batches)
        inner = nb * ns * nm
        n = k * inner
        total = int(n.sum())
        pos = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(n) - n, n)
        inner_p, ns_p, nm_p = np.repeat(inner, n), np.repeat(ns, n), np.repeat(nm, n)
        r, q = pos // inner_p, pos % inner_p
        cl_p = np.repeat(cl, n)
        st_q = (q // nm_p) % ns_p
        stales = np.array([0, 1], dtype=np.int64)
        cols = {"acc": np.repeat(a, n), "pl": np.repeat(pl, n), "tp": np.repeat(t, n), "cl": cl_p,
                "cr": np.where(np.repeat(sh, n) == 1, cl_p, np.repeat(g, n) * (r + 1)),
                "b": np.asarray(batches, dtype=np.int64)[q // (ns_p * nm_p)], "st": stales[st_q],
                "ws": q % nm_p}
        return cls(accs, placements, methods, cols, len(rows))

    def decision(self, j: int) -> RLDecision:
        return RLDecision(self.accs[self.acc[j]], self.placements[self.pl[j]], int(self.cl[j]), int(self.cr[j]),
                          int(self.tp[j]), int(self.b[j]), int(self.st[j]), self.methods[self.ws[j]])

    def select(self, restrict: Restrict | None) -> np.ndarray:
        """Indices of the decisions whose fields lie in ``restrict`` (field -> allowed values), in order."""
        keep = np.ones(self.size, dtype=bool)
        named = {"accelerator": (self.acc, self.accs), "placement": (self.pl, self.placements),
                 "weight_sync": (self.ws, self.methods)}
        numeric = {"learner_cards": self.cl, "rollout_cards": self.cr, "rollout_tp": self.tp,
                   "rollout_batch": self.b, "staleness": self.st, "cards": self.cards}
        for k, allowed in (restrict or {}).items():
            if k in named:
                codes, names = named[k]
                keep &= np.array([n in allowed for n in names] + [False], dtype=bool)[codes]
            else:
                col = numeric[k]
                values = np.unique(col)
                ok = np.array([int(v) in allowed for v in values], dtype=bool)
                keep &= ok[np.searchsorted(values, col)] if values.size else keep
        return np.flatnonzero(keep)

    def static(self, pb: RLProblem, kv_enforced: bool, backlog_enforced: bool) -> dict[str, np.ndarray]:
        """Per decision, what :meth:`RLProblem.evaluate` takes from the decision alone (cached)."""
        key = (kv_enforced, backlog_enforced)
        if key in self._static:
            return self._static[key]
        n = self.size
        out: dict[str, np.ndarray] = {}
        # rollout stages per distinct (accelerator, rollout cards, TP, batch)
        rkey = ((self.acc * (self.cr.max(initial=0) + 1) + self.cr) * (self.tp.max(initial=0) + 1) + self.tp) \
            * (self.b.max(initial=0) + 1) + self.b
        uniq, first, inv = np.unique(rkey, return_index=True, return_inverse=True)
        names = ("rollout_s", "r_gen", "r_verify", "kv_need", "kv_pool", "weights", "policy_weights")
        table = np.empty((len(names), uniq.size))
        for u, j in enumerate(first):
            ro = pb.rollout(self.accs[self.acc[j]], int(self.cr[j]), int(self.tp[j]), int(self.b[j]), kv_enforced)
            table[:, u] = [float(ro[k]) for k in names]
        for r, k in enumerate(names):
            out[k] = table[r][inv]
        # per accelerator
        A = [pb.sc.system(a).acc for a in self.accs]
        g = np.array([a.cards_per_host for a in A], dtype=np.int64)[self.acc]
        out["usable"] = np.array([a.memory_usable for a in A], dtype=float)[self.acc]
        intra = np.array([a.intra_host_bw for a in A], dtype=float)[self.acc]
        # weights received per rollout card (per TP and method)
        dense = pb.task.weight_bytes * pb.policy_params
        recv = np.empty(n)
        for t in np.unique(self.tp):
            for w, m in enumerate(self.methods):
                sel = (self.tp == t) & (self.ws == w)
                recv[sel] = R.sync_bytes_per_card(dense, 0.0, int(t), 1, m == "sharded")
        out["recv"] = recv
        # weight sync: local on shared cards, over the NICs between separate groups
        ckey = self.acc * (self.cards.max(initial=0) + 1) + self.cards
        cu, cfirst, cinv = np.unique(ckey, return_index=True, return_inverse=True)
        host_bw = np.empty(cu.size)
        rate = np.empty(cu.size)
        ov = np.empty((3, cu.size))
        for u, j in enumerate(cfirst):
            acc, cards = self.accs[self.acc[j]], int(self.cards[j])
            host_bw[u] = R.host_nic_bandwidth(A[self.acc[j]].fabric, cards, pb.nics(acc))
            rate[u] = pb.rate(acc, cards)
            o = pb.overhead(cards, backlog_enforced)
            ov[:, u] = (o["overhead"], o["save_interval_s"], o["write_s"])
        hb = host_bw[cinv]
        crf = self.cr.astype(float)
        network = np.maximum(crf * recv / ((self.cl // g) * hb), np.minimum(g, self.cr) * recv / hb)
        out["sync_s"] = np.where(self.shared, recv / intra, network)
        out["rate"] = rate[cinv]
        out["overhead"], out["save_interval_s"], out["write_s"] = ov[0][cinv], ov[1][cinv], ov[2][cinv]
        self._static[key] = out
        return out

    def learner_keys(self, pb: RLProblem, idx: np.ndarray, enforced: Collection[str]
                     ) -> tuple[np.ndarray, list[LearnerKey]]:
        """The learner key of each decision ``idx`` (:meth:`RLProblem.learner_key`) as an id into the list
        of distinct keys returned with it."""
        code = ((((self.acc[idx] * (self.cl.max(initial=0) + 1) + self.cl[idx]) * (self.tp.max(initial=0) + 1)
                  + self.tp[idx]) * max(len(self.methods), 1) + self.ws[idx]) * 2 + self.shared[idx])
        uniq, first, inv = np.unique(code, return_index=True, return_inverse=True)
        keys: list[LearnerKey] = []
        ids: dict[LearnerKey, int] = {}
        of_code = np.empty(uniq.size, dtype=np.int64)
        known = self._keys.setdefault((F.RL_LEARNER_MEMORY in enforced, F.RL_HANDOFF_MEMORY in enforced), {})
        for pos, (u, j) in enumerate(zip(uniq.tolist(), first.tolist(), strict=True)):
            k = known.get(u)
            if k is None:
                k = known[u] = pb.learner_key(self.decision(int(idx[j])), enforced)
            if k not in ids:
                ids[k] = len(keys)
                keys.append(k)
            of_code[pos] = ids[k]
        return of_code[inv], keys


def vector_checks(pb: RLProblem, grid: DecisionGrid, idx: np.ndarray, full_s: np.ndarray | float,
                  swap_s: np.ndarray | float, memory: np.ndarray | float, enforced: Collection[str],
                  objective: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(feasible, first key, second key) of the decisions ``idx`` with learners of full-batch time
    ``full_s``, state swap ``swap_s`` and peak memory ``memory`` (scalars or one per decision): the
    relations of :meth:`RLProblem.evaluate`, term for term in the same order, over arrays."""
    task, sc = pb.task, pb.sc
    S = grid.static(pb, F.RL_KV_CAPACITY in enforced, F.CHECKPOINT in enforced)
    whole = idx.size == grid.size  # the whole grid (idx is then 0 .. size - 1): no copies
    c = S if whole else {k: v[idx] for k, v in S.items()}
    st, shared = (grid.st, grid.shared) if whole else (grid.st[idx], grid.shared[idx])
    cards = grid.cards if whole else grid.cards[idx]
    stale = st >= 1
    Rb = task.batch
    q = np.where(stale, task.kept, task.kept_sync)
    full = np.broadcast_to(np.asarray(full_s, dtype=float), idx.shape)
    learn = q * full
    swap = np.where(shared, np.broadcast_to(np.asarray(swap_s, dtype=float), idx.shape), 0.0)
    cycle = np.where(stale, np.maximum(c["rollout_s"], learn) + c["sync_s"],
                     c["rollout_s"] + learn + c["sync_s"] + swap)
    steps = np.where(stale, float(R.steps_needed(task.samples, task.kept, Rb)),
                     float(R.steps_needed(task.samples, task.kept_sync, Rb)))
    L = c["overhead"]
    finish = sc.task.reserved_s + steps * cycle * (1.0 + L)
    cost = c["rate"] * finish
    positive = full > 0
    r_learn = np.where(positive, Rb / np.where(positive, full, 1.0), math.inf)
    bound = np.minimum(r_learn, q * np.minimum(c["r_gen"], c["r_verify"]))
    needed = task.samples * (1.0 + L) / (sc.task.deadline_s - sc.task.reserved_s)
    common, pool, w_gen, recv = task.common, c["kv_pool"], c["weights"], c["recv"]
    mem = np.broadcast_to(np.asarray(memory, dtype=float), idx.shape)
    received = recv + w_gen - c["policy_weights"]
    staged = np.maximum(np.maximum(mem + common, mem + received + common),
                        np.maximum(w_gen + common, w_gen + pool + common))
    broadcast = np.array([m == "broadcast" for m in grid.methods] + [False], dtype=bool)[grid.ws[idx]]
    sync_peak = w_gen + common + np.where(broadcast, recv, 0.0)
    rollout_mem = np.where(shared, w_gen + pool + common, np.maximum(w_gen + pool + common, sync_peak))
    checks: dict[str, tuple[Any, Any]] = {
        F.RL_LEARNER_MEMORY: (mem, c["usable"]), F.RL_KV_CAPACITY: (c["kv_need"], pool),
        F.RL_ROLLOUT_MEMORY: (rollout_mem, c["usable"]),
        F.RL_STALENESS: (st.astype(float), float(task.staleness)),
        F.CHECKPOINT: (c["write_s"], c["save_interval_s"]), F.DEADLINE: (finish, sc.task.deadline_s),
        F.RL_STAGE_BALANCE: (needed, bound), F.CARDS: (cards.astype(float), float(sc.search.max_cards)),
        F.BUDGET: (cost, math.inf if sc.cost.max_cost is None else sc.cost.max_cost)}
    ok = np.ones(idx.shape, dtype=bool)
    for f in enforced:
        if f in STRUCTURAL:
            continue
        if f == F.RL_HANDOFF_MEMORY:
            ok &= ~shared | (staged <= c["usable"] * (1 + 1e-12))
        elif f in checks:
            v, lim = checks[f]
            ok &= v <= lim * (1 + 1e-12)
    if objective == "cards":
        return ok, cards.astype(float), cost
    return (ok, cost, finish) if objective == "cost" else (ok, finish, cost)


# ---------------------------------------------------------------------------------------------
# the exact search and the brute-force oracle


def solve(pb: RLProblem, objective: str = "cost", enforced: Collection[str] = FAMILIES,
          restrict: Restrict | None = None) -> RLResult:
    """The best RL plan (lexicographic (cost, finish) or (finish, cost)), proven optimal.

    One time limit for the whole RL solve: the request's clock (``pb.req.clock``, shared by every
    solve of one ``tpopt rl`` run, its analysis included) or, without one, a clock of
    ``pb.req.time_limit`` for this call. The search and every learner solve draw on what is left of
    it. When it runs out, the best verified RL plan so far is returned with status ``feasible`` (not
    proven optimal: a better plan may use a learner key not yet solved, or a learner plan the cut-short
    solve did not find), or ``unknown`` when none was found; ``stats`` says where it stopped."""
    if objective not in OBJECTIVES + ("cards",):
        raise InputError(f"unknown objective {objective!r} (use cost or time)")
    enforced = tuple(f for f in FAMILIES if f in set(enforced))
    if pb.req.clock is None:  # no shared clock: this solve's own limit
        pb = pb.with_request(replace(pb.req))
    clock = clock_of(pb.req)
    t0 = time.perf_counter()
    solves0 = pb.caches["solves"][0]
    while True:
        bound_ok = pb.caches["bound_ok"][0]
        best, stats, limited = _search(pb, objective, enforced, restrict, clock)
        if limited or pb.caches["bound_ok"][0] == bound_ok:  # else a learner beat the bound: search again
            break
    stats.update(wall_s=time.perf_counter() - t0, learner_solves=pb.caches["solves"][0] - solves0,
                 time_limit_reached=limited, limit_phase=(clock.phase or None) if limited else None,
                 time_limit_s=clock.seconds)
    if limited:
        status = Status.FEASIBLE if best else Status.UNKNOWN
    else:
        status = Status.OPTIMAL if best else Status.INFEASIBLE
    return RLResult(status, objective, best, enforced, stats)


def _search(pb: RLProblem, objective: str, enforced: tuple[str, ...], restrict: Restrict | None, clock: Clock
            ) -> tuple[RLEvaluation | None, dict[str, Any], bool]:
    """The bound-ordered search; returns (best, stats, limited): ``limited`` when the clock stopped it
    before the optimum was proven (``best`` is then the best verified plan so far, or None).

    Vectorised over the decision grid (:class:`DecisionGrid`, :func:`vector_checks`): every decision is
    bounded at once, and each solved learner key's decisions are checked at once; only the best of a
    key is evaluated in full (:meth:`RLProblem.evaluate`). Ties go to the earlier decision of the grid."""
    stats: dict[str, Any] = {"points": None, "learner_keys": 0, "learner_keys_solved": 0}
    try:
        grid = pb.decisions(clock)
        if grid.blocks:  # as listing the decisions checks the clock once per learner card count
            clock.check("building the RL decisions")
    except TimeLimitReached:  # cut short while listing the decisions: nothing verified yet
        return None, stats, True
    sel = grid.select(restrict)
    stats["points"] = int(sel.size)
    if sel.size and clock.expired("bounding the RL decisions"):
        return None, stats, True
    # the learner bound per (accelerator, learner cards)
    bkey = grid.acc[sel] * (grid.cl.max(initial=0) + 1) + grid.cl[sel]
    bu, bfirst, binv = np.unique(bkey, return_index=True, return_inverse=True)
    lb = np.array([pb.learner_bound(grid.accs[grid.acc[sel[j]]], int(grid.cl[sel[j]])).full_s for j in bfirst])
    ok, k1, k2 = vector_checks(pb, grid, sel, lb[binv], 0.0, 0.0, enforced, objective)
    fsel, k1, k2 = sel[ok], k1[ok], k2[ok]  # a relaxation: infeasible here is infeasible with any learner plan
    gid, keys = grid.learner_keys(pb, fsel, enforced)
    stats["learner_keys"] = len(keys)
    order = np.lexsort((fsel, k2, k1))  # by (bound key, grid index)
    gsorted, ksorted = gid[order], k1[order]
    seen = np.sort(np.unique(gsorted, return_index=True)[1])
    ranked = gsorted[seen].tolist()  # keys by their best bound
    group_min = dict(zip(ranked, ksorted[seen].tolist(), strict=True))
    members = np.argsort(gid, kind="stable")
    starts = np.searchsorted(gid[members], np.arange(len(keys) + 1))
    best: RLEvaluation | None = None
    best_rank: Rank | None = None
    limited = False
    for g in ranked:
        if best_rank is not None and group_min[g] > best_rank[0][0]:
            break  # every remaining bound is worse than the best verified plan
        if clock.expired("solving the learner plans"):
            limited = True
            break
        try:
            learner = pb.learner(keys[g])
        except TimeLimitReached:
            limited = True
            break
        stats["learner_keys_solved"] += 1
        if learner is not None:
            idx = fsel[members[starts[g]:starts[g + 1]]]
            ok, a, b = vector_checks(pb, grid, idx, learner.full_s, learner.swap_s, learner.memory, enforced,
                                     objective)
            if ok.any():
                cand = idx[ok][np.lexsort((idx[ok], b[ok], a[ok]))[0]]
                ev = pb.evaluate(grid.decision(int(cand)), learner, enforced)
                if ev.feasible(enforced):
                    rank = (ev.key(objective), int(cand))
                    if best_rank is None or rank < best_rank:
                        best, best_rank = ev, rank
        if clock.reached:  # the learner solve was cut short: its plan is feasible, not proven the fastest
            limited = True
            break
    return best, stats, limited


def trainer_points(pb: RLProblem, acc: str) -> dict[int, list[TrainerPoint]]:
    """Every learner plan of the scenario's trainer space on ``acc`` by card count (cached):
    (step, states, peak memory, host-memory rule met, assignment) from the vectorised evaluator
    (:func:`tpopt.optimizer.enumerate.chunks`), for the plans that meet the layout rules."""
    cache = pb.caches["space"]
    if (acc, "points") in cache:
        known: dict[int, list[TrainerPoint]] = cache[(acc, "points")]
        return known
    out: dict[int, list[TrainerPoint]] = {}
    for fixed, idx_lists, shape, r in chunks(pb._space(acc, None)):
        ok = np.ones(shape, dtype=bool)
        for f in TRAINER_STRUCTURAL:
            v, lim = r[("c", f)]
            ok &= np.broadcast_to(v <= lim, shape)
        host_v, host_lim = r[("c", F.MEMORY_HOST)]
        flat = {k: np.broadcast_to(x, shape).reshape(-1) for k, x in
                (("cards", r["cards"]), ("step", r["step_s"]), ("states", r["states"]),
                 ("mem", r["memory_per_card"]), ("host", host_v <= host_lim))}
        for j in np.flatnonzero(ok.reshape(-1)):
            coords = np.unravel_index(j, shape)
            idx = dict(fixed, **{a: idx_lists[k][c]
                                 for k, (a, c) in enumerate(zip(NUMERIC_AXES, coords, strict=False))})
            out.setdefault(int(flat["cards"][j]), []).append(
                (float(flat["step"][j]), float(flat["states"][j]), float(flat["mem"][j]), bool(flat["host"][j]), idx))
    cache[(acc, "points")] = out
    return out


def brute_force(pb: RLProblem, objective: str = "cost", enforced: Collection[str] = FAMILIES) -> RLEvaluation | None:
    """Every RL decision with every learner plan, no solver and no bound: the oracle."""
    enforced = tuple(f for f in FAMILIES if f in set(enforced))
    best: RLEvaluation | None = None
    best_rank: Rank | None = None
    plans = {acc: trainer_points(pb, acc) for acc in pb.accelerators()}
    for i, d in enumerate(pb.grid()):
        shared = d.placement == "shared"
        memory_rules = F.RL_LEARNER_MEMORY in enforced or (shared and F.RL_HANDOFF_MEMORY in enforced)
        for step, states, mem, host_ok, _ in plans[d.accelerator].get(d.learner_cards, []):
            if memory_rules and not host_ok:
                continue  # the learner's host-memory rule (offload) goes with its memory families
            swap = R.state_swap_time(states, pb.swap_bandwidth(d.accelerator)) if shared else 0.0
            ln = Learner(None, step, step + pb.extra_forward_s(d.accelerator, d.learner_cards), states, mem, swap)
            ev = pb.evaluate(d, ln, enforced)
            if ev.feasible(enforced):
                rank = (ev.key(objective), i)
                if best_rank is None or rank < best_rank:
                    best, best_rank = ev, rank
    return best


# ---------------------------------------------------------------------------------------------
# what limits the optimum, alternatives, infeasibility, the async break-even (the questions are
# tpopt.optimizer.analysis's, put to an RLOracle)

REL = analysis.REL
GRID_LIMIT = 200_000  # RL decisions a relaxation question may enumerate (cards.max dropped)


def summary(ev: RLEvaluation) -> dict[str, Any]:
    """An RL plan's decisions and headline figures, as reports quote it."""
    d, m = ev.decision, ev.metrics
    return {"accelerator": d.accelerator, "placement": d.placement, "cards": d.cards,
            "learner_cards": d.learner_cards, "rollout_cards": d.rollout_cards, "rollout_tp": d.rollout_tp,
            "rollout_batch": m["rollout"]["batch"], "staleness": d.staleness, "weight_sync": d.weight_sync,
            "cycle_s": m["cycle_s"], "finish_days": m["finish_s"] / DAY, "cost": m["cost"],
            "cost_unit": m["cost_unit"], "bottleneck": m["bottleneck"]}


def objective_value(ev: RLEvaluation, objective: str) -> float:
    """The objective in display units: cost, or finish time in days."""
    value: float = ev.metrics["cost"] if objective == "cost" else ev.metrics["finish_s"] / DAY
    return value


def violation(ev: RLEvaluation, family: str) -> dict[str, Any]:
    """A family's value against its limit for one plan, in the family's unit."""
    unit, scale, _ = SPEC[family]
    if family not in ev.checks:
        return {"name": family}
    v, lim = ev.checks[family]
    return {"name": family, "value": v / scale, "limit": None if math.isinf(lim) else lim / scale, "unit": unit}


QUOTE = analysis.Quote(objective_value, summary, violation)  # how the reports quote an RL plan


def _better(a: RLEvaluation, b: RLEvaluation, objective: str) -> bool:
    """``a`` strictly better than ``b``: key(a) < key(b) (1 - REL) on the objective's first key."""
    return bool(a.key(objective)[0] < b.key(objective)[0] * (1 - REL))


def _wider_problem(pb: RLProblem) -> RLProblem | None:
    """The problem a question without cards.max needs: a card grid up to 8x (else 4x, 2x) the cap, the
    largest whose RL decisions stay enumerable; None if none does, or if the run's clock ran out while
    the grids were counted (nothing cached then: the question is solved on the problem's own grid, whose
    solve sees the clock has run out and says so)."""
    cache = pb.caches.setdefault("relaxed", {})
    if pb.card_limit not in cache:
        found = None
        try:
            for factor in (8, 4, 2):
                p2 = pb.with_card_limit(factor * pb.sc.search.max_cards)
                if p2.grid_size(clock=pb.req.clock) <= GRID_LIMIT:
                    found = p2.card_limit
                    break
        except TimeLimitReached:
            return None
        cache[pb.card_limit] = found
    limit: int | None = cache[pb.card_limit]
    return None if limit is None else pb.with_card_limit(limit)


class RLOracle:
    """The :class:`tpopt.optimizer.analysis.Oracle` of the RL reports: the best RL plan under a set of
    families, one exact :func:`solve` per question. ``widen``: a question without cards.max is solved on
    the wider card grid of :func:`_wider_problem` (on the problem's own grid when none is enumerable);
    otherwise every question is solved on the problem's own grid."""

    name = "rl"

    def __init__(self, pb: RLProblem, widen: bool = False):
        self.pb = pb
        self.widen = widen

    def best(self, enforced: Collection[str], objective: str, restrict: dict[str, Any] | None = None,
             cards: Iterable[int] | None = None) -> RLEvaluation | None:
        pb = self.pb
        if self.widen and F.CARDS not in enforced:
            pb = _wider_problem(pb) or pb
        if cards is not None:  # the card counts as a restriction of the decisions' ``cards``
            restrict = {**(restrict or {}), "cards": set(cards)}
        return solve(pb, objective, enforced, restrict).best


def binding(pb: RLProblem, best: RLEvaluation, objective: str, enforced: Collection[str]) -> list[dict[str, Any]]:
    """Families that bind: dropping one alone admits a strictly better plan (which is quoted). Dropping
    cards.max is asked on the wider card grid; when no wider grid is enumerable, cards.max is not asked."""
    cards = F.CARDS in enforced
    skip = (F.CARDS,) if cards and _wider_problem(pb) is None else ()
    found = analysis.binding(RLOracle(pb, widen=cards), best, objective, enforced, RELAXABLE, _better, skip)
    return [analysis.binding_entry(f, alt, best, objective, QUOTE) for f, alt in found]


def _ruled_out(pb: RLProblem, objective: str, enforced: Collection[str], restrict: dict[str, Any]
               ) -> list[dict[str, Any]]:
    """Families that alone rule the restricted alternative out, with the best plan's value against the
    limit once that family is dropped (on the problem's own card grid)."""
    found = analysis.ruled_out(RLOracle(pb), objective, enforced, RELAXABLE, restrict)
    return [violation(alt, f) for f, alt in found] or \
        [{"name": "no single constraint family: several rule it out together"}]


def alternatives(pb: RLProblem, best: RLEvaluation, objective: str, enforced: Collection[str]
                 ) -> list[dict[str, Any]]:
    """What a user would ask next: the other placement, staleness, weight sync, one host fewer,
    other accelerators; each feasible-but-worse (with its objective) or ruled out (and by what)."""
    d = best.decision
    g = pb.sc.system(d.accelerator).acc.cards_per_host
    asks: list[tuple[str, dict[str, Any]]] = []
    for p in pb.rsc.search.placement:
        if p != d.placement:
            asks.append((f"{p} cards", {"placement": [p], "accelerator": [d.accelerator]}))
    if d.placement == "separate":
        other = 1 - d.staleness
        asks.append(("one-step async" if other else "synchronous",
                     {"placement": ["separate"], "staleness": [other], "accelerator": [d.accelerator]}))
    for m in pb.rsc.search.weight_sync:
        if m != d.weight_sync:
            asks.append((f"{m} weight sync", {"weight_sync": [m], "placement": [d.placement],
                                              "accelerator": [d.accelerator]}))
    if d.cards > g:
        asks.append((f"{d.cards - g} cards or fewer", {"cards": set(range(1, d.cards - g + 1)),
                                                       "accelerator": [d.accelerator]}))
    for a in pb.accelerators():
        if a != d.accelerator:
            asks.append((a, {"accelerator": [a]}))
    oracle = RLOracle(pb)
    return [analysis.alternative(oracle, QUOTE, {"alternative": label}, best, objective, enforced, restrict, None,
                                 functools.partial(_ruled_out, pb, objective, enforced, restrict))
            for label, restrict in asks]


def async_break_even(pb: RLProblem, objective: str, enforced: Collection[str], tol: float = 1e-4) -> dict[str, Any]:
    """The kept fraction above which the best one-step-async plan beats the best synchronous one,
    both re-optimised (staleness allowed or not). None when async never wins, 0 when sync is
    infeasible and async feasible at any kept fraction tried."""
    enf = [f for f in enforced if f != F.RL_STALENESS]
    sync = solve(pb, objective, enf, {"staleness": [0]}).best

    def async_wins(q: float) -> bool:
        a = solve(pb.with_task(kept=q), objective, enf, {"staleness": [1]}).best
        return a is not None and (sync is None or a.key(objective) < sync.key(objective))

    if "separate" not in pb.rsc.search.placement or not async_wins(1.0):
        return {"kept": None, "sync": None if sync is None else summary(sync)}
    lo, hi = 0.0, 1.0
    while hi - lo > tol:
        mid = (lo + hi) / 2
        if async_wins(mid):
            hi = mid
        else:
            lo = mid
    return {"kept": hi, "sync": None if sync is None else summary(sync)}


def explain_infeasible(pb: RLProblem, objective: str, enforced: Collection[str]) -> dict[str, Any]:
    """Why no RL plan is feasible: a minimal conflicting set of families (the deletion filter of
    :func:`tpopt.optimizer.analysis.conflict`, every question without cards.max on the wider card grid),
    the plan that comes closest to each, and the smallest single changes that admit a plan."""
    relax = [f for f in enforced if f in RELAXABLE]
    structural = [f for f in enforced if f in STRUCTURAL]
    oracle = RLOracle(pb, widen=True)

    def admits(families: Collection[str]) -> bool:
        """Some plan meets the structural rules and ``families``."""
        return oracle.best(structural + list(families), objective) is not None

    if oracle.best(structural, objective) is None:
        return {"conflict": [F.RL_LEARNER_LAYOUT], "conflict_detail": [
            {"name": F.RL_LEARNER_LAYOUT, "detail": "no learner layout exists at any card count up to "
                                                    f"{pb.card_limit} (batch, host and head rules)"}],
                "relaxations": []}
    conflict = analysis.conflict(admits, relax)
    detail = []
    for f in conflict:
        alt = oracle.best(structural + [g for g in conflict if g != f], objective)
        detail.append(dict(violation(alt, f), plan=summary(alt)) if alt is not None else {"name": f})
    changes: list[dict[str, Any]] = []

    def change(parameter: str, family: str, unit: str, current: float | None, required: float | None,
               plan: RLEvaluation | None) -> None:
        entry: dict[str, Any] = {"parameter": parameter, "unit": unit, "current": current, "required": required,
                 "helps": plan is not None, "plan": None if plan is None else summary(plan)}
        if plan is None:  # what still conflicts once this input is freed
            entry["still_conflicting"] = analysis.conflict(admits, [g for g in relax if g != family])
        changes.append(entry)

    def without(family: str) -> list[str]:
        return [g for g in enforced if g != family]

    if F.DEADLINE in conflict:
        fast = oracle.best(without(F.DEADLINE), "time")
        change("deadline", F.DEADLINE, "d", pb.sc.task.deadline_s / DAY,
               None if fast is None else math.ceil(fast.metrics["finish_s"] / DAY * 100) / 100, fast)
    if F.CARDS in conflict:
        few = oracle.best(without(F.CARDS), "cards")
        change("max_cards", F.CARDS, "cards", pb.sc.search.max_cards, None if few is None else few.decision.cards,
               few)
    if F.BUDGET in conflict:
        cheap = oracle.best(without(F.BUDGET), "cost")
        change("max_cost", F.BUDGET, "USD", pb.sc.cost.max_cost,
               None if cheap is None else math.ceil(cheap.metrics["cost"]), cheap)
    if F.RL_STALENESS in conflict:
        alt = oracle.best(without(F.RL_STALENESS), objective)
        change("staleness", F.RL_STALENESS, "steps", pb.task.staleness, None if alt is None else alt.decision.staleness,
               alt)
    return {"conflict": conflict, "conflict_detail": detail, "relaxations": changes}


# ---------------------------------------------------------------------------------------------
# the report (dicts ready for JSON; the CLI renders them)


def _finite(x: Any) -> Any:
    """JSON-safe numbers: inf and nan become None, recursively."""
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def constraint_rows(ev: RLEvaluation, enforced: Collection[str], binding_names: Collection[str] = ()
                    ) -> list[dict[str, Any]]:
    """Every family of a plan with value, limit, slack in its unit (stage balance after the deadline)."""
    rows = []
    for f in F.RL_REPORTED:
        if f not in ev.checks:
            continue
        unit, scale, doc = SPEC[f]
        v, lim = ev.checks[f]
        if math.isinf(lim) and not F.BY_NAME[f].shown_unbounded:
            continue
        enf = f in enforced or F.encoded_as(f) in enforced
        rows.append({"name": f, "value": v / scale, "limit": None if math.isinf(lim) else lim / scale, "unit": unit,
                     "slack": None if math.isinf(lim) else (lim - v) / scale,
                     "binding": f in binding_names or F.encoded_as(f) in binding_names,
                     "enforced": enf, "doc": doc})
    return rows


def assumptions(pb: RLProblem, ev: RLEvaluation | None = None) -> list[str]:
    """Every assumption that moves an RL plan, in words with its value."""
    t = pb.task
    r = t.response
    tail = "every response the mean length (no tail given)"
    if r.tail is not None:
        tail_p = cast(float, r.tail_p)  # given with every tail (the scenario's check)
        tail = (f"response lengths lognormal with mean {r.mean:,.0f} and p{tail_p * 100:g} {r.tail:,.0f} tokens; "
                f"the longest of the {t.batch:,} samples of a step is their {t.batch}/{t.batch + 1} quantile")
        if ev is not None:
            tail += f", {ev.metrics['rollout']['longest_response']:,.0f} tokens"
        if r.cap is not None:
            tail += f" (capped at {r.cap:,.0f})"
    out = [
        f"decode reads the weight shard once per step and the KV of every live sequence at "
        f"{t.hbm_efficiency * 100:g} % of HBM bandwidth; prefill and decode matmuls run at "
        f"{t.inference_efficiency * 100:g} % of the dense BF16 peak; TP all-reduces cost "
        f"{t.allreduce_latency * 1e3:g} ms per call plus 2(t-1)/t of the activations over the host's "
        "card-to-card link (NVLink, or PCIe without P2P)",
        f"rollout weights {t.weight_bytes:g} B/param, KV {t.kv_bytes:g} B/value; every card holds "
        f"{t.common / GIB:g} GiB for both phases (runtime buffers, engine workspace); the KV pool is "
        + (f"{t.kv_pool / GIB:g} GiB per card" if t.kv_pool is not None else "what memory leaves"),
        tail,
        "the samples of one prompt share its prefill and prompt KV (prefix sharing); a synchronous step "
        "ends with its longest response (decode steps = max(longest, tokens / batch))",
        f"the learner takes one optimizer step per rollout step on the kept samples, packed to the mean "
        f"sample length ({pb.seq:,} tokens), in q x the time of a full {t.batch:,}-sample step"
        + (f"; {t.extra_forwards} extra forward pass(es) at the scenario's efficiency" if t.extra_forwards else ""),
        "separate cards sync weights over the NICs (sharded: each rollout card receives its TP shard; "
        "broadcast: the whole policy, into a receive buffer); shared cards gather their shard inside the host "
        "and park the learner's state in host memory during generation (2 x state / host link per step); "
        "the hand-off counts the learner's whole peak per card (conservative)",
        {"cpu": "CPU verification streams next to generation (ends at max(gen + one check, verify time))",
         "reward-model": "the reward model scores every sample on the rollout cards after generation (prefill only)",
         "none": "verification is not modelled (no [rl] verifier)"}[t.verifier.kind],
        "one accelerator type for learner and rollout; each group takes whole hosts",
    ]
    return out


def report(pb: RLProblem, result: RLResult, analyse: bool = True, break_even: bool = True) -> dict[str, Any]:
    """The full answer of ``tpopt rl`` as a JSON-ready dict.

    The analysis (binding families, alternatives, break-even; for an infeasible problem the conflict
    and the relaxations) draws on the same clock as the solve when the request carries one: when that
    clock has run out, before or during the analysis, the analysis is left out (``analysis`` says so)
    rather than reported from solves that were cut short. A plan found at the time limit (``feasible``)
    gets no analysis; without a plan (``unknown``) nothing is claimed infeasible."""
    out: dict[str, Any] = {"scenario": pb.rsc.name, "status": result.status.value, "objective": result.objective,
           "solver": dict(result.stats, learner_backend=pb.backend)}
    clock = pb.req.clock

    def out_of_time() -> bool:
        return clock is not None and (clock.reached or clock.expired("analysing the RL plan"))

    if result.status == Status.UNKNOWN:
        out.update(analysis="time limit reached", conflict=[], conflict_detail=[], relaxations=[])
        out["assumptions"] = assumptions(pb)
        done: dict[str, Any] = _finite(out)
        return done
    if not result.feasible:
        why = explain_infeasible(pb, result.objective, result.enforced) if not out_of_time() else None
        if why is None or out_of_time():
            why = {"conflict": [], "conflict_detail": [], "relaxations": [], "analysis": "time limit reached"}
        out.update(why)
        out["assumptions"] = assumptions(pb)
        infeasible: dict[str, Any] = _finite(out)
        return infeasible
    if result.status != Status.OPTIMAL or out_of_time():
        analyse = break_even = False
        out["analysis"] = "time limit reached"
    ev = result.best
    assert ev is not None  # feasible: a best plan
    m, ro = ev.metrics, ev.metrics["rollout"]
    binds = binding(pb, ev, result.objective, result.enforced) if analyse else []
    lp = ev.learner.plan
    learner = None
    if lp is not None:  # the RL job saves for all its cards: its interval and mode replace the learner's
        learner = {k: v for k, v in lp.plan_dict().items() if k not in ("save_interval_s", "save_mode")}
        learner.update(save_interval_s=m["save_interval_s"], save_mode=m["save_mode"])
    out["plan"] = dict(summary(ev), learner=learner, save_interval_s=m["save_interval_s"], save_mode=m["save_mode"])
    if lp is not None:  # what the learner's figures stand on (the rollout's decode model is in "assumptions")
        out["footing"] = dict(footing.footing(pb.sc, lp.plan_dict(), lp.metrics["step_s"]), of="learner")
    out["stages"] = {
        "samples_per_step": m["samples_per_step"], "kept": m["kept"], "steps": m["steps"],
        "generation": {"time_s": ro["generate_s"], "prefill_s": ro["prefill_s"],
                       "decode_s": ro["decode"].get("time_s"), "decode_bound": ro["decode"].get("bound"),
                       "tp_comm_s": ro["decode"].get("tp_comm_s"), "tail_stretch": ro["tail_stretch"],
                       "longest_response": ro["longest_response"], "engines": ro["engines"],
                       "batch": ro["batch"], "batch_fit": ro["batch_fit"], "rate": m["r_gen"]},
        "verification": {"kind": pb.task.verifier.kind, "time_s": ro["verify_s"], "rate": m["r_verify"]},
        "rollout_s": ro["rollout_s"],
        "learning": {"time_s": m["learn_s"], "full_batch_s": m["learn_full_s"], "step_s": m["learner_step_s"],
                     "extra_forward_s": m["extra_forward_s"], "rate": m["r_learn"]},
        "weight_sync": {"time_s": m["sync_s"], "bytes_per_card": m["sync_bytes_per_card"],
                        "bytes_total": m["sync_bytes_total"], "swap_s": m["swap_s"]},
        "stage_rates": m["stage_rates"], "bottleneck": m["bottleneck"], "pipeline_bound": m["pipeline_bound"],
        "effective_rate": m["effective_rate"], "needed_rate": m["needed_rate"],
    }
    out["cycle"] = {"cycle_s": m["cycle_s"], "sync_s": m["cycle_sync_s"], "async_s": m["cycle_async_s"],
                    "break_even_kept_plan": m["break_even_kept"]}
    if break_even:
        out["cycle"]["break_even_kept"] = async_break_even(pb, result.objective, result.enforced)["kept"]
    out["finish"] = {"reserved_days": pb.sc.task.reserved_s / DAY, "train_days": m["train_s"] / DAY,
                     "overhead": m["overhead"], "finish_days": m["finish_s"] / DAY,
                     "deadline_days": pb.sc.task.deadline_s / DAY, "cost": m["cost"], "cost_unit": m["cost_unit"]}
    out["memory"] = {"usable_gib": m["usable"] / GIB, "rollout_weights_gib": ro["weights"] / GIB,
                     "kv_pool_gib": ro["kv_pool"] / GIB, "kv_need_gib": ro["kv_need"] / GIB,
                     "common_gib": m["common"] / GIB, "kv_per_token_kib": ro["kv_per_token"] / 1024,
                     "learner_gib": m["learner_memory"] / GIB, "learner_states_gib": m["learner_states"] / GIB,
                     "handoff_naive_gib": None if m["handoff_naive"] is None else m["handoff_naive"] / GIB,
                     "handoff_staged_gib": None if m["handoff_staged"] is None else m["handoff_staged"] / GIB,
                     "handoff_switch_gib": None if m["handoff_switch"] is None else m["handoff_switch"] / GIB}
    out["alternatives"] = alternatives(pb, ev, result.objective, result.enforced) if analyse else []
    if (analyse or break_even) and out_of_time():  # cut short: its answers are not proven, leave them out
        binds, out["alternatives"] = [], []
        out["cycle"].pop("break_even_kept", None)
        out["analysis"] = "time limit reached"
    out["constraints"] = constraint_rows(ev, result.enforced, {b["name"] for b in binds})
    out["binding"] = None if out.get("analysis") else binds
    out["assumptions"] = assumptions(pb, ev)
    answer: dict[str, Any] = _finite(out)
    return answer
