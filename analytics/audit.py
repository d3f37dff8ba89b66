"""Audit transforms: completeness of what producers acknowledged, and consumer lag.

Completeness compares the producers' ledger (analytics.ledger) with what Kafka holds,
per topic, partition and window. Lag compares each consumer group's committed offset
with the partition's end offset (the whole range where the group never committed).
Pure DataFrame-to-DataFrame functions.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analytics.errors import AnalyticsError
from analytics.ledger import LEDGER_SCHEMA_VERSION

LEDGER_KEYS = ("topic", "partition", "window_start_ms")


class AuditInputError(AnalyticsError, ValueError):
    """A ledger the audit cannot compare (wrong version, mixed window lengths...)."""


def ledger_window_s(ledger: DataFrame) -> int:
    """The ledger's single window length; mixed lengths cannot be compared per window."""
    versions = [row[0] for row in ledger.select("schema_version").distinct().collect()]
    unknown = sorted(str(version) for version in versions if version != LEDGER_SCHEMA_VERSION)
    if unknown:
        raise AuditInputError(
            f"ledger schema_version {', '.join(unknown)} is not supported (expected 1)"
        )
    lengths = sorted(row[0] for row in ledger.select("window_s").distinct().collect())
    if len(lengths) != 1:
        raise AuditInputError(f"ledger entries use several window lengths {lengths}; expected one")
    if lengths[0] is None or lengths[0] <= 0:
        raise AuditInputError(f"ledger window_s must be a positive integer, got {lengths[0]}")
    return int(lengths[0])


def produced_counts(ledger: DataFrame) -> DataFrame:
    """Ledger entries summed over producers: messages acknowledged per topic, partition, window."""
    return ledger.groupBy(*LEDGER_KEYS).agg(F.sum("count").cast("bigint").alias("produced"))


def kafka_counts(records: DataFrame, window_s: int) -> DataFrame:
    """What Kafka holds per topic, partition and window, from Kafka-source rows.

    `records` has Spark's Kafka source columns topic, partition, offset, timestamp.
    Besides the count, the offset range is kept: an offset range wider than the count
    means gaps (transaction markers, compaction), worth knowing when reading a shortfall.
    """
    window_ms = window_s * 1000
    timestamp_ms = F.unix_millis(F.col("timestamp"))
    return (
        records.withColumn("window_start_ms", timestamp_ms - F.pmod(timestamp_ms, F.lit(window_ms)))
        .groupBy(*LEDGER_KEYS)
        .agg(
            F.count(F.lit(1)).alias("in_kafka"),
            F.min("offset").alias("first_offset"),
            F.max("offset").alias("last_offset"),
        )
    )


def completeness(produced: DataFrame, in_kafka: DataFrame) -> DataFrame:
    """Per topic, partition and window: produced, in Kafka, missing, extra.

    Only topics the ledger names are audited. A window Kafka holds but the ledger does
    not (another producer, or a clock far off) shows as extra, never hides a shortfall
    elsewhere: missing is counted per window.
    """
    audited_topics = produced.select("topic").distinct()
    kafka_side = in_kafka.join(audited_topics, "topic", "left_semi")
    joined = produced.join(kafka_side, list(LEDGER_KEYS), "full_outer")
    produced_count = F.coalesce(F.col("produced"), F.lit(0)).cast("bigint")
    kafka_count = F.coalesce(F.col("in_kafka"), F.lit(0)).cast("bigint")
    return joined.select(
        *LEDGER_KEYS,
        produced_count.alias("produced"),
        kafka_count.alias("in_kafka"),
        F.greatest(produced_count - kafka_count, F.lit(0)).alias("missing"),
        F.greatest(kafka_count - produced_count, F.lit(0)).alias("extra"),
        "first_offset",
        "last_offset",
    )


def completeness_totals(per_window: DataFrame) -> DataFrame:
    """One row: totals and the completeness percentage (100 when nothing was produced)."""
    return per_window.agg(
        F.coalesce(F.sum("produced"), F.lit(0)).cast("bigint").alias("produced"),
        F.coalesce(F.sum("in_kafka"), F.lit(0)).cast("bigint").alias("in_kafka"),
        F.coalesce(F.sum("missing"), F.lit(0)).cast("bigint").alias("missing"),
        F.coalesce(F.sum("extra"), F.lit(0)).cast("bigint").alias("extra"),
        F.count(F.when(F.col("missing") > 0, True)).alias("windows_with_missing"),
    ).withColumn(
        "completeness_percent",
        F.when(
            F.col("produced") > 0,
            F.round(100.0 * (F.col("produced") - F.col("missing")) / F.col("produced"), 4),
        ).otherwise(100.0),
    )


def consumer_lag(
    committed: DataFrame, partitions: DataFrame, assigned: DataFrame | None = None
) -> DataFrame:
    """Per group, topic and partition: committed offset, offset range, lag.

    `committed`: group, topic, partition, committed_offset (NULL or negative when the
    group has committed nothing there). `partitions`: topic, partition, start_offset,
    end_offset (the log start offset and the high watermark). `assigned`: group, topic,
    partition that the group's live members hold now (optional).

    A group consumes a topic when it has committed on one of its partitions or a member
    is assigned one. Then every partition of that topic is listed: where the group never
    committed, its lag is the partition's whole range (end - start), what a consumer
    starting from the earliest offset has to read; kafka-consumer-groups shows such a
    partition with '-' as its offset. A commit on a partition the cluster no longer
    reports keeps its row, with unknown range and lag.
    """
    has_commit = F.col("committed_offset").isNotNull() & (F.col("committed_offset") >= 0)
    consumed = committed.select("group", "topic")
    if assigned is not None:
        consumed = consumed.unionByName(assigned.select("group", "topic"))
    every_partition = consumed.distinct().join(partitions, "topic")
    keys = ["group", "topic", "partition"]
    rows = every_partition.join(committed.select(*keys, "committed_offset"), keys, "full_outer")
    whole_range = F.greatest(F.col("end_offset") - F.col("start_offset"), F.lit(0))
    behind_commit = F.greatest(F.col("end_offset") - F.col("committed_offset"), F.lit(0))
    return rows.select(
        *keys,
        F.when(has_commit, F.col("committed_offset")).alias("committed_offset"),
        "start_offset",
        "end_offset",
        # greatest() skips NULLs: an unknown end offset has to stay an unknown lag.
        F.when(F.col("end_offset").isNull(), F.lit(None))
        .when(has_commit, behind_commit)
        .otherwise(whole_range)
        .cast("bigint")
        .alias("lag"),
    )


def lag_per_group(lag: DataFrame) -> DataFrame:
    """Per group: total lag, worst partition lag, partitions without a commit (their
    whole range is in the lag)."""
    return (
        lag.groupBy("group")
        .agg(
            F.coalesce(F.sum("lag"), F.lit(0)).cast("bigint").alias("total_lag"),
            F.max("lag").alias("max_partition_lag"),
            F.count(F.when(F.col("committed_offset").isNull(), True)).alias(
                "partitions_without_commit"
            ),
            F.count(F.lit(1)).alias("partitions"),
        )
        .orderBy("group")
    )
