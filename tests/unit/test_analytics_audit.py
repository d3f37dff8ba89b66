"""Audit transforms: ledger against Kafka's records, consumer lag; and the producers' ledger."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from analytics import audit
from analytics.ledger import ProducedLedger
from analytics.testing import spark_session_fixture  # noqa: F401

pytestmark = pytest.mark.unit

MINUTE_MS = 60_000
T0_MS = 1_767_225_600_000
LEDGER_SCHEMA = "schema_version int, producer string, topic string, partition int, window_start_ms bigint, window_s int, count bigint"


def at_ms(milliseconds: int) -> datetime:
    return datetime.fromtimestamp(milliseconds / 1000, tz=UTC)


def test_ledger_counts_acknowledged_messages_per_window(tmp_path: Path) -> None:
    ledger = ProducedLedger("demo", window_s=60)
    for timestamp_ms in (T0_MS, T0_MS + 59_999, T0_MS + MINUTE_MS):
        ledger.record("orders", 0, timestamp_ms)
    ledger.record("orders", 1, T0_MS + 5)
    path = ledger.write(tmp_path / "ledger" / "demo.jsonl")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(e["partition"], e["window_start_ms"], e["count"]) for e in lines] == [
        (0, T0_MS, 2),
        (0, T0_MS + MINUTE_MS, 1),
        (1, T0_MS, 1),
    ]
    assert {e["schema_version"] for e in lines} == {1}
    assert ledger.total() == 4
    with pytest.raises(ValueError, match="window_s must be a positive"):
        ProducedLedger("demo", window_s=0)


def test_completeness_counts_missing_and_extra_per_window(spark: SparkSession) -> None:
    ledger = spark.createDataFrame(
        [
            (1, "a", "t", 0, T0_MS, 60, 2),
            (1, "b", "t", 0, T0_MS, 60, 1),  # two producers, one window: summed
            (1, "a", "t", 0, T0_MS + MINUTE_MS, 60, 2),
        ],
        LEDGER_SCHEMA,
    )
    records = spark.createDataFrame(
        [
            ("t", 0, 10, at_ms(T0_MS + 1)),
            ("t", 0, 11, at_ms(T0_MS + 2)),
            ("t", 0, 12, at_ms(T0_MS + 3)),
            ("t", 0, 13, at_ms(T0_MS + MINUTE_MS + 1)),  # one of two is missing
            ("t", 0, 20, at_ms(T0_MS + 5 * MINUTE_MS)),  # a window nobody ledgered
            ("other", 0, 0, at_ms(T0_MS)),  # a topic not audited
        ],
        "topic string, partition int, offset bigint, timestamp timestamp",
    )
    assert audit.ledger_window_s(ledger) == 60
    per_window = audit.completeness(audit.produced_counts(ledger), audit.kafka_counts(records, 60))
    assertDataFrameEqual(
        per_window,
        [
            ("t", 0, T0_MS, 3, 3, 0, 0, 10, 12),
            ("t", 0, T0_MS + MINUTE_MS, 2, 1, 1, 0, 13, 13),
            ("t", 0, T0_MS + 5 * MINUTE_MS, 0, 1, 0, 1, 20, 20),
        ],
    )
    totals = audit.completeness_totals(per_window)
    assertDataFrameEqual(totals, [(5, 5, 1, 1, 1, 80.0)])


def test_nothing_produced_is_complete(spark: SparkSession) -> None:
    empty = spark.createDataFrame(
        [],
        "topic string, partition int, window_start_ms bigint, produced bigint, in_kafka bigint, missing bigint, extra bigint",
    )
    assertDataFrameEqual(
        audit.completeness_totals(empty).select("produced", "completeness_percent"), [(0, 100.0)]
    )


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([(2, "a", "t", 0, T0_MS, 60, 1)], "schema_version 2 is not supported"),
        (
            [(1, "a", "t", 0, T0_MS, 60, 1), (1, "a", "t", 0, T0_MS, 10, 1)],
            "several window lengths",
        ),
        ([(1, "a", "t", 0, T0_MS, 0, 1)], "window_s must be a positive integer"),
    ],
)
def test_unusable_ledger_is_refused(
    spark: SparkSession, rows: list[tuple[object, ...]], message: str
) -> None:
    with pytest.raises(audit.AuditInputError, match=message):
        audit.ledger_window_s(spark.createDataFrame(rows, LEDGER_SCHEMA))


def test_consumer_lag_per_partition_and_group(spark: SparkSession) -> None:
    committed = spark.createDataFrame(
        [
            ("g1", "t", 0, 90),
            ("g1", "t", 1, 100),
            ("g2", "t", 0, None),
            ("g2", "t", 1, -1001),
            ("g1", "t", 7, 5),  # a partition the cluster no longer reports
        ],
        "group string, topic string, partition int, committed_offset bigint",
    )
    ranges = spark.createDataFrame(
        [("t", 0, 0, 100), ("t", 1, 40, 100), ("other", 0, 0, 50)],
        "topic string, partition int, start_offset bigint, end_offset bigint",
    )
    lag = audit.consumer_lag(committed, ranges)
    assertDataFrameEqual(
        lag,
        [
            ("g1", "t", 0, 90, 0, 100, 10),
            ("g1", "t", 1, 100, 40, 100, 0),
            ("g1", "t", 7, 5, None, None, None),
            # No commit: the whole range (end - log start offset) is behind.
            ("g2", "t", 0, None, 0, 100, 100),
            ("g2", "t", 1, None, 40, 100, 60),
        ],
    )
    assertDataFrameEqual(audit.lag_per_group(lag), [("g1", 10, 10, 0, 3), ("g2", 160, 100, 2, 2)])


def test_partitions_a_group_never_committed_on_count_their_whole_range(
    spark: SparkSession,
) -> None:
    """g1 committed on partition 0 only: partition 1 (with messages) and the empty partition
    2 are listed too. g2 has a live member assigned but no commit yet. g3 reads
    another topic: nothing of t is listed for it."""
    committed = spark.createDataFrame(
        [("g1", "t", 0, 30), ("g3", "other", 0, 50)],
        "group string, topic string, partition int, committed_offset bigint",
    )
    assigned = spark.createDataFrame([("g2", "t", 1)], "group string, topic string, partition int")
    ranges = spark.createDataFrame(
        [("t", 0, 0, 50), ("t", 1, 10, 80), ("t", 2, 0, 0), ("other", 0, 0, 50)],
        "topic string, partition int, start_offset bigint, end_offset bigint",
    )
    lag = audit.consumer_lag(committed, ranges, assigned)
    assertDataFrameEqual(
        lag,
        [
            ("g1", "t", 0, 30, 0, 50, 20),
            ("g1", "t", 1, None, 10, 80, 70),
            ("g1", "t", 2, None, 0, 0, 0),
            ("g2", "t", 0, None, 0, 50, 50),
            ("g2", "t", 1, None, 10, 80, 70),
            ("g2", "t", 2, None, 0, 0, 0),
            ("g3", "other", 0, 50, 0, 50, 0),
        ],
    )
    assertDataFrameEqual(
        audit.lag_per_group(lag),
        [("g1", 90, 70, 2, 3), ("g2", 120, 70, 3, 3), ("g3", 0, 0, 0, 1)],
    )
