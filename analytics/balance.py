"""Balance transforms: measured load per window, per broker and per zone, and its spread.

Every function here takes DataFrames and returns a DataFrame; none reads or writes.
Input tables are the flat ones `analytics.metrics.parse_metric_records` makes (or the
same tables read back from Parquet).
"""

from __future__ import annotations

from datetime import datetime

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

# The resources the balance job measures per broker, in report order.
BYTES_IN = "bytes_in_per_s"
BYTES_OUT = "bytes_out_per_s"
LEADER_BYTES_IN = "leader_bytes_in_per_s"
DISK = "disk_bytes"
PARTITIONS = "partitions"
LEADERS = "leaders"
CPU = "cpu_percent"
RESOURCES: tuple[str, ...] = (BYTES_IN, BYTES_OUT, LEADER_BYTES_IN, DISK, PARTITIONS, LEADERS, CPU)

# A zone's load is the sum of its brokers' loads, except CPU, a percentage per host,
# which is averaged.
ZONE_MEAN_RESOURCES = frozenset({CPU})

WINDOW_COLUMNS = ("cluster", "window_start", "window_end")
DEFAULT_WINDOW = "5 minutes"
DEFAULT_HOT_THRESHOLD = 1.2


_UNIT_SECONDS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}


def window_seconds(window_duration: str) -> int:
    """Seconds in a window length written as "N seconds|minutes|hours|days" (or "30s")."""
    text = window_duration.strip().lower()
    number, _, unit = text.partition(" ")
    if not unit and text[:-1].isdigit() and text[-1:] in "smhd":
        number, unit = text[:-1], {"s": "second", "m": "minute", "h": "hour", "d": "day"}[text[-1]]
    seconds = _UNIT_SECONDS.get(unit.strip().rstrip("s"))
    if not number.isdigit() or seconds is None or int(number) <= 0:
        raise ValueError(
            f"window {window_duration!r} is not a length such as '5 minutes', '30 seconds' or '1 hour'"
        )
    return int(number) * seconds


_WINDOW_KEYS = ("cluster", "_window")


def _windowed(frame: DataFrame, window_duration: str) -> DataFrame:
    """Adds `_window`, the index of the tumbling window (aligned to the epoch) of each row.

    Aggregations group by this integer and turn it into start and end timestamps only
    on their (small) result: grouping 10M rows by two timestamps instead costs about
    three times as much on this 2-core box, and F.window() more still.
    """
    length_us = window_seconds(window_duration) * 1_000_000
    return frame.where(F.col("timestamp").isNotNull()).withColumn(
        "_window", F.floor(F.unix_micros("timestamp") / F.lit(length_us))
    )


def _with_window_bounds(frame: DataFrame, window_duration: str) -> DataFrame:
    """Replaces `_window` with window_start and window_end."""
    length = window_seconds(window_duration)
    return frame.withColumns(
        {
            "window_start": F.timestamp_seconds(F.col("_window") * length),
            "window_end": F.timestamp_seconds((F.col("_window") + 1) * length),
        }
    ).drop("_window")


def _latest(column: str) -> Column:
    """The value at the latest sample in the group (gauges such as counts and sizes)."""
    return F.max_by(F.col(column), F.col("timestamp"))


