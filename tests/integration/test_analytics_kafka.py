"""Analytics against the real local cluster: Spark's Kafka source reads a metrics topic with
malformed records in it, the score goes to ZooKeeper, and the audit checks completeness."""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from analytics import balance
from analytics.balance_run import BalanceOptions, run_balance
from analytics.incremental import IncrementalOptions, RunCounts, read_window_table, run_incremental
from analytics.jobs.audit import AuditOptions, IncrementalAudit, run_audit
from analytics.ledger import ProducedLedger
from analytics.metrics import parse_metric_records
from analytics.session import default_jars_dir
from analytics.sources import (
    SourceError,
    ensure_kafka_connector,
    read_kafka_stream,
    read_kafka_topics,
)
from analytics.testing import metric_record, spark_session_fixture  # noqa: F401
from analytics.writeback import (
    ZooKeeperLoadWriter,
    ZooKeeperScoreWriter,
    score_document,
    score_znode_path,
)
from management_plane.workload import LEDGER_DIR_ENV, durable_producer, produce_keyed
from planner.contracts.measured_load import MeasuredLoad, PartitionLoad, parse_measured_load
from planner.contracts.paths import ClusterPaths
from planner.pki.client_settings import ClientConfig
from planner.pki.files import IdentityFiles
from planner.zookeeper_client import zookeeper_client

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


def create_topic(connection: ClientConfig, topic: str, partitions: int) -> None:
    admin = AdminClient(connection)
    future = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=3)]
    )[topic]
    future.result(timeout=60)


def produce(
    connection: ClientConfig, topic: str, records: list[tuple[bytes | None, bytes]]
) -> None:
    producer = Producer({**connection, "acks": "all", "enable.idempotence": True})
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
    create_topic(kafka_cluster.client_config(), topic, partitions=3)
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
    produce(kafka_cluster.client_config(), topic, valid + MALFORMED)

    raw = read_kafka_topics(spark, kafka_cluster.admin, [topic]).cache()
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
        read_kafka_topics(spark, kafka_cluster.admin, [missing])


def test_score_is_written_next_to_the_plan_in_zookeeper(
    zk_hosts: str, zk_identity: IdentityFiles
) -> None:
    cluster = f"analytics-{uuid.uuid4().hex[:8]}"
    document = score_document(cluster, 91.5, "a", "b", 3, {"leaders": {"cv": 0.0}}, "now")
    writer = ZooKeeperScoreWriter(zk_hosts, zk_identity)
    assert writer.write(cluster, document) == f"/kaas/{cluster}/plan/score"
    writer.write(cluster, {**document, "score": 92.0})  # the second write replaces the value

    client = zookeeper_client(zk_hosts, zk_identity)
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


def test_measured_load_is_written_in_one_versioned_transaction(
    zk_hosts: str, zk_identity: IdentityFiles
) -> None:
    cluster = f"analytics-{uuid.uuid4().hex[:8]}"
    load = MeasuredLoad(
        cluster=cluster,
        window_start="2026-01-01T00:00:00+00:00",
        window_end="2026-01-01T01:00:00+00:00",
        window_s=3600,
        computed_at="2026-01-01T01:00:05+00:00",
        partitions=(PartitionLoad("orders", 0, 1000.0, 2000.0),),
    )
    writer = ZooKeeperLoadWriter(zk_hosts, zk_identity)
    assert writer.write(load) == f"/kaas/{cluster}/load"
    hotter = dataclasses.replace(load, partitions=(PartitionLoad("orders", 0, 5000.0, 2000.0),))
    writer.write(hotter)  # the second write checks the version the first left

    client = zookeeper_client(zk_hosts, zk_identity)
    client.start(timeout=15)
    try:
        data, stat = client.get(ClusterPaths(cluster).measured_load)
        client.delete(f"/kaas/{cluster}", recursive=True)
    finally:
        client.stop()
        client.close()
    assert stat.version == 1
    assert parse_measured_load(data) == hotter


