"""The balance job's aggregation in Polars and in DuckDB, over the same flat Parquet tables:
the peers the analytics benchmark times beside Spark and pandas.

Both compute what `pandas_balance` in analytics_bench.py does: per window (5 minutes)
and broker the load (mean rates with replication, leader bytes in, latest disk,
partitions and leaders, mean CPU; the rack of the latest sample), per zone the sums (CPU
averaged), per resource the spread (mean, population standard deviation, max, total,
entities, hot ones above 1.2 x the mean), and per partition the leaders' topic rates
split by log growth. Each returns the number of broker-window rows, so a caller can
check the engines agree.
"""

from __future__ import annotations

from pathlib import Path

RESOURCES = (
    "bytes_in_per_s",
    "bytes_out_per_s",
    "leader_bytes_in_per_s",
    "disk_bytes",
    "partitions",
    "leaders",
    "cpu_percent",
)
HOT_THRESHOLD = 1.2


def polars_balance(folder: Path) -> int:
    import polars as pl

    def scan(table: str) -> pl.LazyFrame:
        return pl.scan_parquet(str(folder / table / "*.parquet")).with_columns(
            pl.col("timestamp").dt.truncate("5m").alias("window_start")
        )

    load = (
        scan("broker_metrics")
        .group_by("window_start", "broker_id")
        .agg(
            pl.col("rack").sort_by("timestamp").last(),
            (pl.col("bytes_in_per_s") + pl.col("replication_bytes_in_per_s").fill_null(0.0))
            .mean()
            .alias("bytes_in_per_s"),
            (pl.col("bytes_out_per_s") + pl.col("replication_bytes_out_per_s").fill_null(0.0))
            .mean()
            .alias("bytes_out_per_s"),
            pl.col("bytes_in_per_s").mean().alias("leader_bytes_in_per_s"),
            pl.coalesce("log_size_bytes", "host_log_dir_used_bytes")
            .sort_by("timestamp")
            .last()
            .cast(pl.Float64)
            .alias("disk_bytes"),
            pl.col("partition_count")
            .sort_by("timestamp")
            .last()
            .cast(pl.Float64)
            .alias("partitions"),
            pl.col("leader_count").sort_by("timestamp").last().cast(pl.Float64).alias("leaders"),
            pl.col("host_cpu_percent").mean().alias("cpu_percent"),
        )
        .collect()
    )
    zones = load.group_by("window_start", "rack").agg(
        *[(pl.col(r).mean() if r == "cpu_percent" else pl.col(r).sum()).alias(r) for r in RESOURCES]
    )
    for table, entity in ((load, "broker_id"), (zones, "rack")):
        value = pl.col("value")
        (
            table.unpivot(
                index=["window_start", entity],
                on=list(RESOURCES),
                variable_name="resource",
                value_name="value",
            )
            .drop_nulls("value")
            .group_by("window_start", "resource")
            .agg(
                value.count().alias("entities"),
                value.sum().alias("total"),
                value.mean().alias("mean"),
                value.std(ddof=0).alias("stddev"),
                value.max().alias("max"),
                (value > HOT_THRESHOLD * value.mean()).sum().alias("hot_count"),
            )
        )
    keys = ["window_start", "broker_id", "topic"]
    replicas = (
        scan("partition_metrics")
        .group_by(*keys, "partition")
        .agg(
            pl.col("leader").sort_by("timestamp").last(),
            (
                pl.col("size_bytes").sort_by("timestamp").last()
                - pl.col("size_bytes").sort_by("timestamp").first()
            ).alias("growth"),
        )
    )
    rates = (
        scan("topic_metrics")
        .group_by(*keys)
        .agg(
            pl.col("bytes_in_per_s").mean().alias("topic_in"),
            pl.col("bytes_out_per_s").mean().alias("topic_out"),
        )
    )
    growth = pl.col("growth").fill_null(0).clip(lower_bound=0).cast(pl.Float64)
    total = growth.sum().over(keys)
    share = pl.when(total > 0).then(growth / total).otherwise(1.0 / pl.len().over(keys))
    (
        replicas.filter(pl.col("leader"))
        .join(rates, on=keys, how="left")
        .with_columns(share.alias("share"))
        .group_by("window_start", "topic", "partition")
        .agg(
            (pl.col("topic_in").fill_null(0.0) * pl.col("share")).sum().alias("bytes_in_per_s"),
            (pl.col("topic_out").fill_null(0.0) * pl.col("share")).sum().alias("bytes_out_per_s"),
        )
        .collect()
    )
    return load.height


