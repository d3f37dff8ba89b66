"""Cutting a target placement into ordered batches under a movement budget, the way Yelp's
kafka-utils trims its plans: the whole target is computed first, then executed in pieces.

A partition's change becomes one or more steps. A step replaces at most
max(1, live replicas - min ISR) of its live replicas (replacing a dead broker's replica is
free: it is not in the ISR), so at least min ISR replicas already in sync stay put while a
step runs; with RF = min ISR a step replaces one, and Kafka's reassignment (new replicas
join the ISR before old ones leave) keeps the ISR at its size. Steps are ordered so that
every intermediate replica list keeps the rack spread; where no order can, the partition
moves in one step. A batch holds at most one step per partition, fits the budget, and
never puts a broker's disk, counting the bytes arriving, over its limit.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from planner.errors import PlannerError
from planner.goals import rack_bounds
from planner.model import BrokerState, Cluster, PlannerSettings


class BatchingError(PlannerError):
    """The moves cannot be ordered within the hard goals (a cycle of full disks)."""


@dataclass(frozen=True)
class MovementBudget:
    max_partitions_per_broker: int | None = None
    """Partitions moving into or out of one broker at once (None: no limit)."""
    max_bytes_in_flight: int | None = None
    """Bytes copied by one batch, cluster-wide (a single larger step runs alone)."""
    max_leadership_changes: int | None = None
    """Pure leadership changes in one batch."""

    def __post_init__(self) -> None:
        for name in ("max_partitions_per_broker", "max_bytes_in_flight", "max_leadership_changes"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")


@dataclass(frozen=True)
class Step:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    """The partition's replica list once this step is done."""
    previous: tuple[int, ...]
    size_bytes: int

    @property
    def added(self) -> tuple[int, ...]:
        return tuple(b for b in self.replicas if b not in self.previous)

    @property
    def removed(self) -> tuple[int, ...]:
        return tuple(b for b in self.previous if b not in self.replicas)

    @property
    def is_leadership_change(self) -> bool:
        return not self.added and self.replicas[0] != self.previous[0]


@dataclass(frozen=True)
class Batch:
    steps: tuple[Step, ...]

    @property
    def replicas_moved(self) -> int:
        return sum(len(s.added) for s in self.steps)

    @property
    def bytes_moved(self) -> int:
        return sum(len(s.added) * s.size_bytes for s in self.steps)

    @property
    def leadership_changes(self) -> int:
        return sum(1 for s in self.steps if s.is_leadership_change)


def partition_steps(
    previous: tuple[int, ...],
    target: tuple[int, ...],
    rack_of: dict[int, str],
    dead: frozenset[int],
    min_isr: int,
    racks: int,
) -> list[tuple[int, ...]]:
    """The replica lists a partition goes through from `previous` to `target`."""
    if previous == target:
        return []
    leaving = [b for b in previous if b not in target]
    arriving = [b for b in target if b not in previous]
    if not leaving:
        return [target]
    live = sum(1 for b in previous if b not in dead)
    per_step = max(1, live - min_isr)
    pairs = _pairs_in_safe_order(previous, leaving, arriving, rack_of, racks)
    if pairs is None:
        return [target]
    steps: list[tuple[int, ...]] = []
    now = list(previous)
    live_in_step = 0
    for gone, new in pairs:
        is_live = gone not in dead
        if is_live and live_in_step >= per_step:
            live_in_step = 0
            steps.append(tuple(now))
        now[now.index(gone)] = new
        live_in_step += is_live
    steps.append(tuple(now))
    # Dead replicas were paired first, so the first step restores redundancy; the last
    # step takes the target's order (its preferred leader).
    steps[-1] = target
    return _dedupe(steps)


