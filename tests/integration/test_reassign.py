"""Throttled reassignment through Kafka's own tool, on the shared real cluster."""

from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from agent.reassign import PartitionMove, ReassignmentTool, parse_verify_output, reassignment_json
from management_plane.local.image import load_image
from management_plane.workload import create_topic, durable_producer, produce_keyed
from tests.harness import ClusterHandle

pytestmark = pytest.mark.integration


def test_reassignment_json_is_kafkas_format() -> None:
    text = reassignment_json([PartitionMove("t", 0, (2, 1))])
    assert (
        text == '{"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [2, 1]}]}'
    )


def test_verify_output_is_read() -> None:
    running = parse_verify_output(
        "Reassignment of partition t-0 is still in progress.\nReassignment of partition t-1 is completed."
    )
    assert running.in_progress == (("t", 0),) and not running.complete
    done = parse_verify_output("Reassignment of partition t-0 is completed.\nThrottle was removed.")
    assert done.complete and done.throttles_removed


def test_a_throttled_move_completes_and_its_throttles_go(kafka_cluster: ClusterHandle) -> None:
    connection = kafka_cluster.client_config()
    topic = kafka_cluster.unique_topic("reassign")
    create_topic(connection, topic, partitions=2, replication_factor=2)
    assert produce_keyed(durable_producer(connection), topic, 2000, 10).errors == []
    admin = AdminClient(connection)
    before = {
        p.id: tuple(p.replicas)
        for p in admin.list_topics(topic, timeout=10).topics[topic].partitions.values()
    }
    # Move each partition to the broker it lacks, keeping one old replica as leader.
    moves = []
    for partition, replicas in before.items():
        missing = ({0, 1, 2} - set(replicas)).pop()
        moves.append(PartitionMove(topic, partition, (replicas[0], missing)))
    tool = ReassignmentTool("java", load_image().kafka_libs(), kafka_cluster.admin)
    tool.execute(moves, throttle_bytes_per_s=10_000_000)

    resource = ConfigResource("topic", topic)
    throttled = (
        admin.describe_configs([resource])[resource]
        .result(10)["leader.replication.throttled.replicas"]
        .value
    )
    deadline = time.monotonic() + 120
    result = tool.verify(moves)
    while not result.complete:
        assert time.monotonic() < deadline, f"reassignment still running: {result.in_progress}"
        time.sleep(1)
        result = tool.verify(moves)
    after = {
        p.id: tuple(p.replicas)
        for p in admin.list_topics(topic, timeout=10).topics[topic].partitions.values()
    }
    assert after == {m.partition: m.replicas for m in moves}
    # The throttles were on while it ran (or it was too quick to see them) and are gone now.
    assert throttled is not None
    left = (
        admin.describe_configs([resource])[resource]
        .result(10)["leader.replication.throttled.replicas"]
        .value
    )
    assert left in ("", None)


def test_a_failed_call_names_the_problem(kafka_cluster: ClusterHandle) -> None:
    tool = ReassignmentTool("java", load_image().kafka_libs(), kafka_cluster.admin)
    with pytest.raises(Exception, match="kafka-reassign-partitions --execute"):
        tool.execute(
            [PartitionMove("no-such-topic-" + kafka_cluster.unique_topic("x"), 0, (0, 1))], 1000
        )
