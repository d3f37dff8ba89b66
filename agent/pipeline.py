"""The pipelined execution of a stored plan, as pure functions: where each partition stands,
which moves to start now, which replication throttles the moves in flight need, and how
many moves may run at once. No I/O: `agent.plan_executor` reads the cluster and Kafka's
running reassignments, asks these, and acts.

Instead of batch barriers (a batch waits for its slowest move), a queue: a partition's next
step starts as soon as its previous one is done and the caps allow it, in the plan's batch
order. The caps are per broker (moves into or out of one broker at once) and cluster-wide
(the concurrency, which backs off while a partition sits at its min ISR or a broker's
request queue is long, and grows back one by one while the cluster is healthy: Cruise
Control's concurrency adjuster, simplified). A move whose arriving replicas would put a
broker's disk over its limit waits, counting the bytes already on their way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from planner.contracts.plan_records import PlannedPartition

PartitionKey = tuple[str, int]
Move = tuple[str, int, tuple[int, ...]]
"""(topic, partition, target replicas)."""


@dataclass(frozen=True)
class Reassigning:
    """A reassignment Kafka runs now (KIP-455's list answer for one partition)."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]

    @property
    def target(self) -> tuple[int, ...]:
        """The list Kafka moves the partition to: its replicas without the leaving ones."""
        return tuple(b for b in self.replicas if b not in self.removing)


@dataclass(frozen=True)
class Caps:
    per_broker: int
    """Moves into or out of one broker at once."""
    cluster: int
    """Moves at once, cluster-wide, at most (the concurrency grows back to this)."""
    minimum: int = 1
    """The concurrency never backs off below this."""

    def __post_init__(self) -> None:
        if self.per_broker < 1 or self.cluster < 1 or not 1 <= self.minimum <= self.cluster:
            raise ValueError(f"caps need per_broker >= 1 and 1 <= minimum <= cluster, got {self}")


@dataclass(frozen=True)
class Health:
    """What the concurrency adjuster looks at."""

    at_min_isr: frozenset[PartitionKey] = frozenset()
    """Partitions whose ISR is at (or below) their min ISR now."""
    busy_brokers: frozenset[int] = frozenset()
    """Brokers whose request queue is over the limit."""


class PositionKind(StrEnum):
    AT_STEP = "at_step"  # at the list of step `index` (0: the source), nothing running
    MOVING = "moving"  # Kafka moves it to the list of step `index`
    FOREIGN = "foreign"  # at a list the plan does not know: someone else changed it
    GONE = "gone"  # the partition no longer exists


@dataclass(frozen=True)
class Position:
    kind: PositionKind
    index: int = 0


def lists_of(partition: PlannedPartition) -> tuple[tuple[int, ...], ...]:
    """The replica lists the partition goes through: its source, then each step's."""
    return (partition.source, *(s.replicas for s in partition.steps))


def position(
    partition: PlannedPartition,
    live: tuple[int, ...] | None,
    reassigning: Reassigning | None,
) -> Position:
    if live is None:
        return Position(PositionKind.GONE)
    lists = lists_of(partition)
    if reassigning is not None:
        target = reassigning.target
        # The highest match: a list can recur (leadership handed back), progress cannot.
        for index in range(len(lists) - 1, 0, -1):
            if set(lists[index]) == set(target):
                return Position(PositionKind.MOVING, index)
        return Position(PositionKind.FOREIGN)
    for index in range(len(lists) - 1, -1, -1):
        if lists[index] == live:
            return Position(PositionKind.AT_STEP, index)
    # Both lists of a step at once: a move Kafka has just started or finished, seen through
    # a broker's metadata that lags the controller's answer. The next look settles it.
    for index in range(len(lists) - 1, 0, -1):
        if set(live) == set(lists[index - 1]) | set(lists[index]):
            return Position(PositionKind.MOVING, index)
    return Position(PositionKind.FOREIGN)


@dataclass(frozen=True)
class ThrottleSet:
    """The replication throttles the moves in flight need, as Kafka's own tool sets them:
    the leader side on every replica the partition has now (any may be the one a new
    replica copies from), the follower side on the arriving replicas, and the rates on every
    broker taking part."""

    leader: Mapping[str, frozenset[tuple[int, int]]] = field(default_factory=dict)
    """topic -> {(partition, broker)}."""
    follower: Mapping[str, frozenset[tuple[int, int]]] = field(default_factory=dict)
    brokers: frozenset[int] = frozenset()

    @property
    def empty(self) -> bool:
        return not self.leader and not self.follower and not self.brokers


def throttles_for(
    moving: Iterable[tuple[str, int, tuple[int, ...], tuple[int, ...]]],
) -> ThrottleSet:
    """`moving`: (topic, partition, replicas before, target) of every move in flight; a move
    that adds no replica (a new order only) needs none."""
    leader: dict[str, set[tuple[int, int]]] = {}
    follower: dict[str, set[tuple[int, int]]] = {}
    brokers: set[int] = set()
    for topic, number, before, target in moving:
        added = [b for b in target if b not in before]
        if not added:
            continue
        leader.setdefault(topic, set()).update((number, b) for b in before)
        follower.setdefault(topic, set()).update((number, b) for b in added)
        brokers.update(before)
        brokers.update(added)
    return ThrottleSet(
        {t: frozenset(v) for t, v in leader.items()},
        {t: frozenset(v) for t, v in follower.items()},
        frozenset(brokers),
    )


def throttles_may_go(
    throttles: ThrottleSet, reassigning: Mapping[PartitionKey, Reassigning]
) -> bool:
    """Whether no move the throttles were set for still runs (any partition of a throttled
    topic being reassigned counts as one)."""
    topics = set(throttles.leader) | set(throttles.follower)
    return not any(topic in topics for topic, _ in reassigning)


def throttle_value(entries: frozenset[tuple[int, int]]) -> str:
    """Kafka's `partition:broker,...` list for *.replication.throttled.replicas."""
    return ",".join(f"{p}:{b}" for p, b in sorted(entries))


def health_of(
    isr: Mapping[PartitionKey, tuple[tuple[int, ...], tuple[int, ...]]],
    min_isr: Mapping[str, int],
    queues: Mapping[int, int],
    busy_over: int,
    reassigning: Mapping[PartitionKey, Reassigning] | None = None,
    default_min_isr: int = 1,
) -> Health:
    """`isr`: (replicas, ISR) by partition. A partition counts once its ISR is short of its
    replicas (not counting replicas a reassignment is still adding) and at or below its min
    ISR: RF 1 at ISR 1 is no strain, nor is a new replica still copying."""
    moving = reassigning or {}
    at_min = set()
    for key, (replicas, in_sync) in isr.items():
        adding = moving[key].adding if key in moving else ()
        settled = [b for b in replicas if b not in adding]
        short = len([b for b in in_sync if b in settled]) < len(settled)
        if short and len(in_sync) <= min_isr.get(key[0], default_min_isr):
            at_min.add(key)
    busy = frozenset(b for b, size in queues.items() if size > busy_over)
    return Health(frozenset(at_min), busy)


def adjust_concurrency(current: int, caps: Caps, health: Health) -> int:
    """Halve while a partition is at its min ISR or a broker's request queue is long, else
    one more, within [caps.minimum, caps.cluster]."""
    if health.at_min_isr or health.busy_brokers:
        return max(caps.minimum, current // 2)
    return min(caps.cluster, current + 1)


@dataclass(frozen=True)
class PipelineView:
    """One look at a running plan."""

    partitions: Sequence[PlannedPartition]
    live: Mapping[PartitionKey, tuple[int, ...]]
    reassigning: Mapping[PartitionKey, Reassigning]
    """Every reassignment Kafka runs now, the plan's or not."""
    caps: Caps
    concurrency: int
    health: Health = Health()
    sizes: Mapping[PartitionKey, int] = field(default_factory=dict)
    """Bytes of one replica of each partition of the cluster; unknown counts as 0."""
    may_start: bool = True
    """False: moves running continue, nothing new starts (a rolling restart runs)."""
    disk_limits: Mapping[int, float] | None = None
    """Bytes each broker may hold (None: not checked). What it holds is counted from `live`,
    which during a reassignment lists the arriving replicas too."""


@dataclass(frozen=True)
class PipelineDecision:
    start: tuple[Move, ...]
    """Moves to hand to Kafka now, in this order."""
    throttles: ThrottleSet
    """The throttles the moves running after `start` need; everything else is cleared."""
    concurrency: int
    finished: tuple[PartitionKey, ...]
    """Partitions at their target with nothing running (preferred leader to elect)."""
    foreign: tuple[PartitionKey, tuple[int, ...]] | None
    """A partition at a list the plan does not know (the plan is superseded)."""
    done: bool
    """Every partition of the plan at its target (or gone) and nothing of it running."""
    steps_total: int
    steps_done: int
    bytes_total: int
    bytes_done: int
    moving: tuple[PartitionKey, ...]
    waiting_reason: str = ""
    batches_done: int = 0
    """Leading batches of the plan whose every step is done."""


def _added(before: tuple[int, ...], after: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(b for b in after if b not in before)


def decide_pipeline(view: PipelineView) -> PipelineDecision:
    concurrency = adjust_concurrency(view.concurrency, view.caps, view.health)
    load: dict[int, int] = {}  # moves in flight per broker
    used: dict[int, float] = {}
    if view.disk_limits is not None:
        for key, replicas in view.live.items():
            for b in replicas:
                used[b] = used.get(b, 0.0) + view.sizes.get(key, 0)
    in_flight: list[tuple[str, int, tuple[int, ...], tuple[int, ...]]] = []
    ready: list[tuple[int, str, int, tuple[int, ...], tuple[int, ...]]] = []
    finished: list[PartitionKey] = []
    steps_total = steps_done = bytes_total = bytes_done = 0
    foreign: tuple[PartitionKey, tuple[int, ...]] | None = None
    open_batch = 1 + max((s.batch for p in view.partitions for s in p.steps), default=-1)
    for partition in view.partitions:
        key = (partition.topic, partition.partition)
        size = view.sizes.get(key, 0)
        lists = lists_of(partition)
        copies = [len(_added(lists[i - 1], lists[i])) * size for i in range(1, len(lists))]
        steps_total += len(partition.steps)
        bytes_total += sum(copies)
        live = view.live.get(key)
        where = position(partition, live, view.reassigning.get(key))
        if where.kind is PositionKind.GONE:
            steps_done += len(partition.steps)
            bytes_done += sum(copies)
            continue
        if where.kind is PositionKind.FOREIGN:
            if foreign is None:
                foreign = (key, live or ())
            continue
        done_steps = where.index if where.kind is PositionKind.AT_STEP else where.index - 1
        steps_done += done_steps
        if done_steps < len(partition.steps):
            open_batch = min(open_batch, partition.steps[done_steps].batch)
        bytes_done += sum(copies[:done_steps])
        if where.kind is PositionKind.MOVING:
            before, target = lists[where.index - 1], lists[where.index]
            in_flight.append((partition.topic, partition.partition, before, target))
            for b in (*_added(before, target), *_added(target, before)):
                load[b] = load.get(b, 0) + 1
            continue
        if where.index == len(lists) - 1:
            finished.append(key)
            continue
        batch = partition.steps[where.index].batch
        ready.append((batch, *key, lists[where.index], lists[where.index + 1]))
    if foreign is not None:
        return PipelineDecision(
            (),
            throttles_for(in_flight),
            concurrency,
            (),
            foreign,
            False,
            steps_total,
            steps_done,
            bytes_total,
            bytes_done,
            tuple((t, p) for t, p, _, _ in in_flight),
        )
    start: list[Move] = []
    waiting = ""
    slots = concurrency - sum(1 for m in in_flight if _added(m[2], m[3]))
    for _, topic, number, before, target in sorted(ready):
        added, removed = _added(before, target), _added(target, before)
        if not view.may_start:
            waiting = waiting or "not starting moves now"
            continue
        if not added:
            # A new order only: Kafka applies it at once, no copy, no cap.
            start.append((topic, number, target))
            continue
        if slots <= 0:
            waiting = waiting or f"concurrency {concurrency} reached"
            continue
        if any(load.get(b, 0) >= view.caps.per_broker for b in (*added, *removed)):
            waiting = waiting or "per-broker cap reached"
            continue
        size = view.sizes.get((topic, number), 0)
        limits = view.disk_limits
        # With no copy running the head of the queue starts anyway: the plan's batch order
        # vouches for it, and waiting for room nothing frees would wait forever.
        copying = any(_added(m[2], m[3]) for m in in_flight)
        if (
            limits is not None
            and copying
            and any(used.get(b, 0.0) + size > limits.get(b, 0.0) for b in added)
        ):
            waiting = waiting or f"{topic}-{number} waits for disk room"
            continue
        start.append((topic, number, target))
        in_flight.append((topic, number, before, target))
        slots -= 1
        for b in (*added, *removed):
            load[b] = load.get(b, 0) + 1
        for b in added:
            used[b] = used.get(b, 0.0) + size
    moving = tuple((t, p) for t, p, _, _ in in_flight)
    done = not ready and not moving
    return PipelineDecision(
        tuple(start),
        throttles_for(in_flight),
        concurrency,
        tuple(finished),
        None,
        done,
        steps_total,
        steps_done,
        bytes_total,
        bytes_done,
        moving,
        waiting,
        open_batch,
    )


LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
THROTTLE_KEYS = (LEADER_REPLICAS, FOLLOWER_REPLICAS, LEADER_RATE, FOLLOWER_RATE)


class ResourceKind(StrEnum):
    TOPIC = "topic"
    BROKER = "broker"


@dataclass(frozen=True)
class ConfigChange:
    kind: ResourceKind
    name: str
    values: tuple[tuple[str, str | None], ...]
    """(key, value); None deletes the key (back to no throttle)."""


def throttle_changes(
    applied: ThrottleSet | None,
    desired: ThrottleSet,
    rate: int,
    topics: Iterable[str] = (),
    brokers: Iterable[int] = (),
    registered: frozenset[int] | None = None,
) -> tuple[ConfigChange, ...]:
    """The config writes taking the cluster from `applied` to `desired`. `applied` None: not
    known (a newly elected planner): every one of `topics` and `brokers` is written, which
    also clears what an earlier planner left behind. `registered`: the brokers there are; no
    write goes to another (a broker gone with its VM, whose config KRaft refuses with
    UnknownBrokerId: a rate without throttled replicas throttles nothing anyway)."""
    changes: list[ConfigChange] = []
    known = applied or ThrottleSet()
    all_topics = set(desired.leader) | set(desired.follower) | set(known.leader)
    all_topics |= set(known.follower)
    if applied is None:
        all_topics |= set(topics)
    for topic in sorted(all_topics):
        want = (desired.leader.get(topic, frozenset()), desired.follower.get(topic, frozenset()))
        had = (known.leader.get(topic, frozenset()), known.follower.get(topic, frozenset()))
        if applied is not None and want == had:
            continue
        changes.append(
            ConfigChange(
                ResourceKind.TOPIC,
                topic,
                (
                    (LEADER_REPLICAS, throttle_value(want[0]) or None),
                    (FOLLOWER_REPLICAS, throttle_value(want[1]) or None),
                ),
            )
        )
    all_brokers = set(desired.brokers) | set(known.brokers)
    if applied is None:
        all_brokers |= set(brokers)
    for broker in sorted(all_brokers):
        if registered is not None and broker not in registered:
            continue
        on = broker in desired.brokers
        if applied is not None and on == (broker in known.brokers):
            continue
        value = str(rate) if on else None
        changes.append(
            ConfigChange(
                ResourceKind.BROKER, str(broker), ((LEADER_RATE, value), (FOLLOWER_RATE, value))
            )
        )
    return tuple(changes)
