"""Reads of the live cluster the agent's snapshot and restarts need: metadata, controller,
min ISR settings, and Jolokia reads of under-replicated partitions."""

from __future__ import annotations

import json
import logging
import ssl
import urllib.request
from typing import Any

from confluent_kafka.admin import AdminClient, ConfigResource

# The agent's metadata read is the planner's, shared with the management plane.
from planner.live_layout import partition_states as partition_states
from planner.pki.client_settings import InternalClient

# librdkafka reports every refused connection; a stopped broker is a state the agent handles.
_RDKAFKA_LOG = logging.getLogger("kaas.agent.rdkafka")
_RDKAFKA_LOG.setLevel(logging.CRITICAL)

URP_MBEAN = "kafka.server:type=ReplicaManager,name=UnderReplicatedPartitions"
BROKER_STATE_MBEAN = "kafka.server:type=KafkaServer,name=BrokerState"
# Kafka's BrokerState: RUNNING once started (a KRaft broker: once unfenced).
RUNNING_STATE = 3


def admin_client(client: InternalClient) -> AdminClient:
    return AdminClient(client.librdkafka(**{"socket.timeout.ms": 5000}), logger=_RDKAFKA_LOG)


def metadata_answers(admin: AdminClient, broker_id: int, timeout: float) -> bool:
    """Whether this broker answers a metadata request and lists itself."""
    try:
        return broker_id in admin.list_topics(timeout=timeout).brokers
    except Exception:
        return False


def topic_min_isr(admin: AdminClient, topics: set[str], timeout: float = 10.0) -> dict[str, int]:
    if not topics:
        return {}
    futures = admin.describe_configs([ConfigResource("topic", t) for t in sorted(topics)])
    result = {}
    for resource, future in futures.items():
        entries = future.result(timeout=timeout)
        entry = entries.get("min.insync.replicas")
        if entry is not None and entry.value is not None:
            result[resource.name] = int(entry.value)
    return result


def jolokia_read(
    url: str, mbean: str, context: ssl.SSLContext | None = None, timeout: float = 3.0
) -> Any:
    """One attribute read through Jolokia's REST interface (GET /read/<mbean>); `context`:
    the TLS client context presenting the node's certificate (Jolokia requires one)."""
    with urllib.request.urlopen(f"{url}read/{mbean}", timeout=timeout, context=context) as response:
        body = json.load(response)
    if body.get("status") != 200:
        raise RuntimeError(f"Jolokia read of {mbean} failed: {body.get('error')}")
    return body["value"]


def under_replicated(jolokia_url: str, context: ssl.SSLContext | None = None) -> int:
    value = jolokia_read(jolokia_url, URP_MBEAN, context)
    return int(value["Value"] if isinstance(value, dict) else value)


def broker_state(jolokia_url: str, context: ssl.SSLContext | None = None) -> int:
    """The broker process's own BrokerState (a metadata answer may come from another broker
    that still lists this one)."""
    value = jolokia_read(jolokia_url, BROKER_STATE_MBEAN, context)
    return int(value["Value"] if isinstance(value, dict) else value)
