"""LAYOUT.json: the plan's predicted per-broker load, measured-load write-back, plan comparison."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from analytics import layout, plan_compare
from analytics.testing import spark_session_fixture  # noqa: F401

pytestmark = pytest.mark.unit

RESOURCE_SCHEMA = ", ".join(f"{resource} double" for resource in layout.PREDICTED_RESOURCES)


def three_brokers() -> dict[str, Any]:
    return {
        "brokers": [{"id": 1, "rack": "zone-a"}, {"id": 2, "rack": "zone-b"}, {"id": 3}],
        "partitions": [
            {
                "topic": "t",
                "partition": 0,
                "replicas": [1, 2],
                "size_bytes": 100,
                "bytes_in_per_s": 10,
                "bytes_out_per_s": 20,
            },
            {"topic": "t", "partition": 1, "replicas": [2, 1], "size_bytes": 50},
            {"topic": "u", "partition": 0, "replicas": [1], "extra": "kept"},
        ],
    }


def test_predicted_load_puts_produce_and_consume_on_the_leader_and_copies_on_followers() -> None:
    predicted = {row["broker_id"]: row for row in layout.predicted_broker_load(three_brokers())}
    assert predicted[1] == {
        "broker_id": 1,
        "rack": "zone-a",
        "bytes_in_per_s": 10.0,
        "bytes_out_per_s": 20.0 + 10.0,  # consumers plus one follower's copy
        "leader_bytes_in_per_s": 10.0,
        "disk_bytes": 100.0 + 50.0 + 1.0,  # an unsized partition counts as 1 byte
        "partitions": 3.0,
        "leaders": 2.0,
    }
    assert predicted[2]["bytes_in_per_s"] == 10.0  # replication fetch of t-0
    assert predicted[2]["leader_bytes_in_per_s"] == 0.0
    assert predicted[3] == {
        "broker_id": 3,
        "rack": None,
        **dict.fromkeys(layout.PREDICTED_RESOURCES, 0.0),
    }


def test_reassignment_changes_the_prediction() -> None:
    moved = layout.apply_reassignment(
        three_brokers(),
        {"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [3, 2]}]},
    )
    predicted = {row["broker_id"]: row for row in layout.predicted_broker_load(moved)}
    assert predicted[3]["leaders"] == 1.0
    assert predicted[3]["disk_bytes"] == 100.0
    assert predicted[1]["leaders"] == 1.0


@pytest.mark.parametrize(
    ("reassignment", "message"),
    [
        (
            {"partitions": [{"topic": "t", "partition": 0, "replicas": [9]}]},
            "replica 9 is not a broker of the layout",
        ),
        (
            {"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 1]}]},
            "name a broker twice",
        ),
        (
            {"partitions": [{"topic": "zz", "partition": 0, "replicas": [1]}]},
            "moves zz-0, which the layout does not have",
        ),
        (
            {"partitions": [{"topic": "t", "partition": -1, "replicas": [1]}]},
            "'partition' of t must be an integer >= 0",
        ),
        ({"version": 1}, "expected an object with a 'partitions' list"),
    ],
)
def test_bad_reassignment_names_the_offending_entry(
    reassignment: dict[str, Any], message: str
) -> None:
    with pytest.raises(
        layout.LayoutFileError, match=message.replace("(", r"\(").replace(")", r"\)")
    ):
        layout.apply_reassignment(three_brokers(), reassignment)


def test_bad_layout_is_refused_with_its_entry_named(tmp_path: Path) -> None:
    with pytest.raises(layout.LayoutFileError, match=r"brokers\[1\]: broker id 1 appears twice"):
        layout.predicted_broker_load({"brokers": [{"id": 1}, {"id": 1}], "partitions": []})
    with pytest.raises(
        layout.LayoutFileError, match=r"partitions\[0\]: 'size_bytes' must be a number >= 0"
    ):
        layout.predicted_broker_load(
            {
                "brokers": [{"id": 1}],
                "partitions": [{"topic": "t", "partition": 0, "replicas": [1], "size_bytes": -1}],
            }
        )
    broken = tmp_path / "LAYOUT.json"
    broken.write_text("{nope")
    with pytest.raises(layout.LayoutFileError, match="is not valid JSON"):
        layout.load_json_file(broken, "layout")
    with pytest.raises(layout.LayoutFileError, match="does not exist"):
        layout.load_json_file(tmp_path / "absent.json", "layout")


def test_measured_load_is_written_into_the_layout_keeping_other_fields() -> None:
    measured = [
        layout.MeasuredPartitionLoad("t", 0, 4096, 12.3456, 7.0),
        layout.MeasuredPartitionLoad("u", 0, None, 1.0, 2.0),
        layout.MeasuredPartitionLoad("gone", 0, 1, 1.0, 1.0),  # no longer in the layout: ignored
    ]
    updated, measured_count, unmeasured_count = layout.with_measured_load(three_brokers(), measured)
    by_key = {(p["topic"], p["partition"]): p for p in updated["partitions"]}
    assert by_key[("t", 0)] == {
        "topic": "t",
        "partition": 0,
        "replicas": [1, 2],
        "size_bytes": 4096,
        "bytes_in_per_s": 12.346,
        "bytes_out_per_s": 7.0,
    }
    assert by_key[("u", 0)]["extra"] == "kept"
    assert "size_bytes" not in by_key[("u", 0)]  # unknown size: left to the planner's default
    assert by_key[("t", 1)] == three_brokers()["partitions"][1]
    assert (measured_count, unmeasured_count) == (2, 1)
    json.dumps(updated)  # still plain JSON


def test_comparison_with_plan_reports_share_gaps_and_distance(spark: SparkSession) -> None:
    columns = "broker_id int, " + RESOURCE_SCHEMA
    measured = spark.createDataFrame(
        [(1, 30.0, 0.0, 0.0, 0.0, 0.0, 0.0), (2, 10.0, 0.0, 0.0, 0.0, 0.0, 0.0)], columns
    )
    predicted = spark.createDataFrame(
        [
            (1, 20.0, 0.0, 0.0, 0.0, 0.0, 0.0),
            (2, 20.0, 0.0, 0.0, 0.0, 0.0, 0.0),
            (3, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0),
        ],
        columns,
    )
    comparison = plan_compare.compare_with_plan(measured, predicted)
    assertDataFrameEqual(
        comparison.where(F.col("resource") == "bytes_in_per_s").select(
            "broker_id", "measured", "predicted", "measured_share", "predicted_share", "share_gap"
        ),
        [
            (1, 30.0, 20.0, 0.75, 0.5, 0.25),
            (2, 10.0, 20.0, 0.25, 0.5, -0.25),
            (3, 0.0, 0.0, 0.0, 0.0, 0.0),
        ],
    )
    distance = plan_compare.plan_distance(comparison).where(F.col("resource") == "bytes_in_per_s")
    assertDataFrameEqual(distance.select("total_variation_distance", "largest_gap"), [(0.25, 0.25)])