def _dedupe(steps: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    out: list[tuple[int, ...]] = []
    for step in steps:
        if not out or out[-1] != step:
            out.append(step)
    return out


def _pairs_in_safe_order(
    previous: tuple[int, ...],
    leaving: list[int],
    arriving: list[int],
    rack_of: dict[int, str],
    racks: int,
) -> list[tuple[int, int]] | None:
    """(leaving, arriving) pairs in an order where every single replacement keeps the
    rack spread valid (if the start is valid); None when there is no such order."""
    k = len(previous)
    low, high = rack_bounds(k, racks)

    def valid(replicas: Sequence[int]) -> bool:
        counts: dict[str, int] = {}
        for b in replicas:
            counts[rack_of[b]] = counts.get(rack_of[b], 0) + 1
        if any(c > high for c in counts.values()):
            return False
        return low == 0 or (len(counts) == racks and min(counts.values()) >= low)

    start_valid = valid(previous)
    now = list(previous)
    leaving, arriving = list(leaving), list(arriving)
    pairs: list[tuple[int, int]] = []
    while leaving:
        choice = None
        # Same-rack replacements first: they keep every rack's count.
        for gone in leaving:
            for new in arriving:
                if rack_of[gone] == rack_of[new]:
                    choice = (gone, new)
                    break
            if choice:
                break
        if choice is None:
            for gone in leaving:
                for new in arriving:
                    trial = [new if b == gone else b for b in now]
                    if valid(trial) or not start_valid:
                        choice = (gone, new)
                        break
                if choice:
                    break
        if choice is None:
            return None
        gone, new = choice
        now = [new if b == gone else b for b in now]
        leaving.remove(gone)
        arriving.remove(new)
        pairs.append(choice)
    return pairs


def make_batches(
    cluster: Cluster,
    target: dict[int, tuple[int, ...]],
    settings: PlannerSettings,
    budget: MovementBudget,
) -> list[Batch]:
    """Batches taking `cluster` to `target` (partition index -> replica list)."""
    brokers = cluster.broker_by_id()
    rack_of = {b.id: b.rack for b in cluster.brokers}
    dead = frozenset(b.id for b in cluster.brokers if b.state is BrokerState.DEAD)
    inactive = frozenset(b.id for b in cluster.brokers if not b.is_active)
    racks = len(cluster.racks())
    disk = {b.id: 0.0 for b in cluster.brokers}
    for p in cluster.partitions:
        for b in p.replicas:
            disk[b] += p.size_bytes
    limit = {b.id: b.capacity.disk_bytes * settings.max_disk_share for b in cluster.brokers}

    pending: list[tuple[int, deque[Step]]] = []
    for index in sorted(
        target, key=lambda i: (_urgency(cluster.partitions[i].replicas, inactive), i)
    ):
        p = cluster.partitions[index]
        lists = partition_steps(
            p.replicas, target[index], rack_of, dead, cluster.min_insync_replicas_for(p), racks
        )
        steps: deque[Step] = deque()
        previous = p.replicas
        for replicas in lists:
            steps.append(Step(p.topic, p.partition, replicas, previous, p.size_bytes))
            previous = replicas
        if steps:
            pending.append((index, steps))

    batches: list[Batch] = []
    while pending:
        admitted: list[Step] = []
        moving: dict[int, int] = {}
        arriving: dict[int, float] = {}
        bytes_in_flight = 0
        leadership = 0
        waiting: list[tuple[int, deque[Step]]] = []
        for item in pending:
            step = item[1][0]
            if _fits(
                step, admitted, moving, arriving, bytes_in_flight, leadership, disk, limit, budget
            ):
                admitted.append(step)
                for b in (*step.added, *step.removed):
                    moving[b] = moving.get(b, 0) + 1
                for b in step.added:
                    arriving[b] = arriving.get(b, 0.0) + step.size_bytes
                bytes_in_flight += len(step.added) * step.size_bytes
                leadership += step.is_leadership_change
                item[1].popleft()
                if item[1]:
                    waiting.append(item)
            else:
                waiting.append(item)
        if not admitted:
            step = pending[0][1][0]
            full = [b for b in step.added if disk[b] + step.size_bytes > limit[b]]
            raise BatchingError(
                f"cannot order the moves within the disk limit: {step.topic}-{step.partition} "
                f"waits for room on broker(s) {full} that no other move frees first"
            )
        for step in admitted:
            for b in step.added:
                disk[b] += step.size_bytes
            for b in step.removed:
                disk[b] -= step.size_bytes
        batches.append(Batch(tuple(admitted)))
        pending = waiting
    del brokers
    return batches


def _urgency(replicas: tuple[int, ...], inactive: frozenset[int]) -> int:
    """Moves off draining or dead brokers go first."""
    return 0 if any(b in inactive for b in replicas) else 1


def _fits(
    step: Step,
    admitted: list[Step],
    moving: dict[int, int],
    arriving: dict[int, float],
    bytes_in_flight: int,
    leadership: int,
    disk: dict[int, float],
    limit: dict[int, float],
    budget: MovementBudget,
) -> bool:
    for b in step.added:
        # The source keeps its copy until the batch ends: count arriving bytes only.
        if disk[b] + arriving.get(b, 0.0) + step.size_bytes > limit[b]:
            return False
    if step.is_leadership_change:
        cap = budget.max_leadership_changes
        return cap is None or leadership < cap
    per_broker = budget.max_partitions_per_broker
    if per_broker is not None and any(
        moving.get(b, 0) >= per_broker for b in (*step.added, *step.removed)
    ):
        return False
    cap_bytes = budget.max_bytes_in_flight
    # The first step of a batch always fits, however large, or a big partition never moves.
    return not (
        cap_bytes is not None
        and bytes_in_flight > 0
        and bytes_in_flight + len(step.added) * step.size_bytes > cap_bytes
    )
