"""The answer of ``tpopt rl`` (:func:`report`): dicts ready for JSON (the CLI renders them).
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any, cast

from tpopt.models import families as F
from tpopt.models import terms as T
from tpopt.models.units import DAY, GIB
from tpopt.optimizer import footing
from tpopt.optimizer.result import Status
from tpopt.optimizer.rl.oracle import alternatives, async_break_even, binding, explain_infeasible, summary
from tpopt.optimizer.rl.problem import SPEC, RLEvaluation, RLProblem, RLResult

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
           "solver": dict(result.stats, learner_backend=pb.backend.name,
                         **rounded_wall(result.stats))}
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
        save, redo, restart = (float(x) for x in T.overhead_parts(pb.sc, m["save_mode"], m["cards"],
                                                                   m["save_interval_s"]))
        job = dict(lp.metrics, overhead_save=save, overhead_redo=redo, overhead_restart=restart,
                   finish_days=m["finish_s"] / DAY)  # the job saves, fails and is billed on all its cards
        out["footing"] = dict(footing.footing(pb.sc, lp.plan_dict(), lp.metrics["step_s"], metrics=job,
                                              job_cards=m["cards"]), of="learner")
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
                     "deadline_days": F.limit(F.DEADLINE, pb.sc) / DAY, "cost": m["cost"], "cost_unit": m["cost_unit"]}
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


def rounded_wall(stats: dict[str, Any]) -> dict[str, float]:
    """The search's wall time as the other commands write theirs (``SolverInfo.to_dict``: seconds to 4 decimals);
    empty where the stats have none."""
    return {"wall_s": round(float(stats["wall_s"]), 4)} if "wall_s" in stats else {}
