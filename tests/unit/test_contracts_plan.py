"""The plan store's records and the score: each round-trips, each bad field is refused with
a message naming it."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from planner.contracts.fields import ContractError
from planner.contracts.plan_records import (
    PlanMeta,
    PlannedPartition,
    PlannedStep,
    PlanRecordError,
    PlanScore,
    Progress,
    ProgressState,
    TopicAssignment,
    parse_plan_meta,
    parse_plan_score,
    parse_progress,
    parse_topic_assignment,
)
from planner.contracts.plan_status import PlanMovement

pytestmark = pytest.mark.unit

META = PlanMeta("c1", 4, 2, 1700.5, {"orders": 1}, {"draining": [3]}, {"replicas_moved": 2})
PARTITION = PlannedPartition(
    "orders", 0, (0, 1, 2), (0, 1, 3), (PlannedStep(0, (0, 1, 2, 3)), PlannedStep(1, (0, 1, 3)))
)
TOPIC = TopicAssignment("c1", 4, "orders", (PARTITION,))
PROGRESS = Progress(4, 1, ProgressState.EXECUTING, "batch 2", 10.0, 7, 1, 9.0, True)
MOVING = replace(PROGRESS, movement=PlanMovement(100, 400, 12.5, 24.0, 3, 6))
SCORE = PlanScore("c1", 91.5, "a", "b", 3, {"leaders": {"cv": 0.1}}, "now")


def changed(raw: bytes, **changes: Any) -> bytes:
    value = json.loads(raw)
    for key, item in changes.items():
        if item is KeyError:
            del value[key]
        else:
            value[key] = item
    return json.dumps(value).encode()


def test_records_round_trip() -> None:
    assert parse_plan_meta(META.to_bytes(), "meta") == META
    assert parse_topic_assignment(TOPIC.to_bytes(), "topic") == TOPIC
    assert parse_progress(PROGRESS.to_bytes(now=0.0), "progress", version=7) == PROGRESS
    assert parse_progress(MOVING.to_bytes(now=0.0), "progress", version=7) == MOVING
    assert parse_plan_score(json.dumps(SCORE.to_json())) == SCORE
    assert parse_plan_score(json.dumps({**SCORE.to_json(), "score": None})).score is None


def test_progress_without_a_time_takes_the_writers_clock() -> None:
    unstamped = Progress(4, 0, ProgressState.PENDING)
    assert parse_progress(unstamped.to_bytes(now=42.0), "progress").updated_at == 42.0


@pytest.mark.parametrize(
    ("raw", "names"),
    [
        (b"{", "meta: not JSON"),
        (b"[]", "meta: not a JSON object"),
        (changed(META.to_bytes(), kind="kaas.plan.topic"), "meta: kind 'kaas.plan.topic'"),
        (changed(META.to_bytes(), schema_version=2), "meta: schema_version 2 is not supported"),
        (changed(META.to_bytes(), cluster=None), "meta: 'cluster'"),
        (changed(META.to_bytes(), plan_id=-1), "meta: 'plan_id'"),
        (changed(META.to_bytes(), batch_count="2"), "meta: batch_count '2' is not a count"),
        (changed(META.to_bytes(), topics={"orders": -1}), "meta: 'topics'"),
        (changed(META.to_bytes(), inputs=[]), "meta: 'inputs' must be an object"),
        (changed(META.to_bytes(), summary=KeyError), "meta: 'summary' must be an object"),
        (changed(META.to_bytes(), created_at="today"), "meta: 'created_at' must be a time"),
    ],
)
def test_meta_refuses_each_bad_field_by_name(raw: bytes, names: str) -> None:
    with pytest.raises(PlanRecordError) as refused:
        parse_plan_meta(raw, "meta")
    assert names in str(refused.value)


def topic_with(**entry: Any) -> bytes:
    value = json.loads(TOPIC.to_bytes())
    value["partitions"][0].update(entry)
    return json.dumps(value).encode()


@pytest.mark.parametrize(
    ("raw", "names"),
    [
        (changed(TOPIC.to_bytes(), topic=7), "t: names cluster 'c1' topic 7"),
        (changed(TOPIC.to_bytes(), plan_id=None), "t: 'plan_id'"),
        (changed(TOPIC.to_bytes(), partitions={}), "t: 'partitions' must be a list"),
        (topic_with(partition=-1), "t partitions[0]: needs a non-negative integer 'partition'"),
        (topic_with(source=[1, 1]), "t partitions[0] source: replicas [1, 1]"),
        (topic_with(target=[]), "t partitions[0] target: replicas []"),
        (topic_with(steps=[]), "t partitions[0]: 'steps' must be a non-empty list"),
        (topic_with(steps=[{"replicas": [0]}]), "t partitions[0]: a step needs a batch number"),
        (
            topic_with(steps=[{"batch": 0, "replicas": [0, 1, 2]}]),
            "t partitions[0]: the last step does not reach the target",
        ),
    ],
)
def test_topic_assignment_refuses_each_bad_field_by_name(raw: bytes, names: str) -> None:
    with pytest.raises(PlanRecordError) as refused:
        parse_topic_assignment(raw, "t")
    assert names in str(refused.value)


@pytest.mark.parametrize(
    ("changes", "names"),
    [
        ({"state": "paused"}, "p: state 'paused' is not one of"),
        ({"completed_batches": -1}, "p: completed_batches -1 is not a count"),
        ({"started_batch": "x"}, "p: started_batch 'x' is not a batch number"),
        ({"plan_id": KeyError}, "p: 'plan_id'"),
        ({"updated_at": "now"}, "p: 'updated_at' must be a time"),
        ({"batch_started_at": True}, "p: 'batch_started_at' must be a time"),
        ({"controller_moved": "yes"}, "p: 'controller_moved' must be true or false"),
        ({"movement": {"bytes_moved": 1}}, "p: movement.bytes_total is missing"),
        ({"kind": "kaas.plan.meta"}, "p: kind 'kaas.plan.meta'"),
    ],
)
def test_progress_refuses_each_bad_field_by_name(changes: dict[str, Any], names: str) -> None:
    with pytest.raises(PlanRecordError) as refused:
        parse_progress(changed(PROGRESS.to_bytes(now=0.0), **changes), "p")
    assert names in str(refused.value)


@pytest.mark.parametrize(
    ("changes", "names"),
    [
        ({"schema_version": 2}, "score.schema_version is 2"),
        ({"cluster": KeyError}, "score.cluster must be a string"),
        ({"computed_at": 5}, "score.computed_at must be a string"),
        ({"score": "high"}, "score.score must be a number or null"),
        ({"brokers": -1}, "score.brokers must be a non-negative integer"),
        ({"resources": {"cpu": 1}}, "score.resources must map resource names to objects"),
    ],
)
def test_score_refuses_each_bad_field_by_name(changes: dict[str, Any], names: str) -> None:
    with pytest.raises(ContractError) as refused:
        parse_plan_score(changed(json.dumps(SCORE.to_json()).encode(), **changes))
    assert names in str(refused.value)
