"""A verifiable keyed workload: produce numbered messages per key, consume them in a group,
and check that each arrived exactly once and in order per key.

Used by `kaas demo` and by the tests and drills; the check itself (`verify_per_key_order`)
is pure.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from analytics.ledger import ProducedLedger
from management_plane.errors import KaasError
from planner.client_logs import client_logger

# When set, every produce_keyed call that was given no ledger writes one into this folder
# (one JSON-lines file per call), so that drills and the demo leave the counts the audit
# job (`kaas analytics audit --ledger FOLDER`) checks Kafka against.
LEDGER_DIR_ENV = "KAAS_PRODUCED_LEDGER_DIR"


def key_for(index: int, prefix: str = "key") -> str:
    return f"{prefix}-{index:05d}"


def encode(key: str, sequence: int) -> bytes:
    return f"{key}:{sequence}".encode()


def decode(value: bytes | None) -> tuple[str, int]:
    if value is None:
        raise ValueError("a workload message has no value")
    key, _, sequence = value.decode().rpartition(":")
    return key, int(sequence)


# A client's connection: librdkafka settings with bootstrap.servers and the security that
# listener needs, from planner.pki.client_settings (InternalClient or TenantClient).
Connection = Mapping[str, str | int | float | bool]


# Errors after which asking again can succeed: the controller moved or was unreachable
# (a broker of the cluster was just stopped), or the request went unanswered.
def _listed_brokers(admin: AdminClient) -> int:
    try:
        return len(admin.list_topics(timeout=5).brokers)
    except KafkaException:
        return 0


RETRIABLE_CREATE_ERRORS = frozenset(
    {
        KafkaError._TIMED_OUT,
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NOT_CONTROLLER,
        # The connection a request went out on was dropped (a broker leaving the metadata
        # while the cluster starts): a new request goes out on another.
        KafkaError._DESTROY_BROKER,
    }
)


def create_topic(
    connection: Connection,
    topic: str,
    partitions: int,
    replication_factor: int = 3,
    timeout_s: float = 120.0,
) -> None:
    """Create `topic` (one that exists already counts as created), asking again while the
    cluster's answer is retriable: a request that went to a controller that just stopped
    gets no answer, and the next one finds the new controller."""
    admin = AdminClient(dict(connection), logger=client_logger)
    new_topic = NewTopic(topic, num_partitions=partitions, replication_factor=replication_factor)
    deadline = time.monotonic() + timeout_s
    while True:
        request_timeout = max(1.0, min(30.0, deadline - time.monotonic()))
        futures = admin.create_topics(
            [new_topic],
            operation_timeout=min(20.0, request_timeout),
            request_timeout=request_timeout,
        )
        try:
            # librdkafka gives up at request_timeout; the margin only guards against a hang.
            futures[topic].result(timeout=request_timeout + 15)
            return
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return
            # Brokers that started side by side are in the metadata a moment before the
            # controller counts them: its "larger than available brokers" passes then.
            lagging_controller = error.code() == KafkaError.INVALID_REPLICATION_FACTOR and (
                _listed_brokers(admin) >= replication_factor
            )
            if not (
                error.retriable() or error.code() in RETRIABLE_CREATE_ERRORS or lagging_controller
            ):
                raise KaasError(f"cannot create topic {topic}: {error.str()}") from None
            reason = error.str()
        except FutureTimeout:
            reason = f"no answer within {request_timeout + 15:.0f} s"
        if time.monotonic() + 1 >= deadline:
            raise KaasError(f"cannot create topic {topic} within {timeout_s:.0f} s: {reason}")
        time.sleep(1)


def durable_producer(connection: Connection, **overrides: object) -> Producer:
    config: dict[str, object] = {
        **connection,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        "compression.type": "lz4",
        "delivery.timeout.ms": 120_000,
    }
    config.update(overrides)
    return Producer(config, logger=client_logger)


@dataclass
class ProduceResult:
    acknowledged: list[tuple[str, int, int, int]] = field(
        default_factory=list
    )  # key, seq, partition, offset
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0


def produce_keyed(
    producer: Producer,
    topic: str,
    messages: int,
    keys: int,
    key_prefix: str = "key",
    ledger: ProducedLedger | None = None,
) -> ProduceResult:
    """Produce `messages` numbered messages spread round robin over `keys` keys; each key's
    messages are numbered 0, 1, 2... (use another `key_prefix` for another batch on one topic).

    Every acknowledged message is counted in `ledger` (per topic, partition and window of
    its timestamp); without one, and with KAAS_PRODUCED_LEDGER_DIR set, in a ledger of
    this call written to that folder when the call ends.
    """
    result = ProduceResult()
    lock = threading.Lock()
    ledger_dir = os.environ.get(LEDGER_DIR_ENV)
    own_ledger = ledger is None and bool(ledger_dir)
    if ledger is None and ledger_dir:
        ledger = ProducedLedger(producer=f"workload-{key_prefix}")

    def delivered(error: KafkaError | None, message: Message) -> None:
        with lock:
            if error is not None:
                result.errors.append(error.str())
                return
            key, sequence = decode(message.value())
            partition = message.partition() or 0
            result.acknowledged.append((key, sequence, partition, message.offset() or 0))
            if ledger is not None:
                # The timestamp Kafka stores (CreateTime set by the client, or the broker's
                # LogAppendTime), so the audit puts Kafka's copy in the same window.
                ledger.record(message.topic() or topic, partition, message.timestamp()[1])

    started = time.monotonic()
    next_sequence = [0] * keys
    for index in range(messages):
        key_index = index % keys
        key = key_for(key_index, key_prefix)
        value = encode(key, next_sequence[key_index])
        next_sequence[key_index] += 1
        while True:
            try:
                producer.produce(topic, key=key.encode(), value=value, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    remaining = producer.flush(180)
    result.seconds = time.monotonic() - started
    if remaining:
        result.errors.append(f"{remaining} messages still undelivered after flush")
    if own_ledger and ledger is not None and ledger_dir:
        ledger.write(Path(ledger_dir) / f"{topic}-{key_prefix}-{uuid.uuid4().hex[:8]}.jsonl")
    return result


@dataclass
class ConsumeResult:
    records_by_consumer: list[list[tuple[str, int]]]
    seconds: float
    rebalances: int


def consume_group(
    connection: Connection,
    topic: str,
    group: str,
    consumers: int,
    expected: int,
    timeout: float = 180.0,
    client_config: Mapping[str, str | int | float | bool] | None = None,
) -> ConsumeResult:
    """Consume `expected` messages with `consumers` members of one group, one thread each.

    Members join one after another, so the group rebalances while they consume: each member
    commits what it has processed, synchronously, before a partition is taken from it, so
    that the next owner starts exactly where it stopped.
    """
    group_consumers = [
        Consumer(
            {
                **connection,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "partition.assignment.strategy": "cooperative-sticky",
                # The caller's own settings on top.
                **(client_config or {}),
            },
            logger=client_logger,
        )
        for _ in range(consumers)
    ]
    records: list[list[tuple[str, int]]] = [[] for _ in group_consumers]
    rebalances = [0]
    total = [0]
    lock = threading.Lock()
    stop = threading.Event()

    def on_assign(consumer: Consumer, partitions: list[TopicPartition]) -> None:
        with lock:
            rebalances[0] += 1

    def on_revoke(consumer: Consumer, partitions: list[TopicPartition]) -> None:
        try:
            consumer.commit(asynchronous=False)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._NO_OFFSET:
                raise

    def run(position: int, consumer: Consumer) -> None:
        while not stop.is_set():
            batch = consumer.consume(num_messages=1000, timeout=0.5)
            good = []
            for message in batch:
                if message.error() is not None:
                    continue
                good.append(decode(message.value()))
            if good:
                records[position].extend(good)
                consumer.commit(asynchronous=True)
                with lock:
                    total[0] += len(good)
                    if total[0] >= expected:
                        stop.set()

    started = time.monotonic()
    for consumer in group_consumers:
        consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    threads = [
        threading.Thread(target=run, args=(i, c), daemon=True, name=f"consumer-{i}")
        for i, c in enumerate(group_consumers)
    ]
    for thread in threads:
        thread.start()
    stop.wait(timeout)
    stop.set()
    for thread in threads:
        thread.join(10)
    for consumer in group_consumers:
        consumer.close()
    return ConsumeResult(records, time.monotonic() - started, rebalances[0])


@dataclass(frozen=True)
class Verification:
    expected: int
    received: int
    missing: int
    duplicates: int
    out_of_order_keys: int

    @property
    def exactly_once_in_order(self) -> bool:
        return self.missing == 0 and self.duplicates == 0 and self.out_of_order_keys == 0


def verify_per_key_order(
    sent_per_key: dict[str, int], records_by_consumer: Iterable[list[tuple[str, int]]]
) -> Verification:
    """Every key's sequence numbers 0..n-1 arrived once each, and in order within each consumer."""
    seen: dict[str, list[int]] = defaultdict(list)
    out_of_order: set[str] = set()
    for records in records_by_consumer:
        last: dict[str, int] = {}
        for key, sequence in records:
            if key in last and sequence <= last[key]:
                out_of_order.add(key)
            last[key] = sequence
            seen[key].append(sequence)
    missing = duplicates = received = 0
    for key, count in sent_per_key.items():
        sequences = seen.get(key, [])
        received += len(sequences)
        distinct = set(sequences)
        duplicates += len(sequences) - len(distinct)
        missing += sum(1 for s in range(count) if s not in distinct)
    unexpected = sum(len(v) for k, v in seen.items() if k not in sent_per_key)
    return Verification(
        expected=sum(sent_per_key.values()),
        received=received + unexpected,
        missing=missing,
        duplicates=duplicates + unexpected,
        out_of_order_keys=len(out_of_order),
    )


