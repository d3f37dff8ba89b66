"""The incremental balance job: a Structured Streaming query over the metrics topic that
processes only what arrived since its last run and updates the windows it touched.

Each micro-batch (`foreachBatch`) parses its records with the batch job's parser; valid
rows of the job's cluster are kept in a per-cluster store partitioned by window (and by
batch, so a batch Spark replays after a failure overwrites its own rows instead of
adding them twice); the per-window tables of the windows the batch touched are then
recomputed from those windows' rows alone, with the batch job's transforms, and replace
the old ones. So a run costs the new records plus the windows they fall in, whatever the
length of the history, and each window's result equals a batch run over everything.

The store is partitioned by bucket, an hour of whole windows (`bucket_windows`), not by
window: a window's rows are all in its bucket, and a run's new hour touches one or two
buckets, while a folder per 5-minute window would make a month of history 8,640 folders
per table and a day's batch hundreds of small files per table.

Late records: the watermark is the latest sample time seen in earlier batches minus the
allowed lateness; a record older than that would reopen a window the earlier runs have
reported as final, so it goes to the quarantine with the reason "late", counted, like a
malformed record (never dropped silently).

State, per cluster, under STATE/<cluster>/: `checkpoint/` (Spark's: the offsets read),
`rows/<table>/_bucket=N/_batch=B/`, `windows/<table>/_bucket=N/`, `quarantine/`, and
`progress.json` (the watermark and the counts of every run).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import LongType, StructField, StructType

from analytics import balance
from analytics.errors import AnalyticsError
from analytics.metrics import parse_metric_records

PROGRESS_SCHEMA_VERSION = 2
BUCKET_SECONDS = 3600
FLAT_TABLES = ("broker_metrics", "topic_metrics", "partition_metrics")
WINDOW_TABLES = ("broker_load", "replica_window", "topic_window")
LATE_REASON = "late: older than the watermark (its window was already reported)"
DEFAULT_LATENESS = "10 minutes"


class IncrementalStateError(AnalyticsError, ValueError):
    """The incremental state folder does not fit this run (another window length...)."""


@dataclass(frozen=True)
class IncrementalOptions:
    state_dir: Path
    """Folder holding one sub-folder of state per cluster."""
    cluster: str
    window: str = balance.DEFAULT_WINDOW
    lateness: str = DEFAULT_LATENESS
    """How late a sample may arrive and still count in its window."""
    job: str = ""
    """A job's own sub-folder of the cluster's state (its own checkpoint); the balance
    job's state is the cluster's folder itself."""

    @property
    def cluster_dir(self) -> Path:
        return (
            self.state_dir / self.cluster / self.job if self.job else self.state_dir / self.cluster
        )


@dataclass
class RunCounts:
    """What one run (all its micro-batches) read and did."""

    records_read: int = 0
    """Records the source delivered in this run (Spark's own input count)."""
    valid: int = 0
    quarantined: int = 0
    late: int = 0
    other_clusters: int = 0
    windows_updated: list[int] = field(default_factory=list)
    batches: int = 0


@dataclass
class Progress:
    """progress.json: the watermark and the history of runs."""

    window: str
    lateness: str
    max_event_time_ms: int | None = None
    runs: list[dict[str, Any]] = field(default_factory=list)
    schema_version: int = PROGRESS_SCHEMA_VERSION

    @property
    def watermark_ms(self) -> int | None:
        if self.max_event_time_ms is None:
            return None
        return self.max_event_time_ms - balance.window_seconds(self.lateness) * 1000


def load_progress(options: IncrementalOptions) -> Progress:
    path = options.cluster_dir / "progress.json"
    if not path.exists():
        return Progress(window=options.window, lateness=options.lateness)
    document = json.loads(path.read_text())
    if document.get("schema_version") != PROGRESS_SCHEMA_VERSION:
        raise IncrementalStateError(
            f"{path}: schema_version {document.get('schema_version')!r} is not "
            f"{PROGRESS_SCHEMA_VERSION} (a state of another layout): use another --state folder"
        )
    if document["window"] != options.window:
        raise IncrementalStateError(
            f"{options.cluster_dir} holds windows of {document['window']}, not {options.window}:"
            " use another --state folder"
        )
    return Progress(
        window=document["window"],
        lateness=options.lateness,
        max_event_time_ms=document.get("max_event_time_ms"),
        runs=list(document.get("runs", [])),
    )


def _save_progress(options: IncrementalOptions, progress: Progress) -> None:
    path = options.cluster_dir / "progress.json"
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(asdict(progress), indent=2, sort_keys=True) + "\n")
    os.replace(temporary, path)


