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
