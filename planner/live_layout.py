"""LAYOUT.json of a live cluster (an adapter, like the store): brokers and racks from the
Kafka metadata, replica lists in order, and each partition's size on disk read through the
brokers' Jolokia agents (librdkafka has no DescribeLogDirs).

Used by `kaas plan export` and by the agent that plans; both may import planner.
"""

from __future__ import annotations

import json
import re
import ssl
import urllib.request
from typing import Any

from confluent_kafka.admin import AdminClient

from planner.contracts.kafka_state import PartitionState
from planner.errors import PlannerError
from planner.model import BrokerState
from planner.pki.client_settings import InternalClient

LOG_SIZE_PATTERN = "kafka.log:type=Log,name=Size,topic=*,partition=*"
_MBEAN_TOPIC = re.compile(r"(?:^|,)topic=([^,]+)")
_MBEAN_PARTITION = re.compile(r"(?:^|,)partition=(\d+)")


class LiveLayoutError(PlannerError, RuntimeError):
    pass


def partition_sizes(
    jolokia_url: str, timeout_s: float = 10.0, context: ssl.SSLContext | None = None
) -> dict[tuple[str, int], int]:
    """Bytes on disk of every replica one broker hosts, by (topic, partition)."""
    request = urllib.request.Request(
        jolokia_url,
        data=json.dumps({"type": "read", "mbean": LOG_SIZE_PATTERN, "attribute": "Value"}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s, context=context) as response:
            body = json.load(response)
    except (OSError, ValueError) as exc:
        raise LiveLayoutError(f"Jolokia at {jolokia_url} unreadable: {exc}") from None
    if body.get("status") == 404:  # no partition on this broker yet: the pattern matched nothing
        return {}
    if body.get("status") != 200:
        raise LiveLayoutError(f"Jolokia at {jolokia_url} refused the read: {body.get('error')}")
    sizes = {}
    for mbean, value in (body.get("value") or {}).items():
        topic, partition = _MBEAN_TOPIC.search(mbean), _MBEAN_PARTITION.search(mbean)
        if topic and partition:
            size = value.get("Value") if isinstance(value, dict) else value
            sizes[(topic.group(1), int(partition.group(1)))] = int(size or 0)
    return sizes


def live_layout_admin(kafka: InternalClient, timeout_s: float = 10.0) -> AdminClient:
    """The Admin client `read_live_layout` reads through; a long-lived caller keeps one,
    because librdkafka may crash the process when a client is destroyed with a request
    still in flight (a describe that timed out while a broker was down)."""
    return AdminClient(
        kafka.librdkafka(
            **{
                "socket.timeout.ms": int(timeout_s * 1000),
                # A failure is raised below as one LiveLayoutError; librdkafka's own lines on
                # stderr would only come before it.
                "log_level": 0,
            }
        )
    )


def partition_states(admin: AdminClient, timeout: float = 10.0) -> list[PartitionState]:
    """Every partition's replicas and ISR as a broker's metadata lists them: the truth in
    KRaft mode, where the brokers follow the controllers' metadata log."""
    metadata = admin.list_topics(timeout=timeout)
    return [
        PartitionState(str(topic.topic), p.id, tuple(p.replicas), tuple(p.isrs))
        for topic in metadata.topics.values()
        for p in topic.partitions.values()
    ]


def read_live_layout(
    kafka: InternalClient,
    jolokia_port: int = 8778,
    timeout_s: float = 10.0,
    jolokia_context: ssl.SSLContext | None = None,
    admin: AdminClient | None = None,
) -> dict[str, Any]:
    """The cluster as LAYOUT.json (planner/schemas/layout.schema.json): a partition's size is
    the largest of its replicas' sizes (a lagging follower holds less). Every topic is in
    it, Kafka's internal ones (`__consumer_offsets`, `__transaction_state`) too: Kafka
    places them once, when they are created, and never balances them, so a cluster that
    grew or replaced a broker keeps them where they were (preferred leaders 6, 6 and 0 over
    three brokers) unless the planner places them like any other topic."""
    bootstrap = kafka.bootstrap_servers
    if admin is None:
        admin = live_layout_admin(kafka, timeout_s)
    try:
        cluster = admin.describe_cluster(request_timeout=timeout_s).result(timeout=timeout_s)
        metadata = admin.list_topics(timeout=timeout_s)
    except Exception as exc:
        raise LiveLayoutError(f"cluster at {bootstrap} unreadable: {exc}") from None
    brokers = []
    sizes: dict[tuple[str, int], int] = {}
    for node in sorted(cluster.nodes, key=lambda n: n.id):
        brokers.append(
            {"id": node.id, "rack": node.rack or "default", "state": BrokerState.ACTIVE.value}
        )
        for key, size in partition_sizes(
            f"https://{node.host}:{jolokia_port}/jolokia/", timeout_s, jolokia_context
        ).items():
            sizes[key] = max(size, sizes.get(key, 0))
    partitions = []
    for topic in sorted(metadata.topics.values(), key=lambda t: str(t.topic)):
        name = str(topic.topic)
        for partition in sorted(topic.partitions.values(), key=lambda p: p.id):
            partitions.append(
                {
                    "topic": name,
                    "partition": partition.id,
                    "replicas": list(partition.replicas),
                    "size_bytes": sizes.get((name, partition.id), 0),
                }
            )
    return {"brokers": brokers, "partitions": partitions}
