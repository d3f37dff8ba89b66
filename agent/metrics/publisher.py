"""MetricsPublisher: statsd gauges and one `_kaas_metrics` record per sample.

Nothing is created at import or construction: the statsd socket, the Kafka producer and
the topic check happen on the first publish(). publish() is bounded in time (the flush
waits at most `flush_timeout_s`; the topic check, made until it succeeds but at most once
per `topic_retry_s`, at most `topic_timeout_s`) and never raises for a network problem: it reports what did not go out in its result.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient
from statsd import StatsClient

from agent.metrics.gauges import statsd_gauges
from agent.metrics.record import MetricsSample
from agent.metrics.topic import ensure_topic
from planner.pki.client_settings import InternalClient

METRICS_TOPIC = "_kaas_metrics"
DEFAULT_RETENTION_MS = 7 * 24 * 3600 * 1000

# librdkafka reports every refused connection; an unreachable cluster is reported once per
# publish in the result instead.
_RDKAFKA_LOG = logging.getLogger("kaas.agent.metrics.rdkafka")
_RDKAFKA_LOG.setLevel(logging.CRITICAL)


@dataclass(frozen=True)
class PublishResult:
    gauges_sent: int
    """Gauges handed to the statsd socket (UDP: sent, not known to be received)."""
    record_bytes: int
    """Size of the record's JSON value."""
    delivered: bool
    """Kafka acknowledged the record within the flush bound."""
    problems: tuple[str, ...] = ()

    def sentence(self) -> str | None:
        """A cycle sentence when something did not go out; None when all did."""
        return f"metrics not published: {'; '.join(self.problems)}" if self.problems else None


@dataclass
class _Delivery:
    """The delivery report of the record one publish() waits for."""

    waiting: bool = True
    done: bool = False
    error: KafkaError | None = None


