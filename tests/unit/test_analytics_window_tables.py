"""The driver-side small tables equal what the Spark transforms compute from the same
per-window tables: the job moved them to pandas for speed, not to change results."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pandas as pd
import pytest
from pyspark.sql import DataFrame, SparkSession

from analytics import balance, window_tables
from analytics.testing import spark_session_fixture  # noqa: F401
from analytics.writeback import measured_load_of
from planner.contracts.measured_load import parse_measured_load

pytestmark = pytest.mark.unit

W0 = datetime(2026, 1, 1, 0, 0, tzinfo=UTC)
W1 = datetime(2026, 1, 1, 0, 5, tzinfo=UTC)
W2 = datetime(2026, 1, 1, 0, 10, tzinfo=UTC)

BROKER_LOAD_SCHEMA = (
    "cluster string, window_start timestamp, window_end timestamp, broker_id int, "
    "rack string, samples bigint, "
    + ", ".join(f"{resource} double" for resource in balance.RESOURCES)
)


def _broker_rows() -> list[tuple[Any, ...]]:
    # Window 0: broker 10 hot on bytes in (ids sort as numbers: 2 before 10), CPU never
    # read on broker 3, no rack on broker 3; window 1: no load at all (perfectly even),
    # disk never read anywhere.
    rows: list[tuple[Any, ...]] = []
    for broker, rack, bytes_in, cpu in (
        (1, "a", 100.0, 10.0),
        (2, "a", 300.0, 30.0),
        (3, None, 100.0, None),
        (10, "b", 300.0, 20.0),
    ):
        rows.append(
            ("c", W0, W1, broker, rack, 30, bytes_in, 2 * bytes_in, bytes_in, 1e9, 4.0, 2.0, cpu)
        )
        rows.append(("c", W1, W2, broker, rack, 30, 0.0, 0.0, 0.0, None, 0.0, 0.0, 0.0))
    return rows


def _sorted(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    frame = frame.copy()
    for column in ("window_start", "window_end"):
        if column in frame:
            frame[column] = pd.to_datetime(frame[column], utc=True)
    for column in frame:
        if str(frame[column].dtype) in ("Int32", "Int64"):
            # Nullable integers (pandas' own NA) compared as floats with NaN, as Spark's are.
            frame[column] = frame[column].astype("float64")
    if "hot" in frame:
        frame["hot"] = frame["hot"].map(list)
    return frame.sort_values(keys).reset_index(drop=True)


def _assert_same(
    spark_frame: DataFrame, pandas_frame: pd.DataFrame, keys: list[str], schema: Any = None
) -> None:
    expected = _sorted(spark_frame.toArrow().to_pandas(), keys)
    if schema is not None:
        pandas_frame = window_tables.to_arrow(pandas_frame, schema).to_pandas()
    actual = _sorted(pandas_frame, keys)
    assert list(actual.columns) == list(expected.columns)
    assert len(actual) == len(expected) > 0
    pd.testing.assert_frame_equal(actual, expected, check_dtype=False, rtol=1e-12)


@pytest.fixture(scope="module")
def broker_load(spark: SparkSession) -> tuple[DataFrame, pd.DataFrame]:
    frame = spark.createDataFrame(_broker_rows(), BROKER_LOAD_SCHEMA)
    return frame, frame.toArrow().to_pandas()


def test_zone_load_matches_spark(broker_load: tuple[DataFrame, pd.DataFrame]) -> None:
    spark_frame, pandas_frame = broker_load
    _assert_same(
        balance.zone_window_load(spark_frame),
        window_tables.zone_window_load(pandas_frame),
        ["window_start", "zone"],
        window_tables.ZONE_LOAD_SCHEMA,
    )


@pytest.mark.parametrize("entity", ["broker_id", "zone"])
def test_resource_balance_matches_spark(
    broker_load: tuple[DataFrame, pd.DataFrame], entity: str
) -> None:
    spark_frame, pandas_frame = broker_load
    if entity == "zone":
        spark_frame = balance.zone_window_load(spark_frame)
        pandas_frame = window_tables.zone_window_load(pandas_frame)
    expected = balance.resource_balance(spark_frame, entity, 1.2)
    actual = window_tables.resource_balance(pandas_frame, entity, 1.2)
    _assert_same(expected, actual, ["window_start", "resource"], window_tables.BALANCE_SCHEMA)
    if entity == "broker_id":
        hot_in = actual[(actual["resource"] == balance.BYTES_IN) & (actual["window_start"] == W0)]
        assert list(hot_in["hot"].iloc[0]) == ["2", "10"]


def test_resource_balance_refuses_a_threshold_at_or_below_the_mean(
    broker_load: tuple[DataFrame, pd.DataFrame],
) -> None:
    with pytest.raises(ValueError, match=r"hot_threshold must be above 1\.0"):
        window_tables.resource_balance(broker_load[1], "broker_id", 1.0)


def test_partition_load_and_measured_load_match_spark(spark: SparkSession) -> None:
    replica_schema = (
        "cluster string, window_start timestamp, window_end timestamp, broker_id int, "
        "topic string, partition int, leader boolean, size_bytes bigint, growth_bytes bigint"
    )
    replicas = [
        # Broker 1 leads orders 0 (grew 300) and 1 (grew 100): rates split 3:1.
        ("c", W0, W1, 1, "orders", 0, True, 1000, 300),
        ("c", W0, W1, 1, "orders", 1, True, 500, 100),
        ("c", W0, W1, 2, "orders", 0, False, 990, 290),
        # Broker 2 leads logs 0, which did not grow: an equal share (the whole rate).
        ("c", W0, W1, 2, "logs", 0, True, 10, 0),
        # Window 1: leadership of orders 0 moved from broker 1 to broker 2 (two leaders).
        ("c", W1, W2, 1, "orders", 0, True, 1100, 100),
        ("c", W1, W2, 2, "orders", 0, True, 1100, 100),
        # A follower only: size kept, no leader, no traffic.
        ("c", W1, W2, 3, "orders", 1, False, None, None),
    ]
    rates = [
        ("c", W0, W1, 1, "orders", 400.0, 800.0),
        ("c", W0, W1, 2, "logs", 50.0, None),
        ("c", W1, W2, 1, "orders", 100.0, 100.0),
        ("c", W1, W2, 2, "orders", 300.0, 300.0),
    ]
    rates_schema = (
        "cluster string, window_start timestamp, window_end timestamp, broker_id int, "
        "topic string, topic_bytes_in_per_s double, topic_bytes_out_per_s double"
    )
    replica_frame = spark.createDataFrame(replicas, replica_schema)
    rate_frame = spark.createDataFrame(rates, rates_schema)
    expected = balance.partition_load_from(replica_frame, rate_frame)
    actual = window_tables.partition_load(
        replica_frame.toArrow().to_pandas(), rate_frame.toArrow().to_pandas()
    )
    keys = ["window_start", "topic", "partition"]
    _assert_same(expected, actual, keys, window_tables.PARTITION_LOAD_SCHEMA)
    orders0 = actual[(actual["topic"] == "orders") & (actual["partition"] == 0)]
    assert orders0.sort_values("window_start")[balance.BYTES_IN].tolist() == [300.0, 400.0]
    _assert_same(
        balance.partition_measured_load(expected),
        window_tables.partition_measured_load(actual),
        ["topic", "partition"],
    )


@pytest.mark.parametrize("applied", [None, W1])
def test_before_after_split_matches_spark(
    broker_load: tuple[DataFrame, pd.DataFrame], applied: datetime | None
) -> None:
    spark_frame, pandas_frame = broker_load
    _assert_same(
        balance.split_before_after(spark_frame, applied),
        window_tables.split_before_after(pandas_frame, applied),
        ["broker_id"],
    )


def test_before_after_split_refuses_a_time_without_zone(
    broker_load: tuple[DataFrame, pd.DataFrame],
) -> None:
    with pytest.raises(ValueError, match="needs a timezone"):
        window_tables.split_before_after(broker_load[1], datetime(2026, 1, 1))


def test_measured_load_for_the_planner_averages_the_documented_span() -> None:
    frame = pd.DataFrame(
        {
            "cluster": ["c"] * 3,
            "window_start": [W0, W1, W1],
            "window_end": [W1, W2, W2],
            "topic": ["orders", "orders", "logs"],
            "partition": [0, 0, 0],
            "leader_broker_id": [1, 1, 2],
            "size_bytes": [10, 20, 5],
            balance.BYTES_IN: [100.0, 300.0, 7.0],
            balance.BYTES_OUT: [10.0, 30.0, 0.0],
        }
    )
    both = measured_load_of(frame, "c", span_s=600, computed_at="2026-01-01T00:11:00+00:00")
    assert (both.window_start, both.window_end, both.window_s) == (
        W0.isoformat(),
        W2.isoformat(),
        600,
    )
    assert both.by_partition()[("orders", 0)].bytes_in_per_s == 200.0
    latest = measured_load_of(frame, "c", span_s=300, computed_at="2026-01-01T00:11:00+00:00")
    assert latest.window_s == 300
    assert latest.by_partition()[("orders", 0)].bytes_out_per_s == 30.0
    assert parse_measured_load(json.dumps(latest.to_json())) == latest


@pytest.mark.parametrize(
    ("applied", "before", "after", "title"),
    [
        (
            None,
            "first window 2026-01-01 00:00-00:05 UTC",
            "latest window 2026-01-01 00:10-00:15 UTC",
            "per-broker load: first window against latest window (no plan time given)",
        ),
        (
            W1,
            "windows ending by 2026-01-01 00:05 UTC (before the plan)",
            "windows starting from 2026-01-01 00:05 UTC (after the plan)",
            "per-broker load before and after the plan applied at 2026-01-01 00:05 UTC",
        ),
    ],
)
def test_the_load_chart_says_what_it_compares(
    applied: datetime | None, before: str, after: str, title: str
) -> None:
    starts = [W0, W1, W2]
    frame = pd.DataFrame(
        {
            "window_start": starts,
            "window_end": [start + pd.Timedelta("5min") for start in starts],
        }
    )
    labels = window_tables.comparison_labels(frame, applied)
    assert (labels.before, labels.after, labels.title) == (before, after, title)