def test_audit_finds_every_acknowledged_message_and_the_group_lag(
    kafka_cluster: Any, spark: SparkSession, connector_ready: None, tmp_path: Path
) -> None:
    """Completeness of what a producer acknowledged, and lag of two groups: one that
    committed on one partition only (the other partition's whole range is behind), one
    whose live member holds both partitions and has committed nothing yet."""
    topic = kafka_cluster.unique_topic("audited")
    create_topic(kafka_cluster.client_config(), topic, partitions=2)
    ledger = ProducedLedger("itest", window_s=10)
    producer = Producer({**kafka_cluster.client_config(), "acks": "all"})
    end_offsets: dict[int, int] = {}

    def delivered(error: KafkaError | None, message: Message) -> None:
        topic, partition, offset = message.topic(), message.partition(), message.offset()
        if error is None and topic is not None and partition is not None and offset is not None:
            ledger.record(topic, partition, message.timestamp()[1])
            end_offsets[partition] = max(end_offsets.get(partition, 0), offset + 1)

    for index in range(200):
        producer.produce(topic, key=f"k{index % 7}".encode(), value=b"x", on_delivery=delivered)
    assert producer.flush(60) == 0
    assert sorted(end_offsets) == [0, 1] and sum(end_offsets.values()) == 200
    ledger_path = ledger.write(tmp_path / "ledger.jsonl")

    def group_consumer(group: str) -> Consumer:
        return Consumer(
            {
                **kafka_cluster.client_config(),
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                # The live member must stay in its group while the audit runs, unpolled.
                "max.poll.interval.ms": 900_000,
            }
        )

    group, live_group = (f"audit-{uuid.uuid4().hex[:8]}", f"audit-live-{uuid.uuid4().hex[:8]}")
    consumer, live = group_consumer(group), group_consumer(live_group)
    live_assignment: list[int] = []
    live.subscribe(
        [topic], on_assign=lambda _c, parts: live_assignment.extend(p.partition for p in parts)
    )
    consumer.subscribe([topic])
    try:
        read_up_to: dict[int, int] = {}
        # Joining the groups takes a while on a busy machine: a deadline for all, not per poll.
        deadline = time.monotonic() + 120
        while sum(read_up_to.values()) < 50:  # offsets start at 0: positions add up to reads
            assert time.monotonic() < deadline, f"only {read_up_to} read within 120 s"
            message = consumer.poll(1)
            if message is not None and message.error() is None:
                partition, offset = message.partition(), message.offset()
                assert partition is not None and offset is not None
                read_up_to[partition] = offset + 1
        while sorted(live_assignment) != [0, 1]:
            assert time.monotonic() < deadline, f"live member holds {live_assignment} after 120 s"
            live.poll(1)
        # A commit on one partition only: the other holds messages but no commit of this group.
        committed_partition = min(read_up_to)
        committed_offset = read_up_to[committed_partition]
        consumer.commit(
            offsets=[TopicPartition(topic, committed_partition, committed_offset)],
            asynchronous=False,
        )
        consumer.close()

        result = run_audit(
            spark,
            AuditOptions(
                kafka=kafka_cluster.admin,
                ledger=ledger_path,
                out=tmp_path / "audit",
                groups=(group, live_group),
            ),
        )
    finally:
        live.close()
    completeness = result.summary["completeness"]
    assert (completeness["produced"], completeness["in_kafka"], completeness["missing"]) == (
        200,
        200,
        0,
    )
    assert completeness["completeness_percent"] == 100.0
    assert result.exit_code == 0

    other_partition = 1 - committed_partition
    behind_commit = end_offsets[committed_partition] - committed_offset
    groups = {entry["group"]: entry for entry in result.summary["consumer_groups"]}
    assert groups[group] == {
        "group": group,
        "total_lag": behind_commit + end_offsets[other_partition],
        "max_partition_lag": max(behind_commit, end_offsets[other_partition]),
        "partitions_without_commit": 1,
        "partitions": 2,
    }
    assert groups[live_group] == {
        "group": live_group,
        "total_lag": 200,
        "max_partition_lag": max(end_offsets.values()),
        "partitions_without_commit": 2,
        "partitions": 2,
    }
    rows = pq.read_table(tmp_path / "audit" / "lag").to_pylist()
    uncommitted = next(
        row for row in rows if row["group"] == group and row["partition"] == other_partition
    )
    assert uncommitted == {
        "group": group,
        "topic": topic,
        "partition": other_partition,
        "committed_offset": None,
        "start_offset": 0,
        "end_offset": end_offsets[other_partition],
        "lag": end_offsets[other_partition],
    }


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
    create_topic(kafka_cluster.client_config(), topic, partitions=3)
    ledger_dir = tmp_path / "ledger"
    monkeypatch.setenv(LEDGER_DIR_ENV, str(ledger_dir))
    producer = durable_producer(kafka_cluster.client_config())
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
            kafka=kafka_cluster.admin,
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
    # A group with no commit and no member consumes nothing: it has no lag rows.
    assert result.summary["consumer_groups"] == []


