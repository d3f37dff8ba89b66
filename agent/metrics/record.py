"""Build one `_kaas_metrics` record (schema v1, analytics/schemas/metrics-v1.schema.json)
from raw JMX values and raw host values. Pure: the readings come in, the record, its read
errors and the baseline for the next interval's rates go out.

Rates: the schema asks for per-second rates averaged over the agent's interval, so a rate
is the delta of the MBean's counter since the previous collect divided by the seconds in
between. With no previous counter (the first collect, a topic new since the last one) or a
counter that went backwards (the broker restarted), the meter's own one-minute rate
stands in. CPU is the same: busy over total CPU time since the previous collect, or since
boot on the first one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from agent.metrics.jmx import JMX_READS, JmxRead, JmxResult, object_name_properties

SCHEMA_VERSION = 1
ErrorSource = Literal["jmx", "psutil", "admin"]

_READS_BY_KEY: dict[str, JmxRead] = {read.key: read for read in JMX_READS}
_NANOSECONDS_PER_SECOND = 1e9


@dataclass(frozen=True)
class ReadError:
    """One failed read: an entry of the record's `errors`."""

    source: ErrorSource
    metric: str | None
    """The record field(s) left null; None when the failure left every field of its source null."""
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "metric": self.metric, "message": self.message}


@dataclass(frozen=True)
class BrokerIdentity:
    cluster: str
    broker_id: int
    rack: str | None
    agent_version: str | None = None


@dataclass(frozen=True)
class HostReading:
    """Raw psutil values; None where the read failed (the failure is in `errors`)."""

    cpu_busy_s: float | None = None
    cpu_total_s: float | None = None
    """CPU seconds since boot, summed over cores: busy, and busy plus idle."""
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    log_dir_used_bytes: int | None = None
    log_dir_free_bytes: int | None = None
    network_bytes_sent: int | None = None
    network_bytes_recv: int | None = None
    errors: tuple[ReadError, ...] = ()


@dataclass(frozen=True)
class Baseline:
    """What the next collect compares its counters with."""

    at_s: float
    """Monotonic clock seconds of the collect that read these counters."""
    counters: Mapping[str, float] = field(default_factory=dict)
    """Counter id ("<read key>" or "<read key>|<topic>") -> the MBean's Count."""
    cpu_busy_s: float | None = None
    cpu_total_s: float | None = None


@dataclass(frozen=True)
class MetricsSample:
    """One collect's outcome: the JSON record, and its read errors as objects."""

    record: dict[str, Any]
    errors: tuple[ReadError, ...]
    collect_s: float = 0.0
    """Seconds the collect took (Jolokia and psutil reads included)."""

    @property
    def broker_id(self) -> int:
        broker_id: int = self.record["broker_id"]
        return broker_id

    @property
    def key(self) -> bytes:
        """The Kafka record key: the broker id as decimal text."""
        return str(self.broker_id).encode()

    @property
    def jmx_answered(self) -> bool:
        """Whether Jolokia answered the bulk read at all (some reads may still have failed)."""
        return not any(e.source == "jmx" and e.metric is None for e in self.errors)

    def to_json_bytes(self) -> bytes:
        """The Kafka record value. NaN and infinity never get here: the builder makes them null."""
        return json.dumps(self.record, separators=(",", ":"), allow_nan=False).encode()

    def sentence(self) -> str | None:
        """A cycle sentence about the failed reads; None when every read worked."""
        if not self.errors:
            return None
        sources = sorted({e.source for e in self.errors})
        first = self.errors[0]
        reads = "read" if len(self.errors) == 1 else "reads"
        return (
            f"metrics: {len(self.errors)} {'/'.join(sources)} {reads} failed"
            f" ({first.metric or 'all'}: {first.message})"
        )


@dataclass(frozen=True)
class BuiltRecord:
    record: dict[str, Any]
    errors: tuple[ReadError, ...]
    baseline: Baseline


# -- value checks: JSON from Jolokia may hold anything; the record holds only valid values --


