"""The management plane on a real cluster (local provider): create a 3-VM cluster through the
API, replace one VM immutably under an acks=all idempotent producer and a consumer, and kill
the service (SIGKILL) while it waits for the old broker to drain: started again, it resumes
the operation at the persisted step and finishes it. The new broker holds every replica the
old one held, the old VM is gone, no acknowledged message is lost, no produce fails."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from management_plane.local.probes import port_open
from management_plane.local.state import require_state
from management_plane.workload import (
    BackgroundProducer,
    ProduceResult,
    create_topic,
    durable_producer,
    produce_keyed,
    read_back,
)
from planner.pki.client_settings import ClientConfig
from planner.zookeeper_ensemble import parse_ensemble_config
from tests import harness
from tests.mp_service import ServiceHandle

pytestmark = pytest.mark.drill


def assignment(connection: ClientConfig, topic: str) -> dict[int, tuple[list[int], list[int]]]:
    metadata = AdminClient(connection).list_topics(topic, timeout=10)
    return {
        p.id: (list(p.replicas), list(p.isrs)) for p in metadata.topics[topic].partitions.values()
    }


def assert_three_voters_without(
    service: ServiceHandle, cluster: str, vms: list[dict[str, Any]], gone_address: str
) -> None:
    """The voting ensemble is back at three and no longer names the gone VM's server."""
    zk = service.zookeeper(cluster, ",".join(f"{vm['address']}:2181" for vm in vms))
    zk.start(timeout=15)
    try:
        config = zk.get("/zookeeper/config")[0].decode()
    finally:
        zk.stop()
        zk.close()
    ensemble = parse_ensemble_config(config)
    assert len(ensemble.participants) == 3, config
    assert gone_address + ":" not in config, config


class Load(BackgroundProducer):
    """The background producer and a consumer of the same topic, both running until stopped."""

    def __init__(self, connection: ClientConfig, topic: str) -> None:
        super().__init__(connection, topic)
        self.connection = connection
        self.consumed = 0
        self.consumer_thread = threading.Thread(target=self._consume, daemon=True)

    def _consume(self) -> None:
        consumer = Consumer(
            {
                **self.connection,
                "group.id": f"{self.topic}-live",
                "auto.offset.reset": "earliest",
            }
        )
        consumer.subscribe([self.topic])
        try:
            while not self.stopping.is_set():
                message = consumer.poll(0.5)
                if message is not None and message.error() is None:
                    self.consumed += 1
        finally:
            consumer.close()

    def start(self) -> None:
        super().start()
        self.consumer_thread.start()

    def stop(self) -> None:
        super().stop()
        self.consumer_thread.join(240)

    def assert_nothing_lost(self, connection: ClientConfig, seed: ProduceResult) -> int:
        """No produce error, the live consumer saw messages, and every acknowledged message
        (the seed's and the load's) reads back once, in order per key; their number."""
        assert self.errors == [], self.errors[:5]
        assert self.consumed > 0
        acknowledged = seed.acknowledged + self.acknowledged
        check = read_back(connection, self.topic, acknowledged)
        assert check.missing == 0, f"{check.missing} acknowledged messages lost"
        return len(acknowledged)


def test_replace_one_vm_under_load_with_the_service_killed_mid_way(
    service: ServiceHandle,
) -> None:
    status, op = service.call("POST", "/v1/clusters", {"name": "mp", "broker_count": 3})
    assert status == 202, op
    service.wait_operation(op["op_id"], 420)
    service.remember_clusters()
    status, cluster = service.call("GET", "/v1/clusters/mp")
    assert status == 200 and cluster["status"] == "running"
    assert sorted(vm["broker_id"] for vm in cluster["vms"]) == [0, 1, 2]
    connection = harness.api_cluster_client(cluster).librdkafka()
    old = next(vm for vm in cluster["vms"] if vm["broker_id"] == 0)

    topic = harness.ClusterHandle.unique_topic("replace")
    create_topic(connection, topic, partitions=6)
    seed = produce_keyed(durable_producer(connection), topic, 20000, 20, key_prefix="seed")
    assert seed.errors == []
    held_by_old = {p for p, (replicas, _) in assignment(connection, topic).items() if 0 in replicas}
    assert held_by_old, "broker 0 should hold replicas of an RF-3 topic on 3 brokers"

    started = time.monotonic()
    with Load(connection, topic) as load:
        status, op = service.call("POST", "/v1/clusters/mp/replace", {"vm_id": old["vm_id"]})
        assert status == 202, op
        op_id = op["op_id"]
        # A second write while the replacement runs is refused, not interleaved.
        assert service.call("POST", "/v1/clusters/mp/replace", {"vm_id": "vm2"})[0] == 409
        harness.wait_until(
            lambda: (service.operation(op_id)["step"] or "").startswith("wait_drained"),
            600,
            "the replacement to reach wait_drained",
            interval=0.5,
        )
        service.remember_clusters()  # the new VM's processes, for the end-of-session check
        service.kill()  # the database is the only memory that survives this
        time.sleep(3)
        service.start()
        final = service.wait_operation(op_id, 1200)
    replace_seconds = time.monotonic() - started

    steps = [(j["step"], j["outcome"]) for j in final["journal"]]
    assert ("wait_drained:0", "done") in steps and ("recycle:0", "done") in steps
    assert [s for s, o in steps if o == "done"][-1] == "finish"
    status, cluster = service.call("GET", "/v1/clusters/mp")
    vm_ids = [vm["vm_id"] for vm in cluster["vms"]]
    assert old["vm_id"] not in vm_ids and len(vm_ids) == 3
    new_vm = next(vm for vm in cluster["vms"] if vm["broker_id"] not in (1, 2))
    assert new_vm["zone"] == old["zone"]
    assert cluster["spec"]["draining_broker_ids"] == []

    # The old VM is gone: no processes, no listener, no folder.
    state = require_state(service.home / "local" / "mp")
    assert old["vm_id"].split("/")[1] not in [vm.name for vm in state.layout.vms]
    assert not port_open(old["address"], 9092) and not port_open(old["address"], 2181)
    # The voting ensemble is back at three without the old VM's server.
    assert_three_voters_without(service, "mp", cluster["vms"], old["address"])
    # The new broker holds every replica the old one held; the old holds none.
    after = assignment(harness.api_cluster_client(cluster).librdkafka(), topic)
    assert all(new_vm["broker_id"] in after[p][0] for p in held_by_old)
    assert all(0 not in replicas for replicas, _ in after.values())
    assert all(sorted(r) == sorted(i) for r, i in after.values())

    acknowledged = load.assert_nothing_lost(harness.api_cluster_client(cluster).librdkafka(), seed)
    print(
        f"replacement of one VM under load: {replace_seconds:.0f}s, "
        f"{acknowledged} messages acknowledged, 0 lost"
    )
