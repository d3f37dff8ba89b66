"""The plan executor's own bookkeeping as pure functions over its memory: when it last
planned, when a running batch last moved, which refusal it already journaled, how far to
cut a plan too large for one ZooKeeper transaction, and what to do for a running batch
(confirm it, ask for a new controller, hand lost moves to Kafka again). No I/O:
agent/plan_executor.py reads, asks `agent.plan_decide` and these, and acts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from agent.plan_decide import Assignment, PlanAction, PlanInputs, plan_inputs
from planner.store import Progress, StoredPlan

VERIFY_EVERY_S = 30.0
"""While a batch moves, how often Kafka's tool is asked about it (each ask is a JVM)."""

Move = tuple[str, int, tuple[int, ...]]
"""(topic, partition, target replicas)."""


@dataclass(frozen=True)
class ExecutorMemory:
    last_planned_at: float = 0.0
    """Wall time of the last planning; 0 makes the next tick plan."""
    planned_for: PlanInputs | None = None
    last_verify_at: float = 0.0
    last_refusal: str = ""
    """The last refusal journaled: the same one is not journaled again every tick."""
    batch_pending: tuple[int, int] = (-1, 0)
    """(batch, partitions still moving) at the last look, to tell when one arrived."""
    last_progress_at: float = 0.0


def note_batch_progress(
    memory: ExecutorMemory,
    plan: StoredPlan | None,
    progress: Progress | None,
    live: Assignment,
    now: float,
) -> tuple[ExecutorMemory, float]:
    """Remember when the running batch's count of partitions still moving last went down;
    returns the memory and that time (0: no batch runs)."""
    if plan is None or progress is None or progress.started_batch is None:
        return memory, 0.0
    batch = progress.started_batch
    moving = sum(1 for t, p, r in plan.batch(batch) if (t, p) in live and live[(t, p)] != r)
    seen_batch, seen_moving = memory.batch_pending
    arrived = memory.last_progress_at
    if seen_batch != batch or moving < seen_moving:
        # A batch first seen by this agent (also after a takeover) counts from now.
        arrived = now
    return replace(memory, batch_pending=(batch, moving), last_progress_at=arrived), arrived


def planning_started(
    memory: ExecutorMemory,
    now: float,
    generation: int,
    registered: frozenset[int],
    live: Assignment,
) -> ExecutorMemory:
    return replace(
        memory, last_planned_at=now, planned_for=plan_inputs(generation, registered, live)
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


# -- a running batch --------------------------------------------------------------------------


@dataclass(frozen=True)
class ConfirmBatch:
    """Nothing is left moving: ask Kafka's tool to confirm (which also drops the throttles)."""

    moves: tuple[Move, ...]


@dataclass(frozen=True)
class CompleteBatch:
    """Record the batch done and elect the preferred leaders of its partitions."""

    batch: int
    moves: tuple[Move, ...]


@dataclass(frozen=True)
class ReelectController:
    """No partition arrived for the stall time: a new controller picks the moves up again."""


@dataclass(frozen=True)
class VerifyPending:
    """Ask Kafka which moves it still runs; the ones it lost are handed to it again."""

    moves: tuple[Move, ...]


@dataclass(frozen=True)
class KeepWaiting:
    pass


BatchStep = ConfirmBatch | CompleteBatch | ReelectController | VerifyPending | KeepWaiting


def check_batch_step(
    memory: ExecutorMemory, action: PlanAction, batch_moves: Sequence[Move], now: float
) -> tuple[ExecutorMemory, BatchStep]:
    """What to do for the running batch `action.batch`; `batch_moves` are its steps whose
    partitions still exist."""
    if not action.moves:
        if batch_moves:
            return memory, ConfirmBatch(tuple(batch_moves))
        return memory, CompleteBatch(action.batch, ())
    if action.stalled:
        return memory, ReelectController()
    if now - memory.last_verify_at >= VERIFY_EVERY_S:
        return replace(memory, last_verify_at=now), VerifyPending(action.moves)
    return memory, KeepWaiting()


def after_confirm(action: PlanAction, moves: tuple[Move, ...], complete: bool) -> BatchStep:
    return CompleteBatch(action.batch, moves) if complete else KeepWaiting()


def lost_moves(
    pending: Sequence[Move], in_progress: Sequence[tuple[str, int]] | None
) -> tuple[Move, ...]:
    """Moves recorded as started that Kafka does not run (the agent stopped between recording
    and submitting, or Kafka lost them): these are submitted again. `in_progress` None:
    Kafka knows of no reassignment for them at all."""
    if in_progress is None:
        return tuple(pending)
    running = set(in_progress)
    return tuple(m for m in pending if (m[0], m[1]) not in running)
