"""One RL scenario as a problem: its decisions, the learner plans they use, and one RL plan's figures.

:class:`RLDecision` is one RL-level decision vector; :class:`RLProblem` holds the scenario's design space, the
relations of one plan (:meth:`RLProblem.evaluate`: rollout stages, weight sync, cycle, finish, cost, every
family's value and limit) and the caches every solve of the problem and its variants shares (learner solves,
rollout stages, the long-run overhead). :class:`DecisionGrid` lists the decisions as columns;
:func:`trainer_points` tabulates the learner plans by card count from the enumerator
(:func:`tpopt.optimizer.enumerate.chunks`). The families are those of :mod:`tpopt.models.families`
(``F.RL_*``, :data:`SPEC`).
"""

from __future__ import annotations

import math
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
from tpopt.models.roofline import stack_scaled
from tpopt.models.units import GIB
from tpopt.optimizer import backends, core
from tpopt.optimizer.backends import Solver
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

    def __init__(self, rsc: RLScenario, backend: str | Solver = backends.DEFAULT, req: Request | None = None,
                 card_limit: int | None = None, caches: dict[str, Any] | None = None) -> None:
        self.backend = backends.resolve(backend)  # the learner's solver, resolved once (an unknown name fails here)
        self.rsc = rsc
        self.sc: Scenario = rsc.trainer  # the learner's pre-training scenario
        self.task = rsc.task
        self.req = req or Request()
        self.card_limit = int(card_limit or F.limit(F.CARDS, self.sc))
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
        model: eta = the card's large-GEMM efficiency as the stack's kernels reach it,
        min(1, kernel_efficiency x gemm_efficiency) (:func:`tpopt.models.roofline.stack_scaled`), x the throughput
        scale)."""
        if not self.task.extra_forwards:
            return 0.0
        s = self.sc.system(acc)
        perf = s.perf
        eta = s.efficiency * (float(stack_scaled(perf, self.sc.stack.kernel_efficiency).gemm_efficiency)
                              if s.per_op and perf is not None else 1.0)
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
        usable = F.limit(F.RL_LEARNER_MEMORY, self.sc, d.accelerator)
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
            backend = self.backend if K <= MAX_TOP else backends.resolve(backends.EXHAUSTIVE)
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
        needed = task.samples * (1.0 + L) / (F.limit(F.DEADLINE, sc) - sc.task.reserved_s)
        stages = {"generation": q * ro["r_gen"], "verification": q * ro["r_verify"], "learning": r_learn}
        usable = F.limit(F.RL_LEARNER_MEMORY, sc, d.accelerator)  # the RL memory families share this limit
        common, pool, w_gen = task.common, ro["kv_pool"], ro["weights"]
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
        checks[F.DEADLINE] = (finish, F.limit(F.DEADLINE, sc))
        checks[F.RL_STAGE_BALANCE] = (needed, bound)
        checks[F.CARDS] = (float(cards), F.limit(F.CARDS, sc))
        checks[F.BUDGET] = (cost, F.limit(F.BUDGET, sc))
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
        out["usable"] = np.array([F.limit(F.RL_LEARNER_MEMORY, pb.sc, a) for a in self.accs], dtype=float)[self.acc]
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