def broker_window_load(
    broker_metrics: DataFrame, window_duration: str = DEFAULT_WINDOW
) -> DataFrame:
    """Per window and broker: mean rates and CPU, latest disk bytes, partitions, leaders.

    bytes in and out include replication traffic (what the network carries); leader
    bytes in is what clients produce to the partitions this broker leads. Disk bytes
    are the broker's log size, or the log dir's used bytes when the log size is unknown.
    """
    total_in = F.col("bytes_in_per_s") + F.coalesce(F.col("replication_bytes_in_per_s"), F.lit(0.0))
    total_out = F.col("bytes_out_per_s") + F.coalesce(
        F.col("replication_bytes_out_per_s"), F.lit(0.0)
    )
    disk = F.coalesce(F.col("log_size_bytes"), F.col("host_log_dir_used_bytes"))
    per_rack = (
        _windowed(broker_metrics, window_duration)
        .withColumns({"_in": total_in, "_out": total_out, "_disk": disk})
        # rack is a grouping key, not an aggregate: a string in an aggregation buffer would
        # turn Spark's hash aggregation into a sort-based one, several times slower.
        .groupBy(*_WINDOW_KEYS, "broker_id", "rack")
        .agg(
            F.max("timestamp").alias("_last_seen"),
            F.count(F.lit(1)).alias("samples"),
            F.avg("_in").alias(BYTES_IN),
            F.avg("_out").alias(BYTES_OUT),
            F.avg("bytes_in_per_s").alias(LEADER_BYTES_IN),
            _latest("_disk").cast("double").alias(DISK),
            _latest("partition_count").cast("double").alias(PARTITIONS),
            _latest("leader_count").cast("double").alias(LEADERS),
            F.avg("host_cpu_percent").alias(CPU),
        )
    )
    # A broker whose rack changed inside a window (a replaced VM) is shown with its latest
    # rack and the values of that rack's samples.
    latest_rack_first = Window.partitionBy(*_WINDOW_KEYS, "broker_id").orderBy(F.desc("_last_seen"))
    per_broker = Window.partitionBy(*_WINDOW_KEYS, "broker_id")
    latest_rack = per_rack.withColumns(
        {
            "_rank": F.row_number().over(latest_rack_first),
            # Every sample counts, whichever rack it reported.
            "samples": F.sum("samples").over(per_broker),
        }
    ).where(F.col("_rank") == 1)
    return _with_window_bounds(latest_rack, window_duration).select(
        *WINDOW_COLUMNS, "broker_id", "rack", "samples", *RESOURCES
    )


def zone_window_load(broker_load: DataFrame) -> DataFrame:
    """Per window and zone (rack): summed broker loads (CPU averaged), brokers counted.

    Brokers without a rack form the zone "unknown", so they still count.
    """
    zone = F.coalesce(F.col("rack"), F.lit("unknown")).alias("zone")
    aggregates = [
        (F.avg(resource) if resource in ZONE_MEAN_RESOURCES else F.sum(resource)).alias(resource)
        for resource in RESOURCES
    ]
    return (
        broker_load.groupBy(*WINDOW_COLUMNS, zone)
        # One row per window and broker comes in, so counting rows counts brokers (a
        # distinct count would add an aggregation stage).
        .agg(F.count(F.lit(1)).alias("brokers"), *aggregates)
        .select(*WINDOW_COLUMNS, "zone", "brokers", *RESOURCES)
    )


def resource_balance(
    load: DataFrame, entity: str, hot_threshold: float = DEFAULT_HOT_THRESHOLD
) -> DataFrame:
    """Per window and resource: mean, coefficient of variation, max/mean, hot entities.

    `entity` is "broker_id" for broker load or "zone" for zone load. The coefficient of
    variation is the population standard deviation over the mean. An entity is hot when
    its value exceeds `hot_threshold` times the mean. A resource whose mean is 0 (no
    load anywhere) is perfectly even: CV 0, max/mean 1, nothing hot. A missing value (a
    failed read) is left out; a resource with no value in a window gets no row.
    """
    if hot_threshold <= 1.0:
        raise ValueError(
            f"hot_threshold must be above 1.0 (a multiple of the mean); got {hot_threshold}"
        )
    # One aggregation over the wide table (one row per window and entity): every
    # resource's statistics side by side, and each entity's values kept in a list so the
    # hot ones are picked against the window's own mean with no second pass or join.
    # Unpivoting first would shuffle seven rows per entity instead of one.
    values = {resource: F.col(resource).cast("double") for resource in RESOURCES}
    aggregates = [
        F.collect_list(
            F.struct(
                F.col(entity).alias("entity"),
                *[value.alias(resource) for resource, value in values.items()],
            )
        ).alias("_values")
    ]
    for index, value in enumerate(values.values()):
        aggregates += [
            F.count(value).alias(f"_entities{index}"),
            F.sum(value).alias(f"_total{index}"),
            F.avg(value).alias(f"_mean{index}"),
            F.stddev_pop(value).alias(f"_stddev{index}"),
            F.min(value).alias(f"_min{index}"),
            F.max(value).alias(f"_max{index}"),
        ]
    stats = load.groupBy(*WINDOW_COLUMNS).agg(*aggregates)

    def per_resource(index: int, resource: str) -> Column:
        mean = F.col(f"_mean{index}")
        threshold = F.lit(hot_threshold) * mean
        hot_entities = F.transform(
            F.filter("_values", lambda item: item[resource] > threshold),
            lambda item: item["entity"],
        )
        # Sorted as ids (2 before 10), then shown as text, so brokers and zones share a type.
        hot = F.when(mean > 0, F.sort_array(hot_entities).cast("array<string>")).otherwise(
            F.array().cast("array<string>")
        )
        return F.struct(
            F.lit(resource).alias("resource"),
            F.col(f"_entities{index}").alias("entities"),
            F.col(f"_total{index}").alias("total"),
            mean.alias("mean"),
            F.col(f"_stddev{index}").alias("stddev"),
            F.col(f"_min{index}").alias("min"),
            F.col(f"_max{index}").alias("max"),
            F.when(mean > 0, F.col(f"_stddev{index}") / mean).otherwise(0.0).alias("cv"),
            F.when(mean > 0, F.col(f"_max{index}") / mean).otherwise(1.0).alias("max_over_mean"),
            hot.alias("hot"),
            F.size(hot).alias("hot_count"),
        )

    per_window = stats.select(
        *WINDOW_COLUMNS,
        F.inline(F.array(*[per_resource(index, name) for index, name in enumerate(RESOURCES)])),
    )
    return per_window.where(F.col("entities") > 0)


