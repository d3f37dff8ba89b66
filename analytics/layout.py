"""LAYOUT.json as analytics needs it: what the plan predicts per broker, and write-back
of the measured per-partition load.

The file format belongs to the planner (LAYOUT.json, documented with its JSON schema
under planner/). Analytics reads only the fields it uses and writes back only
`size_bytes`, `bytes_in_per_s` and `bytes_out_per_s` of partitions, keeping every other
field as it was. This module is pure: it takes and returns plain data.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analytics.balance import BYTES_IN, BYTES_OUT, DISK, LEADER_BYTES_IN, LEADERS, PARTITIONS
from analytics.errors import AnalyticsError

# The resources a layout can predict (CPU it cannot).
PREDICTED_RESOURCES: tuple[str, ...] = (
    BYTES_IN,
    BYTES_OUT,
    LEADER_BYTES_IN,
    DISK,
    PARTITIONS,
    LEADERS,
)


class LayoutFileError(AnalyticsError, ValueError):
    """A LAYOUT.json or reassignment JSON that analytics cannot use; the message names the entry."""


@dataclass(frozen=True)
class MeasuredPartitionLoad:
    topic: str
    partition: int
    size_bytes: int | None
    bytes_in_per_s: float
    bytes_out_per_s: float


def load_json_file(path: Path, what: str) -> Any:
    try:
        with path.open(encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError as error:
        raise LayoutFileError(f"{what} {path} does not exist") from error
    except json.JSONDecodeError as error:
        raise LayoutFileError(f"{what} {path} is not valid JSON: {error}") from error


def _partition_key(entry: Any, where: str) -> tuple[str, int]:
    if not isinstance(entry, Mapping):
        raise LayoutFileError(f"{where}: expected an object, got {entry!r}")
    topic, partition = entry.get("topic"), entry.get("partition")
    if not isinstance(topic, str) or not topic:
        raise LayoutFileError(f"{where}: 'topic' must be a non-empty string, got {topic!r}")
    if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
        raise LayoutFileError(
            f"{where}: 'partition' of {topic} must be an integer >= 0, got {partition!r}"
        )
    return topic, partition


def _replicas(entry: Mapping[str, Any], where: str, broker_ids: set[int]) -> list[int]:
    replicas = entry.get("replicas")
    if not isinstance(replicas, list) or not replicas:
        raise LayoutFileError(f"{where}: 'replicas' must be a non-empty list of broker ids")
    for replica in replicas:
        if not isinstance(replica, int) or isinstance(replica, bool):
            raise LayoutFileError(f"{where}: replica {replica!r} is not a broker id")
        if replica not in broker_ids:
            raise LayoutFileError(f"{where}: replica {replica} is not a broker of the layout")
    if len(set(replicas)) != len(replicas):
        raise LayoutFileError(f"{where}: replicas {replicas} name a broker twice")
    return list(replicas)


def _number(entry: Mapping[str, Any], name: str, default: float, where: str) -> float:
    value = entry.get(name, default)
    if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
        raise LayoutFileError(f"{where}: '{name}' must be a number >= 0, got {value!r}")
    return float(value)


def layout_brokers(layout: Any) -> dict[int, str | None]:
    """Broker id -> rack of a LAYOUT.json document."""
    if not isinstance(layout, Mapping) or not isinstance(layout.get("brokers"), list):
        raise LayoutFileError("layout: expected an object with a 'brokers' list")
    brokers: dict[int, str | None] = {}
    for index, broker in enumerate(layout["brokers"]):
        where = f"layout brokers[{index}]"
        if not isinstance(broker, Mapping):
            raise LayoutFileError(f"{where}: expected an object, got {broker!r}")
        broker_id = broker.get("id")
        if not isinstance(broker_id, int) or isinstance(broker_id, bool):
            raise LayoutFileError(f"{where}: 'id' must be an integer, got {broker_id!r}")
        if broker_id in brokers:
            raise LayoutFileError(f"{where}: broker id {broker_id} appears twice")
        rack = broker.get("rack")
        brokers[broker_id] = rack if isinstance(rack, str) else None
    return brokers


def _layout_partitions(layout: Mapping[str, Any]) -> list[Any]:
    partitions = layout.get("partitions", [])
    if not isinstance(partitions, list):
        raise LayoutFileError("layout: 'partitions' must be a list")
    return partitions


def apply_reassignment(layout: Any, reassignment: Any) -> dict[str, Any]:
    """The layout after a Kafka reassignment JSON (`{"version":1,"partitions":[...]}`)."""
    brokers = set(layout_brokers(layout))
    if not isinstance(reassignment, Mapping) or not isinstance(
        reassignment.get("partitions"), list
    ):
        raise LayoutFileError("reassignment: expected an object with a 'partitions' list")
    moves: dict[tuple[str, int], list[int]] = {}
    for index, entry in enumerate(reassignment["partitions"]):
        where = f"reassignment partitions[{index}]"
        moves[_partition_key(entry, where)] = _replicas(entry, where, brokers)
    known = {
        _partition_key(entry, f"layout partitions[{index}]")
        for index, entry in enumerate(_layout_partitions(layout))
    }
    unknown = sorted(set(moves) - known)
    if unknown:
        topic, partition = unknown[0]
        raise LayoutFileError(
            f"reassignment moves {topic}-{partition}, which the layout does not have"
        )
    updated = dict(layout)
    updated["partitions"] = [
        {**entry, "replicas": moves.get((entry["topic"], entry["partition"]), entry["replicas"])}
        for entry in _layout_partitions(layout)
    ]
    return updated


def predicted_broker_load(layout: Any) -> list[dict[str, Any]]:
    """Per broker, the load the layout's assignment implies.

    The leader (first replica) takes the produce traffic and the consumers' reads, and
    serves each follower a copy of what is produced; every replica stores the partition.
    Sizes and rates absent from the layout count as the planner's defaults (size 1,
    rates 0).
    """
    brokers = layout_brokers(layout)
    load = {broker_id: dict.fromkeys(PREDICTED_RESOURCES, 0.0) for broker_id in brokers}
    for index, entry in enumerate(_layout_partitions(layout)):
        where = f"layout partitions[{index}]"
        _partition_key(entry, where)
        replicas = _replicas(entry, where, set(brokers))
        size = _number(entry, "size_bytes", 1, where)
        produced = _number(entry, "bytes_in_per_s", 0, where)
        consumed = _number(entry, "bytes_out_per_s", 0, where)
        leader, followers = replicas[0], replicas[1:]
        load[leader][LEADER_BYTES_IN] += produced
        load[leader][BYTES_IN] += produced
        load[leader][BYTES_OUT] += consumed + produced * len(followers)
        load[leader][LEADERS] += 1
        for replica in replicas:
            load[replica][DISK] += size
            load[replica][PARTITIONS] += 1
        for follower in followers:
            load[follower][BYTES_IN] += produced
    return [
        {"broker_id": broker_id, "rack": brokers[broker_id], **resources}
        for broker_id, resources in sorted(load.items())
    ]


def with_measured_load(
    layout: Any, measured: Iterable[MeasuredPartitionLoad]
) -> tuple[dict[str, Any], int, int]:
    """The layout with measured size and rates written into its partitions.

    Returns the new layout, how many partitions got measurements, and how many kept
    their old values because nothing was measured for them.
    """
    layout_brokers(layout)
    by_key = {(load.topic, load.partition): load for load in measured}
    updated_partitions = []
    measured_count = 0
    for index, entry in enumerate(_layout_partitions(layout)):
        key = _partition_key(entry, f"layout partitions[{index}]")
        load = by_key.get(key)
        if load is None:
            updated_partitions.append(dict(entry))
            continue
        measured_count += 1
        new_entry = {
            **entry,
            "bytes_in_per_s": round(load.bytes_in_per_s, 3),
            "bytes_out_per_s": round(load.bytes_out_per_s, 3),
        }
        if load.size_bytes is not None:
            new_entry["size_bytes"] = int(load.size_bytes)
        updated_partitions.append(new_entry)
    updated = dict(layout)
    updated["partitions"] = updated_partitions
    return updated, measured_count, len(updated_partitions) - measured_count
