"""The cluster model the planner reasons about: brokers, partitions and settings.

Immutable values only; the optimizer works on its own array-based copy (planner.state).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

UNLIMITED = math.inf
"""Capacity of a resource the layout leaves unbounded."""


class BrokerState(enum.Enum):
    ACTIVE = "active"
    DRAINING = "draining"
    """Still serving, but must end with no replica: the plan moves everything off it."""
    DEAD = "dead"
    """Not serving: its replicas are already out of the ISR; the plan replaces them."""


@dataclass(frozen=True)
class Capacity:
    disk_bytes: float = UNLIMITED
    nw_in_bytes_per_s: float = UNLIMITED
    nw_out_bytes_per_s: float = UNLIMITED


@dataclass(frozen=True)
class Broker:
    id: int
    rack: str
    state: BrokerState = BrokerState.ACTIVE
    capacity: Capacity = field(default_factory=Capacity)

    @property
    def is_active(self) -> bool:
        return self.state is BrokerState.ACTIVE


@dataclass(frozen=True)
class Partition:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    """Broker ids in order; the first is the preferred leader."""
    size_bytes: int = 1
    bytes_in_per_s: float = 1.0
    bytes_out_per_s: float = 1.0
    min_insync_replicas: int | None = None
    """None: the cluster's default (Cluster.min_insync_replicas_for)."""

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def replication_factor(self) -> int:
        return len(self.replicas)


@dataclass(frozen=True)
class Cluster:
    brokers: tuple[Broker, ...]
    partitions: tuple[Partition, ...]
    default_min_insync_replicas: int | None = None
    """None: min(2, RF), the usual production setting (Kafka's own default is 1)."""

    def broker_by_id(self) -> dict[int, Broker]:
        return {broker.id: broker for broker in self.brokers}

    def racks(self) -> list[str]:
        """Every rack the layout names, whatever its brokers' state: a rack whose brokers
        are all draining or dead still counts, so losing it is reported, not accepted."""
        return sorted({broker.rack for broker in self.brokers})

    def min_insync_replicas_for(self, partition: Partition) -> int:
        configured = partition.min_insync_replicas or self.default_min_insync_replicas
        if configured is None:
            configured = min(2, partition.replication_factor)
        return max(1, min(configured, partition.replication_factor))

    def with_assignment(self, assignment: Mapping[tuple[str, int], Iterable[int]]) -> Cluster:
        """A copy whose listed partitions have new replica lists."""
        partitions = []
        for partition in self.partitions:
            replicas = assignment.get((partition.topic, partition.partition))
            if replicas is None:
                partitions.append(partition)
            else:
                partitions.append(_replace_replicas(partition, tuple(replicas)))
        return Cluster(self.brokers, tuple(partitions), self.default_min_insync_replicas)

    def with_broker_states(self, states: Mapping[int, BrokerState]) -> Cluster:
        brokers = tuple(
            Broker(b.id, b.rack, states.get(b.id, b.state), b.capacity) for b in self.brokers
        )
        return Cluster(brokers, self.partitions, self.default_min_insync_replicas)


def _replace_replicas(partition: Partition, replicas: tuple[int, ...]) -> Partition:
    return Partition(
        partition.topic,
        partition.partition,
        replicas,
        partition.size_bytes,
        partition.bytes_in_per_s,
        partition.bytes_out_per_s,
        partition.min_insync_replicas,
    )


@dataclass(frozen=True)
class PlannerSettings:
    """How the planner trades balance for movement; every default is documented in
    docs/planner.md."""

    max_disk_share: float = 0.8
    """Hard goal: a broker's disk use stays at most this share of its capacity."""
    disk_tolerance: float = 0.05
    """Soft goal 4 holds when every broker's disk bytes are within ±5% of its target."""
    topic_tolerance: float = 0.10
    """Soft goal 3 holds when no broker holds more than max(ceil(1.1 x its share), its even
    share rounded up + 2) of a topic's replicas: a topic needs moves of its own only once it
    is clearly uneven (the +2 is Cruise Control's topic.replica.count.balance.min.gap);
    within that band, the moves made for other goals are chosen to even topics out."""
    leader_bytes_tolerance: float = 0.10
    """Soft goal 5 holds when every broker's leader bytes in and bytes out are each within ±10%
    of their mean."""
    max_rounds: int = 10
    """The phases run again until none changes anything (a fixed point, so planning the
    result gives an empty plan), at most this many times."""
    candidate_sample: int = 32
    """How many of a broker's replicas are weighed when choosing which one to move."""

    def __post_init__(self) -> None:
        if not 0 < self.max_disk_share <= 1:
            raise ValueError(f"max_disk_share must be in (0, 1], got {self.max_disk_share}")
        for name in ("disk_tolerance", "topic_tolerance", "leader_bytes_tolerance"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.max_rounds < 1 or self.candidate_sample < 1:
            raise ValueError("max_rounds and candidate_sample must be >= 1")
