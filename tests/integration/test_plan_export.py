"""`kaas plan export` reads the layout of the shared real cluster."""

from __future__ import annotations

import json

import pytest

from management_plane.workload import (
    consume_group,
    create_topic,
    durable_producer,
    produce_keyed,
)
from tests.harness import ClusterHandle, kaas_cli

pytestmark = pytest.mark.integration


def test_export_lists_brokers_racks_replicas_and_sizes(kafka_cluster: ClusterHandle) -> None:
    topic = kafka_cluster.unique_topic("export")
    create_topic(kafka_cluster.client_config(), topic, partitions=3)
    assert (
        produce_keyed(durable_producer(kafka_cluster.client_config()), topic, 3000, 30).errors == []
    )
    # A consumer group: Kafka creates __consumer_offsets for it if no group has yet.
    consumed = consume_group(kafka_cluster.client_config(), topic, f"{topic}-group", 1, 3000)
    assert sum(len(r) for r in consumed.records_by_consumer) == 3000
    result = kaas_cli(
        "plan",
        "export",
        *("--bootstrap-server", kafka_cluster.layout.vms[0].kafka_internal_endpoint),
        *("--client-dir", str(kafka_cluster.admin.identity.directory)),
        *("--node-identity", str(kafka_cluster.node_identity.directory)),
    )
    assert result.returncode == 0, result.stderr
    layout = json.loads(result.stdout)
    racks = {b["id"]: b["rack"] for b in layout["brokers"]}
    assert racks == {vm.broker_id: vm.zone for vm in kafka_cluster.layout.vms}
    mine = [p for p in layout["partitions"] if p["topic"] == topic]
    assert [p["partition"] for p in mine] == [0, 1, 2]
    assert all(sorted(p["replicas"]) == [0, 1, 2] for p in mine)
    assert all(p["size_bytes"] > 0 for p in mine)  # 3000 messages landed on disk
    # Kafka's internal topics are placed like any other: the export lists them.
    offsets = [p for p in layout["partitions"] if p["topic"] == "__consumer_offsets"]
    assert offsets, sorted({p["topic"] for p in layout["partitions"]})
    assert all(len(p["replicas"]) == 3 for p in offsets)


def test_export_of_an_unreachable_cluster_is_one_clear_line(kafka_cluster: ClusterHandle) -> None:
    result = kaas_cli(
        "plan",
        "export",
        *("--bootstrap-server", "127.0.0.1:1"),
        *("--client-dir", str(kafka_cluster.admin.identity.directory)),
        *("--node-identity", str(kafka_cluster.node_identity.directory)),
    )
    assert result.returncode == 1
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith("kaas: error: cluster at 127.0.0.1:1 unreadable")
    )
