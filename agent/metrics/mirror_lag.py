"""How far a mirror flow's target is behind its source (pure).

Per source partition, from MirrorMaker's latest offset sync when there is one: a sync says
source offset U was written at target offset D, and MirrorMaker writes the records after U
one to one after D until its next sync (it emits one whenever that stops holding: a record
skipped on the source, a restart that writes records again), so the target's end T stands
for source offset U + (T - D), and the lag is the source's end minus that. Without a sync yet
(a partition not mirrored so far), the source's end against the mirrored partition's end:
exact on a topic mirrored from its start, low by the records a restarted MirrorMaker wrote
again. The target's growth between two reads is the flow's mirrored records per second.

The offset syncs are records of MirrorMaker's `mm2-offset-syncs.<source>.internal` topic
(on the target, where the renderer keeps it): key = topic (int16 length, UTF-8) and
partition (int32), value = upstream and downstream offsets (int64 each), big-endian, as
Kafka's own `Struct` serialization writes them (`decode_offset_sync`).

Gauges (under the publisher's prefix):

    <cluster>.mirror.<flow>.{lag_records,max_partition_lag,records_per_s,partitions}
    <cluster>.mirror.<flow>.partitions.<topic>.<partition>.lag_records

Sent by one agent per flow: the flow's runner of the lowest live broker id
(`agent.mirror_decide.reports_lag`), which also writes the per-topic summary
(`lag_record`) to ZooKeeper for `kaas mirror get`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from agent.metrics.gauges import segment
from planner.contracts.mirror_lag import LagMethod, MirrorFlowLag, TopicLag, summarize_topics

Partition = tuple[str, int]


@dataclass(frozen=True)
class OffsetSync:
    upstream: int
    """A source offset MirrorMaker mirrored ..."""
    downstream: int
    """... and the target offset it wrote that record at."""


def offset_syncs_topic(alias: str) -> str:
    """MirrorMaker's offset-syncs topic of a source, kept on the target."""
    return f"mm2-offset-syncs.{alias}.internal"


def decode_offset_sync(key: bytes | None, value: bytes | None) -> tuple[Partition, OffsetSync]:
    """One record of the offset-syncs topic; ValueError when it is not one."""
    if key is None or value is None or len(key) < 6 or len(value) != 16:
        raise ValueError("not an offset sync: the key or the value has the wrong length")
    (length,) = struct.unpack_from(">h", key, 0)
    if length < 0 or len(key) != 2 + length + 4:
        raise ValueError("not an offset sync: the topic's length does not fit the key")
    topic = key[2 : 2 + length].decode("utf-8")
    (partition,) = struct.unpack_from(">i", key, 2 + length)
    upstream, downstream = struct.unpack(">qq", value)
    return (topic, partition), OffsetSync(upstream, downstream)


def latest_syncs(
    known: Mapping[Partition, OffsetSync],
    records: Iterable[tuple[bytes | None, bytes | None]],
) -> tuple[dict[Partition, OffsetSync], int]:
    """The latest sync per source partition after `records` (in topic order), and how many
    records were not offset syncs."""
    latest = dict(known)
    bad = 0
    for key, value in records:
        try:
            partition, sync = decode_offset_sync(key, value)
        except (ValueError, UnicodeDecodeError, struct.error):
            bad += 1
            continue
        latest[partition] = sync
    return latest, bad


@dataclass(frozen=True)
class PartitionMirrorLag:
    topic: str
    partition: int
    source_end: int
    target_end: int | None
    """None: the mirrored partition does not exist on the target yet."""
    sync: OffsetSync | None = None

    @property
    def mirrored_to(self) -> int:
        """The source offset the target's end stands for."""
        if self.target_end is None:
            return 0
        if self.sync is None:
            return self.target_end
        return self.sync.upstream + self.target_end - self.sync.downstream

    @property
    def lag_records(self) -> int:
        return max(0, self.source_end - self.mirrored_to)


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
    syncs: Mapping[Partition, OffsetSync] | None = None,
) -> FlowLag:
    """The lag of one flow whose source is named `alias` (the mirrored topics' prefix).
    `previous_target_ends` were read `elapsed_s` before `target_ends`; a partition that
    shrank (a topic deleted and made again) counts no negative rate. `syncs`: the latest
    offset sync per source partition."""
    mirrored = {
        (topic[len(alias) + 1 :], p): end
        for (topic, p), end in target_ends.items()
        if topic.startswith(f"{alias}.")
    }
    partitions = tuple(
        PartitionMirrorLag(topic, p, end, mirrored.get((topic, p)), (syncs or {}).get((topic, p)))
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


def lag_record(lag: FlowLag, broker_id: int, measured_at: float) -> MirrorFlowLag:
    """The flow's lag per topic, as ZooKeeper keeps it (planner.contracts.mirror_lag)."""
    by_topic: dict[str, list[PartitionMirrorLag]] = {}
    for p in lag.partitions:
        by_topic.setdefault(p.topic, []).append(p)
    topics, omitted = summarize_topics(
        [
            TopicLag(
                topic=topic,
                partitions=len(parts),
                lag_records=sum(p.lag_records for p in parts),
                max_partition_lag=max(p.lag_records for p in parts),
                missing_partitions=sum(1 for p in parts if p.target_end is None),
            )
            for topic, parts in by_topic.items()
        ]
    )
    return MirrorFlowLag(
        flow=lag.flow,
        broker_id=broker_id,
        measured_at=measured_at,
        lag_records=lag.lag_records,
        records_per_s=lag.records_per_s,
        topics=topics,
        topics_omitted=omitted,
        method=(
            LagMethod.OFFSET_SYNCS
            if any(p.sync is not None for p in lag.partitions)
            else LagMethod.END_OFFSETS
        ),
    )
