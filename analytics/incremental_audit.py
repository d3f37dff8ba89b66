"""The incremental audit: the audited topics read as a Structured Streaming query, so each
run counts only the records that arrived since the last one.

It runs on the balance job's incremental machinery (`analytics.incremental`: checkpoint,
trigger, progress file, per-window store) with its own micro-batch work: each batch's
records are counted per topic, partition and window (`audit.kafka_counts`, the batch
audit's transform) into partial counts kept under `rows/kafka_counts/_bucket=N/_batch=B/`
(an hour of windows per bucket; a batch Spark replays overwrites its own folder); the
buckets the batch touched are then re-summed from their partial counts alone into
`windows/kafka_counts/_bucket=N/`. Summing
counts and taking the least and greatest offsets commute with splitting the records into
batches, so the kept table equals what one batch count over everything gives.

A record arriving for a window earlier runs have reported (behind the watermark) is still
counted there: a message Kafka holds must never show as missing. Such records are counted
as late, and the windows they reopen are recomputed like any other. A record the audit
cannot put in a window (no timestamp: Kafka's "no timestamp" is -1) goes to `quarantine/`
with the reason, counted, never dropped silently.

State: STATE/<cluster>/audit/ (its own checkpoint, beside the balance job's state).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from analytics import audit
from analytics.incremental import (
    IncrementalOptions,
    Progress,
    RunCounts,
    bucket_windows,
    buckets_of,
    count_batch_quarantine,
    rows_of_buckets,
    run_incremental,
    write_partitions,
)
from analytics.sources import QUARANTINE_SCHEMA

AUDIT_JOB = "audit"
COUNTS_TABLE = "kafka_counts"
NO_TIMESTAMP_REASON = "no timestamp: the record cannot be put in a window"
COUNTS_SCHEMA = StructType(
    [
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("window_start_ms", LongType()),
        StructField("in_kafka", LongType()),
        StructField("first_offset", LongType()),
        StructField("last_offset", LongType()),
        StructField("_bucket", LongType()),
        StructField("_batch", LongType()),
    ]
)


def audit_options(state_dir: Path, cluster: str, window_s: int) -> IncrementalOptions:
    """The audit's incremental options: windows of the ledger's length, its own folder."""
    return IncrementalOptions(
        state_dir=state_dir, cluster=cluster, window=f"{window_s} seconds", job=AUDIT_JOB
    )


def _window_ms(options: IncrementalOptions) -> int:
    from analytics.balance import window_seconds

    return window_seconds(options.window) * 1000


def process_audit_batch(
    spark: SparkSession,
    options: IncrementalOptions,
    progress: Progress,
    counts: RunCounts,
    batch: DataFrame,
    batch_id: int,
) -> None:
    """One micro-batch of the audited topics: keep its partial counts, quarantine what has
    no timestamp, re-sum the windows it touched."""
    window_ms = _window_ms(options)
    records = batch.select("topic", "partition", "offset", "timestamp").persist(
        StorageLevel.MEMORY_AND_DISK
    )
    try:
        has_time = F.col("timestamp").isNotNull() & (F.unix_millis("timestamp") >= 0)
        untimed = records.where(~has_time).select(
            F.col("topic").alias("source_topic"),
            F.col("partition").alias("source_partition"),
            F.col("offset").alias("source_offset"),
            F.col("timestamp").alias("source_timestamp"),
            # The audit counts records; it never copies tenants' keys or values.
            F.lit(None).cast("string").alias("key"),
            F.lit(None).cast("string").alias("value"),
            F.array(F.lit(NO_TIMESTAMP_REASON)).alias("reasons"),
        )
        write_partitions(
            untimed.withColumn("_batch", F.lit(batch_id)),
            options.cluster_dir / "quarantine",
            "_batch",
        )
        partial = (
            audit.kafka_counts(records.where(has_time), window_ms // 1000)
            .withColumn("_window", F.floor(F.col("window_start_ms") / F.lit(window_ms)))
            .withColumn("_bucket", _bucket_of(options))
            .withColumn("_batch", F.lit(batch_id).cast("bigint"))
        )
        # The partial counts are small (a row per topic, partition and window): written
        # once, and what the batch held is read from them, not from the records again.
        write_partitions(
            partial.drop("_window"),
            options.cluster_dir / "rows" / COUNTS_TABLE,
            "_bucket",
            "_batch",
        )
        kept = partial.select(
            "window_start_ms", "in_kafka", "_window"
        ).collect()  # a row per topic, partition and window of this batch only
        windows = sorted({int(row["_window"]) for row in kept})
        watermark_ms = progress.watermark_ms
        late = sum(
            int(row["in_kafka"])
            for row in kept
            if watermark_ms is not None and int(row["window_start_ms"]) + window_ms <= watermark_ms
        )
        if windows:
            _recount_buckets(spark, options, buckets_of(windows, options.window))
        counts.batches += 1
        counts.valid += sum(int(row["in_kafka"]) for row in kept)
        counts.late += late
        counts.quarantined += count_batch_quarantine(options, batch_id)
        counts.windows_updated = sorted(set(counts.windows_updated) | set(windows))
        if kept:
            newest = records.where(has_time).agg(F.max(F.unix_millis("timestamp"))).collect()[0][0]
            progress.max_event_time_ms = max(progress.max_event_time_ms or 0, int(newest))
    finally:
        records.unpersist()


def _bucket_of(options: IncrementalOptions) -> Any:
    bucket_ms = _window_ms(options) * bucket_windows(options.window)
    return F.floor(F.col("window_start_ms") / F.lit(bucket_ms)).cast("bigint")


def _recount_buckets(spark: SparkSession, options: IncrementalOptions, buckets: list[int]) -> None:
    partials = rows_of_buckets(spark, options, COUNTS_TABLE, buckets, COUNTS_SCHEMA)
    summed = (
        partials.groupBy(*audit.LEDGER_KEYS)
        .agg(
            F.sum("in_kafka").cast("bigint").alias("in_kafka"),
            F.min("first_offset").alias("first_offset"),
            F.max("last_offset").alias("last_offset"),
        )
        .withColumn("_bucket", _bucket_of(options))
    )
    write_partitions(summed, options.cluster_dir / "windows" / COUNTS_TABLE, "_bucket")


def kept_counts(spark: SparkSession, options: IncrementalOptions) -> DataFrame:
    """What Kafka holds per topic, partition and window, as the incremental runs counted it
    (the columns of `audit.kafka_counts`)."""
    folder = options.cluster_dir / "windows" / COUNTS_TABLE
    schema = StructType([field for field in COUNTS_SCHEMA.fields if field.name != "_batch"])
    if not folder.is_dir():
        return spark.createDataFrame([], schema).drop("_bucket")
    return spark.read.schema(schema).parquet(str(folder)).drop("_bucket")


def read_quarantine(spark: SparkSession, options: IncrementalOptions) -> DataFrame:
    folder = options.cluster_dir / "quarantine"
    if not folder.is_dir():
        return spark.createDataFrame([], QUARANTINE_SCHEMA)
    return spark.read.parquet(str(folder)).drop("_batch")


def run_incremental_audit(
    spark: SparkSession, raw_stream: DataFrame, options: IncrementalOptions
) -> RunCounts:
    """Count what arrived since the last run (Trigger.AvailableNow) into the kept counts."""
    return run_incremental(spark, raw_stream, options, process=process_audit_batch)
