"""What the elected planner's agent does next with the plan: a pure function of one
snapshot (no I/O), like `agent.decide` for the VM's own loop.

A running plan's state is in Kafka itself (its live lists and the reassignments it runs),
so an agent that takes over (or restarts) mid-plan reads where each partition stands
(agent.pipeline) instead of judging a half-moved partition as a change made by someone else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from planner.contracts.plan_records import Progress
from planner.store import StoredPlan

ACTIVE_STATES = frozenset({"pending", "executing"})

Assignment = Mapping[tuple[str, int], tuple[int, ...]]


PlanInputs = tuple[int, frozenset[int], int]
"""(spec generation, registered brokers, fingerprint of the live assignment)."""


def plan_inputs(spec_generation: int, registered: frozenset[int], live: Assignment) -> PlanInputs:
    """What planning depends on: a new topic, partition or replica list plans again, as does
    a broker coming or going or a new spec."""
    return (spec_generation, registered, hash(frozenset(live.items())))


@dataclass(frozen=True)
class PlanSnapshot:
    spec_ok: bool
    spec_generation: int
    draining: frozenset[int]
    plan: StoredPlan | None
    plan_error: str | None
    progress: Progress | None
    live: Assignment
    """(topic, partition) -> replicas, from the cluster's metadata now."""
    registered: frozenset[int]
    restart_lock_held: bool
    now: float
    last_planned_at: float
    """Wall time of the last planning (0: never, or a replan is forced)."""
    planned_for: PlanInputs | None
    """What the last planning (or the end of the last plan) saw; see plan_inputs."""
    replan_interval_s: float
    measured_load_version: int | None = None
    """The version of `/kaas/<cluster>/load` now (None: no measured load)."""
    planned_load_version: int | None = None
    """The version the last planning read: a new measurement plans again."""


@dataclass(frozen=True)
class PlanAction:
    kind: str
    """hold | refuse | make_plan | execute | supersede"""
    reason: str
    may_start: bool = True
    """execute: whether new moves may start (moves running always continue)."""


def decide_plan(snap: PlanSnapshot) -> PlanAction:
    if not snap.spec_ok:
        return PlanAction("hold", "no valid spec: not planning")
    if snap.plan_error is not None:
        return PlanAction(
            "refuse", f"stored plan refused, not executed: {snap.plan_error}; delete it to replan"
        )
    plan, progress = snap.plan, snap.progress
    if (
        plan is not None
        and progress is not None
        and progress.plan_id == plan.plan_id
        and progress.state in ACTIVE_STATES
    ):
        return _continue(snap, plan, progress)
    return _maybe_plan(snap)


def _continue(snap: PlanSnapshot, plan: StoredPlan, progress: Progress) -> PlanAction:
    """A running plan is executed by the pipeline (agent.pipeline), which also says when it
    is done or superseded; here only whether new moves may start now."""
    label = f"plan {plan.plan_id}"
    if snap.restart_lock_held:
        return PlanAction(
            "execute", f"{label}: waiting for the rolling restart to finish", may_start=False
        )
    targets = {b for p in plan.partitions for s in p.steps for b in s.replicas}
    missing = sorted(targets - snap.registered)
    if missing:
        return PlanAction(
            "execute", f"{label}: waiting for broker {missing[0]} to register", may_start=False
        )
    return PlanAction("execute", f"{label}: executing")


def _maybe_plan(snap: PlanSnapshot) -> PlanAction:
    on_unregistered = sorted(
        {b for replicas in snap.live.values() for b in replicas} - snap.registered
    )
    if on_unregistered:
        return PlanAction(
            "hold",
            f"broker {on_unregistered[0]} holds replicas but is not registered: not planning "
            "until it is back or replaced",
        )
    unknown_drain = sorted(snap.draining - snap.registered)
    if snap.restart_lock_held:
        return PlanAction("hold", "waiting for the rolling restart to finish before planning")
    seen = plan_inputs(snap.spec_generation, snap.registered, snap.live)
    due = snap.now - snap.last_planned_at >= snap.replan_interval_s
    load_changed = snap.measured_load_version != snap.planned_load_version
    if snap.last_planned_at == 0 or snap.planned_for != seen or due or load_changed:
        why = (
            "first look (or a plan just finished)"
            if snap.last_planned_at == 0
            else "brokers, spec or partitions changed"
            if snap.planned_for != seen
            else "measured load changed"
            if load_changed
            else "periodic check"
        )
        if unknown_drain:
            why += f" (draining broker {unknown_drain[0]} is not registered)"
        return PlanAction("make_plan", f"planning: {why}")
    done = snap.plan.plan_id if snap.plan is not None else None
    tail = f" (plan {done} done)" if done is not None else ""
    return PlanAction("hold", f"placement balanced{tail}")