def bucket_windows(window: str) -> int:
    """Windows per store bucket: an hour's worth, and at least one."""
    return max(1, BUCKET_SECONDS // balance.window_seconds(window))


def buckets_of(windows: list[int], window: str) -> list[int]:
    per_bucket = bucket_windows(window)
    return sorted({index // per_bucket for index in windows})


def bucket_of_window_start(window: str) -> Any:
    """The bucket of a per-window row, from its `window_start`."""
    length = balance.window_seconds(window) * bucket_windows(window)
    return F.floor(F.unix_seconds("window_start") / F.lit(length)).cast("bigint")


def _window_index(window: str) -> Any:
    length_us = balance.window_seconds(window) * 1_000_000
    return F.floor(F.unix_micros("timestamp") / F.lit(length_us)).cast("bigint")


def rows_of_buckets(
    spark: SparkSession,
    options: IncrementalOptions,
    table: str,
    buckets: list[int],
    schema: StructType,
) -> DataFrame:
    """The kept rows of `buckets` only: their folders are named, never the whole history."""
    root = options.cluster_dir / "rows" / table
    paths = [
        str(root / f"_bucket={index}") for index in buckets if (root / f"_bucket={index}").is_dir()
    ]
    if not paths:
        return spark.createDataFrame([], schema).drop("_bucket", "_batch")
    return (
        spark.read.option("basePath", str(root))
        .schema(schema)
        .parquet(*paths)
        .drop("_bucket", "_batch")
    )


def process_batch(
    spark: SparkSession,
    options: IncrementalOptions,
    progress: Progress,
    counts: RunCounts,
    batch: DataFrame,
    batch_id: int,
) -> None:
    """One micro-batch: keep its rows, quarantine what is malformed or late, recompute the
    windows it touched."""
    batch = batch.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        parsed = parse_metric_records(batch)
        watermark_ms = progress.watermark_ms
        window_of = _window_index(options.window)
        brokers = parsed.broker_metrics.withColumn("_window", window_of)
        late = (
            F.unix_millis("timestamp") < F.lit(watermark_ms)
            if watermark_ms is not None
            else F.lit(False)
        )
        # The batch is small: one aggregation tells what it holds.
        summary = brokers.agg(
            F.count(F.lit(1)).alias("valid"),
            F.sum(F.when(F.col("cluster") != options.cluster, 1).otherwise(0)).alias("other"),
            F.sum(F.when((F.col("cluster") == options.cluster) & late, 1).otherwise(0)).alias(
                "late"
            ),
            F.max(F.when(F.col("cluster") == options.cluster, F.unix_millis("timestamp"))).alias(
                "max_ms"
            ),
            F.collect_set(
                F.when((F.col("cluster") == options.cluster) & ~late, F.col("_window"))
            ).alias("windows"),
        ).collect()[0]
        keep = (F.col("cluster") == options.cluster) & ~late
        late_rows = parsed.quarantine.limit(0)
        if summary["late"]:
            late_rows = brokers.where((F.col("cluster") == options.cluster) & late).select(
                F.lit(None).cast("string").alias("source_topic"),
                F.lit(None).cast("int").alias("source_partition"),
                F.lit(None).cast("bigint").alias("source_offset"),
                F.col("timestamp").alias("source_timestamp"),
                F.lit(None).cast("string").alias("key"),
                F.concat_ws(" ", F.lit("broker"), F.col("broker_id")).alias("value"),
                F.array(F.lit(LATE_REASON)).alias("reasons"),
            )
        quarantine = parsed.quarantine.unionByName(late_rows).withColumn("_batch", F.lit(batch_id))
        write_partitions(quarantine, options.cluster_dir / "quarantine", "_batch")
        quarantined = count_batch_quarantine(options, batch_id)
        windows = sorted(int(index) for index in summary["windows"])
        bucket_of = F.floor(window_of / F.lit(bucket_windows(options.window))).cast("bigint")
        for name in FLAT_TABLES:
            frame = getattr(parsed, name).withColumn("_window", window_of)
            write_partitions(
                frame.where(keep)
                .withColumn("_bucket", bucket_of)
                .withColumn("_batch", F.lit(batch_id))
                .drop("_window"),
                options.cluster_dir / "rows" / name,
                "_bucket",
                "_batch",
            )
        if windows:
            _recompute_buckets(spark, options, parsed, buckets_of(windows, options.window))
        counts.batches += 1
        counts.valid += (
            int(summary["valid"]) - int(summary["other"] or 0) - int(summary["late"] or 0)
        )
        counts.other_clusters += int(summary["other"] or 0)
        counts.late += int(summary["late"] or 0)
        counts.quarantined += quarantined
        counts.windows_updated = sorted(set(counts.windows_updated) | set(windows))
        if summary["max_ms"] is not None:
            progress.max_event_time_ms = max(
                progress.max_event_time_ms or 0, int(summary["max_ms"])
            )
    finally:
        batch.unpersist()


def count_batch_quarantine(options: IncrementalOptions, batch_id: int) -> int:
    folder = options.cluster_dir / "quarantine" / f"_batch={batch_id}"
    if not folder.is_dir():
        return 0
    return sum(pq.ParquetFile(part).metadata.num_rows for part in folder.glob("*.parquet"))


def _kept_schema(frame: DataFrame) -> StructType:
    """A flat table's schema with the store's partition columns."""
    return StructType(
        [
            *frame.schema.fields,
            StructField("_bucket", LongType()),
            StructField("_batch", LongType()),
        ]
    )


def _recompute_buckets(
    spark: SparkSession, options: IncrementalOptions, parsed: Any, buckets: list[int]
) -> None:
    """The per-window tables of the windows in `buckets`, from those buckets' kept rows,
    replacing the previous results of the same windows."""
    rows = {
        name: rows_of_buckets(spark, options, name, buckets, _kept_schema(getattr(parsed, name)))
        for name in FLAT_TABLES
    }
    results = {
        "broker_load": balance.broker_window_load(rows["broker_metrics"], options.window),
        "replica_window": balance.replica_window_state(rows["partition_metrics"], options.window),
        "topic_window": balance.topic_window_rates(rows["topic_metrics"], options.window),
    }
    for name, frame in results.items():
        write_partitions(
            frame.withColumn("_bucket", bucket_of_window_start(options.window)),
            options.cluster_dir / "windows" / name,
            "_bucket",
        )


def read_window_table(spark: SparkSession, options: IncrementalOptions, name: str) -> DataFrame:
    """Every window's row of one per-window table, as the incremental runs left it."""
    return spark.read.parquet(str(options.cluster_dir / "windows" / name)).drop("_bucket")


BatchProcessor = Callable[
    [SparkSession, IncrementalOptions, Progress, RunCounts, DataFrame, int], None
]
"""One micro-batch's work: (spark, options, progress, counts, batch, batch_id)."""


def write_partitions(frame: DataFrame, folder: Path, *columns: str) -> None:
    """Replace only the partitions `frame` holds: a replayed batch or a recomputed window
    overwrites its own folders and leaves every other one as it was.

    Rows are first gathered by partition: else every task writes a file into every
    partition it holds rows of (a day's batch of hourly files: tasks x windows small files,
    most of a run's time)."""
    (
        frame.repartition(*columns)
        .write.mode("overwrite")
        .option("partitionOverwriteMode", "dynamic")
        .partitionBy(*columns)
        .parquet(str(folder))
    )


def run_incremental(
    spark: SparkSession,
    raw_stream: DataFrame,
    options: IncrementalOptions,
    processing_time: str | None = None,
    on_batch: Callable[[RunCounts], None] | None = None,
    process: BatchProcessor | None = None,
) -> RunCounts:
    """Run the query: with `processing_time` None, once over what is available now
    (Trigger.AvailableNow) and return; else forever on that processing-time trigger.

    `process` does each micro-batch's work (default: the balance job's); this function
    owns what every incremental job shares: the checkpoint, the trigger, the progress file
    and the count of records read."""
    options.cluster_dir.mkdir(parents=True, exist_ok=True)
    progress = load_progress(options)
    counts = RunCounts()
    work = process or process_batch

    def each_batch(batch: DataFrame, batch_id: int) -> None:
        work(spark, options, progress, counts, batch, batch_id)
        _save_progress(options, progress)
        if on_batch is not None:
            on_batch(counts)

    writer = raw_stream.writeStream.foreachBatch(each_batch).option(
        "checkpointLocation", str(options.cluster_dir / "checkpoint")
    )
    writer = (
        writer.trigger(availableNow=True)
        if processing_time is None
        else writer.trigger(processingTime=processing_time)
    )
    query: StreamingQuery = writer.start()
    query.awaitTermination()
    counts.records_read = sum(int(update["numInputRows"]) for update in query.recentProgress)
    progress.runs.append(
        {
            "finished_at": datetime.now(UTC).isoformat(),
            **{key: value for key, value in asdict(counts).items() if key != "windows_updated"},
            "windows_updated": len(counts.windows_updated),
        }
    )
    _save_progress(options, progress)
    return counts


def latest_window_summary(
    spark: SparkSession,
    options: IncrementalOptions,
    hot_threshold: float = balance.DEFAULT_HOT_THRESHOLD,
) -> dict[str, Any] | None:
    """The latest window's score and spread, from the kept per-window broker load (what the
    score znode and statsd take); None before any window exists."""
    import pandas as pd

    from analytics import window_tables
    from analytics.planner_score import score_windows

    folder = options.cluster_dir / "windows" / "broker_load"
    if not folder.is_dir():
        return None
    buckets = sorted(
        int(path.name.partition("=")[2]) for path in folder.glob("_bucket=*") if path.is_dir()
    )
    if not buckets:
        return None
    bucket = (
        spark.read.option("basePath", str(folder))
        .parquet(str(folder / f"_bucket={buckets[-1]}"))
        .drop("_bucket")
        .toArrow()
        .to_pandas()
    )
    latest = bucket[bucket["window_start"] == bucket["window_start"].max()].reset_index(drop=True)
    stats = window_tables.resource_balance(latest, "broker_id", hot_threshold)
    ((_, outcome),) = score_windows(latest, ("window_start", "window_end"))
    return {
        "cluster": options.cluster,
        "score": outcome.score,
        "unavailable_reason": outcome.unavailable_reason,
        "window_start": pd.Timestamp(latest["window_start"].iloc[0]).isoformat(),
        "window_end": pd.Timestamp(latest["window_end"].iloc[0]).isoformat(),
        "brokers": len(latest),
        "buckets_kept": len(buckets),
        "resources": {
            str(row["resource"]): {
                "mean": float(row["mean"]),
                "cv": round(float(row["cv"]), 6),
                "max_over_mean": round(float(row["max_over_mean"]), 6),
                "hot_count": int(row["hot_count"]),
                "hot": list(row["hot"]),
            }
            for _, row in stats.sort_values("resource").iterrows()
        },
    }
