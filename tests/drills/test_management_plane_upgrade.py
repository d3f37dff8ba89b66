"""Upgrading a cluster from Kafka 3.8.1 to 3.9.2 by immutable replacement, under an acks=all
producer and a consumer: inter.broker.protocol.version is pinned to 3.8 while versions mix
and unpinned once every broker runs 3.9.2; zero acknowledged messages lost."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from management_plane.local.state import require_state
from management_plane.workload import (
    create_topic,
    durable_producer,
    produce_keyed,
    read_back,
)
from tests import harness
from tests.drills.test_management_plane import Load
from tests.mp_service import ServiceHandle

# Every VM replaced in turn, then the protocol unpinned (14 minutes of a loaded CI run's
# worker): run by `make drills`. `make test` keeps
# the replacement under load (test_management_plane.py) and the upgrade's steps and protocol
# pinning against fakes (tests/unit/test_mp_operations.py, test_mp_controller.py).
pytestmark = [pytest.mark.drill, pytest.mark.long_drill]


def broker_versions(home: Path) -> dict[str, str]:
    """The Kafka version each VM's running broker was started from (its class path)."""
    state = require_state(home)
    versions = {}
    for vm in state.layout.vms:
        record = state.record(vm.name, "kafka")
        assert record is not None, f"{vm.name} runs no broker"
        command = " ".join(psutil.Process(record.pid).cmdline())
        versions[vm.name] = next(v for v in ("3.8.1", "3.9.2") if f"/kafka/{v}/" in command)
    return versions


def test_upgrade_by_replacement_with_the_protocol_in_two_phases(service: ServiceHandle) -> None:
    status, op = service.call(
        "POST", "/v1/clusters", {"name": "up", "broker_count": 3, "kafka_version": "3.8.1"}
    )
    assert status == 202, op
    service.wait_operation(op["op_id"], 600)
    service.remember_clusters()
    home = service.home / "local" / "up"
    assert set(broker_versions(home).values()) == {"3.8.1"}
    _, cluster = service.call("GET", "/v1/clusters/up")
    connection = harness.api_cluster_client(cluster).librdkafka()
    topic = harness.ClusterHandle.unique_topic("upgrade")
    create_topic(connection, topic, partitions=3)
    seed = produce_keyed(durable_producer(connection), topic, 5000, 10, key_prefix="seed")
    assert seed.errors == []

    with Load(connection, topic) as load:
        status, op = service.call(
            "POST", "/v1/clusters/up/upgrade", {"kafka_version": "3.9.2", "batch_size": 1}
        )
        assert status == 202, op
        final = service.wait_operation(op["op_id"], 3000)
        service.remember_clusters()

    messages = {j["step"]: j["message"] for j in final["journal"] if j["outcome"] == "done"}
    assert "pinned to 3.8" in messages["pin_protocol"]
    assert "unpinned" in messages["unpin_protocol"]
    _, cluster = service.call("GET", "/v1/clusters/up")
    assert cluster["spec"]["kafka_version"] == "3.9.2"
    assert "inter.broker.protocol.version" not in cluster["spec"]["broker_config"]
    assert [vm["kafka_version"] for vm in cluster["vms"]] == ["3.9.2"] * 3
    assert set(broker_versions(home).values()) == {"3.9.2"}
    assert not {"up/vm1", "up/vm2", "up/vm3"} & {vm["vm_id"] for vm in cluster["vms"]}

    assert load.errors == []
    acknowledged = seed.acknowledged + load.acknowledged
    check = read_back(harness.api_cluster_client(cluster).librdkafka(), topic, acknowledged)
    assert check.missing == 0, f"{check.missing} acknowledged messages lost"