def as_count(value: object) -> int | None:
    """A non-negative integer, or None. Integral floats are accepted (some gauges are doubles)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer() and value >= 0:
        return int(value)
    return None


def as_rate(value: object) -> float | None:
    """A finite non-negative number as a float, or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) and number >= 0 else None


def clamp01(value: float | None) -> float | None:
    """Idle fractions: Kafka's averages can overshoot 1 by rounding; the schema allows 0..1."""
    return None if value is None else min(max(value, 0.0), 1.0)


def counter_rate(
    count: float | None,
    one_minute_rate: float | None,
    previous_count: float | None,
    elapsed_s: float | None,
    counter_scale: float = 1.0,
) -> float | None:
    """Per-second rate over the interval from a counter (times `counter_scale`, the unit of
    one count in the rate's unit), else the meter's one-minute rate."""
    if (
        count is not None
        and previous_count is not None
        and elapsed_s is not None
        and elapsed_s > 0
        and count >= previous_count
    ):
        return (count - previous_count) / elapsed_s * counter_scale
    return one_minute_rate


def cpu_percent(
    busy_s: float | None,
    total_s: float | None,
    previous_busy_s: float | None,
    previous_total_s: float | None,
) -> float | None:
    """Busy share of CPU time (0..100) since the previous reading, or since boot."""
    if busy_s is None or total_s is None:
        return None
    if previous_busy_s is not None and previous_total_s is not None and total_s > previous_total_s:
        busy_s, total_s = busy_s - previous_busy_s, total_s - previous_total_s
    if total_s <= 0:
        return None
    return min(max(100.0 * busy_s / total_s, 0.0), 100.0)


# -- the builder ------------------------------------------------------------------------------


