"""The KRaft controller quorum read through the brokers: one DescribeQuorum request
(kafka-python; a broker forwards it to the active controller) takes milliseconds, where
Kafka's kafka-metadata-quorum tool is a JVM of about 2 s of CPU per run. An adapter both
planes use; a caller falls back to the tool when no broker answers (controllers up before
their brokers, every broker down), since kafka-python cannot bootstrap from a controller.
"""

from __future__ import annotations

import logging

from planner.contracts.kraft_quorum_state import QuorumReplica, QuorumStatus, parse_describe_quorum
from planner.errors import PlannerError
from planner.pki.client_settings import InternalClient

# kafka-python logs each refused connection at WARNING; a failed read is said by its caller.
logging.getLogger("kafka").setLevel(logging.ERROR)

READ_TIMEOUT_MS = 5000


class QuorumReadError(PlannerError):
    """The brokers gave no DescribeQuorum answer; the message says what failed."""


def describe_quorum_through_brokers(
    kafka: InternalClient, now_ms: int, timeout_ms: int = READ_TIMEOUT_MS
) -> tuple[QuorumStatus, tuple[QuorumReplica, ...]]:
    """The quorum's leader, high watermark and replicas, from one answer."""
    # Imported here: kafka-python takes a seventh of a second to import, and `kaas status`
    # of a ZooKeeper-mode cluster never reads a quorum.
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    settings = {
        **kafka.kafka_python(),
        "client_id": "kaas-quorum-reader",
        "request_timeout_ms": timeout_ms,
        "bootstrap_timeout_ms": timeout_ms,
    }
    try:
        admin = KafkaAdminClient(**settings)
    except (KafkaError, OSError, ValueError) as exc:
        raise QuorumReadError(f"no broker of {kafka.bootstrap_servers} answered: {exc!r}") from None
    try:
        answer = admin.describe_metadata_quorum()
    except (KafkaError, OSError, ValueError) as exc:
        raise QuorumReadError(f"DescribeQuorum through the brokers failed: {exc!r}") from None
    finally:
        admin.close()
    return parse_describe_quorum(answer, now_ms)
