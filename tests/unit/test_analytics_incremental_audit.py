"""The incremental audit on a real streaming source (Spark's file source with the Kafka
source's columns, the same query and Trigger.AvailableNow as over the audited topics): a
second run reads only the new records, the kept counts equal one batch count over
everything, records without a timestamp are quarantined and counted, late ones still count."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from analytics import audit
from analytics.incremental_audit import (
    NO_TIMESTAMP_REASON,
    audit_options,
    kept_counts,
    read_quarantine,
    run_incremental_audit,
)
from analytics.testing import spark_session_fixture  # noqa: F401

pytestmark = pytest.mark.unit

T0_MS = 1_767_225_600_000
WINDOW_S = 10
SCHEMA = "topic string, partition int, offset bigint, timestamp timestamp"


def _record(topic: str, partition: int, offset: int, timestamp_ms: int | None) -> str:
    stamp = (
        None
        if timestamp_ms is None
        else datetime.fromtimestamp(timestamp_ms / 1000, UTC).isoformat(timespec="milliseconds")
    )
    return json.dumps(
        {"topic": topic, "partition": partition, "offset": offset, "timestamp": stamp}
    )


def _drop(folder: Path, name: str, lines: list[str]) -> None:
    # Written aside and renamed in, so the file source never sees half a file.
    temporary = folder.parent / f".{name}"
    temporary.write_text("\n".join(lines) + "\n")
    temporary.rename(folder / name)


def test_second_run_counts_only_new_records_and_equals_one_batch_count(
    spark: SparkSession, tmp_path: Path
) -> None:
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    options = audit_options(tmp_path / "state", "demo", WINDOW_S)

    def run() -> tuple[int, int, int, int]:
        counts = run_incremental_audit(
            spark, spark.readStream.schema(SCHEMA).json(str(incoming)), options
        )
        return counts.records_read, counts.valid, counts.quarantined, counts.late

    # First run: 30 s of records on two partitions, one record Kafka stored without a
    # timestamp (-1) and one whose timestamp is missing altogether.
    first = [_record("orders", offset % 2, offset, T0_MS + offset * 500) for offset in range(60)]
    untimed = [_record("orders", 0, 60, -1), _record("orders", 1, 61, None)]
    _drop(incoming, "a.jsonl", first + untimed)
    assert run() == (62, 60, 2, 0)

    # Second run, 15 minutes later: only the new records are read.
    second = [
        _record("orders", offset % 2, offset, T0_MS + 900_000 + offset * 100)
        for offset in range(62, 92)
    ]
    _drop(incoming, "b.jsonl", second)
    assert run() == (30, 30, 0, 0)
    assert run() == (0, 0, 0, 0)

    # A record of the first window arriving now is behind the watermark: it is still
    # counted in its window (Kafka holds it), and counted as late.
    _drop(incoming, "c.jsonl", [_record("orders", 0, 92, T0_MS + 1_000)])
    assert run() == (1, 1, 0, 1)

    everything = spark.read.schema(SCHEMA).json(str(incoming))
    timed = everything.where("timestamp IS NOT NULL AND unix_millis(timestamp) >= 0")
    assertDataFrameEqual(kept_counts(spark, options), audit.kafka_counts(timed, WINDOW_S))
    quarantine = read_quarantine(spark, options).collect()
    assert sorted(row["source_offset"] for row in quarantine) == [60, 61]
    assert {tuple(row["reasons"]) for row in quarantine} == {(NO_TIMESTAMP_REASON,)}
    progress = json.loads((options.cluster_dir / "progress.json").read_text())
    assert [entry["records_read"] for entry in progress["runs"]] == [62, 30, 0, 1]


def test_audit_state_lives_beside_the_balance_state(tmp_path: Path) -> None:
    options = audit_options(tmp_path, "demo", WINDOW_S)
    assert options.cluster_dir == tmp_path / "demo" / "audit"
    assert options.window == "10 seconds"
