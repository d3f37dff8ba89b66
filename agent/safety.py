"""Restart safety (pure): may this broker stop without taking a partition below its min ISR?"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from planner.contracts.kafka_state import PartitionState


def restart_blockers(
    partitions: Iterable[PartitionState],
    broker_id: int,
    min_isr_by_topic: Mapping[str, int],
    default_min_isr: int,
) -> list[str]:
    """Partitions that stopping `broker_id` would take below min ISR, described for a sentence.

    Blocked when this broker is in a partition's ISR and the ISR is at or below the min ISR.
    A partition whose replication factor is at or below its min ISR can never survive a
    restart of one of its replicas with acks=all: it is ignored (as Yelp's and Strimzi's
    rolling restarts do), or no restart could ever run.
    """
    blockers = []
    for p in partitions:
        min_isr = min_isr_by_topic.get(p.topic, default_min_isr)
        if len(p.replicas) <= min_isr:
            continue
        if broker_id in p.isr and len(p.isr) <= min_isr:
            blockers.append(f"{p.topic}-{p.partition} (ISR {list(p.isr)}, min ISR {min_isr})")
    return blockers


def lagging_on_running_brokers(
    partitions: Iterable[PartitionState], registered: Iterable[int]
) -> list[str]:
    """Partitions with a replica on a running (registered) broker that is not in the ISR.

    A replica on a broker that is down cannot catch up; counting it would keep the first
    broker of a cold start (every VM booting at once) waiting for the others, which wait for
    its restart lock."""
    running = set(registered)
    return [
        f"{p.topic}-{p.partition}"
        for p in partitions
        if any(r in running and r not in p.isr for r in p.replicas)
    ]
