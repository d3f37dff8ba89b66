"""Kafka's internal topics (`__consumer_offsets`, `__transaction_state`) and the agents'
own (`_kaas_*`) are planned like any other topic: after a broker was replaced, the new
broker leads its share of them."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from planner.layout import parse_layout
from planner.plan import make_plan

pytestmark = pytest.mark.unit

BROKERS = (0, 1, 3)
"""Broker 2's VM was replaced: broker 3 joined zone-c and took its replicas, as followers."""


def _topic(name: str, leaders: list[int]) -> list[dict[str, Any]]:
    return [
        {
            "topic": name,
            "partition": number,
            "replicas": [leader, *(b for b in BROKERS if b != leader)],
            "size_bytes": 1000,
        }
        for number, leader in enumerate(leaders)
    ]


def _after_replacement() -> dict[str, Any]:
    """The layout `kaas plan export` wrote after the demo's replacement."""
    return {
        "brokers": [
            {"id": 0, "rack": "zone-a"},
            {"id": 1, "rack": "zone-b"},
            {"id": 3, "rack": "zone-c"},
        ],
        "partitions": _topic("__consumer_offsets", [0, 1] * 6)
        + _topic("__transaction_state", [0, 1] * 3)
        + _topic("_kaas_metrics", [0, 0, 1])
        + _topic("orders", [0, 1, 3]),
    }


def _leaders(partitions: Any, topic: str) -> dict[int, int]:
    counts = Counter(p.replicas[0] for p in partitions if p.topic == topic)
    return {b: counts.get(b, 0) for b in BROKERS}


def test_internal_topics_leaders_are_balanced_across_brokers() -> None:
    cluster = parse_layout(_after_replacement())
    assert _leaders(cluster.partitions, "__consumer_offsets") == {0: 6, 1: 6, 3: 0}

    plan = make_plan(cluster)

    assert _leaders(plan.target.partitions, "__consumer_offsets") == {0: 4, 1: 4, 3: 4}
    assert _leaders(plan.target.partitions, "__transaction_state") == {0: 2, 1: 2, 3: 2}
    assert _leaders(plan.target.partitions, "_kaas_metrics") == {0: 1, 1: 1, 3: 1}
    total = Counter(p.replicas[0] for p in plan.target.partitions)
    assert sorted(total.values()) == [8, 8, 8]
    # Leadership only: every broker already holds every replica, and broker 3 takes the
    # 7 leaders it lacks with no change beyond them.
    assert plan.replicas_moved == 0
    assert plan.leadership_changes == 7
    assert make_plan(plan.target).is_empty


INTERNAL_NAMES = ("__consumer_offsets", "__transaction_state", "_kaas_metrics")


def _grown_cluster(names: tuple[str, ...]) -> dict[str, Any]:
    """Three brokers held everything; three more just joined, one per zone, empty."""
    brokers = [{"id": b, "rack": f"zone-{'abc'[b % 3]}"} for b in range(6)]
    partitions = []
    for name, count in zip((*names, "orders"), (12, 6, 3, 6), strict=True):
        for number in range(count):
            leader = number % 3
            partitions.append(
                {
                    "topic": name,
                    "partition": number,
                    "replicas": [leader, *(b for b in range(3) if b != leader)],
                    "size_bytes": 1000,
                }
            )
    return {"brokers": brokers, "partitions": partitions}


def test_internal_topics_replicas_move_to_added_brokers_like_any_topic() -> None:
    plan = make_plan(parse_layout(_grown_cluster(INTERNAL_NAMES)), seed=3)
    renamed = make_plan(parse_layout(_grown_cluster(("t-a", "t-b", "t-c"))), seed=3)

    # The names make no difference: the same replicas move the same way.
    rename = dict(zip(INTERNAL_NAMES, ("t-a", "t-b", "t-c"), strict=True))
    moved = sorted(
        (rename.get(p.topic, p.topic), p.partition, p.replicas) for p in plan.target.partitions
    )
    assert moved == sorted((p.topic, p.partition, p.replicas) for p in renamed.target.partitions)
    assert plan.replicas_moved == renamed.replicas_moved > 0
    # And the added brokers hold and lead their share of every internal topic.
    for name in ("__consumer_offsets", "__transaction_state"):
        held = Counter(b for p in plan.target.partitions if p.topic == name for b in p.replicas)
        led = Counter(p.replicas[0] for p in plan.target.partitions if p.topic == name)
        assert all(held[b] >= 1 for b in (3, 4, 5)), (name, held)
        assert max(held.values()) - min(held[b] for b in range(6)) <= 2, (name, held)
        assert all(led[b] >= 1 for b in (3, 4, 5)), (name, led)
    replicas = Counter(b for p in plan.target.partitions for b in p.replicas)
    assert max(replicas.values()) - min(replicas[b] for b in range(6)) <= 1
