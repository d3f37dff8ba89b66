"""Drills on a fresh cluster of their own: a broker lost under acks=all load, and `kaas down`."""

from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import AdminClient

from management_plane.local.probes import port_open
from management_plane.local.processes import is_alive
from management_plane.local.state import require_state
from management_plane.workload import (
    create_topic,
    durable_producer,
    produce_keyed,
    read_back,
)
from planner.pki.client_settings import ClientConfig
from tests.harness import ClusterHandle

pytestmark = pytest.mark.drill


def _isr_complete(connection: ClientConfig, topic: str) -> bool:
    metadata = AdminClient(connection).list_topics(topic, timeout=10)
    partitions = metadata.topics[topic].partitions.values()
    return all(sorted(p.isrs) == sorted(p.replicas) and len(p.replicas) == 3 for p in partitions)


def test_killed_broker_loses_no_acknowledged_message_and_rejoins_every_isr(
    fresh_cluster: ClusterHandle,
) -> None:
    connection = fresh_cluster.client_config()
    topic = fresh_cluster.unique_topic("broker-loss")
    create_topic(connection, topic, partitions=6)
    producer = durable_producer(connection)
    before = produce_keyed(producer, topic, messages=2000, keys=20, key_prefix="before")
    assert before.errors == []

    assert fresh_cluster.vm("kill", "vm2") == "vm2: killed kafka, zookeeper"
    state = require_state(fresh_cluster.home)
    assert state.record("vm2", "kafka") is None

    # RF 3 and min ISR 2: with one broker gone every acks=all write is still acknowledged.
    during = produce_keyed(producer, topic, messages=5000, keys=20, key_prefix="during")
    assert during.errors == []
    assert len(during.acknowledged) == 5000

    assert fresh_cluster.vm("start", "vm2").startswith("vm2: started")
    deadline = time.monotonic() + 120
    while not _isr_complete(connection, topic):
        assert time.monotonic() < deadline, "vm2's broker did not rejoin every ISR within 120s"
        time.sleep(1)

    acknowledged = before.acknowledged + during.acknowledged
    result = read_back(connection, topic, acknowledged)
    assert result.expected == 7000
    assert result.missing == 0, "acknowledged messages were lost"
    assert result.exactly_once_in_order, result


def test_down_leaves_no_process_and_no_listening_port(fresh_cluster: ClusterHandle) -> None:
    state = require_state(fresh_cluster.home)
    records = [state.record(vm.name, k) for vm in state.layout.vms for k in ("zookeeper", "kafka")]
    assert all(is_alive(r) for r in records)
    fresh_cluster.vm("pause", "vm3", "--only", "kafka")  # a paused broker must not block shutdown
    result = fresh_cluster.kaas("down")
    assert result.returncode == 0, result.stderr
    assert not any(is_alive(r) for r in records)
    endpoints = [(vm.address, port) for vm in state.layout.vms for port in vm.ports.all().values()]
    assert [e for e in endpoints if port_open(*e, timeout=0.2)] == []
