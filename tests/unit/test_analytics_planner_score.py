"""Analytics scores measured load with the planner's own definition (planner.score)."""

from __future__ import annotations

import pandas as pd
import pytest

from analytics.planner_score import score_measured_load, score_windows
from planner.score import balancedness, combine, goal_weights, score_measured

pytestmark = pytest.mark.unit


def loads(**columns: list[float]) -> pd.DataFrame:
    base = {
        "broker_id": [0, 1, 2],
        "rack": ["a", "b", "c"],
        "partitions": [10.0, 10.0, 10.0],
        "leaders": [4.0, 3.0, 3.0],
        "disk_bytes": [100.0, 100.0, 100.0],
        "leader_bytes_in_per_s": [50.0, 50.0, 50.0],
        "bytes_out_per_s": [80.0, 80.0, 80.0],
        "bytes_in_per_s": [1.0, 1.0, 1.0],
    }
    base.update(columns)
    return pd.DataFrame(base)


def test_an_even_load_scores_100() -> None:
    outcome = score_measured_load(loads())
    assert outcome.unavailable_reason is None
    assert outcome.score == 100.0
    assert set(outcome.parts["goals"]) == {
        "replicas_per_broker",
        "leaders_per_broker",
        "disk_bytes",
        "leader_bytes",
    }


def test_a_hot_broker_lowers_the_score_as_the_planner_defines_it() -> None:
    frame = loads(disk_bytes=[300.0, 100.0, 100.0])
    outcome = score_measured_load(frame)
    # Disk: mean 166.7, peak 300: balancedness 0.556; the other goals are perfect.
    terms = {
        "replicas_per_broker": 1.0,
        "leaders_per_broker": 1.0,
        "disk_bytes": 500 / 900,
        "leader_bytes": 1.0,
    }
    assert balancedness([300.0, 100.0, 100.0]) == pytest.approx(500 / 900)
    assert outcome.score == pytest.approx(round(combine(terms), 2))
    assert outcome.score == pytest.approx(
        score_measured({k: list(frame[k]) for k in frame if k not in ("rack",)}).total, abs=0.01
    )
    # Priority weights: replicas > leaders > disk > leader bytes.
    weights = goal_weights(list(terms))
    assert weights["replicas_per_broker"] > weights["disk_bytes"] > weights["leader_bytes"]


def test_a_measurement_missing_on_one_broker_leaves_its_goal_out() -> None:
    frame = loads(disk_bytes=[300.0, None, 100.0])  # type: ignore[list-item]
    outcome = score_measured_load(frame)
    assert outcome.score == 100.0
    assert "disk_bytes" not in outcome.parts["goals"]
    assert outcome.parts["missing_measurements"] == ["disk_bytes"]


def test_no_measurement_at_all_is_unavailable_with_a_reason() -> None:
    frame = pd.DataFrame({"broker_id": [0], "rack": ["a"]})
    outcome = score_measured_load(frame)
    assert outcome.score is None and "no complete measurement" in (outcome.unavailable_reason or "")


def test_scoring_every_window_at_once_matches_scoring_each_window() -> None:
    """score_windows (the job's fast path) gives what score_measured_load gives per group,
    in window order, including a window with a missing measurement."""
    first = loads(leaders=[9.0, 1.0, 2.0]).assign(window_start=pd.Timestamp("2026-01-01 00:05Z"))
    second = loads(disk_bytes=[100.0, float("nan"), 300.0]).assign(
        window_start=pd.Timestamp("2026-01-01 00:00Z")
    )
    third = loads().assign(window_start=pd.Timestamp("2026-01-01 00:10Z"))
    frame = pd.concat([first, third, second], ignore_index=True)
    frame["window_end"] = frame["window_start"] + pd.Timedelta("5min")

    scored = score_windows(frame, ("window_start", "window_end"))

    expected = [
        ((start, start + pd.Timedelta("5min")), score_measured_load(window))
        for start, window in ((w["window_start"].iloc[0], w) for w in (second, first, third))
    ]
    assert scored == expected
    assert scored[0][1].parts["missing_measurements"] == ["disk_bytes"]
    assert scored[1][1].score is not None and scored[1][1].score < 100.0
