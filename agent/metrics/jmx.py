"""The JMX values one metrics record needs, as one Jolokia bulk read, and the parsing of
Jolokia's answer into plain values. Pure: no I/O here (the HTTP call is in jolokia.py).

Every read asks for a list of attributes, even a single one, so that Jolokia's answer has
one shape per kind of read (protocol 8.x):

- an exact MBean name: ``{"Attr": value, ...}``
- a pattern (``*`` in the name): ``{"<object name>": {"Attr": value, ...}, ...}``

A pattern that matches nothing answers 404 InstanceNotFoundException. For the per-topic and
per-partition patterns that is a normal state (a broker with no partitions yet), so it is
read as "no MBeans", not as a failed read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

METER = ("Count", "OneMinuteRate")
"""Yammer meters: the counter (rates are computed from its deltas) and the meter's own
one-minute rate (the fallback when there is no previous counter to compare with)."""
GAUGE = ("Value",)
PERCENTILE_99 = ("99thPercentile",)
"""Yammer histograms (request times): the 99th percentile over the histogram's window."""


@dataclass(frozen=True)
class JmxRead:
    """One read request of the bulk read."""

    key: str
    """Short name the record builder looks the result up by."""
    mbean: str
    """An exact ObjectName, or a pattern (``,*`` matches any further key properties)."""
    attributes: tuple[str, ...]
    fills: str
    """The record field(s) this read fills: named in `errors[].metric` when it fails."""

    @property
    def is_pattern(self) -> bool:
        return "*" in self.mbean or "?" in self.mbean

    def request(self) -> dict[str, Any]:
        """This read in Jolokia's JSON request format."""
        return {"type": "read", "mbean": self.mbean, "attribute": list(self.attributes)}


_REPLICA_MANAGER = "kafka.server:type=ReplicaManager"
_CONTROLLER = "kafka.controller:type=KafkaController"
_BROKER_TOPIC = "kafka.server:type=BrokerTopicMetrics"

