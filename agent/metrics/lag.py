"""Consumer lag per group: for every group, the committed offsets against the partitions'
end offsets. Read by the elected planner's agent only (one reader per cluster), through the
internal listener. `group_lag` is pure; `ConsumerLagReader` is the thin adapter."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from planner.pki.client_settings import InternalClient

Partition = tuple[str, int]

_RDKAFKA_LOG = logging.getLogger("kaas.agent.metrics.lag.rdkafka")
_RDKAFKA_LOG.setLevel(logging.CRITICAL)


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
    def __init__(self, client: InternalClient, timeout_s: float = 5.0) -> None:
        self.client = client
        self.timeout_s = timeout_s
        self._admin: AdminClient | None = None

    def _client(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient(
                self.client.librdkafka(**{"socket.timeout.ms": 5000}), logger=_RDKAFKA_LOG
            )
        return self._admin

    def read(self) -> tuple[dict[str, GroupLag], str | None]:
        """Every consumer group's lag; a failure gives what was read and the problem."""
        try:
            admin = self._client()
            listing = admin.list_consumer_groups(request_timeout=self.timeout_s).result()
            groups = sorted(g.group_id for g in listing.valid)
            committed: dict[str, dict[Partition, int]] = {}
            for group in groups:
                futures = admin.list_consumer_group_offsets(
                    [ConsumerGroupTopicPartitions(group)], request_timeout=self.timeout_s
                )
                answer = futures[group].result()
                committed[group] = {
                    (tp.topic, tp.partition): tp.offset for tp in answer.topic_partitions or []
                }
            wanted = {p for offsets in committed.values() for p in offsets}
            ends: dict[Partition, int] = {}
            if wanted:
                end_futures = admin.list_offsets(
                    {TopicPartition(t, p): OffsetSpec.latest() for t, p in wanted},
                    request_timeout=self.timeout_s,
                )
                for tp, future in end_futures.items():
                    ends[(tp.topic, tp.partition)] = future.result().offset
        except (KafkaException, RuntimeError) as exc:
            return {}, f"consumer lag: {exc}"
        return {g: group_lag(offsets, ends) for g, offsets in committed.items()}, None
