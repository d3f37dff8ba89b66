"""Throttled reassignment through Kafka's admin API (agent.reassign_admin, kafka-python),
on the shared real cluster: moves submitted and listed while they run, the throttles the
pipeline asks for written and cleared, a running move cancelled, Kafka's refusal named."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from agent.pipeline import throttle_changes, throttles_for
from agent.reassign_admin import KafkaReassignmentAdmin, ReassignmentAdminError
from management_plane.workload import create_topic, durable_producer, produce_keyed
from tests.harness import ClusterHandle

pytestmark = pytest.mark.integration

BROKERS = (0, 1, 2)


@pytest.fixture
def admin(kafka_cluster: ClusterHandle) -> Iterator[KafkaReassignmentAdmin]:
    client = KafkaReassignmentAdmin(kafka_cluster.admin, jolokia_port=8778)
    try:
        yield client
    finally:
        client.close()


def _wait(what: str, check: object, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_a_throttled_move_runs_ends_and_leaves_no_throttle(
    kafka_cluster: ClusterHandle, admin: KafkaReassignmentAdmin
) -> None:
    connection = kafka_cluster.client_config()
    topic = kafka_cluster.unique_topic("reassign")
    create_topic(connection, topic, partitions=2, replication_factor=2)
    assert produce_keyed(durable_producer(connection), topic, 2000, 10).errors == []
    before = {p: r for (t, p), (r, _) in admin.isr().items() if t == topic}
    # Move each partition to the broker it lacks, keeping one old replica as leader.
    moving = []
    for partition, replicas in sorted(before.items()):
        missing = (set(BROKERS) - set(replicas)).pop()
        moving.append((topic, partition, replicas, (replicas[0], missing)))
    throttles = throttles_for(moving)
    admin.write_configs(throttle_changes(None, throttles, 10_000_000, [topic], BROKERS))
    written = admin.throttle_configs([topic], BROKERS)
    assert written[f"topic {topic} follower.replication.throttled.replicas"]
    _wait("the rates on every broker", lambda: len(admin.throttle_configs([], BROKERS)) == 6)

    started = time.monotonic()
    refused = admin.submit([(t, p, after) for t, p, _, after in moving])
    assert refused == {}
    assert time.monotonic() - started < 2.0  # a request, not a JVM
    _wait(
        "the moves to end",
        lambda: (
            not any(t == topic for t, _ in admin.reassigning())
            and all(admin.isr()[(topic, p)][0] == after for _, p, _, after in moving)
        ),
    )
    admin.elect_preferred([(topic, p) for _, p, _, _ in moving])
    admin.write_configs(throttle_changes(throttles, throttles_for([]), 10_000_000))
    _wait("no throttle left", lambda: admin.throttle_configs([topic], BROKERS) == {})


def test_a_running_move_is_listed_and_cancelled(
    kafka_cluster: ClusterHandle, admin: KafkaReassignmentAdmin
) -> None:
    connection = kafka_cluster.client_config()
    topic = kafka_cluster.unique_topic("cancel")
    create_topic(connection, topic, partitions=1, replication_factor=2)
    assert produce_keyed(durable_producer(connection), topic, 3000, 10).errors == []
    (replicas, _) = admin.isr()[(topic, 0)]
    missing = (set(BROKERS) - set(replicas)).pop()
    # A throttle of 1 byte/s keeps the copy running until it is cancelled.
    moving = [(topic, 0, replicas, (replicas[0], missing))]
    throttles = throttles_for(moving)
    admin.write_configs(throttle_changes(None, throttles, 1, [topic], BROKERS))
    try:
        assert admin.submit([(topic, 0, (replicas[0], missing))]) == {}
        running = admin.reassigning()[(topic, 0)]
        assert running.adding == (missing,) and running.target == (replicas[0], missing)
        assert admin.cancel([(topic, 0)]) == {}
        _wait("the cancel", lambda: (topic, 0) not in admin.reassigning())
        _wait("the old replicas", lambda: set(admin.isr()[(topic, 0)][0]) == set(replicas))
    finally:
        admin.write_configs(throttle_changes(throttles, throttles_for([]), 1))


def test_kafkas_refusal_is_named_per_partition(
    kafka_cluster: ClusterHandle, admin: KafkaReassignmentAdmin
) -> None:
    refused = admin.submit([(kafka_cluster.unique_topic("no-such"), 0, (0, 1))])
    assert list(refused.values()) == ["UnknownTopicOrPartitionError"]
    with pytest.raises(ReassignmentAdminError, match="write throttle configs failed"):
        admin.write_configs(throttle_changes(None, throttles_for([]), 1, [], [99]))
