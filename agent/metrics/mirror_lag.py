"""How far a mirror flow's target is behind its source (pure).

Per source partition: the source's end offset against the end offset of the mirrored
partition on the target. MirrorMaker copies every record of a partition from the offset it
first saw, so on a topic mirrored from its start the difference is the number of records not
yet mirrored; the target's growth between two reads is the flow's mirrored records per
second. Records MirrorMaker writes again after a restart (it copies at least once) put the
target ahead by as many, so the lag then reads low by that much (never below 0).

Gauges (under the publisher's prefix):

    <cluster>.mirror.<flow>.{lag_records,max_partition_lag,records_per_s,partitions}
    <cluster>.mirror.<flow>.partitions.<topic>.<partition>.lag_records
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from agent.metrics.gauges import segment

Partition = tuple[str, int]


@dataclass(frozen=True)
class PartitionMirrorLag:
    topic: str
    partition: int
    source_end: int
    target_end: int | None
    """None: the mirrored partition does not exist on the target yet."""

    @property
    def lag_records(self) -> int:
        return max(0, self.source_end - (self.target_end or 0))


@dataclass(frozen=True)
class FlowLag:
    flow: str
    partitions: tuple[PartitionMirrorLag, ...]
    records_per_s: float | None
    """None on the first read, or when the clock did not advance."""

    @property
    def lag_records(self) -> int:
        return sum(p.lag_records for p in self.partitions)

    @property
    def max_partition_lag(self) -> int:
        return max((p.lag_records for p in self.partitions), default=0)


def flow_lag(
    flow: str,
    alias: str,
    source_ends: Mapping[Partition, int],
    target_ends: Mapping[Partition, int],
    previous_target_ends: Mapping[Partition, int] | None,
    elapsed_s: float,
) -> FlowLag:
    """The lag of one flow whose source is named `alias` (the mirrored topics' prefix).
    `previous_target_ends` were read `elapsed_s` before `target_ends`; a partition that
    shrank (a topic deleted and made again) counts no negative rate."""
    mirrored = {
        (topic[len(alias) + 1 :], p): end
        for (topic, p), end in target_ends.items()
        if topic.startswith(f"{alias}.")
    }
    partitions = tuple(
        PartitionMirrorLag(topic, p, end, mirrored.get((topic, p)))
        for (topic, p), end in sorted(source_ends.items())
    )
    rate = None
    if previous_target_ends is not None and elapsed_s > 0:
        grown = sum(
            max(0, end - previous_target_ends[tp])
            for tp, end in target_ends.items()
            if tp in previous_target_ends and tp[0].startswith(f"{alias}.")
        )
        rate = grown / elapsed_s
    return FlowLag(flow, partitions, rate)


def mirror_gauges(cluster: str, lags: Mapping[str, FlowLag]) -> list[tuple[str, float]]:
    """The statsd gauges of every flow's lag (names in the module's docstring)."""
    gauges: list[tuple[str, float]] = []
    for name, lag in sorted(lags.items()):
        base = f"{segment(cluster)}.mirror.{segment(name)}"
        gauges += [
            (f"{base}.lag_records", float(lag.lag_records)),
            (f"{base}.max_partition_lag", float(lag.max_partition_lag)),
            (f"{base}.partitions", float(len(lag.partitions))),
        ]
        if lag.records_per_s is not None:
            gauges.append((f"{base}.records_per_s", lag.records_per_s))
        gauges += [
            (
                f"{base}.partitions.{segment(p.topic)}.{p.partition}.lag_records",
                float(p.lag_records),
            )
            for p in lag.partitions
        ]
    return gauges