def duckdb_balance(folder: Path) -> int:
    import duckdb

    def source(table: str) -> str:
        return f"read_parquet('{folder / table}/*.parquet')"

    resources = ", ".join(RESOURCES)
    with duckdb.connect() as db:
        db.execute(f"""
            CREATE TEMP TABLE load AS
            SELECT time_bucket(INTERVAL 5 minutes, timestamp) AS window_start, broker_id,
                   arg_max(rack, timestamp) AS rack,
                   avg(bytes_in_per_s + coalesce(replication_bytes_in_per_s, 0)) AS bytes_in_per_s,
                   avg(bytes_out_per_s + coalesce(replication_bytes_out_per_s, 0)) AS bytes_out_per_s,
                   avg(bytes_in_per_s) AS leader_bytes_in_per_s,
                   arg_max(coalesce(log_size_bytes, host_log_dir_used_bytes), timestamp)::DOUBLE AS disk_bytes,
                   arg_max(partition_count, timestamp)::DOUBLE AS partitions,
                   arg_max(leader_count, timestamp)::DOUBLE AS leaders,
                   avg(host_cpu_percent) AS cpu_percent
            FROM {source("broker_metrics")} GROUP BY ALL
        """)  # fmt: skip
        sums = ", ".join(f"sum({r}) AS {r}" for r in RESOURCES if r != "cpu_percent")
        db.execute(f"""
            CREATE TEMP TABLE zones AS
            SELECT window_start, rack, {sums}, avg(cpu_percent) AS cpu_percent
            FROM load GROUP BY ALL
        """)  # fmt: skip
        for table, entity in (("load", "broker_id"), ("zones", "rack")):
            db.execute(f"""
                WITH long AS (
                    SELECT window_start, {entity}, resource, value::DOUBLE AS value,
                           avg(value::DOUBLE) OVER (PARTITION BY window_start, resource) AS window_mean
                    FROM (UNPIVOT {table} ON {resources} INTO NAME resource VALUE value)
                )
                SELECT window_start, resource, count(value) AS entities, sum(value) AS total,
                       avg(value) AS mean, stddev_pop(value) AS stddev, max(value) AS max,
                       count(*) FILTER (WHERE value > {HOT_THRESHOLD} * window_mean) AS hot_count
                FROM long GROUP BY ALL
            """).to_arrow_table()  # fmt: skip
        db.execute(f"""
            WITH replicas AS (
                SELECT time_bucket(INTERVAL 5 minutes, timestamp) AS window_start, broker_id,
                       topic, partition, arg_max(leader, timestamp) AS leader,
                       arg_max(size_bytes, timestamp) - arg_min(size_bytes, timestamp) AS growth
                FROM {source("partition_metrics")} GROUP BY ALL
            ), rates AS (
                SELECT time_bucket(INTERVAL 5 minutes, timestamp) AS window_start, broker_id,
                       topic, avg(bytes_in_per_s) AS topic_in, avg(bytes_out_per_s) AS topic_out
                FROM {source("topic_metrics")} GROUP BY ALL
            ), led AS (
                SELECT window_start, topic, partition, topic_in, topic_out,
                       greatest(coalesce(growth, 0), 0)::DOUBLE AS g,
                       sum(greatest(coalesce(growth, 0), 0)::DOUBLE) OVER w AS total,
                       count(*) OVER w AS n
                FROM replicas LEFT JOIN rates USING (window_start, broker_id, topic)
                WHERE leader
                WINDOW w AS (PARTITION BY window_start, broker_id, topic)
            )
            SELECT window_start, topic, partition,
                   sum(coalesce(topic_in, 0) * CASE WHEN total > 0 THEN g / total ELSE 1.0 / n END),
                   sum(coalesce(topic_out, 0) * CASE WHEN total > 0 THEN g / total ELSE 1.0 / n END)
            FROM led GROUP BY ALL
        """).to_arrow_table()  # fmt: skip
        row = db.execute("SELECT count(*) FROM load").fetchone()
        return int(row[0]) if row else 0
