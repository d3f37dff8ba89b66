"""Broker loss under the management plane (local provider): a 3-VM cluster made through the
API runs an acks=all idempotent producer and a consumer; one VM is killed hard (its agent,
broker and ZooKeeper server SIGKILLed, as a lost machine). With a short loss threshold the
service notices on its own, recycles the dead VM and starts one that keeps the lost broker
id; Kafka re-replicates onto it. Asserted: the same broker id on a new VM, every ISR complete,
the voting ensemble back at three, no acknowledged message lost, no produce error."""

from __future__ import annotations

import time
from typing import Any

import pytest

from management_plane.local.cluster import LocalCluster
from management_plane.workload import (
    create_topic,
    durable_producer,
    produce_keyed,
)
from tests import harness
from tests.drills.test_management_plane import Load, assert_three_voters_without, assignment
from tests.mp_service import ServiceHandle

pytestmark = pytest.mark.drill

LOSS_THRESHOLD_S = 20


def lost_vm_operation(service: ServiceHandle, cluster: str) -> dict[str, Any] | None:
    status, ops = service.call("GET", f"/v1/operations?cluster={cluster}")
    assert status == 200, ops
    found = [op for op in ops if op["kind"] == "replace_lost_vm"]
    return found[0] if found else None


@pytest.mark.service_args("--broker-loss-after", str(LOSS_THRESHOLD_S))
def test_a_lost_vm_is_replaced_keeping_its_broker_id_with_no_loss(service: ServiceHandle) -> None:
    status, op = service.call("POST", "/v1/clusters", {"name": "loss", "broker_count": 3})
    assert status == 202, op
    service.wait_operation(op["op_id"], 420)
    service.remember_clusters()
    status, cluster = service.call("GET", "/v1/clusters/loss")
    assert status == 200 and cluster["status"] == "running"
    connection = harness.api_cluster_client(cluster).librdkafka()
    lost = next(vm for vm in cluster["vms"] if vm["broker_id"] == 1)

    topic = harness.ClusterHandle.unique_topic("loss")
    create_topic(connection, topic, partitions=6)
    seed = produce_keyed(durable_producer(connection), topic, 5000, 20, key_prefix="seed")
    assert seed.errors == []
    naming_lost = {p for p, (replicas, _) in assignment(connection, topic).items() if 1 in replicas}
    assert len(naming_lost) == 6, "every partition of an RF-3 topic on 3 brokers names broker 1"
    # A healthy cluster is left alone for longer than the threshold.
    time.sleep(LOSS_THRESHOLD_S + 6)
    assert lost_vm_operation(service, "loss") is None

    with Load(connection, topic) as load:
        time.sleep(3)
        killed = LocalCluster(service.home / "local" / "loss").vm_action(
            "kill", lost["vm_id"].split("/")[1]
        )
        assert killed.endswith("killed agent, kafka, zookeeper"), killed
        killed_at = time.monotonic()
        harness.wait_until(
            lambda: lost_vm_operation(service, "loss") is not None,
            LOSS_THRESHOLD_S + 90,
            "the service to notice the lost VM",
        )
        noticed_s = time.monotonic() - killed_at
        op = lost_vm_operation(service, "loss")
        assert op is not None
        final = service.wait_operation(op["op_id"], 900)
        restored_s = time.monotonic() - killed_at
        service.remember_clusters()  # the new VM's processes, for the end-of-session check
        time.sleep(3)  # writes keep flowing onto the restored broker

    assert noticed_s >= LOSS_THRESHOLD_S, "replaced before the whole threshold of absence"
    journal = [(j["step"], j["outcome"]) for j in final["journal"]]
    assert journal[0] == ("decide", "detected"), journal
    assert "agent and broker both gone" in final["journal"][0]["message"]
    assert ("wait_replicated:0", "done") in journal and journal[-1] == ("finish", "done")
    assert final["params"] == {"vm_id": lost["vm_id"], "broker_id": 1}

    status, cluster = service.call("GET", "/v1/clusters/loss")
    vms = {vm["vm_id"]: vm for vm in cluster["vms"]}
    assert lost["vm_id"] not in vms and len(vms) == 3
    new_vm = next(vm for vm in vms.values() if vm["broker_id"] == 1)
    assert new_vm["zone"] == lost["zone"] and new_vm["address"] != lost["address"]
    after = assignment(harness.api_cluster_client(cluster).librdkafka(), topic)
    assert all(1 in after[p][0] and 1 in after[p][1] for p in naming_lost), after
    assert all(sorted(r) == sorted(i) for r, i in after.values()), after

    assert_three_voters_without(service, "loss", list(vms.values()), lost["address"])

    acknowledged = load.assert_nothing_lost(harness.api_cluster_client(cluster).librdkafka(), seed)
    print(
        f"broker loss: noticed {noticed_s:.0f}s after the kill (threshold {LOSS_THRESHOLD_S}s), "
        f"replication restored {restored_s:.0f}s after it; {acknowledged} acknowledged, 0 lost"
    )
