"""Kafka's reassignment API (KIP-455) through kafka-python's admin client: submit, list and
cancel partition reassignments, write the replication throttles, elect preferred leaders,
and the reads the executor's concurrency adjuster needs (ISR, min ISR, request queues).
Every call is one request of milliseconds, no JVM. An adapter: it decides nothing; the
moves and the throttle writes come from `agent.pipeline`.
"""

from __future__ import annotations

import logging
import ssl
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import structlog
from kafka import KafkaAdminClient, TopicPartition
from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType
from kafka.errors import KafkaError

from agent.brokerview import jolokia_read
from agent.errors import AgentError
from agent.kafka_client_settings import kafka_python_admin_settings
from agent.pipeline import ConfigChange, Move, PartitionKey, Reassigning, ResourceKind
from planner.pki.client_settings import InternalClient

log = structlog.get_logger("kaas.agent.reassign")

# kafka-python logs every refused connection and retry at WARNING: a broker restarting is a
# state the executor handles; its own log says what matters.
logging.getLogger("kafka").setLevel(logging.ERROR)

REQUEST_QUEUE_MBEAN = "kafka.network:type=RequestChannel,name=RequestQueueSize"
PREFERRED = 0


class ReassignmentAdminError(AgentError):
    """A reassignment request failed or timed out; the message names the request."""


