"""`/kaas/<cluster>/load`: the measured load per partition, written by the analytics balance
job, read by the elected planner for its traffic goals (leader bytes in and out).

Rates are means over the documented span [window_start, window_end) of `window_s`
seconds. The planner uses the value only while it is fresh (`is_fresh`): an old
measurement describes traffic that may have moved, so it falls back to sizes.

Kept compact, since a znode stays far below 1 MB: partitions are grouped per topic as
`[partition, bytes_in_per_s, bytes_out_per_s, messages_in_per_s]` rows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from planner.contracts.fields import ContractError, load_object, schema_version

LOAD_SCHEMA_VERSION = 1
# Above this the value no longer fits one znode comfortably (ZooKeeper's default
# jute.maxbuffer is 1 MiB per request, and the transaction carries more than the value).
MAX_ENCODED_BYTES = 900_000


@dataclass(frozen=True)
class PartitionLoad:
    topic: str
    partition: int
    bytes_in_per_s: float
    bytes_out_per_s: float
    messages_in_per_s: float | None = None


@dataclass(frozen=True)
class MeasuredLoad:
    cluster: str
    window_start: str
    """ISO 8601 start of the measured span."""
    window_end: str
    window_s: int
    """The span's length: the rates are means over it."""
    computed_at: str
    partitions: tuple[PartitionLoad, ...]
    source: str = "analytics.balance"

    def to_json(self) -> dict[str, Any]:
        topics: dict[str, list[list[Any]]] = {}
        for item in sorted(self.partitions, key=lambda p: (p.topic, p.partition)):
            topics.setdefault(item.topic, []).append(
                [item.partition, item.bytes_in_per_s, item.bytes_out_per_s, item.messages_in_per_s]
            )
        return {
            "schema_version": LOAD_SCHEMA_VERSION,
            "cluster": self.cluster,
            "source": self.source,
            "window_start": self.window_start,
            "window_end": self.window_end,
            "window_s": self.window_s,
            "computed_at": self.computed_at,
            "topics": topics,
        }

    def age_s(self, now: datetime) -> float:
        """Seconds from the end of the measured span to `now` (timezone-aware)."""
        return (now - _timestamp(self.window_end, "load.window_end")).total_seconds()

    def is_fresh(self, now: datetime, max_age_s: float) -> bool:
        return self.age_s(now) <= max_age_s

    def by_partition(self) -> dict[tuple[str, int], PartitionLoad]:
        return {(item.topic, item.partition): item for item in self.partitions}


def _timestamp(text: str, what: str) -> datetime:
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ContractError(f"{what} must be an ISO 8601 time, got {text!r}") from None
    if value.tzinfo is None:
        raise ContractError(f"{what} must carry a time zone, got {text!r}")
    return value


def _rate(item: Any, what: str, optional: bool = False) -> float | None:
    if item is None and optional:
        return None
    if (
        not isinstance(item, (int, float))
        or isinstance(item, bool)
        or not math.isfinite(item)
        or item < 0
    ):
        raise ContractError(f"{what} must be a non-negative number, got {item!r}")
    return float(item)


def parse_measured_load(raw: bytes | str) -> MeasuredLoad:
    what = "load"
    value = load_object(raw, what)
    schema_version(value, what, (LOAD_SCHEMA_VERSION,))
    for key in ("cluster", "source", "window_start", "window_end", "computed_at"):
        if not isinstance(value.get(key), str):
            raise ContractError(f"{what}.{key} must be a string, got {value.get(key)!r}")
    start = _timestamp(value["window_start"], f"{what}.window_start")
    end = _timestamp(value["window_end"], f"{what}.window_end")
    _timestamp(value["computed_at"], f"{what}.computed_at")
    if end <= start:
        raise ContractError(f"{what}.window_end must be after window_start")
    window_s = value.get("window_s")
    if not isinstance(window_s, int) or isinstance(window_s, bool) or window_s <= 0:
        raise ContractError(f"{what}.window_s must be a positive integer, got {window_s!r}")
    topics = value.get("topics")
    if not isinstance(topics, Mapping):
        raise ContractError(f"{what}.topics must map topic names to partition rows")
    partitions: list[PartitionLoad] = []
    for topic, rows in topics.items():
        if not isinstance(rows, list):
            raise ContractError(f"{what}.topics.{topic} must be a list of rows")
        seen: set[int] = set()
        for row in rows:
            where = f"{what}.topics.{topic}"
            if not isinstance(row, list) or len(row) != 4:
                raise ContractError(
                    f"{where} rows must be [partition, bytes_in_per_s, bytes_out_per_s, "
                    f"messages_in_per_s], got {row!r}"
                )
            partition = row[0]
            if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
                raise ContractError(
                    f"{where} partition must be a non-negative integer, got {partition!r}"
                )
            if partition in seen:
                raise ContractError(f"{where} lists partition {partition} twice")
            seen.add(partition)
            bytes_in = _rate(row[1], f"{where}[{partition}].bytes_in_per_s")
            bytes_out = _rate(row[2], f"{where}[{partition}].bytes_out_per_s")
            assert bytes_in is not None and bytes_out is not None
            partitions.append(
                PartitionLoad(
                    str(topic),
                    partition,
                    bytes_in,
                    bytes_out,
                    _rate(row[3], f"{where}[{partition}].messages_in_per_s", optional=True),
                )
            )
    return MeasuredLoad(
        cluster=value["cluster"],
        window_start=value["window_start"],
        window_end=value["window_end"],
        window_s=window_s,
        computed_at=value["computed_at"],
        partitions=tuple(partitions),
        source=value["source"],
    )
