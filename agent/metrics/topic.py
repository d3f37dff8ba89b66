"""Creating one of KaaS's own topics (`_kaas_metrics`, `_kaas_logs`) from an agent: every
agent may try, the first wins, an existing topic is success. Brokers here do not
auto-create topics."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic


def ensure_topic(
    admin: AdminClient,
    topic: str,
    partitions: int,
    replication_factor: int,
    retention_ms: int,
    timeout_s: float,
) -> str | None:
    """None once the topic exists; otherwise why it could not be made (bounded by
    `timeout_s`). The caller keeps `admin` while the topic is missing: a client destroyed
    with its create request still in flight can crash librdkafka's thread."""
    new_topic = NewTopic(
        topic,
        num_partitions=partitions,
        replication_factor=replication_factor,
        config={"retention.ms": str(retention_ms)},
    )
    futures = admin.create_topics(
        [new_topic], operation_timeout=timeout_s, request_timeout=timeout_s
    )
    try:
        futures[topic].result(timeout=timeout_s)
    except KafkaException as exc:
        error = exc.args[0]
        if error.code() != KafkaError.TOPIC_ALREADY_EXISTS:
            return f"cannot create topic {topic}: {error.str()}"
    except Exception as exc:  # the future timed out: the cluster did not answer in time
        return f"cannot create topic {topic}: {exc or 'timed out'}"
    return None
