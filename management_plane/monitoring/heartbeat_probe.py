"""The heartbeat's Kafka side (thin adapter: no decisions): one producer and one consumer
as the heartbeat tenant, over the tenant listener (SASL_SSL, SCRAM), as a customer's client.

One round: the topic's leaders from the producer's metadata, one message to a partition
each broker leads (acks=1: the leader's own acknowledgement, so a slow follower is not
counted against the leader), then read back until every accepted message of the round is
seen or the timeout passes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from management_plane.monitoring.heartbeat import (
    HeartbeatMessage,
    Sample,
    decode_message,
    probe_targets,
)

# librdkafka reports every failed request of a paused broker: the samples say it instead.
_RDKAFKA_LOG = logging.getLogger("kaas.heartbeat.rdkafka")
_RDKAFKA_LOG.setLevel(logging.CRITICAL)

ClientConfig = dict[str, str | int | float | bool]


class HeartbeatProbe:
    def __init__(
        self,
        cluster: str,
        client: ClientConfig,
        topic: str,
        group: str,
        timeout_s: float = 2.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.cluster = cluster
        self.topic = topic
        self.timeout_s = timeout_s
        self.clock = clock
        timeout_ms = int(timeout_s * 1000)
        self.producer = Producer(
            {
                **client,
                "acks": 1,
                "linger.ms": 0,
                "message.timeout.ms": timeout_ms,
                "request.timeout.ms": timeout_ms,
                "enable.idempotence": False,
                "logger": _RDKAFKA_LOG,
            }
        )
        self.consumer = Consumer(
            {
                **client,
                "group.id": group,
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 100,
                "logger": _RDKAFKA_LOG,
            }
        )
        self._assigned: set[int] = set()
        self._leaders: dict[int, int] = {}
        self._sequence = 0

    def leaders(self) -> dict[int, int]:
        """partition -> leader of the heartbeat topic (-1: none). A metadata request that
        does not answer (it went to the broker that is frozen) keeps the leaders known
        from before: that broker's heartbeat must still be tried, and fail."""
        try:
            metadata = self.producer.list_topics(self.topic, timeout=self.timeout_s)
        except KafkaException:
            return dict(self._leaders)
        topic = metadata.topics.get(self.topic)
        if topic is None or topic.error is not None:
            return dict(self._leaders)
        self._leaders = {p.id: p.leader for p in topic.partitions.values()}
        return dict(self._leaders)

    def _assign(self, partitions: set[int]) -> None:
        """Read each new partition from its current end, asked synchronously, so that the
        round's own message is never before where the consumer starts."""
        new = sorted(partitions - self._assigned)
        if not new:
            return
        starts = []
        for partition in new:
            _low, high = self.consumer.get_watermark_offsets(
                TopicPartition(self.topic, partition), timeout=self.timeout_s
            )
            starts.append(TopicPartition(self.topic, partition, high))
        self.consumer.incremental_assign(starts)
        self._assigned.update(new)

    def round(self) -> list[Sample]:
        targets = probe_targets(self.leaders())
        if not targets:
            return []
        self._assign(set(targets.values()))
        self._sequence += 1
        sent: dict[int, float] = {}
        acked: dict[int, bool] = {}

        def delivered(broker: int) -> Callable[[KafkaError | None, Message], None]:
            def report(error: KafkaError | None, _message: Message) -> None:
                acked[broker] = error is None

            return report

        for broker, partition in sorted(targets.items()):
            now = self.clock()
            heartbeat = HeartbeatMessage(self.cluster, broker, int(now * 1000), self._sequence)
            sent[broker] = now
            self.producer.produce(
                self.topic, heartbeat.encode(), partition=partition, on_delivery=delivered(broker)
            )
        self.producer.flush(self.timeout_s)
        # A partition whose leadership moved during the round was delivered by another
        # broker (the client follows the new leader): its heartbeat says nothing of either.
        after = self.leaders()
        moved = {b for b, partition in targets.items() if after.get(partition) != b}
        read: dict[int, float] = {}
        deadline = time.monotonic() + self.timeout_s
        waiting = {b for b, ok in acked.items() if ok}
        while waiting - set(read) and time.monotonic() < deadline:
            message = self.consumer.poll(0.1)
            if message is None or message.error() is not None:
                continue
            back = decode_message(message.value())
            if back is None or back.sequence != self._sequence:
                continue
            if back.cluster == self.cluster and back.broker_id in sent:
                read[back.broker_id] = self.clock() - back.sent_ms / 1000.0
        return [
            Sample(broker, sent[broker], acked.get(broker, False), read.get(broker))
            for broker in sorted(set(sent) - moved)
        ]

    def close(self) -> None:
        self.producer.flush(0)
        self.consumer.close()
