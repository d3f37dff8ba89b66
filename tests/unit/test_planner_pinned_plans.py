"""Seeded clusters whose plans are pinned: their move counts and a digest of every target
replica list. A change to the planner's structure must leave these plans exactly as
they are; a change meant to improve plans updates the pins and says why."""

from __future__ import annotations

import hashlib
import json
import random

import pytest

from planner.model import Broker, BrokerState, Capacity, Cluster, Partition
from planner.plan import make_plan

pytestmark = pytest.mark.unit


def _brokers(count: int, racks: int, disk: float | None) -> tuple[Broker, ...]:
    capacity = Capacity(disk_bytes=disk) if disk else Capacity()
    return tuple(
        Broker(i + 1, f"zone-{'abcd'[i % racks]}", capacity=capacity) for i in range(count)
    )


def _layout(
    seed: int,
    brokers: int,
    racks: int,
    partitions: int,
    replication_factors: tuple[int, ...],
    disk: float | None = None,
) -> tuple[tuple[Broker, ...], list[Partition]]:
    """Topics of skewed sizes placed at random (each partition's replicas in distinct
    racks where its replication factor allows): an unbalanced but valid start."""
    rng = random.Random(seed)
    broker_list = _brokers(brokers, racks, disk)
    by_rack: dict[str, list[int]] = {}
    for broker in broker_list:
        by_rack.setdefault(broker.rack, []).append(broker.id)
    rack_names = sorted(by_rack)
    parts: list[Partition] = []
    topics = max(3, partitions // 40)
    for number in range(partitions):
        topic = rng.randrange(topics)
        k = rng.choice(replication_factors)
        start = rng.randrange(len(rack_names))
        chosen: list[int] = []
        for i in range(k):
            rack = by_rack[rack_names[(start + i) % len(rack_names)]]
            options = [b for b in rack if b not in chosen]
            chosen.append(rng.choice(options))
        size = int(1e6 * (1 + 20 / (1 + topic)) * rng.uniform(0.5, 1.5))
        parts.append(
            Partition(
                f"topic-{topic:02d}",
                number,
                tuple(chosen),
                size,
                bytes_in_per_s=rng.uniform(0.1, 3.0),
                bytes_out_per_s=rng.uniform(0.1, 6.0),
            )
        )
    return broker_list, parts


def _imbalance(seed: int) -> Cluster:
    brokers, parts = _layout(seed, 12, 3, 600, (3,))
    return Cluster(brokers, tuple(parts))


def _added(seed: int) -> Cluster:
    brokers, parts = _layout(seed, 12, 3, 600, (2, 3))
    extra = tuple(Broker(13 + i, f"zone-{'abc'[i]}") for i in range(3))
    return Cluster(brokers + extra, tuple(parts))


def _draining(seed: int) -> Cluster:
    brokers, parts = _layout(seed, 12, 3, 600, (3,))
    return Cluster(brokers, tuple(parts)).with_broker_states(
        {2: BrokerState.DRAINING, 7: BrokerState.DEAD}
    )


def _large_added(seed: int) -> Cluster:
    brokers, parts = _layout(seed, 45, 3, 4000, (3,))
    extra = tuple(Broker(46 + i, f"zone-{'abc'[i % 3]}") for i in range(6))
    return Cluster(brokers + extra, tuple(parts))


def _more_replicas_than_racks(seed: int) -> Cluster:
    brokers, parts = _layout(seed, 10, 2, 400, (3, 4))
    return Cluster(brokers, tuple(parts))


def _tight_disks(seed: int) -> Cluster:
    brokers, parts = _layout(seed, 9, 3, 300, (3,))
    total = sum(p.size_bytes * 3 for p in parts)
    limited = tuple(
        Broker(b.id, b.rack, capacity=Capacity(disk_bytes=total / 9 * 1.5)) for b in brokers
    )
    return Cluster(limited, tuple(parts))


BUILDERS = {
    "imbalance": _imbalance,
    "added": _added,
    "draining": _draining,
    "large_added": _large_added,
    "more_replicas_than_racks": _more_replicas_than_racks,
    "tight_disks": _tight_disks,
}

PINNED = [
    # (instance, layout seed, plan seed, replicas moved, leadership changes, digest)
    # Re-pinned when the topic phase learnt to swap with any broker under a topic's tolerated
    # most and the leader phase to prefer the change that evens a topic's leaders: replicas
    # moved stayed the same or fell (more_replicas_than_racks/1: 49 -> 46), a few more
    # leadership changes even out each topic's leaders.
    # Re-pinned when the chain phase learnt to take back a broker's give-and-take (q: x -> o
    # with p: o -> n becomes q: x -> n, or q back to x and a stand-in of x's to n):
    # replicas moved fell or stayed everywhere (imbalance/1: 97 -> 85,
    # more_replicas_than_racks/2: 73 -> 56, tight_disks/2: 64 -> 50); leadership changes
    # rose by up to 5, the lowest priority.
    # Re-pinned when leader weights were put on an exact grid (so a broker's leader load no
    # longer depends on the order of the moves): replicas moved stayed the same on every
    # instance; ties between leadership changes now break the same way every run, and
    # leadership changes moved both ways (draining/1: 6 -> 3, more_replicas_than_racks/1:
    # 13 -> 17, more_replicas_than_racks/2: 18 -> 15; 114 -> 112 over all twelve).
    # Re-pinned when the chain phase learnt resized stand-ins (p: o -> n, q: x -> o and
    # p2: o -> n2 become r: x -> n and p2': o -> n2): large_added/1 1,436 -> 1,435, every
    # other plan unchanged.
    # Re-pinned when the leader-bytes phase stopped trading one direction for the other (a
    # leadership change must bring bytes in and bytes out, each on its own, closer to their
    # targets in all): replicas moved the same everywhere; leadership changes large_added/1
    # 22 -> 21 (leader_bytes term 88.16 -> 88.22), large_added/2 0 -> 1 (88.47 both),
    # more_replicas_than_racks/2 15 -> 16 (88.20 -> 88.11); every other plan unchanged.
    # Re-pinned when the leader-bytes phase learnt to even bytes in and bytes out each on its
    # own band (it judged the band on their sum, where a broker leading no hot partition
    # but a few read ones read even): replicas moved the same everywhere; leader_bytes
    # term up on 11 of 12 (imbalance/1 89.68 -> 91.06, added/1 88.11 -> 92.42, large_added/2
    # 88.47 -> 91.23, ...; draining/2 unchanged at 93.53), for more leadership changes, the
    # lowest priority (113 -> 259 over all twelve, large_added/1 21 -> 50).
    ("imbalance", 1, 0, 85, 28, "bcfa02fd79007322"),
    ("imbalance", 2, 7, 85, 21, "f76a01b6f0681c20"),
    ("added", 1, 0, 304, 16, "cfba501b79368d6f"),
    ("added", 2, 7, 302, 14, "238ba3b12fc614e6"),
    ("draining", 1, 0, 355, 14, "09d0e2db57b867f0"),
    ("draining", 2, 7, 360, 3, "da65cf049bf456fc"),
    ("large_added", 1, 0, 1435, 50, "f37909c3409732c8"),
    ("large_added", 2, 7, 1415, 30, "42ea4c05f66c3fce"),
    ("more_replicas_than_racks", 1, 0, 46, 29, "1888622fba82b375"),
    ("more_replicas_than_racks", 2, 7, 56, 29, "73c9c135488e166f"),
    ("tight_disks", 1, 0, 32, 9, "66914fb61796ddee"),
    ("tight_disks", 2, 7, 50, 16, "c82394298cc47963"),
]


def _digest(assignments: list[tuple[str, int, tuple[int, ...]]]) -> str:
    text = json.dumps(sorted([t, n, list(r)] for t, n, r in assignments))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@pytest.mark.parametrize(
    ("instance", "layout_seed", "plan_seed", "moved", "leader_changes", "digest"), PINNED
)
def test_seeded_plans_stay_exactly_as_pinned(
    instance: str, layout_seed: int, plan_seed: int, moved: int, leader_changes: int, digest: str
) -> None:
    plan = make_plan(BUILDERS[instance](layout_seed), seed=plan_seed)
    assert (plan.replicas_moved, plan.leadership_changes) == (moved, leader_changes)
    assert _digest(plan.final_assignments()) == digest
