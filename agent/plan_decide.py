"""What the elected planner's agent does next with the plan: a pure function of one
snapshot (no I/O), like `agent.decide` for the VM's own loop.

The stored progress is the executor's memory: a batch is recorded as started before it is
handed to Kafka, so an agent that takes over (or restarts) mid-batch checks that batch
instead of judging a half-moved partition as a change made by someone else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

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
    stall_s: float
    last_progress_at: float = 0.0
    """When a partition of the running batch last reached its new replicas (0: not seen)."""


@dataclass(frozen=True)
class PlanAction:
    kind: str
    """hold | refuse | make_plan | start_batch | check_batch | finish | supersede"""
    reason: str
    batch: int = -1
    moves: tuple[tuple[str, int, tuple[int, ...]], ...] = ()
    """start_batch: the steps not yet at their list; check_batch: those still moving."""
    stalled: bool = False
    unfinished: tuple[tuple[str, int, tuple[int, ...]], ...] = field(default=())


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
    k = progress.completed_batches
    if k >= plan.batch_count:
        return PlanAction("finish", f"plan {plan.plan_id}: all {plan.batch_count} batches done")
    label = f"plan {plan.plan_id} batch {k + 1}/{plan.batch_count}"
    by_key = {(p.topic, p.partition): p for p in plan.partitions}
    steps = plan.batch(k)
    # Partitions deleted since planning have nothing left to move.
    steps = [s for s in steps if (s[0], s[1]) in snap.live]
    pending = tuple(s for s in steps if snap.live[(s[0], s[1])] != s[2])
    if progress.started_batch == k:
        running = snap.now - progress.batch_started_at
        # Stalled: no partition has arrived for stall_s; a new controller picks the moves up.
        idle = snap.now - max(progress.batch_started_at, snap.last_progress_at)
        stalled = bool(pending) and idle > snap.stall_s and not progress.controller_moved
        reason = (
            f"{label}: {len(steps) - len(pending)}/{len(steps)} partitions at their new "
            f"replicas after {running:.0f} s"
        )
        return PlanAction("check_batch", reason, k, pending, stalled)
    if snap.restart_lock_held:
        return PlanAction("hold", f"{label}: waiting for the rolling restart to finish")
    missing = sorted({b for s in pending for b in s[2]} - snap.registered)
    if missing:
        return PlanAction("hold", f"{label}: waiting for broker {missing[0]} to register")
    for topic, number, _ in pending:
        expected = by_key[(topic, number)].replicas_before(k)
        now = snap.live[(topic, number)]
        if now != expected:
            return PlanAction(
                "supersede",
                f"{label}: {topic}-{number} has replicas {list(now)}, the plan expected "
                f"{list(expected)}: planning again",
            )
    return PlanAction("start_batch", f"{label}: moving {len(pending)} partitions", k, pending)


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
    if snap.last_planned_at == 0 or snap.planned_for != seen or due:
        why = (
            "first look (or a plan just finished)"
            if snap.last_planned_at == 0
            else "brokers, spec or partitions changed"
            if snap.planned_for != seen
            else "periodic check"
        )
        if unknown_drain:
            why += f" (draining broker {unknown_drain[0]} is not registered)"
        return PlanAction("make_plan", f"planning: {why}")
    done = snap.plan.plan_id if snap.plan is not None else None
    tail = f" (plan {done} done)" if done is not None else ""
    return PlanAction("hold", f"placement balanced{tail}")