JMX_READS: tuple[JmxRead, ...] = (
    JmxRead(
        "under_replicated_partitions",
        f"{_REPLICA_MANAGER},name=UnderReplicatedPartitions",
        GAUGE,
        "broker.under_replicated_partitions",
    ),
    JmxRead(
        "offline_partitions_count",
        f"{_CONTROLLER},name=OfflinePartitionsCount",
        GAUGE,
        "broker.offline_partitions_count",
    ),
    JmxRead(
        "active_controller_count",
        f"{_CONTROLLER},name=ActiveControllerCount",
        GAUGE,
        "broker.active_controller_count",
    ),
    JmxRead(
        "isr_shrinks",
        f"{_REPLICA_MANAGER},name=IsrShrinksPerSec",
        METER,
        "broker.isr_shrinks_per_s",
    ),
    JmxRead(
        "isr_expands",
        f"{_REPLICA_MANAGER},name=IsrExpandsPerSec",
        METER,
        "broker.isr_expands_per_s",
    ),
    # The broker-wide MBean has no topic= property; `,*` also matches it, so one pattern
    # gives the broker-wide value and every topic's.
    JmxRead(
        "bytes_in",
        f"{_BROKER_TOPIC},name=BytesInPerSec,*",
        METER,
        "broker.bytes_in_per_s, topics[].bytes_in_per_s",
    ),
    JmxRead(
        "bytes_out",
        f"{_BROKER_TOPIC},name=BytesOutPerSec,*",
        METER,
        "broker.bytes_out_per_s, topics[].bytes_out_per_s",
    ),
    JmxRead(
        "messages_in",
        f"{_BROKER_TOPIC},name=MessagesInPerSec,*",
        METER,
        "broker.messages_in_per_s, topics[].messages_in_per_s",
    ),
    JmxRead(
        "replication_bytes_in",
        f"{_BROKER_TOPIC},name=ReplicationBytesInPerSec",
        METER,
        "broker.replication_bytes_in_per_s",
    ),
    JmxRead(
        "replication_bytes_out",
        f"{_BROKER_TOPIC},name=ReplicationBytesOutPerSec",
        METER,
        "broker.replication_bytes_out_per_s",
    ),
    # A meter whose Count is idle nanoseconds per handler thread (rate unit NANOSECONDS):
    # its Count delta over the elapsed nanoseconds is the idle fraction of the interval.
    JmxRead(
        "request_handler_idle",
        "kafka.server:type=KafkaRequestHandlerPool,name=RequestHandlerAvgIdlePercent",
        METER,
        "broker.request_handler_avg_idle_percent",
    ),
    JmxRead(
        "network_processor_idle",
        "kafka.network:type=SocketServer,name=NetworkProcessorAvgIdlePercent",
        GAUGE,
        "broker.network_processor_avg_idle_percent",
    ),
    JmxRead("leader_count", f"{_REPLICA_MANAGER},name=LeaderCount", GAUGE, "broker.leader_count"),
    JmxRead(
        "under_min_isr_partition_count",
        f"{_REPLICA_MANAGER},name=UnderMinIsrPartitionCount",
        GAUGE,
        "broker.under_min_isr_partition_count",
    ),
    JmxRead(
        "offline_log_directory_count",
        "kafka.log:type=LogManager,name=OfflineLogDirectoryCount",
        GAUGE,
        "broker.offline_log_directory_count",
    ),
    JmxRead(
        "produce_time_p99",
        "kafka.network:type=RequestMetrics,name=TotalTimeMs,request=Produce",
        PERCENTILE_99,
        "broker.produce_total_time_ms_p99",
    ),
    JmxRead(
        "fetch_consumer_time_p99",
        "kafka.network:type=RequestMetrics,name=TotalTimeMs,request=FetchConsumer",
        PERCENTILE_99,
        "broker.fetch_consumer_total_time_ms_p99",
    ),
    JmxRead(
        "partition_count",
        f"{_REPLICA_MANAGER},name=PartitionCount",
        GAUGE,
        "broker.partition_count",
    ),
    JmxRead(
        "log_size",
        "kafka.log:type=Log,name=Size,*",
        GAUGE,
        "partitions[].size_bytes, broker.log_size_bytes",
    ),
    JmxRead(
        "log_end_offset",
        "kafka.log:type=Log,name=LogEndOffset,*",
        GAUGE,
        "partitions[].log_end_offset",
    ),
    # Kafka's Partition.ReplicasCount is the replication factor on the partition's leader
    # and 0 on its followers: the one JMX value that tells leadership per partition.
    JmxRead(
        "replicas_count",
        "kafka.cluster:type=Partition,name=ReplicasCount,*",
        GAUGE,
        "partitions[].leader",
    ),
    JmxRead(
        "log_cleaner_time_since_last_run",
        "kafka.log:type=LogCleanerManager,name=time-since-last-run-ms",
        GAUGE,
        "broker.log_cleaner_time_since_last_run_ms",
    ),
)

CONTROLLER_READ_KEYS: frozenset[str] = frozenset(
    {"offline_partitions_count", "active_controller_count"}
)
"""Reads of the controller's MBeans: on a KRaft cluster they exist only in a controller
process (brokers register none), so they are read from the VM's controller, if it runs one."""


def split_reads(
    reads: Sequence[JmxRead], kraft: bool
) -> tuple[tuple[JmxRead, ...], tuple[JmxRead, ...]]:
    """(the broker's reads, the controller's): in ZooKeeper mode the broker that is the
    controller has every MBean, so everything is the broker's."""
    if not kraft:
        return tuple(reads), ()
    return (
        tuple(r for r in reads if r.key not in CONTROLLER_READ_KEYS),
        tuple(r for r in reads if r.key in CONTROLLER_READ_KEYS),
    )