def _metric_lines(first_step: int, steps: int, cluster: str) -> list[tuple[bytes | None, bytes]]:
    return [
        (
            str(broker).encode(),
            json.dumps(
                metric_record(
                    broker,
                    T0_MS + step * 10_000,
                    cluster=cluster,
                    bytes_in_per_s=1000.0 * (broker + 1) + step,
                    topics=[{"topic": "orders", "bytes_in_per_s": 100.0, "bytes_out_per_s": 5.0}],
                    partitions=[
                        {"topic": "orders", "partition": broker, "leader": True, "size_bytes": step}
                    ],
                )
            ).encode(),
        )
        for step in range(first_step, first_step + steps)
        for broker in range(BROKERS)
    ]


def test_incremental_balance_on_the_metrics_topic_reads_only_new_records(
    kafka_cluster: Any, spark: SparkSession, connector_ready: None, tmp_path: Path
) -> None:
    """Two AvailableNow runs over a real metrics topic: the second reads only what was
    produced after the first; malformed records are quarantined and counted; the windows
    equal one batch run over the whole topic."""
    topic = kafka_cluster.unique_topic("kaas-metrics-incremental")
    create_topic(kafka_cluster.client_config(), topic, partitions=3)
    options = IncrementalOptions(
        state_dir=tmp_path / "state", cluster="itest", window="1 minute", lateness="1 minute"
    )

    def run() -> RunCounts:
        return run_incremental(
            spark, read_kafka_stream(spark, kafka_cluster.admin, [topic]), options
        )

    first = _metric_lines(0, 6, "itest") + MALFORMED
    produce(kafka_cluster.client_config(), topic, first)
    counts = run()
    assert (counts.records_read, counts.valid, counts.quarantined) == (
        len(first),
        6 * BROKERS,
        len(MALFORMED),
    )
    second = _metric_lines(6, 6, "itest") + MALFORMED[:1]
    produce(kafka_cluster.client_config(), topic, second)
    counts = run()
    assert (counts.records_read, counts.valid, counts.quarantined) == (len(second), 6 * BROKERS, 1)
    assert counts.windows_updated == [T0_MS // 60_000 + 1]

    everything = parse_metric_records(read_kafka_topics(spark, kafka_cluster.admin, [topic]))
    assertDataFrameEqual(
        read_window_table(spark, options, "broker_load"),
        balance.broker_window_load(everything.broker_metrics, "1 minute"),
    )
    quarantined = spark.read.parquet(str(options.cluster_dir / "quarantine"))
    assert quarantined.count() == len(MALFORMED) + 1
    assert quarantined.where("source_offset IS NULL").count() == 0


def test_incremental_audit_counts_only_new_records_and_matches_the_batch_audit(
    kafka_cluster: Any, spark: SparkSession, connector_ready: None, tmp_path: Path
) -> None:
    topic = kafka_cluster.unique_topic("audited-incremental")
    create_topic(kafka_cluster.client_config(), topic, partitions=2)
    ledger_dir = tmp_path / "ledger"
    producer = durable_producer(kafka_cluster.client_config())

    def audit_run(out: str, incremental: bool) -> dict[str, Any]:
        return run_audit(
            spark,
            AuditOptions(
                kafka=kafka_cluster.admin,
                ledger=ledger_dir,
                out=tmp_path / out,
                groups=("no-such-group",),
                incremental=IncrementalAudit(tmp_path / "state", "itest") if incremental else None,
            ),
        ).summary

    ledger = ProducedLedger("itest-1", window_s=10)
    assert produce_keyed(producer, topic, messages=300, keys=6, ledger=ledger).errors == []
    ledger.write(ledger_dir / "first.jsonl")
    first = audit_run("first", incremental=True)
    assert first["incremental"]["records_read"] == 300
    assert first["incremental"]["quarantined"] == 0

    ledger = ProducedLedger("itest-2", window_s=10)
    assert produce_keyed(producer, topic, messages=200, keys=6, ledger=ledger).errors == []
    ledger.write(ledger_dir / "second.jsonl")
    second = audit_run("second", incremental=True)
    assert second["incremental"]["records_read"] == 200
    batch = audit_run("batch", incremental=False)
    assert second["completeness"] == batch["completeness"]
    assert second["completeness"]["in_kafka"] == 500
    assert second["completeness"]["missing"] == 0
    assertDataFrameEqual(
        spark.read.parquet(str(tmp_path / "second" / "completeness")),
        spark.read.parquet(str(tmp_path / "batch" / "completeness")),
    )
