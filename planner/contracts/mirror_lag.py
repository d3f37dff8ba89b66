"""`/kaas/<target>/mirror/lag/<flow>`: how far a flow's target is behind its source.

Written every metrics interval by one agent of the target (the flow's runner of the lowest
live broker id), read by the management plane for `kaas mirror get`. Per topic, not per
partition: the per-partition figures go to statsd; the znode stays far below ZooKeeper's
1 MB with `MAX_TOPICS` topics (the most behind first; the rest only counted).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from planner.contracts.fields import (
    ContractError,
    choice,
    dump,
    integer,
    load_object,
    schema_version,
    text,
)
from planner.contracts.mirror_flow import validate_flow_name

MIRROR_LAG_SCHEMA_VERSION = 1
MAX_TOPICS = 1000


class LagMethod(StrEnum):
    """How the lag was measured."""

    OFFSET_SYNCS = "offset_syncs"
    """MirrorMaker's offset syncs: the source offset each mirrored partition's end stands for
    (partitions without a sync yet: by end offsets)."""
    END_OFFSETS = "end_offsets"
    """The source's end offsets against the mirrored partitions' end offsets only."""


@dataclass(frozen=True)
class TopicLag:
    topic: str
    """The source topic's name (the target's is `<alias>.<topic>`)."""
    partitions: int
    lag_records: int
    max_partition_lag: int
    missing_partitions: int = 0
    """Partitions not yet made on the target (their whole source counts as lag)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partitions": self.partitions,
            "lag_records": self.lag_records,
            "max_partition_lag": self.max_partition_lag,
            "missing_partitions": self.missing_partitions,
        }


@dataclass(frozen=True)
class MirrorFlowLag:
    flow: str
    broker_id: int
    """The broker id of the agent that measured it."""
    measured_at: float
    """Unix time, seconds."""
    lag_records: int
    records_per_s: float | None
    """Records mirrored per second since the previous measurement (None: the first)."""
    topics: tuple[TopicLag, ...]
    topics_omitted: int = 0
    method: LagMethod = LagMethod.END_OFFSETS

    def __post_init__(self) -> None:
        validate_flow_name(self.flow)
        if self.lag_records < 0 or self.broker_id < 0 or self.topics_omitted < 0:
            raise ContractError(f"mirror lag of {self.flow}: counts must not be negative")
        if self.records_per_s is not None and self.records_per_s < 0:
            raise ContractError(f"mirror lag of {self.flow}: records_per_s must not be negative")
        if len(self.topics) > MAX_TOPICS:
            raise ContractError(
                f"mirror lag of {self.flow}: at most {MAX_TOPICS} topics, got {len(self.topics)}"
            )

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": MIRROR_LAG_SCHEMA_VERSION,
            "flow": self.flow,
            "broker_id": self.broker_id,
            "measured_at": self.measured_at,
            "lag_records": self.lag_records,
            "records_per_s": self.records_per_s,
            "topics": [t.to_json() for t in self.topics],
            "topics_omitted": self.topics_omitted,
            "method": self.method.value,
        }

    def encode(self) -> bytes:
        return dump(self.to_json())

    def age_s(self, now: float) -> float:
        return max(0.0, now - self.measured_at)


def summarize_topics(topics: list[TopicLag]) -> tuple[tuple[TopicLag, ...], int]:
    """The topics to keep (most behind first, then by name) and how many were left out."""
    ordered = sorted(topics, key=lambda t: (-t.lag_records, t.topic))
    return tuple(ordered[:MAX_TOPICS]), max(0, len(ordered) - MAX_TOPICS)


def _number(value: dict[str, Any], key: str, what: str, optional: bool = False) -> float | None:
    item = value.get(key)
    if item is None and optional:
        return None
    if not isinstance(item, (int, float)) or isinstance(item, bool):
        raise ContractError(f"{what}.{key} must be a number")
    return float(item)


def parse_mirror_lag(raw: bytes | str) -> MirrorFlowLag:
    what = "mirror_lag"
    value = load_object(raw, what)
    schema_version(value, what, (MIRROR_LAG_SCHEMA_VERSION,))
    topics = value.get("topics")
    if not isinstance(topics, list) or not all(isinstance(t, dict) for t in topics):
        raise ContractError(f"{what}.topics must be a list of objects")
    measured_at = _number(value, "measured_at", what)
    assert measured_at is not None
    return MirrorFlowLag(
        flow=text(value, "flow", what),
        broker_id=integer(value, "broker_id", what, minimum=0),
        measured_at=measured_at,
        lag_records=integer(value, "lag_records", what, minimum=0),
        records_per_s=_number(value, "records_per_s", what, optional=True),
        topics=tuple(
            TopicLag(
                topic=text(t, "topic", f"{what}.topics"),
                partitions=integer(t, "partitions", f"{what}.topics", minimum=0),
                lag_records=integer(t, "lag_records", f"{what}.topics", minimum=0),
                max_partition_lag=integer(t, "max_partition_lag", f"{what}.topics", minimum=0),
                missing_partitions=integer(t, "missing_partitions", f"{what}.topics", minimum=0),
            )
            for t in topics
        ),
        topics_omitted=integer(value, "topics_omitted", what, minimum=0),
        method=choice(value, "method", what, LagMethod),
    )
