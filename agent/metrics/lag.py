"""Consumer lag per group: for every group, the committed offsets against the partitions'
end offsets. Read by the elected planner's agent only (one reader per cluster), through the
internal listener. `group_lag` is pure; `ConsumerLagReader` is the thin adapter.

The reader is kafka-python's admin client, not librdkafka's: librdkafka's group-offset
requests go through its coordinator lookup, which aborts the whole process on an assertion
(`eonce->refcnt > 0`) when the coordinator moves under them, as it does in every rolling
restart; an abort took the planner's agent down mid-roll."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kafka import KafkaAdminClient, TopicPartition
from kafka.admin import OffsetSpec
from kafka.errors import KafkaError

from agent.kafka_client_settings import kafka_python_admin_settings
from planner.pki.client_settings import InternalClient

Partition = tuple[str, int]


@dataclass(frozen=True)
class GroupLag:
    total: int
    max_partition: int
    partitions: int


def group_lag(committed: Mapping[Partition, int], ends: Mapping[Partition, int]) -> GroupLag:
    """Lag of one group: end offset minus committed offset of each partition it committed
    (never below 0: an end read before the commit); a partition without a known end, or a
    commit of -1 (nothing committed), does not count."""
    lags = [
        max(0, ends[p] - offset) for p, offset in committed.items() if offset >= 0 and p in ends
    ]
    return GroupLag(sum(lags), max(lags, default=0), len(lags))


class ConsumerLagReader:
    """One admin client, made on first use and kept; made again after a failed read. Used
    from the metrics loop's thread only."""

    def __init__(self, client: InternalClient, timeout_s: float = 5.0) -> None:
        self.client = client
        self.timeout_s = timeout_s
        self._admin: KafkaAdminClient | None = None

    def _client(self) -> KafkaAdminClient:
        if self._admin is None:
            settings: dict[str, Any] = {
                **kafka_python_admin_settings(self.client),
                "client_id": "kaas-agent-lag",
                "request_timeout_ms": int(self.timeout_s * 1000),
                "bootstrap_timeout_ms": int(self.timeout_s * 1000),
            }
            self._admin = KafkaAdminClient(**settings)
        return self._admin

    def close(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            # Closing a broken client: nothing is left to release.
            with contextlib.suppress(KafkaError, OSError):
                admin.close()

    def read(self) -> tuple[dict[str, GroupLag], str | None]:
        """Every consumer group's lag; a failure gives what was read and the problem."""
        try:
            admin = self._client()
            groups = sorted({str(g["group_id"]) for g in admin.list_groups()})
            committed: dict[str, dict[Partition, int]] = {}
            for group in groups:
                answer = admin.list_group_offsets({group: None}).get(group, {})
                committed[group] = {
                    (tp.topic, tp.partition): int(meta.offset) for tp, meta in answer.items()
                }
            wanted = {p for offsets in committed.values() for p in offsets}
            ends: dict[Partition, int] = {}
            if wanted:
                answered = admin.list_partition_offsets(
                    {TopicPartition(t, p): OffsetSpec.LATEST for t, p in wanted},
                    timeout_ms=int(self.timeout_s * 1000),
                )
                ends = {(tp.topic, tp.partition): int(o.offset) for tp, o in answered.items()}
        except (KafkaError, OSError) as exc:
            self.close()  # a broken connection is made again at the next read
            return {}, f"consumer lag: {exc!r}"
        return {g: group_lag(offsets, ends) for g, offsets in committed.items()}, None