def read_back(
    connection: Connection,
    topic: str,
    acknowledged: Iterable[tuple[str, int, int, int]],
    group: str | None = None,
    client_config: Mapping[str, str | int | float | bool] | None = None,
    timeout: float = 180.0,
) -> Verification:
    """Read the topic from the start with a fresh group of one and check that every
    acknowledged (key, sequence, ...) message is there once, in order per key: the zero-loss
    check that closes the demo and every drill."""
    sent_per_key = Counter(key for key, _, _, _ in acknowledged)
    consumed = consume_group(
        connection,
        topic,
        group or f"{topic}-audit",
        1,
        expected=sum(sent_per_key.values()),
        timeout=timeout,
        client_config=client_config,
    )
    return verify_per_key_order(dict(sent_per_key), consumed.records_by_consumer)


class BackgroundProducer:
    """An acks=all idempotent producer writing keyed batches (`produce_keyed`) on a thread of
    its own until stopped: the load under which the demo and the drills replace, drain or
    lose brokers. Each batch uses its own key prefix, so every batch is checked on its own."""

    def __init__(
        self,
        connection: Connection,
        topic: str,
        batch_messages: int = 500,
        batch_keys: int = 10,
        pause_s: float = 0.2,
        ledger: ProducedLedger | None = None,
        client_config: Mapping[str, str | int | float | bool] | None = None,
    ) -> None:
        self.producer = durable_producer(connection, **dict(client_config or {}))
        self.topic = topic
        self.batch_messages = batch_messages
        self.batch_keys = batch_keys
        self.pause_s = pause_s
        self.ledger = ledger
        self.results: list[ProduceResult] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._produce, daemon=True, name="load-producer")

    def _produce(self) -> None:
        batch = 0
        while not self.stopping.is_set():
            self.results.append(
                produce_keyed(
                    self.producer,
                    self.topic,
                    self.batch_messages,
                    self.batch_keys,
                    key_prefix=f"b{batch}",
                    ledger=self.ledger,
                )
            )
            batch += 1
            self.stopping.wait(self.pause_s)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(240)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def acknowledged(self) -> list[tuple[str, int, int, int]]:
        return [a for r in self.results for a in r.acknowledged]

    @property
    def errors(self) -> list[str]:
        return [e for r in self.results for e in r.errors]

    @property
    def slowest_batch_s(self) -> float:
        return max((r.seconds for r in self.results), default=0.0)