class MetricsPublisher:
    def __init__(
        self,
        statsd_host: str | None,
        statsd_port: int,
        prefix: str,
        kafka: InternalClient | None,
        topic: str = METRICS_TOPIC,
        *,
        flush_timeout_s: float = 2.0,
        create_topic: bool = True,
        topic_partitions: int = 6,
        topic_replication_factor: int = 3,
        topic_retention_ms: int = DEFAULT_RETENTION_MS,
        topic_timeout_s: float = 5.0,
        topic_retry_s: float = 300.0,
        producer_config: Mapping[str, object] | None = None,
    ) -> None:
        """`statsd_host` None: no statsd. `kafka` None: no Kafka record.
        `create_topic`: create the topic on the first publish if it does not exist (every
        agent may try; the first wins) - brokers here do not auto-create topics."""
        self.statsd_address = (statsd_host, statsd_port) if statsd_host else None
        self.prefix = prefix
        self.kafka = kafka
        self.topic = topic
        self.flush_timeout_s = flush_timeout_s
        self.create_topic = create_topic
        self.topic_partitions = topic_partitions
        self.topic_replication_factor = topic_replication_factor
        self.topic_retention_ms = topic_retention_ms
        self.topic_timeout_s = topic_timeout_s
        self.topic_retry_s = topic_retry_s
        self._topic_checked_at: float | None = None
        self.producer_config = dict(producer_config or {})
        self._statsd: StatsClient | None = None
        self._producer: Producer | None = None
        # Kept while the topic is missing: a client destroyed with its create request still
        # in flight (the cluster did not answer in time) can crash librdkafka's thread.
        self._admin: AdminClient | None = None
        self._topic_ready = not create_topic
        self._late_failures: list[str] = []
        self._closed = False

    def publish(
        self, sample: MetricsSample, extra: Sequence[tuple[str, float]] = ()
    ) -> PublishResult:
        """`extra`: more gauges (names without the prefix) for statsd only."""
        if self._closed:
            raise RuntimeError("MetricsPublisher.publish() after close()")
        problems: list[str] = []
        gauges_sent = self._send_gauges(sample, problems, extra)
        value = sample.to_json_bytes()
        delivered = self._produce(self.kafka, sample.key, value, problems) if self.kafka else False
        return PublishResult(gauges_sent, len(value), delivered, tuple(problems))

    def set_statsd_target(self, host: str | None, port: int) -> None:
        """Send the next gauges to `host:port` (None: no statsd); the socket is remade lazily."""
        address = (host, port) if host else None
        if address == self.statsd_address:
            return
        self.statsd_address = address
        if self._statsd is not None:
            self._statsd.close()
            self._statsd = None

    def close(self, timeout_s: float = 5.0) -> int:
        """Flush what is still queued (at most `timeout_s`) and release the sockets.
        Returns how many records were still undelivered."""
        self._closed = True
        undelivered = 0
        if self._producer is not None:
            undelivered = self._producer.flush(timeout_s)
            self._producer = None
        if self._statsd is not None:
            self._statsd.close()
            self._statsd = None
        return undelivered

    # -- statsd -----------------------------------------------------------------------------

    def _send_gauges(
        self, sample: MetricsSample, problems: list[str], extra: Sequence[tuple[str, float]]
    ) -> int:
        if self.statsd_address is None:
            return 0
        try:
            if self._statsd is None:
                host, port = self.statsd_address
                self._statsd = StatsClient(host, port, prefix=self.prefix)
            gauges = statsd_gauges(sample.record) + list(extra)
            # A pipeline packs many gauges per UDP datagram (up to 512 bytes each).
            with self._statsd.pipeline() as pipe:
                for name, value in gauges:
                    pipe.gauge(name, value)
            return len(gauges)
        except OSError as exc:  # the address does not resolve, no socket
            self._statsd = None
            problems.append(f"statsd {self.statsd_address[0]}:{self.statsd_address[1]}: {exc}")
            return 0

    # -- Kafka ------------------------------------------------------------------------------

    def _produce(
        self, kafka: InternalClient, key: bytes, value: bytes, problems: list[str]
    ) -> bool:
        if not self._topic_ready and (
            self._topic_checked_at is None
            or time.monotonic() - self._topic_checked_at >= self.topic_retry_s
        ):
            # While the cluster is unreachable, every publish would otherwise wait for the
            # topic check as well as for the flush.
            self._topic_checked_at = time.monotonic()
            self._ensure_topic(kafka, problems)
        if self._producer is None:
            self._producer = Producer(
                {
                    **kafka.librdkafka(),
                    "client.id": "kaas-agent-metrics",
                    "compression.type": "lz4",
                    # A record older than this is no longer worth sending; it also bounds
                    # how much piles up while the cluster is unreachable.
                    "message.timeout.ms": 120_000,
                    "queue.buffering.max.messages": 1000,
                    **self.producer_config,
                },
                logger=_RDKAFKA_LOG,
            )
        problems.extend(self._late_failures)
        self._late_failures.clear()
        delivery = _Delivery()

        def on_delivery(error: KafkaError | None, _message: Message) -> None:
            # librdkafka calls this from flush()/poll() on this thread, never concurrently.
            if delivery.waiting:
                delivery.done, delivery.error = True, error
            elif error is not None:  # a record an earlier publish stopped waiting for
                self._late_failures.append(f"an earlier record was not delivered: {error.str()}")

        try:
            self._producer.produce(self.topic, value=value, key=key, on_delivery=on_delivery)
        except BufferError:
            problems.append("Kafka producer queue full; record dropped")
            return False
        except KafkaException as exc:
            problems.append(f"Kafka produce to {self.topic} failed: {exc.args[0].str()}")
            return False
        self._producer.flush(self.flush_timeout_s)
        delivery.waiting = False
        if not delivery.done:
            problems.append(
                f"record to {self.topic} not acknowledged within {self.flush_timeout_s:g} s"
                " (still queued)"
            )
            return False
        if delivery.error is not None:
            problems.append(f"record to {self.topic} not delivered: {delivery.error.str()}")
            return False
        return True

    def _ensure_topic(self, kafka: InternalClient, problems: list[str]) -> None:
        if self._admin is None:
            self._admin = AdminClient(
                kafka.librdkafka(**{"socket.timeout.ms": 5000}), logger=_RDKAFKA_LOG
            )
        problem = ensure_topic(
            self._admin,
            self.topic,
            self.topic_partitions,
            self.topic_replication_factor,
            self.topic_retention_ms,
            self.topic_timeout_s,
        )
        if problem is not None:
            problems.append(problem)
            return
        self._topic_ready = True