def replica_window_state(
    partition_metrics: DataFrame, window_duration: str = DEFAULT_WINDOW
) -> DataFrame:
    """Per window and replica (broker, topic, partition): leader at the end of the window,
    latest size, and how much the log grew in the window."""
    replicas = (
        _windowed(partition_metrics, window_duration)
        .groupBy(*_WINDOW_KEYS, "broker_id", "topic", "partition")
        .agg(
            _latest("leader").alias("leader"),
            _latest("size_bytes").alias("size_bytes"),
            (F.max_by("size_bytes", "timestamp") - F.min_by("size_bytes", "timestamp")).alias(
                "growth_bytes"
            ),
        )
    )
    return _with_window_bounds(replicas, window_duration).select(
        *WINDOW_COLUMNS, "broker_id", "topic", "partition", "leader", "size_bytes", "growth_bytes"
    )


def topic_window_rates(
    topic_metrics: DataFrame, window_duration: str = DEFAULT_WINDOW
) -> DataFrame:
    """Per window, broker and topic: mean bytes in and out per second."""
    rates = (
        _windowed(topic_metrics, window_duration)
        .groupBy(*_WINDOW_KEYS, "broker_id", "topic")
        .agg(
            F.avg("bytes_in_per_s").alias("topic_bytes_in_per_s"),
            F.avg("bytes_out_per_s").alias("topic_bytes_out_per_s"),
        )
    )
    return _with_window_bounds(rates, window_duration).select(
        *WINDOW_COLUMNS, "broker_id", "topic", "topic_bytes_in_per_s", "topic_bytes_out_per_s"
    )


def partition_window_load(
    partition_metrics: DataFrame, topic_metrics: DataFrame, window_duration: str = DEFAULT_WINDOW
) -> DataFrame:
    """Per window and partition: measured size and estimated bytes in and out per second.

    Kafka reports byte rates per broker and topic, not per partition. A broker's topic
    rate is split over the partitions of that topic it leads, in proportion to how much
    each one's log grew in the window (equal shares when none grew). Consumers read
    from leaders, so bytes out are split the same way. Followers carry no client load.
    """
    return partition_load_from(
        replica_window_state(partition_metrics, window_duration),
        topic_window_rates(topic_metrics, window_duration),
    )


