"""A Kafka 3.9 ZooKeeper-mode cluster migrated to KRaft through the service (`POST
/v1/clusters/{name}/migrate-to-kraft`, what `kaas cluster migrate-to-kraft` sends) under an
acks=all producer and a live consumer: the agents start, format and roll per phase, and the
run ends finalised with zero acknowledged messages lost, no produce error, a consumer
group's committed offsets kept, Kafka's migration record copied and its chroot removed,
although the service was SIGKILLed mid-way."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from management_plane.workload import create_topic, durable_producer, produce_keyed
from planner.pki.client_settings import ClientConfig
from tests import harness
from tests.drills.test_management_plane import Load
from tests.mp_service import ServiceHandle

# A whole migration of a 3-VM cluster (about ten minutes): under `make drills` only.
pytestmark = [pytest.mark.drill, pytest.mark.long_drill]

GROUP_MESSAGES = 3000


def commit_half(connection: ClientConfig, topic: str, group: str) -> dict[int, int]:
    """A consumer group reads part of the topic and commits: partition -> committed offset."""
    consumer = Consumer(
        {
            **connection,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    read = 0
    deadline = time.monotonic() + 120
    while read < GROUP_MESSAGES // 2 and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is not None and message.error() is None:
            read += 1
    consumer.commit(asynchronous=False)
    committed = committed_offsets(consumer, topic)
    consumer.close()
    assert read >= GROUP_MESSAGES // 2 and sum(committed.values()) >= read
    return committed


def committed_offsets(consumer: Consumer, topic: str) -> dict[int, int]:
    partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
    found = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=30)
    return {tp.partition: tp.offset for tp in found if tp.offset >= 0}


def test_a_zookeeper_mode_cluster_migrates_to_kraft_under_load(service: ServiceHandle) -> None:
    status, op = service.call(
        "POST", "/v1/clusters", {"name": "mig", "broker_count": 3, "kafka_version": "3.9.2"}
    )
    assert status == 202, op
    service.wait_operation(op["op_id"], 600)
    service.remember_clusters()
    _, cluster = service.call("GET", "/v1/clusters/mig")
    connection = harness.api_cluster_client(cluster).librdkafka()
    topic = harness.ClusterHandle.unique_topic("migrate")
    create_topic(connection, topic, partitions=3)
    seed = produce_keyed(durable_producer(connection), topic, GROUP_MESSAGES, 10, key_prefix="seed")
    assert seed.errors == []
    group = f"{topic}-kept"
    committed = commit_half(connection, topic, group)

    started = time.monotonic()
    with Load(connection, topic) as load:
        status, op = service.call("POST", "/v1/clusters/mig/migrate-to-kraft", {})
        assert status == 202, op
        op_id = op["op_id"]
        # The service is killed while the brokers roll into KRaft, and started again: the
        # journaled operation resumes where it stood.
        harness.wait_until(
            lambda: service.operation(op_id)["step"] == "wait_applied:2",
            900,
            "the migration to roll the brokers into KRaft",
            interval=0.5,
        )
        service.kill()
        time.sleep(3)
        service.start()
        final = service.wait_operation(op_id, 1500)
        migration_s = time.monotonic() - started
        time.sleep(3)  # the load goes on a moment on the finalised cluster
    service.remember_clusters()

    done = [j["step"] for j in final["journal"] if j["outcome"] == "done"]
    assert len(done) == len(set(done)) == len(final["steps"]), "a step ran twice or not at all"
    messages = {j["step"]: j["message"] for j in final["journal"] if j["outcome"] == "done"}
    assert "metadata migrated to KRaft by controller 300" in messages["wait_migrated"]
    assert "mig runs KRaft" in messages["remove_kafka_chroot"]
    _, after = service.call("GET", "/v1/clusters/mig")
    assert after["spec"]["migration"]["phase"] == "finalized"
    hosts = ",".join(f"{vm['address']}:2181" for vm in after["vms"])
    zookeeper = service.zookeeper("mig", hosts)
    zookeeper.start(30)
    try:
        assert zookeeper.exists("/kafka/mig") is None, "Kafka's chroot is still there"
        assert zookeeper.exists("/kaas/mig/spec") is not None, "KaaS's own znodes stay"
    finally:
        zookeeper.stop()
        zookeeper.close()

    # The brokers run as KRaft brokers and all three are listed.
    connection = harness.api_cluster_client(after).librdkafka()
    consumer = Consumer({**connection, "group.id": group, "enable.auto.commit": False})
    try:
        assert committed_offsets(consumer, topic) == committed, "committed offsets changed"
        assert sorted(consumer.list_topics(timeout=30).brokers) == [0, 1, 2]
    finally:
        consumer.close()

    stall = max(r.seconds for r in load.results)
    print(
        f"migration to KRaft: {migration_s:.0f}s, {len(load.acknowledged)} acknowledged under "
        f"load, slowest 500-message batch {stall:.1f}s"
    )
    load.assert_nothing_lost(connection, seed)
