"""`kaas plan export` reads the layout of the shared real cluster."""

from __future__ import annotations

import json

import pytest

from management_plane.workload import create_topic, durable_producer, produce_keyed
from tests.harness import ClusterHandle, kaas_cli

pytestmark = pytest.mark.integration


def test_export_lists_brokers_racks_replicas_and_sizes(kafka_cluster: ClusterHandle) -> None:
    topic = kafka_cluster.unique_topic("export")
    create_topic(kafka_cluster.bootstrap_servers, topic, partitions=3)
    assert (
        produce_keyed(durable_producer(kafka_cluster.bootstrap_servers), topic, 3000, 30).errors
        == []
    )
    result = kaas_cli(
        "plan", "export", "--bootstrap-server", kafka_cluster.layout.vms[0].kafka_endpoint
    )
    assert result.returncode == 0, result.stderr
    layout = json.loads(result.stdout)
    racks = {b["id"]: b["rack"] for b in layout["brokers"]}
    assert racks == {vm.broker_id: vm.zone for vm in kafka_cluster.layout.vms}
    mine = [p for p in layout["partitions"] if p["topic"] == topic]
    assert [p["partition"] for p in mine] == [0, 1, 2]
    assert all(sorted(p["replicas"]) == [0, 1, 2] for p in mine)
    assert all(p["size_bytes"] > 0 for p in mine)  # 3000 messages landed on disk
    assert not any(p["topic"].startswith("__") for p in layout["partitions"])


def test_export_of_an_unreachable_cluster_is_one_clear_line() -> None:
    result = kaas_cli("plan", "export", "--bootstrap-server", "127.0.0.1:1")
    assert result.returncode == 1
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith("kaas: error: cluster at 127.0.0.1:1 unreadable")
    )
