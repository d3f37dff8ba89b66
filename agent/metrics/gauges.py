"""The statsd gauges of one metrics record. Pure.

Names, under the publisher's prefix (default "kaas", as analytics' own gauges):

    <cluster>.brokers.<id>.<broker field>          e.g. kaas.prod.brokers.2.bytes_in_per_s
    <cluster>.brokers.<id>.host.<host field>
    <cluster>.brokers.<id>.topics.<topic>.<field>
    <cluster>.brokers.<id>.read_errors              how many reads failed this interval

Per-partition values go to the Kafka topic only: thousands of partitions would be
thousands of Graphite series per broker, and partitions move between brokers.
Null values send nothing (statsd has no null); read_errors says why they are missing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# Graphite splits names at dots, statsd's line format reserves ':' '|' '@': topic names
# (which may hold dots) and cluster names become one safe path segment each.
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def segment(text: str) -> str:
    """One Graphite path segment: every character outside [A-Za-z0-9_-] becomes '_'."""
    return _UNSAFE.sub("_", text) or "_"


def statsd_gauges(record: Mapping[str, Any]) -> list[tuple[str, float]]:
    """(name without the prefix, value) for every non-null number of the record."""
    base = f"{segment(str(record['cluster']))}.brokers.{record['broker_id']}"
    gauges: list[tuple[str, float]] = []

    def add(name: str, value: object) -> None:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            gauges.append((name, float(value)))

    for name, value in record.get("broker", {}).items():
        add(f"{base}.{name}", value)
    for name, value in record.get("host", {}).items():
        add(f"{base}.host.{name}", value)
    for entry in record.get("topics", []):
        topic = segment(str(entry["topic"]))
        for name, value in entry.items():
            if name != "topic":
                add(f"{base}.topics.{topic}.{name}", value)
    add(f"{base}.read_errors", len(record.get("errors", [])))
    return gauges


def extra_gauges(
    cluster: str,
    broker_id: int,
    zookeeper: Mapping[str, float],
    agent: Mapping[str, float],
    lags: Mapping[str, Any],
    log_rates: Mapping[str, float] | None = None,
) -> list[tuple[str, float]]:
    """The gauges beside the record's: the VM's ZooKeeper server, the agent's own figures
    (from the elected planner only) every consumer group's lag, and the VM's log entries of
    the error classes per minute.

        <cluster>.brokers.<id>.zookeeper.<name>
        <cluster>.brokers.<id>.agent.<name>
        <cluster>.brokers.<id>.logs.{errors_per_minute,<class>_per_minute}
        <cluster>.groups.<group>.{lag,max_partition_lag,partitions}
    """
    base = f"{segment(cluster)}.brokers.{broker_id}"
    gauges = [(f"{base}.zookeeper.{k}", float(v)) for k, v in sorted(zookeeper.items())]
    gauges += [(f"{base}.agent.{k}", float(v)) for k, v in sorted(agent.items())]
    gauges += [(f"{base}.logs.{k}", float(v)) for k, v in sorted((log_rates or {}).items())]
    for group, lag in sorted(lags.items()):
        name = f"{segment(cluster)}.groups.{segment(group)}"
        gauges += [
            (f"{name}.lag", float(lag.total)),
            (f"{name}.max_partition_lag", float(lag.max_partition)),
            (f"{name}.partitions", float(lag.partitions)),
        ]
    return gauges
