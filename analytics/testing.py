"""Test support: the one Spark session of a test run, and metric records to feed it.

Test modules import the fixture, which pytest then knows by the name `spark`:
`from analytics.testing import spark_session_fixture  # noqa: F401`. (Its Python name
differs so that test parameters named `spark` do not shadow the import.)
The session is cached here, so every module that imports the fixture shares one JVM.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.sql import SparkSession

from analytics.metrics import SCHEMA_VERSION
from analytics.session import SparkSettings, build_spark_session

# assertDataFrameEqual loads pandas-on-Spark, which asks for this with pyarrow >= 2.
os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")

_SESSION: SparkSession | None = None

# Test frames have a handful of rows: one shuffle partition, since every extra task costs
# more than its work (the analytics unit tests: about 100 s with 2, 60 s with 1).
TEST_SETTINGS = SparkSettings(
    app_name="kaas-analytics-tests",
    master="local[2]",
    driver_memory="1g",
    shuffle_partitions=1,
)


def shared_session() -> SparkSession:
    global _SESSION
    if _SESSION is None:
        _SESSION = build_spark_session(TEST_SETTINGS)
    return _SESSION


@pytest.fixture(scope="session", name="spark")
def spark_session_fixture() -> Iterator[SparkSession]:
    """One SparkSession for the whole test run (started on first use)."""
    global _SESSION
    session = shared_session()
    yield session
    if _SESSION is not None:
        _SESSION.stop()
        _SESSION = None


def metric_record(
    broker_id: int,
    timestamp_ms: int,
    *,
    cluster: str = "test",
    rack: str | None = "zone-a",
    bytes_in_per_s: float = 1000.0,
    bytes_out_per_s: float = 2000.0,
    replication_bytes_in_per_s: float = 0.0,
    replication_bytes_out_per_s: float = 0.0,
    leader_count: int = 1,
    partition_count: int = 3,
    log_size_bytes: int = 10_000,
    cpu_percent: float = 10.0,
    topics: list[dict[str, Any]] | None = None,
    partitions: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A valid schema-v1 record, as the agent produces it, with the given values."""
    return {
        "schema_version": SCHEMA_VERSION,
        "cluster": cluster,
        "broker_id": broker_id,
        "rack": rack,
        "timestamp_ms": timestamp_ms,
        "interval_s": 10,
        "agent_version": "test",
        "broker": {
            "under_replicated_partitions": 0,
            "offline_partitions_count": 0,
            "active_controller_count": 1 if broker_id == 0 else 0,
            "isr_shrinks_per_s": 0.0,
            "isr_expands_per_s": 0.0,
            "bytes_in_per_s": bytes_in_per_s,
            "bytes_out_per_s": bytes_out_per_s,
            "replication_bytes_in_per_s": replication_bytes_in_per_s,
            "replication_bytes_out_per_s": replication_bytes_out_per_s,
            "messages_in_per_s": bytes_in_per_s / 100,
            "request_handler_avg_idle_percent": 0.9,
            "network_processor_avg_idle_percent": 0.95,
            "leader_count": leader_count,
            "partition_count": partition_count,
            "log_size_bytes": log_size_bytes,
            "log_cleaner_time_since_last_run_ms": 1000,
        },
        "topics": topics if topics is not None else [],
        "partitions": partitions if partitions is not None else [],
        "host": {
            "cpu_percent": cpu_percent,
            "memory_used_bytes": 1 << 30,
            "memory_total_bytes": 4 << 30,
            "log_dir_used_bytes": log_size_bytes,
            "log_dir_free_bytes": 1 << 34,
            "network_bytes_sent": 1,
            "network_bytes_recv": 1,
        },
        "errors": [],
    }