class KafkaReassignmentAdmin:
    """One admin client for the elected planner, made on first use and kept."""

    def __init__(
        self,
        kafka: InternalClient,
        jolokia_port: int,
        jolokia_context: ssl.SSLContext | None = None,
    ) -> None:
        self.kafka = kafka  # the brokers and the identity the internal listener requires
        self.jolokia_port = jolokia_port
        # Jolokia answers only over HTTPS to a client presenting the nodes' certificate.
        self.jolokia_context = jolokia_context
        self._client: KafkaAdminClient | None = None
        self._lock = threading.Lock()

    def _admin(self) -> KafkaAdminClient:
        with self._lock:
            if self._client is None:
                try:
                    self._client = KafkaAdminClient(**kafka_python_admin_settings(self.kafka))
                except KafkaError as exc:
                    raise ReassignmentAdminError(
                        f"admin client to {self.kafka.bootstrap_servers}: {exc}"
                    ) from None
            return self._client

    def _call(self, what: str, call: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return call(self._admin(), *args, **kwargs)
        except (KafkaError, OSError) as exc:
            self.close()  # a broken connection is made again at the next call
            raise ReassignmentAdminError(f"{what} failed: {exc!r}") from None

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            try:
                client.close()
            except (KafkaError, OSError) as exc:
                log.debug("admin_close_failed", error=str(exc))

    # -- reassignments ------------------------------------------------------------------

    def reassigning(self) -> dict[PartitionKey, Reassigning]:
        """Every reassignment Kafka runs now."""
        answer = self._call(
            "list partition reassignments",
            lambda admin: admin.list_partition_reassignments(timeout_ms=10000),
        )
        return {
            (tp.topic, tp.partition): Reassigning(
                tuple(value["replicas"]),
                tuple(value["adding_replicas"]),
                tuple(value["removing_replicas"]),
            )
            for tp, value in answer.items()
        }

    def submit(self, moves: Sequence[Move]) -> dict[PartitionKey, str]:
        """Start the moves; returns the ones Kafka refused, with its error."""
        if not moves:
            return {}
        wanted = {TopicPartition(t, p): list(replicas) for t, p, replicas in moves}
        answer = self._call(
            "alter partition reassignments",
            lambda admin: admin.alter_partition_reassignments(wanted, timeout_ms=10000),
        )
        return {(tp.topic, tp.partition): err.__name__ for tp, err in answer.items() if err}

    def cancel(self, partitions: Iterable[PartitionKey]) -> dict[PartitionKey, str]:
        wanted = {TopicPartition(t, p): None for t, p in partitions}
        if not wanted:
            return {}
        answer = self._call(
            "cancel partition reassignments",
            lambda admin: admin.alter_partition_reassignments(wanted, timeout_ms=10000),
        )
        return {(tp.topic, tp.partition): err.__name__ for tp, err in answer.items() if err}

    def elect_preferred(self, partitions: Sequence[PartitionKey]) -> None:
        """Failures are logged, not raised: Kafka's own rebalance elects them later."""
        if not partitions:
            return
        by_topic: dict[str, list[int]] = {}
        for topic, number in partitions:
            by_topic.setdefault(topic, []).append(number)
        try:
            self._call(
                "elect preferred leaders",
                lambda admin: admin.elect_leaders(
                    PREFERRED, by_topic, timeout_ms=10000, raise_errors=False
                ),
            )
        except ReassignmentAdminError as exc:
            log.warning("preferred_leader_election_failed", error=str(exc))

    # -- throttles ------------------------------------------------------------------------

    def write_configs(self, changes: Sequence[ConfigChange]) -> None:
        """Incremental config writes: SET a value, DELETE where it is None."""
        if not changes:
            return
        resources = [
            ConfigResource(
                ConfigResourceType.TOPIC
                if change.kind is ResourceKind.TOPIC
                else ConfigResourceType.BROKER,
                change.name,
                {
                    key: (AlterConfigOp.DELETE, None)
                    if value is None
                    else (AlterConfigOp.SET, value)
                    for key, value in change.values
                },
            )
            for change in changes
        ]
        answer = self._call(
            "write throttle configs",
            lambda admin: admin.alter_configs(resources, raise_on_unknown=False, incremental=True),
        )
        failed = {
            f"{kind} {name}": result
            for kind, by_name in answer.items()
            for name, result in by_name.items()
            if result != "OK"
        }
        if failed:
            raise ReassignmentAdminError(f"throttle configs refused: {failed}")

    def throttle_configs(self, topics: Iterable[str], brokers: Iterable[int]) -> dict[str, str]:
        """The throttle keys set on these topics and brokers ("topic t key" -> value): what
        a finished plan must have left empty."""
        resources = [ConfigResource(ConfigResourceType.TOPIC, t) for t in sorted(set(topics))]
        resources += [
            ConfigResource(ConfigResourceType.BROKER, str(b)) for b in sorted(set(brokers))
        ]
        if not resources:
            return {}
        answer = self._call(
            "describe throttle configs",
            lambda admin: admin.describe_configs(resources, config_filter="all"),
        )
        found: dict[str, str] = {}
        for kind, by_name in answer.items():
            for name, entries in by_name.items():
                if not isinstance(entries, Mapping):
                    continue
                for key, entry in entries.items():
                    if not isinstance(entry, Mapping) or "replication.throttled" not in key:
                        continue
                    value = entry.get("value")
                    # Set by someone (not a default or the static file): a dynamic config.
                    if value and str(entry.get("config_source", "")).startswith("DYNAMIC"):
                        found[f"{kind} {name} {key}"] = str(value)
        return found

    # -- what the concurrency adjuster reads ---------------------------------------------

    def isr(self) -> dict[PartitionKey, tuple[tuple[int, ...], tuple[int, ...]]]:
        """(replicas, ISR) of every partition."""
        topics = self._call("describe topics", lambda admin: admin.describe_topics())
        return {
            (topic["name"], p["partition_index"]): (
                tuple(p["replica_nodes"]),
                tuple(p["isr_nodes"]),
            )
            for topic in topics
            for p in topic["partitions"]
        }

    def min_isr(self, topics: Iterable[str]) -> dict[str, int]:
        wanted = sorted(set(topics))
        if not wanted:
            return {}
        resources = [
            ConfigResource(ConfigResourceType.TOPIC, t, ["min.insync.replicas"]) for t in wanted
        ]
        answer = self._call(
            "describe min ISR",
            lambda admin: admin.describe_configs(resources, config_filter="all"),
        )
        found: dict[str, int] = {}
        for name, entries in answer.get("topic", {}).items():
            entry = entries.get("min.insync.replicas") if isinstance(entries, Mapping) else None
            value = entry.get("value") if isinstance(entry, Mapping) else entry
            if value is not None:
                found[name] = int(value)
        return found

    def request_queues(self) -> dict[int, int]:
        """Each broker's request queue length through Jolokia; a broker that does not answer
        is left out (its ISR effect shows up instead)."""
        cluster = self._call("describe cluster", lambda admin: admin.describe_cluster())
        queues: dict[int, int] = {}
        for broker in cluster.get("brokers", []):
            scheme = "http" if self.jolokia_context is None else "https"
            url = f"{scheme}://{broker['host']}:{self.jolokia_port}/jolokia/"
            try:
                value = jolokia_read(url, REQUEST_QUEUE_MBEAN, self.jolokia_context, timeout=2.0)
            except (OSError, RuntimeError, ValueError):
                continue
            queues[int(broker["broker_id"])] = int(
                value["Value"] if isinstance(value, dict) else value
            )
        return queues
