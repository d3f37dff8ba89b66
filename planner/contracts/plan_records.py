"""The plan store's records: the plan's meta znode, one topic-assignment znode per topic, the
executor's progress, and the measured score written beside them. Each value is JSON with a
kind and a schema version; each has one encoder and one parser here, which checks the
value alone. Whether records belong together (same plan id, the counts the meta announces)
is the store's check, since it needs the other znodes."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from planner.contracts.fields import ContractError, dump, load_object, schema_version
from planner.contracts.plan_status import PlanMovement, parse_movement

PLAN_SCHEMA_VERSION = 1
META_KIND = "kaas.plan.meta"
TOPIC_KIND = "kaas.plan.topic"
PROGRESS_KIND = "kaas.plan.progress"
SCORE_SCHEMA_VERSION = 1


class PlanRecordError(ContractError):
    """A stored plan value that is corrupt or of another kind; never executed."""


class ProgressState(StrEnum):
    PENDING = "pending"
    EXECUTING = "executing"
    DONE = "done"
    FAILED = "failed"
    SUPERSEDED = "superseded"


@dataclass(frozen=True)
class PlannedStep:
    batch: int
    replicas: tuple[int, ...]


@dataclass(frozen=True)
class PlannedPartition:
    topic: str
    partition: int
    source: tuple[int, ...]
    """The replicas when planned: the executor refuses a step whose start differs."""
    target: tuple[int, ...]
    steps: tuple[PlannedStep, ...]

    def replicas_before(self, batch: int) -> tuple[int, ...]:
        """The list this partition has before `batch` runs, if the plan ran as written."""
        before = self.source
        for step in self.steps:
            if step.batch >= batch:
                break
            before = step.replicas
        return before


@dataclass(frozen=True)
class PlanMeta:
    cluster: str
    plan_id: int
    batch_count: int
    created_at: float
    topics: dict[str, int]  # topic -> how many of its partitions the plan moves
    inputs: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        return dump(
            {
                "schema_version": PLAN_SCHEMA_VERSION,
                "kind": META_KIND,
                "cluster": self.cluster,
                "plan_id": self.plan_id,
                "batch_count": self.batch_count,
                "created_at": self.created_at,
                "topics": dict(sorted(self.topics.items())),
                "inputs": self.inputs,
                "summary": self.summary,
            }
        )


@dataclass(frozen=True)
class TopicAssignment:
    cluster: str
    plan_id: int
    topic: str
    partitions: tuple[PlannedPartition, ...]

    def to_bytes(self) -> bytes:
        return dump(
            {
                "schema_version": PLAN_SCHEMA_VERSION,
                "kind": TOPIC_KIND,
                "cluster": self.cluster,
                "plan_id": self.plan_id,
                "topic": self.topic,
                "partitions": [
                    {
                        "partition": p.partition,
                        "source": list(p.source),
                        "target": list(p.target),
                        "steps": [
                            {"batch": s.batch, "replicas": list(s.replicas)} for s in p.steps
                        ],
                    }
                    for p in self.partitions
                ],
            }
        )


@dataclass(frozen=True)
class Progress:
    plan_id: int
    completed_batches: int
    state: str  # a ProgressState value
    detail: str = ""
    updated_at: float = 0.0
    version: int = -1
    """The znode's version when read (-1: not read from the store)."""
    started_batch: int | None = None
    """The batch handed to Kafka (None: none yet); equal to completed_batches while it runs."""
    batch_started_at: float = 0.0
    controller_moved: bool = False
    """The stall remedy (a new controller) was used for the running batch."""
    movement: PlanMovement | None = None
    """The pipelined executor's figures at its last look."""

    def to_bytes(self, now: float) -> bytes:
        return dump(
            {
                "schema_version": PLAN_SCHEMA_VERSION,
                "kind": PROGRESS_KIND,
                "plan_id": self.plan_id,
                "completed_batches": self.completed_batches,
                "state": self.state,
                "detail": self.detail,
                "updated_at": self.updated_at or now,
                "started_batch": self.started_batch,
                "batch_started_at": self.batch_started_at,
                "controller_moved": self.controller_moved,
                "movement": None if self.movement is None else self.movement.to_json(),
            }
        )