class _Builder:
    """Holds one build's inputs and collects its errors and counters as it goes."""

    def __init__(self, jmx: JmxResult, previous: Baseline | None, at_s: float) -> None:
        self.jmx = jmx
        self.previous = previous
        self.elapsed_s = at_s - previous.at_s if previous is not None else None
        self.errors: list[ReadError] = []
        self.counters: dict[str, float] = {}
        if jmx.unreachable is not None:
            self.errors.append(ReadError("jmx", None, jmx.unreachable))
        for key, reason in jmx.failures.items():
            self.errors.append(ReadError("jmx", _READS_BY_KEY[key].fills, reason))

    def mbeans(self, key: str) -> Mapping[str, Mapping[str, Any]] | None:
        """The MBeans a read returned; None when it failed (already listed in errors)."""
        return self.jmx.values.get(key)

    def single(self, key: str) -> Mapping[str, Any] | None:
        """The attributes of an exact read's one MBean."""
        mbeans = self.mbeans(key)
        if mbeans is None:
            return None
        return mbeans.get(_READS_BY_KEY[key].mbean)

    def bad_value(self, key: str, what: str, value: object) -> None:
        self.errors.append(
            ReadError("jmx", _READS_BY_KEY[key].fills, f"{what}: unexpected value {value!r}")
        )

    def count(self, key: str) -> int | None:
        attributes = self.single(key)
        if attributes is None:
            return None
        value = as_count(attributes.get("Value"))
        if value is None:
            self.bad_value(key, f"{_READS_BY_KEY[key].mbean} Value", attributes.get("Value"))
        return value

    def percentile_99(self, key: str) -> float | None:
        attributes = self.single(key)
        if attributes is None:
            return None
        value = as_rate(attributes.get("99thPercentile"))
        if value is None:
            self.bad_value(
                key, f"{_READS_BY_KEY[key].mbean} 99thPercentile", attributes.get("99thPercentile")
            )
        return value

    def fraction(self, key: str) -> float | None:
        attributes = self.single(key)
        if attributes is None:
            return None
        value = as_rate(attributes.get("Value"))
        if value is None:
            self.bad_value(key, f"{_READS_BY_KEY[key].mbean} Value", attributes.get("Value"))
        return clamp01(value)

    def meter(
        self,
        key: str,
        counter_id: str,
        name: str,
        attributes: Mapping[str, Any],
        counter_scale: float = 1.0,
    ) -> float | None:
        """The rate of one meter MBean; remembers its counter for the next interval."""
        count = as_rate(attributes.get("Count"))
        one_minute = as_rate(attributes.get("OneMinuteRate"))
        if count is None and one_minute is None:
            self.bad_value(key, f"{name} Count/OneMinuteRate", dict(attributes))
            return None
        if count is not None:
            self.counters[counter_id] = count
        previous = self.previous.counters.get(counter_id) if self.previous else None
        return counter_rate(count, one_minute, previous, self.elapsed_s, counter_scale)

    def broker_meter(self, key: str, counter_scale: float = 1.0) -> float | None:
        """The broker-wide meter of an exact read, or of a pattern read (the MBean whose
        only key properties are type and name)."""
        mbeans = self.mbeans(key)
        if mbeans is None:
            return None
        for name, attributes in mbeans.items():
            if set(object_name_properties(name)) <= {"type", "name"}:
                return self.meter(key, key, name, attributes, counter_scale)
        self.errors.append(
            ReadError(
                "jmx", _READS_BY_KEY[key].fills, "the broker-wide MBean was not in the answer"
            )
        )
        return None

    def topic_meters(self, key: str) -> dict[str, float | None]:
        """Topic -> rate, from the topic= MBeans of a BrokerTopicMetrics pattern read."""
        rates: dict[str, float | None] = {}
        for name, attributes in (self.mbeans(key) or {}).items():
            topic = object_name_properties(name).get("topic")
            if topic:
                rates[topic] = self.meter(key, f"{key}|{topic}", name, attributes)
        return rates

    def partition_values(self, key: str) -> dict[tuple[str, int], int | None]:
        """(topic, partition) -> Value, from a per-partition pattern read."""
        values: dict[tuple[str, int], int | None] = {}
        for name, attributes in (self.mbeans(key) or {}).items():
            properties = object_name_properties(name)
            # A replica being moved between log dirs has a second, "-future" log: it is
            # not another replica, and its size is not yet the partition's.
            if properties.get("is-future") == "true":
                continue
            topic, partition = (
                properties.get("topic"),
                as_count(_int_or_none(properties.get("partition"))),
            )
            if not topic or partition is None:
                continue
            value = as_count(attributes.get("Value"))
            if value is None:
                self.bad_value(key, f"{name} Value", attributes.get("Value"))
            values[(topic, partition)] = value
        return values


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def free_percent(free: int | None, used: int | None) -> float | None:
    """Free space as a percentage of free + used (what the disk-free alert reads)."""
    free_n, used_n = as_count(free), as_count(used)
    if free_n is None or used_n is None or free_n + used_n == 0:
        return None
    return 100.0 * free_n / (free_n + used_n)