def partition_load_from(replicas: DataFrame, topic_rates: DataFrame) -> DataFrame:
    """`partition_window_load` from its two per-window inputs (which the job stages, so
    the large metric tables are scanned once each)."""
    led_by_broker = Window.partitionBy(*WINDOW_COLUMNS, "broker_id", "topic")
    growth = F.greatest(F.coalesce(F.col("growth_bytes"), F.lit(0)), F.lit(0)).cast("double")
    total_growth = F.sum(growth).over(led_by_broker)
    share = F.when(total_growth > 0, growth / total_growth).otherwise(
        1.0 / F.count(F.lit(1)).over(led_by_broker)
    )
    leaders = (
        replicas.where(F.col("leader"))
        .join(topic_rates, [*WINDOW_COLUMNS, "broker_id", "topic"], "left")
        .withColumn("_share", share)
        .select(
            *WINDOW_COLUMNS,
            "topic",
            "partition",
            "broker_id",
            (F.coalesce(F.col("topic_bytes_in_per_s"), F.lit(0.0)) * F.col("_share")).alias(
                BYTES_IN
            ),
            (F.coalesce(F.col("topic_bytes_out_per_s"), F.lit(0.0)) * F.col("_share")).alias(
                BYTES_OUT
            ),
        )
    )
    # Sizes come from every replica, so a partition whose leader went unreported keeps its size.
    sizes = replicas.groupBy(*WINDOW_COLUMNS, "topic", "partition").agg(
        F.max("size_bytes").alias("size_bytes")
    )
    # A leadership change inside a window leaves two leaders; both carried traffic.
    led = leaders.groupBy(*WINDOW_COLUMNS, "topic", "partition").agg(
        F.max_by("broker_id", BYTES_IN).alias("leader_broker_id"),
        F.sum(BYTES_IN).alias(BYTES_IN),
        F.sum(BYTES_OUT).alias(BYTES_OUT),
    )
    return sizes.join(led, [*WINDOW_COLUMNS, "topic", "partition"], "left").select(
        *WINDOW_COLUMNS,
        "topic",
        "partition",
        "leader_broker_id",
        "size_bytes",
        F.coalesce(F.col(BYTES_IN), F.lit(0.0)).alias(BYTES_IN),
        F.coalesce(F.col(BYTES_OUT), F.lit(0.0)).alias(BYTES_OUT),
    )


def partition_measured_load(partition_load: DataFrame) -> DataFrame:
    """One row per partition over the whole run: mean rates, latest size.

    This is what goes into LAYOUT.json for the planner.
    """
    return partition_load.groupBy("cluster", "topic", "partition").agg(
        F.max_by("size_bytes", "window_start").alias("size_bytes"),
        F.avg(BYTES_IN).alias(BYTES_IN),
        F.avg(BYTES_OUT).alias(BYTES_OUT),
        F.count(F.lit(1)).alias("windows"),
    )


def latest_window(frame: DataFrame) -> DataFrame:
    """Rows of each cluster's latest window."""
    latest = frame.groupBy("cluster").agg(F.max("window_start").alias("_latest"))
    return (
        frame.join(latest, "cluster")
        .where(F.col("window_start") == F.col("_latest"))
        .drop("_latest")
    )


def split_before_after(broker_load: DataFrame, plan_applied_at: datetime | None) -> DataFrame:
    """Per broker: mean load before and after a plan, as columns `before_<resource>`, `after_<resource>`.

    With `plan_applied_at` (timezone-aware), "before" is every window that ended by
    then and "after" every window that started after it. Without it, "before" is the
    first window and "after" the latest. Rows come in no particular order (a global
    sort would cost a Spark job of its own; the chart sorts its few rows).
    """
    if plan_applied_at is None:
        # A window over the cluster, not a join with an aggregate: one Spark job, not two.
        per_cluster = Window.partitionBy("cluster")
        first = F.min("window_start").over(per_cluster)
        last = F.max("window_start").over(per_cluster)
        phased = broker_load.withColumn(
            "phase",
            F.when(F.col("window_start") == last, "after").when(
                F.col("window_start") == first, "before"
            ),
        )
    else:
        if plan_applied_at.tzinfo is None:
            raise ValueError("plan_applied_at needs a timezone (e.g. 2026-01-01T12:00:00+00:00)")
        applied = F.lit(plan_applied_at)
        phased = broker_load.withColumn(
            "phase",
            F.when(F.col("window_end") <= applied, "before").when(
                F.col("window_start") >= applied, "after"
            ),
        )
    return (
        phased.where(F.col("phase").isNotNull())
        .groupBy("cluster", "broker_id")
        .pivot("phase", ["before", "after"])
        .agg(*[F.avg(resource).alias(resource) for resource in RESOURCES])
    )
