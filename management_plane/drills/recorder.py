"""A live workload that records its own history: an acks=all idempotent producer sending
keyed, sequence-numbered messages (`workload.encode`) at a steady rate, a consumer group
reading them, and, when stopped, a read-back of every partition from the start, so that a
value never read is really lost. Every outcome lands as a history record (`history.py`) with
the wall-clock time; each ack's latency is kept beside it for the report.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from management_plane.drills.history import (
    AssignmentRecord,
    HistoryRecord,
    ProducerInfo,
    ReadRecord,
    SendRecord,
)
from management_plane.workload import decode, durable_producer, encode, key_for
from planner.client_logs import client_logger

PRODUCER = "p1"
AUDIT_CONSUMER = "read-back"


@dataclass(frozen=True)
class AckLatency:
    time_s: float  # when the outcome arrived
    latency_s: float  # since produce() was called
    ok: bool


@dataclass
class _Records:
    lock: threading.Lock = field(default_factory=threading.Lock)
    sends: list[SendRecord] = field(default_factory=list)
    latencies: list[AckLatency] = field(default_factory=list)
    consumer_events: list[ReadRecord | AssignmentRecord] = field(default_factory=list)


class RecordingWorkload:
    def __init__(
        self,
        connection: Mapping[str, str | int | float | bool],
        topic: str,
        rate_per_s: float,
        keys: int = 20,
        consumers: int = 2,
        client_config: Mapping[str, str | int | float | bool] | None = None,
    ) -> None:
        if rate_per_s <= 0:
            raise ValueError(f"rate must be above 0 messages/s; got {rate_per_s}")
        self.topic = topic
        self.rate_per_s = rate_per_s
        self.keys = keys
        self.group = f"{topic}-group"
        self.connection = dict(connection)  # brokers, TLS and the identity presented
        self.client_config = dict(client_config or {})
        self.records = _Records()
        self.stopping = threading.Event()
        self.consumers_stopping = threading.Event()
        self.producer = durable_producer(self.connection, **self.client_config)
        self.threads = [threading.Thread(target=self._produce, daemon=True, name="drill-producer")]
        self.threads += [
            threading.Thread(
                target=self._consume, args=(f"c{i + 1}",), daemon=True, name=f"drill-c{i + 1}"
            )
            for i in range(consumers)
        ]
        self.sent = 0

    # -- producing --

    def _produce(self) -> None:
        next_sequence = [0] * self.keys
        interval = 1.0 / self.rate_per_s
        next_at = time.monotonic()
        index = 0
        while not self.stopping.is_set():
            key_index = index % self.keys
            key = key_for(key_index, "k")
            sequence = next_sequence[key_index]
            next_sequence[key_index] += 1
            self._send(key, sequence)
            index += 1
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                self.producer.poll(delay)
            else:
                self.producer.poll(0)
                next_at = max(next_at, time.monotonic() - 1.0)  # no burst after a stall

    def _send(self, key: str, sequence: int) -> None:
        value = encode(key, sequence)
        started = time.time()

        def delivered(error: KafkaError | None, message: Message) -> None:
            now = time.time()
            ok = error is None
            record = SendRecord(
                producer=PRODUCER,
                topic=self.topic,
                key=key,
                sequence=sequence,
                value_id=value.decode(),
                partition=message.partition() if ok else None,
                offset=message.offset() if ok else None,
                time_s=now,
                error=None if error is None else error.str(),
            )
            with self.records.lock:
                self.records.sends.append(record)
                self.records.latencies.append(AckLatency(now, now - started, ok))

        while not self.stopping.is_set():
            try:
                self.producer.produce(
                    self.topic, key=key.encode(), value=value, on_delivery=delivered
                )
                self.sent += 1
                return
            except BufferError:
                self.producer.poll(0.05)

    # -- consuming --

    def _consumer(self, group: str) -> Consumer:
        return Consumer(
            {
                **self.connection,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "partition.assignment.strategy": "cooperative-sticky",
                **self.client_config,
            },
            logger=client_logger,
        )

    def _record_read(self, name: str, group: str, message: Message) -> None:
        key, _ = decode(message.value())
        value_id = (message.value() or b"").decode()
        read = ReadRecord(
            consumer=name,
            group=group,
            topic=message.topic() or self.topic,
            partition=message.partition() or 0,
            offset=message.offset() or 0,
            key=key,
            value_id=value_id,
            time_s=time.time(),
        )
        with self.records.lock:
            self.records.consumer_events.append(read)

    def _consume(self, name: str) -> None:
        consumer = self._consumer(self.group)

        def on_assign(consumer: Consumer, partitions: list[TopicPartition]) -> None:
            assigned = AssignmentRecord(
                consumer=name,
                group=self.group,
                topic=self.topic,
                partitions=tuple(sorted(p.partition for p in partitions)),
                time_s=time.time(),
            )
            with self.records.lock:
                self.records.consumer_events.append(assigned)

        def on_revoke(consumer: Consumer, partitions: list[TopicPartition]) -> None:
            # Nothing to commit, or the coordinator is away: the next owner re-reads.
            with contextlib.suppress(KafkaException):
                consumer.commit(asynchronous=False)

        consumer.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke)
        try:
            while not self.consumers_stopping.is_set():
                batch = consumer.consume(num_messages=500, timeout=0.5)
                good = [m for m in batch if m.error() is None]
                for message in good:
                    self._record_read(name, self.group, message)
                if good:
                    with contextlib.suppress(KafkaException):
                        consumer.commit(asynchronous=True)
        finally:
            consumer.close()

    def read_back(self, timeout_s: float = 120.0) -> int:
        """Read every partition from its start to its end with a consumer of its own; returns
        how many records it read."""
        consumer = self._consumer(f"{self.topic}-read-back")
        try:
            metadata = consumer.list_topics(self.topic, timeout=30)
            partitions = sorted(metadata.topics[self.topic].partitions)
            ends = {
                p: consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=30)[1]
                for p in partitions
            }
            with self.records.lock:
                self.records.consumer_events.append(
                    AssignmentRecord(
                        AUDIT_CONSUMER, "read-back", self.topic, tuple(partitions), time.time()
                    )
                )
            consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in partitions])
            reached = {p for p in partitions if ends[p] == 0}
            count = 0
            deadline = time.monotonic() + timeout_s
            while len(reached) < len(partitions) and time.monotonic() < deadline:
                for message in consumer.consume(num_messages=1000, timeout=0.5):
                    if message.error() is not None:
                        continue
                    self._record_read(AUDIT_CONSUMER, "read-back", message)
                    count += 1
                    if (message.offset() or 0) + 1 >= ends[message.partition() or 0]:
                        reached.add(message.partition() or 0)
            return count
        finally:
            consumer.close()

    # -- control --

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def acks_since(self, since_s: float) -> int:
        with self.records.lock:
            return sum(
                1 for s in self.records.sends if s.acknowledged and (s.time_s or 0) >= since_s
            )

    def partitions_acked_since(self, since_s: float) -> set[int]:
        with self.records.lock:
            return {
                s.partition
                for s in self.records.sends
                if s.partition is not None and (s.time_s or 0) >= since_s
            }

    def stop(self, flush_timeout_s: float = 150.0) -> None:
        """Stop producing, wait for every outstanding outcome, let the group catch up briefly,
        stop it, then read everything back."""
        self.stopping.set()
        self.threads[0].join(30)
        self.producer.flush(flush_timeout_s)
        time.sleep(2.0)
        self.consumers_stopping.set()
        for thread in self.threads[1:]:
            thread.join(30)
        self.read_back()

    def history_records(self) -> list[HistoryRecord]:
        with self.records.lock:
            records: list[HistoryRecord] = [ProducerInfo(PRODUCER, idempotent=True)]
            records.extend(self.records.sends)
            records.extend(self.records.consumer_events)
        return records

    def latencies(self) -> list[AckLatency]:
        with self.records.lock:
            return list(self.records.latencies)