def build_record(
    identity: BrokerIdentity,
    jmx: JmxResult,
    host: HostReading,
    *,
    previous: Baseline | None,
    at_s: float,
    timestamp_ms: int,
    interval_s: float,
) -> BuiltRecord:
    """The record of one collect.

    `at_s` is the monotonic time of this collect's reads, `timestamp_ms` the wall clock at
    its end, `interval_s` the configured interval (the record's interval_s is the measured
    time since the previous collect when there is one).
    """
    build = _Builder(jmx, previous, at_s)

    broker = {
        "under_replicated_partitions": build.count("under_replicated_partitions"),
        "offline_partitions_count": build.count("offline_partitions_count"),
        "active_controller_count": build.count("active_controller_count"),
        "isr_shrinks_per_s": build.broker_meter("isr_shrinks"),
        "isr_expands_per_s": build.broker_meter("isr_expands"),
        "bytes_in_per_s": build.broker_meter("bytes_in"),
        "bytes_out_per_s": build.broker_meter("bytes_out"),
        "replication_bytes_in_per_s": build.broker_meter("replication_bytes_in"),
        "replication_bytes_out_per_s": build.broker_meter("replication_bytes_out"),
        "messages_in_per_s": build.broker_meter("messages_in"),
        "request_handler_avg_idle_percent": None,  # below
        "network_processor_avg_idle_percent": build.fraction("network_processor_idle"),
        "leader_count": build.count("leader_count"),
        "partition_count": build.count("partition_count"),
        "log_size_bytes": None,
        "log_cleaner_time_since_last_run_ms": build.count("log_cleaner_time_since_last_run"),
        "under_min_isr_partition_count": build.count("under_min_isr_partition_count"),
        "offline_log_directory_count": build.count("offline_log_directory_count"),
        "produce_total_time_ms_p99": build.percentile_99("produce_time_p99"),
        "fetch_consumer_total_time_ms_p99": build.percentile_99("fetch_consumer_time_p99"),
    }
    # Its Count is idle nanoseconds per handler thread; its one-minute rate is already a
    # fraction (the meter's rate unit is nanoseconds).
    broker["request_handler_avg_idle_percent"] = clamp01(
        build.broker_meter("request_handler_idle", counter_scale=1 / _NANOSECONDS_PER_SECOND)
    )

    topic_reads = {
        "bytes_in_per_s": "bytes_in",
        "bytes_out_per_s": "bytes_out",
        "messages_in_per_s": "messages_in",
    }
    topic_rates = {name: build.topic_meters(key) for name, key in topic_reads.items()}
    topic_names = sorted({topic for rates in topic_rates.values() for topic in rates})

    def topic_rate(name: str, topic: str) -> float | None:
        # Kafka registers a topic's meter on its first event: when the read worked and the
        # topic has no such MBean, nothing happened (0.0); when the read failed, unknown.
        if build.mbeans(topic_reads[name]) is None:
            return None
        return topic_rates[name].get(topic, 0.0)

    topics = [
        {"topic": topic, **{name: topic_rate(name, topic) for name in topic_reads}}
        for topic in topic_names
    ]

    sizes = build.partition_values("log_size")
    end_offsets = build.partition_values("log_end_offset")
    replica_counts = build.partition_values("replicas_count")
    leadership_known = build.mbeans("replicas_count") is not None
    partitions = []
    for topic, partition in sorted({*sizes, *end_offsets, *replica_counts}):
        replicas = replica_counts.get((topic, partition))
        partitions.append(
            {
                "topic": topic,
                "partition": partition,
                "leader": (replicas > 0) if leadership_known and replicas is not None else None,
                "size_bytes": sizes.get((topic, partition)),
                "log_end_offset": end_offsets.get((topic, partition)),
            }
        )
    if build.mbeans("log_size") is not None and all(v is not None for v in sizes.values()):
        broker["log_size_bytes"] = sum(v for v in sizes.values() if v is not None)

    previous_cpu = (previous.cpu_busy_s, previous.cpu_total_s) if previous else (None, None)
    host_values = {
        "cpu_percent": cpu_percent(host.cpu_busy_s, host.cpu_total_s, *previous_cpu),
        "memory_used_bytes": as_count(host.memory_used_bytes),
        "memory_total_bytes": as_count(host.memory_total_bytes),
        "log_dir_used_bytes": as_count(host.log_dir_used_bytes),
        "log_dir_free_bytes": as_count(host.log_dir_free_bytes),
        "log_dir_free_percent": free_percent(host.log_dir_free_bytes, host.log_dir_used_bytes),
        "network_bytes_sent": as_count(host.network_bytes_sent),
        "network_bytes_recv": as_count(host.network_bytes_recv),
    }
    errors = (*build.errors, *host.errors)

    measured_interval = build.elapsed_s if build.elapsed_s and build.elapsed_s > 0 else interval_s
    record: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "cluster": identity.cluster,
        "broker_id": identity.broker_id,
        "rack": identity.rack,
        "timestamp_ms": timestamp_ms,
        "interval_s": measured_interval,
        "agent_version": identity.agent_version,
        "broker": broker,
        "topics": topics,
        "partitions": partitions,
        "host": host_values,
        "errors": [error.to_json() for error in errors],
    }
    baseline = Baseline(
        at_s=at_s,
        # Only this collect's counters: a counter a failed read did not refresh would pair
        # an old count with this collect's time, and deleted topics' counters would pile up.
        counters=build.counters,
        cpu_busy_s=host.cpu_busy_s,
        cpu_total_s=host.cpu_total_s,
    )
    return BuiltRecord(record=record, errors=errors, baseline=baseline)
