"""Parsing of _kaas_metrics records: valid ones flattened, malformed ones quarantined with reasons."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import jsonschema
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from analytics import metrics
from analytics.testing import metric_record, spark_session_fixture  # noqa: F401

pytestmark = pytest.mark.unit

T0_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def raw_frame(spark: SparkSession, rows: Sequence[tuple[str | None, str | None]]) -> DataFrame:
    return spark.createDataFrame(rows, "key string, value string")


def test_published_schema_lists_the_fields_the_parser_reads() -> None:
    schema = metrics.published_schema()
    properties = schema["properties"]
    assert [name for name, _ in metrics.BROKER_FIELDS] == list(properties["broker"]["properties"])
    assert [name for name, _ in metrics.HOST_FIELDS] == list(properties["host"]["properties"])
    assert [name for name, _ in metrics.TOPIC_FIELDS] == list(
        properties["topics"]["items"]["properties"]
    )
    assert [name for name, _ in metrics.PARTITION_FIELDS] == list(
        properties["partitions"]["items"]["properties"]
    )
    assert properties["schema_version"]["const"] == metrics.SCHEMA_VERSION


def test_the_test_record_is_valid_against_the_published_schema() -> None:
    record = metric_record(1, T0_MS, partitions=[{"topic": "t", "partition": 0, "leader": True}])
    jsonschema.validate(record, metrics.published_schema())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**record, "schema_version": 2}, metrics.published_schema())


def test_valid_record_is_flattened_into_broker_topic_and_partition_rows(
    spark: SparkSession,
) -> None:
    record = metric_record(
        2,
        T0_MS,
        cluster="c1",
        rack="zone-b",
        bytes_in_per_s=100.5,
        leader_count=4,
        topics=[{"topic": "orders", "bytes_in_per_s": 60.0, "bytes_out_per_s": 30.0}],
        partitions=[
            {
                "topic": "orders",
                "partition": 0,
                "leader": True,
                "size_bytes": 500,
                "log_end_offset": 9,
            },
            {"topic": "orders", "partition": 1, "leader": False, "size_bytes": 400},
        ],
    )
    parsed = metrics.parse_metric_records(raw_frame(spark, [("2", json.dumps(record))]))

    assert parsed.quarantine.count() == 0
    broker = parsed.broker_metrics.select(
        "cluster",
        "broker_id",
        "rack",
        F.unix_millis("timestamp").alias("timestamp_ms"),
        "bytes_in_per_s",
        "leader_count",
        "host_cpu_percent",
    )
    assertDataFrameEqual(broker, [("c1", 2, "zone-b", T0_MS, 100.5, 4, 10.0)])
    assertDataFrameEqual(
        parsed.topic_metrics.select(
            "broker_id", "topic", "bytes_in_per_s", "bytes_out_per_s", "messages_in_per_s"
        ),
        [(2, "orders", 60.0, 30.0, None)],
    )
    assertDataFrameEqual(
        parsed.partition_metrics.select(
            "topic", "partition", "leader", "size_bytes", "log_end_offset"
        ),
        [("orders", 0, True, 500, 9), ("orders", 1, False, 400, None)],
    )


def _with(record: dict[str, Any], **changes: Any) -> str:
    return json.dumps({**record, **changes})


MALFORMED_CASES: list[tuple[str | None, str | None, str]] = [
    # Too large for 64 bits: Spark's reader refuses it, the field check finds no fault.
    (
        "1",
        _with(metric_record(1, T0_MS), broker={"leader_count": 10**20}),
        "value does not fit schema v1",
    ),
    (None, None, "empty value"),
    (None, "   ", "empty value"),
    (None, "{not json", "value is not valid JSON"),
    (None, "[1, 2]", "value is not a JSON object"),
    ("1", "schema_version=2", "value is not valid JSON"),
    ("1", _with(metric_record(1, T0_MS), schema_version=2), "unsupported schema_version 2"),
    (
        "1",
        _with(metric_record(1, T0_MS), broker_id="one"),
        "broker_id is required and must be an integer",
    ),
    ("1", _with(metric_record(1, T0_MS), cluster=None), "cluster is required and must be a string"),
    ("1", _with(metric_record(1, T0_MS), timestamp_ms=-5), "timestamp_ms must not be negative"),
    ("1", _with(metric_record(1, T0_MS), host=[1]), "host is required and must be an object"),
    ("7", json.dumps(metric_record(1, T0_MS)), "record key 7 differs from broker_id 1"),
    (
        "1",
        _with(metric_record(1, T0_MS), broker={"leader_count": 1.5}),
        "broker.leader_count must be an integer",
    ),
    (
        "1",
        _with(metric_record(1, T0_MS), broker={"bytes_in_per_s": "fast"}),
        "broker.bytes_in_per_s must be a number",
    ),
    (
        "1",
        _with(metric_record(1, T0_MS), host={"cpu_percent": -1}),
        "host.cpu_percent must not be negative",
    ),
    ("1", _with(metric_record(1, T0_MS), partitions={"topic": "t"}), "partitions must be a list"),
    (
        "1",
        _with(metric_record(1, T0_MS), partitions=[{"topic": "t"}]),
        "partitions[].partition must be present and an integer, not negative",
    ),
    (
        "1",
        _with(metric_record(1, T0_MS), topics=[{"topic": "t", "bytes_in_per_s": -3}]),
        "topics[].bytes_in_per_s must be a number, not negative",
    ),
]


def test_each_malformed_record_is_quarantined_with_its_reason(spark: SparkSession) -> None:
    good = json.dumps(metric_record(1, T0_MS))
    rows = [("1", good)] + [(key, value) for key, value, _ in MALFORMED_CASES]
    parsed = metrics.parse_metric_records(raw_frame(spark, rows))

    assert parsed.broker_metrics.count() == 1
    # Every record is either valid or quarantined: none is lost.
    quarantined = parsed.quarantine.collect()
    assert len(quarantined) == len(MALFORMED_CASES)
    reasons_by_record = sorted(
        (row["key"] or "", row["value"] or "", tuple(row["reasons"])) for row in quarantined
    )
    expected = sorted((key or "", value or "", (reason,)) for key, value, reason in MALFORMED_CASES)
    assert reasons_by_record == expected


def test_null_metrics_are_accepted_as_failed_reads(spark: SparkSession) -> None:
    record = metric_record(1, T0_MS)
    record["broker"]["bytes_in_per_s"] = None
    record["errors"] = [{"source": "jmx", "metric": "BytesInPerSec", "message": "timeout"}]
    parsed = metrics.parse_metric_records(raw_frame(spark, [("1", json.dumps(record))]))
    assertDataFrameEqual(parsed.broker_metrics.select("bytes_in_per_s", "read_errors"), [(None, 1)])


def test_kafka_shaped_binary_input_keeps_its_source_position(spark: SparkSession) -> None:
    raw = spark.createDataFrame(
        [(b"1", b"oops", "_kaas_metrics", 0, 41, T0)],
        "key binary, value binary, topic string, partition int, offset bigint, timestamp timestamp",
    )
    quarantine = metrics.parse_metric_records(raw).quarantine
    assertDataFrameEqual(
        quarantine.select("source_topic", "source_partition", "source_offset", "key", "value"),
        [("_kaas_metrics", 0, 41, "1", "oops")],
    )


def test_quarantine_counts_per_reason(spark: SparkSession) -> None:
    rows = [(None, "x"), (None, "y"), (None, "[]"), ("1", json.dumps(metric_record(1, T0_MS)))]
    parsed = metrics.parse_metric_records(raw_frame(spark, rows))
    assertDataFrameEqual(
        metrics.quarantine_counts(parsed.quarantine),
        [("value is not valid JSON", 2), ("value is not a JSON object", 1)],
    )


def test_input_without_a_value_column_is_refused(spark: SparkSession) -> None:
    with pytest.raises(ValueError, match="'value' column"):
        metrics.parse_metric_records(spark.createDataFrame([("a",)], "line string"))
