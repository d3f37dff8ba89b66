"""agent/metrics against the shared real cluster: a real broker's Jolokia 2.6.0 agent, a
statsd UDP socket the test listens on, and a metrics topic consumed back and validated
against the published schema. Also: Jolokia and Kafka unreachable."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import socket
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from agent.metrics import MetricsCollector, MetricsPublisher, MetricsSample
from agent.metrics.lag import ConsumerLagReader, GroupLag
from management_plane.workload import create_topic, durable_producer, produce_keyed
from planner.pki.authority import Role, create_authority, issue
from planner.pki.client_settings import ClientConfig, InternalClient
from planner.pki.files import IdentityFiles, write_identity
from planner.pki.tls import client_context
from tests.harness import ClusterHandle

pytestmark = pytest.mark.integration

SCHEMA = json.loads(
    (Path(__file__).resolve().parents[2] / "analytics/schemas/metrics-v1.schema.json").read_text()
)


def partition_leader(connection: ClientConfig, topic: str, partition: int) -> int:
    metadata = AdminClient(connection).list_topics(topic, timeout=30)
    return int(metadata.topics[topic].partitions[partition].leader)


def collector_for(kafka_cluster: ClusterHandle, broker_id: int) -> MetricsCollector:
    vm = next(vm for vm in kafka_cluster.layout.vms if vm.broker_id == broker_id)
    return MetricsCollector(
        kafka_cluster.layout.name,
        vm.broker_id,
        vm.zone,
        vm.jolokia_url,
        [str(vm.kafka_data_dir)],
        interval_s=30.0,
        agent_version="test",
        jolokia_context=client_context(kafka_cluster.node_identity),
    )


def produce(kafka_cluster: ClusterHandle, topic: str, messages: int) -> set[int]:
    """Produce over 3 keys (the same 3 each call); the partitions that received them."""
    produced = produce_keyed(
        durable_producer(kafka_cluster.client_config()), topic, messages=messages, keys=3
    )
    assert produced.errors == []
    return {partition for _, _, partition, _ in produced.acknowledged}


def receive_datagrams(listener: socket.socket, until: Callable[[str], bool]) -> str:
    text = ""
    deadline = time.monotonic() + 10
    while not until(text) and time.monotonic() < deadline:
        with contextlib.suppress(TimeoutError):
            text += listener.recv(65536).decode() + "\n"
    return text


def consume_all(connection: ClientConfig, topic: str, expected: int) -> list[Any]:
    consumer = Consumer(
        {
            **connection,
            "group.id": f"{topic}-reader",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    messages: list[Any] = []
    deadline = time.monotonic() + 60
    try:
        while len(messages) < expected and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                messages.append(message)
    finally:
        consumer.close()
    return messages


def test_a_real_broker_reports_a_topics_traffic_its_partitions_and_no_urp(
    kafka_cluster: ClusterHandle,
) -> None:
    topic = kafka_cluster.unique_topic("metrics-traffic")
    create_topic(kafka_cluster.client_config(), topic, partitions=3)
    # The first batch creates the topic's meters on the leaders it reaches; the broker
    # measured leads a partition that the keys reach (3 keys may miss a partition).
    busy_partition = min(produce(kafka_cluster, topic, 500))
    leader = partition_leader(kafka_cluster.client_config(), topic, busy_partition)
    collector = collector_for(kafka_cluster, leader)

    first = collector.collect()
    produce(kafka_cluster, topic, 2000)
    second = collector.collect()

    for sample in (first, second):
        jsonschema.validate(sample.record, SCHEMA)
        assert sample.errors == (), sample.record["errors"]
    record = second.record
    assert (record["broker_id"], record["rack"]) == (leader, collector.identity.rack)
    broker = record["broker"]
    assert broker["under_replicated_partitions"] == 0
    assert broker["offline_partitions_count"] == 0
    assert broker["leader_count"] >= 1 and broker["partition_count"] >= 3
    assert broker["bytes_in_per_s"] > 0 and broker["messages_in_per_s"] > 0
    assert 0 < broker["request_handler_avg_idle_percent"] <= 1
    assert broker["log_cleaner_time_since_last_run_ms"] is not None
    # the second collect's rates are counter deltas over its own interval
    assert 0 < record["interval_s"] < 60
    topic_entry = next(t for t in record["topics"] if t["topic"] == topic)
    assert topic_entry["bytes_in_per_s"] > 0
    assert topic_entry["messages_in_per_s"] > 0
    # replication factor 3 on 3 brokers: every broker hosts every partition of the topic
    partitions = {p["partition"]: p for p in record["partitions"] if p["topic"] == topic}
    assert sorted(partitions) == [0, 1, 2]
    assert partitions[busy_partition]["leader"] is True
    assert sum(p["size_bytes"] for p in partitions.values()) > 0
    assert sum(p["log_end_offset"] for p in partitions.values()) == 2500
    assert broker["log_size_bytes"] >= sum(p["size_bytes"] for p in partitions.values())
    assert record["host"]["log_dir_free_bytes"] > 0
    assert record["host"]["cpu_percent"] is not None


def test_collect_is_fast_and_a_record_is_small(kafka_cluster: ClusterHandle) -> None:
    collector = collector_for(kafka_cluster, 0)
    samples = [collector.collect() for _ in range(20)]
    seconds = sorted(sample.collect_s for sample in samples)
    sizes = [len(sample.to_json_bytes()) for sample in samples]
    partitions = len(samples[-1].record["partitions"])
    print(
        f"\ncollect() against a real broker ({partitions} partitions): median"
        f" {statistics.median(seconds) * 1000:.1f} ms, max {seconds[-1] * 1000:.1f} ms;"
        f" record {sizes[-1]} bytes ({(sizes[-1] - sizes[0]) if sizes else 0} drift)"
    )
    assert all(sample.errors == () for sample in samples)
    assert statistics.median(seconds) < 0.5
    assert sizes[-1] < 1000 + 200 * partitions


def test_a_sample_reaches_statsd_and_the_metrics_topic_as_schema_v1(
    kafka_cluster: ClusterHandle,
) -> None:
    metrics_topic = kafka_cluster.unique_topic("kaas-metrics")
    collector = collector_for(kafka_cluster, 1)
    sample = collector.collect()
    assert sample.errors == ()
    cluster = kafka_cluster.layout.name
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.settimeout(0.2)
        publisher = MetricsPublisher(
            "127.0.0.1",
            listener.getsockname()[1],
            "kaas",
            kafka_cluster.admin,
            topic=metrics_topic,
            flush_timeout_s=10.0,  # the first publish also creates the topic
        )
        try:
            result = publisher.publish(sample)
            again = publisher.publish(collector.collect())
            gauges = receive_datagrams(listener, lambda text: text.count("read_errors") >= 2)
        finally:
            undelivered = publisher.close()

    assert result.problems == () and again.problems == ()
    assert result.delivered and again.delivered
    assert undelivered == 0
    lines = gauges.split()
    prefix = f"kaas.{cluster}.brokers.1"
    assert f"{prefix}.under_replicated_partitions:0.0|g" in lines
    assert f"{prefix}.read_errors:0.0|g" in lines
    assert any(line.startswith(f"{prefix}.host.log_dir_free_bytes:") for line in lines)
    assert len(lines) == result.gauges_sent + again.gauges_sent

    messages = consume_all(kafka_cluster.client_config(), metrics_topic, expected=2)
    assert len(messages) == 2
    for message in messages:
        assert message.key() == b"1"
        record = json.loads(message.value())
        jsonschema.validate(record, SCHEMA)
        assert record["schema_version"] == 1 and record["broker_id"] == 1
    assert json.loads(messages[0].value()) == sample.record
    assert len(messages[0].value()) == result.record_bytes
    # keyed by broker id: one broker's records stay in order on one partition
    assert messages[0].partition() == messages[1].partition()
    assert messages[0].offset() < messages[1].offset()


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_jolokia_unreachable_gives_nulls_and_errors_not_an_exception(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}/jolokia/"
    collector = MetricsCollector("itest", 4, "zone-b", url, [str(tmp_path)], interval_s=30.0)
    samples: list[MetricsSample] = [collector.collect(), collector.collect()]
    for sample in samples:
        jsonschema.validate(sample.record, SCHEMA)
        assert set(sample.record["broker"].values()) == {None}
        assert sample.record["topics"] == [] and sample.record["partitions"] == []
        assert sample.record["host"]["memory_total_bytes"] is not None
        assert sample.record["errors"] == [
            {
                "source": "jmx",
                "metric": None,
                "message": f"Jolokia at {url} unreachable: connection refused",
            }
        ]
        assert not sample.jmx_answered
        assert sample.sentence() is not None
        assert sample.collect_s < 1.0


def throwaway_identity(directory: Path) -> IdentityFiles:
    """An admin identity of a CA no cluster uses: the client must start to fail on the wire."""
    now = dt.datetime.now(dt.UTC)
    authority = create_authority("nowhere", now)
    files = IdentityFiles(directory / "tls", Role.ADMIN)
    write_identity(files, issue(authority, Role.ADMIN, (), now), authority.certificate_pem)
    return files


def test_an_unreachable_cluster_costs_publish_a_bounded_time(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}/jolokia/"
    sample = MetricsCollector("itest", 4, None, url, [str(tmp_path)], 30.0).collect()
    publisher = MetricsPublisher(
        None,
        8125,
        "kaas",
        InternalClient(f"127.0.0.1:{closed_port()}", throwaway_identity(tmp_path)),
        topic="_kaas_metrics",
        flush_timeout_s=0.5,
        topic_timeout_s=1.0,
    )
    started = time.monotonic()
    result = publisher.publish(sample)
    elapsed = time.monotonic() - started
    started = time.monotonic()
    second = publisher.publish(sample)  # the topic check waits for its retry interval
    second_elapsed = time.monotonic() - started
    publisher.close(timeout_s=0.5)
    assert elapsed < 3.0
    assert second_elapsed < 1.5
    assert not result.delivered and not second.delivered
    assert any("cannot create topic _kaas_metrics" in p for p in result.problems)
    assert any("not acknowledged within 0.5 s" in p for p in result.problems)
    assert not any("cannot create topic" in p for p in second.problems)
    assert any("not acknowledged within 0.5 s" in p for p in second.problems)


def test_consumer_lag_per_group_on_the_real_cluster(kafka_cluster: ClusterHandle) -> None:
    """A group that committed 2 of 5 messages of one partition lags by 3; the reader goes
    through the internal listener with the admin certificate, as the planner's agent does."""
    topic = kafka_cluster.unique_topic("lag")
    group = kafka_cluster.unique_topic("lag-group")
    create_topic(kafka_cluster.client_config(), topic, 1)
    producer = durable_producer(kafka_cluster.client_config())
    for n in range(5):
        producer.produce(topic, value=str(n).encode(), partition=0)
    assert producer.flush(30) == 0
    settings: dict[str, str | int | float | bool] = {
        "group.id": group,
        "enable.auto.commit": False,
    }
    consumer = Consumer(kafka_cluster.client_config(**settings))
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
    finally:
        consumer.close()
    lags, problem = ConsumerLagReader(kafka_cluster.admin).read()
    assert problem is None
    assert lags[group] == GroupLag(total=3, max_partition=3, partitions=1)
