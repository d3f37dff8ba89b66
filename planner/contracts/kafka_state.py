"""What both planes read from Kafka itself: a partition's replicas and ISR, and the broker id
Kafka recorded on a data volume. One definition each, used by the agent's restart check and
by the management plane's drain and replication checks."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

META_PROPERTIES = "meta.properties"


@dataclass(frozen=True)
class PartitionState:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


def broker_id_in_meta_properties(content: str) -> int | None:
    """The `broker.id` of a meta.properties file's text (`node.id` in KRaft mode), None when it
    names none."""
    for line in content.splitlines():
        key, _, value = line.partition("=")
        if key.strip() in ("broker.id", "node.id") and value.strip().isdigit():
            return int(value.strip())
    return None


def volume_broker_id(log_dir: Path) -> int | None:
    """The broker id Kafka recorded in a log directory, once a broker has run on it."""
    try:
        content = (log_dir / META_PROPERTIES).read_text()
    except OSError:
        return None
    return broker_id_in_meta_properties(content)