MBeanValues = Mapping[str, Mapping[str, Any]]
"""Object name -> attribute name -> value, as Jolokia returned it."""


@dataclass(frozen=True)
class JmxResult:
    """What one bulk read returned: the values of each read that answered, and why the
    others did not."""

    values: Mapping[str, MBeanValues] = field(default_factory=dict)
    """Read key -> the MBeans it returned (an exact read returns its one MBean)."""
    failures: Mapping[str, str] = field(default_factory=dict)
    """Read key -> why that read failed."""
    unreachable: str | None = None
    """Set when the bulk read as a whole failed (no answer, bad answer): why."""

    @classmethod
    def failed(cls, reason: str) -> JmxResult:
        return cls(unreachable=reason)


def bulk_request(reads: Sequence[JmxRead]) -> list[dict[str, Any]]:
    """The JSON body of the one POST that reads everything."""
    return [read.request() for read in reads]


def parse_bulk_response(reads: Sequence[JmxRead], body: object) -> JmxResult:
    """Jolokia answers a bulk request with one response per request, in request order."""
    if not isinstance(body, list):
        return JmxResult.failed(f"Jolokia answered {_describe(body)} to a bulk read, not a list")
    if len(body) != len(reads):
        return JmxResult.failed(
            f"Jolokia answered {len(body)} responses to a bulk read of {len(reads)} requests"
        )
    values: dict[str, MBeanValues] = {}
    failures: dict[str, str] = {}
    for read, response in zip(reads, body, strict=True):
        outcome = _parse_one(read, response)
        if isinstance(outcome, str):
            failures[read.key] = outcome
        else:
            values[read.key] = outcome
    return JmxResult(values=values, failures=failures)


def _parse_one(read: JmxRead, response: object) -> MBeanValues | str:
    """The MBeans one read returned, or why it failed (a string)."""
    if not isinstance(response, dict):
        return f"{read.mbean}: Jolokia answered {_describe(response)}, not a response object"
    status = response.get("status")
    if status != 200:
        error_type = str(response.get("error_type", "")).rsplit(".", 1)[-1]
        if read.is_pattern and status == 404 and error_type == "InstanceNotFoundException":
            return {}
        error = response.get("error") or "no error message"
        return f"{read.mbean}: status {status} {error_type}: {error}".replace(" :", ":")
    value = response.get("value")
    if not isinstance(value, dict):
        return f"{read.mbean}: expected attribute values, got {_describe(value)}"
    if not read.is_pattern:
        return {read.mbean: value}
    mbeans = {name: attrs for name, attrs in value.items() if isinstance(attrs, dict)}
    if len(mbeans) != len(value):
        return f"{read.mbean}: expected an object per matching MBean"
    return mbeans


def object_name_properties(name: str) -> dict[str, str]:
    """The key properties of a JMX ObjectName: "d:type=Log,topic=t" -> {type: Log, topic: t}.

    Values Kafka quotes (none of its topic names need it) are unquoted."""
    _, _, properties = name.partition(":")
    result = {}
    for pair in properties.split(","):
        key, separator, value = pair.partition("=")
        if separator:
            if len(value) >= 2 and value[0] == value[-1] == '"':
                value = value[1:-1]
            result[key] = value
    return result


def _describe(value: object) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:80]}{'...' if len(text) > 80 else ''}"


def merge_results(
    broker: JmxResult, controller: JmxResult, controller_reads: Sequence[JmxRead]
) -> JmxResult:
    """One result of the broker's and the controller's reads: an unreachable controller is a
    failure of each of its reads (the broker's values stay), and the other way round."""
    failures = {**broker.failures, **controller.failures}
    if controller.unreachable is not None:
        failures.update({read.key: controller.unreachable for read in controller_reads})
    return JmxResult(
        values={**broker.values, **controller.values},
        failures=failures,
        unreachable=broker.unreachable,
    )