def _load(raw: bytes | str, where: str, kind: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise PlanRecordError(f"{where}: not JSON ({exc}); refusing a corrupt plan") from None
    if not isinstance(value, dict):
        raise PlanRecordError(f"{where}: not a JSON object; refusing a corrupt plan")
    if value.get("kind") != kind:
        raise PlanRecordError(f"{where}: kind {value.get('kind')!r}, expected {kind!r}")
    if value.get("schema_version") != PLAN_SCHEMA_VERSION:
        raise PlanRecordError(
            f"{where}: schema_version {value.get('schema_version')!r} is not supported "
            f"(this planner reads {PLAN_SCHEMA_VERSION})"
        )
    return value


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _count(value: Mapping[str, Any], key: str, where: str) -> int:
    if not _is_count(value.get(key)):
        raise PlanRecordError(f"{where}: '{key}' must be a non-negative integer")
    return int(value[key])


def _replicas(value: Any, where: str) -> tuple[int, ...]:
    if (
        not isinstance(value, list)
        or not value
        or not all(_is_count(b) for b in value)
        or len(set(value)) != len(value)
    ):
        raise PlanRecordError(f"{where}: replicas {value!r} must be distinct broker ids")
    return tuple(value)


def parse_plan_meta(raw: bytes | str, where: str) -> PlanMeta:
    value = _load(raw, where, META_KIND)
    cluster = value.get("cluster")
    if not isinstance(cluster, str):
        raise PlanRecordError(f"{where}: 'cluster' must be a cluster name")
    plan_id = _count(value, "plan_id", where)
    if not _is_count(value.get("batch_count")):
        raise PlanRecordError(f"{where}: batch_count {value.get('batch_count')!r} is not a count")
    topics = value.get("topics")
    if (
        not isinstance(topics, dict)
        or not all(isinstance(t, str) for t in topics)
        or not all(_is_count(n) for n in topics.values())
    ):
        raise PlanRecordError(f"{where}: 'topics' must map topic names to partition counts")
    for key in ("inputs", "summary"):
        if not isinstance(value.get(key), dict):
            raise PlanRecordError(f"{where}: '{key}' must be an object")
    created_at = value.get("created_at")
    if not isinstance(created_at, (int, float)) or isinstance(created_at, bool):
        raise PlanRecordError(f"{where}: 'created_at' must be a time")
    return PlanMeta(
        cluster,
        plan_id,
        value["batch_count"],
        float(created_at),
        dict(topics),
        value["inputs"],
        value["summary"],
    )


def parse_topic_assignment(raw: bytes | str, where: str) -> TopicAssignment:
    value = _load(raw, where, TOPIC_KIND)
    cluster, topic = value.get("cluster"), value.get("topic")
    if not isinstance(cluster, str) or not isinstance(topic, str):
        raise PlanRecordError(
            f"{where}: names cluster {cluster!r} topic {topic!r}; refusing a foreign value"
        )
    plan_id = _count(value, "plan_id", where)
    entries = value.get("partitions")
    if not isinstance(entries, list):
        raise PlanRecordError(f"{where}: 'partitions' must be a list, got {entries!r}")
    partitions = []
    for index, entry in enumerate(entries):
        at = f"{where} partitions[{index}]"
        if not isinstance(entry, dict) or not _is_count(entry.get("partition")):
            raise PlanRecordError(f"{at}: needs a non-negative integer 'partition'")
        source = _replicas(entry.get("source"), f"{at} source")
        target = _replicas(entry.get("target"), f"{at} target")
        raw_steps = entry.get("steps")
        if not isinstance(raw_steps, list) or not raw_steps:
            raise PlanRecordError(f"{at}: 'steps' must be a non-empty list")
        steps = []
        for step in raw_steps:
            if not isinstance(step, dict) or not _is_count(step.get("batch")):
                raise PlanRecordError(f"{at}: a step needs a batch number")
            steps.append(PlannedStep(step["batch"], _replicas(step.get("replicas"), at)))
        if steps[-1].replicas != target:
            raise PlanRecordError(f"{at}: the last step does not reach the target")
        partitions.append(PlannedPartition(topic, entry["partition"], source, target, tuple(steps)))
    return TopicAssignment(cluster, plan_id, topic, tuple(partitions))


def parse_progress(raw: bytes | str, where: str, version: int = -1) -> Progress:
    value = _load(raw, where, PROGRESS_KIND)
    state = value.get("state")
    if state not in set(ProgressState):
        raise PlanRecordError(
            f"{where}: state {state!r} is not one of {sorted(s.value for s in ProgressState)}"
        )
    completed = value.get("completed_batches")
    if not isinstance(completed, int) or not _is_count(completed):
        raise PlanRecordError(f"{where}: completed_batches {completed!r} is not a count")
    started = value.get("started_batch")
    if started is not None and not _is_count(started):
        raise PlanRecordError(f"{where}: started_batch {started!r} is not a batch number")
    for key in ("updated_at", "batch_started_at"):
        item = value.get(key, 0.0)
        if not isinstance(item, (int, float)) or isinstance(item, bool):
            raise PlanRecordError(f"{where}: '{key}' must be a time, got {item!r}")
    moved = value.get("controller_moved", False)
    if not isinstance(moved, bool):
        raise PlanRecordError(f"{where}: 'controller_moved' must be true or false")
    return Progress(
        _count(value, "plan_id", where),
        completed,
        str(state),
        str(value.get("detail", "")),
        float(value.get("updated_at", 0.0)),
        version,
        started,
        float(value.get("batch_started_at", 0.0)),
        moved,
        _movement(value.get("movement"), where),
    )


def _movement(value: Any, where: str) -> PlanMovement | None:
    if value is None:
        return None
    try:
        return parse_movement(value, f"{where}: movement")
    except ContractError as exc:
        raise PlanRecordError(str(exc)) from None


@dataclass(frozen=True)
class PlanScore:
    """The latest measured balance of the cluster, written by the analytics balance job."""

    cluster: str
    score: float | None  # None: too little data in the window to score
    window_start: str
    window_end: str
    brokers: int
    resources: dict[str, dict[str, Any]]  # resource -> its spread figures
    computed_at: str
    source: str = "analytics.balance"

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCORE_SCHEMA_VERSION,
            "cluster": self.cluster,
            "source": self.source,
            "score": self.score,
            "window_start": self.window_start,
            "window_end": self.window_end,
            "brokers": self.brokers,
            "resources": {name: dict(values) for name, values in self.resources.items()},
            "computed_at": self.computed_at,
        }


def parse_plan_score(raw: bytes | str) -> PlanScore:
    what = "score"
    value = load_object(raw, what)
    schema_version(value, what, (SCORE_SCHEMA_VERSION,))
    for key in ("cluster", "source", "window_start", "window_end", "computed_at"):
        if not isinstance(value.get(key), str):
            raise ContractError(f"{what}.{key} must be a string, got {value.get(key)!r}")
    score = value.get("score")
    if score is not None and (not isinstance(score, (int, float)) or isinstance(score, bool)):
        raise ContractError(f"{what}.score must be a number or null, got {score!r}")
    if not _is_count(value.get("brokers")):
        raise ContractError(f"{what}.brokers must be a non-negative integer")
    resources = value.get("resources")
    if not isinstance(resources, dict) or not all(isinstance(v, dict) for v in resources.values()):
        raise ContractError(f"{what}.resources must map resource names to objects")
    return PlanScore(
        value["cluster"],
        None if score is None else float(score),
        value["window_start"],
        value["window_end"],
        value["brokers"],
        {str(k): dict(v) for k, v in resources.items()},
        value["computed_at"],
        value["source"],
    )
