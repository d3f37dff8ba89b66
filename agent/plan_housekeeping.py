"""The plan executor's own bookkeeping as pure functions over its memory: when it last
planned, which refusal it already journaled, how far to cut a plan too large for one
ZooKeeper transaction, and for a running plan the concurrency, the throttles set, the
leaders elected, the transfer rate and when a move last finished (the stall remedy). No
I/O: agent/plan_executor.py reads, asks `agent.plan_decide`, `agent.pipeline` and these,
and acts.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from agent.pipeline import PartitionKey, PipelineDecision, ThrottleSet
from agent.plan_decide import Assignment, PlanInputs, plan_inputs
from planner.contracts.plan_status import PlanMovement

RATE_WINDOW_S = 60.0
"""The transfer rate is measured over about this long (the ETA follows it)."""


@dataclass(frozen=True)
class ExecutorMemory:
    last_planned_at: float = 0.0
    """Wall time of the last planning; 0 makes the next tick plan."""
    planned_for: PlanInputs | None = None
    planned_load_version: int | None = None
    """The measured load's znode version the last planning read."""
    last_refusal: str = ""
    """The last refusal journaled: the same one is not journaled again every tick."""
    plan_id: int = -1
    """The plan the fields below are about; another plan starts them afresh."""
    concurrency: int = 0
    """Moves allowed at once (0: not set yet, start at the cap)."""
    throttles: ThrottleSet | None = None
    """The throttles this planner set (None: not known, e.g. just elected)."""
    elected: frozenset[PartitionKey] = frozenset()
    """Finished partitions whose preferred leader was elected."""
    steps_done: int = -1
    last_progress_at: float = 0.0
    """When a step was last seen done (or the plan first seen)."""
    samples: tuple[tuple[float, int], ...] = ()
    """(time, bytes moved) of the looks within the rate window."""


def for_plan(memory: ExecutorMemory, plan_id: int) -> ExecutorMemory:
    """The memory for `plan_id`: what belonged to another plan is forgotten, except the
    throttles, which the first look at a new plan must clear or keep."""
    if memory.plan_id == plan_id:
        return memory
    return replace(
        memory,
        plan_id=plan_id,
        concurrency=0,
        elected=frozenset(),
        steps_done=-1,
        last_progress_at=0.0,
        samples=(),
    )


@dataclass(frozen=True)
class Look:
    """What one look at a running plan leaves: the memory, the figures, and whether the
    moves stalled (nothing finished for the stall time while moves run)."""

    memory: ExecutorMemory
    movement: PlanMovement
    stalled: bool


def note_look(
    memory: ExecutorMemory, decision: PipelineDecision, now: float, stall_s: float
) -> Look:
    progressed = decision.steps_done > memory.steps_done
    last_progress = now if progressed or memory.last_progress_at == 0 else memory.last_progress_at
    kept = [(t, b) for t, b in memory.samples if now - t <= RATE_WINDOW_S]
    # Fewer bytes done than before (a partition deleted): the rate starts afresh.
    if any(b > decision.bytes_done for _, b in kept):
        kept = []
    samples = (*kept, (now, decision.bytes_done))
    first_t, first_b = samples[0]
    rate = (decision.bytes_done - first_b) / (now - first_t) if now > first_t else 0.0
    left = decision.bytes_total - decision.bytes_done
    eta = left / rate if rate > 0 else (0.0 if left == 0 else None)
    movement = PlanMovement(
        decision.bytes_done,
        decision.bytes_total,
        rate,
        eta,
        len(decision.moving),
        decision.concurrency,
    )
    stalled = bool(decision.moving) and now - last_progress > stall_s
    updated = replace(
        memory,
        concurrency=decision.concurrency,
        steps_done=decision.steps_done,
        last_progress_at=last_progress,
        samples=samples,
    )
    return Look(updated, movement, stalled)


def planning_started(
    memory: ExecutorMemory,
    now: float,
    generation: int,
    registered: frozenset[int],
    live: Assignment,
    load_version: int | None = None,
) -> ExecutorMemory:
    return replace(
        memory,
        last_planned_at=now,
        planned_for=plan_inputs(generation, registered, live),
        planned_load_version=load_version,
    )


def plan_again(memory: ExecutorMemory) -> ExecutorMemory:
    """Plan at the next tick (the layout was unreadable, the plan changed under us)."""
    return replace(memory, last_planned_at=0.0)


def plan_finished(memory: ExecutorMemory) -> ExecutorMemory:
    """Plan once more at the next tick: a spec change or a broker that came while the plan
    ran (a drain asked for mid-plan) is planned for at once, not at the next periodic check;
    with nothing changed the new plan is empty and the planner holds."""
    return replace(memory, last_planned_at=0.0, planned_for=None)


def note_refusal(memory: ExecutorMemory, reason: str) -> tuple[ExecutorMemory, bool]:
    """(memory, whether to journal it): each distinct refusal is journaled once."""
    if reason == memory.last_refusal:
        return memory, False
    return replace(memory, last_refusal=reason), True


def smaller_prefix(batch_count: int) -> int | None:
    """How many batches to store after a plan of `batch_count` was too large for one
    transaction: half of them (the rest is planned again once they ran); None: even one
    batch is too large, and the plan cannot be stored."""
    return batch_count // 2 if batch_count > 1 else None
