"""The incremental balance job on a real streaming source (Spark's file source, the same
query and Trigger.AvailableNow as over the metrics topic): a second run reads only the new
records, the windows equal one batch run over everything, malformed and late records are
quarantined and counted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from analytics import balance
from analytics.incremental import (
    LATE_REASON,
    IncrementalOptions,
    IncrementalStateError,
    RunCounts,
    read_window_table,
    run_incremental,
)
from analytics.metrics import parse_metric_records
from analytics.testing import metric_record, spark_session_fixture  # noqa: F401

pytestmark = pytest.mark.unit

T0_MS = 1_767_225_600_000
STEP_MS = 10_000
BROKERS = 3


def _lines(first_step: int, steps: int, cluster: str = "demo") -> list[str]:
    lines = []
    for step in range(first_step, first_step + steps):
        for broker in range(BROKERS):
            record = metric_record(
                broker,
                T0_MS + step * STEP_MS,
                cluster=cluster,
                rack=f"zone-{broker % 2}",
                bytes_in_per_s=1000.0 * (broker + 1) + step,
                leader_count=broker + 1,
                topics=[
                    {"topic": "orders", "bytes_in_per_s": 100.0 + step, "bytes_out_per_s": 50.0}
                ],
                partitions=[
                    {
                        "topic": "orders",
                        "partition": broker,
                        "leader": True,
                        "size_bytes": 10 * step,
                    }
                ],
            )
            lines.append(json.dumps(record))
    return lines


def _drop(folder: Path, name: str, lines: list[str]) -> None:
    # Written aside and renamed in, so the file source never sees half a file.
    temporary = folder.parent / f".{name}"
    temporary.write_text("\n".join(lines) + "\n")
    temporary.rename(folder / name)


def test_second_run_reads_only_new_records_and_windows_equal_a_batch_run(
    spark: SparkSession, tmp_path: Path
) -> None:
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    options = IncrementalOptions(
        state_dir=tmp_path / "state", cluster="demo", window="5 minutes", lateness="1 minute"
    )

    def run() -> RunCounts:
        return run_incremental(spark, spark.readStream.text(str(incoming)), options)

    # First run: the first 5 minutes, two malformed records, and a record of another cluster.
    first = [*_lines(0, 30), "garbage", "[1]", *_lines(0, 1, cluster="other")[:1]]
    _drop(incoming, "a.jsonl", first)
    counts = run()
    assert counts.records_read == len(first)
    assert counts.quarantined == 2
    assert counts.other_clusters == 1
    assert counts.valid == 30 * BROKERS
    assert counts.windows_updated == [T0_MS // 300_000]

    # Second run: the next 5 minutes only are read; only their window is recomputed.
    second = _lines(30, 30)
    _drop(incoming, "b.jsonl", second)
    counts = run()
    assert counts.records_read == len(second)
    assert counts.valid == 30 * BROKERS
    assert counts.quarantined == 0
    assert counts.windows_updated == [T0_MS // 300_000 + 1]

    # Nothing new: nothing read.
    assert run().records_read == 0

    everything = parse_metric_records(spark.read.text(str(incoming)))
    batch_load = balance.broker_window_load(
        everything.broker_metrics.where("cluster = 'demo'"), "5 minutes"
    )
    assertDataFrameEqual(read_window_table(spark, options, "broker_load"), batch_load)
    assertDataFrameEqual(
        read_window_table(spark, options, "replica_window"),
        balance.replica_window_state(everything.partition_metrics.where("cluster = 'demo'")),
    )
    assertDataFrameEqual(
        read_window_table(spark, options, "topic_window"),
        balance.topic_window_rates(everything.topic_metrics.where("cluster = 'demo'")),
    )

    # A sample of the first window arriving now is behind the watermark: quarantined as
    # late and counted, and the first window's result is left as reported.
    _drop(incoming, "c.jsonl", _lines(3, 1)[:1])
    counts = run()
    assert (counts.records_read, counts.late, counts.quarantined, counts.valid) == (1, 1, 1, 0)
    quarantine = spark.read.parquet(str(tmp_path / "state" / "demo" / "quarantine"))
    assert quarantine.where(F.array_contains("reasons", LATE_REASON)).count() == 1
    assert quarantine.count() == 3
    assertDataFrameEqual(read_window_table(spark, options, "broker_load"), batch_load)
    progress = json.loads((tmp_path / "state" / "demo" / "progress.json").read_text())
    assert [run["records_read"] for run in progress["runs"]] == [len(first), len(second), 0, 1]


def test_state_of_another_window_length_is_refused(spark: SparkSession, tmp_path: Path) -> None:
    (tmp_path / "state" / "demo").mkdir(parents=True)
    (tmp_path / "state" / "demo" / "progress.json").write_text(
        json.dumps({"schema_version": 2, "window": "1 minute", "lateness": "1 minute", "runs": []})
    )
    options = IncrementalOptions(state_dir=tmp_path / "state", cluster="demo")
    with pytest.raises(IncrementalStateError, match="holds windows of 1 minute, not 5 minutes"):
        run_incremental(spark, spark.readStream.text(str(tmp_path)), options)
