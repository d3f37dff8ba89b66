"""Kafka offsets for the audit's lag report, read with confluent-kafka's clients.

Spark's Kafka source reads records, not consumer groups, so the committed offsets, the
live members' assignments and the partitions' offset ranges come from here as plain rows; the lag itself is computed in
analytics.audit. Adapter only.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from analytics.errors import AnalyticsError
from planner.client_logs import client_logger
from planner.pki.client_settings import InternalClient

REQUEST_TIMEOUT_S = 30.0


class OffsetsError(AnalyticsError, RuntimeError):
    """Kafka did not answer an offsets request; the message names the request."""


@dataclass(frozen=True)
class PartitionOffsets:
    """A partition's offset range: the log start offset and the high watermark."""

    topic: str
    partition: int
    start_offset: int
    end_offset: int


@dataclass(frozen=True)
class CommittedOffset:
    group: str
    topic: str
    partition: int
    committed_offset: int | None


def partition_offsets(kafka: InternalClient, topics: Sequence[str]) -> list[PartitionOffsets]:
    """The low and high watermarks of every partition of `topics`."""
    consumer = Consumer(
        # A throwaway group id: this consumer never subscribes or commits.
        kafka.librdkafka(
            **{"group.id": f"kaas-analytics-offsets-{uuid.uuid4().hex[:8]}"},
            **{"enable.auto.commit": False},
        ),
        logger=client_logger,
    )
    try:
        metadata = consumer.list_topics(timeout=REQUEST_TIMEOUT_S)
        rows = []
        for topic in topics:
            topic_metadata = metadata.topics.get(topic)
            if topic_metadata is None or topic_metadata.error is not None:
                raise OffsetsError(f"topic {topic} is not in the cluster's metadata")
            for partition in sorted(topic_metadata.partitions):
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=REQUEST_TIMEOUT_S
                )
                rows.append(PartitionOffsets(topic, partition, int(low), int(high)))
        return rows
    except KafkaException as error:
        raise OffsetsError(
            f"reading the offset ranges of {', '.join(topics)}: {error.args[0]}"
        ) from error
    finally:
        consumer.close()


def consumer_groups(kafka: InternalClient) -> list[str]:
    """Every consumer group the cluster knows."""
    admin = AdminClient(kafka.librdkafka(), logger=client_logger)
    try:
        result = admin.list_consumer_groups(request_timeout=REQUEST_TIMEOUT_S).result()
    except KafkaException as error:
        raise OffsetsError(f"listing consumer groups: {error.args[0]}") from error
    return sorted(group.group_id for group in result.valid)


def committed_offsets(
    kafka: InternalClient, groups: Sequence[str], topics: Sequence[str]
) -> list[CommittedOffset]:
    """Committed offsets of `groups` on the partitions of `topics` they have committed on."""
    admin = AdminClient(kafka.librdkafka(), logger=client_logger)
    wanted = set(topics)
    rows = []
    for group in groups:
        # One group per request: the admin API accepts a single group per call.
        futures = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)], request_timeout=REQUEST_TIMEOUT_S
        )
        try:
            answer = futures[group].result()
        except KafkaException as error:
            raise OffsetsError(
                f"reading committed offsets of group {group}: {error.args[0]}"
            ) from error
        for partition in answer.topic_partitions or []:
            if partition.topic in wanted:
                offset = int(partition.offset)
                rows.append(
                    CommittedOffset(
                        group, partition.topic, partition.partition, offset if offset >= 0 else None
                    )
                )
    return rows


@dataclass(frozen=True)
class AssignedPartition:
    group: str
    topic: str
    partition: int


def assigned_partitions(
    kafka: InternalClient, groups: Sequence[str], topics: Sequence[str]
) -> list[AssignedPartition]:
    """The partitions of `topics` that the live members of `groups` hold now.

    A member that has not committed yet still shows which topics its group consumes.
    """
    if not groups:
        return []
    admin = AdminClient(kafka.librdkafka(), logger=client_logger)
    wanted = set(topics)
    futures = admin.describe_consumer_groups(list(groups), request_timeout=REQUEST_TIMEOUT_S)
    rows = []
    for group in groups:
        try:
            description = futures[group].result()
        except KafkaException as error:
            raise OffsetsError(f"describing consumer group {group}: {error.args[0]}") from error
        for member in description.members or []:
            assignment = member.assignment
            for partition in (assignment.topic_partitions if assignment else None) or []:
                if partition.topic in wanted:
                    rows.append(AssignedPartition(group, partition.topic, partition.partition))
    return sorted(set(rows), key=lambda row: (row.group, row.topic, row.partition))
