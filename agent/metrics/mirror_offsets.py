"""The end offsets a flow's lag is computed from (thin adapter: no decisions).

The source is read with the flow's own source credentials (the `kaas-mirror` identity,
whose read-only bindings include Describe on the flow's topics, all ListOffsets needs), the
target with the VM's identity. One admin client per cluster is kept across reads: a client
destroyed with a request in flight can crash librdkafka's thread.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from agent.metrics.mirror_lag import OffsetSync, latest_syncs, offset_syncs_topic
from agent.ports import StoreUnavailable
from planner.contracts.mirror_flow import MirrorFlow, filter_matches
from planner.contracts.vm_config.mirror import MirrorEndpoint
from planner.pki.client_settings import SSL, InternalClient

Partition = tuple[str, int]

# MirrorMaker's default `topics.exclude`: such topics are never mirrored, so never lag.
_NEVER_MIRRORED = re.compile(r".*[\-.]internal|.*\.replica|__.*")

_RDKAFKA_LOG = logging.getLogger("kaas.agent.metrics.mirror.rdkafka")
_RDKAFKA_LOG.setLevel(logging.CRITICAL)


class MirrorOffsetsUnreadable(StoreUnavailable):
    """A cluster did not answer for its topics or end offsets."""


def mirrored_source_topic(flow: MirrorFlow, topic: str) -> bool:
    return filter_matches(flow.topics, topic) and not _NEVER_MIRRORED.fullmatch(topic)


class KafkaMirrorOffsets:
    def __init__(self, target: InternalClient, timeout_s: float = 5.0) -> None:
        self.target_client = target
        self.timeout_s = timeout_s
        self._target: AdminClient | None = None
        self._sources: dict[tuple[str, str, str], AdminClient] = {}
        self._sync_readers: dict[str, Consumer] = {}
        self._syncs: dict[str, dict[Partition, OffsetSync]] = {}

    def _admin(self, config: dict[str, str | int | float | bool]) -> AdminClient:
        return AdminClient(
            {**config, "socket.timeout.ms": int(self.timeout_s * 1000)}, logger=_RDKAFKA_LOG
        )

    def _source_admin(self, endpoint: MirrorEndpoint) -> AdminClient:
        key = (endpoint.bootstrap_servers, endpoint.tls.keystore, endpoint.tls.truststore)
        if key not in self._sources:
            self._sources[key] = self._admin(
                {
                    "bootstrap.servers": endpoint.bootstrap_servers,
                    "security.protocol": SSL,
                    "ssl.ca.location": endpoint.tls.truststore,
                    # One PEM file holds the key and the certificate; each reader takes its own.
                    "ssl.certificate.location": endpoint.tls.keystore,
                    "ssl.key.location": endpoint.tls.keystore,
                    "ssl.endpoint.identification.algorithm": "https",
                }
            )
        return self._sources[key]

    def source_ends(self, flow: MirrorFlow, endpoint: MirrorEndpoint) -> dict[Partition, int]:
        """The end offset of every partition of the source topics the flow mirrors."""
        return self._ends(
            self._source_admin(endpoint),
            lambda topic: mirrored_source_topic(flow, topic),
            f"source {flow.source.alias}",
        )

    def target_ends(self, alias: str) -> dict[Partition, int]:
        """The end offset of every partition of the topics mirrored from `alias`."""
        if self._target is None:
            self._target = self._admin(self.target_client.librdkafka())
        return self._ends(self._target, lambda topic: topic.startswith(f"{alias}."), "target")

    def _ends(
        self, admin: AdminClient, wanted: Callable[[str], bool], what: str
    ) -> dict[Partition, int]:
        try:
            metadata = admin.list_topics(timeout=self.timeout_s)
            partitions = [
                TopicPartition(name, p)
                for name, topic in metadata.topics.items()
                if topic.error is None and wanted(name)
                for p in topic.partitions
            ]
            if not partitions:
                return {}
            futures = admin.list_offsets(
                {tp: OffsetSpec.latest() for tp in partitions}, request_timeout=self.timeout_s
            )
            return {
                (tp.topic, tp.partition): future.result().offset for tp, future in futures.items()
            }
        except (KafkaException, RuntimeError) as exc:
            raise MirrorOffsetsUnreadable(f"{what}: {exc}") from None

    def offset_syncs(self, alias: str) -> dict[Partition, OffsetSync]:
        """The latest offset sync per source partition of `alias`: the offset-syncs topic
        read on from where the last call stopped (from its start the first time), up to its
        end as it was at the call."""
        topic = offset_syncs_topic(alias)
        reader = self._sync_readers.get(alias)
        try:
            if reader is None:
                settings: dict[str, str | int | float | bool] = {
                    # Never subscribes nor commits: the id only satisfies the client.
                    "group.id": "kaas-agent-mirror-lag",
                    "enable.auto.commit": False,
                    "socket.timeout.ms": int(self.timeout_s * 1000),
                }
                reader = Consumer(self.target_client.librdkafka(**settings), logger=_RDKAFKA_LOG)
                reader.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
                self._sync_readers[alias] = reader
            _, end = reader.get_watermark_offsets(
                TopicPartition(topic, 0), timeout=self.timeout_s, cached=False
            )
            known = self._syncs.get(alias, {})
            records: list[tuple[bytes | None, bytes | None]] = []
            position = reader.position([TopicPartition(topic, 0)])[0].offset
            while position < end:
                batch = reader.consume(num_messages=10_000, timeout=self.timeout_s)
                if not batch:
                    break
                for message in batch:
                    if message.error() is None:
                        records.append((message.key(), message.value()))
                        position = max(position, (message.offset() or 0) + 1)
            self._syncs[alias], _ = latest_syncs(known, records)
        except KafkaException as exc:
            if "UNKNOWN_TOPIC" in str(exc) or "UNKNOWN_PARTITION" in str(exc):
                return {}  # MirrorMaker has mirrored nothing yet
            raise MirrorOffsetsUnreadable(f"offset syncs of {alias}: {exc}") from None
        return dict(self._syncs[alias])
