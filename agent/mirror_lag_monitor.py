"""A flow's lag, measured by the one agent that reports it (agent.mirror_decide.reports_lag),
every metrics interval on the metrics thread: the end offsets of both clusters and
MirrorMaker's offset syncs through `MirrorOffsets`, the pure `flow_lag`, the per-topic record
into ZooKeeper for `kaas mirror get`, and the gauges for statsd (agent.metrics.mirror_lag
names them).

Why offset syncs and not MirrorMaker's JMX metrics: those (record age, replication latency)
live in each process for the partitions its tasks own and say nothing of what is not yet
read, so a lag from them would need every runner's JVM. The offset syncs are one small
topic on the target that says which source offset a mirrored partition's end stands for, so
records a restarted MirrorMaker wrote again do not hide lag as end offsets alone do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import structlog
from kazoo.exceptions import KazooException

from agent.metrics.mirror_lag import FlowLag, flow_lag, lag_record, mirror_gauges
from agent.ports import MirrorLagStore, MirrorOffsets, StoreUnavailable
from planner.contracts.mirror_flow import MirrorFlow
from planner.contracts.vm_config.mirror import MirrorEndpoint

log = structlog.get_logger("kaas.agent.mirror")

Partition = tuple[str, int]


@dataclass(frozen=True)
class _Reading:
    target_ends: dict[Partition, int]
    at: float


class MirrorLagMonitor:
    def __init__(
        self,
        cluster: str,
        offsets: MirrorOffsets,
        store: MirrorLagStore,
        clock: Callable[[], float],
    ) -> None:
        """`clock`: unix time (the record's `measured_at`, and the rate's interval)."""
        self.cluster = cluster
        self.offsets = offsets
        self.store = store
        self.clock = clock
        self._previous: dict[str, _Reading] = {}

    def measure(
        self, broker_id: int, flows: Sequence[tuple[MirrorFlow, MirrorEndpoint]]
    ) -> tuple[list[tuple[str, float]], list[str]]:
        """The gauges of the flows this VM reports, and what could not be measured."""
        lags: dict[str, FlowLag] = {}
        problems: list[str] = []
        for flow, endpoint in flows:
            try:
                source = self.offsets.source_ends(flow, endpoint)
                target = self.offsets.target_ends(flow.source.alias)
            except StoreUnavailable as exc:
                problems.append(f"mirror lag of {flow.name}: {exc}")
                continue
            try:
                syncs = dict(self.offsets.offset_syncs(flow.source.alias))
            except StoreUnavailable as exc:
                # Measured by end offsets alone this time (the record says so).
                problems.append(f"mirror lag of {flow.name}: {exc}")
                syncs = {}
            now = self.clock()
            before = self._previous.get(flow.name)
            lag = flow_lag(
                flow.name,
                flow.source.alias,
                source,
                target,
                before.target_ends if before else None,
                now - before.at if before else 0.0,
                syncs,
            )
            self._previous[flow.name] = _Reading(target, now)
            lags[flow.name] = lag
            try:
                self.store.write_lag(flow.name, lag_record(lag, broker_id, now).encode())
            except (StoreUnavailable, KazooException) as exc:
                problems.append(f"mirror lag of {flow.name} not stored: {exc}")
        for gone in set(self._previous) - {flow.name for flow, _ in flows}:
            del self._previous[gone]
        return mirror_gauges(self.cluster, lags), problems
