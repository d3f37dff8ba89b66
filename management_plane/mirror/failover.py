"""Whether a consumer group can fail over to a flow's target (pure).

MirrorMaker checkpoints the groups the flow syncs and commits their translated offsets on the
target while the group is not active there, every `checkpoint_interval_s`. The report puts,
per source partition, the group's committed offset on the source beside its committed offset
on the mirrored partition of the target: a group moved to the target resumes from the latter
and reads again at most what the source consumed since the last sync.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from management_plane.errors import ApiError
from planner.contracts.mirror_flow import MirrorFlow, filter_matches

MAX_GROUP_LENGTH = 249

TopicPartition = tuple[str, int]


class PartitionFailover(StrEnum):
    TRANSLATED = "translated"
    """The target holds an offset for the group on the mirrored partition."""
    NOT_TRANSLATED = "not_translated"
    """The group committed on the source, the target holds nothing for it yet."""
    TARGET_ONLY = "target_only"
    """An offset on the target only (the source's offsets unknown or gone)."""


@dataclass(frozen=True)
class PartitionOffsets:
    source_topic: str
    partition: int
    target_topic: str
    source_offset: int | None
    target_offset: int | None
    state: PartitionFailover


def validate_group(group: str) -> str:
    if not group or len(group) > MAX_GROUP_LENGTH or not group.isprintable():
        raise ApiError(422, "invalid", f"group must be 1-{MAX_GROUP_LENGTH} printable characters")
    return group


def failover_report(
    flow: MirrorFlow,
    group: str,
    source_offsets: Mapping[TopicPartition, int] | None,
    target_offsets: Mapping[TopicPartition, int],
) -> list[PartitionOffsets]:
    """Per partition of the flow's topics, the group's committed offset on the source and on
    the target. `source_offsets` is None when the service cannot read the source (an outside
    cluster): the target's side is reported alone. Refuses a group the flow does not sync and
    a group with no committed offset on either side of the flow."""
    validate_group(group)
    if not filter_matches(flow.groups, group):
        raise ApiError(
            409, "conflict", f"flow {flow.name} does not sync group {group!r} ({flow.groups!r})"
        )
    prefix = f"{flow.source.alias}."
    source = {
        tp: offset
        for tp, offset in (source_offsets or {}).items()
        if filter_matches(flow.topics, tp[0])
    }
    target = {
        (topic[len(prefix) :], partition): offset
        for (topic, partition), offset in target_offsets.items()
        if topic.startswith(prefix) and filter_matches(flow.topics, topic[len(prefix) :])
    }
    if not source and not target:
        raise ApiError(
            404,
            "not_found",
            f"group {group!r} has no committed offset on a topic of flow {flow.name}",
        )
    report = []
    for topic, partition in sorted(source.keys() | target.keys()):
        on_source = source.get((topic, partition))
        on_target = target.get((topic, partition))
        if on_target is None:
            state = PartitionFailover.NOT_TRANSLATED
        elif on_source is None:
            state = PartitionFailover.TARGET_ONLY
        else:
            state = PartitionFailover.TRANSLATED
        report.append(
            PartitionOffsets(
                topic, partition, flow.mirrored_topic(topic), on_source, on_target, state
            )
        )
    return report
