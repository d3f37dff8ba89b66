"""The measured-load value (/kaas/<cluster>/load): round trip, freshness, refusals."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from planner.contracts.fields import ContractError
from planner.contracts.measured_load import (
    MeasuredLoad,
    PartitionLoad,
    parse_measured_load,
)
from planner.contracts.paths import ClusterPaths

pytestmark = pytest.mark.unit


def _load() -> MeasuredLoad:
    return MeasuredLoad(
        cluster="c1",
        window_start="2026-01-01T00:00:00+00:00",
        window_end="2026-01-01T00:05:00+00:00",
        window_s=300,
        computed_at="2026-01-01T00:05:10+00:00",
        partitions=(
            PartitionLoad("orders", 1, 200.0, 400.0, 2.0),
            PartitionLoad("orders", 0, 100.0, 50.0, None),
            PartitionLoad("logs", 0, 0.0, 0.0, 0.0),
        ),
    )


def test_round_trip_keeps_every_partition() -> None:
    document = _load().to_json()
    assert document["topics"]["orders"] == [[0, 100.0, 50.0, None], [1, 200.0, 400.0, 2.0]]
    parsed = parse_measured_load(json.dumps(document))
    assert parsed.by_partition() == _load().by_partition()
    assert parsed.window_s == 300 and parsed.cluster == "c1"


def test_freshness_is_the_age_of_the_spans_end() -> None:
    load = _load()
    now = datetime(2026, 1, 1, 0, 15, tzinfo=UTC)
    assert load.age_s(now) == 600.0
    assert load.is_fresh(now, max_age_s=600)
    assert not load.is_fresh(now, max_age_s=599)


def test_path_is_under_the_cluster_root() -> None:
    assert ClusterPaths("c1").measured_load == "/kaas/c1/load"


def _with(**changes: Any) -> str:
    document = _load().to_json()
    document.update(changes)
    return json.dumps(document)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("[]", "load must be a JSON object"),
        (_with(schema_version=2), "load.schema_version is 2, newer"),
        (_with(cluster=None), "load.cluster must be a string"),
        (_with(window_start="yesterday"), "load.window_start must be an ISO 8601 time"),
        (_with(window_end="2026-01-01T00:05:00"), "load.window_end must carry a time zone"),
        (_with(window_end="2025-12-31T00:00:00+00:00"), "window_end must be after window_start"),
        (_with(window_s=0), "load.window_s must be a positive integer"),
        (_with(topics=[]), "load.topics must map topic names"),
        (_with(topics={"t": [[0, 1.0, 2.0]]}), "rows must be [partition, bytes_in_per_s"),
        (_with(topics={"t": [[-1, 1.0, 2.0, None]]}), "partition must be a non-negative"),
        (_with(topics={"t": [[0, 1.0, 2.0, None], [0, 1.0, 2.0, None]]}), "twice"),
        (_with(topics={"t": [[0, -1.0, 2.0, None]]}), "load.topics.t[0].bytes_in_per_s"),
        (_with(topics={"t": [[0, 1.0, True, None]]}), "load.topics.t[0].bytes_out_per_s"),
        (_with(topics={"t": [[0, 1.0, 2.0, "x"]]}), "messages_in_per_s must be"),
    ],
)
def test_bad_values_are_refused_naming_the_field(raw: str, message: str) -> None:
    with pytest.raises(ContractError) as refused:
        parse_measured_load(raw)
    assert message in str(refused.value)
