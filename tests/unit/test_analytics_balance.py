"""Balance transforms against small hand-computed DataFrames."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from analytics import balance
from analytics.testing import spark_session_fixture  # noqa: F401

pytestmark = pytest.mark.unit

W0 = datetime(2026, 1, 1, 0, 0, tzinfo=UTC)
W0_MS = int(W0.timestamp() * 1000)
FIVE_MIN_MS = 300_000

BROKER_METRICS_SCHEMA = (
    "cluster string, broker_id int, rack string, timestamp timestamp, bytes_in_per_s double, "
    "replication_bytes_in_per_s double, bytes_out_per_s double, replication_bytes_out_per_s double, "
    "log_size_bytes bigint, host_log_dir_used_bytes bigint, partition_count bigint, leader_count bigint, "
    "host_cpu_percent double"
)


def at(minute: int, second: int = 0) -> datetime:
    return datetime(2026, 1, 1, 0, minute, second, tzinfo=UTC)


def window_ms(frame: DataFrame) -> DataFrame:
    """Windows as epoch millis: comparisons then do not depend on the local time zone."""
    return frame.withColumns(
        {"window_start": F.unix_millis("window_start"), "window_end": F.unix_millis("window_end")}
    )


@pytest.fixture(scope="module")
def broker_metrics(spark: SparkSession) -> DataFrame:
    rows = [
        # broker 1, zone-a: two samples in window 0 (disk and counts: the latest wins)
        ("c", 1, "zone-a", at(0), 100.0, 10.0, 50.0, 5.0, 1000, None, 10, 5, 20.0),
        ("c", 1, "zone-a", at(1), 200.0, 10.0, 50.0, 5.0, 2000, None, 10, 6, 30.0),
        # broker 2, zone-b: no log size reported, the log dir's used bytes stand in
        ("c", 2, "zone-b", at(0), 100.0, 10.0, 50.0, 5.0, None, 4000, 10, 5, 20.0),
        # broker 3, zone-b: window 1 only; replication rate unknown counts as 0
        ("c", 3, "zone-b", at(6), 100.0, None, 50.0, 5.0, 3000, None, 12, 5, 20.0),
    ]
    return spark.createDataFrame(rows, BROKER_METRICS_SCHEMA)


@pytest.fixture(scope="module")
def broker_load(broker_metrics: DataFrame) -> DataFrame:
    return balance.broker_window_load(broker_metrics, "5 minutes").cache()


def test_broker_window_load_averages_rates_and_keeps_latest_gauges(broker_load: DataFrame) -> None:
    expected = [
        (
            "c",
            W0_MS,
            W0_MS + FIVE_MIN_MS,
            1,
            "zone-a",
            2,
            160.0,
            55.0,
            150.0,
            2000.0,
            10.0,
            6.0,
            25.0,
        ),
        (
            "c",
            W0_MS,
            W0_MS + FIVE_MIN_MS,
            2,
            "zone-b",
            1,
            110.0,
            55.0,
            100.0,
            4000.0,
            10.0,
            5.0,
            20.0,
        ),
        (
            "c",
            W0_MS + FIVE_MIN_MS,
            W0_MS + 2 * FIVE_MIN_MS,
            3,
            "zone-b",
            1,
            100.0,
            55.0,
            100.0,
            3000.0,
            12.0,
            5.0,
            20.0,
        ),
    ]
    assertDataFrameEqual(window_ms(broker_load), expected)
    assert broker_load.columns[-len(balance.RESOURCES) :] == list(balance.RESOURCES)


def test_zone_window_load_sums_brokers_and_averages_cpu(spark: SparkSession) -> None:
    schema = (
        "cluster string, window_start timestamp, window_end timestamp, broker_id int, rack string, "
        + ", ".join(f"{resource} double" for resource in balance.RESOURCES)
    )
    load = spark.createDataFrame(
        [
            ("c", at(0), at(5), 1, "zone-a", 10.0, 1.0, 5.0, 100.0, 3.0, 1.0, 20.0),
            ("c", at(0), at(5), 2, "zone-a", 30.0, 3.0, 15.0, 300.0, 3.0, 2.0, 40.0),
            ("c", at(0), at(5), 3, None, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 50.0),
        ],
        schema,
    )
    expected = [
        ("c", W0_MS, W0_MS + FIVE_MIN_MS, "zone-a", 2, 40.0, 4.0, 20.0, 400.0, 6.0, 3.0, 30.0),
        ("c", W0_MS, W0_MS + FIVE_MIN_MS, "unknown", 1, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 50.0),
    ]
    assertDataFrameEqual(window_ms(balance.zone_window_load(load)), expected)


def test_resource_balance_computes_cv_max_over_mean_and_hot_brokers(spark: SparkSession) -> None:
    load = spark.createDataFrame(
        [
            ("c", at(0), at(5), broker, value)
            for broker, value in ((1, 10.0), (2, 10.0), (3, 10.0), (4, 30.0))
        ]
        + [("c", at(0), at(5), 5, None)],  # a failed read is left out, not counted as 0
        "cluster string, window_start timestamp, window_end timestamp, broker_id int, bytes_in_per_s double",
    )
    for resource in balance.RESOURCES[1:]:
        load = load.withColumn(resource, F.lit(0.0))
    stats = balance.resource_balance(load, "broker_id", hot_threshold=1.2)

    bytes_in = stats.where(F.col("resource") == balance.BYTES_IN).select(
        "entities",
        "total",
        "mean",
        "stddev",
        "min",
        "max",
        "cv",
        "max_over_mean",
        "hot",
        "hot_count",
    )
    # mean 15, population stddev sqrt(((5*3)^2/... )) = sqrt((25*3 + 225)/4) = sqrt(75) = 8.660...
    assertDataFrameEqual(
        bytes_in, [(4, 60.0, 15.0, 75.0**0.5, 10.0, 30.0, 75.0**0.5 / 15.0, 2.0, ["4"], 1)]
    )
    idle = stats.where(F.col("resource") == balance.DISK).select("cv", "max_over_mean", "hot_count")
    assertDataFrameEqual(idle, [(0.0, 1.0, 0)])


def test_resource_balance_keeps_windows_apart_and_skips_a_resource_never_read(
    spark: SparkSession,
) -> None:
    zones = spark.createDataFrame(
        [
            ("c", at(0), at(5), "zone-a", 10.0, 1.0),
            ("c", at(0), at(5), "zone-b", 10.0, 1.0),
            ("c", at(0), at(5), "zone-c", 40.0, 1.0),
            # the next window: zone-b is the hot one, and CPU was never read
            ("c", at(5), at(10), "zone-a", 10.0, None),
            ("c", at(5), at(10), "zone-b", 50.0, None),
        ],
        "cluster string, window_start timestamp, window_end timestamp, zone string, "
        f"{balance.BYTES_IN} double, {balance.CPU} double",
    )
    for resource in balance.RESOURCES:
        if resource not in zones.columns:
            zones = zones.withColumn(resource, F.lit(1.0))
    stats = balance.resource_balance(zones, "zone", hot_threshold=1.2)

    bytes_in = stats.where(F.col("resource") == balance.BYTES_IN).select(
        F.unix_millis("window_start").alias("start"), "entities", "mean", "hot"
    )
    assertDataFrameEqual(
        bytes_in, [(W0_MS, 3, 20.0, ["zone-c"]), (W0_MS + FIVE_MIN_MS, 2, 30.0, ["zone-b"])]
    )
    cpu = stats.where(F.col("resource") == balance.CPU).select(
        F.unix_millis("window_start").alias("start"), "entities"
    )
    assertDataFrameEqual(cpu, [(W0_MS, 3)])
    assert stats.count() == 2 * len(balance.RESOURCES) - 1


def test_resource_balance_refuses_a_threshold_that_marks_average_brokers_hot(
    broker_load: DataFrame,
) -> None:
    with pytest.raises(ValueError, match=r"hot_threshold must be above 1\.0"):
        balance.resource_balance(broker_load, "broker_id", hot_threshold=0.9)


def test_partition_load_splits_topic_rates_by_log_growth(spark: SparkSession) -> None:
    partitions = spark.createDataFrame(
        [
            # broker 1 leads t-0 (grew 300) and t-1 (grew 100): a 3:1 split
            ("c", 1, at(0), "t", 0, True, 100),
            ("c", 1, at(1), "t", 0, True, 400),
            ("c", 1, at(0), "t", 1, True, 100),
            ("c", 1, at(1), "t", 1, True, 200),
            # broker 2 follows t-0: its size counts, its traffic does not
            ("c", 2, at(0), "t", 0, False, 90),
            # broker 2 leads u-0, which did not grow: the only partition takes the whole rate
            ("c", 2, at(0), "u", 0, True, 5),
        ],
        "cluster string, broker_id int, timestamp timestamp, topic string, partition int, leader boolean, size_bytes bigint",
    )
    topics = spark.createDataFrame(
        [
            ("c", 1, at(0), "t", 40.0, 80.0),
            ("c", 1, at(1), "t", 20.0, 40.0),
            ("c", 2, at(0), "u", 7.0, None),
        ],
        "cluster string, broker_id int, timestamp timestamp, topic string, bytes_in_per_s double, bytes_out_per_s double",
    )
    per_window = balance.partition_window_load(partitions, topics, "5 minutes")
    assertDataFrameEqual(
        per_window.select(
            "topic",
            "partition",
            "leader_broker_id",
            "size_bytes",
            "bytes_in_per_s",
            "bytes_out_per_s",
        ),
        [("t", 0, 1, 400, 22.5, 45.0), ("t", 1, 1, 200, 7.5, 15.0), ("u", 0, 2, 5, 7.0, 0.0)],
    )
    measured = balance.partition_measured_load(per_window)
    assertDataFrameEqual(
        measured.select("topic", "partition", "size_bytes", "bytes_in_per_s", "windows").where(
            F.col("topic") == "t"
        ),
        [("t", 0, 400, 22.5, 1), ("t", 1, 200, 7.5, 1)],
    )


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("5 minutes", 300),
        ("1 minute", 60),
        ("30 seconds", 30),
        ("2 hours", 7200),
        ("90s", 90),
        ("1 day", 86400),
    ],
)
def test_window_lengths_are_read_from_text(text: str, seconds: int) -> None:
    assert balance.window_seconds(text) == seconds


@pytest.mark.parametrize("text", ["five minutes", "0 minutes", "5 fortnights", "", "-5 minutes"])
def test_bad_window_length_is_refused_with_its_text(text: str) -> None:
    with pytest.raises(ValueError, match="is not a length such as"):
        balance.window_seconds(text)


def test_broker_that_changed_rack_in_a_window_counts_once_with_its_latest_rack(
    spark: SparkSession,
) -> None:
    rows = [
        ("c", 7, "zone-a", at(0), 100.0, 0.0, 0.0, 0.0, 1, None, 1, 1, 1.0),
        ("c", 7, "zone-b", at(2), 300.0, 0.0, 0.0, 0.0, 1, None, 1, 1, 1.0),
    ]
    load = balance.broker_window_load(
        spark.createDataFrame(rows, BROKER_METRICS_SCHEMA), "5 minutes"
    )
    assertDataFrameEqual(
        load.select("broker_id", "rack", "samples", "bytes_in_per_s"), [(7, "zone-b", 2, 300.0)]
    )


def test_latest_window_and_before_after_split(broker_load: DataFrame) -> None:
    assertDataFrameEqual(balance.latest_window(broker_load).select("broker_id"), [(3,)])

    first_and_last = balance.split_before_after(broker_load, None).select(
        "broker_id", "before_bytes_in_per_s", "after_bytes_in_per_s"
    )
    assertDataFrameEqual(first_and_last, [(1, 160.0, None), (2, 110.0, None), (3, None, 100.0)])

    by_time = balance.split_before_after(broker_load, at(5)).select(
        "broker_id", "before_leaders", "after_leaders"
    )
    assertDataFrameEqual(by_time, [(1, 6.0, None), (2, 5.0, None), (3, None, 5.0)])
    with pytest.raises(ValueError, match="needs a timezone"):
        balance.split_before_after(broker_load, datetime(2026, 1, 1))
