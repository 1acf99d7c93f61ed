"""A :class:`~tpopt.models.plan.Plan` from field values (the plan flags of ``tpopt evaluate`` / ``explain``,
the keywords of :func:`tpopt.evaluate`): every field not given takes the scenario's single-valued
``[search]`` domain, or its first listed value. Light (no numpy): the command line imports it at start.

Where it lives: at the package's root, beside :mod:`tpopt.api`, at the user's edge: its users are the Python API
and the plan flags of the command line (:mod:`tpopt.cli.common`); it reads the scenario and the declaration of
the plan's fields (:mod:`tpopt.models.variables`) and no solver, so it is no part of the optimiser."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tpopt.errors import InputError
from tpopt.models.plan import Plan, Scenario, SearchSpace, schedule_name, split_schedule
from tpopt.models.units import parse_duration, parse_int, parse_number
from tpopt.models.variables import PLAN_DEFAULTS, SIMPLE_INPUTS


def _moe_flags(space: SearchSpace, kw: Mapping[str, Any]) -> dict[str, Any]:
    """ep, expert_tp (0 = tp) and capacity_factor (0 = dropless) from the flags or a single-valued domain."""
    etp = kw.get("expert_tp")
    if etp is None:
        etp_v = space.expert_tp[0] if len(space.expert_tp) == 1 else 0
    elif str(etp).strip().lower() == "tp":
        etp_v = 0
    else:
        etp_v = parse_int(etp, "--expert-tp", minimum=1)
    cap = kw.get("capacity")
    if cap is None:
        cap_v = space.capacity_factor[0] if len(space.capacity_factor) == 1 else 0.0
    elif str(cap).strip().lower() in ("none", "dropless"):
        cap_v = 0.0
    else:
        cap_v = parse_number(cap, "--capacity", allow_zero=False)
    ep = kw.get("ep")
    return {"ep": ep if ep is not None else (space.ep[0] if len(space.ep) == 1 else 1), "expert_tp": etp_v,
            "capacity_factor": float(cap_v)}


def plan_accelerator(sc: Scenario, hw: str | None) -> str:
    """The one accelerator a plan runs on: ``--hw NAME`` (``accelerator=`` in the API), else the scenario's only
    candidate. A plan has one card type, so several (``--hw a,b`` or a scenario listing several) are refused in
    one line that names them, rather than the first taken silently: ``tpopt solve`` compares candidates."""
    names = [h.strip() for h in hw.split(",") if h.strip()] if hw else list(sc.search.accelerators or sc.systems)
    if len(names) > 1:
        where = "--hw" if hw else "the scenario ([hardware] accelerator)"
        raise InputError(f"a plan runs on one accelerator, and {where} names {len(names)} ({', '.join(names)}): "
                         f"give one with --hw NAME (tpopt solve --hw {','.join(names)} compares them)")
    return names[0]


def plan_from(sc: Scenario, kw: Mapping[str, Any]) -> Plan:
    """A :class:`Plan` from the plan flags; unspecified fields take the scenario's single-valued
    [search] domain, or the first listed value."""
    space = sc.search
    acc = plan_accelerator(sc, kw.get("hw"))
    interval = kw.get("save_interval")
    if interval is None:
        interval_s = space.save_interval_s[0]
    elif str(interval).strip().lower() == "auto":
        interval_s = 0.0
    else:
        interval_s = parse_duration(interval, "--save-interval", allow_zero=False)

    def pick(key: str, domain: Sequence[object], default: object) -> Any:
        v = kw.get(key)
        if v is not None:
            return v
        return domain[0] if domain else default

    schedule = pick("pipe_schedule", space.schedule, "1f1b")
    if kw.get("virtual_stages") is not None:
        base, _ = split_schedule(schedule)
        if kw.get("pipe_schedule") is not None and base != "interleaved":
            raise InputError("--virtual-stages applies to the interleaved schedule only")
        if kw["virtual_stages"] < 2:
            raise InputError(f"--virtual-stages must be at least 2 (got {kw['virtual_stages']})")
        schedule = schedule_name("interleaved", kw["virtual_stages"])
    simple = {}  # the inputs set the simple way (PlanInput.domain): given, else from their [search] domain
    for i in SIMPLE_INPUTS:
        assert i.field is not None and i.domain is not None
        domain = getattr(space, i.domain)
        simple[i.field] = pick(i.key, domain if not i.single or len(domain) == 1 else (), PLAN_DEFAULTS[i.field])
    if kw.get("virtual_stages") is not None and simple["pp"] == 1:  # interleaving splits pipeline stages
        given = "--pp 1" if kw.get("pp") is not None else "no --pp given"
        raise InputError(f"--virtual-stages {kw['virtual_stages']} splits each pipeline stage into model chunks, and "
                         f"the plan has pp 1 ({given}): give --pp 2 or more, or drop --virtual-stages")
    plan = Plan(
        accelerator=acc,
        cards=kw["cards"],
        **simple,
        schedule=schedule,
        save_interval_s=interval_s,
        nics_per_host=kw.get("nics_per_host") or 0,
        sequence_parallel=kw.get("sequence_parallel"),
        flash_attention=kw.get("flash_attention"),
        first_stage_layers=kw.get("first_stage_layers") or 0,
        last_stage_layers=kw.get("last_stage_layers") or 0,
        **_moe_flags(space, kw),
        global_batch=space.global_batch[0] if len(space.global_batch) == 1 else 0,
    )
    from tpopt.models.context import require_split  # lazy: numpy, loaded by then

    for seq_len in sorted({sc.task.seq_len, *(st.task.seq_len for st in sc.stages)}):
        require_split(seq_len, plan.cp, sc.cp_split, "--cp")
    return plan
