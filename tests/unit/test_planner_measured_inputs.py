"""The planner takes measured traffic when it is fresh and falls back to sizes, saying so."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from planner.contracts.measured_load import MeasuredLoad, PartitionLoad
from planner.layout import parse_layout
from planner.measured_inputs import traffic_inputs, with_measured_load

pytestmark = pytest.mark.unit

NOW = datetime(2026, 1, 1, 1, 0, tzinfo=UTC)


def _layout() -> dict[str, object]:
    return {
        "brokers": [{"id": 1, "rack": "a"}, {"id": 2, "rack": "b"}],
        "partitions": [
            {"topic": "hot", "partition": 0, "replicas": [1, 2], "size_bytes": 10},
            {"topic": "new", "partition": 0, "replicas": [2, 1], "size_bytes": 10},
        ],
    }


def _load(window_end: str) -> MeasuredLoad:
    return MeasuredLoad(
        cluster="c",
        window_start="2026-01-01T00:00:00+00:00",
        window_end=window_end,
        window_s=1800,
        computed_at=window_end,
        partitions=(PartitionLoad("hot", 0, 5000.0, 9000.0),),
    )


def test_fresh_load_sets_the_traffic_of_every_partition() -> None:
    inputs = with_measured_load(_layout(), _load("2026-01-01T00:50:00+00:00"), NOW, 900)
    assert inputs.measured
    rates = {
        p["topic"]: (p["bytes_in_per_s"], p["bytes_out_per_s"]) for p in inputs.layout["partitions"]
    }
    assert rates == {"hot": (5000.0, 9000.0), "new": (0.0, 0.0)}
    assert "measured load of 1/2 partitions" in inputs.sentence
    cluster = parse_layout(inputs.layout)
    assert {p.topic: p.bytes_in_per_s for p in cluster.partitions} == {"hot": 5000.0, "new": 0.0}


@pytest.mark.parametrize(
    ("load", "reason"),
    [
        (None, "traffic goals use sizes: no measured load"),
        (_load("2026-01-01T00:10:00+00:00"), "measured load is 3000 s old (over 900 s)"),
    ],
)
def test_missing_or_stale_load_falls_back_to_sizes_and_says_so(
    load: MeasuredLoad | None, reason: str
) -> None:
    layout = _layout()
    inputs = with_measured_load(layout, load, NOW, 900)
    assert not inputs.measured
    assert reason in inputs.sentence
    assert inputs.layout == layout
    assert "bytes_in_per_s" not in inputs.layout["partitions"][0]


@pytest.mark.parametrize(
    ("raw", "cluster", "measured", "says"),
    [
        (None, "c", False, "traffic goals use sizes: no measured load"),
        (b"[]", "c", False, "traffic goals use sizes: measured load refused: "),
        (b'{"schema_version": 2}', "c", False, "measured load refused: load.schema_version"),
        ("fresh", "other", False, "measured load is of cluster 'c', not 'other'"),
        ("fresh", "c", True, "traffic goals use measured load of 1/2 partitions"),
    ],
)
def test_traffic_inputs_parse_the_znode_and_name_why_a_value_is_not_used(
    raw: bytes | str | None, cluster: str, measured: bool, says: str
) -> None:
    data = raw
    if raw == "fresh":
        data = json.dumps(_load("2026-01-01T00:50:00+00:00").to_json()).encode()
    assert not isinstance(data, str)
    inputs = traffic_inputs(_layout(), data, NOW, cluster, 900)
    assert inputs.measured is measured
    assert says in inputs.sentence
    if not measured:
        assert inputs.layout == _layout()
