"""How the measured load is spread over brokers compared with what the plan predicts.

Absolute values differ (the layout's rates are estimates, sizes grow), so the comparison
is between shares: each broker's part of the cluster's total, measured against
predicted. The summary per resource is the total variation distance between the two
distributions, half the sum of absolute share differences: 0 when the brokers carry
exactly the shares the plan predicts, 1 when the load sits on brokers the plan gives
none of it.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from analytics.layout import PREDICTED_RESOURCES


def _shares(load: DataFrame, value_name: str) -> DataFrame:
    long = load.unpivot(
        ["broker_id"],
        [F.col(resource).cast("double").alias(resource) for resource in PREDICTED_RESOURCES],
        "resource",
        value_name,
    )
    total = F.sum(value_name).over(Window.partitionBy("resource"))
    return long.withColumn(
        f"{value_name}_share",
        F.when(total > 0, F.coalesce(F.col(value_name), F.lit(0.0)) / total).otherwise(0.0),
    )


def compare_with_plan(measured: DataFrame, predicted: DataFrame) -> DataFrame:
    """Per broker and resource: measured and predicted value and share, and their gap.

    `measured` has one row per broker (e.g. the latest window of the broker load);
    `predicted` has one row per broker of the layout. A broker present on one side only
    counts as 0 on the other.
    """
    measured_long = _shares(measured.select("broker_id", *PREDICTED_RESOURCES), "measured")
    predicted_long = _shares(predicted.select("broker_id", *PREDICTED_RESOURCES), "predicted")
    return (
        measured_long.join(predicted_long, ["broker_id", "resource"], "full_outer")
        .select(
            "resource",
            "broker_id",
            F.coalesce(F.col("measured"), F.lit(0.0)).alias("measured"),
            F.coalesce(F.col("predicted"), F.lit(0.0)).alias("predicted"),
            F.coalesce(F.col("measured_share"), F.lit(0.0)).alias("measured_share"),
            F.coalesce(F.col("predicted_share"), F.lit(0.0)).alias("predicted_share"),
        )
        .withColumn("share_gap", F.col("measured_share") - F.col("predicted_share"))
    )


def plan_distance(comparison: DataFrame) -> DataFrame:
    """Per resource: total variation distance and the broker with the largest gap."""
    return (
        comparison.groupBy("resource")
        .agg(
            (F.sum(F.abs("share_gap")) / 2).alias("total_variation_distance"),
            F.max_by("broker_id", F.abs("share_gap")).alias("largest_gap_broker_id"),
            F.max(F.abs("share_gap")).alias("largest_gap"),
        )
        .orderBy("resource")
    )
