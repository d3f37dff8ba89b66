"""Analytics against the real local cluster: Spark's Kafka source reads a metrics topic with
malformed records in it, the score goes to ZooKeeper, and the audit checks completeness."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient
from pyspark.sql import SparkSession

from analytics.balance_run import BalanceOptions, run_balance
from analytics.jobs.audit import AuditOptions, run_audit
from analytics.ledger import ProducedLedger
from analytics.metrics import parse_metric_records
from analytics.session import default_jars_dir
from analytics.sources import SourceError, ensure_kafka_connector, read_kafka_topics
from analytics.testing import metric_record, spark_session_fixture  # noqa: F401
from analytics.writeback import ZooKeeperScoreWriter, score_document, score_znode_path
from management_plane.workload import LEDGER_DIR_ENV, durable_producer, produce_keyed

pytestmark = pytest.mark.integration

T0_MS = 1_767_225_600_000
BROKERS = 3
SAMPLES = 20
MALFORMED: list[tuple[bytes | None, bytes]] = [
    (b"1", b"not json at all"),
    (b"1", b"[1, 2, 3]"),
    (b"2", json.dumps({**metric_record(2, T0_MS), "schema_version": 9}).encode()),
    (b"0", json.dumps(metric_record(1, T0_MS)).encode()),  # key says broker 0, record says 1
]


def create_topic(bootstrap_servers: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    future = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=3)]
    )[topic]
    future.result(timeout=60)


def produce(bootstrap_servers: str, topic: str, records: list[tuple[bytes | None, bytes]]) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap_servers, "acks": "all", "enable.idempotence": True}
    )
    errors: list[str] = []

    def delivered(error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            errors.append(error.str())

    for key, value in records:
        producer.produce(topic, key=key, value=value, on_delivery=delivered)
    assert producer.flush(60) == 0
    assert errors == []


@pytest.fixture(scope="module")
def connector_ready() -> None:
    # Fails (never skips) with the folder named when `make setup` has not installed the jars.
    ensure_kafka_connector(default_jars_dir(), launched_by_spark_submit=False)


def test_balance_reads_the_metrics_topic_and_quarantines_malformed_records(
    kafka_cluster: Any, spark: SparkSession, connector_ready: None, tmp_path: Path
) -> None:
    topic = kafka_cluster.unique_topic("kaas-metrics")
    create_topic(kafka_cluster.bootstrap_servers, topic, partitions=3)
    valid = [
        (
            str(broker).encode(),
            json.dumps(
                metric_record(
                    broker,
                    T0_MS + step * 10_000,
                    cluster="itest",
                    rack=f"zone-{'abc'[broker]}",
                    bytes_in_per_s=1000.0 * (broker + 1),
                    partitions=[
                        {
                            "topic": "orders",
                            "partition": broker,
                            "leader": True,
                            "size_bytes": 10 * step,
                        }
                    ],
                    topics=[
                        {
                            "topic": "orders",
                            "bytes_in_per_s": 1000.0 * (broker + 1),
                            "bytes_out_per_s": 10.0,
                        }
                    ],
                )
            ).encode(),
        )
        for step in range(SAMPLES)
        for broker in range(BROKERS)
    ]
    produce(kafka_cluster.bootstrap_servers, topic, valid + MALFORMED)

    raw = read_kafka_topics(spark, kafka_cluster.bootstrap_servers, [topic]).cache()
    summary = run_balance(
        spark, parse_metric_records(raw), BalanceOptions(charts=False), tmp_path
    ).summary

    assert summary["records"]["valid"] == BROKERS * SAMPLES
    assert summary["records"]["quarantined"] == len(MALFORMED)
    assert summary["records"]["quarantine_reasons"] == {
        "value is not valid JSON": 1,
        "value is not a JSON object": 1,
        "unsupported schema_version 9": 1,
        "record key 0 differs from broker_id 1": 1,
    }
    quarantine = spark.read.parquet(summary["outputs"]["quarantine"])
    assert {row["source_topic"] for row in quarantine.collect()} == {topic}
    assert quarantine.where("source_offset IS NULL").count() == 0
    assert summary["latest_window"]["brokers"] == BROKERS
    # Broker 2 produces 3000/s against a mean of 2000/s: hot above 1.2 x mean.
    assert summary["brokers"]["leader_bytes_in_per_s"]["hot"] == ["2"]


def test_a_missing_metrics_topic_is_named(kafka_cluster: Any, spark: SparkSession) -> None:
    missing = kafka_cluster.unique_topic("never-produced")
    with pytest.raises(SourceError, match=f"topic {missing} does not exist on"):
        read_kafka_topics(spark, kafka_cluster.bootstrap_servers, [missing])


def test_score_is_written_next_to_the_plan_in_zookeeper(zk_hosts: str) -> None:
    cluster = f"analytics-{uuid.uuid4().hex[:8]}"
    document = score_document(cluster, 91.5, "a", "b", 3, {"leaders": {"cv": 0.0}}, "now")
    writer = ZooKeeperScoreWriter(zk_hosts)
    assert writer.write(cluster, document) == f"/kaas/{cluster}/plan/score"
    writer.write(cluster, {**document, "score": 92.0})  # the second write replaces the value

    client = KazooClient(hosts=zk_hosts)
    client.start(timeout=15)
    try:
        data, _ = client.get(score_znode_path(cluster))
        client.delete(f"/kaas/{cluster}", recursive=True)
    finally:
        client.stop()
        client.close()
    stored = json.loads(data)
    assert stored["schema_version"] == 1
    assert stored["score"] == 92.0


def test_audit_finds_every_acknowledged_message_and_the_group_lag(
    kafka_cluster: Any, spark: SparkSession, connector_ready: None, tmp_path: Path
) -> None:
    topic = kafka_cluster.unique_topic("audited")
    create_topic(kafka_cluster.bootstrap_servers, topic, partitions=2)
    ledger = ProducedLedger("itest", window_s=10)
    producer = Producer({"bootstrap.servers": kafka_cluster.bootstrap_servers, "acks": "all"})

    def delivered(error: KafkaError | None, message: Message) -> None:
        topic, partition = message.topic(), message.partition()
        if error is None and topic is not None and partition is not None:
            ledger.record(topic, partition, message.timestamp()[1])

    for index in range(200):
        producer.produce(topic, key=f"k{index % 7}".encode(), value=b"x", on_delivery=delivered)
    assert producer.flush(60) == 0
    ledger_path = ledger.write(tmp_path / "ledger.jsonl")

    group = f"audit-{uuid.uuid4().hex[:8]}"
    consumer = Consumer(
        {
            "bootstrap.servers": kafka_cluster.bootstrap_servers,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    consumed = 0
    # Joining the group takes a while on a busy machine: a deadline for all, not per poll.
    deadline = time.monotonic() + 120
    while consumed < 50:
        assert time.monotonic() < deadline, f"only {consumed} of 50 messages within 120 s"
        message = consumer.poll(1)
        if message is not None and message.error() is None:
            consumed += 1
    consumer.commit(asynchronous=False)
    consumer.close()

    result = run_audit(
        spark,
        AuditOptions(
            bootstrap_servers=kafka_cluster.bootstrap_servers,
            ledger=ledger_path,
            out=tmp_path / "audit",
            groups=(group,),
        ),
    )
    completeness = result.summary["completeness"]
    assert (completeness["produced"], completeness["in_kafka"], completeness["missing"]) == (
        200,
        200,
        0,
    )
    assert completeness["completeness_percent"] == 100.0
    assert result.exit_code == 0
    (lag,) = result.summary["consumer_groups"]
    assert lag["group"] == group
    # The consumer committed the position after what it had read; all but those are behind.
    assert 0 < lag["total_lag"] <= 200 - 50


def test_the_workload_records_a_ledger_the_audit_finds_complete(
    kafka_cluster: Any,
    spark: SparkSession,
    connector_ready: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The drills' and the demo's producer (management_plane.workload.produce_keyed) writes
    its ledger when KAAS_PRODUCED_LEDGER_DIR is set; the audit finds it 100% complete."""
    topic = kafka_cluster.unique_topic("ledgered")
    create_topic(kafka_cluster.bootstrap_servers, topic, partitions=3)
    ledger_dir = tmp_path / "ledger"
    monkeypatch.setenv(LEDGER_DIR_ENV, str(ledger_dir))
    producer = durable_producer(kafka_cluster.bootstrap_servers)
    first = produce_keyed(producer, topic, messages=300, keys=12, key_prefix="a")
    second = produce_keyed(producer, topic, messages=200, keys=12, key_prefix="b")
    assert first.errors == [] and second.errors == []

    files = sorted(ledger_dir.glob("*.jsonl"))
    assert len(files) == 2, files
    entries = [json.loads(line) for path in files for line in path.read_text().splitlines()]
    recorded: dict[int, int] = {}
    for entry in entries:
        assert entry["topic"] == topic
        recorded[entry["partition"]] = recorded.get(entry["partition"], 0) + entry["count"]
    acknowledged: dict[int, int] = {}
    for _key, _sequence, partition, _offset in first.acknowledged + second.acknowledged:
        acknowledged[partition] = acknowledged.get(partition, 0) + 1
    assert recorded == acknowledged

    result = run_audit(
        spark,
        AuditOptions(
            bootstrap_servers=kafka_cluster.bootstrap_servers,
            ledger=ledger_dir,
            out=tmp_path / "audit",
            groups=("no-such-group",),
        ),
    )
    completeness = result.summary["completeness"]
    assert (completeness["produced"], completeness["in_kafka"], completeness["missing"]) == (
        500,
        500,
        0,
    )
    assert completeness["completeness_percent"] == 100.0
    assert result.exit_code == 0
    # A group that never committed anything has no offsets to compare: no lag rows.
    assert result.summary["consumer_groups"] == []
