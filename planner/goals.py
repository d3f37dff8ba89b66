"""The goals, in priority order, and the check of the hard ones on a whole cluster.

Hard goals are never broken by a plan. Soft goals are pursued in this order; a phase
working on one never trades away a goal before it:

1. replicas_per_broker  max-min <= 1 (within each rack when racks pin their totals)
2. leaders_per_broker   preferred leaders, max-min <= 1
3. topic_spread         no broker holds clearly more than its share of one topic
4. disk_bytes           every broker within +-5% of its share of the bytes
5. leader_bytes         leader bytes in + out within +-10% of the mean
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.model import UNLIMITED, Cluster, PlannerSettings

HARD_GOALS: tuple[str, ...] = (
    "replication_factor",
    "one_replica_per_broker",
    "rack_spread",
    "no_replica_on_inactive_broker",
    "disk_limit",
)
SOFT_GOALS: tuple[str, ...] = (
    "replicas_per_broker",
    "leaders_per_broker",
    "topic_spread",
    "disk_bytes",
    "leader_bytes",
)


@dataclass(frozen=True)
class Violation:
    goal: str
    subject: str
    """The partition ("orders-3") or broker ("broker 4") at fault."""
    detail: str

    def __str__(self) -> str:
        return f"{self.goal}: {self.subject}: {self.detail}"


def rack_bounds(replication_factor: int, racks: int) -> tuple[int, int]:
    """(fewest, most) replicas of one partition a rack may hold: with RF at most the
    number of racks, at most one per rack (RF distinct racks); above it, RF//R or
    ceil(RF/R) in every rack."""
    return replication_factor // racks, -(-replication_factor // racks)


def hard_goal_violations(
    cluster: Cluster,
    settings: PlannerSettings,
    original: Cluster | None = None,
) -> list[Violation]:
    """Every hard goal the cluster breaks. With `original`, the replication factor is
    checked against it (a plan must keep every partition's replication factor)."""
    brokers = cluster.broker_by_id()
    racks = cluster.racks()
    violations: list[Violation] = []
    original_rf = (
        {(p.topic, p.partition): p.replication_factor for p in original.partitions}
        if original
        else {}
    )
    disk: dict[int, float] = {b.id: 0.0 for b in cluster.brokers}
    for p in cluster.partitions:
        k = p.replication_factor
        expected = original_rf.get((p.topic, p.partition), k)
        if k != expected:
            violations.append(
                Violation(HARD_GOALS[0], p.name, f"{k} replicas, expected {expected}")
            )
        if len(set(p.replicas)) != k:
            violations.append(Violation(HARD_GOALS[1], p.name, f"replicas {list(p.replicas)}"))
        counts: dict[str, int] = {}
        for replica in p.replicas:
            broker = brokers.get(replica)
            if broker is None:
                violations.append(Violation(HARD_GOALS[3], p.name, f"unknown broker {replica}"))
                continue
            counts[broker.rack] = counts.get(broker.rack, 0) + 1
            disk[replica] += p.size_bytes
            if not broker.is_active:
                violations.append(
                    Violation(
                        HARD_GOALS[3], p.name, f"replica on {broker.state.value} broker {replica}"
                    )
                )
        low, high = rack_bounds(k, len(racks))
        spread_ok = all(c <= high for c in counts.values()) and (
            low == 0 or (len(counts) == len(racks) and min(counts.values()) >= low)
        )
        if not spread_ok:
            violations.append(
                Violation(
                    HARD_GOALS[2],
                    p.name,
                    f"replicas per rack {dict(sorted(counts.items()))}, "
                    f"allowed {low}..{high} per rack",
                )
            )
    for broker in cluster.brokers:
        if broker.capacity.disk_bytes == UNLIMITED or not broker.is_active:
            continue
        limit = broker.capacity.disk_bytes * settings.max_disk_share
        if disk[broker.id] > limit:
            violations.append(
                Violation(
                    HARD_GOALS[4],
                    f"broker {broker.id}",
                    f"{disk[broker.id]:.0f} bytes, over {settings.max_disk_share:.0%} of "
                    f"{broker.capacity.disk_bytes:.0f}",
                )
            )
    return violations
